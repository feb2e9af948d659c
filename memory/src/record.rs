//! The raw record: sessions and their append-only transcripts.
//!
//! A [`Session`] belongs to one work context, has a [`SessionKind`] (main,
//! sub-agent, cron) and optionally a parent session. Its transcript is a
//! sequence of [`Turn`]s numbered from 0 without gaps. Turns are never
//! modified or deleted through the normal API; only an audited `forget` erases
//! them (see [`crate::forget`]).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::idempotency::{KeyIndex, Lookup, SessionKeys};
use crate::ids::validate_id;
use crate::memory::{DEFAULT_WORK_CONTEXT, Workspace, check_text, decode, encode, in_batch};
use crate::store::{Collection, WriteBatch, WriteOp};
use crate::turn_codec::{decode_turn, decode_turn_head, encode_turn, stored_idempotency_key};

/// Who produced a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The human.
    User,
    /// The model.
    Assistant,
    /// A tool result (paired with its call through `tool_call_id`).
    Tool,
    /// A system or gateway message.
    System,
}

impl Role {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
        }
    }
}

/// What kind of session this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SessionKind {
    /// A conversation with the user.
    #[default]
    Main,
    /// A session spawned by another session's agent.
    Subagent,
    /// A scheduled, unattended session.
    Cron,
}

impl SessionKind {
    /// Its name as the API writes it (`main`, `subagent`, `cron`).
    ///
    /// ```
    /// assert_eq!(cairn_memory::SessionKind::Subagent.as_str(), "subagent");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Main => "main",
            SessionKind::Subagent => "subagent",
            SessionKind::Cron => "cron",
        }
    }
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// Taking turns.
    #[default]
    Open,
    /// The host called `session_end`.
    Ended,
}

/// A session's durable metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Session {
    /// Session id (unique in the workspace).
    pub id: String,
    /// The work context (project / piece of work) it belongs to.
    pub work_context: String,
    /// Main, sub-agent or cron.
    pub kind: SessionKind,
    /// The session that spawned this one, for sub-agent and cron lineage.
    pub parent: Option<String>,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// Timestamp of the last turn, if any (derived from the transcript).
    pub last_turn_at: Option<DateTime<Utc>>,
    /// Sequence number the next turn will get (= number of turns; derived
    /// from the transcript's last turn, not stored).
    pub next_seq: u64,
    /// Open or ended.
    pub state: SessionState,
    /// How many times the host reset the session (`before_reset`).
    pub resets: u32,
}

impl Session {
    /// True for main (user-facing) sessions.
    pub fn is_main(&self) -> bool {
        self.kind == SessionKind::Main
    }
}

/// How the host describes a session when it starts one (`bootstrap`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// Session id.
    pub id: String,
    /// Work context; `default` when absent.
    #[serde(default)]
    pub work_context: Option<String>,
    /// Main (default), sub-agent or cron.
    #[serde(default)]
    pub kind: SessionKind,
    /// Parent session id, for sub-agent and cron sessions.
    #[serde(default)]
    pub parent: Option<String>,
}

/// A turn as the host hands it in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TurnInput {
    /// Session id. The session is created (as a main session) on its first turn
    /// unless it was bootstrapped before.
    pub session: String,
    /// Work context; must match the session's if the session exists.
    #[serde(default)]
    pub work_context: Option<String>,
    /// Who spoke.
    pub role: Role,
    /// The text.
    pub content: String,
    /// Pairs a tool call with its result; required for role `tool`.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// A key that makes retries safe: appending again with a used key writes
    /// nothing and returns the original sequence number.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// When the turn happened; the clock's time when absent.
    #[serde(default)]
    pub timestamp: Option<DateTime<Utc>>,
}

impl TurnInput {
    /// A turn with the required fields only.
    ///
    /// ```
    /// use cairn_memory::{Role, TurnInput};
    /// let turn = TurnInput::new("s1", Role::User, "hello");
    /// assert_eq!(turn.session, "s1");
    /// ```
    pub fn new(session: &str, role: Role, content: &str) -> Self {
        TurnInput {
            session: session.to_owned(),
            work_context: None,
            role,
            content: content.to_owned(),
            tool_call_id: None,
            idempotency_key: None,
            timestamp: None,
        }
    }

    /// Sets the work context.
    pub fn in_context(mut self, work_context: &str) -> Self {
        self.work_context = Some(work_context.to_owned());
        self
    }

