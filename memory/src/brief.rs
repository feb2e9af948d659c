//! The briefing: a short, generated summary of where a workspace (or one
//! work context) stands, rendered from the live memory log at a given time.
//! It is what a `MEMORY.md` carries between its markers, what
//! `cairn brief` prints, and an assembly candidate.
//!
//! [`render`] is pure: the same live entries and `now` give the same bytes.
//! It reads only live entries (replaced and expired ones are gone: that is
//! how old memory fades from the briefing without being deleted), and the
//! facts maintenance settled, and writes up to seven sections, each line
//! ending with its reference (entry id, and the source turns when the entry
//! has them):
//!
//! | section | what | window |
//! |---|---|---|
//! | Active | per subject (or work context, for entries without one): the newest entry | last 14 days |
//! | Decisions | `decision` / `key_decision` entries | last 7 days |
//! | Pending | open `task` entries | no limit |
//! | Open questions | `question` / `open_question` entries (replacing one closes it) | no limit |
//! | Stale | subjects (or work contexts) whose newest live entry is 30 days old or more; those with open tasks or questions first | — |
//! | Contradictions | [`find_contradictions`] whose newer entry is in the Active window | at most 3 |
//! | Changed | facts maintenance settled with a new value ([`crate::maintain`], rule `settle`), newest first; printed only when it has lines | Active window, at most 3 |
//!
//! Every section has a line cap (an empty section says `- none`; a cut one
//! ends with `- … N more`), so the block is at most [`MAX_LINES`] lines
//! (80) whatever the log holds. Secrets are masked
//! ([`redact`](crate::redact::redact)), entry text is kept to one line, and
//! the `MEMORY.md` marker syntax (`<!--`, `-->`) is broken up so an entry
//! can never close the block it is in.
//!
//! ```
//! use cairn_memory::brief::{render, BriefScope, BriefSettings};
//! # use cairn_memory::{Entry, EntryKind, EntryStatus, EntryView, TaskStatus};
//! # use chrono::{Duration, TimeZone, Utc};
//! # use std::sync::Arc;
//! let now = Utc.with_ymd_and_hms(2026, 3, 6, 8, 0, 0).unwrap();
//! # let view = |id: &str, kind, text: &str, days: i64| {
//! #     let at = now - Duration::days(days);
//! #     EntryView { entry: Arc::new(Entry { id: id.into(), kind, content: text.into(), detail: None,
//! #         subject: Some("orion-beta".into()), work_context: "launch".into(), provenance: None,
//! #         replaces: None, status: (kind == EntryKind::Task).then_some(TaskStatus::Open),
//! #         timestamp: at, recorded_at: at, gate_generation: None }),
//! #         subject: Some("orion-beta".into()), status: EntryStatus::Live, decay_at: None } };
//! let live = vec![
//!     view("d1", EntryKind::Decision, "Launch on April 1 with sync on", 1),
//!     view("t1", EntryKind::Task, "Book the status-page maintenance window", 1),
//! ];
//! let b = render(&live, &BriefScope::workspace("acme"), now, &BriefSettings::default());
//! assert!(b.text.contains("- 2026-03-05 orion-beta: Launch on April 1 with sync on [d1]"));
//! assert!(b.text.contains("- Book the status-page maintenance window (orion-beta; since 2026-03-05) [t1]"));
//! assert!(b.text.lines().count() <= 80);
//! ```

use std::cell::RefCell;
use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::contradict::{Contradiction, ContradictionIndex, find_contradictions};
use crate::live::Patched;
use crate::log::{EntryView, TaskStatus};
use crate::text::{clip, one_line};
pub(crate) use index::BriefIndex;
use index::{Digest, ThreadDigest};

/// The most lines a briefing block has.
pub const MAX_LINES: usize = 80;

/// The longest entry text a line shows, in characters.
const MAX_TEXT_CHARS: usize = 140;

mod index;

/// The time windows (see the [module docs](self)); the defaults are the
/// design's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct BriefSettings {
    /// Active: subjects with entries this recent (default 14).
    pub active_days: u32,
    /// Decisions this recent (default 7).
    pub decision_days: u32,
    /// Stale: nothing written for this long (default 30).
    pub stale_days: u32,
    /// How long (seconds of the clock, default 1) the briefing assembly
    /// includes may lag the log while the log only grows: within this time
    /// after a rendering, writes that add entries or corrections reuse it,
    /// so a busy workspace renders it about once a second instead of after
    /// every extraction. A forget, a subject rename or merge, maintenance
    /// and decay render it again at once; 0 renders it after every write.
    pub assembly_refresh_secs: u32,
}

impl Default for BriefSettings {
    fn default() -> Self {
        BriefSettings {
            active_days: 14,
            decision_days: 7,
            stale_days: 30,
            assembly_refresh_secs: 1,
        }
    }
}

impl BriefSettings {
    /// Checks the windows (1 to 36,500 days each).
    pub fn validate(&self) -> crate::Result<()> {
        for (what, days) in [
            ("active_days", self.active_days),
            ("decision_days", self.decision_days),
            ("stale_days", self.stale_days),
        ] {
            if days == 0 || days > 36_500 {
                return Err(crate::MemoryError::Invalid {
                    what: "briefing settings",
                    reason: format!("{what} is {days}; use 1 to 36500"),
                });
            }
        }
        if self.assembly_refresh_secs > 3_600 {
            return Err(crate::MemoryError::Invalid {
                what: "briefing settings",
                reason: format!(
                    "assembly_refresh_secs is {}; use 0 to 3600",
                    self.assembly_refresh_secs
                ),
            });
        }
        Ok(())
    }
}

/// What a briefing is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BriefScope {
    /// The workspace.
    pub workspace: String,
    /// One work context, or the whole workspace.
    pub work_context: Option<String>,
}

impl BriefScope {
    /// The whole workspace.
    pub fn workspace(workspace: &str) -> Self {
        BriefScope {
            workspace: workspace.to_owned(),
            work_context: None,
        }
    }

    /// One work context.
    pub fn work_context(workspace: &str, work_context: &str) -> Self {
        BriefScope {
            workspace: workspace.to_owned(),
            work_context: Some(work_context.to_owned()),
        }
    }
}

/// The sections, in the order the block prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BriefSectionKind {
    /// Subjects with recent entries.
    Active,
    /// Recent decisions.
    Decisions,
    /// Open tasks.
    Pending,
    /// Open questions.
    OpenQuestions,
    /// Subjects nothing was written about for a while.
    Stale,
    /// Live entries that seem to conflict.
    Contradictions,
    /// Facts maintenance settled: a newer value replaced an older one.
    Changed,
}

