//! What the memory policy's obligations leave behind: the audit records of
//! uses it asked to audit, and the confirmations it asked the user for.
//!
//! Reading either takes a token that opens the workspace. Granting a
//! confirmation is the user's answer, given through the gateway that holds
//! the admin token: an agent's workspace token, even write-scoped, cannot
//! release what the policy held for the user.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use cairn::{AuditQuery, AuditRecord, Cairn, Confirmation};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::guard::Principal;
use super::route::{Route, Scope};
use super::{ApiError, ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    use Scope::{Read, Write};
    vec![
        Route::new(Read, __path_audit, audit),
        Route::new(Read, __path_confirmations, confirmations),
        // Write for the guard; the handler wants the admin token itself.
        Route::new(Write, __path_grant, grant),
    ]
}

/// Query of `GET …/audit`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct AuditParams {
    /// Only the records of this item (`entry e1`, `turn s1:4`).
    pub(crate) item: Option<String>,
    /// At most this many, newest first (1..=10000, default 100).
    pub(crate) limit: Option<usize>,
}

/// The audit records of the workspace, newest first: one for every use of
/// an item whose memory-policy decision carried the `audit-log` obligation.
#[utoipa::path(get, path = "/v1/workspaces/{workspace}/audit", params(AuditParams),
    responses((status = 200, body = Vec<AuditRecord>), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn audit(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    q: web::Query<AuditParams>,
) -> ApiResult<Vec<AuditRecord>> {
    let q = q.into_inner();
    let query = AuditQuery {
        item: q.item,
        limit: q.limit.unwrap_or(AuditQuery::default().limit),
    };
    blocking(move || Ok(cairn.audit(&ws, &query)?)).await
}

/// The confirmations of the workspace, pending and granted: items the
/// memory policy holds (shown by reference only) until the user confirms.
#[utoipa::path(get, path = "/v1/workspaces/{workspace}/confirmations",
    responses((status = 200, body = Vec<Confirmation>), (status = 404, body = ErrorBody)))]
async fn confirmations(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
) -> ApiResult<Vec<Confirmation>> {
    blocking(move || Ok(cairn.confirmations(&ws)?)).await
}

/// Body of `POST …/confirmations/grant`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrantBody {
    /// The item held (`entry e1`, `turn s1:4`), as `GET …/confirmations`
    /// names it.
    pub(crate) item: String,
}

/// Grants a pending confirmation: the item is used as the memory policy
/// decided from now on. The admin token only (the user's answer, not an
/// agent's).
#[utoipa::path(post, path = "/v1/workspaces/{workspace}/confirmations/grant", request_body = GrantBody,
    responses((status = 200, body = Confirmation), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn grant(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<GrantBody>,
    req: HttpRequest,
) -> ApiResult<Confirmation> {
    let admin = Principal::of_admin(&req);
    if !admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "granting a confirmation is the user's answer: it needs the admin token",
        ));
    }
    let item = body.into_inner().item;
    blocking(move || Ok(cairn.grant_confirmation(&ws, &item)?)).await
}
