//! The compile cache: compiled components kept in memory and on disk, keyed
//! by the BLAKE3 hash of the component's bytes and the engine's
//! compatibility hash.
//!
//! Compiling a small component takes tens of milliseconds; loading a
//! compiled one takes well under one. A cache file is
//! `MAGIC ‖ mac ‖ payload`, where the payload is `Component::serialize`'s
//! output and `mac` is BLAKE3 keyed with a secret only this install knows
//! ([`HostConfig::cache_dir`](crate::HostConfig::cache_dir)) over the
//! engine's compatibility hash and the payload. Loading a cache file loads
//! native code, so a file this install did not write (forged, torn,
//! corrupted, copied from elsewhere) fails the check and is recompiled and
//! rewritten, never trusted.
//!
//! Bounded: at most [`MAX_IN_MEMORY`] compiled components are kept in
//! memory and [`MAX_ON_DISK`] files on disk (the least recently written go
//! first).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::{PolicyError, Result, message};

const MAGIC: &[u8; 8] = b"CAIRNCW2";
/// Compiled components kept in memory at most.
pub const MAX_IN_MEMORY: usize = 32;
/// Cache files kept on disk at most.
pub const MAX_ON_DISK: usize = 64;
const HEADER: usize = MAGIC.len() + 32;

/// Where a prepared plugin's compiled code came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CacheOutcome {
    /// Already compiled in this process.
    Memory,
    /// Loaded from the on-disk cache.
    Disk,
    /// Compiled now (and written to the disk cache, if there is one).
    Compiled,
}

/// Counters of the compile cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Components found compiled in memory.
    pub memory_hits: u64,
    /// Components loaded from disk.
    pub disk_hits: u64,
    /// Components compiled.
    pub compiled: u64,
    /// Cache files rejected (corrupt, or from another engine) and rewritten.
    pub rejected: u64,
}

pub(crate) struct ComponentCache {
    dir: Option<PathBuf>,
    /// The MAC key of disk files.
    key: [u8; 32],
    engine_key: u64,
    memory: Mutex<HashMap<blake3::Hash, Component>>,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    compiled: AtomicU64,
    rejected: AtomicU64,
}

