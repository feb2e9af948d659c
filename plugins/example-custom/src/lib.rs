//! An example of a user-written cairn policy: "nothing leaves this machine".
//!
//! It implements the `memory-policy` world. Everything may be used locally
//! in full; anything headed for a cloud model, an external LLM or a share
//! link is blocked, and exports need the user's confirmation. The plugin
//! explains itself with reason codes and a short note, which cairn writes to
//! its decision log together with the policy generation that decided.
//!
//! See `plugins/README.md` for how to build and install it.

// Generate the bindings for the world from the WIT package in `wit/`.
wit_bindgen::generate!({
    world: "memory-policy",
    path: "../../wit",
});

use cairn::policy::memory::{
    Action, ContentFidelity, Destination, LearningScope, Locality, MutationAuthority,
    PolicyObligation,
};
use cairn::policy::types::ReasonCode;

struct LocalOnly;

impl Guest for LocalOnly {
    fn decide(request: PolicyRequest) -> MemoryPolicyDecision {
        let leaves_machine = matches!(
            request.destination,
            Some(Destination::CloudModel | Destination::ExternalLlm | Destination::ShareLink)
        );
        if leaves_machine {
            // A blocked decision must come with fidelity `none`: the host
            // rejects anything else as invalid output.
            return MemoryPolicyDecision {
                content_fidelity: ContentFidelity::None,
                locality: Locality::Blocked,
                learning_scope: LearningScope::None,
                mutation_authority: MutationAuthority::None,
                obligations: vec![PolicyObligation::AuditLog],
                reason_codes: vec![ReasonCode::ExternalDestination, ReasonCode::Custom],
                note: Some("local-only policy: nothing leaves this machine".to_string()),
            };
        }
        let mut obligations = Vec::new();
        if request.action == Action::Export {
            obligations.push(PolicyObligation::ConfirmWithUser);
        }
        MemoryPolicyDecision {
            content_fidelity: ContentFidelity::Full,
            locality: Locality::LocalOnly,
            learning_scope: LearningScope::SameScopeOnly,
            mutation_authority: MutationAuthority::CandidateOnly,
            obligations,
            reason_codes: vec![ReasonCode::LocalDestination],
            note: None,
        }
    }
}

// Tell wit-bindgen which type implements the world's exports.
export!(LocalOnly);
