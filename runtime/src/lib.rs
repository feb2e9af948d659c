//! cairn: an embeddable, offline-first memory runtime for AI-agent gateways.
//!
//! A gateway embeds [`Cairn`] and calls its hooks: [`Cairn::bootstrap`] when a
//! session starts, [`Cairn::ingest`] for every turn, [`Cairn::assemble`] before
//! each model call, and [`Cairn::session_end`] / [`Cairn::before_reset`] /
//! [`Cairn::gateway_start`] around the session's life. Everything is stored
//! durably (embedded sled) before it is acknowledged.
//!
//! [`Cairn`] is the only door: the memory tools ([`Cairn::memory_search`],
//! [`Cairn::memory_get`]…), the reads of the record and the log
//! ([`Cairn::transcript`], [`Cairn::entries`]…), the writes
//! ([`Cairn::append_entries`], [`Cairn::pin`], [`Cairn::forget`]…) and plugin
//! administration ([`Cairn::install_plugin`]…) all go through it, so the
//! rules (actors, the significance gate, the memory policy, lineage,
//! redaction, limits) apply to every surface. The `cairn` binary (the CLI and
//! `cairn serve`, package `cairn-cli`) is built on this API alone.
//!
//! ```
//! use cairn::{Cairn, CairnConfig, EntryInput, EntryKind, Role, TurnInput};
//!
//! let dir = tempfile::tempdir()?;
//! let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..Default::default() })?;
//! cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "Let's use Postgres.").in_context("db")])?;
//! let decision = cairn.append_entry(
//!     "acme",
//!     &EntryInput::new(EntryKind::Decision, "Use Postgres 16").about("storage").from_turns("s1", 0, 0),
//! )?;
//! cairn.pin("acme", &decision.id)?; // a hard invariant of every block from now on
//! let mut request = cairn::AssembleRequest::new("s1", 400);
//! request.retrieval = cairn::RetrievalMode::Off;
//! let block = cairn.assemble("acme", &request)?;
//! assert!(block.text.contains("Use Postgres 16"));
//! assert!(block.text.contains("Let's use Postgres."));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod access;
pub mod assembly;
mod briefing;
mod cluster;
mod compaction;
mod config;
mod corrections;
mod eraser;
mod error;
pub mod export;
mod extraction;
mod gate;
mod health;
mod host;
mod maintenance;
mod manage;
mod model;
mod obligations;
mod reads;
mod reconstruct;
mod tools;
pub mod topics;

