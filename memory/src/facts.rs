//! Facts and preferences about the person, found in what they say, without
//! a model.
//!
//! [`find_facts`] reads one user turn and returns the first-person
//! statements in it that say something lasting about the speaker or the
//! people and things around them — where they live and work, family,
//! health, likes and dislikes, plans, possessions, habits, what they did —
//! each rewritten in the third person ("I moved to Lisbon" from Ana becomes
//! "Ana moved to Lisbon") and tagged with the [`Attribute`] it is about.
//!
//! The rules are data: a [`FactRules`] table holds the language's words
//! (the first-person words and their third-person rewrites, the openers of
//! small talk, the cues of each attribute), and [`ENGLISH`] is the one
//! shipped. A second language is a second table, not new code.
//!
//! Who speaks: a turn that starts with a name and a colon (`Ana: I moved…`,
//! the convention of multi-party transcripts) is that person's; any other
//! user turn is the user's, written as "The user". The capture resolves the
//! name against the subject registry.
//!
//! ```
//! use cairn_memory::facts::{find_facts, Attribute, ENGLISH};
//! let found = find_facts("Ana: I moved to Lisbon last spring. Thanks for asking!", &ENGLISH);
//! assert_eq!(found.len(), 1);
//! assert_eq!(found[0].attribute, Attribute::Residence);
//! assert_eq!(found[0].speaker.as_deref(), Some("Ana"));
//! assert_eq!(found[0].content, "Ana moved to Lisbon last spring.");
//! ```

use serde::{Deserialize, Serialize};

/// What a fact is about. Single-valued attributes ([`Attribute::single`])
/// hold one value at a time for a person: a newer fact replaces an older
/// one of the same attribute about the same person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Attribute {
    /// Where they live.
    Residence,
    /// Their job, employer or studies.
    Work,
    /// Family, partner, friends, pets.
    Family,
    /// Health, allergies, diet.
    Health,
    /// What they like, love, enjoy or prefer.
    Likes,
    /// What they dislike or avoid.
    Dislikes,
    /// What they plan or are about to do.
    Plan,
    /// What they own or got.
    Possession,
    /// What they usually do.
    Habit,
    /// What they did or what happened to them.
    Event,
    /// What they feel or believe about their own life.
    Feeling,
}

impl Attribute {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Attribute::Residence => "residence",
            Attribute::Work => "work",
            Attribute::Family => "family",
            Attribute::Health => "health",
            Attribute::Likes => "likes",
            Attribute::Dislikes => "dislikes",
            Attribute::Plan => "plan",
            Attribute::Possession => "possession",
            Attribute::Habit => "habit",
            Attribute::Event => "event",
            Attribute::Feeling => "feeling",
        }
    }

    /// Parses [`Attribute::as_str`]'s names.
    pub fn parse(name: &str) -> Option<Attribute> {
        ATTRIBUTES.iter().copied().find(|a| a.as_str() == name)
    }

    /// Whether a person has one value of it at a time (where they live,
    /// their job), so a newer fact replaces an older one.
    pub fn single(self) -> bool {
        matches!(self, Attribute::Residence | Attribute::Work)
    }
}

/// Every attribute.
pub const ATTRIBUTES: [Attribute; 11] = [
    Attribute::Residence,
    Attribute::Work,
    Attribute::Family,
    Attribute::Health,
    Attribute::Likes,
    Attribute::Dislikes,
    Attribute::Plan,
    Attribute::Possession,
    Attribute::Habit,
    Attribute::Event,
    Attribute::Feeling,
];

/// A language's rules for [`find_facts`]. Every phrase is lowercase; a
/// phrase matches on word boundaries.
#[derive(Debug, Clone, Copy)]
pub struct FactRules {
    /// First-person words and their third-person rewrite; `{}` is the
    /// speaker. A sentence without one of them is not about the speaker.
    pub first_person: &'static [(&'static str, &'static str)],
    /// Who speaks when the turn names no one.
    pub anonymous: &'static str,
    /// Words before a colon that are labels, not speakers (`Decision: …`).
    pub not_speakers: &'static [&'static str],
    /// Present-tense verbs and their third-person form, applied to the verb
    /// after a rewritten subject ("I love" → "Ana loves"), past adverbs in
    /// [`FactRules::adverbs`].
    pub verbs: &'static [(&'static str, &'static str)],
    /// Adverbs that may stand between the subject and its verb.
    pub adverbs: &'static [&'static str],
    /// Sentences that start with one of these are small talk (greetings,
    /// thanks, reactions), never facts.
    pub small_talk: &'static [&'static str],
    /// Words that address the listener: a sentence with one of them before
    /// its first first-person word is about the listener, and one with
    /// them anywhere needs a cue to count.
    pub listener: &'static [&'static str],
    /// Words that open an interjection ("yeah", "oh", "hey Ana"): before a
    /// comma, they and the comma are dropped and the rest is read.
    pub interjections: &'static [&'static str],
    /// Verbs that open a request to the listener ("check out my…",
    /// "let me know"): such a sentence is not a statement.
    pub imperatives: &'static [&'static str],
    /// Each attribute's cues, strongest attribute first; a cue is a phrase
    /// that must appear in the sentence.
    pub cues: &'static [(Attribute, &'static [&'static str])],
    /// Words that do not count as content.
    pub stop_words: &'static [&'static str],
    /// Content words a statement needs, besides the first-person word.
    pub min_content_words: usize,
    /// Words that open a statement whose subject, the speaker, is left
    /// out ("Been rehearsing hard", "Just got back from Rome").
    pub elided_subject: &'static [&'static str],
    /// A statement without a cue counts when a first-person word is among
    /// its first this many words…
    pub subject_within: usize,
    /// …and it has at least this many content words.
    pub min_uncued_words: usize,
    /// Facts kept from one turn, the best first.
    pub per_turn: usize,
    /// Statements after a fact, in the same turn, kept with it ("I made
    /// it in pottery class. Pottery's so relaxing.").
    pub follow_clauses: usize,
    /// How a single-valued attribute's value reads in a fact ([`value_of`]).
    pub values: ValueRules,
}

