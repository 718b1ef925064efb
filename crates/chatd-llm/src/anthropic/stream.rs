//! Decoding an Anthropic Messages SSE response into [`StreamEvent`]s.
//!
//! The [`Decoder`] that [`crate::sse::decode`] feeds one event at a time
//! (the driver owns the byte-level SSE framing and the end-of-stream rules).
//! Each `data:` payload is parsed as JSON and dispatched on its `type`
//! (Anthropic's `event:` name always equals it; the name is used only when
//! `type` is missing). Leniently:
//! - unknown event types, unknown block types (`redacted_thinking`, ...),
//!   unknown delta types and unknown fields are ignored; `ping` is ignored;
//! - provider-hosted tools (API.md "Workspaces and provider-hosted tools"):
//!   a `server_tool_use` block becomes one
//!   [`StreamEvent::ProviderToolCall`] when it stops (its
//!   `input_json_delta` pieces parsed; a block cut off yields nothing), a
//!   `web_search_tool_result` block (any `*_tool_result` block with a
//!   `tool_use_id`) one [`StreamEvent::ProviderToolResult`] carrying its
//!   `content` unchanged, an error when that is a `*_error` object. They are
//!   never tool calls. A text block's citations (on its start and in
//!   `citations_delta`s) become [`StreamEvent::Citation`]s; once a server
//!   tool was used, every text block starts with a
//!   [`StreamEvent::TextBreak`] so that a cited block stays its own part;
//! - content blocks are keyed by `index`; a tool call's index is its block's
//!   index. `input_json_delta` pieces are passed through unparsed (the first
//!   is often `""`, which yields nothing); a `tool_use` block whose start
//!   already carries a non-empty `input` and that gets no delta sends that
//!   input as its arguments;
//! - `thinking_delta`s are reasoning; the block's `signature_delta` is kept
//!   byte-exact and emitted as [`StreamEvent::ReasoningSignature`] when the
//!   block stops;
//! - usage: `message_start` carries the input side (`input_tokens` is the
//!   uncached part; `cache_read_input_tokens` and
//!   `cache_creation_input_tokens` are separate) and a first `output_tokens`;
//!   every `message_delta` usage is cumulative and replaces what it repeats.
//!   A stream without any usage yields no usage, not zero usage;
//! - an `error` event ends the stream with a classified error
//!   ([`ProviderError::from_error_body`]: `overloaded_error` is a retryable
//!   `overloaded`), whatever came before.
//!
//! The stream ends at `message_stop`. A `tool_use` block that never got its
//! `content_block_stop` (the response hit `max_tokens` inside the JSON) gets
//! no [`StreamEvent::ToolCallEnd`]: it is incomplete and must not run.
//!
//! End-of-input policy: without `message_stop`, the response counts as
//! complete only if a `message_delta` with a `stop_reason` arrived (the
//! official SDK fixtures end in an unterminated `message_stop`); otherwise
//! it is a retryable `generic` error (a dropped connection).

use std::collections::BTreeMap;

use chatd_core::Citation;
use serde_json::Value;

use crate::error::ProviderError;
use crate::event::{FinishReason, StreamEvent, Usage};
use crate::sse::{SseDecoder, generated_call_id, invalid_payload, unnamed_tool_call};

/// The parsing state of one Messages response, fed one SSE event at a time
/// by [`crate::sse::decode`].
#[derive(Debug)]
pub struct Decoder {
    provider: String,
    message_id: Option<String>,
    blocks: BTreeMap<usize, Block>,
    usage: WireUsage,
    stop_reason: Option<String>,
    /// Names of the server tool calls so far, by id.
    server_tools: BTreeMap<String, String>,
}

#[derive(Debug)]
enum Block {
    Text,
    ServerToolUse {
        id: String,
        name: String,
        /// `input` of the start event when it was a non-empty object.
        start_input: Option<Value>,
        /// The `input_json_delta` pieces so far.
        json: String,
    },
    Thinking {
        signature: String,
    },
    ToolUse {
        /// `input` of the start event when it was a non-empty object.
        start_input: Option<String>,
        got_delta: bool,
        ended: bool,
    },
    /// A block type this crate does not interpret.
    Other,
}

/// Usage counts as reported so far; `None` fields were never reported.
#[derive(Debug, Default, Clone, Copy)]
struct WireUsage {
    input: Option<i64>,
    output: Option<i64>,
    cache_read: Option<i64>,
    cache_creation: Option<i64>,
}

impl WireUsage {
    fn update(&mut self, usage: &Value) {
        let get = |key: &str| usage.get(key).and_then(Value::as_i64);
        if let Some(n) = get("input_tokens") {
            self.input = Some(n);
        }
        if let Some(n) = get("output_tokens") {
            self.output = Some(n);
        }
        if let Some(n) = get("cache_read_input_tokens") {
            self.cache_read = Some(n);
        }
        if let Some(n) = get("cache_creation_input_tokens") {
            self.cache_creation = Some(n);
        }
    }

