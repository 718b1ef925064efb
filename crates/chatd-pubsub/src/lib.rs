//! Pubsub for chatd (`spec/chatd-architecture.md`, "Pubsub").
//!
//! Notifications are post-commit, best-effort *hints*: receivers tolerate
//! duplicates, drops and reordering, and re-read the database whenever a hint
//! (or a [`PubsubEvent::Reconnected`]) says their view may be stale. This crate
//! owns:
//!
//! - the two notification channels and their JSON payloads ([`channels`]:
//!   [`OWNERSHIP_CHANNEL`], [`chat_update_channel`], [`ChatUpdate`],
//!   [`OwnershipHint`]);
//! - the [`Publisher`] interface the state machine publishes through, and the
//!   [`PublishBuffer`] that holds publications until the surrounding
//!   transaction commits (`spec/chatstate-package.md`, `Publisher` and
//!   `PublishBuffer`);
//! - the [`Pubsub`] interface (publish + subscribe) with two implementations:
//!   [`PgPubsub`] on PostgreSQL `LISTEN`/`NOTIFY`, for production and
//!   multi-replica tests, and [`MemoryPubsub`], in-process, for unit tests;
//! - the [`LiveParts`] interface: the read side of a replica's message part
//!   buffer (the worker writes it, the stream loop and the parts endpoint
//!   read it through this trait).
//!
//! Invariants every implementation keeps:
//!
//! - [`Publisher::publish`] never blocks on I/O;
//! - [`Pubsub::subscribe`] resolves only once the subscription is active, so a
//!   caller that subscribes *before* reading the database cannot miss a
//!   notification published after it read;
//! - a subscriber is never silently left behind: when messages may have been
//!   lost (listener reconnected, or the subscriber lagged), it receives
//!   [`PubsubEvent::Reconnected`] and must re-read state.

pub mod buffer;
pub mod channels;
pub mod error;
pub mod live_parts;
pub mod memory;
pub mod postgres;
pub mod publisher;
pub mod subscription;

pub use buffer::PublishBuffer;
pub use channels::{ChatUpdate, OWNERSHIP_CHANNEL, OwnershipHint, chat_update_channel};
pub use error::{FlushFailure, PubsubError};
pub use live_parts::{EpisodeProgress, LiveParts, PartStream};
pub use memory::MemoryPubsub;
pub use postgres::{LISTENER_APPLICATION_NAME, PgPubsub, PgPubsubOptions};
pub use publisher::{
    MAX_CHANNEL_BYTES, MAX_PAYLOAD_BYTES, Publication, Publisher, RecordingPublisher,
};
pub use subscription::{DEFAULT_SUBSCRIBER_CAPACITY, Pubsub, PubsubEvent, Subscription};
