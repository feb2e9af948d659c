//! cairn's policy host: user-authored WebAssembly components behind the
//! `cairn:policy@0.1.0` WIT package (`wit/`) decide what cairn captures,
//! what topics collect, and what memory may be shown where.
//!
//! Four types carry the crate:
//!
//! - [`PolicyHost`]: one shared wasmtime engine, the compile cache (memory
//!   and, optionally, disk, keyed by content hash) and the [`DecisionSink`].
//! - [`PreparedPlugin`]: a component compiled, linked and pre-instantiated
//!   for one [`World`] ([`SignificanceGate`], [`TopicDirective`],
//!   [`MemoryPolicy`]): the slow work, done off the hot path.
//! - [`PolicySlot`]: serves decisions from the current generation of a
//!   plugin under per-call [`Limits`] (fuel, a wall-clock deadline, memory,
//!   output size; the stack limit is engine-wide), contains faults, trips a circuit breaker, and
//!   swaps generations atomically.
//! - [`Decided`]: the decision, stamped with its [`DecisionId`] and
//!   [`PolicyGenerationId`], and its [`Outcome`]: the plugin's checked
//!   answer, or the world's fail-safe after a [`Fault`].
//!
//! Above the host, the running policies of one cairn: [`Policies`] (the
//! three slots, the registry of installed plugins in the memory core's store,
//! install and hot swap) and the durable [`DecisionLog`] behind them, with
//! the word classifier ([`activity_type`]) the significance gate's context
//! is filled with. The facade (`cairn::Cairn`) holds one `Policies`.
//!
//! A plugin that traps, loops, runs past its deadline, exhausts its memory,
//! overflows its stack or returns an invalid or oversized answer never takes the host down and
//! never gets "allow everything": the store is dropped, the fault is logged
//! with its reason code, and the world's documented fail-safe applies
//! (significance: observe only; topic: do not collect; memory: deny).
//!
//! ```
//! use std::sync::Arc;
//! use cairn_policies::*;
//!
//! # fn main() -> Result<(), PolicyError> {
//! let log = Arc::new(MemorySink::default());
//! let host = PolicyHost::new(HostConfig::default(), log.clone())?;
//! let policies = PolicySet::with_defaults(&host)?;
//!
//! // Research inside a live work context lowers the gate's threshold
//! // (0.5 × 0.6): a plain research note is captured.
//! let mut turn = TurnView::new("s-1", 4, TurnRole::User, "Look up how courts read scienter here");
//! turn.work_context_id = Some("wc-brief".into());
//! turn.entity_mentions = vec!["scienter".into()];
//! let research = GateContext {
//!     activity_type: ActivityType::Research,
//!     has_active_work_context: true,
//!     ..GateContext::default()
//! };
//! let decided = policies.significance.decide(&SignificanceInput { turn, context: research })?;
//! assert!(decided.decision.captures());
//! assert!(decided.decision.reason_codes.contains(&ReasonCode::ResearchThreshold));
//!
//! // Every decision is logged with the generation that made it.
//! let record = &log.records()[0];
//! assert_eq!(record.generation, decided.generation);
//! # Ok(())
//! # }
//! ```

/// Implements serde for a unit-only enum as its name (the text the `$name`
/// method gives), in every format: JSON and TOML see the same string as a
/// derive with kebab-case names would give, and the binary decision log
/// ([`decision_codec`]) stores the name too, not the variant's index, so a
/// case added anywhere in a later WIT version leaves old logs readable.
macro_rules! serde_by_name {
    ($ty:ident :: $name:ident, [$($variant:ident),* $(,)?]) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.$name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                const ALL: &[$ty] = &[$($ty::$variant),*];
                let text = <String as serde::Deserialize>::deserialize(d)?;
                ALL.iter().copied().find(|v| v.$name() == text).ok_or_else(|| {
                    let names: Vec<String> =
                        ALL.iter().map(|v| format!("`{}`", v.$name())).collect();
                    serde::de::Error::custom(format_args!(
                        "unknown variant `{text}`, expected one of {}",
                        names.join(", ")
                    ))
                })
            }
        }
    };
}

