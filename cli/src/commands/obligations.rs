//! What the memory policy's obligations leave behind: `cairn audit` (the
//! audit records of uses it asked to audit) and `cairn confirmations`
//! (items it holds until the user confirms; `--grant ITEM` confirms one).

use std::io::Write;

use anyhow::Result;
use cairn::AuditQuery;

use super::Ctx;

/// `cairn audit`.
pub(crate) fn audit(
    cx: &Ctx<'_>,
    item: Option<String>,
    limit: usize,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let records = cx.cairn.audit(cx.ws_id, &AuditQuery { item, limit })?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&records)?)?;
        return Ok(());
    }
    for r in records {
        writeln!(
            out,
            "{}  {}  {:<13} {:<14} {:<15} {}  by {} (decision {})",
            r.id,
            r.at.format("%Y-%m-%d %H:%M:%S"),
            r.action,
            r.destination.as_deref().unwrap_or("-"),
            r.surface,
            r.item,
            r.principal,
            r.decision_id
        )?;
    }
    Ok(())
}

/// `cairn confirmations`.
pub(crate) fn confirmations(
    cx: &Ctx<'_>,
    grant: Option<String>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let shown = match grant {
        Some(item) => vec![cx.cairn.grant_confirmation(cx.ws_id, &item)?],
        None => cx.cairn.confirmations(cx.ws_id)?,
    };
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&shown)?)?;
        return Ok(());
    }
    for c in shown {
        let state = match c.granted_at {
            Some(at) => format!("granted {}", at.format("%Y-%m-%d %H:%M")),
            None => "pending".to_owned(),
        };
        writeln!(
            out,
            "{}  {}  (asked {} by {}, decision {})",
            c.item,
            state,
            c.requested_at.format("%Y-%m-%d %H:%M"),
            c.surface,
            c.decision_id
        )?;
    }
    Ok(())
}
