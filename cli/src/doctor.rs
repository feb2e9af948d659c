//! `cairn doctor`: what this cairn found and what to do about anything
//! missing. Each check is one line (or one JSON object): the embedding
//! model and ONNX Runtime (configured, or found where
//! `scripts/setup-embeddings.sh` installs them), whether they load, the
//! data dir, the store, the policy plugins serving each world, and the
//! rules in force on every surface.
//!
//! Read-only: a data dir that does not exist is not created, and the store
//! is opened only when it exists (a running `cairn serve` holds its lock;
//! the check then says so). Exits 1 when a check failed; a missing model is
//! a warning (search answers lexically and flags it).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use cairn::{Cairn, CairnConfig, PathOrigin};
use serde::Serialize;
use serde_json::{Value, json};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// Found and working.
    Ok,
    /// Works, but less well than it could (no model: lexical search).
    Warn,
    /// Broken: something configured does not work.
    Fail,
    /// For the record (the rules in force).
    Info,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Info => "info",
        }
    }
}

/// One thing looked at.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    /// What was checked (`model`, `onnxruntime`, `store`…).
    name: String,
    status: Status,
    /// What was found, in a sentence.
    found: String,
    /// What to do about it, when something is missing or broken.
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
    /// The same as data (paths, origins, counts).
    #[serde(skip_serializing_if = "Value::is_null")]
    details: Value,
}

impl Check {
    fn new(name: &str, status: Status, found: impl Into<String>) -> Check {
        Check {
            name: name.to_owned(),
            status,
            found: found.into(),
            fix: None,
            details: Value::Null,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }

    fn details(mut self, details: Value) -> Check {
        self.details = details;
        self
    }
}

/// Everything `cairn doctor` found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// False when a check failed.
    ok: bool,
    checks: Vec<Check>,
}

const SETUP: &str = "run scripts/setup-embeddings.sh (it installs the model and ONNX Runtime \
                     where cairn looks for them), or set embedding.model_dir and \
                     embedding.ort_dylib (CAIRN_EMBEDDING__MODEL_DIR / CAIRN_EMBEDDING__ORT_DYLIB)";

fn origin_text(origin: PathOrigin, cache: Option<&Path>) -> String {
    match (origin, cache) {
        (PathOrigin::Configured, _) => "configured".to_owned(),
        (PathOrigin::Discovered, Some(c)) => format!("found in {}", c.display()),
        (PathOrigin::Discovered, None) => "found in the set-up cache".to_owned(),
        _ => "not set".to_owned(),
    }
}

/// The config file `CairnConfig::load` read.
fn config_check(file: Option<&Path>) -> Check {
    match file {
        Some(f) => Check::new("config", Status::Ok, format!("{}", f.display()))
            .details(json!({ "file": f })),
        None if Path::new("cairn.toml").is_file() => {
            Check::new("config", Status::Ok, "./cairn.toml")
                .details(json!({ "file": "cairn.toml" }))
        }
        None => Check::new(
            "config",
            Status::Ok,
            "no file: defaults and CAIRN_* variables (./cairn.toml is read when present)",
        )
        .details(json!({ "file": null })),
    }
}

