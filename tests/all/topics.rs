//! Topics end to end: CRUD with bad input, each gate tier and bypass, the
//! real wasm `topic-directive` default plugin at tier 3, gated proposals,
//! the decision cache, the gate log and `why`, requested collection, and a
//! restart. Real sled, real wasmtime, the real binary for the CLI.

use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Result, ensure};
use cairn::testing::Fault;
use cairn::topics::{
    Activation, Outcome, Priority, Scope, Subscription, Tier, TopicSpec, Trigger, TurnRef,
};
use cairn::{Cairn, CairnConfig, Role, TurnInput};

use crate::support::{Server, cairn_bin};

fn open(dir: &Path) -> Result<Cairn> {
    Ok(Cairn::open(CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        ..CairnConfig::default()
    })?)
}

fn topic(name: &str, word: &str, activation: Activation, priority: Priority) -> TopicSpec {
    TopicSpec::new(
        name,
        &format!("Everything about the {word}: {word} problems"),
    )
    .trigger(Trigger::Keyword(word.into()))
    .activation(activation)
    .priority(priority)
}

/// Ingests one turn and waits for the topic watchers' decisions on it.
fn say(cairn: &Cairn, session: &str, role: Role, text: &str) -> Result<TurnRef> {
    let ack = cairn.ingest("acme", &[TurnInput::new(session, role, text)])?;
    cairn.flush()?;
    Ok(TurnRef::new(session, ack[0].seq))
}

#[test]
fn topic_watcher_panic_is_contained_and_loses_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.create_topic(
        "acme",
        &topic("crit", "outage", Activation::Auto, Priority::Critical),
    )?;
    cairn.create_topic(
        "acme",
        &topic("other", "lunch", Activation::Auto, Priority::Critical),
    )?;
    let before = cairn.actors().stats();
    // The watcher of `crit` panics while it judges this turn.
    cairn.actors().inject(Fault::PanicTopicWatcher {
        workspace: "acme".into(),
        topic: "crit".into(),
    });
    let first = say(&cairn, "s1", Role::User, "an outage at lunch")?;
    let stats = cairn.actors().stats();
    ensure!(stats.restarts == before.restarts + 1, "{stats:?}");
    // The turn it panicked on was still judged, and so was the other topic's.
    for name in ["crit", "other"] {
        let why = cairn.why("acme", name, &first, None)?;
        ensure!(
            why.len() == 1 && why[0].outcome == Outcome::Collected,
            "{name}: {why:?}"
        );
    }
    // Later turns reach the restarted watcher and are judged.
    let later: Vec<TurnRef> = (0..5)
        .map(|i| say(&cairn, "s1", Role::User, &format!("outage number {i}")))
        .collect::<Result<_>>()?;
    let details = cairn.topic("acme", "crit", 100, None)?;
    ensure!(details.members.len() == 6, "{:?}", details.members);
    for t in later.iter().chain([&first]) {
        ensure!(details.members.iter().any(|m| &m.turn == t), "{t:?} lost");
    }
    // The other topic judged its one turn, once.
    ensure!(cairn.topic("acme", "other", 100, None)?.members.len() == 1);
    ensure!(cairn.actors().stats().watchers == 2);
    Ok(())
}

