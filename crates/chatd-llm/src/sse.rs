//! The SSE driver every adapter shares: it turns a response body into the
//! crate's [`EventStream`], feeding one server-sent event at a time to the
//! adapter's [`SseDecoder`], which knows the vendor's payloads.
//!
//! Bytes are split into events by `eventsource-stream`, which also buffers a
//! UTF-8 sequence cut across network reads and a `\r\n` cut between reads, so
//! the events never depend on how the bytes were chunked (a property test
//! re-chunks every transcript to check it). An unterminated last event is
//! discarded at end of input, as the SSE rules say.
//!
//! It is the boundary where model output enters: every event it yields is
//! sanitised ([`StreamEvent::sanitize`]: a NUL, which PostgreSQL cannot
//! store, becomes U+FFFD), so no adapter can hand the worker text that would
//! make its step uncommittable.
//!
//! The driver keeps the crate's stream invariants for every adapter: the
//! stream ends after the first [`StreamEvent::Finish`] a decoder yields or
//! after the first `Err` (a decoder's, a transport error, or a malformed
//! event stream), and nothing follows either. At end of input a decoder
//! either closes a response that is complete (its finish reason arrived) or
//! says it was cut short, which is a retryable `generic` error (a dropped
//! connection, or a server that closed the stream without a word).

use std::collections::VecDeque;

use futures::{Stream, StreamExt as _};

use crate::error::{ErrorKind, ProviderError, truncate};
use crate::event::StreamEvent;
use crate::provider::EventStream;

/// Longest `data` payload quoted in an error's `detail`, in bytes.
const MAX_QUOTED_PAYLOAD: usize = 1024;

/// One vendor's parser of a streamed response, fed one SSE event at a time
/// by [`decode`]. One decoder serves one response.
pub trait SseDecoder: Send + 'static {
    /// The provider's name, as errors name it ([`crate::Provider::name`]).
    fn provider(&self) -> &str;

    /// Parses one event: `name` is its `event:` field (`message` when the
    /// server sent none), `data` its payload. Returns the events it yields,
    /// in order; a [`StreamEvent::Finish`] (last) or an `Err` ends the
    /// stream.
    ///
    /// # Errors
    /// The provider reported an error in the stream, or sent a payload that
    /// cannot be parsed.
    fn on_event(&mut self, name: &str, data: &str) -> Result<Vec<StreamEvent>, ProviderError>;

    /// The body ended before the stream did: the events that close the
    /// response (ending with [`StreamEvent::Finish`]) when it is complete,
    /// `None` when it was cut short (the driver then ends the stream with a
    /// retryable `generic` error).
    fn on_end_of_input(&mut self) -> Option<Result<Vec<StreamEvent>, ProviderError>>;
}

/// Decodes the body of a streaming response with `decoder`.
///
/// `bytes` is the body as it arrives, with transport errors already
/// classified ([`crate::http::transport_error`]). The result follows the
/// crate's stream invariants: it ends after `Finish` or after one `Err`.
pub fn decode<D, S, B>(bytes: S, decoder: D) -> EventStream
where
    D: SseDecoder,
    S: Stream<Item = Result<B, ProviderError>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
{
    let state = Driver {
        events: Box::pin(eventsource_stream::EventStream::new(bytes)),
        decoder,
        pending: VecDeque::new(),
        saw_event: false,
        done: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.pending.pop_front() {
                return Some((item, state));
            }
            if state.done {
                return None;
            }
            let outcome = state.next_outcome().await;
            match outcome {
                Ok(mut events) => {
                    if matches!(events.last(), Some(StreamEvent::Finish { .. })) {
                        state.done = true;
                    }
                    events.iter_mut().for_each(StreamEvent::sanitize);
                    state.pending.extend(events.into_iter().map(Ok));
                }
                Err(err) => {
                    state.done = true;
                    state.pending.push_back(Err(err));
                }
            }
        }
    })
    .boxed()
}

/// The state of one decoded response.
struct Driver<S, D> {
    events: std::pin::Pin<Box<eventsource_stream::EventStream<S>>>,
    decoder: D,
    pending: VecDeque<Result<StreamEvent, ProviderError>>,
    saw_event: bool,
    done: bool,
}

impl<S, B, D> Driver<S, D>
where
    D: SseDecoder,
    S: Stream<Item = Result<B, ProviderError>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
{
    /// What the next SSE event (or the end of input) yields.
    async fn next_outcome(&mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        match self.events.next().await {
            Some(Ok(event)) => {
                self.saw_event = true;
                self.decoder.on_event(&event.event, &event.data)
            }
            Some(Err(eventsource_stream::EventStreamError::Transport(err))) => Err(err),
            Some(Err(other)) => Err(ProviderError::new(
                ErrorKind::Generic,
                "the provider sent a malformed event stream",
                self.decoder.provider(),
            )
            .with_detail(other.to_string())),
            None => {
                self.done = true;
                self.decoder
                    .on_end_of_input()
                    .unwrap_or_else(|| Err(self.cut_short()))
            }
        }
    }

    fn cut_short(&self) -> ProviderError {
        let message = if self.saw_event {
            "the stream ended before the response was complete"
        } else {
            "the provider closed the stream without sending anything"
        };
        ProviderError::new(ErrorKind::Generic, message, self.decoder.provider())
    }
}

/// A retryable `generic` error about a payload the provider sent: `message`
/// says what is wrong, `detail` quotes the payload (at most 1 KiB).
pub(crate) fn invalid_payload(message: String, data: &str, provider: &str) -> ProviderError {
    ProviderError::new(ErrorKind::Generic, message, provider)
        .with_detail(truncate(data.to_owned(), MAX_QUOTED_PAYLOAD))
}

/// The error for tool call `index` that never got a name (it cannot run).
pub(crate) fn unnamed_tool_call(index: usize, provider: &str) -> ProviderError {
    ProviderError::new(
        ErrorKind::Generic,
        format!("the provider sent tool call {index} without a name"),
        provider,
    )
}

/// An id for a tool call the provider sent without one: `{prefix}_{id}_{index}`
/// with the response's id, so it is unique per response and the same however
/// the bytes were split; a random id in its place when the response has none.
pub(crate) fn generated_call_id(prefix: &str, response_id: Option<&str>, index: usize) -> String {
    match response_id {
        Some(id) => format!("{prefix}_{id}_{index}"),
        None => format!("{prefix}_{}_{index}", uuid::Uuid::new_v4().simple()),
    }
}
