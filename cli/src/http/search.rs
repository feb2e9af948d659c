//! The search routes: the memory tools' reads (search, an item, a
//! transcript) and the index statistics.

use actix_web::{HttpMessage, HttpRequest, web};
use cairn::search::IndexStats;
use cairn::{Cairn, Destination, MemoryItem, ReadAs, SearchRequest, SearchResponse, Transcript};
use serde::Deserialize;

use super::guard::Principal;
use super::route::{Route, Scope};
use super::{ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        // A question, not a change: a read-scoped token may ask it.
        Route::new(Scope::Read, __path_memory_search, memory_search),
        Route::new(Scope::Read, __path_memory_get, memory_get),
        Route::new(Scope::Read, __path_read_transcript, read_transcript),
        Route::new(Scope::Admin, __path_index_stats, index_stats),
    ]
}

/// Query of the memory-tool reads (`memory_get`, `read_transcript`).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ToolQuery {
    /// First sequence number (transcripts; default 0).
    #[serde(default)]
    pub from: u64,
    /// The asking session (sub-agent sessions see only their lineage).
    #[serde(default)]
    pub session: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

impl ToolQuery {
    pub(super) fn reader(&self) -> ReadAs<'_> {
        ReadAs {
            asking: self.session.as_deref(),
            destination: self.destination,
        }
    }
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/search", request_body = SearchRequest,
    responses((status = 200, body = SearchResponse), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn memory_search(
    req: HttpRequest,
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<SearchRequest>,
) -> ApiResult<SearchResponse> {
    let mut request = body.into_inner();
    // With tokens, the search rate limit counts the token with the name the
    // client puts in `caller` (each agent of a gateway its own budget); the
    // token as a whole is bounded by `server.requests_per_minute`.
    if let Some(key) = req
        .extensions()
        .get::<Principal>()
        .and_then(Principal::rate_key)
    {
        let caller = request.caller.as_deref().unwrap_or("-");
        request.caller = Some(format!("{key}/{caller}"));
    }
    blocking(move || Ok(cairn.memory_search(&ws, &request)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/items/{id}", params(ToolQuery),
    responses((status = 200, body = MemoryItem), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn memory_get(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<MemoryItem> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.memory_get(&ws, &id, q.reader())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions/{session}/read_transcript", params(ToolQuery),
    responses((status = 200, body = Transcript), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn read_transcript(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<Transcript> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.read_transcript(&ws, &sid, q.from, q.reader())?)).await
}

#[utoipa::path(get, path = "/v1/stats/index", responses((status = 200, body = IndexStats)))]
async fn index_stats(cairn: web::Data<Cairn>) -> ApiResult<IndexStats> {
    blocking(move || Ok(cairn.index_stats()?)).await
}
