//! `cairn maintain` (run, preview, undo, restore, list runs) and `cairn
//! reconstruct` (check or rebuild the derived stores), on the data dir
//! through the `Cairn` facade.

use std::io::Write;

use anyhow::Result;
use cairn::Cairn;
use cairn::maintain::{ArchivedItem, MaintainOptions, MaintenanceReport, MaintenanceRun};
use clap::Args;

/// `cairn maintain` flags.
#[derive(Debug, Args)]
pub(crate) struct MaintainArgs {
    /// Report what would change; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Reverse exactly one run (its id, `run-N`).
    #[arg(long, value_name = "RUN", conflicts_with_all = ["dry_run", "restore", "restore_session", "runs"])]
    undo: Option<String>,
    /// Bring an archived entry back into the live indexes.
    #[arg(long, value_name = "ENTRY", conflicts_with_all = ["dry_run", "restore_session", "runs"])]
    restore: Option<String>,
    /// Bring an archived session's turns back into the search index.
    #[arg(long, value_name = "SESSION", conflicts_with_all = ["dry_run", "runs"])]
    restore_session: Option<String>,
    /// List the workspace's runs instead, with every change.
    #[arg(long, conflicts_with = "dry_run")]
    runs: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn maintain(
    cairn: &Cairn,
    ws_id: &str,
    args: MaintainArgs,
    out: &mut impl Write,
) -> Result<()> {
    if let Some(run) = &args.undo {
        let undone = cairn.undo_maintenance(ws_id, run)?;
        return print_run(out, &undone, args.json, "undone: ");
    }
    if args.runs {
        let runs = cairn.maintenance_runs(ws_id)?;
        if args.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&runs)?)?;
            return Ok(());
        }
        if runs.is_empty() {
            writeln!(out, "no maintenance runs in workspace {ws_id}")?;
        }
        for run in &runs {
            print_run(out, run, false, "")?;
        }
        return Ok(());
    }
    let item = match (args.restore, args.restore_session) {
        (Some(entry), _) => Some(ArchivedItem::Entry(entry)),
        (None, Some(session)) => Some(ArchivedItem::Session(session)),
        (None, None) => None,
    };
    let report = match item {
        Some(item) => cairn.restore(ws_id, &item)?,
        None => cairn.maintain(
            ws_id,
            MaintainOptions {
                dry_run: args.dry_run,
                ..MaintainOptions::default()
            },
        )?,
    };
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_report(out, &report)?;
    }
    Ok(())
}

fn print_report(out: &mut impl Write, report: &MaintenanceReport) -> Result<()> {
    let n = report.changes.len();
    match (&report.run, report.dry_run) {
        (_, true) => writeln!(
            out,
            "dry run on workspace {} (nothing written): {n} change(s) would be made",
            report.workspace
        )?,
        (Some(run), false) => writeln!(
            out,
            "{run} on workspace {}: {n} change(s) (undo with `cairn maintain --undo {run}`)",
            report.workspace
        )?,
        (None, false) => writeln!(
            out,
            "nothing to change in workspace {} (no run written)",
            report.workspace
        )?,
    }
    for c in &report.changes {
        writeln!(
            out,
            "  {:<18} {}  {}",
            c.rule.as_str(),
            c.action.item(),
            c.reason
        )?;
    }
    if report.contradictions.is_empty() {
        writeln!(out, "contradictions: none")?;
    } else {
        writeln!(out, "contradictions: {}", report.contradictions.len())?;
        for c in &report.contradictions {
            writeln!(out, "  {} vs {} (newer): {}", c.older, c.newer, c.detail)?;
        }
    }
    Ok(())
}

fn print_run(out: &mut impl Write, run: &MaintenanceRun, json: bool, prefix: &str) -> Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(run)?)?;
        return Ok(());
    }
    let undone = run
        .undone
        .as_ref()
        .map(|u| format!(", undone {}", u.at.format("%Y-%m-%d %H:%M")))
        .unwrap_or_default();
    writeln!(
        out,
        "{prefix}{} {} ({:?}, {} change(s){undone})",
        run.id,
        run.at.format("%Y-%m-%d %H:%M"),
        run.trigger,
        run.changes.len()
    )?;
    for c in &run.changes {
        writeln!(
            out,
            "  {:<18} {}  {}",
            c.rule.as_str(),
            c.action.item(),
            c.reason
        )?;
    }
    Ok(())
}
