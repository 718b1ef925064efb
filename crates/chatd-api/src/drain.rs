//! Reading the rest of a request body the handler did not read, before the
//! answer goes out ("lingering close").
//!
//! Many answers come before the body is read: `401`, `404` for a chat the
//! caller cannot see, a `400` path parameter (API.md "Details": order of
//! checks), `404`/`405` for an unknown route, and `413` stops reading at the
//! limit. hyper then reads at most one more chunk and closes the connection.
//! With a large upload still in flight, the client's kernel gets a reset for
//! the unread bytes, and the client sees "connection reset" or "broken pipe"
//! instead of the status, which is what it needs to know what went wrong.
//!
//! [`drain_unread_body`] hands the handler a body that reads from a shared
//! slot, so the part the handler leaves stays reachable; once the handler has
//! answered, it reads and discards the rest, at most [`DRAIN_MAX_BYTES`]
//! bytes within [`DRAIN_MAX_TIME`], and only then lets the answer go; the
//! connection then stays open for the next request. Not drained, so cut off
//! as before:
//! - a body whose declared remaining length is over [`DRAIN_MAX_BYTES`]
//!   (reading it would only delay the same reset), and one that is larger
//!   or slower than the caps allow;
//! - the body of a client that sent `Expect: 100-continue` when the handler
//!   never touched it: hyper answers without the `100 Continue`, and a
//!   client that waits for it (curl waits up to 1 s) has the answer before
//!   it sends anything. A declared length over the limit is refused by
//!   [`crate::extract::read_body`] without polling, so it gets no
//!   `100 Continue` either.
//!
//! Unauthenticated clients can make a request wait up to [`DRAIN_MAX_TIME`]
//! while up to [`DRAIN_MAX_BYTES`] are read and dropped; that is bounded and
//! no worse than the upload itself.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::Request;
use axum::http::header::EXPECT;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt as _;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// The most bytes of an unread body read and discarded after an answer
/// (8 MiB, eight times the default body limit). A body whose declared
/// remainder (`Content-Length`) is larger is not read at all: the
/// connection is closed as hyper would close it.
pub const DRAIN_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// The longest an answer waits for the rest of an unread body (2 s).
pub const DRAIN_MAX_TIME: Duration = Duration::from_secs(2);

/// The request body, shared between the handler's [`HandlerBody`] and the
/// middleware.
struct Shared {
    /// `None` once the middleware took it back.
    body: Mutex<Option<Body>>,
    /// Whether the handler ever asked for a frame.
    polled: AtomicBool,
}

impl Shared {
    fn slot(&self) -> MutexGuard<'_, Option<Body>> {
        self.body.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The body the handler sees: it reads through [`Shared`] and forwards
/// `size_hint` and `is_end_stream`, so a handler can still refuse a
/// declared `Content-Length` over its limit without reading a byte.
struct HandlerBody(Arc<Shared>);

impl HttpBody for HandlerBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.0.polled.store(true, Ordering::Relaxed);
        match self.0.slot().as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            // Only after the answer, when no handler reads any more.
            None => Poll::Ready(Some(Err(axum::Error::new(
                "the request body was read after the answer",
            )))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.slot().as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.0
            .slot()
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
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
        body: Mutex::new(Some(body)),
        polled: AtomicBool::new(false),
    });
    let handler_body = Body::new(HandlerBody(Arc::clone(&shared)));
    let response = next.run(Request::from_parts(parts, handler_body)).await;
    let rest = shared.slot().take();
    let untouched = !shared.polled.load(Ordering::Relaxed);
    if let Some(rest) = rest
        && !rest.is_end_stream()
        && !(expects_continue && untouched)
        && rest.size_hint().lower() <= DRAIN_MAX_BYTES
    {
        discard(rest.into_data_stream(), DRAIN_MAX_BYTES, DRAIN_MAX_TIME).await;
    }
    response
}

/// Reads and drops `stream` until it ends, fails, passes `max_bytes` or
/// `max_time` has gone by. Returns the bytes read.
async fn discard(mut stream: BodyDataStream, max_bytes: u64, max_time: Duration) -> u64 {
    let mut read = 0u64;
    let _ = tokio::time::timeout(max_time, async {
        while read <= max_bytes {
            match stream.next().await {
                Some(Ok(chunk)) => read += chunk.len() as u64,
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
