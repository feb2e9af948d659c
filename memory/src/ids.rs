//! Validation of the identifiers cairn accepts from outside.
//!
//! Ids are opaque strings chosen by the host (workspace, session, work context,
//! idempotency keys, tool-call ids) or by cairn (entry ids, ULIDs). They share
//! one rule set so that they can be used as storage key components safely:
//! 1 to 128 bytes of ASCII letters, digits and `. _ : @ / + = -`. In particular
//! no NUL byte, which the storage layout uses as a separator.

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};

use crate::error::{MemoryError, Result};

/// Longest id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 128;

/// Longest subject slug accepted, in bytes.
pub const MAX_SLUG_BYTES: usize = 64;

/// Checks an id and returns it unchanged.
///
/// ```
/// use cairn_memory::ids::validate_id;
/// assert!(validate_id("session", "s-1").is_ok());
/// assert!(validate_id("session", "").is_err());
/// assert!(validate_id("session", "a b").is_err());
/// ```
pub fn validate_id<'a>(what: &'static str, value: &'a str) -> Result<&'a str> {
    let refuse = |reason: &str| MemoryError::InvalidId {
        what,
        value: truncate_for_display(value),
        reason: reason.to_owned(),
    };
    if value.is_empty() {
        return Err(refuse("must not be empty"));
    }
    if value.len() > MAX_ID_BYTES {
        return Err(refuse(&format!(
            "is {} bytes, the limit is {MAX_ID_BYTES}",
            value.len()
        )));
    }
    if let Some(bad) = value.chars().find(|c| !is_id_char(*c)) {
        return Err(refuse(&format!(
            "character {bad:?} is not allowed (use letters, digits and . _ : @ / + = -)"
        )));
    }
    Ok(value)
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '@' | '/' | '+' | '=' | '-')
}

/// Checks a subject slug: lowercase kebab-case (`auth-migration`), at most
/// [`MAX_SLUG_BYTES`] bytes.
///
/// ```
/// use cairn_memory::ids::validate_slug;
/// assert!(validate_slug("auth-migration").is_ok());
/// assert!(validate_slug("Auth_Migration").is_err());
/// assert!(validate_slug("a--b").is_err());
/// ```
pub fn validate_slug(slug: &str) -> Result<&str> {
    let refuse = |reason: &str| MemoryError::InvalidSlug {
        slug: truncate_for_display(slug),
        reason: reason.to_owned(),
    };
    if slug.is_empty() {
        return Err(refuse("must not be empty"));
    }
    if slug.len() > MAX_SLUG_BYTES {
        return Err(refuse(&format!("longer than {MAX_SLUG_BYTES} bytes")));
    }
    let parts_ok = slug.split('-').all(|part| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    });
    if !parts_ok {
        return Err(refuse(
            "must be lowercase kebab-case: letters a-z and digits in words joined by single hyphens",
        ));
    }
    Ok(slug)
}

/// The earliest time cairn accepts from outside: 0000-01-01T00:00:00Z.
///
/// Times from outside (a turn's or entry's timestamp, an assembly's `at`,
/// a search's time range) must be writable in RFC 3339 (a four-digit year).
/// Every window cairn adds to or takes from a time is at most a few
/// centuries (settings are capped at 100 years), so arithmetic on an
/// accepted time never leaves chrono's range (±262,143 years).
pub const EARLIEST_TIME: DateTime<Utc> = match NaiveDate::from_ymd_opt(0, 1, 1) {
    Some(day) => day.and_time(NaiveTime::MIN).and_utc(),
    None => DateTime::<Utc>::MIN_UTC,
};

/// The latest time cairn accepts from outside: 9999-12-31T23:59:59.999999999Z
/// (see [`EARLIEST_TIME`]).
pub const LATEST_TIME: DateTime<Utc> = match NaiveDate::from_ymd_opt(9999, 12, 31) {
    Some(day) => match day.and_hms_nano_opt(23, 59, 59, 999_999_999) {
        Some(at) => at.and_utc(),
        None => DateTime::<Utc>::MAX_UTC,
    },
    None => DateTime::<Utc>::MAX_UTC,
};

/// Checks a time that came from outside (see [`EARLIEST_TIME`]) and returns
/// it unchanged; the error names `what`.
///
/// ```
/// use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
/// use cairn_memory::ids::validate_time;
/// let ok: DateTime<Utc> = "2026-03-01T09:00:00Z".parse()?;
/// assert!(validate_time("turn timestamp", ok).is_ok());
/// let far: DateTime<Utc> = "+262142-12-31T23:59:59Z".parse()?;
/// let err = validate_time("turn timestamp", far).unwrap_err();
/// assert!(err.to_string().contains("turn timestamp"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn validate_time(what: &'static str, at: DateTime<Utc>) -> Result<DateTime<Utc>> {
    if (EARLIEST_TIME..=LATEST_TIME).contains(&at) {
        return Ok(at);
    }
    Err(MemoryError::Invalid {
        what,
        reason: format!(
            "{} is outside the years 0000 to 9999 that cairn accepts",
            at.to_rfc3339()
        ),
    })
}

/// Title Case display name for a slug (`auth-migration` → `Auth Migration`).
pub fn display_for_slug(slug: &str) -> String {
    slug.split('-')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Shortens a value for an error message so that a 10 MB id does not end up in a log line.
pub(crate) fn truncate_for_display(value: &str) -> String {
    const KEEP: usize = 64;
    if value.len() <= KEEP {
        return value.to_owned();
    }
    format!("{}…", crate::text::head_bytes(value, KEEP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(validate_id("x", &"a".repeat(MAX_ID_BYTES)).is_ok());
        let err = validate_id("session", &"a".repeat(MAX_ID_BYTES + 1)).unwrap_err();
        assert!(err.to_string().contains("129 bytes"), "{err}");
        assert!(validate_id("x", "a\0b").is_err());
        assert!(validate_id("x", "é").is_err());
        assert!(validate_id("x", "agent:main/sub-1").is_ok());
    }

    #[test]
    fn slugs() {
        for ok in ["a", "auth-migration", "whisper-stt", "q3-2026"] {
            assert!(validate_slug(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a--b", "a b"] {
            assert!(validate_slug(bad).is_err(), "{bad}");
        }
        assert_eq!(display_for_slug("auth-migration"), "Auth Migration");
    }
}
