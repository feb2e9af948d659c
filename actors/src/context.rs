//! `WorkContextActor`: one per live work context; tracks what is dirty and
//! decides when to capture.
//!
//! **State.** Everything it knows is derived from the store: the durable
//! context record (high-water marks, last capture, work phase) and the turns
//! after the high-water marks, each assessed by the [`CaptureGate`].
//! It is loaded in `started` (on the blocking pool, with `ctx.wait` so no
//! message is handled before it) and after a restart. After a capture only
//! the record, subjects, phase and the sessions it holds uncaptured turns
//! of are read again (not every session the context ever had): the turns
//! the capture left uncaptured keep the verdicts and times the actor holds,
//! and the captured ones are subtracted from the sums, which makes the
//! state a load would (`a_refresh_after_a_capture_is_a_load`) without
//! reading every uncaptured turn back, at a cost that follows the turns
//! captured, not the turns kept. Passivation and a crash lose nothing:
//! the next incarnation reads the same record and the same turns.
//!
//! **Dirty** (docs/DESIGN.md, *Dirty*): at least `min_dirty_user_turns` uncaptured user
//! turns, or any tool use, or a mention of a known subject.
//!
//! **Triggers** are evaluated on [`Tick`] against the clock's time: nightly
//! sweep; idle (this context has the focus and the workspace saw no turn for
//! `idle_minutes`); debounced defocus (the focus is elsewhere and
//! `defocus_debounce_minutes` passed since the uncaptured material began or
//! the last capture, whichever is later). Pre-compaction, manual and the
//! session hooks arrive as [`CaptureNow`] / [`ExtractSession`].
//!
//! **Panics** in a handler are caught; the actor answers `Panicked`, stops,
//! and its `Supervisor` restarts it, which reloads the state.
//!
//! [`CaptureGate`]: crate::CaptureGate

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix::prelude::*;
use cairn_memory::{Role, Session, SessionKind, Subject, Workspace};
use chrono::{DateTime, Duration, Utc};

use crate::capture::{
    CaptureEnv, CaptureReport, ContextRecord, ExtractionOutcome, GateView, Trigger, capture,
    extract_session, extractable, load_record, session_mark,
};
use crate::config::TriggerConfig;
use crate::error::{ActorError, Result};
use crate::fault::Fault;
use crate::gate::{CaptureGate, GateInput, Significance};
use crate::runtime::{Inner, Reply, blocking};

/// A stored turn, as the session actor forwards it.
#[derive(Debug, Clone)]
pub(crate) struct ObservedTurn {
    pub(crate) seq: u64,
    pub(crate) session_kind: SessionKind,
    pub(crate) work_context: String,
    pub(crate) role: Role,
    pub(crate) content: String,
    pub(crate) tool_use: bool,
    pub(crate) timestamp: DateTime<Utc>,
}

/// What the actor derives from the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ContextState {
    subjects: Vec<Subject>,
    /// Per session: the next sequence number already accounted for.
    seen: BTreeMap<String, u64>,
    /// The verdicts' sums, kept as counts so that forgetting a captured
    /// turn is a subtraction (see [`ContextState::after_capture`]).
    user_turns: usize,
    tool_use_turns: usize,
    /// Turns the gate judged worth capturing.
    significant_turns: usize,
    /// Known subjects mentioned, with how many verdicts name each.
    mentions: BTreeMap<String, usize>,
    first_uncaptured_at: Option<DateTime<Utc>>,
    last_capture_at: Option<DateTime<Utc>>,
    /// The gate's verdict on every uncaptured turn, by (session, seq): a
    /// refresh after a capture or an extraction reuses them, so each turn is
    /// judged (and its decision logged) once, not once per capture; the
    /// capture reads their depths.
    verdicts: Verdicts,
    /// The time of every uncaptured turn accounted for, by (session, seq):
    /// the order a load reads them in.
    noted_at: BTreeMap<(String, u64), DateTime<Utc>>,
    /// The work context's active phase (what the gate is told).
    phase: Option<String>,
    /// The policy generation of the verdict that made the context dirty.
    dirtied_by: Option<String>,
}

/// Gate verdicts by (session, seq).
pub(crate) type Verdicts = HashMap<(String, u64), Significance>;

