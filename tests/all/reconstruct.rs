//! Reconstruct end to end: `verify` passes on the demo's conversation (with
//! captures, compaction, maintenance and search) and on a loadgen run's
//! data, and finds each deliberately corrupted derived record; a rebuild
//! repairs them and `cairn reconstruct --verify` exits non-zero until then.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use cairn::maintain::MaintainOptions;
use cairn::rebuild::{DerivedStore, ReconstructReport};
use cairn::testing::{Collection, StateKey};
use cairn::{Cairn, CairnConfig, EmbeddingConfig, EntryInput, ManualClock, TurnInput};
use chrono::{Duration, TimeZone, Utc};

use crate::support::cairn_bin;

const CONVERSATION: &str = include_str!("../../cli/assets/demo-conversation.jsonl");
const ENTRIES: &str = include_str!("../../cli/assets/demo-entries.jsonl");

fn jsonl<T: serde::de::DeserializeOwned>(text: &str) -> Result<Vec<T>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).context("a line of the demo"))
        .collect()
}

/// The real model when the environment names it (`scripts/dev.sh test`
/// does), so stored vectors are embedded again and compared.
fn embedding() -> EmbeddingConfig {
    EmbeddingConfig {
        model_dir: std::env::var("CAIRN_EMBEDDING__MODEL_DIR").unwrap_or_default(),
        ort_dylib: std::env::var("CAIRN_EMBEDDING__ORT_DYLIB").unwrap_or_default(),
        ..EmbeddingConfig::default()
    }
}

fn differences(report: &ReconstructReport) -> Vec<String> {
    report
        .differences
        .iter()
        .map(|d| format!("{} {}: {} / {}", d.store.as_str(), d.key, d.live, d.rebuilt))
        .collect()
}

#[test]
fn verify_passes_on_the_demo_and_finds_corrupted_derived_records() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::new(
        Utc.with_ymd_and_hms(2026, 3, 5, 14, 30, 0)
            .single()
            .context("time")?,
    );
    let config = CairnConfig {
        data_dir: dir.path().to_owned(),
        storage: crate::support::storage(dir.path()),
        embedding: embedding(),
        ..CairnConfig::default()
    };
    let cairn = Cairn::open_with_clock(config, Arc::new(clock.clone()))?;
    let ws = "default";
    let turns: Vec<TurnInput> = jsonl(CONVERSATION)?;
    cairn.ingest(ws, &turns)?;
    let entries: Vec<EntryInput> = jsonl(ENTRIES)?;
    cairn.append_entries(ws, &entries)?;
    cairn.capture(ws, None)?;
    for s in cairn.sessions(ws, None, None)? {
        cairn.session_end(ws, &s.id)?;
    }
    cairn.compact(ws, "s-0412", Some(60))?;
    cairn.catch_up_search()?;
    let fresh = cairn.reconstruct(ws, true)?;
    ensure!(fresh.is_consistent(), "{:#?}", differences(&fresh));
    let checked: Vec<DerivedStore> = fresh.stores.iter().map(|s| s.store).collect();
    for store in [
        DerivedStore::LogView,
        DerivedStore::Replacements,
        DerivedStore::WorkContextSessions,
        DerivedStore::MaintenanceMarks,
        DerivedStore::SearchIndex,
        DerivedStore::StoredVectors,
        DerivedStore::CaptureMarks,
    ] {
        ensure!(checked.contains(&store), "{store:?} not checked");
    }
    ensure!(
        fresh
            .stores
            .iter()
            .any(|s| s.store == DerivedStore::SearchIndex && s.records > 20),
        "{fresh:?}"
    );
    // Three months on, maintenance archives and decays; still consistent.
    clock.advance(Duration::days(95));
    let run = cairn.maintain(ws, MaintainOptions::default())?;
    ensure!(!run.changes.is_empty(), "{run:?}");
    let after = cairn.reconstruct(ws, true)?;
    ensure!(after.is_consistent(), "{:#?}", differences(&after));

    // Corrupt four derived records.
    let replaced = cairn
        .entries(
            ws,
            &cairn::EntryFilter {
                all: true,
                ..Default::default()
            },
            None,
        )?
        .into_iter()
        .find_map(|v| match v.status {
            cairn::EntryStatus::Replaced { .. } => Some(v.entry.id.clone()),
            _ => None,
        })
        .context("the demo has a replaced entry")?;
    cairn.raw_write(ws, Collection::Replacements, replaced.as_bytes(), None)?;
    cairn.raw_write(
        ws,
        Collection::State,
        &StateKey::TurnVector {
            session: "s-0412".into(),
            seq: 999,
        }
        .encode(),
        Some(&[1, 2, 3]),
    )?;
    cairn.raw_write(
        ws,
        Collection::State,
        &StateKey::SessionMark {
            work_context: "launch-plan".into(),
            session: "s-0412".into(),
        }
        .encode(),
        Some(&1u64.to_be_bytes()),
    )?;
    cairn.raw_write(
        ws,
        Collection::WorkContextSessions,
        b"launch-plan\0s-0416",
        Some(b""),
    )?;
    let broken = cairn.reconstruct(ws, true)?;
    let found = differences(&broken);
    for store in [
        "replacements",
        "stored_vectors search/v/s-0412/",
        "capture_marks launch-plan/s-0412",
        "work_context_sessions launch-plan",
    ] {
        ensure!(
            found.iter().any(|d| d.starts_with(store)),
            "{store}: {found:#?}"
        );
    }
    // The verify wrote nothing: the same differences again.
    ensure!(differences(&cairn.reconstruct(ws, true)?) == found);
    let repaired = cairn.reconstruct(ws, false)?;
    ensure!(
        repaired.stores.iter().map(|s| s.repaired).sum::<usize>() >= 4,
        "{repaired:?}"
    );
    let clean = cairn.reconstruct(ws, true)?;
    ensure!(clean.is_consistent(), "{:#?}", differences(&clean));
    ensure!(matches!(
        cairn.entry(ws, &replaced, None)?.status,
        cairn::EntryStatus::Replaced { .. }
    ));
    Ok(())
}

