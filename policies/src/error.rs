//! [`PolicyError`]: what can go wrong installing plugins, logging
//! decisions, or reading and writing the registry and the decision log.
//!
//! A plugin that faults while deciding is *not* an error: that is an
//! expected outcome, returned as a value ([`Outcome::FailSafe`]) with the
//! world's fail-safe decision. Errors are for the operator: a file that is
//! not a component, a component for the wrong world, a decision log that
//! cannot write. wasmtime's own error type never crosses this crate's edge;
//! it is rendered into the variants' messages here.
//!
//! [`Outcome::FailSafe`]: crate::Outcome::FailSafe

use std::path::PathBuf;

use crate::decisions::{DecisionId, SinkError};
use crate::fault::Fault;
use crate::world::WorldKind;

/// The crate's result type.
pub type Result<T, E = PolicyError> = std::result::Result<T, E>;

/// A boxed cause, kept so that `std::error::Error::source` walks to it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error of the policy host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A plugin name is not usable (empty, too long, odd characters).
    #[error("invalid plugin name `{name}`: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The bytes are not a WebAssembly component wasmtime can compile.
    #[error("plugin `{plugin}` is not a valid WebAssembly component: {message}")]
    Compile {
        /// The plugin's name.
        plugin: String,
        /// wasmtime's explanation.
        message: String,
    },
    /// The component does not implement the world it was installed for.
    #[error("plugin `{plugin}` does not implement the `{world}` world: {message}")]
    WrongWorld {
        /// The plugin's name.
        plugin: String,
        /// The world it was installed for.
        world: WorldKind,
        /// wasmtime's explanation.
        message: String,
    },
    /// The plugin could not be linked or instantiated while installing it
    /// (for example it traps while initialising). Nothing was swapped.
    #[error("plugin `{plugin}` could not be instantiated: {message}")]
    Instantiate {
        /// The plugin's name.
        plugin: String,
        /// What went wrong.
        message: String,
    },
    /// The plugin faulted on its canary decision (an ordinary input every
    /// new instance decides before its generation serves). Nothing was
    /// swapped.
    #[error("plugin `{plugin}` faulted on its canary decision: {fault}")]
    Canary {
        /// The plugin's name.
        plugin: String,
        /// The fault.
        fault: Fault,
    },
    /// wasmtime rejected the engine configuration.
    #[error("wasmtime engine configuration rejected: {message}")]
    Engine {
        /// wasmtime's explanation.
        message: String,
    },
    /// The compile cache directory could not be created or read.
    #[error("compile cache at {}: {source}", path.display())]
    Cache {
        /// The cache directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A plugin file could not be read.
    #[error("reading plugin file {}: {source}", path.display())]
    ReadPlugin {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The decision sink refused a record. The decision was made but not
    /// logged, so it is not returned.
    #[error("the decision log could not record decision {decision_id}: {source}")]
    DecisionLog {
        /// The decision that was not logged.
        decision_id: DecisionId,
        /// The sink's error.
        #[source]
        source: SinkError,
    },
    /// The store under the registry or the decision log refused or failed
    /// (see [`cairn_memory::MemoryError::code`]).
    #[error(transparent)]
    Memory(#[from] cairn_memory::MemoryError),
    /// The settings are invalid (the message names the setting).
    #[error("configuration: {0}")]
    Config(String),
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
    /// The decision log or the plugin registry failed (a record that does
    /// not decode, a segment file that cannot be written, a writer that
    /// stopped…).
    #[error("decision log: {message}")]
    Records {
        /// What failed.
        message: String,
        /// The cause, when there is one.
        #[source]
        source: Option<BoxError>,
    },
}

impl PolicyError {
    /// A stable, machine-readable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyError::InvalidName { .. } => "invalid-plugin-name",
            PolicyError::Compile { .. } => "plugin-compile",
            PolicyError::WrongWorld { .. } => "plugin-wrong-world",
            PolicyError::Instantiate { .. } => "plugin-instantiate",
            PolicyError::Canary { .. } => "plugin-canary",
            PolicyError::Engine { .. } => "policy-engine",
            PolicyError::Cache { .. } => "policy-cache",
            PolicyError::ReadPlugin { .. } => "plugin-read",
            PolicyError::DecisionLog { .. } | PolicyError::Records { .. } => "decision-log",
            PolicyError::Memory(e) => e.code(),
            PolicyError::Config(_) => "config",
            PolicyError::PluginTooLarge { .. } => "plugin-too-large",
        }
    }

    /// A decision-log or plugin-registry failure without a further cause.
    pub(crate) fn records(message: impl Into<String>) -> Self {
        PolicyError::Records {
            message: message.into(),
            source: None,
        }
    }

    /// A decision-log or plugin-registry failure caused by `source`.
    pub(crate) fn records_from(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        PolicyError::Records {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

impl From<cairn_memory::store::StoreError> for PolicyError {
    /// Storage errors of the system namespaces (decision log, plugin
    /// registry) read as the memory core's.
    fn from(err: cairn_memory::store::StoreError) -> Self {
        PolicyError::Memory(err.into())
    }
}

/// Renders a wasmtime error with its chain of causes.
pub(crate) fn message(err: &wasmtime::Error) -> String {
    format!("{err:#}")
}