impl ContextState {
    /// Accounts for one turn; `known` holds verdicts from before a reload.
    #[allow(clippy::too_many_arguments)]
    fn note(
        &mut self,
        gate: &dyn CaptureGate,
        workspace: &str,
        triggers: &TriggerConfig,
        session: &str,
        turn: &ObservedTurn,
        known: &mut Verdicts,
    ) {
        let next = self.seen.entry(session.to_owned()).or_insert(0);
        if turn.seq < *next {
            return; // already accounted for (loaded from the store)
        }
        *next = turn.seq + 1;
        let key = (session.to_owned(), turn.seq);
        let significance = match known.remove(&key) {
            Some(verdict) => verdict,
            None => gate.assess(&GateInput {
                workspace,
                session,
                session_kind: turn.session_kind,
                work_context: &turn.work_context,
                seq: turn.seq,
                role: turn.role,
                content: &turn.content,
                tool_use: turn.tool_use,
                subjects: &self.subjects,
                work_phase: self.phase.as_deref(),
            }),
        };
        self.account(key, turn.timestamp, significance, triggers);
    }

    /// Adds one judged, uncaptured turn to the dirty state.
    fn account(
        &mut self,
        key: (String, u64),
        at: DateTime<Utc>,
        significance: Significance,
        triggers: &TriggerConfig,
    ) {
        let was_dirty = self.is_dirty(triggers);
        self.add(&significance);
        if self.first_uncaptured_at.is_none() {
            self.first_uncaptured_at = Some(at);
        }
        if !was_dirty && self.is_dirty(triggers) {
            self.dirtied_by = significance.generation.clone();
        }
        self.verdicts.insert(key.clone(), significance);
        self.noted_at.insert(key, at);
    }

    /// Adds a verdict to the sums.
    fn add(&mut self, significance: &Significance) {
        self.user_turns += usize::from(significance.user_turn);
        self.tool_use_turns += usize::from(significance.tool_use);
        self.significant_turns += usize::from(significance.significant);
        for subject in &significance.mentions {
            *self.mentions.entry(subject.clone()).or_insert(0) += 1;
        }
    }

    /// Takes a turn out of the dirty state (its verdict out of the sums).
    fn forget(&mut self, key: &(String, u64)) {
        self.noted_at.remove(key);
        let Some(significance) = self.verdicts.remove(key) else {
            return;
        };
        self.user_turns -= usize::from(significance.user_turn);
        self.tool_use_turns -= usize::from(significance.tool_use);
        self.significant_turns -= usize::from(significance.significant);
        for subject in &significance.mentions {
            if let Some(n) = self.mentions.get_mut(subject) {
                *n -= 1;
                if *n == 0 {
                    self.mentions.remove(subject);
                }
            }
        }
    }

    /// The state after a capture, from what the store says now (`fresh`)
    /// and the turns this state accounted for: those the capture left
    /// uncaptured (past their session's new high-water mark, in a session
    /// that still exists) stay, with the verdicts they had, and the rest
    /// are subtracted. The result is what accounting the kept turns again
    /// in the order a load reads them (sessions by id, turns by seq) makes,
    /// at a cost that follows the turns dropped, not the turns kept.
    fn after_capture(mut self, fresh: Fresh, extract_all: bool, triggers: &TriggerConfig) -> Self {
        let Fresh {
            record,
            marks,
            subjects,
            phase,
            sessions,
        } = fresh;
        let mark = |session: &str| marks.get(session).copied().unwrap_or(0);
        let live: BTreeSet<&str> = sessions
            .iter()
            .filter(|s| extractable(s, extract_all))
            .map(|s| s.id.as_str())
            .collect();
        // Gone: a session this state holds turns of that the read did not
        // find (or that is not extractable any more). `fresh` has at least
        // those sessions.
        let held = self.sessions_holding_turns();
        let gone = |session: &str| held.contains(session) && !live.contains(session);
        // Each session's captured turns (below its mark; all of a session
        // that is gone) leave the sums.
        let mut dropped: Vec<(String, u64)> = Vec::new();
        for session in &held {
            let below = if gone(session) {
                u64::MAX
            } else {
                mark(session)
            };
            dropped.extend(
                self.noted_at
                    .range((session.clone(), 0)..)
                    .take_while(|((s, seq), _)| s == session && *seq < below)
                    .map(|(key, _)| key.clone()),
            );
        }
        for key in &dropped {
            self.forget(key);
        }
        shrink_if_sparse(&mut self.verdicts);
        // The sessions found gone leave `seen` (the others stay: an
        // erasure through the runtime drops this actor anyway).
        for session in held.iter().filter(|s| gone(s.as_str())) {
            self.seen.remove(session);
        }
        for session in &live {
            self.seen.entry((*session).to_owned()).or_insert(0);
        }
        // What is accounted for starts at least at each session's mark: a
        // turn the capture took before it was observed (its message still
        // waiting behind the capture) is not accounted when it arrives.
        for (session, &mark) in &marks {
            if !gone(session) {
                let next = self.seen.entry(session.clone()).or_insert(0);
                *next = (*next).max(mark);
            }
        }
        self.subjects = subjects;
        self.last_capture_at = record.last_capture_at;
        self.phase = phase;
        // What a replay in load order makes: the first kept turn's time,
        // and the verdict whose turn made the context dirty.
        self.first_uncaptured_at = self.noted_at.first_key_value().map(|(_, at)| *at);
        self.dirtied_by = self.first_dirtying_generation(triggers);
        self
    }

