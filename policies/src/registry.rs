//! The policy plugins of a running cairn: the one [`PolicyHost`] (compile
//! cache on disk under the data dir), its three slots, the registry of
//! installed plugins and the durable decision log.
//!
//! # The registry
//!
//! Installed plugins live in the store's system namespace
//! `policy-plugins` (collection `State`): `p:<world>` → the
//! [`InstalledPlugin`] record (name, world, content hash, installed_at,
//! generation), `w:<hash>` → the component's bytes, `m:next-generation` →
//! the next generation number. On open every world is served by its
//! installed plugin at its recorded generation, so a restart serves the
//! same plugin under the same [`PolicyGenerationId`]; a world with nothing
//! installed gets the built-in default, recorded as such (a new cairn
//! build with a changed default makes a new generation).
//!
//! # Install and swap
//!
//! [`Policies::install`] compiles and validates the component against the
//! world (off the decision path, on the caller's thread), swaps it into the
//! slot atomically ([`PolicySlot::swap`]: calls in flight finish on the old
//! generation), then persists it and syncs. A component that does not
//! compile, implements another world, cannot start or faults on its canary
//! decision is refused before anything changes; nothing is written.
//!
//! The facade (`cairn`) adapts the significance slot to its actor
//! runtime's capture gate; this module knows nothing above the memory core.

use std::path::Path;
use std::sync::Arc;

use cairn_memory::Memory;
use cairn_memory::store::{Collection, WorkspaceStore, WriteBatch};
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::decision_log::{DecisionLog, DecisionLogConfig, DecisionLogStats, DecisionQuery};
use crate::error::{PolicyError, Result};
use crate::{
    BuiltinPlugin, Decided, HostConfig, Limits, MemoryPolicy, MemoryPolicyDecision,
    PolicyGenerationId, PolicyHost, PolicyRequest, PolicySlot, PreparedPlugin, SignificanceGate,
    SlotStatus, TopicDirective, TopicDirectiveDecision, TopicInput, World, WorldKind, defaults,
};

/// The key-derivation context of the decision log's inputs digests (keyed
/// with the install secret, as tombstones are: the log cannot confirm a
/// guessed input without the store).
const DIGEST_KEY_CONTEXT: &str = "cairn decision inputs digest v1";

/// The system namespace of the plugin registry.
pub const PLUGINS_NAMESPACE: &str = "policy-plugins";

const NEXT_GENERATION: &[u8] = b"m:next-generation";

/// Settings of the policy plugins (`[policies]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// The largest component accepted by `install` / `swap` (and the HTTP
    /// upload cap), in bytes. Default 8 MiB.
    pub max_plugin_bytes: usize,
    /// How many faults in a row trip a plugin's circuit breaker. Default 5.
    pub breaker_trip_after: u32,
    /// The wall-clock time one plugin call (and, separately, one
    /// instantiation) may take, in milliseconds, on top of its fuel: past
    /// it the call is interrupted, a `time-limit` fault answered with the
    /// world's fail-safe. It counts time the thread waits for a CPU: raise
    /// it on a host that is often overloaded. 1 to 60,000. Default 100.
    pub call_deadline_ms: u64,
    /// The durable decision log.
    pub decision_log: DecisionLogConfig,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            max_plugin_bytes: 8 << 20,
            breaker_trip_after: 5,
            call_deadline_ms: u64::try_from(Limits::default().deadline.as_millis())
                .unwrap_or(u64::MAX),
            decision_log: DecisionLogConfig::default(),
        }
    }
}

impl PolicyConfig {
    /// Checks the settings (the decision log's too); the message names the
    /// one that is wrong.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.max_plugin_bytes == 0 || self.breaker_trip_after == 0 {
            return Err(
                "policies.max_plugin_bytes and policies.breaker_trip_after must be greater than zero"
                    .to_owned(),
            );
        }
        if !(1..=60_000).contains(&self.call_deadline_ms) {
            return Err(format!(
                "policies.call_deadline_ms must be between 1 and 60000, not {}",
                self.call_deadline_ms
            ));
        }
        self.decision_log.validate()
    }
}

