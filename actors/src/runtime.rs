//! [`ActorRuntime`]: the actix system, the registry of live actors, routing,
//! the trigger tick and passivation.
//!
//! **Threads.** The runtime owns one thread running an actix `System` and
//! `config.arbiters` arbiter threads; every actor lives on the arbiter its key
//! hashes to. Storage work (reads, applies, fsync) never runs on an arbiter:
//! actors hand it to the arbiter's blocking pool ([`blocking`]), because an
//! arbiter is one thread and an fsync on it would stall every actor there.
//! An optional ticker thread calls [`ActorRuntime::tick`] every
//! `tick_interval_secs`.
//!
//! **Callers.** The public methods are synchronous and meant for the host's
//! threads (the embedder's, or the HTTP server's blocking pool), never for an
//! arbiter thread. Each call puts a message with a reply channel into the
//! actor's bounded mailbox with `try_send` — `do_send` would ignore the
//! capacity — and waits for the reply. A full mailbox is refused at once or
//! after `wait_millis`, by configuration.
//!
//! **Registry.** Two maps (sessions, work contexts) behind `parking_lot`
//! mutexes: they are held for a lookup or an insert only, never across a
//! wait, so a synchronous mutex is right and cheaper than an async one.
//! Actors start on first use; a tick passivates those idle (by the clock) for
//! `passivate_after_secs` — dirty work contexts excepted — by dropping their
//! address: an actix actor stops once its mailbox is empty and no address is
//! left. State is rebuilt from the store by the next incarnation.
//!
//! **Shutdown** is owned by the last [`ActorRuntime`] handle: dropping it (or
//! calling [`ActorRuntime::shutdown`]) stops the ticker, stops the system and
//! joins its thread. Every acknowledged write was fsynced before its reply,
//! so stopping loses nothing.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration as StdDuration, Instant};

use actix::prelude::*;
use cairn_memory::extractor::ModelExtractor;
use cairn_memory::{
    Ack, MaintainOptions, MaintainTrigger, Memory, MemoryError, Session, TurnInput, Workspace,
};
use chrono::{DateTime, Duration, Utc};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::capture::{
    CaptureLocks, CaptureReport, ExtractionOutcome, Trigger, extractable, load_extraction,
};
use crate::config::{ActorConfig, Backpressure};
use crate::context::{
    CaptureNow, ContextState, ExtractSession, Settle, Tick, TickMsg, WorkContextActor,
};
use crate::error::{ActorError, Result};
use crate::fault::{Fault, Faults};
use crate::gate::{CaptureGate, HeuristicGate};
use crate::session::{HopBurst, Ingest, SessionActor, SettleSession};
use crate::topic::{NoTopics, SettleTopic, TopicJudge, TopicWatcherActor};

/// Where an actor sends its answer.
pub(crate) type Reply<T> = SyncSender<Result<T>>;

/// Where an actor sends an answer that a thread may wait for or a task
/// may await ([`ActorRuntime::ingest`], [`ActorRuntime::ingest_async`]).
pub(crate) enum Answer<T> {
    /// A host thread blocks on it.
    Thread(SyncSender<Result<T>>),
    /// An async caller (the HTTP server's worker) awaits it: no thread is
    /// parked and no blocking-pool hop is needed to wait.
    Task(tokio::sync::oneshot::Sender<Result<T>>),
}

impl<T> Answer<T> {
    /// Sends the answer; a caller that gave up (timed out) is not an error.
    pub(crate) fn send(self, answer: Result<T>) {
        match self {
            Answer::Thread(tx) => {
                let _ = tx.send(answer);
            }
            Answer::Task(tx) => {
                let _ = tx.send(answer);
            }
        }
    }
}

/// Runs storage work on the current arbiter's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    job: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match actix_rt::task::spawn_blocking(job).await {
        Ok(result) => result,
        Err(e) => Err(ActorError::Task(e.to_string())),
    }
}

/// The pauses between tries of a sender whose message found a mailbox full:
/// doubling from 50 µs to 5 ms, so a brief stall costs microseconds and a
/// long one few wake-ups.
pub(crate) struct Backoff {
    pause: StdDuration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff {
            pause: StdDuration::from_micros(50),
        }
    }

    /// The pause before the next try.
    pub(crate) fn next(&mut self) -> StdDuration {
        let pause = self.pause;
        self.pause = (pause * 2).min(StdDuration::from_millis(5));
        pause
    }
}

/// How a caller whose message found an actor's mailbox full waits before
/// trying again: [`Backoff`]'s pauses until `wait_millis` has passed
/// ([`Backpressure::Wait`]), or not at all ([`Backpressure::Reject`]).
struct Patience {
    deadline: Option<Instant>,
    backoff: Backoff,
}

impl Patience {
    fn new(config: &ActorConfig) -> Self {
        Patience {
            deadline: match config.backpressure {
                Backpressure::Reject => None,
                Backpressure::Wait => {
                    Some(Instant::now() + StdDuration::from_millis(config.wait_millis))
                }
            },
            backoff: Backoff::new(),
        }
    }

    /// How long to wait before the next try; `None`: give up.
    fn next(&mut self) -> Option<StdDuration> {
        match self.deadline {
            Some(deadline) if Instant::now() < deadline => Some(self.backoff.next()),
            _ => None,
        }
    }
}

/// Where a batch of turns goes ([`ActorRuntime::ingest`]).
struct IngestTarget {
    ws: Workspace,
    addr: Arc<Addr<SessionActor>>,
    /// The actor's name, for errors.
    actor: String,
}

