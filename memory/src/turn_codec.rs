//! How a turn is stored: a version byte, then a compact binary record.
//!
//! Version 2 is `0x02` followed by the postcard encoding of [`StoredTurnV2`]:
//! the work context, sequence number, role, content, tool-call id, time
//! (seconds and nanoseconds), the content's blake3 hash as 32 bytes, and the
//! idempotency key the turn was appended with. The workspace and session are
//! not stored: the workspace is the store the record is in and the session is
//! the first part of its key. Version 1 is the same without the idempotency
//! key; turns written before version 1 are JSON objects (their first byte is
//! `{`). Both still read.
//!
//! ```text
//! 02 | work_context | seq (varint) | role (u8) | content | tool_call_id? | secs | nanos | hash[32] | idempotency_key?
//! ```
//!
//! The record is the key's only record: an append writes one insert, and
//! the set of a session's keys is read back from its turns when first
//! needed ([`crate::idempotency`]). Stores written before kept an entry per
//! key beside the turn as well; those entries are still read.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::record::{Role, Turn, session_of_turn_key};

/// The version byte of the binary turn record without an idempotency key.
const V1: u8 = 1;
/// The version byte of the binary turn record that carries one.
const V2: u8 = 2;

/// The binary record (borrowed on both sides: no copy on encode, and a
/// decode that only wants the head allocates nothing).
#[derive(Serialize, Deserialize)]
struct StoredTurn<'a> {
    work_context: &'a str,
    seq: u64,
    role: u8,
    content: &'a str,
    tool_call_id: Option<&'a str>,
    secs: i64,
    nanos: u32,
    hash: [u8; 32],
}

/// Version 2: version 1's fields, then the idempotency key (postcard writes
/// a nested struct's fields inline, so the prefix is a version-1 body).
#[derive(Serialize, Deserialize)]
struct StoredTurnV2<'a> {
    #[serde(borrow)]
    turn: StoredTurn<'a>,
    idempotency_key: Option<&'a str>,
}

fn role_code(role: Role) -> u8 {
    match role {
        Role::User => 0,
        Role::Assistant => 1,
        Role::Tool => 2,
        Role::System => 3,
    }
}

fn role_of(code: u8) -> Option<Role> {
    Some(match code {
        0 => Role::User,
        1 => Role::Assistant,
        2 => Role::Tool,
        3 => Role::System,
        _ => return None,
    })
}

fn corrupt(key: &[u8], reason: impl Into<String>) -> MemoryError {
    MemoryError::Corrupt {
        what: "turn",
        key: String::from_utf8_lossy(key).into_owned(),
        reason: reason.into(),
    }
}

/// Encodes a turn, appended with `idempotency_key`, as a version-2 record.
/// The content hash must be the hex blake3 hash
/// [`crate::record::content_hash`] makes.
pub(crate) fn encode_turn(turn: &Turn, idempotency_key: Option<&str>) -> Result<Vec<u8>> {
    let outgoing = |reason: String| MemoryError::Corrupt {
        what: "outgoing turn",
        key: format!("{}/{}", turn.session, turn.seq),
        reason,
    };
    let hash = blake3::Hash::from_hex(&turn.content_hash).map_err(|_| {
        outgoing(format!(
            "content hash {:?} is not 64 hex digits",
            turn.content_hash
        ))
    })?;
    let record = StoredTurnV2 {
        turn: StoredTurn {
            work_context: &turn.work_context,
            seq: turn.seq,
            role: role_code(turn.role),
            content: &turn.content,
            tool_call_id: turn.tool_call_id.as_deref(),
            secs: turn.timestamp.timestamp(),
            nanos: turn.timestamp.timestamp_subsec_nanos(),
            hash: *hash.as_bytes(),
        },
        idempotency_key,
    };
    let key_len = idempotency_key.map_or(0, str::len);
    let mut out =
        Vec::with_capacity(1 + turn.work_context.len() + turn.content.len() + key_len + 64);
    out.push(V2);
    postcard::to_extend(&record, out).map_err(|e| outgoing(e.to_string()))
}

