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
//! `crate::transitions`; the functions that write them say so. Static
//! statements are checked against the schema at compile time (sqlx's
//! macros, offline data in the workspace's `.sqlx/`; `sql!` assembles them
//! from the shared fragments below); the few assembled at run time say why.
//!
//! | module | table |
//! |---|---|
//! | [`chats`] | `chats` |
//! | [`messages`] | `chat_messages` |
//! | [`search`] | `chat_messages` (full-text search) |
//! | [`queue`] | `chat_queued_messages` |
//! | [`heartbeats`] | `chat_heartbeats` |
//! | [`send_receipts`] | `chat_send_receipts` |
//! | [`files`] | `chat_files`, `chat_file_chunks` |
//! | [`idempotency_keys`] | `idempotency_keys` |
//! | [`users`] | `users` |
//! | [`tokens`] | `api_keys` |
//! | [`sessions`] | `user_sessions` |
//! | [`shares`] | `chat_shares` |
//! | [`usage`] | `user_usage` |
//! | [`replicas`] | `replicas` |
//! | [`cluster_settings`] | `cluster_settings` |
//! | [`providers`] | `chat_providers` |
//! | [`model_configs`] | `chat_model_configs` |
//! | [`mcp_servers`] | `chat_mcp_servers` |
//! | [`locks`] | advisory locks |
//! | [`migrations`] | `_sqlx_migrations` |
//! | [`database`] | the database itself (`CREATE DATABASE`) |

/// SQL text written as pieces: string literals and fragment macros of this
/// module (`name!(args)`, each with an `@sql` arm that puts its own pieces
/// in its place), handed on as one statement, so that a fragment is written
/// once for both forms:
///
/// - `sql!(concat: ...)`: a `&'static str` (`concat!`), for the statements
///   that are assembled at run time;
/// - `sql!(query_as(Record,) [, args]: ...)` (or `query`, `query_scalar`
///   with `()`): `sqlx::query_as!(Record, "a" + "b" + ..., args)`, checked
///   against the schema at compile time (offline: the workspace's `.sqlx/`).
///   sqlx's macros take string literals joined by `+` and expand no macro
///   calls, hence this.
///
/// The pieces are matched as single token trees (never as `literal`
/// fragments, which would reach sqlx's parser wrapped in an invisible group).
macro_rules! sql {
    (concat: $($p:tt)+) => {
        $crate::queries::sql!(@go [] (concat) $($p)+)
    };
    ($m:ident ($($head:tt)*) [$($args:tt)*]: $($p:tt)+) => {
        $crate::queries::sql!(@go [] ($m ($($head)*) [$($args)*]) $($p)+)
    };
    (@go [$($d:tt)*] $k:tt) => {
        $crate::queries::sql!(@emit $k $($d)*)
    };
    (@go $d:tt $k:tt $f:ident ! $a:tt $($rest:tt)*) => {
        $f!(@sql $d $k $a $($rest)*)
    };
    (@go [$($d:tt)*] $k:tt $s:tt $($rest:tt)*) => {
        $crate::queries::sql!(@go [$($d)* $s] $k $($rest)*)
    };
    (@emit (concat) $($s:tt)+) => {
        concat!($($s),+)
    };
    (@emit ($m:ident ($($head:tt)*) [$($args:tt)*]) $first:tt $($s:tt)*) => {
        sqlx::$m!($($head)* $first $(+ $s)* $($args)*)
    };
}
pub(crate) use sql;

/// The types of the columns that sqlx's macros read with an override (`AS
/// "name: type"`): the override is in the column's name, which PostgreSQL
/// cuts at 63 bytes, so the types have short names here.
pub(crate) mod col {
    use sqlx::types::Json;

    /// `chats.last_error`.
    pub(crate) type Error = Json<chatd_core::ChatError>;
    /// `chats.retry_state`.
    pub(crate) type Retry = Json<chatd_core::RetryState>;
    /// `chats.labels`.
    pub(crate) type Labels = Json<std::collections::BTreeMap<String, String>>;
    /// `chats.dynamic_tools`.
    pub(crate) type Tools = Json<Vec<chatd_core::DynamicTool>>;
    /// The context entries of the chat facts.
    pub(crate) type Entries = Json<Vec<crate::models::EntryRow>>;
    /// `chat_messages.content`.
    pub(crate) type Content = Json<Vec<chatd_core::MessagePart>>;
}

