//! The search service over memory-log entries, on real sled, real tantivy,
//! real hnsw_rs and the real model: entries found by meaning, filters,
//! replaced / expired exclusions, forget, restart without re-embedding.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{Duration, TimeZone, Utc};

use super::model;
use crate::search::{
    DocSource, Embedder, ItemRef, SearchFilters, SearchMode, SearchOptions, SearchResultOf,
    SearchService,
};
use crate::{
    EntryInput, EntryKind, ForgetTarget, ManualClock, Memory, MemoryConfig, Role, SessionKind,
    SessionSpec, TurnInput,
};

/// The real model, counting the texts it embeds.
struct Counting {
    inner: Arc<dyn Embedder>,
    texts: AtomicUsize,
}

impl Embedder for Counting {
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }
    fn embed(&self, texts: &[&str]) -> SearchResultOf<Vec<Vec<f32>>> {
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        self.inner.embed(texts)
    }
}

fn counting() -> Arc<Counting> {
    Arc::new(Counting {
        inner: model(),
        texts: AtomicUsize::new(0),
    })
}

fn start() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn open(dir: &std::path::Path, clock: &ManualClock) -> Memory {
    crate::testing::memory(dir, MemoryConfig::default(), Arc::new(clock.clone())).unwrap()
}

/// Two sessions (a main one in `payments`, a sub-agent one in `infra`),
/// and entries of several kinds about several subjects. Returns the ids of
/// the entries, in the order written.
fn ingest(memory: &Memory) -> Vec<String> {
    let ws = memory.workspace("acme").unwrap();
    ws.append_turns(&[
        TurnInput::new(
            "main",
            Role::User,
            "Calls to the card processor keep timing out.",
        )
        .in_context("payments"),
        TurnInput::new(
            "main",
            Role::Assistant,
            "Let's put failed charges on a queue and retry them with exponential backoff.",
        )
        .in_context("payments"),
    ])
    .unwrap();
    ws.ensure_session(&SessionSpec {
        id: "helper".into(),
        work_context: Some("infra".into()),
        kind: SessionKind::Subagent,
        parent: Some("main".into()),
    })
    .unwrap();
    ws.append_turns(&[TurnInput::new(
        "helper",
        Role::Tool,
        "kubectl rollout restart deployment/ledger finished",
    )
    .with_tool_call_id("call-1")
    .in_context("infra")])
        .unwrap();
    let entries = ws
        .append_entries(&[
            EntryInput::new(
                EntryKind::Decision,
                "Failed card charges go on a queue and are retried with exponential backoff",
            )
            .about("payment-retries")
            .from_turns("main", 0, 1),
            EntryInput::new(
                EntryKind::Fact,
                "Ana's dog is a golden retriever called Rex",
            )
            .about("team-pets"),
            EntryInput::new(
                EntryKind::Task,
                "Rotate the production database password before Friday",
            )
            .about("db-security")
            .in_context("infra"),
            EntryInput::new(
                EntryKind::Fact,
                "The ledger service was restarted after the rollout",
            )
            .from_turns("helper", 0, 0),
        ])
        .unwrap();
    entries.into_iter().map(|e| e.id).collect()
}

fn ids(search: &SearchService, query: &str, options: &SearchOptions) -> Vec<ItemRef> {
    search
        .search("acme", query, options)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.item)
        .collect()
}

fn entry(id: &str) -> ItemRef {
    ItemRef::Entry { id: id.to_owned() }
}

fn only(f: SearchFilters) -> SearchOptions {
    SearchOptions::new(10).filters(f)
}

#[test]
fn entries_are_indexed_and_found_by_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(start());
    let memory = open(dir.path(), &clock);
    let e = ingest(&memory);
    let search = SearchService::new(memory.clone(), Some(model()));
    let s = search.stats().unwrap();
    assert_eq!((s.backlog, s.entry_backlog), (3, 4));
    search.catch_up().unwrap();
    let s = search.stats().unwrap();
    assert_eq!(
        (s.indexed, s.entries, s.vectors, s.backlog, s.entry_backlog),
        (3, 4, 7, 0, 0)
    );
    // No content word of the query is in the dog fact: only meaning finds it.
    let q = "which pet animal does Ana own?";
    let entries_only = SearchFilters {
        source: Some(DocSource::Entry),
        ..SearchFilters::default()
    };
    let dense = ids(
        &search,
        q,
        &only(entries_only.clone()).mode(SearchMode::Dense),
    );
    assert_eq!(dense[0], entry(&e[1]));
    let r = search.search("acme", q, &SearchOptions::new(3)).unwrap();
    let hit = &r.hits[0];
    assert_eq!(hit.item, entry(&e[1]));
    assert_eq!(hit.attrs.kind, Some(EntryKind::Fact));
    assert_eq!(hit.attrs.subject.as_deref(), Some("team-pets"));
    assert!(hit.vector_rank.is_some() && hit.cosine.is_some());
    // A paraphrase of the decision finds it among entries, with provenance.
    let r = search
        .search(
            "acme",
            "how do we handle payments that fail?",
            &only(entries_only),
        )
        .unwrap();
    assert_eq!(r.hits[0].item, entry(&e[0]));
    let p = r.hits[0].attrs.provenance.clone().unwrap();
    assert_eq!((p.session.as_str(), p.from_seq, p.to_seq), ("main", 0, 1));
    assert!(!r.hits[0].attrs.low_trust);
    // Entries from a sub-agent session, and tool turns, are low trust.
    let r = search
        .search("acme", "ledger restarted rollout", &SearchOptions::new(10))
        .unwrap();
    let fact = r.hits.iter().find(|h| h.item == entry(&e[3])).unwrap();
    assert!(fact.attrs.low_trust);
    let tool = r
        .hits
        .iter()
        .find(|h| h.attrs.source == DocSource::Turn)
        .unwrap();
    assert_eq!(
        tool.item,
        ItemRef::Turn {
            session: "helper".into(),
            seq: 0
        }
    );
    assert!(tool.attrs.low_trust);
}

