//! Fences of runner tasks (`spec/chatd-architecture.md`, "Runner
//! goroutines"): before every read and write a task locks the chat row and
//! checks that the row still names its worker and runner and, where it
//! applies, the history version and status it was spawned for. A mismatch is
//! a stale task: it exits without side effects. A transition bundle
//! ([`fenced_update`]) may check the fence on the row this replica last
//! committed, when its first statement then checks that the row is still
//! that one (`ChatMachine::begin_optimistic`).

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

/// Opens a transition bundle on `machine` and checks `fence` on its row;
/// runs `f` and commits only when it holds. Returns `f`'s value and the
/// committed row.
///
/// The bundle is optimistic ([`ChatMachine::begin_optimistic`]): when this
/// replica committed the chat last, the fence and `f`'s transitions are
/// checked against that row, and the first statement checks that the row is
/// still it (a generation attempt is one statement then). When it is not,
/// the bundle is rolled back and runs again with the lock taken first, so
/// `f` may run twice; a fence that fails, or a transition rejected, in a
/// bundle begun from the guess runs again locked before the task is told it
/// is stale or rejected (the guess is checked by version alone).
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
    let tx = machine.begin_optimistic().await.map_err(map_missing)?;
    let optimistic = tx.began_from_guess();
    match fenced_run(tx, fence, &f).await {
        Err(FenceError::Store(StoreError::GuessMissed)) => {}
        // A fence failure or a rejection decided on the guess, which the
        // check compares by version alone (execution columns written by
        // hand without a bump): only the locked row has the last word.
        Err(FenceError::Stale | FenceError::Store(StoreError::State(_))) if optimistic => {
            machine.forget_guess();
        }
        other => return other,
    }
    let tx = machine.begin().await.map_err(map_missing)?;
    fenced_run(tx, fence, &f).await
}

/// Checks `fence` on the bundle's row, runs `f` and commits. In an
/// optimistic bundle whose guess turns out stale, anything `f` or the
/// commit returns gives way to `Store(GuessMissed)`.
async fn fenced_run<T, F>(mut tx: ChatTx, fence: &Fence, f: &F) -> Result<(T, Chat), FenceError>
where
    F: for<'a> Fn(&'a mut ChatTx, &'a Chat) -> BoxFuture<'a, StoreResult<T>>,
{
    let chat = tx.chat().await.map_err(map_missing)?;
    if !fence.holds(&chat) {
        // Only the locked row can say the task is stale: a bundle begun
        // from the guess runs again locked (`fenced_update`). Dropping the
        // bundle rolls back any snapshot bump; nothing is published.
        return Err(FenceError::Stale);
    }
    let value = match f(&mut tx, &chat).await {
        Ok(value) => value,
        Err(err) => {
            // A rejection in a bundle begun from the guess runs again
            // locked (`fenced_update`); any other error decided on the
            // guessed row stands only for the locked one.
            if !(tx.began_from_guess() && matches!(err, StoreError::State(_))) {
                tx.confirm().await?;
            }
            return Err(err.into());
        }
    };
    let committed = tx.commit().await?;
    Ok((value, committed))
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
