//! [`PolicySlot`]: where decisions are made. A slot serves one world from
//! one plugin generation at a time, contains every fault, trips a circuit
//! breaker on a plugin that keeps faulting, and swaps generations
//! atomically.
//!
//! # The call path
//!
//! 1. Load the current generation (an `Arc`, through `arc-swap`: no lock).
//!    The call finishes on this generation even if a swap happens meanwhile.
//! 2. If its breaker is open, return the world's fail-safe without calling
//!    the plugin.
//! 3. Take a warm instance from the generation's idle pool, or instantiate
//!    one from the pre-instantiated component. Each instance owns its store.
//! 4. Refill the store's fuel, set its epoch deadline (the call's
//!    wall-clock limit, see `ticker.rs`), re-arm its memory limiter, call
//!    the export.
//! 5. Check the output: size cap first, then the world's rules.
//! 6. Success: the instance goes back to the pool (unless it has served
//!    `max_calls_per_instance` calls).
//!    Fault: the store is dropped, never reused; the fault is counted
//!    against the breaker; the fail-safe is returned.
//! 7. Hand the record to the decision sink, then return the decision.
//!
//! Why a pool of warm instances rather than a fresh instance per call: a
//! call into a live instance costs about a microsecond, a fresh store and
//! instance tens of microseconds (`shared/FACTS.md`). State a plugin keeps
//! between calls is bounded by `max_calls_per_instance` and by the memory
//! limit, and is thrown away on any fault.
//!
//! Why `parking_lot::Mutex` around the idle pool: it is held only to push or
//! pop one instance, never across a plugin call, so it is never contended
//! for long; an async mutex would only add cost to a synchronous path.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use wasmtime::Store;

use crate::decisions::{DecisionId, DecisionRecord, Outcome, PolicyGenerationId};
use crate::error::{PolicyError, Result};
use crate::fault::{Fault, FaultKind};
use crate::host::{HostInner, Limits, PreparedPlugin};
use crate::store::StoreState;
use crate::vocab::ReasonCode;
use crate::world::{World, WorldKind};

/// A decision together with what the host stamps on it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Decided<D> {
    /// The plugin's checked answer, or the world's fail-safe.
    pub decision: D,
    /// The decision's id in the decision log.
    pub decision_id: DecisionId,
    /// The generation that decided (or whose fail-safe applied).
    pub generation: PolicyGenerationId,
    /// How the decision was made.
    pub outcome: Outcome,
    /// How long it took (plugin call and checks).
    pub duration: Duration,
}

/// A snapshot of a slot's current generation, for `cairn plugins list` and
/// health checks.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SlotStatus {
    /// The world served.
    pub world: WorldKind,
    /// The plugin's name.
    pub plugin: String,
    /// The current generation.
    pub generation: PolicyGenerationId,
    /// Whether the breaker is open (the plugin is tripped out).
    pub breaker_open: bool,
    /// How many times the breaker tripped in this generation.
    pub breaker_trips: u64,
    /// Faults since the last success.
    pub consecutive_faults: u32,
    /// The most recent fault, if any.
    pub last_fault: Option<Fault>,
    /// Plugin calls made in this generation.
    pub calls: u64,
    /// Of those, how many faulted.
    pub faults: u64,
    /// Decisions answered with the fail-safe because the breaker was open.
    pub short_circuited: u64,
    /// Instances created.
    pub instances_created: u64,
    /// Instances dropped after a fault.
    pub instances_discarded: u64,
    /// Instances idle in the pool now.
    pub idle_instances: usize,
    /// The limits calls run under.
    pub limits: Limits,
    /// Why the slot is held closed (every decision is the fail-safe until a
    /// new plugin is swapped in), when it is.
    pub held: Option<String>,
}

/// Serves one world's decisions from a plugin, with hot swap. Cheap to
/// clone (clones share the slot); `Send + Sync`.
///
/// ```
/// use std::sync::Arc;
/// use cairn_policies::*;
///
/// # fn main() -> Result<(), PolicyError> {
/// let host = PolicyHost::new(HostConfig::default(), Arc::new(MemorySink::default()))?;
/// let gate = host.slot(&host.prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)?)?;
///
/// let input = SignificanceInput {
///     turn: TurnView::new("s-1", 1, TurnRole::User, "We decided to go with sled for storage."),
///     context: GateContext::default(),
/// };
/// let decided = gate.decide(&input)?;
/// assert!(decided.outcome.is_plugin());
/// assert!(decided.decision.captures());
///
/// // Swap in a new version: calls in flight finish on the old generation.
/// let next = host.prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)?;
/// let generation = gate.swap(&next)?;
/// assert_eq!(gate.decide(&input)?.generation, generation);
/// # Ok(())
/// # }
/// ```
pub struct PolicySlot<W: World> {
    inner: Arc<SlotInner<W>>,
}

