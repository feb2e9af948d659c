//! Audited erasure.
//!
//! `forget` is the one exception to immutability: it removes content from
//! every store that holds it and leaves a [`Tombstone`] saying what was erased,
//! when and why. Tombstones hold counts and a keyed hash of what was erased
//! ([`TombstoneTarget`]), never the erased content nor its name: a session id
//! or a subject slug can be a person's name. Whether something was erased is
//! answered by hashing the name again ([`Workspace::tombstone_target`]).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::ids::{validate_id, validate_slug};
use crate::log::Entry;
use crate::memory::{Memory, Workspace, check_size, decode, encode};
use crate::record::{session_prefix, work_context_key};
use crate::store::{Collection, MaintFamily, MaintKey, StateFamily, StateKey, WriteBatch, WriteOp};

/// Where the tombstones of erased workspaces live in the store-wide space.
const WORKSPACE_TOMBSTONE_PREFIX: &[u8] = b"tombstone/";
/// A workspace erasure under way: `erasing/<tombstone id>` holds the
/// workspace id until the erasure is complete (the tombstone holds only its
/// hash), so a crash between the steps can be finished.
const ERASING_PREFIX: &[u8] = b"erasing/";
/// A forget whose bytes may still be in the store's files:
/// `erasure/pending/<ulid>`, deleted once the store was compacted after it.
const PENDING_PREFIX: &[u8] = b"erasure/pending/";
/// The key-derivation context of tombstone hashes.
const TOMBSTONE_KEY_CONTEXT: &str = "cairn tombstone targets v1";

/// What a layer above the core keeps about a workspace outside it, in the
/// store-wide space (the server's access tokens, in `cairn`'s `access`
/// module), to be erased with the workspace in the erasure's own durable
/// step: once the erasure's first sync returns, nothing of it opens or
/// names the workspace that takes the name next.
///
/// Handed to [`Memory::open_with`], which keeps them for the life of the
/// memory; [`Memory::forget_workspace`] calls each, and so does the
/// recovery of an erasure a crash interrupted (when the memory opens). The
/// core knows no more of them than this.
///
/// ```
/// use std::sync::Arc;
/// use cairn_memory::forget::ErasedWithWorkspace;
/// use cairn_memory::store::SledStore;
/// use cairn_memory::{ForgetTarget, Memory, MemoryConfig, Result, Role, SystemClock, TurnInput};
///
/// #[derive(Debug, Default)]
/// struct Erased(std::sync::Mutex<Vec<String>>);
///
/// impl ErasedWithWorkspace for Erased {
///     fn erase_workspace(&self, _memory: &Memory, workspace: &str) -> Result<usize> {
///         self.0.lock().unwrap().push(workspace.to_owned());
///         Ok(1)
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// let erased = Arc::new(Erased::default());
/// let store = Arc::new(SledStore::open(dir.path())?);
/// let memory = Memory::open_with(store, MemoryConfig::default(), Arc::new(SystemClock), vec![erased.clone()])?;
/// memory.workspace("acme")?.append_turn(&TurnInput::new("s1", Role::User, "hello"))?;
/// memory.forget_workspace("acme", "closed")?;
/// assert_eq!(*erased.0.lock().unwrap(), vec!["acme".to_owned()]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait ErasedWithWorkspace: Send + Sync + std::fmt::Debug {
    /// Erases what this keeps of `workspace`, writing to the store-wide
    /// space unsynced (the erasure's sync makes it durable with the rest of
    /// its step). Called again for the same workspace when an interrupted
    /// erasure is finished, so it must be idempotent in effect. Answers how
    /// many records it erased.
    fn erase_workspace(&self, memory: &Memory, workspace: &str) -> Result<usize>;
}

/// What to erase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "target", content = "id", rename_all = "snake_case")]
pub enum ForgetTarget {
    /// A session: its metadata, every turn, its idempotency keys, every
    /// log entry whose provenance is that session (and the subjects only
    /// those entries made), what is derived from its turns (summaries,
    /// topic records, stored vectors), and its id in maintenance runs and
    /// topic subscriptions.
    Session(String),
    /// One log entry (its replacement links, which hold only ids, stay).
    Entry(String),
    /// A subject: its registry record, its aliases and every entry about it.
    Subject(String),
    /// A whole workspace.
    Workspace(String),
}

