//! Word-level helpers shared by the deterministic rules that compare
//! entries and turns (contradictions, restatements, answers): tokens,
//! negations, values, salient terms. No model, no allocation beyond the
//! token lists; the same text always gives the same tokens.

use std::borrow::Cow;
use std::collections::BTreeSet;

/// A negation, as one token (contractions are split: `don't` → `do` + this).
pub(crate) const NEG: &str = "¬";

/// Words that carry no content of their own.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "but", "by", "can", "could", "did", "do", "does", "for", "from",
    "get", "go", "going", "got", "had", "has", "have", "he", "her", "here", "him", "his", "how",
    "i", "if", "in", "into", "is", "it", "its", "it's", "just", "let", "let's", "lets", "me",
    "more", "my", "of", "on", "one", "or", "our", "out", "over", "please", "she", "should", "so",
    "some", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this",
    "those", "to", "too", "up", "us", "was", "we", "we'll", "we're", "were", "what", "when",
    "where", "which", "while", "who", "why", "will", "with", "would", "you", "your", "i'll", "i'm",
    "i've", "we've", "also", "now", "okay", "ok", "yes", "sure", "need", "needs", "want", "wants",
    "think", "say", "says", "said", "tell", "told", "way", "thing", "things",
];

/// Month names, the twelve full names first (January first), then their
/// abbreviations.
pub(crate) const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
];

const WEEKDAYS: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// The words of a list held as one string, joined by single spaces: the
/// form a token or term list takes where one is held per live entry (the
/// contradiction index's readings, settle's terms). A token never holds a
/// space ([`tokens`]), so the string splits back into the list it was
/// joined from.
pub(crate) fn joined_words(joined: &str) -> impl Iterator<Item = &str> {
    joined.split(' ').filter(|w| !w.is_empty())
}

/// Lowercase tokens: runs of letters and digits (an apostrophe inside a
/// word is kept, `’` read as `'`). A negated contraction becomes its base
/// and [`NEG`] (`won't` → `will ¬`, `can't` → `can ¬`, `isn't` → `is ¬`);
/// `cannot` → `can ¬`; `without` → `with ¬`; `not`, `no`, `never`, `none`,
/// `nothing`, `neither`, `nor` → `¬`.
pub(crate) fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<String>| {
        let w = word.trim_matches('\'');
        if !w.is_empty() {
            push_word(w, out);
        }
        word.clear();
    };
    for c in text.chars() {
        let c = if c == '’' { '\'' } else { c };
        if c.is_alphanumeric() || (c == '\'' && !word.is_empty()) {
            word.extend(c.to_lowercase());
        } else {
            flush(&mut word, &mut out);
        }
    }
    flush(&mut word, &mut out);
    out
}

fn push_word(w: &str, out: &mut Vec<String>) {
    let negated_base = match w {
        "won't" => Some("will"),
        "can't" | "cannot" => Some("can"),
        "shan't" => Some("shall"),
        "without" => Some("with"),
        _ => w.strip_suffix("n't"),
    };
    match negated_base {
        Some(base) => {
            out.push(base.to_owned());
            out.push(NEG.to_owned());
        }
        None if matches!(
            w,
            "not" | "no" | "never" | "none" | "nothing" | "neither" | "nor"
        ) =>
        {
            out.push(NEG.to_owned());
        }
        None => out.push(w.to_owned()),
    }
}

/// Whether a token names a value: it holds a digit, or is a month or a
/// weekday.
pub(crate) fn is_value(token: &str) -> bool {
    token.chars().any(|c| c.is_ascii_digit())
        || MONTHS.contains(&token)
        || WEEKDAYS.contains(&token)
}

/// Whether a token carries no content (a stopword or a negation).
pub(crate) fn is_stopword(token: &str) -> bool {
    token == NEG || STOPWORDS.contains(&token)
}