    /// Sets the idempotency key.
    pub fn with_idempotency_key(mut self, key: &str) -> Self {
        self.idempotency_key = Some(key.to_owned());
        self
    }

    /// Sets the tool-call id.
    pub fn with_tool_call_id(mut self, id: &str) -> Self {
        self.tool_call_id = Some(id.to_owned());
        self
    }

    /// Sets the timestamp.
    pub fn at(mut self, timestamp: DateTime<Utc>) -> Self {
        self.timestamp = Some(timestamp);
        self
    }
}

/// A stored turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Turn {
    /// Workspace it belongs to.
    pub workspace: String,
    /// Session it belongs to.
    pub session: String,
    /// The session's work context.
    pub work_context: String,
    /// Position in the session, from 0, without gaps.
    pub seq: u64,
    /// Who spoke.
    pub role: Role,
    /// The text.
    pub content: String,
    /// Pairs a tool call and its result.
    pub tool_call_id: Option<String>,
    /// When it happened.
    pub timestamp: DateTime<Utc>,
    /// blake3 of `content`, hex.
    pub content_hash: String,
}

/// The answer to an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ack {
    /// The turn's sequence number in its session.
    pub seq: u64,
    /// True when the idempotency key was already used: nothing was written and
    /// `seq` is the original turn's.
    pub duplicate: bool,
}

/// The bytes a turn is stored as: a version byte and a compact binary
/// record (the workspace and session are not in it: they are the store and
/// the key), with the idempotency key the turn was appended with. For tools
/// that measure or copy stored turns.
///
/// ```
/// use cairn_memory::{Role, Turn, record::{content_hash, stored_turn_bytes}};
/// let turn = Turn {
///     workspace: "acme".into(), session: "s1".into(), work_context: "default".into(),
///     seq: 0, role: Role::User, content: "hello".into(), tool_call_id: None,
///     timestamp: chrono::Utc::now(), content_hash: content_hash("hello"),
/// };
/// let bytes = stored_turn_bytes(&turn, Some("retry-7"))?;
/// assert_eq!(bytes[0], 2); // the version
/// assert!(bytes.len() < 80); // JSON takes over 250
/// # Ok::<(), cairn_memory::MemoryError>(())
/// ```
pub fn stored_turn_bytes(turn: &Turn, idempotency_key: Option<&str>) -> Result<Vec<u8>> {
    encode_turn(turn, idempotency_key)
}

/// blake3 hash of a turn's content, hex.
pub fn content_hash(content: &str) -> String {
    blake3::hash(content.as_bytes()).to_hex().to_string()
}

