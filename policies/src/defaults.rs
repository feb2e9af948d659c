//! The plugins that ship with cairn, built from `plugins/` by this crate's
//! build script and embedded in the library, and [`PolicySet`], the three
//! slots a runtime needs, loaded with them.
//!
//! No `.wasm` file is committed: the build compiles the guest crates from
//! source for `wasm32-wasip2` (see `build.rs` and `plugins/README.md`).

use crate::error::Result;
use crate::host::PolicyHost;
use crate::slot::PolicySlot;
use crate::world::{MemoryPolicy, SignificanceGate, TopicDirective, World, WorldKind};

/// A plugin built with cairn.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct BuiltinPlugin {
    /// Its name (the guest crate's name).
    pub name: &'static str,
    /// The world it implements.
    pub world: WorldKind,
    /// The component's bytes, embedded at build time.
    pub wasm: &'static [u8],
    /// Where the build wrote it. Only meaningful on the machine that built
    /// this crate.
    pub path: &'static str,
}

macro_rules! builtin {
    ($name:literal, $world:expr, $env:literal) => {
        BuiltinPlugin {
            name: $name,
            world: $world,
            wasm: include_bytes!(env!($env)),
            path: env!($env),
        }
    };
}

/// The default significance gate (`plugins/significance-default`; its
/// logic is the `significance-core` crate).
pub const SIGNIFICANCE: BuiltinPlugin = builtin!(
    "significance-default",
    WorldKind::SignificanceGate,
    "CAIRN_PLUGIN_SIGNIFICANCE_DEFAULT"
);

/// The default topic directive (`plugins/topic-default`).
pub const TOPIC: BuiltinPlugin = builtin!(
    "topic-default",
    WorldKind::TopicDirective,
    "CAIRN_PLUGIN_TOPIC_DEFAULT"
);

/// The default memory policy (`plugins/memory-policy-default`).
pub const MEMORY_POLICY: BuiltinPlugin = builtin!(
    "memory-policy-default",
    WorldKind::MemoryPolicy,
    "CAIRN_PLUGIN_MEMORY_POLICY_DEFAULT"
);

/// The example user policy, "nothing leaves this machine", a memory policy
/// (`plugins/example-custom`).
pub const EXAMPLE_CUSTOM: BuiltinPlugin = builtin!(
    "example-custom",
    WorldKind::MemoryPolicy,
    "CAIRN_PLUGIN_EXAMPLE_CUSTOM"
);

/// The example significance gate that never captures (observe only), to
/// pause capture without stopping cairn (`plugins/example-quiet`).
pub const EXAMPLE_QUIET: BuiltinPlugin = builtin!(
    "example-quiet",
    WorldKind::SignificanceGate,
    "CAIRN_PLUGIN_EXAMPLE_QUIET"
);

/// Test guests, by the path of their built component (not embedded in the
/// binary): cairn's own end-to-end tests install them from the file, as a
/// user would.
#[doc(hidden)]
pub mod test_guests {
    /// `plugins/test-export`: a memory policy that leaves out, references or
    /// redacts objects for the `export` action.
    pub const TEST_EXPORT: &str = env!("CAIRN_PLUGIN_TEST_EXPORT");
    /// `plugins/test-conformance`: a memory policy that answers what the
    /// object's session id spells (every value of every decision field).
    pub const TEST_CONFORMANCE: &str = env!("CAIRN_PLUGIN_TEST_CONFORMANCE");
    /// `plugins/test-topic-directive`: a topic directive whose answer the
    /// topic's name spells (conformance tests of the topic-directive world).
    pub const TEST_TOPIC_DIRECTIVE: &str = env!("CAIRN_PLUGIN_TEST_TOPIC_DIRECTIVE");
}

/// The three slots a runtime decides with.
///
/// ```
/// use std::sync::Arc;
/// use cairn_policies::{HostConfig, MemorySink, PolicyHost, PolicySet};
///
/// # fn main() -> Result<(), cairn_policies::PolicyError> {
/// let host = PolicyHost::new(HostConfig::default(), Arc::new(MemorySink::default()))?;
/// let set = PolicySet::with_defaults(&host)?;
/// assert_eq!(set.memory.plugin(), "memory-policy-default");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PolicySet {
    /// The significance gate.
    pub significance: PolicySlot<SignificanceGate>,
    /// The topic directive.
    pub topic: PolicySlot<TopicDirective>,
    /// The memory policy.
    pub memory: PolicySlot<MemoryPolicy>,
}

impl PolicySet {
    /// The three slots, serving the built-in default plugins.
    pub fn with_defaults(host: &PolicyHost) -> Result<PolicySet> {
        Ok(PolicySet {
            significance: slot::<SignificanceGate>(host, &SIGNIFICANCE)?,
            topic: slot::<TopicDirective>(host, &TOPIC)?,
            memory: slot::<MemoryPolicy>(host, &MEMORY_POLICY)?,
        })
    }
}

fn slot<W: World>(host: &PolicyHost, plugin: &BuiltinPlugin) -> Result<PolicySlot<W>> {
    debug_assert_eq!(plugin.world, W::KIND);
    host.slot(&host.prepare::<W>(plugin.name, plugin.wasm)?)
}