impl BriefSectionKind {
    /// Every section, in block order.
    pub const ALL: [BriefSectionKind; 7] = [
        BriefSectionKind::Active,
        BriefSectionKind::Decisions,
        BriefSectionKind::Pending,
        BriefSectionKind::OpenQuestions,
        BriefSectionKind::Stale,
        BriefSectionKind::Contradictions,
        BriefSectionKind::Changed,
    ];

    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            BriefSectionKind::Active => "active",
            BriefSectionKind::Decisions => "decisions",
            BriefSectionKind::Pending => "pending",
            BriefSectionKind::OpenQuestions => "open_questions",
            BriefSectionKind::Stale => "stale",
            BriefSectionKind::Contradictions => "contradictions",
            BriefSectionKind::Changed => "changed",
        }
    }

    /// How many items the section shows at most. With the title, seven
    /// headings and a `… more` line each, the caps add up to at most 80
    /// lines, [`MAX_LINES`].
    pub fn max_items(self) -> usize {
        match self {
            BriefSectionKind::Active => 12,
            BriefSectionKind::Decisions => 12,
            BriefSectionKind::Pending => 15,
            BriefSectionKind::OpenQuestions => 12,
            BriefSectionKind::Stale => 8,
            BriefSectionKind::Contradictions => 3,
            BriefSectionKind::Changed => 3,
        }
    }

    fn heading(self, settings: &BriefSettings) -> String {
        match self {
            BriefSectionKind::Active => format!("### Active (last {} days)", settings.active_days),
            BriefSectionKind::Decisions => {
                format!("### Decisions (last {} days)", settings.decision_days)
            }
            BriefSectionKind::Pending => "### Pending".to_owned(),
            BriefSectionKind::OpenQuestions => "### Open questions".to_owned(),
            BriefSectionKind::Stale => {
                format!("### Stale (untouched {}+ days)", settings.stale_days)
            }
            BriefSectionKind::Contradictions => "### Contradictions (please confirm)".to_owned(),
            BriefSectionKind::Changed => {
                format!("### Changed (last {} days)", settings.active_days)
            }
        }
    }
}

/// One line of a section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BriefItem {
    /// The line's text, without the leading `- ` and the reference.
    pub text: String,
    /// The entries it stands for; the first is the one it quotes.
    pub entries: Vec<String>,
    /// The source turns of the first entry (`session:from-to`), if any.
    pub turns: Option<String>,
    /// The subject, if any.
    pub subject: Option<String>,
    /// The work context of the first entry.
    pub work_context: String,
    /// When the first entry was captured.
    pub at: DateTime<Utc>,
}

impl BriefItem {
    /// The reference the line ends with: `[id]` or `[id; session:from-to]`
    /// (`[older id; newer id]` for a contradiction, `[newer id; older id;
    /// newer's turns]` for a settled fact).
    pub fn reference(&self) -> String {
        let mut parts: Vec<&str> = self.entries.iter().map(String::as_str).collect();
        if let Some(t) = &self.turns {
            parts.push(t);
        }
        format!("[{}]", parts.join("; "))
    }

    /// The rendered line, without a newline.
    pub fn line(&self) -> String {
        format!("- {} {}", self.text, self.reference())
    }
}

/// One section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BriefSection {
    /// Which section.
    pub kind: BriefSectionKind,
    /// Its heading, as printed (without `### `).
    pub title: String,
    /// Its lines, in order.
    pub items: Vec<BriefItem>,
    /// Items left out by the section's cap.
    pub omitted: usize,
}

/// A rendered briefing: the block's text and the same content structured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Briefing {
    /// What it is about.
    pub scope: BriefScope,
    /// The time it was rendered at (the clock's `now`).
    pub at: DateTime<Utc>,
    /// The seven sections, in block order (the text leaves Changed out
    /// when it is empty).
    pub sections: Vec<BriefSection>,
    /// The block (markdown, every line ends with `\n`), at most
    /// [`MAX_LINES`] lines; no markers.
    pub text: String,
    /// Lines of `text`.
    pub lines: usize,
    /// How many live entries it was rendered from.
    pub entries_read: usize,
}

impl Briefing {
    /// A section.
    pub fn section(&self, kind: BriefSectionKind) -> &BriefSection {
        // Every briefing has all seven, in order.
        &self.sections[BriefSectionKind::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(0)]
    }

    /// The compact form for an assembled block: non-empty sections only,
    /// without the lines whose first entry `skip` says is shown already;
    /// `None` when nothing is left.
    pub fn compact(&self, skip: impl Fn(&str) -> bool) -> Option<String> {
        let mut text = String::new();
        for section in &self.sections {
            let lines: Vec<String> = section
                .items
                .iter()
                .filter(|i| i.entries.first().is_none_or(|id| !skip(id)))
                .map(BriefItem::line)
                .collect();
            if lines.is_empty() {
                continue;
            }
            text.push_str(&format!("{}:\n", section.title));
            for line in lines {
                text.push_str(&line);
                text.push('\n');
            }
        }
        (!text.is_empty()).then_some(text)
    }
}

/// Renders the briefing of `scope` from the live entries of its workspace
/// (other entries are ignored; entries of other work contexts too when the
/// scope names one) at `now`. Contradictions are found with
/// [`find_contradictions`]; [`render_with`] takes them precomputed.
pub fn render<'a>(
    entries: impl IntoIterator<Item = &'a EntryView> + Clone,
    scope: &BriefScope,
    now: DateTime<Utc>,
    settings: &BriefSettings,
) -> Briefing {
    render_with(
        entries.clone(),
        &find_contradictions(entries),
        scope,
        now,
        settings,
    )
}

/// [`render`] with the contradictions among `entries` already found (a
/// caller that caches them per log version); those with an entry outside
/// the scope are left out.
pub fn render_with<'a>(
    entries: impl IntoIterator<Item = &'a EntryView>,
    contradictions: &[Contradiction],
    scope: &BriefScope,
    now: DateTime<Utc>,
    settings: &BriefSettings,
) -> Briefing {
    render_shown(entries, contradictions, &[], scope, now, settings).0
}

/// [`render_with`], with the entry each item stands for (its first), in
/// item order.
fn render_shown<'a>(
    entries: impl IntoIterator<Item = &'a EntryView>,
    contradictions: &[Contradiction],
    changed: &[SettledFact],
    scope: &BriefScope,
    now: DateTime<Utc>,
    settings: &BriefSettings,
) -> (Briefing, Vec<EntryView>) {
    let in_scope: Vec<&EntryView> = entries
        .into_iter()
        .filter(|v| v.is_live())
        .filter(|v| {
            scope
                .work_context
                .as_ref()
                .is_none_or(|wc| &v.entry.work_context == wc)
        })
        .collect();
    let digest = BriefIndex::of(in_scope.iter().copied()).digest(now, settings);
    render_digest(
        &digest,
        in_scope,
        contradictions,
        changed,
        scope,
        now,
        settings,
    )
}

