//! The session routes: bootstrap, list and read sessions, the lifecycle
//! hooks (after a turn, end, reset) and the transcript.

use actix_web::web;
use cairn::{Cairn, Destination, ReadAs, Session, SessionSpec, Turn};
use serde::Deserialize;

use super::route::{Route, Scope};
use super::{ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    use Scope::{Read, Write};
    vec![
        Route::new(Write, __path_bootstrap, bootstrap),
        Route::new(Read, __path_sessions, sessions),
        Route::new(Read, __path_session, session),
        Route::new(Write, __path_after_turn, after_turn),
        Route::new(Write, __path_session_end, session_end),
        Route::new(Write, __path_before_reset, before_reset),
        Route::new(Read, __path_transcript, transcript),
    ]
}

/// Query of `GET .../transcript`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct TranscriptQuery {
    /// First sequence number (default 0).
    #[serde(default)]
    pub from: u64,
    /// At most this many turns.
    #[serde(default)]
    pub limit: Option<usize>,
    /// The asking session: a sub-agent or cron session may read only its
    /// lineage (403 `lineage_denied` otherwise).
    #[serde(default)]
    pub asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

/// Query of `GET .../sessions`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SessionsQuery {
    /// Only sessions of this work context.
    #[serde(default)]
    pub work_context: Option<String>,
    /// The asking session: a sub-agent or cron session sees only its lineage.
    #[serde(default)]
    pub asking: Option<String>,
    /// Skip this many sessions of the listing (a page's start; default 0).
    #[serde(default)]
    pub offset: usize,
    /// At most this many sessions (default: all).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Query of the reads of one session or entry: who asks.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AskingQuery {
    /// The asking session: a sub-agent or cron session may read only its
    /// lineage (403 `lineage_denied` otherwise).
    #[serde(default)]
    pub asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

impl TranscriptQuery {
    pub(super) fn reader(&self) -> ReadAs<'_> {
        ReadAs {
            asking: self.asking.as_deref(),
            destination: self.destination,
        }
    }
}

impl AskingQuery {
    pub(super) fn reader(&self) -> ReadAs<'_> {
        ReadAs {
            asking: self.asking.as_deref(),
            destination: self.destination,
        }
    }
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions", request_body = SessionSpec,
    responses((status = 200, body = Session), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`work_context_mismatch`: the session exists in another work context; `lineage_mismatch`: it exists as another kind or with another parent (a main session without a parent may become a sub-agent; a lineage never widens)")))]
async fn bootstrap(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<SessionSpec>,
) -> ApiResult<Session> {
    blocking(move || Ok(cairn.bootstrap(&ws, &body)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions", params(SessionsQuery),
    responses((status = 200, body = Vec<Session>), (status = 404, body = ErrorBody)))]
async fn sessions(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    q: web::Query<SessionsQuery>,
) -> ApiResult<Vec<Session>> {
    blocking(move || {
        let all = cairn.sessions(&ws, q.work_context.as_deref(), q.asking.as_deref())?;
        let page = all.into_iter().skip(q.offset);
        Ok(match q.limit {
            Some(limit) => page.take(limit).collect(),
            None => page.collect(),
        })
    })
    .await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions/{session}", params(AskingQuery),
    responses((status = 200, body = Session), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn session(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
) -> ApiResult<Session> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.session(&ws, &sid, q.asking.as_deref())?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/after_turn",
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
async fn after_turn(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Session> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.after_turn(&ws, &sid)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/end",
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
async fn session_end(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Session> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.session_end(&ws, &sid)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/reset",
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
async fn before_reset(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Session> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.before_reset(&ws, &sid)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions/{session}/transcript", params(TranscriptQuery),
    responses((status = 200, body = Vec<Turn>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn transcript(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<TranscriptQuery>,
) -> ApiResult<Vec<Turn>> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.transcript(&ws, &sid, q.from, q.limit, q.reader())?)).await
}
