//! Stored access tokens (`cairn tokens`, `/v1/tokens`): scoped to one
//! workspace and to read or write, revoked at once, never stored in clear;
//! the Unix socket; private data files.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::support::{Server, cairn_bin};

const ADMIN: &str = "admin-token-0123456789abcdef";

/// Runs `cairn --data-dir DIR ARGS…`; stdout on success.
fn cairn(data: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(data))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()?;
    ensure!(
        out.status.success(),
        "cairn {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn make_token(data: &Path, workspace: &str, scope: &str) -> Result<Value> {
    let out = cairn(
        data,
        &[
            "--workspace",
            workspace,
            "tokens",
            "create",
            "--scope",
            scope,
            "--json",
        ],
    )?;
    Ok(serde_json::from_str(&out)?)
}

#[test]
fn stored_tokens_open_one_workspace_for_their_scope_until_revoked() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let writer = make_token(&data, "acme", "write")?;
    let reader = make_token(&data, "acme", "read")?;
    let globex = make_token(&data, "globex", "write")?;
    let secret =
        |t: &Value| -> Result<String> { Ok(t["token"].as_str().context("token")?.to_owned()) };
    let (w, r, g) = (secret(&writer)?, secret(&reader)?, secret(&globex)?);
    // Listed without secrets; no secret is in the store either.
    let listed: Value = serde_json::from_str(&cairn(&data, &["tokens", "list", "--json"])?)?;
    ensure!(listed.as_array().map(Vec::len) == Some(3), "{listed}");
    let listed = listed.to_string();
    for token in [&w, &r, &g] {
        let secret_part = token.rsplit('_').next().context("secret")?;
        ensure!(!listed.contains(secret_part), "a secret is listed");
        ensure!(
            crate::erasure::files_containing(&data, secret_part.as_bytes())?.is_empty(),
            "a secret is stored in clear"
        );
    }

    // Stored tokens alone turn authentication on.
    let config = dir.path().join("cairn.toml");
    std::fs::write(&config, format!("[server]\nadmin_token = \"{ADMIN}\"\n"))?;
    let server = Server::start_with(&data, &["--config", config.to_str().context("path")?])?;
    let host = server.base.trim_start_matches("http://").to_owned();
    let call = |method: &str, path: &str, token: Option<&str>, body: &str| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("host", host.as_str())];
        if let Some(auth) = &auth {
            headers.push(("authorization", auth.as_str()));
        }
        server.raw(method, path, &headers, body)
    };
    let turn = r#"{"turns":[{"session":"s1","role":"user","content":"Launch on April 1."}]}"#;
    let search = r#"{"query":"launch"}"#;
    let (s, _) = call("POST", "/v1/workspaces/acme/turns", None, turn)?;
    ensure!(s == 401, "no token: {s}");
    // The write token writes and reads.
    let (s, body) = call("POST", "/v1/workspaces/acme/turns", Some(&w), turn)?;
    ensure!(s == 200, "{s} {body}");
    // The read token reads (GET, search) but does not write.
    let (s, body) = call(
        "GET",
        "/v1/workspaces/acme/sessions/s1/transcript",
        Some(&r),
        "",
    )?;
    ensure!(
        s == 200 && body[0]["content"] == "Launch on April 1.",
        "{s} {body}"
    );
    let (s, body) = call("POST", "/v1/workspaces/acme/search", Some(&r), search)?;
    ensure!(s == 200, "{s} {body}");
    for (method, path, body) in [
        ("POST", "/v1/workspaces/acme/turns", turn),
        (
            "POST",
            "/v1/workspaces/acme/forget",
            r#"{"session":"s1","reason":"x"}"#,
        ),
        ("POST", "/v1/workspaces/acme/capture", "{}"),
    ] {
        let (s, answer) = call(method, path, Some(&r), body)?;
        ensure!(
            s == 403 && answer["code"] == "forbidden",
            "{method} {path}: {s} {answer}"
        );
    }
    // Another workspace's token, and token administration, are refused.
    let (s, _) = call("GET", "/v1/workspaces/acme/entries", Some(&g), "")?;
    ensure!(s == 403, "globex token on acme: {s}");
    let (s, _) = call("GET", "/v1/tokens", Some(&w), "")?;
    ensure!(s == 403, "a workspace token lists tokens: {s}");

    // The admin makes and revokes tokens while the server runs; a revoked
    // token is refused from the next request on.
    let (s, made) = call(
        "POST",
        "/v1/tokens",
        Some(ADMIN),
        r#"{"workspace":"acme","scope":"read","label":"dashboard"}"#,
    )?;
    ensure!(s == 200 && made["scope"] == "read", "{s} {made}");
    let fresh = made["token"].as_str().context("token")?.to_owned();
    let (s, _) = call("GET", "/v1/workspaces/acme/entries", Some(&fresh), "")?;
    ensure!(s == 200, "fresh token: {s}");
    let (s, listed) = call("GET", "/v1/tokens", Some(ADMIN), "")?;
    ensure!(
        s == 200 && listed.as_array().map(Vec::len) == Some(4),
        "{listed}"
    );
    ensure!(
        !listed.to_string().contains(&fresh),
        "a listing shows a secret"
    );
    let id = made["id"].as_str().context("id")?;
    let (s, _) = call("DELETE", &format!("/v1/tokens/{id}"), Some(ADMIN), "")?;
    ensure!(s == 200);
    let (s, _) = call("GET", "/v1/workspaces/acme/entries", Some(&fresh), "")?;
    ensure!(s == 401, "a revoked token still opens: {s}");
    let (s, _) = call("DELETE", &format!("/v1/tokens/{id}"), Some(ADMIN), "")?;
    ensure!(s == 404);
    let (s, body) = call(
        "POST",
        "/v1/tokens",
        Some(ADMIN),
        r#"{"workspace":"a b","scope":"read"}"#,
    )?;
    ensure!(s == 400, "{s} {body}");
    drop(server);

    // Revoked from the CLI too.
    let id = writer["id"].as_str().context("id")?;
    cairn(&data, &["tokens", "revoke", id])?;
    let listed: Value = serde_json::from_str(&cairn(&data, &["tokens", "list", "--json"])?)?;
    ensure!(listed.as_array().map(Vec::len) == Some(2), "{listed}");
    // The doctor says a server on this data dir needs a token.
    let doctor: Value = serde_json::from_str(&cairn(&data, &["doctor", "--json"])?)?;
    let tokens = doctor["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "tokens")
        .context("no tokens check")?;
    ensure!(
        tokens["details"]["tokens"].as_array().map(Vec::len) == Some(2),
        "{tokens}"
    );
    Ok(())
}

