//! The host API: what a gateway calls, named after a gateway's
//! context-engine hooks.

use std::sync::Arc;

use cairn_actors::{ActorRuntime, CaptureReport, ExtractionOutcome, Trigger};
use cairn_memory::StorageBackend;
use cairn_memory::store::{RewriteReport, SledStore, StoreError};
use cairn_memory::{
    Ack, Clock, Memory, MemoryError, Session, SessionSpec, SessionState, SystemClock, TurnInput,
    Workspace,
};
use serde::{Deserialize, Serialize};

use cairn_memory::search::{EmbedConfig, Embedder, FastEmbedder, SearchService};

use crate::config::CairnConfig;
use crate::error::Result;
use crate::gate::WasmGate;
use crate::tools::RateLimiter;
use cairn_policies::Policies;

/// What `gateway_start` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GatewayStartReport {
    /// Workspaces in the store.
    pub workspaces: Vec<String>,
    /// Sessions left open by the previous run, as `(workspace, session)`.
    pub open_sessions: Vec<OpenSession>,
    /// Sessions the start-up sweep extracted (or tried to): those no
    /// `session_end` / `before_reset` extracted before.
    pub extracted: Vec<SweptSession>,
}

/// One session the `gateway_start` sweep looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SweptSession {
    /// Workspace.
    pub workspace: String,
    /// Session id.
    pub session: String,
    /// `extracted`, `already_extracted`, `not_main`, `failed` or `gave_up`.
    pub outcome: String,
    /// Entries written.
    pub entries: usize,
}

fn outcome_name(outcome: &ExtractionOutcome) -> (&'static str, usize) {
    match outcome {
        ExtractionOutcome::Extracted { report } => ("extracted", report.entries.len()),
        ExtractionOutcome::AlreadyExtracted => ("already_extracted", 0),
        ExtractionOutcome::NotMain => ("not_main", 0),
        ExtractionOutcome::Failed { .. } => ("failed", 0),
        ExtractionOutcome::GaveUp { .. } => ("gave_up", 0),
    }
}

/// A session that was still open when the gateway (re)started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OpenSession {
    /// Workspace.
    pub workspace: String,
    /// Session id.
    pub session: String,
    /// Its work context.
    pub work_context: String,
    /// Turns it holds.
    pub turns: u64,
}

/// cairn, embedded: one per process, cheap to clone.
///
/// ```
/// use cairn::{Cairn, CairnConfig, Role, TurnInput};
///
/// let dir = tempfile::tempdir()?;
/// let config = CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() };
/// let cairn = Cairn::open(config)?;
/// cairn.bootstrap("acme", &cairn::SessionSpec { id: "s1".into(), ..Default::default() })?;
/// let acks = cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "Ship it Friday.")])?;
/// assert_eq!(acks[0].seq, 0);
/// let block = cairn.assemble("acme", &cairn::AssembleRequest::new("s1", 300))?;
/// assert!(block.text.contains("Ship it Friday."));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Cairn {
    memory: Memory,
    pub(crate) actors: ActorRuntime,
    policies: Policies,
    config: Arc<CairnConfig>,
    /// Started on first use (`cairn serve` starts it at once) so that
    /// short CLI commands do not load the model.
    search: Arc<std::sync::OnceLock<SearchService>>,
    limiter: Arc<RateLimiter>,
    /// The live topic gate (compiled matchers, decision cache).
    topic_gate: Arc<crate::topics::TopicGate>,
    /// This node's side of a cluster (`storage.cluster`), if in one.
    pub(crate) cluster: Option<crate::cluster::Cluster>,
    /// The online erasure worker (`[erasure]`).
    pub(crate) eraser: Arc<crate::eraser::Eraser>,
    /// The access tokens of `cairn serve` (also held by the memory, which
    /// erases a workspace's tokens with it).
    pub(crate) access: Arc<crate::access::Access>,
    /// What each workspace may still spend on the model endpoints.
    pub(crate) model_budgets: ModelBudgets,
}

/// The per-workspace model budgets of the process, one per `[*.model]`
/// section: every capture and every compaction spends from its section's.
#[derive(Debug, Clone)]
pub(crate) struct ModelBudgets {
    /// `[compaction.model]`.
    pub(crate) compaction: Arc<crate::model::Budget>,
    /// `[extraction.model]`.
    pub(crate) extraction: Arc<crate::model::Budget>,
}

