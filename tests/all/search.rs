//! The memory tools end to end: `memory_search`, `memory_get` and
//! `read_transcript` over HTTP on the real server with the real embedding
//! model, the cross-surface rules (rate limit, lineage, low trust), and
//! `cairn search` / `cairn stats` / `cairn get` from the CLI.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

use crate::support::{Server, cairn_bin};

fn ingest(server: &Server) -> Result<()> {
    let (s, _) = server.post("/v1/workspaces/acme/sessions", &json!({"id": "main"}))?;
    ensure!(s == 200);
    let (s, _) = server.post(
        "/v1/workspaces/acme/sessions",
        &json!({"id": "helper", "kind": "subagent", "parent": "main"}),
    )?;
    ensure!(s == 200);
    let (s, _) = server.post("/v1/workspaces/acme/sessions", &json!({"id": "other"}))?;
    ensure!(s == 200);
    let (s, body) = server.post(
        "/v1/workspaces/acme/turns",
        &json!({"turns": [
            {"session": "main", "role": "user", "content": "I adopted a puppy named Rex from the shelter."},
            {"session": "main", "role": "assistant", "content": "Congratulations on the new dog!"},
            {"session": "helper", "role": "assistant", "content": "Found the deploy token ghp_abcdefghijklmnopqrstuvwxyz123456 in the vault."},
            {"session": "other", "role": "user", "content": "My sister played the violin in an orchestra last Saturday."},
        ]}),
    )?;
    ensure!(s == 200, "{body}");
    Ok(())
}

/// Searches once the background worker has indexed everything.
fn search_settled(server: &Server, body: &Value) -> Result<(u16, Value)> {
    let stats = server.wait_indexed()?;
    ensure!(stats["indexed"] == 4, "{stats}");
    server.post("/v1/workspaces/acme/search", body)
}

