//! A runner's turn: `Acquire`, `Abandon`, `RecordGenerationAttempt`,
//! `RecordRetryState`, `CommitStep`, `FinishTurn`, `FinishError`, and
//! `ReconcileInvalidState`, which ends an invalid chat in `error` (spec
//! "Transitions", "Invalid states", "Retry state version").

use chatd_core::{
    CANCELLED_TOOL_RESULT, ChatError, ChatStatus, ExecutionState, RetryState, StateError,
    Transition,
};
use uuid::Uuid;

use super::ending_generation;
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::models::{Chat, ChatMessage, NewMessage};
use crate::queries::{self, chats::ChatChanges};

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

impl ChatTx {
    /// `Acquire(worker_id, runner_id)`: overwrites ownership and upserts the
    /// runner's heartbeat at database time. Execution state is kept.
    ///
    /// # Errors
    /// Only `ChatNotFound` (allowed from every existing state).
    ///
    /// Example: [`crate::queries::chats::owned_by_worker`]. Tested by `tests/it/transitions.rs`: `acquire_writes_ownership_and_a_heartbeat`; and `tests/it/matrix.rs`: `matrix_acquire` (every state).
    pub async fn acquire(&mut self, worker_id: Uuid, runner_id: Uuid) -> StoreResult<()> {
        self.confirm().await?;
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

    /// `Abandon`: clears ownership and removes the runner's heartbeat row.
    /// Callers check that they still own the chat before calling it.
    ///
    /// # Errors
    /// Not allowed when the chat is not owned (`worker_id` is null).
    ///
    /// Tested by `tests/it/transitions.rs`: `abandon_of_an_unowned_chat_is_rejected`; and `tests/it/matrix.rs`: `matrix_abandon` (every state).
    pub async fn abandon(&mut self) -> StoreResult<()> {
        self.confirm().await?;
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

    /// `RecordGenerationAttempt`: `R0/R1`, `generation_attempt += 1` (the
    /// trigger clears `retry_state`). Returns the new attempt number.
    ///
    /// # Errors
    /// Not allowed unless running.
    ///
    /// Tested by `tests/it/transitions.rs`: `generation_attempts_count_up_and_reset_when_history_changes`; and `tests/it/matrix.rs`: `matrix_record_generation_attempt` (every state).
    pub async fn record_generation_attempt(&mut self) -> StoreResult<i64> {
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
        let result = self
            .commit_step_with(messages, consume_compaction_request, false)
            .await?;
        Ok(result.inserted_messages)
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
        self.commit_step_with(messages, consume_compaction_request, true)
            .await
    }

    async fn commit_step_with(
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

    /// `FinishTurn`: `R0 → W`; `R1 → R0/R1` with the queue head promoted;
    /// clears `retry_state`.
    ///
    /// # Errors
    /// Not allowed unless running.
    ///
    /// Example: [`crate::queries::chats::delete_family`]. Tested by `tests/it/transitions.rs`: `finish_turn_from_r1_promotes_the_head_with_its_queued_id`; and `tests/it/matrix.rs`: `matrix_finish_turn` (every state).
    pub async fn finish_turn(&mut self) -> StoreResult<FinishTurnResult> {
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