type Key = (String, String);

struct Slot<A: Actor> {
    /// One shared sender per actor, on purpose: actix parks a *sender* whose
    /// message filled the mailbox, and a fresh `Addr` clone starts unparked,
    /// so handing out clones would let every caller past the capacity.
    addr: Arc<Addr<A>>,
    last_used: DateTime<Utc>,
}

/// Where the user is, per workspace.
#[derive(Debug, Clone, Default)]
struct Focus {
    work_context: Option<String>,
    last_turn_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    restarts: AtomicU64,
    passivated: AtomicU64,
}

impl Counters {
    pub(crate) fn restarts(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }
}

/// Numbers about the live runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeStats {
    /// Live session actors.
    pub sessions: usize,
    /// Live work-context actors.
    pub contexts: usize,
    /// Live topic watchers.
    pub watchers: usize,
    /// Actor restarts after a failure since start.
    pub restarts: u64,
    /// Actors passivated since start.
    pub passivated: u64,
}

/// What a session-level extraction did, per session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionExtraction {
    /// Workspace.
    pub workspace: String,
    /// Session.
    pub session: String,
    /// What happened.
    #[serde(flatten)]
    pub outcome: ExtractionOutcome,
}

pub(crate) struct Inner {
    pub(crate) memory: Memory,
    pub(crate) config: ActorConfig,
    pub(crate) gate: Arc<dyn CaptureGate>,
    pub(crate) topics: Arc<dyn TopicJudge>,
    pub(crate) locks: CaptureLocks,
    pub(crate) faults: Faults,
    /// The optional model extraction pass, set once after start
    /// ([`ActorRuntime::set_extractor`]); read (cloned) per capture.
    pub(crate) extractor: parking_lot::RwLock<Option<Arc<dyn ModelExtractor>>>,
    pub(crate) stats: Counters,
    arbiters: Vec<ArbiterHandle>,
    sessions: Mutex<HashMap<Key, Slot<SessionActor>>>,
    contexts: Mutex<HashMap<Key, Slot<WorkContextActor>>>,
    watchers: Mutex<HashMap<Key, Slot<TopicWatcherActor>>>,
    focus: Mutex<HashMap<String, Focus>>,
    last_tick: Mutex<Option<DateTime<Utc>>>,
    tick_lock: Mutex<()>,
}

impl Inner {
    /// Takes a work context's actor out of the registry: once no address
    /// is left, its supervisor does not restart it.
    pub(crate) fn drop_context(&self, workspace: &str, work_context: &str) {
        self.contexts
            .lock()
            .remove(&(workspace.to_owned(), work_context.to_owned()));
    }

    fn arbiter(&self, key: &Key) -> &ArbiterHandle {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        &self.arbiters[(hasher.finish() as usize) % self.arbiters.len()]
    }

    fn now(&self) -> DateTime<Utc> {
        self.memory.clock().now()
    }

    /// The work context's actor, started on first use.
    pub(crate) fn context_addr(
        self: &Arc<Self>,
        ws: &Workspace,
        work_context: &str,
    ) -> Arc<Addr<WorkContextActor>> {
        let key = (ws.id().to_owned(), work_context.to_owned());
        let now = self.now();
        let mut contexts = self.contexts.lock();
        if let Some(slot) = contexts.get_mut(&key)
            && slot.addr.connected()
        {
            slot.last_used = now;
            return slot.addr.clone();
        }
        let inner = self.clone();
        let ws = ws.clone();
        let wc = work_context.to_owned();
        let capacity = self.config.mailbox_capacity;
        let addr = Arc::new(Supervisor::start_in_arbiter(
            self.arbiter(&key),
            move |ctx| {
                ctx.set_mailbox_capacity(capacity);
                WorkContextActor {
                    inner,
                    ws,
                    work_context: wc,
                    state: ContextState::default(),
                    hops: 0,
                    load_failures: 0,
                }
            },
        ));
        contexts.insert(
            key,
            Slot {
                addr: addr.clone(),
                last_used: now,
            },
        );
        addr
    }

    /// The topic's watcher, started on first use.
    pub(crate) fn watcher_addr(
        self: &Arc<Self>,
        ws: &Workspace,
        topic: &str,
    ) -> Arc<Addr<TopicWatcherActor>> {
        let key = (ws.id().to_owned(), topic.to_owned());
        let now = self.now();
        let mut watchers = self.watchers.lock();
        if let Some(slot) = watchers.get_mut(&key)
            && slot.addr.connected()
        {
            slot.last_used = now;
            return slot.addr.clone();
        }
        let inner = self.clone();
        let ws = ws.clone();
        let name = topic.to_owned();
        let capacity = self.config.mailbox_capacity;
        let addr = Arc::new(Supervisor::start_in_arbiter(
            self.arbiter(&key),
            move |ctx| {
                ctx.set_mailbox_capacity(capacity);
                TopicWatcherActor {
                    inner,
                    ws,
                    topic: name,
                }
            },
        ));
        watchers.insert(
            key,
            Slot {
                addr: addr.clone(),
                last_used: now,
            },
        );
        addr
    }