#[test]
fn memory_tools_over_http() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    ingest(&server)?;
    let (s, r) = search_settled(
        &server,
        &json!({"query": "What pet does the user have?", "k": 3, "caller": "a"}),
    )?;
    ensure!(s == 200, "{r}");
    ensure!(
        r["lexical_fallback"] == false,
        "the real model must be loaded (run scripts/dev.sh test): {r}"
    );
    ensure!(r["mode"] == "hybrid", "{r}");
    ensure!(r["items"][0]["id"] == "session:main:0-0", "{r}");
    ensure!(r["items"][0]["vector_rank"].is_number(), "{r}");

    // A time expression is resolved against the turn's time and shown.
    let (s, r) = server.post(
        "/v1/workspaces/acme/search",
        &json!({"query": "When did my sister play the violin?", "k": 1, "caller": "t"}),
    )?;
    ensure!(s == 200, "{r}");
    ensure!(r["items"][0]["id"] == "session:other:0-0", "{r}");
    let times = r["items"][0]["times"].to_string();
    ensure!(times.contains("last Saturday → "), "{r}");
    ensure!(r["items"][1].is_null(), "{r}");

    // Sub-agent lineage: `helper` sees main and itself, not `other`.
    let (s, r) = server.post(
        "/v1/workspaces/acme/search",
        &json!({"query": "violin orchestra sister", "k": 10, "caller": "b", "session": "helper"}),
    )?;
    ensure!(s == 200, "{r}");
    let items = r["items"].as_array().context("items")?;
    ensure!(items.iter().all(|i| i["session"] != "other"), "{r}");
    let token = items
        .iter()
        .find(|i| i["session"] == "helper")
        .context("helper turn")?;
    ensure!(token["low_trust"] == true, "{r}");
    // The turn holds a secret: the memory policy shows it by reference
    // only, except to the user's own screen, where it is redacted.
    ensure!(
        token["snippet"]
            .as_str()
            .is_some_and(|s| s.contains("withheld by policy") && !s.contains("ghp_")),
        "{r}"
    );
    let (s, r) = server.post(
        "/v1/workspaces/acme/search",
        &json!({"query": "violin orchestra sister", "k": 10, "caller": "b2", "session": "helper",
            "destination": "user_visible_ui"}),
    )?;
    ensure!(s == 200, "{r}");
    let token = r["items"]
        .as_array()
        .context("items")?
        .iter()
        .find(|i| i["session"] == "helper")
        .context("helper turn")?;
    ensure!(
        token["snippet"]
            .as_str()
            .is_some_and(|s| s.contains("[REDACTED]") && !s.contains("ghp_")),
        "{r}"
    );
    let (s, e) = server.get("/v1/workspaces/acme/items/session:other:0-0?session=helper")?;
    ensure!(s == 403 && e["code"] == "lineage_denied", "{e}");

    // memory_get and read_transcript, redacted.
    let (s, item) = server.get("/v1/workspaces/acme/items/session:helper:0-0")?;
    ensure!(
        s == 200 && item["kind"] == "turns" && item["truncated"] == false,
        "{item}"
    );
    ensure!(!item.to_string().contains("ghp_"), "{item}");
    let (s, t) = server.get("/v1/workspaces/acme/sessions/main/read_transcript")?;
    ensure!(
        s == 200 && t["turns"].as_array().map(Vec::len) == Some(2),
        "{t}"
    );
    let (s, e) = server.get("/v1/workspaces/acme/items/session:main:oops")?;
    ensure!(s == 400 && e["code"] == "invalid_reference", "{e}");

    // Rate limit: 6 per minute per caller by default.
    for i in 0..6 {
        let (s, r) = server.post(
            "/v1/workspaces/acme/search",
            &json!({"query": "dog", "caller": "c"}),
        )?;
        ensure!(s == 200, "call {i}: {r}");
    }
    let (s, e) = server.post(
        "/v1/workspaces/acme/search",
        &json!({"query": "dog", "caller": "c"}),
    )?;
    ensure!(s == 429 && e["code"] == "rate_limited", "{e}");
    let (s, _) = server.post(
        "/v1/workspaces/acme/search",
        &json!({"query": "dog", "caller": "d"}),
    )?;
    ensure!(s == 200);

    // Forget removes the session from the indexes before the next search.
    let (s, _) = server.post(
        "/v1/workspaces/acme/forget",
        &json!({"target": "session", "id": "main", "reason": "asked"}),
    )?;
    ensure!(s == 200);
    let (s, r) = server.post(
        "/v1/workspaces/acme/search",
        &json!({"query": "puppy Rex shelter", "caller": "e"}),
    )?;
    ensure!(s == 200, "{r}");
    ensure!(
        r["items"]
            .as_array()
            .context("items")?
            .iter()
            .all(|i| i["session"] != "main"),
        "{r}"
    );

    let (_, spec) = server.get("/openapi.json")?;
    ensure!(spec["paths"]["/v1/workspaces/{workspace}/search"]["post"].is_object());
    Ok(())
}

