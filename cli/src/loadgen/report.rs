//! The result of a run: one JSON object (`--json`) or a human summary.

use std::fmt;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// What a loadgen run measured. Latencies are in milliseconds, measured by
/// the caller around each call (over HTTP: including the round trip).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Report {
    /// `in-process` or `http`.
    pub mode: String,
    /// The scenario's name.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// Concurrent simulated sessions.
    pub sessions: usize,
    /// Work contexts.
    pub work_contexts: usize,
    /// Workspaces.
    pub workspaces: usize,
    /// Topics.
    pub topics: usize,
    /// Calls in flight at most (driver threads).
    pub concurrency: usize,
    /// Offered turns per second (0: closed loop).
    pub offered_tps: f64,
    /// How long the load ran.
    pub elapsed_secs: f64,
    /// Turns acknowledged.
    pub turns_acked: u64,
    /// Acknowledged turns read back after the run.
    pub turns_checked: u64,
    /// Acknowledged turns missing from storage (or stored with other content).
    pub turns_lost: u64,
    /// Extra stored copies of acknowledged turns.
    pub turns_duplicated: u64,
    /// Turns refused even after retries (not acknowledged, so not lost).
    pub turns_failed: u64,
    /// Stored turns that were never acknowledged (a call that failed after
    /// the write); not a loss.
    pub stored_unacked: u64,
    /// Stored turns out of their session's gapless 0, 1, 2… sequence.
    pub seq_gaps: u64,
    /// Retried calls (backpressure, 503, transport errors).
    pub retries: u64,
    /// Over several `--http` nodes: calls that went to another node
    /// because one did not answer.
    pub failovers: u64,
    /// Acknowledged turns per second.
    pub throughput_tps: f64,
    /// The length of the windows of `window_tps`, in seconds.
    pub window_secs: f64,
    /// Acknowledged turns per second in each whole window of the run, in
    /// order: flat when throughput holds while the memory log grows.
    pub window_tps: Vec<f64>,
    /// Ingest acknowledgement p99 in each window of `window_tps` (0 for a
    /// window without an acknowledgement): where in the run the tail is.
    pub window_ack_p99_ms: Vec<f64>,
    /// Ingest acknowledgement latency, median.
    pub ack_p50_ms: f64,
    /// Ingest acknowledgement latency, 99th percentile.
    pub ack_p99_ms: f64,
    /// Slowest acknowledgement.
    pub ack_max_ms: f64,
    /// `assemble` calls made (one before each assistant turn).
    pub assembles: u64,
    /// `assemble` calls that failed.
    pub assemble_errors: u64,
    /// Assembly latency, median.
    pub assemble_p50_ms: f64,
    /// Assembly latency, 99th percentile.
    pub assemble_p99_ms: f64,
    /// How late turns were sent against their Poisson schedule, 99th
    /// percentile (large: the runtime did not keep up with the offered load).
    pub lag_p99_ms: f64,
    /// Sessions bootstrapped.
    pub sessions_started: u64,
    /// Sessions ended (each then replaced by a new one).
    pub sessions_ended: u64,
    /// Captures the time triggers fired (in process; `null` over HTTP).
    pub captures: Option<u64>,
    /// Significance decisions made during the run (`null` when the target
    /// does not report them).
    pub decisions: Option<u64>,
    /// Of those, how many were fail-safes after a plugin fault.
    pub decision_faults: Option<u64>,
    /// Policy hot swaps done.
    pub swaps: u64,
    /// Policy swaps refused.
    pub swap_failures: u64,
    /// Topic watchers defined across the workspaces.
    pub watched_topics: usize,
    /// Topic gate decisions logged (`null` when the target does not say).
    pub topic_decisions: Option<u64>,
    /// Turns the topics collected.
    pub topic_collected: Option<u64>,
    /// Proposals of gated topics.
    pub topic_proposals: Option<u64>,
    /// Tier-3 answers that were fail-safes after a topic plugin fault.
    pub topic_faults: Option<u64>,
    /// Resident memory of this process at the end, MB.
    pub rss_mb: f64,
    /// Peak resident memory of this process, MB.
    pub peak_rss_mb: f64,
    /// Peak resident memory of the server (over HTTP, with `--server-pid`).
    pub server_rss_mb: Option<f64>,
    /// Whether the embedding model was loaded in this process (it loads on
    /// the first search; the loadgen does not search).
    pub embedding_model_loaded: bool,
    /// Where the data went (in process).
    pub data_dir: Option<String>,
    /// What the numbers do not cover.
    pub notes: Vec<String>,
}

