//! SQL of the `chats` table: the row lock and snapshot bump of every
//! transition bundle, execution-state writes (for `crate::transitions`
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

/// Reads chat `chat_id` with the row lock `lock`; `None` when it does not
/// exist.
pub async fn select(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    lock: LockMode,
) -> sqlx::Result<Option<Chat>> {
    macro_rules! select_chat {
        ($lock:tt) => {
            sql!(query() [, chat_id]:
                "SELECT " chat_columns!() " FROM chats c WHERE c.id = $1" $lock)
            .try_map(|r| Ok(chat_of!(r)))
            .fetch_optional(conn)
            .await
        };
    }
    match lock {
        LockMode::None => select_chat!(""),
        LockMode::Share => select_chat!(" FOR SHARE"),
        LockMode::Update => select_chat!(" FOR UPDATE"),
    }
}

/// Reads chat `chat_id` `FOR UPDATE` in a transaction that will only read
/// (a worker task checking its fence before it reads the history): the
/// same statement turns `synchronous_commit` off for the transaction, so
/// its commit, which only releases the row lock, does not wait for a WAL
/// flush. Never write through such a transaction: its commit may be lost
/// in a crash.
pub async fn select_for_update_to_read(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<Chat>> {
    sql!(query() [, chat_id]:
        "SELECT " chat_columns!() " FROM chats c
         CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS s
         WHERE c.id = $1 FOR UPDATE OF c")
    .try_map(|r| Ok(chat_of!(r)))
    .fetch_optional(conn)
    .await
}

/// The bump of the `locked` CTE's row and what [`Bumped`] reads beside it,
/// the end of every statement of [`lock_and_bump`] and
/// [`lock_and_bump_skip_locked`].
macro_rules! bump_locked {
    (@sql $d:tt $k:tt () $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            " UPDATE chats c SET snapshot_version = c.snapshot_version + 1, updated_at = now()
             FROM locked WHERE c.id = locked.id
             RETURNING " chat_columns!() ", "
            chat_facts_columns_without_entries!(checked "c")
            ", (SELECT s.snapshot_version FROM chats s WHERE s.id = c.id) AS snapshot_seen"
            $($rest)*)
    };
}

/// The [`Bumped`] of a record of a statement ending in `bump_locked!()`
/// (`context_entries` is `NULL` there, as `FromRow`'s default left it).
macro_rules! bumped_of {
    ($r:ident) => {
        Bumped {
            facts: facts_of!($r),
            snapshot_seen: $r.snapshot_seen,
        }
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
pub async fn lock_and_bump(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Option<Bumped>> {
    // A root chat (no parent: most chats) has no family to key-share: one
    // index lookup fewer and a plan a third the size (issue 15). The row
    // lock is the same `FOR UPDATE`; a chat's parent and root never change,
    // so the filter cannot change while the statement waits for the lock.
    // A child, or a missing chat, takes the family statement below.
    let root = sql!(query() [, chat_id]:
        "WITH locked AS (SELECT id FROM chats
                    WHERE id = $1 AND root_chat_id IS NULL AND parent_chat_id IS NULL FOR UPDATE)
"
        bump_locked!()
    )
    .try_map(|r| Ok(bumped_of!(r)))
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(bumped) = root {
        return Ok(Some(bumped));
    }
    sql!(query() [, chat_id]:
        "WITH family AS (
             SELECT f.id FROM chats c JOIN chats f ON f.id IN (c.root_chat_id, c.parent_chat_id)
             WHERE c.id = $1 ORDER BY f.id = c.root_chat_id DESC FOR KEY SHARE OF f),
         locked AS (SELECT id FROM chats
                    WHERE id = $1 AND (SELECT count(*) FROM family) >= 0 FOR UPDATE)
"
        bump_locked!()
    )
    .try_map(|r| Ok(bumped_of!(r)))
    .fetch_optional(conn)
    .await
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
    sqlx::query!(
        r#"WITH locked AS (SELECT id FROM chats WHERE id = $1 AND snapshot_version = $2
                    AND root_chat_id IS NULL AND parent_chat_id IS NULL FOR UPDATE)
         UPDATE chats SET snapshot_version = chats.snapshot_version + 1, updated_at = now()
         FROM locked WHERE chats.id = locked.id
         RETURNING chats.updated_at,
             CASE WHEN chats.runner_id IS NOT NULL THEN
                 (SELECT extract(epoch FROM now() - h.heartbeat_at)::float8 FROM chat_heartbeats h
                  WHERE h.chat_id = chats.id AND h.runner_id = chats.runner_id) END
                 AS "heartbeat_age_secs?""#,
        chat_id,
        guess,
    )
    .map(|r| (r.updated_at, r.heartbeat_age_secs))
    .fetch_optional(conn)
    .await
}

/// Like [`lock_and_bump`] with `SKIP LOCKED`: `None` when the row, or the
/// key-share lock of its root or parent, is held by another transaction, or
/// the chat is missing.
pub async fn lock_and_bump_skip_locked(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<Bumped>> {
    sql!(query() [, chat_id]:
        "WITH family AS (
             SELECT f.id FROM chats c JOIN chats f ON f.id IN (c.root_chat_id, c.parent_chat_id)
             WHERE c.id = $1 ORDER BY f.id = c.root_chat_id DESC FOR KEY SHARE OF f SKIP LOCKED),
         expected AS (
             SELECT count(DISTINCT k) AS n FROM chats c,
                 unnest(ARRAY[c.root_chat_id, c.parent_chat_id]) AS k WHERE c.id = $1),
         locked AS (SELECT id FROM chats
                    WHERE id = $1 AND (SELECT count(*) FROM family) = (SELECT n FROM expected)
                    FOR UPDATE SKIP LOCKED)
"
        bump_locked!()
    )
    .try_map(|r| Ok(bumped_of!(r)))
    .fetch_optional(conn)
    .await
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
    if entries {
        sql!(query() [, chat_id]:
            "SELECT " chat_columns!() ", " chat_facts_columns!(checked "c")
            " FROM chats c WHERE c.id = $1")
        .try_map(|r| Ok(facts_of!(r)))
        .fetch_optional(conn)
        .await
    } else {
        sql!(query() [, chat_id]:
            "SELECT " chat_columns!() ", " chat_facts_columns_without_entries!(checked "c")
            " FROM chats c WHERE c.id = $1")
        .try_map(|r| Ok(facts_of!(r)))
        .fetch_optional(conn)
        .await
    }
}

/// Records where a fork came from (`chats.forked_from_*`, migration
/// `0017_branches.sql`); only [`crate::Store::fork_chat`] calls it, in the
/// fork's creating transaction.
pub async fn set_forked_from(
    conn: &mut PgConnection,
    chat_id: Uuid,
    source: Uuid,
    message_id: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE chats SET forked_from_chat_id = $2, forked_from_message_id = $3 WHERE id = $1",
        chat_id,
        source,
        message_id
    )
    .execute(conn)
    .await?;
    Ok(())
}
/// Inserts the row of a new chat at `snapshot_version = 1` with `status`
/// and the metadata of `input` (title default [`crate::DEFAULT_CHAT_TITLE`]);
/// `root_chat_id` is the root of the parent's family and `depth` the new
/// chat's depth in it (0 for a root; API.md "Sub-agents and plan mode").
pub async fn insert(
    conn: &mut PgConnection,
    id: Uuid,
    root_chat_id: Option<Uuid>,
    depth: i32,
    status: ChatStatus,
    input: &CreateChatInput,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO chats (id, owner_id, parent_chat_id, root_chat_id, status, snapshot_version, title, labels,
             last_model_config_id, last_reasoning_effort, dynamic_tools, mcp_server_ids, plan_mode,
             subagents, depth, spawn_key, workspace)
         VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
        id,
        input.owner_id,
        input.parent_chat_id,
        root_chat_id,
        status.as_str(),
        input.title.as_deref().unwrap_or(crate::DEFAULT_CHAT_TITLE),
        Json(&input.labels) as _,
        input.last_model_config_id,
        input.last_reasoning_effort.as_deref(),
        Json(&input.dynamic_tools) as _,
        &input.mcp_server_ids,
        input.plan_mode.as_deref(),
        input.subagents,
        depth,
        input.spawn_key.as_deref(),
        input.workspace,
    )
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
pub async fn child_by_spawn_key(
    conn: impl PgExecutor<'_>,
    parent: Uuid,
    spawn_key: &str,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "SELECT id FROM chats WHERE parent_chat_id = $1 AND spawn_key = $2",
        parent,
        spawn_key,
    )
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
pub async fn lock_family_for_child(
    conn: &mut PgConnection,
    parent: Uuid,
) -> sqlx::Result<Option<ChildPlacement>> {
    // A chat's root never changes, so it may be read before any lock.
    let root: Option<Option<Uuid>> =
        sqlx::query_scalar!("SELECT root_chat_id FROM chats WHERE id = $1", parent)
            .fetch_optional(&mut *conn)
            .await?;
    let Some(root) = root else {
        return Ok(None);
    };
    let root = root.unwrap_or(parent);
    let mut archived = false;
    if root != parent {
        let root_archived: Option<bool> =
            sqlx::query_scalar!("SELECT archived FROM chats WHERE id = $1 FOR SHARE", root)
                .fetch_optional(&mut *conn)
                .await?;
        match root_archived {
            Some(a) => archived |= a,
            None => return Ok(None),
        }
    }
    let parent_row: Option<(bool, i32)> = sqlx::query!(
        "SELECT archived, depth FROM chats WHERE id = $1 FOR SHARE",
        parent
    )
    .map(|r| (r.archived, r.depth))
    .fetch_optional(&mut *conn)
    .await?;
    Ok(parent_row.map(|(a, depth)| ChildPlacement {
        root_chat_id: root,
        archived: archived || a,
        parent_depth: depth,
    }))
}

