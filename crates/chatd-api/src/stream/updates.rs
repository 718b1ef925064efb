//! The long-poll route `GET /api/v2/chats/{chat}/updates` (API.md "Message
//! windows and paging by size"; `spec/durable-agent-loop.md` "UI retrieval
//! and updates"): for clients that can use neither WebSocket nor SSE.
//!
//! It is woken by what wakes the stream loops, never by polling the
//! database in a loop: the `chat:update:{chat_id}` subscription (the fast
//! path) and this replica's shared [`SyncPoller`](super::poller::SyncPoller)
//! (the safety net for lost notifications, one query per interval for all
//! registered chats). Order, as for a stream: subscribe and register
//! *first*, then read the chat once; reading first would lose a change
//! committed between the read and the subscribe, and the request would sleep
//! through it. After that the chat is read again only when a notification
//! (or a poller hint, or a pubsub reconnect) says its `snapshot_version`
//! may have passed `after_snapshot_version`.
//!
//! Answers: `200 Chat` as soon as `snapshot_version > after_snapshot_version`
//! (at once if it already is); `204` when `wait_ms` ends first, or when the
//! server shuts down during the wait; `404` when the chat is deleted during
//! the wait (noticed through the sync poller's "gone" hint, so within one
//! poll interval, or at the next notification), or `204` if the wait ends
//! before that is noticed; `401` when the request's token is revoked or
//! expires, or its user is disabled, during the wait (noticed within 10 s);
//! `429` when the caller already holds the maximum of open streams
//! ([`super::admission`]).

use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use chatd_pubsub::{ChatUpdate, PubsubEvent, chat_update_channel};
use chatd_store::LockMode;
use chatd_store::chats;
use utoipa::IntoParams;

use crate::app::AppState;
use crate::auth::ChatTarget;
use crate::chats::Chat;
use crate::error::{ApiError, ApiResult, E400, E401, E404, E429, E503};
use crate::extract::QueryParams;
use crate::validate::IntRange;

/// Default `wait_ms`: 25 s.
pub const DEFAULT_WAIT_MS: i64 = 25_000;
/// Largest `wait_ms`: 60 s.
pub const MAX_WAIT_MS: i64 = 60_000;

/// Query of `GET /chats/{chat}/updates`.
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct UpdatesParams {
    /// Required: the `snapshot_version` the client has seen (a
    /// non-negative integer). The answer is `200` once the chat's is
    /// greater.
    after_snapshot_version: i64,
    /// How long to wait in milliseconds, 0..=60000 (default 25000).
    wait_ms: Option<i64>,
}

/// `after_snapshot_version`: `0..=2^63-1` (the OpenAPI document states
/// it and `wait_ms`'s range: [`crate::openapi`]).
pub(crate) const AFTER_SNAPSHOT_VERSION: IntRange = IntRange::new(0, i64::MAX);
/// `wait_ms`: `0..=`[`MAX_WAIT_MS`].
pub(crate) const WAIT_MS: IntRange = IntRange::new(0, MAX_WAIT_MS);

/// `GET /api/v2/chats/{chat}/updates?after_snapshot_version=N&wait_ms=25000`:
/// long-poll for a change of the chat (see the module doc). Same visibility
/// as `GET /chats/{chat}` (`404` for a chat the caller may not see). A
/// missing or bad `after_snapshot_version` or a bad `wait_ms` → `400`
/// naming the field. `503` when live updates are not configured.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/updates",
    tag = "stream",
    params(("chat" = Uuid, Path, description = "Chat id"), UpdatesParams),
    responses(
        (status = 200, description = "The chat; its snapshot_version is greater than after_snapshot_version", body = Chat),
        (status = 204, description = "No change within wait_ms (or the server is shutting down)"),
        E400, E401, E404, E429, E503,
    )
)]
pub async fn long_poll_updates(
    State(state): State<AppState>,
    target: ChatTarget,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let id = target.id();
    let query = QueryParams::parse(query.as_deref())?;
    if query.get("after_snapshot_version").is_none() {
        return Err(ApiError::invalid_query(
            "after_snapshot_version",
            "is required (a non-negative integer)",
        ));
    }
    let after = query.int_in(
        "after_snapshot_version",
        AFTER_SNAPSHOT_VERSION.min,
        AFTER_SNAPSHOT_VERSION.max,
        0,
    )?;
    let wait_ms = query.int_in("wait_ms", WAIT_MS.min, WAIT_MS.max, DEFAULT_WAIT_MS)?;
    let service = state.stream_service()?;
    // A long-poll is an open stream: it counts under the caller's cap, and
    // ends with `401` if its token stops authenticating meanwhile.
    let admission = service.admit(
        &target.caller,
        id,
        target.access,
        state.options().limits.max_open_streams,
    )?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms as u64);

    // Subscribe and register before the read (module doc).
    let mut subscription =
        match &service.pubsub {
            Some(pubsub) => Some(pubsub.subscribe(&chat_update_channel(id)).await.map_err(
                |e| ApiError::unavailable("Notifications are unavailable.").with_source(e),
            )?),
            None => None,
        };
    let mut poller = service.registry.register(id);
    let read = || async {
        chats::select(state.store().pool(), id, LockMode::None)
            .await
            .map_err(ApiError::from)
    };
    let answer =
        |chat: &chatd_store::Chat| (StatusCode::OK, Json(Chat::from(chat))).into_response();

    match read().await? {
        Some(chat) if chat.snapshot_version > after => return Ok(answer(&chat)),
        Some(_) => {}
        None => return Err(ApiError::chat_not_found()),
    }
    loop {
        // Whether the chat must be read again.
        let stale = tokio::select! {
            () = tokio::time::sleep_until(deadline) => break,
            () = service.shutdown.cancelled() => break,
            () = admission.revoked().cancelled() => return Err(ApiError::unauthorized()),
            event = next_event(&mut subscription) => match event {
                Some(PubsubEvent::Message(payload)) => ChatUpdate::from_payload(&payload)
                    .map_or(true, |update| update.snapshot_version > after),
                Some(PubsubEvent::Reconnected) => true,
                None => {
                    // The pubsub shut down: the poller alone wakes us now.
                    subscription = None;
                    false
                }
            },
            hints = poller.next() => hints.gone || hints.snapshot_version.is_none_or(|v| v > after),
        };
        if stale {
            match read().await? {
                Some(chat) if chat.snapshot_version > after => return Ok(answer(&chat)),
                Some(_) => {}
                None => return Err(ApiError::chat_not_found()),
            }
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The next pubsub event, or never when there is no subscription.
async fn next_event(subscription: &mut Option<chatd_pubsub::Subscription>) -> Option<PubsubEvent> {
    match subscription {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
