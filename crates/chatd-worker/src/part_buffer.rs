//! The message part buffer (`spec/chatd-architecture.md`, "Message part
//! buffer").
//!
//! A replica-global, in-memory map from [`Episode`] to the parts streamed in
//! it. Rules kept here:
//! - `create_episode` works once per episode; `close_episode` is idempotent and
//!   creates-and-closes a missing episode (create and close may race).
//! - `add_part` assigns `seq` = 1, 2, 3, … (contiguous) and fails when the
//!   episode is missing or closed, or when it would exceed the per-episode cap
//!   (1 MiB by default) of JSON-serialised part size; once one part was
//!   refused for the cap, every later one is (a preview never has holes).
//! - `subscribe` never fails: it waits for a missing episode to be created,
//!   replays the buffered parts, follows new ones, and ends after the last
//!   part of a closed episode. A subscriber that leaves a part unread for the
//!   slow-subscriber timeout (10 s) is dropped: its stream ends (counted from
//!   when the part was handed to its channel, so a subscriber that reads
//!   nothing is dropped 10 s after its first unread part, not only once its
//!   channel is full).
//! - Closed episodes are garbage-collected once they have been closed for at
//!   least the retention period (15 s) and have no subscribers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use chatd_core::{ChatRole, Episode, PartDelta, StreamPart};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::ticker::Ticker;

/// Tunables; defaults are the spec's.
#[derive(Debug, Clone)]
pub struct PartBufferConfig {
    /// Maximum JSON-serialised size of one episode's parts, in bytes (1 MiB).
    pub max_episode_bytes: usize,
    /// How long a closed episode is kept at least (15 s).
    pub closed_retention: Duration,
    /// How long a subscriber may take to accept a part (10 s).
    pub slow_subscriber_timeout: Duration,
    /// How often the garbage collector runs (1 s).
    pub gc_interval: Duration,
    /// Parts buffered per subscriber channel before sends wait (64).
    pub subscriber_capacity: usize,
}

impl Default for PartBufferConfig {
    fn default() -> Self {
        Self {
            max_episode_bytes: 1024 * 1024,
            closed_retention: Duration::from_secs(15),
            slow_subscriber_timeout: Duration::from_secs(10),
            gc_interval: Duration::from_secs(1),
            subscriber_capacity: 64,
        }
    }
}

/// The buffer's predefined errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartBufferError {
    /// `create_episode` on an episode that exists (open or closed).
    #[error("episode already exists")]
    EpisodeExists,
    /// `add_part`/`get_parts` on an episode that does not exist.
    #[error("episode not found")]
    EpisodeNotFound,
    /// `add_part` on a closed episode.
    #[error("episode is closed")]
    EpisodeClosed,
    /// `add_part` would exceed the per-episode cap.
    #[error("episode is full ({max_bytes} bytes)")]
    EpisodeFull {
        /// The cap, in bytes.
        max_bytes: usize,
    },
}

struct EpisodeState {
    parts: PartLog,
    bytes: usize,
    /// Set by the first part the cap refused: every later part is refused
    /// too, so that the preview is a prefix of the answer, never one with
    /// holes.
    full: bool,
    closed_at: Option<Instant>,
    subscribers: usize,
    /// Signals "something changed" (a new part or the close) to followers.
    changed: watch::Sender<()>,
}

impl EpisodeState {
    fn new() -> Self {
        Self {
            parts: PartLog::default(),
            bytes: 0,
            full: false,
            closed_at: None,
            subscribers: 0,
            changed: watch::channel(()).0,
        }
    }
}

#[derive(Default)]
struct State {
    episodes: HashMap<Episode, EpisodeState>,
    /// Subscribers waiting for an episode that does not exist yet.
    pending: HashMap<Episode, watch::Sender<()>>,
}

struct Inner {
    state: Mutex<State>,
    config: PartBufferConfig,
}

/// The message part buffer; cheap to clone (one per replica). Dropping the
/// last clone does not stop the garbage collector: call
/// [`PartBuffer::shutdown`] or cancel the token given to
/// [`PartBuffer::with_config`].
#[derive(Clone)]
pub struct PartBuffer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PartBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartBuffer")
            .field("episodes", &self.lock().episodes.len())
            .finish()
    }
}

