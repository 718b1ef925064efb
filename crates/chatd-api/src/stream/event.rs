//! `ChatStreamEvent`: the events of the live stream (API.md "Stream
//! (WebSocket)", the `ChatStreamEvent` table; spec "Client-visible stream
//! events").
//!
//! Every event is `{type, chat_id, <payload field>}` with exactly one payload
//! field per type (none for `preview_reset` and `history_reset`). Committed
//! objects use the same shapes as the REST routes ([`crate::objects`]).

use chatd_core::{ChatError, ChatRole, PartDelta, RetryState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::objects::{ChatContext, ChatMessage, ChatQueuedMessage, ChatStatus};

/// One event of the live stream.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatStreamEvent {
    /// The chat the event is about.
    pub chat_id: Uuid,
    /// `type` and the payload field.
    #[serde(flatten)]
    pub payload: StreamPayload,
}

impl ChatStreamEvent {
    /// An event of chat `chat_id`.
    pub fn new(chat_id: Uuid, payload: StreamPayload) -> Self {
        Self { chat_id, payload }
    }

    /// The `type` field (`message_part`, `message`, ...), also the SSE
    /// `event:` name.
    pub fn kind(&self) -> &'static str {
        self.payload.kind()
    }
}

/// The `type` of an event and its payload field.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamPayload {
    /// A live preview part relayed from the owning worker.
    MessagePart {
        /// The part and its position in its episode.
        message_part: MessagePartPayload,
    },
    /// A committed message (re-sent when its `revision` advances).
    Message {
        /// The message, as `GET /chats/{chat}/messages` renders it.
        message: Box<ChatMessage>,
    },
    /// The chat's status changed.
    Status {
        /// The new status and the history version it applies to.
        status: StatusPayload,
    },
    /// The chat's persisted error (`chats.last_error`).
    Error {
        /// The error.
        error: ChatError,
    },
    /// The whole queue, in order.
    QueueUpdate {
        /// Queued messages, head first.
        queued_messages: Vec<ChatQueuedMessage>,
    },
    /// The worker waits for client-side tool results.
    ActionRequired {
        /// The pending calls and their deadline.
        action_required: ActionRequired,
    },
    /// The worker waits before retrying a failed generation attempt.
    Retry {
        /// `{attempt, delay_ms, error: ChatError, retrying_at}`.
        retry: RetryState,
    },
    /// The size of the model context changed (and on connect).
    Context {
        /// `Chat.context`.
        context: ChatContext,
    },
    /// Drop the in-progress preview built from `message_part`s.
    PreviewReset,
    /// Drop cached messages: every current message follows as `message`.
    HistoryReset,
}

impl StreamPayload {
    /// The `type` field.
    pub fn kind(&self) -> &'static str {
        match self {
            StreamPayload::MessagePart { .. } => "message_part",
            StreamPayload::Message { .. } => "message",
            StreamPayload::Status { .. } => "status",
            StreamPayload::Error { .. } => "error",
            StreamPayload::QueueUpdate { .. } => "queue_update",
            StreamPayload::ActionRequired { .. } => "action_required",
            StreamPayload::Retry { .. } => "retry",
            StreamPayload::Context { .. } => "context",
            StreamPayload::PreviewReset => "preview_reset",
            StreamPayload::HistoryReset => "history_reset",
        }
    }
}

/// Payload of `message_part`: one delta of the message being generated in
/// episode `(history_version, generation_attempt)`; `seq` starts at 1 and is
/// contiguous within the episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MessagePartPayload {
    /// Role of the message being previewed.
    pub role: ChatRole,
    /// The delta: `text`/`reasoning` carry the new text in `text`; a tool
    /// call streams as `{type: "tool-call", tool_call_id, tool_name,
    /// args_delta}`; a provider-hosted tool's `provider-tool-call` and
    /// `provider-tool-result` come whole; `{type: "citation", url, title?,
    /// cited_text?}` belongs to the text part in progress.
    #[schema(value_type = Object)]
    pub part: PartDelta,
    /// History version of the episode.
    pub history_version: i64,
    /// Generation attempt of the episode (≥ 1).
    pub generation_attempt: i64,
    /// Position in the episode, from 1.
    pub seq: u64,
}

/// Payload of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatusPayload {
    /// The chat's status.
    pub status: ChatStatus,
    /// The chat's history version when it was read.
    pub history_version: i64,
}

/// Payload of `action_required`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ActionRequired {
    /// The tool calls waiting for results, in the order they were made.
    pub tool_calls: Vec<PendingToolCall>,
    /// When the worker cancels them (database time).
    pub deadline_at: Option<DateTime<Utc>>,
}

/// A tool call waiting for the client: a client tool's result or a
/// decision on a call that needs approval (API.md "Tool approval (human in
/// the loop)").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct PendingToolCall {
    /// The provider's id.
    pub tool_call_id: String,
    /// The tool's name (`<slug>__<tool>` for an MCP tool).
    pub tool_name: String,
    /// JSON arguments, as a string.
    pub args: String,
    /// `client_tool`: submit `output`; `approval`: submit `approved`.
    pub kind: chatd_core::ActionKind,
}

/// Control message of the parts endpoint: select an episode (spec "Parts
/// endpoint").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EpisodeSelection {
    /// History version of the episode.
    pub history_version: i64,
    /// Generation attempt of the episode.
    pub generation_attempt: i64,
}

/// A `message_part` event as the parts endpoint sends it, for decoding on
/// the relay side.
#[derive(Debug, Clone, Deserialize)]
pub struct RelayedPartEvent {
    /// Must be `message_part`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The chat.
    pub chat_id: Uuid,
    /// The part.
    pub message_part: MessagePartPayload,
}

/// Serialises `events` as one frame: a JSON array.
pub fn frame(events: &[ChatStreamEvent]) -> String {
    serde_json::to_string(events).expect("stream events serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_have_type_chat_id_and_one_payload_field() {
        let chat = Uuid::from_u128(1);
        let part = ChatStreamEvent::new(
            chat,
            StreamPayload::MessagePart {
                message_part: MessagePartPayload {
                    role: ChatRole::Assistant,
                    part: PartDelta::ToolCall {
                        tool_call_id: "c".into(),
                        tool_name: "t".into(),
                        args_delta: "{\"a".into(),
                    },
                    history_version: 3,
                    generation_attempt: 1,
                    seq: 2,
                },
            },
        );
        assert_eq!(
            serde_json::to_value(&part).unwrap(),
            json!({"type": "message_part", "chat_id": chat, "message_part": {
                "role": "assistant",
                "part": {"type": "tool-call", "tool_call_id": "c", "tool_name": "t", "args_delta": "{\"a"},
                "history_version": 3, "generation_attempt": 1, "seq": 2}})
        );
        assert_eq!(
            serde_json::to_value(ChatStreamEvent::new(chat, StreamPayload::PreviewReset)).unwrap(),
            json!({"type": "preview_reset", "chat_id": chat})
        );
        assert_eq!(
            serde_json::to_value(ChatStreamEvent::new(
                chat,
                StreamPayload::QueueUpdate {
                    queued_messages: vec![]
                }
            ))
            .unwrap(),
            json!({"type": "queue_update", "chat_id": chat, "queued_messages": []})
        );
        let decoded: RelayedPartEvent =
            serde_json::from_value(serde_json::to_value(&part).unwrap()).unwrap();
        assert_eq!(decoded.message_part.seq, 2);
    }
}
