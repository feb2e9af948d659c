//! The topic-directive world's conformance suite: for every value of every
//! decision field (`collection-mode`, `extraction-depth`, each
//! `output-target`, both values of
//! `review-required-before-durable-promotion`), a test installs the test
//! directive (`plugins/test-topic-directive`, whose answer the topic's name
//! spells) with the real `cairn` binary, drives `cairn serve` over HTTP,
//! and observes what the host did: members, proposals, evidence records,
//! assertion candidates, gate records, the decision log. Each fails if the
//! host ignores its field (wit/README.md, *topic-directive-decision*).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use cairn::worlds::defaults::test_guests;
use serde_json::{Value, json};

use crate::support::{Server, cairn_bin};

/// A server on a fresh data dir with the test directive installed.
struct Env {
    _dir: tempfile::TempDir,
    server: Server,
}

fn start() -> Result<Env> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(&data))
        .arg("--data-dir")
        .arg(&data)
        .args([
            "plugins",
            "install",
            "topic-directive",
            test_guests::TEST_TOPIC_DIRECTIVE,
            "--name",
            "test-topic-directive",
        ])
        .env("RUST_LOG", "error")
        .output()?;
    ensure!(
        out.status.success(),
        "install failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = Server::start(&data)?;
    Ok(Env { _dir: dir, server })
}

impl Env {
    /// Creates an `auto`, medium-priority topic on the keyword `wombat`
    /// whose tier-2 threshold is 0, so every matching turn reaches the
    /// directive; `extra` overrides fields of the definition.
    fn topic(&self, name: &str, extra: Value) -> Result<()> {
        let mut spec = json!({
            "name": name, "description": "Zoo animals",
            "triggers": [{"kind": "keyword", "value": "wombat"}],
            "activation": "auto", "priority": "medium", "similarity_threshold": 0.0,
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                spec.insert(k.clone(), v.clone());
            }
        }
        let (s, body) = self.server.post("/v1/workspaces/acme/topics", &spec)?;
        ensure!(s == 200, "{s} {body}");
        Ok(())
    }

    /// Ingests one turn; returns it as `session/seq`.
    fn say(&self, session: &str, role: &str, text: &str) -> Result<String> {
        let mut turn = json!({"session": session, "role": role, "content": text});
        if role == "tool" {
            turn["tool_call_id"] = json!(format!("call-{}", text.len()));
        }
        let (s, body) = self
            .server
            .post("/v1/workspaces/acme/turns", &json!({"turns": [turn]}))?;
        ensure!(s == 200, "{s} {body}");
        let seq = body["acks"][0]["seq"].as_u64().context("no seq")?;
        Ok(format!("{session}/{seq}"))
    }

    /// The topic's gate records about a turn, waiting (at most 60 s) for
    /// the live gate to have judged it.
    fn judged(&self, topic: &str, turn: &str) -> Result<Vec<Value>> {
        let start = Instant::now();
        loop {
            let records = self.why(topic, turn)?;
            if !records.is_empty() {
                return Ok(records);
            }
            ensure!(
                start.elapsed() < Duration::from_secs(60),
                "{topic} never judged {turn}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn why(&self, topic: &str, turn: &str) -> Result<Vec<Value>> {
        let (s, body) = self
            .server
            .get(&format!("/v1/workspaces/acme/topics/{topic}/why/{turn}"))?;
        ensure!(s == 200, "{s} {body}");
        Ok(body.as_array().cloned().unwrap_or_default())
    }

    /// `GET …/topics/{name}`: members, pending, evidence, candidates.
    fn show(&self, topic: &str) -> Result<Value> {
        let (s, body) = self
            .server
            .get(&format!("/v1/workspaces/acme/topics/{topic}"))?;
        ensure!(s == 200, "{s} {body}");
        Ok(body)
    }

    fn collect(&self, topic: &str) -> Result<Value> {
        let (s, body) = self.server.post(
            &format!("/v1/workspaces/acme/topics/{topic}/collect"),
            &json!({}),
        )?;
        ensure!(s == 200, "{s} {body}");
        Ok(body)
    }

    /// Says `text` in a session no topic of the test watches yet and waits
    /// until the live gate has passed it (a `sentinel` topic, critical,
    /// collects it without asking the directive): topics made afterwards
    /// meet it only in a backfill.
    fn said_before(&self, text: &str) -> Result<String> {
        self.server.post(
            "/v1/workspaces/acme/topics",
            &json!({
                "name": "sentinel", "description": "Everything",
                "triggers": [{"kind": "keyword", "value": "wombat"}],
                "activation": "auto", "priority": "critical",
            }),
        )?;
        let turn = self.say("old", "user", text)?;
        self.judged("sentinel", &turn)?;
        Ok(turn)
    }
}

fn len(v: &Value) -> usize {
    v.as_array().map_or(0, Vec::len)
}

fn has(list: &Value, text: &str) -> bool {
    list.as_array()
        .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(text)))
}

