//! The `significance-gate` world: its input, its decision, the checks the
//! host applies to a plugin's answer, and its fail-safe.
//!
//! **Fail-safe:** `observe-only`, depth `none`, score 0. Nothing is
//! extracted; the raw record still holds the turn, so a fixed plugin can
//! capture it later. Capturing is the permissive direction here: a plugin
//! that crashes on a turn must not get that turn extracted by default.

use serde::{Deserialize, Serialize};
use wasmtime::Store;
use wasmtime::component::InstancePre;

use crate::bindings::significance as b;
use crate::decisions::DecisionOutput;
use crate::digest::{Digester, Feed, InputsDigest};
use crate::fault::{self, Fault};
use crate::store::StoreState;
use crate::vocab::{
    ActivityType, ExtractionDepth, ReasonCode, TurnRole, TurnView, WorkPhase, canary_text,
    mirror_enum,
};
use crate::world::{SignificanceGate, World, WorldKind};

use b::cairn::policy::significance::CollectionDecision as WitCollectionDecision;

/// The default base threshold (see docs/DESIGN.md,
/// *Significance gate and capture depth*).
pub const DEFAULT_BASE_THRESHOLD: f32 = 0.5;
/// The default research multiplier: research inside an active work context
/// lowers the threshold to `0.5 × 0.6 = 0.3`.
pub const DEFAULT_RESEARCH_MULTIPLIER: f32 = 0.6;

/// What the host knows of the moment a turn arrived in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateContext {
    /// The routing classification of the current activity.
    pub activity_type: ActivityType,
    /// Whether the session is inside a live work context.
    pub has_active_work_context: bool,
    /// The work context's dominant phase.
    pub work_phase: WorkPhase,
    /// The base threshold (default [`DEFAULT_BASE_THRESHOLD`]).
    pub base_threshold: f32,
    /// The research multiplier (default [`DEFAULT_RESEARCH_MULTIPLIER`]).
    pub research_multiplier: f32,
    /// How many turns the session holds so far, this one included.
    pub turns_in_session: u32,
}

impl Default for GateContext {
    fn default() -> Self {
        GateContext {
            activity_type: ActivityType::Unknown,
            has_active_work_context: false,
            work_phase: WorkPhase::Unknown,
            base_threshold: DEFAULT_BASE_THRESHOLD,
            research_multiplier: DEFAULT_RESEARCH_MULTIPLIER,
            turns_in_session: 0,
        }
    }
}

/// The gate's input: one turn and its context.
///
/// ```
/// use cairn_policies::{ActivityType, GateContext, SignificanceInput, TurnRole, TurnView};
///
/// let input = SignificanceInput {
///     turn: TurnView::new("s-1", 3, TurnRole::User, "Look up the scienter standard."),
///     context: GateContext {
///         activity_type: ActivityType::Research,
///         has_active_work_context: true,
///         ..GateContext::default()
///     },
/// };
/// assert_eq!(input.context.base_threshold, 0.5);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignificanceInput {
    /// The turn.
    pub turn: TurnView,
    /// Its context.
    pub context: GateContext,
}

mirror_enum! {
    /// What to do with a turn.
    pub enum CollectionDecision <=> WitCollectionDecision {
        /// Keep only the raw record; extract nothing.
        DoNotCollect = "do-not-collect",
        /// Keep the raw record, count the turn as activity; extract nothing.
        ObserveOnly = "observe-only",
        /// Extract candidates that need confirmation.
        ExtractCandidate = "extract-candidate",
        /// Extract entries that may become durable.
        ExtractDurableEligible = "extract-durable-eligible",
        /// Extract deeply.
        DeepExtract = "deep-extract",
    }
}

/// A significance gate's answer, checked by the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SignificanceDecision {
    /// What to do with the turn.
    pub collection_decision: CollectionDecision,
    /// How deeply to extract; `None` exactly when nothing is collected.
    pub extraction_depth: ExtractionDepth,
    /// How significant the turn is, in [0, 1].
    pub score: f32,
    /// The threshold the score was compared with, in [0, 1].
    pub threshold: f32,
    /// Why.
    pub reason_codes: Vec<ReasonCode>,
    /// The plugin's free-text note, if any.
    pub note: Option<String>,
}

impl SignificanceDecision {
    /// Whether the turn is captured: anything at all is extracted.
    pub fn captures(&self) -> bool {
        self.extraction_depth != ExtractionDepth::None
    }
}

impl Feed for GateContext {
    fn feed(&self, h: &mut Digester) {
        self.activity_type.feed(h);
        self.has_active_work_context.feed(h);
        self.work_phase.feed(h);
        self.base_threshold.feed(h);
        self.research_multiplier.feed(h);
        self.turns_in_session.feed(h);
    }
}

impl Feed for SignificanceInput {
    fn feed(&self, h: &mut Digester) {
        self.turn.feed(h);
        self.context.feed(h);
    }
}

fn to_wit(input: &SignificanceInput) -> b::SignificanceInput {
    let c = &input.context;
    b::SignificanceInput {
        turn: input.turn.to_wit(),
        context: b::cairn::policy::significance::GateContext {
            activity_type: c.activity_type.into(),
            has_active_work_context: c.has_active_work_context,
            work_phase: c.work_phase.into(),
            base_threshold: c.base_threshold,
            research_multiplier: c.research_multiplier,
            turns_in_session: c.turns_in_session,
        },
    }
}