impl PartBuffer {
    /// A buffer with default tunables whose garbage collector runs until
    /// `cancel` is cancelled. Must be called inside a tokio runtime.
    pub fn new(cancel: CancellationToken) -> Self {
        Self::with_config(PartBufferConfig::default(), cancel)
    }

    /// A buffer with explicit tunables.
    pub fn with_config(config: PartBufferConfig, cancel: CancellationToken) -> Self {
        let buffer = Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                config,
            }),
        };
        let weak = Arc::downgrade(&buffer.inner);
        let interval = buffer.inner.config.gc_interval;
        tokio::spawn(async move {
            let mut tick = Ticker::new(interval);
            while tick.tick(&cancel).await {
                let Some(inner) = weak.upgrade() else { return };
                PartBuffer { inner }.collect_garbage();
            }
        });
        buffer
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind; keep going.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Creates an empty, open episode.
    ///
    /// # Errors
    /// [`PartBufferError::EpisodeExists`] when it was created (or closed)
    /// before.
    pub fn create_episode(&self, episode: Episode) -> Result<(), PartBufferError> {
        let mut state = self.lock();
        if state.episodes.contains_key(&episode) {
            return Err(PartBufferError::EpisodeExists);
        }
        state.episodes.insert(episode, EpisodeState::new());
        if let Some(waiters) = state.pending.remove(&episode) {
            let _ = waiters.send(());
        }
        Ok(())
    }

    /// Closes an episode: no part can be added afterwards and subscribers end
    /// after its last part. Idempotent; a missing episode is created closed.
    pub fn close_episode(&self, episode: Episode) {
        let mut state = self.lock();
        let created = !state.episodes.contains_key(&episode);
        let entry = state
            .episodes
            .entry(episode)
            .or_insert_with(EpisodeState::new);
        if entry.closed_at.is_none() {
            entry.closed_at = Some(Instant::now());
            let _ = entry.changed.send(());
        }
        if created && let Some(waiters) = state.pending.remove(&episode) {
            let _ = waiters.send(());
        }
    }

    /// Appends a part to an open episode and returns its `seq` (1-based).
    ///
    /// # Errors
    /// `EpisodeNotFound`, `EpisodeClosed`, or `EpisodeFull` when the part's
    /// JSON size would take the episode over the cap, and for every part
    /// after the first one refused so (the buffered parts stay a prefix of
    /// the stream, without holes). Callers treat every
    /// error as "drop the part" (storing parts is best-effort).
    pub fn add_part(
        &self,
        episode: Episode,
        role: ChatRole,
        part: PartDelta,
    ) -> Result<u64, PartBufferError> {
        let max = self.inner.config.max_episode_bytes;
        let mut state = self.lock();
        let entry = state
            .episodes
            .get_mut(&episode)
            .ok_or(PartBufferError::EpisodeNotFound)?;
        if entry.closed_at.is_some() {
            return Err(PartBufferError::EpisodeClosed);
        }
        let seq = entry.parts.len() as u64 + 1;
        let part = StreamPart { seq, role, part };
        let size = json_size(&part);
        if entry.full || entry.bytes.saturating_add(size) > max {
            entry.full = true;
            return Err(PartBufferError::EpisodeFull { max_bytes: max });
        }
        entry.bytes += size;
        entry.parts.push(part.role, part.part);
        let _ = entry.changed.send(());
        Ok(seq)
    }

    /// The parts of an episode so far, in `seq` order.
    ///
    /// # Errors
    /// `EpisodeNotFound`.
    pub fn get_parts(&self, episode: Episode) -> Result<Vec<StreamPart>, PartBufferError> {
        let state = self.lock();
        let entry = state
            .episodes
            .get(&episode)
            .ok_or(PartBufferError::EpisodeNotFound)?;
        let range = entry.parts.range(0);
        drop(state);
        Ok(range.into_parts())
    }

    /// Whether the episode exists and is closed.
    pub fn is_closed(&self, episode: Episode) -> bool {
        self.lock()
            .episodes
            .get(&episode)
            .is_some_and(|e| e.closed_at.is_some())
    }

    /// Number of episodes held (open and closed).
    pub fn episode_count(&self) -> usize {
        self.lock().episodes.len()
    }

    /// Subscribes to an episode's parts: buffered ones first, then new ones as
    /// they are added; the stream ends after the last part of a closed
    /// episode, when the subscriber is too slow, or when it is dropped. Waits
    /// for a missing episode to be created. Must be called inside a tokio
    /// runtime.
    pub fn subscribe(&self, episode: Episode) -> PartSubscription {
        let (tx, rx) = mpsc::channel(self.inner.config.subscriber_capacity.max(1));
        let buffer = self.clone();
        tokio::spawn(async move { buffer.deliver(episode, tx).await });
        PartSubscription { rx }
    }

    async fn deliver(self, episode: Episode, tx: mpsc::Sender<StreamPart>) {
        // Wait for the episode to exist.
        let mut changed = loop {
            let waiter = {
                let mut state = self.lock();
                if let Some(entry) = state.episodes.get_mut(&episode) {
                    entry.subscribers += 1;
                    break entry.changed.subscribe();
                }
                state
                    .pending
                    .entry(episode)
                    .or_insert_with(|| watch::channel(()).0)
                    .subscribe()
            };
            let mut waiter = waiter;
            tokio::select! {
                _ = tx.closed() => {
                    self.forget_pending(episode);
                    return;
                }
                res = waiter.changed() => {
                    if res.is_err() {
                        // The pending sender was replaced or dropped; look again.
                        continue;
                    }
                }
            }
        };
        let _guard = SubscriberGuard {
            buffer: &self,
            episode,
        };
        let mut unread = Unread::new(self.inner.config.slow_subscriber_timeout);
        let mut next = 0usize;
        loop {
            changed.borrow_and_update();
            let (batch, closed) = {
                let state = self.lock();
                let Some(entry) = state.episodes.get(&episode) else {
                    return;
                };
                (entry.parts.range(next), entry.closed_at.is_some())
            };
            for part in batch.into_parts() {
                // Room first: a part the receiver made room for just now is
                // delivered even when the deadline passed in the same
                // instant (as `send_timeout` polls the send before its timer).
                let permit = tokio::select! {
                    biased;
                    permit = tx.reserve() => match permit {
                        Ok(permit) => permit,
                        Err(_) => return,
                    },
                    _ = unread.expired(&tx) => {
                        tracing::debug!(?episode, "dropping a slow part subscriber");
                        return;
                    }
                };
                permit.send(part);
                unread.sent();
                next += 1;
            }
            if closed {
                // Everything up to the close has been delivered (the batch
                // was read after the close was visible).
                let done = {
                    let state = self.lock();
                    state
                        .episodes
                        .get(&episode)
                        .is_none_or(|e| next >= e.parts.len())
                };
                if done {
                    return;
                }
                continue;
            }
            tokio::select! {
                biased;
                _ = tx.closed() => return,
                res = changed.changed() => {
                    if res.is_err() {
                        return;
                    }
                }
                _ = unread.expired(&tx) => {
                    tracing::debug!(?episode, "dropping a slow part subscriber");
                    return;
                }
            }
        }
    }

    fn forget_pending(&self, episode: Episode) {
        let mut state = self.lock();
        if let Some(sender) = state.pending.get(&episode)
            && sender.receiver_count() <= 1
        {
            state.pending.remove(&episode);
        }
    }

    /// Removes closed episodes older than the retention period that have no
    /// subscribers. Runs on the garbage-collection timer; public for tests.
    pub fn collect_garbage(&self) {
        let retention = self.inner.config.closed_retention;
        let now = Instant::now();
        let mut state = self.lock();
        state.episodes.retain(|_, e| match e.closed_at {
            Some(at) => e.subscribers > 0 || now.duration_since(at) < retention,
            None => true,
        });
    }

    /// Stops nothing by itself; provided for symmetry with the cancellation
    /// token: drops every episode (used on shutdown).
    pub fn shutdown(&self) {
        let mut state = self.lock();
        state.episodes.clear();
        state.pending.clear();
    }
}