/// The briefing of `scope` from the digest of its live entries;
/// `in_scope` are those entries (newest first is quickest: the entries
/// contradictions name are looked for in it).
fn render_digest<'a>(
    digest: &Digest,
    in_scope: impl IntoIterator<Item = &'a EntryView>,
    contradictions: &[Contradiction],
    changed: &[SettledFact],
    scope: &BriefScope,
    now: DateTime<Utc>,
    settings: &BriefSettings,
) -> (Briefing, Vec<EntryView>) {
    // The entries the contradictions name, found in the scope: a pass
    // that stops once all are found (they are recent, and the list is
    // newest first), not an index of every entry.
    let mut named: HashMap<&str, Option<&EntryView>> = contradictions
        .iter()
        .flat_map(|c| [c.older.as_str(), c.newer.as_str()])
        .map(|id| (id, None))
        .collect();
    let mut missing = named.len();
    for v in in_scope {
        if missing == 0 {
            break;
        }
        if let Some(slot @ None) = named.get_mut(v.entry.id.as_str()) {
            *slot = Some(v);
            missing -= 1;
        }
    }
    let named: HashMap<&str, &EntryView> = named
        .into_iter()
        .filter_map(|(id, v)| Some((id, v?)))
        .collect();
    let contradictions: Vec<&Contradiction> = contradictions
        .iter()
        .filter(|c| named.contains_key(c.older.as_str()) && named.contains_key(c.newer.as_str()))
        .collect();
    render_scoped(
        digest,
        &contradictions,
        changed,
        &named,
        scope,
        now,
        settings,
    )
}

/// `named`: the entries the contradictions name, by id. With the entry
/// each item stands for.
fn render_scoped(
    digest: &Digest,
    contradictions: &[&Contradiction],
    changed: &[SettledFact],
    named: &HashMap<&str, &EntryView>,
    scope: &BriefScope,
    now: DateTime<Utc>,
    settings: &BriefSettings,
) -> (Briefing, Vec<EntryView>) {
    // Filled by `item_of` as items are made.
    let noted: RefCell<Vec<EntryView>> = RefCell::new(Vec::new());
    let active_since = now - Duration::days(i64::from(settings.active_days));
    let stale_before = now - Duration::days(i64::from(settings.stale_days));

    // Threads (a subject, or a work context for entries without one), in
    // thread order: each section sorts the ones it lists (stably, so ties
    // stay in thread order), then formats only the ones it shows
    // (redaction is the costly part).
    let cap = BriefSectionKind::max_items;
    let mut active: Vec<&ThreadDigest> = Vec::new();
    let mut stale: Vec<&ThreadDigest> = Vec::new();
    for t in &digest.threads {
        let newest = t.newest.entry.timestamp;
        if newest >= active_since {
            active.push(t);
        } else if newest < stale_before {
            stale.push(t);
        }
    }
    active.sort_by_key(|t| std::cmp::Reverse(t.newest.entry.timestamp));
    stale.sort_by_key(|t| std::cmp::Reverse((t.open > 0, t.newest.entry.timestamp)));
    let active_items: Vec<BriefItem> = active
        .iter()
        .take(cap(BriefSectionKind::Active))
        .map(|t| {
            let newest = &t.newest;
            let quoted = t.quoted.as_ref().unwrap_or(newest);
            let done = if quoted.entry.status == Some(TaskStatus::Done)
                && !quoted.entry.content.to_lowercase().starts_with("done")
            {
                "done: "
            } else {
                ""
            };
            let mut item = item_of(
                &noted,
                quoted,
                format!(
                    "{}: {done}{} ({} entr{}, last {})",
                    thread_of(newest).label(),
                    shown(&quoted.entry.content),
                    t.recent,
                    if t.recent == 1 { "y" } else { "ies" },
                    day(newest.entry.timestamp)
                ),
            );
            item.at = newest.entry.timestamp;
            item
        })
        .collect();
    let stale_items: Vec<BriefItem> = stale
        .iter()
        .take(cap(BriefSectionKind::Stale))
        .map(|t| {
            let newest = &t.newest;
            let open_note = if t.open > 0 {
                format!(", {} open", t.open)
            } else {
                String::new()
            };
            item_of(
                &noted,
                newest,
                format!(
                    "{}: last touched {} ({} live entr{}{open_note})",
                    thread_of(newest).label(),
                    day(newest.entry.timestamp),
                    t.total,
                    if t.total == 1 { "y" } else { "ies" },
                ),
            )
        })
        .collect();

    let decision_items: Vec<BriefItem> = digest
        .decisions
        .first
        .iter()
        .map(|v| {
            let about = v
                .subject
                .as_ref()
                .map_or(String::new(), |s| format!(" {s}:"));
            item_of(
                &noted,
                v,
                format!(
                    "{}{about} {}",
                    day(v.entry.timestamp),
                    shown(&v.entry.content)
                ),
            )
        })
        .collect();
    let open_item = |v: &EntryView| {
        item_of(
            &noted,
            v,
            format!(
                "{} ({}since {})",
                shown(&v.entry.content),
                v.subject
                    .as_ref()
                    .map_or(String::new(), |s| format!("{s}; ")),
                day(v.entry.timestamp)
            ),
        )
    };
    let pending_items: Vec<BriefItem> = digest.pending.first.iter().map(open_item).collect();
    let question_items: Vec<BriefItem> = digest.questions.first.iter().map(open_item).collect();
    let recent_conflicts: Vec<&Contradiction> = contradictions
        .iter()
        .copied()
        .filter(|c| c.newer_at >= active_since)
        .collect();
    let conflicts: Vec<BriefItem> = recent_conflicts
        .iter()
        .take(cap(BriefSectionKind::Contradictions))
        .filter_map(|c| {
            let (older, newer) = (named.get(c.older.as_str())?, named.get(c.newer.as_str())?);
            noted.borrow_mut().push((*older).clone());
            let about = c.subject.clone().unwrap_or_else(|| c.work_context.clone());
            Some(BriefItem {
                text: format!(
                    "{about}: \"{}\" ({}) may conflict with \"{}\" ({}): {} ({})",
                    shown_short(&older.entry.content),
                    day(c.older_at),
                    shown_short(&newer.entry.content),
                    day(c.newer_at),
                    sanitise(&c.detail),
                    c.rule.as_str()
                ),
                entries: vec![c.older.clone(), c.newer.clone()],
                turns: None,
                subject: c.subject.clone(),
                work_context: c.work_context.clone(),
                at: c.newer_at,
            })
        })
        .collect();

    let changed_items: Vec<BriefItem> = changed
        .iter()
        .filter(|c| {
            scope
                .work_context
                .as_ref()
                .is_none_or(|wc| &*c.newer.entry.work_context == wc)
        })
        .take(cap(BriefSectionKind::Changed))
        .map(|c| {
            let mut item = item_of(&noted, &c.newer, c.line());
            item.entries.push(c.older.entry.id.clone());
            item.at = c.mark.at;
            item
        })
        .collect();
    let changed_total = changed
        .iter()
        .filter(|c| {
            scope
                .work_context
                .as_ref()
                .is_none_or(|wc| &*c.newer.entry.work_context == wc)
        })
        .count();

    let lists: [(BriefSectionKind, usize, Vec<BriefItem>); 7] = [
        (BriefSectionKind::Active, active.len(), active_items),
        (
            BriefSectionKind::Decisions,
            digest.decisions.total,
            decision_items,
        ),
        (
            BriefSectionKind::Pending,
            digest.pending.total,
            pending_items,
        ),
        (
            BriefSectionKind::OpenQuestions,
            digest.questions.total,
            question_items,
        ),
        (BriefSectionKind::Stale, stale.len(), stale_items),
        (
            BriefSectionKind::Contradictions,
            recent_conflicts.len(),
            conflicts,
        ),
        (BriefSectionKind::Changed, changed_total, changed_items),
    ];
    let mut sections = Vec::with_capacity(7);
    let mut text = match &scope.work_context {
        Some(wc) => format!("## Briefing: {} / {wc} ({})\n", scope.workspace, day(now)),
        None => format!("## Briefing: {} ({})\n", scope.workspace, day(now)),
    };
    for (kind, total, items) in lists {
        let omitted = total.saturating_sub(items.len());
        let heading = kind.heading(settings);
        // Most briefings change nothing: no empty Changed section.
        let printed = kind != BriefSectionKind::Changed || !items.is_empty();
        if printed {
            text.push_str(&heading);
            text.push('\n');
        }
        if items.is_empty() && printed {
            text.push_str("- none\n");
        }
        for item in &items {
            text.push_str(&item.line());
            text.push('\n');
        }
        if omitted > 0 {
            text.push_str(&format!(
                "- … {omitted} more (`cairn {}`)\n",
                more_command(kind)
            ));
        }
        sections.push(BriefSection {
            kind,
            title: heading.trim_start_matches("### ").to_owned(),
            items,
            omitted,
        });
    }
    let lines = text.lines().count();
    debug_assert!(lines <= MAX_LINES, "{lines} lines");
    let briefing = Briefing {
        scope: scope.clone(),
        at: now,
        sections,
        text,
        lines,
        entries_read: digest.entries,
    };
    (briefing, noted.into_inner())
}