/// Fields of the chat row a transition may set. `None` leaves a column alone.
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
    // Run-time checked: the SET list depends on which changes are present.
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

mod families;
mod metadata;
mod workers;

pub use families::*;
pub use metadata::*;
pub use workers::*;

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn select_reads_chat_chat_id_with_the_row_lock_lock() -> anyhow::Result<()> {
        use crate::queries::chats::{self, LockMode};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // A plain read, and one that locks the row until its transaction ends.
        let row = chats::select(pool, chat.id, LockMode::None)
            .await?
            .expect("exists");
        assert_eq!(row.snapshot_version, 1);
        let mut tx = pool.begin().await?;
        let locked = chats::select(&mut *tx, chat.id, LockMode::Update).await?;
        assert_eq!(locked.map(|c| c.id), Some(chat.id));
        tx.commit().await?;
        assert!(
            chats::select(pool, uuid::Uuid::new_v4(), LockMode::Share)
                .await?
                .is_none()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_for_update_to_read_reads_chat_chat_id_for_update_in_a_transaction()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        let row = chats::select_for_update_to_read(&mut tx, chat.id)
            .await?
            .expect("exists");
        assert_eq!(row.snapshot_version, chat.snapshot_version);
        let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&mut *tx)
            .await?;
        assert_eq!(setting, "off");
        tx.commit().await?;
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lock_and_bump_locks_the_chat_row_for_update_and_advances_snapshot()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        let bumped = chats::lock_and_bump(&mut tx, chat.id)
            .await?
            .expect("exists");
        assert_eq!(
            bumped.facts.chat.snapshot_version,
            chat.snapshot_version + 1
        );
        // Nobody changed the chat while the statement waited for its lock.
        let facts = bumped.current_facts().expect("uncontended");
        assert_eq!((facts.queue_len, facts.heartbeat_age_secs), (0, None));
        // Another transaction skips the locked row instead of waiting for it.
        let mut other = pool.begin().await?;
        assert!(
            chats::lock_and_bump_skip_locked(&mut other, chat.id)
                .await?
                .is_none()
        );
        other.rollback().await?;
        tx.rollback().await?; // ChatMachine::begin and ChatTx::commit do this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_facts_the_chat_row_its_queue_length_and_its_runner_s_heartbeat()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut conn = pool.acquire().await?;
        let row = chats::select_facts(&mut conn, chat.id)
            .await?
            .expect("exists");
        assert_eq!((row.chat.id, row.queue_len), (chat.id, 0));
        // Running, nothing queued, no runner: a commit also publishes chat:ownership.
        assert!(row.execution_state().is_runnable());
        assert!(!row.fresh(30.0));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn inserts_the_row_of_a_new_chat_at_snapshot_version_1_with_status_and_the()
    -> anyhow::Result<()> {
        use crate::CreateChatInput;
        use crate::queries::chats::{self, LockMode};
        use chatd_core::ChatStatus;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let id = uuid::Uuid::new_v4();
        let input = CreateChatInput {
            owner_id: owner,
            title: Some("Plans".into()),
            ..Default::default()
        };
        let mut tx = pool.begin().await?;
        chats::insert(&mut tx, id, None, 0, ChatStatus::Waiting, &input).await?;
        let row = chats::select(&mut *tx, id, LockMode::None)
            .await?
            .expect("inserted");
        assert_eq!((row.title.as_str(), row.snapshot_version), ("Plans", 1));
        tx.rollback().await?; // Store::create_chat inserts the history in the same transaction
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lock_family_for_child_locks_the_family_a_child_of_parent_joins_root()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let child = store
            .create_chat(crate::CreateChatInput {
                owner_id: owner,
                parent_chat_id: Some(chat.id),
                initial_status: Some(chatd_core::ChatStatus::Waiting),
                initial_messages: vec![crate::NewMessage::user(vec![
                    chatd_core::MessagePart::text("sub-task"),
                ])],
                ..Default::default()
            })
            .await?
            .chat;
        let mut tx = pool.begin().await?;
        let placement = chats::lock_family_for_child(&mut tx, child.id)
            .await?
            .unwrap();
        assert_eq!(
            (placement.root_chat_id, placement.archived),
            (chat.id, false)
        );
        assert_eq!(
            chats::lock_family_for_child(&mut tx, uuid::Uuid::new_v4()).await?,
            None
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn update_execution_applies_changes_to_the_chat_row_and_returns_the_new_row()
    -> anyhow::Result<()> {
        use crate::queries::chats::{self, ChatChanges};
        use chatd_core::ChatStatus;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        chats::lock_and_bump(&mut tx, chat.id).await?;
        let changes = ChatChanges {
            status: Some(ChatStatus::Waiting),
            ..Default::default()
        };
        let row = chats::update_execution(&mut tx, chat.id, &changes).await?;
        assert_eq!(row.status, ChatStatus::Waiting);
        tx.rollback().await?; // the transitions (crate::transitions) do this for real
        Ok(())
    }
}
