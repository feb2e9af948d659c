//! Maintenance: the nightly tidy of a workspace's memory (docs/DESIGN.md,
//! *Maintenance*).
//!
//! A run applies its rules, in this order, to what the log holds now:
//!
//! 1. **promotion**, before decay, so an entry can prove durable before it
//!    fades. An open question (`question`, `open_question`) still
//!    unresolved [`MaintainSettings::obligation_after_days`] (14) after it
//!    was captured, and linked to a deadline (its own text names a date or
//!    a deadline, or a live entry about the same subject does), becomes an
//!    `obligation`. A decision (`decision`, `key_decision`) stated in
//!    [`MaintainSettings::directive_min_sessions`] (3) or more sessions (its
//!    `replaces` chain and the decisions on the same subject that say the
//!    same) becomes a `directive`. The new entry replaces the original and
//!    keeps its provenance, so the chain records the promotion and the live
//!    view shows one entry; neither kind decays.
//! 2. **decay**: an entry past its kind's time-to-live
//!    ([`crate::DecayConfig`]) leaves the live set explicitly, with a
//!    `decayed` mark, where reads alone judged it on the clock.
//! 3. **archive** after [`MaintainSettings::archive_after_days`] (90):
//!    sessions whose last turn is that old, replaced or decayed entries that
//!    old, and live entries that old in a work context quiet for that long
//!    (not facts, obligations, directives or pinned entries) leave the live
//!    indexes: search's index and the assembler's live view. They stay
//!    readable, searchable on request (`include_archived`) and restorable
//!    ([`Workspace::restore`]).
//! 4. **contradictions** between live entries are listed in the report;
//!    nothing is changed for them.
//!
//! Every change is a [`Change`]: the [`Rule`] that made it, what it did (an
//! [`Action`]) and a reason that names ids and numbers, never content (an
//! erasure leaves nothing behind in the run records). The changes of a run
//! are stored together as a [`MaintenanceRun`] under a run id, in the same
//! atomic batch as their effects, so maintenance is
//!
//! - **replayable**: the lifecycle marks reads use are a fold over the runs
//!   not undone ([`Lifecycle::replay`]); `reconstruct` checks them against it;
//! - **reversible**: [`Workspace::undo_maintenance`] reverses exactly one
//!   run in one batch (marks removed or put back, promoted entries erased
//!   with a tombstone and their replacement links removed). Undo goes
//!   newest first per item: undoing a run whose items a later run changed
//!   since, or whose promoted entry was replaced since, is refused;
//! - **previewable**: a dry run computes the same changes and writes nothing.
//!
//! A run holds the log's write lock from its first read to its write, so no
//! append slips in between what it decided and what it wrote.
//!
//! ```
//! use std::sync::Arc;
//! use cairn_memory::*;
//! use cairn_memory::maintain::{MaintainOptions, Rule};
//! use chrono::{Duration, TimeZone, Utc};
//!
//! let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 9, 0, 0).unwrap());
//! let dir = tempfile::tempdir()?;
//! let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(clock.clone()))?;
//! let ws = memory.workspace("acme")?;
//! ws.append_entry(&EntryInput::new(EntryKind::CrossConversationUpdate, "Billing changed elsewhere"))?;
//! clock.advance(Duration::days(8)); // past the 7-day time-to-live
//! let preview = ws.maintain(&MaintainOptions { dry_run: true, ..Default::default() })?;
//! assert_eq!(preview.changes[0].rule, Rule::Decay);
//! assert!(preview.run.is_none());
//! let report = ws.maintain(&MaintainOptions::default())?;
//! let run = report.run.unwrap();
//! ws.undo_maintenance(&run)?; // exactly that run, reversed
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Duration, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::facts::Attribute;
use crate::forget::{ForgetTarget, Removed, Tombstone};
use crate::ids::validate_id;
use crate::log::{DecayConfig, Entry, EntryInput, EntryKind, EntryView};
use crate::memory::{Workspace, decode, encode};
use crate::record::Session;
use crate::store::{Collection, MaintFamily, MaintKey, StateKey, WriteBatch};
use crate::subjects::Subject;

/// The rules' settings, `[memory.maintenance]`.
///
/// ```
/// let s = cairn_memory::maintain::MaintainSettings::default();
/// assert_eq!((s.obligation_after_days, s.directive_min_sessions, s.archive_after_days), (14, 3, 90));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct MaintainSettings {
    /// Run maintenance over every workspace after the nightly capture sweep.
    pub nightly: bool,
    /// An open question unresolved this many days, linked to a deadline
    /// (its text names a date or a deadline, or a live entry about its
    /// subject that is not itself a question does), becomes an obligation
    /// (0: never).
    pub obligation_after_days: u32,
    /// A decision stated in at least this many sessions becomes a directive
    /// (0: never).
    pub directive_min_sessions: u32,
    /// Material older than this many days leaves the live indexes (0: never).
    pub archive_after_days: u32,
}

impl Default for MaintainSettings {
    fn default() -> Self {
        MaintainSettings {
            nightly: true,
            obligation_after_days: 14,
            directive_min_sessions: 3,
            archive_after_days: 90,
        }
    }
}

/// What started a maintenance run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MaintainTrigger {
    /// `cairn maintain`, the API.
    #[default]
    Manual,
    /// The nightly sweep, after its captures.
    Nightly,
    /// A restore from the archive.
    Restore,
}

/// How to run maintenance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct MaintainOptions {
    /// Report what would change; write nothing.
    pub dry_run: bool,
    /// Who asks (recorded in the run).
    pub trigger: MaintainTrigger,
}

/// The rule behind a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// An entry past its kind's time-to-live leaves the live set.
    Decay,
    /// An open question unresolved long enough, with a deadline, becomes an obligation.
    PromoteObligation,
    /// A decision stated in enough sessions becomes a directive.
    PromoteDirective,
    /// A newer fact about the same person and single-valued attribute
    /// replaces an older one.
    Settle,
    /// An old entry leaves the live indexes.
    ArchiveEntry,
    /// An old session's turns leave the search index.
    ArchiveSession,
    /// An archived item comes back, on request.
    Restore,
}