/// A crude stem: plural, past-tense and `-ing` endings cut, a doubled
/// final consonant and a final `e` dropped, so `booked`, `books`,
/// `booking` and `book` compare equal (and `released` / `release`).
/// Values and non-ASCII words are left alone.
pub(crate) fn stem(token: &str) -> String {
    if is_value(token) || token.len() <= 3 || !token.is_ascii() {
        return token.to_owned();
    }
    let long = |b: &&str| b.len() >= 3;
    let mut t = if let Some(b) = token.strip_suffix("ies").filter(long) {
        format!("{b}y")
    } else if let Some(b) = token.strip_suffix("ied").filter(long) {
        format!("{b}y")
    } else if let Some(b) = token.strip_suffix("ing").filter(long) {
        b.to_owned()
    } else if let Some(b) = token.strip_suffix("ed").filter(long) {
        b.to_owned()
    } else if let Some(b) = token
        .strip_suffix("es")
        .filter(|b| ["s", "x", "z", "ch", "sh"].iter().any(|e| b.ends_with(e)))
    {
        b.to_owned()
    } else if token.ends_with('s') && !["ss", "us", "is"].iter().any(|e| token.ends_with(e)) {
        token[..token.len() - 1].to_owned()
    } else {
        token.to_owned()
    };
    let b = t.as_bytes();
    if b.len() >= 4 && b[b.len() - 1] == b[b.len() - 2] && !b"aeiouls".contains(&b[b.len() - 1]) {
        t.pop();
    }
    if t.len() >= 4 && t.ends_with('e') {
        t.pop();
    }
    t
}

/// The salient terms of a text: stems of its tokens that are values or
/// non-stopwords of at least three letters.
pub(crate) fn salient(text: &str) -> BTreeSet<String> {
    tokens(text)
        .into_iter()
        .filter(|t| is_value(t) || (!is_stopword(t) && t.chars().count() >= 3))
        .map(|t| stem(&t))
        .collect()
}

/// How many negations the tokens hold.
pub(crate) fn negations(tokens: &[String]) -> usize {
    tokens.iter().filter(|t| *t == NEG).count()
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub(crate) fn head_bytes(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// Whitespace runs (newlines included) collapsed into single spaces, the
/// ends trimmed: `text.split_whitespace()` joined by spaces. Most texts
/// (a chat turn, an entry) are so already and are borrowed, not copied:
/// assembly renders every line of a block through this, call after call.
pub(crate) fn one_line(text: &str) -> Cow<'_, str> {
    if is_one_line(text) {
        return Cow::Borrowed(text);
    }
    let mut line = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    Cow::Owned(line)
}

/// Whether [`one_line`] would leave `text` as it is: no whitespace but
/// single spaces between other characters.
///
/// One pass over the bytes without a branch or an early exit, which the
/// compiler turns into vector code (about seven times the walk's speed on
/// a chat turn): it flags a whitespace control (tab to carriage return),
/// two spaces in a row, and a byte that can start a whitespace character
/// outside ASCII (U+0085, U+00A0, U+1680, U+2000 to U+3000). Only a text
/// with such a lead byte (a curly quote or a dash starts with one too) is
/// walked again, by [`is_one_line_walked`].
fn is_one_line(text: &str) -> bool {
    const BROKEN: u8 = 1;
    const LEAD: u8 = 2;
    fn flags(byte: u8, next: u8) -> u8 {
        let control = byte.wrapping_sub(b'\t') <= b'\r' - b'\t';
        let doubled = (byte == b' ') & (next == b' ');
        let lead = (byte == 0xC2) | (byte.wrapping_sub(0xE1) <= 0xE3 - 0xE1);
        (u8::from(control | doubled) * BROKEN) | (u8::from(lead) * LEAD)
    }
    let bytes = text.as_bytes();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return true;
    };
    if first == b' ' || last == b' ' {
        return false;
    }
    let mut seen = flags(last, 0);
    for (&byte, &next) in bytes.iter().zip(&bytes[1..]) {
        seen |= flags(byte, next);
    }
    if seen & BROKEN != 0 {
        return false;
    }
    seen & LEAD == 0 || is_one_line_walked(text)
}