/// Issue 78: a token made through `POST /v1/tokens` on a server started
/// without tokens did not switch authentication on until a restart: the
/// server stayed open to anyone. It is on from the next request.
#[test]
fn a_token_made_at_runtime_switches_authentication_on() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(&dir.path().join("data"))?;
    let host = server.base.trim_start_matches("http://").to_owned();
    let call = |method: &str, path: &str, token: Option<&str>, body: &str| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("host", host.as_str())];
        if let Some(auth) = &auth {
            headers.push(("authorization", auth.as_str()));
        }
        server.raw(method, path, &headers, body)
    };
    let turn = r#"{"turns":[{"session":"s1","role":"user","content":"Open for now."}]}"#;
    let (s, body) = call("POST", "/v1/workspaces/acme/turns", None, turn)?;
    ensure!(s == 200, "a tokenless server is open: {s} {body}");
    let (s, made) = call(
        "POST",
        "/v1/tokens",
        None,
        r#"{"workspace":"acme","scope":"write"}"#,
    )?;
    ensure!(s == 200, "{s} {made}");
    let token = made["token"].as_str().context("token")?.to_owned();
    for (method, path, body) in [
        ("POST", "/v1/workspaces/acme/turns", turn),
        ("GET", "/v1/workspaces/acme/sessions/s1/transcript", ""),
        ("GET", "/v1/tokens", ""),
    ] {
        let (s, answer) = call(method, path, None, body)?;
        ensure!(
            s == 401 && answer["code"] == "unauthorized",
            "{method} {path} without a token after one was made: {s} {answer}"
        );
    }
    let (s, body) = call("POST", "/v1/workspaces/acme/turns", Some(&token), turn)?;
    ensure!(s == 200, "the new token: {s} {body}");
    Ok(())
}

