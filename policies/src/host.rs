//! [`PolicyHost`]: the one shared wasmtime engine, the compile cache, the
//! decision sink, and the limits every plugin call runs under.
//!
//! Preparing a plugin ([`PolicyHost::prepare`]) compiles it (or loads it
//! from the cache), links it, and pre-instantiates it: all the slow work,
//! done once, off the hot path. A [`PolicySlot`](crate::PolicySlot) then
//! serves decisions from that prepared plugin and swaps to another one
//! atomically.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use crate::cache::{CacheOutcome, CacheStats, ComponentCache};
use crate::decisions::DecisionSink;
use crate::error::{PolicyError, Result, message};
use crate::slot::PolicySlot;
use crate::store::StoreState;
use crate::ticker::{Ticker, TickerStatus};
use crate::world::World;

/// The limits one plugin call runs under. Every limit has a hostile test
/// guest that runs into it (`plugins/hostile/`).
///
/// ```
/// use cairn_policies::Limits;
///
/// use std::time::Duration;
///
/// let tight = Limits::default()
///     .fuel(1_000_000)
///     .memory_bytes(8 << 20)
///     .deadline(Duration::from_millis(20));
/// assert_eq!(tight.max_output_bytes, Limits::default().max_output_bytes);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Fuel for one call (roughly, wasm instructions). Running out is an
    /// `out-of-fuel` fault. Default 10,000,000 (a few milliseconds); the
    /// default significance gate needs about 0.5 % of that on a 1 KB turn.
    pub fuel: u64,
    /// The wall-clock time one call may take, and, separately, one
    /// instantiation (which may run the guest's initialisers). Past it the
    /// guest is interrupted: a `time-limit` fault. Fuel bounds the work a
    /// call does; this bounds the work whose time is not proportional to
    /// its fuel (a call out to the runtime, a cache miss) and a thread that
    /// is descheduled. Checked at the guest's function entries and loop
    /// back-edges, at the resolution of [`HostConfig::epoch_tick`]; the
    /// host's own work on a call (copying its answer out) is not
    /// interrupted. A batched call gets as many deadlines as it has
    /// inputs, as it gets their fuel.
    ///
    /// Default 100 ms: ordinary decisions take microseconds and the whole
    /// default fuel of ordinary code about one, while the slowest guests
    /// found spend tens to a few hundred milliseconds of their default fuel
    /// (`docs/SECURITY.md`, "Hostile plugins"). It is wall-clock time, so it includes time the
    /// thread waits for a CPU: on a host that is often overloaded, raise it
    /// rather than let a starved call fault (five in a row trip the
    /// breaker).
    pub deadline: Duration,
    /// The most linear memory an instance may grow to, in bytes. A refused
    /// growth that kills the call is a `memory-limit` fault. Default 16 MiB.
    pub memory_bytes: usize,
    /// The most bytes a decision may carry back (one per list element, the
    /// note's length, plus a 16-byte record overhead). More is an
    /// `output-too-large` fault. Default 1024.
    pub max_output_bytes: usize,
    /// The most elements any table may have. Default 10,000.
    pub table_elements: usize,
    /// The most core instances, memories and tables a component may create.
    /// Default 32.
    pub instances: usize,
    /// How many calls one instance serves before it is dropped and a fresh
    /// one is made, so no plugin state lives forever. `1` makes every call
    /// run in a fresh instance. Default 10,000.
    pub max_calls_per_instance: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: 10_000_000,
            deadline: Duration::from_millis(100),
            memory_bytes: 16 << 20,
            max_output_bytes: 1024,
            table_elements: 10_000,
            instances: 32,
            max_calls_per_instance: 10_000,
        }
    }
}

impl Limits {
    /// With this much fuel per call.
    pub fn fuel(mut self, fuel: u64) -> Self {
        self.fuel = fuel;
        self
    }

