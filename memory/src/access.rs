//! Access tokens: bearer secrets that open one workspace, for reading or for
//! reading and writing, kept in the store-wide space as keyed hashes only.
//!
//! A token reads `cairn_<id>_<secret>`: the id (public, 12 hex digits) names
//! the record, the secret (64 hex digits, 256 random bits) is shown once when
//! the token is made and never stored: the record holds
//! `blake3::keyed_hash(install key → "access token", secret)`. A copy of the
//! store therefore yields no usable token, and [`Memory::verify_token`]
//! compares digests in constant time.
//!
//! ```
//! use std::sync::Arc;
//! use cairn_memory::{Memory, MemoryConfig, SystemClock, access::TokenScope};
//!
//! let dir = tempfile::tempdir()?;
//! let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
//! let (made, secret) = memory.create_token("acme", TokenScope::Read, Some("dashboard"))?;
//! assert_eq!(memory.verify_token(&secret)?.map(|t| t.id), Some(made.id.clone()));
//! memory.revoke_token(&made.id)?;
//! assert!(memory.verify_token(&secret)?.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::ids::validate_id;
use crate::memory::Memory;

/// What a token may do in its workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TokenScope {
    /// Reads only: transcripts, entries, search, assembly, briefing.
    Read,
    /// Reads and writes: ingest, entries, capture, forget of parts.
    Write,
}

impl TokenScope {
    /// `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Write => "write",
        }
    }
}

impl std::str::FromStr for TokenScope {
    type Err = MemoryError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "read" => Ok(TokenScope::Read),
            "write" => Ok(TokenScope::Write),
            other => Err(MemoryError::Invalid {
                what: "token scope",
                reason: format!("{other:?} is neither `read` nor `write`"),
            }),
        }
    }
}

/// A stored access token, as listed: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AccessToken {
    /// Public id (12 hex digits); the part of the token after `cairn_`.
    pub id: String,
    /// The one workspace it opens.
    pub workspace: String,
    /// Read, or read and write.
    pub scope: TokenScope,
    /// A free label (who or what holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// When it was made.
    pub created_at: DateTime<Utc>,
}

/// The stored record: the listing plus the secret's keyed hash.
#[derive(Serialize, Deserialize)]
struct Stored {
    token: AccessToken,
    digest: String,
}

/// Where token records live in the store-wide space.
const PREFIX: &str = "access-token/";
/// Longest label accepted.
const MAX_LABEL: usize = 200;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_hex(n: usize) -> Result<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| MemoryError::Invalid {
        what: "access token",
        reason: format!("no randomness from the operating system: {e}"),
    })?;
    Ok(hex(&bytes))
}