impl Rule {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Decay => "decay",
            Rule::PromoteObligation => "promote_obligation",
            Rule::PromoteDirective => "promote_directive",
            Rule::Settle => "settle",
            Rule::ArchiveEntry => "archive_entry",
            Rule::ArchiveSession => "archive_session",
            Rule::Restore => "restore",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lifecycle mark: which run made it, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Mark {
    /// The run.
    pub run: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// A session's archive mark: its turns up to `through_seq` are archived
/// (later turns, if the session goes on, are not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionMark {
    /// The run.
    pub run: String,
    /// When.
    pub at: DateTime<Utc>,
    /// The last archived turn.
    pub through_seq: u64,
}

/// A settled fact's mark: the run that settled it, when, and the newer
/// fact that replaced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SettleMark {
    /// The run.
    pub run: String,
    /// When.
    pub at: DateTime<Utc>,
    /// The newer fact that replaced it.
    pub by: String,
    /// What both facts are about.
    pub attribute: Attribute,
}

/// What a change did: enough to replay it and to reverse it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// The entry left the live set.
    Decay {
        /// The entry.
        entry: String,
        /// Its kind.
        kind: EntryKind,
        /// When its time-to-live ended.
        decay_at: DateTime<Utc>,
    },
    /// The entry was replaced by a new entry of a durable kind.
    Promote {
        /// The promoted entry.
        entry: String,
        /// The new entry (it replaces `entry`).
        into: String,
        /// The new entry's kind (`obligation` or `directive`).
        kind: EntryKind,
    },
    /// The entry left the live indexes.
    ArchiveEntry {
        /// The entry.
        entry: String,
    },
    /// The session's turns up to `through_seq` left the search index.
    ArchiveSession {
        /// The session.
        session: String,
        /// The last archived turn.
        through_seq: u64,
    },
    /// An archived entry came back.
    RestoreEntry {
        /// The entry.
        entry: String,
        /// The archive mark it had (an undo puts it back).
        archived: Mark,
    },
    /// An archived session came back.
    RestoreSession {
        /// The session.
        session: String,
        /// The archive mark it had (an undo puts it back).
        archived: SessionMark,
    },
    /// A newer fact about the same person and single-valued attribute
    /// replaced the fact; it left the live set. No values are recorded
    /// (a run record names ids, never content): they are read from the
    /// two entries.
    Settle {
        /// The older fact.
        entry: String,
        /// The newer fact that replaced it.
        by: String,
        /// What both are about.
        attribute: Attribute,
        /// Both say the same value (a restatement), not a new one.
        restated: bool,
    },
}

impl Action {
    /// The entry or session the action changes, as `entry:<id>` /
    /// `session:<id>`.
    pub fn item(&self) -> String {
        match self {
            Action::Decay { entry, .. }
            | Action::Promote { entry, .. }
            | Action::ArchiveEntry { entry }
            | Action::RestoreEntry { entry, .. }
            | Action::Settle { entry, .. } => format!("entry:{entry}"),
            Action::ArchiveSession { session, .. } | Action::RestoreSession { session, .. } => {
                format!("session:{session}")
            }
        }
    }
}

/// One change of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Change {
    /// The rule that made it.
    pub rule: Rule,
    /// What it did.
    #[serde(flatten)]
    pub action: Action,
    /// Why, in ids and numbers.
    pub reason: String,
}

/// When and how a run was undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Undone {
    /// When.
    pub at: DateTime<Utc>,
    /// The tombstones of the promoted entries the undo erased.
    pub tombstones: Vec<String>,
}

/// A stored maintenance run: every change it made, under one id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MaintenanceRun {
    /// `run-<seq>`.
    pub id: String,
    /// Its number in the workspace (runs replay in this order).
    pub seq: u64,
    /// What started it.
    pub trigger: MaintainTrigger,
    /// When.
    pub at: DateTime<Utc>,
    /// The rules' settings in force.
    pub settings: MaintainSettings,
    /// The changes, in the order they were made.
    pub changes: Vec<Change>,
    /// Set once the run is undone.
    pub undone: Option<Undone>,
}

pub use crate::contradict::Contradiction;

/// The contradictions a maintenance report lists: those among `live`
/// ([`crate::contradict::find_contradictions`]).
pub fn contradictions_for_report<'a>(
    live: impl IntoIterator<Item = &'a EntryView>,
) -> Vec<Contradiction> {
    crate::contradict::find_contradictions(live)
}

/// What a maintenance call did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MaintenanceReport {
    /// The workspace.
    pub workspace: String,
    /// The run written; none for a dry run or when nothing changed.
    pub run: Option<String>,
    /// True when nothing was written.
    pub dry_run: bool,
    /// What started it.
    pub trigger: MaintainTrigger,
    /// When (by the clock).
    pub at: DateTime<Utc>,
    /// Every change, with its rule and reason.
    pub changes: Vec<Change>,
    /// Contradictions between live entries (listed, not changed).
    pub contradictions: Vec<Contradiction>,
}

impl MaintenanceReport {
    /// How many changes each rule made.
    pub fn counts(&self) -> BTreeMap<Rule, usize> {
        let mut out = BTreeMap::new();
        for c in &self.changes {
            *out.entry(c.rule).or_insert(0) += 1;
        }
        out
    }
}

/// An archived item to restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", content = "id", rename_all = "snake_case")]
pub enum ArchivedItem {
    /// An entry, by id.
    Entry(String),
    /// A session, by id.
    Session(String),
}

/// What maintenance left on the log: decayed, archived and restored items.
/// A fold over the runs not undone ([`Lifecycle::replay`]); reads keep it
/// with the log snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// Decayed entries.
    pub decayed: BTreeMap<String, Mark>,
    /// Archived entries.
    pub archived_entries: BTreeMap<String, Mark>,
    /// Archived sessions.
    pub archived_sessions: BTreeMap<String, SessionMark>,
    /// Entries restored from the archive.
    pub restored_entries: BTreeMap<String, Mark>,
    /// Sessions restored from the archive.
    pub restored_sessions: BTreeMap<String, Mark>,
    /// Facts settled: replaced by a newer fact about the same person and
    /// single-valued attribute.
    pub settled: BTreeMap<String, SettleMark>,
}

impl Lifecycle {
    /// The marks `runs` leave, replayed in order (undone runs skipped).
    pub fn replay(runs: &[MaintenanceRun]) -> Lifecycle {
        let mut out = Lifecycle::default();
        let mut runs: Vec<&MaintenanceRun> = runs.iter().filter(|r| r.undone.is_none()).collect();
        runs.sort_by_key(|r| r.seq);
        for run in runs {
            for change in &run.changes {
                out.apply(&run.id, run.at, &change.action);
            }
        }
        out
    }

