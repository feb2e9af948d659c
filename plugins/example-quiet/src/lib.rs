//! An example significance gate: "keep the record, extract nothing".
//!
//! It implements the `significance-gate` world and answers every turn with
//! `observe-only`, depth `none`: the raw record keeps the turn, the turn still
//! counts as activity, but the gate never asks for it to be captured. Use it
//! to pause capture without stopping cairn (`cairn plugins swap
//! significance-gate example_quiet.wasm`), and swap the default back to
//! resume. The end-to-end tests swap it in to show that the runtime's capture
//! decisions really come from the installed plugin.
//!
//! See `plugins/README.md` for how to build and install it.

wit_bindgen::generate!({
    world: "significance-gate",
    path: "../../wit",
});

use cairn::policy::significance::CollectionDecision;
use cairn::policy::types::{ExtractionDepth, ReasonCode};

struct Quiet;

impl Guest for Quiet {
    fn gate(input: SignificanceInput) -> SignificanceDecision {
        let base = input.context.base_threshold;
        SignificanceDecision {
            collection_decision: CollectionDecision::ObserveOnly,
            extraction_depth: ExtractionDepth::None,
            score: 0.0,
            threshold: if base.is_finite() {
                base.clamp(0.0, 1.0)
            } else {
                0.5
            },
            reason_codes: vec![ReasonCode::Custom],
            note: Some("capture paused".into()),
        }
    }
}

export!(Quiet);
