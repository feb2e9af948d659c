//! cairn's storage seam: ordered key-value collections per workspace, on
//! an embedded sled database or a PostgreSQL server.
//!
//! cairn's stores are ordered key-value collections inside a **workspace**
//! (tenant). Two traits form the seam:
//!
//! - [`Store`] is the whole database: it opens workspaces, lists them, drops
//!   one (for `forget`), and makes writes durable ([`Store::sync`]).
//! - [`WorkspaceStore`] is a handle on *one* workspace. Every read and write
//!   goes through such a handle, and a handle has no way to name another
//!   workspace, so reading across workspaces is impossible by construction.
//!
//! Writes are [`WriteBatch`]es applied atomically: either every put and
//! delete in the batch is visible or none is. A batch is *not* durable when
//! [`WorkspaceStore::apply`] returns; callers that acknowledge to a user call
//! [`Store::sync`] afterwards, which group-commits: concurrent callers share one
//! fsync. See `docs/DURABILITY.md` for the write path.
//!
//! The embedded default is [`SledStore`]. [`PostgresStore`] keeps the same
//! collections in a PostgreSQL database (a table keyed by `(workspace,
//! collection, key)`, one transaction per [`WorkspaceStore::apply`]), so
//! several nodes can share them, holding workspaces by [`Leases`]; callers
//! do not change. [`open`] picks one by configuration ([`StorageConfig`]).
//!
//! The store sees bytes under a [`Collection`], nothing more: what the keys
//! and values mean (the memory core's typed keys, its records) is decided
//! above it, and this crate imports nothing of cairn's.
//!
//! ```
//! use cairn_store::{Collection, StorageConfig, WriteBatch};
//! let dir = tempfile::tempdir()?;
//! let store = cairn_store::open(&StorageConfig::default(), dir.path(), 8 << 20)?;
//! let ws = store.workspace("acme")?;
//! let mut batch = WriteBatch::default();
//! batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
//! ws.apply(batch)?;
//! store.sync()?;
//! assert_eq!(ws.get(Collection::State, b"k")?, Some(b"v".to_vec()));
//! assert_eq!(store.workspaces()?, vec!["acme".to_owned()]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod config;
mod lease;
mod postgres_store;
mod sled_store;
#[doc(hidden)]
pub mod testing;

pub use config::{ClusterConfig, DEFAULT_CACHE_MB, PostgresConfig, StorageBackend, StorageConfig};
pub use lease::{LeaseRow, Leases, NodeInfo};
pub use postgres_store::{MIGRATIONS, PostgresStore, SCHEMA_VERSION};
pub use sled_store::{RewriteReport, SledStore};

use std::path::Path;
use std::sync::Arc;

/// Opens the store `storage` selects: sled in `dir` (with a page cache of
/// about `cache_bytes`), or the PostgreSQL database it names (`dir` then
/// holds no store files).
///
/// ```
/// use cairn_store::StorageConfig;
/// let dir = tempfile::tempdir()?;
/// let store = cairn_store::open(&StorageConfig::default(), dir.path(), 8 << 20)?;
/// assert!(store.workspaces()?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn open(
    storage: &StorageConfig,
    dir: &Path,
    cache_bytes: u64,
) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match storage.backend {
        StorageBackend::Sled => Arc::new(SledStore::open_with_cache(dir, cache_bytes)?),
        StorageBackend::Postgres => Arc::new(PostgresStore::connect_node(
            &storage.postgres,
            &storage.cluster,
        )?),
    })
}

