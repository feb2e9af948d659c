//! The significance gate as the actor runtime's capture gate: the adapter
//! between the policy host's significance slot (and the memory policy's
//! `capture` decision) and cairn-actors' [`CaptureGate`].

use std::panic::AssertUnwindSafe;

use cairn_actors::{CaptureGate, GateInput, HeuristicGate, Significance};
use cairn_memory::assemble::Fidelity;
use cairn_memory::extract::Depth;
use cairn_memory::{Role, Turn};
use cairn_policies::{
    CollectionDecision, ExtractionDepth, GateContext, MemoryPolicy, Policies, PolicySlot,
    SessionKind, SignificanceGate, SignificanceInput, TurnRole, TurnView, activity_type,
    work_phase,
};

/// The installed wasm significance gate as the actor runtime's
/// [`CaptureGate`].
///
/// For every stored turn it builds a [`TurnView`] (session, kind, work
/// context, seq, role, text, the known subjects the turn mentions as
/// `entity-mentions`) and a [`GateContext`] (a live work context when the
/// session has one; the **activity type** the turn's words say
/// ([`activity_type`](cairn_policies::activity_type)), else the one its work context's phase implies; the
/// context's **work phase**; the default thresholds; `turns-in-session` =
/// seq + 1), asks the slot, and maps the decision onto the runtime's dirty
/// tracking and the capture:
///
/// - the plugin asks for any extraction (`extract-candidate`,
///   `extract-durable-eligible`, `deep-extract`): the turn is
///   **significant**, its work context is dirty at once, and the capture
///   extracts from it at the decision's `extraction-depth` (shallow,
///   standard, deep; see [`Depth`]);
/// - `observe-only`: the turn counts as activity under the structural
///   dirty rules (three user turns, tool use, a known subject), but no
///   entry is extracted from it (its sentences may still settle an open
///   question or task);
/// - `do-not-collect`: the turn's words are no activity (not a user turn,
///   no mention; a tool call in it still is: that is the host's fact) and
///   the capture does not read it; the raw record keeps it.
///
/// Every verdict carries the generation that decided; captured entries
/// record the one that made their context dirty (`gate_generation`).
///
/// A fault, an open breaker, a decision log that refuses, or a panic gives
/// the world's fail-safe, observe only: never more than a plugin could
/// have asked for, and the actor never crashes.
#[derive(Debug, Clone)]
pub(crate) struct WasmGate {
    slot: PolicySlot<SignificanceGate>,
    /// Asked `capture` about every turn a capture reads.
    memory_policy: PolicySlot<MemoryPolicy>,
    /// Where a turn whose derived copies expire with its session is marked.
    memory: cairn_memory::Memory,
}

impl WasmGate {
    /// The gate over `policies`' significance and memory-policy slots.
    pub(crate) fn new(policies: &Policies, memory: cairn_memory::Memory) -> WasmGate {
        WasmGate {
            slot: policies.significance().clone(),
            memory_policy: policies.memory_policy().clone(),
            memory,
        }
    }

    /// The gate's input for one stored turn.
    pub(crate) fn input(input: &GateInput<'_>, mentions: &[String]) -> SignificanceInput {
        let work_context = (!input.work_context.is_empty()).then(|| input.work_context.to_owned());
        let has_context = work_context.is_some();
        let mut turn = TurnView::new(input.session, input.seq, role(input.role), input.content);
        turn.session_kind = match input.session_kind {
            cairn_memory::SessionKind::Subagent => SessionKind::SubAgent,
            cairn_memory::SessionKind::Cron => SessionKind::Cron,
            _ => SessionKind::Main,
        };
        turn.work_context_id = work_context;
        turn.entity_mentions = mentions.to_vec();
        let phase = work_phase(input.work_phase);
        SignificanceInput {
            turn,
            context: GateContext {
                activity_type: activity_type(input.content, phase),
                has_active_work_context: has_context,
                work_phase: phase,
                turns_in_session: u32::try_from(input.seq.saturating_add(1)).unwrap_or(u32::MAX),
                ..GateContext::default()
            },
        }
    }
}

fn role(role: Role) -> TurnRole {
    match role {
        Role::User => TurnRole::User,
        Role::Assistant => TurnRole::Assistant,
        Role::Tool => TurnRole::Tool,
        _ => TurnRole::System,
    }
}

