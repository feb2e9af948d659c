//! `TopicWatcherActor`: one per live topic, the unit a topic's failures
//! restart; and the judging of acknowledged turns by the candidate topics
//! tier 1 named.
//!
//! **Flow.** After a session actor acknowledged a write, the same task asks
//! the [`TopicJudge`] for tier 1 (one scan of the workspace's shared matcher
//! per turn, [`TopicJudge::candidates`]), then judges each turn for **all**
//! its candidate topics at once on the blocking pool
//! ([`TopicJudge::judge_turn`]): the turn is read, tokenized and digested
//! once whatever the number of topics, and its decisions are written in one
//! batch. The caller never waits for it (the acknowledgement went first);
//! the session's mailbox stays parked meanwhile, which is the backpressure.
//!
//! **Seam.** `actors/` knows nothing of policies: the judge is a trait the
//! runtime implements with its tiered gate (`runtime/src/topics.rs`), like
//! [`CaptureGate`](crate::CaptureGate) for capture.
//!
//! **State and restarts.** A watcher keeps no state of its own: the topic's
//! compiled definition and profile are the judge's, read from the store. A
//! panic while judging a turn is caught on the blocking thread and blamed on
//! the topic being judged; the judge drops what it compiled
//! ([`TopicJudge::restarted`], so it reads the store afresh), the turn is
//! judged once more at once (nothing of the failed attempt was written), and
//! the blamed topic's watcher stops so its `Supervisor` restarts it. A turn
//! that panics twice is logged and left: the turn itself is durable and
//! `cairn topics collect` judges it again.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix::prelude::*;
use cairn_memory::Workspace;

use crate::error::{ActorError, Result};
use crate::fault::Fault;
use crate::runtime::{Inner, Reply};

/// One acknowledged turn, as the topic watchers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTurn {
    /// The session.
    pub session: String,
    /// The turn's sequence number in its session.
    pub seq: u64,
    /// The text.
    pub content: String,
}

/// The topic gate behind the watchers: tier 1 for a batch, tiers 2–3 for one
/// turn and its candidate topics. Called on the blocking pool, never on an
/// arbiter thread, so it may read and write the store; it must not panic (a
/// panic is contained, but costs a watcher restart).
///
/// ```
/// use cairn_actors::{NoTopics, TopicJudge, TopicTurn};
/// use cairn_memory::{Memory, MemoryConfig, SystemClock};
/// # let dir = tempfile::tempdir()?;
/// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), std::sync::Arc::new(SystemClock))?;
/// let ws = memory.workspace("acme")?;
/// let turn = TopicTurn { session: "s1".into(), seq: 0, content: "hello".into() };
/// assert_eq!(NoTopics.candidates(&ws, &[turn])?, vec![Vec::<String>::new()]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait TopicJudge: Send + Sync + std::fmt::Debug {
    /// Tier 1: for each turn (same order), the names of the topics whose
    /// watchers must see it.
    fn candidates(&self, ws: &Workspace, turns: &[TopicTurn]) -> Result<Vec<Vec<String>>>;

    /// Tiers 2–3 for `turn` and each of `topics`, and the durable
    /// decisions. `visit` must be called with each topic's name, in order,
    /// before that topic judges (a panic is blamed on the last one named).
    fn judge_turn(
        &self,
        ws: &Workspace,
        turn: &TopicTurn,
        topics: &[String],
        visit: &mut dyn FnMut(&str),
    ) -> Result<()>;

    /// A watcher of `workspace` failed: drop anything compiled for it, so
    /// the next call rebuilds from the store.
    fn restarted(&self, workspace: &str) {
        let _ = workspace;
    }

    /// The ticker's turn: run what is due by the clock (scheduled topic
    /// collections) for `ws`. A failure is logged; the next tick retries.
    fn scheduled(&self, ws: &Workspace) -> Result<()> {
        let _ = ws;
        Ok(())
    }
}

/// The judge of a runtime without topics: no turn is a candidate.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTopics;

