//! [`Cairn::health`]: what `/healthz` and `cairn doctor` report about the
//! running process — the policy worlds held closed and the long-lived
//! workers (the search indexer, the decision writer, the ticker, the
//! cluster's lease loop) with the panics caught in them
//! ([`cairn_memory::supervise`]).

use cairn_memory::supervise::WorkerHealth;
use serde::{Deserialize, Serialize};

use crate::host::Cairn;

/// The health of one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`, or `degraded` when something needs the operator (see
    /// `problems`); the process serves either way.
    pub status: String,
    /// cairn's version.
    pub version: String,
    /// What needs the operator: a policy world held closed, a worker that
    /// stopped, work set aside after a panic; with what to do about it.
    pub problems: Vec<String>,
    /// Panics caught in the workers since start (each logged with its
    /// message); the work went on.
    pub panics: u64,
    /// The long-lived workers, by name.
    pub workers: Vec<WorkerHealth>,
}

impl Cairn {
    /// The health of this process: `degraded` while a policy world is held
    /// closed, a worker's thread has ended, or a worker has set work aside
    /// after a panic (it is tried again after a backoff; the other work
    /// goes on).
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let health = cairn.health();
    /// assert_eq!(health.status, "ok");
    /// assert_eq!(health.panics, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn health(&self) -> Health {
        let mut problems: Vec<String> = self
            .policies()
            .held()
            .into_iter()
            .map(|(world, why)| format!("{world} is held closed (fail-safe decisions only): {why}"))
            .collect();
        let mut workers = self.memory().workers().health();
        // The policy host's epoch ticker (it makes plugin deadlines work)
        // keeps its own counts.
        let ticker = self.policies().host().ticker_status();
        workers.push(WorkerHealth {
            name: "plugin-ticker".to_owned(),
            running: ticker.running,
            passes: ticker.ticks,
            panics: ticker.panics,
            last_panic: None,
            quarantined: Vec::new(),
        });
        workers.sort_by(|a, b| a.name.cmp(&b.name));
        for w in &workers {
            if !w.running && (w.passes > 0 || w.name == "plugin-ticker") {
                problems.push(format!(
                    "worker {} has stopped; restart the process (the log says why)",
                    w.name
                ));
            }
            if !w.quarantined.is_empty() {
                problems.push(format!(
                    "worker {} set aside {} after a panic (retried with a backoff; the log has the panic): {}",
                    w.name,
                    if w.quarantined.len() == 1 { "one item" } else { "items" },
                    w.quarantined.join(", ")
                ));
            }
        }
        Health {
            status: if problems.is_empty() {
                "ok"
            } else {
                "degraded"
            }
            .to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            problems,
            panics: workers.iter().map(|w| w.panics).sum(),
            workers,
        }
    }
}