    fn apply(&mut self, run: &str, at: DateTime<Utc>, action: &Action) {
        let mark = || Mark {
            run: run.to_owned(),
            at,
        };
        match action {
            Action::Decay { entry, .. } => {
                self.decayed.insert(entry.clone(), mark());
            }
            Action::Promote { .. } => {}
            Action::ArchiveEntry { entry } => {
                self.archived_entries.insert(entry.clone(), mark());
            }
            Action::ArchiveSession {
                session,
                through_seq,
            } => {
                self.archived_sessions.insert(
                    session.clone(),
                    SessionMark {
                        run: run.to_owned(),
                        at,
                        through_seq: *through_seq,
                    },
                );
            }
            Action::RestoreEntry { entry, .. } => {
                self.archived_entries.remove(entry);
                self.restored_entries.insert(entry.clone(), mark());
            }
            Action::RestoreSession { session, .. } => {
                self.archived_sessions.remove(session);
                self.restored_sessions.insert(session.clone(), mark());
            }
            Action::Settle {
                entry,
                by,
                attribute,
                ..
            } => {
                self.settled.insert(
                    entry.clone(),
                    SettleMark {
                        run: run.to_owned(),
                        at,
                        by: by.clone(),
                        attribute: *attribute,
                    },
                );
            }
        }
    }

    /// Every mark as the key and bytes it is stored under.
    pub(crate) fn records(&self) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        let mut out = BTreeMap::new();
        for (id, m) in &self.decayed {
            out.insert(MaintKey::Decayed { entry: id.clone() }.encode(), encode(m)?);
        }
        for (id, m) in &self.archived_entries {
            out.insert(
                MaintKey::ArchivedEntry { entry: id.clone() }.encode(),
                encode(m)?,
            );
        }
        for (id, m) in &self.archived_sessions {
            out.insert(
                MaintKey::ArchivedSession {
                    session: id.clone(),
                }
                .encode(),
                encode(m)?,
            );
        }
        for (id, m) in &self.restored_entries {
            out.insert(
                MaintKey::RestoredEntry { entry: id.clone() }.encode(),
                encode(m)?,
            );
        }
        for (id, m) in &self.restored_sessions {
            out.insert(
                MaintKey::RestoredSession {
                    session: id.clone(),
                }
                .encode(),
                encode(m)?,
            );
        }
        for (id, m) in &self.settled {
            out.insert(MaintKey::Settled { entry: id.clone() }.encode(), encode(m)?);
        }
        Ok(out)
    }

    /// Whether an indexed turn is archived.
    pub fn turn_archived(&self, session: &str, seq: u64) -> bool {
        self.archived_sessions
            .get(session)
            .is_some_and(|m| seq <= m.through_seq)
    }
}

fn run_id(seq: u64) -> String {
    format!("run-{seq}")
}

fn parse_run_id(id: &str) -> Result<u64> {
    id.strip_prefix("run-")
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| MemoryError::Invalid {
            what: "maintenance run id",
            reason: format!("{id:?} is not of the form run-<number>"),
        })
}

// ----- the rules --------------------------------------------------------

/// Dates and deadline words: an open question that names one (or whose
/// subject has a live entry that does) is "linked to a deadline".
static DEADLINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    const MONTH: &str = r"(jan(uary)?|feb(ruary)?|mar(ch)?|apr(il)?|may|june?|july?|aug(ust)?|sep(t(ember)?)?|oct(ober)?|nov(ember)?|dec(ember)?)";
    let pattern = format!(
        r"(?ix)
        \b(deadline|due|overdue)\b
      | \b(by|before|until|no\s+later\s+than)\s+(the\s+)?(end\s+of\s+)?(the\s+|next\s+)?
          (monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|today
          |week|month|quarter|eod|eow|q[1-4])\b
      | \b{MONTH}\.?\s+\d{{1,2}}(st|nd|rd|th)?\b
      | \b\d{{1,2}}(st|nd|rd|th)?\s+(of\s+)?{MONTH}\b
      | \b\d{{4}}-\d{{2}}-\d{{2}}\b"
    );
    Regex::new(&pattern).ok()
});

/// True when `text` names a date or a deadline.
pub fn names_deadline(text: &str) -> bool {
    DEADLINE.as_ref().is_some_and(|re| re.is_match(text))
}

const STOPWORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "we", "i", "it", "is",
    "be", "will", "lets", "let's", "go", "going", "use", "decided", "decide", "that", "this",
];

fn content_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .map(str::to_lowercase)
        .filter(|w| !w.is_empty() && !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// Whether two decisions say the same: their content words overlap by at
/// least two thirds (Jaccard), at least two words in common.
fn says_the_same(a: &str, b: &str) -> bool {
    let (a, b) = (content_words(a), content_words(b));
    let common = a.intersection(&b).count();
    let union = a.union(&b).count();
    common >= 2 && union > 0 && common * 3 >= union * 2
}

fn is_question(kind: EntryKind) -> bool {
    matches!(kind, EntryKind::Question | EntryKind::OpenQuestion)
}

fn is_decision(kind: EntryKind) -> bool {
    matches!(kind, EntryKind::Decision | EntryKind::KeyDecision)
}

/// What the rules read, gathered once.
struct Facts<'a> {
    entries: &'a [Arc<Entry>],
    by_id: HashMap<&'a str, &'a Entry>,
    replacements: &'a HashMap<String, String>,
    aliases: &'a HashMap<String, String>,
    lifecycle: &'a Lifecycle,
    sessions: &'a [Session],
    pins: &'a HashSet<String>,
    subjects: &'a [Subject],
    /// When each captured fact was said: its source turn's time.
    said_at: &'a HashMap<String, DateTime<Utc>>,
    decay: &'a DecayConfig,
    now: DateTime<Utc>,
}

/// A change the rules decided, with the entry a promotion appends.
struct Planned {
    change: Change,
    entry: Option<EntryInput>,
}

