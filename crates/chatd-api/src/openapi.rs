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
use utoipa::{IntoResponses, Modify, OpenApi};

use crate::error::ErrorBody;

/// `400`: bad input.
#[derive(IntoResponses)]
#[response(
    status = 400,
    description = "Bad input: malformed path or query parameter, invalid body (`validations` names each field), or a mutation of an archived chat"
)]
pub struct E400(#[allow(dead_code)] ErrorBody);

/// `401`: no valid token.
#[derive(IntoResponses)]
#[response(status = 401, description = "Missing, unknown or expired token")]
pub struct E401(#[allow(dead_code)] ErrorBody);

/// `403`: not allowed for this caller.
#[derive(IntoResponses)]
#[response(
    status = 403,
    description = "Admin-only route called by a member, or owner-only chat mutation called by someone else"
)]
pub struct E403(#[allow(dead_code)] ErrorBody);

/// `404`: not found or not visible.
#[derive(IntoResponses)]
#[response(
    status = 404,
    description = "Not found (or a chat that is not visible to the caller)"
)]
pub struct E404(#[allow(dead_code)] ErrorBody);

/// `409`: state conflict.
#[derive(IntoResponses)]
#[response(
    status = 409,
    description = "The current state does not allow it (message \"Chat is in an invalid state.\" for an invalid chat)"
)]
pub struct E409(#[allow(dead_code)] ErrorBody);

/// `413`: body too large.
#[derive(IntoResponses)]
#[response(status = 413, description = "Request body over the limit (1 MiB)")]
pub struct E413(#[allow(dead_code)] ErrorBody);

/// `429`: queue full.
#[derive(IntoResponses)]
#[response(
    status = 429,
    description = "The chat's queue is full (`detail` names the maximum)"
)]
pub struct E429(#[allow(dead_code)] ErrorBody);

/// `503`: not ready.
#[derive(IntoResponses)]
#[response(
    status = 503,
    description = "Database unreachable or migrations not applied"
)]
pub struct E503(#[allow(dead_code)] ErrorBody);

/// The document's root.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "chatd",
        description = "HTTP API of chatd, a durable multi-replica service running LLM chat agents on PostgreSQL. \
Every chat route under /api/v2/chats is also served, unchanged, under /api/experimental/chats. \
Every non-2xx response has the body ErrorBody.",
    ),
    paths(
        crate::health::healthz,
        crate::health::readyz,
        crate::health::metrics,
        crate::health::openapi_json,
        crate::users::create_user,
        crate::users::create_user_token,
        crate::users::get_me,
        crate::users::list_replicas,
        crate::chats::list_chats,
        crate::chats::create_chat,
        crate::chats::get_chat,
        crate::chats::update_chat,
        crate::chats::delete_chat,
        crate::messages::list_messages,
        crate::messages::send_message,
        crate::messages::edit_message,
        crate::messages::delete_queued_message,
        crate::messages::promote_queued_message,
        crate::messages::interrupt,
        crate::messages::submit_tool_results,
        crate::messages::reconcile_invalid,
        crate::messages::compact,
        crate::stream::stream_ws,
        crate::stream::stream_sse,
        crate::stream::parts::parts_endpoint,
        crate::admin::list_models,
        crate::admin::list_providers,
        crate::admin::create_provider,
        crate::admin::update_provider,
        crate::admin::delete_provider,
        crate::admin::list_model_configs,
        crate::admin::create_model_config,
        crate::admin::update_model_config,
        crate::admin::delete_model_config,
        crate::admin::list_mcp_servers,
        crate::admin::create_mcp_server,
        crate::admin::update_mcp_server,
        crate::admin::delete_mcp_server,
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
        chatd_core::RetryState,
        crate::stream::event::EpisodeSelection,
    )),
    modifiers(&SecurityAddon, &ExperimentalMount),
    security(("bearer" = [])),
    tags(
        (name = "chats", description = "Chats (also under /api/experimental/chats)"),
        (name = "messages", description = "Messages, queue and actions of one chat"),
        (name = "stream", description = "Live stream of a chat: WebSocket, Server-Sent Events, and the replica-to-replica parts relay"),
        (name = "admin", description = "Providers, model configs and MCP servers"),
        (name = "users", description = "Users, tokens and replicas"),
        (name = "health", description = "Health, readiness, metrics and this document"),
    )
)]
pub struct ApiDoc;

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
