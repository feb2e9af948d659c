//! The three worlds as Rust types: [`SignificanceGate`], [`TopicDirective`]
//! and [`MemoryPolicy`], each a marker implementing the sealed [`World`]
//! trait that ties together its input, its decision, its generated bindings
//! and its fail-safe.

use std::fmt;

use wasmtime::Store;
use wasmtime::component::InstancePre;

use crate::decisions::DecisionOutput;
use crate::digest::InputsDigest;
use crate::fault::{self, Fault};
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
    /// call (`Some`): the raw answers, which the host checks (see
    /// [`Answers`]). `None` when the plugin (or the world) has no batched
    /// call: the host then calls [`World::call`] once per input.
    #[doc(hidden)]
    fn call_many(
        _instance: &Self::Instance,
        _store: &mut Store<StoreState>,
        _inputs: &[Self::Input],
    ) -> Option<wasmtime::Result<Answers<Self::Raw>>> {
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

/// A batched call's raw answer: decisions, and for each input, in order,
/// the index of its decision. A call that answers one decision per input
/// picks each in turn ([`Answers::each`]); one that answers each distinct
/// decision once (`decide-interned`) picks them by index. The host checks
/// that there is one pick per input, each within `decisions`, and no more
/// decisions than inputs.
#[doc(hidden)]
#[derive(Debug)]
pub struct Answers<R> {
    /// The decisions, each checked once.
    pub decisions: Vec<R>,
    /// For each input, the index of its decision in `decisions`.
    pub picks: Vec<u32>,
}

impl<R> Answers<R> {
    /// One decision per input, in order.
    pub fn each(decisions: Vec<R>) -> Self {
        let picks = (0..decisions.len())
            .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
            .collect();
        Answers { decisions, picks }
    }

    /// Whether every input has its own decision, in order.
    fn is_each(&self) -> bool {
        self.decisions.len() == self.picks.len()
            && self.picks.iter().enumerate().all(|(i, &p)| p as usize == i)
    }

    /// The answers checked by `accept` (each decision once), one decision
    /// per input of `inputs` inputs, or the rule the answer broke.
    pub(crate) fn accept<D: Clone>(
        self,
        inputs: usize,
        mut accept: impl FnMut(R) -> Result<D, Fault>,
    ) -> Result<Vec<D>, Fault> {
        if self.picks.len() != inputs {
            return Err(fault::invalid(format!(
                "{} decisions for {} requests",
                self.picks.len(),
                inputs
            )));
        }
        if self.decisions.len() > inputs {
            return Err(fault::invalid(format!(
                "{} distinct decisions for {} requests",
                self.decisions.len(),
                inputs
            )));
        }
        let each = self.is_each();
        let accepted = self
            .decisions
            .into_iter()
            .map(&mut accept)
            .collect::<Result<Vec<D>, Fault>>()?;
        if each {
            return Ok(accepted);
        }
        self.picks
            .iter()
            .map(|&p| {
                accepted.get(p as usize).cloned().ok_or_else(|| {
                    fault::invalid(format!(
                        "decision {p} picked of {} decisions",
                        accepted.len()
                    ))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultKind;

    fn accept(answers: Answers<u8>, inputs: usize) -> Result<Vec<u8>, FaultKind> {
        answers
            .accept(inputs, |raw| match raw {
                255 => Err(fault::invalid("bad")),
                ok => Ok(ok),
            })
            .map_err(|f| f.kind)
    }

    #[test]
    fn each_input_gets_its_own_decision() {
        assert_eq!(accept(Answers::each(vec![3, 1, 2]), 3), Ok(vec![3, 1, 2]));
        assert_eq!(accept(Answers::each(vec![]), 0), Ok(vec![]));
    }

    #[test]
    fn picks_share_a_decision_between_inputs() {
        let answers = Answers {
            decisions: vec![7, 9],
            picks: vec![0, 1, 1, 0, 1],
        };
        assert_eq!(accept(answers, 5), Ok(vec![7, 9, 9, 7, 9]));
        // The same decisions in another order are picked as such.
        let answers = Answers {
            decisions: vec![1, 2, 3],
            picks: vec![2, 1, 0],
        };
        assert_eq!(accept(answers, 3), Ok(vec![3, 2, 1]));
    }

    #[test]
    fn an_answer_that_breaks_the_rules_is_invalid() {
        let invalid = Err(FaultKind::InvalidOutput);
        // One decision too few or too many.
        assert_eq!(accept(Answers::each(vec![1, 2]), 3), invalid);
        assert_eq!(accept(Answers::each(vec![1, 2, 3, 4]), 3), invalid);
        // A pick past the decisions.
        let past = Answers {
            decisions: vec![1, 2],
            picks: vec![0, 2, 1],
        };
        assert_eq!(accept(past, 3), invalid);
        // More decisions than inputs, even if every input has a pick.
        let more = Answers {
            decisions: vec![1, 2, 3],
            picks: vec![0, 1],
        };
        assert_eq!(accept(more, 2), invalid);
        // A decision nobody picked is still checked.
        let unpicked_bad = Answers {
            decisions: vec![1, 255],
            picks: vec![0, 0],
        };
        assert_eq!(accept(unpicked_bad, 2), invalid);
    }
}
