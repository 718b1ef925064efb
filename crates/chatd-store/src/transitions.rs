//! Every transition of the core state machine (`spec/chatd-architecture.md`,
//! "Transitions", "Miscellaneous transition rules", "Invalid states" and the
//! endpoint tables; `spec/chatstate-package.md`, the `Tx` methods).
//!
//! Each method follows one shape: read the chat row and queue cardinality
//! under the lock (`Ops::enter`), reject with the matrix's error when the
//! pair is not listed (nothing written), perform the writes, then classify the
//! result and check that the matrix lists the landing state (`Ops::land`).
//! The three miscellaneous rules are kept here:
//! - leaving `requires_action` other than by `CompleteRequiresAction` answers
//!   every pending tool call with a synthetic result;
//! - inserting a user message first answers every outstanding tool call;
//! - leaving `error` (except to archive) clears `last_error`.
//!
//! One more rule keeps `retry_state` scoped to the generation attempt it
//! announces (spec "Retry state version"; API.md sends `retry` on connect only
//! where it applies): every transition that ends the generation for good
//! (`FinishTurn`, `FinishInterruption`, `FinishError`, `EnterRequiresAction`,
//! `ReconcileInvalidState`) clears it, so a chat outside `R*`/`I*` never holds
//! one. The trigger advances `retry_state_version` when the clear changes it.

use chatd_core::{
    ActionKind, BusyBehavior, CANCELLED_TOOL_RESULT, ChatError, ChatRole, ChatStatus,
    ExecutionState, INTERRUPTED_TOOL_RESULT, MessagePart, PendingAction, RetryState, StateError,
    TIMED_OUT_TOOL_RESULT, ToolCallRef, ToolResultError, ToolResultErrorKind, Transition,
    Visibility, classify, matrix, outstanding_tool_calls, pending_actions,
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;
use crate::machine::{ChatTx, StoreConfig, record_transition};
use crate::models::{Chat, ChatMessage, NewMessage, QueuedMessage};
use crate::queries::{
    self,
    chats::ChatChanges,
    queue::{QueueEnd, QueuedChanges},
};

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
    /// Soft-deleted message ids (the edited one and everything after it).
    pub deleted_message_ids: Vec<i64>,
    /// Queued message ids removed (the whole queue).
    pub deleted_queued_message_ids: Vec<i64>,
    /// Synthetic results for calls left outstanding in the surviving history.
    pub cancellation_messages: Vec<ChatMessage>,
    /// Inserted suffix rows.
    pub suffix_messages: Vec<ChatMessage>,
}

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

/// One submitted answer to a pending call: a client tool's result or a
/// decision on a call waiting for approval (API.md "Tool approval (human
/// in the loop)").
///
/// Example: [`validate_tool_results`].
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultInput {
    /// The provider's tool call id.
    pub tool_call_id: String,
    /// The answer.
    pub answer: ToolAnswer,
}

/// What a [`ToolResultInput`] answers with.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolAnswer {
    /// The result of a client-tool ([`ActionKind::ClientTool`]) call.
    Output {
        /// The output, as JSON text.
        output: String,
        /// Whether the tool failed.
        is_error: bool,
    },
    /// The decision on a call waiting for approval
    /// ([`ActionKind::Approval`]).
    Decision {
        /// Approved: the worker runs the call next; denied: it gets the
        /// error result [`MessagePart::denied_result`].
        approved: bool,
        /// Why, as the person wrote it (stored with the decision).
        reason: Option<String>,
    },
}

impl ToolResultInput {
    /// A client tool's result `output` (JSON text).
    pub fn output(
        tool_call_id: impl Into<String>,
        output: impl Into<String>,
        is_error: bool,
    ) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            answer: ToolAnswer::Output {
                output: output.into(),
                is_error,
            },
        }
    }

    /// A decision on a call waiting for approval.
    pub fn decision(
        tool_call_id: impl Into<String>,
        approved: bool,
        reason: Option<String>,
    ) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            answer: ToolAnswer::Decision { approved, reason },
        }
    }
}

/// Input of [`ChatTx::complete_requires_action`].
///
/// See [`ChatTx::complete_requires_action`] and its tests.
#[derive(Debug, Clone, Default)]
pub struct CompleteRequiresActionInput {
    /// Submitting user.
    pub created_by: Option<Uuid>,
    /// Model config to record on the result rows.
    pub model_config_id: Option<Uuid>,
    /// One answer per pending call, exactly: an output for each
    /// client-tool call, a decision for each call waiting for approval.
    pub results: Vec<ToolResultInput>,
    /// Rows inserted after the results.
    pub suffix_messages: Vec<NewMessage>,
}

/// Result of [`ChatTx::finish_interruption`].
///
/// See [`ChatTx::finish_interruption`] and its tests.
#[derive(Debug, Clone, Default)]
pub struct FinishInterruptionResult {
    /// Partial rows and synthetic results inserted, in id order.
    pub inserted_messages: Vec<ChatMessage>,
    /// The promoted queue head (`I1`).
    pub promoted_message: Option<ChatMessage>,
}

/// Result of [`ChatTx::finish_turn`].
///
/// See [`ChatTx::finish_turn`] and its tests.
#[derive(Debug, Clone, Default)]
pub struct FinishTurnResult {
    /// The last promoted user message (`R1`): the queue head, or the last
    /// steer message when steer messages were waiting.
    pub promoted_message: Option<ChatMessage>,
    /// Every user message promoted, in queue order: all waiting steer
    /// messages, or else the queue head alone.
    pub promoted_messages: Vec<ChatMessage>,
    /// Synthetic results inserted before the promoted message.
    pub cancellation_messages: Vec<ChatMessage>,
}

