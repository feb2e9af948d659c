//! The erasure commands: forget, tombstones.

use std::io::Write;

use anyhow::Result;
use cairn::ForgetTarget;

use super::Ctx;
use crate::ForgetKind;

/// `cairn forget`.
pub(crate) fn forget(
    cx: &Ctx<'_>,
    target: ForgetKind,
    id: String,
    reason: String,
    out: &mut impl Write,
) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let tombstone = match target {
        // `forget workspace ID` erases that workspace, whatever
        // `--workspace` says: the call is made on ID itself.
        ForgetKind::Workspace => {
            cairn.forget(&id, &ForgetTarget::Workspace(id.clone()), &reason)?
        }
        ForgetKind::Session => cairn.forget(ws_id, &ForgetTarget::Session(id), &reason)?,
        ForgetKind::Entry => cairn.forget(ws_id, &ForgetTarget::Entry(id), &reason)?,
        ForgetKind::Subject => cairn.forget(ws_id, &ForgetTarget::Subject(id), &reason)?,
    };
    writeln!(out, "{}", serde_json::to_string_pretty(&tombstone)?)?;
    Ok(())
}

/// `cairn tombstones`.
pub(crate) fn tombstones(cx: &Ctx<'_>, json: bool, out: &mut impl Write) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let all = cairn.tombstones(ws_id)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&all)?)?;
    } else {
        for t in all {
            writeln!(
                out,
                "{}  {}  {}  {} {}  reason={:?}  removed={:?}",
                t.id,
                t.at.format("%Y-%m-%d %H:%M:%S"),
                t.workspace,
                t.target.kind,
                t.target.digest,
                t.reason,
                t.removed
            )?;
        }
    }
    Ok(())
}
