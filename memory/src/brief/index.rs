//! The briefing's index: the live entries grouped the way the sections
//! read them (per thread, and the decisions, open tasks and questions),
//! each group oldest first, so a section's window is a binary search and
//! its newest entries are the group's end.
//!
//! A briefing made from a list groups every live entry; assembly asks for
//! one again and again while the log grows (each new version of the list,
//! each minute of the clock), so that grouping was a pass over the whole
//! log per rendering. The index kept with the live list instead follows
//! the list's patches (an entry added or replaced is put in or taken out of
//! its groups), and a rendering reads a few entries per thread.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::{BriefSectionKind, BriefSettings};
use crate::live::Patched;
use crate::log::{Entry, EntryKind, EntryStatus, EntryView, TaskStatus};

/// What a thread is about: a subject, or a work context for entries
/// without one (in this order: subjects first, each by name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum ThreadKey {
    Subject(Arc<str>),
    Context(crate::log::Name),
}

impl ThreadKey {
    /// The thread of an entry about `subject` (resolved).
    fn of(subject: &Option<Arc<str>>, entry: &Entry) -> ThreadKey {
        match subject {
            Some(s) => ThreadKey::Subject(s.clone()),
            None => ThreadKey::Context(entry.work_context.clone()),
        }
    }
}

/// What the index keeps of a live entry: its view less the status, which
/// is live for every entry here. Half the size of an [`EntryView`] (whose
/// status has room for a replacement's id or an archive run's): the index
/// holds one or two per live entry, 116 MB of views after ten minutes of
/// loadgen (`docs/BENCHMARKS.md`, thirty-fourth pass).
#[derive(Debug, Clone)]
struct Item {
    entry: Arc<Entry>,
    subject: Option<Arc<str>>,
    decay_at: Option<DateTime<Utc>>,
}

impl Item {
    fn of(v: &EntryView) -> Item {
        Item {
            entry: Arc::clone(&v.entry),
            subject: v.subject.clone(),
            decay_at: v.decay_at,
        }
    }

    /// The live view it stands for.
    fn view(&self) -> EntryView {
        EntryView {
            entry: Arc::clone(&self.entry),
            subject: self.subject.clone(),
            status: EntryStatus::Live,
            decay_at: self.decay_at,
        }
    }
}

/// Entries, oldest first (the reverse of the live list's order: a new
/// entry goes at the end).
#[derive(Debug, Default)]
struct Sorted(Vec<Item>);

fn oldest_first(a: &Entry, b: &Entry) -> std::cmp::Ordering {
    b.newest_first(a)
}

impl Sorted {
    fn insert(&mut self, v: Item) {
        let at = self
            .0
            .partition_point(|w| oldest_first(&w.entry, &v.entry).is_lt());
        self.0.insert(at, v);
    }