/// Result of [`ChatTx::commit_step_steering`].
///
/// See [`ChatTx::commit_step_steering`] and its tests.
#[derive(Debug, Clone, Default)]
pub struct CommitStepResult {
    /// The step's rows, in id order.
    pub inserted_messages: Vec<ChatMessage>,
    /// The steer messages taken from the queue into history after the step,
    /// in queue order (each with its `queued_message_id`).
    pub steered_messages: Vec<ChatMessage>,
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

/// Checks submitted answers against the pending calls (spec chatstate
/// `ValidateToolResults`, extended by API.md "Tool approval"): no
/// duplicates, nothing unexpected, nothing missing, an answer of the kind
/// the call waits for (an output for a client tool, a decision for an
/// approval), every output valid JSON. Checks run in that order and the
/// first failure is returned.
///
/// # Errors
/// The first [`ToolResultError`] found.
///
/// # Example
///
/// ```
/// use chatd_core::{ActionKind, PendingAction, ToolCallRef, ToolResultErrorKind};
/// use chatd_store::{ToolResultInput, validate_tool_results};
/// let pending = [PendingAction {
///     call: ToolCallRef { tool_call_id: "c1".into(), tool_name: "pick".into() },
///     kind: ActionKind::ClientTool,
/// }];
/// let result = |id: &str, output: &str| ToolResultInput::output(id, output, false);
/// assert!(validate_tool_results(&[result("c1", r#"{"color":"red"}"#)], &pending).is_ok());
/// let missing = validate_tool_results(&[], &pending).unwrap_err();
/// assert_eq!(missing.kind, ToolResultErrorKind::Missing);
/// let bad = validate_tool_results(&[result("c1", "not json")], &pending).unwrap_err();
/// assert_eq!(bad.kind, ToolResultErrorKind::InvalidJson);
/// let decided = validate_tool_results(&[ToolResultInput::decision("c1", true, None)], &pending);
/// assert_eq!(decided.unwrap_err().kind, ToolResultErrorKind::ApprovalForClientTool);
/// ```
pub fn validate_tool_results(
    results: &[ToolResultInput],
    pending: &[PendingAction],
) -> Result<(), ToolResultError> {
    let failure = |kind, result: &ToolResultInput| ToolResultError {
        kind,
        tool_call_id: result.tool_call_id.clone(),
    };
    let mut seen = std::collections::HashSet::new();
    for result in results {
        if !seen.insert(result.tool_call_id.as_str()) {
            return Err(failure(ToolResultErrorKind::Duplicate, result));
        }
    }
    for result in results {
        if !pending
            .iter()
            .any(|p| p.call.tool_call_id == result.tool_call_id)
        {
            return Err(failure(ToolResultErrorKind::Unexpected, result));
        }
    }
    for p in pending {
        if !seen.contains(p.call.tool_call_id.as_str()) {
            return Err(ToolResultError {
                kind: ToolResultErrorKind::Missing,
                tool_call_id: p.call.tool_call_id.clone(),
            });
        }
    }
    for result in results {
        let kind = pending
            .iter()
            .find(|p| p.call.tool_call_id == result.tool_call_id)
            .map(|p| p.kind)
            .expect("checked above");
        match (&result.answer, kind) {
            (ToolAnswer::Decision { .. }, ActionKind::ClientTool) => {
                return Err(failure(ToolResultErrorKind::ApprovalForClientTool, result));
            }
            (ToolAnswer::Output { .. }, ActionKind::Approval) => {
                return Err(failure(ToolResultErrorKind::OutputForApproval, result));
            }
            _ => {}
        }
    }
    for result in results {
        if let ToolAnswer::Output { output, .. } = &result.answer
            && serde_json::from_str::<serde::de::IgnoredAny>(output).is_err()
        {
            return Err(failure(ToolResultErrorKind::InvalidJson, result));
        }
    }
    Ok(())
}

/// The transition methods of a [`ChatTx`].
impl ChatTx {
    /// `SetArchived(archived)`: `W/E0/E1 → XW/XE0/XE1` and back.
    ///
    /// # Errors
    /// Not allowed from any other state.
    ///
    /// Tested by `tests/it/transitions.rs`: `family_archive_is_all_or_nothing_and_root_only`; and `tests/it/matrix.rs`: `matrix_set_archived_true, matrix_set_archived_false` (every state).
    pub async fn set_archived(&mut self, archived: bool) -> StoreResult<()> {
        self.ops().set_archived(archived).await
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
        self.ops().send_message(input).await
    }

    /// `EditMessage(k, replacement)`: clears the queue, soft-deletes message
    /// `k` and every active message after it, answers any call left
    /// outstanding, inserts the replacement and the suffix, clears pending
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
        self.ops().edit_message(input).await
    }

    /// `DeleteQueuedMessage(qid)` from `E1`, `R1`, `I1`, `A1`.
    ///
    /// # Errors
    /// Not allowed elsewhere (an empty queue); `QueuedMessageNotFound` when
    /// `qid` is not queued on this chat.
    ///
    /// Tested by `tests/it/transitions.rs`: `delete_queued_message_unknown_id_is_not_found_and_empty_queue_is_not_allowed`; and `tests/it/matrix.rs`: `matrix_delete_queued_message` (every state).
    pub async fn delete_queued_message(
        &mut self,
        queued_message_id: i64,
    ) -> StoreResult<QueuedMessage> {
        self.confirm().await?;
        self.ops().delete_queued_message(queued_message_id).await
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
        queued_message_id: i64,
    ) -> StoreResult<PromoteQueuedMessageResult> {
        self.confirm().await?;
        self.ops().promote_queued_message(queued_message_id).await
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
        self.ops().edit_queued_message(input).await
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
        queued_message_id: i64,
        index: u64,
    ) -> StoreResult<Vec<QueuedMessage>> {
        self.confirm().await?;
        self.ops()
            .move_queued_message(queued_message_id, index)
            .await
    }

