//! The PostgreSQL backend: several cairn nodes (or one that wants its data
//! in a database its operators already run) share one database.
//!
//! Layout (schema version [`SCHEMA_VERSION`], see [`MIGRATIONS`]):
//!
//! - `cairn_spaces (kind, name)`: every workspace (`kind` 0) and system
//!   namespace (`kind` 1, [`Store::system`]). [`Store::workspaces`] lists it.
//! - `cairn_kv (kind, space, collection, key, value)`: every pair, keyed by
//!   `(kind, space, collection, key)`; `collection` is the collection's tag
//!   byte ([`Collection::tag`]), `key` and `value` are `bytea`. A foreign key
//!   to `cairn_spaces` with `ON DELETE CASCADE` makes
//!   [`Store::drop_workspace`] one statement (so one transaction), and makes
//!   a write through a handle on a dropped workspace fail instead of
//!   resurrecting it.
//! - `cairn_meta (key, value)`: the store-wide metadata space.
//! - `cairn_migrations (version, applied_at)`: the schema versions applied.
//! - `cairn_nodes (node, url, lease_ms, started_at, heartbeat_at)` and
//!   `cairn_leases (space, owner, token, acquired_at, expires_at)`: the
//!   nodes of a cluster and which of them owns each workspace, with the
//!   fencing token every write checks (`leases.rs`, `docs/SCALING.md`).
//!
//! Order: `bytea` compares bytewise (`memcmp`, then the shorter first),
//! which is sled's order, so the ordered scans answer the same on both
//! backends. Prefix scans are ranges, `key >= prefix AND key < successor`
//! (no upper bound when the prefix is all `0xff`), served by the primary
//! key's index.
//!
//! Durability: every session runs with `synchronous_commit = on` (set at
//! connect, whatever the server's default), and [`WorkspaceStore::apply`] is
//! one transaction, so when `apply` returns the batch is committed and
//! flushed to the server's write-ahead log (and to synchronous standbys,
//! when the server has them). [`Store::sync`] therefore has nothing left to
//! do. The metadata writes ([`Store::meta_put`]) commit the same way.
//!
//! Threads: the traits are synchronous and are called from tokio's blocking
//! pool and from plain threads, where the blocking `postgres` client would
//! panic (it starts a runtime of its own). This store owns a small tokio
//! runtime (two workers, threads named `cairn-pg`) that runs the async
//! client and its pool; each call spawns its future there and waits on a
//! channel. Every future is bounded by the pool's wait and connect timeouts
//! and the server's `statement_timeout`, and a whole call by
//! [`PostgresConfig::call_timeout`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use parking_lot::RwLock;
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::{
    ClusterConfig, Collection, KeyValue, PostgresConfig, Store, StoreError, WorkspaceStore,
    WriteBatch, prefix_successor,
};

mod leases;

/// The schema version this binary writes and understands.
pub const SCHEMA_VERSION: i32 = 2;

/// The migrations, in order: `(version, SQL)`. Each runs once, inside the
/// start-up transaction (see [`PostgresStore::connect`]).
pub const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE cairn_spaces (
         kind smallint NOT NULL,
         name text NOT NULL,
         PRIMARY KEY (kind, name)
     );
     CREATE TABLE cairn_kv (
         kind smallint NOT NULL,
         space text NOT NULL,
         collection smallint NOT NULL,
         key bytea NOT NULL,
         value bytea NOT NULL,
         PRIMARY KEY (kind, space, collection, key),
         FOREIGN KEY (kind, space) REFERENCES cairn_spaces (kind, name) ON DELETE CASCADE
     );
     CREATE TABLE cairn_meta (
         key bytea PRIMARY KEY,
         value bytea NOT NULL
     );",
    ),
    (
        2,
        "CREATE TABLE cairn_nodes (
         node text PRIMARY KEY,
         url text NOT NULL,
         lease_ms bigint NOT NULL,
         started_at timestamptz NOT NULL,
         heartbeat_at timestamptz NOT NULL
     );
     CREATE TABLE cairn_leases (
         space text PRIMARY KEY,
         owner text NOT NULL,
         token bigint NOT NULL,
         acquired_at timestamptz NOT NULL,
         expires_at timestamptz NOT NULL
     );",
    ),
];

/// The advisory lock the start-up migration holds, so nodes starting at
/// once migrate one after the other (any constant; "cairn" in ASCII).
const MIGRATION_LOCK: i64 = 0x63_61_69_72_6e;

