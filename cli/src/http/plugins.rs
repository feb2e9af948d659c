//! The plugin routes (admin only): the installed plugins, installing or
//! swapping one, the decision log and a generation's counts.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use cairn::{
    Cairn, CairnError, DecisionQuery, GenerationCounts, InstallReport, PluginsReport, parse_world,
};
use serde::Deserialize;

use super::route::{Route, Scope};
use super::{ApiError, ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    use Scope::Admin;
    vec![
        Route::new(Admin, __path_plugins, plugins),
        Route::new(Admin, __path_plugin_log, plugin_log),
        Route::new(Admin, __path_generation_counts, generation_counts),
        Route::new(Admin, __path_install_plugin, install_plugin),
    ]
}

#[utoipa::path(get, path = "/v1/plugins",
    responses((status = 200, body = PluginsReport)))]
async fn plugins(cairn: web::Data<Cairn>) -> ApiResult<PluginsReport> {
    blocking(move || Ok(cairn.plugins()?)).await
}

/// Query of `PUT /v1/plugins/{world}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct InstallQuery {
    /// The plugin's name (lowercase letters, digits, `-`, `_`, `.`);
    /// default `custom`.
    #[serde(default)]
    pub name: Option<String>,
}

/// Installs (or swaps in) a plugin: the body is the component's bytes.
/// It is compiled and checked against the world off the decision path,
/// then replaces the current generation atomically and is persisted.
#[utoipa::path(put, path = "/v1/plugins/{world}", params(
        ("world" = String, Path, description = "significance-gate, topic-directive or memory-policy"),
        InstallQuery),
    request_body(content = String, content_type = "application/wasm",
        description = "The component's bytes"),
    responses((status = 200, body = InstallReport), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody)))]
async fn install_plugin(
    cairn: web::Data<Cairn>,
    world: web::Path<String>,
    q: web::Query<InstallQuery>,
    req: HttpRequest,
    mut payload: web::Payload,
) -> ApiResult<InstallReport> {
    use futures_util::StreamExt;
    let world = parse_world(&world).map_err(ApiError::from)?;
    let max = cairn.config().policies.max_plugin_bytes;
    // A declared length over the limit is refused before any of the body
    // is read; a chunked body is counted as it arrives.
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(size) = declared.filter(|&size| size > max) {
        return Err(CairnError::PluginTooLarge { size, max }.into());
    }
    let mut wasm = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?;
        if wasm.len() + chunk.len() > max {
            return Err(CairnError::PluginTooLarge {
                size: wasm.len() + chunk.len(),
                max,
            }
            .into());
        }
        wasm.extend_from_slice(&chunk);
    }
    let name = q.into_inner().name.unwrap_or_else(|| "custom".to_owned());
    blocking(move || Ok(cairn.install_plugin(world, &name, &wasm)?)).await
}

/// Reads the decision log, newest first.
#[utoipa::path(get, path = "/v1/plugins/log", params(DecisionQuery),
    responses((status = 200, description = "Decision records (world, plugin, generation, inputs digest, output, outcome, duration), newest first", content_type = "application/json"),
        (status = 400, body = ErrorBody)))]
async fn plugin_log(cairn: web::Data<Cairn>, q: web::Query<DecisionQuery>) -> HttpResponse {
    let query = q.into_inner();
    match web::block(move || cairn.decisions(&query)).await {
        Ok(Ok(records)) => HttpResponse::Ok().json(records),
        Ok(Err(e)) => ApiError::from(e).error_response(),
        Err(e) => ApiError::worker_failed(e).error_response(),
    }
}

/// Decisions and faults one policy generation made, as the durable
/// decision log counted them (across restarts and after the generation was
/// swapped out). A generation that never decided counts zero.
#[utoipa::path(get, path = "/v1/plugins/generations/{generation}", params(
        ("generation" = String, Path, description = "A generation id (`name@hash#n`), percent-encoded")),
    responses((status = 200, body = GenerationCounts), (status = 400, body = ErrorBody)))]
async fn generation_counts(
    cairn: web::Data<Cairn>,
    generation: web::Path<String>,
) -> ApiResult<GenerationCounts> {
    let generation = generation.into_inner();
    if generation.is_empty() || generation.len() > 256 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_generation",
            format!(
                "a generation id is 1 to 256 bytes, not {}",
                generation.len()
            ),
        ));
    }
    blocking(move || Ok(cairn.generation_counts(&generation)?)).await
}
