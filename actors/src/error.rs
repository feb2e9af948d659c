//! The actor runtime's error type.

use cairn_memory::{ErrorKind, MemoryError};

/// Result alias for the actor runtime.
pub type Result<T, E = ActorError> = std::result::Result<T, E>;

/// Everything the actor runtime can fail with.
///
/// A full mailbox is an error here (not a value) because the host asked for
/// work to be done and it was not: the caller must retry later. The turns of
/// a refused call were not written.
///
/// ```
/// use cairn_actors::ActorError;
/// let e = ActorError::Backpressure { actor: "session acme/s1".into(), capacity: 64 };
/// assert_eq!(e.code(), "backpressure");
/// assert!(e.is_retryable());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActorError {
    /// The memory core refused or failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The actor's mailbox is full: the consumer is behind. Nothing was
    /// written; retry later.
    #[error("{actor} is busy: its mailbox of {capacity} messages is full; retry later")]
    Backpressure {
        /// Which actor (`session <workspace>/<id>` or `context <workspace>/<id>`).
        actor: String,
        /// Its mailbox capacity.
        capacity: usize,
    },
    /// The actor panicked while handling the request. It was restarted from
    /// durable state; whatever the request wrote durably is kept (retry with
    /// the same idempotency keys to learn the outcome).
    #[error("{actor} failed while handling the request and was restarted; retry it")]
    Panicked {
        /// Which actor.
        actor: String,
    },
    /// No answer within the configured call timeout.
    #[error("{actor} did not answer within {millis} ms")]
    Timeout {
        /// Which actor.
        actor: String,
        /// The timeout.
        millis: u64,
    },
    /// The runtime is shutting down or could not start.
    #[error("actor runtime unavailable: {0}")]
    Unavailable(String),
    /// A blocking storage task failed to run (its thread panicked).
    #[error("storage task failed: {0}")]
    Task(String),
    /// The topic gate behind a watcher failed on a turn (the turn is
    /// stored; the decision was not written).
    #[error("topic gate of {topic} failed: {reason}")]
    TopicGate {
        /// The topic.
        topic: String,
        /// What went wrong.
        reason: String,
    },
}

impl ActorError {
    /// A stable machine-readable code (`snake_case`).
    pub fn code(&self) -> &'static str {
        match self {
            ActorError::Memory(e) => e.code(),
            ActorError::Backpressure { .. } => "backpressure",
            ActorError::Panicked { .. } => "actor_restarted",
            ActorError::Timeout { .. } => "actor_timeout",
            ActorError::Unavailable(_) => "unavailable",
            ActorError::Task(_) => "task_failed",
            ActorError::TopicGate { .. } => "topic_gate_failed",
        }
    }

    /// What kind of failure this is (see [`ErrorKind`]).
    ///
    /// ```
    /// use cairn_actors::ActorError;
    /// use cairn_memory::ErrorKind;
    /// assert_eq!(ActorError::Unavailable("stopping".into()).kind(), ErrorKind::Unavailable);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            ActorError::Memory(e) => e.kind(),
            ActorError::Backpressure { .. }
            | ActorError::Panicked { .. }
            | ActorError::Timeout { .. }
            | ActorError::Unavailable(_) => ErrorKind::Unavailable,
            // A storage task that died: a bug or a broken store.
            ActorError::Task(_) | ActorError::TopicGate { .. } => ErrorKind::Internal,
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

    /// True when retrying the same call later can succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind() == ErrorKind::Unavailable
    }
}
