//! `cairn plugins …`: install, swap, list, and the decision log, on the
//! data dir directly or, with `--server URL`, on a running `cairn serve`
//! (which holds the store's lock).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cairn::DecisionRecord;
use cairn::{Cairn, CairnConfig, DecisionQuery, InstallReport, PluginsReport, parse_world};
use clap::{Args, Subcommand};

/// Where a plugins command acts.
#[derive(Debug, Clone, Args)]
pub(crate) struct Target {
    /// A running `cairn serve` (e.g. http://127.0.0.1:7878) to act on,
    /// instead of opening the data dir (which the server holds locked).
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum PluginsAction {
    /// Install a plugin for a world and serve it at once (compiled and
    /// checked against the world first; refused with nothing changed if it
    /// does not fit).
    Install(InstallArgs),
    /// Replace a world's plugin: like install, and reports the old and the
    /// new generation.
    Swap(InstallArgs),
    /// Each world's plugin: generation, content hash, breaker, decision and
    /// fault counts.
    List(Target),
    /// Read the decision log, newest first.
    Log(LogArgs),
}

#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    /// significance-gate, topic-directive or memory-policy (or significance,
    /// topic, memory).
    world: String,
    /// The component (`.wasm`, built for wasm32-wasip2).
    file: PathBuf,
    /// The plugin's name (default: the file's stem, lowercased).
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// Only this world.
    #[arg(long)]
    world: Option<String>,
    /// Only this plugin.
    #[arg(long)]
    plugin: Option<String>,
    /// Only this generation (its id or number).
    #[arg(long)]
    generation: Option<String>,
    /// Only fail-safe decisions (faults and an open breaker).
    #[arg(long)]
    faults: bool,
    /// At most this many records.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    #[command(flatten)]
    target: Target,
}

pub(crate) fn run(config: CairnConfig, action: PluginsAction) -> Result<()> {
    let out = &mut std::io::stdout().lock();
    match action {
        PluginsAction::Install(args) => install(config, args, false, out),
        PluginsAction::Swap(args) => install(config, args, true, out),
        PluginsAction::List(target) => {
            let report: PluginsReport = match &target.server {
                Some(url) => Client::new(url).get("/v1/plugins", &[])?,
                None => open(config)?.plugins()?,
            };
            if target.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
                return Ok(());
            }
            for p in &report.plugins {
                if let Some(why) = &p.held {
                    writeln!(
                        out,
                        "{:<18} HELD CLOSED: every decision is the fail-safe. {why}",
                        p.installed.world.as_str()
                    )?;
                }
                let i = &p.installed;
                writeln!(
                    out,
                    "{:<18} {:<24} {:<40} {}  breaker {}  decisions {}  faults {}{}",
                    i.world.as_str(),
                    i.plugin,
                    i.generation.as_str(),
                    &i.content_hash[..i.content_hash.len().min(12)],
                    if p.breaker_open { "open" } else { "closed" },
                    p.decisions,
                    p.faults,
                    if i.builtin { "  (built-in)" } else { "" },
                )?;
            }
            let log = report.decision_log;
            write!(
                out,
                "decision log: {} written, {} kept, {} dropped",
                log.written, log.kept, log.dropped
            )?;
            if log.file_bytes > 0 {
                // On sled: the segment files in `<data_dir>/decisions`.
                write!(out, ", {:.1} MB in its files", log.file_bytes as f64 / 1e6)?;
            }
            writeln!(out)?;
            Ok(())
        }
        PluginsAction::Log(args) => {
            let query = DecisionQuery {
                world: args.world.as_deref().map(parse_world).transpose()?,
                plugin: args.plugin,
                generation: args.generation,
                faults_only: args.faults,
                limit: args.limit,
            };
            let records: Vec<DecisionRecord> = match &args.target.server {
                Some(url) => {
                    let mut params = vec![("limit", query.limit.to_string())];
                    if let Some(world) = query.world {
                        params.push(("world", world.as_str().to_owned()));
                    }
                    if let Some(plugin) = &query.plugin {
                        params.push(("plugin", plugin.clone()));
                    }
                    if let Some(generation) = &query.generation {
                        params.push(("generation", generation.clone()));
                    }
                    if query.faults_only {
                        params.push(("faults", "true".to_owned()));
                    }
                    Client::new(url).get("/v1/plugins/log", &params)?
                }
                None => open(config)?.decisions(&query)?,
            };
            if args.target.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&records)?)?;
                return Ok(());
            }
            for r in &records {
                let outcome = match r.fault() {
                    Some(fault) => format!("fault {}", fault.kind),
                    None if r.outcome.is_plugin() => "plugin".to_owned(),
                    None => "circuit-open".to_owned(),
                };
                let reasons: Vec<String> =
                    r.reason_codes().iter().map(ToString::to_string).collect();
                writeln!(
                    out,
                    "{}  {:<18} {:<40} {:<20} {:>7}µs  in {}  [{}]",
                    r.decision_id,
                    r.world.as_str(),
                    r.generation.as_str(),
                    outcome,
                    r.duration.as_micros(),
                    &r.inputs_digest.to_string()[..12],
                    reasons.join(", ")
                )?;
            }
            Ok(())
        }
    }
}

