#![allow(clippy::expect_used, missing_docs)] // a bench binary: failing loudly is right.
//! Hot paths the loadgen exercises on every turn that no other bench covers,
//! each against a baseline in the same group.
//!
//! - `assemble/session_200_turns`: `Workspace::assemble` (budget 800 and
//!   2,000 tokens) on a session of 200 turns with 100 live entries in its
//!   work context, the call made before every assistant turn. Baseline
//!   `reads_only`: the two reads assembly starts with (the context's entries
//!   and the session's recent turns), without ranking, rendering or token
//!   counting. Retrieval off and a trust-all policy: composition alone
//!   (retrieval and the wasm policy are in `benches/assemble.rs`).
//! - `gate/assess`: the heuristic significance gate on a 600-character
//!   turn with 16 known subjects (called on an arbiter thread for every
//!   stored turn). Baseline `split_words`: splitting the text into words,
//!   the least any mention finder does.
//! - `distance/384`: the HNSW graph's distance between two 384-d unit
//!   vectors (the model's width), evaluated thousands of times per hybrid
//!   search and per insertion. `UnitCosine` (cairn's) against hnsw_rs's
//!   `DistCosine` (the baseline, which the graph used before).
//!
//! - `live_list/20k_entries`: a new live list after a write to a log of
//!   20,000 live entries (assembly asks for the list after every change
//!   of the log, so its cost is paid per change and grows with the log).
//!   `append_then_live`: one durable `append_entry` then `live_entries`;
//!   baseline `append_only`: the same append alone. The difference is the
//!   list's cost (the log grows by one entry per iteration).
//!   `append_decision_then_phase`: a decision appended, then a work
//!   context's phase (the list and its assembly index, with the resume
//!   cards, patched from the previous list's).
//!
//! - `tokens/retrieved_line_aging`: the token count of a retrieved line
//!   whose age label moves with the clock while its 600-character body
//!   does not (64 items shown again and again). `whole_line`: the line
//!   counted whole (a memo miss at every new age); `cut_before_spaces`:
//!   `TokenCounter::count_cut` at the head's cuts (the body and the
//!   head's parts are memo hits). Baseline `baseline_memo_hit`: a count
//!   answered by the memo.
//!
//! - `sensitivity/600_chars`: `redact::exposure` (how sensitive a policy
//!   input is, asked once per new text) on 600 characters of prose, which
//!   the one-pass shortcut clears; baseline `baseline_exposure_with_a_token`:
//!   the same prose ending in a credential, which takes the full rules
//!   (what every text took before the shortcut).
//!
//! Run: `cargo bench -p cairn-benches --bench hotpaths`. Results: docs/BENCHMARKS.md.

use std::sync::{Arc, OnceLock};

use cairn_actors::{CaptureGate, GateInput, HeuristicGate};
use cairn_memory::assemble::{NoRetrieval, RetrievalMode, TrustAll};
use cairn_memory::search::UnitCosine;
use cairn_memory::{
    AssembleRequest, EntryFilter, EntryInput, EntryKind, Memory, MemoryConfig, Role, SessionKind,
    Subject, SubjectKind, SystemClock, TokenCounter, TurnInput, Workspace,
};
use criterion::{Criterion, criterion_group, criterion_main};

mod common;
use common::Rng;

const TOPICS: &[&str] = &[
    "postgres",
    "kafka",
    "billing",
    "onboarding",
    "kubernetes",
    "grafana",
    "stripe",
    "redis",
    "terraform",
    "auth",
    "search",
    "payments",
    "invoices",
    "mobile",
    "analytics",
    "compliance",
];

fn turn_text(i: usize) -> String {
    let mut text = format!("Turn {i}: ");
    while text.len() < 600 {
        text.push_str("we decided to move the billing export to the new queue after the review; ");
    }
    text
}

/// Built on first use, so that `--list` only lists.
struct Fixture {
    _dir: tempfile::TempDir,
    ws: Workspace,
    subjects: Vec<Subject>,
}

