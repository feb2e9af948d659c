// Shared body of the hostile test guests, `include!`d by each of them.
//
// Every hostile guest implements all three cairn:policy worlds. It behaves
// well (a small, valid decision whose note counts the calls this instance has
// served) unless its input carries the trigger word `HOSTILE`; then it calls
// the crate's own `hostile` module, which misbehaves in one specific way.
// The call counter lets the host's tests see that a faulted instance is never
// reused: the first call after a fault reports `calls=1` again.

wit_bindgen::generate!({
    inline: r#"
        package cairn:hostile;

        world hostile {
            include cairn:policy/significance-gate@0.1.3;
            include cairn:policy/topic-directive@0.1.3;
            include cairn:policy/memory-policy-assembly@0.1.3;
        }
    "#,
    path: "../../../wit",
    world: "cairn:hostile/hostile",
    generate_all,
});

use std::sync::atomic::{AtomicU32, Ordering};

#[allow(unused_imports, reason = "not every hostile guest needs every type")]
use cairn::policy::{
    memory::{ContentFidelity, LearningScope, Locality, MutationAuthority, PolicyObligation},
    significance::CollectionDecision,
    topic::{CollectionMode, OutputTarget, TopicSubject},
    types::{ExtractionDepth, ReasonCode},
};

static CALLS: AtomicU32 = AtomicU32::new(0);

/// The word in an input that turns a hostile guest hostile.
const TRIGGER: &str = "HOSTILE";

fn calls_note() -> Option<String> {
    Some(format!("calls={}", CALLS.fetch_add(1, Ordering::Relaxed) + 1))
}

struct Hostile;

impl Guest for Hostile {
    fn gate(input: SignificanceInput) -> SignificanceDecision {
        if input.turn.text.contains(TRIGGER) {
            return hostile::gate(&input);
        }
        SignificanceDecision {
            collection_decision: CollectionDecision::ExtractCandidate,
            extraction_depth: ExtractionDepth::Shallow,
            score: 0.5,
            threshold: 0.5,
            reason_codes: vec![ReasonCode::DefaultRule],
            note: calls_note(),
        }
    }

    fn direct(input: TopicInput) -> TopicDirectiveDecision {
        let text = match &input.subject {
            TopicSubject::Turn(t) => &t.text,
            TopicSubject::Entry(e) => &e.text,
        };
        if text.contains(TRIGGER) {
            return hostile::direct(&input);
        }
        TopicDirectiveDecision {
            collect: true,
            collection_mode: CollectionMode::WatchFutureSources,
            extraction_depth: ExtractionDepth::Shallow,
            output_targets: vec![OutputTarget::TopicMembership],
            review_required_before_durable_promotion: true,
            reason_codes: vec![ReasonCode::DefaultRule],
            note: calls_note(),
        }
    }

    fn decide(request: PolicyRequest) -> MemoryPolicyDecision {
        if request.object_ref.id.contains(TRIGGER) {
            return hostile::decide(&request);
        }
        MemoryPolicyDecision {
            content_fidelity: ContentFidelity::Full,
            locality: Locality::LocalOnly,
            learning_scope: LearningScope::None,
            mutation_authority: MutationAuthority::None,
            obligations: vec![],
            reason_codes: vec![ReasonCode::DefaultRule],
            note: calls_note(),
        }
    }

    fn decide_batch(requests: Vec<PolicyRequest>) -> Vec<MemoryPolicyDecision> {
        requests.into_iter().map(Self::decide).collect()
    }

    /// As `decide` for each candidate, with a note that says which call
    /// served it (the host's tests check it picks this one).
    fn decide_candidates(asker: Asker, candidates: Vec<Candidate>) -> Vec<MemoryPolicyDecision> {
        candidates
            .into_iter()
            .map(|c| {
                let mut decision = Self::decide(PolicyRequest {
                    object_ref: c.object_ref,
                    action: asker.action,
                    destination: asker.destination,
                    principal_ref: asker.principal_ref.clone(),
                    surface_ref: asker.surface_ref.clone(),
                    requesting_work_context_id: asker.requesting_work_context_id.clone(),
                    lineage_permitted: c.lineage_permitted,
                });
                if let Some(note) = &mut decision.note {
                    note.push_str(" candidates");
                }
                decision
            })
            .collect()
    }
}

/// For guests whose misbehaviour never returns: routes all three worlds to
/// the crate's `misbehave()`.
#[allow(unused_macros, reason = "used by the diverging guests only")]
macro_rules! diverging_hostile {
    () => {
        mod hostile {
            use super::*;

            pub(crate) fn gate(_: &SignificanceInput) -> SignificanceDecision {
                super::misbehave()
            }

            pub(crate) fn direct(_: &TopicInput) -> TopicDirectiveDecision {
                super::misbehave()
            }

            pub(crate) fn decide(_: &PolicyRequest) -> MemoryPolicyDecision {
                super::misbehave()
            }
        }
    };
}

export!(Hostile);
