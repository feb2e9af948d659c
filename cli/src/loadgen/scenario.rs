//! A load profile: how many sessions, how fast, what they say, when they
//! idle and end, and how often the policy is swapped. Read from TOML
//! (`scenarios/*.toml`); every field has a default, and command-line flags
//! override the file.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::LoadgenError;

/// A load profile.
///
/// ```
/// let s = cairn_cli::loadgen::Scenario::from_toml("sessions = 50\nrate = 500.0\n")?;
/// assert_eq!(s.sessions, 50);
/// assert_eq!(s.work_contexts, cairn_cli::loadgen::Scenario::default().work_contexts);
/// # Ok::<(), cairn_cli::loadgen::LoadgenError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// A name for reports.
    pub name: String,
    /// Concurrent simulated sessions (N). A session that ends is replaced
    /// by a new one, so N stay open throughout.
    pub sessions: usize,
    /// Work contexts the sessions are spread over (M).
    pub work_contexts: usize,
    /// Workspaces the work contexts are spread over.
    pub workspaces: usize,
    /// Topics (T): subjects registered in every workspace and mentioned in
    /// the generated text, so turns hit the significance gate's
    /// known-entity rule.
    pub topics: usize,
    /// Offered load, turns per second over all sessions (Poisson arrivals:
    /// each session's gaps are exponential with mean `sessions / rate`).
    /// 0 sends as fast as the runtime acknowledges (closed loop).
    pub rate: f64,
    /// Threads issuing calls: at most this many calls are in flight.
    pub concurrency: usize,
    /// Stop after this many seconds.
    pub duration_secs: f64,
    /// Stop after this many acknowledged turns (0: no limit).
    pub max_turns: u64,
    /// Seed of the random generator.
    pub seed: u64,
    /// What the sessions say.
    pub mix: Mix,
    /// When sessions go quiet.
    pub idle: Idle,
    /// How long sessions live.
    pub lifecycle: Lifecycle,
    /// Token budget of the `assemble` before each assistant turn (default
    /// 4,000: room for the invariants and a tail of long tool results).
    pub assemble_budget_tokens: usize,
    /// Swap the significance plugin every this many seconds (0: never).
    pub swap_every_secs: f64,
    /// Topic definitions (topic watchers) across all workspaces, spread
    /// evenly; each watches one of the run's subjects, with priorities,
    /// activations and scopes in rotation (0: no topics).
    pub watched_topics: usize,
    /// Each swap also hot-swaps the `topic-directive` plugin.
    pub swap_topic_plugin: bool,
    /// In process: simulated seconds per real second (the runtime's clock
    /// runs this much faster, so idle and defocus triggers, which count in
    /// minutes, fire within a short run). Over HTTP the server keeps its
    /// own clock.
    pub time_scale: f64,
    /// How long a turn's ingest keeps being retried on retryable errors
    /// (backpressure, 503, a node that does not answer), in seconds; 0:
    /// six quick attempts. Several `--http` nodes default to 30, so a run
    /// rides through a node's death and the take-over of its workspaces.
    pub retry_secs: f64,
}

/// The turn mix of one exchange: a user turn, then zero or more tool
/// rounds (an assistant tool call and the tool's result, paired by a
/// tool-call id), then the assistant's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Mix {
    /// Probability that an exchange uses tools at all.
    pub tool_probability: f64,
    /// Most tool rounds in one exchange (uniform from 1).
    pub max_tool_rounds: u32,
    /// Median user turn length, characters (log-normal, clipped).
    pub user_chars: usize,
    /// Median assistant turn length, characters.
    pub assistant_chars: usize,
    /// Median tool result length, characters.
    pub tool_chars: usize,
    /// Spread of the log-normal lengths (sigma of the log).
    pub length_sigma: f64,
}

/// Idle gaps: after an exchange a session may go quiet for a while.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Idle {
    /// Probability of a gap after an exchange.
    pub probability: f64,
    /// Shortest gap, real seconds.
    pub min_secs: f64,
    /// Longest gap, real seconds.
    pub max_secs: f64,
}

/// Session lifetimes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Lifecycle {
    /// Fewest turns before a session ends.
    pub min_turns: u32,
    /// Most turns before a session ends.
    pub max_turns: u32,
    /// Start the run as if it had been going for a long time (default):
    /// each slot's first session is given the turns a session has left at
    /// a random moment of a long run (a lifetime picked in proportion to
    /// its length, then a uniform point in it), so sessions end, and are
    /// extracted, at their long-run rate from the first second. With
    /// `false` every first session starts fresh and the ends come in a
    /// wave after `min_turns`: the run's first seconds then hold almost no
    /// session-end extraction, and its throughput is higher than any later
    /// stretch for that reason alone.
    pub staggered: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: "default".to_owned(),
            sessions: 100,
            work_contexts: 20,
            workspaces: 4,
            topics: 16,
            rate: 0.0,
            concurrency: 64,
            duration_secs: 10.0,
            max_turns: 0,
            seed: 1,
            mix: Mix::default(),
            idle: Idle::default(),
            lifecycle: Lifecycle::default(),
            assemble_budget_tokens: 4000,
            swap_every_secs: 0.0,
            watched_topics: 0,
            swap_topic_plugin: false,
            time_scale: 60.0,
            retry_secs: 0.0,
        }
    }
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            tool_probability: 0.3,
            max_tool_rounds: 2,
            user_chars: 160,
            assistant_chars: 600,
            tool_chars: 900,
            length_sigma: 0.6,
        }
    }
}