impl TopicJudge for NoTopics {
    fn candidates(&self, _ws: &Workspace, turns: &[TopicTurn]) -> Result<Vec<Vec<String>>> {
        Ok(vec![Vec::new(); turns.len()])
    }

    fn judge_turn(
        &self,
        _ws: &Workspace,
        _turn: &TopicTurn,
        _topics: &[String],
        _visit: &mut dyn FnMut(&str),
    ) -> Result<()> {
        Ok(())
    }
}

/// Judges each turn for its candidate topics (tiers 2–3), one turn at a
/// time; on the blocking pool. Answers the topics a panic was blamed on,
/// whose watchers must restart. A gate failure is logged: the turns are
/// durable either way.
pub(crate) fn judge_turns(
    inner: &Inner,
    ws: &Workspace,
    jobs: &[(TopicTurn, Vec<String>)],
) -> Vec<String> {
    let mut blamed = Vec::new();
    for (turn, topics) in jobs {
        let mut judging = String::new();
        let attempt = || {
            inner.topics.judge_turn(ws, turn, topics, &mut |topic| {
                judging.clear();
                judging.push_str(topic);
                if inner
                    .faults
                    .take(|f| matches!(f, Fault::PanicTopicWatcher { workspace, topic: t } if workspace == ws.id() && t == topic))
                    .is_some()
                {
                    panic!("injected fault: topic watcher {topic} crashed while judging");
                }
            })
        };
        let result = match std::panic::catch_unwind(AssertUnwindSafe(attempt)) {
            Ok(result) => result,
            Err(_) => {
                // Blamed on the topic being judged: the judge drops what it
                // compiled and the turn is judged once more at once (so a
                // settle that follows sees its decisions); then that
                // topic's watcher restarts.
                tracing::error!(workspace = ws.id(), topic = %judging, "topic gate panicked; its watcher restarts");
                blamed.push(std::mem::take(&mut judging));
                inner.topics.restarted(ws.id());
                std::panic::catch_unwind(AssertUnwindSafe(|| {
                    inner.topics.judge_turn(ws, turn, topics, &mut |_| {})
                }))
                .unwrap_or_else(|_| {
                    Err(ActorError::Task(format!(
                        "the topic gate panicked twice on {}#{}",
                        turn.session, turn.seq
                    )))
                })
            }
        };
        if let Err(error) = result {
            tracing::warn!(workspace = ws.id(), session = %turn.session, seq = turn.seq, %error, "topic gate failed; the turn is stored");
        }
    }
    blamed
}

pub(crate) struct TopicWatcherActor {
    pub(crate) inner: Arc<Inner>,
    pub(crate) ws: Workspace,
    pub(crate) topic: String,
}

impl TopicWatcherActor {
    fn name(&self) -> String {
        format!("topic {}/{}", self.ws.id(), self.topic)
    }
}

impl Actor for TopicWatcherActor {
    type Context = Context<Self>;
}

impl Supervised for TopicWatcherActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        tracing::warn!(actor = %self.name(), "restarting after a failure; its topic is reloaded from the store");
        self.inner.stats.restarts();
    }
}

/// Judging a turn panicked on this watcher's topic: it stops, so its
/// supervisor restarts it.
pub(crate) struct Panicked;

impl Message for Panicked {
    type Result = ();
}

impl Handler<Panicked> for TopicWatcherActor {
    type Result = ();

    fn handle(&mut self, _msg: Panicked, ctx: &mut Self::Context) {
        tracing::error!(actor = %self.name(), "panicked; stopping it so its supervisor restarts it");
        ctx.stop();
    }
}

/// Answers once everything sent before it was handled.
pub(crate) struct SettleTopic {
    pub(crate) reply: Reply<()>,
}

impl Message for SettleTopic {
    type Result = ();
}

impl Handler<SettleTopic> for TopicWatcherActor {
    type Result = ();

    fn handle(&mut self, msg: SettleTopic, _ctx: &mut Self::Context) {
        let _ = msg.reply.send(Ok(()));
    }
}
