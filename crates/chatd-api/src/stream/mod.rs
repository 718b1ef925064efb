//! The live stream (`spec/chatd-architecture.md`, "Stream loop", "Sync
//! poller", "Relay mechanism"; API.md "Stream (WebSocket)", "Parts relay",
//! "Details" → "Stream").
//!
//! Routes:
//! - `GET /api/v2/chats/{chat}/stream?after_id=N`: WebSocket ([`ws`]);
//!   authenticated like every user route, or, from browsers, with the
//!   `chatd.bearer.<token>` subprotocol ([`crate::auth`]); it selects the
//!   `chatd` subprotocol;
//! - `GET /api/v2/chats/{chat}/events?after_id=N`: the same events as
//!   Server-Sent Events, resumable with `Last-Event-ID` ([`sse`]);
//! - `GET /api/v2/chats/{chat}/stream/parts`: the replica-to-replica parts
//!   endpoint, authenticated with the relay secret ([`parts`]).
//!
//! Each stream runs one loop ([`session::StreamLoop`]) whose decisions are
//! the pure [`state::StreamState`]. Endpoint lifecycle, in this order: check
//! the caller may see the chat; subscribe to `chat:update:{chat_id}` (before
//! any read: a notification published between a read and a later subscribe
//! would be lost); register with the replica's [`poller::SyncPoller`];
//! start the relay forwarder ([`relay`]) with no target; then the loop's
//! bootstrap `Sync` against the null local state. On exit everything is
//! released by drop (poller registration, subscription, forwarder).
//!
//! Streaming needs [`StreamDeps`] ([`crate::AppState::with_stream`]):
//! without them the three routes answer `503`.

pub mod event;
pub mod fetch;
pub mod parts;
pub mod poller;
pub mod relay;
pub mod session;
pub mod sse;
pub mod state;
pub mod ws;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse as _, Response};
use chatd_pubsub::{Pubsub, chat_update_channel};
use chatd_store::Store;
use chatd_worker::PartBuffer;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

pub use event::{ChatStreamEvent, StreamPayload};
pub use session::Termination;
pub use state::{ChatVersions, StreamState, SyncHints};

use crate::AppState;
use crate::auth::{Caller, WS_PROTOCOL};
use crate::chats::visible_chat;
use crate::error::{ApiError, ApiResult};
use crate::extract::{PathParams, QueryParams, parse_id};
use poller::{PollerRegistry, SyncPoller};
use relay::{RelayConfig, RelayDeps, RelayHandle};
use session::StreamLoop;

/// At most this many events go in one frame (API.md).
pub const MAX_EVENTS_PER_FRAME: usize = 256;

/// WebSocket close codes the stream uses.
pub mod close_code {
    /// Normal closure (the client left; the chat was deleted).
    pub const NORMAL: u16 = 1000;
    /// Going away (server shutdown; a connection presumed dead).
    pub const GOING_AWAY: u16 = 1001;
    /// Unsupported data (a malformed control message on the parts endpoint).
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// Internal error (database failure, invariant violation).
    pub const INTERNAL: u16 = 1011;
    /// Try again later (the client was too slow to keep up).
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// Tunables of the live stream. Defaults are the spec's and API.md's.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// Sync poller period (`--sync-poll-interval`, 10 s).
    pub sync_poll_interval: Duration,
    /// WebSocket ping period (15 s), on client streams and parts
    /// connections.
    pub ping_interval: Duration,
    /// A connection with no inbound frame (pongs included) for this long is
    /// presumed dead and closed (45 s).
    pub idle_timeout: Duration,
    /// Timeout of one frame write (10 s).
    pub write_timeout: Duration,
    /// SSE keep-alive comment period (15 s).
    pub keep_alive_interval: Duration,
    /// Events queued per client before the loop waits (1024).
    pub outbound_capacity: usize,
    /// How long the loop waits for room in a full queue before it
    /// disconnects the client as too slow (10 s).
    pub slow_client_timeout: Duration,
    /// Attempts of one `Sync`'s reads before the stream ends (5).
    pub db_attempts: u32,
    /// Relay forwarder tunables.
    pub relay: RelayConfig,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            sync_poll_interval: Duration::from_secs(10),
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(45),
            write_timeout: Duration::from_secs(10),
            keep_alive_interval: Duration::from_secs(15),
            outbound_capacity: 1024,
            slow_client_timeout: Duration::from_secs(10),
            db_attempts: 5,
            relay: RelayConfig {
                backoff_initial: Duration::from_millis(100),
                backoff_max: Duration::from_secs(5),
                dial_timeout: Duration::from_secs(5),
                idle_timeout: Duration::from_secs(45),
            },
        }
    }
}

