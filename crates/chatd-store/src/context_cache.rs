//! The replica's cache of model-context entries (issue 15: the reads around
//! a transition).
//!
//! A bundle that changes a chat's history brings `Chat.context` up to date
//! before its commit, from the context entries of the whole active history
//! (`queries::messages::context_entries`: one row per message since the
//! newest boundary). Read afresh, that is a scan of the chat's messages and a
//! JSON array of them in every send and every committed step: the cost grows
//! with the chat. The cache keeps, per chat, the entries as of one
//! `history_version`: a bundle that finds the entries of the version it
//! locked, and changes the history only by appending messages through its
//! transitions, computes the new context from them and the rows it inserted,
//! and reads nothing.
//!
//! Why the key is enough: every write of `chat_messages` happens in a
//! bundle that bumped `snapshot_version`, and the message triggers stamp
//! `history_version = snapshot_version` (spec "Message revisions and history version"), so
//! a history that changed has a `history_version` no earlier history had.
//! Entries are put only after their bundle committed, since a rolled-back
//! bundle's snapshot version is used again by the next one.
//!
//! Bounded: at most [`MAX_ENTRIES`] entries in all (least recently used
//! chats go first), and a chat with more than [`MAX_ENTRIES_PER_CHAT`] is
//! not cached.

use std::sync::{Arc, Mutex};

use chatd_core::ToolCallRef;
use chatd_core::context::ContextEntry;
use hashlink::LruCache;
use uuid::Uuid;

/// Most entries the cache holds, over all chats (about 64 bytes each).
pub const MAX_ENTRIES: usize = 256 * 1024;

/// Most entries of one chat the cache holds; a longer history is read each
/// time.
pub const MAX_ENTRIES_PER_CHAT: usize = MAX_ENTRIES / 8;

/// See the module docs.
#[derive(Debug)]
pub struct ContextCache {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    chats: LruCache<Uuid, Held>,
    /// Entries held, over all chats.
    total: usize,
}

/// A chat's context entries and, when known, its tail's outstanding tool
/// calls: what the cache holds of it and what a bundle's log puts there.
pub(crate) type Logged = (Arc<Vec<ContextEntry>>, Option<Arc<Vec<ToolCallRef>>>);

/// What the cache holds of one chat: its entries at `version`, and the
/// tool calls of its tail that have no result (`None` when not known).
#[derive(Debug)]
struct Held {
    version: i64,
    entries: Arc<Vec<ContextEntry>>,
    outstanding: Option<Arc<Vec<ToolCallRef>>>,
}

impl Default for ContextCache {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                chats: LruCache::new_unbounded(),
                total: 0,
            }),
        }
    }
}

impl ContextCache {
    /// The entries of chat `chat_id` at `history_version`, when the cache
    /// holds that version.
    pub fn get(&self, chat_id: Uuid, history_version: i64) -> Option<Arc<Vec<ContextEntry>>> {
        self.lookup(chat_id, history_version)
            .map(|(entries, _)| entries)
    }

    /// The tool calls without a result in the tail of chat `chat_id`'s
    /// history (from its last user message on, as
    /// `chatd_core::outstanding_tool_calls` finds them) at
    /// `history_version`, when the cache holds them: a send's bundle answers
    /// them without reading the tail.
    pub fn outstanding(&self, chat_id: Uuid, history_version: i64) -> Option<Vec<ToolCallRef>> {
        self.lookup(chat_id, history_version)
            .and_then(|(_, outstanding)| outstanding.map(|calls| calls.to_vec()))
    }

    /// [`ContextCache::get`] with the outstanding tool calls of the tail
    /// when they are held too.
    fn lookup(&self, chat_id: Uuid, history_version: i64) -> Option<Logged> {
        let mut inner = self.lock();
        match inner.chats.get(&chat_id) {
            Some(held) if held.version == history_version => {
                Some((held.entries.clone(), held.outstanding.clone()))
            }
            _ => None,
        }
    }

    /// Holds `entries` as chat `chat_id`'s at `history_version` (committed),
    /// instead of an older version of it (a newer one, put by a bundle that
    /// committed later but got here first, stays); evicts the least recently
    /// used chats past [`MAX_ENTRIES`].
    pub fn put(&self, chat_id: Uuid, history_version: i64, entries: Arc<Vec<ContextEntry>>) {
        self.put_log(chat_id, history_version, entries, None);
    }

