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

/// Completes `doc`: see the module's documentation. `open` are the
/// described paths the guard leaves open (it still checks the `Host`).
pub(super) fn complete(doc: &mut OpenApi, open: &[String]) {
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme("bearer", SecurityScheme::Http(bearer()));
    for (path, item) in doc.paths.paths.iter_mut() {
        for (method, op) in operations(item) {
            declare_path_parameters(path, op);
            let open = open.contains(path);
            if !open {
                op.security = Some(vec![SecurityRequirement::new(
                    "bearer",
                    Vec::<String>::new(),
                )]);
                if super::guard::changes_state(method) {
                    declare_client_header(op);
                }
            }
            document_refusals(path, open, method, op);
        }
    }
}

/// Every operation of a path item, with its method.
fn operations(item: &mut PathItem) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    [
        ("GET", &mut item.get),
        ("PUT", &mut item.put),
        ("POST", &mut item.post),
        ("DELETE", &mut item.delete),
        ("PATCH", &mut item.patch),
    ]
    .into_iter()
    .filter_map(|(method, op)| Some((method, op.as_mut()?)))
}

/// Declares the optional `x-cairn-client` header of a state-changing
/// operation (what lets a client that is not a browser send it without a
/// JSON body).
fn declare_client_header(op: &mut Operation) {
    let parameters = op.parameters.get_or_insert_with(Vec::new);
    if parameters
        .iter()
        .any(|p| p.name == super::guard::CLIENT_HEADER && p.parameter_in == ParameterIn::Header)
    {
        return;
    }
    parameters.push(
        ParameterBuilder::new()
            .name(super::guard::CLIENT_HEADER)
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "Any value: names a client that is not a browser. A state-changing request \
                 needs it or a JSON body (`Content-Type: application/json`), so that a plain \
                 HTML form on another site cannot send it",
            ))
            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
            .build(),
    );
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
/// guard's (403 for a `Host` not allowed, for a state-changing request from
/// another web origin or without a JSON body or `x-cairn-client`, and where
/// a token is needed 401, 403, 429), the extractors' (400 for a path, query
/// or body that does not parse, 413 for a body over
/// `server.max_body_bytes`), the forwarding layer's (403 for a posed
/// forwarding header, 502 for an owner's answer over the bound) and an
/// unknown workspace's 404. A status the annotation gives keeps its
/// description, with the guard's added.
fn document_refusals(path: &str, open: bool, method: &str, op: &mut Operation) {
    let body = op.request_body.is_some();
    let input = body
        || op
            .parameters
            .as_ref()
            .is_some_and(|p| p.iter().any(|p| p.parameter_in != ParameterIn::Header));
    let forbidden = if super::guard::changes_state(method) {
        "`host_not_allowed`: the `Host` header is not in the allow-list; \
         `origin_not_allowed`: the `Origin` (or `Sec-Fetch-Site`) is another site's, not the \
         server's own nor in `server.allowed_origins`; `json_required`: neither a JSON body \
         nor `x-cairn-client`; or `forbidden`: the token does not open this route"
    } else {
        "`host_not_allowed`: the `Host` header is not in the allow-list; or \
         `forbidden`: the token does not open this route"
    };
    let mut refusals = vec![("403", forbidden)];
    if !open {
        refusals.push(("401", "`unauthorized`: no token, or an unknown one"));
        refusals.push((
            "429",
            "`rate_limited`: over `server.requests_per_minute` for this token; or \
             `too_many_failed_authentications`: this address failed to authenticate more than \
             `server.failed_auth_per_minute` times a minute",
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
        refusals.push((
            "403",
            "`forward_not_authenticated`: an `x-cairn-forwarded-by` header no node of the \
             cluster made",
        ));
        refusals.push((
            "502",
            "`answer_too_large`: in a cluster, the answer of the workspace's owner is over \
             `server.max_forwarded_answer_bytes`",
        ));
    }
    for (status, description) in refusals {
        match op.responses.responses.entry(status.to_owned()) {
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(error(description));
            }
            std::collections::btree_map::Entry::Occupied(mut given) => {
                if let RefOr::T(response) = given.get_mut()
                    && !response.description.contains(description)
                {
                    response.description = format!("{} {description}", response.description);
                }
            }
        }
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
