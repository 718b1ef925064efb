//! The queue's transitions: `DeleteQueuedMessage`, `PromoteQueuedMessage`,
//! `EditQueuedMessage`, `MoveQueuedMessage` (spec "Transitions"; API.md
//! "Busy behaviours and the queue").

use chatd_core::{
    CANCELLED_TOOL_RESULT, ChatStatus, ExecutionState, MessagePart, StateError, Transition,
};
use uuid::Uuid;

use super::{queued_to_message, running_clearing_error, status};
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::models::{ChatMessage, QueuedMessage};
use crate::queries::{self, chats::ChatChanges, queue::QueuedChanges};

/// Result of [`ChatTx::promote_queued_message`].
///
/// See [`ChatTx::promote_queued_message`] and its tests.
#[derive(Debug, Clone)]
pub struct PromoteQueuedMessageResult {
    /// The queued row as it was promoted (reordered or removed).
    pub queued_message: QueuedMessage,
    /// The history row, when it was inserted immediately (`E1`, `A1`).
    pub inserted_message: Option<ChatMessage>,
    /// Synthetic results for pending tool calls (`A1`).
    pub cancellation_messages: Vec<ChatMessage>,
}

/// Input of [`ChatTx::edit_queued_message`]; `None` keeps a field.
///
/// See [`ChatTx::edit_queued_message`] and its tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EditQueuedMessageInput {
    /// The queued message.
    pub queued_message_id: i64,
    /// New parts (validated and sanitised by the caller).
    pub content: Option<Vec<MessagePart>>,
    /// New model config (`Some(None)` clears it).
    pub model_config_id: Option<Option<Uuid>>,
    /// New steer flag.
    pub steer: Option<bool>,
}

impl ChatTx {
    /// `DeleteQueuedMessage(qid)` from `E1`, `R1`, `I1`, `A1`.
    ///
    /// # Errors
    /// Not allowed elsewhere (an empty queue); `QueuedMessageNotFound` when
    /// `qid` is not queued on this chat.
    ///
    /// Tested by `tests/it/transitions.rs`: `delete_queued_message_unknown_id_is_not_found_and_empty_queue_is_not_allowed`; and `tests/it/matrix.rs`: `matrix_delete_queued_message` (every state).
    pub async fn delete_queued_message(&mut self, id: i64) -> StoreResult<QueuedMessage> {
        self.confirm().await?;
        let t = Transition::DeleteQueuedMessage;
        let (_, _, from) = self.enter(t).await?;
        let Some(deleted) = queries::queue::delete(db!(self), self.chat_id, id).await? else {
            return Err(self.reject(
                t,
                StateError::QueuedMessageNotFound {
                    queued_message_id: id,
                },
            ));
        };
        self.land(t, from).await?;
        Ok(deleted)
    }

    /// `PromoteQueuedMessage(qid)`: from `E1`/`A1` the message enters history
    /// now (pending calls of `A1` answered "cancelled"); from `R1`/`I1` it
    /// moves to the queue head and the chat interrupts (`I1`).
    ///
    /// # Errors
    /// Not allowed from other states; `QueuedMessageNotFound`.
    ///
    /// Tested by `tests/it/transitions.rs`: `promote_queued_message_from_r1_moves_it_to_the_head_and_interrupts`, `promote_from_a1_answers_pending_calls_and_inserts_the_message`; and `tests/it/matrix.rs`: `matrix_promote_queued_message` (every state).
    pub async fn promote_queued_message(
        &mut self,
        id: i64,
    ) -> StoreResult<PromoteQueuedMessageResult> {
        self.confirm().await?;
        use ExecutionState as S;
        let t = Transition::PromoteQueuedMessage;
        let (_, _, from) = self.enter(t).await?;
        let Some(queued) = queries::queue::select(db!(self), self.chat_id, id).await? else {
            return Err(self.reject(
                t,
                StateError::QueuedMessageNotFound {
                    queued_message_id: id,
                },
            ));
        };
        let mut result = PromoteQueuedMessageResult {
            queued_message: queued.clone(),
            inserted_message: None,
            cancellation_messages: vec![],
        };
        match from {
            S::E1 | S::A1 => {
                queries::queue::delete(db!(self), self.chat_id, id).await?;
                let mut inserted = self
                    .insert_user(
                        &queued_to_message(&queued),
                        Some(queued.id),
                        CANCELLED_TOOL_RESULT,
                    )
                    .await?;
                result.inserted_message = inserted.pop();
                result.cancellation_messages = inserted;
                self.change(ChatChanges {
                    deadline_in_secs: Some(None),
                    ..running_clearing_error()
                })
                .await?;
            }
            S::R1 | S::I1 => {
                if let Some(moved) =
                    queries::queue::move_to_head(db!(self), self.chat_id, id).await?
                {
                    result.queued_message = moved;
                }
                self.change(status(ChatStatus::Interrupting)).await?;
            }
            _ => unreachable!("the matrix admits no other state"),
        }
        self.land(t, from).await?;
        Ok(result)
    }

