//! The driver: a pool of threads plays the simulated sessions against a
//! [`Target`], side threads tick triggers and swap the policy, and at the
//! end every acknowledged turn is read back.
//!
//! # Scheduling
//!
//! Each session slot is in a min-heap keyed by the instant its next turn is
//! due. A worker pops the earliest due slot, sleeps until it is due, plays
//! one turn (an `assemble` first for an assistant turn; `bootstrap` first
//! for a new session; `session_end` and a successor after the last turn)
//! and pushes the slot back with its next due time. A slot is in the heap
//! at most once, so one session's turns are never sent concurrently and
//! arrive in order. Due times advance from the previous due time, not from
//! when the call finished (open loop): when the runtime falls behind, the
//! offered load does not drop, turns queue up and `lag` grows.
//!
//! Why a `std::sync::Mutex` + `Condvar` around the heap: the workers are
//! plain threads blocked in synchronous calls; the lock is held only to
//! push or pop one slot. One idle worker at a time (the *leader*) sleeps
//! until the earliest slot is due; the others sleep until woken (or for
//! [`IDLE_WAIT`]). When every idle worker slept until the earliest due
//! time, all of them woke for each turn and all but one went back to
//! sleep: 37 context switches per turn at 2,000 turns/s offered, in the
//! process whose CPU the in-process run reports.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use cairn::topics::{TopicSpec, Trigger};
use cairn::{Role, SessionSpec, TurnInput, WorldKind};
use hdrhistogram::Histogram;

use super::ledger::{Ledger, Spill};
use super::report::{Latencies, Report};
use super::scenario::Scenario;
use super::target::{ContentHash, StoredTurn, SwapOutcome, Target, content_hash};
use super::workload::{SessionSim, topics};
use super::{LoadgenError, Progress};

/// Attempts per turn on retryable errors (backpressure, 503, transport).
const ATTEMPTS: u32 = 6;

/// The longest an idle worker sleeps before it looks at the schedule again
/// (a stop wakes every worker at once).
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// The slots by the instant their next turn is due, and which idle worker,
/// if any, sleeps until the earliest of them (the leader).
struct Schedule {
    due: BinaryHeap<Reverse<(Instant, usize)>>,
    leader: Option<ThreadId>,
}

struct Slot {
    sim: SessionSim,
    ledger: Vec<(u64, ContentHash)>,
}

#[derive(Default)]
struct Counters {
    acked: AtomicU64,
    reserved: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    assembles: AtomicU64,
    assemble_errors: AtomicU64,
    sessions_started: AtomicU64,
    sessions_ended: AtomicU64,
    call_errors: AtomicU64,
}

struct Shared {
    target: Arc<dyn Target>,
    scenario: Scenario,
    topics: Vec<String>,
    schedule: Mutex<Schedule>,
    wake: Condvar,
    slots: Vec<Mutex<Slot>>,
    /// Ended sessions' ledgers (live ones are in their slots).
    ledgers: Mutex<Spill>,
    stop: AtomicBool,
    counters: Counters,
    first_error: Mutex<Option<String>>,
    /// The run's latencies. One set for all workers: a set per worker cost
    /// 0.5 MB each (32 MB for 64 workers, counted in the RSS the loadgen
    /// reports), and a record is a few nanoseconds under the lock, beside
    /// the scheduler's lock every turn takes anyway.
    hists: Mutex<Hists>,
    deadline: Instant,
    /// This run's tag in idempotency keys: a second run on the same
    /// server replays no key of the first (session ids repeat).
    run: String,
}

/// The run's latency histograms.
struct Hists {
    ack: Histogram<u64>,
    /// Acknowledgements since the current window began (read and reset at
    /// each window's end).
    window_ack: Histogram<u64>,
    assemble: Histogram<u64>,
    lag: Histogram<u64>,
}

