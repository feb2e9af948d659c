//! Maintenance end to end: the nightly trigger runs it after its capture;
//! archive, search with `include_archived`, restore and undo through the
//! facade; `cairn maintain` as a user runs it (dry run writes nothing); the
//! HTTP route behind the workspace guard, in the served OpenAPI.

use std::process::{Command, Output};
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use cairn::maintain::{Action, ArchivedItem, MaintainOptions, MaintainTrigger, Rule};
use cairn::{
    ActorConfig, Cairn, CairnConfig, CaptureReport, EntryFilter, EntryInput, EntryKind,
    EntryStatus, ManualClock, Role, SearchRequest, Trigger, TurnInput,
};
use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};

use crate::support::{Server, admin_and_acme, cairn_bin};

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0)
        .single()
        .unwrap_or_default()
}

/// A `Cairn` on a temp dir with a manual clock and no background ticker.
fn open(
    dir: &std::path::Path,
    edit: impl FnOnce(&mut CairnConfig),
) -> Result<(Cairn, ManualClock)> {
    let clock = ManualClock::new(start());
    let mut config = CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        actors: ActorConfig {
            tick_interval_secs: 0,
            ..ActorConfig::default()
        },
        ..CairnConfig::default()
    };
    edit(&mut config);
    let cairn = Cairn::open_with_clock(config, Arc::new(clock.clone()))?;
    Ok((cairn, clock))
}

fn question(id: &str, text: &str) -> EntryInput {
    let mut e = EntryInput::new(EntryKind::OpenQuestion, text).in_context("vendor");
    e.id = Some(id.to_owned());
    e
}

fn dirty(cairn: &Cairn, session: &str) -> Result<()> {
    let turns: Vec<TurnInput> = [
        "Vendor A sent the revised quote.",
        "Legal is reading the contract.",
        "We still wait for the security review.",
    ]
    .iter()
    .map(|t| TurnInput::new(session, Role::User, t).in_context("vendor"))
    .collect();
    cairn.ingest("acme", &turns)?;
    Ok(())
}

#[test]
fn the_nightly_trigger_runs_maintenance_after_its_capture() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path(), |_| {})?;
    cairn.append_entry("acme", &question("q1", "Which vendor signs by March 20?"))?;
    cairn.tick()?; // the first tick only notes the time
    clock.advance(Duration::days(15));
    dirty(&cairn, "s1")?;
    let captures: Vec<CaptureReport> = cairn.tick()?;
    ensure!(
        captures
            .iter()
            .any(|c| c.trigger == Trigger::NightlySweep && c.work_context == "vendor"),
        "{captures:?}"
    );
    let runs = cairn.maintenance_runs("acme")?;
    ensure!(runs.len() == 1, "{runs:?}");
    let run = &runs[0];
    ensure!(run.trigger == MaintainTrigger::Nightly && run.at == clock_now(&clock));
    ensure!(
        run.changes
            .iter()
            .any(|c| c.rule == Rule::PromoteObligation && c.action.item() == "entry:q1"),
        "{run:?}"
    );
    // What the capture wrote was in the log when maintenance read it: the
    // run is newer than every captured entry, and nothing it captured was
    // decayed or archived (fresh material).
    let live = cairn.entries("acme", &EntryFilter::default(), None)?;
    ensure!(live.iter().any(|v| v.entry.kind == EntryKind::Obligation));
    ensure!(
        live.iter()
            .any(|v| v.entry.kind == EntryKind::SessionSummaryRef)
    );

    // A second tick the same night does not run again.
    clock.advance(Duration::minutes(10));
    cairn.tick()?;
    ensure!(cairn.maintenance_runs("acme")?.len() == 1);
    Ok(())
}

fn clock_now(clock: &ManualClock) -> DateTime<Utc> {
    use cairn::Clock;
    clock.now()
}

