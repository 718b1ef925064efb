//! SQL of the `chats` table: the row lock and snapshot bump of every
//! transition bundle, execution-state writes (for [`crate::transitions`]
//! only), metadata updates, listing, the family operations (archive,
//! delete) and the reads of the worker's loops and the stream's sync poller.
//!
//! Execution-state columns are written only by [`update_execution`], which
//! only the transitions call; everything else here reads them or writes
//! metadata.

use std::time::Duration;

use std::collections::BTreeMap;

use chatd_core::{ChatError, ChatStatus, ExecutionState, RetryState, classify};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{AssertSqlSafe, PgConnection, PgExecutor};
use uuid::Uuid;

pub use crate::models::ChatFacts;
use crate::models::{Chat, CreateChatInput};
use crate::rules::{idle_status_sql, runnable_chat_sql};

/// The row lock a read of a chat row takes (PostgreSQL's row-level lock
/// modes, in the transaction of the connection it runs on).
///
/// Example: [`select`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockMode {
    /// No lock: a plain read (in a snapshot, or under a lock already held).
    #[default]
    None,
    /// `FOR SHARE`: concurrent readers proceed, writers wait
    /// ([`crate::ChatMachine::read_lock`]).
    Share,
    /// `FOR UPDATE`: everyone else who locks or writes the row waits
    /// ([`crate::ChatMachine::lock`]).
    Update,
}

impl LockMode {
    fn select_sql(self) -> &'static str {
        match self {
            LockMode::None => "SELECT * FROM chats WHERE id = $1",
            LockMode::Share => "SELECT * FROM chats WHERE id = $1 FOR SHARE",
            LockMode::Update => "SELECT * FROM chats WHERE id = $1 FOR UPDATE",
        }
    }
}

/// Reads chat `chat_id` with the row lock `lock`; `None` when it does not
/// exist.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats::{self, LockMode};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // A plain read, and one that locks the row until its transaction ends.
/// let row = chats::select(pool, chat.id, LockMode::None).await?.expect("exists");
/// assert_eq!(row.snapshot_version, 1);
/// let mut tx = pool.begin().await?;
/// let locked = chats::select(&mut *tx, chat.id, LockMode::Update).await?;
/// assert_eq!(locked.map(|c| c.id), Some(chat.id));
/// tx.commit().await?;
/// assert!(chats::select(pool, uuid::Uuid::new_v4(), LockMode::Share).await?.is_none());
/// # Ok(()) }
/// ```
pub async fn select(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    lock: LockMode,
) -> sqlx::Result<Option<Chat>> {
    sqlx::query_as(lock.select_sql())
        .bind(chat_id)
        .fetch_optional(conn)
        .await
}

/// Reads chat `chat_id` `FOR UPDATE` in a transaction that will only read
/// (a worker task checking its fence before it reads the history): the
/// same statement turns `synchronous_commit` off for the transaction, so
/// its commit, which only releases the row lock, does not wait for a WAL
/// flush. Never write through such a transaction: its commit may be lost
/// in a crash.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut tx = pool.begin().await?;
/// let row = chats::select_for_update_to_read(&mut tx, chat.id).await?.expect("exists");
/// assert_eq!(row.snapshot_version, chat.snapshot_version);
/// let setting: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut *tx).await?;
/// assert_eq!(setting, "off");
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub async fn select_for_update_to_read(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<Chat>> {
    let sql = "SELECT c.* FROM chats c
         CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS s
         WHERE c.id = $1 FOR UPDATE OF c";
    super::keyed::optional(conn, sql, chat_id).await
}

/// The bump of the `locked` CTE's row and what [`Bumped`] reads beside it,
/// the end of every statement of [`lock_and_bump`] and
/// [`lock_and_bump_skip_locked`].
macro_rules! bump_locked {
    () => {
        " UPDATE chats SET snapshot_version = chats.snapshot_version + 1, updated_at = now()
         FROM locked WHERE chats.id = locked.id
         RETURNING chats.*,
             (SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = chats.id) AS queue_len,
             CASE WHEN chats.runner_id IS NOT NULL THEN
                 (SELECT extract(epoch FROM now() - h.heartbeat_at)::float8 FROM chat_heartbeats h
                  WHERE h.chat_id = chats.id AND h.runner_id = chats.runner_id) END AS heartbeat_age_secs,
             (SELECT s.snapshot_version FROM chats s WHERE s.id = chats.id) AS snapshot_seen"
    };
}

/// Locks the chat row `FOR UPDATE` and advances `snapshot_version` by one in
/// the same statement, returning the bumped row; `None` when the chat does not
/// exist. Must be the first write of every transition bundle (or, in an
/// optimistic bundle, `lock_and_bump_guessed` or the guarded `UPDATE` of
/// its first transition): the message triggers stamp rows with the
/// already-bumped version.
///
/// A sub-chat's root and parent are locked `FOR KEY SHARE` first, root
/// first, in the same statement. PostgreSQL takes those locks anyway when
/// the transaction updates the row again (a row this transaction already
/// updated has its foreign keys checked again), and taking them only then,
/// while holding the child's row, deadlocked against a family archive,
/// which locks the root first and then each member (race test
/// `child_transitions_racing_family_archives_never_deadlock`). Taken before
/// the child's row, every family transaction meets the others at the root.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut tx = pool.begin().await?;
/// let bumped = chats::lock_and_bump(&mut tx, chat.id).await?.expect("exists");
/// assert_eq!(bumped.facts.chat.snapshot_version, chat.snapshot_version + 1);
/// // Nobody changed the chat while the statement waited for its lock.
/// let facts = bumped.current_facts().expect("uncontended");
/// assert_eq!((facts.queue_len, facts.heartbeat_age_secs), (0, None));
/// // Another transaction skips the locked row instead of waiting for it.
/// let mut other = pool.begin().await?;
/// assert!(chats::lock_and_bump_skip_locked(&mut other, chat.id).await?.is_none());
/// other.rollback().await?;
/// tx.rollback().await?; // ChatMachine::begin and ChatTx::commit do this for real
/// # Ok(()) }
/// ```
pub async fn lock_and_bump(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Option<Bumped>> {
    // A root chat (no parent: most chats) has no family to key-share: one
    // index lookup fewer and a plan a third the size (issue 15). The row
    // lock is the same `FOR UPDATE`; a chat's parent and root never change,
    // so the filter cannot change while the statement waits for the lock.
    // A child, or a missing chat, takes the family statement below.
    let root = concat!(
        "WITH locked AS (SELECT id FROM chats
                    WHERE id = $1 AND root_chat_id IS NULL AND parent_chat_id IS NULL FOR UPDATE)
",
        bump_locked!()
    );
    if let Some(bumped) = super::keyed::optional(&mut *conn, root, chat_id).await? {
        return Ok(Some(bumped));
    }
    let sql = concat!(
        "WITH family AS (
             SELECT f.id FROM chats c JOIN chats f ON f.id IN (c.root_chat_id, c.parent_chat_id)
             WHERE c.id = $1 ORDER BY f.id = c.root_chat_id DESC FOR KEY SHARE OF f),
         locked AS (SELECT id FROM chats
                    WHERE id = $1 AND (SELECT count(*) FROM family) >= 0 FOR UPDATE)
",
        bump_locked!()
    );
    super::keyed::optional(conn, sql, chat_id).await
}

/// The lock-and-bump of an optimistic bundle that knows the row
/// (`crate::row_cache`): locks root chat `chat_id` `FOR UPDATE` and
/// advances `snapshot_version` as [`lock_and_bump`] does, only when it is
/// still at `snapshot_version = guess`, and returns the new `updated_at` and
/// its runner's heartbeat age (the rest of the row is the guess, but for
/// metadata written without a bump, which the transitions' own statements
/// read back). `None` when the guess is stale or the chat is gone.
///
/// # Errors
/// Database errors.
pub(crate) async fn lock_and_bump_guessed(
    conn: &mut PgConnection,
    chat_id: Uuid,
    guess: i64,
) -> sqlx::Result<Option<(chrono::DateTime<chrono::Utc>, Option<f64>)>> {
    sqlx::query_as(
        "WITH locked AS (SELECT id FROM chats WHERE id = $1 AND snapshot_version = $2
                    AND root_chat_id IS NULL AND parent_chat_id IS NULL FOR UPDATE)
         UPDATE chats SET snapshot_version = chats.snapshot_version + 1, updated_at = now()
         FROM locked WHERE chats.id = locked.id
         RETURNING chats.updated_at,
             CASE WHEN chats.runner_id IS NOT NULL THEN
                 (SELECT extract(epoch FROM now() - h.heartbeat_at)::float8 FROM chat_heartbeats h
                  WHERE h.chat_id = chats.id AND h.runner_id = chats.runner_id) END",
    )
    .bind(chat_id)
    .bind(guess)
    .fetch_optional(conn)
    .await
}