/// A plugin as the registry keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstalledPlugin {
    /// The world it serves.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub world: WorldKind,
    /// Its installed name.
    pub plugin: String,
    /// The BLAKE3 hash of the component, in hex.
    pub content_hash: String,
    /// The generation serving it (`name@hash#n`).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub generation: PolicyGenerationId,
    /// When it was installed.
    pub installed_at: DateTime<Utc>,
    /// A default plugin built into cairn (not stored in the registry).
    pub builtin: bool,
    /// The component's size in bytes.
    pub size_bytes: u64,
}

/// What `cairn plugins list` and `GET /v1/plugins` show for one world.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginStatus {
    /// The installed plugin.
    #[serde(flatten)]
    pub installed: InstalledPlugin,
    /// Whether its circuit breaker is open (the fail-safe answers).
    pub breaker_open: bool,
    /// Faults in a row right now.
    pub consecutive_faults: u32,
    /// The last fault this process saw, if any.
    pub last_fault: Option<String>,
    /// Decisions this generation made, as the durable log counted them
    /// (across restarts).
    pub decisions: u64,
    /// Of those, how many were a fail-safe (a fault or an open breaker).
    pub faults: u64,
    /// Set when the world is held closed: the plugin the operator installed
    /// cannot be served (why, and what to do), so every decision is the
    /// world's fail-safe until a plugin is installed.
    pub held: Option<String>,
}

/// `GET /v1/plugins`: every world's plugin and the decision log's counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginsReport {
    /// One per world.
    pub plugins: Vec<PluginStatus>,
    /// The decision log.
    pub decision_log: DecisionLogStats,
}

/// What an install or swap did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstallReport {
    /// The world.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub world: WorldKind,
    /// The plugin's name.
    pub plugin: String,
    /// Its content hash (hex).
    pub content_hash: String,
    /// The generation replaced.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub previous_generation: PolicyGenerationId,
    /// The generation now serving.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub generation: PolicyGenerationId,
    /// Where its compiled code came from: `compiled`, `disk` or `memory`.
    pub compile: String,
}

/// One world's slot with what it currently serves.
struct WorldSlot<W: World> {
    slot: PolicySlot<W>,
    serving: Mutex<(PreparedPlugin<W>, InstalledPlugin)>,
}

/// The policy plugins of one cairn: host, slots, registry, decision log.
/// Cheap to clone. Held by the facade (`cairn::Cairn`): a surface reaches
/// it through the facade's plugin methods (`plugins`, `install_plugin`,
/// `decisions`…), never directly.
///
/// ```
/// use std::sync::Arc;
/// use cairn_memory::{Memory, MemoryConfig, SystemClock};
/// use cairn_policies::{Policies, PolicyConfig, WorldKind, defaults};
///
/// let dir = tempfile::tempdir()?;
/// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
/// let policies = Policies::open(&memory, dir.path(), &PolicyConfig::default())?;
/// let listed = policies.list()?;
/// assert_eq!(listed.plugins[0].installed.world, WorldKind::SignificanceGate);
/// assert!(listed.plugins.iter().all(|p| p.installed.builtin));
///
/// // Installing the built-in example gate makes a new generation at once.
/// let quiet = defaults::EXAMPLE_QUIET;
/// let report = policies.install(WorldKind::SignificanceGate, "quiet", quiet.wasm)?;
/// assert!(report.generation.number() > report.previous_generation.number());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Policies {
    inner: Arc<PoliciesInner>,
}