impl<W: World> Clone for PolicySlot<W> {
    fn clone(&self) -> Self {
        PolicySlot {
            inner: self.inner.clone(),
        }
    }
}

impl<W: World> std::fmt::Debug for PolicySlot<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySlot")
            .field("world", &W::KIND)
            .field("generation", &self.generation())
            .finish()
    }
}

struct SlotInner<W: World> {
    host: Arc<HostInner>,
    current: ArcSwap<Generation<W>>,
    /// Replaced generations that calls in flight may still hold. They are
    /// dropped by a later swap once nothing else holds them, so a decision
    /// thread never pays for tearing down a generation's instances.
    retired: Mutex<Vec<Arc<Generation<W>>>>,
    /// Set by [`PolicySlot::hold`]: every decision is the fail-safe. The
    /// flag is what a decision reads; the reason is for status.
    held: Mutex<Option<String>>,
    is_held: AtomicBool,
}

impl<W: World> PolicySlot<W> {
    pub(crate) fn new(host: Arc<HostInner>, plugin: &PreparedPlugin<W>) -> Result<PolicySlot<W>> {
        let first = Generation::new(&host, plugin)?;
        Ok(PolicySlot {
            inner: Arc::new(SlotInner {
                host,
                current: ArcSwap::from_pointee(first),
                retired: Mutex::new(Vec::new()),
                held: Mutex::new(None),
                is_held: AtomicBool::new(false),
            }),
        })
    }

    /// Decides about `input` with the current generation.
    ///
    /// A plugin fault is not an error: the decision is then the world's
    /// fail-safe and [`Decided::outcome`] says what happened. The only error
    /// is a decision sink that cannot record
    /// ([`PolicyError::DecisionLog`]).
    pub fn decide(&self, input: &W::Input) -> Result<Decided<W::Decision>> {
        self.decide_in(None, input)
    }

    /// [`PolicySlot::decide`] about an object of `workspace`: its record
    /// names the workspace, so that a `forget` of a session scrubs the
    /// records of that workspace's session only.
    pub fn decide_in(
        &self,
        workspace: Option<&str>,
        input: &W::Input,
    ) -> Result<Decided<W::Decision>> {
        let started = Instant::now();
        let generation = self.inner.current.load_full();
        let (decision, outcome, fuel_consumed) = if self.inner.is_held.load(Ordering::Acquire) {
            (
                W::fail_safe(input, ReasonCode::CircuitOpen),
                Outcome::CircuitOpen,
                None,
            )
        } else {
            generation.decide(&self.inner.host, input)
        };
        let duration = started.elapsed();
        let decided = Decided {
            decision,
            decision_id: DecisionId::new(),
            generation: generation.id.clone(),
            outcome,
            duration,
        };
        let record = DecisionRecord {
            decision_id: decided.decision_id,
            world: W::KIND,
            plugin: generation.plugin.clone(),
            generation: decided.generation.clone(),
            inputs_digest: self.digest(input),
            output: W::output(&decided.decision),
            outcome: decided.outcome.clone(),
            duration,
            fuel_consumed,
            session: W::session_of(input).map(Arc::from),
            workspace: workspace.map(Arc::from),
        };
        self.inner
            .host
            .sink
            .record(&record)
            .map_err(|source| PolicyError::DecisionLog {
                decision_id: decided.decision_id,
                source,
            })?;
        Ok(decided)
    }

