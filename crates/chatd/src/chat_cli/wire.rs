//! How the client decodes the server's JSON: the events of the chat
//! stream (API.md "Stream (WebSocket)") and the objects the subcommands
//! read.
//!
//! The shapes are the server's own: message parts are
//! [`chatd_core::MessagePart`], live deltas [`chatd_api`]'s
//! `MessagePartPayload` (a [`chatd_core::PartDelta`]), errors
//! [`chatd_core::ChatError`], retries [`chatd_core::RetryState`], statuses,
//! roles, finish reasons and pending-call kinds the enums of `chatd_core`,
//! the `status` payload and `Chat.context` those of [`chatd_api`]. What is
//! left here are the envelopes that read only what the client prints and
//! decode leniently, so that one unknown thing does not hide the rest:
//! - [`StreamEvent`]: an event type the client does not know decodes as
//!   [`StreamEvent::Unknown`] and is ignored;
//! - [`Message`]: the parts of a message that the client does not know
//!   (a part type newer than the client) are left out, the others shown;
//! - [`PendingToolCall`]: without `kind` (an older server) it waits for a
//!   client tool's output;
//! - [`ActionRequired::deadline_at`] is printed as the server wrote it;
//! - [`Chat`], [`IdOnly`], [`SendResponse`] and [`MessageTree`]: only the
//!   fields the client prints (a stand-in server in the tests sends no
//!   more).

use chatd_core::{
    ActionKind, ChatError, ChatRole, ChatStatus, FinishReason, MessagePart, RetryState,
};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

pub use chatd_api::objects::ChatContext;
pub use chatd_api::stream::event::{MessagePartPayload, StatusPayload};

/// One event of the chat stream (the server's `ChatStreamEvent`, which
/// carries a `chat_id` the client does not need).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// A live preview part of the message being generated.
    MessagePart {
        /// The part and its position in its episode.
        message_part: MessagePartPayload,
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
        queued_messages: Vec<IdOnly>,
    },
    /// The worker waits for client-side tool results or decisions.
    ActionRequired {
        /// The pending calls.
        action_required: ActionRequired,
    },
    /// The worker waits before retrying a failed generation attempt.
    Retry {
        /// The retry.
        retry: RetryState,
    },
    /// The size of the model context (on connect and when it changes).
    Context {
        /// `Chat.context`.
        context: ChatContext,
    },
    /// Drop the in-progress preview.
    PreviewReset,
    /// Drop cached messages; every current message follows.
    HistoryReset,
    /// An event type this client does not know; ignored.
    #[serde(other)]
    Unknown,
}

/// A committed `ChatMessage`: the fields the client prints.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Message {
    /// Message id (positive).
    pub id: i64,
    /// Its role.
    pub role: ChatRole,
    /// The parts the client knows, in order (see [`known_parts`]).
    #[serde(default, deserialize_with = "known_parts")]
    pub content: Vec<MessagePart>,
    /// Advances when the message is rewritten.
    #[serde(default)]
    pub revision: i64,
    /// The queued message this user message was promoted from.
    #[serde(default)]
    pub queued_message_id: Option<i64>,
    /// Why an assistant message ended (`None` when unknown).
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
}

/// An object of which the client reads only the id (a
/// `ChatQueuedMessage` in the queue, the message or queued message a send
/// answers with).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct IdOnly {
    /// The id.
    pub id: i64,
}

/// Payload of `action_required`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ActionRequired {
    /// The calls waiting for results or decisions.
    #[serde(default)]
    pub tool_calls: Vec<PendingToolCall>,
    /// When the worker cancels them (RFC 3339, printed as sent).
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
    /// What it waits for; [`ActionKind::ClientTool`] when absent (an older
    /// server).
    #[serde(default = "client_tool")]
    pub kind: ActionKind,
    /// JSON arguments, as a string.
    #[serde(default)]
    pub args: String,
}

fn client_tool() -> ActionKind {
    ActionKind::ClientTool
}