/// What a forget removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Removed {
    /// Sessions removed.
    pub sessions: u64,
    /// Turns removed.
    pub turns: u64,
    /// Log entries removed.
    pub entries: u64,
    /// Subjects removed (aliases not counted).
    pub subjects: u64,
}

/// What a tombstone says was erased: the kind, and a keyed hash of the id
/// or slug (BLAKE3 under a key derived from this install's secret), so the
/// tombstone names no one.
///
/// ```
/// # use std::sync::Arc;
/// use cairn_memory::{ForgetTarget, Memory, MemoryConfig, SystemClock};
/// let dir = tempfile::tempdir()?;
/// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
/// let ws = memory.workspace("acme")?;
/// let t = ws.tombstone_target(&ForgetTarget::Subject("dana-smith".into()));
/// assert_eq!(t.kind, "subject");
/// assert!(!t.digest.contains("dana"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TombstoneTarget {
    /// `session`, `entry`, `subject` or `workspace`.
    pub kind: String,
    /// The keyed hash of the id or slug (hex).
    pub digest: String,
}

impl ForgetTarget {
    /// The kind of target, as a tombstone names it.
    pub fn kind(&self) -> &'static str {
        match self {
            ForgetTarget::Session(_) => "session",
            ForgetTarget::Entry(_) => "entry",
            ForgetTarget::Subject(_) => "subject",
            ForgetTarget::Workspace(_) => "workspace",
        }
    }

    /// The id or slug.
    pub fn id(&self) -> &str {
        match self {
            ForgetTarget::Session(s)
            | ForgetTarget::Entry(s)
            | ForgetTarget::Subject(s)
            | ForgetTarget::Workspace(s) => s,
        }
    }
}

/// What one [`Memory::erase_pending`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErasePass {
    /// The forgets it covered (their marks, deleted).
    pub marks: usize,
    /// The rewrite of the store's files (sled); `None` where the backend
    /// vacuums instead (PostgreSQL).
    pub rewrite: Option<crate::store::RewriteReport>,
}

/// The durable record of an erasure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tombstone {
    /// Tombstone id (ULID).
    pub id: String,
    /// The workspace the erasure happened in (for the erasure of a whole
    /// workspace, its hash like the target's).
    pub workspace: String,
    /// What was erased, hashed.
    pub target: TombstoneTarget,
    /// Why (given by the caller).
    pub reason: String,
    /// When.
    pub at: DateTime<Utc>,
    /// What was removed.
    pub removed: Removed,
    /// False only between the two steps of a workspace erasure; recovery
    /// finishes such an erasure when the store is opened again.
    pub complete: bool,
}

