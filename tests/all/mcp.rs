//! `cairn mcp` over its real stdio, spoken to line by line: the rules a
//! sub-agent meets (lineage on every tool and resource, notes only into its
//! lineage) and a server that outlives bad input. The official SDKs drive
//! the same binary in `tests/mcp/` (`scripts/dev.sh test`).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use cairn::{Cairn, CairnConfig, EntryInput, EntryKind, Role, SessionKind, SessionSpec, TurnInput};
use serde_json::{Value, json};

use crate::support::cairn_bin;

/// A `cairn mcp` child and a minimal JSON-RPC client over its stdio.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(data: &Path, args: &[&str]) -> Result<Mcp> {
        let mut child = Command::new(cairn_bin())
            .envs(crate::support::backend_env(data))
            .arg("--data-dir")
            .arg(data)
            .args(args)
            .env("RUST_LOG", "error")
            .env("CAIRN_SEARCH__RATE_PER_MINUTE", "1000")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning cairn mcp")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut mcp = Mcp {
            child,
            stdin,
            stdout,
            next: 0,
        };
        let init = mcp.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "rust-e2e", "version": "0"}
            }),
        )?;
        ensure!(init["result"]["serverInfo"]["name"] == "cairn", "{init}");
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(mcp)
    }

    fn send(&mut self, message: &Value) -> Result<()> {
        writeln!(self.stdin, "{message}")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// Sends a raw line and reads the answer to request `id`.
    fn raw(&mut self, line: &str, id: u64) -> Result<Value> {
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()?;
        self.answer(id)
    }

    fn answer(&mut self, id: u64) -> Result<Value> {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("cairn mcp closed its stdout");
            }
            let v: Value = serde_json::from_str(&line).with_context(|| line.clone())?;
            if v["id"] == id {
                return Ok(v);
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        self.answer(id)
    }

    /// A tool call: `(is_error, structured content)`.
    fn call(&mut self, tool: &str, arguments: Value) -> Result<(bool, Value)> {
        let r = self.request("tools/call", json!({"name": tool, "arguments": arguments}))?;
        let result = &r["result"];
        ensure!(result.is_object(), "{tool}: not a tool result: {r}");
        Ok((
            result["isError"] == true,
            result["structuredContent"].clone(),
        ))
    }

    fn ok(&mut self, tool: &str, arguments: Value) -> Result<Value> {
        let (error, body) = self.call(tool, arguments.clone())?;
        ensure!(!error, "{tool} {arguments}: {body}");
        Ok(body)
    }

    fn refused(&mut self, tool: &str, arguments: Value, code: &str) -> Result<()> {
        let (error, body) = self.call(tool, arguments.clone())?;
        ensure!(error && body["code"] == code, "{tool} {arguments}: {body}");
        Ok(())
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `main` with a sub-agent `helper`, and an unrelated sub-agent `other`.
fn fixture(data: &Path) -> Result<()> {
    let cairn = Cairn::open(CairnConfig {
        data_dir: data.to_owned(),
        storage: crate::support::storage(data),
        ..CairnConfig::default()
    })?;
    cairn.ingest(
        "default",
        &[TurnInput::new(
            "main",
            Role::User,
            "We ship the payments beta on Friday.",
        )],
    )?;
    for (id, parent) in [("helper", Some("main")), ("other", None)] {
        cairn.bootstrap(
            "default",
            &SessionSpec {
                id: id.into(),
                kind: SessionKind::Subagent,
                parent: parent.map(Into::into),
                ..SessionSpec::default()
            },
        )?;
    }
    cairn.ingest(
        "default",
        &[
            TurnInput::new("helper", Role::Assistant, "Checked the payments tests."),
            TurnInput::new(
                "other",
                Role::User,
                "The other team's payments plan is secret.",
            ),
        ],
    )?;
    cairn.flush()?;
    Ok(())
}

#[test]
fn a_sub_agent_over_mcp_reads_and_notes_its_lineage_only() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    fixture(&data)?;
    let mut mcp = Mcp::start(&data, &["mcp", "--asking", "helper"])?;

    let listed = mcp.ok("session_list", json!({}))?;
    let mut ids: Vec<&str> = listed["sessions"]
        .as_array()
        .context("sessions")?
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    ids.sort_unstable();
    ensure!(ids == ["helper", "main"], "{listed}");

    mcp.ok("read_transcript", json!({"session": "main"}))?;
    mcp.refused(
        "read_transcript",
        json!({"session": "other"}),
        "lineage_denied",
    )?;
    mcp.refused(
        "memory_get",
        json!({"id": "session:other:0-0"}),
        "lineage_denied",
    )?;
    mcp.refused(
        "memory_search",
        json!({"query": "payments", "sessions": ["other"]}),
        "lineage_denied",
    )?;
    let found = mcp.ok("memory_search", json!({"query": "payments plan secret"}))?;
    ensure!(
        found["items"]
            .as_array()
            .is_some_and(|items| items.iter().all(|i| i["session"] != "other")),
        "{found}"
    );

    // Notes come from the asking session by default, and only into its lineage.
    let note = mcp.ok(
        "memory_note",
        json!({"kind": "fact", "content": "The payments tests pass"}),
    )?;
    ensure!(note["provenance"]["session"] == "helper", "{note}");
    mcp.refused(
        "memory_note",
        json!({"kind": "fact", "content": "x", "session": "other"}),
        "lineage_denied",
    )?;

    // Resources follow the same rule.
    let r = mcp.request(
        "resources/read",
        json!({"uri": "cairn://sessions/main/context"}),
    )?;
    ensure!(
        r["result"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("cairn-memory")),
        "{r}"
    );
    let r = mcp.request(
        "resources/read",
        json!({"uri": "cairn://sessions/other/context"}),
    )?;
    ensure!(r["error"]["data"]["code"] == "lineage_denied", "{r}");
    let uris = mcp.request("resources/list", json!({}))?;
    let uris = uris["result"]["resources"].to_string();
    ensure!(
        uris.contains("sessions/main/context") && !uris.contains("sessions/other/context"),
        "{uris}"
    );
    Ok(())
}

/// The briefing resource is a read like any other: a sub-agent sees the
/// entries of its lineage only (it used to see the whole workspace's).
#[test]
fn the_briefing_resource_keeps_the_asking_sessions_lineage() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    fixture(&data)?;
    {
        let cairn = Cairn::open(CairnConfig {
            data_dir: data.clone(),
            storage: crate::support::storage(&data),
            ..CairnConfig::default()
        })?;
        cairn.append_entries(
            "default",
            &[
                EntryInput::new(EntryKind::Task, "Rerun the payments tests nightly")
                    .from_turns("helper", 0, 0),
                EntryInput::new(EntryKind::Task, "Keep the rival pricing sheet hidden")
                    .from_turns("other", 0, 0),
            ],
        )?;
    }
    let briefing = |args: &[&str]| -> Result<String> {
        let mut mcp = Mcp::start(&data, args)?;
        let r = mcp.request("resources/read", json!({"uri": "cairn://briefing"}))?;
        Ok(r["result"]["contents"][0]["text"]
            .as_str()
            .with_context(|| format!("{r}"))?
            .to_owned())
    };
    let helper = briefing(&["mcp", "--asking", "helper"])?;
    ensure!(helper.contains("payments tests nightly"), "{helper}");
    ensure!(!helper.contains("rival pricing"), "{helper}");
    let user = briefing(&["mcp"])?;
    ensure!(
        user.contains("payments tests nightly") && user.contains("rival pricing"),
        "{user}"
    );
    Ok(())
}

