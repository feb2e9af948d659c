//! The route table: every HTTP route of `cairn serve` is one [`Route`] in
//! its area's table (`routes()` in each module under `http/`, gathered by
//! [`super::routes`]), declared once: its [`Scope`], its handler and the
//! handler's `#[utoipa::path]` description, which gives the method and the
//! path. Everything else is derived from the tables:
//!
//! - the router: [`register`] adds each route to actix (the workspace
//!   routes under one `web::scope`, the hot ones first);
//! - the guard's scope check: [`Access::of`] finds the route a request
//!   names (its method and its path as sent) and answers the route's
//!   declared scope (`super::guard` asks it before any handler runs);
//! - the OpenAPI description: [`super::api_doc`] merges each route's
//!   description (its operation and the schemas it names).
//!
//! So adding a route is one line in its area's table, beside its handler.

use std::marker::PhantomData;
use std::sync::OnceLock;

use actix_web::dev::ResourceDef;
use actix_web::http::Method;
use actix_web::{FromRequest, Handler, Responder, guard, web};
use utoipa::openapi::RefOr;
use utoipa::openapi::path::{HttpMethod, PathItem, Paths};
use utoipa::openapi::schema::Schema;

/// The prefix of every workspace route; its first segment after
/// `/v1/workspaces/` is the workspace a token must open.
pub(crate) const WORKSPACE: &str = "/v1/workspaces/{workspace}";

/// Who may call a route: what the guard asks of the request's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Anyone, without a token (the guard still checks the `Host`): the
    /// path is open whatever the method.
    Open,
    /// A token that opens the workspace, read-scoped or not: `GET`s, and
    /// the `POST`s whose body is a question (search, assemble) or an MCP
    /// message (whose writing tools refuse a read-scoped token themselves).
    Read,
    /// A token that opens the workspace with the write scope.
    Write,
    /// The admin token only (every route outside `/v1/workspaces/…`).
    Admin,
}

impl Scope {
    /// Whether a read-scoped token may make a `method` request of a route
    /// of this scope. An admin route refuses every workspace token; that it
    /// reads when its method does only chooses which refusal a read-scoped
    /// token gets ("may read only" for a write, "needs the admin token" for
    /// a read).
    pub(crate) fn reads(self, method: &str) -> bool {
        match self {
            Scope::Open | Scope::Read => true,
            Scope::Write => false,
            Scope::Admin => reads_by_method(method),
        }
    }
}

/// A request no route serves reads when its method does: `GET` and `HEAD`.
fn reads_by_method(method: &str) -> bool {
    matches!(method, "GET" | "HEAD")
}

/// One HTTP route: its methods (none: every method), its path (an actix
/// pattern, absolute), who may call it, its handler and its description.
pub(crate) struct Route {
    methods: Vec<Method>,
    path: String,
    scope: Scope,
    /// Tried before the others by the router (the gateway's per-turn
    /// calls): a scope tries its routes in order, each a pattern match.
    hot: bool,
    handler: actix_web::Route,
    doc: Option<Box<dyn Describe>>,
    /// Tags added to the described operation.
    tags: Vec<&'static str>,
}

/// The OpenAPI side of a described route: what `#[utoipa::path]`
/// generated for its handler.
trait Describe {
    /// The route's paths: its one path, with an operation per method.
    fn paths(&self) -> Paths;
    /// Adds the schemas the operation names to `schemas`.
    fn schemas(&self, schemas: &mut Vec<(String, RefOr<Schema>)>);
}

/// The description `#[utoipa::path]` generated (the unit struct
/// `__path_<handler>`), as a [`Describe`].
struct Described<D>(PhantomData<D>);

impl<D: utoipa::Path + utoipa::__dev::SchemaReferences> Describe for Described<D> {
    fn paths(&self) -> Paths {
        let mut paths = Paths::new();
        for method in D::methods() {
            paths.add_path_operation(D::path(), vec![method], D::operation());
        }
        paths
    }

    fn schemas(&self, schemas: &mut Vec<(String, RefOr<Schema>)>) {
        D::schemas(schemas);
    }
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("methods", &self.methods)
            .field("path", &self.path)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Route {
    /// A described route: `doc` is what `#[utoipa::path]` generated for
    /// `handler` (the unit struct `__path_<handler>`), which gives the
    /// method, the path and the OpenAPI operation.
    pub(crate) fn new<D, F, Args>(scope: Scope, _doc: D, handler: F) -> Route
    where
        D: utoipa::Path + utoipa::__dev::SchemaReferences + 'static,
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        Route {
            methods: D::methods().into_iter().map(method_of).collect(),
            path: D::path(),
            scope,
            hot: false,
            handler: web::route().to(handler),
            doc: Some(Box::new(Described::<D>(PhantomData))),
            tags: Vec::new(),
        }
    }

