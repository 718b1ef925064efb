//! HTTP API of chatd (`../shared/API.md`; behaviour per
//! `spec/chatd-architecture.md` "HTTP endpoints" and "Core state machine").
//!
//! [`router`] serves every route of API.md:
//! - `/healthz`, `/readyz`, `/metrics`, `/api/v2/openapi.json`
//!   (unauthenticated; [`health`], [`openapi`]);
//! - the web UI: `/`, `/app.js`, `/markdown.js`, `/app.css` and the
//!   vendored libraries under `/vendor/` (unauthenticated static files;
//!   [`web::ASSETS`]);
//! - users, tokens and replicas ([`users`], [`auth`]);
//! - chats, messages, queue and actions ([`chats`], [`messages`]), under
//!   `/api/v2/chats` and, unchanged, `/api/experimental/chats`;
//! - providers, model configs and MCP servers ([`admin`]);
//! - the live stream: `/stream` (WebSocket), `/events` (SSE) and the
//!   replica-to-replica `/stream/parts` ([`stream`]), once the state has its
//!   [`StreamDeps`] ([`AppState::with_stream`]).
//!
//! Every execution-state change goes through `chatd_store`'s
//! `ChatMachine`, and every read and metadata write through its `queries`
//! (this crate writes no SQL); errors become the API.md error body through one type,
//! [`ApiError`]. Inputs are parsed by hand-written extractors ([`extract`])
//! so that the order of checks of API.md "Details" holds and every bad
//! input is a `400`/`413` in the documented shape. An answer given before
//! the body was read first reads and drops the rest of the body, within
//! limits ([`drain`]), so that a client still uploading gets the status,
//! not a reset.
//!
//! For the binary: [`bootstrap_admin`] (`CHATD_BOOTSTRAP_ADMIN_TOKEN`),
//! [`create_token`] (`chatd token create`), [`config_file`] (`--config`) and
//! [`install_metrics_recorder`].

pub mod admin;
pub mod auth;
pub mod chats;
pub mod config_file;
pub mod drain;
pub mod error;
pub mod extract;
pub mod health;
pub mod messages;
pub mod objects;
pub mod openapi;
pub mod stream;
pub mod users;
pub mod validate;
pub mod web;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;

pub use auth::{bootstrap_admin, create_token};
pub use error::{ApiError, ApiResult, ErrorBody, Validation};
pub use health::install_metrics_recorder;
pub use stream::{StreamConfig, StreamDeps};

/// Tunables of the HTTP API.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// Maximum queued messages per chat (default 20); a send that would queue
    /// beyond it answers `429`.
    pub max_queued_messages: i64,
    /// Maximum request body in bytes (default 1 MiB); larger bodies answer
    /// `413`.
    pub body_limit_bytes: usize,
    /// The cluster's shared relay secret: the parts endpoint accepts only
    /// `Authorization: Bearer <relay secret>`, and the relay forwarder sends
    /// it. `None`: the parts endpoint answers `401` to everyone.
    pub relay_secret: Option<String>,
}

impl Default for ApiOptions {
    fn default() -> Self {
        Self {
            max_queued_messages: 20,
            body_limit_bytes: 1024 * 1024,
            relay_secret: None,
        }
    }
}

