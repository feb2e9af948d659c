//! The optional model extraction pass on the facade: `[extraction.model]`
//! (an OpenAI-compatible chat-completions endpoint, off by default) and
//! [`OpenAiExtractor`], the actors' `ModelExtractor` over the shared client
//! of `crate::model`. The prompt, the strict parse of the reply and the
//! dedup are the memory core's (`cairn_memory::extractor`); a capture that
//! gets no usable reply writes the heuristic extractor's items and records
//! why in its report.

use cairn_memory::extractor::{
    ExtractionRequest, ExtractorError, ModelExtractor, ModelItem, parse_reply, prompt,
};
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::model::{Budget, ChatClient, ModelConfig};

/// Settings of the model extraction pass, `[extraction]`.
///
/// ```
/// let c = cairn::ExtractionConfig::default();
/// assert!(!c.model.enabled);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExtractionConfig {
    /// The endpoint; off by default (heuristic extraction only).
    pub model: ModelConfig,
    /// Most tokens the model may answer with.
    pub max_tokens: usize,
}

impl Default for ExtractionConfig {
    fn default() -> Self {
        ExtractionConfig {
            model: ModelConfig::default(),
            max_tokens: 2_000,
        }
    }
}

/// Extraction by an OpenAI-compatible chat-completions endpoint.
///
/// ```
/// use cairn::{ModelConfig, OpenAiExtractor};
/// assert!(OpenAiExtractor::new(&ModelConfig::default(), 1000).is_ok());
/// assert!(OpenAiExtractor::new(&ModelConfig { url: "https://api.example.com/v1".into(), ..ModelConfig::default() }, 1000).is_ok());
/// assert!(OpenAiExtractor::new(&ModelConfig { url: "ftp://x".into(), ..ModelConfig::default() }, 1000).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct OpenAiExtractor {
    client: ChatClient,
    max_tokens: usize,
    /// The memory policy between the turns and the endpoint (none for an
    /// extractor made outside a `Cairn`).
    guard: Option<crate::model::ModelGuard>,
}

impl OpenAiExtractor {
    /// A client for `config.url` (`https://`, or `http://` on this
    /// machine), with a budget of its own.
    pub fn new(config: &ModelConfig, max_tokens: usize) -> Result<Self, ExtractorError> {
        Self::with_budget(config, max_tokens, Arc::new(Budget::new(config)))
    }

    /// A client that spends `budget` (the facade's, shared by every
    /// capture of the process).
    pub(crate) fn with_budget(
        config: &ModelConfig,
        max_tokens: usize,
        budget: Arc<Budget>,
    ) -> Result<Self, ExtractorError> {
        let client =
            ChatClient::with_budget(config, budget).map_err(|e| ExtractorError(e.to_string()))?;
        Ok(OpenAiExtractor {
            client,
            max_tokens: max_tokens.max(1),
            guard: None,
        })
    }

    /// The extractor with the memory policy asked about every turn before
    /// it goes into the prompt.
    pub(crate) fn guarded(mut self, guard: crate::model::ModelGuard) -> Self {
        self.guard = Some(guard);
        self
    }
}

impl ModelExtractor for OpenAiExtractor {
    fn name(&self) -> String {
        format!("model {}", self.client.model())
    }

    fn extract(&self, request: &ExtractionRequest<'_>) -> Result<Vec<ModelItem>, ExtractorError> {
        let (Some(first), Some(last)) = (request.turns.first(), request.turns.last()) else {
            return Ok(Vec::new());
        };
        let admitted: Vec<cairn_memory::Turn>;
        let request = match &self.guard {
            None => *request,
            Some(guard) => {
                admitted = request
                    .turns
                    .iter()
                    .filter_map(|t| {
                        let content = guard.admit(&t.workspace, &crate::reads::Object::turn(t))?;
                        Some(cairn_memory::Turn {
                            content,
                            ..t.clone()
                        })
                    })
                    .collect();
                if admitted.is_empty() {
                    // The heuristics extract instead, on this machine.
                    return Err(ExtractorError(
                        "the memory policy keeps every turn of this capture from the model \
                         endpoint"
                            .to_owned(),
                    ));
                }
                ExtractionRequest {
                    turns: &admitted,
                    ..*request
                }
            }
        };
        let reply = self
            .client
            .complete(&first.workspace, &prompt(&request), self.max_tokens)
            .map_err(|e| ExtractorError(e.to_string()))?;
        parse_reply(&reply, first.seq, last.seq)
    }
}