#[test]
fn nightly_maintenance_can_be_turned_off() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path(), |c| c.memory.maintenance.nightly = false)?;
    cairn.append_entry("acme", &question("q1", "Which vendor signs by March 20?"))?;
    cairn.tick()?;
    clock.advance(Duration::days(15));
    cairn.tick()?;
    ensure!(cairn.maintenance_runs("acme")?.is_empty());
    Ok(())
}

#[test]
fn archived_material_is_searchable_on_request_restorable_and_undoable() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path(), |_| {})?;
    cairn.ingest(
        "acme",
        &[
            TurnInput::new("s-old", Role::User, "The legacy importer migration starts.")
                .in_context("legacy"),
        ],
    )?;
    let mut task = EntryInput::new(EntryKind::Task, "Finish the legacy importer migration")
        .in_context("legacy")
        .from_turns("s-old", 0, 0);
    task.id = Some("t-old".into());
    cairn.append_entry("acme", &task)?;
    clock.advance(Duration::days(91));
    let report = cairn.maintain("acme", MaintainOptions::default())?;
    let rules: Vec<Rule> = report.changes.iter().map(|c| c.rule).collect();
    ensure!(
        rules == [Rule::ArchiveSession, Rule::ArchiveEntry],
        "{report:?}"
    );
    ensure!(
        cairn
            .entries("acme", &EntryFilter::default(), None)?
            .is_empty()
    );
    cairn.catch_up_search()?;
    let search = |include_archived: bool, caller: &str| -> Result<Vec<String>> {
        let request = SearchRequest {
            include_archived,
            caller: Some(caller.to_owned()),
            ..SearchRequest::new("legacy importer migration")
        };
        let r = cairn.memory_search("acme", &request)?;
        ensure!(
            r.items.iter().all(|i| i.archived == include_archived),
            "{r:?}"
        );
        let mut ids: Vec<String> = r.items.into_iter().map(|i| i.id).collect();
        ids.sort();
        Ok(ids)
    };
    ensure!(search(false, "a")?.is_empty());
    ensure!(search(true, "b")? == ["session:s-old:0-0", "t-old"]);

    let restored = cairn.restore("acme", &ArchivedItem::Entry("t-old".into()))?;
    let run = restored.run.clone().context("restore writes a run")?;
    ensure!(cairn.entry("acme", "t-old", None)?.is_live());
    ensure!(search(false, "c")? == ["t-old"]);
    cairn.undo_maintenance("acme", &run)?;
    ensure!(matches!(
        cairn.entry("acme", "t-old", None)?.status,
        EntryStatus::Archived { .. }
    ));
    let err = cairn
        .restore("acme", &ArchivedItem::Session("nope".into()))
        .err()
        .context("not archived")?;
    ensure!(err.code() == "not_archived", "{err}");
    Ok(())
}

#[test]
fn promotions_undo_back_to_the_original_entries() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path(), |_| {})?;
    cairn.append_entry("acme", &question("q1", "Which vendor signs by March 20?"))?;
    clock.advance(Duration::days(14));
    let report = cairn.maintain("acme", MaintainOptions::default())?;
    let Some(Action::Promote { into, .. }) = report.changes.first().map(|c| c.action.clone())
    else {
        anyhow::bail!("{report:?}")
    };
    let history = cairn.history("acme", "q1", None)?;
    ensure!(history.len() == 2 && history[1].entry.id == into);
    cairn.undo_maintenance("acme", report.run.as_deref().context("run")?)?;
    ensure!(cairn.entry("acme", "q1", None)?.is_live());
    ensure!(cairn.entry("acme", &into, None).is_err());
    let tombstones = cairn.tombstones("acme")?;
    ensure!(
        tombstones.len() == 1 && tombstones[0].reason.contains("undo of maintenance run-1"),
        "{tombstones:?}"
    );
    Ok(())
}

fn run_cli(data: &std::path::Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(cairn_bin())
        .envs(crate::support::backend_env(data))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()?)
}

