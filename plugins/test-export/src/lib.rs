//! A test memory policy for cairn's export and import (`tests/all/export.rs`):
//! every action but `export` is allowed in full, locally; an export is
//! judged by the object, so a bundle holds each fidelity:
//!
//! - an object of a session whose id starts with `private` (the session
//!   itself, its turns and summaries, the entries captured from it):
//!   fidelity `none`, locality `blocked`: left out;
//! - an object of the work context `refs`: `reference-only`;
//! - a personal object (an e-mail address, a phone number): `redacted`;
//! - anything else: `full`.

wit_bindgen::generate!({
    world: "memory-policy",
    path: "../../wit",
});

use cairn::policy::memory::{
    Action, ContentFidelity, LearningScope, Locality, MutationAuthority, PolicyObligation,
    Sensitivity,
};
use cairn::policy::types::ReasonCode;

struct ExportRefusals;

fn decision(fidelity: ContentFidelity, reason: ReasonCode) -> MemoryPolicyDecision {
    let blocked = fidelity == ContentFidelity::None;
    MemoryPolicyDecision {
        content_fidelity: fidelity,
        locality: if blocked {
            Locality::Blocked
        } else {
            Locality::LocalOnly
        },
        learning_scope: LearningScope::SameScopeOnly,
        mutation_authority: MutationAuthority::DurableAllowed,
        obligations: if blocked {
            vec![PolicyObligation::AuditLog]
        } else {
            vec![]
        },
        reason_codes: vec![reason],
        note: None,
    }
}

impl Guest for ExportRefusals {
    fn decide(request: PolicyRequest) -> MemoryPolicyDecision {
        if request.action != Action::Export {
            return decision(ContentFidelity::Full, ReasonCode::DefaultRule);
        }
        let object = &request.object_ref;
        let private = object
            .session_id
            .as_deref()
            .is_some_and(|s| s.starts_with("private"));
        if private {
            return decision(ContentFidelity::None, ReasonCode::Custom);
        }
        if object.work_context_id.as_deref() == Some("refs") {
            return decision(ContentFidelity::ReferenceOnly, ReasonCode::Custom);
        }
        if object.sensitivity == Sensitivity::Personal {
            return decision(ContentFidelity::Redacted, ReasonCode::SensitivityPersonal);
        }
        decision(ContentFidelity::Full, ReasonCode::ExportRequested)
    }
}

export!(ExportRefusals);