    /// `EditQueuedMessage(qid, changes)` from `E1`, `R1`, `I1`, `A1`: replaces
    /// the content, model config or steer flag of one queued message (API.md
    /// `PATCH /queue/{queued}`); the state is kept and the trigger advances
    /// `queue_version`. Returns the new row.
    ///
    /// # Errors
    /// Not allowed elsewhere (an empty queue); `QueuedMessageNotFound` when
    /// `qid` is not queued on this chat; `InvalidInput` (`content`) for
    /// empty content.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{BusyBehavior, MessagePart};
    /// use chatd_store::{EditQueuedMessageInput, NewMessage, SendMessageInput};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let send = SendMessageInput {
    ///     message: NewMessage::user(vec![MessagePart::text("tpyo")]),
    ///     busy_behavior: BusyBehavior::Queue,
    ///     max_queue_size: None,
    /// };
    /// let queued = tx.send_message(send).await?.queued_message.expect("queued");
    /// let edit = EditQueuedMessageInput {
    ///     queued_message_id: queued.id,
    ///     content: Some(vec![MessagePart::text("typo")]),
    ///     ..Default::default()
    /// };
    /// let edited = tx.edit_queued_message(edit).await?;
    /// assert_eq!(edited.content.0, vec![MessagePart::text("typo")]);
    /// let chat = tx.commit().await?;
    /// assert_eq!(chat.queue_version, chat.snapshot_version);
    /// # Ok(()) }
    /// ```
    ///
    /// More in `tests/it/transitions.rs` (`edit_queued_message_*`) and
    /// `tests/it/matrix.rs` (`matrix_edit_queued_message`).
    pub async fn edit_queued_message(
        &mut self,
        input: EditQueuedMessageInput,
    ) -> StoreResult<QueuedMessage> {
        self.confirm().await?;
        let t = Transition::EditQueuedMessage;
        let (_, _, from) = self.enter(t).await?;
        if input.content.as_ref().is_some_and(Vec::is_empty) {
            return Err(self.reject(
                t,
                StateError::InvalidInput {
                    field: "content",
                    detail: "must not be empty".into(),
                },
            ));
        }
        let changes = QueuedChanges {
            content: input.content,
            model_config_id: input.model_config_id,
            steer: input.steer,
        };
        let id = input.queued_message_id;
        let Some(edited) = queries::queue::update(db!(self), self.chat_id, id, &changes).await?
        else {
            return Err(self.reject(
                t,
                StateError::QueuedMessageNotFound {
                    queued_message_id: id,
                },
            ));
        };
        self.land(t, from).await?;
        Ok(edited)
    }

    /// `MoveQueuedMessage(qid, index)` from `E1`, `R1`, `I1`, `A1`: moves one
    /// queued message to the 0-based `index` of the queue (past the end:
    /// last); the state is kept and the trigger advances `queue_version`.
    /// Returns the whole queue in its new order.
    ///
    /// # Errors
    /// Not allowed elsewhere (an empty queue); `QueuedMessageNotFound` when
    /// `qid` is not queued on this chat.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{BusyBehavior, MessagePart};
    /// use chatd_store::{NewMessage, SendMessageInput};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let mut ids = vec![];
    /// for text in ["a", "b", "c"] {
    ///     let send = SendMessageInput {
    ///         message: NewMessage::user(vec![MessagePart::text(text)]),
    ///         busy_behavior: BusyBehavior::Queue,
    ///         max_queue_size: None,
    ///     };
    ///     ids.push(tx.send_message(send).await?.queued_message.expect("queued").id);
    /// }
    /// let queue = tx.move_queued_message(ids[2], 0).await?;
    /// assert_eq!(queue.iter().map(|q| q.id).collect::<Vec<_>>(), vec![ids[2], ids[0], ids[1]]);
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// More in `tests/it/transitions.rs` (`move_queued_message_*`) and
    /// `tests/it/matrix.rs` (`matrix_move_queued_message`).
    pub async fn move_queued_message(
        &mut self,
        id: i64,
        index: u64,
    ) -> StoreResult<Vec<QueuedMessage>> {
        self.confirm().await?;
        let t = Transition::MoveQueuedMessage;
        let (_, _, from) = self.enter(t).await?;
        let Some(queue) = queries::queue::move_to(db!(self), self.chat_id, id, index).await? else {
            return Err(self.reject(
                t,
                StateError::QueuedMessageNotFound {
                    queued_message_id: id,
                },
            ));
        };
        self.land(t, from).await?;
        Ok(queue)
    }
}
