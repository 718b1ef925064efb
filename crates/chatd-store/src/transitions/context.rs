//! The model context: `RequestCompaction` and `ClearContext` (spec
//! "Transitions"; API.md "Context and compaction").

use chatd_core::{ChatStatus, StateError, Transition};

use super::running_clearing_error;
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::models::{ChatMessage, NewMessage};
use crate::queries::chats::ChatChanges;

impl ChatTx {
    /// Number of messages a compaction of this chat could summarize or keep,
    /// read in the bundle's transaction: the rows of the model context that
    /// are neither system rows nor a summary (after a clear-context, only
    /// those after it). `POST /compact` refuses fewer than it needs
    /// (API.md "Context and compaction").
    ///
    /// # Errors
    /// Database errors.
    pub async fn compactable_count(&mut self) -> StoreResult<i64> {
        let chat_id = self.chat_id;
        Ok(crate::queries::messages::compactable_count(self.reader().await?, chat_id).await?)
    }

    /// The chat's model context as compaction reads it: the context entries
    /// ([`chatd_core::context::ContextEntry`], sizes without content) of the
    /// rows the model would read next, in model order
    /// ([`chatd_core::context::model_context`]), read in the bundle's
    /// transaction. `POST /compact` selects from it what a compaction would
    /// replace and refuses one that would not shrink (API.md "Context
    /// management").
    ///
    /// # Errors
    /// Database errors.
    pub async fn model_context_entries(
        &mut self,
    ) -> StoreResult<Vec<chatd_core::context::ContextEntry>> {
        let chat_id = self.chat_id;
        let entries =
            crate::queries::messages::context_entries(self.reader().await?, chat_id).await?;
        Ok(chatd_core::context::model_context(&entries)
            .into_iter()
            .map(|i| entries[i])
            .collect())
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

    /// `AppendMessages(messages)`: `W/E0 → W`, appending the caller-built
    /// rows to the active branch without starting a turn (API.md
    /// "Compatible protocols": `POST /v1/conversations/{id}/items`), and
    /// clearing the error.
    ///
    /// # Errors
    /// `InvalidInput` for an empty batch; not allowed from other states
    /// (busy, `E1`, archived).
    ///
    /// Tested by `tests/it/matrix.rs`: `matrix_append_messages` (every state).
    pub async fn append_messages(
        &mut self,
        messages: Vec<NewMessage>,
    ) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        let t = Transition::AppendMessages;
        let (_, _, from) = self.enter(t).await?;
        if messages.is_empty() {
            return Err(self.reject(
                t,
                StateError::InvalidInput {
                    field: "messages",
                    detail: "nothing to append".into(),
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
            ..ChatChanges::default()
        })
        .await?;
        self.land(t, from).await?;
        Ok(inserted)
    }
}
