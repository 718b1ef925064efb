//! What every worker component shares: the store, the pubsub, the part
//! buffer, the provider factory, the MCP tool host, the tunables, the
//! local locks and the automatic compactions skipped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use chatd_core::ChatStatus;
use chatd_pubsub::Pubsub;
use chatd_store::Store;
use chatd_tools::McpHost;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::WorkerConfig;
use crate::part_buffer::PartBuffer;
use crate::providers::ProviderFactory;

/// Shared state of one worker.
pub(crate) struct WorkerContext {
    pub(crate) store: Store,
    pub(crate) pubsub: Arc<dyn Pubsub>,
    pub(crate) parts: PartBuffer,
    pub(crate) providers: Arc<dyn ProviderFactory>,
    pub(crate) mcp: McpHost,
    pub(crate) config: WorkerConfig,
    pub(crate) local_locks: LocalLocks,
    /// Cancels best-effort background work (title generation) on shutdown.
    pub(crate) background: CancellationToken,
    /// This replica's runner slots (`--max-runners`) and whether chats wait
    /// for one ([`crate::slots::Slots`]).
    pub(crate) slots: crate::slots::Slots,
    /// Chats whose last automatic compaction was skipped because its
    /// summary was not smaller ([`SkippedCompactions`]).
    pub(crate) skipped_compactions: SkippedCompactions,
    /// This replica's chat workspaces and their sandbox
    /// ([`crate::workspace`]).
    pub(crate) workspaces: crate::workspace::Workspaces,
}

/// Share of the window (percent) by which a chat's context must grow after
/// a skipped automatic compaction before another one is tried.
pub(crate) const COMPACTION_RETRY_GROWTH_PERCENT: i64 = 10;

/// Chats whose last automatic compaction was skipped because the model's
/// summary was not smaller than what it would replace (docs/operations.md
/// "Context management"), with the prompt size then, in tokens. While a
/// chat's prompt is at least that size and less than
/// [`COMPACTION_RETRY_GROWTH_PERCENT`] of the window larger, its calls go
/// out uncompacted instead of asking the model for another summary of
/// nearly the same history every turn. A smaller prompt (an edit, a
/// cleared context, another branch) or a committed compaction forgets the
/// chat; a prompt that no longer fits is compacted regardless (the caller's
/// check). In memory: a restarted worker tries once more.
#[derive(Default)]
pub(crate) struct SkippedCompactions {
    skipped: Mutex<HashMap<Uuid, i64>>,
}

impl SkippedCompactions {
    /// Remembers that `chat_id`'s automatic compaction at a prompt of
    /// `tokens` was skipped.
    pub(crate) fn remember(&self, chat_id: Uuid, tokens: i64) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        skipped.insert(chat_id, tokens);
    }

    /// Forgets `chat_id` (its history was compacted).
    pub(crate) fn forget(&self, chat_id: Uuid) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        skipped.remove(&chat_id);
    }

    /// Whether an automatic compaction of `chat_id` at a prompt of
    /// `tokens` (window `limit`) is still skipped: one was skipped at a
    /// prompt no larger than `tokens` and less than
    /// [`COMPACTION_RETRY_GROWTH_PERCENT`] of `limit` smaller. Otherwise the
    /// chat is forgotten.
    pub(crate) fn holds(&self, chat_id: Uuid, tokens: i64, limit: i64) -> bool {
        let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        let Some(&at) = skipped.get(&chat_id) else {
            return false;
        };
        let growth = (limit.max(0) * COMPACTION_RETRY_GROWTH_PERCENT / 100).max(1);
        if tokens >= at && tokens < at.saturating_add(growth) {
            return true;
        }
        skipped.remove(&chat_id);
        false
    }
}

/// In-memory locks scoped to `(chat_id, history_version, status)` (spec
/// "Runner goroutines": two tasks with the same intended values must not
/// race, even when they belong to two runners of the same chat on this
/// replica).
#[derive(Default)]
pub(crate) struct LocalLocks {
    locks: Mutex<HashMap<LockKey, Weak<tokio::sync::Mutex<()>>>>,
}

type LockKey = (Uuid, i64, ChatStatus);

impl LocalLocks {
    /// The lock for a key; entries disappear once nobody holds a handle.
    pub(crate) fn get(
        &self,
        chat_id: Uuid,
        history_version: i64,
        status: ChatStatus,
    ) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, weak| weak.strong_count() > 0);
        let key = (chat_id, history_version, status);
        if let Some(lock) = locks.get(&key).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(key, Arc::downgrade(&lock));
        lock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skipped_compaction_holds_until_the_context_grew_a_tenth_of_the_window() {
        let skips = SkippedCompactions::default();
        let chat = Uuid::from_u128(1);
        assert!(!skips.holds(chat, 800, 1000));
        skips.remember(chat, 800);
        assert!(skips.holds(chat, 800, 1000));
        assert!(skips.holds(chat, 899, 1000));
        // Grown by 100 tokens, a tenth of the window: tried again.
        assert!(!skips.holds(chat, 900, 1000));
        assert!(!skips.holds(chat, 850, 1000), "forgotten once tried again");
        // A smaller prompt (an edit, a cleared context) forgets it too.
        skips.remember(chat, 800);
        assert!(!skips.holds(chat, 700, 1000));
        assert!(!skips.holds(chat, 800, 1000));
        skips.remember(chat, 800);
        skips.forget(chat);
        assert!(!skips.holds(chat, 800, 1000));
    }
}
