//! Anthropic's paused turns, continued within one response.
//!
//! With server tools (web search) Anthropic runs a loop of its own, and may
//! pause a long turn: the response ends with `stop_reason: "pause_turn"`
//! (sometimes after a `server_tool_use` block that has not run yet), and
//! "you can provide the response back as-is in a subsequent request to
//! let Claude continue its turn" (Anthropic's "Server tools" docs). Without
//! that, the turn would end on an unfinished answer.
//!
//! [`ContinuePaused`] wraps the Messages provider: when a response finishes
//! [`FinishReason::Paused`], it sends the same request again with the
//! paused response appended as an assistant message, as the last turn
//! ([`super::wire::continuation_body`]: no user message added, its
//! unanswered search calls sent too), and goes on streaming the new response's events in
//! the same stream, after a [`StreamEvent::TextBreak`]. The caller sees one
//! response: its parts are those of every paused response and the last,
//! and each [`StreamEvent::Usage`] is the sum of the paused responses'
//! usage and the current one's. At most [`MAX_CONTINUATIONS`]
//! continuations; a turn still paused after them finishes `Paused` (the
//! worker stores it as `stop`). An error in a continuation is an `Err` of
//! the stream, classified like any other (the worker's retry runs the
//! whole attempt again).

use std::sync::Arc;

use futures::StreamExt as _;
use futures::future::BoxFuture;

use crate::error::ProviderError;
use crate::event::{FinishReason, StreamEvent, Usage};
use crate::provider::{EventStream, Provider};
use crate::request::{ModelRequest, RequestMessage};
use crate::response::ResponseBuilder;
use chatd_core::ChatRole;

/// The most continuation requests one response makes.
pub const MAX_CONTINUATIONS: usize = 5;

/// A provider whose paused turns are continued (module docs).
pub struct ContinuePaused {
    inner: Arc<dyn Provider>,
    /// Sends the continuation requests ([`super::Continuation`]).
    then: Arc<dyn Provider>,
}

impl std::fmt::Debug for ContinuePaused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContinuePaused")
            .field("provider", &self.inner.name())
            .finish()
    }
}

impl ContinuePaused {
    /// Continues the paused turns of `inner` (an Anthropic Messages
    /// provider) with `then` (the same provider with the
    /// [`super::Continuation`] adapter).
    pub fn new(inner: Arc<dyn Provider>, then: Arc<dyn Provider>) -> Self {
        ContinuePaused { inner, then }
    }
}

/// Where the stream is.
struct State {
    then: Arc<dyn Provider>,
    request: ModelRequest,
    current: EventStream,
    /// The current response so far (what goes back if it pauses).
    response: ResponseBuilder,
    /// The usage of the paused responses before the current one.
    before: Option<Usage>,
    /// The current response's last reported usage.
    usage: Option<Usage>,
    continuations: usize,
    done: bool,
}

fn sum(a: Option<Usage>, b: Option<Usage>) -> Option<Usage> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Usage {
            input_tokens: a.input_tokens + b.input_tokens,
            output_tokens: a.output_tokens + b.output_tokens,
            reasoning_tokens: a.reasoning_tokens + b.reasoning_tokens,
            cache_read_tokens: a.cache_read_tokens + b.cache_read_tokens,
            cache_creation_tokens: a.cache_creation_tokens + b.cache_creation_tokens,
            total_tokens: a.total_tokens + b.total_tokens,
        }),
        (a, b) => a.or(b),
    }
}

impl State {
    /// The next event of the combined stream.
    async fn next(&mut self) -> Option<Result<StreamEvent, ProviderError>> {
        if self.done {
            return None;
        }
        let event = match self.current.next().await {
            None => {
                self.done = true;
                return None;
            }
            Some(Err(e)) => {
                self.done = true;
                return Some(Err(e));
            }
            Some(Ok(event)) => event,
        };
        match event {
            StreamEvent::Usage(usage) => {
                self.usage = Some(usage);
                Some(Ok(StreamEvent::Usage(
                    sum(self.before, Some(usage)).unwrap_or(usage),
                )))
            }
            StreamEvent::Finish {
                reason: FinishReason::Paused,
            } if self.continuations < MAX_CONTINUATIONS => {
                let parts = std::mem::take(&mut self.response).parts();
                self.request.messages.push(RequestMessage {
                    role: ChatRole::Assistant,
                    parts,
                });
                self.before = sum(self.before, self.usage.take());
                self.continuations += 1;
                tracing::debug!(
                    provider = self.then.name(),
                    continuation = self.continuations,
                    "the provider paused the turn; continuing it"
                );
                match self.then.stream(&self.request).await {
                    Ok(next) => self.current = next,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
                // The continuation's text is a part of its own.
                Some(Ok(StreamEvent::TextBreak))
            }
            event => {
                if matches!(event, StreamEvent::Finish { .. }) {
                    self.done = true;
                }
                self.response.push(&event);
                Some(Ok(event))
            }
        }
    }
}

impl Provider for ContinuePaused {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<EventStream, ProviderError>> {
        Box::pin(async move {
            let current = self.inner.stream(request).await?;
            let state = State {
                then: self.then.clone(),
                request: request.clone(),
                current,
                response: ResponseBuilder::new(),
                before: None,
                usage: None,
                continuations: 0,
                done: false,
            };
            let stream = futures::stream::unfold(state, |mut state| async move {
                state.next().await.map(|item| (item, state))
            });
            Ok(stream.boxed())
        })
    }
}
