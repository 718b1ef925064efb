//! Transaction-scoped advisory locks that serialise writers of several rows
//! (`pg_advisory_xact_lock`: held until the transaction ends).

use sqlx::PgConnection;

/// What an advisory lock serialises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvisoryLock {
    /// Model-config mutations, which keep "exactly one enabled default"
    /// ([`super::model_configs`]).
    ModelConfigs,
    /// Applying the `--config` file, so that replicas starting together
    /// apply it one after the other.
    ConfigFile,
}

impl AdvisoryLock {
    /// The lock's key.
    pub fn key(self) -> i64 {
        match self {
            AdvisoryLock::ModelConfigs => 7_700_201,
            AdvisoryLock::ConfigFile => 7_700_202,
        }
    }
}

/// Takes `lock` for the rest of `conn`'s transaction, waiting for other
/// holders.
pub async fn lock(conn: &mut PgConnection, lock: AdvisoryLock) -> sqlx::Result<()> {
    sqlx::query!("SELECT pg_advisory_xact_lock($1)", lock.key())
        .execute(conn)
        .await
        .map(|_| ())
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[test]
    fn key_the_lock_s_key() {
        use crate::queries::locks::AdvisoryLock;
        assert_ne!(
            AdvisoryLock::ModelConfigs.key(),
            AdvisoryLock::ConfigFile.key()
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lock_takes_lock_for_the_rest_of_conn_s_transaction_waiting_for_other()
    -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let mut tx = pool.begin().await?;
        locks::lock(&mut tx, AdvisoryLock::ConfigFile).await?;
        // Held until the transaction ends: another session cannot take it now.
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(AdvisoryLock::ConfigFile.key())
            .fetch_one(pool)
            .await?;
        assert!(!taken);
        tx.commit().await?;
        Ok(())
    }
}
