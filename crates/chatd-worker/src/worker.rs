//! The worker's public face: start it, trigger an acquisition pass, shut it
//! down gracefully (abandon every chat so another replica resumes at once) or
//! stop it abruptly (a crash, for tests).

use std::sync::Arc;

use chatd_pubsub::Pubsub;
use chatd_store::Store;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::acquisition::AcquisitionLoop;
use crate::archive::AutoArchiveLoop;
use crate::config::WorkerConfig;
use crate::context::{LocalLocks, WorkerContext};
use crate::fence::{Fence, FenceError, fenced_update};
use crate::files_sweep::FilesSweepLoop;
use crate::idempotency_sweep::IdempotencySweepLoop;
use crate::manager::{ManagerHandle, RunnerManager, SHUTDOWN_GRACE};
use crate::part_buffer::PartBuffer;
use crate::providers::ProviderFactory;

/// What a worker needs.
pub struct WorkerDeps {
    /// The store.
    pub store: Store,
    /// Pubsub for `chat:update` and `chat:ownership`.
    pub pubsub: Arc<dyn Pubsub>,
    /// This replica's part buffer (shared with the stream endpoints).
    pub parts: PartBuffer,
    /// Builds providers from provider rows.
    pub providers: Arc<dyn ProviderFactory>,
    /// Tunables.
    pub config: WorkerConfig,
}

/// A running worker (spec "Chat worker"): acquisition loop, runner manager
/// with its loops, the runners, and the auto-archive loop.
pub struct Worker {
    ctx: Arc<WorkerContext>,
    manager: ManagerHandle,
    wake: Arc<tokio::sync::Notify>,
    tracker: TaskTracker,
    cancel: CancellationToken,
    runners_cancel: CancellationToken,
    acquisition_cancel: CancellationToken,
    acquisition: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.ctx.config.worker_id)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts every loop. Must be called inside a tokio runtime.
    pub fn start(deps: WorkerDeps) -> Self {
        let mcp = chatd_tools::McpHost::new(deps.config.mcp_options());
        let workspaces =
            crate::workspace::Workspaces::new(deps.config.workspace.clone(), deps.config.worker_id);
        let ctx = Arc::new(WorkerContext {
            store: deps.store,
            pubsub: deps.pubsub,
            parts: deps.parts,
            providers: deps.providers,
            mcp,
            config: deps.config,
            local_locks: LocalLocks::default(),
            background: CancellationToken::new(),
            slots: Default::default(),
            skipped_compactions: Default::default(),
            workspaces,
        });
        let cancel = CancellationToken::new();
        let runners_cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let manager = RunnerManager::new(ctx.clone());
        let handle = manager.handle();
        manager.start(&tracker, cancel.clone(), runners_cancel.clone());
        let wake = Arc::new(tokio::sync::Notify::new());
        let acquisition_cancel = CancellationToken::new();
        let acquisition = tracker.spawn(
            AcquisitionLoop {
                ctx: ctx.clone(),
                manager: handle.clone(),
                wake: wake.clone(),
            }
            .run(acquisition_cancel.clone()),
        );
        tracker.spawn(AutoArchiveLoop { ctx: ctx.clone() }.run(cancel.clone()));
        tracker.spawn(
            IdempotencySweepLoop {
                store: ctx.store.clone(),
            }
            .run(cancel.clone()),
        );
        tracker.spawn(
            FilesSweepLoop {
                store: ctx.store.clone(),
                ttl: ctx.config.unlinked_file_ttl,
                interval: ctx.config.files_sweep_interval,
            }
            .run(cancel.clone()),
        );
        tracing::info!(worker_id = %ctx.config.worker_id, "worker started");
        Self {
            ctx,
            manager: handle,
            wake,
            tracker,
            cancel,
            runners_cancel,
            acquisition_cancel,
            acquisition: Some(acquisition),
        }
    }

    /// This worker's id (`chats.worker_id` of the chats it owns).
    pub fn worker_id(&self) -> Uuid {
        self.ctx.config.worker_id
    }

    /// The part buffer this worker streams into.
    pub fn parts(&self) -> &PartBuffer {
        &self.ctx.parts
    }

    /// Wakes the acquisition loop now (as a `chat:ownership` hint would).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The `(chat_id, runner_id)` pairs of the runners registered now.
    pub fn runners(&self) -> Vec<(Uuid, Uuid)> {
        self.manager
            .registry
            .keys()
            .into_iter()
            .map(|k| (k.chat_id, k.runner_id))
            .collect()
    }

    /// Graceful shutdown: stops acquiring, cancels every runner, abandons
    /// every chat this worker still owns (each `Abandon` publishes
    /// `chat:ownership`, so another replica acquires at once), then stops the
    /// loops, waits up to 10 s for tasks to end, and closes the MCP sessions
    /// (stdio servers are stopped).
    pub async fn shutdown(mut self) {
        // Stop acquiring first and wait for a pass in flight to end: our own
        // abandons below publish chat:ownership, which must not wake this
        // worker into taking the chats back.
        self.acquisition_cancel.cancel();
        if let Some(acquisition) = self.acquisition.take() {
            let _ = acquisition.await;
        }
        self.runners_cancel.cancel();
        self.ctx.background.cancel();
        // Abandon every chat the database says we own: that includes chats
        // acquired just before the loop stopped whose runner may not be
        // registered yet.
        let owned = match chatd_store::chats::owned_by_worker(
            self.ctx.store.pool(),
            self.ctx.config.worker_id,
        )
        .await
        {
            Ok(rows) => rows,
            Err(err) => {
                tracing::warn!(error = %err, "listing owned chats on shutdown failed; abandoning the registered ones");
                self.manager
                    .registry
                    .keys()
                    .into_iter()
                    .map(|k| (k.chat_id, Some(k.runner_id)))
                    .collect()
            }
        };
        for (chat_id, runner_id) in owned {
            let Some(runner_id) = runner_id else { continue };
            let fence = Fence {
                worker_id: self.ctx.config.worker_id,
                runner_id,
                history_version: None,
                status: None,
            };
            let machine = self.ctx.store.machine(chat_id);
            match fenced_update(&machine, &fence, |tx, _| {
                Box::pin(async move { tx.abandon().await })
            })
            .await
            {
                Ok(_) | Err(FenceError::Stale) => {}
                Err(err) => {
                    tracing::warn!(%chat_id, error = %err, "abandoning on shutdown failed")
                }
            }
        }
        self.cancel.cancel();
        self.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("worker loops did not stop within the grace period");
        }
        self.ctx.mcp.shutdown().await;
        self.ctx.workspaces.remove_all();
        tracing::info!(worker_id = %self.ctx.config.worker_id, "worker stopped");
    }

    /// Stops everything at once without abandoning or cleaning up, as a crash
    /// would: heartbeats stop and other replicas take the chats over once the
    /// lease is stale. For tests.
    pub fn crash(self) {
        self.acquisition_cancel.cancel();
        self.runners_cancel.cancel();
        self.ctx.background.cancel();
        self.cancel.cancel();
    }
}