// Erasure inside a workspace (sessions, entries, subjects) and of a whole
// workspace ([`Memory::forget_workspace`]).
impl Workspace {
    /// Erases a session, an entry or a subject (see [`ForgetTarget`]) and
    /// leaves a tombstone. Atomic; durable when it returns. Erasing a whole
    /// workspace is [`Memory::forget_workspace`].
    pub fn forget(&self, target: &ForgetTarget, reason: &str) -> Result<Tombstone> {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(MemoryError::ForgetWithoutReason);
        }
        check_size(
            "forget reason",
            reason,
            self.shared.config.limits.max_reason_bytes,
        )?;
        let mut removed = Removed::default();
        let mut batch = WriteBatch::default();
        let mut stripes = BTreeSet::from([self.shared.stripe(&self.id, "\0entries")]);
        if let ForgetTarget::Session(id) = target {
            validate_id("session id", id)?;
            stripes.insert(self.shared.stripe(&self.id, id));
        }
        let guard = self.shared.lock_stripes(stripes);
        match target {
            ForgetTarget::Session(id) => self.stage_session(id, &mut batch, &mut removed)?,
            ForgetTarget::Entry(id) => {
                validate_id("entry id", id)?;
                let Some(mut entry) = self.load_entry(id)? else {
                    return Err(MemoryError::EntryNotFound { id: id.clone() });
                };
                batch.delete(Collection::Entries, id.as_bytes().to_vec());
                removed.entries = 1;
                // The versions it replaced said the same thing earlier:
                // they go with it (the links, ids only, stay).
                let mut seen = BTreeSet::from([id.clone()]);
                while let Some(earlier) = entry.replaces.take() {
                    if !seen.insert(earlier.clone()) {
                        break;
                    }
                    let Some(previous) = self.load_entry(&earlier)? else {
                        break;
                    };
                    batch.delete(Collection::Entries, earlier.into_bytes());
                    removed.entries += 1;
                    entry = previous;
                }
            }
            ForgetTarget::Subject(slug) => {
                validate_slug(slug)?;
                let aliases = self.alias_map()?;
                let canonical = aliases.get(slug).cloned().unwrap_or_else(|| slug.clone());
                if self
                    .store
                    .get(Collection::Subjects, canonical.as_bytes())?
                    .is_none()
                {
                    return Err(MemoryError::SubjectNotFound { slug: slug.clone() });
                }
                batch.delete(Collection::Subjects, canonical.as_bytes().to_vec());
                removed.subjects = 1;
                for (alias, to) in &aliases {
                    if to == &canonical {
                        batch.delete(Collection::SubjectAliases, alias.as_bytes().to_vec());
                    }
                }
                for (key, value) in self.store.scan_prefix(Collection::Entries, b"")? {
                    let entry: Entry = decode("entry", &key, &value)?;
                    let resolved = entry
                        .subject
                        .as_deref()
                        .map(|s| aliases.get(s).cloned().unwrap_or_else(|| s.to_owned()));
                    if resolved.as_deref() == Some(canonical.as_str()) {
                        batch.delete(Collection::Entries, key);
                        removed.entries += 1;
                    }
                }
            }
            ForgetTarget::Workspace(_) => {
                return Err(MemoryError::Invalid {
                    what: "forget target",
                    reason: "erase a workspace through Memory::forget_workspace".to_owned(),
                });
            }
        }
        // What every erased entry leaves elsewhere goes in the same batch.
        let erased: BTreeSet<String> = batch
            .ops()
            .iter()
            .filter_map(|op| match op {
                WriteOp::Delete {
                    collection: Collection::Entries,
                    key,
                } => String::from_utf8(key.clone()).ok(),
                _ => None,
            })
            .collect();
        if !matches!(target, ForgetTarget::Subject(_)) {
            self.stage_orphaned_subjects(&erased, &mut batch, &mut removed)?;
        }
        // (Maintenance marks of erased entries stay: they name ids only,
        // and the runs that made them replay them.)
        for entry in erased {
            batch.delete(Collection::State, StateKey::EntryVector { entry }.encode());
        }
        let tombstone = Tombstone {
            id: ulid::Ulid::new().to_string(),
            workspace: self.id.clone(),
            target: self.tombstone_target(target),
            reason: reason.to_owned(),
            at: self.now(),
            removed,
            complete: true,
        };
        batch.put(
            Collection::Tombstones,
            tombstone.id.as_bytes().to_vec(),
            encode(&tombstone)?,
        );
        self.apply(batch)?;
        self.shared.names.clear();
        drop(guard);
        self.shared.mark_erasure()?;
        self.shared.store.sync()?;
        tracing::info!(workspace = %self.id, tombstone = %tombstone.id, kind = target.kind(), "forgotten");
        Ok(tombstone)
    }

    /// The hashed form of `target` a tombstone records: hash a name again
    /// and compare to learn whether it was erased.
    pub fn tombstone_target(&self, target: &ForgetTarget) -> TombstoneTarget {
        self.shared.tombstone_target(target)
    }

    /// Tombstones left by `forget` in this workspace, oldest first.
    pub fn tombstones(&self) -> Result<Vec<Tombstone>> {
        self.store
            .scan_prefix(Collection::Tombstones, b"")?
            .into_iter()
            .map(|(k, v)| decode("tombstone", &k, &v))
            .collect()
    }

    /// Stages the erasure of session `id`: its record, turns, idempotency
    /// keys, summaries, the entries it is the provenance of, the topic
    /// records about its turns, its stored vectors, its extraction record
    /// and capture mark, and its id wherever a record names it (maintenance
    /// runs and marks, topic subscriptions).
    fn stage_session(&self, id: &str, batch: &mut WriteBatch, removed: &mut Removed) -> Result<()> {
        let session = self.session(id)?;
        let prefix = session_prefix(id);
        for (key, _) in self.store.scan_prefix(Collection::Turns, &prefix)? {
            batch.delete(Collection::Turns, key);
            removed.turns += 1;
        }
        for (key, _) in self.store.scan_prefix(Collection::Idempotency, &prefix)? {
            batch.delete(Collection::Idempotency, key);
        }
        batch.delete(Collection::Sessions, id.as_bytes().to_vec());
        batch.delete(
            Collection::WorkContextSessions,
            work_context_key(&session.work_context, id),
        );
        removed.sessions = 1;
        // Summaries hold the session's text: they go with it.
        for (key, value) in self.store.scan_prefix(Collection::Summaries, b"")? {
            let node: crate::compact::SummaryNode = decode("summary", &key, &value)?;
            if node.session == id {
                batch.delete(Collection::Summaries, key);
            }
        }
        batch.delete(
            Collection::State,
            StateKey::CompactionView {
                session: id.to_owned(),
            }
            .encode(),
        );
        for (key, value) in self.store.scan_prefix(Collection::Entries, b"")? {
            let entry: Entry = decode("entry", &key, &value)?;
            if entry.provenance.as_ref().is_some_and(|p| p.session == id) {
                batch.delete(Collection::Entries, key);
                removed.entries += 1;
            }
        }
        // Topic memberships, proposals and gate records quote or name the
        // session's turns: they go with it.
        for key in self.topic_records_of(id)? {
            batch.delete(Collection::Topics, key);
        }
        self.stage_unsubscribe(id, batch)?;
        self.stage_maintenance_of(id, batch)?;
        // The stored embeddings of its turns (written even when no search
        // service runs now). Exactly this session's: the scan's prefix
        // (`<id>/`) also covers the sessions whose ids continue `<id>/…`.
        let mut vectors = StateFamily::TurnVector.prefix().to_vec();
        vectors.extend_from_slice(format!("{id}/").as_bytes());
        for (key, _) in self.store.scan_prefix(Collection::State, &vectors)? {
            if matches!(StateKey::decode(&key), Some(StateKey::TurnVector { session, .. }) if session == id)
            {
                batch.delete(Collection::State, key);
            }
        }
        // Its extraction record, and its capture mark: a new session with
        // the same id is captured from its first turn.
        batch.delete(
            Collection::State,
            StateKey::Extraction {
                session: id.to_owned(),
            }
            .encode(),
        );
        batch.delete(
            Collection::State,
            StateKey::SessionMark {
                work_context: session.work_context.clone(),
                session: id.to_owned(),
            }
            .encode(),
        );
        Ok(())
    }

    /// Stages the removal of session `id` from every topic's subscriptions.
    /// A topic that listened to that session alone is paused rather than
    /// left with no subscription (which would mean the whole workspace).
    fn stage_unsubscribe(&self, id: &str, batch: &mut WriteBatch) -> Result<()> {
        use crate::store::TopicKey;
        use crate::topics::{Subscription, Topic};
        for (key, value) in self.store.scan_prefix(
            Collection::Topics,
            crate::store::TopicFamily::Definition.prefix(),
        )? {
            if !matches!(TopicKey::decode(&key), Some(TopicKey::Definition { .. })) {
                continue;
            }
            let mut topic: Topic = decode("topic", &key, &value)?;
            let before = topic.spec.subscriptions.len();
            topic
                .spec
                .subscriptions
                .retain(|s| !matches!(s, Subscription::Session(s) if s == id));
            if topic.spec.subscriptions.len() == before {
                continue;
            }
            if topic.spec.subscriptions.is_empty() {
                topic.spec.paused = true;
            }
            topic.generation += 1;
            topic.updated_at = self.now();
            batch.put(Collection::Topics, key, encode(&topic)?);
        }
        Ok(())
    }

    /// Stages the removal of session `id` from the maintenance records: its
    /// archive and restore marks, and the changes about it in every run.
    fn stage_maintenance_of(&self, id: &str, batch: &mut WriteBatch) -> Result<()> {
        use crate::maintain::{Action, MaintenanceRun};
        for key in [
            MaintKey::ArchivedSession {
                session: id.to_owned(),
            },
            MaintKey::RestoredSession {
                session: id.to_owned(),
            },
        ] {
            batch.delete(Collection::Maintenance, key.encode());
        }
        for (key, value) in self
            .store
            .scan_prefix(Collection::Maintenance, MaintFamily::Run.prefix())?
        {
            let mut run: MaintenanceRun = decode("maintenance run", &key, &value)?;
            let before = run.changes.len();
            run.changes.retain(|change| {
                !matches!(&change.action,
                    Action::ArchiveSession { session, .. } | Action::RestoreSession { session, .. }
                        if session == id)
            });
            // A reason may name it among others ("stated in 3 sessions (…)").
            let mut named = false;
            for change in &mut run.changes {
                if let Some(reason) = without_id(&change.reason, id) {
                    change.reason = reason;
                    named = true;
                }
            }
            if named || run.changes.len() != before {
                batch.put(Collection::Maintenance, key, encode(&run)?);
            }
        }
        Ok(())
    }

    /// Stages the erasure of the subjects that only `erased` entries named
    /// and that nothing but those entries made: a subject registered when an
    /// entry first named it (default kind, display name and no alias) was
    /// taken from that entry's words, and goes with it. A subject some kept
    /// entry names, or that carries anything added by hand, stays.
    fn stage_orphaned_subjects(
        &self,
        erased: &BTreeSet<String>,
        batch: &mut WriteBatch,
        removed: &mut Removed,
    ) -> Result<()> {
        if erased.is_empty() {
            return Ok(());
        }
        let aliases = self.alias_map()?;
        let resolve = |slug: &str| {
            aliases
                .get(slug)
                .cloned()
                .unwrap_or_else(|| slug.to_owned())
        };
        let (mut named_by_erased, mut named_by_kept) = (BTreeSet::new(), BTreeSet::new());
        for (key, value) in self.store.scan_prefix(Collection::Entries, b"")? {
            let entry: Entry = decode("entry", &key, &value)?;
            let Some(subject) = entry.subject.as_deref() else {
                continue;
            };
            if erased.contains(entry.id.as_str()) {
                named_by_erased.insert(resolve(subject));
            } else {
                named_by_kept.insert(resolve(subject));
            }
        }
        for slug in named_by_erased.difference(&named_by_kept) {
            let Some(raw) = self.store.get(Collection::Subjects, slug.as_bytes())? else {
                continue;
            };
            let subject: crate::subjects::Subject = decode("subject", slug.as_bytes(), &raw)?;
            let by_hand = subject.kind != crate::subjects::SubjectKind::default()
                || subject.display != crate::ids::display_for_slug(slug)
                || !subject.aliases.is_empty()
                || aliases.values().any(|to| to == slug);
            if by_hand {
                continue;
            }
            batch.delete(Collection::Subjects, slug.as_bytes().to_vec());
            removed.subjects += 1;
        }
        Ok(())
    }

    /// The keys of every topic record about one session's turns.
    fn topic_records_of(&self, session: &str) -> Result<Vec<Vec<u8>>> {
        use crate::store::TopicKey;
        use crate::topics::gate::{GateRecord, Membership};
        let mut out = Vec::new();
        for (key, value) in self.store.scan_prefix(Collection::Topics, b"")? {
            let about = match TopicKey::decode(&key) {
                Some(
                    TopicKey::Member { session: s, .. }
                    | TopicKey::Proposal { session: s, .. }
                    | TopicKey::Evidence { session: s, .. }
                    | TopicKey::Candidate { session: s, .. }
                    | TopicKey::Frame { session: s, .. },
                ) => s == session,
                Some(TopicKey::Recent { .. }) => {
                    decode::<Membership>("membership", &key, &value)?
                        .turn
                        .session
                        == session
                }
                Some(TopicKey::GateLog { .. }) => {
                    decode::<GateRecord>("gate record", &key, &value)?
                        .turn
                        .session
                        == session
                }
                Some(TopicKey::Definition { .. } | TopicKey::Schedule { .. }) | None => false,
            };
            if about {
                out.push(key);
            }
        }
        Ok(out)
    }
}

