//! The `cairn` command line, run as a user would.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use anyhow::{Context, Result, ensure};

use crate::support::cairn_bin;

fn cairn(data_dir: &std::path::Path, args: &[&str], stdin: Option<&[u8]>) -> Result<Output> {
    cairn_with_env(data_dir, args, stdin, &[])
}

/// [`cairn`] with extra environment variables (`CAIRN_*` settings).
fn cairn_with_env(
    data_dir: &std::path::Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> Result<Output> {
    let mut child = Command::new(cairn_bin())
        .envs(crate::support::backend_env(data_dir))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut input = child.stdin.take().context("stdin")?;
    input.write_all(stdin.unwrap_or_default())?;
    drop(input);
    Ok(child.wait_with_output()?)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn demo_prints_turns_and_a_block() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = cairn(dir.path(), &["demo", "--budget", "320"], None)?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    ensure!(
        text.contains("[2] user: Let's go with April 1 and sync on."),
        "{text}"
    );
    // The next-morning session gets a tiered block, explained.
    ensure!(text.contains("<cairn-memory session=\"s-0416\""), "{text}");
    ensure!(
        text.contains("<card tier=\"1\" tag=\"resume\" work_context=\"launch-plan\""),
        "{text}"
    );
    ensure!(
        text.contains("<card tier=\"3\" tag=\"living_memory\">"),
        "{text}"
    );
    ensure!(text.contains("activity: drafting, inherited"), "{text}");
    ensure!(text.contains("-- trace ("), "{text}");
    ensure!(text.contains("of 320 tokens"), "{text}");
    // What the user said of themselves is captured as a fact, from talk,
    // and is living memory in the next session's block.
    ensure!(
        text.contains("[fact] The user moved to Lisbon last week. <- s-0412:8-8"),
        "{text}"
    );
    let living: String = text
        .lines()
        .skip_while(|l| !l.starts_with("<card tier=\"3\""))
        .take_while(|l| *l != "</card>")
        .collect::<Vec<_>>()
        .join("\n");
    ensure!(
        living.contains("- The user moved to Lisbon last week."),
        "{living}"
    );
    // Memory stays current: the next morning's resume card has neither the
    // waitlist question (answered: waitlist April 8) nor the bare "Let's go
    // with April 1" beside the richer decision; the launch-date task is done.
    let card: String = text
        .lines()
        .skip_while(|l| !l.starts_with("<card tier=\"1\""))
        .take_while(|l| *l != "</card>")
        .collect::<Vec<_>>()
        .join("\n");
    ensure!(!card.is_empty(), "{text}");
    ensure!(!card.contains("waitlist in the first wave"), "{card}");
    ensure!(!card.contains("Let's go with April 1"), "{card}");
    ensure!(
        text.contains("merged: [key_decision] Let's go with April 1 and sync on."),
        "{text}"
    );
    ensure!(text.contains("(answer.report) <- s-0415:0"), "{text}");
    ensure!(
        text.contains("[task] Done: We need to pick a launch date for the Orion beta."),
        "{text}"
    );
    // The next session opens with the last one's handoff; the demo ends
    // with the briefing, each line with its reference.
    ensure!(text.contains("## Last session handoff\n"), "{text}");
    let briefing: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("## Briefing: "))
        .collect();
    ensure!(briefing.len() > 6 && briefing.len() <= 80, "{text}");
    ensure!(
        briefing.contains(&"### Open questions") && briefing.contains(&"- none"),
        "{briefing:?}"
    );
    ensure!(
        !briefing
            .iter()
            .any(|l| l.contains("pick a launch date") || l.contains("ask Dana")),
        "{briefing:?}"
    );
    // Rerunning on the same data dir is idempotent.
    let again = stdout(&cairn(dir.path(), &["demo"], None)?);
    ensure!(again.contains("(0 new"), "{again}");
    Ok(())
}

