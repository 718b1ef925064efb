//! Wire types shared by several resources (API.md "Objects"): the input
//! parts of a message (`ChatInputPart`), `PlanMode`, `ChatMessage` and
//! `ChatQueuedMessage` (served by the message, queue and stream routes
//! alike), and the enums they use. `Chat` lives with its routes in
//! [`crate::chats`]. Field names and shapes follow API.md exactly;
//! conversions from the store's rows live next to each type so that every
//! route renders the same shape. `ChatStatus`,
//! `ChatRole`, `BusyBehavior`, `FinishReason`, `ChatError`, `DynamicTool`, `Usage`,
//! `ReasoningEffort` and the message parts (`ChatMessagePart`) are the
//! shapes of `chatd_core`, served as they are.

use chatd_core::MessagePart;
pub use chatd_core::{
    BusyBehavior, ChatError, ChatErrorKind, ChatRole, ChatStatus, DynamicTool, FinishReason,
    ReasoningEffort, Usage,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// `Chat.plan_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanMode {
    /// The agent plans instead of acting.
    Plan,
}

impl PlanMode {
    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        "plan"
    }
}

/// `ChatInputPart`: a part of a message in a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", try_from = "InputPartRepr")]
pub enum ChatInputPart {
    /// Plain text.
    #[serde(rename = "text")]
    Text {
        /// The text (counts towards the 256 KiB per message).
        text: String,
    },
    /// A reference to an uploaded file (`POST /api/v2/files`), linked to the
    /// chat by the message (`LinkFiles`: at most 20 per chat; a missing
    /// file, another user's, or one linked to another chat answers `400`).
    #[serde(rename = "file")]
    File {
        /// The file's id.
        file_id: Uuid,
    },
}

/// The accepted encoding of a [`ChatInputPart`]: a JSON object (never the
/// array form serde's tagged enums would also take) with a known `type` and
/// only that type's fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputPartRepr {
    #[serde(rename = "type")]
    kind: InputPartKind,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    file_id: Option<Uuid>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum InputPartKind {
    Text,
    File,
}

impl TryFrom<InputPartRepr> for ChatInputPart {
    type Error = String;

    fn try_from(repr: InputPartRepr) -> Result<Self, String> {
        match (repr.kind, repr.text, repr.file_id) {
            (InputPartKind::Text, Some(text), None) => Ok(ChatInputPart::Text { text }),
            (InputPartKind::Text, None, _) => Err("missing field `text`".into()),
            (InputPartKind::Text, Some(_), Some(_)) => {
                Err("unknown field `file_id` in a text part".into())
            }
            (InputPartKind::File, None, Some(file_id)) => Ok(ChatInputPart::File { file_id }),
            (InputPartKind::File, _, None) => Err("missing field `file_id`".into()),
            (InputPartKind::File, Some(_), Some(_)) => {
                Err("unknown field `text` in a file part".into())
            }
        }
    }
}

/// `ChatMessage`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatMessage {
    /// Message id (ascending in insertion order).
    pub id: i64,
    /// Chat id.
    pub chat_id: Uuid,
    /// Role.
    pub role: ChatRole,
    /// Parts.
    pub content: Vec<MessagePart>,
    /// Insertion time.
    pub created_at: DateTime<Utc>,
    /// The message this one follows in the chat's tree (API.md "Branches,
    /// regenerate and fork"): the nearest earlier client-visible message of
    /// its branch (model-only rows such as a compaction summary are not in
    /// the tree clients see); `null` for the first.
    pub parent_id: Option<i64>,
    /// The client-visible messages with the same parent, this one included,
    /// ascending; `[]` when it has no siblings. More than one: an edit or a
    /// regenerate made other versions (`POST .../branches/activate` with one
    /// of them switches to its branch).
    pub sibling_ids: Vec<i64>,
    /// Author of a user message.
    pub created_by: Option<Uuid>,
    /// Model config.
    pub model_config_id: Option<Uuid>,
    /// Snapshot version that last inserted or changed the row.
    pub revision: i64,
    /// The queued message this was promoted from.
    pub queued_message_id: Option<i64>,
    /// Token usage of an assistant message.
    pub usage: Option<Usage>,
    /// Cost in micro-dollars.
    pub total_cost_micros: Option<i64>,
    /// Generation time in milliseconds.
    pub runtime_ms: Option<i64>,
    /// Why an assistant message ended: `stop` (complete), `length` (cut off
    /// at the output token limit or the context window), `tool_calls`,
    /// `content_filter` (withheld by the provider) or `interrupted` (the
    /// user interrupted it; the text is what was generated until then).
    /// `null` when unknown and on every other role.
    pub finish_reason: Option<FinishReason>,
}

