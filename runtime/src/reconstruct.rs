//! Reconstruct on the facade: every derived store rebuilt from the raw
//! record and the log alone, compared with the live one
//! ([`Cairn::reconstruct`]). The checkers live beside their stores: the
//! log's in the memory core, the search index's and stored vectors' in the
//! search service, the capture marks' in the actors; see
//! `cairn_memory::reconstruct` for what is derived from what.

use cairn_memory::reconstruct::ReconstructReport;

use crate::error::Result;
use crate::host::Cairn;

impl Cairn {
    /// Rebuilds every derived store of `workspace` from the raw record and
    /// the log into scratch and compares it with the live one. With
    /// `verify`, only reports the differences (writes nothing but what an
    /// indexing pass writes: vectors of items never embedded); without it,
    /// also replaces each differing store with its rebuild (each in one
    /// atomic batch), so a second `verify` finds nothing.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "We decided to use sled.").in_context("db")])?;
    /// cairn.capture("acme", None)?;
    /// let report = cairn.reconstruct("acme", true)?;
    /// assert!(report.is_consistent(), "{:?}", report.differences);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reconstruct(&self, workspace: &str, verify: bool) -> Result<ReconstructReport> {
        let repair = !verify;
        let ws = self.memory().existing_workspace(workspace)?;
        let mut report = ReconstructReport {
            workspace: workspace.to_owned(),
            verify,
            stores: Vec::new(),
            differences: Vec::new(),
        };
        // The log's stores first: the index's replaced and archived sets
        // are compared with what the log says.
        for findings in ws.reconstruct_log(repair)? {
            findings.into_report(&mut report);
        }
        self.actors
            .reconstruct_marks(workspace, repair)?
            .into_report(&mut report);
        for findings in self.search().reconstruct(workspace, repair)? {
            findings.into_report(&mut report);
        }
        tracing::info!(
            workspace,
            verify,
            differences = report.differences.len(),
            "reconstruct"
        );
        Ok(report)
    }

    /// [`Cairn::reconstruct`] over every workspace, sorted.
    pub fn reconstruct_all(&self, verify: bool) -> Result<Vec<ReconstructReport>> {
        self.workspaces()?
            .iter()
            .map(|ws| self.reconstruct(ws, verify))
            .collect()
    }

    /// Test hook (feature `testing`): writes (or, with `None`, deletes) one
    /// raw record, skipping every rule, so cairn's own tests can corrupt a
    /// derived store on purpose.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn raw_write(
        &self,
        workspace: &str,
        collection: cairn_memory::store::Collection,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<()> {
        let ws = self.memory().existing_workspace(workspace)?;
        ws.raw_write_for_tests(collection, key, value)?;
        Ok(())
    }
}
