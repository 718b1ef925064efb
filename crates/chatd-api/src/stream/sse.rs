//! The Server-Sent Events transport of the stream loop (API.md "Stream",
//! SSE; `spec/durable-agent-loop.md`'s SSE with a keep-alive).
//!
//! One SSE event per stream event: `event: <type>`, `data: <ChatStreamEvent
//! JSON>`, and `id: <highest committed message id delivered so far>` (events
//! other than `message` repeat it; a `history_reset` sets it back to 0,
//! since the client drops its messages and they are all sent again). A
//! reconnect with `Last-Event-ID` therefore behaves like `after_id`. A
//! `: keep-alive` comment goes out whenever nothing else did for
//! `keep_alive_interval` (15 s). When the loop ends, a final comment names
//! the cause and the response ends; a slow client gets that comment at once,
//! without the rest of its queue.

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use tokio::sync::{mpsc, oneshot};

use super::config::StreamConfig;
use super::event::{ChatStreamEvent, StreamPayload};
use super::session::{StreamLoop, Termination};

/// Serves one stream as an SSE response body; the loop runs in its own
/// task and ends when the client goes away (the body is dropped).
pub fn serve(
    stream_loop: StreamLoop,
    config: &StreamConfig,
    after_id: i64,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let (tx, rx) = mpsc::channel(config.outbound_capacity.max(1));
    let (end_tx, end_rx) = oneshot::channel();
    let chat_id = stream_loop.state.chat_id();
    tokio::spawn(async move {
        let termination = stream_loop.run(tx).await;
        tracing::debug!(%chat_id, reason = termination.label(), "stream (sse) ended");
        super::session::record_termination("sse", &termination);
        let _ = end_tx.send(termination);
    });
    let state = SseState {
        rx,
        end: Some(end_rx),
        end_after_drain: None,
        last_id: after_id,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        let event = s.next().await?;
        Some((Ok(event), s))
    });
    Sse::new(stream).keep_alive(
        KeepAlive::new()
            .interval(config.keep_alive_interval)
            .text("keep-alive"),
    )
}

struct SseState {
    rx: mpsc::Receiver<ChatStreamEvent>,
    end: Option<oneshot::Receiver<Termination>>,
    /// A termination whose queued events are still being delivered.
    end_after_drain: Option<Termination>,
    last_id: i64,
    done: bool,
}

impl SseState {
    async fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        loop {
            let end = &mut self.end;
            let rx = &mut self.rx;
            let ended = async {
                match end.as_mut() {
                    Some(end) => end.await.ok(),
                    None => std::future::pending().await,
                }
            };
            let step = tokio::select! {
                biased;
                termination = ended => Step::Ended(termination),
                event = rx.recv() => Step::Event(event),
            };
            match step {
                Step::Ended(termination) => {
                    self.end = None;
                    match termination {
                        Some(t) if !t.flushes() => {
                            self.done = true;
                            return Some(closing(&t));
                        }
                        Some(t) => {
                            // Deliver what is queued, then the closing comment.
                            self.rx.close();
                            self.end_after_drain = Some(t);
                        }
                        None => {}
                    }
                }
                Step::Event(Some(event)) => return Some(self.sse_event(&event)),
                Step::Event(None) => {
                    // The loop ended; its cause is sent right after.
                    self.done = true;
                    let termination = match (self.end_after_drain.take(), self.end.take()) {
                        (Some(t), _) => Some(t),
                        (None, Some(end)) => end.await.ok(),
                        (None, None) => None,
                    };
                    return termination.map(|t| closing(&t));
                }
            }
        }
    }

    fn sse_event(&mut self, event: &ChatStreamEvent) -> Event {
        match &event.payload {
            StreamPayload::Message { message } => self.last_id = self.last_id.max(message.id),
            StreamPayload::HistoryReset => self.last_id = 0,
            _ => {}
        }
        Event::default()
            .event(event.kind())
            .id(self.last_id.to_string())
            .data(serde_json::to_string(event).expect("stream events serialize"))
    }
}

enum Step {
    Ended(Option<Termination>),
    Event(Option<ChatStreamEvent>),
}

fn closing(termination: &Termination) -> Event {
    let (_, reason) = termination.close();
    Event::default().comment(format!("stream closed: {reason}"))
}