    /// `Interrupt`: `R0/R1 → I0/I1`; `A0/A1 → R0/R1` with every pending call
    /// answered "interrupted by user". Returns the synthetic result rows.
    ///
    /// # Errors
    /// Not allowed from other states.
    ///
    /// Example: [`crate::ChatMachine::update`]. Tested by `tests/it/transitions.rs`: `send_message_interrupt_from_a1_answers_pending_calls_as_interrupted_and_lands_r1`; and `tests/it/matrix.rs`: `matrix_interrupt` (every state).
    pub async fn interrupt(&mut self) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        self.ops().interrupt().await
    }

    /// `CompleteRequiresAction(results)`: `A0/A1 → R0/R1`, inserting one
    /// `tool` message per answer after exact-set validation against the
    /// pending calls ([`validate_tool_results`]), and clearing the
    /// deadline. A client tool's output becomes its result; a denial
    /// becomes the error result `{"error": "Tool call denied by user",
    /// "reason": ...}`; an approval becomes a client-only row with a
    /// `tool-approval` part, leaving the call without a result for the
    /// worker to run (API.md "Tool approval (human in the loop)").
    ///
    /// # Errors
    /// `ToolResult` validation errors; not allowed from other states.
    ///
    /// Tested by `tests/it/transitions.rs`: `complete_requires_action_validates_the_exact_set`; `tests/it/approval.rs`; and `tests/it/matrix.rs`: `matrix_complete_requires_action`, `matrix_complete_requires_action_approving`, `matrix_complete_requires_action_denying` (every state).
    pub async fn complete_requires_action(
        &mut self,
        input: CompleteRequiresActionInput,
    ) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        self.ops().complete_requires_action(input).await
    }

    /// `Acquire(worker_id, runner_id)`: overwrites ownership and upserts the
    /// runner's heartbeat at database time. Execution state is kept.
    ///
    /// # Errors
    /// Only `ChatNotFound` (allowed from every existing state).
    ///
    /// Example: [`crate::queries::chats::owned_by_worker`]. Tested by `tests/it/transitions.rs`: `acquire_writes_ownership_and_a_heartbeat`; and `tests/it/matrix.rs`: `matrix_acquire` (every state).
    pub async fn acquire(&mut self, worker_id: Uuid, runner_id: Uuid) -> StoreResult<()> {
        self.confirm().await?;
        self.ops().acquire(worker_id, runner_id).await
    }

    /// `Abandon`: clears ownership and removes the runner's heartbeat row.
    /// Callers check that they still own the chat before calling it.
    ///
    /// # Errors
    /// Not allowed when the chat is not owned (`worker_id` is null).
    ///
    /// Tested by `tests/it/transitions.rs`: `abandon_of_an_unowned_chat_is_rejected`; and `tests/it/matrix.rs`: `matrix_abandon` (every state).
    pub async fn abandon(&mut self) -> StoreResult<()> {
        self.confirm().await?;
        self.ops().abandon().await
    }

    /// `RecordGenerationAttempt`: `R0/R1`, `generation_attempt += 1` (the
    /// trigger clears `retry_state`). Returns the new attempt number.
    ///
    /// # Errors
    /// Not allowed unless running.
    ///
    /// Tested by `tests/it/transitions.rs`: `generation_attempts_count_up_and_reset_when_history_changes`; and `tests/it/matrix.rs`: `matrix_record_generation_attempt` (every state).
    pub async fn record_generation_attempt(&mut self) -> StoreResult<i64> {
        self.ops().record_generation_attempt().await
    }

    /// `RecordRetryState(payload)`: `R0/R1`, stores the retry payload (the
    /// trigger advances `retry_state_version` when it changes).
    ///
    /// # Errors
    /// Not allowed unless running.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{ChatError, ChatErrorKind, RetryState};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let attempt = tx.record_generation_attempt().await?;
    /// let retry = RetryState {
    ///     attempt,
    ///     delay_ms: 1000,
    ///     error: ChatError::new(ChatErrorKind::RateLimit, "slow down", true),
    ///     // Stored with millisecond precision.
    ///     retrying_at: chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 3),
    /// };
    /// let row = tx.record_retry_state(retry.clone()).await?;
    /// assert_eq!(row.retry_state, Some(retry));
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// The retry-state triggers are tested by `tests/it/triggers.rs`, every state by
    /// `tests/it/matrix.rs` (`matrix_record_retry_state`).
    pub async fn record_retry_state(&mut self, payload: RetryState) -> StoreResult<Chat> {
        self.ops().record_retry_state(payload).await
    }

    /// `CommitStep(messages)`: `R0/R1`, inserts the messages (one model
    /// response with all its tool results) and optionally consumes the manual
    /// compaction request.
    ///
    /// # Errors
    /// Not allowed unless running; `InvalidInput` for an empty step.
    ///
    /// Example: [`crate::ChatMessage::usage`]. Tested by `tests/it/matrix.rs`: `matrix_commit_step` (every state).
    pub async fn commit_step(
        &mut self,
        messages: Vec<NewMessage>,
        consume_compaction_request: bool,
    ) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        self.ops()
            .commit_step(messages, consume_compaction_request)
            .await
    }

    /// `CommitStep(messages)` for a step that continues the turn (the model
    /// is called again on the new history): after the step's rows, every
    /// steer message waiting in the queue enters history, in queue order, in
    /// the same transaction (API.md "Busy behaviours and the queue"), so the
    /// next model call reads them. `R1` lands in `R0` when that empties the
    /// queue. When a tool call is still without its result after the step,
    /// nothing is steered (a user message would cancel the call).
    ///
    /// # Errors
    /// As [`ChatTx::commit_step`].
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{BusyBehavior, ExecutionState, MessagePart};
    /// use chatd_store::{NewMessage, SendMessageInput};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// let steer = SendMessageInput {
    ///     message: NewMessage::user(vec![MessagePart::text("use tabs")]),
    ///     busy_behavior: BusyBehavior::Steer,
    ///     max_queue_size: None,
    /// };
    /// assert!(tx.send_message(steer).await?.queued_message.expect("queued").steer);
    /// let step = vec![NewMessage::assistant(vec![MessagePart::text("working")])];
    /// let result = tx.commit_step_steering(step, false).await?;
    /// assert_eq!(result.steered_messages[0].content.0, vec![MessagePart::text("use tabs")]);
    /// assert_eq!(tx.execution_state().await?, ExecutionState::R0);
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// More in `tests/it/transitions.rs` (`steer_*`) and `tests/it/matrix.rs`
    /// (`matrix_commit_step_steering`).
    pub async fn commit_step_steering(
        &mut self,
        messages: Vec<NewMessage>,
        consume_compaction_request: bool,
    ) -> StoreResult<CommitStepResult> {
        self.confirm().await?;
        self.ops()
            .commit_step_with(messages, consume_compaction_request, true)
            .await
    }

    /// `EnterRequiresAction`: `R0/R1 → A0/A1` with
    /// `requires_action_deadline_at = now() + requires_action_timeout`
    /// (database time); clears `retry_state`. Returns the deadline.
    ///
    /// # Errors
    /// Not allowed unless running.
    ///
    /// Example: [`crate::queries::chats::requires_action_remaining_secs`]. Tested by `tests/it/transitions.rs`: `enter_requires_action_sets_the_deadline_from_database_time`; and `tests/it/matrix.rs`: `matrix_enter_requires_action` (every state).
    pub async fn enter_requires_action(&mut self) -> StoreResult<DateTime<Utc>> {
        self.ops().enter_requires_action().await
    }

    /// `FinishInterruption(partial?)`: `I0 → W`, `I1 → R0/R1` with the queue
    /// head promoted. Inserts the partial rows, then answers every call left
    /// outstanding "interrupted by user"; clears `retry_state` (an interrupt
    /// during a retry's back-off leaves no retry pending).
    ///
    /// # Errors
    /// Not allowed unless interrupting.
    ///
    /// Example: [`ChatTx::commit`]. Tested by `tests/it/transitions.rs`: `finish_interruption_keeps_partial_text_and_answers_unfinished_calls`; and `tests/it/matrix.rs`: `matrix_finish_interruption` (every state).
    pub async fn finish_interruption(
        &mut self,
        partial_messages: Vec<NewMessage>,
    ) -> StoreResult<FinishInterruptionResult> {
        self.confirm().await?;
        self.ops().finish_interruption(partial_messages).await
    }

    /// `FinishTurn`: `R0 → W`; `R1 → R0/R1` with the queue head promoted;
    /// clears `retry_state`.
    ///
    /// # Errors
    /// Not allowed unless running.
    ///
    /// Example: [`crate::queries::chats::delete_family`]. Tested by `tests/it/transitions.rs`: `finish_turn_from_r1_promotes_the_head_with_its_queued_id`; and `tests/it/matrix.rs`: `matrix_finish_turn` (every state).
    pub async fn finish_turn(&mut self) -> StoreResult<FinishTurnResult> {
        self.ops().finish_turn().await
    }

    /// `FinishError(err)`: `R0/R1 → E0/E1`, `last_error = err` (overwriting);
    /// clears `retry_state` (the error replaces the retry announcement).
    ///
    /// # Errors
    /// Not allowed unless running.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{ChatError, ChatErrorKind, ExecutionState};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let error = ChatError::new(ChatErrorKind::Generic, "The turn failed.", false);
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// tx.finish_error(error.clone()).await?;
    /// let row = tx.commit().await?;
    /// assert_eq!(row.last_error, Some(error));
    /// assert_eq!(row.execution_state(false), ExecutionState::E0);
    /// # Ok(()) }
    /// ```
    ///
    /// Every state: `tests/it/matrix.rs` (`matrix_finish_error`).
    pub async fn finish_error(&mut self, last_error: ChatError) -> StoreResult<()> {
        self.ops().finish_error(last_error).await
    }

    /// `CancelRequiresAction`: `A0/A1 → R0/R1`, answering every pending call
    /// with `reason` (default "Tool execution timed out").
    ///
    /// # Errors
    /// Not allowed unless requires_action.
    ///
    /// Tested by `tests/it/transitions.rs`: `cancel_requires_action_answers_pending_calls_as_timed_out`; and `tests/it/matrix.rs`: `matrix_cancel_requires_action` (every state).
    pub async fn cancel_requires_action(
        &mut self,
        reason: Option<&str>,
    ) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        self.ops()
            .cancel_requires_action(reason.unwrap_or(TIMED_OUT_TOOL_RESULT))
            .await
    }

    /// `RequestCompaction`: `W/E0 → R0`, `E1 → R1`; sets the compaction marker,
    /// clears the error and ownership, and starts a fresh history epoch
    /// (`history_version = snapshot_version`, `generation_attempt = 0`).
    ///
    /// # Errors
    /// Not allowed from busy or archived states.
    ///
    /// Tested by `tests/it/transitions.rs`: `request_compaction_hands_off_ownership_with_a_fresh_epoch`; and `tests/it/matrix.rs`: `matrix_request_compaction` (every state).
    pub async fn request_compaction(&mut self) -> StoreResult<()> {
        self.ops().request_compaction().await
    }

    /// `ClearContext(boundary)`: `W/E0 → W`, inserting the caller-built
    /// boundary rows and clearing error and compaction request.
    ///
    /// # Errors
    /// `InvalidInput` for an empty batch; not allowed from other states.
    ///
    /// Tested by `tests/it/matrix.rs`: `matrix_clear_context` (every state).
    pub async fn clear_context(
        &mut self,
        messages: Vec<NewMessage>,
    ) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        self.ops().clear_context(messages).await
    }

    /// `ReconcileInvalidState`: `Invalid → E0/E1` (spec "Invalid states"):
    /// unarchives, sets `error` with `last_error`, clears the deadline and
    /// `retry_state`, and answers pending calls with "cancelled".
    ///
    /// # Errors
    /// Not allowed unless the chat is invalid.
    ///
    /// Tested by `tests/it/transitions.rs`: `reconcile_invalid_state_unarchives_into_error`; and `tests/it/matrix.rs`: `matrix_reconcile_invalid_state` (every state).
    pub async fn reconcile_invalid_state(
        &mut self,
        last_error: ChatError,
    ) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        self.ops().reconcile_invalid_state(last_error).await
    }
}

