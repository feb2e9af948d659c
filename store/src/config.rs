//! The storage configuration: `[storage]` (which backend), its
//! `[storage.postgres]` database and `[storage.cluster]` node, and the
//! embedded store's default page cache.

use serde::{Deserialize, Serialize};

/// Default page cache of the embedded store, in MiB.
///
/// sled counts its cache in bytes as stored; its pages take about 1.8× that
/// in memory. 48 keeps 1,000 busy sessions within the noise of 64 and 128
/// while holding ≈ 30 and 110 MB less; 32 was 3–8 % slower
/// (docs/BENCHMARKS.md, fifty-first and fifty-second passes).
pub const DEFAULT_CACHE_MB: u64 = 48;

/// Which store holds the data: `[storage]`.
///
/// ```
/// use cairn_store::config::{StorageBackend, StorageConfig};
/// let storage = StorageConfig::default();
/// assert_eq!(storage.backend, StorageBackend::Sled);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `sled` (embedded, in the data directory; the default) or `postgres`.
    pub backend: StorageBackend,
    /// The database, when `backend = "postgres"` (`[storage.postgres]`).
    pub postgres: PostgresConfig,
    /// This process as one node of several sharing the database
    /// (`[storage.cluster]`; off while `node` is empty).
    pub cluster: ClusterConfig,
}

/// Several `cairn serve` nodes on one PostgreSQL database:
/// `[storage.cluster]`. Each workspace (with its work contexts, sessions
/// and actors) is owned by one node at a time through a lease with a
/// fencing token (see `docs/SCALING.md`).
///
/// ```
/// let cluster = cairn_store::config::ClusterConfig::default();
/// assert!(!cluster.enabled());
/// assert_eq!(cluster.lease_ms, 3_000);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's id (lowercase letters, digits, `-`); empty: not in a
    /// cluster (the process then has the database to itself).
    pub node: String,
    /// The URL other nodes forward requests to (`http://10.0.0.5:7878`);
    /// empty: the address `cairn serve` listens on.
    pub advertise: String,
    /// How long a lease lasts without renewal, in ms: the longest a dead
    /// node's workspaces stay unserved. Renewed every third of it.
    pub lease_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node: String::new(),
            advertise: String::new(),
            lease_ms: 3_000,
        }
    }
}

impl ClusterConfig {
    /// True when this process is a node of a cluster (`node` is set).
    pub fn enabled(&self) -> bool {
        !self.node.is_empty()
    }
}

/// A storage backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StorageBackend {
    /// sled, embedded: files in the data directory.
    #[default]
    Sled,
    /// A PostgreSQL server ([`crate::PostgresStore`]).
    Postgres,
}

impl StorageBackend {
    /// The name used in the configuration (`sled`, `postgres`).
    pub fn as_str(self) -> &'static str {
        match self {
            StorageBackend::Sled => "sled",
            StorageBackend::Postgres => "postgres",
        }
    }
}

/// The PostgreSQL database of the `postgres` backend: `[storage.postgres]`.
///
/// ```
/// let pg = cairn_store::config::PostgresConfig::default();
/// assert_eq!(pg.pool_size, 8);
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// A libpq-style connection string: a URL
    /// (`postgresql://user:password@host:5432/db`) or `key=value` pairs
    /// (`host=/run/postgresql dbname=cairn`). No TLS: keep the database on
    /// loopback or a private network.
    pub url: String,
    /// Most connections the pool opens.
    pub pool_size: usize,
    /// Longest wait for a connection (to open one, or for a free one), in ms.
    pub connect_timeout_ms: u64,
    /// Longest one SQL statement may run (the server's `statement_timeout`), in ms.
    pub statement_timeout_ms: u64,
    /// After a `forget`, vacuum with `VACUUM FULL` (each table rewritten
    /// into a new file, every request waiting meanwhile) rather than a plain
    /// `VACUUM` (dead rows removed in place, the database serving on).
    /// Default false; see docs/DURABILITY.md, *Erasure on disk*.
    pub vacuum_full: bool,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url: String::new(),
            pool_size: 8,
            connect_timeout_ms: 5_000,
            statement_timeout_ms: 30_000,
            vacuum_full: false,
        }
    }
}

impl PostgresConfig {
    /// The longest one store call may take: a connection, then a few
    /// statements.
    pub fn call_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.connect_timeout_ms
                .saturating_mul(2)
                .saturating_add(self.statement_timeout_ms.saturating_mul(3)),
        )
    }

    /// The URL with any password replaced by `***`, for logs and reports.
    ///
    /// ```
    /// let pg = cairn_store::config::PostgresConfig {
    ///     url: "postgresql://cairn:s3cret@db:5432/cairn".into(),
    ///     ..Default::default()
    /// };
    /// assert_eq!(pg.redacted_url(), "postgresql://cairn:***@db:5432/cairn");
    /// ```
    pub fn redacted_url(&self) -> String {
        redact_password(&self.url)
    }
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.redacted_url())
            .field("pool_size", &self.pool_size)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("statement_timeout_ms", &self.statement_timeout_ms)
            .field("vacuum_full", &self.vacuum_full)
            .finish()
    }
}

/// `url` with the password of a URL's user info, or of a `password=` pair,
/// replaced by `***`.
fn redact_password(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if let Some((userinfo, host)) = authority.rsplit_once('@')
            && let Some((user, _)) = userinfo.split_once(':')
        {
            return format!("{scheme}://{user}:***@{host}{tail}");
        }
        return url.to_owned();
    }
    url.split_whitespace()
        .map(|pair| match pair.split_once('=') {
            Some(("password", _)) => "password=***".to_owned(),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}