/// `text` with every whole occurrence of the id `id` (not part of a longer
/// id) replaced by `(erased)`; `None` when it names it nowhere.
fn without_id(text: &str, id: &str) -> Option<String> {
    let is_id_char = |c: char| c.is_ascii_alphanumeric() || "._:@/+=-".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
    while let Some(at) = rest.find(id) {
        let (before, after) = (&rest[..at], &rest[at + id.len()..]);
        let whole = !before.ends_with(is_id_char) && !after.starts_with(is_id_char);
        out.push_str(before);
        out.push_str(if whole { "(erased)" } else { id });
        found |= whole;
        rest = after;
    }
    out.push_str(rest);
    found.then_some(out)
}

impl Memory {
    /// Erases a whole workspace and leaves a tombstone in the store-wide space.
    ///
    /// Two durable steps: the tombstone is written (incomplete) and synced, the
    /// workspace is dropped, then the tombstone is marked complete and synced.
    /// A crash between them is finished by the next [`Memory::open`].
    pub fn forget_workspace(&self, id: &str, reason: &str) -> Result<Tombstone> {
        validate_id("workspace id", id)?;
        let reason = self.check_reason(reason)?;
        let store = &self.shared.store;
        if !store.has_workspace(id)? {
            return Err(MemoryError::WorkspaceNotFound {
                workspace: id.to_owned(),
            });
        }
        let ws = self.workspace(id)?;
        let removed = Removed {
            sessions: ws.store.scan_prefix(Collection::Sessions, b"")?.len() as u64,
            turns: ws.store.scan_prefix(Collection::Turns, b"")?.len() as u64,
            entries: ws.store.scan_prefix(Collection::Entries, b"")?.len() as u64,
            subjects: ws.store.scan_prefix(Collection::Subjects, b"")?.len() as u64,
        };
        drop(ws);
        let target = self
            .shared
            .tombstone_target(&ForgetTarget::Workspace(id.to_owned()));
        let mut tombstone = Tombstone {
            id: ulid::Ulid::new().to_string(),
            workspace: target.digest.clone(),
            target,
            reason,
            at: self.shared.clock.now(),
            removed,
            complete: false,
        };
        let key = [WORKSPACE_TOMBSTONE_PREFIX, tombstone.id.as_bytes()].concat();
        let erasing = [ERASING_PREFIX, tombstone.id.as_bytes()].concat();
        store.meta_put(&erasing, id.as_bytes())?;
        store.meta_put(&key, &encode(&tombstone)?)?;
        // What the layers above keep of it outside it (the server's access
        // tokens) goes in the same durable step: none of it opens the next
        // workspace of the same name.
        let erased = self.erase_kept_outside(id)?;
        self.shared.mark_erasure()?;
        store.sync()?;
        if erased > 0 {
            tracing::info!(
                erased,
                "records kept outside the erased workspace erased with it"
            );
        }
        store.drop_workspace(id)?;
        self.shared.workspace_dropped(id);
        tombstone.complete = true;
        store.meta_put(&key, &encode(&tombstone)?)?;
        store.meta_delete(&erasing)?;
        store.sync()?;
        tracing::info!(tombstone = %tombstone.id, "workspace forgotten");
        Ok(tombstone)
    }

