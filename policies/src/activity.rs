//! The word classifier: the activity type a message's words say, and a
//! work context's phase in the significance gate's vocabulary. The facade
//! fills the gate's context with these for every stored turn.

use std::collections::HashMap;

use crate::{ActivityType, WorkPhase};

/// A work context's phase (as the memory core stores it) in the gate's
/// vocabulary; a phase it does not know is `unknown`.
///
/// ```
/// use cairn_policies::{WorkPhase, work_phase};
/// assert_eq!(work_phase(Some("waiting_for_external")), WorkPhase::WaitingForExternal);
/// assert_eq!(work_phase(None), WorkPhase::Unknown);
/// ```
pub fn work_phase(phase: Option<&str>) -> WorkPhase {
    match phase {
        Some("research") => WorkPhase::Research,
        Some("drafting") => WorkPhase::Drafting,
        Some("review") => WorkPhase::Review,
        Some("revision") => WorkPhase::Revision,
        Some("waiting_for_external") => WorkPhase::WaitingForExternal,
        Some("completed") => WorkPhase::Completed,
        Some("paused") => WorkPhase::Paused,
        _ => WorkPhase::Unknown,
    }
}

/// Verb families of the activity types (docs/DESIGN.md, *Activity types
/// and work phases*), in the order they are tried: the first family with a
/// word in the message wins.
const ACTIVITY_FAMILIES: [(ActivityType, &[&str]); 6] = [
    (
        ActivityType::Recall,
        &[
            "remember",
            "recall",
            "remind me what",
            "what did we",
            "last time we",
        ],
    ),
    (
        ActivityType::Research,
        &[
            "find",
            "research",
            "look up",
            "look into",
            "analyze",
            "analyse",
            "investigate",
            "compare",
            "search",
        ],
    ),
    (
        ActivityType::Drafting,
        &[
            "draft",
            "write",
            "rewrite",
            "edit",
            "outline",
            "revise",
            "proofread",
        ],
    ),
    (
        ActivityType::Communication,
        &[
            "email", "reply", "respond", "message", "call", "announce", "tell", "invite",
        ],
    ),
    (
        ActivityType::Strategic,
        &[
            "plan",
            "decide",
            "prioritize",
            "prioritise",
            "strategy",
            "roadmap",
            "should we",
            "choose",
        ],
    ),
    (
        ActivityType::Operational,
        &[
            "deploy",
            "run",
            "fix",
            "configure",
            "install",
            "book",
            "schedule",
            "set up",
            "migrate",
            "ship",
        ],
    ),
];

/// The activity type of a message: what its words say ("find", "research",
/// "look up", "analyze" → research; "draft", "write" → drafting…), else
/// what its work context's phase implies (research → research; drafting,
/// review, revision → drafting; waiting → communication), else `unknown`.
///
/// ```
/// use cairn_policies::{ActivityType, WorkPhase, activity_type};
/// assert_eq!(activity_type("Look up the scienter standard", WorkPhase::Unknown), ActivityType::Research);
/// assert_eq!(activity_type("ok, continue", WorkPhase::Drafting), ActivityType::Drafting);
/// assert_eq!(activity_type("ok, continue", WorkPhase::Unknown), ActivityType::Unknown);
/// ```
pub fn activity_type(content: &str, phase: WorkPhase) -> ActivityType {
    let lower = content.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .collect();
    // One pass over the words: at each, only the phrases whose first word
    // it can be (itself, or itself less an inflection) are tried, and the
    // earliest family any of them belongs to wins, as if the families were
    // searched in order.
    let index = phrase_index();
    let mut found: Option<usize> = None;
    for (at, word) in words.iter().enumerate() {
        let stems = std::iter::once(*word).chain(
            INFLECTIONS
                .iter()
                .filter_map(|inflection| word.strip_suffix(inflection)),
        );
        for phrases in stems.filter_map(|stem| index.get(stem)) {
            for (family, rest) in phrases {
                if found.is_some_and(|f| f <= *family) {
                    continue;
                }
                let follows = rest
                    .iter()
                    .enumerate()
                    .all(|(i, next)| words.get(at + 1 + i).is_some_and(|w| inflected(w, next)));
                if follows {
                    found = Some(*family);
                }
            }
        }
        if found == Some(0) {
            break;
        }
    }
    if let Some((activity, _)) = found.and_then(|f| ACTIVITY_FAMILIES.get(f)) {
        return *activity;
    }
    match phase {
        WorkPhase::Research => ActivityType::Research,
        WorkPhase::Drafting | WorkPhase::Review | WorkPhase::Revision => ActivityType::Drafting,
        WorkPhase::WaitingForExternal => ActivityType::Communication,
        _ => ActivityType::Unknown,
    }
}

