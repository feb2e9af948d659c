//! The live list: a workspace's live entries, newest first, as assembly,
//! the briefing and capture read them.
//!
//! Assembly asks for the list after every change of the log, so a list is
//! made per change; copying every view each time (two reference counts per
//! view, cold in cache) grew with the log and was most of what made the hot
//! path slow down as a run went on. A [`LiveList`] is made of a small front
//! (the newest entries: those added since the shared part was made, and
//! the shared entries they came before) and a shared back that lists made
//! from one another share; an entry replaced in the back is skipped, not
//! removed. A change rebuilds the front only. The back is sorted runs
//! (each newer than the next): once the front passes `FOLD_AT` entries it
//! becomes the back's newest run, merged with the next runs while they are
//! at most twice its size (the logarithmic method, as the log cache's
//! runs), so an entry is copied about log₂ n times in its life instead of
//! once per √n additions (when a front past √(6n) copied the whole list).
//! Once the skipped entries pass a thirty-second of the list, it is made
//! again in one piece.

use std::collections::HashSet;
use std::sync::Arc;

use crate::log::EntryView;

/// Skipped back entries past which a list is made again in one piece: this
/// many, or one in [`GONE_SHARE`] of the list if more (a fixed number made
/// a list with many replacements copy itself whole every few changes; a
/// skipped entry costs a step of a binary search in [`LiveList::get`]).
const MAX_GONE: usize = 64;
const GONE_SHARE: usize = 32;
/// A front longer than this becomes the back's newest run: a change copies
/// the front, so this bounds a change's copies; a fold copies the front's
/// entries once more and the runs it merges. (Small in the tests, so that
/// their lists fold and merge runs many times.)
const FOLD_AT: usize = if cfg!(test) { 8 } else { 256 };

/// A workspace's live entries, newest first (ties by id): what
/// [`Workspace::live_entries`](crate::Workspace::live_entries) returns.
/// Read it like a slice: [`len`](Self::len), [`get`](Self::get), indexing,
/// [`iter`](Self::iter) (or `for v in &list`).
///
/// ```
/// # use std::sync::Arc;
/// # use cairn_memory::*;
/// # let dir = tempfile::tempdir()?;
/// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
/// let ws = memory.workspace("acme")?;
/// ws.append_entry(&EntryInput::new(EntryKind::Fact, "The API is v2"))?;
/// ws.append_entry(&EntryInput::new(EntryKind::Fact, "Ship on Friday"))?;
/// let live = ws.live_entries()?;
/// assert_eq!(live.len(), 2);
/// assert_eq!(live[0].entry.content, "Ship on Friday");
/// let texts: Vec<&str> = live.iter().map(|v| v.entry.content.as_str()).collect();
/// assert_eq!(texts, ["Ship on Friday", "The API is v2"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct LiveList {
    /// The newest entries, newest first: every one comes before the
    /// entries of `back` this list holds.
    front: Vec<EntryView>,
    /// Older entries, newest first, shared with the lists this one was
    /// made from or will make.
    back: Arc<Back>,
    /// Where this list's part of `back` starts (entries before it were
    /// moved into the front, or replaced).
    start: usize,
    /// Indexes into `back` (at or after `start`) of entries this list
    /// leaves out, ascending.
    gone: Vec<usize>,
    len: usize,
}

impl From<Vec<EntryView>> for LiveList {
    /// A list of these views (newest first).
    fn from(views: Vec<EntryView>) -> Self {
        LiveList {
            len: views.len(),
            front: Vec::new(),
            back: Arc::new(Back::new(vec![(Arc::from(views), 0)])),
            start: 0,
            gone: Vec::new(),
        }
    }
}