impl Hists {
    fn new() -> Result<Hists, LoadgenError> {
        // Microseconds, 1 µs .. 10 min, 3 significant digits.
        let hist = || {
            Histogram::new_with_bounds(1, 600_000_000, 3)
                .map_err(|e| LoadgenError::Setup(format!("histogram: {e}")))
        };
        Ok(Hists {
            ack: hist()?,
            window_ack: hist()?,
            assemble: hist()?,
            lag: hist()?,
        })
    }
}

/// Records a duration (µs), clamped into the histogram's range.
fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(micros(d).max(1));
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking worker is a bug we report through the join; the data a
    // mutex holds here (a heap, a ledger) stays consistent between calls.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn note_error(&self, message: &str) {
        self.counters.call_errors.fetch_add(1, Ordering::Relaxed);
        let mut first = lock(&self.first_error);
        if first.is_none() {
            *first = Some(message.to_owned());
        }
    }

    fn stopping(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return true;
        }
        if Instant::now() >= self.deadline {
            self.stop.store(true, Ordering::Relaxed);
            self.wake.notify_all();
            return true;
        }
        false
    }

    /// Pops the next due slot, waiting for it; `None` once stopping.
    fn next(&self) -> Option<(Instant, usize)> {
        let mut schedule = lock(&self.schedule);
        loop {
            if self.stopping() {
                return None;
            }
            let now = Instant::now();
            let wait = match schedule.due.peek() {
                Some(Reverse((due, _))) if *due <= now => {
                    let item = schedule.due.pop().map(|Reverse(item)| item);
                    // Hand the wait for the next slot to another worker.
                    if schedule.leader.is_none() && !schedule.due.is_empty() {
                        self.wake.notify_one();
                    }
                    return item;
                }
                Some(Reverse((due, _))) if schedule.leader.is_none() => {
                    Some((*due - now).min(IDLE_WAIT))
                }
                _ => None,
            };
            match wait {
                Some(wait) => {
                    let me = std::thread::current().id();
                    schedule.leader = Some(me);
                    schedule = self
                        .wake
                        .wait_timeout(schedule, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                    // Unless a push made way for another leader meanwhile.
                    if schedule.leader == Some(me) {
                        schedule.leader = None;
                    }
                }
                None => {
                    schedule = self
                        .wake
                        .wait_timeout(schedule, IDLE_WAIT)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }

    fn push(&self, due: Instant, slot: usize) {
        let mut schedule = lock(&self.schedule);
        let earliest = schedule
            .due
            .peek()
            .is_none_or(|Reverse((first, _))| due < *first);
        schedule.due.push(Reverse((due, slot)));
        if earliest {
            // The leader sleeps until a later instant: whoever wakes leads.
            schedule.leader = None;
            drop(schedule);
            self.wake.notify_one();
        }
    }

    /// Plays one turn of `slot`; returns when its next turn is due, or
    /// `None` when the run's turn budget is used up.
    fn play(&self, due: Instant, index: usize) -> Option<Instant> {
        let s = &self.scenario;
        let mut slot = lock(&self.slots[index]);
        if s.max_turns > 0 && self.counters.reserved.fetch_add(1, Ordering::Relaxed) >= s.max_turns
        {
            self.stop.store(true, Ordering::Relaxed);
            self.wake.notify_all();
            return None;
        }
        record(
            &mut lock(&self.hists).lag,
            Instant::now().saturating_duration_since(due),
        );
        if !slot.sim.bootstrapped {
            let spec = SessionSpec {
                id: slot.sim.id.clone(),
                work_context: Some(slot.sim.work_context.clone()),
                ..SessionSpec::default()
            };
            match self.target.bootstrap(&slot.sim.workspace, &spec) {
                Ok(()) => {
                    slot.sim.bootstrapped = true;
                    self.counters
                        .sessions_started
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.note_error(&format!("bootstrap {}: {}", slot.sim.id, e.message));
                    return Some(Instant::now() + Duration::from_millis(10));
                }
            }
        }
        let turn = slot.sim.next_turn(s, &self.topics);
        let ws = slot.sim.workspace.clone();
        if turn.role == Role::Assistant {
            let started = Instant::now();
            match self
                .target
                .assemble(&ws, &slot.sim.id, s.assemble_budget_tokens)
            {
                Ok(()) => {
                    record(&mut lock(&self.hists).assemble, started.elapsed());
                    self.counters.assembles.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.counters
                        .assemble_errors
                        .fetch_add(1, Ordering::Relaxed);
                    self.note_error(&format!("assemble {}: {}", slot.sim.id, e.message));
                }
            }
        }
        let hash = content_hash(&blake3::hash(turn.content.as_bytes()));
        let input = TurnInput {
            session: slot.sim.id.clone(),
            work_context: Some(slot.sim.work_context.clone()),
            role: turn.role,
            content: turn.content,
            tool_call_id: turn.tool_call_id,
            idempotency_key: Some(format!("{}:{}:{}", self.run, slot.sim.id, slot.sim.issued)),
            timestamp: None,
        };
        slot.sim.issued += 1;
        let started = Instant::now();
        let retry_until = started + Duration::from_secs_f64(s.retry_secs);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.target.ingest(&ws, &input) {
                Ok(seq) => {
                    let took = started.elapsed();
                    let mut hists = lock(&self.hists);
                    record(&mut hists.ack, took);
                    record(&mut hists.window_ack, took);
                    drop(hists);
                    slot.ledger.push((seq, hash));
                    self.counters.acked.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                // The same idempotency key every time: a turn the server
                // stored before its answer was lost is acknowledged once.
                Err(e) if e.retryable && (attempt < ATTEMPTS || Instant::now() < retry_until) => {
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1 << attempt.min(8)));
                }
                Err(e) => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    self.note_error(&format!("ingest {}: {}", input.session, e.message));
                    break;
                }
            }
        }
        if slot.sim.should_end() {
            if let Err(e) = self.target.session_end(&ws, &slot.sim.id) {
                self.note_error(&format!("session_end {}: {}", slot.sim.id, e.message));
            }
            self.counters.sessions_ended.fetch_add(1, Ordering::Relaxed);
            let next = slot.sim.successor(s);
            let old = std::mem::replace(&mut slot.sim, next);
            lock(&self.ledgers).push(&Ledger {
                workspace: old.workspace,
                session: old.id,
                acked: std::mem::take(&mut slot.ledger),
            });
        }
        let gap = slot.sim.gap(s);
        Some(if s.rate > 0.0 {
            due + gap
        } else {
            Instant::now() + gap
        })
    }
}

