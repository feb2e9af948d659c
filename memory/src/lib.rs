//! cairn's memory core: the raw record, the memory log and token-budgeted
//! assembly over the storage seam (`cairn-store`, re-exported as
//! [`store`]), free of actors and WebAssembly so it can be tested alone.
//!
//! The core types and how they connect:
//!
//! - [`Memory`] is the database (on a [`store::Store`], sled by default).
//! - [`Workspace`] is one tenant's handle; every read and write goes through
//!   it and it cannot name another workspace.
//! - Inside a workspace, [`Session`]s hold append-only transcripts of
//!   [`Turn`]s (the raw record), and the memory log holds typed [`Entry`]s
//!   with `replaces` chains, about [`Subject`]s.
//! - [`Workspace::assemble`] composes the memory block for a model call
//!   (invariants, recent tail, three tiers, retrieval; policy-checked) inside
//!   a token budget counted by a real tokenizer ([`TokenCounter`]).
//!
//! ```
//! use std::sync::Arc;
//! use cairn_memory::*;
//!
//! let dir = tempfile::tempdir()?;
//! let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
//! let ws = memory.workspace("acme")?;
//! ws.append_turn(&TurnInput::new("s1", Role::User, "We go with queue-based retries.").in_context("auth"))?;
//! let first = ws.append_entry(
//!     &EntryInput::new(EntryKind::Decision, "Queue-based retries").about("auth-migration").from_turns("s1", 0, 0),
//! )?;
//! let fixed = ws.append_entry(
//!     &EntryInput::new(EntryKind::Decision, "Queue-based retries with a dead-letter queue").replacing(&first.id),
//! )?;
//! let live = ws.entries(&EntryFilter::default())?;
//! assert_eq!(live.len(), 1);
//! assert_eq!(live[0].entry.id, fixed.id);
//! assert_eq!(ws.history(&first.id)?.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod assemble;
pub mod brief;
mod changes;
pub mod clock;
pub mod compact;
pub mod config;
pub mod contradict;
pub mod error;
pub mod extract;
pub mod extractor;
pub mod forget;
mod idempotency;
pub mod ids;
pub mod live;
pub mod log;
pub mod maintain;
pub mod memo;
mod memory;
mod name;
pub mod reconstruct;
pub mod record;
pub mod redact;
pub mod search;
pub mod settle;
pub mod store;
pub mod subjects;
pub mod supervise;
#[doc(hidden)]
pub mod testing;
mod text;
pub mod tokens;
pub mod topics;
mod turn_codec;

pub use assemble::{
    AssembleRequest, AssembleSettings, AssembledContext, BlockItem, Destination, Fidelity,
    ItemSource, RetrievalMode, Section, TraceItem,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{Limits, MemoryConfig, PostgresConfig, StorageBackend, StorageConfig};
pub use error::{ErrorKind, MemoryError, Result};
pub use forget::{ErasePass, ForgetTarget, Removed, Tombstone, TombstoneTarget};
pub use live::LiveList;
pub use log::{
    DecayConfig, Entry, EntryFilter, EntryInput, EntryKind, EntryStatus, EntryView, Name,
    Provenance, TaskStatus,
};
pub use maintain::{
    ArchivedItem, MaintainOptions, MaintainSettings, MaintainTrigger, MaintenanceReport,
    MaintenanceRun,
};
pub use memory::{DEFAULT_WORK_CONTEXT, Memory, WeakMemory, Workspace};
pub use record::{Ack, Role, Session, SessionKind, SessionSpec, SessionState, Turn, TurnInput};
pub use subjects::{Subject, SubjectKind};
pub use tokens::TokenCounter;

#[cfg(test)]
mod tests;

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Memory>();
    check::<Workspace>();
    check::<TokenCounter>();
}
