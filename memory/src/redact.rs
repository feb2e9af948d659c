//! Secret redaction, shared by every surface that shows stored text: the
//! memory tools, and the assembly's `redacted` rendering.
//!
//! [`redact`] masks credentials (API keys, tokens, passwords);
//! [`redact_personal`] also masks e-mail addresses and phone numbers, for
//! content a policy lets out only as a redacted copy. [`has_secret`] and
//! [`has_personal_data`] tell a policy adapter how sensitive a text is.

/// Token prefixes of common credential formats (a word starting with one,
/// at least 12 characters long, is a credential).
const PREFIXES: [&str; 18] = [
    "sk-",
    "sk_live_",
    "rk_live_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xapp-",
    "AKIA",
    "ASIA",
    "glpat-",
    "AIza",
    "npm_",
    "eyJ",
];

/// Names whose value is a secret: `password=x`, `"api_key": "x"`,
/// `password is x`, `Authorization: Bearer x`.
const KEYS: [&str; 11] = [
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "credential",
    "credentials",
    "_key",
];

/// Words that stand between a secret's name and its value.
const LINKS: [&str; 6] = [":", "=", ":=", "is", "was", "->"];

/// What every secret's name and announcement holds, ASCII case ignored: a
/// word [`names_secret`] accepts ends with one of [`KEYS`] or `-key`, each of
/// which holds one of these, and so does `bearer`, `key` and a PEM private
/// key's `PRIVATE KEY` line. A text with none of them has no value to mask
/// after a name ([`plainly_clean`]).
const NAME_PARTS: [&str; 8] = [
    "passw",
    "passphrase",
    "secret",
    "token",
    "key",
    "authorization",
    "credential",
    "bearer",
];

static NAMES: std::sync::LazyLock<Option<aho_corasick::AhoCorasick>> =
    std::sync::LazyLock::new(|| {
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(NAME_PARTS)
            .ok()
    });

/// True when `text` certainly has nothing [`redact`] or [`redact_personal`]
/// would mask, found in one pass without copying: no secret's name (so no
/// value after one and no PEM private key), and no word that is a token
/// ([`secretish`]), holds an `@` or nine digits (an e-mail address or a
/// phone number lies within one whitespace-free word). Most prose passes;
/// what does not goes through the full rules.
fn plainly_clean(text: &str) -> bool {
    let Some(names) = NAMES.as_ref() else {
        return false;
    };
    !names.is_match(text)
        && text.split(char::is_whitespace).all(|part| {
            !part.contains('@')
                && part.bytes().filter(u8::is_ascii_digit).count() < 9
                && (part.len() < 12 || !secretish(trim_word(part)))
        })
}

/// Punctuation around a word that is not part of it.
fn trim_word(part: &str) -> &str {
    part.trim_matches(|c: char| {
        matches!(
            c,
            '"' | '\'' | ',' | ';' | '.' | ')' | '(' | '`' | '{' | '}' | '[' | ']'
        )
    })
}

/// True when `name` (a word, quotes and separators stripped, lowercase)
/// names a secret.
fn names_secret(name: &str) -> bool {
    KEYS.iter().any(|k| name.ends_with(k)) || name.ends_with("-key")
}

fn secretish(w: &str) -> bool {
    w.len() >= 12 && PREFIXES.iter().any(|p| w.starts_with(p))
        || (w.len() >= 32
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_+/=".contains(c))
            && w.chars().any(|c| c.is_ascii_digit())
            && w.chars().any(|c| c.is_ascii_alphabetic()))
}

/// What the words before have announced.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Nothing,
    /// A secret's name was seen; a linking word (`:`, `is`…) may follow.
    Link,
    /// The next word is a secret.
    Value,
}

