//! The OpenAPI 3.1 document served at `GET /api/v2/openapi.json` (API.md
//! "Base paths and discovery"), generated from the handlers' `#[utoipa::path]`
//! attributes and the `ToSchema` types.
//!
//! Every chat route is also served under `/api/experimental/chats`; the
//! document lists those copies too (operation ids suffixed
//! `_experimental`). Every operation but the health, metrics and document
//! routes requires the `bearer` security scheme (which the WebSocket stream
//! route also accepts as the `chatd.bearer.<token>` subprotocol). The web
//! UI's static files (`/`, `/app.js`, ..., see `crate::web`) are not API operations
//! and are not listed.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::{Modify, OpenApi};

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse as _, Response};

/// The document's root.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "chatd",
        description = "HTTP API of chatd, a durable multi-replica service running LLM chat agents on PostgreSQL. \
Every chat route under /api/v2/chats is also served, unchanged, under /api/experimental/chats. \
Every non-2xx response has the body ErrorBody. \
Any authenticated request may answer 429 with a Retry-After header (seconds) when the caller passes their requests_per_minute \
(counted per replica), and any request with a body answers 408 and closes the connection when the body has not arrived \
within 60 s of the request's start; a chat creation, send, edit or regenerate while the owner is over a monthly budget answers 429 \
with detail naming the budget. \
A chat created with subagents: true offers the model the built-in tools spawn_agent, wait_agent, message_agent and close_agent \
(run by the server; their children have parent_chat_id set and are listed with GET /chats?parent_id=, not in the default list).",
    ),
    paths(
        crate::health::healthz,
        crate::health::readyz,
        crate::health::metrics,
        openapi_json,
        crate::users::create_user,
        crate::users::create_user_token,
        crate::users::get_me,
        crate::users::list_users,
        crate::users::patch_user,
        crate::users::list_user_tokens,
        crate::users::delete_user_token,
        crate::users::list_replicas,
        crate::sessions::sign_in,
        crate::sessions::current_session,
        crate::sessions::sign_out,
        crate::sessions::set_password,
        crate::shares::create_share,
        crate::shares::list_shares,
        crate::shares::delete_share,
        crate::usage::get_user_usage,
        crate::files::upload_file,
        crate::files::list_files,
        crate::files::download_file,
        crate::files::delete_file,
        crate::chats::list_chats,
        crate::chats::create_chat,
        crate::chats::get_chat,
        crate::chats::update_chat,
        crate::chats::delete_chat,
        crate::messages::list_messages,
        crate::messages::send_message,
        crate::messages::edit_message,
        crate::branches::regenerate,
        crate::branches::activate_branch,
        crate::branches::fork_chat,
        crate::branches::message_tree,
        crate::search::search,
        crate::export::export_chat,
        crate::export::import_chat,
        crate::workspaces::list_workspace,
        crate::workspaces::workspace_file,
        crate::workspaces::workspace_archive,
        crate::queue::delete_queued_message,
        crate::queue::promote_queued_message,
        crate::queue::edit_queued_message,
        crate::queue::move_queued_message,
        crate::chats::actions::interrupt,
        crate::tools::submit_tool_results,
        crate::chats::actions::reconcile_invalid,
        crate::chats::actions::compact,
        crate::chats::actions::clear_context,
        crate::stream::routes::stream_ws,
        crate::stream::routes::stream_sse,
        crate::stream::parts::parts_endpoint,
        crate::stream::updates::long_poll_updates,
        crate::admin::model_configs::list_models,
        crate::admin::providers::list_providers,
        crate::admin::providers::create_provider,
        crate::admin::providers::update_provider,
        crate::admin::providers::delete_provider,
        crate::admin::model_configs::list_model_configs,
        crate::admin::model_configs::create_model_config,
        crate::admin::model_configs::update_model_config,
        crate::admin::model_configs::delete_model_config,
        crate::admin::mcp_servers::list_mcp_servers,
        crate::admin::mcp_servers::create_mcp_server,
        crate::admin::mcp_servers::update_mcp_server,
        crate::admin::mcp_servers::delete_mcp_server,
    ),
    components(schemas(
        crate::error::ErrorBody,
        crate::error::Validation,
        crate::objects::ChatStatus,
        crate::objects::ChatError,
        crate::objects::ChatErrorKind,
        crate::objects::FinishReason,
        chatd_core::MessagePart,
        chatd_core::Citation,
        crate::objects::ChatInputPart,
        crate::objects::DynamicTool,
        crate::tools::ToolResult,
        crate::objects::Usage,
        crate::stream::event::ChatStreamEvent,
        crate::stream::event::StreamPayload,
        crate::stream::event::MessagePartPayload,
        crate::stream::event::StatusPayload,
        crate::stream::event::ActionRequired,
        crate::stream::event::PendingToolCall,
        chatd_core::ActionKind,
        chatd_core::RetryState,
        crate::stream::event::EpisodeSelection,
        crate::paging::MessageWindow,
    )),
    modifiers(
        &SecurityAddon,
        &IdempotencyHeader,
        &LayerStatuses,
        &CoreConstraints,
        &ParameterConstraints,
        &UsersMe,
        &NoNul,
        &ExperimentalMount
    ),
    security(("bearer" = []), ("session" = [])),
    tags(
        (name = "chats", description = "Chats (also under /api/experimental/chats)"),
        (name = "messages", description = "Messages, queue and actions of one chat"),
        (name = "stream", description = "Live stream of a chat: WebSocket, Server-Sent Events, and the replica-to-replica parts relay"),
        (name = "admin", description = "Providers, model configs and MCP servers"),
        (name = "users", description = "Users, tokens and replicas"),
        (name = "sessions", description = "Password sign-in and browser sessions"),
        (name = "files", description = "Uploaded files, attached to chats by file parts"),
        (name = "health", description = "Health, readiness, metrics and this document"),
    )
)]
pub struct ApiDoc;

