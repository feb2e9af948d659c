//! The durable decision log: every decision the policy host makes (the
//! plugin's, or a world's fail-safe) kept in the store's system namespace
//! `policy-decisions`, queryable by the CLI and the HTTP API.
//!
//! # The write path
//!
//! [`DecisionLog::record`] runs on the thread that made the decision (an
//! actor's arbiter, an HTTP worker) and only clones the record into a
//! bounded queue: no serialisation, no storage call, no lock held across
//! anything slow. One writer thread (`cairn-decisions`) drains the queue in
//! batches of up to [`DecisionLogConfig::batch`] records, writes each batch
//! as one atomic store batch (the records packed into a few chunk values,
//! per-generation counters, the next sequence number, the retention
//! deletes), and makes it durable with the store's group-committed `sync`
//! at most every [`DecisionLogConfig::flush_ms`] milliseconds, or at once
//! when someone waits for it ([`DecisionLog::flush`], [`DecisionLog::query`]).
//! After a write that emptied the queue the writer pauses for [`GATHER`]
//! (at most `flush_ms`) so that the next batch gathers what arrived
//! meanwhile instead of waking it per record: a hot loop of one decision
//! per turn costs one store insert per pause, not one per decision. A
//! writer that is behind (its batch was full) does not pause.
//!
//! **What a crash can lose.** A process crash or power loss loses the
//! records still queued and those written but not yet synced: at most the
//! last `flush_ms` milliseconds of decisions (default 200). Nothing else the
//! store holds depends on them. When the writer falls more than
//! [`DecisionLogConfig::queue`] records behind, further records are dropped
//! and counted ([`DecisionLogStats::dropped`], logged at `warn`), never
//! blocking a decision.
//!
//! # Layout
//!
//! Every record has a sequence number: one decision, or the decisions of
//! one batch (an assembly's, [`DecisionSink::record_batch`]; queries list
//! each decision of it). In collection `State` of the system namespace:
//! `r` + big-endian first sequence number + big-endian `u32` count → a
//! chunk of `count` consecutive records: [`CHUNK_V6`] then their binary
//! form ([`crate::decision_codec`], what the chunk's decisions
//! share written once and each id as its step from the one before: about
//! 47 bytes a batched decision, most of it the inputs digest), or (written
//! before it, still read and scrubbed) [`CHUNK_V3`] then the same form
//! with whole ids (about 60 bytes a decision), [`CHUNK_V2`] then the
//! earlier binary form (every decision with every field, about a third of
//! the JSON's bytes) or [`CHUNK_V1`] then the JSON array of the records,
//! each a JSON array of its decisions;
//! `r` + big-endian sequence number alone → one record as JSON, a decision
//! object or an array of them (the layout before chunks, still read,
//! scrubbed and retired); a scrubbed value is written back in the binary
//! form; `x` + workspace + session + chunk key → nothing, the index a scrub
//! walks ([`INDEX`]), and `y` + chunk → the chunk's pairs ([`PAIRS`]), both
//! written in the chunk's batch and deleted with it; `c` + generation id → that generation's
//! decision and fault counts; `m:first` / `m:next` → the oldest kept and
//! the next sequence number.
//!
//! On a store of its own (sled) a chunk's value is [`CHUNK_AT`] and a
//! pointer into the log's segment files (`<data_dir>/decisions`, see
//! [`crate::decision_files`]), whose frame holds the [`CHUNK_V6`] value:
//! the records taken from the queue wait in the writer until the log
//! syncs, then their bodies are appended and made durable, then the store
//! gets the pointers (a pointer never names bytes a crash can lose). A
//! scrub writes the scrubbed chunks anew and deletes every segment that
//! held one, its other chunks moved first. On PostgreSQL the chunks stay
//! in the database (every node of a cluster reads every node's log).
//! Retention keeps the newest
//! [`DecisionLogConfig::keep`] records; older ones are deleted, a whole
//! chunk at a time, in the batch that pushes them out (so up to one chunk
//! more than `keep` may stay); a segment file goes once every chunk in it
//! is retired and the store has made that durable.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use crate::{DecisionRecord, DecisionSink, SinkError, WorldKind, decision_codec};
use cairn_memory::Memory;
use cairn_memory::store::{Collection, WorkspaceStore, WriteBatch};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::decision_files::{BodyRef, ChunkFiles};
use crate::error::{PolicyError, Result};

/// The system namespace the log lives in.
pub const DECISIONS_NAMESPACE: &str = "policy-decisions";

/// The writer thread's name in the memory's workers
/// ([`cairn_memory::supervise`]).
const WRITER: &str = "decision-writer";

const RECORD: u8 = b'r';
const COUNTER: u8 = b'c';
const FIRST: &[u8] = b"m:first";
const NEXT: &[u8] = b"m:next";
/// Records per query page: one key prefix covers 256 sequence numbers.
const PAGE_SHIFT: u32 = 8;
/// The most old records one batch deletes (a lowered `keep` catches up
/// over several batches).
const MAX_DELETES_PER_BATCH: u64 = 10_000;
/// The first byte of a chunk value written before [`CHUNK_V2`]: the JSON
/// array of its records follows. (A value of the layout before chunks
/// starts with `{` or `[`.)
const CHUNK_V1: u8 = 1;
/// The first byte of a chunk value written before [`CHUNK_V3`]: the earlier
/// binary form of its records follows ([`decision_codec::decode_unshared`]).
const CHUNK_V2: u8 = 2;
/// The first byte of a chunk value written before [`CHUNK_V4`]: the shared
/// binary form with whole ids follows ([`decision_codec::decode_whole_ids`]).
const CHUNK_V3: u8 = 3;
/// The first byte of a chunk value written before [`CHUNK_V6`]: the binary
/// form of its records without their workspaces follows
/// ([`decision_codec::decode_without_workspaces`]).
const CHUNK_V4: u8 = 4;
/// A chunk whose body is in the log's segment files: [`CHUNK_AT`] then
/// where ([`BodyRef`]); the body is a [`CHUNK_V6`] (or, written before it,
/// a [`CHUNK_V4`]) value.
const CHUNK_AT: u8 = 5;
/// The first byte of a chunk value: the binary form of its records, each
/// naming its workspace, follows ([`decision_codec::decode`]).
const CHUNK_V6: u8 = 6;
/// The index of the records by (workspace, session): `x` + workspace + 0 +
/// session + 0 + the chunk's key; the value is empty. A record with no
/// workspace is under the empty workspace, one with no session under the
/// empty session (ids are never empty).
const INDEX: u8 = b'x';
/// A chunk's (workspace, session) pairs: `y` + the chunk's key without its
/// first byte → the pairs (postcard), so that retiring the chunk deletes
/// its index keys without reading the chunk.
const PAIRS: u8 = b'y';
/// The first sequence number whose chunks are in the index: those before
/// (written by a version without it) are found by a scan.
const INDEXED_FROM: &[u8] = b"m:indexed";
/// The most decisions one chunk value holds (a chunk also closes at
/// [`CHUNK_RECORDS`] records).
const CHUNK_DECISIONS: usize = 64;
/// The most records one chunk value holds.
const CHUNK_RECORDS: usize = 16;
/// How long the writer lets records gather after a write (at most
/// `flush_ms`): see the module docs.
pub(crate) const GATHER: Duration = Duration::from_millis(10);

/// Settings of the durable decision log (`[policies.decision_log]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DecisionLogConfig {
    /// How many records to keep (the newest). Default 100,000.
    pub keep: u64,
    /// The longest a written record waits to be made durable, in
    /// milliseconds. Default 200.
    pub flush_ms: u64,
    /// How many records may wait for the writer before new ones are
    /// dropped (and counted). Default 65,536.
    pub queue: usize,
    /// The most records written in one store batch. Default 1,024.
    pub batch: usize,
}

impl Default for DecisionLogConfig {
    fn default() -> Self {
        DecisionLogConfig {
            keep: 100_000,
            flush_ms: 200,
            queue: 65_536,
            batch: 1_024,
        }
    }
}

impl DecisionLogConfig {
    /// Checks the settings; the message names the one that is wrong.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.keep == 0 || self.queue == 0 || self.batch == 0 {
            return Err(
                "policies.decision_log keep, queue and batch must be greater than zero".to_owned(),
            );
        }
        Ok(())
    }
}

/// What to read from the decision log; every filter is optional.
///
/// ```
/// use cairn_policies::DecisionQuery;
///
/// let faults = DecisionQuery { faults_only: true, limit: 20, ..DecisionQuery::default() };
/// assert!(faults.world.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(default, deny_unknown_fields)]
pub struct DecisionQuery {
    /// Only this world (`significance-gate`, `topic-directive`,
    /// `memory-policy`).
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>))]
    pub world: Option<WorldKind>,
    /// Only this plugin (its installed name).
    pub plugin: Option<String>,
    /// Only this generation: its full id (`name@hash#n`) or its number `n`.
    pub generation: Option<String>,
    /// Only decisions that were not the plugin's own answer (a fault, or
    /// an open circuit breaker).
    #[serde(alias = "faults")]
    pub faults_only: bool,
    /// At most this many records, newest first. Default 50, at most 10,000.
    pub limit: usize,
}

