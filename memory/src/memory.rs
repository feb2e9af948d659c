//! [`Memory`] (the database) and [`Workspace`] (one tenant's view of it).
//!
//! Every operation on memory goes through a [`Workspace`] handle, which wraps a
//! [`WorkspaceStore`] bound to one workspace: there is no call that takes a
//! second workspace id, so nothing can read across workspaces.
//!
//! Concurrency: appends to one session are serialised by a striped lock (the
//! stripe is chosen by hashing workspace and session), so sequence numbers
//! have no gaps or duplicates; log and subject writes of a workspace share
//! one stripe. The locks are `parking_lot` mutexes, held only while reading
//! metadata and applying a batch, never across the fsync: [`Store::sync`] runs
//! after the lock is released so that concurrent appenders share one flush.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::{Mutex, MutexGuard};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::clock::Clock;
use crate::config::MemoryConfig;
use crate::error::{MemoryError, Result};
use crate::forget::{ForgetTarget, Removed, Tombstone};
use crate::ids::{display_for_slug, validate_id, validate_slug};
use crate::log::{Entry, EntryFilter, EntryInput, EntryKind, EntryStatus, EntryView, TaskStatus};
use crate::record::{
    Ack, Role, Session, SessionKind, SessionSpec, SessionState, Turn, TurnInput, content_hash,
    idempotency_key, session_prefix, turn_key, work_context_key,
};
use crate::store::{Collection, SledStore, Store, WorkspaceStore, WriteBatch, WriteOp};
use crate::subjects::{Subject, SubjectKind};
use crate::tokens::TokenCounter;

/// The work context used when the host names none.
pub const DEFAULT_WORK_CONTEXT: &str = "default";

const LOCK_STRIPES: usize = 256;
const WORKSPACE_TOMBSTONE_PREFIX: &[u8] = b"tombstone/";

/// cairn's memory: the durable record, the log and the subject registry of
/// every workspace in one store. Cheap to clone (shared inside).
///
/// ```
/// use std::sync::Arc;
/// use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput};
///
/// let dir = tempfile::tempdir()?;
/// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
/// let ws = memory.workspace("acme")?;
/// let ack = ws.append_turn(&TurnInput::new("s1", Role::User, "Let's ship on Friday."))?;
/// assert_eq!(ack.seq, 0);
/// assert_eq!(ws.transcript("s1", 0, None)?.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Memory {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    store: Arc<dyn Store>,
    config: MemoryConfig,
    clock: Arc<dyn Clock>,
    tokens: TokenCounter,
    stripes: Vec<Mutex<()>>,
    /// Decoded memory logs, per workspace (see [`LogCache`]).
    logs: Mutex<HashMap<String, Arc<LogCache>>>,
}

/// A workspace's memory log as last read: raw entries with the replacement
/// and alias maps, so `entries` (asked on every assembly) does not decode
/// the whole log each time.
///
/// Invalidation: every write batch touching a log collection bumps `epoch`
/// after it is applied; a reader notes the epoch before it scans and keeps
/// its snapshot only while the epoch is unchanged, so a write racing the
/// scan leaves a snapshot nobody uses.
#[derive(Debug, Default)]
struct LogCache {
    epoch: std::sync::atomic::AtomicU64,
    snapshot: Mutex<Option<(u64, Arc<LogSnapshot>)>>,
}

#[derive(Debug)]
struct LogSnapshot {
    entries: Vec<Entry>,
    replacements: HashMap<String, String>,
    aliases: HashMap<String, String>,
    /// The live entries as of `at`, once asked for.
    live: Mutex<Option<LiveEntries>>,
}

#[derive(Debug)]
struct LiveEntries {
    at: DateTime<Utc>,
    /// The first decay time among them: the list is stale from then on.
    until: Option<DateTime<Utc>>,
    views: Arc<Vec<EntryView>>,
}

impl LogCache {
    fn bump(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        *self.snapshot.lock() = None;
    }
}

/// Whether a write batch changes what the log cache holds.
fn touches_log(batch: &WriteBatch) -> bool {
    batch.ops().iter().any(|op| {
        let (WriteOp::Put { collection, .. } | WriteOp::Delete { collection, .. }) = op;
        matches!(
            collection,
            Collection::Entries
                | Collection::Replacements
                | Collection::SubjectAliases
                | Collection::Subjects
        )
    })
}

impl Shared {
    fn log_cache(&self, workspace: &str) -> Arc<LogCache> {
        self.logs
            .lock()
            .entry(workspace.to_owned())
            .or_default()
            .clone()
    }

    fn stripe(&self, workspace: &str, key: &str) -> usize {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        workspace.hash(&mut hasher);
        key.hash(&mut hasher);
        (hasher.finish() as usize) % LOCK_STRIPES
    }

    /// Locks the given stripes in ascending order (no deadlock between callers).
    fn lock_stripes(&self, stripes: BTreeSet<usize>) -> Vec<MutexGuard<'_, ()>> {
        stripes
            .into_iter()
            .map(|i| self.stripes[i].lock())
            .collect()
    }
}

impl Memory {
    /// Opens memory on `store`. Finishes any workspace erasure a crash interrupted.
    pub fn open(
        store: Arc<dyn Store>,
        config: MemoryConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let tokens = TokenCounter::new(&config.tokenizer)?;
        let memory = Memory {
            shared: Arc::new(Shared {
                store,
                config,
                clock,
                tokens,
                stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
                logs: Mutex::new(HashMap::new()),
            }),
        };
        memory.finish_interrupted_erasures()?;
        Ok(memory)
    }

    /// Opens memory on the embedded sled store in `dir`.
    pub fn open_sled(dir: &Path, config: MemoryConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        let store = SledStore::open_with_cache(dir, config.cache_mb.saturating_mul(1 << 20))?;
        Memory::open(Arc::new(store), config, clock)
    }

