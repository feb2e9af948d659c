//! The compaction routes: the compaction hook, a compaction pass, the
//! session's compacted view, and the expansion of a summary.

use actix_web::web;
use cairn::{Cairn, CompactReport, CompactionHookReport, CompactionView, Expansion, Transcript};
use serde::Deserialize;
use utoipa::ToSchema;

use super::route::{Route, Scope};
use super::search::ToolQuery;
use super::{ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    use Scope::{Read, Write};
    vec![
        Route::new(Write, __path_before_compaction, before_compaction),
        Route::new(Write, __path_compact, compact),
        Route::new(Read, __path_compaction_view, compaction_view),
        Route::new(Read, __path_memory_expand, memory_expand),
        Route::new(Read, __path_expand_all, expand_all),
    ]
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/compact",
    responses((status = 200, body = CompactionHookReport), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
async fn before_compaction(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<CompactionHookReport> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.before_compaction(&ws, &sid)?)).await
}

/// Body of a compaction pass without the hook's capture.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactionRequest {
    /// Tokens the session's view should fit in (default: the configuration's).
    #[serde(default)]
    pub budget: Option<usize>,
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/compaction",
    request_body = CompactionRequest,
    responses((status = 200, body = CompactReport), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
async fn compact(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<CompactionRequest>,
) -> ApiResult<CompactReport> {
    let (ws, sid) = path.into_inner();
    let budget = body.into_inner().budget;
    blocking(move || Ok(cairn.compact(&ws, &sid, budget)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions/{session}/compaction", params(ToolQuery),
    responses((status = 200, body = CompactionView), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn compaction_view(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<CompactionView> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.compaction_view(&ws, &sid, q.session.as_deref())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/summaries/{id}", params(ToolQuery),
    responses((status = 200, body = Expansion), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn memory_expand(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<Expansion> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.memory_expand(&ws, &id, q.reader())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/summaries/{id}/turns", params(ToolQuery),
    responses((status = 200, body = Transcript), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn expand_all(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<Transcript> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.expand_all(&ws, &id, q.from, q.reader())?)).await
}