impl Default for DecisionQuery {
    fn default() -> Self {
        DecisionQuery {
            world: None,
            plugin: None,
            generation: None,
            faults_only: false,
            limit: 50,
        }
    }
}

/// The most records one query returns.
pub const MAX_QUERY_LIMIT: usize = 10_000;

impl DecisionQuery {
    fn matches(&self, record: &DecisionRecord) -> bool {
        if self.world.is_some_and(|w| w != record.world) {
            return false;
        }
        if self.plugin.as_deref().is_some_and(|p| p != &*record.plugin) {
            return false;
        }
        if let Some(generation) = &self.generation {
            let hit = match generation.parse::<u64>() {
                Ok(number) => record.generation.number() == number,
                Err(_) => record.generation.as_str() == generation,
            };
            if !hit {
                return false;
            }
        }
        !(self.faults_only && record.outcome.is_plugin())
    }
}

/// Counters of the decision log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecisionLogStats {
    /// Records written since the log was created (the next sequence
    /// number). The decisions of one batch (an assembly) are one record.
    pub written: u64,
    /// Records kept now (at most the configured `keep`; a batch counts one).
    pub kept: u64,
    /// Records dropped by this process because the writer fell behind.
    pub dropped: u64,
    /// Write errors in this process (each logged at `error`).
    pub write_errors: u64,
    /// Records lost because the writer thread had stopped (it panicked,
    /// say): counted and logged at `error`, never a stalled decision.
    #[serde(default)]
    pub lost_writer_gone: u64,
    /// False once the writer thread has stopped: decisions go on, their
    /// records are lost (see `lost_writer_gone`) until a restart.
    #[serde(default = "yes")]
    pub writer_running: bool,
    /// Bytes of the log's segment files on disk (`<data_dir>/decisions`;
    /// 0 on PostgreSQL, where the chunks are in the database).
    #[serde(default)]
    pub file_bytes: u64,
}

fn yes() -> bool {
    true
}

/// Decisions and faults a generation made, as counted by the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GenerationCounts {
    /// Decisions logged.
    pub decisions: u64,
    /// Of those, how many were not the plugin's own answer.
    pub faults: u64,
}

enum Message {
    /// One decision, or the decisions of one batched call or operation
    /// (stored together, as one value).
    Records(Vec<DecisionRecord>),
    /// Answer once everything queued before is written (and synced, if
    /// asked).
    Barrier {
        sync: bool,
        done: SyncSender<std::result::Result<(), String>>,
    },
}

/// The durable [`DecisionSink`]: a bounded queue in front of a writer
/// thread. Cheap to clone; dropping the last clone stops the writer after
/// it has written and synced what was queued.
#[derive(Clone)]
pub struct DecisionLog {
    inner: Arc<LogInner>,
}

struct LogInner {
    tx: Mutex<Option<SyncSender<Message>>>,
    store: Arc<dyn WorkspaceStore>,
    /// On one node's own store (sled): the segment files holding the
    /// chunks' bodies.
    files: Option<Arc<ChunkFiles>>,
    /// In a cluster: the memory, to read the other nodes' logs.
    cluster: Option<Memory>,
    /// The memory the log is in (to make a scrub's moves durable).
    memory: Memory,
    dropped: AtomicU64,
    lost_writer_gone: AtomicU64,
    write_errors: Arc<AtomicU64>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for DecisionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionLog")
            .field("dropped", &self.inner.dropped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl DecisionLog {
    /// Opens the log in `memory`'s system namespace and starts its writer.
    /// On a store of its own (sled), the chunks' bodies go to segment files
    /// in `data_dir/decisions` ([`crate::decision_files`]); a shared store
    /// (PostgreSQL) holds them itself, where every node can read them.
    pub(crate) fn open(
        memory: &Memory,
        data_dir: &std::path::Path,
        config: &DecisionLogConfig,
    ) -> Result<DecisionLog> {
        Self::open_with(
            memory,
            data_dir,
            config,
            crate::decision_files::SEGMENT_BYTES,
        )
    }

    fn open_with(
        memory: &Memory,
        data_dir: &std::path::Path,
        config: &DecisionLogConfig,
        segment_bytes: u64,
    ) -> Result<DecisionLog> {
        config.validate().map_err(PolicyError::Config)?;
        let node = memory.leases().map(|l| l.node().to_owned());
        let store = memory.system(&namespace_of(node.as_deref()))?;
        let files = match memory.backend() {
            cairn_memory::StorageBackend::Sled if node.is_none() => {
                let dir = data_dir.join(crate::decision_files::DIR);
                let files = ChunkFiles::open(&dir, segment_bytes).map_err(|e| {
                    PolicyError::records_from(
                        format!("cannot open the segment files in {}", dir.display()),
                        e,
                    )
                })?;
                Some(Arc::new(files))
            }
            _ => None,
        };
        let first = read_u64(store.as_ref(), FIRST)?;
        let next = read_u64(store.as_ref(), NEXT)?;
        if store.get(Collection::State, INDEXED_FROM)?.is_none() {
            // From here on every chunk is indexed; those before are scanned.
            let mut batch = WriteBatch::default();
            batch.put(
                Collection::State,
                INDEXED_FROM.to_vec(),
                next.to_be_bytes().to_vec(),
            );
            store.apply(batch)?;
        }
        let (tx, rx) = mpsc::sync_channel(config.queue);
        let write_errors = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            store: store.clone(),
            files: files.clone(),
            pending: Vec::new(),
            memory: memory.clone(),
            config: config.clone(),
            first,
            next,
            counters: HashMap::new(),
            errors: write_errors.clone(),
            written: VecDeque::new(),
        };
        let supervised = memory.workers().worker(WRITER);
        let handle = std::thread::Builder::new()
            .name("cairn-decisions".to_owned())
            .spawn(move || {
                // A panic in the loop (caught, logged, counted) loses the
                // batch in hand (its waiters are told the writer stopped)
                // and starts the loop again on the same queue.
                let mut writer = writer;
                supervised.set_running(true);
                while supervised.pass(|| writer.run(&rx)).is_none() {}
                supervised.set_running(false);
            })
            .map_err(|e| PolicyError::records_from("cannot start the writer", e))?;
        Ok(DecisionLog {
            inner: Arc::new(LogInner {
                tx: Mutex::new(Some(tx)),
                store,
                files,
                cluster: node.is_some().then(|| memory.clone()),
                memory: memory.clone(),
                dropped: AtomicU64::new(0),
                lost_writer_gone: AtomicU64::new(0),
                write_errors,
                writer: Mutex::new(Some(handle)),
            }),
        })
    }

    fn barrier(&self, sync: bool) -> Result<()> {
        let (done, wait) = mpsc::sync_channel(1);
        let sent = match self.inner.tx.lock().as_ref() {
            Some(tx) => tx.send(Message::Barrier { sync, done }).is_ok(),
            None => false,
        };
        if !sent {
            return Err(PolicyError::records("the writer has stopped"));
        }
        wait.recv()
            .map_err(|_| PolicyError::records("the writer has stopped"))?
            .map_err(PolicyError::records)
    }

    /// Blocks until every record handed to the log before the call is
    /// written and durable.
    pub fn flush(&self) -> Result<()> {
        self.barrier(true)
    }

    /// This node's log, then, in a cluster, every other node's (each node
    /// writes a log of its own: one writer per log, as on one node).
    fn logs(&self) -> Result<Vec<Arc<dyn WorkspaceStore>>> {
        let mut logs = vec![self.inner.store.clone()];
        if let Some(memory) = &self.inner.cluster
            && let Some(leases) = memory.leases()
        {
            let nodes = leases.nodes().map_err(cairn_memory::MemoryError::from)?;
            for node in nodes.iter().filter(|n| n.node != leases.node()) {
                logs.push(memory.system(&namespace_of(Some(&node.node)))?);
            }
        }
        Ok(logs)
    }

    /// The records matching `query`, newest first. Sees every record
    /// handed to the log before the call; in a cluster, every node's.
    pub fn query(&self, query: &DecisionQuery) -> Result<Vec<DecisionRecord>> {
        self.barrier(false)?;
        let limit = query.limit.min(MAX_QUERY_LIMIT);
        let mut out = Vec::new();
        let files = self.inner.files.as_deref();
        for log in self.logs()? {
            out.extend(query_log(log.as_ref(), files, query, limit)?);
        }
        // Decision ids are ULIDs: newest first across the nodes' logs.
        out.sort_by_cached_key(|r| std::cmp::Reverse(r.decision_id.to_string()));
        out.truncate(limit);
        Ok(out)
    }

    /// Scrubs the records about session `session` of `workspace` (after it
    /// was erased): their session reference and every free-text `note` a
    /// plugin wrote, which may quote the session's words. The decisions
    /// themselves (codes, fidelity, generation, workspace) stay for audit.
    /// A session of the same id in another workspace keeps its records.
    /// The records are found through the (workspace, session) index, so a
    /// scrub reads only the chunks that hold the session; records written
    /// before the index existed (which name no workspace) are found by a
    /// scan and matched by session alone. Sees every record handed to the
    /// log before the call; in a cluster, every node's log is scrubbed. Not
    /// yet durable (the caller syncs). Returns how many records were
    /// scrubbed.
    pub fn scrub_session(&self, workspace: &str, session: &str) -> Result<u64> {
        self.scrub(&Scope::Session { workspace, session })
    }

    /// Scrubs every record about `workspace` (after it was erased): as
    /// [`DecisionLog::scrub_session`] for each of its sessions, and the
    /// workspace's name too. `sessions` are its sessions' ids, which find
    /// the records written before records named their workspace.
    pub fn scrub_workspace(&self, workspace: &str, sessions: &[String]) -> Result<u64> {
        self.scrub(&Scope::Workspace {
            workspace,
            sessions,
        })
    }

    fn scrub(&self, scope: &Scope<'_>) -> Result<u64> {
        self.barrier(true)?;
        let mut scrubbed = 0;
        let files = self.inner.files.as_deref();
        let mut rewritten = BTreeSet::new();
        for log in self.logs()? {
            scrubbed += scrub_log(log.as_ref(), files, scope, &mut rewritten)?;
        }
        if let Some(files) = files
            && !rewritten.is_empty()
        {
            // The segments that held the unscrubbed bodies go whole, their
            // other chunks moved out first: no byte of the session stays.
            evacuate(
                self.inner.store.as_ref(),
                &self.inner.memory,
                files,
                &rewritten,
            )?;
        }
        Ok(scrubbed)
    }

    /// What the log counted for `generation` (durable, across restarts;
    /// in a cluster, summed over every node's log).
    pub fn counts(&self, generation: &str) -> Result<GenerationCounts> {
        self.barrier(false)?;
        let mut key = vec![COUNTER];
        key.extend_from_slice(generation.as_bytes());
        let mut total = GenerationCounts::default();
        for log in self.logs()? {
            if let Some(bytes) = log.get(Collection::State, &key)? {
                let counts = decode_counts(&bytes);
                total.decisions += counts.decisions;
                total.faults += counts.faults;
            }
        }
        Ok(total)
    }

    /// The log's counters.
    pub fn stats(&self) -> Result<DecisionLogStats> {
        // A stopped writer is reported, not an error: the counts so far
        // are what the store holds.
        let writer_running = self.barrier(false).is_ok();
        let store = self.inner.store.as_ref();
        let first = read_u64(store, FIRST)?;
        let next = read_u64(store, NEXT)?;
        Ok(DecisionLogStats {
            written: next,
            kept: next.saturating_sub(first),
            dropped: self.inner.dropped.load(Ordering::Relaxed),
            write_errors: self.inner.write_errors.load(Ordering::Relaxed),
            lost_writer_gone: self.inner.lost_writer_gone.load(Ordering::Relaxed),
            writer_running,
            file_bytes: self.inner.files.as_ref().map_or(0, |files| files.bytes()),
        })
    }

    /// As after a writer panic: the queue's receiver is gone.
    #[cfg(test)]
    pub(crate) fn lose_writer(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        drop(rx);
        *self.inner.tx.lock() = Some(tx);
    }

    /// Stops the writer after it has written and synced everything queued.
    /// Later records are dropped. Called when the last `Cairn` clone goes.
    pub fn close(&self) {
        drop(self.inner.tx.lock().take());
        if let Some(handle) = self.inner.writer.lock().take() {
            let _ = handle.join();
        }
    }
}

impl Drop for LogInner {
    fn drop(&mut self) {
        drop(self.tx.lock().take());
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
    }
}

impl DecisionSink for DecisionLog {
    fn record(&self, record: &DecisionRecord) -> std::result::Result<(), SinkError> {
        let sent = match self.inner.tx.lock().as_ref() {
            Some(tx) => tx.try_send(Message::Records(vec![record.clone()])),
            None => return Ok(()),
        };
        self.sent(sent)
    }

