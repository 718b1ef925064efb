//! SQL of the `cluster_settings` table: cluster-wide text settings by key
//! (the generated relay secret, DESIGN.md "Multi-replica").

use sqlx::PgExecutor;

/// Stores `value` under `key` unless the key is set; returns whether it
/// stored it. Replicas racing on the same key agree on the first value.
pub async fn insert_if_absent(
    conn: impl PgExecutor<'_>,
    key: &str,
    value: &str,
) -> sqlx::Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO cluster_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
    )
    .bind(key)
    .bind(value)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// The value stored under `key`, if any.
pub async fn select(conn: impl PgExecutor<'_>, key: &str) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("SELECT value FROM cluster_settings WHERE key = $1")
        .bind(key)
        .fetch_optional(conn)
        .await
}
