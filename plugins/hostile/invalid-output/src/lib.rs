//! Hostile guest: returns well-typed but semantically invalid decisions
//! when its input says `HOSTILE`. The rest of the input picks which rule
//! is broken: `HOSTILE-RANGE` (a score of 7), `HOSTILE-INCONSISTENT` (depth
//! contradicting the decision), anything else (a NaN score).

include!("../../guest.rs");

mod hostile {
    use super::*;

    pub(crate) fn gate(input: &SignificanceInput) -> SignificanceDecision {
        let text = &input.turn.text;
        let (score, collection_decision, extraction_depth) = if text.contains("HOSTILE-RANGE") {
            (
                7.0,
                CollectionDecision::ExtractCandidate,
                ExtractionDepth::Shallow,
            )
        } else if text.contains("HOSTILE-INCONSISTENT") {
            (0.9, CollectionDecision::DeepExtract, ExtractionDepth::None)
        } else {
            (
                f32::NAN,
                CollectionDecision::ExtractCandidate,
                ExtractionDepth::Shallow,
            )
        };
        SignificanceDecision {
            collection_decision,
            extraction_depth,
            score,
            threshold: 0.5,
            reason_codes: vec![ReasonCode::Custom],
            note: None,
        }
    }

    pub(crate) fn direct(_: &TopicInput) -> TopicDirectiveDecision {
        // Collects, but into nothing.
        TopicDirectiveDecision {
            collect: true,
            collection_mode: CollectionMode::WatchFutureSources,
            extraction_depth: ExtractionDepth::None,
            output_targets: vec![],
            review_required_before_durable_promotion: false,
            reason_codes: vec![ReasonCode::Custom],
            note: None,
        }
    }

    pub(crate) fn decide(_: &PolicyRequest) -> MemoryPolicyDecision {
        // Blocked, yet in full.
        MemoryPolicyDecision {
            content_fidelity: ContentFidelity::Full,
            locality: Locality::Blocked,
            learning_scope: LearningScope::GlobalAllowed,
            mutation_authority: MutationAuthority::DurableAllowed,
            obligations: vec![],
            reason_codes: vec![ReasonCode::Custom],
            note: None,
        }
    }
}
