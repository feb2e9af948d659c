//! cairn's supervised actor runtime.
//!
//! The core types and how they connect:
//!
//! - [`ActorRuntime`] owns an actix system and a registry of live actors.
//!   The host calls it synchronously; it routes each call to an actor
//!   through a bounded mailbox and waits for the reply.
//! - A `SessionActor` per live session writes that session's turns durably
//!   (on the blocking pool, never on an arbiter thread) and forwards what it
//!   stored to its work context.
//! - A `WorkContextActor` per live work context keeps the dirty state
//!   (docs/DESIGN.md, *Dirty*; judged by a [`CaptureGate`]) and runs captures
//!   when a [`Trigger`] fires: idle, debounced defocus, pre-compaction,
//!   nightly, manual, and the session hooks.
//! - A `TopicWatcherActor` per live topic judges, off the caller's thread,
//!   the turns tier 1 of the [`TopicJudge`] named it a candidate for.
//! - A capture ([`CaptureReport`]) turns new turns into log entries with
//!   provenance, exactly once per turn (a durable high-water mark per work
//!   context and deterministic entry ids).
//!
//! Every actor runs under an actix `Supervisor`. Handlers catch panics, answer
//! the caller with [`ActorError::Panicked`] and stop the actor, which the
//! supervisor restarts; its state is rebuilt from the store. Time is read
//! only through the memory's `Clock`.
//!
//! ```
//! use std::sync::Arc;
//! use cairn_actors::{ActorConfig, ActorRuntime, Trigger};
//! use cairn_memory::{Memory, MemoryConfig, Role, SystemClock, TurnInput};
//!
//! let dir = tempfile::tempdir()?;
//! let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
//! let runtime = ActorRuntime::start(memory, ActorConfig { tick_interval_secs: 0, ..Default::default() })?;
//! runtime.ingest("acme", &[
//!     TurnInput::new("s1", Role::User, "We decided to ship on Friday.").in_context("launch"),
//!     TurnInput::new("s1", Role::User, "I still need to figure out the release notes?").in_context("launch"),
//! ])?;
//! let report = runtime.before_compaction("acme", "s1")?;
//! assert_eq!(report.trigger, Trigger::PreCompaction);
//! assert_eq!(report.spans[0].to_seq, 1);
//! // The same turns are never processed twice.
//! assert!(runtime.capture("acme", "launch")?.spans.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod capture;
mod config;
mod context;
mod error;
mod fault;
mod gate;
mod runtime;
mod session;
mod topic;

pub use capture::{
    CaptureReport, CaptureSummary, CapturedEntry, EXTRACTION_ATTEMPTS, ExtractionOutcome,
    MergedItem, SettledLoop, Trigger,
};
pub use config::{ActorConfig, Backpressure, TriggerConfig};
pub use error::{ActorError, Result};
#[doc(hidden)]
pub use fault::Fault;
pub use gate::{CaptureGate, GateInput, HeuristicGate, Significance};
pub use runtime::{ActorRuntime, RuntimeStats, SessionExtraction};
pub use topic::{NoTopics, TopicJudge, TopicTurn};

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<ActorRuntime>();
    check::<ActorError>();
}