/// The advisory lock the process that has the database open holds for as
/// long as it runs (see [`PostgresStore::connect`]).
const WRITER_LOCK: i64 = 0x63_61_69_72_6e_77;

/// `cairn_spaces.kind` of a workspace.
const WORKSPACE: i16 = 0;
/// `cairn_spaces.kind` of a system namespace.
const SYSTEM: i16 = 1;

/// PostgreSQL-backed [`Store`]. Cheap to clone (shared inside).
///
/// ```no_run
/// use cairn_store::PostgresConfig;
/// use cairn_store::{Collection, PostgresStore, Store, WriteBatch};
/// let config = PostgresConfig {
///     url: "postgresql://cairn@127.0.0.1:5432/cairn".to_owned(),
///     ..PostgresConfig::default()
/// };
/// let store = PostgresStore::connect(&config)?;
/// let ws = store.workspace("acme")?;
/// let mut batch = WriteBatch::default();
/// batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
/// ws.apply(batch)?; // committed: nothing to sync
/// assert_eq!(ws.get(Collection::State, b"k")?, Some(b"v".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// `Some` until dropped (see the `Drop` impl).
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    call_timeout: Duration,
    /// Where the database is, without a password (for messages).
    target: String,
    /// How to open the connection that holds [`WRITER_LOCK`].
    pg: tokio_postgres::Config,
    /// That connection: while it is open, no other cairn process writes
    /// to this database. A std-style mutex: held for a cheap check, or
    /// across a reconnect that every writer must wait for anyway.
    writer: parking_lot::Mutex<Option<tokio_postgres::Client>>,
    /// Spaces this process created or found, so a handle does not ask the
    /// database on every open. A space dropped here is removed; one dropped
    /// by another node makes writes through it fail (foreign key).
    known: RwLock<HashSet<(i16, String)>>,
    /// How many times each space was dropped by this process: a handle
    /// opened before a drop may not create its space again.
    drops: parking_lot::Mutex<HashMap<(i16, String), u64>>,
    /// [`Store::compact`] runs `VACUUM FULL` rather than `VACUUM`.
    vacuum_full: bool,
    /// This node, when the database is shared by a cluster (`None`: this
    /// process has it to itself).
    cluster: Option<ClusterConfig>,
    /// In a cluster, the workspaces this node holds a lease on, with the
    /// lease's fencing token; every write to a workspace checks its token
    /// in its own transaction.
    fences: RwLock<HashMap<String, i64>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle may go away on a tokio thread (an actor's, an
        // HTTP worker's), where dropping a runtime would block and panic:
        // let its threads finish in the background instead.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .field("pool", &self.inner.pool.status())
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the database at `config.url`, then brings its schema to
    /// [`SCHEMA_VERSION`]: one transaction holding an advisory lock applies
    /// the missing [`MIGRATIONS`], so nodes that start at once migrate once.
    /// A database whose schema is newer than this binary knows is refused
    /// ([`StoreError::SchemaTooNew`]); an unreachable one is
    /// [`StoreError::Unavailable`] (retryable).
    pub fn connect(config: &PostgresConfig) -> Result<Self, StoreError> {
        PostgresStore::connect_node(config, &ClusterConfig::default())
    }

    /// [`PostgresStore::connect`] as node `cluster.node` of a cluster
    /// sharing the database (see [`Leases`](crate::Leases)); with
    /// `cluster` off, as the database's only process. Cluster nodes share
    /// the database's writer lock, so a process outside the cluster is
    /// refused while any node runs, and the other way round.
    pub fn connect_node(
        config: &PostgresConfig,
        cluster: &ClusterConfig,
    ) -> Result<Self, StoreError> {
        let mut pg = tokio_postgres::Config::from_str(&config.url)
            .map_err(|e| StoreError::Config(format!("storage.postgres.url: {e}")))?;
        let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
        pg.connect_timeout(connect_timeout);
        if pg.get_application_name().is_none() {
            pg.application_name("cairn");
        }
        // Session settings at connect: an acknowledgement means committed
        // and flushed (whatever the server's or the role's default), and no
        // statement runs unbounded.
        let mut options = pg.get_options().unwrap_or_default().to_owned();
        options.push_str(&format!(
            " -c synchronous_commit=on -c statement_timeout={} -c idle_in_transaction_session_timeout={}",
            config.statement_timeout_ms,
            config.statement_timeout_ms.saturating_mul(4)
        ));
        pg.options(options.trim());
        let target = describe(&pg);

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cairn-pg")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| StoreError::Open {
                path: target.clone(),
                reason: format!("cannot start the database client's runtime: {e}"),
            })?;
        let manager = Manager::from_config(
            pg.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(connect_timeout))
            .create_timeout(Some(connect_timeout))
            .recycle_timeout(Some(connect_timeout))
            .build()
            .map_err(|e| StoreError::Config(format!("storage.postgres: {e}")))?;
        let store = PostgresStore {
            inner: Arc::new(Inner {
                runtime: Some(runtime),
                pool,
                call_timeout: config.call_timeout(),
                target,
                pg,
                writer: parking_lot::Mutex::new(None),
                known: RwLock::new(HashSet::new()),
                vacuum_full: config.vacuum_full,
                drops: parking_lot::Mutex::new(HashMap::new()),
                cluster: cluster.enabled().then(|| cluster.clone()),
                fences: RwLock::new(HashMap::new()),
            }),
        };
        store.run("migrate", |pool| migrate(pool, SCHEMA_VERSION, MIGRATIONS))?;
        // A store of this process that was just dropped releases the lock
        // when the server sees its connection close, a moment later: retry
        // briefly on that error only. Another live process still fails.
        let mut attempts = 0;
        loop {
            match store.hold_writer_lock() {
                Err(StoreError::Locked { .. }) if attempts < 40 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => break other?,
            }
        }
        Ok(store)
    }

    /// Makes sure this process holds the database's writer lock, taking it
    /// (again, after a lost connection) if needed; every write asks first.
    ///
    /// Why: the stores' callers serialise a session's appends with
    /// in-process locks (docs/DURABILITY.md), which is sound while one
    /// process writes the database, the rule sled's file lock enforces on a
    /// data dir. This lock enforces it on a database: a second `cairn serve`
    /// or CLI command on it is refused with [`StoreError::Locked`]. The
    /// nodes of a cluster take the lock *shared* (they coordinate through
    /// workspace leases whose fencing tokens each write transaction
    /// checks), which still keeps every process outside the cluster out.
    /// The lock is a session-level advisory lock on a dedicated
    /// connection: the server releases it when that connection ends (the
    /// process exits or dies), so a crash leaves nothing to clean up.
    fn hold_writer_lock(&self) -> Result<(), StoreError> {
        let mut writer = self.inner.writer.lock();
        if writer.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(());
        }
        *writer = None;
        let pg = self.inner.pg.clone();
        let target = self.inner.target.clone();
        let take = if self.inner.cluster.is_some() {
            "SELECT pg_try_advisory_lock_shared($1)"
        } else {
            "SELECT pg_try_advisory_lock($1)"
        };
        let client = self.run("take the writer lock", move |_| async move {
            let op = "take the writer lock";
            let (client, connection) = pg.connect(NoTls).await.map_err(|e| classify(op, e))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "postgres: the writer lock's connection ended");
                }
            });
            let row = client
                .query_one(take, &[&WRITER_LOCK])
                .await
                .map_err(|e| classify(op, e))?;
            if column::<bool>(&row, 0, op)? {
                Ok(client)
            } else {
                Err(StoreError::Locked { target })
            }
        })?;
        *writer = Some(client);
        Ok(())
    }

    /// The fencing token a write to `space` of `kind` must check: `None`
    /// outside a cluster and for system namespaces; in a cluster, the
    /// token of this node's lease on the workspace, or
    /// [`StoreError::NotOwner`] when it holds none.
    fn fence(&self, kind: i16, space: &str) -> Result<Option<(String, i64)>, StoreError> {
        let Some(cluster) = &self.inner.cluster else {
            return Ok(None);
        };
        if kind != WORKSPACE {
            return Ok(None);
        }
        match self.inner.fences.read().get(space) {
            Some(token) => Ok(Some((cluster.node.clone(), *token))),
            None => Err(StoreError::NotOwner {
                workspace: space.to_owned(),
                node: cluster.node.clone(),
            }),
        }
    }

    /// After a write was fenced off: this node no longer holds the lease.
    fn fenced(&self, space: &str, token: i64) -> StoreError {
        let mut fences = self.inner.fences.write();
        if fences.get(space) == Some(&token) {
            fences.remove(space);
        }
        StoreError::Fenced {
            workspace: space.to_owned(),
            token,
        }
    }

    /// Where this store connects (host, port, database, user; never the
    /// password).
    pub fn target(&self) -> &str {
        &self.inner.target
    }

    /// The schema version of the database (0 before any migration).
    pub fn schema_version(&self) -> Result<i32, StoreError> {
        self.run("schema version", |pool| async move {
            let client = pool
                .get()
                .await
                .map_err(|e| pool_error("schema version", e))?;
            let row = client
                .query_one(
                    "SELECT coalesce(max(version), 0) FROM cairn_migrations",
                    &[],
                )
                .await
                .map_err(|e| classify("schema version", e))?;
            column(&row, 0, "schema version")
        })
    }

    /// Runs `job` on the store's runtime and waits for its answer on this
    /// thread, at most [`PostgresConfig::call_timeout`].
    fn run<T, F, Fut>(&self, op: &'static str, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Pool) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let Some(runtime) = &self.inner.runtime else {
            return Err(unavailable(op, "the store is shut down"));
        };
        let limit = self.inner.call_timeout;
        let future = job(self.inner.pool.clone());
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let answer = match tokio::time::timeout(limit, future).await {
                Ok(answer) => answer,
                Err(_) => Err(unavailable(
                    op,
                    &format!("no answer within {} ms", limit.as_millis()),
                )),
            };
            // The caller may have gone (its thread unwound): nothing to tell.
            let _ = tx.send(answer);
        });
        rx.recv()
            .map_err(|_| unavailable(op, "the database client's runtime stopped"))?
    }

    fn drop_count(&self, kind: i16, name: &str) -> u64 {
        self.inner
            .drops
            .lock()
            .get(&(kind, name.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Makes sure the space exists (created on first use, like a sled tree).
    fn ensure_space(&self, kind: i16, name: &str) -> Result<(), StoreError> {
        let key = (kind, name.to_owned());
        if self.inner.known.read().contains(&key) {
            return Ok(());
        }
        let owned = name.to_owned();
        self.run("open space", move |pool| async move {
            let client = pool.get().await.map_err(|e| pool_error("open space", e))?;
            client
                .execute(
                    "INSERT INTO cairn_spaces (kind, name) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&kind, &owned],
                )
                .await
                .map_err(|e| classify("open space", e))?;
            Ok(())
        })?;
        self.inner.known.write().insert(key);
        Ok(())
    }

    /// A handle on a space; the space is created by the first write
    /// through it ([`PostgresSpace::apply`]), so a read creates nothing.
    fn handle(&self, kind: i16, name: &str) -> Result<Arc<dyn WorkspaceStore>, StoreError> {
        let drops = self.drop_count(kind, name);
        Ok(Arc::new(PostgresSpace {
            store: self.clone(),
            kind,
            drops,
            space: name.to_owned(),
            label: match kind {
                SYSTEM => format!("sys:{name}"),
                _ => name.to_owned(),
            },
        }))
    }
}

/// Brings the schema to `binary` under the advisory lock, in one
/// transaction; refuses a newer database.
async fn migrate(
    pool: Pool,
    binary: i32,
    migrations: &'static [(i32, &'static str)],
) -> Result<(), StoreError> {
    let op = "migrate";
    let mut client = pool.get().await.map_err(|e| pool_error(op, e))?;
    let tx = client.transaction().await.map_err(|e| classify(op, e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| classify(op, e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cairn_migrations (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(|e| classify(op, e))?;
    let row = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM cairn_migrations",
            &[],
        )
        .await
        .map_err(|e| classify(op, e))?;
    let database: i32 = column(&row, 0, op)?;
    if database > binary {
        return Err(StoreError::SchemaTooNew { database, binary });
    }
    for (version, sql) in migrations {
        if *version <= database || *version > binary {
            continue;
        }
        tx.batch_execute(sql).await.map_err(|e| classify(op, e))?;
        tx.execute(
            "INSERT INTO cairn_migrations (version) VALUES ($1)",
            &[version],
        )
        .await
        .map_err(|e| classify(op, e))?;
        tracing::info!(version, "postgres: schema migrated");
    }
    tx.commit().await.map_err(|e| classify(op, e))
}

impl Store for PostgresStore {
    fn workspace(&self, workspace: &str) -> Result<Arc<dyn WorkspaceStore>, StoreError> {
        self.handle(WORKSPACE, workspace)
    }

    fn has_workspace(&self, workspace: &str) -> Result<bool, StoreError> {
        let name = workspace.to_owned();
        self.run("has workspace", move |pool| async move {
            let client = pool
                .get()
                .await
                .map_err(|e| pool_error("has workspace", e))?;
            let row = client
                .query_opt(
                    "SELECT 1 FROM cairn_spaces WHERE kind = $1 AND name = $2",
                    &[&WORKSPACE, &name],
                )
                .await
                .map_err(|e| classify("has workspace", e))?;
            Ok(row.is_some())
        })
    }

    fn workspaces(&self) -> Result<Vec<String>, StoreError> {
        self.run("list workspaces", |pool| async move {
            let op = "list workspaces";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            // Byte order, as sled lists trees (ids are ASCII anyway).
            let rows = client
                .query(
                    "SELECT name FROM cairn_spaces WHERE kind = $1 ORDER BY name COLLATE \"C\"",
                    &[&WORKSPACE],
                )
                .await
                .map_err(|e| classify(op, e))?;
            rows.iter().map(|r| column(r, 0, op)).collect()
        })
    }

    fn drop_workspace(&self, workspace: &str) -> Result<bool, StoreError> {
        self.hold_writer_lock()?;
        let fence = self.fence(WORKSPACE, workspace)?;
        self.inner
            .known
            .write()
            .remove(&(WORKSPACE, workspace.to_owned()));
        *self
            .inner
            .drops
            .lock()
            .entry((WORKSPACE, workspace.to_owned()))
            .or_default() += 1;
        let name = workspace.to_owned();
        let check = fence.clone();
        // One transaction: the fence, then the cascade removes every pair.
        let removed = self.run("drop workspace", move |pool| async move {
            let op = "drop workspace";
            let mut client = pool.get().await.map_err(|e| pool_error(op, e))?;
            let tx = client.transaction().await.map_err(|e| classify(op, e))?;
            if let Some((node, token)) = &check
                && !leases::holds(&tx, &name, node, *token).await?
            {
                return Ok(None);
            }
            let removed = tx
                .execute(
                    "DELETE FROM cairn_spaces WHERE kind = $1 AND name = $2",
                    &[&WORKSPACE, &name],
                )
                .await
                .map_err(|e| classify(op, e))?;
            tx.commit().await.map_err(|e| classify(op, e))?;
            Ok(Some(removed > 0))
        })?;
        match (removed, fence) {
            (Some(removed), _) => Ok(removed),
            (None, Some((_, token))) => Err(self.fenced(workspace, token)),
            (None, None) => Ok(false),
        }
    }

    fn meta_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_vec();
        self.run("meta get", move |pool| async move {
            let client = pool.get().await.map_err(|e| pool_error("meta get", e))?;
            let row = client
                .query_opt("SELECT value FROM cairn_meta WHERE key = $1", &[&key])
                .await
                .map_err(|e| classify("meta get", e))?;
            row.map(|r| column(&r, 0, "meta get")).transpose()
        })
    }

    fn meta_scan_prefix(&self, prefix: &[u8]) -> Result<Vec<KeyValue>, StoreError> {
        let lower = prefix.to_vec();
        let upper = prefix_successor(prefix);
        self.run("meta scan", move |pool| async move {
            let op = "meta scan";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            let rows = match upper {
                Some(upper) => client.query(
                    "SELECT key, value FROM cairn_meta WHERE key >= $1 AND key < $2 ORDER BY key",
                    &[&lower, &upper],
                ).await,
                None => client.query(
                    "SELECT key, value FROM cairn_meta WHERE key >= $1 ORDER BY key",
                    &[&lower],
                ).await,
            }
            .map_err(|e| classify(op, e))?;
            rows.iter().map(|r| pair(r, op)).collect()
        })
    }

    fn meta_put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.hold_writer_lock()?;
        let (key, value) = (key.to_vec(), value.to_vec());
        self.run("meta put", move |pool| async move {
            let client = pool.get().await.map_err(|e| pool_error("meta put", e))?;
            client
                .execute(
                    "INSERT INTO cairn_meta (key, value) VALUES ($1, $2)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    &[&key, &value],
                )
                .await
                .map_err(|e| classify("meta put", e))?;
            Ok(())
        })
    }

    fn meta_delete(&self, key: &[u8]) -> Result<(), StoreError> {
        self.hold_writer_lock()?;
        let key = key.to_vec();
        self.run("meta delete", move |pool| async move {
            let client = pool.get().await.map_err(|e| pool_error("meta delete", e))?;
            client
                .execute("DELETE FROM cairn_meta WHERE key = $1", &[&key])
                .await
                .map_err(|e| classify("meta delete", e))?;
            Ok(())
        })
    }

    fn system(&self, name: &str) -> Result<Arc<dyn WorkspaceStore>, StoreError> {
        self.handle(SYSTEM, name)
    }

    fn backend(&self) -> crate::StorageBackend {
        crate::StorageBackend::Postgres
    }

    fn leases(&self) -> Option<&dyn crate::Leases> {
        self.inner
            .cluster
            .as_ref()
            .map(|_| self as &dyn crate::Leases)
    }

    fn serves(&self, workspace: &str) -> bool {
        self.inner.cluster.is_none() || self.inner.fences.read().contains_key(workspace)
    }

    /// Nothing to do: every write was committed with `synchronous_commit =
    /// on` before it returned (see the module documentation).
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// `VACUUM` of cairn's tables (their TOAST tables with them): the dead
    /// row versions a delete left are removed from the pages and the
    /// indexes, and no query, snapshot or replica slot can reach them
    /// again. With `storage.postgres.vacuum_full`, `VACUUM FULL`:
    /// each table rewritten into a new file, the old one released (every
    /// request waits while it runs). See docs/DURABILITY.md.
    fn compact(&self) -> Result<Option<crate::RewriteReport>, StoreError> {
        let statement = match self.inner.vacuum_full {
            true => "VACUUM FULL cairn_kv, cairn_meta",
            false => "VACUUM cairn_kv, cairn_meta",
        };
        self.run("vacuum", move |pool| async move {
            let client = pool.get().await.map_err(|e| pool_error("vacuum", e))?;
            client
                .batch_execute(statement)
                .await
                .map_err(|e| classify("vacuum", e))
        })?;
        Ok(None)
    }
}

/// A handle on one workspace or system namespace.
struct PostgresSpace {
    store: PostgresStore,
    kind: i16,
    /// The space's drop count (in this process) when the handle was opened.
    drops: u64,
    space: String,
    /// What [`WorkspaceStore::workspace`] answers (sled's tree name for a
    /// system namespace).
    label: String,
}

impl std::fmt::Debug for PostgresSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSpace")
            .field("space", &self.label)
            .finish_non_exhaustive()
    }
}