/// Errors of a storage backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The embedded sled database failed (I/O, corruption, or it was closed).
    #[error("storage (sled): {0}")]
    Sled(#[from] sled::Error),
    /// Opening the data directory failed.
    #[error("cannot open data directory {path}: {reason}")]
    Open {
        /// The directory.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The database could not be reached, or failed in a way that may pass
    /// (connection refused or lost, server shutting down or starting, a
    /// serialization failure or deadlock, a timeout): the same call may
    /// succeed later. A write that failed this way may still have been
    /// committed if the connection broke during the commit.
    #[error("storage (postgres) unavailable during {op}: {reason}")]
    Unavailable {
        /// The operation (`apply`, `get`, `migrate`…).
        op: &'static str,
        /// What failed.
        reason: String,
        /// The client's error, when there is one.
        #[source]
        source: Option<tokio_postgres::Error>,
    },
    /// The database refused the operation; trying again will not help
    /// (permissions, a constraint, a schema that is not cairn's).
    #[error("storage (postgres) failed during {op}: {reason}")]
    Database {
        /// The operation.
        op: &'static str,
        /// What failed.
        reason: String,
        /// The client's error, when there is one.
        #[source]
        source: Option<tokio_postgres::Error>,
    },
    /// The database's schema was written by a newer cairn.
    #[error(
        "the database's cairn schema is version {database}, newer than this binary knows ({binary}): upgrade cairn, or point it at another database"
    )]
    SchemaTooNew {
        /// The version the database holds.
        database: i32,
        /// The newest version this binary knows.
        binary: i32,
    },
    /// Another cairn process has this database open (it holds the
    /// database's writer lock).
    #[error(
        "another cairn process has the database ({target}) open: `cairn serve` or a CLI command; stop it, or ask it (cairn serve's HTTP API)"
    )]
    Locked {
        /// The database, without its password.
        target: String,
    },
    /// In a cluster: this node holds no lease on the workspace, so it may
    /// not write it (the request belongs to the workspace's owner).
    #[error("node {node} does not own workspace {workspace}: its owner serves it")]
    NotOwner {
        /// The workspace.
        workspace: String,
        /// This node.
        node: String,
    },
    /// In a cluster: a write carried a fencing token that is no longer the
    /// workspace's (another node took the workspace over); nothing of it
    /// was written.
    #[error(
        "the write to workspace {workspace} was fenced off: its lease (token {token}) passed to another node"
    )]
    Fenced {
        /// The workspace.
        workspace: String,
        /// The token the write carried.
        token: i64,
    },
    /// A write through a handle on a workspace that was erased after the
    /// handle was opened: it does not bring the workspace back. A handle
    /// opened since writes (and creates the workspace anew).
    #[error(
        "workspace {workspace} was erased after this handle on it was opened: it cannot write there"
    )]
    Erased {
        /// The workspace.
        workspace: String,
    },
    /// The storage configuration is invalid (a malformed URL).
    #[error("invalid storage configuration: {0}")]
    Config(String),
    /// The operation exists only on another backend (rewriting sled's files
    /// on a PostgreSQL store).
    #[error("{what} is not available on the {backend} storage backend: {hint}")]
    Unsupported {
        /// The operation.
        what: &'static str,
        /// The backend in use.
        backend: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
}

impl StoreError {
    /// True when the same call may succeed later (the database is
    /// unreachable or was busy): a caller may retry, a server answers
    /// "unavailable". False for errors that will recur.
    ///
    /// ```
    /// use cairn_store::StoreError;
    /// assert!(!StoreError::SchemaTooNew { database: 2, binary: 1 }.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. }
                | StoreError::NotOwner { .. }
                | StoreError::Fenced { .. }
        )
    }

    /// True when the call failed because another node owns the workspace
    /// ([`StoreError::NotOwner`], [`StoreError::Fenced`]): it belongs there.
    ///
    /// ```
    /// use cairn_store::StoreError;
    /// let err = StoreError::Fenced { workspace: "acme".into(), token: 3 };
    /// assert!(err.is_not_owner() && err.is_retryable());
    /// ```
    pub fn is_not_owner(&self) -> bool {
        matches!(
            self,
            StoreError::NotOwner { .. } | StoreError::Fenced { .. }
        )
    }
}

/// The collections inside a workspace. Each is an ordered map of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Collection {
    /// Session metadata, keyed by session id.
    Sessions,
    /// Transcript turns, keyed by session id, NUL, big-endian sequence number.
    Turns,
    /// Idempotency keys, keyed by session id, NUL, key; value is the
    /// sequence number. Written by stores before turn records named their
    /// keys; still read and erased, no longer written.
    Idempotency,
    /// Sessions per work context, keyed by work context, NUL, session id.
    WorkContextSessions,
    /// Memory-log entries, keyed by entry id (ULIDs sort by time).
    Entries,
    /// The replacement map: replaced entry id → replacing entry id.
    Replacements,
    /// Subject registry, keyed by slug.
    Subjects,
    /// Subject aliases left by rename and merge: old slug → canonical slug.
    SubjectAliases,
    /// Tombstones left by `forget`, keyed by tombstone id.
    Tombstones,
    /// Durable state of other subsystems (actors, indexes, pins), keyed by
    /// the core's typed state keys in workspaces; system namespaces key it
    /// their own way.
    State,
    /// Topics: definitions, memberships, proposals and the gate log, keyed
    /// by the core's typed topic keys.
    Topics,
    /// Compaction summary nodes (the summary DAG), keyed by summary id.
    Summaries,
    /// Maintenance: the runs (each change with its rule and reason) and the
    /// lifecycle marks they leave (decayed, archived, restored), keyed by
    /// the core's typed maintenance keys.
    Maintenance,
}

impl Collection {
    /// The one-byte tag that prefixes this collection's keys in flat backends.
    pub fn tag(self) -> u8 {
        match self {
            Collection::Sessions => b'S',
            Collection::Turns => b'T',
            Collection::Idempotency => b'I',
            Collection::WorkContextSessions => b'W',
            Collection::Entries => b'E',
            Collection::Replacements => b'R',
            Collection::Subjects => b'N',
            Collection::SubjectAliases => b'A',
            Collection::Tombstones => b'X',
            Collection::State => b'Z',
            Collection::Topics => b'O',
            Collection::Summaries => b'C',
            Collection::Maintenance => b'M',
        }
    }
}

