//! The access-token routes of `cairn serve` (admin only, like every route
//! outside `/v1/workspaces/{workspace}`): make, list and revoke the tokens
//! `cairn tokens` manages, while the server holds the store.

use actix_web::web;
use cairn::{AccessToken, Cairn, TokenScope};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::route::{Route, Scope};
use super::{ApiResult, ErrorBody, blocking};

/// The routes of this area (admin only).
pub(crate) fn routes() -> Vec<Route> {
    vec![
        Route::new(Scope::Admin, __path_create_token, create_token),
        Route::new(Scope::Admin, __path_tokens, tokens),
        Route::new(Scope::Admin, __path_revoke_token, revoke_token),
    ]
}

/// Body of `POST /v1/tokens`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenBody {
    /// The one workspace the token opens.
    pub workspace: String,
    /// `read` (GET, search, assemble) or `write` (everything in the
    /// workspace but erasing it).
    pub scope: TokenScope,
    /// A free label: who or what holds it.
    #[serde(default)]
    pub label: Option<String>,
}

/// A token just made: its listing and the token itself, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedToken {
    /// What `GET /v1/tokens` will list.
    #[serde(flatten)]
    pub listing: AccessToken,
    /// `cairn_<id>_<secret>`, for `Authorization: Bearer …`; not stored.
    pub token: String,
}

#[utoipa::path(post, path = "/v1/tokens", request_body = CreateTokenBody,
    responses((status = 200, body = CreatedToken), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn create_token(
    cairn: web::Data<Cairn>,
    body: web::Json<CreateTokenBody>,
) -> ApiResult<CreatedToken> {
    blocking(move || {
        let (listing, token) =
            cairn.create_token(&body.workspace, body.scope, body.label.as_deref())?;
        Ok(CreatedToken { listing, token })
    })
    .await
}

#[utoipa::path(get, path = "/v1/tokens",
    responses((status = 200, body = Vec<AccessToken>), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
pub(crate) async fn tokens(cairn: web::Data<Cairn>) -> ApiResult<Vec<AccessToken>> {
    blocking(move || Ok(cairn.tokens()?)).await
}

#[utoipa::path(delete, path = "/v1/tokens/{id}",
    responses((status = 200, body = AccessToken), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn revoke_token(
    cairn: web::Data<Cairn>,
    id: web::Path<String>,
) -> ApiResult<AccessToken> {
    blocking(move || Ok(cairn.revoke_token(&id)?)).await
}
