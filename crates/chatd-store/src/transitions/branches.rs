//! `RegenerateMessage` and `ActivateBranch` (API.md "Branches, regenerate
//! and fork"; migration `0017_branches.sql` for the tree).
//!
//! Both move the chat's active branch by flipping `deleted` ("not on the
//! active branch") on the rows that leave and join it and by moving
//! `chats.active_leaf_id`; nothing is deleted or rewritten. The message
//! triggers turn the flips into a new `history_version` as for any other
//! history write, so the fences, the context cache's key and the stream's
//! `history_reset` follow without knowing about branches.

use chatd_core::{
    CANCELLED_TOOL_RESULT, ChatRole, ChatStatus, MessagePart, StateError, Transition,
};

use super::running_clearing_error;
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::queries::{self, chats::ChatChanges};

/// Result of [`ChatTx::regenerate_message`].
#[derive(Debug, Clone)]
pub struct RegenerateResult {
    /// The user message the new answer will follow: the new branch's
    /// parent, and the chat's active leaf now.
    pub parent_id: i64,
    /// Ids that left the active branch (the old answer and everything after
    /// it), ascending.
    pub deactivated_message_ids: Vec<i64>,
}

/// Result of [`ChatTx::activate_branch`].
#[derive(Debug, Clone)]
pub struct ActivateResult {
    /// The active leaf now: the newest row under the message asked for, or
    /// the last synthetic result after it.
    pub leaf_id: i64,
    /// Ids that left the active branch, ascending.
    pub deactivated_message_ids: Vec<i64>,
    /// Ids that joined it, ascending.
    pub activated_message_ids: Vec<i64>,
    /// Synthetic results answering the calls the new branch ended in (a
    /// branch an edit left while a call waited); they extend the branch.
    pub cancellation_messages: Vec<crate::models::ChatMessage>,
}

impl ChatTx {
    /// `RegenerateMessage(k)`: `W/E0 → R0`. Message `k` must be an assistant
    /// answer of the active branch; the branch is cut back to the user
    /// message that answer follows (the newest active user message before
    /// `k`), which becomes the active leaf, so the answer the worker writes
    /// next is a new sibling of the old one. The old answer and everything
    /// after it stay, inactive. Clears the error; the queue is left alone
    /// (it is empty in `W` and `E0`).
    ///
    /// # Errors
    /// `MessageNotFound` when `k` is not a client-visible message of the
    /// active branch, `RegeneratedMessageNotAssistant` when it is not an
    /// assistant message or is a compaction's marker, `InvalidInput` when no message precedes it; not
    /// allowed from busy, `E1` or archived states (`409`/`400` at the API).
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{ChatStatus, MessagePart};
    /// use chatd_store::NewMessage;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let store = &fx.store;
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let question = created.initial_messages[0].id;
    /// // The turn answers and ends.
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let answer = tx.commit_step(vec![NewMessage::assistant(vec![MessagePart::text("hello")])], false).await?;
    /// tx.finish_turn().await?;
    /// tx.commit().await?;
    /// // Another answer, please.
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let regenerated = tx.regenerate_message(answer[0].id).await?;
    /// assert_eq!(regenerated.parent_id, question);
    /// assert_eq!(regenerated.deactivated_message_ids, vec![answer[0].id]);
    /// let chat = tx.commit().await?;
    /// assert_eq!(chat.status, ChatStatus::Running);
    /// assert_eq!(chat.active_leaf_id, Some(question));
    /// # Ok(()) }
    /// ```
    ///
    /// More in `tests/it/branches.rs` and `tests/it/matrix.rs`
    /// (`matrix_regenerate_message`).
    pub async fn regenerate_message(&mut self, message_id: i64) -> StoreResult<RegenerateResult> {
        self.confirm().await?;
        let t = Transition::RegenerateMessage;
        let (_, _, from) = self.enter(t).await?;
        let target = queries::messages::select(db!(self), self.chat_id, message_id).await?;
        let target = match target {
            Some(m) if !m.deleted && m.visibility.client_visible() => m,
            _ => return Err(self.reject(t, StateError::MessageNotFound { message_id })),
        };
        // A compaction's marker is an assistant row but no answer.
        let marker = target.content.0.iter().any(|p| {
            matches!(p, MessagePart::ToolCall { tool_name, .. }
                if tool_name == chatd_core::context::COMPACTION_TOOL)
        });
        if target.role != ChatRole::Assistant || marker {
            return Err(self.reject(t, StateError::RegeneratedMessageNotAssistant { message_id }));
        }
        let parent_id =
            match queries::messages::answered_user_message(db!(self), self.chat_id, target.id)
                .await?
                .or(target.parent_id)
            {
                Some(id) => id,
                None => {
                    return Err(self.reject(
                        t,
                        StateError::InvalidInput {
                            field: "message_id",
                            detail: "no message precedes this answer".into(),
                        },
                    ));
                }
            };
        let deactivated_message_ids =
            queries::messages::soft_delete_from(db!(self), self.chat_id, parent_id + 1).await?;
        queries::messages::set_active_leaf(db!(self), self.chat_id, Some(parent_id)).await?;
        self.history.forget();
        self.change(ChatChanges {
            deadline_in_secs: Some(None),
            compaction_requested: Some(false),
            ..running_clearing_error()
        })
        .await?;
        self.land(t, from).await?;
        Ok(RegenerateResult {
            parent_id,
            deactivated_message_ids,
        })
    }

