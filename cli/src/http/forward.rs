//! Requests that belong to another node of the cluster: every route under
//! `/v1/workspaces/{workspace}` is served by the node that owns the
//! workspace ([`Cairn::route`]); a request that reaches another node is
//! forwarded there as it came (method, path, query, headers, body) and its
//! answer passed back. A client may therefore talk to any node.
//!
//! A forwarded request carries [`FORWARDED_BY`]: a stamp only a node of
//! the cluster can make ([`Cairn::forward_stamp`]); the node it reaches
//! serves it or refuses it (503, retryable), never sends it on, so views
//! of the cluster that differ for a moment cannot make a request go round
//! in circles. A request whose stamp does not check out (a client posing
//! as a node) is refused, 403 `forward_not_authenticated`. An owner that
//! does not answer is a 503 too: the client retries, by which time its
//! workspaces have been taken over. The owner's answer is read up to
//! `server.max_forwarded_answer_bytes` (502 `answer_too_large` past it).

use std::sync::OnceLock;
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpResponse, web};
use cairn::{Cairn, Route};
use futures_util::StreamExt;

use super::ApiError;

/// The header a forwarded request carries: the id of the node that
/// forwarded it.
pub const FORWARDED_BY: &str = "x-cairn-forwarded-by";

/// The header every answer of a cluster node carries: the node that
/// served the request.
pub const SERVED_BY: &str = "x-cairn-node";

/// Headers that describe one hop, not the request: never passed on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
];

/// Request headers the forwarding node has already judged and does not
/// pass on: the owner would compare the `Origin` with its own address, not
/// the one the client called (the forwarding stamp vouches for the check).
const CHECKED_HERE: &[&str] = &["origin", "sec-fetch-site"];

/// How long each phase of a forwarded request may take: connecting to the
/// owner, sending the request, waiting for its answer, reading it.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);

/// The workspace a path is about (`/v1/workspaces/{workspace}/...`), if it
/// names a valid one.
fn workspace_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v1/workspaces/")?;
    let segment = rest.split('/').next()?;
    percent_decode(segment).filter(|id| !id.is_empty())
}

fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        crate::client::phase_timeouts(ureq::Agent::config_builder(), FORWARD_TIMEOUT)
            .http_status_as_error(false)
            .max_redirects(0)
            .max_idle_connections(256)
            .max_idle_connections_per_host(128)
            .build()
            .into()
    })
}

/// The middleware: serves a workspace's request here when this node owns
/// the workspace, else forwards it to the owner.
pub(crate) async fn route_requests(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let cairn = req.app_data::<web::Data<Cairn>>().cloned();
    let (Some(cairn), Some(workspace)) = (cairn, workspace_of(req.path())) else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let forwarded = match req.headers().get(FORWARDED_BY) {
        None => false,
        Some(stamp) => {
            let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
            let by = stamp
                .to_str()
                .ok()
                .and_then(|stamp| cairn.forwarded_by(stamp, req.method().as_str(), target));
            if by.is_none() {
                let e = ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forward_not_authenticated",
                    format!(
                        "{FORWARDED_BY} is for the nodes of a cluster, and this one was not \
                         made by one: send the request without it"
                    ),
                );
                return Ok(req.error_response(e));
            }
            true
        }
    };
    // Known here for a workspace this node serves (always, outside a
    // cluster); only a route that may take a lease goes to a thread that
    // may block.
    let decided = match cairn.route_now(&workspace) {
        Ok(Some(route)) => Ok(route),
        Ok(None) => {
            let asker = cairn.clone();
            match web::block(move || asker.route(&workspace, forwarded)).await {
                Ok(decided) => decided,
                Err(e) => return Ok(req.error_response(ApiError::worker_failed(e))),
            }
        }
        Err(e) => Err(e),
    };
    let route = match decided {
        Ok(route) => route,
        // A bad id: the route itself says what is wrong with it.
        Err(e) if e.kind() == cairn::ErrorKind::Invalid => Route::Local,
        Err(e) => return Ok(req.error_response(ApiError::from(e))),
    };
    match route {
        Route::Forward { node, url } => forward(req, &cairn, node, url).await,
        _ => {
            let mut res = next.call(req).await?.map_into_boxed_body();
            let node = &cairn.config().storage.cluster.node;
            if let Ok(value) = actix_web::http::header::HeaderValue::from_str(node)
                && !node.is_empty()
            {
                res.headers_mut().insert(
                    actix_web::http::header::HeaderName::from_static(SERVED_BY),
                    value,
                );
            }
            Ok(res)
        }
    }
}

