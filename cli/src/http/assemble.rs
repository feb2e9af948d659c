//! The assembly routes: the memory block for a model call (the gateway's
//! per-turn call) and the briefing.

use actix_web::web;
use cairn::{
    AssembleRequest, AssembleSettings, AssembledContext, Briefing, Cairn, Destination, ReadAs,
    RetrievalMode,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::route::{Route, Scope};
use super::{ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        // A question, not a change: a read-scoped token may ask it.
        Route::new(Scope::Read, __path_assemble, assemble).hot(),
        Route::new(Scope::Read, __path_briefing, briefing),
    ]
}

/// Body of `POST .../assemble`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssembleBody {
    /// Session the model call is for.
    pub session: String,
    /// Token budget; the configured default when absent.
    #[serde(default)]
    pub budget_tokens: Option<usize>,
    /// The current turn or a query; the session's last user turn when absent.
    #[serde(default)]
    pub query: Option<String>,
    /// Where the block goes (`local_model` by default); the memory policy
    /// decides per destination.
    #[serde(default)]
    pub destination: Destination,
    /// Standing directives: always in the block.
    #[serde(default)]
    pub directives: Vec<String>,
    /// `hybrid` (default), `lexical` or `off`.
    #[serde(default)]
    pub retrieval: RetrievalMode,
    /// Rules for this call; `[assemble.settings]` when absent.
    #[serde(default)]
    pub settings: Option<AssembleSettings>,
    /// Whether the answer carries `trace` (every candidate, included or
    /// not, and why). `false` answers it empty: a gateway on its hot path
    /// reads the block, and every policy decision stays in the decision
    /// log either way. Default `true`.
    #[serde(default = "with_trace")]
    pub trace: bool,
}

fn with_trace() -> bool {
    true
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/assemble", request_body = AssembleBody,
    responses((status = 200, body = AssembledContext), (status = 404, body = ErrorBody)))]
async fn assemble(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<AssembleBody>,
) -> ApiResult<AssembledContext> {
    blocking(move || {
        let body = body.into_inner();
        let request = AssembleRequest {
            session: body.session,
            budget_tokens: body
                .budget_tokens
                .unwrap_or(cairn.config().assemble.default_budget_tokens),
            query: body.query,
            destination: body.destination,
            directives: body.directives,
            retrieval: body.retrieval,
            settings: body.settings,
        };
        let mut block = cairn.assemble(&ws, &request)?;
        if !body.trace {
            block.trace = Vec::new();
        }
        Ok(block)
    })
    .await
}

/// Query of `GET .../briefing`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
pub struct BriefingQuery {
    /// Only this work context (default: the whole workspace).
    pub work_context: Option<String>,
    /// The asking session: a sub-agent or cron session sees only entries
    /// from its lineage.
    pub asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

/// The briefing of the workspace (or one work context) at the server's
/// time: the `MEMORY.md` block as text (at most 80 lines) and the same
/// content as sections, each item with its entry references.
#[utoipa::path(get, path = "/v1/workspaces/{workspace}/briefing", params(BriefingQuery),
    responses((status = 200, body = Briefing), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn briefing(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    q: web::Query<BriefingQuery>,
) -> ApiResult<Briefing> {
    blocking(move || {
        let reader = ReadAs {
            asking: q.asking.as_deref(),
            destination: q.destination,
        };
        Ok(cairn.briefing(&ws, q.work_context.as_deref(), reader)?)
    })
    .await
}
