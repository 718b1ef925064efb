//! The events every provider stream yields, whatever the vendor's wire format.
//!
//! See the crate docs for the ordering invariants. Token counts are `i64`
//! because they are stored in PostgreSQL `bigint` columns (API.md `Usage`).

use chatd_core::Citation;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event of a model response, in arrival order.
///
/// New variants may be added (Anthropic's thinking signatures, for example),
/// so matches need a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// The next piece of the assistant's text (never empty).
    TextDelta(String),
    /// The next piece of the model's reasoning ("thinking") text (never empty).
    ReasoningDelta(String),
    /// The provider's signature of the reasoning block that just ended
    /// (Anthropic `signature_delta`), byte-exact; it must be sent back with
    /// the reasoning text. A reasoning delta after it starts a new block.
    ReasoningSignature(String),
    /// A tool call begins. `index` identifies the call within this response;
    /// `id` is the provider's id, stored unchanged (a generated one only when
    /// the provider sent none).
    ToolCallStart {
        /// Position of the call in this response (0-based, as the provider
        /// numbers it).
        index: usize,
        /// The provider's tool call id.
        id: String,
        /// The tool's name as offered to the model.
        name: String,
    },
    /// The next piece of a tool call's JSON arguments (never empty). The
    /// concatenation of all pieces is the arguments string; it is not
    /// guaranteed to be valid JSON (a response cut at the token limit).
    ToolCallDelta {
        /// The call this piece belongs to.
        index: usize,
        /// The piece.
        args_delta: String,
    },
    /// No more argument pieces will come for this call. A call that never
    /// gets its end before [`StreamEvent::Finish`] was cut off (the response
    /// hit the output token limit inside it): it must not be executed.
    ToolCallEnd {
        /// The call that ended.
        index: usize,
    },
    /// The text deltas that follow start a new text part (Anthropic sends
    /// its answer in text blocks, and a block with citations must stay a
    /// part of its own); nothing when no text came before.
    TextBreak,
    /// A source cited by the current text part (the one the latest text
    /// delta went to, or the next one after a [`StreamEvent::TextBreak`] or
    /// any other part).
    Citation(Citation),
    /// A complete call of a provider-hosted tool (Anthropic
    /// `server_tool_use`): the provider runs it; it is stored and shown,
    /// never executed, and it is not among the response's tool calls.
    ProviderToolCall {
        /// The provider's id (`srvtoolu_...`).
        id: String,
        /// The provider's tool name (`web_search`).
        name: String,
        /// The input the provider sent (`{"query": ...}`).
        input: Value,
    },
    /// The result of a provider-hosted tool call, as the provider sent it
    /// (byte-exact: it is sent back in later turns).
    ProviderToolResult {
        /// The id of the call it answers.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The result (Anthropic: the `content` of a
        /// `web_search_tool_result` block).
        result: Value,
        /// Whether the provider reported an error.
        is_error: bool,
    },
    /// Token usage of the whole response, as the provider reported it.
    Usage(Usage),
    /// The response is complete. Always the last event of a successful stream.
    Finish {
        /// Why the model stopped.
        reason: FinishReason,
    },
}

impl StreamEvent {
    /// Replaces every NUL in the event's text (deltas, signature, tool call
    /// id, name and argument pieces, citations, provider tool inputs and
    /// results) by U+FFFD ([`chatd_core::sanitize`]):
    /// what the model sent is stored as it streams, and PostgreSQL cannot
    /// store NUL. The SSE driver applies it to every event it yields.
    pub fn sanitize(&mut self) {
        use chatd_core::sanitize::string;
        match self {
            StreamEvent::TextDelta(text)
            | StreamEvent::ReasoningDelta(text)
            | StreamEvent::ReasoningSignature(text) => string(text),
            StreamEvent::ToolCallStart { id, name, .. } => {
                string(id);
                string(name);
            }
            StreamEvent::ToolCallDelta { args_delta, .. } => string(args_delta),
            StreamEvent::Citation(citation) => chatd_core::sanitize::citation(citation),
            StreamEvent::ProviderToolCall {
                id,
                name,
                input: value,
            }
            | StreamEvent::ProviderToolResult {
                tool_call_id: id,
                tool_name: name,
                result: value,
                ..
            } => {
                string(id);
                string(name);
                chatd_core::sanitize::json(value);
            }
            StreamEvent::TextBreak
            | StreamEvent::ToolCallEnd { .. }
            | StreamEvent::Usage(_)
            | StreamEvent::Finish { .. } => {}
        }
    }
}

/// Why the model stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural stop (OpenAI `stop`, Anthropic `end_turn`/`stop_sequence`).
    Stop,
    /// Anthropic `pause_turn`: the provider paused a long turn of its
    /// server tools (web search); sending the response back continues it.
    /// [`crate::anthropic::ContinuePaused`] does, within one stream, so a
    /// caller sees this only past its limit of continuations.
    Paused,
    /// The output token limit was reached; the text or the last tool call's
    /// arguments may be cut off.
    Length,
    /// The model wants tool results. Some OpenAI-compatible servers report
    /// `stop` even with tool calls: callers decide on the calls themselves.
    ToolCalls,
    /// The provider's content filter stopped the response.
    ContentFilter,
    /// A reason this crate does not know, as the provider spelled it.
    Other(String),
}

impl FinishReason {
    /// Maps an OpenAI `finish_reason` (or any other provider's spelling that
    /// coincides) to a reason; unknown spellings become [`FinishReason::Other`].
    pub fn from_openai(reason: &str) -> Self {
        match reason {
            "stop" => FinishReason::Stop,
            "length" => FinishReason::Length,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }

    /// Maps an Anthropic `stop_reason`; unknown spellings become
    /// [`FinishReason::Other`].
    pub fn from_anthropic(reason: &str) -> Self {
        match reason {
            "end_turn" | "stop_sequence" => FinishReason::Stop,
            "pause_turn" => FinishReason::Paused,
            "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
            "tool_use" => FinishReason::ToolCalls,
            "refusal" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

/// Token usage of one model response (API.md `Usage`), in tokens: the one
/// definition in `chatd-core`, which the store and the HTTP layer use too.
pub use chatd_core::Usage;
