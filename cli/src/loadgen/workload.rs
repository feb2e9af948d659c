//! What one simulated session says and when: exchanges of a user turn,
//! optional tool rounds and an assistant answer, with log-normal lengths,
//! known topics mentioned, Poisson gaps, idle pauses and a lifetime.
//!
//! Each session draws from its own generator, seeded from the run's seed,
//! its slot and how many sessions that slot had before, so a session's
//! turns do not depend on how threads interleave.

use std::collections::VecDeque;
use std::time::Duration;

use cairn::Role;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::scenario::{Lifecycle, Scenario};

/// Words the generated prose is made of.
const WORDS: &[&str] = &[
    "the",
    "we",
    "should",
    "check",
    "whether",
    "latest",
    "build",
    "passes",
    "before",
    "merging",
    "release",
    "branch",
    "customer",
    "reported",
    "that",
    "export",
    "fails",
    "when",
    "file",
    "is",
    "large",
    "let's",
    "move",
    "deadline",
    "to",
    "next",
    "week",
    "and",
    "ask",
    "team",
    "for",
    "review",
    "schema",
    "migration",
    "needs",
    "index",
    "on",
    "column",
    "query",
    "plan",
    "looks",
    "slow",
    "because",
    "of",
    "sequential",
    "scan",
    "I",
    "think",
    "cache",
    "invalidation",
    "is",
    "wrong",
    "here",
    "decided",
    "use",
    "retry",
    "with",
    "backoff",
    "open",
    "question",
    "who",
    "owns",
    "dashboard",
    "alert",
    "fired",
    "twice",
    "last",
    "night",
    "rollback",
    "plan",
    "ready",
    "config",
    "flag",
    "default",
    "off",
    "tests",
    "cover",
    "edge",
    "case",
    "null",
    "input",
    "user",
    "wants",
    "summary",
    "of",
    "incident",
    "timeline",
    "draft",
    "doc",
    "shared",
    "link",
    "meeting",
    "moved",
    "Thursday",
    "budget",
    "approved",
    "vendor",
    "contract",
    "renewal",
    "due",
    "March",
    "latency",
    "p99",
    "went",
    "up",
    "after",
    "deploy",
    "memory",
    "usage",
    "stable",
    "CPU",
    "spiky",
    "batch",
    "job",
    "queue",
    "backlog",
    "growing",
    "worker",
    "count",
    "increase",
    "from",
    "four",
    "eight",
    "permissions",
    "missing",
    "service",
    "account",
    "rotate",
    "key",
    "monthly",
];

/// Topic names; more topics than names get a number suffix.
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
    "pricing",
    "roadmap",
    "hiring",
    "security",
    "backups",
    "networking",
    "storage",
    "frontend",
];

/// The topic slugs of a run.
pub(crate) fn topics(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| match TOPICS.get(i) {
            Some(name) => (*name).to_owned(),
            None => format!("{}{}", TOPICS[i % TOPICS.len()], i / TOPICS.len()),
        })
        .collect()
}

/// One turn to send.
#[derive(Debug, Clone)]
pub(crate) struct PlannedTurn {
    pub(crate) role: Role,
    pub(crate) tool_call_id: Option<String>,
    pub(crate) content: String,
}

/// The turns a session has left when a long run is looked at at a random
/// moment: the session found there lives a lifetime picked in proportion
/// to its length (a long session is more likely to be the one running),
/// and the moment falls uniformly within it.
fn turns_left_mid_run(l: &Lifecycle, rng: &mut ChaCha8Rng) -> u32 {
    let lifetime = loop {
        let lifetime = rng.random_range(l.min_turns..=l.max_turns);
        if rng.random_range(1..=l.max_turns) <= lifetime {
            break lifetime;
        }
    };
    rng.random_range(1..=lifetime)
}

/// A simulated session: identity, generator, plan, lifetime.
#[derive(Debug)]
pub(crate) struct SessionSim {
    pub(crate) id: String,
    pub(crate) workspace: String,
    pub(crate) work_context: String,
    pub(crate) bootstrapped: bool,
    /// Turns issued so far (also the next idempotency key's number).
    pub(crate) issued: u32,
    lifetime: u32,
    plan: VecDeque<PlannedTurn>,
    rng: ChaCha8Rng,
    slot: usize,
    generation: u32,
    tool_calls: u32,
}

impl SessionSim {
    /// The `generation`-th session of `slot`.
    pub(crate) fn new(s: &Scenario, slot: usize, generation: u32) -> SessionSim {
        let seed = s
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add((slot as u64) << 20)
            .wrapping_add(u64::from(generation));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let wc = (slot + generation as usize * 7) % s.work_contexts;
        let lifetime = if generation == 0 && s.lifecycle.staggered {
            turns_left_mid_run(&s.lifecycle, &mut rng)
        } else {
            rng.random_range(s.lifecycle.min_turns..=s.lifecycle.max_turns)
        };
        SessionSim {
            id: format!("lg-{slot}-{generation}"),
            workspace: format!("lg-ws-{}", wc % s.workspaces),
            work_context: format!("wc-{wc}"),
            bootstrapped: false,
            issued: 0,
            lifetime,
            plan: VecDeque::new(),
            rng,
            slot,
            generation,
            tool_calls: 0,
        }
    }

    /// The session that replaces this one in its slot.
    pub(crate) fn successor(&self, s: &Scenario) -> SessionSim {
        SessionSim::new(s, self.slot, self.generation + 1)
    }

