//! The HTTP API: happy paths, the OpenAPI description, and bad input that
//! must come back as a 4xx `{code, message}` with nothing written.

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

use crate::support::Server;

fn check_error(got: (u16, Value), status: u16, code: &str) -> Result<()> {
    let (s, body) = got;
    ensure!(s == status, "expected {status} {code}, got {s} {body}");
    ensure!(body["code"] == code, "expected code {code}, got {body}");
    ensure!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "no message in {body}"
    );
    Ok(())
}

#[test]
fn happy_path_and_openapi() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let (s, health) = server.get("/healthz")?;
    ensure!(s == 200 && health["status"] == "ok");
    let (s, spec) = server.get("/openapi.json")?;
    ensure!(s == 200);
    ensure!(
        spec["paths"]["/v1/workspaces/{workspace}/turns"]["post"].is_object(),
        "no ingest path in the OpenAPI description"
    );

    let (s, session) = server.post(
        "/v1/workspaces/acme/sessions",
        &json!({"id": "s1", "work_context": "launch"}),
    )?;
    ensure!(s == 200 && session["work_context"] == "launch", "{session}");
    let (s, reply) = server.post(
        "/v1/workspaces/acme/turns",
        &json!({"turns": [
            {"session": "s1", "role": "user", "content": "Launch on April 1?"},
            {"session": "s1", "role": "assistant", "content": "April 1 works."}
        ]}),
    )?;
    ensure!(
        s == 200
            && reply["acks"]
                == json!([{"seq": 0, "duplicate": false}, {"seq": 1, "duplicate": false}]),
        "{reply}"
    );
    let (s, entries) = server.post(
        "/v1/workspaces/acme/entries",
        &json!({"entries": [{"kind": "decision", "content": "Launch on April 1", "subject": "launch", "provenance": {"session": "s1", "from_seq": 0, "to_seq": 1}}]}),
    )?;
    ensure!(s == 200, "{entries}");
    let id = entries["entries"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (s, live) = server.get("/v1/workspaces/acme/entries?kind=decision&subject=launch")?;
    ensure!(
        s == 200 && live[0]["id"] == id.as_str() && live[0]["status"]["state"] == "live",
        "{live}"
    );
    // The briefing: the workspace's or one work context's, with references.
    ensure!(spec["paths"]["/v1/workspaces/{workspace}/briefing"]["get"].is_object());
    let (s, briefing) = server.get("/v1/workspaces/acme/briefing?work_context=launch")?;
    ensure!(s == 200, "{briefing}");
    let text = briefing["text"].as_str().unwrap_or_default();
    ensure!(
        text.contains(&format!("launch: Launch on April 1 [{id}; s1:0-1]")),
        "{briefing}"
    );
    ensure!(briefing["sections"][1]["kind"] == "decisions", "{briefing}");
    check_error(
        server.get("/v1/workspaces/acme/briefing?work_context=no%20such")?,
        400,
        "invalid_id",
    )?;
    check_error(
        server.get("/v1/workspaces/nobody/briefing")?,
        404,
        "workspace_not_found",
    )?;
    let (s, block) = server.post(
        "/v1/workspaces/acme/assemble",
        &json!({"session": "s1", "budget_tokens": 200}),
    )?;
    ensure!(s == 200, "{block}");
    ensure!(block["tokens"].as_u64().unwrap_or(u64::MAX) <= 200);
    ensure!(
        block["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Launch on April 1")
    );
    ensure!(
        block["trace"].as_array().is_some_and(|t| !t.is_empty()),
        "{block}"
    );
    // Without the trace: the same block, the candidates' account left out.
    // Retrieval off in both calls: the index catches up in the background,
    // and a hit that lands between them would change the block.
    let (s, traced) = server.post(
        "/v1/workspaces/acme/assemble",
        &json!({"session": "s1", "budget_tokens": 200, "retrieval": "off"}),
    )?;
    ensure!(
        s == 200 && traced["trace"].as_array().is_some_and(|t| !t.is_empty()),
        "{traced}"
    );
    let (s, bare) = server.post(
        "/v1/workspaces/acme/assemble",
        &json!({"session": "s1", "budget_tokens": 200, "retrieval": "off", "trace": false}),
    )?;
    ensure!(s == 200 && bare["text"] == traced["text"], "{bare}");
    ensure!(
        bare["trace"] == json!([]) && bare["items"] == traced["items"],
        "{bare}"
    );
    let (s, ended) = server.post("/v1/workspaces/acme/sessions/s1/end", &json!({}))?;
    ensure!(s == 200 && ended["state"] == "ended");
    let (s, report) = server.post("/v1/gateway_start", &json!({}))?;
    ensure!(s == 200 && report["open_sessions"] == json!([]), "{report}");
    let (s, t) = server.post(
        "/v1/workspaces/acme/forget",
        &json!({"target": "entry", "id": id, "reason": "test"}),
    )?;
    ensure!(s == 200 && t["removed"]["entries"] == 1, "{t}");
    Ok(())
}

