//! [`PublishBuffer`]: holds publications until the surrounding transaction
//! commits (`spec/chatstate-package.md`, `PublishBuffer`;
//! `spec/chatd-architecture.md`, "Notification emission rules": notifications
//! are post-commit).
//!
//! Lifecycle: `Open` (publish records) → `flush` (forwards everything in
//! order, then `Flushed`: publish errors) or `discard` (drops everything,
//! then `Discarded`: publish is silently dropped). `discard` is harmless after
//! `flush`, so an owner can always discard on its way out — the moral
//! equivalent of Go's `defer buf.Discard()` — without un-publishing anything.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::{FlushFailure, PubsubError};
use crate::publisher::{Publication, Publisher, validate_publication};

/// A [`Publisher`] that records each publication in order and forwards
/// nothing to its inner publisher until [`PublishBuffer::flush`].
///
/// Publishing inside a transaction and flushing only after commit is what
/// keeps subscribers from ever seeing uncommitted state: if the buffer were
/// bypassed, a receiver could re-read the database before the commit and
/// settle on the old state. Buffers nest: an inner buffer flushes into an
/// outer one, whose owner flushes after the outer transaction commits.
pub struct PublishBuffer {
    inner: Arc<dyn Publisher>,
    state: Mutex<BufferState>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    Flushed,
    Discarded,
}

struct BufferState {
    phase: Phase,
    pending: Vec<Publication>,
}

impl PublishBuffer {
    /// An empty buffer that forwards to `inner` when flushed.
    pub fn new(inner: Arc<dyn Publisher>) -> Self {
        Self {
            inner,
            state: Mutex::new(BufferState {
                phase: Phase::Open,
                pending: Vec::new(),
            }),
        }
    }

    /// Forwards every pending publication to the inner publisher, in the
    /// order it was buffered, then marks the buffer flushed: later
    /// [`Publisher::publish`] calls return [`PubsubError::BufferFlushed`].
    /// Flushing again, or after [`PublishBuffer::discard`], forwards nothing.
    ///
    /// # Errors
    /// [`PubsubError::Flush`] listing, per channel, every publication the
    /// inner publisher rejected; every publication is attempted regardless.
    pub fn flush(&self) -> Result<(), PubsubError> {
        let pending = {
            let mut state = self.lock();
            if state.phase == Phase::Open {
                state.phase = Phase::Flushed;
            }
            std::mem::take(&mut state.pending)
        };
        // The lock is released before forwarding so an inner publisher that is
        // itself a buffer (or that calls back into us) cannot deadlock.
        let attempted = pending.len();
        let failures: Vec<FlushFailure> = pending
            .into_iter()
            .filter_map(|publication| {
                self.inner
                    .publish(&publication.channel, &publication.payload)
                    .err()
                    .map(|error| FlushFailure {
                        channel: publication.channel,
                        error,
                    })
            })
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(PubsubError::Flush {
                attempted,
                failures,
            })
        }
    }

    /// Drops every pending publication without forwarding it, and makes the
    /// buffer silently drop any later publication. Safe to call repeatedly
    /// and after a successful [`PublishBuffer::flush`].
    pub fn discard(&self) {
        let mut state = self.lock();
        state.pending.clear();
        state.phase = Phase::Discarded;
    }

    /// Whether no publication is pending.
    pub fn is_empty(&self) -> bool {
        self.lock().pending.is_empty()
    }

    /// How many publications are pending.
    pub fn len(&self) -> usize {
        self.lock().pending.len()
    }

    /// A copy of the pending publications, in buffer order.
    pub fn pending(&self) -> Vec<Publication> {
        self.lock().pending.clone()
    }

    fn lock(&self) -> MutexGuard<'_, BufferState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Publisher for PublishBuffer {
    /// Records the publication; nothing is forwarded before
    /// [`PublishBuffer::flush`]. The publication is validated now, so a
    /// payload that could never be delivered fails inside the transaction.
    ///
    /// # Errors
    /// [`PubsubError::BufferFlushed`] after a flush, validation errors as for
    /// every [`Publisher`]. After [`PublishBuffer::discard`] the publication
    /// is dropped and `Ok` is returned.
    fn publish(&self, channel: &str, payload: &[u8]) -> Result<(), PubsubError> {
        validate_publication(channel, payload)?;
        let mut state = self.lock();
        match state.phase {
            Phase::Open => {
                state.pending.push(Publication::new(channel, payload));
                Ok(())
            }
            Phase::Flushed => Err(PubsubError::BufferFlushed),
            Phase::Discarded => Ok(()),
        }
    }
}

impl std::fmt::Debug for PublishBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("PublishBuffer")
            .field("phase", &state.phase)
            .field("pending", &state.pending.len())
            .finish_non_exhaustive()
    }
}
