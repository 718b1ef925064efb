//! What the worker asks a provider for: model, options, tools and the
//! conversation so far.
//!
//! The worker builds [`RequestMessage`]s from the chat's active history
//! (spec "Generation goroutine": latest compaction boundary onward, soft-deleted
//! rows excluded). Each adapter projects them onto its wire format without
//! changing the history itself (spec `durable-agent-loop.md` "Provider
//! compatibility": projection only).

use std::collections::BTreeMap;
use std::sync::Arc;

use chatd_core::{ChatRole, MessagePart};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

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
    /// Provider-hosted tools to pass to the provider (the model config's
    /// `options.provider_tools`: `web_search`); the provider runs them.
    /// Empty for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_tools: Vec<String>,
    /// The bytes of the files the messages' file parts refer to, by file
    /// id, as far as [`crate::projection::file_bytes_wanted`] asks for them
    /// (API.md "Files": images are sent as image input, text inline, other
    /// files and files missing here as a placeholder). Not serialized.
    #[serde(skip)]
    pub files: BTreeMap<Uuid, AttachedFile>,
}

/// A file attached to the conversation, with (a prefix of) its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedFile {
    /// File name.
    pub name: String,
    /// Media type essence (`image/png`).
    pub media_type: String,
    /// Size of the whole file, in bytes.
    pub size: u64,
    /// Its first bytes (all of them for images; at most
    /// [`crate::projection::MAX_INLINE_TEXT_BYTES`] for text).
    pub data: Arc<[u8]>,
}

impl ModelRequest {
    /// Whether [`ModelRequest::provider_tools`] lists `tool`.
    pub fn provider_tool(&self, tool: &str) -> bool {
        self.provider_tools.iter().any(|t| t == tool)
    }

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
