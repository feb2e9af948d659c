//! Maintenance rules, each driven by the virtual clock; run log, undo,
//! restore, dry run and replay.

use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use expect_test::{Expect, expect};

use super::*;
use crate::search::{SearchFilters, SearchOptions, SearchService};
use crate::*;

struct Fixture {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    memory: Memory,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with(MemoryConfig::default())
    }

    fn with(config: MemoryConfig) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap());
        let memory = crate::testing::memory(dir.path(), config, Arc::new(clock.clone())).unwrap();
        Fixture {
            _dir: dir,
            clock,
            memory,
        }
    }

    fn ws(&self) -> Workspace {
        self.memory.workspace("acme").unwrap()
    }

    fn days(&self, n: i64) {
        self.clock.advance(Duration::days(n));
    }
}

fn entry(id: &str, kind: EntryKind, content: &str) -> EntryInput {
    let mut e = EntryInput::new(kind, content);
    e.id = Some(id.to_owned());
    e
}

fn run(ws: &Workspace) -> MaintenanceReport {
    ws.maintain(&MaintainOptions::default()).unwrap()
}

fn dry(ws: &Workspace) -> MaintenanceReport {
    ws.maintain(&MaintainOptions {
        dry_run: true,
        ..MaintainOptions::default()
    })
    .unwrap()
}

/// One line per change: rule, item, reason.
fn check(report: &MaintenanceReport, expect: Expect) {
    let mut text = format!(
        "run={} dry={}\n",
        report.run.as_deref().unwrap_or("-"),
        report.dry_run
    );
    for c in &report.changes {
        text.push_str(&format!("{} {}: {}\n", c.rule, c.action.item(), c.reason));
    }
    expect.assert_eq(&text);
}

/// The live entries, oldest first, as `id kind`.
fn live(ws: &Workspace) -> Vec<String> {
    let mut out: Vec<String> = ws
        .entries(&EntryFilter::default())
        .unwrap()
        .into_iter()
        .map(|v| format!("{} {}", v.entry.id, v.entry.kind))
        .collect();
    out.sort();
    out
}

/// Every key and value of every collection of the workspace.
fn dump(ws: &Workspace) -> Vec<(Collection, Vec<u8>, Vec<u8>)> {
    let all = [
        Collection::Sessions,
        Collection::Turns,
        Collection::Idempotency,
        Collection::WorkContextSessions,
        Collection::Entries,
        Collection::Replacements,
        Collection::Subjects,
        Collection::SubjectAliases,
        Collection::Tombstones,
        Collection::State,
        Collection::Topics,
        Collection::Summaries,
        Collection::Maintenance,
    ];
    let mut out = Vec::new();
    for c in all {
        for (k, v) in ws.store.scan_prefix(c, b"").unwrap() {
            out.push((c, k, v));
        }
    }
    out
}