pub(crate) fn turn_key(session: &str, seq: u64) -> Vec<u8> {
    let mut key = session_prefix(session);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// The session id a turn key starts with (turn keys are the session id, a
/// NUL, the seq); `None` when the key holds no NUL.
pub(crate) fn session_of_turn_key(key: &[u8]) -> Option<&[u8]> {
    key.iter().position(|b| *b == 0).map(|end| &key[..end])
}

/// Key prefix of everything stored per session: the id and a NUL (ids never contain NUL).
pub(crate) fn session_prefix(session: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(session.len() + 9);
    key.extend_from_slice(session.as_bytes());
    key.push(0);
    key
}

/// The key of an idempotency entry, as stores written before turn records
/// named their keys hold them (still read, never written).
#[cfg(test)]
pub(crate) fn idempotency_key(session: &str, key: &str) -> Vec<u8> {
    let mut out = session_prefix(session);
    out.extend_from_slice(key.as_bytes());
    out
}

pub(crate) fn work_context_key(work_context: &str, session: &str) -> Vec<u8> {
    let mut out = session_prefix(work_context);
    out.extend_from_slice(session.as_bytes());
    out
}

/// The most session heads one workspace keeps; past it the cache starts
/// over (a head is one point read and one reverse seek away).
const MAX_CACHED_HEADS: usize = 65_536;

/// A workspace's session heads as [`Workspace::load_session`] would derive
/// them from the store (the session record, `next_seq` and `last_turn_at`
/// from its last turn), so that an append reads nothing (with the session's
/// idempotency keys, [`SessionHeads::keys`]) and the actor's follow-up
/// `session` reads nothing at all.
///
/// Correctness rests on three rules:
/// - Every batch that writes a turn or a session record goes through
///   [`Workspace::apply`], which afterwards bumps `epoch` and forgets the
///   heads of the sessions it touched ([`sessions_touched`]); dropping a
///   workspace forgets them all.
/// - A writer holding a session's stripe lock (every writer of its turns
///   and record holds it) publishes the head it has just written
///   ([`SessionHeads::publish`]): nobody else can have changed it.
/// - A reader that missed keeps what it read from the store only if no
///   write bumped `epoch` since before its read ([`SessionHeads::offer`]),
///   so a read racing a write never leaves a stale head behind.
///
/// Nothing is persisted: after a restart the cache starts empty and fills
/// from the store. It assumes one process writes the workspace (the
/// single-writer invariant; in a cluster, the lease holder, and
/// [`crate::Memory::evict`] clears the heads whenever the lease may have
/// changed hands).
#[derive(Debug, Default)]
pub(crate) struct SessionHeads {
    inner: parking_lot::Mutex<HeadsInner>,
    /// How many sessions the workspace stores, once counted (for the
    /// `max_sessions` cap): counted from the store on first need, kept
    /// current by the writes that create sessions, forgotten by any that
    /// delete one (and by [`SessionHeads::clear`]).
    stored: parking_lot::Mutex<Option<u64>>,
    /// The sessions' idempotency keys, forgotten with their heads (when a
    /// batch touches their turns, and on [`SessionHeads::clear`]).
    pub(crate) keys: SessionKeys,
}

#[derive(Debug, Default)]
struct HeadsInner {
    epoch: u64,
    heads: HashMap<String, Session>,
}

impl SessionHeads {
    /// The cached head of `id`, or the epoch to hand to [`Self::offer`]
    /// after reading it from the store.
    fn get(&self, id: &str) -> std::result::Result<Session, u64> {
        let inner = self.inner.lock();
        inner.heads.get(id).cloned().ok_or(inner.epoch)
    }

    /// Keeps a head read from the store at `epoch`, unless a write came since.
    fn offer(&self, epoch: u64, session: &Session) {
        let mut inner = self.inner.lock();
        if inner.epoch == epoch {
            inner.insert(session.clone());
        }
    }

    /// Keeps the head a writer holding the session's stripe lock has just
    /// written (after its batch was applied).
    fn publish(&self, session: Session) {
        self.inner.lock().insert(session);
    }

    /// Forgets what a batch touched: the heads of the sessions whose
    /// record or turns it wrote, the key sets of those whose turns (or old
    /// idempotency entries) it wrote.
    pub(crate) fn invalidate(&self, touched: &SessionsTouched) {
        {
            let mut inner = self.inner.lock();
            inner.epoch += 1;
            for id in &touched.heads {
                inner.heads.remove(id);
            }
        }
        if !touched.turns.is_empty() {
            self.keys.invalidate(&touched.turns);
        }
    }

    /// How many heads are held (for the tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.inner.lock().heads.len()
    }

    /// Forgets every head and key set.
    pub(crate) fn clear(&self) {
        {
            let mut inner = self.inner.lock();
            inner.epoch += 1;
            inner.heads.clear();
        }
        self.keys.clear();
        self.forget_count();
    }

    /// Forgets the count of stored sessions (a write deleted some).
    pub(crate) fn forget_count(&self) {
        *self.stored.lock() = None;
    }
}

impl HeadsInner {
    /// Keeps `session`'s head, unless it has ended: an ended session's
    /// turns stop coming, so its head would be held for nothing until the
    /// cache starts over (it is read from the store if asked for again).
    fn insert(&mut self, session: Session) {
        if session.state == SessionState::Ended {
            self.heads.remove(&session.id);
            return;
        }
        if self.heads.len() >= MAX_CACHED_HEADS && !self.heads.contains_key(&session.id) {
            self.heads.clear();
        }
        self.heads.insert(session.id.clone(), session);
    }
}

/// The sessions a batch writes something of.
#[derive(Debug, Default)]
pub(crate) struct SessionsTouched {
    /// Those whose head it may change: it writes a turn or the session
    /// record.
    pub(crate) heads: BTreeSet<String>,
    /// Those whose idempotency keys it may change: it writes a turn or an
    /// old idempotency entry.
    pub(crate) turns: BTreeSet<String>,
}

