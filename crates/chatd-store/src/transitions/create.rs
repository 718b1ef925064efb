//! `CreateChat` (spec chatstate `CreateChat`; spec "Transitions": `N → R0`
//! or `N → W`): a new chat with its initial history, on its own
//! ([`Store::create_chat`]) or as a child inside a bundle of its parent
//! ([`ChatTx::create_child`], the `spawn_agent` tool).

use chatd_core::{ChatStatus, ExecutionState, StateError, Transition, matrix};
use chatd_pubsub::PublishBuffer;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::bundle::publish::{commit_and_flush, enqueue_publications};
use crate::bundle::{ChatTx, record_transition};
use crate::error::StoreResult;
use crate::models::{Chat, ChatFacts, ChatMessage, CreateChatInput};
use crate::queries;
use crate::store::{Store, StoreConfig};

/// Result of [`Store::create_chat`].
///
/// Example: [`Store::create_chat`].
#[derive(Debug, Clone)]
pub struct CreateChatResult {
    /// The new row.
    pub chat: Chat,
    /// The inserted initial history, in id order.
    pub initial_messages: Vec<ChatMessage>,
}

impl Store {
    /// Creates a chat with its initial history in one transaction
    /// (`N → R0`, or `N → W` when `initial_status` is `Waiting`): the row
    /// starts at `snapshot_version = 1` and the inserted history makes
    /// `history_version = 1`. Publishes `chat:update` and, for a running
    /// chat, `chat:ownership` after the commit.
    ///
    /// # Errors
    /// `InvalidInput` for an empty history, a status other than running or
    /// waiting, or an archived parent (or family root; checked under the
    /// family's share locks, so a concurrent archive either sees the child
    /// or refuses it); `ChatNotFound` when `parent_chat_id` does not exist; database
    /// errors (an existing `id` is a unique violation).
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{ChatRole, ChatStatus, MessagePart};
    /// use chatd_store::{CreateChatInput, NewMessage};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// let input = CreateChatInput {
    ///     owner_id: owner,
    ///     title: Some("Plans".into()),
    ///     initial_messages: vec![
    ///         NewMessage::system("Be brief."),
    ///         NewMessage::user(vec![MessagePart::text("hi")]).created_by(owner),
    ///     ],
    ///     ..Default::default()
    /// };
    /// let created = store.create_chat(input).await?;
    /// assert_eq!(created.chat.status, ChatStatus::Running);
    /// assert_eq!((created.chat.snapshot_version, created.chat.history_version), (1, 1));
    /// let roles: Vec<ChatRole> = created.initial_messages.iter().map(|m| m.role).collect();
    /// assert_eq!(roles, [ChatRole::System, ChatRole::User]);
    /// // Nothing to say: rejected, nothing created.
    /// let empty = CreateChatInput { owner_id: owner, ..Default::default() };
    /// assert!(store.create_chat(empty).await.unwrap_err().state().is_some());
    /// # Ok(()) }
    /// ```
    pub async fn create_chat(&self, input: CreateChatInput) -> StoreResult<CreateChatResult> {
        let status = input.initial_status.unwrap_or(ChatStatus::Running);
        if !matches!(status, ChatStatus::Running | ChatStatus::Waiting) {
            return Err(StateError::InvalidInput {
                field: "initial_status",
                detail: "must be running or waiting".into(),
            }
            .into());
        }
        if input.initial_messages.is_empty() && status == ChatStatus::Running {
            return Err(StateError::InvalidInput {
                field: "initial_messages",
                detail: "must not be empty".into(),
            }
            .into());
        }
        let mut tx = crate::queries::begin(&self.pool).await?;
        let buffer = PublishBuffer::new(self.publisher.clone());
        let (created, log, row) = create_in(&mut tx, &input, status, &buffer, &self.config).await?;
        commit_and_flush(tx, buffer).await?;
        self.row_cache.put(row);
        // The new chat's first bundle starts from its entries and tail.
        if let Some((entries, outstanding)) = log.to_cache() {
            self.context_cache.put_log(
                created.chat.id,
                created.chat.history_version,
                entries,
                outstanding,
            );
        }
        record_transition(Transition::CreateChat, "ok");
        Ok(created)
    }
}

