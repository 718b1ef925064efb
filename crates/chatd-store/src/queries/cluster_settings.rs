//! SQL of the `cluster_settings` table: cluster-wide text settings by key
//! (the generated relay secret, DESIGN.md "Multi-replica").

use sqlx::PgExecutor;

/// Stores `value` under `key` unless the key is set; returns whether it
/// stored it. Replicas racing on the same key agree on the first value.
///
/// # Example
///
/// ```
/// use chatd_store::queries::cluster_settings;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// assert!(cluster_settings::insert_if_absent(pool, "relay_secret", "a").await?);
/// assert!(!cluster_settings::insert_if_absent(pool, "relay_secret", "b").await?);
/// let stored = cluster_settings::select(pool, "relay_secret").await?;
/// assert_eq!(stored.as_deref(), Some("a"), "the first value wins");
/// # Ok(()) }
/// ```
pub async fn insert_if_absent(
    conn: impl PgExecutor<'_>,
    key: &str,
    value: &str,
) -> sqlx::Result<bool> {
    let inserted = sqlx::query!(
        "INSERT INTO cluster_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        key,
        value,
    )
    .execute(conn)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// The value stored under `key`, if any.
///
/// # Example
///
/// ```
/// use chatd_store::queries::cluster_settings;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// assert!(cluster_settings::select(pool, "relay_secret").await?.is_none());
/// # Ok(()) }
/// ```
pub async fn select(conn: impl PgExecutor<'_>, key: &str) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT value FROM cluster_settings WHERE key = $1", key)
        .fetch_optional(conn)
        .await
}
