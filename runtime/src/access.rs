//! Access tokens of `cairn serve`: bearer secrets that open one workspace,
//! for reading or for reading and writing, kept in the store-wide space as
//! keyed hashes only. The server's concern, not the memory core's: this
//! module works on the store ([`cairn_memory::store`]) and the memory's
//! install key, and the core knows of it only as something erased with a
//! workspace ([`ErasedWithWorkspace`]).
//!
//! A token reads `cairn_<id>_<secret>`: the id (public, 12 hex digits) names
//! the record, the secret (64 hex digits, 256 random bits) is shown once when
//! the token is made and never stored: the record holds
//! `blake3::keyed_hash(install key → "access token", secret)`. A copy of the
//! store therefore yields no usable token, and [`Access::verify`]
//! compares digests in constant time.
//!
//! **Checked from memory.** Every record is read once, into a cache shared
//! by every handle on this [`Cairn`](crate::Cairn) (one [`Access`] per
//! opened store); [`Access::verify`] then answers from the cache alone,
//! without a store read, so a stream of made-up tokens costs a hash each and
//! never a database round trip. This process's own changes (make, revoke,
//! erase a workspace) update the cache as they are written; changes another
//! process made to a shared store (the CLI, another node of a cluster) are
//! read by [`Access::reload`], which the server calls periodically.
//!
//! **Bound to a workspace's incarnation.** A workspace name can be erased
//! and used again; a token made for the first tenant must not open the
//! second. Each name has an incarnation number (how many times a workspace
//! of that name was erased, kept under a keyed hash of the name, like a
//! tombstone's target), and a token records the one it was made in. The
//! erasure of a workspace revokes its tokens and moves the incarnation on
//! ([`Access::revoke_workspace`], which the core's erasure calls in its
//! durable step as an [`ErasedWithWorkspace`]); a token of an earlier
//! incarnation opens nothing, whatever record survives.
//!
//! The facade's token methods ([`Cairn::create_token`](crate::Cairn::create_token),
//! [`Cairn::verify_token`](crate::Cairn::verify_token)…) are the way in;
//! their examples show the whole life of a token.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use cairn_memory::forget::ErasedWithWorkspace;
use cairn_memory::ids::validate_id;
use cairn_memory::store::Store;
use cairn_memory::{Memory, MemoryError, Result};

/// What a token may do in its workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

/// The stored record: the listing, the secret's keyed hash, and the
/// incarnation of the workspace it was made in.
#[derive(Clone, Serialize, Deserialize)]
struct Stored {
    token: AccessToken,
    digest: String,
    /// The workspace's incarnation when the token was made (records made
    /// before incarnations existed read 0, the first one's).
    #[serde(default)]
    incarnation: u64,
}

/// Where token records live in the store-wide space.
const PREFIX: &str = "access-token/";
/// Where each workspace name's incarnation lives in the store-wide space,
/// under a keyed hash of the name.
const INCARNATION_PREFIX: &str = "workspace-incarnation/";
/// The key-derivation context of the incarnation records' keys.
const INCARNATION_KEY_CONTEXT: &str = "cairn workspace incarnation v1";
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

/// An incarnation record (a decimal number), or `Corrupt` naming its key.
fn decode_incarnation(key: &[u8], bytes: &[u8]) -> Result<u64> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| MemoryError::Corrupt {
            what: "workspace incarnation",
            key: String::from_utf8_lossy(key).into_owned(),
            reason: "not a decimal number".to_owned(),
        })
}

/// Splits `cairn_<id>_<secret>`; `None` for anything else.
fn parse(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix("cairn_")?;
    let (id, secret) = rest.split_once('_')?;
    let hexy = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hexy(id, 12) && hexy(secret, 64)).then_some((id, secret))
}

