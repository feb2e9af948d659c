//! The search service: one [`SearchIndex`] per workspace, kept up to date
//! with the durable record by a background worker, off the acknowledgement
//! path.
//!
//! Ingest never waits for indexing. The worker wakes every
//! [`SearchService::POLL`] (or when nudged), reads the turns past the indexed
//! high-water mark of each session written since its last pass and the
//! memory-log entries written since (every write tells it what it touched:
//! `changes.rs`), embeds them in batches and indexes them. A whole pass
//! (every session and entry compared with the index) runs for a cold
//! index, after an erasure, and every [`SearchService::WHOLE_EVERY`].
//! Vectors are persisted in the workspace's state collection
//! ([`StateKey::TurnVector`] for turns, [`StateKey::EntryVector`] for
//! entries), so after a restart the indexes are rebuilt from the record
//! without re-embedding anything that was embedded.
//! Forgotten sessions, entries and subjects are removed from the indexes
//! (and their vectors from the store) before any search answers.
//!
//! Searches leave out entries replaced by a later entry and entries past
//! their kind's time-to-live (judged on the memory's clock) unless the
//! [`SearchFilters`] ask for them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use serde::{Deserialize, Serialize};

use super::{
    DocAttrs, DocSource, Embedder, SearchDoc, SearchFilters, SearchIndex, SearchOptions,
    SearchResult,
};
use crate::changes::{ChangeWatch, WorkspaceChanges};
use crate::reconstruct::{DerivedStore, Findings};
use crate::store::{StateFamily, StateKey};
use crate::{
    DecayConfig, Entry, ForgetTarget, Memory, MemoryError, Provenance, Role, Session, SessionKind,
    Turn, Workspace,
};

/// Turns embedded per model call by the worker.
const BATCH: usize = 256;

/// Indexing progress, for `cairn stats`.
///
/// ```
/// let s = cairn_memory::search::IndexStats::default();
/// assert_eq!(s.backlog, 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IndexStats {
    /// Workspaces with an index.
    pub workspaces: usize,
    /// Turns indexed.
    pub indexed: u64,
    /// Items (turns and entries) with a vector.
    pub vectors: u64,
    /// Turns acknowledged but not indexed yet.
    pub backlog: u64,
    /// Memory-log entries indexed.
    #[serde(default)]
    pub entries: u64,
    /// Memory-log entries stored but not indexed yet.
    #[serde(default)]
    pub entry_backlog: u64,
    /// Whether an embedding model is loaded (false: lexical only).
    pub embeddings: bool,
    /// Items (turns and entries) embedded since start (restart catch-up
    /// reuses stored vectors).
    pub embedded: u64,
    /// Vectors reused from the store since start.
    pub reused: u64,
}

struct WsIndex {
    index: SearchIndex,
    /// Next sequence number to index, per session.
    indexed: HashMap<String, u64>,
    tombstones: usize,
    /// Entries indexed.
    entries: usize,
    /// The worker has finished a whole pass over the workspace since the
    /// service started: everything stored before that pass is searchable.
    warm: bool,
    /// When the last whole pass over the workspace ended (`None`: never,
    /// or a pass failed since, so the next one is whole).
    whole_at: Option<Instant>,
    /// The replacement map and lifecycle marks the index was last told of
    /// (the log snapshot's own: the same pointer means nothing changed).
    /// The replaced set also holds the facts maintenance settled, so it
    /// was told of the marks too.
    replaced_seen: Option<ReplacedSeen>,
    archived_seen: Option<Arc<crate::maintain::Lifecycle>>,
}

/// The replacement map and lifecycle marks a search index was last told of.
type ReplacedSeen = (
    Arc<HashMap<String, String>>,
    Arc<crate::maintain::Lifecycle>,
);

struct Inner {
    memory: Memory,
    embedder: Option<Arc<dyn Embedder>>,
    indexes: RwLock<HashMap<String, Arc<RwLock<WsIndex>>>>,
    counters: Mutex<(u64, u64)>,
    stop: AtomicBool,
    /// [`SearchService::set_refresh`], in milliseconds.
    refresh_ms: AtomicU64,
    /// One indexing pass at a time (worker and explicit catch-ups).
    pass: Mutex<()>,
    wake: (Mutex<bool>, Condvar),
    /// What every write changed since the last pass (see
    /// [`crate::changes`]): a pass reads those sessions and entries, not
    /// every one.
    changes: Arc<ChangeWatch>,
    /// Sessions whose turns a pass looked at, since start (for the tests
    /// of the above).
    #[cfg(test)]
    sessions_read: std::sync::atomic::AtomicUsize,
}

/// Hybrid search over every workspace of a [`Memory`], indexed in the
/// background.
///
/// ```
/// use std::sync::Arc;
/// use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput};
/// use cairn_memory::search::{SearchOptions, SearchService};
///
/// let dir = tempfile::tempdir()?;
/// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
/// memory.workspace("acme")?.append_turn(&TurnInput::new("s1", Role::User, "the deploy key rotated"))?;
/// let search = SearchService::new(memory, None); // lexical only
/// search.catch_up()?; // the worker does this in the background
/// let r = search.search("acme", "deploy key", &SearchOptions::new(3))?;
/// assert_eq!(r.hits[0].id, "s1:0");
/// assert!(r.lexical_fallback);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SearchService {
    inner: Arc<Inner>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for SearchService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchService").finish_non_exhaustive()
    }
}

/// Errors of the service: the store's or the index's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The store failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The index failed.
    #[error(transparent)]
    Search(#[from] super::SearchError),
    /// The service is shutting down: the pass stopped between two batches.
    /// What it had indexed stays; the next start indexes the rest.
    #[error("the search service is shutting down; the indexing pass stopped")]
    Stopped,
}

