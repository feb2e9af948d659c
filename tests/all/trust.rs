//! The trust boundary of `cairn serve`: bearer tokens per workspace and for
//! the admin, the `Host` allow-list against DNS rebinding, and the refusal
//! to serve a public address without authentication.

use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

use crate::support::{Server, admin_and_acme, cairn_bin};

const ADMIN: &str = "admin-token-0123456789abcdef";
const ACME: &str = "acme-token-0123456789abcdef";

#[test]
fn tokens_open_their_workspaces_and_nothing_else() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start_configured(dir.path(), &admin_and_acme(ADMIN, ACME))?;
    let host = server.base.trim_start_matches("http://").to_owned();
    let acme = format!("Bearer {ACME}");
    let admin = format!("Bearer {ADMIN}");
    let turn =
        r#"{"turns":[{"session":"s1","role":"user","content":"The acme launch is on April 1."}]}"#;
    let h = |auth: &str| vec![("host", host.clone()), ("authorization", auth.to_owned())];
    let call = |method: &str, path: &str, headers: Vec<(&str, String)>, body: &str| {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        server.raw(method, path, &headers, body)
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
    let (s, body) = call("GET", "/v1/workspaces/acme/briefing", h(&acme), "")?;
    ensure!(s == 200 && body["scope"]["workspace"] == "acme", "{body}");
    // The admin writes another workspace; the acme token cannot reach it.
    let (s, _) = call("POST", "/v1/workspaces/globex/turns", h(&admin), turn)?;
    ensure!(s == 200);
    for (method, path) in [
        ("GET", "/v1/workspaces/globex/sessions/s1/transcript"),
        ("GET", "/v1/workspaces/globex/sessions"),
        ("GET", "/v1/workspaces/globex/entries"),
        ("GET", "/v1/workspaces/globex/briefing"),
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
    let (s, body) = server.raw(
        "GET",
        "/v1/plugins",
        &[("host", &format!("attacker.example:{port}"))],
        "",
    )?;
    ensure!(s == 403 && body["code"] == "host_not_allowed", "{s} {body}");
    let (s, _) = server.raw(
        "GET",
        "/v1/plugins",
        &[("host", &format!("localhost:{port}"))],
        "",
    )?;
    ensure!(s == 200);
    let (s, _) = server.raw("GET", "/healthz", &[("host", "127.0.0.1")], "")?;
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

#[test]
fn requests_are_limited_per_token_not_per_claimed_name() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let toml =
        admin_and_acme(ADMIN, ACME).replace("[server]\n", "[server]\nrequests_per_minute = 20\n");
    let server = Server::start_configured(dir.path(), &toml)?;
    let host = server.base.trim_start_matches("http://").to_owned();
    let get = |token: &str| {
        let auth = format!("Bearer {token}");
        server.raw(
            "GET",
            "/v1/workspaces/acme/sessions",
            &[("host", host.as_str()), ("authorization", auth.as_str())],
            "",
        )
    };
    let mut limited = 0;
    for _ in 0..30 {
        let (s, body) = get(ACME)?;
        if s == 429 {
            ensure!(body["code"] == "rate_limited", "{body}");
            limited += 1;
        } else {
            // Admitted (the workspace does not exist yet: 404).
            ensure!(s == 404, "{s} {body}");
        }
    }
    ensure!(limited >= 5, "only {limited} of 30 requests were limited");
    // Another token has its own budget.
    let (s, body) = get(ADMIN)?;
    ensure!(s == 404, "{s} {body}");
    Ok(())
}