#[test]
fn each_tier_and_bypass_decides_and_explains_itself() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    for spec in [
        topic("crit", "outage", Activation::Auto, Priority::Critical),
        topic("high", "invoice", Activation::Auto, Priority::High),
        topic("medium", "deploy", Activation::Auto, Priority::Medium),
        topic("low", "lunch", Activation::Auto, Priority::Low),
        topic("gated", "contract", Activation::Gated, Priority::Medium),
        topic("manual", "roadmap", Activation::Manual, Priority::Critical),
        topic("steer", "print", Activation::Auto, Priority::Critical).scope(Scope::Output),
    ] {
        cairn.create_topic("acme", &spec)?;
    }
    // Tier 1 alone: critical collects on the pattern.
    let t = say(&cairn, "s1", Role::User, "an outage")?;
    let why = cairn.why("acme", "crit", &t, None)?;
    ensure!(why.len() == 1 && why[0].tier == Tier::Pattern, "{why:?}");
    ensure!(why[0].outcome == Outcome::Collected);
    // Tier 2 bypass: high with a strong score skips the policy.
    let t = say(&cairn, "s1", Role::User, "invoice problems everywhere")?;
    let why = cairn.why("acme", "high", &t, None)?;
    ensure!(
        why[0].tier == Tier::Lexical && why[0].outcome == Outcome::Collected,
        "{why:?}"
    );
    // Tier 3: medium with a passing score asks the real wasm plugin.
    let t = say(&cairn, "s1", Role::User, "the deploy problems are back")?;
    let why = cairn.why("acme", "medium", &t, None)?;
    ensure!(why[0].tier == Tier::Policy, "{why:?}");
    ensure!(
        why[0]
            .policy_generation
            .as_deref()
            .is_some_and(|g| g.starts_with("topic-default@")),
        "{why:?}"
    );
    ensure!(
        why[0].outcome == Outcome::Collected && !why[0].cached,
        "{why:?}"
    );
    // The cache: the same text for the same topic is not asked twice.
    let again = say(&cairn, "s2", Role::User, "the deploy problems are back")?;
    let why = cairn.why("acme", "medium", &again, None)?;
    ensure!(why[0].cached, "{why:?}");
    // Tier 2 drop: low with a weak score.
    let t = say(
        &cairn,
        "s1",
        Role::User,
        "lunch at noon with the whole team today after the quarterly planning review meeting downtown near the station",
    )?;
    let why = cairn.why("acme", "low", &t, None)?;
    ensure!(
        why[0].tier == Tier::Lexical && why[0].outcome == Outcome::Dropped,
        "{why:?}"
    );
    // Gated: a proposal, approved by a person.
    let t = say(
        &cairn,
        "s1",
        Role::User,
        "the contract problems need a lawyer",
    )?;
    let why = cairn.why("acme", "gated", &t, None)?;
    ensure!(why[0].outcome == Outcome::Proposed, "{why:?}");
    ensure!(cairn.topic("acme", "gated", 10, None)?.members.is_empty());
    cairn.decide_proposal("acme", "gated", &t, true)?;
    ensure!(cairn.topic("acme", "gated", 10, None)?.members.len() == 1);
    // Manual: nothing live; collect on request backfills.
    let t = say(&cairn, "s1", Role::User, "the roadmap for Q3")?;
    ensure!(cairn.why("acme", "manual", &t, None)?.is_empty());
    let report = cairn.collect_topic("acme", "manual", None)?;
    ensure!(report.collected == 1 && report.matched == 1, "{report:?}");
    ensure!(cairn.collect_topic("acme", "manual", None)?.already == 1);
    // Output scope: an assistant turn, not a user turn.
    let user = say(&cairn, "s1", Role::User, "print it")?;
    let bot = say(&cairn, "s1", Role::Assistant, "print 'hello'")?;
    ensure!(cairn.why("acme", "steer", &user, None)?.is_empty());
    ensure!(cairn.why("acme", "steer", &bot, None)?[0].outcome == Outcome::Collected);
    // Paused topics watch nothing; resumed ones do again.
    cairn.pause_topic("acme", "crit", true)?;
    let t = say(&cairn, "s1", Role::User, "another outage")?;
    ensure!(cairn.why("acme", "crit", &t, None)?.is_empty());
    cairn.pause_topic("acme", "crit", false)?;
    let t = say(&cairn, "s1", Role::User, "a third outage")?;
    ensure!(cairn.why("acme", "crit", &t, None)?.len() == 1);
    // The log is durable: a restart reads it back, and the gate recompiles.
    let log_before = cairn.gate_log("acme", "medium", 100, None)?;
    drop(cairn);
    let cairn = open(dir.path())?;
    ensure!(cairn.gate_log("acme", "medium", 100, None)? == log_before);
    let t = say(&cairn, "s3", Role::User, "yet another outage")?;
    ensure!(cairn.why("acme", "crit", &t, None)?.len() == 1);
    Ok(())
}

#[test]
fn bad_topics_are_refused_naming_the_field() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let good = topic("billing", "invoice", Activation::Auto, Priority::High);
    let cases = [
        (
            good.clone().trigger(Trigger::Regex("(".into())),
            "triggers[1].regex",
        ),
        (TopicSpec::new("billing", "x"), "triggers"),
        (
            good.clone()
                .subscribe(Subscription::Session("ghost".into())),
            "subscriptions[0]",
        ),
    ];
    for (spec, field) in cases {
        let err = cairn.create_topic("acme", &spec).unwrap_err();
        ensure!(err.code() == "invalid_topic", "{err}");
        ensure!(err.to_string().contains(field), "{err}");
    }
    ensure!(cairn.topics("acme")?.is_empty());
    cairn.create_topic("acme", &good)?;
    ensure!(cairn.create_topic("acme", &good).unwrap_err().code() == "topic_exists");
    Ok(())
}

