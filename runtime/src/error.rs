//! The runtime's error type.

use cairn_actors::ActorError;
use cairn_memory::{ErrorKind, MemoryError};

/// A boxed cause, kept so that `std::error::Error::source` walks to it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

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
    /// The configuration is invalid (the message names the setting).
    #[error("configuration: {0}")]
    Config(String),
    /// The configuration could not be read or parsed.
    #[error("configuration: {source}")]
    ConfigLoad {
        /// The reader's error (a missing file, bad TOML, a bad `CAIRN_*` value).
        #[source]
        source: BoxError,
    },
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
    /// a bad name, a failed canary…) or could not start. (Its store, settings,
    /// world-name, size and decision-log errors arrive as this enum's own
    /// variants: see `From<PolicyError>`.)
    #[error(transparent)]
    Policy(cairn_policies::PolicyError),
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
    /// A bundle to import is malformed: the line and what is wrong with it
    /// (line 0: the bundle as a whole). Nothing was written.
    #[error("bundle line {line}: {reason}")]
    InvalidBundle {
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// An import into a workspace that already holds something.
    #[error(
        "workspace {workspace:?} is not empty (it holds {what}): import into a new or empty workspace"
    )]
    WorkspaceNotEmpty {
        /// The workspace.
        workspace: String,
        /// The first thing found in it.
        what: String,
    },
    /// Reading or writing a bundle's file failed.
    #[error("bundle {path}: {source}")]
    BundleIo {
        /// The file (or `(output)`).
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The memory policy lets the caller only propose this change: it was
    /// recorded as a pending confirmation the user may grant (`cairn
    /// confirmations --grant ITEM`, `POST …/confirmations/grant`); nothing
    /// else was written.
    #[error(
        "proposed, not made: the memory policy lets this caller only propose the change ({reasons}); \
         it waits as {item:?} for the user's confirmation"
    )]
    Proposed {
        /// The pending confirmation (`proposal <id>`).
        item: String,
        /// The policy's reason codes.
        reasons: String,
    },
    /// The decision log or the plugin registry failed.
    #[error("decision log: {message}")]
    DecisionLog {
        /// What failed.
        message: String,
        /// The cause, when there is one.
        #[source]
        source: Option<BoxError>,
    },
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
            CairnError::Config(_) | CairnError::ConfigLoad { .. } => "config",
            CairnError::Search(cairn_memory::search::ServiceError::Memory(e)) => e.code(),
            CairnError::Search(_) => "search",
            CairnError::RateLimited { .. } => "rate_limited",
            CairnError::Denied(_) => "lineage_denied",
            CairnError::InvalidReference(_) => "invalid_reference",
            CairnError::Policy(e) => policy_code(e),
            CairnError::PluginTooLarge { .. } => "plugin_too_large",
            CairnError::UnknownWorld(_) => "unknown_world",
            CairnError::DecisionLog { .. } => "decision_log",
            CairnError::InvalidBundle { .. } => "invalid_bundle",
            CairnError::WorkspaceNotEmpty { .. } => "workspace_not_empty",
            CairnError::BundleIo { .. } => "bundle_io",
            CairnError::Proposed { .. } => "proposed",
        }
    }

    /// What kind of failure this is: the one thing a surface keys on (HTTP
    /// maps it to a status with one exhaustive match; the CLI to an exit
    /// code). [`code`](Self::code) stays the finer, stable name.
    ///
    /// ```
    /// use cairn::{CairnError, ErrorKind};
    /// assert_eq!(CairnError::UnknownWorld("x".into()).kind(), ErrorKind::Invalid);
    /// assert_eq!(CairnError::Denied("outside lineage".into()).kind(), ErrorKind::Forbidden);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        use cairn_memory::search::ServiceError;
        match self {
            CairnError::Memory(e) | CairnError::Search(ServiceError::Memory(e)) => e.kind(),
            CairnError::Actor(e) => e.kind(),
            CairnError::Config(_) | CairnError::ConfigLoad { .. } => ErrorKind::Invalid,
            CairnError::Search(_) => ErrorKind::Internal,
            CairnError::RateLimited { .. } => ErrorKind::RateLimited,
            CairnError::Denied(_) => ErrorKind::Forbidden,
            CairnError::InvalidReference(_) | CairnError::UnknownWorld(_) => ErrorKind::Invalid,
            CairnError::PluginTooLarge { .. } => ErrorKind::TooLarge,
            CairnError::Policy(e) => policy_kind(e),
            CairnError::DecisionLog { .. } | CairnError::BundleIo { .. } => ErrorKind::Internal,
            CairnError::InvalidBundle { .. } => ErrorKind::Invalid,
            CairnError::WorkspaceNotEmpty { .. } | CairnError::Proposed { .. } => {
                ErrorKind::Conflict
            }
        }
    }

    /// True when the caller's input caused the error.
    pub fn is_caller_error(&self) -> bool {
        self.kind().is_caller_error()
    }

    /// True when something addressed does not exist.
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }

    /// True when the same call can succeed later (a full mailbox, a
    /// restarted actor): HTTP answers 503.
    pub fn is_retryable(&self) -> bool {
        self.kind() == ErrorKind::Unavailable
    }
}

impl From<cairn_policies::PolicyError> for CairnError {
    /// The registry's and the decision log's errors keep the variants (and
    /// codes) they had when those lived in this crate: the store's as
    /// [`CairnError::Memory`], settings as [`CairnError::Config`], and so on.
    fn from(err: cairn_policies::PolicyError) -> Self {
        use cairn_policies::PolicyError as P;
        match err {
            P::Memory(e) => CairnError::Memory(e),
            P::Config(message) => CairnError::Config(message),
            P::PluginTooLarge { size, max } => CairnError::PluginTooLarge { size, max },
            P::Records { message, source } => CairnError::DecisionLog { message, source },
            other => CairnError::Policy(other),
        }
    }
}

/// The policy host's errors by kind: a bad component is the caller's; the
/// engine, its cache and the log are the machine's.
fn policy_kind(err: &cairn_policies::PolicyError) -> ErrorKind {
    use cairn_policies::PolicyError as P;
    match err {
        P::Memory(e) => e.kind(),
        P::PluginTooLarge { .. } => ErrorKind::TooLarge,
        P::Engine { .. } | P::Cache { .. } | P::DecisionLog { .. } | P::Records { .. } => {
            ErrorKind::Internal
        }
        _ => ErrorKind::Invalid,
    }
}

/// The policy host's kebab-case codes, in this crate's snake_case.
fn policy_code(err: &cairn_policies::PolicyError) -> &'static str {
    use cairn_policies::PolicyError as P;
    match err {
        P::Memory(e) => e.code(),
        P::Config(_) => "config",
        P::PluginTooLarge { .. } => "plugin_too_large",
        P::Records { .. } => "decision_log",
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