    /// The hashed form of `target` a tombstone records (see
    /// [`Workspace::tombstone_target`]).
    pub fn tombstone_target(&self, target: &ForgetTarget) -> TombstoneTarget {
        self.shared.tombstone_target(target)
    }

    /// Tombstones of erased workspaces, oldest first.
    pub fn workspace_tombstones(&self) -> Result<Vec<Tombstone>> {
        self.shared
            .store
            .meta_scan_prefix(WORKSPACE_TOMBSTONE_PREFIX)?
            .into_iter()
            .map(|(k, v)| decode("tombstone", &k, &v))
            .collect()
    }

    /// The marks of the forgets whose bytes the store may still hold (see
    /// [`Memory::erase_pending`]), oldest first.
    pub fn erasure_pending(&self) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .shared
            .store
            .meta_scan_prefix(PENDING_PREFIX)?
            .into_iter()
            .map(|(key, _)| key)
            .collect())
    }

    /// Makes the bytes of every forget so far leave the storage, while the
    /// store stays open ([`Store::compact`](crate::store::Store::compact)),
    /// then deletes the marks it saw before it started: a forget made
    /// meanwhile keeps its mark for the next pass. The runtime's erasure
    /// worker calls it after each `forget` (docs/DURABILITY.md).
    pub fn erase_pending(&self) -> Result<ErasePass> {
        let marks = self.erasure_pending()?;
        let rewrite = self.shared.store.compact()?;
        for mark in &marks {
            self.shared.store.meta_delete(mark)?;
        }
        self.shared.store.sync()?;
        Ok(ErasePass {
            marks: marks.len(),
            rewrite,
        })
    }

    pub(crate) fn finish_interrupted_erasures(&self) -> Result<()> {
        let store = &self.shared.store;
        for (erasing, workspace) in store.meta_scan_prefix(ERASING_PREFIX)? {
            let tombstone_id = &erasing[ERASING_PREFIX.len()..];
            let workspace = String::from_utf8(workspace).map_err(|_| MemoryError::Invalid {
                what: "interrupted erasure",
                reason: "its workspace id is not UTF-8".to_owned(),
            })?;
            tracing::warn!(tombstone = %String::from_utf8_lossy(tombstone_id), "finishing an interrupted workspace erasure");
            self.erase_kept_outside(&workspace)?;
            store.drop_workspace(&workspace)?;
            self.shared.workspace_dropped(&workspace);
            let key = [WORKSPACE_TOMBSTONE_PREFIX, tombstone_id].concat();
            if let Some(bytes) = store.meta_get(&key)? {
                let mut tombstone: Tombstone = decode("tombstone", &key, &bytes)?;
                tombstone.complete = true;
                store.meta_put(&key, &encode(&tombstone)?)?;
            }
            store.meta_delete(&erasing)?;
            store.sync()?;
        }
        Ok(())
    }

    /// Erases what the layers above keep of `workspace` outside it (see
    /// [`ErasedWithWorkspace`]), unsynced; answers how many records went.
    fn erase_kept_outside(&self, workspace: &str) -> Result<usize> {
        let mut erased = 0;
        for kept in &self.shared.erased_with {
            erased += kept.erase_workspace(self, workspace)?;
        }
        Ok(erased)
    }

    fn check_reason(&self, reason: &str) -> Result<String> {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(MemoryError::ForgetWithoutReason);
        }
        check_size(
            "forget reason",
            reason,
            self.shared.config.limits.max_reason_bytes,
        )?;
        Ok(reason.to_owned())
    }
}

