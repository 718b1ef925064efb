//! The database side of one `Sync` (spec "Sync operation": "all database
//! reads for that Sync must happen in the same read transaction").
//!
//! [`fetch`] opens one `REPEATABLE READ, READ ONLY` transaction
//! ([`chatd_store::ChatMachine::snapshot`]), reads the chat row, asks the
//! pure state what else to read ([`StreamState::reads`]), and reads it in
//! the same transaction: changed messages (and, when they force a full
//! refresh, every current message), the queue, and the pending tool calls.

use chatd_core::{MessagePart, PendingAction, StateError, pending_actions};
use chatd_store::{Store, StoreError};

use super::event::PendingToolCall;
use super::state::{DbState, MessageRows, StreamState};
use chatd_store::{messages, queue};

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The chat no longer exists (it was deleted).
    #[error("the chat was deleted")]
    ChatGone,
    /// A database error (retried by the caller).
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// Any other store error.
    #[error(transparent)]
    Store(StoreError),
}

impl FetchError {
    /// Whether reading again later may succeed: a transient database error
    /// ([`chatd_store::is_transient`]).
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::ChatGone => false,
            FetchError::Database(db) => chatd_store::is_transient(db),
            FetchError::Store(store) => store.is_retryable(),
        }
    }
}

impl From<StoreError> for FetchError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::State(StateError::ChatNotFound) => FetchError::ChatGone,
            StoreError::Database(db) => FetchError::Database(db),
            other => FetchError::Store(other),
        }
    }
}

/// Reads what `state` needs for the chat's current row; `None` when the row
/// is not newer than the local state (a no-op `Sync`).
///
/// # Errors
/// [`FetchError::ChatGone`] when the chat was deleted; database errors.
pub async fn fetch(store: &Store, state: &StreamState) -> Result<Option<DbState>, FetchError> {
    let chat_id = state.chat_id();
    let mut snapshot = store.machine(chat_id).snapshot().await?;
    let chat = snapshot.chat.clone();
    let Some(reads) = state.reads(&chat) else {
        snapshot.finish().await?;
        return Ok(None);
    };
    let messages = match reads.messages_since {
        None => None,
        Some(since) => {
            let changed = messages::changed_since(snapshot.conn(), chat_id, since).await?;
            Some(if state.needs_history_reset(&changed) {
                MessageRows::Reset(messages::visible(snapshot.conn(), chat_id).await?)
            } else {
                MessageRows::Changed(changed)
            })
        }
    };
    let queue = if reads.queue {
        Some(queue::list(snapshot.conn(), chat_id).await?)
    } else {
        None
    };
    let pending_tool_calls = if reads.pending_tool_calls {
        let tail = messages::tail_contents(snapshot.conn(), chat_id).await?;
        let dynamic = chat.dynamic_tool_names();
        Some(pending_tool_calls(&tail, &dynamic))
    } else {
        None
    };
    snapshot.finish().await?;
    Ok(Some(DbState {
        chat,
        messages,
        queue,
        pending_tool_calls,
    }))
}

/// The tool calls of `tail` (active messages from the latest user message
/// on, in id order) that wait for the client, with their arguments and
/// kind, in call order: those without a result or an approval, a
/// `client_tool` when `dynamic` (the chat's dynamic tool names) has its
/// name, else an `approval`.
pub fn pending_tool_calls(tail: &[Vec<MessagePart>], dynamic: &[String]) -> Vec<PendingToolCall> {
    let pending = pending_actions(tail.iter().map(Vec::as_slice), |name| {
        dynamic.iter().any(|d| d == name)
    });
    pending
        .into_iter()
        .map(|PendingAction { call, kind }| {
            let args = tail
                .iter()
                .flatten()
                .find_map(|part| match part {
                    MessagePart::ToolCall {
                        tool_call_id, args, ..
                    } if *tool_call_id == call.tool_call_id => Some(args.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            PendingToolCall {
                tool_call_id: call.tool_call_id,
                tool_name: call.tool_name,
                args,
                kind,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatd_core::ActionKind;

    fn call(id: &str, name: &str) -> MessagePart {
        MessagePart::ToolCall {
            tool_call_id: id.into(),
            tool_name: name.into(),
            args: format!("{{\"id\":\"{id}\"}}"),
        }
    }

    /// A stream waits out a failover (transient errors, up to
    /// `db_patience`) but not a deleted chat or a permanent error.
    #[test]
    fn a_database_away_is_transient_a_deleted_chat_or_a_bad_row_is_not() {
        let io = FetchError::Database(sqlx::Error::Io(std::io::Error::other("reset")));
        assert!(io.is_transient());
        assert!(FetchError::Database(sqlx::Error::PoolTimedOut).is_transient());
        assert!(FetchError::from(StoreError::Database(sqlx::Error::PoolTimedOut)).is_transient());
        assert!(!FetchError::ChatGone.is_transient());
        assert!(!FetchError::Database(sqlx::Error::RowNotFound).is_transient());
    }

    #[test]
    fn pending_calls_are_client_tools_or_approvals_and_approved_ones_are_not_pending() {
        let step = vec![
            call("c1", "pick"),
            call("a1", "fs__rm"),
            call("a2", "fs__rm"),
        ];
        let approved = vec![MessagePart::ToolApproval {
            tool_call_id: "a2".into(),
            tool_name: "fs__rm".into(),
            approved: true,
            reason: None,
        }];
        let pending = pending_tool_calls(&[step, approved], &["pick".to_owned()]);
        let got: Vec<(&str, ActionKind, &str)> = pending
            .iter()
            .map(|p| (p.tool_call_id.as_str(), p.kind, p.args.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("c1", ActionKind::ClientTool, "{\"id\":\"c1\"}"),
                ("a1", ActionKind::Approval, "{\"id\":\"a1\"}"),
            ]
        );
        assert_eq!(
            serde_json::to_value(&pending[1]).unwrap()["kind"],
            serde_json::json!("approval")
        );
    }
}