    /// The sessions this state holds uncaptured turns of, by id: found by
    /// seeking past each one's keys, not by a pass over every turn.
    fn sessions_holding_turns(&self) -> BTreeSet<String> {
        let mut held = BTreeSet::new();
        let mut next = self.noted_at.keys().next().map(|(s, _)| s.clone());
        while let Some(session) = next {
            next = self
                .noted_at
                .range((
                    Bound::Excluded((session.clone(), u64::MAX)),
                    Bound::Unbounded,
                ))
                .next()
                .map(|((s, _), _)| s.clone());
            held.insert(session);
        }
        held
    }

    /// Replays the kept verdicts in load order until the context is dirty
    /// and answers that verdict's generation (`None` when it never is).
    fn first_dirtying_generation(&self, triggers: &TriggerConfig) -> Option<String> {
        if !self.is_dirty(triggers) {
            return None;
        }
        let mut replay = ContextState::default();
        for key in self.noted_at.keys() {
            let Some(significance) = self.verdicts.get(key) else {
                continue;
            };
            replay.add(significance);
            if replay.is_dirty(triggers) {
                return significance.generation.clone();
            }
        }
        None
    }

    pub(crate) fn is_dirty(&self, triggers: &TriggerConfig) -> bool {
        self.user_turns >= triggers.min_dirty_user_turns
            || self.tool_use_turns > 0
            || self.significant_turns > 0
            || !self.mentions.is_empty()
    }

    /// Which trigger, if any, is due at `now`.
    pub(crate) fn due(&self, triggers: &TriggerConfig, tick: &Tick) -> Option<Trigger> {
        if !self.is_dirty(triggers) {
            return None;
        }
        if tick.nightly {
            return Some(Trigger::NightlySweep);
        }
        if tick.focused {
            let last = tick.workspace_last_turn_at?;
            (tick.now - last >= Duration::minutes(triggers.idle_minutes))
                .then_some(Trigger::IdleTimeout)
        } else {
            let anchor = match (self.first_uncaptured_at, self.last_capture_at) {
                (Some(a), Some(b)) => a.max(b),
                (a, b) => a.or(b)?,
            };
            (tick.now - anchor >= Duration::minutes(triggers.defocus_debounce_minutes))
                .then_some(Trigger::DebouncedDefocus)
        }
    }
}

/// What a context's state is made from besides its uncaptured turns.
struct Fresh {
    record: ContextRecord,
    /// Per session, its high-water mark: of the sessions read, and of
    /// those the latest capture took (the record's).
    marks: BTreeMap<String, u64>,
    subjects: Vec<Subject>,
    phase: Option<String>,
    /// The sessions read: every session of the context, or those of the
    /// sessions asked for that still exist in it.
    sessions: Vec<Session>,
}

impl Fresh {
    /// Reads them from the store, every session of the context (blocking).
    fn read(ws: &Workspace, work_context: &str) -> Result<Fresh> {
        let sessions = ws.sessions(Some(work_context))?;
        Fresh::with_sessions(ws, work_context, sessions)
    }