fn ok(out: &Output) -> Result<String> {
    ensure!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn cli_maintain_dry_run_writes_nothing_then_runs_restores_and_undoes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    {
        // Material from 100 days ago, written with the real clock's past.
        let cairn = Cairn::open(CairnConfig {
            data_dir: data.clone(),
            storage: crate::support::storage(&data),
            ..CairnConfig::default()
        })?;
        let old = Utc::now() - Duration::days(100);
        cairn.ingest(
            "default",
            &[
                TurnInput::new("s-old", Role::User, "The legacy importer migration starts.")
                    .in_context("legacy")
                    .at(old),
            ],
        )?;
        let mut task = EntryInput::new(EntryKind::Task, "Finish the legacy importer migration")
            .in_context("legacy");
        task.id = Some("t-old".into());
        task.timestamp = Some(old);
        let mut update = EntryInput::new(EntryKind::CrossConversationUpdate, "Billing changed");
        update.id = Some("u-old".into());
        update.timestamp = Some(old);
        cairn.append_entries("default", &[task, update])?;
    }
    let log = |data: &std::path::Path| -> Result<String> {
        ok(&run_cli(data, &["log", "--all", "--json"])?)
    };
    let before = log(&data)?;
    let dry = ok(&run_cli(&data, &["maintain", "--dry-run"])?)?;
    ensure!(
        dry.contains("dry run") && dry.contains("3 change(s) would be made"),
        "{dry}"
    );
    ensure!(
        dry.contains("archive_session") && dry.contains("decay"),
        "{dry}"
    );
    ensure!(log(&data)? == before, "the dry run changed the log");
    let runs = ok(&run_cli(&data, &["maintain", "--runs"])?)?;
    ensure!(runs.contains("no maintenance runs"), "{runs}");

    let real = ok(&run_cli(&data, &["maintain"])?)?;
    ensure!(
        real.contains("run-1") && real.contains("3 change(s)"),
        "{real}"
    );
    let json: Value =
        serde_json::from_slice(&run_cli(&data, &["maintain", "--runs", "--json"])?.stdout)?;
    ensure!(
        json[0]["changes"].as_array().map(Vec::len) == Some(3),
        "{json}"
    );
    ensure!(json[0]["changes"][0]["rule"] == "decay", "{json}");
    let hidden = ok(&run_cli(
        &data,
        &["search", "legacy importer", "--mode", "bm25"],
    )?)?;
    ensure!(!hidden.contains("t-old"), "{hidden}");
    let shown = ok(&run_cli(
        &data,
        &[
            "search",
            "legacy importer",
            "--mode",
            "bm25",
            "--include-archived",
        ],
    )?)?;
    ensure!(
        shown.contains("t-old") && shown.contains("[archived]"),
        "{shown}"
    );

    let restored = ok(&run_cli(&data, &["maintain", "--restore", "t-old"])?)?;
    ensure!(
        restored.contains("run-2") && restored.contains("restore"),
        "{restored}"
    );
    let undone = ok(&run_cli(&data, &["maintain", "--undo", "run-2"])?)?;
    ensure!(undone.starts_with("undone: run-2"), "{undone}");
    let again = run_cli(&data, &["maintain", "--undo", "run-2"])?;
    ensure!(again.status.code() == Some(2), "{again:?}");
    ensure!(
        String::from_utf8_lossy(&again.stderr).contains("already undone"),
        "{again:?}"
    );
    Ok(())
}

