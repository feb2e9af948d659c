//! The `cairn` command line: a server and tools over the same facade a
//! gateway embeds. Run `cairn --help` for the commands.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cairn::{
    AssembleRequest, AssembledContext, Cairn, CairnConfig, Destination, EntryFilter, EntryInput,
    EntryKind, EntryView, ReadAs, SubjectKind, TurnInput,
};
use clap::{Parser, Subcommand, ValueEnum};

use crate::commands::{
    assemble, compaction, entries, erasure, obligations, search, sessions, tokens,
};

/// The binary's allocator, jemalloc: the hot path allocates many small,
/// short-lived values (candidates, rendered lines, policy requests) on many
/// threads, where the system allocator cost 17 % more CPU per turn and more
/// memory (docs/BENCHMARKS.md, eleventh pass). A gateway that embeds the
/// library keeps its own allocator.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The allocator's options, read by jemalloc before `main`: free pages go
/// back to the system after one second instead of ten (the background
/// thread purges them, off the request path). With 1,000 sessions this held
/// 28–49 MB less at the same CPU per turn (docs/BENCHMARKS.md, fifty-first
/// pass). `_RJEM_MALLOC_CONF` in the environment is read after this and
/// overrides it.
///
/// jemalloc reads this symbol as a `const char *`: a thin pointer to a
/// NUL-terminated string, which a reference to a byte array is. Overriding
/// it is the one unsafe item of the workspace: jemalloc's own definition is
/// a weak symbol meant to be replaced this way.
#[allow(unsafe_code)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8; 20] = b"dirty_decay_ms:1000\0";

mod commands;
mod doctor;
mod export;
mod maintain;
mod plugins;
mod topics;