/// The endings a phrase's word may carry and still count ("drafts",
/// "researched", "emailing").
const INFLECTIONS: [&str; 5] = ["s", "es", "ed", "ing", "d"];

/// `word` is `stem`, or `stem` with one of the [`INFLECTIONS`].
fn inflected(word: &str, stem: &str) -> bool {
    word.strip_prefix(stem)
        .is_some_and(|rest| rest.is_empty() || INFLECTIONS.contains(&rest))
}

/// The phrases of [`ACTIVITY_FAMILIES`] by their first word: each with its
/// family's position and its other words.
type PhraseIndex = HashMap<&'static str, Vec<(usize, Vec<&'static str>)>>;

fn phrase_index() -> &'static PhraseIndex {
    static INDEX: std::sync::OnceLock<PhraseIndex> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index = PhraseIndex::new();
        for (family, (_, phrases)) in ACTIVITY_FAMILIES.iter().enumerate() {
            for phrase in phrases.iter() {
                let mut words = phrase.split(' ');
                if let Some(first) = words.next() {
                    index
                        .entry(first)
                        .or_default()
                        .push((family, words.collect()));
                }
            }
        }
        index
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word matching as it was written first, family by family and
    /// phrase by phrase: the reference the one-pass [`activity_type`] must
    /// agree with.
    fn activity_type_by_families(content: &str, phase: WorkPhase) -> ActivityType {
        let lower = content.to_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_alphanumeric() && c != '\'')
            .filter(|w| !w.is_empty())
            .collect();
        let has = |phrase: &str| {
            let needle: Vec<&str> = phrase.split(' ').collect();
            words.windows(needle.len()).any(|w| {
                w.iter().zip(&needle).all(|(word, n)| {
                    word == n
                        || word
                            .strip_prefix(n)
                            .is_some_and(|rest| matches!(rest, "s" | "es" | "ed" | "ing" | "d"))
                })
            })
        };
        for (activity, family) in ACTIVITY_FAMILIES {
            if family.iter().any(|phrase| has(phrase)) {
                return activity;
            }
        }
        match phase {
            WorkPhase::Research => ActivityType::Research,
            WorkPhase::Drafting | WorkPhase::Review | WorkPhase::Revision => ActivityType::Drafting,
            WorkPhase::WaitingForExternal => ActivityType::Communication,
            _ => ActivityType::Unknown,
        }
    }

    proptest::proptest! {
        /// Texts made of the phrases' words, their inflections, near misses
        /// and filler, in any case and with punctuation between.
        #[test]
        fn activity_types_agree_with_searching_family_by_family(
            picks in proptest::collection::vec((0usize..60, 0usize..8, 0usize..4), 0..14),
        ) {
            let vocabulary = [
                "remember", "recall", "remind", "me", "what", "did", "we", "last", "time",
                "find", "research", "look", "up", "into", "analyze", "compare", "search",
                "draft", "write", "rewrite", "edit", "revise", "email", "reply", "call",
                "tell", "plan", "decide", "should", "choose", "deploy", "run", "fix",
                "set", "ship", "book", "the", "lunch", "e", "finder",
            ];
            let endings = ["", "s", "es", "ed", "ing", "d", "er", "'s"];
            let gaps = [" ", ", ", "-", ". "];
            // Whole phrases too, so that the words of a longer one meet.
            let phrases: Vec<&str> = ACTIVITY_FAMILIES
                .iter()
                .flat_map(|(_, phrases)| phrases.iter().copied())
                .filter(|phrase| phrase.contains(' '))
                .collect();
            let mut text = String::new();
            for (word, ending, gap) in &picks {
                let word = if *word < vocabulary.len() {
                    vocabulary[*word]
                } else {
                    phrases[*word % phrases.len()]
                };
                let word = if *gap == 1 { word.to_uppercase() } else { word.to_owned() };
                text.push_str(&word);
                text.push_str(endings[*ending % endings.len()]);
                text.push_str(gaps[*gap % gaps.len()]);
            }
            for phase in [WorkPhase::Unknown, WorkPhase::Drafting] {
                proptest::prop_assert_eq!(
                    activity_type(&text, phase),
                    activity_type_by_families(&text, phase),
                    "{}", text
                );
            }
        }
    }
}