    /// A route the description leaves out (the description itself, the
    /// MCP endpoint); no `methods` serves every method not declared before
    /// it on the path.
    pub(crate) fn undescribed<F, Args>(
        methods: &[Method],
        path: &str,
        scope: Scope,
        handler: F,
    ) -> Route
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        Route {
            methods: methods.to_vec(),
            path: path.to_owned(),
            scope,
            hot: false,
            handler: web::route().to(handler),
            doc: None,
            tags: Vec::new(),
        }
    }

    /// Tried first by the router: one of the gateway's per-turn calls.
    pub(crate) fn hot(mut self) -> Route {
        self.hot = true;
        self
    }

    /// The path's last parameter takes the rest of the path, `/` included
    /// (a turn is `session/seq`); the description names it as usual.
    pub(crate) fn tail(mut self) -> Route {
        if self.path.ends_with('}') {
            self.path.pop();
            self.path.push_str(":.*}");
        }
        self
    }

    /// Adds `tag` to the described operation's tags.
    pub(crate) fn tag(mut self, tag: &'static str) -> Route {
        self.tags.push(tag);
        self
    }

    /// Adds this route's description to `paths` and the schemas it names
    /// to `schemas`.
    pub(crate) fn describe(&self, paths: &mut Paths, schemas: &mut Vec<(String, RefOr<Schema>)>) {
        let Some(doc) = &self.doc else {
            return;
        };
        let mut described = doc.paths();
        // Every operation lists its tags, if none (as `#[derive(OpenApi)]`
        // gave them).
        for item in described.paths.values_mut() {
            for op in operations(item) {
                let tags = op.tags.get_or_insert_with(Vec::new);
                tags.extend(self.tags.iter().map(|t| (*t).to_owned()));
            }
        }
        paths.merge(described);
        doc.schemas(schemas);
    }

    /// Whether anyone may call this route without a token.
    pub(crate) fn is_open(&self) -> bool {
        self.scope == Scope::Open
    }

    /// Whether the router tries this route before the others.
    pub(crate) fn is_hot(&self) -> bool {
        self.hot
    }

    /// The route's described path (the pattern, without a tail's regex).
    pub(crate) fn described_path(&self) -> Option<String> {
        let doc = self.doc.as_ref()?;
        doc.paths().paths.into_keys().next()
    }
}

/// Every operation of a path item.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// The actix method of a described one.
fn method_of(method: HttpMethod) -> Method {
    match method {
        HttpMethod::Get => Method::GET,
        HttpMethod::Post => Method::POST,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Delete => Method::DELETE,
        HttpMethod::Options => Method::OPTIONS,
        HttpMethod::Head => Method::HEAD,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Trace => Method::TRACE,
    }
}

/// `routes` in the router's order: the hot ones first, each group in
/// table order.
fn in_router_order(routes: Vec<Route>) -> impl Iterator<Item = Route> {
    let (hot, rest): (Vec<Route>, Vec<Route>) = routes.into_iter().partition(Route::is_hot);
    hot.into_iter().chain(rest)
}

/// Registers `routes` on `cfg`: the workspace routes in one scope (after
/// the others, which never match a workspace path), each in the router's
/// order, a route's methods as the guards of its resource (a method no
/// route of the path serves falls through to the default service).
pub(crate) fn register(routes: Vec<Route>, cfg: &mut web::ServiceConfig) {
    let mut workspace = web::scope(WORKSPACE);
    for route in in_router_order(routes) {
        let handler = match route.methods.as_slice() {
            [] => route.handler,
            [one] => route.handler.method(one.clone()),
            [first, more @ ..] => {
                let any = more
                    .iter()
                    .fold(guard::Any(guard::Method(first.clone())), |any, m| {
                        any.or(guard::Method(m.clone()))
                    });
                route.handler.guard(any)
            }
        };
        match route.path.strip_prefix(WORKSPACE) {
            Some(rest) => workspace = workspace.route(rest, handler),
            None => {
                cfg.route(&route.path, handler);
            }
        }
    }
    cfg.service(workspace);
}

/// What the guard knows of each route: methods, pattern, scope.
#[derive(Debug)]
struct Entry {
    methods: Vec<Method>,
    pattern: ResourceDef,
    scope: Scope,
}

impl Entry {
    fn serves(&self, method: &str, path: &str) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| m.as_str() == method))
            && self.pattern.is_match(path)
    }
}

/// Every route's entry, in the router's order, read from the tables once.
fn entries() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        in_router_order(super::routes())
            .map(|route| Entry {
                pattern: ResourceDef::new(route.path.as_str()),
                methods: route.methods,
                scope: route.scope,
            })
            .collect()
    })
}