/// Compares two digests in time that depends on their lengths only.
fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Every token record and incarnation, as read from the store.
#[derive(Clone, Default)]
struct Tokens {
    /// Records by id.
    by_id: HashMap<String, Stored>,
    /// Incarnations by the key of their record (names never erased: 0,
    /// absent).
    incarnations: HashMap<String, u64>,
}

impl Tokens {
    fn incarnation(&self, key: &str) -> u64 {
        self.incarnations.get(key).copied().unwrap_or(0)
    }
}

/// The tokens this process checks requests against (see the module
/// documentation): `None` until first read.
#[derive(Default)]
struct TokenCache {
    tokens: RwLock<Option<Arc<Tokens>>>,
    /// Held by every change of the token records (its store write and its
    /// cache update) and by every read of them into the cache, so a read
    /// that raced a revocation is never installed over it: a revoked token
    /// must not come back. Checks take only `tokens`' read lock.
    writing: Mutex<()>,
}

impl TokenCache {
    /// Applies `change` to the cached tokens, if they were read.
    fn update(&self, change: impl FnOnce(&mut Tokens)) {
        if let Some(tokens) = self.tokens.write().as_mut() {
            change(Arc::make_mut(tokens));
        }
    }
}

/// The access tokens of one opened store, with the cache requests are
/// checked against: one per [`Cairn`](crate::Cairn), shared by its clones,
/// and handed to the memory it opens as what is erased with a workspace
/// ([`ErasedWithWorkspace`]).
///
/// `store` is the memory's own store (the facade opens it once for both);
/// the `memory` the methods take gives the install key the hashes are keyed
/// with and the clock.
pub(crate) struct Access {
    store: Arc<dyn Store>,
    cache: TokenCache,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("loaded", &self.cache.tokens.read().is_some())
            .finish_non_exhaustive()
    }
}

fn token_digest(memory: &Memory, secret: &str) -> String {
    let key = memory.derive_key("cairn access token v1");
    hex(blake3::keyed_hash(&key, secret.as_bytes()).as_bytes())
}

/// The key of `workspace`'s incarnation record: a keyed hash of the
/// name, so the store-wide space does not list erased names.
fn incarnation_key(memory: &Memory, workspace: &str) -> String {
    let key = memory.derive_key(INCARNATION_KEY_CONTEXT);
    let digest = blake3::keyed_hash(&key, workspace.as_bytes());
    format!("{INCARNATION_PREFIX}{}", &digest.to_hex()[..32])
}

