//! Row types of the chat tables and the input shape of new messages.
//!
//! [`Chat`], [`ChatMessage`] and [`QueuedMessage`] are read with
//! `SELECT *`-style queries ([`sqlx::FromRow`]); [`NewMessage`] is the fully
//! materialised message a transition inserts (spec chatstate `Message`: the
//! machine never reshapes it except to attach the chat id).
//!
//! JSON columns are typed with the shapes of [`chatd_core`] (decoded and
//! bound as `sqlx::types::Json`): `last_error` is a [`ChatError`],
//! `retry_state` a [`RetryState`], `labels` a string map, `dynamic_tools`
//! [`DynamicTool`]s, `content` [`MessagePart`]s.
//!
//! [`ChatFacts`] is a chat row with what a bundle reads beside it;
//! [`CreateChatInput`] the input of a new chat. The rows of the other
//! tables are defined with their queries ([`crate::queries`]).

use std::collections::BTreeMap;

use chatd_core::context::ContextEntry;
use chatd_core::message::UnknownValue;
use chatd_core::{
    ChatError, ChatRole, ChatStatus, DynamicTool, ExecutionState, FinishReason, MessagePart,
    RetryState, Visibility, classify,
};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;
use uuid::Uuid;

pub use chatd_core::Usage;

/// The title every chat starts with (API.md "Limits"), until the user or the
/// worker's title generation sets another.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// assert_eq!(chat.title, chatd_store::DEFAULT_CHAT_TITLE);
/// # Ok(()) }
/// ```
pub const DEFAULT_CHAT_TITLE: &str = "New Chat";

