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
use crate::store::{Collection, StateFamily, StateKey, WriteBatch, WriteOp};

/// Where the tombstones of erased workspaces live in the store-wide space.
const WORKSPACE_TOMBSTONE_PREFIX: &[u8] = b"tombstone/";
/// A workspace erasure under way: `erasing/<tombstone id>` holds the
/// workspace id until the erasure is complete (the tombstone holds only its
/// hash), so a crash between the steps can be finished.
const ERASING_PREFIX: &[u8] = b"erasing/";
/// The key-derivation context of tombstone hashes.
const TOMBSTONE_KEY_CONTEXT: &str = "cairn tombstone targets v1";

/// What to erase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "target", content = "id", rename_all = "snake_case")]
pub enum ForgetTarget {
    /// A session: its metadata, every turn, its idempotency keys, and every
    /// log entry whose provenance is that session.
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
            ForgetTarget::Session(id) => {
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
                    if &node.session == id {
                        batch.delete(Collection::Summaries, key);
                    }
                }
                batch.delete(
                    Collection::State,
                    StateKey::CompactionView {
                        session: id.clone(),
                    }
                    .encode(),
                );
                for (key, value) in self.store.scan_prefix(Collection::Entries, b"")? {
                    let entry: Entry = decode("entry", &key, &value)?;
                    if entry.provenance.as_ref().is_some_and(|p| &p.session == id) {
                        batch.delete(Collection::Entries, key);
                        removed.entries += 1;
                    }
                }
                // Topic memberships, proposals and gate records quote or
                // name the session's turns: they go with it.
                for key in self.topic_records_of(id)? {
                    batch.delete(Collection::Topics, key);
                }
                // The stored embeddings of its turns (written even when no
                // search service runs now), its extraction record and mark.
                let mut vectors = StateFamily::TurnVector.prefix().to_vec();
                vectors.extend_from_slice(format!("{id}/").as_bytes());
                for (key, _) in self.store.scan_prefix(Collection::State, &vectors)? {
                    batch.delete(Collection::State, key);
                }
                batch.delete(
                    Collection::State,
                    StateKey::Extraction {
                        session: id.clone(),
                    }
                    .encode(),
                );
                // Its capture mark: a new session with the same id is
                // captured from its first turn.
                batch.delete(
                    Collection::State,
                    StateKey::SessionMark {
                        work_context: session.work_context.clone(),
                        session: id.clone(),
                    }
                    .encode(),
                );
            }
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
        // Every erased entry's stored embedding goes in the same batch.
        let erased: Vec<String> = batch
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

    /// The keys of every topic record about one session's turns.
    fn topic_records_of(&self, session: &str) -> Result<Vec<Vec<u8>>> {
        use crate::store::TopicKey;
        use crate::topics::gate::{GateRecord, Membership};
        let mut out = Vec::new();
        for (key, value) in self.store.scan_prefix(Collection::Topics, b"")? {
            let about = match TopicKey::decode(&key) {
                Some(
                    TopicKey::Member { session: s, .. } | TopicKey::Proposal { session: s, .. },
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
        self.revoke_workspace_tokens(id)?;
        store.sync()?;
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

    pub(crate) fn finish_interrupted_erasures(&self) -> Result<()> {
        let store = &self.shared.store;
        for (erasing, workspace) in store.meta_scan_prefix(ERASING_PREFIX)? {
            let tombstone_id = &erasing[ERASING_PREFIX.len()..];
            let workspace = String::from_utf8(workspace).map_err(|_| MemoryError::Invalid {
                what: "interrupted erasure",
                reason: "its workspace id is not UTF-8".to_owned(),
            })?;
            tracing::warn!(tombstone = %String::from_utf8_lossy(tombstone_id), "finishing an interrupted workspace erasure");
            self.revoke_workspace_tokens(&workspace)?;
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
