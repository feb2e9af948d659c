//! Unit tests of the memory core on real sled in a temp dir.

use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use proptest::prelude::*;

use crate::*;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    clock: ManualClock,
    memory: Memory,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap());
        let memory =
            crate::testing::memory(&path, MemoryConfig::default(), Arc::new(clock.clone()))
                .unwrap();
        Fixture {
            _dir: dir,
            path,
            clock,
            memory,
        }
    }

    fn ws(&self) -> Workspace {
        self.memory.workspace("acme").unwrap()
    }
}

fn reopen(fx: Fixture) -> Fixture {
    let Fixture {
        _dir,
        path,
        clock,
        memory,
    } = fx;
    drop(memory);
    let memory =
        crate::testing::memory(&path, MemoryConfig::default(), Arc::new(clock.clone())).unwrap();
    Fixture {
        _dir,
        path,
        clock,
        memory,
    }
}

fn user(session: &str, text: &str) -> TurnInput {
    TurnInput::new(session, Role::User, text)
}

/// Turn `i` of session `s1`, appended with idempotency key `k{i}`.
fn keyed(i: usize) -> TurnInput {
    user("s1", &format!("turn {i}")).with_idempotency_key(&format!("k{i}"))
}

/// Turns stored as JSON (before the binary record) still read: a session
/// whose older turns are JSON and newer ones binary reads whole, through
/// every reader, and appends go on from its last turn.
#[test]
fn turns_written_as_json_still_read() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turns(&[user("s1", "one"), user("s1", "two")])
        .unwrap();
    let written = ws.transcript("s1", 0, None).unwrap();
    // Rewrite both as JSON records, the format before version 1.
    for t in &written {
        let key = record::turn_key("s1", t.seq);
        let json = crate::memory::encode(t).unwrap();
        assert_eq!(json[0], b'{');
        ws.raw_write_for_tests(crate::store::Collection::Turns, &key, Some(&json))
            .unwrap();
    }
    fx.memory.evict("acme");
    assert_eq!(ws.transcript("s1", 0, None).unwrap(), written);
    assert_eq!(ws.turn("s1", 1).unwrap().as_ref(), Some(&written[1]));
    let head = ws.session("s1").unwrap();
    assert_eq!(
        (head.next_seq, head.last_turn_at),
        (2, Some(written[1].timestamp))
    );
    assert_eq!(ws.append_turn(&user("s1", "three")).unwrap().seq, 2);
    let all = ws.recent_turns("s1", 3).unwrap();
    assert_eq!(all[..2], written[..]);
    assert_eq!(all[2].content, "three");
}

#[test]
fn sequence_numbers_and_idempotency() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let a = ws
        .append_turn(&user("s1", "one").with_idempotency_key("k1"))
        .unwrap();
    let b = ws.append_turn(&user("s1", "two")).unwrap();
    let again = ws
        .append_turn(&user("s1", "one (retry)").with_idempotency_key("k1"))
        .unwrap();
    assert_eq!((a.seq, b.seq), (0, 1));
    assert_eq!(
        again,
        Ack {
            seq: 0,
            duplicate: true
        }
    );
    let turns = ws.transcript("s1", 0, None).unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].content, "one");
    assert_eq!(turns[0].content_hash, record::content_hash("one"));
    // Same key twice inside one batch: written once.
    let acks = ws
        .append_turns(&[
            user("s2", "x").with_idempotency_key("k"),
            user("s2", "x").with_idempotency_key("k"),
        ])
        .unwrap();
    assert_eq!(
        acks,
        vec![
            Ack {
                seq: 0,
                duplicate: false
            },
            Ack {
                seq: 0,
                duplicate: true
            }
        ]
    );
    assert_eq!(ws.session("s2").unwrap().next_seq, 1);
}

/// A session that ends lets go of its idempotency keys: they are not held
/// for the life of the process, and a retry that comes after the end is
/// still answered with the turn it names (its keys are read again).
#[test]
fn an_ended_session_lets_go_of_its_keys() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turns(&(0..3).map(keyed).collect::<Vec<_>>())
        .unwrap();
    ws.append_turn(&user("s2", "other").with_idempotency_key("o"))
        .unwrap();
    assert_eq!(ws.heads.keys.held(), 4);
    ws.end_session("s1").unwrap();
    assert_eq!(ws.heads.keys.held(), 1, "the ended session's three keys go");
    assert_eq!(ws.heads.held(), 1, "and its head: only s2's is held");
    assert_eq!(
        ws.append_turn(&keyed(1)).unwrap(),
        Ack {
            seq: 1,
            duplicate: true
        }
    );
    assert_eq!(ws.session("s1").unwrap().next_seq, 3);
    assert_eq!(ws.heads.held(), 1, "reading it again does not keep it");
    // A turn appended after the end reads the head from the store and
    // gets the next sequence number.
    assert_eq!(ws.append_turn(&user("s1", "late")).unwrap().seq, 3);
    assert_eq!(ws.session("s1").unwrap().next_seq, 4);
}

