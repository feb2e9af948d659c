//! Tier 2: lexical similarity between a turn and a topic's profile (its
//! description, its triggers and what it has collected so far).
//!
//! Cosine similarity of sublinear term-frequency vectors (`1 + ln tf`) over
//! lowercased alphanumeric terms, without stop words, with a light plural
//! strip. Cheap and local: a turn is tokenized once and compared with each
//! candidate topic that tier 1 let through, never with every topic.

use std::collections::HashMap;

/// The default tier-2 threshold.
pub const DEFAULT_THRESHOLD: f32 = 0.15;

const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "for", "from", "has",
    "have", "he", "her", "his", "how", "i", "if", "in", "is", "it", "its", "me", "my", "no", "not",
    "of", "on", "or", "our", "she", "so", "that", "the", "their", "them", "then", "there", "these",
    "they", "this", "to", "up", "us", "was", "we", "were", "what", "when", "which", "who", "will",
    "with", "would", "you", "your",
];

/// The terms of `text`, in order.
///
/// ```
/// use cairn_memory::topics::lexical::terms;
/// assert_eq!(terms("The invoices were PAID"), vec!["invoice", "paid"]);
/// ```
pub fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| w.len() > 1 && !STOP.contains(&w.as_str()))
        .map(|w| {
            if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
                w[..w.len() - 1].to_owned()
            } else {
                w
            }
        })
        .collect()
}

/// A weighted bag of terms with its norm.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TermVector {
    weights: HashMap<String, f32>,
    norm: f32,
}

impl TermVector {
    /// The vector of some texts taken together.
    pub fn new<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut counts: HashMap<String, u32> = HashMap::new();
        for text in texts {
            for term in terms(text) {
                *counts.entry(term).or_default() += 1;
            }
        }
        let weights: HashMap<String, f32> = counts
            .into_iter()
            .map(|(t, n)| (t, 1.0 + (n as f32).ln()))
            .collect();
        let norm = weights.values().map(|w| w * w).sum::<f32>().sqrt();
        TermVector { weights, norm }
    }

    /// True when it holds no term.
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    /// Cosine similarity with another vector, in [0, 1].
    ///
    /// ```
    /// use cairn_memory::topics::lexical::TermVector;
    /// let topic = TermVector::new(["Invoices, refunds and payment failures", "invoice"]);
    /// let turn = TermVector::new(["The invoice payment failed again"]);
    /// assert!(topic.cosine(&turn) > 0.15);
    /// assert_eq!(topic.cosine(&TermVector::new(["lunch at noon"])), 0.0);
    /// ```
    pub fn cosine(&self, other: &TermVector) -> f32 {
        if self.norm == 0.0 || other.norm == 0.0 {
            return 0.0;
        }
        let (small, large) = if self.weights.len() <= other.weights.len() {
            (self, other)
        } else {
            (other, self)
        };
        let dot: f32 = small
            .weights
            .iter()
            .filter_map(|(t, w)| large.weights.get(t).map(|v| w * v))
            .sum();
        (dot / (self.norm * other.norm)).clamp(0.0, 1.0)
    }
}