/// The record's binary body (a version-1 record reads with no idempotency
/// key), or `None` for a JSON record.
fn binary<'a>(key: &[u8], value: &'a [u8]) -> Result<Option<StoredTurnV2<'a>>> {
    let damaged = |e: postcard::Error| corrupt(key, e.to_string());
    match value.first() {
        Some(&V2) => postcard::from_bytes(&value[1..]).map(Some).map_err(damaged),
        Some(&V1) => postcard::from_bytes(&value[1..])
            .map(|turn| {
                Some(StoredTurnV2 {
                    turn,
                    idempotency_key: None,
                })
            })
            .map_err(damaged),
        Some(b'{') => Ok(None),
        Some(b) => Err(corrupt(key, format!("unknown turn record version {b}"))),
        None => Err(corrupt(key, "empty turn record")),
    }
}

fn time_of(key: &[u8], r: &StoredTurn<'_>) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp(r.secs, r.nanos)
        .ok_or_else(|| corrupt(key, format!("time {}.{} out of range", r.secs, r.nanos)))
}

/// Decodes a stored turn of `workspace` at `key` (the session id, a NUL,
/// the sequence number), whichever version it was written in.
pub(crate) fn decode_turn(workspace: &str, key: &[u8], value: &[u8]) -> Result<Turn> {
    let Some(StoredTurnV2 { turn: r, .. }) = binary(key, value)? else {
        return crate::memory::decode("turn", key, value);
    };
    let session = session_of_turn_key(key)
        .and_then(|id| std::str::from_utf8(id).ok())
        .ok_or_else(|| corrupt(key, "the key does not start with a session id"))?;
    Ok(Turn {
        workspace: workspace.to_owned(),
        session: session.to_owned(),
        work_context: r.work_context.to_owned(),
        seq: r.seq,
        role: role_of(r.role).ok_or_else(|| corrupt(key, format!("unknown role {}", r.role)))?,
        content: r.content.to_owned(),
        tool_call_id: r.tool_call_id.map(str::to_owned),
        timestamp: time_of(key, &r)?,
        content_hash: blake3::Hash::from_bytes(r.hash).to_hex().to_string(),
    })
}

/// A stored turn's sequence number and time, without copying its text.
pub(crate) fn decode_turn_head(key: &[u8], value: &[u8]) -> Result<(u64, DateTime<Utc>)> {
    match binary(key, value)? {
        Some(StoredTurnV2 { turn: r, .. }) => Ok((r.seq, time_of(key, &r)?)),
        None => {
            #[derive(Deserialize)]
            struct Head {
                seq: u64,
                timestamp: DateTime<Utc>,
            }
            let h: Head = crate::memory::decode("turn", key, value)?;
            Ok((h.seq, h.timestamp))
        }
    }
}