fn run(dir: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(cairn_bin())
        .envs(crate::support::backend_env(dir))
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env("RUST_LOG", "error")
        .output()?)
}

#[test]
fn cli_defines_a_topic_collects_and_explains() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = run(
        dir.path(),
        &[
            "-w",
            "acme",
            "topics",
            "create",
            "billing",
            "--description",
            "Invoices and refunds",
            "--keyword",
            "invoice",
            "--activation",
            "auto",
            "--priority",
            "critical",
        ],
    )?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = run(
        dir.path(),
        &[
            "-w",
            "acme",
            "topics",
            "create",
            "other",
            "--description",
            "x",
            "--regex",
            "(",
        ],
    )?;
    ensure!(bad.status.code() == Some(2), "{bad:?}");
    ensure!(String::from_utf8_lossy(&bad.stderr).contains("triggers[0].regex"));
    let ingest = Command::new(cairn_bin())
        .envs(crate::support::backend_env(dir.path()))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["-w", "acme", "ingest"])
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            if let Some(stdin) = child.stdin.as_mut() {
                stdin.write_all(
                    br#"{"session":"s1","role":"user","content":"the invoice bounced"}"#,
                )?;
            }
            child.stdin.take();
            child.wait_with_output()
        })?;
    ensure!(
        ingest.status.success(),
        "{}",
        String::from_utf8_lossy(&ingest.stderr)
    );
    let show = run(dir.path(), &["-w", "acme", "topics", "show", "billing"])?;
    let text = String::from_utf8_lossy(&show.stdout);
    ensure!(text.contains("the invoice bounced"), "{text}");
    let why = run(
        dir.path(),
        &["-w", "acme", "topics", "why", "billing", "s1/0"],
    )?;
    let text = String::from_utf8_lossy(&why.stdout);
    ensure!(
        text.contains("collected") && text.contains("tier 1"),
        "{text}"
    );
    // `cairn search --topic` keeps only what the topic collected.
    let search = |topic: &str| {
        run(
            dir.path(),
            &[
                "-w", "acme", "search", "bounced", "--mode", "bm25", "--topic", topic,
            ],
        )
    };
    let found = search("billing")?;
    let text = String::from_utf8_lossy(&found.stdout);
    ensure!(
        found.status.success() && text.contains("session:s1:0-0"),
        "{text}"
    );
    let unknown = search("nope")?;
    ensure!(!unknown.status.success(), "{unknown:?}");
    ensure!(String::from_utf8_lossy(&unknown.stderr).contains("nope"));
    Ok(())
}

#[test]
fn http_topic_crud() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let spec = serde_json::json!({
        "name": "billing", "description": "Invoices", "activation": "auto",
        "priority": "critical", "triggers": [{"kind": "keyword", "value": "invoice"}]
    });
    let (status, body) = server.post("/v1/workspaces/acme/topics", &spec)?;
    ensure!(status == 200 || status == 201, "{status} {body}");
    let (status, _) = server.post("/v1/workspaces/acme/topics", &spec)?;
    ensure!(status == 409, "{status}");
    let bad = serde_json::json!({
        "name": "x", "description": "x", "triggers": [{"kind": "regex", "value": "("}]
    });
    let (status, body) = server.post("/v1/workspaces/acme/topics", &bad)?;
    ensure!(status == 400 || status == 422, "{status}");
    ensure!(body.to_string().contains("triggers[0].regex"), "{body}");
    let (status, body) = server.get("/v1/workspaces/acme/topics")?;
    ensure!(
        status == 200 && body.to_string().contains("billing"),
        "{body}"
    );
    // The webhook: refused for a topic without the trigger, then fed.
    let feed = serde_json::json!({"text": "invoice 42 bounced"});
    let (status, body) = server.post("/v1/workspaces/acme/topics/billing/webhook", &feed)?;
    ensure!(
        status == 400 && body.to_string().contains("webhook"),
        "{status} {body}"
    );
    let hooked = serde_json::json!({
        "name": "alerts", "description": "Alerts", "activation": "auto",
        "priority": "critical", "triggers": [{"kind": "webhook"}]
    });
    let (status, body) = server.post("/v1/workspaces/acme/topics", &hooked)?;
    ensure!(status == 200 || status == 201, "{status} {body}");
    let (status, body) = server.post("/v1/workspaces/acme/topics/alerts/webhook", &feed)?;
    ensure!(
        status == 200 && body["outcome"] == "collected",
        "{status} {body}"
    );
    let (status, body) = server.get("/openapi.json")?;
    ensure!(
        status == 200 && body.to_string().contains("/topics/{name}/webhook"),
        "{status}"
    );
    let (status, _) = server.post(
        "/v1/workspaces/acme/topics/billing/pause",
        &serde_json::json!({}),
    )?;
    ensure!(status == 200, "{status}");
    Ok(())
}

