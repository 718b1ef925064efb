//! PostgreSQL layer of chatd (`spec/chatd-architecture.md`, "Core state
//! machine", "Message revisions and history version", "Queue version",
//! "Retry state version", "Pubsub"; `spec/chatstate-package.md`).
//!
//! - [`MIGRATOR`]: the forward-only schema, triggers included, embedded in the
//!   binary.
//! - [`Store`] and [`ChatMachine`]: `create_chat`, `update`/`begin` (lock the
//!   chat row, bump `snapshot_version` once, apply transitions, commit, then
//!   publish), `lock`, `read_lock` and `snapshot`.
//! - [`ChatTx`]: every transition, validated against
//!   [`chatd_core::matrix`].
//!
//! Execution-state tables are written only through the transitions; the
//! triggers turn any out-of-band write of a message into a `history_version`
//! change that in-flight workers would see as a fence failure.

pub mod error;
pub mod machine;
pub mod models;
pub mod queries;
pub mod transitions;

pub use error::{StoreError, StoreResult};
pub use machine::{
    ChatMachine, ChatTx, CreateChatInput, CreateChatResult, LockedChat, Store, StoreConfig,
    chat_update_payload, migrate,
};
pub use models::{Chat, ChatMessage, FinishReasonColumn, NewMessage, QueuedMessage, Usage};
pub use transitions::{
    CompleteRequiresActionInput, EditMessageInput, EditMessageResult, FinishInterruptionResult,
    FinishTurnResult, PromoteQueuedMessageResult, SendMessageInput, SendMessageResult,
    ToolResultInput, validate_tool_results,
};

/// The embedded migrations (`crates/chatd-store/migrations`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");
