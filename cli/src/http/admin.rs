//! The server's own routes: its health (open, like the description it
//! serves), the gateway's start hook and the cluster as this node sees it.

use actix_web::http::Method;
use actix_web::{HttpResponse, web};
use cairn::{Cairn, GatewayStartReport, Health};
use serde::Serialize;

use super::route::{Route, Scope};
use super::{ApiResult, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        Route::new(Scope::Open, __path_healthz, healthz),
        Route::undescribed(&[Method::GET], "/openapi.json", Scope::Open, openapi),
        Route::new(Scope::Admin, __path_gateway_start, gateway_start),
        Route::new(Scope::Admin, __path_cluster_status, cluster_status),
    ]
}

#[utoipa::path(get, path = "/healthz", responses((status = 200, body = Health)))]
async fn healthz(cairn: web::Data<Cairn>) -> web::Json<Health> {
    web::Json(cairn.health())
}

#[utoipa::path(post, path = "/v1/gateway_start", responses((status = 200, body = GatewayStartReport)))]
async fn gateway_start(cairn: web::Data<Cairn>) -> ApiResult<GatewayStartReport> {
    blocking(move || Ok(cairn.gateway_start()?)).await
}

/// `GET /v1/cluster`: `clustered` says whether this node is one of several
/// sharing a PostgreSQL database (`storage.cluster`); when it is, the rest
/// of the object is the cluster as this node sees it (nodes, leases, the
/// workspaces it holds, its take-overs).
#[derive(Debug, Serialize)]
struct ClusterView {
    clustered: bool,
    #[serde(flatten)]
    status: Option<cairn::ClusterStatus>,
}

#[utoipa::path(get, path = "/v1/cluster",
    responses((status = 200, description = "`{\"clustered\": false}` outside a cluster; \
        else the cluster as this node sees it", body = Object)))]
async fn cluster_status(cairn: web::Data<Cairn>) -> ApiResult<ClusterView> {
    blocking(move || {
        let status = cairn.cluster_status()?;
        Ok(ClusterView {
            clustered: status.is_some(),
            status,
        })
    })
    .await
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(super::api_doc())
}