struct PoliciesInner {
    memory: Memory,
    host: PolicyHost,
    log: DecisionLog,
    registry: Arc<dyn WorkspaceStore>,
    config: PolicyConfig,
    significance: WorldSlot<SignificanceGate>,
    topic: WorldSlot<TopicDirective>,
    memory_policy: WorldSlot<MemoryPolicy>,
    /// Serialises installs (each is compile + swap + persist).
    install: Mutex<()>,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("significance", &self.inner.significance.slot)
            .field("topic", &self.inner.topic.slot)
            .field("memory", &self.inner.memory_policy.slot)
            .finish_non_exhaustive()
    }
}

impl Policies {
    /// Opens the decision log and the registry in `memory`'s store, and
    /// serves every world from its installed plugin (or the default).
    /// Compiled components are cached in `data_dir/policy-cache`.
    pub fn open(memory: &Memory, data_dir: &Path, config: &PolicyConfig) -> Result<Policies> {
        config.validate().map_err(PolicyError::Config)?;
        let log = DecisionLog::open(memory, data_dir, &config.decision_log)?;
        let registry = memory.system(PLUGINS_NAMESPACE)?;
        let next = read_next_generation(registry.as_ref())?.max(1);
        let host = PolicyHost::new(
            HostConfig::default()
                .cache_dir(
                    data_dir.join("policy-cache"),
                    memory.derive_key("cairn policy compile cache v1"),
                )
                .first_generation(next)
                .breaker_trip_after(config.breaker_trip_after)
                .limits(
                    Limits::default()
                        .deadline(std::time::Duration::from_millis(config.call_deadline_ms)),
                )
                .digest_key(memory.derive_key(DIGEST_KEY_CONTEXT)),
            Arc::new(log.clone()),
        )?;
        let now = memory.clock().now();
        let significance = restore::<SignificanceGate>(&host, registry.as_ref(), now)?;
        let topic = restore::<TopicDirective>(&host, registry.as_ref(), now)?;
        let memory_policy = restore::<MemoryPolicy>(&host, registry.as_ref(), now)?;
        let policies = Policies {
            inner: Arc::new(PoliciesInner {
                memory: memory.clone(),
                host,
                log,
                registry,
                config: config.clone(),
                significance,
                topic,
                memory_policy,
                install: Mutex::new(()),
            }),
        };
        // Record what is served (defaults included) and where numbering
        // continues, so the next start serves the same generations.
        let mut batch = WriteBatch::default();
        policies.record_serving(&mut batch)?;
        policies.inner.registry.apply(batch)?;
        memory.sync()?;
        Ok(policies)
    }

    /// The significance gate's slot (decisions, status, breaker reset).
    pub fn significance(&self) -> &PolicySlot<SignificanceGate> {
        &self.inner.significance.slot
    }

    /// The topic directive's slot.
    pub fn topic(&self) -> &PolicySlot<TopicDirective> {
        &self.inner.topic.slot
    }

    /// The memory policy's slot.
    pub fn memory_policy(&self) -> &PolicySlot<MemoryPolicy> {
        &self.inner.memory_policy.slot
    }

    /// The policy host (engine, compile cache).
    pub fn host(&self) -> &PolicyHost {
        &self.inner.host
    }

    /// The durable decision log.
    pub fn decision_log(&self) -> &DecisionLog {
        &self.inner.log
    }

    /// Asks the installed memory policy whether `request` (an object, an
    /// action, a destination, a principal) may go ahead, and how. Assembly
    /// calls this before rendering anything for a destination.
    ///
    /// A plugin fault is not an error: the decision is then the world's
    /// fail-safe, deny (fidelity `none`, locality `blocked`), and
    /// [`Decided::outcome`] says what happened. The decision is in the
    /// decision log with the generation that made it. Synchronous and cheap
    /// (microseconds): callable on any thread. The facade's
    /// `Cairn::check_memory` asks it (with an example).
    pub fn check_memory(&self, request: &PolicyRequest) -> Result<Decided<MemoryPolicyDecision>> {
        self.inner.memory_policy.slot.decide(request)
    }

    /// Asks the installed topic directive about one input.
    pub fn topic_directive(&self, input: &TopicInput) -> Result<Decided<TopicDirectiveDecision>> {
        self.inner.topic.slot.decide(input)
    }

