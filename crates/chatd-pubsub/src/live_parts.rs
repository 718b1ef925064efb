//! The read side of a replica's message part buffer, as the stream loop and
//! the parts endpoint see it (`spec/chatd-architecture.md`, "Message part
//! buffer", "Relay mechanism"; API.md "Stream", `message_part`).
//!
//! The worker owns the buffer and writes it (`chatd_worker::PartBuffer`
//! implements [`LiveParts`]); the API only reads it, through this trait, so
//! it does not depend on the worker crate. The binary hands the same buffer
//! to both.
//!
//! Like the rest of this crate, what it delivers is live and not durable:
//! parts are previews of a turn still running, committed messages are the
//! truth.

use chatd_core::{Episode, StreamPart};
use futures::stream::BoxStream;

/// The parts of one episode as a subscription delivers them: first those
/// already buffered, then each new one, `seq` 1, 2, 3, … It ends after the
/// last part of a closed episode, when the subscriber was too slow (the
/// buffer dropped it: subscribe again and skip what was delivered), or when
/// the buffer shuts down. Dropping it unsubscribes.
pub type PartStream = BoxStream<'static, StreamPart>;

/// How far an episode is, as the buffer holds it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeProgress {
    /// Parts buffered so far (the highest `seq`).
    pub parts: u64,
    /// Whether the episode is closed (no part will follow).
    pub closed: bool,
}

/// A replica's live parts, read-only.
pub trait LiveParts: Send + Sync + std::fmt::Debug {
    /// Subscribes to `episode`. Never fails: a subscription to an episode
    /// not created yet waits for it (create and subscribe may race).
    fn subscribe(&self, episode: Episode) -> PartStream;

    /// The episode's progress, or `None` when the buffer has no such
    /// episode (never created, or closed and collected).
    fn progress(&self, episode: Episode) -> Option<EpisodeProgress>;
}
