//! The actor runtime end to end: the two-captures trigger scenario on a virtual
//! clock, supervision under injected panics, passivation, backpressure and
//! session-level extraction — through the real `Cairn` facade on real sled.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Result, bail, ensure};
use cairn::testing::Fault;
use cairn::{
    ActorConfig, Backpressure, Cairn, CairnConfig, CaptureReport, EntryFilter, EntryKind,
    ManualClock, Role, SessionKind, SessionSpec, SubjectKind, TurnInput,
};
use chrono::{DateTime, Duration, TimeZone, Utc};

fn at(hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 2, hour, minute, 0)
        .single()
        .unwrap_or_default()
}

/// A `Cairn` on a temp dir with a manual clock and no background ticker.
fn open(dir: &std::path::Path, actors: ActorConfig) -> Result<(Cairn, ManualClock)> {
    let clock = ManualClock::new(at(9, 0));
    let config = CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        actors: ActorConfig {
            tick_interval_secs: 0,
            ..actors
        },
        ..CairnConfig::default()
    };
    let cairn = Cairn::open_with_clock(config, Arc::new(clock.clone()))?;
    Ok((cairn, clock))
}

fn turn(session: &str, wc: &str, role: Role, content: &str) -> TurnInput {
    TurnInput::new(session, role, content).in_context(wc)
}

fn summary(reports: &[CaptureReport]) -> Vec<String> {
    reports
        .iter()
        .map(|r| format!("{} {} {}", r.at.format("%H:%M"), r.work_context, r.trigger))
        .collect()
}

