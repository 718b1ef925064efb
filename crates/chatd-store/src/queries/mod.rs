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
//! `crate::transitions`; the functions that write them say so. Lookups
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
//! | [`idempotency_keys`] | `idempotency_keys` |
//! | [`users`] | `users` |
//! | [`tokens`] | `api_keys` |
//! | [`usage`] | `user_usage` |
//! | [`replicas`] | `replicas` |
//! | [`cluster_settings`] | `cluster_settings` |
//! | [`providers`] | `chat_providers` |
//! | [`model_configs`] | `chat_model_configs` |
//! | [`mcp_servers`] | `chat_mcp_servers` |
//! | [`locks`] | advisory locks |
//! | [`migrations`] | `_sqlx_migrations` |
//! | [`database`] | the database itself (`CREATE DATABASE`) |

/// A query of the rows the model context is chosen from
/// (`chatd_core::context`), selecting `$select` (of alias `m`): the active
/// (not soft-deleted) rows after what the newest boundary covers, and the
/// leading system rows; every active row when there is no boundary.
macro_rules! context_candidates {
    ($($select:tt)+) => {
        concat!(
            "WITH b AS (
                 SELECT COALESCE(compacted_through_id, id - 1) AS covered FROM chat_messages
                 WHERE chat_id = $1 AND compressed AND NOT deleted ORDER BY id DESC LIMIT 1) ",
            $($select)+,
            " FROM chat_messages m
             WHERE m.chat_id = $1 AND NOT m.deleted
               AND (NOT EXISTS (SELECT 1 FROM b) OR m.id > (SELECT covered FROM b)
                    OR (m.role = 'system' AND m.id < COALESCE(
                        (SELECT min(id) FROM chat_messages
                         WHERE chat_id = $1 AND NOT deleted AND role <> 'system'),
                        9223372036854775807)))
             ORDER BY m.id"
        )
    };
}

/// The columns of one context entry ([`messages::context_entries`]) for
/// `context_candidates!`.
macro_rules! context_entry_columns {
    () => {
        "SELECT m.id, m.role, m.visibility, m.compressed, m.compacted_through_id,
                COALESCE(m.token_estimate, octet_length(m.content::text) / 4 + 4) AS token_estimate,
                CASE WHEN m.role = 'assistant' AND m.input_tokens IS NOT NULL
                     THEN m.input_tokens + COALESCE(m.cache_read_tokens, 0)
                          + COALESCE(m.cache_creation_tokens, 0) END AS prompt_tokens,
                m.output_tokens"
    };
}

/// The columns that make a chat row of alias `$c` a
/// [`chats::ChatFacts`]: its queue length, its runner's heartbeat age and,
/// when the history changed in this transaction (`history_version =
/// snapshot_version`), the entries of its model context as JSON, so that
/// the commit can bring `Chat.context` up to date without reading them
/// again. `$1` is the chat id.
macro_rules! chat_facts_columns {
    ($c:literal) => {
        concat!(
            chat_facts_base_columns!($c),
            ",
             CASE WHEN ",
            $c,
            ".history_version = ",
            $c,
            ".snapshot_version THEN
                 (SELECT COALESCE(json_agg(e ORDER BY e.id), '[]') FROM (",
            context_candidates!(context_entry_columns!()),
            ") e) END AS context_entries"
        )
    };
}

/// [`chat_facts_columns`] without the context entries (`NULL`): for a
/// bundle that knows them already ([`crate::context_cache`]).
macro_rules! chat_facts_columns_without_entries {
    ($c:literal) => {
        concat!(
            chat_facts_base_columns!($c),
            ", NULL::json AS context_entries"
        )
    };
}

/// The queue length and heartbeat age columns of [`chat_facts_columns`].
macro_rules! chat_facts_base_columns {
    ($c:literal) => {
        concat!(
            "(SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = ",
            $c,
            ".id) AS queue_len,
             CASE WHEN ",
            $c,
            ".runner_id IS NOT NULL THEN
                 (SELECT extract(epoch FROM now() - h.heartbeat_at)::float8 FROM chat_heartbeats h
                  WHERE h.chat_id = ",
            $c,
            ".id AND h.runner_id = ",
            $c,
            ".runner_id) END AS heartbeat_age_secs"
        )
    };
}

/// The `SET` of the context columns that the database derives itself (the
/// summaries in the active history, the window of the chat's model), for a
/// chat of alias `c` and id `$1`: written with the computed ones by every
/// statement that brings `Chat.context` up to date.
macro_rules! context_derived_sets {
    () => {
        concat!(
            "compactions = (SELECT count(*) FROM chat_messages
                 WHERE chat_id = $1 AND compressed AND NOT deleted AND visibility <> 'user'), ",
            context_limit_set!()
        )
    };
}

/// [`context_derived_sets`] for a history that changed only by appending
/// ordinary rows since the row's context was last written (a bundle whose
/// context log followed it, [`crate::context_cache`]): the count of
/// summaries cannot have changed, and recounting them would scan the
/// chat's whole history.
macro_rules! context_limit_set {
    () => {
        "context_limit = (SELECT context_limit FROM chat_model_configs
                 WHERE enabled AND (id = c.last_model_config_id OR is_default)
                 ORDER BY (id = c.last_model_config_id) DESC NULLS LAST LIMIT 1)"
    };
}

pub mod chats;
pub mod cluster_settings;
pub mod database;
pub mod files;
pub mod heartbeats;
pub mod idempotency_keys;
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
pub mod usage;
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
