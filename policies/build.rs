//! Builds the guest plugins in `plugins/` (a separate cargo workspace) for
//! `wasm32-wasip2`, so a clean checkout compiles the default, example and
//! hostile test plugins from source; no `.wasm` file is committed.
//!
//! For each plugin crate `foo-bar` it sets `CAIRN_PLUGIN_FOO_BAR` to the
//! built component's path, for `env!` in this crate's library, tests and
//! benches.
//!
//! The nested cargo uses its own target directory (`<target>/cairn-plugins`,
//! shared by debug and release builds of this crate), so it never waits on
//! the outer build's lock. Environment variables the outer cargo sets for
//! build scripts that would leak into the guests' build (flags, wrappers
//! such as clippy-driver, the target directory) are removed.
//!
//! Set `CAIRN_PLUGINS_WASM_DIR` to a directory of prebuilt `<crate>.wasm`
//! files to skip the nested build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The guest crates whose components the host exposes.
const PLUGINS: &[&str] = &[
    "significance-default",
    "topic-default",
    "memory-policy-default",
    "example-custom",
    "example-quiet",
    "test-export",
    "test-conformance",
    "test-topic-directive",
    "hostile-trap",
    "hostile-infinite-loop",
    "hostile-memory-bomb",
    "hostile-stack-overflow",
    "hostile-invalid-output",
    "hostile-oversized-output",
    "hostile-stall",
];

const TARGET: &str = "wasm32-wasip2";

fn main() -> ExitCode {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest_dir.parent().unwrap_or(&manifest_dir).to_path_buf();
    let plugins = root.join("plugins");
    let wit = root.join("wit");

    println!("cargo:rerun-if-env-changed=CAIRN_PLUGINS_WASM_DIR");
    println!("cargo:rerun-if-changed={}", wit.display());
    watch(&plugins);

    let out_dir = if let Some(prebuilt) = env::var_os("CAIRN_PLUGINS_WASM_DIR") {
        PathBuf::from(prebuilt)
    } else {
        let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());
        let target_dir = plugins_target_dir(&out);
        if let Err(message) = build(&plugins, &target_dir) {
            eprintln!(
                "error: building the policy plugins in {} failed",
                plugins.display()
            );
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
        target_dir.join(TARGET).join("release")
    };

    for plugin in PLUGINS {
        let path = out_dir.join(format!("{}.wasm", plugin.replace('-', "_")));
        if !path.is_file() {
            eprintln!("error: expected plugin component at {}", path.display());
            return ExitCode::FAILURE;
        }
        let var = format!("CAIRN_PLUGIN_{}", plugin.replace('-', "_").to_uppercase());
        println!("cargo:rustc-env={var}={}", path.display());
        println!("cargo:rerun-if-changed={}", path.display());
    }
    ExitCode::SUCCESS
}

/// Re-run when any plugin source, manifest or the lock file changes.
fn watch(plugins: &Path) {
    for name in ["Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", plugins.join(name).display());
    }
    let Ok(entries) = std::fs::read_dir(plugins) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// `<target>/cairn-plugins`, found from `OUT_DIR`
/// (`<target>[/<triple>]/<profile>/build/<pkg>-<hash>/out`); `OUT_DIR`
/// itself if the layout is unfamiliar.
fn plugins_target_dir(out_dir: &Path) -> PathBuf {
    let mut up = out_dir.ancestors();
    let build = up.nth(2);
    let target = up.nth(1);
    match (build, target) {
        (Some(build), Some(target)) if build.file_name().is_some_and(|n| n == "build") => {
            target.join("cairn-plugins")
        }
        _ => out_dir.join("cairn-plugins"),
    }
}

fn build(plugins: &Path, target_dir: &Path) -> Result<(), String> {
    ensure_target()?;
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(plugins.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CARGO_LLVM_COV",
        "CARGO_INCREMENTAL",
    ] {
        cmd.env_remove(var);
    }
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PROFILE_") || key.starts_with("CARGO_TARGET_") {
            cmd.env_remove(key.as_ref());
        }
    }
    let output = cmd
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The `wasm32-wasip2` standard library must be installed. With rustup it
/// is added here (idempotent, a few seconds); without rustup the error says
/// what to install.
fn ensure_target() -> Result<(), String> {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let installed = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|dir| dir.is_dir());
    if installed {
        return Ok(());
    }
    println!(
        "cargo:warning=installing the {TARGET} target with rustup (needed for the policy plugins)"
    );
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        _ => Err(format!(
            "the {TARGET} target is not installed; run `rustup target add {TARGET}`"
        )),
    }
}