#[test]
fn http_maintain_is_guarded_and_described() -> Result<()> {
    const ACME: &str = "acme-token-0123456789abcdef";
    let dir = tempfile::tempdir()?;
    let server = Server::start_configured(
        dir.path(),
        &admin_and_acme("admin-token-0123456789abcdef", ACME),
    )?;
    let host = server.base.trim_start_matches("http://").to_owned();
    let auth = format!("Bearer {ACME}");
    let headers = [("host", host.as_str()), ("authorization", auth.as_str())];
    let turn = r#"{"turns":[{"session":"s1","role":"user","content":"hello"}]}"#;
    let (s, body) = server.raw("POST", "/v1/workspaces/acme/turns", &headers, turn)?;
    ensure!(s == 200, "{body}");
    let (s, body) = server.raw(
        "POST",
        "/v1/workspaces/acme/maintain",
        &headers,
        r#"{"dry_run":true}"#,
    )?;
    ensure!(s == 200 && body["dry_run"] == true, "{s} {body}");
    ensure!(body["contradictions"].is_array(), "{body}");
    let (s, body) = server.raw("POST", "/v1/workspaces/acme/maintain", &headers, "{}")?;
    ensure!(s == 200 && body["run"].is_null(), "{s} {body}");
    let (s, body) = server.raw(
        "POST",
        "/v1/workspaces/acme/maintain",
        &headers,
        r#"{"dry":true}"#,
    )?;
    ensure!(s == 400, "{s} {body}");
    let (s, body) = server.raw("GET", "/v1/workspaces/acme/maintain/runs", &headers, "")?;
    ensure!(s == 200 && body == json!([]), "{s} {body}");
    let (s, body) = server.raw(
        "POST",
        "/v1/workspaces/acme/maintain/runs/run-7/undo",
        &headers,
        "",
    )?;
    ensure!(s == 404 && body["code"] == "run_not_found", "{s} {body}");
    let (s, body) = server.raw(
        "POST",
        "/v1/workspaces/acme/maintain/restore",
        &headers,
        r#"{"type":"entry","id":"nope"}"#,
    )?;
    ensure!(s == 409 && body["code"] == "not_archived", "{s} {body}");
    // Another workspace: forbidden; no token: unauthorized.
    let (s, _) = server.raw("POST", "/v1/workspaces/globex/maintain", &headers, "{}")?;
    ensure!(s == 403);
    let (s, _) = server.raw(
        "POST",
        "/v1/workspaces/acme/maintain",
        &[("host", host.as_str())],
        "{}",
    )?;
    ensure!(s == 401);
    let (_, spec) = server.get("/openapi.json")?;
    for path in [
        "/v1/workspaces/{workspace}/maintain",
        "/v1/workspaces/{workspace}/maintain/runs/{run}/undo",
        "/v1/workspaces/{workspace}/maintain/restore",
    ] {
        ensure!(spec["paths"][path].is_object(), "{path} not described");
    }
    ensure!(
        spec["components"]["schemas"]["MaintenanceReport"].is_object(),
        "no MaintenanceReport schema"
    );
    // The settle action and the attribute it names are described.
    let schemas = &spec["components"]["schemas"];
    ensure!(
        schemas["Attribute"]["enum"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "residence")),
        "no Attribute schema: {}",
        schemas["Attribute"]
    );
    ensure!(
        schemas["Action"].to_string().contains("\"settle\""),
        "no settle action: {}",
        schemas["Action"]
    );
    ensure!(
        schemas["Rule"].to_string().contains("\"settle\""),
        "no settle rule: {}",
        schemas["Rule"]
    );
    Ok(())
}

