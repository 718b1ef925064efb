//! Live preview parts (API.md "Stream", `message_part`; spec "Message part
//! buffer" and "Relay mechanism").
//!
//! A generation attempt streams [`PartDelta`]s into an episode
//! `(chat_id, history_version, generation_attempt)`; each gets a `seq`
//! starting at 1 and contiguous within the episode.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{ChatRole, Citation};

/// One streamed delta of a message part (`ChatMessagePart` with deltas:
/// text and reasoning carry the new text in `text`; a tool call streams its
/// arguments in `args_delta`; a provider-hosted tool's call and result come
/// whole; a citation belongs to the text part in progress).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum PartDelta {
    /// New text.
    #[serde(rename = "text")]
    Text {
        /// The delta.
        text: String,
    },
    /// New reasoning text.
    #[serde(rename = "reasoning")]
    Reasoning {
        /// The delta.
        text: String,
    },
    /// A tool call's id and name (first delta) and a piece of its JSON
    /// arguments.
    #[serde(rename = "tool-call")]
    ToolCall {
        /// The provider's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The next piece of the arguments string.
        args_delta: String,
    },
    /// A tool's result, streamed once it is known.
    #[serde(rename = "tool-result")]
    ToolResult {
        /// The call it answers.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// Any JSON.
        result: Value,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// A provider-hosted tool's call ([`crate::MessagePart::ProviderToolCall`]),
    /// streamed whole once its input is complete.
    #[serde(rename = "provider-tool-call")]
    ProviderToolCall {
        /// The provider's id.
        tool_call_id: String,
        /// The provider's tool name (`web_search`).
        tool_name: String,
        /// The call's input (`{"query": ...}`).
        input: Value,
    },
    /// A provider-hosted tool's result
    /// ([`crate::MessagePart::ProviderToolResult`]), streamed whole.
    #[serde(rename = "provider-tool-result")]
    ProviderToolResult {
        /// The call it answers.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The provider's result, unchanged.
        result: Value,
        /// Whether the provider reported an error.
        #[serde(default)]
        is_error: bool,
    },
    /// A source cited by the text part in progress (the text deltas after
    /// the latest provider-tool part): `{type: "citation", url, title?,
    /// cited_text?}`.
    #[serde(rename = "citation")]
    Citation(Citation),
}

/// The identity of a generation attempt's stream: parts of different
/// episodes never mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Episode {
    /// The chat.
    pub chat_id: uuid::Uuid,
    /// The history version the attempt generates for.
    pub history_version: i64,
    /// The attempt (≥ 1 for real episodes).
    pub generation_attempt: i64,
}

/// A buffered part: its delta, the role of the message it previews, and its
/// position in the episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamPart {
    /// 1-based, contiguous within the episode.
    pub seq: u64,
    /// Role of the message being previewed (assistant or tool).
    pub role: ChatRole,
    /// The delta.
    pub part: PartDelta,
}
