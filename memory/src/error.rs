//! The memory core's error type.
//!
//! One enum for the crate, [`MemoryError`], with a stable machine-readable
//! [`code`](MemoryError::code) per variant so that the HTTP layer can map it to a
//! `{code, message}` body without string matching. Messages name the offending
//! id, slug or limit. Storage failures are wrapped in [`StoreError`].

use crate::store::StoreError;

/// Result alias for the memory core.
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;

/// Everything that can go wrong in the memory core.
///
/// Variants other than [`MemoryError::Store`], [`MemoryError::Corrupt`] and
/// [`MemoryError::Tokenizer`] are caused by the caller's input and are safe to
/// show to them (see [`MemoryError::is_caller_error`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// An id (workspace, session, work context, entry, idempotency key, tool-call
    /// id) is empty, too long or uses characters outside the allowed set.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidId {
        /// Which kind of id.
        what: &'static str,
        /// The offending value (truncated for display).
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// A text field is over its configured size limit.
    #[error("{what} is {bytes} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A required text field is empty or only whitespace.
    #[error("{what} must not be empty")]
    Empty {
        /// Which field.
        what: &'static str,
    },
    /// A field has a value that is not allowed in this combination.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which field.
        what: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// An item of a batch was refused; nothing of the batch was written.
    #[error("item {index} of the batch: {source}")]
    InBatch {
        /// Position of the item in the batch, from 0.
        index: usize,
        /// What was wrong with it.
        source: Box<MemoryError>,
    },
    /// A batch holds more items than the configured limit.
    #[error("batch of {len} items is over the limit of {limit}")]
    BatchTooLarge {
        /// Items in the batch.
        len: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A workspace holds as many of something as its configured cap allows
    /// (`[memory.limits]`); nothing was written.
    #[error(
        "workspace {workspace:?} already has {limit} {what}, the configured cap ([memory.limits] {setting})"
    )]
    CapReached {
        /// The workspace.
        workspace: String,
        /// What is capped (`sessions`, `topics`, `scheduled topics`).
        what: &'static str,
        /// The setting that sets the cap.
        setting: &'static str,
        /// The cap.
        limit: usize,
    },
    /// A `tool` turn was sent without the tool-call id that pairs it with its call.
    #[error("turn with role `tool` in session {session:?} needs a tool_call_id")]
    MissingToolCallId {
        /// The session.
        session: String,
    },
    /// The session does not exist in this workspace.
    #[error("session {session:?} not found in workspace {workspace:?}")]
    SessionNotFound {
        /// Workspace searched.
        workspace: String,
        /// The missing session.
        session: String,
    },
    /// The workspace does not exist.
    #[error("workspace {workspace:?} not found")]
    WorkspaceNotFound {
        /// The missing workspace.
        workspace: String,
    },
    /// A session was addressed with a different work context than the one it belongs to.
    #[error("session {session:?} belongs to work context {existing:?}, not {given:?}")]
    WorkContextMismatch {
        /// The session.
        session: String,
        /// The work context it was created in.
        existing: String,
        /// The one given now.
        given: String,
    },
    /// A session was bootstrapped again as a sub-agent or cron session with
    /// another kind or parent than it has: a session's lineage may only
    /// narrow (a main session without a parent may become a sub-agent),
    /// never change or widen.
    #[error("session {session:?} is a {existing} session{}; it cannot become a {given} session{}", parent_text(.existing_parent), parent_text(.given_parent))]
    LineageMismatch {
        /// The session.
        session: String,
        /// Its kind.
        existing: &'static str,
        /// Its parent.
        existing_parent: Option<String>,
        /// The kind asked for.
        given: &'static str,
        /// The parent asked for.
        given_parent: Option<String>,
    },
    /// The parent session named for a sub-agent or cron session does not exist.
    #[error("parent session {parent:?} of session {session:?} not found")]
    ParentNotFound {
        /// The new session.
        session: String,
        /// The missing parent.
        parent: String,
    },
    /// No memory-log entry has this id.
    #[error("entry {id:?} not found")]
    EntryNotFound {
        /// The id.
        id: String,
    },
    /// An entry was given an id that is already used.
    #[error("entry id {id:?} is already used")]
    DuplicateEntryId {
        /// The id.
        id: String,
    },
    /// `replaces` names an entry that does not exist.
    #[error("entry {id:?} replaces {replaces:?}, which does not exist")]
    ReplacesMissing {
        /// The new entry.
        id: String,
        /// The missing target.
        replaces: String,
    },
    /// `replaces` would make a chain loop back on itself.
    #[error("entry {id:?} replacing {replaces:?} would form a replaces cycle")]
    ReplacesCycle {
        /// The new entry.
        id: String,
        /// Its target.
        replaces: String,
    },
    /// The entry named by `replaces` was already replaced by another entry.
    #[error("entry {replaces:?} was already replaced by {by:?}; replace {by:?} instead")]
    AlreadyReplaced {
        /// The target.
        replaces: String,
        /// The entry that replaced it.
        by: String,
    },
    /// A provenance turn range does not lie inside the session's transcript.
    #[error("turn range {from}-{to} is not inside session {session:?} (turns 0-{last})")]
    InvalidTurnRange {
        /// The session.
        session: String,
        /// Range start.
        from: u64,
        /// Range end (inclusive).
        to: u64,
        /// Last sequence number of the session, or 0 if it has none.
        last: u64,
    },
    /// A subject slug is not lowercase kebab-case or is too long.
    #[error("invalid subject slug {slug:?}: {reason}")]
    InvalidSlug {
        /// The slug.
        slug: String,
        /// Why it was refused.
        reason: String,
    },
    /// No subject has this slug (nor is it an alias of one).
    #[error("subject {slug:?} not found")]
    SubjectNotFound {
        /// The slug.
        slug: String,
    },
    /// A subject with this slug (or an alias with it) already exists.
    #[error("subject {slug:?} already exists")]
    SubjectExists {
        /// The slug.
        slug: String,
    },
    /// A topic definition was refused; nothing was written.
    #[error("invalid topic field `{field}`: {reason}")]
    InvalidTopic {
        /// The offending field, e.g. `triggers[1].regex`, `subscriptions[0]`.
        field: String,
        /// Why it was refused.
        reason: String,
    },
    /// No topic has this name in the workspace.
    #[error("topic {name:?} not found")]
    TopicNotFound {
        /// The name.
        name: String,
    },
    /// No access token has this id.
    #[error("access token {id:?} not found")]
    TokenNotFound {
        /// The id.
        id: String,
    },
    /// A topic with this name already exists.
    #[error("topic {name:?} already exists")]
    TopicExists {
        /// The name.
        name: String,
    },
    /// The topic has no pending proposal for this turn.
    #[error("topic {topic:?} has no pending proposal for turn {turn}")]
    ProposalNotFound {
        /// The topic.
        topic: String,
        /// The turn, `session/seq`.
        turn: String,
    },
    /// Nothing waits for a confirmation of this item.
    #[error("no confirmation is pending for {item:?}")]
    ConfirmationNotFound {
        /// The item (`entry e1`, `turn s1:4`).
        item: String,
    },
    /// The topic has no pending assertion candidate for this turn.
    #[error("topic {topic:?} has no pending assertion candidate for turn {turn}")]
    CandidateNotFound {
        /// The topic.
        topic: String,
        /// The turn, `session/seq`.
        turn: String,
    },
    /// A forget was requested without a reason; erasure is audited.
    #[error("forget needs a non-empty reason (it is recorded in the tombstone)")]
    ForgetWithoutReason,
    /// The assembly budget cannot hold even the block's fixed header.
    #[error("token budget {budget} is too small: the block header alone needs {needed}")]
    BudgetTooSmall {
        /// The budget asked for.
        budget: usize,
        /// Tokens the fixed parts need.
        needed: usize,
    },
    /// The assembly's invariants (standing directives, pinned items, the
    /// minimum recent tail) alone need more tokens than the budget.
    #[error(
        "token budget {budget} is too small: the invariants alone ({parts}) need {needed} tokens"
    )]
    InvariantsExceedBudget {
        /// The budget asked for.
        budget: usize,
        /// Tokens the invariants need.
        needed: usize,
        /// What they are, e.g. `2 directives, 1 pinned entry, the last 4 turns`.
        parts: String,
    },
    /// A seam of the assembly (retriever or policy check) failed.
    #[error("assembly {seam} failed: {message}")]
    AssemblySeam {
        /// `retriever` or `policy`.
        seam: &'static str,
        /// What failed.
        message: String,
    },
    /// No compaction summary has this id.
    #[error("summary {id:?} not found")]
    SummaryNotFound {
        /// The id.
        id: String,
    },
    /// A summary's expansion does not match the hash of the turns it was
    /// made from (the record under it changed or is gone).
    #[error("summary {id:?} does not expand to its sources: {reason}")]
    SummaryMismatch {
        /// The summary.
        id: String,
        /// What differs.
        reason: String,
    },
    /// No maintenance run has this id in the workspace.
    #[error("maintenance run {run:?} not found")]
    RunNotFound {
        /// The run id.
        run: String,
    },
    /// A maintenance run cannot be undone now.
    #[error("cannot undo maintenance {run}: {reason}")]
    UndoConflict {
        /// The run id.
        run: String,
        /// Why (names the later run or the replacing entry).
        reason: String,
    },
    /// A restore named an item that is not archived.
    #[error("{item} is not archived")]
    NotArchived {
        /// `entry <id>` or `session <id>`.
        item: String,
    },
    /// The configured tokenizer is unknown or failed to load.
    #[error("tokenizer {name:?}: {reason}")]
    Tokenizer {
        /// The encoding name.
        name: String,
        /// What failed.
        reason: String,
    },
    /// A stored record could not be decoded.
    #[error("corrupt {what} record at key {key:?}: {reason}")]
    Corrupt {
        /// Which record type.
        what: &'static str,
        /// The key, lossily printed.
        key: String,
        /// The decoder's message.
        reason: String,
    },
    /// The storage backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl MemoryError {
    /// A stable, machine-readable code for this error (`snake_case`).
    ///
    /// ```
    /// use cairn_memory::MemoryError;
    /// let err = MemoryError::EntryNotFound { id: "x".into() };
    /// assert_eq!(err.code(), "entry_not_found");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            MemoryError::InvalidId { .. } => "invalid_id",
            MemoryError::TooLarge { .. } => "too_large",
            MemoryError::Empty { .. } => "empty",
            MemoryError::Invalid { .. } => "invalid",
            MemoryError::InBatch { source, .. } => source.code(),
            MemoryError::BatchTooLarge { .. } => "batch_too_large",
            MemoryError::CapReached { .. } => "cap_reached",
            MemoryError::MissingToolCallId { .. } => "missing_tool_call_id",
            MemoryError::SessionNotFound { .. } => "session_not_found",
            MemoryError::WorkspaceNotFound { .. } => "workspace_not_found",
            MemoryError::WorkContextMismatch { .. } => "work_context_mismatch",
            MemoryError::LineageMismatch { .. } => "lineage_mismatch",
            MemoryError::ParentNotFound { .. } => "parent_not_found",
            MemoryError::EntryNotFound { .. } => "entry_not_found",
            MemoryError::DuplicateEntryId { .. } => "duplicate_entry_id",
            MemoryError::ReplacesMissing { .. } => "replaces_missing",
            MemoryError::ReplacesCycle { .. } => "replaces_cycle",
            MemoryError::AlreadyReplaced { .. } => "already_replaced",
            MemoryError::InvalidTurnRange { .. } => "invalid_turn_range",
            MemoryError::InvalidSlug { .. } => "invalid_slug",
            MemoryError::SubjectNotFound { .. } => "subject_not_found",
            MemoryError::TokenNotFound { .. } => "token_not_found",
            MemoryError::SubjectExists { .. } => "subject_exists",
            MemoryError::InvalidTopic { .. } => "invalid_topic",
            MemoryError::TopicNotFound { .. } => "topic_not_found",
            MemoryError::TopicExists { .. } => "topic_exists",
            MemoryError::ProposalNotFound { .. } => "proposal_not_found",
            MemoryError::ConfirmationNotFound { .. } => "confirmation_not_found",
            MemoryError::CandidateNotFound { .. } => "candidate_not_found",
            MemoryError::ForgetWithoutReason => "forget_without_reason",
            MemoryError::BudgetTooSmall { .. } => "budget_too_small",
            MemoryError::InvariantsExceedBudget { .. } => "invariants_exceed_budget",
            MemoryError::AssemblySeam { .. } => "assembly_seam",
            MemoryError::SummaryNotFound { .. } => "summary_not_found",
            MemoryError::SummaryMismatch { .. } => "summary_mismatch",
            MemoryError::RunNotFound { .. } => "run_not_found",
            MemoryError::UndoConflict { .. } => "undo_conflict",
            MemoryError::NotArchived { .. } => "not_archived",
            MemoryError::Tokenizer { .. } => "tokenizer",
            MemoryError::Corrupt { .. } => "corrupt",
            MemoryError::Store(_) => "storage",
        }
    }

    /// What kind of failure this is: what a surface keys its answer on
    /// (an HTTP status, a CLI exit code). One exhaustive match, so a new
    /// variant must say its kind.
    ///
    /// ```
    /// use cairn_memory::{ErrorKind, MemoryError};
    /// assert_eq!(MemoryError::EntryNotFound { id: "x".into() }.kind(), ErrorKind::NotFound);
    /// assert_eq!(MemoryError::ForgetWithoutReason.kind(), ErrorKind::Invalid);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            MemoryError::InBatch { source, .. } => source.kind(),
            MemoryError::SessionNotFound { .. }
            | MemoryError::WorkspaceNotFound { .. }
            | MemoryError::EntryNotFound { .. }
            | MemoryError::SubjectNotFound { .. }
            | MemoryError::TopicNotFound { .. }
            | MemoryError::TokenNotFound { .. }
            | MemoryError::ProposalNotFound { .. }
            | MemoryError::ConfirmationNotFound { .. }
            | MemoryError::CandidateNotFound { .. }
            | MemoryError::SummaryNotFound { .. }
            | MemoryError::RunNotFound { .. } => ErrorKind::NotFound,
            MemoryError::TooLarge { .. } | MemoryError::BatchTooLarge { .. } => ErrorKind::TooLarge,
            MemoryError::SubjectExists { .. }
            | MemoryError::TopicExists { .. }
            | MemoryError::AlreadyReplaced { .. }
            | MemoryError::DuplicateEntryId { .. }
            | MemoryError::WorkContextMismatch { .. }
            | MemoryError::LineageMismatch { .. }
            | MemoryError::UndoConflict { .. }
            | MemoryError::NotArchived { .. } => ErrorKind::Conflict,
            MemoryError::InvalidId { .. }
            | MemoryError::Empty { .. }
            | MemoryError::Invalid { .. }
            | MemoryError::MissingToolCallId { .. }
            | MemoryError::CapReached { .. }
            | MemoryError::ParentNotFound { .. }
            | MemoryError::ReplacesMissing { .. }
            | MemoryError::ReplacesCycle { .. }
            | MemoryError::InvalidTurnRange { .. }
            | MemoryError::InvalidSlug { .. }
            | MemoryError::ForgetWithoutReason
            | MemoryError::InvalidTopic { .. }
            | MemoryError::BudgetTooSmall { .. }
            | MemoryError::InvariantsExceedBudget { .. } => ErrorKind::Invalid,
            MemoryError::AssemblySeam { .. }
            | MemoryError::SummaryMismatch { .. }
            | MemoryError::Tokenizer { .. }
            | MemoryError::Corrupt { .. } => ErrorKind::Internal,
            MemoryError::Store(e) if e.is_retryable() => ErrorKind::Unavailable,
            MemoryError::Store(StoreError::Unsupported { .. } | StoreError::Config(_)) => {
                ErrorKind::Invalid
            }
            MemoryError::Store(_) => ErrorKind::Internal,
        }
    }

    /// True when the caller's input caused the error.
    pub fn is_caller_error(&self) -> bool {
        self.kind().is_caller_error()
    }

    /// True when the error says something addressed does not exist (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }
}

