//! For cairn's own tests: a throwaway PostgreSQL server's databases.
//! Hidden from the docs.
//!
//! `CAIRN_TEST_POSTGRES_URL` names an admin URL of a PostgreSQL server
//! (`scripts/dev.sh test` starts a throwaway one with
//! `scripts/pg-cluster.sh`); the tests that need a server make their own
//! databases on it. Without it, they run on sled or say they were skipped.

use crate::StoreError;

/// The admin URL of the test server, when the postgres leg runs.
pub fn postgres_admin_url() -> Option<String> {
    std::env::var("CAIRN_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// Runs `sql` on the database at `url` (a plain client on a runtime of its
/// own); a failure is a [`StoreError::Config`] naming the test database.
pub fn execute(url: &str, sql: &str) -> Result<(), StoreError> {
    let failed = |e: &dyn std::fmt::Display| StoreError::Config(format!("test database: {e}"));
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
