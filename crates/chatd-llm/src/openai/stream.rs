//! Decoding an OpenAI Chat Completions SSE response into [`StreamEvent`]s:
//! the [`Decoder`] that [`crate::sse::decode`] feeds one event at a time
//! (the driver owns the byte-level SSE framing and the end-of-stream rules).
//! Each `data:` payload is parsed as JSON, leniently:
//! - unknown fields, `null`s and unknown `finish_reason`s are accepted;
//! - tool calls are keyed by `index`: the id and name are taken from the
//!   first chunk that has them and ignored when repeated (llama.cpp repeats
//!   them in every chunk), arguments are concatenated; a call whose name
//!   comes late is started once the name arrives; legacy `function_call`
//!   twins are ignored;
//! - reasoning comes from `reasoning_content` (DeepSeek, vLLM, llama.cpp) or
//!   else `reasoning` (OpenRouter);
//! - `annotations` of type `url_citation` on a delta (OpenAI's search
//!   models, `web_search_options`) become [`StreamEvent::Citation`]s of the
//!   text (`url` and `title`; the span indices are not kept); other
//!   annotation types are ignored;
//! - usage is taken from the last chunk that carries a non-empty `usage`
//!   (the final `choices: []` chunk with `include_usage`); a server that
//!   ignores `include_usage` yields no usage, not zero usage;
//! - a later `finish_reason: null` never clears an earlier reason;
//! - a `data: {"error": ...}` payload (or an `event: error`) ends the stream
//!   with a classified error, and a `[DONE]` after it changes nothing.
//!
//! The stream ends at `data: [DONE]`, or at end of input. Either way the
//! response counts as complete only if a `finish_reason` arrived; otherwise
//! it is a retryable `generic` error (a dropped connection, llama.cpp's
//! empty answer to an over-long prompt, or llama-cpp-python's `[DONE]`
//! after it aborted the generation for a newer request).

use std::collections::BTreeMap;

use chatd_core::Citation;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ErrorKind, ProviderError};
use crate::event::{FinishReason, StreamEvent, Usage};
use crate::sse::{SseDecoder, generated_call_id, invalid_payload, unnamed_tool_call};

/// The parsing state of one Chat Completions response, fed one SSE event at
/// a time by [`crate::sse::decode`].
#[derive(Debug)]
pub struct Decoder {
    provider: String,
    /// The chunks' `id` (`chatcmpl-...`), used to make generated tool call
    /// ids unique.
    response_id: Option<String>,
    calls: BTreeMap<usize, CallState>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
}

#[derive(Debug, Default)]
struct CallState {
    id: Option<String>,
    name: Option<String>,
    started: bool,
    /// Argument pieces that arrived before the name.
    pending_args: String,
}

impl Decoder {
    /// A decoder for one response of `provider` (its name in errors).
    pub fn new(provider: String) -> Self {
        Decoder {
            provider,
            response_id: None,
            calls: BTreeMap::new(),
            finish: None,
            usage: None,
        }
    }
}

impl SseDecoder for Decoder {
    fn provider(&self) -> &str {
        &self.provider
    }

    fn on_event(&mut self, name: &str, data: &str) -> Result<Vec<StreamEvent>, ProviderError> {
        match name {
            "error" => {
                let body = serde_json::from_str::<Value>(data)
                    .unwrap_or_else(|_| Value::String(data.to_owned()));
                Err(ProviderError::from_error_body(&body, &self.provider))
            }
            "message" if data.trim() == "[DONE]" => self.on_done(),
            "message" => self.on_chunk(data),
            // Named events OpenAI does not send: not ours to interpret.
            _ => Ok(Vec::new()),
        }
    }

    fn on_end_of_input(&mut self) -> Option<Result<Vec<StreamEvent>, ProviderError>> {
        // Some servers omit `[DONE]`; the finish reason says the model was
        // done.
        self.finish.is_some().then(|| self.finish_response())
    }
}