const SIGHTING: &str = "Hello there. A wombat ate my lunch! Nothing else happened.";

// -- collection-mode --

/// `suggest-only`: nothing becomes a member without a person, even for an
/// `auto` topic: a proposal, a member once approved.
#[test]
fn collection_mode_suggest_only_proposes_even_for_an_auto_topic() -> Result<()> {
    let env = start()?;
    env.topic("m-suggest-member", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    let why = env.judged("m-suggest-member", &turn)?;
    ensure!(why[0]["outcome"] == "proposed", "{why:?}");
    ensure!(has(&why[0]["reasons"], "suggest-only"), "{why:?}");
    ensure!(
        why[0]["directive"]["collection_mode"] == "suggest-only",
        "{why:?}"
    );
    let shown = env.show("m-suggest-member")?;
    ensure!(len(&shown["members"]) == 0, "{shown}");
    ensure!(len(&shown["pending"]) == 1, "{shown}");
    let (s, body) = env.server.post(
        "/v1/workspaces/acme/topics/m-suggest-member/proposals/decide",
        &json!({"turn": turn, "approve": true}),
    )?;
    ensure!(s == 200, "{body}");
    let shown = env.show("m-suggest-member")?;
    ensure!(
        len(&shown["members"]) == 1 && shown["members"][0]["via"] == "approved",
        "{shown}"
    );
    Ok(())
}

/// `watch-future-sources`: live turns are collected; a backfill does not
/// collect from existing memory under it (the record says why).
#[test]
fn collection_mode_watch_future_sources_collects_live_turns_only() -> Result<()> {
    let env = start()?;
    let old = env.said_before("An old wombat story.")?;
    env.topic("m-watch-member", json!({}))?;
    let new = env.say("s1", "user", SIGHTING)?;
    let why = env.judged("m-watch-member", &new)?;
    ensure!(why[0]["outcome"] == "collected", "{why:?}");
    ensure!(why[0]["note"] == "asked as chat", "{why:?}");
    let report = env.collect("m-watch-member")?;
    ensure!(report["collected"] == 0, "{report}");
    ensure!(report["already"] == 1, "{report}");
    let why = env.why("m-watch-member", &old)?;
    ensure!(why.len() == 1 && why[0]["outcome"] == "dropped", "{why:?}");
    ensure!(has(&why[0]["reasons"], "mode-excludes-backfill"), "{why:?}");
    ensure!(why[0]["note"] == "asked as memory-entry", "{why:?}");
    let shown = env.show("m-watch-member")?;
    ensure!(len(&shown["members"]) == 1, "{shown}");
    ensure!(shown["members"][0]["turn"]["session"] == "s1", "{shown}");
    Ok(())
}

/// `backfill-existing-memory`: a backfill collects from the record; a new
/// turn is not collected live under it.
#[test]
fn collection_mode_backfill_existing_memory_collects_in_a_backfill_only() -> Result<()> {
    let env = start()?;
    let old = env.said_before("An old wombat story.")?;
    env.topic("m-backfill-member", json!({}))?;
    let new = env.say("s1", "user", SIGHTING)?;
    let why = env.judged("m-backfill-member", &new)?;
    ensure!(why[0]["outcome"] == "dropped", "{why:?}");
    ensure!(
        has(&why[0]["reasons"], "mode-excludes-new-input"),
        "{why:?}"
    );
    ensure!(len(&env.show("m-backfill-member")?["members"]) == 0);
    let report = env.collect("m-backfill-member")?;
    ensure!(report["collected"] == 2, "{report}");
    let shown = env.show("m-backfill-member")?;
    let members = shown["members"].as_array().context("members")?;
    ensure!(members.len() == 2, "{shown}");
    ensure!(members.iter().all(|m| m["via"] == "backfill"), "{shown}");
    let why = env.why("m-backfill-member", &old)?;
    ensure!(why[0]["outcome"] == "collected", "{why:?}");
    Ok(())
}

/// `extract-from-selected-sources`: only from the source classes the topic
/// selects; a topic that selects none collects nothing under it.
#[test]
fn collection_mode_extract_from_selected_sources_needs_the_selection() -> Result<()> {
    let env = start()?;
    env.topic("x-extract-member", json!({}))?;
    env.topic("y-extract-member", json!({"sources": ["tool-output"]}))?;
    let chat = env.say("s1", "user", SIGHTING)?;
    let tool = env.say("s1", "tool", "wombat count: 3")?;
    for turn in [&chat, &tool] {
        let why = env.judged("x-extract-member", turn)?;
        ensure!(why[0]["outcome"] == "dropped", "{why:?}");
        ensure!(has(&why[0]["reasons"], "no-selected-sources"), "{why:?}");
    }
    let why = env.judged("y-extract-member", &tool)?;
    ensure!(why[0]["outcome"] == "collected", "{why:?}");
    // The chat turn is outside the selection: the topic never judged it.
    ensure!(env.why("y-extract-member", &chat)?.is_empty());
    let shown = env.show("y-extract-member")?;
    ensure!(len(&shown["members"]) == 1, "{shown}");
    ensure!(
        shown["topic"]["sources"] == json!(["tool-output"]),
        "{shown}"
    );
    ensure!(len(&env.show("x-extract-member")?["members"]) == 0);
    Ok(())
}

// -- extraction-depth --

/// `none` (with `collect` false): nothing is collected; the record says
/// the directive declined.
#[test]
fn extraction_depth_none_collects_nothing() -> Result<()> {
    let env = start()?;
    env.topic("d-skip", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    let why = env.judged("d-skip", &turn)?;
    ensure!(why[0]["outcome"] == "dropped", "{why:?}");
    ensure!(has(&why[0]["reasons"], "policy-declined"), "{why:?}");
    ensure!(why[0]["directive"]["extraction_depth"] == "none", "{why:?}");
    let shown = env.show("d-skip")?;
    ensure!(len(&shown["members"]) == 0 && len(&shown["pending"]) == 0);
    // The decision is in the decision log, by the installed directive.
    let (s, log) = env
        .server
        .get("/v1/plugins/log?plugin=test-topic-directive&limit=10")?;
    ensure!(s == 200 && len(&log) > 0, "{log}");
    Ok(())
}

/// `shallow`: the member is the turn reference (and its snippet) only.
#[test]
fn extraction_depth_shallow_carries_the_reference_only() -> Result<()> {
    let env = start()?;
    env.topic("d-shallow-member", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    env.judged("d-shallow-member", &turn)?;
    let shown = env.show("d-shallow-member")?;
    let member = &shown["members"][0];
    ensure!(member["extraction_depth"] == "shallow", "{shown}");
    ensure!(member.get("extract").is_none(), "{shown}");
    Ok(())
}

/// `standard`: the member carries the sentences matching the topic.
#[test]
fn extraction_depth_standard_carries_the_matching_sentences() -> Result<()> {
    let env = start()?;
    env.topic("d-standard-member", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    env.judged("d-standard-member", &turn)?;
    let shown = env.show("d-standard-member")?;
    let member = &shown["members"][0];
    ensure!(member["extraction_depth"] == "standard", "{shown}");
    ensure!(
        member["extract"]["sentences"] == json!(["A wombat ate my lunch!"]),
        "{shown}"
    );
    ensure!(member["extract"].get("context").is_none(), "{shown}");
    Ok(())
}

/// `deep`: the matching sentences and the neighbouring turns as context.
#[test]
fn extraction_depth_deep_carries_the_neighbouring_turns() -> Result<()> {
    let env = start()?;
    env.topic("d-deep-member", json!({}))?;
    env.say("s1", "user", "We went to the zoo.")?;
    let turn = env.say("s1", "user", SIGHTING)?;
    env.say("s1", "assistant", "That sounds like a long day.")?;
    env.judged("d-deep-member", &turn)?;
    let shown = env.show("d-deep-member")?;
    let member = &shown["members"][0];
    ensure!(member["extraction_depth"] == "deep", "{shown}");
    ensure!(
        member["extract"]["sentences"] == json!(["A wombat ate my lunch!"]),
        "{shown}"
    );
    let context = &member["extract"]["context"];
    ensure!(len(context) == 2, "{shown}");
    ensure!(context[0]["snippet"] == "We went to the zoo.", "{shown}");
    ensure!(
        context[1]["snippet"] == "That sounds like a long day.",
        "{shown}"
    );
    Ok(())
}

// -- output-targets --

/// `topic-membership` alone: a member, no evidence record, no candidate.
#[test]
fn output_target_topic_membership_makes_a_member() -> Result<()> {
    let env = start()?;
    env.topic("t-member", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    env.judged("t-member", &turn)?;
    let shown = env.show("t-member")?;
    ensure!(len(&shown["members"]) == 1, "{shown}");
    ensure!(len(&shown["evidence"]) == 0, "{shown}");
    ensure!(len(&shown["candidates"]) == 0, "{shown}");
    Ok(())
}

/// `evidence-record`: an evidence record listed with the topic (the turn,
/// the quoted span, the decision and its generation); no member.
#[test]
fn output_target_evidence_record_lists_the_quoted_span() -> Result<()> {
    let env = start()?;
    env.topic("t-evidence", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    let why = env.judged("t-evidence", &turn)?;
    ensure!(why[0]["outcome"] == "collected", "{why:?}");
    let shown = env.show("t-evidence")?;
    ensure!(len(&shown["members"]) == 0, "{shown}");
    let evidence = &shown["evidence"];
    ensure!(len(evidence) == 1, "{shown}");
    let e = &evidence[0];
    ensure!(e["turn"] == json!({"session": "s1", "seq": 0}), "{e}");
    ensure!(e["quote"] == "A wombat ate my lunch!", "{e}");
    ensure!(e["topic"] == "t-evidence", "{e}");
    ensure!(e["gate_record"] == why[0]["id"], "{e} {why:?}");
    ensure!(e["topic_generation"] == 1, "{e}");
    ensure!(
        e["policy_generation"]
            .as_str()
            .is_some_and(|g| g.starts_with("test-topic-directive@")),
        "{e}"
    );
    // A collected turn is not judged again.
    let report = env.collect("t-evidence")?;
    ensure!(report["already"] == 1, "{report}");
    // Forgetting the session takes its evidence records.
    let (s, t) = env.server.post(
        "/v1/workspaces/acme/forget",
        &json!({"target": "session", "id": "s1", "reason": "test"}),
    )?;
    ensure!(s == 200, "{t}");
    ensure!(len(&env.show("t-evidence")?["evidence"]) == 0);
    Ok(())
}

/// `assertion-candidate`: a candidate a person accepts into memory as a
/// `fact` entry.
#[test]
fn output_target_assertion_candidate_is_accepted_into_memory() -> Result<()> {
    let env = start()?;
    env.topic("t-assertion", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    env.judged("t-assertion", &turn)?;
    let shown = env.show("t-assertion")?;
    ensure!(len(&shown["members"]) == 0, "{shown}");
    ensure!(len(&shown["candidates"]) == 1, "{shown}");
    ensure!(
        shown["candidates"][0]["text"] == "A wombat ate my lunch!",
        "{shown}"
    );
    ensure!(shown["candidates"][0]["status"] == "pending", "{shown}");
    let (s, decided) = env.server.post(
        "/v1/workspaces/acme/topics/t-assertion/candidates/decide",
        &json!({"turn": turn, "accept": true}),
    )?;
    ensure!(s == 200, "{decided}");
    ensure!(decided["status"] == "accepted", "{decided}");
    let entry = decided["entry"].as_str().context("no entry")?;
    let (s, stored) = env
        .server
        .get(&format!("/v1/workspaces/acme/entries/{entry}"))?;
    ensure!(s == 200, "{stored}");
    ensure!(
        stored.to_string().contains("A wombat ate my lunch!"),
        "{stored}"
    );
    ensure!(stored.to_string().contains("\"fact\""), "{stored}");
    // Settled: no longer pending, not decided twice.
    ensure!(len(&env.show("t-assertion")?["candidates"]) == 0);
    let (s, again) = env.server.post(
        "/v1/workspaces/acme/topics/t-assertion/candidates/decide",
        &json!({"turn": turn, "accept": false}),
    )?;
    ensure!(
        s == 404 && again.to_string().contains("candidate_not_found"),
        "{s} {again}"
    );
    let (s, all) = env
        .server
        .get("/v1/workspaces/acme/topics/t-assertion/candidates?all=true")?;
    ensure!(s == 200 && all[0]["status"] == "accepted", "{all}");
    Ok(())
}

/// `issue-frame-update`: the turn feeds the topic's frame (its tier-2
/// profile), so a later turn like it scores higher than for a topic
/// whose directive did not ask for it.
#[test]
fn output_target_issue_frame_update_feeds_the_topic_profile() -> Result<()> {
    let env = start()?;
    env.topic("f-frame-member", json!({}))?;
    env.topic("f-member", json!({}))?;
    let first = env.say("s1", "user", "A wombat with a quokka and a platypus.")?;
    env.judged("f-frame-member", &first)?;
    env.judged("f-member", &first)?;
    // Any topic change recompiles the profiles.
    let (s, body) = env.server.post(
        "/v1/workspaces/acme/topics",
        &json!({"name": "other", "description": "Other", "triggers": [{"kind": "keyword", "value": "zzz"}]}),
    )?;
    ensure!(s == 200, "{body}");
    let second = env.say("s2", "user", "The quokka and the platypus again, wombat.")?;
    let framed = env.judged("f-frame-member", &second)?;
    let plain = env.judged("f-member", &second)?;
    let (framed, plain) = (
        framed[0]["score"].as_f64().context("score")?,
        plain[0]["score"].as_f64().context("score")?,
    );
    ensure!(framed > plain, "framed {framed} <= plain {plain}");
    Ok(())
}

/// `null-result`: the directive looked and found nothing to produce; the
/// gate record says so and nothing is written.
#[test]
fn output_target_null_result_produces_nothing() -> Result<()> {
    let env = start()?;
    env.topic("t-null-member", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    let why = env.judged("t-null-member", &turn)?;
    ensure!(why[0]["outcome"] == "dropped", "{why:?}");
    ensure!(has(&why[0]["reasons"], "null-result"), "{why:?}");
    let shown = env.show("t-null-member")?;
    for list in ["members", "pending", "evidence", "candidates"] {
        ensure!(len(&shown[list]) == 0, "{list}: {shown}");
    }
    Ok(())
}

// -- review-required-before-durable-promotion --

/// `true`: what an `auto` topic collects waits for review; approving it
/// writes what the directive asked for.
#[test]
fn review_required_true_proposes_for_an_auto_topic() -> Result<()> {
    let env = start()?;
    env.topic("r-review-member-evidence", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    let why = env.judged("r-review-member-evidence", &turn)?;
    ensure!(why[0]["outcome"] == "proposed", "{why:?}");
    ensure!(has(&why[0]["reasons"], "review-required"), "{why:?}");
    let shown = env.show("r-review-member-evidence")?;
    ensure!(
        len(&shown["members"]) == 0 && len(&shown["evidence"]) == 0,
        "{shown}"
    );
    ensure!(len(&shown["pending"]) == 1, "{shown}");
    let (s, body) = env.server.post(
        "/v1/workspaces/acme/topics/r-review-member-evidence/proposals/decide",
        &json!({"turn": turn, "approve": true}),
    )?;
    ensure!(s == 200, "{body}");
    let shown = env.show("r-review-member-evidence")?;
    ensure!(
        len(&shown["members"]) == 1 && len(&shown["evidence"]) == 1,
        "{shown}"
    );
    Ok(())
}

/// `false`: the topic's activation decides, as before: `auto` collects at
/// once, `gated` proposes.
#[test]
fn review_required_false_leaves_it_to_the_activation() -> Result<()> {
    let env = start()?;
    env.topic("r-auto-member", json!({}))?;
    env.topic("r-gated-member", json!({"activation": "gated"}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    let auto = env.judged("r-auto-member", &turn)?;
    ensure!(auto[0]["outcome"] == "collected", "{auto:?}");
    ensure!(auto[0]["directive"]["review_required"] == false, "{auto:?}");
    let gated = env.judged("r-gated-member", &turn)?;
    ensure!(gated[0]["outcome"] == "proposed", "{gated:?}");
    ensure!(len(&env.show("r-auto-member")?["members"]) == 1);
    ensure!(len(&env.show("r-gated-member")?["pending"]) == 1);
    Ok(())
}

/// The test directive's answers come from the topic's name: a name with
/// no field word gets the defaults (this guards the suite itself).
#[test]
fn the_test_directive_is_installed_and_asked() -> Result<()> {
    let env = start()?;
    env.topic("plain", json!({}))?;
    let turn = env.say("s1", "user", SIGHTING)?;
    let why = env.judged("plain", &turn)?;
    let generation = why[0]["policy_generation"].as_str().unwrap_or_default();
    if !generation.starts_with("test-topic-directive@") {
        bail!("asked {generation:?}, not the test directive: {why:?}");
    }
    ensure!(
        why[0]["directive"]
            == json!({
                "collection_mode": "watch-future-sources", "extraction_depth": "shallow",
                "output_targets": ["topic-membership"], "review_required": false,
            }),
        "{why:?}"
    );
    Ok(())
}