    fn into_usage(self) -> Option<Usage> {
        if self.input.is_none() && self.output.is_none() {
            return None;
        }
        let input = self.input.unwrap_or(0);
        let output = self.output.unwrap_or(0);
        let cache_read = self.cache_read.unwrap_or(0);
        let cache_creation = self.cache_creation.unwrap_or(0);
        Some(Usage {
            input_tokens: input,
            output_tokens: output,
            reasoning_tokens: 0,
            cache_read_tokens: cache_read,
            cache_creation_tokens: cache_creation,
            total_tokens: input + cache_read + cache_creation + output,
        })
    }
}

impl Decoder {
    /// A decoder for one response of `provider` (its name in errors).
    pub fn new(provider: String) -> Self {
        Decoder {
            provider,
            message_id: None,
            blocks: BTreeMap::new(),
            usage: WireUsage::default(),
            stop_reason: None,
            server_tools: BTreeMap::new(),
        }
    }
}

impl SseDecoder for Decoder {
    fn provider(&self) -> &str {
        &self.provider
    }

    fn on_event(&mut self, name: &str, data: &str) -> Result<Vec<StreamEvent>, ProviderError> {
        if data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let value: Value = match serde_json::from_str(data) {
            Ok(value) => value,
            Err(_) if name == "error" => {
                return Err(ProviderError::from_error_body(
                    &Value::String(data.to_owned()),
                    &self.provider,
                ));
            }
            Err(err) => return Err(self.invalid_event(data, &err)),
        };
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(name)
            .to_owned();
        let mut out = Vec::new();
        match kind.as_str() {
            "message_start" => {
                let message = value.get("message").unwrap_or(&Value::Null);
                if let Some(id) = message.get("id").and_then(Value::as_str) {
                    self.message_id = Some(id.to_owned());
                }
                if let Some(usage) = message.get("usage") {
                    self.usage.update(usage);
                }
            }
            "content_block_start" => {
                let index = self.index(&value, data)?;
                let block = value.get("content_block").unwrap_or(&Value::Null);
                self.on_block_start(index, block, &mut out)?;
            }
            "content_block_delta" => {
                let index = self.index(&value, data)?;
                let delta = value.get("delta").unwrap_or(&Value::Null);
                self.on_block_delta(index, delta, &mut out);
            }
            "content_block_stop" => {
                let index = self.index(&value, data)?;
                self.on_block_stop(index, &mut out);
            }
            "message_delta" => {
                if let Some(reason) = value
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                    .filter(|r| !r.is_empty())
                {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = value.get("usage") {
                    self.usage.update(usage);
                }
            }
            "message_stop" => return Ok(self.finish_response()),
            "error" => {
                return Err(ProviderError::from_error_body(&value, &self.provider));
            }
            // `ping` and event types newer than this crate.
            _ => {}
        }
        Ok(out)
    }

    fn on_end_of_input(&mut self) -> Option<Result<Vec<StreamEvent>, ProviderError>> {
        self.stop_reason
            .is_some()
            .then(|| Ok(self.finish_response()))
    }
}

impl Decoder {
    fn index(&self, value: &Value, data: &str) -> Result<usize, ProviderError> {
        value
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| {
                invalid_payload(
                    "the provider sent a content block event without an index".to_owned(),
                    data,
                    &self.provider,
                )
            })
    }

