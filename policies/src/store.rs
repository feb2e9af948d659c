//! What each wasmtime `Store` carries: the per-call resource limiter.
//!
//! One store holds one instance of one plugin generation. The limiter wraps
//! wasmtime's [`StoreLimits`] and remembers whether it refused a memory
//! growth, so a guest that aborts because its allocation failed is reported
//! as `memory-limit`, not as a bare trap.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use crate::host::Limits;

/// The data of every plugin store.
#[doc(hidden)]
pub struct StoreState {
    limiter: Limiter,
}

impl StoreState {
    pub(crate) fn new(limits: &Limits) -> StoreState {
        StoreState {
            limiter: Limiter {
                inner: StoreLimitsBuilder::new()
                    .memory_size(limits.memory_bytes)
                    .table_elements(limits.table_elements)
                    .instances(limits.instances)
                    .tables(limits.instances)
                    .memories(limits.instances)
                    .build(),
                memory_denied: false,
            },
        }
    }

    pub(crate) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limiter
    }

    /// Whether a memory growth was refused since the last [`Self::rearm`].
    pub(crate) fn memory_denied(&self) -> bool {
        self.limiter.memory_denied
    }

    /// Forgets refusals before a new call.
    pub(crate) fn rearm(&mut self) {
        self.limiter.memory_denied = false;
    }
}

struct Limiter {
    inner: StoreLimits,
    memory_denied: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.inner.memory_growing(current, desired, maximum)?;
        if !allowed {
            self.memory_denied = true;
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}