/// Like [`lock_and_bump`] with `SKIP LOCKED`: `None` when the row, or the
/// key-share lock of its root or parent, is held by another transaction, or
/// the chat is missing.
///
/// Example: [`lock_and_bump`].
pub async fn lock_and_bump_skip_locked(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<Bumped>> {
    let sql = concat!(
        "WITH family AS (
             SELECT f.id FROM chats c JOIN chats f ON f.id IN (c.root_chat_id, c.parent_chat_id)
             WHERE c.id = $1 ORDER BY f.id = c.root_chat_id DESC FOR KEY SHARE OF f SKIP LOCKED),
         expected AS (
             SELECT count(DISTINCT k) AS n FROM chats c,
                 unnest(ARRAY[c.root_chat_id, c.parent_chat_id]) AS k WHERE c.id = $1),
         locked AS (SELECT id FROM chats
                    WHERE id = $1 AND (SELECT count(*) FROM family) = (SELECT n FROM expected)
                    FOR UPDATE SKIP LOCKED)
",
        bump_locked!()
    );
    super::keyed::optional(conn, sql, chat_id).await
}

/// What [`lock_and_bump`] returns: the bumped row with its [`ChatFacts`],
/// and the row's `snapshot_version` in the statement's snapshot.
///
/// Under `READ COMMITTED` a statement that waited for the row lock updates
/// the newest row version, but its subqueries (the queue length, the
/// heartbeat) still read the snapshot taken before the wait, which misses
/// what the lock's previous holder committed. Every write to the queue
/// bumps the row under its lock, so the subqueries are current exactly when
/// the snapshot's row is the one just before the bump
/// ([`Bumped::current_facts`]).
///
/// Example: [`lock_and_bump`].
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Bumped {
    /// The bumped row and what the statement read beside it.
    #[sqlx(flatten)]
    pub facts: ChatFacts,
    /// `snapshot_version` of the row in the statement's snapshot.
    pub snapshot_seen: Option<i64>,
}

impl Bumped {
    /// The facts when they are current (no transaction committed a change
    /// of the chat between the statement's snapshot and its lock); `None`
    /// when the queue length and heartbeat age may be stale and must be
    /// read again ([`select_facts`]). The row itself always is current.
    pub fn current_facts(self) -> Option<ChatFacts> {
        (self.snapshot_seen == Some(self.facts.chat.snapshot_version - 1)).then_some(self.facts)
    }
}

/// The chat row, its queue length and its runner's heartbeat age
/// ([`ChatFacts`]; no row lock clause: callers hold the lock already or
/// read in a snapshot).
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut conn = pool.acquire().await?;
/// let row = chats::select_facts(&mut conn, chat.id).await?.expect("exists");
/// assert_eq!((row.chat.id, row.queue_len), (chat.id, 0));
/// // Running, nothing queued, no runner: a commit also publishes chat:ownership.
/// assert!(row.execution_state().is_runnable());
/// assert!(!row.fresh(30.0));
/// # Ok(()) }
/// ```
pub async fn select_facts(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<ChatFacts>> {
    select_facts_with(conn, chat_id, true).await
}

/// [`select_facts`], reading the context entries (when the history changed
/// in this transaction) only when `entries` is set: a bundle that knows them
/// ([`crate::context_cache`]) does not read them.
pub(crate) async fn select_facts_with(
    conn: &mut PgConnection,
    chat_id: Uuid,
    entries: bool,
) -> sqlx::Result<Option<ChatFacts>> {
    let sql = if entries {
        concat!(
            "SELECT c.*, ",
            chat_facts_columns!("c"),
            " FROM chats c WHERE c.id = $1"
        )
    } else {
        concat!(
            "SELECT c.*, ",
            chat_facts_columns_without_entries!("c"),
            " FROM chats c WHERE c.id = $1"
        )
    };
    super::keyed::optional(conn, sql, chat_id).await
}

/// Inserts the row of a new chat at `snapshot_version = 1` with `status`
/// and the metadata of `input` (title default [`crate::DEFAULT_CHAT_TITLE`]);
/// `root_chat_id` is the root of the parent's family and `depth` the new
/// chat's depth in it (0 for a root; API.md "Sub-agents and plan mode").
///
/// # Example
///
/// ```
/// use chatd_core::ChatStatus;
/// use chatd_store::CreateChatInput;
/// use chatd_store::queries::chats::{self, LockMode};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// let id = uuid::Uuid::new_v4();
/// let input = CreateChatInput {
///     owner_id: owner,
///     title: Some("Plans".into()),
///     ..Default::default()
/// };
/// let mut tx = pool.begin().await?;
/// chats::insert(&mut tx, id, None, 0, ChatStatus::Waiting, &input).await?;
/// let row = chats::select(&mut *tx, id, LockMode::None).await?.expect("inserted");
/// assert_eq!((row.title.as_str(), row.snapshot_version), ("Plans", 1));
/// tx.rollback().await?; // Store::create_chat inserts the history in the same transaction
/// # Ok(()) }
/// ```
pub async fn insert(
    conn: &mut PgConnection,
    id: Uuid,
    root_chat_id: Option<Uuid>,
    depth: i32,
    status: ChatStatus,
    input: &CreateChatInput,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO chats (id, owner_id, parent_chat_id, root_chat_id, status, snapshot_version, title, labels,
             last_model_config_id, last_reasoning_effort, dynamic_tools, mcp_server_ids, plan_mode,
             subagents, depth, spawn_key)
         VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(id)
    .bind(input.owner_id)
    .bind(input.parent_chat_id)
    .bind(root_chat_id)
    .bind(status.as_str())
    .bind(input.title.as_deref().unwrap_or(crate::DEFAULT_CHAT_TITLE))
    .bind(Json(&input.labels))
    .bind(input.last_model_config_id)
    .bind(&input.last_reasoning_effort)
    .bind(Json(&input.dynamic_tools))
    .bind(&input.mcp_server_ids)
    .bind(&input.plan_mode)
    .bind(input.subagents)
    .bind(depth)
    .bind(&input.spawn_key)
    .execute(conn)
    .await
    .map(|_| ())
}

/// The child of `parent` created by the `spawn_agent` call whose
/// idempotency key is `spawn_key`, if any (the unique
/// `chats_spawn_key_idx`, migration `0010_subagents.sql`).
///
/// # Errors
/// Database errors only.
///
/// Example: [`crate::ChatTx::create_child`].
pub async fn child_by_spawn_key(
    conn: impl PgExecutor<'_>,
    parent: Uuid,
    spawn_key: &str,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar("SELECT id FROM chats WHERE parent_chat_id = $1 AND spawn_key = $2")
        .bind(parent)
        .bind(spawn_key)
        .fetch_optional(conn)
        .await
}

/// Where a child of chat `parent` would go: the family root and whether the
/// family is closed to new members (the root or `parent` is archived).
///
/// Returned by [`lock_family_for_child`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildPlacement {
    /// The family root (`parent` itself when it is a root).
    pub root_chat_id: Uuid,
    /// The root or `parent` is archived: no child may be created under it.
    pub archived: bool,
    /// `parent`'s depth (0 for a root): the child's is one more.
    pub parent_depth: i32,
}