impl Access {
    /// The tokens kept in `store` (read on first use).
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Access {
            store,
            cache: TokenCache::default(),
        }
    }

    /// `workspace`'s incarnation as the store holds it.
    fn stored_incarnation(&self, key: &str) -> Result<u64> {
        match self.store.meta_get(key.as_bytes())? {
            Some(bytes) => decode_incarnation(key.as_bytes(), &bytes),
            None => Ok(0),
        }
    }

    fn stored_token(&self, id: &str) -> Result<Option<Stored>> {
        let key = format!("{PREFIX}{id}");
        let Some(bytes) = self.store.meta_get(key.as_bytes())? else {
            return Ok(None);
        };
        decode(key.as_bytes(), &bytes).map(Some)
    }

    /// Every token record and incarnation, read from the store.
    fn read_tokens(&self) -> Result<Tokens> {
        let store = &self.store;
        let mut tokens = Tokens::default();
        for (key, value) in store.meta_scan_prefix(PREFIX.as_bytes())? {
            let stored = decode(&key, &value)?;
            tokens.by_id.insert(stored.token.id.clone(), stored);
        }
        for (key, value) in store.meta_scan_prefix(INCARNATION_PREFIX.as_bytes())? {
            let incarnation = decode_incarnation(&key, &value)?;
            tokens
                .incarnations
                .insert(String::from_utf8_lossy(&key).into_owned(), incarnation);
        }
        Ok(tokens)
    }

    /// The cached tokens, read from the store first if they never were.
    fn cached_tokens(&self) -> Result<Arc<Tokens>> {
        if let Some(tokens) = self.cache.tokens.read().as_ref() {
            return Ok(tokens.clone());
        }
        let _writing = self.cache.writing.lock();
        let mut slot = self.cache.tokens.write();
        if let Some(tokens) = slot.as_ref() {
            return Ok(tokens.clone());
        }
        let tokens = Arc::new(self.read_tokens()?);
        *slot = Some(tokens.clone());
        Ok(tokens)
    }

    /// Reads every token record again (blocking: one store scan) and keeps
    /// it for [`Access::verify`]: what another process changed in a
    /// shared store (the CLI, another node) counts from then on. On an
    /// error the tokens read before stay in force.
    pub(crate) fn reload(&self) -> Result<()> {
        let _writing = self.cache.writing.lock();
        let tokens = self.read_tokens()?;
        *self.cache.tokens.write() = Some(Arc::new(tokens));
        Ok(())
    }

    /// Makes a token opening `workspace` with `scope`; returns its listing
    /// and the token itself, which is shown this once and never stored.
    /// The token is bound to the workspace's current incarnation: erasing
    /// the workspace revokes it for good.
    pub(crate) fn create(
        &self,
        memory: &Memory,
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
            created_at: memory.clock().now(),
        };
        let _writing = self.cache.writing.lock();
        let stored = Stored {
            token: token.clone(),
            digest: token_digest(memory, &secret),
            incarnation: self.stored_incarnation(&incarnation_key(memory, workspace))?,
        };
        let bytes = serde_json::to_vec(&stored).map_err(|e| MemoryError::Invalid {
            what: "access token",
            reason: e.to_string(),
        })?;
        self.store
            .meta_put(format!("{PREFIX}{id}").as_bytes(), &bytes)?;
        self.store.sync()?;
        self.cache.update(|tokens| {
            tokens.by_id.insert(id.clone(), stored);
        });
        Ok((token, format!("cairn_{id}_{secret}")))
    }

    /// Every stored token (never the secrets), oldest first.
    pub(crate) fn list(&self) -> Result<Vec<AccessToken>> {
        let mut all = Vec::new();
        for (key, value) in self.store.meta_scan_prefix(PREFIX.as_bytes())? {
            all.push(decode(&key, &value)?.token);
        }
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(all)
    }

    /// Revokes token `id`: from now on it opens nothing.
    pub(crate) fn revoke(&self, id: &str) -> Result<AccessToken> {
        let _writing = self.cache.writing.lock();
        let stored = self
            .stored_token(id)?
            .ok_or_else(|| MemoryError::TokenNotFound { id: id.to_owned() })?;
        // Out of the cache first: until the delete is durable the token is
        // refused here already (failing closed).
        self.cache.update(|tokens| {
            tokens.by_id.remove(id);
        });
        self.store.meta_delete(format!("{PREFIX}{id}").as_bytes())?;
        self.store.sync()?;
        Ok(stored.token)
    }

    /// Revokes every token of `workspace` and moves the name's incarnation
    /// on, so no token made before — one whose record survives somewhere,
    /// or one another process was making meanwhile — opens the workspace
    /// that takes the name next. For the erasure of a workspace
    /// ([`Memory::forget_workspace`], through [`ErasedWithWorkspace`]): the
    /// writes go to the store-wide space unsynced, to be made durable by the
    /// caller's sync with the rest of its erasure (the cache refuses the
    /// tokens at once). Idempotent in effect: calling it again (recovery of
    /// an interrupted erasure) moves the incarnation again and revokes
    /// nothing more. Answers how many tokens it revoked.
    pub(crate) fn revoke_workspace(&self, memory: &Memory, workspace: &str) -> Result<usize> {
        validate_id("workspace id", workspace)?;
        let _writing = self.cache.writing.lock();
        let store = &self.store;
        let key = incarnation_key(memory, workspace);
        let next = self.stored_incarnation(&key)?.saturating_add(1);
        let mut revoked = Vec::new();
        for (record, value) in store.meta_scan_prefix(PREFIX.as_bytes())? {
            let stored = decode(&record, &value)?;
            if stored.token.workspace == workspace {
                revoked.push((record, stored.token.id));
            }
        }
        self.cache.update(|tokens| {
            tokens.incarnations.insert(key.clone(), next);
            for (_, id) in &revoked {
                tokens.by_id.remove(id);
            }
        });
        store.meta_put(key.as_bytes(), next.to_string().as_bytes())?;
        for (record, _) in &revoked {
            store.meta_delete(record)?;
        }
        if !revoked.is_empty() {
            tracing::info!(
                tokens = revoked.len(),
                "access tokens revoked with their workspace"
            );
        }
        Ok(revoked.len())
    }

    /// The token `presented` is, if it is a live one: known, its secret's
    /// keyed hash equal (compared in constant time), and made in its
    /// workspace's current incarnation. Anything malformed, unknown, revoked
    /// or of an erased workspace is `None`. Answered from the cache: the
    /// store is read only the first time (see [`Access::reload`]).
    pub(crate) fn verify(&self, memory: &Memory, presented: &str) -> Result<Option<AccessToken>> {
        let Some((id, secret)) = parse(presented) else {
            return Ok(None);
        };
        let tokens = self.cached_tokens()?;
        let Some(stored) = tokens.by_id.get(id) else {
            return Ok(None);
        };
        let digest = token_digest(memory, secret);
        let current = tokens.incarnation(&incarnation_key(memory, &stored.token.workspace))
            == stored.incarnation;
        Ok((same_digest(&digest, &stored.digest) && current).then(|| stored.token.clone()))
    }

    /// Whether any token is stored (from the cache, read first if it never
    /// was).
    pub(crate) fn has_tokens(&self) -> Result<bool> {
        Ok(!self.cached_tokens()?.by_id.is_empty())
    }
}