#[test]
fn decay_marks_entries_past_their_time_to_live_once() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&entry(
        "ccu1",
        EntryKind::CrossConversationUpdate,
        "Billing changed in another conversation",
    ))
    .unwrap();
    ws.append_entry(&entry("f1", EntryKind::Fact, "The API is v2"))
        .unwrap();
    fx.days(6);
    check(
        &run(&ws),
        expect![[r#"
        run=- dry=false
    "#]],
    );
    fx.days(2);
    check(
        &run(&ws),
        expect![[r#"
        run=run-1 dry=false
        decay entry:ccu1: cross_conversation_update ccu1 past its 7-day time-to-live (captured 2026-03-02, decayed 2026-03-09)
    "#]],
    );
    assert_eq!(live(&ws), ["f1 fact"]);
    assert!(matches!(
        ws.entry("ccu1").unwrap().status,
        EntryStatus::Expired { .. }
    ));
    assert!(ws.lifecycle().unwrap().decayed.contains_key("ccu1"));
    // Decayed once: the next run has nothing to do.
    fx.days(1);
    assert!(run(&ws).changes.is_empty());
    assert_eq!(ws.maintenance_runs().unwrap().len(), 1);
}

#[test]
fn open_questions_with_a_deadline_become_obligations_after_14_days() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turn(&TurnInput::new(
        "s1",
        Role::User,
        "Which vendor signs by March 20?",
    ))
    .unwrap();
    ws.append_entry(
        &entry(
            "q1",
            EntryKind::OpenQuestion,
            "Which vendor signs by March 20?",
        )
        .about("vendor")
        .from_turns("s1", 0, 0),
    )
    .unwrap();
    // No deadline of its own, but a live entry on its subject names one.
    ws.append_entry(&entry("q2", EntryKind::Question, "Who reviews the contract?").about("vendor"))
        .unwrap();
    ws.append_entry(&entry("t1", EntryKind::Task, "Contract review is due Friday").about("vendor"))
        .unwrap();
    // No deadline anywhere.
    ws.append_entry(&entry(
        "q3",
        EntryKind::Question,
        "Should we rename the repo?",
    ))
    .unwrap();
    fx.days(13);
    check(
        &run(&ws),
        expect![[r#"
        run=- dry=false
    "#]],
    );
    fx.days(1);
    let report = run(&ws);
    check(
        &report,
        expect![[r#"
        run=run-1 dry=false
        promote_obligation entry:q1: open_question q1 unresolved for 14 days (rule: 14 days) and linked to a deadline: its own text names a date or deadline
        promote_obligation entry:q2: question q2 unresolved for 14 days (rule: 14 days) and linked to a deadline: entry t1 about vendor names a date or deadline
    "#]],
    );
    let Action::Promote { into, kind, .. } = &report.changes[0].action else {
        panic!("{report:?}")
    };
    assert_eq!(*kind, EntryKind::Obligation);
    let obligation = ws.entry(into).unwrap();
    assert!(obligation.is_live());
    assert_eq!(obligation.entry.content, "Which vendor signs by March 20?");
    assert_eq!(obligation.entry.replaces.as_deref(), Some("q1"));
    assert_eq!(
        obligation.entry.provenance,
        Some(Provenance {
            session: "s1".into(),
            from_seq: 0,
            to_seq: 0
        })
    );
    assert_eq!(ws.history("q1").unwrap().len(), 2);
    assert!(live(&ws).iter().any(|l| l.ends_with("q3 question")));
    assert!(!live(&ws).iter().any(|l| l.starts_with("q1 ")));
    // An obligation does not decay.
    fx.days(400);
    assert!(ws.entry(into).unwrap().decay_at.is_none());
}

#[test]
fn decisions_stated_in_three_sessions_become_directives() {
    let fx = Fixture::new();
    let ws = fx.ws();
    for s in ["s1", "s2", "s3", "s4"] {
        ws.append_turn(&TurnInput::new(s, Role::User, "ok"))
            .unwrap();
    }
    ws.append_entry(
        &entry(
            "d1",
            EntryKind::KeyDecision,
            "Retries use a queue with backoff",
        )
        .about("auth")
        .from_turns("s1", 0, 0),
    )
    .unwrap();
    fx.days(1);
    // A restatement in another session (a separate entry).
    ws.append_entry(
        &entry(
            "d2",
            EntryKind::Decision,
            "Retries use a queue with exponential backoff",
        )
        .about("auth")
        .from_turns("s2", 0, 0),
    )
    .unwrap();
    // Something else about the same subject does not count.
    ws.append_entry(
        &entry("d3", EntryKind::Decision, "Tokens expire after one hour")
            .about("auth")
            .from_turns("s4", 0, 0),
    )
    .unwrap();
    check(
        &run(&ws),
        expect![[r#"
        run=- dry=false
    "#]],
    );
    fx.days(1);
    // The third session: a correction of d2 (its chain counts too).
    ws.append_entry(
        &entry(
            "d2b",
            EntryKind::Decision,
            "Retries use a queue with exponential backoff, max 5",
        )
        .about("auth")
        .from_turns("s3", 0, 0)
        .replacing("d2"),
    )
    .unwrap();
    let report = run(&ws);
    check(
        &report,
        expect![[r#"
        run=run-1 dry=false
        promote_directive entry:d2b: decision d2b stated in 3 sessions (s1, s2, s3) (rule: 3 sessions)
    "#]],
    );
    let live = live(&ws);
    assert!(live.iter().any(|l| l.ends_with(" directive")), "{live:?}");
    assert!(live.contains(&"d3 decision".to_owned()));
    // Promoted once.
    assert!(run(&ws).changes.is_empty());
}

#[test]
fn old_material_is_archived_out_of_the_live_view_and_search_and_restored() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turn(
        &TurnInput::new("s-old", Role::User, "the old migration plan").in_context("old"),
    )
    .unwrap();
    ws.append_entry(&entry("t-old", EntryKind::Task, "Finish the old migration").in_context("old"))
        .unwrap();
    ws.append_entry(
        &entry("f-old", EntryKind::Fact, "The old cluster runs Postgres 12").in_context("old"),
    )
    .unwrap();
    ws.append_entry(
        &entry("p-old", EntryKind::Task, "Keep the migration runbook").in_context("old"),
    )
    .unwrap();
    ws.pin("p-old").unwrap();
    ws.append_entry(&entry("v1", EntryKind::Fact, "Deploys happen on Tuesdays"))
        .unwrap();
    ws.append_entry(&entry("v2", EntryKind::Fact, "Deploys happen on Thursdays").replacing("v1"))
        .unwrap();
    fx.days(60);
    // Still active: a recent task in another context.
    ws.append_turn(
        &TurnInput::new("s-new", Role::User, "the new migration plan").in_context("new"),
    )
    .unwrap();
    ws.append_entry(&entry("t-new", EntryKind::Task, "Finish the new migration").in_context("new"))
        .unwrap();
    fx.days(31);
    let report = run(&ws);
    check(
        &report,
        expect![[r#"
        run=run-1 dry=false
        archive_session session:s-old: session s-old's last turn (0) is 91 days old (rule: 90 days)
        archive_entry entry:t-old: task t-old is 91 days old (rule: 90 days), live, in work context old quiet since 2026-03-02
        archive_entry entry:v1: fact v1 is 91 days old (rule: 90 days), replaced by v2
    "#]],
    );
    assert_eq!(
        live(&ws),
        ["f-old fact", "p-old task", "t-new task", "v2 fact"]
    );
    assert!(matches!(
        ws.entry("t-old").unwrap().status,
        EntryStatus::Archived { .. }
    ));

    let search = SearchService::new(fx.memory.clone(), None);
    search.catch_up().unwrap();
    let ids = |filters: SearchFilters| -> Vec<String> {
        let mut ids: Vec<String> = search
            .search(
                "acme",
                "migration",
                &SearchOptions::new(10).filters(filters),
            )
            .unwrap()
            .hits
            .into_iter()
            .map(|h| h.id)
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(SearchFilters::default()), ["p-old", "s-new:0", "t-new"]);
    let archived = SearchFilters {
        include_archived: true,
        ..SearchFilters::default()
    };
    assert_eq!(
        ids(archived.clone()),
        ["p-old", "s-new:0", "s-old:0", "t-new", "t-old"]
    );

    // Restore brings it back, and keeps it out of the next runs' archiving.
    let restored = ws.restore(&ArchivedItem::Entry("t-old".into())).unwrap();
    check(
        &restored,
        expect![[r#"
        run=run-2 dry=false
        restore entry:t-old: entry t-old restored on request (archived by run-1)
    "#]],
    );
    assert!(ws.entry("t-old").unwrap().is_live());
    assert!(ids(SearchFilters::default()).contains(&"t-old".to_owned()));
    fx.days(1);
    assert!(run(&ws).changes.is_empty());
    // Undoing the restore archives it again.
    ws.undo_maintenance("run-2").unwrap();
    assert!(matches!(
        ws.entry("t-old").unwrap().status,
        EntryStatus::Archived { .. }
    ));
    let err = ws
        .restore(&ArchivedItem::Entry("t-new".into()))
        .unwrap_err();
    assert_eq!(err.code(), "not_archived");
    // A session that goes on is archived only up to its old turns.
    ws.append_turn(
        &TurnInput::new("s-old", Role::User, "the old migration is back").in_context("old"),
    )
    .unwrap();
    search.catch_up().unwrap();
    assert!(ids(SearchFilters::default()).contains(&"s-old:1".to_owned()));
}

#[test]
fn dry_run_reports_the_same_changes_and_writes_nothing() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turn(&TurnInput::new("s1", Role::User, "due by Friday?"))
        .unwrap();
    ws.append_entry(&entry(
        "q1",
        EntryKind::OpenQuestion,
        "Which vendor, due by Friday?",
    ))
    .unwrap();
    ws.append_entry(&entry(
        "c1",
        EntryKind::CrossConversationUpdate,
        "x changed",
    ))
    .unwrap();
    fx.days(100);
    let before = dump(&ws);
    let preview = dry(&ws);
    assert_eq!(dump(&ws), before, "a dry run wrote something");
    assert!(preview.run.is_none() && preview.dry_run);
    let real = run(&ws);
    assert_eq!(preview.changes, real.changes);
    assert_eq!(real.run.as_deref(), Some("run-1"));
    assert_ne!(dump(&ws), before);
}

#[test]
fn undo_reverses_exactly_one_run() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&entry("q1", EntryKind::OpenQuestion, "Sign by April 2?"))
        .unwrap();
    ws.append_entry(&entry(
        "c1",
        EntryKind::CrossConversationUpdate,
        "x changed",
    ))
    .unwrap();
    let start = dump(&ws);
    fx.days(15);
    let first = run(&ws);
    assert_eq!(first.changes.len(), 2);
    let after_first = dump(&ws);
    ws.append_entry(&entry(
        "c2",
        EntryKind::CrossConversationUpdate,
        "y changed",
    ))
    .unwrap();
    fx.days(8);
    let second = run(&ws);
    check(
        &second,
        expect![[r#"
        run=run-2 dry=false
        decay entry:c2: cross_conversation_update c2 past its 7-day time-to-live (captured 2026-03-17, decayed 2026-03-24)
    "#]],
    );
    let Action::Promote { into, .. } = first.changes[0].action.clone() else {
        panic!("{first:?}")
    };
    // Undo run-1 only: the question is live again, the obligation erased
    // (with a tombstone), c1's decay mark gone; run-2's mark stays.
    let undone = ws.undo_maintenance("run-1").unwrap();
    assert_eq!(undone.undone.as_ref().unwrap().tombstones.len(), 1);
    assert!(ws.entry("q1").unwrap().is_live());
    assert_eq!(ws.entry(&into).unwrap_err().code(), "entry_not_found");
    let lc = ws.lifecycle().unwrap();
    assert!(!lc.decayed.contains_key("c1") && lc.decayed.contains_key("c2"));
    assert_eq!(ws.tombstones().unwrap().len(), 1);
    // Twice is refused; so is an unknown run.
    assert_eq!(
        ws.undo_maintenance("run-1").unwrap_err().code(),
        "undo_conflict"
    );
    assert_eq!(
        ws.undo_maintenance("run-9").unwrap_err().code(),
        "run_not_found"
    );
    assert_eq!(ws.undo_maintenance("nine").unwrap_err().code(), "invalid");
    // Undoing run-2 as well leaves every collection as before run-1, but
    // for the run records, c2, the tombstone and q1's subject-free log.
    ws.undo_maintenance("run-2").unwrap();
    let strip = |d: Vec<(Collection, Vec<u8>, Vec<u8>)>| -> Vec<(Collection, Vec<u8>, Vec<u8>)> {
        d.into_iter()
            .filter(|(c, k, _)| {
                !(matches!(c, Collection::Maintenance | Collection::Tombstones)
                    || (*c == Collection::Entries && k.as_slice() == b"c2"))
            })
            .collect()
    };
    assert_eq!(strip(dump(&ws)), strip(start));
    assert_ne!(after_first, dump(&ws));
}

#[test]
fn undo_is_refused_when_a_later_run_or_entry_builds_on_it() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&entry("q1", EntryKind::OpenQuestion, "Sign by April 2?"))
        .unwrap();
    ws.append_entry(&entry("t1", EntryKind::Task, "Old chore").in_context("old"))
        .unwrap();
    fx.days(15);
    let first = run(&ws);
    let Action::Promote { into, .. } = first.changes[0].action.clone() else {
        panic!("{first:?}")
    };
    // The obligation is answered: its promotion cannot be undone.
    ws.append_entry(&entry("a1", EntryKind::Decision, "Vendor A signs").replacing(&into))
        .unwrap();
    let err = ws.undo_maintenance("run-1").unwrap_err();
    assert_eq!(err.code(), "undo_conflict");
    assert!(err.to_string().contains("a1"), "{err}");
    fx.days(80);
    // run-2 archives t1.
    let second = run(&ws);
    assert!(second.changes.iter().any(|c| c.action.item() == "entry:t1"));
    ws.restore(&ArchivedItem::Entry("t1".into())).unwrap();
    let err = ws.undo_maintenance("run-2").unwrap_err();
    assert_eq!(err.code(), "undo_conflict");
    assert!(err.to_string().contains("run-3"), "{err}");
}

#[test]
fn the_marks_are_a_replay_of_the_runs() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turn(&TurnInput::new("s1", Role::User, "hello"))
        .unwrap();
    ws.append_entry(&entry(
        "c1",
        EntryKind::CrossConversationUpdate,
        "x changed",
    ))
    .unwrap();
    ws.append_entry(&entry("t1", EntryKind::Task, "A chore"))
        .unwrap();
    fx.days(100);
    run(&ws);
    ws.restore(&ArchivedItem::Session("s1".into())).unwrap();
    ws.restore(&ArchivedItem::Entry("t1".into())).unwrap();
    ws.undo_maintenance("run-3").unwrap();
    let runs = ws.maintenance_runs().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(Lifecycle::replay(&runs), ws.lifecycle().unwrap());
    assert_eq!(ws.lifecycle().unwrap().restored_sessions.len(), 1);
}

#[test]
fn settings_turn_rules_off() {
    let mut config = MemoryConfig::default();
    config.maintenance.obligation_after_days = 0;
    config.maintenance.archive_after_days = 0;
    let fx = Fixture::with(config);
    let ws = fx.ws();
    ws.append_entry(&entry("q1", EntryKind::OpenQuestion, "Sign by April 2?"))
        .unwrap();
    fx.days(100);
    check(
        &run(&ws),
        expect![[r#"
        run=run-1 dry=false
        decay entry:q1: open_question q1 past its 60-day time-to-live (captured 2026-03-02, decayed 2026-05-01)
    "#]],
    );
}

#[test]
fn deadlines_are_dates_or_deadline_words() {
    for yes in [
        "Sign by Friday?",
        "due next week",
        "What is the deadline",
        "before the end of the quarter",
        "launch on April 1",
        "ship 2026-04-01",
        "the 3rd of May",
    ] {
        assert!(names_deadline(yes), "{yes}");
    }
    for no in [
        "Should we rename the repo?",
        "by the way",
        "march on",
        "may we",
    ] {
        assert!(!names_deadline(no), "{no}");
    }
}

#[test]
fn the_report_lists_contradictions_and_changes_nothing_for_them() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let older = ws
        .append_entry(
            &EntryInput::new(EntryKind::Decision, "The beta launches on April 1").about("beta"),
        )
        .unwrap();
    fx.days(1);
    let newer = ws
        .append_entry(
            &EntryInput::new(EntryKind::Decision, "The beta launches on April 8").about("beta"),
        )
        .unwrap();
    let report = ws.maintain(&MaintainOptions::default()).unwrap();
    assert_eq!(report.contradictions.len(), 1, "{report:?}");
    assert_eq!(report.contradictions[0].older, older.id);
    assert_eq!(report.contradictions[0].newer, newer.id);
    // Listed only: both entries stay live.
    assert!(ws.entry(&older.id).unwrap().is_live());
    assert!(ws.entry(&newer.id).unwrap().is_live());
}

// ----- settle ------------------------------------------------------------

/// A captured fact as capture writes it, said now: a user turn of session
/// `s1`, and the entry with its attribute and speaker in the detail and
/// that turn as its provenance.
fn fact(
    ws: &Workspace,
    id: &str,
    content: &str,
    attribute: &str,
    speaker: Option<&str>,
) -> EntryInput {
    fact_in(ws, "s1", id, content, attribute, speaker)
}

fn fact_in(
    ws: &Workspace,
    session: &str,
    id: &str,
    content: &str,
    attribute: &str,
    speaker: Option<&str>,
) -> EntryInput {
    let wc = if session == "s1" { "default" } else { session };
    let ack = ws
        .append_turn(&TurnInput::new(session, Role::User, content).in_context(wc))
        .unwrap();
    let about = match speaker {
        Some(s) => format!("(fact: {attribute}, about {s})"),
        None => format!("(fact: {attribute})"),
    };
    entry(id, EntryKind::Fact, content)
        .in_context(wc)
        .from_turns(session, ack.seq, ack.seq)
        .with_detail(&format!(
            "heuristic rule \"x\" {about}, trigger session_end"
        ))
}

#[test]
fn settle_replaces_an_older_fact_and_undo_restores_it() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&fact(
        &ws,
        "porto",
        "Ana lives in Porto.",
        "residence",
        Some("Ana"),
    ))
    .unwrap();
    ws.append_entry(&fact(
        &ws,
        "likes",
        "Ana loves the river walks.",
        "likes",
        Some("Ana"),
    ))
    .unwrap();
    fx.days(30);
    ws.append_entry(&fact(
        &ws,
        "lisbon",
        "Ana moved to Lisbon last spring.",
        "residence",
        Some("Ana"),
    ))
    .unwrap();
    let search = SearchService::new(fx.memory.clone(), None);
    search.catch_up().unwrap();
    let found = |query: &str| -> Vec<String> {
        search.catch_up().unwrap();
        search
            .search("acme", query, &SearchOptions::new(10))
            .unwrap()
            .hits
            .into_iter()
            .map(|h| h.id)
            .filter(|id| !id.starts_with("s1:"))
            .collect()
    };
    assert_eq!(found("Porto"), ["porto"]);

    let report = run(&ws);
    check(
        &report,
        expect![[r#"
            run=run-1 dry=false
            settle entry:porto: fact porto (2026-03-02) is replaced by the newer fact lisbon (2026-04-01, turn s1:2) about the same person: residence holds one value at a time, and the newer says another value
        "#]],
    );
    assert_eq!(
        report.changes[0].action,
        Action::Settle {
            entry: "porto".into(),
            by: "lisbon".into(),
            attribute: Attribute::Residence,
            restated: false,
        }
    );
    assert_eq!(
        ws.entry("porto").unwrap().status,
        EntryStatus::Replaced {
            by: "lisbon".into()
        }
    );
    assert_eq!(live(&ws), ["likes fact", "lisbon fact"]);
    let chain: Vec<String> = ws
        .history("lisbon")
        .unwrap()
        .into_iter()
        .map(|v| v.entry.id.clone())
        .collect();
    assert_eq!(chain, ["porto", "lisbon"]);
    assert_eq!(
        ws.history("porto").unwrap().len(),
        2,
        "the chain from the old fact"
    );
    assert!(found("Porto").is_empty(), "a settled fact leaves search");
    let brief = ws.briefing(None).unwrap();
    assert!(
        brief
            .text
            .contains("### Changed (last 14 days)\n- Ana: residence Porto → Lisbon (run-1, 2026-04-01) [lisbon; porto; s1:2]\n"),
        "{}",
        brief.text
    );
    // Nothing left to settle.
    assert!(run(&ws).changes.is_empty());

    let undone = ws.undo_maintenance("run-1").unwrap();
    assert!(undone.undone.is_some());
    assert_eq!(ws.entry("porto").unwrap().status, EntryStatus::Live);
    assert_eq!(live(&ws), ["likes fact", "lisbon fact", "porto fact"]);
    assert_eq!(found("Porto"), ["porto"]);
    assert!(!ws.briefing(None).unwrap().text.contains("### Changed"));
    assert_eq!(
        Lifecycle::replay(&ws.maintenance_runs().unwrap()),
        ws.lifecycle().unwrap()
    );
    // And the next run settles it again.
    assert_eq!(run(&ws).changes.len(), 1);
}

#[test]
fn a_restatement_leaves_one_live_fact_and_says_no_change() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&fact(
        &ws,
        "w1",
        "Ana works at Acme Labs.",
        "work",
        Some("Ana"),
    ))
    .unwrap();
    fx.days(1);
    ws.append_entry(&fact(
        &ws,
        "w2",
        "Ana still works at acme labs, happily.",
        "work",
        Some("Ana"),
    ))
    .unwrap();
    let report = run(&ws);
    assert!(matches!(
        report.changes[..],
        [Change {
            rule: Rule::Settle,
            action: Action::Settle { restated: true, .. },
            ..
        }]
    ));
    assert!(
        report.changes[0]
            .reason
            .ends_with("the newer says the same value again")
    );
    assert_eq!(live(&ws), ["w2 fact"]);
    // A restatement is not a change the briefing reports.
    assert!(!ws.briefing(None).unwrap().text.contains("### Changed"));
}

#[test]
fn pinned_facts_are_never_settled() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&fact(
        &ws,
        "p1",
        "The user lives in Porto.",
        "residence",
        None,
    ))
    .unwrap();
    ws.append_entry(&fact(
        &ws,
        "p2",
        "The user lives in Braga.",
        "residence",
        None,
    ))
    .unwrap();
    ws.pin("p1").unwrap();
    fx.days(1);
    ws.append_entry(&fact(
        &ws,
        "p3",
        "The user moved to Lisbon.",
        "residence",
        None,
    ))
    .unwrap();
    let report = run(&ws);
    let settled: Vec<String> = report.changes.iter().map(|c| c.action.item()).collect();
    assert_eq!(settled, ["entry:p2"]);
    assert_eq!(live(&ws), ["p1 fact", "p3 fact"]);
}

#[test]
fn a_dry_run_settles_nothing() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&fact(
        &ws,
        "a",
        "Ana lives in Porto.",
        "residence",
        Some("Ana"),
    ))
    .unwrap();
    fx.days(1);
    ws.append_entry(&fact(
        &ws,
        "b",
        "Ana lives in Lisbon.",
        "residence",
        Some("Ana"),
    ))
    .unwrap();
    let before = dump(&ws);
    let preview = dry(&ws);
    assert_eq!(dump(&ws), before, "a dry run wrote something");
    assert_eq!(preview.changes.len(), 1);
    assert_eq!(preview.changes[0].rule, Rule::Settle);
    assert_eq!(live(&ws), ["a fact", "b fact"]);
    assert_eq!(run(&ws).changes, preview.changes);
}

#[test]
fn facts_about_different_people_are_not_settled() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.add_subject("ana", SubjectKind::Person, Some("Ana"))
        .unwrap();
    // Ana (a registered subject), Jon (a name only), and the anonymous
    // users of two work contexts.
    ws.append_entry(
        &fact(&ws, "ana", "Ana lives in Porto.", "residence", Some("Ana")).about("ana"),
    )
    .unwrap();
    ws.append_entry(&fact(
        &ws,
        "jon",
        "Jon lives in Berlin.",
        "residence",
        Some("Jon"),
    ))
    .unwrap();
    ws.append_entry(&fact_in(
        &ws,
        "a",
        "u-a",
        "The user lives in Paris.",
        "residence",
        None,
    ))
    .unwrap();
    ws.append_entry(&fact_in(
        &ws,
        "b",
        "u-b",
        "The user lives in Rome.",
        "residence",
        None,
    ))
    .unwrap();
    // Someone else's residence has no value: nothing to settle with.
    ws.append_entry(&fact(
        &ws,
        "sis",
        "Ana's sister moved to Madrid.",
        "residence",
        Some("Ana"),
    ))
    .unwrap();
    fx.days(1);
    assert!(run(&ws).changes.is_empty());
    // The registered speaker under another alias is the same person.
    fx.days(1);
    ws.append_entry(&fact(
        &ws,
        "ana2",
        "Ana moved to Faro.",
        "residence",
        Some("ANA"),
    ))
    .unwrap();
    let settled: Vec<String> = run(&ws).changes.iter().map(|c| c.action.item()).collect();
    assert_eq!(settled, ["entry:ana"]);
}

#[test]
fn multi_valued_attributes_are_never_settled() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&fact(&ws, "l1", "Ana loves jazz.", "likes", Some("Ana")))
        .unwrap();
    fx.days(1);
    ws.append_entry(&fact(&ws, "l2", "Ana loves hiking.", "likes", Some("Ana")))
        .unwrap();
    // A fact a host wrote, with no capture detail, is not read either.
    ws.append_entry(&entry("h1", EntryKind::Fact, "Ana lives in Porto."))
        .unwrap();
    ws.append_entry(&entry("h2", EntryKind::Fact, "Ana lives in Faro."))
        .unwrap();
    assert!(run(&ws).changes.is_empty());
    assert_eq!(live(&ws).len(), 4);
}