    fn record_batch(&self, records: &[DecisionRecord]) -> std::result::Result<(), SinkError> {
        if records.is_empty() {
            return Ok(());
        }
        let sent = match self.inner.tx.lock().as_ref() {
            Some(tx) => tx.try_send(Message::Records(records.to_vec())),
            None => return Ok(()),
        };
        self.sent(sent)
    }
}

impl DecisionLog {
    /// Accounts for a record that could not be queued (never an error: a
    /// decision is not held up by its log).
    fn sent(
        &self,
        sent: std::result::Result<(), TrySendError<Message>>,
    ) -> std::result::Result<(), SinkError> {
        match sent {
            Ok(()) => Ok(()),
            Err(TrySendError::Disconnected(_)) => {
                let lost = self.inner.lost_writer_gone.fetch_add(1, Ordering::Relaxed) + 1;
                if lost.is_power_of_two() {
                    tracing::error!(
                        lost,
                        "decision log writer has stopped; records are lost until a restart"
                    );
                }
                Ok(())
            }
            Err(TrySendError::Full(_)) => {
                let dropped = self.inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped,
                        "decision log writer is behind; records dropped (raise policies.decision_log.queue)"
                    );
                }
                Ok(())
            }
        }
    }
}

struct Writer {
    store: Arc<dyn WorkspaceStore>,
    /// The chunks' segment files, on a store of its own.
    files: Option<Arc<ChunkFiles>>,
    /// With segment files: the records taken from the queue and not yet
    /// written. They are written when the log syncs (every `flush_ms`, or
    /// when someone waits), the files made durable before the store is
    /// handed their pointers.
    pending: Vec<Vec<DecisionRecord>>,
    memory: Memory,
    config: DecisionLogConfig,
    first: u64,
    next: u64,
    counters: HashMap<String, GenerationCounts>,
    errors: Arc<AtomicU64>,
    /// The chunks this writer stored, oldest first, as (first sequence
    /// number, records): retiring them needs no scan of the log (which
    /// would read their values). Values stored before it started are found
    /// by the scan.
    written: VecDeque<(u64, u32, Vec<Pair>)>,
}