/// "Rapid session switching" (docs/DESIGN.md, *Never twice for the same
/// material*): Henderson at 9:00 (5 turns),
/// Johnson at 9:03, back to Henderson at 9:08, DOC24 at 9:11, Johnson at 9:16
/// (3 turns), still on Johnson at 9:30. The expected outcome is exactly two
/// captures: Henderson at 9:30 (debounce of 30 minutes met) and Johnson at
/// 9:46 (idle 15 minutes). "Still Johnson" at 9:30 is a user question whose
/// tool-backed answer lands at 9:31, which is what makes 9:46 the idle time.
#[test]
fn henderson_johnson_two_captures_in_46_minutes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path(), ActorConfig::default())?;
    cairn.add_subject("firm", "henderson", SubjectKind::Project, None)?;
    cairn.add_subject("firm", "johnson", SubjectKind::Project, None)?;

    let (h, j, d) = ("henderson", "johnson", "doc24");
    let script: Vec<(u32, Vec<TurnInput>)> = vec![
        (
            0,
            vec![
                turn(
                    "h-1",
                    h,
                    Role::User,
                    "Henderson damages section: let's go with the price impact approach for loss causation.",
                ),
                turn("h-1", h, Role::Assistant, "Noted; price impact it is."),
                turn(
                    "h-1",
                    h,
                    Role::User,
                    "I still need to figure out the expert data timeline?",
                ),
                turn(
                    "h-1",
                    h,
                    Role::User,
                    "We need to draft subsections one to three.",
                ),
                turn(
                    "h-1",
                    h,
                    Role::User,
                    "Corrective disclosure alone was not enough.",
                ),
                turn("h-1", h, Role::User, "Time to start drafting."),
                turn("h-1", h, Role::Assistant, "Starting with subsection one."),
            ],
        ),
        (
            3,
            vec![
                turn("j-1", j, Role::User, "Anything new since yesterday?"),
                turn("j-1", j, Role::Assistant, "Nothing new."),
            ],
        ),
        (
            8,
            vec![
                turn("h-1", h, Role::User, "Back to the damages section."),
                turn("h-1", h, Role::Assistant, "Here is where we were."),
            ],
        ),
        (
            11,
            vec![turn("d-1", d, Role::User, "Just glancing at the draft.")],
        ),
        (
            16,
            vec![turn(
                "j-1",
                j,
                Role::User,
                "Let's go with mediation in May.",
            )],
        ),
        (
            17,
            vec![turn(
                "j-1",
                j,
                Role::User,
                "We need to send the mediator our brief.",
            )],
        ),
        (
            18,
            vec![turn("j-1", j, Role::User, "What is the filing deadline?")],
        ),
        (
            30,
            vec![turn(
                "j-1",
                j,
                Role::User,
                "Does the Henderson expert report change our timeline?",
            )],
        ),
        (
            31,
            vec![
                turn("j-1", j, Role::Assistant, "Checking the docket.").with_tool_call_id("call-1"),
                turn("j-1", j, Role::Tool, "{\"deadline\":\"2026-04-10\"}")
                    .with_tool_call_id("call-1"),
                turn(
                    "j-1",
                    j,
                    Role::Assistant,
                    "The deadline is April 10; the report does not move it.",
                ),
            ],
        ),
    ];
    let mut script: BTreeMap<u32, Vec<TurnInput>> = script.into_iter().collect();
    let mut captures = Vec::new();
    for minute in 0..=120 {
        clock.set(at(9, 0) + Duration::minutes(i64::from(minute)));
        if let Some(turns) = script.remove(&minute) {
            cairn.ingest("firm", &turns)?;
        }
        captures.extend(cairn.tick()?);
    }
    ensure!(
        summary(&captures)
            == [
                "09:30 henderson debounced_defocus",
                "09:46 johnson idle_timeout"
            ],
        "captures: {:?}",
        summary(&captures)
    );

    // Provenance: the Henderson capture covers h-1's turns 0–8, and its
    // decision points at the exact turn.
    let henderson = &captures[0];
    ensure!(henderson.spans.len() == 1 && henderson.spans[0].session == "h-1");
    ensure!((henderson.spans[0].from_seq, henderson.spans[0].to_seq) == (0, 8));
    let decision = henderson
        .entries
        .iter()
        .find(|e| e.kind == EntryKind::KeyDecision)
        .ok_or_else(|| anyhow::anyhow!("no decision in {henderson:?}"))?;
    let Some(prov) = decision.provenance.clone() else {
        bail!("decision without provenance: {decision:?}");
    };
    ensure!((prov.session.as_str(), prov.from_seq, prov.to_seq) == ("h-1", 0, 0));
    ensure!(
        henderson
            .entries
            .iter()
            .any(|e| e.kind == EntryKind::OpenQuestion)
    );
    ensure!(
        henderson
            .entries
            .iter()
            .any(|e| e.kind == EntryKind::WorkPhaseChange)
    );

    // Cross-conversation updates (docs/DESIGN.md): Johnson's capture
    // mentions Henderson, which the
    // Henderson context tracks: a cross-conversation update lands there.
    let updates = cairn.entries(
        "firm",
        &EntryFilter {
            kind: Some(EntryKind::CrossConversationUpdate),
            work_context: Some("henderson".to_owned()),
            ..EntryFilter::default()
        },
        None,
    )?;
    ensure!(updates.len() == 1, "{updates:?}");
    let detail = updates[0].entry.detail.clone().unwrap_or_default();
    ensure!(
        detail == "source: work context johnson, session j-1, turns 0-8",
        "{detail}"
    );

    // The durable per-context record agrees, and a manual capture now finds
    // nothing new in the captured contexts: no turn is processed twice. The
    // DOC24 glance never made its context dirty, so only a manual capture
    // takes it.
    ensure!(cairn.actors().captures("firm", "henderson")?.len() == 1);
    for wc in ["henderson", "johnson"] {
        let again = cairn.capture("firm", Some(wc))?;
        ensure!(again[0].spans.is_empty(), "{again:?}");
    }
    let glance = cairn.capture("firm", Some("doc24"))?;
    ensure!(glance[0].spans.len() == 1);
    Ok(())
}

/// The updates a work context holds about `billing`, oldest first.
fn billing_updates(cairn: &Cairn, wc: &str) -> Result<Vec<String>> {
    let mut updates = cairn.entries(
        "firm",
        &EntryFilter {
            kind: Some(EntryKind::CrossConversationUpdate),
            work_context: Some(wc.to_owned()),
            subject: Some("billing".to_owned()),
            ..EntryFilter::default()
        },
        None,
    )?;
    updates.reverse();
    Ok(updates
        .into_iter()
        .map(|v| v.entry.content.clone())
        .collect())
}