impl Cairn {
    /// Rewrites the store in `data_dir` so its files hold only live data
    /// (see [`SledStore::rewrite`](cairn_memory::store::SledStore::rewrite)):
    /// after a `forget`, the erased bytes leave the data directory. Offline:
    /// refused while a `Cairn` (in this process or another) has the store
    /// open.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, ForgetTarget, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// {
    ///     let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    ///     cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "call Dana on 555-0100")])?;
    ///     cairn.forget("acme", &ForgetTarget::Session("s1".into()), "asked to")?;
    /// }
    /// let report = Cairn::rewrite_store(dir.path())?;
    /// assert!(report.trees > 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rewrite_store(data_dir: &std::path::Path) -> Result<RewriteReport> {
        Ok(SledStore::rewrite(data_dir).map_err(MemoryError::from)?)
    }

    /// `cairn vacuum`: [`Cairn::rewrite_store`] on the store `config`
    /// selects. Only sled keeps erased bytes in files of its own; on the
    /// `postgres` backend this is refused with a
    /// [`StoreError::Unsupported`](cairn_memory::store::StoreError) that says
    /// what to run instead (PostgreSQL reclaims space with `VACUUM`).
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, StorageBackend};
    /// let mut config = CairnConfig::default();
    /// config.storage.backend = StorageBackend::Postgres;
    /// let err = Cairn::vacuum(&config).unwrap_err();
    /// assert!(err.to_string().contains("VACUUM FULL"));
    /// ```
    pub fn vacuum(config: &CairnConfig) -> Result<RewriteReport> {
        match config.storage.backend {
            StorageBackend::Postgres => Err(MemoryError::from(StoreError::Unsupported {
                what: "cairn vacuum (rewriting the store's files)",
                backend: "postgres",
                hint: "erased rows leave the tables at once; their bytes leave the database files \
                       when PostgreSQL vacuums them (autovacuum, or `VACUUM FULL cairn_kv` \
                       run by the database's operator)",
            })
            .into()),
            _ => Cairn::rewrite_store(&config.data_dir),
        }
    }

    /// Opens cairn on `config.data_dir` with the system clock.
    pub fn open(config: CairnConfig) -> Result<Self> {
        Cairn::open_with_clock(config, Arc::new(SystemClock))
    }

    /// Opens cairn with a clock of the caller's (tests drive a `ManualClock`).
    pub fn open_with_clock(config: CairnConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        // The store is opened here, not by the memory, because the access
        // tokens (the server's, kept in its store-wide space) work on it
        // too; the memory erases them with their workspace.
        let store = cairn_memory::store::open(
            &config.storage,
            &config.data_dir,
            config.memory.cache_mb.saturating_mul(1 << 20),
        )
        .map_err(MemoryError::from)?;
        let access = Arc::new(crate::access::Access::new(store.clone()));
        let memory = Memory::open_with(store, config.memory.clone(), clock, vec![access.clone()])?;
        // The installed significance gate decides what the actors capture.
        let policies = Policies::open(&memory, &config.data_dir, &config.policies)?;
        let topic_gate = Arc::new(crate::topics::TopicGate::default());
        let actors = ActorRuntime::start_with_topics(
            memory.clone(),
            config.actors.clone(),
            Arc::new(WasmGate::new(&policies, memory.clone())),
            Arc::new(crate::topics::LiveTopics {
                gate: topic_gate.clone(),
                policies: policies.clone(),
            }),
        )?;
        let model_budgets = ModelBudgets {
            compaction: Arc::new(crate::model::Budget::new(&config.compaction.model)),
            extraction: Arc::new(crate::model::Budget::new(&config.extraction.model)),
        };
        actors.set_extractor(model_extractor(
            &config,
            &model_budgets.extraction,
            &policies,
        ));
        let cluster = crate::cluster::Cluster::start(
            &memory,
            &actors,
            &policies,
            &config.storage.cluster.advertise,
        );
        let eraser = Arc::new(crate::eraser::Eraser::start(&memory, &config.erasure));
        tracing::info!(
            data_dir = %config.data_dir.display(),
            backend = config.storage.backend.as_str(),
            "cairn opened"
        );
        Ok(Cairn {
            memory,
            actors,
            policies,
            config: Arc::new(config),
            search: Arc::new(std::sync::OnceLock::new()),
            limiter: Arc::new(RateLimiter::default()),
            topic_gate,
            cluster,
            eraser,
            access,
            model_budgets,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &CairnConfig {
        &self.config
    }

    /// The memory core. Not public: every surface goes through the
    /// facade's methods, which apply the rules (actors, gate, lineage,
    /// redaction, limits).
    pub(crate) fn memory(&self) -> &Memory {
        &self.memory
    }

    /// A workspace handle. The workspace is created by the first write
    /// through it (a read, or a hook on a session that does not exist,
    /// creates nothing).
    pub(crate) fn workspace(&self, workspace: &str) -> Result<Workspace> {
        Ok(self.memory.workspace(workspace)?)
    }

    /// The workspaces in the store, sorted.
    pub fn workspaces(&self) -> Result<Vec<String>> {
        Ok(self.memory.workspaces()?)
    }

    /// Hook `bootstrap`: a session starts. Creates it (durably) or returns it.
    pub fn bootstrap(&self, workspace: &str, spec: &SessionSpec) -> Result<Session> {
        Ok(self.workspace(workspace)?.ensure_session(spec)?)
    }

    /// The policy plugins (host, slots, registry, decision log), inside the
    /// facade only: a surface installs, lists and reads them through
    /// [`Cairn::install_plugin`], [`Cairn::plugins`],
    /// [`Cairn::plugin_generation`], [`Cairn::plugin_slot_status`],
    /// [`Cairn::decisions`], [`Cairn::generation_counts`],
    /// [`Cairn::decision_log_stats`] and [`Cairn::check_memory`].
    pub(crate) fn policies(&self) -> &Policies {
        &self.policies
    }

    /// The actor runtime: cairn's own tests inject faults and read
    /// statistics through it (feature `testing`).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn actors(&self) -> &ActorRuntime {
        &self.actors
    }

    /// The capture the `compact` hook runs first (see `compaction.rs`).
    pub(crate) fn capture_before_compaction(
        &self,
        workspace: &str,
        session: &str,
    ) -> Result<CaptureReport> {
        Ok(self.actors.before_compaction(workspace, session)?)
    }

    /// Hook `ingest`: appends turns through the session's actor;
    /// acknowledged only once durable.
    ///
    /// A full mailbox is refused with code `backpressure` (or waited for, by
    /// configuration); nothing of a refused call is written.
    pub fn ingest(&self, workspace: &str, turns: &[TurnInput]) -> Result<Vec<Ack>> {
        // The topic gate runs behind the acknowledgement, in the actors
        // (tier 1 in the session's task, tiers 2–3 in the topic watchers).
        let acks = self.actors.ingest(workspace, turns)?;
        self.nudge_search();
        Ok(acks)
    }

    /// [`Cairn::ingest`] for an async host: the same session actor, limits
    /// and durability, awaited instead of blocking a thread. An async server
    /// calls it on its own worker, saving a hand-off to a blocking pool and
    /// back per call (`cairn serve` does). Poll it inside a Tokio runtime
    /// with its timer enabled. The first call for a workspace opens it on
    /// the calling thread (on PostgreSQL, one round trip, once per process).
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let turns = [TurnInput::new("s1", Role::User, "Ship it Friday.")];
    /// let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
    /// let acks = runtime.block_on(cairn.ingest_async("acme", &turns))?;
    /// assert_eq!(acks[0].seq, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn ingest_async(&self, workspace: &str, turns: &[TurnInput]) -> Result<Vec<Ack>> {
        let acks = self.actors.ingest_async(workspace, turns).await?;
        self.nudge_search();
        Ok(acks)
    }

    /// Checks turns the way [`Cairn::ingest`] would before writing (ids,
    /// tool-call ids, content size), without writing anything or creating a
    /// workspace; the error names the first bad turn by its index. A caller
    /// that ingests a large input in several calls checks it whole first, so
    /// a bad turn late in the input leaves nothing written.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let turns = [TurnInput::new("s1", Role::User, "ok"), TurnInput::new("bad id!", Role::User, "x")];
    /// let err = cairn.validate_turns(&turns).unwrap_err();
    /// assert!(err.to_string().contains("item 1"), "{err}");
    /// assert!(cairn.workspaces()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn validate_turns(&self, turns: &[TurnInput]) -> Result<()> {
        let limits = &self.config.memory.limits;
        for (index, turn) in turns.iter().enumerate() {
            cairn_memory::record::validate_turn(turn, limits).map_err(|source| {
                cairn_memory::MemoryError::InBatch {
                    index,
                    source: Box::new(source),
                }
            })?;
        }
        Ok(())
    }

    /// Wakes the search worker after a write: indexing happens in the
    /// background, never on the acknowledgement path.
    pub(crate) fn nudge_search(&self) {
        if let Some(search) = self.search.get() {
            search.nudge();
        }
    }

    /// The search service (indexes, background worker), started (model
    /// loaded, worker running) on first call.
    pub(crate) fn search(&self) -> &SearchService {
        self.search.get_or_init(|| {
            let service = SearchService::new(self.memory.clone(), load_embedder(&self.config));
            service.set_refresh(std::time::Duration::from_millis(
                self.config.search.refresh_ms,
            ));
            service.start();
            service
        })
    }

    /// Starts search (loads the embedding model, starts the indexing worker)
    /// without waiting for it: `cairn serve` calls it at start so the first
    /// query does not pay for the model load.
    pub fn start_search(&self) {
        self.search();
    }

    /// Brings the search indexes up to the durable record now, embedding
    /// only what was never embedded (stored vectors are reused). A short
    /// process (a CLI command) calls it before searching or assembling with
    /// retrieval; a long-running one lets the background worker do it.
    pub fn catch_up_search(&self) -> Result<()> {
        Ok(self.search().catch_up()?)
    }

    pub(crate) fn topic_gate(&self) -> &crate::topics::TopicGate {
        &self.topic_gate
    }

    pub(crate) fn rate_limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// Manual capture: one work context, or every work context of the
    /// workspace when `work_context` is `None`.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "We decided to use sled.").in_context("db")])?;
    /// let reports = cairn.capture("acme", Some("db"))?;
    /// assert_eq!(reports[0].entries[1].content, "We decided to use sled.");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn capture(
        &self,
        workspace: &str,
        work_context: Option<&str>,
    ) -> Result<Vec<CaptureReport>> {
        match work_context {
            Some(wc) => Ok(vec![self.actors.capture(workspace, wc)?]),
            None => Ok(self.actors.capture_all(workspace)?),
        }
    }

    /// Evaluates the time triggers (idle, debounced defocus, nightly) now and
    /// passivates idle actors; a ticker does this every
    /// `actors.tick_interval_secs`. Returns the captures that fired.
    pub fn tick(&self) -> Result<Vec<CaptureReport>> {
        Ok(self.actors.tick()?)
    }

    fn extract(&self, workspace: &str, session: &str, hook: Trigger) {
        match self.actors.extract_session(workspace, session, hook) {
            Ok(outcome) => {
                let (name, entries) = outcome_name(&outcome);
                tracing::info!(workspace, session, %hook, outcome = name, entries, "session extraction");
            }
            // Recorded for the gateway_start sweep; the hook itself succeeded.
            Err(error) => {
                tracing::warn!(workspace, session, %hook, %error, "session extraction not run")
            }
        }
    }

    /// Hook `after_turn`: a model turn completed. Returns the session's state.
    ///
    /// It writes nothing: the turns themselves arrive through
    /// [`Cairn::ingest`], where the session's actor marks its work context
    /// dirty and the significance gate judges them; the capture triggers
    /// (idle, defocus, nightly) fire on the actors' ticks.
    ///
    /// With `compaction.window_tokens` set, it compacts the session once its
    /// view passes `compaction.trigger_fraction` of that window.
    pub fn after_turn(&self, workspace: &str, session: &str) -> Result<Session> {
        let ws = self.memory.existing_workspace(workspace)?;
        let state = ws.session(session)?;
        self.compact_if_due(&ws, session)?;
        Ok(state)
    }

    /// Hook `session_end`: marks the session ended (idempotent, durable).
    ///
    /// Then extracts the session once (docs/DESIGN.md, *Session
    /// extraction*): main sessions only unless configured, skipped if an earlier hook extracted it, one retry
    /// after a failure. An extraction problem does not fail the hook; it is
    /// recorded and the `gateway_start` sweep retries it.
    pub fn session_end(&self, workspace: &str, session: &str) -> Result<Session> {
        let ended = self
            .memory
            .existing_workspace(workspace)?
            .end_session(session)?;
        self.extract(workspace, session, Trigger::SessionEnd);
        self.expire_with_session(workspace, session)?;
        Ok(ended)
    }

    /// Hook `before_reset`: the host is about to reset the session's context.
    /// Records the reset; the transcript is kept.
    /// Extracts the session first, like [`Cairn::session_end`].
    pub fn before_reset(&self, workspace: &str, session: &str) -> Result<Session> {
        let ws = self.memory.existing_workspace(workspace)?;
        ws.session(session)?;
        self.extract(workspace, session, Trigger::BeforeReset);
        Ok(ws.record_reset(session)?)
    }

    /// Hook `gateway_start`: the gateway (re)started. Reports the workspaces
    /// and the sessions the previous run left open, and sweeps the sessions
    /// not extracted yet (retrying failed ones once).
    pub fn gateway_start(&self) -> Result<GatewayStartReport> {
        let extracted = self
            .actors
            .gateway_start()?
            .into_iter()
            .map(|e| {
                let (name, entries) = outcome_name(&e.outcome);
                SweptSession {
                    workspace: e.workspace,
                    session: e.session,
                    outcome: name.to_owned(),
                    entries,
                }
            })
            .collect();
        let workspaces = self.memory.workspaces()?;
        let mut open_sessions = Vec::new();
        for ws in &workspaces {
            let handle = self.memory.existing_workspace(ws)?;
            for listed in handle.sessions(None)? {
                // The stored record's `next_seq` is not kept per turn: the
                // head is derived.
                let session = handle.session(&listed.id)?;
                if session.state == SessionState::Open {
                    open_sessions.push(OpenSession {
                        workspace: ws.clone(),
                        session: session.id,
                        work_context: session.work_context,
                        turns: session.next_seq,
                    });
                }
            }
        }
        Ok(GatewayStartReport {
            workspaces,
            open_sessions,
            extracted,
        })
    }
}

