//! How the client decodes the server's JSON: the events of the chat
//! stream (API.md "Stream (WebSocket)") and the objects in them, as the
//! CLI reads them (unknown event and part types decode as `Unknown` and are
//! ignored).

use serde::Deserialize;
use serde_json::Value;

/// One event of the chat stream, as the CLI reads it (a subset of the
/// server's `ChatStreamEvent`; unknown types decode as [`StreamEvent::Unknown`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// A live preview part of the message being generated.
    MessagePart {
        /// The part and its position in its episode.
        message_part: LivePart,
    },
    /// A committed message (re-sent when its revision advances).
    Message {
        /// The message.
        message: Message,
    },
    /// The chat's status changed.
    Status {
        /// The new status.
        status: StatusPayload,
    },
    /// The chat's persisted error.
    Error {
        /// The error.
        error: ChatError,
    },
    /// The whole queue, in order.
    QueueUpdate {
        /// Queued messages, head first.
        queued_messages: Vec<QueuedMessage>,
    },
    /// The worker waits for client-side tool results.
    ActionRequired {
        /// The pending calls.
        action_required: ActionRequired,
    },
    /// The worker waits before retrying a failed generation attempt.
    Retry {
        /// The retry.
        retry: Retry,
    },
    /// The size of the model context (on connect and when it changes).
    Context {
        /// `Chat.context`.
        context: ContextInfo,
    },
    /// Drop the in-progress preview.
    PreviewReset,
    /// Drop cached messages; every current message follows.
    HistoryReset,
    /// An event type this client does not know; ignored.
    #[serde(other)]
    Unknown,
}

/// `Chat.context` (API.md "Context management"), as the CLI prints it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct ContextInfo {
    /// Tokens the next model call would send.
    pub tokens: i64,
    /// The model's window, in tokens.
    pub limit: i64,
    /// `tokens` as a percentage of `limit`.
    pub percent: i64,
    /// Whether `tokens` is (partly) an estimate.
    #[serde(default)]
    pub estimated: bool,
    /// Summaries in the active history.
    #[serde(default)]
    pub compactions: i64,
}

impl ContextInfo {
    /// `context: 1234 of 8192 tokens (15%), 2 compactions` (`about` before
    /// an estimate).
    pub fn describe(&self) -> String {
        let about = if self.estimated { "about " } else { "" };
        let compactions = match self.compactions {
            0 => String::new(),
            1 => ", 1 compaction".to_owned(),
            n => format!(", {n} compactions"),
        };
        format!(
            "context: {about}{} of {} tokens ({}%){compactions}",
            self.tokens, self.limit, self.percent
        )
    }
}

/// Payload of `message_part`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LivePart {
    /// Role of the message being previewed.
    pub role: String,
    /// The delta.
    pub part: Part,
    /// History version of the episode.
    pub history_version: i64,
    /// Generation attempt of the episode.
    pub generation_attempt: i64,
    /// Position in the episode, from 1.
    pub seq: u64,
}

/// A message part, committed (`ChatMessagePart`) or live (a delta).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type")]
pub enum Part {
    /// Text (a delta when live).
    #[serde(rename = "text")]
    Text {
        /// The text.
        text: String,
    },
    /// Reasoning text (a delta when live).
    #[serde(rename = "reasoning")]
    Reasoning {
        /// The text.
        text: String,
    },
    /// A tool call: `args` when committed, `args_delta` when live.
    #[serde(rename = "tool-call")]
    ToolCall {
        /// The provider's id.
        #[serde(default)]
        tool_call_id: String,
        /// The tool's name.
        #[serde(default)]
        tool_name: String,
        /// JSON arguments as a string (committed).
        #[serde(default)]
        args: Option<String>,
        /// A piece of the arguments (live).
        #[serde(default)]
        args_delta: Option<String>,
    },
    /// A tool's result.
    #[serde(rename = "tool-result")]
    ToolResult {
        /// The call it answers.
        #[serde(default)]
        tool_call_id: String,
        /// The tool's name.
        #[serde(default)]
        tool_name: String,
        /// Any JSON.
        #[serde(default)]
        result: Value,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// An attached file.
    #[serde(rename = "file")]
    File {
        /// The file's id.
        #[serde(default)]
        file_id: String,
        /// Its media type.
        #[serde(default)]
        media_type: String,
        /// Its name, if known.
        #[serde(default)]
        name: Option<String>,
    },
    /// A person's approval of a tool call (API.md "Tool approval").
    #[serde(rename = "tool-approval")]
    ToolApproval {
        /// The call approved.
        #[serde(default)]
        tool_call_id: String,
        /// The tool's name.
        #[serde(default)]
        tool_name: String,
        /// The decision.
        #[serde(default)]
        approved: bool,
        /// The reason given, if any.
        #[serde(default)]
        reason: Option<String>,
    },
    /// A part type this client does not know; ignored.
    #[serde(other)]
    Unknown,
}

/// A committed `ChatMessage` (the fields the CLI uses).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Message {
    /// Message id (positive).
    pub id: i64,
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The parts.
    #[serde(default)]
    pub content: Vec<Part>,
    /// Advances when the message is rewritten.
    #[serde(default)]
    pub revision: i64,
    /// The queued message this user message was promoted from.
    #[serde(default)]
    pub queued_message_id: Option<i64>,
    /// Why an assistant message ended (`stop`, `length`, `tool_calls`,
    /// `content_filter`, `interrupted`; `None` when unknown).
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// Payload of `status`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StatusPayload {
    /// `waiting`, `running`, `interrupting`, `requires_action` or `error`.
    pub status: String,
    /// The chat's history version.
    #[serde(default)]
    pub history_version: i64,
}

/// A `ChatError`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChatError {
    /// What went wrong.
    #[serde(default)]
    pub message: String,
    /// More about it.
    #[serde(default)]
    pub detail: Option<String>,
    /// `generic`, `rate_limit`, ...
    #[serde(default)]
    pub kind: Option<String>,
    /// Whether the worker retries it.
    #[serde(default)]
    pub retryable: bool,
}

impl ChatError {
    /// `MESSAGE: DETAIL (KIND)`, for standard error.
    pub fn describe(&self) -> String {
        let mut text = if self.message.is_empty() {
            "unknown error".to_owned()
        } else {
            self.message.clone()
        };
        if let Some(detail) = self.detail.as_deref().filter(|d| !d.is_empty()) {
            text.push_str(": ");
            text.push_str(detail);
        }
        if let Some(kind) = self.kind.as_deref() {
            text.push_str(&format!(" ({kind})"));
        }
        text
    }
}

/// A `ChatQueuedMessage` (the fields the CLI uses).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct QueuedMessage {
    /// Queued message id.
    pub id: i64,
}

/// Payload of `action_required`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ActionRequired {
    /// The calls waiting for results.
    #[serde(default)]
    pub tool_calls: Vec<PendingToolCall>,
    /// When the worker cancels them.
    #[serde(default)]
    pub deadline_at: Option<String>,
}

/// A tool call waiting for a client-side result or a decision.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PendingToolCall {
    /// The provider's id.
    pub tool_call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// `client_tool` (answer with output) or `approval` (approve or deny);
    /// `client_tool` when absent (an older server).
    #[serde(default = "client_tool")]
    pub kind: String,
    /// JSON arguments, as a string.
    #[serde(default)]
    pub args: String,
}

/// Payload of `retry`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Retry {
    /// Retry number n (1-based).
    #[serde(default)]
    pub attempt: i64,
    /// Delay before it, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// The error that caused it.
    pub error: Option<ChatError>,
}

fn client_tool() -> String {
    "client_tool".to_owned()
}
