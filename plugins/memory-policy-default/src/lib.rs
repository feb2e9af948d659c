//! cairn's default memory policy, as a wasm component.
//!
//! Answers "may this object be captured / retrieved / rendered / exported /
//! delegated / mutated / learned from, at what fidelity, by whom?" with a
//! typed `memory-policy-decision` (see docs/DESIGN.md, *Memory policy*).
//! The rules, in order:
//!
//! 1. **Context.** An object from another work context is shown only as a
//!    reference unless the host's lineage rules permit the read; with
//!    lineage it is shown in full with its source attributed.
//! 2. **Destination.** Cloud models, external LLMs and share links are
//!    external: secret objects are blocked there, confidential ones go as
//!    references only, personal ones redacted; external uses are audited.
//! 3. **Action.** Exports and carry-overs are disclosed to the user and never
//!    include secrets; learning stays within the object's scope (none for
//!    confidential, secret or cross-context objects); mutation is durable for
//!    the user, an operator and the session's agents within their lineage,
//!    refused otherwise.
//! 4. **Trust.** Content from low-trust sources is labelled as such and not
//!    learned from beyond its scope.

wit_bindgen::generate!({
    world: "memory-policy-interned",
    path: "../../wit",
});

use cairn::policy::memory::{
    Action, ContentFidelity, ContentReference, Destination, LearningScope, Locality,
    MutationAuthority, PolicyObligation, PrincipalKind, Sensitivity,
};
use cairn::policy::types::ReasonCode;

struct DefaultPolicy;

impl Guest for DefaultPolicy {
    fn decide(request: PolicyRequest) -> MemoryPolicyDecision {
        let PolicyRequest {
            object_ref,
            action,
            destination,
            principal_ref,
            surface_ref,
            requesting_work_context_id,
            lineage_permitted,
        } = request;
        let asker = Asker {
            action,
            destination,
            principal_ref,
            surface_ref,
            requesting_work_context_id,
        };
        judge(&asker, &Object::of(&object_ref), lineage_permitted).finish()
    }

    /// One call for every candidate of an assembly: the same rules, applied
    /// to each request in order.
    fn decide_batch(requests: Vec<PolicyRequest>) -> Vec<MemoryPolicyDecision> {
        requests.into_iter().map(Self::decide).collect()
    }

    /// The same rules for each candidate, with the asker given once.
    fn decide_candidates(asker: Asker, candidates: Vec<Candidate>) -> Vec<MemoryPolicyDecision> {
        candidates
            .iter()
            .map(|c| judge(&asker, &Object::of(&c.object_ref), c.lineage_permitted).finish())
            .collect()
    }

    /// The same rules for each candidate, its context looked up in
    /// `names`; each distinct decision is answered once.
    fn decide_interned(
        asker: Asker,
        names: Vec<String>,
        candidates: Vec<InternedCandidate>,
    ) -> Verdicts {
        let name = |i: Option<u32>| i.and_then(|i| names.get(i as usize)).map(String::as_str);
        let mut drafts: Vec<Draft> = Vec::new();
        let picks = candidates
            .iter()
            .map(|c| {
                let object = Object {
                    work_context_id: name(c.work_context),
                    sensitivity: c.sensitivity,
                    low_trust: c.low_trust,
                };
                let draft = judge(&asker, &object, c.lineage_permitted);
                let pick = match drafts.iter().position(|d| *d == draft) {
                    Some(i) => i,
                    None => {
                        drafts.push(draft);
                        drafts.len() - 1
                    }
                };
                pick as u32
            })
            .collect();
        Verdicts {
            decisions: drafts.into_iter().map(Draft::finish).collect(),
            picks,
        }
    }
}

/// What the rules read of an object.
struct Object<'a> {
    work_context_id: Option<&'a str>,
    sensitivity: Sensitivity,
    low_trust: bool,
}

impl<'a> Object<'a> {
    fn of(r: &'a ContentReference) -> Self {
        Object {
            work_context_id: r.work_context_id.as_deref(),
            sensitivity: r.sensitivity,
            low_trust: r.low_trust,
        }
    }
}

