//! The error type of every pubsub operation.
//!
//! Publishing is best effort (`spec/chatd-architecture.md`, "Notification
//! emission rules"), so I/O failures after a publication was accepted are
//! logged, not returned: the errors here are the ones a caller can act on
//! (a payload that can never be delivered, a closed pubsub, a reused
//! [`PublishBuffer`](crate::PublishBuffer)).

use std::fmt::Write as _;

/// Errors returned by publishers, subscribers and [`crate::PublishBuffer`].
#[derive(Debug, thiserror::Error)]
pub enum PubsubError {
    /// The pubsub was closed (explicitly, or because every handle was dropped).
    #[error("pubsub is closed")]
    Closed,

    /// The payload is larger than [`crate::MAX_PAYLOAD_BYTES`] (PostgreSQL's
    /// `NOTIFY` payload limit is 8000 bytes).
    #[error("payload of {size} bytes exceeds the {limit}-byte pubsub limit")]
    PayloadTooLarge {
        /// Size of the rejected payload, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },

    /// The payload is not UTF-8 text, or contains a NUL byte (PostgreSQL
    /// `NOTIFY` payloads are `text`).
    #[error("payload must be UTF-8 text without NUL bytes")]
    InvalidPayload,

    /// The channel name is empty, longer than [`crate::MAX_CHANNEL_BYTES`] or
    /// contains a NUL byte.
    #[error("invalid channel name {channel:?}: {reason}")]
    InvalidChannel {
        /// The rejected channel name.
        channel: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// `PublishBuffer::publish` was called after
    /// [`crate::PublishBuffer::flush`]: the buffer is single use.
    #[error("publish buffer was already flushed")]
    BufferFlushed,

    /// [`crate::PublishBuffer::flush`] attempted every buffered publication and
    /// some of them failed.
    #[error("{} of {attempted} buffered publications failed: {}", failures.len(), describe(failures))]
    Flush {
        /// How many publications were forwarded (successfully or not).
        attempted: usize,
        /// The publications that failed, in buffer order.
        failures: Vec<FlushFailure>,
    },

    /// A payload could not be encoded or decoded as the expected JSON shape.
    #[error("pubsub payload JSON: {0}")]
    Json(#[from] serde_json::Error),

    /// The database rejected an operation, or could not be reached.
    #[error("pubsub database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// One failed publication of a [`PubsubError::Flush`].
#[derive(Debug)]
pub struct FlushFailure {
    /// The channel the publication was for.
    pub channel: String,
    /// Why forwarding it failed.
    pub error: PubsubError,
}

fn describe(failures: &[FlushFailure]) -> String {
    let mut out = String::new();
    for (i, failure) in failures.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        let _ = write!(out, "{}: {}", failure.channel, failure.error);
    }
    out
}
