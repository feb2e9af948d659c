//! [`Memory`] (the database) and [`Workspace`] (one tenant's view of it):
//! opening, the workspace handle, the one write path ([`Workspace::apply`])
//! and the cached snapshot of the memory log it invalidates.
//!
//! The operations sit beside their types: sessions and turns in
//! [`crate::record`], the memory log in [`crate::log`], subjects in
//! [`crate::subjects`], erasure in [`crate::forget`], pins and assembly in
//! [`crate::assemble`]; each is an `impl Workspace` block there.
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::{Mutex, MutexGuard};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::clock::Clock;
use crate::config::{MemoryConfig, StorageBackend, StorageConfig};
use crate::error::{MemoryError, Result};
use crate::ids::{validate_id, validate_slug};
use crate::live::LiveList;
use crate::log::{Entry, EntryView};
use crate::record::SessionHeads;
use crate::store::{
    Collection, SledStore, StateFamily, StateKey, Store, WorkspaceStore, WriteBatch, WriteOp,
};
use crate::tokens::TokenCounter;

/// The work context used when the host names none.
pub const DEFAULT_WORK_CONTEXT: &str = "default";

const LOCK_STRIPES: usize = 256;

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
    pub(crate) shared: Arc<Shared>,
}

/// A handle on a [`Memory`] that does not keep it open (a long-lived
/// worker holds one, so the memory closes when its users are done).
#[derive(Clone, Debug)]
pub struct WeakMemory(std::sync::Weak<Shared>);

impl WeakMemory {
    /// The memory, while any [`Memory`] handle on it is held.
    pub fn upgrade(&self) -> Option<Memory> {
        self.0.upgrade().map(|shared| Memory { shared })
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) config: MemoryConfig,
    pub(crate) clock: Arc<dyn Clock>,
    tokens: TokenCounter,
    stripes: Vec<Mutex<()>>,
    /// Decoded memory logs, per workspace (see [`LogCache`]).
    logs: Mutex<HashMap<String, Arc<LogCache>>>,
    /// The heads of sessions (metadata, next seq, last turn time), per
    /// workspace (see [`SessionHeads`]).
    heads: Mutex<HashMap<String, Arc<SessionHeads>>>,
    /// This install's secret (see [`Memory::derive_key`]).
    install_key: [u8; 32],
    /// The names entries and views repeat (subjects as written and
    /// canonical, work contexts, gate generations), one allocation each.
    pub(crate) names: crate::name::Names,
    /// Who is told of every write (the search worker; see
    /// [`crate::changes`]).
    pub(crate) watchers: crate::changes::Watchers,
    /// The long-lived workers over this memory and their health (see
    /// [`crate::supervise`]).
    workers: crate::supervise::Workers,
    /// What the layers above keep of a workspace outside it, erased with
    /// the workspace (see [`crate::forget::ErasedWithWorkspace`]).
    pub(crate) erased_with: Vec<Arc<dyn crate::forget::ErasedWithWorkspace>>,
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
pub(crate) struct LogCache {
    epoch: std::sync::atomic::AtomicU64,
    snapshot: Mutex<Option<(u64, Arc<LogSnapshot>)>>,
    /// Held while a snapshot is rebuilt: after a write, the readers that
    /// arrive together wait for one rebuild instead of each scanning and
    /// decoding the whole log (a herd that grew with the log).
    rebuild: Mutex<()>,
    /// Held while the assembly briefing is rendered: an assembly that finds
    /// it busy and holds an earlier rendering uses that one instead of
    /// rendering the same briefing beside it.
    pub(crate) briefing_render: Mutex<()>,
    /// The latest assembly briefing (see `Workspace::briefing_for_assembly`).
    pub(crate) briefing: Mutex<Option<crate::brief::CachedBriefing>>,
    /// How many snapshots were built (for the tests of the above).
    #[cfg(test)]
    pub(crate) rebuilds: std::sync::atomic::AtomicU64,
    /// The topic definitions, on the same scheme with their own epoch
    /// (bumped by a write to a definition).
    topic_epoch: std::sync::atomic::AtomicU64,
    topics: Mutex<Option<(u64, Arc<Vec<crate::topics::Topic>>)>>,
    /// The sessions that have a compaction view, on the same scheme with
    /// their own epoch (bumped by a write to a view): an assembly asks for
    /// its session's view on every call, and most sessions have none, so
    /// the answer "none" costs no store read.
    view_epoch: std::sync::atomic::AtomicU64,
    compacted: Mutex<Option<(u64, Arc<foldhash::HashSet<String>>)>>,
}

#[derive(Debug)]
pub(crate) struct LogSnapshot {
    /// Every entry, in id order ([`LogEntries::all`]).
    pub(crate) entries: LogEntries,
    pub(crate) replacements: Arc<HashMap<String, String>>,
    pub(crate) aliases: Arc<HashMap<String, String>>,
    /// What maintenance decayed, archived and restored.
    pub(crate) lifecycle: Arc<crate::maintain::Lifecycle>,
    /// The subject registry with its aliases, once asked for.
    pub(crate) subjects: std::sync::OnceLock<Arc<Vec<crate::subjects::Subject>>>,
    /// The live entries as of `at`, once asked for.
    pub(crate) live: Mutex<Option<LiveEntries>>,
    /// For a patched snapshot: the live list it can start from.
    pub(crate) base: Mutex<Option<LiveBase>>,
}

/// The entries of a log snapshot, in id order, kept as a few sorted runs
/// that snapshots share (the logarithmic method): a write adds its entries
/// as a new run, merged with the newest runs while those are no more than
/// twice its size, so the runs' sizes at least double from the newest to
/// the oldest. An entry is copied about log₂ of the log's size times over
/// its life, so a write costs its own size times that in pointer copies,
/// not the log's size or its square root (the scheme before kept one list
/// and its additions beside it, and merged the two once the additions
/// passed the square root of the list: a cost per write that grew with the
/// log, paid while the writer held the snapshot's slot). A lookup is a
/// binary search per run, on keys kept inline ([`Run`]); a reader asking
/// for every entry gets the runs merged into one (made once per snapshot).
#[derive(Debug)]
pub(crate) struct LogEntries {
    /// Sorted runs, no id in two, each more than twice the size of the
    /// next (the oldest, largest, first).
    runs: Vec<Arc<Run>>,
    /// The runs merged, once asked for.
    merged: std::sync::OnceLock<Arc<Run>>,
}

impl LogEntries {
    /// The entries of `sorted` (in id order).
    pub(crate) fn new(sorted: Vec<Arc<Entry>>) -> LogEntries {
        LogEntries {
            runs: vec![Arc::new(Run::of(sorted))],
            merged: std::sync::OnceLock::new(),
        }
    }

