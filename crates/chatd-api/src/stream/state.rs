//! The stream loop's local state and its two operations, as pure data
//! (`spec/chatd-architecture.md`, "Local stream state", "Stream loop
//! operations", "Sync operation" and its subsections, "Part operation").
//!
//! Nothing here does I/O: the driver ([`super::session`]) asks
//! [`StreamState::should_fetch`] whether hints warrant a database read,
//! [`StreamState::reads`] what to read in the one snapshot transaction of a
//! `Sync`, [`StreamState::needs_history_reset`] whether the changed messages
//! force a full refresh, and then hands the result to
//! [`StreamState::apply_sync`], which returns the client events in the
//! spec's order and the relay command. Relayed parts go through
//! [`StreamState::apply_part`].
//!
//! `after_id` (API.md "Stream"): messages with `id <= after_id` are already
//! known to the client. At the first message synchronisation they enter the
//! known-message map at their current revision without being sent, so a
//! later revision of one of them is still sent and nothing is sent twice.
//! A row with `id <= after_id` that was soft-deleted *after* the client's
//! view was taken forces a `history_reset`: the client's view is anchored at
//! the highest revision among the surviving rows it holds, and only
//! deletions newer than that anchor can be in its cache (every transition
//! that deletes also inserts a later message, so a client that saw anything
//! committed after a deletion saw the deletion's reset too).

use std::collections::BTreeMap;

use chatd_core::{ChatStatus, Episode};
use chatd_pubsub::ChatUpdate;
use chatd_store::{Chat, ChatMessage, QueuedMessage};
use uuid::Uuid;

use super::event::{
    ActionRequired, ChatStreamEvent, MessagePartPayload, PendingToolCall, StatusPayload,
    StreamPayload,
};
use crate::objects::{ChatContext, ChatQueuedMessage, client_visible};

/// Hints of a `Sync` (spec "How pubsub notifications trigger sync"). Every
/// field is optional; `worker_id` is tri-state: absent, present and null,
/// present with an id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncHints {
    /// `snapshot_version`.
    pub snapshot_version: Option<i64>,
    /// `history_version`.
    pub history_version: Option<i64>,
    /// `queue_version`.
    pub queue_version: Option<i64>,
    /// `retry_state_version`.
    pub retry_state_version: Option<i64>,
    /// `status`.
    pub status: Option<ChatStatus>,
    /// `worker_id` (tri-state).
    pub worker_id: Option<Option<Uuid>>,
    /// `generation_attempt`.
    pub generation_attempt: Option<i64>,
    /// The sync poller found no row for the chat: fetch unconditionally, so
    /// that the stream of a deleted chat ends ([`Termination::ChatDeleted`])
    /// on every replica, like a `GET` of it answers `404`.
    ///
    /// [`Termination::ChatDeleted`]: super::session::Termination::ChatDeleted
    pub gone: bool,
}

impl SyncHints {
    /// The hints of a chat whose row is gone (see [`SyncHints::gone`]).
    pub fn gone() -> Self {
        SyncHints {
            gone: true,
            ..SyncHints::default()
        }
    }
}

impl From<&ChatUpdate> for SyncHints {
    fn from(u: &ChatUpdate) -> Self {
        SyncHints {
            snapshot_version: Some(u.snapshot_version),
            history_version: Some(u.history_version),
            queue_version: Some(u.queue_version),
            retry_state_version: Some(u.retry_state_version),
            status: Some(u.status),
            worker_id: Some(u.worker_id),
            generation_attempt: Some(u.generation_attempt),
            gone: false,
        }
    }
}

/// The version columns of one chat, as the sync poller reads them (spec
/// "Sync poller" → "Polling"); the store's row.
pub use chatd_store::chats::ChatVersions;

impl From<&ChatVersions> for SyncHints {
    fn from(v: &ChatVersions) -> Self {
        SyncHints {
            snapshot_version: Some(v.snapshot_version),
            history_version: Some(v.history_version),
            queue_version: Some(v.queue_version),
            retry_state_version: Some(v.retry_state_version),
            status: Some(v.status),
            worker_id: Some(v.worker_id),
            generation_attempt: Some(v.generation_attempt),
            gone: false,
        }
    }
}

/// What one `Sync` must read besides the chat row, all in the same read
/// transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    /// Read `chat_messages` rows with `revision >` this (message
    /// synchronisation), if set.
    pub messages_since: Option<i64>,
    /// Read the whole queue (queue synchronisation).
    pub queue: bool,
    /// Read the pending tool calls (action-required synchronisation).
    pub pending_tool_calls: bool,
}

