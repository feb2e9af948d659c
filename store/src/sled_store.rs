//! The embedded default backend, on sled.
//!
//! Layout: one sled tree per workspace, named `ws:<workspace>`; inside it every
//! key is `<collection tag byte><key>`. Store-wide metadata (tombstones of
//! dropped workspaces) lives in the tree `cairn:meta`; system namespaces
//! ([`Store::system`]) in trees `sys:<name>`, keyed like a workspace. One tree per workspace
//! makes dropping a workspace a single `drop_tree` and keeps a batch on a single
//! tree, which sled applies atomically.
//!
//! Durability: sled buffers writes; [`SledStore::sync`] calls `Db::flush`, which
//! fsyncs. Concurrent syncs are coalesced by [`GroupCommit`]: the first waiter
//! flushes on behalf of everyone who applied a write before the flush started.
//! [`SledStore::sync_later`] is the same commit for async callers: it parks
//! no thread; the store's flusher thread (`cairn-flush`) flushes on their
//! behalf, coalesced with the blocking syncs, and completes their futures.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

use crate::{
    Collection, Durable, KeyValue, Store, StoreError, WorkspaceStore, WriteBatch, WriteOp,
    prefix_successor,
};

const WORKSPACE_TREE_PREFIX: &str = "ws:";
const META_TREE: &str = "cairn:meta";
const SYSTEM_TREE_PREFIX: &str = "sys:";

/// sled-backed [`Store`].
///
/// ```
/// use cairn_store::{Collection, SledStore, Store, WriteBatch};
/// let dir = tempfile::tempdir()?;
/// let store = SledStore::open(dir.path())?;
/// let ws = store.workspace("acme")?;
/// let mut batch = WriteBatch::default();
/// batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
/// ws.apply(batch)?;
/// store.sync()?;
/// assert_eq!(ws.get(Collection::State, b"k")?, Some(b"v".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SledStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The data directory (the database is in `dir/sled`).
    dir: PathBuf,
    cache_bytes: u64,
    /// The database in use. Every operation holds it shared for its
    /// duration; an online rewrite ([`SledStore::compact`]) holds it
    /// exclusively while it copies the live data into fresh files and swaps
    /// them in, so no operation ever sees a database that is going away.
    /// A std-style lock: operations are short and never nest it.
    /// `None` only if the store could not be reopened after a rewrite:
    /// every operation then fails, naming why.
    live: Arc<RwLock<Option<DbState>>>,
    commit: Arc<GroupCommit>,
    /// The flusher thread of [`Store::sync_later`]; joined on drop.
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// How many times each tree was dropped: a handle opened before a drop
    /// may not create its tree again ([`StoreError::Erased`]).
    drops: Arc<Mutex<HashMap<String, u64>>>,
}

/// One open sled database and the handles cairn holds into it. Nothing
/// outside it keeps a `sled::Tree`: dropping it closes the database.
#[derive(Debug)]
struct DbState {
    db: sled::Db,
    meta: sled::Tree,
    /// The trees opened so far, by name (read on every operation; written
    /// when a tree is first opened, created or dropped).
    trees: RwLock<HashMap<String, sled::Tree>>,
}

impl DbState {
    fn open(db: sled::Db) -> Result<DbState, StoreError> {
        let meta = db.open_tree(META_TREE)?;
        Ok(DbState {
            db,
            meta,
            trees: RwLock::new(HashMap::new()),
        })
    }

    /// The tree `name`, created if it does not exist (a write).
    fn tree(&self, name: &str) -> Result<sled::Tree, StoreError> {
        if let Some(tree) = self.trees.read().get(name) {
            return Ok(tree.clone());
        }
        let mut trees = self.trees.write();
        if let Some(tree) = trees.get(name) {
            return Ok(tree.clone());
        }
        let tree = self.db.open_tree(name)?;
        trees.insert(name.to_owned(), tree.clone());
        Ok(tree)
    }

    /// The tree `name` if it exists; `None` creates nothing (a read).
    fn existing_tree(&self, name: &str) -> Result<Option<sled::Tree>, StoreError> {
        if let Some(tree) = self.trees.read().get(name) {
            return Ok(Some(tree.clone()));
        }
        // Checked and opened under the write lock: a drop cannot come
        // between (and a dropped tree is never opened, so never recreated).
        let mut trees = self.trees.write();
        if let Some(tree) = trees.get(name) {
            return Ok(Some(tree.clone()));
        }
        if !self
            .db
            .tree_names()
            .iter()
            .any(|n| n.as_ref() == name.as_bytes())
        {
            return Ok(None);
        }
        let tree = self.db.open_tree(name)?;
        trees.insert(name.to_owned(), tree.clone());
        Ok(Some(tree))
    }

    fn drop_tree(&self, name: &str) -> Result<bool, StoreError> {
        let mut trees = self.trees.write();
        trees.remove(name);
        Ok(self.db.drop_tree(name)?)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.commit.close();
        if let Some(thread) = self.flusher.lock().take() {
            let _ = thread.join();
        }
    }
}