/// Masks one whitespace-free word; `expect` carries what the previous
/// words announced, `prev` is the previous word (lowercase).
fn mask_word(part: &str, expect: &mut Expect, prev: &str) -> String {
    let word = trim_word(part);
    if word.is_empty() {
        return part.to_owned();
    }
    let lower = word.to_ascii_lowercase();
    match *expect {
        // `Authorization: Bearer x`: the scheme, then the secret.
        Expect::Value if lower == "bearer" || lower == "basic" => return part.to_owned(),
        Expect::Value => {
            *expect = Expect::Nothing;
            return part.replacen(word, "[REDACTED]", 1);
        }
        Expect::Link if LINKS.contains(&lower.as_str()) => {
            *expect = Expect::Value;
            return part.to_owned();
        }
        _ => *expect = Expect::Nothing,
    }
    if lower == "bearer" {
        *expect = Expect::Value;
        return part.to_owned();
    }
    if let Some(at) = word.find(['=', ':']) {
        let (k, rest) = word.split_at(at);
        let name = k
            .trim_matches(|c| c == '"' || c == '\'')
            .to_ascii_lowercase();
        let value = trim_word(rest[1..].trim_start_matches(['=', ':']));
        if names_secret(&name) {
            if value.is_empty() {
                // `"password":` then the value as the next word.
                *expect = Expect::Value;
                return part.to_owned();
            }
            return part.replacen(word, &format!("{}[REDACTED]", &word[..=at]), 1);
        }
    }
    let bare = lower.trim_end_matches([':', '=']);
    if names_secret(bare)
        || (bare == "key" && matches!(prev, "api" | "access" | "secret" | "private"))
    {
        // `password:` announces the value; `password` may still take a
        // linking word (`password is x`).
        *expect = if bare.len() < lower.len() {
            Expect::Value
        } else {
            Expect::Link
        };
        return part.to_owned();
    }
    if secretish(word) {
        return part.replacen(word, "[REDACTED]", 1);
    }
    part.to_owned()
}