/// The erasure of a workspace revokes its tokens in its durable step.
impl ErasedWithWorkspace for Access {
    fn erase_workspace(&self, memory: &Memory, workspace: &str) -> Result<usize> {
        self.revoke_workspace(memory, workspace)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cairn_memory::{MemoryConfig, SystemClock};

    use super::*;

    /// A memory on the store the storage matrix selects for `dir`, with
    /// its tokens, as the facade opens them; the methods are the facade's.
    #[derive(Clone)]
    struct Opened {
        memory: Memory,
        access: Arc<Access>,
    }

    impl Opened {
        fn store(&self) -> &Arc<dyn Store> {
            &self.access.store
        }

        fn create_token(
            &self,
            workspace: &str,
            scope: TokenScope,
            label: Option<&str>,
        ) -> Result<(AccessToken, String)> {
            self.access.create(&self.memory, workspace, scope, label)
        }

        fn verify_token(&self, presented: &str) -> Result<Option<AccessToken>> {
            self.access.verify(&self.memory, presented)
        }

        fn revoke_workspace_tokens(&self, workspace: &str) -> Result<usize> {
            self.access.revoke_workspace(&self.memory, workspace)
        }

        fn revoke_token(&self, id: &str) -> Result<AccessToken> {
            self.access.revoke(id)
        }

        fn access_tokens(&self) -> Result<Vec<AccessToken>> {
            self.access.list()
        }

        fn has_tokens(&self) -> Result<bool> {
            self.access.has_tokens()
        }

        fn reload_tokens(&self) -> Result<()> {
            self.access.reload()
        }
    }

    fn open(dir: &std::path::Path) -> Opened {
        let storage = cairn_memory::testing::storage(dir).unwrap();
        let cache = MemoryConfig::default().cache_mb.saturating_mul(1 << 20);
        let store = cairn_memory::store::open(&storage, dir, cache).unwrap();
        let access = Arc::new(Access::new(store.clone()));
        let memory = Memory::open_with(
            store,
            MemoryConfig::default(),
            Arc::new(SystemClock),
            vec![access.clone()],
        )
        .unwrap();
        Opened { memory, access }
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
        let raw = memory.store().meta_scan_prefix(PREFIX.as_bytes()).unwrap();
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

    /// Issue 78: checks are answered from memory. Once read, a record the
    /// store loses (another process revoked it) still counts until the
    /// tokens are read again; this process's own changes count at once.
    #[test]
    fn tokens_are_checked_from_memory_and_read_again_on_demand() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        let (made, secret) = memory
            .create_token("acme", TokenScope::Write, None)
            .unwrap();
        assert!(memory.has_tokens().unwrap());
        assert_eq!(memory.verify_token(&secret).unwrap(), Some(made.clone()));
        // Behind the cache's back, as another process sharing the store.
        memory
            .store()
            .meta_delete(format!("{PREFIX}{}", made.id).as_bytes())
            .unwrap();
        assert_eq!(memory.verify_token(&secret).unwrap(), Some(made.clone()));
        memory.reload_tokens().unwrap();
        assert_eq!(memory.verify_token(&secret).unwrap(), None);
        assert!(!memory.has_tokens().unwrap());
        // Made here: counted without a reload, by every handle.
        let (_, again) = memory.create_token("acme", TokenScope::Read, None).unwrap();
        let other = memory.clone();
        assert!(other.verify_token(&again).unwrap().is_some());
    }

    /// Issue 78: a token is bound to its workspace's incarnation. Erasing
    /// the workspace revokes its tokens and moves the incarnation on; a
    /// token of the earlier incarnation whose record survives (made by
    /// another process meanwhile) opens nothing; other workspaces' tokens
    /// and tokens made afterwards are untouched.
    #[test]
    fn tokens_are_bound_to_their_workspace_s_incarnation() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open(dir.path());
        let (_, acme) = memory
            .create_token("acme", TokenScope::Write, None)
            .unwrap();
        let (globex_made, globex) = memory
            .create_token("globex", TokenScope::Read, None)
            .unwrap();
        let (stale_made, stale) = memory.create_token("acme", TokenScope::Read, None).unwrap();
        let stale_record = memory
            .store()
            .meta_get(format!("{PREFIX}{}", stale_made.id).as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(memory.revoke_workspace_tokens("acme").unwrap(), 2);
        memory.store().sync().unwrap();
        assert_eq!(memory.verify_token(&acme).unwrap(), None);
        assert_eq!(memory.verify_token(&stale).unwrap(), None);
        assert_eq!(memory.verify_token(&globex).unwrap(), Some(globex_made));
        assert_eq!(memory.access_tokens().unwrap().len(), 1);
        // A record of the old incarnation written back (a process that was
        // making it during the erasure): refused, by this process and after
        // a reopen.
        memory
            .store()
            .meta_put(
                format!("{PREFIX}{}", stale_made.id).as_bytes(),
                &stale_record,
            )
            .unwrap();
        memory.reload_tokens().unwrap();
        assert_eq!(memory.verify_token(&stale).unwrap(), None);
        let (fresh_made, fresh) = memory.create_token("acme", TokenScope::Read, None).unwrap();
        assert_eq!(
            memory.verify_token(&fresh).unwrap(),
            Some(fresh_made.clone())
        );
        memory.store().sync().unwrap();
        drop(memory);
        let memory = open(dir.path());
        assert_eq!(memory.verify_token(&stale).unwrap(), None);
        assert_eq!(memory.verify_token(&fresh).unwrap(), Some(fresh_made));
        // The incarnation record does not name the workspace.
        let records = memory
            .store()
            .meta_scan_prefix(INCARNATION_PREFIX.as_bytes())
            .unwrap();
        assert_eq!(records.len(), 1);
        assert!(!String::from_utf8_lossy(&records[0].0).contains("acme"));
        assert!(memory.revoke_workspace_tokens("a b").is_err());
    }
}