/// The length of the windows throughput is reported over: a tenth of the
/// run, at least 5 s and at most a minute.
fn window_for(duration_secs: f64) -> Duration {
    Duration::from_secs_f64((duration_secs / 10.0).clamp(5.0, 60.0))
}

/// Runs a scenario against a target and does the loss accounting.
pub(crate) fn run(
    target: Arc<dyn Target>,
    scenario: &Scenario,
    mode: &str,
    progress: &Progress,
) -> Result<Report, LoadgenError> {
    let s = scenario.clone();
    let topic_names = topics(s.topics);
    let mut notes = Vec::new();
    let workspaces: Vec<String> = (0..s.workspaces).map(|w| format!("lg-ws-{w}")).collect();
    for (w, ws) in workspaces.iter().enumerate() {
        target.add_topics(ws, &topic_names)?;
        let specs = watched_topics(&s, w, &topic_names);
        if !specs.is_empty() {
            target.define_topics(ws, &specs)?;
        }
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(s.duration_secs);
    let mut heap = BinaryHeap::with_capacity(s.sessions);
    let mut slots = Vec::with_capacity(s.sessions);
    for i in 0..s.sessions {
        let mut sim = SessionSim::new(&s, i, 0);
        // Spread the first turns over one mean gap so sessions do not all
        // start in the same instant.
        let first = sim.gap(&s);
        heap.push(Reverse((start + first, i)));
        slots.push(Mutex::new(Slot {
            sim,
            ledger: Vec::new(),
        }));
    }
    let run = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    );
    let shared = Arc::new(Shared {
        run,
        target: target.clone(),
        scenario: s.clone(),
        topics: topic_names,
        schedule: Mutex::new(Schedule {
            due: heap,
            leader: None,
        }),
        wake: Condvar::new(),
        slots,
        ledgers: Mutex::new(Spill::new()?),
        stop: AtomicBool::new(false),
        counters: Counters::default(),
        first_error: Mutex::new(None),
        hists: Mutex::new(Hists::new()?),
        deadline,
    });

    let workers: Vec<_> = (0..s.concurrency.min(s.sessions))
        .map(|_| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                while let Some((due, slot)) = shared.next() {
                    match shared.play(due, slot) {
                        Some(next) => shared.push(next, slot),
                        None => break,
                    }
                }
            })
        })
        .collect();

    // Side threads: triggers once a second, swaps every S seconds.
    let captures = Arc::new(AtomicU64::new(0));
    let ticks_supported = target.tick().is_some();
    let ticker = ticks_supported.then(|| {
        let (shared, captures) = (shared.clone(), captures.clone());
        std::thread::spawn(move || {
            while !sleep_unless_stopped(&shared, Duration::from_secs(1)) {
                captures.fetch_add(shared.target.tick().unwrap_or(0), Ordering::Relaxed);
            }
        })
    });
    let swaps = Arc::new(AtomicU64::new(0));
    let swap_failures = Arc::new(AtomicU64::new(0));
    let swap_note = Arc::new(Mutex::new(None::<String>));
    let swapper = (s.swap_every_secs > 0.0).then(|| {
        let (shared, swaps, failures, note) = (
            shared.clone(),
            swaps.clone(),
            swap_failures.clone(),
            swap_note.clone(),
        );
        let every = Duration::from_secs_f64(s.swap_every_secs);
        std::thread::spawn(move || {
            while !sleep_unless_stopped(&shared, every) {
                let worlds: &[WorldKind] = if shared.scenario.swap_topic_plugin {
                    &[WorldKind::SignificanceGate, WorldKind::TopicDirective]
                } else {
                    &[WorldKind::SignificanceGate]
                };
                let mut outcome = SwapOutcome::Swapped;
                for world in worlds {
                    outcome = shared.target.swap(*world);
                    if outcome != SwapOutcome::Swapped {
                        break;
                    }
                }
                match outcome {
                    SwapOutcome::Swapped => {
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                    SwapOutcome::Unsupported(why) => {
                        if !why.is_empty() {
                            *lock(&note) = Some(why);
                        }
                        break;
                    }
                    SwapOutcome::Failed(why) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        let mut note = lock(&note);
                        if note.is_none() {
                            *note = Some(format!("swap failed: {why}"));
                        }
                    }
                }
            }
        })
    });

    // Turns acknowledged, and the ack p99, per window of the run: to see
    // whether throughput and latency hold as the memory log grows.
    let window = window_for(s.duration_secs);
    let mut windows: Vec<u64> = Vec::new();
    let mut window_p99: Vec<f64> = Vec::new();
    let mut counted = 0;
    while !sleep_unless_stopped(&shared, Duration::from_millis(200)) {
        let acked = shared.counters.acked.load(Ordering::Relaxed);
        progress.update(acked, start.elapsed());
        if start.elapsed() >= window.mul_f64((windows.len() + 1) as f64) {
            windows.push(acked - counted);
            counted = acked;
            let mut hists = lock(&shared.hists);
            window_p99.push(Latencies::ms(&hists.window_ack, 99.0));
            hists.window_ack.reset();
        }
    }
    for worker in workers {
        worker
            .join()
            .map_err(|_| LoadgenError::Setup("a loadgen worker panicked".to_owned()))?;
    }
    // Every worker has stopped: the histograms are read in place.
    let hists = lock(&shared.hists);
    let elapsed = start.elapsed();
    for side in [ticker, swapper].into_iter().flatten() {
        side.join()
            .map_err(|_| LoadgenError::Setup("a loadgen side thread panicked".to_owned()))?;
    }
    progress.finish(shared.counters.acked.load(Ordering::Relaxed), elapsed);

    // Loss accounting: every session this run played, ended or live.
    let mut tally = Tally::default();
    let mut check = |ledger: &Ledger| -> Result<(), LoadgenError> {
        // The read-back is a read like any other: the memory policy judges
        // each turn, and a policy call that faults withholds it (fail-safe).
        // A turn missing from one read is read again before it counts as
        // lost; one the store really lost stays missing.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let stored = target.read_back(&ledger.workspace, &ledger.session)?;
            let mut this = Tally::default();
            this.account(&ledger.session, &ledger.acked, &stored);
            if this.lost == 0 || attempts == READ_BACK_ATTEMPTS {
                tally.add(this);
                return Ok(());
            }
        }
    };
    for ledger in lock(&shared.ledgers).read_back()? {
        check(&ledger?)?;
    }
    for slot in &shared.slots {
        let mut slot = lock(slot);
        if slot.sim.bootstrapped || !slot.ledger.is_empty() {
            check(&Ledger {
                workspace: slot.sim.workspace.clone(),
                session: slot.sim.id.clone(),
                acked: std::mem::take(&mut slot.ledger),
            })?;
        }
    }

    let c = &shared.counters;
    let acked = c.acked.load(Ordering::Relaxed);
    notes.extend(tally.first_loss.take());
    if let Some(e) = lock(&shared.first_error).take() {
        notes.push(format!(
            "{} call errors; the first: {e}",
            c.call_errors.load(Ordering::Relaxed)
        ));
    }
    if let Some(n) = lock(&swap_note).take() {
        notes.push(n);
    }
    let decisions = target.decisions();
    if decisions.is_none() {
        notes.push(
            "decisions not counted: the server does not report its decision counts \
             (GET /v1/plugins/generations/{generation})"
                .to_owned(),
        );
    }
    if !ticks_supported {
        notes.push(
            "over HTTP the server runs its own trigger ticker on its own clock; captures are \
             not counted"
                .to_owned(),
        );
    }
    let topic_tally = (s.watched_topics > 0)
        .then(|| target.topic_tally(&workspaces))
        .flatten();
    if s.watched_topics > 0 && topic_tally.is_none() {
        notes.push(
            "the target does not report topic decisions (over HTTP: read each topic's log)"
                .to_owned(),
        );
    }
    let (rss_mb, peak_rss_mb) = super::report::rss_mb();
    Ok(Report {
        mode: mode.to_owned(),
        scenario: s.name.clone(),
        seed: s.seed,
        sessions: s.sessions,
        work_contexts: s.work_contexts,
        workspaces: s.workspaces,
        topics: s.topics,
        concurrency: s.concurrency.min(s.sessions),
        offered_tps: s.rate,
        elapsed_secs: elapsed.as_secs_f64(),
        turns_acked: acked,
        turns_checked: tally.checked,
        turns_lost: tally.lost,
        turns_duplicated: tally.duplicated,
        turns_failed: c.failed.load(Ordering::Relaxed),
        stored_unacked: tally.stored_unacked,
        seq_gaps: tally.seq_gaps,
        retries: c.retries.load(Ordering::Relaxed),
        failovers: 0,
        throughput_tps: acked as f64 / elapsed.as_secs_f64().max(1e-9),
        window_secs: window.as_secs_f64(),
        window_tps: windows
            .iter()
            .map(|n| *n as f64 / window.as_secs_f64())
            .collect(),
        window_ack_p99_ms: window_p99,
        ack_p50_ms: Latencies::ms(&hists.ack, 50.0),
        ack_p99_ms: Latencies::ms(&hists.ack, 99.0),
        ack_max_ms: hists.ack.max() as f64 / 1000.0,
        assembles: c.assembles.load(Ordering::Relaxed),
        assemble_errors: c.assemble_errors.load(Ordering::Relaxed),
        assemble_p50_ms: Latencies::ms(&hists.assemble, 50.0),
        assemble_p99_ms: Latencies::ms(&hists.assemble, 99.0),
        lag_p99_ms: Latencies::ms(&hists.lag, 99.0),
        sessions_started: c.sessions_started.load(Ordering::Relaxed),
        sessions_ended: c.sessions_ended.load(Ordering::Relaxed),
        captures: ticks_supported.then(|| captures.load(Ordering::Relaxed)),
        decisions: decisions.map(|d| d.0),
        decision_faults: decisions.map(|d| d.1),
        swaps: swaps.load(Ordering::Relaxed),
        swap_failures: swap_failures.load(Ordering::Relaxed),
        watched_topics: s.watched_topics,
        topic_decisions: topic_tally.map(|t| t.decisions),
        topic_collected: topic_tally.map(|t| t.collected),
        topic_proposals: topic_tally.map(|t| t.proposals),
        topic_faults: topic_tally.map(|t| t.faults),
        rss_mb,
        peak_rss_mb,
        server_rss_mb: None,
        embedding_model_loaded: false,
        data_dir: None,
        notes,
    })
}