/// A `Chat`: the fields the client prints.
#[derive(Debug, Clone, Deserialize)]
pub struct Chat {
    /// The chat id.
    pub id: String,
    /// Its title.
    #[serde(default)]
    pub title: String,
    /// Its status.
    pub status: ChatStatus,
    /// When it last changed (RFC 3339, printed as sent).
    #[serde(default)]
    pub updated_at: String,
    /// Its persisted error, if any.
    #[serde(default)]
    pub last_error: Option<ChatError>,
    /// The size of its model context (absent from older servers).
    #[serde(default)]
    pub context: Option<ChatContext>,
    /// The newest message of its active branch (`None` with no messages,
    /// or from an older server).
    #[serde(default)]
    pub active_leaf_id: Option<i64>,
    /// The chat and message it was forked from, if any.
    #[serde(default)]
    pub forked_from: Option<ForkedFrom>,
    /// How many messages its active branch shows (`None` from an older
    /// server).
    #[serde(default)]
    pub message_count: Option<i64>,
}

/// `Chat.forked_from`: where a fork was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct ForkedFrom {
    /// The chat it was forked from.
    pub chat_id: uuid::Uuid,
    /// The last message copied.
    pub message_id: i64,
}

/// `GET /chats/{chat}/messages/tree`: every message a client may see, on
/// every branch, ascending by id.
#[derive(Debug, Clone, Deserialize)]
pub struct MessageTree {
    /// The messages.
    pub nodes: Vec<TreeNode>,
}

/// One message of [`MessageTree`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TreeNode {
    /// Message id.
    pub id: i64,
    /// The nearest message it follows that the tree shows (`None` for a
    /// first message).
    #[serde(default)]
    pub parent_id: Option<i64>,
    /// Its role.
    pub role: ChatRole,
    /// The start of its text (`None` when it has none).
    #[serde(default)]
    pub preview: Option<String>,
    /// Whether it is on the active branch.
    #[serde(default)]
    pub active: bool,
}

/// The answer of `POST /chats/{chat}/messages`: whether the message was
/// queued, and the id of the message or of the queued message.
#[derive(Debug, Clone, Deserialize)]
pub struct SendResponse {
    /// Whether the message was queued behind a busy chat.
    pub queued: bool,
    /// The committed user message, when not queued.
    #[serde(default)]
    pub message: Option<IdOnly>,
    /// The queued message, when queued.
    #[serde(default)]
    pub queued_message: Option<QueuedPosition>,
    /// Every visible row the send inserted, in id order (synthetic tool
    /// results first, then the user message).
    #[serde(default)]
    pub messages: Vec<IdOnly>,
}

/// A queued message's id and place in the queue.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct QueuedPosition {
    /// The queued message's id.
    pub id: i64,
    /// Its 0-based index in queue order (0 = next; `None` from an older
    /// server).
    #[serde(default)]
    pub position: Option<i64>,
}

/// Decodes a message's `content`, leaving out the parts that are not a
/// [`MessagePart`] this client knows (a part type added by a newer server):
/// the rest of the message is still shown.
///
/// # Errors
/// `content` is not an array.
fn known_parts<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<MessagePart>, D::Error> {
    let parts = Vec::<Value>::deserialize(deserializer)?;
    Ok(parts
        .into_iter()
        .filter_map(|part| serde_json::from_value(part).ok())
        .collect())
}

/// `MESSAGE: DETAIL (KIND)`, for standard error.
pub fn describe_error(error: &ChatError) -> String {
    let mut text = if error.message.is_empty() {
        "unknown error".to_owned()
    } else {
        error.message.clone()
    };
    if let Some(detail) = error.detail.as_deref().filter(|d| !d.is_empty()) {
        text.push_str(": ");
        text.push_str(detail);
    }
    text.push_str(&format!(" ({})", error.kind));
    text
}

/// `context: 1234 of 8192 tokens (15%), 2 compactions` (`about` before an
/// estimate).
pub fn describe_context(context: &ChatContext) -> String {
    let about = if context.estimated { "about " } else { "" };
    let compactions = match context.compactions {
        0 => String::new(),
        1 => ", 1 compaction".to_owned(),
        n => format!(", {n} compactions"),
    };
    format!(
        "context: {about}{} of {} tokens ({}%){compactions}",
        context.tokens, context.limit, context.percent
    )
}
