//! Helpers: start the real `cairn serve` and talk to it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use cairn::testing::{execute, with_database};
use serde_json::Value;

/// Path of the `cairn` binary Cargo built for these tests.
pub(crate) fn cairn_bin() -> &'static str {
    env!("CARGO_BIN_EXE_cairn")
}

/// A `[server]` configuration with an admin token and one workspace token
/// that opens `acme`.
pub(crate) fn admin_and_acme(admin: &str, acme: &str) -> String {
    format!(
        "[server]\nadmin_token = \"{admin}\"\n[[server.tokens]]\ntoken = \"{acme}\"\nworkspaces = [\"acme\"]\n"
    )
}

/// A running `cairn serve`; killed with SIGKILL when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    pub(crate) agent: ureq::Agent,
}

impl Server {
    pub(crate) fn start(data_dir: &Path) -> Result<Server> {
        Server::start_with(data_dir, &[])
    }

    /// Starts `cairn serve` on `dir/data` with `toml` as its configuration
    /// (written to `dir/cairn.toml`).
    pub(crate) fn start_configured(dir: &Path, toml: &str) -> Result<Server> {
        let config = dir.join("cairn.toml");
        std::fs::write(&config, toml)?;
        let config = config.to_str().context("config path")?;
        Server::start_with(&dir.join("data"), &["--config", config])
    }

    /// Starts `cairn serve` on `data_dir` with `admin` as its admin token
    /// (a `cairn.toml` written in `dir`): every request then needs a token.
    pub(crate) fn start_admin(dir: &Path, data_dir: &Path, admin: &str) -> Result<Server> {
        let config = dir.join("cairn.toml");
        std::fs::write(&config, format!("[server]\nadmin_token = \"{admin}\"\n"))?;
        Server::start_with(
            data_dir,
            &["--config", config.to_str().context("config path")?],
        )
    }

    /// One request with `Authorization: Bearer token` (and the server's
    /// own `Host`), over a fresh connection.
    pub(crate) fn as_bearer(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: &str,
    ) -> Result<(u16, Value)> {
        let host = self.base.trim_start_matches("http://");
        let auth = format!("Bearer {token}");
        self.raw(
            method,
            path,
            &[("host", host), ("authorization", auth.as_str())],
            body,
        )
    }

    /// A new access token for `workspace` with `scope` (`read`, `write`),
    /// made with the admin token `admin`.
    pub(crate) fn create_token(&self, admin: &str, workspace: &str, scope: &str) -> Result<String> {
        let body = serde_json::json!({"workspace": workspace, "scope": scope}).to_string();
        let (status, made) = self.as_bearer("POST", "/v1/tokens", admin, &body)?;
        ensure!(status == 200, "creating a token: {status} {made}");
        Ok(made["token"].as_str().context("the new token")?.to_owned())
    }

    /// Starts `cairn serve` with extra arguments (`--config FILE`…).
    pub(crate) fn start_with(data_dir: &Path, args: &[&str]) -> Result<Server> {
        Server::start_env(data_dir, args, &crate::support::backend_env(data_dir))
    }

