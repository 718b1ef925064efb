//! Every transition of the core state machine (`spec/chatd-architecture.md`,
//! "Transitions", "Miscellaneous transition rules", "Invalid states" and the
//! endpoint tables; `spec/chatstate-package.md`, the `Tx` methods).
//!
//! Each method follows one shape: read the chat row and queue cardinality
//! under the lock (`ChatTx::enter`), reject with the matrix's error when the
//! pair is not listed (nothing written), perform the writes, then classify the
//! result and check that the matrix lists the landing state (`ChatTx::land`).
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
//!
//! One file per family of transitions, each transition written once, as a
//! method of [`ChatTx`] with its input and result types beside it:
//! `send`, `edit`, `queue`, `interrupt`, `requires_action`, `step`
//! (acquiring, attempts, steps and finishing a turn), `archive` (one chat,
//! and the family operations of [`crate::Store`]), `context` (compaction
//! and clearing) and `create` (a new chat, or a child inside a bundle). This module holds what they share: entering a transition
//! (`ChatTx::enter`), landing it (`ChatTx::land`), and the writes that
//! keep the miscellaneous rules. The bundle they run in (begin, commit,
//! publication) is `crate::bundle`.

use chatd_core::{
    ChatRole, ChatStatus, ExecutionState, MessagePart, StateError, ToolCallRef, Transition,
    classify, matrix, outstanding_tool_calls,
};

use crate::bundle::guess::{Guess, record_guess_missed};
use crate::bundle::{ChatTx, record_transition};
use crate::error::StoreResult;
use crate::models::{Chat, ChatFacts, ChatMessage, NewMessage, QueuedMessage};
use crate::queries::{self, chats::ChatChanges};

/// The connection of a [`ChatTx`], for any statement of a transition:
/// forgets the facts of an earlier `ChatTx::change`, which that statement
/// may make stale. (A macro, so that it borrows only the `tx` field and
/// `self.chat_id` can be passed beside it.)
macro_rules! db {
    ($tx:expr) => {{
        debug_assert!(
            $tx.guess.pending().is_none(),
            "an optimistic bundle's guess must be checked before any other statement"
        );
        $tx.landing = None;
        &mut *$tx.tx
    }};
}

pub(crate) mod archive;
pub(crate) mod branches;
pub(crate) mod context;
pub(crate) mod create;
pub(crate) mod edit;
pub(crate) mod fork;
pub(crate) mod interrupt;
pub(crate) mod queue;
pub(crate) mod requires_action;
pub(crate) mod send;
pub(crate) mod step;

/// The steps every transition is made of.
impl ChatTx {
    /// The chat row (`None` for a missing chat, `N`) with its queue length
    /// and heartbeat age: what the bundle knows when nothing was written
    /// since it was read, else read now. Either way the bundle knows nothing
    /// afterwards, until the next [`ChatTx::land`]. After
    /// [`ChatTx::land_appended`] the row's trigger-kept columns are behind
    /// (`row_behind`); the state, queue length and heartbeat age
    /// are current.
    async fn state_facts(&mut self) -> StoreResult<Option<ChatFacts>> {
        Ok(match self.known.take() {
            Some(facts) => Some(facts),
            None => {
                self.row_behind = false;
                self.select_facts().await?
            }
        })
    }

    /// Takes the state and validates the transition against the matrix.
    async fn enter(&mut self, transition: Transition) -> StoreResult<(Chat, i64, ExecutionState)> {
        let (facts, from) = self.enter_facts(transition).await?;
        Ok((facts.chat, facts.queue_len, from))
    }

    /// [`ChatTx::enter`] returning the state's facts whole.
    async fn enter_facts(
        &mut self,
        transition: Transition,
    ) -> StoreResult<(ChatFacts, ExecutionState)> {
        self.landing = None;
        if self.guess == Guess::Missed {
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
        self.known = facts;
        self.row_behind = false;
        self.applied.push((transition, from, to));
        Ok(to)
    }

    /// [`ChatTx::land`] of a transition that only inserted messages whose
    /// context entries the log knows, since `before` (its state's facts):
    /// inserts change none of what the execution state is made of (status,
    /// archived, queue), so the state is `from` again and nothing is read.
    /// The row's context and trigger-kept columns are brought up to date by
    /// the next transition's `UPDATE` or the commit (`row_behind`),
    /// which saves a step that a finish follows one statement.
    fn land_appended(
        &mut self,
        transition: Transition,
        from: ExecutionState,
        before: ChatFacts,
    ) -> StoreResult<ExecutionState> {
        debug_assert!(self.history.needs_refresh() && self.landing.is_none());
        debug_assert_eq!(before.execution_state(), from);
        matrix::check_landing(transition, from, from).map_err(StateError::from)?;
        self.known = Some(before);
        self.row_behind = true;
        self.applied.push((transition, from, from));
        Ok(from)
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
    async fn select_facts(&mut self) -> StoreResult<Option<ChatFacts>> {
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
    /// [`ChatTx::land`] checks when nothing else touches the connection first.
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
        let guess = self.guess.take_pending();
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
            self.guess = Guess::Missed;
            record_guess_missed();
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

    /// Checks an optimistic bundle's guess before a statement that cannot
    /// check it itself: locks the row and bumps it as the lock-and-bump of
    /// an ordinary bundle does ([`ChatTx::confirm`]). Nothing to do
    /// once checked.
    ///
    /// # Errors
    /// `GuessMissed` when the row moved on since the guess; database errors.
    async fn confirm_guess(&mut self) -> StoreResult<()> {
        self.check_guess().await.map(|_| ())
    }

    /// [`ChatTx::confirm_guess`] returning, when it checked the guess now,
    /// the new `updated_at` and the runner's heartbeat age (what
    /// `queries::chats::lock_and_bump_guessed` reads beside the lock).
    pub(crate) async fn check_guess(
        &mut self,
    ) -> StoreResult<Option<(chrono::DateTime<chrono::Utc>, Option<f64>)>> {
        let Some(guess) = self.guess.take_pending() else {
            return Ok(None);
        };
        match queries::chats::lock_and_bump_guessed(&mut *self.tx, self.chat_id, guess).await? {
            Some(read) => Ok(Some(read)),
            None => {
                self.guess = Guess::Missed;
                record_guess_missed();
                Err(crate::error::StoreError::GuessMissed)
            }
        }
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
/// announced is over, so no retry is coming (see the module doc). It also
/// clears a manual compaction request: the run it started is over (a
/// compaction the worker refused, because its summary would not be
/// smaller, ends with `FinishTurn` and adds nothing; a failed one with
/// `FinishError`), so the next run answers instead of compacting again.
fn ending_generation(changes: ChatChanges) -> ChatChanges {
    ChatChanges {
        retry_state: Some(None),
        compaction_requested: Some(false),
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
