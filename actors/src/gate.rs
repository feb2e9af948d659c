//! The significance gate: does a turn make its work context dirty?
//!
//! [`SignificanceGate`] is the seam where the WebAssembly significance-gate
//! policy (the policy host in `policies/`) slots in later; the runtime uses
//! [`HeuristicGate`] (seed 000 §5.2: user turns, tool use, known-entity
//! mentions) until then. A gate is called on an arbiter thread for every
//! stored turn, so it must be cheap and must not block.

use cairn_memory::extract::mentions;
use cairn_memory::{Role, Subject};

/// What a gate sees of one stored turn.
#[derive(Debug, Clone, Copy)]
pub struct GateInput<'a> {
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
}

impl Significance {
    /// True when the turn alone makes its context dirty.
    pub fn is_immediately_dirty(&self) -> bool {
        self.tool_use || !self.mentions.is_empty()
    }
}

/// Decides how significant a turn is.
///
/// ```
/// use cairn_actors::{GateInput, HeuristicGate, SignificanceGate};
/// use cairn_memory::Role;
/// let s = HeuristicGate.assess(&GateInput { role: Role::User, content: "hi", tool_use: false, subjects: &[] });
/// assert!(s.user_turn && !s.is_immediately_dirty());
/// ```
pub trait SignificanceGate: Send + Sync + std::fmt::Debug {
    /// Assesses one turn.
    fn assess(&self, input: &GateInput<'_>) -> Significance;
}

/// The default gate: seed 000 §5.2's dirty-flag rules, no model.
#[derive(Debug, Default, Clone, Copy)]
pub struct HeuristicGate;

impl SignificanceGate for HeuristicGate {
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
        }
    }
}