/// One change inside a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Insert or overwrite a key.
    Put {
        /// Collection.
        collection: Collection,
        /// Key inside the collection.
        key: Vec<u8>,
        /// New value.
        value: Vec<u8>,
    },
    /// Remove a key (no error if absent).
    Delete {
        /// Collection.
        collection: Collection,
        /// Key inside the collection.
        key: Vec<u8>,
    },
}

impl WriteOp {
    /// The collection, the key, and the new value (`None` for a delete).
    pub fn into_parts(self) -> (Collection, Vec<u8>, Option<Vec<u8>>) {
        match self {
            WriteOp::Put {
                collection,
                key,
                value,
            } => (collection, key, Some(value)),
            WriteOp::Delete { collection, key } => (collection, key, None),
        }
    }
}

/// A set of changes applied atomically to one workspace.
///
/// ```
/// use cairn_store::{Collection, WriteBatch};
/// let mut batch = WriteBatch::default();
/// batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
/// assert_eq!(batch.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<WriteOp>,
}

impl WriteBatch {
    /// Adds a put.
    pub fn put(&mut self, collection: Collection, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(WriteOp::Put {
            collection,
            key,
            value,
        });
    }

    /// Adds a delete.
    pub fn delete(&mut self, collection: Collection, key: Vec<u8>) {
        self.ops.push(WriteOp::Delete { collection, key });
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The operations in order.
    pub fn ops(&self) -> &[WriteOp] {
        &self.ops
    }

    /// Takes the operations out.
    pub fn into_ops(self) -> Vec<WriteOp> {
        self.ops
    }
}

/// A key-value pair read from a collection (key without the collection tag).
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// A handle on the collections of one workspace.
pub trait WorkspaceStore: Send + Sync + std::fmt::Debug {
    /// The workspace this handle is bound to.
    fn workspace(&self) -> &str;

