//! The chat worker (`spec/chatd-architecture.md`, "Chat worker").
//!
//! - [`part_buffer`]: the replica-wide store of streaming parts ("Message part
//!   buffer").
//! - The acquisition loop, the runner manager (main, database sync, heartbeat
//!   and heartbeat cleanup loops), the chat runner event loop and its four
//!   kinds of tasks, started together by [`Worker::start`].
//! - [`providers`]: model and provider resolution (OpenAI-compatible and
//!   Anthropic), reasoning effort, cost, the chat's MCP servers.
//! - [`title`]: the background title of a chat's first answer.
//! - [`archive`]: the auto-archive loop of old, unused chats.
//! - [`idempotency_sweep`]: the loop deleting expired `Idempotency-Key` rows.
//! - [`files_sweep`]: the loop deleting files no chat linked within 24 h.
//!
//! The runner's fence is `runner_id`: every task checks, under the chat row
//! lock, that the row still names this worker, its runner and the history
//! version and status it was spawned for; a task that finds otherwise exits
//! without side effects.

mod acquisition;
pub mod archive;
pub mod config;
mod context;
pub mod fence;
pub mod files_sweep;
pub mod idempotency_sweep;
mod manager;
pub mod part_buffer;
pub mod providers;
pub mod runner;
mod slots;
mod tasks;
mod ticker;
pub mod timeline;
mod worker;
pub mod workspace;

pub use archive::auto_archive_pass;
pub use config::WorkerConfig;
pub use part_buffer::{PartBuffer, PartBufferConfig, PartBufferError, PartSubscription};
pub use providers::{DefaultProviderFactory, ProviderFactory};
pub use tasks::title;
pub use worker::{Worker, WorkerDeps};
pub use workspace::{WorkspaceApproval, WorkspaceConfig};
