//! `ChatMachine` and `create_chat` (`spec/chatstate-package.md`, "Overview",
//! `ChatMachine.Update/Lock/ReadLock`, `CreateChat`; `spec/chatd-architecture.md`,
//! "Transitions" and "Notification emission rules").
//!
//! Invariants kept here:
//! - Every transaction that applies transitions locks the chat row and
//!   advances `snapshot_version` exactly once, before any other write
//!   ([`queries::chats::lock_and_bump`]; in an optimistic bundle, the
//!   guarded `UPDATE` of its first transition or
//!   `queries::chats::lock_and_bump_guessed`, see [`crate::row_cache`]). The
//!   message triggers depend on it.
//! - Publications are buffered in a [`PublishBuffer`] and flushed only after
//!   the commit succeeded; a rollback (an error, or dropping a [`ChatTx`])
//!   discards them. Publishing before the commit would let a receiver read
//!   the old state, record the new version as seen, and miss the change.
//! - `chat:update:{chat_id}` carries the committed post-transition values;
//!   `chat:ownership` is added when the result is runnable and no runner holds
//!   a fresh heartbeat.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chatd_core::{
    ChatStatus, DynamicTool, ExecutionState, StateError, Transition, classify, matrix,
};
use chatd_pubsub::{
    ChatUpdate, OWNERSHIP_CHANNEL, OwnershipHint, PublishBuffer, Publisher, chat_update_channel,
};
use futures::future::BoxFuture;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::models::{Chat, ChatMessage, NewMessage};
use crate::queries;
use crate::queries::chats::LockMode;

/// Tunables of the state machine. Defaults are the spec's.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use chatd_store::StoreConfig;
/// let config = StoreConfig::default();
/// assert_eq!(config.requires_action_timeout, Duration::from_secs(300));
/// assert_eq!(config.heartbeat_stale_after, Duration::from_secs(30));
/// assert_eq!(config.max_queued_messages, 20);
/// ```
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// How long a chat stays in `requires_action` before the timeout task
    /// cancels it (`EnterRequiresAction`); default 5 minutes.
    pub requires_action_timeout: Duration,
    /// A heartbeat older than this counts as stale when deciding whether to
    /// publish `chat:ownership`; default 30 s (`HeartbeatStaleSeconds`).
    pub heartbeat_stale_after: Duration,
    /// Maximum queued messages per chat; default 20.
    pub max_queued_messages: i64,
    /// How provider API keys and MCP secrets are stored ([`crate::secrets`]);
    /// default: no key, plain text.
    pub secrets: crate::secrets::Secrets,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            requires_action_timeout: Duration::from_secs(300),
            heartbeat_stale_after: Duration::from_secs(30),
            max_queued_messages: 20,
            secrets: crate::secrets::Secrets::none(),
        }
    }
}

/// Handle to the database and the publisher; cheap to clone.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use chatd_core::{ExecutionState, MessagePart, Role};
/// use chatd_pubsub::RecordingPublisher;
/// use chatd_store::{CreateChatInput, NewMessage, Store, queries};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let published = Arc::new(RecordingPublisher::new());
/// let store = Store::new(pool.clone(), published.clone());
/// let owner = queries::users::insert(store.pool(), "alice", Role::Member).await?.id;
/// let input = CreateChatInput {
///     owner_id: owner,
///     initial_messages: vec![NewMessage::user(vec![MessagePart::text("hi")])],
///     ..Default::default()
/// };
/// let chat = store.create_chat(input).await?.chat;
/// let mut locked = store.machine(chat.id).read_lock().await?;
/// assert_eq!(locked.execution_state().await?, ExecutionState::R0);
/// locked.finish().await?;
/// // chat:update and, for a runnable chat, chat:ownership, after the commit.
/// assert_eq!(published.published().len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    publisher: Arc<dyn Publisher>,
    config: Arc<StoreConfig>,
    /// The context entries of recently changed chats (shared by clones).
    context_cache: Arc<crate::context_cache::ContextCache>,
    row_cache: Arc<crate::row_cache::RowCache>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Input of [`Store::create_chat`] (spec chatstate `CreateChatInput`).