#[test]
fn memory_search_filters_by_topic() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.create_topic(
        "acme",
        &topic("billing", "invoice", Activation::Auto, Priority::Critical),
    )?;
    let member = say(&cairn, "s1", Role::User, "the invoice refund is late")?;
    say(&cairn, "s1", Role::User, "a refund for the lunch order")?;
    cairn.catch_up_search()?;
    let request = |topic: Option<&str>| cairn::SearchRequest {
        mode: Some(cairn::search::SearchMode::Bm25),
        topic: topic.map(str::to_owned),
        ..cairn::SearchRequest::new("refund")
    };
    let all = cairn.memory_search("acme", &request(None))?;
    ensure!(all.items.len() == 2, "{:?}", all.items);
    let only = cairn.memory_search("acme", &request(Some("billing")))?;
    ensure!(only.items.len() == 1, "{:?}", only.items);
    ensure!(only.items[0].seq == Some(member.seq), "{:?}", only.items);
    let unknown = cairn.memory_search("acme", &request(Some("nope")));
    ensure!(unknown.is_err(), "{unknown:?}");
    Ok(())
}

#[test]
fn a_topics_collection_is_an_assembly_candidate_and_forget_takes_it() -> Result<()> {
    use cairn::{AssembleRequest, ForgetTarget, ItemSource, Section};
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.create_topic(
        "acme",
        &topic("billing", "invoice", Activation::Auto, Priority::Critical),
    )?;
    let member = say(
        &cairn,
        "old",
        Role::User,
        "the invoice for March was paid twice",
    )?;
    // Another session in the same work context, long enough that the
    // collected turn is not in its tail.
    for i in 0..6 {
        say(
            &cairn,
            "new",
            Role::User,
            &format!("planning step {i} for the launch"),
        )?;
    }
    let mut request = AssembleRequest::new("new", 2_000);
    request.retrieval = cairn::RetrievalMode::Off;
    let block = cairn.assemble("acme", &request)?;
    let item = block
        .items
        .iter()
        .find(|i| i.section == Section::Topics)
        .ok_or_else(|| anyhow::anyhow!("no topic item in {}", block.text))?;
    ensure!(
        item.source
            == ItemSource::Topic {
                topic: "billing".into(),
                session: member.session.clone(),
                seq: member.seq,
            },
        "{item:?}"
    );
    ensure!(
        block
            .text
            .contains("via topic billing; now; this_context) the invoice for March"),
        "{}",
        block.text
    );
    ensure!(
        block
            .trace
            .iter()
            .any(|t| t.rule == "topics.collection" && t.included),
        "{:?}",
        block.trace
    );
    // Turned off by the settings.
    let mut off = request.clone();
    off.settings = Some(cairn::AssembleSettings {
        topic_items: 0,
        ..Default::default()
    });
    let without = cairn.assemble("acme", &off)?;
    ensure!(!without.items.iter().any(|i| i.section == Section::Topics));
    // Forgetting the session takes its memberships and gate records too.
    cairn.forget("acme", &ForgetTarget::Session("old".into()), "test")?;
    ensure!(cairn.topic("acme", "billing", 10, None)?.members.is_empty());
    ensure!(cairn.gate_log("acme", "billing", 10, None)?.is_empty());
    let after = cairn.assemble("acme", &request)?;
    ensure!(!after.text.contains("invoice for March"), "{}", after.text);
    Ok(())
}