    /// [`Policies::topic_directive`] about a turn of `workspace`: its
    /// decision record names the workspace (a `forget` scrubs by it).
    pub fn topic_directive_in(
        &self,
        workspace: &str,
        input: &TopicInput,
    ) -> Result<Decided<TopicDirectiveDecision>> {
        self.inner.topic.slot.decide_in(Some(workspace), input)
    }

    /// Installs `wasm` as `world`'s plugin under `name` and serves it at
    /// once: compiles it (or loads it from the cache), checks it implements
    /// the world, starts its instances (each makes a canary decision),
    /// swaps it in atomically, then persists it (a restart serves it).
    ///
    /// Refused, with nothing changed or written: a component larger than
    /// `policies.max_plugin_bytes`, a bad name, bytes that are not a
    /// component, a component of another world, one that cannot start or
    /// faults on its canary.
    pub fn install(&self, world: WorldKind, name: &str, wasm: &[u8]) -> Result<InstallReport> {
        let max = self.inner.config.max_plugin_bytes;
        if wasm.len() > max {
            return Err(PolicyError::PluginTooLarge {
                size: wasm.len(),
                max,
            });
        }
        let _serial = self.inner.install.lock();
        match world {
            WorldKind::SignificanceGate => self.install_in(&self.inner.significance, name, wasm),
            WorldKind::TopicDirective => self.install_in(&self.inner.topic, name, wasm),
            WorldKind::MemoryPolicy => self.install_in(&self.inner.memory_policy, name, wasm),
        }
    }

    /// In a cluster, where every node serves the plugins of one shared
    /// registry: serves what another node installed since this node last
    /// looked, under the generation that node gave it (so decisions are
    /// stamped alike on every node). Answers the worlds that changed. The
    /// cluster loop calls it every turn.
    pub fn follow_registry(&self) -> Result<Vec<WorldKind>> {
        let mut changed = Vec::new();
        if self.follow(&self.inner.significance)? {
            changed.push(WorldKind::SignificanceGate);
        }
        if self.follow(&self.inner.topic)? {
            changed.push(WorldKind::TopicDirective);
        }
        if self.follow(&self.inner.memory_policy)? {
            changed.push(WorldKind::MemoryPolicy);
        }
        Ok(changed)
    }

    fn follow<W: World>(&self, world: &WorldSlot<W>) -> Result<bool> {
        let _one = self.inner.install.lock();
        let registry = self.inner.registry.as_ref();
        let Some(bytes) = registry.get(Collection::State, &plugin_key(W::KIND))? else {
            return Ok(false);
        };
        let record: InstalledPlugin = serde_json::from_slice(&bytes).map_err(|e| {
            PolicyError::records(format!(
                "the registry's record of the {} plugin does not decode: {e}",
                W::KIND
            ))
        })?;
        if world.serving.lock().1.generation == record.generation {
            return Ok(false);
        }
        let wasm = if record.builtin {
            builtin_for(W::KIND).wasm.to_vec()
        } else {
            registry
                .get(Collection::State, &wasm_key(&record.content_hash))?
                .ok_or_else(|| {
                    PolicyError::records(format!(
                        "the component of {} ({}) is missing from the registry",
                        record.plugin, record.content_hash
                    ))
                })?
        };
        if blake3_hex(&wasm) != record.content_hash {
            // Another build's default, or a damaged component: keep serving.
            tracing::warn!(
                world = %W::KIND, plugin = %record.plugin, generation = %record.generation,
                "cluster: the registry names a component this node cannot match; not following"
            );
            return Ok(false);
        }
        let prepared = self
            .inner
            .host
            .prepare::<W>(&record.plugin, &wasm)?
            .at_generation(record.generation.number());
        let generation = world.slot.swap(&prepared)?;
        tracing::info!(world = %W::KIND, plugin = %record.plugin, %generation, "cluster: serving the plugin another node installed");
        *world.serving.lock() = (prepared, record);
        Ok(true)
    }