/// The columns of a [`crate::models::Chat`] of alias `c`, for the
/// compile-checked statements (with sqlx's type overrides for the JSON
/// columns); [`chat_of`] makes the row of the record.
macro_rules! chat_columns {
    (@sql $d:tt $k:tt () $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            r#"c.id, c.owner_id, c.parent_chat_id, c.root_chat_id, c.status, c.archived,
             c.worker_id, c.runner_id,
             c.last_error AS "last_error: crate::queries::col::Error",
             c.retry_state AS "retry_state: crate::queries::col::Retry",
             c.snapshot_version, c.history_version, c.queue_version, c.generation_attempt,
             c.retry_state_version, c.requires_action_deadline_at, c.title,
             c.labels AS "labels: crate::queries::col::Labels",
             c.pin_order, c.last_model_config_id, c.last_reasoning_effort,
             c.dynamic_tools AS "dynamic_tools: crate::queries::col::Tools",
             c.mcp_server_ids, c.plan_mode, c.compaction_requested_at, c.message_count,
             c.last_message_preview, c.context_tokens, c.context_estimated, c.context_limit,
             c.compactions, c.compacted_through_message_id, c.subagents, c.depth, c.spawn_key,
             c.workspace, c.workspace_bytes, c.workspace_files, c.workspace_updated_at,
             c.active_leaf_id, c.forked_from_chat_id, c.forked_from_message_id,
             c.created_at, c.updated_at"#
            $($rest)*)
    };
}

/// The [`crate::models::Chat`] of a record `$r` of a statement that
/// selects [`chat_columns`]; an unknown `status` is the `ColumnDecode`
/// error `FromRow` gives. Moves those fields out of `$r` (its others stay
/// readable); use where `?` returns a `sqlx::Error`.
macro_rules! chat_of {
    ($r:ident) => {
        $crate::models::Chat {
            id: $r.id,
            owner_id: $r.owner_id,
            parent_chat_id: $r.parent_chat_id,
            root_chat_id: $r.root_chat_id,
            status: $crate::queries::decode_column("status", $r.status)?,
            archived: $r.archived,
            worker_id: $r.worker_id,
            runner_id: $r.runner_id,
            last_error: $r.last_error.map(|j| j.0),
            retry_state: $r.retry_state.map(|j| j.0),
            snapshot_version: $r.snapshot_version,
            history_version: $r.history_version,
            queue_version: $r.queue_version,
            generation_attempt: $r.generation_attempt,
            retry_state_version: $r.retry_state_version,
            requires_action_deadline_at: $r.requires_action_deadline_at,
            title: $r.title,
            labels: $r.labels.0,
            pin_order: $r.pin_order,
            last_model_config_id: $r.last_model_config_id,
            last_reasoning_effort: $r.last_reasoning_effort,
            dynamic_tools: $r.dynamic_tools.0,
            mcp_server_ids: $r.mcp_server_ids,
            plan_mode: $r.plan_mode,
            compaction_requested_at: $r.compaction_requested_at,
            message_count: $r.message_count,
            last_message_preview: $r.last_message_preview,
            context_tokens: $r.context_tokens,
            context_estimated: $r.context_estimated,
            context_limit: $r.context_limit,
            compactions: $r.compactions,
            compacted_through_message_id: $r.compacted_through_message_id,
            active_leaf_id: $r.active_leaf_id,
            forked_from_chat_id: $r.forked_from_chat_id,
            forked_from_message_id: $r.forked_from_message_id,
            subagents: $r.subagents,
            depth: $r.depth,
            spawn_key: $r.spawn_key,
            workspace: $r.workspace,
            workspace_bytes: $r.workspace_bytes,
            workspace_files: $r.workspace_files,
            workspace_updated_at: $r.workspace_updated_at,
            created_at: $r.created_at,
            updated_at: $r.updated_at,
        }
    };
}