    /// Reads them from the store, of the sessions only those named in
    /// `asked` (blocking): a refresh needs the sessions it holds uncaptured
    /// turns of, not every session the context ever had.
    fn read_sessions(
        ws: &Workspace,
        work_context: &str,
        asked: &BTreeSet<String>,
    ) -> Result<Fresh> {
        let mut sessions = Vec::with_capacity(asked.len());
        for id in asked {
            match ws.session(id) {
                Ok(session) if session.work_context == work_context => sessions.push(session),
                Ok(_) | Err(cairn_memory::MemoryError::SessionNotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Fresh::with_sessions(ws, work_context, sessions)
    }

    fn with_sessions(ws: &Workspace, work_context: &str, sessions: Vec<Session>) -> Result<Fresh> {
        let record = load_record(ws, work_context)?;
        let phase = match ws.work_phase(work_context)? {
            Some(phase) => Some(phase.to_owned()),
            None => record.phase.clone(),
        };
        let mut marks = record.high_water.clone();
        for session in &sessions {
            // None (0) is what a missing mark reads as anyway.
            let mark = session_mark(ws, work_context, &record, &session.id)?;
            if mark > 0 {
                marks.insert(session.id.clone(), mark);
            }
        }
        Ok(Fresh {
            subjects: ws.subjects()?,
            phase,
            sessions,
            marks,
            record,
        })
    }
}

/// Rebuilds a context's state from the store (blocking).
pub(crate) fn load_state(
    ws: &Workspace,
    work_context: &str,
    gate: &dyn CaptureGate,
    triggers: &TriggerConfig,
    mut known: Verdicts,
) -> Result<ContextState> {
    let extract_all = triggers.extract_all_sessions;
    let Fresh {
        record,
        marks,
        subjects,
        phase,
        sessions,
    } = Fresh::read(ws, work_context)?;
    let mut state = ContextState {
        subjects,
        last_capture_at: record.last_capture_at,
        phase,
        ..ContextState::default()
    };
    for session in sessions.iter().filter(|s| extractable(s, extract_all)) {
        let from = marks.get(&session.id).copied().unwrap_or(0);
        state.seen.insert(session.id.clone(), from);
        if session.next_seq <= from {
            continue;
        }
        for turn in ws.transcript(&session.id, from, None)? {
            let observed = ObservedTurn {
                seq: turn.seq,
                session_kind: session.kind,
                work_context: session.work_context.clone(),
                role: turn.role,
                tool_use: turn.tool_call_id.is_some() || turn.role == Role::Tool,
                content: turn.content,
                timestamp: turn.timestamp,
            };
            state.note(gate, ws.id(), triggers, &session.id, &observed, &mut known);
        }
    }
    Ok(state)
}

pub(crate) struct WorkContextActor {
    pub(crate) inner: Arc<Inner>,
    pub(crate) ws: Workspace,
    pub(crate) work_context: String,
    pub(crate) state: ContextState,
    pub(crate) hops: u64,
    /// Loads that failed in a row: each restart waits longer (see
    /// [`load_backoff`]).
    pub(crate) load_failures: u32,
}

/// How long a work-context actor whose state could not be loaded waits
/// before its supervisor restarts it: 100 ms doubling to 30 s, so a state
/// that stays unreadable costs a log line every 30 s, not a restart loop.
pub(crate) fn load_backoff(failures: u32) -> std::time::Duration {
    let ms = 100u64.saturating_mul(1 << failures.min(9));
    std::time::Duration::from_millis(ms.min(30_000))
}

/// Gives back a verdict map's room once a capture has emptied most of it: a
/// hash map keeps the capacity of its largest moment, and a busy context
/// that captured thousands of turns once would hold their buckets for as
/// long as it lives. Shrinking only when at most a quarter of the room is
/// used keeps the rehashes rare (each follows at least as many removals).
fn shrink_if_sparse(verdicts: &mut Verdicts) {
    const KEEP: usize = 64;
    if verdicts.capacity() > KEEP && verdicts.len() * 4 <= verdicts.capacity() {
        verdicts.shrink_to((verdicts.len() * 2).max(KEEP));
    }
}

impl WorkContextActor {
    fn name(&self) -> String {
        format!("context {}/{}", self.ws.id(), self.work_context)
    }

    /// True when this actor's workspace no longer exists (it was erased).
    fn workspace_gone(&self) -> bool {
        self.inner
            .memory
            .workspaces()
            .is_ok_and(|all| !all.iter().any(|w| w == self.ws.id()))
    }

    /// Reloads the state from the store before handling anything else.
    fn reload(&mut self, ctx: &mut Context<Self>) {
        let ws = self.ws.clone();
        let wc = self.work_context.clone();
        let inner = self.inner.clone();
        // Verdicts already made carry over (the mailbox waits for the load).
        let known = std::mem::take(&mut self.state.verdicts);
        let load = blocking(move || {
            load_state(&ws, &wc, inner.gate.as_ref(), &inner.config.triggers, known)
        });
        ctx.wait(load.into_actor(self).map(|loaded, act, ctx| match loaded {
            Ok(state) => {
                act.state = state;
                act.load_failures = 0;
            }
            Err(error) if act.workspace_gone() => {
                // Nothing to load any more: leave the registry, so the
                // supervisor does not restart it (no address is left).
                tracing::info!(actor = %act.name(), %error, "its workspace is gone; stopping");
                act.inner.drop_context(act.ws.id(), &act.work_context);
                ctx.stop();
            }
            Err(error) => {
                act.load_failures = act.load_failures.saturating_add(1);
                let wait = load_backoff(act.load_failures);
                tracing::error!(actor = %act.name(), %error, failures = act.load_failures, ?wait, "could not load state; restarting after a pause");
                // The mailbox waits too: nothing runs on a state not loaded.
                ctx.wait(
                    actix::clock::sleep(wait)
                        .into_actor(act)
                        .map(|(), _, ctx: &mut Context<Self>| ctx.stop()),
                );
            }
        }));
    }

    /// After a capture: reads the record, subjects, phase and the sessions
    /// it holds uncaptured turns of again, and keeps the uncaptured turns'
    /// verdicts (see [`ContextState`]); the mailbox waits. A failed read
    /// falls back to a whole load.
    fn refresh(&mut self, ctx: &mut Context<Self>) {
        let ws = self.ws.clone();
        let wc = self.work_context.clone();
        let held = self.state.sessions_holding_turns();
        let read = blocking(move || Fresh::read_sessions(&ws, &wc, &held));
        ctx.wait(read.into_actor(self).map(|fresh, act, ctx| match fresh {
            Ok(fresh) => {
                let triggers = &act.inner.config.triggers;
                let state = std::mem::take(&mut act.state);
                act.state = state.after_capture(fresh, triggers.extract_all_sessions, triggers);
            }
            Err(error) => {
                tracing::warn!(actor = %act.name(), %error, "could not refresh after a capture; loading again");
                act.reload(ctx);
            }
        }));
    }

    /// Runs a capture (or a session extraction) on the blocking pool; the
    /// mailbox waits; then refreshes. A panic in the capture restarts the actor.
    fn run<T: Send + 'static>(
        &mut self,
        ctx: &mut Context<Self>,
        reply: Reply<T>,
        job: impl FnOnce(&Workspace, CaptureEnv<'_>) -> Result<T> + Send + 'static,
    ) {
        let ws = self.ws.clone();
        let inner = self.inner.clone();
        let name = self.name();
        // What the gate said about the uncaptured turns: the capture
        // extracts each at its depth. They are lent to the task, not
        // copied (the mailbox waits for it), and come back with its result;
        // a task that panics loses them with the rest of the state.
        let verdicts = std::mem::take(&mut self.state.verdicts);
        let dirtied_by = self.state.dirtied_by.clone();
        let phase = self.state.phase.clone();
        let task = blocking(move || {
            let extractor = inner.extractor.read().clone();
            let env = CaptureEnv {
                locks: &inner.locks,
                faults: &inner.faults,
                extract_all_sessions: inner.config.triggers.extract_all_sessions,
                cross_update_quiet: Some(inner.config.triggers.cross_update_quiet_minutes)
                    .filter(|&m| m > 0)
                    .map(chrono::Duration::minutes),
                extractor: extractor.as_deref(),
                gate: GateView {
                    gate: inner.gate.as_ref(),
                    workspace: ws.id(),
                    verdicts: &verdicts,
                    dirtied_by: dirtied_by.as_deref(),
                    phase: phase.as_deref(),
                },
            };
            let result = job(&ws, env);
            Ok((result, verdicts))
        });
        ctx.wait(task.into_actor(self).map(move |outcome, act, ctx| {
            let result = outcome.and_then(|(result, verdicts)| {
                // Nothing is judged while the mailbox waits; were anything,
                // it would be kept beside what comes back.
                let meanwhile = std::mem::replace(&mut act.state.verdicts, verdicts);
                act.state.verdicts.extend(meanwhile);
                result
            });
            let crashed = matches!(result, Err(ActorError::Task(_)));
            let failed = result.is_err();
            let _ = reply.send(result.map_err(|e| match e {
                ActorError::Task(_) => ActorError::Panicked { actor: name },
                other => other,
            }));
            if crashed {
                tracing::error!(actor = %act.name(), "capture panicked; stopping it so its supervisor restarts it");
                ctx.stop();
            } else if failed {
                // What a failed capture left is the store's to say.
                act.reload(ctx);
            } else {
                act.refresh(ctx);
            }
        }));
    }
}

impl Actor for WorkContextActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.reload(ctx);
    }
}

impl Supervised for WorkContextActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        tracing::warn!(actor = %self.name(), "restarting after a failure; reloading from the store");
        self.inner.stats.restarts();
        self.state = ContextState::default();
    }
}

