//! Statements about a database itself rather than its tables: the embedded
//! PostgreSQL creates chatd's database on first start.

use sqlx::{AssertSqlSafe, PgExecutor};

/// PostgreSQL's `duplicate_database`.
pub const DUPLICATE_DATABASE: &str = "42P04";

/// Whether a database named `name` exists on the server.
pub async fn exists(conn: impl PgExecutor<'_>, name: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "exists!""#,
        name
    )
    .fetch_one(conn)
    .await
}

/// Whether commits on this server wait for a synchronous standby that is
/// not there (issue 36): `synchronous_standby_names` is set (Patroni's
/// strict synchronous mode sets it to `*` when no standby is left),
/// `synchronous_commit` waits for a standby, and no connected standby is
/// synchronous. A standby whose state this role may not read
/// (`pg_stat_replication` shows it without `sync_state`) counts as
/// synchronous: unknown is not blocked. Reads nothing that waits: it runs
/// while commits hang.
pub async fn commits_blocked(conn: impl PgExecutor<'_>) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT current_setting('synchronous_standby_names') <> ''
                  AND current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply')
                  AND NOT pg_is_in_recovery()
                  AND NOT EXISTS (SELECT 1 FROM pg_stat_replication
                                   WHERE sync_state IS DISTINCT FROM 'async'
                                     AND sync_state IS DISTINCT FROM 'potential') AS "blocked!""#
    )
    .fetch_one(conn)
    .await
}

/// Creates database `name` (quoted as an identifier, so any name is safe).
/// A concurrent creation of the same name fails with [`DUPLICATE_DATABASE`].
pub async fn create(conn: impl PgExecutor<'_>, name: &str) -> sqlx::Result<()> {
    // Run-time checked: the database name is an identifier built at run time.
    sqlx::query(AssertSqlSafe(format!(
        "CREATE DATABASE {}",
        quote_identifier(name)
    )))
    .execute(conn)
    .await
    .map(|_| ())
}

/// `name` as a quoted SQL identifier: in double quotes, each double quote
/// doubled.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn identifiers_are_quoted_with_inner_quotes_doubled() {
        assert_eq!(super::quote_identifier("chatd"), "\"chatd\"");
        assert_eq!(super::quote_identifier("a\"b"), "\"a\"\"b\"");
    }
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn commits_blocked_never_without_synchronous_standbys() -> anyhow::Result<()> {
        use crate::queries::database;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        assert!(!database::commits_blocked(db.pool()).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn exists_whether_a_database_named_name_exists_on_the_server() -> anyhow::Result<()> {
        use crate::queries::database;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let name = format!("chatd_doc_{}", uuid::Uuid::new_v4().simple());
        database::create(pool, &name).await?;
        assert!(database::exists(pool, &name).await?);
        assert!(!database::exists(pool, "no such database").await?);
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE \"{name}\"")))
            .execute(pool)
            .await?;
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn creates_database_name_quoted_as_an_identifier_so_any_name_is_safe()
    -> anyhow::Result<()> {
        use crate::queries::database;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let name = format!("chatd_doc_{}", uuid::Uuid::new_v4().simple());
        database::create(pool, &name).await?;
        assert!(database::exists(pool, &name).await?);
        let again = database::create(pool, &name).await.unwrap_err();
        let code = again
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some(database::DUPLICATE_DATABASE));
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE \"{name}\"")))
            .execute(pool)
            .await?;
        Ok(())
    }
}