/// The [`crate::models::ChatFacts`] of a record `$r` of a statement that
/// selects [`chat_columns`] and `chat_facts_columns!(checked ...)` (or
/// `chat_facts_columns_without_entries!(checked ...)`).
macro_rules! facts_of {
    ($r:ident) => {
        $crate::models::ChatFacts {
            chat: chat_of!($r),
            queue_len: $r.queue_len,
            heartbeat_age_secs: $r.heartbeat_age_secs,
            context_entries: $r.context_entries,
        }
    };
}

/// The alias of a column of the chat facts: plain for `FromRow` (and the
/// keys of `json_agg`), with sqlx's overrides for the compile-checked
/// statements.
macro_rules! facts_alias {
    (@sql $d:tt $k:tt (plain $name:ident) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k facts_alias!(@plain $name) $($rest)*)
    };
    (@sql $d:tt $k:tt (checked token_estimate) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k r#""token_estimate!""# $($rest)*)
    };
    (@sql $d:tt $k:tt (@plain token_estimate) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k "token_estimate" $($rest)*)
    };
    (@sql $d:tt $k:tt (checked queue_len) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k r#""queue_len!""# $($rest)*)
    };
    (@sql $d:tt $k:tt (checked context_entries) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            r#""context_entries: crate::queries::col::Entries""# $($rest)*)
    };
    (@sql $d:tt $k:tt (@plain queue_len) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k "queue_len" $($rest)*)
    };
    (@sql $d:tt $k:tt (@plain context_entries) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k "context_entries" $($rest)*)
    };
}

/// A query of the rows the model context is chosen from
/// (`chatd_core::context`), selecting `$select` (of alias `m`): the active
/// (not soft-deleted) rows after what the newest boundary covers, and the
/// leading system rows; every active row when there is no boundary.
macro_rules! context_candidates {
    (@sql $d:tt $k:tt ($($select:tt)+) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            "WITH b AS (
                 SELECT COALESCE(compacted_through_id, id - 1) AS covered FROM chat_messages
                 WHERE chat_id = $1 AND compressed AND NOT deleted ORDER BY id DESC LIMIT 1) "
            $($select)+
            " FROM chat_messages m
             WHERE m.chat_id = $1 AND NOT m.deleted
               AND (NOT EXISTS (SELECT 1 FROM b) OR m.id > (SELECT covered FROM b)
                    OR (m.role = 'system' AND m.id < COALESCE(
                        (SELECT min(id) FROM chat_messages
                         WHERE chat_id = $1 AND NOT deleted AND role <> 'system'),
                        9223372036854775807)))
             ORDER BY m.id"
            $($rest)*)
    };
    ($($select:tt)+) => {
        $crate::queries::sql!(concat: context_candidates!($($select)+))
    };
}

/// The columns of one context entry ([`messages::context_entries`]) for
/// `context_candidates!`.
macro_rules! context_entry_columns {
    (@sql $d:tt $k:tt () $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k context_entry_columns!(plain) $($rest)*)
    };
    (@sql $d:tt $k:tt ($mode:ident) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k "SELECT m.id, m.role, m.visibility, m.compressed, m.compacted_through_id,
                COALESCE(m.token_estimate, octet_length(m.content::text) / 4 + 4) AS "
                facts_alias!($mode token_estimate) ",
                CASE WHEN m.role = 'assistant' AND m.input_tokens IS NOT NULL
                     THEN m.input_tokens + COALESCE(m.cache_read_tokens, 0)
                          + COALESCE(m.cache_creation_tokens, 0) END AS prompt_tokens,
                m.output_tokens" $($rest)*)
    };
    () => {
        $crate::queries::sql!(concat: context_entry_columns!())
    };
}

