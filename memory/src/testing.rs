//! For cairn's own tests: the store the storage matrix selects. Hidden
//! from the docs; embedders open memory with [`Memory::open_storage`].
//!
//! With `CAIRN_TEST_POSTGRES_URL` set (an admin URL of a PostgreSQL
//! server; `scripts/dev.sh test` starts a throwaway one), each data
//! directory stands for a fresh database on that server, made on first
//! use, so a test that reopens its directory finds its data again. Without
//! it, sled in the directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::{PostgresConfig, StorageBackend, StorageConfig};
use crate::{Clock, Memory, MemoryConfig, MemoryError, Result};

/// The admin URL of the test server, when the postgres leg runs.
pub fn postgres_admin_url() -> Option<String> {
    std::env::var("CAIRN_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// The storage the matrix selects for `dir` (see the module docs).
pub fn storage(dir: &Path) -> Result<StorageConfig> {
    let Some(admin) = postgres_admin_url() else {
        return Ok(StorageConfig::default());
    };
    static DATABASES: Mutex<Option<HashMap<PathBuf, String>>> = Mutex::new(None);
    let mut known = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
    let known = known.get_or_insert_with(HashMap::new);
    let url = match known.get(dir) {
        Some(url) => url.clone(),
        None => {
            let name = format!(
                "cairn_unit_{}",
                ulid::Ulid::new().to_string().to_lowercase()
            );
            execute(&admin, &format!("CREATE DATABASE {name}"))?;
            let url = with_database(&admin, &name);
            known.insert(dir.to_owned(), url.clone());
            url
        }
    };
    Ok(StorageConfig {
        backend: StorageBackend::Postgres,
        postgres: PostgresConfig {
            url,
            ..PostgresConfig::default()
        },
        ..StorageConfig::default()
    })
}

/// Memory on the store the matrix selects for `dir`.
pub fn memory(dir: &Path, config: MemoryConfig, clock: Arc<dyn Clock>) -> Result<Memory> {
    Memory::open_storage(dir, &storage(dir)?, config, clock)
}

/// Runs `sql` on the database at `url` (a plain client on a runtime of its own).
pub fn execute(url: &str, sql: &str) -> Result<()> {
    let failed = |e: &dyn std::fmt::Display| {
        MemoryError::Store(crate::store::StoreError::Config(format!(
            "test database: {e}"
        )))
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(&e))?;
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| failed(&e))?;
        let task = tokio::spawn(connection);
        client.batch_execute(sql).await.map_err(|e| failed(&e))?;
        drop(client);
        task.await
            .map_err(|e| failed(&e))?
            .map_err(|e| failed(&e))?;
        Ok(())
    })
}

/// `admin` (a URL or `key=value` pairs) with its database replaced by `name`.
pub fn with_database(admin: &str, name: &str) -> String {
    if admin.contains("://") {
        let (head, query) = match admin.split_once('?') {
            Some((head, query)) => (head, format!("?{query}")),
            None => (admin, String::new()),
        };
        let scheme_end = head.find("://").map_or(0, |i| i + 3);
        let base = match head[scheme_end..].find('/') {
            Some(slash) => &head[..scheme_end + slash],
            None => head,
        };
        format!("{base}/{name}{query}")
    } else {
        format!("{admin} dbname={name}")
    }
}
