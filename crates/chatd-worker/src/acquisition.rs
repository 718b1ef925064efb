//! The acquisition loop (`spec/chatd-architecture.md`, "Acquisition loop").
//!
//! Woken by its timer and by `chat:ownership` hints, it finds chats in a
//! runnable state (`R*`, `I*`, `A*`) that no runner holds (no worker, or no
//! fresh heartbeat for the current runner, by database time), claims each
//! without waiting on rows other transactions hold (`SKIP LOCKED`), re-checks
//! the conditions under the lock, applies `Acquire` with a fresh runner id and
//! asks the runner manager to spawn a runner.

use std::sync::Arc;

use chatd_pubsub::OWNERSHIP_CHANNEL;
use chatd_store::queries;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::context::WorkerContext;
use crate::manager::ManagerHandle;
use crate::runner::RunnerKey;
use crate::ticker::Ticker;

/// Retries of a pass that skipped locked rows before waiting for the timer.
const LOCKED_RETRIES: u32 = 20;
/// Delay between those retries.
const LOCKED_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(25);

/// What one pass did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Pass {
    /// Chats this worker acquired.
    pub(crate) claimed: usize,
    /// Candidates whose row another transaction held (`SKIP LOCKED`).
    pub(crate) skipped_locked: usize,
}

pub(crate) struct AcquisitionLoop {
    pub(crate) ctx: Arc<WorkerContext>,
    pub(crate) manager: ManagerHandle,
    pub(crate) wake: Arc<tokio::sync::Notify>,
}

impl AcquisitionLoop {
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut subscription = loop {
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return,
                s = self.ctx.pubsub.subscribe(OWNERSHIP_CHANNEL) => s,
            };
            match attempt {
                Ok(s) => break s,
                Err(err) => {
                    tracing::warn!(error = %err, "subscribing to chat:ownership failed; retrying");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(self.ctx.config.infra_backoff.1) => {}
                    }
                }
            }
        };
        let mut tick = Ticker::new(self.ctx.config.acquisition_interval);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.next() => {}
                _ = self.wake.notified() => {}
                event = subscription.recv() => if event.is_none() { return },
            }
            // Keep passing while a full batch was claimed (there may be
            // more), and retry soon when rows were locked by another
            // transaction at the time (a send or a runner task): no further
            // hint will come for them.
            let mut locked_retries = 0;
            loop {
                match self.pass().await {
                    Ok(pass) if pass.claimed as i64 >= self.ctx.config.acquisition_batch => {
                        continue;
                    }
                    Ok(pass) if pass.skipped_locked > 0 && locked_retries < LOCKED_RETRIES => {
                        locked_retries += 1;
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            _ = tokio::time::sleep(LOCKED_RETRY_DELAY) => {}
                        }
                    }
                    Ok(_) => break,
                    Err(err) => {
                        tracing::warn!(error = %err, "acquisition pass failed");
                        break;
                    }
                }
            }
        }
    }

    /// One pass over the candidates.
    pub(crate) async fn pass(&self) -> chatd_store::StoreResult<Pass> {
        let stale = self.ctx.config.lease_stale_after.as_secs_f64();
        let candidates = queries::chats::acquisition_candidates(
            self.ctx.store.pool(),
            stale,
            self.ctx.config.acquisition_batch,
        )
        .await?;
        let mut pass = Pass::default();
        for chat_id in candidates {
            let Some(mut tx) = self.ctx.store.machine(chat_id).try_begin().await? else {
                pass.skipped_locked += 1;
                continue;
            };
            let chat = tx.chat().await?;
            if !tx.execution_state().await?.is_runnable() {
                continue;
            }
            if let Some(runner) = chat.runner_id
                && chat.worker_id.is_some()
                && queries::heartbeats::is_fresh(tx.conn(), chat_id, runner, stale).await?
            {
                continue;
            }
            let runner_id = Uuid::new_v4();
            tx.acquire(self.ctx.config.worker_id, runner_id).await?;
            let acquired = tx.commit().await?;
            tracing::info!(%chat_id, %runner_id, previous_worker = ?chat.worker_id, "acquired chat");
            self.manager
                .spawn(RunnerKey { chat_id, runner_id }, acquired.snapshot_version);
            pass.claimed += 1;
        }
        Ok(pass)
    }
}