    /// Takes `entry` out; whether it was here.
    fn remove(&mut self, entry: &Entry) -> bool {
        match self.0.binary_search_by(|w| oldest_first(&w.entry, entry)) {
            Ok(at) => {
                self.0.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// The entries at or after `at`.
    fn since(&self, at: DateTime<Utc>) -> &[Item] {
        &self.0[self.0.partition_point(|w| w.entry.timestamp < at)..]
    }

    /// The newest `n` of `entries`, newest first.
    fn newest(entries: &[Item], n: usize) -> Vec<EntryView> {
        entries.iter().rev().take(n).map(Item::view).collect()
    }
}

#[derive(Debug, Default)]
struct ThreadEntries {
    entries: Sorted,
    /// How many are open loops (open tasks, questions).
    open: usize,
}

/// The live entries of a workspace (or of the scope a briefing is
/// rendered for), grouped for the briefing's sections.
#[derive(Debug, Default)]
pub(crate) struct BriefIndex {
    threads: BTreeMap<ThreadKey, ThreadEntries>,
    decisions: Sorted,
    pending: Sorted,
    questions: Sorted,
    len: usize,
}

/// The list of the three that an entry is in, if any.
fn list_of(entry: &Entry) -> Option<BriefSectionKind> {
    match entry.kind {
        EntryKind::Decision | EntryKind::KeyDecision => Some(BriefSectionKind::Decisions),
        EntryKind::Task if entry.status != Some(TaskStatus::Done) => {
            Some(BriefSectionKind::Pending)
        }
        EntryKind::Question | EntryKind::OpenQuestion => Some(BriefSectionKind::OpenQuestions),
        _ => None,
    }
}

/// An open loop: an open task or a question (the two lists an entry can
/// be in besides the decisions).
fn is_open_loop(entry: &Entry) -> bool {
    matches!(
        list_of(entry),
        Some(BriefSectionKind::Pending | BriefSectionKind::OpenQuestions)
    )
}

impl Patched for BriefIndex {
    /// The index of these entries (any order; those not live are left
    /// out).
    fn of<'a>(entries: impl IntoIterator<Item = &'a EntryView>) -> BriefIndex {
        // Grouped by hash (a borrowed key per entry, no allocation), then
        // each group sorted once.
        let mut grouped: foldhash::HashMap<super::Thread<'a>, Vec<Item>> =
            foldhash::HashMap::default();
        let mut index = BriefIndex::default();
        for v in entries.into_iter().filter(|v| v.is_live()) {
            index.len += 1;
            if let Some(list) = list_of(&v.entry) {
                index.list_mut(list).0.push(Item::of(v));
            }
            grouped
                .entry(super::thread_of(v))
                .or_default()
                .push(Item::of(v));
        }
        for list in [
            &mut index.decisions,
            &mut index.pending,
            &mut index.questions,
        ] {
            list.0
                .sort_unstable_by(|a, b| oldest_first(&a.entry, &b.entry));
        }
        for (_, mut entries) in grouped {
            entries.sort_unstable_by(|a, b| oldest_first(&a.entry, &b.entry));
            let open = entries.iter().filter(|v| is_open_loop(&v.entry)).count();
            let key = ThreadKey::of(&entries[0].subject, &entries[0].entry);
            index.threads.insert(
                key,
                ThreadEntries {
                    entries: Sorted(entries),
                    open,
                },
            );
        }
        index
    }

    /// Follows a patch of the live list: `removed` left it (as the old
    /// list had them), `added` came in. Neither renames nor merges
    /// subjects (a list that does is made anew, and so is its index).
    fn patch<'a>(
        &mut self,
        removed: impl IntoIterator<Item = &'a EntryView>,
        added: impl IntoIterator<Item = &'a EntryView>,
    ) {
        for v in removed.into_iter().filter(|v| v.is_live()) {
            let key = ThreadKey::of(&v.subject, &v.entry);
            let Some(thread) = self.threads.get_mut(&key) else {
                continue;
            };
            if !thread.entries.remove(&v.entry) {
                continue;
            }
            self.len -= 1;
            if is_open_loop(&v.entry) {
                thread.open -= 1;
            }
            if thread.entries.0.is_empty() {
                self.threads.remove(&key);
            }
            if let Some(list) = list_of(&v.entry) {
                self.list_mut(list).remove(&v.entry);
            }
        }
        for v in added.into_iter().filter(|v| v.is_live()) {
            self.len += 1;
            if let Some(list) = list_of(&v.entry) {
                self.list_mut(list).insert(Item::of(v));
            }
            let thread = self
                .threads
                .entry(ThreadKey::of(&v.subject, &v.entry))
                .or_default();
            if is_open_loop(&v.entry) {
                thread.open += 1;
            }
            thread.entries.insert(Item::of(v));
        }
    }
}

impl BriefIndex {
    fn list_mut(&mut self, list: BriefSectionKind) -> &mut Sorted {
        match list {
            BriefSectionKind::Decisions => &mut self.decisions,
            BriefSectionKind::Pending => &mut self.pending,
            _ => &mut self.questions,
        }
    }

    /// What the sections are made from at `now`: a few entries per thread
    /// and per list (copies of their views, so the index can change while
    /// the briefing is written).
    pub(crate) fn digest(&self, now: DateTime<Utc>, settings: &BriefSettings) -> Digest {
        let active_since = now - Duration::days(i64::from(settings.active_days));
        let decisions_since = now - Duration::days(i64::from(settings.decision_days));
        let cap = BriefSectionKind::max_items;
        let threads = self
            .threads
            .values()
            .filter_map(|t| {
                let newest = t.entries.0.last()?;
                let recent = t.entries.since(active_since);
                // The newest recent entry that says something about the
                // subject itself: not a pointer to a summary, an update
                // elsewhere, or a task already done.
                let quoted = recent
                    .iter()
                    .rev()
                    .find(|v| {
                        !matches!(
                            v.entry.kind,
                            EntryKind::SessionSummaryRef | EntryKind::CrossConversationUpdate
                        ) && v.entry.status != Some(TaskStatus::Done)
                    })
                    .or(recent.last());
                Some(ThreadDigest {
                    newest: newest.view(),
                    recent: recent.len(),
                    quoted: quoted.map(Item::view),
                    total: t.entries.0.len(),
                    open: t.open,
                })
            })
            .collect();
        let decisions = self.decisions.since(decisions_since);
        let picked = |entries: &[Item], kind| Picked {
            total: entries.len(),
            first: Sorted::newest(entries, cap(kind)),
        };
        Digest {
            threads,
            decisions: picked(decisions, BriefSectionKind::Decisions),
            pending: picked(&self.pending.0, BriefSectionKind::Pending),
            questions: picked(&self.questions.0, BriefSectionKind::OpenQuestions),
            entries: self.len,
        }
    }
}

/// What a briefing's sections are made from ([`BriefIndex::digest`]).
#[derive(Debug)]
pub(crate) struct Digest {
    /// Every thread, in thread order.
    pub(super) threads: Vec<ThreadDigest>,
    pub(super) decisions: Picked,
    pub(super) pending: Picked,
    pub(super) questions: Picked,
    /// How many live entries the index holds.
    pub(super) entries: usize,
}

/// One thread, as the Active and Stale sections read it.
#[derive(Debug)]
pub(super) struct ThreadDigest {
    pub(super) newest: EntryView,
    /// How many entries are in the Active window.
    pub(super) recent: usize,
    /// The entry an Active line quotes (none: nothing recent).
    pub(super) quoted: Option<EntryView>,
    pub(super) total: usize,
    /// How many are open loops.
    pub(super) open: usize,
}

/// A section's entries: how many, and the first (newest) ones, as many as
/// it shows.
#[derive(Debug)]
pub(super) struct Picked {
    pub(super) total: usize,
    pub(super) first: Vec<EntryView>,
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use proptest::prelude::*;

