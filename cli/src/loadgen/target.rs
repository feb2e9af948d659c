//! What the loadgen drives: the runtime in this process, or a running
//! `cairn serve` over HTTP. Both answer the same calls, so the driver does
//! not know which one it talks to.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cairn::topics::TopicSpec;
use cairn::worlds::defaults;
use cairn::{
    AssembleRequest, Cairn, CairnConfig, CairnError, Clock, ErrorKind, PolicyGenerationId,
    RetrievalMode, SessionSpec, SubjectKind, TurnInput, WorldKind,
};
use chrono::{DateTime, Utc};
use serde_json::json;

use super::LoadgenError;

/// A call that did not succeed.
#[derive(Debug)]
pub(crate) struct CallError {
    /// Worth retrying (backpressure, a timeout, a 503).
    pub(crate) retryable: bool,
    pub(crate) message: String,
}

/// How the loadgen's ledger names an acknowledged turn: the first 8 bytes of
/// the blake3 of its content ([`content_hash`]), 16 bytes a turn with its
/// seq (see [`super::ledger`]). Turns are only compared within one session,
/// where two of a few hundred turns share 64 bits with odds below 10^-14.
pub(crate) type ContentHash = u64;

/// The [`ContentHash`] of a turn's content.
pub(crate) fn content_hash(hash: &blake3::Hash) -> ContentHash {
    let bytes = hash.as_bytes();
    u64::from_le_bytes([
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
    ])
}

/// One stored turn as read back: its seq and the blake3 of its content
/// (recomputed from the content, and checked against the stored hash:
/// `None` when they disagree, which matches no acknowledged turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredTurn {
    pub(crate) seq: u64,
    pub(crate) hash: Option<ContentHash>,
}

/// What a plugin swap did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SwapOutcome {
    Swapped,
    /// The target cannot swap (an HTTP server without the route): say so
    /// once and stop trying.
    Unsupported(String),
    Failed(String),
}

/// What the topic watchers did during a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TopicTally {
    pub(crate) decisions: u64,
    pub(crate) collected: u64,
    pub(crate) proposals: u64,
    /// Tier-3 answers that were fail-safes after a plugin fault.
    pub(crate) faults: u64,
}

/// The built-in plugin of a world (what a swap installs again).
fn default_plugin(world: WorldKind) -> defaults::BuiltinPlugin {
    match world {
        WorldKind::TopicDirective => defaults::TOPIC,
        WorldKind::MemoryPolicy => defaults::MEMORY_POLICY,
        // The significance gate, and any world added later.
        _ => defaults::SIGNIFICANCE,
    }
}

pub(crate) trait Target: Send + Sync {
    /// Registers the topics as subjects in a workspace.
    fn add_topics(&self, workspace: &str, topics: &[String]) -> Result<(), LoadgenError>;
    /// Defines topic watchers in a workspace (kept when they exist).
    fn define_topics(&self, workspace: &str, specs: &[TopicSpec]) -> Result<(), LoadgenError>;
    /// What the watchers of these workspaces decided, once they are done
    /// (`None` where the target does not say).
    fn topic_tally(&self, workspaces: &[String]) -> Option<TopicTally>;
    fn bootstrap(&self, workspace: &str, spec: &SessionSpec) -> Result<(), CallError>;
    fn ingest(&self, workspace: &str, turn: &TurnInput) -> Result<u64, CallError>;
    fn assemble(&self, workspace: &str, session: &str, budget: usize) -> Result<(), CallError>;
    fn session_end(&self, workspace: &str, session: &str) -> Result<(), CallError>;
    /// Installs the world's default plugin again: a new generation,
    /// swapped in while the sessions keep going.
    fn swap(&self, world: WorldKind) -> SwapOutcome;
    /// Evaluates time triggers where the target lets us (in process);
    /// returns the captures that fired, or `None` when the target runs its
    /// own ticker.
    fn tick(&self) -> Option<u64>;
    /// `(decisions, faults)` where the target lets us count them.
    fn decisions(&self) -> Option<(u64, u64)>;
    /// Every stored turn of a session, in seq order.
    fn read_back(&self, workspace: &str, session: &str) -> Result<Vec<StoredTurn>, LoadgenError>;
}