    fn session_addr(self: &Arc<Self>, ws: &Workspace, session: &str) -> Arc<Addr<SessionActor>> {
        let key = (ws.id().to_owned(), session.to_owned());
        let now = self.now();
        let mut sessions = self.sessions.lock();
        if let Some(slot) = sessions.get_mut(&key)
            && slot.addr.connected()
        {
            slot.last_used = now;
            return slot.addr.clone();
        }
        let inner = self.clone();
        let ws = ws.clone();
        let id = session.to_owned();
        let capacity = self.config.mailbox_capacity;
        let addr = Arc::new(Supervisor::start_in_arbiter(
            self.arbiter(&key),
            move |ctx| {
                ctx.set_mailbox_capacity(capacity);
                SessionActor {
                    inner,
                    ws,
                    session: id,
                }
            },
        ));
        sessions.insert(
            key,
            Slot {
                addr: addr.clone(),
                last_used: now,
            },
        );
        addr
    }

    /// Puts `msg` in `addr`'s mailbox, honouring the backpressure setting,
    /// and waits for the answer on `rx`.
    fn call<A, M, T>(
        &self,
        actor: &str,
        addr: &Addr<A>,
        msg: M,
        rx: Receiver<Result<T>>,
    ) -> Result<T>
    where
        A: Actor<Context = Context<A>> + Handler<M>,
        M: Message<Result = ()> + Send + 'static,
    {
        self.enqueue(actor, addr, msg)?;
        self.wait(actor, rx)
    }

    fn enqueue<A, M>(&self, actor: &str, addr: &Addr<A>, msg: M) -> Result<()>
    where
        A: Actor<Context = Context<A>> + Handler<M>,
        M: Message<Result = ()> + Send + 'static,
    {
        let mut patience = Patience::new(&self.config);
        let mut msg = msg;
        while let Some((back, pause)) = self.offer(actor, addr, msg, &mut patience)? {
            msg = back;
            std::thread::sleep(pause);
        }
        Ok(())
    }

    /// One try at putting `msg` in the mailbox: `None` once it is in;
    /// the message back and how long to wait before the next try when the
    /// mailbox is full and `patience` lasts; an error when the actor stopped
    /// or patience ran out.
    fn offer<A, M>(
        &self,
        actor: &str,
        addr: &Addr<A>,
        msg: M,
        patience: &mut Patience,
    ) -> Result<Option<(M, StdDuration)>>
    where
        A: Actor<Context = Context<A>> + Handler<M>,
        M: Message<Result = ()> + Send + 'static,
    {
        match addr.try_send(msg) {
            Ok(()) => Ok(None),
            Err(SendError::Closed(_)) => Err(ActorError::Unavailable(format!("{actor} stopped"))),
            Err(SendError::Full(back)) => match patience.next() {
                Some(pause) => Ok(Some((back, pause))),
                None => Err(ActorError::Backpressure {
                    actor: actor.to_owned(),
                    capacity: self.config.mailbox_capacity,
                }),
            },
        }
    }

    fn timed_out(&self, actor: &str) -> ActorError {
        ActorError::Timeout {
            actor: actor.to_owned(),
            millis: self.config.call_timeout_millis,
        }
    }

    fn wait<T>(&self, actor: &str, rx: Receiver<Result<T>>) -> Result<T> {
        let timeout = StdDuration::from_millis(self.config.call_timeout_millis);
        match rx.recv_timeout(timeout) {
            Ok(result) => result,
            // The actor dropped the reply: it panicked mid-request.
            Err(RecvTimeoutError::Disconnected) => Err(ActorError::Panicked {
                actor: actor.to_owned(),
            }),
            Err(RecvTimeoutError::Timeout) => Err(self.timed_out(actor)),
        }
    }

    /// [`Inner::call`] awaited: the message with an [`Answer::Task`] whose
    /// receiver is `rx`. A full mailbox under [`Backpressure::Wait`] is
    /// retried after an async sleep, so the calling thread never blocks.
    async fn call_async<A, M, T>(
        &self,
        actor: &str,
        addr: &Addr<A>,
        msg: M,
        rx: tokio::sync::oneshot::Receiver<Result<T>>,
    ) -> Result<T>
    where
        A: Actor<Context = Context<A>> + Handler<M>,
        M: Message<Result = ()> + Send + 'static,
    {
        let mut patience = Patience::new(&self.config);
        let mut msg = msg;
        while let Some((back, pause)) = self.offer(actor, addr, msg, &mut patience)? {
            msg = back;
            tokio::time::sleep(pause).await;
        }
        let timeout = StdDuration::from_millis(self.config.call_timeout_millis);
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            // The actor dropped the reply: it panicked mid-request.
            Ok(Err(_)) => Err(ActorError::Panicked {
                actor: actor.to_owned(),
            }),
            Err(_) => Err(self.timed_out(actor)),
        }
    }

    fn focus_of(&self, ws: &Workspace) -> Result<Focus> {
        if let Some(focus) = self.focus.lock().get(ws.id()) {
            return Ok(focus.clone());
        }
        // First look at this workspace since start: the focus is the work
        // context of the main session with the latest turn.
        let mut focus = Focus::default();
        for session in ws.sessions(None)? {
            if !session.is_main() {
                continue;
            }
            if let Some(at) = session.last_turn_at
                && focus.last_turn_at.is_none_or(|best| at > best)
            {
                focus.last_turn_at = Some(at);
                focus.work_context = Some(session.work_context.clone());
            }
        }
        Ok(self
            .focus
            .lock()
            .entry(ws.id().to_owned())
            .or_insert(focus)
            .clone())
    }

    fn note_focus(&self, ws: &Workspace, session: &Session, turns: &[TurnInput], acks: &[Ack]) {
        let fresh = turns
            .iter()
            .zip(acks)
            .any(|(t, a)| !a.duplicate && t.session == session.id);
        if !session.is_main() || !fresh {
            return;
        }
        let user_spoke = turns.iter().zip(acks).any(|(t, a)| {
            !a.duplicate && t.session == session.id && t.role == cairn_memory::Role::User
        });
        let mut focus = self.focus.lock();
        let entry = focus.entry(ws.id().to_owned()).or_default();
        if user_spoke {
            entry.work_context = Some(session.work_context.clone());
        }
        if let Some(at) = session.last_turn_at
            && entry.last_turn_at.is_none_or(|t| at > t)
        {
            entry.last_turn_at = Some(at);
        }
    }
}

