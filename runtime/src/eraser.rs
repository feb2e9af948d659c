//! Online erasure: the worker that makes a `forget`'s bytes leave the
//! storage while cairn keeps serving (docs/DURABILITY.md, *Erasure on
//! disk*).
//!
//! `forget` removes content from every collection at once, but the store
//! keeps the bytes of what it deleted: sled in its log segments until they
//! are rewritten, PostgreSQL in dead row versions until it vacuums. After
//! every `forget` the facade leaves a durable mark (`erasure/pending/…` in
//! the store-wide space, holding nothing but its own id) and wakes this
//! worker; the worker waits [`ErasureConfig::settle_ms`] so that a burst of
//! forgets costs one pass, then asks the store to compact
//! ([`Store::compact`](cairn_memory::store::Store::compact): sled rewrites
//! its files online, PostgreSQL runs `VACUUM`) and, once that returned,
//! deletes the marks it saw before it started. A mark left by a crash is
//! found when cairn opens again, and erased then.
//!
//! # Thread, supervision, shutdown
//!
//! One thread, `cairn-eraser`, blocked on a channel between passes. A pass
//! that fails or panics is caught, logged at `error` and counted
//! ([`ErasureStats`]); the marks stay and the pass is tried again after
//! [`RETRY`]. The worker stops when the last `Cairn` clone is dropped (the
//! channel's sender goes): a forget it was settling is erased first (so a
//! CLI `cairn forget`, which exits at once, leaves no bytes either); a pass
//! that failed is not tried again then (its marks bring it back at the next
//! start).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use cairn_memory::Memory;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// How long a failed pass waits before it is tried again.
pub(crate) const RETRY: Duration = Duration::from_secs(30);

/// Settings of online erasure, `[erasure]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ErasureConfig {
    /// Compact the store after each `forget`, while serving. Default true;
    /// false leaves the erased bytes until an offline `cairn vacuum` (sled)
    /// or the database's own vacuum (PostgreSQL).
    pub online: bool,
    /// How long the worker waits after a `forget` before it compacts, so
    /// that a burst of forgets costs one pass, in milliseconds. Default
    /// 2,000; at most 60,000.
    pub settle_ms: u64,
}

impl Default for ErasureConfig {
    fn default() -> Self {
        ErasureConfig {
            online: true,
            settle_ms: 2_000,
        }
    }
}

impl ErasureConfig {
    /// The longest `settle_ms` may be: the documented bound rests on it.
    pub const MAX_SETTLE_MS: u64 = 60_000;

    pub(crate) fn validate(&self) -> std::result::Result<(), String> {
        if self.settle_ms > Self::MAX_SETTLE_MS {
            return Err(format!(
                "erasure.settle_ms is {}, at most {} (the erasure bound rests on it)",
                self.settle_ms,
                Self::MAX_SETTLE_MS
            ));
        }
        Ok(())
    }
}

/// What the erasure worker has done since this process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErasureStats {
    /// Passes that compacted the store.
    pub passes: u64,
    /// Passes that failed or panicked (each logged at `error`, tried again).
    pub failures: u64,
    /// Forgets whose bytes still wait for a pass (durable marks).
    pub pending: u64,
}

#[derive(Debug, Default)]
struct Counters {
    passes: AtomicU64,
    failures: AtomicU64,
}

/// The erasure worker's handle, held by every `Cairn` clone.
#[derive(Debug)]
pub(crate) struct Eraser {
    tx: Mutex<Option<Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    counters: Arc<Counters>,
    memory: Memory,
}

