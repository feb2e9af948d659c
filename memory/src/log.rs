//! The memory log: append-only typed entries.
//!
//! Entries are never modified. A correction is a new entry whose `replaces`
//! points at the old one; reading resolves chains forward (A → B → C shows only
//! C as live) while [`crate::Workspace::history`] still returns every version.
//! Decay is a read concern: an entry whose kind's time-to-live has passed stops
//! showing as live but stays in the record.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::ids::{display_for_slug, validate_id, validate_slug};
use crate::live::{LiveList, Moves};
use crate::maintain::Lifecycle;
use crate::memory::{
    DEFAULT_WORK_CONTEXT, LiveBase, LiveDerived, LiveEntries, LogSnapshot, Workspace, check_size,
    check_text, decode, encode, in_batch,
};
pub use crate::name::Name;
use crate::name::Names;
use crate::store::{Collection, WriteBatch};
use crate::subjects::{Subject, SubjectKind};

/// The kinds of memory-log entry.
///
/// The first five are the general kinds; the rest are the continuity kinds
/// of a work context (see docs/DESIGN.md, *Entry kinds*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// Something to do.
    Task,
    /// Something learned or observed.
    Fact,
    /// A choice made, with its reasoning.
    Decision,
    /// An open loop; closes when replaced by a decision or fact.
    Question,
    /// Where things stand at a session boundary.
    Handoff,
    /// A pointer to a session summary.
    SessionSummaryRef,
    /// An unresolved question carried across sessions.
    OpenQuestion,
    /// A decision that shapes the direction of the work.
    KeyDecision,
    /// A note that something changed in another conversation.
    CrossConversationUpdate,
    /// The work moved to another phase (drafting, research, review…).
    WorkPhaseChange,
    /// Something owed by a deadline: an open question maintenance promoted
    /// after it stayed unresolved (does not decay).
    Obligation,
    /// A standing rule: a decision maintenance promoted after it held
    /// across sessions (does not decay).
    Directive,
}

impl EntryKind {
    /// Every kind, in declaration order.
    pub const ALL: [EntryKind; 12] = [
        EntryKind::Task,
        EntryKind::Fact,
        EntryKind::Decision,
        EntryKind::Question,
        EntryKind::Handoff,
        EntryKind::SessionSummaryRef,
        EntryKind::OpenQuestion,
        EntryKind::KeyDecision,
        EntryKind::CrossConversationUpdate,
        EntryKind::WorkPhaseChange,
        EntryKind::Obligation,
        EntryKind::Directive,
    ];

    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Task => "task",
            EntryKind::Fact => "fact",
            EntryKind::Decision => "decision",
            EntryKind::Question => "question",
            EntryKind::Handoff => "handoff",
            EntryKind::SessionSummaryRef => "session_summary_ref",
            EntryKind::OpenQuestion => "open_question",
            EntryKind::KeyDecision => "key_decision",
            EntryKind::CrossConversationUpdate => "cross_conversation_update",
            EntryKind::WorkPhaseChange => "work_phase_change",
            EntryKind::Obligation => "obligation",
            EntryKind::Directive => "directive",
        }
    }

    /// Parses the `snake_case` name.
    pub fn parse(name: &str) -> Option<EntryKind> {
        EntryKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for EntryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Status of a task entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Still to do (blocked tasks are open too).
    Open,
    /// Done.
    Done,
}

/// Where an entry came from: a session and an inclusive range of its turns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Provenance {
    /// The session.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub session: Name,
    /// First turn (sequence number).
    pub from_seq: u64,
    /// Last turn, inclusive.
    pub to_seq: u64,
}

/// An entry as a caller hands it in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EntryInput {
    /// Optional caller-chosen id (for idempotent imports); a ULID otherwise.
    #[serde(default)]
    pub id: Option<String>,
    /// The kind.
    pub kind: EntryKind,
    /// One sentence to a short paragraph.
    pub content: String,
    /// More: on a decision, why; on a fact, background.
    #[serde(default)]
    pub detail: Option<String>,
    /// Subject slug; unknown slugs are added to the registry.
    #[serde(default)]
    pub subject: Option<String>,
    /// Work context; the provenance session's, or `default`.
    #[serde(default)]
    pub work_context: Option<String>,
    /// Source session and turns.
    #[serde(default)]
    pub provenance: Option<Provenance>,
    /// The entry this one corrects.
    #[serde(default)]
    pub replaces: Option<String>,
    /// For tasks; `open` when absent.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// When it was captured; the clock's time when absent.
    #[serde(default)]
    pub timestamp: Option<DateTime<Utc>>,
    /// For captured entries: the significance-gate generation that made
    /// the work context dirty (`name@hash#n`), so the entry can say under
    /// which policy it was collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_generation: Option<String>,
}