/// cairn: the memory runtime for AI-agent gateways.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, about, long_about = None)]
struct Cli {
    /// Configuration file (default: ./cairn.toml if it exists). `CAIRN_*`
    /// environment variables override it, e.g. CAIRN_DATA_DIR.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where cairn keeps its data (overrides the configuration).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Workspace to work in (default: the configuration's, `default`).
    #[arg(long, short = 'w', global = true)]
    workspace: Option<String>,
    /// Read as this session: a sub-agent or cron session sees only its own
    /// lineage, as the memory tools do (transcript, sessions, log, get).
    #[arg(long, global = true, value_name = "SESSION")]
    asking: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Make a token for the workspace (`--workspace`); prints it once.
    Create {
        /// `read` (GET, search, assemble) or `write`.
        #[arg(long, default_value = "write")]
        scope: cairn::TokenScope,
        /// Who or what holds it.
        #[arg(long)]
        label: Option<String>,
        /// Print the listing and the token as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List every token (never the secrets).
    List {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by its id (the 12 hex digits after `cairn_`).
    Revoke {
        /// The token's id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the JSON API over HTTP (OpenAPI at /openapi.json).
    Serve {
        /// Address to listen on (default: the configuration's, 127.0.0.1:7878),
        /// or `unix:PATH` for a Unix socket (mode 0600).
        #[arg(long)]
        listen: Option<String>,
        /// Serve HTTPS with this PEM certificate chain (with --tls-key;
        /// or `[server.tls] cert`).
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
    },
    /// Make, list and revoke the bearer tokens `cairn serve` accepts (each
    /// opens one workspace, for reading or for reading and writing; only a
    /// keyed hash is stored). Stop the server first, or use its admin
    /// routes (`/v1/tokens`).
    Tokens {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Serve the memory tools over the Model Context Protocol on stdio
    /// (memory_search, memory_get, memory_expand, session_list,
    /// read_transcript, memory_note; the briefing and each session's
    /// assembled context as resources). The workspace is --workspace, the
    /// asking session --asking: no tool argument can name another.
    Mcp {
        /// Caller name memory_search's rate limit counts (default: the
        /// client's name from its initialisation).
        #[arg(long)]
        caller: Option<String>,
        /// Where the answers go, for the memory policy: local_model
        /// (default), cloud_model, external_llm, subagent, share_link,
        /// task_runtime, user_visible_ui.
        #[arg(long)]
        destination: Option<String>,
    },
    /// Append turns from a JSONL file (or `-` for stdin), one turn per line.
    Ingest {
        /// The file; `-` or absent reads stdin.
        file: Option<PathBuf>,
    },
    /// Print a session's transcript.
    Transcript {
        /// Session id.
        session: String,
        /// First sequence number.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// At most this many turns.
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List sessions.
    Sessions {
        /// Only this work context.
        #[arg(long)]
        work_context: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read or append to the memory log.
    Log {
        #[command(subcommand)]
        action: Option<LogAction>,
        #[command(flatten)]
        filter: LogFilter,
    },
    /// List and manage subjects.
    Subjects {
        #[command(subcommand)]
        action: Option<SubjectAction>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Assemble the memory block for a session's next model call.
    Assemble(commands::assemble::AssembleArgs),
    /// Pin an entry into every assembled block (or unpin it with --remove).
    Pin {
        /// Entry id.
        entry: String,
        /// Unpin instead.
        #[arg(long)]
        remove: bool,
    },
    /// Erase a session, entry, subject or workspace, leaving an audited tombstone.
    Forget {
        /// What to erase.
        #[arg(value_enum)]
        target: ForgetKind,
        /// Its id (slug for a subject; the workspace id for a workspace).
        id: String,
        /// Why (recorded in the tombstone).
        #[arg(long)]
        reason: String,
    },
    /// List the tombstones of the workspace (and of erased workspaces).
    Tombstones {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The briefing: active subjects (14 days), decisions (7 days), pending
    /// tasks, open questions, stale subjects (30 days) and contradictions,
    /// at most 80 lines, each line with its entry reference.
    Brief {
        /// Only this work context (default: the whole workspace).
        #[arg(long)]
        work_context: Option<String>,
        /// Write it into this MEMORY.md, between the markers
        /// `<!-- cairn:briefing:start -->` and `<!-- cairn:briefing:end -->`:
        /// every other byte of the file is kept; the file is created when
        /// absent; a file with broken markers is refused and left untouched.
        #[arg(long, value_name = "PATH")]
        write: Option<PathBuf>,
        /// Print JSON (text and sections).
        #[arg(long)]
        json: bool,
    },
    /// Capture now: turn the new turns of a work context (or of all of them)
    /// into memory-log entries with provenance. Never processes a turn twice.
    Capture {
        /// Only this work context (default: every work context of the workspace).
        #[arg(long)]
        work_context: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Search the workspace's turns and memory-log entries (hybrid: BM25 +
    /// vectors), with filters. Replaced and expired entries are left out
    /// unless asked for. Says so when the results are lexical only because
    /// no embedding model is available.
    Search(commands::search::SearchArgs),
    /// Read an entry by id, or a turn range `session:<id>:<from>-<to>`
    /// (capped at 4,000 tokens, secrets redacted).
    Get {
        /// Entry id or `session:<id>:<from>-<to>`.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Compact a session: summaries over the turns before its kept tail
    /// (summaries of summaries while over the budget). The raw record is
    /// never changed; `cairn expand` returns the originals.
    Compact {
        /// Session id.
        session: String,
        /// Tokens the session's view should fit in (default: the configuration's).
        #[arg(long)]
        budget: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Expand a compaction summary: its turns and lower summaries (one
    /// level), or with --all every original turn, checked against its hash.
    Expand {
        /// Summary id (`sum-…`).
        summary: String,
        /// Every original turn (capped at 4,000 tokens; page with --from).
        #[arg(long)]
        all: bool,
        /// With --all: from this turn on.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Search index statistics: indexed turns, vectors, backlog.
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure retrieval quality.
    Eval {
        #[command(subcommand)]
        bench: EvalCommand,
    },
    /// Install, swap and inspect the policy plugins (WebAssembly), and read
    /// the decision log. With `--server URL`, acts on a running `cairn serve`.
    Plugins {
        #[command(subcommand)]
        action: plugins::PluginsAction,
    },
    /// Topics: define them, see what they collected, approve proposals,
    /// collect on request, and ask why (the gate log).
    Topics {
        #[command(subcommand)]
        action: topics::TopicsAction,
    },
    /// Load-test cairn with simulated sessions, then check that no
    /// acknowledged turn was lost or duplicated (exits non-zero if one was).
    /// In process on a fresh temporary data dir unless --data-dir is given,
    /// or against a running `cairn serve` with --http.
    Loadgen(LoadgenArgs),
    /// Maintenance: promote, decay, archive (listing contradictions); every
    /// change recorded under a run id. Also --dry-run, --undo RUN,
    /// --restore ENTRY, --runs.
    Maintain(maintain::MaintainArgs),
    /// Rebuild every derived store (log views, search index, stored vectors,
    /// capture marks, maintenance marks) from the raw record and the log and
    /// compare it with the live one; --verify only reports (non-zero exit on
    /// a difference), without it the derived state is replaced.
    Reconstruct(maintain::ReconstructArgs),
    /// A workspace (or --session) as a portable JSONL bundle, every object
    /// judged by the memory policy for `export` (what it refuses is left out).
    Export(export::ExportArgs),
    /// A bundle from `cairn export` into a new or empty workspace
    /// (`--workspace`); checked whole first, then the indexes rebuilt.
    Import(export::ImportArgs),
    /// The audit records of uses the memory policy asked to audit (its
    /// `audit-log` obligation), newest first.
    Audit {
        /// Only the records of this item (`entry e1`, `turn s1:4`).
        #[arg(long)]
        item: Option<String>,
        /// At most this many (1..=10000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Items the memory policy holds until the user confirms them (its
    /// `confirm-with-user` obligation); --grant ITEM confirms one.
    Confirmations {
        /// Grant the confirmation of this item (`entry e1`, `turn s1:4`).
        #[arg(long, value_name = "ITEM")]
        grant: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite the store's files so they hold only live data: after a
    /// `forget`, the erased bytes leave the data directory (sled keeps
    /// removed values in old log segments until it reclaims them). Stop
    /// every cairn process on this data dir first.
    Vacuum {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What cairn found and what to do about anything missing: the
    /// embedding model and ONNX Runtime (configured, or installed by
    /// scripts/setup-embeddings.sh), the data dir, the store, the policy
    /// plugins in force and the rules every surface applies. Exits 1 when a
    /// check failed.
    Doctor {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ingest a bundled sample conversation and show what cairn keeps and assembles.
    Demo {
        /// Token budget of the assembled block.
        #[arg(long, default_value_t = 400)]
        budget: usize,
    },
}

/// `cairn loadgen` flags; each overrides the scenario file's value.
#[derive(Debug, clap::Args)]
struct LoadgenArgs {
    /// Scenario file (TOML; see scenarios/).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Drive a running `cairn serve` at this address (127.0.0.1:PORT).
    /// Repeat for the nodes of a cluster: calls go round them, and a node
    /// that dies is passed over.
    #[arg(long, value_name = "ADDR")]
    http: Vec<String>,
    /// With --http: the server's pid, to report its peak RSS.
    #[arg(long, requires = "http")]
    server_pid: Option<u32>,
    /// How long a turn is retried on retryable errors (backpressure, 503,
    /// a node that does not answer), in seconds [default: 0 (six quick
    /// attempts); 30 with several --http nodes].
    #[arg(long)]
    retry_secs: Option<f64>,
    /// Concurrent simulated sessions.
    #[arg(long)]
    sessions: Option<usize>,
    /// Work contexts.
    #[arg(long)]
    work_contexts: Option<usize>,
    /// Workspaces.
    #[arg(long)]
    workspaces: Option<usize>,
    /// Topics.
    #[arg(long)]
    topics: Option<usize>,
    /// Offered turns per second (Poisson); 0 = as fast as acknowledged.
    #[arg(long)]
    rate: Option<f64>,
    /// Calls in flight at most.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Seconds to run.
    #[arg(long)]
    duration: Option<f64>,
    /// Stop after this many turns.
    #[arg(long)]
    max_turns: Option<u64>,
    /// Seed of the random generator.
    #[arg(long)]
    seed: Option<u64>,
    /// Swap the significance plugin every this many seconds.
    #[arg(long, value_name = "SECS")]
    swap_every: Option<f64>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModeArg {
    Bm25,
    Dense,
    Hybrid,
}

#[derive(Debug, Subcommand)]
enum EvalCommand {
    /// Evidence recall on LoCoMo conversations (one `*.json` per conversation),
    /// for the bm25, dense and hybrid modes side by side.
    Locomo {
        /// Folder of LoCoMo conversation files.
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// k of `recall@k`.
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Also choose hybrid's fusion parameters leave-one-conversation-out
        /// (choose on the others, score on each) and report the held-out
        /// numbers.
        #[arg(long)]
        loo: bool,
        /// Change one recipe parameter for this run, `KEY=VALUE`
        /// (repeatable): `when_boost`, `period_boost`, `follow`,
        /// `follow_seeds`, `follow_terms`, `follow_elsewhere` (0 or 1),
        /// `session_cap`, `session_decay`, `diversity`, `sentence_sim`,
        /// `list_cap`, `list_decay`, `list_smoothing`, `list_session_boost`
        /// (for questions that ask for several things),
        /// `lexical_weight`, `smoothing`, `session_boost`, `speaker_boost`,
        /// `time_terms` (0 or 1).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Write one JSON line per question to FILE: the hybrid rank of
        /// each of its evidence turns and the ten best hits (for reading
        /// what a recipe misses).
        #[arg(long, value_name = "FILE")]
        ranks: Option<PathBuf>,
        /// Also index the memory-log entries extraction derives from each
        /// session (the heuristic extractor, and the model of
        /// `[extraction.model]` when it is enabled): each conversation is
        /// ingested into a throwaway cairn and captured after every session;
        /// a hit on an entry counts as the turns it cites.
        #[arg(long)]
        entries: bool,
        /// With `--entries`: a significance-gate component to install in the
        /// throwaway cairn instead of the default gate (which decides what
        /// capture reads; the default is tuned for work talk).
        #[arg(long, value_name = "FILE.wasm")]
        significance: Option<PathBuf>,
        /// Score what capture remembers about the people instead of
        /// retrieval: live entries against the annotated observations (fact
        /// recall, precision, duplicates, stale items, per conversation).
        /// With `--ranks FILE`, each (observation, entry citing its turn)
        /// pair is written there with its cosine.
        #[arg(long, conflicts_with_all = ["loo", "entries"])]
        facts: bool,
        /// With `--facts`: the cosine at or above which an entry and an
        /// observation say the same thing.
        #[arg(long, value_name = "COSINE", default_value_t = cairn_cli::eval::SAME_FACT, requires = "facts")]
        fact_threshold: f32,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ForgetKind {
    Session,
    Entry,
    Subject,
    Workspace,
}

#[derive(Debug, clap::Args)]
struct LogFilter {
    /// Only this kind (task, fact, decision, question, handoff, open_question, …).
    #[arg(long, value_parser = parse_kind)]
    kind: Option<EntryKind>,
    /// Only this subject.
    #[arg(long)]
    subject: Option<String>,
    /// Only this work context.
    #[arg(long)]
    work_context: Option<String>,
    /// Only entries from this session.
    #[arg(long)]
    session: Option<String>,
    /// Include replaced and expired entries.
    #[arg(long)]
    all: bool,
    /// At most this many, newest first.
    #[arg(long)]
    limit: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum LogAction {
    /// Append an entry.
    Add {
        /// The kind.
        #[arg(long, value_parser = parse_kind)]
        kind: EntryKind,
        /// The content.
        #[arg(long)]
        content: String,
        /// More detail.
        #[arg(long)]
        detail: Option<String>,
        /// Subject slug.
        #[arg(long)]
        subject: Option<String>,
        /// Id of the entry this one replaces.
        #[arg(long)]
        replaces: Option<String>,
        /// Work context.
        #[arg(long)]
        work_context: Option<String>,
        /// Provenance as SESSION:FROM-TO (turn sequence numbers, inclusive).
        #[arg(long, value_name = "SESSION:FROM-TO")]
        from: Option<String>,
    },
    /// Show every version of an entry's replaces chain.
    History {
        /// Entry id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum SubjectAction {
    /// Register a subject.
    Add {
        /// Kebab-case slug.
        slug: String,
        /// What it is.
        #[arg(long, value_parser = parse_subject_kind, default_value = "project")]
        kind: SubjectKind,
        /// Display name.
        #[arg(long)]
        display: Option<String>,
    },
    /// Rename a subject; the old slug keeps resolving.
    Rename {
        /// Current slug.
        old: String,
        /// New slug.
        new: String,
    },
    /// Merge a subject into another; the merged slug becomes an alias.
    Merge {
        /// Subject to merge away.
        from: String,
        /// Subject to keep.
        into: String,
    },
}

fn parse_kind(s: &str) -> std::result::Result<EntryKind, String> {
    EntryKind::parse(s).ok_or_else(|| {
        let names: Vec<&str> = EntryKind::ALL.iter().map(|k| k.as_str()).collect();
        format!("unknown kind {s:?}; one of {}", names.join(", "))
    })
}

fn parse_subject_kind(s: &str) -> std::result::Result<SubjectKind, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("unknown subject kind {s:?}; one of project, person, system, tool, organization, topic, other"))
}

fn main() {
    private_umask();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => {}
        Err(err) => {
            eprintln!("error: {}", error_text(&err));
            let caller = err
                .downcast_ref::<cairn::CairnError>()
                .is_some_and(|e| e.kind().is_caller_error())
                || matches!(
                    err.downcast_ref::<cairn_cli::brief::WriteError>(),
                    Some(cairn_cli::brief::WriteError::Markers { .. })
                );
            std::process::exit(if caller { 2 } else { 1 });
        }
    }
}

/// The error and its causes, each cause once: most of cairn's errors
/// already quote their cause, which `{:#}` would print a second time.
fn error_text(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn init_tracing(config: &CairnConfig) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if config.log.format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn run(cli: Cli) -> Result<()> {
    let mut config = CairnConfig::load(cli.config.as_deref())?;
    if let Some(dir) = &cli.data_dir {
        config.data_dir = dir.clone();
    }
    if let Some(ws) = &cli.workspace {
        config.workspace = ws.clone();
    }
    if matches!(cli.command, Command::Serve { .. }) {
        init_tracing(&config);
    } else {
        // Commands print their results on stdout; only warnings go to stderr.
        config.log.level = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_owned());
        init_tracing(&config);
        // On a cluster's database a command is a guest, not a node: it
        // advertises nothing, so it takes no workspace (and writes none).
        config.storage.cluster.advertise.clear();
    }
    let ws_id = config.workspace.clone();
    if let Command::Eval { bench } = &cli.command {
        return eval_locomo(&config, bench);
    }
    if let Command::Loadgen(args) = &cli.command {
        return loadgen(config, cli.data_dir.clone(), args);
    }
    if let Command::Doctor { json } = &cli.command {
        return doctor::run(&config, cli.config.as_deref(), *json);
    }
    match cli.command {
        Command::Demo { budget } => demo(config, cli.data_dir.is_some(), budget),
        Command::Plugins { action } => plugins::run(config, action),
        Command::Topics { action } => topics::run(config, &ws_id, action),
        Command::Vacuum { json } => {
            let report = Cairn::vacuum(&config)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "rewrote {} trees: {} bytes before, {} after",
                    report.trees, report.bytes_before, report.bytes_after
                );
            }
            Ok(())
        }
        Command::Mcp {
            caller,
            destination,
        } => {
            let destination = match destination {
                Some(d) => Some(Destination::parse(&d).with_context(|| {
                    format!("unknown destination {d:?}; use local_model, cloud_model, external_llm, subagent, share_link, task_runtime or user_visible_ui")
                })?),
                None => None,
            };
            let cairn = Cairn::open(config)?;
            let identity = cairn_cli::mcp::Identity {
                workspace: ws_id,
                caller,
                asking: cli.asking.clone(),
                destination,
                read_only: false,
            };
            let served = cairn_cli::mcp::serve_stdio(cairn.clone(), identity);
            cairn.flush()?;
            served
        }
        Command::Serve {
            listen,
            tls_cert,
            tls_key,
        } => {
            if let (Some(cert), Some(key)) = (tls_cert, tls_key) {
                config.server.tls = Some(cairn::TlsConfig { cert, key });
            }
            let listen = listen.unwrap_or_else(|| config.server.listen.clone());
            config.server.listen = listen.clone();
            let cairn = Cairn::open(config)?;
            let served = serve(cairn.clone(), &listen);
            // The decision log's last records, durable before exit.
            cairn.flush()?;
            served
        }
        command => {
            let cairn = Cairn::open(config)?;
            let ran = run_command(&cairn, &ws_id, cli.asking.as_deref(), command);
            cairn.flush()?;
            ran
        }
    }
}

fn loadgen(config: CairnConfig, data_dir: Option<PathBuf>, args: &LoadgenArgs) -> Result<()> {
    use cairn_cli::loadgen::{self, Options, Scenario, Target};
    use std::io::IsTerminal;
    let mut scenario = match &args.scenario {
        Some(path) => Scenario::load(path)?,
        None => Scenario::default(),
    };
    let s = &mut scenario;
    macro_rules! set {
        ($($flag:ident => $field:expr),*) => { $(if let Some(v) = args.$flag { $field = v; })* };
    }
    set!(sessions => s.sessions, work_contexts => s.work_contexts, workspaces => s.workspaces,
        topics => s.topics, rate => s.rate, concurrency => s.concurrency,
        duration => s.duration_secs, max_turns => s.max_turns, seed => s.seed,
        swap_every => s.swap_every_secs);
    if let Some(secs) = args.retry_secs {
        s.retry_secs = secs;
    } else if args.http.len() > 1 {
        s.retry_secs = 30.0;
    }
    let target = match args.http.is_empty() {
        false => Target::Http {
            addrs: args.http.clone(),
            server_pid: args.server_pid,
        },
        true => Target::InProcess {
            config: Box::new(config),
            data_dir,
        },
    };
    let report = loadgen::run(&Options {
        scenario,
        target,
        progress: std::io::stderr().is_terminal(),
    })?;
    let out = &mut std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{report}")?;
    }
    out.flush()?;
    if !report.lossless() {
        bail!(
            "loss accounting failed: {} acknowledged turns lost, {} duplicated",
            report.turns_lost,
            report.turns_duplicated
        );
    }
    Ok(())
}

fn serve(cairn: Cairn, listen: &str) -> Result<()> {
    actix_web::rt::System::new().block_on(async {
        cairn_cli::http::serve(cairn, listen, |at| {
            // The first line on stdout says where we listen (tests read it).
            println!("cairn listening on {at}");
            let _ = std::io::stdout().flush();
        })
        .await
        .with_context(|| format!("serving on {listen}"))
    })
}

fn run_command(cairn: &Cairn, ws_id: &str, asking: Option<&str>, command: Command) -> Result<()> {
    let out = &mut std::io::stdout().lock();
    let cx = &commands::Ctx {
        cairn,
        ws_id,
        asking,
    };
    match command {
        Command::Ingest { file } => sessions::ingest(cx, file, out)?,
        Command::Transcript {
            session,
            from,
            limit,
            json,
        } => sessions::transcript(cx, session, from, limit, json, out)?,
        Command::Sessions { work_context, json } => {
            sessions::sessions(cx, work_context, json, out)?
        }
        Command::Capture { work_context, json } => sessions::capture(cx, work_context, json, out)?,
        Command::Brief {
            work_context,
            write,
            json,
        } => sessions::brief(cx, work_context, write, json, out)?,
        Command::Search(args) => search::search(cx, args, out)?,
        Command::Get { id, json } => search::get(cx, id, json, out)?,
        Command::Stats { json } => search::stats(cx, json, out)?,
        Command::Compact {
            session,
            budget,
            json,
        } => compaction::compact(cx, session, budget, json, out)?,
        Command::Expand {
            summary,
            all,
            from,
            json,
        } => compaction::expand(cx, summary, all, from, json, out)?,
        Command::Assemble(args) => assemble::assemble(cx, args, out)?,
        Command::Subjects { action, json } => entries::subjects(cx, action, json, out)?,
        Command::Pin { entry, remove } => entries::pin(cx, entry, remove, out)?,
        Command::Forget { target, id, reason } => erasure::forget(cx, target, id, reason, out)?,
        Command::Tombstones { json } => erasure::tombstones(cx, json, out)?,
        Command::Tokens { action } => tokens::tokens(cx, action, out)?,
        Command::Log { action, filter } => log_command(cairn, ws_id, asking, action, filter, out)?,
        Command::Maintain(args) => maintain::maintain(cairn, ws_id, args, out)?,
        Command::Reconstruct(args) => maintain::reconstruct(cairn, ws_id, args, out)?,
        Command::Export(args) => export::export(cairn, ws_id, args)?,
        Command::Import(args) => export::import(cairn, ws_id, args, out)?,
        Command::Audit { item, limit, json } => obligations::audit(cx, item, limit, json, out)?,
        Command::Confirmations { grant, json } => obligations::confirmations(cx, grant, json, out)?,
        Command::Demo { .. }
        | Command::Doctor { .. }
        | Command::Mcp { .. }
        | Command::Serve { .. }
        | Command::Eval { .. }
        | Command::Plugins { .. }
        | Command::Topics { .. }
        | Command::Vacuum { .. }
        | Command::Loadgen(_) => {
            bail!("internal: command dispatched twice")
        }
    }
    Ok(())
}

/// Files and sockets cairn creates are its user's only (umask 077): the
/// data directory holds every transcript.
fn private_umask() {
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
}

/// A read shown on the operator's terminal: the memory policy judges it
/// for `user_visible_ui`.
fn on_screen(asking: Option<&str>) -> ReadAs<'_> {
    ReadAs {
        asking,
        destination: Some(Destination::UserVisibleUi),
    }
}

fn log_command(
    cairn: &Cairn,
    ws_id: &str,
    asking: Option<&str>,
    action: Option<LogAction>,
    filter: LogFilter,
    out: &mut impl Write,
) -> Result<()> {
    match action {
        None => {
            let entries = cairn.entries(
                ws_id,
                &EntryFilter {
                    kind: filter.kind,
                    subject: filter.subject,
                    work_context: filter.work_context,
                    session: filter.session,
                    all: filter.all,
                    limit: filter.limit,
                },
                on_screen(asking),
            )?;
            if filter.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&entries)?)?;
            } else {
                for view in &entries {
                    print_entry(out, view)?;
                }
            }
        }
        Some(LogAction::Add {
            kind,
            content,
            detail,
            subject,
            replaces,
            work_context,
            from,
        }) => {
            let mut input = EntryInput::new(kind, &content);
            input.detail = detail;
            input.subject = subject;
            input.replaces = replaces;
            input.work_context = work_context;
            if let Some(spec) = from {
                let (session, range) = spec
                    .rsplit_once(':')
                    .with_context(|| format!("--from {spec:?}: expected SESSION:FROM-TO"))?;
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                let from_seq: u64 = a
                    .parse()
                    .with_context(|| format!("--from {spec:?}: {a:?} is not a turn number"))?;
                let to_seq: u64 = b
                    .parse()
                    .with_context(|| format!("--from {spec:?}: {b:?} is not a turn number"))?;
                input = input.from_turns(session, from_seq, to_seq);
            }
            let entry = cairn.append_entry(ws_id, &input)?;
            writeln!(out, "{}", serde_json::to_string_pretty(&entry)?)?;
        }
        Some(LogAction::History { id }) => {
            for view in cairn.history(ws_id, &id, on_screen(asking))? {
                print_entry(out, &view)?;
            }
        }
    }
    Ok(())
}

/// One turn on one line: `#seq role: content`.
fn print_turn(out: &mut impl Write, turn: &cairn::Turn) -> Result<()> {
    writeln!(
        out,
        "#{} {}: {}",
        turn.seq,
        turn.role.as_str(),
        turn.content
    )?;
    Ok(())
}

/// A capped transcript piece, one turn a line, and whether the cap cut it.
fn print_turns(out: &mut impl Write, t: &cairn::Transcript) -> Result<()> {
    for turn in &t.turns {
        print_turn(out, turn)?;
    }
    if t.truncated {
        writeln!(out, "[truncated at {} tokens]", cairn::TRANSCRIPT_TOKEN_CAP)?;
    }
    Ok(())
}

fn print_entry(out: &mut impl Write, view: &EntryView) -> Result<()> {
    let e = &view.entry;
    let status = match &view.status {
        cairn::EntryStatus::Live => "live".to_owned(),
        cairn::EntryStatus::Replaced { by } => format!("replaced by {by}"),
        cairn::EntryStatus::Expired { at } => format!("expired {}", at.format("%Y-%m-%d")),
        cairn::EntryStatus::Archived { at, run } => {
            format!("archived {} by {run}", at.format("%Y-%m-%d"))
        }
    };
    let subject = view
        .subject
        .as_deref()
        .map(|s| format!(" #{s}"))
        .unwrap_or_default();
    let prov = e
        .provenance
        .as_ref()
        .map(|p| format!(" <- {}:{}-{}", p.session, p.from_seq, p.to_seq))
        .unwrap_or_default();
    writeln!(
        out,
        "{} [{}] {}{} ({status}){prov}",
        e.id, e.kind, e.content, subject
    )?;
    Ok(())
}

fn print_capture(out: &mut impl Write, report: &cairn::CaptureReport) -> Result<()> {
    let spans: Vec<String> = report
        .spans
        .iter()
        .map(|p| format!("{}:{}-{}", p.session, p.from_seq, p.to_seq))
        .collect();
    writeln!(
        out,
        "capture of {} ({}) at {}: {} new entries from turns [{}]",
        report.work_context,
        report.trigger,
        report.at.format("%Y-%m-%d %H:%M"),
        report.entries.len(),
        spans.join(", ")
    )?;
    for e in &report.entries {
        let prov = e
            .provenance
            .as_ref()
            .map(|p| format!(" <- {}:{}-{}", p.session, p.from_seq, p.to_seq))
            .unwrap_or_default();
        let elsewhere = if e.work_context == report.work_context {
            String::new()
        } else {
            format!(" (to {})", e.work_context)
        };
        writeln!(out, "  [{}] {}{elsewhere}{prov}", e.kind, e.content)?;
    }
    for m in &report.merged {
        writeln!(
            out,
            "  merged: [{}] {} <- {}:{} (restates {})",
            m.kind, m.content, m.provenance.session, m.provenance.from_seq, m.into
        )?;
    }
    for s in &report.settled {
        writeln!(
            out,
            "  closed: {} by {} ({}) <- {}:{}",
            s.entry, s.by, s.rule, s.provenance.session, s.provenance.from_seq
        )?;
    }
    Ok(())
}

fn print_block(out: &mut impl Write, block: &AssembledContext, explain: bool) -> Result<()> {
    write!(out, "{}", block.text)?;
    writeln!(
        out,
        "-- {} of {} tokens ({}), destination {}, policy generation {}",
        block.tokens,
        block.budget,
        block.encoding,
        block.destination.as_str(),
        block.policy_generations.join(", ")
    )?;
    if !explain {
        return Ok(());
    }
    let a = &block.activity;
    writeln!(
        out,
        "-- activity: {}{} ({})",
        a.activity_type,
        if a.inherited { ", inherited" } else { "" },
        a.reason
    )?;
    writeln!(out, "-- tiers:")?;
    for t in &block.tiers {
        writeln!(
            out,
            "   tier {} {:<16} {:<7} {:>4}/{:<4} tok  {}",
            t.tier,
            t.tag,
            if t.fired { "in" } else { "out" },
            t.tokens,
            t.cap,
            t.reason
        )?;
    }
    let r = &block.retrieval;
    writeln!(
        out,
        "-- retrieval: {}{}{}, {} candidates for {:?}",
        r.mode,
        if r.lexical_fallback {
            " (lexical fallback: no embedding model)"
        } else {
            ""
        },
        if r.index_catching_up {
            " (index still being built after a start: stored items may be missing)"
        } else {
            ""
        },
        r.candidates,
        r.query.chars().take(60).collect::<String>()
    )?;
    writeln!(out, "-- trace ({} candidates):", block.trace.len())?;
    for item in &block.trace {
        let mark = if item.included { "in " } else { "out" };
        let score = item
            .score
            .map(|s| format!(" score {s:.3}"))
            .unwrap_or_default();
        let policy = item
            .policy
            .as_ref()
            .map(|p| {
                format!(
                    " [policy {}: {}; {}]",
                    p.generation,
                    p.fidelity.as_str(),
                    p.reason_codes.join(",")
                )
            })
            .unwrap_or_default();
        writeln!(
            out,
            "   {mark} {:<16} {:<44} {:>4} tok  {:<22} {}{score}{policy}",
            item.section.as_str(),
            item.source.to_string(),
            item.tokens,
            item.rule,
            item.reason
        )?;
    }
    Ok(())
}

/// Reads JSONL turns. Every line is parsed before anything is written, so a bad
/// line refuses the whole file; errors name the line.
fn read_turns(file: Option<&Path>) -> Result<Vec<TurnInput>> {
    let reader: Box<dyn BufRead> = match file {
        None => Box::new(std::io::stdin().lock()),
        Some(p) if p == Path::new("-") => Box::new(std::io::stdin().lock()),
        Some(p) => Box::new(std::io::BufReader::new(
            std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
        )),
    };
    parse_jsonl(reader)
}

fn parse_jsonl<T: serde::de::DeserializeOwned>(mut reader: impl BufRead) -> Result<Vec<T>> {
    let mut items = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0;
    loop {
        buf.clear();
        if reader
            .read_until(b'\n', &mut buf)
            .context("reading input")?
            == 0
        {
            break;
        }
        line_no += 1;
        let line = std::str::from_utf8(&buf)
            .with_context(|| format!("line {line_no}: not valid UTF-8"))?;
        if line.trim().is_empty() {
            continue;
        }
        items.push(
            serde_json::from_str(line).with_context(|| format!("line {line_no}: invalid turn"))?,
        );
    }
    Ok(items)
}

const DEMO_CONVERSATION: &str = include_str!("../assets/demo-conversation.jsonl");
const DEMO_ENTRIES: &str = include_str!("../assets/demo-entries.jsonl");

fn demo(mut config: CairnConfig, data_dir_given: bool, budget: usize) -> Result<()> {
    let _temp;
    if !data_dir_given {
        let dir = tempfile::tempdir().context("creating a temporary data directory")?;
        config.data_dir = dir.path().to_owned();
        _temp = dir;
    }
    let ws_id = config.workspace.clone();
    // The sample sessions are short: keep 2 raw turns so compaction shows.
    config.compaction.min_tail_turns = 2;
    let out = &mut std::io::stdout().lock();
    writeln!(
        out,
        "== cairn demo: data in {} (workspace {ws_id})",
        config.data_dir.display()
    )?;
    // The demo runs on its own clock: the sample conversation happened in
    // March 2026, and the next morning a new session picks the work up.
    let clock = cairn::ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-03-05T14:30:00Z")?.with_timezone(&chrono::Utc),
    );
    let cairn = Cairn::open_with_clock(config, std::sync::Arc::new(clock.clone()))?;
    let turns: Vec<TurnInput> = parse_jsonl(DEMO_CONVERSATION.as_bytes())?;
    // Idempotency keys make the demo safe to rerun on the same data dir.
    let turns: Vec<TurnInput> = turns
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.with_idempotency_key(&format!("demo-{i}")))
        .collect();
    demo_define_topic(out, &cairn, &ws_id)?;
    let acks = cairn.ingest(&ws_id, &turns)?;
    let fresh = acks.iter().filter(|a| !a.duplicate).count();
    writeln!(
        out,
        "\n== ingested {} turns through the session actors ({fresh} new, durable before acknowledged)",
        acks.len()
    )?;
    for session in cairn.sessions(&ws_id, None, None)? {
        writeln!(
            out,
            "\n-- session {} (work context {}, {} turns)",
            session.id, session.work_context, session.next_seq
        )?;
        for t in cairn.transcript(&ws_id, &session.id, 0, None, on_screen(None))? {
            writeln!(out, "  [{}] {}: {}", t.seq, t.role.as_str(), t.content)?;
        }
    }
    let all = EntryFilter {
        all: true,
        ..Default::default()
    };
    if cairn.entries(&ws_id, &all, on_screen(None))?.is_empty() {
        let entries: Vec<EntryInput> = parse_jsonl(DEMO_ENTRIES.as_bytes())?;
        cairn.append_entries(&ws_id, &entries)?;
    }
    writeln!(
        out,
        "\n== capture (manual trigger through the work-context actors; heuristic extraction)"
    )?;
    for report in cairn.capture(&ws_id, None)? {
        print_capture(out, &report)?;
    }
    writeln!(
        out,
        "\n== memory log (sample entries with provenance; `--all` shows history)"
    )?;
    for view in cairn.entries(&ws_id, &all, on_screen(None))? {
        print_entry(out, &view)?;
    }
    demo_topic_collection(out, &cairn, &ws_id)?;
    writeln!(out, "\n== subjects")?;
    for s in cairn.subjects(&ws_id)? {
        writeln!(out, "  {} ({:?}) \"{}\"", s.slug, s.kind, s.display)?;
    }
    writeln!(
        out,
        "\n== the day's sessions end (hook session_end: each extracted once, with a handoff)"
    )?;
    for session in ["s-0412", "s-0415"] {
        cairn.session_end(&ws_id, session)?;
        clock.advance(chrono::Duration::minutes(1));
    }
    if let Some(handoff) = cairn
        .entries(
            &ws_id,
            &EntryFilter {
                kind: Some(EntryKind::Handoff),
                work_context: Some("launch-plan".to_owned()),
                limit: Some(1),
                ..Default::default()
            },
            None,
        )?
        .first()
    {
        print_entry(out, handoff)?;
    }
    clock.advance(chrono::Duration::hours(18));
    let session = "s-0416";
    cairn.ingest(
        &ws_id,
        &[
            TurnInput::new(session, cairn::Role::User, "Morning! Let's continue.")
                .in_context("launch-plan")
                .with_idempotency_key("demo-next-morning"),
        ],
    )?;
    writeln!(
        out,
        "\n== next morning, 18 hours later: a new session {session} in launch-plan says \"Morning! Let's continue.\""
    )?;
    writeln!(
        out,
        "\n== assembled context for session {session}, budget {budget} tokens"
    )?;
    let mut request = AssembleRequest::new(session, budget);
    request.directives = vec!["Answer in the user's language; be brief.".to_owned()];
    // The demo stays quick and offline: lexical retrieval, no model load.
    request.retrieval = cairn::RetrievalMode::Lexical;
    cairn.catch_up_search()?;
    let block = cairn.assemble(&ws_id, &request)?;
    print_block(out, &block, true)?;
    demo_compaction(out, &cairn, &ws_id)?;
    writeln!(
        out,
        "\n== briefing (`cairn brief`; `cairn brief --write MEMORY.md` puts it between markers)"
    )?;
    write!(
        out,
        "{}",
        cairn.briefing(&ws_id, None, on_screen(None))?.text
    )?;
    Ok(())
}

/// The demo's topic, defined before the conversation arrives so its watcher
/// sees every turn live (kept when the demo reruns on the same data).
const DEMO_TOPIC: &str = "support-load";

fn demo_define_topic(out: &mut impl Write, cairn: &Cairn, ws_id: &str) -> Result<()> {
    use cairn::topics::{Activation, Priority, TopicSpec, Trigger};
    if cairn
        .topics(ws_id)?
        .iter()
        .all(|t| t.spec.name != DEMO_TOPIC)
    {
        let spec = TopicSpec::new(
            DEMO_TOPIC,
            "How much load support can take around the launch: waitlist waves, support capacity",
        )
        .trigger(Trigger::Keyword("waitlist".into()))
        .trigger(Trigger::Keyword("support".into()))
        .activation(Activation::Auto)
        .priority(Priority::High);
        cairn.create_topic(ws_id, &spec)?;
    }
    writeln!(
        out,
        "\n== topic {DEMO_TOPIC} defined (keywords waitlist, support; high priority, auto): its watcher judges every turn"
    )?;
    Ok(())
}

/// What the demo topic collected, and why one turn was collected.
fn demo_topic_collection(out: &mut impl Write, cairn: &Cairn, ws_id: &str) -> Result<()> {
    cairn.flush()?;
    let details = cairn.topic(ws_id, DEMO_TOPIC, 20, on_screen(None))?;
    writeln!(
        out,
        "\n== topic {DEMO_TOPIC} collected {} turn(s) (`cairn topics show {DEMO_TOPIC}`)",
        details.members.len()
    )?;
    let mut members = details.members.clone();
    members.sort_by(|a, b| a.turn.cmp(&b.turn));
    for m in &members {
        writeln!(
            out,
            "  {} (tier {}, score {:.2}): {}",
            m.turn,
            m.tier.number(),
            m.score,
            m.snippet
        )?;
    }
    if let Some(m) = members.first() {
        writeln!(out, "\n== cairn topics why {DEMO_TOPIC} {}", m.turn)?;
        for r in cairn.why(ws_id, DEMO_TOPIC, &m.turn, on_screen(None))? {
            writeln!(
                out,
                "  {:?} at tier {} (score {:.2}, threshold {:.2}); reasons: {}",
                r.outcome,
                r.tier.number(),
                r.score,
                r.threshold,
                r.reasons.join(", ")
            )?;
        }
    }
    Ok(())
}

/// The demo's last part: the first session compacted (a small budget, so
/// the 8-turn sample has something to compact), and a summary expanded back.
fn demo_compaction(out: &mut impl Write, cairn: &Cairn, ws_id: &str) -> Result<()> {
    let session = "s-0412";
    let report = cairn.compact(ws_id, session, Some(60))?;
    writeln!(
        out,
        "\n== compaction of {session} to 60 tokens: {} -> {} tokens, kept tail from turn {} (the record is unchanged)",
        report.tokens_before, report.tokens_after, report.tail_from
    )?;
    let mut first = None;
    for cover in &report.view.items {
        match cover {
            cairn::Cover::Summary { id } => {
                let e = cairn.memory_expand(ws_id, id, on_screen(None))?;
                writeln!(
                    out,
                    "  {id} (level {}, {}, turns {}-{}):\n{}",
                    e.node.level,
                    e.node.method.as_str(),
                    e.node.from_seq,
                    e.node.to_seq,
                    e.node.text
                )?;
                first.get_or_insert(id.clone());
            }
            cairn::Cover::Turns { from, to } => writeln!(out, "  turns {from}-{to} (kept raw)")?,
        }
    }
    if let Some(id) = first {
        writeln!(out, "\n== cairn expand {id} --all: the exact originals")?;
        for t in cairn.expand_all(ws_id, &id, 0, on_screen(None))?.turns {
            writeln!(out, "  [{}] {}: {}", t.seq, t.role.as_str(), t.content)?;
        }
    }
    Ok(())
}

/// Loads the embedding model configured or found in the set-up script's
/// cache (`CairnConfig::load` fills the paths), or says clearly
/// why there is none (search then falls back to lexical results, flagged).
fn load_embedder(
    embedding: &cairn::EmbeddingConfig,
) -> Option<std::sync::Arc<dyn cairn::search::Embedder>> {
    use cairn::search::{EmbedConfig, FastEmbedder};
    if !embedding.is_set() {
        eprintln!(
            "warning: no embedding model configured (CAIRN_EMBEDDING__MODEL_DIR / CAIRN_EMBEDDING__ORT_DYLIB) \
             or installed by scripts/setup-embeddings.sh (see `cairn doctor`). Vector search is off: \
             results are lexical and flagged."
        );
        return None;
    }
    let config = EmbedConfig::new(&embedding.model_dir, &embedding.ort_dylib);
    match FastEmbedder::load(&config) {
        Ok(e) => Some(std::sync::Arc::new(e)),
        Err(err) => {
            eprintln!("warning: {err}. Vector search is off: results are lexical and flagged.");
            None
        }
    }
}

/// The `--facts` table: one row per conversation, then all pooled.
fn print_facts(out: &mut impl Write, report: &cairn_cli::eval::FactsReport) -> anyhow::Result<()> {
    writeln!(
        out,
        "fact capture against annotated observations (same fact: cosine >= {:.2}); extractors: {}",
        report.threshold,
        report.extractors.join(", ")
    )?;
    writeln!(
        out,
        "{:<14} {:>6} {:>7} {:>7} {:>6} {:>6} {:>9} {:>11} {:>5} {:>5}",
        "conversation",
        "obs",
        "recall",
        "entries",
        "facts",
        "match",
        "precision",
        "prec+work",
        "dups",
        "stale"
    )?;
    let rows = report
        .conversations
        .iter()
        .map(|(n, s)| (n.as_str(), s))
        .chain(std::iter::once(("all", &report.overall)));
    for (name, s) in rows {
        writeln!(
            out,
            "{:<14} {:>6} {:>7.3} {:>7} {:>6} {:>6} {:>9.3} {:>11.3} {:>5} {:>5}",
            name,
            s.observations,
            s.recall,
            s.entries,
            s.facts,
            s.matching,
            s.precision,
            s.precision_with_work_state,
            s.duplicates,
            s.stale
        )?;
    }
    Ok(())
}

fn eval_locomo(config: &CairnConfig, command: &EvalCommand) -> Result<()> {
    let EvalCommand::Locomo {
        data,
        k,
        json,
        loo,
        set,
        ranks,
        entries,
        significance,
        facts,
        fact_threshold,
    } = command;
    let mut tuning = cairn_cli::eval::Tuning::default();
    for s in set {
        tuning.set(s).map_err(|e| anyhow::anyhow!("--set: {e}"))?;
    }
    let k = *k;
    let significance = match significance {
        Some(path) => {
            let wasm = std::fs::read(path)
                .with_context(|| format!("reading the significance gate {}", path.display()))?;
            let name = path.file_stem().map_or_else(
                || "eval-gate".to_owned(),
                |s| s.to_string_lossy().into_owned(),
            );
            Some((name, wasm))
        }
        None => None,
    };
    if significance.is_some() && !*entries && !*facts {
        anyhow::bail!("--significance needs --entries or --facts");
    }
    let source = (*entries || *facts).then(|| cairn_cli::eval::EntrySource {
        config: config.clone(),
        significance,
    });
    let embedder = load_embedder(&config.embedding);
    if let (true, Some(source)) = (*facts, source.as_ref()) {
        let passes = cairn_cli::eval::run_facts_passes(
            data,
            embedder,
            source,
            *fact_threshold,
            ranks.as_deref(),
        )?;
        let mut out = std::io::stdout().lock();
        match (*json, passes.as_slice()) {
            (true, [report]) => serde_json::to_writer_pretty(&mut out, report)?,
            (true, [heuristic, with_model]) => serde_json::to_writer_pretty(
                &mut out,
                &serde_json::json!({ "heuristic": heuristic, "with_model": with_model }),
            )?,
            _ => {
                for (i, report) in passes.iter().enumerate() {
                    if i > 0 {
                        writeln!(out)?;
                    }
                    print_facts(&mut out, report)?;
                }
            }
        }
        if *json {
            writeln!(out)?;
        }
        return Ok(());
    }
    let report = cairn_cli::eval::run_locomo(
        data,
        k,
        embedder,
        *loo,
        &tuning,
        ranks.as_deref(),
        source.as_ref(),
    )?;
    let mut out = std::io::stdout().lock();
    if *json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{} questions, {} turns, indexing {:.0} turns/s",
        report.questions, report.turns, report.index_turns_per_sec
    )?;
    if let Some(e) = &report.entries {
        let kinds: Vec<String> = e.by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(
            out,
            "entries: {} indexed beside the turns ({}), citing {:.1} turns each; extractors: {}",
            e.indexed,
            kinds.join(", "),
            e.mean_cited_turns(),
            e.extractors.join(", ")
        )?;
        for error in &e.extractor_errors {
            writeln!(out, "  model pass failed (heuristic items kept): {error}")?;
        }
    }
    writeln!(
        out,
        "{:<11} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>28} {:>6} {:>6} {:>9} {:>9}",
        "mode",
        "R@1",
        "R@5",
        "R@10",
        "R@20",
        "H@10",
        "MRR",
        "nDCG10",
        format!("R@{k}"),
        "R@10 by category 1/2/3/4",
        "S@5",
        "S@10",
        "p50 ms",
        "p99 ms"
    )?;
    for (name, m) in &report.modes {
        let cats: Vec<String> = m
            .recall_10_by_category
            .values()
            .map(|v| format!("{v:.3}"))
            .collect();
        writeln!(
            out,
            "{:<11} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>7.3} {:>28} {:>6.3} {:>6.3} {:>9.2} {:>9.2}{}",
            name,
            m.recall_1,
            m.recall_5,
            m.recall_10,
            m.recall_20,
            m.hit_10,
            m.mrr,
            m.ndcg_10,
            m.recall_k,
            cats.join("/"),
            m.session_recall_5,
            m.session_recall_10,
            m.latency_p50_ms,
            m.latency_p99_ms,
            if m.lexical_fallback {
                "  (lexical fallback)"
            } else {
                ""
            }
        )?;
    }
    writeln!(out, "\nper conversation, recall@10 / MRR / nDCG@10:")?;
    for (name, c) in &report.conversations {
        let cell = |mode: &str| {
            c.modes.get(mode).map_or_else(String::new, |m| {
                format!("{:.3}/{:.3}/{:.3}", m.recall_10, m.mrr, m.ndcg_10)
            })
        };
        writeln!(
            out,
            "  {name:<14} {:>4} q  bm25 {}  dense {}  hybrid {}",
            c.questions,
            cell("bm25"),
            cell("dense"),
            cell("hybrid")
        )?;
    }
    if let Some(loo) = &report.loo {
        writeln!(
            out,
            "\nleave-one-conversation-out (hybrid, {} parameter sets; chosen on the others):",
            loo.grid_size
        )?;
        for f in &loo.folds {
            let cats: Vec<String> = f
                .held_out_by_category
                .iter()
                .map(|(c, v)| format!("{c}:{v:.3}"))
                .collect();
            writeln!(
                out,
                "  held out {:<14} R@10 {:.3} MRR {:.3} nDCG@10 {:.3} (train {:.3}; shipped recipe {:.3})  [{}]  chose w={} smooth={} session={} speaker={}",
                f.held_out,
                f.held_out_recall_10,
                f.held_out_mrr,
                f.held_out_ndcg_10,
                f.train_recall_10,
                f.shipped_recall_10,
                cats.join(" "),
                f.chosen.lexical_weight,
                f.chosen.smoothing,
                f.chosen.session_boost,
                f.chosen.speaker_boost
            )?;
        }
        writeln!(
            out,
            "  held-out R@10 {:.3}, worst fold {:.3}",
            loo.held_out_recall_10, loo.worst_fold_recall_10
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::error_text;

    #[test]
    fn error_text_names_each_cause_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        // A cause the message does not quote is added.
        let wrapped = anyhow::Error::new(io()).context("reading /data");
        assert_eq!(error_text(&wrapped), "reading /data: no such file");
        // A cause the message already quotes is not repeated.
        let quoted = anyhow::Error::new(cairn_cli::eval::EvalError::Io {
            path: "/data".into(),
            source: io(),
        });
        assert_eq!(error_text(&quoted), "reading /data: no such file");
    }
}