impl From<&chatd_store::ChatMessage> for ChatMessage {
    fn from(m: &chatd_store::ChatMessage) -> Self {
        ChatMessage {
            id: m.id,
            chat_id: m.chat_id,
            role: m.role,
            content: m.content.0.clone(),
            created_at: m.created_at,
            parent_id: m.visible_parent_id,
            sibling_ids: m.sibling_ids.clone(),
            created_by: m.created_by,
            model_config_id: m.model_config_id,
            revision: m.revision,
            queued_message_id: m.queued_message_id,
            usage: m.usage(),
            total_cost_micros: m.total_cost_micros,
            runtime_ms: m.runtime_ms,
            finish_reason: m.finish_reason,
        }
    }
}

/// Whether a stored message may be shown to clients: not soft-deleted and
/// not model-only.
pub fn client_visible(m: &chatd_store::ChatMessage) -> bool {
    !m.deleted && m.visibility.client_visible()
}

/// The client-visible rows of `rows`, in id order.
pub fn visible_messages<'a>(
    rows: impl IntoIterator<Item = &'a chatd_store::ChatMessage>,
) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = rows
        .into_iter()
        .filter(|m| client_visible(m))
        .map(ChatMessage::from)
        .collect();
    out.sort_by_key(|m| m.id);
    out
}

/// `ChatQueuedMessage` (API.md "Objects", "Busy behaviours and the queue").
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatQueuedMessage {
    /// Queued message id.
    pub id: i64,
    /// Chat id.
    pub chat_id: Uuid,
    /// Parts.
    pub content: Vec<MessagePart>,
    /// Queue time.
    pub created_at: DateTime<Utc>,
    /// Who queued it.
    pub created_by: Option<Uuid>,
    /// Model config requested with it.
    pub model_config_id: Option<Uuid>,
    /// Sent with `busy_behavior: "steer"` while the chat ran: it enters
    /// history at the next step boundary of the running turn.
    pub steer: bool,
    /// 0-based index in queue order (0 = next).
    pub position: i64,
}

impl ChatQueuedMessage {
    /// The object of row `q` at 0-based queue index `position`.
    pub fn at(position: i64, q: &chatd_store::QueuedMessage) -> Self {
        ChatQueuedMessage {
            id: q.id,
            chat_id: q.chat_id,
            content: q.content.0.clone(),
            created_at: q.created_at,
            created_by: q.created_by,
            model_config_id: q.model_config_id,
            steer: q.steer,
            position,
        }
    }

    /// The objects of a whole queue, `rows` head first.
    pub fn list(rows: &[chatd_store::QueuedMessage]) -> Vec<Self> {
        rows.iter()
            .zip(0..)
            .map(|(q, position)| Self::at(position, q))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_json;

    #[test]
    fn input_parts_reject_unknown_fields_and_types() {
        let ok: Vec<ChatInputPart> = parse_json(br#"[{"type": "text", "text": "x"}]"#).unwrap();
        assert_eq!(ok, vec![ChatInputPart::Text { text: "x".into() }]);
        for bad in [
            r#"[{"type": "text", "text": "x", "extra": 1}]"#,
            r#"[{"type": "image"}]"#,
            r#"[{"text": "x"}]"#,
            r#"[["text", "x"]]"#,
        ] {
            let err = parse_json::<Vec<ChatInputPart>>(bad.as_bytes()).expect_err(bad);
            assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST, "{bad}");
            assert!(
                err.body().validations[0].field.starts_with("[0]"),
                "{bad}: {:?}",
                err.body()
            );
        }
    }

    #[test]
    fn chat_errors_serialize_without_absent_fields() {
        let e = ChatError {
            message: "m".into(),
            detail: None,
            kind: ChatErrorKind::InvalidState,
            provider: None,
            retryable: false,
            status_code: None,
        };
        assert_eq!(
            serde_json::to_value(e).unwrap(),
            serde_json::json!({"message": "m", "kind": "invalid_state", "retryable": false})
        );
    }
}

/// `Chat.context` and the payload of the stream's `context` event (API.md
/// "Context management (compaction, context accounting)").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatContext {
    /// Tokens the next model call would send: the provider's reported
    /// input plus output tokens of the last call when known, else an
    /// estimate.
    pub tokens: i64,
    /// The model's context window, in tokens (0 when no model is
    /// configured).
    pub limit: i64,
    /// `tokens` as a percentage of `limit`, rounded down (0 when `limit` is
    /// 0; above 100 when the history no longer fits).
    pub percent: i64,
    /// Some of `tokens` is an estimate.
    pub estimated: bool,
    /// Summaries in the active history.
    pub compactions: i64,
    /// The last message the newest summary covers.
    pub compacted_through_message_id: Option<i64>,
}

impl From<&chatd_store::Chat> for ChatContext {
    fn from(c: &chatd_store::Chat) -> Self {
        let tokens = c.context_tokens.unwrap_or(0);
        let limit = c.context_limit.unwrap_or(0);
        ChatContext {
            tokens,
            limit,
            percent: if limit > 0 { tokens * 100 / limit } else { 0 },
            estimated: c.context_tokens.is_none() || c.context_estimated,
            compactions: i64::from(c.compactions),
            compacted_through_message_id: c.compacted_through_message_id,
        }
    }
}