/// One fact [`find_facts`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundFact {
    /// What it is about.
    pub attribute: Attribute,
    /// The sentence in the third person.
    pub content: String,
    /// The speaker's name when the turn gave one.
    pub speaker: Option<String>,
    /// The cue that fired.
    pub cue: &'static str,
    /// The sentence as said.
    pub said: String,
}

/// Finds the facts in one user turn's `text` under `rules`, at most
/// `rules.per_turn`, in the order they were said.
pub fn find_facts(text: &str, rules: &FactRules) -> Vec<FoundFact> {
    let (speaker, body) = match split_speaker(text) {
        (Some(name), body) if !rules.not_speakers.contains(&name.to_lowercase().as_str()) => {
            (Some(name), body)
        }
        _ => (None, text),
    };
    let who = speaker.unwrap_or(rules.anonymous);
    let mut scored: Vec<((usize, usize), usize, FoundFact)> = Vec::new();
    let clauses = clauses(body, rules);
    // What each clause adds when it follows a fact: a statement, not a
    // question, small talk or words to the listener.
    let follow: Vec<Option<String>> = clauses
        .iter()
        .map(|c| {
            let lower = c.to_lowercase();
            let statement = !c.ends_with('?')
                && !starts_with_any(&lower, rules.small_talk)
                && !words(&lower).any(|w| rules.listener.contains(&w))
                && words(&lower).count() >= 3;
            statement.then(|| third_person(c, who, rules))
        })
        .collect();
    for (index, sentence) in clauses.iter().copied().enumerate() {
        if sentence.ends_with('?') {
            continue;
        }
        let lower = sentence.to_lowercase();
        let words: Vec<&str> = words(&lower).collect();
        // "Been rehearsing hard": a statement whose subject is left out
        // is the speaker's.
        let elided = words
            .first()
            .is_some_and(|w| rules.elided_subject.contains(w));
        let Some(first) = words
            .iter()
            .position(|w| rules.first_person.iter().any(|(p, _)| p == w))
            .or(elided.then_some(0))
        else {
            continue;
        };
        if starts_with_any(&lower, rules.small_talk) {
            continue;
        }
        if words[..first].iter().any(|w| rules.listener.contains(w))
            || words.first().is_some_and(|w| rules.imperatives.contains(w))
        {
            continue;
        }
        // A statement that speaks to the listener is about the two of them
        // (thanks, encouragement), unless a cue says what it is about.
        let to_listener = words.iter().any(|w| rules.listener.contains(w));
        let content_words = words
            .iter()
            .filter(|w| w.chars().count() > 2 && !rules.stop_words.contains(w))
            .filter(|w| !rules.first_person.iter().any(|(p, _)| p == *w))
            .count();
        if content_words < rules.min_content_words {
            continue;
        }
        // A statement with no cue is still about the speaker when it
        // opens with them ("I color-code my goals"): the weakest kind.
        let Some((strength, attribute, cue)) = attribute_of(&lower, rules).or_else(|| {
            (first < rules.subject_within
                && content_words >= rules.min_uncued_words
                && !to_listener)
                .then_some((rules.cues.len(), Attribute::Event, "first person"))
        }) else {
            continue;
        };
        let content = if elided
            && !words
                .iter()
                .any(|w| rules.first_person.iter().any(|(p, _)| p == w))
        {
            // The left-out subject, said: "Jon: Been rehearsing hard."
            let mut said = String::from(who);
            if let Some(c) = said.get_mut(0..1) {
                c.make_ascii_uppercase();
            }
            format!("{said}: {sentence}")
        } else {
            third_person(sentence, who, rules)
        };
        scored.push((
            (strength, usize::MAX - content_words),
            index,
            FoundFact {
                attribute,
                content: crate::extract::clip(&content),
                speaker: speaker.map(str::to_owned),
                cue,
                said: sentence.to_owned(),
            },
        ));
    }
    // The strongest cues first, then the fuller statement; kept in the
    // order said.
    scored.sort_by_key(|(strength, index, _)| (*strength, *index));
    // Past the first, only statements with a cue of their own (not the
    // bare first-person rule or a past event).
    let event_rank = rules
        .cues
        .iter()
        .position(|(a, _)| *a == Attribute::Event)
        .unwrap_or(rules.cues.len());
    let mut kept = 0;
    scored.retain(|((strength, _), _, _)| {
        kept += 1;
        kept == 1 || (kept <= rules.per_turn && *strength < event_rank)
    });
    scored.sort_by_key(|(_, index, _)| *index);
    let kept: Vec<usize> = scored.iter().map(|(_, index, _)| *index).collect();
    scored
        .into_iter()
        .map(|(_, index, mut fact)| {
            // What the speaker says of it next, up to the next fact kept.
            let next = kept
                .iter()
                .copied()
                .find(|k| *k > index)
                .unwrap_or(usize::MAX);
            let mut content = fact.content.clone();
            for extra in follow
                .iter()
                .enumerate()
                .skip(index + 1)
                .take(rules.follow_clauses)
                .take_while(|(i, _)| *i < next)
                .filter_map(|(_, f)| f.as_deref())
            {
                if !content.ends_with(['.', '!', '?']) {
                    content.push('.');
                }
                content.push(' ');
                content.push_str(extra);
            }
            fact.content = crate::extract::clip(&content);
            fact
        })
        .collect()
}

