//! The trust boundary of `cairn serve`: bearer tokens per workspace and for
//! the admin, the `Host` allow-list against DNS rebinding, and the refusal
//! to serve a public address without authentication.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::support::{Server, cairn_bin};

const ADMIN: &str = "admin-token-0123456789abcdef";
const ACME: &str = "acme-token-0123456789abcdef";

/// Sends one request over a fresh connection with the given headers and
/// returns the status and the JSON body.
fn raw(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, Value)> {
    let addr = server.base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    write!(conn, "{method} {path} HTTP/1.1\r\n")?;
    for (name, value) in headers {
        write!(conn, "{name}: {value}\r\n")?;
    }
    write!(
        conn,
        "content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()?;
    let mut out = Vec::new();
    conn.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out);
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

#[test]
fn tokens_open_their_workspaces_and_nothing_else() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("cairn.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nadmin_token = \"{ADMIN}\"\n[[server.tokens]]\ntoken = \"{ACME}\"\nworkspaces = [\"acme\"]\n"
        ),
    )?;
    let data = dir.path().join("data");
    let server = Server::start_with(&data, &["--config", config.to_str().context("path")?])?;
    let host = server.base.trim_start_matches("http://").to_owned();
    let acme = format!("Bearer {ACME}");
    let admin = format!("Bearer {ADMIN}");
    let turn =
        r#"{"turns":[{"session":"s1","role":"user","content":"The acme launch is on April 1."}]}"#;
    let h = |auth: &str| vec![("host", host.clone()), ("authorization", auth.to_owned())];
    let call = |method: &str, path: &str, headers: Vec<(&str, String)>, body: &str| {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        raw(&server, method, path, &headers, body)
    };

    // No token, a wrong token: 401.
    let (s, body) = call(
        "POST",
        "/v1/workspaces/acme/turns",
        vec![("host", host.clone())],
        turn,
    )?;
    ensure!(s == 401 && body["code"] == "unauthorized", "{s} {body}");
    let (s, _) = call(
        "POST",
        "/v1/workspaces/acme/turns",
        h("Bearer wrong-token-0123456789"),
        turn,
    )?;
    ensure!(s == 401);
    // The workspace token writes and reads its workspace.
    let (s, body) = call("POST", "/v1/workspaces/acme/turns", h(&acme), turn)?;
    ensure!(s == 200, "{body}");
    let (s, body) = call(
        "GET",
        "/v1/workspaces/acme/sessions/s1/transcript",
        h(&acme),
        "",
    )?;
    ensure!(
        s == 200 && body[0]["content"] == "The acme launch is on April 1.",
        "{body}"
    );
    // The admin writes another workspace; the acme token cannot reach it.
    let (s, _) = call("POST", "/v1/workspaces/globex/turns", h(&admin), turn)?;
    ensure!(s == 200);
    for (method, path) in [
        ("GET", "/v1/workspaces/globex/sessions/s1/transcript"),
        ("GET", "/v1/workspaces/globex/sessions"),
        ("GET", "/v1/workspaces/globex/entries"),
        ("POST", "/v1/workspaces/globex/search"),
        ("GET", "/v1/workspaces/globex/items/session:s1:0-0"),
        ("GET", "/v1/workspaces/%67lobex/sessions"),
        ("GET", "/v1/plugins"),
        ("POST", "/v1/gateway_start"),
        ("GET", "/v1/stats/index"),
    ] {
        let body = if method == "POST" {
            r#"{"query":"launch"}"#
        } else {
            ""
        };
        let (s, answer) = call(method, path, h(&acme), body)?;
        ensure!(s == 403, "{method} {path}: {s} {answer}");
        ensure!(!answer.to_string().contains("April"), "{answer}");
    }
    // Erasing a workspace is the admin's, even one's own.
    let (s, body) = call(
        "POST",
        "/v1/workspaces/acme/forget",
        h(&acme),
        r#"{"target":"workspace","id":"acme","reason":"test"}"#,
    )?;
    ensure!(s == 403, "{body}");
    let (s, _) = call("GET", "/v1/plugins", h(&admin), "")?;
    ensure!(s == 200);
    // Health and the API description stay open.
    let (s, _) = call("GET", "/healthz", vec![("host", host.clone())], "")?;
    ensure!(s == 200);
    Ok(())
}

#[test]
fn a_loopback_server_answers_only_to_loopback_hosts() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let port = server.base.rsplit(':').next().context("port")?.to_owned();
    let (s, body) = raw(
        &server,
        "GET",
        "/v1/plugins",
        &[("host", &format!("attacker.example:{port}"))],
        "",
    )?;
    ensure!(s == 403 && body["code"] == "host_not_allowed", "{s} {body}");
    let (s, _) = raw(
        &server,
        "GET",
        "/v1/plugins",
        &[("host", &format!("localhost:{port}"))],
        "",
    )?;
    ensure!(s == 200);
    let (s, _) = raw(&server, "GET", "/healthz", &[("host", "127.0.0.1")], "")?;
    ensure!(s == 200);
    Ok(())
}

#[test]
fn a_public_address_needs_tokens() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(cairn_bin())
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "served a public address without tokens"
    );
    ensure!(err.contains("without authentication"), "{err}");
    Ok(())
}
