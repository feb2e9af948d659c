//! The storage seam, and the typed keys the core writes through it.
//!
//! The seam itself ([`Store`], [`WorkspaceStore`], [`WriteBatch`],
//! [`Collection`], [`StoreError`], the sled and PostgreSQL backends, the
//! leases of a cluster) is the `cairn-store` crate, re-exported here whole
//! so `cairn_memory::store::…` names what it always did. The store sees
//! bytes under a collection and nothing more.
//!
//! What the keys mean is the core's: [`StateKey`] (the state other
//! subsystems keep in a workspace), [`TopicKey`] and [`MaintKey`] name the
//! core's features, so they live here, above the store. Each holds its byte
//! encoding, pinned by its tests: existing data dirs read them.

mod maint_keys;
mod state;
mod topic_keys;

pub use cairn_store::*;
pub use maint_keys::{MaintFamily, MaintKey};
pub use state::{StateFamily, StateKey};
pub use topic_keys::{TopicFamily, TopicKey};