/// A turn's idempotency key is stored once, in its turn record: no entry
/// beside it. After a restart the keys are read back from the turns (past
/// a page of them), and the entries stores written before this kept are
/// still honoured.
#[test]
fn idempotency_keys_live_in_their_turns() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turns(&(0..1000).map(keyed).collect::<Vec<_>>())
        .unwrap();
    ws.append_turns(&(1000..1100).map(keyed).collect::<Vec<_>>())
        .unwrap();
    ws.append_turn(&user("s1", "unkeyed")).unwrap();
    let entries = ws
        .store
        .scan_prefix(crate::store::Collection::Idempotency, b"")
        .unwrap();
    assert!(entries.is_empty(), "{} idempotency entries", entries.len());
    // What an older cairn left: an entry naming turn 5 for a key no turn
    // record names.
    let entry = record::idempotency_key("s1", "legacy");
    ws.raw_write_for_tests(
        crate::store::Collection::Idempotency,
        &entry,
        Some(&5u64.to_be_bytes()),
    )
    .unwrap();
    drop(ws);
    let fx = reopen(fx);
    let ws = fx.ws();
    let dup = |seq| Ack {
        seq,
        duplicate: true,
    };
    for i in [0, 1023, 1024, 1099] {
        assert_eq!(ws.append_turn(&keyed(i)).unwrap(), dup(i as u64), "k{i}");
    }
    assert_eq!(
        ws.append_turn(&user("s1", "again").with_idempotency_key("legacy"))
            .unwrap(),
        dup(5)
    );
    // A new key is new, and a duplicate from then on, in a batch or alone.
    let fresh = || user("s1", "fresh").with_idempotency_key("k-new");
    assert_eq!(
        ws.append_turn(&fresh()).unwrap(),
        Ack {
            seq: 1101,
            duplicate: false
        }
    );
    assert_eq!(
        ws.append_turns(&[user("s1", "x"), fresh()]).unwrap()[1],
        dup(1101)
    );
    assert_eq!(ws.session("s1").unwrap().next_seq, 1103);
}

#[test]
fn bad_turn_refuses_the_whole_batch() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let big = "x".repeat(MemoryConfig::default().limits.max_content_bytes + 1);
    let cases: Vec<(TurnInput, &str)> = vec![
        (user("", "hi"), "invalid_id"),
        (user(&"s".repeat(200), "hi"), "invalid_id"),
        (user("s1", "   "), "empty"),
        (user("s1", &big), "too_large"),
        (
            TurnInput::new("s1", Role::Tool, "result"),
            "missing_tool_call_id",
        ),
        (
            user("s1", "hi").with_idempotency_key("bad key"),
            "invalid_id",
        ),
    ];
    for (bad, code) in cases {
        let err = ws.append_turns(&[user("s1", "fine"), bad]).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(err.to_string().starts_with("item 1 of the batch"), "{err}");
    }
    assert!(matches!(
        ws.session("s1"),
        Err(MemoryError::SessionNotFound { .. })
    ));
    ws.append_turn(&user("s1", "hi").in_context("alpha"))
        .unwrap();
    let err = ws
        .append_turn(&user("s1", "hi").in_context("beta"))
        .unwrap_err();
    assert_eq!(err.code(), "work_context_mismatch");
    assert_eq!(ws.transcript("s1", 0, None).unwrap().len(), 1);
}

#[test]
fn sessions_lineage_and_state() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let err = ws
        .ensure_session(&SessionSpec {
            id: "sub".into(),
            kind: SessionKind::Subagent,
            parent: Some("main".into()),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(err.code(), "parent_not_found");
    ws.ensure_session(&SessionSpec {
        id: "main".into(),
        work_context: Some("proj".into()),
        ..Default::default()
    })
    .unwrap();
    let sub = ws
        .ensure_session(&SessionSpec {
            id: "sub".into(),
            work_context: Some("proj".into()),
            kind: SessionKind::Subagent,
            parent: Some("main".into()),
        })
        .unwrap();
    assert!(!sub.is_main());
    assert_eq!(ws.sessions(Some("proj")).unwrap().len(), 2);
    assert_eq!(ws.work_contexts().unwrap(), vec!["proj".to_owned()]);
    assert_eq!(ws.end_session("main").unwrap().state, SessionState::Ended);
    assert_eq!(ws.record_reset("main").unwrap().resets, 1);
}

/// `entry` reads from the cached log when it is current, from the store
/// otherwise: both give the same view (status, resolved subject, decay).
#[test]
fn an_entry_is_the_same_from_the_cached_log_and_from_the_store() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let a = ws
        .append_entry(&EntryInput::new(EntryKind::Fact, "Al likes tea").about("al"))
        .unwrap();
    ws.rename_subject("al", "alice").unwrap();
    let b = ws
        .append_entry(&EntryInput::new(EntryKind::Fact, "Al likes coffee").replacing(&a.id))
        .unwrap();
    let t = ws
        .append_entry(&EntryInput::new(EntryKind::Task, "call Al"))
        .unwrap();
    let ids = [&a.id, &b.id, &t.id];
    let from_store: Vec<EntryView> = ids
        .iter()
        .map(|id| {
            ws.shared.log_cache(ws.id()).bump();
            ws.entry(id).unwrap()
        })
        .collect();
    ws.live_entries().unwrap();
    assert!(ws.cached_log_snapshot().is_some());
    let from_log: Vec<EntryView> = ids.iter().map(|id| ws.entry(id).unwrap()).collect();
    assert_eq!(from_log, from_store);
    assert_eq!(
        from_log[0].status,
        EntryStatus::Replaced { by: b.id.clone() }
    );
    assert_eq!(from_log[0].subject.as_deref(), Some("alice"));
    assert!(
        ws.entry("01NOSUCHENTRY0000000000000")
            .unwrap_err()
            .is_not_found()
    );
}