fn embedding_checks(config: &CairnConfig) -> Vec<Check> {
    let e = &config.embedding;
    let cache = e
        .origin
        .cache_dir
        .clone()
        .or_else(cairn::embedding_cache_dir);
    let cache_text = cache
        .as_deref()
        .map_or("the set-up cache".to_owned(), |c| c.display().to_string());
    let mut checks = Vec::new();
    // The model folder.
    let model = if e.model_dir.is_empty() {
        let why = if e.discover {
            format!(
                "none configured, none installed in {cache_text}/models/{}",
                cairn::MODEL_NAME
            )
        } else {
            "none configured (embedding.discover is off)".to_owned()
        };
        Check::new("model", Status::Warn, why).fix(SETUP)
    } else {
        let dir = PathBuf::from(&e.model_dir);
        let missing: Vec<&str> = cairn::MODEL_FILES
            .iter()
            .copied()
            .filter(|f| !dir.join(f).is_file())
            .collect();
        let from = origin_text(e.origin.model_dir, e.origin.cache_dir.as_deref());
        if missing.is_empty() {
            Check::new("model", Status::Ok, format!("{} ({from})", dir.display()))
        } else {
            Check::new(
                "model",
                Status::Fail,
                format!("{} ({from}) lacks {}", dir.display(), missing.join(", ")),
            )
            .fix(SETUP)
        }
    };
    checks.push(model.details(json!({
        "path": e.model_dir,
        "origin": e.origin.model_dir,
        "cache_dir": cache,
    })));
    // ONNX Runtime.
    let ort = if e.ort_dylib.is_empty() {
        let why = if e.discover {
            format!("none configured, none installed in {cache_text}/onnxruntime")
        } else {
            "none configured (embedding.discover is off)".to_owned()
        };
        Check::new("onnxruntime", Status::Warn, why).fix(SETUP)
    } else {
        let from = origin_text(e.origin.ort_dylib, e.origin.cache_dir.as_deref());
        if Path::new(&e.ort_dylib).is_file() {
            Check::new(
                "onnxruntime",
                Status::Ok,
                format!("{} ({from})", e.ort_dylib),
            )
        } else {
            Check::new(
                "onnxruntime",
                Status::Fail,
                format!("{} ({from}) does not exist", e.ort_dylib),
            )
            .fix(SETUP)
        }
    };
    checks.push(ort.details(json!({
        "path": e.ort_dylib,
        "origin": e.origin.ort_dylib,
    })));
    // Does it load?
    let search = if !e.is_set() {
        Check::new(
            "search",
            Status::Warn,
            "lexical only (BM25): no embedding model; every answer says `lexical_fallback`",
        )
        .fix(SETUP)
        .details(json!({ "mode": "bm25", "lexical_fallback": true }))
    } else {
        use cairn::search::{EmbedConfig, Embedder, FastEmbedder};
        match FastEmbedder::load(&EmbedConfig::new(&e.model_dir, &e.ort_dylib)) {
            Ok(model) => Check::new(
                "search",
                Status::Ok,
                format!(
                    "hybrid (BM25 + vectors): the model loads, {} dimensions",
                    model.dimension()
                ),
            )
            .details(json!({ "mode": "hybrid", "lexical_fallback": false, "dimension": model.dimension() })),
            Err(err) => Check::new(
                "search",
                Status::Fail,
                format!("the model does not load: {err}; search falls back to lexical"),
            )
            .fix(SETUP)
            .details(json!({ "mode": "bm25", "lexical_fallback": true, "error": err.to_string() })),
        }
    };
    checks.push(search);
    checks
}

/// Whether `dir` takes a new file.
fn writable(dir: &Path) -> bool {
    tempfile::tempfile_in(dir).is_ok()
}

fn data_dir_check(dir: &Path) -> Check {
    let details = json!({ "path": dir, "exists": dir.is_dir() });
    if dir.is_dir() {
        if writable(dir) {
            Check::new(
                "data_dir",
                Status::Ok,
                format!("{} (writable)", dir.display()),
            )
            .details(details)
        } else {
            Check::new(
                "data_dir",
                Status::Fail,
                format!("{} is not writable", dir.display()),
            )
            .fix("give this user write access, or point data_dir (--data-dir, CAIRN_DATA_DIR) elsewhere")
            .details(details)
        }
    } else if dir.exists() {
        Check::new(
            "data_dir",
            Status::Fail,
            format!("{} exists and is not a folder", dir.display()),
        )
        .fix("point data_dir (--data-dir, CAIRN_DATA_DIR) at a folder")
        .details(details)
    } else {
        Check::new(
            "data_dir",
            Status::Ok,
            format!(
                "{} does not exist yet: the first command that writes creates it",
                dir.display()
            ),
        )
        .details(details)
    }
}

