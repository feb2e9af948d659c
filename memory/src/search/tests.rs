//! Tests of the search index on real tantivy, real hnsw_rs and the real
//! all-MiniLM-L6-v2 model. The model must be installed
//! (`scripts/dev.sh test` does it); a missing model fails the tests loudly.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::*;

/// The real model, loaded once per test binary.
fn model() -> Arc<dyn Embedder> {
    static MODEL: OnceLock<Arc<FastEmbedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let config = EmbedConfig::from_env().expect(
                "CAIRN_EMBEDDING__MODEL_DIR / CAIRN_EMBEDDING__ORT_DYLIB unset: run the tests with \
                 scripts/dev.sh test (it installs the model); tests never skip without it",
            );
            Arc::new(FastEmbedder::load(&config).expect("embedding model loads"))
        })
        .clone()
}

fn docs() -> Vec<SearchDoc> {
    let turns = [
        (
            "Ana",
            "I finally adopted a puppy from the shelter, his name is Rex.",
        ),
        ("Ben", "That's wonderful! What breed is he?"),
        ("Ana", "A golden retriever mix, very energetic."),
        ("Ben", "I started learning the violin last week."),
        (
            "Ana",
            "Our team moved the payment service to queue-based retries.",
        ),
        (
            "Ben",
            "The deployment to production failed because of a missing secret.",
        ),
    ];
    turns
        .iter()
        .enumerate()
        .map(|(i, (sp, text))| {
            let session = if i < 3 { "s1" } else { "s2" };
            let pos = if i < 3 { i } else { i - 3 } as u64;
            SearchDoc::new(&format!("{session}:{pos}"), session, pos, text)
                .with_speaker(sp)
                .with_date("8 May, 2023")
        })
        .collect()
}

fn top(index: &SearchIndex, query: &str, mode: SearchMode) -> Vec<String> {
    let r = index
        .search(query, &SearchOptions::new(3).mode(mode))
        .unwrap();
    r.hits.into_iter().map(|h| h.id).collect()
}

#[test]
fn real_model_embeds_unit_vectors_and_ranks_by_meaning() {
    let m = model();
    let v = m
        .embed(&["a dog", "a puppy", "quarterly tax filing"])
        .unwrap();
    assert_eq!(v.len(), 3);
    for x in &v {
        assert_eq!(x.len(), 384);
        let norm: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "norm {norm}");
    }
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.2);
}

#[test]
fn embedding_does_not_depend_on_batch_padding() {
    // The tokenizer file pads to 128; pooling must ignore padding, so a
    // sentence embeds the same alone and next to a long one.
    let m = model();
    let alone = m.embed(&["short text"]).unwrap().remove(0);
    let long = "word ".repeat(200);
    let batched = m.embed(&["short text", &long]).unwrap().remove(0);
    let diff: f32 = alone
        .iter()
        .zip(&batched)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(diff < 1e-3, "max difference {diff}");
}

#[test]
fn dense_finds_paraphrases_bm25_does_not() {
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&docs()).unwrap();
    assert_eq!(index.len(), 6);
    assert_eq!(index.vectors(), 6);
    // No word of the query (but the name) is in the dog turns.
    let q = "Which pet dog does Ana have?";
    let mut dense = top(&index, q, SearchMode::Dense)[..2].to_vec();
    dense.sort();
    assert_eq!(dense, ["s1:0", "s1:2"]);
    assert!(["s1:0", "s1:2"].contains(&top(&index, q, SearchMode::Hybrid)[0].as_str()));
    // Lexical: stemming matches "retries" for "retry".
    assert_eq!(top(&index, "retry queue", SearchMode::Bm25)[0], "s2:1");
}

#[test]
fn hostile_query_text_is_just_text() {
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&docs()).unwrap();
    for q in [
        "What's Ana's puppy's name?",
        "\"unbalanced (paren AND OR NOT *",
        "",
        "???",
        "the of and",
    ] {
        let r = index.search(q, &SearchOptions::new(3)).unwrap();
        assert!(!r.lexical_fallback, "{q}");
    }
    assert!(
        top(&index, "What's Ana's puppy's name?", SearchMode::Bm25).contains(&"s1:0".to_owned())
    );
    assert!(
        index
            .search("the of and", &SearchOptions::new(3).mode(SearchMode::Bm25))
            .unwrap()
            .hits
            .is_empty()
    );
}

#[test]
fn hits_carry_a_score_breakdown() {
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&docs()).unwrap();
    let r = index
        .search("violin lessons", &SearchOptions::new(2))
        .unwrap();
    let hit = &r.hits[0];
    assert_eq!(hit.id, "s2:0");
    assert_eq!(hit.lexical_rank, Some(0));
    assert_eq!(hit.vector_rank, Some(0));
    assert!(hit.lexical_score.is_some() && hit.cosine.is_some());
    assert!(r.embed_micros > 0);
}

