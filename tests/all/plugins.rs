//! Policy plugins end to end: install / swap / list / log over the CLI and
//! HTTP, the decision log across restarts, the wasm significance gate
//! deciding what the actors capture, and swaps under concurrent decisions.
//! Real wasmtime, the real plugins built from `plugins/`, real sled.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Context, Result, ensure};
use cairn::worlds::{
    Action, ContentReference, Destination, ObjectKind, PolicyRequest, Sensitivity, WorldKind,
    defaults,
};
use cairn::{ActorConfig, Cairn, CairnConfig, DecisionQuery, ManualClock, Role, TurnInput};
use chrono::{TimeZone, Utc};
use serde_json::Value;

use crate::support::{Server, cairn_bin};

fn cairn(data_dir: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(cairn_bin())
        .envs(crate::support::backend_env(data_dir))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("RUST_LOG", "error")
        .output()?)
}

fn ok(out: &Output) -> Result<String> {
    ensure!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn json(out: &Output) -> Result<Value> {
    Ok(serde_json::from_str(&ok(out)?)?)
}

/// Writes the built-in components (and a file that is not one) where the
/// CLI can read them.
fn plugin_files(dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let quiet = dir.join("example_quiet.wasm");
    std::fs::write(&quiet, defaults::EXAMPLE_QUIET.wasm)?;
    let default = dir.join("significance_default.wasm");
    std::fs::write(&default, defaults::SIGNIFICANCE.wasm)?;
    let garbage = dir.join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm but not really a component")?;
    Ok((quiet, default, garbage))
}

fn significance(list: &Value) -> Result<&Value> {
    list["plugins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["world"] == "significance-gate"))
        .context("no significance-gate in the list")
}

#[test]
fn cli_install_swap_list_log_and_refusals() -> Result<()> {
    let files = tempfile::tempdir()?;
    let (quiet, default, garbage) = plugin_files(files.path())?;
    let dir = tempfile::tempdir()?;
    let data = dir.path();

    let list = json(&cairn(data, &["plugins", "list", "--json"])?)?;
    let before = significance(&list)?;
    ensure!(before["plugin"] == "significance-default" && before["builtin"] == true);
    let text = ok(&cairn(data, &["plugins", "list"])?)?;
    ensure!(
        text.contains("significance-gate") && text.contains("(built-in)"),
        "{text}"
    );

    let out = ok(&cairn(
        data,
        &[
            "plugins",
            "install",
            "significance",
            quiet.to_str().unwrap_or_default(),
            "--name",
            "quiet",
        ],
    )?)?;
    ensure!(
        out.starts_with("installed quiet for significance-gate: generation quiet@"),
        "{out}"
    );

    // Every CLI call is a new process: the install survived a restart.
    let list = json(&cairn(data, &["plugins", "list", "--json"])?)?;
    let installed = significance(&list)?.clone();
    ensure!(
        installed["plugin"] == "quiet" && installed["builtin"] == false,
        "{installed}"
    );
    let generation = installed["generation"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    // Refusals name the problem and change nothing.
    let bad = cairn(
        data,
        &[
            "plugins",
            "install",
            "significance-gate",
            garbage.to_str().unwrap_or_default(),
        ],
    )?;
    ensure!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    ensure!(
        err.contains("plugin `garbage` does not implement the `significance-gate` world")
            && err.contains("not a WebAssembly component"),
        "{err}"
    );
    let wrong = cairn(
        data,
        &[
            "plugins",
            "install",
            "memory-policy",
            quiet.to_str().unwrap_or_default(),
        ],
    )?;
    ensure!(!wrong.status.success());
    let err = String::from_utf8_lossy(&wrong.stderr);
    ensure!(
        err.contains("does not implement the `memory-policy` world"),
        "{err}"
    );
    let unknown = cairn(
        data,
        &[
            "plugins",
            "install",
            "gatekeeper",
            quiet.to_str().unwrap_or_default(),
        ],
    )?;
    ensure!(String::from_utf8_lossy(&unknown.stderr).contains("unknown world \"gatekeeper\""));
    let list = json(&cairn(data, &["plugins", "list", "--json"])?)?;
    ensure!(significance(&list)?["generation"] == generation.as_str());
    ensure!(list["plugins"][2]["plugin"] == "memory-policy-default");

    // Turns ingested in one process are decided by the installed gate (here
    // when the capture's actor loads its state) and logged; another
    // process reads the log.
    let turns = b"{\"session\":\"s1\",\"role\":\"user\",\"content\":\"We decided to ship on Friday.\",\"work_context\":\"launch\"}\n";
    let mut child = Command::new(cairn_bin())
        .envs(crate::support::backend_env(data))
        .arg("--data-dir")
        .arg(data)
        .args(["ingest", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(&mut child.stdin.take().context("stdin")?, turns)?;
    ok(&child.wait_with_output()?)?;
    ok(&cairn(data, &["capture", "--work-context", "launch"])?)?;
    let log = json(&cairn(
        data,
        &["plugins", "log", "--world", "significance", "--json"],
    )?)?;
    let records = log.as_array().context("log is not a list")?;
    ensure!(!records.is_empty(), "{log}");
    ensure!(records[0]["generation"] == generation.as_str(), "{log}");
    ensure!(records[0]["plugin"] == "quiet");
    ensure!(
        records[0]["output"]["decision"]["collection_decision"] == "observe-only",
        "{log}"
    );
    let filtered = json(&cairn(
        data,
        &[
            "plugins",
            "log",
            "--plugin",
            "significance-default",
            "--json",
        ],
    )?)?;
    ensure!(filtered.as_array().is_some_and(Vec::is_empty), "{filtered}");
    let text = ok(&cairn(
        data,
        &["plugins", "log", "--world", "significance", "--limit", "1"],
    )?)?;
    ensure!(
        text.lines().count() == 1 && text.contains(&generation),
        "{text}"
    );
    let list = json(&cairn(data, &["plugins", "list", "--json"])?)?;
    ensure!(
        significance(&list)?["decisions"].as_u64() >= Some(1),
        "{list}"
    );

    // Swap back: reports old -> new.
    let out = ok(&cairn(
        data,
        &[
            "plugins",
            "swap",
            "significance-gate",
            default.to_str().unwrap_or_default(),
            "--name",
            "significance-default",
        ],
    )?)?;
    ensure!(
        out.starts_with(&format!(
            "swapped significance-gate: {generation} -> significance-default@"
        )),
        "{out}"
    );
    Ok(())
}

#[test]
fn http_install_list_log_and_refusals() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let files = tempfile::tempdir()?;
    let (quiet, _, _) = plugin_files(files.path())?;
    let server = Server::start(dir.path())?;
    let put = |path: &str, body: &[u8]| -> Result<(u16, Value)> {
        let mut resp = server
            .agent
            .put(format!("{}{path}", server.base))
            .header("content-type", "application/wasm")
            .send(body)?;
        Ok((resp.status().as_u16(), resp.body_mut().read_json()?))
    };

    let (status, list) = server.get("/v1/plugins")?;
    ensure!(
        status == 200 && list["plugins"].as_array().map(Vec::len) == Some(3),
        "{list}"
    );
    let first = significance(&list)?["generation"].clone();

    let (status, report) = put(
        "/v1/plugins/significance-gate?name=quiet",
        defaults::EXAMPLE_QUIET.wasm,
    )?;
    ensure!(status == 200, "{report}");
    ensure!(
        report["previous_generation"] == first && report["plugin"] == "quiet",
        "{report}"
    );
    let generation = report["generation"].clone();

    // Refused from its header, before anything is compiled.
    let (status, body) = put("/v1/plugins/significance-gate", b"not wasm at all")?;
    ensure!(
        status == 400 && body["code"] == "plugin_wrong_world",
        "{body}"
    );
    ensure!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("not a WebAssembly component"))
    );
    let (status, body) = put("/v1/plugins/topic-directive", defaults::EXAMPLE_QUIET.wasm)?;
    ensure!(
        status == 400 && body["code"] == "plugin_wrong_world",
        "{body}"
    );
    let (status, body) = put("/v1/plugins/gatekeeper", defaults::EXAMPLE_QUIET.wasm)?;
    ensure!(status == 400 && body["code"] == "unknown_world", "{body}");
    let (status, body) = put(
        "/v1/plugins/memory-policy?name=Bad%20Name",
        defaults::EXAMPLE_CUSTOM.wasm,
    )?;
    ensure!(
        status == 400 && body["code"] == "invalid_plugin_name",
        "{body}"
    );
    // An oversized upload is refused on its declared length, before the
    // body is read. (Sending the 8 MiB itself would race the server's early
    // answer against the client's writes: the client may see a reset.)
    let (status, body) = server.head_only(&format!(
        "PUT /v1/plugins/memory-policy HTTP/1.1\r\ncontent-type: application/wasm\r\ncontent-length: {}\r\n",
        (8 << 20) + 1
    ))?;
    ensure!(
        status == 413 && body["code"] == "plugin_too_large",
        "{body}"
    );
    let (_, list) = server.get("/v1/plugins")?;
    ensure!(significance(&list)?["generation"] == generation, "{list}");
    ensure!(
        list["plugins"][2]["plugin"] == "memory-policy-default",
        "{list}"
    );

    // Decisions made by the server show in its log, filtered.
    let (status, _) = server.post(
        "/v1/workspaces/w/turns",
        &serde_json::json!({"turns": [{"session": "s", "role": "user", "content": "Let's go with sled.", "work_context": "db"}]}),
    )?;
    ensure!(status == 200);
    // The session's actor hands the stored turn to its context (and the
    // gate) right after the acknowledgement.
    let mut log = Value::Null;
    for _ in 0..100 {
        let (status, read) = server.get("/v1/plugins/log?world=significance-gate&limit=5")?;
        ensure!(status == 200, "{read}");
        log = read;
        if log.as_array().is_some_and(|l| !l.is_empty()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    ensure!(log[0]["generation"] == generation, "{log}");
    // The log's counters per generation: the serving one has decided, the
    // one swapped out keeps its count, an unknown one counts zero.
    let counts = |g: &str| {
        let path = format!("/v1/plugins/generations/{}", g.replace('#', "%23"));
        server.get(&path)
    };
    let (status, now) = counts(generation.as_str().unwrap_or_default())?;
    ensure!(
        status == 200 && now["decisions"].as_u64() >= Some(1) && now["faults"] == 0,
        "{now}"
    );
    let (status, old) = counts(first.as_str().unwrap_or_default())?;
    ensure!(status == 200 && old["decisions"].is_u64(), "{old}");
    let (status, none) = counts("never-served@00#1")?;
    ensure!(status == 200 && none["decisions"] == 0, "{none}");
    let (status, body) = counts(&"x".repeat(300))?;
    ensure!(
        status == 400 && body["code"] == "invalid_generation",
        "{body}"
    );
    let (status, log) = server.get("/v1/plugins/log?faults=true")?;
    ensure!(
        status == 200 && log.as_array().is_some_and(Vec::is_empty),
        "{log}"
    );
    let (status, body) = server.get("/v1/plugins/log?colour=red")?;
    ensure!(status == 400 && body["code"] == "invalid_query", "{body}");

    // The CLI talks to the running server (which holds the store's lock).
    let url = server.base.clone();
    let direct = cairn(dir.path(), &["plugins", "list"])?;
    ensure!(!direct.status.success());
    ensure!(String::from_utf8_lossy(&direct.stderr).contains("--server"));
    let out = ok(&cairn(
        dir.path(),
        &[
            "plugins",
            "swap",
            "significance",
            quiet.to_str().unwrap_or_default(),
            "--server",
            &url,
            "--name",
            "quiet-two",
        ],
    )?)?;
    ensure!(
        out.contains(&format!(
            "swapped significance-gate: {} -> quiet-two@",
            generation.as_str().unwrap_or_default()
        )),
        "{out}"
    );
    let listed = json(&cairn(
        dir.path(),
        &["plugins", "list", "--json", "--server", &url],
    )?)?;
    ensure!(significance(&listed)?["plugin"] == "quiet-two", "{listed}");
    let log = json(&cairn(
        dir.path(),
        &["plugins", "log", "--json", "--limit", "1", "--server", &url],
    )?)?;
    ensure!(log.as_array().map(Vec::len) == Some(1), "{log}");
    let refused = cairn(
        dir.path(),
        &[
            "plugins",
            "install",
            "memory",
            quiet.to_str().unwrap_or_default(),
            "--server",
            &url,
        ],
    )?;
    ensure!(!refused.status.success());
    ensure!(String::from_utf8_lossy(&refused.stderr).contains("plugin_wrong_world"));

    let (_, openapi) = server.get("/openapi.json")?;
    for path in ["/v1/plugins", "/v1/plugins/{world}", "/v1/plugins/log"] {
        ensure!(
            openapi["paths"].get(path).is_some(),
            "{path} not in the OpenAPI"
        );
    }
    Ok(())
}

fn open(dir: &Path, clock: &ManualClock) -> Result<Cairn> {
    let config = CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        actors: ActorConfig {
            tick_interval_secs: 0,
            ..ActorConfig::default()
        },
        ..CairnConfig::default()
    };
    Ok(Cairn::open_with_clock(config, Arc::new(clock.clone()))?)
}

/// A clock the test drives, at 2026-03-02 09:00 UTC.
fn march_clock() -> Result<ManualClock> {
    Ok(ManualClock::new(
        Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0)
            .single()
            .context("time")?,
    ))
}

fn turn(session: &str, wc: &str, content: &str) -> TurnInput {
    TurnInput::new(session, Role::User, content).in_context(wc)
}

/// The wasm gate decides what the actors capture: one significant turn
/// makes its context dirty (the structural rules alone would wait for three
/// user turns); with a gate that never captures, it does not. A plugin
/// fault is contained and falls back to observe-only. The installed
/// plugin and its generation survive a restart.
#[test]
fn the_installed_gate_decides_what_is_captured() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = march_clock()?;
    let cairn = open(dir.path(), &clock)?;
    let decision = "We decided to go with Postgres for the job queue.";

    cairn.ingest("w", &[turn("s1", "db", decision)])?;
    clock.advance(chrono::Duration::minutes(20));
    let captures = cairn.tick()?;
    ensure!(
        captures.len() == 1 && captures[0].work_context == "db",
        "{captures:?}"
    );
    let default_generation = cairn.plugin_generation(WorldKind::SignificanceGate)?;
    let logged = cairn.decisions(&DecisionQuery {
        world: Some(WorldKind::SignificanceGate),
        ..DecisionQuery::default()
    })?;
    ensure!(logged[0].generation == default_generation);

    let report = cairn.install_plugin(
        WorldKind::SignificanceGate,
        "quiet",
        defaults::EXAMPLE_QUIET.wasm,
    )?;
    ensure!(report.previous_generation == default_generation);
    cairn.ingest("w", &[turn("s2", "queue", decision)])?;
    clock.advance(chrono::Duration::minutes(20));
    ensure!(
        cairn.tick()?.is_empty(),
        "a quiet gate made the context dirty"
    );
    let quiet = cairn.decisions(&DecisionQuery {
        generation: Some(report.generation.as_str().to_owned()),
        ..DecisionQuery::default()
    })?;
    ensure!(quiet.len() == 1 && !quiet[0].output.reason_codes().is_empty());

    // A plugin that traps on this input (it captures everything else): the
    // ingest succeeds, the actor keeps serving, the decision is the
    // fail-safe (observe only).
    let trap = Path::new(defaults::SIGNIFICANCE.path).with_file_name("hostile_trap.wasm");
    let trap = std::fs::read(&trap).with_context(|| format!("reading {}", trap.display()))?;
    let hostile = cairn.install_plugin(WorldKind::SignificanceGate, "trap", &trap)?;
    cairn.ingest("w", &[turn("s3", "risky", &format!("HOSTILE {decision}"))])?;
    clock.advance(chrono::Duration::minutes(20));
    ensure!(
        cairn.tick()?.is_empty(),
        "a faulting gate made the context dirty"
    );
    let faults = cairn.decisions(&DecisionQuery {
        faults_only: true,
        ..DecisionQuery::default()
    })?;
    ensure!(
        faults.len() == 1 && faults[0].generation == hostile.generation,
        "{faults:?}"
    );
    ensure!(faults[0].fault().is_some_and(|f| f.kind.code() == "trap"));

    // Restart: the same plugin at the same generation; the log is intact.
    cairn.install_plugin(
        WorldKind::SignificanceGate,
        "quiet",
        defaults::EXAMPLE_QUIET.wasm,
    )?;
    let serving = cairn.plugin_generation(WorldKind::SignificanceGate)?;
    let written = cairn.decision_log_stats()?.written;
    drop(cairn);
    let cairn = open(dir.path(), &clock)?;
    ensure!(cairn.plugin_generation(WorldKind::SignificanceGate)? == serving);
    ensure!(
        cairn
            .plugin_slot_status(WorldKind::SignificanceGate)?
            .plugin
            == "quiet"
    );
    ensure!(cairn.decision_log_stats()?.written == written);
    let all = cairn.decisions(&DecisionQuery {
        limit: 1_000,
        ..DecisionQuery::default()
    })?;
    ensure!(all.len() as u64 == written, "{} of {written}", all.len());
    Ok(())
}

/// Swapping memory policies while threads keep deciding: no decision fails,
/// every one is logged exactly once with the generation that made it.
#[test]
fn swaps_under_concurrent_decisions_lose_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = march_clock()?;
    let cairn = open(dir.path(), &clock)?;
    let before = cairn.decision_log_stats()?.written;
    let stop = AtomicBool::new(false);
    let made = AtomicU64::new(0);
    let request = PolicyRequest::new(
        ContentReference {
            kind: ObjectKind::Entry,
            id: "e-1".into(),
            work_context_id: Some("db".into()),
            session_id: None,
            sensitivity: Sensitivity::Normal,
            low_trust: false,
        },
        Action::RenderInline,
        Some(Destination::CloudModel),
    );
    // Each install flushes the decision log (`Cairn::install_plugin`), so
    // the swaps take longer than the decisions: a worker stops at
    // `PER_WORKER` decisions, which keeps the three within the log's queue
    // (65,536 records by default) however slow the machine, so none is
    // dropped for being behind.
    const PER_WORKER: u64 = 20_000;
    let generations = std::thread::scope(|scope| -> Result<Vec<cairn::PolicyGenerationId>> {
        let workers: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    let mut mine = 0;
                    while !stop.load(Ordering::Relaxed) && mine < PER_WORKER {
                        mine += 1;
                        let decided = cairn.check_memory(&request)?;
                        ensure!(decided.outcome.is_plugin(), "{decided:?}");
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let mut generations = vec![cairn.plugin_generation(WorldKind::MemoryPolicy)?];
        for i in 0..10 {
            let plugin = if i % 2 == 0 {
                defaults::EXAMPLE_CUSTOM
            } else {
                defaults::MEMORY_POLICY
            };
            let report = cairn.install_plugin(WorldKind::MemoryPolicy, plugin.name, plugin.wasm)?;
            generations.push(report.generation);
        }
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker
                .join()
                .map_err(|_| anyhow::anyhow!("worker panicked"))??;
        }
        Ok(generations)
    })?;
    let made = made.load(Ordering::Relaxed);
    cairn.flush()?;
    let stats = cairn.decision_log_stats()?;
    ensure!(stats.dropped == 0 && stats.write_errors == 0, "{stats:?}");
    ensure!(
        stats.written - before == made,
        "{} logged, {made} made",
        stats.written - before
    );
    let mut counted = 0;
    for generation in &generations {
        counted += cairn.generation_counts(generation.as_str())?.decisions;
    }
    ensure!(
        counted == made,
        "{counted} counted by generation, {made} made"
    );
    Ok(())
}

