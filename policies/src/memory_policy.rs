//! The `memory-policy` world: its request, its decision (the
//! `MemoryPolicyDecision` of docs/DESIGN.md, *Memory policy*), the checks
//! the host applies, and its fail-safe.
//!
//! **Fail-safe:** deny. Fidelity `none`, locality `blocked`, learning
//! `none`, mutation `none`, obligation `audit-log`. A broken policy never
//! lets content out.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use wasmtime::Store;
use wasmtime::component::InstancePre;

use crate::bindings::memory as b;
use crate::bindings::memory_assembly as ba;
use crate::bindings::memory_batch as bb;
use crate::bindings::memory_interned as bi;
use crate::decisions::DecisionOutput;
use crate::digest::{Digester, Feed, InputsDigest};
use crate::fault::{self, Fault};
use crate::store::StoreState;
use crate::vocab::{ReasonCode, mirror_enum};
use crate::world::{Answers, MemoryPolicy, World, WorldKind};

use b::cairn::policy::memory as wm;
use wm::{
    Action as WitAction, ContentFidelity as WitContentFidelity, Destination as WitDestination,
    LearningScope as WitLearningScope, Locality as WitLocality,
    MutationAuthority as WitMutationAuthority, ObjectKind as WitObjectKind,
    PolicyObligation as WitPolicyObligation, PrincipalKind as WitPrincipalKind,
    Sensitivity as WitSensitivity,
};

mirror_enum! {
    /// What kind of object a request is about.
    pub enum ObjectKind <=> WitObjectKind {
        /// A raw turn.
        Turn = "turn",
        /// A memory-log entry.
        Entry = "entry",
        /// A summary.
        Summary = "summary",
        /// A whole session.
        Session = "session",
        /// A subject.
        Subject = "subject",
        /// A topic.
        Topic = "topic",
    }
}

mirror_enum! {
    /// How sensitive an object is.
    pub enum Sensitivity <=> WitSensitivity {
        /// Nothing special.
        Normal = "normal",
        /// Personal data.
        Personal = "personal",
        /// Confidential.
        Confidential = "confidential",
        /// Secret.
        Secret = "secret",
    }
}

mirror_enum! {
    /// What is to be done with an object.
    pub enum Action <=> WitAction {
        /// Capture it into memory.
        Capture = "capture",
        /// Retrieve it.
        Retrieve = "retrieve",
        /// Render its content inline.
        RenderInline = "render-inline",
        /// Render a reference to it.
        RenderReference = "render-reference",
        /// Export it.
        Export = "export",
        /// Hand it to a delegate.
        Delegate = "delegate",
        /// Change it.
        Mutate = "mutate",
        /// Learn from it.
        LearnFrom = "learn-from",
        /// Generate a carry-over from it.
        CarryoverGenerate = "carryover-generate",
    }
}

mirror_enum! {
    /// Where an object would go.
    pub enum Destination <=> WitDestination {
        /// A model running on this machine.
        LocalModel = "local-model",
        /// A hosted model.
        CloudModel = "cloud-model",
        /// Another LLM outside cairn's control.
        ExternalLlm = "external-llm",
        /// A sub-agent.
        Subagent = "subagent",
        /// A share link.
        ShareLink = "share-link",
        /// A task runtime.
        TaskRuntime = "task-runtime",
        /// The user's screen.
        UserVisibleUi = "user-visible-ui",
    }
}

mirror_enum! {
    /// Who is asking.
    pub enum PrincipalKind <=> WitPrincipalKind {
        /// The user.
        User = "user",
        /// The agent.
        Agent = "agent",
        /// A sub-agent.
        Subagent = "subagent",
        /// An operator.
        Operator = "operator",
        /// Someone outside.
        External = "external",
    }
}

mirror_enum! {
    /// How much content may be shown.
    pub enum ContentFidelity <=> WitContentFidelity {
        /// Nothing.
        None = "none",
        /// A redacted copy.
        Redacted = "redacted",
        /// A reference only.
        ReferenceOnly = "reference-only",
        /// The full content.
        Full = "full",
    }
}

mirror_enum! {
    /// Where content may go.
    pub enum Locality <=> WitLocality {
        /// Nowhere.
        Blocked = "blocked",
        /// This machine only.
        LocalOnly = "local-only",
        /// Approved external destinations too.
        ApprovedExternal = "approved-external",
    }
}