/// Stops the system when the last handle goes.
struct Guard {
    system: Mutex<Option<(System, JoinHandle<()>)>>,
    ticker: Mutex<Option<(SyncSender<()>, JoinHandle<()>)>>,
}

impl Guard {
    fn stop(&self) {
        if let Some((stop, handle)) = self.ticker.lock().take() {
            let _ = stop.try_send(());
            let _ = handle.join();
        }
        if let Some((system, handle)) = self.system.lock().take() {
            system.stop();
            let _ = handle.join();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The supervised actor runtime: one `SessionActor` per live session, one
/// `WorkContextActor` per live work context, one `TopicWatcherActor` per
/// live topic. Cheap to clone; the last clone
/// dropped shuts it down.
///
/// ```
/// use std::sync::Arc;
/// use cairn_actors::{ActorConfig, ActorRuntime};
/// use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput};
///
/// let dir = tempfile::tempdir()?;
/// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
/// let runtime = ActorRuntime::start(memory, ActorConfig { tick_interval_secs: 0, ..Default::default() })?;
/// let acks = runtime.ingest("acme", &[TurnInput::new("s1", Role::User, "Let's go with Postgres.")])?;
/// assert_eq!(acks[0].seq, 0);
/// let report = runtime.capture("acme", "default")?;
/// assert_eq!(report.entries[1].content, "Let's go with Postgres.");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ActorRuntime {
    inner: Arc<Inner>,
    guard: Arc<Guard>,
}

impl std::fmt::Debug for ActorRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorRuntime")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl ActorRuntime {
    /// Starts the runtime with the heuristic significance gate.
    pub fn start(memory: Memory, config: ActorConfig) -> Result<Self> {
        ActorRuntime::start_with_gate(memory, config, Arc::new(HeuristicGate))
    }

    /// Starts the runtime with a significance gate of the caller's (the seam
    /// where the WebAssembly policy gate slots in).
    pub fn start_with_gate(
        memory: Memory,
        config: ActorConfig,
        gate: Arc<dyn CaptureGate>,
    ) -> Result<Self> {
        ActorRuntime::start_with_topics(memory, config, gate, Arc::new(NoTopics))
    }

    /// Starts the runtime with a significance gate and a topic judge of the
    /// caller's: every acknowledged turn goes through the judge's tier 1,
    /// and each candidate topic's `TopicWatcherActor` runs tiers 2–3.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn_actors::{ActorConfig, ActorRuntime, HeuristicGate, NoTopics};
    /// use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let config = ActorConfig { tick_interval_secs: 0, ..Default::default() };
    /// let runtime = ActorRuntime::start_with_topics(memory, config, Arc::new(HeuristicGate), Arc::new(NoTopics))?;
    /// runtime.ingest("acme", &[TurnInput::new("s1", Role::User, "hello")])?;
    /// runtime.settle()?;
    /// assert_eq!(runtime.stats().watchers, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start_with_topics(
        memory: Memory,
        config: ActorConfig,
        gate: Arc<dyn CaptureGate>,
        topics: Arc<dyn TopicJudge>,
    ) -> Result<Self> {
        config.validate().map_err(ActorError::Unavailable)?;
        let arbiters = config.arbiters;
        let (tx, rx) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("cairn-actors".to_owned())
            .spawn(move || {
                let system = System::new();
                let handles: Vec<Arbiter> = (0..arbiters).map(|_| Arbiter::new()).collect();
                let _ = tx.send((
                    System::current(),
                    handles.iter().map(Arbiter::handle).collect::<Vec<_>>(),
                ));
                if let Err(error) = system.run() {
                    tracing::error!(%error, "actor system stopped with an error");
                }
                for arbiter in handles {
                    arbiter.stop();
                    let _ = arbiter.join();
                }
            })
            .map_err(|e| ActorError::Unavailable(format!("cannot start actor thread: {e}")))?;
        let (system, handles) = rx
            .recv()
            .map_err(|_| ActorError::Unavailable("actor thread failed to start".to_owned()))?;
        let tick_every = config.tick_interval_secs;
        let inner = Arc::new(Inner {
            memory,
            config,
            gate,
            topics,
            locks: CaptureLocks::default(),
            faults: Faults::default(),
            extractor: parking_lot::RwLock::new(None),
            stats: Counters::default(),
            arbiters: handles,
            sessions: Mutex::new(HashMap::new()),
            contexts: Mutex::new(HashMap::new()),
            watchers: Mutex::new(HashMap::new()),
            focus: Mutex::new(HashMap::new()),
            last_tick: Mutex::new(None),
            tick_lock: Mutex::new(()),
        });
        let guard = Arc::new(Guard {
            system: Mutex::new(Some((system, thread))),
            ticker: Mutex::new(None),
        });
        let runtime = ActorRuntime { inner, guard };
        if tick_every > 0 {
            // The ticker holds only the inner state, not the guard, so it
            // never keeps the runtime alive; it stops when told to.
            let (stop_tx, stop_rx) = mpsc::sync_channel::<()>(1);
            let ticker = ActorRuntime {
                inner: runtime.inner.clone(),
                guard: Arc::new(Guard {
                    system: Mutex::new(None),
                    ticker: Mutex::new(None),
                }),
            };
            let supervised = runtime.inner.memory.workers().worker("ticker");
            let handle = std::thread::Builder::new()
                .name("cairn-ticker".to_owned())
                .spawn(move || {
                    supervised.set_running(true);
                    while let Err(RecvTimeoutError::Timeout) =
                        stop_rx.recv_timeout(StdDuration::from_secs(tick_every))
                    {
                        // A panic in a tick is caught and counted; the next
                        // tick runs.
                        if let Some(Err(error)) = supervised.pass(|| ticker.tick()) {
                            tracing::warn!(%error, "trigger tick failed");
                        }
                    }
                    supervised.set_running(false);
                })
                .map_err(|e| ActorError::Unavailable(format!("cannot start ticker: {e}")))?;
            *runtime.guard.ticker.lock() = Some((stop_tx, handle));
        }
        Ok(runtime)
    }

