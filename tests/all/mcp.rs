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
    Ok(())
}