#[test]
fn ingest_is_all_or_nothing_and_names_the_line() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let bad = b"{\"session\":\"s1\",\"role\":\"user\",\"content\":\"ok\"}\n{\"session\":\"s1\",\"role\":\"bot\",\"content\":\"x\"}\n";
    let out = cairn(dir.path(), &["ingest", "-"], Some(bad))?;
    ensure!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("line 2") && err.contains("unknown variant `bot`"),
        "{err}"
    );
    let invalid_utf8 = b"{\"session\":\"s1\",\"role\":\"user\",\"content\":\"\xff\"}\n";
    let out = cairn(dir.path(), &["ingest"], Some(invalid_utf8))?;
    ensure!(String::from_utf8_lossy(&out.stderr).contains("line 1: not valid UTF-8"));
    let out = cairn(dir.path(), &["transcript", "s1"], None)?;
    ensure!(
        !out.status.success(),
        "s1 should not exist: {}",
        stdout(&out)
    );

    let good = b"{\"session\":\"s1\",\"role\":\"user\",\"content\":\"We decided on Postgres.\"}\n\n{\"session\":\"s1\",\"role\":\"assistant\",\"content\":\"Noted.\"}\n";
    let out = cairn(dir.path(), &["ingest"], Some(good))?;
    ensure!(
        stdout(&out).contains("ingested 2 turns"),
        "{}",
        stdout(&out)
    );
    let out = cairn(
        dir.path(),
        &[
            "log",
            "add",
            "--kind",
            "decision",
            "--content",
            "Use Postgres",
            "--subject",
            "storage",
            "--from",
            "s1:0-1",
        ],
        None,
    )?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cairn(dir.path(), &["log"], None)?;
    ensure!(
        stdout(&out).contains("[decision] Use Postgres #storage (live) <- s1:0-1"),
        "{}",
        stdout(&out)
    );
    let out = cairn(
        dir.path(),
        &["subjects", "rename", "storage", "database"],
        None,
    )?;
    ensure!(out.status.success());
    let out = cairn(dir.path(), &["log", "--subject", "storage"], None)?;
    ensure!(stdout(&out).contains("#database"), "{}", stdout(&out));
    let out = cairn(
        dir.path(),
        &["assemble", "s1", "--budget", "100", "--explain"],
        None,
    )?;
    ensure!(
        stdout(&out)
            .lines()
            .any(|l| l.trim_start().starts_with("in ") && l.contains("turn s1:1")),
        "{}",
        stdout(&out)
    );
    let out = cairn(
        dir.path(),
        &["forget", "session", "s1", "--reason", "user request"],
        None,
    )?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cairn(dir.path(), &["tombstones"], None)?;
    ensure!(stdout(&out).contains("user request"), "{}", stdout(&out));
    let out = cairn(dir.path(), &["log", "--all"], None)?;
    ensure!(
        !stdout(&out).contains("Postgres"),
        "entries of a forgotten session must go: {}",
        stdout(&out)
    );
    Ok(())
}

#[test]
fn bad_configuration_is_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // `cairn sessions` with one setting from the environment.
    let sessions_with = |key: &str, value: &str| {
        Command::new(cairn_bin())
            .envs(crate::support::backend_env(dir.path()))
            .args(["--data-dir"])
            .arg(dir.path())
            .args(["sessions"])
            .env(key, value)
            .output()
    };
    let out = sessions_with("CAIRN_MEMORY__TOKENIZER", "gpt2")?;
    ensure!(out.status.code() == Some(2));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("memory.tokenizer \"gpt2\" is unknown"));
    let out = sessions_with("CAIRN_MEMORY__CACHE_MB", "0")?;
    ensure!(out.status.code() == Some(2));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("memory.cache_mb 0 is out of range"));
    let out = sessions_with("CAIRN_SEARCH__REFRESH_MS", "5")?;
    ensure!(out.status.code() == Some(2));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("search.refresh_ms 5 is out of range"));
    let out = Command::new(cairn_bin())
        .args(["--config", "/nonexistent/cairn.toml", "sessions"])
        .output()?;
    ensure!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    Ok(())
}

/// The CLI reaches memory through the facade only: `cairn ingest` goes
/// through the session actors, so the significance gate judges every turn
/// (one decision each in the durable log), and a read as a sub-agent
/// session outside its lineage is refused with the caller's exit code.
#[test]
fn cli_applies_the_facade_rules() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let turns = concat!(
        "{\"session\":\"main\",\"role\":\"user\",\"content\":\"We decided to ship on Friday.\"}\n",
        "{\"session\":\"main\",\"role\":\"assistant\",\"content\":\"Noted, Friday it is.\"}\n",
        "{\"session\":\"other\",\"role\":\"user\",\"content\":\"The other project's notes.\"}\n",
    );
    let out = cairn(dir.path(), &["ingest", "-"], Some(turns.as_bytes()))?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cairn(
        dir.path(),
        &["plugins", "log", "--world", "significance-gate", "--json"],
        None,
    )?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    ensure!(
        records.len() == 3,
        "the gate judged {} of 3 ingested turns: {}",
        records.len(),
        stdout(&out)
    );
    {
        // A sub-agent of `main`, as a gateway would start one.
        let cairn = cairn::Cairn::open(cairn::CairnConfig {
            data_dir: dir.path().to_owned(),
            storage: crate::support::storage(dir.path()),
            ..cairn::CairnConfig::default()
        })?;
        cairn.bootstrap(
            "default",
            &cairn::SessionSpec {
                id: "helper".into(),
                kind: cairn::SessionKind::Subagent,
                parent: Some("main".into()),
                ..cairn::SessionSpec::default()
            },
        )?;
    }
    let out = cairn(
        dir.path(),
        &["transcript", "main", "--asking", "helper"],
        None,
    )?;
    ensure!(
        out.status.success() && stdout(&out).contains("ship on Friday"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cairn(
        dir.path(),
        &["transcript", "other", "--asking", "helper"],
        None,
    )?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2),
        "exit {:?}: {err}",
        out.status.code()
    );
    ensure!(
        err.contains("lineage") && err.contains("\"other\""),
        "{err}"
    );
    ensure!(!stdout(&out).contains("other project"), "{}", stdout(&out));
    let out = cairn(
        dir.path(),
        &["sessions", "--asking", "helper", "--json"],
        None,
    )?;
    let sessions: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    let mut ids: Vec<&str> = sessions.iter().filter_map(|s| s["id"].as_str()).collect();
    ids.sort_unstable();
    ensure!(ids == ["helper", "main"], "{ids:?}");
    Ok(())
}