///
/// Example: [`Store::create_chat`].
#[derive(Debug, Clone, Default)]
pub struct CreateChatInput {
    /// Use this id instead of a random one (`CreateChatWithID`).
    pub id: Option<Uuid>,
    /// Owner.
    pub owner_id: Uuid,
    /// Parent chat; the new chat joins the parent's family.
    pub parent_chat_id: Option<Uuid>,
    /// Title (default [`crate::DEFAULT_CHAT_TITLE`]).
    pub title: Option<String>,
    /// Labels (default none).
    pub labels: BTreeMap<String, String>,
    /// Model config.
    pub last_model_config_id: Option<Uuid>,
    /// Reasoning effort.
    pub last_reasoning_effort: Option<String>,
    /// Client-executed tools (default none).
    pub dynamic_tools: Vec<DynamicTool>,
    /// MCP servers.
    pub mcp_server_ids: Vec<Uuid>,
    /// `"plan"` or none.
    pub plan_mode: Option<String>,
    /// Initial history; must be non-empty.
    pub initial_messages: Vec<NewMessage>,
    /// `Running` (default, lands `R0`) or `Waiting` (lands `W`).
    pub initial_status: Option<ChatStatus>,
    /// Most files linked to the chat (`MaxFileLinks`; 0: the default,
    /// [`queries::files::DEFAULT_MAX_FILE_LINKS`]). The file parts of
    /// `initial_messages` are linked atomically with them (`FileIDs`), and
    /// their media type and name filled in.
    pub max_file_links: usize,
    /// Offer the model the built-in agent tools (API.md "Sub-agents and
    /// plan mode"; default off).
    pub subagents: bool,
    /// The idempotency key of the `spawn_agent` call creating this child
    /// (unique per parent; [`ChatTx::create_child`]).
    pub spawn_key: Option<String>,
}

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
    /// A store over `pool` publishing to `publisher`, with default tunables.
    ///
    /// Example: [`Store`].
    pub fn new(pool: PgPool, publisher: Arc<dyn Publisher>) -> Self {
        Self::with_config(pool, publisher, StoreConfig::default())
    }

    /// A store with explicit tunables.
    ///
    /// # Example
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use chatd_store::{Store, StoreConfig};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
    /// let config = StoreConfig {
    ///     max_queued_messages: 5,
    ///     ..StoreConfig::default()
    /// };
    /// let store = Store::with_config(pool.clone(), Arc::new(chatd_pubsub::RecordingPublisher::new()), config);
    /// assert_eq!(store.config().max_queued_messages, 5);
    /// assert_eq!(store.config().heartbeat_stale_after, Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    pub fn with_config(pool: PgPool, publisher: Arc<dyn Publisher>, config: StoreConfig) -> Self {
        Self {
            pool,
            publisher,
            config: Arc::new(config),
            context_cache: Arc::default(),
            row_cache: Arc::default(),
        }
    }

    /// The replica's cache of model-context entries
    /// ([`crate::context_cache`]), shared by the clones of this store.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::MessagePart;
    /// use chatd_store::NewMessage;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// // A committed history change leaves the chat's entries cached.
    /// let answer = NewMessage::assistant(vec![MessagePart::text("hello")]);
    /// let (_, committed) = store
    ///     .machine(chat.id)
    ///     .update(|tx| Box::pin(async move { tx.commit_step(vec![answer], false).await }))
    ///     .await?;
    /// assert!(store.context_cache().get(chat.id, committed.history_version).is_some());
    /// # Ok(()) }
    /// ```
    pub fn context_cache(&self) -> &crate::context_cache::ContextCache {
        &self.context_cache
    }

    /// The replica's cache of committed chat rows ([`crate::row_cache`]):
    /// the guesses of [`ChatMachine::update_optimistic`], shared by the
    /// clones of this store.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// // Every commit leaves the committed row behind.
    /// let (_, committed) = store
    ///     .machine(chat.id)
    ///     .update(|tx| Box::pin(async move { tx.record_generation_attempt().await }))
    ///     .await?;
    /// assert_eq!(store.row_cache().get(chat.id).map(|f| f.chat), Some(committed));
    /// # Ok(()) }
    /// ```
    pub fn row_cache(&self) -> &crate::row_cache::RowCache {
        &self.row_cache
    }

    /// How provider API keys and MCP secrets are sealed and opened
    /// ([`StoreConfig::secrets`]); pass it to the `providers` and
    /// `mcp_servers` queries.
    pub fn secrets(&self) -> &crate::secrets::Secrets {
        &self.config.secrets
    }

    /// The connection pool.
    ///
    /// Example: [`Store`].
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The publisher.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_pubsub::Publisher as _;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// // Publications of the store's transitions go here, after their commit.
    /// store.publisher().publish("example", b"{}")?;
    /// # Ok(()) }
    /// ```
    pub fn publisher(&self) -> &Arc<dyn Publisher> {
        &self.publisher
    }

    /// The tunables.
    ///
    /// Example: [`Store::with_config`].
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// A state-machine handle for one chat. Cheap; make one per request.
    ///
    /// Example: [`Store`], [`ChatMachine::update`].
    pub fn machine(&self, chat_id: Uuid) -> ChatMachine {
        ChatMachine {
            store: self.clone(),
            chat_id,
        }
    }

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
        if input.initial_messages.is_empty() {
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

    /// Archives or unarchives a root chat and every chat of its family in one
    /// transaction (spec "PATCH /api/experimental/chats/{chat}"). Each member
    /// goes through the same lock-and-bump as [`ChatMachine::begin`]; members
    /// already at the requested value are bumped and republished without
    /// change. Any member that cannot transition fails the whole call and
    /// nothing changes. Returns the members, root first, then by creation.
    ///
    /// # Errors
    /// `ChatNotFound`, `ChatNotRoot` (the chat has a parent),
    /// `InvalidState` when any member is invalid, `TransitionNotAllowed` when a
    /// member is busy.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::ExecutionState;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let machine = store.machine(chat.id);
    /// // A running chat cannot be archived; once it waits, its whole family can.
    /// assert!(store.set_family_archived(chat.id, true).await.is_err());
    /// machine.update(|tx| Box::pin(async move { tx.finish_turn().await })).await?;
    /// let family = store.set_family_archived(chat.id, true).await?;
    /// assert!(family.iter().all(|c| c.archived));
    /// let mut locked = machine.lock().await?;
    /// assert_eq!(locked.execution_state().await?, ExecutionState::XW);
    /// locked.finish().await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_family_archived(
        &self,
        root_id: Uuid,
        archived: bool,
    ) -> StoreResult<Vec<Chat>> {
        let chats = self.family_archived(root_id, archived, None, true).await?;
        Ok(chats.expect("an unguarded family archive always applies"))
    }

    /// Archives or unarchives chat `chat_id` and every descendant of it in
    /// one transaction, like [`Store::set_family_archived`] but from any
    /// chat of a family (the `close_agent` tool archives a child's family,
    /// API.md "Sub-agents and plan mode"). Members are locked parents
    /// first, then by creation. Returns the members, `chat_id` first.
    ///
    /// # Errors
    /// `ChatNotFound`; `TransitionNotAllowed` when a member is busy (running,
    /// interrupting, requires-action); `InvalidState` for an invalid member;
    /// database errors. Nothing changes on an error.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{ChatStatus, MessagePart};
    /// use chatd_store::{CreateChatInput, NewMessage};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let root = fx.create_chat("hi").await?.chat;
    /// let child = store
    ///     .create_chat(CreateChatInput {
    ///         owner_id: owner,
    ///         parent_chat_id: Some(root.id),
    ///         initial_status: Some(ChatStatus::Waiting),
    ///         initial_messages: vec![NewMessage::user(vec![MessagePart::text("sub-task")])],
    ///         ..Default::default()
    ///     })
    ///     .await?
    ///     .chat;
    /// let archived = store.set_subtree_archived(child.id, true).await?;
    /// assert_eq!(archived.iter().map(|c| (c.id, c.archived)).collect::<Vec<_>>(), [(child.id, true)]);
    /// // The (running) root is untouched.
    /// let root = chatd_store::queries::chats::select(pool, root.id, Default::default()).await?.unwrap();
    /// assert!(!root.archived);
    /// # Ok(()) }
    /// ```
    pub async fn set_subtree_archived(
        &self,
        chat_id: Uuid,
        archived: bool,
    ) -> StoreResult<Vec<Chat>> {
        let chats = self.family_archived(chat_id, archived, None, false).await?;
        Ok(chats.expect("an unguarded archive always applies"))
    }

    /// Root chats the auto-archive loop may archive (spec "Auto-archive
    /// loop"): not archived, not pinned (`pin_order` 0), and every member of
    /// the family idle (`waiting` or `error`, nothing queued) with no change
    /// (`updated_at`: every transition and every metadata edit bumps it) for
    /// `idle_for` (database time). Children may already be archived.
    ///
    /// Ordered by the root's `(updated_at, id)`, at most `limit`, after the
    /// keyset `after` (the last row of the previous page) when given; each
    /// row is `(root id, root updated_at)`. A hint only:
    /// [`Store::auto_archive_family`] checks again under the row locks.
    ///
    /// # Errors
    /// Database errors only.
    ///
    /// Example: [`Store::auto_archive_family`] (and
    /// [`crate::queries::chats::auto_archive_candidates`]); the auto-archive loop
    /// is tested by `chatd-worker`'s `tests/it/archive.rs`.
    pub async fn auto_archive_candidates(
        &self,
        idle_for: Duration,
        limit: i64,
        after: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
    ) -> StoreResult<Vec<(Uuid, chrono::DateTime<chrono::Utc>)>> {
        Ok(queries::chats::auto_archive_candidates(&self.pool, idle_for, limit, after).await?)
    }

    /// Archives a root chat's family if, under the row locks, it is still
    /// unused (spec "Auto-archive loop"): the root exists, is a root, is not
    /// archived or pinned, and every member is `waiting` or `error` with an
    /// empty queue (children may be archived already) and has had no change
    /// for `idle_for` (database time). Then it is exactly
    /// [`Store::set_family_archived`]`(root_id, true)`: one transaction,
    /// snapshot bumps, publications after the commit.
    ///
    /// It never waits for a lock: a family with a row locked by another
    /// transaction is in use, and is left alone (`NOWAIT`). So it cannot
    /// deadlock with a user's request, and two replicas never archive the
    /// same family twice.
    ///
    /// Returns the archived members (root first), or `None` when the family
    /// no longer qualifies or is in use; nothing changes then. A message sent
    /// at the same moment either commits first (the family stays) or finds
    /// the chat archived (`400`).
    ///
    /// # Errors
    /// Database errors only.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let machine = store.machine(chat.id);
    /// machine.update(|tx| Box::pin(async move { tx.finish_turn().await })).await?;
    /// let idle = Duration::ZERO;
    /// let roots: Vec<_> = store.auto_archive_candidates(idle, 100, None).await?;
    /// assert_eq!(roots.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![chat.id]);
    /// let archived = store.auto_archive_family(chat.id, idle).await?.expect("unused");
    /// assert!(archived[0].archived);
    /// // Already archived: it no longer qualifies, and nothing changes.
    /// assert!(store.auto_archive_family(chat.id, idle).await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn auto_archive_family(
        &self,
        root_id: Uuid,
        idle_for: Duration,
    ) -> StoreResult<Option<Vec<Chat>>> {
        match self
            .family_archived(root_id, true, Some(idle_for), true)
            .await
        {
            Err(StoreError::Database(sqlx::Error::Database(err)))
                if err.code().as_deref() == Some(LOCK_NOT_AVAILABLE) =>
            {
                Ok(None)
            }
            other => other,
        }
    }

    /// [`Store::set_family_archived`], optionally guarded by
    /// [`Store::auto_archive_family`]'s idleness check (`None` from it when
    /// the guard fails). With `root_only`, `root_id` must be a root and the
    /// whole family is archived; without, `root_id` and its descendants.
    async fn family_archived(
        &self,
        root_id: Uuid,
        archived: bool,
        idle_for: Option<Duration>,
        root_only: bool,
    ) -> StoreResult<Option<Vec<Chat>>> {
        let mut tx = crate::queries::begin(&self.pool).await?;
        // Lock the family in the order the archive below bumps it (root,
        // then children by creation) and read `updated_at` before the bumps
        // overwrite it.
        if let Some(idle_for) = idle_for
            && !queries::chats::lock_idle_family_nowait(&mut tx, root_id, idle_for).await?
        {
            return Ok(None);
        }
        let root = queries::chats::lock_and_bump(&mut tx, root_id)
            .await?
            .ok_or(StateError::ChatNotFound)?
            .facts
            .chat;
        let children = if root_only {
            if root.parent_chat_id.is_some() {
                return Err(StateError::ChatNotRoot.into());
            }
            queries::chats::family_members(&mut tx, root_id).await?
        } else {
            queries::chats::subtree_members(&mut tx, root_id).await?
        };
        let buffer = PublishBuffer::new(self.publisher.clone());
        let mut applied = Vec::new();
        let mut members = vec![root_id];
        members.extend(children);
        for (i, member) in members.iter().enumerate() {
            if i > 0 {
                queries::chats::lock_and_bump(&mut tx, *member)
                    .await?
                    .ok_or(StateError::ChatNotFound)?;
            }
            let mut known = None;
            let mut history = crate::context_cache::HistoryLog::Unknown;
            let mut row_behind = false;
            let (mut guess, mut missed) = (None, false);
            let mut ops = crate::transitions::Ops {
                conn: &mut tx,
                chat_id: *member,
                config: &self.config,
                applied: &mut applied,
                known: &mut known,
                landing: None,
                history: &mut history,
                row_behind: &mut row_behind,
                guess: &mut guess,
                missed: &mut missed,
            };
            let chat = queries::chats::select(&mut *ops.conn, *member, LockMode::None)
                .await?
                .ok_or(StateError::ChatNotFound)?;
            let state =
                chat.execution_state(queries::queue::len(&mut *ops.conn, *member).await? > 0);
            // Idle: the root is not archived (checked above); a child may
            // be, when an earlier repair unarchived only its root.
            if idle_for.is_some()
                && !matches!(
                    state,
                    ExecutionState::W
                        | ExecutionState::E0
                        | ExecutionState::XW
                        | ExecutionState::XE0
                )
            {
                return Ok(None);
            }
            if state == ExecutionState::Invalid {
                let err = chatd_core::TransitionError::new(
                    Transition::SetArchived { archived },
                    state,
                    "family member is in an invalid execution state",
                );
                record_transition(Transition::SetArchived { archived }, "rejected");
                return Err(StateError::InvalidState(err).into());
            }
            if chat.archived != archived {
                ops.set_archived(archived).await?;
            }
        }
        let mut chats = Vec::with_capacity(members.len());
        for member in &members {
            let facts = queries::chats::select_facts(&mut tx, *member)
                .await?
                .ok_or(StateError::ChatNotFound)?;
            chats.push(enqueue_publications(facts, &buffer, &self.config));
        }
        commit_and_flush(tx, buffer).await?;
        for (transition, _, _) in &applied {
            record_transition(*transition, "ok");
        }
        Ok(Some(chats))
    }
}