/// What streaming needs from the replica.
#[derive(Clone)]
pub struct StreamDeps {
    /// The replica's part buffer: the same one its worker writes.
    pub parts: PartBuffer,
    /// The replica id, which is its worker id: a chat whose `worker_id` is
    /// this is relayed from `parts` directly.
    pub replica_id: Uuid,
    /// Pubsub for `chat:update:{chat_id}`; `None` makes the stream loops
    /// ignore notifications and converge through the sync poller alone.
    pub pubsub: Option<Arc<dyn Pubsub>>,
    /// Tunables.
    pub config: StreamConfig,
    /// Cancelled when the replica shuts down: every stream closes (`1001`)
    /// and the sync poller stops.
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for StreamDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamDeps")
            .field("replica_id", &self.replica_id)
            .field("pubsub", &self.pubsub.is_some())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The replica-wide part of streaming: dependencies, the poller's
/// registry and its task. Cheap to clone.
#[derive(Clone)]
pub struct StreamService {
    pub(crate) store: Store,
    pub(crate) parts: PartBuffer,
    pub(crate) replica_id: Uuid,
    pub(crate) pubsub: Option<Arc<dyn Pubsub>>,
    pub(crate) config: StreamConfig,
    pub(crate) shutdown: CancellationToken,
    pub(crate) relay_secret: Option<String>,
    pub(crate) registry: PollerRegistry,
    pub(crate) tasks: TaskTracker,
}

impl std::fmt::Debug for StreamService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamService")
            .field("replica_id", &self.replica_id)
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl StreamService {
    /// Starts the sync poller on its own task (it stops on
    /// `deps.shutdown`). Must be called inside a tokio runtime.
    pub(crate) fn start(store: Store, relay_secret: Option<String>, deps: StreamDeps) -> Self {
        let registry = PollerRegistry::default();
        let tasks = TaskTracker::new();
        tasks.spawn(
            SyncPoller {
                pool: store.pool().clone(),
                registry: registry.clone(),
                interval: deps.config.sync_poll_interval,
            }
            .run(deps.shutdown.clone()),
        );
        tasks.close();
        Self {
            store,
            parts: deps.parts,
            replica_id: deps.replica_id,
            pubsub: deps.pubsub,
            config: deps.config,
            shutdown: deps.shutdown,
            relay_secret,
            registry,
            tasks,
        }
    }

    /// The poller's registrations (for tests and metrics).
    pub fn poller_registry(&self) -> &PollerRegistry {
        &self.registry
    }

    /// Waits until the sync poller stopped (after `shutdown`).
    pub async fn wait(&self) {
        self.tasks.wait().await;
    }

    /// Prepares the loop of a new stream: subscribe, register, start the
    /// forwarder. The bootstrap read happens when the loop runs.
    async fn open(&self, chat_id: Uuid, after_id: i64) -> ApiResult<StreamLoop> {
        let subscription = match &self.pubsub {
            Some(pubsub) => Some(
                pubsub
                    .subscribe(&chat_update_channel(chat_id))
                    .await
                    .map_err(|e| {
                        ApiError::unavailable("Notifications are unavailable.").with_source(e)
                    })?,
            ),
            None => None,
        };
        let poller = self.registry.register(chat_id);
        let relay = RelayHandle::start(RelayDeps {
            chat_id,
            replica_id: self.replica_id,
            parts: self.parts.clone(),
            pool: self.store.pool().clone(),
            secret: self.relay_secret.clone(),
            config: self.config.relay.clone(),
        });
        Ok(StreamLoop {
            state: StreamState::new(chat_id, after_id),
            store: self.store.clone(),
            pubsub: subscription,
            poller,
            relay,
            config: self.config.clone(),
            shutdown: self.shutdown.clone(),
        })
    }
}

pub(crate) fn upgrade_required(rejection: WebSocketUpgradeRejection) -> ApiError {
    let detail = rejection.into_response();
    ApiError::new(
        axum::http::StatusCode::BAD_REQUEST,
        "A WebSocket upgrade is required.",
    )
    .with_detail(format!(
        "This route speaks WebSocket only ({}).",
        detail.status()
    ))
}

/// `GET /api/v2/chats/{chat}/stream?after_id=N`: the live stream over
/// WebSocket (see the module doc and API.md "Stream (WebSocket)").
///
/// Authentication: `Authorization: Bearer <token>`, or, for clients that
/// cannot set headers on a WebSocket (browsers), no `Authorization` header
/// and the subprotocols `chatd, chatd.bearer.<token>` in
/// `Sec-WebSocket-Protocol` (e.g. `new WebSocket(url, ["chatd",
/// "chatd.bearer." + token])`). A client that offers `chatd` gets it back
/// as the selected subprotocol; the token is never echoed.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/stream",
    tag = "stream",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("after_id" = Option<i64>, Query, description = "Messages with id <= after_id are known to the client and not sent"),
        ("Sec-WebSocket-Protocol" = Option<String>, Header, description = "Browser authentication: `chatd, chatd.bearer.<token>` when there is no `Authorization` header (browsers cannot set it on a WebSocket). The response selects the `chatd` subprotocol."),
    ),
    responses(
        (status = 101, description = "WebSocket. The server sends text frames, each a JSON array of 1 to 256 `ChatStreamEvent`s: first the full state (messages with id > after_id, `queue_update`, `status`, then `error`/`action_required`/`retry` where they apply, `preview_reset`), then live events in the spec's order. The server pings; close codes: 1000 chat deleted, 1001 shutdown or dead connection, 1011 database failure or internal error, 1013 client too slow (reconnect with after_id)."),
        (status = 400, description = "Invalid chat id or after_id, or not a WebSocket upgrade", body = crate::ErrorBody),
        (status = 401, description = "Missing, unknown or expired token", body = crate::ErrorBody),
        (status = 404, description = "Chat not found or not visible", body = crate::ErrorBody),
        (status = 503, description = "Live streaming is not configured on this server", body = crate::ErrorBody),
    )
)]
pub async fn stream_ws(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    RawQuery(query): RawQuery,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let chat_id = params.uuid("chat")?;
    let after_id = QueryParams::parse(query.as_deref())?
        .id("after_id")?
        .unwrap_or(0);
    visible_chat(&state, &caller, chat_id).await?;
    let service = state.stream_service()?.clone();
    let ws = ws.map_err(upgrade_required)?;
    // Browsers fail the handshake unless the server selects one of the
    // subprotocols they offered; `chatd` is the one that is not the token.
    let ws = ws.protocols([WS_PROTOCOL]);
    let stream_loop = service.open(chat_id, after_id).await?;
    let config = service.config.clone();
    Ok(ws.on_upgrade(move |socket| ws::serve(socket, stream_loop, config)))
}