    /// With this wall-clock deadline per call (see [`Limits::deadline`]).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// With this memory limit per instance.
    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// With this output cap per decision.
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// With instances recycled after this many calls (at least 1).
    pub fn max_calls_per_instance(mut self, calls: u64) -> Self {
        self.max_calls_per_instance = calls.max(1);
        self
    }
}

/// How a [`PolicyHost`] is set up.
///
/// ```
/// use cairn_policies::{HostConfig, Limits};
///
/// let config = HostConfig::default()
///     .cache_dir("/var/lib/cairn/policy-cache", [7; 32])
///     .limits(Limits::default().fuel(5_000_000))
///     .breaker_trip_after(3);
/// assert_eq!(config.breaker_trip_after, 3);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HostConfig {
    /// Where compiled components are cached, and the secret key that
    /// authenticates every cache file. `None` (the default) keeps them in
    /// memory only.
    ///
    /// **Trust:** the host loads machine code from this directory, so it
    /// loads only files whose authentication code, keyed with this secret,
    /// checks: anyone who can write the directory but does not know the key
    /// cannot make the host run their code. Keep the key out of the
    /// directory (cairn derives it from the install secret in its store).
    pub cache_dir: Option<(PathBuf, [u8; 32])>,
    /// The wasm call stack limit, in bytes, for every plugin (an engine-wide
    /// setting). Overflowing it is a `stack-overflow` fault. Must stay well
    /// below the native stack of any thread that calls plugins. Default
    /// 512 KiB.
    pub max_stack_bytes: usize,
    /// The limits of plugins prepared without their own.
    pub limits: Limits,
    /// How often the host's ticker thread advances the engine's epoch: the
    /// resolution of every [`Limits::deadline`] (a call is stopped at most
    /// one tick after its deadline). Default 1 ms.
    pub epoch_tick: Duration,
    /// How many faults in a row trip a plugin's circuit breaker. Default 5.
    pub breaker_trip_after: u32,
    /// The number of the first generation this host makes (so a runtime
    /// can continue numbering after a restart). Default 1.
    pub first_generation: u64,
    /// How many idle instances a generation keeps warm. Default twice the
    /// number of CPUs.
    pub max_idle_instances: usize,
    /// How many instances a generation creates before it starts serving
    /// (at install or swap time, off the hot path). Default the number of
    /// CPUs.
    pub prewarm_instances: usize,
    /// The key of the inputs digests the decision records carry: with one,
    /// each digest is keyed with it (BLAKE3 keyed mode), so the log cannot
    /// confirm a guessed input; `None` (the default) logs the plain digest.
    /// cairn derives it from the install secret in its store.
    pub digest_key: Option<[u8; 32]>,
}

impl Default for HostConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        HostConfig {
            cache_dir: None,
            max_stack_bytes: 512 << 10,
            limits: Limits::default(),
            epoch_tick: Duration::from_millis(1),
            breaker_trip_after: 5,
            first_generation: 1,
            max_idle_instances: 2 * cpus,
            prewarm_instances: cpus,
            digest_key: None,
        }
    }
}

impl HostConfig {
    /// With decision records' inputs digests keyed with `key` (see
    /// [`HostConfig::digest_key`]).
    pub fn digest_key(mut self, key: [u8; 32]) -> Self {
        self.digest_key = Some(key);
        self
    }