impl Writer {
    fn run(&mut self, rx: &Receiver<Message>) {
        let flush_every = Duration::from_millis(self.config.flush_ms);
        let gather = GATHER.min(flush_every);
        let mut unsynced = false;
        let mut last_sync = Instant::now();
        loop {
            let first = if unsynced || !self.pending.is_empty() {
                let wait = flush_every.saturating_sub(last_sync.elapsed());
                match rx.recv_timeout(wait) {
                    Ok(message) => Some(message),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(message) => Some(message),
                    Err(_) => break,
                }
            };
            let mut records = Vec::new();
            let mut waiters = Vec::new();
            let mut want_sync = false;
            if let Some(message) = first {
                let mut next = Some(message);
                while let Some(message) = next.take() {
                    match message {
                        Message::Records(batch) => records.push(batch),
                        Message::Barrier { sync, done } => {
                            want_sync |= sync;
                            waiters.push(done);
                        }
                    }
                    if records.len() < self.config.batch {
                        next = rx.try_recv().ok();
                    }
                }
            }
            let taken = records.len();
            let mut result = Ok(());
            let mut lost = 0;
            if self.files.is_some() {
                // Written when the log syncs, or when someone waits.
                self.pending.append(&mut records);
                let due = !waiters.is_empty()
                    || last_sync.elapsed() >= flush_every
                    || self.pending.len() >= self.config.batch;
                if due && !self.pending.is_empty() {
                    let pending = std::mem::take(&mut self.pending);
                    lost = pending.len();
                    result = pending
                        .chunks(self.config.batch)
                        .try_for_each(|batch| self.write(batch));
                    unsynced |= result.is_ok();
                    want_sync |= result.is_ok();
                }
            } else if !records.is_empty() {
                lost = records.len();
                result = self.write(&records);
                unsynced |= result.is_ok();
            }
            if result.is_ok() && unsynced && (want_sync || last_sync.elapsed() >= flush_every) {
                result = self.sync();
                unsynced = false;
                last_sync = Instant::now();
            }
            if let Err(error) = &result {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, lost, "decision log write failed");
            }
            for done in waiters {
                let _ = done.send(result.clone());
            }
            // Pause only when this batch emptied the queue: a writer that is
            // behind keeps writing full batches.
            if taken > 0 && taken < self.config.batch {
                std::thread::sleep(gather);
            }
        }
        let pending = std::mem::take(&mut self.pending);
        let mut result = pending
            .chunks(self.config.batch)
            .try_for_each(|batch| self.write(batch));
        if result.is_ok() && (unsynced || !pending.is_empty()) {
            result = self.sync();
        }
        if let Err(error) = result {
            tracing::error!(%error, lost = pending.len(), "decision log: final write failed");
        }
    }

    /// Makes what was written durable, then deletes the segment files
    /// whose records are all retired (now durably).
    fn sync(&self) -> std::result::Result<(), String> {
        self.memory.sync().map_err(|e| e.to_string())?;
        if let Some(files) = &self.files {
            files
                .retire(self.first)
                .map_err(|e| format!("deleting retired segment files: {e}"))?;
        }
        Ok(())
    }

    fn write(&mut self, stored: &[Vec<DecisionRecord>]) -> std::result::Result<(), String> {
        let files = self.files.clone();
        let _gate = files.as_deref().map(ChunkFiles::gate);
        let mut batch = WriteBatch::default();
        let mut touched: HashMap<String, GenerationCounts> = HashMap::new();
        let mut next = self.next;
        let mut spans = Vec::new();
        for chunk in chunks(stored) {
            let value = decision_codec::encode(chunk, vec![CHUNK_V6]).map_err(|e| e.to_string())?;
            let count = u32::try_from(chunk.len()).map_err(|e| e.to_string())?;
            let value = match &self.files {
                Some(files) => {
                    let at = files
                        .append(next, count, &value)
                        .map_err(|e| format!("appending to the segment files: {e}"))?;
                    at_value(&at)
                }
                None => value,
            };
            let key = chunk_key(next, count);
            let pairs = pairs_of(chunk);
            index(&mut batch, &key, &[], &pairs).map_err(|e| e.to_string())?;
            batch.put(Collection::State, key, value);
            spans.push((next, count, pairs));
            next += u64::from(count);
        }
        if let Some(files) = &self.files {
            files
                .sync()
                .map_err(|e| format!("syncing the segment files: {e}"))?;
        }
        for record in stored.iter().flatten() {
            let generation = record.generation.as_str();
            let counts = match touched.get_mut(generation) {
                Some(counts) => counts,
                None => {
                    let base = self.load_counts(generation)?;
                    touched.entry(generation.to_owned()).or_insert(base)
                }
            };
            counts.decisions += 1;
            if !record.outcome.is_plugin() {
                counts.faults += 1;
            }
        }
        for (generation, counts) in &touched {
            let mut key = vec![COUNTER];
            key.extend_from_slice(generation.as_bytes());
            batch.put(Collection::State, key, encode_counts(*counts));
        }
        let first = self.retire(&mut batch, next)?;
        batch.put(
            Collection::State,
            NEXT.to_vec(),
            next.to_be_bytes().to_vec(),
        );
        batch.put(
            Collection::State,
            FIRST.to_vec(),
            first.to_be_bytes().to_vec(),
        );
        self.store.apply(batch).map_err(|e| e.to_string())?;
        self.next = next;
        self.first = first;
        while self
            .written
            .front()
            .is_some_and(|&(start, _, _)| start < first)
        {
            self.written.pop_front();
        }
        self.written.extend(spans);
        // Keep the counter cache small: generations come and go rarely.
        if self.counters.len() > 1_024 {
            self.counters.clear();
        }
        self.counters.extend(touched);
        Ok(())
    }

    /// Adds to `batch` the deletes of the stored values whose records all
    /// fall out of the newest `keep` once the log reaches `next` (at most
    /// [`MAX_DELETES_PER_BATCH`] records' worth); returns the new first.
    fn retire(&self, batch: &mut WriteBatch, next: u64) -> std::result::Result<u64, String> {
        let mut first = self.first;
        let stale_until = next.saturating_sub(self.config.keep);
        let budget_until = first.saturating_add(MAX_DELETES_PER_BATCH);
        // The chunks this writer stored, while the oldest stored value is
        // one of them: their keys are known, nothing is read.
        for (start, count, pairs) in &self.written {
            let (start, count) = (*start, *count);
            if start != first || first >= stale_until || first >= budget_until {
                break;
            }
            let end = start + u64::from(count);
            if end > stale_until {
                return Ok(first);
            }
            let key = chunk_key(start, count);
            index(batch, &key, pairs, &[]).map_err(|e| e.to_string())?;
            batch.delete(Collection::State, key);
            first = end;
        }
        while first < stale_until && first < budget_until {
            let stored = self
                .store
                .scan_prefix_from(Collection::State, &[RECORD], &first.to_be_bytes(), 16)
                .map_err(|e| e.to_string())?;
            let mut progressed = false;
            for (key, _) in stored {
                let Some((start, count)) = span_of(&key) else {
                    return Err(undecodable(&key));
                };
                let end = start.saturating_add(count);
                if end > stale_until {
                    // Kept: the oldest record is its first.
                    return Ok(first.max(start));
                }
                if first >= budget_until {
                    return Ok(first);
                }
                // Its index keys go with it (their names, by the pairs kept
                // beside the chunk: the chunk itself is not read).
                let pairs = stored_pairs(self.store.as_ref(), &key).map_err(|e| e.to_string())?;
                index(batch, &key, &pairs, &[]).map_err(|e| e.to_string())?;
                batch.delete(Collection::State, key);
                first = end;
                progressed = true;
            }
            if !progressed {
                // Nothing stored past `first` below the stale line.
                return Ok(stale_until);
            }
        }
        Ok(first)
    }

    fn load_counts(&self, generation: &str) -> std::result::Result<GenerationCounts, String> {
        if let Some(counts) = self.counters.get(generation) {
            return Ok(*counts);
        }
        let mut key = vec![COUNTER];
        key.extend_from_slice(generation.as_bytes());
        Ok(self
            .store
            .get(Collection::State, &key)
            .map_err(|e| e.to_string())?
            .map(|bytes| decode_counts(&bytes))
            .unwrap_or_default())
    }
}

/// The system namespace of a node's decision log: `policy-decisions`
/// alone, `policy-decisions-node-<id>` for a node of a cluster.
fn namespace_of(node: Option<&str>) -> String {
    match node {
        Some(node) => format!("{DECISIONS_NAMESPACE}-node-{node}"),
        None => DECISIONS_NAMESPACE.to_owned(),
    }
}

/// The records of one log matching `query`, newest first, at most `limit`.
fn query_log(
    store: &dyn WorkspaceStore,
    files: Option<&ChunkFiles>,
    query: &DecisionQuery,
    limit: usize,
) -> Result<Vec<DecisionRecord>> {
    let first = read_u64(store, FIRST)?;
    let next = read_u64(store, NEXT)?;
    let mut out = Vec::new();
    if next == first || limit == 0 {
        return Ok(out);
    }
    let mut page = (next - 1) >> PAGE_SHIFT;
    loop {
        let mut prefix = vec![RECORD];
        prefix.extend_from_slice(&(page << PAGE_SHIFT).to_be_bytes()[..7]);
        for (key, value) in store.scan_prefix_rev(Collection::State, &prefix, 1 << PAGE_SHIFT)? {
            // Newest first: a batch's decisions in reverse order too.
            for record in decode_stored(&key, &value, files)?.into_iter().rev() {
                if query.matches(&record) {
                    out.push(record);
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
        }
        if page == 0 || (page << PAGE_SHIFT) <= first {
            return Ok(out);
        }
        page -= 1;
    }
}

/// What a scrub erases.
enum Scope<'a> {
    /// One session of one workspace.
    Session {
        workspace: &'a str,
        session: &'a str,
    },
    /// A whole workspace (`sessions`: its sessions, for the records that
    /// name no workspace).
    Workspace {
        workspace: &'a str,
        sessions: &'a [String],
    },
}

impl Scope<'_> {
    /// Whether `record` is about what is erased. A record that names no
    /// workspace (written before records did, or by a caller that did not
    /// say) is matched by its session alone.
    fn matches(&self, record: &DecisionRecord) -> bool {
        let session = record.session.as_deref();
        match (self, record.workspace.as_deref()) {
            (
                Scope::Session {
                    workspace,
                    session: s,
                },
                Some(w),
            ) => w == *workspace && session == Some(*s),
            (Scope::Session { session: s, .. }, None) => session == Some(*s),
            (Scope::Workspace { workspace, .. }, Some(w)) => w == *workspace,
            (Scope::Workspace { sessions, .. }, None) => {
                session.is_some_and(|s| sessions.iter().any(|x| x == s))
            }
        }
    }

    /// Scrubs `record` (which [`Scope::matches`]).
    fn scrub(&self, record: &mut DecisionRecord) {
        record.scrub();
        if let Scope::Workspace { .. } = self {
            record.workspace = None;
        }
    }

    /// The index prefixes under which the chunks holding such records are.
    fn prefixes(&self) -> Vec<Vec<u8>> {
        match self {
            Scope::Session { workspace, session } => vec![
                index_prefix(workspace, Some(session)),
                index_prefix("", Some(session)),
            ],
            Scope::Workspace {
                workspace,
                sessions,
            } => std::iter::once(index_prefix(workspace, None))
                .chain(sessions.iter().map(|s| index_prefix("", Some(s))))
                .collect(),
        }
    }
}