/// Turns a session actor stored.
pub(crate) struct Observe {
    pub(crate) session: String,
    pub(crate) main: bool,
    pub(crate) turns: Vec<ObservedTurn>,
}

impl Message for Observe {
    type Result = ();
}

impl Handler<Observe> for WorkContextActor {
    type Result = ();

    fn handle(&mut self, msg: Observe, ctx: &mut Self::Context) {
        if !msg.main && !self.inner.config.triggers.extract_all_sessions {
            return;
        }
        let inner = self.inner.clone();
        let (ws_id, wc) = (self.ws.id().to_owned(), self.work_context.clone());
        let state = &mut self.state;
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            if inner
                .faults
                .take(|f| matches!(f, Fault::PanicContextObserve { workspace, work_context } if *workspace == ws_id && *work_context == wc))
                .is_some()
            {
                panic!("injected fault: context {wc} crashed while observing turns");
            }
            for turn in &msg.turns {
                state.note(
                    inner.gate.as_ref(),
                    &ws_id,
                    &inner.config.triggers,
                    &msg.session,
                    turn,
                    &mut Verdicts::new(),
                );
            }
        }));
        if outcome.is_err() {
            tracing::error!(actor = %self.name(), "panicked; stopping it so its supervisor restarts it");
            ctx.stop();
        }
    }
}