/// PostgreSQL's `lock_not_available` (a `NOWAIT` lock was held elsewhere).
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// A chat-scoped state-machine handle (spec chatstate `ChatMachine`).
///
/// Example: [`ChatMachine::update`].
#[derive(Debug, Clone)]
pub struct ChatMachine {
    store: Store,
    chat_id: Uuid,
}

impl ChatMachine {
    /// The chat this handle is scoped to.
    ///
    /// Example: [`ChatMachine::update`].
    pub fn chat_id(&self) -> Uuid {
        self.chat_id
    }

    /// The store behind this handle.
    ///
    /// Example: [`ChatMachine::update`].
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Opens a transition bundle: begins a transaction, locks the chat row
    /// `FOR UPDATE` and advances `snapshot_version` by one. Apply transitions
    /// on the returned [`ChatTx`], then [`ChatTx::commit`]; dropping it rolls
    /// everything back (the bump included) and publishes nothing.
    ///
    /// # Errors
    /// `ChatNotFound` when the chat does not exist; database errors.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::ExecutionState;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// assert_eq!(tx.snapshot_version(), chat.snapshot_version + 1);
    /// tx.interrupt().await?;
    /// assert_eq!(tx.execution_state().await?, ExecutionState::I0);
    /// let committed = tx.commit().await?;
    /// assert_eq!(committed.snapshot_version, chat.snapshot_version + 1);
    /// // Dropping an open bundle rolls it back, the bump included.
    /// let tx = store.machine(chat.id).begin().await?;
    /// drop(tx);
    /// let again = store.machine(chat.id).begin().await?;
    /// assert_eq!(again.snapshot_version(), committed.snapshot_version + 1);
    /// # Ok(()) }
    /// ```
    pub async fn begin(&self) -> StoreResult<ChatTx> {
        let mut tx = crate::queries::begin(&self.store.pool).await?;
        let facts = queries::chats::lock_and_bump(&mut tx, self.chat_id)
            .await?
            .ok_or(StateError::ChatNotFound)?;
        Ok(ChatTx::new(tx, facts, self.store.clone()))
    }

