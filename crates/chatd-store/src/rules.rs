//! Rules about chats that both SQL statements and Rust code apply, written
//! once here (`spec/chatd-architecture.md`, "Execution states",
//! "Acquisition loop", "HTTP endpoints": `DELETE`).
//!
//! A chat's execution state is [`chatd_core::classify`] of its row; the
//! rules below are that classification restricted to what a `WHERE` clause
//! can see. Each SQL fragment is a macro expanding to a string literal, so
//! that statements embed it with `concat!` and stay `&'static str` (no SQL is
//! built at run time), and so that the partial index `chats_runnable_idx`
//! (migration `0001_init.sql`, whose predicate is this exact text) still
//! matches the planner's view of the statements.
//!
//! - Runnable ([`RUNNABLE_CHAT_SQL`], [`ExecutionState::is_runnable`]): a
//!   worker may acquire and drive the chat (`R*`, `I*`, `A*`).
//! - Deletable ([`ExecutionState::is_deletable`]): `DELETE /chats/{chat}`
//!   may remove the chat (`W`, `E0`, `E1`, `XW`, `XE0`, `XE1`); exactly the
//!   rows whose status is one of [`IDLE_STATUS_SQL`]'s, minus invalid ones.
//!
//! [`ExecutionState::is_runnable`]: chatd_core::ExecutionState::is_runnable
//! [`ExecutionState::is_deletable`]: chatd_core::ExecutionState::is_deletable

/// SQL condition on a `chats` row that holds exactly when the chat is
/// runnable; the argument is a column prefix such as `"c."` (none: bare
/// column names). Also a fragment of `crate::queries::sql!`, for the
/// compile-checked statements.
macro_rules! runnable_chat_sql {
    (@sql $d:tt $k:tt ($prefix:tt) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            $prefix "status IN ('running', 'interrupting', 'requires_action') AND NOT "
            $prefix "archived"
            $($rest)*)
    };
    () => {
        $crate::rules::runnable_chat_sql!("")
    };
    ($prefix:literal) => {
        $crate::queries::sql!(concat: runnable_chat_sql!($prefix))
    };
}

/// SQL condition on a `chats` row that holds exactly when its status is
/// idle (`waiting` or `error`): with a valid queue and archive marker such a
/// chat is deletable, and with an empty queue it may be auto-archived.
/// Also a fragment of `crate::queries::sql!`.
macro_rules! idle_status_sql {
    (@sql $d:tt $k:tt ($prefix:tt) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k $prefix "status IN ('waiting', 'error')" $($rest)*)
    };
    () => {
        $crate::rules::idle_status_sql!("")
    };
    ($prefix:literal) => {
        $crate::queries::sql!(concat: idle_status_sql!($prefix))
    };
}

pub(crate) use {idle_status_sql, runnable_chat_sql};

/// The runnable rule as SQL over a `chats` row, without a table prefix: true
/// exactly when [`chatd_core::classify`] of the row is runnable, whatever the
/// queue holds.
///
/// ```
/// use chatd_core::{ChatStatus, classify};
/// use chatd_store::rules::RUNNABLE_CHAT_SQL;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// // PostgreSQL evaluates the rule for every status and archive marker; the
/// // classifier agrees for both queue states.
/// for status in ChatStatus::ALL {
///     for archived in [false, true] {
///         let sql = format!(
///             "SELECT {RUNNABLE_CHAT_SQL} FROM (SELECT $1::text AS status, $2 AS archived) c"
///         );
///         let runnable: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
///             .bind(status.as_str())
///             .bind(archived)
///             .fetch_one(pool)
///             .await?;
///         for queued in [false, true] {
///             let state = classify(Some((status, archived, queued)));
///             assert_eq!(runnable, state.is_runnable(), "{status} archived={archived}");
///         }
///     }
/// }
/// # Ok(()) }
/// ```
pub const RUNNABLE_CHAT_SQL: &str = runnable_chat_sql!();

/// The idle-status rule as SQL over a `chats` row, without a table prefix:
/// the row's status is `waiting` or `error`. Every deletable execution state
/// has such a status, and every valid row with one is deletable.
///
/// ```
/// use chatd_core::{ChatStatus, ExecutionState, classify};
/// use chatd_store::rules::IDLE_STATUS_SQL;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// for status in ChatStatus::ALL {
///     let sql = format!("SELECT {IDLE_STATUS_SQL} FROM (SELECT $1::text AS status) c");
///     let idle: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
///         .bind(status.as_str())
///         .fetch_one(pool)
///         .await?;
///     for archived in [false, true] {
///         for queued in [false, true] {
///             let state = classify(Some((status, archived, queued)));
///             if state != ExecutionState::Invalid {
///                 assert_eq!(idle, state.is_deletable(), "{state}");
///             }
///         }
///     }
/// }
/// # Ok(()) }
/// ```
pub const IDLE_STATUS_SQL: &str = idle_status_sql!();

#[cfg(test)]
mod tests {
    use chatd_core::{ChatStatus, ExecutionState, classify};

    /// The literal lists of the SQL rules are exactly the statuses the
    /// classifier puts in each class.
    #[test]
    fn the_sql_rules_list_the_classifiers_statuses() {
        let quoted = |keep: &dyn Fn(ChatStatus) -> bool| {
            ChatStatus::ALL
                .into_iter()
                .filter(|s| keep(*s))
                .map(|s| format!("'{}'", s.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let runnable = quoted(&|s| classify(Some((s, false, false))).is_runnable());
        assert_eq!(
            super::RUNNABLE_CHAT_SQL,
            format!("status IN ({runnable}) AND NOT archived")
        );
        for status in ChatStatus::ALL {
            assert!(!classify(Some((status, true, false))).is_runnable());
        }
        let idle = quoted(&|s| classify(Some((s, false, false))).is_deletable());
        assert_eq!(super::IDLE_STATUS_SQL, format!("status IN ({idle})"));
        for state in ExecutionState::ALL {
            if let Some((status, _, _)) = state.components() {
                assert_eq!(
                    state.is_deletable(),
                    super::IDLE_STATUS_SQL.contains(&format!("'{}'", status.as_str())),
                    "{state}"
                );
            }
        }
    }

    #[test]
    fn prefixed_rules_qualify_every_column() {
        assert_eq!(
            runnable_chat_sql!("c."),
            "c.status IN ('running', 'interrupting', 'requires_action') AND NOT c.archived"
        );
        assert_eq!(idle_status_sql!("m."), "m.status IN ('waiting', 'error')");
    }
}