/// Locks the family a child of `parent` joins, root first and then
/// `parent`, both `FOR SHARE`, and returns where the child goes; `None` when
/// `parent` does not exist.
///
/// Root first is the order a family archive locks in (the root, then the
/// members by creation), so the two cannot deadlock, and the share lock on
/// the root serialises them: an archive that locked the root first has
/// committed before this returns (the child sees `archived`), and one that
/// comes later waits for the child's commit and then archives it with the
/// rest (issue 14: a child created during an archive stayed unarchived). The
/// lock on `parent` keeps it from being deleted before the child's row is
/// inserted.
///
/// # Errors
/// Database errors only.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let child = store
///     .create_chat(chatd_store::CreateChatInput {
///         owner_id: owner,
///         parent_chat_id: Some(chat.id),
///         initial_status: Some(chatd_core::ChatStatus::Waiting),
///         initial_messages: vec![chatd_store::NewMessage::user(vec![
///             chatd_core::MessagePart::text("sub-task"),
///         ])],
///         ..Default::default()
///     })
///     .await?
///     .chat;
/// let mut tx = pool.begin().await?;
/// let placement = chats::lock_family_for_child(&mut tx, child.id).await?.unwrap();
/// assert_eq!((placement.root_chat_id, placement.archived), (chat.id, false));
/// assert_eq!(chats::lock_family_for_child(&mut tx, uuid::Uuid::new_v4()).await?, None);
/// # Ok(()) }
/// ```
pub async fn lock_family_for_child(
    conn: &mut PgConnection,
    parent: Uuid,
) -> sqlx::Result<Option<ChildPlacement>> {
    // A chat's root never changes, so it may be read before any lock.
    let root: Option<Option<Uuid>> =
        sqlx::query_scalar("SELECT root_chat_id FROM chats WHERE id = $1")
            .bind(parent)
            .fetch_optional(&mut *conn)
            .await?;
    let Some(root) = root else {
        return Ok(None);
    };
    let root = root.unwrap_or(parent);
    let mut archived = false;
    if root != parent {
        let root_archived: Option<bool> =
            sqlx::query_scalar("SELECT archived FROM chats WHERE id = $1 FOR SHARE")
                .bind(root)
                .fetch_optional(&mut *conn)
                .await?;
        match root_archived {
            Some(a) => archived |= a,
            None => return Ok(None),
        }
    }
    let parent_row: Option<(bool, i32)> =
        sqlx::query_as("SELECT archived, depth FROM chats WHERE id = $1 FOR SHARE")
            .bind(parent)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(parent_row.map(|(a, depth)| ChildPlacement {
        root_chat_id: root,
        archived: archived || a,
        parent_depth: depth,
    }))
}

/// Fields of the chat row a transition may set. `None` leaves a column alone.
///
/// Example: [`update_execution`].
#[derive(Debug, Default, Clone)]
pub struct ChatChanges {
    /// New status.
    pub status: Option<ChatStatus>,
    /// New archived marker.
    pub archived: Option<bool>,
    /// New `last_error` (`Some(None)` clears it).
    pub last_error: Option<Option<ChatError>>,
    /// New `retry_state`.
    pub retry_state: Option<Option<RetryState>>,
    /// New `requires_action_deadline_at`, as `now() + seconds` (`Some(None)` clears it).
    pub deadline_in_secs: Option<Option<f64>>,
    /// New ownership (`Some((None, None))` clears it).
    pub ownership: Option<(Option<Uuid>, Option<Uuid>)>,
    /// Add one to `generation_attempt`.
    pub bump_generation_attempt: bool,
    /// New `last_model_config_id` (only set when `Some`).
    pub last_model_config_id: Option<Uuid>,
    /// New `last_reasoning_effort` (only set when `Some`).
    pub last_reasoning_effort: Option<String>,
    /// `compaction_requested_at`: `Some(true)` sets it to `now()`, `Some(false)` clears it.
    pub compaction_requested: Option<bool>,
    /// Start a fresh history epoch without a message change
    /// (`history_version = snapshot_version`, `generation_attempt = 0`).
    pub fresh_history_epoch: bool,
}

/// Applies `changes` to the chat row and returns the new row. Only the
/// transitions call it: these are execution-state columns.
///
/// # Example
///
/// ```
/// use chatd_core::ChatStatus;
/// use chatd_store::queries::chats::{self, ChatChanges};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut tx = pool.begin().await?;
/// chats::lock_and_bump(&mut tx, chat.id).await?;
/// let changes = ChatChanges {
///     status: Some(ChatStatus::Waiting),
///     ..Default::default()
/// };
/// let row = chats::update_execution(&mut tx, chat.id, &changes).await?;
/// assert_eq!(row.status, ChatStatus::Waiting);
/// tx.rollback().await?; // the transitions (crate::transitions) do this for real
/// # Ok(()) }
/// ```
pub async fn update_execution(
    conn: &mut PgConnection,
    chat_id: Uuid,
    changes: &ChatChanges,
) -> sqlx::Result<Chat> {
    Ok(update_execution_facts(conn, chat_id, changes).await?.chat)
}

/// [`update_execution`] returning the updated row's [`ChatFacts`], read by
/// the same statement (a transition whose last write it is checks where it
/// landed without reading the row again).
///
/// # Errors
/// `RowNotFound` when the chat does not exist; database errors.
///
/// Example: [`update_execution`]; the transitions use it.
pub async fn update_execution_facts(
    conn: &mut PgConnection,
    chat_id: Uuid,
    changes: &ChatChanges,
) -> sqlx::Result<ChatFacts> {
    update_execution_facts_with(conn, chat_id, changes, true, None).await
}

/// [`update_execution_facts`], reading the context entries only when
/// `entries` is set (as [`select_facts_with`]).
///
/// With `context` (tokens, estimated, the last message the newest summary
/// covers: `queries::messages::context_values`), the statement writes the
/// context columns too, as `queries::messages::refresh_context_from` does;
/// but not when `changes.last_model_config_id` is set (the window would be
/// read from the row's model before this statement): the caller writes the
/// context later then.
pub(crate) async fn update_execution_facts_with(
    conn: &mut PgConnection,
    chat_id: Uuid,
    changes: &ChatChanges,
    entries: bool,
    context: Option<(i64, bool, Option<i64>)>,
) -> sqlx::Result<ChatFacts> {
    update_execution_guarded(conn, chat_id, changes, entries, context, None)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}