    /// Decides about every input, in order, with one plugin call when the
    /// plugin exports a batched call (the `memory-policy-batch` world, or
    /// `memory-policy-assembly`, which takes the asker once when every
    /// input has the same), and
    /// logs the decisions as **one** decision-log record
    /// ([`DecisionSink::record_batch`](crate::DecisionSink::record_batch)),
    /// each still with its own decision id.
    ///
    /// A plugin without a batched call is called once per input. A fault in
    /// a batched call fails the whole call: every input gets the fail-safe
    /// (a batch is judged all or nothing, never half by a faulting plugin).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn_policies::*;
    ///
    /// # fn main() -> Result<(), PolicyError> {
    /// let sink = Arc::new(MemorySink::default());
    /// let host = PolicyHost::new(HostConfig::default(), sink.clone())?;
    /// let slot = host.slot(&host.prepare::<MemoryPolicy>("memory-policy-default", defaults::MEMORY_POLICY.wasm)?)?;
    /// let object = |id: &str| ContentReference {
    ///     kind: ObjectKind::Turn, id: id.into(), work_context_id: None, session_id: None,
    ///     sensitivity: Sensitivity::Normal, low_trust: false,
    /// };
    /// let requests: Vec<PolicyRequest> = ["s:1", "s:2", "s:3"]
    ///     .iter()
    ///     .map(|id| PolicyRequest::new(object(id), Action::RenderInline, Some(Destination::LocalModel)))
    ///     .collect();
    /// let decided = slot.decide_many(&requests)?;
    /// assert_eq!(decided.len(), 3);
    /// assert!(decided.iter().all(|d| d.outcome.is_plugin()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn decide_many(&self, inputs: &[W::Input]) -> Result<Vec<Decided<W::Decision>>> {
        let (decided, records) = self.judge_many(inputs);
        self.log_batch(&records)?;
        Ok(decided)
    }

    /// [`PolicySlot::decide_many`] without the logging: the decisions and
    /// their records, which the caller must hand to
    /// [`PolicySlot::log_batch`] (possibly with the records of other calls,
    /// so that one operation leaves one record) before it uses them.
    pub fn judge_many(
        &self,
        inputs: &[W::Input],
    ) -> (Vec<Decided<W::Decision>>, Vec<DecisionRecord>) {
        self.judge_many_in(None, inputs)
    }

    /// [`PolicySlot::judge_many`] about objects of `workspace` (see
    /// [`PolicySlot::decide_in`]).
    pub fn judge_many_in(
        &self,
        workspace: Option<&str>,
        inputs: &[W::Input],
    ) -> (Vec<Decided<W::Decision>>, Vec<DecisionRecord>) {
        if inputs.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let started = Instant::now();
        let generation = self.inner.current.load_full();
        let judged: Vec<(W::Decision, Outcome)>;
        let mut fuel_consumed = None;
        if self.inner.is_held.load(Ordering::Acquire) {
            judged = inputs
                .iter()
                .map(|input| {
                    (
                        W::fail_safe(input, ReasonCode::CircuitOpen),
                        Outcome::CircuitOpen,
                    )
                })
                .collect();
        } else {
            let (answers, fuel) = generation.decide_many(&self.inner.host, inputs);
            judged = answers;
            fuel_consumed = fuel;
        }
        let elapsed = started.elapsed();
        // Each decision's share of the call.
        let share = elapsed / u32::try_from(inputs.len()).unwrap_or(u32::MAX);
        let mut decided = Vec::with_capacity(inputs.len());
        let mut records = Vec::with_capacity(inputs.len());
        let ids = DecisionId::run(inputs.len());
        let mut sessions = SharedNames::default();
        let workspace: Option<Arc<str>> = workspace.map(Arc::from);
        for ((input, (decision, outcome)), decision_id) in inputs.iter().zip(judged).zip(ids) {
            let d = Decided {
                decision,
                decision_id,
                generation: generation.id.clone(),
                outcome,
                duration: share,
            };
            records.push(DecisionRecord {
                decision_id: d.decision_id,
                world: W::KIND,
                plugin: generation.plugin.clone(),
                generation: d.generation.clone(),
                inputs_digest: self.digest(input),
                output: W::output(&d.decision),
                outcome: d.outcome.clone(),
                duration: share,
                // The call's fuel, on its first record only.
                fuel_consumed: if records.is_empty() {
                    fuel_consumed
                } else {
                    None
                },
                session: sessions.get(W::session_of(input)),
                workspace: workspace.clone(),
            });
            decided.push(d);
        }
        (decided, records)
    }

    /// The digest a record carries of `input`: keyed with the host's
    /// digest key when it has one ([`HostConfig::digest_key`](crate::HostConfig)).
    fn digest(&self, input: &W::Input) -> crate::digest::InputsDigest {
        let plain = W::digest(input);
        match &self.inner.host.config.digest_key {
            Some(key) => plain.keyed(key),
            None => plain,
        }
    }

    /// Hands `records` to the decision sink as one batch.
    pub fn log_batch(&self, records: &[DecisionRecord]) -> Result<()> {
        let Some(first) = records.first() else {
            return Ok(());
        };
        self.inner
            .host
            .sink
            .record_batch(records)
            .map_err(|source| PolicyError::DecisionLog {
                decision_id: first.decision_id,
                source,
            })
    }

    /// Makes `plugin` the slot's new generation and returns its id.
    ///
    /// The new generation is prepared first, on the calling thread: its
    /// instances are created and each makes one canary decision (a fixed,
    /// ordinary input), so a plugin that cannot start or faults at once is
    /// refused here and nothing changes. Then it replaces the current
    /// generation atomically: calls already running finish on the old
    /// generation and are stamped with its id; every later call uses the new
    /// one. No call fails because of a swap. The new generation starts with
    /// a closed breaker.
    pub fn swap(&self, plugin: &PreparedPlugin<W>) -> Result<PolicyGenerationId> {
        let next = Arc::new(Generation::new(&self.inner.host, plugin)?);
        let id = next.id.clone();
        let old = self.inner.current.swap(next);
        self.inner.is_held.store(false, Ordering::Release);
        if let Some(reason) = self.inner.held.lock().take() {
            tracing::info!(world = %W::KIND, %reason, "the slot is served again");
        }
        tracing::info!(world = %W::KIND, from = %old.id, to = %id, "policy generation swapped");
        old.retire();
        // Drop, here and outside the lock, the retired generations no call
        // holds any more.
        let unused: Vec<_> = {
            let mut retired = self.inner.retired.lock();
            retired.push(old);
            let (unused, held) = std::mem::take(&mut *retired)
                .into_iter()
                .partition(|g| Arc::strong_count(g) == 1);
            *retired = held;
            unused
        };
        drop(unused);
        Ok(id)
    }

    /// The current generation's id.
    pub fn generation(&self) -> PolicyGenerationId {
        self.inner.current.load().id.clone()
    }

    /// The current plugin's name.
    pub fn plugin(&self) -> String {
        self.inner.current.load().plugin.to_string()
    }

    /// Holds the slot closed: from now on every decision is the world's
    /// fail-safe (logged as `circuit_open`), without calling the plugin,
    /// until the next [`swap`](Self::swap). For a plugin the operator
    /// installed that cannot be served (fail closed, never open).
    pub fn hold(&self, reason: &str) {
        tracing::error!(world = %W::KIND, %reason, "policy slot held closed: every decision is the fail-safe");
        *self.inner.held.lock() = Some(reason.to_owned());
        self.inner.is_held.store(true, Ordering::Release);
    }

    /// Why the slot is held closed, when it is (see [`hold`](Self::hold)).
    pub fn held(&self) -> Option<String> {
        self.inner.held.lock().clone()
    }

    /// Closes the current generation's breaker: the plugin is called again.
    pub fn reset_breaker(&self) {
        let generation = self.inner.current.load();
        generation.breaker.reset();
        tracing::info!(world = %W::KIND, generation = %generation.id, "circuit breaker reset");
    }

    /// A snapshot of the current generation's state.
    pub fn status(&self) -> SlotStatus {
        let g = self.inner.current.load_full();
        SlotStatus {
            world: W::KIND,
            plugin: g.plugin.to_string(),
            generation: g.id.clone(),
            breaker_open: g.breaker.is_open(),
            breaker_trips: g.breaker.trips.load(Ordering::Relaxed),
            consecutive_faults: g.breaker.consecutive.load(Ordering::Relaxed),
            last_fault: g.breaker.last_fault.lock().clone(),
            calls: g.counters.calls.load(Ordering::Relaxed),
            faults: g.counters.faults.load(Ordering::Relaxed),
            short_circuited: g.counters.short_circuited.load(Ordering::Relaxed),
            instances_created: g.counters.instances_created.load(Ordering::Relaxed),
            instances_discarded: g.counters.instances_discarded.load(Ordering::Relaxed),
            idle_instances: g.idle.lock().len(),
            limits: g.limits,
            held: self.inner.held.lock().clone(),
        }
    }
}