    /// The configuration in force.
    pub fn config(&self) -> &MemoryConfig {
        &self.shared.config
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The token counter.
    pub fn tokens(&self) -> &TokenCounter {
        &self.shared.tokens
    }

    /// Makes every write applied so far durable (group commit).
    pub fn sync(&self) -> Result<()> {
        Ok(self.shared.store.sync()?)
    }

    /// A handle on the system namespace `name` (see
    /// [`Store::system`](crate::store::Store::system)): process-wide data
    /// such as the policy decision log, outside every workspace. `name` is a
    /// slug (lowercase letters, digits, `-`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn_memory::{Memory, MemoryConfig, SystemClock};
    /// use cairn_memory::store::{Collection, WriteBatch};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let log = memory.system("decisions")?;
    /// let mut batch = WriteBatch::default();
    /// batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
    /// log.apply(batch)?;
    /// assert!(memory.workspaces()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn system(&self, name: &str) -> Result<Arc<dyn WorkspaceStore>> {
        validate_slug(name)?;
        Ok(self.shared.store.system(name)?)
    }

    /// A handle on a workspace, created on first use.
    pub fn workspace(&self, id: &str) -> Result<Workspace> {
        validate_id("workspace id", id)?;
        let store = self.shared.store.workspace(id)?;
        Ok(Workspace {
            id: id.to_owned(),
            store,
            shared: self.shared.clone(),
        })
    }

    /// A handle on a workspace that must already exist.
    pub fn existing_workspace(&self, id: &str) -> Result<Workspace> {
        validate_id("workspace id", id)?;
        if !self.shared.store.has_workspace(id)? {
            return Err(MemoryError::WorkspaceNotFound {
                workspace: id.to_owned(),
            });
        }
        self.workspace(id)
    }

    /// All workspaces, sorted.
    pub fn workspaces(&self) -> Result<Vec<String>> {
        Ok(self.shared.store.workspaces()?)
    }

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
        let mut tombstone = Tombstone {
            id: ulid::Ulid::new().to_string(),
            workspace: id.to_owned(),
            target: ForgetTarget::Workspace(id.to_owned()),
            reason,
            at: self.shared.clock.now(),
            removed,
            complete: false,
        };
        let key = [WORKSPACE_TOMBSTONE_PREFIX, tombstone.id.as_bytes()].concat();
        store.meta_put(&key, &encode(&tombstone)?)?;
        store.sync()?;
        store.drop_workspace(id)?;
        self.shared.log_cache(id).bump();
        tombstone.complete = true;
        store.meta_put(&key, &encode(&tombstone)?)?;
        store.sync()?;
        tracing::info!(workspace = id, tombstone = %tombstone.id, "workspace forgotten");
        Ok(tombstone)
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