impl Facts<'_> {
    fn subject(&self, e: &Entry) -> Option<String> {
        e.subject
            .as_deref()
            .map(|s| self.aliases.get(s).cloned().unwrap_or_else(|| s.to_owned()))
    }

    /// Not replaced and not handled by maintenance yet (it may have passed
    /// its time-to-live since the last run).
    fn in_play(&self, e: &Entry) -> bool {
        !self.replacements.contains_key(&e.id)
            && !self.lifecycle.archived_entries.contains_key(&e.id)
            && !self.lifecycle.decayed.contains_key(&e.id)
            && !self.lifecycle.settled.contains_key(&e.id)
    }

    fn decay_at(&self, e: &Entry) -> Option<DateTime<Utc>> {
        self.decay.decay_at(e.kind, e.timestamp)
    }

    fn is_live(&self, e: &Entry) -> bool {
        self.in_play(e) && self.decay_at(e).is_none_or(|at| at > self.now)
    }

    /// Same subject, or both without one in the same work context.
    fn same_thread(&self, a: &Entry, b: &Entry) -> bool {
        match (self.subject(a), self.subject(b)) {
            (Some(x), Some(y)) => x == y,
            (None, None) => a.work_context == b.work_context,
            _ => false,
        }
    }

    /// The entry and every earlier version its `replaces` chain reaches.
    fn chain(&self, e: &'_ Entry) -> Vec<String> {
        let mut out = vec![e.id.clone()];
        let mut cursor = e.replaces.as_deref();
        while let Some(id) = cursor {
            if out.iter().any(|x| x == id) {
                break;
            }
            let Some(prev) = self.by_id.get(id) else {
                break;
            };
            out.push(prev.id.clone());
            cursor = prev.replaces.as_deref();
        }
        out
    }
}

fn days(d: Duration) -> i64 {
    d.num_days()
}

/// A promoted entry's id: derived from the run and the entry it promotes.
fn promoted_id(run: &str, source: &str) -> String {
    let hash = blake3::hash(format!("{run}\0{source}").as_bytes()).to_hex();
    format!("mnt-{}", &hash.as_str()[..26])
}

fn promote(
    facts: &Facts<'_>,
    source: &Entry,
    kind: EntryKind,
    rule: Rule,
    run: &str,
    reason: String,
    detail_limit: usize,
) -> Planned {
    let into = promoted_id(run, &source.id);
    let note = format!("{} by maintenance {run}: {reason}", rule.as_str());
    let detail = match &source.detail {
        Some(d) => {
            let room = detail_limit.saturating_sub(note.len() + 1);
            format!("{}\n{note}", crate::text::head_bytes(d, room))
        }
        None => note,
    };
    let mut input = EntryInput::new(kind, &source.content);
    input.id = Some(into.clone());
    input.detail = Some(detail);
    input.subject = facts.subject(source);
    input.work_context = Some(source.work_context.to_string());
    input.provenance = source.provenance.clone();
    input.replaces = Some(source.id.clone());
    Planned {
        change: Change {
            rule,
            action: Action::Promote {
                entry: source.id.clone(),
                into,
                kind,
            },
            reason,
        },
        entry: Some(input),
    }
}

/// The changes the rules make to `facts` (see the module docs for the order).
fn plan(
    facts: &Facts<'_>,
    settings: &MaintainSettings,
    run: &str,
    detail_limit: usize,
) -> Vec<Planned> {
    let mut out: Vec<Planned> = Vec::new();
    let mut touched: HashSet<String> = HashSet::new();
    let now = facts.now;
    let mut ordered: Vec<&Entry> = facts.entries.iter().map(|e| &**e).collect();
    ordered.sort_by(|a, b| (a.timestamp, &a.id).cmp(&(b.timestamp, &b.id)));

    // 1a. Open questions with a deadline become obligations.
    if settings.obligation_after_days > 0 {
        let min_age = Duration::days(i64::from(settings.obligation_after_days));
        for e in &ordered {
            if !is_question(e.kind) || !facts.in_play(e) || now - e.timestamp < min_age {
                continue;
            }
            let own = names_deadline(&e.content) || e.detail.as_deref().is_some_and(names_deadline);
            let linked = match (own, facts.subject(e)) {
                (true, _) => Some("its own text names a date or deadline".to_owned()),
                (false, Some(subject)) => ordered
                    .iter()
                    .find(|o| {
                        o.id != e.id
                            && !is_question(o.kind)
                            && facts.is_live(o)
                            && facts.subject(o).as_deref() == Some(subject.as_str())
                            && (names_deadline(&o.content)
                                || o.detail.as_deref().is_some_and(names_deadline))
                    })
                    .map(|o| format!("entry {} about {subject} names a date or deadline", o.id)),
                (false, None) => None,
            };
            let Some(linked) = linked else { continue };
            let reason = format!(
                "{} {} unresolved for {} days (rule: {} days) and linked to a deadline: {linked}",
                e.kind,
                e.id,
                days(now - e.timestamp),
                settings.obligation_after_days
            );
            touched.insert(e.id.clone());
            out.push(promote(
                facts,
                e,
                EntryKind::Obligation,
                Rule::PromoteObligation,
                run,
                reason,
                detail_limit,
            ));
        }
    }

    // 1b. Decisions stated in enough sessions become directives (newest
    // first; the restatements of a promoted decision are not promoted again).
    if settings.directive_min_sessions > 0 {
        let mut handled: HashSet<String> = HashSet::new();
        for d in ordered.iter().rev() {
            if !is_decision(d.kind) || !facts.in_play(d) || handled.contains(&d.id) {
                continue;
            }
            let chain = facts.chain(d);
            let texts: Vec<&str> = chain
                .iter()
                .filter_map(|id| facts.by_id.get(id.as_str()).map(|e| e.content.as_str()))
                .collect();
            let mut sessions: BTreeSet<&str> = BTreeSet::new();
            for id in &chain {
                if let Some(p) = facts.by_id.get(id.as_str()).and_then(|e| {
                    is_decision(e.kind)
                        .then_some(e.provenance.as_ref())
                        .flatten()
                }) {
                    sessions.insert(p.session.as_str());
                }
            }
            for o in &ordered {
                if !is_decision(o.kind)
                    || chain.contains(&o.id)
                    || !facts.same_thread(d, o)
                    || !texts.iter().any(|t| says_the_same(t, &o.content))
                {
                    continue;
                }
                if let Some(p) = &o.provenance {
                    sessions.insert(p.session.as_str());
                }
                handled.insert(o.id.clone());
            }
            if sessions.len() < settings.directive_min_sessions as usize {
                continue;
            }
            let list: Vec<&str> = sessions.iter().copied().collect();
            let reason = format!(
                "{} {} stated in {} sessions ({}) (rule: {} sessions)",
                d.kind,
                d.id,
                sessions.len(),
                list.join(", "),
                settings.directive_min_sessions
            );
            touched.insert(d.id.clone());
            out.push(promote(
                facts,
                d,
                EntryKind::Directive,
                Rule::PromoteDirective,
                run,
                reason,
                detail_limit,
            ));
        }
    }

    // 2. Settle.
    settle(facts, &ordered, &mut touched, &mut out);

    // 3. Decay.
    for e in &ordered {
        if touched.contains(&e.id) || !facts.in_play(e) {
            continue;
        }
        let Some(decay_at) = facts.decay_at(e) else {
            continue;
        };
        if decay_at > now {
            continue;
        }
        let ttl = facts.decay.ttl_days(e.kind).unwrap_or_default();
        touched.insert(e.id.clone());
        out.push(Planned {
            change: Change {
                rule: Rule::Decay,
                action: Action::Decay {
                    entry: e.id.clone(),
                    kind: e.kind,
                    decay_at,
                },
                reason: format!(
                    "{} {} past its {ttl}-day time-to-live (captured {}, decayed {})",
                    e.kind,
                    e.id,
                    e.timestamp.format("%Y-%m-%d"),
                    decay_at.format("%Y-%m-%d")
                ),
            },
            entry: None,
        });
    }

    // 4. Archive.
    if settings.archive_after_days > 0 {
        archive(facts, settings, &ordered, &touched, &mut out);
    }
    out
}