/// The live entries that are about one subject share its name (one
/// allocation, not one per view), renamed or not.
#[test]
fn views_of_one_subject_share_its_name() {
    let fx = Fixture::new();
    let ws = fx.ws();
    for content in ["Al likes tea", "Al likes coffee"] {
        ws.append_entry(&EntryInput::new(EntryKind::Fact, content).about("al"))
            .unwrap();
    }
    let names = |ws: &Workspace| -> Vec<Arc<str>> {
        ws.live_entries()
            .unwrap()
            .iter()
            .filter_map(|v| v.subject.clone())
            .collect()
    };
    let before = names(&ws);
    assert_eq!(before.len(), 2);
    assert!(Arc::ptr_eq(&before[0], &before[1]));
    ws.rename_subject("al", "alice").unwrap();
    ws.append_entry(&EntryInput::new(EntryKind::Fact, "Alice reads").about("alice"))
        .unwrap();
    let after = names(&ws);
    assert_eq!(after.len(), 3);
    assert!(
        after
            .iter()
            .all(|n| &**n == "alice" && Arc::ptr_eq(n, &after[0]))
    );
    // An erasure lets go of the names (a slug can be a person's name).
    let gone = ws.live_entries().unwrap().to_vec()[0].entry.id.clone();
    ws.forget(&ForgetTarget::Entry(gone), "asked to").unwrap();
    assert_eq!(ws.shared.names.len(), 0);
}

/// An id already in the log is refused whether the check reads the cached
/// log or the store, and nothing of the batch is written.
#[test]
fn a_taken_entry_id_is_refused_with_or_without_the_cached_log() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let id = "01JDUPL1CATE0000000000000A";
    let with_id = |content: &str| EntryInput {
        id: Some(id.to_owned()),
        ..EntryInput::new(EntryKind::Fact, content)
    };
    ws.append_entry(&with_id("first")).unwrap();
    for cached in [false, true] {
        if cached {
            ws.live_entries().unwrap();
            assert!(ws.cached_log_snapshot().is_some());
        } else {
            ws.shared.log_cache(ws.id()).bump();
            assert!(ws.cached_log_snapshot().is_none());
        }
        let err = ws
            .append_entries(&[EntryInput::new(EntryKind::Fact, "other"), with_id("again")])
            .unwrap_err();
        assert!(
            matches!(&err, MemoryError::InBatch { index: 1, source } if matches!(**source, MemoryError::DuplicateEntryId { .. })),
            "{err:?}"
        );
        let live = ws.live_entries().unwrap();
        let texts: Vec<&str> = live.iter().map(|v| v.entry.content.as_str()).collect();
        assert_eq!(texts, ["first"]);
    }
}

#[test]
fn replaces_chains_resolve_forward() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let a = ws
        .append_entry(
            &EntryInput::new(EntryKind::Fact, "backoff 1s 5s 15s").about("auth-migration"),
        )
        .unwrap();
    let b = ws
        .append_entry(&EntryInput::new(EntryKind::Fact, "backoff 2s 10s 30s").replacing(&a.id))
        .unwrap();
    let c = ws
        .append_entry(&EntryInput::new(EntryKind::Fact, "backoff 2s 10s 60s").replacing(&b.id))
        .unwrap();
    let live = ws.entries(&EntryFilter::default()).unwrap();
    assert_eq!(
        live.iter().map(|v| v.entry.id.as_str()).collect::<Vec<_>>(),
        vec![c.id.as_str()]
    );
    let history = ws.history(&b.id).unwrap();
    assert_eq!(
        history
            .iter()
            .map(|v| v.entry.id.clone())
            .collect::<Vec<_>>(),
        vec![a.id.clone(), b.id.clone(), c.id.clone()]
    );
    assert_eq!(
        ws.entry(&a.id).unwrap().status,
        EntryStatus::Replaced { by: b.id.clone() }
    );
    assert_eq!(
        ws.entries(&EntryFilter {
            all: true,
            ..Default::default()
        })
        .unwrap()
        .len(),
        3
    );

    let err = ws
        .append_entry(&EntryInput::new(EntryKind::Fact, "fork").replacing(&a.id))
        .unwrap_err();
    assert_eq!(err.code(), "already_replaced");
    let err = ws
        .append_entry(&EntryInput::new(EntryKind::Fact, "x").replacing("nope"))
        .unwrap_err();
    assert_eq!(err.code(), "replaces_missing");
    let mut selfish = EntryInput::new(EntryKind::Fact, "x").replacing("me");
    selfish.id = Some("me".into());
    assert_eq!(
        ws.append_entry(&selfish).unwrap_err().code(),
        "replaces_cycle"
    );
    let mut x = EntryInput::new(EntryKind::Fact, "x").replacing("y");
    x.id = Some("x".into());
    let mut y = EntryInput::new(EntryKind::Fact, "y").replacing("x");
    y.id = Some("y".into());
    let err = ws.append_entries(&[x, y]).unwrap_err();
    assert_eq!(err.code(), "replaces_cycle");
    // Nothing of the refused batches was written.
    assert_eq!(
        ws.entries(&EntryFilter {
            all: true,
            ..Default::default()
        })
        .unwrap()
        .len(),
        3
    );
}

#[test]
fn entry_provenance_is_checked() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turns(&[user("s1", "a").in_context("wc"), user("s1", "b")])
        .unwrap();
    let e = ws
        .append_entry(&EntryInput::new(EntryKind::Task, "do it").from_turns("s1", 0, 1))
        .unwrap();
    assert_eq!(e.work_context, "wc");
    assert_eq!(e.status, Some(TaskStatus::Open));
    let err = ws
        .append_entry(&EntryInput::new(EntryKind::Task, "x").from_turns("s1", 0, 2))
        .unwrap_err();
    assert_eq!(err.code(), "invalid_turn_range");
    let err = ws
        .append_entry(&EntryInput::new(EntryKind::Task, "x").from_turns("ghost", 0, 0))
        .unwrap_err();
    assert_eq!(err.code(), "session_not_found");
    let mut bad = EntryInput::new(EntryKind::Fact, "x");
    bad.status = Some(TaskStatus::Done);
    assert_eq!(ws.append_entry(&bad).unwrap_err().code(), "invalid");
}

