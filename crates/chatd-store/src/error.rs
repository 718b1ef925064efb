//! Errors of the store: a domain [`StateError`] or a database failure.

use chatd_core::StateError;

/// Everything a store operation can fail with.
///
/// # Example
///
/// ```
/// use chatd_core::StateError;
/// use chatd_store::StoreError;
/// let err = StoreError::from(StateError::ChatNotFound);
/// assert_eq!(err.state(), Some(&StateError::ChatNotFound));
/// assert!(!err.is_retryable(), "a domain error is final");
/// assert!(StoreError::from(sqlx::Error::PoolTimedOut).is_retryable());
/// ```
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state machine rejected the operation; nothing was changed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The database failed (connection, constraint, trigger exception).
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Internal to the store, never returned by its public operations: an
    /// optimistic bundle's guess of the chat row was stale (another bundle
    /// committed since the row this replica last committed). Everything
    /// the bundle did is rolled back, and
    /// [`crate::ChatMachine::update_optimistic`] runs it again with the
    /// lock taken first. Transient.
    #[doc(hidden)]
    #[error("the chat changed since this replica last committed it; run the bundle again")]
    GuessMissed,
}

impl StoreError {
    /// The domain error, if this is one.
    ///
    /// Example: [`StoreError`].
    pub fn state(&self) -> Option<&StateError> {
        match self {
            StoreError::State(err) => Some(err),
            _ => None,
        }
    }

    /// Whether retrying the same operation later may succeed (transient)
    /// rather than fail the same way again (permanent): connection failures
    /// (I/O, protocol, pool timeouts, SQLSTATE class `08`), transaction
    /// rollbacks (class `40`: serialization failures, deadlocks), insufficient
    /// resources (class `53`, e.g. too many connections), a lock not
    /// available (`55P03`), a cancelled statement (`57014`), the server
    /// shutting down or restarting (`57P01`–`57P05`), and a write refused
    /// because the server is read-only (`25006`: a standby, or a primary
    /// being demoted in a switchover; issue 36). Everything else (a
    /// constraint, a trigger's exception, a value PostgreSQL cannot store, a
    /// decoding failure, a state-machine rejection) is permanent: retrying
    /// it would wedge the caller.
    ///
    /// Example: [`StoreError`].
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::GuessMissed => true,
            StoreError::Database(err) => is_transient(err),
            _ => false,
        }
    }
}

/// Whether a database error is transient: retrying the same operation
/// later may succeed ([`StoreError::is_retryable`] lists the classes). For
/// callers that hold a bare `sqlx::Error` (startup, which runs again while a
/// failover of the database lasts; issue 36).
///
/// ```
/// assert!(chatd_store::is_transient(&sqlx::Error::PoolTimedOut));
/// assert!(!chatd_store::is_transient(&sqlx::Error::RowNotFound));
/// ```
pub fn is_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("40")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == "55P03"
                || code == "57014"
                || code == "25006"
        }),
        _ => false,
    }
}

/// Result alias of the store.
///
/// Example: [`StoreError`].
pub type StoreResult<T> = Result<T, StoreError>;