/// A row of `chats`: execution state, version counters, ownership and
/// metadata.
///
/// Read by [`crate::queries::chats::select`] and returned by every commit; example
/// there.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, Serialize)]
pub struct Chat {
    /// Chat id.
    pub id: Uuid,
    /// The user who owns the chat.
    pub owner_id: Uuid,
    /// Parent chat, for sub-chats.
    pub parent_chat_id: Option<Uuid>,
    /// Root of the chat's family (`None` for a root).
    pub root_chat_id: Option<Uuid>,
    /// Execution status.
    #[sqlx(try_from = "String")]
    pub status: ChatStatus,
    /// Archived marker.
    pub archived: bool,
    /// Owning worker (replica) id.
    pub worker_id: Option<Uuid>,
    /// Owning runner id: the fence of every worker transition.
    pub runner_id: Option<Uuid>,
    /// Last error, set by `FinishError` and `ReconcileInvalidState`.
    #[sqlx(json(nullable))]
    pub last_error: Option<ChatError>,
    /// Retry payload clients see while the worker backs off
    /// (`RecordRetryState`; cleared when the attempt changes).
    #[sqlx(json(nullable))]
    pub retry_state: Option<RetryState>,
    /// Advanced by exactly 1 by every transaction that applies transitions.
    pub snapshot_version: i64,
    /// The snapshot in which message history last changed.
    pub history_version: i64,
    /// The snapshot in which the queue last changed.
    pub queue_version: i64,
    /// Generation attempts under the current history version.
    pub generation_attempt: i64,
    /// The snapshot in which `retry_state` last changed.
    pub retry_state_version: i64,
    /// Deadline of a pending dynamic-tool action (database time).
    pub requires_action_deadline_at: Option<DateTime<Utc>>,
    /// Title (metadata).
    pub title: String,
    /// Labels (metadata; a JSON object of strings).
    #[sqlx(json)]
    pub labels: BTreeMap<String, String>,
    /// Pin order (metadata).
    pub pin_order: i32,
    /// Model config of the most recent message that set one.
    pub last_model_config_id: Option<Uuid>,
    /// Reasoning effort of the most recent message that set one.
    pub last_reasoning_effort: Option<String>,
    /// Client-executed tools.
    #[sqlx(json)]
    pub dynamic_tools: Vec<DynamicTool>,
    /// MCP servers offered to the model.
    pub mcp_server_ids: Vec<Uuid>,
    /// `"plan"` or none.
    pub plan_mode: Option<String>,
    /// Set by `RequestCompaction`, consumed by the compaction `CommitStep`.
    pub compaction_requested_at: Option<DateTime<Utc>>,
    /// Number of client-visible messages (not soft-deleted, not
    /// model-only); kept by the `maintain_chat_message_summary` trigger
    /// (migration `0005_message_windows.sql`), never counted at read time.
    pub message_count: i64,
    /// The first 200 characters of the newest non-empty text part of the
    /// newest visible message that has one; `None` when no visible message
    /// has text. Kept by the same trigger.
    pub last_message_preview: Option<String>,
    /// Tokens the next model call would send (API.md `Chat.context.tokens`;
    /// `None` before the history first changed under this column).
    pub context_tokens: Option<i64>,
    /// Whether `context_tokens` is (partly) an estimate.
    pub context_estimated: bool,
    /// The model's context window when the context was last refreshed, in
    /// tokens.
    pub context_limit: Option<i64>,
    /// Summaries in the active history.
    pub compactions: i32,
    /// The last message the newest summary covers.
    pub compacted_through_message_id: Option<i64>,
    /// The last message of the active branch (`None` while the chat has
    /// none); kept by the `link_chat_message_parent` trigger and the branch
    /// transitions (migration `0017_branches.sql`).
    pub active_leaf_id: Option<i64>,
    /// The chat this one was forked from (`POST /chats/{chat}/fork`).
    pub forked_from_chat_id: Option<Uuid>,
    /// The message of [`Chat::forked_from_chat_id`] the fork copied up to.
    pub forked_from_message_id: Option<i64>,
    /// The model is offered the built-in agent tools (API.md "Sub-agents
    /// and plan mode"; migration `0010_subagents.sql`).
    pub subagents: bool,
    /// 0 for a root, the parent's depth + 1 for a child; at most
    /// [`crate::MAX_CHAT_DEPTH`].
    pub depth: i32,
    /// The idempotency key of the `spawn_agent` call that created this
    /// child (`None` for chats created any other way); unique per parent.
    pub spawn_key: Option<String>,
    /// The model is offered the built-in workspace tools (API.md
    /// "Workspaces and provider-hosted tools"; migration
    /// `0023_workspaces.sql`). A model config's `options.workspace` offers
    /// them too.
    pub workspace: bool,
    /// The committed workspace's size in bytes; `None` until a step that
    /// changed it committed ([`Chat::workspace_summary`]).
    pub workspace_bytes: Option<i64>,
    /// The committed workspace's files and symlinks; `None` until then.
    pub workspace_files: Option<i32>,
    /// When the last step that changed the workspace committed; `None`
    /// until then.
    pub workspace_updated_at: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change time.
    pub updated_at: DateTime<Utc>,
}

impl Chat {
    /// The chat's execution state given whether its queue is non-empty.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::ExecutionState;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// assert_eq!(chat.execution_state(false), ExecutionState::R0);
    /// assert_eq!(chat.execution_state(true), ExecutionState::R1);
    /// # Ok(()) }
    /// ```
    pub fn execution_state(&self, queue_non_empty: bool) -> ExecutionState {
        classify(Some((self.status, self.archived, queue_non_empty)))
    }

    /// Names of the chat's dynamic tools.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{DynamicTool, MessagePart};
    /// use chatd_store::{CreateChatInput, NewMessage};
    /// use serde_json::json;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// let input = CreateChatInput {
    ///     owner_id: owner,
    ///     dynamic_tools: vec![DynamicTool {
    ///         name: "pick_color".into(),
    ///         description: "Ask the user for a color".into(),
    ///         input_schema: json!({"type": "object"}),
    ///         read_only: false,
    ///     }],
    ///     initial_messages: vec![NewMessage::user(vec![MessagePart::text("hi")])],
    ///     ..Default::default()
    /// };
    /// let chat = store.create_chat(input).await?.chat;
    /// assert_eq!(chat.dynamic_tool_names(), ["pick_color"]);
    /// # Ok(()) }
    /// ```
    pub fn dynamic_tool_names(&self) -> Vec<String> {
        self.dynamic_tools.iter().map(|t| t.name.clone()).collect()
    }
}