/// Replaces PEM private-key blocks (`-----BEGIN … PRIVATE KEY-----` to the
/// matching END line, or to the end of the text) with one marker.
fn mask_pem(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let header_end = rest[begin + 11..].find("-----").map(|i| begin + 11 + i + 5);
        let Some(header_end) = header_end else { break };
        if !rest[begin..header_end].contains("PRIVATE KEY") {
            out.push_str(&rest[..header_end]);
            rest = &rest[header_end..];
            continue;
        }
        out.push_str(&rest[..begin]);
        out.push_str("[REDACTED PRIVATE KEY]");
        rest = match rest[header_end..].find("-----END ") {
            Some(i) => {
                let end = header_end + i + 9;
                match rest[end..].find("-----") {
                    Some(j) => &rest[end + j + 5..],
                    None => "",
                }
            }
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// Masks API keys, tokens, passwords and private keys in `text`: known
/// token formats, long random-looking words, the value after a secret's
/// name (`password=x`, `"api_key": "x"`, `password is x`, `Bearer x`, a key
/// on the line after its name) and PEM private-key blocks. Whitespace is
/// kept as it was.
///
/// ```
/// use cairn_memory::redact::redact;
/// assert_eq!(redact("key sk-abcdefghijklmnopqrstuvwx and password=hunter22"),
///            "key [REDACTED] and password=[REDACTED]");
/// assert_eq!(redact("the password is hunter2"), "the password is [REDACTED]");
/// assert_eq!(redact(r#"{"password": "x1"}"#), r#"{"password": "[REDACTED]"}"#);
/// ```
pub fn redact(text: &str) -> String {
    if plainly_clean(text) {
        return text.to_owned();
    }
    redact_by_the_rules(text)
}

/// [`redact`] without the [`plainly_clean`] shortcut.
fn redact_by_the_rules(text: &str) -> String {
    let pem;
    let text = if text.contains("-----BEGIN ") {
        pem = mask_pem(text);
        pem.as_str()
    } else {
        text
    };
    let mut out = String::with_capacity(text.len());
    let mut expect = Expect::Nothing;
    let mut prev = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let space = rest
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(rest.len());
        out.push_str(&rest[..space]);
        rest = &rest[space..];
        if rest.is_empty() {
            break;
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let part = &rest[..end];
        rest = &rest[end..];
        out.push_str(&mask_word(part, &mut expect, &prev));
        prev = trim_word(part).to_ascii_lowercase();
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
    !plainly_clean(text) && names_a_person(&redact_by_the_rules(text))
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
    if plainly_clean(text) {
        return Exposure::Clean;
    }
    let masked = redact_by_the_rules(text);
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
    if plainly_clean(text) {
        return text.to_owned();
    }
    let masked = redact_by_the_rules(text);
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

    /// Words near and on each rule's edge: names inside longer words, a
    /// token one character short, nine digits, an `@`, a PEM header.
    fn edge_word() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("passes".to_owned()),
            Just("Passwd".to_owned()),
            Just("keystone".to_owned()),
            Just("MONKEY:".to_owned()),
            Just("bearer".to_owned()),
            Just("is".to_owned()),
            Just("-----BEGIN".to_owned()),
            Just("PRIVATE".to_owned()),
            Just("-----\n".to_owned()),
            Just("ghp_0123456".to_owned()),
            Just("ghp_01234567".to_owned()),
            Just("\"AKIAIOSFODNN7EXAMPLE\",".to_owned()),
            Just("a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6".to_owned()),
            Just("a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d".to_owned()),
            Just("12345678".to_owned()),
            Just("555-010-999".to_owned()),
            Just("(555)010-9999".to_owned()),
            Just("x@y.io".to_owned()),
            Just("\t".to_owned()),
            "[a-zA-Z0-9_@.:=+/-]{0,40}",
        ]
    }

    proptest! {
        /// The shortcut never skips a text the rules would change: when
        /// `plainly_clean` says so, the full rules mask nothing and find no
        /// e-mail address or phone number.
        #[test]
        fn a_plainly_clean_text_is_clean_by_the_rules(
            words in prop::collection::vec(prop_oneof![word(), edge_word()], 0..10),
            sep in prop_oneof![Just(" "), Just("\n"), Just(" \t")],
        ) {
            let text = words.join(sep);
            if plainly_clean(&text) {
                prop_assert_eq!(redact_by_the_rules(&text), text.clone());
                prop_assert!(!names_a_person(&text), "{:?}", text);
            }
        }

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

    /// What must be masked, with the secret that must not survive.
    const LEAKS: &[(&str, &str)] = &[
        ("password: hunter2", "hunter2"),
        ("Password is hunter2, keep it safe", "hunter2"),
        ("my password was correct-horse", "correct-horse"),
        (r#"{"password": "x9-secret"}"#, "x9-secret"),
        (r#"{"password":"x9-secret"}"#, "x9-secret"),
        ("config: db_password=swordfish", "swordfish"),
        (
            "API key:\nsk-abcdefghijklmnopqrstuvwxyz",
            "sk-abcdefghijklmnopqrstuvwxyz",
        ),
        ("api key: 7f3a9b2c", "7f3a9b2c"),
        (
            "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG",
            "wJalrXUtnFEMIK7MDENG",
        ),
        ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
        (
            "token\tghp_0123456789abcdefghijklmnopqrstuvwxyz",
            "ghp_0123456789abcdef",
        ),
        (
            "stripe sk_live_0123456789abcdef",
            "sk_live_0123456789abcdef",
        ),
        (
            "google AIzaSyA-0123456789abcdefghijklmnopqrstu",
            "AIzaSyA-0123456789",
        ),
        ("slack xoxb-1234-5678-abcdefgh", "xoxb-1234-5678-abcdefgh"),
        ("the passphrase: open sesame", "open"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x\nabc\n-----END RSA PRIVATE KEY-----\nafter",
            "MIIEowIBAAKCAQEA7x",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk",
            "b3BlbnNzaC1rZXk",
        ),
    ];

    /// Plain prose that must come back unchanged.
    const CLEAN: &[&str] = &[
        "We decided to use Postgres 16 and ship on April 1.",
        "The launch plan: invite the waitlist a week later.",
        "version 1.2.3 of the key-value store",
        "-----BEGIN CERTIFICATE----- is public",
        "the basic idea is simple",
    ];

    #[test]
    fn the_leak_corpus_is_masked() {
        for (text, secret) in LEAKS {
            let masked = redact(text);
            assert!(!masked.contains(secret), "{text:?} -> {masked:?}");
            assert!(has_secret(text), "{text:?}");
            assert_eq!(exposure(text), Exposure::Secret, "{text:?}");
        }
        assert!(redact(LEAKS[16].0).ends_with("\nafter"));
    }

    #[test]
    fn plain_prose_is_left_alone() {
        for text in CLEAN {
            assert_eq!(redact(text), *text);
        }
    }
}