#[test]
fn rrf_is_available() {
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&docs()).unwrap();
    let r = index
        .search("violin", &SearchOptions::new(2).fusion(Fusion::rrf()))
        .unwrap();
    assert_eq!(r.hits[0].id, "s2:0");
    assert!((r.hits[0].score - 2.0 / 61.0).abs() < 1e-6);
}

#[test]
fn removed_documents_vanish_from_both_indexes() {
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&docs()).unwrap();
    assert!(index.remove("s1:0").unwrap());
    assert!(!index.remove("s1:0").unwrap());
    for mode in [SearchMode::Bm25, SearchMode::Dense, SearchMode::Hybrid] {
        let r = index
            .search("Rex puppy shelter", &SearchOptions::new(10).mode(mode))
            .unwrap();
        assert!(r.hits.iter().all(|h| h.id != "s1:0"), "{mode:?}");
    }
    assert_eq!(index.len(), 5);
    assert_eq!(index.vectors(), 5);
}

#[test]
fn persisted_vectors_reindex_without_the_model() {
    // Catch-up after restart: vectors computed once are reused.
    let fresh = SearchIndex::new(Some(model())).unwrap();
    let d = docs();
    let vectors = fresh.embed_docs(&d).unwrap();
    let mut again = SearchIndex::new(Some(model())).unwrap();
    again.add_with_vectors(&d, &vectors).unwrap();
    let first = top(&again, "Which pet dog does Ana have?", SearchMode::Dense);
    assert!(["s1:0", "s1:2"].contains(&first[0].as_str()));
    let wrong = SearchIndex::new(Some(model()))
        .unwrap()
        .add_with_vectors(&d[..1], &[vec![0.0; 3]]);
    assert_eq!(wrong.unwrap_err().code(), "dimension");
}

#[test]
fn duplicates_are_refused() {
    let mut index = SearchIndex::new(None).unwrap();
    index.add(&docs()).unwrap();
    assert_eq!(index.add(&docs()[..1]).unwrap_err().code(), "duplicate");
}

#[test]
fn missing_model_falls_back_to_lexical_and_says_so() {
    let missing = FastEmbedder::load(&EmbedConfig::new(
        "/nonexistent",
        "/nonexistent/libonnxruntime.so",
    ));
    assert!(matches!(missing, Err(SearchError::ModelUnavailable(_))));
    let mut index = SearchIndex::new(None).unwrap();
    index.add(&docs()).unwrap();
    let r = index.search("violin", &SearchOptions::new(2)).unwrap();
    assert!(r.lexical_fallback);
    assert_eq!(r.mode, SearchMode::Bm25);
    assert_eq!(r.hits[0].id, "s2:0");
    let plain = index
        .search("violin", &SearchOptions::new(2).mode(SearchMode::Bm25))
        .unwrap();
    assert!(!plain.lexical_fallback);
}

#[test]
fn session_filter_restricts_results() {
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&docs()).unwrap();
    let r = index
        .search(
            "puppy violin",
            &SearchOptions::new(10).sessions(["s2".to_owned()]),
        )
        .unwrap();
    assert!(!r.hits.is_empty());
    assert!(r.hits.iter().all(|h| h.session == "s2"));
}

#[test]
fn speaker_boost_prefers_the_named_speaker() {
    let mut index = SearchIndex::new(Some(model())).unwrap();
    let d = vec![
        SearchDoc::new("a", "s1", 0, "I love hiking in the mountains.").with_speaker("Ana"),
        SearchDoc::new("b", "s2", 0, "I love hiking in the mountains.").with_speaker("Ben"),
    ];
    index.add(&d).unwrap();
    let r = index
        .search("Where does Ben like hiking?", &SearchOptions::new(2))
        .unwrap();
    assert_eq!(r.hits[0].id, "b");
}

