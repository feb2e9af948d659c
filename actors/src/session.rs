//! `SessionActor`: one per live session; writes its turns, in order.
//!
//! **Thread.** The actor lives on one arbiter (one thread, picked by hash of
//! its key) shared with other actors. Its handler never blocks that thread.
//! On sled, the write is applied right there (sled buffers it in memory)
//! and the group-committed fsync is awaited as a future the store's flusher
//! thread completes; on PostgreSQL, or when a long operation holds the
//! session's lock, the durable write runs on the arbiter's blocking pool
//! (`spawn_blocking`). Either way the actor waits with `ctx.wait`, which
//! parks *this actor's* mailbox (so turns of one session are written in
//! order) while the thread goes on serving other actors.
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
use cairn_memory::{Ack, MemoryError, Role, Session, TurnInput, Workspace};
use futures_util::FutureExt;

use crate::context::{Hop, HopCount, Observe, ObservedTurn};
use crate::error::{ActorError, Result};
use crate::fault::Fault;
use crate::runtime::{Answer, Backoff, Inner, Reply, blocking};
use crate::topic::{Panicked, TopicTurn, judge_turns};

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
        // The durable write, then the forward to the work context, then the
        // reply. Forwarding *before* replying puts the turns in the
        // context's mailbox ahead of anything the caller sends after its
        // acknowledgement (a tick, a capture), so the context never judges
        // triggers on stale state.
        let task = async move {
            if let Some(Fault::StallWrite { millis, .. }) = stall {
                actix_rt::time::sleep(std::time::Duration::from_millis(millis)).await;
            }
            let (turns, outcome) = write(&ws, turns).await?;
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
                forward(&addr, observe).await;
            }
            let fresh: Vec<TopicTurn> = turns
                .into_iter()
                .zip(&acks)
                .filter(|(_, ack)| !ack.duplicate)
                .map(|(turn, ack)| TopicTurn {
                    session: turn.session,
                    seq: ack.seq,
                    content: turn.content,
                })
                .collect();
            reply.send(Ok((acks, records)));
            // After the acknowledgement, still in this task (so this
            // actor's mailbox stays parked and a later settle waits for it):
            // tier 1, then tiers 2–3 for each turn and its candidate topics.
            dispatch_topics(&inner, &ws, fresh).await;
            Ok::<(), ActorError>(())
        };
        let guarded = AssertUnwindSafe(task).catch_unwind();
        ctx.wait(guarded.into_actor(self).map(|outcome, act, ctx| {
            // A panic in the task (or on the blocking pool, a join error):
            // stop, so the supervisor restarts the actor.
            if !matches!(outcome, Ok(Ok(()))) {
                tracing::error!(actor = %act.name(), "panicked; stopping it so its supervisor restarts it");
                ctx.stop();
            }
        }));
    }
}

/// What a write of `turns` produced: the acks and the session records
/// after it.
type Written = Result<(Vec<Ack>, Vec<Session>)>;

/// Writes `turns` durably; hands them back with the outcome. The outer
/// error is a failure of the blocking pool (a panic there).
///
/// A store that buffers writes in memory (sled) is written right here on
/// the arbiter, and the fsync is awaited as a future its flusher thread
/// completes: no thread is parked for the commit. A store whose writes
/// wait on I/O (PostgreSQL), or a session whose lock is held by a long
/// operation (a compaction, a forget), is written on the blocking pool,
/// so the arbiter never waits.
async fn write(ws: &Workspace, turns: Vec<TurnInput>) -> Result<(Vec<TurnInput>, Written)> {
    if ws.buffered_writes() {
        match ws.try_apply_turns(&turns) {
            Ok(Some(acks)) => {
                let synced = match ws.sync_later() {
                    Some(durable) => durable.await.map_err(|e| MemoryError::from(e).into()),
                    None => {
                        let ws = ws.clone();
                        blocking(move || Ok(ws.sync()?)).await
                    }
                };
                let outcome = synced
                    .and_then(|()| session_records(ws, &turns).map(|records| (acks, records)));
                return Ok((turns, outcome));
            }
            Ok(None) => {}
            Err(e) => return Ok((turns, Err(e.into()))),
        }
    }
    let ws = ws.clone();
    blocking(move || {
        let outcome = ws
            .append_turns(&turns)
            .map_err(ActorError::from)
            .and_then(|acks| session_records(&ws, &turns).map(|records| (acks, records)));
        Ok((turns, outcome))
    })
    .await
}

/// The records of the sessions `turns` name, each once, in first-seen order.
fn session_records(ws: &Workspace, turns: &[TurnInput]) -> Result<Vec<Session>> {
    let mut records: Vec<Session> = Vec::new();
    for turn in turns {
        if !records.iter().any(|r| r.id == turn.session) {
            records.push(ws.session(&turn.session)?);
        }
    }
    Ok(records)
}

/// Tier 1 over acknowledged turns, then tiers 2–3 for each turn and all its
/// candidate topics in one task on the blocking pool (the turn read and
/// tokenized once, its decisions written in one batch). The candidate
/// topics' watchers are started (or kept alive); a watcher whose topic
/// panicked restarts. A failure is logged: the turns are durable either way.
async fn dispatch_topics(inner: &Arc<Inner>, ws: &Workspace, fresh: Vec<TopicTurn>) {
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
    let jobs: Vec<(TopicTurn, Vec<String>)> = fresh
        .into_iter()
        .zip(candidates)
        .filter(|(_, topics)| !topics.is_empty())
        .collect();
    if jobs.is_empty() {
        return;
    }
    // Each candidate topic's watcher is live (started on first use).
    let mut watched: Vec<&String> = jobs.iter().flat_map(|(_, topics)| topics).collect();
    watched.sort_unstable();
    watched.dedup();
    for topic in watched {
        inner.watcher_addr(ws, topic);
    }
    let blamed = {
        let (inner, ws) = (inner.clone(), ws.clone());
        blocking(move || Ok(judge_turns(&inner, &ws, &jobs))).await
    };
    match blamed {
        Ok(blamed) => {
            for topic in blamed {
                forward(&inner.watcher_addr(ws, &topic), Panicked).await;
            }
        }
        Err(error) => {
            tracing::error!(workspace = ws.id(), %error, "topic gate task failed; the turns are stored");
        }
    }
}

/// Puts `msg` in the actor's mailbox, waiting (without blocking the
/// arbiter) while it is full. The wait is what propagates backpressure:
/// this session's mailbox stays parked, fills meanwhile, and the host is
/// refused.
async fn forward<A, M>(addr: &Addr<A>, msg: M)
where
    A: Actor<Context = Context<A>> + Handler<M>,
    M: Message<Result = ()> + Send + 'static,
{
    let mut pending = msg;
    let mut backoff = Backoff::new();
    loop {
        match addr.try_send(pending) {
            Ok(()) => return,
            Err(SendError::Full(back)) => {
                pending = back;
                actix_rt::time::sleep(backoff.next()).await;
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
