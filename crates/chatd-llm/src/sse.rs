//! The SSE driver every adapter shares: it turns a response body into the
//! crate's [`EventStream`], feeding one server-sent event at a time to the
//! adapter's [`SseDecoder`], which knows the vendor's payloads.
//!
//! Bytes are split into lines and events here ([`Framer`], the HTML
//! "server-sent events" parsing rules: lines end with CRLF, LF or CR, a
//! leading BOM is dropped, `:` lines are comments, `event` and `data` are the
//! only fields used, a blank line dispatches the event). Lines are split on
//! the bytes `\r` and `\n`, which never occur inside a multi-byte UTF-8
//! character, and only complete lines are decoded, so a character or a
//! `\r\n` cut across network reads is reassembled and the events never
//! depend on how the bytes were chunked (a property test re-chunks every
//! transcript to check it, another compares the framing of arbitrary bytes
//! with a reference parser). An unterminated last event is discarded at end
//! of input, as the SSE rules say. Every byte is looked at once, so the work
//! is linear in the body's size however it is chunked.
//!
//! The framing is where a hostile or broken server could make chatd buffer
//! without bound (a line that never ends, an event that never gets its
//! blank line): at most [`MAX_EVENT_BYTES`] of one event are buffered, and
//! an event that grows past it ends the stream with a non-retryable
//! `generic` error. A line that is not valid UTF-8 ends the stream with a
//! retryable `generic` error ("malformed event stream") as soon as it is
//! complete.
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

/// The message of the error for a stream that ended before its first event
/// (llama.cpp's answer to a prompt longer than its window is such a
/// stream: `200` and nothing). Retryable by itself; the generation task
/// treats it as a context overflow when the prompt was near the window.
pub const EMPTY_STREAM: &str = "the provider closed the stream without sending anything";

use std::collections::VecDeque;

use futures::{Stream, StreamExt as _};

use crate::error::{ErrorKind, ProviderError, truncate};
use crate::event::StreamEvent;
use crate::provider::EventStream;

/// Most bytes of one server-sent event that are buffered, 16 MiB: the bytes
/// of its lines (line ends not counted, comments and unused fields
/// included) since the blank line before it, the line still being read
/// included. An event that grows past it ends the stream with a
/// non-retryable `generic` error: no provider sends an event that large
/// (a streamed delta is a few bytes to a few KiB), so it is a broken or
/// hostile server, and asking it again would only repeat it.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

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
/// An event larger than [`MAX_EVENT_BYTES`] ends it with a non-retryable
/// `generic` error; a line that is not UTF-8 with a retryable one.
pub fn decode<D, S, B>(bytes: S, decoder: D) -> EventStream
where
    D: SseDecoder,
    S: Stream<Item = Result<B, ProviderError>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
{
    let state = Driver {
        bytes: Box::pin(bytes),
        framer: Framer::new(decoder.provider().to_owned()),
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
    bytes: std::pin::Pin<Box<S>>,
    framer: Framer,
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
        loop {
            match self.framer.next_event() {
                Some(Ok(event)) => {
                    self.saw_event = true;
                    return self.decoder.on_event(&event.name, &event.data);
                }
                Some(Err(err)) => return Err(err),
                None => {}
            }
            match self.bytes.next().await {
                Some(Ok(bytes)) => self.framer.push(bytes.as_ref()),
                Some(Err(err)) => return Err(err),
                None => {
                    // The unterminated event in the framer, if any, is
                    // discarded (the SSE rules).
                    self.done = true;
                    return self
                        .decoder
                        .on_end_of_input()
                        .unwrap_or_else(|| Err(self.cut_short()));
                }
            }
        }
    }

    fn cut_short(&self) -> ProviderError {
        let message = if self.saw_event {
            "the stream ended before the response was complete"
        } else {
            EMPTY_STREAM
        };
        ProviderError::new(ErrorKind::Generic, message, self.decoder.provider())
    }
}

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SseEvent {
    /// The `event` field; `message` when the event had none.
    name: String,
    /// The `data` lines' values joined with `\n`.
    data: String,
}

