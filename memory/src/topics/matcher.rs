//! Tier 1: one pattern matcher shared by every topic of a workspace.
//!
//! Keywords, phrases and subjects of all topics go into one Aho-Corasick
//! automaton (ASCII case-insensitive, checked on word boundaries after the
//! fact), regexes into one [`RegexSet`]; a turn is scanned once whatever the
//! number of topics, and the answer is the topics whose patterns occur. The
//! matcher is rebuilt whole when a topic changes (it is immutable, so a
//! reader never sees half a rebuild). [`NaiveMatcher`] is the baseline the
//! benchmark compares it with: every topic's patterns tested in turn.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};

use super::{TopicSpec, Trigger};

/// The literal texts a trigger contributes to the automaton.
fn literals(trigger: &Trigger) -> Vec<String> {
    match trigger {
        Trigger::Keyword(k) => vec![k.trim().to_owned()],
        Trigger::Phrase(p) => vec![p.trim().to_owned()],
        Trigger::Subject(s) => {
            let spaced = s.replace('-', " ");
            if spaced == *s {
                vec![s.clone()]
            } else {
                vec![s.clone(), spaced]
            }
        }
        Trigger::Regex(_) | Trigger::Schedule(_) | Trigger::Webhook => Vec::new(),
    }
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// True when `text[start..end]` is not inside a longer word.
fn on_word_boundary(text: &[u8], start: usize, end: usize) -> bool {
    let before = start == 0 || !is_word_byte(text[start - 1]);
    let after = end >= text.len() || !is_word_byte(text[end]);
    before && after
}

/// The compiled tier-1 matcher of a set of topics.
///
/// ```
/// use cairn_memory::topics::{TopicSpec, Trigger, matcher::TopicMatcher};
/// let topics = [
///     TopicSpec::new("billing", "Invoices").trigger(Trigger::Keyword("invoice".into())),
///     TopicSpec::new("deploys", "Releases").trigger(Trigger::Regex(r"v\d+\.\d+".into())),
/// ];
/// let matcher = TopicMatcher::new(topics.iter());
/// assert_eq!(matcher.matches("The INVOICE for v1.2 is late"), vec![0, 1]);
/// assert!(matcher.matches("invoices").is_empty()); // word boundaries
/// ```
#[derive(Debug, Clone)]
pub struct TopicMatcher {
    literals: Option<AhoCorasick>,
    literal_owner: Vec<usize>,
    regexes: Option<RegexSet>,
    regex_owner: Vec<usize>,
    /// The regexes matched one by one, with their topics, when they do not
    /// build into one set.
    alone: Vec<(Regex, usize)>,
    topics: usize,
}

impl TopicMatcher {
    /// Compiles the pattern triggers of `topics` (indexed in iteration
    /// order). A regex that does not compile is skipped: definitions are
    /// validated before they are stored ([`TopicMatcher::try_new`] is the
    /// check). Should the set of every regex still fail to build (a store
    /// written before that check), the failure is logged and each regex is
    /// matched on its own: slower, but no regex trigger is switched off.
    pub fn new<'a>(topics: impl IntoIterator<Item = &'a TopicSpec>) -> Self {
        let (matcher, failed) = Self::build(topics);
        if let Some(error) = failed {
            tracing::error!(%error, "the topics' regex triggers do not build into one set; each is matched alone");
        }
        matcher
    }

    /// [`TopicMatcher::new`], refusing (with the reason) a set of regex
    /// triggers that does not build into one set — too large together for
    /// the matcher's size limit (64 MiB) — instead of matching each alone.
    ///
    /// ```
    /// use cairn_memory::topics::{TopicSpec, Trigger};
    /// use cairn_memory::topics::matcher::TopicMatcher;
    /// let ok = TopicSpec::new("billing", "Invoices").trigger(Trigger::Regex(r"inv-\d+".into()));
    /// assert!(TopicMatcher::try_new([&ok]).is_ok());
    /// // Each compiles alone within a topic's limit; 200 of them together do
    /// // not fit the set (a unicode class repeated 20 times, case-folded).
    /// let wide = TopicSpec::new("wide", "Twenty letters").trigger(Trigger::Regex(r"\w{20}".into()));
    /// assert!(cairn_memory::topics::validate_spec(&wide).is_ok());
    /// let specs: Vec<_> = (0..200).map(|_| wide.clone()).collect();
    /// assert!(TopicMatcher::try_new(specs.iter()).is_err());
    /// ```
    pub fn try_new<'a>(topics: impl IntoIterator<Item = &'a TopicSpec>) -> Result<Self, String> {
        match Self::build(topics) {
            (matcher, None) => Ok(matcher),
            (_, Some(error)) => Err(error),
        }
    }

    fn build<'a>(topics: impl IntoIterator<Item = &'a TopicSpec>) -> (Self, Option<String>) {
        let mut patterns = Vec::new();
        let mut literal_owner = Vec::new();
        let mut regexes = Vec::new();
        let mut regex_owner = Vec::new();
        let mut count = 0;
        for (i, topic) in topics.into_iter().enumerate() {
            count = i + 1;
            for trigger in &topic.triggers {
                for lit in literals(trigger) {
                    patterns.push(lit);
                    literal_owner.push(i);
                }
                if let Trigger::Regex(r) = trigger
                    && Regex::new(r).is_ok()
                {
                    regexes.push(r.clone());
                    regex_owner.push(i);
                }
            }
        }
        let literals = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(&patterns)
            .ok()
            .filter(|_| !patterns.is_empty());
        // The lazy DFA's cache must hold the states of every pattern at
        // once: at the default (2 MB) a set of 1,000 patterns thrashes it
        // and falls back to the NFA, 150x slower per turn (measured: 2.4 ms
        // against 15 µs for 1,000 patterns; docs/BENCHMARKS.md). It grows
        // only as far as the turns need.
        let built = RegexSetBuilder::new(&regexes)
            .case_insensitive(true)
            .size_limit(64 << 20)
            .dfa_size_limit(64 << 20)
            .build();
        let (regex_set, alone, failed) = match built {
            Ok(set) => (Some(set).filter(|_| !regexes.is_empty()), Vec::new(), None),
            Err(error) => {
                let alone = regexes
                    .iter()
                    .zip(&regex_owner)
                    .filter_map(|(r, owner)| {
                        RegexBuilder::new(r)
                            .case_insensitive(true)
                            .build()
                            .ok()
                            .map(|re| (re, *owner))
                    })
                    .collect();
                (
                    None,
                    alone,
                    Some(format!(
                        "the workspace's {} regex triggers do not build into one set: {error}",
                        regexes.len()
                    )),
                )
            }
        };
        let matcher = TopicMatcher {
            literals,
            literal_owner,
            regexes: regex_set,
            regex_owner,
            alone,
            topics: count,
        };
        (matcher, failed)
    }

    /// The number of topics compiled in.
    pub fn len(&self) -> usize {
        self.topics
    }

    /// True when no topic was compiled in.
    pub fn is_empty(&self) -> bool {
        self.topics == 0
    }

    /// The indexes of the topics whose patterns occur in `text`, sorted.
    pub fn matches(&self, text: &str) -> Vec<usize> {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        if let Some(ac) = &self.literals {
            for m in ac.find_overlapping_iter(text) {
                if on_word_boundary(bytes, m.start(), m.end())
                    && let Some(owner) = self.literal_owner.get(m.pattern().as_usize())
                {
                    out.push(*owner);
                }
            }
        }
        // Most turns match no regex: one `is_match` scan stops early and
        // skips the all-patterns search.
        if let Some(set) = self.regexes.as_ref().filter(|s| s.is_match(text)) {
            for id in set.matches(text).into_iter() {
                if let Some(owner) = self.regex_owner.get(id) {
                    out.push(*owner);
                }
            }
        }
        out.extend(
            self.alone
                .iter()
                .filter(|(re, _)| re.is_match(text))
                .map(|(_, owner)| *owner),
        );
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The baseline: each topic's patterns compiled on their own and tested
/// one topic after another.
#[derive(Debug, Clone)]
pub struct NaiveMatcher {
    topics: Vec<Vec<Regex>>,
}

impl NaiveMatcher {
    /// Compiles every topic's patterns separately.
    pub fn new<'a>(topics: impl IntoIterator<Item = &'a TopicSpec>) -> Self {
        let topics = topics
            .into_iter()
            .map(|t| {
                t.triggers
                    .iter()
                    .flat_map(|trigger| {
                        let mut out: Vec<String> = literals(trigger)
                            .iter()
                            .map(|l| format!(r"(?i)\b{}\b", regex::escape(l)))
                            .collect();
                        if let Trigger::Regex(r) = trigger {
                            out.push(format!("(?i){r}"));
                        }
                        out
                    })
                    .filter_map(|p| Regex::new(&p).ok())
                    .collect()
            })
            .collect();
        NaiveMatcher { topics }
    }

    /// The indexes of the topics one of whose patterns matches, sorted.
    pub fn matches(&self, text: &str) -> Vec<usize> {
        self.topics
            .iter()
            .enumerate()
            .filter(|(_, patterns)| patterns.iter().any(|p| p.is_match(text)))
            .map(|(i, _)| i)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, triggers: Vec<Trigger>) -> TopicSpec {
        let mut spec = TopicSpec::new(name, "test");
        spec.triggers = triggers;
        spec
    }

    #[test]
    fn shared_matcher_agrees_with_the_naive_loop() {
        let topics = [
            topic("a", vec![Trigger::Keyword("deploy".into())]),
            topic("b", vec![Trigger::Phrase("pull request".into())]),
            topic("c", vec![Trigger::Subject("auth-migration".into())]),
            topic("d", vec![Trigger::Regex(r"\bv\d+\.\d+\b".into())]),
            topic("e", vec![Trigger::Webhook]),
            topic("f", vec![Trigger::Keyword("email".into())]),
        ];
        let shared = TopicMatcher::new(topics.iter());
        let naive = NaiveMatcher::new(topics.iter());
        for (text, want) in [
            ("we deploy v2.1 today", vec![0, 3]),
            ("Open a Pull Request for the auth migration", vec![1, 2]),
            ("redeploying emails", vec![]),
            ("auth-migration: EMAIL the team", vec![2, 5]),
            ("", vec![]),
        ] {
            assert_eq!(shared.matches(text), want, "{text}");
            assert_eq!(naive.matches(text), want, "{text}");
        }
    }
}