/// Messages read for message synchronisation.
#[derive(Debug, Clone)]
pub enum MessageRows {
    /// The rows with `revision > local.history_version`, none of which
    /// forces a full refresh.
    Changed(Vec<ChatMessage>),
    /// A full refresh: every current, non-deleted message in id order.
    Reset(Vec<ChatMessage>),
}

/// The result of one `Sync`'s database reads.
#[derive(Debug, Clone)]
pub struct DbState {
    /// The chat row.
    pub chat: Chat,
    /// Present when [`Reads::messages_since`] was set.
    pub messages: Option<MessageRows>,
    /// Present when [`Reads::queue`] was set.
    pub queue: Option<Vec<QueuedMessage>>,
    /// Present when [`Reads::pending_tool_calls`] was set.
    pub pending_tool_calls: Option<Vec<PendingToolCall>>,
}

/// What the relay forwarder should do after a `Sync` (spec "Relay
/// behavior").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayCommand {
    /// Leave the forwarder as it is.
    Keep,
    /// Forward parts of `episode` from worker `worker_id`; no worker means
    /// stop and close any parts connection.
    Follow {
        /// The owning worker (replica), if any.
        worker_id: Option<Uuid>,
        /// The episode to forward.
        episode: Episode,
    },
    /// Stop forwarding and close any parts connection.
    Stop,
}

/// What a `Sync` produced.
#[derive(Debug, Clone)]
pub struct SyncOutput {
    /// Client events, in the spec's order.
    pub events: Vec<ChatStreamEvent>,
    /// The relay command.
    pub relay: RelayCommand,
}

/// A part delivered by the relay forwarder (`Part(history_version,
/// generation_attempt, seq, content)`).
pub type RelayPart = MessagePartPayload;

/// Why a `Part` was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartRejection {
    /// The part belongs to another episode than the local one: dropped.
    StaleEpisode,
    /// `seq <= local.last_part_seq`: dropped.
    Duplicate,
    /// `seq > local.last_part_seq + 1`: an invariant violation (the parts
    /// endpoint guarantees contiguous delivery), which ends the stream.
    Gap {
        /// The seq that was expected.
        expected: u64,
        /// The seq that arrived.
        got: u64,
    },
}

/// The local stream state (spec "Local stream state").
#[derive(Debug, Clone)]
pub struct StreamState {
    chat_id: Uuid,
    snapshot_version: i64,
    history_version: i64,
    queue_version: i64,
    retry_state_version: i64,
    /// Message id → latest revision sent to the client.
    known: BTreeMap<i64, i64>,
    status: Option<ChatStatus>,
    error_history_version: i64,
    action_required_history_version: i64,
    worker_id: Option<Uuid>,
    generation_attempt: i64,
    last_part_seq: u64,
    /// Messages with `id <= after_id` are known to the client; consumed by
    /// the first message synchronisation.
    after_id: i64,
    /// No `Sync` was applied yet (the bootstrap is still to come).
    bootstrap: bool,
    /// `Chat.context` last sent.
    context: Option<ChatContext>,
}

impl StreamState {
    /// The null state of a stream of `chat_id` whose client already holds
    /// the messages with `id <= after_id` (0: none).
    pub fn new(chat_id: Uuid, after_id: i64) -> Self {
        Self {
            chat_id,
            snapshot_version: 0,
            history_version: 0,
            queue_version: 0,
            retry_state_version: 0,
            known: BTreeMap::new(),
            status: None,
            error_history_version: 0,
            action_required_history_version: 0,
            worker_id: None,
            generation_attempt: 0,
            last_part_seq: 0,
            after_id: after_id.max(0),
            bootstrap: true,
            context: None,
        }
    }

    /// The chat.
    pub fn chat_id(&self) -> Uuid {
        self.chat_id
    }

    /// Latest synchronised `snapshot_version`.
    pub fn snapshot_version(&self) -> i64 {
        self.snapshot_version
    }

    /// Latest synchronised `history_version`.
    pub fn history_version(&self) -> i64 {
        self.history_version
    }

    /// Latest synchronised `generation_attempt`.
    pub fn generation_attempt(&self) -> i64 {
        self.generation_attempt
    }

    /// Last accepted preview part `seq` of the current episode.
    pub fn last_part_seq(&self) -> u64 {
        self.last_part_seq
    }

    /// Latest status sent to the client.
    pub fn status(&self) -> Option<ChatStatus> {
        self.status
    }

