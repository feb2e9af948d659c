//! Audited erasure.
//!
//! `forget` is the one exception to immutability: it removes content from
//! every store that holds it and leaves a [`Tombstone`] saying what was erased,
//! when and why. Tombstones hold ids and counts, never the erased content.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What to erase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "target", content = "id", rename_all = "snake_case")]
pub enum ForgetTarget {
    /// A session: its metadata, every turn, its idempotency keys, and every
    /// log entry whose provenance is that session.
    Session(String),
    /// One log entry (its replacement links, which hold only ids, stay).
    Entry(String),
    /// A subject: its registry record, its aliases and every entry about it.
    Subject(String),
    /// A whole workspace.
    Workspace(String),
}

/// What a forget removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Removed {
    /// Sessions removed.
    pub sessions: u64,
    /// Turns removed.
    pub turns: u64,
    /// Log entries removed.
    pub entries: u64,
    /// Subjects removed (aliases not counted).
    pub subjects: u64,
}

/// The durable record of an erasure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tombstone {
    /// Tombstone id (ULID).
    pub id: String,
    /// The workspace the erasure happened in.
    pub workspace: String,
    /// What was erased.
    pub target: ForgetTarget,
    /// Why (given by the caller).
    pub reason: String,
    /// When.
    pub at: DateTime<Utc>,
    /// What was removed.
    pub removed: Removed,
    /// False only between the two steps of a workspace erasure; recovery
    /// finishes such an erasure when the store is opened again.
    pub complete: bool,
}