    fn install_in<W: World>(
        &self,
        world: &WorldSlot<W>,
        name: &str,
        wasm: &[u8],
    ) -> Result<InstallReport> {
        let prepared = self.inner.host.prepare::<W>(name, wasm)?;
        let previous = world.slot.generation();
        let generation = world.slot.swap(&prepared)?;
        let record = InstalledPlugin {
            world: W::KIND,
            plugin: name.to_owned(),
            content_hash: prepared.content_hash(),
            generation: generation.clone(),
            installed_at: self.inner.memory.clock().now(),
            builtin: false,
            size_bytes: wasm.len() as u64,
        };
        let old = std::mem::replace(
            &mut *world.serving.lock(),
            (prepared.clone(), record.clone()),
        );
        if let Err(error) = self.persist(&record, wasm, &old.1) {
            // Serve what is persisted again, under its own generation id.
            tracing::error!(%error, world = %W::KIND, "could not persist the plugin; swapping back");
            let number = old.1.generation.number();
            let restored = world.slot.swap(&old.0.clone().at_generation(number));
            *world.serving.lock() = old;
            if let Err(swap_back) = restored {
                tracing::error!(error = %swap_back, "swapping back failed");
            }
            return Err(error);
        }
        tracing::info!(world = %W::KIND, plugin = name, from = %previous, to = %generation, "plugin installed");
        Ok(InstallReport {
            world: W::KIND,
            plugin: name.to_owned(),
            content_hash: record.content_hash,
            previous_generation: previous,
            generation,
            compile: match prepared.cache_outcome() {
                crate::CacheOutcome::Disk => "disk",
                crate::CacheOutcome::Memory => "memory",
                _ => "compiled",
            }
            .to_owned(),
        })
    }

    fn persist(&self, record: &InstalledPlugin, wasm: &[u8], old: &InstalledPlugin) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put(
            Collection::State,
            wasm_key(&record.content_hash),
            wasm.to_vec(),
        );
        let still_used = self
            .installed()
            .iter()
            .any(|p| !p.builtin && p.content_hash == old.content_hash);
        if !old.builtin && old.content_hash != record.content_hash && !still_used {
            batch.delete(Collection::State, wasm_key(&old.content_hash));
        }
        self.record_serving(&mut batch)?;
        self.inner.registry.apply(batch)?;
        self.inner.memory.sync()?;
        Ok(())
    }

    /// Adds the three registry records and the next generation number to
    /// `batch`.
    fn record_serving(&self, batch: &mut WriteBatch) -> Result<()> {
        let installed = self.installed();
        let held = self.held();
        let mut next = read_next_generation(self.inner.registry.as_ref())?;
        for record in &installed {
            next = next.max(record.generation.number() + 1);
            // A held world keeps the operator's record as it is.
            if held.iter().any(|(world, _)| *world == record.world) {
                continue;
            }
            let value = serde_json::to_vec(record)
                .map_err(|e| PolicyError::records_from("encoding the registry", e))?;
            batch.put(Collection::State, plugin_key(record.world), value);
        }
        batch.put(
            Collection::State,
            NEXT_GENERATION.to_vec(),
            next.to_be_bytes().to_vec(),
        );
        Ok(())
    }

    /// The worlds held closed (an installed plugin that cannot be served),
    /// with why: each answers only with its fail-safe until a plugin is
    /// installed.
    pub fn held(&self) -> Vec<(WorldKind, String)> {
        [
            (
                WorldKind::SignificanceGate,
                self.inner.significance.slot.held(),
            ),
            (WorldKind::TopicDirective, self.inner.topic.slot.held()),
            (
                WorldKind::MemoryPolicy,
                self.inner.memory_policy.slot.held(),
            ),
        ]
        .into_iter()
        .filter_map(|(world, reason)| reason.map(|r| (world, r)))
        .collect()
    }

    /// The plugin each world serves, in world order.
    pub fn installed(&self) -> Vec<InstalledPlugin> {
        vec![
            self.inner.significance.serving.lock().1.clone(),
            self.inner.topic.serving.lock().1.clone(),
            self.inner.memory_policy.serving.lock().1.clone(),
        ]
    }

    /// Every world's plugin with its breaker state and logged counts, and
    /// the decision log's counters.
    pub fn list(&self) -> Result<PluginsReport> {
        let statuses = [
            self.inner.significance.slot.status(),
            self.inner.topic.slot.status(),
            self.inner.memory_policy.slot.status(),
        ];
        let mut plugins = Vec::new();
        for (installed, status) in self.installed().into_iter().zip(statuses) {
            plugins.push(self.status_of(installed, &status)?);
        }
        Ok(PluginsReport {
            plugins,
            decision_log: self.inner.log.stats()?,
        })
    }

    fn status_of(&self, installed: InstalledPlugin, status: &SlotStatus) -> Result<PluginStatus> {
        let counts = self.inner.log.counts(installed.generation.as_str())?;
        Ok(PluginStatus {
            breaker_open: status.breaker_open,
            consecutive_faults: status.consecutive_faults,
            last_fault: status.last_fault.as_ref().map(ToString::to_string),
            decisions: counts.decisions,
            faults: counts.faults,
            held: status.held.clone(),
            installed,
        })
    }

    /// The decision log's records matching `query`, newest first.
    pub fn log(&self, query: &DecisionQuery) -> Result<Vec<crate::DecisionRecord>> {
        self.inner.log.query(query)
    }

    /// Makes every decision so far durable.
    pub fn flush(&self) -> Result<()> {
        self.inner.log.flush()
    }
}