/// Workspace `w`'s share of the scenario's topic watchers: each watches one
/// of the run's subjects (so generated turns reach it), with priorities,
/// activations and scopes in rotation so every route of the gate runs.
fn watched_topics(s: &Scenario, w: usize, subjects: &[String]) -> Vec<TopicSpec> {
    use cairn::topics::{Activation, Priority, Scope};
    if s.watched_topics == 0 || subjects.is_empty() {
        return Vec::new();
    }
    let per = s.watched_topics / s.workspaces + usize::from(w < s.watched_topics % s.workspaces);
    (0..per)
        .map(|i| {
            let subject = &subjects[i % subjects.len()];
            let priority = [
                Priority::Critical,
                Priority::High,
                Priority::Medium,
                Priority::Low,
            ][i % 4];
            TopicSpec::new(
                &format!("watch-{i}"),
                &format!("Work on {subject}: decisions, problems and plans about {subject}"),
            )
            .trigger(Trigger::Subject(subject.clone()))
            .activation(if i % 10 == 9 {
                Activation::Gated
            } else {
                Activation::Auto
            })
            .priority(priority)
            .scope(if i % 3 == 2 {
                Scope::Both
            } else {
                Scope::Input
            })
        })
        .collect()
}

/// The loss accounting of one run.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    checked: u64,
    /// Acknowledged turns not found at their seq with their content.
    lost: u64,
    /// Extra stored copies of acknowledged turns.
    duplicated: u64,
    /// Stored turns matching no acknowledged turn.
    stored_unacked: u64,
    /// Stored turns not at their place in the session's 0, 1, 2… order.
    seq_gaps: u64,
    /// What went wrong with the first lost turn, to start looking from.
    first_loss: Option<String>,
}

