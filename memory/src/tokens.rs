//! Token counting with a real tokenizer.
//!
//! cairn counts tokens with OpenAI's BPE encodings (tiktoken-rs ships them
//! inside the crate, so nothing is downloaded). `o200k_base` (GPT-4o family)
//! is the default; `cl100k_base` (GPT-4 / GPT-3.5) is available. An encoding
//! is loaded once per process and shared.

use std::sync::{Arc, OnceLock};

use tiktoken_rs::CoreBPE;

use crate::error::{MemoryError, Result};

/// Counts tokens with one BPE encoding. Cheap to clone.
///
/// ```
/// use cairn_memory::TokenCounter;
/// let counter = TokenCounter::new("o200k_base")?;
/// assert_eq!(counter.count("hello world"), 2);
/// # Ok::<(), cairn_memory::MemoryError>(())
/// ```
#[derive(Clone)]
pub struct TokenCounter {
    name: &'static str,
    bpe: Arc<CoreBPE>,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCounter")
            .field("encoding", &self.name)
            .finish()
    }
}

/// The encodings cairn accepts.
pub const ENCODINGS: [&str; 2] = ["o200k_base", "cl100k_base"];

impl TokenCounter {
    /// Loads (once per process) the named encoding.
    pub fn new(encoding: &str) -> Result<Self> {
        type Loaded = std::result::Result<Arc<CoreBPE>, String>;
        static O200K: OnceLock<Loaded> = OnceLock::new();
        static CL100K: OnceLock<Loaded> = OnceLock::new();
        let (name, cell): (&'static str, &'static OnceLock<Loaded>) = match encoding {
            "o200k_base" => ("o200k_base", &O200K),
            "cl100k_base" => ("cl100k_base", &CL100K),
            other => {
                return Err(MemoryError::Tokenizer {
                    name: other.to_owned(),
                    reason: format!("unknown encoding; use one of {}", ENCODINGS.join(", ")),
                });
            }
        };
        let bpe = cell
            .get_or_init(|| {
                let loaded = if name == "o200k_base" {
                    tiktoken_rs::o200k_base()
                } else {
                    tiktoken_rs::cl100k_base()
                };
                loaded.map(Arc::new).map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|reason| MemoryError::Tokenizer {
                name: name.to_owned(),
                reason,
            })?;
        Ok(TokenCounter { name, bpe })
    }

    /// The encoding's name.
    pub fn encoding(&self) -> &'static str {
        self.name
    }

    /// Number of tokens in `text` (special-token strings count as plain text).
    pub fn count(&self, text: &str) -> usize {
        self.bpe.encode_ordinary(text).len()
    }

    /// The longest prefix of `text` (cut at a char boundary) with at most `max` tokens.
    pub fn truncate<'a>(&self, text: &'a str, max: usize) -> &'a str {
        if self.count(text) <= max {
            return text;
        }
        // Binary search over char boundaries: token counts grow monotonically
        // with the prefix length (up to BPE merge effects of one token).
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain([text.len()])
            .collect();
        let (mut lo, mut hi) = (0usize, bounds.len() - 1);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.count(&text[..bounds[mid]]) <= max {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        &text[..bounds[lo]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_truncates() -> Result<()> {
        let c = TokenCounter::new("cl100k_base")?;
        assert_eq!(c.count(""), 0);
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let cut = c.truncate(&text, 10);
        assert!(c.count(cut) <= 10);
        assert!(cut.len() > 10);
        assert!(TokenCounter::new("gpt2-nope").is_err());
        Ok(())
    }
}