    /// The next turn (planning a new exchange when the last one is done).
    pub(crate) fn next_turn(&mut self, s: &Scenario, topics: &[String]) -> PlannedTurn {
        if self.plan.is_empty() {
            self.plan_exchange(s, topics);
        }
        // plan_exchange always plans at least a user and an assistant turn.
        self.plan.pop_front().unwrap_or_else(|| PlannedTurn {
            role: Role::User,
            tool_call_id: None,
            content: "empty plan".to_owned(),
        })
    }

    /// True when the current exchange is complete.
    pub(crate) fn between_exchanges(&self) -> bool {
        self.plan.is_empty()
    }

    /// True when the session has lived its turns and the exchange is done.
    pub(crate) fn should_end(&self) -> bool {
        self.plan.is_empty() && self.issued >= self.lifetime
    }

    /// The gap before the next turn: exponential with mean
    /// `sessions / rate` (zero in closed loop), plus, between exchanges,
    /// an idle pause with the scenario's probability.
    pub(crate) fn gap(&mut self, s: &Scenario) -> Duration {
        let mut secs = if s.rate > 0.0 {
            let u: f64 = self.rng.random();
            -(1.0 - u).ln() * s.sessions as f64 / s.rate
        } else {
            0.0
        };
        if self.between_exchanges() && self.rng.random_bool(s.idle.probability) {
            secs += self.rng.random_range(s.idle.min_secs..=s.idle.max_secs);
        }
        Duration::from_secs_f64(secs.min(3_600.0))
    }

    fn plan_exchange(&mut self, s: &Scenario, topics: &[String]) {
        let user = self.text(s.mix.user_chars, s.mix.length_sigma, topics, false);
        self.push(Role::User, None, user);
        if self.rng.random_bool(s.mix.tool_probability) {
            let rounds = self.rng.random_range(1..=s.mix.max_tool_rounds);
            for _ in 0..rounds {
                self.tool_calls += 1;
                let id = format!("call-{}-{}", self.id, self.tool_calls);
                let call = format!(
                    "Calling tool search_tickets with query \"{}\".",
                    self.text(40, 0.3, topics, false)
                );
                self.push(Role::Assistant, Some(id.clone()), call);
                let result = self.text(s.mix.tool_chars, s.mix.length_sigma, topics, true);
                self.push(Role::Tool, Some(id), result);
            }
        }
        let answer = self.text(s.mix.assistant_chars, s.mix.length_sigma, topics, false);
        self.push(Role::Assistant, None, answer);
    }

    fn push(&mut self, role: Role, tool_call_id: Option<String>, content: String) {
        self.plan.push_back(PlannedTurn {
            role,
            tool_call_id,
            content,
        });
    }

    /// Prose (or a JSON-ish tool result) of a log-normal length around
    /// `median` characters, mentioning a topic half the time, and ending
    /// with a marker that makes every turn's content unique (the loss
    /// accounting finds turns by content hash).
    fn text(&mut self, median: usize, sigma: f64, topics: &[String], tool: bool) -> String {
        let target = self.length(median, sigma);
        let mut out = String::with_capacity(target + 48);
        if tool {
            out.push_str("{\"status\":\"ok\",\"rows\":[\"");
        }
        let mention = if !topics.is_empty() && self.rng.random_bool(0.5) {
            Some(topics[self.rng.random_range(0..topics.len())].as_str())
        } else {
            None
        };
        let mention_at = target / 3;
        let mut mentioned = false;
        while out.len() < target {
            if let Some(topic) = mention.filter(|_| !mentioned && out.len() >= mention_at) {
                out.push_str(topic);
                out.push(' ');
                mentioned = true;
                continue;
            }
            out.push_str(WORDS[self.rng.random_range(0..WORDS.len())]);
            out.push(' ');
        }
        if let Some(topic) = mention.filter(|_| !mentioned) {
            out.push_str(topic);
        }
        if tool {
            out.push_str("\"]}");
        }
        out.push_str(&format!(
            " (msg {}/{})",
            self.id,
            self.issued as usize + self.plan.len()
        ));
        out
    }

    fn length(&mut self, median: usize, sigma: f64) -> usize {
        // Box–Muller: a standard normal from two uniforms.
        let u1: f64 = 1.0 - self.rng.random::<f64>();
        let u2: f64 = self.rng.random();
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        let len = median as f64 * (sigma * z).exp();
        (len as usize).clamp(8, (median * 16).min(12_000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staggered_first_sessions_have_the_turns_left_mid_run() {
        let mut s = Scenario::default();
        let (min, max) = (s.lifecycle.min_turns, s.lifecycle.max_turns);
        let first: Vec<u32> = (0..20_000)
            .map(|slot| SessionSim::new(&s, slot, 0).lifetime)
            .collect();
        assert!(first.iter().all(|l| (1..=max).contains(l)));
        assert!(first.iter().any(|l| *l < min), "some end before min_turns");
        // Uniform lifetimes of 20..=120 turns: at a random moment of a long
        // run, (E[L^2] / E[L] + 1) / 2 = (5750 / 70 + 1) / 2 = 41.6 turns left.
        let mean = first.iter().map(|l| f64::from(*l)).sum::<f64>() / first.len() as f64;
        assert!((40.5..42.7).contains(&mean), "mean turns left {mean}");
        // Successors live whole lifetimes.
        let next = SessionSim::new(&s, 3, 0).successor(&s);
        assert!((min..=max).contains(&next.lifetime));
        // Unstaggered, first sessions live whole lifetimes too.
        s.lifecycle.staggered = false;
        assert!(
            (0..2_000).all(|slot| (min..=max).contains(&SessionSim::new(&s, slot, 0).lifetime))
        );
    }
}
