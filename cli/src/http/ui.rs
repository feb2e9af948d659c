//! The inspector: the web pages `cairn serve` serves at `/ui` (issue 83).
//!
//! What is served here is a static shell and nothing else: HTML, CSS,
//! JavaScript modules and an SVG icon, compiled into the binary
//! (`include_str!` of `cli/assets/ui/`), with no data in them. The pages
//! read everything they show from the JSON API in the browser, sending the
//! bearer token the person typed in (kept in the tab's `sessionStorage`)
//! as `Authorization`, so every read passes the same guard, scopes,
//! lineage rule and memory policy as any other client of the API, with
//! destination `user_visible_ui`. A page therefore never shows more than
//! its token may read; without a token (on a server that needs one) it
//! shows a token form and nothing else. Why a header and not a cookie:
//! docs/SECURITY.md, *The inspector*.
//!
//! The shell's routes are open (like `/healthz`: the guard still checks
//! the `Host`) and left out of the OpenAPI description, which describes
//! the JSON API. Every answer carries a strict Content-Security-Policy
//! (scripts, styles and fetches from this origin only; no inline script,
//! no frames, no form targets) and `nosniff`.

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use cairn::TokenScope;
use serde::Serialize;
use utoipa::ToSchema;

use super::guard::Principal;
use super::route::{Route, Scope};
use super::{ApiError, ErrorBody};

/// The routes of this area: the shell at `/ui` and its assets, and what a
/// token may do (the pages offer a write only to a token that may make it).
pub(crate) fn routes() -> Vec<Route> {
    vec![
        Route::new(Scope::Read, __path_access, access),
        Route::undescribed(&[Method::GET], "/ui", Scope::Open, index),
        Route::undescribed(&[Method::GET], "/ui/", Scope::Open, index),
        Route::undescribed(&[Method::GET], "/ui/{file}", Scope::Open, asset),
    ]
}

/// The policy of every `/ui` answer: only this origin's scripts, styles,
/// images and fetches; no inline script or style element, no plugins, no
/// frames (in or around), no `<base>`, no form submission.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Answer of `GET .../access`: what the caller's token may do in the
/// workspace. Only a convenience for the pages: every route checks the
/// token itself, whatever this says.
#[derive(Debug, Serialize, ToSchema)]
pub struct AccessView {
    /// The workspace asked about.
    pub workspace: String,
    /// `read` (reads, search, assemble) or `write` (also changes).
    pub scope: String,
    /// The admin token, or a server without tokens: the routes outside
    /// the workspaces (plugins, index statistics) too.
    pub admin: bool,
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/access",
    responses((status = 200, body = AccessView), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
async fn access(req: HttpRequest, ws: web::Path<String>) -> web::Json<AccessView> {
    let principal = req.extensions().get::<Principal>().cloned();
    let scope = match principal {
        Some(Principal::Workspaces {
            scope: TokenScope::Read,
            ..
        }) => "read",
        _ => "write",
    };
    web::Json(AccessView {
        workspace: ws.into_inner(),
        scope: scope.to_owned(),
        admin: principal.as_ref().is_none_or(Principal::is_admin),
    })
}

/// One file of the shell: its name under `/ui/`, content type and bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! assets {
    ($($name:literal => $type:literal),* $(,)?) => {
        &[$(Asset {
            name: $name,
            content_type: $type,
            body: include_str!(concat!("../../assets/ui/", $name)),
        }),*]
    };
}

/// Every file of the shell.
const ASSETS: &[Asset] = assets! {
    "index.html" => "text/html; charset=utf-8",
    "style.css" => "text/css; charset=utf-8",
    "icon.svg" => "image/svg+xml",
    "app.js" => "text/javascript; charset=utf-8",
    "api.js" => "text/javascript; charset=utf-8",
    "dom.js" => "text/javascript; charset=utf-8",
    "sessions.js" => "text/javascript; charset=utf-8",
    "memory.js" => "text/javascript; charset=utf-8",
    "why.js" => "text/javascript; charset=utf-8",
    "topics.js" => "text/javascript; charset=utf-8",
    "plugins.js" => "text/javascript; charset=utf-8",
    "compaction.js" => "text/javascript; charset=utf-8",
    "health.js" => "text/javascript; charset=utf-8",
};

/// `file` with the headers every `/ui` answer carries.
fn served(file: &Asset) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(file.content_type)
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        // Small files; a new binary serves new ones at once.
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(file.body)
}

fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// `GET /ui` and `/ui/`: the shell.
async fn index() -> HttpResponse {
    match find("index.html") {
        Some(file) => served(file),
        None => missing("index.html"),
    }
}

/// `GET /ui/{file}`: one of the shell's files.
async fn asset(file: web::Path<String>) -> HttpResponse {
    match find(&file) {
        Some(found) => served(found),
        None => missing(&file),
    }
}

fn missing(name: &str) -> HttpResponse {
    use actix_web::ResponseError;
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!("the inspector has no file {name:?}"),
    )
    .error_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every module the shell imports is served, and the shell has no
    /// inline script or style for the policy to refuse.
    #[test]
    fn the_shell_names_only_served_files_and_nothing_inline() {
        for file in ASSETS {
            for quoted in file.body.split(['"', '\'']) {
                if let Some(name) = quoted.strip_prefix("./").or(quoted.strip_prefix("/ui/"))
                    && (name.ends_with(".js") || name.ends_with(".css") || name.ends_with(".svg"))
                {
                    assert!(find(name).is_some(), "{} names {name}", file.name);
                }
            }
        }
        let html = find("index.html").map(|f| f.body).unwrap_or_default();
        assert!(!html.contains("<script>") && !html.contains("style="));
        assert!(!html.contains("http://") && !html.contains("https://"));
    }
}
