//! The WebSocket transport of the stream loop (API.md "Stream
//! (WebSocket)").
//!
//! Three parts run per connection: the loop, which pushes events into a
//! bounded queue; the writer, which sends them as text frames (JSON arrays of
//! at most 256 events, everything that is ready batched into one frame) and
//! pings every `ping_interval`; the reader, which watches for the client's
//! close and for silence (no frame, not even a pong, for `idle_timeout`:
//! the connection is dead). Whichever ends first decides the termination;
//! the writer then closes with its code and reason (after delivering what
//! was queued, when that is still useful), while the connection is still
//! read until the client answers the close (at most
//! [`CLOSE_REPLY_TIMEOUT`] after the close frame went out), so that the
//! close frame is not lost to a reset.
//!
//! A client frame or message over
//! [`MAX_CLIENT_MESSAGE_BYTES`](super::config::MAX_CLIENT_MESSAGE_BYTES)
//! fails the read: the stream closes with `1009` and the connection is
//! dropped [`CLOSE_REPLY_TIMEOUT`] later, the oversized frame unread.
//!
//! The handshake (in [`super::routes::stream_ws`]) selects the `chatd` subprotocol
//! when the client offers it: browsers send the token as a second
//! subprotocol `chatd.bearer.<token>` ([`crate::auth`]) and accept the
//! upgrade only if the server selects one they offered.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt as _, StreamExt as _};
use tokio::sync::{mpsc, oneshot};

use super::config::{MAX_EVENTS_PER_FRAME, StreamConfig};
use super::event::{ChatStreamEvent, frame};
use super::session::{StreamLoop, Termination};

/// How long the server waits for the client's answer to its close frame
/// before it closes the connection anyway (1 s).
pub const CLOSE_REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Serves one stream over `socket` until it terminates.
pub async fn serve(socket: WebSocket, stream_loop: StreamLoop, config: StreamConfig) {
    let chat_id = stream_loop.state.chat_id();
    let (sink, mut stream) = socket.split();
    let (tx, rx) = mpsc::channel(config.outbound_capacity.max(1));
    let (end_tx, end_rx) = oneshot::channel();
    let mut writer = tokio::spawn(writer(sink, rx, end_rx, config.clone()));
    let mut writer_done = false;
    let termination = tokio::select! {
        t = stream_loop.run(tx) => t,
        t = reader(&mut stream, &config) => t,
        _ = &mut writer => {
            writer_done = true;
            Termination::WriteFailed
        }
    };
    tracing::debug!(%chat_id, reason = termination.label(), "stream (websocket) ended");
    super::session::record_termination("websocket", &termination);
    let client_gone = matches!(termination, Termination::ClientDisconnected);
    let too_big = matches!(termination, Termination::MessageTooBig);
    let _ = end_tx.send(termination);
    if !writer_done {
        if too_big {
            // The rest of the oversized frame is still unread: reading on
            // would buffer it. Let the close frame (1009) go out, give the
            // client a moment to read it, then drop the connection unread.
            let _ = writer.await;
            tokio::time::sleep(CLOSE_REPLY_TIMEOUT).await;
        } else if client_gone {
            // Bounded: every send of the writer has a timeout.
            let _ = writer.await;
        } else {
            // The close handshake (RFC 6455 section 5.5.1): keep reading
            // while the writer sends what is left and its close frame, until
            // the client answers the close. Closing the socket with unread
            // client frames (pongs) in it would make the kernel send a reset,
            // and the client would lose the close frame, and with it the
            // reason it needs to reconnect, before reading it.
            let reply = until_close(&mut stream);
            tokio::pin!(reply);
            tokio::select! {
                _ = &mut reply => {
                    // The client closed or went away first; bounded: every
                    // send of the writer has a timeout.
                    let _ = writer.await;
                }
                _ = &mut writer => {
                    let _ = tokio::time::timeout(CLOSE_REPLY_TIMEOUT, reply).await;
                }
            }
        }
    }
}

async fn reader(stream: &mut SplitStream<WebSocket>, config: &StreamConfig) -> Termination {
    loop {
        match tokio::time::timeout(config.idle_timeout, stream.next()).await {
            Err(_) => return Termination::DeadConnection,
            Ok(Some(Err(ref err))) if is_too_big(err) => return Termination::MessageTooBig,
            Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => {
                return Termination::ClientDisconnected;
            }
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// Whether a read failed because the client's frame or message was over
/// the configured maximum ([`super::config::MAX_CLIENT_MESSAGE_BYTES`]).
fn is_too_big(err: &axum::Error) -> bool {
    use std::error::Error as _;
    use tokio_tungstenite::tungstenite::Error;
    matches!(
        err.source().and_then(|e| e.downcast_ref::<Error>()),
        Some(Error::Capacity(_))
    )
}

/// Reads and drops the client's frames until its close frame, the end of
/// the connection or an error.
async fn until_close(stream: &mut SplitStream<WebSocket>) {
    while let Some(Ok(message)) = stream.next().await {
        if matches!(message, Message::Close(_)) {
            break;
        }
    }
}

async fn writer(
    mut sink: SplitSink<WebSocket, Message>,
    mut rx: mpsc::Receiver<ChatStreamEvent>,
    mut end: oneshot::Receiver<Termination>,
    config: StreamConfig,
) {
    let mut ping = tokio::time::interval(config.ping_interval);
    ping.tick().await;
    let mut batch = Vec::with_capacity(MAX_EVENTS_PER_FRAME);
    let termination = loop {
        tokio::select! {
            biased;
            t = &mut end => break t.unwrap_or(Termination::ClientDisconnected),
            n = rx.recv_many(&mut batch, MAX_EVENTS_PER_FRAME) => {
                if n == 0 {
                    // The loop ended; its cause follows.
                    break (&mut end).await.unwrap_or(Termination::ClientDisconnected);
                }
                if !send(&mut sink, Message::text(frame(&batch)), &config).await {
                    return;
                }
                batch.clear();
            }
            _ = ping.tick() => {
                if !send(&mut sink, Message::Ping(Default::default()), &config).await {
                    return;
                }
            }
        }
    };
    if matches!(
        termination,
        Termination::ClientDisconnected | Termination::WriteFailed
    ) {
        return;
    }
    if termination.flushes() {
        rx.close();
        while rx.recv_many(&mut batch, MAX_EVENTS_PER_FRAME).await > 0 {
            if !send(&mut sink, Message::text(frame(&batch)), &config).await {
                return;
            }
            batch.clear();
        }
    }
    let (code, reason) = termination.close();
    let close = Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }));
    send(&mut sink, close, &config).await;
}

/// Sends one message within the write timeout; false when it failed.
async fn send(
    sink: &mut SplitSink<WebSocket, Message>,
    message: Message,
    config: &StreamConfig,
) -> bool {
    matches!(
        tokio::time::timeout(config.write_timeout, sink.send(message)).await,
        Ok(Ok(()))
    )
}
