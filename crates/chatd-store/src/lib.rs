//! PostgreSQL layer of chatd (`spec/chatd-architecture.md`, "Core state
//! machine", "Message revisions and history version", "Queue version",
//! "Retry state version", "Pubsub"; `spec/chatstate-package.md`).
//!
//! - [`MIGRATOR`]: the forward-only schema, triggers included, embedded in the
//!   binary.
//! - [`Store`] (`store.rs`) and [`ChatMachine`] (`machine.rs`): the handles;
//!   `lock`, `read_lock` and `snapshot`.
//! - `bundle/`: [`ChatTx`], a transition bundle: `update`/`begin` lock the
//!   chat row and bump `snapshot_version` once, transitions apply, the
//!   commit then publishes (`bundle/publish.rs`).
//! - `transitions/`: every transition, one file per family, validated
//!   against [`chatd_core::matrix`]; `create_chat` and the family archives
//!   among them.
//! - [`models`]: the rows and inputs the modules share.
//! - [`secrets`]: provider API keys and MCP secrets encrypted at rest.
//! - `queries/` (crate-private): every SQL statement of chatd, one module
//!   per table, with typed inputs and rows; no other crate writes SQL.
//!   [`rules`]: the conditions (runnable, idle) that statements and Rust
//!   code share.
//! - The front (`front.rs`): the modules named after tables ([`chats`],
//!   [`messages`], [`files`], [`users`], ...) that re-export what other
//!   crates may call: reads, and single-statement writes outside the state
//!   machine. Operations of several statements run in one transaction of
//!   their own: [`users::patch`], [`users::bootstrap_admin`],
//!   [`users::issue_token`] (`accounts.rs`), [`files::store_upload`]
//!   (`uploads.rs`), [`idempotency_keys::begin_claim`] (`claims.rs`), and
//!   the admin resources' writes ([`admin`]).
//!
//! Execution-state tables are written only through the transitions; the
//! triggers turn any out-of-band write of a message into a `history_version`
//! change that in-flight workers would see as a fence failure.

pub(crate) mod accounts;
pub mod admin;
pub(crate) mod bundle;
mod claims;
pub mod context_cache;
pub mod error;
pub(crate) mod front;
pub(crate) mod machine;
pub mod models;
pub(crate) mod queries;
pub(crate) mod row_cache;
pub mod rules;
pub mod secrets;
pub(crate) mod store;
#[cfg(test)]
mod test_fixture;
pub(crate) mod transitions;
mod uploads;

pub use front::search;
pub use front::{
    chats, cluster_settings, database, files, heartbeats, idempotency_keys, internals, mcp_servers,
    messages, migrations, model_configs, providers, queue, replicas, responses, send_receipts,
    sessions, shares, tokens, usage, users, workspaces,
};

pub use error::{StoreError, StoreResult, is_transient};

/// The deepest a chat may be: a root is 0, its children 1, theirs 2 (API.md
/// "Sub-agents and plan mode"). Creating a child of a chat at this depth is
/// refused (`InvalidInput` on `parent_chat_id`).
pub const MAX_CHAT_DEPTH: i32 = 2;
pub use bundle::publish::chat_update_payload;
pub use bundle::{ChatTx, WorkspaceCopy};
pub use machine::{ChatMachine, LockedChat};
pub use models::{
    Chat, ChatMessage, CreateChatInput, DEFAULT_CHAT_TITLE, FinishReasonColumn, NewMessage,
    QueuedMessage, Usage,
};
pub use queries::chats::LockMode;
pub use queries::mcp_servers::McpServerRow;
pub use queries::model_configs::ModelConfigRow;
pub use queries::providers::ProviderRow;
pub use store::{Store, StoreConfig, migrate};
pub use transitions::branches::{ActivateResult, RegenerateResult};
pub use transitions::create::CreateChatResult;
pub use transitions::edit::{EditMessageInput, EditMessageResult};
pub use transitions::fork::{ForkInput, ForkOutcome};
pub use transitions::interrupt::FinishInterruptionResult;
pub use transitions::queue::{EditQueuedMessageInput, PromoteQueuedMessageResult};
pub use transitions::requires_action::{
    CompleteRequiresActionInput, ToolAnswer, ToolResultInput, validate_tool_results,
};
pub use transitions::send::{SendMessageInput, SendMessageResult, UserSend, UserSendStart};
pub use transitions::step::{CommitStepResult, FinishTurnResult};

/// How long a pooled connection may sit idle before [`pool_options`] pings
/// it on checkout (1 s).
pub const PING_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The pool options every chatd pool starts from: at most
/// `max_connections` connections, and a checkout pings a connection only
/// when it sat idle for [`PING_IDLE_AFTER`] or longer, instead of sqlx's
/// default of a ping on every checkout (issue 15: a turn checks a
/// connection out about ten times, and each ping is a round trip to the
/// server). A connection that broke while busy or within the last second
/// fails its next statement instead; that error is a retryable
/// `sqlx::Error::Io` for the callers' retry loops, and sqlx drops the
/// connection.
///
/// A new connection must reach a primary: one that lands on a server in
/// recovery (a standby, for instance the old primary of a switchover while
/// a proxy still routes to it, or the wrong host of a list) is closed and
/// the pool tries again until its acquire timeout, as libpq's
/// `target_session_attrs=read-write` does (issue 36; one
/// `SELECT pg_is_in_recovery()` per new connection).
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?;
/// let pool = chatd_store::pool_options(4).connect(db.url()).await?;
/// assert_eq!(pool.options().get_max_connections(), 4);
/// assert!(!pool.options().get_test_before_acquire());
/// let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await?;
/// assert_eq!(one, 1);
/// # Ok(()) }
/// ```
pub fn pool_options(max_connections: u32) -> sqlx::postgres::PgPoolOptions {
    use sqlx::Connection as _;
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                    .fetch_one(&mut *conn)
                    .await?;
                if standby {
                    return Err(sqlx::Error::Io(std::io::Error::other(
                        "the server is a standby (in recovery): chatd needs the primary",
                    )));
                }
                Ok(())
            })
        })
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IDLE_AFTER {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

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
