//! The WebAssembly significance gate, in process: the actor runtime's
//! [`cairn_actors::SignificanceGate`] seam served by a
//! [`PolicySlot`] of the `significance-gate` world, so that every stored
//! turn is a policy decision and `--swap-every` swaps a live plugin.
//!
//! The runtime itself does not own policies at this point; this adapter is
//! the loadgen's and keeps the dirty-tracking rules of the heuristic gate,
//! except that the plugin decides whether a turn's known-subject mentions
//! count (a turn the plugin does not capture makes nothing dirty through
//! its mentions).

use std::sync::atomic::{AtomicU64, Ordering};

use cairn_actors::{GateInput, Significance};
use cairn_memory::Role;
use cairn_memory::extract::mentions;
use cairn_policies::{
    DecisionRecord, DecisionSink, GateContext, PolicySlot, SignificanceInput, SinkError, TurnRole,
    TurnView,
};

/// Counts decisions and the faults among them (the loadgen's decision log).
#[derive(Debug, Default)]
pub(crate) struct CountingSink {
    decisions: AtomicU64,
    faults: AtomicU64,
}

impl CountingSink {
    pub(crate) fn decisions(&self) -> u64 {
        self.decisions.load(Ordering::Relaxed)
    }

    pub(crate) fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }
}

impl DecisionSink for CountingSink {
    fn record(&self, record: &DecisionRecord) -> Result<(), SinkError> {
        self.decisions.fetch_add(1, Ordering::Relaxed);
        if !record.outcome.is_plugin() {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The significance slot behind the actor runtime's gate seam.
#[derive(Debug)]
pub(crate) struct WasmGate {
    pub(crate) slot: PolicySlot<cairn_policies::SignificanceGate>,
}

fn role(role: Role) -> TurnRole {
    match role {
        Role::User => TurnRole::User,
        Role::Assistant => TurnRole::Assistant,
        Role::Tool => TurnRole::Tool,
        Role::System => TurnRole::System,
    }
}

impl cairn_actors::SignificanceGate for WasmGate {
    fn assess(&self, input: &GateInput<'_>) -> Significance {
        let tool_use = input.tool_use || input.role == Role::Tool;
        let found = if matches!(input.role, Role::User | Role::Assistant) {
            mentions(input.content, input.subjects)
        } else {
            Vec::new()
        };
        // The seam does not carry the session or seq; the plugin's rules
        // do not depend on them.
        let mut turn = TurnView::new("loadgen", 0, role(input.role), input.content);
        turn.entity_mentions = found.clone();
        let context = GateContext {
            has_active_work_context: true,
            ..GateContext::default()
        };
        let captures = match self.slot.decide(&SignificanceInput { turn, context }) {
            Ok(decided) => decided.decision.captures(),
            Err(error) => {
                // Only the decision sink can fail, and ours does not; count
                // it as a fault and apply the world's fail-safe.
                tracing::warn!(%error, "significance decision not recorded");
                false
            }
        };
        Significance {
            user_turn: input.role == Role::User,
            tool_use,
            mentions: if captures { found } else { Vec::new() },
        }
    }
}
