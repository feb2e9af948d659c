//! `cairn export` (a workspace, or one session, as a portable bundle) and
//! `cairn import` (such a bundle into a new or empty workspace), through
//! the `Cairn` facade: the memory policy judges every exported object.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use cairn::{Cairn, Destination, ExportReport, ExportRequest, ImportReport};
use clap::Args;

/// `cairn export` flags.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// Only this session (its turns, summaries and the entries captured
    /// from it).
    #[arg(long, value_name = "SESSION")]
    session: Option<String>,
    /// Where to write the bundle: a file (written to a temporary file
    /// beside it and renamed into place), or `-` for stdout (the default).
    #[arg(long, value_name = "FILE", default_value = "-")]
    out: PathBuf,
    /// The destination the memory policy is asked about (default
    /// user_visible_ui; share_link for a bundle to be handed on).
    #[arg(long, value_name = "DESTINATION")]
    destination: Option<String>,
    /// Print the report as JSON (on stderr when the bundle goes to stdout).
    #[arg(long)]
    json: bool,
}

/// `cairn import` flags.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The bundle (`-`: stdin).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn export(cairn: &Cairn, ws_id: &str, args: ExportArgs) -> Result<()> {
    let destination = match &args.destination {
        Some(d) => Some(Destination::parse(d).with_context(|| {
            format!("unknown destination {d:?}; use local_model, cloud_model, external_llm, subagent, share_link, task_runtime or user_visible_ui")
        })?),
        None => None,
    };
    let request = ExportRequest {
        session: args.session,
        destination,
    };
    if args.out.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let report = cairn.export(ws_id, &request, &mut out)?;
        out.flush()?;
        return print_export(&mut std::io::stderr().lock(), &report, args.json, None);
    }
    let report = cairn.export_to_file(ws_id, &request, &args.out)?;
    print_export(
        &mut std::io::stdout().lock(),
        &report,
        args.json,
        Some(&args.out),
    )
}

fn print_export(
    out: &mut impl Write,
    r: &ExportReport,
    json: bool,
    file: Option<&std::path::Path>,
) -> Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(r)?)?;
        return Ok(());
    }
    let to = file.map_or("stdout".to_owned(), |f| f.display().to_string());
    writeln!(
        out,
        "exported {} records of workspace {} to {to} (for {}): full {}, redacted {}, reference-only {}; left out by the memory policy: {} sessions, {} turns, {} entries, {} summaries",
        r.records,
        r.workspace,
        r.destination.as_str(),
        r.full.total(),
        r.redacted.total(),
        r.reference_only.total(),
        r.left_out.sessions,
        r.left_out.turns,
        r.left_out.entries,
        r.left_out.summaries,
    )?;
    Ok(())
}

pub(crate) fn import(
    cairn: &Cairn,
    ws_id: &str,
    args: ImportArgs,
    out: &mut impl Write,
) -> Result<()> {
    let report = if args.file.as_os_str() == "-" {
        cairn.import(ws_id, &mut std::io::stdin().lock())?
    } else {
        cairn.import_file(ws_id, &args.file)?
    };
    print_import(out, &report, args.json)
}

fn print_import(out: &mut impl Write, r: &ImportReport, json: bool) -> Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(r)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "imported {} records of workspace {} into {}: {} sessions, {} turns ({} placeholders), {} entries, {} summaries, {} compactions; indexes rebuilt",
        r.records,
        r.from_workspace,
        r.workspace,
        r.sessions,
        r.turns,
        r.placeholders,
        r.entries,
        r.summaries,
        r.compactions,
    )?;
    Ok(())
}