impl PartialEq for LiveList {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl PartialEq<Vec<EntryView>> for LiveList {
    fn eq(&self, other: &Vec<EntryView>) -> bool {
        self.len == other.len() && self.iter().eq(other.iter())
    }
}

impl LiveList {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry at `i` (0: the newest).
    pub fn get(&self, i: usize) -> Option<&EntryView> {
        if i < self.front.len() {
            return self.front.get(i);
        }
        // Where the entry would be with nothing left out; then past the
        // left-out entries before it: those whose index, less the left-out
        // ones before them, is at most that (non-decreasing along `gone`,
        // so a binary search finds how many).
        let at = self.start + (i - self.front.len());
        let (mut lo, mut hi) = (0, self.gone.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.gone[mid] - mid <= at {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.back.get(at + lo)
    }

    /// The newest entry.
    pub fn first(&self) -> Option<&EntryView> {
        self.get(0)
    }

    /// The entries, newest first.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            front: self.front.iter(),
            back: self.back.iter_from(self.start),
            at: self.start,
            gone: &self.gone,
            left: self.len,
        }
    }

    /// The entries as one vector (a copy of every view).
    pub fn to_vec(&self) -> Vec<EntryView> {
        self.iter().cloned().collect()
    }

    /// This list with `added` (newest first, none of them here) put in
    /// their places and the entries whose ids `replaced` holds left out;
    /// `found` names, per replaced id, the entry, when the caller knows it
    /// (then it is found by its place in the order instead of by a pass).
    /// With where each old entry went ([`Moves`]).
    pub(crate) fn patched(
        &self,
        added: Vec<EntryView>,
        replaced: &HashSet<String>,
        found: &[Arc<crate::log::Entry>],
    ) -> (LiveList, Moves) {
        let newest_first = |a: &EntryView, b: &EntryView| a.entry.newest_first(&b.entry);
        // The back entries the additions come before or among: they move
        // into the front.
        let mut until = self.start;
        if let Some(oldest) = added.last() {
            while let Some(v) = self.back.get(until)
                && newest_first(v, oldest).is_lt()
            {
                until += 1;
            }
        }
        // The replaced back entries past that, by their place in the order
        // (the back is sorted), else by a pass.
        let mut gone: Vec<usize> = self.gone.iter().copied().filter(|&g| g >= until).collect();
        let mut unmet: HashSet<&str> = replaced.iter().map(String::as_str).collect();
        for e in found {
            if let Some(at) = self.back.find_from(until, e)
                && self.gone.binary_search(&at).is_err()
            {
                gone.push(at);
            }
        }
        // Replaced ids not located above are looked for in the front and
        // the moved part (below) and, failing that, in the back by a pass
        // that stops once all are met.
        for &g in &gone {
            if let Some(v) = self.back.get(g) {
                unmet.remove(v.entry.id.as_str());
            }
        }
        let mut moves = Moves {
            remap: Vec::new(),
            added: Vec::with_capacity(added.len()),
            removed: Vec::new(),
            old_len: self.len,
            new_len: 0,
        };
        let mut front: Vec<EntryView> =
            Vec::with_capacity(self.front.len() + (until - self.start) + added.len());
        let mut added = added.into_iter().peekable();
        let moved = self.front.iter().chain(
            (self.start..until)
                .filter(|i| self.gone.binary_search(i).is_err())
                .filter_map(|i| self.back.get(i)),
        );
        for v in moved {
            if !unmet.is_empty() && replaced.contains(&v.entry.id) {
                unmet.remove(v.entry.id.as_str());
                moves.removed.push(moves.remap.len());
                moves.remap.push(usize::MAX);
                continue;
            }
            while let Some(a) = added.next_if(|a| newest_first(a, v).is_le()) {
                moves.added.push(front.len());
                front.push(a);
            }
            moves.remap.push(front.len());
            front.push(v.clone());
        }
        for a in added {
            moves.added.push(front.len());
            front.push(a);
        }
        if !unmet.is_empty() {
            for (i, v) in (until..).zip(self.back.iter_from(until)) {
                if unmet.is_empty() {
                    break;
                }
                if unmet.remove(v.entry.id.as_str()) && self.gone.binary_search(&i).is_err() {
                    gone.push(i);
                }
            }
        }
        gone.sort_unstable();
        gone.dedup();
        // The rest of the back keeps its order: each entry moves by the
        // front's growth, less the entries left out before it. Past the
        // last entry this patch leaves out, that is the same for all of
        // them: they keep their places counted from the oldest end, and
        // the moves stop there (a patch costs what it changed, not the
        // list's length).
        let last_gone = gone
            .iter()
            .rev()
            .find(|g| self.gone.binary_search(g).is_err())
            .copied();
        let mut out = front.len();
        let mut skip = gone.iter().peekable();
        let mut old_gone = self.gone.iter().filter(|&&g| g >= until).peekable();
        for i in until..self.back.len {
            if last_gone.is_none_or(|last| i > last) {
                break;
            }
            if old_gone.next_if(|&&g| g == i).is_some() {
                skip.next_if(|&&g| g == i);
                continue;
            }
            if skip.next_if(|&&g| g == i).is_some() {
                moves.removed.push(moves.remap.len());
                moves.remap.push(usize::MAX);
                continue;
            }
            moves.remap.push(out);
            out += 1;
        }
        moves.new_len = self.len + moves.added.len() - moves.removed.len();
        let list = LiveList {
            len: moves.new_len,
            front,
            back: self.back.clone(),
            start: until,
            gone,
        };
        let list = if list.gone.len() > MAX_GONE.max(list.len / GONE_SHARE) {
            LiveList::from(list.to_vec())
        } else if list.front.len() > FOLD_AT {
            list.folded()
        } else {
            list
        };
        (list, moves)
    }