/// Which way and how far a scan walks.
#[derive(Clone, Copy)]
enum Scan {
    Ascending(Option<i64>),
    Descending(i64),
}

impl PostgresSpace {
    /// Pairs of `collection` with `lower <= key < upper` (no upper bound
    /// when `None`), in the scan's order.
    fn range(
        &self,
        collection: Collection,
        lower: Vec<u8>,
        upper: Option<Vec<u8>>,
        scan: Scan,
    ) -> Result<Vec<KeyValue>, StoreError> {
        let (kind, space, tag) = (self.kind, self.space.clone(), tag(collection));
        self.store.run("scan", move |pool| async move {
            let op = "scan";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            let bound = if upper.is_some() { " AND key < $5" } else { "" };
            let (order, limit) = match scan {
                Scan::Ascending(None) => ("ASC", None),
                Scan::Ascending(Some(n)) => ("ASC", Some(n)),
                Scan::Descending(n) => ("DESC", Some(n)),
            };
            let limit_at = if upper.is_some() { 6 } else { 5 };
            let sql = format!(
                "SELECT key, value FROM cairn_kv
                 WHERE kind = $1 AND space = $2 AND collection = $3 AND key >= $4{bound}
                 ORDER BY key {order}{}",
                limit
                    .map(|_| format!(" LIMIT ${limit_at}"))
                    .unwrap_or_default()
            );
            let statement = client
                .prepare_cached(&sql)
                .await
                .map_err(|e| classify(op, e))?;
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                vec![&kind, &space, &tag, &lower];
            if let Some(upper) = &upper {
                params.push(upper);
            }
            if let Some(limit) = &limit {
                params.push(limit);
            }
            let rows = client
                .query(&statement, &params)
                .await
                .map_err(|e| classify(op, e))?;
            rows.iter().map(|r| pair(r, op)).collect()
        })
    }
}

