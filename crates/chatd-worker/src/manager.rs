//! The runner manager (`spec/chatd-architecture.md`, "Runner manager"): its
//! main loop (spawn, cleanup request, cleanup completion), the database sync
//! loop, the heartbeat loop and the heartbeat cleanup loop.
//!
//! Several runners of one chat may exist at once (a runner abandoned the chat,
//! the acquisition loop re-acquired it, and the old runner is not cleaned up
//! yet); every per-chat delivery goes to all of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::context::WorkerContext;
use crate::runner::{ChatSnapshot, Runner, RunnerInput, RunnerKey};
use crate::ticker::Ticker;

struct Entry {
    input: mpsc::UnboundedSender<RunnerInput>,
    cancel: CancellationToken,
    handle: Option<JoinHandle<()>>,
}

/// The registered runners, shared by the manager's loops.
#[derive(Default)]
pub(crate) struct Registry {
    runners: Mutex<HashMap<Uuid, HashMap<Uuid, Entry>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, HashMap<Uuid, Entry>>> {
        self.runners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every registered `(chat_id, runner_id)`.
    pub(crate) fn keys(&self) -> Vec<RunnerKey> {
        self.lock()
            .iter()
            .flat_map(|(chat_id, runners)| {
                runners.keys().map(|runner_id| RunnerKey {
                    chat_id: *chat_id,
                    runner_id: *runner_id,
                })
            })
            .collect()
    }

    fn chat_ids(&self) -> Vec<Uuid> {
        self.lock().keys().copied().collect()
    }

    fn send(&self, chat_id: Uuid, input: RunnerInput) {
        if let Some(runners) = self.lock().get(&chat_id) {
            for entry in runners.values() {
                let _ = entry.input.send(input.clone());
            }
        }
    }
}

/// The manager's inbound side, used by the acquisition loop and shutdown.
#[derive(Clone)]
pub(crate) struct ManagerHandle {
    spawn: mpsc::UnboundedSender<(RunnerKey, i64)>,
    cleanup: mpsc::UnboundedSender<RunnerKey>,
    pub(crate) registry: Arc<Registry>,
}

impl ManagerHandle {
    /// Asks the manager to spawn a runner for a chat acquired in snapshot
    /// `acquired_at`.
    pub(crate) fn spawn(&self, key: RunnerKey, acquired_at: i64) {
        let _ = self.spawn.send((key, acquired_at));
    }

    /// Asks the manager to clean a runner up.
    pub(crate) fn cleanup(&self, key: RunnerKey) {
        let _ = self.cleanup.send(key);
    }
}

/// The four loops of the runner manager.
pub(crate) struct RunnerManager {
    ctx: Arc<WorkerContext>,
    handle: ManagerHandle,
    spawn_rx: mpsc::UnboundedReceiver<(RunnerKey, i64)>,
    cleanup_rx: mpsc::UnboundedReceiver<RunnerKey>,
    done_tx: mpsc::UnboundedSender<RunnerKey>,
    done_rx: mpsc::UnboundedReceiver<RunnerKey>,
}

impl RunnerManager {
    pub(crate) fn new(ctx: Arc<WorkerContext>) -> Self {
        let (spawn, spawn_rx) = mpsc::unbounded_channel();
        let (cleanup, cleanup_rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let handle = ManagerHandle {
            spawn,
            cleanup,
            registry: Arc::new(Registry::default()),
        };
        Self {
            ctx,
            handle,
            spawn_rx,
            cleanup_rx,
            done_tx,
            done_rx,
        }
    }

    pub(crate) fn handle(&self) -> ManagerHandle {
        self.handle.clone()
    }

    /// Starts the main loop and the three periodic loops on `tracker`.
    pub(crate) fn start(
        self,
        tracker: &TaskTracker,
        cancel: CancellationToken,
        runners_cancel: CancellationToken,
    ) {
        let ctx = self.ctx.clone();
        let registry = self.handle.registry.clone();
        tracker.spawn(
            DatabaseSync {
                ctx: ctx.clone(),
                registry: registry.clone(),
            }
            .run(cancel.clone()),
        );
        tracker.spawn(
            Heartbeats {
                ctx: ctx.clone(),
                handle: self.handle.clone(),
            }
            .run(cancel.clone()),
        );
        tracker.spawn(HeartbeatCleanup { ctx }.run(cancel.clone()));
        tracker.spawn(self.main_loop(cancel, runners_cancel));
    }

    /// Processes one request at a time: spawn, cleanup (cancel without
    /// waiting; a helper task waits and reports completion), completion
    /// (forget the runner and free its slot, [`crate::slots::Slots`]).
    async fn main_loop(mut self, cancel: CancellationToken, runners_cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some((key, acquired_at)) = self.spawn_rx.recv() => self.spawn_runner(key, acquired_at, &runners_cancel),
                Some(key) = self.cleanup_rx.recv() => self.cleanup_runner(key),
                Some(key) = self.done_rx.recv() => {
                    {
                        let mut runners = self.handle.registry.lock();
                        if let Some(chat) = runners.get_mut(&key.chat_id) {
                            chat.remove(&key.runner_id);
                            if chat.is_empty() {
                                runners.remove(&key.chat_id);
                                // No runner here any more: its workspace
                                // directory goes (the next owner checks
                                // out the committed files).
                                self.ctx.workspaces.release(key.chat_id);
                            }
                        }
                    }
                    // Its slot is free (`--max-runners`, and its owner's
                    // running-chat cap once the chat was abandoned): chats
                    // waiting for one start now, not at the next timer pass.
                    self.ctx.slots.runner_ended();
                }
            }
        }
        for entry in self
            .handle
            .registry
            .lock()
            .values()
            .flat_map(|r| r.values())
        {
            entry.cancel.cancel();
        }
    }