    /// Every entry, in id order.
    pub(crate) fn all(&self) -> &[Arc<Entry>] {
        match self.runs.as_slice() {
            [] => &[],
            [one] => &one.entries,
            runs => {
                &self
                    .merged
                    .get_or_init(|| {
                        // From the newest (smallest) run up, so each entry
                        // is copied about once per run older than its own.
                        let mut merged = Run::default();
                        for run in runs.iter().rev() {
                            merged = Run::merged(run, &merged);
                        }
                        Arc::new(merged)
                    })
                    .entries
            }
        }
    }

    /// Whether an entry with this id (as key bytes) is here.
    pub(crate) fn contains(&self, id: &[u8]) -> bool {
        self.get(id).is_some()
    }

    /// The entry with this id (as key bytes).
    pub(crate) fn get(&self, id: &[u8]) -> Option<&Arc<Entry>> {
        let key = Run::key(id);
        self.runs.iter().find_map(|run| run.get(key, id))
    }

    /// These entries and `new` (in id order, none of them here).
    fn with(&self, new: &[Arc<Entry>]) -> LogEntries {
        let mut runs = match self.merged.get() {
            Some(merged) => vec![merged.clone()],
            None => self.runs.clone(),
        };
        let mut run = Run::of(new.to_vec());
        while let Some(last) = runs.last()
            && last.entries.len() <= 2 * run.entries.len()
        {
            run = Run::merged(last, &run);
            runs.pop();
        }
        if !run.entries.is_empty() {
            runs.push(Arc::new(run));
        }
        LogEntries {
            runs,
            merged: std::sync::OnceLock::new(),
        }
    }

    /// How many runs (for the tests).
    #[cfg(test)]
    fn runs(&self) -> usize {
        self.runs.len()
    }
}

/// Entries in id order, with the first sixteen bytes of each id beside
/// them as a number that sorts the same way: a search compares numbers
/// in one array instead of following two pointers per step to an id on
/// the heap (and reads an id only among equal keys).
#[derive(Debug, Default)]
pub(crate) struct Run {
    keys: Vec<u128>,
    entries: Vec<Arc<Entry>>,
}

impl Run {
    /// The key of an id: its first sixteen bytes, big-endian, zero-padded
    /// (a shorter id's padding sorts before any byte, so the keys never
    /// disagree with the ids' order; equal keys are told apart by the ids).
    fn key(id: &[u8]) -> u128 {
        let mut bytes = [0u8; 16];
        let n = id.len().min(16);
        bytes[..n].copy_from_slice(&id[..n]);
        u128::from_be_bytes(bytes)
    }

    /// The run of `sorted` (in id order).
    fn of(sorted: Vec<Arc<Entry>>) -> Run {
        Run {
            keys: sorted.iter().map(|e| Run::key(e.id.as_bytes())).collect(),
            entries: sorted,
        }
    }

    /// The entry with this id (and its key).
    fn get(&self, key: u128, id: &[u8]) -> Option<&Arc<Entry>> {
        let at = self.place_from(0, key, id);
        self.entries.get(at).filter(|e| e.id.as_bytes() == id)
    }

    /// Two runs merged (no id in both). Each entry of the shorter run
    /// finds its place in the longer one by a binary search, and the part
    /// of the longer run before it is copied whole.
    fn merged(a: &Run, b: &Run) -> Run {
        let (long, short) = if a.entries.len() >= b.entries.len() {
            (a, b)
        } else {
            (b, a)
        };
        let n = a.entries.len() + b.entries.len();
        let mut out = Run {
            keys: Vec::with_capacity(n),
            entries: Vec::with_capacity(n),
        };
        let mut from = 0;
        for (&key, e) in short.keys.iter().zip(&short.entries) {
            let to = from + long.place_from(from, key, e.id.as_bytes());
            out.keys.extend_from_slice(&long.keys[from..to]);
            out.entries.extend_from_slice(&long.entries[from..to]);
            out.keys.push(key);
            out.entries.push(Arc::clone(e));
            from = to;
        }
        out.keys.extend_from_slice(&long.keys[from..]);
        out.entries.extend_from_slice(&long.entries[from..]);
        out
    }

