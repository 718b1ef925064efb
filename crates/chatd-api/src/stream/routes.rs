//! The stream's user routes: `GET /api/v2/chats/{chat}/stream` (WebSocket,
//! [`stream_ws`]) and `GET /api/v2/chats/{chat}/events` (Server-Sent
//! Events, [`stream_sse`]). Both check the caller may see the chat, then
//! open a loop through [`StreamService`](super::service::StreamService).

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse as _, Response};

use super::config::MAX_CLIENT_MESSAGE_BYTES;
use super::event::ChatStreamEvent;
use super::{sse, ws};
use crate::app::AppState;
use crate::auth::{Caller, WS_PROTOCOL, readable_chat};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{PathParams, QueryParams, parse_id};

/// `400` for a request to a WebSocket-only route that is not a WebSocket
/// upgrade.
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
        (status = 101, description = "WebSocket. The server sends text frames, each a JSON array of 1 to 256 `ChatStreamEvent`s: first the full state (messages with id > after_id, `queue_update`, `status`, then `error`/`action_required`/`retry` where they apply, `preview_reset`), then live events in the spec's order. The server pings; close codes: 1000 chat deleted, 1001 shutdown or dead connection, 1008 the token or session was revoked or expired or its user disabled, or the chat's share with the caller was revoked (within 10 s), 1009 a client frame or message over 64 KiB, 1011 database failure or internal error, 1013 client too slow (reconnect with after_id)."),
        (status = 400, description = "Invalid chat id or after_id, or not a WebSocket upgrade", body = ErrorBody),
        (status = 401, description = "Missing, unknown or expired token", body = ErrorBody),
        (status = 404, description = "Chat not found or not visible", body = ErrorBody),
        (status = 429, description = "The caller already holds the maximum of open streams (WebSocket, SSE and long-poll) on this server; `detail` names it", body = ErrorBody),
        (status = 503, description = "Live streaming is not configured on this server", body = ErrorBody),
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
    let (_, access) = readable_chat(&state, &caller, chat_id).await?;
    let service = state.stream_service()?.clone();
    let ws = ws.map_err(upgrade_required)?;
    // Browsers fail the handshake unless the server selects one of the
    // subprotocols they offered; `chatd` is the one that is not the token.
    // A client frame or message over the cap fails the read, and the
    // stream closes with 1009 (`ws::serve`).
    let ws = ws
        .protocols([WS_PROTOCOL])
        .max_frame_size(MAX_CLIENT_MESSAGE_BYTES)
        .max_message_size(MAX_CLIENT_MESSAGE_BYTES);
    let admission = service.admit(
        &caller,
        chat_id,
        access,
        state.options().limits.max_open_streams,
    )?;
    let stream_loop = service.open(chat_id, after_id, admission).await?;
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
        (status = 200, description = "`text/event-stream`: one SSE event per `ChatStreamEvent` (`event: <type>`, `data: <ChatStreamEvent JSON>`, `id: <highest committed message id delivered so far>`), `: keep-alive` comments at least every 15 s, and a final `: stream closed: <reason>` comment when the server ends the stream (also within 10 s of its token being revoked or expiring, or its user disabled).", content_type = "text/event-stream", body = ChatStreamEvent),
        (status = 400, description = "Invalid chat id, after_id or Last-Event-ID", body = ErrorBody),
        (status = 401, description = "Missing, unknown or expired token", body = ErrorBody),
        (status = 404, description = "Chat not found or not visible", body = ErrorBody),
        (status = 429, description = "The caller already holds the maximum of open streams (WebSocket, SSE and long-poll) on this server; `detail` names it", body = ErrorBody),
        (status = 503, description = "Live streaming is not configured on this server", body = ErrorBody),
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
    let (_, access) = readable_chat(&state, &caller, chat_id).await?;
    let service = state.stream_service()?.clone();
    let admission = service.admit(
        &caller,
        chat_id,
        access,
        state.options().limits.max_open_streams,
    )?;
    let stream_loop = service.open(chat_id, after_id, admission).await?;
    Ok(axum::response::IntoResponse::into_response(sse::serve(
        stream_loop,
        &service.config,
        after_id,
    )))
}