/// A (workspace, session) pair of the index; either may be empty.
type Pair = (String, String);

/// The pairs the records of `chunk` are indexed under.
fn pairs_of(chunk: &[Vec<DecisionRecord>]) -> Vec<Pair> {
    let mut pairs = BTreeSet::new();
    for record in chunk.iter().flatten() {
        if record.workspace.is_none() && record.session.is_none() {
            continue;
        }
        pairs.insert((
            record.workspace.as_deref().unwrap_or_default().to_owned(),
            record.session.as_deref().unwrap_or_default().to_owned(),
        ));
    }
    pairs.into_iter().collect()
}

/// `x` + `workspace` + 0 (+ `session` + 0).
fn index_prefix(workspace: &str, session: Option<&str>) -> Vec<u8> {
    let mut key = vec![INDEX];
    key.extend_from_slice(workspace.as_bytes());
    key.push(0);
    if let Some(session) = session {
        key.extend_from_slice(session.as_bytes());
        key.push(0);
    }
    key
}

/// The key of the pairs of the chunk stored under `chunk`.
fn pairs_key(chunk: &[u8]) -> Vec<u8> {
    let mut key = vec![PAIRS];
    key.extend_from_slice(chunk.get(1..).unwrap_or_default());
    key
}

/// Stages the index of the chunk under `chunk` going from pairs `before`
/// to `after`: its index keys and its pairs value.
fn index(batch: &mut WriteBatch, chunk: &[u8], before: &[Pair], after: &[Pair]) -> Result<()> {
    for pair in before.iter().filter(|p| !after.contains(p)) {
        let mut key = index_prefix(&pair.0, Some(&pair.1));
        key.extend_from_slice(chunk);
        batch.delete(Collection::State, key);
    }
    for pair in after.iter().filter(|p| !before.contains(p)) {
        let mut key = index_prefix(&pair.0, Some(&pair.1));
        key.extend_from_slice(chunk);
        batch.put(Collection::State, key, Vec::new());
    }
    if before == after {
        return Ok(());
    }
    if after.is_empty() {
        batch.delete(Collection::State, pairs_key(chunk));
    } else {
        let value = postcard::to_extend(after, Vec::new())
            .map_err(|e| PolicyError::records_from("the pairs of a chunk", e))?;
        batch.put(Collection::State, pairs_key(chunk), value);
    }
    Ok(())
}

/// The pairs stored beside the chunk under `chunk` (none for a chunk
/// written before the index).
fn stored_pairs(store: &dyn WorkspaceStore, chunk: &[u8]) -> Result<Vec<Pair>> {
    match store.get(Collection::State, &pairs_key(chunk))? {
        None => Ok(Vec::new()),
        Some(bytes) => postcard::from_bytes(&bytes).map_err(|e| {
            PolicyError::records_from(format!("the pairs of {}", undecodable(chunk)), e)
        }),
    }
}

/// Scrubs one log's records in `scope` (see [`DecisionLog::scrub_session`]):
/// the chunks the index names, and, below the index's start, every chunk. A
/// value that does not decode fails the scrub with an error naming it
/// rather than being passed over (it might be about the session); the
/// chunks scrubbed before it stay scrubbed, and a retry scrubs nothing
/// twice.
fn scrub_log(
    store: &dyn WorkspaceStore,
    files: Option<&ChunkFiles>,
    scope: &Scope<'_>,
    rewritten: &mut BTreeSet<u64>,
) -> Result<u64> {
    let first = read_u64(store, FIRST)?;
    let next = read_u64(store, NEXT)?;
    let indexed_from = match store.get(Collection::State, INDEXED_FROM)? {
        Some(_) => read_u64(store, INDEXED_FROM)?,
        None => next,
    }
    .min(next);
    let mut scrubbed = 0;
    // Written before the index: a scan, page by page.
    if first < indexed_from {
        for page in (first >> PAGE_SHIFT)..=((indexed_from - 1) >> PAGE_SHIFT) {
            let mut prefix = vec![RECORD];
            prefix.extend_from_slice(&(page << PAGE_SHIFT).to_be_bytes()[..7]);
            let mut batch = WriteBatch::default();
            let _gate = files.map(ChunkFiles::gate);
            for (key, value) in store.scan_prefix(Collection::State, &prefix)? {
                if seq_of(&key).is_some_and(|seq| seq >= indexed_from) {
                    continue;
                }
                let chunk = Chunk {
                    key: &key,
                    value: &value,
                    pairs: None,
                };
                scrubbed += scrub_chunk(files, scope, &chunk, &mut batch, rewritten)?;
            }
            apply_scrub(store, files, batch)?;
        }
    }
    // Indexed: only the chunks that hold such records.
    let mut keys = BTreeSet::new();
    for prefix in scope.prefixes() {
        for (key, _) in store.scan_prefix(Collection::State, &prefix)? {
            if let Some(at) = key.len().checked_sub(CHUNK_KEY_BYTES) {
                keys.insert(key[at..].to_vec());
            }
        }
    }
    for key in keys {
        let mut batch = WriteBatch::default();
        let _gate = files.map(ChunkFiles::gate);
        let pairs = stored_pairs(store, &key)?;
        match store.get(Collection::State, &key)? {
            Some(value) => {
                let chunk = Chunk {
                    key: &key,
                    value: &value,
                    pairs: Some(&pairs),
                };
                scrubbed += scrub_chunk(files, scope, &chunk, &mut batch, rewritten)?;
            }
            // Retired since its index key was read: the key goes too.
            None => index(&mut batch, &key, &pairs, &[])?,
        }
        apply_scrub(store, files, batch)?;
    }
    Ok(scrubbed)
}

/// The bytes of a chunk's key: `r`, first, count.
const CHUNK_KEY_BYTES: usize = 13;

/// One stored value a scrub reads.
struct Chunk<'a> {
    key: &'a [u8],
    value: &'a [u8],
    /// Its index pairs, when it is indexed (written since the index).
    pairs: Option<&'a [Pair]>,
}

/// Scrubs the records of one stored value in `scope` and stages the value
/// written back (in the current binary form; the key stays: it says which
/// sequence numbers the value holds), with its index when it has one.
/// Returns how many records were scrubbed.
fn scrub_chunk(
    files: Option<&ChunkFiles>,
    scope: &Scope<'_>,
    chunk: &Chunk<'_>,
    batch: &mut WriteBatch,
    rewritten: &mut BTreeSet<u64>,
) -> Result<u64> {
    let key = chunk.key;
    let mut records = decode_records(key, chunk.value, files)?;
    let mut hits = 0;
    for record in records.iter_mut().flatten() {
        if scope.matches(record) {
            scope.scrub(record);
            hits += 1;
        }
    }
    if hits == 0 {
        return Ok(0);
    }
    if let Some((&CHUNK_AT, at)) = chunk.value.split_first()
        && let Some(at) = BodyRef::decode(at)
    {
        rewritten.insert(at.segment());
    }
    let bytes = decision_codec::encode(&records, vec![CHUNK_V6])
        .map_err(|e| PolicyError::records_from("a scrubbed record", e))?;
    let bytes = match (files, span_of(key)) {
        (Some(files), Some((first, count))) => {
            let count =
                u32::try_from(count).map_err(|e| PolicyError::records_from(undecodable(key), e))?;
            let at = files
                .append(first, count, &bytes)
                .map_err(|e| PolicyError::records_from("appending a scrubbed chunk", e))?;
            at_value(&at)
        }
        _ => bytes,
    };
    if let Some(pairs) = chunk.pairs {
        index(batch, key, pairs, &pairs_of(&records))?;
    }
    batch.put(Collection::State, key.to_vec(), bytes);
    Ok(hits)
}

/// Makes a scrub's appended bodies durable, then applies its batch.
fn apply_scrub(
    store: &dyn WorkspaceStore,
    files: Option<&ChunkFiles>,
    batch: WriteBatch,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    if let Some(files) = files {
        files
            .sync()
            .map_err(|e| PolicyError::records_from("syncing the segment files", e))?;
    }
    store.apply(batch)?;
    Ok(())
}

