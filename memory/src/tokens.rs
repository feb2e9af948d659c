//! Token counting with a real tokenizer.
//!
//! cairn counts tokens with OpenAI's BPE encodings (tiktoken-rs ships them
//! inside the crate, so nothing is downloaded). `o200k_base` (GPT-4o family)
//! is the default; `cl100k_base` (GPT-4 / GPT-3.5) is available. An encoding
//! is loaded once per process and shared.
//!
//! Counts of short texts are memoized per encoding ([`crate::memo::TextMemo`],
//! bounded): assembly renders the same lines (a
//! session's tail, its living memory) call after call, and BPE with its
//! regex pre-tokenizer was the largest cost of an `assemble` under load.

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
    bpe: Arc<Encoding>,
}

/// An encoding with its memo of counts.
struct Encoding {
    bpe: CoreBPE,
    memo: crate::memo::TextMemo<u32>,
}

/// Counts remembered per encoding.
const MEMO_ENTRIES: usize = 65_536;

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
        type Loaded = std::result::Result<Arc<Encoding>, String>;
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
                loaded
                    .map(|bpe| {
                        Arc::new(Encoding {
                            bpe,
                            memo: crate::memo::TextMemo::new(MEMO_ENTRIES),
                        })
                    })
                    .map_err(|e| e.to_string())
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
    ///
    /// Exact, and cheap for text made of lines counted before (an assembled
    /// block): the text is cut after each newline that no BPE piece can
    /// cross, and the pieces' counts (memoized) are summed. Both encodings'
    /// pre-tokenisers end every piece that holds a newline at that newline,
    /// unless the text goes on with whitespace (`\s*[\r\n]+`, `\s+`) or,
    /// after punctuation, with `/` (` ?[^\s\p{L}\p{N}]+[\r\n/]*`); BPE
    /// merges never cross pieces. So a cut before any other character
    /// changes no token.
    pub fn count(&self, text: &str) -> usize {
        let mut total = 0;
        let mut start = 0;
        for (i, _) in text.match_indices('\n') {
            let next = i + 1;
            let safe = text[next..]
                .chars()
                .next()
                .is_some_and(|c| !c.is_whitespace() && c != '/');
            if safe {
                total += self.count_piece(&text[start..next]);
                start = next;
            }
        }
        total + self.count_piece(&text[start..])
    }

    /// [`TokenCounter::count`] of `text`, counted in parts cut at the byte
    /// offsets `cuts` (ascending) where such a cut is safe; the others are
    /// ignored, so the count is exact whatever `cuts` holds.
    ///
    /// A cut is safe before a space (U+0020) that follows a non-whitespace
    /// character: no pre-tokeniser piece of either encoding holds a
    /// non-whitespace character followed by a space (a word, a number or a
    /// run of punctuation ends there, and only a whitespace run or a piece
    /// that *starts* with the space goes on), and BPE merges never cross
    /// pieces. A line whose head changes call after call (an age label)
    /// and whose body does not is counted mostly from the memo this way.
    ///
    /// ```
    /// use cairn_memory::TokenCounter;
    /// let counter = TokenCounter::new("o200k_base")?;
    /// let line = "- (user; 5m) retry the payment queue\n";
    /// let cuts = [line.find(" 5m").unwrap_or(0), line.find(" retry").unwrap_or(0)];
    /// assert_eq!(counter.count_cut(line, &cuts), counter.count(line));
    /// // A cut that is not safe (inside a word) is ignored.
    /// assert_eq!(counter.count_cut(line, &[4]), counter.count(line));
    /// # Ok::<(), cairn_memory::MemoryError>(())
    /// ```
    pub fn count_cut(&self, text: &str, cuts: &[usize]) -> usize {
        let mut total = 0;
        let mut start = 0;
        for &cut in cuts {
            if cut > start && space_cut_is_safe(text, cut) {
                total += self.count(&text[start..cut]);
                start = cut;
            }
        }
        total + self.count(&text[start..])
    }

    /// [`TokenCounter::count`] of a text no cut applies to, memoized.
    fn count_piece(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        let bpe = &self.bpe.bpe;
        self.bpe.memo.get_or_make(b"", text, || {
            u32::try_from(bpe.encode_ordinary(text).len()).unwrap_or(u32::MAX)
        }) as usize
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

/// Whether `text` may be cut before byte `at` without changing a token:
/// a space there, after a non-whitespace character (see
/// [`TokenCounter::count_cut`]).
fn space_cut_is_safe(text: &str, at: usize) -> bool {
    text.is_char_boundary(at)
        && text[at..].starts_with(' ')
        && text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| !c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Lines of words, punctuation, digits, slashes, spaces, tabs, carriage
    /// returns, marks and emoji: the characters the cut rule is about.
    fn line() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("word"),
                Just("Ab"),
                Just(" "),
                Just("  "),
                Just("\t"),
                Just("\r"),
                Just("/"),
                Just("."),
                Just("-"),
                Just("12345"),
                Just("'s"),
                Just("e\u{301}"),
                Just("\u{1F600}"),
                Just("<tag>"),
                Just("\n"),
            ],
            0..12,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        /// Cutting at safe newlines never changes a count, in either encoding.
        #[test]
        fn cut_counts_equal_whole_counts(lines in proptest::collection::vec(line(), 1..12)) {
            let text = lines.join("\n");
            for name in ENCODINGS {
                let c = TokenCounter::new(name).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let whole = c.bpe.bpe.encode_ordinary(&text).len();
                prop_assert_eq!(c.count(&text), whole, "{} on {:?}", name, text);
            }
        }
    }

    proptest! {
        /// Cutting before a space that follows a non-space never changes a
        /// count, in either encoding; cuts anywhere else are ignored.
        #[test]
        fn space_cut_counts_equal_whole_counts(
            parts in proptest::collection::vec(line(), 1..8),
            glue in proptest::collection::vec(prop_oneof![Just(" "), Just(""), Just("  ")], 8),
            stray in proptest::collection::vec(0usize..200, 0..4),
        ) {
            let mut text = String::new();
            let mut cuts = Vec::new();
            for (part, glue) in parts.iter().zip(&glue) {
                cuts.push(text.len());
                text.push_str(glue);
                text.push_str(part);
            }
            cuts.extend(stray);
            cuts.sort_unstable();
            for name in ENCODINGS {
                let c = TokenCounter::new(name).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let whole = c.bpe.bpe.encode_ordinary(&text).len();
                prop_assert_eq!(c.count_cut(&text, &cuts), whole, "{} on {:?} cut at {:?}", name, text, cuts);
            }
        }
    }

    #[test]
    fn space_cuts_are_taken_only_after_a_non_space() {
        let text = "- (a; 5m)  x é";
        assert!(space_cut_is_safe(text, 5)); // after ';'
        assert!(space_cut_is_safe(text, 9)); // after ')'
        assert!(!space_cut_is_safe(text, 10)); // after a space
        assert!(!space_cut_is_safe(text, 4)); // not a space
        assert!(!space_cut_is_safe(text, 0)); // nothing before
        assert!(!space_cut_is_safe(text, text.len())); // nothing after
        assert!(!space_cut_is_safe(text, text.len() - 1)); // inside 'é'
        assert!(!space_cut_is_safe(text, 1000));
    }

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

    #[test]
    fn memoized_counts_match_the_encoder() -> Result<()> {
        for name in ENCODINGS {
            let c = TokenCounter::new(name)?;
            let short = "[3] assistant: retry the payment queue at 2s, 10s, 60s\n";
            let long = short.repeat(400); // over the memo limit
            for text in [short, long.as_str(), "", "x"] {
                let exact = c.bpe.bpe.encode_ordinary(text).len();
                assert_eq!(c.count(text), exact, "{name}, first count");
                assert_eq!(c.count(text), exact, "{name}, memoized count");
            }
        }
        Ok(())
    }
}