/// `GET /api/v2/chats/{chat}/events?after_id=N`: the live stream as
/// Server-Sent Events (see [`sse`]).
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/events",
    tag = "stream",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("after_id" = Option<i64>, Query, description = "Messages with id <= after_id are known to the client and not sent"),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume: the `id` of the last event received; wins over after_id (0: from the start)"),
    ),
    responses(
        (status = 200, description = "`text/event-stream`: one SSE event per `ChatStreamEvent` (`event: <type>`, `data: <ChatStreamEvent JSON>`, `id: <highest committed message id delivered so far>`), `: keep-alive` comments at least every 15 s, and a final `: stream closed: <reason>` comment when the server ends the stream.", content_type = "text/event-stream", body = ChatStreamEvent),
        (status = 400, description = "Invalid chat id, after_id or Last-Event-ID", body = crate::ErrorBody),
        (status = 401, description = "Missing, unknown or expired token", body = crate::ErrorBody),
        (status = 404, description = "Chat not found or not visible", body = crate::ErrorBody),
        (status = 503, description = "Live streaming is not configured on this server", body = crate::ErrorBody),
    )
)]
pub async fn stream_sse(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let chat_id = params.uuid("chat")?;
    let mut after_id = QueryParams::parse(query.as_deref())?
        .id("after_id")?
        .unwrap_or(0);
    if let Some(last) = headers.get("last-event-id") {
        let text = last.to_str().unwrap_or_default().trim();
        after_id = match text {
            "" | "0" => 0,
            _ => parse_id(text).ok_or_else(|| {
                ApiError::new(axum::http::StatusCode::BAD_REQUEST, "Invalid request.")
                    .with_validation(
                        "Last-Event-ID",
                        "must be a message id (a non-negative integer)",
                    )
            })?,
        };
    }
    visible_chat(&state, &caller, chat_id).await?;
    let service = state.stream_service()?.clone();
    let stream_loop = service.open(chat_id, after_id).await?;
    Ok(axum::response::IntoResponse::into_response(sse::serve(
        stream_loop,
        &service.config,
        after_id,
    )))
}