/// Evaluate the time triggers at `now`.
#[derive(Debug, Clone)]
pub(crate) struct Tick {
    pub(crate) now: DateTime<Utc>,
    pub(crate) focused: bool,
    pub(crate) workspace_last_turn_at: Option<DateTime<Utc>>,
    pub(crate) nightly: bool,
}

/// What a tick did to one context.
#[derive(Debug)]
pub(crate) struct TickOutcome {
    pub(crate) capture: Option<CaptureReport>,
    pub(crate) dirty: bool,
}

pub(crate) struct TickMsg {
    pub(crate) tick: Tick,
    pub(crate) reply: Reply<TickOutcome>,
}

impl Message for TickMsg {
    type Result = ();
}

impl Handler<TickMsg> for WorkContextActor {
    type Result = ();

    fn handle(&mut self, msg: TickMsg, ctx: &mut Self::Context) {
        let triggers = &self.inner.config.triggers;
        let Some(trigger) = self.state.due(triggers, &msg.tick) else {
            let dirty = self.state.is_dirty(triggers);
            let _ = msg.reply.send(Ok(TickOutcome {
                capture: None,
                dirty,
            }));
            return;
        };
        let wc = self.work_context.clone();
        self.run(ctx, msg.reply, move |ws, env| {
            capture(ws, &wc, trigger, None, env).map(|capture| TickOutcome {
                dirty: capture.is_none(),
                capture,
            })
        });
    }
}

/// Capture now (pre-compaction, manual).
pub(crate) struct CaptureNow {
    pub(crate) trigger: Trigger,
    pub(crate) reply: Reply<Option<CaptureReport>>,
}

impl Message for CaptureNow {
    type Result = ();
}

impl Handler<CaptureNow> for WorkContextActor {
    type Result = ();

    fn handle(&mut self, msg: CaptureNow, ctx: &mut Self::Context) {
        let wc = self.work_context.clone();
        let trigger = msg.trigger;
        self.run(ctx, msg.reply, move |ws, env| {
            capture(ws, &wc, trigger, None, env)
        });
    }
}

/// Session-level extraction (hooks `session_end`, `before_reset`, `gateway_start`).
pub(crate) struct ExtractSession {
    pub(crate) session: Session,
    pub(crate) hook: Trigger,
    pub(crate) reply: Reply<ExtractionOutcome>,
}

impl Message for ExtractSession {
    type Result = ();
}

impl Handler<ExtractSession> for WorkContextActor {
    type Result = ();

    fn handle(&mut self, msg: ExtractSession, ctx: &mut Self::Context) {
        let ExtractSession {
            session,
            hook,
            reply,
        } = msg;
        self.run(ctx, reply, move |ws, env| {
            extract_session(ws, &session, hook, env)
        });
    }
}

/// Bench hook: an in-memory message that does nothing but count.
/// A barrier: answered once every message sent to the context before it
/// was handled (the mailbox is FIFO), so the turns it was handed are judged.
pub(crate) struct Settle {
    pub(crate) reply: Reply<()>,
}

impl Message for Settle {
    type Result = ();
}

impl Handler<Settle> for WorkContextActor {
    type Result = ();

    fn handle(&mut self, msg: Settle, _ctx: &mut Self::Context) {
        let _ = msg.reply.send(Ok(()));
    }
}

pub(crate) struct Hop;

impl Message for Hop {
    type Result = ();
}

impl Handler<Hop> for WorkContextActor {
    type Result = ();

    fn handle(&mut self, _msg: Hop, _ctx: &mut Self::Context) {
        self.hops += 1;
    }
}

/// Bench hook: how many hops arrived (and reset).
pub(crate) struct HopCount;

impl Message for HopCount {
    type Result = u64;
}

impl Handler<HopCount> for WorkContextActor {
    type Result = u64;