#[test]
fn bad_input_is_refused_cleanly() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let turns = "/v1/workspaces/acme/turns";
    server.post(
        turns,
        &json!({"turns": [{"session": "s1", "role": "user", "content": "first"}]}),
    )?;
    let turn = |session: &str, role: &str, content: &str| json!({"session": session, "role": role, "content": content});
    let good = turn("s1", "user", "fine");

    check_error(server.post_raw(turns, b"{not json")?, 400, "invalid_json")?;
    check_error(
        server.post_raw(
            turns,
            b"{\"turns\": [{\"session\": \"s1\", \"role\": \"user\", \"content\": \"\xff\xfe\"}]}",
        )?,
        400,
        "invalid_json",
    )?;
    check_error(
        server.post(turns, &json!({"turns": [good, turn("s1", "robot", "hi")]}))?,
        400,
        "invalid_json",
    )?;
    check_error(
        server.post(turns, &json!({"turns": [good, turn("", "user", "hi")]}))?,
        400,
        "invalid_id",
    )?;
    check_error(
        server.post(
            turns,
            &json!({"turns": [good, turn(&"x".repeat(500), "user", "hi")]}),
        )?,
        400,
        "invalid_id",
    )?;
    check_error(
        server.post(
            turns,
            &json!({"turns": [good, turn("s1", "user", &"x".repeat(300_000))]}),
        )?,
        413,
        "too_large",
    )?;
    check_error(
        server.post(
            turns,
            &json!({"turns": [good, turn("s1", "tool", "result")]}),
        )?,
        400,
        "missing_tool_call_id",
    )?;
    check_error(server.post(turns, &json!({"turns": [good, {"session": "s1", "role": "user", "content": "x", "work_context": "other"}]}))?, 409, "work_context_mismatch")?;
    check_error(
        server.post(turns, &json!({"turns": [good], "extra": 1}))?,
        400,
        "invalid_json",
    )?;
    check_error(
        server.post("/v1/workspaces/bad%20ws/turns", &json!({"turns": [good]}))?,
        400,
        "invalid_id",
    )?;

    let entries = "/v1/workspaces/acme/entries";
    let entry = |replaces: &str| json!({"kind": "fact", "content": "x", "replaces": replaces});
    check_error(
        server.post(entries, &json!({"entries": [entry("missing")]}))?,
        400,
        "replaces_missing",
    )?;
    check_error(
        server.post(
            entries,
            &json!({"entries": [{"id": "a", "kind": "fact", "content": "x", "replaces": "a"}]}),
        )?,
        400,
        "replaces_cycle",
    )?;
    check_error(
        server.post(
            entries,
            &json!({"entries": [{"kind": "fact", "content": "x", "subject": "Not_Kebab"}]}),
        )?,
        400,
        "invalid_slug",
    )?;
    check_error(
        server.post(
            entries,
            &json!({"entries": [{"kind": "gossip", "content": "x"}]}),
        )?,
        400,
        "invalid_json",
    )?;
    check_error(server.post(entries, &json!({"entries": [{"kind": "fact", "content": "x", "provenance": {"session": "s1", "from_seq": 0, "to_seq": 9}}]}))?, 400, "invalid_turn_range")?;
    server.post("/v1/workspaces/acme/subjects", &json!({"slug": "alpha"}))?;
    check_error(
        server.post(
            "/v1/workspaces/acme/subjects/alpha/merge",
            &json!({"into": "missing"}),
        )?,
        404,
        "subject_not_found",
    )?;
    check_error(
        server.post("/v1/workspaces/acme/subjects", &json!({"slug": "alpha"}))?,
        409,
        "subject_exists",
    )?;
    check_error(
        server.get("/v1/workspaces/acme/sessions/nope/transcript")?,
        404,
        "session_not_found",
    )?;
    check_error(
        server.get("/v1/workspaces/ghost/entries")?,
        404,
        "workspace_not_found",
    )?;
    check_error(
        server.get("/v1/workspaces/acme/entries?kind=gossip")?,
        400,
        "invalid_query",
    )?;
    check_error(
        server.post(
            "/v1/workspaces/acme/forget",
            &json!({"target": "session", "id": "s1", "reason": ""}),
        )?,
        400,
        "forget_without_reason",
    )?;
    check_error(
        server.post(
            "/v1/workspaces/acme/assemble",
            &json!({"session": "s1", "budget_tokens": 2}),
        )?,
        400,
        "budget_too_small",
    )?;
    check_error(server.get("/v2/nothing")?, 404, "no_route")?;

    // Nothing of the refused requests was written.
    let (s, transcript) = server.get("/v1/workspaces/acme/sessions/s1/transcript")?;
    ensure!(
        s == 200 && transcript.as_array().map(Vec::len) == Some(1),
        "{transcript}"
    );
    let (s, all) = server.get("/v1/workspaces/acme/entries?all=true")?;
    ensure!(s == 200 && all == json!([]), "{all}");
    Ok(())
}

