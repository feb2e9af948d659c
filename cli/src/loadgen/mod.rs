//! `cairn loadgen`: simulated sessions, end to end, with loss accounting.
//!
//! A [`Scenario`] describes a load profile (N sessions across M work
//! contexts and T topics, Poisson arrivals, a user / assistant / tool mix,
//! idle gaps, session ends, policy swaps). [`run`] plays it against the
//! runtime in this process or a running `cairn serve` ([`Target`]), then
//! reads back every acknowledged turn from storage by session and seq,
//! compares content hashes, and returns a [`Report`].
//!
//! # What is reproducible
//!
//! With the same `seed` and scenario, each session's identity, work
//! context, lifetime, turn texts, lengths, roles, tool rounds and gaps are
//! the same from run to run: every session draws from its own generator.
//! What is not: how many turns each session gets through before the run
//! stops, the order in which sessions' turns interleave, and so what
//! triggers fire and when (threads and the runtime's speed decide those).
//!
//! ```no_run
//! use cairn_cli::loadgen::{self, Options, Scenario, Target};
//!
//! let scenario = Scenario { sessions: 20, duration_secs: 2.0, ..Scenario::default() };
//! let report = loadgen::run(&Options {
//!     scenario,
//!     target: Target::InProcess { config: Box::default(), data_dir: None },
//!     progress: false,
//! })?;
//! assert!(report.lossless());
//! # Ok::<(), cairn_cli::loadgen::LoadgenError>(())
//! ```

mod driver;
mod ledger;
mod report;
mod scenario;
mod target;
mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use report::Report;
pub use scenario::{Idle, Lifecycle, Mix, Scenario};

use cairn::{CairnConfig, CairnError};

/// What can stop a loadgen run (a lost turn is not an error: it is in the
/// [`Report`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadgenError {
    /// The scenario is invalid; the message names the key or file.
    #[error("scenario: {0}")]
    Scenario(String),
    /// The run could not start.
    #[error("loadgen setup: {0}")]
    Setup(String),
    /// The runtime refused something outside the measured calls.
    #[error(transparent)]
    Cairn(#[from] CairnError),
    /// The policy host could not start.
    #[error("policy host: {0}")]
    Policy(#[from] cairn::worlds::PolicyError),
    /// The server answered something unexpected while reading back.
    #[error("http: {0}")]
    Http(String),
}

/// Where the load goes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Target {
    /// The runtime in this process, on `data_dir` (a fresh temporary folder
    /// when `None`, removed afterwards), with the WebAssembly significance
    /// gate.
    InProcess {
        /// The configuration (its `data_dir` is replaced).
        config: Box<CairnConfig>,
        /// Keep the data here instead of a temporary folder.
        data_dir: Option<PathBuf>,
    },
    /// Running `cairn serve` nodes (`127.0.0.1:PORT`): one server, or
    /// several nodes of one cluster, which the calls go round (a node that
    /// does not answer is passed over; see `retry_secs`).
    Http {
        /// `host:port` or `http://host:port`, one per node.
        addrs: Vec<String>,
        /// The server's pid, to report its peak RSS.
        server_pid: Option<u32>,
    },
}

/// A run's settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// The load profile.
    pub scenario: Scenario,
    /// Where it goes.
    pub target: Target,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

/// Plays `options.scenario` and does the loss accounting.
pub fn run(options: &Options) -> Result<Report, LoadgenError> {
    options.scenario.validate()?;
    let progress = Progress::new(options.progress, options.scenario.duration_secs);
    match &options.target {
        Target::InProcess { config, data_dir } => {
            let target = Arc::new(target::InProcess::open(
                (**config).clone(),
                data_dir.clone(),
                options.scenario.time_scale,
            )?);
            let mut report =
                driver::run(target.clone(), &options.scenario, "in-process", &progress)?;
            if data_dir.is_some() {
                report.data_dir = Some(target.data_dir().display().to_string());
            }
            Ok(report)
        }
        Target::Http { addrs, server_pid } => {
            let target = Arc::new(target::Http::connect(addrs, options.scenario.concurrency)?);
            let mode = if addrs.len() > 1 {
                "http-cluster"
            } else {
                "http"
            };
            let mut report = driver::run(target.clone(), &options.scenario, mode, &progress)?;
            report.server_rss_mb = server_pid.map(|pid| report::rss_of(&pid.to_string()).1);
            report.failovers = target.failovers();
            Ok(report)
        }
    }
}

/// The progress bar (hidden when not asked for).
pub(crate) struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(show: bool, duration_secs: f64) -> Progress {
        let bar = show.then(|| {
            let bar = indicatif::ProgressBar::new((duration_secs * 10.0) as u64);
            let style = indicatif::ProgressStyle::with_template(
                "{spinner} [{bar:30}] {elapsed_precise} {msg}",
            )
            .map(|s| s.progress_chars("=> "));
            if let Ok(style) = style {
                bar.set_style(style);
            }
            bar
        });
        Progress { bar }
    }

    pub(crate) fn update(&self, acked: u64, elapsed: Duration) {
        if let Some(bar) = &self.bar {
            bar.set_position((elapsed.as_secs_f64() * 10.0) as u64);
            let tps = acked as f64 / elapsed.as_secs_f64().max(1e-3);
            bar.set_message(format!("{acked} turns acked, {tps:.0}/s"));
        }
    }

    pub(crate) fn finish(&self, acked: u64, elapsed: Duration) {
        if let Some(bar) = &self.bar {
            self.update(acked, elapsed);
            bar.finish_and_clear();
        }
    }
}