/// A fact maintenance settled with a new value, as the Changed section
/// shows it: the fact replaced, the live fact that replaced it, and the
/// mark of the run that did.
#[derive(Debug, Clone)]
pub(crate) struct SettledFact {
    pub(crate) older: EntryView,
    pub(crate) newer: EntryView,
    pub(crate) mark: crate::maintain::SettleMark,
    /// The values each says ([`crate::facts::value_of`]).
    pub(crate) from: String,
    pub(crate) to: String,
}

impl SettledFact {
    /// "Ana: residence Porto → Lisbon (run-3, 2026-03-05)".
    fn line(&self) -> String {
        // The speaker, else the user (the subject of a fact without a
        // speaker is something the sentence names, not the person).
        let who = crate::facts::fact_of_detail(self.newer.entry.detail.as_deref().unwrap_or(""))
            .and_then(|(_, speaker)| speaker)
            .unwrap_or_else(|| "The user".to_owned());
        format!(
            "{}: {} {} → {} ({}, {})",
            shown_short(&who),
            self.mark.attribute.as_str(),
            shown_short(&self.from),
            shown_short(&self.to),
            self.mark.run,
            day(self.mark.at)
        )
    }
}

fn more_command(kind: BriefSectionKind) -> &'static str {
    match kind {
        BriefSectionKind::Decisions => "log --kind decision",
        BriefSectionKind::Pending => "log --kind task",
        BriefSectionKind::OpenQuestions => "log --kind open_question",
        _ => "log",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Thread<'a> {
    Subject(&'a str),
    Context(&'a str),
}

impl Thread<'_> {
    fn label(&self) -> String {
        match self {
            Thread::Subject(s) => (*s).to_owned(),
            Thread::Context(wc) => format!("{wc} (work context)"),
        }
    }
}

fn thread_of(v: &EntryView) -> Thread<'_> {
    match &v.subject {
        Some(s) => Thread::Subject(s),
        None => Thread::Context(&v.entry.work_context),
    }
}

/// The item standing for `v`, noted in `noted`.
fn item_of(noted: &RefCell<Vec<EntryView>>, v: &EntryView, text: String) -> BriefItem {
    noted.borrow_mut().push(v.clone());
    BriefItem {
        text,
        entries: vec![v.entry.id.clone()],
        turns: v.entry.provenance.as_ref().map(|p| {
            if p.from_seq == p.to_seq {
                format!("{}:{}", p.session, p.from_seq)
            } else {
                format!("{}:{}-{}", p.session, p.from_seq, p.to_seq)
            }
        }),
        subject: v.subject.as_deref().map(str::to_owned),
        work_context: v.entry.work_context.to_string(),
        at: v.entry.timestamp,
    }
}

fn day(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d").to_string()
}

/// Breaks up the `MEMORY.md` marker syntax so no text can open or close a
/// block.
fn sanitise(text: &str) -> String {
    text.replace("<!--", "<!- -").replace("-->", "- ->")
}

/// An entry's text as a line shows it: secrets masked, one line, clipped,
/// no marker syntax.
fn shown(text: &str) -> String {
    sanitise(&clip(
        &one_line(&crate::redact::redact(text)),
        MAX_TEXT_CHARS,
    ))
}

fn shown_short(text: &str) -> String {
    sanitise(&clip(&one_line(&crate::redact::redact(text)), 60))
}

