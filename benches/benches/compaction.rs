#![allow(missing_docs)] // criterion_group! generates an undocumented function.
//! Compaction benchmarks on real sled, deterministic summariser:
//!
//! - `pass_10k_turns`: a first compaction pass over a 10,000-turn session
//!   (user / assistant / tool call + result, ~30 words a turn) to a
//!   1,500-token view: clusters, extractive summaries, levels up to 3, one
//!   atomic batch and an fsync. Before each timed pass the view is dropped
//!   (the nodes stay and are rewritten with the same ids), so every pass
//!   is a first one. Token reduction is printed to stderr.
//! - `expand_all_depth3`: every original turn under a level-3 summary,
//!   checked against its hash (p50/p99 over 1,000 calls on stderr; target
//!   p99 ≤ 1 ms for the DAG walk — see docs/BENCHMARKS.md for what it covers).
//! - `expand_one_level`: one level of the same summary (p50/p99 on stderr).
//! - `baseline_read_same_turns`: the same turns read from the record with
//!   no DAG walk and no hash check, in the same run.
//! - `assemble_compacted`: assembly (no retrieval, trust-all policy) of the
//!   compacted 10,000-turn session in 8,000 tokens.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_memory::assemble::{AssembleRequest, NoRetrieval, TrustAll};
use cairn_memory::compact::{CompactOptions, Cover, Extractive};
use cairn_memory::store::StateKey;
use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput, Workspace};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

mod common;
use common::Rng;

const BUDGET: usize = 1_500;

/// `cargo bench` passes `--bench`; a test run (`cargo test --all-targets`,
/// nextest listing) does not and gets a small fixture.
fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn turns() -> usize {
    if full_run() { 10_000 } else { 300 }
}

fn samples() -> usize {
    if full_run() { 1_000 } else { 3 }
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

fn session(ws: &Workspace) {
    let total = turns();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut batch = Vec::new();
    let mut i = 0;
    while i < total {
        let text = format!("Turn {i}: {}.", rng.words(30));
        match i % 6 {
            0 => batch.push(TurnInput::new(
                "s",
                Role::User,
                &format!("Let's go with {text}"),
            )),
            1 => batch.push(
                TurnInput::new("s", Role::Assistant, &text).with_tool_call_id(&format!("c{i}")),
            ),
            2 => batch.push(
                TurnInput::new("s", Role::Tool, &text).with_tool_call_id(&format!("c{}", i - 1)),
            ),
            3 => batch.push(TurnInput::new(
                "s",
                Role::User,
                &format!("I still need to figure out {text}?"),
            )),
            _ => batch.push(TurnInput::new(
                "s",
                Role::Assistant,
                &format!("I've updated {text}"),
            )),
        }
        i += 1;
        if batch.len() == 500 {
            ws.apply_turns(&batch).unwrap_or_else(|e| panic!("{e}"));
            batch.clear();
        }
    }
    ws.apply_turns(&batch).unwrap_or_else(|e| panic!("{e}"));
}

fn deepest(ws: &Workspace) -> String {
    let mut best: Option<(u32, String)> = None;
    for node in ws.view_summaries("s").unwrap_or_else(|e| panic!("{e}")) {
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            if n.level == 3 {
                return n.id;
            }
            if best.as_ref().is_none_or(|(l, _)| n.level > *l) {
                best = Some((n.level, n.id.clone()));
            }
            for c in &n.covers {
                if let Cover::Summary { id } = c {
                    stack.push(ws.summary(id).unwrap_or_else(|e| panic!("{e}")));
                }
            }
        }
    }
    best.map(|(_, id)| id)
        .unwrap_or_else(|| panic!("no summary"))
}

