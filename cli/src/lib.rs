//! The `cairn` command's library: the HTTP server ([`http`]), the MCP
//! server ([`mcp`]), the load
//! generator ([`loadgen`]), the retrieval evaluation ([`eval`]) and the
//! `MEMORY.md` briefing writer ([`brief`]).
//!
//! Everything here reaches memory through the [`cairn::Cairn`] facade and
//! nothing else: this package depends on `cairn`'s public API only, so the
//! compiler keeps every surface behind the same rules (actors, the
//! significance gate, the memory policy, lineage, redaction, limits).

pub mod brief;
mod client;
pub mod eval;
mod guard;
pub mod http;
pub mod loadgen;
pub mod mcp;