impl ComponentCache {
    pub(crate) fn new(engine: &Engine, dir: Option<(&Path, [u8; 32])>) -> Result<ComponentCache> {
        let (dir, key) = match dir {
            Some((dir, key)) => (Some(dir), key),
            None => (None, [0; 32]),
        };
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir).map_err(|source| PolicyError::Cache {
                path: dir.to_owned(),
                source,
            })?;
        }
        let mut h = Blake3Hasher(blake3::Hasher::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        Ok(ComponentCache {
            dir: dir.map(Path::to_owned),
            key,
            engine_key: h.finish(),
            memory: Mutex::new(HashMap::new()),
            memory_hits: AtomicU64::new(0),
            disk_hits: AtomicU64::new(0),
            compiled: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            memory_hits: self.memory_hits.load(Ordering::Relaxed),
            disk_hits: self.disk_hits.load(Ordering::Relaxed),
            compiled: self.compiled.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }

    /// The compiled component for `wasm`, from memory, disk, or compiled
    /// now. Compiling happens on the caller's thread: call this off the hot
    /// path.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        plugin: &str,
        hash: &blake3::Hash,
        wasm: &[u8],
    ) -> Result<(Component, CacheOutcome)> {
        if let Some(component) = self.memory.lock().get(hash) {
            self.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Ok((component.clone(), CacheOutcome::Memory));
        }
        let path = self.dir.as_ref().map(|dir| self.file(dir, hash));
        if let Some(path) = &path
            && let Some(component) = self.read(engine, path)
        {
            self.disk_hits.fetch_add(1, Ordering::Relaxed);
            self.remember(*hash, component.clone());
            return Ok((component, CacheOutcome::Disk));
        }
        let component = Component::new(engine, wasm).map_err(|err| PolicyError::Compile {
            plugin: plugin.to_owned(),
            message: message(&err),
        })?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        if let Some(path) = &path {
            self.write(&component, path);
        }
        self.remember(*hash, component.clone());
        Ok((component, CacheOutcome::Compiled))
    }

    /// Keeps `component` in memory, evicting another past the bound.
    fn remember(&self, hash: blake3::Hash, component: Component) {
        let mut memory = self.memory.lock();
        if memory.len() >= MAX_IN_MEMORY
            && !memory.contains_key(&hash)
            && let Some(evict) = memory.keys().next().copied()
        {
            memory.remove(&evict);
        }
        memory.insert(hash, component);
    }

    /// The MAC of a payload: keyed with this install's secret, over the
    /// engine's compatibility hash and the payload.
    fn mac(&self, payload: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(&self.engine_key.to_le_bytes());
        h.update(payload);
        h.finalize()
    }

    fn file(&self, dir: &Path, hash: &blake3::Hash) -> PathBuf {
        dir.join(format!("{}-{:016x}.cwasm", hash.to_hex(), self.engine_key))
    }

    /// Reads and checks a cache file; `None` if absent or unusable.
    fn read(&self, engine: &Engine, path: &Path) -> Option<Component> {
        let bytes = std::fs::read(path).ok()?;
        let payload = match bytes.split_at_checked(HEADER) {
            Some((header, payload))
                if &header[..MAGIC.len()] == MAGIC
                    && self.mac(payload)
                        == <[u8; 32]>::try_from(&header[MAGIC.len()..]).ok()? =>
            {
                payload
            }
            _ => {
                self.reject(path, "bad header or authentication code");
                return None;
            }
        };
        // SAFETY: `Component::deserialize` trusts its input to be machine code
        // that `Component::serialize` produced for a compatible engine. This
        // file was written by `Self::write` below from `Component::serialize`:
        // its authentication code, keyed with a secret only this install
        // knows and covering this engine's compatibility hash, was just
        // verified, so it is neither torn, corrupted, copied from another
        // engine nor forged by someone who can write the cache directory but
        // not read the install's secret; and wasmtime itself re-checks the
        // version and configuration in the header.
        #[allow(
            unsafe_code,
            reason = "loading our own precompiled components; see SAFETY"
        )]
        let loaded = unsafe { Component::deserialize(engine, payload) };
        match loaded {
            Ok(component) => Some(component),
            Err(err) => {
                self.reject(path, &message(&err));
                None
            }
        }
    }

    fn reject(&self, path: &Path, why: &str) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(path = %path.display(), why, "ignoring unusable compile cache file");
    }

    /// Writes a cache file atomically (temporary file, then rename). A
    /// failure only costs a recompilation later, so it is logged, not
    /// returned.
    fn write(&self, component: &Component, path: &Path) {
        let result = component
            .serialize()
            .map_err(|err| message(&err))
            .and_then(|payload| {
                let mut bytes = Vec::with_capacity(HEADER + payload.len());
                bytes.extend_from_slice(MAGIC);
                bytes.extend_from_slice(self.mac(&payload).as_bytes());
                bytes.extend_from_slice(&payload);
                // Unique per write: threads of one process may race to
                // cache the same component.
                static WRITES: AtomicU64 = AtomicU64::new(0);
                let n = WRITES.fetch_add(1, Ordering::Relaxed);
                let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
                std::fs::write(&tmp, &bytes)
                    .and_then(|()| std::fs::rename(&tmp, path))
                    .map_err(|err| err.to_string())
            });
        if let Err(why) = result {
            tracing::warn!(path = %path.display(), why, "could not write compile cache file");
        }
        if let Some(dir) = &self.dir {
            prune(dir);
        }
    }
}

/// Removes the least recently written cache files past [`MAX_ON_DISK`].
fn prune(dir: &Path) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = read
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= MAX_ON_DISK {
        return;
    }
    files.sort();
    for (_, path) in &files[..files.len() - MAX_ON_DISK] {
        if let Err(error) = std::fs::remove_file(path) {
            tracing::warn!(path = %path.display(), %error, "could not prune a compile cache file");
        }
    }
}

/// Feeds `Hash` values into BLAKE3, so the engine key is stable across
/// builds (std's `DefaultHasher` promises no stability).
struct Blake3Hasher(blake3::Hasher);

impl Hasher for Blake3Hasher {
    fn finish(&self) -> u64 {
        let hash = self.0.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash.as_bytes()[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
