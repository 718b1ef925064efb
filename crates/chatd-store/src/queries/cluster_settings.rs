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
pub async fn select(conn: impl PgExecutor<'_>, key: &str) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT value FROM cluster_settings WHERE key = $1", key)
        .fetch_optional(conn)
        .await
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn insert_if_absent_stores_value_under_key_unless_the_key_is_set() -> anyhow::Result<()> {
        use crate::queries::cluster_settings;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        assert!(cluster_settings::insert_if_absent(pool, "relay_secret", "a").await?);
        assert!(!cluster_settings::insert_if_absent(pool, "relay_secret", "b").await?);
        let stored = cluster_settings::select(pool, "relay_secret").await?;
        assert_eq!(stored.as_deref(), Some("a"), "the first value wins");
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_the_value_stored_under_key_if_any() -> anyhow::Result<()> {
        use crate::queries::cluster_settings;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        assert!(
            cluster_settings::select(pool, "relay_secret")
                .await?
                .is_none()
        );
        Ok(())
    }
}
