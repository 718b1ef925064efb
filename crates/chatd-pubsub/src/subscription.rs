//! Subscribing: the [`Pubsub`] interface, [`Subscription`] and the in-process
//! fan-out (`Hub`) that both implementations share
//! (`spec/chatd-architecture.md`, "Pubsub").
//!
//! A `Hub` maps each channel with at least one local subscriber to the
//! queues of its subscribers. Invariants:
//!
//! - an entry exists exactly while its subscriber count is positive; when the
//!   last [`Subscription`] of a channel is dropped the entry is removed and
//!   the implementation's "last unsubscribe" hook runs (PostgreSQL: queue an
//!   `UNLISTEN`), under the hub lock so hooks observe subscribe/unsubscribe in
//!   the order they happened;
//! - a subscriber that falls more than its buffer behind receives
//!   [`PubsubEvent::Reconnected`] instead of silently losing messages, then
//!   the most recent events its buffer held;
//! - after `Hub::close` every subscription drains what it had buffered and
//!   then yields `None`.
//!
//! Each subscriber's queue grows with what it holds, up to the capacity, and
//! allocates nothing while empty: an idle subscription costs a few hundred
//! bytes, not a ring of `capacity` slots (issue 15: a replica holds a
//! `chat:update` subscription for every running chat).

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use futures::future::BoxFuture;

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

/// A live subscription to one channel.
///
/// Receive with [`Subscription::recv`] or as a [`Stream`]. Dropping it
/// unsubscribes; for PostgreSQL the channel is `UNLISTEN`ed once its last
/// local subscriber is gone.
pub struct Subscription {
    channel: String,
    hub: Arc<Hub>,
    /// This subscription's number in its hub.
    id: u64,
    queue: Arc<Queue>,
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
        let mut state = self.queue.lock();
        if let Some(skipped) = state.lagged.take() {
            tracing::debug!(channel = %self.channel, skipped, "pubsub subscriber lagged");
            return Poll::Ready(Some(PubsubEvent::Reconnected));
        }
        if let Some(event) = state.events.pop_front() {
            if state.events.is_empty() && state.events.capacity() > SHRINK_ABOVE {
                state.events.shrink_to(SHRINK_ABOVE);
            }
            return Poll::Ready(Some(event));
        }
        if state.closed {
            drop(state);
            self.done = true;
            return Poll::Ready(None);
        }
        match &state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// An emptied queue keeps at most this many slots allocated.
const SHRINK_ABOVE: usize = 8;

/// One subscriber's buffered events.
#[derive(Default)]
struct Queue(Mutex<QueueState>);

#[derive(Default)]
struct QueueState {
    events: VecDeque<PubsubEvent>,
    /// Events dropped since the subscriber last received: it gets
    /// [`PubsubEvent::Reconnected`] next.
    lagged: Option<u64>,
    /// The hub closed: drain, then end.
    closed: bool,
    waker: Option<Waker>,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `event`, dropping the oldest one when `capacity` are held.
    fn push(&self, event: PubsubEvent, capacity: usize) {
        let waker = {
            let mut state = self.lock();
            if state.events.len() >= capacity {
                state.events.pop_front();
                *state.lagged.get_or_insert(0) += 1;
            }
            state.events.push_back(event);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn close(&self) {
        let waker = {
            let mut state = self.lock();
            state.closed = true;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
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
        self.hub.release(&self.channel, self.id);
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
    /// The number of the next subscription.
    next_id: u64,
    channels: HashMap<String, HubChannel>,
}

struct HubChannel {
    /// The queue of every live subscription, by subscription number.
    queues: Vec<(u64, Arc<Queue>)>,
}

impl Hub {
    /// A hub whose subscribers buffer up to `capacity` events each.
    pub(crate) fn new(capacity: usize, on_last_unsubscribe: Option<LastUnsubscribeHook>) -> Self {
        Self {
            state: Mutex::new(HubState {
                closed: false,
                next_id: 0,
                channels: HashMap::new(),
            }),
            capacity: capacity.max(1),
            on_last_unsubscribe,
        }
    }

    /// Registers a subscriber on `channel`; it receives every event delivered
    /// from now on.
    pub(crate) fn subscribe(self: &Arc<Self>, channel: &str) -> Result<Subscription, PubsubError> {
        let queue = Arc::new(Queue::default());
        let id = {
            let mut state = self.lock();
            if state.closed {
                return Err(PubsubError::Closed);
            }
            let id = state.next_id;
            state.next_id += 1;
            state
                .channels
                .entry(channel.to_owned())
                .or_insert_with(|| HubChannel { queues: Vec::new() })
                .queues
                .push((id, queue.clone()));
            id
        };
        Ok(Subscription {
            channel: channel.to_owned(),
            hub: Arc::clone(self),
            id,
            queue,
            done: false,
        })
    }

    /// Delivers `event` to every subscriber of `channel`; returns how many
    /// subscribers it reached.
    pub(crate) fn deliver(&self, channel: &str, event: PubsubEvent) -> usize {
        let state = self.lock();
        let Some(entry) = state.channels.get(channel) else {
            return 0;
        };
        for (_, queue) in &entry.queues {
            queue.push(event.clone(), self.capacity);
        }
        entry.queues.len()
    }

    /// Delivers `event` to every subscriber of every channel.
    pub(crate) fn deliver_all(&self, event: &PubsubEvent) {
        let state = self.lock();
        for entry in state.channels.values() {
            for (_, queue) in &entry.queues {
                queue.push(event.clone(), self.capacity);
            }
        }
    }

    /// How many live subscriptions `channel` has.
    pub(crate) fn subscriber_count(&self, channel: &str) -> usize {
        self.lock()
            .channels
            .get(channel)
            .map_or(0, |entry| entry.queues.len())
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
        for entry in channels.values() {
            for (_, queue) in &entry.queues {
                queue.close();
            }
        }
    }

    fn release(&self, channel: &str, id: u64) {
        let mut state = self.lock();
        let Some(entry) = state.channels.get_mut(channel) else {
            return;
        };
        entry.queues.retain(|(queue_id, _)| *queue_id != id);
        if entry.queues.is_empty() {
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