    /// Like [`ChatMachine::begin`], but never waits for the row lock: returns
    /// `None` when another transaction holds it (`FOR UPDATE SKIP LOCKED`) or
    /// the chat does not exist. The acquisition loop uses it so that replicas
    /// racing for the same chats do not queue behind each other.
    ///
    /// # Errors
    /// Database errors.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let machine = store.machine(chat.id);
    /// let held = machine.begin().await?;
    /// // Another transaction holds the row: no waiting, no bundle.
    /// assert!(machine.try_begin().await?.is_none());
    /// drop(held);
    /// // A dropped bundle rolls back when its connection returns to the
    /// // pool, a moment later: the row is free then.
    /// let mut free = None;
    /// for _ in 0..500 {
    ///     free = machine.try_begin().await?;
    ///     if free.is_some() { break; }
    ///     tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    /// }
    /// assert!(free.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn try_begin(&self) -> StoreResult<Option<ChatTx>> {
        let mut tx = crate::queries::begin(&self.store.pool).await?;
        let Some(facts) = queries::chats::lock_and_bump_skip_locked(&mut tx, self.chat_id).await?
        else {
            return Ok(None);
        };
        Ok(Some(ChatTx::new(tx, facts, self.store.clone())))
    }

    /// Opens an optimistic bundle: when this replica committed the chat
    /// last ([`crate::row_cache`]), begins a transaction without locking
    /// the row; its transitions validate against that committed row (the
    /// guess), and the first statement checks it: the transitions whose
    /// first write is the chat row's `UPDATE` (recording a generation
    /// attempt or a retry state, finishing a turn or an error, entering
    /// requires-action, requesting compaction, archiving) lock, bump and
    /// check in that one statement; every other transition, read or commit
    /// locks and bumps first as [`ChatMachine::begin`] does
    /// ([`ChatTx::confirm`]). A stale guess fails the bundle with
    /// [`StoreError::GuessMissed`] and nothing it did is committed. Without
    /// a committed row of the chat at hand, or for a sub-chat (whose
    /// bundles key-share its family first), this is
    /// [`ChatMachine::begin`].
    ///
    /// Prefer [`ChatMachine::update_optimistic`], which runs the bundle
    /// again when the guess missed.
    ///
    /// # Errors
    /// As [`ChatMachine::begin`].
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_store::StoreError;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let machine = store.machine(chat.id);
    /// // This replica created the chat: its row is the guess.
    /// let mut tx = machine.begin_optimistic().await?;
    /// assert!(tx.guess_pending());
    /// tx.record_generation_attempt().await?; // locks, bumps and checks in one UPDATE
    /// assert!(!tx.guess_pending());
    /// let committed = tx.commit().await?;
    /// assert_eq!(committed.snapshot_version, chat.snapshot_version + 1);
    ///
    /// // Another bundle commits that this guess does not know of.
    /// let mut stale = machine.begin_optimistic().await?;
    /// machine.update(|tx| Box::pin(async move { tx.finish_turn().await })).await?;
    /// let err = stale.record_generation_attempt().await.unwrap_err();
    /// assert!(matches!(err, StoreError::GuessMissed) && stale.guess_missed());
    /// assert!(matches!(stale.commit().await, Err(StoreError::GuessMissed)));
    /// # Ok(()) }
    /// ```
    pub async fn begin_optimistic(&self) -> StoreResult<ChatTx> {
        match self.store.row_cache.get(self.chat_id) {
            Some(row) if row.chat.parent_chat_id.is_none() && row.chat.root_chat_id.is_none() => {
                let tx = crate::queries::begin(&self.store.pool).await?;
                Ok(ChatTx::guessed(tx, row, self.store.clone()))
            }
            _ => self.begin().await,
        }
    }

    /// [`ChatMachine::update`] in an optimistic bundle
    /// ([`ChatMachine::begin_optimistic`]): a bundle whose first transition
    /// writes only the chat row takes one statement fewer. When the guess
    /// was stale, everything is rolled back and `f` runs again in a bundle
    /// that locks first, so `f` may run twice (hence `Fn`); what it returns
    /// and the committed row are those of the run that committed. A
    /// rejection (`StoreError::State`) of a bundle begun from a guess runs
    /// it again locked as well, and only the locked run's rejection is
    /// returned: the guess is checked by `snapshot_version` alone, so
    /// execution columns written without a bump (an operator's SQL) must
    /// not leave the bundle refusing what the locked row allows. Any other
    /// error of `f` decided on the guessed row alone ([`ChatTx::chat`]) is
    /// checked against the locked row before it is returned.
    ///
    /// # Errors
    /// As [`ChatMachine::update`]; never [`StoreError::GuessMissed`].
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::ChatStatus;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let machine = store.machine(chat.id);
    /// let (attempt, _) = machine
    ///     .update_optimistic(|tx| Box::pin(async move { tx.record_generation_attempt().await }))
    ///     .await?;
    /// assert_eq!(attempt, 1);
    /// // A stale guess (the chat finished its turn elsewhere) runs it again,
    /// // locked: the transition is rejected as the current state calls for.
    /// let guess = store.row_cache().get(chat.id).expect("committed here");
    /// machine.update(|tx| Box::pin(async move { tx.finish_turn().await })).await?;
    /// store.row_cache().remove(chat.id);
    /// store.row_cache().put(guess);
    /// let err = machine
    ///     .update_optimistic(|tx| Box::pin(async move { tx.record_generation_attempt().await }))
    ///     .await
    ///     .unwrap_err();
    /// assert!(err.state().is_some(), "{err}");
    /// let row = chatd_testkit::store::chat_row(pool, chat.id).await;
    /// assert_eq!(row.status, ChatStatus::Waiting);
    /// # Ok(()) }
    /// ```
    pub async fn update_optimistic<T, F>(&self, f: F) -> StoreResult<(T, Chat)>
    where
        F: for<'a> Fn(&'a mut ChatTx) -> BoxFuture<'a, StoreResult<T>>,
    {
        let mut tx = self.begin_optimistic().await?;
        let optimistic = tx.began_from_guess();
        match f(&mut tx).await {
            Ok(value) => match tx.commit().await {
                Ok(chat) => return Ok((value, chat)),
                Err(StoreError::GuessMissed) => {}
                Err(StoreError::State(_)) if optimistic => self.forget_guess(),
                Err(err) => return Err(err),
            },
            Err(StoreError::State(_)) if optimistic => {
                // Decided on the guess, whose check compares only the
                // version: execution columns written without a bump (an
                // operator's SQL) would make it refuse what the locked row
                // allows, or land in a state the matrix refuses. The locked
                // run has the last word.
                drop(tx);
                self.forget_guess();
            }
            Err(err) => {
                if tx.guess_pending() {
                    // Possibly decided on a stale row: check it.
                    match tx.confirm().await {
                        Ok(()) => return Err(err),
                        Err(StoreError::GuessMissed) => {}
                        Err(other) => return Err(other),
                    }
                } else if !tx.guess_missed() {
                    return Err(err);
                }
                // Roll back first: the check may hold the row's lock.
                drop(tx);
            }
        }
        self.update(|tx| f(tx)).await
    }

    /// Drops this chat's row from the replica's row cache
    /// ([`crate::row_cache`]): its next bundle locks first (the one after
    /// a commit is optimistic again). For a bundle begun from a guess that
    /// ended in a rejection ([`ChatTx::began_from_guess`]), before it runs
    /// again locked.
    ///
    /// Example: [`ChatMachine::begin_optimistic`].
    pub fn forget_guess(&self) {
        self.store.row_cache.remove(self.chat_id);
    }

    /// Runs `f` inside a transition bundle ([`ChatMachine::begin`]) and
    /// commits when it returns `Ok` (spec chatstate `ChatMachine.Update`).
    /// Returns `f`'s value and the committed chat row.
    ///
    /// # Errors
    /// `f`'s error (everything rolled back, nothing published), or the
    /// errors of [`ChatMachine::begin`] and [`ChatTx::commit`].
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::ChatStatus;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let machine = store.machine(chat.id);
    /// let (cancelled, chat) = machine
    ///     .update(|tx| Box::pin(async move { tx.interrupt().await }))
    ///     .await?;
    /// assert!(cancelled.is_empty(), "no pending tool call was answered");
    /// assert_eq!(chat.status, ChatStatus::Interrupting);
    /// // A rejected transition rolls everything back and publishes nothing.
    /// let again = machine.update(|tx| Box::pin(async move { tx.interrupt().await })).await;
    /// assert!(again.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn update<T, F>(&self, f: F) -> StoreResult<(T, Chat)>
    where
        F: for<'a> FnOnce(&'a mut ChatTx) -> BoxFuture<'a, StoreResult<T>>,
    {
        let mut tx = self.begin().await?;
        let value = f(&mut tx).await?;
        let chat = tx.commit().await?;
        Ok((value, chat))
    }

    /// Locks the chat row `FOR UPDATE` without advancing `snapshot_version`
    /// (spec chatstate `ChatMachine.Lock`): for callers that need a consistent
    /// snapshot of the chat and related rows but apply no transition, such as
    /// a worker task checking its fence. Publishes nothing.
    ///
    /// # Errors
    /// `ChatNotFound`; database errors.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_store::queries::chats;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut locked = store.machine(chat.id).lock().await?;
    /// // Related reads in the same transaction see the locked row's state.
    /// let facts = chats::select_facts(locked.conn(), chat.id).await?.expect("locked");
    /// assert_eq!(facts.chat.snapshot_version, locked.chat.snapshot_version);
    /// locked.finish().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> StoreResult<LockedChat> {
        self.lock_with(LockMode::Update).await
    }

    /// Like [`ChatMachine::lock`] with a shared `FOR SHARE` lock (spec
    /// chatstate `ChatMachine.ReadLock`): concurrent readers proceed, writers
    /// wait until the returned value is dropped or finished.
    ///
    /// # Errors
    /// `ChatNotFound`; database errors.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let machine = store.machine(chat.id);
    /// // Readers share the lock.
    /// let a = machine.read_lock().await?;
    /// let b = machine.read_lock().await?;
    /// assert_eq!(a.chat, b.chat);
    /// a.finish().await?;
    /// b.finish().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_lock(&self) -> StoreResult<LockedChat> {
        self.lock_with(LockMode::Share).await
    }

    /// Like [`ChatMachine::lock`] for a transaction that only reads (a
    /// worker task's fence check before it reads the history): its commit
    /// does not wait for a WAL flush
    /// ([`queries::chats::select_for_update_to_read`]). Never write
    /// through it.
    ///
    /// # Errors
    /// `ChatNotFound`; database errors.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut locked = store.machine(chat.id).lock_to_read().await?;
    /// let history = chatd_store::queries::messages::active_history(locked.conn(), chat.id).await?;
    /// assert_eq!(history.len(), 1);
    /// locked.finish().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_to_read(&self) -> StoreResult<LockedChat> {
        let mut tx = crate::queries::begin(&self.store.pool).await?;
        let chat = queries::chats::select_for_update_to_read(&mut tx, self.chat_id)
            .await?
            .ok_or(StateError::ChatNotFound)?;
        Ok(LockedChat { tx, chat })
    }

    /// Opens a read-only `REPEATABLE READ` transaction and reads the chat row
    /// in it, without any row lock: every read made through the returned
    /// [`LockedChat`] sees the same snapshot (the stream loop's "all reads of
    /// one Sync in one read transaction").
    ///
    /// # Errors
    /// `ChatNotFound`; database errors.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_store::queries::messages;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut snapshot = store.machine(chat.id).snapshot().await?;
    /// let visible = messages::visible(snapshot.conn(), chat.id).await?;
    /// assert_eq!(visible.len(), 1);
    /// snapshot.finish().await?;
    /// # Ok(()) }
    /// ```
    pub async fn snapshot(&self) -> StoreResult<LockedChat> {
        let mut tx = crate::queries::begin(&self.store.pool).await?;
        queries::set_read_only_snapshot(&mut tx).await?;
        let chat = queries::chats::select(&mut *tx, self.chat_id, LockMode::None)
            .await?
            .ok_or(StateError::ChatNotFound)?;
        Ok(LockedChat { tx, chat })
    }

    async fn lock_with(&self, lock: LockMode) -> StoreResult<LockedChat> {
        let mut tx = crate::queries::begin(&self.store.pool).await?;
        let chat = queries::chats::select(&mut *tx, self.chat_id, lock)
            .await?
            .ok_or(StateError::ChatNotFound)?;
        Ok(LockedChat { tx, chat })
    }
}