impl SessionsTouched {
    pub(crate) fn is_empty(&self) -> bool {
        self.heads.is_empty() && self.turns.is_empty()
    }
}

/// The sessions whose head or keys a batch may change.
pub(crate) fn sessions_touched(batch: &WriteBatch) -> SessionsTouched {
    let mut out = SessionsTouched::default();
    for op in batch.ops() {
        let (WriteOp::Put {
            collection, key, ..
        }
        | WriteOp::Delete { collection, key }) = op;
        let id = |id: &[u8]| String::from_utf8_lossy(id).into_owned();
        match collection {
            Collection::Sessions => {
                out.heads.insert(id(key));
            }
            Collection::Turns => {
                let session = id(session_of_turn_key(key).unwrap_or(key));
                out.heads.insert(session.clone());
                out.turns.insert(session);
            }
            Collection::Idempotency => {
                out.turns
                    .insert(id(session_of_turn_key(key).unwrap_or(key)));
            }
            _ => {}
        }
    }
    out
}

// Sessions on a workspace: created explicitly or by a first turn, read, ended.
impl Workspace {
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
            // A main bootstrap of any session is the host starting again:
            // nothing to change. A sub-agent or cron bootstrap names the
            // session's lineage, which may only narrow.
            if spec.kind == SessionKind::Main
                || (existing.kind == spec.kind && existing.parent == spec.parent)
            {
                return Ok(existing);
            }
            if existing.kind != SessionKind::Main || existing.parent.is_some() {
                return Err(MemoryError::LineageMismatch {
                    session: spec.id.clone(),
                    existing: existing.kind.as_str(),
                    existing_parent: existing.parent,
                    given: spec.kind.as_str(),
                    given_parent: spec.parent.clone(),
                });
            }
            // A session its first turn made (a main one) becomes the
            // sub-agent the host says it is: it sees less from now on.
            // Its new parent must exist, and not descend from it.
            let mut ancestor = spec.parent.clone();
            let mut hops = 0;
            while let Some(id) = ancestor {
                let Some(found) = self.load_session(&id)? else {
                    if hops == 0 {
                        return Err(MemoryError::ParentNotFound {
                            session: spec.id.clone(),
                            parent: id,
                        });
                    }
                    break; // an ancestor forgotten: the chain ends there
                };
                hops += 1;
                if found.id == spec.id || hops > 1_000 {
                    return Err(MemoryError::Invalid {
                        what: "parent session",
                        reason: format!(
                            "session {:?} cannot become a descendant of itself",
                            spec.id
                        ),
                    });
                }
                ancestor = found.parent;
            }
            let narrowed = Session {
                kind: spec.kind,
                parent: spec.parent.clone(),
                ..existing
            };
            let mut batch = WriteBatch::default();
            put_session(&mut batch, &narrowed)?;
            self.apply(batch)?;
            self.heads.publish(narrowed.clone());
            drop(guard);
            self.shared.store.sync()?;
            return Ok(narrowed);
        }
        if let Some(parent) = &spec.parent
            && self.load_session(parent)?.is_none()
        {
            return Err(MemoryError::ParentNotFound {
                session: spec.id.clone(),
                parent: parent.clone(),
            });
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
        self.admit_sessions(1)?;
        let mut batch = WriteBatch::default();
        put_session(&mut batch, &session)?;
        batch.put(
            Collection::WorkContextSessions,
            work_context_key(&session.work_context, &session.id),
            Vec::new(),
        );
        self.apply(batch)?;
        self.sessions_created(1);
        self.heads.publish(session.clone());
        drop(guard);
        self.shared.store.sync()?;
        Ok(session)
    }

    /// Refuses (`cap_reached`) a write that would create `new` sessions
    /// past `max_sessions`. Writers of different sessions check at the same
    /// time, so the cap may be passed by the sessions created at once.
    fn admit_sessions(&self, new: usize) -> Result<()> {
        if new == 0 {
            return Ok(());
        }
        let limit = self.shared.config.limits.max_sessions;
        let mut stored = self.heads.stored.lock();
        let count = match *stored {
            Some(n) => n,
            None => {
                let n = self.store.scan_prefix(Collection::Sessions, b"")?.len() as u64;
                *stored = Some(n);
                n
            }
        };
        if count.saturating_add(new as u64) > limit as u64 {
            return Err(MemoryError::CapReached {
                workspace: self.id.clone(),
                what: "sessions",
                setting: "max_sessions",
                limit,
            });
        }
        Ok(())
    }

    /// Counts `new` sessions a write has just created.
    fn sessions_created(&self, new: usize) {
        if let Some(n) = self.heads.stored.lock().as_mut() {
            *n += new as u64;
        }
    }

    /// A session's head: from [`SessionHeads`] when cached, else read from
    /// the store ([`Workspace::read_session`]) and cached.
    fn load_session(&self, id: &str) -> Result<Option<Session>> {
        let epoch = match self.heads.get(id) {
            Ok(session) => return Ok(Some(session)),
            Err(epoch) => epoch,
        };
        let session = self.read_session(id)?;
        if let Some(session) = &session {
            self.heads.offer(epoch, session);
        }
        Ok(session)
    }

    /// Reads a session record and derives `next_seq` and `last_turn_at` from
    /// its last turn. They are not rewritten on every append: the turn key
    /// already carries the sequence number, and one fewer record per append
    /// is fewer bytes to fsync.
    pub(crate) fn read_session(&self, id: &str) -> Result<Option<Session>> {
        let Some(raw) = self.store.get(Collection::Sessions, id.as_bytes())? else {
            return Ok(None);
        };
        let mut session: Session = decode("session", id.as_bytes(), &raw)?;
        match self
            .store
            .last_with_prefix(Collection::Turns, &session_prefix(id))?
        {
            Some((key, value)) => {
                // Only the last turn's seq and time: its content is not copied.
                let (seq, at) = decode_turn_head(&key, &value)?;
                session.next_seq = seq + 1;
                session.last_turn_at = Some(at);
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
        self.heads.publish(session.clone());
        if session.state == SessionState::Ended {
            self.heads.keys.forget(id);
        }
        drop(guard);
        self.shared.store.sync()?;
        Ok(session)
    }
}

// Turns on a workspace: validated batches, gapless sequence numbers,
// idempotency keys; transcripts read back in order.
impl Workspace {
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

    /// True when a write to this workspace only touches memory until it is
    /// synced ([`Store::buffered`](crate::store::Store::buffered)): an async
    /// caller may run [`Workspace::apply_turns`] on its own thread, then
    /// await [`Workspace::sync_later`] before acknowledging.
    #[doc(hidden)]
    pub fn buffered_writes(&self) -> bool {
        self.shared.store.buffered()
    }

    /// [`Memory::sync`] from a workspace handle.
    #[doc(hidden)]
    pub fn sync(&self) -> Result<()> {
        Ok(self.shared.store.sync()?)
    }

    /// [`Memory::sync`] for async callers
    /// ([`Store::sync_later`](crate::store::Store::sync_later)); `None` when
    /// the store only syncs blocking.
    #[doc(hidden)]
    pub fn sync_later(&self) -> Option<crate::store::Durable> {
        self.shared.store.sync_later()
    }

    /// Like [`Workspace::append_turns`] but returns before the fsync: the
    /// caller must call [`Memory::sync`] before acknowledging anything.
    /// Used by callers that group several batches into one commit.
    #[doc(hidden)]
    pub fn apply_turns(&self, turns: &[TurnInput]) -> Result<Vec<Ack>> {
        let stripes = self.check_turns(turns)?;
        let guard = self.shared.lock_stripes(stripes);
        self.write_turns(turns, guard)
    }

    /// Like [`Workspace::apply_turns`] but never waits for a lock: `None`
    /// (nothing written) when another writer holds one of the sessions'
    /// locks (a compaction or a forget may hold one for long). For a caller
    /// on a thread that must not block.
    #[doc(hidden)]
    pub fn try_apply_turns(&self, turns: &[TurnInput]) -> Result<Option<Vec<Ack>>> {
        let stripes = self.check_turns(turns)?;
        match self.shared.try_lock_stripes(stripes) {
            Some(guard) => self.write_turns(turns, guard).map(Some),
            None => Ok(None),
        }
    }

    /// Validates a batch; the lock stripes of its sessions.
    fn check_turns(&self, turns: &[TurnInput]) -> Result<BTreeSet<usize>> {
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
        Ok(turns
            .iter()
            .map(|t| self.shared.stripe(&self.id, &t.session))
            .collect())
    }

    /// Writes a validated batch under its sessions' locks (`guard`).
    fn write_turns(
        &self,
        turns: &[TurnInput],
        guard: Vec<parking_lot::MutexGuard<'_, ()>>,
    ) -> Result<Vec<Ack>> {
        // Per session: its head, and whether this batch creates it.
        let mut sessions: HashMap<&str, (Session, bool)> = HashMap::new();
        // Per session: its idempotency keys, taken out of the cache for the
        // length of the write (`None`: not held and not needed yet).
        let mut key_sets: HashMap<&str, Option<KeyIndex>> = HashMap::new();
        // Per session: the time of the last turn this batch appends (what a
        // fresh read would derive `last_turn_at` from).
        let mut last_appended: HashMap<&str, DateTime<Utc>> = HashMap::new();
        let mut seen_keys: HashMap<(&str, &str), u64> = HashMap::new();
        // New keys: session, key, its fingerprint, the turn it names.
        let mut new_keys: Vec<(&str, &str, u64, u64)> = Vec::new();
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
                // A session this batch creates has no keys yet; one that
                // exists keeps its held set out of the cache until the
                // batch is applied (every batch that writes turns forgets
                // the sets of their sessions).
                let keys = if loaded.1 {
                    Some(KeyIndex::default())
                } else {
                    self.heads.keys.take(sid)
                };
                key_sets.insert(sid, keys);
                sessions.insert(sid, loaded);
            }
            let Some((session, _)) = sessions.get_mut(sid) else {
                continue;
            };
            if let Some(wc) = &input.work_context
                && wc != &session.work_context
            {
                return Err(MemoryError::InBatch {
                    index,
                    source: Box::new(MemoryError::WorkContextMismatch {
                        session: sid.to_owned(),
                        existing: session.work_context.clone(),
                        given: wc.clone(),
                    }),
                });
            }
            // The key and its fingerprint, computed once: looked up, then held.
            let keyed = input
                .idempotency_key
                .as_deref()
                .map(|key| (key, self.heads.keys.fingerprint(key)));
            if let Some((key, fingerprint)) = keyed {
                let seq = match seen_keys.get(&(sid, key)) {
                    Some(seq) => Some(*seq),
                    None => {
                        let slot = key_sets.entry(sid).or_default();
                        let set = match slot {
                            Some(set) => set,
                            None => slot.insert(self.read_keys(sid)?),
                        };
                        self.stored_key(sid, set, key, fingerprint)?
                    }
                };
                if let Some(seq) = seq {
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
            // The turn record names its key: that is the key's only record.
            batch.put(
                Collection::Turns,
                turn_key(sid, seq),
                encode_turn(&turn, input.idempotency_key.as_deref())?,
            );
            if let Some((key, fingerprint)) = keyed {
                seen_keys.insert((sid, key), seq);
                new_keys.push((sid, key, fingerprint, seq));
            }
            session.next_seq += 1;
            session.last_turn_at =
                Some(session.last_turn_at.map_or(timestamp, |t| t.max(timestamp)));
            last_appended.insert(sid, timestamp);
            acks.push(Ack {
                seq,
                duplicate: false,
            });
        }
        let created = sessions.values().filter(|(_, created)| *created).count();
        self.admit_sessions(created)?;
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
        if !batch.is_empty() {
            // A failed apply drops the taken key sets: they are read again.
            self.apply(batch)?;
            self.sessions_created(created);
            // The stripe locks are held: these heads are the store's now.
            for (sid, at) in last_appended {
                if let Some((session, _)) = sessions.remove(sid) {
                    self.heads.publish(Session {
                        last_turn_at: Some(at),
                        ..session
                    });
                }
            }
        }
        for (sid, key, fingerprint, seq) in new_keys {
            if let Some(Some(set)) = key_sets.get_mut(sid) {
                set.insert(fingerprint, key, seq);
            }
        }
        for (sid, set) in key_sets {
            if let Some(set) = set {
                self.heads.keys.put_back(sid, set);
            }
        }
        drop(guard);
        Ok(acks)
    }

    /// The turn of `session` appended with `key` (whose fingerprint is
    /// `fingerprint`), if any, as `set` knows it (a fingerprint's match
    /// confirmed by the turn's record).
    fn stored_key(
        &self,
        session: &str,
        set: &KeyIndex,
        key: &str,
        fingerprint: u64,
    ) -> Result<Option<u64>> {
        Ok(match set.lookup(fingerprint, key) {
            Lookup::Found(seq) => Some(seq),
            Lookup::Confirm(seq) => {
                (self.idempotency_key_of(session, seq)?.as_deref() == Some(key)).then_some(seq)
            }
            Lookup::Absent => None,
        })
    }

    /// Reads the idempotency keys of `session` from the store: those its
    /// turns name, and the entries of stores written before turn records
    /// named their keys (held whole: their turns may not name them). Pages
    /// through the turns, so a long session costs its length once, not
    /// its size in memory.
    fn read_keys(&self, session: &str) -> Result<KeyIndex> {
        const PAGE: usize = 1024;
        let mut set = KeyIndex::default();
        let prefix = session_prefix(session);
        for (entry, value) in self.store.scan_prefix(Collection::Idempotency, &prefix)? {
            let key =
                std::str::from_utf8(&entry[prefix.len()..]).map_err(|_| MemoryError::Corrupt {
                    what: "idempotency entry",
                    key: String::from_utf8_lossy(&entry).into_owned(),
                    reason: "the key is not UTF-8".to_owned(),
                })?;
            set.insert_exact(key, decode_seq(&value)?);
        }
        let mut from = 0u64;
        loop {
            let page = self.store.scan_prefix_from(
                Collection::Turns,
                &prefix,
                &from.to_be_bytes(),
                PAGE,
            )?;
            for (turn, value) in &page {
                let seq = decode_seq(&turn[prefix.len()..])?;
                if let Some(key) = stored_idempotency_key(turn, value)?
                    && !set.holds_exactly(key)
                {
                    set.insert(self.heads.keys.fingerprint(key), key, seq);
                }
                from = seq.saturating_add(1);
            }
            if page.len() < PAGE {
                break;
            }
        }
        Ok(set)
    }

    fn validate_turn(&self, turn: &TurnInput) -> Result<()> {
        validate_turn(turn, &self.shared.config.limits)
    }

    /// The idempotency key the stored turn `seq` of `session` was appended
    /// with, if any.
    fn idempotency_key_of(&self, session: &str, seq: u64) -> Result<Option<String>> {
        let key = turn_key(session, seq);
        match self.store.get(Collection::Turns, &key)? {
            Some(value) => Ok(stored_idempotency_key(&key, &value)?.map(str::to_owned)),
            None => Ok(None),
        }
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
            out.push(decode_turn(&self.id, &key, &value)?);
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
            .map(|value| decode_turn(&self.id, &key, &value))
            .transpose()
    }

    /// The last `n` turns of a session, oldest first.
    pub fn recent_turns(&self, session: &str, n: usize) -> Result<Vec<Turn>> {
        let meta = self.session(session)?;
        // Without gaps (no turn erased) the last n turns are the seqs from
        // next_seq - n: one seek and a forward scan, much cheaper in sled
        // than its reverse iterator (assembly asks on every call).
        let from = meta.next_seq.saturating_sub(n as u64);
        let forward = self.transcript(session, from, Some(n))?;
        if forward.len() as u64 == meta.next_seq - from {
            return Ok(forward);
        }
        let mut turns: Vec<Turn> = self
            .store
            .scan_prefix_rev(Collection::Turns, &session_prefix(session), n)?
            .into_iter()
            .map(|(k, v)| decode_turn(&self.id, &k, &v))
            .collect::<Result<_>>()?;
        turns.reverse();
        Ok(turns)
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

/// Checks one turn on its own (ids, the tool-call id a tool turn needs, the
/// content's size), as an append would before writing anything. What needs
/// the store (a session's work context) is checked at append time.
///
/// ```
/// use cairn_memory::{Limits, Role, TurnInput, record::validate_turn};
/// assert!(validate_turn(&TurnInput::new("s1", Role::User, "hi"), &Limits::default()).is_ok());
/// assert!(validate_turn(&TurnInput::new("s1", Role::Tool, "42"), &Limits::default()).is_err());
/// ```
pub fn validate_turn(turn: &TurnInput, limits: &crate::config::Limits) -> Result<()> {
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
    if let Some(at) = turn.timestamp {
        crate::ids::validate_time("turn timestamp", at)?;
    }
    if turn.role == Role::Tool && turn.tool_call_id.is_none() {
        return Err(MemoryError::MissingToolCallId {
            session: turn.session.clone(),
        });
    }
    check_text("turn content", &turn.content, limits.max_content_bytes)
}