/// [`update_execution_facts_with`] that, with `guess = Some(v)`, is also
/// the lock-and-bump of an optimistic bundle (`crate::row_cache`): it
/// locks the row `FOR UPDATE` and advances `snapshot_version` and
/// `updated_at` as [`lock_and_bump`] does, and only when the row is a root
/// chat still at `snapshot_version = v` (checked again on the row a
/// waited-for lock holder left). `None` when that
/// check fails or the chat is missing: the guess was stale and the caller
/// rolls back. A child chat never matches, since its bundles key-share
/// its family first ([`lock_and_bump`]).
///
/// # Errors
/// Database errors; `RowNotFound` without a guess when the chat does not
/// exist.
pub(crate) async fn update_execution_guarded(
    conn: &mut PgConnection,
    chat_id: Uuid,
    changes: &ChatChanges,
    entries: bool,
    context: Option<(i64, bool, Option<i64>)>,
    guess: Option<i64>,
) -> sqlx::Result<Option<ChatFacts>> {
    let context = context.filter(|_| changes.last_model_config_id.is_none());
    let mut sets: Vec<String> = Vec::new();
    let mut n = 1;
    let mut next = || {
        n += 1;
        format!("${n}")
    };
    if changes.status.is_some() {
        sets.push(format!("status = {}", next()));
    }
    if changes.archived.is_some() {
        sets.push(format!("archived = {}", next()));
    }
    if changes.last_error.is_some() {
        sets.push(format!("last_error = {}", next()));
    }
    if changes.retry_state.is_some() {
        sets.push(format!("retry_state = {}", next()));
    }
    if let Some(deadline) = changes.deadline_in_secs {
        match deadline {
            Some(_) => sets.push(format!(
                "requires_action_deadline_at = now() + make_interval(secs => {})",
                next()
            )),
            None => sets.push("requires_action_deadline_at = NULL".to_owned()),
        }
    }
    if changes.ownership.is_some() {
        sets.push(format!("worker_id = {}", next()));
        sets.push(format!("runner_id = {}", next()));
    }
    if changes.bump_generation_attempt {
        sets.push("generation_attempt = generation_attempt + 1".to_owned());
    }
    if changes.last_model_config_id.is_some() {
        sets.push(format!("last_model_config_id = {}", next()));
    }
    if changes.last_reasoning_effort.is_some() {
        sets.push(format!("last_reasoning_effort = {}", next()));
    }
    match changes.compaction_requested {
        Some(true) => sets.push("compaction_requested_at = now()".to_owned()),
        Some(false) => sets.push("compaction_requested_at = NULL".to_owned()),
        None => {}
    }
    if changes.fresh_history_epoch {
        // The bumped version: a guarded statement bumps it itself, and the
        // right-hand side of a `SET` reads the row before the statement.
        sets.push(if guess.is_some() {
            "history_version = c.snapshot_version + 1".to_owned()
        } else {
            "history_version = snapshot_version".to_owned()
        });
        sets.push("generation_attempt = 0".to_owned());
    }
    if context.is_some() {
        sets.push(format!("context_tokens = {}", next()));
        sets.push(format!("context_estimated = {}", next()));
        sets.push(format!("compacted_through_message_id = {}", next()));
        // The context comes from a bundle's log, which follows only
        // appends of ordinary rows: the summaries are not counted again.
        sets.push(context_limit_set!().to_owned());
    }
    // The guessed version is bound last. The row is locked `FOR UPDATE`
    // as by the lock-and-bump (an `UPDATE` alone takes the weaker
    // `FOR NO KEY UPDATE`, which would let a child's key-share through).
    let (mut with, mut from) = (String::new(), "");
    if guess.is_some() {
        sets.push("snapshot_version = c.snapshot_version + 1, updated_at = now()".to_owned());
        with = format!(
            "WITH locked AS (SELECT id FROM chats WHERE id = $1 AND snapshot_version = {} \
             AND root_chat_id IS NULL AND parent_chat_id IS NULL FOR UPDATE) ",
            next()
        );
        from = " FROM locked";
    }
    if sets.is_empty() {
        return Ok(Some(
            select_facts_with(conn, chat_id, entries)
                .await?
                .ok_or(sqlx::Error::RowNotFound)?,
        ));
    }
    let columns = if entries {
        chat_facts_columns!("c")
    } else {
        chat_facts_columns_without_entries!("c")
    };
    let sql = format!(
        "{with}UPDATE chats c SET {}{from} WHERE c.id = $1 RETURNING c.*, {columns}",
        sets.join(", ")
    );
    let mut query = sqlx::query_as::<_, ChatFacts>(AssertSqlSafe(sql)).bind(chat_id);
    if let Some(status) = changes.status {
        query = query.bind(status.as_str());
    }
    if let Some(archived) = changes.archived {
        query = query.bind(archived);
    }
    if let Some(last_error) = &changes.last_error {
        query = query.bind(last_error.as_ref().map(Json));
    }
    if let Some(retry_state) = &changes.retry_state {
        query = query.bind(retry_state.as_ref().map(Json));
    }
    if let Some(Some(secs)) = changes.deadline_in_secs {
        query = query.bind(secs);
    }
    if let Some((worker, runner)) = changes.ownership {
        query = query.bind(worker).bind(runner);
    }
    if let Some(id) = changes.last_model_config_id {
        query = query.bind(id);
    }
    if let Some(effort) = &changes.last_reasoning_effort {
        query = query.bind(effort.clone());
    }
    if let Some((tokens, estimated, through)) = context {
        query = query.bind(tokens).bind(estimated).bind(through);
    }
    if let Some(version) = guess {
        query = query.bind(version);
    }
    let row = query.fetch_optional(conn).await?;
    if guess.is_none() && row.is_none() {
        return Err(sqlx::Error::RowNotFound);
    }
    Ok(row)
}

// ---------------------------------------------------------------- metadata

/// Whether chat `chat_id` exists and belongs to `owner`.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// assert!(chats::is_owned_by(pool, chat.id, owner).await?);
/// assert!(!chats::is_owned_by(pool, chat.id, uuid::Uuid::new_v4()).await?);
/// # Ok(()) }
/// ```
pub async fn is_owned_by(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    owner: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM chats WHERE id = $1 AND owner_id = $2)")
        .bind(chat_id)
        .bind(owner)
        .fetch_one(conn)
        .await
}

/// Filters of `GET /chats`.
///
/// Example: [`list`].
#[derive(Debug, Clone)]
pub struct ChatFilter {
    /// Whose chats.
    pub owner: Uuid,
    /// Archived ones or unarchived ones.
    pub archived: bool,
    /// Case-insensitive title substring.
    pub q: Option<String>,
    /// Label keys that must match...
    pub label_keys: Vec<String>,
    /// ...these values, pairwise.
    pub label_values: Vec<String>,
    /// Cursor: the last chat of the previous page.
    pub after_id: Option<Uuid>,
    /// Page size.
    pub limit: i64,
    /// `Some(parent)`: only the children of `parent`; `None`: only root
    /// chats (children are hidden from the default list, API.md
    /// "Sub-agents and plan mode").
    pub parent_id: Option<Uuid>,
}

/// A page of chats, newest `updated_at` first, ties by id descending.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats::{self, ChatFilter};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut filter = ChatFilter {
///     owner,
///     archived: false,
///     q: Some("new".into()), // the default title, "New Chat"
///     label_keys: vec![],
///     label_values: vec![],
///     after_id: None,
///     limit: 50,
///     parent_id: None,
/// };
/// let page = chats::list(pool, &filter).await?;
/// assert_eq!(page.iter().map(|c| c.id).collect::<Vec<_>>(), vec![chat.id]);
/// filter.label_keys = vec!["topic".into()];
/// filter.label_values = vec!["travel".into()];
/// assert!(chats::list(pool, &filter).await?.is_empty());
/// # Ok(()) }
/// ```
pub async fn list(conn: impl PgExecutor<'_>, f: &ChatFilter) -> sqlx::Result<Vec<Chat>> {
    sqlx::query_as(
        "SELECT c.* FROM chats c
         WHERE c.owner_id = $1
           AND c.archived = $2
           AND ($3::text IS NULL OR strpos(lower(c.title), lower($3)) > 0)
           AND NOT EXISTS (
               SELECT 1 FROM unnest($4::text[], $5::text[]) AS f(k, v)
               WHERE (c.labels ->> f.k) IS DISTINCT FROM f.v)
           AND ($6::uuid IS NULL
                OR (c.updated_at, c.id) < (SELECT a.updated_at, a.id FROM chats a WHERE a.id = $6))
           AND (($8::uuid IS NULL AND c.parent_chat_id IS NULL) OR c.parent_chat_id = $8)
         ORDER BY c.updated_at DESC, c.id DESC
         LIMIT $7",
    )
    .bind(f.owner)
    .bind(f.archived)
    .bind(&f.q)
    .bind(&f.label_keys)
    .bind(&f.label_values)
    .bind(f.after_id)
    .bind(f.limit)
    .bind(f.parent_id)
    .fetch_all(conn)
    .await
}

/// Metadata fields of a `PATCH /chats/{chat}`; `None` keeps a column.
///
/// Example: [`update_metadata`].
#[derive(Debug, Clone, Default)]
pub struct MetadataChanges {
    /// New title.
    pub title: Option<String>,
    /// New labels (replacing every label).
    pub labels: Option<BTreeMap<String, String>>,
    /// New pin order.
    pub pin_order: Option<i32>,
    /// New plan mode (`Some(None)` clears it).
    pub plan_mode: Option<Option<String>>,
}