/// "last Saturday" said on Thursday 25 May 2023 is indexed as 20 May 2023:
/// a search naming that date finds it; with the dates left out of the text
/// the shorter turn without a date wins instead.
#[test]
fn a_turn_saying_last_saturday_is_found_by_its_resolved_date() {
    use chrono::TimeZone;
    let said = chrono::Utc
        .with_ymd_and_hms(2023, 5, 25, 13, 14, 0)
        .unwrap();
    let dated = DocAttrs {
        timestamp: Some(said),
        ..DocAttrs::default()
    };
    let d = vec![
        SearchDoc::new(
            "a",
            "s1",
            0,
            "I ran a charity race last Saturday, it was great.",
        )
        .with_speaker("Ana")
        .with_attrs(dated.clone()),
        SearchDoc::new("b", "s1", 1, "I ran a race.")
            .with_speaker("Ana")
            .with_attrs(dated),
    ];
    let query = "Who ran a race on 20 May 2023?";
    let opts = SearchOptions::new(2).mode(SearchMode::Bm25);
    let mut index = SearchIndex::new(None).unwrap();
    index.set_time_terms(true);
    index.add(&d).unwrap();
    let r = index.search(query, &opts).unwrap();
    assert_eq!(r.hits[0].id, "a");
    assert_eq!(r.hits[0].times, ["last Saturday → 20 May 2023"]);
    assert!(r.hits[1].times.is_empty());

    // The default.
    let mut plain = SearchIndex::new(None).unwrap();
    plain.add(&d).unwrap();
    let r = plain.search(query, &opts).unwrap();
    assert_eq!(r.hits[0].id, "b");
    // Resolved and shown all the same.
    assert_eq!(r.hits[1].times, ["last Saturday → 20 May 2023"]);
}

/// A question asking "when" lifts the turn that names a time; one naming a
/// period lifts the turn said in it.
#[test]
fn time_boosts_follow_the_question() {
    use chrono::TimeZone;
    let at = |m, d| DocAttrs {
        timestamp: Some(chrono::Utc.with_ymd_and_hms(2023, m, d, 12, 0, 0).unwrap()),
        ..DocAttrs::default()
    };
    let d = vec![
        SearchDoc::new("a", "s1", 0, "Ana adopted a puppy.").with_attrs(at(5, 8)),
        SearchDoc::new("b", "s2", 0, "We got the puppy yesterday.").with_attrs(at(7, 3)),
    ];
    let mut index = SearchIndex::new(Some(model())).unwrap();
    // The boosts alone: no dates in the lexical text.
    index.set_time_terms(false);
    index.add(&d).unwrap();
    let first = |q: &str, p: RecipeParams| {
        let o = SearchOptions::new(2).fusion(Fusion::Recipe(p));
        index.search(q, &o).unwrap().hits[0].id.clone()
    };
    let off = RecipeParams {
        session_boost: 0.0,
        when_boost: 0.0,
        ..RecipeParams::default()
    };
    assert_eq!(first("When did Ana adopt a puppy?", off), "a");
    let when = RecipeParams {
        when_boost: 1.0,
        ..off
    };
    assert_eq!(first("When did Ana adopt a puppy?", when), "b");
    assert_eq!(first("Did Ana adopt a puppy?", when), "a");
    let period = RecipeParams {
        period_boost: 1.0,
        ..off
    };
    assert_eq!(first("Who adopted a puppy in July 2023?", off), "a");
    assert_eq!(first("Who adopted a puppy in July 2023?", period), "b");
}

/// Three turns of one session about painting and one of another session,
/// and the hits for "What does Ana paint?" under `p`.
fn painting_hits(p: RecipeParams) -> Vec<SearchHit> {
    let d = vec![
        SearchDoc::new("a1", "s1", 0, "Ana paints landscapes on weekends."),
        SearchDoc::new("a2", "s1", 1, "Ana paints with oils now."),
        SearchDoc::new("a3", "s1", 2, "Ana paints her dog too."),
        SearchDoc::new("b1", "s2", 0, "Ana went hiking with friends."),
    ];
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&d).unwrap();
    let o = SearchOptions::new(4).fusion(Fusion::Recipe(p));
    index.search("What does Ana paint?", &o).unwrap().hits
}

fn ids(hits: Vec<SearchHit>) -> Vec<String> {
    hits.into_iter().map(|h| h.id).collect()
}

/// A session cap lets another session's hit ahead of a session's third;
/// the order is kept otherwise and nothing is dropped.
#[test]
fn a_session_cap_spreads_the_first_hits_over_sessions() {
    let order = |cap: usize| {
        ids(painting_hits(RecipeParams {
            session_cap: cap,
            ..RecipeParams::default()
        }))
    };
    let plain = order(0);
    assert_eq!(plain.last().map(String::as_str), Some("b1"), "{plain:?}");
    let capped = order(2);
    assert_eq!(capped.len(), 4, "{capped:?}");
    assert_eq!(capped[..2], plain[..2], "{capped:?}");
    assert_eq!(capped[2], "b1", "{capped:?}");
    assert_eq!(capped[3], plain[2], "{capped:?}");
}