/// Moves every chunk whose body is in one of `segments` to the open
/// segment, makes the moves durable, then deletes `segments`.
fn evacuate(
    store: &dyn WorkspaceStore,
    memory: &Memory,
    files: &ChunkFiles,
    segments: &BTreeSet<u64>,
) -> Result<()> {
    let failed = |what: &str, e: std::io::Error| PolicyError::records_from(what.to_owned(), e);
    let _gate = files.gate();
    files
        .seal(segments)
        .map_err(|e| failed("sealing a segment to delete", e))?;
    let mut batch = WriteBatch::default();
    for (key, value) in store.scan_prefix(Collection::State, &[RECORD])? {
        let Some((&CHUNK_AT, at)) = value.split_first() else {
            continue;
        };
        let (Some(at), Some((first, count))) = (BodyRef::decode(at), span_of(&key)) else {
            return Err(PolicyError::records(undecodable(&key)));
        };
        if !segments.contains(&at.segment()) {
            continue;
        }
        let Some(body) = files
            .read(&at, first, count)
            .map_err(|e| PolicyError::records_from(undecodable(&key), e))?
        else {
            continue;
        };
        let count =
            u32::try_from(count).map_err(|e| PolicyError::records_from(undecodable(&key), e))?;
        let moved = files
            .append(first, count, &body)
            .map_err(|e| failed("moving a chunk out of a segment to delete", e))?;
        batch.put(Collection::State, key, at_value(&moved));
    }
    files
        .sync()
        .map_err(|e| failed("syncing the segment files", e))?;
    if !batch.is_empty() {
        store.apply(batch)?;
    }
    memory.sync()?;
    files
        .delete(segments)
        .map_err(|e| failed("deleting scrubbed segments", e))
}

fn record_key(seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(RECORD);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn seq_of(key: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = key.get(1..9)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// The key of a chunk of `count` records from `first`.
fn chunk_key(first: u64, count: u32) -> Vec<u8> {
    let mut key = record_key(first);
    key.extend_from_slice(&count.to_be_bytes());
    key
}

/// The first sequence number and the number of records a stored value's
/// key covers: a chunk's, or one record of the layout before.
fn span_of(key: &[u8]) -> Option<(u64, u64)> {
    let first = seq_of(key)?;
    match key.len() {
        9 => Some((first, 1)),
        13 => {
            let count: [u8; 4] = key.get(9..13)?.try_into().ok()?;
            Some((first, u64::from(u32::from_be_bytes(count))))
        }
        _ => None,
    }
}

/// Splits the records of one write into chunks of at most
/// [`CHUNK_RECORDS`] records and (unless one record alone exceeds it)
/// [`CHUNK_DECISIONS`] decisions.
fn chunks(stored: &[Vec<DecisionRecord>]) -> Vec<&[Vec<DecisionRecord>]> {
    let mut out = Vec::new();
    let (mut start, mut decisions) = (0, 0);
    for (i, record) in stored.iter().enumerate() {
        let full = i - start == CHUNK_RECORDS || decisions + record.len() > CHUNK_DECISIONS;
        if i > start && full {
            out.push(&stored[start..i]);
            (start, decisions) = (i, 0);
        }
        decisions += record.len();
    }
    if start < stored.len() {
        out.push(&stored[start..]);
    }
    out
}

fn read_u64(store: &dyn WorkspaceStore, key: &[u8]) -> Result<u64> {
    match store.get(Collection::State, key)? {
        None => Ok(0),
        Some(bytes) => {
            let array: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
                PolicyError::records(format!(
                    "{} holds {} bytes, not 8",
                    String::from_utf8_lossy(key),
                    bytes.len()
                ))
            })?;
            Ok(u64::from_be_bytes(array))
        }
    }
}

fn encode_counts(counts: GenerationCounts) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&counts.decisions.to_be_bytes());
    out.extend_from_slice(&counts.faults.to_be_bytes());
    out
}

fn decode_counts(bytes: &[u8]) -> GenerationCounts {
    let word = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_be_bytes)
    };
    GenerationCounts {
        decisions: word(0),
        faults: word(8),
    }
}

/// What a stored value says of the decision log: a chunk of records, or
/// (the layout before chunks) one record, a JSON object or array. Every
/// decision of it, oldest first.
fn decode_stored(
    key: &[u8],
    value: &[u8],
    files: Option<&ChunkFiles>,
) -> Result<Vec<DecisionRecord>> {
    Ok(decode_records(key, value, files)?
        .into_iter()
        .flatten()
        .collect())
}

/// The value stored for a chunk whose body is at `at`.
fn at_value(at: &BodyRef) -> Vec<u8> {
    let mut value = Vec::with_capacity(1 + BodyRef::BYTES);
    value.push(CHUNK_AT);
    at.encode(&mut value);
    value
}

/// The records a stored value holds, each as the list of its decisions.
/// A chunk in the segment files is read from them; one whose segment was
/// deleted meanwhile (retired since its key was read) holds none.
fn decode_records(
    key: &[u8],
    value: &[u8],
    files: Option<&ChunkFiles>,
) -> Result<Vec<Vec<DecisionRecord>>> {
    if let Some((&CHUNK_AT, at)) = value.split_first() {
        let (Some(at), Some((first, count))) = (BodyRef::decode(at), span_of(key)) else {
            return Err(PolicyError::records(undecodable(key)));
        };
        let Some(files) = files else {
            return Err(PolicyError::records(format!(
                "record {first} is in segment files this log does not have"
            )));
        };
        let body = files
            .read(&at, first, count)
            .map_err(|e| PolicyError::records_from(undecodable(key), e))?;
        return match body {
            Some(body) if matches!(body.first(), Some(&CHUNK_V4 | &CHUNK_V6)) => {
                decode_records(key, &body, None)
            }
            Some(_) => Err(PolicyError::records(undecodable(key))),
            None => Ok(Vec::new()),
        };
    }
    let json = match value.split_first() {
        Some((&CHUNK_V6, records)) => {
            return decision_codec::decode(records)
                .map_err(|e| PolicyError::records_from(undecodable(key), e));
        }
        Some((&CHUNK_V4, records)) => {
            return decision_codec::decode_without_workspaces(records)
                .map_err(|e| PolicyError::records_from(undecodable(key), e));
        }
        Some((&CHUNK_V3, records)) => {
            return decision_codec::decode_whole_ids(records)
                .map_err(|e| PolicyError::records_from(undecodable(key), e));
        }
        Some((&CHUNK_V2, records)) => {
            return decision_codec::decode_unshared(records)
                .map_err(|e| PolicyError::records_from(undecodable(key), e));
        }
        Some((&CHUNK_V1, records)) => serde_json::from_slice(records),
        Some((b'[', _)) => serde_json::from_slice(value).map(|record| vec![record]),
        _ => serde_json::from_slice(value).map(|decision| vec![vec![decision]]),
    };
    json.map_err(|e| PolicyError::records_from(undecodable(key), e))
}

