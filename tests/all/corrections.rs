//! Agents correct memory over HTTP (`cairn serve`): correct, retract and
//! pin an entry under the token's scope, the asking session's lineage and
//! the facade's rules; a read-scoped token can do none of them. The same
//! tools over MCP are tried in `mcp.rs`.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use cairn::{
    Cairn, CairnConfig, EntryInput, EntryKind, Provenance, Role, SessionKind, SessionSpec,
    TurnInput,
};
use serde_json::{Value, json};

use crate::support::Server;

const WRITER: &str = "acme-writer-0123456789";

/// Sessions `main`, its sub-agent `helper` and an unrelated sub-agent
/// `other`, with one fact from `main` and one from `other`; a read-scoped
/// token made with the CLI. Returns the facts' ids and the read token.
fn fixture(data: &Path) -> Result<(String, String, String)> {
    let (ours, theirs) = {
        let cairn = Cairn::open(CairnConfig {
            data_dir: data.to_owned(),
            storage: crate::support::storage(data),
            ..CairnConfig::default()
        })?;
        cairn.ingest(
            "acme",
            &[TurnInput::new("main", Role::User, "Dana lives in Porto.")],
        )?;
        for (id, parent) in [("helper", Some("main")), ("other", None)] {
            cairn.bootstrap(
                "acme",
                &SessionSpec {
                    id: id.into(),
                    kind: SessionKind::Subagent,
                    parent: parent.map(Into::into),
                    ..SessionSpec::default()
                },
            )?;
            cairn.ingest("acme", &[TurnInput::new(id, Role::Assistant, "Noted.")])?;
        }
        let about = |session: &str, content: &str| -> Result<String> {
            let mut input = EntryInput::new(EntryKind::Fact, content).about("dana");
            input.provenance = Some(Provenance {
                session: session.into(),
                from_seq: 0,
                to_seq: 0,
            });
            Ok(cairn.append_entry("acme", &input)?.id)
        };
        let ids = (
            about("main", "Dana lives in Porto")?,
            about("other", "Dana's badge number is 4411")?,
        );
        cairn.flush()?;
        ids
    };
    let made = std::process::Command::new(crate::support::cairn_bin())
        .envs(crate::support::backend_env(data))
        .arg("--data-dir")
        .arg(data)
        .args(["--workspace", "acme", "tokens", "create", "--scope", "read"])
        .output()?;
    ensure!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let reader = String::from_utf8(made.stdout)?.trim().to_owned();
    Ok((ours, theirs, reader))
}

/// One request with a bearer token: status and JSON body.
fn call(
    server: &Server,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> Result<(u16, Value)> {
    let url = format!("{}{path}", server.base);
    let auth = format!("Bearer {token}");
    let mut response = match (method, body) {
        ("GET", _) => server
            .agent
            .get(&url)
            .header("authorization", &auth)
            .call()?,
        // A bodiless request that changes state names its client (the
        // cross-site guard).
        ("DELETE", _) => server
            .agent
            .delete(&url)
            .header("authorization", &auth)
            .header("x-cairn-client", "tests")
            .call()?,
        ("PUT", None) => server
            .agent
            .put(&url)
            .header("authorization", &auth)
            .header("x-cairn-client", "tests")
            .send_empty()?,
        ("POST", Some(body)) => server
            .agent
            .post(&url)
            .header("authorization", &auth)
            .send_json(&body)?,
        other => anyhow::bail!("no such call: {other:?}"),
    };
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string()?;
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).with_context(|| text.clone())?
    };
    Ok((status, value))
}