/// A row of `chat_messages`.
///
/// Read by [`crate::queries::messages::select`] and returned by the transitions;
/// example there.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ChatMessage {
    /// Message id (bigserial, ascending in insertion order).
    pub id: i64,
    /// Chat id.
    pub chat_id: Uuid,
    /// Role.
    #[sqlx(try_from = "String")]
    pub role: ChatRole,
    /// Parts.
    pub content: Json<Vec<MessagePart>>,
    /// Who sees it.
    #[sqlx(try_from = "String")]
    pub visibility: Visibility,
    /// A compaction summary boundary.
    pub compressed: bool,
    /// Not on the active branch (an edit, a regenerate or a branch switch
    /// left it; migration `0017_branches.sql`). Rows soft-deleted by an edit
    /// before branches existed also have [`ChatMessage::parent_id`] `None`
    /// and are in no tree.
    pub deleted: bool,
    /// The row this one follows in the chat's tree (`None` for a root);
    /// set by the `link_chat_message_parent` trigger to the chat's active
    /// leaf when the row is inserted. May name a model-only row (a context
    /// boundary). API.md "Branches, regenerate and fork".
    pub parent_id: Option<i64>,
    /// The nearest client-visible ancestor: [`ChatMessage::parent_id`], or
    /// when that is a model-only row, its own visible parent. What clients
    /// see as `parent_id`; set by the same trigger.
    pub visible_parent_id: Option<i64>,
    /// The client-visible rows with the same visible parent, this one
    /// included, ascending; empty when it has none. Kept by the same
    /// trigger.
    pub sibling_ids: Vec<i64>,
    /// The snapshot version that last inserted or changed the row (trigger).
    pub revision: i64,
    /// The user who wrote it (user messages).
    pub created_by: Option<Uuid>,
    /// Model config used.
    pub model_config_id: Option<Uuid>,
    /// Reasoning effort requested with it.
    pub reasoning_effort: Option<String>,
    /// Prompt tokens.
    pub input_tokens: Option<i64>,
    /// Completion tokens.
    pub output_tokens: Option<i64>,
    /// Reasoning tokens.
    pub reasoning_tokens: Option<i64>,
    /// Cached prompt tokens read.
    pub cache_read_tokens: Option<i64>,
    /// Cached prompt tokens written.
    pub cache_creation_tokens: Option<i64>,
    /// Total tokens.
    pub total_tokens: Option<i64>,
    /// The model's context limit when this was generated, in tokens.
    pub context_limit: Option<i64>,
    /// Cost in micro-dollars, rounded up; `None` when unpriced.
    pub total_cost_micros: Option<i64>,
    /// Generation time in milliseconds.
    pub runtime_ms: Option<i64>,
    /// Why an assistant message ended (`None`: unknown, or not an assistant
    /// message); migration `0003_message_finish_reason`.
    #[sqlx(try_from = "FinishReasonColumn")]
    pub finish_reason: Option<FinishReason>,
    /// The provider's response id.
    pub provider_response_id: Option<String>,
    /// The queued message this was promoted from.
    pub queued_message_id: Option<i64>,
    /// The client's idempotency key of the send that created it.
    pub client_message_id: Option<String>,
    /// On a boundary row: the last message id it covers (`None` on
    /// other rows, and on boundaries older than the column: they cover
    /// everything before them).
    pub compacted_through_id: Option<i64>,
    /// The size estimate made when the row was committed, in tokens
    /// (`chatd_core::context::estimate_tokens`; `None` on older rows).
    pub token_estimate: Option<i64>,
    /// Insertion time.
    pub created_at: DateTime<Utc>,
}

impl ChatMessage {
    /// What the context rules read of this row
    /// (`chatd_core::context::ContextEntry`); an older row without a stored
    /// estimate is estimated from its content now.
    pub fn context_entry(&self) -> chatd_core::context::ContextEntry {
        chatd_core::context::ContextEntry {
            id: self.id,
            role: self.role,
            visibility: self.visibility,
            compressed: self.compressed,
            compacted_through_id: self.compacted_through_id,
            token_estimate: self
                .token_estimate
                .unwrap_or_else(|| chatd_core::context::estimate_tokens(&self.content.0)),
            usage: self
                .usage()
                .filter(|_| self.role == ChatRole::Assistant)
                .map(|u| (u.prompt_tokens(), u.output_tokens)),
        }
    }

