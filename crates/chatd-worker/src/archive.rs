//! The auto-archive loop (spec "Auto-archive loop": "The worker periodically
//! archives old, unused chats").
//!
//! Every [`WorkerConfig::auto_archive_interval`](crate::WorkerConfig) (first
//! pass at start) the loop archives every root chat whose whole family has
//! been idle for [`WorkerConfig::auto_archive_after`](crate::WorkerConfig):
//! `waiting` or `error`, nothing queued, no change (`updated_at`: every
//! transition and every metadata edit). Pinned chats (`pin_order` > 0) are
//! never auto-archived. Each family is archived like
//! `PATCH /chats/{root} {"archived": true}`: one transaction, snapshot bumps,
//! `chat:update` publications, so open streams and lists see it at once;
//! unarchiving brings back its messages and settings as they were (its
//! `updated_at` is the time of the unarchive).
//!
//! Every replica runs the loop. The candidates query is only a hint: each
//! family is checked again under its row locks
//! ([`Store::auto_archive_family`]), which it never waits for (a locked
//! family is in use and skipped), so two replicas never archive a family
//! twice, the loop cannot deadlock with a request, and a message sent at the
//! same moment either commits first (the family stays) or finds the chat
//! archived. A shutdown stops a pass between two families.

use std::sync::Arc;
use std::time::Duration;

use chatd_store::{Store, StoreResult};
use tokio_util::sync::CancellationToken;

use crate::context::WorkerContext;
use crate::ticker::Ticker;

/// Families looked at per query of one pass.
pub const AUTO_ARCHIVE_BATCH: i64 = 100;

/// One auto-archive pass: archives every root chat whose family has been
/// idle for `idle_for` (see the module docs), paging through the candidates
/// [`AUTO_ARCHIVE_BATCH`] at a time, and returns how many families it
/// archived. A family that stopped qualifying since the candidates query, or
/// that another transaction holds, is skipped until the next pass.
///
/// # Errors
/// A failed candidates query. A failure archiving one family is logged and
/// the pass goes on with the next.
pub async fn auto_archive_pass(store: &Store, idle_for: Duration) -> StoreResult<usize> {
    pass(store, idle_for, &CancellationToken::new()).await
}

/// [`auto_archive_pass`], stopping between two families once `cancel` is
/// cancelled (never in the middle of one: its publications go out).
async fn pass(store: &Store, idle_for: Duration, cancel: &CancellationToken) -> StoreResult<usize> {
    let mut archived = 0;
    let mut after = None;
    loop {
        let candidates = store
            .auto_archive_candidates(idle_for, AUTO_ARCHIVE_BATCH, after)
            .await?;
        for (root, updated_at) in &candidates {
            if cancel.is_cancelled() {
                return Ok(archived);
            }
            after = Some((*updated_at, *root));
            match store.auto_archive_family(*root, idle_for).await {
                Ok(Some(family)) => {
                    archived += 1;
                    tracing::info!(chat_id = %root, members = family.len(), idle_for = ?idle_for, "auto-archived an unused chat");
                }
                Ok(None) => {
                    tracing::debug!(chat_id = %root, "in use or no longer unused; not auto-archived")
                }
                Err(err) => {
                    tracing::warn!(chat_id = %root, error = %err, "auto-archiving a chat failed")
                }
            }
        }
        if (candidates.len() as i64) < AUTO_ARCHIVE_BATCH {
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
        let mut tick = Ticker::new(self.ctx.config.auto_archive_interval);
        while tick.tick(&cancel).await {
            if let Err(err) = pass(&self.ctx.store, idle_for, &cancel).await {
                tracing::warn!(error = %err, "auto-archive pass failed");
            }
        }
    }
}