/// The store and the plugins it serves (when the data dir exists).
fn store_checks(config: &CairnConfig) -> Vec<Check> {
    let backend_name = config.storage.backend.as_str();
    let postgres = config.storage.backend == cairn::StorageBackend::Postgres;
    // Where the store is, as the checks report it (never a password).
    let backend = if postgres {
        format!("postgres at {}", config.storage.postgres.redacted_url())
    } else {
        "sled".to_owned()
    };
    if !postgres && !config.data_dir.is_dir() {
        return vec![
            Check::new("store", Status::Info, "not created yet (no data dir)"),
            Check::new(
                "plugins",
                Status::Info,
                "the built-in default policies (nothing is installed in a new data dir)",
            ),
        ];
    }
    let mut config = config.clone();
    // The doctor reads; it does not need the model (checked above).
    config.embedding = cairn::EmbeddingConfig {
        discover: false,
        ..cairn::EmbeddingConfig::default()
    };
    let cairn = match Cairn::open(config) {
        Ok(c) => c,
        Err(err) => {
            let fix = if postgres {
                "if `cairn serve` (or another cairn) runs on this database it holds its writer \
                 lock: ask it (GET /healthz, GET /v1/plugins); otherwise, is the database up and \
                 reachable from here, and does storage.postgres.url (CAIRN_STORAGE__POSTGRES__URL) \
                 name it with a user that may create tables?"
            } else {
                "if `cairn serve` (or another cairn) runs on this data dir it holds the \
                 store's lock: stop it, or ask it (GET /healthz, GET /v1/plugins)"
            };
            return vec![
                Check::new(
                    "store",
                    Status::Fail,
                    format!("{backend}: cannot be opened: {err}"),
                )
                .fix(fix)
                .details(json!({
                    "backend": backend_name,
                    "error": err.to_string(),
                    "code": err.code(),
                    "retryable": err.kind() == cairn::ErrorKind::Unavailable,
                })),
            ];
        }
    };
    let mut checks = Vec::new();
    match cairn.workspaces() {
        Ok(ws) => checks.push(
            Check::new(
                "store",
                Status::Ok,
                format!("opened ({backend}): {} workspace(s)", ws.len()),
            )
            .details(json!({ "backend": backend_name, "workspaces": ws })),
        ),
        Err(err) => checks.push(Check::new(
            "store",
            Status::Fail,
            format!("opened, but cannot list workspaces: {err}"),
        )),
    }
    match cairn.cluster_status() {
        Ok(None) => {}
        Ok(Some(status)) => {
            let live = status.nodes.iter().filter(|n| n.live).count();
            checks.push(
                Check::new(
                    "cluster",
                    Status::Info,
                    format!(
                        "node {} of a cluster: {live} of {} node(s) live, {} workspace lease(s)",
                        status.node,
                        status.nodes.len(),
                        status.leases.len()
                    ),
                )
                .details(json!({ "nodes": status.nodes, "leases": status.leases })),
            );
        }
        Err(err) => checks.push(Check::new(
            "cluster",
            Status::Fail,
            format!("cannot read the cluster's nodes and leases: {err}"),
        )),
    }
    match cairn.tokens() {
        Ok(tokens) if tokens.is_empty() => checks.push(Check::new(
            "tokens",
            Status::Info,
            "no stored access tokens (cairn tokens create makes one)",
        )),
        Ok(tokens) => {
            let listed: Vec<Value> = tokens
                .iter()
                .map(|t| json!({"id": t.id, "workspace": t.workspace, "scope": t.scope}))
                .collect();
            checks.push(
                Check::new(
                    "tokens",
                    Status::Info,
                    format!(
                        "{} stored access token(s): cairn serve requires a bearer token on \
                         every request",
                        tokens.len()
                    ),
                )
                .details(json!({ "tokens": listed })),
            );
        }
        Err(err) => checks.push(Check::new(
            "tokens",
            Status::Fail,
            format!("the access tokens cannot be read: {err}"),
        )),
    }
    match cairn.plugins() {
        Ok(report) => {
            for p in &report.plugins {
                let i = &p.installed;
                let what = format!(
                    "{} serves {} ({}, generation {})",
                    i.plugin,
                    i.world,
                    if i.builtin { "built-in" } else { "installed" },
                    i.generation
                );
                let details = serde_json::to_value(p).unwrap_or(Value::Null);
                let name = format!("policy:{}", i.world);
                let check = if let Some(held) = &p.held {
                    Check::new(&name, Status::Fail, format!("{what}; held closed: {held}"))
                        .fix("install a plugin for this world: cairn plugins install <world> <file.wasm>")
                } else if p.breaker_open {
                    Check::new(
                        &name,
                        Status::Warn,
                        format!("{what}; its circuit breaker is open (fail-safe answers)"),
                    )
                    .fix("see cairn plugins log --faults; swap in a fixed plugin")
                } else {
                    Check::new(&name, Status::Ok, what)
                };
                checks.push(check.details(details));
            }
        }
        Err(err) => checks.push(Check::new(
            "plugins",
            Status::Fail,
            format!("cannot be listed: {err}"),
        )),
    }
    let _ = cairn.flush();
    checks
}