    /// Usage, when the row carries any token counts.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{MessagePart, Usage};
    /// use chatd_store::NewMessage;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// assert_eq!(created.initial_messages[0].usage(), None, "a user message has none");
    /// let usage = Usage {
    ///     input_tokens: 12,
    ///     output_tokens: 3,
    ///     total_tokens: 15,
    ///     ..Usage::default()
    /// };
    /// let mut answer = NewMessage::assistant(vec![MessagePart::text("hello")]);
    /// answer.usage = Some(usage);
    /// let machine = store.machine(chat.id);
    /// let (rows, _) = machine
    ///     .update(|tx| Box::pin(async move { tx.commit_step(vec![answer], false).await }))
    ///     .await?;
    /// assert_eq!(rows[0].usage(), Some(usage));
    /// # Ok(()) }
    /// ```
    pub fn usage(&self) -> Option<Usage> {
        if self.input_tokens.is_none()
            && self.output_tokens.is_none()
            && self.total_tokens.is_none()
        {
            return None;
        }
        Some(Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
            reasoning_tokens: self.reasoning_tokens.unwrap_or(0),
            cache_read_tokens: self.cache_read_tokens.unwrap_or(0),
            cache_creation_tokens: self.cache_creation_tokens.unwrap_or(0),
            total_tokens: self.total_tokens.unwrap_or(0),
        })
    }
}

/// `chat_messages.finish_reason` as read (nullable text), decoded into
/// `Option<`[`FinishReason`]`>` by [`ChatMessage`]'s `FromRow`; a spelling
/// the column's check constraint would refuse is a decode error.
///
/// Tested by `tests/it/transitions.rs`:
/// `finish_reasons_are_stored_with_the_message_and_unknown_spellings_refused`.
#[derive(Debug, sqlx::Type)]
#[sqlx(transparent)]
pub struct FinishReasonColumn(Option<String>);

impl TryFrom<FinishReasonColumn> for Option<FinishReason> {
    type Error = UnknownValue;

    fn try_from(column: FinishReasonColumn) -> Result<Self, Self::Error> {
        column.0.map(FinishReason::try_from).transpose()
    }
}

/// A row of `chat_queued_messages`.
///
/// Read by [`crate::queries::queue::list`]; example there.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QueuedMessage {
    /// Queued message id.
    pub id: i64,
    /// Chat id.
    pub chat_id: Uuid,
    /// Order within the chat's queue: the head has the lowest position.
    pub position: i64,
    /// Parts.
    pub content: Json<Vec<MessagePart>>,
    /// The user who queued it.
    pub created_by: Option<Uuid>,
    /// Model config requested with it.
    pub model_config_id: Option<Uuid>,
    /// Reasoning effort requested with it.
    pub reasoning_effort: Option<String>,
    /// The client's idempotency key.
    pub client_message_id: Option<String>,
    /// Insertion time.
    pub created_at: DateTime<Utc>,
    /// Sent with `busy_behavior: "steer"` while the chat ran: the step
    /// commit that continues the turn takes it into history, and
    /// `FinishTurn` promotes it ahead of ordinary queued messages.
    pub steer: bool,
}

/// A message to insert (spec chatstate `Message`).
///
/// Example: [`NewMessage::new`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewMessage {
    /// Role (`None` is an error at insert time; use the constructors).
    pub role: Option<ChatRole>,
    /// Parts.
    pub content: Vec<MessagePart>,
    /// Visibility (default both).
    pub visibility: Visibility,
    /// A compaction summary boundary.
    pub compressed: bool,
    /// Author.
    pub created_by: Option<Uuid>,
    /// Model config.
    pub model_config_id: Option<Uuid>,
    /// Reasoning effort (`none` … `max`).
    pub reasoning_effort: Option<String>,
    /// Token usage.
    pub usage: Option<Usage>,
    /// Context limit in tokens.
    pub context_limit: Option<i64>,
    /// Cost in micro-dollars.
    pub total_cost_micros: Option<i64>,
    /// Generation time in milliseconds.
    pub runtime_ms: Option<i64>,
    /// Why an assistant message ended (assistant messages only).
    pub finish_reason: Option<FinishReason>,
    /// Provider response id.
    pub provider_response_id: Option<String>,
    /// Client idempotency key.
    pub client_message_id: Option<String>,
    /// On a summary boundary: the last message id it covers.
    pub compacted_through_id: Option<i64>,
}

