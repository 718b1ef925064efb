//! The four kinds of runner tasks (`spec/chatd-architecture.md`, "Runner
//! goroutines": generation, interrupt, dynamic tools timeout, abandon chat).
//!
//! Every task is spawned with its intended history version and status (its
//! [`Fence`]); it takes the local `(chat, history_version, status)` lock, and
//! checks the fence under the chat row lock before every read and write. It
//! exits quietly when the fence fails, when it is cancelled, or when the chat
//! is gone; database failures are retried without limit with bounded
//! exponential backoff ([`retry`]).
//!
//! - [`generation`]: "Generation goroutine", deciding with the pure
//!   [`plan`], streaming with [`stream`], running tools through the one
//!   router in [`tools`] (calls that wait for approval: [`approval`]; the
//!   built-in agent tools in [`agents`]),
//!   committing with [`commit`], titling with [`title`];
//! - [`interrupt`]: "Interrupt goroutine";
//! - [`requires_action_timeout`] and [`abandon`] below: "Dynamic tools
//!   timeout goroutine" and "Abandon chat goroutine".

mod agents;
mod approval;
mod commit;
mod compaction;
mod generation;
mod interrupt;
mod plan;
mod retry;
mod stream;
pub mod title;
mod tools;
mod workspace;

use std::sync::Arc;
use std::time::Duration;

use chatd_core::Episode;
use chatd_store::Chat;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::context::WorkerContext;
use crate::fence::{Fence, FenceError, fenced_lock};
use crate::runner::event::{ChatSnapshot, RunnerInput};

/// Which kind of task a runner spawned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskKind {
    /// Calls the model and executes tools (`running`).
    Generation,
    /// Commits the interrupted output (`interrupting`).
    Interrupt,
    /// Waits for the requires-action deadline (`requires_action`).
    RequiresActionTimeout,
    /// Releases the chat.
    Abandon,
}

/// Everything a task needs.
pub(crate) struct TaskContext {
    pub(crate) chat_id: Uuid,
    pub(crate) fence: Fence,
    pub(crate) ctx: Arc<WorkerContext>,
    pub(crate) cancel: CancellationToken,
    pub(crate) notify: mpsc::UnboundedSender<RunnerInput>,
    /// For an abandon task: how long to wait first (the runner's idle
    /// grace, [`crate::WorkerConfig::abandon_idle_after`]; zero for an
    /// archived chat). A new event cancels the wait with the task.
    pub(crate) abandon_after: Duration,
}

/// How a task ended early.
#[derive(Debug)]
enum Exit {
    /// The chat moved on or is gone.
    Stale,
    /// The runner cancelled the task.
    Cancelled,
    /// A transition was rejected although the fence held: a bug or an
    /// unexpected state; logged.
    Rejected(String),
}

type TaskResult<T> = Result<T, Exit>;

/// Runs one task to completion.
pub(crate) async fn run(kind: TaskKind, task: TaskContext) {
    let result = if kind == TaskKind::Abandon {
        Box::pin(abandon(&task)).await
    } else {
        let (Some(history_version), Some(status)) = (task.fence.history_version, task.fence.status)
        else {
            return;
        };
        let lock = task
            .ctx
            .local_locks
            .get(task.chat_id, history_version, status);
        let Ok(_guard) = task.cancellable(lock.lock_owned()).await else {
            return;
        };
        match kind {
            // Each kind's future in a box of its own size: the spawned task
            // is not as large as the largest kind (memory per running chat,
            // issue 15).
            TaskKind::Generation => Box::pin(generation::generation(&task)).await,
            TaskKind::Interrupt => Box::pin(interrupt::interrupt(&task)).await,
            TaskKind::RequiresActionTimeout => Box::pin(requires_action_timeout(&task)).await,
            TaskKind::Abandon => unreachable!(),
        }
    };
    match result {
        Ok(()) | Err(Exit::Stale) | Err(Exit::Cancelled) => {}
        Err(Exit::Rejected(reason)) => {
            tracing::warn!(chat_id = %task.chat_id, ?kind, %reason, "runner task stopped: transition rejected");
        }
    }
}

impl TaskContext {
    fn machine(&self) -> chatd_store::ChatMachine {
        self.ctx.store.machine(self.chat_id)
    }

    /// The episode of generation attempt `attempt` of the task's history
    /// version (the key of its parts and of its tool calls' idempotency).
    fn episode(&self, attempt: i64) -> Episode {
        Episode {
            chat_id: self.chat_id,
            history_version: self.fence.history_version.unwrap_or_default(),
            generation_attempt: attempt,
        }
    }

    /// Reports `hop` of this task's chat to the worker's timeline.
    fn hop(&self, hop: crate::timeline::Hop) {
        self.ctx.config.timeline.hop(self.chat_id, hop);
    }

    fn publish_local(&self, chat: &Chat) {
        // The fast path: the runner sees our own commit without waiting for
        // the notification.
        let _ = self
            .notify
            .send(RunnerInput::Snapshot(Box::new(ChatSnapshot::from(chat))));
    }
}

/// "Abandon chat goroutine": `Abandon`, once the fence shows the runner
/// still owns the chat. An idle chat is kept for `abandon_after` first,
/// unless chats wait for a runner slot or their owner's running-chat slot
/// ([`crate::slots::Slots::contended`]): a held chat keeps both.
async fn abandon(task: &TaskContext) -> TaskResult<()> {
    if !task.abandon_after.is_zero() && !task.ctx.slots.contended() {
        task.sleep(task.abandon_after).await?;
    }
    task.transition("abandoning the chat", |tx, _| {
        Box::pin(async move { tx.abandon().await })
    })
    .await?;
    task.hop(crate::timeline::Hop::Abandoned);
    Ok(())
}

/// "Dynamic tools timeout goroutine": waits until the requires-action
/// deadline (database time, read again after every wait, at most a day at a
/// time), then `CancelRequiresAction`.
async fn requires_action_timeout(task: &TaskContext) -> TaskResult<()> {
    let machine = task.machine();
    loop {
        let remaining = task
            .retrying("reading the requires-action deadline", || async {
                let mut locked = fenced_lock(&machine, &task.fence).await?;
                let secs =
                    chatd_store::chats::requires_action_remaining_secs(locked.conn(), task.chat_id)
                        .await
                        .map_err(|e| FenceError::Store(e.into()))?;
                locked.finish().await?;
                Ok(secs)
            })
            .await?;
        match remaining {
            Some(secs) if secs > 0.0 => {
                task.sleep(Duration::from_secs_f64(secs.min(86_400.0)))
                    .await?
            }
            _ => break,
        }
    }
    task.transition("cancelling the requires-action state", |tx, _| {
        Box::pin(async move { tx.cancel_requires_action(None).await.map(|_| ()) })
    })
    .await
}