fn install(config: CairnConfig, args: InstallArgs, swap: bool, out: &mut impl Write) -> Result<()> {
    let world = parse_world(&args.world)?;
    let wasm = std::fs::read(&args.file)
        .with_context(|| format!("reading plugin file {}", args.file.display()))?;
    let name = match args.name {
        Some(name) => name,
        None => default_name(&args.file)?,
    };
    let report: InstallReport = match &args.target.server {
        Some(url) => {
            Client::new(url).put_wasm(&format!("/v1/plugins/{}", world.as_str()), &name, &wasm)?
        }
        None => open(config)?.install_plugin(world, &name, &wasm)?,
    };
    if args.target.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else if swap {
        writeln!(
            out,
            "swapped {}: {} -> {} ({})",
            report.world.as_str(),
            report.previous_generation,
            report.generation,
            report.compile
        )?;
    } else {
        writeln!(
            out,
            "installed {} for {}: generation {} (was {}; {})",
            report.plugin,
            report.world.as_str(),
            report.generation,
            report.previous_generation,
            report.compile
        )?;
    }
    Ok(())
}

/// The file's stem, lowercased, as a plugin name.
fn default_name(file: &Path) -> Result<String> {
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_lowercase)
        .unwrap_or_default();
    if stem.is_empty() {
        bail!(
            "cannot derive a plugin name from {}; pass --name",
            file.display()
        );
    }
    Ok(stem)
}

fn open(config: CairnConfig) -> Result<Cairn> {
    let dir = config.data_dir.clone();
    Cairn::open(config).with_context(|| {
        format!(
            "opening {} (if `cairn serve` is running on it, pass --server URL)",
            dir.display()
        )
    })
}

/// A small JSON client for `cairn serve`'s plugin routes.
struct Client {
    base: String,
    agent: ureq::Agent,
}

impl Client {
    fn new(base: &str) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Client {
            base: base.trim_end_matches('/').to_owned(),
            agent,
        }
    }

    fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T> {
        let mut request = self.agent.get(format!("{}{path}", self.base));
        for (key, value) in query {
            request = request.query(*key, value);
        }
        let response = request
            .call()
            .with_context(|| format!("GET {}{path}", self.base))?;
        Self::read(response)
    }

    fn put_wasm<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        name: &str,
        wasm: &[u8],
    ) -> Result<T> {
        let response = self
            .agent
            .put(format!("{}{path}", self.base))
            .query("name", name)
            .header("content-type", "application/wasm")
            .send(wasm)
            .with_context(|| format!("PUT {}{path}", self.base))?;
        Self::read(response)
    }

    fn read<T: serde::de::DeserializeOwned>(
        mut response: ureq::http::Response<ureq::Body>,
    ) -> Result<T> {
        let status = response.status();
        let body: serde_json::Value = response
            .body_mut()
            .read_json()
            .context("the server's answer is not JSON")?;
        if !status.is_success() {
            let code = body.get("code").and_then(|c| c.as_str()).unwrap_or("error");
            let message = body.get("message").and_then(|m| m.as_str()).unwrap_or("");
            bail!("server refused ({}): {code}: {message}", status.as_u16());
        }
        Ok(serde_json::from_value(body)?)
    }
}