impl EntryInput {
    /// An entry with the required fields only.
    ///
    /// ```
    /// use cairn_memory::{EntryInput, EntryKind};
    /// let e = EntryInput::new(EntryKind::Decision, "Use queue-based retries")
    ///     .about("auth-migration");
    /// assert_eq!(e.subject.as_deref(), Some("auth-migration"));
    /// ```
    pub fn new(kind: EntryKind, content: &str) -> Self {
        EntryInput {
            id: None,
            kind,
            content: content.to_owned(),
            detail: None,
            subject: None,
            work_context: None,
            provenance: None,
            replaces: None,
            status: None,
            timestamp: None,
            gate_generation: None,
        }
    }

    /// Sets the subject.
    pub fn about(mut self, subject: &str) -> Self {
        self.subject = Some(subject.to_owned());
        self
    }

    /// Sets `replaces`.
    pub fn replacing(mut self, id: &str) -> Self {
        self.replaces = Some(id.to_owned());
        self
    }

    /// Sets the provenance.
    pub fn from_turns(mut self, session: &str, from_seq: u64, to_seq: u64) -> Self {
        self.provenance = Some(Provenance {
            session: session.into(),
            from_seq,
            to_seq,
        });
        self
    }

    /// Sets the work context.
    pub fn in_context(mut self, work_context: &str) -> Self {
        self.work_context = Some(work_context.to_owned());
        self
    }

    /// Sets the detail.
    pub fn with_detail(mut self, detail: &str) -> Self {
        self.detail = Some(detail.to_owned());
        self
    }
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Entry {
    /// Id (ULID unless the caller chose one).
    pub id: String,
    /// The kind.
    pub kind: EntryKind,
    /// The information.
    pub content: String,
    /// More information.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub detail: Option<Name>,
    /// Subject slug as written (may since have been renamed; see `EntryView::subject`).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub subject: Option<Name>,
    /// Work context.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub work_context: Name,
    /// Source session and turns.
    pub provenance: Option<Provenance>,
    /// The entry this one corrects.
    pub replaces: Option<String>,
    /// Task status.
    pub status: Option<TaskStatus>,
    /// When it was captured.
    pub timestamp: DateTime<Utc>,
    /// When cairn recorded it.
    pub recorded_at: DateTime<Utc>,
    /// For captured entries: the significance-gate generation that made
    /// the work context dirty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub gate_generation: Option<Name>,
}

impl Entry {
    /// The order of the live list and every listing: newest first, ties
    /// by id. Patched lists merge in it, so every sort must agree.
    pub(crate) fn newest_first(&self, other: &Entry) -> std::cmp::Ordering {
        (other.timestamp, &other.id).cmp(&(self.timestamp, &self.id))
    }

    /// Makes the names this entry repeats share one allocation with every
    /// other entry held: its subject, work context and gate generation the ones in
    /// `names`, its session the one in `sessions` (the entries decoded
    /// together: a session's entries are captured together). The memory
    /// log held in memory is most of a long run's heap.
    pub(crate) fn share_names(&mut self, names: &Names, sessions: &Names) {
        names.share(&mut self.work_context);
        if let Some(detail) = &mut self.detail {
            names.share_text(detail);
        }
        for name in [&mut self.subject, &mut self.gate_generation]
            .into_iter()
            .flatten()
        {
            names.share(name);
        }
        if let Some(p) = &mut self.provenance {
            sessions.share(&mut p.session);
        }
    }

    /// A bare entry for unit tests: `kind`, `content`, `subject`, in
    /// `work_context`, captured and recorded `at`; nothing else set.
    #[cfg(test)]
    pub(crate) fn bare(
        id: &str,
        kind: EntryKind,
        content: &str,
        subject: Option<&str>,
        work_context: &str,
        at: DateTime<Utc>,
    ) -> Entry {
        Entry {
            id: id.into(),
            kind,
            content: content.into(),
            detail: None,
            subject: subject.map(Name::from),
            work_context: work_context.into(),
            provenance: None,
            replaces: None,
            status: None,
            timestamp: at,
            recorded_at: at,
            gate_generation: None,
        }
    }
}

/// Whether an entry shows as live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum EntryStatus {
    /// Current and not decayed.
    Live,
    /// Corrected by a later entry.
    Replaced {
        /// The entry that replaced it directly.
        by: String,
    },
    /// Its kind's time-to-live has passed.
    Expired {
        /// When it decayed.
        at: DateTime<Utc>,
    },
    /// Maintenance moved it out of the live indexes (still readable, and
    /// searchable when a search asks for archived items; restorable).
    Archived {
        /// When.
        at: DateTime<Utc>,
        /// The maintenance run that archived it.
        run: String,
    },
}