/// A stored record, or `Corrupt` naming its key.
fn decode(key: &[u8], bytes: &[u8]) -> Result<Stored> {
    serde_json::from_slice(bytes).map_err(|e| MemoryError::Corrupt {
        what: "access token",
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

/// Splits `cairn_<id>_<secret>`; `None` for anything else.
fn parse(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix("cairn_")?;
    let (id, secret) = rest.split_once('_')?;
    let hexy = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hexy(id, 12) && hexy(secret, 64)).then_some((id, secret))
}

impl Memory {
    fn token_digest(&self, secret: &str) -> String {
        let key = self.derive_key("cairn access token v1");
        hex(blake3::keyed_hash(&key, secret.as_bytes()).as_bytes())
    }

    fn stored_token(&self, id: &str) -> Result<Option<Stored>> {
        let key = format!("{PREFIX}{id}");
        let Some(bytes) = self.shared.store.meta_get(key.as_bytes())? else {
            return Ok(None);
        };
        decode(key.as_bytes(), &bytes).map(Some)
    }

    /// Makes a token opening `workspace` with `scope`; returns its listing
    /// and the token itself, which is shown this once and never stored.
    pub fn create_token(
        &self,
        workspace: &str,
        scope: TokenScope,
        label: Option<&str>,
    ) -> Result<(AccessToken, String)> {
        validate_id("workspace id", workspace)?;
        if let Some(label) = label
            && (label.chars().count() > MAX_LABEL || label.chars().any(char::is_control))
        {
            return Err(MemoryError::Invalid {
                what: "token label",
                reason: format!(
                    "at most {MAX_LABEL} characters and no control characters, got {} characters",
                    label.chars().count()
                ),
            });
        }
        let id = random_hex(6)?;
        let secret = random_hex(32)?;
        let token = AccessToken {
            id: id.clone(),
            workspace: workspace.to_owned(),
            scope,
            label: label.map(str::to_owned),
            created_at: self.shared.clock.now(),
        };
        let stored = Stored {
            token: token.clone(),
            digest: self.token_digest(&secret),
        };
        let bytes = serde_json::to_vec(&stored).map_err(|e| MemoryError::Invalid {
            what: "access token",
            reason: e.to_string(),
        })?;
        self.shared
            .store
            .meta_put(format!("{PREFIX}{id}").as_bytes(), &bytes)?;
        self.shared.store.sync()?;
        Ok((token, format!("cairn_{id}_{secret}")))
    }

    /// Every stored token (never the secrets), oldest first.
    pub fn access_tokens(&self) -> Result<Vec<AccessToken>> {
        let mut all = Vec::new();
        for (key, value) in self.shared.store.meta_scan_prefix(PREFIX.as_bytes())? {
            all.push(decode(&key, &value)?.token);
        }
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(all)
    }

    /// Revokes token `id`: from now on it opens nothing.
    pub fn revoke_token(&self, id: &str) -> Result<AccessToken> {
        let stored = self
            .stored_token(id)?
            .ok_or_else(|| MemoryError::TokenNotFound { id: id.to_owned() })?;
        self.shared
            .store
            .meta_delete(format!("{PREFIX}{id}").as_bytes())?;
        self.shared.store.sync()?;
        Ok(stored.token)
    }

    /// The token `presented` is, if it is a live one. Anything malformed,
    /// unknown or revoked is `None`; the secret is compared by keyed hash,
    /// in constant time.
    pub fn verify_token(&self, presented: &str) -> Result<Option<AccessToken>> {
        let Some((id, secret)) = parse(presented) else {
            return Ok(None);
        };
        let Some(stored) = self.stored_token(id)? else {
            return Ok(None);
        };
        let digest = self.token_digest(secret);
        let same = digest.len() == stored.digest.len()
            && digest
                .bytes()
                .zip(stored.digest.bytes())
                .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                == 0;
        Ok(same.then_some(stored.token))
    }

    /// Deletes every token that opens `workspace` (not yet durable: the
    /// caller syncs), for the erasure of that workspace: a token of the
    /// erased tenant must not open a new workspace of the same name.
    /// Returns how many were revoked.
    pub(crate) fn revoke_workspace_tokens(&self, workspace: &str) -> Result<usize> {
        let mut revoked = 0;
        for (key, value) in self.shared.store.meta_scan_prefix(PREFIX.as_bytes())? {
            if decode(&key, &value)?.token.workspace == workspace {
                self.shared.store.meta_delete(&key)?;
                revoked += 1;
            }
        }
        Ok(revoked)
    }

    /// Whether any token is stored.
    pub fn has_tokens(&self) -> Result<bool> {
        Ok(!self
            .shared
            .store
            .meta_scan_prefix(PREFIX.as_bytes())?
            .is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryConfig, SystemClock};
    use std::sync::Arc;

    fn open(dir: &std::path::Path) -> Memory {
        crate::testing::memory(dir, MemoryConfig::default(), Arc::new(SystemClock)).unwrap()
    }

    #[test]
    fn tokens_are_stored_as_keyed_hashes_and_revocable() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        assert!(!memory.has_tokens().unwrap());
        let (made, secret) = memory
            .create_token("acme", TokenScope::Write, Some("gateway"))
            .unwrap();
        assert!(memory.has_tokens().unwrap());
        assert_eq!(memory.verify_token(&secret).unwrap(), Some(made.clone()));
        // A changed secret, another shape, an unknown id: nothing.
        let mut wrong = secret.clone();
        let last = if wrong.ends_with('0') { "1" } else { "0" };
        wrong.replace_range(wrong.len() - 1.., last);
        for bad in [wrong.as_str(), "", "cairn_", "Bearer x", &secret[..20]] {
            assert_eq!(memory.verify_token(bad).unwrap(), None, "{bad}");
        }
        // The secret is not in the store: only its keyed hash.
        let raw = memory
            .shared
            .store
            .meta_scan_prefix(PREFIX.as_bytes())
            .unwrap();
        let secret_part = secret.rsplit('_').next().unwrap();
        assert!(
            !String::from_utf8_lossy(&raw[0].1).contains(secret_part),
            "the secret is stored in clear"
        );
        assert_eq!(memory.access_tokens().unwrap(), vec![made.clone()]);
        memory.revoke_token(&made.id).unwrap();
        assert_eq!(memory.verify_token(&secret).unwrap(), None);
        assert!(memory.access_tokens().unwrap().is_empty());
        let again = memory.revoke_token(&made.id).unwrap_err();
        assert!(again.is_not_found(), "{again}");
        drop(memory);
        // Reopened: still revoked; a token made before survives reopening.
        let memory = open(dir.path());
        let (kept, secret) = memory.create_token("acme", TokenScope::Read, None).unwrap();
        drop(memory);
        let memory = open(dir.path());
        assert_eq!(memory.verify_token(&secret).unwrap(), Some(kept));
    }

    #[test]
    fn bad_token_requests_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        assert!(memory.create_token("", TokenScope::Read, None).is_err());
        assert!(memory.create_token("a b", TokenScope::Read, None).is_err());
        let long = "x".repeat(MAX_LABEL + 1);
        assert!(
            memory
                .create_token("acme", TokenScope::Read, Some(&long))
                .is_err()
        );
        assert!(!memory.has_tokens().unwrap());
        assert!("admin".parse::<TokenScope>().is_err());
        assert_eq!("read".parse::<TokenScope>().unwrap(), TokenScope::Read);
    }
}
