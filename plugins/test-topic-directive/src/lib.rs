//! A test topic directive for cairn's conformance tests
//! (`tests/all/topic_directives.rs`): its answer is spelled by the topic's
//! name, one word per field, so each test picks the answer it observes.
//!
//! The words of the name (split on `-`):
//!
//! - `skip`: do not collect (depth `none`, no outputs);
//! - the collection mode: `suggest`, `watch`, `backfill`, `extract`
//!   (default `watch-future-sources`);
//! - the extraction depth: `shallow`, `standard`, `deep` (default
//!   `shallow`);
//! - the output targets: `member`, `evidence`, `assertion`, `frame`
//!   (`issue-frame-update`), `null` (`null-result`); default
//!   `topic-membership`;
//! - `review`: review required before durable promotion.
//!
//! Any other word is ignored. The note names the source class it was
//! asked with, so a test can see what the host passed.

wit_bindgen::generate!({
    world: "topic-directive",
    path: "../../wit",
});

use cairn::policy::topic::{CollectionMode, OutputTarget, SourceClass};
use cairn::policy::types::{ExtractionDepth, ReasonCode};

struct ByName;

impl Guest for ByName {
    fn direct(input: TopicInput) -> TopicDirectiveDecision {
        let mut mode = CollectionMode::WatchFutureSources;
        let mut depth = ExtractionDepth::Shallow;
        let mut targets = Vec::new();
        let mut review = false;
        let mut collect = true;
        for word in input.topic.name.split('-') {
            match word {
                "skip" => collect = false,
                "suggest" => mode = CollectionMode::SuggestOnly,
                "watch" => mode = CollectionMode::WatchFutureSources,
                "backfill" => mode = CollectionMode::BackfillExistingMemory,
                "extract" => mode = CollectionMode::ExtractFromSelectedSources,
                "shallow" => depth = ExtractionDepth::Shallow,
                "standard" => depth = ExtractionDepth::Standard,
                "deep" => depth = ExtractionDepth::Deep,
                "member" => targets.push(OutputTarget::TopicMembership),
                "evidence" => targets.push(OutputTarget::EvidenceRecord),
                "assertion" => targets.push(OutputTarget::AssertionCandidate),
                "frame" => targets.push(OutputTarget::IssueFrameUpdate),
                "null" => targets.push(OutputTarget::NullResult),
                "review" => review = true,
                _ => {}
            }
        }
        if targets.is_empty() {
            targets.push(OutputTarget::TopicMembership);
        }
        let class = match input.source_class {
            SourceClass::Chat => "chat",
            SourceClass::ToolOutput => "tool-output",
            SourceClass::MemoryEntry => "memory-entry",
            _ => "other",
        };
        TopicDirectiveDecision {
            collect,
            collection_mode: mode,
            extraction_depth: if collect {
                depth
            } else {
                ExtractionDepth::None
            },
            output_targets: if collect { targets } else { Vec::new() },
            review_required_before_durable_promotion: review,
            reason_codes: vec![ReasonCode::Custom],
            note: Some(format!("asked as {class}")),
        }
    }
}

export!(ByName);
