//! A test memory policy for cairn's conformance suite
//! (`tests/all/conformance.rs`): it answers what the object's session id
//! spells, so one plugin can give every value of every decision field.
//!
//! A session id is words joined by `--`; the first is a free name, each
//! other one sets a field of the answer:
//!
//! - `on-<action>` (repeatable): the answer holds only for these actions
//!   (`on-retrieve`, `on-render-inline`, `on-export`, `on-mutate`, ...);
//!   without one it holds for every action but `capture`;
//! - `fid-<full|redacted|reference-only|none>`,
//!   `loc-<blocked|local-only|approved-external>`,
//!   `learn-<none|same-scope-only|partitioned|global-allowed>`,
//!   `mut-<none|candidate-only|durable-allowed>`;
//! - `obl-<obligation>` (repeatable): `obl-audit-log`,
//!   `obl-confirm-with-user`, ...;
//! - `ref-none`: a `render-reference` is answered `none` (whatever the
//!   other words say), so a reference can be refused where the content
//!   was answered `reference-only`.
//!
//! Anything not set, every action the answer does not hold for, and every
//! object without a session gets the open answer: `full`,
//! `approved-external`, `global-allowed`, `durable-allowed`, no
//! obligations. `fid-none` and `loc-blocked` each bring the other (the
//! host checks they come together).

wit_bindgen::generate!({
    world: "memory-policy",
    path: "../../wit",
});

use cairn::policy::memory::{
    Action, ContentFidelity, LearningScope, Locality, MutationAuthority, PolicyObligation,
};
use cairn::policy::types::ReasonCode;

struct Conformance;

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Capture => "capture",
        Action::Retrieve => "retrieve",
        Action::RenderInline => "render-inline",
        Action::RenderReference => "render-reference",
        Action::Export => "export",
        Action::Delegate => "delegate",
        Action::Mutate => "mutate",
        Action::LearnFrom => "learn-from",
        Action::CarryoverGenerate => "carryover-generate",
    }
}

fn open() -> MemoryPolicyDecision {
    MemoryPolicyDecision {
        content_fidelity: ContentFidelity::Full,
        locality: Locality::ApprovedExternal,
        learning_scope: LearningScope::GlobalAllowed,
        mutation_authority: MutationAuthority::DurableAllowed,
        obligations: vec![],
        reason_codes: vec![ReasonCode::DefaultRule],
        note: None,
    }
}

fn obligation(name: &str) -> Option<PolicyObligation> {
    Some(match name {
        "audit-log" => PolicyObligation::AuditLog,
        "disclose-to-user" => PolicyObligation::DiscloseToUser,
        "label-low-trust" => PolicyObligation::LabelLowTrust,
        "attribute-source" => PolicyObligation::AttributeSource,
        "redact-personal-data" => PolicyObligation::RedactPersonalData,
        "confirm-with-user" => PolicyObligation::ConfirmWithUser,
        "expire-with-session" => PolicyObligation::ExpireWithSession,
        _ => return None,
    })
}

/// The answer `session` spells for `action`.
fn spelled(session: &str, action: Action) -> MemoryPolicyDecision {
    let words: Vec<&str> = session.split("--").skip(1).collect();
    if action == Action::RenderReference && words.contains(&"ref-none") {
        let mut d = open();
        d.content_fidelity = ContentFidelity::None;
        d.locality = Locality::Blocked;
        d.reason_codes = vec![ReasonCode::Custom];
        return d;
    }
    let actions: Vec<&str> = words.iter().filter_map(|w| w.strip_prefix("on-")).collect();
    let holds = if actions.is_empty() {
        action != Action::Capture
    } else {
        actions.contains(&action_name(action))
    };
    let mut d = open();
    if !holds {
        return d;
    }
    let mut blocked = false;
    for word in &words {
        if let Some(v) = word.strip_prefix("fid-") {
            d.content_fidelity = match v {
                "redacted" => ContentFidelity::Redacted,
                "reference-only" => ContentFidelity::ReferenceOnly,
                "none" => {
                    blocked = true;
                    ContentFidelity::None
                }
                _ => ContentFidelity::Full,
            };
        } else if let Some(v) = word.strip_prefix("loc-") {
            d.locality = match v {
                "blocked" => {
                    blocked = true;
                    Locality::Blocked
                }
                "local-only" => Locality::LocalOnly,
                _ => Locality::ApprovedExternal,
            };
        } else if let Some(v) = word.strip_prefix("learn-") {
            d.learning_scope = match v {
                "none" => LearningScope::None,
                "same-scope-only" => LearningScope::SameScopeOnly,
                "partitioned" => LearningScope::Partitioned,
                _ => LearningScope::GlobalAllowed,
            };
        } else if let Some(v) = word.strip_prefix("mut-") {
            d.mutation_authority = match v {
                "none" => MutationAuthority::None,
                "candidate-only" => MutationAuthority::CandidateOnly,
                _ => MutationAuthority::DurableAllowed,
            };
        } else if let Some(o) = word.strip_prefix("obl-").and_then(obligation) {
            if !d.obligations.contains(&o) {
                d.obligations.push(o);
            }
        }
    }
    if blocked {
        d.content_fidelity = ContentFidelity::None;
        d.locality = Locality::Blocked;
    }
    d.reason_codes = vec![ReasonCode::Custom];
    d
}

impl Guest for Conformance {
    fn decide(request: PolicyRequest) -> MemoryPolicyDecision {
        match request.object_ref.session_id.as_deref() {
            Some(session) => spelled(session, request.action),
            None => open(),
        }
    }
}

export!(Conformance);