    /// Starts `cairn serve` with extra arguments and this environment (in
    /// place of [`backend_env`]'s).
    pub(crate) fn start_env(
        data_dir: &Path,
        args: &[&str],
        env: &[(&'static str, String)],
    ) -> Result<Server> {
        let mut child = Command::new(cairn_bin())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning cairn serve")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(addr) = line.trim().strip_prefix("cairn listening on ") else {
            let _ = child.kill();
            bail!("unexpected first line from cairn serve: {line:?}");
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Server {
            child,
            base: addr.to_owned(),
            agent,
        })
    }

    /// SIGKILL, no goodbye (works while other threads still use the server).
    pub(crate) fn sigkill(&self) -> Result<()> {
        let status = Command::new("kill")
            .args(["-9", &self.child.id().to_string()])
            .status()?;
        ensure!(status.success(), "kill -9 failed");
        Ok(())
    }

    pub(crate) fn post(&self, path: &str, body: &Value) -> Result<(u16, Value)> {
        let mut resp = self
            .agent
            .post(format!("{}{path}", self.base))
            .send_json(body)?;
        let status = resp.status().as_u16();
        Ok((status, resp.body_mut().read_json()?))
    }

    pub(crate) fn post_raw(&self, path: &str, body: &[u8]) -> Result<(u16, Value)> {
        let mut resp = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .send(body)?;
        let status = resp.status().as_u16();
        Ok((status, resp.body_mut().read_json()?))
    }

    /// Sends a request's head (`head` is the request line and headers, each
    /// ending in CRLF) with no body, over a fresh connection, and reads the
    /// answer: for refusals the server gives before it reads a body.
    pub(crate) fn head_only(&self, head: &str) -> Result<(u16, Value)> {
        let addr = self.base.trim_start_matches("http://");
        self.exchange(&format!("{head}host: {addr}\r\nconnection: close\r\n\r\n"))
    }

    /// Sends one request with exactly these headers (plus its length) over
    /// a fresh connection: for requests a client library would not send,
    /// such as a forged `Host`.
    pub(crate) fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<(u16, Value)> {
        let mut request = format!("{method} {path} HTTP/1.1\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ));
        self.exchange(&request)
    }

    /// Like [`Server::raw`] with a body of any bytes, answering the status
    /// and the whole answer (headers and body) as text, whatever it holds.
    pub(crate) fn raw_text(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        content_type: &str,
        body: &[u8],
    ) -> Result<(u16, String)> {
        let mut request = format!("{method} {path} HTTP/1.1\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!(
            "content-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        ));
        let mut request = request.into_bytes();
        request.extend_from_slice(body);
        let text = self.send(&request)?;
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no status in {text:?}"))?;
        Ok((status, text))
    }

    /// Writes `request` on a fresh connection and reads the whole answer.
    fn send(&self, request: &[u8]) -> Result<String> {
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://");
        let mut conn = std::net::TcpStream::connect(addr)?;
        conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
        conn.write_all(request)?;
        conn.flush()?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw)?;
        Ok(String::from_utf8_lossy(&raw).into_owned())
    }

    /// Writes `request` on a fresh connection and reads the status and the
    /// JSON body (`null` when empty) of the answer.
    fn exchange(&self, request: &str) -> Result<(u16, Value)> {
        let text = self.send(request.as_bytes())?;
        let (top, body) = text
            .split_once("\r\n\r\n")
            .with_context(|| format!("no end of headers in {text:?}"))?;
        let status = top
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no status in {top:?}"))?;
        let body = if body.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(body).with_context(|| format!("body of {text:?}"))?
        };
        Ok((status, body))
    }

    /// Waits until the background indexer has caught up with the store
    /// (turns and memory-log entries), at most 60 s.
    pub(crate) fn wait_indexed(&self) -> Result<Value> {
        let start = std::time::Instant::now();
        loop {
            let (s, stats) = self.get("/v1/stats/index")?;
            ensure!(s == 200, "{stats}");
            if stats["backlog"] == 0 && stats["entry_backlog"] == 0 {
                return Ok(stats);
            }
            ensure!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "indexing never caught up: {stats}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    pub(crate) fn get(&self, path: &str) -> Result<(u16, Value)> {
        let mut resp = self.agent.get(format!("{}{path}", self.base)).call()?;
        let status = resp.status().as_u16();
        Ok((status, resp.body_mut().read_json()?))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The admin URL of the PostgreSQL server the suite runs on, when the
/// storage matrix's postgres leg runs (`CAIRN_TEST_POSTGRES_URL`).
pub(crate) fn postgres_admin_url() -> Option<String> {
    std::env::var("CAIRN_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// True (after printing why) when this test is about sled's own files and
/// the suite runs on PostgreSQL: the caller returns early.
pub(crate) fn sled_only(test: &str, why: &str) -> bool {
    if postgres_admin_url().is_some() {
        eprintln!("{test}: skipped on the postgres backend: {why}");
        return true;
    }
    false
}

/// The URL of a fresh database on the postgres leg; `None` on sled.
pub(crate) fn fresh_database_url() -> Option<String> {
    database_for(&fresh_key())
}

/// The database of each data directory this test process used (a restart
/// on the same directory finds the same database).
static DATABASES: std::sync::Mutex<Vec<(std::path::PathBuf, String)>> =
    std::sync::Mutex::new(Vec::new());

/// The connection URL of the fresh database that stands for `data_dir` on
/// the postgres leg (made on first use), or `None` on sled.
fn database_for(data_dir: &Path) -> Option<String> {
    let admin = postgres_admin_url()?;
    let mut known = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, url)) = known.iter().find(|(dir, _)| dir == data_dir) {
        return Some(url.clone());
    }
    let name = format!("cairn_e2e_{}_{}", std::process::id(), known.len() + 1);
    // Two statements: neither may run in a transaction block. A name left
    // by an earlier run (process ids repeat) is reused.
    let made = execute(&admin, &format!("DROP DATABASE IF EXISTS {name}"))
        .and_then(|()| execute(&admin, &format!("CREATE DATABASE {name}")));
    if let Err(e) = made {
        panic!("cannot create the test database {name} on {admin}: {e}");
    }
    let url = with_database(&admin, &name);
    known.push((data_dir.to_owned(), url.clone()));
    Some(url)
}

/// A data-dir key no other call used: a fresh database on the postgres
/// leg for a process that makes its own temporary data dir.
pub(crate) fn fresh_key() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::path::PathBuf::from(format!("fresh-{n}"))
}

/// On the postgres leg, how many pairs of `data_dir`'s database hold
/// `needle` in their key or value (any workspace, system namespace or the
/// metadata space). Errors on sled.
pub(crate) fn rows_containing(data_dir: &Path, needle: &[u8]) -> Result<i64> {
    let url = database_for(data_dir).context("rows_containing: not on the postgres leg")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        let task = tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM cairn_kv
                         WHERE position($1::bytea IN key) > 0 OR position($1::bytea IN value) > 0)
                      + (SELECT count(*) FROM cairn_meta
                         WHERE position($1::bytea IN key) > 0 OR position($1::bytea IN value) > 0)",
                &[&needle],
            )
            .await?;
        let count: i64 = row.try_get(0)?;
        drop(client);
        task.await??;
        Ok(count)
    })
}