impl WorkspaceStore for PostgresSpace {
    fn workspace(&self) -> &str {
        &self.label
    }

    fn get(&self, collection: Collection, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let (kind, space, tag, key) =
            (self.kind, self.space.clone(), tag(collection), key.to_vec());
        self.store.run("get", move |pool| async move {
            let client = pool.get().await.map_err(|e| pool_error("get", e))?;
            let statement = client
                .prepare_cached(
                    "SELECT value FROM cairn_kv
                     WHERE kind = $1 AND space = $2 AND collection = $3 AND key = $4",
                )
                .await
                .map_err(|e| classify("get", e))?;
            let row = client
                .query_opt(&statement, &[&kind, &space, &tag, &key])
                .await
                .map_err(|e| classify("get", e))?;
            row.map(|r| column(&r, 0, "get")).transpose()
        })
    }

    fn scan_prefix(
        &self,
        collection: Collection,
        prefix: &[u8],
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.range(
            collection,
            prefix.to_vec(),
            prefix_successor(prefix),
            Scan::Ascending(None),
        )
    }

    fn scan_prefix_from(
        &self,
        collection: Collection,
        prefix: &[u8],
        start: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        let mut lower = prefix.to_vec();
        lower.extend_from_slice(start);
        self.range(
            collection,
            lower,
            prefix_successor(prefix),
            Scan::Ascending(Some(row_limit(limit))),
        )
    }