impl CaptureGate for WasmGate {
    fn assess(&self, input: &GateInput<'_>) -> Significance {
        let structural = HeuristicGate.assess(input);
        let asked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.slot.decide_in(
                Some(input.workspace),
                &WasmGate::input(input, &structural.mentions),
            )
        }));
        let (decision, generation) = match asked {
            Ok(Ok(decided)) => (
                Some(decided.decision),
                Some(decided.generation.as_str().to_owned()),
            ),
            Ok(Err(error)) => {
                tracing::warn!(%error, session = input.session, seq = input.seq, "significance gate: fail-safe (observe only)");
                (None, None)
            }
            Err(_) => {
                tracing::error!(
                    session = input.session,
                    seq = input.seq,
                    "significance gate panicked: fail-safe (observe only)"
                );
                (None, None)
            }
        };
        let depth = match &decision {
            None => Depth::ObserveOnly,
            Some(d) => match (d.collection_decision, d.extraction_depth) {
                (CollectionDecision::DoNotCollect, _) => Depth::DoNotCollect,
                (_, ExtractionDepth::None) => Depth::ObserveOnly,
                (_, ExtractionDepth::Shallow) => Depth::Shallow,
                (_, ExtractionDepth::Standard) => Depth::Standard,
                (_, ExtractionDepth::Deep) => Depth::Deep,
                // A depth this build does not know: the default reading.
                _ => Depth::Standard,
            },
        };
        if depth == Depth::DoNotCollect {
            // Raw record only: its words are no activity (not a user turn,
            // no mention). A tool call in it is the host's fact, not the
            // turn's content: it still counts.
            return Significance {
                tool_use: structural.tool_use,
                depth,
                generation,
                ..Significance::default()
            };
        }
        Significance {
            significant: decision.as_ref().is_some_and(|d| d.captures()),
            depth,
            generation,
            ..structural
        }
    }

    /// The memory policy's `capture` decision on the turn, asked for the
    /// session's agent with no destination (capture keeps it here): full
    /// reads the turn, redacted masks personal data first, a reference or
    /// a block keeps it out of the capture. A decision that cannot be had
    /// keeps it out too (fail closed; the next capture asks again only for
    /// newer turns, so the record keeps it and an operator can backfill).
    fn capture_view(
        &self,
        workspace: &str,
        session: &cairn_memory::Session,
        mut turn: Turn,
    ) -> Option<Turn> {
        let asker = crate::reads::Asker {
            action: cairn_policies::Action::Capture,
            destination: None,
            principal: cairn_policies::PrincipalRef {
                kind: match session.kind {
                    cairn_memory::SessionKind::Main => cairn_policies::PrincipalKind::Agent,
                    _ => cairn_policies::PrincipalKind::Subagent,
                },
                id: session.id.clone(),
            },
            surface: "capture",
            work_context: Some(session.work_context.clone()),
        };
        let verdict = match crate::reads::decide(
            &self.memory_policy,
            Some(workspace),
            &asker,
            None,
            &crate::reads::Object::turn(&turn),
        ) {
            Ok(v) => v,
            Err(error) => {
                tracing::warn!(%error, session = %session.id, seq = turn.seq, "memory policy unavailable: the turn is not captured");
                return None;
            }
        };
        // `mutation-authority: none` on a capture: nothing may be written
        // because of the turn.
        if verdict.mutation == cairn_policies::MutationAuthority::None {
            return None;
        }
        match verdict.fidelity {
            Fidelity::Full | Fidelity::Redacted => {}
            Fidelity::ReferenceOnly | Fidelity::Blocked => return None,
        }
        // What capture derives from the turn is learned from it: the
        // policy is asked `learn-from` too, and `learning-scope: none`
        // keeps the turn out of what capture extracts.
        let learn = crate::reads::Asker {
            action: cairn_policies::Action::LearnFrom,
            ..asker
        };
        match crate::reads::decide(
            &self.memory_policy,
            Some(workspace),
            &learn,
            None,
            &crate::reads::Object::turn(&turn),
        ) {
            Ok(v) if v.learning != cairn_policies::LearningScope::None => {}
            Ok(_) => return None,
            Err(error) => {
                tracing::warn!(%error, session = %session.id, seq = turn.seq, "memory policy unavailable: the turn is not learned from");
                return None;
            }
        }
        // `expire-with-session`: what capture derives from the turn is
        // erased when the session ends (`Cairn::session_end`). The mark is
        // durable before anything is derived; without it nothing is.
        if verdict.obligations.expire {
            let key = cairn_memory::store::StateKey::Expiry {
                session: session.id.clone(),
                seq: turn.seq,
            };
            let marked = self
                .memory
                .workspace(workspace)
                .and_then(|ws| ws.state_put(&key, b""));
            if let Err(error) = marked {
                tracing::warn!(%error, session = %session.id, seq = turn.seq, "an expiry mark could not be written: the turn is not captured");
                return None;
            }
        }
        if verdict.fidelity == Fidelity::Redacted {
            turn.content = cairn_memory::redact::redact_personal(&turn.content);
        }
        Some(turn)
    }
}

#[cfg(test)]
mod tests {
    use cairn_policies::{ActivityType, WorkPhase};

    use super::*;

    /// The gate is told the activity the turn's words say, else the one
    /// its context's phase implies, and the phase itself, not `unknown`.
    #[test]
    fn the_gate_hears_the_activity_and_the_phase() {
        let input = |content: &'static str, phase: Option<&'static str>| GateInput {
            workspace: "acme",
            session: "s1",
            session_kind: cairn_memory::SessionKind::Main,
            work_context: "launch",
            seq: 2,
            role: Role::User,
            content,
            tool_use: false,
            subjects: &[],
            work_phase: phase,
        };
        let asked = WasmGate::input(
            &input("Look up the scienter standard.", Some("drafting")),
            &[],
        );
        assert_eq!(asked.context.activity_type, ActivityType::Research);
        assert_eq!(asked.context.work_phase, WorkPhase::Drafting);
        assert_eq!(asked.context.turns_in_session, 3);
        let asked = WasmGate::input(&input("ok, go on", Some("drafting")), &[]);
        assert_eq!(asked.context.activity_type, ActivityType::Drafting);
        let asked = WasmGate::input(&input("Email Dana the dates.", None), &[]);
        assert_eq!(asked.context.activity_type, ActivityType::Communication);
        assert_eq!(asked.context.work_phase, WorkPhase::Unknown);
        let asked = WasmGate::input(&input("ok", Some("waiting_for_external")), &[]);
        assert_eq!(asked.context.work_phase, WorkPhase::WaitingForExternal);
        assert_eq!(asked.context.activity_type, ActivityType::Communication);
    }
}