type Res<T> = std::result::Result<T, ServiceError>;

/// A workspace whose indexing panics (tests of the supervision only).
#[cfg(test)]
pub(crate) static FAULT_IN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The search worker's name in [`cairn_memory::supervise`](crate::supervise).
pub const INDEXER: &str = "search-indexer";

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn vector_key(session: &str, seq: u64) -> StateKey {
    StateKey::TurnVector {
        session: session.to_owned(),
        seq,
    }
}

fn entry_vector_key(id: &str) -> StateKey {
    StateKey::EntryVector {
        entry: id.to_owned(),
    }
}

fn encode(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode(raw: &[u8]) -> Vec<f32> {
    raw.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn date_text(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%-I:%M %P on %-d %B, %Y").to_string()
}

/// The document a turn becomes: id `session:seq`, dated like LoCoMo.
fn turn_doc(t: &Turn, low_trust_session: bool) -> SearchDoc {
    SearchDoc::new(
        &format!("{}:{}", t.session, t.seq),
        &t.session,
        t.seq,
        &t.content,
    )
    .with_date(&date_text(&t.timestamp))
    .with_attrs(DocAttrs {
        source: DocSource::Turn,
        role: Some(t.role),
        work_context: Some(t.work_context.clone()),
        provenance: Some(Provenance {
            session: t.session.as_str().into(),
            from_seq: t.seq,
            to_seq: t.seq,
        }),
        timestamp: Some(t.timestamp),
        low_trust: low_trust_session || t.role == Role::Tool,
        ..DocAttrs::default()
    })
}

/// The text an entry is searched by: its content, then its detail in
/// parentheses.
///
/// ```
/// use cairn_memory::search::entry_text;
/// assert_eq!(entry_text("Ship on April 1", Some("sync needs two weeks")), "Ship on April 1 (sync needs two weeks)");
/// assert_eq!(entry_text("Ship on April 1", None), "Ship on April 1");
/// ```
pub fn entry_text(content: &str, detail: Option<&str>) -> String {
    match detail {
        Some(d) if !d.is_empty() => format!("{content} ({d})"),
        _ => content.to_owned(),
    }
}

/// The document an entry becomes: id = the entry id, alone in its own
/// pseudo-session `entry:<id>` (so turn-neighbour smoothing never mixes it
/// with turns); its text is [`entry_text`].
fn entry_doc(e: &Entry, decay: &DecayConfig, low_trust: bool) -> SearchDoc {
    let text = entry_text(&e.content, e.detail.as_deref());
    SearchDoc::new(&e.id, &format!("entry:{}", e.id), 0, &text)
        .with_date(&date_text(&e.timestamp))
        .with_attrs(DocAttrs {
            source: DocSource::Entry,
            kind: Some(e.kind),
            subject: e.subject.as_deref().map(str::to_owned),
            role: None,
            work_context: Some(e.work_context.to_string()),
            provenance: e.provenance.clone(),
            timestamp: Some(e.timestamp),
            decay_at: decay.decay_at(e.kind, e.timestamp),
            low_trust,
        })
}

impl SearchService {
    /// How often the worker looks for new turns when not nudged.
    pub const POLL: Duration = Duration::from_millis(250);

    /// The default least time from the start of one pass to the start of
    /// the next, however often the worker is nudged
    /// ([`SearchService::set_refresh`]): a pass commits the lexical index,
    /// every commit has a fixed cost and leaves a segment to merge, so under
    /// a stream of writes the index is refreshed at most this often (the
    /// refresh interval of search engines; Elasticsearch's default is also
    /// one second).
    pub const REFRESH: Duration = Duration::from_millis(Self::REFRESH_MS);

    /// [`SearchService::REFRESH`] in milliseconds, as configuration counts it.
    pub const REFRESH_MS: u64 = 1_000;

    /// How often a workspace gets a whole pass (every session and entry
    /// compared with the index) when writes keep naming what they changed:
    /// the net under what no write of this process names (another node's
    /// writes to a shared backend).
    pub const WHOLE_EVERY: Duration = Duration::from_secs(60);

    /// A pass commits as soon as this many additions and removals are
    /// staged (checked after each batch it adds; otherwise it commits once
    /// per workspace: a commit has a fixed cost).
    pub const COMMIT_EVERY: usize = 2_048;

    /// A service over `memory`; `embedder` `None` means lexical only (every
    /// dense or hybrid answer is then flagged as a lexical fallback).
    pub fn new(memory: Memory, embedder: Option<Arc<dyn Embedder>>) -> Self {
        SearchService {
            inner: Arc::new(Inner {
                changes: memory.watch_changes(),
                memory,
                embedder,
                indexes: RwLock::new(HashMap::new()),
                counters: Mutex::new((0, 0)),
                stop: AtomicBool::new(false),
                refresh_ms: AtomicU64::new(SearchService::REFRESH_MS),
                pass: Mutex::new(()),
                wake: (Mutex::new(false), Condvar::new()),
                #[cfg(test)]
                sessions_read: std::sync::atomic::AtomicUsize::new(0),
            }),
            worker: Mutex::new(None),
        }
    }

    /// Starts the background worker (a plain thread: embedding is CPU-bound
    /// and must not hold an async runtime's threads). Idempotent.
    pub fn start(&self) {
        let mut worker = self.worker.lock();
        if worker.is_some() {
            return;
        }
        let inner = Arc::clone(&self.inner);
        *worker = Some(std::thread::spawn(move || {
            // A panic in a pass is caught (and a workspace that panics is
            // set aside for a backoff: `catch_up_locked`), so indexing never
            // stops for every workspace.
            let supervised = inner.memory.workers().worker(INDEXER);
            supervised.set_running(true);
            while !inner.stop.load(Ordering::Acquire) {
                let started = Instant::now();
                match supervised.pass(|| inner.catch_up()) {
                    Some(Ok(()) | Err(ServiceError::Stopped)) | None => {}
                    Some(Err(err)) => {
                        tracing::warn!(error = %err, "search indexing pass failed; retrying")
                    }
                }
                let (lock, cv) = &inner.wake;
                let mut nudged = lock.lock();
                // Nudges during the gap are kept for the pass after it.
                let gap = started + Duration::from_millis(inner.refresh_ms.load(Ordering::Relaxed));
                while !inner.stop.load(Ordering::Acquire) && Instant::now() < gap {
                    cv.wait_until(&mut nudged, gap);
                }
                if !*nudged {
                    cv.wait_for(&mut nudged, SearchService::POLL);
                }
                *nudged = false;
            }
            supervised.set_running(false);
        }));
    }

    /// Sets the least time between the starts of two worker passes (the
    /// refresh interval, default [`SearchService::REFRESH`]): shorter makes
    /// a new turn searchable sooner and costs a commit and a small segment
    /// to merge per workspace per pass. Takes effect from the next pass.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use cairn_memory::{Memory, MemoryConfig, SystemClock};
    /// use cairn_memory::search::SearchService;
    /// let dir = tempfile::tempdir()?;
    /// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let search = SearchService::new(memory, None);
    /// search.set_refresh(Duration::from_millis(200));
    /// assert_eq!(search.refresh(), Duration::from_millis(200));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_refresh(&self, every: Duration) {
        self.inner
            .refresh_ms
            .store(millis(every), Ordering::Relaxed);
    }

    /// The refresh interval in force ([`SearchService::set_refresh`]).
    pub fn refresh(&self) -> Duration {
        Duration::from_millis(self.inner.refresh_ms.load(Ordering::Relaxed))
    }

    /// Wakes the worker (after an ingest).
    pub fn nudge(&self) {
        let (lock, cv) = &self.inner.wake;
        *lock.lock() = true;
        cv.notify_one();
    }

    /// Stops the worker and waits for it.
    pub fn shutdown(&self) {
        self.inner.stop.store(true, Ordering::Release);
        self.nudge();
        if let Some(handle) = self.worker.lock().take() {
            let _ = handle.join();
        }
    }

    /// One indexing pass over every workspace, in the caller's thread.
    pub fn catch_up(&self) -> Res<()> {
        self.inner.catch_up()
    }

    /// Whether an embedding model is loaded.
    pub fn has_embedder(&self) -> bool {
        self.inner.embedder.is_some()
    }

    /// Searches one workspace's turns and memory-log entries; each hit's
    /// [`super::SearchHit::item`] says whether it is a turn (session, seq)
    /// or an entry (id), and its `attrs` carry kind, subject, provenance,
    /// times and the low-trust label.
    ///
    /// Forgotten content is removed first; the backlog (items not indexed
    /// yet) is not waited for. Until the worker's first whole pass over
    /// the workspace (after a start the index is rebuilt from the record),
    /// the result says [`SearchResult::catching_up`]. Replaced entries and
    /// entries past their time-to-live (judged now, on the memory's clock,
    /// unless `options.now` is set) are left out unless `options.filters`
    /// asks for them; a subject filter also matches the subject's old slugs.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn_memory::{EntryInput, EntryKind, Memory, MemoryConfig, SystemClock};
    /// use cairn_memory::search::{ItemRef, SearchFilters, SearchOptions, SearchService};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// let old = ws.append_entry(&EntryInput::new(EntryKind::Decision, "Retries use a fixed delay"))?;
    /// let new = ws.append_entry(
    ///     &EntryInput::new(EntryKind::Decision, "Retries use a queue with backoff").replacing(&old.id),
    /// )?;
    /// let search = SearchService::new(memory, None); // lexical only
    /// search.catch_up()?;
    /// let r = search.search("acme", "retries", &SearchOptions::new(5))?;
    /// assert_eq!(r.hits.len(), 1); // the replaced decision is left out
    /// assert_eq!(r.hits[0].item, ItemRef::Entry { id: new.id.clone() });
    /// let all = SearchFilters { include_replaced: true, ..SearchFilters::default() };
    /// let r = search.search("acme", "retries", &SearchOptions::new(5).filters(all))?;
    /// assert_eq!(r.hits.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn search(
        &self,
        workspace: &str,
        query: &str,
        options: &SearchOptions,
    ) -> Res<SearchResult> {
        let ws = self.inner.memory.existing_workspace(workspace)?;
        let index = self.inner.index_of(workspace)?;
        self.inner.apply_forgets(&ws, &index)?;
        self.inner.sync_replaced(&ws, &index)?;
        self.inner.sync_archived(&ws, &index)?;
        let mut options = options.clone();
        if options.now.is_none() {
            options.now = Some(self.inner.memory.clock().now());
        }
        resolve_subject(&ws, &mut options.filters)?;
        let guard = index.read();
        let mut result = guard.index.search(query, &options)?;
        result.catching_up = !guard.warm;
        Ok(result)
    }

    /// Progress and backlog.
    pub fn stats(&self) -> Res<IndexStats> {
        let mut stats = IndexStats {
            embeddings: self.inner.embedder.is_some(),
            ..IndexStats::default()
        };
        let (embedded, reused) = *self.inner.counters.lock();
        stats.embedded = embedded;
        stats.reused = reused;
        let indexes = self.inner.indexes.read().clone();
        for id in self.inner.memory.served_workspaces()? {
            let ws = self.inner.memory.existing_workspace(&id)?;
            let done: HashMap<String, u64> = indexes
                .get(&id)
                .map(|i| i.read().indexed.clone())
                .unwrap_or_default();
            for listed in ws.sessions(None)? {
                // The listing's `next_seq` is not derived; `session` derives it.
                let s = ws.session(&listed.id)?;
                stats.backlog += s
                    .next_seq
                    .saturating_sub(done.get(&s.id).copied().unwrap_or(0));
            }
            let stored = ws.entry_ids()?;
            stats.entry_backlog += match indexes.get(&id) {
                Some(i) => {
                    let i = i.read();
                    stored.iter().filter(|e| !i.index.contains(e)).count() as u64
                }
                None => stored.len() as u64,
            };
        }
        for index in indexes.values() {
            let i = index.read();
            stats.workspaces += 1;
            stats.indexed += (i.index.len() - i.entries) as u64;
            stats.entries += i.entries as u64;
            stats.vectors += i.index.vectors() as u64;
        }
        Ok(stats)
    }
}

