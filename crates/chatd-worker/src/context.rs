//! What every worker component shares: the store, the pubsub, the part
//! buffer, the provider factory, the MCP tool host, the tunables and the
//! local locks.

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
