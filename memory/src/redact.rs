//! Secret redaction, shared by every surface that shows stored text: the
//! memory tools, and the assembly's `redacted` rendering.
//!
//! [`redact`] masks credentials (API keys, tokens, passwords);
//! [`redact_personal`] also masks e-mail addresses and phone numbers, for
//! content a policy lets out only as a redacted copy. [`has_secret`] and
//! [`has_personal_data`] tell a policy adapter how sensitive a text is.

/// Masks API keys, tokens and passwords in `text`.
///
/// ```
/// let r = cairn_memory::redact::redact("key sk-abcdefghijklmnopqrstuvwx and password=hunter22");
/// assert_eq!(r, "key [REDACTED] and password=[REDACTED]");
/// ```
pub fn redact(text: &str) -> String {
    const PREFIXES: [&str; 9] = [
        "sk-",
        "ghp_",
        "gho_",
        "github_pat_",
        "xoxb-",
        "xoxp-",
        "AKIA",
        "glpat-",
        "eyJ",
    ];
    const KEYS: [&str; 7] = [
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "authorization",
    ];
    let mut out = String::with_capacity(text.len());
    let mut bearer = false;
    for (i, part) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let word = part
            .trim_matches(|c: char| matches!(c, '"' | '\'' | ',' | ';' | '.' | ')' | '(' | '`'));
        let lower = word.to_ascii_lowercase();
        let secretish = |w: &str| {
            w.len() >= 12 && PREFIXES.iter().any(|p| w.starts_with(p))
                || (w.len() >= 32
                    && w.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_+/=".contains(c))
                    && w.chars().any(|c| c.is_ascii_digit())
                    && w.chars().any(|c| c.is_ascii_alphabetic()))
        };
        if bearer && !word.is_empty() {
            out.push_str(&part.replace(word, "[REDACTED]"));
            bearer = false;
            continue;
        }
        bearer = lower == "bearer";
        if let Some((k, v)) = word.split_once(['=', ':']) {
            let key = k.to_ascii_lowercase();
            if !v.is_empty() && KEYS.iter().any(|s| key.ends_with(s)) {
                out.push_str(&part.replace(
                    word,
                    &format!("{k}{}[REDACTED]", &word[k.len()..k.len() + 1]),
                ));
                continue;
            }
        }
        if secretish(word) {
            out.push_str(&part.replace(word, "[REDACTED]"));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// True when [`redact`] would mask something in `text`.
///
/// ```
/// assert!(cairn_memory::redact::has_secret("token=abc123"));
/// assert!(!cairn_memory::redact::has_secret("no secrets here"));
/// ```
pub fn has_secret(text: &str) -> bool {
    redact(text) != text
}

fn is_email(word: &str) -> bool {
    let Some((user, domain)) = word.split_once('@') else {
        return false;
    };
    !user.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && domain
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

fn is_phone(word: &str) -> bool {
    let digits = word.chars().filter(char::is_ascii_digit).count();
    digits >= 9
        && word
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | '(' | ')' | '.'))
}

/// True when `text` holds an e-mail address or a phone number.
///
/// ```
/// assert!(cairn_memory::redact::has_personal_data("mail ana@example.org"));
/// assert!(!cairn_memory::redact::has_personal_data("version 1.2.3"));
/// ```
pub fn has_personal_data(text: &str) -> bool {
    names_a_person(&redact(text))
}

/// True when a word of `masked` (text [`redact`] has already masked) is an
/// e-mail address or a phone number: exactly when [`redact_personal`] would
/// change it further, without building the copy.
fn names_a_person(masked: &str) -> bool {
    masked.split(' ').any(|part| {
        let word = trim_personal(part);
        is_email(word) || is_phone(word)
    })
}

fn trim_personal(part: &str) -> &str {
    part.trim_matches(|c: char| {
        matches!(
            c,
            '"' | '\'' | ',' | ';' | '.' | ')' | '(' | '`' | '<' | '>' | ':'
        )
    })
}

/// How exposed a text is, as [`has_secret`] then [`has_personal_data`]
/// would say, with one pass of each check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// It holds a credential.
    Secret,
    /// No credential, but an e-mail address or a phone number.
    Personal,
    /// Neither.
    Clean,
}

/// Classifies `text` (see [`Exposure`]).
///
/// ```
/// use cairn_memory::redact::{exposure, Exposure};
/// assert_eq!(exposure("token=abc123 and ana@example.org"), Exposure::Secret);
/// assert_eq!(exposure("mail ana@example.org"), Exposure::Personal);
/// assert_eq!(exposure("version 1.2.3"), Exposure::Clean);
/// ```
pub fn exposure(text: &str) -> Exposure {
    let masked = redact(text);
    if masked != text {
        Exposure::Secret
    } else if names_a_person(&masked) {
        Exposure::Personal
    } else {
        Exposure::Clean
    }
}

/// [`redact`], then masks e-mail addresses and phone numbers too.
///
/// ```
/// let r = cairn_memory::redact::redact_personal("Call +1-555-010-9999 or mail ana@example.org, token=x1");
/// assert_eq!(r, "Call [PHONE] or mail [EMAIL], token=[REDACTED]");
/// ```
pub fn redact_personal(text: &str) -> String {
    let masked = redact(text);
    let mut out = String::with_capacity(masked.len());
    for (i, part) in masked.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let word = trim_personal(part);
        if is_email(word) {
            out.push_str(&part.replace(word, "[EMAIL]"));
        } else if is_phone(word) {
            out.push_str(&part.replace(word, "[PHONE]"));
        } else {
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Words that trip each rule, mixed with plain ones.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("ana@example.org".to_owned()),
            Just("(+1-555-010-9999),".to_owned()),
            Just("token=abc123".to_owned()),
            Just("token=ana@example.org".to_owned()),
            Just("Bearer".to_owned()),
            Just("sk-abcdefghijklmnop".to_owned()),
            Just("1.2.3".to_owned()),
            Just("".to_owned()),
            "[a-z@.:0-9+-]{0,12}",
        ]
    }

    proptest! {
        /// `exposure` and `has_personal_data` answer what the definitions
        /// by copies answer: a secret when `redact` changes the text,
        /// personal when `redact_personal` changes it further.
        #[test]
        fn exposure_matches_the_copying_definitions(words in prop::collection::vec(word(), 0..8)) {
            let text = words.join(" ");
            let secret = redact(&text) != text;
            let personal = redact_personal(&text) != redact(&text);
            prop_assert_eq!(has_secret(&text), secret);
            prop_assert_eq!(has_personal_data(&text), personal);
            let expected = if secret {
                Exposure::Secret
            } else if personal {
                Exposure::Personal
            } else {
                Exposure::Clean
            };
            prop_assert_eq!(exposure(&text), expected);
        }
    }
}