mirror_enum! {
    /// What may be learned from content.
    pub enum LearningScope <=> WitLearningScope {
        /// Nothing.
        None = "none",
        /// Within its own scope.
        SameScopeOnly = "same-scope-only",
        /// In a partition.
        Partitioned = "partitioned",
        /// Anywhere.
        GlobalAllowed = "global-allowed",
    }
}

mirror_enum! {
    /// What may be written because of it.
    pub enum MutationAuthority <=> WitMutationAuthority {
        /// Nothing.
        None = "none",
        /// Candidates only.
        CandidateOnly = "candidate-only",
        /// Durable writes.
        DurableAllowed = "durable-allowed",
    }
}

mirror_enum! {
    /// What the host must do alongside.
    pub enum PolicyObligation <=> WitPolicyObligation {
        /// Record the use in the audit log.
        AuditLog = "audit-log",
        /// Tell the user.
        DiscloseToUser = "disclose-to-user",
        /// Label the content as low-trust.
        LabelLowTrust = "label-low-trust",
        /// Name the source.
        AttributeSource = "attribute-source",
        /// Redact personal data first.
        RedactPersonalData = "redact-personal-data",
        /// Ask the user first.
        ConfirmWithUser = "confirm-with-user",
        /// Forget the derived copy when the session ends.
        ExpireWithSession = "expire-with-session",
    }
}

/// The object a request is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentReference {
    /// What kind of object.
    pub kind: ObjectKind,
    /// Its id.
    pub id: String,
    /// Its work context.
    pub work_context_id: Option<String>,
    /// Its session.
    pub session_id: Option<String>,
    /// How sensitive it is.
    pub sensitivity: Sensitivity,
    /// Whether it came from a low-trust source.
    pub low_trust: bool,
}

/// A principal: who is asking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalRef {
    /// What kind.
    pub kind: PrincipalKind,
    /// Its id.
    pub id: String,
}

/// The policy's input.
///
/// ```
/// use cairn_policies::{Action, ContentReference, Destination, ObjectKind, PolicyRequest, Sensitivity};
///
/// let request = PolicyRequest::new(
///     ContentReference {
///         kind: ObjectKind::Entry,
///         id: "e-42".into(),
///         work_context_id: Some("wc-1".into()),
///         session_id: None,
///         sensitivity: Sensitivity::Personal,
///         low_trust: false,
///     },
///     Action::RenderInline,
///     Some(Destination::CloudModel),
/// );
/// assert!(!request.lineage_permitted);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRequest {
    /// The object.
    pub object_ref: ContentReference,
    /// What is to be done.
    pub action: Action,
    /// Where it would go.
    pub destination: Option<Destination>,
    /// Who asks.
    pub principal_ref: Option<PrincipalRef>,
    /// The surface asking (an HTTP route, a tool name).
    pub surface_ref: Option<String>,
    /// The work context the request comes from.
    pub requesting_work_context_id: Option<String>,
    /// Whether lineage rules allow the requesting context to read the
    /// object's context.
    pub lineage_permitted: bool,
}

impl PolicyRequest {
    /// A request with no principal, surface or requesting context, and no
    /// lineage permission; set the other public fields as needed.
    pub fn new(
        object_ref: ContentReference,
        action: Action,
        destination: Option<Destination>,
    ) -> PolicyRequest {
        PolicyRequest {
            object_ref,
            action,
            destination,
            principal_ref: None,
            surface_ref: None,
            requesting_work_context_id: None,
            lineage_permitted: false,
        }
    }
}

/// A memory policy's answer, checked by the host: one typed answer per
/// dimension, not a single safety score (see docs/DESIGN.md,
/// *Memory policy*). The host stamps the decision id and generation on
/// the surrounding [`Decided`](crate::Decided).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemoryPolicyDecision {
    /// How much content may be shown.
    pub content_fidelity: ContentFidelity,
    /// Where it may go.
    pub locality: Locality,
    /// What may be learned from it.
    pub learning_scope: LearningScope,
    /// What may be written because of it.
    pub mutation_authority: MutationAuthority,
    /// What the host must do alongside. Shared, not copied, between the
    /// candidates of a batch that got the same decision.
    pub obligations: Arc<[PolicyObligation]>,
    /// Why (shared as `obligations` is).
    pub reason_codes: Arc<[ReasonCode]>,
    /// The plugin's free-text note, if any.
    pub note: Option<String>,
}