/// A session decay lets another session's hit ahead of a session's second
/// when the decay outweighs the difference; scores stay in order and
/// nothing is dropped.
#[test]
fn a_session_decay_lets_other_sessions_ahead_by_score() {
    let hits = |decay: f32| {
        painting_hits(RecipeParams {
            session_decay: decay,
            ..RecipeParams::default()
        })
    };
    let plain = ids(hits(1.0));
    assert_eq!(plain.last().map(String::as_str), Some("b1"), "{plain:?}");
    let spread = ids(hits(0.01));
    assert_eq!(spread.len(), 4, "{spread:?}");
    assert_eq!(spread[0], plain[0], "{spread:?}");
    assert_eq!(spread[1], "b1", "{spread:?}");
    assert_eq!(spread[2..], plain[1..3], "{spread:?}");
    let scores: Vec<f32> = hits(0.01).iter().map(|h| h.score).collect();
    assert!(scores.is_sorted_by(|a, b| a >= b), "{scores:?}");
}

/// Maximal marginal relevance puts a different hit ahead of a near
/// duplicate of the first; nothing is dropped.
#[test]
fn diversity_lets_a_different_hit_ahead_of_a_near_duplicate() {
    let d = vec![
        SearchDoc::new("x1", "s1", 0, "Ana paints landscapes on weekends."),
        SearchDoc::new("x2", "s2", 0, "Ana paints landscapes on the weekends."),
        SearchDoc::new("y", "s3", 0, "Ana paints portraits of her dog."),
    ];
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&d).unwrap();
    let order = |diversity: f32| {
        let p = RecipeParams {
            diversity,
            ..RecipeParams::default()
        };
        let o = SearchOptions::new(3).fusion(Fusion::Recipe(p));
        ids(index.search("What does Ana paint?", &o).unwrap().hits)
    };
    let plain = order(0.0);
    assert_eq!(plain.last().map(String::as_str), Some("y"), "{plain:?}");
    let spread = order(2.0);
    assert_eq!(spread.len(), 3, "{spread:?}");
    assert!(spread[..2].contains(&"y".to_owned()), "{spread:?}");
    let mut all = spread;
    all.sort();
    assert_eq!(all, ["x1", "x2", "y"]);
}

/// The second pass follows the best hit's rare words to the other part of
/// a two-part question.
#[test]
fn the_second_pass_follows_what_the_first_found() {
    let d = vec![
        SearchDoc::new(
            "a",
            "s1",
            0,
            "Ana moved here from her home country four years ago.",
        )
        .with_speaker("Ana"),
        SearchDoc::new(
            "b",
            "s2",
            0,
            "This necklace is from my grandma in my home country, Sweden.",
        )
        .with_speaker("Ana"),
        SearchDoc::new("c", "s3", 0, "Ben bought a new bike for the summer.").with_speaker("Ben"),
        SearchDoc::new("d", "s4", 0, "Ben thinks the summer is too hot.").with_speaker("Ben"),
    ];
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&d).unwrap();
    let hits = |p: RecipeParams| {
        let o = SearchOptions::new(4).fusion(Fusion::Recipe(p));
        let r = index.search("Where did Ana move from?", &o).unwrap();
        r.hits
            .into_iter()
            .map(|h| (h.id, h.score))
            .collect::<Vec<_>>()
    };
    let off = hits(RecipeParams::default());
    let on = hits(RecipeParams {
        follow: 0.5,
        ..RecipeParams::default()
    });
    assert_eq!(off[0].0, "a");
    let rank = |v: &[(String, f32)], id: &str| v.iter().position(|x| x.0 == id);
    let gain = |v: &[(String, f32)]| {
        let b = v.iter().find(|x| x.0 == "b").map_or(0.0, |x| x.1);
        let c = v.iter().find(|x| x.0 == "c").map_or(0.0, |x| x.1);
        b - c
    };
    // "home country" leads from a to b: b gains on an unrelated turn.
    assert!(gain(&on) > gain(&off), "{off:?} vs {on:?}");
    assert_eq!(rank(&on, "b"), Some(1));
}

/// The second pass follows provenance: a memory-log entry among the best
/// hits lifts the turn it was extracted from (its evidence).
#[test]
fn the_second_pass_follows_an_entry_to_its_turns() {
    let entry = DocAttrs {
        source: DocSource::Entry,
        provenance: Some(crate::Provenance {
            session: "s1".into(),
            from_seq: 0,
            to_seq: 0,
        }),
        ..DocAttrs::default()
    };
    let d = vec![
        SearchDoc::new("s1:0", "s1", 0, "ok, let's go with the elephant one").with_speaker("Ana"),
        SearchDoc::new("s2:0", "s2", 0, "which database do you like for billing?")
            .with_speaker("Ben"),
        SearchDoc::new(
            "e1",
            "entry:e1",
            0,
            "Decision: the billing database is Postgres",
        )
        .with_attrs(entry),
    ];
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&d).unwrap();
    let ranked = |p: RecipeParams| {
        let o = SearchOptions::new(3).fusion(Fusion::Recipe(p));
        let r = index
            .search("Which database did we pick for billing?", &o)
            .unwrap();
        r.hits.into_iter().map(|h| h.id).collect::<Vec<_>>()
    };
    let off = ranked(RecipeParams::default());
    let on = ranked(RecipeParams {
        follow: 0.3,
        ..RecipeParams::default()
    });
    let pos = |v: &[String], id: &str| v.iter().position(|x| x == id).unwrap_or(usize::MAX);
    assert!(pos(&off, "s1:0") > pos(&off, "s2:0"), "{off:?}");
    assert!(pos(&on, "s1:0") < pos(&on, "s2:0"), "{on:?}");
}