/// The clauses of `body` a fact may be read from: its sentences, each cut
/// at a spaced dash ("I made it yesterday - want to see?"), with a leading
/// interjection and the comma after it dropped ("Yeah, I made it" → "I
/// made it").
fn clauses<'a>(body: &'a str, rules: &FactRules) -> Vec<&'a str> {
    let mut out = Vec::new();
    for sentence in crate::extract::sentences(body) {
        for clause in split_spaced_dash(sentence) {
            let mut clause = clause.trim();
            // "Yeah, …", "Hey Caroline, …", "Oh wow, …": up to three words
            // before the comma, the first an interjection; then a name
            // said to the listener ("Yeah, Caroline, my family's…").
            let mut stripped = false;
            while let Some((head, rest)) = clause.split_once(',') {
                let head_lower = head.to_lowercase();
                let first = words(&head_lower).next();
                let short = head.split_whitespace().count() <= 3;
                let interjection = first.is_some_and(|w| rules.interjections.contains(&w));
                let name = stripped
                    && head.split_whitespace().all(|w| {
                        w.chars().next().is_some_and(char::is_uppercase)
                            && !rules
                                .first_person
                                .iter()
                                .any(|(p, _)| w.eq_ignore_ascii_case(p))
                    });
                if !(short && (interjection || name)) {
                    break;
                }
                clause = rest.trim();
                stripped = true;
            }
            if clause.chars().any(char::is_alphanumeric) {
                out.push(clause);
            }
        }
    }
    out
}

/// `s` cut at every spaced dash (` - `, ` – `, ` — `).
fn split_spaced_dash(s: &str) -> Vec<&str> {
    const DASHES: [&str; 3] = [" - ", " – ", " — "];
    let mut out = Vec::new();
    let mut rest = s;
    while let Some((at, dash)) = DASHES
        .iter()
        .filter_map(|d| rest.find(d).map(|at| (at, *d)))
        .min()
    {
        out.push(&rest[..at]);
        rest = &rest[at + dash.len()..];
    }
    out.push(rest);
    out
}

/// The attribute a first-person `text` is about under `rules` (its
/// strongest cue), if any.
///
/// ```
/// use cairn_memory::facts::{attribute_of_text, Attribute, ENGLISH};
/// assert_eq!(attribute_of_text("I moved to Porto", &ENGLISH), Some(Attribute::Residence));
/// assert_eq!(attribute_of_text("Nice weather", &ENGLISH), None);
/// ```
pub fn attribute_of_text(text: &str, rules: &FactRules) -> Option<Attribute> {
    attribute_of(&text.to_lowercase(), rules).map(|(_, attribute, _)| attribute)
}

/// A turn's speaker (`Name: …`, one to three capitalised words) and the
/// rest of its text.
pub fn split_speaker(text: &str) -> (Option<&str>, &str) {
    let Some((head, rest)) = text.split_once(':') else {
        return (None, text);
    };
    let name = head.trim();
    let words: Vec<&str> = name.split_whitespace().collect();
    let is_name = !words.is_empty()
        && words.len() <= 3
        && name.len() <= 40
        && words.iter().all(|w| {
            w.chars().next().is_some_and(char::is_uppercase)
                && w.chars()
                    .all(|c| c.is_alphabetic() || c == '-' || c == '\'')
        });
    if is_name {
        (Some(name), rest.trim_start())
    } else {
        (None, text)
    }
}

/// The strongest attribute whose cue the sentence holds: (its rank in the
/// table, the attribute, the cue).
fn attribute_of(lower: &str, rules: &FactRules) -> Option<(usize, Attribute, &'static str)> {
    rules
        .cues
        .iter()
        .enumerate()
        .find_map(|(rank, (attribute, cues))| {
            cues.iter()
                .copied()
                .find(|cue| contains_phrase(lower, cue))
                .map(|cue| (rank, *attribute, cue))
        })
}