    fn scan_prefix_rev(
        &self,
        collection: Collection,
        prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.range(
            collection,
            prefix.to_vec(),
            prefix_successor(prefix),
            Scan::Descending(row_limit(limit)),
        )
    }

    fn last_with_prefix(
        &self,
        collection: Collection,
        prefix: &[u8],
    ) -> Result<Option<KeyValue>, StoreError> {
        Ok(self
            .range(
                collection,
                prefix.to_vec(),
                prefix_successor(prefix),
                Scan::Descending(1),
            )?
            .into_iter()
            .next())
    }

    /// One transaction: the batch's deletes, then its puts, each as one
    /// statement over arrays. A key named twice in a batch ends as its last
    /// operation left it (as in a sled batch).
    fn apply(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.store.hold_writer_lock()?;
        let creates = batch
            .ops()
            .iter()
            .any(|op| matches!(op, crate::WriteOp::Put { .. }));
        if creates {
            if self.store.drop_count(self.kind, &self.space) > self.drops {
                return Err(StoreError::Erased {
                    workspace: self.space.clone(),
                });
            }
            self.store.ensure_space(self.kind, &self.space)?;
        }
        let fence = self.store.fence(self.kind, &self.space)?;
        let mut last: BTreeMap<(i16, Vec<u8>), Option<Vec<u8>>> = BTreeMap::new();
        for op in batch.into_ops() {
            let (collection, key, value) = op.into_parts();
            last.insert((tag(collection), key), value);
        }
        let (mut del_tags, mut del_keys) = (Vec::new(), Vec::new());
        let (mut put_tags, mut put_keys, mut put_values) = (Vec::new(), Vec::new(), Vec::new());
        for ((tag, key), value) in last {
            match value {
                Some(value) => {
                    put_tags.push(tag);
                    put_keys.push(key);
                    put_values.push(value);
                }
                None => {
                    del_tags.push(tag);
                    del_keys.push(key);
                }
            }
        }
        let (kind, space) = (self.kind, self.space.clone());
        let check = fence.clone();
        let applied = self.store.run("apply", move |pool| async move {
            let op = "apply";
            let mut client = pool.get().await.map_err(|e| pool_error(op, e))?;
            let tx = client.transaction().await.map_err(|e| classify(op, e))?;
            // The fence first: the lease row stays share-locked until the
            // commit, so a take-over (which bumps the token) waits for this
            // transaction, and a write after it finds the token changed.
            if let Some((node, token)) = &check
                && !leases::holds(&tx, &space, node, *token).await? {
                    return Ok(false);
                }
            if !del_keys.is_empty() {
                let statement = tx
                    .prepare_cached(
                        "DELETE FROM cairn_kv AS kv USING unnest($3::smallint[], $4::bytea[]) AS d (collection, key)
                         WHERE kv.kind = $1 AND kv.space = $2
                           AND kv.collection = d.collection AND kv.key = d.key",
                    )
                    .await
                    .map_err(|e| classify(op, e))?;
                tx.execute(&statement, &[&kind, &space, &del_tags, &del_keys])
                    .await
                    .map_err(|e| classify(op, e))?;
            }
            if !put_keys.is_empty() {
                let statement = tx
                    .prepare_cached(
                        "INSERT INTO cairn_kv (kind, space, collection, key, value)
                         SELECT $1, $2, p.collection, p.key, p.value
                         FROM unnest($3::smallint[], $4::bytea[], $5::bytea[]) AS p (collection, key, value)
                         ON CONFLICT (kind, space, collection, key) DO UPDATE SET value = excluded.value",
                    )
                    .await
                    .map_err(|e| classify(op, e))?;
                tx.execute(
                    &statement,
                    &[&kind, &space, &put_tags, &put_keys, &put_values],
                )
                .await
                .map_err(|e| classify(op, e))?;
            }
            tx.commit().await.map_err(|e| classify(op, e))?;
            Ok(true)
        })?;
        match (applied, fence) {
            (true, _) => Ok(()),
            (false, Some((_, token))) => Err(self.store.fenced(&self.space, token)),
            (false, None) => Ok(()),
        }
    }
}