/// The rules every surface applies, as configured.
fn rules_check(config: &CairnConfig) -> Vec<Check> {
    let s = &config.search;
    let server = &config.server;
    let auth = if server.auth_enabled() {
        format!(
            "bearer tokens ({} workspace token(s){}), {} requests/minute per token",
            server.tokens.len(),
            if server.admin_token.is_some() {
                ", an admin token"
            } else {
                ""
            },
            server.requests_per_minute
        )
    } else {
        "no tokens configured: open and loopback only, unless tokens are stored (see `tokens`)"
            .to_owned()
    };
    vec![
        Check::new(
            "rules",
            Status::Info,
            format!(
                "memory_search {} a minute and {} a day per caller; a sub-agent session reads \
                 its lineage only; secrets are redacted on every read; the memory policy \
                 judges every item per destination; tool output and sub-agent content are \
                 labelled low-trust",
                s.rate_per_minute, s.rate_per_day
            ),
        )
        .details(json!({
            "search_rate_per_minute": s.rate_per_minute,
            "search_rate_per_day": s.rate_per_day,
        })),
        Check::new(
            "server",
            Status::Info,
            format!("cairn serve listens on {}: {auth}", server.listen),
        )
        .details(json!({
            "listen": server.listen,
            "auth": server.auth_enabled(),
            "requests_per_minute": server.requests_per_minute,
        })),
        Check::new(
            "extraction",
            Status::Info,
            if config.extraction.model.enabled {
                "heuristic, with the model pass on"
            } else {
                "heuristic (the model pass is off)"
            },
        ),
    ]
}

/// Runs every check.
pub(crate) fn report(config: &CairnConfig, file: Option<&Path>) -> Report {
    let mut checks = vec![config_check(file)];
    checks.extend(embedding_checks(config));
    checks.push(data_dir_check(&config.data_dir));
    checks.extend(store_checks(config));
    checks.extend(rules_check(config));
    Report {
        ok: checks.iter().all(|c| c.status != Status::Fail),
        checks,
    }
}

/// `cairn doctor [--json]`; an error (exit 1) when a check failed.
pub(crate) fn run(config: &CairnConfig, file: Option<&Path>, json: bool) -> Result<()> {
    let report = report(config, file);
    let out = &mut std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        for c in &report.checks {
            writeln!(out, "{:<5} {:<26} {}", c.status.label(), c.name, c.found)?;
            if let Some(fix) = &c.fix {
                writeln!(out, "{:<5} {:<26} fix: {fix}", "", "")?;
            }
        }
    }
    out.flush()?;
    if !report.ok {
        anyhow::bail!("cairn doctor: a check failed (see FAIL above)");
    }
    Ok(())
}
