//! Model discovery and `cairn doctor`, as a new user meets them: the set-up
//! script's cache folder and no `CAIRN_EMBEDDING__*` variables.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::support::{Server, cairn_bin};

/// The real model and ONNX Runtime, as `scripts/dev.sh test` names them.
fn installed() -> Result<(PathBuf, PathBuf)> {
    let model = std::env::var_os("CAIRN_EMBEDDING__MODEL_DIR")
        .context("CAIRN_EMBEDDING__MODEL_DIR unset: run the tests with scripts/dev.sh test")?;
    let ort = std::env::var_os("CAIRN_EMBEDDING__ORT_DYLIB")
        .context("CAIRN_EMBEDDING__ORT_DYLIB unset: run the tests with scripts/dev.sh test")?;
    Ok((PathBuf::from(model), PathBuf::from(ort)))
}

/// A cache folder laid out as `scripts/setup-embeddings.sh` lays it out,
/// its files linked to the real ones.
fn setup_cache(cache: &Path) -> Result<()> {
    let (model, ort) = installed()?;
    let models = cache.join("models/all-minilm-l6-v2");
    std::fs::create_dir_all(&models)?;
    for f in cairn::MODEL_FILES {
        std::os::unix::fs::symlink(model.join(f), models.join(f))?;
    }
    let lib = cache.join("onnxruntime");
    std::fs::create_dir_all(&lib)?;
    let name = ort.file_name().context("ORT path has no file name")?;
    std::os::unix::fs::symlink(&ort, lib.join(name))?;
    std::os::unix::fs::symlink(name, lib.join("libonnxruntime.so"))?;
    Ok(())
}

/// Runs the binary with no embedding variables and `cache` as the set-up
/// script's cache folder.
fn cairn(data: &Path, cache: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(cairn_bin())
        .envs(crate::support::backend_env(data))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env_remove("CAIRN_EMBEDDING__MODEL_DIR")
        .env_remove("CAIRN_EMBEDDING__ORT_DYLIB")
        .env("CAIRN_CACHE_DIR", cache)
        .env("RUST_LOG", "warn")
        .output()?)
}

fn json_of(out: &Output) -> Result<Value> {
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "stdout {:?}, stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn check<'a>(report: &'a Value, name: &str) -> Result<&'a Value> {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .with_context(|| format!("no check {name:?} in {report}"))
}