/// Serves `W` from its registry record, or from the built-in default.
fn restore<W: World>(
    host: &PolicyHost,
    registry: &dyn WorkspaceStore,
    now: DateTime<Utc>,
) -> Result<WorldSlot<W>> {
    let builtin = builtin_for(W::KIND);
    let stored: Option<InstalledPlugin> =
        match registry.get(Collection::State, &plugin_key(W::KIND))? {
            Some(bytes) => match serde_json::from_slice(&bytes) {
                Ok(record) => Some(record),
                Err(error) => {
                    return serve_held(
                        host,
                        now,
                        &format!("the installed plugin's record does not decode ({error})"),
                    );
                }
            },
            None => None,
        };
    if let Some(record) = stored {
        let number = record.generation.number();
        if record.builtin {
            if record.content_hash == blake3_hex(builtin.wasm) {
                let prepared = host
                    .prepare::<W>(&record.plugin, builtin.wasm)?
                    .at_generation(number);
                let slot = host.slot(&prepared)?;
                return Ok(WorldSlot {
                    slot,
                    serving: Mutex::new((prepared, record)),
                });
            }
            tracing::info!(world = %W::KIND, "the built-in default changed; serving it as a new generation");
        } else {
            match restore_installed::<W>(host, registry, &record) {
                Ok(world) => return Ok(world),
                // Fail closed: never fall back to the permissive default
                // in place of what the operator installed.
                Err(error) => {
                    return serve_held(
                        host,
                        now,
                        &format!(
                            "the installed plugin {} ({}) cannot be served: {error}; reinstall it \
                             (cairn plugins install) to serve this world again",
                            record.plugin, record.generation
                        ),
                    );
                }
            }
        }
    }
    serve_builtin(host, now)
}

/// Serves `W`'s built-in default as a new generation.
fn serve_builtin<W: World>(host: &PolicyHost, now: DateTime<Utc>) -> Result<WorldSlot<W>> {
    let builtin = builtin_for(W::KIND);
    let prepared = host.prepare::<W>(builtin.name, builtin.wasm)?;
    let slot = host.slot(&prepared)?;
    let record = InstalledPlugin {
        world: W::KIND,
        plugin: builtin.name.to_owned(),
        content_hash: prepared.content_hash(),
        generation: slot.generation(),
        installed_at: now,
        builtin: true,
        size_bytes: builtin.wasm.len() as u64,
    };
    Ok(WorldSlot {
        slot,
        serving: Mutex::new((prepared, record)),
    })
}

