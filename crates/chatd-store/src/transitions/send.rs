//! `SendMessage` (spec "Transitions": `SendMessage(m, busy_behavior)`;
//! API.md "Busy behaviours and the queue").

use chatd_core::{
    BusyBehavior, CANCELLED_TOOL_RESULT, ChatRole, ChatStatus, ExecutionState,
    INTERRUPTED_TOOL_RESULT, Transition,
};

use super::{running_clearing_deadline, running_clearing_error, status};
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::models::{ChatMessage, NewMessage, QueuedMessage};
use crate::queries::{self, queue::QueueEnd};

/// Input of [`ChatTx::send_message`].
///
/// Example: [`ChatTx::send_message`].
#[derive(Debug, Clone)]
pub struct SendMessageInput {
    /// The user message (role is forced to `user`).
    pub message: NewMessage,
    /// What to do when the chat is busy.
    pub busy_behavior: BusyBehavior,
    /// Queue cap override; `None` uses the store's `max_queued_messages`.
    pub max_queue_size: Option<i64>,
}

/// Result of [`ChatTx::send_message`].
///
/// Example: [`ChatTx::send_message`].
#[derive(Debug, Clone, Default)]
pub struct SendMessageResult {
    /// Rows inserted into history, in id order: synthetic tool results first,
    /// then the user message (the sent one, or the promoted queue head from
    /// `E1`).
    pub inserted_messages: Vec<ChatMessage>,
    /// The queued row, when the message was queued.
    pub queued_message: Option<QueuedMessage>,
}

impl ChatTx {
    /// `SendMessage(m, busy_behavior)`: from `W`/`E0` the message enters
    /// history (`R0`); from `E1` it joins the queue's tail and the head is
    /// promoted (`R1`); when busy it is queued at the tail (`queue`) or at the
    /// head with an interrupt (`interrupt`: `R* → I1`, `I* → I1`, `A* → R1`
    /// with pending calls answered "interrupted by user").
    ///
    /// # Errors
    /// `MessageQueueFull` when the message would be queued and the queue is
    /// at its cap; not allowed from archived, invalid or missing chats.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{BusyBehavior, MessagePart};
    /// use chatd_store::{NewMessage, SendMessageInput};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let send = |text: &str, busy_behavior| SendMessageInput {
    ///     message: NewMessage::user(vec![MessagePart::text(text)]),
    ///     busy_behavior,
    ///     max_queue_size: None,
    /// };
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// // Running: the message is queued, at the head when it interrupts.
    /// let queued = tx.send_message(send("and then?", BusyBehavior::Queue)).await?;
    /// assert!(queued.queued_message.is_some() && queued.inserted_messages.is_empty());
    /// tx.send_message(send("stop, this instead", BusyBehavior::Interrupt)).await?;
    /// assert_eq!(tx.execution_state().await?, chatd_core::ExecutionState::I1);
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// More in `tests/it/transitions.rs` (`send_message_*`) and `tests/it/matrix.rs`
    /// (`matrix_send_message_queue`, `matrix_send_message_interrupt`).
    pub async fn send_message(
        &mut self,
        input: SendMessageInput,
    ) -> StoreResult<SendMessageResult> {
        self.confirm().await?;
        use ExecutionState as S;
        let t = Transition::SendMessage {
            busy_behavior: input.busy_behavior,
        };
        let (_, queued, from) = self.enter(t).await?;
        let max = input
            .max_queue_size
            .unwrap_or(self.store.config.max_queued_messages);
        let mut message = input.message;
        message.role = Some(ChatRole::User);
        let interrupt = input.busy_behavior == BusyBehavior::Interrupt;
        // Steering is for a running turn; elsewhere a steer send queues.
        let steer = input.busy_behavior == BusyBehavior::Steer && matches!(from, S::R0 | S::R1);
        let mut result = SendMessageResult::default();
        match from {
            S::W | S::E0 => {
                result.inserted_messages = self
                    .insert_user(&message, None, CANCELLED_TOOL_RESULT)
                    .await?;
                self.change(running_clearing_error()).await?;
            }
            S::E1 => {
                self.check_queue_room(t, queued, max)?;
                result.queued_message = Some(
                    queries::queue::enqueue(db!(self), self.chat_id, &message, QueueEnd::Tail)
                        .await?,
                );
                if let Some((_, inserted)) = self.promote_head(CANCELLED_TOOL_RESULT).await? {
                    result.inserted_messages = inserted;
                }
                self.change(running_clearing_error()).await?;
            }
            S::R0 | S::R1 | S::I0 | S::I1 | S::A0 | S::A1 => {
                self.check_queue_room(t, queued, max)?;
                let end = if interrupt {
                    QueueEnd::Head
                } else {
                    QueueEnd::Tail
                };
                result.queued_message = Some(
                    queries::queue::enqueue_flagged(db!(self), self.chat_id, &message, end, steer)
                        .await?,
                );
                if interrupt {
                    match from {
                        S::R0 | S::R1 => {
                            self.change(status(ChatStatus::Interrupting)).await?;
                        }
                        S::A0 | S::A1 => {
                            result.inserted_messages =
                                self.answer_outstanding(INTERRUPTED_TOOL_RESULT).await?;
                            self.change(running_clearing_deadline()).await?;
                        }
                        _ => {}
                    }
                }
            }
            _ => unreachable!("the matrix admits no other state"),
        }
        self.land(t, from).await?;
        Ok(result)
    }
}
