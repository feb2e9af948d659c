//! Context assembly end to end: the three tiers (docs/DESIGN.md) through
//! the `Cairn` facade with the real WebAssembly memory policy, fidelity per
//! destination, and the block and its trace from the real binary (CLI and
//! HTTP).

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use cairn::{
    AssembleRequest, Cairn, CairnConfig, Destination, EntryInput, EntryKind, Fidelity, ItemSource,
    ManualClock, RetrievalMode, Role, Section, SubjectKind, TurnInput,
};
use chrono::{Duration, TimeZone, Utc};
use serde_json::json;

use crate::support::Server;

fn open(dir: &std::path::Path) -> Result<(Cairn, ManualClock)> {
    let clock = ManualClock::new(
        Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0)
            .single()
            .context("date")?,
    );
    let config = CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        ..CairnConfig::default()
    };
    Ok((
        Cairn::open_with_clock(config, Arc::new(clock.clone()))?,
        clock,
    ))
}

fn request(session: &str, budget: usize, destination: Destination) -> AssembleRequest {
    let mut r = AssembleRequest::new(session, budget);
    r.destination = destination;
    r.retrieval = RetrievalMode::Off;
    r
}

#[test]
fn three_tiers_with_the_real_policy() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path())?;
    cairn.add_subject("firm", "henderson", SubjectKind::Project, None)?;
    cairn.ingest(
        "firm",
        &[
            TurnInput::new("s-mon", Role::User, "Drafting the damages section.")
                .in_context("henderson"),
            TurnInput::new("s-synth", Role::User, "Patching Marbles into Plaits.")
                .in_context("synth"),
        ],
    )?;
    cairn.append_entries(
        "firm",
        &[
            EntryInput::new(EntryKind::WorkPhaseChange, "Phase: drafting")
                .from_turns("s-mon", 0, 0),
            EntryInput::new(
                EntryKind::Handoff,
                "Subsections 1-3 done; event study waits on data.",
            )
            .from_turns("s-mon", 0, 0),
            EntryInput::new(EntryKind::OpenQuestion, "Address Dura in the intro.")
                .from_turns("s-mon", 0, 0),
            EntryInput::new(EntryKind::Decision, "Evening patch: Marbles into Plaits.")
                .from_turns("s-synth", 0, 0),
            EntryInput::new(EntryKind::Fact, "The user prefers direct answers."),
        ],
    )?;
    clock.advance(Duration::hours(2));
    cairn.ingest(
        "firm",
        &[TurnInput::new("s-tue", Role::User, "let's continue").in_context("henderson")],
    )?;
    let block = cairn.assemble("firm", &request("s-tue", 1500, Destination::LocalModel))?;
    ensure!(block.tokens <= 1500);
    let fired: Vec<u8> = block
        .tiers
        .iter()
        .filter(|t| t.fired)
        .map(|t| t.tier)
        .collect();
    ensure!(fired == vec![1, 2, 3], "{:#?}", block.tiers);
    ensure!(block.activity.activity_type == "drafting" && block.activity.inherited);
    // Every memory item was decided by the wasm policy, stamped with its generation.
    ensure!(
        block.policy_generations.len() == 1,
        "{:?}",
        block.policy_generations
    );
    let generation = &block.policy_generations[0];
    for t in block
        .trace
        .iter()
        .filter(|t| !matches!(t.source, ItemSource::Directive { .. }))
    {
        let p = t.policy.as_ref().context("policy note")?;
        ensure!(
            &p.generation == generation && !p.reason_codes.is_empty(),
            "{t:?}"
        );
    }
    // Tier 2 shows another context; a main session may read it in full.
    let synth = block
        .items
        .iter()
        .find(|i| i.section == Section::RecentActivity)
        .context("tier 2 item")?;
    ensure!(synth.fidelity == Fidelity::Full, "{synth:?}");
    // Within 30 minutes of that session, tier 1 stays out.
    cairn.ingest(
        "firm",
        &[TurnInput::new("s-mon", Role::User, "one more thing").in_context("henderson")],
    )?;
    let same = cairn.assemble("firm", &request("s-mon", 1500, Destination::LocalModel))?;
    ensure!(!same.tiers[0].fired, "{:?}", same.tiers[0]);
    Ok(())
}

