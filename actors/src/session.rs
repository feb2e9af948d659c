//! `SessionActor`: one per live session; writes its turns, in order.
//!
//! **Thread.** The actor lives on one arbiter (one thread, picked by hash of
//! its key) shared with other actors. Its handler never blocks that thread:
//! the durable write (apply + group-committed fsync) runs on the arbiter's
//! blocking pool (`spawn_blocking`), and the actor waits for it with
//! `ctx.wait`, which parks *this actor's* mailbox (so turns of one session
//! are written in order) while the thread goes on serving other actors.
//!
//! **Panics.** The request future runs under `catch_unwind`, and a panic on
//! the blocking pool comes back as a join error; either way the reply is
//! dropped (the caller gets [`crate::ActorError::Panicked`]) and the actor
//! stops itself, so its `Supervisor` restarts it. A panic never unwinds
//! through the arbiter, which would take down every actor on that thread. There is nothing to
//! rebuild: sequence numbers and idempotency keys live in the store, so a
//! retry with the same idempotency key learns the original `seq`.
//!
//! **Backpressure.** Before acknowledging, the write task puts what it
//! stored into its work context's bounded mailbox, waiting while that is
//! full; meanwhile this actor's own mailbox fills, and the host's
//! `try_send` is refused with a backpressure error.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix::prelude::*;
use cairn_memory::{Ack, Role, Session, TurnInput, Workspace};
use futures_util::FutureExt;

use crate::context::{Hop, HopCount, Observe, ObservedTurn};
use crate::error::{ActorError, Result};
use crate::fault::Fault;
use crate::runtime::{Answer, Inner, Reply, blocking};
use crate::topic::{Judge, TopicTurn};

pub(crate) struct SessionActor {
    pub(crate) inner: Arc<Inner>,
    pub(crate) ws: Workspace,
    pub(crate) session: String,
}

impl SessionActor {
    fn name(&self) -> String {
        format!("session {}/{}", self.ws.id(), self.session)
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;
}

impl Supervised for SessionActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        tracing::warn!(actor = %self.name(), "restarting after a failure");
        self.inner.stats.restarts();
    }
}

/// Append turns of this session; the reply carries the acks and the session
/// record after the write.
pub(crate) struct Ingest {
    pub(crate) turns: Vec<TurnInput>,
    pub(crate) reply: Answer<(Vec<Ack>, Vec<Session>)>,
}

impl Message for Ingest {
    type Result = ();
}

impl Handler<Ingest> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Ingest, ctx: &mut Self::Context) {
        let Ingest { turns, reply } = msg;
        let inner = self.inner.clone();
        let ws = self.ws.clone();
        let session = self.session.clone();
        let name = self.name();
        let stall = inner.faults.take(|f| {
            matches!(f, Fault::StallWrite { workspace, session: s, .. } if workspace == ws.id() && *s == session)
        });
        // Everything runs on the blocking pool: the durable write, then the
        // forward to the work context, then the reply. Forwarding *before*
        // replying puts the turns in the context's mailbox ahead of anything
        // the caller sends after its acknowledgement (a tick, a capture), so
        // the context never judges triggers on stale state. Replying from
        // the blocking thread wakes the caller without another arbiter hop.
        let task = blocking(move || {
            if let Some(Fault::StallWrite { millis, .. }) = stall {
                std::thread::sleep(std::time::Duration::from_millis(millis));
            }
            let outcome = (|| {
                let acks = ws.append_turns(&turns)?;
                let mut records: Vec<Session> = Vec::new();
                for turn in &turns {
                    if !records.iter().any(|r| r.id == turn.session) {
                        records.push(ws.session(&turn.session)?);
                    }
                }
                Ok((acks, records))
            })();
            let (acks, records) = match outcome {
                Ok(v) => v,
                Err(e) => {
                    reply.send(Err(e));
                    return Ok(());
                }
            };
            if inner
                .faults
                .take(|f| matches!(f, Fault::PanicSessionAfterWrite { workspace, session: s } if workspace == ws.id() && *s == session))
                .is_some()
            {
                // Unwinding drops `reply`: the caller learns `Panicked`.
                panic!("injected fault: {name} crashed after its durable write");
            }
            for record in &records {
                let observed: Vec<ObservedTurn> = turns
                    .iter()
                    .zip(&acks)
                    .filter(|(turn, ack)| !ack.duplicate && turn.session == record.id)
                    .map(|(turn, ack)| ObservedTurn {
                        seq: ack.seq,
                        session_kind: record.kind,
                        work_context: record.work_context.clone(),
                        tool_use: turn.tool_call_id.is_some() || turn.role == Role::Tool,
                        role: turn.role,
                        content: turn.content.clone(),
                        timestamp: turn
                            .timestamp
                            .or(record.last_turn_at)
                            .unwrap_or_else(|| ws.clock().now()),
                    })
                    .collect();
                if observed.is_empty() {
                    continue;
                }
                let addr = inner.context_addr(&ws, &record.work_context);
                let observe = Observe {
                    session: record.id.clone(),
                    main: record.is_main(),
                    turns: observed,
                };
                forward(&addr, observe);
            }
            let fresh: Vec<TopicTurn> = turns
                .iter()
                .zip(&acks)
                .filter(|(_, ack)| !ack.duplicate)
                .map(|(turn, ack)| TopicTurn {
                    session: turn.session.clone(),
                    seq: ack.seq,
                    content: turn.content.clone(),
                })
                .collect();
            reply.send(Ok((acks, records)));
            // After the acknowledgement, still in this task (so this
            // actor's mailbox stays parked and a later settle waits for it):
            // tier 1, then each candidate topic's watcher gets the turn.
            dispatch_topics(&inner, &ws, fresh);
            Ok(())
        });
        let guarded = AssertUnwindSafe(task).catch_unwind();
        ctx.wait(guarded.into_actor(self).map(|outcome, act, ctx| {
            // A panic in the task (a join error) or in this future: stop, so
            // the supervisor restarts the actor.
            if !matches!(outcome, Ok(Ok(()))) {
                tracing::error!(actor = %act.name(), "panicked; stopping it so its supervisor restarts it");
                ctx.stop();
            }
        }));
    }
}

