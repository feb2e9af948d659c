//! The runtime's error type.

use cairn_actors::ActorError;
use cairn_memory::MemoryError;

/// Result alias for the runtime.
pub type Result<T, E = CairnError> = std::result::Result<T, E>;

/// Everything the `cairn` facade can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CairnError {
    /// The memory core refused or failed (see [`MemoryError::code`]).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The actor runtime refused or failed (backpressure, a restarted actor…).
    #[error(transparent)]
    Actor(ActorError),
    /// The configuration could not be read or is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// Search or its index failed.
    #[error(transparent)]
    Search(#[from] cairn_memory::search::ServiceError),
    /// A caller went past its rate limit.
    #[error(
        "rate limit: caller {caller:?} is limited to {limit} searches per {window}; try again later"
    )]
    RateLimited {
        /// The caller.
        caller: String,
        /// The limit that was hit.
        limit: u32,
        /// `minute` or `day`.
        window: &'static str,
    },
    /// A sub-agent session asked outside its lineage.
    #[error("lineage: {0}")]
    Denied(String),
    /// A malformed item reference.
    #[error("invalid reference {0}")]
    InvalidReference(String),
    /// The policy host refused a plugin (not a component, the wrong world,
    /// a bad name, a failed canary…) or could not start.
    #[error(transparent)]
    Policy(#[from] cairn_policies::PolicyError),
    /// A plugin upload is larger than `policies.max_plugin_bytes`.
    #[error(
        "plugin of {size} bytes is larger than the limit of {max} bytes (policies.max_plugin_bytes)"
    )]
    PluginTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A world name that is not one of the three.
    #[error("unknown world {0:?}; use significance-gate, topic-directive or memory-policy")]
    UnknownWorld(String),
    /// The decision log or the plugin registry failed.
    #[error("decision log: {0}")]
    DecisionLog(String),
}

impl CairnError {
    /// A stable machine-readable code (`snake_case`).
    ///
    /// ```
    /// use cairn::CairnError;
    /// assert_eq!(CairnError::Config("bad".into()).code(), "config");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            CairnError::Memory(e) => e.code(),
            CairnError::Actor(e) => e.code(),
            CairnError::Config(_) => "config",
            CairnError::Search(cairn_memory::search::ServiceError::Memory(e)) => e.code(),
            CairnError::Search(_) => "search",
            CairnError::RateLimited { .. } => "rate_limited",
            CairnError::Denied(_) => "lineage_denied",
            CairnError::InvalidReference(_) => "invalid_reference",
            CairnError::Policy(e) => policy_code(e),
            CairnError::PluginTooLarge { .. } => "plugin_too_large",
            CairnError::UnknownWorld(_) => "unknown_world",
            CairnError::DecisionLog(_) => "decision_log",
        }
    }

    /// True when the caller's input caused the error.
    pub fn is_caller_error(&self) -> bool {
        match self {
            CairnError::Memory(e) => e.is_caller_error(),
            CairnError::Actor(e) => e.is_caller_error(),
            CairnError::Config(_) => true,
            CairnError::Search(cairn_memory::search::ServiceError::Memory(e)) => {
                e.is_caller_error()
            }
            CairnError::Search(_) => false,
            CairnError::RateLimited { .. }
            | CairnError::Denied(_)
            | CairnError::InvalidReference(_)
            | CairnError::PluginTooLarge { .. }
            | CairnError::UnknownWorld(_) => true,
            CairnError::Policy(e) => !matches!(
                e,
                cairn_policies::PolicyError::Engine { .. }
                    | cairn_policies::PolicyError::Cache { .. }
                    | cairn_policies::PolicyError::DecisionLog { .. }
            ),
            CairnError::DecisionLog(_) => false,
        }
    }

    /// True when something addressed does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            CairnError::Memory(e) => e.is_not_found(),
            CairnError::Actor(e) => e.is_not_found(),
            CairnError::Search(cairn_memory::search::ServiceError::Memory(e)) => e.is_not_found(),
            CairnError::Config(_)
            | CairnError::Search(_)
            | CairnError::RateLimited { .. }
            | CairnError::Denied(_)
            | CairnError::InvalidReference(_)
            | CairnError::Policy(_)
            | CairnError::PluginTooLarge { .. }
            | CairnError::UnknownWorld(_)
            | CairnError::DecisionLog(_) => false,
        }
    }

    /// True when the same call can succeed later (a full mailbox, a
    /// restarted actor): HTTP answers 503.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CairnError::Actor(e) if e.is_retryable())
    }
}

/// The policy host's kebab-case codes, in this crate's snake_case.
fn policy_code(err: &cairn_policies::PolicyError) -> &'static str {
    use cairn_policies::PolicyError as P;
    match err {
        P::InvalidName { .. } => "invalid_plugin_name",
        P::Compile { .. } => "plugin_compile",
        P::WrongWorld { .. } => "plugin_wrong_world",
        P::Instantiate { .. } => "plugin_instantiate",
        P::Canary { .. } => "plugin_canary",
        P::ReadPlugin { .. } => "plugin_read",
        P::DecisionLog { .. } => "decision_log",
        P::Cache { .. } => "policy_cache",
        _ => "policy_engine",
    }
}

impl From<cairn_memory::store::StoreError> for CairnError {
    /// Storage errors of the system namespaces (decision log, plugin
    /// registry) read as the memory core's.
    fn from(err: cairn_memory::store::StoreError) -> Self {
        CairnError::Memory(err.into())
    }
}

impl From<ActorError> for CairnError {
    /// Memory errors keep their own variant so callers match one place.
    fn from(err: ActorError) -> Self {
        match err {
            ActorError::Memory(e) => CairnError::Memory(e),
            other => CairnError::Actor(other),
        }
    }
}