/// Who a fact is about, for [`settle`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Person {
    /// A registered subject (the speaker's name resolved, canonical).
    Subject(String),
    /// A speaker the registry does not know, by name (case-folded).
    Named(String),
    /// The anonymous user of a work context.
    User(String),
}

impl Facts<'_> {
    /// The person and single-valued attribute a live fact is about, and
    /// its value: from the capture's detail (the attribute and speaker,
    /// [`crate::facts::fact_of_detail`]) and its text
    /// ([`crate::facts::value_of`]). `None` for any other entry.
    fn settled_slot(&self, e: &Entry) -> Option<(Person, Attribute, String)> {
        if e.kind != EntryKind::Fact {
            return None;
        }
        let (attribute, speaker) = crate::facts::fact_of_detail(e.detail.as_deref()?)?;
        if !attribute.single() {
            return None;
        }
        let value = crate::facts::value_of(&e.content, attribute, &crate::facts::ENGLISH)?;
        // The speaker as the registry knows them now, else by name; no
        // speaker: the user of the work context. (The entry's subject is
        // not used alone: without a known speaker it is the first subject
        // the sentence names, a place or an employer, not the person.)
        let person = match speaker {
            Some(name) => match crate::extract::mentions(&name, self.subjects).first() {
                Some(slug) => Person::Subject(
                    self.aliases
                        .get(slug)
                        .cloned()
                        .unwrap_or_else(|| slug.clone()),
                ),
                None => Person::Named(name.to_lowercase()),
            },
            None => Person::User(e.work_context.to_string()),
        };
        Some((person, attribute, value.to_lowercase()))
    }
}

/// Step 2, settle: among the live facts about one person and one
/// single-valued attribute that have a value, the newest (by when it was
/// said — its source turn's time, else its timestamp — then id) replaces
/// every older one — one with another value (the person
/// moved, changed jobs) and one with the same value (a restatement: one
/// live fact says it). Pinned facts are never settled.
fn settle(
    facts: &Facts<'_>,
    ordered: &[&Entry],
    touched: &mut HashSet<String>,
    out: &mut Vec<Planned>,
) {
    type Said<'e> = (DateTime<Utc>, &'e Entry, String);
    let mut groups: BTreeMap<(Person, Attribute), Vec<Said<'_>>> = BTreeMap::new();
    for e in ordered {
        if touched.contains(&e.id) || !facts.is_live(e) {
            continue;
        }
        if let Some((person, attribute, value)) = facts.settled_slot(e) {
            let said = facts.said_at.get(&e.id).copied().unwrap_or(e.timestamp);
            groups
                .entry((person, attribute))
                .or_default()
                .push((said, e, value));
        }
    }
    for ((_, attribute), mut group) in groups {
        // When said, then id: the last is the newest. (One capture writes
        // the facts of many turns at one time; their turns tell them apart.)
        group.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        let Some(((newest_at, newest, value), older)) = group.split_last() else {
            continue;
        };
        let turn = newest.provenance.as_ref().map_or_else(
            || "no source turn".to_owned(),
            |p| format!("turn {}:{}", p.session, p.from_seq),
        );
        for (said, e, old_value) in older {
            if facts.pins.contains(&e.id) {
                continue;
            }
            let restated = old_value == value;
            touched.insert(e.id.clone());
            out.push(Planned {
                change: Change {
                    rule: Rule::Settle,
                    action: Action::Settle {
                        entry: e.id.clone(),
                        by: newest.id.clone(),
                        attribute,
                        restated,
                    },
                    reason: format!(
                        "fact {} ({}) is replaced by the newer fact {} ({}, {turn}) about the same person: {} holds one value at a time, and the newer {}",
                        e.id,
                        said.format("%Y-%m-%d"),
                        newest.id,
                        newest_at.format("%Y-%m-%d"),
                        attribute.as_str(),
                        if restated {
                            "says the same value again"
                        } else {
                            "says another value"
                        }
                    ),
                },
                entry: None,
            });
        }
    }
}