/// One installed version of a plugin in a slot.
struct Generation<W: World> {
    id: PolicyGenerationId,
    plugin: Arc<str>,
    pre: W::Pre,
    limits: Limits,
    max_idle: usize,
    idle: Mutex<Vec<Warm<W>>>,
    breaker: Breaker,
    counters: Counters,
}

/// An instance with its own store, ready for a call.
struct Warm<W: World> {
    store: Store<StoreState>,
    instance: W::Instance,
    calls: u64,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    faults: AtomicU64,
    short_circuited: AtomicU64,
    instances_created: AtomicU64,
    instances_discarded: AtomicU64,
}

impl<W: World> Generation<W> {
    fn new(host: &HostInner, plugin: &PreparedPlugin<W>) -> Result<Generation<W>> {
        let generation = Generation {
            id: PolicyGenerationId::new(
                &plugin.name,
                &plugin.hash,
                plugin.generation.unwrap_or_else(|| host.next_generation()),
            ),
            plugin: plugin.name.clone(),
            pre: plugin.pre.clone(),
            limits: plugin.limits,
            max_idle: host.config.max_idle_instances,
            idle: Mutex::new(Vec::new()),
            breaker: Breaker::new(host.config.breaker_trip_after),
            counters: Counters::default(),
        };
        // At least one instance, so a plugin that cannot start is refused
        // before it serves. Each makes a canary decision: that refuses a
        // plugin that faults at once, and it touches the memory a call needs
        // (stack, heap), so the first real decisions do not pay page faults.
        let canary = W::canary();
        let mut warm = Vec::new();
        for _ in 0..host.config.prewarm_instances.max(1) {
            let mut instance =
                generation
                    .instantiate(host)
                    .map_err(|fault| PolicyError::Instantiate {
                        plugin: plugin.name.to_string(),
                        message: fault.to_string(),
                    })?;
            generation
                .call(host, &mut instance, &canary)
                .map_err(|fault| PolicyError::Canary {
                    plugin: plugin.name.to_string(),
                    fault,
                })?;
            instance.calls += 1;
            warm.push(instance);
        }
        warm.truncate(generation.max_idle.max(1));
        *generation.idle.lock() = warm;
        Ok(generation)
    }