/// The tag byte of a collection as stored (`smallint`).
fn tag(collection: Collection) -> i16 {
    i16::from(collection.tag())
}

/// A scan's row limit as SQL takes it (`bigint`).
fn row_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Column `index` of `row`, with a typed error instead of a panic.
fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a tokio_postgres::Row,
    index: usize,
    op: &'static str,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(|e| classify(op, e))
}

fn pair(row: &tokio_postgres::Row, op: &'static str) -> Result<KeyValue, StoreError> {
    Ok((column(row, 0, op)?, column(row, 1, op)?))
}

fn unavailable(op: &'static str, reason: &str) -> StoreError {
    StoreError::Unavailable {
        op,
        reason: reason.to_owned(),
        source: None,
    }
}

/// SQLSTATEs after which the same request may succeed: the connection or
/// the server went away, the server is starting or stopping, a transaction
/// lost a serialization race or a deadlock, a statement ran out of time.
fn retryable_state(state: &SqlState) -> bool {
    let code = state.code();
    code.starts_with("08") // connection exception
        || code.starts_with("57P") // admin / crash shutdown, cannot connect now
        || *state == SqlState::T_R_SERIALIZATION_FAILURE
        || *state == SqlState::T_R_DEADLOCK_DETECTED
        || *state == SqlState::TOO_MANY_CONNECTIONS
        || *state == SqlState::QUERY_CANCELED
        || *state == SqlState::LOCK_NOT_AVAILABLE
}