/// A chat row read under a lock (or in a snapshot) with its transaction still
/// open: further reads through [`LockedChat::conn`] are consistent with it.
/// The lock is released by [`LockedChat::finish`] or on drop.
///
/// # Example
///
/// ```
/// use chatd_core::ExecutionState;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut locked = store.machine(chat.id).lock().await?;
/// assert!(!locked.queue_non_empty().await?);
/// assert_eq!(locked.execution_state().await?, ExecutionState::R0);
/// let conn = locked.conn(); // for related reads
/// chatd_store::queries::queue::len(conn, chat.id).await?;
/// locked.finish().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LockedChat {
    tx: Transaction<'static, Postgres>,
    /// The chat row as read when the lock was taken.
    pub chat: Chat,
}

impl LockedChat {
    /// The transaction's connection, for related reads.
    ///
    /// Example: [`LockedChat`].
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// Whether the chat's queue is non-empty, read in this transaction.
    ///
    /// # Errors
    /// Database errors.
    ///
    /// Example: [`LockedChat`].
    pub async fn queue_non_empty(&mut self) -> StoreResult<bool> {
        Ok(queries::queue::len(&mut *self.tx, self.chat.id).await? > 0)
    }

    /// The chat's execution state, read in this transaction.
    ///
    /// # Errors
    /// Database errors.
    ///
    /// Example: [`LockedChat`].
    pub async fn execution_state(&mut self) -> StoreResult<ExecutionState> {
        let queued = self.queue_non_empty().await?;
        Ok(self.chat.execution_state(queued))
    }

    /// Ends the transaction (commit of a read-only transaction), releasing
    /// the lock.
    ///
    /// # Errors
    /// Database errors.
    ///
    /// Example: [`LockedChat`].
    pub async fn finish(self) -> StoreResult<()> {
        self.tx.commit().await?;
        Ok(())
    }
}