/// Cross-conversation updates (docs/DESIGN.md): a context that already holds
/// a live notice about a subject from the last quiet period (60 minutes by
/// default) gets no second one from later spans, and gets one again once the
/// period has passed; with the period at 0 every span writes one.
#[test]
fn a_recent_cross_conversation_update_holds_back_the_next() -> Result<()> {
    for (quiet, expected) in [(60, 2), (0, 4)] {
        let dir = tempfile::tempdir()?;
        let mut actors = ActorConfig::default();
        actors.triggers.cross_update_quiet_minutes = quiet;
        let (cairn, clock) = open(dir.path(), actors)?;
        cairn.add_subject("firm", "billing", SubjectKind::Project, None)?;
        // The ops context tracks billing.
        cairn.append_entry(
            "firm",
            &cairn::EntryInput::new(EntryKind::Fact, "Billing runs on the 1st")
                .about("billing")
                .in_context("ops"),
        )?;
        // Four spans in web mention billing: at 9:00, 9:20, 9:40 and 10:30,
        // each captured on its own.
        for (i, minute) in [0, 20, 40, 90].into_iter().enumerate() {
            clock.set(at(9, 0) + Duration::minutes(minute));
            let session = format!("w-{i}");
            cairn.ingest(
                "firm",
                &[
                    turn(
                        &session,
                        "web",
                        Role::User,
                        "Billing moves its export to Fridays; let's go with that.",
                    ),
                    turn(&session, "web", Role::Assistant, "Noted."),
                ],
            )?;
            let reports = cairn.capture("firm", Some("web"))?;
            ensure!(reports.iter().any(|r| !r.spans.is_empty()), "{reports:?}");
        }
        let updates = billing_updates(&cairn, "ops")?;
        ensure!(
            updates.len() == expected,
            "quiet {quiet}: {expected} updates expected, got {updates:?}"
        );
        // The held-back spans were still captured: nothing is taken twice.
        ensure!(billing_updates(&cairn, "web")?.is_empty());
        if quiet > 0 {
            ensure!(updates[0].contains("session w-0"), "{updates:?}");
            ensure!(updates[1].contains("session w-3"), "{updates:?}");
        }
    }
    Ok(())
}

/// Ingests one turn, retrying (same idempotency key) while the runtime says
/// the call can be retried. Returns the acknowledged seq.
fn ingest_until_acked(cairn: &Cairn, turn: &TurnInput, failures: &mut u32) -> Result<u64> {
    for _ in 0..50 {
        match cairn.ingest("w", std::slice::from_ref(turn)) {
            Ok(acks) => return Ok(acks[0].seq),
            Err(e) if e.is_retryable() => *failures += 1,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("turn never acknowledged")
}

/// Panics injected into a SessionActor (after its durable write, before its
/// answer) and a WorkContextActor (while observing, and mid-capture after
/// the entries but before the high-water mark) in the middle of a stream.
/// All actors share one arbiter thread, so a panic escaping to the thread
/// would stop session `b` too.
#[test]
fn panicking_actors_restart_and_lose_or_repeat_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, _clock) = open(
        dir.path(),
        ActorConfig {
            arbiters: 1,
            ..ActorConfig::default()
        },
    )?;
    let fault_session = |session: &str| Fault::PanicSessionAfterWrite {
        workspace: "w".into(),
        session: session.into(),
    };
    let mut failures_a = 0;
    let mut failures_b = 0;
    let mut capture_errors = 0;
    for i in 0..40u64 {
        match i {
            10 => cairn.actors().inject(fault_session("a")),
            20 => cairn.actors().inject(Fault::PanicContextObserve {
                workspace: "w".into(),
                work_context: "alpha".into(),
            }),
            25 => {
                cairn.actors().inject(Fault::PanicCaptureAfterEntries {
                    workspace: "w".into(),
                    work_context: "alpha".into(),
                });
                match cairn.capture("w", Some("alpha")) {
                    Err(e) if e.code() == "actor_restarted" => capture_errors += 1,
                    other => bail!("expected a restarted actor, got {other:?}"),
                }
                // The retry finishes the interrupted capture without repeating its entries.
                cairn.capture("w", Some("alpha"))?;
            }
            _ => {}
        }
        let a = turn(
            "a",
            "alpha",
            Role::User,
            &format!("Turn {i}: we decided on option {i}."),
        )
        .with_idempotency_key(&format!("a-{i}"));
        let b = turn(
            "b",
            "beta",
            Role::User,
            &format!("Turn {i}: we decided on plan {i}."),
        )
        .with_idempotency_key(&format!("b-{i}"));
        ensure!(ingest_until_acked(&cairn, &a, &mut failures_a)? == i);
        ensure!(ingest_until_acked(&cairn, &b, &mut failures_b)? == i);
    }
    cairn.capture("w", None)?;
    ensure!(failures_a == 1, "session a failed {failures_a} times");
    ensure!(failures_b == 0, "session b was not served throughout");
    ensure!(capture_errors == 1);
    ensure!(
        cairn.actors().stats().restarts >= 3,
        "{:?}",
        cairn.actors().stats()
    );

    for (session, wc, word) in [("a", "alpha", "option"), ("b", "beta", "plan")] {
        let transcript = cairn.transcript("w", session, 0, None, None)?;
        ensure!(
            transcript.len() == 40,
            "{session}: {} turns",
            transcript.len()
        );
        for (i, t) in transcript.iter().enumerate() {
            ensure!(t.content == format!("Turn {i}: we decided on {word} {i}."));
        }
        // Every turn's decision captured exactly once.
        let decisions = cairn.entries(
            "w",
            &EntryFilter {
                kind: Some(EntryKind::KeyDecision),
                work_context: Some(wc.to_owned()),
                ..EntryFilter::default()
            },
            None,
        )?;
        let mut seqs: Vec<u64> = decisions
            .iter()
            .filter_map(|d| d.entry.provenance.as_ref().map(|p| p.from_seq))
            .collect();
        seqs.sort_unstable();
        ensure!(seqs == (0..40).collect::<Vec<_>>(), "{wc}: {seqs:?}");
    }
    Ok(())
}