/// Applies metadata changes and advances `updated_at` (strictly, even within
/// one microsecond), returning the row. The caller holds the row lock.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_store::queries::chats::{self, MetadataChanges};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let changes = MetadataChanges {
///     title: Some("Trip".into()),
///     labels: Some(BTreeMap::from([("topic".into(), "travel".into())])),
///     ..Default::default()
/// };
/// let mut locked = store.machine(chat.id).lock().await?;
/// let row = chats::update_metadata(locked.conn(), chat.id, &changes).await?;
/// locked.finish().await?;
/// assert_eq!((row.title.as_str(), row.labels["topic"].as_str()), ("Trip", "travel"));
/// // Metadata is not execution state: no snapshot bump, but a newer updated_at.
/// assert_eq!(row.snapshot_version, chat.snapshot_version);
/// assert!(row.updated_at > chat.updated_at);
/// # Ok(()) }
/// ```
pub async fn update_metadata(
    conn: &mut PgConnection,
    chat_id: Uuid,
    c: &MetadataChanges,
) -> sqlx::Result<Chat> {
    sqlx::query_as(
        "UPDATE chats SET
             title = COALESCE($2, title),
             labels = COALESCE($3, labels),
             pin_order = COALESCE($4, pin_order),
             plan_mode = CASE WHEN $5 THEN $6 ELSE plan_mode END,
             updated_at = greatest(now(), updated_at + interval '1 microsecond')
         WHERE id = $1
         RETURNING *",
    )
    .bind(chat_id)
    .bind(&c.title)
    .bind(c.labels.as_ref().map(Json))
    .bind(c.pin_order)
    .bind(c.plan_mode.is_some())
    .bind(c.plan_mode.clone().flatten())
    .fetch_one(conn)
    .await
}

/// Sets the title of chat `chat_id` to `title` if it still has the default
/// title ([`crate::DEFAULT_CHAT_TITLE`]), advancing `updated_at` like
/// [`update_metadata`]; returns whether it did. The caller holds the row
/// lock.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut locked = store.machine(chat.id).lock().await?;
/// assert!(chats::set_title_if_default(locked.conn(), chat.id, "Greetings").await?);
/// // Only the default title is replaced.
/// assert!(!chats::set_title_if_default(locked.conn(), chat.id, "Other").await?);
/// locked.finish().await?;
/// # Ok(()) }
/// ```
pub async fn set_title_if_default(
    conn: &mut PgConnection,
    chat_id: Uuid,
    title: &str,
) -> sqlx::Result<bool> {
    let updated = sqlx::query(
        "UPDATE chats SET title = $2, updated_at = greatest(now(), updated_at + interval '1 microsecond')
         WHERE id = $1 AND title = $3",
    )
    .bind(chat_id)
    .bind(title)
    .bind(crate::DEFAULT_CHAT_TITLE)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(updated == 1)
}

// ---------------------------------------------------------------- families

/// A chat of a family that `DELETE` found not deletable
/// ([`ExecutionState::is_deletable`]): busy, or invalid.
///
/// Example: [`delete_family`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotDeletable {
    /// The chat.
    pub chat_id: Uuid,
    /// Its execution state when it was checked.
    pub state: ExecutionState,
}

/// Deletes chat `chat_id` with its rows and descendants (by
/// `parent_chat_id`; `ON DELETE CASCADE` removes the rest) if every one of
/// them is deletable ([`ExecutionState::is_deletable`]); otherwise deletes
/// nothing and returns the first one that is not, in id order. Locks the
/// whole subtree `FOR UPDATE` in id order first; the caller holds the lock
/// of `chat_id` already (a [`crate::ChatMachine::lock`]).
///
/// # Example
///
/// ```
/// use chatd_core::ExecutionState;
/// use chatd_store::queries::chats::{self, LockMode};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // A running chat is not deletable...
/// let mut locked = store.machine(chat.id).lock().await?;
/// let refused = chats::delete_family(locked.conn(), chat.id).await?.unwrap_err();
/// assert_eq!((refused.chat_id, refused.state), (chat.id, ExecutionState::R0));
/// locked.finish().await?;
/// // ...a waiting one is.
/// let machine = store.machine(chat.id);
/// machine.update(|tx| Box::pin(async move { tx.finish_turn().await })).await?;
/// let mut locked = machine.lock().await?;
/// chats::delete_family(locked.conn(), chat.id).await?.expect("deletable");
/// locked.finish().await?;
/// assert!(chats::select(pool, chat.id, LockMode::None).await?.is_none());
/// # Ok(()) }
/// ```
pub async fn delete_family(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Result<(), NotDeletable>> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "WITH RECURSIVE sub AS (
             SELECT id FROM chats WHERE id = $1
             UNION
             SELECT c.id FROM chats c JOIN sub ON c.parent_chat_id = sub.id)
         SELECT c.id FROM chats c WHERE c.id IN (SELECT id FROM sub) ORDER BY c.id FOR UPDATE",
    )
    .bind(chat_id)
    .fetch_all(&mut *conn)
    .await?;
    let family: Vec<(Uuid, String, bool, bool)> = sqlx::query_as(
        "SELECT c.id, c.status, c.archived,
                EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = c.id)
         FROM chats c WHERE c.id = ANY($1) ORDER BY c.id",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    for (member, status, archived, queued) in family {
        let status: ChatStatus = status
            .parse()
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        let state = classify(Some((status, archived, queued)));
        if !state.is_deletable() {
            return Ok(Err(NotDeletable {
                chat_id: member,
                state,
            }));
        }
    }
    sqlx::query("DELETE FROM chats WHERE id = $1")
        .bind(chat_id)
        .execute(conn)
        .await?;
    Ok(Ok(()))
}

/// The members of root chat `root_id`'s family other than the root, by
/// creation (the order [`crate::Store::set_family_archived`] locks them in).
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let child = store
///     .create_chat(chatd_store::CreateChatInput {
///         owner_id: owner,
///         parent_chat_id: Some(chat.id),
///         initial_messages: vec![chatd_store::NewMessage::user(vec![
///             chatd_core::MessagePart::text("sub-task"),
///         ])],
///         ..Default::default()
///     })
///     .await?
///     .chat;
/// let mut conn = pool.acquire().await?;
/// assert_eq!(chats::family_members(&mut conn, chat.id).await?, vec![child.id]);
/// # Ok(()) }
/// ```
pub async fn family_members(conn: &mut PgConnection, root_id: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM chats WHERE root_chat_id = $1 AND id <> $1 ORDER BY created_at, id",
    )
    .bind(root_id)
    .fetch_all(conn)
    .await
}

/// The descendants of chat `chat_id` (by `parent_chat_id`), parents before
/// their children, then by creation: the order
/// [`crate::Store::set_subtree_archived`] locks them in (a sub-order of
/// [`family_members`]'s, so the two cannot deadlock).
///
/// # Errors
/// Database errors only.
///
/// Example: [`crate::Store::set_subtree_archived`].
pub async fn subtree_members(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "WITH RECURSIVE sub AS (
             SELECT c.id, c.depth, c.created_at FROM chats c WHERE c.parent_chat_id = $1
             UNION
             SELECT c.id, c.depth, c.created_at FROM chats c JOIN sub ON c.parent_chat_id = sub.id)
         SELECT id FROM sub ORDER BY created_at, id",
    )
    .bind(chat_id)
    .fetch_all(conn)
    .await
}

/// What a parent's `wait_agent` reads of a child (API.md "Sub-agents and
/// plan mode"): returned by [`child_progress`].
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ChildProgress {
    /// The child's parent.
    pub parent_chat_id: Option<Uuid>,
    /// Its execution status.
    #[sqlx(try_from = "String")]
    pub status: ChatStatus,
    /// Its archived marker.
    pub archived: bool,
    /// Messages in its queue.
    pub queued: i64,
    /// The content of its newest visible assistant message, if any.
    pub last_message: Option<Json<Vec<chatd_core::MessagePart>>>,
    /// Seconds from `since` to now (database time; negative when `since`
    /// is in the future).
    pub elapsed_secs: f64,
}

/// Reads `child`'s progress without any lock (a plain snapshot read, so a
/// waiting parent never holds a lock on its child); `None` when it does not
/// exist. `since` is the durable start of the wait (the time the call was
/// committed).
///
/// # Errors
/// Database errors only.
///
/// Example: `chatd-worker`'s `tests/it/subagents.rs`.
pub async fn child_progress(
    conn: impl PgExecutor<'_>,
    child: Uuid,
    since: DateTime<Utc>,
) -> sqlx::Result<Option<ChildProgress>> {
    sqlx::query_as(
        "SELECT c.parent_chat_id, c.status, c.archived,
                (SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = c.id) AS queued,
                (SELECT m.content FROM chat_messages m
                  WHERE m.chat_id = c.id AND m.role = 'assistant' AND NOT m.deleted
                    AND m.visibility <> 'model'
                  ORDER BY m.id DESC LIMIT 1) AS last_message,
                extract(epoch FROM now() - $2::timestamptz)::float8 AS elapsed_secs
         FROM chats c WHERE c.id = $1",
    )
    .bind(child)
    .bind(since)
    .fetch_optional(conn)
    .await
}