    fn finish_interrupted_erasures(&self) -> Result<()> {
        for mut tombstone in self.workspace_tombstones()? {
            if tombstone.complete {
                continue;
            }
            tracing::warn!(workspace = %tombstone.workspace, "finishing an interrupted workspace erasure");
            self.shared.store.drop_workspace(&tombstone.workspace)?;
            self.shared.log_cache(&tombstone.workspace).bump();
            tombstone.complete = true;
            let key = [WORKSPACE_TOMBSTONE_PREFIX, tombstone.id.as_bytes()].concat();
            self.shared.store.meta_put(&key, &encode(&tombstone)?)?;
            self.shared.store.sync()?;
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

/// One workspace's memory. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Workspace {
    id: String,
    store: Arc<dyn WorkspaceStore>,
    shared: Arc<Shared>,
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| MemoryError::Corrupt {
        what: "outgoing",
        key: String::new(),
        reason: e.to_string(),
    })
}

fn decode<T: DeserializeOwned>(what: &'static str, key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| MemoryError::Corrupt {
        what,
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

fn check_size(what: &'static str, text: &str, limit: usize) -> Result<()> {
    if text.len() > limit {
        return Err(MemoryError::TooLarge {
            what,
            bytes: text.len(),
            limit,
        });
    }
    Ok(())
}

fn check_text(what: &'static str, text: &str, limit: usize) -> Result<()> {
    if text.trim().is_empty() {
        return Err(MemoryError::Empty { what });
    }
    check_size(what, text, limit)
}

fn in_batch<T>(index: usize, result: Result<T>) -> Result<T> {
    result.map_err(|source| MemoryError::InBatch {
        index,
        source: Box::new(source),
    })
}

impl Workspace {
    /// Applies a write batch; the one place this type writes, so the log
    /// cache sees every change to the log.
    fn apply(&self, batch: WriteBatch) -> Result<()> {
        let log = touches_log(&batch);
        self.store.apply(batch)?;
        if log {
            self.shared.log_cache(&self.id).bump();
        }
        Ok(())
    }

    /// The memory log as it stands: from the cache while no write touched
    /// the log since it was read, else read (and cached) now.
    fn log_snapshot(&self) -> Result<Arc<LogSnapshot>> {
        let cache = self.shared.log_cache(&self.id);
        let epoch = cache.epoch.load(std::sync::atomic::Ordering::Acquire);
        if let Some((at, snapshot)) = cache.snapshot.lock().as_ref()
            && *at == epoch
        {
            return Ok(snapshot.clone());
        }
        let entries = self
            .store
            .scan_prefix(Collection::Entries, b"")?
            .into_iter()
            .map(|(key, value)| decode("entry", &key, &value))
            .collect::<Result<Vec<Entry>>>()?;
        let snapshot = Arc::new(LogSnapshot {
            entries,
            replacements: self.replacement_map()?,
            aliases: self.alias_map()?,
            live: Mutex::new(None),
        });
        let mut slot = cache.snapshot.lock();
        if cache.epoch.load(std::sync::atomic::Ordering::Acquire) == epoch {
            *slot = Some((epoch, snapshot.clone()));
        }
        Ok(snapshot)
    }

    /// The workspace id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The token counter.
    pub fn tokens(&self) -> &TokenCounter {
        &self.shared.tokens
    }

    /// The configuration in force.
    pub fn config(&self) -> &MemoryConfig {
        &self.shared.config
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.shared.clock.now()
    }

    fn lock_entries(&self) -> Vec<MutexGuard<'_, ()>> {
        let stripe = self.shared.stripe(&self.id, "\0entries");
        self.shared.lock_stripes(BTreeSet::from([stripe]))
    }

    // ----- sessions -------------------------------------------------------

    /// Creates a session, or returns it if it exists with the same work context.
    /// Durable when it returns.
    pub fn ensure_session(&self, spec: &SessionSpec) -> Result<Session> {
        validate_id("session id", &spec.id)?;
        let work_context = spec.work_context.as_deref().unwrap_or(DEFAULT_WORK_CONTEXT);
        validate_id("work context", work_context)?;
        if let Some(parent) = &spec.parent {
            validate_id("parent session id", parent)?;
            if parent == &spec.id {
                return Err(MemoryError::Invalid {
                    what: "parent session",
                    reason: format!("session {:?} cannot be its own parent", spec.id),
                });
            }
        }
        let stripe = self.shared.stripe(&self.id, &spec.id);
        let guard = self.shared.lock_stripes(BTreeSet::from([stripe]));
        if let Some(existing) = self.load_session(&spec.id)? {
            if spec.work_context.is_some() && existing.work_context != work_context {
                return Err(MemoryError::WorkContextMismatch {
                    session: spec.id.clone(),
                    existing: existing.work_context,
                    given: work_context.to_owned(),
                });
            }
            return Ok(existing);
        }
        if let Some(parent) = &spec.parent {
            if self.load_session(parent)?.is_none() {
                return Err(MemoryError::ParentNotFound {
                    session: spec.id.clone(),
                    parent: parent.clone(),
                });
            }
        }
        let session = Session {
            id: spec.id.clone(),
            work_context: work_context.to_owned(),
            kind: spec.kind,
            parent: spec.parent.clone(),
            created_at: self.now(),
            last_turn_at: None,
            next_seq: 0,
            state: SessionState::Open,
            resets: 0,
        };
        let mut batch = WriteBatch::default();
        put_session(&mut batch, &session)?;
        batch.put(
            Collection::WorkContextSessions,
            work_context_key(&session.work_context, &session.id),
            Vec::new(),
        );
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        Ok(session)
    }

    /// Loads a session record and derives `next_seq` and `last_turn_at` from
    /// its last turn. They are not rewritten on every append: the turn key
    /// already carries the sequence number, and one fewer record per append
    /// is fewer bytes to fsync.
    fn load_session(&self, id: &str) -> Result<Option<Session>> {
        let Some(raw) = self.store.get(Collection::Sessions, id.as_bytes())? else {
            return Ok(None);
        };
        let mut session: Session = decode("session", id.as_bytes(), &raw)?;
        match self
            .store
            .last_with_prefix(Collection::Turns, &session_prefix(id))?
        {
            Some((key, value)) => {
                // Only the last turn's seq and time: skip decoding its content.
                #[derive(serde::Deserialize)]
                struct TurnHead {
                    seq: u64,
                    timestamp: DateTime<Utc>,
                }
                let last: TurnHead = decode("turn", &key, &value)?;
                session.next_seq = last.seq + 1;
                session.last_turn_at = Some(last.timestamp);
            }
            None => {
                session.next_seq = 0;
                session.last_turn_at = None;
            }
        }
        Ok(Some(session))
    }

    /// A session's metadata.
    pub fn session(&self, id: &str) -> Result<Session> {
        validate_id("session id", id)?;
        self.load_session(id)?
            .ok_or_else(|| MemoryError::SessionNotFound {
                workspace: self.id.clone(),
                session: id.to_owned(),
            })
    }

    /// Sessions, optionally only those of one work context, sorted by id.
    pub fn sessions(&self, work_context: Option<&str>) -> Result<Vec<Session>> {
        match work_context {
            None => self
                .store
                .scan_prefix(Collection::Sessions, b"")?
                .into_iter()
                .map(|(k, v)| decode("session", &k, &v))
                .collect(),
            Some(wc) => {
                validate_id("work context", wc)?;
                let prefix = session_prefix(wc);
                let mut out = Vec::new();
                for (key, _) in self
                    .store
                    .scan_prefix(Collection::WorkContextSessions, &prefix)?
                {
                    let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                    if let Some(session) = self.load_session(&id)? {
                        out.push(session);
                    }
                }
                Ok(out)
            }
        }
    }

    /// Work contexts that have at least one session, sorted.
    pub fn work_contexts(&self) -> Result<Vec<String>> {
        let mut out = BTreeSet::new();
        for (key, _) in self
            .store
            .scan_prefix(Collection::WorkContextSessions, b"")?
        {
            if let Some(end) = key.iter().position(|b| *b == 0) {
                out.insert(String::from_utf8_lossy(&key[..end]).into_owned());
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Marks a session ended (`session_end`). Idempotent; durable when it returns.
    pub fn end_session(&self, id: &str) -> Result<Session> {
        self.update_session(id, |s| s.state = SessionState::Ended)
    }

    /// Records that the host reset the session (`before_reset`); the transcript stays.
    pub fn record_reset(&self, id: &str) -> Result<Session> {
        self.update_session(id, |s| s.resets = s.resets.saturating_add(1))
    }

    fn update_session(&self, id: &str, change: impl FnOnce(&mut Session)) -> Result<Session> {
        validate_id("session id", id)?;
        let stripe = self.shared.stripe(&self.id, id);
        let guard = self.shared.lock_stripes(BTreeSet::from([stripe]));
        let mut session = self.session(id)?;
        change(&mut session);
        let mut batch = WriteBatch::default();
        put_session(&mut batch, &session)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        Ok(session)
    }

    // ----- turns ----------------------------------------------------------

    /// Appends one turn; durable when it returns. See [`Workspace::append_turns`].
    pub fn append_turn(&self, turn: &TurnInput) -> Result<Ack> {
        let acks = self
            .append_turns(std::slice::from_ref(turn))
            .map_err(|e| match e {
                MemoryError::InBatch { source, .. } => *source,
                other => other,
            })?;
        acks.into_iter().next().ok_or_else(|| MemoryError::Invalid {
            what: "append",
            reason: "no acknowledgement produced".to_owned(),
        })
    }

    /// Appends turns atomically and returns once they are durable.
    ///
    /// Every turn is validated before anything is written; one bad turn
    /// refuses the whole batch with [`MemoryError::InBatch`] naming it. A turn
    /// whose idempotency key was already used (earlier, or earlier in the same
    /// batch) writes nothing and is acknowledged with the original sequence
    /// number and `duplicate: true`. Unknown sessions are created as main
    /// sessions in the turn's work context (or `default`).
    pub fn append_turns(&self, turns: &[TurnInput]) -> Result<Vec<Ack>> {
        let acks = self.apply_turns(turns)?;
        self.shared.store.sync()?;
        Ok(acks)
    }

    /// Like [`Workspace::append_turns`] but returns before the fsync: the
    /// caller must call [`Memory::sync`] before acknowledging anything.
    /// Used by callers that group several batches into one commit.
    #[doc(hidden)]
    pub fn apply_turns(&self, turns: &[TurnInput]) -> Result<Vec<Ack>> {
        let limits = &self.shared.config.limits;
        if turns.len() > limits.max_batch {
            return Err(MemoryError::BatchTooLarge {
                len: turns.len(),
                limit: limits.max_batch,
            });
        }
        for (index, turn) in turns.iter().enumerate() {
            in_batch(index, self.validate_turn(turn))?;
        }
        let stripes: BTreeSet<usize> = turns
            .iter()
            .map(|t| self.shared.stripe(&self.id, &t.session))
            .collect();
        let guard = self.shared.lock_stripes(stripes);

        let mut sessions: HashMap<&str, (Session, bool)> = HashMap::new();
        let mut seen_keys: HashMap<(&str, &str), u64> = HashMap::new();
        let mut batch = WriteBatch::default();
        let mut acks = Vec::with_capacity(turns.len());
        for (index, input) in turns.iter().enumerate() {
            let sid = input.session.as_str();
            if !sessions.contains_key(sid) {
                let loaded = match self.load_session(sid)? {
                    Some(s) => (s, false),
                    None => (
                        Session {
                            id: sid.to_owned(),
                            work_context: input
                                .work_context
                                .clone()
                                .unwrap_or_else(|| DEFAULT_WORK_CONTEXT.to_owned()),
                            kind: SessionKind::Main,
                            parent: None,
                            created_at: self.now(),
                            last_turn_at: None,
                            next_seq: 0,
                            state: SessionState::Open,
                            resets: 0,
                        },
                        true,
                    ),
                };
                sessions.insert(sid, loaded);
            }
            let Some((session, _)) = sessions.get_mut(sid) else {
                continue;
            };
            if let Some(wc) = &input.work_context {
                if wc != &session.work_context {
                    return Err(MemoryError::InBatch {
                        index,
                        source: Box::new(MemoryError::WorkContextMismatch {
                            session: sid.to_owned(),
                            existing: session.work_context.clone(),
                            given: wc.clone(),
                        }),
                    });
                }
            }
            if let Some(key) = input.idempotency_key.as_deref() {
                if let Some(seq) = seen_keys.get(&(sid, key)) {
                    acks.push(Ack {
                        seq: *seq,
                        duplicate: true,
                    });
                    continue;
                }
                if let Some(raw) = self
                    .store
                    .get(Collection::Idempotency, &idempotency_key(sid, key))?
                {
                    let seq = decode_seq(&raw)?;
                    seen_keys.insert((sid, key), seq);
                    acks.push(Ack {
                        seq,
                        duplicate: true,
                    });
                    continue;
                }
            }
            let seq = session.next_seq;
            let timestamp = input.timestamp.unwrap_or_else(|| self.now());
            let turn = Turn {
                workspace: self.id.clone(),
                session: sid.to_owned(),
                work_context: session.work_context.clone(),
                seq,
                role: input.role,
                content: input.content.clone(),
                tool_call_id: input.tool_call_id.clone(),
                timestamp,
                content_hash: content_hash(&input.content),
            };
            batch.put(Collection::Turns, turn_key(sid, seq), encode(&turn)?);
            if let Some(key) = input.idempotency_key.as_deref() {
                batch.put(
                    Collection::Idempotency,
                    idempotency_key(sid, key),
                    seq.to_be_bytes().to_vec(),
                );
                seen_keys.insert((sid, key), seq);
            }
            session.next_seq += 1;
            session.last_turn_at =
                Some(session.last_turn_at.map_or(timestamp, |t| t.max(timestamp)));
            acks.push(Ack {
                seq,
                duplicate: false,
            });
        }
        for (session, created) in sessions.values() {
            if *created {
                put_session(&mut batch, session)?;
                batch.put(
                    Collection::WorkContextSessions,
                    work_context_key(&session.work_context, &session.id),
                    Vec::new(),
                );
            }
        }
        if acks.iter().any(|a| !a.duplicate) {
            self.apply(batch)?;
        }
        drop(guard);
        Ok(acks)
    }

    fn validate_turn(&self, turn: &TurnInput) -> Result<()> {
        validate_id("session id", &turn.session)?;
        if let Some(wc) = &turn.work_context {
            validate_id("work context", wc)?;
        }
        if let Some(key) = &turn.idempotency_key {
            validate_id("idempotency key", key)?;
        }
        if let Some(id) = &turn.tool_call_id {
            validate_id("tool call id", id)?;
        }
        if turn.role == Role::Tool && turn.tool_call_id.is_none() {
            return Err(MemoryError::MissingToolCallId {
                session: turn.session.clone(),
            });
        }
        check_text(
            "turn content",
            &turn.content,
            self.shared.config.limits.max_content_bytes,
        )
    }

    /// Turns of a session from sequence number `from`, at most `limit`, in order.
    pub fn transcript(&self, session: &str, from: u64, limit: Option<usize>) -> Result<Vec<Turn>> {
        let meta = self.session(session)?;
        let prefix = session_prefix(session);
        let limit = limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        // Keys sort by big-endian sequence number: one seek to `from`, then
        // in order.
        for (key, value) in
            self.store
                .scan_prefix_from(Collection::Turns, &prefix, &from.to_be_bytes(), limit)?
        {
            let seq = decode_seq(&key[prefix.len()..])?;
            if seq >= meta.next_seq {
                break;
            }
            out.push(decode("turn", &key, &value)?);
        }
        Ok(out)
    }

    /// One turn by its sequence number: a point read (`None` when the
    /// session has no such turn).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput};
    /// # let dir = tempfile::tempdir()?;
    /// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_turns(&[TurnInput::new("s1", Role::User, "hello")])?;
    /// assert_eq!(ws.turn("s1", 0)?.map(|t| t.content), Some("hello".to_owned()));
    /// assert!(ws.turn("s1", 1)?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn turn(&self, session: &str, seq: u64) -> Result<Option<Turn>> {
        let key = turn_key(session, seq);
        self.store
            .get(Collection::Turns, &key)?
            .map(|value| decode("turn", &key, &value))
            .transpose()
    }

    /// The last `n` turns of a session, oldest first.
    pub fn recent_turns(&self, session: &str, n: usize) -> Result<Vec<Turn>> {
        self.session(session)?;
        let mut turns: Vec<Turn> = self
            .store
            .scan_prefix_rev(Collection::Turns, &session_prefix(session), n)?
            .into_iter()
            .map(|(k, v)| decode("turn", &k, &v))
            .collect::<Result<_>>()?;
        turns.reverse();
        Ok(turns)
    }

    // ----- memory log -----------------------------------------------------

    /// Appends one entry; durable when it returns.
    pub fn append_entry(&self, entry: &EntryInput) -> Result<Entry> {
        let mut entries =
            self.append_entries(std::slice::from_ref(entry))
                .map_err(|e| match e {
                    MemoryError::InBatch { source, .. } => *source,
                    other => other,
                })?;
        entries.pop().ok_or_else(|| MemoryError::Invalid {
            what: "append",
            reason: "no entry produced".to_owned(),
        })
    }

    /// Appends entries atomically; durable when it returns.
    ///
    /// Checks, before anything is written: ids unused, provenance sessions and
    /// turn ranges exist, `replaces` targets exist (in the log or earlier in
    /// the batch), are not already replaced, and form no cycle. Unknown
    /// subject slugs are registered.
    pub fn append_entries(&self, inputs: &[EntryInput]) -> Result<Vec<Entry>> {
        let limits = &self.shared.config.limits;
        if inputs.len() > limits.max_batch {
            return Err(MemoryError::BatchTooLarge {
                len: inputs.len(),
                limit: limits.max_batch,
            });
        }
        for (index, input) in inputs.iter().enumerate() {
            in_batch(index, self.validate_entry(input))?;
        }
        let guard = self.lock_entries();
        let now = self.now();
        let mut generator = ulid::Generator::new();
        let mut ids: Vec<String> = Vec::with_capacity(inputs.len());
        let mut batch_ids: HashMap<String, usize> = HashMap::new();
        for (index, input) in inputs.iter().enumerate() {
            let id = match &input.id {
                Some(id) => id.clone(),
                None => generator.generate().map(|u| u.to_string()).map_err(|e| {
                    MemoryError::Invalid {
                        what: "entry id",
                        reason: e.to_string(),
                    }
                })?,
            };
            if batch_ids.contains_key(&id)
                || self
                    .store
                    .get(Collection::Entries, id.as_bytes())?
                    .is_some()
            {
                return Err(MemoryError::InBatch {
                    index,
                    source: Box::new(MemoryError::DuplicateEntryId { id }),
                });
            }
            batch_ids.insert(id.clone(), index);
            ids.push(id);
        }

        let aliases = self.alias_map()?;
        let mut batch = WriteBatch::default();
        let mut new_subjects: BTreeSet<String> = BTreeSet::new();
        let mut replaced_in_batch: HashMap<&str, &str> = HashMap::new();
        let mut out = Vec::with_capacity(inputs.len());
        for (index, input) in inputs.iter().enumerate() {
            let id = &ids[index];
            let fail = |source: MemoryError| MemoryError::InBatch {
                index,
                source: Box::new(source),
            };
            // Provenance and work context.
            let mut work_context = input.work_context.clone();
            if let Some(p) = &input.provenance {
                let session = self.session(&p.session).map_err(fail)?;
                let last = session.next_seq.saturating_sub(1);
                if session.next_seq == 0 || p.from_seq > p.to_seq || p.to_seq >= session.next_seq {
                    return Err(fail(MemoryError::InvalidTurnRange {
                        session: p.session.clone(),
                        from: p.from_seq,
                        to: p.to_seq,
                        last,
                    }));
                }
                match &work_context {
                    Some(wc) if wc != &session.work_context => {
                        return Err(fail(MemoryError::WorkContextMismatch {
                            session: p.session.clone(),
                            existing: session.work_context,
                            given: wc.clone(),
                        }));
                    }
                    Some(_) => {}
                    None => work_context = Some(session.work_context),
                }
            }
            // Replacement.
            if let Some(target) = &input.replaces {
                if target == id {
                    return Err(fail(MemoryError::ReplacesCycle {
                        id: id.clone(),
                        replaces: target.clone(),
                    }));
                }
                let in_batch_target = batch_ids.get(target).copied();
                if in_batch_target.is_none()
                    && self
                        .store
                        .get(Collection::Entries, target.as_bytes())?
                        .is_none()
                {
                    return Err(fail(MemoryError::ReplacesMissing {
                        id: id.clone(),
                        replaces: target.clone(),
                    }));
                }
                if let Some(by) = self
                    .store
                    .get(Collection::Replacements, target.as_bytes())?
                {
                    return Err(fail(MemoryError::AlreadyReplaced {
                        replaces: target.clone(),
                        by: String::from_utf8_lossy(&by).into_owned(),
                    }));
                }
                if let Some(by) = replaced_in_batch.get(target.as_str()) {
                    return Err(fail(MemoryError::AlreadyReplaced {
                        replaces: target.clone(),
                        by: (*by).to_owned(),
                    }));
                }
                // Only new entries can point at new entries, so a cycle lies
                // entirely inside the batch: walk it.
                let mut cursor = in_batch_target;
                let mut steps = 0;
                while let Some(i) = cursor {
                    if i == index || steps > inputs.len() {
                        return Err(fail(MemoryError::ReplacesCycle {
                            id: id.clone(),
                            replaces: target.clone(),
                        }));
                    }
                    steps += 1;
                    cursor = inputs[i]
                        .replaces
                        .as_ref()
                        .and_then(|t| batch_ids.get(t).copied());
                }
                replaced_in_batch.insert(target.as_str(), id.as_str());
                batch.put(
                    Collection::Replacements,
                    target.as_bytes().to_vec(),
                    id.as_bytes().to_vec(),
                );
            }
            // Subject.
            if let Some(slug) = &input.subject {
                let canonical = aliases.get(slug).cloned().unwrap_or_else(|| slug.clone());
                if !new_subjects.contains(&canonical)
                    && self
                        .store
                        .get(Collection::Subjects, canonical.as_bytes())?
                        .is_none()
                {
                    let subject = Subject {
                        slug: canonical.clone(),
                        display: display_for_slug(&canonical),
                        kind: SubjectKind::default(),
                        aliases: Vec::new(),
                        created_at: now,
                    };
                    batch.put(
                        Collection::Subjects,
                        canonical.as_bytes().to_vec(),
                        encode(&subject)?,
                    );
                    new_subjects.insert(canonical);
                }
            }
            let status = match (input.kind, input.status) {
                (EntryKind::Task, None) => Some(TaskStatus::Open),
                (_, status) => status,
            };
            let entry = Entry {
                id: id.clone(),
                kind: input.kind,
                content: input.content.clone(),
                detail: input.detail.clone(),
                subject: input.subject.clone(),
                work_context: work_context.unwrap_or_else(|| DEFAULT_WORK_CONTEXT.to_owned()),
                provenance: input.provenance.clone(),
                replaces: input.replaces.clone(),
                status,
                timestamp: input.timestamp.unwrap_or(now),
                recorded_at: now,
            };
            batch.put(Collection::Entries, id.as_bytes().to_vec(), encode(&entry)?);
            out.push(entry);
        }
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        Ok(out)
    }

    fn validate_entry(&self, input: &EntryInput) -> Result<()> {
        let limit = self.shared.config.limits.max_content_bytes;
        if let Some(id) = &input.id {
            validate_id("entry id", id)?;
        }
        check_text("entry content", &input.content, limit)?;
        if let Some(detail) = &input.detail {
            check_size("entry detail", detail, limit)?;
        }
        if let Some(slug) = &input.subject {
            validate_slug(slug)?;
        }
        if let Some(wc) = &input.work_context {
            validate_id("work context", wc)?;
        }
        if let Some(p) = &input.provenance {
            validate_id("provenance session id", &p.session)?;
        }
        if let Some(r) = &input.replaces {
            validate_id("replaces", r)?;
        }
        if input.status.is_some() && input.kind != EntryKind::Task {
            return Err(MemoryError::Invalid {
                what: "status",
                reason: format!("only task entries have a status, not {}", input.kind),
            });
        }
        Ok(())
    }

    fn alias_map(&self) -> Result<HashMap<String, String>> {
        self.string_map(Collection::SubjectAliases)
    }

    fn replacement_map(&self) -> Result<HashMap<String, String>> {
        self.string_map(Collection::Replacements)
    }

    /// A collection whose keys and values are both ids, read whole.
    fn string_map(&self, collection: Collection) -> Result<HashMap<String, String>> {
        Ok(self
            .store
            .scan_prefix(collection, b"")?
            .into_iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect())
    }

    fn view(
        &self,
        entry: Entry,
        replacements: &HashMap<String, String>,
        aliases: &HashMap<String, String>,
        now: DateTime<Utc>,
    ) -> EntryView {
        let (subject, status, decay_at) = self.judge(&entry, replacements, aliases, now);
        EntryView {
            entry,
            subject,
            status,
            decay_at,
        }
    }

    /// An entry's resolved subject, status and decay time.
    fn judge(
        &self,
        entry: &Entry,
        replacements: &HashMap<String, String>,
        aliases: &HashMap<String, String>,
        now: DateTime<Utc>,
    ) -> (Option<String>, EntryStatus, Option<DateTime<Utc>>) {
        let decay_at = self
            .shared
            .config
            .decay
            .decay_at(entry.kind, entry.timestamp);
        let status = match (replacements.get(&entry.id), decay_at) {
            (Some(by), _) => EntryStatus::Replaced { by: by.clone() },
            (None, Some(at)) if at <= now => EntryStatus::Expired { at },
            _ => EntryStatus::Live,
        };
        let subject = entry
            .subject
            .as_ref()
            .map(|s| aliases.get(s).cloned().unwrap_or_else(|| s.clone()));
        (subject, status, decay_at)
    }

    fn load_entry(&self, id: &str) -> Result<Option<Entry>> {
        self.store
            .get(Collection::Entries, id.as_bytes())?
            .map(|v| decode("entry", id.as_bytes(), &v))
            .transpose()
    }

    /// One entry, with its resolved status.
    pub fn entry(&self, id: &str) -> Result<EntryView> {
        validate_id("entry id", id)?;
        let entry = self
            .load_entry(id)?
            .ok_or_else(|| MemoryError::EntryNotFound { id: id.to_owned() })?;
        Ok(self.view(
            entry,
            &self.replacement_map()?,
            &self.alias_map()?,
            self.now(),
        ))
    }

    /// Entries matching `filter`, newest first. Without `all`, only live ones.
    pub fn entries(&self, filter: &EntryFilter) -> Result<Vec<EntryView>> {
        if let Some(wc) = &filter.work_context {
            validate_id("work context", wc)?;
        }
        if let Some(s) = &filter.session {
            validate_id("session id", s)?;
        }
        let log = self.log_snapshot()?;
        self.entries_in(&log, filter, self.now())
    }

    /// Every live entry, newest first, shared: what `entries` returns for
    /// the default filter, kept with the log snapshot until a log write or
    /// the first decay time among them (assembly asks for it on every call).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Fact, "The API is v2"))?;
    /// assert_eq!(ws.live_entries()?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn live_entries(&self) -> Result<Arc<Vec<EntryView>>> {
        let log = self.log_snapshot()?;
        let now = self.now();
        if let Some(live) = log.live.lock().as_ref()
            && live.at <= now
            && live.until.is_none_or(|until| now < until)
        {
            return Ok(live.views.clone());
        }
        let views = Arc::new(self.entries_in(&log, &EntryFilter::default(), now)?);
        // Live entries decay after `now`: the first of those times ends
        // this list's validity.
        let until = views.iter().filter_map(|v| v.decay_at).min();
        *log.live.lock() = Some(LiveEntries {
            at: now,
            until,
            views: views.clone(),
        });
        Ok(views)
    }

    fn entries_in(
        &self,
        log: &LogSnapshot,
        filter: &EntryFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<EntryView>> {
        let (aliases, replacements) = (&log.aliases, &log.replacements);
        let subject = match &filter.subject {
            Some(slug) => {
                validate_slug(slug)?;
                Some(aliases.get(slug).cloned().unwrap_or_else(|| slug.clone()))
            }
            None => None,
        };
        let mut out = Vec::new();
        for entry in &log.entries {
            if filter.kind.is_some_and(|k| k != entry.kind)
                || filter
                    .work_context
                    .as_ref()
                    .is_some_and(|wc| wc != &entry.work_context)
                || filter
                    .session
                    .as_ref()
                    .is_some_and(|s| entry.provenance.as_ref().is_none_or(|p| &p.session != s))
            {
                continue;
            }
            let (resolved, status, decay_at) = self.judge(entry, replacements, aliases, now);
            if subject.is_some() && resolved != subject {
                continue;
            }
            if !filter.all && status != EntryStatus::Live {
                continue;
            }
            out.push((entry, resolved, status, decay_at));
        }
        // Sort and cut before cloning: only what is returned is copied.
        out.sort_by(|a, b| (b.0.timestamp, &b.0.id).cmp(&(a.0.timestamp, &a.0.id)));
        if let Some(limit) = filter.limit.filter(|l| *l > 0) {
            out.truncate(limit);
        }
        let out: Vec<EntryView> = out
            .into_iter()
            .map(|(entry, subject, status, decay_at)| EntryView {
                entry: entry.clone(),
                subject,
                status,
                decay_at,
            })
            .collect();
        Ok(out)
    }

    /// Every version of the chain `id` belongs to, oldest first: the original,
    /// each correction, and the live version last. Forgotten versions are absent.
    pub fn history(&self, id: &str) -> Result<Vec<EntryView>> {
        let start = self.entry(id)?;
        let replacements = self.replacement_map()?;
        let aliases = self.alias_map()?;
        let now = self.now();
        // Walk back to the root.
        let mut root = start.entry.clone();
        let mut seen = HashSet::from([root.id.clone()]);
        while let Some(prev) = root.replaces.clone() {
            match self.load_entry(&prev)? {
                Some(e) if seen.insert(e.id.clone()) => root = e,
                _ => break,
            }
        }
        // Walk forward through the replacement map.
        let mut chain = vec![self.view(root.clone(), &replacements, &aliases, now)];
        let mut cursor = root.id;
        while let Some(next) = replacements.get(&cursor) {
            if !seen.insert(next.clone()) && chain.iter().any(|v| &v.entry.id == next) {
                break;
            }
            if let Some(e) = self.load_entry(next)? {
                chain.push(self.view(e, &replacements, &aliases, now));
            }
            cursor = next.clone();
        }
        Ok(chain)
    }

    /// Ids of every stored entry (live, replaced or expired), in key order.
    /// Forgotten entries are gone. Used by the search indexer.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// let e = ws.append_entry(&EntryInput::new(EntryKind::Fact, "The API is v2"))?;
    /// assert_eq!(ws.entry_ids()?, vec![e.id.clone()]);
    /// assert_eq!(ws.stored_entry(&e.id)?.map(|x| x.content), Some("The API is v2".to_owned()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn entry_ids(&self) -> Result<Vec<String>> {
        Ok(self
            .store
            .scan_prefix(Collection::Entries, b"")?
            .into_iter()
            .map(|(k, _)| String::from_utf8_lossy(&k).into_owned())
            .collect())
    }

    /// A stored entry as written, without resolving its status (cheaper
    /// than [`Workspace::entry`]); `None` when absent or forgotten.
    pub fn stored_entry(&self, id: &str) -> Result<Option<Entry>> {
        validate_id("entry id", id)?;
        self.load_entry(id)
    }

    /// Which entries are replaced: replaced id → the id that replaced it.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// let a = ws.append_entry(&EntryInput::new(EntryKind::Fact, "The API is v2"))?;
    /// let b = ws.append_entry(&EntryInput::new(EntryKind::Fact, "The API is v3").replacing(&a.id))?;
    /// assert_eq!(ws.replacements()?.get(&a.id), Some(&b.id));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replacements(&self) -> Result<HashMap<String, String>> {
        self.replacement_map()
    }

    /// Subject aliases: old (renamed or merged) slug → canonical slug.
    pub fn subject_aliases(&self) -> Result<HashMap<String, String>> {
        self.alias_map()
    }

    // ----- subjects -------------------------------------------------------

    /// Registers a subject. Fails if the slug (or an alias with it) exists.
    pub fn add_subject(
        &self,
        slug: &str,
        kind: SubjectKind,
        display: Option<&str>,
    ) -> Result<Subject> {
        validate_slug(slug)?;
        if let Some(d) = display {
            check_text("subject display name", d, 256)?;
        }
        let guard = self.lock_entries();
        if self
            .store
            .get(Collection::Subjects, slug.as_bytes())?
            .is_some()
            || self
                .store
                .get(Collection::SubjectAliases, slug.as_bytes())?
                .is_some()
        {
            return Err(MemoryError::SubjectExists {
                slug: slug.to_owned(),
            });
        }
        let subject = Subject {
            slug: slug.to_owned(),
            display: display.map_or_else(|| display_for_slug(slug), str::to_owned),
            kind,
            aliases: Vec::new(),
            created_at: self.now(),
        };
        let mut batch = WriteBatch::default();
        batch.put(
            Collection::Subjects,
            slug.as_bytes().to_vec(),
            encode(&subject)?,
        );
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        Ok(subject)
    }

    fn load_subject(&self, slug: &str) -> Result<Option<Subject>> {
        let aliases = self.alias_map()?;
        let canonical = aliases.get(slug).map_or(slug, String::as_str);
        let Some(raw) = self.store.get(Collection::Subjects, canonical.as_bytes())? else {
            return Ok(None);
        };
        let mut subject: Subject = decode("subject", canonical.as_bytes(), &raw)?;
        subject.aliases = aliases
            .iter()
            .filter(|(_, to)| *to == canonical)
            .map(|(from, _)| from.clone())
            .collect();
        subject.aliases.sort();
        Ok(Some(subject))
    }

    /// A subject by slug; old slugs resolve to the subject they were renamed or merged into.
    pub fn subject(&self, slug: &str) -> Result<Subject> {
        validate_slug(slug)?;
        self.load_subject(slug)?
            .ok_or_else(|| MemoryError::SubjectNotFound {
                slug: slug.to_owned(),
            })
    }

    /// All subjects, sorted by slug, each with its aliases.
    pub fn subjects(&self) -> Result<Vec<Subject>> {
        let aliases = self.alias_map()?;
        let mut by_target: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (from, to) in &aliases {
            by_target.entry(to.as_str()).or_default().push(from.clone());
        }
        self.store
            .scan_prefix(Collection::Subjects, b"")?
            .into_iter()
            .map(|(k, v)| {
                let mut s: Subject = decode("subject", &k, &v)?;
                s.aliases = by_target.get(s.slug.as_str()).cloned().unwrap_or_default();
                s.aliases.sort();
                Ok(s)
            })
            .collect()
    }

    /// Renames a subject. The old slug keeps resolving to it.
    pub fn rename_subject(&self, old: &str, new: &str) -> Result<Subject> {
        validate_slug(old)?;
        validate_slug(new)?;
        let guard = self.lock_entries();
        let raw = self
            .store
            .get(Collection::Subjects, old.as_bytes())?
            .ok_or_else(|| MemoryError::SubjectNotFound {
                slug: old.to_owned(),
            })?;
        if old == new
            || self
                .store
                .get(Collection::Subjects, new.as_bytes())?
                .is_some()
            || self
                .store
                .get(Collection::SubjectAliases, new.as_bytes())?
                .is_some()
        {
            return Err(MemoryError::SubjectExists {
                slug: new.to_owned(),
            });
        }
        let mut subject: Subject = decode("subject", old.as_bytes(), &raw)?;
        subject.slug = new.to_owned();
        if subject.display == display_for_slug(old) {
            subject.display = display_for_slug(new);
        }
        let mut batch = WriteBatch::default();
        batch.delete(Collection::Subjects, old.as_bytes().to_vec());
        batch.put(
            Collection::Subjects,
            new.as_bytes().to_vec(),
            encode(&subject)?,
        );
        self.repoint_aliases(&mut batch, old, new)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        self.subject(new)
    }

    /// Merges subject `from` into `into`; `from` becomes an alias of `into`.
    pub fn merge_subjects(&self, from: &str, into: &str) -> Result<Subject> {
        validate_slug(from)?;
        validate_slug(into)?;
        let guard = self.lock_entries();
        if self
            .store
            .get(Collection::Subjects, into.as_bytes())?
            .is_none()
        {
            return Err(MemoryError::SubjectNotFound {
                slug: into.to_owned(),
            });
        }
        if self
            .store
            .get(Collection::Subjects, from.as_bytes())?
            .is_none()
        {
            return Err(MemoryError::SubjectNotFound {
                slug: from.to_owned(),
            });
        }
        if from == into {
            return Err(MemoryError::Invalid {
                what: "merge",
                reason: format!("cannot merge subject {from:?} into itself"),
            });
        }
        let mut batch = WriteBatch::default();
        batch.delete(Collection::Subjects, from.as_bytes().to_vec());
        self.repoint_aliases(&mut batch, from, into)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        self.subject(into)
    }

    fn repoint_aliases(&self, batch: &mut WriteBatch, old: &str, new: &str) -> Result<()> {
        for (alias, target) in self.alias_map()? {
            if target == old {
                batch.put(
                    Collection::SubjectAliases,
                    alias.into_bytes(),
                    new.as_bytes().to_vec(),
                );
            }
        }
        batch.put(
            Collection::SubjectAliases,
            old.as_bytes().to_vec(),
            new.as_bytes().to_vec(),
        );
        Ok(())
    }

    // ----- forget ---------------------------------------------------------

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
                for (key, value) in self.store.scan_prefix(Collection::Entries, b"")? {
                    let entry: Entry = decode("entry", &key, &value)?;
                    if entry.provenance.as_ref().is_some_and(|p| &p.session == id) {
                        batch.delete(Collection::Entries, key);
                        removed.entries += 1;
                    }
                }
            }
            ForgetTarget::Entry(id) => {
                validate_id("entry id", id)?;
                if self.load_entry(id)?.is_none() {
                    return Err(MemoryError::EntryNotFound { id: id.clone() });
                }
                batch.delete(Collection::Entries, id.as_bytes().to_vec());
                removed.entries = 1;
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
                        .as_ref()
                        .map(|s| aliases.get(s).cloned().unwrap_or_else(|| s.clone()));
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
        let tombstone = Tombstone {
            id: ulid::Ulid::new().to_string(),
            workspace: self.id.clone(),
            target: target.clone(),
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
        drop(guard);
        self.shared.store.sync()?;
        tracing::info!(workspace = %self.id, tombstone = %tombstone.id, ?target, "forgotten");
        Ok(tombstone)
    }

    /// Tombstones left by `forget` in this workspace, oldest first.
    pub fn tombstones(&self) -> Result<Vec<Tombstone>> {
        self.store
            .scan_prefix(Collection::Tombstones, b"")?
            .into_iter()
            .map(|(k, v)| decode("tombstone", &k, &v))
            .collect()
    }

    // ----- state for other subsystems -------------------------------------

    /// Reads a durable state record of another subsystem (actors, indexes).
    #[doc(hidden)]
    pub fn state_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(Collection::State, key.as_bytes())?)
    }

    /// The state records whose keys start with `prefix`, in key order.
    #[doc(hidden)]
    pub fn state_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(self
            .store
            .scan_prefix(Collection::State, prefix.as_bytes())?
            .into_iter()
            .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
            .collect())
    }

    /// Writes a durable state record of another subsystem; durable when it returns.
    #[doc(hidden)]
    pub fn state_put(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put(Collection::State, key.as_bytes().to_vec(), value.to_vec());
        self.apply(batch)?;
        Ok(self.shared.store.sync()?)
    }

    /// Writes and deletes several state records in one atomic, durable batch.
    #[doc(hidden)]
    pub fn state_apply(&self, puts: &[(String, Vec<u8>)], deletes: &[String]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for (key, value) in puts {
            batch.put(Collection::State, key.as_bytes().to_vec(), value.clone());
        }
        for key in deletes {
            batch.delete(Collection::State, key.as_bytes().to_vec());
        }
        self.apply(batch)?;
        Ok(self.shared.store.sync()?)
    }
}

fn put_session(batch: &mut WriteBatch, session: &Session) -> Result<()> {
    batch.put(
        Collection::Sessions,
        session.id.as_bytes().to_vec(),
        encode(session)?,
    );
    Ok(())
}

fn decode_seq(raw: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = raw.try_into().map_err(|_| MemoryError::Corrupt {
        what: "sequence number",
        key: String::from_utf8_lossy(raw).into_owned(),
        reason: format!("expected 8 bytes, found {}", raw.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}
