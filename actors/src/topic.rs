//! `TopicWatcherActor`: one per live topic; judges the turns tier 1 sent it.
//!
//! **Flow.** After a session actor acknowledged a write, the same blocking
//! task asks the [`TopicJudge`] for tier 1 (one scan of the workspace's
//! shared matcher per turn, [`TopicJudge::candidates`]) and puts each turn
//! in the mailbox of every candidate topic's watcher. The watcher runs tiers
//! 2–3 and writes its records ([`TopicJudge::judge`]) on the blocking pool,
//! one turn at a time (`ctx.wait`), so one topic's decisions are ordered and
//! the caller never waits for them.
//!
//! **Seam.** `actors/` knows nothing of policies: the judge is a trait the
//! runtime implements with its tiered gate (`runtime/src/topics.rs`), like
//! [`CaptureGate`](crate::CaptureGate) for capture.
//!
//! **State and restarts.** A watcher keeps no state of its own: the topic's
//! compiled definition and profile are the judge's, read from the store. A
//! panic while judging is caught on the blocking thread; the judge drops
//! what it compiled ([`TopicJudge::restarted`], so it reads the store
//! afresh), the turn is judged once more at once, and the watcher stops so
//! its `Supervisor` restarts it. A turn that panics twice is logged and
//! left: the turn itself is durable and `cairn topics collect` judges it
//! again.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix::prelude::*;
use cairn_memory::Workspace;
use futures_util::FutureExt;

use crate::error::{ActorError, Result};
use crate::fault::Fault;
use crate::runtime::{Inner, Reply, blocking};

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
/// topic and one turn. Called on the blocking pool, never on an arbiter
/// thread, so it may read and write the store; it must not panic (a panic is
/// contained, but costs a watcher restart).
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

    /// Tiers 2–3 for `topic` and `turn`, and the durable decision.
    fn judge(&self, ws: &Workspace, topic: &str, turn: &TopicTurn) -> Result<()>;

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

    fn judge(&self, _ws: &Workspace, _topic: &str, _turn: &TopicTurn) -> Result<()> {
        Ok(())
    }
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

/// A turn for this watcher to judge.
pub(crate) struct Judge {
    pub(crate) turn: TopicTurn,
}

impl Message for Judge {
    type Result = ();
}

impl Handler<Judge> for TopicWatcherActor {
    type Result = ();

    fn handle(&mut self, msg: Judge, ctx: &mut Self::Context) {
        let inner = self.inner.clone();
        let ws = self.ws.clone();
        let topic = self.topic.clone();
        let turn = msg.turn;
        let task = blocking(move || {
            let attempt = || {
                if inner
                    .faults
                    .take(|f| matches!(f, Fault::PanicTopicWatcher { workspace, topic: t } if workspace == ws.id() && *t == topic))
                    .is_some()
                {
                    panic!("injected fault: topic watcher {topic} crashed while judging");
                }
                inner.topics.judge(&ws, &topic, &turn)
            };
            // A panic is caught here, on the blocking thread: the judge drops
            // what it compiled and the turn is judged once more at once (so
            // a settle that follows sees its decision), then the watcher
            // stops and its supervisor restarts it.
            match std::panic::catch_unwind(AssertUnwindSafe(attempt)) {
                Ok(result) => Ok((result, false)),
                Err(_) => {
                    inner.topics.restarted(ws.id());
                    let again = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        inner.topics.judge(&ws, &topic, &turn)
                    }))
                    .unwrap_or_else(|_| {
                        Err(ActorError::Task(format!(
                            "topic watcher {topic} panicked twice on {}#{}",
                            turn.session, turn.seq
                        )))
                    });
                    Ok((again, true))
                }
            }
        });
        let guarded = AssertUnwindSafe(task).catch_unwind();
        ctx.wait(guarded.into_actor(self).map(|outcome, act, ctx| {
            let panicked = match outcome {
                Ok(Ok((result, panicked))) => {
                    if let Err(error) = result {
                        tracing::warn!(actor = %act.name(), %error, "topic gate failed; the turn is stored");
                    }
                    panicked
                }
                Ok(Err(_)) | Err(_) => true,
            };
            if panicked {
                tracing::error!(actor = %act.name(), "panicked; stopping it so its supervisor restarts it");
                ctx.stop();
            }
        }));
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