    /// This list with its front made the back's newest run, merged with
    /// the runs after it while each is at most twice what is gathered (the
    /// entries this list skips are dropped from what is copied); the other
    /// runs are shared as they are. The entries keep their places.
    fn folded(self) -> LiveList {
        let LiveList {
            front,
            back,
            start,
            gone,
            len,
        } = self;
        let mut run = front;
        let mut skip = gone.into_iter().peekable();
        // `at`: the back index of the next entry not gathered; `r`: its run.
        let mut at = start;
        let mut r = back.run_of(start);
        while let Some((entries, from)) = back.runs.get(r) {
            let end = back.starts[r] + entries.len() - from;
            if end - at > 2 * run.len() {
                break;
            }
            let rest = entries
                .get(from + at - back.starts[r]..)
                .unwrap_or_default();
            for (i, v) in (at..).zip(rest) {
                if skip.next_if(|&g| g == i).is_none() {
                    run.push(v.clone());
                }
            }
            at = end;
            r += 1;
        }
        let gathered = run.len();
        let mut runs = Vec::with_capacity(back.runs.len() + 1 - r);
        runs.push((Arc::from(run), 0));
        if let Some((entries, from)) = back.runs.get(r) {
            runs.push((entries.clone(), from + at - back.starts[r]));
            runs.extend(back.runs.iter().skip(r + 1).cloned());
        }
        LiveList {
            len,
            front: Vec::new(),
            back: Arc::new(Back::new(runs)),
            start: 0,
            gone: skip.map(|g| g - at + gathered).collect(),
        }
    }
}

/// The shared back of live lists: sorted runs of entries, newest first,
/// each newer than the next, read as one sequence.
#[derive(Debug, Default)]
struct Back {
    /// Each run, with where its part starts (the entries before that had
    /// moved into a front when this back was made).
    runs: Vec<(Arc<[EntryView]>, usize)>,
    /// The back index of each run's first entry (of its part).
    starts: Vec<usize>,
    len: usize,
}

impl Back {
    /// The back of these runs (empty parts left out).
    fn new(mut runs: Vec<(Arc<[EntryView]>, usize)>) -> Back {
        runs.retain(|(entries, from)| entries.len() > *from);
        let mut starts = Vec::with_capacity(runs.len());
        let mut len = 0;
        for (entries, from) in &runs {
            starts.push(len);
            len += entries.len() - from;
        }
        Back { runs, starts, len }
    }