pub use access::{AccessToken, TokenScope};
pub use cairn_actors::{
    ActorConfig, ActorError, Backpressure, CaptureReport, CapturedEntry, MergedItem, SettledLoop,
    Trigger, TriggerConfig,
};
pub use cairn_memory::assemble::{
    ActivityReport, AssembleSettings, BlockItem, Destination, Fidelity, ObligationNote, PolicyNote,
    RetrievalMode, RetrievalReport, ScopeRelation, Section, TierReport, Warrant,
};
pub use cairn_memory::brief::{
    BriefItem, BriefScope, BriefSection, BriefSectionKind, BriefSettings, Briefing,
};
pub use cairn_memory::compact::{
    CompactReport, CompactionView, Cover, Expanded, Expansion, SummaryMethod, SummaryNode,
};
pub use cairn_memory::config::ClusterConfig;
pub use cairn_memory::contradict::{Contradiction, ContradictionRule, find_contradictions};
pub use cairn_memory::store::RewriteReport;
pub use cairn_memory::store::{LeaseRow, NodeInfo};
pub use cairn_memory::supervise::WorkerHealth;
pub use cairn_memory::{
    Ack, AssembleRequest, AssembledContext, Clock, Entry, EntryFilter, EntryInput, EntryKind,
    EntryStatus, EntryView, ErrorKind, ForgetTarget, ItemSource, ManualClock, MemoryConfig,
    MemoryError, PostgresConfig, Provenance, Removed, Role, Session, SessionKind, SessionSpec,
    SessionState, StorageBackend, StorageConfig, Subject, SubjectKind, SystemClock, TaskStatus,
    Tombstone, TombstoneTarget, TraceItem, Turn, TurnInput,
};
pub use cluster::{ClusterStatus, Route, Takeover};
pub use compaction::{CompactionConfig, CompactionHookReport, OpenAiSummariser};
pub use config::{
    AssembleConfig, CairnConfig, EmbeddingConfig, EmbeddingOrigin, LogConfig, MODEL_FILES,
    MODEL_NAME, PathOrigin, SearchConfig, ServerConfig, TlsConfig, WebOrigin, WorkspaceToken,
    default_data_dir, embedding_cache_dir, find_model_dir, find_ort_dylib,
};
pub use corrections::Correction;
pub use eraser::{ErasureConfig, ErasureStats};
pub use error::{BoxError, CairnError, Result};
pub use export::{ExportReport, ExportRequest, ImportReport, ObjectCounts};
pub use extraction::{ExtractionConfig, OpenAiExtractor};
pub use health::Health;
pub use host::{Cairn, GatewayStartReport, OpenSession, SweptSession};
pub use manage::parse_world;
pub use model::ModelConfig;
pub use obligations::{AuditQuery, AuditRecord, Confirmation, ConfirmationState, ProposedChange};
pub use reads::ReadAs;
pub use tools::{
    MemoryItem, NOTE_KINDS, Note, SearchItem, SearchRequest, SearchResponse, TRANSCRIPT_TOKEN_CAP,
    Transcript, redact,
};
/// The policy worlds' types, re-exported from the policy host: the
/// requests and decisions of the three WIT worlds, generation ids, slots,
/// decision records and the built-in plugins. [`Policies`] and the decision
/// log name these.
pub mod worlds {
    // The memory policy's world.
    pub use cairn_policies::{
        Action, ContentFidelity, ContentReference, Destination, LearningScope, Locality,
        MemoryPolicyDecision, MutationAuthority, ObjectKind, PolicyObligation, PolicyRequest,
        PrincipalKind, PrincipalRef, Sensitivity,
    };
    // The significance gate's world.
    pub use cairn_policies::{
        CollectionDecision, DEFAULT_BASE_THRESHOLD, DEFAULT_RESEARCH_MULTIPLIER, GateContext,
        SignificanceDecision, SignificanceInput,
    };
    // The topic directive's world.
    pub use cairn_policies::{
        Activation, CollectionMode, EntryView, GateSignals, MatchCriterion, OutputTarget,
        SourceClass, SourceScope, TopicDefinition, TopicDirectiveDecision, TopicInput,
        TopicSubject,
    };
    // The words the worlds share.
    pub use cairn_policies::{
        ActivityType, EntryKind, ExtractionDepth, ReasonCode, SessionKind, TurnRole, TurnView,
        WorkPhase,
    };
    // The worlds, their slots, generations and decision records.
    pub use cairn_policies::{
        Decided, DecisionId, DecisionOutput, DecisionRecord, DecisionSink, MemoryPolicy,
        MemorySink, Outcome, PolicyGenerationId, PolicySlot, SignificanceGate, SinkError,
        SlotStatus, TopicDirective, World, WorldKind, decision_codec,
    };
    // The host, its limits, faults and caches.
    pub use cairn_policies::{
        CacheOutcome, CacheStats, Fault, FaultKind, HostConfig, InputsDigest, Limits,
        MAX_IN_MEMORY, MAX_ON_DISK, PolicyError, PolicyHost, PreparedPlugin, Result, TickerStatus,
    };
    // The built-in plugins.
    pub use cairn_policies::{BuiltinPlugin, PolicySet, defaults};
}
pub use cairn_policies::{DecisionRecord, PolicyGenerationId, WorldKind};
// The plugin registry and the decision log (in the policy host's crate).
pub use cairn_policies::{
    DECISIONS_NAMESPACE, DecisionLog, DecisionLogConfig, DecisionLogStats, DecisionQuery,
    GenerationCounts, InstallReport, InstalledPlugin, MAX_QUERY_LIMIT, PLUGINS_NAMESPACE,
    PluginStatus, PluginsReport, Policies, PolicyConfig, activity_type,
};

/// Hybrid search (BM25 + vectors) as a library: the index, its options and
/// filters, the embedding seam. A running cairn's search is
/// [`Cairn::memory_search`].
pub mod search {
    pub use cairn_memory::search::{
        DocAttrs, DocSource, EmbedConfig, Embedder, FastEmbedder, Fusion, Granularity, IndexStats,
        ItemRef, Period, RecipeParams, SearchDoc, SearchError, SearchFilters, SearchHit,
        SearchIndex, SearchMode, SearchOptions, SearchResult, ServiceError, TimeMention,
        UnitCosine, asks_when, entry_text, named_periods, resolve_times,
    };
}

/// Facts and preferences from talk: the rules capture reads a user's turn
/// with, as data ([`facts::ENGLISH`]), and the attributes a fact is about.
pub mod facts {
    pub use cairn_memory::facts::{
        ATTRIBUTES, Attribute, ENGLISH, FactRules, FoundFact, attribute_of_text, find_facts,
        split_speaker,
    };
    pub use cairn_memory::facts::{
        ENGLISH_VALUES, ValueRules, fact_detail, fact_of_detail, value_of,
    };
}

/// Maintenance: the run's options and report, the rules, the changes they
/// make and the stored runs ([`Cairn::maintain`], [`Cairn::undo_maintenance`],
/// [`Cairn::restore`]).
pub mod maintain {
    pub use cairn_memory::maintain::{
        Action, ArchivedItem, Change, Contradiction, MaintainOptions, MaintainSettings,
        MaintainTrigger, MaintenanceReport, MaintenanceRun, Mark, Rule, SessionMark, SettleMark,
        Undone,
    };
}

/// Reconstruct: what `Cairn::reconstruct` reports, store by store.
pub mod rebuild {
    pub use cairn_memory::reconstruct::{DerivedStore, Difference, ReconstructReport, StoreCheck};
}

/// Internal handles for cairn's own tests and benchmarks (feature
/// `testing`): fault injection and actor statistics. Nothing here applies
/// the facade's rules; embedders do not need it.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing {
    pub use cairn_actors::{ActorRuntime, Fault, RuntimeStats};
    pub use cairn_memory::store::{Collection, MaintKey, StateKey};
    pub use cairn_memory::testing::{execute, with_database};
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Cairn>();
}