/// Root chats the auto-archive loop may archive: not archived, not pinned,
/// every member of the family idle (idle status, nothing queued) with no
/// change for `idle_for` (database time); ordered by `(updated_at, id)`, at
/// most `limit`, after the keyset `after`. See
/// [`crate::Store::auto_archive_candidates`].
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let machine = store.machine(chat.id);
/// machine.update(|tx| Box::pin(async move { tx.finish_turn().await })).await?;
/// let found = chats::auto_archive_candidates(pool, Duration::ZERO, 10, None).await?;
/// assert_eq!(found.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![chat.id]);
/// // Idle for less than an hour: not a candidate yet.
/// let hour = Duration::from_secs(3600);
/// assert!(chats::auto_archive_candidates(pool, hour, 10, None).await?.is_empty());
/// # Ok(()) }
/// ```
pub async fn auto_archive_candidates(
    conn: impl PgExecutor<'_>,
    idle_for: Duration,
    limit: i64,
    after: Option<(DateTime<Utc>, Uuid)>,
) -> sqlx::Result<Vec<(Uuid, DateTime<Utc>)>> {
    let (after_at, after_id) = after.unzip();
    sqlx::query_as(concat!(
        "SELECT r.id, r.updated_at FROM chats r
         WHERE r.parent_chat_id IS NULL AND NOT r.archived AND r.pin_order = 0
           AND r.updated_at < now() - make_interval(secs => $1)
           AND ($3::timestamptz IS NULL OR (r.updated_at, r.id) > ($3, $4))
           AND NOT EXISTS (
             SELECT 1 FROM chats m
             WHERE (m.id = r.id OR m.root_chat_id = r.id)
               AND (NOT (",
        idle_status_sql!("m."),
        ")
                    OR m.updated_at >= now() - make_interval(secs => $1)
                    OR EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = m.id)))
         ORDER BY r.updated_at, r.id
         LIMIT $2"
    ))
    .bind(idle_for.as_secs_f64())
    .bind(limit)
    .bind(after_at)
    .bind(after_id)
    .fetch_all(conn)
    .await
}

/// Locks the family of root chat `root_id` for an auto-archive, never
/// waiting (`FOR UPDATE NOWAIT`: PostgreSQL's `55P03` when a row is held
/// elsewhere), root first and then the other members by creation, and
/// checks it still qualifies: the chat exists, is a root, is neither
/// archived nor pinned, and it and every member had no change for
/// `idle_for` (database time).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut tx = pool.begin().await?;
/// assert!(chats::lock_idle_family_nowait(&mut tx, chat.id, Duration::ZERO).await?);
/// // While it is held, another locker fails at once with 55P03.
/// let mut other = pool.begin().await?;
/// let err = chats::lock_idle_family_nowait(&mut other, chat.id, Duration::ZERO)
///     .await
///     .unwrap_err();
/// let code = err.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
/// assert_eq!(code.as_deref(), Some("55P03"));
/// # Ok(()) }
/// ```
pub async fn lock_idle_family_nowait(
    conn: &mut PgConnection,
    root_id: Uuid,
    idle_for: Duration,
) -> sqlx::Result<bool> {
    let root: Option<(Option<Uuid>, bool, i32, bool)> = sqlx::query_as(
        "SELECT parent_chat_id, archived, pin_order,
                updated_at < now() - make_interval(secs => $2)
         FROM chats WHERE id = $1 FOR UPDATE NOWAIT",
    )
    .bind(root_id)
    .bind(idle_for.as_secs_f64())
    .fetch_optional(&mut *conn)
    .await?;
    if !matches!(root, Some((None, false, 0, true))) {
        return Ok(false);
    }
    let children_idle: Vec<bool> = sqlx::query_scalar(
        "SELECT updated_at < now() - make_interval(secs => $2) FROM chats
         WHERE root_chat_id = $1 AND id <> $1 ORDER BY created_at, id
         FOR UPDATE NOWAIT",
    )
    .bind(root_id)
    .bind(idle_for.as_secs_f64())
    .fetch_all(conn)
    .await?;
    Ok(!children_idle.contains(&false))
}

// ---------------------------------------------------------------- workers

/// `FROM chats held WHERE ...`: the chats of the owner `$owner` (an SQL
/// expression) that take a slot under their owner's running-chat cap. A
/// runner holds them (a worker and runner set and a heartbeat of that
/// runner newer than `$1` seconds) and their status is not `requires_action`:
/// such a chat only waits on a timer (for client tool results or
/// approvals) and takes no slot. A held `interrupting` chat keeps the slot
/// it ran in until it has landed and its runner lets it go (else the slot
/// would be given away while the chat still holds it as an idle chat); an
/// *unheld* one needs no room to be acquired ([`acquisition_candidates`]).
/// Held idle chats (`waiting`, `error`) count: a runner keeps
/// a chat that went idle for `abandon_idle_after` and answers a message
/// sent meanwhile without a new `Acquire`, so a held idle chat must keep
/// its slot or the cap could be passed that way.
macro_rules! counted_held_sql {
    ($owner:literal) => {
        concat!(
            " FROM chats held WHERE held.owner_id = ",
            $owner,
            " AND held.worker_id IS NOT NULL AND held.runner_id IS NOT NULL
              AND held.status <> 'requires_action'
              AND EXISTS (SELECT 1 FROM chat_heartbeats hb
                           WHERE hb.chat_id = held.id AND hb.runner_id = held.runner_id
                             AND hb.heartbeat_at >= now() - make_interval(secs => $1))"
        )
    };
}

/// `SELECT count(*)` of the slots the owner `$owner` (an SQL expression)
/// takes under their running-chat cap: the distinct chat families
/// (`coalesce(root_chat_id, id)`: a root chat and its sub-agents share the
/// root's slot) among the chats of [`counted_held_sql`].
macro_rules! held_chats_sql {
    ($owner:literal) => {
        concat!(
            "SELECT count(DISTINCT coalesce(held.root_chat_id, held.id))",
            counted_held_sql!($owner)
        )
    };
}

/// What [`acquisition_candidates`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcquisitionCandidates {
    /// Chats to try to acquire, at most the `limit` asked for, in the order
    /// of [`acquisition_candidates`]: per user, the chats that take no new
    /// slot and the chats of the first families that fit in the room
    /// under their running-chat cap; ranked by the owner's held slots plus
    /// the chat's place among the owner's candidates, then turn start.
    pub chat_ids: Vec<Uuid>,
    /// Some user has more families waiting for a slot than room under
    /// their cap: those chats wait (a runner that ends should wake
    /// acquisition).
    pub blocked: bool,
}