/// An assembly asks the memory policy about its candidates in one plugin
/// call and leaves one decision-log record holding every decision (each
/// with its own id); a plugin built for the single-request world is asked
/// once per candidate, and the assembly still leaves one record.
#[test]
fn an_assembly_is_one_policy_call_and_one_log_record() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = march_clock()?;
    let cairn = open(dir.path(), &clock)?;
    let turns: Vec<TurnInput> = (0..12)
        .map(|i| {
            turn(
                "s1",
                "launch",
                &format!("Turn {i}: we keep the launch on track."),
            )
        })
        .collect();
    cairn.ingest("w", &turns)?;
    let mut request = cairn::AssembleRequest::new("s1", 4_000);
    request.retrieval = cairn::RetrievalMode::Off;

    // Decisions of other worlds (the significance gate deciding about the
    // ingested turns, in the actors) may land meanwhile, one record each:
    // a snapshot is the records written and those of other worlds, read
    // until a read of both sees nothing land in between.
    let snapshot = || -> Result<(u64, u64)> {
        let others = || -> Result<u64> {
            let all = cairn.decisions(&DecisionQuery {
                limit: 10_000,
                ..DecisionQuery::default()
            })?;
            Ok(all
                .iter()
                .filter(|r| r.world != WorldKind::MemoryPolicy)
                .count() as u64)
        };
        loop {
            let before = others()?;
            let written = cairn.decision_log_stats()?.written;
            if others()? == before {
                return Ok((written, before));
            }
        }
    };
    let assemble = |expect_calls: &dyn Fn(usize) -> u64| -> Result<()> {
        let (written, others_before) = snapshot()?;
        let calls = cairn.plugin_slot_status(WorldKind::MemoryPolicy)?.calls;
        let block = cairn.assemble("w", &request)?;
        let judged = block.trace.iter().filter(|t| t.policy.is_some()).count();
        ensure!(judged >= 12, "{judged} items judged");
        let (after, others_after) = snapshot()?;
        let meanwhile = others_after - others_before;
        ensure!(
            after == written + 1 + meanwhile,
            "one record for the assembly: {written} -> {after}, {meanwhile} of other worlds"
        );
        let records = cairn.decisions(&DecisionQuery {
            world: Some(WorldKind::MemoryPolicy),
            limit: 1_000,
            ..DecisionQuery::default()
        })?;
        let generation = cairn.plugin_generation(WorldKind::MemoryPolicy)?;
        let mine: Vec<_> = records
            .iter()
            .filter(|r| r.generation == generation)
            .collect();
        ensure!(
            mine.len() >= judged,
            "{} records, {judged} judged",
            mine.len()
        );
        let ids: std::collections::HashSet<_> = mine.iter().map(|r| r.decision_id).collect();
        ensure!(ids.len() == mine.len(), "every decision keeps its own id");
        let made = cairn.plugin_slot_status(WorldKind::MemoryPolicy)?.calls - calls;
        ensure!(
            made == expect_calls(mine.len()),
            "{made} plugin calls for {} decisions",
            mine.len()
        );
        Ok(())
    };
    assemble(&|_| 1)?;
    cairn.install_plugin(
        WorldKind::MemoryPolicy,
        "local-only",
        defaults::EXAMPLE_CUSTOM.wasm,
    )?;
    assemble(&|decisions| decisions as u64)?;
    Ok(())
}