    /// With compiled components cached in `dir`, authenticated with `key`
    /// (see the trust note on [`HostConfig::cache_dir`]).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>, key: [u8; 32]) -> Self {
        self.cache_dir = Some((dir.into(), key));
        self
    }

    /// With these default limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// With this wasm stack limit.
    pub fn max_stack_bytes(mut self, bytes: usize) -> Self {
        self.max_stack_bytes = bytes;
        self
    }

    /// With the epoch advanced this often (at least 100 µs, at most 1 s;
    /// see [`HostConfig::epoch_tick`]).
    pub fn epoch_tick(mut self, tick: Duration) -> Self {
        self.epoch_tick = tick.clamp(MIN_EPOCH_TICK, MAX_EPOCH_TICK);
        self
    }

    /// With the breaker tripping after this many faults in a row (at
    /// least 1).
    pub fn breaker_trip_after(mut self, faults: u32) -> Self {
        self.breaker_trip_after = faults.max(1);
        self
    }

    /// With generations numbered from `number`.
    pub fn first_generation(mut self, number: u64) -> Self {
        self.first_generation = number;
        self
    }

    /// With this many instances created before a generation serves.
    pub fn prewarm_instances(mut self, count: usize) -> Self {
        self.prewarm_instances = count;
        self
    }

    /// With at most this many idle instances kept per generation.
    pub fn max_idle_instances(mut self, count: usize) -> Self {
        self.max_idle_instances = count;
        self
    }
}

/// The shortest [`HostConfig::epoch_tick`].
const MIN_EPOCH_TICK: Duration = Duration::from_micros(100);
/// The longest [`HostConfig::epoch_tick`].
const MAX_EPOCH_TICK: Duration = Duration::from_secs(1);

/// The policy host: one wasmtime engine shared by every plugin, its epoch
/// ticker (the thread that makes deadlines work), a compile cache, and the
/// decision sink. Cheap to clone; `Send + Sync`.
///
/// ```
/// use std::sync::Arc;
/// use cairn_policies::{defaults, HostConfig, MemorySink, PolicyHost, SignificanceGate};
///
/// # fn main() -> Result<(), cairn_policies::PolicyError> {
/// let host = PolicyHost::new(HostConfig::default(), Arc::new(MemorySink::default()))?;
/// let plugin = host.prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)?;
/// let slot = host.slot(&plugin)?;
/// assert!(slot.generation().as_str().starts_with("significance-default@"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PolicyHost {
    pub(crate) inner: Arc<HostInner>,
}

pub(crate) struct HostInner {
    pub(crate) engine: Engine,
    pub(crate) config: HostConfig,
    pub(crate) sink: Arc<dyn DecisionSink>,
    cache: ComponentCache,
    next_generation: AtomicU64,
    /// Stopped and joined when the host is dropped.
    ticker: Ticker,
}

impl HostInner {
    pub(crate) fn next_generation(&self) -> u64 {
        self.next_generation.fetch_add(1, Ordering::Relaxed)
    }

    /// `deadline` as an epoch delta for `Store::set_epoch_deadline`: whole
    /// ticks rounded up, plus one, because the next tick may come at once.
    /// `times` deadlines for a batched call. At least 2 ticks.
    pub(crate) fn deadline_ticks(&self, deadline: Duration, times: u64) -> u64 {
        let tick = self.config.epoch_tick.as_nanos().max(1);
        let ticks = deadline.as_nanos().div_ceil(tick).max(1);
        u64::try_from(ticks)
            .unwrap_or(u64::MAX)
            .saturating_mul(times.max(1))
            .saturating_add(1)
    }
}

