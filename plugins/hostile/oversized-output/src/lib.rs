//! Hostile guest: returns decisions far larger than the host's output cap
//! when its input says `HOSTILE`: a 2 MiB note, or, for `HOSTILE-LIST`, a
//! million reason codes.

include!("../../guest.rs");

mod hostile {
    use super::*;

    const NOTE_BYTES: usize = 2 << 20;
    const CODES: usize = 100_000;

    fn huge(list: bool) -> (Vec<ReasonCode>, Option<String>) {
        if list {
            (vec![ReasonCode::Custom; CODES], None)
        } else {
            (vec![ReasonCode::Custom], Some("x".repeat(NOTE_BYTES)))
        }
    }

    pub(crate) fn gate(input: &SignificanceInput) -> SignificanceDecision {
        let (reason_codes, note) = huge(input.turn.text.contains("HOSTILE-LIST"));
        SignificanceDecision {
            collection_decision: CollectionDecision::ExtractCandidate,
            extraction_depth: ExtractionDepth::Shallow,
            score: 0.5,
            threshold: 0.5,
            reason_codes,
            note,
        }
    }

    pub(crate) fn direct(_: &TopicInput) -> TopicDirectiveDecision {
        TopicDirectiveDecision {
            collect: true,
            collection_mode: CollectionMode::WatchFutureSources,
            extraction_depth: ExtractionDepth::Shallow,
            output_targets: vec![OutputTarget::TopicMembership; CODES],
            review_required_before_durable_promotion: true,
            reason_codes: vec![ReasonCode::Custom],
            note: None,
        }
    }

    pub(crate) fn decide(_: &PolicyRequest) -> MemoryPolicyDecision {
        let (reason_codes, note) = huge(false);
        MemoryPolicyDecision {
            content_fidelity: ContentFidelity::None,
            locality: Locality::Blocked,
            learning_scope: LearningScope::None,
            mutation_authority: MutationAuthority::None,
            obligations: vec![PolicyObligation::AuditLog; CODES],
            reason_codes,
            note,
        }
    }
}
