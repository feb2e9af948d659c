//! The memory log: append-only typed entries.
//!
//! Entries are never modified. A correction is a new entry whose `replaces`
//! points at the old one; reading resolves chains forward (A → B → C shows only
//! C as live) while [`crate::Workspace::history`] still returns every version.
//! Decay is a read concern: an entry whose kind's time-to-live has passed stops
//! showing as live but stays in the record.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

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
}

impl EntryKind {
    /// Every kind, in declaration order.
    pub const ALL: [EntryKind; 10] = [
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
    pub session: String,
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
            session: session.to_owned(),
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
    pub detail: Option<String>,
    /// Subject slug as written (may since have been renamed; see `EntryView::subject`).
    pub subject: Option<String>,
    /// Work context.
    pub work_context: String,
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
}

/// An entry with what reading resolved about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EntryView {
    /// The stored entry.
    #[serde(flatten)]
    pub entry: Entry,
    /// Canonical subject slug after renames and merges.
    pub subject: Option<String>,
    /// Live, replaced or expired.
    pub status: EntryStatus,
    /// When the entry decays (none: it does not).
    pub decay_at: Option<DateTime<Utc>>,
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
/// fade from the briefing's time windows and by replacement, not by expiry.
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

    /// When an entry of `kind` captured at `timestamp` decays.
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
        Some(timestamp + Duration::days(i64::from(days)))
    }
}
