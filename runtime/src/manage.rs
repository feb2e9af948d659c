//! The facade's writes to the memory log, the subject registry, pins and
//! erasure, and the administration of policy plugins: what the CLI, HTTP
//! and a host's own tooling call, so that no surface needs the memory core.
//!
//! Each write is validated whole before anything is stored (a batch with
//! one bad item writes nothing, and the error names the item) and wakes the
//! search worker so the indexes follow.

use std::sync::Arc;

use cairn_memory::{
    Entry, EntryInput, ForgetTarget, MemoryError, Subject, SubjectKind, Tombstone, TombstoneTarget,
};
use cairn_policies::{
    Decided, DecisionLogStats, DecisionQuery, DecisionRecord, GenerationCounts, InstallReport,
    MemoryPolicyDecision, PluginsReport, PolicyGenerationId, PolicyRequest, SlotStatus, WorldKind,
};

use crate::access::{AccessToken, TokenScope};
use crate::error::{CairnError, Result};
use crate::host::Cairn;

/// Reads a world's name as the CLI and the HTTP API accept it: the WIT
/// world (`significance-gate`, `topic-directive`, `memory-policy`) or its
/// short form (`significance`, `topic`, `memory`).
///
/// ```
/// use cairn::{WorldKind, parse_world};
///
/// assert_eq!(parse_world("significance").unwrap(), WorldKind::SignificanceGate);
/// assert!(parse_world("gatekeeper").is_err());
/// ```
pub fn parse_world(name: &str) -> Result<WorldKind> {
    match name {
        "significance-gate" | "significance" => Ok(WorldKind::SignificanceGate),
        "topic-directive" | "topic" => Ok(WorldKind::TopicDirective),
        "memory-policy" | "memory" => Ok(WorldKind::MemoryPolicy),
        other => Err(CairnError::UnknownWorld(other.chars().take(64).collect())),
    }
}

