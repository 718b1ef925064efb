//! What the worker asks a provider for: model, options, tools and the
//! conversation so far.
//!
//! The worker builds [`RequestMessage`]s from the chat's active history
//! (spec "Generation goroutine": latest compaction boundary onward, soft-deleted
//! rows excluded). Each adapter projects them onto its wire format without
//! changing the history itself (spec `durable-agent-loop.md` "Provider
//! compatibility": projection only).

use chatd_core::{ChatRole, MessagePart};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One model call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The provider's model name (`gpt-4o`, `claude-sonnet-4-20250514`, ...).
    pub model: String,
    /// The conversation, oldest first.
    pub messages: Vec<RequestMessage>,
    /// Tools offered to the model; empty for none.
    pub tools: Vec<ToolSpec>,
    /// Upper bound on output tokens; `None` leaves the provider's default.
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature; `None` leaves the provider's default.
    pub temperature: Option<f32>,
    /// Reasoning effort (`low`, `medium`, `high`, ...), already resolved and
    /// clamped for the model by the caller; `None` sends nothing.
    pub reasoning_effort: Option<String>,
}

impl ModelRequest {
    /// [`ModelRequest::temperature`] as a JSON number, via its shortest
    /// decimal form so that 0.7f32 is sent as 0.7 and not as
    /// 0.699999988079071.
    pub(crate) fn wire_temperature(&self) -> Option<Value> {
        self.temperature.map(|temperature| {
            let temperature = temperature
                .to_string()
                .parse::<f64>()
                .unwrap_or(f64::from(temperature));
            Value::from(temperature)
        })
    }
}

/// One message of the conversation, with the parts stored in
/// `chat_messages.content`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestMessage {
    /// Who said it.
    pub role: ChatRole,
    /// What was said, in order.
    pub parts: Vec<MessagePart>,
}

impl RequestMessage {
    /// A message with a single text part.
    pub fn text(role: ChatRole, text: impl Into<String>) -> Self {
        RequestMessage {
            role,
            parts: vec![MessagePart::text(text)],
        }
    }
}

/// A tool the model may call (API.md `DynamicTool` has the same shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments (an object schema).
    pub input_schema: Value,
}
