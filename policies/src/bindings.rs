//! The host side of the `cairn:policy` WIT worlds: one `bindgen!` per world.
//!
//! Generated code stays inside this module; the rest of the crate converts
//! to and from its own types (`significance.rs`, `topic.rs`,
//! `memory_policy.rs`) so no wasmtime-generated type appears in the public
//! API. The `types` interface is generated once, by the first world, and
//! shared with the others through `with`.
#![allow(missing_docs, unreachable_pub, reason = "generated code")]

pub(crate) mod significance {
    wasmtime::component::bindgen!({
        world: "significance-gate",
        path: "../wit",
    });
}

pub(crate) mod topic {
    wasmtime::component::bindgen!({
        world: "topic-directive",
        path: "../wit",
        with: {
            "cairn:policy/types": crate::bindings::significance::cairn::policy::types,
        },
    });
}

pub(crate) mod memory {
    wasmtime::component::bindgen!({
        world: "memory-policy",
        path: "../wit",
        with: {
            "cairn:policy/types": crate::bindings::significance::cairn::policy::types,
        },
    });
}

pub(crate) mod memory_batch {
    wasmtime::component::bindgen!({
        world: "memory-policy-batch",
        path: "../wit",
        with: {
            "cairn:policy/types": crate::bindings::significance::cairn::policy::types,
            "cairn:policy/memory": crate::bindings::memory::cairn::policy::memory,
        },
    });
}

pub(crate) mod memory_assembly {
    wasmtime::component::bindgen!({
        world: "memory-policy-assembly",
        path: "../wit",
        with: {
            "cairn:policy/types": crate::bindings::significance::cairn::policy::types,
            "cairn:policy/memory": crate::bindings::memory::cairn::policy::memory,
        },
    });
}

pub(crate) mod memory_interned {
    wasmtime::component::bindgen!({
        world: "memory-policy-interned",
        path: "../wit",
        with: {
            "cairn:policy/types": crate::bindings::significance::cairn::policy::types,
            "cairn:policy/memory": crate::bindings::memory::cairn::policy::memory,
        },
    });
}