/// A batch gives one unit vector per text, in order: a text embedded
/// alone or in the batch gets the same vector, and two different texts
/// different ones. (How fast is in `benches/`, not here.)
#[test]
fn a_batch_gives_one_unit_vector_per_text_in_order() {
    let m = model();
    let texts: Vec<String> = (0..64)
        .map(|i| format!("Turn {i}: we talked about the weather and dinner plans."))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let batch = m.embed(&refs).unwrap();
    assert_eq!(batch.len(), texts.len());
    for v in &batch {
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "norm {norm}");
    }
    let alone = m.embed(&[refs[17]]).unwrap();
    let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(cos(&alone[0], &batch[17]) > 0.999);
    assert!(cos(&batch[0], &batch[17]) < 0.999);
}

mod service {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::{ForgetTarget, Memory, MemoryConfig, Role, SystemClock, TurnInput};

    fn open(dir: &std::path::Path) -> Memory {
        crate::testing::memory(dir, MemoryConfig::default(), Arc::new(SystemClock)).unwrap()
    }

    fn ingest(memory: &Memory) {
        let ws = memory.workspace("acme").unwrap();
        let turns: Vec<TurnInput> = docs()
            .iter()
            .map(|d| TurnInput::new(&d.session, Role::User, &d.dense_text()))
            .collect();
        ws.append_turns(&turns).unwrap();
    }

    /// End to end, with the defaults: a turn stored at a known time saying
    /// "last Saturday" is resolved to the date it means, a question asking
    /// when finds it before a closer match that names no time, and the hit
    /// says why.
    #[test]
    fn a_stored_turn_is_found_by_the_date_its_words_mean() {
        use chrono::TimeZone;
        let dir = tempfile::tempdir().unwrap();
        let said = chrono::Utc
            .with_ymd_and_hms(2023, 5, 25, 13, 14, 0)
            .unwrap();
        let memory = crate::testing::memory(
            dir.path(),
            MemoryConfig::default(),
            Arc::new(crate::ManualClock::new(said)),
        )
        .unwrap();
        let ws = memory.workspace("acme").unwrap();
        ws.append_turns(&[
            TurnInput::new("s1", Role::User, "I ran a charity race last Saturday!"),
            TurnInput::new("s2", Role::User, "I ran a race."),
        ])
        .unwrap();
        let search = SearchService::new(memory.clone(), Some(model()));
        search.catch_up().unwrap();
        let query = "When did I run a race?";
        let r = search
            .search("acme", query, &SearchOptions::new(2))
            .unwrap();
        assert_eq!(r.hits[0].id, "s1:0", "{r:?}");
        assert_eq!(r.hits[0].times, ["last Saturday → 20 May 2023"]);
        // Without the "when" boost the closer wording wins.
        let off = RecipeParams {
            when_boost: 0.0,
            ..RecipeParams::default()
        };
        let r = search
            .search(
                "acme",
                query,
                &SearchOptions::new(2).fusion(Fusion::Recipe(off)),
            )
            .unwrap();
        assert_eq!(r.hits[0].id, "s2:0", "{r:?}");
    }