    /// Where an entry with this key and id goes (or is) among the entries
    /// from `from` on, counted from there.
    fn place_from(&self, from: usize, key: u128, id: &[u8]) -> usize {
        let keys = &self.keys[from..];
        let mut at = keys.partition_point(|&k| k < key);
        while keys.get(at) == Some(&key)
            && self
                .entries
                .get(from + at)
                .is_some_and(|e| e.id.as_bytes() < id)
        {
            at += 1;
        }
        at
    }
}

/// A live list a patched snapshot starts from instead of judging and
/// sorting the whole log: an earlier snapshot's list, with the entries the
/// patches since added and the ids they replaced.
#[derive(Debug, Clone)]
pub(crate) struct LiveBase {
    pub(crate) at: DateTime<Utc>,
    pub(crate) until: Option<DateTime<Utc>>,
    pub(crate) views: Arc<crate::live::LiveList>,
    /// What is derived from `views`: its lineage (carried over: the
    /// patches only added entries and corrections; see
    /// [`LiveDerived::lineage`]) and its assembly index, when made (the
    /// next list's is patched from it).
    pub(crate) derived: Arc<LiveDerived>,
    pub(crate) added: Vec<Arc<Entry>>,
    pub(crate) replaced: std::collections::HashSet<String>,
}

impl LogSnapshot {
    /// This snapshot with `patch` applied, or `None` when the patch is not
    /// a pure addition to it (an entry or replacement it already holds, an
    /// entry that does not decode): then the log is read again.
    fn patched(&self, patch: &LogPatch, names: &crate::name::Names) -> Option<LogSnapshot> {
        if patch
            .replacements
            .iter()
            .any(|(from, _)| self.replacements.contains_key(from))
        {
            return None;
        }
        let mut added: Vec<Arc<Entry>> = Vec::with_capacity(patch.entries.len());
        let sessions = crate::name::Names::default();
        for (key, value) in &patch.entries {
            let entry = decode_held(key, value, names, &sessions).ok()?;
            if self.entries.contains(key) {
                return None;
            }
            added.push(entry);
        }
        added.sort_by(|a, b| a.id.cmp(&b.id));
        if added.windows(2).any(|w| w[0].id == w[1].id) {
            return None;
        }
        let entries = self.entries.with(&added);
        // The live list to start from: this snapshot's, or the one it
        // started from itself, with this patch's additions. A list being
        // made right now is not waited for: its base is (kept until the
        // list is made).
        let live = self.live.try_lock();
        let base = match live.as_deref().and_then(Option::as_ref) {
            Some(live) => Some(LiveBase {
                at: live.at,
                until: live.until,
                views: live.views.clone(),
                derived: live.derived.clone(),
                added: Vec::new(),
                replaced: std::collections::HashSet::new(),
            }),
            None => self.base.lock().clone(),
        }
        .map(|mut base| {
            base.added.extend(added);
            base.replaced
                .extend(patch.replacements.iter().map(|(from, _)| from.clone()));
            base
        });
        drop(live);
        Some(self.with(entries, patch, base))
    }

    /// A snapshot of these entries, with the patch's replacements and
    /// subjects applied to this one's.
    fn with(&self, entries: LogEntries, patch: &LogPatch, base: Option<LiveBase>) -> LogSnapshot {
        let replacements = if patch.replacements.is_empty() {
            self.replacements.clone()
        } else {
            let mut map = (*self.replacements).clone();
            map.extend(patch.replacements.iter().cloned());
            Arc::new(map)
        };
        let subjects = std::sync::OnceLock::new();
        if !patch.subjects
            && let Some(list) = self.subjects.get()
        {
            let _ = subjects.set(list.clone());
        }
        LogSnapshot {
            entries,
            replacements,
            aliases: self.aliases.clone(),
            lifecycle: self.lifecycle.clone(),
            subjects,
            live: Mutex::new(None),
            base: Mutex::new(base),
        }
    }
}

/// What a write batch adds to a workspace's log when it only adds: new
/// entries, new replacements, new subjects. The cached snapshot is patched
/// with it instead of being read again (a read that grew with the log,
/// after every extraction).
#[derive(Debug, Default)]
pub(crate) struct LogPatch {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    replacements: Vec<(String, String)>,
    /// Whether a subject record was written (the subject list is read again).
    subjects: bool,
}

/// How a write batch changes the log cache.
#[derive(Debug)]
pub(crate) enum LogChange {
    /// It does not touch the log.
    Unchanged,
    /// It only adds (see [`LogPatch`]).
    Adds(LogPatch),
    /// Anything else: deletes, aliases, maintenance marks.
    Other,
}

impl LogChange {
    pub(crate) fn of(batch: &WriteBatch) -> LogChange {
        let mut patch = LogPatch::default();
        let mut touched = false;
        for op in batch.ops() {
            match op {
                WriteOp::Put {
                    collection: Collection::Entries,
                    key,
                    value,
                } => patch.entries.push((key.clone(), value.clone())),
                WriteOp::Put {
                    collection: Collection::Replacements,
                    key,
                    value,
                } => patch.replacements.push((
                    String::from_utf8_lossy(key).into_owned(),
                    String::from_utf8_lossy(value).into_owned(),
                )),
                WriteOp::Put {
                    collection: Collection::Subjects,
                    ..
                } => patch.subjects = true,
                WriteOp::Put { collection, .. } | WriteOp::Delete { collection, .. } => {
                    if in_log(*collection) {
                        return LogChange::Other;
                    }
                    continue;
                }
            }
            touched = true;
        }
        if touched {
            LogChange::Adds(patch)
        } else {
            LogChange::Unchanged
        }
    }
}

#[derive(Debug)]
pub(crate) struct LiveEntries {
    pub(crate) at: DateTime<Utc>,
    /// The first decay time among them: the list is stale from then on.
    pub(crate) until: Option<DateTime<Utc>>,
    pub(crate) views: Arc<crate::live::LiveList>,
    /// What is derived from exactly these entries, computed on first use
    /// and dropped with them (so it changes when the live log does).
    pub(crate) derived: Arc<LiveDerived>,
}

/// Facts about a live list that depend on nothing else: kept beside it.
#[derive(Debug, Default)]
pub(crate) struct LiveDerived {
    /// Contradictions among the live entries.
    pub(crate) contradictions: std::sync::OnceLock<Arc<Vec<crate::contradict::Contradiction>>>,
    /// The entries that can contradict each other, grouped: made on first
    /// use and moved to the list patched from this one, like `brief`.
    pub(crate) contradiction_index:
        parking_lot::Mutex<Option<crate::contradict::ContradictionIndex>>,
    /// Per work context, the entries capture compares new items with: made
    /// on first use and moved to the list patched from this one, like `brief`.
    pub(crate) comparable: parking_lot::Mutex<Option<crate::settle::ComparableIndex>>,
    /// Per entry id, its index into the views.
    pub(crate) by_id: std::sync::OnceLock<HashMap<String, usize>>,
    /// Per (resolved) subject, the indexes of its entries in the views.
    pub(crate) by_subject: std::sync::OnceLock<HashMap<String, Vec<usize>>>,
    /// Per (resolved) subject, how many of its entries each work context
    /// has: made in one pass on first use, or patched from the previous
    /// list's ([`SubjectContexts::patched`]).
    pub(crate) subject_contexts: std::sync::OnceLock<SubjectContexts>,
    /// What assembly reads per work context (continuity records, recent
    /// activity, handoffs) and the facts of tier 3: one pass over the
    /// views makes them all.
    pub(crate) assembly: std::sync::OnceLock<crate::assemble::tiers::AssemblyIndex>,
    /// The live entries grouped for the briefing: made on first use, and
    /// moved to the list patched from this one (patched with it; taken
    /// from this one, which makes its own again if asked).
    pub(crate) brief: parking_lot::Mutex<Option<crate::brief::BriefIndex>>,
    /// This list's number (every list made gets a new one).
    pub(crate) version: u64,
    /// The version of the list this one descends from by patches alone
    /// (entries and corrections added; nothing deleted, renamed, merged,
    /// marked or decayed): its own when it was made from the log.
    pub(crate) lineage: u64,
}

impl LiveDerived {
    /// For a list made from the log: a new version, its own lineage.
    pub(crate) fn new() -> LiveDerived {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let version = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        LiveDerived {
            version,
            lineage: version,
            ..LiveDerived::default()
        }
    }
}

impl LiveDerived {
    /// Where the entry with this id is in `views` (the list this is kept
    /// with), through an index built on first use.
    pub(crate) fn position(&self, views: &LiveList, id: &str) -> Option<usize> {
        self.by_id
            .get_or_init(|| {
                views
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (v.entry.id.clone(), i))
                    .collect()
            })
            .get(id)
            .copied()
    }
}

