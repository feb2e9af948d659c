//! The assemble command.

use std::io::Write;

use anyhow::{Context, Result};
use cairn::AssembleRequest;

use super::Ctx;
use crate::print_block;

/// `cairn assemble`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct AssembleArgs {
    /// Session id.
    pub(crate) session: String,
    /// Token budget (default: the configuration's).
    #[arg(long)]
    pub(crate) budget: Option<usize>,
    /// Also print why each candidate is in or out.
    #[arg(long)]
    pub(crate) explain: bool,
    /// Print JSON (block and trace).
    #[arg(long)]
    pub(crate) json: bool,
    /// The current turn or a query (default: the session's last user turn).
    #[arg(long)]
    pub(crate) query: Option<String>,
    /// Where the block goes: local_model, cloud_model, external_llm,
    /// subagent, share_link, task_runtime, user_visible_ui.
    #[arg(long, default_value = "local_model")]
    pub(crate) destination: String,
    /// A standing directive (repeatable): always in the block.
    #[arg(long = "directive", value_name = "TEXT")]
    pub(crate) directives: Vec<String>,
    /// Retrieval: hybrid (default), lexical or off.
    #[arg(long, default_value = "hybrid")]
    pub(crate) retrieval: String,
}

/// `cairn assemble`.
pub(crate) fn assemble(cx: &Ctx<'_>, args: AssembleArgs, out: &mut impl Write) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let AssembleArgs {
        session,
        budget,
        explain,
        json,
        query,
        destination,
        directives,
        retrieval,
    } = args;
    let budget = budget.unwrap_or(cairn.config().assemble.default_budget_tokens);
    let destination = cairn::Destination::parse(&destination).with_context(|| {
        format!("unknown destination {destination:?}; use local_model, cloud_model, external_llm, subagent, share_link, task_runtime or user_visible_ui")
    })?;
    let retrieval = match retrieval.as_str() {
        "hybrid" => cairn::RetrievalMode::Hybrid,
        "lexical" => cairn::RetrievalMode::Lexical,
        "off" => cairn::RetrievalMode::Off,
        other => anyhow::bail!("unknown retrieval {other:?}; use hybrid, lexical or off"),
    };
    if retrieval != cairn::RetrievalMode::Off {
        // A fresh process: index the record before retrieving.
        cairn.catch_up_search()?;
    }
    let mut request = AssembleRequest::new(&session, budget);
    request.query = query;
    request.destination = destination;
    request.directives = directives;
    request.retrieval = retrieval;
    let block = cairn.assemble(ws_id, &request)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&block)?)?;
    } else {
        print_block(out, &block, explain)?;
    }
    Ok(())
}