/// `GET /api/v2/openapi.json`: this API's OpenAPI 3.1 document.
#[utoipa::path(
    get, path = "/api/v2/openapi.json", tag = "health", security(()),
    responses((status = 200, description = "OpenAPI 3.1 document", body = Object))
)]
pub async fn openapi_json() -> Response {
    static DOC: OnceLock<String> = OnceLock::new();
    let doc = DOC.get_or_init(|| {
        crate::openapi::document()
            .to_json()
            .unwrap_or_else(|_| "{}".to_owned())
    });
    ([(header::CONTENT_TYPE, "application/json")], doc.clone()).into_response()
}

/// Adds the `bearer` HTTP security scheme.
struct SecurityAddon;

impl Modify for SecurityAddon {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token (`chatd_...`): `Authorization: Bearer <token>`. On the WebSocket stream route only, a client that cannot set headers (a browser) may instead offer the subprotocols `chatd, chatd.bearer.<token>`; the server selects `chatd`.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(utoipa::openapi::security::ApiKey::Cookie(
                utoipa::openapi::security::ApiKeyValue::with_description(
                    crate::auth::SESSION_COOKIE,
                    "The session cookie set by `POST /api/v2/sessions` (password sign-in): `HttpOnly`, `SameSite=Strict`. A request it authenticates that is not a GET, HEAD or OPTIONS must carry the session's CSRF token in the `X-CSRF-Token` header (403 otherwise); a WebSocket upgrade or mutation whose `Origin` names another host is 403. A bearer token, when present, wins over the cookie.",
                ),
            )),
        );
        components.add_security_scheme(
            "relay_secret",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The cluster's shared relay secret (replica to replica only): `Authorization: Bearer <relay secret>`",
                    ))
                    .build(),
            ),
        );
    }
}

/// Documents the `Idempotency-Key` header on exactly the routes the
/// idempotency layer wraps ([`crate::idempotency::applies`]), with the form
/// [`crate::idempotency::parse_key`] checks ([`crate::idempotency::key_schema`]),
/// and the statuses the layer adds: `400` for a malformed key, `409` for a
/// key reused on another request. Runs before [`ExperimentalMount`], so both
/// mounts carry it.
struct IdempotencyHeader;