/// The transition implementations over one connection and chat; shared by
/// [`ChatTx`] and the family-archive cascade.
pub(crate) struct Ops<'a> {
    pub(crate) conn: &'a mut PgConnection,
    pub(crate) chat_id: Uuid,
    pub(crate) config: &'a StoreConfig,
    pub(crate) applied: &'a mut Vec<(Transition, ExecutionState, ExecutionState)>,
    /// [`crate::ChatTx`]'s knowledge of the row: taken by [`Ops::enter`]
    /// (so nothing written after it is mistaken for the state), set again by
    /// [`Ops::land`] from its post-transition read.
    pub(crate) known: &'a mut Option<queries::chats::ChatFacts>,
    /// The facts returned by the transition's last statement when it was
    /// [`Ops::change`]: [`Ops::land`] checks them instead of reading the
    /// row. Any other use of the connection ([`Ops::db`]) forgets them.
    pub(crate) landing: Option<queries::chats::ChatFacts>,
    /// [`crate::ChatTx`]'s log of its context entries: the inserts append
    /// to it, any other history write forgets it.
    pub(crate) history: &'a mut crate::context_cache::HistoryLog,
    /// [`crate::ChatTx`]'s `row_behind`: set by [`Ops::land_appended`],
    /// cleared by every landing that reads the row.
    pub(crate) row_behind: &'a mut bool,
    /// [`crate::ChatTx`]'s unchecked guess of an optimistic bundle: `known`
    /// is the row this replica last committed, at this version. The first
    /// statement checks it: [`Ops::change`] in its `UPDATE`, anything else
    /// after [`Ops::confirm_guess`].
    pub(crate) guess: &'a mut Option<i64>,
    /// [`crate::ChatTx`]'s `missed`: set when the guess was stale.
    pub(crate) missed: &'a mut bool,
}

/// The connection of an [`Ops`], for any statement: forgets the facts of
/// an earlier [`Ops::change`], which that statement may make stale. (A
/// macro, so that it borrows only the `conn` field and `self.chat_id` can
/// be passed beside it.)
macro_rules! db {
    ($ops:expr) => {{
        debug_assert!(
            $ops.guess.is_none(),
            "an optimistic bundle's guess must be checked before any other statement"
        );
        $ops.landing = None;
        &mut *$ops.conn
    }};
}