/// Shared state of every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    store: chatd_store::Store,
    options: ApiOptions,
    metrics: PrometheusHandle,
    streams: Option<stream::StreamService>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.inner.store)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// State over `store` with `options`. Installs the Prometheus recorder
    /// if it is not installed yet ([`install_metrics_recorder`]).
    pub fn new(store: chatd_store::Store, options: ApiOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                options,
                metrics: install_metrics_recorder(),
                streams: None,
            }),
        }
    }

    /// The same state with live streaming enabled: the `/stream`, `/events`
    /// and `/stream/parts` routes answer instead of `503`. Starts this
    /// replica's sync poller (it stops on `deps.shutdown`); must be called
    /// inside a tokio runtime.
    #[must_use]
    pub fn with_stream(self, deps: StreamDeps) -> Self {
        let streams = stream::StreamService::start(
            self.inner.store.clone(),
            self.inner.options.relay_secret.clone(),
            deps,
        );
        Self {
            inner: Arc::new(Inner {
                store: self.inner.store.clone(),
                options: self.inner.options.clone(),
                metrics: self.inner.metrics.clone(),
                streams: Some(streams),
            }),
        }
    }

    /// The live-stream service.
    ///
    /// # Errors
    /// `503` when the state was built without [`AppState::with_stream`].
    pub fn stream_service(&self) -> ApiResult<&stream::StreamService> {
        self.inner.streams.as_ref().ok_or_else(|| {
            ApiError::unavailable("Live streaming is not configured on this server.")
        })
    }

    /// The store.
    pub fn store(&self) -> &chatd_store::Store {
        &self.inner.store
    }

    /// The options.
    pub fn options(&self) -> &ApiOptions {
        &self.inner.options
    }

    /// The Prometheus handle `/metrics` renders.
    pub fn metrics(&self) -> &PrometheusHandle {
        &self.inner.metrics
    }
}

/// Every chat route, relative to the chats base path. Static segments
/// (`providers`, `model-configs`, `mcp-servers`, `models`) win over
/// `{chat}`.
fn chat_routes() -> Router<AppState> {
    Router::new()
        .route("/models", get(admin::list_models))
        .route(
            "/providers",
            get(admin::list_providers).post(admin::create_provider),
        )
        .route(
            "/providers/{id}",
            axum::routing::patch(admin::update_provider).delete(admin::delete_provider),
        )
        .route(
            "/model-configs",
            get(admin::list_model_configs).post(admin::create_model_config),
        )
        .route(
            "/model-configs/{id}",
            axum::routing::patch(admin::update_model_config).delete(admin::delete_model_config),
        )
        .route(
            "/mcp-servers",
            get(admin::list_mcp_servers).post(admin::create_mcp_server),
        )
        .route(
            "/mcp-servers/{id}",
            axum::routing::patch(admin::update_mcp_server).delete(admin::delete_mcp_server),
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
        .route(
            "/{chat}/messages/{message}",
            axum::routing::patch(messages::edit_message),
        )
        .route(
            "/{chat}/queue/{queued}",
            axum::routing::delete(messages::delete_queued_message),
        )
        .route(
            "/{chat}/queue/{queued}/promote",
            post(messages::promote_queued_message),
        )
        .route("/{chat}/interrupt", post(messages::interrupt))
        .route("/{chat}/tool-results", post(messages::submit_tool_results))
        .route(
            "/{chat}/reconcile-invalid",
            post(messages::reconcile_invalid),
        )
        .route("/{chat}/compact", post(messages::compact))
        .route("/{chat}/stream", get(stream::stream_ws))
        .route("/{chat}/events", get(stream::stream_sse))
        .route("/{chat}/stream/parts", get(stream::parts::parts_endpoint))
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
        .route("/api/v2/openapi.json", get(health::openapi_json))
        .route("/api/v2/users", post(users::create_user))
        .route("/api/v2/users/me", get(users::get_me))
        .route(
            "/api/v2/users/{user}/tokens",
            post(users::create_user_token),
        )
        .route("/api/v2/replicas", get(users::list_replicas))
        .route(
            "/api/v2/chats",
            get(chats::list_chats).post(chats::create_chat),
        )
        .route(
            "/api/experimental/chats",
            get(chats::list_chats).post(chats::create_chat),
        )
        .nest("/api/v2/chats", chats.clone())
        .nest("/api/experimental/chats", chats)
        .route_layer(axum::middleware::from_fn(health::track_metrics))
        .method_not_allowed_fallback(health::method_not_allowed)
        .fallback(health::not_found)
        .layer(axum::middleware::from_fn(drain::drain_unread_body))
        .with_state(state)
}