/// Splits bytes into server-sent events (the HTML standard's "event stream
/// interpretation"), fed the body in whatever pieces it arrives. `id` and
/// `retry` are ignored (no adapter reconnects). After its first error it
/// yields nothing more.
struct Framer {
    provider: String,
    /// The bytes of the line being read, without its end.
    line: Vec<u8>,
    /// The last byte seen was a `\r` ending a line: a `\n` right after it
    /// is the rest of that line end.
    after_cr: bool,
    /// No line has ended yet (a leading BOM is dropped from the first).
    first_line: bool,
    /// The event being built.
    name: String,
    data: String,
    /// Bytes of the event's complete lines so far ([`MAX_EVENT_BYTES`]).
    event_bytes: usize,
    ready: VecDeque<Result<SseEvent, ProviderError>>,
    failed: bool,
}

impl Framer {
    fn new(provider: String) -> Self {
        Framer {
            provider,
            line: Vec::new(),
            after_cr: false,
            first_line: true,
            name: String::new(),
            data: String::new(),
            event_bytes: 0,
            ready: VecDeque::new(),
            failed: false,
        }
    }

    /// The next event (or error) the bytes pushed so far complete.
    fn next_event(&mut self) -> Option<Result<SseEvent, ProviderError>> {
        self.ready.pop_front()
    }

    /// Takes the next piece of the body.
    fn push(&mut self, mut bytes: &[u8]) {
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while !self.failed {
            let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') else {
                break;
            };
            self.line.extend_from_slice(&bytes[..end]);
            let line = std::mem::take(&mut self.line);
            self.end_line(&line);
            self.line = line;
            self.line.clear();
            let rest = &bytes[end + 1..];
            bytes = match (bytes[end], rest.first()) {
                (b'\r', Some(b'\n')) => &rest[1..],
                (b'\r', None) => {
                    self.after_cr = true;
                    rest
                }
                _ => rest,
            };
        }
        if !self.failed {
            self.line.extend_from_slice(bytes);
            self.check_size();
        }
    }

    /// Interprets one complete line (its end removed).
    fn end_line(&mut self, mut line: &[u8]) {
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch();
            return;
        }
        self.event_bytes += line.len();
        if !self.check_size() {
            return;
        }
        let line = match std::str::from_utf8(line) {
            Ok(line) => line,
            Err(err) => {
                return self.fail(
                    ProviderError::new(
                        ErrorKind::Generic,
                        "the provider sent a malformed event stream",
                        &self.provider,
                    )
                    .with_detail(format!(
                        "a line is not valid UTF-8: {err}: {}",
                        String::from_utf8_lossy(&line[..line.len().min(MAX_QUOTED_PAYLOAD)])
                    )),
                );
            }
        };
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.name),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            _ => {}
        }
    }

    /// A blank line: the event is complete (an event without data is
    /// dropped, as the SSE rules say).
    fn dispatch(&mut self) {
        let mut name = std::mem::take(&mut self.name);
        let mut data = std::mem::take(&mut self.data);
        self.event_bytes = 0;
        if data.is_empty() {
            return;
        }
        data.pop();
        if name.is_empty() {
            name.push_str("message");
        }
        self.ready.push_back(Ok(SseEvent { name, data }));
    }

    /// Whether the event is within [`MAX_EVENT_BYTES`]; fails when not.
    fn check_size(&mut self) -> bool {
        let size = self.event_bytes + self.line.len();
        if size <= MAX_EVENT_BYTES {
            return true;
        }
        self.fail(
            ProviderError::new(
                ErrorKind::Generic,
                format!(
                    "the provider sent a server-sent event larger than {} MiB",
                    MAX_EVENT_BYTES / (1024 * 1024)
                ),
                &self.provider,
            )
            .with_retryable(false),
        );
        false
    }

    fn fail(&mut self, err: ProviderError) {
        self.failed = true;
        self.line = Vec::new();
        self.data = String::new();
        self.ready.push_back(Err(err));
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