#[test]
fn subjects_rename_and_merge_keep_resolving() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&EntryInput::new(EntryKind::Fact, "uses whisper").about("whisper"))
        .unwrap();
    ws.add_subject("speech", SubjectKind::System, None).unwrap();
    assert_eq!(
        ws.add_subject("speech", SubjectKind::System, None)
            .unwrap_err()
            .code(),
        "subject_exists"
    );
    assert_eq!(
        ws.add_subject("Bad_Slug", SubjectKind::System, None)
            .unwrap_err()
            .code(),
        "invalid_slug"
    );
    let renamed = ws.rename_subject("whisper", "whisper-stt").unwrap();
    assert_eq!(renamed.aliases, vec!["whisper".to_owned()]);
    assert_eq!(ws.subject("whisper").unwrap().slug, "whisper-stt");
    let by_old = ws
        .entries(&EntryFilter {
            subject: Some("whisper".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_old.len(), 1);
    assert_eq!(by_old[0].subject.as_deref(), Some("whisper-stt"));

    assert_eq!(
        ws.merge_subjects("whisper-stt", "missing")
            .unwrap_err()
            .code(),
        "subject_not_found"
    );
    let merged = ws.merge_subjects("whisper-stt", "speech").unwrap();
    assert_eq!(
        merged.aliases,
        vec!["whisper".to_owned(), "whisper-stt".to_owned()]
    );
    let by_oldest = ws
        .entries(&EntryFilter {
            subject: Some("whisper".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_oldest[0].subject.as_deref(), Some("speech"));
    assert_eq!(
        ws.subjects()
            .unwrap()
            .iter()
            .map(|s| s.slug.as_str())
            .collect::<Vec<_>>(),
        vec!["speech"]
    );
}

#[test]
fn decay_hides_but_keeps() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_entry(&EntryInput::new(
        EntryKind::CrossConversationUpdate,
        "Henderson changed elsewhere",
    ))
    .unwrap();
    ws.append_entry(&EntryInput::new(EntryKind::Fact, "facts do not decay"))
        .unwrap();
    fx.clock.advance(Duration::days(6));
    assert_eq!(ws.entries(&EntryFilter::default()).unwrap().len(), 2);
    fx.clock.advance(Duration::days(2));
    let live = ws.entries(&EntryFilter::default()).unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].entry.kind, EntryKind::Fact);
    let all = ws
        .entries(&EntryFilter {
            all: true,
            ..Default::default()
        })
        .unwrap();
    assert!(matches!(
        all.iter()
            .find(|v| v.entry.kind == EntryKind::CrossConversationUpdate)
            .unwrap()
            .status,
        EntryStatus::Expired { .. }
    ));
}

#[test]
fn forget_erases_and_leaves_tombstones() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turns(&[user("s1", "secret plan"), user("s1", "more")])
        .unwrap();
    ws.append_turn(&user("s2", "other")).unwrap();
    let from_s1 = ws
        .append_entry(&EntryInput::new(EntryKind::Decision, "from s1").from_turns("s1", 0, 1))
        .unwrap();
    // Derived records a search service or the actors would have written:
    // the forget erases them with the session, whoever runs.
    use crate::store::StateKey;
    let derived = [
        StateKey::TurnVector {
            session: "s1".into(),
            seq: 1,
        },
        StateKey::Extraction {
            session: "s1".into(),
        },
        StateKey::EntryVector {
            entry: from_s1.id.clone(),
        },
    ];
    let other = StateKey::TurnVector {
        session: "s2".into(),
        seq: 0,
    };
    for key in derived.iter().chain([&other]) {
        ws.state_put(key, b"derived").unwrap();
    }
    let keep = ws
        .append_entry(&EntryInput::new(EntryKind::Fact, "about max").about("max"))
        .unwrap();
    assert_eq!(
        ws.forget(&ForgetTarget::Session("s1".into()), " ")
            .unwrap_err()
            .code(),
        "forget_without_reason"
    );
    let t = ws
        .forget(&ForgetTarget::Session("s1".into()), "user asked")
        .unwrap();
    assert_eq!(
        t.removed,
        Removed {
            sessions: 1,
            turns: 2,
            entries: 1,
            subjects: 0
        }
    );
    assert_eq!(ws.session("s1").unwrap_err().code(), "session_not_found");
    for key in &derived {
        assert!(ws.state_get(key).unwrap().is_none(), "{key:?} survived");
    }
    assert!(ws.state_get(&other).unwrap().is_some());
    assert_eq!(
        ws.entries(&EntryFilter {
            all: true,
            ..Default::default()
        })
        .unwrap()
        .len(),
        1
    );
    // The idempotency keys went too: the session can start again from 0.
    assert_eq!(ws.append_turn(&user("s1", "fresh")).unwrap().seq, 0);

    let t = ws
        .forget(&ForgetTarget::Subject("max".into()), "gdpr")
        .unwrap();
    assert_eq!(t.removed.entries, 1);
    assert_eq!(ws.entry(&keep.id).unwrap_err().code(), "entry_not_found");
    assert_eq!(ws.tombstones().unwrap().len(), 2);
    assert!(
        !serde_json::to_string(&ws.tombstones().unwrap())
            .unwrap()
            .contains("secret")
    );

    let t = fx
        .memory
        .forget_workspace("acme", "account closed")
        .unwrap();
    assert!(t.complete);
    assert_eq!(
        fx.memory.existing_workspace("acme").unwrap_err().code(),
        "workspace_not_found"
    );
    assert_eq!(fx.memory.workspace_tombstones().unwrap().len(), 1);
}

