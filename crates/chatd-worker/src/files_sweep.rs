//! The files sweep (API.md "Limits, budgets and the token lifecycle": "Files
//! linked to no chat are deleted 24 h after upload").
//!
//! Every [`WorkerConfig::files_sweep_interval`](crate::WorkerConfig) (10 min;
//! first pass at start) the loop deletes files that no message linked within
//! [`WorkerConfig::unlinked_file_ttl`](crate::WorkerConfig) (24 h) of their
//! upload, with their chunks, [`FILES_SWEEP_BATCH`] per statement until none
//! is left. Every replica runs it: `SKIP LOCKED` keeps two replicas' passes
//! from waiting on each other, and a file is deleted only if it is still
//! unlinked once its row is locked, so a send linking it at the same moment
//! either links it first (and the file stays) or finds it gone (`400`, file
//! unavailable) and links nothing
//! ([`chatd_store::files::delete_expired_unlinked`]). Errors are
//! logged and the next pass tries again.

use std::time::Duration;

use chatd_store::Store;
use chatd_store::files;
use tokio_util::sync::CancellationToken;

use crate::ticker::Ticker;

/// Files deleted per statement (each with up to 40 chunks of 256 KiB).
pub const FILES_SWEEP_BATCH: i64 = 100;

/// One pass: deletes every file linked to no chat and uploaded more than
/// `ttl` ago, [`FILES_SWEEP_BATCH`] at a time, and returns how many it
/// deleted.
///
/// # Errors
/// Database errors (what was deleted before stays deleted).
pub async fn sweep_unlinked_files(store: &Store, ttl: Duration) -> chatd_store::StoreResult<u64> {
    let mut deleted = 0;
    loop {
        let n = files::delete_expired_unlinked(store.pool(), ttl, FILES_SWEEP_BATCH).await?;
        deleted += n;
        if n < FILES_SWEEP_BATCH.unsigned_abs() {
            return Ok(deleted);
        }
    }
}

/// Runs [`sweep_unlinked_files`] at start and then every `interval`, until
/// `cancel`.
pub(crate) struct FilesSweepLoop {
    pub(crate) store: Store,
    /// Age past which an unlinked file is deleted.
    pub(crate) ttl: Duration,
    /// Time between two passes.
    pub(crate) interval: Duration,
}

impl FilesSweepLoop {
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut tick = Ticker::new(self.interval);
        while tick.tick(&cancel).await {
            match sweep_unlinked_files(&self.store, self.ttl).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "deleted files no chat linked in time"),
                Err(err) => tracing::warn!(error = %err, "files sweep failed"),
            }
        }
    }
}