impl NewMessage {
    /// A message with `role` and `content` and defaults elsewhere.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::{ChatRole, MessagePart, Visibility};
    /// use chatd_store::NewMessage;
    /// let author = uuid::Uuid::new_v4();
    /// let message = NewMessage::new(ChatRole::User, vec![MessagePart::text("hi")]).created_by(author);
    /// assert_eq!((message.role, message.created_by), (Some(ChatRole::User), Some(author)));
    /// assert_eq!(message.visibility, Visibility::Both);
    /// assert_eq!(NewMessage::user(vec![]).role, Some(ChatRole::User));
    /// assert_eq!(NewMessage::assistant(vec![]).role, Some(ChatRole::Assistant));
    /// assert_eq!(NewMessage::tool(vec![]).role, Some(ChatRole::Tool));
    /// let system = NewMessage::system("Be brief.");
    /// assert_eq!(system.content, vec![MessagePart::text("Be brief.")]);
    /// ```
    pub fn new(role: ChatRole, content: Vec<MessagePart>) -> Self {
        Self {
            role: Some(role),
            content,
            ..Self::default()
        }
    }

    /// A user message.
    ///
    /// Example: [`NewMessage::new`].
    pub fn user(content: Vec<MessagePart>) -> Self {
        Self::new(ChatRole::User, content)
    }

    /// An assistant message.
    ///
    /// Example: [`NewMessage::new`].
    pub fn assistant(content: Vec<MessagePart>) -> Self {
        Self::new(ChatRole::Assistant, content)
    }

    /// A tool-result message.
    ///
    /// Example: [`NewMessage::new`].
    pub fn tool(content: Vec<MessagePart>) -> Self {
        Self::new(ChatRole::Tool, content)
    }

    /// A system message.
    ///
    /// Example: [`NewMessage::new`].
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(ChatRole::System, vec![MessagePart::text(text)])
    }

    /// Sets the author.
    ///
    /// Example: [`NewMessage::new`].
    pub fn created_by(mut self, user: Uuid) -> Self {
        self.created_by = Some(user);
        self
    }
}

/// Input of [`crate::Store::create_chat`] (spec chatstate `CreateChatInput`).
///
/// Example: [`crate::Store::create_chat`].
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
    /// Initial history; must be non-empty for a running chat (a waiting
    /// one may start empty: an OpenAI conversation created without items).
    pub initial_messages: Vec<NewMessage>,
    /// `Running` (default, lands `R0`) or `Waiting` (lands `W`).
    pub initial_status: Option<ChatStatus>,
    /// Most files linked to the chat (`MaxFileLinks`; 0: the default,
    /// [`crate::queries::files::DEFAULT_MAX_FILE_LINKS`]). The file parts of
    /// `initial_messages` are linked atomically with them (`FileIDs`), and
    /// their media type and name filled in.
    pub max_file_links: usize,
    /// Offer the model the built-in agent tools (API.md "Sub-agents and
    /// plan mode"; default off).
    pub subagents: bool,
    /// The idempotency key of the `spawn_agent` call creating this child
    /// (unique per parent; [`crate::ChatTx::create_child`]).
    pub spawn_key: Option<String>,
    /// Offer the model the built-in workspace tools (API.md "Workspaces
    /// and provider-hosted tools"; default off).
    pub workspace: bool,
    /// An OpenAI response whose turn is this chat's first (API.md
    /// "Compatible protocols"): recorded in the same transaction, starting
    /// at the last initial user message.
    pub response: Option<crate::queries::responses::NewResponse>,
    /// The AI SDK transport's id of the chat (per owner), mapped in the
    /// same transaction; a unique violation when it is already mapped.
    pub ai_sdk_id: Option<String>,
}