fn archive(
    facts: &Facts<'_>,
    settings: &MaintainSettings,
    ordered: &[&Entry],
    touched: &HashSet<String>,
    out: &mut Vec<Planned>,
) {
    let now = facts.now;
    let after = settings.archive_after_days;
    let cutoff = now - Duration::days(i64::from(after));
    let lc = facts.lifecycle;
    for s in facts.sessions {
        let (Some(last_at), Some(last_seq)) = (s.last_turn_at, s.next_seq.checked_sub(1)) else {
            continue;
        };
        let done = lc
            .archived_sessions
            .get(&s.id)
            .is_some_and(|m| m.through_seq >= last_seq);
        let restored = lc
            .restored_sessions
            .get(&s.id)
            .is_some_and(|m| m.at > cutoff);
        if last_at > cutoff || done || restored {
            continue;
        }
        out.push(Planned {
            change: Change {
                rule: Rule::ArchiveSession,
                action: Action::ArchiveSession {
                    session: s.id.clone(),
                    through_seq: last_seq,
                },
                reason: format!(
                    "session {}'s last turn ({last_seq}) is {} days old (rule: {after} days)",
                    s.id,
                    days(now - last_at)
                ),
            },
            entry: None,
        });
    }
    // The last activity of each work context: its newest turn or entry.
    let mut activity: HashMap<&str, DateTime<Utc>> = HashMap::new();
    let turns = facts
        .sessions
        .iter()
        .filter_map(|s| Some((s.work_context.as_str(), s.last_turn_at?)));
    let entries = ordered
        .iter()
        .map(|e| (e.work_context.as_str(), e.timestamp));
    for (wc, at) in turns.chain(entries) {
        let slot = activity.entry(wc).or_insert(at);
        if at > *slot {
            *slot = at;
        }
    }
    for e in ordered {
        if e.timestamp > cutoff
            || touched.contains(&e.id)
            || lc.archived_entries.contains_key(&e.id)
            || lc
                .restored_entries
                .get(&e.id)
                .is_some_and(|m| m.at > cutoff)
        {
            continue;
        }
        let age = days(now - e.timestamp);
        let why = if let Some(by) = facts.replacements.get(&e.id) {
            format!("replaced by {by}")
        } else if let Some(m) = lc.settled.get(&e.id) {
            format!("settled by {} in {}", m.by, m.run)
        } else if lc.decayed.contains_key(&e.id) || facts.decay_at(e).is_some_and(|at| at <= now) {
            "decayed".to_owned()
        } else {
            let durable = matches!(
                e.kind,
                EntryKind::Fact | EntryKind::Obligation | EntryKind::Directive
            );
            let quiet_since = activity.get(e.work_context.as_str()).copied();
            if durable || facts.pins.contains(&e.id) || quiet_since.is_none_or(|at| at > cutoff) {
                continue;
            }
            format!(
                "live, in work context {} quiet since {}",
                e.work_context,
                quiet_since.map_or_else(String::new, |at| at.format("%Y-%m-%d").to_string())
            )
        };
        out.push(Planned {
            change: Change {
                rule: Rule::ArchiveEntry,
                action: Action::ArchiveEntry {
                    entry: e.id.clone(),
                },
                reason: format!(
                    "{} {} is {age} days old (rule: {after} days), {why}",
                    e.kind, e.id
                ),
            },
            entry: None,
        });
    }
}

// ----- the workspace side ------------------------------------------------

fn put_mark<T: Serialize>(batch: &mut WriteBatch, key: MaintKey, value: &T) -> Result<()> {
    batch.put(Collection::Maintenance, key.encode(), encode(value)?);
    Ok(())
}

fn delete_mark(batch: &mut WriteBatch, key: MaintKey) {
    batch.delete(Collection::Maintenance, key.encode());
}

/// The marks a change leaves (the same as [`Lifecycle::apply`], as writes).
fn stage_effect(
    batch: &mut WriteBatch,
    run: &str,
    at: DateTime<Utc>,
    action: &Action,
) -> Result<()> {
    let mark = Mark {
        run: run.to_owned(),
        at,
    };
    match action {
        Action::Decay { entry, .. } => put_mark(
            batch,
            MaintKey::Decayed {
                entry: entry.clone(),
            },
            &mark,
        ),
        Action::Promote { .. } => Ok(()),
        Action::ArchiveEntry { entry } => put_mark(
            batch,
            MaintKey::ArchivedEntry {
                entry: entry.clone(),
            },
            &mark,
        ),
        Action::ArchiveSession {
            session,
            through_seq,
        } => put_mark(
            batch,
            MaintKey::ArchivedSession {
                session: session.clone(),
            },
            &SessionMark {
                run: run.to_owned(),
                at,
                through_seq: *through_seq,
            },
        ),
        Action::RestoreEntry { entry, .. } => {
            delete_mark(
                batch,
                MaintKey::ArchivedEntry {
                    entry: entry.clone(),
                },
            );
            put_mark(
                batch,
                MaintKey::RestoredEntry {
                    entry: entry.clone(),
                },
                &mark,
            )
        }
        Action::RestoreSession { session, .. } => {
            delete_mark(
                batch,
                MaintKey::ArchivedSession {
                    session: session.clone(),
                },
            );
            put_mark(
                batch,
                MaintKey::RestoredSession {
                    session: session.clone(),
                },
                &mark,
            )
        }
        Action::Settle {
            entry,
            by,
            attribute,
            ..
        } => put_mark(
            batch,
            MaintKey::Settled {
                entry: entry.clone(),
            },
            &SettleMark {
                run: run.to_owned(),
                at,
                by: by.clone(),
                attribute: *attribute,
            },
        ),
    }
}

/// The marks a change leaves, reversed.
fn stage_reverse(batch: &mut WriteBatch, action: &Action) -> Result<()> {
    match action {
        Action::Decay { entry, .. } => delete_mark(
            batch,
            MaintKey::Decayed {
                entry: entry.clone(),
            },
        ),
        Action::Promote { .. } => {}
        Action::ArchiveEntry { entry } => delete_mark(
            batch,
            MaintKey::ArchivedEntry {
                entry: entry.clone(),
            },
        ),
        Action::ArchiveSession { session, .. } => delete_mark(
            batch,
            MaintKey::ArchivedSession {
                session: session.clone(),
            },
        ),
        Action::RestoreEntry { entry, archived } => {
            delete_mark(
                batch,
                MaintKey::RestoredEntry {
                    entry: entry.clone(),
                },
            );
            put_mark(
                batch,
                MaintKey::ArchivedEntry {
                    entry: entry.clone(),
                },
                archived,
            )?;
        }
        Action::RestoreSession { session, archived } => {
            delete_mark(
                batch,
                MaintKey::RestoredSession {
                    session: session.clone(),
                },
            );
            put_mark(
                batch,
                MaintKey::ArchivedSession {
                    session: session.clone(),
                },
                archived,
            )?;
        }
        Action::Settle { entry, .. } => delete_mark(
            batch,
            MaintKey::Settled {
                entry: entry.clone(),
            },
        ),
    }
    Ok(())
}