/// The JSON size of `part` in bytes, counted without building the JSON.
fn json_size(part: &StreamPart) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, part) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// The parts of one episode, stored compactly (issue 15, memory per
/// running chat): the text of text and reasoning deltas back to back in one
/// string, one small slot per part, and only the other parts (tool calls
/// and results) as [`PartDelta`] values. A streamed answer is mostly many
/// small text deltas; held as a `StreamPart` each, every one took two
/// allocations (about 130 bytes for a word of text). Parts are rebuilt, in
/// `seq` order and unchanged, when they are read.
#[derive(Default)]
struct PartLog {
    /// The text of every text and reasoning delta, in `seq` order.
    text: String,
    /// One per part, in `seq` order (part `seq` is `slots[seq - 1]`).
    slots: Vec<Slot>,
    /// The parts that are neither text nor reasoning, in `seq` order
    /// (shared with the snapshots readers take, [`PartRange`]).
    others: Vec<Arc<PartDelta>>,
}

/// Where one part of a [`PartLog`] is, and the role of its message.
#[derive(Clone, Copy)]
struct Slot {
    role: ChatRole,
    kind: SlotKind,
    /// Text and reasoning: where the delta starts in `PartLog::text`.
    /// Others: the index in `PartLog::others`.
    at: u32,
    /// Text and reasoning: where the delta ends in `PartLog::text`.
    end: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotKind {
    Text,
    Reasoning,
    Other,
}

impl PartLog {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn push(&mut self, role: ChatRole, part: PartDelta) {
        let slot = match part {
            PartDelta::Text { text } => self.push_text(role, SlotKind::Text, text),
            PartDelta::Reasoning { text } => self.push_text(role, SlotKind::Reasoning, text),
            part => Err(part),
        };
        let slot = slot.unwrap_or_else(|part| {
            self.others.push(Arc::new(part));
            Slot {
                role,
                kind: SlotKind::Other,
                at: u32::try_from(self.others.len() - 1).unwrap_or(u32::MAX),
                end: 0,
            }
        });
        self.slots.push(slot);
    }

