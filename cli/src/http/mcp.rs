//! The MCP endpoint of a workspace (streamable HTTP): the tools of
//! `cairn mcp` behind the same guard as every workspace route.

use actix_web::http::{Method, StatusCode};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use cairn::Destination;
use serde::Deserialize;

use super::ApiError;
use super::guard::Principal;
use super::route::{Route, Scope, WORKSPACE};

/// The routes of this area: one endpoint, left out of the description. A
/// message (`POST`) reads: its writing tools (`memory_note`,
/// `memory_correct`, `memory_retract`, `memory_pin`) refuse a read-scoped
/// token themselves; any other method but `GET` and `HEAD` writes.
pub(crate) fn routes() -> Vec<Route> {
    let path = format!("{WORKSPACE}/mcp");
    vec![
        Route::undescribed(
            &[Method::GET, Method::HEAD, Method::POST],
            &path,
            Scope::Read,
            mcp_endpoint,
        ),
        Route::undescribed(&[], &path, Scope::Write, mcp_endpoint),
    ]
}

/// Query of the MCP endpoint: who asks and where the answers go, fixed for
/// the request (tools take neither).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
pub struct McpQuery {
    /// The asking session: a sub-agent or cron session reads (and notes
    /// into) its lineage only.
    pub asking: Option<String>,
    /// Where the answers go (`local_model` by default): the memory policy
    /// decides per destination.
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

/// The MCP endpoint (streamable HTTP, stateless, JSON answers): the tools
/// and resources of `cairn mcp` for this workspace. The rate limit counts
/// the token (the client's name on a server without tokens).
async fn mcp_endpoint(
    req: HttpRequest,
    body: web::Bytes,
    mcp: web::Data<crate::mcp::McpHttp>,
) -> Result<HttpResponse, ApiError> {
    let workspace = req
        .match_info()
        .get("workspace")
        .unwrap_or_default()
        .to_owned();
    let query = web::Query::<McpQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.to_string()))?;
    let (caller, read_only) = match req.extensions().get::<Principal>() {
        Some(p) => (p.rate_key(), p.reads_only()),
        None => (None, false),
    };
    let identity = crate::mcp::Identity {
        workspace,
        caller,
        asking: query.asking.clone(),
        destination: query.destination,
        read_only,
    };
    let mut request = http::Request::builder()
        .method(req.method().as_str())
        .uri(req.uri().to_string());
    for (name, value) in req.headers() {
        request = request.header(name.as_str(), value.as_bytes());
    }
    let mut request = request
        .body(http_body_util::Full::new(body))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string()))?;
    request
        .extensions_mut()
        .insert(std::sync::Arc::new(identity));
    let response = mcp.call(request).await;
    let (parts, body) = response.into_parts();
    let status =
        StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = HttpResponse::build(status);
    for (name, value) in &parts.headers {
        // actix frames the streamed body itself.
        if name == http::header::CONTENT_LENGTH || name == http::header::TRANSFER_ENCODING {
            continue;
        }
        if let Ok(value) = actix_web::http::header::HeaderValue::from_bytes(value.as_bytes()) {
            out.append_header((name.as_str(), value));
        }
    }
    let frames = futures_util::stream::unfold(body, |mut body| async move {
        use http_body_util::BodyExt;
        loop {
            match body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some((Ok::<_, actix_web::Error>(data), body)),
                    Err(_trailers) => continue,
                },
                Err(never) => match never {},
            }
        }
    });
    Ok(out.streaming(frames))
}
