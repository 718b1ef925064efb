//! Accumulating stream events into a model response.
//!
//! [`ResponseBuilder`] is fed one event at a time, so the worker can look at
//! the output so far at any moment: on an interrupt it commits
//! [`ResponseBuilder::parts`] as the partial assistant message (spec
//! "Interrupt goroutine"), and on a normal end it takes the whole
//! [`Response`]. [`collect`] drives a stream to completion with it.

use std::collections::BTreeMap;

use chatd_core::{Citation, MessagePart};
use futures::StreamExt as _;
use serde_json::Value;

use crate::error::{ErrorKind, ProviderError};
use crate::event::{FinishReason, StreamEvent, Usage};
use crate::provider::EventStream;

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's id, stored unchanged.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The JSON arguments as the model wrote them (possibly invalid JSON when
    /// the response was cut off).
    pub args: String,
}

impl ToolCall {
    /// The arguments parsed as JSON; empty arguments mean `{}`.
    ///
    /// # Errors
    /// When the arguments are not valid JSON.
    pub fn parsed_args(&self) -> Result<Value, serde_json::Error> {
        if self.args.trim().is_empty() {
            Ok(Value::Object(Default::default()))
        } else {
            serde_json::from_str(&self.args)
        }
    }
}

/// A complete model response.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// All text deltas, concatenated.
    pub text: String,
    /// All reasoning deltas, concatenated.
    pub reasoning: String,
    /// The tool calls, in index order.
    pub tool_calls: Vec<ToolCall>,
    /// Usage as reported; `None` when the provider reported none.
    pub usage: Option<Usage>,
    /// Why the model stopped.
    pub finish: FinishReason,
    /// The assistant message's content in arrival order (reasoning, text,
    /// tool-call and provider-tool parts), ready for `CommitStep`.
    pub parts: Vec<MessagePart>,
}