// The briefing on a workspace: rendered from the live log at the clock's
// time; contradictions and the latest handoffs are computed once per
// version of the live log.
impl crate::memory::Workspace {
    /// The briefing of the workspace, or of one work context, at the
    /// clock's time, with the configured windows (`briefing` in
    /// [`MemoryConfig`](crate::MemoryConfig); see the [module docs](self)).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Task, "Book the maintenance window").in_context("launch"))?;
    /// let b = ws.briefing(Some("launch"))?;
    /// assert!(b.text.contains("- Book the maintenance window (since "));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn briefing(&self, work_context: Option<&str>) -> crate::Result<Briefing> {
        self.briefing_as(work_context, |view| Some(std::borrow::Cow::Borrowed(view)))
    }

    /// [`Self::briefing`] as one reader may see it: `shown` gives each live
    /// entry in scope as that reader sees it — itself
    /// ([`Cow::Borrowed`](std::borrow::Cow)), changed (its text redacted or
    /// withheld by reference), or `None` when the reader may not see it at
    /// all, in which case the briefing is rendered as if it did not exist.
    /// When every entry is shown as it is, this is [`Self::briefing`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::borrow::Cow;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Task, "Book the maintenance window"))?;
    /// ws.append_entry(&EntryInput::new(EntryKind::Task, "Rotate the vault keys"))?;
    /// let b = ws.briefing_as(None, |v| (!v.entry.content.contains("vault")).then_some(Cow::Borrowed(v)))?;
    /// assert!(b.text.contains("maintenance window"));
    /// assert!(!b.text.contains("vault"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn briefing_as(
        &self,
        work_context: Option<&str>,
        mut shown: impl for<'v> FnMut(&'v EntryView) -> Option<std::borrow::Cow<'v, EntryView>>,
    ) -> crate::Result<Briefing> {
        let settings = &self.config().briefing;
        settings.validate()?;
        if let Some(wc) = work_context {
            crate::ids::validate_id("work context", wc)?;
        }
        let scope = BriefScope {
            workspace: self.id().to_owned(),
            work_context: work_context.map(str::to_owned),
        };
        let (live, derived) = self.live_state()?;
        let now = self.clock().now();
        // A settled fact is shown when the reader sees both facts as they are.
        let changed: Vec<SettledFact> = self
            .settled_facts(&live, &derived, now)?
            .into_iter()
            .filter(|c| {
                [&c.older, &c.newer]
                    .into_iter()
                    .all(|v| matches!(shown(v), Some(std::borrow::Cow::Borrowed(_))))
            })
            .collect();
        let in_scope =
            |view: &&EntryView| work_context.is_none_or(|wc| &*view.entry.work_context == wc);
        let shown: Vec<Option<std::borrow::Cow<'_, EntryView>>> =
            live.iter().filter(in_scope).map(&mut shown).collect();
        if shown
            .iter()
            .all(|v| matches!(v, Some(std::borrow::Cow::Borrowed(_))))
        {
            // Nothing withheld or changed: the live list as it is, with the
            // contradictions kept for it.
            let contradictions = self.live_contradictions()?;
            return Ok(render_shown(
                live.iter(),
                &contradictions,
                &changed,
                &scope,
                now,
                settings,
            )
            .0);
        }
        let seen: Vec<EntryView> = shown
            .into_iter()
            .flatten()
            .map(std::borrow::Cow::into_owned)
            .collect();
        Ok(render_shown(
            seen.iter(),
            &find_contradictions(seen.iter()),
            &changed,
            &scope,
            now,
            settings,
        )
        .0)
    }

    /// The facts maintenance settled with a new value in the Active
    /// window whose newer fact is live, newest first (for the Changed
    /// section). Restatements (the same value) are not changes.
    fn settled_facts(
        &self,
        live: &crate::live::LiveList,
        derived: &crate::memory::LiveDerived,
        now: DateTime<Utc>,
    ) -> crate::Result<Vec<SettledFact>> {
        let lifecycle = self.log_snapshot()?.lifecycle.clone();
        if lifecycle.settled.is_empty() {
            return Ok(Vec::new());
        }
        let since = now - Duration::days(i64::from(self.config().briefing.active_days));
        let rules = &crate::facts::ENGLISH;
        let mut out = Vec::new();
        for (id, mark) in &lifecycle.settled {
            if mark.at < since {
                continue;
            }
            let Some(newer) = derived
                .position(live, &mark.by)
                .and_then(|i| live.get(i))
                .cloned()
            else {
                continue;
            };
            let older = match self.entry(id) {
                Ok(v) => v,
                // Erased since.
                Err(crate::MemoryError::EntryNotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            let value =
                |v: &EntryView| crate::facts::value_of(&v.entry.content, mark.attribute, rules);
            let (Some(from), Some(to)) = (value(&older), value(&newer)) else {
                continue;
            };
            if from.to_lowercase() == to.to_lowercase() {
                continue;
            }
            out.push(SettledFact {
                older,
                newer,
                mark: mark.clone(),
                from,
                to,
            });
        }
        out.sort_by(|a, b| (b.mark.at, &b.older.entry.id).cmp(&(a.mark.at, &a.older.entry.id)));
        Ok(out)
    }

    /// The workspace briefing as assembly includes it: [`Self::briefing`]
    /// for the whole workspace, rendered once per version of the live log
    /// and minute of the clock (its windows are whole days, which a minute
    /// does not move by more than a minute) instead of on every assembly;
    /// with the live entries its items stand for. While writes only add
    /// (entries, corrections), a rendering stands for up to
    /// `assembly_refresh_secs` of later versions too: it lags the log by
    /// that much at most, and names nothing deleted.
    pub(crate) fn briefing_for_assembly(&self) -> crate::Result<AssemblyBriefing> {
        let settings = &self.config().briefing;
        settings.validate()?;
        let (live, derived) = self.live_state()?;
        let now = self.clock().now();
        let minute = now.timestamp().div_euclid(60);
        let refresh = Duration::seconds(i64::from(settings.assembly_refresh_secs));
        // The workspace's latest rendering stands for this list when it was
        // rendered for it, or for a list of its lineage within `refresh`.
        let usable = |c: &CachedBriefing| {
            c.minute == minute
                && (c.version == derived.version
                    || (c.lineage == derived.lineage && now - c.rendered_at < refresh))
        };
        let cache = self.shared.log_cache(self.id());
        let earlier = cache.briefing.lock().clone();
        if let Some(c) = &earlier
            && usable(c)
        {
            return Ok(c.briefing.clone());
        }
        // One rendering at a time per workspace: while another assembly
        // renders, one whose lineage has a rendering this minute uses it
        // (it lags a little longer than `refresh`).
        let _rendering = match cache.briefing_render.try_lock() {
            Some(guard) => guard,
            None => match &earlier {
                Some(c) if c.lineage == derived.lineage && c.minute == minute => {
                    return Ok(c.briefing.clone());
                }
                _ => cache.briefing_render.lock(),
            },
        };
        if let Some(c) = cache.briefing.lock().as_ref()
            && usable(c)
        {
            return Ok(c.briefing.clone());
        }
        let contradictions = self.live_contradictions()?;
        let scope = BriefScope {
            workspace: self.id().to_owned(),
            work_context: None,
        };
        let started = std::time::Instant::now();
        // The index kept with the live list (made on first use, then
        // patched with the list): a rendering reads a few entries per
        // thread, not the log.
        let digest = derived
            .brief
            .lock()
            .get_or_insert_with(|| BriefIndex::of(&*live))
            .digest(now, settings);
        let changed = self.settled_facts(&live, &derived, now)?;
        let (brief, shown) = render_digest(
            &digest,
            live.iter(),
            &contradictions,
            &changed,
            &scope,
            now,
            settings,
        );
        tracing::debug!(
            workspace = %self.id(),
            entries = live.len(),
            lineage_rendered = earlier.as_ref().is_some_and(|c| c.lineage == derived.lineage),
            micros = started.elapsed().as_micros() as u64,
            "rendered the assembly briefing"
        );
        let items = shown.into_iter().map(|v| (v.entry.id.clone(), v)).collect();
        let briefing = AssemblyBriefing {
            brief: std::sync::Arc::new(brief),
            items: std::sync::Arc::new(items),
            lines: std::sync::Arc::default(),
            // The earlier rendering's lines, while this one's are not made:
            // most lines carry over, and so do their floors.
            earlier_lines: std::sync::Arc::new(parking_lot::Mutex::new(
                earlier
                    .map(|c| c.briefing.lines.lock().clone())
                    .unwrap_or_default(),
            )),
        };
        *cache.briefing.lock() = Some(CachedBriefing {
            version: derived.version,
            lineage: derived.lineage,
            minute,
            rendered_at: now,
            briefing: briefing.clone(),
        });
        Ok(briefing)
    }

    /// Contradictions among the live entries ([`find_contradictions`]),
    /// collected once per version of the live log from an index patched
    /// with it (only the groups a change touched are compared again).
    pub fn live_contradictions(&self) -> crate::Result<std::sync::Arc<Vec<Contradiction>>> {
        let (live, derived) = self.live_state()?;
        Ok(derived
            .contradictions
            .get_or_init(|| {
                let mut index = derived.contradiction_index.lock();
                let index = index.get_or_insert_with(|| ContradictionIndex::of(live.iter()));
                std::sync::Arc::new(index.found())
            })
            .clone())
    }

    /// The newest live `handoff` entry of a work context, if any. The
    /// answer is cached with the live log: it is recomputed only when the
    /// log changes (a new handoff, a replacement, a decay).
    pub fn latest_handoff(&self, work_context: &str) -> crate::Result<Option<EntryView>> {
        let (live, derived) = self.live_state()?;
        let index = crate::assemble::tiers::AssemblyIndex::of(&live, &derived);
        Ok(index.latest_handoff(&live, work_context).cloned())
    }
}

/// The latest assembly briefing of a workspace, with what it was rendered
/// for.
#[derive(Debug, Clone)]
pub(crate) struct CachedBriefing {
    /// The live list's version and lineage ([`crate::memory::LiveDerived`]).
    version: u64,
    lineage: u64,
    /// The clock's minute it was rendered in.
    minute: i64,
    rendered_at: DateTime<Utc>,
    briefing: AssemblyBriefing,
}

/// The briefing assembly includes, with the live entries its items stand
/// for (see [`Workspace::briefing_for_assembly`]).
#[derive(Debug, Clone)]
pub(crate) struct AssemblyBriefing {
    pub(crate) brief: std::sync::Arc<Briefing>,
    /// Per entry id, the entry an item stands for (its first).
    items: std::sync::Arc<HashMap<String, EntryView>>,
    /// The lines as the assembly offers them, per token encoding: made by
    /// the first assembly of each encoding that uses this rendering.
    lines: std::sync::Arc<parking_lot::Mutex<Vec<AssemblyLines>>>,
    /// The lines of the rendering this one replaced, per encoding, until
    /// this one's are made.
    earlier_lines: std::sync::Arc<parking_lot::Mutex<Vec<AssemblyLines>>>,
}

/// The lines of one rendering under one encoding.
type AssemblyLines = (
    &'static str,
    std::sync::Arc<[crate::assemble::BriefingLine]>,
);

impl AssemblyBriefing {
    /// The live entry an item of the briefing stands for (its first entry).
    pub(crate) fn entry(&self, id: &str) -> Option<&EntryView> {
        self.items.get(id)
    }

    /// The lines for `encoding`: made once by `make` (given the lines the
    /// rendering before this one had made for `encoding`, if any), then
    /// shared by every assembly that uses this rendering (across sessions,
    /// for up to a minute).
    pub(crate) fn lines(
        &self,
        encoding: &'static str,
        make: impl FnOnce(&[crate::assemble::BriefingLine]) -> Vec<crate::assemble::BriefingLine>,
    ) -> std::sync::Arc<[crate::assemble::BriefingLine]> {
        let mut lines = self.lines.lock();
        if let Some((_, made)) = lines.iter().find(|(e, _)| *e == encoding) {
            return made.clone();
        }
        let earlier = {
            let mut earlier = self.earlier_lines.lock();
            let at = earlier.iter().position(|(e, _)| *e == encoding);
            at.map(|at| earlier.swap_remove(at).1)
        };
        let made: std::sync::Arc<[_]> = make(earlier.as_deref().unwrap_or_default()).into();
        lines.push((encoding, made.clone()));
        made
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{Duration, TimeZone};
    use expect_test::expect;

    use super::*;
    use crate::{
        EntryInput, EntryKind, ManualClock, Memory, MemoryConfig, Role, TurnInput, Workspace,
    };

    struct Fx {
        _dir: tempfile::TempDir,
        clock: ManualClock,
        memory: Memory,
    }

    impl Fx {
        fn new() -> Fx {
            let dir = tempfile::tempdir().unwrap();
            let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap());
            let memory = crate::testing::memory(
                dir.path(),
                MemoryConfig::default(),
                Arc::new(clock.clone()),
            )
            .unwrap();
            Fx {
                _dir: dir,
                clock,
                memory,
            }
        }

        fn ws(&self) -> Workspace {
            self.memory.workspace("acme").unwrap()
        }

        /// Appends at the clock's time, then moves the clock `hours` on.
        fn add(&self, input: EntryInput, hours: i64) -> String {
            let id = self.ws().append_entry(&input).unwrap().id;
            self.clock.advance(Duration::hours(hours));
            id
        }
    }

    fn e(kind: EntryKind, text: &str, subject: &str, wc: &str) -> EntryInput {
        let mut e = EntryInput::new(kind, text).in_context(wc);
        if !subject.is_empty() {
            e = e.about(subject);
        }
        e
    }

    /// While writes only add (entries, corrections), one rendering stands
    /// for the log's versions for `assembly_refresh_secs`; a forget renders
    /// it again at once, and every rendering is the log's briefing.
    #[test]
    fn additions_reuse_the_assembly_briefing_for_a_second_and_removals_do_not() {
        let fx = Fx::new();
        let first_id = fx.add(
            e(EntryKind::Decision, "Ship on Monday", "launch", "launch"),
            0,
        );
        let ws = fx.ws();
        let first = ws.briefing_for_assembly().unwrap().brief;
        assert_eq!(*first, ws.briefing(None).unwrap());
        // An addition in the same second: the same rendering.
        fx.add(e(EntryKind::Task, "Book the room", "launch", "launch"), 0);
        let reused = ws.briefing_for_assembly().unwrap();
        assert!(Arc::ptr_eq(&first, &reused.brief));
        assert!(reused.entry(&first_id).is_some());
        assert_ne!(*first, ws.briefing(None).unwrap(), "the log moved on");
        // A second later: rendered again, with the task.
        fx.clock.advance(Duration::seconds(1));
        let fresh = ws.briefing_for_assembly().unwrap().brief;
        assert!(!Arc::ptr_eq(&first, &fresh));
        assert_eq!(*fresh, ws.briefing(None).unwrap());
        assert!(fresh.text.contains("Book the room"));
        // A correction in the same second: reused, then rendered a second
        // later.
        ws.append_entry(
            &e(EntryKind::Decision, "Ship on Wednesday", "launch", "launch").replacing(&first_id),
        )
        .unwrap();
        assert!(Arc::ptr_eq(
            &fresh,
            &ws.briefing_for_assembly().unwrap().brief
        ));
        fx.clock.advance(Duration::seconds(1));
        let corrected = ws.briefing_for_assembly().unwrap().brief;
        assert!(!Arc::ptr_eq(&fresh, &corrected));
        assert_eq!(*corrected, ws.briefing(None).unwrap());
        assert!(!corrected.text.contains("Ship on Monday"));
        // A forget in the same second: rendered again at once.
        let task = ws
            .live_entries()
            .unwrap()
            .iter()
            .find(|v| v.entry.content == "Book the room")
            .map(|v| v.entry.id.clone())
            .unwrap();
        ws.forget(&crate::ForgetTarget::Entry(task), "test")
            .unwrap();
        let forgotten = ws.briefing_for_assembly().unwrap().brief;
        assert!(!Arc::ptr_eq(&corrected, &forgotten));
        assert_eq!(*forgotten, ws.briefing(None).unwrap());
        assert!(!forgotten.text.contains("Book the room"));
        // With a refresh of 0, every addition renders it again.
        let mut config = MemoryConfig::default();
        config.briefing.assembly_refresh_secs = 0;
        let dir = tempfile::tempdir().unwrap();
        let memory =
            crate::testing::memory(dir.path(), config, Arc::new(fx.clock.clone())).unwrap();
        let ws = memory.workspace("acme").unwrap();
        ws.append_entry(&e(EntryKind::Task, "One", "launch", "launch"))
            .unwrap();
        let one = ws.briefing_for_assembly().unwrap().brief;
        ws.append_entry(&e(EntryKind::Task, "Two", "launch", "launch"))
            .unwrap();
        let two = ws.briefing_for_assembly().unwrap().brief;
        assert!(!Arc::ptr_eq(&one, &two));
        assert!(two.text.contains("Two"));
    }

    /// The index assembly renders from follows the live list through
    /// additions and corrections (patched, not made again): after every
    /// write, over days of the clock, its briefing is the one a pass over
    /// the log renders.
    #[test]
    fn the_patched_index_renders_the_briefing_a_pass_renders() {
        let mut config = MemoryConfig::default();
        config.briefing.assembly_refresh_secs = 0;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap());
        let memory = crate::testing::memory(dir.path(), config, Arc::new(clock.clone())).unwrap();
        let ws = memory.workspace("acme").unwrap();
        let kinds = [
            EntryKind::Decision,
            EntryKind::Task,
            EntryKind::Question,
            EntryKind::Fact,
            EntryKind::KeyDecision,
            EntryKind::SessionSummaryRef,
        ];
        let mut seed: u64 = 7;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for step in 0..160 {
            let kind = kinds[next(kinds.len() as u64) as usize];
            let subject = ["", "orion", "billing", "search"][next(4) as usize];
            let wc = ["launch", "ops"][next(2) as usize];
            let mut input = e(kind, &format!("Note {step}"), subject, wc);
            if kind == EntryKind::Task && next(3) == 0 {
                input.status = Some(TaskStatus::Done);
            }
            // A quarter of the writes correct an earlier entry.
            let live = ws.live_entries().unwrap();
            if !live.is_empty() && next(4) == 0 {
                let old = &live[next(live.len() as u64) as usize];
                input = input.replacing(&old.entry.id);
            }
            let before = ws.live_state().unwrap().1;
            ws.append_entry(&input).unwrap();
            let assembly = ws.briefing_for_assembly().unwrap();
            assert_eq!(*assembly.brief, ws.briefing(None).unwrap(), "step {step}");
            if step > 0 {
                assert!(
                    before.brief.lock().is_none(),
                    "step {step}: the index moved on"
                );
            }
            clock.advance(Duration::hours(next(30) as i64));
        }
    }

    /// Assembly's briefing is the workspace briefing, rendered once per
    /// minute and version of the log: reused within the minute, rendered
    /// again after a write or when the minute turns.
    #[test]
    fn the_assembly_briefing_is_rendered_once_per_minute_and_log() {
        let fx = Fx::new();
        fx.add(
            e(EntryKind::Decision, "Ship on Monday", "launch", "launch"),
            0,
        );
        let ws = fx.ws();
        let first = ws.briefing_for_assembly().unwrap().brief;
        assert_eq!(*first, ws.briefing(None).unwrap());
        assert!(Arc::ptr_eq(
            &first,
            &ws.briefing_for_assembly().unwrap().brief
        ));
        fx.clock.advance(Duration::seconds(30));
        assert!(Arc::ptr_eq(
            &first,
            &ws.briefing_for_assembly().unwrap().brief
        ));
        fx.add(
            e(EntryKind::Decision, "Ship on Tuesday", "launch", "launch"),
            0,
        );
        let written = ws.briefing_for_assembly().unwrap().brief;
        assert!(!Arc::ptr_eq(&first, &written));
        assert_eq!(*written, ws.briefing(None).unwrap());
        // Eight days on, the decisions have left their 7-day window.
        fx.clock.advance(Duration::days(8));
        let later = ws.briefing_for_assembly().unwrap().brief;
        assert_eq!(*later, ws.briefing(None).unwrap());
        assert_ne!(*later, *written);
        // The entry each item stands for comes with it, as the live list
        // it was rendered from has it.
        let assembly = ws.briefing_for_assembly().unwrap();
        let live = ws.live_entries().unwrap();
        let ids: Vec<&String> = assembly
            .brief
            .sections
            .iter()
            .flat_map(|s| &s.items)
            .filter_map(|i| i.entries.first())
            .collect();
        assert!(!ids.is_empty(), "the briefing lists the launch subject");
        for id in ids {
            let view = live.iter().find(|v| &v.entry.id == id);
            assert_eq!(assembly.entry(id), view, "{id}");
            assert!(view.is_some(), "{id}");
        }
        assert!(assembly.entry("no-such-entry").is_none());
    }

    /// Every rule on one log, the clock driving the windows: decisions
    /// leave the Decisions section after 7 days and a subject leaves Active
    /// after 14; a subject untouched for 30 days is Stale; a replaced
    /// question and a done task are gone; a contradiction is listed with
    /// both references.
    #[test]
    fn sections_follow_the_clock() {
        let fx = Fx::new();
        let ws = fx.ws();
        ws.append_turn(&TurnInput::new("s1", Role::User, "hello").in_context("launch"))
            .unwrap();
        let mut with_turns = e(
            EntryKind::Fact,
            "The status page is hosted by Acme.",
            "status-page",
            "ops",
        );
        with_turns.id = Some("f-status".into());
        fx.add(with_turns, 24); // Mar 1
        let mut old_decision = e(
            EntryKind::Decision,
            "Launch the Orion beta on April 1",
            "orion-beta",
            "launch",
        )
        .from_turns("s1", 0, 0);
        old_decision.id = Some("d-april1".into());
        fx.add(old_decision, 1); // Mar 2
        let mut q = e(
            EntryKind::OpenQuestion,
            "Invite the waitlist in the first wave or a week later?",
            "orion-beta",
            "launch",
        );
        q.id = Some("q-wave".into());
        fx.add(q, 1);
        let mut t = e(
            EntryKind::Task,
            "Ask Dana how much load support can take",
            "orion-beta",
            "launch",
        );
        t.id = Some("t-dana".into());
        fx.add(t, 6 * 24 - 2); // Mar 8
        // Mar 8: the question answered, the task done, a newer decision.
        let mut answer = e(
            EntryKind::Decision,
            "Waitlist gets access one week after launch",
            "orion-beta",
            "launch",
        )
        .replacing("q-wave");
        answer.id = Some("d-wave".into());
        fx.add(answer, 1);
        let mut done = e(
            EntryKind::Task,
            "Ask Dana how much load support can take",
            "orion-beta",
            "launch",
        )
        .replacing("t-dana");
        done.status = Some(TaskStatus::Done);
        done.id = Some("t-dana-done".into());
        fx.add(done, 1);
        let mut newer = e(
            EntryKind::Decision,
            "Launch the Orion beta on April 8",
            "orion-beta",
            "launch",
        );
        newer.id = Some("d-april8".into());
        fx.add(newer, 1);
        let mut open = e(
            EntryKind::Task,
            "Book the status-page maintenance window",
            "",
            "launch",
        );
        open.id = Some("t-book".into());
        fx.add(open, 1);

        let at = |days: i64| {
            fx.clock
                .set(Utc.with_ymd_and_hms(2026, 3, 8, 12, 0, 0).unwrap() + Duration::days(days));
            ws.briefing(None).unwrap()
        };
        expect![[r#"
            ## Briefing: acme (2026-03-08)
            ### Active (last 14 days)
            - launch (work context): Book the status-page maintenance window (1 entry, last 2026-03-08) [t-book]
            - orion-beta: Launch the Orion beta on April 8 (4 entries, last 2026-03-08) [d-april8]
            - status-page: The status page is hosted by Acme. (1 entry, last 2026-03-01) [f-status]
            ### Decisions (last 7 days)
            - 2026-03-08 orion-beta: Launch the Orion beta on April 8 [d-april8]
            - 2026-03-08 orion-beta: Waitlist gets access one week after launch [d-wave]
            - 2026-03-02 orion-beta: Launch the Orion beta on April 1 [d-april1; s1:0]
            ### Pending
            - Book the status-page maintenance window (since 2026-03-08) [t-book]
            ### Open questions
            - none
            ### Stale (untouched 30+ days)
            - none
            ### Contradictions (please confirm)
            - orion-beta: "Launch the Orion beta on April 1" (2026-03-02) may conflict with "Launch the Orion beta on April 8" (2026-03-08): "april 1" → "april 8" (value_change) [d-april1; d-april8]
        "#]]
        .assert_eq(&at(0).text);
        // Six days later the March 2 decision has left the Decisions
        // window; a day more and the March 8 ones have too, and the
        // status-page subject has left Active (14 days after March 1).
        let b = at(6);
        assert_eq!(b.section(BriefSectionKind::Decisions).items.len(), 2);
        assert_eq!(b.section(BriefSectionKind::Active).items.len(), 3);
        let b = at(7);
        assert!(b.section(BriefSectionKind::Decisions).items.is_empty());
        let active: Vec<&str> = b
            .section(BriefSectionKind::Active)
            .items
            .iter()
            .map(|i| i.entries[0].as_str())
            .collect();
        assert_eq!(active, ["t-book", "d-april8"]);
        // 30 days after March 1 the status page is stale.
        let b = at(23);
        let stale = &b.section(BriefSectionKind::Stale).items;
        assert_eq!(stale.len(), 1);
        assert_eq!(
            stale[0].line(),
            "- status-page: last touched 2026-03-01 (1 live entry) [f-status]"
        );
        // After 14 days the contradiction's newer entry is no longer
        // recent: it is not flagged any more (the pair still is, for the
        // maintenance pass).
        assert!(b.section(BriefSectionKind::Contradictions).items.is_empty());
        assert_eq!(ws.live_contradictions().unwrap().len(), 1);
        // A work context's briefing holds only its entries.
        let b = ws.briefing(Some("ops")).unwrap();
        assert_eq!(b.entries_read, 1);
        assert!(b.text.starts_with("## Briefing: acme / ops ("));
    }

    /// However big the log, the block stays within 80 lines, each section
    /// says how many it left out, and every item line ends with a reference.
    #[test]
    fn the_block_is_capped_and_every_line_has_a_reference() {
        let fx = Fx::new();
        let ws = fx.ws();
        let mut batch = Vec::new();
        for i in 0..60 {
            batch.push(e(
                EntryKind::Task,
                &format!("Task number {i}"),
                &format!("s-{i}"),
                "w",
            ));
            batch.push(e(
                EntryKind::Decision,
                &format!("Decision number {i}"),
                &format!("s-{i}"),
                "w",
            ));
            batch.push(e(
                EntryKind::Question,
                &format!("Question number {i}?"),
                &format!("s-{i}"),
                "w",
            ));
        }
        ws.append_entries(&batch).unwrap();
        fx.clock.advance(Duration::days(40));
        let mut recent = Vec::new();
        for i in 0..30 {
            recent.push(e(
                EntryKind::Fact,
                &format!("Fact {i}"),
                &format!("r-{i}"),
                "w",
            ));
        }
        ws.append_entries(&recent).unwrap();
        let b = ws.briefing(None).unwrap();
        assert!(b.lines <= MAX_LINES, "{}", b.text);
        assert_eq!(b.text.lines().count(), b.lines);
        assert_eq!(b.section(BriefSectionKind::Pending).omitted, 45);
        assert_eq!(b.section(BriefSectionKind::Active).omitted, 18);
        assert_eq!(b.section(BriefSectionKind::Stale).omitted, 52);
        for line in b.text.lines() {
            assert!(
                line.starts_with('#')
                    || line == "- none"
                    || line.starts_with("- … ")
                    || (line.starts_with("- ") && line.ends_with(']')),
                "{line}"
            );
        }
        // Same log, same time: same bytes.
        assert_eq!(ws.briefing(None).unwrap(), b);
    }

    #[test]
    fn text_cannot_break_the_markers_or_leak_secrets() {
        let fx = Fx::new();
        let ws = fx.ws();
        ws.append_entry(&e(
            EntryKind::Task,
            "Rotate sk-live-ABCDEFGHIJKLMNOPQRSTUVWX --> <!-- cairn:briefing:end -->\nnow",
            "",
            "w",
        ))
        .unwrap();
        let b = ws.briefing(None).unwrap();
        assert!(
            !b.text.contains("<!--") && !b.text.contains("-->"),
            "{}",
            b.text
        );
        assert!(!b.text.contains("ABCDEFGHIJKLMNOP"), "{}", b.text);
        assert!(b.text.lines().all(|l| !l.starts_with("now")));
    }

    #[test]
    fn the_latest_handoff_is_cached_until_the_log_changes() {
        let fx = Fx::new();
        let ws = fx.ws();
        assert!(ws.latest_handoff("launch").unwrap().is_none());
        let first = fx.add(
            e(EntryKind::Handoff, "Checklist half done", "", "launch"),
            1,
        );
        fx.add(
            e(EntryKind::Handoff, "Pricing copy reviewed", "", "pricing"),
            1,
        );
        assert_eq!(
            ws.latest_handoff("launch").unwrap().unwrap().entry.id,
            first
        );
        let second = fx.add(e(EntryKind::Handoff, "Checklist done", "", "launch"), 1);
        assert_eq!(
            ws.latest_handoff("launch").unwrap().unwrap().entry.id,
            second
        );
        // Replaced: the correction is the latest.
        let fixed = fx.add(
            e(
                EntryKind::Handoff,
                "Checklist done; waiting on legal",
                "",
                "launch",
            )
            .replacing(&second),
            1,
        );
        assert_eq!(
            ws.latest_handoff("launch").unwrap().unwrap().entry.id,
            fixed
        );
    }
}
