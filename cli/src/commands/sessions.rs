//! The session commands: ingest, transcript, sessions, capture, brief.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;

use super::Ctx;
use crate::{on_screen, print_capture, read_turns};

/// `cairn ingest`.
pub(crate) fn ingest(cx: &Ctx<'_>, file: Option<PathBuf>, out: &mut impl Write) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let turns = read_turns(file.as_deref())?;
    // The whole file is checked before the first write: a bad line
    // after thousands of good ones leaves nothing written.
    cairn.validate_turns(&turns)?;
    // Through the session actors, as a gateway's turns: the gate
    // judges each one and the work contexts are marked dirty.
    let limit = cairn.config().memory.limits.max_batch.max(1);
    let (mut written, mut duplicates) = (0usize, 0usize);
    for chunk in turns.chunks(limit) {
        for ack in cairn.ingest(ws_id, chunk)? {
            if ack.duplicate {
                duplicates += 1;
            } else {
                written += 1;
            }
        }
    }
    writeln!(
        out,
        "ingested {written} turns ({duplicates} duplicates skipped) into workspace {ws_id}"
    )?;
    Ok(())
}

/// `cairn transcript`.
pub(crate) fn transcript(
    cx: &Ctx<'_>,
    session: String,
    from: u64,
    limit: Option<usize>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Ctx {
        cairn,
        ws_id,
        asking,
    } = *cx;
    let turns = cairn.transcript(ws_id, &session, from, limit, on_screen(asking))?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&turns)?)?;
    } else {
        for t in turns {
            let tool = t
                .tool_call_id
                .map(|id| format!(" ({id})"))
                .unwrap_or_default();
            writeln!(
                out,
                "[{}] {} {}{}: {}",
                t.seq,
                t.timestamp.format("%Y-%m-%d %H:%M:%S"),
                t.role.as_str(),
                tool,
                t.content
            )?;
        }
    }
    Ok(())
}

/// `cairn sessions`.
pub(crate) fn sessions(
    cx: &Ctx<'_>,
    work_context: Option<String>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Ctx {
        cairn,
        ws_id,
        asking,
    } = *cx;
    let sessions = cairn.sessions(ws_id, work_context.as_deref(), asking)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&sessions)?)?;
    } else {
        for s in sessions {
            writeln!(
                out,
                "{}  work_context={} kind={:?} turns={} state={:?}",
                s.id, s.work_context, s.kind, s.next_seq, s.state
            )?;
        }
    }
    Ok(())
}

/// `cairn capture`.
pub(crate) fn capture(
    cx: &Ctx<'_>,
    work_context: Option<String>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let reports = cairn.capture(ws_id, work_context.as_deref())?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&reports)?)?;
    } else {
        for report in &reports {
            print_capture(out, report)?;
        }
    }
    Ok(())
}

/// `cairn brief`.
pub(crate) fn brief(
    cx: &Ctx<'_>,
    work_context: Option<String>,
    write: Option<PathBuf>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let briefing = cairn.briefing(ws_id, work_context.as_deref(), on_screen(None))?;
    match write {
        Some(path) => {
            let done = cairn_cli::brief::write_briefing(&path, &briefing.text)?;
            let what = match done {
                cairn_cli::brief::Written::Created => "created",
                cairn_cli::brief::Written::Updated => "updated",
                cairn_cli::brief::Written::Unchanged => "unchanged",
            };
            writeln!(
                out,
                "{what} {} ({} lines between the markers)",
                path.display(),
                briefing.lines
            )?;
        }
        None if json => writeln!(out, "{}", serde_json::to_string_pretty(&briefing)?)?,
        None => write!(out, "{}", briefing.text)?,
    }
    Ok(())
}