    /// The known-message map: id → latest revision sent (or presumed known
    /// through `after_id`).
    pub fn known_messages(&self) -> &BTreeMap<i64, i64> {
        &self.known
    }

    /// Steps 1–3 of "Sync operation": whether `hints` say the local state
    /// may be stale. `None` (the bootstrap, or a pubsub reconnect that may
    /// have lost notifications) always fetches.
    pub fn should_fetch(&self, hints: Option<&SyncHints>) -> bool {
        let Some(h) = hints else { return true };
        if h.gone {
            return true;
        }
        if h.snapshot_version
            .is_some_and(|v| v <= self.snapshot_version)
        {
            return false;
        }
        h.history_version.is_some_and(|v| v > self.history_version)
            || h.queue_version.is_some_and(|v| v > self.queue_version)
            || h.retry_state_version
                .is_some_and(|v| v > self.retry_state_version)
            || h.status.is_some_and(|s| Some(s) != self.status)
            || h.worker_id.is_some_and(|w| w != self.worker_id)
            || h.generation_attempt
                .is_some_and(|g| g != self.generation_attempt)
    }

    /// Given the chat row read first in the `Sync`'s transaction, what else
    /// to read; `None` when the row is not newer than the local state (step
    /// 4: no-op).
    pub fn reads(&self, chat: &Chat) -> Option<Reads> {
        if chat.snapshot_version <= self.snapshot_version {
            return None;
        }
        Some(Reads {
            messages_since: (chat.history_version > self.history_version)
                .then_some(self.history_version),
            // API.md "Details": the bootstrap always sends `queue_update`.
            queue: self.bootstrap || chat.queue_version > self.queue_version,
            pending_tool_calls: chat.status == ChatStatus::RequiresAction
                && chat.history_version > self.action_required_history_version,
        })
    }

    /// Message synchronisation step 3: whether the changed rows force a full
    /// refresh (`history_reset` and a resend). Any soft-deleted row does,
    /// except at the first synchronisation with `after_id`, where only a
    /// deletion the client may hold does (see the module doc).
    pub fn needs_history_reset(&self, changed: &[ChatMessage]) -> bool {
        if self.history_version == 0 && self.after_id > 0 {
            let anchor = changed
                .iter()
                .filter(|m| !m.deleted && m.id <= self.after_id)
                .map(|m| m.revision)
                .max()
                .unwrap_or(0);
            changed
                .iter()
                .any(|m| m.deleted && m.id <= self.after_id && m.revision >= anchor)
        } else {
            changed.iter().any(|m| m.deleted)
        }
    }

