#![allow(clippy::expect_used, missing_docs)] // a bench binary: failing loudly is right.
//! The actor runtime: message hop, end-to-end ingest, memory per live actor.
//!
//! - `actors/hop`: in-memory messages from a `SessionActor` to a
//!   `WorkContextActor` (bounded mailbox, `try_send`, waiting for room when
//!   full), no storage. Throughput = messages.
//! - `actors/ingest_single`: one turn per acknowledgement, durable (fsync),
//!   `Workspace::append_turn` directly vs `Cairn::ingest` through
//!   host → SessionActor → (blocking pool write) → WorkContextActor, each on
//!   a fresh store, in the same run.
//! - `actors/spawn_10k_sessions`: starting 10,000 session actors; the
//!   resident-memory increase of 10,000 live session actors is printed once
//!   (`actors/memory: …`) from `/proc/self/statm`.
//!
//! Run: `cargo bench -p cairn-benches --bench actors`. Results: docs/BENCHMARKS.md.

use std::sync::Arc;
use std::time::Duration;

use cairn::{ActorConfig, Cairn, CairnConfig, Role, TurnInput};
use cairn_actors::ActorRuntime;
use cairn_memory::{Memory, MemoryConfig, SystemClock};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const CONTENT: &str = "Let's go with April 1 and sync on. Can you check how many beta sign-ups we have so far? \
                       Marketing wanted March 18 but the sync engine needs two more weeks of hardening.";

fn config(dir: &std::path::Path) -> CairnConfig {
    CairnConfig {
        data_dir: dir.to_owned(),
        actors: ActorConfig {
            tick_interval_secs: 0,
            ..ActorConfig::default()
        },
        ..CairnConfig::default()
    }
}

fn runtime(dir: &std::path::Path) -> ActorRuntime {
    let memory =
        Memory::open_sled(dir, MemoryConfig::default(), Arc::new(SystemClock)).expect("memory");
    ActorRuntime::start(
        memory,
        ActorConfig {
            tick_interval_secs: 0,
            ..ActorConfig::default()
        },
    )
    .expect("runtime")
}

fn hop(c: &mut Criterion) {
    const N: u64 = 100_000;
    let mut group = c.benchmark_group("actors/hop");
    group.throughput(Throughput::Elements(N));
    group.sample_size(20);
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(dir.path());
    group.bench_function("session_to_context", |b| {
        b.iter(|| {
            let got = rt.hop("bench", "s", "wc", N).expect("hop");
            assert_eq!(got, N);
        })
    });
    group.finish();
}

fn ingest_single(c: &mut Criterion) {
    let mut group = c.benchmark_group("actors/ingest_single");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(8));

    let direct_dir = tempfile::tempdir().expect("tempdir");
    // The baseline: the memory core's append on its own store, no actors.
    let direct = Memory::open_sled(
        direct_dir.path(),
        MemoryConfig::default(),
        std::sync::Arc::new(SystemClock),
    )
    .expect("memory");
    let ws = direct.workspace("bench").expect("workspace");
    let mut i = 0u64;
    group.bench_function("direct_workspace_append_turn", |b| {
        b.iter(|| {
            i += 1;
            let turn =
                TurnInput::new("s", Role::User, CONTENT).with_idempotency_key(&format!("k{i}"));
            ws.append_turn(&turn).expect("append");
        })
    });

    let actors_dir = tempfile::tempdir().expect("tempdir");
    let cairn = Cairn::open(config(actors_dir.path())).expect("cairn");
    let mut i = 0u64;
    group.bench_function("through_actors_cairn_ingest", |b| {
        b.iter(|| {
            i += 1;
            let turn =
                TurnInput::new("s", Role::User, CONTENT).with_idempotency_key(&format!("k{i}"));
            cairn.ingest("bench", &[turn]).expect("ingest");
        })
    });
    group.finish();
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn spawn_10k(c: &mut Criterion) {
    const N: usize = 10_000;
    let ids: Vec<String> = (0..N).map(|i| format!("session-{i}")).collect();

    // Memory of 10,000 live session actors, measured once, and only in a real
    // bench run (`cargo bench` passes `--bench`; test runs and `--list` don't).
    if std::env::args().any(|a| a == "--bench") {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = runtime(dir.path());
        rt.warm_sessions("bench", &ids[..100]).expect("warm");
        std::thread::sleep(Duration::from_millis(300));
        let before = resident_bytes();
        rt.warm_sessions("bench", &ids).expect("warm");
        // Actors are constructed on their arbiters; a hop through one of the
        // last ones' arbiters is not needed, a pause is enough.
        std::thread::sleep(Duration::from_secs(1));
        let after = resident_bytes();
        let live = rt.stats().sessions;
        println!(
            "actors/memory: {live} live session actors, +{:.1} MB resident ({} bytes per actor)",
            (after.saturating_sub(before)) as f64 / 1e6,
            after.saturating_sub(before) / (live.saturating_sub(100).max(1)) as u64
        );
    }

    let mut group = c.benchmark_group("actors/spawn_10k_sessions");
    group.throughput(Throughput::Elements(N as u64));
    group.sample_size(10);
    group.bench_function("warm_sessions", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("tempdir");
                let rt = runtime(dir.path());
                (dir, rt)
            },
            |(dir, rt)| {
                rt.warm_sessions("bench", &ids).expect("warm");
                (dir, rt)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, hop, ingest_single, spawn_10k);
criterion_main!(benches);
