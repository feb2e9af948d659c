//! The briefing on the facade: [`Cairn::briefing`] renders the generated
//! `MEMORY.md` block of a workspace or one work context (see
//! [`cairn_memory::brief`] for the sections and rules).

use cairn_memory::brief::Briefing;

use crate::error::Result;
use crate::host::Cairn;

impl Cairn {
    /// The briefing of `workspace` (or of one `work_context`) at the
    /// clock's time: Active (14 days), Decisions (7 days), Pending, Open
    /// questions, Stale (30 days), Contradictions (at most 3), at most 80
    /// lines, each line with its reference, secrets masked. The windows are
    /// `[memory.briefing]`. Deterministic: the same log at the same time
    /// renders the same bytes.
    ///
    /// Fails with `workspace_not_found` for a workspace that does not exist
    /// and `invalid` for a malformed work context id.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, EntryInput, EntryKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.append_entry("acme", &EntryInput::new(EntryKind::Decision, "Launch on April 1").about("beta"))?;
    /// let briefing = cairn.briefing("acme", None)?;
    /// assert!(briefing.text.contains("beta: Launch on April 1"));
    /// assert!(briefing.lines <= 80);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn briefing(&self, workspace: &str, work_context: Option<&str>) -> Result<Briefing> {
        let ws = self.memory().existing_workspace(workspace)?;
        Ok(ws.briefing(work_context)?)
    }
}
