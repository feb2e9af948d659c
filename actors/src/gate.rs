//! The capture gate: does a turn make its work context dirty?
//!
//! [`CaptureGate`] is the seam where the WebAssembly policy of the
//! `significance-gate` world (`cairn_policies::SignificanceGate`, hosted by
//! `policies/`) slots in: `cairn::Cairn` starts
//! the runtime with the installed wasm gate (`runtime/src/policy.rs`);
//! [`ActorRuntime::start`](crate::ActorRuntime::start) uses
//! [`HeuristicGate`] (the dirty rules of docs/DESIGN.md: user turns, tool use, known-entity
//! mentions). A gate is called on an arbiter thread for every stored turn
//! (and again when an actor rebuilds its state from the store), so it must
//! be cheap, must not block and must not panic.

use cairn_memory::extract::mentions;
use cairn_memory::{Role, SessionKind, Subject};

/// What a gate sees of one stored turn.
#[derive(Debug, Clone, Copy)]
pub struct GateInput<'a> {
    /// The session the turn belongs to.
    pub session: &'a str,
    /// Its kind (main, sub-agent, cron).
    pub session_kind: SessionKind,
    /// The session's work context.
    pub work_context: &'a str,
    /// The turn's sequence number in its session.
    pub seq: u64,
    /// Who spoke.
    pub role: Role,
    /// The text.
    pub content: &'a str,
    /// True for a tool call or result.
    pub tool_use: bool,
    /// The workspace's subject registry (known entities).
    pub subjects: &'a [Subject],
}

/// What a gate decided about one turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Significance {
    /// Counts towards the dirty threshold of user turns.
    pub user_turn: bool,
    /// A tool was used (dirty at once).
    pub tool_use: bool,
    /// Known subjects mentioned (dirty at once when non-empty).
    pub mentions: Vec<String>,
    /// A policy judged the turn worth capturing (dirty at once). The
    /// heuristic gate never sets it; the wasm gate sets it when the plugin
    /// asks for any extraction.
    pub significant: bool,
}

impl Significance {
    /// True when the turn alone makes its context dirty.
    pub fn is_immediately_dirty(&self) -> bool {
        self.significant || self.tool_use || !self.mentions.is_empty()
    }
}

/// Decides how significant a turn is for capture. (Named apart from the
/// `significance-gate` WIT world, which is one way to implement it.)
///
/// ```
/// use cairn_actors::{GateInput, HeuristicGate, CaptureGate};
/// use cairn_memory::{Role, SessionKind};
/// let s = HeuristicGate.assess(&GateInput {
///     session: "s1",
///     session_kind: SessionKind::Main,
///     work_context: "launch",
///     seq: 0,
///     role: Role::User,
///     content: "hi",
///     tool_use: false,
///     subjects: &[],
/// });
/// assert!(s.user_turn && !s.is_immediately_dirty());
/// ```
pub trait CaptureGate: Send + Sync + std::fmt::Debug {
    /// Assesses one turn.
    fn assess(&self, input: &GateInput<'_>) -> Significance;
}

/// The default gate: the dirty rules of docs/DESIGN.md, *Dirty*; no model.
#[derive(Debug, Default, Clone, Copy)]
pub struct HeuristicGate;

impl CaptureGate for HeuristicGate {
    fn assess(&self, input: &GateInput<'_>) -> Significance {
        let tool_use = input.tool_use || input.role == Role::Tool;
        let counts = matches!(input.role, Role::User | Role::Assistant);
        Significance {
            user_turn: input.role == Role::User,
            tool_use,
            mentions: if counts {
                mentions(input.content, input.subjects)
            } else {
                Vec::new()
            },
            significant: false,
        }
    }
}