fn stored(turns: Vec<cairn::Turn>) -> Vec<StoredTurn> {
    turns
        .into_iter()
        .map(|t| {
            let hash = blake3::hash(t.content.as_bytes());
            // A stored hash that disagrees with the content is corruption:
            // no hash, which matches nothing, so the turn counts as lost.
            let hash = (hash.to_hex().as_str() == t.content_hash).then(|| content_hash(&hash));
            StoredTurn { seq: t.seq, hash }
        })
        .collect()
}

/// A clock that runs `scale` times faster than the wall clock, from now.
#[derive(Debug)]
pub(crate) struct ScaledClock {
    start_wall: DateTime<Utc>,
    start: Instant,
    scale: f64,
}

impl ScaledClock {
    pub(crate) fn new(scale: f64) -> ScaledClock {
        ScaledClock {
            start_wall: Utc::now(),
            start: Instant::now(),
            scale,
        }
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> DateTime<Utc> {
        let micros = (self.start.elapsed().as_secs_f64() * self.scale * 1e6) as i64;
        self.start_wall + chrono::Duration::microseconds(micros)
    }
}

/// The runtime in this process, with its WebAssembly significance gate
/// (the runtime's own: `Cairn::policies`).
pub(crate) struct InProcess {
    cairn: Cairn,
    /// Every significance generation that served during the run, to count
    /// their decisions in the durable decision log at the end.
    generations: parking_lot::Mutex<Vec<PolicyGenerationId>>,
    /// The topic-directive generations of the run, for its fault count.
    topic_generations: parking_lot::Mutex<Vec<PolicyGenerationId>>,
    /// Kept alive for the run when the loadgen made the data dir.
    _temp: Option<tempfile::TempDir>,
}

impl InProcess {
    /// Opens cairn on `data_dir` (a fresh temporary folder when `None`).
    pub(crate) fn open(
        mut config: CairnConfig,
        data_dir: Option<PathBuf>,
        time_scale: f64,
    ) -> Result<InProcess, LoadgenError> {
        let temp = match data_dir {
            Some(dir) => {
                config.data_dir = dir;
                None
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("cairn-loadgen-")
                    .tempdir()
                    .map_err(|e| LoadgenError::Setup(format!("temporary data dir: {e}")))?;
                config.data_dir = temp.path().to_owned();
                Some(temp)
            }
        };
        // The driver ticks once a second itself and counts the captures.
        config.actors.tick_interval_secs = 0;
        let clock = Arc::new(ScaledClock::new(time_scale));
        let cairn = Cairn::open_with_clock(config, clock)?;
        let serving = cairn.plugin_generation(WorldKind::SignificanceGate)?;
        let topic_serving = cairn.plugin_generation(WorldKind::TopicDirective)?;
        Ok(InProcess {
            cairn,
            generations: parking_lot::Mutex::new(vec![serving]),
            topic_generations: parking_lot::Mutex::new(vec![topic_serving]),
            _temp: temp,
        })
    }

    /// Where the store lives.
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.cairn.config().data_dir.clone()
    }
}

fn call_error(e: CairnError) -> CallError {
    CallError {
        retryable: e.is_retryable(),
        message: format!("{}: {e}", e.code()),
    }
}