    fn on_block_start(
        &mut self,
        index: usize,
        block: &Value,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProviderError> {
        if self.blocks.contains_key(&index) {
            // A repeated start changes nothing.
            return Ok(());
        }
        let text_field = |key: &str| non_empty_str(block, key);
        let state = match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if !self.server_tools.is_empty() {
                    out.push(StreamEvent::TextBreak);
                }
                let citations = block.get("citations").and_then(Value::as_array);
                out.extend(citations.into_iter().flatten().filter_map(citation));
                if let Some(text) = text_field("text") {
                    out.push(StreamEvent::TextDelta(text));
                }
                Block::Text
            }
            Some("server_tool_use") => {
                let name = text_field("name").unwrap_or_else(|| "server_tool".to_owned());
                let id = text_field("id").unwrap_or_else(|| {
                    generated_call_id("srvtoolu", self.message_id.as_deref(), index)
                });
                self.server_tools.insert(id.clone(), name.clone());
                Block::ServerToolUse {
                    id,
                    name,
                    start_input: block
                        .get("input")
                        .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                        .cloned(),
                    json: String::new(),
                }
            }
            Some(kind) if kind.ends_with("_tool_result") && block.get("tool_use_id").is_some() => {
                let tool_call_id = text_field("tool_use_id").unwrap_or_default();
                let tool_name = self
                    .server_tools
                    .get(&tool_call_id)
                    .cloned()
                    .unwrap_or_else(|| kind.trim_end_matches("_tool_result").to_owned());
                let result = block.get("content").cloned().unwrap_or(Value::Null);
                let is_error = result
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with("_error"));
                out.push(StreamEvent::ProviderToolResult {
                    tool_call_id,
                    tool_name,
                    result,
                    is_error,
                });
                Block::Other
            }
            Some("thinking") => {
                if let Some(text) = text_field("thinking") {
                    out.push(StreamEvent::ReasoningDelta(text));
                }
                Block::Thinking {
                    signature: text_field("signature").unwrap_or_default(),
                }
            }
            Some("tool_use") => {
                let Some(name) = text_field("name") else {
                    return Err(unnamed_tool_call(index, &self.provider));
                };
                let id = text_field("id").unwrap_or_else(|| {
                    generated_call_id("toolu", self.message_id.as_deref(), index)
                });
                out.push(StreamEvent::ToolCallStart { index, id, name });
                let start_input = block
                    .get("input")
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                    .map(Value::to_string);
                Block::ToolUse {
                    start_input,
                    got_delta: false,
                    ended: false,
                }
            }
            _ => Block::Other,
        };
        self.blocks.insert(index, state);
        Ok(())
    }

    fn on_block_delta(&mut self, index: usize, delta: &Value, out: &mut Vec<StreamEvent>) {
        let field = |key: &str| non_empty_str(delta, key);
        let block = self.blocks.get_mut(&index);
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                if let Some(text) = field("text") {
                    out.push(StreamEvent::TextDelta(text));
                }
            }
            Some("thinking_delta") => {
                if let Some(text) = field("thinking") {
                    out.push(StreamEvent::ReasoningDelta(text));
                }
            }
            Some("signature_delta") => {
                if let (Some(Block::Thinking { signature }), Some(piece)) =
                    (block, field("signature"))
                {
                    signature.push_str(&piece);
                }
            }
            Some("citations_delta") => {
                if let Some(Block::Text) = block
                    && let Some(c) = delta.get("citation").and_then(citation)
                {
                    out.push(c);
                }
            }
            Some("input_json_delta") if matches!(block, Some(Block::ServerToolUse { .. })) => {
                if let (Some(Block::ServerToolUse { json, .. }), Some(piece)) =
                    (block, field("partial_json"))
                {
                    json.push_str(&piece);
                }
            }
            Some("input_json_delta") => {
                if let Some(Block::ToolUse {
                    got_delta,
                    ended: false,
                    ..
                }) = block
                    && let Some(piece) = field("partial_json")
                {
                    *got_delta = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        args_delta: piece,
                    });
                }
            }
            _ => {}
        }
    }

    fn on_block_stop(&mut self, index: usize, out: &mut Vec<StreamEvent>) {
        if let Some(Block::ServerToolUse { .. }) = self.blocks.get(&index)
            && let Some(Block::ServerToolUse {
                id,
                name,
                start_input,
                json,
            }) = self.blocks.insert(index, Block::Other)
        {
            let input = if json.trim().is_empty() {
                start_input.unwrap_or_else(|| Value::Object(Default::default()))
            } else {
                // Kept as the text it was when it is not JSON.
                serde_json::from_str(&json).unwrap_or(Value::String(json))
            };
            out.push(StreamEvent::ProviderToolCall { id, name, input });
            return;
        }
        match self.blocks.get_mut(&index) {
            Some(Block::Thinking { signature }) if !signature.is_empty() => {
                out.push(StreamEvent::ReasoningSignature(std::mem::take(signature)));
            }
            Some(Block::ToolUse {
                start_input,
                got_delta,
                ended,
            }) if !*ended => {
                if !*got_delta && let Some(input) = start_input.take() {
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        args_delta: input,
                    });
                }
                *ended = true;
                out.push(StreamEvent::ToolCallEnd { index });
            }
            _ => {}
        }
    }

    /// The events that close a complete response: usage and finish reason.
    /// Tool calls without a stop stay unended: they were cut off.
    fn finish_response(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if let Some(usage) = self.usage.into_usage() {
            out.push(StreamEvent::Usage(usage));
        }
        let reason = match &self.stop_reason {
            Some(reason) => FinishReason::from_anthropic(reason),
            None if self
                .blocks
                .values()
                .any(|b| matches!(b, Block::ToolUse { ended: true, .. })) =>
            {
                FinishReason::ToolCalls
            }
            None => FinishReason::Stop,
        };
        out.push(StreamEvent::Finish { reason });
        out
    }

    fn invalid_event(&self, data: &str, err: &serde_json::Error) -> ProviderError {
        invalid_payload(
            format!("the provider sent an invalid stream event: {err}"),
            data,
            &self.provider,
        )
    }
}

/// A citation of a text block as a [`StreamEvent::Citation`]: those with a
/// `url` (web search's `web_search_result_location`); document citations
/// (no url) are left out.
fn citation(value: &Value) -> Option<StreamEvent> {
    let url = non_empty_str(value, "url")?;
    Some(StreamEvent::Citation(Citation {
        url,
        title: non_empty_str(value, "title"),
        cited_text: non_empty_str(value, "cited_text"),
        encrypted_index: non_empty_str(value, "encrypted_index"),
    }))
}

/// `value[key]` when it is a non-empty string.
fn non_empty_str(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}