// Maintenance on a workspace: run, undo, restore, the run log and the
// lifecycle marks reads use.
impl Workspace {
    /// The lifecycle marks as stored.
    pub(crate) fn lifecycle(&self) -> Result<Lifecycle> {
        let mut out = Lifecycle::default();
        for family in [
            MaintFamily::Decayed,
            MaintFamily::ArchivedEntry,
            MaintFamily::ArchivedSession,
            MaintFamily::RestoredEntry,
            MaintFamily::RestoredSession,
            MaintFamily::Settled,
        ] {
            for (key, value) in self
                .store
                .scan_prefix(Collection::Maintenance, family.prefix())?
            {
                match MaintKey::decode(&key) {
                    Some(MaintKey::Decayed { entry }) => {
                        out.decayed.insert(entry, decode("mark", &key, &value)?);
                    }
                    Some(MaintKey::ArchivedEntry { entry }) => {
                        out.archived_entries
                            .insert(entry, decode("mark", &key, &value)?);
                    }
                    Some(MaintKey::ArchivedSession { session }) => {
                        out.archived_sessions
                            .insert(session, decode("mark", &key, &value)?);
                    }
                    Some(MaintKey::RestoredEntry { entry }) => {
                        out.restored_entries
                            .insert(entry, decode("mark", &key, &value)?);
                    }
                    Some(MaintKey::RestoredSession { session }) => {
                        out.restored_sessions
                            .insert(session, decode("mark", &key, &value)?);
                    }
                    Some(MaintKey::Settled { entry }) => {
                        out.settled.insert(entry, decode("mark", &key, &value)?);
                    }
                    Some(MaintKey::Run { .. }) | None => {
                        return Err(MemoryError::Corrupt {
                            what: "maintenance mark",
                            key: String::from_utf8_lossy(&key).into_owned(),
                            reason: "not a mark key".to_owned(),
                        });
                    }
                }
            }
        }
        Ok(out)
    }

    /// The lifecycle marks the reads of this snapshot use (cached with the log).
    pub fn archived(&self) -> Result<Lifecycle> {
        Ok(Lifecycle::clone(&self.log_snapshot()?.lifecycle))
    }

    /// Every maintenance run of the workspace, oldest first.
    pub fn maintenance_runs(&self) -> Result<Vec<MaintenanceRun>> {
        self.store
            .scan_prefix(Collection::Maintenance, MaintFamily::Run.prefix())?
            .into_iter()
            .map(|(k, v)| decode("maintenance run", &k, &v))
            .collect()
    }

    /// One maintenance run.
    pub fn maintenance_run(&self, id: &str) -> Result<MaintenanceRun> {
        let seq = parse_run_id(id)?;
        let key = MaintKey::Run { seq }.encode();
        match self.store.get(Collection::Maintenance, &key)? {
            Some(raw) => decode("maintenance run", &key, &raw),
            None => Err(MemoryError::RunNotFound { run: id.to_owned() }),
        }
    }

    fn next_run_seq(&self) -> Result<u64> {
        Ok(
            match self
                .store
                .last_with_prefix(Collection::Maintenance, MaintFamily::Run.prefix())?
            {
                Some((key, _)) => match MaintKey::decode(&key) {
                    Some(MaintKey::Run { seq }) => seq + 1,
                    _ => {
                        return Err(MemoryError::Corrupt {
                            what: "maintenance run",
                            key: String::from_utf8_lossy(&key).into_owned(),
                            reason: "not a run key".to_owned(),
                        });
                    }
                },
                None => 1,
            },
        )
    }