/// Chats a worker may acquire (spec "Acquisition loop"; API.md "Limits,
/// budgets and the token lifecycle": "Running chats"): runnable
/// ([`crate::rules::RUNNABLE_CHAT_SQL`]) and held by no runner (no worker,
/// or no heartbeat of the current runner newer than `stale_after_secs`,
/// database time), and within their owner's running-chat cap.
///
/// A user's cap is `users.max_running_chats`, or `default_max_running_chats`
/// when the row has none; it counts slots, one per chat family (a root and
/// its sub-agents) that a runner holds (see [`held_chat_count`]). Which
/// waiting chats are returned:
///
/// - a chat in `requires_action` or `interrupting`: always (it needs no
///   new slot: it waits on a timer, or only finishes; a chat interrupted
///   while it waited for a slot lands at once);
/// - a `running` chat whose family already holds a slot (a sub-agent its
///   parent waits for in `wait_agent`): always (it adds no family);
/// - any other `running` chat needs a new slot: per user, the families
///   waiting for one are ranked by their earliest turn start
///   (`turn_started_at`) and only the chats of the first `cap - held`
///   families are returned.
///
/// The result is ranked by the owner's held slots plus the chat's place
/// among the owner's returned chats (by turn start), then turn start, then
/// id: a user holding fewer slots goes first, and one user's thousand
/// waiting chats never fill the batch ahead of another user's; at most
/// `limit` ids. A hint: a claim checks again under the row lock and under
/// the owner's lock ([`lock_owner_room`], [`family_holds_slot`]).
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // Running and held by no runner: a candidate.
/// let found = chats::acquisition_candidates(pool, 30.0, 10, 8).await?;
/// assert_eq!((found.chat_ids, found.blocked), (vec![chat.id], false));
/// // With a cap of 0 for everyone, it waits.
/// let found = chats::acquisition_candidates(pool, 30.0, 10, 0).await?;
/// assert_eq!((found.chat_ids, found.blocked), (vec![], true));
/// // Interrupted meanwhile, it takes no slot: a candidate even so.
/// let machine = store.machine(chat.id);
/// machine.update(|tx| Box::pin(async move { tx.interrupt().await.map(|_| ()) })).await?;
/// let found = chats::acquisition_candidates(pool, 30.0, 10, 0).await?;
/// assert_eq!((found.chat_ids, found.blocked), (vec![chat.id], false));
/// // Acquired, with a fresh heartbeat: not.
/// let (worker, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
/// machine.update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await })).await?;
/// let found = chats::acquisition_candidates(pool, 30.0, 10, 8).await?;
/// assert_eq!((found.chat_ids, found.blocked), (vec![], false));
/// # Ok(()) }
/// ```
pub async fn acquisition_candidates(
    conn: impl PgExecutor<'_>,
    stale_after_secs: f64,
    limit: i64,
    default_max_running_chats: i32,
) -> sqlx::Result<AcquisitionCandidates> {
    let (chat_ids, blocked): (Vec<Uuid>, bool) = sqlx::query_as(concat!(
        "WITH waiting AS (
            SELECT c.id, c.owner_id, c.turn_started_at, coalesce(c.root_chat_id, c.id) AS family,
                   c.status IN ('requires_action', 'interrupting') AS slotless
              FROM chats c
             WHERE ",
        runnable_chat_sql!("c."),
        " AND (c.worker_id IS NULL OR c.runner_id IS NULL OR NOT EXISTS (
                    SELECT 1 FROM chat_heartbeats h WHERE h.chat_id = c.id AND h.runner_id = c.runner_id
                      AND h.heartbeat_at >= now() - make_interval(secs => $1)))
         ), owners AS (
            SELECT u.id AS owner_id, coalesce(u.max_running_chats, $3) AS cap,
                   ARRAY(SELECT DISTINCT coalesce(held.root_chat_id, held.id)",
        counted_held_sql!("u.id"),
        ") AS families
              FROM users u WHERE u.id IN (SELECT owner_id FROM waiting)
         ), classed AS (
            SELECT w.id, w.owner_id, w.turn_started_at, w.family, o.cap,
                   cardinality(o.families) AS held,
                   w.slotless OR w.family = ANY (o.families) AS free
              FROM waiting w JOIN owners o USING (owner_id)
         ), new_families AS (
            SELECT owner_id, family,
                   row_number() OVER (PARTITION BY owner_id ORDER BY min(turn_started_at), family) AS place
              FROM classed WHERE NOT free GROUP BY owner_id, family
         ), eligible AS (
            SELECT c.id, c.turn_started_at,
                   c.held + row_number() OVER (PARTITION BY c.owner_id ORDER BY c.turn_started_at, c.id) AS rank
              FROM classed c LEFT JOIN new_families f USING (owner_id, family)
             WHERE c.free OR f.place <= c.cap - c.held
         )
         SELECT ARRAY(SELECT id FROM eligible ORDER BY rank, turn_started_at, id LIMIT $2),
                EXISTS (SELECT 1 FROM classed c JOIN new_families f USING (owner_id, family)
                         WHERE f.place > c.cap - c.held)"
    ))
    .bind(stale_after_secs)
    .bind(limit)
    .bind(default_max_running_chats)
    .fetch_one(conn)
    .await?;
    Ok(AcquisitionCandidates { chat_ids, blocked })
}

/// How many running-chat slots of `owner_id` runners take now (API.md
/// "Running chats"; `running_chats` of the usage report): the distinct
/// chat families (`coalesce(root_chat_id, id)`: a root and its sub-agents
/// share one slot) of the chats with a worker and runner whose heartbeat
/// is newer than `stale_after_secs` (database time) and whose status is
/// not `requires_action` (waiting for a client, it takes no slot). Held idle
/// chats count: a runner keeps a chat that went idle for a moment, and a
/// message sent meanwhile runs without a new `Acquire`. This is what the
/// running-chat cap counts.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// assert_eq!(chats::held_chat_count(pool, owner, 30.0).await?, 0);
/// let (worker, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
/// let machine = store.machine(chat.id);
/// machine.update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await })).await?;
/// assert_eq!(chats::held_chat_count(pool, owner, 30.0).await?, 1);
/// // Its runner lets it go: no slot.
/// machine.update(|tx| Box::pin(async move { tx.abandon().await })).await?;
/// assert_eq!(chats::held_chat_count(pool, owner, 30.0).await?, 0);
/// # Ok(()) }
/// ```
pub async fn held_chat_count(
    conn: impl PgExecutor<'_>,
    owner_id: Uuid,
    stale_after_secs: f64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(held_chats_sql!("$2"))
        .bind(stale_after_secs)
        .bind(owner_id)
        .fetch_one(conn)
        .await
}

/// Whether the chat family `family_id` (a root chat's id: a chat's
/// `coalesce(root_chat_id, id)`) of `owner_id` already takes a slot under
/// the owner's running-chat cap (some chat of it counts in
/// [`held_chat_count`]): a chat of that family may then be acquired
/// whatever the room, since it adds no slot. Read it after
/// [`lock_owner_room`] in the same transaction, so that it sees every
/// claim committed before.
///
/// # Errors
/// Database errors only.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// assert!(!chats::family_holds_slot(pool, owner, chat.id, 30.0).await?);
/// let (worker, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
/// let machine = store.machine(chat.id);
/// machine.update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await })).await?;
/// assert!(chats::family_holds_slot(pool, owner, chat.id, 30.0).await?);
/// # Ok(()) }
/// ```
pub async fn family_holds_slot(
    conn: impl PgExecutor<'_>,
    owner_id: Uuid,
    family_id: Uuid,
    stale_after_secs: f64,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(concat!(
        "SELECT EXISTS (SELECT 1",
        counted_held_sql!("$2"),
        " AND coalesce(held.root_chat_id, held.id) = $3)"
    ))
    .bind(stale_after_secs)
    .bind(owner_id)
    .bind(family_id)
    .fetch_one(conn)
    .await
}

/// Locks the row of user `owner_id` (`FOR NO KEY UPDATE`, until the
/// transaction on `conn` ends) and returns how many more slots of their
/// running-chat cap runners may take now: their cap
/// (`users.max_running_chats`, else `default_max_running_chats`) minus
/// [`held_chat_count`]; 0 or less means none (a chat whose family already
/// holds a slot may still be acquired: [`family_holds_slot`]). `0` when
/// the user does not exist.
///
/// The lock makes the cap hold across replicas: two claims of the same
/// user's chats take it one after the other, and the count, a statement of
/// its own after the lock is granted, sees the chat the other claim
/// acquired (READ COMMITTED takes a new snapshot per statement). Lock order
/// everywhere: the chat row first (the claim's `SKIP LOCKED`), then the
/// user. `FOR NO KEY UPDATE` leaves inserts that reference the user (new
/// chats, their `KEY SHARE` check) unblocked.
///
/// # Errors
/// Database errors only.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// let mut tx = pool.begin().await?;
/// assert_eq!(chats::lock_owner_room(&mut tx, owner, 8, 30.0).await?, 8);
/// tx.commit().await?;
/// sqlx::query("UPDATE users SET max_running_chats = 2 WHERE id = $1").bind(owner).execute(pool).await?;
/// let mut tx = pool.begin().await?;
/// assert_eq!(chats::lock_owner_room(&mut tx, owner, 8, 30.0).await?, 2);
/// # Ok(()) }
/// ```
pub async fn lock_owner_room(
    conn: &mut PgConnection,
    owner_id: Uuid,
    default_max_running_chats: i32,
    stale_after_secs: f64,
) -> sqlx::Result<i64> {
    let cap: Option<i32> = sqlx::query_scalar(
        "SELECT coalesce(max_running_chats, $2) FROM users WHERE id = $1 FOR NO KEY UPDATE",
    )
    .bind(owner_id)
    .bind(default_max_running_chats)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(cap) = cap else { return Ok(0) };
    let held = held_chat_count(&mut *conn, owner_id, stale_after_secs).await?;
    Ok(i64::from(cap) - held)
}