    /// Appends a delta's text; gives the part back when its position would
    /// not fit a `u32` (only with an episode cap above 4 GiB), to be stored
    /// as it is.
    fn push_text(
        &mut self,
        role: ChatRole,
        kind: SlotKind,
        text: String,
    ) -> Result<Slot, PartDelta> {
        let (Ok(at), Ok(end)) = (
            u32::try_from(self.text.len()),
            u32::try_from(self.text.len() + text.len()),
        ) else {
            return Err(match kind {
                SlotKind::Reasoning => PartDelta::Reasoning { text },
                _ => PartDelta::Text { text },
            });
        };
        self.text.push_str(&text);
        Ok(Slot {
            role,
            kind,
            at,
            end,
        })
    }

    /// The parts from index `from` (0-based) on, as a [`PartRange`] to be
    /// turned into parts after the buffer's lock is released (one copy of
    /// their text under the lock, no allocation per part); empty when
    /// `from` is past the end.
    fn range(&self, from: usize) -> PartRange {
        let slots = self.slots[from.min(self.len())..].to_vec();
        let text_at = slots
            .iter()
            .find(|s| s.kind != SlotKind::Other)
            .map_or(self.text.len(), |s| s.at as usize);
        let others_at = slots
            .iter()
            .find(|s| s.kind == SlotKind::Other)
            .map_or(self.others.len(), |s| s.at as usize);
        PartRange {
            first_seq: from.min(self.len()) as u64 + 1,
            slots,
            text_at,
            text: self.text[text_at..].to_owned(),
            others_at,
            others: self.others[others_at..].to_vec(),
        }
    }
}

/// A copy of the tail of a [`PartLog`] from some part on (positions in
/// `text` and `others` are offset by `text_at` and `others_at`).
struct PartRange {
    first_seq: u64,
    slots: Vec<Slot>,
    text_at: usize,
    text: String,
    others_at: usize,
    others: Vec<Arc<PartDelta>>,
}

impl PartRange {
    /// The parts, in `seq` order, as they were added.
    fn into_parts(self) -> Vec<StreamPart> {
        let text = |slot: &Slot| {
            self.text[slot.at as usize - self.text_at..slot.end as usize - self.text_at].to_owned()
        };
        self.slots
            .iter()
            .zip(self.first_seq..)
            .map(|(slot, seq)| {
                let part = match slot.kind {
                    SlotKind::Text => PartDelta::Text { text: text(slot) },
                    SlotKind::Reasoning => PartDelta::Reasoning { text: text(slot) },
                    SlotKind::Other => (*self.others[slot.at as usize - self.others_at]).clone(),
                };
                StreamPart {
                    seq,
                    role: slot.role,
                    part,
                }
            })
            .collect()
    }
}

struct SubscriberGuard<'a> {
    buffer: &'a PartBuffer,
    episode: Episode,
}