/// Whether `phrase` occurs in `lower` on word boundaries.
fn contains_phrase(lower: &str, phrase: &str) -> bool {
    let mut from = 0;
    while let Some(at) = lower[from..].find(phrase) {
        let start = from + at;
        let end = start + phrase.len();
        let before = lower[..start].chars().next_back();
        let after = lower[end..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '\'');
        if boundary(before) && boundary(after) {
            return true;
        }
        from = start + phrase.chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// Whether a lowercased sentence is small talk under `rules` (a greeting,
/// thanks, a reaction).
pub(crate) fn is_small_talk(lower: &str, rules: &FactRules) -> bool {
    starts_with_any(lower, rules.small_talk)
}

fn starts_with_any(lower: &str, openers: &[&str]) -> bool {
    let trimmed = lower.trim_start_matches(|c: char| !c.is_alphanumeric());
    openers.iter().any(|o| {
        trimmed.starts_with(o)
            && trimmed[o.len()..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric())
    })
}

/// The words of a lowercased sentence (apostrophes kept: "i'm").
fn words(lower: &str) -> impl Iterator<Item = &str> {
    lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .filter(|w| !w.is_empty())
}

/// `sentence` with its first-person words rewritten for `who`, and the
/// verb after a rewritten subject ("I love" → "Ana loves") agreeing.
fn third_person(sentence: &str, who: &str, rules: &FactRules) -> String {
    // Words and the separators between them, in order.
    let mut pieces: Vec<(bool, String)> = Vec::new();
    for c in sentence.chars() {
        let is_word = c.is_alphanumeric() || c == '\'' || c == '’';
        match pieces.last_mut() {
            Some((w, piece)) if *w == is_word => piece.push(c),
            _ => pieces.push((is_word, c.to_string())),
        }
    }
    let mut out = String::with_capacity(sentence.len() + 16);
    let mut agree = false;
    for (is_word, piece) in &pieces {
        if !is_word {
            out.push_str(piece);
            continue;
        }
        let lower = piece.to_lowercase().replace('’', "'");
        if let Some((_, rewrite)) = rules.first_person.iter().find(|(p, _)| *p == lower) {
            out.push_str(&rewrite.replace("{}", who));
            // Only a bare subject ("I", not "I'm" or "my") takes a verb.
            agree = !rewrite.contains(' ') && !rewrite.contains('\'') && lower != "me";
            continue;
        }
        if agree && rules.adverbs.contains(&lower.as_str()) {
            out.push_str(piece);
            continue;
        }
        match rules.verbs.iter().find(|(base, _)| agree && *base == lower) {
            Some((_, third)) => out.push_str(third),
            None => out.push_str(piece),
        }
        agree = false;
    }
    // A sentence that opened with a rewritten pronoun keeps a capital.
    let mut chars = out.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => out,
    }
}

/// The English rules.
pub const ENGLISH: FactRules = FactRules {
    first_person: &[
        ("i", "{}"),
        ("i'm", "{} is"),
        ("im", "{} is"),
        ("i've", "{} has"),
        ("i'll", "{} will"),
        ("i'd", "{} would"),
        ("me", "{}"),
        ("my", "{}'s"),
        ("mine", "{}'s"),
        ("myself", "{}"),
        ("we", "{} and others"),
        ("we're", "{} and others are"),
        ("we've", "{} and others have"),
        ("we'll", "{} and others will"),
        ("we'd", "{} and others would"),
        ("us", "{} and others"),
        ("our", "{}'s"),
        ("ours", "{}'s"),
    ],
    anonymous: "the user",
    not_speakers: &[
        "decision", "note", "todo", "update", "question", "answer", "summary", "action", "next",
        "re", "subject", "warning", "error", "tip", "ps",
    ],
    verbs: &[
        ("love", "loves"),
        ("like", "likes"),
        ("enjoy", "enjoys"),
        ("prefer", "prefers"),
        ("hate", "hates"),
        ("live", "lives"),
        ("work", "works"),
        ("have", "has"),
        ("want", "wants"),
        ("hope", "hopes"),
        ("need", "needs"),
        ("think", "thinks"),
        ("feel", "feels"),
        ("plan", "plans"),
        ("study", "studies"),
        ("go", "goes"),
        ("do", "does"),
        ("own", "owns"),
        ("usually", "usually"),
        ("play", "plays"),
        ("run", "runs"),
        ("teach", "teaches"),
        ("volunteer", "volunteers"),
        ("paint", "paints"),
        ("write", "writes"),
        ("read", "reads"),
        ("cook", "cooks"),
        ("believe", "believes"),
        ("avoid", "avoids"),
        ("dislike", "dislikes"),
        ("tend", "tends"),
        ("keep", "keeps"),
        ("try", "tries"),
        ("take", "takes"),
        ("make", "makes"),
        ("know", "knows"),
        ("am", "is"),
        ("get", "gets"),
        ("look", "looks"),
        ("see", "sees"),
        ("miss", "misses"),
        ("remember", "remembers"),
        ("spend", "spends"),
        ("use", "uses"),
        ("help", "helps"),
        ("wish", "wishes"),
        ("find", "finds"),
        ("care", "cares"),
        ("mean", "means"),
        ("appreciate", "appreciates"),
        ("admire", "admires"),
        ("say", "says"),
    ],
    adverbs: &[
        "really",
        "also",
        "usually",
        "still",
        "just",
        "always",
        "often",
        "never",
        "totally",
        "absolutely",
        "definitely",
        "sometimes",
        "now",
        "actually",
        "recently",
        "finally",
    ],
    small_talk: &[
        "thanks",
        "thank you",
        "thx",
        "hey",
        "hi",
        "hello",
        "bye",
        "wow",
        "yeah",
        "yep",
        "ok",
        "okay",
        "sure",
        "totally",
        "absolutely",
        "congrats",
        "congratulations",
        "good to see",
        "great to see",
        "nice to see",
        "talk to you",
        "see you",
        "take care",
        "glad you",
        "i'm so happy for you",
        "i'm happy for you",
        "i'm glad",
        "i'm sorry",
        "i agree",
        "i know",
        "i bet",
        "i hope you",
        "i can't wait to",
        "i can imagine",
        "i understand",
        "i see",
        "i totally",
        "that's",
        "that is",
        "sounds",
        "so cool",
        "awesome",
        "lol",
        "haha",
    ],
    listener: &[
        "you", "you're", "your", "you've", "you'll", "you'd", "yours",
    ],
    interjections: &[
        "yeah",
        "yes",
        "yep",
        "yup",
        "oh",
        "ah",
        "aw",
        "aww",
        "wow",
        "whoa",
        "haha",
        "lol",
        "ok",
        "okay",
        "well",
        "hey",
        "hi",
        "hello",
        "thanks",
        "thank",
        "sure",
        "totally",
        "absolutely",
        "congrats",
        "omg",
        "gosh",
        "honestly",
        "btw",
        "fyi",
        "anyway",
        "anyways",
        "actually",
        "definitely",
        "awesome",
        "cool",
        "nice",
        "great",
        "true",
        "right",
        "so",
        "no",
        "nope",
        "man",
        "dude",
        "hmm",
        "um",
    ],
    imperatives: &[
        "check", "look", "let", "let's", "imagine", "guess", "remember", "don't", "tell", "keep",
        "take", "see", "come", "go", "try", "hang", "stay", "enjoy", "wish", "send", "give",
    ],
    cues: &[
        (
            Attribute::Residence,
            &[
                "i live",
                "i'm living",
                "i moved",
                "we moved",
                "moved to",
                "my home",
                "my house",
                "my apartment",
                "my hometown",
                "i'm from",
                "i grew up",
                "we live",
            ],
        ),
        (
            Attribute::Health,
            &[
                "allergic",
                "allergy",
                "diagnosed",
                "my doctor",
                "injury",
                "injured",
                "surgery",
                "vegetarian",
                "vegan",
                "my health",
                "therapy",
                "i'm sick",
                "i got sick",
            ],
        ),
        (
            Attribute::Work,
            &[
                "i work",
                "i'm working",
                "my job",
                "my work",
                "my boss",
                "my career",
                "career",
                "my company",
                "my business",
                "my coworkers",
                "my colleagues",
                "i got a job",
                "new job",
                "i'm studying",
                "i study",
                "my degree",
                "my class",
                "my school",
                "internship",
                "i got promoted",
                "promotion",
            ],
        ),
        (
            Attribute::Family,
            &[
                "my kids",
                "my kid",
                "my children",
                "my son",
                "my daughter",
                "my husband",
                "my wife",
                "my partner",
                "my boyfriend",
                "my girlfriend",
                "my mom",
                "my mother",
                "my dad",
                "my father",
                "my parents",
                "my sister",
                "my brother",
                "my family",
                "my grandma",
                "my grandpa",
                "my friend",
                "my friends",
                "my dog",
                "my cat",
                "my pet",
                "with the kids",
            ],
        ),
        (
            Attribute::Dislikes,
            &[
                "i hate",
                "i don't like",
                "i dislike",
                "i can't stand",
                "i avoid",
                "not a fan",
            ],
        ),
        (
            Attribute::Likes,
            &[
                "i love",
                "i like",
                "i enjoy",
                "i prefer",
                "my favorite",
                "my favourite",
                "i'm into",
                "i'm passionate",
                "my passion",
                "my hobby",
                "i'm a big fan",
                "i'm keen on",
                "i'm a fan",
            ],
        ),
        (
            Attribute::Plan,
            &[
                "i'm going to",
                "i plan",
                "i'm planning",
                "i'm thinking of",
                "i'm thinking about",
                "i want to",
                "i hope to",
                "i'll be",
                "next week",
                "next month",
                "next year",
                "this weekend",
                "i'm starting",
                "i'm off to",
            ],
        ),
        (
            Attribute::Habit,
            &[
                "i usually",
                "i always",
                "i often",
                "every day",
                "every week",
                "every morning",
                "i tend to",
                "i've been",
            ],
        ),
        (
            Attribute::Possession,
            &[
                "i have a",
                "i got a",
                "i bought",
                "i own",
                "i got",
                "i made",
                "i painted",
                "i built",
                "i wrote",
                "i adopted",
            ],
        ),
        (
            Attribute::Event,
            &[
                "i went",
                "i attended",
                "i joined",
                "i started",
                "i finished",
                "i took",
                "i ran",
                "i visited",
                "i tried",
                "i met",
                "i won",
                "i lost",
                "i signed up",
                "i volunteered",
                "i learned",
                "i read",
                "i saw",
                "i did",
                "i had",
                "i was",
                "i just",
                "i recently",
                "last week",
                "last month",
                "last year",
                "yesterday",
            ],
        ),
    ],
    stop_words: &[
        "the", "and", "but", "for", "with", "that", "this", "was", "are", "have", "has", "had",
        "been", "just", "really", "very", "too", "also", "about", "what", "which", "when", "then",
        "than", "there", "here", "they", "them", "their", "its", "it's", "not", "all", "some",
        "any", "can", "could", "would", "should", "will", "from", "into", "out", "our", "we're",
        "so", "get", "got", "like", "much", "more", "one", "lot", "lots", "yes", "pretty",
    ],
    min_content_words: 3,
    subject_within: 3,
    min_uncued_words: 4,
    elided_subject: &[
        "been", "just", "got", "went", "started", "finished", "working", "trying", "spent", "took",
        "had", "finally", "recently",
    ],
    per_turn: 1,
    follow_clauses: 5,
    values: ENGLISH_VALUES,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(Attribute, String)> {
        find_facts(text, &ENGLISH)
            .into_iter()
            .map(|f| (f.attribute, f.content))
            .collect()
    }

    #[test]
    fn first_person_statements_become_third_person_facts() {
        assert_eq!(
            found("I moved to Lisbon in March."),
            [(
                Attribute::Residence,
                "The user moved to Lisbon in March.".to_owned()
            )]
        );
        assert_eq!(
            found("I'm allergic to nuts, so no satay for me."),
            [(
                Attribute::Health,
                "The user is allergic to nuts, so no satay for the user.".to_owned()
            )]
        );
        assert_eq!(
            found("Joanna: My daughter starts school in May."),
            [(
                Attribute::Family,
                "Joanna's daughter starts school in May.".to_owned()
            )]
        );
        assert_eq!(
            found("I prefer ISO dates in every report."),
            [(
                Attribute::Likes,
                "The user prefers ISO dates in every report.".to_owned()
            )]
        );
    }

    #[test]
    fn small_talk_questions_and_the_listener_are_not_facts() {
        assert!(found("Thanks, I really appreciate the help with that!").is_empty());
        assert!(found("Do you think I should move to Lisbon?").is_empty());
        assert!(found("You said your sister moved to Porto last year.").is_empty());
        assert!(found("I'm so happy for you and your new job!").is_empty());
        assert!(found("Ok.").is_empty());
    }

    #[test]
    fn a_speaker_is_one_to_three_capitalised_words() {
        assert_eq!(split_speaker("Ana Lima: hi"), (Some("Ana Lima"), "hi"));
        assert_eq!(split_speaker("note: hi"), (None, "note: hi"));
        assert_eq!(
            split_speaker("Decision: ship it"),
            (Some("Decision"), "ship it")
        );
        // A label is not a speaker.
        assert!(
            find_facts("Decision: I moved the launch to Friday.", &ENGLISH)[0]
                .speaker
                .is_none()
        );
        assert_eq!(split_speaker("no colon"), (None, "no colon"));
    }

    #[test]
    fn one_per_turn_the_strongest_with_what_follows_it() {
        let text =
            "I had a long day. I live in Porto now. I love the old river walks. I went running.";
        let facts = find_facts(text, &ENGLISH);
        let attributes: Vec<Attribute> = facts.iter().map(|f| f.attribute).collect();
        assert_eq!(attributes, [Attribute::Residence]);
        assert_eq!(
            facts[0].content,
            "The user lives in Porto now. The user loves the old river walks. The user went running."
        );
    }

    #[test]
    fn interjections_dashes_and_the_plural_are_read() {
        assert_eq!(
            found("Melanie: Yeah, I made it in pottery class yesterday - want to see?"),
            [(
                Attribute::Possession,
                "Melanie made it in pottery class yesterday".to_owned()
            )]
        );
        assert_eq!(
            found("John: We had to say goodbye to our dog Max last month."),
            [(
                Attribute::Event,
                "John and others had to say goodbye to John's dog Max last month.".to_owned()
            )]
        );
        // A request to the listener is not a statement.
        assert!(found("Check out my new painting for the art show!").is_empty());
        // Uncued words to the listener are about the two of them.
        assert!(found("Gina: I am so happy to see my words motivating you, Jon.").is_empty());
    }

    #[test]
    fn cues_match_whole_words() {
        assert!(contains_phrase("i live in porto", "i live"));
        assert!(!contains_phrase("i lived in porto", "i live"));
        assert!(!contains_phrase("hi there", "i"));
    }

    #[test]
    fn attributes_round_trip_their_names() {
        for a in ATTRIBUTES {
            assert_eq!(Attribute::parse(a.as_str()), Some(a));
        }
        assert!(Attribute::Residence.single() && !Attribute::Likes.single());
    }
}

// ----- values of single-valued attributes ------------------------------

/// A language's rules for [`value_of`]: where the value of a single-valued
/// attribute ([`Attribute::single`]) stands in a fact, once rewritten in
/// the third person ("Ana moved to Lisbon last spring." → `Lisbon`).
/// Every phrase is lowercase and matches on word boundaries.
#[derive(Debug, Clone, Copy)]
pub struct ValueRules {
    /// Per attribute, the phrases its value follows. A phrase with ` … `
    /// in it has a gap: "is a … at" matches "is a nurse at the clinic",
    /// and the value is what the gap holds, the word after it and what
    /// follows ("nurse at the clinic").
    pub phrases: &'static [(Attribute, &'static [&'static str])],
    /// Words that end a value ("Lisbon *in* March", "Porto *with* my
    /// sister"); punctuation ends it too.
    pub ends: &'static [&'static str],
    /// Words dropped from the start of a value (articles).
    pub leading: &'static [&'static str],
    /// Words that, before the phrase, make the statement about someone
    /// else ("Ana said *he* moved to Porto").
    pub others: &'static [&'static str],
    /// Nouns a possessive owns when a phrase starts with them ("Ana's
    /// *job* at Acme" is Ana's); before any other phrase a possessive
    /// makes it someone else's ("Ana's sister moved to Porto").
    pub possessed: &'static [&'static str],
    /// Phrases that make a statement not one of the current value
    /// ("no longer", "used to", "not"): a fact with one has no value.
    pub not_current: &'static [&'static str],
    /// The most words a value keeps.
    pub max_words: usize,
}

