//! Reading the rest of a request body the handler did not read, before the
//! answer goes out ("lingering close").
//!
//! Many answers come before the body is read: `401`, `404` for a chat the
//! caller cannot see, a `400` path parameter (API.md "Details": order of
//! checks), and `413` stops reading at the limit. hyper then reads at most
//! one more chunk and closes the connection. With a large upload still in
//! flight, the client's kernel gets a reset for the unread bytes, and the
//! client sees "connection reset" or "broken pipe" instead of the status,
//! which is what it needs to know what went wrong.
//!
//! [`drain_unread_body`] hands the handler a body that reads from a shared
//! slot, so the part the handler leaves stays reachable; once the handler has
//! answered, it reads and discards the rest, at most [`DRAIN_MAX_BYTES`]
//! bytes within [`DRAIN_MAX_TIME`], and only then lets the answer go. A body
//! larger or slower than that is cut off as before. A client that asked for
//! `Expect: 100-continue` and whose body the handler never touched is not
//! drained: hyper answers without the `100 Continue`, so the client never
//! sends the body.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use axum::body::{Body, BodyDataStream, HttpBody as _};
use axum::extract::Request;
use axum::http::header::EXPECT;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt as _;

/// The most bytes of an unread body read and discarded after an answer
/// (8 MiB, eight times the default body limit).
pub const DRAIN_MAX_BYTES: usize = 8 * 1024 * 1024;

/// The longest an answer waits for the rest of an unread body (2 s).
pub const DRAIN_MAX_TIME: Duration = Duration::from_secs(2);

/// The request body, shared between the handler and the middleware.
struct Shared {
    /// `None` once the middleware took it back.
    stream: Mutex<Option<BodyDataStream>>,
    /// Whether the handler ever asked for a chunk.
    polled: AtomicBool,
}

/// Middleware: runs the request and then reads and discards what the
/// handler left of the request body (see the module doc), so that the
/// answer reaches a client that is still uploading.
pub async fn drain_unread_body(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let expects_continue = parts
        .headers
        .get(EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let shared = Arc::new(Shared {
        stream: Mutex::new(Some(body.into_data_stream())),
        polled: AtomicBool::new(false),
    });
    let reader = Arc::clone(&shared);
    let handler_body = Body::from_stream(futures::stream::poll_fn(move |cx| {
        reader.polled.store(true, Ordering::Relaxed);
        let mut slot = reader.stream.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_mut() {
            Some(stream) => stream.poll_next_unpin(cx),
            None => Poll::Ready(None),
        }
    }));
    let response = next.run(Request::from_parts(parts, handler_body)).await;
    let rest = shared
        .stream
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let untouched = !shared.polled.load(Ordering::Relaxed);
    if let Some(rest) = rest
        && !(expects_continue && untouched)
    {
        discard(rest, DRAIN_MAX_BYTES, DRAIN_MAX_TIME).await;
    }
    response
}

/// Reads and drops `stream` until it ends, fails, passes `max_bytes` or
/// `max_time` has gone by. Returns the bytes read.
async fn discard(mut stream: BodyDataStream, max_bytes: usize, max_time: Duration) -> usize {
    let mut read = 0usize;
    let _ = tokio::time::timeout(max_time, async {
        while read <= max_bytes {
            match stream.next().await {
                Some(Ok(chunk)) => read += chunk.len(),
                Some(Err(_)) | None => break,
            }
        }
    })
    .await;
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn discard_stops_at_the_end_the_byte_cap_or_the_time_cap() {
        let chunks = || {
            futures::stream::iter(
                (0..10).map(|_| Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![0u8; 100]))),
            )
        };
        let all = discard(
            Body::from_stream(chunks()).into_data_stream(),
            10_000,
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(all, 1000);
        let capped = discard(
            Body::from_stream(chunks()).into_data_stream(),
            250,
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(capped, 300, "stops at the first chunk past the cap");
        let endless = futures::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
        let none = discard(
            Body::from_stream(endless).into_data_stream(),
            10_000,
            Duration::from_millis(50),
        )
        .await;
        assert_eq!(
            none, 0,
            "a body that never ends is given up after the time cap"
        );
    }
}