impl Drop for SubscriberGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.buffer.lock();
        if let Some(entry) = state.episodes.get_mut(&self.episode) {
            entry.subscribers = entry.subscribers.saturating_sub(1);
        }
    }
}

/// When each part still in a subscriber's channel was handed to it, so that
/// a subscriber is dropped once a part has stayed unread for the timeout,
/// however much room its channel has left.
struct Unread {
    timeout: Duration,
    /// Hand-over times of the parts not yet known to be read, oldest first.
    sent_at: std::collections::VecDeque<Instant>,
}

impl Unread {
    fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            sent_at: std::collections::VecDeque::new(),
        }
    }

    /// Records a part handed to the channel now.
    fn sent(&mut self) {
        self.sent_at.push_back(Instant::now());
    }

    /// Forgets the parts the receiver has taken (the channel holds
    /// `max_capacity - capacity` parts; the older ones were read).
    fn settle(&mut self, tx: &mpsc::Sender<StreamPart>) {
        let in_channel = tx.max_capacity() - tx.capacity();
        while self.sent_at.len() > in_channel {
            self.sent_at.pop_front();
        }
    }

    /// Resolves when the oldest unread part has waited for the timeout;
    /// never while every part was read. Re-checks at each deadline, since a
    /// read does not wake the sender.
    async fn expired(&mut self, tx: &mpsc::Sender<StreamPart>) {
        loop {
            self.settle(tx);
            let Some(oldest) = self.sent_at.front().copied() else {
                // Nothing unread: only a new part (which the caller waits
                // for too) can start the clock again.
                return std::future::pending().await;
            };
            let deadline = oldest + self.timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// The read side the API streams from (`chatd_pubsub::LiveParts`), so that
/// it needs no dependency on this crate.
impl chatd_pubsub::LiveParts for PartBuffer {
    fn subscribe(&self, episode: Episode) -> chatd_pubsub::PartStream {
        let subscription = PartBuffer::subscribe(self, episode);
        Box::pin(futures::stream::unfold(
            subscription,
            |mut subscription| async move {
                let part = subscription.recv().await?;
                Some((part, subscription))
            },
        ))
    }

    fn progress(&self, episode: Episode) -> Option<chatd_pubsub::EpisodeProgress> {
        self.lock()
            .episodes
            .get(&episode)
            .map(|entry| chatd_pubsub::EpisodeProgress {
                parts: entry.parts.len() as u64,
                closed: entry.closed_at.is_some(),
            })
    }
}

/// A subscription's stream of parts; dropping it unsubscribes.
#[derive(Debug)]
pub struct PartSubscription {
    rx: mpsc::Receiver<StreamPart>,
}

impl PartSubscription {
    /// The next part, or `None` when the stream ended (episode closed and
    /// fully delivered, subscriber dropped as slow, or buffer shut down).
    pub async fn recv(&mut self) -> Option<StreamPart> {
        self.rx.recv().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(attempt: i64) -> Episode {
        Episode {
            chat_id: uuid::Uuid::from_u128(7),
            history_version: 3,
            generation_attempt: attempt,
        }
    }

    fn text(s: &str) -> PartDelta {
        PartDelta::Text { text: s.into() }
    }

    fn buffer(config: PartBufferConfig) -> PartBuffer {
        PartBuffer::with_config(config, CancellationToken::new())
    }

    /// The compact log gives back every kind of part as it was added, in
    /// order, with its role and `seq`, whole or from any point; and the cap
    /// counts the same JSON size as the part's serialisation.
    #[tokio::test]
    async fn parts_of_every_kind_come_back_unchanged_from_the_compact_log() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        let parts = [
            (
                ChatRole::Assistant,
                PartDelta::Reasoning { text: "hm".into() },
            ),
            (ChatRole::Assistant, text("")),
            (ChatRole::Assistant, text("héllo ")),
            (
                ChatRole::Assistant,
                PartDelta::ToolCall {
                    tool_call_id: "c1".into(),
                    tool_name: "t".into(),
                    args_delta: "{\"a\":".into(),
                },
            ),
            (ChatRole::Assistant, text("wörld")),
            (
                ChatRole::Tool,
                PartDelta::ToolResult {
                    tool_call_id: "c1".into(),
                    tool_name: "t".into(),
                    result: serde_json::json!({"ok": [1, 2]}),
                    is_error: true,
                },
            ),
            (
                ChatRole::Assistant,
                PartDelta::Reasoning { text: "☃".into() },
            ),
        ];
        let mut expected = Vec::new();
        let mut bytes = 0;
        for (i, (role, part)) in parts.into_iter().enumerate() {
            let seq = b.add_part(episode(1), role, part.clone()).unwrap();
            assert_eq!(seq, i as u64 + 1);
            let stored = StreamPart { seq, role, part };
            bytes += serde_json::to_vec(&stored).unwrap().len();
            expected.push(stored);
        }
        assert_eq!(b.get_parts(episode(1)).unwrap(), expected);
        {
            let state = b.lock();
            let entry = &state.episodes[&episode(1)];
            assert_eq!(entry.bytes, bytes);
            for from in 0..=expected.len() + 1 {
                let tail = &expected[from.min(expected.len())..];
                assert_eq!(entry.parts.range(from).into_parts(), tail);
            }
        }
        b.close_episode(episode(1));
        let mut sub = b.subscribe(episode(1));
        let mut got = Vec::new();
        while let Some(part) = sub.recv().await {
            got.push(part);
        }
        assert_eq!(got, expected);
    }

    #[tokio::test]
    async fn create_twice_fails_and_close_is_idempotent() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        assert_eq!(
            b.create_episode(episode(1)),
            Err(PartBufferError::EpisodeExists)
        );
        b.close_episode(episode(1));
        b.close_episode(episode(1));
        assert!(b.is_closed(episode(1)));
        assert_eq!(
            b.create_episode(episode(1)),
            Err(PartBufferError::EpisodeExists)
        );
    }

    #[tokio::test]
    async fn closing_a_missing_episode_creates_it_closed() {
        let b = buffer(PartBufferConfig::default());
        b.close_episode(episode(2));
        assert_eq!(b.get_parts(episode(2)), Ok(vec![]));
        assert_eq!(
            b.add_part(episode(2), ChatRole::Assistant, text("x")),
            Err(PartBufferError::EpisodeClosed)
        );
        assert_eq!(
            b.create_episode(episode(2)),
            Err(PartBufferError::EpisodeExists)
        );
    }

    #[tokio::test]
    async fn parts_get_contiguous_seq_from_one() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        for expected in 1..=5 {
            assert_eq!(
                b.add_part(episode(1), ChatRole::Assistant, text("a")),
                Ok(expected)
            );
        }
        let seqs: Vec<u64> = b
            .get_parts(episode(1))
            .unwrap()
            .iter()
            .map(|p| p.seq)
            .collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        assert_eq!(
            b.add_part(episode(9), ChatRole::Assistant, text("a")),
            Err(PartBufferError::EpisodeNotFound)
        );
        assert_eq!(
            b.get_parts(episode(9)),
            Err(PartBufferError::EpisodeNotFound)
        );
    }

    #[tokio::test]
    async fn an_episode_is_capped_by_serialised_size() {
        let b = buffer(PartBufferConfig {
            max_episode_bytes: 200,
            ..PartBufferConfig::default()
        });
        b.create_episode(episode(1)).unwrap();
        let chunk = "x".repeat(60);
        let mut accepted = 0;
        loop {
            match b.add_part(episode(1), ChatRole::Assistant, text(&chunk)) {
                Ok(_) => accepted += 1,
                Err(err) => {
                    assert_eq!(err, PartBufferError::EpisodeFull { max_bytes: 200 });
                    break;
                }
            }
        }
        // Each part serialises to about 110 bytes: one fits, two do not.
        assert_eq!(accepted, 1);
        // A smaller part that would fit is refused too: the buffered parts
        // stay a prefix of the stream (issue 14: a preview with holes).
        assert_eq!(
            b.add_part(episode(1), ChatRole::Assistant, text("y")),
            Err(PartBufferError::EpisodeFull { max_bytes: 200 })
        );
        assert_eq!(b.get_parts(episode(1)).unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_reads_nothing_is_dropped_after_the_timeout_with_room_in_its_channel()
    {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        let mut sub = b.subscribe(episode(1));
        for _ in 0..3 {
            b.add_part(episode(1), ChatRole::Assistant, text("p"))
                .unwrap();
        }
        // Three parts in a channel of 64, none read for 11 s.
        tokio::time::sleep(Duration::from_secs(11)).await;
        let mut got = Vec::new();
        while let Some(part) = tokio::time::timeout(Duration::from_secs(1), sub.recv())
            .await
            .expect("the stream ends: the subscriber was dropped")
        {
            got.push(part.seq);
        }
        assert_eq!(got, vec![1, 2, 3], "what was handed over is still readable");
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_reads_each_part_within_the_timeout_stays_with_room_in_its_channel() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        let mut sub = b.subscribe(episode(1));
        for i in 1..=4u64 {
            b.add_part(episode(1), ChatRole::Assistant, text("p"))
                .unwrap();
            tokio::time::sleep(Duration::from_secs(9)).await;
            assert_eq!(sub.recv().await.unwrap().seq, i);
        }
        b.close_episode(episode(1));
        assert_eq!(sub.recv().await, None);
    }

    #[tokio::test]
    async fn subscribe_replays_then_follows_and_ends_after_close() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        b.add_part(episode(1), ChatRole::Assistant, text("a"))
            .unwrap();
        let mut sub = b.subscribe(episode(1));
        assert_eq!(sub.recv().await.unwrap().seq, 1);
        b.add_part(episode(1), ChatRole::Assistant, text("b"))
            .unwrap();
        b.add_part(episode(1), ChatRole::Assistant, text("c"))
            .unwrap();
        b.close_episode(episode(1));
        let rest: Vec<u64> =
            [sub.recv().await.unwrap().seq, sub.recv().await.unwrap().seq].to_vec();
        assert_eq!(rest, vec![2, 3]);
        assert_eq!(sub.recv().await, None);
    }

    #[tokio::test]
    async fn subscribe_to_a_closed_episode_delivers_everything_then_ends() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        for s in ["a", "b", "c"] {
            b.add_part(episode(1), ChatRole::Assistant, text(s))
                .unwrap();
        }
        b.close_episode(episode(1));
        let mut sub = b.subscribe(episode(1));
        let mut seqs = vec![];
        while let Some(part) = sub.recv().await {
            seqs.push(part.seq);
        }
        assert_eq!(seqs, vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn subscribe_waits_for_an_episode_that_does_not_exist_yet() {
        let b = buffer(PartBufferConfig::default());
        let mut sub = b.subscribe(episode(4));
        let waiting = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await;
        assert!(waiting.is_err(), "nothing to deliver yet");
        b.create_episode(episode(4)).unwrap();
        b.add_part(episode(4), ChatRole::Assistant, text("late"))
            .unwrap();
        let part = tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((part.seq, part.part), (1, text("late")));
    }

    #[tokio::test]
    async fn subscribers_of_other_episodes_see_nothing() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        b.create_episode(episode(2)).unwrap();
        let mut sub = b.subscribe(episode(2));
        b.add_part(episode(1), ChatRole::Assistant, text("one"))
            .unwrap();
        b.add_part(episode(2), ChatRole::Assistant, text("two"))
            .unwrap();
        assert_eq!(sub.recv().await.unwrap().part, text("two"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_subscriber_is_dropped_after_the_timeout() {
        let b = buffer(PartBufferConfig {
            subscriber_capacity: 1,
            ..PartBufferConfig::default()
        });
        b.create_episode(episode(1)).unwrap();
        let mut sub = b.subscribe(episode(1));
        for _ in 0..3 {
            b.add_part(episode(1), ChatRole::Assistant, text("p"))
                .unwrap();
        }
        // Part 1 fills the channel; part 2 waits; after 10 s the subscriber
        // is dropped.
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(sub.recv().await.unwrap().seq, 1);
        assert_eq!(
            sub.recv().await,
            None,
            "the stream ends instead of skipping parts"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_keeps_up_is_not_dropped() {
        let b = buffer(PartBufferConfig {
            subscriber_capacity: 1,
            ..PartBufferConfig::default()
        });
        b.create_episode(episode(1)).unwrap();
        let mut sub = b.subscribe(episode(1));
        for i in 1..=3u64 {
            b.add_part(episode(1), ChatRole::Assistant, text("p"))
                .unwrap();
            tokio::time::sleep(Duration::from_secs(9)).await;
            assert_eq!(sub.recv().await.unwrap().seq, i);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn closed_episodes_are_collected_after_retention_without_subscribers() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        b.create_episode(episode(2)).unwrap();
        b.close_episode(episode(1));
        tokio::time::sleep(Duration::from_secs(14)).await;
        b.collect_garbage();
        assert_eq!(b.episode_count(), 2, "kept for at least 15 s");
        tokio::time::sleep(Duration::from_secs(2)).await;
        b.collect_garbage();
        assert_eq!(
            b.episode_count(),
            1,
            "the closed one is gone, the open one stays"
        );
        assert_eq!(
            b.get_parts(episode(1)),
            Err(PartBufferError::EpisodeNotFound)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_episode_with_a_subscriber_is_kept() {
        let b = buffer(PartBufferConfig {
            subscriber_capacity: 1,
            ..PartBufferConfig::default()
        });
        b.create_episode(episode(1)).unwrap();
        b.add_part(episode(1), ChatRole::Assistant, text("a"))
            .unwrap();
        b.add_part(episode(1), ChatRole::Assistant, text("b"))
            .unwrap();
        b.close_episode(episode(1));
        let mut sub = b.subscribe(episode(1));
        // The subscriber holds part 1 unread; the delivery task waits on part 2.
        tokio::time::sleep(Duration::from_secs(5)).await;
        tokio::time::advance(Duration::from_secs(12)).await;
        b.collect_garbage();
        assert_eq!(b.episode_count(), 1);
        assert_eq!(sub.recv().await.unwrap().seq, 1);
        assert_eq!(sub.recv().await.unwrap().seq, 2);
        assert_eq!(sub.recv().await, None);
        // The delivery task releases its subscription as it exits.
        for _ in 0..100 {
            b.collect_garbage();
            if b.episode_count() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(b.episode_count(), 0);
    }

    #[tokio::test]
    async fn many_concurrent_subscribers_each_get_every_part_in_order() {
        let b = buffer(PartBufferConfig::default());
        b.create_episode(episode(1)).unwrap();
        let subs: Vec<_> = (0..20).map(|_| b.subscribe(episode(1))).collect();
        let writer = {
            let b = b.clone();
            tokio::spawn(async move {
                for _ in 0..500 {
                    b.add_part(episode(1), ChatRole::Assistant, text("z"))
                        .unwrap();
                    tokio::task::yield_now().await;
                }
                b.close_episode(episode(1));
            })
        };
        let mut readers = Vec::new();
        for mut sub in subs {
            readers.push(tokio::spawn(async move {
                let mut expected = 1;
                while let Some(part) = sub.recv().await {
                    assert_eq!(part.seq, expected);
                    expected += 1;
                }
                expected - 1
            }));
        }
        writer.await.unwrap();
        for reader in readers {
            assert_eq!(reader.await.unwrap(), 500);
        }
    }
}
