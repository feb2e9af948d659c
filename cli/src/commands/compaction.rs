//! The compaction commands: compact, expand.

use std::io::Write;

use anyhow::Result;

use super::Ctx;
use crate::{on_screen, print_turn, print_turns};

/// `cairn compact`.
pub(crate) fn compact(
    cx: &Ctx<'_>,
    session: String,
    budget: Option<usize>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let report = cairn.compact(ws_id, &session, budget)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        writeln!(
            out,
            "{}: {} -> {} tokens (budget {}), {} summar(y/ies) made, {} cluster(s) declined, tail from turn {}",
            report.session,
            report.tokens_before,
            report.tokens_after,
            report.budget_tokens,
            report.created.len(),
            report.declined,
            report.tail_from
        )?;
        for cover in &report.view.items {
            match cover {
                cairn::Cover::Summary { id } => writeln!(out, "  {id}")?,
                cairn::Cover::Turns { from, to } => writeln!(out, "  turns {from}-{to} (raw)")?,
            }
        }
    }
    Ok(())
}

/// `cairn expand`.
pub(crate) fn expand(
    cx: &Ctx<'_>,
    summary: String,
    all: bool,
    from: u64,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Ctx {
        cairn,
        ws_id,
        asking,
    } = *cx;
    if all {
        let t = cairn.expand_all(ws_id, &summary, from, on_screen(asking))?;
        if json {
            writeln!(out, "{}", serde_json::to_string_pretty(&t)?)?;
        } else {
            print_turns(out, &t)?;
        }
    } else {
        let e = cairn.memory_expand(ws_id, &summary, on_screen(asking))?;
        if json {
            writeln!(out, "{}", serde_json::to_string_pretty(&e)?)?;
        } else {
            writeln!(
                out,
                "{} level {} turns {}-{} ({}, {} -> {} tokens)\n{}",
                e.node.id,
                e.node.level,
                e.node.from_seq,
                e.node.to_seq,
                e.node.method.as_str(),
                e.node.tokens_before,
                e.node.tokens_after,
                e.node.text
            )?;
            for child in &e.children {
                match child {
                    cairn::Expanded::Turns { turns } => {
                        for turn in turns {
                            print_turn(out, turn)?;
                        }
                    }
                    cairn::Expanded::Summary { node } => writeln!(
                        out,
                        "{} level {} turns {}-{}",
                        node.id, node.level, node.from_seq, node.to_seq
                    )?,
                }
            }
        }
    }
    Ok(())
}