    fn spawn_runner(
        &mut self,
        key: RunnerKey,
        acquired_at: i64,
        runners_cancel: &CancellationToken,
    ) {
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        let cancel = runners_cancel.child_token();
        let runner = Runner::new(
            key,
            acquired_at,
            self.ctx.clone(),
            input_rx,
            input_tx.clone(),
            self.handle.cleanup.clone(),
        );
        let handle = tokio::spawn(runner.run(cancel.clone()));
        tracing::info!(chat_id = %key.chat_id, runner_id = %key.runner_id, "runner started");
        self.handle
            .registry
            .lock()
            .entry(key.chat_id)
            .or_default()
            .insert(
                key.runner_id,
                Entry {
                    input: input_tx,
                    cancel,
                    handle: Some(handle),
                },
            );
    }

    fn cleanup_runner(&mut self, key: RunnerKey) {
        let handle = {
            let mut runners = self.handle.registry.lock();
            let Some(entry) = runners
                .get_mut(&key.chat_id)
                .and_then(|r| r.get_mut(&key.runner_id))
            else {
                return;
            };
            entry.cancel.cancel();
            entry.handle.take()
        };
        let Some(handle) = handle else { return };
        let done = self.done_tx.clone();
        tokio::spawn(async move {
            let _ = handle.await;
            tracing::info!(chat_id = %key.chat_id, runner_id = %key.runner_id, "runner cleaned up");
            let _ = done.send(key);
        });
    }
}

/// Reads every registered chat in one query per interval and forwards the
/// rows to all runners of each chat; chats that vanished are reported as
/// deleted. It also tells [`crate::slots::Slots`] how many runners'
/// chats wait in `requires_action` (they take no `--max-runners` slot).
struct DatabaseSync {
    ctx: Arc<WorkerContext>,
    registry: Arc<Registry>,
}

impl DatabaseSync {
    async fn run(self, cancel: CancellationToken) {
        let mut tick = Ticker::new(self.ctx.config.db_sync_interval);
        while tick.tick(&cancel).await {
            let ids = self.registry.chat_ids();
            if ids.is_empty() {
                self.ctx.slots.set_parked(0);
                continue;
            }
            let rows = chatd_store::chats::select_many(self.ctx.store.pool(), &ids).await;
            match rows {
                Ok(rows) => {
                    let found: HashMap<Uuid, &chatd_store::Chat> =
                        rows.iter().map(|c| (c.id, c)).collect();
                    // Runners whose chat waits in `requires_action` do not
                    // count against `--max-runners` (API.md "Limits,
                    // budgets and the token lifecycle").
                    let parked = self
                        .registry
                        .keys()
                        .iter()
                        .filter(|k| {
                            found
                                .get(&k.chat_id)
                                .is_some_and(|c| c.status == chatd_core::ChatStatus::RequiresAction)
                        })
                        .count();
                    self.ctx.slots.set_parked(parked);
                    for id in ids {
                        match found.get(&id) {
                            Some(chat) => self.registry.send(
                                id,
                                RunnerInput::Snapshot(Box::new(ChatSnapshot::from(*chat))),
                            ),
                            None => self.registry.send(id, RunnerInput::Deleted),
                        }
                    }
                }
                Err(err) => tracing::warn!(error = %err, "database sync of runner chats failed"),
            }
        }
    }
}

/// Upserts one heartbeat row per registered runner each interval, in one
/// statement. When heartbeats could not be written for a whole lease, every
/// runner is cleaned up: its chat may already belong to another replica.
struct Heartbeats {
    ctx: Arc<WorkerContext>,
    handle: ManagerHandle,
}

impl Heartbeats {
    async fn run(self, cancel: CancellationToken) {
        let mut tick = Ticker::new(self.ctx.config.heartbeat_interval);
        let mut last_success = Instant::now();
        while tick.tick(&cancel).await {
            let keys = self.handle.registry.keys();
            if keys.is_empty() {
                last_success = Instant::now();
                continue;
            }
            match beat(&self.ctx, &keys).await {
                Ok(()) => last_success = Instant::now(),
                Err(err) => {
                    tracing::warn!(error = %err, runners = keys.len(), "heartbeat upsert failed");
                    if last_success.elapsed() >= self.ctx.config.lease_stale_after {
                        tracing::warn!(
                            "heartbeats failed for a whole lease; cleaning up every runner"
                        );
                        for key in keys {
                            self.handle.cleanup(key);
                        }
                    }
                }
            }
        }
    }
}

/// The spec's heartbeat upsert, skipping chats deleted meanwhile.
pub(crate) async fn beat(ctx: &WorkerContext, keys: &[RunnerKey]) -> sqlx::Result<()> {
    let runners: Vec<(Uuid, Uuid)> = keys.iter().map(|k| (k.chat_id, k.runner_id)).collect();
    chatd_store::heartbeats::upsert_many(ctx.store.pool(), &runners).await
}

/// Deletes heartbeat rows older than the lease.
struct HeartbeatCleanup {
    ctx: Arc<WorkerContext>,
}

impl HeartbeatCleanup {
    async fn run(self, cancel: CancellationToken) {
        let mut tick = Ticker::new(self.ctx.config.heartbeat_cleanup_interval);
        while tick.tick(&cancel).await {
            let stale = self.ctx.config.lease_stale_after.as_secs_f64();
            if let Err(err) =
                chatd_store::heartbeats::delete_stale(self.ctx.store.pool(), stale).await
            {
                tracing::warn!(error = %err, "heartbeat cleanup failed");
            }
        }
    }
}

/// How long [`crate::Worker::shutdown`] waits for tasks to stop.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