#[test]
fn filters_narrow_results_in_both_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(start());
    let memory = open(dir.path(), &clock);
    let e = ingest(&memory);
    let ws = memory.workspace("acme").unwrap();
    clock.advance(Duration::days(3));
    let late = ws
        .append_entry(
            &EntryInput::new(
                EntryKind::Decision,
                "Retry webhooks three times, then give up",
            )
            .about("webhooks"),
        )
        .unwrap();
    let search = SearchService::new(memory.clone(), Some(model()));
    search.catch_up().unwrap();
    let q = "retry failures payments queue backoff webhooks";
    let turn = |session: &str, seq: u64| ItemRef::Turn {
        session: session.into(),
        seq,
    };
    let cases: Vec<(SearchFilters, Vec<ItemRef>)> = vec![
        (
            SearchFilters {
                kind: Some(EntryKind::Decision),
                ..SearchFilters::default()
            },
            vec![entry(&e[0]), entry(&late.id)],
        ),
        (
            SearchFilters {
                subject: Some("webhooks".into()),
                ..SearchFilters::default()
            },
            vec![entry(&late.id)],
        ),
        // A session: its turns and the entries whose provenance is it.
        (
            SearchFilters {
                session: Some("main".into()),
                ..SearchFilters::default()
            },
            vec![turn("main", 0), turn("main", 1), entry(&e[0])],
        ),
        (
            SearchFilters {
                work_context: Some("infra".into()),
                ..SearchFilters::default()
            },
            vec![turn("helper", 0), entry(&e[2]), entry(&e[3])],
        ),
        (
            SearchFilters {
                role: Some(Role::Assistant),
                ..SearchFilters::default()
            },
            vec![turn("main", 1)],
        ),
        (
            SearchFilters {
                since: Some(start() + Duration::days(1)),
                ..SearchFilters::default()
            },
            vec![entry(&late.id)],
        ),
        (
            SearchFilters {
                until: Some(start() + Duration::days(1)),
                source: Some(DocSource::Turn),
                ..SearchFilters::default()
            },
            vec![turn("main", 0), turn("main", 1), turn("helper", 0)],
        ),
    ];
    let sorted = |mut v: Vec<ItemRef>| {
        v.sort_by_key(ItemRef::reference);
        v
    };
    for (filter, want) in cases {
        let want = sorted(want);
        for mode in [SearchMode::Bm25, SearchMode::Dense, SearchMode::Hybrid] {
            let got = sorted(ids(&search, q, &only(filter.clone()).mode(mode)));
            if mode == SearchMode::Bm25 {
                // BM25 returns only what shares a word with the query.
                assert!(got.iter().all(|g| want.contains(g)), "{filter:?} {got:?}");
            } else {
                // k is larger than the workspace: everything that passes.
                assert_eq!(got, want, "{filter:?} {mode:?}");
            }
        }
    }
    let lexical = ids(
        &search,
        q,
        &only(SearchFilters {
            kind: Some(EntryKind::Decision),
            ..SearchFilters::default()
        })
        .mode(SearchMode::Bm25),
    );
    assert_eq!(lexical.len(), 2);
    // A renamed subject is found by its old slug and its new one.
    ws.rename_subject("webhooks", "webhook-delivery").unwrap();
    for slug in ["webhooks", "webhook-delivery"] {
        let got = ids(
            &search,
            q,
            &only(SearchFilters {
                subject: Some(slug.into()),
                ..SearchFilters::default()
            }),
        );
        assert_eq!(got, vec![entry(&late.id)], "{slug}");
    }
}