/// The raw reads (`transcript`, `sessions`, `entries`, `entries/{id}`,
/// `items/{id}`) apply the memory tools' rules: a sub-agent session reads
/// only its lineage, and text comes back redacted.
#[test]
fn raw_reads_keep_lineage_and_redact() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    for spec in [
        json!({"id": "main"}),
        json!({"id": "helper", "kind": "subagent", "parent": "main"}),
        json!({"id": "other"}),
    ] {
        let (s, body) = server.post("/v1/workspaces/w/sessions", &spec)?;
        ensure!(s == 200, "{body}");
    }
    let (s, body) = server.post(
        "/v1/workspaces/w/turns",
        &json!({"turns": [
            {"session": "main", "role": "user", "content": "Deploy key sk-abcdefghijklmnopqrstuvwxyz0123 goes in the vault."},
            {"session": "other", "role": "user", "content": "The other team's plans."}
        ]}),
    )?;
    ensure!(s == 200, "{body}");
    let (s, body) = server.post(
        "/v1/workspaces/w/entries",
        &json!({"entries": [{"kind": "fact", "content": "Other team plans a merger.",
            "provenance": {"session": "other", "from_seq": 0, "to_seq": 0}}]}),
    )?;
    ensure!(s == 200, "{body}");
    let other_entry = body["entries"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    // Inside the lineage: allowed, and redacted on the user's screen.
    let (s, turns) = server.get(
        "/v1/workspaces/w/sessions/main/transcript?asking=helper&destination=user_visible_ui",
    )?;
    ensure!(s == 200, "{turns}");
    let text = turns[0]["content"].as_str().unwrap_or_default();
    ensure!(
        text.contains("goes in the vault") && !text.contains("sk-abcdefghijklmnopqrstuvwxyz0123"),
        "{text}"
    );
    // Headed for a model (the default destination), the default memory
    // policy lets a secret-bearing turn through as a reference only.
    let (s, turns) = server.get("/v1/workspaces/w/sessions/main/transcript?asking=helper")?;
    ensure!(s == 200, "{turns}");
    let text = turns[0]["content"].as_str().unwrap_or_default();
    ensure!(
        text.contains("withheld by policy") && !text.contains("vault"),
        "{text}"
    );
    // Outside it: refused with 403, for every raw read.
    check_error(
        server.get("/v1/workspaces/w/sessions/other/transcript?asking=helper")?,
        403,
        "lineage_denied",
    )?;
    check_error(
        server.get("/v1/workspaces/w/sessions/other?asking=helper")?,
        403,
        "lineage_denied",
    )?;
    check_error(
        server.get(&format!(
            "/v1/workspaces/w/entries/{other_entry}?asking=helper"
        ))?,
        403,
        "lineage_denied",
    )?;
    check_error(
        server.get(&format!(
            "/v1/workspaces/w/items/{other_entry}?session=helper"
        ))?,
        403,
        "lineage_denied",
    )?;
    let (s, sessions) = server.get("/v1/workspaces/w/sessions?asking=helper")?;
    let mut ids: Vec<&str> = sessions
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["id"].as_str())
        .collect();
    ids.sort_unstable();
    ensure!(s == 200 && ids == ["helper", "main"], "{sessions}");
    let (s, entries) = server.get("/v1/workspaces/w/entries?asking=helper")?;
    ensure!(s == 200 && entries == json!([]), "{entries}");
    // The operator (no asking session) sees everything.
    let (s, entries) = server.get("/v1/workspaces/w/entries")?;
    ensure!(
        s == 200 && entries[0]["id"] == other_entry.as_str(),
        "{entries}"
    );
    let (s, turns) = server.get("/v1/workspaces/w/sessions/other/transcript")?;
    ensure!(
        s == 200 && turns[0]["content"] == "The other team's plans.",
        "{turns}"
    );
    // An asking session that does not exist is refused, not ignored.
    check_error(
        server.get("/v1/workspaces/w/sessions/main/transcript?asking=ghost")?,
        403,
        "lineage_denied",
    )?;
    Ok(())
}