    /// When each captured fact of a single-valued attribute was said: its
    /// source turn's time (what settling orders them by).
    fn facts_said_at(&self, entries: &[Arc<Entry>]) -> Result<HashMap<String, DateTime<Utc>>> {
        let mut out = HashMap::new();
        for e in entries {
            let Some(p) = &e.provenance else { continue };
            let single = e.kind == EntryKind::Fact
                && e.detail
                    .as_deref()
                    .and_then(crate::facts::fact_of_detail)
                    .is_some_and(|(a, _)| a.single());
            if !single {
                continue;
            }
            match self.turn(&p.session, p.from_seq) {
                Ok(Some(turn)) => {
                    out.insert(e.id.clone(), turn.timestamp);
                }
                // Its session erased or never stored: the entry's own time.
                Ok(None) | Err(MemoryError::SessionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Sessions with their derived last turn (the listing's is not derived).
    fn sessions_with_turns(&self) -> Result<Vec<Session>> {
        let mut out = Vec::new();
        for listed in self.sessions(None)? {
            out.push(self.session(&listed.id)?);
        }
        Ok(out)
    }

    /// Runs maintenance now (see the [module docs](self)): promotion, decay,
    /// archive, and the contradictions listed. Durable when it returns; one
    /// atomic batch. With `dry_run`, the same report and nothing written.
    pub fn maintain(&self, options: &MaintainOptions) -> Result<MaintenanceReport> {
        let settings = self.shared.config.maintenance.clone();
        let guard = self.lock_entries();
        let now = self.now();
        let log = self.log_snapshot()?;
        let sessions = self.sessions_with_turns()?;
        let pins: HashSet<String> = self.pinned()?.into_iter().collect();
        let subjects = self.subject_list()?;
        let said_at = self.facts_said_at(log.entries.all())?;
        let seq = self.next_run_seq()?;
        let run = run_id(seq);
        let facts = Facts {
            entries: log.entries.all(),
            by_id: log
                .entries
                .all()
                .iter()
                .map(|e| (e.id.as_str(), &**e))
                .collect(),
            replacements: &log.replacements,
            aliases: &log.aliases,
            lifecycle: &log.lifecycle,
            sessions: &sessions,
            pins: &pins,
            subjects: &subjects,
            said_at: &said_at,
            decay: &self.shared.config.decay,
            now,
        };
        let planned = plan(
            &facts,
            &settings,
            &run,
            self.shared.config.limits.max_content_bytes,
        );
        let live = self.live_entries()?;
        let mut report = MaintenanceReport {
            workspace: self.id.clone(),
            run: None,
            dry_run: options.dry_run,
            trigger: options.trigger,
            at: now,
            changes: planned.iter().map(|p| p.change.clone()).collect(),
            contradictions: contradictions_for_report(live.iter()),
        };
        if options.dry_run || planned.is_empty() {
            return Ok(report);
        }
        let mut batch = WriteBatch::default();
        let inputs: Vec<EntryInput> = planned.iter().filter_map(|p| p.entry.clone()).collect();
        if !inputs.is_empty() {
            self.stage_entries(&inputs, &mut batch)?;
        }
        for change in &report.changes {
            stage_effect(&mut batch, &run, now, &change.action)?;
        }
        let record = MaintenanceRun {
            id: run.clone(),
            seq,
            trigger: options.trigger,
            at: now,
            settings,
            changes: report.changes.clone(),
            undone: None,
        };
        put_mark(&mut batch, MaintKey::Run { seq }, &record)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        let counts = report.counts();
        tracing::info!(workspace = %self.id, %run, trigger = ?options.trigger, changes = report.changes.len(), ?counts, "maintenance run");
        report.run = Some(run);
        Ok(report)
    }

    /// Reverses exactly one maintenance run, in one atomic batch: its marks
    /// removed (a restore's archive mark put back), the entries it promoted
    /// erased (each with a tombstone) and their replacement links removed,
    /// so the entries they replaced are live again. Durable when it returns.
    ///
    /// Refused (`undo_conflict`) when a later run not undone changed one of
    /// its items (undo that one first), when an entry it promoted has been
    /// replaced since, or when it is already undone.
    pub fn undo_maintenance(&self, id: &str) -> Result<MaintenanceRun> {
        let seq = parse_run_id(id)?;
        let guard = self.lock_entries();
        let mut run = self.maintenance_run(id)?;
        if run.undone.is_some() {
            return Err(MemoryError::UndoConflict {
                run: id.to_owned(),
                reason: "it is already undone".to_owned(),
            });
        }
        let items: HashSet<String> = run.changes.iter().map(|c| c.action.item()).collect();
        for later in self.maintenance_runs()? {
            if later.seq <= seq || later.undone.is_some() {
                continue;
            }
            if let Some(c) = later
                .changes
                .iter()
                .find(|c| items.contains(&c.action.item()))
            {
                return Err(MemoryError::UndoConflict {
                    run: id.to_owned(),
                    reason: format!(
                        "the later {} changed {} since: undo it first",
                        later.id,
                        c.action.item()
                    ),
                });
            }
        }
        let replacements = self.replacement_map()?;
        let now = self.now();
        let mut batch = WriteBatch::default();
        let mut tombstones = Vec::new();
        for change in run.changes.iter().rev() {
            stage_reverse(&mut batch, &change.action)?;
            if let Action::Promote { entry, into, .. } = &change.action {
                if let Some(by) = replacements.get(into) {
                    return Err(MemoryError::UndoConflict {
                        run: id.to_owned(),
                        reason: format!(
                            "the promoted entry {into} has been replaced by {by} since"
                        ),
                    });
                }
                if self.load_entry(into)?.is_none() {
                    // Erased since (forget): nothing left to remove.
                    continue;
                }
                batch.delete(Collection::Entries, into.as_bytes().to_vec());
                batch.delete(Collection::Replacements, entry.as_bytes().to_vec());
                batch.delete(
                    Collection::State,
                    StateKey::EntryVector {
                        entry: into.clone(),
                    }
                    .encode(),
                );
                // The one other code path that deletes an entry: like
                // `forget`, it leaves a tombstone in the same batch.
                let tombstone = Tombstone {
                    id: ulid::Ulid::new().to_string(),
                    workspace: self.id.clone(),
                    target: self.tombstone_target(&ForgetTarget::Entry(into.clone())),
                    reason: format!("undo of maintenance {id} (promotion of {entry})"),
                    at: now,
                    removed: Removed {
                        entries: 1,
                        ..Removed::default()
                    },
                    complete: true,
                };
                batch.put(
                    Collection::Tombstones,
                    tombstone.id.as_bytes().to_vec(),
                    encode(&tombstone)?,
                );
                tombstones.push(tombstone.id);
            }
        }
        run.undone = Some(Undone {
            at: now,
            tombstones,
        });
        put_mark(&mut batch, MaintKey::Run { seq }, &run)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        tracing::info!(workspace = %self.id, run = %id, "maintenance run undone");
        Ok(run)
    }

    /// Brings an archived entry or session back into the live indexes: a
    /// run of its own (trigger `restore`, rule `restore`), undoable like any
    /// other, which also keeps the item out of archiving for another
    /// `archive_after_days`. Refused (`not_archived`) for an item that is
    /// not archived.
    pub fn restore(&self, item: &ArchivedItem) -> Result<MaintenanceReport> {
        let guard = self.lock_entries();
        let lifecycle = self.lifecycle()?;
        let now = self.now();
        let (action, reason) = match item {
            ArchivedItem::Entry(id) => {
                validate_id("entry id", id)?;
                let archived = lifecycle.archived_entries.get(id).cloned().ok_or_else(|| {
                    MemoryError::NotArchived {
                        item: format!("entry {id}"),
                    }
                })?;
                let reason = format!(
                    "entry {id} restored on request (archived by {})",
                    archived.run
                );
                (
                    Action::RestoreEntry {
                        entry: id.clone(),
                        archived,
                    },
                    reason,
                )
            }
            ArchivedItem::Session(id) => {
                validate_id("session id", id)?;
                let archived = lifecycle
                    .archived_sessions
                    .get(id)
                    .cloned()
                    .ok_or_else(|| MemoryError::NotArchived {
                        item: format!("session {id}"),
                    })?;
                let reason = format!(
                    "session {id} restored on request (archived by {})",
                    archived.run
                );
                (
                    Action::RestoreSession {
                        session: id.clone(),
                        archived,
                    },
                    reason,
                )
            }
        };
        let seq = self.next_run_seq()?;
        let run = run_id(seq);
        let change = Change {
            rule: Rule::Restore,
            action,
            reason,
        };
        let mut batch = WriteBatch::default();
        stage_effect(&mut batch, &run, now, &change.action)?;
        let record = MaintenanceRun {
            id: run.clone(),
            seq,
            trigger: MaintainTrigger::Restore,
            at: now,
            settings: self.shared.config.maintenance.clone(),
            changes: vec![change.clone()],
            undone: None,
        };
        put_mark(&mut batch, MaintKey::Run { seq }, &record)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        Ok(MaintenanceReport {
            workspace: self.id.clone(),
            run: Some(run),
            dry_run: false,
            trigger: MaintainTrigger::Restore,
            at: now,
            changes: vec![change],
            contradictions: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests;