/// Issue 78: a write token for `acme`, then the admin's erasure of
/// workspace `acme`, then new turns in a re-created `acme`: the old token
/// read the new tenant's transcript. Erasing a workspace revokes its tokens
/// (and moves the name's incarnation on, so no earlier token opens it).
#[test]
fn an_erased_workspace_s_tokens_open_nothing_of_the_next_tenant() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let server = Server::start_admin(dir.path(), &data, ADMIN)?;
    let call = |method: &str, path: &str, token: &str, body: &str| {
        server.as_bearer(method, path, token, body)
    };
    let old = server.create_token(ADMIN, "acme", "write")?;
    let first = r#"{"turns":[{"session":"main","role":"user","content":"First tenant."}]}"#;
    let (s, body) = call("POST", "/v1/workspaces/acme/turns", &old, first)?;
    ensure!(s == 200, "{s} {body}");
    let (s, body) = call(
        "POST",
        "/v1/workspaces/acme/forget",
        ADMIN,
        r#"{"target":"workspace","id":"acme","reason":"tenant left"}"#,
    )?;
    ensure!(s == 200, "{s} {body}");
    let second =
        r#"{"turns":[{"session":"main","role":"user","content":"Second tenant's secret plan."}]}"#;
    let (s, body) = call("POST", "/v1/workspaces/acme/turns", ADMIN, second)?;
    ensure!(s == 200, "{s} {body}");
    for (method, path, body) in [
        ("GET", "/v1/workspaces/acme/sessions/main/transcript", ""),
        ("GET", "/v1/workspaces/acme/sessions", ""),
        ("POST", "/v1/workspaces/acme/turns", first),
    ] {
        let (s, answer) = call(method, path, &old, body)?;
        ensure!(
            s == 401,
            "{method} {path} with the erased tenant's token: {s} {answer}"
        );
        ensure!(!answer.to_string().contains("Second tenant"), "{answer}");
    }
    let (s, listed) = call("GET", "/v1/tokens", ADMIN, "")?;
    ensure!(s == 200 && listed == serde_json::json!([]), "{s} {listed}");
    // A token made for the new tenant opens it.
    let (s, made) = call(
        "POST",
        "/v1/tokens",
        ADMIN,
        r#"{"workspace":"acme","scope":"read"}"#,
    )?;
    ensure!(s == 200, "{s} {made}");
    let new = made["token"].as_str().context("token")?;
    let (s, body) = call(
        "GET",
        "/v1/workspaces/acme/sessions/main/transcript",
        new,
        "",
    )?;
    ensure!(
        s == 200 && body[0]["content"] == "Second tenant's secret plan.",
        "{s} {body}"
    );
    // After a restart too: the binding is stored, not only cached.
    drop(server);
    let server = Server::start_admin(dir.path(), &data, ADMIN)?;
    let (s, answer) = server.as_bearer(
        "GET",
        "/v1/workspaces/acme/sessions/main/transcript",
        &old,
        "",
    )?;
    ensure!(
        s == 401,
        "the erased tenant's token after a restart: {s} {answer}"
    );
    Ok(())
}

#[cfg(unix)]
#[test]
fn data_files_are_private() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    cairn(&data, &["demo", "--budget", "400"])?;
    let mut pending = vec![data.clone()];
    let mut files = 0;
    while let Some(next) = pending.pop() {
        for item in std::fs::read_dir(&next)? {
            let item = item?;
            let mode = item.metadata()?.permissions().mode() & 0o777;
            ensure!(
                mode & 0o077 == 0,
                "{} is open to others ({mode:o})",
                item.path().display()
            );
            if item.file_type()?.is_dir() {
                pending.push(item.path());
            } else {
                files += 1;
            }
        }
    }
    ensure!(files > 0, "no files under {}", data.display());
    Ok(())
}

/// A `cairn serve` on a Unix socket; killed when dropped.
#[cfg(unix)]
struct SocketServer(Child);

#[cfg(unix)]
impl SocketServer {
    fn start(data: &Path, socket: &Path) -> Result<SocketServer> {
        let mut child = Command::new(cairn_bin())
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .envs(crate::support::backend_env(data))
            .arg("--data-dir")
            .arg(data)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        if !line.starts_with("cairn listening on unix:") {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                e.read_to_string(&mut err)?;
            }
            bail!("cairn serve on a socket: {line:?} {err}");
        }
        Ok(SocketServer(child))
    }
}

#[cfg(unix)]
impl Drop for SocketServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One request over the socket; the status and the body.
#[cfg(unix)]
fn over_socket(socket: &Path, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    let mut conn = std::os::unix::net::UnixStream::connect(socket)?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = String::new();
    conn.read_to_string(&mut raw)?;
    let (top, rest) = raw.split_once("\r\n\r\n").context("no headers")?;
    let status = top
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status")?;
    Ok((status, rest.to_owned()))
}

