//! The access-token commands: tokens create, list, revoke.

use std::io::Write;

use anyhow::Result;

use super::Ctx;
use crate::TokenAction;

/// `cairn tokens`.
pub(crate) fn tokens(cx: &Ctx<'_>, action: TokenAction, out: &mut impl Write) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    match action {
        TokenAction::Create { scope, label, json } => {
            let (made, token) = cairn.create_token(ws_id, scope, label.as_deref())?;
            if json {
                let mut shown = serde_json::to_value(&made)?;
                shown["token"] = serde_json::Value::String(token);
                writeln!(out, "{}", serde_json::to_string_pretty(&shown)?)?;
            } else {
                writeln!(out, "{token}")?;
                eprintln!(
                    "token {} opens workspace {} ({}); it is shown this once",
                    made.id,
                    made.workspace,
                    made.scope.as_str()
                );
            }
        }
        TokenAction::List { json } => {
            let all = cairn.tokens()?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&all)?)?;
            } else {
                for t in all {
                    writeln!(
                        out,
                        "{}  {:<5}  {}  {}  {}",
                        t.id,
                        t.scope.as_str(),
                        t.workspace,
                        t.created_at.format("%Y-%m-%d %H:%M"),
                        t.label.unwrap_or_default()
                    )?;
                }
            }
        }
        TokenAction::Revoke { id } => {
            let revoked = cairn.revoke_token(&id)?;
            writeln!(
                out,
                "revoked {} (workspace {})",
                revoked.id, revoked.workspace
            )?;
        }
    }
    Ok(())
}
