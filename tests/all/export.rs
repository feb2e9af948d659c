//! Export and import end to end: a workspace exported by the real `cairn`
//! binary and imported into another reads back the same (transcripts,
//! entries, compactions, search results); a bundle exported under a real
//! wasm policy that refuses, references and redacts objects holds nothing
//! it refused (over HTTP); bad bundles and non-empty targets are refused
//! with the line and the reason, and write nothing.

use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};
use cairn::worlds::defaults::test_guests;
use cairn::{
    Cairn, CairnConfig, EntryFilter, EntryInput, EntryKind, Role, SearchRequest, SessionKind,
    SessionSpec, TurnInput,
};
use serde_json::{Value, json};

use crate::support::{Server, cairn_bin};

fn open(dir: &Path) -> Result<Cairn> {
    Ok(Cairn::open(CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        ..CairnConfig::default()
    })?)
}

fn cli(data_dir: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(cairn_bin())
        .envs(crate::support::backend_env(data_dir))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("RUST_LOG", "error")
        .output()?)
}

fn ok(out: &Output) -> Result<String> {
    ensure!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What a reader sees of a workspace, for comparing two of them.
fn contents(cairn: &Cairn, ws: &str, queries: &[&str]) -> Result<Value> {
    let mut sessions = Vec::new();
    for s in cairn.sessions(ws, None, None)? {
        let turns = cairn.transcript(ws, &s.id, 0, None, None)?;
        let view = cairn.compaction_view(ws, &s.id, None)?;
        let mut summaries = Vec::new();
        for id in view.summary_ids() {
            let e = cairn.memory_expand(ws, id, None)?;
            summaries.push(json!([
                e.node.id,
                e.node.text,
                e.node.from_seq,
                e.node.to_seq
            ]));
        }
        sessions.push(json!({
            "id": s.id, "work_context": s.work_context, "kind": s.kind, "parent": s.parent,
            "state": s.state, "next_seq": s.next_seq,
            "turns": turns.iter().map(|t| json!([t.seq, t.role, t.content, t.timestamp, t.tool_call_id])).collect::<Vec<_>>(),
            "compaction": json!([view.items, view.covered_to]), "summaries": summaries,
        }));
    }
    let filter = EntryFilter {
        all: true,
        ..EntryFilter::default()
    };
    let entries: Vec<Value> = cairn
        .entries(ws, &filter, None)?
        .iter()
        .map(|v| {
            let e = &v.entry;
            json!([
                e.id,
                e.kind,
                e.content,
                e.detail.as_deref(),
                e.subject.as_deref(),
                e.work_context.as_str(),
                e.provenance,
                e.replaces,
                e.status,
                e.timestamp,
                v.status
            ])
        })
        .collect();
    let mut searches = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        // A caller per search: the rate limit is per caller.
        let request = SearchRequest {
            caller: Some(format!("export-test-{ws}-{i}")),
            ..SearchRequest::new(q)
        };
        let found = cairn.memory_search(ws, &request)?;
        searches.push(json!(
            found
                .items
                .iter()
                .map(|i| json!([i.id, i.snippet]))
                .collect::<Vec<_>>()
        ));
    }
    Ok(json!({"sessions": sessions, "entries": entries, "search": searches}))
}

