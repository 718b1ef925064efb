//! `Interrupt` and `FinishInterruption` (spec "Transitions").

use chatd_core::{ChatStatus, ExecutionState, INTERRUPTED_TOOL_RESULT, Transition};

use super::{ending_generation, running_clearing_deadline, status};
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::models::{ChatMessage, NewMessage};
use crate::queries::chats::ChatChanges;

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

impl ChatTx {
    /// `Interrupt`: `R0/R1 → I0/I1`; `A0/A1 → R0/R1` with every pending call
    /// answered "interrupted by user". Returns the synthetic result rows.
    ///
    /// # Errors
    /// Not allowed from other states.
    ///
    /// Example: [`crate::ChatMachine::update`]. Tested by `tests/it/transitions.rs`: `send_message_interrupt_from_a1_answers_pending_calls_as_interrupted_and_lands_r1`; and `tests/it/matrix.rs`: `matrix_interrupt` (every state).
    pub async fn interrupt(&mut self) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
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
        partial: Vec<NewMessage>,
    ) -> StoreResult<FinishInterruptionResult> {
        self.confirm().await?;
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
}