#[test]
fn cairn_mcp_outlives_malformed_input() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    fixture(&data)?;
    let mut mcp = Mcp::start(&data, &["mcp"])?;
    // Arguments of the wrong shape, a tool that does not exist, params that
    // are not an object: answered, and the server goes on.
    mcp.refused("memory_get", json!({"id": 7}), "invalid_arguments")?;
    mcp.refused(
        "read_transcript",
        json!({"session": ["a"]}),
        "invalid_arguments",
    )?;
    let r = mcp.raw(
        r#"{"jsonrpc":"2.0","id":900,"method":"tools/call","params":{"name":"memory_get","arguments":"x"}}"#,
        900,
    )?;
    ensure!(
        r.get("error").is_some() || r["result"]["isError"] == true,
        "{r}"
    );
    let r = mcp.request("tools/call", json!({"name": "rm_rf", "arguments": {}}))?;
    ensure!(r["error"]["code"] == -32602, "{r}");
    let listed = mcp.ok("session_list", json!({}))?;
    ensure!(
        listed["sessions"].as_array().map(Vec::len) == Some(3),
        "{listed}"
    );
    // The workspace is the server's: no argument names another.
    mcp.refused(
        "session_list",
        json!({"workspace": "elsewhere"}),
        "invalid_arguments",
    )?;
    Ok(())
}