/// Per subject, how many live entries about it each work context has, and
/// the time of the newest live cross-conversation update about it there (an
/// index kept in a [`LiveDerived`]). The per-subject maps are shared between
/// lists, so a patch copies only those of the subjects it touched.
#[derive(Debug, Default, Clone)]
pub(crate) struct SubjectContexts(HashMap<String, Arc<BTreeMap<String, About>>>);

/// What one work context holds about one subject ([`SubjectContexts`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct About {
    entries: usize,
    /// The newest live `cross_conversation_update`'s time. When that update
    /// leaves the list (replaced, erased), this is cleared rather than
    /// looked for among the older ones: a reader then sees no recent update,
    /// which costs at most one notice more (see `Workspace::latest_updates_about`).
    newest_update: Option<DateTime<Utc>>,
}

impl SubjectContexts {
    /// One pass over `views`.
    pub(crate) fn build(views: &LiveList) -> SubjectContexts {
        let mut index = SubjectContexts::default();
        for v in views {
            index.count(v, true);
        }
        index
    }

    /// The index of `views`, a list patched from `old_views` (whose index
    /// this is): `removed` holds the positions in `old_views` of the
    /// entries the patch replaced, `added` the positions of the new entries
    /// in `views`.
    pub(crate) fn patched(
        &self,
        old_views: &LiveList,
        removed: &[usize],
        views: &LiveList,
        added: &[usize],
    ) -> SubjectContexts {
        let mut index = self.clone();
        for v in removed.iter().filter_map(|&i| old_views.get(i)) {
            index.count(v, false);
        }
        for v in added.iter().filter_map(|&j| views.get(j)) {
            index.count(v, true);
        }
        index
    }

    /// The work contexts with entries about `subject`, in order.
    pub(crate) fn of(&self, subject: &str) -> impl Iterator<Item = &str> {
        self.0
            .get(subject)
            .into_iter()
            .flat_map(|about| about.keys().map(String::as_str))
    }

    /// The work contexts with a live cross-conversation update about
    /// `subject`, each with its newest one's time, in order.
    pub(crate) fn updates_of(&self, subject: &str) -> impl Iterator<Item = (&str, DateTime<Utc>)> {
        self.0.get(subject).into_iter().flat_map(|about| {
            about
                .iter()
                .filter_map(|(wc, a)| Some((wc.as_str(), a.newest_update?)))
        })
    }

    fn count(&mut self, v: &EntryView, add: bool) {
        let Some(subject) = v.subject.as_deref() else {
            return;
        };
        let contexts = match self.0.get_mut(subject) {
            Some(contexts) => Arc::make_mut(contexts),
            None if add => Arc::make_mut(self.0.entry(subject.to_owned()).or_default()),
            None => return,
        };
        let wc = v.entry.work_context.as_str();
        let update = (v.entry.kind == crate::log::EntryKind::CrossConversationUpdate)
            .then_some(v.entry.timestamp);
        if add {
            if !contexts.contains_key(wc) {
                contexts.insert(wc.to_owned(), About::default());
            }
            if let Some(about) = contexts.get_mut(wc) {
                about.entries += 1;
                if update > about.newest_update {
                    about.newest_update = update;
                }
            }
        } else if let Some(about) = contexts.get_mut(wc) {
            about.entries = about.entries.saturating_sub(1);
            if update.is_some() && update >= about.newest_update {
                about.newest_update = None;
            }
            if about.entries == 0 {
                contexts.remove(wc);
            }
        }
        if contexts.is_empty() {
            self.0.remove(subject);
        }
    }
}

/// Where the views with each key are, in list order: an index kept in a
/// [`LiveDerived`] (views without a key are left out).
pub(crate) fn positions_by<'v>(
    views: &'v LiveList,
    key: impl Fn(&'v EntryView) -> Option<&'v str>,
) -> HashMap<String, Vec<usize>> {
    let mut index: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, v) in views.iter().enumerate() {
        if let Some(k) = key(v) {
            push_position(&mut index, k, i);
        }
    }
    index
}