#[test]
fn entries_and_filters_over_http() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    ingest(&server)?;
    let (s, body) = server.post(
        "/v1/workspaces/acme/entries",
        &json!({"entries": [
            {"id": "dec-1", "kind": "decision", "content": "Payments retry on a fixed one-minute timer", "subject": "payment-retries"},
            {"id": "dec-2", "kind": "decision", "content": "Payments retry from a queue with exponential backoff", "subject": "payment-retries", "replaces": "dec-1",
             "provenance": {"session": "main", "from_seq": 0, "to_seq": 1}},
            {"id": "fact-1", "kind": "fact", "content": "Rex the puppy is a golden retriever", "subject": "pets"},
        ]}),
    )?;
    ensure!(s == 200, "{body}");
    let stats = server.wait_indexed()?;
    ensure!(stats["entries"].as_u64() >= Some(3), "{stats}");
    // Entries are found by meaning; the replaced decision is left out.
    let ask = |body: Value| server.post("/v1/workspaces/acme/search", &body);
    let (s, r) = ask(
        json!({"query": "how do failed payments get retried?", "kind": "decision", "caller": "f"}),
    )?;
    ensure!(s == 200, "{r}");
    let items = r["items"].as_array().context("items")?;
    ensure!(items.len() == 1, "{r}");
    let it = &items[0];
    ensure!(
        it["id"] == "dec-2"
            && it["source"] == "entry"
            && it["kind"] == "decision"
            && it["subject"] == "payment-retries"
            && it["provenance"]["session"] == "main"
            && it["provenance"]["to_seq"] == 1
            && it["replaced"] == false
            && it["vector_rank"].is_number()
            && it["snippet"]
                .as_str()
                .is_some_and(|s| s.contains("exponential backoff")),
        "{r}"
    );
    let (s, r) = ask(
        json!({"query": "how do failed payments get retried?", "kind": "decision",
        "include_replaced": true, "caller": "f"}),
    )?;
    ensure!(s == 200, "{r}");
    let items = r["items"].as_array().context("items")?;
    ensure!(
        items.len() == 2
            && items
                .iter()
                .any(|i| i["id"] == "dec-1" && i["replaced"] == true),
        "{r}"
    );
    // The id is what memory_get takes.
    let (s, e) = server.get("/v1/workspaces/acme/items/dec-2")?;
    ensure!(s == 200 && e["kind"] == "entry", "{e}");
    // Subject and role filters; turns only.
    let (s, r) = ask(json!({"query": "dog puppy", "subject": "pets", "caller": "f"}))?;
    ensure!(
        s == 200
            && r["items"].as_array().map(Vec::len) == Some(1)
            && r["items"][0]["id"] == "fact-1",
        "{r}"
    );
    let (s, r) =
        ask(json!({"query": "dog puppy", "kind": "turn", "role": "assistant", "caller": "f"}))?;
    ensure!(s == 200, "{r}");
    let items = r["items"].as_array().context("items")?;
    ensure!(
        !items.is_empty()
            && items
                .iter()
                .all(|i| i["source"] == "turn" && i["role"] == "assistant"),
        "{r}"
    );
    // Bad filters are refused with a clear error.
    let (s, e) = ask(json!({"query": "x", "kind": "decisions", "caller": "g"}))?;
    ensure!(
        s == 400
            && e["code"] == "invalid"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("decisions")),
        "{e}"
    );
    // Forget takes the entry out of search.
    let (s, _) = server.post(
        "/v1/workspaces/acme/forget",
        &json!({"target": "entry", "id": "fact-1", "reason": "asked"}),
    )?;
    ensure!(s == 200);
    let (s, r) =
        ask(json!({"query": "golden retriever puppy Rex", "kind": "entry", "caller": "g"}))?;
    ensure!(s == 200, "{r}");
    ensure!(
        r["items"]
            .as_array()
            .context("items")?
            .iter()
            .all(|i| i["id"] != "fact-1"),
        "{r}"
    );
    Ok(())
}