    fn decide(&self, host: &HostInner, input: &W::Input) -> (W::Decision, Outcome, Option<u64>) {
        if self.breaker.is_open() {
            self.counters
                .short_circuited
                .fetch_add(1, Ordering::Relaxed);
            return (
                W::fail_safe(input, ReasonCode::CircuitOpen),
                Outcome::CircuitOpen,
                None,
            );
        }
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let pooled = self.idle.lock().pop();
        let mut warm = match pooled {
            Some(warm) => warm,
            None => match self.instantiate(host) {
                Ok(warm) => warm,
                Err(fault) => return self.faulted(input, fault, None),
            },
        };

        let (checked, used) = self.call_metered(host, &mut warm, input);
        match checked {
            Ok(decision) => {
                warm.calls += 1;
                self.check_in(warm);
                self.breaker.success();
                (decision, Outcome::Plugin, used)
            }
            Err(fault) => {
                // Never reuse a store after a fault: a trapped instance may
                // be left mid-update, and one that returned garbage once is
                // not trusted with the next call.
                self.discard(warm);
                self.faulted(input, fault, used)
            }
        }
    }

    /// Every input in one call when the plugin has a batched call; one call
    /// per input otherwise. Returns each decision with its outcome, and the
    /// fuel the batched call used.
    fn decide_many(
        &self,
        host: &HostInner,
        inputs: &[W::Input],
    ) -> (Vec<(W::Decision, Outcome)>, Option<u64>) {
        let one_by_one = |this: &Self| {
            let answers = inputs
                .iter()
                .map(|input| {
                    let (decision, outcome, _) = this.decide(host, input);
                    (decision, outcome)
                })
                .collect();
            (answers, None)
        };
        if self.breaker.is_open() {
            return one_by_one(self);
        }
        let pooled = self.idle.lock().pop();
        let mut warm = match pooled {
            Some(warm) => warm,
            None => match self.instantiate(host) {
                Ok(warm) => warm,
                Err(fault) => return self.all_faulted(inputs, fault, None),
            },
        };
        // The batch gets the fuel and the time of as many single calls.
        let n = u64::try_from(inputs.len()).unwrap_or(u64::MAX);
        let fuel = self.limits.fuel.saturating_mul(n);
        warm.store
            .set_epoch_deadline(host.deadline_ticks(self.limits.deadline, n));
        warm.store.data_mut().rearm();
        if let Err(err) = warm.store.set_fuel(fuel) {
            self.discard(warm);
            return self.all_faulted(inputs, Fault::new(FaultKind::Trap, err.to_string()), None);
        }
        let Some(result) = W::call_many(&warm.instance, &mut warm.store, inputs) else {
            // No batched call: back to the pool, then one call per input.
            self.check_in(warm);
            return one_by_one(self);
        };
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let used = fuel.saturating_sub(warm.store.get_fuel().unwrap_or(0));
        let checked = match result {
            Ok(answers) => answers.accept(inputs.len(), |raw| {
                W::accept(raw, self.limits.max_output_bytes)
            }),
            Err(err) => Err(Fault::from_call_error(
                &err,
                warm.store.data().memory_denied(),
            )),
        };
        match checked {
            Ok(decisions) => {
                warm.calls += 1;
                self.check_in(warm);
                self.breaker.success();
                let answers = decisions
                    .into_iter()
                    .map(|d| (d, Outcome::Plugin))
                    .collect();
                (answers, Some(used))
            }
            Err(fault) => {
                self.discard(warm);
                self.all_faulted(inputs, fault, Some(used))
            }
        }
    }