impl Modify for IdempotencyHeader {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use axum::http::Method;
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        for (path, item) in openapi.paths.paths.iter_mut() {
            let mutating = [
                (Method::POST, item.post.as_mut()),
                (Method::PUT, item.put.as_mut()),
                (Method::PATCH, item.patch.as_mut()),
                (Method::DELETE, item.delete.as_mut()),
            ];
            for (method, op) in mutating {
                let Some(op) = op else { continue };
                if !crate::idempotency::applies(&method, path) {
                    continue;
                }
                let header = ParameterBuilder::new()
                    .name("Idempotency-Key")
                    .parameter_in(ParameterIn::Header)
                    .required(utoipa::openapi::Required::False)
                    .description(Some(format!(
                        "1 to {} printable ASCII characters, not starting or ending with a space, per user. A repeat with the same key, method, path and body within 24 hours answers the first 2xx response (with `Idempotent-Replayed: true`) and changes nothing; the same key with another method, path or body is 409. Concurrent duplicates wait for the first. A request that failed is not remembered.",
                        crate::idempotency::MAX_KEY_LEN
                    )))
                    .schema(Some(crate::idempotency::key_schema()))
                    .build();
                op.parameters
                    .get_or_insert_with(Vec::new)
                    .push(utoipa::openapi::RefOr::T(header));
                add_status(op, 400, "A malformed `Idempotency-Key`");
                add_status(
                    op,
                    409,
                    "The `Idempotency-Key` was already used for another method, path or body",
                );
            }
        }
    }
}

/// Documents the statuses the router's layers answer on every operation
/// they cover: `429` (the caller's `requests_per_minute`, [`crate::rate_limit`])
/// on every authenticated one; on every operation with a request body `408`
/// (the body deadline, [`crate::body_deadline`]) and `413` (the body limit,
/// [`crate::extract::read_body`]), and `415` when that body is JSON
/// ([`crate::extract::Json::read`]). Runs before [`ExperimentalMount`].
struct LayerStatuses;

impl Modify for LayerStatuses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let global_security = openapi.security.as_ref().is_some_and(|s| !s.is_empty());
        for item in openapi.paths.paths.values_mut() {
            for op in operations_mut(item) {
                let public = op.security.as_ref().map_or(!global_security, |reqs| {
                    reqs.iter().any(|r| *r == SecurityRequirement::default())
                });
                if !public {
                    add_status(op, 401, "Missing, unknown or expired token");
                    add_status(
                        op,
                        429,
                        "The caller passed their `requests_per_minute` (counted per replica); `Retry-After` says in how many seconds to retry",
                    );
                }
                let Some(utoipa::openapi::RefOr::T(body)) = &op.request_body else {
                    continue;
                };
                let json = body.content.contains_key("application/json");
                add_status(
                    op,
                    408,
                    "The request body did not arrive within 60 s of the request's start; the connection is closed",
                );
                add_status(op, 413, "Request body over the limit");
                if json {
                    add_status(
                        op,
                        415,
                        "The request body is not declared `Content-Type: application/json`",
                    );
                }
            }
        }
    }
}

/// Adds `status` with the error body to `op`'s responses, or, when it is
/// already listed, adds `why` to its description.
fn add_status(op: &mut utoipa::openapi::path::Operation, status: u16, why: &str) {
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
    let key = status.to_string();
    match op.responses.responses.get_mut(&key) {
        Some(RefOr::T(response)) => {
            if !response.description.contains(why) {
                response.description = format!("{}; or: {why}", response.description);
            }
        }
        Some(RefOr::Ref(_)) => {}
        None => {
            let response = ResponseBuilder::new()
                .description(why)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build();
            op.responses.responses.insert(key, RefOr::T(response));
        }
    }
}

/// States the constraints the API checks on `chatd_core` types, whose
/// derived schemas cannot know them ([`crate::validate::core_constraints`]):
/// replaces each named property's schema, keeping its description; and the
/// rules across fields of a request ([`crate::validate::component_rules`],
/// the two shapes of a `ToolResult`: [`crate::tools::tool_result_one_of`]).
///
/// # Panics
/// When a named component or property is missing (the document is built by
/// the tests, so a rename fails them).
struct CoreConstraints;