/// The environment that puts a `cairn` process on `data_dir` onto the
/// backend under test: nothing on sled; the postgres backend and the data
/// dir's own database on the postgres leg.
pub(crate) fn backend_env(data_dir: impl AsRef<Path>) -> Vec<(&'static str, String)> {
    match database_for(data_dir.as_ref()) {
        Some(url) => vec![
            ("CAIRN_STORAGE__BACKEND", "postgres".to_owned()),
            ("CAIRN_STORAGE__POSTGRES__URL", url),
        ],
        None => Vec::new(),
    }
}

/// The `[storage]` configuration of an in-process `Cairn` on `data_dir`
/// (see [`backend_env`]).
pub(crate) fn storage(data_dir: impl AsRef<Path>) -> cairn::StorageConfig {
    match database_for(data_dir.as_ref()) {
        Some(url) => cairn::StorageConfig {
            backend: cairn::StorageBackend::Postgres,
            postgres: cairn::PostgresConfig {
                url,
                ..cairn::PostgresConfig::default()
            },
            ..cairn::StorageConfig::default()
        },
        None => cairn::StorageConfig::default(),
    }
}

/// Waits until the search index has caught up with the store (at most
/// 60 s).
pub(crate) fn wait_indexed(cairn: &cairn::Cairn) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        let stats = cairn.index_stats()?;
        if stats.backlog == 0 && stats.entry_backlog == 0 {
            return Ok(());
        }
        ensure!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "indexing never caught up: {stats:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