#[test]
fn cli_search_stats_and_get() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let turns = dir.path().join("turns.jsonl");
    std::fs::write(
        &turns,
        "{\"session\":\"s1\",\"role\":\"user\",\"content\":\"We chose queue-based retries for payments.\"}\n\
         {\"session\":\"s1\",\"role\":\"user\",\"content\":\"I adopted a puppy named Rex.\"}\n",
    )?;
    let run = |args: &[&str]| -> Result<(bool, String, String)> {
        let out = Command::new(cairn_bin())
            .envs(crate::support::backend_env(&data))
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    let (ok, _, err) = run(&["ingest", turns.to_str().context("path")?])?;
    ensure!(ok, "{err}");
    let (ok, out, err) = run(&["search", "which pet dog", "--k", "1", "--json"])?;
    ensure!(ok, "{err}");
    let r: Value = serde_json::from_str(&out)?;
    ensure!(
        r["lexical_fallback"] == false && r["items"][0]["id"] == "session:s1:1-1",
        "{r}"
    );
    // A second process reuses the stored vectors.
    let (ok, out, err) = run(&["stats", "--json"])?;
    ensure!(ok, "{err}");
    let s: Value = serde_json::from_str(&out)?;
    ensure!(
        s["indexed"] == 2 && s["backlog"] == 0 && s["embedded"] == 0 && s["reused"] == 2,
        "{s}"
    );
    // Filters from the command line.
    let (ok, out, err) = run(&[
        "log",
        "add",
        "--kind",
        "decision",
        "--content",
        "Payments retry from a queue",
        "--subject",
        "payments",
    ])?;
    ensure!(ok, "{err}");
    let entry: Value = serde_json::from_str(&out)?;
    let (ok, out, err) = run(&["search", "payments retries", "--kind", "decision", "--json"])?;
    ensure!(ok, "{err}");
    let r: Value = serde_json::from_str(&out)?;
    ensure!(
        r["items"].as_array().map(Vec::len) == Some(1) && r["items"][0]["id"] == entry["id"],
        "{r}"
    );
    let (ok, out, err) = run(&[
        "search",
        "payments retries",
        "--kind",
        "turn",
        "--role",
        "user",
        "--json",
    ])?;
    ensure!(ok, "{err}");
    let r: Value = serde_json::from_str(&out)?;
    ensure!(r["items"][0]["id"] == "session:s1:0-0", "{r}");
    let (ok, _, err) = run(&["search", "x", "--kind", "nope"])?;
    ensure!(!ok && err.contains("unknown kind"), "{err}");
    let (ok, out, err) = run(&["stats"])?;
    ensure!(ok && out.contains("indexed entries: 1"), "{out}{err}");
    let (ok, out, err) = run(&["get", "session:s1:0-1"])?;
    ensure!(
        ok && out.contains("queue-based retries") && out.contains("Rex"),
        "{out}{err}"
    );
    // Without the model (none configured, none installed in the cache):
    // lexical results, flagged, and a clear warning.
    let empty_cache = dir.path().join("empty-cache");
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(&data))
        .arg("--data-dir")
        .arg(&data)
        .args(["search", "retries", "--k", "1", "--kind", "turn"])
        .env_remove("CAIRN_EMBEDDING__MODEL_DIR")
        .env("CAIRN_CACHE_DIR", &empty_cache)
        .output()?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    ensure!(out.status.success(), "{stderr}");
    ensure!(
        stdout.contains("lexical only") && stdout.contains("session:s1:0-0"),
        "{stdout}"
    );
    ensure!(stderr.contains("no embedding model configured"), "{stderr}");
    Ok(())
}

#[test]
fn eval_locomo_prints_three_modes() -> Result<()> {
    // One small conversation in LoCoMo's format.
    let dir = tempfile::tempdir()?;
    let conv = json!({
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a puppy named Rex."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "I play the violin."}
        ],
        "qa": [
            {"question": "What is the name of Ana's dog?", "answer": "Rex", "evidence": ["D1:1"], "category": 4},
            {"question": "Unanswerable?", "evidence": ["D1:2"], "category": 5}
        ]
    });
    std::fs::write(dir.path().join("1.json"), conv.to_string())?;
    let out = Command::new(cairn_bin())
        .args(["eval", "locomo", "--data"])
        .arg(dir.path())
        .args(["--k", "1", "--json"])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(r["questions"] == 1, "{r}");
    for mode in ["bm25", "dense", "hybrid"] {
        ensure!(r["modes"][mode]["recall@10"] == 1.0, "{mode}: {r}");
        ensure!(r["modes"][mode]["lexical_fallback"] == false, "{mode}: {r}");
    }
    ensure!(r["conversations"]["1"]["questions"] == 1, "{r}");
    // Leave-one-out needs a second conversation, and then reports a fold
    // per conversation, each scored on the one it did not choose on.
    let loo = |dir: &std::path::Path| {
        Command::new(cairn_bin())
            .args(["eval", "locomo", "--loo", "--json", "--data"])
            .arg(dir)
            .output()
    };
    let alone = loo(dir.path())?;
    ensure!(!alone.status.success());
    ensure!(String::from_utf8_lossy(&alone.stderr).contains("at least two"));
    let mut other = conv.clone();
    other["session_1"][0]["text"] = json!("My cat is called Miso.");
    other["qa"][0]["question"] = json!("What is Ana's cat called?");
    std::fs::write(dir.path().join("2.json"), other.to_string())?;
    let out = loo(dir.path())?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout)?;
    let folds = r["loo"]["folds"].as_array().context("folds")?;
    ensure!(folds.len() == 2, "{r}");
    ensure!(
        folds[0]["held_out"] == "1" && folds[1]["held_out"] == "2",
        "{r}"
    );
    ensure!(r["loo"]["held_out_recall_10"] == 1.0, "{r}");
    Ok(())
}
