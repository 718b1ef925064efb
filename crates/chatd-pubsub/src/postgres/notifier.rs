//! The notifier task of [`super::PgPubsub`]: sends queued publications with
//! `pg_notify`, one at a time, in publish order (`spec/chatd-architecture.md`,
//! "Notification emission rules": post-commit, best effort).
//!
//! One notification is committed before the next is sent, so PostgreSQL
//! delivers them in publish order. Batching several into one transaction
//! would be faster but PostgreSQL folds identical notifications of one
//! transaction into one.
//!
//! Error policy: a failed `pg_notify` is retried after 50 ms, 100 ms, … up
//! to `publish_attempts` attempts, then logged and dropped; receivers
//! tolerate drops. On shutdown, queued notifications get one attempt each
//! within [`DRAIN_TIMEOUT`]; the rest are logged and dropped.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Sends one notification.
const NOTIFY_SQL: &str = "SELECT pg_notify($1, $2)";

/// Delay before the first retry; retry `n` waits `n` times this.
const RETRY_DELAY: Duration = Duration::from_millis(50);

/// How long shutdown waits for queued notifications to go out.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A validated publication waiting to be sent.
pub(crate) struct Notification {
    pub(crate) channel: String,
    pub(crate) payload: String,
}

/// The notifier task's state. See the module docs.
pub(crate) struct NotifierLoop {
    pool: PgPool,
    queue: mpsc::UnboundedReceiver<Notification>,
    attempts: u32,
}

impl NotifierLoop {
    pub(crate) fn new(
        pool: PgPool,
        queue: mpsc::UnboundedReceiver<Notification>,
        attempts: u32,
    ) -> Self {
        Self {
            pool,
            queue,
            attempts: attempts.max(1),
        }
    }

    /// Sends queued notifications until `cancel` fires, then drains.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        loop {
            let notification = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                next = self.queue.recv() => match next {
                    Some(notification) => notification,
                    None => return,
                },
            };
            self.send_with_retries(&notification).await;
        }
        self.drain().await;
    }

    async fn send_with_retries(&self, notification: &Notification) {
        for attempt in 1..=self.attempts {
            match notify(&self.pool, notification).await {
                Ok(()) => return,
                Err(error) if attempt < self.attempts => {
                    tracing::warn!(
                        channel = %notification.channel,
                        attempt,
                        %error,
                        "pubsub notify failed; retrying"
                    );
                    tokio::time::sleep(RETRY_DELAY * attempt).await;
                }
                Err(error) => tracing::error!(
                    channel = %notification.channel,
                    attempts = self.attempts,
                    %error,
                    "pubsub notify failed; dropping the notification"
                ),
            }
        }
    }

    async fn drain(mut self) {
        self.queue.close();
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while let Ok(notification) = self.queue.try_recv() {
            match tokio::time::timeout_at(deadline, notify(&self.pool, &notification)).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(
                    channel = %notification.channel,
                    %error,
                    "pubsub notify failed during shutdown; dropping the notification"
                ),
                Err(_elapsed) => {
                    tracing::warn!(
                        dropped = self.queue.len() + 1,
                        "pubsub shutdown deadline passed; dropping queued notifications"
                    );
                    return;
                }
            }
        }
    }
}

async fn notify(pool: &PgPool, notification: &Notification) -> Result<(), sqlx::Error> {
    sqlx::query(NOTIFY_SQL)
        .bind(&notification.channel)
        .bind(&notification.payload)
        .execute(pool)
        .await?;
    Ok(())
}