#[test]
fn a_schedule_collects_what_came_since_its_last_run_on_the_tick() -> Result<()> {
    use std::sync::Arc;
    let dir = tempfile::tempdir()?;
    let start = chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2026, 11, 23, 8, 0, 0)
        .single()
        .ok_or_else(|| anyhow::anyhow!("bad date"))?;
    let clock = cairn::ManualClock::new(start);
    let cairn = Cairn::open_with_clock(
        CairnConfig {
            data_dir: dir.path().to_owned(),
            storage: crate::support::storage(dir.path()),
            actors: cairn::ActorConfig {
                tick_interval_secs: 0,
                ..Default::default()
            },
            ..CairnConfig::default()
        },
        Arc::new(clock.clone()),
    )?;
    // A manual topic (the live gate never collects it) on a 09:00 schedule.
    let spec = topic("digest", "invoice", Activation::Manual, Priority::Critical)
        .trigger(Trigger::Schedule("0 9 * * *".into()));
    cairn.create_topic("acme", &spec)?;
    let first = say(&cairn, "s1", Role::User, "the invoice was paid")?;
    ensure!(cairn.topic("acme", "digest", 10, None)?.members.is_empty());
    // Before 09:00 nothing is due.
    clock.advance(chrono::Duration::minutes(30));
    cairn.tick()?;
    ensure!(cairn.topic("acme", "digest", 10, None)?.members.is_empty());
    // Past 09:00 the tick runs it: the turn since creation is collected.
    clock.advance(chrono::Duration::minutes(45));
    cairn.tick()?;
    let members = cairn.topic("acme", "digest", 10, None)?.members;
    ensure!(
        members.len() == 1 && members[0].turn == first,
        "{members:?}"
    );
    // It does not run again until the next 09:00, then takes only what is new.
    let second = say(&cairn, "s1", Role::User, "another invoice arrived")?;
    clock.advance(chrono::Duration::hours(2));
    ensure!(cairn.run_topic_schedules("acme")?.is_empty());
    clock.advance(chrono::Duration::hours(22));
    let runs = cairn.run_topic_schedules("acme")?;
    ensure!(runs.len() == 1 && runs[0].report.collected == 1, "{runs:?}");
    let members = cairn.topic("acme", "digest", 10, None)?.members;
    ensure!(members.iter().any(|m| m.turn == second), "{members:?}");
    Ok(())
}

#[test]
fn a_webhook_feeds_text_to_its_topic_only() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.ingest(
        "acme",
        &[TurnInput::new("oncall", Role::User, "watching prod").in_context("ops")],
    )?;
    let spec = TopicSpec::new("alerts", "Production alerts: CPU, disk, latency")
        .trigger(Trigger::Webhook)
        .subscribe(Subscription::WorkContext("ops".into()))
        .activation(Activation::Auto)
        .priority(Priority::Critical);
    cairn.create_topic("acme", &spec)?;
    cairn.create_topic(
        "acme",
        &topic("billing", "invoice", Activation::Auto, Priority::Critical),
    )?;
    let fed = cairn.feed_topic("acme", "alerts", "CPU on db-1 above 95% for 10 minutes")?;
    ensure!(fed.outcome == Some(Outcome::Collected), "{fed:?}");
    ensure!(fed.turn.session == "webhook-alerts");
    let members = cairn.topic("acme", "alerts", 10, None)?.members;
    ensure!(members.len() == 1 && members[0].low_trust, "{members:?}");
    ensure!(members[0].via == cairn::topics::Via::Webhook);
    ensure!(members[0].work_context.as_deref() == Some("ops"));
    let why = cairn.why("acme", "alerts", &fed.turn, None)?;
    ensure!(why[0].reasons.contains(&"webhook".to_owned()), "{why:?}");
    // A topic without a webhook trigger refuses, naming the field.
    let refused = cairn.feed_topic("acme", "billing", "an invoice");
    match refused {
        Err(e) => ensure!(e.to_string().contains("triggers"), "{e}"),
        Ok(r) => anyhow::bail!("fed a topic without a webhook: {r:?}"),
    }
    // Paused: refused too.
    cairn.pause_topic("acme", "alerts", true)?;
    ensure!(cairn.feed_topic("acme", "alerts", "disk full").is_err());
    Ok(())
}