/// The whole workspace through `cairn export` and `cairn import` (the real
/// binary, the default policy): the copy reads back the same.
#[test]
fn export_then_import_reads_back_the_same_workspace() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let queries = ["quokka launch date", "retry queue", "helper research notes"];
    {
        let cairn = open(&data)?;
        let mut turns = Vec::new();
        for i in 0..12 {
            turns.push(
                TurnInput::new(
                    "main",
                    if i % 2 == 0 {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    &format!("Turn {i}: the quokka launch plan, step {i}, and the retry queue."),
                )
                .in_context("launch"),
            );
        }
        cairn.ingest("acme", &turns)?;
        cairn.bootstrap(
            "acme",
            &SessionSpec {
                id: "helper".into(),
                work_context: Some("launch".into()),
                kind: SessionKind::Subagent,
                parent: Some("main".into()),
            },
        )?;
        cairn.ingest(
            "acme",
            &[
                TurnInput::new("helper", Role::User, "Helper research notes on quokkas."),
                TurnInput::new(
                    "helper",
                    Role::Tool,
                    "search result: quokkas live on Rottnest.",
                )
                .with_tool_call_id("call-1"),
            ],
        )?;
        cairn.session_end("acme", "helper")?;
        let first = cairn.append_entry(
            "acme",
            &EntryInput::new(EntryKind::Decision, "The quokka launch is on April 1.")
                .about("quokka-launch")
                .from_turns("main", 0, 1)
                .with_detail("Marketing asked for it."),
        )?;
        cairn.append_entry(
            "acme",
            &EntryInput::new(EntryKind::Decision, "The quokka launch moves to April 8.")
                .about("quokka-launch")
                .from_turns("main", 2, 3)
                .replacing(&first.id),
        )?;
        cairn.append_entry(
            "acme",
            &EntryInput::new(EntryKind::Fact, "Retries go through the queue.").in_context("ops"),
        )?;
        let report = cairn.compact("acme", "main", Some(120))?;
        ensure!(report.changed, "the compaction made no summary: {report:?}");
        cairn.flush()?;
    }

    let bundle = dir.path().join("acme.jsonl");
    let bundle_arg = bundle.to_str().context("path")?;
    let out = ok(&cli(
        &data,
        &[
            "export",
            "--workspace",
            "acme",
            "--out",
            bundle_arg,
            "--json",
        ],
    )?)?;
    let report: Value = serde_json::from_str(&out)?;
    ensure!(report["left_out"]["turns"] == 0, "{report}");
    ensure!(report["compactions"] == 1, "{report}");
    let text = std::fs::read_to_string(&bundle)?;
    let header: Value = serde_json::from_str(text.lines().next().context("a header")?)?;
    ensure!(
        header["record"] == "header"
            && header["format"] == "cairn-bundle"
            && header["version"] == 1
            && header["workspace"] == "acme"
            && header["cairn_version"].is_string()
            && header["exported_at"].is_string(),
        "{header}"
    );
    ensure!(
        text.lines().count() == report["records"].as_u64().unwrap_or(0) as usize,
        "{report}"
    );
    ensure!(
        !dir.path().read_dir()?.flatten().any(|f| f
            .file_name()
            .to_string_lossy()
            .starts_with(".cairn-export-")),
        "a temporary file was left behind"
    );

    let out = ok(&cli(
        &data,
        &["import", "--workspace", "copy", bundle_arg, "--json"],
    )?)?;
    let imported: Value = serde_json::from_str(&out)?;
    ensure!(
        imported["sessions"] == 2 && imported["placeholders"] == 0,
        "{imported}"
    );

    // A second import into the same workspace is refused and changes nothing.
    let again = cli(&data, &["import", "--workspace", "copy", bundle_arg])?;
    ensure!(again.status.code() == Some(2), "{again:?}");
    let err = String::from_utf8_lossy(&again.stderr);
    ensure!(err.contains("is not empty"), "{err}");

    // One session alone, to stdout: its parent is not in the bundle, so the
    // link is cut, and the entries captured elsewhere stay out.
    let solo = cli(
        &data,
        &["export", "--workspace", "acme", "--session", "helper"],
    )?;
    let solo_text = ok(&solo)?;
    let records: Vec<Value> = solo_text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    ensure!(
        records
            .iter()
            .all(|r| r["session"] != "main" && r["id"] != "main"),
        "{solo_text}"
    );
    ensure!(
        records.iter().any(|r| r["record"] == "session"
            && r["id"] == "helper"
            && r["kind"] == "subagent"
            && r.get("parent").is_none()),
        "{solo_text}"
    );
    ensure!(
        String::from_utf8_lossy(&solo.stderr).contains("exported"),
        "{solo:?}"
    );

    // Both read in one process, so both searches see the same index.
    let cairn = open(&data)?;
    crate::support::wait_indexed(&cairn)?;
    let before = contents(&cairn, "acme", &queries)?;
    let after = contents(&cairn, "copy", &queries)?;
    ensure!(
        before["search"].as_array().is_some_and(|s| s
            .iter()
            .all(|r| r.as_array().is_some_and(|r| !r.is_empty()))),
        "a search found nothing: {before:#}"
    );
    ensure!(
        before["sessions"].as_array().is_some_and(|s| s
            .iter()
            .any(|s| s["summaries"].as_array().is_some_and(|v| !v.is_empty()))),
        "no summary to compare: {before:#}"
    );
    ensure!(
        before == after,
        "the copy differs:\n{before:#}\n---\n{after:#}"
    );
    Ok(())
}