/// An input larger than one batch is still all or nothing: a bad line after
/// whole batches of good ones leaves nothing written.
#[test]
fn ingest_checks_the_whole_file_before_writing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut input = String::new();
    for i in 0..5 {
        input.push_str(&format!(
            "{{\"session\":\"s1\",\"role\":\"user\",\"content\":\"turn {i}\"}}\n"
        ));
    }
    input.push_str("{\"session\":\"s1\",\"role\":\"tool\",\"content\":\"no call id\"}\n");
    let out = cairn_with_env(
        dir.path(),
        &["ingest", "-"],
        Some(input.as_bytes()),
        &[("CAIRN_MEMORY__LIMITS__MAX_BATCH", "2")],
    )?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2),
        "exit {:?}: {err}",
        out.status.code()
    );
    ensure!(err.contains("item 5") && err.contains("tool"), "{err}");
    let out = cairn(dir.path(), &["sessions", "--json"], None)?;
    ensure!(
        !out.status.success() || stdout(&out).trim() == "[]",
        "something was written: {}",
        stdout(&out)
    );
    Ok(())
}

/// `cairn brief` prints the briefing; `--write` keeps every byte of a
/// MEMORY.md outside the markers, creates a missing file, and refuses
/// (exit 2, file untouched) a file whose markers are broken.
#[test]
fn brief_writes_only_between_the_markers() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    for (kind, content) in [
        ("decision", "Launch the beta on April 1"),
        ("task", "Book the maintenance window"),
    ] {
        let add = cairn(
            &data,
            &[
                "log",
                "add",
                "--kind",
                kind,
                "--content",
                content,
                "--subject",
                "beta",
                "--work-context",
                "launch",
            ],
            None,
        )?;
        ensure!(
            add.status.success(),
            "{}",
            String::from_utf8_lossy(&add.stderr)
        );
    }

    let out = cairn(&data, &["brief", "--work-context", "launch"], None)?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = stdout(&out);
    ensure!(
        printed.starts_with("## Briefing: default / launch ("),
        "{printed}"
    );
    ensure!(
        printed.contains("### Pending\n- Book the maintenance window (beta; since "),
        "{printed}"
    );

    // Created when absent.
    let memory = dir.path().join("MEMORY.md");
    let memory_arg = memory.to_str().context("path")?;
    let out = cairn(&data, &["brief", "--write", memory_arg], None)?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(stdout(&out).starts_with("created "), "{}", stdout(&out));
    // A person's text around the block, with odd bytes, is kept exactly.
    let written = std::fs::read(&memory)?;
    let start = b"<!-- cairn:briefing:start -->";
    let at = written
        .windows(start.len())
        .position(|w| w == start)
        .context("no start marker")?;
    let mut manual = b"# Goals\r\n- ship the beta \xff\n\n".to_vec();
    manual.extend_from_slice(&written[at..]);
    manual.extend_from_slice(b"\n## Notes (mine)\nno trailing newline");
    std::fs::write(&memory, &manual)?;
    let add = cairn(
        &data,
        &[
            "log",
            "add",
            "--kind",
            "decision",
            "--subject",
            "beta",
            "--content",
            "Ship sync in the beta",
        ],
        None,
    )?;
    ensure!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );
    let out = cairn(&data, &["brief", "--write", memory_arg], None)?;
    ensure!(stdout(&out).starts_with("updated "), "{}", stdout(&out));
    let after = std::fs::read(&memory)?;
    ensure!(
        after.starts_with(b"# Goals\r\n- ship the beta \xff\n\n<!-- cairn:briefing:start -->\n")
    );
    ensure!(
        after.ends_with(b"<!-- cairn:briefing:end -->\n\n## Notes (mine)\nno trailing newline")
    );
    ensure!(String::from_utf8_lossy(&after).contains("beta: Ship sync in the beta"));
    let out = cairn(&data, &["brief", "--write", memory_arg], None)?;
    ensure!(stdout(&out).starts_with("unchanged "), "{}", stdout(&out));

    // Broken markers: a clear error, exit 2, not a byte written.
    let broken = b"# Goals\n<!-- cairn:briefing:end -->\nx\n<!-- cairn:briefing:start -->\n";
    std::fs::write(&memory, broken)?;
    let out = cairn(&data, &["brief", "--write", memory_arg], None)?;
    ensure!(out.status.code() == Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("the end marker (line 2) comes before the start marker (line 4)")
            && err.contains("nothing was written"),
        "{err}"
    );
    ensure!(std::fs::read(&memory)? == broken);
    Ok(())
}