impl Modify for CoreConstraints {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::Schema;
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut rules = crate::validate::component_rules();
        rules.push(("ToolResult", "oneOf", crate::tools::tool_result_one_of()));
        for (component, keyword, value) in rules {
            let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(component)
            else {
                panic!("OpenAPI: no object schema {component}");
            };
            // utoipa's `Object` has no `oneOf`/`anyOf` beside its
            // properties; its extensions serialize as given.
            object
                .extensions
                .get_or_insert_with(Default::default)
                .insert(keyword.to_owned(), value);
        }
        for (component, property, mut schema) in crate::validate::core_constraints() {
            let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(component)
            else {
                panic!("OpenAPI: no object schema {component}");
            };
            let Some(slot) = object.properties.get_mut(property) else {
                panic!("OpenAPI: {component} has no property {property}");
            };
            if let RefOr::T(Schema::Object(old)) = slot {
                schema.description = old.description.take();
            }
            *slot = RefOr::T(Schema::Object(schema));
        }
    }
}

/// The parameters declared in `#[utoipa::path(params(...))]` tuples, which
/// take no `schema_with`: their schemas from the values the handlers parse
/// them with. Each rule names a location and a parameter, and optionally
/// the end of the paths it applies to; each must match at least one
/// parameter.
fn parameter_rules() -> Vec<(
    utoipa::openapi::path::ParameterIn,
    &'static str,
    Option<&'static str>,
    utoipa::openapi::schema::Schema,
)> {
    use crate::validate::{ID, IntRange, text_schema};
    use utoipa::openapi::path::ParameterIn;
    use utoipa::openapi::schema::Schema;
    let mut user = text_schema(2, 36, false);
    // `me` or a UUID: what `users::target_user` accepts.
    user.pattern = Some(format!(
        "^(?:me|{})$",
        crate::extract::UUID_PATTERN
            .trim_start_matches('^')
            .trim_end_matches('$')
    ));
    user.min_length = None;
    user.max_length = None;
    let o = Schema::Object;
    vec![
        (
            ParameterIn::Query,
            "limit",
            Some("/api/v2/chats"),
            o(crate::chats::LIMIT.schema()),
        ),
        (
            ParameterIn::Query,
            "q",
            Some("/api/v2/chats"),
            o(crate::chats::q_schema()),
        ),
        (
            ParameterIn::Query,
            "label",
            Some("/api/v2/chats"),
            Schema::Array(crate::chats::label_filter_schema()),
        ),
        (
            ParameterIn::Query,
            "limit",
            Some("/messages"),
            o(crate::messages::LIMIT.schema()),
        ),
        (
            ParameterIn::Query,
            "max_bytes",
            Some("/messages"),
            o(crate::messages::MAX_BYTES.schema()),
        ),
        (
            ParameterIn::Query,
            "before_id",
            Some("/messages"),
            o(ID.schema()),
        ),
        (
            ParameterIn::Query,
            "after_id",
            Some("/messages"),
            o(ID.schema()),
        ),
        (
            ParameterIn::Query,
            "after_snapshot_version",
            Some("/updates"),
            o(crate::stream::updates::AFTER_SNAPSHOT_VERSION.schema()),
        ),
        (
            ParameterIn::Query,
            "wait_ms",
            Some("/updates"),
            o(crate::stream::updates::WAIT_MS.schema()),
        ),
        (ParameterIn::Path, "user", None, o(user)),
        (ParameterIn::Path, "queued", None, o(ID.schema())),
        (ParameterIn::Path, "message", None, o(ID.schema())),
        (
            ParameterIn::Query,
            "after_id",
            Some("/stream"),
            o(ID.schema()),
        ),
        (
            ParameterIn::Query,
            "after_id",
            Some("/events"),
            o(ID.schema()),
        ),
        // `Last-Event-ID`: a message id, or 0 for "from the start".
        (
            ParameterIn::Header,
            "Last-Event-ID",
            Some("/events"),
            o(IntRange::new(0, i64::MAX).schema()),
        ),
    ]
}

/// Applies [`parameter_rules`], keeping each parameter's description.
///
/// # Panics
/// When a rule matches no parameter (the tests build the document).
struct ParameterConstraints;