/// The idempotency key the stored turn at `key` was appended with (records
/// before version 2 carry none).
pub(crate) fn stored_idempotency_key<'a>(key: &[u8], value: &'a [u8]) -> Result<Option<&'a str>> {
    Ok(binary(key, value)?.and_then(|r| r.idempotency_key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{content_hash, turn_key};
    use proptest::prelude::*;

    fn turn(content: &str, tool: Option<&str>, role: Role, secs: i64, nanos: u32) -> Turn {
        Turn {
            workspace: "ws".into(),
            session: "s-1".into(),
            work_context: "wc".into(),
            seq: 7,
            role,
            content: content.into(),
            tool_call_id: tool.map(Into::into),
            timestamp: DateTime::from_timestamp(secs, nanos).unwrap(),
            content_hash: content_hash(content),
        }
    }

    fn roles() -> impl Strategy<Value = Role> {
        prop_oneof![
            Just(Role::User),
            Just(Role::Assistant),
            Just(Role::Tool),
            Just(Role::System)
        ]
    }

    /// A version-1 record of `t`, as the binary layout before idempotency
    /// keys wrote it.
    fn encode_v1(t: &Turn) -> Vec<u8> {
        let v2 = encode_turn(t, None).unwrap();
        let decoded: StoredTurnV2<'_> = postcard::from_bytes(&v2[1..]).unwrap();
        postcard::to_extend(&decoded.turn, vec![V1]).unwrap()
    }

    proptest! {
        /// Any turn reads back as written, from every version, and a
        /// version-2 record names the key it was appended with.
        #[test]
        fn a_turn_reads_back_as_written(
            content in ".{0,200}",
            tool in proptest::option::of("[a-z0-9_-]{1,20}"),
            idempotency in proptest::option::of("[ -~]{1,40}"),
            role in roles(),
            secs in 0i64..4_102_444_800,
            nanos in 0u32..1_000_000_000,
        ) {
            let t = turn(&content, tool.as_deref(), role, secs, nanos);
            let key = turn_key(&t.session, t.seq);
            let binary = encode_turn(&t, idempotency.as_deref()).unwrap();
            prop_assert_eq!(binary[0], V2);
            prop_assert_eq!(&decode_turn("ws", &key, &binary).unwrap(), &t);
            prop_assert_eq!(decode_turn_head(&key, &binary).unwrap(), (t.seq, t.timestamp));
            if let Some(k) = &idempotency {
                prop_assert_eq!(stored_idempotency_key(&key, &binary).unwrap(), Some(k.as_str()));
            }
            let v1 = encode_v1(&t);
            prop_assert_eq!(&decode_turn("ws", &key, &v1).unwrap(), &t);
            prop_assert_eq!(decode_turn_head(&key, &v1).unwrap(), (t.seq, t.timestamp));
            prop_assert_eq!(stored_idempotency_key(&key, &v1).unwrap(), None);
            let json = crate::memory::encode(&t).unwrap();
            prop_assert_eq!(&decode_turn("ws", &key, &json).unwrap(), &t);
            prop_assert_eq!(decode_turn_head(&key, &json).unwrap(), (t.seq, t.timestamp));
            prop_assert_eq!(stored_idempotency_key(&key, &json).unwrap(), None);
            prop_assert!(binary.len() < json.len());
        }

        /// Damaged bytes give an error naming the key, never a panic.
        #[test]
        fn damaged_records_are_errors(cut in 1usize..60, flip in 0usize..60) {
            let t = turn("hello there", Some("call_1"), Role::Tool, 1_700_000_000, 5);
            let key = turn_key(&t.session, t.seq);
            let mut b = encode_turn(&t, Some("retry-1")).unwrap();
            let at = flip % b.len();
            b[at] ^= 0xff;
            b.truncate(b.len().saturating_sub(cut % b.len()));
            if let Err(e) = decode_turn("ws", &key, &b) {
                prop_assert!(e.to_string().contains("s-1"), "{}", e);
            }
        }
    }

    #[test]
    fn unknown_versions_and_empty_records_are_errors() {
        let key = turn_key("s", 0);
        for bad in [&[][..], &[9u8, 1, 2][..]] {
            let e = decode_turn("ws", &key, bad).unwrap_err();
            assert!(
                matches!(e, MemoryError::Corrupt { what: "turn", .. }),
                "{e}"
            );
        }
        let mut t = turn("x", None, Role::User, 0, 0);
        t.content_hash = "not hex".into();
        assert!(encode_turn(&t, None).is_err());
    }

    /// A 1 MB turn and the largest sequence number read back.
    #[test]
    fn large_turns_read_back() {
        let mut t = turn(&"x".repeat(1 << 20), None, Role::Assistant, 0, 0);
        t.seq = u64::MAX;
        let key = turn_key(&t.session, t.seq);
        let bytes = encode_turn(&t, Some(&"k".repeat(256))).unwrap();
        assert_eq!(decode_turn("ws", &key, &bytes).unwrap(), t);
    }
}