#[test]
fn agents_correct_retract_and_pin_over_http_under_scope_and_lineage() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let (ours, theirs, reader) = fixture(&data)?;
    let config = dir.path().join("cairn.toml");
    std::fs::write(
        &config,
        format!("[[server.tokens]]\ntoken = \"{WRITER}\"\nworkspaces = [\"acme\"]\n"),
    )?;
    let server = Server::start_with(&data, &["--config", config.to_str().context("path")?])?;
    let entry = |id: &str| format!("/v1/workspaces/acme/entries/{id}");
    let correction = json!({"content": "Dana lives in Lisbon", "reason": "she moved in May"});

    // A read-scoped token can do none of it, and nothing changes.
    for (method, path, body) in [
        (
            "POST",
            format!("{}/correct", entry(&ours)),
            Some(correction.clone()),
        ),
        (
            "POST",
            format!("{}/retract", entry(&ours)),
            Some(json!({"reason": "r"})),
        ),
        ("PUT", format!("{}/pin", entry(&ours)), None),
        ("DELETE", format!("{}/pin", entry(&ours)), None),
    ] {
        let (status, body) = call(&server, method, &path, &reader, body)?;
        ensure!(
            status == 403 && body["message"].as_str().is_some_and(|m| m.contains("read")),
            "{method} {path}: {status} {body}"
        );
    }
    let (status, pins) = call(&server, "GET", "/v1/workspaces/acme/pins", &reader, None)?;
    ensure!(status == 200 && pins == json!([]), "{status} {pins}");
    let (_, old) = call(&server, "GET", &entry(&ours), &reader, None)?;
    ensure!(old["status"]["state"] == "live", "{old}");

    // A sub-agent corrects only inside its lineage.
    let (status, body) = call(
        &server,
        "POST",
        &format!("{}/correct?asking=helper", entry(&theirs)),
        WRITER,
        Some(correction.clone()),
    )?;
    ensure!(
        status == 403 && body["code"] == "lineage_denied",
        "{status} {body}"
    );
    let (status, fixed) = call(
        &server,
        "POST",
        &format!("{}/correct?asking=helper", entry(&ours)),
        WRITER,
        Some(correction.clone()),
    )?;
    ensure!(status == 200, "{status} {fixed}");
    ensure!(
        fixed["replaces"] == ours.as_str()
            && fixed["subject"] == "dana"
            && fixed["provenance"]["session"] == "helper",
        "{fixed}"
    );
    let new = fixed["id"].as_str().context("id")?.to_owned();
    let (_, history) = call(
        &server,
        "GET",
        &format!("{}/history", entry(&new)),
        &reader,
        None,
    )?;
    ensure!(
        history.as_array().map(Vec::len) == Some(2)
            && history[0]["content"] == "Dana lives in Porto"
            && history[1]["content"] == "Dana lives in Lisbon",
        "{history}"
    );
    // Bad input writes nothing: an empty reason, a status on a fact, a
    // second correction of the replaced entry, an unknown entry.
    for (path, body, code) in [
        (
            entry(&new),
            json!({"content": "x", "reason": " "}),
            (400, "invalid"),
        ),
        (
            entry(&new),
            json!({"content": "x", "reason": "r", "status": "done"}),
            (400, "invalid"),
        ),
        (entry(&ours), correction.clone(), (409, "already_replaced")),
        (
            entry("01J00000000000000000000000"),
            correction.clone(),
            (404, "entry_not_found"),
        ),
    ] {
        let (status, body) = call(
            &server,
            "POST",
            &format!("{path}/correct"),
            WRITER,
            Some(body),
        )?;
        ensure!(
            (status, body["code"].as_str().unwrap_or_default()) == code,
            "{path}: {status} {body}"
        );
    }

    // Pin and unpin.
    let (status, pinned) = call(
        &server,
        "PUT",
        &format!("{}/pin", entry(&new)),
        WRITER,
        None,
    )?;
    ensure!(
        status == 200 && pinned["pinned"] == true && pinned["pins"] == json!([new]),
        "{status} {pinned}"
    );
    let (_, pins) = call(&server, "GET", "/v1/workspaces/acme/pins", &reader, None)?;
    ensure!(pins == json!([new]), "{pins}");
    let (status, _) = call(
        &server,
        "PUT",
        &format!("{}/pin?asking=helper", entry(&theirs)),
        WRITER,
        None,
    )?;
    ensure!(status == 403, "{status}");

    // Retract: the tombstone keeps the reason; the entry and its earlier
    // version are gone, and so is the pin.
    let (status, tombstone) = call(
        &server,
        "POST",
        &format!("{}/retract", entry(&new)),
        WRITER,
        Some(json!({"reason": "Dana asked us to forget where she lives"})),
    )?;
    ensure!(
        status == 200
            && tombstone["target"]["kind"] == "entry"
            && tombstone["removed"]["entries"] == 2,
        "{status} {tombstone}"
    );
    let (status, _) = call(&server, "GET", &entry(&new), WRITER, None)?;
    ensure!(status == 404, "{status}");
    let (_, pins) = call(&server, "GET", "/v1/workspaces/acme/pins", WRITER, None)?;
    ensure!(pins == json!([]), "{pins}");
    let (_, tombstones) = call(
        &server,
        "GET",
        "/v1/workspaces/acme/tombstones",
        WRITER,
        None,
    )?;
    ensure!(
        tombstones.as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["reason"] == "Dana asked us to forget where she lives")),
        "{tombstones}"
    );
    let (status, body) = call(
        &server,
        "POST",
        &format!("{}/retract", entry(&theirs)),
        WRITER,
        Some(json!({"reason": ""})),
    )?;
    ensure!(
        status == 400 && body["code"] == "invalid",
        "{status} {body}"
    );
    let (_, still) = call(&server, "GET", &entry(&theirs), WRITER, None)?;
    ensure!(still["status"]["state"] == "live", "{still}");
    Ok(())
}
