#![allow(missing_docs)] // criterion_group! generates an undocumented function.
//! Assembly benchmarks: `assemble` latency with 100,000 memory items in the
//! workspace (turns on real sled, indexed in a real tantivy + hnsw index)
//! and an 8,000-token budget, every candidate checked by the real wasm
//! memory policy. Three cases in one group:
//!
//! - `baseline_no_retrieval`: invariants, tail and tiers only;
//! - `lexical`: plus BM25 projection (target p99 ≤ 5 ms);
//! - `hybrid`: plus hybrid projection, query embedded by the real model on
//!   every call (target p99 ≤ 25 ms). Skipped without the model
//!   (`eval "$(scripts/setup-embeddings.sh --print-env)"`, export both).
//!
//! Document vectors are made (embedding 100k texts takes minutes on 2
//! cores): clustered like real embeddings by default, uniformly random with
//! `CAIRN_BENCH_VECTORS=uniform` (see `common::Vectors`); the index holds
//! them in full. p50/p99 over 300 calls are printed to stderr.
//! `CAIRN_BENCH_ITEMS` overrides the size.

use std::hint::black_box;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cairn::assembly::WasmPolicyCheck;
use cairn_memory::assemble::{AssembleRequest, NoRetrieval, PolicyCheck, RetrievalMode, Retriever};
use cairn_memory::search::{
    EmbedConfig, Embedder, FastEmbedder, IndexRetriever, SearchDoc, SearchIndex,
};
use cairn_memory::{
    EntryInput, EntryKind, Memory, MemoryConfig, Role, SystemClock, TurnInput, Workspace,
};
use cairn_policies::{HostConfig, MemoryPolicy, MemorySink, PolicyHost, PolicySlot, defaults};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

mod common;
use common::{Rng, Vectors, WORDS};

fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

struct Fixture {
    _dir: tempfile::TempDir,
    ws: Workspace,
    lexical: SearchIndex,
    hybrid: Option<SearchIndex>,
    slot: PolicySlot<MemoryPolicy>,
    queries: Vec<String>,
}

const PER_SESSION: usize = 100;

