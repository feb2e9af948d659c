//! What an indexed item is (a turn or a log entry, with the attributes the
//! filters look at) and the filters a search applies.
//!
//! Filters are applied inside both indexes (tantivy's filter collector and
//! hnsw_rs's filtered search, or an exact scan when few documents pass), so
//! a narrow filter still yields `k` results when `k` exist.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{EntryKind, Provenance, Role};

/// Whether an indexed item is a turn or a memory-log entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DocSource {
    /// A turn of a session transcript.
    #[default]
    Turn,
    /// An entry of the memory log (decision, task, fact…).
    Entry,
}

impl DocSource {
    /// `turn` or `entry`.
    ///
    /// ```
    /// assert_eq!(cairn_memory::search::DocSource::Entry.as_str(), "entry");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            DocSource::Turn => "turn",
            DocSource::Entry => "entry",
        }
    }
}

/// The attributes of an indexed item that filters and result items use.
///
/// A turn has `role`, `work_context`, `timestamp` and a provenance naming
/// itself; an entry has `kind`, `subject` (as written), `work_context`,
/// `timestamp`, its provenance if any, and `decay_at` from the decay table.
///
/// ```
/// use cairn_memory::search::{DocAttrs, DocSource};
/// let a = DocAttrs::default();
/// assert_eq!(a.source, DocSource::Turn);
/// assert!(!a.low_trust);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DocAttrs {
    /// Turn or entry.
    pub source: DocSource,
    /// The entry's kind (entries only).
    pub kind: Option<EntryKind>,
    /// The entry's subject slug as written (entries only; renames resolve at
    /// search time).
    pub subject: Option<String>,
    /// Who spoke (turns only).
    pub role: Option<Role>,
    /// The work context.
    pub work_context: Option<String>,
    /// Source session and turn range (a turn: itself).
    pub provenance: Option<Provenance>,
    /// When it was said or captured.
    pub timestamp: Option<DateTime<Utc>>,
    /// When the entry decays (its kind's time-to-live), if it does.
    pub decay_at: Option<DateTime<Utc>>,
    /// Tool output, or content from a sub-agent or cron session: data, not
    /// instructions.
    pub low_trust: bool,
}

impl DocAttrs {
    /// The session the item comes from (a turn's session, an entry's
    /// provenance session).
    pub fn origin_session(&self) -> Option<&str> {
        self.provenance.as_ref().map(|p| p.session.as_str())
    }
}

/// How to fetch a hit: a turn (`session:<id>:<seq>-<seq>` for `memory_get`)
/// or an entry (its id).
///
/// ```
/// use cairn_memory::search::ItemRef;
/// let t = ItemRef::Turn { session: "s1".into(), seq: 4 };
/// assert_eq!(t.reference(), "session:s1:4-4");
/// assert_eq!(ItemRef::Entry { id: "01J".into() }.reference(), "01J");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemRef {
    /// A turn.
    Turn {
        /// Session id.
        session: String,
        /// Sequence number.
        seq: u64,
    },
    /// A memory-log entry.
    Entry {
        /// Entry id.
        id: String,
    },
}

impl ItemRef {
    /// The id `memory_get` accepts.
    pub fn reference(&self) -> String {
        match self {
            ItemRef::Turn { session, seq } => format!("session:{session}:{seq}-{seq}"),
            ItemRef::Entry { id } => id.clone(),
        }
    }
}

/// Filters of a search. Everything is optional; by default replaced and
/// decayed entries are left out.
///
/// ```
/// use cairn_memory::EntryKind;
/// use cairn_memory::search::{SearchFilters, SearchOptions};
/// let f = SearchFilters { kind: Some(EntryKind::Decision), ..SearchFilters::default() };
/// let o = SearchOptions::new(5).filters(f);
/// assert!(!o.filters.include_replaced);
/// assert!(!o.filters.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct SearchFilters {
    /// Only turns, or only entries.
    pub source: Option<DocSource>,
    /// Only entries of this kind.
    pub kind: Option<EntryKind>,
    /// Only entries about this subject (old slugs count: see `subject_aliases`).
    pub subject: Option<String>,
    /// Slugs that also count as `subject` (renamed or merged ones). Filled
    /// by [`super::SearchService`] from the subject registry.
    pub subject_aliases: Vec<String>,
    /// Only this work context.
    pub work_context: Option<String>,
    /// Only this session (turns of it, entries whose provenance is it).
    pub session: Option<String>,
    /// Only turns with this role.
    pub role: Option<Role>,
    /// Only items at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only items before this time.
    pub until: Option<DateTime<Utc>>,
    /// Also return entries replaced by a later entry.
    pub include_replaced: bool,
    /// Also return entries past their time-to-live.
    pub include_expired: bool,
    /// Also return what maintenance archived (entries, and the turns of
    /// archived sessions).
    pub include_archived: bool,
}

impl SearchFilters {
    /// True when no attribute filter is set (the exclusions of replaced and
    /// expired entries are not counted).
    pub fn is_empty(&self) -> bool {
        self.source.is_none()
            && self.kind.is_none()
            && self.subject.is_none()
            && self.work_context.is_none()
            && self.session.is_none()
            && self.role.is_none()
            && self.since.is_none()
            && self.until.is_none()
    }

    /// Whether an item with these attributes passes the attribute filters
    /// (`sessions`: the caller's session restriction, e.g. lineage).
    pub(crate) fn admits(
        &self,
        session: &str,
        a: &DocAttrs,
        sessions: Option<&HashSet<String>>,
    ) -> bool {
        let origin = match a.source {
            DocSource::Turn => Some(session),
            DocSource::Entry => a.origin_session(),
        };
        if let Some(allowed) = sessions
            && !origin.is_some_and(|s| allowed.contains(s))
        {
            return false;
        }
        if self.source.is_some_and(|s| s != a.source)
            || self.kind.is_some_and(|k| a.kind != Some(k))
            || self.role.is_some_and(|r| a.role != Some(r))
        {
            return false;
        }
        if let Some(wc) = &self.work_context
            && a.work_context.as_deref() != Some(wc.as_str())
        {
            return false;
        }
        if let Some(s) = &self.session
            && origin != Some(s.as_str())
        {
            return false;
        }
        if let Some(subject) = &self.subject {
            match &a.subject {
                Some(x) if x == subject || self.subject_aliases.iter().any(|al| al == x) => {}
                _ => return false,
            }
        }
        if let Some(since) = self.since
            && a.timestamp.is_none_or(|t| t < since)
        {
            return false;
        }
        if let Some(until) = self.until
            && a.timestamp.is_none_or(|t| t >= until)
        {
            return false;
        }
        true
    }
}
