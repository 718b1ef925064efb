//! The chat worker (`spec/chatd-architecture.md`, "Chat worker").
//!
//! So far: the [`part_buffer`] (spec "Message part buffer"), the replica-wide
//! in-memory store of streaming parts that the generation task writes and the
//! stream loop and the parts endpoint read.

pub mod part_buffer;

pub use part_buffer::{PartBuffer, PartBufferConfig, PartBufferError, PartSubscription};