    /// The configuration in force.
    pub fn config(&self) -> &ActorConfig {
        &self.inner.config
    }

    /// Stops the ticker and the actor system (also done when the last handle
    /// is dropped). Calls after this fail with `Unavailable`.
    pub fn shutdown(&self) {
        self.guard.stop();
    }

    /// Appends turns through their session actors; acknowledged once durable.
    ///
    /// Turns are grouped by session (one message per session, in order).
    /// A full mailbox yields [`ActorError::Backpressure`] and writes nothing
    /// for that session's group.
    pub fn ingest(&self, workspace: &str, turns: &[TurnInput]) -> Result<Vec<Ack>> {
        let Some(IngestTarget { ws, addr, actor }) = self.ingest_target(workspace, turns)? else {
            return Ok(Vec::new());
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let msg = Ingest {
            turns: turns.to_vec(),
            reply: Answer::Thread(tx),
        };
        let (acks, records) = self.inner.call(&actor, &addr, msg, rx)?;
        Ok(self.ingested(&ws, turns, acks, &records))
    }

    /// Where a batch of turns goes: the workspace, the first turn's session
    /// actor and its name; `None` for an empty batch. The batch goes whole
    /// to that actor so that it stays one atomic write, as on the direct
    /// path; the actor forwards each session's turns to that session's
    /// work context.
    fn ingest_target(&self, workspace: &str, turns: &[TurnInput]) -> Result<Option<IngestTarget>> {
        let ws = self.inner.memory.workspace(workspace)?;
        let Some(first) = turns.first() else {
            return Ok(None);
        };
        cairn_memory::ids::validate_id("session id", &first.session)?;
        let addr = self.inner.session_addr(&ws, &first.session);
        let actor = format!("session {workspace}/{}", first.session);
        Ok(Some(IngestTarget { ws, addr, actor }))
    }

    /// Notes where the user is after an acknowledged batch; returns its acks.
    fn ingested(
        &self,
        ws: &Workspace,
        turns: &[TurnInput],
        acks: Vec<Ack>,
        records: &[Session],
    ) -> Vec<Ack> {
        for record in records {
            self.inner.note_focus(ws, record, turns, &acks);
        }
        acks
    }

    /// [`ActorRuntime::ingest`] for an async caller: the same message to
    /// the same session actor, the same mailbox bound, backpressure and
    /// timeout, but awaited. An async server calls this on its own worker
    /// instead of handing a thread-blocking `ingest` to a blocking pool, a
    /// thread hand-off each way per turn. It never blocks the calling
    /// thread: a full mailbox under [`Backpressure::Wait`] is retried after
    /// an async sleep. Must be polled inside a Tokio runtime with its timer
    /// enabled (actix-web's workers are).
    pub async fn ingest_async(&self, workspace: &str, turns: &[TurnInput]) -> Result<Vec<Ack>> {
        let Some(IngestTarget { ws, addr, actor }) = self.ingest_target(workspace, turns)? else {
            return Ok(Vec::new());
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let msg = Ingest {
            turns: turns.to_vec(),
            reply: Answer::Task(tx),
        };
        let (acks, records) = self.inner.call_async(&actor, &addr, msg, rx).await?;
        Ok(self.ingested(&ws, turns, acks, &records))
    }

    /// Waits until every live actor has handled what it was sent before the
    /// call: the turns acknowledged so far have been judged by the
    /// significance gate and noted as dirty, and judged by every candidate
    /// topic's watcher (decisions written). A short process (a CLI command)
    /// calls it before exiting, tests before reading topic decisions; a
    /// stopped actor is skipped (its next incarnation rebuilds from the
    /// store).
    ///
    /// Order matters: sessions first (a session hands its turns to the
    /// topic watchers after its reply, in the same task, so once it answers
    /// a settle the watchers have them), then work contexts, then watchers.
    pub fn settle(&self) -> Result<()> {
        let sessions: Vec<(Key, Arc<Addr<SessionActor>>)> = self
            .inner
            .sessions
            .lock()
            .iter()
            .map(|(k, slot)| (k.clone(), slot.addr.clone()))
            .collect();
        for ((ws, id), addr) in sessions {
            let (tx, rx) = mpsc::sync_channel(1);
            let actor = format!("session {ws}/{id}");
            match self
                .inner
                .call(&actor, &addr, SettleSession { reply: tx }, rx)
            {
                Ok(()) | Err(ActorError::Unavailable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.settle_contexts()?;
        let watchers: Vec<(Key, Arc<Addr<TopicWatcherActor>>)> = self
            .inner
            .watchers
            .lock()
            .iter()
            .map(|(k, slot)| (k.clone(), slot.addr.clone()))
            .collect();
        for ((ws, topic), addr) in watchers {
            let (tx, rx) = mpsc::sync_channel(1);
            let actor = format!("topic {ws}/{topic}");
            match self
                .inner
                .call(&actor, &addr, SettleTopic { reply: tx }, rx)
            {
                Ok(()) | Err(ActorError::Unavailable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn settle_contexts(&self) -> Result<()> {
        let addrs: Vec<(Key, Arc<Addr<WorkContextActor>>)> = self
            .inner
            .contexts
            .lock()
            .iter()
            .map(|(k, slot)| (k.clone(), slot.addr.clone()))
            .collect();
        for ((ws, wc), addr) in addrs {
            let (tx, rx) = mpsc::sync_channel(1);
            let actor = format!("context {ws}/{wc}");
            match self.inner.call(&actor, &addr, Settle { reply: tx }, rx) {
                Ok(()) | Err(ActorError::Unavailable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Drops every actor of `workspace` (sessions, work contexts, focus)
    /// from the registry: called once the workspace is erased, so the next
    /// use starts from the store afresh instead of an actor holding a handle
    /// to the dropped tree. The actors stop when their last address goes.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_actors::ActorRuntime;
    /// # use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput};
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let actors = ActorRuntime::start(memory.clone(), Default::default())?;
    /// actors.ingest("acme", &[TurnInput::new("s1", Role::User, "hello")])?;
    /// memory.forget_workspace("acme", "test")?;
    /// actors.forget_workspace("acme");
    /// // The same ids start clean on a new tree.
    /// assert_eq!(actors.ingest("acme", &[TurnInput::new("s1", Role::User, "again")])?[0].seq, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forget_workspace(&self, workspace: &str) {
        self.inner
            .sessions
            .lock()
            .retain(|(w, _), _| w != workspace);
        self.inner
            .contexts
            .lock()
            .retain(|(w, _), _| w != workspace);
        self.inner
            .watchers
            .lock()
            .retain(|(w, _), _| w != workspace);
        self.inner.focus.lock().remove(workspace);
    }

    /// Erases a session of `work_context` with `erase`, under the work
    /// context's capture lock (so no capture in flight writes what it made
    /// from the session's turns after the erase); drops its actor and its
    /// work context's actor (whose state names the session's turns) from
    /// the registry, and takes the session out of the context's capture
    /// record, so a new session with the same id starts clean.
    pub fn forget_session<T>(
        &self,
        workspace: &str,
        session: &str,
        work_context: &str,
        erase: impl FnOnce() -> std::result::Result<T, MemoryError>,
    ) -> Result<T> {
        self.inner
            .sessions
            .lock()
            .remove(&(workspace.to_owned(), session.to_owned()));
        self.inner.drop_context(workspace, work_context);
        let ws = self.inner.memory.existing_workspace(workspace)?;
        crate::capture::forget_session(&ws, &self.inner.locks, work_context, session, erase)
    }

    /// Pre-compaction capture of the session's work context (mandatory: runs
    /// even when nothing is dirty, so nothing is compacted away uncaptured).
    pub fn before_compaction(&self, workspace: &str, session: &str) -> Result<CaptureReport> {
        let ws = self.inner.memory.existing_workspace(workspace)?;
        let record = ws.session(session)?;
        self.capture_with(&ws, &record.work_context, Trigger::PreCompaction)
    }

    /// Manual capture of one work context.
    pub fn capture(&self, workspace: &str, work_context: &str) -> Result<CaptureReport> {
        let ws = self.inner.memory.existing_workspace(workspace)?;
        cairn_memory::ids::validate_id("work context", work_context)?;
        self.capture_with(&ws, work_context, Trigger::ManualRequest)
    }

    /// Manual capture of every work context of a workspace.
    pub fn capture_all(&self, workspace: &str) -> Result<Vec<CaptureReport>> {
        let ws = self.inner.memory.existing_workspace(workspace)?;
        ws.work_contexts()?
            .iter()
            .map(|wc| self.capture_with(&ws, wc, Trigger::ManualRequest))
            .collect()
    }

    fn capture_with(
        &self,
        ws: &Workspace,
        work_context: &str,
        trigger: Trigger,
    ) -> Result<CaptureReport> {
        let addr = self.inner.context_addr(ws, work_context);
        let (tx, rx) = mpsc::sync_channel(1);
        let actor = format!("context {}/{work_context}", ws.id());
        let report = self
            .inner
            .call(&actor, &addr, CaptureNow { trigger, reply: tx }, rx)?;
        Ok(report.unwrap_or_else(|| CaptureReport {
            work_context: work_context.to_owned(),
            trigger,
            at: self.inner.now(),
            spans: Vec::new(),
            entries: Vec::new(),
            extractor: "heuristic".to_owned(),
            extractor_error: None,
            merged: Vec::new(),
            settled: Vec::new(),
        }))
    }

    /// Sets (or, with `None`, clears) the model extraction pass captures
    /// ask before falling back to the heuristic extractor (see
    /// `cairn_memory::extractor`). Applies to the captures that start after.
    pub fn set_extractor(&self, extractor: Option<Arc<dyn ModelExtractor>>) {
        *self.inner.extractor.write() = extractor;
    }

    /// Session-level extraction for hook `session_end` or `before_reset`:
    /// once per session, one retry after a failure, recorded durably.
    pub fn extract_session(
        &self,
        workspace: &str,
        session: &str,
        hook: Trigger,
    ) -> Result<ExtractionOutcome> {
        let ws = self.inner.memory.existing_workspace(workspace)?;
        let record = ws.session(session)?;
        self.extract_with(&ws, record, hook)
    }

    fn extract_with(
        &self,
        ws: &Workspace,
        session: Session,
        hook: Trigger,
    ) -> Result<ExtractionOutcome> {
        let addr = self.inner.context_addr(ws, &session.work_context);
        let actor = format!("context {}/{}", ws.id(), session.work_context);
        let (tx, rx) = mpsc::sync_channel(1);
        let msg = ExtractSession {
            session,
            hook,
            reply: tx,
        };
        self.inner.call(&actor, &addr, msg, rx)
    }

    /// Hook `gateway_start` sweep: extracts every main session not extracted
    /// yet (sessions a crash or restart left behind), retrying failed ones
    /// once. Sessions already done are skipped without a message.
    pub fn gateway_start(&self) -> Result<Vec<SessionExtraction>> {
        let mut out = Vec::new();
        let extract_all = self.inner.config.triggers.extract_all_sessions;
        for workspace in self.inner.memory.served_workspaces()? {
            let ws = self.inner.memory.workspace(&workspace)?;
            for session in ws.sessions(None)? {
                if !extractable(&session, extract_all) || session.next_seq == 0 {
                    continue;
                }
                if load_extraction(&ws, &session.id)?.is_some_and(|r| r.done) {
                    continue;
                }
                let id = session.id.clone();
                let outcome = self.extract_with(&ws, session, Trigger::GatewayStart)?;
                out.push(SessionExtraction {
                    workspace: workspace.clone(),
                    session: id,
                    outcome,
                });
            }
            // Start the contexts so dirty ones resume their triggers.
            for wc in ws.work_contexts()? {
                self.inner.context_addr(&ws, &wc);
            }
        }
        Ok(out)
    }

    /// Evaluates the time triggers at the clock's current time and passivates
    /// idle actors. Returns the captures that fired. The ticker thread calls
    /// this periodically; tests call it after moving a `ManualClock`.
    pub fn tick(&self) -> Result<Vec<CaptureReport>> {
        let inner = &self.inner;
        let _serial = inner.tick_lock.lock();
        let now = inner.now();
        let nightly = {
            let mut last = inner.last_tick.lock();
            let crossed = match (*last, inner.config.triggers.nightly()) {
                (Some(prev), Some((h, m))) => crossed_daily(prev, now, h, m),
                _ => false,
            };
            *last = Some(now);
            crossed
        };
        let contexts: Vec<(Key, Arc<Addr<WorkContextActor>>)> = inner
            .contexts
            .lock()
            .iter()
            .map(|(k, slot)| (k.clone(), slot.addr.clone()))
            .collect();
        let mut pending = Vec::with_capacity(contexts.len());
        for (key, addr) in contexts {
            let ws = inner.memory.workspace(&key.0)?;
            let focus = inner.focus_of(&ws)?;
            let tick = Tick {
                now,
                focused: focus.work_context.as_deref() == Some(key.1.as_str()),
                workspace_last_turn_at: focus.last_turn_at,
                nightly,
            };
            let (tx, rx) = mpsc::sync_channel(1);
            match addr.try_send(TickMsg { tick, reply: tx }) {
                Ok(()) => pending.push((key, addr, rx)),
                // A busy context is ticked again next time.
                Err(SendError::Full(_)) => {}
                Err(SendError::Closed(_)) => {
                    remove_if_same(&inner.contexts, &key, &addr);
                }
            }
        }
        let mut reports = Vec::new();
        let idle = Duration::seconds(inner.config.passivate_after_secs);
        for (key, addr, rx) in pending {
            let actor = format!("context {}/{}", key.0, key.1);
            match inner.wait(&actor, rx) {
                Ok(outcome) => {
                    if let Some(report) = outcome.capture {
                        reports.push(report);
                    }
                    if !outcome.dirty {
                        let mut contexts = inner.contexts.lock();
                        let stale = contexts.get(&key).is_some_and(|s| {
                            Arc::ptr_eq(&s.addr, &addr) && now - s.last_used >= idle
                        });
                        if stale {
                            contexts.remove(&key);
                            inner.stats.passivated.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Err(error) => tracing::warn!(%actor, %error, "tick failed; retried next tick"),
            }
        }
        // Sessions and watchers hold nothing the store does not: an idle one
        // is dropped from the registry and stops once its mailbox is empty.
        let mut dropped = 0;
        {
            let mut sessions = inner.sessions.lock();
            let before = sessions.len();
            sessions.retain(|_, slot| now - slot.last_used < idle);
            dropped += before - sessions.len();
        }
        {
            let mut watchers = inner.watchers.lock();
            let before = watchers.len();
            watchers.retain(|_, slot| now - slot.last_used < idle);
            dropped += before - watchers.len();
        }
        inner
            .stats
            .passivated
            .fetch_add(dropped as u64, Ordering::Relaxed);
        // Scheduled topic collections, per workspace; one failing does not
        // stop the others (the next tick retries it).
        for id in inner.memory.served_workspaces()? {
            let ws = inner.memory.workspace(&id)?;
            if let Err(error) = inner.topics.scheduled(&ws) {
                tracing::warn!(workspace = %id, %error, "topic schedules failed; retried next tick");
            }
        }
        if nightly {
            self.nightly_maintenance();
        }
        Ok(reports)
    }

    /// The nightly maintenance, after the sweep's captures above have
    /// finished: every workspace, when `memory.maintenance.nightly` is on
    /// (see `cairn_memory::maintain`). It runs on the ticking thread (the
    /// ticker's, never an arbiter). A failure is logged and the next night
    /// tries again: nothing of a failed run is written.
    fn nightly_maintenance(&self) {
        let memory = &self.inner.memory;
        if !memory.config().maintenance.nightly {
            return;
        }
        let workspaces = match memory.served_workspaces() {
            Ok(list) => list,
            Err(error) => {
                tracing::warn!(%error, "nightly maintenance: cannot list workspaces");
                return;
            }
        };
        let options = MaintainOptions {
            dry_run: false,
            trigger: MaintainTrigger::Nightly,
        };
        for id in workspaces {
            match memory.workspace(&id).and_then(|ws| ws.maintain(&options)) {
                Ok(report) => tracing::info!(
                    workspace = %id, run = ?report.run, changes = report.changes.len(),
                    "nightly maintenance"
                ),
                Err(error) => {
                    tracing::warn!(workspace = %id, %error, "nightly maintenance failed")
                }
            }
        }
    }

    /// Numbers about the live runtime.
    pub fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            sessions: self.inner.sessions.lock().len(),
            contexts: self.inner.contexts.lock().len(),
            watchers: self.inner.watchers.lock().len(),
            restarts: self.inner.stats.restarts.load(Ordering::Relaxed),
            passivated: self.inner.stats.passivated.load(Ordering::Relaxed),
        }
    }

    /// Checks (with `repair`, fixes) the capture high-water marks of a
    /// workspace against the captured entries (see `cairn_memory::reconstruct`).
    pub fn reconstruct_marks(
        &self,
        workspace: &str,
        repair: bool,
    ) -> Result<cairn_memory::reconstruct::Findings> {
        let ws = self.inner.memory.existing_workspace(workspace)?;
        crate::capture::reconstruct_marks(&ws, &self.inner.locks, repair)
    }

    /// Past captures of a work context (from its durable record, oldest first).
    pub fn captures(
        &self,
        workspace: &str,
        work_context: &str,
    ) -> Result<Vec<crate::capture::CaptureSummary>> {
        let ws = self.inner.memory.existing_workspace(workspace)?;
        Ok(crate::capture::load_record(&ws, work_context)?.captures)
    }

    /// Test hook: arms a fault.
    #[doc(hidden)]
    pub fn inject(&self, fault: Fault) {
        self.inner.faults.arm(fault);
    }

    /// Bench hook: `n` in-memory messages from a session actor to a
    /// work-context actor; returns how many arrived.
    #[doc(hidden)]
    pub fn hop(&self, workspace: &str, session: &str, work_context: &str, n: u64) -> Result<u64> {
        let ws = self.inner.memory.workspace(workspace)?;
        let addr = self.inner.session_addr(&ws, session);
        let (tx, rx) = mpsc::sync_channel(1);
        let msg = HopBurst {
            work_context: work_context.to_owned(),
            n,
            reply: tx,
        };
        self.inner.call("hop", &addr, msg, rx)
    }

    /// Bench hook: starts (without any message) the actors of `sessions`.
    #[doc(hidden)]
    pub fn warm_sessions(&self, workspace: &str, sessions: &[String]) -> Result<()> {
        let ws = self.inner.memory.workspace(workspace)?;
        for session in sessions {
            self.inner.session_addr(&ws, session);
        }
        Ok(())
    }
}

fn remove_if_same<A: Actor>(map: &Mutex<HashMap<Key, Slot<A>>>, key: &Key, addr: &Arc<Addr<A>>) {
    let mut map = map.lock();
    if map.get(key).is_some_and(|s| Arc::ptr_eq(&s.addr, addr)) {
        map.remove(key);
    }
}

/// True when a daily `hh:mm` UTC instant lies in `(prev, now]`.
fn crossed_daily(prev: DateTime<Utc>, now: DateTime<Utc>, hour: u32, minute: u32) -> bool {
    if now <= prev {
        return false;
    }
    let mut day = prev.date_naive();
    while day <= now.date_naive() {
        if let Some(at) = day.and_hms_opt(hour, minute, 0) {
            let at = at.and_utc();
            if at > prev && at <= now {
                return true;
            }
        }
        match day.succ_opt() {
            Some(next) => day = next,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn check(prev: (u32, u32, u32), now: (u32, u32, u32), expected: bool) {
        let at = |(d, h, m): (u32, u32, u32)| {
            Utc.with_ymd_and_hms(2026, 3, d, h, m, 0)
                .single()
                .unwrap_or_default()
        };
        assert_eq!(
            crossed_daily(at(prev), at(now), 3, 0),
            expected,
            "{prev:?} -> {now:?}"
        );
    }

    #[test]
    fn nightly_fires_once_when_the_time_is_passed() {
        check((1, 23, 55), (2, 3, 5), true);
        check((2, 2, 59), (2, 3, 0), true);
        check((2, 3, 0), (2, 3, 1), false);
        check((2, 3, 5), (2, 23, 0), false);
        check((1, 4, 0), (3, 2, 0), true);
        check((2, 4, 0), (2, 3, 0), false);
    }
}