impl MemoryPolicyDecision {
    /// Whether any content (even a redacted copy or a reference) may be
    /// used.
    pub fn allows_content(&self) -> bool {
        self.locality != Locality::Blocked && self.content_fidelity != ContentFidelity::None
    }
}

impl Feed for PolicyRequest {
    fn feed(&self, h: &mut Digester) {
        let o = &self.object_ref;
        o.kind.feed(h);
        o.id.feed(h);
        o.work_context_id.feed(h);
        o.session_id.feed(h);
        o.sensitivity.feed(h);
        o.low_trust.feed(h);
        self.action.feed(h);
        self.destination.feed(h);
        match &self.principal_ref {
            None => 0u8.feed(h),
            Some(p) => {
                1u8.feed(h);
                p.kind.feed(h);
                p.id.feed(h);
            }
        }
        self.surface_ref.feed(h);
        self.requesting_work_context_id.feed(h);
        self.lineage_permitted.feed(h);
    }
}

fn to_wit_reference(o: &ContentReference) -> wm::ContentReference {
    wm::ContentReference {
        kind: o.kind.into(),
        id: o.id.clone(),
        work_context_id: o.work_context_id.clone(),
        session_id: o.session_id.clone(),
        sensitivity: o.sensitivity.into(),
        low_trust: o.low_trust,
    }
}

fn to_wit(r: &PolicyRequest) -> b::PolicyRequest {
    let asker = asker_of(r);
    b::PolicyRequest {
        object_ref: to_wit_reference(&r.object_ref),
        action: asker.action,
        destination: asker.destination,
        principal_ref: asker.principal_ref,
        surface_ref: asker.surface_ref,
        requesting_work_context_id: asker.requesting_work_context_id,
        lineage_permitted: r.lineage_permitted,
    }
}

/// Copies `o` into `w`, reusing `w`'s strings' buffers.
fn assign_reference(w: &mut wm::ContentReference, o: &ContentReference) {
    w.kind = o.kind.into();
    w.id.clone_from(&o.id);
    w.work_context_id.clone_from(&o.work_context_id);
    w.session_id.clone_from(&o.session_id);
    w.sensitivity = o.sensitivity.into();
    w.low_trust = o.low_trust;
}

/// Copies `r` into `w`, reusing `w`'s strings' buffers.
fn assign_wit(w: &mut b::PolicyRequest, r: &PolicyRequest) {
    assign_reference(&mut w.object_ref, &r.object_ref);
    w.action = r.action.into();
    w.destination = r.destination.map(Into::into);
    match (&mut w.principal_ref, &r.principal_ref) {
        (Some(wp), Some(p)) => {
            wp.kind = p.kind.into();
            wp.id.clone_from(&p.id);
        }
        (wp, p) => {
            *wp = p.as_ref().map(|p| wm::PrincipalRef {
                kind: p.kind.into(),
                id: p.id.clone(),
            });
        }
    }
    w.surface_ref.clone_from(&r.surface_ref);
    w.requesting_work_context_id
        .clone_from(&r.requesting_work_context_id);
    w.lineage_permitted = r.lineage_permitted;
}

/// The largest batch whose converted requests a thread keeps for the next.
const MAX_KEPT_REQUESTS: usize = 1024;

/// Calls `f` with `inputs` in the generated bindings' form, converted into
/// a per-thread list kept between batches: an assembly's batch then costs
/// no allocation for its requests' strings, only their bytes.
fn with_wit_requests<R>(inputs: &[PolicyRequest], f: impl FnOnce(&[b::PolicyRequest]) -> R) -> R {
    thread_local! {
        static REQUESTS: RefCell<Vec<b::PolicyRequest>> = const { RefCell::new(Vec::new()) };
    }
    with_kept(&REQUESTS, inputs, to_wit, assign_wit, f)
}

/// Calls `f` with `inputs` converted by `make` (or, into a slot kept from
/// an earlier call, by `assign`) in the per-thread list `kept`, which keeps
/// up to [`MAX_KEPT_REQUESTS`] converted values and their strings' buffers
/// for the next call. A fresh list when `kept` is in use (a reentrant call).
fn with_kept<T: 'static, R>(
    kept: &'static std::thread::LocalKey<RefCell<Vec<T>>>,
    inputs: &[PolicyRequest],
    make: fn(&PolicyRequest) -> T,
    assign: fn(&mut T, &PolicyRequest),
    f: impl FnOnce(&[T]) -> R,
) -> R {
    kept.with(|kept| {
        let Ok(mut kept) = kept.try_borrow_mut() else {
            let fresh: Vec<T> = inputs.iter().map(make).collect();
            return f(&fresh);
        };
        for (slot, input) in kept.iter_mut().zip(inputs) {
            assign(slot, input);
        }
        let have = kept.len();
        kept.extend(inputs.iter().skip(have).map(make));
        let out = f(&kept[..inputs.len()]);
        kept.truncate(MAX_KEPT_REQUESTS);
        out
    })
}

