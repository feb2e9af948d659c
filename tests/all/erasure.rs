//! A forget that erases everything: after `forget` of a session and a
//! rewrite of the store (`Cairn::rewrite_store`, `cairn vacuum`), a byte
//! search of every file of the data dir finds no forgotten text, the
//! tombstone names no one, and a new session with the same id starts clean.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use cairn::{
    Cairn, CairnConfig, EntryFilter, ForgetTarget, ReadAs, Role, SearchRequest, TurnInput,
};

use crate::support::cairn_bin;

const MARK: &str = "Zanzibar-quokka-7731";
const SESSION: &str = "dana-smith-chat";

/// Waits until the search index has caught up with the store (at most
/// 60 s).
fn wait_indexed(cairn: &Cairn) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        let stats = cairn.index_stats()?;
        if stats.backlog == 0 && stats.entry_backlog == 0 {
            return Ok(());
        }
        ensure!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "indexing never caught up: {stats:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn open(dir: &Path) -> Result<Cairn> {
    Ok(Cairn::open(CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        ..CairnConfig::default()
    })?)
}

/// The files under `dir` that contain `needle`.
pub(crate) fn files_containing(dir: &Path, needle: &[u8]) -> Result<Vec<String>> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let path = e?.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)?
                .windows(needle.len())
                .any(|w| w == needle)
            {
                found.push(path.display().to_string());
            }
        }
    }
    Ok(found)
}

fn turns(n: usize) -> Vec<TurnInput> {
    (0..n)
        .map(|i| {
            TurnInput::new(
                SESSION,
                Role::User,
                &format!("We decided the {MARK} plan, step {i}: call Dana Smith on Friday."),
            )
        })
        .collect()
}

#[test]
fn forget_then_vacuum_leaves_no_byte_of_the_session() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    {
        let cairn = open(&data)?;
        cairn.ingest("acme", &turns(6))?;
        cairn.ingest(
            "acme",
            &[TurnInput::new(
                "other",
                Role::User,
                "Unrelated notes to keep.",
            )],
        )?;
        cairn.flush()?;
        cairn.capture("acme", None)?;
        cairn.session_end("acme", SESSION)?;
        // The search service has indexed (and stored vectors for) it.
        wait_indexed(&cairn)?;
        let found = cairn.memory_search("acme", &SearchRequest::new(MARK))?;
        ensure!(!found.items.is_empty(), "{found:?}");
        let t = cairn.forget("acme", &ForgetTarget::Session(SESSION.into()), "asked to")?;
        // The tombstone names no one, in clear or in the log line.
        let json = serde_json::to_string(&cairn.tombstones("acme")?)?;
        ensure!(!json.contains(SESSION) && !json.contains("dana"), "{json}");
        ensure!(t.target.kind == "session");
        // Hashing the name again tells whether it was erased.
        ensure!(
            cairn.tombstone_target("acme", &ForgetTarget::Session(SESSION.into()))? == t.target
        );
        ensure!(
            cairn
                .memory_search("acme", &SearchRequest::new(MARK))?
                .items
                .is_empty()
        );
        cairn.flush()?;
    }
    if crate::support::postgres_admin_url().is_some() {
        // No files of cairn's own to rewrite: vacuum says so and what to do,
        // and no row holds a byte of the session.
        let out = Command::new(cairn_bin())
            .envs(crate::support::backend_env(&data))
            .arg("--data-dir")
            .arg(&data)
            .arg("vacuum")
            .output()?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(2) && err.contains("postgres") && err.contains("VACUUM"),
            "{err}"
        );
        for needle in [MARK.as_bytes(), SESSION.as_bytes(), b"Dana Smith"] {
            let rows = crate::support::rows_containing(&data, needle)?;
            ensure!(
                rows == 0,
                "{:?} still in {rows} row(s)",
                String::from_utf8_lossy(needle)
            );
        }
        // The check can fail: what was kept is found.
        ensure!(crate::support::rows_containing(&data, b"Unrelated notes")? > 0);
        return Ok(());
    }
    // The store rewritten (through the binary, as an operator would).
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(&data))
        .arg("--data-dir")
        .arg(&data)
        .args(["vacuum", "--json"])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    ensure!(report["trees"].as_u64().unwrap_or(0) > 0, "{report}");
    for needle in [MARK.as_bytes(), SESSION.as_bytes(), b"Dana Smith"] {
        let found = files_containing(&data, needle)?;
        ensure!(
            found.is_empty(),
            "{:?} still on disk in {found:?}",
            String::from_utf8_lossy(needle)
        );
    }

    // What was kept is still there, and a new session with the same id
    // starts clean: captured from its first turn.
    let cairn = open(&data)?;
    ensure!(
        cairn
            .transcript("acme", "other", 0, None, ReadAs::user())?
            .len()
            == 1
    );
    cairn.ingest(
        "acme",
        &[TurnInput::new(
            SESSION,
            Role::User,
            "We decided to rename the project to Heron.",
        )],
    )?;
    cairn.flush()?;
    cairn.capture("acme", None)?;
    let fresh = cairn.entries(
        "acme",
        &EntryFilter {
            session: Some(SESSION.into()),
            ..EntryFilter::default()
        },
        ReadAs::user(),
    )?;
    ensure!(
        fresh.iter().any(|v| v.entry.content.contains("Heron")),
        "a new session with a forgotten id is captured from turn 0: {fresh:?}"
    );
    Ok(())
}

/// The rewrite is refused, clearly, while a cairn has the store open.
#[test]
fn vacuum_refuses_a_store_in_use() -> Result<()> {
    if crate::support::sled_only(
        "vacuum_refuses_a_store_in_use",
        "sled's file lock and files; vacuum on postgres is refused (forget_then_vacuum)",
    ) {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.ingest("acme", &[TurnInput::new("s", Role::User, "hello")])?;
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(dir.path()))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("vacuum")
        .output()?;
    ensure!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(err.contains("cairn process"), "{err}");
    drop(cairn);
    let report = Cairn::rewrite_store(dir.path()).context("rewrite once closed")?;
    ensure!(report.trees > 0);
    Ok(())
}

/// A work context whose stored state cannot be read backs off between
/// restarts instead of restarting in a loop (it once ran ~30,000 restarts a
/// second), and ingest keeps working meanwhile.
#[test]
fn an_unloadable_context_backs_off() -> Result<()> {
    use cairn::testing::{Collection, StateKey};
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let mut first = TurnInput::new("s1", Role::User, "hello");
    first.work_context = Some("wc".into());
    cairn.ingest("acme", &[first])?;
    cairn.flush()?;
    let key = StateKey::CaptureMark {
        work_context: "wc".into(),
    }
    .encode();
    cairn.raw_write("acme", Collection::State, &key, Some(b"{not json"))?;
    // A capture makes the context reload its state from the store.
    let _ = cairn.capture("acme", Some("wc"));
    let before = cairn.actors().stats().restarts;
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let restarts = cairn.actors().stats().restarts - before;
    ensure!(
        restarts <= 6,
        "{restarts} restarts in 1.5 s: the actor does not back off"
    );
    let mut more = TurnInput::new("s1", Role::User, "still there?");
    more.work_context = Some("wc".into());
    let acks = cairn.ingest("acme", &[more])?;
    ensure!(acks.len() == 1);
    Ok(())
}