/// A bundle cut off, or with a bad line, is refused with the line and the
/// reason, and nothing is written.
#[test]
fn a_bad_bundle_is_refused_by_line_and_writes_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let good = {
        let cairn = open(&data)?;
        cairn.ingest(
            "acme",
            &[
                TurnInput::new("s1", Role::User, "We use sled for storage."),
                TurnInput::new("s1", Role::Assistant, "Noted: sled."),
            ],
        )?;
        let mut bundle = Vec::new();
        cairn.export("acme", &cairn::ExportRequest::default(), &mut bundle)?;
        String::from_utf8(bundle)?
    };
    let lines: Vec<&str> = good.lines().collect();
    let write = |name: &str, lines: &[&str]| -> Result<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, lines.join("\n") + "\n")?;
        Ok(path.to_str().context("path")?.to_owned())
    };
    let mut broken = lines.clone();
    broken[2] = r#"{"record":"turn","session":"s1","seq":"zero"}"#;
    let mut unknown = lines.clone();
    let orphan = r#"{"record":"turn","session":"nobody","seq":0,"role":"user","content":"x","timestamp":"2026-01-01T00:00:00Z"}"#;
    unknown[3] = orphan;
    let cases = [
        (
            write("broken.jsonl", &broken)?,
            "bundle line 3: not a bundle record",
        ),
        (
            write("cut.jsonl", &lines[..lines.len() - 1])?,
            "without its end record",
        ),
        (
            write("orphan.jsonl", &unknown)?,
            "bundle line 4: turn of session \"nobody\"",
        ),
        (
            write("headless.jsonl", &lines[1..])?,
            "bundle line 1: the first line must be the header record",
        ),
    ];
    for (path, expected) in &cases {
        let out = cli(&data, &["import", "--workspace", "target", path])?;
        ensure!(out.status.code() == Some(2), "{path}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(err.contains(expected), "{path}: {err}");
    }
    let cairn = open(&data)?;
    ensure!(
        !cairn.workspaces()?.iter().any(|w| w == "target"),
        "a refused import wrote something"
    );
    Ok(())
}

