//! Long-lived workers that a panic does not end.
//!
//! cairn runs a few threads for its whole life (the search indexer, the
//! decision log's writer, the actors' ticker, the cluster's lease loop). A
//! bug or a hostile record that makes one of them panic must not stop the
//! work for everyone: each runs its passes through a [`Worker`], which
//! catches the panic, logs it, counts it, and lets the loop go on. Work that
//! is done per item (a workspace, for the indexer) runs through
//! [`Worker::item`]: an item that panics is set aside (quarantined) and
//! tried again after a backoff that doubles from one second to ten minutes,
//! while the other items go on at once.
//!
//! [`Workers::health`] is what `/healthz` and `cairn doctor` report.
//!
//! ```
//! use cairn_memory::supervise::Workers;
//! let workers = Workers::default();
//! let indexer = workers.worker("indexer");
//! assert_eq!(indexer.item("acme", || 1 + 1), Some(2));
//! // A panic is caught and counted; the item waits for its backoff.
//! assert_eq!(indexer.item("globex", || -> u32 { panic!("bad record") }), None);
//! assert!(indexer.quarantined("globex"));
//! assert!(!indexer.quarantined("acme"));
//! let health = workers.health();
//! assert_eq!(health[0].panics, 1);
//! assert_eq!(health[0].quarantined, vec!["globex".to_owned()]);
//! ```

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// The first wait before a quarantined item is tried again; it doubles
/// with each panic in a row, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait before a quarantined item is tried again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// The workers of one process (or one [`crate::Memory`]), by name.
#[derive(Debug, Clone, Default)]
pub struct Workers {
    inner: Arc<Mutex<BTreeMap<String, State>>>,
}

#[derive(Debug, Default)]
struct State {
    running: bool,
    passes: u64,
    panics: u64,
    last_panic: Option<(DateTime<Utc>, String)>,
    /// Items set aside: panics in a row, and when to try again.
    quarantine: BTreeMap<String, (u32, Instant)>,
}

/// What one worker reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerHealth {
    /// The worker (`search-indexer`, `decision-writer`, `ticker`, …).
    pub name: String,
    /// Whether its thread is running.
    pub running: bool,
    /// Passes (or items) it has run.
    pub passes: u64,
    /// Panics caught in them since start.
    pub panics: u64,
    /// The newest panic: when, and its message.
    pub last_panic: Option<String>,
    /// Items set aside after a panic, tried again after a backoff.
    pub quarantined: Vec<String>,
}

impl Workers {
    /// The handle of the worker `name` (registered on first use).
    pub fn worker(&self, name: &str) -> Worker {
        self.inner.lock().entry(name.to_owned()).or_default();
        Worker {
            name: name.to_owned(),
            workers: self.clone(),
        }
    }

    /// Every registered worker's report, by name.
    pub fn health(&self) -> Vec<WorkerHealth> {
        self.inner
            .lock()
            .iter()
            .map(|(name, s)| WorkerHealth {
                name: name.clone(),
                running: s.running,
                passes: s.passes,
                panics: s.panics,
                last_panic: s
                    .last_panic
                    .as_ref()
                    .map(|(at, msg)| format!("{}: {msg}", at.to_rfc3339())),
                quarantined: s.quarantine.keys().cloned().collect(),
            })
            .collect()
    }

    /// Panics caught by every worker since start.
    pub fn panics(&self) -> u64 {
        self.inner.lock().values().map(|s| s.panics).sum()
    }
}

/// One worker's handle: runs its passes and items with panics caught.
#[derive(Debug, Clone)]
pub struct Worker {
    name: String,
    workers: Workers,
}

impl Worker {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut all = self.workers.inner.lock();
        f(all.entry(self.name.clone()).or_default())
    }

    /// Marks the worker's thread as running (`true`) or ended (`false`).
    pub fn set_running(&self, running: bool) {
        self.with(|s| s.running = running);
    }

    /// Runs one pass of the worker; `None` when it panicked (caught,
    /// logged, counted).
    pub fn pass<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        self.run(None, f)
    }

    /// Runs the work on one `item`; `None` when it panicked, after which
    /// the item is [`quarantined`](Self::quarantined) for a backoff. A
    /// success clears the item's record.
    pub fn item<T>(&self, item: &str, f: impl FnOnce() -> T) -> Option<T> {
        self.run(Some(item), f)
    }

    /// Whether `item` panicked lately and its backoff has not run out.
    pub fn quarantined(&self, item: &str) -> bool {
        self.with(|s| {
            s.quarantine
                .get(item)
                .is_some_and(|(_, until)| Instant::now() < *until)
        })
    }

    /// Forgets `item`'s quarantine (the item is gone, e.g. erased).
    pub fn release(&self, item: &str) {
        self.with(|s| s.quarantine.remove(item));
    }

    fn run<T>(&self, item: Option<&str>, f: impl FnOnce() -> T) -> Option<T> {
        // The work's state is the caller's to repair (each caller redoes
        // the item whole after a panic), so observing it half-done is
        // accounted for.
        let outcome = catch_unwind(AssertUnwindSafe(f));
        self.with(|s| {
            s.passes += 1;
            match (&outcome, item) {
                (Ok(_), Some(item)) => {
                    s.quarantine.remove(item);
                }
                (Ok(_), None) => {}
                (Err(payload), _) => {
                    let message = panic_message(payload.as_ref());
                    s.panics += 1;
                    s.last_panic = Some((Utc::now(), message.clone()));
                    let backoff = item.map(|item| {
                        let (count, until) = s
                            .quarantine
                            .entry(item.to_owned())
                            .or_insert((0, Instant::now()));
                        *count = count.saturating_add(1);
                        let wait = backoff(*count);
                        *until = Instant::now() + wait;
                        wait
                    });
                    tracing::error!(
                        worker = %self.name,
                        item = item.unwrap_or(""),
                        retry_in_secs = backoff.map(|b| b.as_secs()),
                        panic = %message,
                        "a worker's pass panicked; caught, the worker goes on"
                    );
                }
            }
        });
        outcome.ok()
    }
}

/// The wait after `count` panics in a row.
fn backoff(count: u32) -> Duration {
    let doublings = count.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

/// The text of a panic's payload, cut to a report line (from the store,
/// whose flusher reports a panicked flush the same way).
pub use cairn_store::panic_message;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn a_panicking_pass_is_counted_and_the_next_runs() {
        let workers = Workers::default();
        let w = workers.worker("w");
        w.set_running(true);
        assert_eq!(w.pass(|| -> u8 { panic!("boom {}", 1) }), None);
        assert_eq!(w.pass(|| 7), Some(7));
        let h = &workers.health()[0];
        assert!(h.running);
        assert_eq!((h.passes, h.panics), (2, 1));
        assert!(
            h.last_panic
                .as_deref()
                .is_some_and(|m| m.ends_with("boom 1"))
        );
        assert!(h.quarantined.is_empty());
    }

    #[test]
    fn a_success_clears_the_quarantine() {
        let workers = Workers::default();
        let w = workers.worker("w");
        w.item("a", || panic!("x"));
        assert!(w.quarantined("a"));
        w.item("a", || ());
        assert!(!w.quarantined("a"));
        assert!(workers.health()[0].quarantined.is_empty());
    }
}