/// The rules, for `object` as `asker` asks about it.
fn judge(asker: &Asker, object: &Object<'_>, lineage_permitted: bool) -> Draft {
    let mut d = Draft::default();

    // 1. Context.
    match (
        asker.requesting_work_context_id.as_deref(),
        object.work_context_id,
    ) {
        (Some(from), Some(of)) if from != of => {
            d.reason(ReasonCode::CrossContext);
            if lineage_permitted {
                d.reason(ReasonCode::LineagePermitted);
                d.oblige(PolicyObligation::AttributeSource);
            } else {
                d.reason(ReasonCode::LineageDenied);
                d.cap_fidelity(ContentFidelity::ReferenceOnly);
                d.cross_context = true;
            }
        }
        (Some(_), Some(_)) => d.reason(ReasonCode::SameContext),
        _ => {}
    }

    // 2. Destination and sensitivity.
    let external = matches!(
        asker.destination,
        Some(Destination::CloudModel | Destination::ExternalLlm | Destination::ShareLink)
    );
    if external {
        d.reason(ReasonCode::ExternalDestination);
        d.locality = Locality::ApprovedExternal;
        d.oblige(PolicyObligation::AuditLog);
    } else if asker.destination.is_some() {
        d.reason(ReasonCode::LocalDestination);
    }
    match object.sensitivity {
        Sensitivity::Normal => {}
        Sensitivity::Personal => {
            d.reason(ReasonCode::SensitivityPersonal);
            if external || asker.action == Action::Delegate {
                d.cap_fidelity(ContentFidelity::Redacted);
                d.oblige(PolicyObligation::RedactPersonalData);
            }
        }
        Sensitivity::Confidential => {
            d.reason(ReasonCode::SensitivityConfidential);
            if external || asker.action == Action::Delegate {
                d.cap_fidelity(ContentFidelity::ReferenceOnly);
            }
        }
        Sensitivity::Secret => {
            d.reason(ReasonCode::SensitivitySecret);
            if external || matches!(asker.action, Action::Export | Action::CarryoverGenerate) {
                d.block();
            } else if asker.destination != Some(Destination::UserVisibleUi) {
                d.cap_fidelity(ContentFidelity::ReferenceOnly);
                d.locality = Locality::LocalOnly;
            }
        }
    }
    if object.low_trust {
        d.reason(ReasonCode::LowTrustSource);
        d.oblige(PolicyObligation::LabelLowTrust);
    }

    // 3. Action.
    let principal = asker.principal_ref.as_ref().map(|p| p.kind);
    match principal {
        Some(PrincipalKind::User | PrincipalKind::Operator) => d.reason(ReasonCode::PrincipalUser),
        Some(PrincipalKind::Agent | PrincipalKind::Subagent) => {
            d.reason(ReasonCode::PrincipalAgent)
        }
        Some(PrincipalKind::External) | None => d.reason(ReasonCode::PrincipalUnknown),
    }
    match asker.action {
        Action::Export | Action::CarryoverGenerate => {
            d.reason(ReasonCode::ExportRequested);
            d.oblige(PolicyObligation::DiscloseToUser);
            d.oblige(PolicyObligation::AuditLog);
        }
        Action::RenderReference => d.cap_fidelity(ContentFidelity::ReferenceOnly),
        Action::Delegate => d.oblige(PolicyObligation::ExpireWithSession),
        Action::LearnFrom => {
            d.learning_scope = if d.cross_context
                || matches!(
                    object.sensitivity,
                    Sensitivity::Confidential | Sensitivity::Secret
                ) {
                LearningScope::None
            } else if object.low_trust || object.sensitivity == Sensitivity::Personal {
                LearningScope::SameScopeOnly
            } else {
                LearningScope::Partitioned
            };
            d.reason(ReasonCode::LearningRestricted);
        }
        Action::Capture | Action::Mutate => {
            // The host acts on this answer (issue 81): the user, the
            // operator and the session's own agents (sub-agents within
            // their lineage: a crossing is `none` below) write durably, as
            // they always have; an unknown principal may not write.
            d.mutation_authority = match principal {
                Some(
                    PrincipalKind::User
                    | PrincipalKind::Operator
                    | PrincipalKind::Agent
                    | PrincipalKind::Subagent,
                ) => MutationAuthority::DurableAllowed,
                _ => {
                    d.reason(ReasonCode::MutationRestricted);
                    MutationAuthority::None
                }
            };
            if d.cross_context {
                d.mutation_authority = MutationAuthority::None;
            }
        }
        Action::Retrieve | Action::RenderInline => {}
    }
    if d.reason_codes.is_empty() {
        d.reason(ReasonCode::DefaultRule);
    }
    d
}

/// A decision being built: starts fully permissive for a local use and is
/// only ever narrowed. Two drafts that are equal finish as equal decisions.
#[derive(PartialEq)]
struct Draft {
    content_fidelity: ContentFidelity,
    locality: Locality,
    learning_scope: LearningScope,
    mutation_authority: MutationAuthority,
    obligations: Vec<PolicyObligation>,
    reason_codes: Vec<ReasonCode>,
    cross_context: bool,
    blocked: bool,
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            content_fidelity: ContentFidelity::Full,
            locality: Locality::LocalOnly,
            learning_scope: LearningScope::None,
            mutation_authority: MutationAuthority::None,
            obligations: Vec::new(),
            reason_codes: Vec::new(),
            cross_context: false,
            blocked: false,
        }
    }
}

impl Draft {
    fn reason(&mut self, code: ReasonCode) {
        if !self.reason_codes.contains(&code) {
            self.reason_codes.push(code);
        }
    }

    fn oblige(&mut self, obligation: PolicyObligation) {
        if !self.obligations.contains(&obligation) {
            self.obligations.push(obligation);
        }
    }

    fn cap_fidelity(&mut self, cap: ContentFidelity) {
        if rank(cap) < rank(self.content_fidelity) {
            self.content_fidelity = cap;
        }
    }

    fn block(&mut self) {
        self.blocked = true;
    }

    fn finish(mut self) -> MemoryPolicyDecision {
        if self.blocked {
            self.content_fidelity = ContentFidelity::None;
            self.locality = Locality::Blocked;
            self.learning_scope = LearningScope::None;
            self.mutation_authority = MutationAuthority::None;
            self.oblige(PolicyObligation::AuditLog);
        }
        MemoryPolicyDecision {
            content_fidelity: self.content_fidelity,
            locality: self.locality,
            learning_scope: self.learning_scope,
            mutation_authority: self.mutation_authority,
            obligations: self.obligations,
            reason_codes: self.reason_codes,
            note: None,
        }
    }
}

/// How much content a fidelity lets through: a reference shows less than a
/// redacted copy.
fn rank(f: ContentFidelity) -> u8 {
    match f {
        ContentFidelity::None => 0,
        ContentFidelity::ReferenceOnly => 1,
        ContentFidelity::Redacted => 2,
        ContentFidelity::Full => 3,
    }
}

export!(DefaultPolicy);