/// The English value rules. Where someone is *from* or *grew up* is
/// deliberately not a residence value: it stays true after a move, so a
/// later "lives in" must not replace it.
pub const ENGLISH_VALUES: ValueRules = ValueRules {
    phrases: &[
        (
            Attribute::Residence,
            &[
                "lives in",
                "living in",
                "live in",
                "moved to",
                "relocated to",
                "is based in",
                "settled in",
            ],
        ),
        (
            Attribute::Work,
            &[
                "works at",
                "works as",
                "works for",
                "working at",
                "working as",
                "working for",
                "job at",
                "job as",
                "employed at",
                "employed by",
                "is a … at",
                "is an … at",
            ],
        ),
    ],
    ends: &[
        "in", "on", "at", "with", "since", "last", "next", "this", "for", "and", "but", "because",
        "now", "when", "after", "before", "so", "where", "which", "who", "as", "from", "until",
        "to", "while", "these", "recently", "again", "already", "too", "though",
    ],
    leading: &["the", "a", "an"],
    others: &[
        "he", "she", "they", "him", "his", "her", "hers", "them", "their", "you", "your",
    ],
    possessed: &["job"],
    not_current: &[
        "not",
        "n't",
        "no longer",
        "never",
        "used to",
        "anymore",
        "any more",
        "formerly",
        "if",
        "would",
    ],
    max_words: 5,
};

