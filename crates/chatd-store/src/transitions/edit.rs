//! `EditMessage` (spec "Transitions": `EditMessage(k, replacement)`).

use chatd_core::{CANCELLED_TOOL_RESULT, ChatRole, StateError, Transition};

use super::running_clearing_error;
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::models::{ChatMessage, NewMessage};
use crate::queries::{self, chats::ChatChanges};

/// Input of [`ChatTx::edit_message`].
///
/// Example: [`ChatTx::edit_message`].
#[derive(Debug, Clone)]
pub struct EditMessageInput {
    /// The user message to replace.
    pub message_id: i64,
    /// The replacement (role is forced to `user`).
    pub replacement: NewMessage,
    /// Rows inserted after the replacement in the same transaction.
    pub suffix_messages: Vec<NewMessage>,
}

/// Result of [`ChatTx::edit_message`].
///
/// Example: [`ChatTx::edit_message`].
#[derive(Debug, Clone)]
pub struct EditMessageResult {
    /// The new user message.
    pub replacement_message: ChatMessage,
    /// Ids that left the active branch (the edited one and everything after
    /// it), ascending; they stay, on an inactive branch.
    pub deleted_message_ids: Vec<i64>,
    /// Queued message ids removed (the whole queue).
    pub deleted_queued_message_ids: Vec<i64>,
    /// Synthetic results for calls left outstanding in the surviving history.
    pub cancellation_messages: Vec<ChatMessage>,
    /// Inserted suffix rows.
    pub suffix_messages: Vec<ChatMessage>,
}

impl ChatTx {
    /// `EditMessage(k, replacement)`: clears the queue, takes message `k`
    /// and every active message after it off the active branch (API.md
    /// "Branches, regenerate and fork": nothing is deleted), answers any
    /// call left outstanding, inserts the replacement as a sibling of `k`
    /// (it follows `k`'s parent) and the suffix after it, clears pending
    /// action and error, and lands in `R0`.
    ///
    /// # Errors
    /// `MessageNotFound` when `k` is not an active message of this chat,
    /// `EditedMessageNotUser` when it is not a user message; not allowed from
    /// archived/invalid states.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::MessagePart;
    /// use chatd_store::{EditMessageInput, NewMessage};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let first = created.initial_messages[0].id;
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let edit = EditMessageInput {
    ///     message_id: first,
    ///     replacement: NewMessage::user(vec![MessagePart::text("hello instead")]),
    ///     suffix_messages: vec![],
    /// };
    /// let edited = tx.edit_message(edit).await?;
    /// assert_eq!(edited.deleted_message_ids, vec![first]);
    /// assert_eq!(edited.replacement_message.content.0, vec![MessagePart::text("hello instead")]);
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// More in `tests/it/transitions.rs` (`edit_message_*`) and `tests/it/matrix.rs`
    /// (`matrix_edit_message`).
    pub async fn edit_message(
        &mut self,
        input: EditMessageInput,
    ) -> StoreResult<EditMessageResult> {
        self.confirm().await?;
        let t = Transition::EditMessage;
        let (_, _, from) = self.enter(t).await?;
        let target = queries::messages::select(db!(self), self.chat_id, input.message_id).await?;
        let target = match target {
            Some(m) if !m.deleted && m.visibility.client_visible() => m,
            _ => {
                return Err(self.reject(
                    t,
                    StateError::MessageNotFound {
                        message_id: input.message_id,
                    },
                ));
            }
        };
        if target.role != ChatRole::User {
            return Err(self.reject(
                t,
                StateError::EditedMessageNotUser {
                    message_id: input.message_id,
                },
            ));
        }
        let deleted_queued_message_ids = queries::queue::clear(db!(self), self.chat_id).await?;
        let deleted_message_ids =
            queries::messages::soft_delete_from(db!(self), self.chat_id, target.id).await?;
        queries::messages::set_active_leaf(db!(self), self.chat_id, target.parent_id).await?;
        self.history.forget();
        let cancellation_messages = self.answer_outstanding(CANCELLED_TOOL_RESULT).await?;
        let mut replacement = input.replacement;
        replacement.role = Some(ChatRole::User);
        let mut inserted = self
            .insert_user(&replacement, None, CANCELLED_TOOL_RESULT)
            .await?;
        let replacement_message = inserted
            .pop()
            .expect("insert_user returns the user row last");
        let mut suffix_messages = Vec::with_capacity(input.suffix_messages.len());
        for message in &input.suffix_messages {
            suffix_messages.push(self.insert(message).await?);
        }
        self.change(ChatChanges {
            deadline_in_secs: Some(None),
            ..running_clearing_error()
        })
        .await?;
        self.land(t, from).await?;
        Ok(EditMessageResult {
            replacement_message,
            deleted_message_ids,
            deleted_queued_message_ids,
            cancellation_messages,
            suffix_messages,
        })
    }
}