    /// [`ContextCache::put`] with the tail's outstanding tool calls
    /// ([`ContextCache::outstanding`]) when the bundle knows them: what a
    /// bundle puts after its commit (and tests that warm the cache).
    pub fn put_log(
        &self,
        chat_id: Uuid,
        history_version: i64,
        entries: Arc<Vec<ContextEntry>>,
        outstanding: Option<Arc<Vec<ToolCallRef>>>,
    ) {
        let mut inner = self.lock();
        if inner
            .chats
            .peek(&chat_id)
            .is_some_and(|held| held.version > history_version)
        {
            return;
        }
        let mut outstanding = outstanding;
        if let Some(old) = inner.chats.remove(&chat_id) {
            inner.total -= old.entries.len();
            // The same history: what was known of its tail still holds.
            if old.version == history_version && outstanding.is_none() {
                outstanding = old.outstanding;
            }
        }
        if entries.len() > MAX_ENTRIES_PER_CHAT {
            return;
        }
        inner.total += entries.len();
        inner.chats.insert(
            chat_id,
            Held {
                version: history_version,
                entries,
                outstanding,
            },
        );
        while inner.total > MAX_ENTRIES {
            let Some((_, evicted)) = inner.chats.remove_lru() else {
                break;
            };
            inner.total -= evicted.entries.len();
        }
    }

    /// Drops what the cache holds of chat `chat_id`: its next bundle reads
    /// the entries and the tail (a cold cache, as on another replica).
    pub fn remove(&self, chat_id: Uuid) {
        let mut inner = self.lock();
        if let Some(old) = inner.chats.remove(&chat_id) {
            inner.total -= old.entries.len();
        }
    }

    /// Number of chats held.
    pub fn len(&self) -> usize {
        self.lock().chats.len()
    }

    /// Whether no chat is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The data stays consistent whatever panicked while holding it (each
        // update keeps `total` exact before it can panic).
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a bundle knows of its chat's context entries: the cached ones of
/// the history it locked, and the rows its transitions appended since, while
/// every history write of the bundle was such an append.
#[derive(Debug, Default)]
pub(crate) enum HistoryLog {
    /// Not cached, or the history changed otherwise (an edit, a boundary,
    /// a write through `ChatTx::conn`): the commit reads the entries.
    #[default]
    Unknown,
    /// The entries are `base` and then `appended`; `refreshed` once the
    /// row's context columns were written from them in this bundle (an
    /// append clears it). `outstanding`: the tool calls of the history's
    /// tail (from its last user message) that have no result, as
    /// `chatd_core::outstanding_tool_calls` finds them, when known (held
    /// with the entries, or read in this bundle), kept up to date by every
    /// append: a send then need not read the tail.
    Known {
        base: Arc<Vec<ContextEntry>>,
        appended: Vec<ContextEntry>,
        refreshed: bool,
        outstanding: Option<Arc<Vec<ToolCallRef>>>,
    },
}

impl HistoryLog {
    /// The log of a bundle that locked chat `chat_id` at `history_version`.
    pub(crate) fn at(cache: &ContextCache, chat_id: Uuid, history_version: i64) -> Self {
        match cache.lookup(chat_id, history_version) {
            Some((base, outstanding)) => Self::Known {
                base,
                appended: Vec::new(),
                refreshed: false,
                outstanding,
            },
            None => Self::Unknown,
        }
    }

    /// The log of a chat created in this transaction: no history yet, so
    /// the entries (none) and the tail's outstanding calls (none) are
    /// known; the initial messages are appended to it.
    pub(crate) fn new_chat() -> Self {
        Self::Known {
            base: Arc::new(Vec::new()),
            appended: Vec::new(),
            refreshed: false,
            outstanding: Some(Arc::new(Vec::new())),
        }
    }

    /// What [`ContextCache::put_log`] holds of this log: the entries and,
    /// when known, the tail's outstanding calls; `None` when the log does
    /// not know the entries.
    pub(crate) fn to_cache(&self) -> Option<Logged> {
        Some((self.entries()?, self.outstanding().cloned()))
    }

    /// Whether the entries are known without reading them.
    pub(crate) fn is_known(&self) -> bool {
        matches!(self, Self::Known { .. })
    }

    /// The history changed in a way the log does not follow.
    pub(crate) fn forget(&mut self) {
        *self = Self::Unknown;
    }

    /// A message the bundle inserted: appended to the entries when it is an
    /// ordinary one (a boundary changes which rows are candidates: the
    /// commit reads them then).
    pub(crate) fn appended(&mut self, message: &crate::models::ChatMessage) {
        let Self::Known {
            appended,
            refreshed,
            outstanding,
            ..
        } = self
        else {
            return;
        };
        match crate::queries::messages::entry_of(message) {
            Some(entry) if !entry.compressed => {
                appended.push(entry);
                *refreshed = false;
                if let Some(calls) = outstanding {
                    // A user message starts a new tail.
                    let calls = Arc::make_mut(calls);
                    if message.role == chatd_core::ChatRole::User {
                        calls.clear();
                    }
                    chatd_core::fold_outstanding_tool_calls(calls, &message.content.0);
                }
            }
            _ => self.forget(),
        }
    }

    /// The tail's tool calls without a result, when known (see
    /// [`HistoryLog::Known`]).
    pub(crate) fn outstanding(&self) -> Option<&Arc<Vec<ToolCallRef>>> {
        match self {
            Self::Known { outstanding, .. } => outstanding.as_ref(),
            Self::Unknown => None,
        }
    }