/// Checks a guest's answer: the size cap first (before anything is
/// converted), then the rules documented on the WIT record.
fn accept(
    raw: b::SignificanceDecision,
    max_output_bytes: usize,
) -> Result<SignificanceDecision, Fault> {
    let size =
        fault::RECORD_OVERHEAD + raw.reason_codes.len() + raw.note.as_ref().map_or(0, String::len);
    fault::check_size(size, max_output_bytes)?;
    let score = fault::check_unit("score", raw.score)?;
    let threshold = fault::check_unit("threshold", raw.threshold)?;
    let collection_decision = CollectionDecision::from(raw.collection_decision);
    let extraction_depth = ExtractionDepth::from(raw.extraction_depth);
    let collects = !matches!(
        collection_decision,
        CollectionDecision::DoNotCollect | CollectionDecision::ObserveOnly
    );
    if collects == (extraction_depth == ExtractionDepth::None) {
        return Err(fault::invalid(format!(
            "collection decision {collection_decision} contradicts extraction depth {extraction_depth}"
        )));
    }
    if collection_decision == CollectionDecision::DeepExtract
        && extraction_depth != ExtractionDepth::Deep
    {
        return Err(fault::invalid(format!(
            "deep-extract needs depth deep, not {extraction_depth}"
        )));
    }
    Ok(SignificanceDecision {
        collection_decision,
        extraction_depth,
        score,
        threshold,
        reason_codes: raw.reason_codes.into_iter().map(ReasonCode::from).collect(),
        note: raw.note,
    })
}

impl World for SignificanceGate {
    type Input = SignificanceInput;
    type Decision = SignificanceDecision;
    const KIND: WorldKind = WorldKind::SignificanceGate;
    const EXPORT: &'static str = "gate";

    type Pre = b::SignificanceGatePre<StoreState>;
    type Instance = b::SignificanceGate;
    type Raw = b::SignificanceDecision;

    fn pre(pre: InstancePre<StoreState>) -> wasmtime::Result<Self::Pre> {
        b::SignificanceGatePre::new(pre)
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<Self::Instance> {
        pre.instantiate(store)
    }

    fn call(
        instance: &Self::Instance,
        store: &mut Store<StoreState>,
        input: &Self::Input,
    ) -> wasmtime::Result<Self::Raw> {
        instance.call_gate(store, &to_wit(input))
    }

    fn accept(raw: Self::Raw, max_output_bytes: usize) -> Result<Self::Decision, Fault> {
        accept(raw, max_output_bytes)
    }

    fn fail_safe(input: &Self::Input, cause: ReasonCode) -> Self::Decision {
        let base = input.context.base_threshold;
        SignificanceDecision {
            collection_decision: CollectionDecision::ObserveOnly,
            extraction_depth: ExtractionDepth::None,
            score: 0.0,
            threshold: if base.is_finite() {
                base.clamp(0.0, 1.0)
            } else {
                DEFAULT_BASE_THRESHOLD
            },
            reason_codes: vec![ReasonCode::FailSafe, cause],
            note: None,
        }
    }

    fn canary() -> Self::Input {
        let mut turn = TurnView::new("canary", 1, TurnRole::User, &canary_text());
        turn.work_context_id = Some("canary".into());
        SignificanceInput {
            turn,
            context: GateContext::default(),
        }
    }

    fn digest(input: &Self::Input) -> InputsDigest {
        InputsDigest::of(input)
    }

    fn session_of(input: &Self::Input) -> Option<&str> {
        Some(&input.turn.session_id)
    }

    fn output(decision: &Self::Decision) -> DecisionOutput {
        DecisionOutput::Significance(decision.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultKind;
    use b::cairn::policy::types as wt;

    fn raw() -> b::SignificanceDecision {
        b::SignificanceDecision {
            collection_decision: WitCollectionDecision::ExtractCandidate,
            extraction_depth: wt::ExtractionDepth::Shallow,
            score: 0.6,
            threshold: 0.5,
            reason_codes: vec![wt::ReasonCode::AboveThreshold],
            note: None,
        }
    }

    fn check(raw: b::SignificanceDecision) -> Result<SignificanceDecision, FaultKind> {
        accept(raw, 1024).map_err(|f| f.kind)
    }

    #[test]
    fn output_rules() {
        assert!(check(raw()).is_ok());
        assert_eq!(
            check(b::SignificanceDecision {
                score: f32::NAN,
                ..raw()
            }),
            Err(FaultKind::InvalidOutput)
        );
        assert_eq!(
            check(b::SignificanceDecision {
                threshold: -1.0,
                ..raw()
            }),
            Err(FaultKind::InvalidOutput)
        );
        assert_eq!(
            check(b::SignificanceDecision {
                extraction_depth: wt::ExtractionDepth::None,
                ..raw()
            }),
            Err(FaultKind::InvalidOutput)
        );
        assert_eq!(
            check(b::SignificanceDecision {
                collection_decision: WitCollectionDecision::DeepExtract,
                ..raw()
            }),
            Err(FaultKind::InvalidOutput)
        );
        assert_eq!(
            check(b::SignificanceDecision {
                collection_decision: WitCollectionDecision::ObserveOnly,
                ..raw()
            }),
            Err(FaultKind::InvalidOutput)
        );
        assert_eq!(
            check(b::SignificanceDecision {
                note: Some("x".repeat(2000)),
                ..raw()
            }),
            Err(FaultKind::OutputTooLarge)
        );
    }

    #[test]
    fn fail_safe_extracts_nothing() {
        let input = SignificanceInput {
            turn: TurnView::new("s", 1, TurnRole::User, "hi"),
            context: GateContext::default(),
        };
        let d = SignificanceGate::fail_safe(&input, ReasonCode::PluginFault);
        assert!(!d.captures());
        assert_eq!(d.collection_decision, CollectionDecision::ObserveOnly);
        assert_eq!(
            d.reason_codes,
            vec![ReasonCode::FailSafe, ReasonCode::PluginFault]
        );
    }
}
