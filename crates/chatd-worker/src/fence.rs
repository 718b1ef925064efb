//! Fences of runner tasks (`spec/chatd-architecture.md`, "Runner
//! goroutines"): before every read and write a task locks the chat row and
//! checks that the row still names its worker and runner and, where it
//! applies, the history version and status it was spawned for. A mismatch is
//! a stale task: it exits without side effects.

use chatd_core::ChatStatus;
use chatd_store::{Chat, ChatMachine, ChatTx, LockedChat, StoreError, StoreResult};
use futures::future::BoxFuture;
use uuid::Uuid;

/// What a task expects the chat row to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// This worker.
    pub worker_id: Uuid,
    /// The task's runner.
    pub runner_id: Uuid,
    /// The history version the task works on (`None`: any).
    pub history_version: Option<i64>,
    /// The status the task works in (`None`: any).
    pub status: Option<ChatStatus>,
}

impl Fence {
    /// Whether `chat` still matches.
    pub fn holds(&self, chat: &Chat) -> bool {
        chat.worker_id == Some(self.worker_id)
            && chat.runner_id == Some(self.runner_id)
            && self
                .history_version
                .is_none_or(|v| v == chat.history_version)
            && self.status.is_none_or(|s| s == chat.status)
    }
}

/// Why a fenced operation did not run.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// The chat moved on (other runner, history or status) or was deleted:
    /// the task must exit quietly.
    #[error("stale task: the chat no longer matches its fence")]
    Stale,
    /// A store error; database failures are retried by the caller.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl FenceError {
    /// Whether the caller should retry with backoff (a transient
    /// infrastructure failure, [`StoreError::is_retryable`]) rather than
    /// exit. A permanent database error is not retried: it would fail the
    /// same way forever and keep the chat wedged (issue 14).
    pub fn is_retryable(&self) -> bool {
        match self {
            FenceError::Stale => false,
            FenceError::Store(err) => err.is_retryable(),
        }
    }
}

fn map_missing(err: StoreError) -> FenceError {
    match err {
        StoreError::State(chatd_core::StateError::ChatNotFound) => FenceError::Stale,
        other => FenceError::Store(other),
    }
}

/// Runs `f` in a transition bundle on `machine` when `fence` holds for the
/// chat row, and commits; returns `f`'s value and the committed row. The
/// bundle is the store's optimistic one
/// ([`ChatMachine::update_optimistic`], with the fence as its precheck):
/// `f` may run twice (hence `Fn`), and only the locked row can say the task
/// is stale. Dropping a bundle rolls back its snapshot bump; nothing is
/// published.
///
/// # Errors
/// `Stale` when the fence fails or the chat is gone (nothing committed);
/// `Store` for transition rejections and database errors.
pub async fn fenced_update<T, F>(
    machine: &ChatMachine,
    fence: &Fence,
    f: F,
) -> Result<(T, Chat), FenceError>
where
    F: for<'a> Fn(&'a mut ChatTx, &'a Chat) -> BoxFuture<'a, StoreResult<T>>,
{
    machine
        .update_optimistic(|chat| fence.holds(chat), f)
        .await
        .map_err(map_missing)?
        .ok_or(FenceError::Stale)
}

/// Locks the chat row (`FOR UPDATE`, no snapshot bump) and checks `fence`;
/// the returned lock keeps the row locked for consistent related reads until
/// it is finished or dropped. For reads only: its commit does not wait for
/// a WAL flush ([`ChatMachine::lock_to_read`]).
///
/// # Errors
/// `Stale` when the fence fails or the chat is gone; database errors.
pub async fn fenced_lock(machine: &ChatMachine, fence: &Fence) -> Result<LockedChat, FenceError> {
    let locked = machine.lock_to_read().await.map_err(map_missing)?;
    if !fence.holds(&locked.chat) {
        return Err(FenceError::Stale);
    }
    Ok(locked)
}
