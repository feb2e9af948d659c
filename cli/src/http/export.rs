//! The export routes: a workspace (or one session) as a portable JSONL
//! bundle, and the import of such a bundle into a new or empty workspace
//! (see `cairn::export` for the bundle and what the memory policy does to
//! it).
//!
//! `GET …/export` is a read of everything the workspace holds, so it takes
//! the scope reading raw content takes (`GET …/sessions/{id}/transcript`):
//! a token that opens the workspace, read-scoped or not. The memory policy
//! still judges every object for `export`. `POST …/import` writes: the
//! write scope.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use cairn::{Cairn, Destination, ExportRequest, ImportReport};
use serde::Deserialize;

use super::route::{Route, Scope};
use super::{ApiError, ApiResult, ErrorBody, blocking};

/// The media type of a bundle.
const NDJSON: &str = "application/x-ndjson";

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    use Scope::{Read, Write};
    vec![
        Route::new(Read, __path_export, export),
        Route::new(Write, __path_import, import),
    ]
}

/// Query of `GET …/export`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
pub struct ExportQuery {
    /// Only this session (its turns, summaries and the entries captured
    /// from it); the whole workspace when absent.
    pub session: Option<String>,
    /// The destination the memory policy is asked about (default
    /// `user_visible_ui`; `share_link` for a bundle to be handed on).
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

/// The workspace as a bundle: one JSON record a line (header, sessions,
/// turns, summaries, compactions, entries, end). Every object is judged by
/// the memory policy for `export` to the destination: what it blocks is
/// left out (counted in `x-cairn-left-out`), what it redacts or references
/// is written so.
#[utoipa::path(get, path = "/v1/workspaces/{workspace}/export", params(ExportQuery),
    responses(
        (status = 200, description = "The bundle (JSON Lines)", content_type = "application/x-ndjson", body = String,
            headers(("x-cairn-records" = usize, description = "Lines in the bundle"),
                    ("x-cairn-left-out" = usize, description = "Objects the memory policy left out"))),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn export(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    q: web::Query<ExportQuery>,
) -> HttpResponse {
    let ws = ws.into_inner();
    let q = q.into_inner();
    let request = ExportRequest {
        session: q.session,
        destination: q.destination,
    };
    let made = web::block(move || {
        let mut bundle = Vec::new();
        cairn
            .export(&ws, &request, &mut bundle)
            .map(|report| (bundle, report))
    })
    .await;
    match made {
        Ok(Ok((bundle, report))) => HttpResponse::Ok()
            .content_type(NDJSON)
            .insert_header(("x-cairn-records", report.records.to_string()))
            .insert_header(("x-cairn-left-out", report.left_out.total().to_string()))
            .body(bundle),
        Ok(Err(e)) => ApiError::from(e).error_response(),
        Err(e) => ApiError::worker_failed(e).error_response(),
    }
}

/// Imports a bundle made by `GET …/export` (or `cairn export`) into this
/// workspace, which must hold no session and no entry. The whole bundle is
/// checked first (`invalid_bundle` names the line and what is wrong;
/// nothing is written); then the indexes are rebuilt.
#[utoipa::path(post, path = "/v1/workspaces/{workspace}/import",
    request_body(content = String, content_type = "application/x-ndjson",
        description = "The bundle (JSON Lines)"),
    responses((status = 200, body = ImportReport), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`workspace_not_empty`: the workspace already holds a session or an entry"),
        (status = 413, body = ErrorBody)))]
async fn import(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    req: HttpRequest,
    mut payload: web::Payload,
) -> ApiResult<ImportReport> {
    use futures_util::StreamExt;
    let max = cairn.config().server.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the bundle is larger than server.max_body_bytes ({max})"),
        )
    };
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|size| size > max) {
        return Err(too_large());
    }
    let mut bundle = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?;
        if bundle.len() + chunk.len() > max {
            return Err(too_large());
        }
        bundle.extend_from_slice(&chunk);
    }
    let ws = ws.into_inner();
    blocking(move || Ok(cairn.import(&ws, &mut bundle.as_ref())?)).await
}