/// The first request of `inputs` when every other has its asker (action,
/// destination, principal, surface, requesting work context): then one
/// `decide-candidates` call can carry them all.
fn shared_asker(inputs: &[PolicyRequest]) -> Option<&PolicyRequest> {
    let (first, rest) = inputs.split_first()?;
    rest.iter()
        .all(|r| {
            r.action == first.action
                && r.destination == first.destination
                && r.principal_ref == first.principal_ref
                && r.surface_ref == first.surface_ref
                && r.requesting_work_context_id == first.requesting_work_context_id
        })
        .then_some(first)
}

/// The asker of `r`, in the generated bindings' form.
fn asker_of(r: &PolicyRequest) -> wm::Asker {
    wm::Asker {
        action: r.action.into(),
        destination: r.destination.map(Into::into),
        principal_ref: r.principal_ref.as_ref().map(|p| wm::PrincipalRef {
            kind: p.kind.into(),
            id: p.id.clone(),
        }),
        surface_ref: r.surface_ref.clone(),
        requesting_work_context_id: r.requesting_work_context_id.clone(),
    }
}

fn candidate_of(r: &PolicyRequest) -> wm::Candidate {
    wm::Candidate {
        object_ref: to_wit_reference(&r.object_ref),
        lineage_permitted: r.lineage_permitted,
    }
}

/// Calls `f` with the asker of `shared` (which every request of `inputs`
/// has: see [`shared_asker`]) and the requests' candidates, in the
/// generated bindings' form, converted into a per-thread list kept between
/// calls (as [`with_wit_requests`]).
fn with_wit_candidates<R>(
    shared: &PolicyRequest,
    inputs: &[PolicyRequest],
    f: impl FnOnce(&wm::Asker, &[wm::Candidate]) -> R,
) -> R {
    thread_local! {
        static CANDIDATES: RefCell<Vec<wm::Candidate>> = const { RefCell::new(Vec::new()) };
    }
    let asker = asker_of(shared);
    let assign = |slot: &mut wm::Candidate, input: &PolicyRequest| {
        assign_reference(&mut slot.object_ref, &input.object_ref);
        slot.lineage_permitted = input.lineage_permitted;
    };
    with_kept(&CANDIDATES, inputs, candidate_of, assign, |candidates| {
        f(&asker, candidates)
    })
}

/// The largest call whose names a thread keeps for the next.
const MAX_KEPT_NAMES: usize = 4096;

/// A call's names: every distinct work-context and session id of its
/// candidates, once, in the order first met; a per-thread list whose
/// strings' buffers are kept between calls.
#[derive(Default)]
struct Names {
    names: Vec<String>,
    len: usize,
    /// The index of each name, once a call has more than [`Names::SCAN`].
    many: HashMap<String, u32>,
}

impl Names {
    /// Up to this many names, a name is found by a scan (an assembly's
    /// candidates come from a few contexts and sessions: cheaper than
    /// hashing); past it, by a map, so a call of many sessions stays linear.
    const SCAN: usize = 32;

    /// Starts a call's names.
    fn clear(&mut self) {
        self.len = 0;
        self.many.clear();
    }

    /// This call's names, in the order first met.
    fn as_slice(&self) -> &[String] {
        &self.names[..self.len]
    }

    /// The index of `name`, added if it is new to this call.
    fn index(&mut self, name: Option<&String>) -> Option<u32> {
        let name = name?;
        let found = if self.len <= Self::SCAN {
            self.as_slice()
                .iter()
                .position(|n| n == name)
                .and_then(|i| u32::try_from(i).ok())
        } else {
            self.many.get(name.as_str()).copied()
        };
        if found.is_some() {
            return found;
        }
        let i = u32::try_from(self.len).ok()?;
        match self.names.get_mut(self.len) {
            Some(slot) => slot.clone_from(name),
            None => self.names.push(name.clone()),
        }
        self.len += 1;
        if self.len > Self::SCAN {
            if self.many.is_empty() {
                self.many = (0u32..)
                    .zip(self.as_slice())
                    .map(|(k, n)| (n.clone(), k))
                    .collect();
            } else {
                self.many.insert(name.clone(), i);
            }
        }
        Some(i)
    }
}