impl crate::memory::Shared {
    /// Leaves the mark of a forget whose bytes the store still holds (made
    /// durable by the forget's sync): `erasure/pending/<ulid>`, naming
    /// nothing else.
    pub(crate) fn mark_erasure(&self) -> Result<()> {
        let key = [PENDING_PREFIX, ulid::Ulid::new().to_string().as_bytes()].concat();
        Ok(self.store.meta_put(&key, b"")?)
    }

    pub(crate) fn tombstone_target(&self, target: &ForgetTarget) -> TombstoneTarget {
        let key = self.derive_key(TOMBSTONE_KEY_CONTEXT);
        let mut h = blake3::Hasher::new_keyed(&key);
        h.update(target.kind().as_bytes());
        h.update(&[0]);
        h.update(target.id().as_bytes());
        TombstoneTarget {
            kind: target.kind().to_owned(),
            digest: h.finalize().to_hex()[..32].to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::log::{EntryInput, EntryKind, Provenance};
    use crate::maintain::{
        Action, Change, MaintainSettings, MaintainTrigger, MaintenanceRun, Rule,
    };
    use crate::subjects::SubjectKind;
    use crate::topics::{Subscription, TopicSpec};
    use crate::{MemoryConfig, Role, SystemClock, TurnInput};

    fn memory(dir: &std::path::Path) -> Memory {
        crate::testing::memory(dir, MemoryConfig::default(), Arc::new(SystemClock))
            .expect("a memory on a temporary dir")
    }

    fn vector(session: &str) -> StateKey {
        StateKey::TurnVector {
            session: session.to_owned(),
            seq: 0,
        }
    }

    /// Issue 78: forgetting session `a` deleted the stored vectors of every
    /// session `a/…` too (the scan of `search/v/a/` covers them).
    #[test]
    fn forgetting_a_session_keeps_the_vectors_of_sessions_below_its_id() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| MemoryError::Invalid {
            what: "test",
            reason: e.to_string(),
        })?;
        let memory = memory(dir.path());
        let ws = memory.workspace("acme")?;
        ws.append_turns(&[
            TurnInput::new("a", Role::User, "first"),
            TurnInput::new("a/b", Role::User, "second"),
            TurnInput::new("a/b/c", Role::User, "third"),
        ])?;
        ws.state_apply(
            &[
                (vector("a"), vec![1]),
                (vector("a/b"), vec![2]),
                (vector("a/b/c"), vec![3]),
            ],
            &[],
        )?;
        ws.forget(&ForgetTarget::Session("a".into()), "asked")?;
        assert!(ws.state_get(&vector("a"))?.is_none());
        assert_eq!(ws.state_get(&vector("a/b"))?, Some(vec![2]));
        assert_eq!(ws.state_get(&vector("a/b/c"))?, Some(vec![3]));
        Ok(())
    }