fn compaction(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))
        .unwrap_or_else(|e| panic!("{e}"));
    let ws = memory.workspace("bench").unwrap_or_else(|e| panic!("{e}"));
    session(&ws);
    memory.sync().unwrap_or_else(|e| panic!("{e}"));
    let options = CompactOptions::new(BUDGET);
    let view = StateKey::CompactionView {
        session: "s".to_owned(),
    };
    let report = ws
        .compact("s", &options, &Extractive)
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "compaction of {} turns: {} -> {} tokens ({:.1}x), {} nodes, {} declined, view of {} items",
        turns(),
        report.tokens_before,
        report.tokens_after,
        report.tokens_before as f64 / report.tokens_after.max(1) as f64,
        report.created.len(),
        report.declined,
        report.view.items.len()
    );

    let mut group = c.benchmark_group("compaction");
    group.sample_size(10);
    group.throughput(Throughput::Elements(turns() as u64));
    group.bench_function("pass_10k_turns", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                ws.state_apply(&[], std::slice::from_ref(&view))
                    .unwrap_or_else(|e| panic!("{e}"));
                let start = Instant::now();
                let r = ws
                    .compact("s", &options, &Extractive)
                    .unwrap_or_else(|e| panic!("{e}"));
                total += start.elapsed();
                black_box(r);
            }
            total
        })
    });
    group.finish();

    let id = deepest(&ws);
    let node = ws.summary(&id).unwrap_or_else(|e| panic!("{e}"));
    let mut times = Vec::new();
    for _ in 0..samples() {
        let start = Instant::now();
        black_box(ws.expand_all(&id).unwrap_or_else(|e| panic!("{e}")));
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let (p50, p99) = percentiles(times);
    eprintln!(
        "expand_all of level-{} summary {id} ({} turns): p50 {p50:.3} ms, p99 {p99:.3} ms",
        node.level,
        node.to_seq - node.from_seq + 1
    );
    let mut group = c.benchmark_group("expand");
    group.throughput(Throughput::Elements(node.to_seq - node.from_seq + 1));
    group.bench_function("expand_all_depth3", |b| {
        b.iter(|| black_box(ws.expand_all(&id).unwrap_or_else(|e| panic!("{e}"))))
    });
    group.bench_function("expand_one_level", |b| {
        b.iter(|| black_box(ws.expand(&id).unwrap_or_else(|e| panic!("{e}"))))
    });
    // Baseline: the same turns read from the record with no DAG walk and
    // no hash check.
    let len = usize::try_from(node.to_seq - node.from_seq + 1).unwrap_or(usize::MAX);
    group.bench_function("baseline_read_same_turns", |b| {
        b.iter(|| {
            black_box(
                ws.transcript(&node.session, node.from_seq, Some(len))
                    .unwrap_or_else(|e| panic!("{e}")),
            )
        })
    });
    group.finish();
    let mut times = Vec::new();
    for _ in 0..samples() {
        let start = Instant::now();
        black_box(ws.expand(&id).unwrap_or_else(|e| panic!("{e}")));
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let (p50, p99) = percentiles(times);
    eprintln!("expand (one level) of {id}: p50 {p50:.4} ms, p99 {p99:.4} ms");

    let request = AssembleRequest::new("s", 8_000);
    let block = ws
        .assemble(&request, &NoRetrieval, &TrustAll)
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "assembly of the compacted session: {} tokens of 8000, {} summaries in the block",
        block.tokens,
        block
            .items
            .iter()
            .filter(|i| matches!(i.source, cairn_memory::ItemSource::Summary { .. }))
            .count()
    );
    let mut times = Vec::new();
    for _ in 0..samples().min(300) {
        let start = Instant::now();
        black_box(
            ws.assemble(&request, &NoRetrieval, &TrustAll)
                .unwrap_or_else(|e| panic!("{e}")),
        );
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let (p50, p99) = percentiles(times);
    eprintln!("assemble_compacted: p50 {p50:.3} ms, p99 {p99:.3} ms");
    let mut group = c.benchmark_group("assemble");
    group.bench_function("assemble_compacted", |b| {
        b.iter(|| {
            black_box(
                ws.assemble(&request, &NoRetrieval, &TrustAll)
                    .unwrap_or_else(|e| panic!("{e}")),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, compaction);
criterion_main!(benches);
