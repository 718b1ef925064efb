//! The chat runner (`spec/chatd-architecture.md`, "Chat runner", "Event
//! processing", "Runner cleanup").
//!
//! One runner drives one chat for one `(worker_id, runner_id)` ownership. It
//! is an event loop over one channel that performs no I/O itself: snapshots
//! arrive from `chat:update:{chat_id}` notifications, from the runner
//! manager's database sync, from tasks that just committed a transition (the
//! fast path) and from the bootstrap read; side effects happen in the tasks it
//! spawns and cancels (generation, interrupt, requires-action timeout,
//! abandon). The bootstrap subscribes to the chat's channel *before* reading
//! the chat, so an update committed in between is not missed.
//!
//! What the loop consumes lives in [`event`] (a leaf the tasks and the
//! runner manager name too); what it spawns lives in [`crate::tasks`], which
//! does not name this module.

use std::sync::Arc;
use std::time::Duration;

use chatd_core::ChatStatus;
use chatd_pubsub::{ChatUpdate, PubsubEvent, chat_update_channel};
use chatd_store::Chat;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::context::WorkerContext;
use crate::fence::Fence;
use crate::tasks::{self, TaskKind};

pub(crate) mod event;

pub use event::{ChatSnapshot, RunnerInput, RunnerKey};

struct Task {
    id: u64,
    kind: TaskKind,
    cancel: CancellationToken,
    handle: JoinHandle<()>,
}

#[derive(Debug, Clone, Copy)]
struct Local {
    snapshot_version: i64,
    history_version: i64,
    status: ChatStatus,
    archived: bool,
}

/// The runner's state and loop.
pub(crate) struct Runner {
    key: RunnerKey,
    ctx: Arc<WorkerContext>,
    inputs: mpsc::UnboundedReceiver<RunnerInput>,
    input_tx: mpsc::UnboundedSender<RunnerInput>,
    cleanup: mpsc::UnboundedSender<RunnerKey>,
    local: Option<Local>,
    /// Snapshot version of the `Acquire` that created this runner: older
    /// events describe the chat before this runner existed (a notification
    /// still in flight when the runner subscribed) and are ignored.
    acquired_at: i64,
    tasks: Vec<Task>,
    active: Option<u64>,
    next_task_id: u64,
    cleanup_requested: bool,
}

impl Runner {
    pub(crate) fn new(
        key: RunnerKey,
        acquired_at: i64,
        ctx: Arc<WorkerContext>,
        inputs: mpsc::UnboundedReceiver<RunnerInput>,
        input_tx: mpsc::UnboundedSender<RunnerInput>,
        cleanup: mpsc::UnboundedSender<RunnerKey>,
    ) -> Self {
        Self {
            key,
            ctx,
            inputs,
            input_tx,
            cleanup,
            local: None,
            acquired_at,
            tasks: Vec::new(),
            active: None,
            next_task_id: 0,
            cleanup_requested: false,
        }
    }