    /// `ActivateBranch(k)`: `W/E0 → W`. The branch ending at the newest row
    /// under message `k` (`k` itself when it has no children) becomes the
    /// active one: the rows of the old branch after the two branches' last
    /// common row leave it, the rows of the new one join it; a call the new
    /// branch ends in is answered with a synthetic cancellation. Clears the
    /// error. Activating the active branch changes nothing in history.
    ///
    /// # Errors
    /// `MessageNotFound` when `k` is not a client-visible message of this
    /// chat's tree (any branch); not allowed from busy, `E1` or archived
    /// states.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::MessagePart;
    /// use chatd_store::{EditMessageInput, NewMessage};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let store = &fx.store;
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let first = created.initial_messages[0].id;
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let edited = tx.edit_message(EditMessageInput {
    ///     message_id: first,
    ///     replacement: NewMessage::user(vec![MessagePart::text("hello instead")]),
    ///     suffix_messages: vec![],
    /// }).await?;
    /// tx.interrupt().await?;
    /// tx.finish_interruption(vec![]).await?;
    /// tx.commit().await?;
    /// // Back to the first version.
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let switched = tx.activate_branch(first).await?;
    /// assert_eq!(switched.leaf_id, first);
    /// assert_eq!(switched.deactivated_message_ids, vec![edited.replacement_message.id]);
    /// assert_eq!(switched.activated_message_ids, vec![first]);
    /// assert_eq!(tx.commit().await?.active_leaf_id, Some(first));
    /// # Ok(()) }
    /// ```
    ///
    /// More in `tests/it/branches.rs` and `tests/it/matrix.rs`
    /// (`matrix_activate_branch`).
    pub async fn activate_branch(&mut self, message_id: i64) -> StoreResult<ActivateResult> {
        self.confirm().await?;
        let t = Transition::ActivateBranch;
        let (_, _, from) = self.enter(t).await?;
        let target = queries::messages::select(db!(self), self.chat_id, message_id).await?;
        let leaf = match target {
            Some(m) if m.visibility.client_visible() => {
                queries::messages::newest_under(db!(self), self.chat_id, message_id).await?
            }
            _ => None,
        };
        // `None` also for a row an edit deleted before branches existed: it
        // is in no tree.
        let Some(leaf_id) = leaf else {
            return Err(self.reject(t, StateError::MessageNotFound { message_id }));
        };
        let (deactivated_message_ids, activated_message_ids) =
            queries::messages::activate_path(db!(self), self.chat_id, leaf_id).await?;
        queries::messages::set_active_leaf(db!(self), self.chat_id, Some(leaf_id)).await?;
        self.history.forget();
        // A branch an edit left while a call waited (A0/A1) ends in that
        // call: a waiting chat has no unanswered call, so it is answered as
        // any transition leaving requires_action answers it.
        let cancellation_messages = self.answer_outstanding(CANCELLED_TOOL_RESULT).await?;
        self.change(ChatChanges {
            status: Some(ChatStatus::Waiting),
            last_error: Some(None),
            ..ChatChanges::default()
        })
        .await?;
        self.land(t, from).await?;
        Ok(ActivateResult {
            leaf_id: cancellation_messages.last().map_or(leaf_id, |m| m.id),
            deactivated_message_ids,
            activated_message_ids,
            cancellation_messages,
        })
    }
}