impl Modify for ParameterConstraints {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        for (location, name, suffix, schema) in parameter_rules() {
            let mut matched = 0;
            for (path, item) in openapi.paths.paths.iter_mut() {
                if suffix.is_some_and(|s| !path.ends_with(s)) {
                    continue;
                }
                for op in operations_mut(item) {
                    for param in op.parameters.iter_mut().flatten() {
                        if let RefOr::T(param) = param
                            && param.name == name
                            && param.parameter_in == location
                        {
                            param.schema = Some(RefOr::T(schema.clone()));
                            matched += 1;
                        }
                    }
                }
            }
            assert!(matched > 0, "OpenAPI: no parameter {name} to constrain");
        }
    }
}

/// `{user}` accepts `me`, so `/api/v2/users/me` answers every method of
/// `/api/v2/users/{user}`: lists `PATCH /api/v2/users/me` too (a copy of
/// `PATCH /api/v2/users/{user}` without the path parameter).
struct UsersMe;

impl Modify for UsersMe {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::path::ParameterIn;
        let Some(mut patch) = openapi
            .paths
            .paths
            .get("/api/v2/users/{user}")
            .and_then(|item| item.patch.clone())
        else {
            panic!("OpenAPI: no PATCH /api/v2/users/{{user}}");
        };
        if let Some(params) = &mut patch.parameters {
            params.retain(|p| {
                !matches!(p, RefOr::T(p) if p.name == "user" && p.parameter_in == ParameterIn::Path)
            });
        }
        patch.operation_id = patch.operation_id.map(|id| format!("{id}_me"));
        // The caller of this route is an admin (`403` otherwise), who cannot
        // disable themselves: `disabled` may only be `false` here.
        if let Some(RefOr::T(body)) = &mut patch.request_body {
            use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Type};
            for content in body.content.values_mut() {
                let RefOr::T(content) = content else { continue };
                let Some(schema) = content.schema.take() else {
                    continue;
                };
                let only_false = ObjectBuilder::new().property(
                    "disabled",
                    ObjectBuilder::new()
                        .schema_type(Type::Boolean)
                        .enum_values(Some([false])),
                );
                content.schema = Some(RefOr::T(utoipa::openapi::schema::Schema::AllOf(
                    AllOfBuilder::new().item(schema).item(only_false).build(),
                )));
            }
        }
        if let Some(me) = openapi.paths.paths.get_mut("/api/v2/users/me") {
            me.patch = Some(patch);
        }
    }
}

/// States on every string of the document that it holds no NUL
/// ([`crate::validate::NO_NUL_PATTERN`]; the server refuses NUL anywhere in a
/// request, and never stores one): a string without a pattern gets that
/// one (the patterns of [`crate::validate`] exclude NUL themselves), a map's
/// keys get it as `propertyNames`, and an arbitrary JSON value becomes the
/// component `JsonWithoutNul`. Each variant of `ChatInputPart` takes its own
/// fields only (`additionalProperties: false`, as its deserializer). Runs
/// last but for [`ExperimentalMount`].
struct NoNul;

impl Modify for NoNul {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::{AdditionalProperties, Schema};
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, schema) in components.schemas.iter_mut() {
            // An error names the field it is about as the request spelled
            // it, NUL included.
            if name != "ErrorBody" && name != "Validation" {
                no_nul(schema);
            }
        }
        if let Some(RefOr::T(Schema::OneOf(parts))) = components.schemas.get_mut("ChatInputPart") {
            for part in &mut parts.items {
                if let RefOr::T(Schema::Object(part)) = part {
                    part.additional_properties =
                        Some(Box::new(AdditionalProperties::FreeForm(false)));
                }
            }
        }
        components
            .schemas
            .insert("JsonWithoutNul".to_owned(), RefOr::T(json_without_nul()));
        for item in openapi.paths.paths.values_mut() {
            for op in operations_mut(item) {
                for param in op.parameters.iter_mut().flatten() {
                    if let RefOr::T(param) = param
                        && let Some(schema) = &mut param.schema
                    {
                        no_nul(schema);
                    }
                }
                if let Some(RefOr::T(body)) = &mut op.request_body {
                    for content in body.content.values_mut() {
                        if let RefOr::T(content) = content
                            && let Some(schema) = &mut content.schema
                        {
                            no_nul(schema);
                        }
                    }
                }
            }
        }
    }
}