impl Target for InProcess {
    fn add_topics(&self, workspace: &str, topics: &[String]) -> Result<(), LoadgenError> {
        for topic in topics {
            match self
                .cairn
                .add_subject(workspace, topic, SubjectKind::Topic, None)
            {
                Ok(_) => {}
                // Registered by an earlier run on the same data dir.
                Err(e) if e.kind() == ErrorKind::Conflict => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn bootstrap(&self, workspace: &str, spec: &SessionSpec) -> Result<(), CallError> {
        self.cairn.bootstrap(workspace, spec).map_err(call_error)?;
        Ok(())
    }

    fn ingest(&self, workspace: &str, turn: &TurnInput) -> Result<u64, CallError> {
        let acks = self
            .cairn
            .ingest(workspace, std::slice::from_ref(turn))
            .map_err(call_error)?;
        acks.first().map(|a| a.seq).ok_or_else(|| CallError {
            retryable: false,
            message: "ingest answered no acknowledgement".to_owned(),
        })
    }

    fn assemble(&self, workspace: &str, session: &str, budget: usize) -> Result<(), CallError> {
        // Retrieval off: the loadgen measures the ingest, actor, policy and
        // composition path without the embedding model (the RSS
        // target excludes it); retrieval has its own benches.
        let mut request = AssembleRequest::new(session, budget);
        request.retrieval = RetrievalMode::Off;
        self.cairn
            .assemble(workspace, &request)
            .map_err(call_error)?;
        Ok(())
    }

    fn session_end(&self, workspace: &str, session: &str) -> Result<(), CallError> {
        self.cairn
            .session_end(workspace, session)
            .map_err(call_error)?;
        Ok(())
    }

    fn swap(&self, world: WorldKind) -> SwapOutcome {
        // The default plugin installed again, as an operator would: a new
        // generation (the compile cache makes preparing it cheap), swapped
        // in atomically while the sessions keep deciding.
        let plugin = default_plugin(world);
        let installed = self.cairn.install_plugin(world, plugin.name, plugin.wasm);
        match installed {
            Ok(report) => {
                match world {
                    WorldKind::TopicDirective => self.topic_generations.lock(),
                    _ => self.generations.lock(),
                }
                .push(report.generation);
                SwapOutcome::Swapped
            }
            Err(e) => SwapOutcome::Failed(e.to_string()),
        }
    }

    fn define_topics(&self, workspace: &str, specs: &[TopicSpec]) -> Result<(), LoadgenError> {
        for spec in specs {
            match self.cairn.create_topic(workspace, spec) {
                Ok(_) => {}
                // Defined by an earlier run on the same data dir.
                Err(e) if e.kind() == ErrorKind::Conflict => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn topic_tally(&self, workspaces: &[String]) -> Option<TopicTally> {
        // The watchers judge after the acknowledgement: wait for them.
        if let Err(e) = self.cairn.flush() {
            tracing::warn!(error = %e, "waiting for the topic watchers failed");
            return None;
        }
        let mut tally = TopicTally::default();
        for ws in workspaces {
            match self.cairn.topic_counts(ws) {
                Ok(c) => {
                    tally.decisions += c.decisions;
                    tally.collected += c.collected;
                    tally.proposals += c.proposals;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(error = %e, "counting topic decisions failed");
                    return None;
                }
            }
        }
        for generation in self.topic_generations.lock().iter() {
            match self.cairn.generation_counts(generation.as_str()) {
                Ok(counts) => tally.faults += counts.faults,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the topic decision counters failed");
                    return None;
                }
            }
        }
        Some(tally)
    }

    fn tick(&self) -> Option<u64> {
        match self.cairn.tick() {
            Ok(reports) => Some(reports.len() as u64),
            Err(e) => {
                tracing::warn!(error = %e, "tick failed");
                Some(0)
            }
        }
    }

    fn decisions(&self) -> Option<(u64, u64)> {
        let mut total = (0, 0);
        for generation in self.generations.lock().iter() {
            match self.cairn.generation_counts(generation.as_str()) {
                Ok(counts) => {
                    total.0 += counts.decisions;
                    total.1 += counts.faults;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading the decision log's counters failed");
                    return None;
                }
            }
        }
        Some(total)
    }

    fn read_back(&self, workspace: &str, session: &str) -> Result<Vec<StoredTurn>, LoadgenError> {
        // From the durable record (the facade's transcript read), not
        // through the actors.
        let turns = self.cairn.transcript(
            workspace,
            session,
            0,
            None,
            cairn::ReadAs::user().to(cairn::Destination::UserVisibleUi),
        )?;
        Ok(stored(turns))
    }
}

/// A generation id and the `(decisions, faults)` it had counted when the
/// run began.
type Baseline = (String, (u64, u64));

/// A node that did not answer is passed over this long.
const DOWN_FOR: Duration = Duration::from_secs(1);

/// One or several running `cairn serve` nodes (of one cluster: any node
/// answers for any workspace). Calls go round the nodes; a node that does
/// not answer is passed over for a moment and the call goes to the next,
/// so a run survives a node's death.
pub(crate) struct Http {
    bases: Vec<String>,
    /// The next node to ask.
    next: std::sync::atomic::AtomicUsize,
    /// Per node: passed over until then.
    down: parking_lot::Mutex<Vec<Option<Instant>>>,
    /// Calls that went to another node because one did not answer.
    failovers: std::sync::atomic::AtomicU64,
    /// Node id → index in `bases` (from each node's `GET /v1/cluster`).
    node_ids: std::collections::HashMap<String, usize>,
    /// Workspace → the node that last served it (`x-cairn-node`): its
    /// calls go there first, saving the forwarding hop.
    affinity: parking_lot::Mutex<std::collections::HashMap<String, usize>>,
    agent: ureq::Agent,
    swap_unsupported: AtomicBool,
    /// Every significance generation that served during the run, with the
    /// `(decisions, faults)` the server's log had counted for it when the
    /// run began; `None` when the server does not report counts.
    generations: parking_lot::Mutex<Option<Vec<Baseline>>>,
}

impl Http {
    /// Checks that every address (`host:port`) answers `/healthz`.
    pub(crate) fn connect(addrs: &[String], concurrency: usize) -> Result<Http, LoadgenError> {
        if addrs.is_empty() {
            return Err(LoadgenError::Setup("no --http address".to_owned()));
        }
        let bases: Vec<String> = addrs
            .iter()
            .map(|addr| {
                if addr.starts_with("http://") || addr.starts_with("https://") {
                    addr.trim_end_matches('/').to_owned()
                } else {
                    format!("http://{}", addr.trim_end_matches('/'))
                }
            })
            .collect();
        let limit = Duration::from_secs(60);
        let agent: ureq::Agent =
            crate::client::phase_timeouts(ureq::Agent::config_builder(), limit)
                .http_status_as_error(false)
                .max_idle_connections(concurrency.max(1) * 2)
                .max_idle_connections_per_host(concurrency.max(1) * 2)
                .build()
                .into();
        let mut node_ids = std::collections::HashMap::new();
        for (i, base) in bases.iter().enumerate() {
            // A cluster node says its id; a lone server answers
            // `{"clustered": false}` (an older one, 404): no affinity then.
            if let Ok(status) = Http::answer(agent.get(format!("{base}/v1/cluster")).call())
                && let Some(node) = status["node"].as_str()
            {
                node_ids.insert(node.to_owned(), i);
            }
        }
        let http = Http {
            down: parking_lot::Mutex::new(vec![None; bases.len()]),
            bases,
            next: std::sync::atomic::AtomicUsize::new(0),
            failovers: std::sync::atomic::AtomicU64::new(0),
            node_ids,
            affinity: parking_lot::Mutex::new(std::collections::HashMap::new()),
            agent,
            swap_unsupported: AtomicBool::new(false),
            generations: parking_lot::Mutex::new(None),
        };
        for base in &http.bases {
            Http::answer(http.agent.get(format!("{base}/healthz")).call()).map_err(|e| {
                LoadgenError::Setup(format!(
                    "cairn serve at {base} does not answer: {}",
                    e.message
                ))
            })?;
        }
        match http.serving_significance() {
            Ok(serving) => *http.generations.lock() = Some(vec![serving]),
            Err(e) => {
                tracing::warn!(error = %e.message, "the server does not report decision counts")
            }
        }
        Ok(http)
    }

    /// The significance generation serving now and its counts so far.
    fn serving_significance(&self) -> Result<Baseline, CallError> {
        let list = self.get("/v1/plugins")?;
        let generation = list["plugins"]
            .as_array()
            .and_then(|all| {
                all.iter()
                    .find(|p| p["world"] == WorldKind::SignificanceGate.as_str())
            })
            .and_then(|p| p["generation"].as_str())
            .ok_or_else(|| CallError {
                retryable: false,
                message: format!("GET /v1/plugins: no significance-gate generation in {list}"),
            })?
            .to_owned();
        let counts = self.generation_counts(&generation)?;
        Ok((generation, counts))
    }

    /// `(decisions, faults)` the server's decision log counted for `generation`.
    fn generation_counts(&self, generation: &str) -> Result<(u64, u64), CallError> {
        let path = format!("/v1/plugins/generations/{}", seg(generation));
        let body = self.get(&path)?;
        match (body["decisions"].as_u64(), body["faults"].as_u64()) {
            (Some(decisions), Some(faults)) => Ok((decisions, faults)),
            _ => Err(CallError {
                retryable: false,
                message: format!("GET {path}: unexpected answer: {body}"),
            }),
        }
    }

    /// Calls that went to another node because one did not answer.
    pub(crate) fn failovers(&self) -> u64 {
        self.failovers.load(Ordering::Relaxed)
    }

    /// Sends the request for `path` with `send` (given the node's base URL)
    /// to the node that last served its workspace, else to the next node
    /// in turn, passing over nodes marked down; on a transport error, marks
    /// that node down and tries the next, each node at most once.
    fn call(
        &self,
        path: &str,
        send: impl Fn(&str) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let n = self.bases.len();
        let workspace = path
            .strip_prefix("/v1/workspaces/")
            .and_then(|rest| rest.split('/').next())
            .filter(|_| !self.node_ids.is_empty());
        let start = workspace
            .and_then(|ws| self.affinity.lock().get(ws).copied())
            .unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed));
        let now = Instant::now();
        let order: Vec<usize> = {
            let down = self.down.lock();
            let mut up: Vec<usize> = (0..n)
                .map(|k| (start + k) % n)
                .filter(|&i| down[i].is_none_or(|until| until <= now))
                .collect();
            if up.is_empty() {
                // Everyone is down: ask them all anyway.
                up = (0..n).map(|k| (start + k) % n).collect();
            }
            up
        };
        let mut last = None;
        for (tried, i) in order.into_iter().enumerate() {
            if tried > 0 {
                self.failovers.fetch_add(1, Ordering::Relaxed);
            }
            match send(&self.bases[i]) {
                Err(e) if transport(&e) => {
                    self.down.lock()[i] = Some(Instant::now() + DOWN_FOR);
                    last = Some(e);
                }
                Ok(resp) => {
                    let served = resp
                        .headers()
                        .get("x-cairn-node")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|node| self.node_ids.get(node));
                    if let (Some(ws), Some(&node)) = (workspace, served) {
                        self.affinity.lock().insert(ws.to_owned(), node);
                    }
                    return Ok(resp);
                }
                answer => return answer,
            }
        }
        Err(last.unwrap_or(ureq::Error::ConnectionFailed))
    }

    fn answer(
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<serde_json::Value, CallError> {
        Http::answer_as(result)
    }

    /// The answer's body read as `T` when the status is 2xx, else the error
    /// it carries. A `T` that names only the fields it needs lets serde skip
    /// the rest without building it: the loadgen shares the server's cores,
    /// and an assembly's answer is ~30 KB of block, items and trace.
    fn answer_as<T: serde::de::DeserializeOwned>(
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, CallError> {
        let mut resp = result.map_err(|e| CallError {
            retryable: true,
            message: format!("transport: {e}"),
        })?;
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_string().map_err(|e| CallError {
            retryable: false,
            message: format!("HTTP {status}: unreadable body: {e}"),
        })?;
        if (200..300).contains(&status) {
            serde_json::from_str(&body).map_err(|e| CallError {
                retryable: false,
                message: format!("HTTP {status}: unexpected body: {e}"),
            })
        } else {
            Err(CallError {
                retryable: status == 503 || status == 429,
                message: format!("HTTP {status}: {body}"),
            })
        }
    }

    fn get(&self, path: &str) -> Result<serde_json::Value, CallError> {
        Http::answer(self.call(path, |base| self.agent.get(format!("{base}{path}")).call()))
    }

    fn post(&self, path: &str, body: &serde_json::Value) -> Result<serde_json::Value, CallError> {
        self.post_as(path, body)
    }

    fn post_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T, CallError> {
        Http::answer_as(self.call(path, |base| {
            self.agent.post(format!("{base}{path}")).send_json(body)
        }))
    }
}

/// True for an error that says the node did not answer (refused, reset,
/// timed out), as opposed to an answer.
fn transport(e: &ureq::Error) -> bool {
    matches!(
        e,
        ureq::Error::Io(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::Timeout(_)
            | ureq::Error::HostNotFound
            | ureq::Error::Protocol(_)
    )
}

/// Percent-encodes a path segment (ids are checked by the server; this only
/// keeps the URL well formed).
fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Target for Http {
    fn add_topics(&self, workspace: &str, topics: &[String]) -> Result<(), LoadgenError> {
        for topic in topics {
            let path = format!("/v1/workspaces/{}/subjects", seg(workspace));
            match self.post(&path, &json!({ "slug": topic, "kind": "topic" })) {
                Ok(_) => {}
                // Already registered by an earlier run on the same server.
                Err(e) if e.message.starts_with("HTTP 409") => {}
                Err(e) => {
                    return Err(LoadgenError::Setup(format!(
                        "registering topic {topic:?}: {}",
                        e.message
                    )));
                }
            }
        }
        Ok(())
    }

    fn bootstrap(&self, workspace: &str, spec: &SessionSpec) -> Result<(), CallError> {
        let body = serde_json::to_value(spec).map_err(|e| CallError {
            retryable: false,
            message: e.to_string(),
        })?;
        self.post(
            &format!("/v1/workspaces/{}/sessions", seg(workspace)),
            &body,
        )?;
        Ok(())
    }

    fn ingest(&self, workspace: &str, turn: &TurnInput) -> Result<u64, CallError> {
        #[derive(serde::Deserialize)]
        struct Acks {
            acks: Vec<Acked>,
        }
        #[derive(serde::Deserialize)]
        struct Acked {
            seq: u64,
        }
        let body = json!({ "turns": [turn] });
        let reply: Acks =
            self.post_as(&format!("/v1/workspaces/{}/turns", seg(workspace)), &body)?;
        reply.acks.first().map(|a| a.seq).ok_or_else(|| CallError {
            retryable: false,
            message: "ingest answered no acknowledgement".to_owned(),
        })
    }

    fn assemble(&self, workspace: &str, session: &str, budget: usize) -> Result<(), CallError> {
        /// What the loadgen reads of an assembly: its size against the
        /// budget. The block and its items are checked as JSON and skipped.
        #[derive(serde::Deserialize)]
        struct Assembled {
            tokens: usize,
            budget: usize,
        }
        // As a gateway on its hot path asks: the block without the
        // candidates' account (the decisions are in the log either way).
        let body = json!({
            "session": session,
            "budget_tokens": budget,
            "retrieval": "off",
            "trace": false,
        });
        let answer: Assembled = self.post_as(
            &format!("/v1/workspaces/{}/assemble", seg(workspace)),
            &body,
        )?;
        if answer.tokens > answer.budget {
            return Err(CallError {
                retryable: false,
                message: format!(
                    "assemble answered {} tokens for a budget of {}",
                    answer.tokens, answer.budget
                ),
            });
        }
        Ok(())
    }

    fn session_end(&self, workspace: &str, session: &str) -> Result<(), CallError> {
        let path = format!(
            "/v1/workspaces/{}/sessions/{}/end",
            seg(workspace),
            seg(session)
        );
        self.post(&path, &json!({}))?;
        Ok(())
    }

    fn swap(&self, world: WorldKind) -> SwapOutcome {
        if self.swap_unsupported.load(Ordering::Relaxed) {
            return SwapOutcome::Unsupported(String::new());
        }
        let path = format!("/v1/plugins/{}", world.as_str());
        let result = self.call(&path, |base| {
            self.agent
                .put(format!("{base}{path}"))
                .header("content-type", "application/wasm")
                .send(default_plugin(world).wasm)
        });
        match result {
            // Only the significance gate's decisions are counted over HTTP.
            Ok(resp) if resp.status().is_success() && world != WorldKind::SignificanceGate => {
                SwapOutcome::Swapped
            }
            Ok(mut resp) if resp.status().is_success() => {
                // Count the new generation's decisions too; an answer
                // without its id leaves the run's counts unknown.
                let generation = resp
                    .body_mut()
                    .read_json::<serde_json::Value>()
                    .ok()
                    .and_then(|r| r["generation"].as_str().map(str::to_owned));
                let mut generations = self.generations.lock();
                match (generations.as_mut(), generation) {
                    (Some(all), Some(g)) => all.push((g, (0, 0))),
                    _ => *generations = None,
                }
                SwapOutcome::Swapped
            }
            Ok(resp) if resp.status().as_u16() == 404 || resp.status().as_u16() == 405 => {
                self.swap_unsupported.store(true, Ordering::Relaxed);
                SwapOutcome::Unsupported(format!(
                    "the server answers {} to PUT {path}: it has no plugin hot-swap route",
                    resp.status().as_u16()
                ))
            }
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let body = resp.body_mut().read_to_string().unwrap_or_default();
                SwapOutcome::Failed(format!("PUT {path}: HTTP {status}: {body}"))
            }
            Err(e) => SwapOutcome::Failed(format!("PUT {path}: {e}")),
        }
    }

    fn tick(&self) -> Option<u64> {
        None
    }

    fn define_topics(&self, workspace: &str, specs: &[TopicSpec]) -> Result<(), LoadgenError> {
        let path = format!("/v1/workspaces/{}/topics", seg(workspace));
        for spec in specs {
            let body = serde_json::to_value(spec)
                .map_err(|e| LoadgenError::Setup(format!("topic {}: {e}", spec.name)))?;
            match self.post(&path, &body) {
                Ok(_) => {}
                // Defined by an earlier run on the same server.
                Err(e) if e.message.starts_with("HTTP 409") => {}
                Err(e) => {
                    return Err(LoadgenError::Setup(format!(
                        "defining topic {:?}: {}",
                        spec.name, e.message
                    )));
                }
            }
        }
        Ok(())
    }

    fn topic_tally(&self, _workspaces: &[String]) -> Option<TopicTally> {
        None
    }

    fn decisions(&self) -> Option<(u64, u64)> {
        let generations = self.generations.lock();
        let mut total = (0, 0);
        for (generation, before) in generations.as_ref()? {
            match self.generation_counts(generation) {
                Ok(now) => {
                    total.0 += now.0.saturating_sub(before.0);
                    total.1 += now.1.saturating_sub(before.1);
                }
                Err(e) => {
                    tracing::warn!(error = %e.message, "reading the server's decision counts failed");
                    return None;
                }
            }
        }
        Some(total)
    }

    fn read_back(&self, workspace: &str, session: &str) -> Result<Vec<StoredTurn>, LoadgenError> {
        let path = format!(
            "/v1/workspaces/{}/sessions/{}/transcript",
            seg(workspace),
            seg(session)
        );
        let body = self
            .get(&path)
            .map_err(|e| LoadgenError::Http(format!("GET {path}: {}", e.message)))?;
        let turns: Vec<cairn::Turn> = serde_json::from_value(body)
            .map_err(|e| LoadgenError::Http(format!("GET {path}: unexpected answer: {e}")))?;
        Ok(stored(turns))
    }
}