/// Calls `f` with the asker of `shared` (which every request of `inputs`
/// has: see [`shared_asker`]), the candidates' work-context and session ids
/// once each, and the candidates naming them by index, in the generated
/// bindings' form, converted into per-thread lists kept between calls (as
/// [`with_wit_requests`]).
fn with_wit_interned<R>(
    shared: &PolicyRequest,
    inputs: &[PolicyRequest],
    f: impl FnOnce(&wm::Asker, &[String], &[wm::InternedCandidate]) -> R,
) -> R {
    thread_local! {
        static KEPT: RefCell<(Names, Vec<wm::InternedCandidate>)> =
            RefCell::new((Names::default(), Vec::new()));
    }
    let asker = asker_of(shared);
    // Fills `candidates` from `inputs` (a slot kept from an earlier call
    // keeps its id's buffer) and returns how many it holds for this call.
    let fill = |names: &mut Names, candidates: &mut Vec<wm::InternedCandidate>| {
        names.clear();
        for (k, r) in inputs.iter().enumerate() {
            let o = &r.object_ref;
            let work_context = names.index(o.work_context_id.as_ref());
            let session = names.index(o.session_id.as_ref());
            let id = match candidates.get_mut(k) {
                Some(slot) => {
                    slot.id.clone_from(&o.id);
                    std::mem::take(&mut slot.id)
                }
                None => o.id.clone(),
            };
            let candidate = wm::InternedCandidate {
                kind: o.kind.into(),
                id,
                work_context,
                session,
                sensitivity: o.sensitivity.into(),
                low_trust: o.low_trust,
                lineage_permitted: r.lineage_permitted,
            };
            match candidates.get_mut(k) {
                Some(slot) => *slot = candidate,
                None => candidates.push(candidate),
            }
        }
        inputs.len()
    };
    KEPT.with(|kept| {
        let Ok(mut kept) = kept.try_borrow_mut() else {
            let (mut names, mut candidates) = (Names::default(), Vec::new());
            fill(&mut names, &mut candidates);
            return f(&asker, names.as_slice(), &candidates);
        };
        let (names, candidates) = &mut *kept;
        let n = fill(names, candidates);
        let out = f(&asker, names.as_slice(), &candidates[..n]);
        candidates.truncate(MAX_KEPT_REQUESTS);
        names.names.truncate(MAX_KEPT_NAMES);
        out
    })
}

/// A `decide-interned` answer as the host checks any batched answer.
fn answers_of(verdicts: wm::Verdicts) -> Answers<b::MemoryPolicyDecision> {
    Answers {
        decisions: verdicts.decisions,
        picks: verdicts.picks,
    }
}

fn accept(
    raw: b::MemoryPolicyDecision,
    max_output_bytes: usize,
) -> Result<MemoryPolicyDecision, Fault> {
    let size = fault::RECORD_OVERHEAD
        + raw.obligations.len()
        + raw.reason_codes.len()
        + raw.note.as_ref().map_or(0, String::len);
    fault::check_size(size, max_output_bytes)?;
    let content_fidelity = ContentFidelity::from(raw.content_fidelity);
    let locality = Locality::from(raw.locality);
    if locality == Locality::Blocked && content_fidelity != ContentFidelity::None {
        return Err(fault::invalid(format!(
            "locality blocked with content fidelity {content_fidelity}"
        )));
    }
    Ok(MemoryPolicyDecision {
        content_fidelity,
        locality,
        learning_scope: raw.learning_scope.into(),
        mutation_authority: raw.mutation_authority.into(),
        obligations: raw
            .obligations
            .into_iter()
            .map(PolicyObligation::from)
            .collect(),
        reason_codes: raw.reason_codes.into_iter().map(ReasonCode::from).collect(),
        note: raw.note,
    })
}

