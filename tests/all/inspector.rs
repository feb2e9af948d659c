//! The inspector's server side (issue 83): the shell at `/ui` holds no data
//! and is served under a strict policy, the pages' reads are the API's
//! (`…/access`, and the paged listings they use). The pages themselves are
//! tried in a real browser by `tests/browser/` (scripts/dev.sh test-browser).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

use crate::support::{Server, cairn_bin};

const ADMIN: &str = "inspector-admin-0123456789abcdef";

/// `cairn tokens create` for workspace `acme`; the token.
fn token(data: &Path, scope: &str) -> Result<String> {
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(data))
        .arg("--data-dir")
        .arg(data)
        .args([
            "--workspace",
            "acme",
            "tokens",
            "create",
            "--scope",
            scope,
            "--json",
        ])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: Value = serde_json::from_slice(&out.stdout)?;
    Ok(made["token"].as_str().context("token")?.to_owned())
}

#[test]
fn the_shell_holds_no_data_and_the_pages_read_through_the_guard() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let (read, write) = (token(&data, "read")?, token(&data, "write")?);
    let config = dir.path().join("cairn.toml");
    std::fs::write(&config, format!("[server]\nadmin_token = \"{ADMIN}\"\n"))?;
    let server = Server::start_with(&data, &["--config", config.to_str().context("path")?])?;
    let host = server.base.trim_start_matches("http://").to_owned();
    let get = |path: &str, token: Option<&str>| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("host", host.as_str())];
        if let Some(auth) = &auth {
            headers.push(("authorization", auth.as_str()));
        }
        server.raw("GET", path, &headers, "")
    };

    // The shell and its files: open, static, under the policy.
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
        ("/ui/icon.svg", "image/svg+xml"),
    ] {
        let (status, text) = server.raw_text(
            "GET",
            path,
            &[("host", host.as_str())],
            "application/json",
            b"",
        )?;
        let lower = text.to_ascii_lowercase();
        ensure!(status == 200, "{path}: {status}");
        ensure!(
            lower.contains(&format!("content-type: {kind}")),
            "{path}: {text}"
        );
        ensure!(
            lower.contains("content-security-policy: default-src 'none'; script-src 'self';"),
            "{path}: no policy"
        );
        ensure!(lower.contains("x-content-type-options: nosniff"), "{path}");
    }
    let (status, _) = get("/ui/secrets.js", None)?;
    ensure!(status == 404, "{status}");
    let (status, _) = server.raw("GET", "/ui", &[("host", "evil.example")], "")?;
    ensure!(status == 403, "a foreign Host: {status}");

    // What a token may do, as the pages ask it; nothing without a token.
    let (status, body) = get("/v1/workspaces/acme/access", Some(&read))?;
    ensure!(
        status == 200 && body == json!({"workspace": "acme", "scope": "read", "admin": false}),
        "{body}"
    );
    let (_, body) = get("/v1/workspaces/acme/access", Some(&write))?;
    ensure!(body["scope"] == "write" && body["admin"] == false, "{body}");
    let (_, body) = get("/v1/workspaces/acme/access", Some(ADMIN))?;
    ensure!(body["admin"] == true, "{body}");
    let (status, _) = get("/v1/workspaces/acme/access", None)?;
    ensure!(status == 401, "{status}");
    let (status, _) = get("/v1/workspaces/globex/access", Some(&read))?;
    ensure!(status == 403, "{status}");

    // The pages' paged listings: a page is the slice of the whole.
    let post = |path: &str, body: &Value| {
        let auth = format!("Bearer {write}");
        server.raw(
            "POST",
            path,
            &[("host", host.as_str()), ("authorization", auth.as_str())],
            &body.to_string(),
        )
    };
    let turns: Vec<Value> = (0..5)
        .map(
            |i| json!({"session": format!("s{i}"), "role": "user", "content": format!("turn {i}")}),
        )
        .collect();
    let (status, body) = post("/v1/workspaces/acme/turns", &json!({ "turns": turns }))?;
    ensure!(status == 200, "{body}");
    let entries: Vec<Value> = (0..5)
        .map(|i| json!({"kind": "fact", "content": format!("fact {i}")}))
        .collect();
    let (status, body) = post(
        "/v1/workspaces/acme/entries",
        &json!({ "entries": entries }),
    )?;
    ensure!(status == 200, "{body}");
    for (all, page) in [
        (
            "/v1/workspaces/acme/sessions",
            "/v1/workspaces/acme/sessions?offset=1&limit=2",
        ),
        (
            "/v1/workspaces/acme/entries",
            "/v1/workspaces/acme/entries?offset=1&limit=2",
        ),
    ] {
        let (_, all) = get(all, Some(&read))?;
        let (status, page) = get(page, Some(&read))?;
        let all = all.as_array().context("a list")?;
        ensure!(status == 200 && all.len() == 5, "{all:?}");
        ensure!(page.as_array() == Some(&all[1..3].to_vec()), "{page}");
    }
    let (_, past) = get("/v1/workspaces/acme/entries?offset=9", Some(&read))?;
    ensure!(past == json!([]), "{past}");
    Ok(())
}