/// The value a `content` (a fact as capture writes it, in the third
/// person) gives its `attribute` under `rules`: the words after the
/// attribute's value phrase up to punctuation or an end word, without a
/// leading article, whitespace collapsed and trailing punctuation dropped.
/// `None` for an attribute without value phrases (only single-valued ones
/// have them), for a fact whose phrase follows someone else's possessive
/// ("Ana's sister moved to Porto" is not Ana's residence), and for one
/// that says the value is not current ("Ana no longer works at Acme").
/// Compare two values case-insensitively.
///
/// ```
/// use cairn_memory::facts::{value_of, Attribute, ENGLISH};
/// let v = |text| value_of(text, Attribute::Residence, &ENGLISH);
/// assert_eq!(v("Ana moved to Lisbon last spring.").as_deref(), Some("Lisbon"));
/// assert_eq!(v("The user lives in New York City with two cats.").as_deref(), Some("New York City"));
/// assert_eq!(v("Ana's sister moved to Porto."), None);
/// assert_eq!(v("Ana is from Porto."), None);
/// let w = |text| value_of(text, Attribute::Work, &ENGLISH);
/// assert_eq!(w("Ana works as a nurse at the clinic.").as_deref(), Some("nurse"));
/// assert_eq!(w("Ana is a nurse at the city clinic.").as_deref(), Some("nurse at the city clinic"));
/// assert_eq!(w("Ana no longer works at Acme."), None);
/// assert_eq!(value_of("Ana loves jazz.", Attribute::Likes, &ENGLISH), None);
/// ```
pub fn value_of(content: &str, attribute: Attribute, rules: &FactRules) -> Option<String> {
    let values = &rules.values;
    let phrases = values
        .phrases
        .iter()
        .find(|(a, _)| *a == attribute)
        .map(|(_, p)| *p)?;
    let lower = content.to_lowercase().replace('’', "'");
    // "n't" is part of a word ("doesn't"); the others are words.
    if values
        .not_current
        .iter()
        .any(|p| contains_phrase(&lower, p) || (p.starts_with("n'") && lower.contains(p)))
    {
        return None;
    }
    // Words of the original text with their lowercase form, punctuation
    // kept as its own token (it ends a value).
    let tokens = value_tokens(content);
    let lowered: Vec<String> = tokens
        .iter()
        .map(|t| t.to_lowercase().replace('’', "'"))
        .collect();
    for phrase in phrases {
        let (head, tail) = match phrase.split_once(" … ") {
            Some((h, t)) => (h, Some(t)),
            None => (*phrase, None),
        };
        let head: Vec<&str> = head.split_whitespace().collect();
        let Some(at) = (0..lowered.len()).find(|&i| {
            lowered.len() >= i + head.len()
                && head.iter().enumerate().all(|(k, w)| lowered[i + k] == *w)
        }) else {
            continue;
        };
        // Someone else's: another person's pronoun before the phrase, or a
        // possessive that does not own the phrase's own noun ("Ana's job
        // at" is Ana's; "Ana's sister moved to" is not).
        let owned = values.possessed.contains(&head[0]);
        if lowered[..at].iter().enumerate().any(|(i, w)| {
            values.others.contains(&w.as_str()) || (w.ends_with("'s") && !(owned && i + 1 == at))
        }) {
            return None;
        }
        let start = at + head.len();
        let mut words: Vec<&str> = Vec::new();
        let mut tail_seen = tail.is_none();
        for (k, token) in tokens.iter().enumerate().skip(start) {
            let low = lowered[k].as_str();
            if !token.chars().any(char::is_alphanumeric) {
                break;
            }
            if !tail_seen && Some(low) == tail {
                tail_seen = true;
                words.push(token.as_str());
                continue;
            }
            if tail_seen && values.ends.contains(&low) {
                break;
            }
            words.push(token.as_str());
            if words.len() >= values.max_words + usize::from(tail.is_some()) {
                break;
            }
        }
        if !tail_seen {
            continue;
        }
        // Drop leading articles, and a gap phrase's tail left last.
        let lead = words
            .iter()
            .take_while(|w| values.leading.contains(&w.to_lowercase().as_str()))
            .count();
        let mut kept: Vec<&str> = words[lead..].to_vec();
        if tail.is_some_and(|t| kept.last().is_some_and(|w| w.eq_ignore_ascii_case(t))) {
            kept.pop();
        }
        if kept.is_empty()
            || tail.is_some_and(|t| kept.first().is_some_and(|w| w.eq_ignore_ascii_case(t)))
        {
            continue;
        }
        return Some(kept.join(" "));
    }
    None
}

