//! [`MemoryPubsub`]: an in-process [`Pubsub`] for unit tests and
//! single-process setups (`spec/chatd-architecture.md`, "Pubsub").
//!
//! Publishing delivers synchronously to the current subscribers of the
//! channel; channels exist while they have subscribers. It enforces the same
//! channel and payload limits as [`crate::PgPubsub`], so code tested against
//! it behaves the same against PostgreSQL.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::PubsubError;
use crate::publisher::Publisher;
use crate::publisher::{validate_channel, validate_publication};
use crate::subscription::{DEFAULT_SUBSCRIBER_CAPACITY, Hub, Pubsub, PubsubEvent, Subscription};

/// In-process pubsub. Cloning gives another handle to the same pubsub; it
/// shuts down on [`MemoryPubsub::close`] or when the last handle is dropped,
/// and its subscriptions then yield `None`.
#[derive(Clone)]
pub struct MemoryPubsub {
    inner: Arc<MemoryInner>,
}

struct MemoryInner {
    hub: Arc<Hub>,
}

impl Drop for MemoryInner {
    fn drop(&mut self) {
        self.hub.close();
    }
}

impl MemoryPubsub {
    /// A pubsub whose subscribers buffer [`DEFAULT_SUBSCRIBER_CAPACITY`]
    /// events each.
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_SUBSCRIBER_CAPACITY)
    }

    /// A pubsub whose subscribers buffer `capacity` events each (at least 1);
    /// a subscriber further behind gets [`PubsubEvent::Reconnected`] and
    /// resumes with the most recent `capacity` events.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Arc::new(MemoryInner {
                hub: Arc::new(Hub::new(capacity, None)),
            }),
        }
    }

    /// Ends every subscription and refuses further publishes and subscribes.
    pub fn close(&self) {
        self.inner.hub.close();
    }

    /// How many live subscriptions `channel` has.
    pub fn subscriber_count(&self, channel: &str) -> usize {
        self.inner.hub.subscriber_count(channel)
    }

    /// Tells every subscriber of every channel to re-read state, as
    /// [`crate::PgPubsub`] does after its listener reconnects. For tests of
    /// receivers' recovery paths.
    pub fn simulate_reconnect(&self) {
        self.inner.hub.deliver_all(&PubsubEvent::Reconnected);
    }
}

impl Default for MemoryPubsub {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryPubsub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPubsub").finish_non_exhaustive()
    }
}

impl Publisher for MemoryPubsub {
    /// Delivers `payload` to the channel's current subscribers (none is fine).
    fn publish(&self, channel: &str, payload: &[u8]) -> Result<(), PubsubError> {
        validate_publication(channel, payload)?;
        if self.inner.hub.is_closed() {
            return Err(PubsubError::Closed);
        }
        self.inner
            .hub
            .deliver(channel, PubsubEvent::Message(payload.to_vec()));
        Ok(())
    }
}

impl Pubsub for MemoryPubsub {
    /// Active as soon as it resolves, which is immediately.
    fn subscribe<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Subscription, PubsubError>> {
        Box::pin(async move {
            validate_channel(channel)?;
            self.inner.hub.subscribe(channel)
        })
    }
}