#[test]
fn workspaces_are_isolated() {
    let fx = Fixture::new();
    let a = fx.memory.workspace("a").unwrap();
    let b = fx.memory.workspace("b").unwrap();
    a.append_turn(&user("s1", "only in a")).unwrap();
    a.append_entry(&EntryInput::new(EntryKind::Fact, "a fact").about("x"))
        .unwrap();
    assert_eq!(b.session("s1").unwrap_err().code(), "session_not_found");
    assert!(
        b.entries(&EntryFilter {
            all: true,
            ..Default::default()
        })
        .unwrap()
        .is_empty()
    );
    assert!(b.subjects().unwrap().is_empty());
}

#[test]
fn everything_survives_reopen() {
    let fx = Fixture::new();
    let ws = fx.ws();
    ws.append_turns(&[user("s1", "a").with_idempotency_key("k"), user("s1", "b")])
        .unwrap();
    let e = ws
        .append_entry(&EntryInput::new(EntryKind::Decision, "d").about("proj"))
        .unwrap();
    drop(ws);
    let fx = reopen(fx);
    let ws = fx.ws();
    assert_eq!(ws.transcript("s1", 0, None).unwrap().len(), 2);
    assert_eq!(
        ws.append_turn(&user("s1", "a").with_idempotency_key("k"))
            .unwrap(),
        Ack {
            seq: 0,
            duplicate: true
        }
    );
    assert_eq!(ws.append_turn(&user("s1", "c")).unwrap().seq, 2);
    assert!(ws.entry(&e.id).unwrap().is_live());
    assert_eq!(ws.subject("proj").unwrap().display, "Proj");
}

/// Operations of the model-based storage test.
#[derive(Debug, Clone)]
enum Op {
    Append {
        session: u8,
        key: Option<u8>,
    },
    /// Several turns in one batch (up to 39).
    Batch {
        session: u8,
        n: u8,
    },
    /// Reads turns from `from`, at most `limit` (compared with the model).
    Read {
        session: u8,
        from: u8,
        limit: Option<u8>,
    },
    /// Forgets the session (turns, keys): it starts again from 0.
    Forget {
        session: u8,
    },
    /// Drops what the process cached about the workspace.
    Evict,
    Reboot,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..3, proptest::option::of(0u8..6)).prop_map(|(session, key)| Op::Append { session, key }),
        2 => (0u8..3, 1u8..40).prop_map(|(session, n)| Op::Batch { session, n }),
        4 => (0u8..3, 0u8..120, proptest::option::of(0u8..80)).prop_map(|(session, from, limit)| Op::Read { session, from, limit }),
        1 => (0u8..3).prop_map(|session| Op::Forget { session }),
        1 => Just(Op::Evict),
        1 => Just(Op::Reboot),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Transcripts match a simple in-memory model across appends, idempotent
    /// retries, batches, forgotten sessions, evictions and reboots (the store
    /// is closed and reopened); reads in between, from any turn and of any
    /// length, match it too.
    #[test]
    fn transcripts_match_model_across_reboots(ops in proptest::collection::vec(op(), 1..60)) {
        let mut fx = Fixture::new();
        let mut model: std::collections::HashMap<u8, (Vec<String>, std::collections::HashMap<u8, u64>)> = Default::default();
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Reboot => fx = reopen(fx),
                Op::Evict => fx.memory.evict("acme"),
                Op::Forget { session } => {
                    let target = crate::forget::ForgetTarget::Session(format!("s{session}"));
                    match fx.ws().forget(&target, "test") {
                        Ok(_) | Err(MemoryError::SessionNotFound { .. }) => {}
                        Err(e) => prop_assert!(false, "forget: {e}"),
                    }
                    model.remove(&session);
                }
                Op::Batch { session, n } => {
                    let contents: Vec<String> = (0..n).map(|j| format!("turn {i}.{j}")).collect();
                    let batch: Vec<TurnInput> = contents.iter().map(|c| user(&format!("s{session}"), c)).collect();
                    let acks = fx.ws().append_turns(&batch).unwrap();
                    let (turns, _) = model.entry(session).or_default();
                    let first = turns.len() as u64;
                    turns.extend(contents);
                    let seqs: Vec<u64> = acks.iter().map(|a| a.seq).collect();
                    prop_assert_eq!(seqs, (first..first + u64::from(n)).collect::<Vec<_>>());
                }
                Op::Read { session, from, limit } => {
                    let id = format!("s{session}");
                    let expected: Vec<String> = match model.get(&session) {
                        Some((turns, _)) => turns
                            .iter()
                            .skip(from.into())
                            .take(limit.map_or(usize::MAX, usize::from))
                            .cloned()
                            .collect(),
                        None => Vec::new(),
                    };
                    match fx.ws().transcript(&id, from.into(), limit.map(usize::from)) {
                        Ok(read) => {
                            let seqs: Vec<u64> = read.iter().map(|t| t.seq).collect();
                            let want: Vec<u64> = (u64::from(from)..).take(seqs.len()).collect();
                            prop_assert_eq!(seqs, want);
                            let read: Vec<String> = read.into_iter().map(|t| t.content).collect();
                            prop_assert_eq!(read, expected);
                        }
                        Err(MemoryError::SessionNotFound { .. }) => prop_assert!(expected.is_empty()),
                        Err(e) => prop_assert!(false, "read: {e}"),
                    }
                }
                Op::Append { session, key } => {
                    let content = format!("turn {i}");
                    let mut turn = user(&format!("s{session}"), &content);
                    if let Some(k) = key {
                        turn = turn.with_idempotency_key(&format!("k{k}"));
                    }
                    let ack = fx.ws().append_turn(&turn).unwrap();
                    let (turns, keys) = model.entry(session).or_default();
                    let expected = match key.and_then(|k| keys.get(&k).copied()) {
                        Some(seq) => Ack { seq, duplicate: true },
                        None => {
                            turns.push(content);
                            let seq = turns.len() as u64 - 1;
                            if let Some(k) = key { keys.insert(k, seq); }
                            Ack { seq, duplicate: false }
                        }
                    };
                    prop_assert_eq!(ack, expected);
                }
            }
        }
        let fx = reopen(fx);
        for (session, (turns, _)) in model {
            let stored: Vec<String> = fx.ws().transcript(&format!("s{session}"), 0, None).unwrap().into_iter().map(|t| t.content).collect();
            prop_assert_eq!(stored, turns);
        }
    }
}

