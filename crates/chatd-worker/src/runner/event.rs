//! What flows into a runner's loop (spec "Event shape"): the chat row as a
//! runner sees it ([`ChatSnapshot`]), the loop's inputs ([`RunnerInput`]),
//! and the key the runner manager knows a runner by ([`RunnerKey`]).
//!
//! A leaf of the worker: the runner's loop ([`crate::runner`]), the runner
//! manager and the tasks (which feed their own commits back to the loop)
//! all name these types, and this module names none of them.

use chatd_core::ChatStatus;
use chatd_pubsub::ChatUpdate;
use chatd_store::Chat;
use uuid::Uuid;

/// The fields of a chat row the runner decides on (spec "Event shape").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatSnapshot {
    /// Owning worker.
    pub worker_id: Option<Uuid>,
    /// Owning runner.
    pub runner_id: Option<Uuid>,
    /// Snapshot version.
    pub snapshot_version: i64,
    /// History version.
    pub history_version: i64,
    /// Generation attempt.
    pub generation_attempt: i64,
    /// Archived marker.
    pub archived: bool,
    /// Status.
    pub status: ChatStatus,
}

impl From<&Chat> for ChatSnapshot {
    fn from(chat: &Chat) -> Self {
        Self {
            worker_id: chat.worker_id,
            runner_id: chat.runner_id,
            snapshot_version: chat.snapshot_version,
            history_version: chat.history_version,
            generation_attempt: chat.generation_attempt,
            archived: chat.archived,
            status: chat.status,
        }
    }
}

impl From<&ChatUpdate> for ChatSnapshot {
    fn from(update: &ChatUpdate) -> Self {
        Self {
            worker_id: update.worker_id,
            runner_id: update.runner_id,
            snapshot_version: update.snapshot_version,
            history_version: update.history_version,
            generation_attempt: update.generation_attempt,
            archived: update.archived,
            status: update.status,
        }
    }
}

/// Input of a runner's loop.
#[derive(Debug, Clone)]
pub enum RunnerInput {
    /// A (possibly stale, duplicated or reordered) view of the chat row.
    /// Boxed: the runner's input channel allocates its slots 32 at a time,
    /// each the size of this enum (memory per running chat, issue 15).
    Snapshot(Box<ChatSnapshot>),
    /// The chat was deleted: clean up.
    Deleted,
    /// Notifications may have been lost: read the row again.
    Refetch,
}

/// A request to the runner manager to clean a runner up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerKey {
    /// The chat.
    pub chat_id: Uuid,
    /// The runner.
    pub runner_id: Uuid,
}
