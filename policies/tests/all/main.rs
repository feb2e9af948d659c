//! Integration tests of the policy host, in one binary (one module per
//! area). They run the real wasmtime engine on the real guest components,
//! built from `plugins/` by the build script.

// Test helpers outside `#[test]` functions fail loudly on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod batch;
mod breaker;
mod cache;
mod containment;
mod deadline;
mod defaults;
mod install;
mod support;
mod swap;