/// Any JSON value without NUL in its strings or keys.
fn json_without_nul() -> utoipa::openapi::schema::Schema {
    use crate::validate::NO_NUL_PATTERN;
    use utoipa::openapi::Ref;
    use utoipa::openapi::schema::{
        AdditionalProperties, AnyOfBuilder, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type,
    };
    let itself = || Ref::from_schema_name("JsonWithoutNul");
    let string = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(NO_NUL_PATTERN))
        .build();
    let mut object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::RefOr(itself().into())))
        .build();
    object.property_names = Some(Box::new(Schema::Object(string.clone())));
    Schema::AnyOf(
        AnyOfBuilder::new()
            .item(string)
            .item(ObjectBuilder::new().schema_type(SchemaType::Array(vec![
                Type::Number,
                Type::Boolean,
                Type::Null,
            ])))
            .item(ArrayBuilder::new().items(itself()))
            .item(object)
            .build(),
    )
}

/// See [`NoNul`].
fn no_nul(schema: &mut utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>) {
    use crate::validate::NO_NUL_PATTERN;
    use utoipa::openapi::schema::{AdditionalProperties, ArrayItems, Schema, SchemaType, Type};
    use utoipa::openapi::{Ref, RefOr};
    let RefOr::T(inner) = schema else { return };
    match inner {
        Schema::Object(object) => {
            let types: Vec<Type> = match &object.schema_type {
                SchemaType::Type(t) => vec![t.clone()],
                SchemaType::Array(ts) => ts.clone(),
                SchemaType::AnyValue => Vec::new(),
            };
            let free_form = object.properties.is_empty()
                && object.additional_properties.is_none()
                && object.enum_values.is_none()
                && object.extensions.is_none();
            if object.schema_type == SchemaType::AnyValue && free_form {
                *schema = RefOr::Ref(Ref::from_schema_name("JsonWithoutNul"));
                return;
            }
            if types.contains(&Type::String)
                && object.enum_values.is_none()
                && object.pattern.is_none()
            {
                object.pattern = Some(NO_NUL_PATTERN.to_owned());
            }
            if types.contains(&Type::Object) {
                if object.properties.is_empty() && object.additional_properties.is_none() {
                    object.additional_properties = Some(Box::new(AdditionalProperties::RefOr(
                        Ref::from_schema_name("JsonWithoutNul").into(),
                    )));
                }
                if object.additional_properties.is_some() && object.property_names.is_none() {
                    let mut names = utoipa::openapi::schema::Object::with_type(Type::String);
                    names.pattern = Some(NO_NUL_PATTERN.to_owned());
                    object.property_names = Some(Box::new(Schema::Object(names)));
                }
            }
            for property in object.properties.values_mut() {
                no_nul(property);
            }
            if let Some(extra) = &mut object.additional_properties
                && let AdditionalProperties::RefOr(extra) = extra.as_mut()
            {
                no_nul(extra);
            }
        }
        Schema::Array(array) => {
            if let ArrayItems::RefOrSchema(items) = &mut array.items {
                no_nul(items);
            }
        }
        Schema::OneOf(one_of) => one_of.items.iter_mut().for_each(no_nul),
        Schema::AnyOf(any_of) => any_of.items.iter_mut().for_each(no_nul),
        Schema::AllOf(all_of) => all_of.items.iter_mut().for_each(no_nul),
        _ => {}
    }
}

/// Copies every `/api/v2/chats` path to `/api/experimental/chats`.
struct ExperimentalMount;

impl Modify for ExperimentalMount {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let copies: Vec<(String, utoipa::openapi::PathItem)> = openapi
            .paths
            .paths
            .iter()
            .filter_map(|(path, item)| {
                let rest = path.strip_prefix("/api/v2/chats")?;
                let mut item = item.clone();
                for op in operations_mut(&mut item) {
                    if let Some(id) = &op.operation_id {
                        op.operation_id = Some(format!("{id}_experimental"));
                    }
                }
                Some((format!("/api/experimental/chats{rest}"), item))
            })
            .collect();
        for (path, item) in copies {
            openapi.paths.paths.insert(path, item);
        }
    }
}

fn operations_mut(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.options.as_mut(),
        item.head.as_mut(),
        item.patch.as_mut(),
        item.trace.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// The document as JSON.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
