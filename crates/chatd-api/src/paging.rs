//! Cutting message pages by count and by size, and the message window
//! (API.md "Message windows and paging by size"; `spec/durable-agent-loop.md`
//! "UI retrieval and updates").
//!
//! Sizes: the size of a message is the length in bytes of its JSON
//! serialization exactly as the route returns it (the [`ChatMessage`]
//! object, compact, UTF-8); a page's size is the sum of its messages' sizes
//! (the envelope, `queued_messages` and `has_more` are not counted).
//!
//! Tool-call groups: a message and the `tool` messages right after it form
//! one group (an assistant message with tool calls and its results; the
//! synthetic cancellation results included). A page is cut only between
//! groups, by count (`limit`) and by size (`max_bytes`) alike, so a client
//! never holds a tool call without its results or results without their
//! call. Two rules keep pages non-empty: when the first group of a page is
//! larger than `max_bytes`, the page is that whole group; when it has more
//! messages than `limit` (more than 200 parallel tool results), the page is
//! its first `limit` messages, the only case where a group is split.
//!
//! The window (`window=true`): a head of the first
//! [`WINDOW_HEAD_MESSAGES`] visible messages within [`WINDOW_HEAD_BYTES`],
//! and a tail of the last [`WINDOW_TAIL_MESSAGES`] within
//! [`WINDOW_TAIL_BYTES`], each cut by the same rules. The pure functions are
//! here; the route is [`crate::messages::list_messages`].

use crate::objects::ChatMessage;
use chatd_core::ChatRole;
use serde::Serialize;
use utoipa::ToSchema;

/// Default `max_bytes` of `GET .../messages`: 512 KiB.
pub const DEFAULT_MAX_BYTES: i64 = 512 * 1024;
/// Largest accepted `max_bytes`: 4 MiB.
pub const MAX_MAX_BYTES: i64 = 4 * 1024 * 1024;
/// Messages in the head of a window.
pub const WINDOW_HEAD_MESSAGES: i64 = 20;
/// Bytes of the head of a window: 128 KiB.
pub const WINDOW_HEAD_BYTES: i64 = 128 * 1024;
/// Messages in the tail of a window.
pub const WINDOW_TAIL_MESSAGES: i64 = 100;
/// Bytes of the tail of a window: 384 KiB.
pub const WINDOW_TAIL_BYTES: i64 = 384 * 1024;

/// `window` of a `window=true` page: where its head ends and its tail
/// starts, and how many visible messages lie between them.
///
/// `omitted > 0`: the messages with `head_last_id < id < tail_first_id` are
/// not in the response; page through them with `after_id=head_last_id` (or
/// `before_id=tail_first_id`). `omitted = 0`: the response holds every
/// visible message; `head_last_id` and `tail_first_id` are still the last id
/// of the head side and the first id of the tail side, which then meet or
/// overlap (`tail_first_id <= head_last_id`, or the next visible message).
/// Both are `null` only when the chat has no visible message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct MessageWindow {
    /// Id of the last message of the head (the first messages).
    pub head_last_id: Option<i64>,
    /// Id of the first message of the tail (the newest messages).
    pub tail_first_id: Option<i64>,
    /// Visible messages between the head and the tail that the response
    /// leaves out.
    pub omitted: i64,
}

/// The JSON size in bytes of `message` as the routes serve it.
pub fn message_bytes(message: &ChatMessage) -> i64 {
    serde_json::to_vec(message).map_or(0, |v| v.len() as i64)
}

/// Which way a page grows from its cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Ascending ids (`after_id`, the head of a window): the page is
    /// `rows[..n]` of rows in ascending order.
    Forward,
    /// Descending ids (no cursor, `before_id`, the tail of a window): the
    /// page is `rows[..n]` of rows in descending order.
    Backward,
}