/// Tier 1 over acknowledged turns, then each candidate topic's watcher gets
/// its turns. A failure is logged: the turns are durable either way.
fn dispatch_topics(inner: &Arc<Inner>, ws: &Workspace, fresh: Vec<TopicTurn>) {
    if fresh.is_empty() {
        return;
    }
    let candidates = match inner.topics.candidates(ws, &fresh) {
        Ok(c) => c,
        Err(error) => {
            tracing::warn!(workspace = ws.id(), %error, "topic tier 1 failed; the turns are stored");
            return;
        }
    };
    for (turn, topics) in fresh.into_iter().zip(candidates) {
        for topic in topics {
            let addr = inner.watcher_addr(ws, &topic);
            forward(&addr, Judge { turn: turn.clone() });
        }
    }
}

/// Puts `msg` in the actor's mailbox, waiting (on this blocking-pool
/// thread) while it is full. The wait is what propagates backpressure: this
/// session's mailbox fills meanwhile and the host is refused.
fn forward<A, M>(addr: &Addr<A>, msg: M)
where
    A: Actor<Context = Context<A>> + Handler<M>,
    M: Message<Result = ()> + Send + 'static,
{
    let mut observe = msg;
    let mut pause = std::time::Duration::from_micros(50);
    loop {
        match addr.try_send(observe) {
            Ok(()) => return,
            Err(SendError::Full(back)) => {
                observe = back;
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(5));
            }
            // Stopped (passivated or restarting): its next incarnation
            // rebuilds these turns from the store.
            Err(SendError::Closed(_)) => return,
        }
    }
}

/// Answers once everything sent before it was handled (the ingest task,
/// topic dispatch included, holds the mailbox until it ends).
pub(crate) struct SettleSession {
    pub(crate) reply: Reply<()>,
}

impl Message for SettleSession {
    type Result = ();
}

impl Handler<SettleSession> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: SettleSession, _ctx: &mut Self::Context) {
        let _ = msg.reply.send(Ok(()));
    }
}

/// Bench hook: `n` in-memory messages from this actor to its work context.
pub(crate) struct HopBurst {
    pub(crate) work_context: String,
    pub(crate) n: u64,
    pub(crate) reply: Reply<u64>,
}

impl Message for HopBurst {
    type Result = ();
}

impl Handler<HopBurst> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: HopBurst, ctx: &mut Self::Context) {
        let addr = self.inner.context_addr(&self.ws, &msg.work_context);
        let HopBurst { n, reply, .. } = msg;
        let burst = async move {
            let result: Result<u64> = async {
                let closed = || ActorError::Unavailable("work context stopped".to_owned());
                for _ in 0..n {
                    match addr.try_send(Hop) {
                        Ok(()) => {}
                        Err(SendError::Full(hop)) => addr.send(hop).await.map_err(|_| closed())?,
                        Err(SendError::Closed(_)) => return Err(closed()),
                    }
                }
                addr.send(HopCount).await.map_err(|_| closed())
            }
            .await;
            let _ = reply.send(result);
        };
        ctx.wait(burst.into_actor(self));
    }
}