    /// The run that holds back index `i` (the run count past the end).
    fn run_of(&self, i: usize) -> usize {
        if i >= self.len {
            return self.runs.len();
        }
        self.starts.partition_point(|&s| s <= i).saturating_sub(1)
    }

    /// The entry at back index `i`.
    fn get(&self, i: usize) -> Option<&EntryView> {
        let r = self.run_of(i);
        let (entries, from) = self.runs.get(r)?;
        entries.get(from + i - self.starts[r])
    }

    /// The entries from back index `i` on.
    fn iter_from(&self, i: usize) -> BackIter<'_> {
        let r = self.run_of(i);
        let part = match self.runs.get(r) {
            Some((entries, from)) => entries.get(from + i - self.starts[r]..),
            None => None,
        };
        BackIter {
            runs: self.runs.get(r + 1..).unwrap_or_default().iter(),
            part: part.unwrap_or_default().iter(),
        }
    }

    /// The back index, at or after `from`, of the entry `e` (by its place
    /// in the order: a binary search).
    fn find_from(&self, from: usize, e: &crate::log::Entry) -> Option<usize> {
        let (mut lo, mut hi) = (from, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let v = self.get(mid)?;
            match v.entry.newest_first(e) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return (v.entry.id == e.id).then_some(mid),
            }
        }
        None
    }
}

/// The entries of a [`Back`] from some index on.
#[derive(Debug, Clone)]
struct BackIter<'a> {
    runs: std::slice::Iter<'a, (Arc<[EntryView]>, usize)>,
    part: std::slice::Iter<'a, EntryView>,
}

impl<'a> Iterator for BackIter<'a> {
    type Item = &'a EntryView;

    fn next(&mut self) -> Option<&'a EntryView> {
        loop {
            if let Some(v) = self.part.next() {
                return Some(v);
            }
            let (entries, from) = self.runs.next()?;
            self.part = entries.get(*from..).unwrap_or_default().iter();
        }
    }
}

/// An index of live entries kept beside the live list
/// ([`LiveDerived`](crate::memory::LiveDerived)) and patched with it: the
/// entries a patch removed go out, those it added come in, so a new
/// version of the list costs the index what the change touched.
pub(crate) trait Patched: Default {
    /// Takes `removed` out (as the old list had them) and puts `added` in.
    fn patch<'a>(
        &mut self,
        removed: impl IntoIterator<Item = &'a EntryView>,
        added: impl IntoIterator<Item = &'a EntryView>,
    );

    /// The index of `entries` (any order). Fed to [`Patched::patch`]
    /// oldest first, so each entry goes in at the newest end of its lists
    /// (a live list comes newest first: in that order every entry would be
    /// inserted before all the others, a copy of the list per entry).
    fn of<'a>(entries: impl IntoIterator<Item = &'a EntryView>) -> Self {
        let mut entries: Vec<&EntryView> = entries.into_iter().collect();
        entries.sort_by(|a, b| b.entry.newest_first(&a.entry));
        let mut index = Self::default();
        index.patch([], entries);
        index
    }
}

/// For the property tests of the [`Patched`] indexes: adds and removes
/// `views` one at a time as `steps` say (add or remove, which view), and
/// after each step hands `check` the index and the views present.
#[cfg(test)]
pub(crate) fn walk_patches<I: Patched>(
    views: &[EntryView],
    steps: &[(bool, proptest::sample::Index)],
    mut check: impl FnMut(&I, Vec<&EntryView>) -> Result<(), proptest::test_runner::TestCaseError>,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let mut present = vec![false; views.len()];
    let mut index = I::default();
    for (add, pick) in steps {
        let i = pick.index(views.len());
        if *add && !present[i] {
            present[i] = true;
            index.patch([], [&views[i]]);
        } else if !*add && present[i] {
            present[i] = false;
            index.patch([&views[i]], []);
        }
        let left = views
            .iter()
            .zip(&present)
            .filter(|(_, p)| **p)
            .map(|(v, _)| v);
        check(&index, left.collect())?;
    }
    Ok(())
}