/// A world whose installed plugin cannot be served: the built-in default
/// sits in the slot for its machinery, but the slot is held closed (every
/// decision is the fail-safe) until the operator installs a plugin, and the
/// registry's record of the operator's plugin is left as it is.
fn serve_held<W: World>(
    host: &PolicyHost,
    now: DateTime<Utc>,
    reason: &str,
) -> Result<WorldSlot<W>> {
    let world = serve_builtin::<W>(host, now)?;
    world.slot.hold(reason);
    Ok(world)
}

fn restore_installed<W: World>(
    host: &PolicyHost,
    registry: &dyn WorkspaceStore,
    record: &InstalledPlugin,
) -> Result<WorldSlot<W>> {
    let wasm = registry
        .get(Collection::State, &wasm_key(&record.content_hash))?
        .ok_or_else(|| {
            PolicyError::records(format!(
                "the component of {} ({}) is missing from the registry",
                record.plugin, record.content_hash
            ))
        })?;
    if blake3_hex(&wasm) != record.content_hash {
        return Err(PolicyError::records(format!(
            "the stored component of {} does not match its hash {}",
            record.plugin, record.content_hash
        )));
    }
    let prepared = host
        .prepare::<W>(&record.plugin, &wasm)?
        .at_generation(record.generation.number());
    let slot = host.slot(&prepared)?;
    Ok(WorldSlot {
        slot,
        serving: Mutex::new((prepared, record.clone())),
    })
}

fn builtin_for(world: WorldKind) -> BuiltinPlugin {
    match world {
        WorldKind::TopicDirective => defaults::TOPIC,
        WorldKind::MemoryPolicy => defaults::MEMORY_POLICY,
        _ => defaults::SIGNIFICANCE,
    }
}

fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn plugin_key(world: WorldKind) -> Vec<u8> {
    format!("p:{world}").into_bytes()
}

fn wasm_key(hash: &str) -> Vec<u8> {
    format!("w:{hash}").into_bytes()
}

