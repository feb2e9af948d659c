//! The turn routes: append turns (the gateway's per-turn call) and
//! capture them into memory-log entries.

use actix_web::web;
use cairn::{Ack, Cairn, CaptureReport, TurnInput};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::route::{Route, Scope};
use super::{ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        Route::new(Scope::Write, __path_ingest, ingest).hot(),
        Route::new(Scope::Write, __path_capture, capture),
    ]
}

/// Body of `POST .../turns`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestBody {
    /// Turns to append atomically.
    pub turns: Vec<TurnInput>,
}

/// Answer of `POST .../turns`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct IngestReply {
    /// One acknowledgement per turn, in order.
    pub acks: Vec<Ack>,
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/turns", request_body = IngestBody,
    responses((status = 200, body = IngestReply), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`work_context_mismatch`: a turn names another work context than its session's")))]
async fn ingest(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<IngestBody>,
) -> ApiResult<IngestReply> {
    // Awaited on this worker: the session actor does the durable write on
    // its own pool, so a blocking-pool hop here would only add two thread
    // hand-offs per call.
    let acks = cairn.ingest_async(&ws, &body.turns).await?;
    Ok(web::Json(IngestReply { acks }))
}

/// What `POST …/capture` takes: a work context, or none for all of them.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
struct CaptureRequest {
    /// Work context to capture; every work context of the workspace when absent.
    work_context: Option<String>,
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/capture",
    request_body = CaptureRequest,
    responses((status = 200, body = Vec<CaptureReport>), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
async fn capture(
    cairn: web::Data<Cairn>,
    path: web::Path<String>,
    body: web::Json<CaptureRequest>,
) -> ApiResult<Vec<CaptureReport>> {
    let ws = path.into_inner();
    let request = body.into_inner();
    blocking(move || Ok(cairn.capture(&ws, request.work_context.as_deref())?)).await
}
