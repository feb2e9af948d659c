//! Digests of decision inputs, for the decision log.
//!
//! A decision record stores a BLAKE3 digest of its input rather than the
//! input itself: the log stays small, and two decisions over the same input
//! can be matched. The digest feeds every field in order, each
//! length-prefixed or terminated, so distinct inputs cannot collide by
//! shifting bytes between fields. It is stable for a given WIT version.
//!
//! A host given a digest key ([`HostConfig::digest_key`](crate::HostConfig))
//! logs the digest keyed with it, so that the log cannot be used to confirm
//! a guess at an input (a turn, a secret in it) without that key.

use std::cell::RefCell;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The BLAKE3 digest of a decision's input.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct InputsDigest([u8; 32]);

impl InputsDigest {
    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// This digest keyed with `key` (BLAKE3 in keyed mode over the 32
    /// bytes): what a durable log stores, so that a guessed input cannot be
    /// confirmed from the log by anyone who does not hold the key.
    pub(crate) fn keyed(self, key: &[u8; 32]) -> InputsDigest {
        InputsDigest(*blake3::keyed_hash(key, &self.0).as_bytes())
    }

    /// A digest read back from a log.
    pub(crate) fn from_bytes(bytes: [u8; 32]) -> InputsDigest {
        InputsDigest(bytes)
    }

    /// Digests a value that knows how to feed itself.
    ///
    /// The value is fed into a reused buffer and hashed in one call: the
    /// same digest as feeding a `blake3::Hasher` field by field (BLAKE3
    /// does not depend on how its input is split), at a fraction of the
    /// cost for the many small fields a decision input has.
    pub(crate) fn of(value: &impl Feed) -> InputsDigest {
        thread_local! {
            static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        BUFFER.with(|buffer| match buffer.try_borrow_mut() {
            Ok(mut buffer) => {
                let mut h = Digester(std::mem::take(&mut *buffer));
                h.0.clear();
                value.feed(&mut h);
                let digest = InputsDigest(*blake3::hash(&h.0).as_bytes());
                // Keep the buffer unless one large input grew it.
                if h.0.capacity() <= MAX_KEPT_BUFFER {
                    *buffer = h.0;
                }
                digest
            }
            // Only if a `feed` digested something itself: a fresh buffer.
            Err(_) => {
                let mut h = Digester(Vec::new());
                value.feed(&mut h);
                InputsDigest(*blake3::hash(&h.0).as_bytes())
            }
        })
    }
}

impl fmt::Display for InputsDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for InputsDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InputsDigest({self})")
    }
}

impl Serialize for InputsDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for InputsDigest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let hash = blake3::Hash::from_hex(&text).map_err(serde::de::Error::custom)?;
        Ok(InputsDigest(*hash.as_bytes()))
    }
}

/// The largest digest buffer a thread keeps between digests.
const MAX_KEPT_BUFFER: usize = 64 * 1024;

/// Collects the bytes a [`Feed`] value writes, to be hashed in one call.
pub(crate) struct Digester(Vec<u8>);

impl Digester {
    /// Appends `bytes` to what will be hashed.
    #[inline]
    pub(crate) fn update(&mut self, bytes: &[u8]) -> &mut Digester {
        self.0.extend_from_slice(bytes);
        self
    }

    /// Appends a fixed number of bytes (a length, a tag, a number): known
    /// at compile time, so the copy is a store, not a call to `memcpy`
    /// (most of a decision input's fields are these).
    #[inline(always)]
    pub(crate) fn put<const N: usize>(&mut self, bytes: [u8; N]) {
        self.0.extend_from_slice(&bytes);
    }
}

/// A value that can feed itself, unambiguously, into a digest.
pub(crate) trait Feed {
    fn feed(&self, h: &mut Digester);
}

impl Feed for str {
    #[inline]
    fn feed(&self, h: &mut Digester) {
        h.put((self.len() as u64).to_le_bytes());
        h.update(self.as_bytes());
    }
}

impl Feed for String {
    #[inline]
    fn feed(&self, h: &mut Digester) {
        self.as_str().feed(h);
    }
}

impl Feed for u64 {
    #[inline]
    fn feed(&self, h: &mut Digester) {
        h.put(self.to_le_bytes());
    }
}

impl Feed for u32 {
    #[inline]
    fn feed(&self, h: &mut Digester) {
        h.put(self.to_le_bytes());
    }
}

impl Feed for u8 {
    #[inline]
    fn feed(&self, h: &mut Digester) {
        h.put([*self]);
    }
}

impl Feed for f32 {
    #[inline]
    fn feed(&self, h: &mut Digester) {
        h.put(self.to_bits().to_le_bytes());
    }
}

impl Feed for bool {
    #[inline]
    fn feed(&self, h: &mut Digester) {
        h.put([u8::from(*self)]);
    }
}

impl<T: Feed> Feed for Option<T> {
    #[inline]
    fn feed(&self, h: &mut Digester) {
        match self {
            None => h.put([0]),
            Some(v) => {
                h.put([1]);
                v.feed(h);
            }
        }
    }
}

impl<T: Feed> Feed for Vec<T> {
    fn feed(&self, h: &mut Digester) {
        h.put((self.len() as u64).to_le_bytes());
        for v in self {
            v.feed(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifting_bytes_between_fields_changes_the_digest() {
        let a = InputsDigest::of(&vec!["ab".to_owned(), "c".to_owned()]);
        let b = InputsDigest::of(&vec!["a".to_owned(), "bc".to_owned()]);
        assert_ne!(a, b);
    }

    /// Digests are stored in decision logs and compared across builds:
    /// they must not change when the way they are computed does.
    #[test]
    fn digests_are_stable_across_builds() {
        use crate::{
            Action, ActivityType, ContentReference, Destination, GateContext, ObjectKind,
            PolicyRequest, PrincipalKind, PrincipalRef, Sensitivity, SignificanceInput, TurnRole,
            TurnView,
        };
        let mut request = PolicyRequest::new(
            ContentReference {
                kind: ObjectKind::Entry,
                id: "e-0001".into(),
                work_context_id: Some("wc-1".into()),
                session_id: Some("s-1".into()),
                sensitivity: Sensitivity::Personal,
                low_trust: true,
            },
            Action::RenderInline,
            Some(Destination::LocalModel),
        );
        request.principal_ref = Some(PrincipalRef {
            kind: PrincipalKind::Agent,
            id: "agent-7".into(),
        });
        request.surface_ref = Some("http:/v1/assemble".into());
        request.requesting_work_context_id = Some("wc-2".into());
        let mut turn = TurnView::new("s-1", 42, TurnRole::User, &"we decided ".repeat(200));
        turn.work_context_id = Some("wc-1".into());
        turn.entity_mentions = vec!["sled".into()];
        let gate = SignificanceInput {
            turn,
            context: GateContext {
                activity_type: ActivityType::Drafting,
                has_active_work_context: true,
                ..GateContext::default()
            },
        };
        assert_eq!(
            InputsDigest::of(&request).to_string(),
            "871fd6a2f54085c89fd4dee650f5661be0ca16897d21346c566d33fdd570a1b6"
        );
        assert_eq!(
            InputsDigest::of(&gate).to_string(),
            "8a024e4623d66b3d54ebe88c859eb110b78830f3b8c2a3e5733d5d0f6a5c51ea"
        );
    }

    #[test]
    fn digest_round_trips_through_serde() {
        let d = InputsDigest::of(&"turn".to_owned());
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<InputsDigest>(&json).unwrap(), d);
        assert_eq!(json.len(), 64 + 2);
    }
}
