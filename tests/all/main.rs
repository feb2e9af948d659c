//! End-to-end tests of the whole runtime: the real `cairn` binary on real
//! sled in temp dirs, over real HTTP on loopback. One test binary (fewer
//! binaries link faster); a module per area.
//!
//! The storage matrix: with `CAIRN_TEST_POSTGRES_URL` set (an admin URL of
//! a PostgreSQL server; `scripts/dev.sh test` starts a throwaway one), every
//! store the suite opens is on PostgreSQL instead, a fresh database per data
//! directory (`support::backend_env`, `support::storage`); the few tests
//! about sled's own files say why they skip (`support::sled_only`).

mod access;
mod actors;
mod assembly;
mod cli;
mod cluster;
mod compaction;
mod conformance;
mod corrections;
mod cross_workspace;
mod current;
mod doctor;
mod durability;
mod erasure;
mod export;
mod extraction;
mod hardening;
mod http_api;
mod inspector;
mod loadgen;
mod maintain;
mod mcp;
mod model_tls;
mod plugins;
mod policy_reads;
mod reconstruct;
mod search;
mod support;
mod topic_directives;
mod topics;
mod trust;
