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
//! - [`queries`]: every SQL statement of chatd, one module per table, with
//!   typed inputs and rows; no other crate writes SQL. [`rules`]: the
//!   conditions (runnable, idle) that statements and Rust code share.
//!
//! Execution-state tables are written only through the transitions; the
//! triggers turn any out-of-band write of a message into a `history_version`
//! change that in-flight workers would see as a fence failure.

pub mod error;
pub mod machine;
pub mod models;
pub mod queries;
pub mod rules;
pub mod transitions;

pub use error::{StoreError, StoreResult};

/// The deepest a chat may be: a root is 0, its children 1, theirs 2 (API.md
/// "Sub-agents and plan mode"). Creating a child of a chat at this depth is
/// refused (`InvalidInput` on `parent_chat_id`).
pub const MAX_CHAT_DEPTH: i32 = 2;
pub use machine::{
    ChatMachine, ChatTx, CreateChatInput, CreateChatResult, LockedChat, Store, StoreConfig,
    chat_update_payload, migrate,
};
pub use models::{
    Chat, ChatMessage, DEFAULT_CHAT_TITLE, FinishReasonColumn, NewMessage, QueuedMessage, Usage,
};
pub use queries::chats::LockMode;
pub use queries::mcp_servers::McpServerRow;
pub use queries::model_configs::ModelConfigRow;
pub use queries::providers::ProviderRow;
pub use transitions::{
    CommitStepResult, CompleteRequiresActionInput, EditMessageInput, EditMessageResult,
    EditQueuedMessageInput, FinishInterruptionResult, FinishTurnResult, PromoteQueuedMessageResult,
    SendMessageInput, SendMessageResult, ToolAnswer, ToolResultInput, validate_tool_results,
};

/// The embedded migrations (`crates/chatd-store/migrations`).
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// // Applying them again finds nothing to do.
/// chatd_store::MIGRATOR.run(pool).await?;
/// assert!(chatd_store::MIGRATOR.iter().count() >= 2);
/// # Ok(()) }
/// ```
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");