/// After a workspace is erased, the same ids work again on a clean slate
/// (the live actors held a handle to the dropped store), and settings that
/// would overflow or allocate without bound are refused, not crashed on.
#[test]
fn forget_then_reuse_and_hostile_numbers() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let turn =
        json!({"turns": [{"session": "s1", "role": "user", "content": "We decided to use sled."}]});
    let (s, body) = server.post("/v1/workspaces/w/turns", &turn)?;
    ensure!(s == 200, "{body}");
    let (s, body) = server.post(
        "/v1/workspaces/w/forget",
        &json!({"target": "workspace", "id": "w", "reason": "test"}),
    )?;
    ensure!(s == 200, "{body}");
    let (s, body) = server.post("/v1/workspaces/w/turns", &turn)?;
    ensure!(s == 200 && body["acks"][0]["seq"] == 0, "{body}");
    let (s, body) = server.post("/v1/workspaces/w/capture", &json!({}))?;
    ensure!(s == 200, "{body}");

    for settings in [
        json!({"retrieval_k": 17_592_186_044_416_u64}),
        json!({"recent_activity_max_age_days": 4_294_967_295_u64}),
    ] {
        check_error(
            server.post(
                "/v1/workspaces/w/assemble",
                &json!({"session": "s1", "budget_tokens": 400, "settings": settings}),
            )?,
            400,
            "invalid",
        )?;
    }
    check_error(
        server.post(
            "/v1/workspaces/w/assemble",
            &json!({"session": "s1", "budget_tokens": 1_000_000_000_000_u64}),
        )?,
        400,
        "invalid",
    )?;
    // The whole range from 0: every turn, not an empty answer.
    let (s, item) = server.get("/v1/workspaces/w/items/session:s1:0-18446744073709551615")?;
    ensure!(
        s == 200 && item["turns"].as_array().map(Vec::len) == Some(1),
        "{item}"
    );
    check_error(
        server.post(
            "/v1/workspaces/w/search",
            &json!({"query": "x".repeat(20_000)}),
        )?,
        413,
        "too_large",
    )?;
    // Still alive.
    let (s, _) = server.get("/healthz")?;
    ensure!(s == 200);
    Ok(())
}