#[test]
fn fidelity_follows_the_destination() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, _clock) = open(dir.path())?;
    cairn.ingest(
        "acme",
        &[
            TurnInput::new(
                "s1",
                Role::User,
                "The deploy key is sk-abcdefghijklmnopqrstuvwx for now.",
            ),
            TurnInput::new(
                "s1",
                Role::User,
                "Send the invoice to ana@example.org please.",
            ),
            TurnInput::new("s1", Role::Assistant, "Will do."),
        ],
    )?;
    let local = cairn.assemble("acme", &request("s1", 800, Destination::LocalModel))?;
    let cloud = cairn.assemble("acme", &request("s1", 800, Destination::CloudModel))?;
    let fidelity = |block: &cairn::AssembledContext, seq: u64| {
        block
            .trace
            .iter()
            .find(|t| {
                t.source
                    == ItemSource::Turn {
                        session: "s1".into(),
                        seq,
                    }
            })
            .and_then(|t| t.policy.as_ref())
            .map(|p| p.fidelity)
    };
    // A credential: a reference locally, blocked for a cloud model.
    ensure!(fidelity(&local, 0) == Some(Fidelity::ReferenceOnly));
    ensure!(fidelity(&cloud, 0) == Some(Fidelity::Blocked));
    ensure!(!local.text.contains("sk-abcdef") && !cloud.text.contains("sk-abcdef"));
    ensure!(local.text.contains("withheld by policy"), "{}", local.text);
    let blocked = cloud
        .trace
        .iter()
        .find(|t| t.rule == "policy.blocked")
        .context("blocked in the trace")?;
    ensure!(
        !blocked.included && blocked.reason.contains("cloud_model"),
        "{blocked:?}"
    );
    ensure!(!cloud.items.iter().any(|i| i.source == blocked.source));
    // Personal data: full locally, redacted for a cloud model.
    ensure!(fidelity(&local, 1) == Some(Fidelity::Full));
    ensure!(local.text.contains("ana@example.org"));
    ensure!(fidelity(&cloud, 1) == Some(Fidelity::Redacted));
    ensure!(
        cloud.text.contains("Send the invoice to [EMAIL] please."),
        "{}",
        cloud.text
    );
    ensure!(fidelity(&cloud, 2) == Some(Fidelity::Full));
    Ok(())
}

#[test]
fn cli_explains_and_http_returns_the_trace() -> Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let (cairn, _clock) = open(dir.path())?;
        cairn.ingest(
            "default",
            &[
                TurnInput::new(
                    "old",
                    Role::User,
                    "The staging password rotates every Monday.",
                ),
                TurnInput::new("s1", Role::User, "When does the staging password rotate?"),
            ],
        )?;
        cairn.append_entry(
            "default",
            &EntryInput::new(EntryKind::Fact, "The team is in Oslo."),
        )?;
    }
    let out = std::process::Command::new(crate::support::cairn_bin())
        .envs(crate::support::backend_env(dir.path()))
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "assemble",
            "s1",
            "--budget",
            "600",
            "--explain",
            "--retrieval",
            "lexical",
            "--destination",
            "cloud_model",
            "--directive",
            "Be brief.",
        ])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(text.contains("- Be brief."), "{text}");
    ensure!(text.contains("tier 3 living_memory"), "{text}");
    ensure!(text.contains("retrieval: bm25"), "{text}");
    ensure!(
        text.lines()
            .any(|l| l.trim_start().starts_with("in  retrieved") && l.contains("turn old:0")),
        "{text}"
    );
    ensure!(text.contains("projection.partition"), "{text}");
    ensure!(text.contains("[policy memory-policy-default@"), "{text}");
    let bad = std::process::Command::new(crate::support::cairn_bin())
        .envs(crate::support::backend_env(dir.path()))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["assemble", "s1", "--destination", "moon"])
        .output()?;
    ensure!(!bad.status.success());
    ensure!(String::from_utf8_lossy(&bad.stderr).contains("unknown destination \"moon\""));

    let server = Server::start(dir.path())?;
    // The restarted server rebuilds its search index in the background.
    server.wait_indexed()?;
    let (s, block) = server.post(
        "/v1/workspaces/default/assemble",
        &json!({"session": "s1", "budget_tokens": 600, "destination": "cloud_model",
                "retrieval": "lexical", "directives": ["Be brief."]}),
    )?;
    ensure!(s == 200, "{block}");
    ensure!(block["tokens"].as_u64().unwrap_or(u64::MAX) <= 600);
    ensure!(block["destination"] == "cloud_model");
    ensure!(
        block["retrieval"]["index_catching_up"] == false,
        "{}",
        block["retrieval"]
    );
    let trace = block["trace"].as_array().context("trace")?;
    ensure!(
        trace
            .iter()
            .any(|t| t["rule"] == "projection.retrieved" && t["included"] == true),
        "{block}"
    );
    ensure!(
        trace
            .iter()
            .filter(|t| t["included"] == true)
            .all(|t| t["policy"]["generation"].is_string()),
        "{block}"
    );
    ensure!(block["tiers"].as_array().map(Vec::len) == Some(3));
    let (s, err) = server.post(
        "/v1/workspaces/default/assemble",
        &json!({"session": "s1", "budget_tokens": 120, "directives": ["Always answer formally. ".repeat(30)]}),
    )?;
    ensure!(
        s == 400 && err["code"] == "invariants_exceed_budget",
        "{err}"
    );
    Ok(())
}