    /// Applies a `Sync`'s database result ("Applying the database result",
    /// steps 1–9) and returns the client events in that order and the relay
    /// command. A result not newer than the local state is a no-op.
    pub fn apply_sync(&mut self, db: DbState) -> SyncOutput {
        let chat = &db.chat;
        let mut events = Vec::new();
        if chat.snapshot_version <= self.snapshot_version {
            return SyncOutput {
                events,
                relay: RelayCommand::Keep,
            };
        }
        let event = |payload| ChatStreamEvent::new(self.chat_id, payload);

        // 1. Message synchronisation.
        if chat.history_version > self.history_version
            && let Some(rows) = db.messages
        {
            match rows {
                MessageRows::Reset(current) => {
                    events.push(event(StreamPayload::HistoryReset));
                    self.known.clear();
                    for m in current.iter().filter(|m| client_visible(m)) {
                        self.known.insert(m.id, m.revision);
                        events.push(event(message_payload(m)));
                    }
                }
                MessageRows::Changed(mut rows) => {
                    rows.sort_by_key(|m| m.id);
                    if self.history_version == 0 {
                        for m in rows.iter().filter(|m| !m.deleted && m.id <= self.after_id) {
                            self.known.insert(m.id, m.revision);
                        }
                    }
                    for m in rows.iter().filter(|m| client_visible(m)) {
                        let sent = self.known.get(&m.id).copied().unwrap_or(0);
                        if m.revision > sent {
                            self.known.insert(m.id, m.revision);
                            events.push(event(message_payload(m)));
                        }
                    }
                }
            }
            self.after_id = 0;
        }

        // 1b. Context (API.md "Context management"): after message
        // synchronisation, on connect and whenever it changed.
        let context = ChatContext::from(chat);
        if self.context.as_ref() != Some(&context) {
            events.push(event(StreamPayload::Context {
                context: context.clone(),
            }));
            self.context = Some(context);
        }

        // 2. Queue synchronisation.
        if let Some(queue) = db.queue {
            events.push(event(StreamPayload::QueueUpdate {
                queued_messages: ChatQueuedMessage::list(&queue),
            }));
        }

        // 3. Status synchronisation.
        if Some(chat.status) != self.status {
            events.push(event(StreamPayload::Status {
                status: StatusPayload {
                    status: chat.status,
                    history_version: chat.history_version,
                },
            }));
            self.status = Some(chat.status);
        }

        // 4. Error synchronisation.
        if chat.status == ChatStatus::Error {
            if chat.history_version > self.error_history_version
                && let Some(error) = &chat.last_error
            {
                events.push(event(StreamPayload::Error {
                    error: error.clone(),
                }));
            }
            self.error_history_version = chat.history_version;
        }

        // 5. Action-required synchronisation.
        if chat.status == ChatStatus::RequiresAction {
            if chat.history_version > self.action_required_history_version {
                events.push(event(StreamPayload::ActionRequired {
                    action_required: ActionRequired {
                        tool_calls: db.pending_tool_calls.unwrap_or_default(),
                        deadline_at: chat.requires_action_deadline_at,
                    },
                }));
            }
            self.action_required_history_version = chat.history_version;
        }

        // 6. Retry-state synchronisation.
        if chat.retry_state_version > self.retry_state_version
            && let Some(retry) = &chat.retry_state
        {
            events.push(event(StreamPayload::Retry {
                retry: retry.clone(),
            }));
        }

        // 7. Preview reset.
        if chat.history_version != self.history_version
            || (chat.generation_attempt != self.generation_attempt && chat.generation_attempt != 0)
        {
            self.last_part_seq = 0;
            events.push(event(StreamPayload::PreviewReset));
        }

        // 8. Relay configuration. Beyond the spec's rule (configure when
        // `generation_attempt > 0`), a chat without a worker stops the relay
        // at once: no part of any episode can come, and the spec's relay
        // behaviour says a null worker stops and closes the forwarder.
        let relay = if chat.generation_attempt > 0 {
            RelayCommand::Follow {
                worker_id: chat.worker_id,
                episode: Episode {
                    chat_id: self.chat_id,
                    history_version: chat.history_version,
                    generation_attempt: chat.generation_attempt,
                },
            }
        } else if chat.worker_id.is_none() {
            RelayCommand::Stop
        } else {
            RelayCommand::Keep
        };

        // 9. Save the versions.
        self.snapshot_version = chat.snapshot_version;
        self.history_version = chat.history_version;
        self.queue_version = chat.queue_version;
        self.retry_state_version = chat.retry_state_version;
        self.worker_id = chat.worker_id;
        self.generation_attempt = chat.generation_attempt;
        self.bootstrap = false;
        SyncOutput { events, relay }
    }

    /// The `Part` operation: accepts `part` only when it belongs to the
    /// local episode and its `seq` is exactly the next one, and returns the
    /// `message_part` event to emit.
    ///
    /// # Errors
    /// [`PartRejection::StaleEpisode`] and [`PartRejection::Duplicate`] (the
    /// caller drops the part silently), [`PartRejection::Gap`] (an invariant
    /// violation: the caller ends the stream).
    pub fn apply_part(&mut self, part: RelayPart) -> Result<ChatStreamEvent, PartRejection> {
        if part.history_version != self.history_version
            || part.generation_attempt != self.generation_attempt
        {
            return Err(PartRejection::StaleEpisode);
        }
        if part.seq <= self.last_part_seq {
            return Err(PartRejection::Duplicate);
        }
        let expected = self.last_part_seq + 1;
        if part.seq != expected {
            return Err(PartRejection::Gap {
                expected,
                got: part.seq,
            });
        }
        self.last_part_seq = part.seq;
        Ok(ChatStreamEvent::new(
            self.chat_id,
            StreamPayload::MessagePart { message_part: part },
        ))
    }
}