/// Where a patch moved a live list's entries: `remap[i]` is where the old
/// list's entry `i` is in the new one (`usize::MAX`: replaced), for the
/// old entries up to the oldest one that moved other than by the list's
/// growth (the older ones keep their places counted from the oldest end:
/// [`Moves::to`]); `added` the positions of the new entries, ascending,
/// `removed` the old positions of the replaced ones, ascending.
#[derive(Debug)]
pub(crate) struct Moves {
    remap: Vec<usize>,
    pub(crate) added: Vec<usize>,
    pub(crate) removed: Vec<usize>,
    /// The lengths of the old list and the new.
    old_len: usize,
    new_len: usize,
}

impl Moves {
    /// Where the old list's entry `i` is in the new one (`None`: replaced,
    /// or past the old list's end).
    pub(crate) fn to(&self, i: usize) -> Option<usize> {
        match self.remap.get(i) {
            Some(&usize::MAX) => None,
            Some(&j) => Some(j),
            None if i < self.old_len => Some(i + self.new_len - self.old_len),
            None => None,
        }
    }

    /// How many of the old list's oldest entries kept their places counted
    /// from that end: an entry fewer than this many places from it (its
    /// `ord` below this) is where it was (more may be; these surely are).
    pub(crate) fn stable(&self) -> usize {
        self.old_len - self.remap.len()
    }

    /// Where the entry `ord` places from the old list's oldest end is in
    /// the new one, counted the same way (`None`: replaced).
    pub(crate) fn ord_to(&self, ord: usize) -> Option<usize> {
        if ord < self.stable() {
            return Some(ord);
        }
        let i = self.old_len.checked_sub(ord + 1)?;
        let j = self.to(i)?;
        Some(self.new_len - 1 - j)
    }
}

#[cfg(test)]
impl Moves {
    /// The moves of a patch that added `added` entries, newer than all
    /// `old_len` of the list, and replaced none.
    pub(crate) fn appended(old_len: usize, added: usize) -> Moves {
        Moves {
            remap: Vec::new(),
            added: (0..added).collect(),
            removed: Vec::new(),
            old_len,
            new_len: old_len + added,
        }
    }
}

