//! HTTP API of chatd (`../shared/API.md`; behaviour per
//! `spec/chatd-architecture.md` "HTTP endpoints" and "Core state machine").
//!
//! [`router`] serves every route of API.md:
//! - `/healthz`, `/readyz`, `/metrics`, `/api/v2/openapi.json`
//!   (unauthenticated; [`health`], [`openapi`]);
//! - the web UI: `/`, `/app.js`, `/markdown.js`, `/app.css` and the
//!   vendored libraries under `/vendor/` (unauthenticated static files;
//!   [`web::ASSETS`]);
//! - users, tokens and replicas ([`users`], [`auth`]); password sign-in,
//!   sessions and password changes ([`sessions`]);
//! - read-only shares of chats ([`shares`]);
//! - a user's usage of the period and the budget refusal of the routes
//!   that start a turn ([`usage`]);
//! - chats and their actions ([`chats`]), messages ([`messages`]), the
//!   queue ([`queue`]) and tool results ([`tools`]), under `/api/v2/chats`
//!   and, unchanged, `/api/experimental/chats`;
//! - providers, model configs and MCP servers ([`admin`]);
//! - the live stream: `/stream` (WebSocket), `/events` (SSE) and the
//!   replica-to-replica `/stream/parts` ([`stream`]), and the long-poll
//!   `/updates`, once the state has its [`StreamDeps`]
//!   ([`AppState::with_stream`]);
//! - message windows and paging by size ([`paging`]);
//! - files: upload, list, download and delete ([`files`]).
//! - `Idempotency-Key` on every mutating chat route ([`idempotency`]).
//!
//! Every execution-state change goes through `chatd_store`'s
//! `ChatMachine`, every read and metadata write through its front
//! (`chatd_store::{chats, messages, ...}`), and every other write of several
//! statements through one store operation (this crate writes no SQL and
//! opens no transaction of its own); errors become the API.md error body through one type,
//! [`ApiError`]. Inputs are parsed by hand-written extractors ([`extract`]):
//! a JSON body through the typed [`extract::Json`], read after the
//! handler's visibility and permission checks, so that the order of checks
//! of API.md "Details" holds and every bad input is a `400`/`413`/`415` in
//! the documented shape. An answer given before
//! the body was read first reads and drops the rest of the body, within
//! limits ([`drain`]), so that a client still uploading gets the status,
//! not a reset.
//!
//! Layers, each using only the ones below it (no module imports one above
//! it): the route modules (one per resource) on top; below them [`auth`],
//! [`extract`], [`validate`] and [`objects`]; then [`app`] (the shared state),
//! and the leaves [`token`] (bearer tokens), [`json`] (JSON bodies),
//! [`error`] and [`http_metrics`]. [`openapi`] lists every route and
//! [`router`] mounts them.
//!
//! For the binary: [`bootstrap_admin`] (`CHATD_BOOTSTRAP_ADMIN_TOKEN`),
//! [`create_token`] (`chatd token create`), [`config_file`] (`--config`) and
//! [`install_metrics_recorder`].

pub mod admin;
pub mod app;
pub mod auth;
pub mod body_deadline;
pub mod branches;
pub mod chats;
pub mod commit_watch;
pub mod compat;
pub mod config_file;
pub mod drain;
pub mod error;
pub mod export;
pub mod extract;
pub mod files;
pub mod health;
pub mod http_metrics;
pub mod idempotency;
pub mod json;
pub mod messages;
pub mod objects;
pub mod openapi;
pub mod paging;
pub mod queue;
pub mod rate_limit;
pub mod search;
pub mod sessions;
pub mod shares;
pub mod stream;
pub mod token;
pub mod tools;
pub mod usage;
pub mod users;
pub mod validate;
pub mod web;
pub mod workspaces;

use axum::Router;
use axum::routing::{delete, get, patch, post, put};

pub use app::{ApiOptions, AppState};
pub use auth::{bootstrap_admin, create_token};
pub use error::{ApiError, ApiResult, ErrorBody, Validation};
pub use http_metrics::install_metrics_recorder;
pub use stream::{StreamConfig, StreamDeps};