/// What kind of failure an error is, shared by every cairn crate's error
/// type: what a surface keys its answer on (an HTTP status, a CLI exit
/// code), instead of comparing code strings.
///
/// ```
/// use cairn_memory::ErrorKind;
/// assert!(ErrorKind::Conflict.is_caller_error());
/// assert!(!ErrorKind::Unavailable.is_caller_error());
/// assert_eq!(ErrorKind::RateLimited.as_str(), "rate_limited");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Something addressed does not exist.
    NotFound,
    /// The input is malformed or breaks a rule.
    Invalid,
    /// The input is larger than a limit.
    TooLarge,
    /// The input conflicts with what is stored (a duplicate, a replaced entry).
    Conflict,
    /// The caller went past a rate limit; retry later.
    RateLimited,
    /// The caller may not read or do this.
    Forbidden,
    /// Temporarily unable (a full mailbox, a restarted actor); the same
    /// call can succeed later.
    Unavailable,
    /// Something failed inside cairn (storage, a corrupt record, a bug).
    Internal,
}

impl ErrorKind {
    /// The kind's `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::Invalid => "invalid",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Conflict => "conflict",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
        }
    }

    /// True when the caller's input or identity caused the error (as
    /// opposed to the machine's state).
    pub fn is_caller_error(self) -> bool {
        !matches!(self, ErrorKind::Unavailable | ErrorKind::Internal)
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// ` (parent "p")`, or nothing, for an error message.
fn parent_text(parent: &Option<String>) -> String {
    parent
        .as_ref()
        .map(|p| format!(" (parent {p:?})"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use anyhow::Context as _;

    use super::*;
    use crate::store::{PostgresConfig, PostgresStore};

    /// A database that is not there is `unavailable` to the core's callers
    /// (the store's own test checks the store's error).
    #[test]
    fn an_unreachable_database_is_unavailable() -> anyhow::Result<()> {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            listener.local_addr()?.port()
        };
        let config = PostgresConfig {
            url: format!("postgresql://cairn@127.0.0.1:{port}/cairn"),
            connect_timeout_ms: 500,
            ..PostgresConfig::default()
        };
        let err = PostgresStore::connect(&config)
            .err()
            .context("connected to nothing")?;
        assert_eq!(MemoryError::from(err).kind(), ErrorKind::Unavailable);
        Ok(())
    }
}