/// With a wasm policy installed that refuses one session's objects,
/// references one work context's and redacts personal ones for `export`,
/// the bundle `GET …/export` serves holds nothing it refused, the
/// references hold no text, the decisions are in the decision log, and
/// `POST …/import` reads the bundle into another workspace where search
/// finds what was exported and nothing that was not.
#[test]
fn the_bundle_holds_nothing_the_policy_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let plugin = test_guests::TEST_EXPORT;
    let out = ok(&cli(
        &data,
        &[
            "plugins",
            "install",
            "memory-policy",
            plugin,
            "--name",
            "test-export",
        ],
    )?)?;
    ensure!(out.contains("installed test-export"), "{out}");
    let server = Server::start(&data)?;
    let turns = json!({"turns": [
        {"session": "s1", "work_context": "work", "role": "user", "content": "The wombat migration starts Monday."},
        {"session": "s1", "work_context": "work", "role": "user", "content": "Mail the wombat plan to bob.smith@example.com please."},
        {"session": "private-1", "work_context": "work", "role": "user", "content": "The wombat launch code is TANGERINE."},
        {"session": "r1", "work_context": "refs", "role": "user", "content": "Reference wombat notes about ZEBRA crossings."},
    ]});
    let (s, body) = server.post("/v1/workspaces/acme/turns", &turns)?;
    ensure!(s == 200, "{body}");
    let entries = json!({"entries": [
        {"kind": "fact", "content": "Wombat migration starts Monday.", "provenance": {"session": "s1", "from_seq": 0, "to_seq": 0}},
        {"kind": "fact", "content": "The wombat launch code is TANGERINE.", "provenance": {"session": "private-1", "from_seq": 0, "to_seq": 0}},
    ]});
    let (s, body) = server.post("/v1/workspaces/acme/entries", &entries)?;
    ensure!(s == 200, "{body}");

    let mut resp = server
        .agent
        .get(format!("{}/v1/workspaces/acme/export", server.base))
        .call()?;
    ensure!(resp.status().as_u16() == 200);
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    ensure!(
        content_type.starts_with("application/x-ndjson"),
        "{content_type}"
    );
    let left_out: usize = resp
        .headers()
        .get("x-cairn-left-out")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .context("x-cairn-left-out")?;
    // The private session, its turn and the entry from it (and whatever
    // capture took from it meanwhile).
    ensure!(left_out >= 3, "left out {left_out}");
    let bundle = resp.body_mut().read_to_string()?;
    for refused in ["TANGERINE", "private-1", "bob.smith@example.com", "ZEBRA"] {
        ensure!(
            !bundle.contains(refused),
            "{refused:?} in the bundle:\n{bundle}"
        );
    }
    let records: Vec<Value> = bundle
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let turn = |session: &str, seq: u64| {
        records
            .iter()
            .find(|r| r["record"] == "turn" && r["session"] == session && r["seq"] == seq)
            .cloned()
            .unwrap_or(Value::Null)
    };
    ensure!(turn("s1", 0)["content"] == "The wombat migration starts Monday.");
    let redacted = turn("s1", 1);
    ensure!(redacted["fidelity"] == "redacted", "{redacted}");
    ensure!(
        redacted["content"]
            .as_str()
            .is_some_and(|c| c.contains("wombat plan")),
        "{redacted}"
    );
    let reference = turn("r1", 0);
    ensure!(
        reference["fidelity"] == "reference-only" && reference.get("content").is_none(),
        "{reference}"
    );

    // The export's decisions are in the decision log, by the installed plugin.
    let (s, log) = server.get("/v1/plugins/log?plugin=test-export&limit=100")?;
    ensure!(s == 200, "{log}");
    let logged = log.as_array().map_or(0, Vec::len);
    ensure!(logged > 0, "no decision of the test policy logged: {log}");

    // Into another workspace over HTTP.
    let mut resp = server
        .agent
        .post(format!("{}/v1/workspaces/copy/import", server.base))
        .header("content-type", "application/x-ndjson")
        .send(bundle.as_bytes())?;
    let status = resp.status().as_u16();
    let report: Value = resp.body_mut().read_json()?;
    ensure!(status == 200, "{report}");
    ensure!(
        report["sessions"] == 2 && report["entries"].as_u64() >= Some(1),
        "{report}"
    );
    server.wait_indexed()?;
    let (s, found) = server.post(
        "/v1/workspaces/copy/search",
        &json!({"query": "wombat migration Monday", "mode": "bm25"}),
    )?;
    ensure!(s == 200, "{found}");
    let ids: Vec<&str> = found["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter_map(|i| i["id"].as_str())
        .collect();
    ensure!(ids.iter().any(|i| i.starts_with("session:s1:0")), "{found}");
    let (s, found) = server.post(
        "/v1/workspaces/copy/search",
        &json!({"query": "TANGERINE launch code", "mode": "bm25"}),
    )?;
    ensure!(s == 200, "{found}");
    ensure!(
        !found.to_string().contains("TANGERINE"),
        "the refused turn reached the copy: {found}"
    );
    let (s, transcript) = server.get("/v1/workspaces/copy/sessions/s1/transcript")?;
    ensure!(s == 200, "{transcript}");
    ensure!(
        !transcript.to_string().contains("bob.smith@example.com"),
        "{transcript}"
    );

    // A second import is a conflict; a bad bundle names its line.
    let mut resp = server
        .agent
        .post(format!("{}/v1/workspaces/copy/import", server.base))
        .header("content-type", "application/x-ndjson")
        .send(bundle.as_bytes())?;
    ensure!(resp.status().as_u16() == 409);
    let body: Value = resp.body_mut().read_json()?;
    ensure!(body["code"] == "workspace_not_empty", "{body}");
    let mut resp = server
        .agent
        .post(format!("{}/v1/workspaces/other/import", server.base))
        .header("content-type", "application/x-ndjson")
        .send(&b"{\"record\":\"end\",\"records\":0}\n"[..])?;
    ensure!(resp.status().as_u16() == 400);
    let body: Value = resp.body_mut().read_json()?;
    ensure!(
        body["code"] == "invalid_bundle"
            && body["message"]
                .as_str()
                .is_some_and(|m| m.contains("line 1")),
        "{body}"
    );
    Ok(())
}