fn read_next_generation(registry: &dyn WorkspaceStore) -> Result<u64> {
    match registry.get(Collection::State, NEXT_GENERATION)? {
        None => Ok(1),
        Some(bytes) => {
            let array: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
                PolicyError::records("the registry's next generation is not 8 bytes")
            })?;
            Ok(u64::from_be_bytes(array))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use cairn_memory::{MemoryConfig, SystemClock};

    use crate::{
        Action, ContentFidelity, ContentReference, Destination, ObjectKind, Outcome, Sensitivity,
    };

    /// Memory on the matrix's store and the default policies over it.
    pub(crate) fn open(dir: &Path) -> Result<(Memory, Policies)> {
        let memory =
            cairn_memory::testing::memory(dir, MemoryConfig::default(), Arc::new(SystemClock))?;
        let policies = Policies::open(&memory, dir, &PolicyConfig::default())?;
        Ok((memory, policies))
    }

    /// `policies.call_deadline_ms` reaches every slot's limits, and a value
    /// out of range is refused naming the key.
    #[test]
    fn the_call_deadline_is_configured_and_checked() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| PolicyError::records(e.to_string()))?;
        let memory = cairn_memory::testing::memory(
            dir.path(),
            MemoryConfig::default(),
            Arc::new(SystemClock),
        )?;
        let config = PolicyConfig {
            call_deadline_ms: 7,
            ..PolicyConfig::default()
        };
        let policies = Policies::open(&memory, dir.path(), &config)?;
        let deadline = std::time::Duration::from_millis(7);
        assert_eq!(policies.significance().status().limits.deadline, deadline);
        assert_eq!(policies.topic().status().limits.deadline, deadline);
        assert_eq!(policies.memory_policy().status().limits.deadline, deadline);
        for bad in [0, 60_001] {
            let config = PolicyConfig {
                call_deadline_ms: bad,
                ..PolicyConfig::default()
            };
            let err = config.validate().expect_err("out of range");
            assert!(err.contains("policies.call_deadline_ms"), "{err}");
        }
        Ok(())
    }

    /// A writer that stopped (a panic) is counted and reported; decisions
    /// go on without waiting for it.
    #[test]
    fn a_stopped_decision_writer_is_reported_not_silent() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| PolicyError::records(e.to_string()))?;
        let (_memory, policies) = open(dir.path())?;
        ask(&policies)?;
        policies.decision_log().lose_writer();
        for _ in 0..3 {
            ask(&policies)?;
        }
        let stats = policies.decision_log().stats()?;
        assert!(!stats.writer_running, "{stats:?}");
        assert_eq!(stats.lost_writer_gone, 3, "{stats:?}");
        Ok(())
    }

    fn ask(policies: &Policies) -> Result<Decided<MemoryPolicyDecision>> {
        ask_about(policies, "e-1")
    }

    /// The memory policy's decision on rendering entry `id` inline for a
    /// local model.
    pub(crate) fn ask_about(
        policies: &Policies,
        id: &str,
    ) -> Result<Decided<MemoryPolicyDecision>> {
        policies.check_memory(&request_about(id))
    }

    /// The request [`ask_about`] asks.
    pub(crate) fn request_about(id: &str) -> PolicyRequest {
        let object = ContentReference {
            kind: ObjectKind::Entry,
            id: id.into(),
            work_context_id: None,
            session_id: None,
            sensitivity: Sensitivity::Normal,
            low_trust: false,
        };
        PolicyRequest::new(object, Action::RenderInline, Some(Destination::LocalModel))
    }

    /// An installed memory policy that cannot be restored is not replaced
    /// by the permissive default: the world is held closed (deny), the
    /// operator's record is kept, and installing a plugin serves it again.
    #[test]
    fn an_unrestorable_plugin_fails_closed() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| PolicyError::Config(e.to_string()))?;
        let custom = defaults::EXAMPLE_CUSTOM;
        {
            let (memory, policies) = open(dir.path())?;
            policies.install(WorldKind::MemoryPolicy, custom.name, custom.wasm)?;
            // The component's bytes go missing (a damaged registry).
            let mut batch = WriteBatch::default();
            batch.delete(Collection::State, wasm_key(&blake3_hex(custom.wasm)));
            memory.system(PLUGINS_NAMESPACE)?.apply(batch)?;
            memory.sync()?;
        }
        let (memory, policies) = open(dir.path())?;
        let held = policies.held();
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].0, WorldKind::MemoryPolicy);
        assert!(held[0].1.contains(custom.name), "{}", held[0].1);
        let decided = ask(&policies)?;
        assert_eq!(decided.outcome, Outcome::CircuitOpen);
        assert_eq!(decided.decision.content_fidelity, ContentFidelity::None);
        // The operator's record is kept, not overwritten with the default.
        let registry = memory.system(PLUGINS_NAMESPACE)?;
        let stored = registry
            .get(Collection::State, &plugin_key(WorldKind::MemoryPolicy))?
            .unwrap_or_default();
        let record: InstalledPlugin =
            serde_json::from_slice(&stored).map_err(|e| PolicyError::Config(e.to_string()))?;
        assert_eq!(record.plugin, custom.name);
        let listed = policies.list()?;
        assert!(listed.plugins.iter().any(|p| p.held.is_some()));
        // Reinstalling serves the world again.
        policies.install(WorldKind::MemoryPolicy, custom.name, custom.wasm)?;
        assert!(policies.held().is_empty());
        assert!(ask(&policies)?.outcome.is_plugin());
        Ok(())
    }
}
