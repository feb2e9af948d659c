//! Compaction as a user sees it: the CLI round trip (compact, then expand
//! back to the exact turns), the HTTP routes, a SIGKILL in the middle of
//! passes (old view or new, never half), and the model summariser against
//! stub endpoints that answer garbage, time out, or grow the text.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use cairn::{Cairn, CairnConfig, Cover, ModelConfig, Role, SummaryMethod, TurnInput};
use serde_json::{Value, json};

use crate::support::{Server, cairn_bin};

fn cairn(data_dir: &std::path::Path, args: &[&str], stdin: Option<&[u8]>) -> Result<Output> {
    let mut child = Command::new(cairn_bin())
        .envs(crate::support::backend_env(data_dir))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut input = child.stdin.take().context("stdin")?;
    input.write_all(stdin.unwrap_or_default())?;
    drop(input);
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "cairn {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn json_of(out: &Output) -> Result<Value> {
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A session with tool calls and results, decisions and questions.
fn turns(session: &str, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 0..n {
        let turn = match i % 5 {
            0 => {
                json!({"session": session, "role": "user", "content": format!("Step {i}: let's go with plan {i} for the importer, café ✓.")})
            }
            1 => {
                json!({"session": session, "role": "assistant", "content": format!("Running the check for step {i}."), "tool_call_id": format!("c{i}")})
            }
            2 => {
                json!({"session": session, "role": "tool", "content": format!("{{\"ok\": true, \"rows\": {i}}}"), "tool_call_id": format!("c{}", i - 1)})
            }
            3 => {
                json!({"session": session, "role": "user", "content": format!("I still need to figure out the limits for batch {i}?")})
            }
            _ => {
                json!({"session": session, "role": "assistant", "content": format!("I've updated the importer config for step {i}.\nNext: batch {}.", i + 1)})
            }
        };
        out.push(turn);
    }
    out
}

fn jsonl(turns: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for t in turns {
        out.extend_from_slice(t.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

#[test]
fn cli_compact_then_expand_returns_the_exact_turns() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = turns("s1", 300);
    cairn(dir.path(), &["ingest"], Some(&jsonl(&input)))?;
    let before = json_of(&cairn(dir.path(), &["transcript", "s1", "--json"], None)?)?;
    let report = json_of(&cairn(
        dir.path(),
        &["compact", "s1", "--budget", "800", "--json"],
        None,
    )?)?;
    ensure!(report["changed"] == true, "{report}");
    ensure!(
        report["tokens_after"].as_u64() < report["tokens_before"].as_u64(),
        "{report}"
    );
    ensure!(
        report["tokens_after"].as_u64().unwrap_or(u64::MAX) <= 800,
        "{report}"
    );
    // Expanding the view (every summary, then the raw tail) gives the record back.
    let items = report["view"]["items"].as_array().context("items")?;
    let mut expanded: Vec<Value> = Vec::new();
    for item in items {
        ensure!(item["type"] == "summary", "{item}");
        let id = item["id"].as_str().context("id")?;
        let mut from = 0u64;
        loop {
            let page = json_of(&cairn(
                dir.path(),
                &["expand", id, "--all", "--from", &from.to_string(), "--json"],
                None,
            )?)?;
            let turns = page["turns"].as_array().context("turns")?;
            expanded.extend(turns.iter().cloned());
            if page["truncated"] != true {
                break;
            }
            from = turns
                .last()
                .and_then(|t| t["seq"].as_u64())
                .context("seq")?
                + 1;
        }
    }
    let tail_from = report["tail_from"].as_u64().context("tail_from")?;
    let before = before.as_array().context("transcript")?;
    expanded.extend(before[tail_from as usize..].iter().cloned());
    ensure!(expanded.len() == before.len());
    for (a, b) in expanded.iter().zip(before) {
        ensure!(
            a["content"] == b["content"] && a["seq"] == b["seq"],
            "{a} != {b}"
        );
        ensure!(a["content_hash"] == b["content_hash"]);
    }
    // One level down, in text: the summary says what was decided, with turns.
    let id = items[0]["id"].as_str().context("id")?;
    let text =
        String::from_utf8_lossy(&cairn(dir.path(), &["expand", id], None)?.stdout).into_owned();
    ensure!(text.contains("level "), "{text}");
    ensure!(text.contains("decided: Step"), "{text}");
    Ok(())
}

#[test]
fn http_compaction_hook_view_and_expand() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let (s, _) = server.post(
        "/v1/workspaces/acme/turns",
        &json!({"turns": turns("s1", 200)}),
    )?;
    ensure!(s == 200);
    // The hook captures first, then compacts with the configured budget.
    let (s, hook) = server.post("/v1/workspaces/acme/sessions/s1/compact", &json!({}))?;
    ensure!(s == 200, "{hook}");
    ensure!(hook["capture"]["trigger"] == "pre_compaction", "{hook}");
    // The whole session fits the configured 8,000 tokens: the tail keeps it.
    ensure!(hook["compaction"]["changed"] == false, "{hook}");
    ensure!(
        hook["compaction"]["tokens_after"].as_u64() <= Some(8000),
        "{hook}"
    );
    let (s, report) = server.post(
        "/v1/workspaces/acme/sessions/s1/compaction",
        &json!({"budget": 600}),
    )?;
    ensure!(s == 200, "{report}");
    let (s, view) = server.get("/v1/workspaces/acme/sessions/s1/compaction")?;
    ensure!(
        s == 200 && view["items"] == report["view"]["items"],
        "{view}"
    );
    let id = view["items"][0]["id"].as_str().context("id")?;
    let (s, expansion) = server.get(&format!("/v1/workspaces/acme/summaries/{id}"))?;
    ensure!(s == 200, "{expansion}");
    ensure!(expansion["node"]["id"] == id);
    let (s, page) = server.get(&format!("/v1/workspaces/acme/summaries/{id}/turns"))?;
    ensure!(s == 200 && page["turns"][0]["seq"] == 0, "{page}");
    let (s, err) = server.get("/v1/workspaces/acme/summaries/sum-nothere")?;
    ensure!(s == 404 && err["code"] == "summary_not_found", "{err}");
    let (s, err) = server.post(
        "/v1/workspaces/acme/sessions/s1/compaction",
        &json!({"budget": 0}),
    )?;
    ensure!(s == 400, "{err}");
    // The OpenAPI description lists the routes.
    let (_, api) = server.get("/openapi.json")?;
    ensure!(api["paths"]["/v1/workspaces/{workspace}/summaries/{id}"].is_object());
    Ok(())
}

/// Checks a view read after a crash: contiguous from turn 0, every summary
/// there, its range matching, and the record untouched.
fn check_view(server: &Server, record: &[Value]) -> Result<u64> {
    let (s, view) = server.get("/v1/workspaces/acme/sessions/s1/compaction")?;
    ensure!(s == 200, "{view}");
    let mut next = 0u64;
    for item in view["items"].as_array().context("items")? {
        let (from, to) = if item["type"] == "summary" {
            let id = item["id"].as_str().context("id")?;
            let (s, e) = server.get(&format!("/v1/workspaces/acme/summaries/{id}"))?;
            ensure!(s == 200, "summary {id} of the view is missing: {e}");
            (e["node"]["from_seq"].as_u64(), e["node"]["to_seq"].as_u64())
        } else {
            (item["from"].as_u64(), item["to"].as_u64())
        };
        ensure!(from == Some(next), "gap before {item}");
        next = to.context("to")? + 1;
    }
    ensure!(view["covered_to"] == next, "{view}");
    let (s, transcript) = server.get("/v1/workspaces/acme/sessions/s1/transcript")?;
    ensure!(s == 200);
    let transcript = transcript.as_array().context("transcript")?;
    ensure!(transcript.len() == record.len());
    for (a, b) in transcript.iter().zip(record) {
        ensure!(a["content"] == b["content"], "the record changed");
    }
    Ok(next)
}

#[test]
fn sigkill_during_compaction_leaves_the_old_view_or_the_new() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let record = turns("s1", 1500);
    {
        let server = Server::start(dir.path())?;
        for chunk in record.chunks(250) {
            let (s, _) = server.post("/v1/workspaces/acme/turns", &json!({"turns": chunk}))?;
            ensure!(s == 200);
        }
    }
    for (round, delay_ms) in [150u64, 400, 900].into_iter().enumerate() {
        let server = std::sync::Arc::new(Server::start(dir.path())?);
        check_view(&server, &record)?;
        let budget = 4000 - 1000 * round;
        let caller = server.clone();
        let passes = std::thread::spawn(move || {
            for b in [budget, budget / 2, budget / 4] {
                if caller
                    .post(
                        "/v1/workspaces/acme/sessions/s1/compaction",
                        &json!({"budget": b}),
                    )
                    .is_err()
                {
                    break;
                }
            }
        });
        std::thread::sleep(Duration::from_millis(delay_ms));
        server.sigkill()?;
        let _ = passes.join();
    }
    let server = Server::start(dir.path())?;
    check_view(&server, &record)?;
    // And a pass after the crashes still works and expands.
    let (s, report) = server.post(
        "/v1/workspaces/acme/sessions/s1/compaction",
        &json!({"budget": 500}),
    )?;
    ensure!(s == 200, "{report}");
    let covered = check_view(&server, &record)?;
    ensure!(covered > 0);
    Ok(())
}

/// A stub chat-completions endpoint: answers every request with `answer`
/// (after `delay`), for as long as the test runs.
fn stub(answer: &'static str, delay: Duration) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = vec![0u8; 1 << 16];
                let mut got = Vec::new();
                // Read the head and the body named by content-length.
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                std::thread::sleep(delay);
                let body = match answer {
                    "garbage" => "<html>not json</html>".to_owned(),
                    "longer" => {
                        json!({"choices": [{"message": {"content": "word ".repeat(5000)}}]})
                            .to_string()
                    }
                    text => json!({"choices": [{"message": {"content": text}}]}).to_string(),
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Ok(format!("http://{addr}/v1"))
}

fn methods_with(url: String) -> Result<Vec<SummaryMethod>> {
    let dir = tempfile::tempdir()?;
    let mut config = CairnConfig {
        data_dir: dir.path().to_owned(),
        storage: crate::support::storage(dir.path()),
        ..CairnConfig::default()
    };
    config.compaction.model = ModelConfig {
        enabled: true,
        url,
        model: "stub".to_owned(),
        api_key: Some("k".to_owned()),
        timeout_ms: 300,
        ..ModelConfig::default()
    };
    let cairn = Cairn::open(config)?;
    let input: Vec<TurnInput> = (0..60)
        .map(|i| {
            TurnInput::new(
                "s1",
                if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                &format!("Turn {i}: we decided to move the importer to batch mode {i} this week."),
            )
        })
        .collect();
    cairn.ingest("acme", &input)?;
    let report = cairn.compact("acme", "s1", Some(600))?;
    let mut methods = Vec::new();
    for cover in &report.view.items {
        if let Cover::Summary { id } = cover {
            let e = cairn.memory_expand("acme", id, None)?;
            ensure!(e.node.tokens_after < e.node.tokens_before);
            methods.push(e.node.method);
        }
    }
    Ok(methods)
}

#[test]
fn model_summariser_is_used_and_falls_back_on_garbage_timeouts_and_growth() -> Result<()> {
    let good = methods_with(stub(
        "Moved the importer to batch mode (t0-t23).",
        Duration::ZERO,
    )?)?;
    ensure!(
        !good.is_empty() && good.iter().all(|m| *m == SummaryMethod::Model),
        "{good:?}"
    );
    for (answer, delay) in [
        ("garbage", Duration::ZERO),
        ("longer", Duration::ZERO),
        ("late", Duration::from_millis(1500)),
    ] {
        let methods = methods_with(stub(answer, delay)?)?;
        ensure!(!methods.is_empty(), "{answer}: nothing compacted");
        ensure!(
            methods.iter().all(|m| matches!(
                m,
                SummaryMethod::Extractive
                    | SummaryMethod::ExtractiveTight
                    | SummaryMethod::Fallback
            )),
            "{answer}: {methods:?}"
        );
    }
    // Nobody listening: the same.
    let closed = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let methods = methods_with(format!("http://{closed}/v1"))?;
    ensure!(methods.iter().all(|m| *m != SummaryMethod::Model));
    Ok(())
}

#[test]
fn after_turn_compacts_once_the_view_passes_its_share_of_the_window() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut config = CairnConfig {
        data_dir: dir.path().to_owned(),
        storage: crate::support::storage(dir.path()),
        ..CairnConfig::default()
    };
    config.compaction.window_tokens = 2_000;
    config.compaction.trigger_fraction = 0.5;
    let cairn = Cairn::open(config)?;
    let mut compacted_at = None;
    for i in 0..200u64 {
        cairn.ingest(
            "acme",
            &[TurnInput::new(
                "s1",
                Role::User,
                &format!("Turn {i}: we decided to keep the retry budget at {i} for the queue."),
            )],
        )?;
        cairn.after_turn("acme", "s1")?;
        let view = cairn.compaction_view("acme", "s1", None)?;
        if compacted_at.is_none() && view.covered_to > 0 {
            compacted_at = Some(i);
        }
    }
    let at = compacted_at.context("after_turn never compacted")?;
    // ~20 tokens a turn: 1,000 tokens are passed around turn 50, not before.
    ensure!((30..80).contains(&at), "compacted at turn {at}");
    Ok(())
}