    /// Issue 78: what a forgotten session leaves elsewhere goes with it —
    /// a subject only its entries named (made from them), its id in
    /// maintenance runs and marks, and its topic subscriptions (a topic
    /// that listened to it alone is paused, not widened to everything).
    #[test]
    fn forgetting_a_session_takes_its_subjects_runs_and_subscriptions() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| MemoryError::Invalid {
            what: "test",
            reason: e.to_string(),
        })?;
        let memory = memory(dir.path());
        let ws = memory.workspace("acme")?;
        ws.append_turns(&[
            TurnInput::new("s1", Role::User, "Dana Smith owns the launch."),
            TurnInput::new("s2", Role::User, "The launch is on Friday."),
        ])?;
        ws.add_subject("by-hand", SubjectKind::Person, Some("By Hand"))?;
        let from = |session: &str, subject: &str, content: &str| {
            let mut entry = EntryInput::new(EntryKind::Fact, content);
            entry.subject = Some(subject.to_owned());
            entry.provenance = Some(Provenance {
                session: session.into(),
                from_seq: 0,
                to_seq: 0,
            });
            entry
        };
        ws.append_entries(&[
            from("s1", "dana-smith", "Dana Smith owns the launch"),
            from("s1", "launch", "The launch has an owner"),
            from("s2", "launch", "The launch is on Friday"),
            from("s1", "by-hand", "By Hand was mentioned"),
        ])?;
        let topic = |name: &str, subscriptions: Vec<Subscription>| {
            let mut spec = TopicSpec::new(name, "launch planning")
                .trigger(crate::topics::Trigger::Keyword("launch".into()));
            spec.subscriptions = subscriptions;
            spec
        };
        ws.create_topic(&topic("only-s1", vec![Subscription::Session("s1".into())]))?;
        ws.create_topic(&topic(
            "both",
            vec![
                Subscription::Session("s1".into()),
                Subscription::Session("s2".into()),
            ],
        ))?;
        let run = MaintenanceRun {
            id: "run-1".into(),
            seq: 1,
            trigger: MaintainTrigger::Manual,
            at: ws.now(),
            settings: MaintainSettings::default(),
            changes: ["s1", "s2"]
                .map(|session| Change {
                    rule: Rule::ArchiveSession,
                    action: Action::ArchiveSession {
                        session: session.to_owned(),
                        through_seq: 0,
                    },
                    reason: "idle".into(),
                })
                .into_iter()
                .chain([Change {
                    rule: Rule::PromoteDirective,
                    action: Action::Promote {
                        entry: "e1".into(),
                        into: "e2".into(),
                        kind: EntryKind::Directive,
                    },
                    reason: "decision e1 stated in 3 sessions (s1, s10, s2) (rule: 3 sessions)"
                        .into(),
                }])
                .collect(),
            undone: None,
        };
        let mut batch = WriteBatch::default();
        batch.put(
            Collection::Maintenance,
            MaintKey::Run { seq: 1 }.encode(),
            encode(&run)?,
        );
        batch.put(
            Collection::Maintenance,
            MaintKey::ArchivedSession {
                session: "s1".into(),
            }
            .encode(),
            b"{}".to_vec(),
        );
        ws.apply(batch)?;

        let t = ws.forget(&ForgetTarget::Session("s1".into()), "asked")?;
        // `dana-smith` came from s1's entries alone; `launch` is still named
        // by s2's; `by-hand` was registered by hand.
        let slugs: Vec<String> = ws.subjects()?.into_iter().map(|s| s.slug).collect();
        assert_eq!(slugs, ["by-hand", "launch"]);
        assert_eq!(t.removed.subjects, 1);
        let runs = ws.maintenance_runs()?;
        assert_eq!(runs[0].changes.len(), 2);
        assert_eq!(
            runs[0].changes[1].reason,
            "decision e1 stated in 3 sessions ((erased), s10, s2) (rule: 3 sessions)"
        );
        assert!(!String::from_utf8_lossy(&encode(&runs)?).contains("\"s1\""));
        let marks = ws.store.scan_prefix(
            Collection::Maintenance,
            MaintFamily::ArchivedSession.prefix(),
        )?;
        assert!(marks.is_empty(), "{marks:?}");
        let only = ws.topic("only-s1")?;
        assert!(only.spec.subscriptions.is_empty() && only.spec.paused);
        let both = ws.topic("both")?;
        assert_eq!(
            both.spec.subscriptions,
            [Subscription::Session("s2".into())]
        );
        assert!(!both.spec.paused);
        Ok(())
    }
}