impl SledStore {
    /// Opens (or creates) a store in `dir`, with the default page cache
    /// ([`crate::DEFAULT_CACHE_MB`]).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with_cache(dir, crate::DEFAULT_CACHE_MB << 20)
    }

    /// Opens (or creates) a store in `dir` whose page cache holds about
    /// `cache_bytes`.
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
            path: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        private_dir(dir)?;
        finish_rewrite(dir)?;
        let db = open_db(&live_config(dir, cache_bytes), dir, "")?;
        let live = Arc::new(RwLock::new(Some(DbState::open(db)?)));
        private_files(dir)?;
        let commit = Arc::new(GroupCommit::default());
        let flusher = {
            let (commit, live) = (commit.clone(), live.clone());
            std::thread::Builder::new()
                .name("cairn-flush".to_owned())
                .spawn(move || commit.run_flusher(|| flush_live(&live)))
                .map_err(|e| StoreError::Open {
                    path: dir.display().to_string(),
                    reason: format!("cannot start the flusher thread: {e}"),
                })?
        };
        Ok(SledStore {
            inner: Arc::new(Inner {
                dir: dir.to_owned(),
                cache_bytes,
                live,
                commit,
                flusher: Mutex::new(Some(flusher)),
                drops: Arc::new(Mutex::new(HashMap::new())),
            }),
        })
    }

    /// Rewrites the open store into fresh files that hold only what is
    /// live, swaps them in and removes the old files, while the store stays
    /// open: what [`Store::compact`] does on sled, and how erased bytes
    /// leave the data directory without a restart.
    ///
    /// sled is log-structured: a removed value stays in its old segment
    /// until sled reclaims the segment, lazily, and a reclaimed segment is
    /// reused without being cleared, so nothing short of new files removes
    /// it. Every operation waits while the copy runs (the store is paused,
    /// not closed: about the time to read and write what is live). Steps,
    /// crash-safe at each: the live data is copied into `sled.rewrite`,
    /// made durable and marked complete; the database is closed; the copy
    /// is swapped in by two renames (which the next open would finish,
    /// too); the old files are removed; the copy is opened.
    ///
    /// ```
    /// use cairn_store::{Collection, SledStore, Store, WriteBatch};
    /// let dir = tempfile::tempdir()?;
    /// let store = SledStore::open(dir.path())?;
    /// let ws = store.workspace("acme")?;
    /// let mut batch = WriteBatch::default();
    /// batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
    /// ws.apply(batch)?;
    /// store.compact()?;
    /// assert_eq!(ws.get(Collection::State, b"k")?, Some(b"v".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rewrite_online(&self) -> Result<RewriteReport, StoreError> {
        let dir = &self.inner.dir;
        let live_dir = dir.join("sled");
        let fresh = dir.join(REWRITE_DIR);
        let io = |what: &str, e: std::io::Error| StoreError::Open {
            path: dir.display().to_string(),
            reason: format!("rewriting the store: {what}: {e}"),
        };
        let mut live = self.inner.live.write();
        let Some(state) = live.as_ref() else {
            return Err(closed());
        };
        state.db.flush()?;
        let bytes_before = dir_bytes(&live_dir);
        if fresh.exists() {
            std::fs::remove_dir_all(&fresh).map_err(|e| io("removing an old copy", e))?;
        }
        let trees = {
            let copy = open_db(
                &sled::Config::new().path(&fresh).flush_every_ms(None),
                dir,
                "",
            )?;
            let export = state.db.export();
            let trees = export.len();
            copy.import(export);
            copy.flush()?;
            trees
        };
        wait_closed(&fresh).map_err(|e| io("closing the copy", e))?;
        std::fs::write(fresh.join(REWRITE_MARK), b"complete\n")
            .map_err(|e| io("marking the copy complete", e))?;
        sync_dir(&fresh).map_err(|e| io("syncing the copy", e))?;
        // The old database is closed (nothing else holds a handle into it)
        // before its directory is renamed: no late write of it can land in
        // the new one.
        drop(live.take());
        let reopened = wait_closed(&live_dir)
            .map_err(|e| io("closing the old files", e))
            .and_then(|()| finish_rewrite(dir))
            .and_then(|()| open_db(&live_config(dir, self.inner.cache_bytes), dir, ""))
            .and_then(DbState::open);
        match reopened {
            Ok(state) => *live = Some(state),
            Err(e) => {
                tracing::error!(error = %e, "the store could not be reopened after its rewrite: every operation fails until a restart");
                return Err(e);
            }
        }
        drop(live);
        private_files(dir)?;
        Ok(RewriteReport {
            trees,
            bytes_before,
            bytes_after: dir_bytes(&live_dir),
        })
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        let live = self.inner.live.read();
        Ok(live.as_ref().ok_or_else(closed)?.db.size_on_disk()?)
    }

    /// Rewrites the store in `dir` into fresh files that hold only what is
    /// live, then removes the old files. sled is log-structured: a removed
    /// or overwritten value stays in its old log segment until sled
    /// reclaims the segment, which it does lazily; after a `forget`, this
    /// is how the erased bytes leave the data directory.
    ///
    /// Offline: the store must not be open (sled's file lock refuses a
    /// second opener, with an error naming the directory). Crash-safe: the
    /// copy is made in `sled.rewrite`, marked complete, then swapped in by
    /// two renames; an interrupted rewrite is finished (or discarded, if
    /// the copy was not complete) by the next open or rewrite. Removing a
    /// file does not overwrite its blocks on the device: see
    /// docs/DURABILITY.md.
    ///
    /// ```
    /// use cairn_store::{Collection, SledStore, Store, WriteBatch};
    /// let dir = tempfile::tempdir()?;
    /// {
    ///     let store = SledStore::open(dir.path())?;
    ///     let mut batch = WriteBatch::default();
    ///     batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
    ///     store.workspace("acme")?.apply(batch)?;
    ///     store.sync()?;
    /// }
    /// let report = SledStore::rewrite(dir.path())?;
    /// assert!(report.trees >= 2);
    /// let store = SledStore::open(dir.path())?;
    /// assert_eq!(store.workspace("acme")?.get(Collection::State, b"k")?, Some(b"v".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rewrite(dir: &Path) -> Result<RewriteReport, StoreError> {
        let live = dir.join("sled");
        let fresh = dir.join(REWRITE_DIR);
        finish_rewrite(dir)?;
        if !live.exists() {
            return Err(StoreError::Open {
                path: dir.display().to_string(),
                reason: "no store to rewrite here".to_owned(),
            });
        }
        let io = |what: &str, e: std::io::Error| StoreError::Open {
            path: dir.display().to_string(),
            reason: format!("{what}: {e}"),
        };
        let bytes_before = dir_bytes(&live);
        let trees = {
            let source = open_db(
                &sled::Config::new().path(&live).flush_every_ms(None),
                dir,
                " (is a cairn process using this data dir?)",
            )?;
            let copy = open_db(
                &sled::Config::new().path(&fresh).flush_every_ms(None),
                dir,
                "",
            )?;
            let export = source.export();
            let trees = export.len();
            copy.import(export);
            copy.flush()?;
            trees
        };
        std::fs::write(fresh.join(REWRITE_MARK), b"complete\n")
            .map_err(|e| io("marking the copy complete", e))?;
        sync_dir(&fresh).map_err(|e| io("syncing the copy", e))?;
        finish_rewrite(dir)?;
        Ok(RewriteReport {
            trees,
            bytes_before,
            bytes_after: dir_bytes(&live),
        })
    }
}