impl Eraser {
    /// Starts the worker (or, with `online` off, a handle that only counts
    /// marks). A mark left by an earlier run starts a pass at once.
    pub(crate) fn start(memory: &Memory, config: &ErasureConfig) -> Eraser {
        let counters = Arc::new(Counters::default());
        let mut eraser = Eraser {
            tx: Mutex::new(None),
            thread: Mutex::new(None),
            counters: counters.clone(),
            memory: memory.clone(),
        };
        if !config.online {
            return eraser;
        }
        let (tx, rx) = mpsc::channel();
        let worker = Worker {
            memory: memory.clone(),
            settle: Duration::from_millis(config.settle_ms),
            counters,
        };
        match std::thread::Builder::new()
            .name("cairn-eraser".to_owned())
            .spawn(move || worker.run(rx))
        {
            Ok(handle) => {
                *eraser.thread.get_mut() = Some(handle);
                if memory
                    .erasure_pending()
                    .is_ok_and(|marks| !marks.is_empty())
                {
                    let _ = tx.send(());
                }
                *eraser.tx.get_mut() = Some(tx);
            }
            Err(error) => {
                tracing::error!(%error, "cannot start the erasure worker: erased bytes stay until `cairn vacuum`");
            }
        }
        eraser
    }

    /// Wakes the worker: a `forget` left a mark.
    pub(crate) fn wake(&self) {
        if let Some(tx) = self.tx.lock().as_ref() {
            let _ = tx.send(());
        }
    }

    /// The worker's counters, and the marks still waiting.
    pub(crate) fn stats(&self) -> cairn_memory::Result<ErasureStats> {
        Ok(ErasureStats {
            passes: self.counters.passes.load(Ordering::Relaxed),
            failures: self.counters.failures.load(Ordering::Relaxed),
            pending: self.memory.erasure_pending()?.len() as u64,
        })
    }
}

impl Drop for Eraser {
    fn drop(&mut self) {
        drop(self.tx.lock().take());
        if let Some(handle) = self.thread.lock().take() {
            let _ = handle.join();
        }
    }
}

/// The worker's name in the memory's workers ([`cairn_memory::supervise`]).
const ERASER: &str = "eraser";

struct Worker {
    memory: Memory,
    settle: Duration,
    counters: Arc<Counters>,
}

impl Worker {
    fn run(self, rx: Receiver<()>) {
        let supervised = self.memory.workers().worker(ERASER);
        supervised.set_running(true);
        self.serve(&rx);
        supervised.set_running(false);
    }

    fn serve(&self, rx: &Receiver<()>) {
        // Between passes: block until a forget (or the shutdown).
        while rx.recv().is_ok() {
            // Gather the forgets of the settle time into this pass.
            let deadline = Instant::now() + self.settle;
            loop {
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(()) => continue,
                    Err(RecvTimeoutError::Timeout) => break,
                    // Closing with a forget not yet erased (a CLI command
                    // exits right after its forget): erase before going.
                    Err(RecvTimeoutError::Disconnected) => {
                        self.pass();
                        return;
                    }
                }
            }
            while !self.pass() {
                match rx.recv_timeout(RETRY) {
                    Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        }
    }

    /// One supervised pass; false when it failed (and was logged).
    fn pass(&self) -> bool {
        let started = Instant::now();
        // Supervised like every long-lived worker: a panic is caught,
        // logged and counted in `/healthz`.
        let supervised = self.memory.workers().worker(ERASER);
        match supervised.pass(|| self.memory.erase_pending()) {
            Some(Ok(report)) => {
                self.counters.passes.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    forgets = report.marks,
                    bytes_before = report.rewrite.map(|r| r.bytes_before),
                    bytes_after = report.rewrite.map(|r| r.bytes_after),
                    ms = started.elapsed().as_millis() as u64,
                    "erased bytes removed from the store"
                );
                true
            }
            Some(Err(error)) => {
                self.counters.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, retry_s = RETRY.as_secs(), "erasure pass failed; erased bytes stay until it succeeds");
                false
            }
            None => {
                self.counters.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    retry_s = RETRY.as_secs(),
                    "erasure pass panicked; erased bytes stay until it succeeds"
                );
                false
            }
        }
    }
}
