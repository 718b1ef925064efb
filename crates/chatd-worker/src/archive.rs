//! The auto-archive loop (spec "Auto-archive loop": "The worker periodically
//! archives old, unused chats").
//!
//! Every [`WorkerConfig::auto_archive_interval`](crate::WorkerConfig) (first
//! pass at start) the loop archives every root chat whose whole family has
//! been idle for [`WorkerConfig::auto_archive_after`](crate::WorkerConfig):
//! `waiting` or `error`, nothing queued, no transition (`updated_at`). Each
//! family is archived like `PATCH /chats/{root} {"archived": true}`: one
//! transaction, snapshot bumps, `chat:update` publications, so open streams
//! and lists see it at once; unarchiving brings it back unchanged.
//!
//! Every replica runs the loop. The candidates query is only a hint: each
//! family is checked again under its row locks
//! ([`Store::auto_archive_family`]), so two replicas never archive a family
//! twice, and a message sent at the same moment either commits first (the
//! family stays) or finds the chat archived.

use std::sync::Arc;
use std::time::Duration;

use chatd_store::{Store, StoreResult};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::context::WorkerContext;

/// Families looked at per query of one pass.
pub const AUTO_ARCHIVE_BATCH: i64 = 100;

/// One auto-archive pass: archives every root chat whose family has been
/// idle for `idle_for` (see the module docs), in batches of
/// [`AUTO_ARCHIVE_BATCH`], and returns how many families it archived. A
/// family that stopped qualifying since the candidates query is skipped.
///
/// # Errors
/// A failed candidates query. A failure archiving one family is logged and
/// the pass goes on with the next.
pub async fn auto_archive_pass(store: &Store, idle_for: Duration) -> StoreResult<usize> {
    let mut archived = 0;
    loop {
        let candidates = store
            .auto_archive_candidates(idle_for, AUTO_ARCHIVE_BATCH)
            .await?;
        let mut archived_now = 0;
        for root in &candidates {
            match store.auto_archive_family(*root, idle_for).await {
                Ok(Some(family)) => {
                    archived_now += 1;
                    tracing::info!(chat_id = %root, members = family.len(), idle_for = ?idle_for, "auto-archived an unused chat");
                }
                Ok(None) => {
                    tracing::debug!(chat_id = %root, "no longer unused; not auto-archived")
                }
                Err(err) => {
                    tracing::warn!(chat_id = %root, error = %err, "auto-archiving a chat failed")
                }
            }
        }
        archived += archived_now;
        // A full batch may have more behind it; a batch that archived
        // nothing would only come back the same.
        if (candidates.len() as i64) < AUTO_ARCHIVE_BATCH || archived_now == 0 {
            return Ok(archived);
        }
    }
}

/// Runs [`auto_archive_pass`] at start and then every interval, until
/// `cancel`. Does nothing when auto-archiving is off.
pub(crate) struct AutoArchiveLoop {
    pub(crate) ctx: Arc<WorkerContext>,
}

impl AutoArchiveLoop {
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let Some(idle_for) = self.ctx.config.auto_archive_after else {
            return;
        };
        let mut tick = tokio::time::interval(self.ctx.config.auto_archive_interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let pass = tokio::select! {
                _ = cancel.cancelled() => return,
                pass = auto_archive_pass(&self.ctx.store, idle_for) => pass,
            };
            if let Err(err) = pass {
                tracing::warn!(error = %err, "auto-archive pass failed");
            }
        }
    }
}
