//! Maintenance on the facade: [`Cairn::maintain`] (promotion, decay,
//! archive, contradictions listed; dry runs), [`Cairn::undo_maintenance`],
//! [`Cairn::restore`] and the run log. The rules live in the memory core
//! (`cairn_memory::maintain`); the nightly run is the actors' (after the
//! nightly capture sweep). A run that changed something wakes the search
//! worker, which reads the archive marks before every search anyway.

use cairn_memory::maintain::{ArchivedItem, MaintainOptions, MaintenanceReport, MaintenanceRun};

use crate::error::Result;
use crate::host::Cairn;

impl Cairn {
    /// Runs maintenance on a workspace now (`cairn maintain`): open
    /// questions with a deadline unresolved for 14 days become obligations,
    /// decisions stated in 3 or more sessions become directives, entries
    /// past their time-to-live leave the live set, material older than 90
    /// days is archived out of the live indexes, and contradictions between
    /// live entries are listed. Every change is recorded with its rule and
    /// reason under one run id, in one atomic batch. With `dry_run`, the
    /// same report and nothing written.
    ///
    /// ```
    /// use cairn::maintain::{MaintainOptions, Rule};
    /// use cairn::{Cairn, CairnConfig, EntryInput, EntryKind, ManualClock};
    /// use chrono::{Duration, TimeZone, Utc};
    /// let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap());
    /// let dir = tempfile::tempdir()?;
    /// let config = CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() };
    /// let cairn = Cairn::open_with_clock(config, std::sync::Arc::new(clock.clone()))?;
    /// cairn.append_entry("acme", &EntryInput::new(EntryKind::OpenQuestion, "Which vendor signs by March 20?"))?;
    /// clock.advance(Duration::days(15));
    /// let report = cairn.maintain("acme", MaintainOptions::default())?;
    /// assert_eq!(report.changes[0].rule, Rule::PromoteObligation);
    /// cairn.undo_maintenance("acme", report.run.as_deref().unwrap())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn maintain(&self, workspace: &str, options: MaintainOptions) -> Result<MaintenanceReport> {
        let ws = self.memory().existing_workspace(workspace)?;
        let report = ws.maintain(&options)?;
        if report.run.is_some() {
            self.nudge_search();
        }
        Ok(report)
    }

    /// Reverses exactly one maintenance run (one atomic batch); refused
    /// with `undo_conflict` when a later run changed its items or an entry
    /// it promoted was replaced since.
    pub fn undo_maintenance(&self, workspace: &str, run: &str) -> Result<MaintenanceRun> {
        let ws = self.memory().existing_workspace(workspace)?;
        let undone = ws.undo_maintenance(run)?;
        self.nudge_search();
        Ok(undone)
    }

    /// Brings an archived entry or session back into the live indexes (a
    /// run of its own, undoable); `not_archived` when it is not archived.
    pub fn restore(&self, workspace: &str, item: &ArchivedItem) -> Result<MaintenanceReport> {
        let ws = self.memory().existing_workspace(workspace)?;
        let report = ws.restore(item)?;
        self.nudge_search();
        Ok(report)
    }

    /// The workspace's maintenance runs, oldest first.
    pub fn maintenance_runs(&self, workspace: &str) -> Result<Vec<MaintenanceRun>> {
        Ok(self
            .memory()
            .existing_workspace(workspace)?
            .maintenance_runs()?)
    }

    /// One maintenance run, with every change, its rule and its reason.
    pub fn maintenance_run(&self, workspace: &str, run: &str) -> Result<MaintenanceRun> {
        Ok(self
            .memory()
            .existing_workspace(workspace)?
            .maintenance_run(run)?)
    }
}