/// `text` as words (letters, digits, apostrophes, inner hyphens) and
/// single punctuation marks, in order.
fn value_tokens(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() || c == '\'' || c == '’' || (c == '-' && !word.is_empty()) {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The detail capture writes on a fact entry, naming its attribute and,
/// when the turn named one, its speaker; [`fact_of_detail`] reads it back.
///
/// ```
/// use cairn_memory::facts::{fact_detail, Attribute};
/// assert_eq!(fact_detail(Attribute::Residence, Some("Ana")), "(fact: residence, about Ana)");
/// assert_eq!(fact_detail(Attribute::Likes, None), "(fact: likes)");
/// ```
pub fn fact_detail(attribute: Attribute, speaker: Option<&str>) -> String {
    match speaker {
        Some(speaker) => format!("(fact: {}, about {speaker})", attribute.as_str()),
        None => format!("(fact: {})", attribute.as_str()),
    }
}

/// The attribute and speaker a fact entry's `detail` names
/// ([`fact_detail`]'s note, anywhere in it); `None` when it names no
/// attribute.
///
/// ```
/// use cairn_memory::facts::{fact_of_detail, Attribute};
/// let detail = "heuristic rule \"moved to\" (fact: residence, about Ana Lima), trigger session_end";
/// assert_eq!(fact_of_detail(detail), Some((Attribute::Residence, Some("Ana Lima".to_owned()))));
/// assert_eq!(fact_of_detail("(fact: work)"), Some((Attribute::Work, None)));
/// assert_eq!(fact_of_detail("heuristic rule \"we decided\""), None);
/// ```
pub fn fact_of_detail(detail: &str) -> Option<(Attribute, Option<String>)> {
    let (_, rest) = detail.split_once("(fact: ")?;
    let (inner, _) = rest.split_once(')')?;
    let (attribute, speaker) = match inner.split_once(", about ") {
        Some((a, s)) => (a, Some(s.trim()).filter(|s| !s.is_empty())),
        None => (inner, None),
    };
    Some((
        Attribute::parse(attribute.trim())?,
        speaker.map(str::to_owned),
    ))
}

#[cfg(test)]
mod value_tests {
    use super::*;

    fn residence(text: &str) -> Option<String> {
        value_of(text, Attribute::Residence, &ENGLISH)
    }

    fn work(text: &str) -> Option<String> {
        value_of(text, Attribute::Work, &ENGLISH)
    }

    #[test]
    fn residence_values() {
        let cases = [
            ("Ana lives in Porto.", Some("Porto")),
            ("The user moved to Lisbon in March.", Some("Lisbon")),
            (
                "Ana finally relocated to the Algarve, near Faro.",
                Some("Algarve"),
            ),
            ("Jon is living in Berlin now.", Some("Berlin")),
            ("Ana has lived in Porto for years.", None),
            ("Ana's parents live in Braga.", None),
            ("Ana doesn't live in Porto anymore.", None),
            ("Ana grew up in Braga.", None),
            ("Ana moved to", None),
        ];
        for (text, want) in cases {
            assert_eq!(residence(text).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn work_values() {
        let cases = [
            ("Ana works at Acme Labs as a designer.", Some("Acme Labs")),
            ("Ana works for the city council.", Some("city council")),
            ("Ana got a job at Globex!", Some("Globex")),
            (
                "Ana is an engineer at Initech.",
                Some("engineer at Initech"),
            ),
            ("Ana is a big fan of jazz.", None),
            ("Ana used to work at Acme.", None),
        ];
        for (text, want) in cases {
            assert_eq!(work(text).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn a_found_fact_has_the_value_of_what_was_said() {
        let found = find_facts("Ana: I moved to Lisbon last spring.", &ENGLISH);
        assert_eq!(
            value_of(&found[0].content, found[0].attribute, &ENGLISH).as_deref(),
            Some("Lisbon")
        );
    }

    #[test]
    fn details_round_trip() {
        for a in ATTRIBUTES {
            for speaker in [None, Some("Ana"), Some("Mary-Jo O'Neil")] {
                let detail = format!(
                    "heuristic rule \"x\" {}, trigger t",
                    fact_detail(a, speaker)
                );
                assert_eq!(
                    fact_of_detail(&detail),
                    Some((a, speaker.map(str::to_owned)))
                );
            }
        }
        assert_eq!(fact_of_detail("(fact: nonsense)"), None);
        assert_eq!(fact_of_detail("(fact: work"), None);
    }
}
