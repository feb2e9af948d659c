//! The search commands: search, get, stats.

use std::io::Write;

use anyhow::Result;
use cairn::Destination;

use super::Ctx;
use crate::{ModeArg, on_screen, print_turns};

/// `cairn search`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct SearchArgs {
    /// The question (any text).
    pub(crate) query: String,
    /// Results wanted.
    #[arg(long, default_value_t = 10)]
    pub(crate) k: usize,
    /// bm25, dense or hybrid.
    #[arg(long, value_enum, default_value_t = ModeArg::Hybrid)]
    pub(crate) mode: ModeArg,
    /// Caller name for rate limiting.
    #[arg(long)]
    pub(crate) caller: Option<String>,
    /// The asking session (a sub-agent sees only its lineage).
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// Only items from this session (repeatable).
    #[arg(long = "in-session")]
    pub(crate) in_session: Vec<String>,
    /// Only this work context.
    #[arg(long)]
    pub(crate) work_context: Option<String>,
    /// `turn`, `entry`, or an entry kind (decision, task, fact…).
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only entries about this subject.
    #[arg(long)]
    pub(crate) subject: Option<String>,
    /// Only turns with this role (user, assistant, system, tool).
    #[arg(long)]
    pub(crate) role: Option<String>,
    /// Only turns this topic collected.
    #[arg(long)]
    pub(crate) topic: Option<String>,
    /// Only items at or after this time (RFC 3339).
    #[arg(long)]
    pub(crate) since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only items before this time (RFC 3339).
    #[arg(long)]
    pub(crate) until: Option<chrono::DateTime<chrono::Utc>>,
    /// Also return entries replaced by a later entry.
    #[arg(long)]
    pub(crate) include_replaced: bool,
    /// Also return entries past their time-to-live.
    #[arg(long)]
    pub(crate) include_expired: bool,
    /// Also return what maintenance archived (old entries and turns).
    #[arg(long)]
    pub(crate) include_archived: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `cairn search`.
pub(crate) fn search(cx: &Ctx<'_>, args: SearchArgs, out: &mut impl Write) -> Result<()> {
    let Ctx { cairn, ws_id, .. } = *cx;
    let SearchArgs {
        query,
        k,
        mode,
        caller,
        session,
        in_session,
        work_context,
        kind,
        subject,
        role,
        topic,
        since,
        until,
        include_replaced,
        include_expired,
        include_archived,
        json,
    } = args;
    let role = match role {
        Some(r) => Some(
            serde_json::from_value::<cairn::Role>(serde_json::Value::String(r.clone())).map_err(
                |_| anyhow::anyhow!("unknown role {r:?}: expected user, assistant, system or tool"),
            )?,
        ),
        None => None,
    };
    // A CLI process builds its index now (vectors stored by earlier
    // runs are reused, not recomputed).
    cairn.catch_up_search()?;
    let mode = match mode {
        ModeArg::Bm25 => cairn::search::SearchMode::Bm25,
        ModeArg::Dense => cairn::search::SearchMode::Dense,
        ModeArg::Hybrid => cairn::search::SearchMode::Hybrid,
    };
    let request = cairn::SearchRequest {
        query,
        k: Some(k),
        mode: Some(mode),
        caller,
        session,
        sessions: (!in_session.is_empty()).then_some(in_session),
        work_context,
        kind,
        subject,
        role,
        topic,
        since,
        until,
        include_replaced,
        include_expired,
        include_archived,
        destination: Some(Destination::UserVisibleUi),
        ..cairn::SearchRequest::default()
    };
    let r = cairn.memory_search(ws_id, &request)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
    } else {
        if let Some(notice) = &r.notice {
            writeln!(out, "note: {notice}")?;
        }
        for item in &r.items {
            let rank = |r: Option<usize>| r.map_or("-".to_owned(), |r| (r + 1).to_string());
            let what = match (item.kind, &item.subject) {
                (Some(k), Some(s)) => format!("{k} about {s}"),
                (Some(k), None) => k.to_string(),
                _ => item.role.map_or("turn", |r| r.as_str()).to_owned(),
            };
            writeln!(
                out,
                "{:.3}  {}  {}  (lexical #{}, vector #{}){}{}{}{}\n       {}",
                item.score,
                item.id,
                what,
                rank(item.lexical_rank),
                rank(item.vector_rank),
                if item.low_trust { " [low trust]" } else { "" },
                if item.replaced { " [replaced]" } else { "" },
                if item.expired { " [expired]" } else { "" },
                if item.archived { " [archived]" } else { "" },
                item.snippet
            )?;
        }
    }
    Ok(())
}

/// `cairn get`.
pub(crate) fn get(cx: &Ctx<'_>, id: String, json: bool, out: &mut impl Write) -> Result<()> {
    let Ctx {
        cairn,
        ws_id,
        asking,
    } = *cx;
    let item = cairn.memory_get(ws_id, &id, on_screen(asking))?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&item)?)?;
    } else {
        match item {
            cairn::MemoryItem::Entry { entry } => {
                writeln!(
                    out,
                    "{} [{:?}] {}",
                    entry.entry.id, entry.entry.kind, entry.entry.content
                )?;
            }
            cairn::MemoryItem::Turns(t) => print_turns(out, &t)?,
        }
    }
    Ok(())
}

/// `cairn stats`.
pub(crate) fn stats(cx: &Ctx<'_>, json: bool, out: &mut impl Write) -> Result<()> {
    let Ctx { cairn, .. } = *cx;
    // The backlog a fresh process finds, then the state after this
    // run's catch-up (which embeds only what was never embedded).
    let before = cairn.index_stats()?;
    cairn.catch_up_search()?;
    let stats = cairn.index_stats()?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&stats)?)?;
    } else {
        writeln!(
            out,
            "backlog at start: {} turns, {} entries\nindexed turns: {}\nindexed entries: {}\nvectors: {}\nbacklog: {} turns, {} entries\nembedded this run: {}\nvectors reused from the store: {}\nembeddings: {}",
            before.backlog,
            before.entry_backlog,
            stats.indexed,
            stats.entries,
            stats.vectors,
            stats.backlog,
            stats.entry_backlog,
            stats.embedded,
            stats.reused,
            if stats.embeddings {
                "on"
            } else {
                "off (lexical only)"
            }
        )?;
    }
    Ok(())
}
