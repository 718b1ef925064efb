//! One turn of a chat as the compatible protocols read it (API.md
//! "Compatible protocols": "a response is one turn of a chat").
//!
//! A turn starts at a message (the user message a response or a transport
//! request sent, or, for a response that answered function calls, the
//! assistant message whose calls it answered) and follows the tree down
//! from there: at each step the oldest child (a later regenerate or edit
//! makes younger siblings, which are other turns), through assistant and
//! tool rows, until a user message (the next turn) or the first message of
//! a later continuation. Model-only rows (a compaction summary, a user row
//! the model alone sees) are walked through and never shown.
//!
//! [`Turn::status`] derives where the turn is from the chat row: nothing of
//! it is stored.

use std::collections::HashMap;

use chatd_core::FinishReason;
use chatd_core::{ChatRole, ChatStatus, MessagePart, Visibility};
use chatd_store::{Chat, ChatMessage, Store};

use crate::error::ApiResult;

/// Most rows read to follow one turn (a turn of `--max-steps-per-turn`
/// steps has at most a few hundred).
const MAX_TURN_ROWS: i64 = 4_000;

/// The messages of one turn, in order, and whether it is the chat's
/// current one.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    /// Client-visible rows after the start, in tree order.
    pub messages: Vec<ChatMessage>,
    /// The turn ends the chat's active branch: the chat's status is its
    /// status.
    pub current: bool,
    /// The turn never started: its queued message was removed (a cancel).
    pub withdrawn: bool,
}

/// Where a turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnStatus {
    /// Running (or stopping).
    InProgress,
    /// Answered; or waiting for client tool results or approvals.
    Completed,
    /// Ended by the model's output limit.
    Incomplete,
    /// Interrupted by the user.
    Cancelled,
    /// Ended in an error (the chat's `last_error`).
    Failed,
}

impl Turn {
    /// Reads the turn of chat `chat` starting at message `start_id`;
    /// `stop_at` are the first messages of later continuations (the turn
    /// ends before them).
    pub(crate) async fn read(
        store: &Store,
        chat: &Chat,
        start_id: i64,
        stop_at: &[i64],
    ) -> ApiResult<Self> {
        let rows =
            chatd_store::messages::from_id(store.pool(), chat.id, start_id, MAX_TURN_ROWS).await?;
        Ok(Self::from_rows(chat, start_id, rows, stop_at))
    }

    /// [`Turn::read`] from rows already read (`rows`: the chat's rows with
    /// `id >= start_id`, in id order).
    pub(crate) fn from_rows(
        chat: &Chat,
        start_id: i64,
        rows: Vec<ChatMessage>,
        stop_at: &[i64],
    ) -> Self {
        let mut children: HashMap<i64, usize> = HashMap::new();
        for (i, row) in rows.iter().enumerate() {
            if let Some(parent) = row.parent_id {
                // Rows are in id order: the first seen is the oldest child.
                children.entry(parent).or_insert(i);
            }
        }
        let mut messages = Vec::new();
        let mut current_id = start_id;
        let mut last_id = start_id;
        while let Some(&i) = children.get(&current_id) {
            let row = &rows[i];
            // The next turn's message; a compaction summary is a model-only
            // user row inside this turn.
            if row.role == ChatRole::User && row.visibility != Visibility::Model {
                break;
            }
            current_id = row.id;
            last_id = row.id;
            if row.visibility != Visibility::Model && row.role != ChatRole::System {
                messages.push(row.clone());
            }
            if stop_at.contains(&row.id) {
                break;
            }
        }
        let current = chat.active_leaf_id == Some(last_id)
            || (chat.active_leaf_id.is_none() && last_id == start_id);
        Self {
            messages,
            current,
            withdrawn: false,
        }
    }

    /// The turn of a send whose queued message was removed before it ran.
    pub(crate) fn withdrawn() -> Self {
        Self {
            messages: Vec::new(),
            current: false,
            withdrawn: true,
        }
    }

    /// The last assistant message of the turn.
    pub(crate) fn last_answer(&self) -> Option<&ChatMessage> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == ChatRole::Assistant)
    }

    /// Where the turn is: the chat's status when it is the current turn,
    /// else how its last answer ended.
    pub(crate) fn status(&self, chat: &Chat) -> TurnStatus {
        if self.withdrawn {
            return TurnStatus::Cancelled;
        }
        if self.current {
            match chat.status {
                ChatStatus::Running | ChatStatus::Interrupting => return TurnStatus::InProgress,
                ChatStatus::Error => return TurnStatus::Failed,
                ChatStatus::RequiresAction => return TurnStatus::Completed,
                _ => {}
            }
        }
        match self.last_answer().and_then(|m| m.finish_reason) {
            Some(FinishReason::Interrupted) => TurnStatus::Cancelled,
            Some(FinishReason::Length) => TurnStatus::Incomplete,
            _ if self.last_answer().is_none() && !self.current => TurnStatus::Failed,
            _ => TurnStatus::Completed,
        }
    }

    /// The usage of the turn's model calls: `(input, output, reasoning,
    /// cached input)` tokens.
    pub(crate) fn usage(&self) -> (i64, i64, i64, i64) {
        self.messages
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .fold((0, 0, 0, 0), |acc, m| {
                (
                    acc.0 + m.input_tokens.unwrap_or(0),
                    acc.1 + m.output_tokens.unwrap_or(0),
                    acc.2 + m.reasoning_tokens.unwrap_or(0),
                    acc.3 + m.cache_read_tokens.unwrap_or(0),
                )
            })
    }

    /// The results in this turn of the calls made in it, by call id.
    pub(crate) fn results(&self) -> HashMap<&str, (&serde_json::Value, bool)> {
        self.messages
            .iter()
            .flat_map(|m| m.content.0.iter())
            .filter_map(|p| match p {
                MessagePart::ToolResult {
                    tool_call_id,
                    result,
                    is_error,
                    ..
                } => Some((tool_call_id.as_str(), (result, *is_error))),
                _ => None,
            })
            .collect()
    }
}

/// The text of a message's text parts, joined.
pub(crate) fn text_of(message: &ChatMessage) -> String {
    message
        .content
        .0
        .iter()
        .filter_map(|p| match p {
            MessagePart::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

/// The reasoning text of a message, joined.
pub(crate) fn reasoning_of(message: &ChatMessage) -> String {
    message
        .content
        .0
        .iter()
        .filter_map(|p| match p {
            MessagePart::Reasoning { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

/// The tool calls of a message: `(call id, tool name, args)`.
pub(crate) fn calls_of(message: &ChatMessage) -> Vec<(&str, &str, &str)> {
    message
        .content
        .0
        .iter()
        .filter_map(|p| match p {
            MessagePart::ToolCall {
                tool_call_id,
                tool_name,
                args,
            } => Some((tool_call_id.as_str(), tool_name.as_str(), args.as_str())),
            _ => None,
        })
        .collect()
}