static FIXTURE: OnceLock<Fixture> = OnceLock::new();

fn fixture() -> &'static Fixture {
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ws, subjects) = build(dir.path());
        Fixture {
            _dir: dir,
            ws,
            subjects,
        }
    })
}

fn build(dir: &std::path::Path) -> (Workspace, Vec<Subject>) {
    let memory =
        Memory::open_sled(dir, MemoryConfig::default(), Arc::new(SystemClock)).expect("memory");
    let ws = memory.workspace("bench").expect("workspace");
    let subjects = TOPICS
        .iter()
        .map(|t| {
            ws.add_subject(t, SubjectKind::Topic, None)
                .expect("subject")
        })
        .collect();
    let turns: Vec<TurnInput> = (0..200)
        .map(|i| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            TurnInput::new("s1", role, &turn_text(i)).in_context("wc")
        })
        .collect();
    for chunk in turns.chunks(50) {
        ws.append_turns(chunk).expect("turns");
    }
    let entries: Vec<EntryInput> = (0..100u64)
        .map(|i| {
            EntryInput::new(
                EntryKind::Decision,
                &format!("Decision {i}: use the billing queue"),
            )
            .about(TOPICS[i as usize % TOPICS.len()])
            .from_turns("s1", i, i)
        })
        .collect();
    ws.append_entries(&entries).expect("entries");
    (ws, subjects)
}

fn assemble(c: &mut Criterion) {
    let mut group = c.benchmark_group("assemble/session_200_turns");
    group.bench_function("reads_only", |b| {
        let ws = &fixture().ws;
        b.iter(|| {
            let session = ws.session("s1").expect("session");
            let entries = ws
                .entries(&EntryFilter {
                    work_context: Some(session.work_context.clone()),
                    ..EntryFilter::default()
                })
                .expect("entries");
            let turns = ws.recent_turns("s1", 64).expect("turns");
            (entries.len(), turns.len())
        })
    });
    for budget in [800, 2_000] {
        group.bench_function(format!("assemble_budget_{budget}"), |b| {
            let ws = &fixture().ws;
            let mut request = AssembleRequest::new("s1", budget);
            request.retrieval = RetrievalMode::Off;
            b.iter(|| {
                ws.assemble(&request, &NoRetrieval, &TrustAll)
                    .expect("assemble")
                    .text
                    .len()
            })
        });
    }
    group.finish();
}

fn gate(c: &mut Criterion) {
    let text = format!(
        "{} and the kafka consumer lag on stripe webhooks",
        turn_text(7)
    );
    let mut group = c.benchmark_group("gate/assess");
    group.bench_function("split_words", |b| {
        b.iter(|| {
            text.split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .count()
        })
    });
    group.bench_function("heuristic_16_subjects", |b| {
        let subjects = &fixture().subjects;
        b.iter(|| {
            HeuristicGate
                .assess(&GateInput {
                    workspace: "bench",
                    session: "s-bench",
                    session_kind: SessionKind::Main,
                    work_context: "wc-bench",
                    seq: 7,
                    role: Role::User,
                    content: &text,
                    tool_use: false,
                    subjects,
                    work_phase: None,
                })
                .mentions
                .len()
        })
    });
    group.finish();
}

fn distance(c: &mut Criterion) {
    use hnsw_rs::prelude::{DistCosine, Distance};
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let (a, b) = (rng.unit(384), rng.unit(384));
    let mut group = c.benchmark_group("distance/384");
    group.bench_function("unit_cosine", |bench| {
        bench.iter(|| UnitCosine.eval(std::hint::black_box(&a), std::hint::black_box(&b)))
    });
    group.bench_function("baseline_hnsw_rs_dist_cosine", |bench| {
        bench.iter(|| DistCosine.eval(std::hint::black_box(&a), std::hint::black_box(&b)))
    });
    group.finish();
}

