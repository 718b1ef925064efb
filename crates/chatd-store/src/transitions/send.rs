//! `SendMessage` (spec "Transitions": `SendMessage(m, busy_behavior)`;
//! API.md "Busy behaviours and the queue").

use chatd_core::{
    BusyBehavior, CANCELLED_TOOL_RESULT, ChatRole, ChatStatus, ExecutionState,
    INTERRUPTED_TOOL_RESULT, MessagePart, Transition,
};
use serde_json::Value;

use super::{running_clearing_deadline, running_clearing_error, status};
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::machine::ChatMachine;
use crate::models::{Chat, ChatMessage, NewMessage, QueuedMessage};
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
    /// Records an OpenAI response whose turn this bundle starts (API.md
    /// "Compatible protocols": the durable mapping of a `resp_…` id to a
    /// turn), in the bundle's transaction: it exists exactly when the send
    /// or the tool results it names commit. Not a transition: the chat's
    /// state is not touched. Returns the id reserved for the turn's answer
    /// (none while the send is queued: it is reserved when the message is
    /// promoted).
    ///
    /// # Errors
    /// Database errors (a repeated id is a unique violation).
    pub async fn record_response(
        &mut self,
        response: &crate::queries::responses::NewResponse,
    ) -> StoreResult<Option<i64>> {
        let chat_id = self.chat_id;
        // The write touches no table of the chat's state: what the bundle
        // knows of the row stays true.
        Ok(queries::responses::insert(self.reader().await?, chat_id, response).await?)
    }

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

/// How [`ChatMachine::begin_user_send`] opened a user's send (API.md
/// `POST /api/v2/chats/{chat}/messages`, `client_message_id`).
#[derive(Debug)]
pub enum UserSendStart {
    /// The bundle is open: link files, send, then commit with the response.
    Open(UserSend),
    /// A repeat of an earlier send with the same `client_message_id` and
    /// fingerprint: its stored response. Nothing changed.
    Repeated(Value),
    /// The `client_message_id` was used for a different message. Nothing
    /// changed.
    KeyConflict,
    /// The chat is archived: no message can be sent. Nothing changed.
    Archived,
}

/// An open bundle of a user's send ([`ChatMachine::begin_user_send`]):
/// the file links, `SendMessage`, and the receipt of the
/// `client_message_id` stored with the response, in one transaction.
/// Dropping it rolls everything back.
#[derive(Debug)]
pub struct UserSend {
    tx: ChatTx,
    receipt: Option<(String, Vec<u8>)>,
}

impl ChatMachine {
    /// Opens a bundle for a user's send: with a `receipt`
    /// (`client_message_id`, the request's fingerprint), first looks up an
    /// earlier send with that key (a repeat gets its stored response, a
    /// different message with the same key is a conflict), then refuses an
    /// archived chat. Both checks read under the row lock; either refusal
    /// rolls the bundle back, so it changes nothing.
    ///
    /// # Errors
    /// As [`ChatMachine::begin`].
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{BusyBehavior, MessagePart};
    /// use chatd_store::{NewMessage, SendMessageInput, UserSendStart};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let chat = fx.create_chat("hi").await?.chat;
    /// let machine = store.machine(chat.id);
    /// let receipt = Some(("key-1".to_owned(), b"fingerprint".to_vec()));
    /// let UserSendStart::Open(mut send) = machine.begin_user_send(receipt.clone()).await? else {
    ///     panic!("a new key");
    /// };
    /// let (result, position) = send
    ///     .send_message(SendMessageInput {
    ///         message: NewMessage::user(vec![MessagePart::text("and then?")]),
    ///         busy_behavior: BusyBehavior::Queue,
    ///         max_queue_size: None,
    ///     })
    ///     .await?;
    /// assert!(result.queued_message.is_some() && position == Some(0));
    /// send.commit(&serde_json::json!({"queued": true})).await?;
    /// // The same key again: the stored response, nothing sent.
    /// let again = machine.begin_user_send(receipt).await?;
    /// assert!(matches!(again, UserSendStart::Repeated(r) if r["queued"] == true));
    /// let other = Some(("key-1".to_owned(), b"another".to_vec()));
    /// assert!(matches!(machine.begin_user_send(other).await?, UserSendStart::KeyConflict));
    /// # Ok(()) }
    /// ```
    pub async fn begin_user_send(
        &self,
        receipt: Option<(String, Vec<u8>)>,
    ) -> StoreResult<UserSendStart> {
        let mut tx = self.begin().await?;
        if let Some((key, fingerprint)) = &receipt
            && let Some((hash, response)) =
                queries::send_receipts::select::<Value>(tx.conn().await?, self.chat_id, key).await?
        {
            // Dropping `tx` rolls the snapshot bump back: a repeat changes
            // nothing.
            return Ok(if &hash == fingerprint {
                UserSendStart::Repeated(response)
            } else {
                UserSendStart::KeyConflict
            });
        }
        if tx.chat().await?.archived {
            return Ok(UserSendStart::Archived);
        }
        Ok(UserSendStart::Open(UserSend { tx, receipt }))
    }
}

impl UserSend {
    /// [`ChatTx::link_files`] in this bundle.
    ///
    /// # Errors
    /// As [`ChatTx::link_files`].
    ///
    /// Example: [`ChatTx::link_files`].
    pub async fn link_files(
        &mut self,
        parts: &mut [MessagePart],
        max_links: usize,
    ) -> StoreResult<()> {
        self.tx.link_files(parts, max_links).await
    }

    /// [`ChatTx::send_message`] in this bundle; returns its result and,
    /// for a queued message, its 0-based position in the queue.
    ///
    /// # Errors
    /// As [`ChatTx::send_message`].
    ///
    /// Example: [`ChatMachine::begin_user_send`].
    pub async fn send_message(
        &mut self,
        input: SendMessageInput,
    ) -> StoreResult<(SendMessageResult, Option<i64>)> {
        let result = self.tx.send_message(input).await?;
        let chat_id = self.tx.chat_id;
        let position = match &result.queued_message {
            Some(queued) => Some(
                queries::queue::index_of(self.tx.reader().await?, chat_id, queued.id)
                    .await?
                    .unwrap_or_default(),
            ),
            None => None,
        };
        Ok((result, position))
    }

    /// [`ChatTx::record_response`] in this bundle.
    ///
    /// # Errors
    /// As [`ChatTx::record_response`].
    pub async fn record_response(
        &mut self,
        response: &crate::queries::responses::NewResponse,
    ) -> StoreResult<Option<i64>> {
        self.tx.record_response(response).await
    }

    /// Stores `response` as the receipt of the send's `client_message_id`
    /// (if it has one), commits, and publishes. Returns the committed row.
    ///
    /// # Errors
    /// As [`ChatTx::commit`].
    ///
    /// Example: [`ChatMachine::begin_user_send`].
    pub async fn commit(mut self, response: &Value) -> StoreResult<Chat> {
        if let Some((key, fingerprint)) = &self.receipt {
            let chat_id = self.tx.chat_id;
            queries::send_receipts::insert(
                self.tx.conn().await?,
                chat_id,
                key,
                fingerprint,
                response,
            )
            .await?;
        }
        self.tx.commit().await
    }
}