    /// One fault for a whole batched call: counted once, every input gets
    /// the fail-safe.
    fn all_faulted(
        &self,
        inputs: &[W::Input],
        fault: Fault,
        fuel: Option<u64>,
    ) -> (Vec<(W::Decision, Outcome)>, Option<u64>) {
        let Some((first, rest)) = inputs.split_first() else {
            return (Vec::new(), fuel);
        };
        let (decision, outcome, _) = self.faulted(first, fault, fuel);
        let mut answers = vec![(decision, outcome.clone())];
        for input in rest {
            answers.push((
                W::fail_safe(input, ReasonCode::PluginFault),
                outcome.clone(),
            ));
        }
        (answers, fuel)
    }

    /// One call with a full tank, a fresh deadline and a re-armed limiter,
    /// its output checked; also returns the fuel used.
    fn call_metered(
        &self,
        host: &HostInner,
        warm: &mut Warm<W>,
        input: &W::Input,
    ) -> (Result<W::Decision, Fault>, Option<u64>) {
        let fuel = self.limits.fuel;
        warm.store
            .set_epoch_deadline(host.deadline_ticks(self.limits.deadline, 1));
        warm.store.data_mut().rearm();
        if let Err(err) = warm.store.set_fuel(fuel) {
            return (Err(Fault::new(FaultKind::Trap, err.to_string())), None);
        }
        let result = W::call(&warm.instance, &mut warm.store, input);
        let used = fuel.saturating_sub(warm.store.get_fuel().unwrap_or(0));
        let checked = match result {
            Ok(raw) => W::accept(raw, self.limits.max_output_bytes),
            Err(err) => Err(Fault::from_call_error(
                &err,
                warm.store.data().memory_denied(),
            )),
        };
        (checked, Some(used))
    }

    /// The canary call made by each new instance at install time.
    fn call(
        &self,
        host: &HostInner,
        warm: &mut Warm<W>,
        input: &W::Input,
    ) -> Result<W::Decision, Fault> {
        self.call_metered(host, warm, input).0
    }

