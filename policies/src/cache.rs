//! The compile cache: compiled components kept in memory and on disk, keyed
//! by the BLAKE3 hash of the component's bytes and the engine's
//! compatibility hash.
//!
//! Compiling a small component takes tens of milliseconds; loading a
//! compiled one takes well under one. A cache file is
//! `MAGIC ‖ blake3(payload) ‖ payload`, where the payload is
//! `Component::serialize`'s output; the checksum catches torn or corrupted
//! files before wasmtime sees them. A file that fails any check is
//! recompiled and rewritten, never trusted.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::{PolicyError, Result, message};

const MAGIC: &[u8; 8] = b"CAIRNCW1";
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
    engine_key: u64,
    memory: Mutex<HashMap<blake3::Hash, Component>>,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    compiled: AtomicU64,
    rejected: AtomicU64,
}

impl ComponentCache {
    pub(crate) fn new(engine: &Engine, dir: Option<&Path>) -> Result<ComponentCache> {
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
        if let Some(path) = &path {
            if let Some(component) = self.read(engine, path) {
                self.disk_hits.fetch_add(1, Ordering::Relaxed);
                self.memory.lock().insert(*hash, component.clone());
                return Ok((component, CacheOutcome::Disk));
            }
        }
        let component = Component::new(engine, wasm).map_err(|err| PolicyError::Compile {
            plugin: plugin.to_owned(),
            message: message(&err),
        })?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        if let Some(path) = &path {
            self.write(&component, path);
        }
        self.memory.lock().insert(*hash, component.clone());
        Ok((component, CacheOutcome::Compiled))
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
                    && blake3::hash(payload).as_bytes()[..] == header[MAGIC.len()..] =>
            {
                payload
            }
            _ => {
                self.reject(path, "bad header or checksum");
                return None;
            }
        };
        // SAFETY: `Component::deserialize` trusts its input to be machine code
        // that `Component::serialize` produced for a compatible engine. This
        // file was written by `Self::write` below from `Component::serialize`,
        // its name carries this engine's compatibility hash, its checksum was
        // just verified (so it is not torn or corrupted), and wasmtime itself
        // re-checks the version and configuration in the header. What the
        // checksum cannot rule out is a deliberate forgery: the cache
        // directory must be as trusted as the cairn binary, which is why
        // `HostConfig::cache_dir` documents it so and why the cache is off
        // unless an embedder sets a directory.
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
                bytes.extend_from_slice(blake3::hash(&payload).as_bytes());
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
