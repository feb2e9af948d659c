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
use crate::{Clock, Memory, MemoryConfig, Result};

pub use cairn_store::testing::{postgres_admin_url, with_database};

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
    Ok(cairn_store::testing::execute(url, sql)?)
}