/// Adds position `i` under `key` (the key is copied only when new).
pub(crate) fn push_position(index: &mut HashMap<String, Vec<usize>>, key: &str, i: usize) {
    with_list(index, key, |positions| positions.push(i));
}

/// Runs `f` on the list under `key`, made empty when missing (the key is
/// copied only then).
pub(crate) fn with_list<L: Default>(
    index: &mut HashMap<String, L>,
    key: &str,
    f: impl FnOnce(&mut L),
) {
    match index.get_mut(key) {
        Some(positions) => f(positions),
        None => {
            let mut positions = L::default();
            f(&mut positions);
            index.insert(key.to_owned(), positions);
        }
    }
}

impl LogCache {
    /// The epoch, with the snapshot when it is of that epoch.
    fn current(&self) -> (u64, Option<Arc<LogSnapshot>>) {
        let slot = self.snapshot.lock();
        let epoch = self.epoch.load(std::sync::atomic::Ordering::Acquire);
        let snapshot = match slot.as_ref() {
            Some((at, snapshot)) if *at == epoch => Some(snapshot.clone()),
            _ => None,
        };
        (epoch, snapshot)
    }

    /// Drops the snapshot (and the topic list): the next reader reads the log.
    pub(crate) fn bump(&self) {
        self.changed(None);
        self.bump_topics();
        self.bump_views();
    }

    /// After a write to the log: the snapshot is patched with `patch` when
    /// there is one and it applies, else dropped. The epoch moves under the
    /// snapshot's lock, so a snapshot in the slot is always the epoch's.
    ///
    /// Why patching is safe: the write is applied before this runs, so a
    /// snapshot read from the store meanwhile either has the additions
    /// already (and the patch finds them there and gives up) or not (and
    /// the patch adds them); a reader that read before the write and
    /// stores after it sees the epoch moved and keeps nothing.
    pub(crate) fn changed(&self, patch: Option<(&LogPatch, &crate::name::Names)>) {
        let mut slot = self.snapshot.lock();
        let epoch = self
            .epoch
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            .wrapping_add(1);
        *slot = match (patch, slot.take()) {
            (Some((patch, names)), Some((_, snapshot))) => snapshot
                .patched(patch, names)
                .map(|patched| (epoch, Arc::new(patched))),
            _ => None,
        };
    }

    pub(crate) fn bump_topics(&self) {
        self.topic_epoch
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        *self.topics.lock() = None;
    }

    pub(crate) fn bump_views(&self) {
        self.view_epoch
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        *self.compacted.lock() = None;
    }
}

/// The value in `slot` while `epoch` has not moved since it was made, else
/// `make`'s, kept only when no write moved the epoch meanwhile (a write
/// bumps the epoch after it is applied, so a value made from a read that
/// raced it is used once and not kept).
fn epoch_cached<T>(
    epoch: &std::sync::atomic::AtomicU64,
    slot: &Mutex<Option<(u64, Arc<T>)>>,
    make: impl FnOnce() -> Result<T>,
) -> Result<Arc<T>> {
    let at = epoch.load(std::sync::atomic::Ordering::Acquire);
    if let Some((held, value)) = slot.lock().as_ref()
        && *held == at
    {
        return Ok(value.clone());
    }
    let value = Arc::new(make()?);
    let mut held = slot.lock();
    if epoch.load(std::sync::atomic::Ordering::Acquire) == at {
        *held = Some((at, value.clone()));
    }
    Ok(value)
}

/// Whether a write batch puts or deletes a key of `in_collection` starting
/// with `prefix` (a topic definition, a compaction view).
fn touches(batch: &WriteBatch, in_collection: Collection, prefix: &[u8]) -> bool {
    batch.ops().iter().any(|op| {
        let (WriteOp::Put {
            collection, key, ..
        }
        | WriteOp::Delete { collection, key }) = op;
        *collection == in_collection && key.starts_with(prefix)
    })
}

/// An entry record decoded to be held by the log cache, the names it
/// repeats shared (see [`Entry::share_names`]).
fn decode_held(
    key: &[u8],
    value: &[u8],
    names: &crate::name::Names,
    sessions: &crate::name::Names,
) -> Result<Arc<Entry>> {
    let mut entry: Entry = decode("entry", key, value)?;
    entry.share_names(names, sessions);
    Ok(Arc::new(entry))
}

/// Whether a collection is part of what the log cache holds.
fn in_log(collection: Collection) -> bool {
    matches!(
        collection,
        Collection::Entries
            | Collection::Replacements
            | Collection::SubjectAliases
            | Collection::Subjects
            | Collection::Maintenance
    )
}

impl Shared {
    pub(crate) fn derive_key(&self, context: &str) -> [u8; 32] {
        blake3::derive_key(context, &self.install_key)
    }

    pub(crate) fn log_cache(&self, workspace: &str) -> Arc<LogCache> {
        self.logs
            .lock()
            .entry(workspace.to_owned())
            .or_default()
            .clone()
    }

    pub(crate) fn session_heads(&self, workspace: &str) -> Arc<SessionHeads> {
        self.heads
            .lock()
            .entry(workspace.to_owned())
            .or_default()
            .clone()
    }

    /// Forgets every cached fact about `workspace`: after it was dropped
    /// from the store underneath its handles.
    pub(crate) fn workspace_dropped(&self, workspace: &str) {
        self.log_cache(workspace).bump();
        self.session_heads(workspace).clear();
        self.names.clear();
    }

    pub(crate) fn stripe(&self, workspace: &str, key: &str) -> usize {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        workspace.hash(&mut hasher);
        key.hash(&mut hasher);
        (hasher.finish() as usize) % LOCK_STRIPES
    }