impl Cairn {
    /// Appends memory-log entries atomically (all or none); returns them
    /// as stored, with their ids. A caller's entry may not claim a
    /// `gate_generation` (only captures record one): `invalid`.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, EntryInput, EntryKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let stored = cairn.append_entries("acme", &[EntryInput::new(EntryKind::Decision, "Use Postgres 16")])?;
    /// assert_eq!(cairn.entry("acme", &stored[0].id, None)?.entry.content, "Use Postgres 16");
    /// let mut forged = EntryInput::new(EntryKind::Fact, "x");
    /// forged.gate_generation = Some("significance-default@0#1".into());
    /// assert!(cairn.append_entries("acme", &[forged]).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn append_entries(&self, workspace: &str, entries: &[EntryInput]) -> Result<Vec<Entry>> {
        caller_written(entries)?;
        let stored = self
            .memory()
            .workspace(workspace)?
            .append_entries(entries)?;
        self.nudge_search();
        Ok(stored)
    }

    /// Appends one memory-log entry (see [`append_entries`](Self::append_entries)).
    pub fn append_entry(&self, workspace: &str, entry: &EntryInput) -> Result<Entry> {
        caller_written(std::slice::from_ref(entry))?;
        let stored = self.memory().workspace(workspace)?.append_entry(entry)?;
        self.nudge_search();
        Ok(stored)
    }

    /// The workspace's subjects, with their aliases.
    pub fn subjects(&self, workspace: &str) -> Result<Vec<Subject>> {
        Ok(self.memory().existing_workspace(workspace)?.subjects()?)
    }

    /// Registers a subject (a kebab-case slug); `subject_exists` when the
    /// slug or an alias of it is taken.
    pub fn add_subject(
        &self,
        workspace: &str,
        slug: &str,
        kind: SubjectKind,
        display: Option<&str>,
    ) -> Result<Subject> {
        Ok(self
            .memory()
            .workspace(workspace)?
            .add_subject(slug, kind, display)?)
    }

    /// Renames a subject; the old slug stays an alias, so entries about it
    /// resolve to the new one.
    pub fn rename_subject(&self, workspace: &str, old: &str, new: &str) -> Result<Subject> {
        Ok(self
            .memory()
            .existing_workspace(workspace)?
            .rename_subject(old, new)?)
    }

    /// Merges subject `from` into `into` (`from` becomes an alias of it).
    pub fn merge_subjects(&self, workspace: &str, from: &str, into: &str) -> Result<Subject> {
        Ok(self
            .memory()
            .existing_workspace(workspace)?
            .merge_subjects(from, into)?)
    }

    /// Pins an entry: a hard invariant of every block assembled in the
    /// workspace from now on.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, EntryInput, EntryKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let e = cairn.append_entry("acme", &EntryInput::new(EntryKind::Fact, "The API is v2"))?;
    /// cairn.pin("acme", &e.id)?;
    /// assert_eq!(cairn.pinned("acme")?, vec![e.id.clone()]);
    /// cairn.unpin("acme", &e.id)?;
    /// assert!(cairn.pinned("acme")?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pin(&self, workspace: &str, entry: &str) -> Result<()> {
        Ok(self.memory().existing_workspace(workspace)?.pin(entry)?)
    }

    /// Unpins an entry (a no-op when it is not pinned).
    pub fn unpin(&self, workspace: &str, entry: &str) -> Result<()> {
        Ok(self.memory().existing_workspace(workspace)?.unpin(entry)?)
    }

    /// The pinned entry ids, in id order.
    pub fn pinned(&self, workspace: &str) -> Result<Vec<String>> {
        Ok(self.memory().existing_workspace(workspace)?.pinned()?)
    }

    /// Erases a session, an entry, a subject or the whole workspace and
    /// leaves an audited tombstone (with `reason`). Atomic and durable when
    /// it returns. A workspace target must name `workspace` itself: no call
    /// on one workspace erases another.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, ForgetTarget, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "forget me")])?;
    /// cairn.forget("acme", &ForgetTarget::Session("s1".into()), "user asked")?;
    /// assert!(cairn.transcript("acme", "s1", 0, None, None).is_err());
    /// assert_eq!(cairn.tombstones("acme")?.len(), 1);
    /// let other = cairn.forget("acme", &ForgetTarget::Workspace("globex".into()), "oops");
    /// assert_eq!(other.unwrap_err().kind(), cairn::ErrorKind::Invalid);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forget(
        &self,
        workspace: &str,
        target: &ForgetTarget,
        reason: &str,
    ) -> Result<Tombstone> {
        let tombstone = match target {
            ForgetTarget::Workspace(id) if id == workspace => {
                let sessions = match self.memory().existing_workspace(workspace) {
                    Ok(ws) => ws.sessions(None)?,
                    Err(_) => Vec::new(),
                };
                let tombstone = self.memory().forget_workspace(workspace, reason)?;
                self.actors.forget_workspace(workspace);
                // The decision log (store-wide) names it and its sessions.
                let ids: Vec<String> = sessions.into_iter().map(|s| s.id).collect();
                self.policies()
                    .decision_log()
                    .scrub_workspace(workspace, &ids)?;
                self.memory().sync()?;
                tombstone
            }
            ForgetTarget::Workspace(id) => {
                return Err(MemoryError::Invalid {
                    what: "forget target",
                    reason: format!(
                        "workspace {id:?} is not the workspace asked on ({workspace:?}); \
                         a workspace can only erase itself"
                    ),
                }
                .into());
            }
            target => {
                let ws = self.memory().existing_workspace(workspace)?;
                let work_context = match target {
                    ForgetTarget::Session(session) => Some(ws.session(session)?.work_context),
                    _ => None,
                };
                match (target, work_context) {
                    (ForgetTarget::Session(session), Some(wc)) => {
                        let tombstone =
                            self.actors.forget_session(workspace, session, &wc, || {
                                ws.forget(target, reason)
                            })?;
                        self.policies()
                            .decision_log()
                            .scrub_session(workspace, session)?;
                        self.memory().sync()?;
                        tombstone
                    }
                    _ => ws.forget(target, reason)?,
                }
            }
        };
        self.nudge_search();
        // The erased bytes leave the store's files within the erasure bound.
        self.eraser.wake();
        Ok(tombstone)
    }

    /// What the online erasure worker has done, and how many forgets still
    /// wait for it (docs/DURABILITY.md, *Erasure on disk*).
    pub fn erasure_stats(&self) -> Result<crate::eraser::ErasureStats> {
        Ok(self.eraser.stats()?)
    }

    /// The hashed form of `target` a tombstone of `workspace` records:
    /// compare it with the tombstones to learn whether a name was erased
    /// (tombstones never hold the name itself).
    pub fn tombstone_target(
        &self,
        workspace: &str,
        target: &ForgetTarget,
    ) -> Result<TombstoneTarget> {
        cairn_memory::ids::validate_id("workspace id", workspace)?;
        Ok(self.memory().tombstone_target(target))
    }

    /// The tombstones about `workspace`: its own (sessions, entries,
    /// subjects erased) and, when the whole workspace was erased, that one.
    /// Other workspaces' tombstones are never listed.
    pub fn tombstones(&self, workspace: &str) -> Result<Vec<Tombstone>> {
        let erased = self
            .memory()
            .tombstone_target(&ForgetTarget::Workspace(workspace.to_owned()));
        let mut all: Vec<Tombstone> = self
            .memory()
            .workspace_tombstones()?
            .into_iter()
            .filter(|t| t.workspace == erased.digest)
            .collect();
        if self.memory().workspaces()?.iter().any(|w| w == workspace) {
            all.extend(self.memory().existing_workspace(workspace)?.tombstones()?);
        }
        Ok(all)
    }

    /// Makes an access token that opens `workspace` for `scope` (see
    /// `cairn serve`'s authentication in docs/SECURITY.md). Returns the
    /// listing and the token itself (`cairn_<id>_<secret>`), shown this
    /// once: only a keyed hash of the secret is stored.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, TokenScope};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let (made, token) = cairn.create_token("acme", TokenScope::Read, Some("dashboard"))?;
    /// assert_eq!(cairn.verify_token(&token)?.map(|t| t.workspace), Some("acme".to_owned()));
    /// assert_eq!(cairn.tokens()?.len(), 1);
    /// cairn.revoke_token(&made.id)?;
    /// assert!(cairn.verify_token(&token)?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_token(
        &self,
        workspace: &str,
        scope: TokenScope,
        label: Option<&str>,
    ) -> Result<(AccessToken, String)> {
        let made = self.access.create(self.memory(), workspace, scope, label)?;
        tracing::info!(id = %made.0.id, scope = made.0.scope.as_str(), "access token made");
        Ok(made)
    }

    /// Every stored access token, without secrets, oldest first.
    pub fn tokens(&self) -> Result<Vec<AccessToken>> {
        Ok(self.access.list()?)
    }

    /// Revokes access token `id` (`not_found` when there is none); it opens
    /// nothing from the next request on.
    pub fn revoke_token(&self, id: &str) -> Result<AccessToken> {
        let revoked = self.access.revoke(id)?;
        tracing::info!(id = %revoked.id, "access token revoked");
        Ok(revoked)
    }

    /// The live access token `presented` is, or `None` (malformed, unknown,
    /// revoked, or made for an erased workspace of the same name). Answered
    /// from memory: the tokens are read from the store once, kept current
    /// by this process's changes, and read again by
    /// [`Cairn::reload_tokens`].
    pub fn verify_token(&self, presented: &str) -> Result<Option<AccessToken>> {
        Ok(self.access.verify(self.memory(), presented)?)
    }

    /// Whether any access token is stored (a server with one requires
    /// authentication); from memory, like [`Cairn::verify_token`].
    pub fn has_tokens(&self) -> Result<bool> {
        Ok(self.access.has_tokens()?)
    }

    /// Reads the access tokens from the store again (blocking), so tokens
    /// another process made or revoked in a shared store count here.
    pub fn reload_tokens(&self) -> Result<()> {
        Ok(self.access.reload()?)
    }

    /// Starts a supervised worker (`token-refresher` in
    /// [`Cairn::health`]) that reads the access tokens again every
    /// `period`, for a server on a store other processes share
    /// (PostgreSQL: the CLI, other nodes), so what they make or revoke
    /// counts here within `period`. A pass that fails or panics is logged
    /// and counted, and the next one runs. The worker ends when the last
    /// handle on this memory is dropped.
    pub fn refresh_tokens_every(&self, period: std::time::Duration) {
        // Weak handles: the memory (which holds the tokens too) closes when
        // its users are done, not when this thread next wakes.
        let memory = self.memory().downgrade();
        let access = Arc::downgrade(&self.access);
        let supervised = self.memory().workers().worker("token-refresher");
        let spawned = std::thread::Builder::new()
            .name("cairn-tokens".to_owned())
            .spawn(move || {
                supervised.set_running(true);
                loop {
                    std::thread::sleep(period);
                    let (Some(_memory), Some(access)) = (memory.upgrade(), access.upgrade()) else {
                        break;
                    };
                    if let Some(Err(error)) = supervised.pass(|| access.reload()) {
                        tracing::warn!(%error, "cannot read the access tokens again; the ones read before stay in force");
                    }
                }
                supervised.set_running(false);
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start the token refresher: tokens other processes make or revoke count only after a restart");
        }
    }

    /// Each world's plugin: generation, hash, breaker, decisions and faults,
    /// and the decision log's state.
    pub fn plugins(&self) -> Result<PluginsReport> {
        Ok(self.policies().list()?)
    }

    /// Installs (or swaps in) `wasm` as `world`'s plugin under `name` and
    /// serves it at once: compiles it (or loads it from the compile cache),
    /// checks it implements the world, starts its instances (each makes a
    /// canary decision), swaps it in atomically, then persists it (a restart
    /// serves it). The decision log is flushed before it returns.
    ///
    /// Refused, with nothing changed or written: a component larger than
    /// `policies.max_plugin_bytes` (`plugin_too_large`), a bad name, bytes
    /// that are not a component, a component of another world, one that
    /// cannot start or faults on its canary.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, WorldKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let quiet = cairn::worlds::defaults::EXAMPLE_QUIET;
    /// let report = cairn.install_plugin(WorldKind::SignificanceGate, "quiet", quiet.wasm)?;
    /// assert!(report.generation.number() > report.previous_generation.number());
    /// assert!(cairn.install_plugin(WorldKind::SignificanceGate, "junk", b"not wasm").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn install_plugin(
        &self,
        world: WorldKind,
        name: &str,
        wasm: &[u8],
    ) -> Result<InstallReport> {
        let report = self.policies().install(world, name, wasm)?;
        self.policies().flush()?;
        Ok(report)
    }

    /// The live state of the slot serving `world`: its plugin and
    /// generation, plugin calls and faults made in this generation by this
    /// process, its circuit breaker, instance pool and limits. A world this
    /// cairn does not host is `unknown_world`.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, WorldKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let quiet = cairn::worlds::defaults::EXAMPLE_QUIET;
    /// cairn.install_plugin(WorldKind::SignificanceGate, "quiet", quiet.wasm)?;
    /// let slot = cairn.plugin_slot_status(WorldKind::SignificanceGate)?;
    /// assert_eq!(slot.plugin, "quiet");
    /// assert!(!slot.breaker_open);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn plugin_slot_status(&self, world: WorldKind) -> Result<SlotStatus> {
        let policies = self.policies();
        match world {
            WorldKind::SignificanceGate => Ok(policies.significance().status()),
            WorldKind::TopicDirective => Ok(policies.topic().status()),
            WorldKind::MemoryPolicy => Ok(policies.memory_policy().status()),
            other => Err(CairnError::UnknownWorld(other.to_string())),
        }
    }

    /// The generation serving `world` now (`name@hash#n`): what the
    /// decisions it makes from here on record. A world this cairn does not
    /// host is `unknown_world`.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, WorldKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let before = cairn.plugin_generation(WorldKind::SignificanceGate)?;
    /// let quiet = cairn::worlds::defaults::EXAMPLE_QUIET;
    /// let report = cairn.install_plugin(WorldKind::SignificanceGate, "quiet", quiet.wasm)?;
    /// assert_eq!(report.previous_generation, before);
    /// assert_eq!(cairn.plugin_generation(WorldKind::SignificanceGate)?, report.generation);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn plugin_generation(&self, world: WorldKind) -> Result<PolicyGenerationId> {
        let policies = self.policies();
        match world {
            WorldKind::SignificanceGate => Ok(policies.significance().generation()),
            WorldKind::TopicDirective => Ok(policies.topic().generation()),
            WorldKind::MemoryPolicy => Ok(policies.memory_policy().generation()),
            other => Err(CairnError::UnknownWorld(other.to_string())),
        }
    }

    /// Asks the installed memory policy whether `request` (an object, an
    /// action, a destination, a principal) may go ahead, and how. A plugin
    /// fault is not an error: the decision is then the world's fail-safe,
    /// deny, and [`Decided::outcome`] says what happened. The decision is in
    /// the decision log with the generation that made it.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, WorldKind};
    /// use cairn::worlds::{Action, ContentReference, Destination, ObjectKind, PolicyRequest, Sensitivity};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let entry = ContentReference {
    ///     kind: ObjectKind::Entry,
    ///     id: "e-42".into(),
    ///     work_context_id: Some("launch".into()),
    ///     session_id: None,
    ///     sensitivity: Sensitivity::Normal,
    ///     low_trust: false,
    /// };
    /// let request = PolicyRequest::new(entry, Action::RenderInline, Some(Destination::LocalModel));
    /// let decided = cairn.check_memory(&request)?;
    /// assert!(decided.outcome.is_plugin());
    /// assert_eq!(decided.generation, cairn.plugin_generation(WorldKind::MemoryPolicy)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_memory(&self, request: &PolicyRequest) -> Result<Decided<MemoryPolicyDecision>> {
        Ok(self.policies().check_memory(request)?)
    }

    /// The durable decision log, newest first, filtered by `query` (every
    /// decision made so far is flushed first).
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, DecisionQuery, WorldKind};
    /// use cairn::worlds::{Action, ContentReference, ObjectKind, PolicyRequest, Sensitivity};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let entry = ContentReference {
    ///     kind: ObjectKind::Entry,
    ///     id: "e-42".into(),
    ///     work_context_id: None,
    ///     session_id: None,
    ///     sensitivity: Sensitivity::Normal,
    ///     low_trust: false,
    /// };
    /// let decided = cairn.check_memory(&PolicyRequest::new(entry, Action::RenderInline, None))?;
    /// let query = DecisionQuery { world: Some(WorldKind::MemoryPolicy), ..DecisionQuery::default() };
    /// let logged = cairn.decisions(&query)?;
    /// assert_eq!(logged[0].generation, decided.generation);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decisions(&self, query: &DecisionQuery) -> Result<Vec<DecisionRecord>> {
        self.policies().flush()?;
        Ok(self.policies().log(query)?)
    }

    /// Decisions and faults one policy generation (`name@hash#n`) made, as
    /// the durable decision log counted them; zero for one that never decided.
    pub fn generation_counts(&self, generation: &str) -> Result<GenerationCounts> {
        Ok(self.policies().decision_log().counts(generation)?)
    }

    /// The decision log's counters: records written and kept, records this
    /// process dropped or failed to write, whether its writer runs, and its
    /// segment files' size. The same as [`PluginsReport::decision_log`]
    /// (`cairn plugins list`), without the plugins.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let stats = cairn.decision_log_stats()?;
    /// assert!(stats.writer_running);
    /// assert_eq!(stats.dropped, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decision_log_stats(&self) -> Result<DecisionLogStats> {
        Ok(self.policies().decision_log().stats()?)
    }

    /// Settles what was handed to cairn so far: waits until the actors have
    /// judged every acknowledged turn (the significance gate runs behind the
    /// acknowledgement), then makes every decision recorded durable (the
    /// decision log writes in batches). A process calls it before it exits.
    pub fn flush(&self) -> Result<()> {
        self.actors.settle()?;
        // The topic gate's records are written without their own fsync.
        self.memory().sync()?;
        Ok(self.policies().flush()?)
    }
}

/// A caller's entry cannot claim a significance-gate generation: only a
/// capture records which gate made its context dirty.
fn caller_written(entries: &[EntryInput]) -> Result<()> {
    for (index, entry) in entries.iter().enumerate() {
        if entry.gate_generation.is_some() {
            return Err(MemoryError::InBatch {
                index,
                source: Box::new(MemoryError::Invalid {
                    what: "gate_generation",
                    reason: "only a capture records the gate generation of an entry".to_owned(),
                }),
            }
            .into());
        }
    }
    Ok(())
}
