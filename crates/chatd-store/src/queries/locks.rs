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
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(lock.key())
        .execute(conn)
        .await
        .map(|_| ())
}
