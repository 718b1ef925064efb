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

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
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
within 60 s of the request's start; a chat creation, send or edit while the owner is over a monthly budget answers 429 \
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
        crate::objects::ChatInputPart,
        crate::objects::DynamicTool,
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
    modifiers(&SecurityAddon, &IdempotencyHeader, &ExperimentalMount),
    security(("bearer" = [])),
    tags(
        (name = "chats", description = "Chats (also under /api/experimental/chats)"),
        (name = "messages", description = "Messages, queue and actions of one chat"),
        (name = "stream", description = "Live stream of a chat: WebSocket, Server-Sent Events, and the replica-to-replica parts relay"),
        (name = "admin", description = "Providers, model configs and MCP servers"),
        (name = "users", description = "Users, tokens and replicas"),
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

/// Documents the `Idempotency-Key` header on every mutating chat route
/// ([`crate::idempotency`]). Runs before [`ExperimentalMount`], so both
/// mounts carry it.
struct IdempotencyHeader;

impl Modify for IdempotencyHeader {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/api/v2/chats") {
                continue;
            }
            let mutating = [
                item.post.as_mut(),
                item.put.as_mut(),
                item.patch.as_mut(),
                item.delete.as_mut(),
            ];
            for op in mutating.into_iter().flatten() {
                let header = ParameterBuilder::new()
                    .name("Idempotency-Key")
                    .parameter_in(ParameterIn::Header)
                    .required(utoipa::openapi::Required::False)
                    .description(Some(
                        "1 to 255 printable ASCII characters, per user. A repeat with the same key, method, path and body within 24 hours answers the first 2xx response (with `Idempotent-Replayed: true`) and changes nothing; the same key with another method, path or body is 409. Concurrent duplicates wait for the first. A request that failed is not remembered.",
                    ))
                    .schema(Some(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .min_length(Some(1))
                            .max_length(Some(255)),
                    ))
                    .build();
                op.parameters
                    .get_or_insert_with(Vec::new)
                    .push(utoipa::openapi::RefOr::T(header));
            }
        }
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