/// Every chat route, relative to the chats base path. Static segments
/// (`providers`, `model-configs`, `mcp-servers`, `models`) win over
/// `{chat}`.
fn chat_routes() -> Router<AppState> {
    Router::new()
        .route("/models", get(admin::model_configs::list_models))
        .route(
            "/providers",
            get(admin::providers::list_providers).post(admin::providers::create_provider),
        )
        .route(
            "/providers/{id}",
            patch(admin::providers::update_provider).delete(admin::providers::delete_provider),
        )
        .route(
            "/model-configs",
            get(admin::model_configs::list_model_configs)
                .post(admin::model_configs::create_model_config),
        )
        .route(
            "/model-configs/{id}",
            patch(admin::model_configs::update_model_config)
                .delete(admin::model_configs::delete_model_config),
        )
        .route(
            "/mcp-servers",
            get(admin::mcp_servers::list_mcp_servers).post(admin::mcp_servers::create_mcp_server),
        )
        .route(
            "/mcp-servers/{id}",
            patch(admin::mcp_servers::update_mcp_server)
                .delete(admin::mcp_servers::delete_mcp_server),
        )
        .route(
            "/{chat}",
            get(chats::get_chat)
                .patch(chats::update_chat)
                .delete(chats::delete_chat),
        )
        .route(
            "/{chat}/messages",
            get(messages::list_messages).post(messages::send_message),
        )
        .route("/{chat}/messages/tree", get(branches::message_tree))
        .route("/{chat}/messages/{message}", patch(messages::edit_message))
        .route(
            "/{chat}/messages/{message}/regenerate",
            post(branches::regenerate),
        )
        .route("/{chat}/branches/activate", post(branches::activate_branch))
        .route("/{chat}/fork", post(branches::fork_chat))
        .route("/{chat}/export", get(export::export_chat))
        .route("/{chat}/workspace", get(workspaces::list_workspace))
        .route("/{chat}/workspace/file", get(workspaces::workspace_file))
        .route(
            "/{chat}/workspace/archive",
            get(workspaces::workspace_archive),
        )
        .route("/import", post(export::import_chat))
        .route(
            "/{chat}/shares",
            get(shares::list_shares).post(shares::create_share),
        )
        .route("/{chat}/shares/{user}", delete(shares::delete_share))
        .route(
            "/{chat}/queue/{queued}",
            delete(queue::delete_queued_message).patch(queue::edit_queued_message),
        )
        .route(
            "/{chat}/queue/{queued}/move",
            post(queue::move_queued_message),
        )
        .route(
            "/{chat}/queue/{queued}/promote",
            post(queue::promote_queued_message),
        )
        .route("/{chat}/interrupt", post(chats::actions::interrupt))
        .route("/{chat}/tool-results", post(tools::submit_tool_results))
        .route(
            "/{chat}/reconcile-invalid",
            post(chats::actions::reconcile_invalid),
        )
        .route("/{chat}/compact", post(chats::actions::compact))
        .route("/{chat}/clear-context", post(chats::actions::clear_context))
        .route("/{chat}/stream", get(stream::routes::stream_ws))
        .route("/{chat}/events", get(stream::routes::stream_sse))
        .route("/{chat}/stream/parts", get(stream::parts::parts_endpoint))
        .route("/{chat}/updates", get(stream::updates::long_poll_updates))
}

/// The whole HTTP API (see the crate doc). Every route records request
/// metrics; unknown paths answer `404` and unsupported methods `405`, both in
/// the API error shape; an answer first reads and drops what its handler
/// left of the request body, within limits ([`drain::drain_unread_body`]).
pub fn router(state: AppState) -> Router {
    let chats = chat_routes();
    Router::new()
        .merge(web::routes())
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/api/v2/openapi.json", get(openapi::openapi_json))
        .route(
            "/api/v2/users",
            get(users::list_users).post(users::create_user),
        )
        .route(
            "/api/v2/users/me",
            get(users::get_me).patch(users::patch_user),
        )
        .route("/api/v2/users/{user}", patch(users::patch_user))
        .route("/api/v2/users/{user}/password", put(sessions::set_password))
        .route("/api/v2/sessions", post(sessions::sign_in))
        .route(
            "/api/v2/sessions/current",
            get(sessions::current_session).delete(sessions::sign_out),
        )
        .route(
            "/api/v2/users/{user}/tokens",
            get(users::list_user_tokens).post(users::create_user_token),
        )
        .route(
            "/api/v2/users/{user}/tokens/{id}",
            delete(users::delete_user_token),
        )
        .route("/api/v2/users/{user}/usage", get(usage::get_user_usage))
        .route("/api/v2/replicas", get(users::list_replicas))
        .route("/api/v2/search", get(search::search))
        .route(
            "/api/v2/files",
            get(files::list_files).post(files::upload_file),
        )
        .route(
            "/api/v2/files/{id}",
            get(files::download_file).delete(files::delete_file),
        )
        .route(
            "/api/v2/chats",
            get(chats::list_chats).post(chats::create_chat),
        )
        .route(
            "/api/experimental/chats",
            get(chats::list_chats).post(chats::create_chat),
        )
        .merge(compat::routes())
        .nest("/api/v2/chats", chats.clone())
        .nest("/api/experimental/chats", chats)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            idempotency::idempotency_layer,
        ))
        // Outside the idempotency claim: a write refused while the database
        // cannot commit claims no key.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            commit_watch::reject_writes_while_blocked,
        ))
        .route_layer(axum::middleware::from_fn(http_metrics::track_metrics))
        .method_not_allowed_fallback(health::method_not_allowed)
        .fallback(health::not_found)
        .layer(axum::middleware::from_fn(drain::drain_unread_body))
        // Outermost: the body deadline runs from the start of the request.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            body_deadline::request_body_deadline,
        ))
        .with_state(state)
}
