//! The request body deadline (API.md "Limits, budgets and the token
//! lifecycle", "Slow or hostile clients": a body must arrive within 60 s,
//! or the connection is closed).
//!
//! [`request_body_deadline`] is the outermost layer of [`crate::router`]:
//! it starts the clock when the request's head has arrived and gives the
//! handlers a body that fails once the deadline has passed while it is
//! still incomplete. The deadline is fixed from the start of the request,
//! not reset by each chunk: a client trickling one byte a second cannot
//! stretch it (tower-http's `RequestBodyTimeout` resets per frame, which is
//! why it is not used). Whatever the handler then answered (a JSON route's
//! `400`, an upload's error), the client gets `408` with `Connection:
//! close`, and hyper closes the connection after it; the rest of the body
//! is never read.
//!
//! A body the handler never reads costs nothing here: no timer fires
//! unless the body is polled. Handlers read bodies before they take a
//! database connection (DESIGN.md "Bodies before connections"), so a slow
//! body holds a task and a socket for at most the deadline, never a
//! connection of the pool.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::CONNECTION;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};

use crate::app::AppState;
use crate::error::ApiError;

/// The error a body read returns once the deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyDeadlineElapsed(pub Duration);

/// Middleware: bounds the time the request body may take to
/// [`crate::ApiOptions::request_body_timeout`] from now (see the module
/// doc). Mounted by [`crate::router`] outside every other layer.
pub async fn request_body_deadline(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let timeout = state.options().request_body_timeout;
    let elapsed = Arc::new(AtomicBool::new(false));
    let body = Body::new(DeadlineBody {
        inner: body,
        sleep: Box::pin(tokio::time::sleep(timeout)),
        timeout,
        elapsed: Arc::clone(&elapsed),
    });
    let response = next.run(Request::from_parts(parts, body)).await;
    if !elapsed.load(Ordering::Relaxed) {
        return response;
    }
    metrics::counter!("chatd_http_request_body_timeouts_total").increment(1);
    let mut response = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "The request body did not arrive in time.",
    )
    .with_detail(format!(
        "A request body must arrive within {} s of the request's start.",
        timeout.as_secs_f64()
    ))
    .into_response();
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A body that fails with [`BodyDeadlineElapsed`] once `sleep` has fired
/// before the body ended.
struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    elapsed: Arc<AtomicBool>,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.elapsed.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(axum::Error::new(BodyDeadlineElapsed(
                self.timeout,
            )))));
        }
        // Data that is ready wins over a deadline that fired meanwhile.
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        ready!(self.sleep.as_mut().poll(cx));
        self.elapsed.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(axum::Error::new(BodyDeadlineElapsed(
            self.timeout,
        )))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt as _;

    fn deadline_body(inner: Body, timeout: Duration) -> (Body, Arc<AtomicBool>) {
        let elapsed = Arc::new(AtomicBool::new(false));
        let body = Body::new(DeadlineBody {
            inner,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            elapsed: Arc::clone(&elapsed),
        });
        (body, elapsed)
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickling_body_fails_at_the_deadline_from_the_start_not_from_the_last_chunk() {
        // One byte a second, forever: each chunk comes well within any
        // per-chunk timeout, and the whole never ends.
        let trickle = futures::stream::unfold(0u64, |n| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), n + 1))
        });
        let (body, elapsed) =
            deadline_body(Body::from_stream(trickle), Duration::from_millis(10_500));
        let started = tokio::time::Instant::now();
        let mut stream = body.into_data_stream();
        let mut bytes = 0;
        let err = loop {
            match stream.next().await {
                Some(Ok(chunk)) => bytes += chunk.len(),
                Some(Err(err)) => break err,
                None => panic!("the trickle never ends"),
            }
        };
        assert_eq!(started.elapsed(), Duration::from_millis(10_500));
        assert_eq!(bytes, 10, "the chunks before the deadline were delivered");
        assert!(err.to_string().contains("did not arrive within"), "{err}");
        assert!(elapsed.load(Ordering::Relaxed));
        assert!(
            stream.next().await.is_some_and(|r| r.is_err()),
            "it keeps failing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_ends_in_time_is_untouched() {
        let (body, elapsed) = deadline_body(Body::from("hello"), Duration::from_secs(1));
        let bytes = axum::body::to_bytes(body, 100).await.expect("read");
        assert_eq!(&bytes[..], b"hello");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!elapsed.load(Ordering::Relaxed));
    }
}