impl std::fmt::Debug for PolicyHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyHost")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl PolicyHost {
    /// Creates the engine (fuel metering and epoch interruption on, the
    /// configured stack limit, no async), starts its epoch ticker thread
    /// and opens the compile cache.
    pub fn new(config: HostConfig, sink: Arc<dyn DecisionSink>) -> Result<PolicyHost> {
        let mut wasm = Config::new();
        // No wasm backtraces: guests are stripped, so a backtrace names only
        // function indices, and capturing one (thousands of frames after a
        // stack overflow) would slow fault containment for nothing.
        wasm.consume_fuel(true)
            .epoch_interruption(true)
            .max_wasm_stack(config.max_stack_bytes)
            .wasm_backtrace_max_frames(None)
            .wasm_component_model(true);
        let engine = Engine::new(&wasm).map_err(|err| PolicyError::Engine {
            message: message(&err),
        })?;
        let cache = ComponentCache::new(
            &engine,
            config
                .cache_dir
                .as_ref()
                .map(|(dir, key)| (dir.as_path(), *key)),
        )?;
        let ticking = engine.clone();
        let tick = config.epoch_tick.clamp(MIN_EPOCH_TICK, MAX_EPOCH_TICK);
        let ticker = Ticker::spawn("cairn-policy-epoch", tick, move || {
            ticking.increment_epoch();
        })
        .map_err(|err| PolicyError::Engine {
            message: format!("could not start the plugin deadline ticker thread: {err}"),
        })?;
        Ok(PolicyHost {
            inner: Arc::new(HostInner {
                engine,
                next_generation: AtomicU64::new(config.first_generation),
                config: HostConfig {
                    epoch_tick: tick,
                    ..config
                },
                sink,
                cache,
                ticker,
            }),
        })
    }

    /// The state of the thread that makes deadlines work (see
    /// [`HostConfig::epoch_tick`]): whether it runs, how many ticks it
    /// made, how many of them panicked (caught; it carries on).
    pub fn ticker_status(&self) -> TickerStatus {
        self.inner.ticker.status()
    }

    /// The host's configuration.
    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// Compiles (or loads from the cache), links and pre-instantiates a
    /// plugin for world `W`, checking that it implements the world. Slow
    /// (milliseconds when compiling): call it off the hot path, then hand
    /// the result to [`PolicyHost::slot`] or [`PolicySlot::swap`].
    ///
    /// Every import the component declares (a Rust guest built with `std`
    /// imports WASI) is linked to a function that traps: plugins get no
    /// clock, randomness, files, environment or network.
    pub fn prepare<W: World>(&self, name: &str, wasm: &[u8]) -> Result<PreparedPlugin<W>> {
        check_name(name)?;
        check_exports::<W>(name, wasm)?;
        let hash = blake3::hash(wasm);
        let engine = &self.inner.engine;
        let (component, cache) = self.inner.cache.load(engine, name, &hash, wasm)?;
        let pre = link::<W>(engine, name, &component)?;
        Ok(PreparedPlugin {
            name: name.into(),
            hash,
            pre,
            limits: self.inner.config.limits,
            generation: None,
            cache,
        })
    }

    /// Like [`PolicyHost::prepare`], reading the component from a file.
    pub fn prepare_file<W: World>(&self, name: &str, path: &Path) -> Result<PreparedPlugin<W>> {
        let wasm = std::fs::read(path).map_err(|source| PolicyError::ReadPlugin {
            path: path.to_owned(),
            source,
        })?;
        self.prepare(name, &wasm)
    }

    /// A new slot serving `plugin` as its first generation. Instantiates
    /// [`HostConfig::prewarm_instances`] instances first, so a plugin that
    /// cannot start is refused here, not on the hot path.
    pub fn slot<W: World>(&self, plugin: &PreparedPlugin<W>) -> Result<PolicySlot<W>> {
        PolicySlot::new(self.inner.clone(), plugin)
    }

    /// The compile cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache.stats()
    }
}

fn link<W: World>(engine: &Engine, name: &str, component: &Component) -> Result<W::Pre> {
    let mut linker = Linker::<StoreState>::new(engine);
    let instantiate = |err: wasmtime::Error| PolicyError::Instantiate {
        plugin: name.to_owned(),
        message: message(&err),
    };
    linker
        .define_unknown_imports_as_traps(component)
        .map_err(instantiate)?;
    let pre = linker.instantiate_pre(component).map_err(instantiate)?;
    W::pre(pre).map_err(|err| PolicyError::WrongWorld {
        plugin: name.to_owned(),
        world: W::KIND,
        message: message(&err),
    })
}

