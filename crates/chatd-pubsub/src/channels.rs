//! The notification channels and their payloads (`spec/chatd-architecture.md`,
//! "Pubsub" → "Notification channels").
//!
//! Payloads are JSON objects. They are hints: receivers compare
//! `snapshot_version` with the highest version they have processed for the
//! chat and discard anything not newer ("Notification emission rules").
//!
//! The limits every publication must keep (channel name and payload size)
//! belong to the [`Publisher`] interface ([`crate::publisher`]).

use chatd_core::ChatStatus;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::PubsubError;
use crate::publisher::Publisher;

/// The global channel consumed by chat workers' acquisition loops: a chat is
/// runnable and no worker owns it. Payload: [`OwnershipHint`].
pub const OWNERSHIP_CHANNEL: &str = "chat:ownership";

/// The per-chat channel `chat:update:{chat_id}` (hyphenated lowercase UUID),
/// consumed by the owning chat worker and by active stream loops. Payload:
/// [`ChatUpdate`].
pub fn chat_update_channel(chat_id: Uuid) -> String {
    format!("chat:update:{}", chat_id.hyphenated())
}

/// Payload of `chat:update:{chat_id}`: the committed post-transition values of
/// the notification fields, emitted after every transition bundle that
/// advances `snapshot_version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatUpdate {
    /// The chat this update is about (also encoded in the channel name).
    pub chat_id: Uuid,
    /// The chat's `snapshot_version` after the transition bundle.
    pub snapshot_version: i64,
    /// The owning chat worker, if any.
    pub worker_id: Option<Uuid>,
    /// The owning chat runner, if any.
    pub runner_id: Option<Uuid>,
    /// The chat's `history_version`.
    pub history_version: i64,
    /// The chat's `queue_version`.
    pub queue_version: i64,
    /// The chat's `retry_state_version`.
    pub retry_state_version: i64,
    /// The chat's `generation_attempt`.
    pub generation_attempt: i64,
    /// The chat's `status`.
    pub status: ChatStatus,
    /// Whether the chat is archived.
    pub archived: bool,
}

impl ChatUpdate {
    /// The channel this update is published on: `chat:update:{chat_id}`.
    pub fn channel(&self) -> String {
        chat_update_channel(self.chat_id)
    }

    /// Encodes this update as its JSON payload.
    ///
    /// # Errors
    /// [`PubsubError::Json`] if serialization fails (it cannot for this type).
    pub fn to_payload(&self) -> Result<Vec<u8>, PubsubError> {
        Ok(serde_json::to_vec(self)?)
    }

    /// Decodes a payload received on a `chat:update:*` channel.
    ///
    /// # Errors
    /// [`PubsubError::Json`] if the payload is not a `ChatUpdate` object.
    pub fn from_payload(payload: &[u8]) -> Result<Self, PubsubError> {
        Ok(serde_json::from_slice(payload)?)
    }

    /// Publishes this update on [`ChatUpdate::channel`].
    ///
    /// # Errors
    /// Whatever `publisher` returns (see [`Publisher::publish`]).
    pub fn publish(&self, publisher: &dyn Publisher) -> Result<(), PubsubError> {
        publisher.publish(&self.channel(), &self.to_payload()?)
    }
}

/// Payload of [`OWNERSHIP_CHANNEL`]: the chat needs a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnershipHint {
    /// The chat that is runnable and unowned.
    pub chat_id: Uuid,
    /// The chat's `snapshot_version` after the transition that emitted this.
    pub snapshot_version: i64,
}

impl OwnershipHint {
    /// Encodes this hint as its JSON payload.
    ///
    /// # Errors
    /// [`PubsubError::Json`] if serialization fails (it cannot for this type).
    pub fn to_payload(&self) -> Result<Vec<u8>, PubsubError> {
        Ok(serde_json::to_vec(self)?)
    }

    /// Decodes a payload received on [`OWNERSHIP_CHANNEL`].
    ///
    /// # Errors
    /// [`PubsubError::Json`] if the payload is not an `OwnershipHint` object.
    pub fn from_payload(payload: &[u8]) -> Result<Self, PubsubError> {
        Ok(serde_json::from_slice(payload)?)
    }

    /// Publishes this hint on [`OWNERSHIP_CHANNEL`].
    ///
    /// # Errors
    /// Whatever `publisher` returns (see [`Publisher::publish`]).
    pub fn publish(&self, publisher: &dyn Publisher) -> Result<(), PubsubError> {
        publisher.publish(OWNERSHIP_CHANNEL, &self.to_payload()?)
    }
}