/// The entries of a [`LiveList`], newest first.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    front: std::slice::Iter<'a, EntryView>,
    back: BackIter<'a>,
    /// The index in the back of the next back entry.
    at: usize,
    gone: &'a [usize],
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a EntryView;

    fn next(&mut self) -> Option<&'a EntryView> {
        if let Some(v) = self.front.next() {
            self.left -= 1;
            return Some(v);
        }
        loop {
            let v = self.back.next()?;
            let at = self.at;
            self.at += 1;
            match self.gone.first() {
                Some(&g) if g == at => self.gone = &self.gone[1..],
                _ => {
                    self.left -= 1;
                    return Some(v);
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a LiveList {
    type Item = &'a EntryView;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::ops::Index<usize> for LiveList {
    type Output = EntryView;

    /// The entry at `i`; panics past the end, as a slice does.
    fn index(&self, i: usize) -> &EntryView {
        match self.get(i) {
            Some(v) => v,
            None => panic!("live list index {i} out of range for length {}", self.len),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};
    use proptest::prelude::*;

    use super::*;
    use crate::log::{Entry, EntryKind, EntryStatus};

    fn view(n: usize, minute: i64) -> EntryView {
        let at = Utc
            .timestamp_opt(1_700_000_000, 0)
            .single()
            .unwrap_or_default()
            + Duration::minutes(minute);
        EntryView {
            entry: Arc::new(Entry::bare(
                &format!("e{n:05}"),
                EntryKind::Fact,
                "x",
                None,
                "default",
                at,
            )),
            subject: None,
            status: EntryStatus::Live,
            decay_at: None,
        }
    }

    fn ids(views: impl IntoIterator<Item = EntryView>) -> Vec<String> {
        views.into_iter().map(|v| v.entry.id.to_string()).collect()
    }

    proptest! {
        /// A list patched again and again is the sorted list of what is
        /// left; `get` agrees with `iter`; the moves say where each old
        /// entry went and where the added ones are; and a replaced entry
        /// is found whether or not its caller knew it.
        #[test]
        fn patches_keep_the_list_that_a_sort_makes(
            start in 0usize..400,
            patches in proptest::collection::vec(
                (
                    proptest::collection::vec(-500i64..60, 0..40),
                    proptest::collection::vec(any::<proptest::sample::Index>(), 0..4),
                    any::<bool>(),
                    any::<bool>(),
                ),
                1..30,
            ),
        ) {
            let order = |a: &EntryView, b: &EntryView| a.entry.newest_first(&b.entry);
            let mut next = 0usize;
            let mut all: Vec<EntryView> = (0..start)
                .map(|_| {
                    next += 1;
                    view(next, -(next as i64))
                })
                .collect();
            all.sort_by(order);
            let mut list = LiveList::from(all.clone());
            // Additions are either anywhere in time or mostly the newest
            // (as a log grows: then the back's runs pile up and merge).
            let mut clock = 0;
            for (minutes, replaced, known, recent) in patches {
                if recent {
                    clock += 10;
                }
                let mut added: Vec<EntryView> = minutes
                    .iter()
                    .map(|&m| {
                        next += 1;
                        view(next, if recent { clock + m / 10 } else { m })
                    })
                    .collect();
                added.sort_by(order);
                let gone: HashSet<String> = if all.is_empty() {
                    HashSet::new()
                } else {
                    replaced.iter().map(|i| all[i.index(all.len())].entry.id.to_string()).collect()
                };
                let found: Vec<Arc<Entry>> = if known {
                    all.iter()
                        .filter(|v| gone.contains(v.entry.id.as_str()))
                        .map(|v| v.entry.clone())
                        .collect()
                } else {
                    Vec::new()
                };
                let (patched, moves) = list.patched(added.clone(), &gone, &found);
                let mut expected: Vec<EntryView> = all
                    .iter()
                    .filter(|v| !gone.contains(v.entry.id.as_str()))
                    .cloned()
                    .chain(added.iter().cloned())
                    .collect();
                expected.sort_by(order);
                prop_assert_eq!(ids(patched.iter().cloned()), ids(expected.clone()));
                prop_assert_eq!(patched.len(), expected.len());
                prop_assert_eq!(patched.iter().len(), expected.len());
                for (i, v) in expected.iter().enumerate() {
                    prop_assert_eq!(&patched.get(i).map(|v| v.entry.id.clone()), &Some(v.entry.id.clone()));
                }
                prop_assert!(patched.get(expected.len()).is_none());
                // A fold stops at a run more than twice what it gathered,
                // so the run count stays logarithmic in the back's length.
                let runs = patched.back.runs.len() as u32;
                prop_assert!(runs <= patched.back.len.max(1).ilog2() + 2, "{} runs", runs);
                for (i, v) in all.iter().enumerate() {
                    let id = &v.entry.id;
                    let ord = all.len() - 1 - i;
                    if gone.contains(id.as_str()) {
                        prop_assert_eq!(moves.to(i), None);
                        prop_assert_eq!(moves.ord_to(ord), None);
                    } else {
                        let to = moves.to(i);
                        prop_assert!(to.is_some(), "{} lost", id);
                        let to = to.unwrap_or_default();
                        prop_assert_eq!(&patched[to].entry.id, id);
                        prop_assert_eq!(moves.ord_to(ord), Some(expected.len() - 1 - to));
                    }
                }
                prop_assert_eq!(moves.to(all.len()), None);
                prop_assert_eq!(
                    moves.added.iter().map(|&j| patched[j].entry.id.to_string()).collect::<Vec<_>>(),
                    ids(added.clone())
                );
                prop_assert!(moves.added.windows(2).all(|w| w[0] < w[1]));
                prop_assert_eq!(
                    &moves.removed,
                    &(0..all.len()).filter(|&i| moves.to(i).is_none()).collect::<Vec<_>>()
                );
                all = expected;
                list = patched;
            }
        }
    }
}
