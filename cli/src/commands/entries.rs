//! The memory-log commands beside `cairn log`: subjects, pin.

use std::io::Write;

use anyhow::Result;

use super::Ctx;
use crate::SubjectAction;

/// `cairn subjects`.
pub(crate) fn subjects(
    cx: &Ctx<'_>,
    action: Option<SubjectAction>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let subject = match action {
        None => {
            let subjects = cairn.subjects(ws_id)?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&subjects)?)?;
            } else {
                for s in subjects {
                    let aliases = if s.aliases.is_empty() {
                        String::new()
                    } else {
                        format!("  (aliases: {})", s.aliases.join(", "))
                    };
                    writeln!(out, "{}  {:?} \"{}\"{}", s.slug, s.kind, s.display, aliases)?;
                }
            }
            return Ok(());
        }
        Some(SubjectAction::Add {
            slug,
            kind,
            display,
        }) => cairn.add_subject(ws_id, &slug, kind, display.as_deref())?,
        Some(SubjectAction::Rename { old, new }) => cairn.rename_subject(ws_id, &old, &new)?,
        Some(SubjectAction::Merge { from, into }) => cairn.merge_subjects(ws_id, &from, &into)?,
    };
    writeln!(out, "{}", serde_json::to_string_pretty(&subject)?)?;
    Ok(())
}

/// `cairn pin`.
pub(crate) fn pin(cx: &Ctx<'_>, entry: String, remove: bool, out: &mut impl Write) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    if remove {
        cairn.unpin(ws_id, &entry)?;
    } else {
        cairn.pin(ws_id, &entry)?;
    }
    writeln!(out, "pinned: {}", cairn.pinned(ws_id)?.join(", "))?;
    Ok(())
}