    #[test]
    fn background_worker_indexes_and_reports_backlog() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        let search = SearchService::new(memory.clone(), Some(model()));
        ingest(&memory);
        assert_eq!(search.stats().unwrap().backlog, 6);
        search.start();
        search.nudge();
        let t = Instant::now();
        while search.stats().unwrap().backlog > 0 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "worker did not catch up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let r = search
            .search("acme", "violin", &SearchOptions::new(1))
            .unwrap();
        assert_eq!(r.hits[0].id, "s2:0");
        assert!(!r.lexical_fallback);
        search.shutdown();
    }

    /// A pass commits once per workspace, not once per session with new
    /// turns: a commit writes a tantivy segment with a fixed cost, and the
    /// server's passes each found a few new turns in many sessions.
    #[test]
    fn a_pass_commits_the_new_turns_of_every_session_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        let ws = memory.workspace("acme").unwrap();
        for s in 0..12 {
            ws.append_turn(&TurnInput::new(
                &format!("s{s}"),
                Role::User,
                &format!("turn number {s} about the violin"),
            ))
            .unwrap();
        }
        let search = SearchService::new(memory.clone(), None);
        search.catch_up().unwrap();
        assert_eq!(search.lexical_segments("acme"), 1);
        let r = search
            .search("acme", "violin", &SearchOptions::new(20))
            .unwrap();
        assert_eq!(r.hits.len(), 12, "{r:?}");
        // Removals (a forgotten session) are committed with the pass too.
        for s in 0..6 {
            ws.append_turn(&TurnInput::new(
                &format!("s{s}"),
                Role::User,
                "and the cello",
            ))
            .unwrap();
        }
        ws.forget(&ForgetTarget::Session("s11".into()), "asked")
            .unwrap();
        search.catch_up().unwrap();
        assert!(search.lexical_segments("acme") <= 2);
        let r = search
            .search("acme", "violin", &SearchOptions::new(20))
            .unwrap();
        assert_eq!(r.hits.len(), 11, "{r:?}");
        assert!(r.hits.iter().all(|h| h.session != "s11"), "{r:?}");
    }

    /// A shutdown stops a pass before its next batch instead of waiting
    /// for the whole backlog (with the model, thousands of turns take
    /// minutes to embed); the next service over the same store indexes
    /// everything.
    #[test]
    fn a_shutdown_stops_the_pass_before_its_next_batch() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        let ws = memory.workspace("acme").unwrap();
        let turns: Vec<TurnInput> = (0..300)
            .map(|i| TurnInput::new("s1", Role::User, &format!("note {i} about the violin")))
            .collect();
        ws.append_turns(&turns).unwrap();
        let search = SearchService::new(memory.clone(), None);
        search.shutdown();
        let stopped = search.catch_up();
        assert!(matches!(stopped, Err(ServiceError::Stopped)), "{stopped:?}");
        let r = search
            .search("acme", "violin", &SearchOptions::new(5))
            .unwrap();
        assert!(r.hits.is_empty(), "{r:?}");
        let again = SearchService::new(memory.clone(), None);
        again.catch_up().unwrap();
        let r = again
            .search("acme", "violin", &SearchOptions::new(500))
            .unwrap();
        assert_eq!(r.hits.len(), 300);
    }

    /// After a whole pass, a pass reads what the writes since named (their
    /// sessions and entries), not every session: its cost follows what was
    /// written, not what is stored. An erasure still gets a whole pass.
    #[test]
    fn a_pass_reads_only_what_was_written_since() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        let ws = memory.workspace("acme").unwrap();
        for s in 0..30 {
            ws.append_turn(&TurnInput::new(
                &format!("s{s}"),
                Role::User,
                "about the violin",
            ))
            .unwrap();
        }
        let search = SearchService::new(memory.clone(), None);
        search.catch_up().unwrap();
        assert_eq!(search.sessions_read(), 30);
        search.catch_up().unwrap();
        assert_eq!(search.sessions_read(), 30, "nothing written: nothing read");

        ws.append_turn(&TurnInput::new("s7", Role::User, "and the cello"))
            .unwrap();
        ws.append_turn(&TurnInput::new("new", Role::User, "a cello too"))
            .unwrap();
        let entry = ws
            .append_entry(&crate::EntryInput::new(
                crate::EntryKind::Decision,
                "The cello goes first",
            ))
            .unwrap();
        search.catch_up().unwrap();
        assert_eq!(search.sessions_read(), 32, "two sessions were written");
        let r = search
            .search("acme", "cello", &SearchOptions::new(10))
            .unwrap();
        let mut ids: Vec<&str> = r.hits.iter().map(|h| h.id.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(ids, [entry.id.as_str(), "new:0", "s7:1"], "{r:?}");
        assert!(!r.catching_up);

        // An erasure: the next pass is whole, and the session is gone.
        ws.forget(&ForgetTarget::Session("s7".into()), "asked")
            .unwrap();
        search.catch_up().unwrap();
        assert_eq!(search.sessions_read(), 32 + 30);
        let r = search
            .search("acme", "cello", &SearchOptions::new(10))
            .unwrap();
        assert!(r.hits.iter().all(|h| h.session != "s7"), "{r:?}");
    }

    /// A pass over a long backlog commits every `COMMIT_EVERY` documents,
    /// so its first turns are searchable before its last are read.
    #[test]
    fn a_long_pass_commits_as_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        let ws = memory.workspace("acme").unwrap();
        let n = SearchService::COMMIT_EVERY + 100;
        let turns: Vec<TurnInput> = (0..n)
            .map(|i| TurnInput::new(&format!("s{}", i % 40), Role::User, &format!("note {i}")))
            .collect();
        for chunk in turns.chunks(500) {
            ws.append_turns(chunk).unwrap();
        }
        let search = SearchService::new(memory.clone(), None);
        search.catch_up().unwrap();
        assert_eq!(search.lexical_segments("acme"), 2);
        assert_eq!(search.stats().unwrap().indexed, n as u64);
    }

    #[test]
    fn a_search_before_the_first_pass_says_the_index_is_catching_up() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        ingest(&memory);
        // As after a restart: the record holds turns the fresh index has
        // not seen.
        let search = SearchService::new(memory.clone(), None);
        let r = search
            .search("acme", "violin", &SearchOptions::new(1))
            .unwrap();
        assert!(r.catching_up && r.hits.is_empty(), "{r:?}");
        search.catch_up().unwrap();
        let r = search
            .search("acme", "violin", &SearchOptions::new(1))
            .unwrap();
        assert!(!r.catching_up, "{r:?}");
        assert_eq!(r.hits[0].id, "s2:0");
    }

    #[test]
    fn restart_reuses_stored_vectors_and_forget_removes_content() {
        let dir = tempfile::tempdir().unwrap();
        {
            let memory = open(dir.path());
            ingest(&memory);
            let search = SearchService::new(memory, Some(model()));
            search.catch_up().unwrap();
            let s = search.stats().unwrap();
            assert_eq!(
                (s.indexed, s.vectors, s.embedded, s.reused, s.backlog),
                (6, 6, 6, 0, 0)
            );
        }
        let memory = open(dir.path());
        let search = SearchService::new(memory.clone(), Some(model()));
        search.catch_up().unwrap();
        let s = search.stats().unwrap();
        assert_eq!((s.indexed, s.vectors, s.embedded, s.reused), (6, 6, 0, 6));
        let ws = memory.workspace("acme").unwrap();
        assert!(
            ws.state_get(&crate::store::StateKey::TurnVector {
                session: "s1".into(),
                seq: 0,
            })
            .unwrap()
            .is_some()
        );
        ws.forget(&ForgetTarget::Session("s1".into()), "user asked")
            .unwrap();
        let r = search
            .search(
                "acme",
                "Rex puppy shelter retriever",
                &SearchOptions::new(10),
            )
            .unwrap();
        assert!(r.hits.iter().all(|h| h.session != "s1"), "{:?}", r.hits);
        assert!(
            ws.state_get(&crate::store::StateKey::TurnVector {
                session: "s1".into(),
                seq: 0,
            })
            .unwrap()
            .is_none()
        );
        assert_eq!(search.stats().unwrap().indexed, 3);
    }
}

