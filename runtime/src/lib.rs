//! cairn: an embeddable, offline-first memory runtime for AI-agent gateways.
//!
//! A gateway embeds [`Cairn`] and calls its hooks: [`Cairn::bootstrap`] when a
//! session starts, [`Cairn::ingest`] for every turn, [`Cairn::assemble`] before
//! each model call, and [`Cairn::session_end`] / [`Cairn::before_reset`] /
//! [`Cairn::gateway_start`] around the session's life. Everything is stored
//! durably (embedded sled) before it is acknowledged. The memory log, the
//! subject registry and `forget` are reached through [`Cairn::workspace`].
//!
//! The same API is served over HTTP by `cairn serve` (see [`http`]) and driven
//! by the `cairn` command line.
//!
//! ```
//! use cairn::{Cairn, CairnConfig, EntryInput, EntryKind, Role, TurnInput};
//!
//! let dir = tempfile::tempdir()?;
//! let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..Default::default() })?;
//! cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "Let's use Postgres.").in_context("db")])?;
//! let ws = cairn.workspace("acme")?;
//! let decision = ws.append_entry(
//!     &EntryInput::new(EntryKind::Decision, "Use Postgres 16").about("storage").from_turns("s1", 0, 0),
//! )?;
//! ws.pin(&decision.id)?; // a hard invariant of every block from now on
//! let mut request = cairn::AssembleRequest::new("s1", 400);
//! request.retrieval = cairn::RetrievalMode::Off;
//! let block = cairn.assemble("acme", &request)?;
//! assert!(block.text.contains("Use Postgres 16"));
//! assert!(block.text.contains("Let's use Postgres."));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod assembly;
mod config;
mod decision_log;
mod error;
pub mod eval;
mod host;
pub mod http;
pub mod loadgen;
mod policy;
mod tools;

pub use cairn_actors::{
    ActorConfig, Backpressure, CaptureReport, CapturedEntry, Trigger, TriggerConfig,
};
pub use cairn_memory::assemble::{
    ActivityReport, AssembleSettings, BlockItem, Destination, Fidelity, PolicyNote, RetrievalMode,
    RetrievalReport, ScopeRelation, Section, TierReport, Warrant,
};
/// Hybrid search (BM25 + vectors), re-exported from the memory core.
pub use cairn_memory::search;
pub use cairn_memory::{
    Ack, AssembleRequest, AssembledContext, Clock, Entry, EntryFilter, EntryInput, EntryKind,
    EntryStatus, EntryView, ForgetTarget, ItemSource, ManualClock, MemoryConfig, MemoryError,
    Provenance, Role, Session, SessionKind, SessionSpec, SessionState, Subject, SubjectKind,
    SystemClock, TaskStatus, Tombstone, TraceItem, Turn, TurnInput, Workspace,
};
pub use config::{
    AssembleConfig, CairnConfig, EmbeddingConfig, LogConfig, SearchConfig, ServerConfig,
    default_data_dir,
};
pub use decision_log::{
    DECISIONS_NAMESPACE, DecisionLog, DecisionLogConfig, DecisionLogStats, DecisionQuery,
    GenerationCounts, MAX_QUERY_LIMIT,
};
pub use error::{CairnError, Result};
pub use host::{Cairn, GatewayStartReport, OpenSession, SweptSession};
pub use policy::{
    InstallReport, InstalledPlugin, PLUGINS_NAMESPACE, PluginStatus, PluginsReport, Policies,
    PolicyConfig, WasmGate, parse_world,
};
pub use tools::{
    MemoryItem, SearchItem, SearchRequest, SearchResponse, TRANSCRIPT_TOKEN_CAP, Transcript, redact,
};

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Cairn>();
}