    /// Locks the given stripes in ascending order (no deadlock between callers).
    pub(crate) fn lock_stripes(&self, stripes: BTreeSet<usize>) -> Vec<MutexGuard<'_, ()>> {
        stripes
            .into_iter()
            .map(|i| self.stripes[i].lock())
            .collect()
    }

    /// [`Shared::lock_stripes`] without waiting: `None` (nothing held) when
    /// another caller holds one of them.
    pub(crate) fn try_lock_stripes(
        &self,
        stripes: BTreeSet<usize>,
    ) -> Option<Vec<MutexGuard<'_, ()>>> {
        stripes
            .into_iter()
            .map(|i| self.stripes[i].try_lock())
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
        Memory::open_with(store, config, clock, Vec::new())
    }

    /// [`Memory::open`], with what the layers above keep of a workspace
    /// outside it (the server's access tokens): each is erased with its
    /// workspace, in the erasure's durable step (see
    /// [`ErasedWithWorkspace`](crate::forget::ErasedWithWorkspace)),
    /// including by the recovery of an interrupted erasure that runs here.
    pub fn open_with(
        store: Arc<dyn Store>,
        config: MemoryConfig,
        clock: Arc<dyn Clock>,
        erased_with: Vec<Arc<dyn crate::forget::ErasedWithWorkspace>>,
    ) -> Result<Self> {
        let tokens = TokenCounter::new(&config.tokenizer)?;
        let install_key = install_key(store.as_ref())?;
        let memory = Memory {
            shared: Arc::new(Shared {
                store,
                config,
                clock,
                tokens,
                stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
                logs: Mutex::new(HashMap::new()),
                heads: Mutex::new(HashMap::new()),
                install_key,
                names: crate::name::Names::default(),
                watchers: crate::changes::Watchers::default(),
                workers: crate::supervise::Workers::default(),
                erased_with,
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

    /// Opens memory on the store `storage` selects (see
    /// [`store::open`](crate::store::open)): sled in `dir`, or PostgreSQL.
    pub fn open_storage(
        dir: &Path,
        storage: &StorageConfig,
        config: MemoryConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let store = crate::store::open(storage, dir, config.cache_mb.saturating_mul(1 << 20))?;
        Memory::open(store, config, clock)
    }

    /// The backend that holds this memory's store.
    pub fn backend(&self) -> StorageBackend {
        self.shared.store.backend()
    }

    /// A key for `context` derived from this install's secret (32 random
    /// bytes made when the store is first opened and kept in its
    /// store-wide space): tombstone hashes use one, the policy host's
    /// compile cache another. Another install, or a copy of the cache
    /// without the store, cannot make them.
    pub fn derive_key(&self, context: &str) -> [u8; 32] {
        self.shared.derive_key(context)
    }

    /// A watch told of every write from now on (see [`crate::changes`]).
    pub(crate) fn watch_changes(&self) -> Arc<crate::changes::ChangeWatch> {
        self.shared.watchers.watch()
    }

    /// The configuration in force.
    pub fn config(&self) -> &MemoryConfig {
        &self.shared.config
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// A handle that does not keep this memory open.
    pub fn downgrade(&self) -> WeakMemory {
        WeakMemory(Arc::downgrade(&self.shared))
    }

    /// The long-lived workers over this memory (the search indexer, the
    /// decision writer, the ticker…) and their health: a panic in one of
    /// their passes is caught and counted there ([`crate::supervise`]).
    pub fn workers(&self) -> &crate::supervise::Workers {
        &self.shared.workers
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

    /// A handle on a workspace. The workspace is created by the first write
    /// through the handle (a session, a turn, an entry…); reads through it
    /// find nothing and create nothing, so a failed call (a hook on a
    /// session that does not exist) leaves no workspace behind.
    pub fn workspace(&self, id: &str) -> Result<Workspace> {
        validate_id("workspace id", id)?;
        let store = self.shared.store.workspace(id)?;
        Ok(Workspace {
            id: id.to_owned(),
            store,
            heads: self.shared.session_heads(id),
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

    /// The workspaces this process serves, sorted: all of them, unless it
    /// is a node of a cluster, where only those it holds the lease of
    /// ([`Store::serves`](crate::store::Store::serves)). Background work
    /// (indexing, schedules, maintenance, sweeps) walks these.
    pub fn served_workspaces(&self) -> Result<Vec<String>> {
        let mut all = self.workspaces()?;
        all.retain(|ws| self.shared.store.serves(ws));
        Ok(all)
    }

    /// True when this process may write `workspace` (see
    /// [`Memory::served_workspaces`]).
    pub fn serves(&self, workspace: &str) -> bool {
        self.shared.store.serves(workspace)
    }

    /// The cluster's workspace leases, when this process is a node of one.
    pub fn leases(&self) -> Option<&dyn crate::store::Leases> {
        self.shared.store.leases()
    }

    /// Forgets what this process cached about `workspace` (the decoded log,
    /// topics and session heads): after another node may have written it
    /// (its ownership changed hands), the next read goes to the store.
    pub fn evict(&self, workspace: &str) {
        if let Some(cache) = self.shared.logs.lock().remove(workspace) {
            cache.bump();
            cache.bump_topics();
        }
        // Cleared in place, not removed: every handle on the workspace,
        // old or new, must keep sharing one set of heads, or a write
        // through an old handle would leave a new handle's heads stale.
        if let Some(heads) = self.shared.heads.lock().get(workspace) {
            heads.clear();
        }
    }
}

/// One workspace's memory. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Workspace {
    pub(crate) id: String,
    pub(crate) store: Arc<dyn WorkspaceStore>,
    /// This workspace's session heads, shared by every handle on it.
    pub(crate) heads: Arc<SessionHeads>,
    pub(crate) shared: Arc<Shared>,
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| MemoryError::Corrupt {
        what: "outgoing",
        key: String::new(),
        reason: e.to_string(),
    })
}

pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    key: &[u8],
    value: &[u8],
) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| MemoryError::Corrupt {
        what,
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

pub(crate) fn check_size(what: &'static str, text: &str, limit: usize) -> Result<()> {
    if text.len() > limit {
        return Err(MemoryError::TooLarge {
            what,
            bytes: text.len(),
            limit,
        });
    }
    Ok(())
}

pub(crate) fn check_text(what: &'static str, text: &str, limit: usize) -> Result<()> {
    if text.trim().is_empty() {
        return Err(MemoryError::Empty { what });
    }
    check_size(what, text, limit)
}

pub(crate) fn in_batch<T>(index: usize, result: Result<T>) -> Result<T> {
    result.map_err(|source| MemoryError::InBatch {
        index,
        source: Box::new(source),
    })
}

impl Workspace {
    /// Applies a write batch; the one place this type writes, so the log
    /// cache sees every change to the log.
    pub(crate) fn apply(&self, batch: WriteBatch) -> Result<()> {
        let log = LogChange::of(&batch);
        let topics = touches(
            &batch,
            Collection::Topics,
            crate::store::TopicFamily::Definition.prefix(),
        );
        let views = touches(
            &batch,
            Collection::State,
            StateFamily::CompactionView.prefix(),
        );
        let sessions = crate::record::sessions_touched(&batch);
        let sessions_deleted = batch.ops().iter().any(|op| {
            matches!(
                op,
                WriteOp::Delete {
                    collection: Collection::Sessions,
                    ..
                }
            )
        });
        let watched = self.shared.watchers.changes_of(&batch, &sessions.heads);
        let applied = self.store.apply(batch);
        // Even a failed apply may have changed something underneath (a
        // backend error after the write): the heads are forgotten either way.
        if !sessions.is_empty() {
            self.heads.invalidate(&sessions);
        }
        if sessions_deleted {
            self.heads.forget_count();
        }
        if let Some(changes) = watched {
            self.shared
                .watchers
                .deliver(&self.id, changes, applied.is_err());
        }
        if let Err(error) = applied {
            // What a failed apply left is unknown: read everything again.
            if !matches!(log, LogChange::Unchanged) || topics || views {
                self.shared.log_cache(&self.id).bump();
            }
            return Err(error.into());
        }
        let cache = || self.shared.log_cache(&self.id);
        if views {
            cache().bump_views();
        }
        match &log {
            LogChange::Unchanged => {}
            LogChange::Adds(patch) => cache().changed(Some((patch, &self.shared.names))),
            LogChange::Other => cache().changed(None),
        }
        if topics {
            cache().bump_topics();
        }
        Ok(())
    }

    /// The workspace's topic definitions, from the cache while no write
    /// touched one since they were read (assembly asks on every call).
    pub(crate) fn topic_list(&self) -> Result<Arc<Vec<crate::topics::Topic>>> {
        let cache = self.shared.log_cache(&self.id);
        epoch_cached(&cache.topic_epoch, &cache.topics, || self.topics())
    }

    /// Whether `session` has a compaction view: from the cached set of the
    /// sessions that have one while no write touched a view since it was
    /// read, else from one scan of the views (and cached).
    pub(crate) fn has_compaction_view(&self, session: &str) -> Result<bool> {
        let cache = self.shared.log_cache(&self.id);
        let sessions = epoch_cached(&cache.view_epoch, &cache.compacted, || {
            let views = self
                .store
                .scan_prefix(Collection::State, StateFamily::CompactionView.prefix())?;
            Ok(views
                .into_iter()
                .filter_map(|(key, _)| match StateKey::decode(&key) {
                    Some(StateKey::CompactionView { session }) => Some(session),
                    _ => None,
                })
                .collect())
        })?;
        Ok(sessions.contains(session))
    }

    /// The cached memory log, if no write touched the log since it was
    /// read (else `None`: nothing is read).
    pub(crate) fn cached_log_snapshot(&self) -> Option<Arc<LogSnapshot>> {
        self.shared.log_cache(&self.id).current().1
    }

    /// The memory log as it stands: from the cache while no write touched
    /// the log since it was read, else read (and cached) now.
    pub(crate) fn log_snapshot(&self) -> Result<Arc<LogSnapshot>> {
        let cache = self.shared.log_cache(&self.id);
        if let (_, Some(snapshot)) = cache.current() {
            return Ok(snapshot);
        }
        // One rebuild at a time per workspace; whoever waited for it finds
        // the snapshot made (unless a write came meanwhile).
        let _rebuilding = cache.rebuild.lock();
        let (epoch, snapshot) = cache.current();
        if let Some(snapshot) = snapshot {
            return Ok(snapshot);
        }
        #[cfg(test)]
        cache
            .rebuilds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sessions = crate::name::Names::default();
        let entries = self
            .store
            .scan_prefix(Collection::Entries, b"")?
            .into_iter()
            .map(|(key, value)| decode_held(&key, &value, &self.shared.names, &sessions))
            .collect::<Result<Vec<Arc<Entry>>>>()?;
        let snapshot = Arc::new(LogSnapshot {
            entries: LogEntries::new(entries),
            replacements: Arc::new(self.replacement_map()?),
            aliases: Arc::new(self.alias_map()?),
            lifecycle: Arc::new(self.lifecycle()?),
            subjects: std::sync::OnceLock::new(),
            live: Mutex::new(None),
            base: Mutex::new(None),
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

    /// The digest of a text that readers are shown in place of its plain
    /// BLAKE3 (a turn's `content_hash`, a gate record's): keyed with a key
    /// derived from this install's secret, so it still tells two texts
    /// apart but cannot confirm a guess at a masked secret offline.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// let shown = ws.reader_hash("password: hunter2");
    /// assert_eq!(shown, ws.reader_hash("password: hunter2"));
    /// assert_ne!(shown, cairn_memory::record::content_hash("password: hunter2"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reader_hash(&self, text: &str) -> String {
        let key = self
            .shared
            .derive_key("cairn 2026-12 reader content digest");
        blake3::keyed_hash(&key, text.as_bytes())
            .to_hex()
            .to_string()
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

    pub(crate) fn lock_entries(&self) -> Vec<MutexGuard<'_, ()>> {
        let stripe = self.shared.stripe(&self.id, "\0entries");
        self.shared.lock_stripes(BTreeSet::from([stripe]))
    }

    // ----- state for other subsystems -------------------------------------

    /// Reads a durable state record of another subsystem (actors, indexes).
    #[doc(hidden)]
    pub fn state_get(&self, key: &StateKey) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(Collection::State, &key.encode())?)
    }

    /// The state records of one family, in key order.
    #[doc(hidden)]
    pub fn state_scan(&self, family: StateFamily) -> Result<Vec<(StateKey, Vec<u8>)>> {
        self.store
            .scan_prefix(Collection::State, family.prefix())?
            .into_iter()
            .map(|(k, v)| match StateKey::decode(&k) {
                Some(key) => Ok((key, v)),
                None => Err(MemoryError::Corrupt {
                    what: "state key",
                    key: String::from_utf8_lossy(&k).into_owned(),
                    reason: "not a state key".to_owned(),
                }),
            })
            .collect()
    }

    /// Writes a durable state record of another subsystem; durable when it returns.
    #[doc(hidden)]
    pub fn state_put(&self, key: &StateKey, value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put(Collection::State, key.encode(), value.to_vec());
        self.apply(batch)?;
        Ok(self.shared.store.sync()?)
    }

    /// Writes (or deletes, with `None`) one raw record of any collection,
    /// skipping every rule: for tests that corrupt a store on purpose.
    #[doc(hidden)]
    pub fn raw_write_for_tests(
        &self,
        collection: Collection,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<()> {
        let mut batch = WriteBatch::default();
        match value {
            Some(v) => batch.put(collection, key.to_vec(), v.to_vec()),
            None => batch.delete(collection, key.to_vec()),
        }
        self.apply(batch)?;
        Ok(self.shared.store.sync()?)
    }

    /// Writes and deletes several state records in one atomic, durable batch.
    #[doc(hidden)]
    pub fn state_apply(&self, puts: &[(StateKey, Vec<u8>)], deletes: &[StateKey]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for (key, value) in puts {
            batch.put(Collection::State, key.encode(), value.clone());
        }
        for key in deletes {
            batch.delete(Collection::State, key.encode());
        }
        self.apply(batch)?;
        Ok(self.shared.store.sync()?)
    }
}

/// Where the install secret lives in the store-wide space.
const INSTALL_KEY: &[u8] = b"install-key";

/// This install's secret: read, or made (and made durable) on first open.
fn install_key(store: &dyn Store) -> Result<[u8; 32]> {
    if let Some(bytes) = store.meta_get(INSTALL_KEY)? {
        return <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| MemoryError::Corrupt {
            what: "install key",
            key: "install-key".to_owned(),
            reason: format!("{} bytes, not 32", bytes.len()),
        });
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| MemoryError::Invalid {
        what: "install key",
        reason: format!("no randomness from the operating system: {e}"),
    })?;
    store.meta_put(INSTALL_KEY, &key)?;
    store.sync()?;
    Ok(key)
}

#[cfg(test)]
mod log_entries_tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::LogEntries;
    use crate::log::{Entry, EntryKind};

    /// Ids of two shapes: short ones, and long ones whose first sixteen
    /// bytes are all the same (a run's key ties, and the ids decide).
    fn id(i: u32) -> String {
        if i.is_multiple_of(3) {
            format!("cap-0123456789abcdef-{i:06}")
        } else {
            format!("e{i:06}")
        }
    }

    fn entry(i: u32) -> Arc<Entry> {
        let at = chrono::DateTime::UNIX_EPOCH;
        Arc::new(Entry::bare(
            &id(i),
            EntryKind::Fact,
            "",
            None,
            "default",
            at,
        ))
    }

    proptest! {
        /// However the additions come (batches of any size, reads in
        /// between), the entries are the sorted union, each is found, and
        /// the runs stay about log₂ of the size.
        #[test]
        fn patched_entries_are_the_sorted_union(
            start in proptest::collection::btree_set(0u32..20_000, 0..300),
            batches in proptest::collection::vec(
                (proptest::collection::btree_set(0u32..20_000, 1..40), any::<bool>()),
                0..60,
            ),
        ) {
            let mut want: BTreeSet<u32> = start.clone();
            let mut first: Vec<Arc<Entry>> = start.iter().map(|&i| entry(i)).collect();
            first.sort_by(|a, b| a.id.cmp(&b.id));
            let mut entries = LogEntries::new(first);
            for (batch, read) in batches {
                let mut new: Vec<Arc<Entry>> =
                    batch.iter().filter(|i| !want.contains(i)).map(|&i| entry(i)).collect();
                new.sort_by(|a, b| a.id.cmp(&b.id));
                for e in &new {
                    prop_assert!(!entries.contains(e.id.as_bytes()));
                }
                want.extend(batch);
                entries = entries.with(&new);
                if read {
                    prop_assert_eq!(entries.all().len(), want.len());
                }
            }
            // Each run more than twice the next: about log₂ of the size.
            let bound = (usize::BITS - want.len().leading_zeros()) as usize + 1;
            prop_assert!(entries.runs() <= bound, "{} runs for {} entries", entries.runs(), want.len());
            let ids: Vec<String> = entries.all().iter().map(|e| e.id.clone()).collect();
            let mut expected: Vec<String> = want.iter().map(|&i| id(i)).collect();
            expected.sort();
            prop_assert_eq!(ids, expected);
            for &i in &want {
                let id = id(i);
                prop_assert!(entries.contains(id.as_bytes()), "{} not found", id);
            }
        }
    }
}