#[test]
fn replaced_and_expired_entries_are_left_out_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(start());
    let memory = open(dir.path(), &clock);
    let ws = memory.workspace("acme").unwrap();
    let old = ws
        .append_entry(&EntryInput::new(
            EntryKind::Decision,
            "Deploys happen on Tuesdays",
        ))
        .unwrap();
    let update = ws
        .append_entry(&EntryInput::new(
            EntryKind::CrossConversationUpdate,
            "The other team moved deploys to a freeze this week",
        ))
        .unwrap();
    let search = SearchService::new(memory.clone(), Some(model()));
    search.catch_up().unwrap();
    let q = "when do deploys happen?";
    assert_eq!(ids(&search, q, &SearchOptions::new(10)).len(), 2);
    // Replaced: hidden at once, even before the worker indexes the fix.
    let new = ws
        .append_entry(
            &EntryInput::new(EntryKind::Decision, "Deploys happen on Thursdays").replacing(&old.id),
        )
        .unwrap();
    assert_eq!(
        ids(&search, q, &SearchOptions::new(10)),
        vec![entry(&update.id)]
    );
    search.catch_up().unwrap();
    let got = ids(&search, q, &SearchOptions::new(10));
    assert!(got.contains(&entry(&new.id)) && !got.contains(&entry(&old.id)));
    let all = SearchFilters {
        include_replaced: true,
        ..SearchFilters::default()
    };
    let r = search.search("acme", q, &only(all)).unwrap();
    let replaced = r.hits.iter().find(|h| h.item == entry(&old.id)).unwrap();
    assert!(replaced.replaced);
    // Expired: a cross-conversation update lives 7 days on the clock.
    clock.advance(Duration::days(8));
    let got = ids(&search, q, &SearchOptions::new(10));
    assert_eq!(got, vec![entry(&new.id)]);
    let got = ids(
        &search,
        q,
        &only(SearchFilters {
            include_expired: true,
            ..SearchFilters::default()
        }),
    );
    assert!(got.contains(&entry(&update.id)) && !got.contains(&entry(&old.id)));
}

#[test]
fn forget_removes_entries_from_search_and_their_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(start());
    let memory = open(dir.path(), &clock);
    let e = ingest(&memory);
    let ws = memory.workspace("acme").unwrap();
    let search = SearchService::new(memory.clone(), Some(model()));
    search.catch_up().unwrap();
    let everything = |q: &str| ids(&search, q, &SearchOptions::new(20));
    assert!(everything("golden retriever Rex dog").contains(&entry(&e[1])));
    let key = |id: &str| crate::store::StateKey::EntryVector { entry: id.into() };
    assert!(ws.state_get(&key(&e[1])).unwrap().is_some());
    // One entry.
    ws.forget(&ForgetTarget::Entry(e[1].clone()), "asked")
        .unwrap();
    assert!(!everything("golden retriever Rex dog").contains(&entry(&e[1])));
    assert!(ws.state_get(&key(&e[1])).unwrap().is_none());
    // A subject takes its entries.
    ws.forget(&ForgetTarget::Subject("db-security".into()), "asked")
        .unwrap();
    assert!(!everything("rotate database password").contains(&entry(&e[2])));
    // A session takes its turns and the entries it is the provenance of.
    ws.forget(&ForgetTarget::Session("main".into()), "asked")
        .unwrap();
    let got = everything("card charges queue retried backoff");
    assert!(!got.contains(&entry(&e[0])), "{got:?}");
    assert!(
        got.iter()
            .all(|r| !r.reference().starts_with("session:main:"))
    );
    assert!(ws.state_get(&key(&e[0])).unwrap().is_none());
    let s = search.stats().unwrap();
    assert_eq!((s.entries, s.indexed), (1, 1));
    assert_eq!(s.vectors, 2);
}

#[test]
fn restart_catches_up_entries_without_re_embedding() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(start());
    {
        let memory = open(dir.path(), &clock);
        ingest(&memory);
        let model = counting();
        let search = SearchService::new(memory, Some(model.clone()));
        search.catch_up().unwrap();
        assert_eq!(model.texts.load(Ordering::SeqCst), 7);
        search.catch_up().unwrap();
        assert_eq!(
            model.texts.load(Ordering::SeqCst),
            7,
            "a second pass embeds nothing"
        );
    }
    let memory = open(dir.path(), &clock);
    let ws = memory.workspace("acme").unwrap();
    let fresh = ws
        .append_entry(&EntryInput::new(
            EntryKind::Fact,
            "The staging cluster runs in Frankfurt",
        ))
        .unwrap();
    let model = counting();
    let search = SearchService::new(memory.clone(), Some(model.clone()));
    search.start();
    search.nudge();
    let t = std::time::Instant::now();
    loop {
        let s = search.stats().unwrap();
        if s.backlog == 0 && s.entry_backlog == 0 {
            break;
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Only the new entry was embedded; the rest came from the store.
    assert_eq!(model.texts.load(Ordering::SeqCst), 1);
    let s = search.stats().unwrap();
    assert_eq!((s.embedded, s.reused, s.entries, s.indexed), (1, 7, 5, 3));
    let got = ids(
        &search,
        "where is the staging environment hosted?",
        &SearchOptions::new(1),
    );
    assert_eq!(got, vec![entry(&fresh.id)]);
    search.shutdown();
}