/// Readers arriving together after a write wait for one rebuild of the log
/// snapshot instead of each scanning the whole log, and all see the write.
#[test]
fn readers_after_a_write_share_one_rebuild() {
    let fx = Fixture::new();
    let ws = fx.ws();
    for i in 0..50 {
        ws.append_entry(&EntryInput::new(EntryKind::Fact, &format!("fact {i}")))
            .unwrap();
    }
    let cache = ws.shared.log_cache(ws.id());
    let rebuilds = || cache.rebuilds.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(ws.live_entries().unwrap().len(), 50);
    let before = rebuilds();
    // A rename is not a pure addition: the snapshot is read again.
    ws.append_entry(&EntryInput::new(EntryKind::Fact, "the last fact").about("alpha"))
        .unwrap();
    ws.rename_subject("alpha", "beta").unwrap();
    let barrier = std::sync::Barrier::new(8);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                barrier.wait();
                assert_eq!(ws.live_entries().unwrap().len(), 51);
            });
        }
    });
    assert_eq!(rebuilds() - before, 1);
}

/// A write that only adds (new entries, a correction, a new subject)
/// patches the cached snapshot: the log is not read again, and every read
/// shows the addition as a fresh read would.
#[test]
fn additions_patch_the_snapshot_instead_of_reading_the_log() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let first = ws
        .append_entry(&EntryInput::new(EntryKind::Fact, "The API is v1").about("api"))
        .unwrap();
    let cache = ws.shared.log_cache(ws.id());
    let rebuilds = || cache.rebuilds.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(ws.live_entries().unwrap().len(), 1);
    assert_eq!(ws.subjects().unwrap().len(), 1);
    let before = rebuilds();
    let fresh = |ws: &Workspace| {
        let ids = |v: &[EntryView]| v.iter().map(|v| v.entry.id.clone()).collect::<Vec<_>>();
        let live = ws.live_entries().unwrap();
        // The list made from the previous one is the list a whole pass makes.
        assert_eq!(*live, ws.entries(&EntryFilter::default()).unwrap());
        let all = ws
            .entries(&EntryFilter {
                all: true,
                ..EntryFilter::default()
            })
            .unwrap();
        (ids(&live.to_vec()), ids(&all))
    };
    // New entries, one with a new subject, and a correction.
    ws.append_entries(&[
        EntryInput::new(EntryKind::Decision, "Ship on Friday").about("launch"),
        EntryInput::new(EntryKind::Fact, "The API is v2")
            .about("api")
            .replacing(&first.id),
    ])
    .unwrap();
    let (live, all) = fresh(&ws);
    assert_eq!(
        rebuilds(),
        before,
        "an addition must not read the log again"
    );
    assert_eq!(live.len(), 2);
    assert_eq!(all.len(), 3);
    assert!(
        !live.contains(&first.id),
        "the corrected entry is no longer live"
    );
    let slugs: Vec<String> = ws.subjects().unwrap().into_iter().map(|s| s.slug).collect();
    assert_eq!(slugs, ["api", "launch"]);
    // The patched snapshot is what a fresh read finds.
    for findings in ws.reconstruct_log(false).unwrap() {
        assert!(findings.is_clean(), "{findings:?}");
    }
    // A write that is not an addition reads the log again.
    ws.rename_subject("launch", "release").unwrap();
    let _ = fresh(&ws);
    assert_eq!(rebuilds(), before + 1);
}

/// `latest_updates_about` names each context's newest live update about a
/// subject as the list is patched; an update replaced away clears its
/// context's time (never names an update that is not live), and a list made
/// from the log again finds the older one.
#[test]
fn latest_updates_about_follow_the_live_list() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let hour = |h: u32| Utc.with_ymd_and_hms(2026, 3, 2, h, 0, 0).unwrap();
    let update = |wc: &str, d: u32| {
        let mut input =
            EntryInput::new(EntryKind::CrossConversationUpdate, "API changed elsewhere")
                .about("api")
                .in_context(wc);
        input.timestamp = Some(hour(d));
        ws.append_entry(&input).unwrap()
    };
    let latest = || {
        ws.latest_updates_about("api")
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>()
    };
    ws.append_entry(
        &EntryInput::new(EntryKind::Fact, "The API is v2")
            .about("api")
            .in_context("web"),
    )
    .unwrap();
    assert_eq!(latest(), []);
    update("ops", 7);
    let newest = update("ops", 8);
    update("web", 6);
    assert_eq!(
        latest(),
        [("ops".to_owned(), hour(8)), ("web".to_owned(), hour(6))]
    );
    // The newest replaced (by a fact, not an update): ops's time is cleared.
    ws.append_entry(
        &EntryInput::new(EntryKind::Fact, "The API change was reverted")
            .about("api")
            .in_context("ops")
            .replacing(&newest.id),
    )
    .unwrap();
    assert_eq!(latest(), [("web".to_owned(), hour(6))]);
    // A write that is not an addition makes the list from the log again.
    ws.add_subject("extra", SubjectKind::Project, None).unwrap();
    ws.rename_subject("extra", "extra-2").unwrap();
    assert_eq!(
        latest(),
        [("ops".to_owned(), hour(7)), ("web".to_owned(), hour(6))]
    );
}