impl Report {
    /// True when every acknowledged turn was read back exactly once, and
    /// every session's seqs are gapless.
    pub fn lossless(&self) -> bool {
        self.turns_lost == 0 && self.turns_duplicated == 0 && self.seq_gaps == 0
    }
}

pub(crate) struct Latencies;

impl Latencies {
    /// A percentile of a µs histogram, in ms (0 when empty).
    pub(crate) fn ms(h: &Histogram<u64>, q: f64) -> f64 {
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(q / 100.0) as f64 / 1000.0
        }
    }
}

/// `(current, peak)` resident memory of a process in MB, from
/// `/proc/<pid>/status` (0 where unavailable).
pub(crate) fn rss_of(pid: &str) -> (f64, f64) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (0.0, 0.0);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub(crate) fn rss_mb() -> (f64, f64) {
    rss_of("self")
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |v: Option<u64>| v.map_or_else(|| "n/a".to_owned(), |v| v.to_string());
        writeln!(
            f,
            "cairn loadgen: {} ({}), seed {}, {} sessions over {} work contexts in {} workspaces, {} topics",
            self.scenario,
            self.mode,
            self.seed,
            self.sessions,
            self.work_contexts,
            self.workspaces,
            self.topics
        )?;
        let offered = if self.offered_tps > 0.0 {
            format!("{:.0} turns/s offered", self.offered_tps)
        } else {
            "closed loop".to_owned()
        };
        writeln!(
            f,
            "  load       {:.1} s, {offered}, {} in flight at most",
            self.elapsed_secs, self.concurrency
        )?;
        writeln!(
            f,
            "  turns      {} acked ({:.0}/s), {} failed, {} retries",
            self.turns_acked, self.throughput_tps, self.turns_failed, self.retries
        )?;
        if let (Some(first), Some(last)) = (self.window_tps.first(), self.window_tps.last()) {
            writeln!(
                f,
                "  over time  {first:.0}/s in the first {:.0} s, {last:.0}/s in the last ({:.0} %)",
                self.window_secs,
                100.0 * last / first.max(1e-9)
            )?;
        }
        writeln!(
            f,
            "  ack        p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (schedule lag p99 {:.1} ms)",
            self.ack_p50_ms, self.ack_p99_ms, self.ack_max_ms, self.lag_p99_ms
        )?;
        if let Some((worst, p99)) = self
            .window_ack_p99_ms
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
        {
            let windows: Vec<String> = self
                .window_ack_p99_ms
                .iter()
                .map(|p| format!("{p:.1}"))
                .collect();
            writeln!(
                f,
                "  ack p99    per {:.0} s window: {} ms (worst {p99:.2} ms, window {})",
                self.window_secs,
                windows.join(" "),
                worst + 1
            )?;
        }
        writeln!(
            f,
            "  assemble   {} calls, p50 {:.2} ms, p99 {:.2} ms, {} errors",
            self.assembles, self.assemble_p50_ms, self.assemble_p99_ms, self.assemble_errors
        )?;
        writeln!(
            f,
            "  sessions   {} started, {} ended; captures {}",
            self.sessions_started,
            self.sessions_ended,
            opt(self.captures)
        )?;
        writeln!(
            f,
            "  policy     {} decisions, {} faults, {} swaps ({} refused)",
            opt(self.decisions),
            opt(self.decision_faults),
            self.swaps,
            self.swap_failures
        )?;
        if self.watched_topics > 0 {
            writeln!(
                f,
                "  topics     {} watchers: {} decisions, {} collected, {} proposed, {} faults",
                self.watched_topics,
                opt(self.topic_decisions),
                opt(self.topic_collected),
                opt(self.topic_proposals),
                opt(self.topic_faults)
            )?;
        }
        let server = self
            .server_rss_mb
            .map_or_else(String::new, |mb| format!(", server peak {mb:.0} MB"));
        writeln!(
            f,
            "  memory     RSS {:.0} MB (peak {:.0} MB){server}; embedding model {}",
            self.rss_mb,
            self.peak_rss_mb,
            if self.embedding_model_loaded {
                "loaded"
            } else {
                "not loaded"
            }
        )?;
        writeln!(
            f,
            "  loss       {} checked, {} lost, {} duplicated, {} stored but unacknowledged, {} seq gaps: {}",
            self.turns_checked,
            self.turns_lost,
            self.turns_duplicated,
            self.stored_unacked,
            self.seq_gaps,
            if self.lossless() { "OK" } else { "FAILED" }
        )?;
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        Ok(())
    }
}
