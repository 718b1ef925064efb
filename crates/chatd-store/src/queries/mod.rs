//! Every SQL statement of chatd, one module per table (`crate::rules`
//! holds the conditions several of them share). No other crate of the
//! workspace writes SQL; the pubsub adapter's `LISTEN`/`NOTIFY`, the tests
//! and the benchmarks aside.
//!
//! Functions take a connection (`&mut PgConnection`: a transaction's, when
//! several statements must be atomic) or any executor (`impl PgExecutor`: a
//! pool or a connection) and typed inputs, and return the rows of
//! [`crate::models`] or of their module. Execution-state tables and columns
//! (`chats.status`, `archived`, ownership, the version counters, messages,
//! queue, heartbeats of ownership) are written only by the transitions of
//! [`crate::transitions`]; the functions that write them say so. Lookups
//! by one key (`sql` with `$1 = key`) run through the `keyed` helpers.
//!
//! | module | table |
//! |---|---|
//! | [`chats`] | `chats` |
//! | [`messages`] | `chat_messages` |
//! | [`queue`] | `chat_queued_messages` |
//! | [`heartbeats`] | `chat_heartbeats` |
//! | [`send_receipts`] | `chat_send_receipts` |
//! | [`files`] | `chat_files`, `chat_file_chunks` |
//! | [`users`] | `users` |
//! | [`tokens`] | `api_keys` |
//! | [`replicas`] | `replicas` |
//! | [`cluster_settings`] | `cluster_settings` |
//! | [`providers`] | `chat_providers` |
//! | [`model_configs`] | `chat_model_configs` |
//! | [`mcp_servers`] | `chat_mcp_servers` |
//! | [`locks`] | advisory locks |
//! | [`migrations`] | `_sqlx_migrations` |
//! | [`database`] | the database itself (`CREATE DATABASE`) |

pub mod chats;
pub mod files;
pub mod cluster_settings;
pub mod database;
pub mod heartbeats;
pub mod locks;
pub mod mcp_servers;
pub mod messages;
pub mod migrations;
pub mod model_configs;
pub mod providers;
pub mod queue;
pub mod replicas;
pub mod send_receipts;
pub mod tokens;
pub mod users;

use sqlx::PgConnection;

/// Starts a transaction on a connection of `pool`; what every transaction
/// of chatd starts with instead of `Pool::begin`.
///
/// The `BEGIN` runs in a task of its own, so cancelling the caller (a
/// timeout, a task aborted when its lease is lost) never cancels it half
/// way: sqlx counts a transaction only once `BEGIN`'s answer has been read,
/// so a `Pool::begin` cancelled after sending it would return a connection
/// to the pool that is still inside a transaction the pool does not know
/// about (later autocommit statements would run in it, and the next
/// `BEGIN` would find "a transaction in progress"; issue 14). If the caller
/// is gone when the task ends, the task drops the transaction, which rolls
/// it back before the connection goes back to the pool.
///
/// # Errors
///
/// The pool's error (timeout, closed pool) or the `BEGIN`'s; a task that
/// panicked or was cancelled by a dying runtime is `sqlx::Error::PoolClosed`.
///
/// # Example
///
/// ```
/// use chatd_store::queries;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let tx = queries::begin(&pool).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub async fn begin(
    pool: &sqlx::PgPool,
) -> sqlx::Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let pool = pool.clone();
    tokio::spawn(async move { pool.begin().await })
        .await
        .unwrap_or(Err(sqlx::Error::PoolClosed))
}

/// Makes the transaction of `conn` a read-only `REPEATABLE READ` one: every
/// later read in it sees the same snapshot. Must be its first statement.
///
/// # Example
///
/// ```
/// use chatd_store::queries;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let mut tx = queries::begin(&pool).await?;
/// queries::set_read_only_snapshot(&mut tx).await?;
/// let write = queries::cluster_settings::insert_if_absent(&mut *tx, "k", "v").await;
/// let code = write.unwrap_err().as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
/// assert_eq!(code.as_deref(), Some("25006"), "read_only_sql_transaction");
/// # Ok(()) }
/// ```
pub async fn set_read_only_snapshot(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(conn)
        .await
        .map(|_| ())
}

/// The statement shape most lookups share: `sql` with `$1 = key`, its rows
/// read as `T` (a row struct, or a tuple).
pub(crate) mod keyed {
    use sqlx::postgres::PgRow;
    use sqlx::{Encode, FromRow, PgExecutor, Postgres, Type};

    /// The rows of `sql` for `key`, in the statement's order.
    pub(crate) async fn all<'c, T, K>(
        conn: impl PgExecutor<'c>,
        sql: &'static str,
        key: K,
    ) -> sqlx::Result<Vec<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + Send + Unpin,
        K: 'static + Encode<'static, Postgres> + Type<Postgres> + Send,
    {
        sqlx::query_as(sql).bind(key).fetch_all(conn).await
    }

    /// The row of `sql` for `key`, `None` when there is none.
    pub(crate) async fn optional<'c, T, K>(
        conn: impl PgExecutor<'c>,
        sql: &'static str,
        key: K,
    ) -> sqlx::Result<Option<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + Send + Unpin,
        K: 'static + Encode<'static, Postgres> + Type<Postgres> + Send,
    {
        sqlx::query_as(sql).bind(key).fetch_optional(conn).await
    }

    /// The single value of `sql` for `key` (a `count(*)`, an aggregate).
    pub(crate) async fn scalar<'c, T, K>(
        conn: impl PgExecutor<'c>,
        sql: &'static str,
        key: K,
    ) -> sqlx::Result<T>
    where
        (T,): for<'r> FromRow<'r, PgRow>,
        T: Send + Unpin,
        K: 'static + Encode<'static, Postgres> + Type<Postgres> + Send,
    {
        sqlx::query_scalar(sql).bind(key).fetch_one(conn).await
    }
}
