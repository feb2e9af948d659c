//! The maintenance routes of `cairn serve`: run (or preview) maintenance,
//! list runs, undo one, restore an archived item; each a `Cairn` method run
//! on the blocking pool, behind the same guard as every workspace route.

use actix_web::web;
use cairn::Cairn;
use cairn::maintain::{
    ArchivedItem, MaintainOptions, MaintainTrigger, MaintenanceReport, MaintenanceRun,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::route::{Route, Scope};
use super::{ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    use Scope::{Read, Write};
    vec![
        Route::new(Write, __path_maintain, maintain),
        Route::new(Read, __path_runs, runs),
        Route::new(Read, __path_run, run),
        Route::new(Write, __path_undo, undo),
        Route::new(Write, __path_restore, restore),
    ]
}

/// Body of `POST .../maintain` (every field optional).
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MaintainBody {
    /// Report what would change; write nothing.
    pub dry_run: bool,
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/maintain", request_body = MaintainBody,
    responses((status = 200, body = MaintenanceReport), (status = 404, body = ErrorBody)))]
pub(crate) async fn maintain(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<MaintainBody>,
) -> ApiResult<MaintenanceReport> {
    let dry_run = body.dry_run;
    blocking(move || {
        let options = MaintainOptions {
            dry_run,
            trigger: MaintainTrigger::Manual,
        };
        Ok(cairn.maintain(&ws, options)?)
    })
    .await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/maintain/runs",
    responses((status = 200, body = Vec<MaintenanceRun>), (status = 404, body = ErrorBody)))]
pub(crate) async fn runs(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
) -> ApiResult<Vec<MaintenanceRun>> {
    blocking(move || Ok(cairn.maintenance_runs(&ws)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/maintain/runs/{run}",
    responses((status = 200, body = MaintenanceRun), (status = 404, body = ErrorBody)))]
pub(crate) async fn run(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<MaintenanceRun> {
    let (ws, run) = path.into_inner();
    blocking(move || Ok(cairn.maintenance_run(&ws, &run)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/maintain/runs/{run}/undo",
    responses((status = 200, body = MaintenanceRun), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(crate) async fn undo(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<MaintenanceRun> {
    let (ws, run) = path.into_inner();
    blocking(move || Ok(cairn.undo_maintenance(&ws, &run)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/maintain/restore", request_body = ArchivedItem,
    responses((status = 200, body = MaintenanceReport), (status = 409, body = ErrorBody)))]
pub(crate) async fn restore(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<ArchivedItem>,
) -> ApiResult<MaintenanceReport> {
    blocking(move || Ok(cairn.restore(&ws, &body)?)).await
}