    fn handle(&mut self, _msg: HopCount, _ctx: &mut Self::Context) -> u64 {
        std::mem::take(&mut self.hops)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cairn_memory::store::StateKey;
    use cairn_memory::{ForgetTarget, Memory, MemoryConfig, SystemClock, TurnInput};

    use super::*;
    use crate::gate::HeuristicGate;

    /// A sled store on a temporary directory, and its workspace `acme`.
    fn acme() -> (tempfile::TempDir, Memory, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let memory =
            Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock)).unwrap();
        let ws = memory.workspace("acme").unwrap();
        (dir, memory, ws)
    }

    fn observed(ws: &Workspace, session: &str, seq: u64) -> ObservedTurn {
        let turn = ws.transcript(session, seq, Some(1)).unwrap().remove(0);
        ObservedTurn {
            seq,
            session_kind: SessionKind::Main,
            work_context: "w".into(),
            role: turn.role,
            tool_use: turn.tool_call_id.is_some() || turn.role == Role::Tool,
            content: turn.content,
            timestamp: turn.timestamp,
        }
    }

    /// After a capture, the state kept and refreshed equals the state a
    /// whole load makes: captured turns dropped, turns past the marks kept
    /// with their verdicts in load order, erased sessions gone, and turns
    /// stored during the capture observed afterwards.
    #[test]
    fn a_refresh_after_a_capture_is_a_load() {
        let (_dir, _memory, ws) = acme();
        let triggers = TriggerConfig {
            min_dirty_user_turns: 3,
            ..TriggerConfig::default()
        };
        let gate = HeuristicGate;
        let append = |session: &str, role: Role, text: &str| {
            let mut turn = TurnInput::new(session, role, text).in_context("w");
            if role == Role::Tool {
                turn = turn.with_tool_call_id("call-1");
            }
            ws.append_turn(&turn).unwrap().seq
        };
        for i in 0..4 {
            append("s2", Role::User, &format!("second session, turn {i}"));
            append("s1", Role::Assistant, &format!("first session, answer {i}"));
            append("s3", Role::User, &format!("third session, turn {i}"));
            append("s4", Role::User, &format!("fourth session, turn {i}"));
        }
        append("s3", Role::Tool, "ran the migration");
        let mut kept = load_state(&ws, "w", &gate, &triggers, Verdicts::new()).unwrap();
        assert!(kept.is_dirty(&triggers));
        // Observed while the actor runs, before the capture.
        let seq = append("s1", Role::User, "a user turn in the first session");
        kept.note(
            &gate,
            "acme",
            &triggers,
            "s1",
            &observed(&ws, "s1", seq),
            &mut Verdicts::new(),
        );
        // Stored before the capture, observed only after it.
        let unobserved = [
            append("s5", Role::User, "a fifth session"),
            append("s5", Role::User, "still not observed"),
        ];
        // The capture: s1 up to 3, s3 and s5 whole, s2 untouched; s4 erased.
        let record = ContextRecord {
            high_water: BTreeMap::from([
                ("s1".to_owned(), 3),
                ("s3".to_owned(), 5),
                ("s5".to_owned(), 2),
            ]),
            last_capture_at: Some(Utc::now()),
            ..ContextRecord::default()
        };
        let key = StateKey::CaptureMark {
            work_context: "w".into(),
        };
        ws.state_put(&key, &serde_json::to_vec(&record).unwrap())
            .unwrap();
        ws.forget(&ForgetTarget::Session("s4".into()), "test")
            .unwrap();
        // Stored during the capture, observed after it.
        let late = append("s2", Role::User, "stored while the capture ran");

        let extract_all = triggers.extract_all_sessions;
        let loaded = load_state(&ws, "w", &gate, &triggers, Verdicts::new()).unwrap();
        // Every session of the context read, or (what the actor does) only
        // those it holds uncaptured turns of.
        let every = Fresh::read(&ws, "w").unwrap();
        let held = Fresh::read_sessions(&ws, "w", &kept.sessions_holding_turns()).unwrap();
        assert!(held.sessions.len() < every.sessions.len());
        for fresh in [every, held] {
            let mut refreshed = kept.clone().after_capture(fresh, extract_all, &triggers);
            for seq in unobserved {
                let turn = observed(&ws, "s5", seq);
                refreshed.note(&gate, "acme", &triggers, "s5", &turn, &mut Verdicts::new());
            }
            let turn = observed(&ws, "s2", late);
            refreshed.note(&gate, "acme", &triggers, "s2", &turn, &mut Verdicts::new());
            assert_eq!(refreshed, loaded);
            assert_eq!(refreshed.verdicts.len(), 2 + 5);
            assert!(!refreshed.seen.contains_key("s4"));
            assert_eq!(refreshed.seen.get("s3"), Some(&5));
            assert_eq!(refreshed.seen.get("s5"), Some(&2));
        }
    }

    /// Dropping the captured turns leaves the sums, the first time and the
    /// dirtying generation that accounting the kept turns again in load
    /// order makes, mentions and policy generations included.
    #[test]
    fn dropping_captured_turns_is_a_replay_in_load_order() {
        let (_dir, _memory, ws) = acme();
        for session in ["s1", "s2", "s3"] {
            for i in 0..3 {
                let turn =
                    TurnInput::new(session, Role::User, &format!("turn {i}")).in_context("w");
                ws.append_turn(&turn).unwrap();
            }
        }
        let triggers = TriggerConfig {
            min_dirty_user_turns: 2,
            ..TriggerConfig::default()
        };
        let verdict = |user: bool, tool: bool, mentions: &[&str], generation: &str| Significance {
            user_turn: user,
            tool_use: tool,
            mentions: mentions.iter().map(|m| (*m).to_owned()).collect(),
            significant: false,
            depth: cairn_memory::extract::Depth::Standard,
            generation: Some(generation.to_owned()),
        };
        let t0 = Utc::now();
        let at = |minutes: i64| t0 + Duration::minutes(minutes);
        // Arrival order differs from load order (by session, then seq).
        let arrivals = [
            (
                ("s3", 0),
                verdict(false, false, &["alpha"], "g-s3-0"),
                at(0),
            ),
            (("s1", 0), verdict(true, false, &[], "g-s1-0"), at(1)),
            (
                ("s2", 0),
                verdict(true, false, &["alpha", "beta"], "g-s2-0"),
                at(2),
            ),
            (("s1", 1), verdict(false, true, &[], "g-s1-1"), at(3)),
            (("s2", 1), verdict(true, false, &[], "g-s2-1"), at(4)),
            (("s3", 1), verdict(true, false, &["beta"], "g-s3-1"), at(5)),
            (("s1", 2), verdict(false, false, &[], "g-s1-2"), at(6)),
        ];
        let mut kept = ContextState::default();
        for ((session, seq), significance, when) in arrivals.iter().cloned() {
            kept.seen.insert(session.to_owned(), seq + 1);
            kept.account((session.to_owned(), seq), when, significance, &triggers);
        }
        assert_eq!(kept.dirtied_by.as_deref(), Some("g-s3-0"));
        // s1 captured up to 2 and s3 whole; s2 untouched.
        let record = ContextRecord {
            high_water: BTreeMap::from([("s1".to_owned(), 2), ("s3".to_owned(), 3)]),
            last_capture_at: Some(t0),
            ..ContextRecord::default()
        };
        let key = StateKey::CaptureMark {
            work_context: "w".into(),
        };
        ws.state_put(&key, &serde_json::to_vec(&record).unwrap())
            .unwrap();
        let after = kept.after_capture(Fresh::read(&ws, "w").unwrap(), false, &triggers);

        let mut replay = ContextState::default();
        let mut survivors: Vec<_> = arrivals
            .iter()
            .filter(|((session, seq), _, _)| match *session {
                "s1" => *seq >= 2,
                "s2" => true,
                _ => false,
            })
            .cloned()
            .collect();
        survivors.sort_by(|a, b| a.0.cmp(&b.0));
        for ((session, seq), significance, when) in survivors {
            replay.account((session.to_owned(), seq), when, significance, &triggers);
        }
        assert_eq!(after.verdicts, replay.verdicts);
        assert_eq!(after.noted_at, replay.noted_at);
        assert_eq!(after.mentions, replay.mentions);
        assert_eq!(
            (
                after.user_turns,
                after.tool_use_turns,
                after.significant_turns
            ),
            (2, 0, 0)
        );
        assert_eq!(after.first_uncaptured_at, Some(at(6)));
        assert_eq!(after.first_uncaptured_at, replay.first_uncaptured_at);
        // s1/2 adds nothing; s2/0 names subjects: it makes the context dirty.
        assert_eq!(after.dirtied_by.as_deref(), Some("g-s2-0"));
        assert_eq!(after.dirtied_by, replay.dirtied_by);
        assert_eq!(
            after.mentions,
            BTreeMap::from([("alpha".to_owned(), 1), ("beta".to_owned(), 1)])
        );
        assert_eq!(after.seen.get("s3"), Some(&3));
        assert_eq!(after.seen.get("s1"), Some(&3));
    }

    #[test]
    fn a_capture_gives_back_the_verdict_maps_room() {
        let mut verdicts = Verdicts::new();
        for seq in 0..10_000 {
            verdicts.insert(("s".to_owned(), seq), Significance::default());
        }
        // Half removed: the room stays (it will be used again).
        verdicts.retain(|(_, seq), _| *seq % 2 == 0);
        let room = verdicts.capacity();
        shrink_if_sparse(&mut verdicts);
        assert_eq!(verdicts.capacity(), room);
        // Nearly all removed: the room goes, the verdicts stay.
        verdicts.retain(|(_, seq), _| *seq < 20);
        shrink_if_sparse(&mut verdicts);
        assert!(verdicts.capacity() < 200, "{}", verdicts.capacity());
        assert_eq!(verdicts.len(), 10);
        assert!(verdicts.contains_key(&("s".to_owned(), 18)));
    }
}
