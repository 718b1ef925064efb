//! Subscribing: the [`Pubsub`] interface, [`Subscription`] and the in-process
//! fan-out (`Hub`) that both implementations share
//! (`spec/chatd-architecture.md`, "Pubsub").
//!
//! A `Hub` maps each channel with at least one local subscriber to a bounded
//! `tokio::sync::broadcast` channel. Invariants:
//!
//! - an entry exists exactly while its subscriber count is positive; when the
//!   last [`Subscription`] of a channel is dropped the entry is removed and
//!   the implementation's "last unsubscribe" hook runs (PostgreSQL: queue an
//!   `UNLISTEN`), under the hub lock so hooks observe subscribe/unsubscribe in
//!   the order they happened;
//! - a subscriber that falls more than its buffer behind receives
//!   [`PubsubEvent::Reconnected`] instead of silently losing messages;
//! - after `Hub::close` every subscription drains what it had buffered and
//!   then yields `None`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use futures::Stream;
use futures::future::BoxFuture;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::ReusableBoxFuture;

use crate::error::PubsubError;
use crate::publisher::Publisher;

/// Messages buffered per subscriber before it is considered lagging.
pub const DEFAULT_SUBSCRIBER_CAPACITY: usize = 1024;

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PubsubEvent {
    /// A payload published on the subscribed channel.
    Message(Vec<u8>),
    /// Messages may have been lost: the listener connection was lost and
    /// re-established, or this subscriber lagged and messages were dropped.
    /// Re-read state from the database.
    Reconnected,
}

/// A [`Publisher`] that can also subscribe.
pub trait Pubsub: Publisher {
    /// Subscribes to `channel`.
    ///
    /// Resolves only once the subscription is active (for PostgreSQL: the
    /// `LISTEN` has been executed on the listener connection). Callers
    /// subscribe *before* reading the database: reversing the order would
    /// lose any notification published between the read and the subscribe.
    ///
    /// # Errors
    /// [`PubsubError::InvalidChannel`] for a bad name; [`PubsubError::Closed`]
    /// if the pubsub is (or gets) closed before the subscription is active.
    fn subscribe<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Subscription, PubsubError>>;
}

impl<P: Pubsub + ?Sized> Pubsub for Arc<P> {
    fn subscribe<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Subscription, PubsubError>> {
        (**self).subscribe(channel)
    }
}

type RecvFuture = ReusableBoxFuture<
    'static,
    (
        Result<PubsubEvent, RecvError>,
        broadcast::Receiver<PubsubEvent>,
    ),
>;

/// A live subscription to one channel.
///
/// Receive with [`Subscription::recv`] or as a [`Stream`]. Dropping it
/// unsubscribes; for PostgreSQL the channel is `UNLISTEN`ed once its last
/// local subscriber is gone.
pub struct Subscription {
    channel: String,
    hub: Arc<Hub>,
    next: RecvFuture,
    done: bool,
}

impl Subscription {
    /// The next event, or `None` once the pubsub has shut down (after every
    /// event buffered before the shutdown was delivered). Cancel safe.
    pub async fn recv(&mut self) -> Option<PubsubEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// The channel this subscription listens to.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<PubsubEvent>> {
        if self.done {
            return Poll::Ready(None);
        }
        let (result, receiver) = ready!(self.next.poll(cx));
        self.next.set(recv_owned(receiver));
        match result {
            Ok(event) => Poll::Ready(Some(event)),
            Err(RecvError::Lagged(skipped)) => {
                tracing::debug!(channel = %self.channel, skipped, "pubsub subscriber lagged");
                Poll::Ready(Some(PubsubEvent::Reconnected))
            }
            Err(RecvError::Closed) => {
                self.done = true;
                Poll::Ready(None)
            }
        }
    }
}

impl Stream for Subscription {
    type Item = PubsubEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<PubsubEvent>> {
        self.get_mut().poll_event(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.release(&self.channel);
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channel", &self.channel)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

async fn recv_owned(
    mut receiver: broadcast::Receiver<PubsubEvent>,
) -> (
    Result<PubsubEvent, RecvError>,
    broadcast::Receiver<PubsubEvent>,
) {
    let result = receiver.recv().await;
    (result, receiver)
}

/// Called, under the hub lock, with a channel whose last subscriber left.
pub(crate) type LastUnsubscribeHook = Box<dyn Fn(&str) + Send + Sync>;

/// Local fan-out of events to subscribers, keyed by channel.
pub(crate) struct Hub {
    state: Mutex<HubState>,
    capacity: usize,
    on_last_unsubscribe: Option<LastUnsubscribeHook>,
}

struct HubState {
    closed: bool,
    channels: HashMap<String, HubChannel>,
}

struct HubChannel {
    sender: broadcast::Sender<PubsubEvent>,
    subscribers: usize,
}

impl Hub {
    /// A hub whose subscribers buffer up to `capacity` events each.
    pub(crate) fn new(capacity: usize, on_last_unsubscribe: Option<LastUnsubscribeHook>) -> Self {
        Self {
            state: Mutex::new(HubState {
                closed: false,
                channels: HashMap::new(),
            }),
            capacity: capacity.max(1),
            on_last_unsubscribe,
        }
    }

    /// Registers a subscriber on `channel`; it receives every event delivered
    /// from now on.
    pub(crate) fn subscribe(self: &Arc<Self>, channel: &str) -> Result<Subscription, PubsubError> {
        let receiver = {
            let mut state = self.lock();
            if state.closed {
                return Err(PubsubError::Closed);
            }
            let entry = state
                .channels
                .entry(channel.to_owned())
                .or_insert_with(|| HubChannel {
                    sender: broadcast::channel(self.capacity).0,
                    subscribers: 0,
                });
            entry.subscribers += 1;
            entry.sender.subscribe()
        };
        Ok(Subscription {
            channel: channel.to_owned(),
            hub: Arc::clone(self),
            next: ReusableBoxFuture::new(recv_owned(receiver)),
            done: false,
        })
    }

    /// Delivers `event` to every subscriber of `channel`; returns how many
    /// subscribers it reached.
    pub(crate) fn deliver(&self, channel: &str, event: PubsubEvent) -> usize {
        let state = self.lock();
        state
            .channels
            .get(channel)
            .map_or(0, |entry| entry.sender.send(event).unwrap_or(0))
    }

    /// Delivers `event` to every subscriber of every channel.
    pub(crate) fn deliver_all(&self, event: &PubsubEvent) {
        let state = self.lock();
        for entry in state.channels.values() {
            let _ = entry.sender.send(event.clone());
        }
    }

    /// How many live subscriptions `channel` has.
    pub(crate) fn subscriber_count(&self, channel: &str) -> usize {
        self.lock()
            .channels
            .get(channel)
            .map_or(0, |entry| entry.subscribers)
    }

    /// Whether [`Hub::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Refuses new subscribers and ends every subscription (after it drains
    /// what it has buffered).
    pub(crate) fn close(&self) {
        let channels = {
            let mut state = self.lock();
            state.closed = true;
            std::mem::take(&mut state.channels)
        };
        // Dropping the senders is what makes receivers yield `Closed`.
        drop(channels);
    }

    fn release(&self, channel: &str) {
        let mut state = self.lock();
        let Some(entry) = state.channels.get_mut(channel) else {
            return;
        };
        entry.subscribers -= 1;
        if entry.subscribers == 0 {
            state.channels.remove(channel);
            if let Some(hook) = &self.on_last_unsubscribe {
                hook(channel);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