    use super::*;
    use crate::log::{Entry, EntryStatus};

    fn view(n: usize, minute: i64, kind: EntryKind, done: bool, subject: Option<u8>) -> EntryView {
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap() + Duration::minutes(minute);
        let mut entry = Entry::bare(
            &format!("e{n:04}"),
            kind,
            &format!("entry {n}"),
            None,
            &format!("wc{}", n % 3),
            at,
        );
        if kind == EntryKind::Task {
            entry.status = Some(if done {
                TaskStatus::Done
            } else {
                TaskStatus::Open
            });
        }
        EntryView {
            entry: Arc::new(entry),
            subject: subject.map(|s| Arc::from(format!("s{s}"))),
            status: EntryStatus::Live,
            decay_at: None,
        }
    }

    /// The index as text: every group's ids in order, and the counts.
    fn shape(index: &BriefIndex) -> String {
        let ids = |s: &Sorted| {
            s.0.iter()
                .map(|v| v.entry.id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut out = format!("len {}\n", index.len);
        for (key, t) in &index.threads {
            out.push_str(&format!("{key:?} open {}: {}\n", t.open, ids(&t.entries)));
        }
        out.push_str(&format!(
            "decisions {}\npending {}\nquestions {}\n",
            ids(&index.decisions),
            ids(&index.pending),
            ids(&index.questions)
        ));
        out
    }

    const KINDS: [EntryKind; 6] = [
        EntryKind::Decision,
        EntryKind::Task,
        EntryKind::Question,
        EntryKind::Fact,
        EntryKind::SessionSummaryRef,
        EntryKind::KeyDecision,
    ];

    proptest! {
        /// An index patched entry by entry, in any order of additions and
        /// removals, is the index made from the entries that are left.
        #[test]
        fn patches_keep_the_index_a_grouping_makes(
            entries in prop::collection::vec(
                (0i64..500, 0usize..6, any::<bool>(), prop::option::of(0u8..4)),
                1..60,
            ),
            steps in prop::collection::vec((any::<bool>(), any::<prop::sample::Index>()), 1..80),
        ) {
            let views: Vec<EntryView> = entries
                .iter()
                .enumerate()
                .map(|(n, &(minute, kind, done, subject))| view(n, minute, KINDS[kind], done, subject))
                .collect();
            crate::live::walk_patches(&views, &steps, |index: &BriefIndex, left| {
                prop_assert_eq!(shape(index), shape(&BriefIndex::of(left)));
                Ok(())
            })?;
        }
    }

    /// What the index saves over holding views (see [`Item`]).
    #[test]
    fn an_item_is_half_a_view() {
        let (item, view) = (size_of::<Item>(), size_of::<EntryView>());
        assert!(2 * item <= view, "item {item} bytes, view {view}");
    }

    #[test]
    fn a_digest_reads_the_windows_from_the_newest_end() {
        let views = [
            view(1, 0, EntryKind::Decision, false, Some(1)),
            view(2, 10, EntryKind::Task, true, Some(1)),
            view(3, 20, EntryKind::Task, false, Some(1)),
            view(4, 30, EntryKind::SessionSummaryRef, false, Some(1)),
        ];
        let index = BriefIndex::of(&views);
        let now = views[3].entry.timestamp + Duration::days(1);
        let settings = BriefSettings::default();
        let digest = index.digest(now, &settings);
        assert_eq!(digest.threads.len(), 1);
        let t = &digest.threads[0];
        assert_eq!((t.recent, t.total, t.open), (4, 4, 1));
        // The summary pointer and the done task are passed over.
        assert_eq!(
            t.quoted.as_ref().map(|v| v.entry.id.as_str()),
            Some("e0003")
        );
        assert_eq!(t.newest.entry.id, "e0004");
        assert_eq!(digest.pending.total, 1);
        assert_eq!(digest.decisions.first[0].entry.id, "e0001");
        // Eight days on, the decision is out of its window; the thread is
        // still active.
        let later = index.digest(now + Duration::days(7), &settings);
        assert_eq!(later.decisions.total, 0);
        assert_eq!(later.threads[0].recent, 4);
    }
}