    /// Runs until `cancel` fires (the manager's cleanup), then cancels every
    /// task it spawned and unsubscribes (spec "Runner cleanup"). Does not wait
    /// for the tasks.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let bootstrap_cancel = cancel.child_token();
        tokio::spawn(bootstrap(
            self.key,
            self.ctx.clone(),
            self.input_tx.clone(),
            bootstrap_cancel.clone(),
        ));
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                input = self.inputs.recv() => match input {
                    Some(RunnerInput::Snapshot(snapshot)) => self.process(*snapshot),
                    Some(RunnerInput::Refetch) => {
                        tokio::spawn(refetch(self.key, self.ctx.clone(), self.input_tx.clone()));
                    }
                    Some(RunnerInput::Deleted) => self.request_cleanup(),
                    None => break,
                },
            }
        }
        bootstrap_cancel.cancel();
        for task in self.tasks.drain(..) {
            task.cancel.cancel();
        }
    }

    fn request_cleanup(&mut self) {
        if !self.cleanup_requested {
            self.cleanup_requested = true;
            let _ = self.cleanup.send(self.key);
        }
    }

    /// One loop iteration (spec "Event processing", steps 1–10).
    fn process(&mut self, event: ChatSnapshot) {
        // 1. Stale or duplicate snapshot. Before the first event, anything
        // older than this runner's own Acquire is stale too.
        let watermark = self
            .local
            .map_or(self.acquired_at - 1, |l| l.snapshot_version);
        if event.snapshot_version <= watermark {
            return;
        }
        if self.local.is_none() {
            self.ctx
                .config
                .timeline
                .hop(self.key.chat_id, crate::timeline::Hop::Bootstrapped);
        }
        let next = Local {
            snapshot_version: event.snapshot_version,
            history_version: event.history_version,
            status: event.status,
            archived: event.archived,
        };
        // 2. Someone else owns the chat now.
        if event.worker_id != Some(self.ctx.config.worker_id)
            || event.runner_id != Some(self.key.runner_id)
        {
            self.request_cleanup();
            self.local = Some(next);
            return;
        }
        // 3. Same work as before.
        if let Some(local) = self.local
            && local.history_version == event.history_version
            && local.status == event.status
            && local.archived == event.archived
        {
            self.local = Some(next);
            return;
        }
        // 4. The work changed: cancel the active task without waiting.
        if let Some(active) = self.active.take()
            && let Some(task) = self.tasks.iter().find(|t| t.id == active)
        {
            tracing::debug!(chat_id = %self.key.chat_id, kind = ?task.kind, "cancelling the active task");
            task.cancel.cancel();
        }
        // 5. Forget finished tasks.
        self.tasks.retain(|t| !t.handle.is_finished());
        // 6–10. Spawn the task the new state calls for.
        let kind = if event.archived {
            TaskKind::Abandon
        } else {
            match event.status {
                ChatStatus::Running => TaskKind::Generation,
                ChatStatus::Interrupting => TaskKind::Interrupt,
                ChatStatus::RequiresAction => TaskKind::RequiresActionTimeout,
                ChatStatus::Waiting | ChatStatus::Error => TaskKind::Abandon,
            }
        };
        self.spawn(kind, event);
        self.local = Some(next);
    }

    fn spawn(&mut self, kind: TaskKind, event: ChatSnapshot) {
        self.next_task_id += 1;
        let id = self.next_task_id;
        let cancel = CancellationToken::new();
        let fence = Fence {
            worker_id: self.ctx.config.worker_id,
            runner_id: self.key.runner_id,
            history_version: (kind != TaskKind::Abandon).then_some(event.history_version),
            status: (kind != TaskKind::Abandon).then_some(event.status),
        };
        let task = tasks::TaskContext {
            chat_id: self.key.chat_id,
            fence,
            ctx: self.ctx.clone(),
            cancel: cancel.clone(),
            notify: self.input_tx.clone(),
            // Step 10 (idle) keeps the chat a moment; step 6 (archived)
            // lets go at once.
            abandon_after: if kind == TaskKind::Abandon && !event.archived {
                self.ctx.config.abandon_idle_after
            } else {
                Duration::ZERO
            },
        };
        tracing::debug!(chat_id = %self.key.chat_id, runner_id = %self.key.runner_id, ?kind, history_version = event.history_version, "spawning runner task");
        let handle = tokio::spawn(tasks::run(kind, task));
        self.tasks.push(Task {
            id,
            kind,
            cancel,
            handle,
        });
        self.active = Some(id);
    }
}

/// Subscribes to `chat:update:{chat_id}`, then reads the chat, then forwards
/// every notification as a snapshot. Reconnects of the pubsub turn into a
/// re-read.
async fn bootstrap(
    key: RunnerKey,
    ctx: Arc<WorkerContext>,
    inputs: mpsc::UnboundedSender<RunnerInput>,
    cancel: CancellationToken,
) {
    let channel = chat_update_channel(key.chat_id);
    let mut subscription = loop {
        let attempt = tokio::select! {
            _ = cancel.cancelled() => return,
            s = ctx.pubsub.subscribe(&channel) => s,
        };
        match attempt {
            Ok(subscription) => break subscription,
            Err(err) => {
                tracing::warn!(chat_id = %key.chat_id, error = %err, "subscribing to chat updates failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(ctx.config.infra_backoff.0) => {}
                }
            }
        }
    };
    ctx.config
        .timeline
        .hop(key.chat_id, crate::timeline::Hop::Subscribed);
    // Subscribe first, then read: an update committed between the two is
    // either in the read or delivered on the subscription.
    tokio::spawn(refetch(key, ctx.clone(), inputs.clone()));
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => return,
            e = subscription.recv() => e,
        };
        let input = match event {
            Some(PubsubEvent::Message(payload)) => match ChatUpdate::from_payload(&payload) {
                Ok(update) => RunnerInput::Snapshot(Box::new(ChatSnapshot::from(&update))),
                Err(err) => {
                    tracing::warn!(chat_id = %key.chat_id, error = %err, "ignoring a malformed chat:update payload");
                    continue;
                }
            },
            Some(PubsubEvent::Reconnected) => RunnerInput::Refetch,
            None => return,
        };
        if inputs.send(input).is_err() {
            return;
        }
    }
}