fn ingest(data: &Path, cache: &Path, dir: &Path) -> Result<()> {
    let turns = dir.join("turns.jsonl");
    std::fs::write(
        &turns,
        "{\"session\":\"s1\",\"role\":\"user\",\"content\":\"We chose queue-based retries for payments.\"}\n\
         {\"session\":\"s1\",\"role\":\"user\",\"content\":\"I adopted a puppy named Rex.\"}\n",
    )?;
    let out = cairn(data, cache, &["ingest", turns.to_str().context("path")?])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn search_uses_the_model_the_setup_script_installed_with_no_variables() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (data, cache) = (dir.path().join("data"), dir.path().join("cache"));
    setup_cache(&cache)?;

    // Before anything is stored: the model is found, the data dir is not
    // created by looking.
    let out = cairn(&data, &cache, &["doctor", "--json"])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_of(&out)?;
    ensure!(report["ok"] == true, "{report}");
    let model = check(&report, "model")?;
    ensure!(
        model["status"] == "ok" && model["details"]["origin"] == "discovered",
        "{model}"
    );
    ensure!(
        model["details"]["path"]
            .as_str()
            .is_some_and(|p| p.starts_with(cache.to_str().unwrap_or("?"))),
        "{model}"
    );
    let ort = check(&report, "onnxruntime")?;
    ensure!(
        ort["details"]["origin"] == "discovered"
            && ort["details"]["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("libonnxruntime.so.1.32.0")),
        "the versioned library, not the link: {ort}"
    );
    let search = check(&report, "search")?;
    ensure!(
        search["status"] == "ok" && search["details"]["lexical_fallback"] == false,
        "{search}"
    );
    // On postgres the store is the database; the data dir only holds this
    // node's compile cache, which opening the store makes.
    ensure!(
        !data.exists() || crate::support::postgres_admin_url().is_some(),
        "doctor created the data dir"
    );

    // A plain `cairn search` uses the model: no lexical fallback.
    ingest(&data, &cache, dir.path())?;
    let out = cairn(
        &data,
        &cache,
        &["search", "which pet dog", "--k", "1", "--json"],
    )?;
    let r = json_of(&out)?;
    ensure!(
        r["lexical_fallback"] == false && r["items"][0]["id"] == "session:s1:1-1",
        "{r}"
    );

    // With a store: the store and each world's policy are reported.
    let out = cairn(&data, &cache, &["doctor", "--json"])?;
    let report = json_of(&out)?;
    let store = check(&report, "store")?;
    ensure!(
        store["status"] == "ok" && store["details"]["workspaces"][0] == "default",
        "{store}"
    );
    for world in ["significance-gate", "topic-directive", "memory-policy"] {
        let p = check(&report, &format!("policy:{world}"))?;
        ensure!(
            p["status"] == "ok" && p["details"]["builtin"] == true,
            "{p}"
        );
    }
    ensure!(check(&report, "rules")?["status"] == "info");

    // The text form, one line a check.
    let out = cairn(&data, &cache, &["doctor"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.contains("hybrid") && text.contains("memory-policy"),
        "{text}"
    );
    Ok(())
}

#[test]
fn without_a_model_search_is_flagged_lexical_and_doctor_says_what_to_do() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (data, cache) = (dir.path().join("data"), dir.path().join("empty-cache"));
    std::fs::create_dir_all(&cache)?;
    ingest(&data, &cache, dir.path())?;
    let out = cairn(&data, &cache, &["search", "retries", "--k", "1", "--json"])?;
    let r = json_of(&out)?;
    ensure!(
        r["lexical_fallback"] == true
            && r["notice"]
                .as_str()
                .is_some_and(|n| n.contains("lexical only")),
        "{r}"
    );
    ensure!(
        String::from_utf8_lossy(&out.stderr).contains("no embedding model configured"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A missing model is a warning, with the fix; the exit status is 0.
    let out = cairn(&data, &cache, &["doctor", "--json"])?;
    ensure!(out.status.success());
    let report = json_of(&out)?;
    for name in ["model", "onnxruntime", "search"] {
        let c = check(&report, name)?;
        ensure!(
            c["status"] == "warn"
                && c["fix"]
                    .as_str()
                    .is_some_and(|f| f.contains("scripts/setup-embeddings.sh")),
            "{c}"
        );
    }
    ensure!(check(&report, "search")?["details"]["lexical_fallback"] == true);

    // A half-installed model folder is not used.
    let models = cache.join("models/all-minilm-l6-v2");
    std::fs::create_dir_all(&models)?;
    std::fs::write(models.join("model.onnx"), b"not a model")?;
    let report = json_of(&cairn(&data, &cache, &["doctor", "--json"])?)?;
    ensure!(check(&report, "model")?["status"] == "warn", "{report}");

    // Discovery off: nothing is looked for.
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(&data))
        .arg("--data-dir")
        .arg(&data)
        .args(["doctor", "--json"])
        .env("CAIRN_EMBEDDING__DISCOVER", "false")
        .env_remove("CAIRN_EMBEDDING__MODEL_DIR")
        .env_remove("CAIRN_EMBEDDING__ORT_DYLIB")
        .output()?;
    let report = json_of(&out)?;
    ensure!(
        check(&report, "model")?["found"]
            .as_str()
            .is_some_and(|f| f.contains("discover is off")),
        "{report}"
    );
    Ok(())
}

#[test]
fn doctor_fails_on_a_broken_configured_model_and_a_locked_store() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (data, cache) = (dir.path().join("data"), dir.path().join("empty-cache"));
    std::fs::create_dir_all(&cache)?;
    // A configured path that does not exist is a failure, not a warning.
    let out = Command::new(cairn_bin())
        .envs(crate::support::backend_env(&data))
        .arg("--data-dir")
        .arg(&data)
        .args(["doctor", "--json"])
        .env("CAIRN_EMBEDDING__MODEL_DIR", dir.path().join("nope"))
        .env("CAIRN_CACHE_DIR", &cache)
        .output()?;
    ensure!(out.status.code() == Some(1), "{out:?}");
    let report = json_of(&out)?;
    ensure!(report["ok"] == false, "{report}");
    ensure!(check(&report, "model")?["status"] == "fail", "{report}");

    // A running server holds the store: doctor says so and how to ask it.
    let server = Server::start(&data)?;
    let out = cairn(&data, &cache, &["doctor"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.code() == Some(1) && text.contains("FAIL") && text.contains("cairn serve"),
        "{text}"
    );
    drop(server);
    Ok(())
}
