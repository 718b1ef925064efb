//! The replica's cache of committed chat rows: the guess of an optimistic
//! bundle (issue 15: the lock-and-bump folded into a transition's first
//! write).
//!
//! An ordinary bundle starts with the lock-and-bump
//! (`queries::chats::lock_and_bump`): one statement that locks the chat row,
//! advances `snapshot_version` and returns the row its transitions validate
//! against. An optimistic bundle knows the row beforehand: it validates
//! against the row this replica last committed, and its first statement
//! carries the check `snapshot_version = <the guessed version>`. For the
//! transitions whose first write is the chat row's own `UPDATE` (recording
//! a generation attempt or a retry state, finishing a turn other than into
//! a queued message, finishing with an error, entering requires-action,
//! requesting compaction, archiving), that `UPDATE` locks (`FOR UPDATE`),
//! bumps and checks in one statement; any other first step locks and bumps
//! with a statement that returns only `updated_at` and the heartbeat age
//! (`queries::chats::lock_and_bump_guessed`), the rest being the guess. When the check holds,
//! nothing committed since the guessed row (every transition bundle bumps
//! `snapshot_version`, and a rolled-back bump leaves the row as it was), so
//! the validation was against the current state; when it fails, the bundle
//! is rolled back and run again with the lock taken first
//! ([`crate::ChatMachine::update_optimistic`], `crate::bundle::guess`).
//!
//! What makes a committed row a valid guess: the execution state (status,
//! archived, queue), ownership and history version change only in bundles,
//! which bump the version. Writes that do not bump it (metadata: title,
//! labels, pin, plan mode) change nothing a transition validates; the
//! guarded `UPDATE`'s `RETURNING` reads the row as it is, and after the
//! light lock-and-bump the row is read back before it is shown or committed.
//! Writes of execution columns that skip the bump (the testkit's corrupted
//! states, an operator's manual SQL) must drop the chat from the cache
//! ([`RowCache::remove`]) or the next optimistic bundle validates against
//! the row before them. What limits the harm when they do not: the
//! landing check refuses a landing the matrix does not allow, and a
//! rejection decided on a guess is never final
//! ([`crate::ChatMachine::update_optimistic`] and the worker's fenced
//! bundles run it again locked and drop the guess), so such a write cannot
//! leave a chat stuck under its owner; but a transition allowed from both
//! the guessed and the real state (a send that starts a turn on a guessed
//! `waiting` row that was set `running` by hand) commits as the guess
//! calls for. The same holds for a database restored to an
//! earlier point under running replicas: once another replica advanced a
//! chat back to a version this replica cached, the guess would pass the
//! check with other contents; the replicas must be stopped for a restore
//! (README, "Running the service").
//!
//! Rows are put only after their bundle committed, and an older version
//! never replaces a newer one. Bounded: at most [`MAX_ROWS`] chats (least
//! recently used first out).

use std::sync::Mutex;

use hashlink::LruCache;
use uuid::Uuid;

use crate::models::ChatFacts;

/// Most chats whose committed row the cache holds (about 1.5 KiB each).
pub const MAX_ROWS: usize = 8 * 1024;

/// See the module docs.
#[derive(Debug)]
pub struct RowCache {
    inner: Mutex<LruCache<Uuid, ChatFacts>>,
}

impl Default for RowCache {
    fn default() -> Self {
        Self {
            inner: Mutex::new(LruCache::new(MAX_ROWS)),
        }
    }
}

impl RowCache {
    /// The last committed row of chat `chat_id` this replica knows, with the
    /// queue length and heartbeat age its bundle read before the commit.
    pub fn get(&self, chat_id: Uuid) -> Option<ChatFacts> {
        self.lock().get(&chat_id).cloned()
    }

    /// Holds `facts` (of a committed bundle) as chat `facts.chat.id`'s row,
    /// unless a newer version is held (a bundle that committed later but
    /// got here first). The context entries are not kept.
    pub fn put(&self, mut facts: ChatFacts) {
        facts.context_entries = None;
        let mut inner = self.lock();
        let id = facts.chat.id;
        if inner
            .peek(&id)
            .is_some_and(|held| held.chat.snapshot_version > facts.chat.snapshot_version)
        {
            return;
        }
        inner.insert(id, facts);
    }

    /// Drops chat `chat_id`'s row: its next optimistic bundle locks first.
    pub fn remove(&self, chat_id: Uuid) {
        self.lock().remove(&chat_id);
    }

    /// Number of chats held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no chat is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Uuid, ChatFacts>> {
        // Each operation is one map call: nothing half-done to poison.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