/// Declares a unit-only enum whose cases have stable names, from one list:
/// the enum, the method `$name` that gives a case's name, `Display` as that
/// name, and serde by name ([`serde_by_name!`]).
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $ty:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )*
        }
        $(#[$fmeta:meta])*
        fn $name:ident;
    ) => {
        $(#[$meta])*
        pub enum $ty {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $ty {
            $(#[$fmeta])*
            pub fn $name(self) -> &'static str {
                match self {
                    $( $ty::$variant => $text, )*
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.$name())
            }
        }

        serde_by_name!($ty::$name, [$($variant),*]);
    };
}

mod activity;
mod bindings;
mod cache;
pub mod decision_codec;
mod decision_files;
mod decision_log;
mod decisions;
pub mod defaults;
mod digest;
mod error;
mod fault;
mod host;
mod memory_policy;
mod registry;
mod significance;
mod slot;
mod store;
mod ticker;
mod topic;
mod vocab;
mod world;

pub use activity::{activity_type, work_phase};
pub use cache::{CacheOutcome, CacheStats, MAX_IN_MEMORY, MAX_ON_DISK};
pub use decision_log::{
    DECISIONS_NAMESPACE, DecisionLog, DecisionLogConfig, DecisionLogStats, DecisionQuery,
    GenerationCounts, MAX_QUERY_LIMIT,
};
pub use decisions::{
    DecisionId, DecisionOutput, DecisionRecord, DecisionSink, MemorySink, Outcome,
    PolicyGenerationId, SinkError,
};
pub use defaults::{BuiltinPlugin, PolicySet};
pub use digest::InputsDigest;
pub use error::{BoxError, PolicyError, Result};
pub use fault::{Fault, FaultKind};
pub use host::{HostConfig, Limits, PolicyHost, PreparedPlugin};
pub use memory_policy::{
    Action, ContentFidelity, ContentReference, Destination, LearningScope, Locality,
    MemoryPolicyDecision, MutationAuthority, ObjectKind, PolicyObligation, PolicyRequest,
    PrincipalKind, PrincipalRef, Sensitivity,
};
pub use registry::{
    InstallReport, InstalledPlugin, PLUGINS_NAMESPACE, PluginStatus, PluginsReport, Policies,
    PolicyConfig,
};
pub use significance::{
    CollectionDecision, DEFAULT_BASE_THRESHOLD, DEFAULT_RESEARCH_MULTIPLIER, GateContext,
    SignificanceDecision, SignificanceInput,
};
pub use slot::{Decided, PolicySlot, SlotStatus};
pub use ticker::TickerStatus;
pub use topic::{
    Activation, CollectionMode, EntryView, GateSignals, MatchCriterion, OutputTarget, SourceClass,
    SourceScope, TopicDefinition, TopicDirectiveDecision, TopicInput, TopicSubject,
};
pub use vocab::{
    ActivityType, EntryKind, ExtractionDepth, ReasonCode, SessionKind, TurnRole, TurnView,
    WorkPhase,
};
pub use world::{MemoryPolicy, SignificanceGate, TopicDirective, World, WorldKind};

/// The public types embedders share across threads are `Send + Sync`.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PolicyHost>();
    assert_send_sync::<PolicySlot<SignificanceGate>>();
    assert_send_sync::<PolicySlot<TopicDirective>>();
    assert_send_sync::<PolicySlot<MemoryPolicy>>();
    assert_send_sync::<PreparedPlugin<MemoryPolicy>>();
    assert_send_sync::<PolicySet>();
    assert_send_sync::<MemorySink>();
    assert_send_sync::<DecisionRecord>();
    assert_send_sync::<PolicyError>();
    assert_send_sync::<Policies>();
    assert_send_sync::<DecisionLog>();
};
