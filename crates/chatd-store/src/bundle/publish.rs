//! What a committed bundle publishes, and the commit that publishes it
//! (spec "Notification emission rules", "Pubsub").

use chatd_core::classify;
use chatd_pubsub::{
    ChatUpdate, OWNERSHIP_CHANNEL, OwnershipHint, PublishBuffer, Publisher as _,
    chat_update_channel,
};
use sqlx::{Postgres, Transaction};

use crate::error::{StoreError, StoreResult};
use crate::models::{Chat, ChatFacts};
use crate::store::StoreConfig;

/// Buffers the publications that the post-transition facts call for (spec
/// "Notification emission rules"); returns the row.
pub(crate) fn enqueue_publications(
    facts: ChatFacts,
    buffer: &PublishBuffer,
    config: &StoreConfig,
) -> Chat {
    let fresh = facts.fresh(config.heartbeat_stale_after.as_secs_f64());
    let queued = facts.queue_len > 0;
    let chat = facts.chat;
    let chat_id = chat.id;
    let update = chat_update_payload(&chat);
    let payload = serde_json::to_vec(&update).expect("ChatUpdate serializes");
    // A full in-memory buffer cannot fail before flush; errors here would be
    // programming errors, so they are logged rather than failing the commit.
    if let Err(err) = buffer.publish(&chat_update_channel(chat_id), &payload) {
        tracing::warn!(%chat_id, error = %err, "buffering chat:update failed");
    }
    let runnable = classify(Some((chat.status, chat.archived, queued))).is_runnable();
    let owned = chat.worker_id.is_some() && chat.runner_id.is_some() && fresh;
    if runnable && !owned {
        let hint = OwnershipHint {
            chat_id,
            snapshot_version: chat.snapshot_version,
        };
        let payload = serde_json::to_vec(&hint).expect("OwnershipHint serializes");
        if let Err(err) = buffer.publish(OWNERSHIP_CHANNEL, &payload) {
            tracing::warn!(%chat_id, error = %err, "buffering chat:ownership failed");
        }
    }
    chat
}

/// The `chat:update` payload for a committed row.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let update = chatd_store::chat_update_payload(&chat);
/// assert_eq!((update.chat_id, update.snapshot_version), (chat.id, chat.snapshot_version));
/// assert_eq!(update.status, chat.status);
/// # Ok(()) }
/// ```
pub fn chat_update_payload(chat: &Chat) -> ChatUpdate {
    ChatUpdate {
        chat_id: chat.id,
        snapshot_version: chat.snapshot_version,
        worker_id: chat.worker_id,
        runner_id: chat.runner_id,
        history_version: chat.history_version,
        queue_version: chat.queue_version,
        retry_state_version: chat.retry_state_version,
        generation_attempt: chat.generation_attempt,
        status: chat.status,
        archived: chat.archived,
    }
}

/// Commits `tx`, then publishes what `buffer` holds, in a task of its own:
/// a caller cancelled while its `COMMIT` is in flight (a runner task
/// aborted, a request whose client went away) cannot leave a committed
/// transition unpublished, which would leave a runnable chat waiting for
/// the next acquisition pass (issue 14).
///
/// # Errors
/// The `COMMIT`'s error (nothing is published then); a task that panicked
/// or was cancelled by a dying runtime is `sqlx::Error::PoolClosed`.
pub(crate) async fn commit_and_flush(
    tx: Transaction<'static, Postgres>,
    buffer: PublishBuffer,
) -> StoreResult<()> {
    tokio::spawn(async move {
        tx.commit().await?;
        flush(&buffer);
        Ok(())
    })
    .await
    .unwrap_or(Err(sqlx::Error::PoolClosed))
    .map_err(StoreError::from)
}

fn flush(buffer: &PublishBuffer) {
    // Notifications are best-effort hints: receivers recover through the
    // sync poller and the periodic database sync.
    if let Err(err) = buffer.flush() {
        tracing::warn!(error = %err, "publishing after commit failed");
    }
}