fn build(items: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))
        .unwrap_or_else(|e| panic!("{e}"));
    let ws = memory.workspace("bench").unwrap_or_else(|e| panic!("{e}"));
    let embedder: Option<Arc<dyn Embedder>> = EmbedConfig::from_env().map(|c| {
        Arc::new(FastEmbedder::load(&c).unwrap_or_else(|e| panic!("{e}"))) as Arc<dyn Embedder>
    });
    let mut lexical = SearchIndex::new(None).unwrap_or_else(|e| panic!("{e}"));
    let mut hybrid = embedder
        .clone()
        .map(|e| SearchIndex::new(Some(e)).unwrap_or_else(|e| panic!("{e}")));
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let vectors = embedder.as_deref().map(Vectors::from_env);
    let t = Instant::now();
    let sessions = items.div_ceil(PER_SESSION);
    for s in 0..sessions {
        let id = format!("s{s}");
        let wc = format!("wc-{}", s % 40);
        let n = PER_SESSION.min(items - s * PER_SESSION);
        let turns: Vec<TurnInput> = (0..n)
            .map(|i| {
                let role = if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                TurnInput::new(&id, role, &format!("turn {i}: {}", rng.words(14))).in_context(&wc)
            })
            .collect();
        ws.append_turns(&turns).unwrap_or_else(|e| panic!("{e}"));
        let docs: Vec<SearchDoc> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| SearchDoc::new(&format!("{id}:{i}"), &id, i as u64, &t.content))
            .collect();
        lexical.add(&docs).unwrap_or_else(|e| panic!("{e}"));
        if let (Some(h), Some(vectors)) = (hybrid.as_mut(), vectors.as_ref()) {
            let vectors: Vec<Vec<f32>> = docs.iter().map(|_| vectors.next(&mut rng)).collect();
            h.add_with_vectors(&docs, &vectors)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // Some memory log per work context, so the tiers have material.
        if s % 10 == 0 {
            let entries = vec![
                EntryInput::new(EntryKind::Decision, &format!("Decided: {}", rng.words(10)))
                    .from_turns(&id, 0, 1),
                EntryInput::new(EntryKind::OpenQuestion, &format!("Open: {}?", rng.words(8)))
                    .from_turns(&id, 2, 2),
                EntryInput::new(EntryKind::Handoff, &format!("Left off: {}", rng.words(12)))
                    .from_turns(&id, 3, 4),
                EntryInput::new(EntryKind::Fact, &format!("The user likes {}", rng.words(6))),
            ];
            ws.append_entries(&entries)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // The session being assembled for: a fresh one in a busy context.
    ws.append_turns(&[TurnInput::new(
        "now",
        Role::User,
        "let's continue with the payment retry queue",
    )
    .in_context("wc-0")])
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "built {items} turns in {sessions} sessions (+ entries), indexed, in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let host = PolicyHost::new(
        HostConfig::default(),
        Arc::new(MemorySink::with_capacity(1024)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let prepared = host
        .prepare::<MemoryPolicy>(defaults::MEMORY_POLICY.name, defaults::MEMORY_POLICY.wasm)
        .unwrap_or_else(|e| panic!("{e}"));
    let slot = host.slot(&prepared).unwrap_or_else(|e| panic!("{e}"));
    let queries: Vec<String> = (0..200)
        .map(|i| {
            format!(
                "what did we decide about the {} {}?",
                WORDS[i % WORDS.len()],
                WORDS[(i * 7) % WORDS.len()]
            )
        })
        .collect();
    Fixture {
        _dir: dir,
        ws,
        lexical,
        hybrid,
        slot,
        queries,
    }
}

fn request(query: &str, mode: RetrievalMode) -> AssembleRequest {
    let mut r = AssembleRequest::new("now", 8_000);
    r.query = Some(query.to_owned());
    r.retrieval = mode;
    r.directives = vec!["Answer briefly.".to_owned()];
    r
}

fn once(
    f: &Fixture,
    retriever: &dyn Retriever,
    policy: &dyn PolicyCheck,
    q: &str,
    mode: RetrievalMode,
) -> usize {
    let block =
        f.ws.assemble(&request(q, mode), retriever, policy)
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(block.tokens <= 8_000);
    block.items.len()
}

fn report(name: &str, items: usize, mut call: impl FnMut(usize) -> usize) {
    let mut lat = Vec::new();
    let mut n = 0;
    for i in 0..300 {
        let t = Instant::now();
        n = black_box(call(i));
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (p50, p99) = percentiles(lat);
    eprintln!(
        "assemble {name} at {items} items, 8000-token budget: p50 {p50:.2} ms, p99 {p99:.2} ms ({n} items in the block)"
    );
}

fn assemble(c: &mut Criterion) {
    let default = if full_run() { 100_000 } else { 300 };
    let items: usize = std::env::var("CAIRN_BENCH_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let fixture: OnceLock<Fixture> = OnceLock::new();
    let reported: OnceLock<()> = OnceLock::new();
    let get = || {
        let f = fixture.get_or_init(|| build(items));
        reported.get_or_init(|| {
            // Percentiles only in a real bench run; test runs stay quick.
            if !full_run() {
                return;
            }
            let policy = WasmPolicyCheck::new(&f.slot, None);
            let q = &f.queries;
            report("baseline_no_retrieval", items, |i| {
                once(
                    f,
                    &NoRetrieval,
                    &policy,
                    &q[i % q.len()],
                    RetrievalMode::Off,
                )
            });
            report("lexical", items, |i| {
                once(
                    f,
                    &IndexRetriever(&f.lexical),
                    &policy,
                    &q[i % q.len()],
                    RetrievalMode::Lexical,
                )
            });
            if let Some(h) = &f.hybrid {
                report("hybrid", items, |i| {
                    once(
                        f,
                        &IndexRetriever(h),
                        &policy,
                        &q[i % q.len()],
                        RetrievalMode::Hybrid,
                    )
                });
            } else {
                eprintln!("hybrid skipped: no embedding model configured");
            }
        });
        f
    };
    let mut group = c.benchmark_group("assemble");
    group.sample_size(30);
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("baseline_no_retrieval", |b| {
        let f = get();
        let policy = WasmPolicyCheck::new(&f.slot, None);
        b.iter(|| {
            i += 1;
            once(
                f,
                &NoRetrieval,
                &policy,
                &f.queries[i % f.queries.len()],
                RetrievalMode::Off,
            )
        })
    });
    group.bench_function("lexical", |b| {
        let f = get();
        let policy = WasmPolicyCheck::new(&f.slot, None);
        b.iter(|| {
            i += 1;
            once(
                f,
                &IndexRetriever(&f.lexical),
                &policy,
                &f.queries[i % f.queries.len()],
                RetrievalMode::Lexical,
            )
        })
    });
    group.bench_function("hybrid", |b| {
        let f = get();
        let policy = WasmPolicyCheck::new(&f.slot, None);
        match &f.hybrid {
            Some(h) => b.iter(|| {
                i += 1;
                once(
                    f,
                    &IndexRetriever(h),
                    &policy,
                    &f.queries[i % f.queries.len()],
                    RetrievalMode::Hybrid,
                )
            }),
            None => b.iter(|| 0),
        }
    });
    group.finish();
}

criterion_group!(benches, assemble);
criterion_main!(benches);