/// How many of `rows` (in paging order, see [`Direction`]; fetched one
/// more than `limit` when the caller wants to know whether more exist) form
/// the page: at most `limit` messages and `max_bytes` bytes, cut between
/// tool-call groups, at least one group (module doc). `0` only when `rows`
/// is empty.
pub fn cut(rows: &[ChatMessage], direction: Direction, limit: usize, max_bytes: i64) -> usize {
    let limit = limit.max(1).min(rows.len());
    if limit == 0 {
        return 0;
    }
    // May the page end after its first `k` rows?
    let boundary = |k: usize| -> bool {
        if k == rows.len() {
            return true;
        }
        match direction {
            // The next row must start a group.
            Direction::Forward => rows[k].role != ChatRole::Tool,
            // The oldest row taken must start its group.
            Direction::Backward => rows[k - 1].role != ChatRole::Tool,
        }
    };
    let mut bytes = 0i64;
    let mut best = 0usize;
    let mut first_group = None;
    for k in 1..=limit {
        bytes += message_bytes(&rows[k - 1]);
        if !boundary(k) {
            continue;
        }
        if first_group.is_none() {
            first_group = Some(k);
        }
        if bytes > max_bytes {
            break;
        }
        best = k;
    }
    if best > 0 {
        best
    } else {
        first_group.unwrap_or(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatd_core::MessagePart;
    use chrono::Utc;
    use uuid::Uuid;

    fn msg(id: i64, role: ChatRole, text_len: usize) -> ChatMessage {
        ChatMessage {
            id,
            chat_id: Uuid::nil(),
            role,
            content: vec![MessagePart::text("x".repeat(text_len))],
            created_at: Utc::now(),
            parent_id: None,
            sibling_ids: vec![],
            created_by: None,
            model_config_id: None,
            revision: 1,
            queued_message_id: None,
            usage: None,
            total_cost_micros: None,
            runtime_ms: None,
            finish_reason: None,
        }
    }

    fn roles(rs: &[ChatRole]) -> Vec<ChatMessage> {
        rs.iter()
            .enumerate()
            .map(|(i, r)| msg(i as i64 + 1, *r, 10))
            .collect()
    }

    use ChatRole::{Assistant as A, Tool as T, User as U};

    #[test]
    fn cut_by_count_and_bytes_keeps_at_least_one_message() {
        let rows = roles(&[U, A, U, A, U]);
        let two = message_bytes(&rows[0]) + message_bytes(&rows[1]);
        assert_eq!(cut(&rows, Direction::Forward, 3, i64::MAX), 3);
        assert_eq!(cut(&rows, Direction::Forward, 10, two), 2);
        assert_eq!(cut(&rows, Direction::Forward, 10, two - 1), 1);
        assert_eq!(cut(&rows, Direction::Forward, 10, 1), 1, "at least one");
        assert_eq!(cut(&rows, Direction::Backward, 10, 1), 1);
        assert_eq!(cut(&[], Direction::Forward, 10, 1), 0);
    }

    #[test]
    fn cut_never_separates_a_tool_call_from_its_results() {
        // Forward: U A(call) T T U.
        let rows = roles(&[U, A, T, T, U]);
        let three: i64 = rows[..3].iter().map(message_bytes).sum();
        assert_eq!(cut(&rows, Direction::Forward, 3, i64::MAX), 1);
        assert_eq!(cut(&rows, Direction::Forward, 4, i64::MAX), 4);
        assert_eq!(cut(&rows, Direction::Forward, 10, three), 1);
        // The first group alone passes max_bytes: the whole group.
        let rows = roles(&[A, T, T, U]);
        assert_eq!(cut(&rows, Direction::Forward, 10, 1), 3);
        // Backward (newest first): T T A(call) U.
        let rows = roles(&[T, T, A, U]);
        // T T A is one group of three: with limit 2 it must split.
        assert_eq!(cut(&rows, Direction::Backward, 2, i64::MAX), 2);
        assert_eq!(cut(&rows, Direction::Backward, 10, 1), 3);
        assert_eq!(cut(&rows, Direction::Backward, 10, i64::MAX), 4);
        let rows = roles(&[U, T, T, A, U]);
        assert_eq!(cut(&rows, Direction::Backward, 3, i64::MAX), 1);
        // A group longer than the limit is the one case that splits.
        let rows = roles(&[A, T, T, T]);
        assert_eq!(cut(&rows, Direction::Forward, 2, i64::MAX), 2);
    }
}