fn message_payload(m: &ChatMessage) -> StreamPayload {
    StreamPayload::Message {
        message: Box::new(m.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatd_core::{ChatRole, MessagePart, PartDelta, Visibility};
    use chrono::Utc;
    use sqlx::types::Json;

    const CHAT: Uuid = Uuid::from_u128(42);
    const WORKER_A: Uuid = Uuid::from_u128(0xA);
    const WORKER_B: Uuid = Uuid::from_u128(0xB);

    fn chat(snapshot: i64, history: i64) -> Chat {
        Chat {
            id: CHAT,
            owner_id: Uuid::from_u128(1),
            parent_chat_id: None,
            root_chat_id: None,
            status: ChatStatus::Running,
            archived: false,
            worker_id: None,
            runner_id: None,
            last_error: None,
            retry_state: None,
            snapshot_version: snapshot,
            history_version: history,
            queue_version: 0,
            generation_attempt: 0,
            retry_state_version: 0,
            requires_action_deadline_at: None,
            title: "t".into(),
            labels: Default::default(),
            pin_order: 0,
            last_model_config_id: None,
            last_reasoning_effort: None,
            dynamic_tools: Vec::new(),
            mcp_server_ids: vec![],
            plan_mode: None,
            compaction_requested_at: None,
            message_count: 0,
            last_message_preview: None,
            context_tokens: None,
            context_estimated: true,
            context_limit: None,
            compactions: 0,
            compacted_through_message_id: None,
            subagents: false,
            depth: 0,
            spawn_key: None,
            workspace: false,
            workspace_bytes: None,
            workspace_files: None,
            workspace_updated_at: None,
            active_leaf_id: None,
            forked_from_chat_id: None,
            forked_from_message_id: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    fn msg(id: i64, revision: i64) -> ChatMessage {
        ChatMessage {
            id,
            chat_id: CHAT,
            role: ChatRole::User,
            content: Json(vec![MessagePart::text(format!("m{id}"))]),
            visibility: Visibility::Both,
            compressed: false,
            deleted: false,
            parent_id: None,
            visible_parent_id: None,
            sibling_ids: vec![],
            revision,
            created_by: None,
            model_config_id: None,
            reasoning_effort: None,
            input_tokens: None,
            output_tokens: None,
            reasoning_tokens: None,
            cache_read_tokens: None,
            cache_creation_tokens: None,
            total_tokens: None,
            context_limit: None,
            total_cost_micros: None,
            runtime_ms: None,
            finish_reason: None,
            provider_response_id: None,
            queued_message_id: None,
            client_message_id: None,
            compacted_through_id: None,
            token_estimate: None,
            created_at: Utc::now(),
        }
    }

    fn deleted(id: i64, revision: i64) -> ChatMessage {
        ChatMessage {
            deleted: true,
            ..msg(id, revision)
        }
    }

    fn db(chat: Chat) -> DbState {
        DbState {
            chat,
            messages: None,
            queue: None,
            pending_tool_calls: None,
        }
    }

    /// Runs one Sync the way the driver does, with `rows` as the whole table.
    fn sync(state: &mut StreamState, chat: Chat, rows: &[ChatMessage]) -> SyncOutput {
        let Some(reads) = state.reads(&chat) else {
            return state.apply_sync(db(chat));
        };
        let messages = reads.messages_since.map(|since| {
            let changed: Vec<ChatMessage> = rows
                .iter()
                .filter(|m| m.revision > since)
                .cloned()
                .collect();
            if state.needs_history_reset(&changed) {
                MessageRows::Reset(rows.iter().filter(|m| !m.deleted).cloned().collect())
            } else {
                MessageRows::Changed(changed)
            }
        });
        state.apply_sync(DbState {
            messages,
            queue: reads.queue.then(Vec::new),
            pending_tool_calls: reads.pending_tool_calls.then(|| {
                vec![PendingToolCall {
                    tool_call_id: "call-1".into(),
                    tool_name: "pick".into(),
                    args: "{}".into(),
                    kind: chatd_core::ActionKind::ClientTool,
                }]
            }),
            chat,
        })
    }

    fn kinds(out: &SyncOutput) -> Vec<String> {
        out.events
            .iter()
            .map(|e| match &e.payload {
                StreamPayload::Message { message } => format!("message:{}", message.id),
                StreamPayload::Status { status } => {
                    format!("status:{}", serde_json::to_value(status.status).unwrap())
                        .replace('"', "")
                }
                other => other.kind().to_owned(),
            })
            .collect()
    }

    fn part(history: i64, attempt: i64, seq: u64) -> RelayPart {
        MessagePartPayload {
            role: ChatRole::Assistant,
            part: PartDelta::Text { text: "x".into() },
            history_version: history,
            generation_attempt: attempt,
            seq,
        }
    }

    #[test]
    fn bootstrap_emits_the_full_state_in_the_spec_order() {
        let mut s = StreamState::new(CHAT, 0);
        let out = sync(&mut s, chat(1, 1), &[msg(1, 1), msg(2, 1)]);
        assert_eq!(
            kinds(&out),
            [
                "message:1",
                "message:2",
                "context",
                "queue_update",
                "status:running",
                "preview_reset"
            ]
        );
        assert_eq!(out.relay, RelayCommand::Stop, "no worker, no attempt");
        assert_eq!(s.snapshot_version(), 1);
    }

    #[test]
    fn hints_fetch_only_when_something_may_be_stale() {
        let mut s = StreamState::new(CHAT, 0);
        assert!(s.should_fetch(None));
        sync(&mut s, chat(3, 2), &[msg(1, 2)]);
        let same = SyncHints {
            snapshot_version: Some(4),
            history_version: Some(2),
            queue_version: Some(0),
            retry_state_version: Some(0),
            status: Some(ChatStatus::Running),
            worker_id: Some(None),
            generation_attempt: Some(0),
            gone: false,
        };
        assert!(!s.should_fetch(Some(&same)), "nothing differs");
        assert!(
            s.should_fetch(Some(&SyncHints::gone())),
            "a chat the poller found gone is fetched"
        );
        let stale = SyncHints {
            snapshot_version: Some(3),
            history_version: Some(9),
            ..same.clone()
        };
        assert!(!s.should_fetch(Some(&stale)), "old snapshot");
        for newer in [
            SyncHints {
                history_version: Some(4),
                ..same.clone()
            },
            SyncHints {
                queue_version: Some(4),
                ..same.clone()
            },
            SyncHints {
                retry_state_version: Some(4),
                ..same.clone()
            },
            SyncHints {
                status: Some(ChatStatus::Waiting),
                ..same.clone()
            },
            SyncHints {
                worker_id: Some(Some(WORKER_A)),
                ..same.clone()
            },
            SyncHints {
                generation_attempt: Some(1),
                ..same.clone()
            },
        ] {
            assert!(s.should_fetch(Some(&newer)), "{newer:?}");
        }
        // Absent fields are ignored; an absent worker never compares.
        assert!(!s.should_fetch(Some(&SyncHints {
            snapshot_version: Some(9),
            ..SyncHints::default()
        })));
        // A fetch that finds an old row is a no-op.
        let out = sync(&mut s, chat(3, 2), &[msg(1, 2)]);
        assert!(out.events.is_empty());
        assert_eq!(out.relay, RelayCommand::Keep);
    }

    #[test]
    fn new_and_revised_messages_are_sent_once() {
        let mut s = StreamState::new(CHAT, 0);
        sync(&mut s, chat(1, 1), &[msg(1, 1)]);
        let rows = [msg(1, 1), msg(2, 2), msg(3, 2)];
        let out = sync(&mut s, chat(2, 2), &rows);
        assert_eq!(kinds(&out), ["message:2", "message:3", "preview_reset"]);
        // Model-only rows never reach the client.
        let mut hidden = msg(4, 3);
        hidden.visibility = Visibility::Model;
        let rows = [msg(1, 1), msg(2, 2), msg(3, 2), hidden, msg(5, 3)];
        let out = sync(&mut s, chat(3, 3), &rows);
        assert_eq!(kinds(&out), ["message:5", "preview_reset"]);
        assert_eq!(
            s.known_messages().keys().copied().collect::<Vec<_>>(),
            [1, 2, 3, 5]
        );
    }

    #[test]
    fn a_branch_switch_missed_while_disconnected_resets_the_reconnecting_client() {
        // The client held rows 1..=6 (revision 4) and missed a switch at
        // revision 9 that removed 5 and 6 and brought back 3's sibling 4.
        let state = StreamState::new(CHAT, 6);
        let changed = [
            msg(1, 4),
            msg(2, 4),
            msg(4, 9),
            deleted(5, 9),
            deleted(6, 9),
        ];
        assert!(state.needs_history_reset(&changed));
        // A client that saw the switch holds 4 at revision 9 too: an extra
        // reset, harmless; and none without a deletion at all.
        let state = StreamState::new(CHAT, 6);
        assert!(!state.needs_history_reset(&[msg(1, 4), msg(4, 9)]));
        // A deletion older than every row the client holds was seen.
        assert!(!state.needs_history_reset(&[msg(1, 8), deleted(2, 7)]));
    }

    #[test]
    fn a_soft_deleted_row_resets_history_and_resends_the_current_messages() {
        let mut s = StreamState::new(CHAT, 0);
        sync(&mut s, chat(2, 2), &[msg(1, 1), msg(2, 2), msg(3, 2)]);
        // Edit of message 2: 2 and 3 deleted, replacement 4 inserted.
        let rows = [msg(1, 1), deleted(2, 5), deleted(3, 5), msg(4, 5)];
        let mut c = chat(5, 5);
        c.queue_version = 5;
        let out = sync(&mut s, c, &rows);
        assert_eq!(
            kinds(&out),
            [
                "history_reset",
                "message:1",
                "message:4",
                "queue_update",
                "preview_reset"
            ]
        );
        assert_eq!(
            s.known_messages().keys().copied().collect::<Vec<_>>(),
            [1, 4]
        );
    }

    #[test]
    fn after_id_skips_known_messages_without_duplicates_or_gaps() {
        let rows = [msg(1, 1), msg(2, 2), msg(3, 3), msg(4, 4)];
        let mut s = StreamState::new(CHAT, 2);
        let out = sync(&mut s, chat(4, 4), &rows);
        assert_eq!(
            kinds(&out),
            [
                "message:3",
                "message:4",
                "context",
                "queue_update",
                "status:running",
                "preview_reset"
            ]
        );
        assert_eq!(
            s.known_messages().keys().copied().collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        // A deletion older than what the client holds needs no reset...
        let rows = [msg(1, 1), deleted(2, 3), msg(3, 3), msg(4, 4)];
        let mut s = StreamState::new(CHAT, 4);
        let out = sync(&mut s, chat(4, 4), &rows);
        assert_eq!(
            kinds(&out),
            ["context", "queue_update", "status:running", "preview_reset"]
        );
        // ...one newer than the client's view does.
        let rows = [msg(1, 1), deleted(2, 6), deleted(3, 6), msg(5, 6)];
        let mut s = StreamState::new(CHAT, 3);
        let out = sync(&mut s, chat(6, 6), &rows);
        assert_eq!(
            kinds(&out),
            [
                "history_reset",
                "message:1",
                "message:5",
                "context",
                "queue_update",
                "status:running",
                "preview_reset"
            ]
        );
    }

    #[test]
    fn context_is_sent_on_connect_and_only_when_it_changes() {
        let mut s = StreamState::new(CHAT, 0);
        let out = sync(&mut s, chat(1, 1), &[msg(1, 1)]);
        assert!(kinds(&out).contains(&"context".to_owned()));
        let out = sync(&mut s, chat(2, 1), &[]);
        assert!(!kinds(&out).contains(&"context".to_owned()), "unchanged");
        let mut c = chat(3, 3);
        c.context_tokens = Some(1200);
        c.context_limit = Some(8192);
        let out = sync(&mut s, c, &[msg(2, 3)]);
        let k = kinds(&out);
        assert_eq!(&k[..2], ["message:2", "context"], "after the messages");
        let context = out
            .events
            .iter()
            .find_map(|e| match &e.payload {
                StreamPayload::Context { context } => Some(context.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            (context.tokens, context.limit, context.percent),
            (1200, 8192, 14)
        );
    }

    #[test]
    fn error_action_required_and_retry_are_sent_once_per_history_version() {
        let mut s = StreamState::new(CHAT, 0);
        sync(&mut s, chat(1, 1), &[msg(1, 1)]);
        let mut c = chat(2, 1);
        c.generation_attempt = 1;
        c.worker_id = Some(WORKER_A);
        c.retry_state = Some(chatd_core::RetryState {
            attempt: 1,
            delay_ms: 1000,
            error: chatd_core::ChatError::new(
                chatd_core::ChatErrorKind::RateLimit,
                "slow down",
                true,
            ),
            retrying_at: Utc::now(),
        });
        c.retry_state_version = 2;
        let out = sync(&mut s, c.clone(), &[msg(1, 1)]);
        assert_eq!(kinds(&out), ["retry", "preview_reset"]);
        assert!(
            matches!(out.relay, RelayCommand::Follow { worker_id: Some(w), episode } if w == WORKER_A && episode.generation_attempt == 1)
        );
        // The attempt changes: the trigger cleared the retry state (nothing
        // to send) and the preview resets.
        c.snapshot_version = 3;
        c.generation_attempt = 2;
        c.retry_state = None;
        c.retry_state_version = 3;
        let out = sync(&mut s, c.clone(), &[msg(1, 1)]);
        assert_eq!(kinds(&out), ["preview_reset"]);
        // Error.
        c.snapshot_version = 4;
        c.status = ChatStatus::Error;
        c.worker_id = None;
        c.last_error = Some(chatd_core::ChatError::new(
            chatd_core::ChatErrorKind::Generic,
            "boom",
            false,
        ));
        let out = sync(&mut s, c.clone(), &[msg(1, 1)]);
        assert_eq!(kinds(&out), ["status:error", "error"]);
        // The same error is not re-sent on an unrelated change.
        c.snapshot_version = 5;
        c.queue_version = 5;
        let out = sync(&mut s, c.clone(), &[msg(1, 1)]);
        assert_eq!(kinds(&out), ["queue_update"]);
        // Requires action.
        c.snapshot_version = 6;
        c.history_version = 6;
        c.status = ChatStatus::RequiresAction;
        c.generation_attempt = 0;
        let rows = [msg(1, 1), msg(2, 6)];
        let out = sync(&mut s, c.clone(), &rows);
        assert_eq!(
            kinds(&out),
            [
                "message:2",
                "status:requires_action",
                "action_required",
                "preview_reset"
            ]
        );
        c.snapshot_version = 7;
        c.queue_version = 7;
        let out = sync(&mut s, c, &rows);
        assert_eq!(
            kinds(&out),
            ["queue_update"],
            "action_required once per history version"
        );
    }

    #[test]
    fn the_relay_follows_the_episode_and_stops_without_a_worker() {
        let mut s = StreamState::new(CHAT, 0);
        let mut c = chat(2, 1);
        c.worker_id = Some(WORKER_A);
        let out = sync(&mut s, c.clone(), &[msg(1, 1)]);
        assert_eq!(
            out.relay,
            RelayCommand::Keep,
            "attempt 0: nothing to follow yet"
        );
        c.snapshot_version = 3;
        c.generation_attempt = 1;
        let out = sync(&mut s, c.clone(), &[msg(1, 1)]);
        assert_eq!(
            out.relay,
            RelayCommand::Follow {
                worker_id: Some(WORKER_A),
                episode: Episode {
                    chat_id: CHAT,
                    history_version: 1,
                    generation_attempt: 1
                }
            }
        );
        // Ownership moves: same episode, new worker, no preview reset yet.
        c.snapshot_version = 4;
        c.worker_id = Some(WORKER_B);
        let out = sync(&mut s, c.clone(), &[msg(1, 1)]);
        assert!(kinds(&out).is_empty());
        assert!(
            matches!(out.relay, RelayCommand::Follow { worker_id: Some(w), .. } if w == WORKER_B)
        );
        c.snapshot_version = 5;
        c.worker_id = None;
        c.generation_attempt = 0;
        c.history_version = 5;
        c.status = ChatStatus::Waiting;
        let out = sync(&mut s, c, &[msg(1, 1), msg(2, 5)]);
        assert_eq!(out.relay, RelayCommand::Stop);
    }

    #[test]
    fn parts_must_match_the_episode_and_be_contiguous() {
        let mut s = StreamState::new(CHAT, 0);
        let mut c = chat(2, 1);
        c.generation_attempt = 1;
        c.worker_id = Some(WORKER_A);
        sync(&mut s, c.clone(), &[msg(1, 1)]);
        assert!(s.apply_part(part(1, 1, 1)).is_ok());
        assert!(s.apply_part(part(1, 1, 2)).is_ok());
        assert_eq!(
            s.apply_part(part(1, 1, 2)).unwrap_err(),
            PartRejection::Duplicate
        );
        assert_eq!(
            s.apply_part(part(1, 1, 1)).unwrap_err(),
            PartRejection::Duplicate
        );
        assert_eq!(
            s.apply_part(part(1, 2, 3)).unwrap_err(),
            PartRejection::StaleEpisode
        );
        assert_eq!(
            s.apply_part(part(0, 1, 3)).unwrap_err(),
            PartRejection::StaleEpisode
        );
        assert_eq!(
            s.apply_part(part(1, 1, 5)).unwrap_err(),
            PartRejection::Gap {
                expected: 3,
                got: 5
            }
        );
        assert_eq!(s.last_part_seq(), 2);
        // A new attempt resets the preview: seq starts over.
        c.snapshot_version = 3;
        c.generation_attempt = 2;
        let out = sync(&mut s, c, &[msg(1, 1)]);
        assert_eq!(kinds(&out), ["preview_reset"]);
        assert_eq!(
            s.apply_part(part(1, 1, 3)).unwrap_err(),
            PartRejection::StaleEpisode
        );
        let ev = s.apply_part(part(1, 2, 1)).unwrap();
        assert_eq!(ev.kind(), "message_part");
    }
}