/// Idle actors are passivated on a tick; the next turn starts new ones whose
/// state is rebuilt from the store (two turns before, one after: dirty).
#[test]
fn passivated_actors_rebuild_their_state_from_the_store() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(
        dir.path(),
        ActorConfig {
            passivate_after_secs: 60,
            ..ActorConfig::default()
        },
    )?;
    cairn.ingest(
        "w",
        &[
            // Turns with something in them: the significance gate counts
            // them as activity (a bare "One." it would not collect at all).
            turn("s", "wc", Role::User, "First, the launch checklist."),
            turn("s", "wc", Role::User, "Second, the pricing page copy."),
        ],
    )?;
    ensure!(cairn.tick()?.is_empty());
    let live = cairn.actors().stats();
    ensure!((live.sessions, live.contexts) == (1, 1), "{live:?}");
    clock.advance(Duration::minutes(2));
    ensure!(cairn.tick()?.is_empty());
    let stats = cairn.actors().stats();
    ensure!((stats.sessions, stats.contexts) == (0, 0), "{stats:?}");
    ensure!(stats.passivated == 2);

    let acks = cairn.ingest(
        "w",
        &[turn("s", "wc", Role::User, "Third, the support rota.")],
    )?;
    ensure!(acks[0].seq == 2);
    clock.advance(Duration::minutes(16));
    let captures = cairn.tick()?;
    ensure!(
        summary(&captures) == ["09:18 wc idle_timeout"],
        "{:?}",
        summary(&captures)
    );
    ensure!((captures[0].spans[0].from_seq, captures[0].spans[0].to_seq) == (0, 2));
    Ok(())
}

