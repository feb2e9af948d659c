//! `cairn loadgen`, run as a user would: a short run in process and one
//! against a real `cairn serve`, each checking zero loss and the JSON shape.

use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::support::{Server, cairn_bin};

/// The keys every report has (the list and the accounting's).
const KEYS: &[&str] = &[
    "turns_acked",
    "turns_lost",
    "turns_duplicated",
    "throughput_tps",
    "window_secs",
    "window_tps",
    "window_ack_p99_ms",
    "ack_p50_ms",
    "ack_p99_ms",
    "assemble_p99_ms",
    "decisions",
    "decision_faults",
    "swaps",
    "rss_mb",
    "turns_checked",
    "notes",
];

fn loadgen(args: &[&str]) -> Result<(Output, Value)> {
    loadgen_on("steady.toml", args)
}

fn loadgen_on(file: &str, args: &[&str]) -> Result<(Output, Value)> {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    // On the postgres leg: the database of the data dir given, or a fresh one.
    let store = match args.iter().position(|a| *a == "--data-dir") {
        Some(i) => args.get(i + 1).map(std::path::PathBuf::from),
        None => None,
    };
    let backend = match store {
        Some(data) => crate::support::backend_env(data),
        None => crate::support::backend_env(crate::support::fresh_key()),
    };
    let out = Command::new(cairn_bin())
        .envs(backend)
        .arg("loadgen")
        .arg("--scenario")
        .arg(&scenario)
        .args(["--sessions", "16", "--duration", "2", "--concurrency", "8"])
        .args(["--rate", "400", "--json"])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .context("running cairn loadgen")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "loadgen failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).context("one JSON object")?;
    for key in KEYS {
        ensure!(report.get(key).is_some(), "no {key} in {report}");
    }
    let acked = report["turns_acked"].as_u64().context("turns_acked")?;
    ensure!(acked > 0, "nothing acknowledged: {report}");
    ensure!(report["turns_checked"] == acked, "{report}");
    ensure!(
        report["turns_lost"] == 0 && report["turns_duplicated"] == 0,
        "{report}"
    );
    ensure!(report["assembles"].as_u64() > Some(0), "{report}");
    // The windows count only acknowledged turns, none twice.
    let windows = report["window_tps"].as_array().context("window_tps")?;
    let window_secs = report["window_secs"].as_f64().context("window_secs")?;
    let in_windows: f64 = windows.iter().filter_map(Value::as_f64).sum::<f64>() * window_secs;
    ensure!(in_windows <= acked as f64 + 0.5, "{report}");
    let tails = report["window_ack_p99_ms"]
        .as_array()
        .context("window_ack_p99_ms")?;
    ensure!(tails.len() == windows.len(), "{report}");
    // A window's p99 is within the run's range of acknowledgements.
    let max = report["ack_max_ms"].as_f64().context("ack_max_ms")?;
    ensure!(
        tails
            .iter()
            .filter_map(Value::as_f64)
            .all(|p| (0.0..=max * 1.01 + 0.01).contains(&p)),
        "{report}"
    );
    Ok((out, report))
}

#[test]
fn loadgen_in_process_loses_nothing_and_swaps_the_policy() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let (_, report) = loadgen(&[
        "--swap-every",
        "0.5",
        "--data-dir",
        data.to_str().context("utf-8 path")?,
    ])?;
    ensure!(report["mode"] == "in-process", "{report}");
    // Every stored turn went through the wasm significance gate.
    let decisions = report["decisions"].as_u64().context("decisions")?;
    ensure!(
        decisions >= report["turns_acked"].as_u64().unwrap_or(u64::MAX),
        "{report}"
    );
    ensure!(report["decision_faults"] == 0, "{report}");
    ensure!(report["swaps"].as_u64() >= Some(1), "{report}");
    ensure!(report["embedding_model_loaded"] == false, "{report}");
    // Some sessions ended: their turns were checked from the ledger's file.
    ensure!(report["sessions_ended"].as_u64() > Some(0), "{report}");
    // --data-dir keeps the store: the sessions are there for the CLI too.
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(&data))
        .arg("--data-dir")
        .arg(&data)
        .args(["-w", "lg-ws-0", "sessions", "--json"])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sessions: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        sessions.as_array().is_some_and(|s| !s.is_empty()),
        "{sessions}"
    );
    Ok(())
}

#[test]
fn loadgen_with_topic_watchers_and_topic_plugin_swaps_loses_nothing() -> Result<()> {
    let (out, report) = loadgen_on("topics.toml", &["--swap-every", "0.3"])?;
    ensure!(report["watched_topics"] == 1000, "{report}");
    let decisions = report["topic_decisions"]
        .as_u64()
        .context("topic_decisions")?;
    let collected = report["topic_collected"]
        .as_u64()
        .context("topic_collected")?;
    ensure!(decisions > 0 && collected > 0, "{report}");
    ensure!(collected <= decisions, "{report}");
    ensure!(report["topic_faults"] == 0, "{report}");
    // Each swap replaces both plugins.
    ensure!(report["swaps"].as_u64() >= Some(1), "{report}");
    ensure!(report["swap_failures"] == 0, "{report}");
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(text.contains("topic_collected"), "{text}");
    Ok(())
}

#[test]
fn loadgen_over_http_loses_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let (_, report) = loadgen(&["--http", &addr, "--swap-every", "0.5"])?;
    ensure!(report["mode"] == "http", "{report}");
    // Counted by the server's decision log, across the swapped generations.
    ensure!(
        report["decisions"].as_u64().is_some_and(|d| d > 0) && report["decision_faults"] == 0,
        "{report}"
    );
    let notes = report["notes"].to_string();
    // A server without the plugin route answers 404: no swap, and a note says so.
    if report["swaps"] == 0 {
        ensure!(
            notes.contains("PUT /v1/plugins/significance-gate"),
            "{report}"
        );
    }
    // The server holds what the loadgen says it read back.
    let (status, sessions) = server.get("/v1/workspaces/lg-ws-0/sessions")?;
    ensure!(
        status == 200 && sessions.as_array().is_some_and(|s| !s.is_empty()),
        "{sessions}"
    );
    Ok(())
}

#[test]
fn loadgen_names_a_bad_scenario_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "sessions = 10\n[idle]\nmin_secs = 5.0\nmax_secs = 1.0\n",
    )?;
    let out = Command::new(cairn_bin())
        .args(["loadgen", "--scenario"])
        .arg(&path)
        .output()?;
    ensure!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("bad.toml") && err.contains("min_secs <= max_secs"),
        "{err}"
    );
    Ok(())
}
