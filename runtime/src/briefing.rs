//! The briefing on the facade: [`Cairn::briefing`] renders the generated
//! `MEMORY.md` block of a workspace or one work context (see
//! [`cairn_memory::brief`] for the sections and rules).

use std::borrow::Cow;
use std::sync::Arc;

use cairn_memory::brief::Briefing;

use crate::error::Result;
use crate::host::Cairn;
use crate::reads::ReadAs;

impl Cairn {
    /// The briefing of `workspace` (or of one `work_context`) at the
    /// clock's time, as `reader` may see it: Active (14 days), Decisions
    /// (7 days), Pending, Open questions, Stale (30 days), Contradictions
    /// (at most 3), at most 80 lines, each line with its reference, secrets
    /// masked. The windows are `[memory.briefing]`. Deterministic: the same
    /// log at the same time renders the same bytes.
    ///
    /// The rules of every read apply to each entry it could show: an
    /// `asking` sub-agent or cron session sees only entries from its
    /// lineage, and the memory policy judges each entry for the reader's
    /// destination (`retrieve`, surface `briefing`): an entry it blocks is
    /// left out as if it did not exist, a redacted or reference-only one is
    /// shown so.
    ///
    /// Fails with `workspace_not_found` for a workspace that does not exist,
    /// `invalid` for a malformed work context id, and `lineage_denied` for
    /// an asking session that does not exist.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, EntryInput, EntryKind, ReadAs};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.append_entry("acme", &EntryInput::new(EntryKind::Decision, "Launch on April 1").about("beta"))?;
    /// let briefing = cairn.briefing("acme", None, ReadAs::user())?;
    /// assert!(briefing.text.contains("beta: Launch on April 1"));
    /// assert!(briefing.lines <= 80);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn briefing<'a>(
        &self,
        workspace: &str,
        work_context: Option<&str>,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<Briefing> {
        let reader = reader.into();
        let ws = self.memory().existing_workspace(workspace)?;
        let lineage = self.allowed_sessions(&ws, reader.asking, false)?;
        let judge = self.read_judge(&ws, reader, "briefing", lineage.clone())?;
        Ok(ws.briefing_as(work_context, |view| {
            if let Some(allowed) = &lineage
                && !view
                    .entry
                    .provenance
                    .as_ref()
                    .is_some_and(|p| allowed.contains(p.session.as_str()))
            {
                return None;
            }
            let mut entry = (*view.entry).clone();
            judge.entry(&mut entry).ok()?;
            if entry == *view.entry {
                return Some(Cow::Borrowed(view));
            }
            let mut changed = view.clone();
            changed.entry = Arc::new(entry);
            Some(Cow::Owned(changed))
        })?)
    }
}