/// A full mailbox is refused with a clear error and nothing of the refused
/// call is written; with `backpressure = "wait"` the same load gets through.
/// The same for callers on threads (`ingest`) and for tasks awaiting
/// `ingest_async` on one thread (the waiting must not block it).
#[test]
fn full_mailboxes_refuse_or_wait_by_configuration() -> Result<()> {
    for (mode, tasks) in [
        (Backpressure::Reject, false),
        (Backpressure::Wait, false),
        (Backpressure::Reject, true),
        (Backpressure::Wait, true),
    ] {
        let dir = tempfile::tempdir()?;
        let (cairn, _clock) = open(
            dir.path(),
            ActorConfig {
                mailbox_capacity: 1,
                backpressure: mode,
                wait_millis: 10_000,
                ..ActorConfig::default()
            },
        )?;
        cairn.ingest("w", &[turn("s", "wc", Role::User, "warm up")])?;
        cairn.actors().inject(Fault::StallWrite {
            workspace: "w".into(),
            session: "s".into(),
            millis: 400,
        });
        let results: Vec<Result<u64, cairn::CairnError>> = if tasks {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()?;
            runtime.block_on(futures_util::future::join_all((0..8).map(|i| {
                let cairn = cairn.clone();
                async move {
                    tokio::time::sleep(std::time::Duration::from_millis(i * 20)).await;
                    let turns = [turn("s", "wc", Role::User, &format!("t{i}"))];
                    cairn.ingest_async("w", &turns).await.map(|a| a[0].seq)
                }
            })))
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..8)
                    .map(|i| {
                        let cairn = cairn.clone();
                        scope.spawn(move || {
                            std::thread::sleep(std::time::Duration::from_millis(i * 20));
                            cairn
                                .ingest("w", &[turn("s", "wc", Role::User, &format!("t{i}"))])
                                .map(|a| a[0].seq)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Ok(u64::MAX)))
                    .collect()
            })
        };
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(e) if e.code() == "backpressure"))
            .count();
        ensure!(ok + refused == 8, "{mode:?}: {results:?}");
        match mode {
            Backpressure::Reject => ensure!(refused >= 1, "nothing was refused: {results:?}"),
            Backpressure::Wait => ensure!(refused == 0, "{results:?}"),
        }
        let stored = cairn.transcript("w", "s", 0, None, None)?;
        ensure!(
            stored.len() == 1 + ok,
            "{mode:?}: {} stored, {ok} acked",
            stored.len()
        );
    }
    Ok(())
}

/// Session extraction (docs/DESIGN.md): `before_reset` then `session_end`
/// extract once; a failure
/// is retried once (here by the `gateway_start` sweep) and recorded durably,
/// so a restart does not extract again; sub-agent sessions are skipped.
#[test]
fn sessions_are_extracted_once_with_one_retry() -> Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let (cairn, _clock) = open(dir.path(), ActorConfig::default())?;
        cairn.ingest(
            "w",
            &[turn("main-1", "wc", Role::User, "We decided to use sled.")],
        )?;
        cairn.before_reset("w", "main-1")?;
        cairn.session_end("w", "main-1")?;
        let handoffs = |cairn: &Cairn, session: &str| -> Result<usize> {
            Ok(cairn
                .entries(
                    "w",
                    &EntryFilter {
                        kind: Some(EntryKind::Handoff),
                        session: Some(session.to_owned()),
                        ..EntryFilter::default()
                    },
                    None,
                )?
                .len())
        };
        ensure!(handoffs(&cairn, "main-1")? == 1);

        cairn.bootstrap(
            "w",
            &SessionSpec {
                id: "sub-1".into(),
                work_context: Some("wc".into()),
                kind: SessionKind::Subagent,
                parent: Some("main-1".into()),
            },
        )?;
        cairn.ingest(
            "w",
            &[turn("sub-1", "wc", Role::User, "We decided to retry.")],
        )?;
        cairn.session_end("w", "sub-1")?;
        ensure!(handoffs(&cairn, "sub-1")? == 0);

        cairn.ingest(
            "w",
            &[turn("main-2", "wc", Role::User, "Let's go with Friday.")],
        )?;
        cairn.actors().inject(Fault::FailExtraction {
            workspace: "w".into(),
            session: "main-2".into(),
        });
        cairn.session_end("w", "main-2")?;
        ensure!(handoffs(&cairn, "main-2")? == 0);
    }
    // Restart: the sweep retries main-2 once and leaves the others alone.
    let (cairn, _clock) = open(dir.path(), ActorConfig::default())?;
    let report = cairn.gateway_start()?;
    let swept: Vec<(String, String)> = report
        .extracted
        .iter()
        .map(|s| (s.session.clone(), s.outcome.clone()))
        .collect();
    ensure!(
        swept == [("main-2".to_owned(), "extracted".to_owned())],
        "{swept:?}"
    );
    ensure!(cairn.gateway_start()?.extracted.is_empty());
    Ok(())
}