/// An entry with what reading resolved about it.
///
/// On the wire it is one flat object (`EntryViewWire`): the entry's
/// fields, `subject` the canonical slug, `status` the lifecycle, and the
/// task's own status under `task_status`, so no key appears twice (a
/// flattened [`Entry`] put `subject` and `status` in the object two times,
/// and which one a client kept was up to its JSON parser).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "EntryViewWire", into = "EntryViewWire")]
pub struct EntryView {
    /// The stored entry, shared with the log snapshot it was read from (a
    /// live list is pointers, not copies).
    pub entry: Arc<Entry>,
    /// Canonical subject slug after renames and merges (shared: a live
    /// list is copied per change of the log, and this copies a pointer).
    pub subject: Option<Arc<str>>,
    /// Live, replaced or expired.
    pub status: EntryStatus,
    /// When the entry decays (none: it does not).
    pub decay_at: Option<DateTime<Utc>>,
}

/// The wire form of an [`EntryView`] (JSON, and the OpenAPI schema).
#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = EntryView))]
pub(crate) struct EntryViewWire {
    /// Id.
    id: String,
    /// The kind.
    kind: EntryKind,
    /// The information.
    content: String,
    /// More information.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    detail: Option<Name>,
    /// Canonical subject slug after renames and merges.
    subject: Option<String>,
    /// Work context.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    work_context: Name,
    /// Source session and turns.
    provenance: Option<Provenance>,
    /// The entry this one corrects.
    replaces: Option<String>,
    /// A task's status (open or done).
    #[serde(default)]
    task_status: Option<TaskStatus>,
    /// When it was captured.
    timestamp: DateTime<Utc>,
    /// When cairn recorded it.
    recorded_at: DateTime<Utc>,
    /// For captured entries: the significance-gate generation that made
    /// the work context dirty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    gate_generation: Option<Name>,
    /// Live, replaced, expired or archived.
    status: EntryStatus,
    /// When the entry decays (none: it does not).
    decay_at: Option<DateTime<Utc>>,
}

impl From<EntryView> for EntryViewWire {
    fn from(view: EntryView) -> Self {
        let EntryView {
            entry,
            subject,
            status,
            decay_at,
        } = view;
        let entry = Arc::unwrap_or_clone(entry);
        EntryViewWire {
            id: entry.id,
            kind: entry.kind,
            content: entry.content,
            detail: entry.detail,
            subject: subject.as_deref().map(str::to_owned),
            work_context: entry.work_context,
            provenance: entry.provenance,
            replaces: entry.replaces,
            task_status: entry.status,
            timestamp: entry.timestamp,
            recorded_at: entry.recorded_at,
            gate_generation: entry.gate_generation,
            status,
            decay_at,
        }
    }
}