/// The configured model extraction pass, if enabled and usable (a bad URL
/// is a warning: captures then extract heuristically).
fn model_extractor(
    config: &CairnConfig,
    budget: &Arc<crate::model::Budget>,
    policies: &Policies,
) -> Option<Arc<dyn cairn_memory::extractor::ModelExtractor>> {
    let e = &config.extraction;
    if !e.model.enabled {
        return None;
    }
    match crate::extraction::OpenAiExtractor::with_budget(&e.model, e.max_tokens, budget.clone()) {
        Ok(x) => Some(Arc::new(x.guarded(crate::model::ModelGuard::new(
            policies,
            &e.model,
            "model_extraction",
        )))),
        Err(error) => {
            tracing::warn!(%error, "model extraction off: heuristic extraction only");
            None
        }
    }
}

/// The configured embedding model, or `None` with a clear warning: search
/// then answers lexically and flags it.
fn load_embedder(config: &CairnConfig) -> Option<Arc<dyn Embedder>> {
    let e = &config.embedding;
    if !e.is_set() {
        let looked = match &e.origin.cache_dir {
            Some(cache) => format!(" and none found in {}", cache.display()),
            None => String::new(),
        };
        tracing::warn!(
            "no embedding model configured (embedding.model_dir / embedding.ort_dylib, or \
             CAIRN_EMBEDDING__MODEL_DIR / CAIRN_EMBEDDING__ORT_DYLIB){looked}: search is \
             lexical only; run scripts/setup-embeddings.sh (`cairn doctor` says more)"
        );
        return None;
    }
    match FastEmbedder::load(&EmbedConfig::new(&e.model_dir, &e.ort_dylib)) {
        Ok(model) => Some(Arc::new(model)),
        Err(err) => {
            tracing::warn!(error = %err, "embedding model unavailable: search is lexical only");
            None
        }
    }
}