#[cfg(unix)]
#[test]
fn a_unix_socket_is_served_to_its_owner_only() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let socket = dir.path().join("cairn.sock");
    let server = SocketServer::start(&data, &socket)?;
    let mode = std::fs::metadata(&socket)?.permissions().mode() & 0o777;
    ensure!(mode == 0o600, "socket mode {mode:o}");
    let (s, _) = over_socket(&socket, "GET", "/healthz", "")?;
    ensure!(s == 200);
    let turn = r#"{"turns":[{"session":"s1","role":"user","content":"Over the socket."}]}"#;
    let (s, body) = over_socket(&socket, "POST", "/v1/workspaces/acme/turns", turn)?;
    ensure!(s == 200, "{s} {body}");
    let (s, body) = over_socket(
        &socket,
        "GET",
        "/v1/workspaces/acme/sessions/s1/transcript",
        "",
    )?;
    ensure!(s == 200 && body.contains("Over the socket."), "{s} {body}");
    // A second server may not take a live socket over.
    let out = Command::new(cairn_bin())
        .arg("serve")
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .envs(crate::support::backend_env(dir.path().join("other")))
        .arg("--data-dir")
        .arg(dir.path().join("other"))
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("another server answers"),
        "{err}"
    );
    // A socket file left by a killed server is cleared at the next start.
    drop(server);
    ensure!(socket.exists(), "SIGKILL left no socket file to clear");
    let _again = SocketServer::start(&data, &socket)?;
    let (s, _) = over_socket(&socket, "GET", "/healthz", "")?;
    ensure!(s == 200);
    // A path that is not a socket is never removed.
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "keep")?;
    let out = Command::new(cairn_bin())
        .arg("serve")
        .arg("--listen")
        .arg(format!("unix:{}", plain.display()))
        .envs(crate::support::backend_env(dir.path().join("third")))
        .arg("--data-dir")
        .arg(dir.path().join("third"))
        .output()?;
    ensure!(!out.status.success());
    ensure!(std::fs::read_to_string(&plain)? == "keep");
    Ok(())
}

#[test]
fn serve_speaks_tls_with_the_configured_certificate() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, made.cert.pem())?;
    std::fs::write(&key, made.signing_key.serialize_pem())?;
    let (cert_arg, key_arg) = (
        cert.to_str().context("path")?,
        key.to_str().context("path")?,
    );
    let server = Server::start_with(
        &dir.path().join("data"),
        &["--tls-cert", cert_arg, "--tls-key", key_arg],
    )?;
    let port = server
        .base
        .strip_prefix("https://127.0.0.1:")
        .with_context(|| format!("not https: {}", server.base))?
        .to_owned();
    // A client that trusts this certificate talks to it.
    let root = ureq::tls::Certificate::from_pem(made.cert.pem().as_bytes())?;
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(vec![
            root,
        ])))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .build()
        .into();
    let turn = serde_json::json!({"turns": [{"session": "s1", "role": "user", "content": "Sealed in transit."}]});
    let resp = agent
        .post(format!("https://localhost:{port}/v1/workspaces/acme/turns"))
        .send_json(&turn)?;
    ensure!(resp.status() == 200, "{}", resp.status());
    let mut resp = agent
        .get(format!(
            "https://localhost:{port}/v1/workspaces/acme/sessions/s1/transcript"
        ))
        .call()?;
    let body: Value = resp.body_mut().read_json()?;
    ensure!(body[0]["content"] == "Sealed in transit.", "{body}");
    // Plain HTTP on the TLS port gets no answer; a client that does not
    // trust the certificate refuses it.
    ensure!(
        server
            .raw("GET", "/healthz", &[("host", "localhost")], "")
            .is_err()
    );
    let untrusting: ureq::Agent = ureq::Agent::config_builder().build().into();
    ensure!(
        untrusting
            .get(format!("https://localhost:{port}/healthz"))
            .call()
            .is_err()
    );
    drop(server);
    // A key that is not a key stops `serve` before it listens, naming it.
    std::fs::write(&key, "not a key")?;
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(dir.path().join("data")))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--tls-cert", cert_arg, "--tls-key", key_arg])
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("server.tls.key"),
        "{err}"
    );
    Ok(())
}
