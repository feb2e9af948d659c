#![allow(clippy::expect_used, missing_docs)] // a bench binary: failing loudly is right.
//! Ingest acknowledgement with durability on, against raw sled in the same run.
//!
//! - `ingest/single`: one turn per acknowledgement. `raw_sled_insert_flush`
//!   inserts the same bytes a stored turn takes and flushes; `cairn_append_turn`
//!   is the full path (validation, sequence number, idempotency key, atomic
//!   batch, group-commit fsync).
//! - `ingest/batch_100`: 100 turns per acknowledgement, same comparison.
//! - `ingest/concurrent_8x`: 8 threads each appending single turns to their
//!   own session; group commit shares fsyncs between them.
//!
//! With `CAIRN_BENCH_POSTGRES_URL` set (a database cairn may create its
//! tables in), each group also measures `cairn_append_turn*_postgres`: the
//! same full path on the PostgreSQL backend, where an acknowledgement is a
//! committed transaction (`synchronous_commit = on`) instead of an fsync.
//!
//! Run: `cargo bench -p cairn-benches --bench ingest`. Results: docs/BENCHMARKS.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const CONTENT: &str = "Let's go with April 1 and sync on. Can you check how many beta sign-ups we have so far? \
                       Marketing wanted March 18 but the sync engine needs two more weeks of hardening.";

fn turn(session: &str, i: u64) -> TurnInput {
    TurnInput::new(session, Role::User, CONTENT).with_idempotency_key(&format!("k{i}"))
}

/// Bytes of one stored turn (what raw sled is asked to write).
fn stored_turn_bytes() -> Vec<u8> {
    let turn = cairn_memory::Turn {
        workspace: "bench".into(),
        session: "s".into(),
        work_context: "default".into(),
        seq: 0,
        role: Role::User,
        content: CONTENT.into(),
        tool_call_id: None,
        timestamp: chrono::Utc::now(),
        content_hash: cairn_memory::record::content_hash(CONTENT),
    };
    cairn_memory::record::stored_turn_bytes(&turn, Some("k1000")).expect("a turn encodes")
}

/// Memory on the PostgreSQL database `CAIRN_BENCH_POSTGRES_URL` names, if set.
fn postgres_memory() -> Option<Memory> {
    let url = std::env::var("CAIRN_BENCH_POSTGRES_URL").ok()?;
    let storage = cairn_memory::StorageConfig {
        backend: cairn_memory::StorageBackend::Postgres,
        postgres: cairn_memory::PostgresConfig {
            url,
            ..cairn_memory::PostgresConfig::default()
        },
        ..cairn_memory::StorageConfig::default()
    };
    let dir = std::env::temp_dir();
    Some(
        Memory::open_storage(
            &dir,
            &storage,
            MemoryConfig::default(),
            Arc::new(SystemClock),
        )
        .expect("postgres memory"),
    )
}

/// A workspace no earlier run used (the database outlives the bench).
fn fresh_workspace() -> String {
    format!("bench-{}", ulid::Ulid::new().to_string().to_lowercase())
}

fn single(c: &mut Criterion) {
    let mut group = c.benchmark_group("ingest/single");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(8));

    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::Config::new()
        .path(dir.path())
        .flush_every_ms(None)
        .open()
        .expect("sled");
    let tree = db.open_tree("raw").expect("tree");
    let bytes = stored_turn_bytes();
    let mut i = 0u64;
    group.bench_function("raw_sled_insert_flush", |b| {
        b.iter(|| {
            i += 1;
            tree.insert(i.to_be_bytes(), bytes.as_slice())
                .expect("insert");
            db.flush().expect("flush");
        })
    });

    let dir2 = tempfile::tempdir().expect("tempdir");
    let memory = Memory::open_sled(dir2.path(), MemoryConfig::default(), Arc::new(SystemClock))
        .expect("memory");
    let ws = memory.workspace("bench").expect("workspace");
    let mut i = 0u64;
    group.bench_function("cairn_append_turn", |b| {
        b.iter(|| {
            i += 1;
            ws.append_turn(&turn("s", i)).expect("append");
        })
    });
    drop((ws, memory));
    if let Some(memory) = postgres_memory() {
        let ws = memory.workspace(&fresh_workspace()).expect("workspace");
        let mut i = 0u64;
        group.bench_function("cairn_append_turn_postgres", |b| {
            b.iter(|| {
                i += 1;
                ws.append_turn(&turn("s", i)).expect("append");
            })
        });
    }
    group.finish();
}

fn batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("ingest/batch_100");
    group.throughput(Throughput::Elements(100));
    group.measurement_time(Duration::from_secs(8));

    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::Config::new()
        .path(dir.path())
        .flush_every_ms(None)
        .open()
        .expect("sled");
    let tree = db.open_tree("raw").expect("tree");
    let bytes = stored_turn_bytes();
    let mut i = 0u64;
    group.bench_function("raw_sled_batch_flush", |b| {
        b.iter(|| {
            let mut batch = sled::Batch::default();
            for _ in 0..100 {
                i += 1;
                batch.insert(&i.to_be_bytes(), bytes.as_slice());
            }
            tree.apply_batch(batch).expect("batch");
            db.flush().expect("flush");
        })
    });

    let dir2 = tempfile::tempdir().expect("tempdir");
    let memory = Memory::open_sled(dir2.path(), MemoryConfig::default(), Arc::new(SystemClock))
        .expect("memory");
    let ws = memory.workspace("bench").expect("workspace");
    let mut i = 0u64;
    group.bench_function("cairn_append_turns", |b| {
        b.iter_batched(
            || {
                (0..100)
                    .map(|_| {
                        i += 1;
                        turn("s", i)
                    })
                    .collect::<Vec<_>>()
            },
            |turns| ws.append_turns(&turns).expect("append"),
            BatchSize::SmallInput,
        )
    });
    drop((ws, memory));
    if let Some(memory) = postgres_memory() {
        let ws = memory.workspace(&fresh_workspace()).expect("workspace");
        let mut i = 0u64;
        group.bench_function("cairn_append_turns_postgres", |b| {
            b.iter_batched(
                || {
                    (0..100)
                        .map(|_| {
                            i += 1;
                            turn("s", i)
                        })
                        .collect::<Vec<_>>()
                },
                |turns| ws.append_turns(&turns).expect("append"),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn concurrent(c: &mut Criterion) {
    const THREADS: u64 = 8;
    let mut group = c.benchmark_group("ingest/concurrent_8x");
    group.measurement_time(Duration::from_secs(8));
    group.sample_size(20);
    group.throughput(Throughput::Elements(THREADS * 50));

    let dir = tempfile::tempdir().expect("tempdir");
    let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))
        .expect("memory");
    let mut stores = vec![("cairn_append_turn_8_threads", memory)];
    if let Some(memory) = postgres_memory() {
        stores.push(("cairn_append_turn_8_threads_postgres", memory));
    }
    for (name, memory) in stores {
        let ws = memory.workspace(&fresh_workspace()).expect("workspace");
        let counter = std::sync::atomic::AtomicU64::new(0);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    std::thread::scope(|s| {
                        for t in 0..THREADS {
                            let (ws, counter) = (&ws, &counter);
                            s.spawn(move || {
                                for _ in 0..50 {
                                    let i =
                                        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    ws.append_turn(&turn(&format!("s{t}"), i)).expect("append");
                                }
                            });
                        }
                    });
                }
                start.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, single, batch, concurrent);
criterion_main!(benches);