/// An open transition bundle on one chat (spec chatstate `Tx`). The row is
/// locked and `snapshot_version` already advanced, or, in an optimistic
/// bundle ([`ChatMachine::begin_optimistic`]), will be by its first
/// statement, which checks the guess its transitions validated against.
/// Transition methods live in
/// [`crate::transitions`]; each reads the row and queue afresh, validates
/// against the matrix, writes, and checks where it landed.
///
/// Example: [`ChatTx::commit`]; each transition method says which tests show it
/// (all of them: the matrix tests of `tests/it/matrix.rs`).
pub struct ChatTx {
    pub(crate) tx: Transaction<'static, Postgres>,
    pub(crate) chat_id: Uuid,
    pub(crate) snapshot_version: i64,
    pub(crate) store: Store,
    pub(crate) applied: Vec<(Transition, ExecutionState, ExecutionState)>,
    /// The row, queue length and heartbeat age as of the last statement
    /// that read them (the lock-and-bump, or the landing check of the last
    /// transition), while nothing has written since: transitions and the
    /// commit use it instead of reading again. `None` once anything may have
    /// changed them ([`ChatTx::conn`], or a transition under way).
    pub(crate) known: Option<queries::chats::ChatFacts>,
    /// Publications of the chats this bundle created
    /// ([`ChatTx::create_child`]), flushed after the commit with the
    /// bundle's own.
    pub(crate) created: Vec<chatd_pubsub::Publication>,
    /// The chat's context entries as far as the bundle follows them
    /// ([`crate::context_cache`]).
    pub(crate) history: crate::context_cache::HistoryLog,
    /// `known` predates rows the last transition appended (a step that
    /// only inserted messages, [`crate::transitions::Ops::land_appended`]):
    /// its execution state, queue length and heartbeat age are current, but
    /// the columns the message triggers keep (`history_version`,
    /// `generation_attempt`, `retry_state`, `message_count`, the preview)
    /// and the context are behind. The next transition's `UPDATE` or the
    /// commit's context `UPDATE` returns the current row; [`ChatTx::chat`]
    /// reads it.
    pub(crate) row_behind: bool,
    /// An optimistic bundle's guess ([`ChatMachine::begin_optimistic`]):
    /// the `snapshot_version` of the committed row it validates against,
    /// until its first write checks it (the fused `UPDATE` of a transition)
    /// or [`ChatTx::confirm`] locks the row; `None` once checked, and in a
    /// bundle that locked first.
    pub(crate) guess: Option<i64>,
    /// The guess was stale: the bundle must not commit
    /// ([`StoreError::GuessMissed`]).
    pub(crate) missed: bool,
    /// The bundle began from a guess ([`ChatMachine::begin_optimistic`]
    /// found the chat in the row cache), checked since or not.
    optimistic: bool,
}

impl std::fmt::Debug for ChatTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTx")
            .field("chat_id", &self.chat_id)
            .field("snapshot_version", &self.snapshot_version)
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

impl ChatTx {
    fn new(
        tx: Transaction<'static, Postgres>,
        bumped: queries::chats::Bumped,
        store: Store,
    ) -> Self {
        let chat = &bumped.facts.chat;
        let (chat_id, snapshot_version) = (chat.id, chat.snapshot_version);
        // The row is current even when the rest of the facts are not.
        let history = crate::context_cache::HistoryLog::at(
            &store.context_cache,
            chat_id,
            chat.history_version,
        );
        Self {
            tx,
            chat_id,
            snapshot_version,
            store,
            applied: Vec::new(),
            known: bumped.current_facts(),
            created: Vec::new(),
            history,
            row_behind: false,
            guess: None,
            missed: false,
            optimistic: false,
        }
    }

    /// An optimistic bundle on the open transaction `tx` (no statement run
    /// yet), guessing that chat `row.chat.id` is still at `row`, the row this
    /// replica last committed.
    fn guessed(
        tx: Transaction<'static, Postgres>,
        mut row: queries::chats::ChatFacts,
        store: Store,
    ) -> Self {
        let (chat_id, guess) = (row.chat.id, row.chat.snapshot_version);
        // What a lock-and-bump would return if the guess holds.
        row.chat.snapshot_version = guess + 1;
        let history = crate::context_cache::HistoryLog::at(
            &store.context_cache,
            chat_id,
            row.chat.history_version,
        );
        Self {
            tx,
            chat_id,
            snapshot_version: guess + 1,
            store,
            applied: Vec::new(),
            known: Some(row),
            created: Vec::new(),
            history,
            row_behind: false,
            guess: Some(guess),
            missed: false,
            optimistic: true,
        }
    }

    /// Checks an optimistic bundle's guess now, if no statement has yet:
    /// locks the row and bumps its version as [`ChatMachine::begin`] does.
    /// The transition methods that cannot fold the check into their first
    /// write, the reads of [`ChatTx::conn`] and [`ChatTx::reader`], and the
    /// commit call it; a caller that decided something from the guessed row
    /// alone ([`ChatTx::chat`]) calls it before acting on a refusal of its
    /// own. Nothing to do in a bundle that locked first.
    ///
    /// # Errors
    /// [`StoreError::GuessMissed`] when another bundle committed since the
    /// guessed row (or the chat is gone): the bundle must be dropped, and
    /// [`ChatMachine::update_optimistic`] runs it again; database errors.
    ///
    /// Example: [`ChatMachine::begin_optimistic`].
    pub async fn confirm(&mut self) -> StoreResult<()> {
        if self.missed {
            return Err(StoreError::GuessMissed);
        }
        if let Some((updated_at, heartbeat_age_secs)) = self.ops().check_guess().await? {
            // The guess is the row (a transition that took it and failed
            // before a statement left nothing: read then).
            if let Some(known) = &mut self.known {
                known.chat.updated_at = updated_at;
                known.heartbeat_age_secs = heartbeat_age_secs;
            }
            // Metadata written without a bump may be newer than the guess:
            // the row is read back before it is shown or committed, as
            // after an appending step.
            self.row_behind = true;
        }
        Ok(())
    }

    /// Whether this optimistic bundle's guess is not checked yet: what
    /// [`ChatTx::chat`] returns is the row this replica last committed.
    ///
    /// Example: [`ChatMachine::begin_optimistic`].
    pub fn guess_pending(&self) -> bool {
        self.guess.is_some()
    }

    /// Whether this optimistic bundle's guess was stale: it cannot commit,
    /// and its errors may come from the stale row.
    ///
    /// Example: [`ChatMachine::begin_optimistic`].
    pub fn guess_missed(&self) -> bool {
        self.missed
    }

    /// Whether this bundle began from a guess (the row this replica last
    /// committed) rather than from the locked row, whether the guess was
    /// checked since or not. Its transitions validated against the guess;
    /// the check compares `snapshot_version` only, so a rejection decided
    /// on it is not final: [`ChatMachine::update_optimistic`] runs the
    /// bundle again locked.
    ///
    /// Example: [`ChatMachine::begin_optimistic`].
    pub fn began_from_guess(&self) -> bool {
        self.optimistic
    }

    /// The chat this bundle is scoped to.
    ///
    /// Example: [`ChatTx::commit`].
    pub fn chat_id(&self) -> Uuid {
        self.chat_id
    }

    /// The snapshot version this bundle will commit (in an optimistic
    /// bundle, if its guess holds; if not, it commits nothing).
    ///
    /// Example: [`ChatTx::commit`].
    pub fn snapshot_version(&self) -> i64 {
        self.snapshot_version
    }

