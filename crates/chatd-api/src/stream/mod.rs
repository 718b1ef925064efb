//! The live stream (`spec/chatd-architecture.md`, "Stream loop", "Sync
//! poller", "Relay mechanism"; API.md "Stream (WebSocket)", "Parts relay",
//! "Details" → "Stream").
//!
//! Routes:
//! - `GET /api/v2/chats/{chat}/stream?after_id=N`: WebSocket ([`ws`],
//!   [`routes::stream_ws`]);
//!   authenticated like every user route, or, from browsers, with the
//!   `chatd.bearer.<token>` subprotocol ([`crate::auth`]); it selects the
//!   `chatd` subprotocol;
//! - `GET /api/v2/chats/{chat}/events?after_id=N`: the same events as
//!   Server-Sent Events, resumable with `Last-Event-ID` ([`sse`],
//!   [`routes::stream_sse`]);
//! - `GET /api/v2/chats/{chat}/stream/parts`: the replica-to-replica parts
//!   endpoint, authenticated with the relay secret ([`parts`]);
//! - `GET /api/v2/chats/{chat}/updates`: the long-poll fallback, woken by
//!   the same subscription and sync poller as a stream loop ([`updates`]).
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
//! Before a user stream (WebSocket, SSE, long-poll) opens, it is admitted
//! ([`admission`]): a slot under the per-user cap of open streams (`429`
//! beyond it) and a watch on its token, which closes it within 10 s once
//! the token no longer authenticates. WebSocket client frames are capped at
//! [`config::MAX_CLIENT_MESSAGE_BYTES`] (`1009` beyond).
//!
//! Streaming needs [`StreamDeps`] ([`crate::AppState::with_stream`]):
//! without them the three routes answer `503`. [`config`] and the pure
//! modules ([`event`], [`state`]) are leaves; [`service`] opens loops;
//! the routes ([`routes`], [`parts`]) sit on top. No module here uses this
//! one's re-exports, so the stream modules import each other without a
//! cycle.

pub mod admission;
pub mod config;
pub mod event;
pub mod fetch;
pub mod parts;
pub mod poller;
pub mod relay;
pub mod routes;
pub mod service;
pub mod session;
pub mod sse;
pub mod state;
pub mod updates;
pub mod ws;

pub use config::{StreamConfig, StreamDeps};
pub use event::{ChatStreamEvent, StreamPayload};
pub use service::StreamService;
pub use session::Termination;
pub use state::{ChatVersions, StreamState, SyncHints};