/// A memory-policy component, type-checked: one that also takes an
/// assembly's candidates with their contexts and sessions interned
/// (`memory-policy-interned`, 0.1.3), one that takes them with their asker
/// once (`memory-policy-assembly`, 0.1.2), one that exports the batched call
/// (`memory-policy-batch`, 0.1.1) or one that only decides one request at a
/// time (`memory-policy`); all are served.
#[derive(Clone)]
#[doc(hidden)]
#[allow(missing_debug_implementations, reason = "holds wasmtime handles")]
pub enum MemoryPre {
    Interned(bi::MemoryPolicyInternedPre<StoreState>),
    Assembly(ba::MemoryPolicyAssemblyPre<StoreState>),
    Batch(bb::MemoryPolicyBatchPre<StoreState>),
    Single(b::MemoryPolicyPre<StoreState>),
}

/// An instance of any kind of memory-policy component.
#[doc(hidden)]
#[allow(missing_debug_implementations, reason = "holds wasmtime handles")]
pub enum MemoryInstance {
    Interned(bi::MemoryPolicyInterned),
    Assembly(ba::MemoryPolicyAssembly),
    Batch(bb::MemoryPolicyBatch),
    Single(b::MemoryPolicy),
}

impl World for MemoryPolicy {
    type Input = PolicyRequest;
    type Decision = MemoryPolicyDecision;
    const KIND: WorldKind = WorldKind::MemoryPolicy;
    const EXPORT: &'static str = "decide";

    type Pre = MemoryPre;
    type Instance = MemoryInstance;
    type Raw = b::MemoryPolicyDecision;