    fn faulted(
        &self,
        input: &W::Input,
        fault: Fault,
        fuel: Option<u64>,
    ) -> (W::Decision, Outcome, Option<u64>) {
        self.counters.faults.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            world = %W::KIND,
            generation = %self.id,
            fault = %fault.kind,
            message = %fault.message,
            "plugin fault contained; fail-safe applied"
        );
        if self.breaker.fault(&fault) {
            tracing::error!(
                world = %W::KIND,
                generation = %self.id,
                after = self.breaker.trip_after,
                "circuit breaker tripped: plugin taken out of service until reset or swap"
            );
        }
        (
            W::fail_safe(input, ReasonCode::PluginFault),
            Outcome::FailSafe { fault },
            fuel,
        )
    }

    fn instantiate(&self, host: &HostInner) -> Result<Warm<W>, Fault> {
        let mut store = Store::new(&host.engine, StoreState::new(&self.limits));
        store.limiter(|state| state.limiter());
        // Instantiation may run guest code (initialisers): it gets fuel and
        // a deadline too. (A store's deadline starts at epoch 0, already
        // past: it must be set before any guest code runs.)
        store.epoch_deadline_trap();
        store.set_epoch_deadline(host.deadline_ticks(self.limits.deadline, 1));
        store
            .set_fuel(self.limits.fuel)
            .map_err(|err| Fault::new(FaultKind::InstantiationFailed, err.to_string()))?;
        let instance = W::instantiate(&self.pre, &mut store).map_err(|err| {
            Fault::new(FaultKind::InstantiationFailed, crate::error::message(&err))
        })?;
        self.counters
            .instances_created
            .fetch_add(1, Ordering::Relaxed);
        Ok(Warm {
            store,
            instance,
            calls: 0,
        })
    }

    /// Returns an instance to the pool. On a retired generation it goes
    /// back too: the pool is dropped with the generation, by a later swap,
    /// never on the decision thread.
    fn check_in(&self, warm: Warm<W>) {
        if warm.calls >= self.limits.max_calls_per_instance {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < self.max_idle {
            idle.push(warm);
        }
    }

    fn discard(&self, warm: Warm<W>) {
        self.counters
            .instances_discarded
            .fetch_add(1, Ordering::Relaxed);
        drop(warm);
    }

    /// Called on the swapping thread once the generation is replaced: its
    /// idle instances are dropped here, at once.
    fn retire(&self) {
        let idle = std::mem::take(&mut *self.idle.lock());
        drop(idle);
    }
}

/// Trips after `trip_after` faults in a row; stays open until reset or
/// until the generation is replaced.
struct Breaker {
    trip_after: u32,
    consecutive: AtomicU32,
    open: AtomicBool,
    trips: AtomicU64,
    last_fault: Mutex<Option<Fault>>,
}

impl Breaker {
    fn new(trip_after: u32) -> Breaker {
        Breaker {
            trip_after: trip_after.max(1),
            consecutive: AtomicU32::new(0),
            open: AtomicBool::new(false),
            trips: AtomicU64::new(0),
            last_fault: Mutex::new(None),
        }
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    fn success(&self) {
        if self.consecutive.load(Ordering::Relaxed) != 0 {
            self.consecutive.store(0, Ordering::Relaxed);
        }
    }

    /// Counts a fault; true if this fault tripped the breaker.
    fn fault(&self, fault: &Fault) -> bool {
        *self.last_fault.lock() = Some(fault.clone());
        let consecutive = self.consecutive.fetch_add(1, Ordering::AcqRel) + 1;
        if consecutive >= self.trip_after && !self.open.swap(true, Ordering::AcqRel) {
            self.trips.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn reset(&self) {
        self.consecutive.store(0, Ordering::Relaxed);
        self.open.store(false, Ordering::Release);
    }
}

/// The session names of one batch's records, each allocated once and
/// shared by the records about it (an assembly's candidates come from a
/// handful of sessions).
#[derive(Default)]
struct SharedNames(Vec<Arc<str>>);

impl SharedNames {
    /// How many of the names made last are looked through: a batch of
    /// many sessions costs a bounded scan per record.
    const LOOK_BACK: usize = 16;

    /// `name` as a shared string: one made for this batch, or a new one.
    fn get(&mut self, name: Option<&str>) -> Option<Arc<str>> {
        let name = name?;
        let mut recent = self.0.iter().rev().take(Self::LOOK_BACK);
        if let Some(shared) = recent.find(|n| &***n == name) {
            return Some(shared.clone());
        }
        let shared: Arc<str> = Arc::from(name);
        self.0.push(shared.clone());
        Some(shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_shares_one_string_per_session() {
        let mut names = SharedNames::default();
        let a = names.get(Some("s-a")).unwrap();
        let b = names.get(Some("s-b")).unwrap();
        assert_eq!(names.get(None), None);
        assert!(Arc::ptr_eq(&a, &names.get(Some("s-a")).unwrap()));
        assert!(Arc::ptr_eq(&b, &names.get(Some("s-b")).unwrap()));
        assert_eq!(&*a, "s-a");
        // Past the look-back a name is made again, equal but not shared.
        for i in 0..SharedNames::LOOK_BACK {
            names.get(Some(&format!("s-{i}")));
        }
        let again = names.get(Some("s-a")).unwrap();
        assert_eq!(again, a);
        assert!(!Arc::ptr_eq(&again, &a));
    }
}
