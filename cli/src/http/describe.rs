//! What the route annotations leave out of the OpenAPI description, added
//! to every operation of [`super::api_doc`] in one place, so a route added
//! later gets it too: its path parameters, the bearer token, and the
//! answers the layers around a handler give (the guard's, the extractors',
//! an unknown workspace's). A client, the fuzz run (`scripts/fuzz-api.sh`)
//! and the cross-workspace suite (`tests/all/cross_workspace.rs`) read the
//! description; they can only trust what it says if it says everything.

use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, ObjectBuilder, OpenApi, Ref, RefOr, Required, ResponseBuilder, Type,
};

/// What an id may hold, as a pattern (the rule is
/// `cairn_memory::ids::validate_id`: letters, digits and `. _ : @ / + = -`).
const ID_PATTERN: &str = "^[A-Za-z0-9._:@/+=-]+$";

/// The longest id, in bytes (`cairn_memory::ids::MAX_ID_BYTES`).
const MAX_ID_BYTES: usize = 128;

/// The route the guard leaves open (it still checks the `Host`).
const OPEN: &str = "/healthz";

/// Completes `doc`: see the module's documentation.
pub(super) fn complete(doc: &mut OpenApi) {
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme("bearer", SecurityScheme::Http(bearer()));
    for (path, item) in doc.paths.paths.iter_mut() {
        for op in operations(item) {
            declare_path_parameters(path, op);
            if path != OPEN {
                op.security = Some(vec![SecurityRequirement::new(
                    "bearer",
                    Vec::<String>::new(),
                )]);
            }
            document_refusals(path, op);
        }
    }
}

/// Every operation of a path item.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.patch,
    ]
    .into_iter()
    .flatten()
}

/// The bearer token scheme (`Authorization: Bearer …`).
fn bearer() -> Http {
    let mut bearer = Http::new(HttpAuthScheme::Bearer);
    bearer.description = Some(
        "The admin token (`server.admin_token`) or a workspace token (`server.tokens`), \
         which opens `/v1/workspaces/{its workspaces}/…` only. Needed whenever a token is \
         configured; a loopback server without tokens is open."
            .to_owned(),
    );
    bearer
}

/// Declares every `{name}` of `path` as a required string path parameter
/// where the annotation did not.
fn declare_path_parameters(path: &str, op: &mut Operation) {
    let parameters = op.parameters.get_or_insert_with(Vec::new);
    let names = path
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'));
    for name in names {
        let declared = parameters
            .iter()
            .any(|p| p.name == name && p.parameter_in == ParameterIn::Path);
        if declared {
            continue;
        }
        let description = match name {
            "workspace" => "The workspace's id",
            "turn" => "A turn, `session/seq`",
            _ => "An id (letters, digits and `. _ : @ / + = -`)",
        };
        let mut schema = ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1));
        // Workspace, session, entry and run ids follow the id rule; the rest
        // have rules of their own (slugs, topic names, `session/seq`).
        if matches!(name, "workspace" | "session" | "id" | "run") {
            schema = schema
                .max_length(Some(MAX_ID_BYTES))
                .pattern(Some(ID_PATTERN));
        }
        parameters.push(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some(description))
                .schema(Some(schema))
                .build(),
        );
    }
}

/// Adds the answers that come from the layers around the handler: the
/// guard's (403 for a `Host` not allowed, and where a token is needed 401,
/// 403, 429), the extractors' (400 for a path, query or body that does not
/// parse, 413 for a body over `server.max_body_bytes`), and an unknown
/// workspace's 404. A status the annotation gives keeps its description.
fn document_refusals(path: &str, op: &mut Operation) {
    let body = op.request_body.is_some();
    let input = body || op.parameters.as_ref().is_some_and(|p| !p.is_empty());
    let mut refusals = vec![(
        "403",
        "`host_not_allowed`: the `Host` header is not in the allow-list; or \
         `forbidden`: the token does not open this route",
    )];
    if path != OPEN {
        refusals.push(("401", "`unauthorized`: no token, or an unknown one"));
        refusals.push((
            "429",
            "`rate_limited`: over `server.requests_per_minute` for this token",
        ));
    }
    if input {
        refusals.push((
            "400",
            "The path, query or body does not parse, or a value in it is invalid",
        ));
    }
    if body {
        refusals.push((
            "413",
            "`body_too_large`: the body is over `server.max_body_bytes`",
        ));
    }
    if path.starts_with("/v1/workspaces/") {
        refusals.push((
            "404",
            "The workspace, or what the path names, does not exist",
        ));
    }
    for (status, description) in refusals {
        op.responses
            .responses
            .entry(status.to_owned())
            .or_insert_with(|| error(description));
    }
}

/// An answer with an [`super::ErrorBody`].
fn error(description: &str) -> RefOr<utoipa::openapi::Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build(),
    )
}