/// [`is_one_line`] by a walk over the bytes that decodes a character only
/// where a byte can start a whitespace character outside ASCII.
fn is_one_line_walked(text: &str) -> bool {
    // A space at the start would be trimmed: count the start as a space.
    let mut after_space = true;
    for (i, &b) in text.as_bytes().iter().enumerate() {
        match b {
            b' ' => {
                if after_space {
                    return false;
                }
                after_space = true;
                continue;
            }
            // `char::is_whitespace` below 0x80: tab to carriage return.
            b'\t'..=b'\r' => return false,
            // A lead byte, so `i` is a character boundary.
            0xC2 | 0xE1 | 0xE2 | 0xE3
                if text[i..].chars().next().is_some_and(char::is_whitespace) =>
            {
                return false;
            }
            _ => {}
        }
        after_space = false;
    }
    !after_space || text.is_empty()
}

/// At most `max` characters, with `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `one_line` is `split_whitespace` joined by spaces, borrowed or not.
        #[test]
        fn one_line_joins_the_words(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just(" "), Just("  "), Just("\n"), Just("\t"), Just("\r\n"),
                    Just("\u{a0}"), Just("\u{2003}"), Just("\u{200b}"),
                    Just("\u{85}"), Just("\u{1680}"), Just("\u{2028}"), Just("\u{202f}"),
                    Just("\u{205f}"), Just("\u{3000}"), Just("\u{b}"), Just("\u{c}"),
                    Just("\u{1f}"), Just("\u{e1}"), Just("\u{2010}"), Just("\u{3001}"),
                    Just("word"), Just("é"), Just("-"), Just("\u{1F600}"),
                ],
                0..40,
            )
        ) {
            let text = parts.concat();
            let line = one_line(&text);
            prop_assert_eq!(&*line, text.split_whitespace().collect::<Vec<_>>().join(" "));
            prop_assert_eq!(matches!(line, Cow::Borrowed(_)), line == text);
            prop_assert_eq!(is_one_line(&text), is_one_line_walked(&text));
        }
    }

    #[test]
    fn head_bytes_cuts_at_a_character_boundary() {
        assert_eq!(head_bytes("", 4), "");
        assert_eq!(head_bytes("abc", 4), "abc");
        assert_eq!(head_bytes("abcdef", 4), "abcd");
        // "é" is two bytes: a cut inside it falls back before it.
        assert_eq!(head_bytes("abé", 3), "ab");
        assert_eq!(head_bytes("abé", 4), "abé");
        assert_eq!(head_bytes("abc", 0), "");
    }

    #[test]
    fn one_line_borrows_a_line_and_copies_the_rest() {
        assert!(matches!(one_line("a b c"), Cow::Borrowed("a b c")));
        assert!(matches!(one_line(""), Cow::Borrowed("")));
        for (text, line) in [
            (" a", "a"),
            ("a ", "a"),
            ("a  b", "a b"),
            ("a\nb", "a b"),
            (" ", ""),
        ] {
            let got = one_line(text);
            assert!(matches!(got, Cow::Owned(_)), "{text:?}");
            assert_eq!(got, line);
        }
    }

    #[test]
    fn tokens_split_negations() {
        assert_eq!(
            tokens("We won't ship without sync; don't use flags."),
            [
                "we", "will", NEG, "ship", "with", NEG, "sync", "do", NEG, "use", "flags"
            ]
        );
        assert_eq!(
            tokens("Launch April 1, 2026"),
            ["launch", "april", "1", "2026"]
        );
        assert_eq!(tokens("It’s 'quoted'"), ["it's", "quoted"]);
    }

    #[test]
    fn salient_terms_are_stemmed_content_words() {
        assert_eq!(
            salient("I booked the status-page maintenance windows on April 8."),
            salient("book status page maintenance window april 8")
        );
        assert_eq!(salient("Shipped the releases"), salient("ship release"));
        assert!(salient("the status of it").contains("status"));
        assert!(salient("We need to do it").is_empty());
    }
}