mod entries;

use crate::{Memory, MemoryConfig, Role, TurnInput};

fn set_fault(workspace: Option<&str>) {
    *super::service::FAULT_IN.lock().unwrap() = workspace.map(str::to_owned);
}

fn found(search: &SearchService, workspace: &str, query: &str) -> bool {
    search
        .search(workspace, query, &SearchOptions::new(5))
        .is_ok_and(|r| !r.hits.is_empty())
}

/// A workspace whose indexing panics is set aside (counted, quarantined
/// with a backoff) and every other workspace is indexed in the same pass;
/// once the fault is gone and the backoff over, it is indexed whole.
#[test]
fn a_workspace_whose_indexing_panics_is_set_aside_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let memory = crate::testing::memory(
        dir.path(),
        MemoryConfig::default(),
        Arc::new(crate::SystemClock),
    )
    .unwrap();
    for (ws, text) in [
        ("poisoned-1", "The boiler in the basement is leaking."),
        ("healthy-1", "Our quarterly offsite moves to Porto."),
    ] {
        memory
            .workspace(ws)
            .unwrap()
            .append_turns(&[TurnInput::new("s1", Role::User, text)])
            .unwrap();
    }
    let search = SearchService::new(memory.clone(), None);
    set_fault(Some("poisoned-1"));
    search.catch_up().unwrap();
    assert!(found(&search, "healthy-1", "offsite Porto"));
    assert!(!found(&search, "poisoned-1", "boiler leaking"));
    let health = memory.workers().health();
    let indexer = health.iter().find(|w| w.name == INDEXER).unwrap();
    assert_eq!(indexer.panics, 1);
    assert_eq!(indexer.quarantined, vec!["poisoned-1".to_owned()]);
    assert!(
        indexer
            .last_panic
            .as_deref()
            .unwrap()
            .contains("injected fault")
    );
    // Quarantined: the next pass does not touch it, even with the fault gone.
    set_fault(None);
    search.catch_up().unwrap();
    assert!(!found(&search, "poisoned-1", "boiler leaking"));
    // Its backoff over, it is indexed whole and leaves the quarantine.
    memory.workers().worker(INDEXER).release("poisoned-1");
    search.catch_up().unwrap();
    assert!(found(&search, "poisoned-1", "boiler leaking"));
    let health = memory.workers().health();
    assert!(health.iter().all(|w| w.quarantined.is_empty()));
}

