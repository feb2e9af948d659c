//! Digests of decision inputs, for the decision log.
//!
//! A decision record stores a BLAKE3 digest of its input rather than the
//! input itself: the log stays small, and two decisions over the same input
//! can be matched. The digest feeds every field in order, each
//! length-prefixed or terminated, so distinct inputs cannot collide by
//! shifting bytes between fields. It is stable for a given WIT version.

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

    /// A digest read back from a log.
    pub(crate) fn from_bytes(bytes: [u8; 32]) -> InputsDigest {
        InputsDigest(bytes)
    }

    /// Digests a value that knows how to feed itself.
    pub(crate) fn of(value: &impl Feed) -> InputsDigest {
        let mut h = blake3::Hasher::new();
        value.feed(&mut h);
        InputsDigest(*h.finalize().as_bytes())
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

/// A value that can feed itself, unambiguously, into a hasher.
pub(crate) trait Feed {
    fn feed(&self, h: &mut blake3::Hasher);
}

impl Feed for str {
    fn feed(&self, h: &mut blake3::Hasher) {
        h.update(&(self.len() as u64).to_le_bytes());
        h.update(self.as_bytes());
    }
}

impl Feed for String {
    fn feed(&self, h: &mut blake3::Hasher) {
        self.as_str().feed(h);
    }
}

impl Feed for u64 {
    fn feed(&self, h: &mut blake3::Hasher) {
        h.update(&self.to_le_bytes());
    }
}

impl Feed for u32 {
    fn feed(&self, h: &mut blake3::Hasher) {
        h.update(&self.to_le_bytes());
    }
}

impl Feed for u8 {
    fn feed(&self, h: &mut blake3::Hasher) {
        h.update(&[*self]);
    }
}

impl Feed for f32 {
    fn feed(&self, h: &mut blake3::Hasher) {
        h.update(&self.to_bits().to_le_bytes());
    }
}

impl Feed for bool {
    fn feed(&self, h: &mut blake3::Hasher) {
        h.update(&[u8::from(*self)]);
    }
}

impl<T: Feed> Feed for Option<T> {
    fn feed(&self, h: &mut blake3::Hasher) {
        match self {
            None => {
                h.update(&[0]);
            }
            Some(v) => {
                h.update(&[1]);
                v.feed(h);
            }
        }
    }
}

impl<T: Feed> Feed for Vec<T> {
    fn feed(&self, h: &mut blake3::Hasher) {
        h.update(&(self.len() as u64).to_le_bytes());
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

    #[test]
    fn digest_round_trips_through_serde() {
        let d = InputsDigest::of(&"turn".to_owned());
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<InputsDigest>(&json).unwrap(), d);
        assert_eq!(json.len(), 64 + 2);
    }
}