/// Reads the chat row once (retrying database errors with backoff) and
/// forwards it.
async fn refetch(
    key: RunnerKey,
    ctx: Arc<WorkerContext>,
    inputs: mpsc::UnboundedSender<RunnerInput>,
) {
    let mut delay = ctx.config.infra_backoff.0;
    loop {
        let row: Result<Option<Chat>, _> =
            chatd_store::chats::select(ctx.store.pool(), key.chat_id, chatd_store::LockMode::None)
                .await;
        match row {
            Ok(Some(chat)) => {
                let _ = inputs.send(RunnerInput::Snapshot(Box::new(ChatSnapshot::from(&chat))));
                return;
            }
            Ok(None) => {
                let _ = inputs.send(RunnerInput::Deleted);
                return;
            }
            Err(err) => {
                tracing::warn!(chat_id = %key.chat_id, error = %err, "reading the chat failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(ctx.config.infra_backoff.1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WorkerConfig;
    use crate::context::LocalLocks;
    use crate::part_buffer::PartBuffer;
    use crate::providers::DefaultProviderFactory;
    use uuid::Uuid;

    /// A runner whose context never touches a database unless a task runs.
    fn runner(acquired_at: i64) -> (Runner, mpsc::UnboundedReceiver<RunnerKey>, Uuid) {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://nobody@127.0.0.1:1/none")
            .unwrap();
        let pubsub = chatd_pubsub::MemoryPubsub::new();
        let config = WorkerConfig::default();
        let worker_id = config.worker_id;
        let ctx = Arc::new(WorkerContext {
            store: chatd_store::Store::new(pool, Arc::new(pubsub.clone())),
            pubsub: Arc::new(pubsub),
            parts: PartBuffer::new(CancellationToken::new()),
            providers: Arc::new(DefaultProviderFactory),
            mcp: chatd_tools::McpHost::new(config.mcp_options()),
            config,
            local_locks: LocalLocks::default(),
            background: CancellationToken::new(),
            slots: Default::default(),
            skipped_compactions: Default::default(),
            workspaces: crate::workspace::Workspaces::new(
                crate::workspace::WorkspaceConfig {
                    dir: std::env::temp_dir().join("chatd-runner-unit-tests"),
                    ..Default::default()
                },
                worker_id,
            ),
        });
        let (input_tx, inputs) = mpsc::unbounded_channel();
        let (cleanup, cleanup_rx) = mpsc::unbounded_channel();
        let key = RunnerKey {
            chat_id: Uuid::new_v4(),
            runner_id: Uuid::new_v4(),
        };
        (
            Runner::new(key, acquired_at, ctx, inputs, input_tx, cleanup),
            cleanup_rx,
            worker_id,
        )
    }

    fn snapshot(
        snapshot_version: i64,
        worker_id: Option<Uuid>,
        runner_id: Option<Uuid>,
        status: ChatStatus,
    ) -> ChatSnapshot {
        ChatSnapshot {
            worker_id,
            runner_id,
            snapshot_version,
            history_version: 3,
            generation_attempt: 0,
            archived: false,
            status,
        }
    }

    #[tokio::test]
    async fn a_notification_older_than_the_acquire_does_not_clean_the_runner_up() {
        // Regression: an Abandon notification of the previous runner, still in
        // flight when this runner subscribed, used to make it clean itself up
        // while the chat still named it, stalling the chat for a whole lease.
        let (mut runner, mut cleanup, _) = runner(10);
        runner.process(snapshot(9, None, None, ChatStatus::Waiting));
        assert!(cleanup.try_recv().is_err(), "a stale event must be ignored");
        assert!(runner.tasks.is_empty());
    }

    #[tokio::test]
    async fn a_newer_event_naming_another_runner_requests_cleanup_once() {
        let (mut runner, mut cleanup, worker_id) = runner(10);
        let other = Some(Uuid::new_v4());
        runner.process(snapshot(11, Some(worker_id), other, ChatStatus::Running));
        runner.process(snapshot(12, Some(worker_id), other, ChatStatus::Running));
        assert_eq!(cleanup.try_recv().ok(), Some(runner.key));
        assert!(cleanup.try_recv().is_err(), "one request is enough");
        assert!(runner.tasks.is_empty(), "no work for a chat we do not own");
    }

    #[tokio::test]
    async fn duplicate_and_reordered_events_are_ignored_and_same_work_spawns_nothing() {
        let (mut runner, mut cleanup, worker_id) = runner(10);
        let ours = (Some(worker_id), Some(runner.key.runner_id));
        runner.process(snapshot(10, ours.0, ours.1, ChatStatus::Waiting));
        assert_eq!(runner.tasks.len(), 1, "waiting: the abandon task");
        runner.process(snapshot(10, ours.0, ours.1, ChatStatus::Running));
        runner.process(snapshot(9, ours.0, ours.1, ChatStatus::Running));
        assert_eq!(
            runner.tasks.len(),
            1,
            "duplicates and older events change nothing"
        );
        runner.process(snapshot(11, ours.0, ours.1, ChatStatus::Waiting));
        assert_eq!(
            runner.tasks.len(),
            1,
            "same history version and status: keep the task"
        );
        assert!(cleanup.try_recv().is_err());
        for task in &runner.tasks {
            task.cancel.cancel();
        }
    }
}