/// Reads the component's top-level exports before anything is compiled or
/// cached: bytes that are not a component, or a component that does not
/// export the world's function, are refused without reaching the compiler.
/// (`link` type-checks the export in full after compiling.)
fn check_exports<W: World>(name: &str, wasm: &[u8]) -> Result<()> {
    use wasmparser::{ComponentExternalKind, Encoding, Parser, Payload};
    let wrong = |message: String| PolicyError::WrongWorld {
        plugin: name.to_owned(),
        world: W::KIND,
        message,
    };
    let mut depth = 0usize;
    let mut exported = false;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| wrong(format!("not a WebAssembly component: {e}")))?;
        match payload {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    return Err(wrong(
                        "a core WebAssembly module, not a component (see plugins/README.md)"
                            .to_owned(),
                    ));
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export =
                        export.map_err(|e| wrong(format!("unreadable export section: {e}")))?;
                    exported |=
                        export.name.name == W::EXPORT && export.kind == ComponentExternalKind::Func;
                }
            }
            _ => {}
        }
    }
    if exported {
        Ok(())
    } else {
        Err(wrong(format!(
            "the component does not export the function `{}` of the {} world",
            W::EXPORT,
            W::KIND
        )))
    }
}

fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > 64 {
        Some("longer than 64 bytes")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
    {
        Some("use lowercase ASCII letters, digits, '-', '_' and '.'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(PolicyError::InvalidName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// A plugin compiled, linked and pre-instantiated for world `W`, ready to
/// serve (with [`PolicyHost::slot`]) or to be swapped in (with
/// [`PolicySlot::swap`]). Cheap to clone.
pub struct PreparedPlugin<W: World> {
    pub(crate) name: Arc<str>,
    pub(crate) hash: blake3::Hash,
    pub(crate) pre: W::Pre,
    pub(crate) limits: Limits,
    /// Serve as this generation number instead of the host's next one.
    pub(crate) generation: Option<u64>,
    cache: CacheOutcome,
}

impl<W: World> Clone for PreparedPlugin<W> {
    fn clone(&self) -> Self {
        PreparedPlugin {
            name: self.name.clone(),
            hash: self.hash,
            pre: self.pre.clone(),
            limits: self.limits,
            generation: self.generation,
            cache: self.cache,
        }
    }
}

impl<W: World> std::fmt::Debug for PreparedPlugin<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedPlugin")
            .field("world", &W::KIND)
            .field("name", &self.name)
            .field("hash", &self.hash.to_hex())
            .field("limits", &self.limits)
            .field("cache", &self.cache)
            .finish()
    }
}

impl<W: World> PreparedPlugin<W> {
    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The BLAKE3 hash of the component's bytes, in hex.
    pub fn content_hash(&self) -> String {
        self.hash.to_hex().to_string()
    }

    /// Where its compiled code came from.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.cache
    }

    /// Its limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The same plugin with other limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The same plugin, served as generation `number` rather than the
    /// host's next one: a runtime restoring an installed plugin after a
    /// restart keeps its [`PolicyGenerationId`](crate::PolicyGenerationId),
    /// so decisions before and after the restart carry the same id. The
    /// caller keeps numbers unique (start the host past every number it
    /// restores, with [`HostConfig::first_generation`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn_policies::{defaults, HostConfig, MemorySink, PolicyHost, SignificanceGate};
    ///
    /// # fn main() -> Result<(), cairn_policies::PolicyError> {
    /// let host = PolicyHost::new(HostConfig::default().first_generation(8), Arc::new(MemorySink::default()))?;
    /// let plugin = host.prepare::<SignificanceGate>("gate", defaults::SIGNIFICANCE.wasm)?;
    /// let slot = host.slot(&plugin.at_generation(7))?;
    /// assert_eq!(slot.generation().number(), 7);
    /// # Ok(())
    /// # }
    /// ```
    pub fn at_generation(mut self, number: u64) -> Self {
        self.generation = Some(number);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names() {
        assert!(check_name("significance-default").is_ok());
        assert!(check_name("my_policy.v2").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("Bad Name").is_err());
        assert!(check_name(&"x".repeat(65)).is_err());
    }
}