/// Regression (found by `scripts/fuzz-api.sh`): an entry view flattened its
/// entry, so `subject` and `status` were each in the object twice and a
/// task's own status was lost to the lifecycle's. Now each key is there
/// once and the task's status is `task_status`.
#[test]
fn an_entry_view_names_each_key_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let (s, body) = server.post(
        "/v1/workspaces/w/entries",
        &json!({"entries": [{"id": "t1", "kind": "task", "content": "Call Dana", "status": "open"}]}),
    )?;
    ensure!(s == 200, "{body}");
    let host = server.base.trim_start_matches("http://").to_owned();
    for path in [
        "/v1/workspaces/w/entries",
        "/v1/workspaces/w/entries/t1",
        "/v1/workspaces/w/items/t1",
    ] {
        let (s, text) =
            server.raw_text("GET", path, &[("host", &host)], "application/json", b"")?;
        ensure!(s == 200, "{path}: {text}");
        for key in ["\"status\":", "\"subject\":", "\"task_status\":"] {
            ensure!(text.matches(key).count() == 1, "{path}: {key} in {text}");
        }
        ensure!(text.contains("\"task_status\":\"open\""), "{path}: {text}");
        ensure!(
            text.contains("\"status\":{\"state\":\"live\"}"),
            "{path}: {text}"
        );
    }
    Ok(())
}

/// The description is complete enough for a client (or a fuzzer) to use:
/// every `{parameter}` of a path is declared, every operation lists the
/// guard's refusals, and each schema name means one type (the capture's
/// trigger once shadowed the topics' one).
#[test]
fn the_description_declares_parameters_and_refusals() -> Result<()> {
    let api = serde_json::to_value(cairn_cli::http::api_doc())?;
    let paths = api["paths"].as_object().context("paths")?;
    for (path, item) in paths {
        for (method, op) in item.as_object().context("item")? {
            let params: Vec<&str> = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path")
                .filter_map(|p| p["name"].as_str())
                .collect();
            for name in path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            {
                ensure!(
                    params.contains(&name),
                    "{method} {path}: {{{name}}} undeclared"
                );
            }
            let responses = &op["responses"];
            let mut needed = vec!["200", "403"];
            if path != "/healthz" {
                needed.extend(["401", "429"]);
                ensure!(
                    op["security"][0]["bearer"].is_array(),
                    "{method} {path} does not declare the bearer token"
                );
            }
            if path.contains('{') || op["requestBody"].is_object() {
                needed.push("400");
            }
            if op["requestBody"].is_object() {
                needed.push("413");
            }
            if path.starts_with("/v1/workspaces/") {
                needed.push("404");
            }
            for status in needed {
                ensure!(
                    responses[status].is_object(),
                    "{method} {path} does not describe {status}"
                );
            }
        }
    }
    let schemas = &api["components"]["schemas"];
    ensure!(
        schemas["CaptureReport"]["properties"]["trigger"]["$ref"]
            == "#/components/schemas/CaptureTrigger",
        "{}",
        schemas["CaptureReport"]
    );
    ensure!(schemas["EntryView"]["properties"]["task_status"].is_object());
    Ok(())
}
