//! Reads of `_sqlx_migrations`, the table in which [`crate::MIGRATOR`]
//! records the migrations it applied.

use sqlx::PgExecutor;

/// PostgreSQL's `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";

/// Whether every migration of [`crate::MIGRATOR`] is recorded as applied
/// with a matching checksum (a database without the table has none).
pub async fn all_applied(conn: impl PgExecutor<'_>) -> sqlx::Result<bool> {
    let applied: Vec<(i64, Vec<u8>)> =
        match sqlx::query!("SELECT version, checksum FROM _sqlx_migrations WHERE success")
            .fetch_all(conn)
            .await
        {
            Ok(rows) => rows.into_iter().map(|r| (r.version, r.checksum)).collect(),
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(UNDEFINED_TABLE) => {
                return Ok(false);
            }
            Err(err) => return Err(err),
        };
    Ok(crate::MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .all(|m| {
            applied
                .iter()
                .any(|(v, c)| *v == m.version && c.as_slice() == m.checksum.as_ref())
        }))
}

/// How many migrations are recorded as applied.
pub async fn applied_count(conn: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM _sqlx_migrations WHERE success"#)
        .fetch_one(conn)
        .await
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn all_applied_whether_every_migration_of_crate_migrator_is_recorded_as()
    -> anyhow::Result<()> {
        use crate::queries::migrations;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        // A test database is a copy of a migrated template.
        assert!(migrations::all_applied(pool).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn applied_count_how_many_migrations_are_recorded_as_applied() -> anyhow::Result<()> {
        use crate::queries::migrations;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        assert_eq!(
            migrations::applied_count(pool).await?,
            crate::MIGRATOR.iter().count() as i64
        );
        Ok(())
    }
}