#[cfg(test)]
impl SearchService {
    /// How many lexical segments `workspace`'s index has (0 before its
    /// first pass).
    pub(crate) fn lexical_segments(&self, workspace: &str) -> usize {
        let indexes = self.inner.indexes.read();
        indexes
            .get(workspace)
            .map_or(0, |i| i.read().index.lexical_segments())
    }

    /// How many sessions' turns the passes looked at since start.
    pub(crate) fn sessions_read(&self) -> usize {
        self.inner.sessions_read.load(Ordering::Relaxed)
    }
}

impl Drop for SearchService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    fn index_of(&self, workspace: &str) -> Res<Arc<RwLock<WsIndex>>> {
        if let Some(i) = self.indexes.read().get(workspace) {
            return Ok(Arc::clone(i));
        }
        let mut all = self.indexes.write();
        if let Some(i) = all.get(workspace) {
            return Ok(Arc::clone(i));
        }
        let fresh = Arc::new(RwLock::new(WsIndex {
            index: SearchIndex::new(self.embedder.clone())?,
            indexed: HashMap::new(),
            tombstones: 0,
            entries: 0,
            warm: false,
            whole_at: None,
            replaced_seen: None,
            archived_seen: None,
        }));
        all.insert(workspace.to_owned(), Arc::clone(&fresh));
        Ok(fresh)
    }

    fn catch_up(&self) -> Res<()> {
        let _pass = self.pass.lock();
        self.catch_up_locked()
    }

    /// `Err(Stopped)` once the service is shutting down. Checked before
    /// each batch a pass embeds, so a shutdown waits for one batch (about
    /// a second with the model), not for a backlog of many thousands.
    fn go_on(&self) -> Res<()> {
        if self.stop.load(Ordering::Acquire) {
            Err(ServiceError::Stopped)
        } else {
            Ok(())
        }
    }

    /// One indexing pass; the caller holds `pass`. A workspace no write
    /// touched since the last pass is skipped; one whose sessions and
    /// entries the writes name is passed over for those
    /// ([`pass_over_changes`](Self::pass_over_changes)); the rest (a cold
    /// index, an erasure, [`SearchService::WHOLE_EVERY`] since the last
    /// whole pass) get a whole pass.
    fn catch_up_locked(&self) -> Res<()> {
        let live: HashSet<String> = self.memory.served_workspaces()?.into_iter().collect();
        // A forgotten workspace takes its index with it.
        self.indexes.write().retain(|id, _| live.contains(id));
        let mut changes = self.changes.take();
        let mut failed = None;
        let supervised = self.memory.workers().worker(INDEXER);
        for id in live {
            let changed = changes.remove(&id);
            if supervised.quarantined(&id) {
                // It panicked lately: it waits out its backoff, whole.
                self.changes.ask_whole(&id);
                continue;
            }
            match supervised.item(&id, || self.catch_up_workspace(&id, changed.as_ref())) {
                Some(Ok(())) => {}
                Some(Err(error)) => {
                    // What the changes named may be half done: the next pass
                    // over this workspace is whole; the others go on.
                    self.changes.ask_whole(&id);
                    failed.get_or_insert(error);
                }
                None => {
                    // A panic (caught, counted, the workspace set aside):
                    // its index may be half changed, so it is rebuilt from
                    // the record when the backoff is over; the other
                    // workspaces go on now.
                    self.indexes.write().remove(&id);
                    self.changes.ask_whole(&id);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// One workspace's part of a pass (see `catch_up_locked`).
    fn catch_up_workspace(&self, id: &str, changed: Option<&WorkspaceChanges>) -> Res<()> {
        #[cfg(test)]
        if FAULT_IN
            .lock()
            .is_ok_and(|fault| fault.as_deref() == Some(id))
        {
            panic!("injected fault indexing workspace {id}");
        }
        let ws = self.memory.existing_workspace(id)?;
        let index = self.index_of(id)?;
        let whole = {
            let guard = index.read();
            guard
                .whole_at
                .is_none_or(|at| at.elapsed() >= SearchService::WHOLE_EVERY)
        } || changed.is_some_and(|c| c.other);
        // What the steps add or remove is staged and committed once for
        // the workspace (a commit per session's new turns cost a tantivy
        // segment each); also after a failed step, so what was staged
        // before it is searchable.
        let pass = match changed {
            _ if whole => self.pass_over(&ws, &index),
            Some(changed) => self.pass_over_changes(&ws, &index, changed),
            None => return Ok(()),
        };
        let mut guard = index.write();
        let committed = guard.index.commit();
        pass?;
        committed?;
        if whole {
            guard.whole_at = Some(Instant::now());
            guard.warm = true;
        }
        Ok(())
    }

    /// A workspace's indexing steps, staged (see `catch_up_locked`).
    fn pass_over(&self, ws: &Workspace, index: &RwLock<WsIndex>) -> Res<()> {
        self.apply_forgets(ws, index)?;
        self.index_workspace(ws, index)?;
        self.index_entries(ws, index)?;
        self.sync_replaced(ws, index)?;
        self.sync_archived(ws, index)
    }

    /// The steps for what `changed` names: those sessions' new turns, those
    /// entries, and the replacement map and lifecycle marks when they
    /// moved (compared by pointer: nothing when they did not). Costs what
    /// was written, not what is stored.
    fn pass_over_changes(
        &self,
        ws: &Workspace,
        index: &RwLock<WsIndex>,
        changed: &WorkspaceChanges,
    ) -> Res<()> {
        for session in &changed.sessions {
            match ws.session(session) {
                Ok(s) => self.index_session(ws, index, &s)?,
                // Erased since (its tombstone makes the next pass whole).
                Err(MemoryError::SessionNotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.index_entry_ids(ws, index, &changed.entries)?;
        self.sync_replaced(ws, index)?;
        self.sync_archived(ws, index)
    }

    /// Tells the index which entries are replaced (read from the log, so a
    /// replacement still in the backlog already hides what it replaces),
    /// the facts maintenance settled among them. The log snapshot's map
    /// and marks are shared until a write changes them: the same ones as
    /// last time cost nothing.
    fn sync_replaced(&self, ws: &Workspace, index: &RwLock<WsIndex>) -> Res<()> {
        if index.read().entries == 0 {
            return Ok(());
        }
        let log = ws.log_snapshot()?;
        let (map, lifecycle) = (log.replacements.clone(), log.lifecycle.clone());
        drop(log);
        if index
            .read()
            .replaced_seen
            .as_ref()
            .is_some_and(|(seen, marks)| Arc::ptr_eq(seen, &map) && Arc::ptr_eq(marks, &lifecycle))
        {
            return Ok(());
        }
        let replaced: HashSet<String> = map
            .keys()
            .chain(lifecycle.settled.keys())
            .cloned()
            .collect();
        let mut guard = index.write();
        if !same_set(&guard.index, &replaced) {
            guard.index.set_replaced(replaced);
        }
        guard.replaced_seen = Some((map, lifecycle));
        Ok(())
    }

    /// Tells the index what maintenance archived (read from the log's
    /// lifecycle marks, kept with the log snapshot: the same marks as last
    /// time cost nothing).
    fn sync_archived(&self, ws: &Workspace, index: &RwLock<WsIndex>) -> Res<()> {
        let lifecycle = ws.log_snapshot()?.lifecycle.clone();
        if index
            .read()
            .archived_seen
            .as_ref()
            .is_some_and(|seen| Arc::ptr_eq(seen, &lifecycle))
        {
            return Ok(());
        }
        let entries: HashSet<String> = lifecycle.archived_entries.keys().cloned().collect();
        let sessions: HashMap<String, u64> = lifecycle
            .archived_sessions
            .iter()
            .map(|(s, m)| (s.clone(), m.through_seq))
            .collect();
        let mut guard = index.write();
        let (e, s) = guard.index.archived();
        if *e != entries || *s != sessions {
            guard.index.set_archived(entries, sessions);
        }
        guard.archived_seen = Some(lifecycle);
        Ok(())
    }

    /// Indexes every stored entry the index does not hold yet, in batches.
    fn index_entries(&self, ws: &Workspace, index: &RwLock<WsIndex>) -> Res<()> {
        self.index_entry_ids(ws, index, &ws.entry_ids()?)
    }

    /// Indexes those of the stored entries with these ids the index does
    /// not hold yet (those erased meanwhile are skipped), in batches.
    fn index_entry_ids(&self, ws: &Workspace, index: &RwLock<WsIndex>, ids: &[String]) -> Res<()> {
        let pending: Vec<&String> = {
            let guard = index.read();
            ids.iter().filter(|id| !guard.index.contains(id)).collect()
        };
        let decay = &ws.config().decay;
        let mut kinds: HashMap<String, bool> = HashMap::new();
        for chunk in pending.chunks(BATCH) {
            self.go_on()?;
            let mut docs = Vec::with_capacity(chunk.len());
            let mut keys = Vec::with_capacity(chunk.len());
            for id in chunk {
                // Forgotten between the scan and now: skip.
                let Some(e) = ws.stored_entry(id)? else {
                    continue;
                };
                let low_trust = match &e.provenance {
                    Some(p) => match kinds.get(p.session.as_str()) {
                        Some(l) => *l,
                        None => {
                            let l = match ws.session(&p.session) {
                                Ok(s) => s.kind != SessionKind::Main,
                                Err(MemoryError::SessionNotFound { .. }) => false,
                                Err(e) => return Err(e.into()),
                            };
                            kinds.insert(p.session.to_string(), l);
                            l
                        }
                    },
                    None => false,
                };
                docs.push(entry_doc(&e, decay, low_trust));
                keys.push(entry_vector_key(&e.id));
            }
            let (mut guard, added) = self.add_missing(ws, index, &keys, &docs)?;
            guard.entries += added;
        }
        Ok(())
    }

    /// Removes from the index (and the stored vectors of) every session a
    /// tombstone names that the index has not seen yet.
    fn apply_forgets(&self, ws: &Workspace, index: &RwLock<WsIndex>) -> Res<()> {
        let tombstones = ws.tombstones()?;
        if tombstones.len() == index.read().tombstones {
            return Ok(());
        }
        let mut guard = index.write();
        // A tombstone names its session by a keyed hash: the indexed
        // sessions are hashed the same way to find it.
        let erased: HashSet<&str> = tombstones
            .iter()
            .skip(guard.tombstones)
            .filter(|t| t.target.kind == "session")
            .map(|t| t.target.digest.as_str())
            .collect();
        if !erased.is_empty() {
            let sessions: Vec<String> = guard
                .indexed
                .keys()
                .filter(|s| {
                    let target = ws.tombstone_target(&ForgetTarget::Session((*s).clone()));
                    erased.contains(target.digest.as_str())
                })
                .cloned()
                .collect();
            for session in sessions {
                let upto = guard.indexed.remove(&session).unwrap_or(0);
                let mut keys = Vec::new();
                for seq in 0..upto {
                    guard.index.unstage(&format!("{session}:{seq}"));
                    keys.push(vector_key(&session, seq));
                }
                ws.state_apply(&[], &keys)?;
            }
        }
        // Any erasure (of a session, an entry, a subject) may have removed
        // entries: drop the indexed entries the log no longer holds.
        if guard.entries > 0 {
            let stored: HashSet<String> = ws.entry_ids()?.into_iter().collect();
            let gone: Vec<String> = guard
                .index
                .ids(DocSource::Entry)
                .into_iter()
                .filter(|id| !stored.contains(id))
                .collect();
            let mut keys = Vec::with_capacity(gone.len());
            for id in &gone {
                if guard.index.unstage(id) {
                    guard.entries -= 1;
                }
                keys.push(entry_vector_key(id));
            }
            if !keys.is_empty() {
                ws.state_apply(&[], &keys)?;
            }
        }
        guard.tombstones = tombstones.len();
        Ok(())
    }

    /// Indexes the new turns of every session.
    fn index_workspace(&self, ws: &Workspace, index: &RwLock<WsIndex>) -> Res<()> {
        for listed in ws.sessions(None)? {
            // The listing's `next_seq` is not derived; `session` derives it.
            let s = ws.session(&listed.id)?;
            self.index_session(ws, index, &s)?;
        }
        Ok(())
    }

    /// Indexes the turns of `s` past the indexed high-water mark.
    fn index_session(&self, ws: &Workspace, index: &RwLock<WsIndex>, s: &Session) -> Res<()> {
        #[cfg(test)]
        self.sessions_read.fetch_add(1, Ordering::Relaxed);
        let low_trust = s.kind != SessionKind::Main;
        loop {
            self.go_on()?;
            let from = index.read().indexed.get(&s.id).copied().unwrap_or(0);
            if from >= s.next_seq {
                return Ok(());
            }
            let turns = ws.transcript(&s.id, from, Some(BATCH))?;
            let Some(last) = turns.last().map(|t| t.seq) else {
                return Ok(());
            };
            let docs: Vec<SearchDoc> = turns.iter().map(|t| turn_doc(t, low_trust)).collect();
            let keys: Vec<StateKey> = turns
                .iter()
                .map(|t| vector_key(&t.session, t.seq))
                .collect();
            let (mut guard, _) = self.add_missing(ws, index, &keys, &docs)?;
            guard.indexed.insert(s.id.clone(), last + 1);
        }
    }

    /// Embeds `docs` (when a model is loaded; stored vectors are reused)
    /// and adds those the index does not hold yet. Returns the index, still
    /// locked for writing so the caller records its progress atomically,
    /// and how many documents were added.
    fn add_missing<'i>(
        &self,
        ws: &Workspace,
        index: &'i RwLock<WsIndex>,
        keys: &[StateKey],
        docs: &[SearchDoc],
    ) -> Res<(parking_lot::RwLockWriteGuard<'i, WsIndex>, usize)> {
        let vectors = match &self.embedder {
            Some(_) => self.vectors_for(ws, keys, docs, index)?,
            None => Vec::new(),
        };
        let mut guard = index.write();
        let fresh: Vec<usize> = (0..docs.len())
            .filter(|&i| !guard.index.contains(&docs[i].id))
            .collect();
        let fresh_docs: Vec<SearchDoc> = fresh.iter().map(|&i| docs[i].clone()).collect();
        let fresh_vecs: Vec<Vec<f32>> = fresh
            .iter()
            .filter_map(|&i| vectors.get(i).cloned())
            .collect();
        guard.index.stage_with_vectors(&fresh_docs, &fresh_vecs)?;
        // A long pass (a backlog after a restart) still becomes searchable
        // as it goes.
        if guard.index.pending() >= SearchService::COMMIT_EVERY {
            guard.index.commit()?;
        }
        Ok((guard, fresh_docs.len()))
    }

    /// Stored vectors where they exist; the rest embedded in one batch and
    /// persisted (one atomic write) before they are indexed.
    fn vectors_for(
        &self,
        ws: &Workspace,
        keys: &[StateKey],
        docs: &[SearchDoc],
        index: &RwLock<WsIndex>,
    ) -> Res<Vec<Vec<f32>>> {
        let mut out: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
        let mut missing = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            match ws.state_get(key)? {
                Some(raw) => {
                    out.insert(i, decode(&raw));
                }
                None => missing.push(i),
            }
        }
        let reused = out.len() as u64;
        if !missing.is_empty() {
            let batch: Vec<SearchDoc> = missing.iter().map(|&i| docs[i].clone()).collect();
            let vectors = index.read().index.embed_docs(&batch)?;
            let puts: Vec<(StateKey, Vec<u8>)> = missing
                .iter()
                .zip(&vectors)
                .map(|(&i, v)| (keys[i].clone(), encode(v)))
                .collect();
            ws.state_apply(&puts, &[])?;
            out.extend(missing.iter().copied().zip(vectors));
        }
        let mut c = self.counters.lock();
        c.0 += missing.len() as u64;
        c.1 += reused;
        Ok(out.into_values().collect())
    }
}

/// Whether the index's replaced set already equals `replaced`.
fn same_set(index: &SearchIndex, replaced: &HashSet<String>) -> bool {
    index.replaced_ids() == replaced
}

/// Resolves a subject filter to its canonical slug and collects the old
/// slugs (renamed or merged) that also count.
fn resolve_subject(ws: &Workspace, filters: &mut SearchFilters) -> Res<()> {
    let Some(slug) = filters.subject.clone() else {
        return Ok(());
    };
    let aliases = ws.subject_aliases()?;
    let canonical = aliases.get(&slug).cloned().unwrap_or(slug);
    let mut also: Vec<String> = aliases
        .into_iter()
        .filter(|(_, c)| *c == canonical)
        .map(|(old, _)| old)
        .collect();
    also.sort();
    filters.subject_aliases.extend(also);
    filters.subject = Some(canonical);
    Ok(())
}

/// Smallest cosine between a stored vector and the same text embedded
/// again (or between the live index's copy and the stored one) that counts
/// as the same vector.
const SAME_VECTOR: f32 = 0.999;

fn cosine_of(a: &[f32], b: &[f32]) -> f32 {
    super::vector::cosine(a, b)
}

/// What a stored vector should be: the item's document, if it still exists.
fn doc_for_key(
    ws: &Workspace,
    key: &StateKey,
    main: &HashMap<String, bool>,
) -> Res<Option<SearchDoc>> {
    Ok(match key {
        StateKey::TurnVector { session, seq } => match ws.turn(session, *seq) {
            Ok(Some(t)) => Some(turn_doc(&t, !main.get(session).copied().unwrap_or(true))),
            Ok(None) | Err(MemoryError::SessionNotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        },
        StateKey::EntryVector { entry } => ws
            .stored_entry(entry)?
            .map(|e| entry_doc(&e, &ws.config().decay, false)),
        _ => None,
    })
}

// Reconstruct (see `crate::reconstruct`): the search index and the stored
// vectors rebuilt from the record and compared with the live ones.
impl SearchService {
    /// Checks the stored vectors (orphans, malformed, and with a model:
    /// each embedded again and compared) and the live index of `workspace`
    /// against a scratch index built from the record; with `repair`, deletes
    /// the bad vectors (one batch), drops the live index and rebuilds it
    /// from the record (re-embedding only what has no stored vector).
    ///
    /// The live index is first brought up to the record by one indexing
    /// pass (what any search sees); items written during the check are not
    /// compared.
    pub fn reconstruct(&self, workspace: &str, repair: bool) -> Res<Vec<Findings>> {
        let ws = self.inner.memory.existing_workspace(workspace)?;
        let main: HashMap<String, bool> = ws
            .sessions(None)?
            .into_iter()
            .map(|s| (s.id.clone(), s.kind == SessionKind::Main))
            .collect();
        let mut vectors = Findings::new(DerivedStore::StoredVectors);
        let mut bad: Vec<StateKey> = Vec::new();
        let expected = self.inner.embedder.as_ref().map(|e| e.dimension());
        let mut stored: Vec<(StateKey, Vec<u8>)> = ws.state_scan(StateFamily::TurnVector)?;
        stored.extend(ws.state_scan(StateFamily::EntryVector)?);
        vectors.compared(stored.len());
        let mut to_embed: Vec<(StateKey, SearchDoc, Vec<f32>)> = Vec::new();
        for (key, raw) in stored {
            let Some(doc) = doc_for_key(&ws, &key, &main)? else {
                vectors.differ(
                    key.to_string(),
                    format!("{} bytes", raw.len()),
                    "absent (no such item)",
                );
                bad.push(key);
                continue;
            };
            let v = decode(&raw);
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            let dims_ok = raw.len() % 4 == 0 && expected.is_none_or(|d| d == v.len());
            if !dims_ok || v.is_empty() || !norm.is_finite() || (norm - 1.0).abs() > 1e-3 {
                vectors.differ(
                    key.to_string(),
                    format!("{} bytes, norm {norm}", raw.len()),
                    format!(
                        "a unit vector of {} dimensions",
                        expected.map_or("the model's".to_owned(), |d| d.to_string())
                    ),
                );
                bad.push(key);
                continue;
            }
            if self.inner.embedder.is_some() {
                to_embed.push((key, doc, v));
            }
        }
        if let Some(embedder) = &self.inner.embedder {
            for chunk in to_embed.chunks(BATCH) {
                let texts: Vec<String> = chunk.iter().map(|(_, d, _)| d.dense_text()).collect();
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let fresh = embedder.embed(&refs)?;
                for ((key, _, old), new) in chunk.iter().zip(&fresh) {
                    let c = cosine_of(old, new);
                    if c < SAME_VECTOR {
                        vectors.differ(
                            key.to_string(),
                            format!("a vector at cosine {c:.4} from the text's"),
                            "the text embedded again",
                        );
                        bad.push(key.clone());
                    }
                }
            }
        }
        if repair && !bad.is_empty() {
            ws.state_apply(&[], &bad)?;
            vectors.repaired(bad.len());
            // The live index may hold the bad vectors: rebuild it.
            self.inner.indexes.write().remove(workspace);
        }

        let mut index_findings = Findings::new(DerivedStore::SearchIndex);
        let _pass = self.inner.pass.lock();
        let entry_ids = ws.entry_ids()?;
        if let Err(error) = self.inner.catch_up_locked() {
            index_findings.differ("indexing pass", format!("fails: {error}"), "succeeds");
            return Ok(vec![vectors, index_findings]);
        }
        let index = self.inner.index_of(workspace)?;
        self.compare_index(&ws, &index, &entry_ids, &main, &mut index_findings)?;
        if repair && !index_findings.is_clean() {
            drop(_pass);
            self.inner.indexes.write().remove(workspace);
            self.inner.catch_up()?;
            index_findings.repaired(1);
        }
        Ok(vec![vectors, index_findings])
    }

    /// Compares the live index with one built from the record.
    fn compare_index(
        &self,
        ws: &Workspace,
        index: &RwLock<WsIndex>,
        entry_ids: &[String],
        main: &HashMap<String, bool>,
        f: &mut Findings,
    ) -> Res<()> {
        let live = index.read();
        let mut scratch = SearchIndex::new(self.inner.embedder.clone())?;
        let mut with: (Vec<SearchDoc>, Vec<Vec<f32>>) = (Vec::new(), Vec::new());
        let mut without: Vec<SearchDoc> = Vec::new();
        let mut add = |doc: SearchDoc, key: StateKey| -> Res<()> {
            match (&self.inner.embedder, ws.state_get(&key)?) {
                (Some(_), Some(raw)) => {
                    with.0.push(doc);
                    with.1.push(decode(&raw));
                }
                _ => without.push(doc),
            }
            Ok(())
        };
        for (session, upto) in &live.indexed {
            let low_trust = !main.get(session).copied().unwrap_or(true);
            for t in ws.transcript(session, 0, None)? {
                if t.seq >= *upto {
                    break;
                }
                add(turn_doc(&t, low_trust), vector_key(&t.session, t.seq))?;
            }
        }
        let decay = &ws.config().decay;
        for id in entry_ids {
            let Some(e) = ws.stored_entry(id)? else {
                continue;
            };
            let low_trust = e
                .provenance
                .as_ref()
                .is_some_and(|p| main.get(p.session.as_str()).is_some_and(|m| !*m));
            add(entry_doc(&e, decay, low_trust), entry_vector_key(&e.id))?;
        }
        scratch.add_with_vectors(&with.0, &with.1)?;
        scratch.add_with_vectors(&without, &[])?;
        for source in [DocSource::Turn, DocSource::Entry] {
            let a: std::collections::BTreeSet<String> =
                live.index.ids(source).into_iter().collect();
            let b: std::collections::BTreeSet<String> = scratch.ids(source).into_iter().collect();
            f.compared(a.union(&b).count());
            for id in a.difference(&b) {
                // An entry written after the pass started is not compared.
                if source == DocSource::Entry && ws.stored_entry(id)?.is_some() {
                    continue;
                }
                f.differ(format!("{} {id}", source.as_str()), "indexed", "absent");
            }
            for id in b.difference(&a) {
                f.differ(format!("{} {id}", source.as_str()), "absent", "indexed");
            }
            for id in a.intersection(&b) {
                if live.index.attrs(id) != scratch.attrs(id) {
                    f.differ(
                        format!("{} {id}", source.as_str()),
                        format!("attributes {:?}", live.index.attrs(id)),
                        format!("attributes {:?}", scratch.attrs(id)),
                    );
                    continue;
                }
                let (Some((da, va)), Some((db, vb))) =
                    (live.index.fingerprint(id), scratch.fingerprint(id))
                else {
                    continue;
                };
                if da != db {
                    f.differ(
                        format!("{} {id}", source.as_str()),
                        "other indexed text",
                        "the record's text",
                    );
                }
                match (va, vb) {
                    (Some(x), Some(y)) if cosine_of(x, y) < SAME_VECTOR => f.differ(
                        format!("{} {id}", source.as_str()),
                        "another vector",
                        "the stored vector",
                    ),
                    (Some(_), None) => f.differ(
                        format!("{} {id}", source.as_str()),
                        "a vector",
                        "no stored vector",
                    ),
                    (None, Some(_)) => f.differ(
                        format!("{} {id}", source.as_str()),
                        "no vector",
                        "the stored vector",
                    ),
                    _ => {}
                }
            }
        }
        // Replacement and archive sets, as the log says.
        let indexed: std::collections::HashSet<String> =
            live.index.ids(DocSource::Entry).into_iter().collect();
        let settled = ws.archived()?.settled;
        let replaced: std::collections::BTreeSet<String> = ws
            .replacements()?
            .into_keys()
            .chain(settled.into_keys())
            .filter(|id| indexed.contains(id))
            .collect();
        let live_replaced: std::collections::BTreeSet<String> = live
            .index
            .replaced_ids()
            .iter()
            .filter(|id| indexed.contains(*id))
            .cloned()
            .collect();
        if replaced != live_replaced {
            f.differ(
                "replaced set",
                format!("{live_replaced:?}"),
                format!("{replaced:?}"),
            );
        }
        let lifecycle = ws.archived()?;
        let archived: std::collections::BTreeSet<String> =
            lifecycle.archived_entries.keys().cloned().collect();
        let sessions: BTreeMap<String, u64> = lifecycle
            .archived_sessions
            .iter()
            .map(|(s, m)| (s.clone(), m.through_seq))
            .collect();
        let (le, ls) = live.index.archived();
        let live_archived: std::collections::BTreeSet<String> = le.iter().cloned().collect();
        let live_sessions: BTreeMap<String, u64> =
            ls.iter().map(|(k, v)| (k.clone(), *v)).collect();
        if archived != live_archived || sessions != live_sessions {
            f.differ(
                "archived set",
                format!("{live_archived:?} {live_sessions:?}"),
                format!("{archived:?} {sessions:?}"),
            );
        }
        Ok(())
    }
}