fn undecodable(key: &[u8]) -> String {
    format!("record {} does not decode", seq_of(key).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use cairn_memory::{MemoryConfig, SystemClock};

    use super::*;

    fn io(e: impl std::fmt::Display) -> PolicyError {
        PolicyError::records(e.to_string())
    }

    /// `n` real memory-policy decision records, made by the default plugin.
    fn decisions(dir: &Path, n: usize) -> Result<Vec<DecisionRecord>> {
        let (_memory, policies) = crate::registry::tests::open(dir)?;
        for i in 0..n {
            crate::registry::tests::ask_about(&policies, &format!("e-{i}"))?;
        }
        let mut records = policies.log(&DecisionQuery {
            limit: n,
            ..DecisionQuery::default()
        })?;
        records.reverse();
        Ok(records)
    }

    /// A fresh memory on `dir`.
    fn fresh(dir: &Path) -> Result<Memory> {
        Ok(cairn_memory::testing::memory(
            dir,
            MemoryConfig::default(),
            Arc::new(SystemClock),
        )?)
    }

    /// The (first sequence number, records) of every stored value.
    fn stored_spans(store: &dyn WorkspaceStore) -> Result<Vec<(u64, u64)>> {
        Ok(store
            .scan_prefix(Collection::State, &[RECORD])?
            .iter()
            .filter_map(|(key, _)| span_of(key))
            .collect())
    }

    fn ids(records: &[DecisionRecord]) -> Vec<String> {
        records.iter().map(|r| r.decision_id.to_string()).collect()
    }

    /// A log written in the layouts before (one JSON value per record, JSON
    /// chunks, chunks of the unshared binary form) and extended in shared
    /// binary chunks answers queries, scrubs and counts across all four; a
    /// scrubbed value is rewritten in the shared form; retention retires
    /// the old values and whole chunks.
    #[test]
    fn every_layout_reads_scrubs_and_retires_alike() -> Result<()> {
        let made = tempfile::tempdir().map_err(io)?;
        let mut r = decisions(made.path(), 12)?;
        for i in [0, 2, 3, 4, 5] {
            r[i].session = Some("s1".into());
        }
        let dir = tempfile::tempdir().map_err(io)?;
        let memory = fresh(dir.path())?;
        let store = memory.system(DECISIONS_NAMESPACE)?;
        let mut batch = WriteBatch::default();
        // Records 0 and 1 as the layout before chunks stored them (a
        // decision object, an array), 2 in a JSON chunk.
        batch.put(Collection::State, record_key(0), json(&r[0])?);
        batch.put(Collection::State, record_key(1), json(&r[1..3])?);
        let mut v1 = vec![CHUNK_V1];
        v1.extend(json(&[vec![r[3].clone()]])?);
        batch.put(Collection::State, chunk_key(2, 1), v1);
        // Record 3 in a chunk of the shared form with whole ids.
        let v3 =
            decision_codec::encode_whole_ids(&[vec![r[4].clone()]], vec![CHUNK_V3]).map_err(io)?;
        batch.put(Collection::State, chunk_key(3, 1), v3);
        // Record 4 in a chunk of the earlier binary form.
        let v2 =
            decision_codec::encode_unshared(&[vec![r[5].clone()]], vec![CHUNK_V2]).map_err(io)?;
        batch.put(Collection::State, chunk_key(4, 1), v2);
        batch.put(
            Collection::State,
            FIRST.to_vec(),
            0u64.to_be_bytes().to_vec(),
        );
        batch.put(
            Collection::State,
            NEXT.to_vec(),
            5u64.to_be_bytes().to_vec(),
        );
        store.apply(batch)?;
        let config = DecisionLogConfig {
            keep: 6,
            ..DecisionLogConfig::default()
        };
        let log = DecisionLog::open(&memory, dir.path(), &config)?;
        log.record_batch(&r[6..8]).map_err(io)?;
        log.flush()?;
        let stats = log.stats()?;
        assert_eq!((stats.written, stats.kept), (6, 6), "{stats:?}");
        let all = DecisionQuery {
            limit: 100,
            ..DecisionQuery::default()
        };
        let newest_first: Vec<_> = r[..8].iter().rev().cloned().collect();
        assert_eq!(ids(&log.query(&all)?), ids(&newest_first));
        assert_eq!(log.query(&all)?, newest_first, "every field read back");
        // Counted by this writer: the batch's two (the stored ones were
        // counted by the writer that stored them).
        assert_eq!(log.counts(r[6].generation.as_str())?.decisions, 2);

        assert_eq!(log.scrub_session("acme", "s1")?, 5);
        let after = log.query(&all)?;
        assert_eq!(ids(&after), ids(&newest_first));
        assert!(after.iter().all(|d| d.session.is_none()), "{after:?}");
        // On a store of its own, in the segment files.
        let rewritten = match memory.backend() {
            cairn_memory::StorageBackend::Sled => CHUNK_AT,
            _ => CHUNK_V6,
        };
        for key in [
            record_key(0),
            record_key(1),
            chunk_key(2, 1),
            chunk_key(3, 1),
            chunk_key(4, 1),
        ] {
            let value = store.get(Collection::State, &key)?;
            assert_eq!(value.and_then(|v| v.first().copied()), Some(rewritten));
        }

        // Four more records: the four old values fall out of the newest
        // six, whole.
        for record in &r[8..12] {
            log.record(record).map_err(io)?;
        }
        log.flush()?;
        let stats = log.stats()?;
        assert_eq!((stats.written, stats.kept), (10, 6), "{stats:?}");
        let kept: Vec<_> = r[5..12].iter().rev().cloned().collect();
        assert_eq!(ids(&log.query(&all)?), ids(&kept));
        assert!(store.get(Collection::State, &record_key(0))?.is_none());
        assert!(store.get(Collection::State, &record_key(1))?.is_none());
        assert!(store.get(Collection::State, &chunk_key(2, 1))?.is_none());
        assert!(store.get(Collection::State, &chunk_key(3, 1))?.is_none());
        // What is stored is the six kept records' values, nothing older:
        // the chunks this writer wrote are deleted, not only passed over.
        let spans = stored_spans(store.as_ref())?;
        assert_eq!(spans.iter().map(|s| s.1).sum::<u64>(), 6, "{spans:?}");
        Ok(())
    }

    /// A damaged binary chunk is an error naming the record, not a panic
    /// or a silently shorter answer.
    #[test]
    fn a_damaged_chunk_is_an_error() -> Result<()> {
        let made = tempfile::tempdir().map_err(io)?;
        let r = decisions(made.path(), 2)?;
        let value = decision_codec::encode(&[r], vec![CHUNK_V6]).map_err(io)?;
        let key = chunk_key(7, 1);
        assert_eq!(decode_stored(&key, &value, None)?.len(), 2);
        for cut in [value.len() - 1, value.len() / 2, 1] {
            let err = decode_stored(&key, &value[..cut], None).err();
            assert!(
                err.is_some_and(|e| e.to_string().contains("record 7")),
                "cut at {cut}"
            );
        }
        Ok(())
    }

    /// Retention deletes the chunks the writer itself stored (known
    /// without a scan) once they fall out of the newest `keep`.
    #[test]
    fn retention_deletes_the_writers_own_chunks() -> Result<()> {
        let made = tempfile::tempdir().map_err(io)?;
        let r = decisions(made.path(), 10)?;
        let dir = tempfile::tempdir().map_err(io)?;
        let memory = fresh(dir.path())?;
        let config = DecisionLogConfig {
            keep: 3,
            ..DecisionLogConfig::default()
        };
        let log = DecisionLog::open(&memory, dir.path(), &config)?;
        for record in &r {
            log.record(record).map_err(io)?;
            log.flush()?;
        }
        let store = memory.system(DECISIONS_NAMESPACE)?;
        let spans = stored_spans(store.as_ref())?;
        assert_eq!(spans, [(7, 1), (8, 1), (9, 1)]);
        let all = DecisionQuery {
            limit: 100,
            ..DecisionQuery::default()
        };
        let kept: Vec<_> = r[7..].iter().rev().cloned().collect();
        assert_eq!(ids(&log.query(&all)?), ids(&kept));
        Ok(())
    }

    /// On a store of its own (sled), chunks go to segment files: the store
    /// holds a pointer of a few bytes per chunk, retention deletes whole
    /// segments, a scrub leaves no byte of the session in any file, the log
    /// reads back after a reopen, and a pointer whose body is damaged is an
    /// error naming its record.
    #[test]
    fn chunks_in_segment_files_are_retired_whole() -> Result<()> {
        let made = tempfile::tempdir().map_err(io)?;
        let mut r = decisions(made.path(), 12)?;
        for i in [8, 9] {
            r[i].session = Some("s-erase-me".into());
        }
        let dir = tempfile::tempdir().map_err(io)?;
        let memory = fresh(dir.path())?;
        if memory.backend() != cairn_memory::StorageBackend::Sled {
            return Ok(());
        }
        let config = DecisionLogConfig {
            keep: 3,
            ..DecisionLogConfig::default()
        };
        let segments = dir.path().join(crate::decision_files::DIR);
        let count_segments =
            || -> Result<usize> { Ok(std::fs::read_dir(&segments).map_err(io)?.count()) };
        let all = DecisionQuery {
            limit: 100,
            ..DecisionQuery::default()
        };
        {
            // A segment holds one chunk of one record (about 200 bytes).
            let log = DecisionLog::open_with(&memory, dir.path(), &config, 256)?;
            for record in &r[..10] {
                log.record(record).map_err(io)?;
                log.flush()?;
            }
            // Three records kept, each in a segment; at most one segment
            // more waits for the next sync to be deleted.
            let files = count_segments()?;
            assert!((3..=4).contains(&files), "{files} segment files");
            let store = memory.system(DECISIONS_NAMESPACE)?;
            for (key, value) in store.scan_prefix(Collection::State, &[RECORD])? {
                assert_eq!(value.len(), 1 + BodyRef::BYTES, "{key:?}");
                assert_eq!(value.first(), Some(&CHUNK_AT));
            }
            let kept: Vec<_> = r[7..10].iter().rev().cloned().collect();
            assert_eq!(log.query(&all)?, kept);
            let mut on_disk = 0;
            for item in std::fs::read_dir(&segments).map_err(io)? {
                on_disk += item.map_err(io)?.metadata().map_err(io)?.len();
            }
            assert!(on_disk > 0);
            assert_eq!(log.stats()?.file_bytes, on_disk);
            let holding = |needle: &[u8]| -> Result<usize> {
                let mut n = 0;
                for item in std::fs::read_dir(&segments).map_err(io)? {
                    let bytes = std::fs::read(item.map_err(io)?.path()).map_err(io)?;
                    n += usize::from(bytes.windows(needle.len()).any(|w| w == needle));
                }
                Ok(n)
            };
            assert_eq!(holding(b"s-erase-me")?, 2);
            assert_eq!(log.scrub_session("acme", "s-erase-me")?, 2);
            // The check can fail: the kept records are still in the files.
            assert_eq!(holding(b"s-erase-me")?, 0);
            let after = log.query(&all)?;
            assert_eq!(ids(&after), ids(&kept));
            assert!(after.iter().all(|d| d.session.is_none()), "{after:?}");
            log.close();
        }
        let log = DecisionLog::open_with(&memory, dir.path(), &config, 256)?;
        log.record_batch(&r[10..12]).map_err(io)?;
        log.flush()?;
        let kept: Vec<_> = [&r[8..10], &r[10..12]].concat().into_iter().rev().collect();
        assert_eq!(ids(&log.query(&all)?), ids(&kept));
        // A body damaged on disk: the query fails naming the record.
        let newest = std::fs::read_dir(&segments)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .max()
            .ok_or_else(|| io("no segment"))?;
        let mut bytes = std::fs::read(&newest).map_err(io)?;
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&newest, bytes).map_err(io)?;
        let error = log.query(&all).err().map(|e| e.to_string());
        assert!(
            error.as_deref().is_some_and(|e| e.contains("record 10")),
            "{error:?}"
        );
        Ok(())
    }

    /// Issue 78: records name their workspace, and a scrub reads through
    /// the (workspace, session) index only the chunks that hold the session:
    /// forgetting `main` of `a1` leaves `main` of `b1` (its records and the
    /// segment files that hold them) untouched; retention deletes the index
    /// keys with their chunks.
    #[test]
    fn a_scrub_reads_only_its_sessions_chunks() -> Result<()> {
        let made = tempfile::tempdir().map_err(io)?;
        let mut r = decisions(made.path(), 6)?;
        for (i, ws) in ["b1", "a1", "a1", "b1", "a1", "b1"].iter().enumerate() {
            r[i].workspace = Some((*ws).into());
            r[i].session = Some("main".into());
        }
        let dir = tempfile::tempdir().map_err(io)?;
        let memory = fresh(dir.path())?;
        let config = DecisionLogConfig {
            keep: 100,
            ..DecisionLogConfig::default()
        };
        // A segment holds one chunk of one record.
        let log = DecisionLog::open_with(&memory, dir.path(), &config, 256)?;
        let segments = dir.path().join(crate::decision_files::DIR);
        let names = || -> Result<BTreeSet<String>> {
            let mut out = BTreeSet::new();
            if segments.exists() {
                for item in std::fs::read_dir(&segments).map_err(io)? {
                    out.insert(item.map_err(io)?.file_name().to_string_lossy().into_owned());
                }
            }
            Ok(out)
        };
        let mut of_b1 = BTreeSet::new();
        for record in &r {
            let before = names()?;
            log.record(record).map_err(io)?;
            log.flush()?;
            if record.workspace.as_deref() == Some("b1") {
                of_b1.extend(names()?.difference(&before).cloned());
            }
        }
        let all = DecisionQuery {
            limit: 100,
            ..DecisionQuery::default()
        };
        let about = |ws: &str| -> Result<usize> {
            Ok(log
                .query(&all)?
                .iter()
                .filter(|d| {
                    d.workspace.as_deref() == Some(ws) && d.session.as_deref() == Some("main")
                })
                .count())
        };
        assert_eq!((about("a1")?, about("b1")?), (3, 3));
        assert_eq!(log.scrub_session("a1", "main")?, 3);
        assert_eq!((about("a1")?, about("b1")?), (0, 3));
        // The scrubbed records keep their workspace, now under no session.
        let scrubbed = log.query(&all)?;
        assert_eq!(
            scrubbed
                .iter()
                .filter(|d| d.workspace.as_deref() == Some("a1"))
                .count(),
            3
        );
        if memory.backend() == cairn_memory::StorageBackend::Sled {
            let after = names()?;
            assert!(
                of_b1.is_subset(&after),
                "b1's segments {of_b1:?} were rewritten: {after:?}"
            );
        }
        // A second scrub finds nothing to read: the index no longer names
        // (a1, main).
        let store = memory.system(DECISIONS_NAMESPACE)?;
        assert!(
            store
                .scan_prefix(Collection::State, &index_prefix("a1", Some("main")))?
                .is_empty()
        );
        assert_eq!(log.scrub_session("a1", "main")?, 0);
        // Erasing b1 scrubs its records and its name.
        assert_eq!(log.scrub_workspace("b1", &[])?, 3);
        assert!(
            log.query(&all)?
                .iter()
                .all(|d| d.workspace.as_deref() != Some("b1"))
        );
        assert!(
            store
                .scan_prefix(Collection::State, &index_prefix("b1", None))?
                .is_empty()
        );
        Ok(())
    }

    /// Retention deletes a chunk's index keys and pairs with it.
    #[test]
    fn retention_retires_the_index_with_its_chunks() -> Result<()> {
        let made = tempfile::tempdir().map_err(io)?;
        let mut r = decisions(made.path(), 6)?;
        for record in &mut r {
            record.workspace = Some("acme".into());
            record.session = Some("s1".into());
        }
        let dir = tempfile::tempdir().map_err(io)?;
        let memory = fresh(dir.path())?;
        let config = DecisionLogConfig {
            keep: 2,
            ..DecisionLogConfig::default()
        };
        let store = memory.system(DECISIONS_NAMESPACE)?;
        let indexed =
            || -> Result<usize> { Ok(store.scan_prefix(Collection::State, &[INDEX])?.len()) };
        let pairs =
            || -> Result<usize> { Ok(store.scan_prefix(Collection::State, &[PAIRS])?.len()) };
        {
            let log = DecisionLog::open(&memory, dir.path(), &config)?;
            for record in &r[..4] {
                log.record(record).map_err(io)?;
                log.flush()?;
            }
            assert_eq!((indexed()?, pairs()?), (2, 2));
        }
        // A writer that did not write them retires them by the scan.
        let log = DecisionLog::open(&memory, dir.path(), &config)?;
        for record in &r[4..] {
            log.record(record).map_err(io)?;
            log.flush()?;
        }
        assert_eq!((indexed()?, pairs()?), (2, 2));
        assert_eq!(log.scrub_session("acme", "s1")?, 2);
        Ok(())
    }

    /// The inputs digest a record carries is keyed with a key derived from
    /// the install secret: not the plain BLAKE3 of the input, which anyone
    /// could compute from a guessed input.
    #[test]
    fn inputs_digests_are_keyed() -> Result<()> {
        use crate::World;
        let dir = tempfile::tempdir().map_err(io)?;
        let (_memory, policies) = crate::registry::tests::open(dir.path())?;
        crate::registry::tests::ask_about(&policies, "e-7")?;
        let logged = policies.log(&DecisionQuery::default())?;
        let request = crate::registry::tests::request_about("e-7");
        let plain = crate::MemoryPolicy::digest(&request);
        assert_eq!(logged.len(), 1);
        assert_ne!(logged[0].inputs_digest, plain);
        // Another install keys it differently.
        let other = tempfile::tempdir().map_err(io)?;
        let (_memory, policies) = crate::registry::tests::open(other.path())?;
        crate::registry::tests::ask_about(&policies, "e-7")?;
        let elsewhere = policies.log(&DecisionQuery::default())?;
        assert_ne!(elsewhere[0].inputs_digest, logged[0].inputs_digest);
        Ok(())
    }

    /// A chunk closes at its record or decision limit; one record larger
    /// than the decision limit is a chunk of its own.
    #[test]
    fn chunks_respect_their_limits() -> Result<()> {
        let made = tempfile::tempdir().map_err(io)?;
        let one = decisions(made.path(), 1)?;
        let singles = vec![one.clone(); 2 * CHUNK_RECORDS + 5];
        let lens: Vec<usize> = chunks(&singles).iter().map(|c| c.len()).collect();
        assert_eq!(lens, vec![CHUNK_RECORDS, CHUNK_RECORDS, 5]);
        let big = vec![one[0].clone(); CHUNK_DECISIONS + 1];
        let mixed = vec![
            one.clone(),
            big,
            one.clone(),
            vec![one[0].clone(); CHUNK_DECISIONS - 2],
            one,
        ];
        let lens: Vec<usize> = chunks(&mixed).iter().map(|c| c.len()).collect();
        assert_eq!(lens, vec![1, 1, 3]);
        Ok(())
    }

    /// A value as the layout before chunks stored it.
    fn json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
        serde_json::to_vec(value).map_err(io)
    }
}
