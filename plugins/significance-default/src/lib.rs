//! cairn's default significance gate, as a wasm component.
//!
//! The policy itself lives in the `significance-core` crate (plain Rust, no
//! dependencies) so the host's benchmark can run the very same code natively;
//! this crate only maps the WIT types in and out.

wit_bindgen::generate!({
    world: "significance-gate",
    path: "../../wit",
});

use cairn::policy::significance::CollectionDecision;
use cairn::policy::types::{ActivityType, ExtractionDepth, ReasonCode, SessionKind, TurnRole};
use significance_core as core;

struct DefaultGate;

impl Guest for DefaultGate {
    fn gate(input: SignificanceInput) -> SignificanceDecision {
        let turn = &input.turn;
        let ctx = &input.context;
        let eval = core::evaluate(
            &core::Turn {
                role: match turn.role {
                    TurnRole::User => core::Role::User,
                    TurnRole::Assistant => core::Role::Assistant,
                    TurnRole::Tool => core::Role::Tool,
                    TurnRole::System => core::Role::System,
                },
                session_kind: match turn.session_kind {
                    SessionKind::Main => core::SessionKind::Main,
                    SessionKind::SubAgent => core::SessionKind::SubAgent,
                    SessionKind::Cron => core::SessionKind::Cron,
                },
                text: &turn.text,
                entity_mentions: turn.entity_mentions.len(),
                has_work_context: turn.work_context_id.is_some(),
            },
            &core::Context {
                activity: match ctx.activity_type {
                    ActivityType::Research => core::Activity::Research,
                    _ => core::Activity::Other,
                },
                has_active_work_context: ctx.has_active_work_context,
                base_threshold: ctx.base_threshold,
                research_multiplier: ctx.research_multiplier,
            },
        );
        SignificanceDecision {
            collection_decision: match eval.collection {
                core::Collection::DoNotCollect => CollectionDecision::DoNotCollect,
                core::Collection::ObserveOnly => CollectionDecision::ObserveOnly,
                core::Collection::ExtractCandidate => CollectionDecision::ExtractCandidate,
                core::Collection::ExtractDurableEligible => {
                    CollectionDecision::ExtractDurableEligible
                }
                core::Collection::DeepExtract => CollectionDecision::DeepExtract,
            },
            extraction_depth: match eval.depth {
                core::Depth::None => ExtractionDepth::None,
                core::Depth::Shallow => ExtractionDepth::Shallow,
                core::Depth::Standard => ExtractionDepth::Standard,
                core::Depth::Deep => ExtractionDepth::Deep,
            },
            score: eval.score,
            threshold: eval.threshold,
            reason_codes: eval.reasons.iter().map(reason).collect(),
            note: None,
        }
    }
}

fn reason(r: core::Reason) -> ReasonCode {
    use core::Reason as R;
    match r {
        R::AboveThreshold => ReasonCode::AboveThreshold,
        R::BelowThreshold => ReasonCode::BelowThreshold,
        R::ResearchThreshold => ReasonCode::ResearchThreshold,
        R::UserTurn => ReasonCode::UserTurn,
        R::AssistantTurn => ReasonCode::AssistantTurn,
        R::ToolTurn => ReasonCode::ToolTurn,
        R::SystemTurn => ReasonCode::SystemTurn,
        R::DecisionLanguage => ReasonCode::DecisionLanguage,
        R::TaskLanguage => ReasonCode::TaskLanguage,
        R::Question => ReasonCode::Question,
        R::HandoffLanguage => ReasonCode::HandoffLanguage,
        R::PreferenceLanguage => ReasonCode::PreferenceLanguage,
        R::EntityMention => ReasonCode::EntityMention,
        R::ShortTurn => ReasonCode::ShortTurn,
        R::Acknowledgement => ReasonCode::Acknowledgement,
        R::SubAgentSession => ReasonCode::SubAgentSession,
        R::CronSession => ReasonCode::CronSession,
        R::NoWorkContext => ReasonCode::NoWorkContext,
    }
}

export!(DefaultGate);
