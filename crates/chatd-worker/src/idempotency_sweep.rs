//! The idempotency-key sweep (API.md "Idempotency": keys are kept 24 h;
//! DESIGN.md: "expired rows deleted by a background loop").
//!
//! Every [`SWEEP_INTERVAL`] (first pass at start) the loop deletes expired
//! `Idempotency-Key` rows, [`SWEEP_BATCH`] per statement until none is left.
//! Expired rows already answer as absent, so the sweep only bounds the
//! table's size; every replica runs it, and `SKIP LOCKED` keeps two replicas
//! (or a request taking over an expired key) from waiting on each other.
//! Errors are logged and the next pass tries again.
//!
//! The same pass deletes the browser sessions that have expired
//! ([`chatd_store::sessions::delete_expired`]; API.md "Sign-in, search,
//! sharing and export"): they no longer authenticate either, so this too
//! only bounds a table.

use std::time::Duration;

use chatd_store::Store;
use chatd_store::idempotency_keys;
use tokio_util::sync::CancellationToken;

use crate::ticker::Ticker;

/// Time between two passes.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(10 * 60);

/// Rows deleted per statement.
pub const SWEEP_BATCH: i64 = 1000;

/// One pass: deletes every expired key, [`SWEEP_BATCH`] at a time, and
/// returns how many it deleted.
///
/// # Errors
/// Database errors (what was deleted before stays deleted).
pub async fn sweep_expired_keys(store: &Store) -> chatd_store::StoreResult<u64> {
    let mut deleted = 0;
    loop {
        let n = idempotency_keys::delete_expired(store.pool(), SWEEP_BATCH).await?;
        deleted += n;
        if n < SWEEP_BATCH.unsigned_abs() {
            return Ok(deleted);
        }
    }
}

/// Runs [`sweep_expired_keys`] at start and then every [`SWEEP_INTERVAL`],
/// until `cancel`.
pub(crate) struct IdempotencySweepLoop {
    pub(crate) store: Store,
}

impl IdempotencySweepLoop {
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut tick = Ticker::new(SWEEP_INTERVAL);
        while tick.tick(&cancel).await {
            match sweep_expired_keys(&self.store).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(deleted = n, "deleted expired idempotency keys"),
                Err(err) => tracing::warn!(error = %err, "idempotency key sweep failed"),
            }
            match chatd_store::sessions::delete_expired(self.store.pool()).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(deleted = n, "deleted expired sessions"),
                Err(err) => tracing::warn!(error = %err, "session sweep failed"),
            }
        }
    }
}
