//! The CLI's commands over one workspace, area by area (as `cli/src/http/`
//! holds the HTTP routes): `run_command` in `main.rs` dispatches each to its
//! area's function here. `maintain.rs`, `plugins.rs` and `topics.rs` beside
//! `main.rs` hold the commands of their areas.

pub(crate) mod assemble;
pub(crate) mod compaction;
pub(crate) mod entries;
pub(crate) mod erasure;
pub(crate) mod obligations;
pub(crate) mod search;
pub(crate) mod sessions;
pub(crate) mod tokens;

use cairn::Cairn;

/// What every command of a workspace is run with: the facade, the
/// workspace (`--workspace`) and the asking session (`--asking`).
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// The facade.
    pub(crate) cairn: &'a Cairn,
    /// The workspace.
    pub(crate) ws_id: &'a str,
    /// The session the reads are made as, if any.
    pub(crate) asking: Option<&'a str>,
}
