//! The parts endpoint `GET /api/v2/chats/{chat}/stream/parts`
//! (`spec/chatd-architecture.md`, "Parts endpoint"; API.md "Parts relay").
//!
//! Replica to replica only: the caller authenticates with the cluster's
//! relay secret (`Authorization: Bearer <secret>`), never a user token; a
//! wrong or missing secret is `401` before the upgrade. The endpoint accepts
//! the connection whether or not this replica owns the chat. The caller
//! selects an episode with `{"history_version": N, "generation_attempt": M}`
//! text frames; after each selection the endpoint stops the previous
//! episode, sends the buffered parts of the new one, then new parts as they
//! are produced, with contiguous `seq` ([`EpisodeFollower`]). A missing
//! episode is not an error: it waits. After an episode ends the connection
//! stays open for the next selection. Frames are JSON arrays (at most 256)
//! of `message_part` events.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{State, ws::rejection::WebSocketUpgradeRejection};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::response::Response;
use chatd_core::Episode;
use futures::{FutureExt as _, SinkExt as _, StreamExt as _};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use super::config::{MAX_EVENTS_PER_FRAME, close_code};
use super::event::{ChatStreamEvent, EpisodeSelection, StreamPayload, frame};
use super::relay::{EpisodeFollower, next_part, part_payload};
use super::routes::upgrade_required;
use super::service::StreamService;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::PathParams;

/// `GET /api/v2/chats/{chat}/stream/parts`: see the module doc.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/stream/parts",
    tag = "stream",
    params(("chat" = Uuid, Path, description = "Chat id")),
    security(("relay_secret" = [])),
    responses(
        (status = 101, description = "WebSocket: send `EpisodeSelection` text frames; receive JSON arrays of `message_part` `ChatStreamEvent`s of the selected episode, buffered ones first, contiguous `seq`"),
        (status = 400, description = "Invalid chat id, or not a WebSocket upgrade", body = ErrorBody),
        (status = 401, description = "Missing or wrong relay secret", body = ErrorBody),
        (status = 503, description = "Live streaming is not configured on this server", body = ErrorBody),
    )
)]
pub async fn parts_endpoint(
    State(state): State<AppState>,
    headers: HeaderMap,
    params: PathParams,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    check_relay_secret(&headers, state.options().relay_secret.as_deref())?;
    let chat_id = params.uuid("chat")?;
    let service = state.stream_service()?.clone();
    let ws = ws.map_err(upgrade_required)?;
    Ok(ws.on_upgrade(move |socket| serve(socket, service, chat_id)))
}

/// `401` unless the request carries `Authorization: Bearer <secret>`.
fn check_relay_secret(headers: &HeaderMap, secret: Option<&str>) -> ApiResult<()> {
    let unauthorized = || {
        ApiError::new(axum::http::StatusCode::UNAUTHORIZED, "Unauthorized.")
            .with_detail("The parts endpoint requires the cluster's relay secret: `Authorization: Bearer <relay secret>`.")
    };
    let secret = secret.filter(|s| !s.is_empty()).ok_or_else(unauthorized)?;
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(unauthorized)?;
    // Compare digests so the comparison time does not depend on where the
    // first differing byte is.
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(secret.as_bytes());
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    if diff == 0 {
        Ok(())
    } else {
        Err(unauthorized())
    }
}

async fn serve(socket: WebSocket, service: StreamService, chat_id: Uuid) {
    let config = service.config.clone();
    let (mut sink, mut stream) = socket.split();
    let mut follower: Option<EpisodeFollower> = None;
    let mut ping = tokio::time::interval(config.ping_interval);
    ping.tick().await;
    let mut last_seen = tokio::time::Instant::now();
    let close = loop {
        tokio::select! {
            () = service.shutdown.cancelled() => break Some((close_code::GOING_AWAY, "server shutting down")),
            message = stream.next() => {
                last_seen = tokio::time::Instant::now();
                match message {
                    Some(Ok(Message::Text(text))) => match serde_json::from_str::<EpisodeSelection>(text.as_str()) {
                        Ok(selection) => {
                            follower = Some(EpisodeFollower::new(service.parts.clone(), Episode {
                                chat_id,
                                history_version: selection.history_version,
                                generation_attempt: selection.generation_attempt,
                            }));
                        }
                        Err(_) => break Some((close_code::UNSUPPORTED_DATA, "expected {\"history_version\": N, \"generation_attempt\": M}")),
                    },
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break None,
                    Some(Ok(_)) => {}
                }
            }
            part = next_part(&mut follower) => {
                let Some(part) = part else {
                    // Episode complete: wait for the next selection.
                    follower = None;
                    continue;
                };
                let Some(f) = follower.as_mut() else { continue };
                let episode = f.episode();
                let mut events = vec![event(chat_id, episode, part)];
                while events.len() < MAX_EVENTS_PER_FRAME {
                    match f.next().now_or_never() {
                        Some(Some(part)) => events.push(event(chat_id, episode, part)),
                        Some(None) => {
                            follower = None;
                            break;
                        }
                        None => break,
                    }
                }
                let sent = tokio::time::timeout(config.write_timeout, sink.send(Message::text(frame(&events)))).await;
                if !matches!(sent, Ok(Ok(()))) {
                    return;
                }
            }
            _ = ping.tick() => {
                if last_seen.elapsed() > config.idle_timeout {
                    break Some((close_code::GOING_AWAY, "no pong: connection presumed dead"));
                }
                if sink.send(Message::Ping(Default::default())).await.is_err() {
                    return;
                }
            }
        }
    };
    if let Some((code, reason)) = close {
        let frame = Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        }));
        let _ = tokio::time::timeout(config.write_timeout, sink.send(frame)).await;
    }
}

fn event(chat_id: Uuid, episode: Episode, part: chatd_core::StreamPart) -> ChatStreamEvent {
    ChatStreamEvent::new(
        chat_id,
        StreamPayload::MessagePart {
            message_part: part_payload(episode, part),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_relay_secret_passes() {
        let mut headers = HeaderMap::new();
        assert!(check_relay_secret(&headers, Some("s3cret")).is_err());
        headers.insert(AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(check_relay_secret(&headers, Some("s3cret")).is_ok());
        assert!(check_relay_secret(&headers, Some("other")).is_err());
        assert!(check_relay_secret(&headers, None).is_err());
        headers.insert(AUTHORIZATION, "Basic s3cret".parse().unwrap());
        assert!(check_relay_secret(&headers, Some("s3cret")).is_err());
    }
}