/// The binary without the model: embedding a loadgen run's turns twice
/// (the indexing pass, then the check) takes a debug build most of a
/// minute; the demo test above checks vectors with the model.
fn cli(data: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(cairn_bin())
        .envs(crate::support::backend_env(data))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("CAIRN_EMBEDDING__MODEL_DIR")
        .env_remove("CAIRN_EMBEDDING__ORT_DYLIB")
        .env("CAIRN_EMBEDDING__DISCOVER", "false")
        .output()?)
}

#[test]
fn cli_reconstruct_verifies_a_loadgen_run_and_fails_on_a_difference() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/steady.toml");
    let out = Command::new(cairn_bin())
        .arg("loadgen")
        .arg("--scenario")
        .arg(&scenario)
        .args(["--sessions", "8", "--duration", "2", "--concurrency", "4"])
        .args(["--rate", "200", "--json", "--data-dir"])
        .arg(&data)
        .envs(crate::support::backend_env(&data))
        .env("RUST_LOG", "warn")
        .env_remove("CAIRN_EMBEDDING__MODEL_DIR")
        .env_remove("CAIRN_EMBEDDING__ORT_DYLIB")
        .env("CAIRN_EMBEDDING__DISCOVER", "false")
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let verify = cli(&data, &["reconstruct", "--verify", "--all-workspaces"])?;
    let text = String::from_utf8_lossy(&verify.stdout);
    ensure!(
        verify.status.success() && text.contains("consistent"),
        "{text}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    ensure!(
        text.contains("search_index") && text.contains("capture_marks"),
        "{text}"
    );

    // A stray session listed under a work context it is not in.
    let workspace = {
        let cairn = Cairn::open(CairnConfig {
            data_dir: data.clone(),
            storage: crate::support::storage(&data),
            ..CairnConfig::default()
        })?;
        let ws = cairn
            .workspaces()?
            .into_iter()
            .next()
            .context("a workspace")?;
        cairn.raw_write(
            &ws,
            Collection::WorkContextSessions,
            b"nowhere\0ghost",
            Some(b""),
        )?;
        ws
    };
    let verify = cli(&data, &["reconstruct", "--verify", "--all-workspaces"])?;
    let text = String::from_utf8_lossy(&verify.stdout);
    ensure!(verify.status.code() == Some(1), "{verify:?}");
    ensure!(text.contains("work_context_sessions nowhere"), "{text}");
    ensure!(
        String::from_utf8_lossy(&verify.stderr).contains("1 difference(s)"),
        "{verify:?}"
    );
    let rebuild = cli(&data, &["--workspace", &workspace, "reconstruct"])?;
    let text = String::from_utf8_lossy(&rebuild.stdout);
    ensure!(
        rebuild.status.success() && text.contains("1 difference(s) repaired"),
        "{text}"
    );
    let verify = cli(&data, &["reconstruct", "--verify", "--all-workspaces"])?;
    ensure!(verify.status.success(), "{verify:?}");
    Ok(())
}