    /// The open transaction, for validation reads and metadata writes that
    /// must be atomic with the transitions. Never write execution-state
    /// tables or columns through it: that is what the transition methods are
    /// for.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_store::queries::chats::{self, MetadataChanges};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// // A metadata write atomic with a transition.
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// tx.interrupt().await?;
    /// let title = MetadataChanges { title: Some("Stopped".into()), ..Default::default() };
    /// chats::update_metadata(tx.conn().await?, chat.id, &title).await?;
    /// let committed = tx.commit().await?;
    /// assert_eq!(committed.title, "Stopped");
    /// # Ok(()) }
    /// ```
    pub async fn conn(&mut self) -> StoreResult<&mut PgConnection> {
        self.confirm().await?;
        // Anything may be written through it: read the row again next time,
        // and the context entries at the commit.
        self.known = None;
        self.row_behind = false;
        self.history.forget();
        Ok(&mut self.tx)
    }

    /// The open transaction for reads only (a heartbeat's freshness, the
    /// queue's rows): unlike [`ChatTx::conn`] it keeps what the bundle knows
    /// of the row, so the next transition need not read it again. Writing
    /// through it is a bug; use [`ChatTx::conn`] for writes.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_store::queries::queue;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// assert_eq!(queue::len(tx.reader().await?, chat.id).await?, 0);
    /// tx.interrupt().await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn reader(&mut self) -> StoreResult<&mut PgConnection> {
        self.confirm().await?;
        Ok(&mut self.tx)
    }

    /// The current chat row in this transaction: as the lock-and-bump or
    /// the last transition left it, or read again after a write through
    /// [`ChatTx::conn`]. `Chat.context` is brought up to date only by the
    /// commit. While an optimistic bundle's guess is unchecked
    /// ([`ChatTx::guess_pending`]) it is the guess: the row this replica last
    /// committed, whose execution columns the first statement checks but
    /// whose metadata (title, labels, plan mode) and `updated_at` may have
    /// changed since; call [`ChatTx::confirm`] first to decide on those.
    ///
    /// # Errors
    /// `ChatNotFound` (deleted under us cannot happen while locked, but the
    /// row may be gone if the caller deleted it); database errors.
    ///
    /// Example: [`ChatTx::commit`].
    pub async fn chat(&mut self) -> StoreResult<Chat> {
        Ok(self.facts().await?.chat.clone())
    }

    /// The current execution state in this transaction (the row and the
    /// queue as [`ChatTx::chat`] sees them).
    ///
    /// # Errors
    /// Database errors.
    ///
    /// Example: [`ChatTx::commit`].
    pub async fn execution_state(&mut self) -> StoreResult<ExecutionState> {
        Ok(self.facts().await?.execution_state())
    }

    /// What the bundle knows of the row, read now when it knows nothing.
    async fn facts(&mut self) -> StoreResult<&queries::chats::ChatFacts> {
        // An unchecked guess is what the bundle knows: the bundle's first
        // write checks it.
        let guessed = self.guess.is_some() && self.known.is_some();
        if !guessed {
            self.confirm().await?;
            if self.known.is_none() || self.row_behind {
                self.row_behind = false;
                let entries = !self.history.is_known();
                let facts = queries::chats::select_facts_with(&mut self.tx, self.chat_id, entries)
                    .await?
                    .ok_or(StateError::ChatNotFound)?;
                self.known = Some(facts);
            }
        }
        Ok(self.known.as_ref().expect("guessed or just read"))
    }

    /// The transitions applied so far: `(transition, from, to)`.
    ///
    /// Example: [`ChatTx::commit`].
    pub fn applied(&self) -> &[(Transition, ExecutionState, ExecutionState)] {
        &self.applied
    }

    /// Commits the bundle and then publishes `chat:update:{chat_id}` with the
    /// committed values, plus `chat:ownership` when the chat is runnable and
    /// not held by a runner with a fresh heartbeat. Returns the committed row.
    ///
    /// # Errors
    /// Database errors (the bundle is rolled back and nothing is published).
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{ChatStatus, ExecutionState, Transition};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// assert_eq!(tx.chat_id(), chat.id);
    /// tx.interrupt().await?;
    /// tx.finish_interruption(vec![]).await?;
    /// assert_eq!(tx.chat().await?.status, ChatStatus::Waiting);
    /// assert_eq!(
    ///     tx.applied(),
    ///     [
    ///         (Transition::Interrupt, ExecutionState::R0, ExecutionState::I0),
    ///         (Transition::FinishInterruption, ExecutionState::I0, ExecutionState::W),
    ///     ]
    /// );
    /// let version = tx.snapshot_version();
    /// let committed = tx.commit().await?;
    /// // One snapshot for the whole bundle.
    /// assert_eq!(committed.snapshot_version, version);
    /// # Ok(()) }
    /// ```
    pub async fn commit(mut self) -> StoreResult<Chat> {
        // An optimistic bundle that wrote nothing yet bumps the row now.
        self.confirm().await?;
        let buffer = PublishBuffer::new(self.store.publisher.clone());
        // After a step that only appended rows (`row_behind`) the facts are
        // current but for the row, which the context `UPDATE` below returns;
        // the log knows the entries. (Anything since, such as a transition
        // rejected after taking the facts, leaves them to be read.)
        // A row left behind only by an optimistic bundle's check (nothing
        // appended since) is read again; its history did not change.
        let behind = std::mem::take(&mut self.row_behind);
        let appended = behind && self.history.needs_refresh();
        if behind && !appended {
            self.known = None;
        }
        let behind = appended;
        self.facts().await?;
        let mut facts = self.known.take().expect("just read");
        // The history changed in this bundle (the message triggers stamp
        // `history_version` with the bumped snapshot): keep `Chat.context`.
        // The entries are the bundle's own log when it followed every history
        // write, else what the last statement read, else read now; once
        // committed they are cached for the next bundle.
        let history_changed = behind || facts.chat.history_version == facts.chat.snapshot_version;
        let mut cached = None;
        // The tail's outstanding calls go with the entries when the log
        // knows them (it followed every history write of the bundle).
        let outstanding = self.history.outstanding().cloned();
        if history_changed && !behind && self.history.is_refreshed() {
            // The last transition's landing read wrote it already.
            cached = Some((
                facts.chat.history_version,
                self.history.entries().expect("known"),
            ));
        } else if history_changed {
            let logged = self.history.entries();
            let appended_only = logged.is_some();
            let entries = match logged {
                Some(entries) => entries,
                None => match facts.take_context_entries() {
                    Some(entries) => Arc::new(entries),
                    None => Arc::new(
                        queries::messages::context_entries(&mut *self.tx, self.chat_id).await?,
                    ),
                },
            };
            facts.chat = queries::messages::refresh_context_from(
                &mut self.tx,
                self.chat_id,
                &entries,
                appended_only,
            )
            .await?;
            cached = Some((facts.chat.history_version, entries));
        }
        // The committed row: the next optimistic bundle's guess.
        let row = facts.clone();
        let chat = enqueue_publications(facts, &buffer, &self.store.config);
        for publication in &self.created {
            if let Err(err) = buffer.publish(&publication.channel, &publication.payload) {
                tracing::warn!(chat_id = %self.chat_id, error = %err, "buffering a created chat's publication failed");
            }
        }
        commit_and_flush(self.tx, buffer).await?;
        self.store.row_cache.put(row);
        if let Some((version, entries)) = cached {
            self.store
                .context_cache
                .put_log(self.chat_id, version, entries, outstanding);
        }
        for (transition, _, _) in &self.applied {
            record_transition(*transition, "ok");
        }
        for _ in &self.created {
            record_transition(Transition::CreateChat, "ok");
        }
        Ok(chat)
    }

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
    /// use chatd_store::{CreateChatInput, NewMessage, queries};
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
    /// let row = queries::chats::select(pool, child, Default::default()).await?.unwrap();
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

    /// `LinkFiles`: links the files of `parts`' file parts (owned by the
    /// chat's owner) to this chat, at most `max_links` in all, and fills in
    /// their media type and name ([`queries::files::link`],
    /// [`queries::files::describe`]). File links are metadata (spec
    /// "Core state machine"): no transition, but atomic with the bundle's,
    /// so a rejected link leaves nothing behind once the bundle is dropped.
    ///
    /// # Errors
    /// `ChatFileUnavailable`, `ChatFileCapExceeded`; database errors.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{MessagePart, StateError};
    /// use chatd_store::queries::files;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let chat = fx.create_chat("hi").await?.chat;
    /// let id = uuid::Uuid::new_v4();
    /// files::insert(pool, id, owner, "a.txt", "text/plain").await?;
    /// let mut parts = vec![MessagePart::File { file_id: id, media_type: String::new(), name: None }];
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// tx.link_files(&mut parts, 20).await?;
    /// assert!(matches!(&parts[0], MessagePart::File { media_type, .. } if media_type == "text/plain"));
    /// let err = tx.link_files(&mut parts, 0).await.unwrap_err();
    /// assert_eq!(err.state(), Some(&StateError::ChatFileCapExceeded { max: 0 }));
    /// # Ok(()) }
    /// ```
    pub async fn link_files(
        &mut self,
        parts: &mut [chatd_core::MessagePart],
        max_links: usize,
    ) -> StoreResult<()> {
        let ids = queries::files::file_ids(parts);
        if ids.is_empty() {
            return Ok(());
        }
        self.confirm().await?;
        let owner = self.chat().await?.owner_id;
        let rows = queries::files::link(&mut self.tx, self.chat_id, owner, &ids, max_links).await?;
        queries::files::describe(parts, &rows);
        Ok(())
    }

    pub(crate) fn ops(&mut self) -> crate::transitions::Ops<'_> {
        crate::transitions::Ops {
            conn: &mut self.tx,
            chat_id: self.chat_id,
            config: &self.store.config,
            applied: &mut self.applied,
            known: &mut self.known,
            landing: None,
            history: &mut self.history,
            row_behind: &mut self.row_behind,
            guess: &mut self.guess,
            missed: &mut self.missed,
        }
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
    queries::chats::ChatFacts,
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