/// The columns that make a chat row of alias `$c` a
/// [`chats::ChatFacts`]: its queue length, its runner's heartbeat age and,
/// when the history changed in this transaction (`history_version =
/// snapshot_version`), the entries of its model context as JSON, so that
/// the commit can bring `Chat.context` up to date without reading them
/// again. `$1` is the chat id.
macro_rules! chat_facts_columns {
    (@sql $d:tt $k:tt ($mode:ident $c:tt) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            chat_facts_base_columns!($mode $c)
            ",
             CASE WHEN " $c ".history_version = " $c ".snapshot_version THEN
                 (SELECT COALESCE(json_agg(e ORDER BY e.id), '[]') FROM ("
            context_candidates!(context_entry_columns!())
            ") e) END AS " facts_alias!($mode context_entries)
            $($rest)*)
    };
    ($c:literal) => {
        $crate::queries::sql!(concat: chat_facts_columns!(plain $c))
    };
}

/// [`chat_facts_columns`] without the context entries (`NULL`): for a
/// bundle that knows them already ([`crate::context_cache`]).
macro_rules! chat_facts_columns_without_entries {
    (@sql $d:tt $k:tt ($mode:ident $c:tt) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            chat_facts_base_columns!($mode $c)
            ", NULL::json AS " facts_alias!($mode context_entries)
            $($rest)*)
    };
    ($c:literal) => {
        $crate::queries::sql!(concat: chat_facts_columns_without_entries!(plain $c))
    };
}

/// The queue length and heartbeat age columns of [`chat_facts_columns`].
macro_rules! chat_facts_base_columns {
    (@sql $d:tt $k:tt ($mode:ident $c:tt) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            "(SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = " $c ".id) AS "
            facts_alias!($mode queue_len)
            ",
             CASE WHEN " $c ".runner_id IS NOT NULL THEN
                 (SELECT extract(epoch FROM now() - h.heartbeat_at)::float8 FROM chat_heartbeats h
                  WHERE h.chat_id = " $c ".id AND h.runner_id = " $c ".runner_id) END AS heartbeat_age_secs"
            $($rest)*)
    };
}

/// The `SET` of the context columns that the database derives itself (the
/// summaries in the active history, the window of the chat's model), for a
/// chat of alias `c` and id `$1`: written with the computed ones by every
/// statement that brings `Chat.context` up to date.
macro_rules! context_derived_sets {
    (@sql $d:tt $k:tt () $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            "compactions = (SELECT count(*) FROM chat_messages
                 WHERE chat_id = $1 AND compressed AND NOT deleted AND visibility <> 'user'), "
            context_limit_set!()
            $($rest)*)
    };
}

/// [`context_derived_sets`] for a history that changed only by appending
/// ordinary rows since the row's context was last written (a bundle whose
/// context log followed it, [`crate::context_cache`]): the count of
/// summaries cannot have changed, and recounting them would scan the
/// chat's whole history.
macro_rules! context_limit_set {
    (@sql $d:tt $k:tt () $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            "context_limit = (SELECT context_limit FROM chat_model_configs
                 WHERE enabled AND (id = c.last_model_config_id OR is_default)
                 ORDER BY (id = c.last_model_config_id) DESC NULLS LAST LIMIT 1)"
            $($rest)*)
    };
    () => {
        $crate::queries::sql!(concat: context_limit_set!())
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
pub mod responses;
pub mod search;
pub mod send_receipts;
pub mod sessions;
pub mod shares;
pub mod tokens;
pub mod usage;
pub mod users;
pub mod workspaces;

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
pub async fn set_read_only_snapshot(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(conn)
        .await
        .map(|_| ())
}

/// `value` of column `index` as a `T` (a `#[sqlx(try_from = ...)]` of
/// `FromRow`, for the records of sqlx's macros): a value `T` does not know
/// is the same `ColumnDecode` error `FromRow` gives.
pub(crate) fn decode_column<T, S>(index: &str, value: S) -> sqlx::Result<T>
where
    T: TryFrom<S>,
    T::Error: std::error::Error + Send + Sync + 'static,
{
    T::try_from(value).map_err(|e| sqlx::Error::ColumnDecode {
        index: index.to_owned(),
        source: Box::new(e),
    })
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn begin_starts_a_transaction_on_a_connection_of_pool() -> anyhow::Result<()> {
        use crate::queries;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let tx = queries::begin(&pool).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn set_read_only_snapshot_makes_the_transaction_of_conn_a_read_only() -> anyhow::Result<()>
    {
        use crate::queries;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let mut tx = queries::begin(&pool).await?;
        queries::set_read_only_snapshot(&mut tx).await?;
        let write = queries::cluster_settings::insert_if_absent(&mut *tx, "k", "v").await;
        let code = write
            .unwrap_err()
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("25006"), "read_only_sql_transaction");
        Ok(())
    }
}