/// How many children chat `parent` has (chats whose `parent_chat_id` is
/// it, archived ones included): what the sub-agent fan-out cap counts
/// (`--max-subagents-per-chat`, API.md "Limits, budgets and the token
/// lifecycle"). Children are created only under the parent's row lock (a
/// `CommitStep` of the parent), so read in that transaction the count
/// cannot change before the commit.
///
/// # Errors
/// Database errors only.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let parent = fx.create_chat("hi").await?.chat;
/// assert_eq!(chats::child_count(pool, parent.id).await?, 0);
/// let mut tx = store.machine(parent.id).begin().await?;
/// let first = chatd_store::NewMessage::user(vec![chatd_core::MessagePart::text("sub-task")]);
/// let child = chatd_store::CreateChatInput { owner_id: owner, initial_messages: vec![first], ..Default::default() };
/// tx.create_child(child).await?;
/// assert_eq!(chats::child_count(tx.reader().await?, parent.id).await?, 1);
/// # Ok(()) }
/// ```
pub async fn child_count(conn: impl PgExecutor<'_>, parent: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM chats WHERE parent_chat_id = $1")
        .bind(parent)
        .fetch_one(conn)
        .await
}

/// Seconds (database time, ≥ 0) until the first lease held by another
/// worker goes stale: over the runnable chats whose current runner belongs to
/// a worker other than `worker_id` and has a heartbeat newer than
/// `stale_after_secs`, the least time until that heartbeat is older than the
/// bound; `None` when no such lease exists. The acquisition loop sleeps no
/// longer than this, so a crashed owner's chat is taken over when its lease
/// goes stale, not at the next timer pass (spec "Acquisition loop").
///
/// # Example
///
/// ```
/// use chatd_store::queries::{chats, heartbeats};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// # let store = chatd_store::Store::new(pool.clone(), std::sync::Arc::new(chatd_pubsub::RecordingPublisher::new()));
/// # let owner = chatd_store::queries::users::insert(pool, "alice", chatd_core::Role::Member).await?.id;
/// # let hi = vec![chatd_store::NewMessage::user(vec![chatd_core::MessagePart::text("hi")])];
/// # let input = chatd_store::CreateChatInput { owner_id: owner, initial_messages: hi, ..Default::default() };
/// # let created = store.create_chat(input).await?; let chat = created.chat.clone();
/// let (me, other, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
/// assert_eq!(chats::next_lease_expiry(pool, me, 30.0).await?, None, "nobody holds it");
/// let machine = store.machine(chat.id);
/// machine.update(move |tx| Box::pin(async move { tx.acquire(other, runner).await })).await?;
/// heartbeats::upsert(&mut *pool.acquire().await?, chat.id, runner).await?;
/// let left = chats::next_lease_expiry(pool, me, 30.0).await?.expect("another worker's lease");
/// assert!(left > 29.0 && left <= 30.0, "{left}");
/// assert_eq!(chats::next_lease_expiry(pool, other, 30.0).await?, None, "its own lease");
/// # Ok(()) }
/// ```
pub async fn next_lease_expiry(
    conn: impl PgExecutor<'_>,
    worker_id: Uuid,
    stale_after_secs: f64,
) -> sqlx::Result<Option<f64>> {
    sqlx::query_scalar(concat!(
        "SELECT EXTRACT(EPOCH FROM (min(h.heartbeat_at) + make_interval(secs => $2) - now()))::float8
           FROM chats c JOIN chat_heartbeats h ON h.chat_id = c.id AND h.runner_id = c.runner_id
          WHERE ",
        runnable_chat_sql!("c."),
        " AND c.worker_id IS NOT NULL AND c.worker_id <> $1
            AND h.heartbeat_at >= now() - make_interval(secs => $2)"
    ))
    .bind(worker_id)
    .bind(stale_after_secs)
    .fetch_one(conn)
    .await
    .map(|secs: Option<f64>| secs.map(|s| s.max(0.0)))
}

/// The rows of the chats among `ids` that exist (any order).
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let rows = chats::select_many(pool, &[chat.id, uuid::Uuid::new_v4()]).await?;
/// assert_eq!(rows.iter().map(|c| c.id).collect::<Vec<_>>(), vec![chat.id]);
/// # Ok(()) }
/// ```
pub async fn select_many(conn: impl PgExecutor<'_>, ids: &[Uuid]) -> sqlx::Result<Vec<Chat>> {
    let sql = "SELECT * FROM chats WHERE id = ANY($1::uuid[])";
    sqlx::query_as(sql).bind(ids).fetch_all(conn).await
}

/// `(chat id, runner id)` of every chat whose `worker_id` is `worker_id`.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let (worker, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
/// let machine = store.machine(chat.id);
/// machine.update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await })).await?;
/// assert_eq!(chats::owned_by_worker(pool, worker).await?, vec![(chat.id, Some(runner))]);
/// # Ok(()) }
/// ```
pub async fn owned_by_worker(
    conn: impl PgExecutor<'_>,
    worker_id: Uuid,
) -> sqlx::Result<Vec<(Uuid, Option<Uuid>)>> {
    let sql = "SELECT id, runner_id FROM chats WHERE worker_id = $1";
    super::keyed::all(conn, sql, worker_id).await
}

/// Seconds until chat `chat_id`'s requires-action deadline (negative once
/// it passed; database time), `None` when it has none.
///
/// # Example
///
/// ```
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// assert_eq!(chats::requires_action_remaining_secs(pool, chat.id).await?, None);
/// let machine = store.machine(chat.id);
/// machine.update(|tx| Box::pin(async move { tx.enter_requires_action().await })).await?;
/// let secs = chats::requires_action_remaining_secs(pool, chat.id).await?.expect("a deadline");
/// assert!(secs > 0.0 && secs <= 300.0, "the default timeout is 5 minutes");
/// # Ok(()) }
/// ```
pub async fn requires_action_remaining_secs(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Option<f64>> {
    let sql = "SELECT extract(epoch FROM requires_action_deadline_at - now())::float8 FROM chats WHERE id = $1";
    super::keyed::scalar(conn, sql, chat_id).await
}

/// The version columns of one chat, as the stream's sync poller reads them
/// (spec "Sync poller" → "Polling").
///
/// Example: [`versions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct ChatVersions {
    /// Chat id.
    pub id: Uuid,
    /// `snapshot_version`.
    pub snapshot_version: i64,
    /// `history_version`.
    pub history_version: i64,
    /// `queue_version`.
    pub queue_version: i64,
    /// `retry_state_version`.
    pub retry_state_version: i64,
    /// `generation_attempt`.
    pub generation_attempt: i64,
    /// `status`.
    #[sqlx(try_from = "String")]
    pub status: ChatStatus,
    /// `worker_id`.
    pub worker_id: Option<Uuid>,
}

/// The [`ChatVersions`] of every chat among `ids` that exists, in one query
/// (spec "Sync poller" → "Polling", verbatim).
///
/// # Example
///
/// ```
/// use chatd_core::ChatStatus;
/// use chatd_store::queries::chats;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let rows = chats::versions(pool, &[chat.id, uuid::Uuid::new_v4()]).await?;
/// assert_eq!(rows.len(), 1);
/// assert_eq!((rows[0].snapshot_version, rows[0].status), (1, ChatStatus::Running));
/// # Ok(()) }
/// ```
pub async fn versions(conn: impl PgExecutor<'_>, ids: &[Uuid]) -> sqlx::Result<Vec<ChatVersions>> {
    let sql = "SELECT id, snapshot_version, history_version, queue_version, retry_state_version, generation_attempt, status, worker_id
         FROM chats
         WHERE id = ANY($1::uuid[])";
    sqlx::query_as(sql).bind(ids).fetch_all(conn).await
}
