//! The three worlds as Rust types: [`SignificanceGate`], [`TopicDirective`]
//! and [`MemoryPolicy`], each a marker implementing the sealed [`World`]
//! trait that ties together its input, its decision, its generated bindings
//! and its fail-safe.

use std::fmt;

use wasmtime::Store;
use wasmtime::component::InstancePre;

use crate::decisions::DecisionOutput;
use crate::digest::InputsDigest;
use crate::fault::Fault;
use crate::store::StoreState;
use crate::vocab::ReasonCode;

named_enum! {
    /// Which of the three worlds a plugin implements.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum WorldKind {
        /// `cairn:policy/significance-gate`.
        SignificanceGate = "significance-gate",
        /// `cairn:policy/topic-directive`.
        TopicDirective = "topic-directive",
        /// `cairn:policy/memory-policy`.
        MemoryPolicy = "memory-policy",
    }
    /// The world's name in the WIT package.
    fn as_str;
}

/// The `significance-gate` world: is this turn worth capturing, how deeply?
#[derive(Debug)]
pub enum SignificanceGate {}

/// The `topic-directive` world: should this topic collect this input, into
/// what?
#[derive(Debug)]
pub enum TopicDirective {}

/// The `memory-policy` world: may this object be captured, retrieved,
/// rendered, exported, learned from, at what fidelity, by whom?
#[derive(Debug)]
pub enum MemoryPolicy {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::SignificanceGate {}
    impl Sealed for super::TopicDirective {}
    impl Sealed for super::MemoryPolicy {}
}

/// One of the three WIT worlds. Sealed: implemented by
/// [`SignificanceGate`], [`TopicDirective`] and [`MemoryPolicy`] only.
///
/// The hidden items are the host's plumbing (generated bindings, output
/// checks, the fail-safe); embedders only ever name `Input`, `Decision` and
/// `KIND`.
#[allow(
    private_interfaces,
    private_bounds,
    reason = "sealed plumbing: the hidden items name crate-private types on purpose"
)]
pub trait World: sealed::Sealed + Send + Sync + Sized + 'static {
    /// What the plugin is asked about.
    type Input: Send + Sync + fmt::Debug;
    /// What it answers (checked by the host), or the fail-safe.
    type Decision: Clone + Send + Sync + fmt::Debug + PartialEq;
    /// Which world this is.
    const KIND: WorldKind;
    /// The function a plugin of this world exports.
    const EXPORT: &'static str;

    #[doc(hidden)]
    type Pre: Clone + Send + Sync + 'static;
    #[doc(hidden)]
    type Instance: Send + 'static;
    #[doc(hidden)]
    type Raw;

    /// Type-checks the component's exports against the world.
    #[doc(hidden)]
    fn pre(pre: InstancePre<StoreState>) -> wasmtime::Result<Self::Pre>;

    #[doc(hidden)]
    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<Self::Instance>;

    #[doc(hidden)]
    fn call(
        instance: &Self::Instance,
        store: &mut Store<StoreState>,
        input: &Self::Input,
    ) -> wasmtime::Result<Self::Raw>;

    /// One call deciding every input, when the plugin exports a batched
    /// call (`Some`): the raw answers, which the host checks one per input.
    /// `None` when the plugin (or the world) has no batched call: the host
    /// then calls [`World::call`] once per input.
    #[doc(hidden)]
    fn call_many(
        _instance: &Self::Instance,
        _store: &mut Store<StoreState>,
        _inputs: &[Self::Input],
    ) -> Option<wasmtime::Result<Vec<Self::Raw>>> {
        None
    }

    /// Checks the guest's output (size first, then meaning) and converts it.
    #[doc(hidden)]
    fn accept(raw: Self::Raw, max_output_bytes: usize) -> Result<Self::Decision, Fault>;

    /// The world's documented fail-safe decision, with `cause` among its
    /// reason codes.
    #[doc(hidden)]
    fn fail_safe(input: &Self::Input, cause: ReasonCode) -> Self::Decision;

    /// An ordinary input, decided once by every new instance before its
    /// generation serves.
    #[doc(hidden)]
    fn canary() -> Self::Input;

    #[doc(hidden)]
    fn digest(input: &Self::Input) -> InputsDigest;

    /// The session the input's object belongs to, if any (recorded so an
    /// erasure of the session can scrub the decision log).
    #[doc(hidden)]
    fn session_of(input: &Self::Input) -> Option<&str>;

    #[doc(hidden)]
    fn output(decision: &Self::Decision) -> DecisionOutput;
}