impl Ops<'_> {
    /// The chat row (`None` for a missing chat, `N`) with its queue length
    /// and heartbeat age: what the bundle knows when nothing was written
    /// since it was read, else read now. Either way the bundle knows nothing
    /// afterwards, until the next [`Ops::land`]. After
    /// [`Ops::land_appended`] the row's trigger-kept columns are behind
    /// (`ChatTx::row_behind`); the state, queue length and heartbeat age
    /// are current.
    async fn state_facts(&mut self) -> StoreResult<Option<queries::chats::ChatFacts>> {
        Ok(match self.known.take() {
            Some(facts) => Some(facts),
            None => {
                *self.row_behind = false;
                self.select_facts().await?
            }
        })
    }

    /// Takes the state and validates the transition against the matrix.
    async fn enter(&mut self, transition: Transition) -> StoreResult<(Chat, i64, ExecutionState)> {
        let (facts, from) = self.enter_facts(transition).await?;
        Ok((facts.chat, facts.queue_len, from))
    }

    /// [`Ops::enter`] returning the state's facts whole.
    async fn enter_facts(
        &mut self,
        transition: Transition,
    ) -> StoreResult<(queries::chats::ChatFacts, ExecutionState)> {
        if *self.missed {
            // A stale guess: the bundle is dead, nothing more runs in it.
            return Err(crate::error::StoreError::GuessMissed);
        }
        let facts = self.state_facts().await?;
        let from = match &facts {
            Some(facts) => facts.execution_state(),
            None => classify(None),
        };
        if let Err(err) = matrix::check(transition, from) {
            // Rejected on a guessed row: only if the row is still that one.
            self.confirm_guess().await?;
            record_transition(transition, "rejected");
            return Err(StateError::from(err).into());
        }
        // The matrix admits no transition of these from `N`, so a missing
        // row was rejected just above.
        let facts = facts.ok_or(StateError::ChatNotFound)?;
        Ok((facts, from))
    }

    /// Reads the result, classifies it and checks the matrix lists it. The
    /// read is what the bundle knows next: the following transition and the
    /// commit (which brings `Chat.context` up to date once, when the bundle
    /// changed the history) do not read it again.
    async fn land(
        &mut self,
        transition: Transition,
        from: ExecutionState,
    ) -> StoreResult<ExecutionState> {
        let facts = match self.landing.take() {
            Some(facts) => Some(facts),
            // Rows appended, entries known: bring `Chat.context` up to date
            // in the statement that reads the result.
            None if self.history.needs_refresh() => {
                let entries = self.history.entries().expect("known");
                let facts =
                    queries::messages::refresh_context_facts(db!(self), self.chat_id, &entries)
                        .await?;
                self.history.mark_refreshed();
                Some(facts)
            }
            None => self.select_facts().await?,
        };
        let to = match &facts {
            Some(facts) => facts.execution_state(),
            None => classify(None),
        };
        matrix::check_landing(transition, from, to).map_err(StateError::from)?;
        *self.known = facts;
        *self.row_behind = false;
        self.applied.push((transition, from, to));
        Ok(to)
    }

    /// [`Ops::land`] of a transition that only inserted messages whose
    /// context entries the log knows, since `before` (its state's facts):
    /// inserts change none of what the execution state is made of (status,
    /// archived, queue), so the state is `from` again and nothing is read.
    /// The row's context and trigger-kept columns are brought up to date by
    /// the next transition's `UPDATE` or the commit (`ChatTx::row_behind`),
    /// which saves a step that a finish follows one statement.
    fn land_appended(
        &mut self,
        transition: Transition,
        from: ExecutionState,
        before: queries::chats::ChatFacts,
    ) -> StoreResult<ExecutionState> {
        debug_assert!(self.history.needs_refresh() && self.landing.is_none());
        debug_assert_eq!(before.execution_state(), from);
        matrix::check_landing(transition, from, from).map_err(StateError::from)?;
        *self.known = Some(before);
        *self.row_behind = true;
        self.applied.push((transition, from, from));
        Ok(from)
    }

    /// Checks an optimistic bundle's guess before a statement that cannot
    /// check it itself: locks the row and bumps it as the lock-and-bump of
    /// an ordinary bundle does ([`crate::ChatTx::confirm`]). Nothing to do
    /// once checked.
    ///
    /// # Errors
    /// `GuessMissed` when the row moved on since the guess; database errors.
    async fn confirm_guess(&mut self) -> StoreResult<()> {
        self.check_guess().await.map(|_| ())
    }

    /// [`Ops::confirm_guess`] returning, when it checked the guess now, the
    /// new `updated_at` and the runner's heartbeat age (what
    /// `queries::chats::lock_and_bump_guessed` reads beside the lock).
    pub(crate) async fn check_guess(
        &mut self,
    ) -> StoreResult<Option<(chrono::DateTime<chrono::Utc>, Option<f64>)>> {
        let Some(guess) = self.guess.take() else {
            return Ok(None);
        };
        match queries::chats::lock_and_bump_guessed(&mut *self.conn, self.chat_id, guess).await? {
            Some(read) => Ok(Some(read)),
            None => {
                *self.missed = true;
                crate::machine::record_guess_missed();
                Err(crate::error::StoreError::GuessMissed)
            }
        }
    }

    fn reject(&self, transition: Transition, err: StateError) -> crate::error::StoreError {
        record_transition(transition, "rejected");
        err.into()
    }

    async fn insert(&mut self, message: &NewMessage) -> StoreResult<ChatMessage> {
        let row = queries::messages::insert(db!(self), self.chat_id, message, None).await?;
        self.history.appended(&row);
        Ok(row)
    }

    /// The row's facts, with the context entries unless the bundle knows
    /// them ([`crate::context_cache`]).
    async fn select_facts(&mut self) -> StoreResult<Option<queries::chats::ChatFacts>> {
        let entries = !self.history.is_known();
        Ok(queries::chats::select_facts_with(db!(self), self.chat_id, entries).await?)
    }

    /// Answers every outstanding tool call of active history with a
    /// synthetic error result `reason`, one `tool` message per call.
    async fn answer_outstanding(&mut self, reason: &str) -> StoreResult<Vec<ChatMessage>> {
        let outstanding = self.pending_calls().await?;
        let mut inserted = Vec::with_capacity(outstanding.len());
        for call in &outstanding {
            let message = NewMessage::tool(vec![MessagePart::synthetic_result(call, reason)]);
            inserted.push(self.insert(&message).await?);
        }
        Ok(inserted)
    }

    /// The tool calls of the history's tail without a result: what the
    /// bundle's history log knows ([`crate::context_cache`]: held with the
    /// cached entries and kept up to date by every append), else read now
    /// (and then known to the log for the rest of the bundle and, after the
    /// commit, to the next bundle).
    async fn pending_calls(&mut self) -> StoreResult<Vec<ToolCallRef>> {
        if let Some(calls) = self.history.outstanding() {
            return Ok(calls.to_vec());
        }
        let tail = queries::messages::tail_contents(db!(self), self.chat_id).await?;
        let calls = outstanding_tool_calls(tail.iter().map(Vec::as_slice));
        self.history.set_outstanding(calls.clone());
        Ok(calls)
    }

    /// Inserts a user message after answering outstanding calls; records the
    /// model config and effort it carries on the chat.
    async fn insert_user(
        &mut self,
        message: &NewMessage,
        queued_message_id: Option<i64>,
        reason: &str,
    ) -> StoreResult<Vec<ChatMessage>> {
        let mut inserted = self.answer_outstanding(reason).await?;
        let mut message = message.clone();
        message.role = Some(ChatRole::User);
        let row =
            queries::messages::insert(db!(self), self.chat_id, &message, queued_message_id).await?;
        self.history.appended(&row);
        inserted.push(row);
        if message.model_config_id.is_some() || message.reasoning_effort.is_some() {
            let changes = ChatChanges {
                last_model_config_id: message.model_config_id,
                last_reasoning_effort: message.reasoning_effort.clone(),
                ..ChatChanges::default()
            };
            queries::chats::update_execution(db!(self), self.chat_id, &changes).await?;
            self.history.unrefresh();
        }
        Ok(inserted)
    }

    /// Pops the queue head into history. `None` when the queue is empty.
    async fn promote_head(
        &mut self,
        reason: &str,
    ) -> StoreResult<Option<(QueuedMessage, Vec<ChatMessage>)>> {
        let Some(head) = queries::queue::pop_head(db!(self), self.chat_id).await? else {
            return Ok(None);
        };
        let inserted = self
            .insert_user(&queued_to_message(&head), Some(head.id), reason)
            .await?;
        Ok(Some((head, inserted)))
    }

    /// Takes every steer message out of the queue into history, in queue
    /// order; returns the user rows (an outstanding call, which a caller
    /// has normally answered already, gets the synthetic `reason` first and
    /// is not returned).
    async fn promote_steer(&mut self, reason: &str) -> StoreResult<Vec<ChatMessage>> {
        let steer = queries::queue::pop_steer(db!(self), self.chat_id).await?;
        let mut promoted = Vec::with_capacity(steer.len());
        for queued in &steer {
            let mut inserted = self
                .insert_user(&queued_to_message(queued), Some(queued.id), reason)
                .await?;
            promoted.extend(inserted.pop());
        }
        Ok(promoted)
    }

    /// Writes execution-state columns; the returned facts are what
    /// [`Ops::land`] checks when nothing else touches the connection first.
    async fn change(&mut self, changes: ChatChanges) -> StoreResult<Chat> {
        if changes.last_model_config_id.is_some() {
            self.history.unrefresh();
        }
        let entries = !self.history.is_known();
        // Rows appended, entries known: `Chat.context` in the same statement.
        let context = if self.history.needs_refresh() && changes.last_model_config_id.is_none() {
            self.history
                .entries()
                .map(|known| queries::messages::context_values(&known))
        } else {
            None
        };
        // An optimistic bundle's first write locks, bumps and checks the
        // guess in this one statement.
        let guess = self.guess.take();
        let facts = queries::chats::update_execution_guarded(
            db!(self),
            self.chat_id,
            &changes,
            entries,
            context,
            guess,
        )
        .await?;
        let Some(facts) = facts else {
            *self.missed = true;
            crate::machine::record_guess_missed();
            return Err(crate::error::StoreError::GuessMissed);
        };
        if context.is_some() {
            self.history.mark_refreshed();
        }
        let chat = facts.chat.clone();
        self.landing = Some(facts);
        Ok(chat)
    }

    fn check_queue_room(&self, transition: Transition, queued: i64, max: i64) -> StoreResult<()> {
        if queued >= max {
            return Err(self.reject(transition, StateError::MessageQueueFull { max }));
        }
        Ok(())
    }

    pub(crate) async fn set_archived(&mut self, archived: bool) -> StoreResult<()> {
        let t = Transition::SetArchived { archived };
        let (_, _, from) = self.enter(t).await?;
        let mut changes = ChatChanges {
            archived: Some(archived),
            ..ChatChanges::default()
        };
        if !archived && from == ExecutionState::XW {
            changes.last_error = None;
        }
        self.change(changes).await?;
        self.land(t, from).await?;
        Ok(())
    }

    pub(crate) async fn send_message(
        &mut self,
        input: SendMessageInput,
    ) -> StoreResult<SendMessageResult> {
        use ExecutionState as S;
        let t = Transition::SendMessage {
            busy_behavior: input.busy_behavior,
        };
        let (_, queued, from) = self.enter(t).await?;
        let max = input
            .max_queue_size
            .unwrap_or(self.config.max_queued_messages);
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

    pub(crate) async fn edit_message(
        &mut self,
        input: EditMessageInput,
    ) -> StoreResult<EditMessageResult> {
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

    pub(crate) async fn delete_queued_message(&mut self, id: i64) -> StoreResult<QueuedMessage> {
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

    pub(crate) async fn promote_queued_message(
        &mut self,
        id: i64,
    ) -> StoreResult<PromoteQueuedMessageResult> {
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

    pub(crate) async fn edit_queued_message(
        &mut self,
        input: EditQueuedMessageInput,
    ) -> StoreResult<QueuedMessage> {
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

    pub(crate) async fn move_queued_message(
        &mut self,
        id: i64,
        index: u64,
    ) -> StoreResult<Vec<QueuedMessage>> {
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

    pub(crate) async fn interrupt(&mut self) -> StoreResult<Vec<ChatMessage>> {
        use ExecutionState as S;
        let t = Transition::Interrupt;
        let (_, _, from) = self.enter(t).await?;
        let mut cancellations = Vec::new();
        match from {
            S::R0 | S::R1 => {
                self.change(status(ChatStatus::Interrupting)).await?;
            }
            S::A0 | S::A1 => {
                cancellations = self.answer_outstanding(INTERRUPTED_TOOL_RESULT).await?;
                self.change(running_clearing_deadline()).await?;
            }
            _ => unreachable!("the matrix admits no other state"),
        }
        self.land(t, from).await?;
        Ok(cancellations)
    }

    pub(crate) async fn complete_requires_action(
        &mut self,
        input: CompleteRequiresActionInput,
    ) -> StoreResult<Vec<ChatMessage>> {
        let t = Transition::CompleteRequiresAction;
        let (chat, _, from) = self.enter(t).await?;
        let dynamic = chat.dynamic_tool_names();
        let tail = queries::messages::tail_contents(db!(self), self.chat_id).await?;
        let pending = pending_actions(tail.iter().map(Vec::as_slice), |name| {
            dynamic.iter().any(|d| d == name)
        });
        if let Err(err) = validate_tool_results(&input.results, &pending) {
            return Err(self.reject(t, err.into()));
        }
        let mut inserted = Vec::with_capacity(input.results.len() + input.suffix_messages.len());
        // Answers are stored in the order the calls were made, whatever
        // order they were submitted in. An approval is a client-only row
        // (the model never sees it) that leaves the call without a result:
        // the worker finds it there, after a crash too, and runs the call.
        for p in &pending {
            let call = &p.call;
            let result = input
                .results
                .iter()
                .find(|r| r.tool_call_id == call.tool_call_id)
                .expect("validated");
            let mut message = match &result.answer {
                ToolAnswer::Output { output, is_error } => {
                    let value: Value = serde_json::from_str(output).expect("validated");
                    NewMessage::tool(vec![MessagePart::ToolResult {
                        tool_call_id: call.tool_call_id.clone(),
                        tool_name: call.tool_name.clone(),
                        result: value,
                        is_error: *is_error,
                    }])
                }
                ToolAnswer::Decision {
                    approved: true,
                    reason,
                } => {
                    let mut message = NewMessage::tool(vec![MessagePart::ToolApproval {
                        tool_call_id: call.tool_call_id.clone(),
                        tool_name: call.tool_name.clone(),
                        approved: true,
                        reason: reason.clone(),
                    }]);
                    message.visibility = Visibility::User;
                    message
                }
                ToolAnswer::Decision {
                    approved: false,
                    reason,
                } => NewMessage::tool(vec![MessagePart::denied_result(call, reason.as_deref())]),
            };
            message.created_by = input.created_by;
            message.model_config_id = input.model_config_id;
            inserted.push(self.insert(&message).await?);
        }
        for message in &input.suffix_messages {
            inserted.push(self.insert(message).await?);
        }
        self.change(running_clearing_deadline()).await?;
        self.land(t, from).await?;
        Ok(inserted)
    }

    pub(crate) async fn acquire(&mut self, worker_id: Uuid, runner_id: Uuid) -> StoreResult<()> {
        let t = Transition::Acquire;
        let (_, _, from) = self.enter(t).await?;
        // The heartbeat first, so that the ownership change is the last
        // write and its returned facts are what `land` checks.
        queries::heartbeats::upsert(db!(self), self.chat_id, runner_id).await?;
        self.change(ChatChanges {
            ownership: Some((Some(worker_id), Some(runner_id))),
            ..ChatChanges::default()
        })
        .await?;
        self.land(t, from).await?;
        Ok(())
    }

    pub(crate) async fn abandon(&mut self) -> StoreResult<()> {
        let t = Transition::Abandon;
        let (chat, _, from) = self.enter(t).await?;
        if chat.worker_id.is_none() {
            let err = chatd_core::TransitionError::new(t, from, "chat is not owned");
            return Err(self.reject(t, StateError::TransitionNotAllowed(err)));
        }
        // The heartbeat first: the ownership change is the last write.
        if let Some(runner) = chat.runner_id {
            queries::heartbeats::delete(db!(self), self.chat_id, runner).await?;
        }
        self.change(ChatChanges {
            ownership: Some((None, None)),
            ..ChatChanges::default()
        })
        .await?;
        self.land(t, from).await?;
        Ok(())
    }

    pub(crate) async fn record_generation_attempt(&mut self) -> StoreResult<i64> {
        let t = Transition::RecordGenerationAttempt;
        let (_, _, from) = self.enter(t).await?;
        let chat = self
            .change(ChatChanges {
                bump_generation_attempt: true,
                ..ChatChanges::default()
            })
            .await?;
        self.land(t, from).await?;
        Ok(chat.generation_attempt)
    }

    pub(crate) async fn record_retry_state(&mut self, payload: RetryState) -> StoreResult<Chat> {
        let t = Transition::RecordRetryState;
        let (_, _, from) = self.enter(t).await?;
        let chat = self
            .change(ChatChanges {
                retry_state: Some(Some(payload)),
                ..ChatChanges::default()
            })
            .await?;
        self.land(t, from).await?;
        Ok(chat)
    }

    pub(crate) async fn commit_step(
        &mut self,
        messages: Vec<NewMessage>,
        consume_compaction_request: bool,
    ) -> StoreResult<Vec<ChatMessage>> {
        let result = self
            .commit_step_with(messages, consume_compaction_request, false)
            .await?;
        Ok(result.inserted_messages)
    }

    pub(crate) async fn commit_step_with(
        &mut self,
        messages: Vec<NewMessage>,
        consume_compaction_request: bool,
        steer: bool,
    ) -> StoreResult<CommitStepResult> {
        let t = Transition::CommitStep;
        let (before, from) = self.enter_facts(t).await?;
        if messages.is_empty() {
            return Err(self.reject(
                t,
                StateError::InvalidInput {
                    field: "messages",
                    detail: "a step must insert at least one message".into(),
                },
            ));
        }
        let mut inserted = Vec::with_capacity(messages.len());
        for message in &messages {
            inserted.push(self.insert(message).await?);
        }
        // The steer messages follow the step's tool results directly. A
        // step that leaves a call without its result does not continue the
        // turn: inserting a user message would cancel that call, so the
        // steer messages wait (for the next continuing step or the turn's
        // end).
        let steered_messages = if steer && self.pending_calls().await?.is_empty() {
            self.promote_steer(CANCELLED_TOOL_RESULT).await?
        } else {
            Vec::new()
        };
        if consume_compaction_request {
            self.change(ChatChanges {
                compaction_requested: Some(false),
                ..ChatChanges::default()
            })
            .await?;
        }
        if steered_messages.is_empty() && self.landing.is_none() && self.history.needs_refresh() {
            // Only the step's messages were written, and the log knows them.
            self.land_appended(t, from, before)?;
        } else {
            self.land(t, from).await?;
        }
        Ok(CommitStepResult {
            inserted_messages: inserted,
            steered_messages,
        })
    }

    pub(crate) async fn enter_requires_action(&mut self) -> StoreResult<DateTime<Utc>> {
        let t = Transition::EnterRequiresAction;
        let (_, _, from) = self.enter(t).await?;
        let secs = self.config.requires_action_timeout.as_secs_f64();
        let chat = self
            .change(ending_generation(ChatChanges {
                status: Some(ChatStatus::RequiresAction),
                deadline_in_secs: Some(Some(secs)),
                ..ChatChanges::default()
            }))
            .await?;
        self.land(t, from).await?;
        Ok(chat
            .requires_action_deadline_at
            .expect("deadline was just set"))
    }

    pub(crate) async fn finish_interruption(
        &mut self,
        partial: Vec<NewMessage>,
    ) -> StoreResult<FinishInterruptionResult> {
        let t = Transition::FinishInterruption;
        let (_, _, from) = self.enter(t).await?;
        let mut result = FinishInterruptionResult::default();
        for message in &partial {
            result.inserted_messages.push(self.insert(message).await?);
        }
        result
            .inserted_messages
            .extend(self.answer_outstanding(INTERRUPTED_TOOL_RESULT).await?);
        if from == ExecutionState::I1 {
            if let Some((_, mut inserted)) = self.promote_head(INTERRUPTED_TOOL_RESULT).await? {
                result.promoted_message = inserted.pop();
                result.inserted_messages.extend(inserted);
            }
            self.change(ending_generation(running_clearing_deadline()))
                .await?;
        } else {
            self.change(ending_generation(ChatChanges {
                status: Some(ChatStatus::Waiting),
                deadline_in_secs: Some(None),
                ..ChatChanges::default()
            }))
            .await?;
        }
        self.land(t, from).await?;
        Ok(result)
    }

    pub(crate) async fn finish_turn(&mut self) -> StoreResult<FinishTurnResult> {
        let t = Transition::FinishTurn;
        let (_, _, from) = self.enter(t).await?;
        let mut result = FinishTurnResult::default();
        let mut changes = ending_generation(ChatChanges::default());
        if from == ExecutionState::R1 {
            self.confirm_guess().await?;
            // Steer messages were meant for this turn: they go first, all
            // together, as the next one.
            let steered = self.promote_steer(CANCELLED_TOOL_RESULT).await?;
            if !steered.is_empty() {
                result.promoted_message = steered.last().cloned();
                result.promoted_messages = steered;
            } else if let Some((_, mut inserted)) = self.promote_head(CANCELLED_TOOL_RESULT).await?
            {
                result.promoted_message = inserted.pop();
                result.promoted_messages = result.promoted_message.iter().cloned().collect();
                result.cancellation_messages = inserted;
            }
        } else {
            changes.status = Some(ChatStatus::Waiting);
        }
        self.change(changes).await?;
        self.land(t, from).await?;
        Ok(result)
    }

    pub(crate) async fn finish_error(&mut self, last_error: ChatError) -> StoreResult<()> {
        let t = Transition::FinishError;
        let (_, _, from) = self.enter(t).await?;
        self.change(ending_generation(ChatChanges {
            status: Some(ChatStatus::Error),
            last_error: Some(Some(last_error)),
            deadline_in_secs: Some(None),
            ..ChatChanges::default()
        }))
        .await?;
        self.land(t, from).await?;
        Ok(())
    }

    pub(crate) async fn cancel_requires_action(
        &mut self,
        reason: &str,
    ) -> StoreResult<Vec<ChatMessage>> {
        let t = Transition::CancelRequiresAction;
        let (_, _, from) = self.enter(t).await?;
        let cancellations = self.answer_outstanding(reason).await?;
        self.change(running_clearing_deadline()).await?;
        self.land(t, from).await?;
        Ok(cancellations)
    }

    pub(crate) async fn request_compaction(&mut self) -> StoreResult<()> {
        let t = Transition::RequestCompaction;
        let (_, _, from) = self.enter(t).await?;
        self.change(ChatChanges {
            compaction_requested: Some(true),
            ownership: Some((None, None)),
            fresh_history_epoch: true,
            ..running_clearing_error()
        })
        .await?;
        self.land(t, from).await?;
        Ok(())
    }

    pub(crate) async fn clear_context(
        &mut self,
        messages: Vec<NewMessage>,
    ) -> StoreResult<Vec<ChatMessage>> {
        let t = Transition::ClearContext;
        let (_, _, from) = self.enter(t).await?;
        if messages.is_empty() {
            return Err(self.reject(
                t,
                StateError::InvalidInput {
                    field: "messages",
                    detail: "a context boundary needs at least one message".into(),
                },
            ));
        }
        let mut inserted = Vec::with_capacity(messages.len());
        for message in &messages {
            inserted.push(self.insert(message).await?);
        }
        self.change(ChatChanges {
            status: Some(ChatStatus::Waiting),
            last_error: Some(None),
            compaction_requested: Some(false),
            ..ChatChanges::default()
        })
        .await?;
        self.land(t, from).await?;
        Ok(inserted)
    }

    pub(crate) async fn reconcile_invalid_state(
        &mut self,
        last_error: ChatError,
    ) -> StoreResult<Vec<ChatMessage>> {
        let t = Transition::ReconcileInvalidState;
        let (_, _, from) = self.enter(t).await?;
        let cancellations = self.answer_outstanding(CANCELLED_TOOL_RESULT).await?;
        self.change(ending_generation(ChatChanges {
            archived: Some(false),
            status: Some(ChatStatus::Error),
            last_error: Some(Some(last_error)),
            deadline_in_secs: Some(None),
            ..ChatChanges::default()
        }))
        .await?;
        self.land(t, from).await?;
        Ok(cancellations)
    }
}

fn status(status: ChatStatus) -> ChatChanges {
    ChatChanges {
        status: Some(status),
        ..ChatChanges::default()
    }
}

fn running_clearing_error() -> ChatChanges {
    ChatChanges {
        status: Some(ChatStatus::Running),
        last_error: Some(None),
        ..ChatChanges::default()
    }
}

fn running_clearing_deadline() -> ChatChanges {
    ChatChanges {
        status: Some(ChatStatus::Running),
        deadline_in_secs: Some(None),
        ..ChatChanges::default()
    }
}

/// `changes` plus clearing `retry_state`: the generation attempt the payload
/// announced is over, so no retry is coming (see the module doc).
fn ending_generation(changes: ChatChanges) -> ChatChanges {
    ChatChanges {
        retry_state: Some(None),
        ..changes
    }
}

fn queued_to_message(queued: &QueuedMessage) -> NewMessage {
    NewMessage {
        role: Some(ChatRole::User),
        content: queued.content.0.clone(),
        created_by: queued.created_by,
        model_config_id: queued.model_config_id,
        reasoning_effort: queued.reasoning_effort.clone(),
        client_message_id: queued.client_message_id.clone(),
        ..NewMessage::default()
    }
}