/// Buffers the publications that the post-transition facts call for (spec
/// "Notification emission rules"); returns the row.
fn enqueue_publications(
    facts: queries::chats::ChatFacts,
    buffer: &PublishBuffer,
    config: &StoreConfig,
) -> Chat {
    let fresh = facts.fresh(config.heartbeat_stale_after.as_secs_f64());
    let queued = facts.queue_len > 0;
    let chat = facts.chat;
    let chat_id = chat.id;
    let update = chat_update_payload(&chat);
    let payload = serde_json::to_vec(&update).expect("ChatUpdate serializes");
    // A full in-memory buffer cannot fail before flush; errors here would be
    // programming errors, so they are logged rather than failing the commit.
    if let Err(err) = buffer.publish(&chat_update_channel(chat_id), &payload) {
        tracing::warn!(%chat_id, error = %err, "buffering chat:update failed");
    }
    let runnable = classify(Some((chat.status, chat.archived, queued))).is_runnable();
    let owned = chat.worker_id.is_some() && chat.runner_id.is_some() && fresh;
    if runnable && !owned {
        let hint = OwnershipHint {
            chat_id,
            snapshot_version: chat.snapshot_version,
        };
        let payload = serde_json::to_vec(&hint).expect("OwnershipHint serializes");
        if let Err(err) = buffer.publish(OWNERSHIP_CHANNEL, &payload) {
            tracing::warn!(%chat_id, error = %err, "buffering chat:ownership failed");
        }
    }
    chat
}

/// The `chat:update` payload for a committed row.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let update = chatd_store::chat_update_payload(&chat);
/// assert_eq!((update.chat_id, update.snapshot_version), (chat.id, chat.snapshot_version));
/// assert_eq!(update.status, chat.status);
/// # Ok(()) }
/// ```
pub fn chat_update_payload(chat: &Chat) -> ChatUpdate {
    ChatUpdate {
        chat_id: chat.id,
        snapshot_version: chat.snapshot_version,
        worker_id: chat.worker_id,
        runner_id: chat.runner_id,
        history_version: chat.history_version,
        queue_version: chat.queue_version,
        retry_state_version: chat.retry_state_version,
        generation_attempt: chat.generation_attempt,
        status: chat.status,
        archived: chat.archived,
    }
}

/// Commits `tx`, then publishes what `buffer` holds, in a task of its own:
/// a caller cancelled while its `COMMIT` is in flight (a runner task
/// aborted, a request whose client went away) cannot leave a committed
/// transition unpublished, which would leave a runnable chat waiting for
/// the next acquisition pass (issue 14).
///
/// # Errors
/// The `COMMIT`'s error (nothing is published then); a task that panicked
/// or was cancelled by a dying runtime is `sqlx::Error::PoolClosed`.
async fn commit_and_flush(
    tx: Transaction<'static, Postgres>,
    buffer: PublishBuffer,
) -> StoreResult<()> {
    tokio::spawn(async move {
        tx.commit().await?;
        flush(&buffer);
        Ok(())
    })
    .await
    .unwrap_or(Err(sqlx::Error::PoolClosed))
    .map_err(StoreError::from)
}

fn flush(buffer: &PublishBuffer) {
    // Notifications are best-effort hints: receivers recover through the
    // sync poller and the periodic database sync.
    if let Err(err) = buffer.flush() {
        tracing::warn!(error = %err, "publishing after commit failed");
    }
}

/// Counts an optimistic bundle whose guess was stale (it is run again
/// locked), in the `chatd_optimistic_guess_missed_total` metric.
pub(crate) fn record_guess_missed() {
    metrics::counter!("chatd_optimistic_guess_missed_total").increment(1);
}

/// Counts a transition outcome in the `chatd_transitions_total` metric
/// (labels `transition`, `outcome` = `ok` | `rejected`).
pub(crate) fn record_transition(transition: Transition, outcome: &'static str) {
    metrics::counter!("chatd_transitions_total", "transition" => transition.name(), "outcome" => outcome).increment(1);
}

/// Applies pending migrations.
///
/// # Errors
/// Migration failures.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// // Idempotent: a migrated database has nothing pending.
/// chatd_store::migrate(pool).await?;
/// assert!(chatd_store::queries::migrations::all_applied(pool).await?);
/// # Ok(()) }
/// ```
pub async fn migrate(pool: &PgPool) -> StoreResult<()> {
    crate::MIGRATOR.run(pool).await?;
    Ok(())
}