    /// Reads one key.
    fn get(&self, collection: Collection, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// All pairs whose key starts with `prefix`, in key order.
    fn scan_prefix(
        &self,
        collection: Collection,
        prefix: &[u8],
    ) -> Result<Vec<KeyValue>, StoreError>;

    /// At most `limit` pairs whose key starts with `prefix` and is at least
    /// `prefix ++ start`, in key order: one seek, then a bounded walk (a
    /// long session's transcript page costs what the page holds).
    fn scan_prefix_from(
        &self,
        collection: Collection,
        prefix: &[u8],
        start: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError>;

    /// At most `limit` pairs whose key starts with `prefix`, in reverse key order.
    fn scan_prefix_rev(
        &self,
        collection: Collection,
        prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError>;

    /// The pair with the greatest key that starts with `prefix`, if any.
    fn last_with_prefix(
        &self,
        collection: Collection,
        prefix: &[u8],
    ) -> Result<Option<KeyValue>, StoreError>;

    /// Applies every operation of `batch` atomically. Not yet durable: see
    /// [`Store::sync`].
    fn apply(&self, batch: WriteBatch) -> Result<(), StoreError>;
}

/// The database: opens workspaces and makes writes durable.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// A handle on `workspace`. The workspace is created by the first
    /// write through the handle, not before: reads of a workspace that does
    /// not exist find nothing and create nothing. The id must already be
    /// validated.
    fn workspace(&self, workspace: &str) -> Result<Arc<dyn WorkspaceStore>, StoreError>;

    /// True if the workspace exists.
    fn has_workspace(&self, workspace: &str) -> Result<bool, StoreError>;

    /// All workspaces, sorted.
    fn workspaces(&self) -> Result<Vec<String>, StoreError>;

    /// Removes a workspace and everything in it. Returns false if it did not exist.
    /// Handles already open on it fail or see nothing afterwards.
    fn drop_workspace(&self, workspace: &str) -> Result<bool, StoreError>;

    /// Reads a key from the store-wide metadata space (not inside any workspace).
    fn meta_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Pairs of the store-wide metadata space whose key starts with `prefix`.
    fn meta_scan_prefix(&self, prefix: &[u8]) -> Result<Vec<KeyValue>, StoreError>;

    /// Writes a key in the store-wide metadata space (not yet durable).
    fn meta_put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;

    /// Removes a key from the store-wide metadata space (not yet durable).
    fn meta_delete(&self, key: &[u8]) -> Result<(), StoreError>;

    /// A handle on the system namespace `name`: process-wide data that
    /// belongs to no workspace (the policy decision log, the plugin
    /// registry). It is a separate keyspace: never listed by
    /// [`Store::workspaces`], never reachable through a workspace id, and
    /// untouched by [`Store::drop_workspace`]. `name` must already be
    /// validated (lowercase ASCII letters, digits and `-`).
    fn system(&self, name: &str) -> Result<Arc<dyn WorkspaceStore>, StoreError>;

    /// Which backend this is.
    fn backend(&self) -> StorageBackend;

    /// The workspace leases of a cluster sharing this store, when this
    /// process is one of its nodes (`None`: it has the store to itself).
    fn leases(&self) -> Option<&dyn Leases> {
        None
    }

    /// True when this process may write `workspace`: always outside a
    /// cluster; in one, while it holds the workspace's lease. Background
    /// work (indexing, schedules, maintenance) runs on these only.
    fn serves(&self, workspace: &str) -> bool {
        let _ = workspace;
        true
    }

    /// Blocks until every write applied before the call is durable on disk.
    /// Concurrent callers share one flush (group commit).
    fn sync(&self) -> Result<(), StoreError>;

    /// Makes the bytes of what was deleted leave the storage, while the
    /// store stays open: sled rewrites its files
    /// ([`SledStore::rewrite_online`]), PostgreSQL vacuums its tables.
    /// Returns what a rewrite did, `None` when the backend rewrote no files
    /// of cairn's own. The erasure worker calls it after a `forget`
    /// (docs/DURABILITY.md, *Erasure on disk*).
    fn compact(&self) -> Result<Option<RewriteReport>, StoreError> {
        Ok(None)
    }

    /// True when applying a write only touches memory (durability comes
    /// from [`Store::sync`] or [`Store::sync_later`]), so an async caller
    /// may apply on its own thread; false when every write waits on I/O
    /// (a network round trip), which belongs on a thread that may block.
    fn buffered(&self) -> bool {
        false
    }

    /// [`Store::sync`] for async callers: a future that resolves once every
    /// write applied before the call is durable, without parking a thread
    /// (the store's own flusher does the flush, shared with concurrent
    /// syncs). `None`: this store only syncs blocking; call
    /// [`Store::sync`] on a thread that may block.
    fn sync_later(&self) -> Option<Durable> {
        None
    }
}

/// Resolves once the writes applied before it was made are durable
/// ([`Store::sync_later`]); the error of the flush that covered them, if it
/// failed.
///
/// ```
/// use cairn_store::{Collection, SledStore, Store, WriteBatch};
/// let dir = tempfile::tempdir()?;
/// let store = SledStore::open(dir.path())?;
/// let mut batch = WriteBatch::default();
/// batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
/// store.workspace("acme")?.apply(batch)?;
/// if let Some(durable) = store.sync_later() {
///     tokio::runtime::Builder::new_current_thread().build()?.block_on(durable)?;
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "the writes are durable only once this resolves"]
pub struct Durable(tokio::sync::oneshot::Receiver<Result<(), String>>);

impl Durable {
    pub(crate) fn new(rx: tokio::sync::oneshot::Receiver<Result<(), String>>) -> Self {
        Durable(rx)
    }
}

impl std::future::Future for Durable {
    type Output = Result<(), StoreError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx).map(|outcome| {
            let reason = match outcome {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(reason)) => reason,
                Err(_) => "the store closed before the write was flushed".to_owned(),
            };
            Err(sled_store::flush_failed(reason))
        })
    }
}

/// The smallest key greater than every key starting with `prefix`: the
/// exclusive upper bound of a prefix scan, for both backends. `None` when
/// there is none (the prefix is empty or all 0xff bytes): the scan then
/// runs to the end of the collection.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut upper = prefix.to_vec();
    while let Some(last) = upper.pop() {
        if last < u8::MAX {
            upper.push(last + 1);
            return Some(upper);
        }
    }
    None
}

/// Longest panic message kept in a report ([`panic_message`]), in bytes.
const MAX_PANIC_MESSAGE: usize = 300;

/// The text of a panic's payload, cut to a report line (at most 300 bytes,
/// on a character boundary): how the store's flusher reports a panicked
/// flush, and how cairn's supervised workers report a panicked pass.
///
/// ```
/// let payload: Box<dyn std::any::Any + Send> = Box::new("the disk is gone");
/// assert_eq!(cairn_store::panic_message(payload.as_ref()), "the disk is gone");
/// ```
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    };
    text[..text.floor_char_boundary(MAX_PANIC_MESSAGE)].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successor_handles_0xff() {
        assert_eq!(prefix_successor(b""), None);
        assert_eq!(prefix_successor(&[1, 255]), Some(vec![2]));
        assert_eq!(prefix_successor(&[255, 255]), None);
        assert_eq!(prefix_successor(&[0, 255, 255]), Some(vec![1]));
    }
}