    fn pre(pre: InstancePre<StoreState>) -> wasmtime::Result<Self::Pre> {
        if let Ok(interned) = bi::MemoryPolicyInternedPre::new(pre.clone()) {
            return Ok(MemoryPre::Interned(interned));
        }
        if let Ok(assembly) = ba::MemoryPolicyAssemblyPre::new(pre.clone()) {
            return Ok(MemoryPre::Assembly(assembly));
        }
        match bb::MemoryPolicyBatchPre::new(pre.clone()) {
            Ok(batch) => Ok(MemoryPre::Batch(batch)),
            Err(_) => b::MemoryPolicyPre::new(pre).map(MemoryPre::Single),
        }
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<Self::Instance> {
        match pre {
            MemoryPre::Interned(pre) => pre.instantiate(store).map(MemoryInstance::Interned),
            MemoryPre::Assembly(pre) => pre.instantiate(store).map(MemoryInstance::Assembly),
            MemoryPre::Batch(pre) => pre.instantiate(store).map(MemoryInstance::Batch),
            MemoryPre::Single(pre) => pre.instantiate(store).map(MemoryInstance::Single),
        }
    }

    fn call(
        instance: &Self::Instance,
        store: &mut Store<StoreState>,
        input: &Self::Input,
    ) -> wasmtime::Result<Self::Raw> {
        match instance {
            MemoryInstance::Interned(i) => i.call_decide(store, &to_wit(input)),
            MemoryInstance::Assembly(i) => i.call_decide(store, &to_wit(input)),
            MemoryInstance::Batch(i) => i.call_decide(store, &to_wit(input)),
            MemoryInstance::Single(i) => i.call_decide(store, &to_wit(input)),
        }
    }

    fn call_many(
        instance: &Self::Instance,
        store: &mut Store<StoreState>,
        inputs: &[Self::Input],
    ) -> Option<wasmtime::Result<Answers<Self::Raw>>> {
        match instance {
            MemoryInstance::Interned(i) => Some(match shared_asker(inputs) {
                Some(shared) => with_wit_interned(shared, inputs, |asker, names, candidates| {
                    i.call_decide_interned(&mut *store, asker, names, candidates)
                })
                .map(answers_of),
                None => with_wit_requests(inputs, |requests| {
                    i.call_decide_batch(&mut *store, requests)
                })
                .map(Answers::each),
            }),
            MemoryInstance::Assembly(i) => Some(
                match shared_asker(inputs) {
                    Some(shared) => with_wit_candidates(shared, inputs, |asker, candidates| {
                        i.call_decide_candidates(&mut *store, asker, candidates)
                    }),
                    None => with_wit_requests(inputs, |requests| {
                        i.call_decide_batch(&mut *store, requests)
                    }),
                }
                .map(Answers::each),
            ),
            MemoryInstance::Batch(i) => Some(
                with_wit_requests(inputs, |requests| {
                    i.call_decide_batch(&mut *store, requests)
                })
                .map(Answers::each),
            ),
            MemoryInstance::Single(_) => None,
        }
    }

    fn accept(raw: Self::Raw, max_output_bytes: usize) -> Result<Self::Decision, Fault> {
        accept(raw, max_output_bytes)
    }

    fn fail_safe(_input: &Self::Input, cause: ReasonCode) -> Self::Decision {
        MemoryPolicyDecision {
            content_fidelity: ContentFidelity::None,
            locality: Locality::Blocked,
            learning_scope: LearningScope::None,
            mutation_authority: MutationAuthority::None,
            obligations: [PolicyObligation::AuditLog].into(),
            reason_codes: [ReasonCode::FailSafe, cause].into(),
            note: None,
        }
    }

    fn canary() -> Self::Input {
        let mut request = PolicyRequest::new(
            ContentReference {
                kind: ObjectKind::Entry,
                id: "canary".into(),
                work_context_id: Some("canary".into()),
                session_id: Some("canary".into()),
                sensitivity: Sensitivity::Normal,
                low_trust: false,
            },
            Action::RenderInline,
            Some(Destination::LocalModel),
        );
        request.requesting_work_context_id = Some("canary".into());
        request
    }

    fn digest(input: &Self::Input) -> InputsDigest {
        InputsDigest::of(input)
    }

    fn session_of(input: &Self::Input) -> Option<&str> {
        input.object_ref.session_id.as_deref()
    }

    fn output(decision: &Self::Decision) -> DecisionOutput {
        DecisionOutput::Memory(decision.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultKind;

    #[test]
    fn blocked_must_show_nothing() {
        let raw = b::MemoryPolicyDecision {
            content_fidelity: WitContentFidelity::Full,
            locality: WitLocality::Blocked,
            learning_scope: WitLearningScope::None,
            mutation_authority: WitMutationAuthority::None,
            obligations: vec![],
            reason_codes: vec![],
            note: None,
        };
        assert_eq!(
            accept(raw, 1024).map_err(|f| f.kind),
            Err(FaultKind::InvalidOutput)
        );
    }

    #[test]
    fn the_default_policy_takes_its_candidates_interned() {
        let config = crate::HostConfig::default().prewarm_instances(0);
        let host =
            crate::PolicyHost::new(config, std::sync::Arc::new(crate::MemorySink::default()))
                .unwrap();
        let prepared = host
            .prepare::<MemoryPolicy>("memory-policy-default", crate::defaults::MEMORY_POLICY.wasm)
            .unwrap();
        assert!(matches!(prepared.pre, MemoryPre::Interned(_)));
    }

    #[test]
    fn names_are_interned_once_each_in_the_order_met() {
        let mut names = Names::default();
        let (a, b) = ("wc-a".to_owned(), "s-b".to_owned());
        assert_eq!(names.index(Some(&a)), Some(0));
        assert_eq!(names.index(None), None);
        assert_eq!(names.index(Some(&b)), Some(1));
        assert_eq!(names.index(Some(&a)), Some(0));
        assert_eq!(names.as_slice(), [a.clone(), b.clone()]);
        // The next call starts empty and reuses the buffers.
        names.clear();
        assert_eq!(names.index(Some(&b)), Some(0));
        assert_eq!(names.as_slice(), [b]);
    }

    #[test]
    fn many_names_are_interned_once_each_past_the_scan() {
        let mut names = Names::default();
        for round in 0..2 {
            names.clear();
            let all: Vec<String> = (0..200).map(|i| format!("s-{round}-{i}")).collect();
            for (i, name) in all.iter().enumerate() {
                assert_eq!(names.index(Some(name)), u32::try_from(i).ok());
            }
            // Every one again, early and late, keeps its index.
            for (i, name) in all.iter().enumerate().rev() {
                assert_eq!(names.index(Some(name)), u32::try_from(i).ok());
            }
            assert_eq!(names.as_slice(), all);
        }
    }

    #[test]
    fn fail_safe_denies() {
        let request = PolicyRequest::new(
            ContentReference {
                kind: ObjectKind::Turn,
                id: "t".into(),
                work_context_id: None,
                session_id: None,
                sensitivity: Sensitivity::Normal,
                low_trust: false,
            },
            Action::RenderInline,
            None,
        );
        let d = MemoryPolicy::fail_safe(&request, ReasonCode::CircuitOpen);
        assert!(!d.allows_content());
        assert_eq!(d.mutation_authority, MutationAuthority::None);
    }
}