/// Reads of one session before a missing turn counts as lost.
const READ_BACK_ATTEMPTS: u32 = 3;

impl Tally {
    /// Adds another tally's counts (the first loss kept, if any).
    fn add(&mut self, other: Tally) {
        self.checked += other.checked;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.stored_unacked += other.stored_unacked;
        self.seq_gaps += other.seq_gaps;
        if self.first_loss.is_none() {
            self.first_loss = other.first_loss;
        }
    }

    /// Compares one session's acknowledged turns with what storage holds.
    fn account(&mut self, session: &str, acked: &[(u64, ContentHash)], stored: &[StoredTurn]) {
        // A session's seqs are 0, 1, 2…: any other seq at a position is a gap.
        self.seq_gaps += stored
            .iter()
            .enumerate()
            .filter(|(i, t)| t.seq != *i as u64)
            .count() as u64;
        let by_seq: HashMap<u64, Option<&ContentHash>> =
            stored.iter().map(|t| (t.seq, t.hash.as_ref())).collect();
        let mut copies: HashMap<&ContentHash, u64> = HashMap::new();
        for hash in stored.iter().filter_map(|t| t.hash.as_ref()) {
            *copies.entry(hash).or_default() += 1;
        }
        for (seq, hash) in acked {
            self.checked += 1;
            let found = by_seq.get(seq);
            if found != Some(&Some(hash)) {
                self.lost += 1;
                self.first_loss.get_or_insert_with(|| {
                    let why = match found {
                        None => "nothing stored at that seq",
                        Some(None) => "the stored content disagrees with its stored hash",
                        Some(Some(_)) => "other content stored at that seq",
                    };
                    format!("the first lost turn: session {session} seq {seq}: {why}")
                });
            }
            self.duplicated += copies.get(hash).copied().unwrap_or(0).saturating_sub(1);
        }
        let acked: HashSet<&ContentHash> = acked.iter().map(|(_, h)| h).collect();
        self.stored_unacked += stored
            .iter()
            .filter(|t| t.hash.as_ref().is_none_or(|h| !acked.contains(h)))
            .count() as u64;
    }
}