/// The background worker survives a panic: it is still running, and a turn
/// written afterwards in another workspace is indexed by it.
#[test]
fn the_background_indexer_survives_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let memory = crate::testing::memory(
        dir.path(),
        MemoryConfig::default(),
        Arc::new(crate::SystemClock),
    )
    .unwrap();
    memory
        .workspace("poisoned-2")
        .unwrap()
        .append_turns(&[TurnInput::new("s1", Role::User, "A leaking boiler.")])
        .unwrap();
    set_fault(Some("poisoned-2"));
    let search = SearchService::new(memory.clone(), None);
    search.set_refresh(std::time::Duration::from_millis(10));
    search.start();
    let panicked = |m: &Memory| {
        m.workers()
            .health()
            .iter()
            .any(|w| w.name == INDEXER && w.panics > 0)
    };
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while !panicked(&memory) {
        assert!(Instant::now() < deadline, "the injected fault never ran");
        std::thread::yield_now();
    }
    memory
        .workspace("healthy-2")
        .unwrap()
        .append_turns(&[TurnInput::new(
            "s1",
            Role::User,
            "The offsite moves to Porto.",
        )])
        .unwrap();
    search.nudge();
    while !found(&search, "healthy-2", "offsite Porto") {
        assert!(
            Instant::now() < deadline,
            "the worker stopped indexing after the panic"
        );
        std::thread::yield_now();
    }
    let health = memory.workers().health();
    assert!(health.iter().any(|w| w.name == INDEXER && w.running));
    set_fault(None);
    search.shutdown();
}

/// The concept vector (`RecipeParams::concept`) changes the scores of a
/// question that asks for several things and leaves every other question's
/// hits exactly as they were.
#[test]
fn the_concept_vector_applies_to_list_questions_only() {
    let d = vec![
        SearchDoc::new("a", "s1", 0, "Ana plays the clarinet every evening.").with_speaker("Ana"),
        SearchDoc::new("b", "s2", 0, "Ana went hiking with friends.").with_speaker("Ana"),
        SearchDoc::new("c", "s3", 0, "Jon bought a violin last week.").with_speaker("Jon"),
    ];
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&d).unwrap();
    let scores = |q: &str, concept: f32| -> Vec<(String, f32)> {
        let p = RecipeParams {
            concept,
            ..RecipeParams::default()
        };
        let o = SearchOptions::new(3).fusion(Fusion::Recipe(p));
        let hits = index.search(q, &o).unwrap().hits;
        hits.into_iter().map(|h| (h.id, h.score)).collect()
    };
    let one = "What does Ana play in the evening?";
    assert_eq!(scores(one, 0.0), scores(one, 1.0));
    let many = "What instruments does Ana play?";
    assert_ne!(scores(many, 0.0), scores(many, 1.0));
}

/// The feedback vector (`RecipeParams::feedback`) is made of the first
/// pass's best hits and changes the scores when on; off, the scores are the
/// recipe's own.
#[test]
fn the_feedback_vector_rescores_only_when_on() {
    let d = vec![
        SearchDoc::new("a", "s1", 0, "Ana took the kids swimming at the lake.").with_speaker("Ana"),
        SearchDoc::new(
            "b",
            "s2",
            0,
            "The children splashed around in the pool all afternoon.",
        )
        .with_speaker("Ana"),
        SearchDoc::new(
            "c",
            "s3",
            0,
            "My tax forms are due at the end of the month.",
        )
        .with_speaker("Ana"),
    ];
    let mut index = SearchIndex::new(Some(model())).unwrap();
    index.add(&d).unwrap();
    let scores = |p: RecipeParams| -> Vec<(String, f32)> {
        let o = SearchOptions::new(3).fusion(Fusion::Recipe(p));
        let hits = index.search("Did Ana go swimming?", &o).unwrap().hits;
        hits.into_iter().map(|h| (h.id, h.score)).collect()
    };
    let with = |feedback: f32| RecipeParams {
        feedback,
        feedback_seeds: 1,
        ..RecipeParams::default()
    };
    assert_eq!(scores(with(0.0)), scores(RecipeParams::default()));
    assert_ne!(scores(with(1.0)), scores(with(0.0)));
}