/// A client error as a [`StoreError`]: retryable ([`StoreError::Unavailable`])
/// or not ([`StoreError::Database`]).
fn classify(op: &'static str, e: tokio_postgres::Error) -> StoreError {
    let (reason, retryable) = match e.as_db_error() {
        Some(db) => (
            format!("{} ({})", db.message(), db.code().code()),
            retryable_state(db.code()),
        ),
        None => {
            // No answer from the server: the connection failed or closed
            // (refused, reset, timed out), which may pass.
            let io = std::error::Error::source(&e)
                .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some());
            (error_chain(&e), io || e.is_closed())
        }
    };
    if retryable {
        StoreError::Unavailable {
            op,
            reason,
            source: Some(e),
        }
    } else {
        StoreError::Database {
            op,
            reason,
            source: Some(e),
        }
    }
}

fn pool_error(op: &'static str, e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => classify(op, e),
        PoolError::PostCreateHook(e) => unavailable(op, &e.to_string()),
        PoolError::Timeout(kind) => unavailable(
            op,
            &format!("no database connection in time ({kind:?}): is the server up and reachable?"),
        ),
        PoolError::Closed => unavailable(op, "the connection pool is closed"),
        PoolError::NoRuntimeSpecified => StoreError::Database {
            op,
            reason: "the connection pool has no runtime".to_owned(),
            source: None,
        },
    }
}

/// An error and its causes on one line (tokio-postgres's own message is
/// often just "error connecting to server").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

/// Host, port, database and user of a client configuration, for messages.
fn describe(pg: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = pg.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres {}:{} database {} as {}",
        hosts.join(","),
        if ports.is_empty() {
            "5432".to_owned()
        } else {
            ports.join(",")
        },
        pg.get_dbname().unwrap_or("(default)"),
        pg.get_user().unwrap_or("(default)")
    )
}

#[cfg(test)]
mod tests;