/// Entries about the fixture's sessions: one from `main` (in `helper`'s
/// lineage) and one from `other` (outside it). Returns their ids.
fn entries_fixture(data: &Path) -> Result<(String, String)> {
    let cairn = Cairn::open(CairnConfig {
        data_dir: data.to_owned(),
        storage: crate::support::storage(data),
        ..CairnConfig::default()
    })?;
    let about = |session: &str, content: &str| -> Result<String> {
        let mut input = EntryInput::new(EntryKind::Fact, content);
        input.provenance = Some(cairn::Provenance {
            session: session.into(),
            from_seq: 0,
            to_seq: 0,
        });
        Ok(cairn.append_entry("default", &input)?.id)
    };
    let ours = about("main", "The payments beta ships on Friday")?;
    let theirs = about("other", "The other team's plan is secret")?;
    cairn.flush()?;
    Ok((ours, theirs))
}

#[test]
fn a_sub_agent_corrects_retracts_and_pins_within_its_lineage_over_mcp() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    fixture(&data)?;
    let (ours, theirs) = entries_fixture(&data)?;
    let mut mcp = Mcp::start(&data, &["mcp", "--asking", "helper"])?;
    let tools = mcp.request("tools/list", json!({}))?;
    for name in ["memory_correct", "memory_retract", "memory_pin"] {
        ensure!(
            tools["result"]["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["name"] == name)),
            "{name} listed: {tools}"
        );
    }

    // A correction replaces the entry; the reason and the asking session
    // are recorded.
    let fixed = mcp.ok(
        "memory_correct",
        json!({"id": ours, "content": "The payments beta ships on Monday", "reason": "the launch moved"}),
    )?;
    ensure!(fixed["replaces"] == ours.as_str(), "{fixed}");
    ensure!(fixed["kind"] == "fact", "{fixed}");
    ensure!(fixed["provenance"]["session"] == "helper", "{fixed}");
    ensure!(
        fixed["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("Corrects {ours}: the launch moved"))),
        "{fixed}"
    );
    let new = fixed["id"].as_str().context("id")?.to_owned();
    let old = mcp.ok("memory_get", json!({"id": ours}))?;
    ensure!(old["entry"]["status"]["state"] == "replaced", "{old}");
    mcp.refused(
        "memory_correct",
        json!({"id": ours, "content": "Tuesday", "reason": "again"}),
        "already_replaced",
    )?;
    mcp.refused(
        "memory_correct",
        json!({"id": new, "content": "x", "reason": "  "}),
        "invalid",
    )?;
    mcp.refused(
        "memory_correct",
        json!({"id": new, "content": "x", "reason": "y", "session": "other"}),
        "lineage_denied",
    )?;
    // Nothing outside the lineage is touched.
    mcp.refused(
        "memory_correct",
        json!({"id": theirs, "content": "Their plan is public", "reason": "leaked"}),
        "lineage_denied",
    )?;
    mcp.refused("memory_pin", json!({"id": theirs}), "lineage_denied")?;
    mcp.refused(
        "memory_retract",
        json!({"id": theirs, "reason": "not ours"}),
        "lineage_denied",
    )?;

    // Pin and unpin.
    let pinned = mcp.ok("memory_pin", json!({"id": new}))?;
    ensure!(
        pinned["pinned"] == true && pinned["pins"] == json!([new]),
        "{pinned}"
    );
    let unpinned = mcp.ok("memory_pin", json!({"id": new, "pinned": false}))?;
    ensure!(unpinned["pins"] == json!([]), "{unpinned}");
    mcp.ok("memory_pin", json!({"id": new}))?;

    // A retraction erases the entry and its earlier version, leaving a
    // tombstone with the reason; the pin goes with it.
    let tombstone = mcp.ok(
        "memory_retract",
        json!({"id": new, "reason": "the beta was cancelled"}),
    )?;
    ensure!(
        tombstone["reason"] == "the beta was cancelled"
            && tombstone["target"]["kind"] == "entry"
            && tombstone["removed"]["entries"] == 2,
        "{tombstone}"
    );
    mcp.refused("memory_get", json!({"id": new}), "entry_not_found")?;
    mcp.refused("memory_get", json!({"id": ours}), "entry_not_found")?;
    mcp.refused(
        "memory_retract",
        json!({"id": new, "reason": "twice"}),
        "entry_not_found",
    )?;
    drop(mcp);
    let cairn = Cairn::open(CairnConfig {
        data_dir: data.clone(),
        storage: crate::support::storage(&data),
        ..CairnConfig::default()
    })?;
    ensure!(cairn.pinned("default")?.is_empty());
    ensure!(
        cairn
            .tombstones("default")?
            .iter()
            .any(|t| t.reason == "the beta was cancelled")
    );
    // The other team's entry is as it was.
    ensure!(
        cairn.entry("default", &theirs, None)?.entry.content == "The other team's plan is secret"
    );
    Ok(())
}

/// One JSON-RPC request to `cairn serve`'s MCP endpoint (stateless: no
/// handshake needed per request beyond the protocol version header).
fn post_mcp(
    server: &crate::support::Server,
    path: &str,
    token: Option<&str>,
    body: &Value,
) -> Result<(u16, Value)> {
    let mut request = server
        .agent
        .post(format!("{}{path}", server.base))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {token}"));
    }
    let mut response = request.send_json(body)?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string()?;
    let value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).with_context(|| text.clone())?
    };
    Ok((status, value))
}