impl Decoder {
    fn on_chunk(&mut self, data: &str) -> Result<Vec<StreamEvent>, ProviderError> {
        let value: Value =
            serde_json::from_str(data).map_err(|err| self.invalid_chunk(data, &err))?;
        if value.get("error").is_some_and(|e| !e.is_null()) {
            return Err(ProviderError::from_error_body(&value, &self.provider));
        }
        let chunk: Chunk =
            serde_json::from_value(value).map_err(|err| self.invalid_chunk(data, &err))?;
        if self.response_id.is_none() {
            self.response_id = chunk.id.filter(|id| !id.is_empty());
        }
        if let Some(usage) = chunk.usage.and_then(WireUsage::into_usage) {
            self.usage = Some(usage);
        }
        let mut out = Vec::new();
        for choice in chunk.choices.unwrap_or_default() {
            // Only the first choice is ours; `n > 1` is never requested.
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.on_delta(delta, &mut out);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish
                    .get_or_insert(FinishReason::from_openai(&reason));
            }
        }
        Ok(out)
    }

    fn on_delta(&mut self, delta: Delta, out: &mut Vec<StreamEvent>) {
        let reasoning = delta
            .reasoning_content
            .filter(|r| !r.is_empty())
            .or(delta.reasoning);
        if let Some(text) = reasoning.filter(|r| !r.is_empty()) {
            out.push(StreamEvent::ReasoningDelta(text));
        }
        for text in [delta.content, delta.refusal].into_iter().flatten() {
            if !text.is_empty() {
                out.push(StreamEvent::TextDelta(text));
            }
        }
        for annotation in delta.annotations.unwrap_or_default() {
            if annotation.get("type").and_then(Value::as_str) != Some("url_citation") {
                continue;
            }
            let cited = annotation.get("url_citation").unwrap_or(&annotation);
            let field = |key: &str| {
                cited
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            };
            if let Some(url) = field("url") {
                out.push(StreamEvent::Citation(Citation {
                    url,
                    title: field("title"),
                    cited_text: None,
                    encrypted_index: None,
                }));
            }
        }
        for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let index = call.index.unwrap_or(position);
            self.on_tool_call_delta(index, call, out);
        }
    }

    fn on_tool_call_delta(
        &mut self,
        index: usize,
        delta: ToolCallDelta,
        out: &mut Vec<StreamEvent>,
    ) {
        let response_id = self.response_id.clone();
        let state = self.calls.entry(index).or_default();
        let function = delta.function.unwrap_or_default();
        if state.id.is_none() {
            state.id = delta.id.filter(|id| !id.is_empty());
        }
        if state.name.is_none() {
            state.name = function.name.filter(|name| !name.is_empty());
        }
        if let Some(args) = function.arguments {
            state.pending_args.push_str(&args);
        }
        if !state.started
            && let Some(name) = &state.name
        {
            state.started = true;
            let id = state
                .id
                .get_or_insert_with(|| generated_call_id("call", response_id.as_deref(), index))
                .clone();
            out.push(StreamEvent::ToolCallStart {
                index,
                id,
                name: name.clone(),
            });
        }
        if state.started && !state.pending_args.is_empty() {
            out.push(StreamEvent::ToolCallDelta {
                index,
                args_delta: std::mem::take(&mut state.pending_args),
            });
        }
    }

    /// The events that close a complete response: the end of every tool
    /// call, the usage, the finish reason.
    fn finish_response(&mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        let mut out = Vec::new();
        for (index, call) in &self.calls {
            if call.started {
                out.push(StreamEvent::ToolCallEnd { index: *index });
            } else if call.id.is_some() || !call.pending_args.is_empty() {
                return Err(unnamed_tool_call(*index, &self.provider));
            }
        }
        if let Some(usage) = self.usage {
            out.push(StreamEvent::Usage(usage));
        }
        let reason = self.finish.clone().unwrap_or_else(|| {
            if out
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolCallEnd { .. }))
            {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            }
        });
        out.push(StreamEvent::Finish { reason });
        Ok(out)
    }

    /// `data: [DONE]`: complete only with a finish reason. llama.cpp's
    /// Python server aborts a running generation when another request
    /// arrives and then sends `[DONE]` with no finish reason; taking that
    /// as the end of the answer would commit a reply cut short (or empty)
    /// as if the model had finished. It is a retryable `generic` error.
    fn on_done(&mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        if self.finish.is_some() {
            return self.finish_response();
        }
        Err(ProviderError::new(
            ErrorKind::Generic,
            "the stream ended ([DONE]) without a finish reason: the response was cut short",
            &self.provider,
        ))
    }

    fn invalid_chunk(&self, data: &str, err: &serde_json::Error) -> ProviderError {
        invalid_payload(
            format!("the provider sent an invalid stream chunk: {err}"),
            data,
            &self.provider,
        )
    }
}

/// One `chat.completion.chunk`; every field optional.
#[derive(Debug, Deserialize)]
struct Chunk {
    id: Option<String>,
    choices: Option<Vec<Choice>>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    index: Option<usize>,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<ToolCallDelta>>,
    annotations: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    index: Option<usize>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    total_tokens: Option<i64>,
    prompt_tokens_details: Option<PromptTokensDetails>,
    completion_tokens_details: Option<CompletionTokensDetails>,
}

#[derive(Debug, Deserialize)]
struct PromptTokensDetails {
    cached_tokens: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct CompletionTokensDetails {
    reasoning_tokens: Option<i64>,
}

impl WireUsage {
    /// Our [`Usage`]; `None` for an object without any count (`{}`).
    fn into_usage(self) -> Option<Usage> {
        if self.prompt_tokens.is_none()
            && self.completion_tokens.is_none()
            && self.total_tokens.is_none()
        {
            return None;
        }
        let prompt = self.prompt_tokens.unwrap_or(0);
        let output = self.completion_tokens.unwrap_or(0);
        let cached = self
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0)
            .clamp(0, prompt.max(0));
        Some(Usage {
            input_tokens: prompt - cached,
            output_tokens: output,
            reasoning_tokens: self
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
            cache_read_tokens: cached,
            cache_creation_tokens: 0,
            total_tokens: self.total_tokens.unwrap_or(prompt + output),
        })
    }
}