    /// The tail's tool calls without a result, as read now in the bundle
    /// (kept only while the log follows the history).
    pub(crate) fn set_outstanding(&mut self, calls: Vec<ToolCallRef>) {
        if let Self::Known { outstanding, .. } = self {
            *outstanding = Some(Arc::new(calls));
        }
    }

    /// Whether the bundle appended rows whose context the row does not
    /// show yet (and knows the entries to compute it).
    pub(crate) fn needs_refresh(&self) -> bool {
        matches!(self, Self::Known { appended, refreshed: false, .. } if !appended.is_empty())
    }

    /// Whether the row's context columns were written from the current
    /// entries in this bundle.
    pub(crate) fn is_refreshed(&self) -> bool {
        matches!(
            self,
            Self::Known {
                refreshed: true,
                ..
            }
        )
    }

    /// A write that may change what the context columns hold besides the
    /// entries (the chat's model, whose window is `context_limit`): the
    /// commit writes them again.
    pub(crate) fn unrefresh(&mut self) {
        if let Self::Known { refreshed, .. } = self {
            *refreshed = false;
        }
    }

    /// The row's context columns were just written from [`Self::entries`].
    pub(crate) fn mark_refreshed(&mut self) {
        if let Self::Known { refreshed, .. } = self {
            *refreshed = true;
        }
    }

    /// The entries, when known.
    pub(crate) fn entries(&self) -> Option<Arc<Vec<ContextEntry>>> {
        match self {
            Self::Known { base, appended, .. } if appended.is_empty() => Some(base.clone()),
            Self::Known { base, appended, .. } => Some(Arc::new(
                base.iter().chain(appended.iter()).copied().collect(),
            )),
            Self::Unknown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatd_core::{ChatRole, Visibility};

    fn entries(n: usize) -> Arc<Vec<ContextEntry>> {
        Arc::new(
            (0..n as i64)
                .map(|id| ContextEntry {
                    id,
                    role: ChatRole::User,
                    visibility: Visibility::Both,
                    compressed: false,
                    compacted_through_id: None,
                    token_estimate: 5,
                    usage: None,
                })
                .collect(),
        )
    }

    #[test]
    fn a_chat_is_found_only_at_the_version_it_was_put_with() {
        let cache = ContextCache::default();
        let chat = Uuid::new_v4();
        cache.put(chat, 4, entries(2));
        assert_eq!(cache.get(chat, 4).map(|e| e.len()), Some(2));
        assert!(cache.get(chat, 5).is_none());
        assert!(cache.get(Uuid::new_v4(), 4).is_none());
        // A newer version replaces the older one, never the other way round.
        cache.put(chat, 6, entries(3));
        assert!(cache.get(chat, 4).is_none());
        assert_eq!(cache.get(chat, 6).map(|e| e.len()), Some(3));
        cache.put(chat, 5, entries(1));
        assert!(cache.get(chat, 5).is_none());
        assert_eq!(cache.get(chat, 6).map(|e| e.len()), Some(3));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_tail_calls_go_with_their_version_and_survive_a_put_of_the_same_history() {
        let cache = ContextCache::default();
        let chat = Uuid::new_v4();
        let call = ToolCallRef {
            tool_call_id: "c".into(),
            tool_name: "t".into(),
        };
        cache.put_log(chat, 3, entries(1), Some(Arc::new(vec![call.clone()])));
        assert_eq!(cache.outstanding(chat, 3), Some(vec![call.clone()]));
        assert_eq!(cache.outstanding(chat, 4), None);
        // The same history put again without them: they stay known.
        cache.put(chat, 3, entries(1));
        assert_eq!(cache.outstanding(chat, 3), Some(vec![call]));
        // A newer history without them: unknown.
        cache.put(chat, 4, entries(2));
        assert_eq!(cache.outstanding(chat, 4), None);
        cache.remove(chat);
        assert!(cache.get(chat, 4).is_none());
        assert_eq!(cache.lock().total, 0);
    }

    #[test]
    fn the_least_recently_used_chats_go_past_the_bound_and_long_chats_are_not_held() {
        let cache = ContextCache::default();
        let chats: Vec<Uuid> = (0..9).map(|_| Uuid::new_v4()).collect();
        for chat in &chats[..8] {
            cache.put(*chat, 1, entries(MAX_ENTRIES_PER_CHAT));
        }
        // Touch the first: the second is now the least recently used.
        assert!(cache.get(chats[0], 1).is_some());
        cache.put(chats[8], 1, entries(1));
        assert!(cache.get(chats[1], 1).is_none());
        assert!(cache.get(chats[0], 1).is_some());
        assert!(cache.get(chats[8], 1).is_some());
        assert_eq!(cache.lock().total, 7 * MAX_ENTRIES_PER_CHAT + 1);
        // Too long to hold: not cached, and its older version is dropped.
        cache.put(chats[8], 2, entries(MAX_ENTRIES_PER_CHAT + 1));
        assert!(cache.get(chats[8], 1).is_none() && cache.get(chats[8], 2).is_none());
        assert_eq!(cache.lock().total, 7 * MAX_ENTRIES_PER_CHAT);
    }
}