/// The live list after a write, on a log of 20,000 live entries.
fn live_list(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))
        .expect("memory");
    let ws = memory.workspace("bench").expect("workspace");
    let entry = |i: usize| {
        EntryInput::new(
            EntryKind::Fact,
            &format!("Fact {i}: the queue is drained nightly"),
        )
        .about(TOPICS[i % TOPICS.len()])
        .in_context(&format!("wc{}", i % 50))
    };
    let batch: Vec<EntryInput> = (0..20_000).map(entry).collect();
    for chunk in batch.chunks(1_000) {
        ws.append_entries(chunk).expect("entries");
    }
    assert_eq!(ws.live_entries().expect("live").len(), 20_000);
    let mut group = c.benchmark_group("live_list/20k_entries");
    let mut i = 20_000;
    group.bench_function("append_only", |b| {
        b.iter(|| {
            i += 1;
            ws.append_entry(&entry(i)).expect("append")
        })
    });
    group.bench_function("append_then_live", |b| {
        b.iter(|| {
            i += 1;
            ws.append_entry(&entry(i)).expect("append");
            ws.live_entries().expect("live").len()
        })
    });
    // A decision (a continuity record) each time, then what assembly asks
    // for first: the work context's phase, read from the assembly index
    // kept with the list (patched from the previous list's).
    group.bench_function("append_decision_then_phase", |b| {
        b.iter(|| {
            i += 1;
            let decision = EntryInput::new(EntryKind::Decision, &format!("Decision {i}: ship it"))
                .about(TOPICS[i % TOPICS.len()])
                .in_context(&format!("wc{}", i % 50));
            ws.append_entry(&decision).expect("append");
            ws.work_phase("wc0").expect("phase")
        })
    });
    group.finish();
}

/// A retrieved line as assembly renders it, with its cuts: the head (the
/// source, then an age label that moves with the clock, then the scope)
/// and the 600-character body.
fn retrieved_line(item: usize, minutes: usize) -> (String, [usize; 3]) {
    let mut line = format!("- (user; observed; s-bench:{item};");
    let first = line.len();
    line.push_str(&format!(" {minutes}m;"));
    let second = line.len();
    line.push_str(" this session)");
    let third = line.len();
    line.push(' ');
    line.push_str(&turn_text(item));
    line.push('\n');
    (line, [first, second, third])
}

fn tokens(c: &mut Criterion) {
    let counter = TokenCounter::new("o200k_base").expect("a bundled encoding");
    let mut group = c.benchmark_group("tokens/retrieved_line_aging");
    // 64 items shown again and again while the clock moves: each (item,
    // age) line is new, each item's body is not.
    let aging = |i: usize| retrieved_line(i % 64, 1_000_000 + i / 64);
    group.bench_function("baseline_memo_hit", |b| {
        let (line, _) = retrieved_line(0, 5);
        b.iter(|| counter.count(&line))
    });
    // Criterion runs a routine once per sample: the clock lives outside
    // it, so no (item, age) line comes twice.
    let clock = std::cell::Cell::new(0);
    let tick = || {
        clock.set(clock.get() + 1);
        clock.get()
    };
    group.bench_function("whole_line", |b| b.iter(|| counter.count(&aging(tick()).0)));
    group.bench_function("cut_before_spaces", |b| {
        b.iter(|| {
            let (line, cuts) = aging(tick());
            counter.count_cut(&line, &cuts)
        })
    });
    group.finish();
}

fn sensitivity(c: &mut Criterion) {
    use cairn_memory::redact::exposure;
    let prose = turn_text(7);
    // The same prose with a credential at its end: the full rules run (the
    // shortcut finds a secret's name and steps aside).
    let with_token = format!("{prose} token=abc123");
    let mut group = c.benchmark_group("sensitivity/600_chars");
    group.bench_function("exposure_prose", |b| {
        b.iter(|| exposure(std::hint::black_box(&prose)))
    });
    group.bench_function("baseline_exposure_with_a_token", |b| {
        b.iter(|| exposure(std::hint::black_box(&with_token)))
    });
    group.finish();
}

criterion_group!(
    benches,
    assemble,
    gate,
    distance,
    live_list,
    tokens,
    sensitivity
);
criterion_main!(benches);