impl Default for Idle {
    fn default() -> Self {
        Idle {
            probability: 0.05,
            min_secs: 1.0,
            max_secs: 5.0,
        }
    }
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            min_turns: 20,
            max_turns: 120,
            staggered: true,
        }
    }
}

impl Scenario {
    /// Parses a scenario from TOML text and checks it.
    pub fn from_toml(text: &str) -> Result<Scenario, LoadgenError> {
        let scenario: Scenario =
            toml::from_str(text).map_err(|e| LoadgenError::Scenario(e.to_string()))?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Reads and checks a scenario file; the error names the file.
    pub fn load(path: &Path) -> Result<Scenario, LoadgenError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            LoadgenError::Scenario(format!("cannot read scenario {}: {e}", path.display()))
        })?;
        Scenario::from_toml(&text).map_err(|e| match e {
            LoadgenError::Scenario(msg) => {
                LoadgenError::Scenario(format!("scenario {}: {msg}", path.display()))
            }
            other => other,
        })
    }

    /// Checks the values; the message names the offending key.
    pub fn validate(&self) -> Result<(), LoadgenError> {
        let bad = |msg: &str| Err(LoadgenError::Scenario(msg.to_owned()));
        if self.sessions == 0 {
            return bad("sessions must be at least 1");
        }
        if self.work_contexts == 0 || self.workspaces == 0 {
            return bad("work_contexts and workspaces must be at least 1");
        }
        if self.workspaces > self.work_contexts {
            return bad("workspaces must not exceed work_contexts");
        }
        if self.concurrency == 0 || self.concurrency > 4096 {
            return bad("concurrency must be between 1 and 4096");
        }
        if !(self.rate.is_finite() && self.rate >= 0.0) {
            return bad("rate must be a finite number >= 0");
        }
        if !(self.duration_secs.is_finite() && self.duration_secs > 0.0) {
            return bad("duration_secs must be a finite number > 0");
        }
        if !(self.swap_every_secs.is_finite() && self.swap_every_secs >= 0.0) {
            return bad("swap_every_secs must be a finite number >= 0");
        }
        if self.watched_topics > 100_000 {
            return bad("watched_topics must be at most 100000");
        }
        if !(self.time_scale.is_finite() && self.time_scale >= 1.0) {
            return bad("time_scale must be a finite number >= 1");
        }
        if !(self.retry_secs.is_finite() && (0.0..=3600.0).contains(&self.retry_secs)) {
            return bad("retry_secs must be a number between 0 and 3600");
        }
        let p = |v: f64| (0.0..=1.0).contains(&v);
        if !p(self.mix.tool_probability) || !p(self.idle.probability) {
            return bad("mix.tool_probability and idle.probability must be between 0 and 1");
        }
        if self.mix.max_tool_rounds == 0 {
            return bad("mix.max_tool_rounds must be at least 1");
        }
        if self.mix.user_chars == 0 || self.mix.assistant_chars == 0 || self.mix.tool_chars == 0 {
            return bad("mix.*_chars must be at least 1");
        }
        if !(self.mix.length_sigma.is_finite() && self.mix.length_sigma >= 0.0) {
            return bad("mix.length_sigma must be a finite number >= 0");
        }
        if !(self.idle.min_secs >= 0.0 && self.idle.max_secs >= self.idle.min_secs) {
            return bad("idle needs 0 <= min_secs <= max_secs");
        }
        if self.lifecycle.min_turns < 2 || self.lifecycle.max_turns < self.lifecycle.min_turns {
            return bad("lifecycle needs 2 <= min_turns <= max_turns");
        }
        if self.assemble_budget_tokens == 0 {
            return bad("assemble_budget_tokens must be at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_scenarios_parse_and_validate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                names.push(Scenario::load(&path).unwrap().name);
            }
        }
        names.sort();
        assert_eq!(
            names,
            [
                "bursty",
                "many-idle-sessions",
                "steady",
                "swap-storm",
                "topics"
            ]
        );
    }

    #[test]
    fn bad_values_and_unknown_keys_are_named() {
        let err = Scenario::from_toml("sessions = 0").unwrap_err().to_string();
        assert!(err.contains("sessions must be at least 1"), "{err}");
        let err = Scenario::from_toml("[idle]\nprobability = 2.0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("idle.probability"), "{err}");
        let err = Scenario::from_toml("sesions = 3").unwrap_err().to_string();
        assert!(err.contains("sesions"), "{err}");
    }
}