#[test]
fn cairn_serve_mcp_endpoint_follows_the_token_and_the_asking_query() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    fixture(&data)?;
    let config = dir.path().join("cairn.toml");
    std::fs::write(
        &config,
        "[[server.tokens]]\ntoken = \"acme-token-0123456789\"\nworkspaces = [\"default\"]\n",
    )?;
    let config = config.to_str().context("path")?;
    // A read-scoped stored token too.
    let made = std::process::Command::new(crate::support::cairn_bin())
        .envs(crate::support::backend_env(&data))
        .arg("--data-dir")
        .arg(&data)
        .args(["tokens", "create", "--scope", "read"])
        .output()?;
    ensure!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let reader = String::from_utf8(made.stdout)?.trim().to_owned();
    let server = crate::support::Server::start_with(&data, &["--config", config])?;
    let token = Some("acme-token-0123456789");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "rust-e2e", "version": "0"}}});
    let (status, answer) = post_mcp(&server, "/v1/workspaces/default/mcp", token, &init)?;
    ensure!(
        status == 200 && answer["result"]["serverInfo"]["name"] == "cairn",
        "{status} {answer}"
    );
    // The guard first: no token, a token for another workspace.
    let (status, _) = post_mcp(&server, "/v1/workspaces/default/mcp", None, &init)?;
    ensure!(status == 401, "{status}");
    let (status, _) = post_mcp(&server, "/v1/workspaces/globex/mcp", token, &init)?;
    ensure!(status == 403, "{status}");

    let call = |tool: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}})
    };
    // As the user: every session.
    let (_, all) = post_mcp(
        &server,
        "/v1/workspaces/default/mcp",
        token,
        &call("session_list", json!({})),
    )?;
    ensure!(
        all["result"]["structuredContent"]["sessions"]
            .as_array()
            .map(Vec::len)
            == Some(3),
        "{all}"
    );
    // As the sub-agent `helper` (the query, not a tool argument): its lineage.
    let path = "/v1/workspaces/default/mcp?asking=helper&destination=cloud_model";
    let (_, mine) = post_mcp(&server, path, token, &call("session_list", json!({})))?;
    ensure!(
        mine["result"]["structuredContent"]["sessions"]
            .as_array()
            .map(Vec::len)
            == Some(2),
        "{mine}"
    );
    let (_, denied) = post_mcp(
        &server,
        path,
        token,
        &call("read_transcript", json!({"session": "other"})),
    )?;
    ensure!(
        denied["result"]["isError"] == true
            && denied["result"]["structuredContent"]["code"] == "lineage_denied",
        "{denied}"
    );
    let (status, _) = post_mcp(
        &server,
        "/v1/workspaces/default/mcp?workspace=globex",
        token,
        &init,
    )?;
    ensure!(
        status == 400,
        "an unknown query parameter is refused: {status}"
    );
    // The read-scoped token reads over MCP, and its note is refused.
    let reader = Some(reader.as_str());
    let (status, read) = post_mcp(
        &server,
        "/v1/workspaces/default/mcp",
        reader,
        &call("session_list", json!({})),
    )?;
    ensure!(
        status == 200 && read["result"]["isError"] != true,
        "{status} {read}"
    );
    let (_, note) = post_mcp(
        &server,
        "/v1/workspaces/default/mcp",
        reader,
        &call(
            "memory_note",
            json!({"kind": "fact", "content": "Read tokens write nothing."}),
        ),
    )?;
    ensure!(
        note["result"]["isError"] == true
            && note["result"]["structuredContent"]["code"] == "forbidden",
        "{note}"
    );
    // Nor may it correct, retract or pin.
    let (ours, _) = entries_fixture_of(&server, token)?;
    for (tool, arguments) in [
        (
            "memory_correct",
            json!({"id": ours, "content": "Read tokens rewrite nothing.", "reason": "r"}),
        ),
        ("memory_retract", json!({"id": ours, "reason": "r"})),
        ("memory_pin", json!({"id": ours})),
        ("memory_pin", json!({"id": ours, "pinned": false})),
    ] {
        let (_, refused) = post_mcp(
            &server,
            "/v1/workspaces/default/mcp",
            reader,
            &call(tool, arguments),
        )?;
        ensure!(
            refused["result"]["isError"] == true
                && refused["result"]["structuredContent"]["code"] == "forbidden",
            "{tool}: {refused}"
        );
    }
    let (_, entry) = post_mcp(
        &server,
        "/v1/workspaces/default/mcp",
        token,
        &call("memory_get", json!({"id": ours})),
    )?;
    ensure!(
        entry["result"]["structuredContent"]["entry"]["status"]["state"] == "live",
        "untouched: {entry}"
    );
    // The write token may.
    let (_, pinned) = post_mcp(
        &server,
        "/v1/workspaces/default/mcp",
        token,
        &call("memory_pin", json!({"id": ours})),
    )?;
    ensure!(
        pinned["result"]["structuredContent"]["pins"] == json!([ours]),
        "{pinned}"
    );
    Ok(())
}

/// An entry written over HTTP with the write `token`, from session `main`.
fn entries_fixture_of(
    server: &crate::support::Server,
    token: Option<&str>,
) -> Result<(String, Value)> {
    let mut request = server
        .agent
        .post(format!("{}/v1/workspaces/default/entries", server.base));
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {token}"));
    }
    let body: Value = request
        .send_json(
            json!({"entries": [{"kind": "fact", "content": "Read tokens change nothing",
            "provenance": {"session": "main", "from_seq": 0, "to_seq": 0}}]}),
        )?
        .body_mut()
        .read_json()?;
    let id = body["entries"][0]["id"]
        .as_str()
        .with_context(|| format!("{body}"))?
        .to_owned();
    Ok((id, body))
}