/// `live_entries_about` answers what the subject filter of `entries` does,
/// aliases included, as the log changes.
#[test]
fn live_entries_about_a_subject_match_the_subject_filter() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let about = |slug: &str| {
        let filter = EntryFilter {
            subject: Some(slug.to_owned()),
            ..EntryFilter::default()
        };
        let expected = ws.entries(&filter).unwrap();
        assert_eq!(ws.live_entries_about(slug).unwrap(), expected, "{slug}");
        // So do the work contexts about it (an index patched with the list).
        let contexts: std::collections::BTreeSet<String> = expected
            .iter()
            .map(|v| v.entry.work_context.to_string())
            .collect();
        assert_eq!(ws.work_contexts_about(slug).unwrap(), contexts, "{slug}");
        expected.len()
    };
    let old = ws
        .append_entry(
            &EntryInput::new(EntryKind::Fact, "The API is v1")
                .about("api")
                .in_context("web"),
        )
        .unwrap();
    ws.append_entry(&EntryInput::new(EntryKind::Fact, "Ship on Friday").about("launch"))
        .unwrap();
    assert_eq!((about("api"), about("launch"), about("nothing")), (1, 1, 0));
    ws.append_entry(
        &EntryInput::new(EntryKind::Fact, "The API is v2")
            .about("api")
            .replacing(&old.id),
    )
    .unwrap();
    ws.append_entry(&EntryInput::new(EntryKind::Decision, "Freeze the API").about("api"))
        .unwrap();
    assert_eq!(about("api"), 2);
    assert_eq!(
        ws.work_contexts_about("api").unwrap().len(),
        1,
        "web's only entry was replaced"
    );
    ws.append_entry(
        &EntryInput::new(EntryKind::Task, "Document the API")
            .about("api")
            .in_context("docs"),
    )
    .unwrap();
    assert_eq!(about("api"), 3);
    ws.rename_subject("api", "service").unwrap();
    assert_eq!((about("api"), about("service")), (3, 3));
    assert!(ws.live_entries_about("Not A Slug").is_err());
}

/// `entries` is served from a per-workspace cache of the decoded log, and
/// `live_entries` from a list kept with it until a write or a decay time;
/// every kind of write that changes the log, and decay, must show on the
/// next read, through any handle on the workspace.
#[test]
fn log_cache_sees_every_write() {
    let fx = Fixture::new();
    let (a, b) = (fx.ws(), fx.ws());
    // `entries` and the shared `live_entries` list must agree after every
    // change, the list included while it is cached.
    let live = |ws: &Workspace| -> Vec<(String, Option<String>)> {
        let entries = ws.entries(&EntryFilter::default()).unwrap();
        assert_eq!(*ws.live_entries().unwrap(), entries);
        assert_eq!(*ws.live_entries().unwrap(), entries);
        entries
            .into_iter()
            .map(|v| {
                (
                    v.entry.content.clone(),
                    v.subject.as_deref().map(str::to_owned),
                )
            })
            .collect()
    };
    assert!(live(&b).is_empty());
    let first = a
        .append_entry(&EntryInput::new(EntryKind::Fact, "v1").about("retries"))
        .unwrap();
    assert_eq!(live(&b), vec![("v1".into(), Some("retries".into()))]);
    // A correction replaces; a rename re-resolves the subject.
    a.append_entry(
        &EntryInput::new(EntryKind::Fact, "v2")
            .about("retries")
            .replacing(&first.id),
    )
    .unwrap();
    assert_eq!(live(&b), vec![("v2".into(), Some("retries".into()))]);
    a.rename_subject("retries", "retry-policy").unwrap();
    assert_eq!(live(&b), vec![("v2".into(), Some("retry-policy".into()))]);
    // Decay is applied at read time, not cached.
    a.append_entry(&EntryInput::new(
        EntryKind::CrossConversationUpdate,
        "changed elsewhere",
    ))
    .unwrap();
    assert_eq!(live(&b).len(), 2);
    fx.clock.advance(Duration::days(8));
    assert_eq!(live(&b).len(), 1);
    // Forgetting an entry, and the whole workspace.
    let v2 = b.entries(&EntryFilter::default()).unwrap()[0]
        .entry
        .id
        .clone();
    a.forget(&ForgetTarget::Entry(v2), "test").unwrap();
    assert!(live(&b).is_empty());
    a.append_entry(&EntryInput::new(EntryKind::Fact, "kept?"))
        .unwrap();
    assert_eq!(live(&b).len(), 1);
    fx.memory.forget_workspace("acme", "test").unwrap();
    assert!(live(&fx.ws()).is_empty());
}

