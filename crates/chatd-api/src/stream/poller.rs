//! The sync poller (`spec/chatd-architecture.md`, "Sync poller"): one per
//! replica, shared by every stream loop on it.
//!
//! Stream loops register through a mutex-backed map keyed by chat id; each
//! entry holds the subscribers of that chat (one replica may serve several
//! streams of one chat). Every interval the poller snapshots the registered
//! chat ids under the mutex, releases it, reads the version columns of all
//! of them in one query, and delivers the row's versions as a hint `Sync` to
//! every subscriber of each returned chat; a registered chat that has no
//! row any more gets a "gone" hint, so its streams end.
//!
//! Delivery never blocks: each subscriber has a `watch` slot that holds the
//! latest hints, so a loop busy with a slow `Sync` sees the newest poll, not
//! a backlog. A failed poll is logged and retried at the next tick (the
//! poller is a safety net; pubsub is the fast path).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::state::SyncHints;

type Subscribers = HashMap<u64, watch::Sender<Option<SyncHints>>>;

/// The registration map; cheap to clone.
#[derive(Clone, Default)]
pub struct PollerRegistry {
    inner: Arc<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    chats: Mutex<HashMap<Uuid, Subscribers>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for PollerRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollerRegistry")
            .field("chats", &self.lock().len())
            .finish()
    }
}

impl PollerRegistry {
    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, Subscribers>> {
        self.inner
            .chats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a subscriber of `chat_id`. The registration lasts until the
    /// returned value is dropped.
    pub fn register(&self, chat_id: Uuid) -> PollerRegistration {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = watch::channel(None);
        self.lock().entry(chat_id).or_default().insert(id, tx);
        PollerRegistration {
            registry: self.clone(),
            chat_id,
            id,
            hints: rx,
        }
    }

    /// Number of registered subscribers of `chat_id`.
    pub fn subscriber_count(&self, chat_id: Uuid) -> usize {
        self.lock().get(&chat_id).map_or(0, HashMap::len)
    }

    fn chat_ids(&self) -> Vec<Uuid> {
        self.lock().keys().copied().collect()
    }

    fn deliver(&self, chat_id: Uuid, hints: &SyncHints) {
        if let Some(subscribers) = self.lock().get(&chat_id) {
            for tx in subscribers.values() {
                tx.send_replace(Some(hints.clone()));
            }
        }
    }

    fn deregister(&self, chat_id: Uuid, id: u64) {
        let mut chats = self.lock();
        if let Some(subscribers) = chats.get_mut(&chat_id) {
            subscribers.remove(&id);
            if subscribers.is_empty() {
                chats.remove(&chat_id);
            }
        }
    }
}

/// One stream loop's registration; dropping it deregisters.
#[derive(Debug)]
pub struct PollerRegistration {
    registry: PollerRegistry,
    chat_id: Uuid,
    id: u64,
    hints: watch::Receiver<Option<SyncHints>>,
}

impl PollerRegistration {
    /// Waits for the next poll of the chat and returns its hints. Cancel
    /// safe. Never resolves once the poller is gone.
    pub async fn next(&mut self) -> SyncHints {
        loop {
            if self.hints.changed().await.is_err() {
                return std::future::pending().await;
            }
            if let Some(hints) = self.hints.borrow_and_update().clone() {
                return hints;
            }
        }
    }
}

impl Drop for PollerRegistration {
    fn drop(&mut self) {
        self.registry.deregister(self.chat_id, self.id);
    }
}

/// The polling loop.
#[derive(Debug)]
pub struct SyncPoller {
    /// Where to read.
    pub pool: PgPool,
    /// The registrations to serve.
    pub registry: PollerRegistry,
    /// Time between polls (`--sync-poll-interval`, default 10 s).
    pub interval: Duration,
}

impl SyncPoller {
    /// Polls every `interval` until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            if let Err(err) = self.poll_once().await {
                tracing::warn!(error = %err, "sync poller: reading chat versions failed");
            }
        }
    }

    /// One poll: read every registered chat and deliver the hints.
    ///
    /// # Errors
    /// Database errors.
    pub async fn poll_once(&self) -> sqlx::Result<()> {
        let ids = self.registry.chat_ids();
        if ids.is_empty() {
            return Ok(());
        }
        let rows = chatd_store::chats::versions(&self.pool, &ids).await?;
        let found: std::collections::HashSet<Uuid> = rows.iter().map(|row| row.id).collect();
        for row in &rows {
            self.registry.deliver(row.id, &SyncHints::from(row));
        }
        // A registered chat without a row was deleted: its loops fetch, find
        // it gone and end (a delete publishes nothing they could hear).
        for id in ids.into_iter().filter(|id| !found.contains(id)) {
            self.registry.deliver(id, &SyncHints::gone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn registrations_get_the_latest_hints_and_deregister_on_drop() {
        let registry = PollerRegistry::default();
        let chat = Uuid::from_u128(1);
        let mut a = registry.register(chat);
        let mut b = registry.register(chat);
        assert_eq!(registry.subscriber_count(chat), 2);
        for v in 1..=3 {
            registry.deliver(
                chat,
                &SyncHints {
                    snapshot_version: Some(v),
                    ..SyncHints::default()
                },
            );
        }
        assert_eq!(a.next().await.snapshot_version, Some(3), "latest wins");
        assert_eq!(b.next().await.snapshot_version, Some(3));
        drop(a);
        assert_eq!(registry.subscriber_count(chat), 1);
        drop(b);
        assert_eq!(registry.subscriber_count(chat), 0);
        assert!(registry.chat_ids().is_empty());
    }
}