/// The default policy leaves a secret-bearing turn out of an export; the
/// import fills its place with a placeholder, so the turns after it and an
/// entry's provenance keep their sequence numbers.
#[test]
fn a_turn_left_out_keeps_its_place_in_the_copy() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.ingest(
        "acme",
        &[
            TurnInput::new("s1", Role::User, "Deploy the billing service on Friday."),
            TurnInput::new(
                "s1",
                Role::User,
                "The deploy key is sk-abcdefghijklmnopqrstuvwxyz123456 for billing.",
            ),
            TurnInput::new("s1", Role::Assistant, "Friday it is for billing."),
        ],
    )?;
    let entry = cairn.append_entry(
        "acme",
        &EntryInput::new(EntryKind::Decision, "Billing deploys on Friday.").from_turns("s1", 0, 2),
    )?;
    let mut bundle = Vec::new();
    let report = cairn.export("acme", &cairn::ExportRequest::default(), &mut bundle)?;
    ensure!(report.left_out.turns == 1, "{report:?}");
    ensure!(report.decisions > 0, "{report:?}");
    let text = String::from_utf8(bundle)?;
    ensure!(!text.contains("sk-abcdefghij"), "{text}");

    let imported = cairn.import("copy", &mut text.as_bytes())?;
    ensure!(
        imported.placeholders == 1 && imported.turns == 3,
        "{imported:?}"
    );
    let turns = cairn.transcript("copy", "s1", 0, None, None)?;
    ensure!(
        turns.iter().map(|t| t.seq).collect::<Vec<_>>() == [0, 1, 2],
        "{turns:?}"
    );
    ensure!(
        turns[1].content.contains("left out of the export")
            && turns[2].content == "Friday it is for billing.",
        "{turns:?}"
    );
    let copied = cairn.entry("copy", &entry.id, None)?;
    ensure!(
        copied.entry.provenance == entry.provenance,
        "{copied:?} vs {entry:?}"
    );
    Ok(())
}

/// The export is a read: a read-scoped token may call it (and the OpenAPI
/// description says so); the import writes: the same token is refused, a
/// write token is not. Both routes are described.
#[test]
fn a_read_token_exports_and_only_a_write_token_imports() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let token = |scope: &str, ws: &str| -> Result<String> {
        let out = ok(&cli(
            &data,
            &["tokens", "create", "--workspace", ws, "--scope", scope],
        )?)?;
        Ok(out.trim().to_owned())
    };
    let read = token("read", "acme")?;
    let write = token("write", "copy")?;
    let writer_acme = token("write", "acme")?;
    let server = Server::start(&data)?;
    let (s, spec) = server.get("/openapi.json")?;
    ensure!(s == 200);
    ensure!(
        spec["paths"]["/v1/workspaces/{workspace}/export"]["get"].is_object()
            && spec["paths"]["/v1/workspaces/{workspace}/import"]["post"].is_object(),
        "export and import are not described"
    );
    let mut resp = server
        .agent
        .post(format!("{}/v1/workspaces/acme/turns", server.base))
        .header("authorization", format!("Bearer {writer_acme}"))
        .send_json(
            json!({"turns": [{"session": "s1", "role": "user", "content": "Hello export."}]}),
        )?;
    ensure!(
        resp.status().as_u16() == 200,
        "{}",
        resp.body_mut().read_to_string()?
    );

    let mut resp = server
        .agent
        .get(format!("{}/v1/workspaces/acme/export", server.base))
        .header("authorization", format!("Bearer {read}"))
        .call()?;
    ensure!(resp.status().as_u16() == 200);
    let bundle = resp.body_mut().read_to_string()?;
    ensure!(bundle.contains("Hello export."), "{bundle}");

    let post = |ws: &str, token: &str| -> Result<u16> {
        let resp = server
            .agent
            .post(format!("{}/v1/workspaces/{ws}/import", server.base))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/x-ndjson")
            .send(bundle.as_bytes())?;
        Ok(resp.status().as_u16())
    };
    ensure!(post("acme", &read)? == 403, "a read token imported");
    ensure!(
        post("copy", &write)? == 200,
        "a write token could not import"
    );
    Ok(())
}