/// What a request may do, by the route that serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access {
    /// The route's scope; for a request no route serves, `Read` or
    /// `Write` by its method under `/v1/workspaces/`, `Admin` elsewhere
    /// (it is answered 404, after the guard, to whoever may ask).
    pub(crate) scope: Scope,
    /// Whether a route serves it.
    pub(crate) routed: bool,
}

impl Access {
    /// Whether anyone may call `path` without a token, whatever the
    /// method: an open route serves it.
    pub(crate) fn is_open(path: &str) -> bool {
        entries()
            .iter()
            .any(|e| e.scope == Scope::Open && e.pattern.is_match(path))
    }

    /// The access of `method path` (the path as sent, not decoded: an
    /// encoded name matches no token, so it fails closed). A path with an
    /// open route is open whatever the method.
    pub(crate) fn of(method: &str, path: &str) -> Access {
        let entries = entries();
        if Access::is_open(path) {
            return Access {
                scope: Scope::Open,
                routed: true,
            };
        }
        match entries.iter().find(|e| e.serves(method, path)) {
            Some(entry) => Access {
                scope: entry.scope,
                routed: true,
            },
            None => Access {
                scope: match path.starts_with("/v1/workspaces/") {
                    true if reads_by_method(method) => Scope::Read,
                    true => Scope::Write,
                    false => Scope::Admin,
                },
                routed: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace routes are exactly the read and write ones; every
    /// described route has one method and a path its description names.
    #[test]
    fn scopes_follow_the_paths() {
        for route in crate::http::routes() {
            let workspace = route.path.starts_with(&format!("{WORKSPACE}/"));
            assert_eq!(
                workspace,
                matches!(route.scope, Scope::Read | Scope::Write),
                "{route:?}"
            );
            if route.doc.is_some() {
                assert_eq!(route.methods.len(), 1, "{route:?}");
                let described = route.described_path().unwrap_or_default();
                assert_eq!(described, route.path.replace(":.*}", "}"), "{route:?}");
            }
        }
    }

    /// The scope the guard reads for each route is the one the path
    /// suffixes gave before the route tables (`GET`/`HEAD`, and the
    /// `POST`s of search, assemble and the MCP endpoint, read).
    #[test]
    fn reads_are_gets_searches_assemblies_and_mcp_messages() {
        let reads = |method, path| Access::of(method, path).scope.reads(method);
        assert!(reads("GET", "/v1/workspaces/acme/entries"));
        assert!(reads("POST", "/v1/workspaces/acme/search"));
        assert!(reads("POST", "/v1/workspaces/acme/assemble"));
        assert!(reads("POST", "/v1/workspaces/acme/mcp"));
        assert!(reads("GET", "/v1/workspaces/acme/mcp"));
        assert!(!reads("DELETE", "/v1/workspaces/acme/mcp"));
        assert!(!reads("POST", "/v1/workspaces/acme/turns"));
        assert!(!reads("POST", "/v1/workspaces/acme/forget"));
        assert!(!reads("DELETE", "/v1/tokens/0123456789ab"));
        assert!(reads("GET", "/v1/workspaces/acme/topics/alerts/why/s1/3"));
        assert!(!reads("POST", "/v1/workspaces/acme/topics/alerts/webhook"));
        // No route: by the method.
        assert!(reads("GET", "/v1/workspaces/acme/nothing"));
        assert!(!reads("POST", "/v1/workspaces/acme/nothing"));
        for route in crate::http::routes() {
            let path = route
                .path
                .replace("{workspace}", "acme")
                .replace("{turn:.*}", "s1/3");
            for method in &route.methods {
                let before = matches!(method.as_str(), "GET" | "HEAD")
                    || (method == Method::POST
                        && (path.ends_with("/search")
                            || path.ends_with("/assemble")
                            || path.ends_with("/mcp")));
                let access = Access::of(method.as_str(), &path);
                assert!(access.routed, "{method} {path}");
                assert_eq!(
                    access.scope.reads(method.as_str()),
                    before,
                    "{method} {path}"
                );
            }
        }
    }

    #[test]
    fn open_paths_are_open_whatever_the_method() {
        for method in ["GET", "POST", "DELETE"] {
            assert_eq!(Access::of(method, "/healthz").scope, Scope::Open);
            assert_eq!(Access::of(method, "/openapi.json").scope, Scope::Open);
        }
        assert_eq!(Access::of("GET", "/healthz/").scope, Scope::Admin);
        assert_eq!(Access::of("GET", "/v1/plugins").scope, Scope::Admin);
        assert_eq!(Access::of("GET", "/v1/nothing").scope, Scope::Admin);
    }
}
