//! The minimal publishing interface (`spec/chatstate-package.md`,
//! `Publisher`) and a recording fake for tests.
//!
//! The state machine only ever publishes; it takes a `Publisher` so that real
//! callers pass the live pubsub (or a [`crate::PublishBuffer`] during a
//! transaction) and tests pass a [`RecordingPublisher`].
//!
//! This module also owns the limits every implementation enforces
//! ([`MAX_PAYLOAD_BYTES`], [`MAX_CHANNEL_BYTES`]), so that a payload that
//! PostgreSQL would reject is refused at publish time (inside the caller's
//! transaction) rather than dropped after commit. It names no channel: the
//! channels and their payloads ([`crate::channels`]) build on it.

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::PubsubError;

/// Largest accepted payload, in bytes. PostgreSQL's `NOTIFY` limit is 8000
/// bytes; the margin keeps us clear of it.
pub const MAX_PAYLOAD_BYTES: usize = 7900;

/// Longest accepted channel name, in bytes (PostgreSQL identifiers are at
/// most `NAMEDATALEN - 1` = 63 bytes; longer `LISTEN` names would be
/// truncated and never match).
pub const MAX_CHANNEL_BYTES: usize = 63;

/// Publishes a payload on a channel.
///
/// Implementations never block on I/O and are best effort: `Ok` means the
/// publication was accepted, not that anyone received it.
pub trait Publisher: Send + Sync {
    /// Publishes `payload` (UTF-8 JSON text, at most
    /// [`crate::MAX_PAYLOAD_BYTES`] bytes) on `channel`.
    ///
    /// # Errors
    /// [`PubsubError::InvalidChannel`], [`PubsubError::PayloadTooLarge`] or
    /// [`PubsubError::InvalidPayload`] for publications that can never be
    /// delivered; [`PubsubError::Closed`] after the pubsub was closed;
    /// [`PubsubError::BufferFlushed`] for a reused [`crate::PublishBuffer`].
    fn publish(&self, channel: &str, payload: &[u8]) -> Result<(), PubsubError>;
}

impl<P: Publisher + ?Sized> Publisher for Arc<P> {
    fn publish(&self, channel: &str, payload: &[u8]) -> Result<(), PubsubError> {
        (**self).publish(channel, payload)
    }
}

impl<P: Publisher + ?Sized> Publisher for Box<P> {
    fn publish(&self, channel: &str, payload: &[u8]) -> Result<(), PubsubError> {
        (**self).publish(channel, payload)
    }
}

impl<P: Publisher + ?Sized> Publisher for &P {
    fn publish(&self, channel: &str, payload: &[u8]) -> Result<(), PubsubError> {
        (**self).publish(channel, payload)
    }
}

/// One recorded publication: a channel and its payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// The channel published on.
    pub channel: String,
    /// The payload, as passed to [`Publisher::publish`].
    pub payload: Vec<u8>,
}

impl Publication {
    /// A publication of `payload` on `channel`.
    pub fn new(channel: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            channel: channel.into(),
            payload: payload.into(),
        }
    }
}

/// A [`Publisher`] that records every accepted publication, in order, for
/// tests. Publications are validated like the real implementations do.
#[derive(Debug, Default)]
pub struct RecordingPublisher {
    state: Mutex<RecordingState>,
}

#[derive(Debug, Default)]
struct RecordingState {
    published: Vec<Publication>,
    failing_channel: Option<String>,
}

impl RecordingPublisher {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every publication accepted so far, in publish order.
    pub fn published(&self) -> Vec<Publication> {
        self.lock().published.clone()
    }

    /// Returns and forgets every publication accepted so far.
    pub fn take(&self) -> Vec<Publication> {
        std::mem::take(&mut self.lock().published)
    }

    /// Makes every later publish on `channel` fail with
    /// [`PubsubError::Closed`] (and not be recorded); `None` stops failing.
    pub fn fail_channel(&self, channel: Option<&str>) {
        self.lock().failing_channel = channel.map(str::to_owned);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecordingState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Publisher for RecordingPublisher {
    fn publish(&self, channel: &str, payload: &[u8]) -> Result<(), PubsubError> {
        validate_publication(channel, payload)?;
        let mut state = self.lock();
        if state.failing_channel.as_deref() == Some(channel) {
            return Err(PubsubError::Closed);
        }
        state.published.push(Publication::new(channel, payload));
        Ok(())
    }
}

/// Checks a channel name against the limits every implementation shares.
pub(crate) fn validate_channel(channel: &str) -> Result<(), PubsubError> {
    let reason = if channel.is_empty() {
        "empty"
    } else if channel.len() > MAX_CHANNEL_BYTES {
        "longer than 63 bytes"
    } else if channel.contains('\0') {
        "contains a NUL byte"
    } else {
        return Ok(());
    };
    Err(PubsubError::InvalidChannel {
        channel: channel.to_owned(),
        reason,
    })
}

/// Checks a publication and returns its payload as text.
pub(crate) fn validate_publication<'p>(
    channel: &str,
    payload: &'p [u8],
) -> Result<&'p str, PubsubError> {
    validate_channel(channel)?;
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(PubsubError::PayloadTooLarge {
            size: payload.len(),
            limit: MAX_PAYLOAD_BYTES,
        });
    }
    match std::str::from_utf8(payload) {
        Ok(text) if !text.contains('\0') => Ok(text),
        _ => Err(PubsubError::InvalidPayload),
    }
}