/// The committed workspace of a chat (API.md "Workspaces and
/// provider-hosted tools", `Chat.workspace`): the columns
/// `workspace_bytes`, `workspace_files` and `workspace_updated_at`, written
/// only with a committed step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkspaceSummary {
    /// The sum of the entries' sizes (bytes): file contents and symlink
    /// targets.
    pub bytes: i64,
    /// Regular files and symlinks (directories are not counted).
    pub files: i32,
    /// When the last step that changed it committed.
    pub updated_at: DateTime<Utc>,
}

impl Chat {
    /// API.md `Chat.workspace`: `None` until a step that changed the
    /// workspace committed.
    pub fn workspace_summary(&self) -> Option<WorkspaceSummary> {
        match (
            self.workspace_bytes,
            self.workspace_files,
            self.workspace_updated_at,
        ) {
            (Some(bytes), Some(files), Some(updated_at)) => Some(WorkspaceSummary {
                bytes,
                files,
                updated_at,
            }),
            _ => None,
        }
    }
}

/// A chat row with what a transition bundle needs to know besides it: the
/// length of its queue and the age of its current runner's heartbeat, read
/// in the same statement (by [`crate::queries::chats::lock_and_bump`] and
/// [`crate::queries::chats::select_facts`]).
///
/// Example: [`crate::queries::chats::select_facts`].
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ChatFacts {
    /// The row.
    #[sqlx(flatten)]
    pub chat: Chat,
    /// Number of queued messages.
    pub queue_len: i64,
    /// Seconds since the heartbeat of the row's `runner_id` (database time,
    /// `now()` of the transaction); `None` without a runner or a heartbeat.
    pub heartbeat_age_secs: Option<f64>,
    /// The entries of the model context when the history changed in this
    /// transaction (`history_version = snapshot_version`) and the statement
    /// read them; the commit's `Chat.context` is computed from them.
    #[sqlx(default)]
    pub(crate) context_entries: Option<Json<Vec<EntryRow>>>,
}

impl ChatFacts {
    /// The execution state (`chatd_core::classify`) of the row and queue.
    pub fn execution_state(&self) -> chatd_core::ExecutionState {
        self.chat.execution_state(self.queue_len > 0)
    }

    /// Whether the row's runner has a heartbeat no older than
    /// `stale_after_secs` (the spec's `HeartbeatStaleSeconds`).
    pub fn fresh(&self, stale_after_secs: f64) -> bool {
        self.heartbeat_age_secs
            .is_some_and(|age| age <= stale_after_secs)
    }

    /// The model context's entries, when the statement read them.
    pub(crate) fn take_context_entries(
        &mut self,
    ) -> Option<Vec<chatd_core::context::ContextEntry>> {
        let Json(rows) = self.context_entries.take()?;
        Some(rows.into_iter().filter_map(|r| r.into_entry()).collect())
    }
}

/// One row of [`crate::queries::messages::context_entries`], as the
/// database returns it (also as JSON, in [`ChatFacts`]).
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub(crate) struct EntryRow {
    pub(crate) id: i64,
    pub(crate) role: String,
    pub(crate) visibility: String,
    pub(crate) compressed: bool,
    pub(crate) compacted_through_id: Option<i64>,
    pub(crate) token_estimate: i64,
    pub(crate) prompt_tokens: Option<i64>,
    pub(crate) output_tokens: Option<i64>,
}

impl EntryRow {
    /// The entry; `None` for a role or visibility this build does not know.
    pub(crate) fn into_entry(self) -> Option<ContextEntry> {
        Some(ContextEntry {
            id: self.id,
            role: ChatRole::try_from(self.role).ok()?,
            visibility: Visibility::try_from(self.visibility).ok()?,
            compressed: self.compressed,
            compacted_through_id: self.compacted_through_id,
            token_estimate: self.token_estimate,
            usage: self
                .prompt_tokens
                .map(|p| (p, self.output_tokens.unwrap_or(0))),
        })
    }
}