/// Pre-compaction always captures (even with nothing dirty), and the
/// nightly sweep fires once when the clock passes the configured time.
#[test]
fn pre_compaction_is_mandatory_and_nightly_sweeps_dirty_contexts() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path(), ActorConfig::default())?;
    cairn.ingest("w", &[turn("s", "wc", Role::User, "Hello.")])?;
    let report = cairn.before_compaction("w", "s")?.capture;
    ensure!(report.trigger.as_str() == "pre_compaction" && report.spans.len() == 1);
    let again = cairn.before_compaction("w", "s")?.capture;
    ensure!(again.spans.is_empty() && again.entries.is_empty());

    cairn.ingest(
        "w",
        &[turn("s", "wc", Role::Assistant, "Ran it.").with_tool_call_id("c1")],
    )?;
    cairn.tick()?;
    clock.set(at(23, 50));
    ensure!(cairn.tick()?.len() == 1, "idle fires first");
    cairn.ingest(
        "w",
        &[turn("s", "wc", Role::Assistant, "Ran it again.").with_tool_call_id("c2")],
    )?;
    clock.set(at(23, 55));
    ensure!(cairn.tick()?.is_empty());
    clock.set(at(23, 55) + Duration::hours(3) + Duration::minutes(10));
    let nightly = cairn.tick()?;
    ensure!(
        summary(&nightly) == ["03:05 wc nightly_sweep"],
        "{:?}",
        summary(&nightly)
    );
    Ok(())
}

/// Manual capture over HTTP and with `cairn capture`; the second finds
/// nothing new because the first moved the high-water mark.
#[test]
fn manual_capture_over_http_and_cli() -> Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let server = crate::support::Server::start(dir.path())?;
        let (status, _) = server.post(
            "/v1/workspaces/w/turns",
            &serde_json::json!({"turns": [
                {"session": "s1", "work_context": "db", "role": "user", "content": "We decided to use sled."}
            ]}),
        )?;
        ensure!(status == 200);
        let (status, body) = server.post(
            "/v1/workspaces/w/capture",
            &serde_json::json!({"work_context": "db"}),
        )?;
        ensure!(status == 200, "{body}");
        ensure!(body[0]["trigger"] == "manual_request", "{body}");
        ensure!(body[0]["entries"][1]["kind"] == "key_decision", "{body}");
        ensure!(
            body[0]["entries"][1]["provenance"]["session"] == "s1",
            "{body}"
        );
        let (status, body) = server.post("/v1/workspaces/nope/capture", &serde_json::json!({}))?;
        ensure!(status == 404, "{body}");
    }
    let out = std::process::Command::new(crate::support::cairn_bin())
        .envs(crate::support::backend_env(dir.path()))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--workspace", "w", "capture"])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        text.contains("capture of db (manual_request)")
            && text.contains("0 new entries from turns []"),
        "{text}"
    );
    Ok(())
}

/// Each stored turn is judged by the significance gate once. Ending a
/// session runs an extraction and reloads its work context's state; the
/// reload reuses the verdicts on the other sessions' uncaptured turns
/// instead of asking the gate (and logging a decision) again. Before this,
/// every session end re-judged the whole uncaptured context.
#[test]
fn each_turn_is_judged_once_across_session_ends() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, _clock) = open(dir.path(), ActorConfig::default())?;
    let generation = cairn.plugin_generation(cairn::WorldKind::SignificanceGate)?;
    let mut turns = 0u64;
    // A long-running session keeps the context's material uncaptured while
    // short sessions beside it start and end.
    for round in 0..5 {
        for i in 0..6 {
            cairn.ingest(
                "w",
                &[turn(
                    "long",
                    "wc",
                    Role::User,
                    &format!("step {round}.{i} of the rollout"),
                )],
            )?;
            turns += 1;
        }
        let short = format!("short-{round}");
        cairn.ingest(
            "w",
            &[turn(
                &short,
                "wc",
                Role::User,
                "a quick question about the deploy",
            )],
        )?;
        turns += 1;
        cairn.session_end("w", &short)?;
    }
    let counts = cairn.generation_counts(generation.as_str())?;
    ensure!(
        counts.decisions == turns,
        "{} significance decisions for {turns} turns",
        counts.decisions
    );
    Ok(())
}
