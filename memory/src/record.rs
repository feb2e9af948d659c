//! The raw record: sessions and their append-only transcripts.
//!
//! A [`Session`] belongs to one work context, has a [`SessionKind`] (main,
//! sub-agent, cron) and optionally a parent session. Its transcript is a
//! sequence of [`Turn`]s numbered from 0 without gaps. Turns are never
//! modified or deleted through the normal API; only an audited `forget` erases
//! them (see [`crate::forget`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Who produced a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The human.
    User,
    /// The model.
    Assistant,
    /// A tool result (paired with its call through `tool_call_id`).
    Tool,
    /// A system or gateway message.
    System,
}

impl Role {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
        }
    }
}

/// What kind of session this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SessionKind {
    /// A conversation with the user.
    #[default]
    Main,
    /// A session spawned by another session's agent.
    Subagent,
    /// A scheduled, unattended session.
    Cron,
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// Taking turns.
    #[default]
    Open,
    /// The host called `session_end`.
    Ended,
}

/// A session's durable metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Session {
    /// Session id (unique in the workspace).
    pub id: String,
    /// The work context (project / piece of work) it belongs to.
    pub work_context: String,
    /// Main, sub-agent or cron.
    pub kind: SessionKind,
    /// The session that spawned this one, for sub-agent and cron lineage.
    pub parent: Option<String>,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// Timestamp of the last turn, if any (derived from the transcript).
    pub last_turn_at: Option<DateTime<Utc>>,
    /// Sequence number the next turn will get (= number of turns; derived
    /// from the transcript's last turn, not stored).
    pub next_seq: u64,
    /// Open or ended.
    pub state: SessionState,
    /// How many times the host reset the session (`before_reset`).
    pub resets: u32,
}

impl Session {
    /// True for main (user-facing) sessions.
    pub fn is_main(&self) -> bool {
        self.kind == SessionKind::Main
    }
}

/// How the host describes a session when it starts one (`bootstrap`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// Session id.
    pub id: String,
    /// Work context; `default` when absent.
    #[serde(default)]
    pub work_context: Option<String>,
    /// Main (default), sub-agent or cron.
    #[serde(default)]
    pub kind: SessionKind,
    /// Parent session id, for sub-agent and cron sessions.
    #[serde(default)]
    pub parent: Option<String>,
}

/// A turn as the host hands it in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TurnInput {
    /// Session id. The session is created (as a main session) on its first turn
    /// unless it was bootstrapped before.
    pub session: String,
    /// Work context; must match the session's if the session exists.
    #[serde(default)]
    pub work_context: Option<String>,
    /// Who spoke.
    pub role: Role,
    /// The text.
    pub content: String,
    /// Pairs a tool call with its result; required for role `tool`.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// A key that makes retries safe: appending again with a used key writes
    /// nothing and returns the original sequence number.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// When the turn happened; the clock's time when absent.
    #[serde(default)]
    pub timestamp: Option<DateTime<Utc>>,
}

impl TurnInput {
    /// A turn with the required fields only.
    ///
    /// ```
    /// use cairn_memory::{Role, TurnInput};
    /// let turn = TurnInput::new("s1", Role::User, "hello");
    /// assert_eq!(turn.session, "s1");
    /// ```
    pub fn new(session: &str, role: Role, content: &str) -> Self {
        TurnInput {
            session: session.to_owned(),
            work_context: None,
            role,
            content: content.to_owned(),
            tool_call_id: None,
            idempotency_key: None,
            timestamp: None,
        }
    }

    /// Sets the work context.
    pub fn in_context(mut self, work_context: &str) -> Self {
        self.work_context = Some(work_context.to_owned());
        self
    }

    /// Sets the idempotency key.
    pub fn with_idempotency_key(mut self, key: &str) -> Self {
        self.idempotency_key = Some(key.to_owned());
        self
    }

    /// Sets the tool-call id.
    pub fn with_tool_call_id(mut self, id: &str) -> Self {
        self.tool_call_id = Some(id.to_owned());
        self
    }

    /// Sets the timestamp.
    pub fn at(mut self, timestamp: DateTime<Utc>) -> Self {
        self.timestamp = Some(timestamp);
        self
    }
}

/// A stored turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Turn {
    /// Workspace it belongs to.
    pub workspace: String,
    /// Session it belongs to.
    pub session: String,
    /// The session's work context.
    pub work_context: String,
    /// Position in the session, from 0, without gaps.
    pub seq: u64,
    /// Who spoke.
    pub role: Role,
    /// The text.
    pub content: String,
    /// Pairs a tool call and its result.
    pub tool_call_id: Option<String>,
    /// When it happened.
    pub timestamp: DateTime<Utc>,
    /// blake3 of `content`, hex.
    pub content_hash: String,
}

/// The answer to an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ack {
    /// The turn's sequence number in its session.
    pub seq: u64,
    /// True when the idempotency key was already used: nothing was written and
    /// `seq` is the original turn's.
    pub duplicate: bool,
}

/// blake3 hash of a turn's content, hex.
pub fn content_hash(content: &str) -> String {
    blake3::hash(content.as_bytes()).to_hex().to_string()
}

pub(crate) fn turn_key(session: &str, seq: u64) -> Vec<u8> {
    let mut key = session_prefix(session);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Key prefix of everything stored per session: the id and a NUL (ids never contain NUL).
pub(crate) fn session_prefix(session: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(session.len() + 9);
    key.extend_from_slice(session.as_bytes());
    key.push(0);
    key
}

pub(crate) fn idempotency_key(session: &str, key: &str) -> Vec<u8> {
    let mut out = session_prefix(session);
    out.extend_from_slice(key.as_bytes());
    out
}

pub(crate) fn work_context_key(work_context: &str, session: &str) -> Vec<u8> {
    let mut out = session_prefix(work_context);
    out.extend_from_slice(session.as_bytes());
    out
}