/// Session heads (`next_seq`, `last_turn_at`, the record) are served from
/// a per-workspace cache so an append reads no metadata; every write that
/// changes one, through any handle, must show on the next read exactly as
/// a read of the store would derive it.
#[test]
fn session_heads_see_every_write() {
    let fx = Fixture::new();
    let (a, b) = (fx.ws(), fx.ws());
    let check = |ws: &Workspace, id: &str| -> Option<Session> {
        let cached = ws.session(id).ok();
        assert_eq!(cached, ws.read_session(id).unwrap(), "head of {id}");
        cached
    };
    assert!(check(&b, "s1").is_none());
    // Out-of-order timestamps: the head's time is the last turn's, as a
    // fresh read derives it.
    let at = fx.clock.now();
    a.append_turns(&[
        user("s1", "one").at(at + Duration::minutes(5)),
        user("s1", "two").at(at),
    ])
    .unwrap();
    let head = check(&b, "s1").unwrap();
    assert_eq!((head.next_seq, head.last_turn_at), (2, Some(at)));
    a.append_turn(&user("s1", "three").with_idempotency_key("k"))
        .unwrap();
    a.append_turn(&user("s1", "three again").with_idempotency_key("k"))
        .unwrap();
    assert_eq!(check(&b, "s1").unwrap().next_seq, 3);
    b.end_session("s1").unwrap();
    assert_eq!(check(&a, "s1").unwrap().state, SessionState::Ended);
    b.record_reset("s1").unwrap();
    assert_eq!(check(&a, "s1").unwrap().resets, 1);
    // A write that skips the append path (a test corrupting the store)
    // still invalidates: the last turn gone, the head steps back.
    let mut key = b"s1\0".to_vec();
    key.extend_from_slice(&2u64.to_be_bytes());
    a.raw_write_for_tests(crate::store::Collection::Turns, &key, None)
        .unwrap();
    assert_eq!(check(&b, "s1").unwrap().next_seq, 2);
    // Forgetting the session; a new one under the same id starts at 0.
    a.forget(&ForgetTarget::Session("s1".into()), "test")
        .unwrap();
    assert!(check(&b, "s1").is_none());
    assert_eq!(b.append_turn(&user("s1", "again")).unwrap().seq, 0);
    assert_eq!(check(&a, "s1").unwrap().next_seq, 1);
    // Bootstrapped sessions, then the whole workspace dropped.
    a.ensure_session(&SessionSpec {
        id: "s2".into(),
        ..SessionSpec::default()
    })
    .unwrap();
    assert_eq!(check(&b, "s2").unwrap().next_seq, 0);
    fx.memory.forget_workspace("acme", "test").unwrap();
    let c = fx.ws();
    assert!(check(&c, "s1").is_none() && check(&c, "s2").is_none());
    assert_eq!(c.append_turn(&user("s1", "fresh")).unwrap().seq, 0);
    // An eviction (a cluster's change of hands) forgets the heads, and a
    // handle opened before it and one opened after still share them.
    assert_eq!(check(&c, "s1").unwrap().next_seq, 1);
    fx.memory.evict("acme");
    let d = fx.ws();
    assert_eq!(check(&d, "s1").unwrap().next_seq, 1);
    assert_eq!(
        c.append_turn(&user("s1", "through the old handle"))
            .unwrap()
            .seq,
        1
    );
    assert_eq!(check(&d, "s1").unwrap().next_seq, 2);
    assert_eq!(d.append_turn(&user("s1", "and the new")).unwrap().seq, 2);
    // After a restart the heads are read from the store again.
    drop((a, b, c, d));
    let fx = reopen(fx);
    assert_eq!(check(&fx.ws(), "s1").unwrap().next_seq, 3);
}

/// `recent_turns` reads the last n turns forward from `next_seq - n`, and
/// still finds the last n when a turn below the head is missing.
#[test]
fn recent_turns_are_the_last_n_even_with_a_gap() {
    let fx = Fixture::new();
    let ws = fx.ws();
    for i in 0..10 {
        ws.append_turn(&TurnInput::new("s1", Role::User, &format!("turn {i}")))
            .unwrap();
    }
    let seqs = |n| -> Vec<u64> {
        ws.recent_turns("s1", n)
            .unwrap()
            .into_iter()
            .map(|t| t.seq)
            .collect()
    };
    assert_eq!(seqs(3), [7, 8, 9]);
    assert_eq!(seqs(20), (0..10).collect::<Vec<_>>());
    assert!(seqs(0).is_empty());
    let key = crate::record::turn_key("s1", 8);
    ws.raw_write_for_tests(crate::store::Collection::Turns, &key, None)
        .unwrap();
    assert_eq!(seqs(3), [6, 7, 9]);
}

#[test]
fn try_apply_writes_nothing_while_a_session_lock_is_held() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let stripe = ws.shared.stripe(ws.id(), "s1");
    let held = ws
        .shared
        .lock_stripes(std::collections::BTreeSet::from([stripe]));
    assert_eq!(ws.try_apply_turns(&[user("s1", "hello")]).unwrap(), None);
    drop(held);
    // Nothing was written: not even the session.
    assert!(matches!(
        ws.transcript("s1", 0, None),
        Err(MemoryError::SessionNotFound { .. })
    ));
    let acks = ws.try_apply_turns(&[user("s1", "hello")]).unwrap().unwrap();
    assert_eq!(acks[0].seq, 0);
    // The write is durable once the async sync resolves (a store that
    // only syncs blocking has none, and a blocking sync does it).
    match ws.sync_later() {
        Some(durable) => {
            assert!(ws.buffered_writes());
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(durable).unwrap();
        }
        None => ws.sync().unwrap(),
    }
    drop(ws);
    let fx = reopen(fx);
    assert_eq!(fx.ws().transcript("s1", 0, None).unwrap().len(), 1);
}