impl From<EntryViewWire> for EntryView {
    /// The subject as written is not on the wire: the canonical one stands
    /// for it.
    fn from(wire: EntryViewWire) -> Self {
        EntryView {
            entry: Arc::new(Entry {
                id: wire.id,
                kind: wire.kind,
                content: wire.content,
                detail: wire.detail,
                subject: wire.subject.as_deref().map(Name::from),
                work_context: wire.work_context,
                provenance: wire.provenance,
                replaces: wire.replaces,
                status: wire.task_status,
                timestamp: wire.timestamp,
                recorded_at: wire.recorded_at,
                gate_generation: wire.gate_generation,
            }),
            subject: wire.subject.as_deref().map(Arc::from),
            status: wire.status,
            decay_at: wire.decay_at,
        }
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for EntryView {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <EntryViewWire as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for EntryView {
    fn name() -> std::borrow::Cow<'static, str> {
        <EntryViewWire as utoipa::ToSchema>::name()
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <EntryViewWire as utoipa::ToSchema>::schemas(schemas);
    }
}

impl EntryView {
    /// True when the entry shows as live.
    pub fn is_live(&self) -> bool {
        self.status == EntryStatus::Live
    }
}

/// What to read from the log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams))]
#[serde(default, deny_unknown_fields)]
pub struct EntryFilter {
    /// Only this kind.
    pub kind: Option<EntryKind>,
    /// Only this subject (old slugs resolve to their canonical subject).
    pub subject: Option<String>,
    /// Only this work context.
    pub work_context: Option<String>,
    /// Only entries whose provenance is this session.
    pub session: Option<String>,
    /// Include replaced and expired entries (the full history).
    pub all: bool,
    /// At most this many, newest first (0 or absent: no limit).
    pub limit: Option<usize>,
}

/// Time-to-live per entry kind, in days.
///
/// Defaults (see docs/DESIGN.md, *Decay by kind*) for the continuity kinds:
/// session summary refs 30 days, open questions 60, key decisions 60,
/// cross-conversation updates 7, work-phase changes 30. The general kinds
/// (task, fact, decision, question, handoff) do not decay by default: they
/// fade from the briefing's time windows and by replacement, not by expiry;
/// neither do the kinds promotion makes (obligation, directive).
/// `ttl_days` overrides the default per kind; 0 means "never decays".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DecayConfig {
    /// Overrides: days per kind (`snake_case` kind names as keys), 0 for never.
    pub ttl_days: BTreeMap<EntryKind, u32>,
}

impl DecayConfig {
    /// The default time-to-live of a kind, in days (`None`: never decays).
    pub fn default_ttl_days(kind: EntryKind) -> Option<u32> {
        match kind {
            EntryKind::SessionSummaryRef | EntryKind::WorkPhaseChange => Some(30),
            EntryKind::OpenQuestion | EntryKind::KeyDecision => Some(60),
            EntryKind::CrossConversationUpdate => Some(7),
            _ => None,
        }
    }

    /// The effective time-to-live of a kind, in days (`None`: never decays).
    pub fn ttl_days(&self, kind: EntryKind) -> Option<u32> {
        match self.ttl_days.get(&kind) {
            Some(0) => None,
            Some(days) => Some(*days),
            None => Self::default_ttl_days(kind),
        }
    }

    /// When an entry of `kind` captured at `timestamp` decays; `None` for a
    /// kind that does not decay, and for a time so late that its decay falls
    /// outside the calendar (never, in effect: such times are refused at
    /// the edge, but a store written before that may hold one).
    ///
    /// ```
    /// use cairn_memory::{DecayConfig, EntryKind};
    /// use chrono::{TimeZone, Utc};
    /// let t = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    /// let decay = DecayConfig::default();
    /// assert_eq!(decay.decay_at(EntryKind::OpenQuestion, t), Some(t + chrono::Duration::days(60)));
    /// assert_eq!(decay.decay_at(EntryKind::Fact, t), None);
    /// ```
    pub fn decay_at(&self, kind: EntryKind, timestamp: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let days = self.ttl_days(kind)?;
        timestamp.checked_add_signed(Duration::days(i64::from(days)))
    }
}

// The log on a workspace: appends (checked replacement chains, subjects
// registered on first use) and reads resolved against replacements, aliases
// and decay.
impl Workspace {
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
        let guard = self.lock_entries();
        let mut batch = WriteBatch::default();
        let out = self.stage_entries(inputs, &mut batch)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        Ok(out)
    }

    /// Checks `inputs` as [`Workspace::append_entries`] does and adds their
    /// writes (entries, replacement links, new subjects) to `batch`. The
    /// caller holds the entries lock ([`Workspace::lock_entries`]) until it
    /// has applied the batch, so the checks still hold when it lands (a
    /// maintenance run stages its promotions into its own batch this way).
    pub(crate) fn stage_entries(
        &self,
        inputs: &[EntryInput],
        batch: &mut WriteBatch,
    ) -> Result<Vec<Entry>> {
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
        let now = self.now();
        // Whether an id is taken: from the cached log when it is current
        // (the caller holds the entries lock, so no entry lands meanwhile),
        // else from the store (a read that pulls the log's pages from disk
        // once the log outgrows the page cache).
        let log = self.cached_log_snapshot();
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
            let stored = match &log {
                Some(log) => log.entries.contains(id.as_bytes()),
                None => self
                    .store
                    .get(Collection::Entries, id.as_bytes())?
                    .is_some(),
            };
            if batch_ids.contains_key(&id) || stored {
                return Err(MemoryError::InBatch {
                    index,
                    source: Box::new(MemoryError::DuplicateEntryId { id }),
                });
            }
            batch_ids.insert(id.clone(), index);
            ids.push(id);
        }