/// Sleeps up to `d`, waking early when the run stops; true once stopped.
fn sleep_unless_stopped(shared: &Shared, d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        if shared.stopping() {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash of a test content; "corrupt:…" stands for a stored turn
    /// whose hash disagrees with its content.
    fn hash(content: &str) -> Option<ContentHash> {
        (!content.starts_with("corrupt:")).then(|| content_hash(&blake3::hash(content.as_bytes())))
    }

    fn stored(turns: &[(u64, &str)]) -> Vec<StoredTurn> {
        turns
            .iter()
            .map(|(seq, content)| StoredTurn {
                seq: *seq,
                hash: hash(content),
            })
            .collect()
    }

    fn check(acked: &[(u64, &str)], storage: &[(u64, &str)], expect: (u64, u64, u64)) {
        let acked: Vec<(u64, ContentHash)> = acked
            .iter()
            .filter_map(|(s, content)| Some((*s, hash(content)?)))
            .collect();
        let mut tally = Tally::default();
        tally.account("s", &acked, &stored(storage));
        assert_eq!(
            (tally.lost, tally.duplicated, tally.stored_unacked),
            expect,
            "acked {acked:?} stored {storage:?}"
        );
        assert_eq!(tally.checked, acked.len() as u64);
    }

    #[test]
    fn accounting_counts_missing_moved_duplicated_and_unacked_turns() {
        // All there.
        check(&[(0, "a"), (1, "b")], &[(0, "a"), (1, "b")], (0, 0, 0));
        // Missing.
        check(&[(0, "a"), (1, "b")], &[(0, "a")], (1, 0, 0));
        // Other content at the acknowledged seq (and the turn nowhere).
        check(&[(0, "a"), (1, "b")], &[(0, "a"), (1, "x")], (1, 0, 1));
        // Stored twice: once where acknowledged, once more.
        check(
            &[(0, "a"), (1, "b")],
            &[(0, "a"), (1, "b"), (2, "b")],
            (0, 1, 0),
        );
        // A failed call whose write landed anyway: not a loss.
        check(&[(0, "a")], &[(0, "a"), (1, "c")], (0, 0, 1));
        // A hole in the stored seqs is a gap (and the turn after it moved).
        let mut tally = Tally::default();
        tally.account("s", &[], &stored(&[(0, "a"), (2, "b")]));
        assert_eq!(tally.seq_gaps, 1);
        // A corrupted turn (hash mismatch marked by read_back) is lost.
        check(&[(0, "a")], &[(0, "corrupt:a")], (1, 0, 1));
    }
}