impl ChatTx {
    /// `Create` of a child of this bundle's chat in the same transaction
    /// (the `spawn_agent` tool, API.md "Sub-agents and plan mode": the child
    /// exists exactly when the step that stores the tool result commits).
    /// `input.parent_chat_id` is set to this chat; with a
    /// `input.spawn_key` the child that an earlier commit of the same key
    /// created is returned instead (`Ok((id, false))`), so a retried step
    /// never creates two children. Returns the child's id and whether it
    /// was created now. The child's `chat:update` (and `chat:ownership`, a
    /// running child being runnable) are published after the commit.
    ///
    /// # Errors
    /// As [`Store::create_chat`]: `InvalidInput` (`parent_chat_id`) when
    /// this chat is archived or at [`crate::MAX_CHAT_DEPTH`]; database
    /// errors.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::MessagePart;
    /// use chatd_store::{CreateChatInput, NewMessage, chats};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let parent = fx.create_chat("hi").await?.chat;
    /// let input = CreateChatInput {
    ///     owner_id: owner,
    ///     spawn_key: Some("1:1:call_1".into()),
    ///     initial_messages: vec![NewMessage::user(vec![MessagePart::text("sub-task")])],
    ///     ..Default::default()
    /// };
    /// let mut tx = store.machine(parent.id).begin().await?;
    /// let (child, created) = tx.create_child(input.clone()).await?;
    /// assert!(created);
    /// tx.commit().await?;
    /// // The same key again: the same child, nothing new.
    /// let mut tx = store.machine(parent.id).begin().await?;
    /// assert_eq!(tx.create_child(input).await?, (child, false));
    /// tx.commit().await?;
    /// let row = chats::select(pool, child, Default::default()).await?.unwrap();
    /// assert_eq!((row.parent_chat_id, row.depth), (Some(parent.id), 1));
    /// # Ok(()) }
    /// ```
    pub async fn create_child(&mut self, mut input: CreateChatInput) -> StoreResult<(Uuid, bool)> {
        self.confirm().await?;
        input.parent_chat_id = Some(self.chat_id);
        if let Some(key) = &input.spawn_key
            && let Some(existing) =
                queries::chats::child_by_spawn_key(&mut *self.tx, self.chat_id, key).await?
        {
            return Ok((existing, false));
        }
        let status = input.initial_status.unwrap_or(ChatStatus::Running);
        let buffer = PublishBuffer::new(self.store.publisher.clone());
        let (created, _, _) =
            create_in(&mut self.tx, &input, status, &buffer, &self.store.config).await?;
        self.created.extend(buffer.pending());
        buffer.discard();
        Ok((created.chat.id, true))
    }
}

/// `Create` inside the open transaction `conn`: places the chat in its
/// parent's family (depth at most [`crate::MAX_CHAT_DEPTH`]), inserts the
/// row and its initial history, links files, and buffers the publications
/// of the new row in `buffer` (flushed by the caller after its commit).
async fn create_in(
    conn: &mut PgConnection,
    input: &CreateChatInput,
    status: ChatStatus,
    buffer: &PublishBuffer,
    config: &StoreConfig,
) -> StoreResult<(
    CreateChatResult,
    crate::context_cache::HistoryLog,
    ChatFacts,
)> {
    let id = input.id.unwrap_or_else(Uuid::new_v4);
    let (root_chat_id, depth) = match input.parent_chat_id {
        None => (None, 0),
        Some(parent) => {
            let placement = queries::chats::lock_family_for_child(&mut *conn, parent)
                .await?
                .ok_or(StateError::ChatNotFound)?;
            if placement.archived {
                return Err(StateError::InvalidInput {
                    field: "parent_chat_id",
                    detail: "the parent chat is archived".into(),
                }
                .into());
            }
            if placement.parent_depth >= crate::MAX_CHAT_DEPTH {
                return Err(StateError::InvalidInput {
                    field: "parent_chat_id",
                    detail: format!(
                        "the parent chat is at depth {}: no chat may be deeper than {}",
                        placement.parent_depth,
                        crate::MAX_CHAT_DEPTH
                    ),
                }
                .into());
            }
            (Some(placement.root_chat_id), placement.parent_depth + 1)
        }
    };
    queries::chats::insert(&mut *conn, id, root_chat_id, depth, status, input).await?;
    let mut messages = input.initial_messages.clone();
    let file_ids: Vec<Uuid> = messages
        .iter()
        .flat_map(|m| queries::files::file_ids(&m.content))
        .collect();
    if !file_ids.is_empty() {
        let max = match input.max_file_links {
            0 => queries::files::DEFAULT_MAX_FILE_LINKS,
            max => max,
        };
        let rows = queries::files::link(&mut *conn, id, input.owner_id, &file_ids, max).await?;
        for message in &mut messages {
            queries::files::describe(&mut message.content, &rows);
        }
    }
    // The context entries follow the inserts (a summary among the initial
    // messages makes the log read them instead).
    let mut log = crate::context_cache::HistoryLog::new_chat();
    let mut initial_messages = Vec::with_capacity(messages.len());
    for message in &messages {
        let row = queries::messages::insert(&mut *conn, id, message, None).await?;
        log.appended(&row);
        initial_messages.push(row);
    }
    let facts = match log.entries() {
        // Only ordinary rows: no summary to count, and the context and the
        // facts in one statement.
        Some(entries) => queries::messages::refresh_context_facts(&mut *conn, id, &entries).await?,
        None => {
            let mut facts = queries::chats::select_facts_with(&mut *conn, id, false)
                .await?
                .ok_or(StateError::ChatNotFound)?;
            facts.chat = queries::messages::refresh_context(&mut *conn, id).await?;
            facts
        }
    };
    if let Some(response) = &input.response {
        let mut response = response.clone();
        response.start_message_id = initial_messages
            .iter()
            .rev()
            .find(|m| m.role == chatd_core::ChatRole::User)
            .map(|m| m.id);
        if response.start_message_id.is_none() {
            return Err(StateError::InvalidInput {
                field: "initial_messages",
                detail: "a response needs a user message".into(),
            }
            .into());
        }
        queries::responses::insert(&mut *conn, id, &response).await?;
    }
    if let Some(client_id) = &input.ai_sdk_id {
        queries::responses::insert_ai_sdk_chat(&mut *conn, input.owner_id, client_id, id).await?;
    }
    let row = facts.clone();
    let chat = enqueue_publications(facts, buffer, config);
    let to = chat.execution_state(false);
    matrix::check_landing(Transition::CreateChat, ExecutionState::N, to)
        .map_err(StateError::from)?;
    Ok((
        CreateChatResult {
            chat,
            initial_messages,
        },
        log,
        row,
    ))
}