/// `cairn ingest` of two sessions a month apart in which Ana says where she
/// lives, then `cairn capture`: the facts are captured; `cairn maintain`
/// settles the older one (the newer replaces it, with the rule and its
/// evidence), `cairn brief` says what changed, and `cairn maintain --undo`
/// brings it back.
#[test]
fn cli_maintain_settles_a_fact_a_later_one_contradicts_and_undo_restores_it() -> Result<()> {
    use std::io::Write as _;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let (then, now) = (
        Utc::now() - Duration::days(40),
        Utc::now() - Duration::days(2),
    );
    let turn = |session: &str, seq: i64, at: DateTime<Utc>, role: &str, text: &str| {
        json!({
            "session": session,
            "work_context": "life",
            "role": role,
            "content": text,
            "timestamp": at + Duration::minutes(seq),
        })
        .to_string()
    };
    let lines = [
        turn(
            "s-march",
            0,
            then,
            "user",
            "Ana: I live in Porto with my partner.",
        ),
        turn("s-march", 1, then, "assistant", "Porto is lovely."),
        turn(
            "s-april",
            0,
            now,
            "user",
            "Ana: I moved to Lisbon last month.",
        ),
        turn(
            "s-april",
            1,
            now,
            "assistant",
            "Congratulations on the move!",
        ),
    ];
    let mut child = Command::new(cairn_bin())
        .envs(crate::support::backend_env(&data))
        .arg("--data-dir")
        .arg(&data)
        .args(["ingest", "-"])
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(format!("{}\n", lines.join("\n")).as_bytes())?;
    ok(&child.wait_with_output()?)?;
    ok(&run_cli(&data, &["capture"])?)?;
    let facts: Vec<Value> =
        serde_json::from_str(&ok(&run_cli(&data, &["log", "--kind", "fact", "--json"])?)?)?;
    let id_of = |word: &str| -> Result<String> {
        facts
            .iter()
            .find(|f| f["content"].as_str().is_some_and(|c| c.contains(word)))
            .and_then(|f| f["id"].as_str())
            .map(str::to_owned)
            .with_context(|| format!("no fact about {word}: {facts:?}"))
    };
    let (porto, lisbon) = (id_of("Porto")?, id_of("Lisbon")?);

    let dry = ok(&run_cli(&data, &["maintain", "--dry-run"])?)?;
    ensure!(
        dry.contains("1 change(s) would be made") && dry.contains("settle"),
        "{dry}"
    );
    ensure!(
        ok(&run_cli(&data, &["log", "--kind", "fact"])?)?.contains(&porto),
        "the dry run settled it"
    );
    let real = ok(&run_cli(&data, &["maintain"])?)?;
    ensure!(
        real.contains("run-1")
            && real.contains(&format!("settle             entry:{porto}"))
            && real.contains(&format!("replaced by the newer fact {lisbon}"))
            && real.contains("turn s-april:0")
            && real.contains("residence holds one value at a time"),
        "{real}"
    );
    let runs: Value =
        serde_json::from_slice(&run_cli(&data, &["maintain", "--runs", "--json"])?.stdout)?;
    let change = &runs[0]["changes"][0];
    ensure!(
        change["rule"] == "settle"
            && change["action"] == "settle"
            && change["entry"] == porto.as_str()
            && change["by"] == lisbon.as_str()
            && change["attribute"] == "residence"
            && change["restated"] == false,
        "{runs}"
    );
    let live = ok(&run_cli(&data, &["log"])?)?;
    ensure!(!live.contains(&porto) && live.contains(&lisbon), "{live}");
    let all = ok(&run_cli(&data, &["log", "--all"])?)?;
    ensure!(all.contains(&format!("(replaced by {lisbon})")), "{all}");
    let history = ok(&run_cli(&data, &["log", "history", &lisbon])?)?;
    ensure!(
        history.find(&porto) < history.find(&format!("{lisbon} [fact]")),
        "{history}"
    );
    let brief = ok(&run_cli(&data, &["brief"])?)?;
    ensure!(
        brief.contains("### Changed (last 14 days)")
            && brief.contains("- Ana: residence Porto → Lisbon (run-1, "),
        "{brief}"
    );

    let undone = ok(&run_cli(&data, &["maintain", "--undo", "run-1"])?)?;
    ensure!(undone.contains("undone: run-1"), "{undone}");
    let live = ok(&run_cli(&data, &["log"])?)?;
    ensure!(
        live.contains(&format!("{porto} [fact]"))
            && live
                .lines()
                .any(|l| l.starts_with(&porto) && l.contains("(live)")),
        "{live}"
    );
    ensure!(
        !ok(&run_cli(&data, &["brief"])?)?.contains("### Changed"),
        "the briefing still reports the undone change"
    );
    Ok(())
}