/// Sends `req` to `node` at `url` and answers what it answered.
async fn forward(
    mut req: ServiceRequest,
    cairn: &Cairn,
    node: String,
    url: String,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let limit = cairn.config().server.max_body_bytes;
    let mut payload = req.take_payload();
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > limit {
            let e = ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is larger than server.max_body_bytes ({limit})"),
            );
            return Ok(req.error_response(e));
        }
        body.extend_from_slice(&chunk);
    }
    let path_and_query = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let target = format!("{}{path_and_query}", url.trim_end_matches('/'));
    let stamp = cairn
        .forward_stamp(req.method().as_str(), path_and_query)
        .unwrap_or_default();
    let mut request = ureq::http::Request::builder()
        .method(req.method().as_str())
        .uri(&target);
    for (name, value) in req.headers() {
        if !HOP_BY_HOP.contains(&name.as_str())
            && !CHECKED_HERE.contains(&name.as_str())
            && name.as_str() != FORWARDED_BY
        {
            request = request.header(name.as_str(), value.as_bytes());
        }
    }
    request = request.header(FORWARDED_BY, stamp.as_str());
    let request = match request.body(body.freeze().to_vec()) {
        Ok(request) => request,
        Err(e) => {
            let e = ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("cannot forward the request to node {node}: {e}"),
            );
            return Ok(req.error_response(e));
        }
    };
    type Answer = (u16, Vec<(String, Vec<u8>)>, Vec<u8>);
    let max_answer = cairn.config().server.max_forwarded_answer_bytes;
    let answer = web::block(move || -> Result<Answer, ureq::Error> {
        let mut resp = agent().run(request)?;
        let headers = resp
            .headers()
            .iter()
            .filter(|(name, _)| !HOP_BY_HOP.contains(&name.as_str()))
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(max_answer)
            .read_to_vec()?;
        Ok((resp.status().as_u16(), headers, bytes))
    })
    .await;
    match answer {
        Ok(Ok((status, headers, bytes))) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut out = HttpResponse::build(status);
            for (name, value) in headers {
                out.insert_header((name, value));
            }
            Ok(req.into_response(out.body(bytes)))
        }
        Ok(Err(ureq::Error::BodyExceedsLimit(_))) => Ok(req.error_response(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "answer_too_large",
            format!(
                "the answer of the workspace's owner, node {node}, is larger than \
                 server.max_forwarded_answer_bytes ({max_answer}); ask node {node} at {url} \
                 directly, or ask for less (a `limit`)"
            ),
        ))),
        Ok(Err(e)) => Ok(req.error_response(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "owner_unreachable",
            format!("the workspace's owner, node {node} at {url}, did not answer ({e}); retry"),
        ))),
        Err(e) => Ok(req.error_response(ApiError::worker_failed(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::workspace_of;

    #[test]
    fn the_workspace_is_read_from_the_path() {
        assert_eq!(
            workspace_of("/v1/workspaces/acme/turns").as_deref(),
            Some("acme")
        );
        assert_eq!(
            workspace_of("/v1/workspaces/lg-ws-1").as_deref(),
            Some("lg-ws-1")
        );
        assert_eq!(
            workspace_of("/v1/workspaces/a%2Db/x").as_deref(),
            Some("a-b")
        );
        assert_eq!(workspace_of("/v1/plugins"), None);
        assert_eq!(
            workspace_of("/v1/workspaces/bad%20id/x").as_deref(),
            Some("bad id")
        );
        assert_eq!(workspace_of("/v1/workspaces//x"), None);
        assert_eq!(workspace_of("/v1/workspaces/%zz/x"), None);
    }
}