/// Accumulates [`StreamEvent`]s into a [`Response`], incrementally.
#[derive(Debug, Clone, Default)]
pub struct ResponseBuilder {
    segments: Vec<Segment>,
    /// A [`StreamEvent::TextBreak`] came after the last text segment: the
    /// next text or citation starts a new one.
    text_break: bool,
    calls: BTreeMap<usize, CallState>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

#[derive(Debug, Clone)]
enum Segment {
    Text {
        text: String,
        citations: Vec<Citation>,
    },
    /// A provider-hosted tool's call or result, complete.
    Provider(MessagePart),
    Reasoning {
        text: String,
        signature: Option<String>,
    },
    Call(usize),
}

#[derive(Debug, Clone)]
struct CallState {
    call: ToolCall,
    ended: bool,
}

impl ResponseBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one event. Adjacent text (or reasoning) deltas merge into one
    /// part; a tool call takes its place in [`ResponseBuilder::parts`] where
    /// it started. A delta for a call that never started is kept under an
    /// empty id and name rather than dropped.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta(delta) => match self.open_text() {
                Some(Segment::Text { text, .. }) => text.push_str(delta),
                _ => self.segments.push(Segment::Text {
                    text: delta.clone(),
                    citations: Vec::new(),
                }),
            },
            StreamEvent::TextBreak => self.text_break = true,
            StreamEvent::Citation(citation) => match self.open_text() {
                Some(Segment::Text { citations, .. }) => citations.push(citation.clone()),
                _ => self.segments.push(Segment::Text {
                    text: String::new(),
                    citations: vec![citation.clone()],
                }),
            },
            StreamEvent::ProviderToolCall { id, name, input } => {
                self.segments
                    .push(Segment::Provider(MessagePart::ProviderToolCall {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                        input: input.clone(),
                    }));
            }
            StreamEvent::ProviderToolResult {
                tool_call_id,
                tool_name,
                result,
                is_error,
            } => {
                self.segments
                    .push(Segment::Provider(MessagePart::ProviderToolResult {
                        tool_call_id: tool_call_id.clone(),
                        tool_name: tool_name.clone(),
                        result: result.clone(),
                        is_error: *is_error,
                    }));
            }
            StreamEvent::ReasoningDelta(delta) => match self.segments.last_mut() {
                Some(Segment::Reasoning {
                    text,
                    signature: None,
                }) => text.push_str(delta),
                _ => self.segments.push(Segment::Reasoning {
                    text: delta.clone(),
                    signature: None,
                }),
            },
            StreamEvent::ReasoningSignature(sig) => match self.segments.last_mut() {
                Some(Segment::Reasoning { signature, .. }) if signature.is_none() => {
                    *signature = Some(sig.clone());
                }
                // A signed block with no text (its thinking was empty).
                _ => self.segments.push(Segment::Reasoning {
                    text: String::new(),
                    signature: Some(sig.clone()),
                }),
            },
            StreamEvent::ToolCallStart { index, id, name } => {
                if !self.calls.contains_key(index) {
                    self.segments.push(Segment::Call(*index));
                    self.calls.insert(
                        *index,
                        CallState {
                            call: ToolCall {
                                id: id.clone(),
                                name: name.clone(),
                                args: String::new(),
                            },
                            ended: false,
                        },
                    );
                }
            }
            StreamEvent::ToolCallDelta { index, args_delta } => {
                if !self.calls.contains_key(index) {
                    self.push(&StreamEvent::ToolCallStart {
                        index: *index,
                        id: String::new(),
                        name: String::new(),
                    });
                }
                if let Some(state) = self.calls.get_mut(index) {
                    state.call.args.push_str(args_delta);
                }
            }
            StreamEvent::ToolCallEnd { index } => {
                if let Some(state) = self.calls.get_mut(index) {
                    state.ended = true;
                }
            }
            StreamEvent::Usage(usage) => self.usage = Some(*usage),
            StreamEvent::Finish { reason } => self.finish = Some(reason.clone()),
        }
    }

    /// The last segment when it is text that the next text delta or
    /// citation belongs to; clears a pending text break.
    fn open_text(&mut self) -> Option<&mut Segment> {
        let broken = std::mem::take(&mut self.text_break);
        self.segments
            .last_mut()
            .filter(|s| !broken && matches!(s, Segment::Text { .. }))
    }

    /// The text so far.
    pub fn text(&self) -> String {
        self.segments
            .iter()
            .filter_map(|s| match s {
                Segment::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The reasoning so far.
    pub fn reasoning(&self) -> String {
        self.segments
            .iter()
            .filter_map(|s| match s {
                Segment::Reasoning { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Every tool call so far, ended or not, in index order: the calls
    /// chatd runs. Provider-hosted tool calls are not among them.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.calls.values().map(|s| s.call.clone()).collect()
    }

    /// The tool calls whose [`StreamEvent::ToolCallEnd`] has not arrived: on
    /// an interrupt these must not run (their arguments may be cut off).
    pub fn unfinished_tool_calls(&self) -> Vec<ToolCall> {
        self.calls
            .values()
            .filter(|s| !s.ended)
            .map(|s| s.call.clone())
            .collect()
    }

    /// The usage, once reported.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The finish reason, once the response is complete.
    pub fn finish_reason(&self) -> Option<&FinishReason> {
        self.finish.as_ref()
    }

    /// Whether no output (text, reasoning or tool call) arrived yet.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// The output so far as assistant message parts, in arrival order.
    pub fn parts(&self) -> Vec<MessagePart> {
        self.segments
            .iter()
            .filter_map(|segment| match segment {
                Segment::Text { text, citations } => Some(MessagePart::Text {
                    text: text.clone(),
                    citations: citations.clone(),
                }),
                Segment::Provider(part) => Some(part.clone()),
                Segment::Reasoning { text, signature } => Some(MessagePart::Reasoning {
                    text: text.clone(),
                    signature: signature.clone(),
                }),
                Segment::Call(index) => self.calls.get(index).map(|s| MessagePart::ToolCall {
                    tool_call_id: s.call.id.clone(),
                    tool_name: s.call.name.clone(),
                    args: s.call.args.clone(),
                }),
            })
            .collect()
    }

    /// Whether the response may be finished: the finish reason arrived.
    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// The complete response, or `None` when no [`StreamEvent::Finish`]
    /// arrived yet.
    pub fn into_response(self) -> Option<Response> {
        let finish = self.finish.clone()?;
        Some(Response {
            text: self.text(),
            reasoning: self.reasoning(),
            tool_calls: self.tool_calls(),
            usage: self.usage,
            parts: self.parts(),
            finish,
        })
    }
}

/// Drives `stream` to its end and returns the whole response.
///
/// # Errors
/// The stream's first error; a retryable `generic` error when the stream
/// ends without a [`StreamEvent::Finish`].
pub async fn collect(mut stream: EventStream) -> Result<Response, ProviderError> {
    let mut builder = ResponseBuilder::new();
    while let Some(item) = stream.next().await {
        builder.push(&item?);
        if builder.finish_reason().is_some() {
            break;
        }
    }
    builder.into_response().ok_or_else(|| {
        ProviderError::new(
            ErrorKind::Generic,
            "the stream ended without a finish event",
            "unknown",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_keeps_arrival_order_and_merges_adjacent_deltas() {
        let mut b = ResponseBuilder::new();
        for e in [
            StreamEvent::ReasoningDelta("think".into()),
            StreamEvent::ReasoningDelta("ing".into()),
            StreamEvent::TextDelta("Hel".into()),
            StreamEvent::TextDelta("lo".into()),
            StreamEvent::ToolCallStart {
                index: 1,
                id: "b".into(),
                name: "two".into(),
            },
            StreamEvent::ToolCallStart {
                index: 0,
                id: "a".into(),
                name: "one".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                args_delta: "{}".into(),
            },
            StreamEvent::ToolCallEnd { index: 0 },
        ] {
            b.push(&e);
        }
        assert_eq!(b.text(), "Hello");
        assert_eq!(b.reasoning(), "thinking");
        assert_eq!(
            b.unfinished_tool_calls(),
            vec![ToolCall {
                id: "b".into(),
                name: "two".into(),
                args: String::new()
            }]
        );
        assert_eq!(
            b.parts(),
            vec![
                MessagePart::reasoning("thinking"),
                MessagePart::text("Hello"),
                MessagePart::ToolCall {
                    tool_call_id: "b".into(),
                    tool_name: "two".into(),
                    args: String::new()
                },
                MessagePart::ToolCall {
                    tool_call_id: "a".into(),
                    tool_name: "one".into(),
                    args: "{}".into()
                },
            ]
        );
        assert!(b.clone().into_response().is_none());
        b.push(&StreamEvent::Finish {
            reason: FinishReason::ToolCalls,
        });
        let response = b.into_response().unwrap();
        assert_eq!(response.tool_calls[0].id, "a");
        assert_eq!(response.usage, None);
        assert_eq!(response.finish, FinishReason::ToolCalls);
    }

    #[test]
    fn empty_arguments_parse_as_an_empty_object() {
        let call = ToolCall {
            id: "x".into(),
            name: "n".into(),
            args: String::new(),
        };
        assert_eq!(call.parsed_args().unwrap(), serde_json::json!({}));
    }
}