        let aliases = self.alias_map()?;
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
                        session: p.session.to_string(),
                        from: p.from_seq,
                        to: p.to_seq,
                        last,
                    }));
                }
                match &work_context {
                    Some(wc) if wc != &session.work_context => {
                        return Err(fail(MemoryError::WorkContextMismatch {
                            session: p.session.to_string(),
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
                detail: input.detail.as_deref().map(Name::from),
                subject: input.subject.as_deref().map(Name::from),
                work_context: Name::from(work_context.as_deref().unwrap_or(DEFAULT_WORK_CONTEXT)),
                provenance: input.provenance.clone(),
                replaces: input.replaces.clone(),
                status,
                timestamp: input.timestamp.unwrap_or(now),
                recorded_at: now,
                gate_generation: input.gate_generation.as_deref().map(Name::from),
            };
            batch.put(Collection::Entries, id.as_bytes().to_vec(), encode(&entry)?);
            out.push(entry);
        }
        Ok(out)
    }

    /// Checks one entry's own fields as [`Workspace::append_entries`]
    /// does before it writes (ids, sizes, slug, time, status), without the
    /// checks against the store (provenance, replacements, duplicates).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// assert!(ws.check_entry(&EntryInput::new(EntryKind::Fact, "The API is v2")).is_ok());
    /// assert!(ws.check_entry(&EntryInput::new(EntryKind::Fact, "")).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_entry(&self, input: &EntryInput) -> Result<()> {
        self.validate_entry(input)
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
        if let Some(g) = &input.gate_generation {
            check_text("gate generation", g, 256)?;
        }
        if let Some(at) = input.timestamp {
            crate::ids::validate_time("entry timestamp", at)?;
        }
        if input.status.is_some() && input.kind != EntryKind::Task {
            return Err(MemoryError::Invalid {
                what: "status",
                reason: format!("only task entries have a status, not {}", input.kind),
            });
        }
        Ok(())
    }

    pub(crate) fn replacement_map(&self) -> Result<HashMap<String, String>> {
        self.string_map(Collection::Replacements)
    }

    /// A collection whose keys and values are both ids, read whole.
    pub(crate) fn string_map(&self, collection: Collection) -> Result<HashMap<String, String>> {
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
        lifecycle: &Lifecycle,
        now: DateTime<Utc>,
    ) -> EntryView {
        let (subject, status, decay_at) = self.judge(&entry, replacements, aliases, lifecycle, now);
        EntryView {
            entry: Arc::new(entry),
            subject,
            status,
            decay_at,
        }
    }

    /// An entry's resolved subject, status and decay time: replaced (by a
    /// correction, or by a newer fact when maintenance settled it), else
    /// archived or decayed by maintenance (see [`crate::maintain`]), else
    /// expired on the clock, else live.
    fn judge(
        &self,
        entry: &Entry,
        replacements: &HashMap<String, String>,
        aliases: &HashMap<String, String>,
        lifecycle: &Lifecycle,
        now: DateTime<Utc>,
    ) -> (Option<Arc<str>>, EntryStatus, Option<DateTime<Utc>>) {
        let decay_at = self
            .shared
            .config
            .decay
            .decay_at(entry.kind, entry.timestamp);
        let status = if let Some(by) = replacements.get(&entry.id) {
            EntryStatus::Replaced { by: by.clone() }
        } else if let Some(mark) = lifecycle.settled.get(&entry.id) {
            // Settled by maintenance: a newer fact replaced it.
            EntryStatus::Replaced {
                by: mark.by.clone(),
            }
        } else if let Some(mark) = lifecycle.archived_entries.get(&entry.id) {
            EntryStatus::Archived {
                at: mark.at,
                run: mark.run.clone(),
            }
        } else if let Some(mark) = lifecycle.decayed.get(&entry.id) {
            EntryStatus::Expired {
                at: decay_at.unwrap_or(mark.at),
            }
        } else {
            match decay_at {
                Some(at) if at <= now => EntryStatus::Expired { at },
                _ => EntryStatus::Live,
            }
        };
        let subject = entry.subject.as_deref().map(|s| {
            Arc::from(
                self.shared
                    .names
                    .get(aliases.get(s).map_or(s, String::as_str)),
            )
        });
        (subject, status, decay_at)
    }

    pub(crate) fn load_entry(&self, id: &str) -> Result<Option<Entry>> {
        self.store
            .get(Collection::Entries, id.as_bytes())?
            .map(|v| decode("entry", id.as_bytes(), &v))
            .transpose()
    }

    /// One entry, with its resolved status.
    pub fn entry(&self, id: &str) -> Result<EntryView> {
        validate_id("entry id", id)?;
        // From the cached log when it is current: no read of the store's
        // replacement, alias and maintenance records (each read whole),
        // which grew with the log (capture asks once per item it keeps).
        if let Some(log) = self.cached_log_snapshot() {
            let entry = log
                .entries
                .get(id.as_bytes())
                .ok_or_else(|| MemoryError::EntryNotFound { id: id.to_owned() })?;
            let (subject, status, decay_at) = self.judge(
                entry,
                &log.replacements,
                &log.aliases,
                &log.lifecycle,
                self.now(),
            );
            return Ok(EntryView {
                entry: Arc::clone(entry),
                subject,
                status,
                decay_at,
            });
        }
        let entry = self
            .load_entry(id)?
            .ok_or_else(|| MemoryError::EntryNotFound { id: id.to_owned() })?;
        Ok(self.view(
            entry,
            &self.replacement_map()?,
            &self.alias_map()?,
            &self.lifecycle()?,
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
    pub fn live_entries(&self) -> Result<Arc<LiveList>> {
        Ok(self.live_state()?.0)
    }

    /// The live entries about `subject` (an alias resolves to its subject),
    /// newest first: what [`Self::entries`] returns for that subject
    /// filter, through an index kept with the shared live list instead of
    /// a pass over the whole log.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Fact, "The API is v2").about("api"))?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Fact, "Ship on Friday").about("launch"))?;
    /// assert_eq!(ws.live_entries_about("api")?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn live_entries_about(&self, subject: &str) -> Result<Vec<EntryView>> {
        let canonical = self.canonical_subject(subject)?;
        let (live, derived) = self.live_state()?;
        let index = derived
            .by_subject
            .get_or_init(|| crate::memory::positions_by(&live, |v| v.subject.as_deref()));
        Ok(index
            .get(&canonical)
            .map(|at| at.iter().map(|&i| live[i].clone()).collect())
            .unwrap_or_default())
    }

    /// The live entries of `work_context` that a capture compares new items
    /// with ([`settle::comparable`](crate::settle::comparable) kinds, tasks
    /// not done), oldest first, each read once: through an index kept with
    /// the shared live list and patched with it, not a pass over the log.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Task, "Renew the cert").in_context("ops"))?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Handoff, "Left off at the cert").in_context("ops"))?;
    /// let ops = ws.live_comparable("ops")?;
    /// assert_eq!(ops.len(), 1);
    /// assert_eq!(ops[0].view.entry.content, "Renew the cert");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn live_comparable(
        &self,
        work_context: &str,
    ) -> Result<Arc<Vec<crate::settle::Comparable>>> {
        let (live, derived) = self.live_state()?;
        let mut index = derived.comparable.lock();
        Ok(index
            .get_or_insert_with(|| {
                <crate::settle::ComparableIndex as crate::live::Patched>::of(live.iter())
            })
            .of_context(work_context))
    }

    /// The work contexts that have live entries about `subject` (an alias
    /// resolves to its subject), in order: what [`Self::live_entries_about`]
    /// would name, without copying the entries.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Fact, "The API is v2").about("api").in_context("web"))?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Fact, "API keys rotate").about("api").in_context("ops"))?;
    /// let contexts: Vec<String> = ws.work_contexts_about("api")?.into_iter().collect();
    /// assert_eq!(contexts, ["ops", "web"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn work_contexts_about(&self, subject: &str) -> Result<BTreeSet<String>> {
        let canonical = self.canonical_subject(subject)?;
        let (live, derived) = self.live_state()?;
        let index = derived
            .subject_contexts
            .get_or_init(|| crate::memory::SubjectContexts::build(&live));
        Ok(index.of(&canonical).map(str::to_owned).collect())
    }

    /// Per work context, the time of its newest live
    /// `cross_conversation_update` about `subject` (an alias resolves to its
    /// subject), from the same index as [`Self::work_contexts_about`]. Capture
    /// reads it to hold back a notice that would repeat a recent one
    /// (docs/DESIGN.md, *Cross-conversation updates*). An update that left
    /// the live list (replaced, erased) can hide an older one still live:
    /// the answer may miss a context, never name one without a live update.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Fact, "The API is v2").about("api").in_context("web"))?;
    /// ws.append_entry(
    ///     &EntryInput::new(EntryKind::CrossConversationUpdate, "API changed elsewhere")
    ///         .about("api")
    ///         .in_context("ops"),
    /// )?;
    /// let updates = ws.latest_updates_about("api")?;
    /// assert_eq!(updates.keys().collect::<Vec<_>>(), ["ops"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn latest_updates_about(&self, subject: &str) -> Result<BTreeMap<String, DateTime<Utc>>> {
        let canonical = self.canonical_subject(subject)?;
        let (live, derived) = self.live_state()?;
        let index = derived
            .subject_contexts
            .get_or_init(|| crate::memory::SubjectContexts::build(&live));
        Ok(index
            .updates_of(&canonical)
            .map(|(wc, at)| (wc.to_owned(), at))
            .collect())
    }

    /// The subject `subject` names now (an old slug resolves to the one it
    /// was renamed or merged into).
    fn canonical_subject(&self, subject: &str) -> Result<String> {
        validate_slug(subject)?;
        Ok(match self.log_snapshot()?.aliases.get(subject) {
            Some(to) => to.clone(),
            None => subject.to_owned(),
        })
    }

    /// The live entries with what is derived from them (kept as long as
    /// they are).
    pub(crate) fn live_state(&self) -> Result<(Arc<LiveList>, Arc<LiveDerived>)> {
        let log = self.log_snapshot()?;
        let now = self.now();
        // Held through the computation: readers arriving together wait for
        // one list (and share its derived indexes) instead of each making
        // their own.
        let mut live = log.live.lock();
        if let Some(live) = live.as_ref()
            && live.at <= now
            && live.until.is_none_or(|until| now < until)
        {
            return Ok((live.views.clone(), live.derived.clone()));
        }
        // Cloned, not taken: a write that patches this snapshot while the
        // list is being made starts its own base from this one (dropped
        // once the list is made).
        let base = log.base.lock().clone();
        let mut derived = LiveDerived::new();
        // Live entries decay after `now`: the first of those times ends
        // this list's validity.
        let (views, until) = match base {
            Some(base) if base.at <= now && base.until.is_none_or(|until| now < until) => {
                derived.lineage = base.derived.lineage;
                let from = base.derived.clone();
                let old_views = base.views.clone();
                let (views, until, moves) = self.live_from(&log, base, now);
                // The indexes the old list had follow the patch (no pass
                // over the new list).
                if let Some(old) = from.assembly.get() {
                    let _ = derived.assembly.set(old.patched(&moves, &views));
                }
                let (old, new) = (&old_views, &views);
                carry_patched(&from.brief, &derived.brief, old, new, &moves);
                carry_patched(
                    &from.contradiction_index,
                    &derived.contradiction_index,
                    old,
                    new,
                    &moves,
                );
                carry_patched(&from.comparable, &derived.comparable, old, new, &moves);
                if let Some(old) = from.subject_contexts.get() {
                    let _ = derived.subject_contexts.set(old.patched(
                        &old_views,
                        &moves.removed,
                        &views,
                        &moves.added,
                    ));
                }
                (views, until)
            }
            _ => {
                let views = self.entries_in(&log, &EntryFilter::default(), now)?;
                let until = views.iter().filter_map(|v| v.decay_at).min();
                (LiveList::from(views), until)
            }
        };
        let views = Arc::new(views);
        let derived = Arc::new(derived);
        *live = Some(LiveEntries {
            at: now,
            until,
            views: views.clone(),
            derived: derived.clone(),
        });
        *log.base.lock() = None;
        Ok((views, derived))
    }

    /// The live list of a patched snapshot from the list it started from:
    /// those entries less the ones the patches replaced, and the entries
    /// they added that are live, newest first. The same list `entries_in`
    /// makes (`base` was valid at `now`, so no decay came between); with
    /// the first decay time among them (or earlier: that of an entry the
    /// patches replaced), and where each old entry went and where the added
    /// ones are ([`Moves`]). Shares most of the old list
    /// ([`LiveList::patched`]).
    fn live_from(
        &self,
        log: &LogSnapshot,
        base: LiveBase,
        now: DateTime<Utc>,
    ) -> (LiveList, Option<DateTime<Utc>>, Moves) {
        let mut added: Vec<EntryView> = Vec::with_capacity(base.added.len());
        for entry in &base.added {
            let (subject, status, decay_at) =
                self.judge(entry, &log.replacements, &log.aliases, &log.lifecycle, now);
            if status == EntryStatus::Live {
                added.push(EntryView {
                    entry: Arc::clone(entry),
                    subject,
                    status,
                    decay_at,
                });
            }
        }
        added.sort_by(|a, b| a.entry.newest_first(&b.entry));
        let until = added
            .iter()
            .filter_map(|v| v.decay_at)
            .chain(base.until)
            .min();
        // The replaced entries, from the log: the list finds them by their
        // place in its order.
        let found: Vec<Arc<Entry>> = base
            .replaced
            .iter()
            .filter_map(|id| log.entries.get(id.as_bytes()).cloned())
            .collect();
        let (views, moves) = base.views.patched(added, &base.replaced, &found);
        (views, until, moves)
    }

    pub(crate) fn entries_in(
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
        for entry in log.entries.all() {
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
            let (resolved, status, decay_at) =
                self.judge(entry, replacements, aliases, &log.lifecycle, now);
            if subject.is_some() && resolved.as_deref() != subject.as_deref() {
                continue;
            }
            if !filter.all && status != EntryStatus::Live {
                continue;
            }
            out.push((entry, resolved, status, decay_at));
        }
        // Sort and cut before cloning: only what is returned is copied.
        out.sort_by(|a, b| a.0.newest_first(b.0));
        if let Some(limit) = filter.limit.filter(|l| *l > 0) {
            out.truncate(limit);
        }
        let out: Vec<EntryView> = out
            .into_iter()
            .map(|(entry, subject, status, decay_at)| EntryView {
                entry: Arc::clone(entry),
                subject,
                status,
                decay_at,
            })
            .collect();
        Ok(out)
    }

    /// Every version of the chain `id` belongs to, oldest first: the original,
    /// each correction, and the live version last. Forgotten versions are absent.
    /// A fact that maintenance settled continues with the newer fact that
    /// replaced it; walking back from a fact, the facts it settled come
    /// before it (all of them, oldest first).
    pub fn history(&self, id: &str) -> Result<Vec<EntryView>> {
        let start = self.entry(id)?;
        let replacements = self.replacement_map()?;
        let aliases = self.alias_map()?;
        let lifecycle = self.lifecycle()?;
        let now = self.now();
        let mut settled_by: HashMap<&str, Vec<&str>> = HashMap::new();
        for (old, mark) in &lifecycle.settled {
            settled_by
                .entry(mark.by.as_str())
                .or_default()
                .push(old.as_str());
        }
        // Walk back to the root: the entry it corrects, else the facts it
        // settled. `back` is newest first.
        let mut seen = HashSet::from([start.entry.id.clone()]);
        let mut back: Vec<Entry> = Vec::new();
        let mut cursor = Entry::clone(&start.entry);
        loop {
            if let Some(prev) = cursor.replaces.clone() {
                match self.load_entry(&prev)? {
                    Some(e) if seen.insert(e.id.clone()) => {
                        back.push(e.clone());
                        cursor = e;
                        continue;
                    }
                    _ => break,
                }
            }
            let mut settled = Vec::new();
            for old in settled_by.get(cursor.id.as_str()).into_iter().flatten() {
                if let Some(e) = self.load_entry(old)?
                    && seen.insert(e.id.clone())
                {
                    settled.push(e);
                }
            }
            // Newest first, so the oldest is where the walk goes on.
            settled.sort_by(|a, b| (b.timestamp, &b.id).cmp(&(a.timestamp, &a.id)));
            let Some(oldest) = settled.last().cloned() else {
                break;
            };
            back.extend(settled);
            cursor = oldest;
        }
        let mut chain: Vec<EntryView> = back
            .into_iter()
            .rev()
            .map(|e| self.view(e, &replacements, &aliases, &lifecycle, now))
            .collect();
        // Walk forward through the corrections and the settled facts.
        let mut cursor = start.entry.id.clone();
        chain.push(self.view(
            Entry::clone(&start.entry),
            &replacements,
            &aliases,
            &lifecycle,
            now,
        ));
        while let Some(next) = replacements
            .get(&cursor)
            .or_else(|| lifecycle.settled.get(&cursor).map(|m| &m.by))
        {
            if !seen.insert(next.clone()) {
                break;
            }
            if let Some(e) = self.load_entry(next)? {
                chain.push(self.view(e, &replacements, &aliases, &lifecycle, now));
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
}

/// Moves a [`Patched`](crate::live::Patched) index from the old list's
/// derived facts to the new list's, patched with the moves between them
/// (the old list's keeps nothing: it makes its own again if asked).
fn carry_patched<I: crate::live::Patched>(
    from: &parking_lot::Mutex<Option<I>>,
    to: &parking_lot::Mutex<Option<I>>,
    old_views: &LiveList,
    views: &LiveList,
    moves: &crate::live::Moves,
) {
    if let Some(mut index) = from.lock().take() {
        index.patch(
            moves.removed.iter().filter_map(|&i| old_views.get(i)),
            moves.added.iter().filter_map(|&i| views.get(i)),
        );
        *to.lock() = Some(index);
    }
}
