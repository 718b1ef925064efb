//! Reads of `_sqlx_migrations`, the table in which [`crate::MIGRATOR`]
//! records the migrations it applied.

use sqlx::PgExecutor;

/// PostgreSQL's `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";

/// Whether every migration of [`crate::MIGRATOR`] is recorded as applied
/// with a matching checksum (a database without the table has none).
///
/// # Example
///
/// ```
/// use chatd_store::queries::migrations;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// // A test database is a copy of a migrated template.
/// assert!(migrations::all_applied(pool).await?);
/// # Ok(()) }
/// ```
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
///
/// # Example
///
/// ```
/// use chatd_store::queries::migrations;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// assert_eq!(migrations::applied_count(pool).await?, chatd_store::MIGRATOR.iter().count() as i64);
/// # Ok(()) }
/// ```
pub async fn applied_count(conn: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM _sqlx_migrations WHERE success"#)
        .fetch_one(conn)
        .await
}
