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

/// Sends `request` (the whole request, head and body) over a fresh
/// connection and answers the status and the JSON body (`null` if empty):
/// for requests whose every header the test must choose, down to a missing
/// `Content-Type`.
fn exactly(server: &Server, request: &str) -> Result<(u16, serde_json::Value)> {
    use std::io::{Read, Write};
    let addr = server.base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    conn.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (top, body) = text.split_once("\r\n\r\n").context("no end of headers")?;
    let status = top
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in {top:?}"))?;
    let body = if body.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(body).with_context(|| format!("body of {text:?}"))?
    };
    Ok((status, body))
}

/// A `POST path` with these extra header lines (each ending in CRLF) and
/// `body`, sent exactly so.
fn post_exactly(
    server: &Server,
    path: &str,
    headers: &str,
    body: &str,
) -> Result<(u16, serde_json::Value)> {
    let host = server.base.trim_start_matches("http://");
    exactly(
        server,
        &format!(
            "POST {path} HTTP/1.1\r\nhost: {host}\r\n{headers}content-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// Issue 78: a web page the operator opens could end sessions and start
/// paid extraction sweeps on the default (tokenless, loopback) server. A
/// state-changing request from another origin, or one a plain HTML form can
/// send (`text/plain`, a form encoding, no body), is refused with 403; the
/// server's own origin, non-browser clients (no `Origin`) sending JSON, and
/// a client that names itself with `x-cairn-client` still get through.
#[test]
fn cross_site_requests_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(&dir.path().join("data"))?;
    let json = "content-type: application/json\r\n";
    let turn = r#"{"turns":[{"session":"main","role":"user","content":"hello"}]}"#;
    let (s, body) = post_exactly(&server, "/v1/workspaces/acme/turns", json, turn)?;
    ensure!(s == 200, "a JSON client without Origin: {s} {body}");

    let end = "/v1/workspaces/acme/sessions/main/end";
    let refused = |(s, body): (u16, serde_json::Value), code: &str, what: &str| -> Result<()> {
        ensure!(s == 403 && body["code"] == code, "{what}: {s} {body}");
        Ok(())
    };
    // Another origin, on a bodiless route and on the sweep.
    let evil = "origin: http://evil.example\r\ncontent-type: application/json\r\n";
    refused(
        post_exactly(&server, end, evil, "{}")?,
        "origin_not_allowed",
        "end from evil.example",
    )?;
    refused(
        post_exactly(&server, "/v1/gateway_start", evil, "{}")?,
        "origin_not_allowed",
        "gateway_start from evil.example",
    )?;
    // Another port of localhost is another origin (a local dev server).
    let port = server.base.rsplit(':').next().context("port")?;
    let other_port = format!("origin: http://localhost:1{port}\r\n{json}");
    refused(
        post_exactly(&server, end, &other_port, "{}")?,
        "origin_not_allowed",
        "end from another localhost port",
    )?;
    refused(
        post_exactly(&server, "/v1/workspaces/acme/turns", evil, turn)?,
        "origin_not_allowed",
        "turns from evil.example",
    )?;
    refused(
        post_exactly(&server, end, &format!("origin: null\r\n{json}"), "{}")?,
        "origin_not_allowed",
        "Origin: null",
    )?;
    // A browser that sends no Origin but says the request is cross-site.
    refused(
        post_exactly(
            &server,
            end,
            &format!("sec-fetch-site: cross-site\r\n{json}"),
            "{}",
        )?,
        "origin_not_allowed",
        "Sec-Fetch-Site: cross-site",
    )?;
    // What an HTML form sends: a simple content type, or no body at all.
    for (headers, body) in [
        ("content-type: text/plain\r\n", r#"{"x":1}"#),
        ("content-type: application/x-www-form-urlencoded\r\n", "a=b"),
        ("content-type: multipart/form-data; boundary=x\r\n", "--x--"),
        ("", ""),
    ] {
        refused(
            post_exactly(&server, end, headers, body)?,
            "json_required",
            &format!("end with {headers:?}"),
        )?;
        refused(
            post_exactly(&server, "/v1/gateway_start", headers, body)?,
            "json_required",
            &format!("gateway_start with {headers:?}"),
        )?;
    }
    // The session is still open: nothing above ran.
    let (s, session) = server.get("/v1/workspaces/acme/sessions/main")?;
    ensure!(s == 200 && session["state"] == "open", "{s} {session}");

    // Reads are not refused (a page cannot read the answer anyway).
    let get = format!(
        "GET /v1/workspaces/acme/sessions HTTP/1.1\r\nhost: {}\r\norigin: http://evil.example\r\n\
         connection: close\r\n\r\n",
        server.base.trim_start_matches("http://")
    );
    let (s, body) = exactly(&server, &get)?;
    ensure!(s == 200, "a read with a foreign Origin: {s} {body}");
    // The server's own origin, and a client naming itself, get through.
    let own = format!(
        "origin: {}\r\nsec-fetch-site: same-origin\r\n{json}",
        server.base
    );
    let (s, body) = post_exactly(
        &server,
        "/v1/workspaces/acme/sessions/main/after_turn",
        &own,
        "",
    )?;
    ensure!(s == 200, "same origin: {s} {body}");
    let (s, body) = post_exactly(&server, end, "x-cairn-client: test\r\n", "")?;
    ensure!(
        s == 200 && body["state"] == "ended",
        "x-cairn-client: {s} {body}"
    );

    // An allow-list admits the origins it names, and those only.
    let dir = tempfile::tempdir()?;
    let server = Server::start_configured(
        dir.path(),
        "[server]\nallowed_origins = [\"https://dash.example\"]\n",
    )?;
    let dash = format!("origin: https://dash.example\r\nsec-fetch-site: cross-site\r\n{json}");
    let (s, body) = post_exactly(&server, "/v1/workspaces/acme/turns", &dash, turn)?;
    ensure!(s == 200, "an allowed origin: {s} {body}");
    refused(
        post_exactly(&server, "/v1/workspaces/acme/turns", evil, turn)?,
        "origin_not_allowed",
        "evil.example beside an allow-list",
    )?;
    Ok(())
}

/// Issue 78: a stream of made-up tokens cost a store lookup each, on the
/// HTTP worker, before any limit. Failed authentications are counted per
/// peer address; over `server.failed_auth_per_minute` the peer's requests
/// that carry a token are refused (429) before any check, while `/healthz`
/// still answers.
#[test]
fn failed_authentications_are_limited_per_peer() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let toml =
        admin_and_acme(ADMIN, ACME).replace("[server]\n", "[server]\nfailed_auth_per_minute = 5\n");
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
    let mut unauthorized = 0;
    let mut limited = 0;
    for i in 0..12 {
        let (s, body) = get(&format!("cairn_{i:012x}_{}", "0".repeat(64)))?;
        match s {
            401 => unauthorized += 1,
            429 => {
                ensure!(body["code"] == "too_many_failed_authentications", "{body}");
                limited += 1;
            }
            _ => anyhow::bail!("a made-up token answered {s} {body}"),
        }
    }
    ensure!(
        unauthorized <= 6 && limited >= 6,
        "{unauthorized} refused as unknown, {limited} limited"
    );
    // The peer is held off, even with a good token, until its budget
    // refills; health stays open.
    let (s, body) = get(ACME)?;
    ensure!(s == 429, "a good token from a held-off peer: {s} {body}");
    let (s, _) = server.raw("GET", "/healthz", &[("host", host.as_str())], "")?;
    ensure!(s == 200);
    Ok(())
}

/// The description tells clients about the cross-site checks: every
/// state-changing operation declares `x-cairn-client` and names the
/// refusals (`origin_not_allowed`, `json_required`) in its 403.
#[test]
fn the_description_names_the_cross_site_refusals() -> Result<()> {
    let api = serde_json::to_value(cairn_cli::http::api_doc())?;
    let mut checked = 0;
    for (path, item) in api["paths"].as_object().context("paths")? {
        for (method, op) in item.as_object().context("item")? {
            if method == "get" {
                continue;
            }
            let forbidden = op["responses"]["403"]["description"]
                .as_str()
                .unwrap_or_default();
            for code in ["origin_not_allowed", "json_required"] {
                ensure!(
                    forbidden.contains(code),
                    "{method} {path}: 403 without {code}"
                );
            }
            let declared = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "x-cairn-client" && p["in"] == "header");
            ensure!(declared, "{method} {path} does not declare x-cairn-client");
            checked += 1;
        }
    }
    ensure!(checked > 20, "only {checked} state-changing operations");
    Ok(())
}