/// What [`SledStore::rewrite`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct RewriteReport {
    /// Trees copied (workspaces, system namespaces, metadata).
    pub trees: usize,
    /// Bytes of the store's files before.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
}

const REWRITE_DIR: &str = "sled.rewrite";
const REWRITE_OLD: &str = "sled.old";
const REWRITE_MARK: &str = "REWRITE_COMPLETE";

/// Finishes or discards a rewrite a crash interrupted: an incomplete copy
/// is removed; a complete one replaces the store (two renames); the old
/// files are removed last.
/// Opens the sled database `config` names, for the store in `dir`. sled's
/// I/O threads of a database just dropped in this process may hold the
/// directory's lock for a moment: retry on that error only, for up to two
/// seconds. Another process holding the lock still fails, with sled's
/// message and `hint`.
fn open_db(config: &sled::Config, dir: &Path, hint: &str) -> Result<sled::Db, StoreError> {
    let mut attempts = 0;
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(e) if attempts < 80 && e.to_string().contains("could not acquire lock") => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            Err(e) => {
                return Err(StoreError::Open {
                    path: dir.display().to_string(),
                    reason: format!("{e}{hint}"),
                });
            }
        }
    }
}

fn finish_rewrite(dir: &Path) -> Result<(), StoreError> {
    let live = dir.join("sled");
    let fresh = dir.join(REWRITE_DIR);
    let old = dir.join(REWRITE_OLD);
    let io = |what: &str, e: std::io::Error| StoreError::Open {
        path: dir.display().to_string(),
        reason: format!("finishing a store rewrite: {what}: {e}"),
    };
    if fresh.exists() {
        if fresh.join(REWRITE_MARK).exists() {
            if live.exists() {
                std::fs::rename(&live, &old).map_err(|e| io("moving the old files aside", e))?;
            }
            std::fs::rename(&fresh, &live).map_err(|e| io("moving the copy in", e))?;
            sync_dir(dir).map_err(|e| io("syncing the data dir", e))?;
        } else {
            std::fs::remove_dir_all(&fresh).map_err(|e| io("removing an incomplete copy", e))?;
        }
    }
    let mark = live.join(REWRITE_MARK);
    if mark.exists() {
        std::fs::remove_file(&mark).map_err(|e| io("removing the mark", e))?;
    }
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(|e| io("removing the old files", e))?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Bytes of the files under `dir` (0 when unreadable).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(read) = std::fs::read_dir(dir) else {
        return 0;
    };
    read.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

fn tree_name(workspace: &str) -> String {
    format!("{WORKSPACE_TREE_PREFIX}{workspace}")
}

/// The configuration the live database is opened with.
fn live_config(dir: &Path, cache_bytes: u64) -> sled::Config {
    sled::Config::new()
        .path(dir.join("sled"))
        .cache_capacity(cache_bytes)
        // cairn controls durability itself: every acknowledged write is
        // followed by `sync`, so sled's periodic flusher is not needed.
        .flush_every_ms(None)
}

/// The error of every operation on a store that could not be reopened
/// after a rewrite (logged when it happened).
fn closed() -> StoreError {
    StoreError::Sled(sled::Error::Io(std::io::Error::other(
        "the store could not be reopened after an online rewrite (see the log); restart cairn",
    )))
}

/// Waits (up to five seconds) until no one holds the lock of the sled
/// database in `db_dir`: a database dropped in this process has closed its
/// files once its lock is free (sled's I/O threads may outlive the drop
/// for a moment).
fn wait_closed(db_dir: &Path) -> std::io::Result<()> {
    let file = std::fs::File::open(db_dir.join("db"))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match file.try_lock() {
            Ok(()) => return file.unlock(),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(std::io::Error::other(format!(
                    "{} is still open after 5 s",
                    db_dir.display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Flushes the live database (the group commit's flush).
fn flush_live(live: &RwLock<Option<DbState>>) -> sled::Result<()> {
    match live.read().as_ref() {
        Some(state) => flush(&state.db),
        None => Err(sled::Error::Io(std::io::Error::other(
            "the store could not be reopened after an online rewrite",
        ))),
    }
}

impl SledStore {
    /// Runs `f` on the live database, held shared.
    fn with_live<T>(
        &self,
        f: impl FnOnce(&DbState) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let live = self.inner.live.read();
        f(live.as_ref().ok_or_else(closed)?)
    }

    fn handle(&self, tree: String) -> Arc<dyn WorkspaceStore> {
        let drops = self.inner.drops.lock().get(&tree).copied().unwrap_or(0);
        Arc::new(SledWorkspace {
            name: tree,
            live: self.inner.live.clone(),
            drops,
            dropped: self.inner.drops.clone(),
        })
    }
}

impl Store for SledStore {
    /// A handle on `workspace`. Nothing is created until the first write
    /// through it: a read of a workspace that does not exist finds nothing
    /// and leaves no trace.
    fn workspace(&self, workspace: &str) -> Result<Arc<dyn WorkspaceStore>, StoreError> {
        Ok(self.handle(tree_name(workspace)))
    }

    fn has_workspace(&self, workspace: &str) -> Result<bool, StoreError> {
        let name = tree_name(workspace);
        self.with_live(|live| {
            Ok(live
                .db
                .tree_names()
                .iter()
                .any(|n| n.as_ref() == name.as_bytes()))
        })
    }

    fn workspaces(&self) -> Result<Vec<String>, StoreError> {
        self.with_live(|live| {
            let mut names: Vec<String> = live
                .db
                .tree_names()
                .iter()
                .filter_map(|n| std::str::from_utf8(n).ok())
                .filter_map(|n| n.strip_prefix(WORKSPACE_TREE_PREFIX))
                .map(str::to_owned)
                .collect();
            names.sort();
            Ok(names)
        })
    }

    fn drop_workspace(&self, workspace: &str) -> Result<bool, StoreError> {
        let name = tree_name(workspace);
        *self.inner.drops.lock().entry(name.clone()).or_default() += 1;
        self.with_live(|live| live.drop_tree(&name))
    }

    fn meta_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.with_live(|live| Ok(live.meta.get(key)?.map(|v| v.to_vec())))
    }

    fn meta_scan_prefix(&self, prefix: &[u8]) -> Result<Vec<KeyValue>, StoreError> {
        self.with_live(|live| {
            live.meta
                .scan_prefix(prefix)
                .map(|kv| {
                    kv.map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .map_err(StoreError::from)
                })
                .collect()
        })
    }

    fn meta_put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.with_live(|live| {
            live.meta.insert(key, value)?;
            Ok(())
        })
    }

    fn meta_delete(&self, key: &[u8]) -> Result<(), StoreError> {
        self.with_live(|live| {
            live.meta.remove(key)?;
            Ok(())
        })
    }

    fn system(&self, name: &str) -> Result<Arc<dyn WorkspaceStore>, StoreError> {
        Ok(self.handle(format!("{SYSTEM_TREE_PREFIX}{name}")))
    }

    fn backend(&self) -> crate::StorageBackend {
        crate::StorageBackend::Sled
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.inner.commit.sync(|| flush_live(&self.inner.live))
    }

    fn buffered(&self) -> bool {
        true
    }

    fn sync_later(&self) -> Option<Durable> {
        Some(self.inner.commit.later())
    }

    fn compact(&self) -> Result<Option<RewriteReport>, StoreError> {
        self.rewrite_online().map(Some)
    }
}

/// A handle on one tree (a workspace's, or a system namespace's). It holds
/// no `sled::Tree` itself: each call finds the tree in the live database,
/// so a handle outlives an online rewrite.
#[derive(Debug)]
struct SledWorkspace {
    /// The tree's name (`ws:<id>`, `sys:<name>`).
    name: String,
    live: Arc<RwLock<Option<DbState>>>,
    /// The tree's drop count when this handle was opened (see
    /// [`Inner::drops`]).
    drops: u64,
    dropped: Arc<Mutex<HashMap<String, u64>>>,
}

impl SledWorkspace {
    /// Runs `f` on the tree if it exists; `absent` when it does not (a
    /// read creates nothing).
    fn read<T>(
        &self,
        absent: T,
        f: impl FnOnce(&sled::Tree) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let live = self.live.read();
        match live
            .as_ref()
            .ok_or_else(closed)?
            .existing_tree(&self.name)?
        {
            Some(tree) => f(&tree),
            None => Ok(absent),
        }
    }
}

fn tagged(collection: Collection, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(collection.tag());
    out.extend_from_slice(key);
    out
}

impl WorkspaceStore for SledWorkspace {
    fn workspace(&self) -> &str {
        &self.name
    }

    fn get(&self, collection: Collection, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(None, |tree| {
            Ok(tree.get(tagged(collection, key))?.map(|v| v.to_vec()))
        })
    }

    fn scan_prefix(
        &self,
        collection: Collection,
        prefix: &[u8],
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.read(Vec::new(), |tree| {
            tree.scan_prefix(tagged(collection, prefix))
                .map(untagged)
                .collect()
        })
    }

    fn scan_prefix_from(
        &self,
        collection: Collection,
        prefix: &[u8],
        start: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.read(Vec::new(), |tree| {
            let tagged_prefix = tagged(collection, prefix);
            let mut lower = tagged_prefix.clone();
            lower.extend_from_slice(start);
            let range = match prefix_successor(&tagged_prefix) {
                Some(upper) => tree.range(lower..upper),
                None => tree.range(lower..),
            };
            range.take(limit).map(untagged).collect()
        })
    }

    fn scan_prefix_rev(
        &self,
        collection: Collection,
        prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.read(Vec::new(), |tree| {
            tree.scan_prefix(tagged(collection, prefix))
                .rev()
                .take(limit)
                .map(untagged)
                .collect()
        })
    }

    fn last_with_prefix(
        &self,
        collection: Collection,
        prefix: &[u8],
    ) -> Result<Option<KeyValue>, StoreError> {
        self.read(None, |tree| {
            // One seek: the greatest key below the prefix's successor.
            // sled's reverse iterators are much slower than `get_lt`.
            let start = tagged(collection, prefix);
            let found = match prefix_successor(&start) {
                Some(upper) => tree.get_lt(upper)?,
                None => tree.last()?,
            };
            Ok(found
                .filter(|(k, _)| k.starts_with(&start))
                .map(|(k, v)| (k[1..].to_vec(), v.to_vec())))
        })
    }

    fn apply(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let live = self.live.read();
        let state = live.as_ref().ok_or_else(closed)?;
        // Deletes alone create nothing: only a put makes a tree exist.
        let creates = batch
            .ops()
            .iter()
            .any(|op| matches!(op, WriteOp::Put { .. }));
        let tree = match creates {
            true => {
                if self.dropped.lock().get(&self.name).copied().unwrap_or(0) > self.drops {
                    return Err(StoreError::Erased {
                        workspace: self
                            .name
                            .strip_prefix(WORKSPACE_TREE_PREFIX)
                            .unwrap_or(&self.name)
                            .to_owned(),
                    });
                }
                state.tree(&self.name)?
            }
            false => match state.existing_tree(&self.name)? {
                Some(tree) => tree,
                None => return Ok(()),
            },
        };
        // One write is atomic by itself: it skips the batch manifest, which
        // sled writes to the log as an entry of its own, costing a second
        // write and sync.
        let plain = batch.len() == 1;
        let writes = batch.into_ops().into_iter().map(|op| {
            let (collection, key, value) = op.into_parts();
            (tagged(collection, &key), value)
        });
        if plain {
            for (key, value) in writes {
                match value {
                    Some(value) => tree.insert(key, value)?,
                    None => tree.remove(key)?,
                };
            }
            return Ok(());
        }
        let mut sled_batch = sled::Batch::default();
        for (key, value) in writes {
            match value {
                Some(value) => sled_batch.insert(key, value),
                None => sled_batch.remove(key),
            }
        }
        tree.apply_batch(sled_batch)?;
        Ok(())
    }
}

/// A pair read from the tree, without its collection tag byte.
fn untagged(kv: sled::Result<(sled::IVec, sled::IVec)>) -> Result<KeyValue, StoreError> {
    kv.map(|(k, v)| (k[1..].to_vec(), v.to_vec()))
        .map_err(StoreError::from)
}

/// Writes sled's buffers and fsyncs them: what a group commit's leader runs.
fn flush(db: &sled::Db) -> sled::Result<()> {
    db.flush().map(|_| ())
}

/// The error a ticket gets from the failed flush that covered it (`reason`:
/// that flush's error, shared by every ticket it covered).
pub(super) fn flush_failed(reason: String) -> StoreError {
    StoreError::Sled(sled::Error::Io(std::io::Error::other(reason)))
}

/// Coalesces concurrent flushes.
///
/// Each caller takes a ticket *after* its write was applied. A flush started
/// after ticket `t` was issued covers every write with a ticket `≤ t`. The first
/// caller who finds no flush running becomes the flusher for everyone waiting;
/// the others sleep on the condition variable until `flushed ≥ their ticket`.
/// An async caller ([`GroupCommit::later`]) leaves its ticket with a sender
/// and wakes the flusher thread ([`GroupCommit::run_flusher`]), which leads
/// the same way on its behalf; whichever flush covers a ticket completes it.
///
/// Why a std-style blocking mutex: the critical sections are a few integer
/// updates; the flush itself runs with the lock released.
#[derive(Debug, Default)]
struct GroupCommit {
    state: Mutex<CommitState>,
    done: Condvar,
    /// Wakes the flusher thread: an async ticket waits, or the store closes.
    pending: Condvar,
}

#[derive(Debug, Default)]
struct CommitState {
    issued: u64,
    flushed: u64,
    flushing: bool,
    /// The error of the last failed flush, handed to everyone it covered.
    failed_at: Option<(u64, String)>,
    /// Async tickets not yet covered by a flush, in ticket order.
    waiters: Vec<(u64, tokio::sync::oneshot::Sender<Result<(), String>>)>,
    /// The store is closing: the flusher covers what waits, then exits.
    closed: bool,
}

impl GroupCommit {
    fn sync(&self, flush: impl Fn() -> sled::Result<()>) -> Result<(), StoreError> {
        let mut state = self.state.lock();
        state.issued += 1;
        let ticket = state.issued;
        self.settle(&mut state, ticket, &flush)
    }

    /// A ticket for the writes applied so far, completed by a later flush.
    fn later(&self) -> Durable {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut state = self.state.lock();
        state.issued += 1;
        let ticket = state.issued;
        state.waiters.push((ticket, tx));
        self.pending.notify_one();
        Durable::new(rx)
    }

    /// Returns once a flush covered `ticket`, leading one if none runs.
    fn settle(
        &self,
        state: &mut MutexGuard<'_, CommitState>,
        ticket: u64,
        flush: &impl Fn() -> sled::Result<()>,
    ) -> Result<(), StoreError> {
        loop {
            if state.flushed >= ticket {
                return match &state.failed_at {
                    Some((covered, reason)) if *covered >= ticket => {
                        Err(flush_failed(reason.clone()))
                    }
                    _ => Ok(()),
                };
            }
            if !state.flushing {
                state.flushing = true;
                let target = state.issued;
                // A panic in the flush is a failed flush for the writers
                // waiting on it, not a flusher that never answers again.
                let result = MutexGuard::unlocked(state, || {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(flush)).unwrap_or_else(
                        |payload| {
                            Err(sled::Error::ReportableBug(format!(
                                "the flush panicked: {}",
                                crate::panic_message(payload.as_ref())
                            )))
                        },
                    )
                });
                state.flushing = false;
                state.flushed = target;
                let outcome = match result {
                    Ok(()) => {
                        if matches!(state.failed_at, Some((c, _)) if c <= target) {
                            state.failed_at = None;
                        }
                        Ok(())
                    }
                    Err(e) => {
                        let reason = e.to_string();
                        state.failed_at = Some((target, reason.clone()));
                        Err(reason)
                    }
                };
                let covered = state.waiters.partition_point(|(t, _)| *t <= target);
                for (_, waiter) in state.waiters.drain(..covered) {
                    // A caller that stopped waiting is not an error.
                    let _ = waiter.send(outcome.clone());
                }
                self.done.notify_all();
            } else {
                self.done.wait(state);
            }
        }
    }

    /// The flusher thread: covers every async ticket, until the store
    /// closes and nothing waits.
    fn run_flusher(&self, flush: impl Fn() -> sled::Result<()>) {
        let mut state = self.state.lock();
        loop {
            if let Some(&(ticket, _)) = state.waiters.last() {
                // Its error went to the waiters it covered.
                let _ = self.settle(&mut state, ticket, &flush);
            } else if state.closed {
                return;
            } else {
                self.pending.wait(&mut state);
            }
        }
    }

    /// Asks the flusher thread to exit once nothing waits.
    fn close(&self) {
        self.state.lock().closed = true;
        self.pending.notify_all();
    }
}

/// Makes every file under `dir` readable and writable by its owner only
/// (0600; directories 0700), whatever mode an earlier version, a copy or
/// the process's umask gave them. Files sled makes later are created inside
/// the 0700 directory (and `cairn` runs with umask 077).
fn private_files(dir: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let failed = |path: &Path, e: std::io::Error| StoreError::Open {
            path: path.display().to_string(),
            reason: format!("cannot make the data files private (0600): {e}"),
        };
        let mut pending = vec![dir.to_owned()];
        while let Some(next) = pending.pop() {
            for item in std::fs::read_dir(&next).map_err(|e| failed(&next, e))? {
                let item = item.map_err(|e| failed(&next, e))?;
                let path = item.path();
                // Not followed: a symlink's mode is not its target's.
                let kind = item.file_type().map_err(|e| failed(&path, e))?;
                let mode = if kind.is_dir() {
                    pending.push(path.clone());
                    0o700
                } else if kind.is_file() {
                    0o600
                } else {
                    continue;
                };
                let now = item.metadata().map_err(|e| failed(&path, e))?;
                if now.permissions().mode() & 0o777 != mode {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| failed(&path, e))?;
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Makes `dir` readable by its owner only (0700 on Unix): the store holds
/// every transcript, so the files in it (whatever mode sled gives them) must
/// not be reachable by other local users.
fn private_dir(dir: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            StoreError::Open {
                path: dir.display().to_string(),
                reason: format!("cannot make the data directory private (0700): {e}"),
            }
        })?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspaces_are_separate_trees() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = SledStore::open(dir.path())?;
        let a = store.workspace("a")?;
        let b = store.workspace("b")?;
        let mut batch = WriteBatch::default();
        batch.put(Collection::State, b"k".to_vec(), b"1".to_vec());
        a.apply(batch)?;
        assert_eq!(a.get(Collection::State, b"k")?, Some(b"1".to_vec()));
        assert_eq!(b.get(Collection::State, b"k")?, None);
        // `b` was only read: it does not exist.
        assert_eq!(store.workspaces()?, vec!["a".to_owned()]);
        let mut batch = WriteBatch::default();
        batch.put(Collection::State, b"k".to_vec(), b"2".to_vec());
        b.apply(batch)?;
        assert_eq!(store.workspaces()?, vec!["a".to_owned(), "b".to_owned()]);
        assert!(store.drop_workspace("a")?);
        assert!(!store.has_workspace("a")?);
        assert_eq!(store.workspaces()?, vec!["b".to_owned()]);
        Ok(())
    }

    /// Issue 78: a read of a workspace that does not exist, or a batch of
    /// deletes alone, creates nothing; the first put creates it.
    #[test]
    fn reads_create_no_workspace() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = SledStore::open(dir.path())?;
        let ghost = store.workspace("ghost")?;
        assert_eq!(ghost.get(Collection::Sessions, b"nope")?, None);
        assert!(ghost.scan_prefix(Collection::Turns, b"")?.is_empty());
        assert_eq!(ghost.last_with_prefix(Collection::Turns, b"")?, None);
        let mut deletes = WriteBatch::default();
        deletes.delete(Collection::Sessions, b"nope".to_vec());
        ghost.apply(deletes)?;
        assert!(!store.has_workspace("ghost")?);
        assert!(store.workspaces()?.is_empty());
        let mut put = WriteBatch::default();
        put.put(Collection::Sessions, b"s1".to_vec(), b"{}".to_vec());
        ghost.apply(put)?;
        assert_eq!(store.workspaces()?, ["ghost"]);
        // A dropped workspace stays dropped for a handle opened before: its
        // writes fail rather than bring it back; a handle opened since
        // creates it anew.
        assert!(store.drop_workspace("ghost")?);
        assert_eq!(ghost.get(Collection::Sessions, b"s1")?, None);
        let mut late = WriteBatch::default();
        late.put(Collection::Sessions, b"s2".to_vec(), b"{}".to_vec());
        assert!(matches!(
            ghost.apply(late.clone()),
            Err(StoreError::Erased { .. })
        ));
        assert!(!store.has_workspace("ghost")?);
        store.workspace("ghost")?.apply(late)?;
        assert_eq!(store.workspaces()?, ["ghost"]);
        Ok(())
    }

    /// The bytes of `needle` in any file under `dir`.
    fn on_disk(dir: &Path, needle: &[u8]) -> anyhow::Result<bool> {
        let mut pending = vec![dir.to_owned()];
        while let Some(next) = pending.pop() {
            for item in std::fs::read_dir(&next)? {
                let path = item?.path();
                if path.is_dir() {
                    pending.push(path);
                } else if std::fs::read(&path)?
                    .windows(needle.len())
                    .any(|w| w == needle)
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Issue 78, item 7: an online rewrite removes the bytes of what was
    /// deleted from the files while the store stays open; handles opened
    /// before it go on working, and what is written after it survives a
    /// reopen.
    #[test]
    fn an_online_rewrite_removes_deleted_bytes_and_keeps_handles() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = SledStore::open(dir.path())?;
        let ws = store.workspace("a")?;
        let log = store.system("log")?;
        let secret = b"Zanzibar-quokka-7731";
        let mut batch = WriteBatch::default();
        for i in 0..50u8 {
            batch.put(Collection::Turns, vec![b'x', i], secret.repeat(4));
        }
        batch.put(Collection::State, b"kept".to_vec(), b"still here".to_vec());
        ws.apply(batch)?;
        let mut batch = WriteBatch::default();
        batch.put(Collection::State, b"n".to_vec(), b"7".to_vec());
        log.apply(batch)?;
        store.meta_put(b"m", b"meta")?;
        store.sync()?;
        let mut batch = WriteBatch::default();
        for i in 0..50u8 {
            batch.delete(Collection::Turns, vec![b'x', i]);
        }
        ws.apply(batch)?;
        store.sync()?;
        // The check can fail: sled keeps the deleted values in its files.
        assert!(on_disk(dir.path(), secret)?);
        let report = store.compact()?.expect("sled rewrites its files");
        assert!(report.trees >= 3, "{report:?}");
        assert!(!on_disk(dir.path(), secret)?);
        assert!(!dir.path().join(REWRITE_DIR).exists() && !dir.path().join(REWRITE_OLD).exists());
        assert_eq!(
            ws.get(Collection::State, b"kept")?,
            Some(b"still here".to_vec())
        );
        assert_eq!(log.get(Collection::State, b"n")?, Some(b"7".to_vec()));
        assert_eq!(store.meta_get(b"m")?, Some(b"meta".to_vec()));
        let mut batch = WriteBatch::default();
        batch.put(
            Collection::State,
            b"after".to_vec(),
            b"written after".to_vec(),
        );
        ws.apply(batch)?;
        store.sync()?;
        drop((ws, log, store));
        let store = SledStore::open(dir.path())?;
        let ws = store.workspace("a")?;
        assert_eq!(
            ws.get(Collection::State, b"after")?,
            Some(b"written after".to_vec())
        );
        assert_eq!(
            ws.get(Collection::State, b"kept")?,
            Some(b"still here".to_vec())
        );
        Ok(())
    }

    #[test]
    fn last_with_prefix_stays_inside_the_prefix() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = SledStore::open(dir.path())?;
        let ws = store.workspace("a")?;
        let mut batch = WriteBatch::default();
        for key in [&b"s1\0a"[..], b"s1\0b", b"s10\0z", b"s2\0c"] {
            batch.put(Collection::Turns, key.to_vec(), key.to_vec());
        }
        batch.put(Collection::Entries, b"s1\0zz".to_vec(), Vec::new());
        ws.apply(batch)?;
        let last = |p: &[u8]| {
            ws.last_with_prefix(Collection::Turns, p)
                .map(|kv| kv.map(|(k, _)| k))
        };
        assert_eq!(last(b"s1\0")?, Some(b"s1\0b".to_vec()));
        assert_eq!(last(b"s10\0")?, Some(b"s10\0z".to_vec()));
        assert_eq!(last(b"s3\0")?, None);
        assert_eq!(last(b"")?, Some(b"s2\0c".to_vec()));
        assert_eq!(prefix_successor(&[1, 255]), Some(vec![2]));
        assert_eq!(prefix_successor(&[255]), None);
        Ok(())
    }

    #[test]
    fn concurrent_syncs_all_return() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = SledStore::open(dir.path())?;
        let ws = store.workspace("a")?;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u8)
                .map(|t| {
                    let (store, ws) = (&store, &ws);
                    s.spawn(move || -> Result<(), StoreError> {
                        for i in 0..50u8 {
                            let mut batch = WriteBatch::default();
                            batch.put(Collection::State, vec![t, i], vec![i]);
                            ws.apply(batch)?;
                            store.sync()?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                h.join().expect("writer thread panicked")?;
            }
            Ok::<(), StoreError>(())
        })?;
        assert_eq!(ws.scan_prefix(Collection::State, &[])?.len(), 400);
        Ok(())
    }

    #[test]
    fn async_and_blocking_syncs_complete_and_survive_a_reopen() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        {
            let store = SledStore::open(dir.path())?;
            let ws = store.workspace("a")?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()?;
            std::thread::scope(|s| {
                let blocking = s.spawn(|| -> Result<(), StoreError> {
                    for i in 0..50u8 {
                        let mut batch = WriteBatch::default();
                        batch.put(Collection::State, vec![0, i], vec![i]);
                        ws.apply(batch)?;
                        store.sync()?;
                    }
                    Ok(())
                });
                let tasks: Vec<_> = (1..=4u8)
                    .map(|t| {
                        let (store, ws) = (store.clone(), ws.clone());
                        runtime.spawn(async move {
                            for i in 0..50u8 {
                                let mut batch = WriteBatch::default();
                                batch.put(Collection::State, vec![t, i], vec![i]);
                                ws.apply(batch)?;
                                match store.sync_later() {
                                    Some(durable) => durable.await?,
                                    None => store.sync()?,
                                }
                            }
                            Ok::<(), StoreError>(())
                        })
                    })
                    .collect();
                runtime.block_on(async {
                    for task in tasks {
                        task.await??;
                    }
                    Ok::<(), anyhow::Error>(())
                })?;
                blocking.join().expect("writer thread panicked")?;
                Ok::<(), anyhow::Error>(())
            })?;
        }
        // Dropping the store stopped its flusher: the directory reopens,
        // and every acknowledged write is there.
        let store = SledStore::open(dir.path())?;
        assert_eq!(
            store
                .workspace("a")?
                .scan_prefix(Collection::State, &[])?
                .len(),
            250
        );
        Ok(())
    }

    #[test]
    fn a_failed_flush_fails_every_ticket_it_covered_and_only_those() -> anyhow::Result<()> {
        let commit = GroupCommit::default();
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        let early = commit.later();
        let failing = || Err(sled::Error::Io(std::io::Error::other("disk full")));
        let err = commit.sync(failing).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("disk full")));
        let err = runtime.block_on(early).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("disk full")));
        let late = commit.later();
        commit.sync(|| Ok(()))?;
        runtime.block_on(late)?;
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn the_data_dir_is_private() -> Result<(), Box<dyn std::error::Error>> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        let store = SledStore::open(&data)?;
        let mode = std::fs::metadata(&data)?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{mode:o}");
        store.meta_put(b"k", b"v")?;
        store.sync()?;
        drop(store);
        // A file an older version (or a copy) left readable by others is
        // made private at the next open.
        let loose = data.join("sled").join("conf");
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644))?;
        let _store = SledStore::open(&data)?;
        let mut files = 0;
        let mut pending = vec![data.clone()];
        while let Some(next) = pending.pop() {
            for item in std::fs::read_dir(&next)? {
                let item = item?;
                let mode = item.metadata()?.permissions().mode() & 0o777;
                if item.file_type()?.is_dir() {
                    assert_eq!(mode, 0o700, "{}: {mode:o}", item.path().display());
                    pending.push(item.path());
                } else {
                    files += 1;
                    assert_eq!(mode & 0o077, 0, "{}: {mode:o}", item.path().display());
                }
            }
        }
        assert!(files > 0);
        Ok(())
    }
}
