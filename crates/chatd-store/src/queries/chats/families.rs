//! Chat families (API.md "Sub-agents and plan mode"): members, deletion,
//! a parent's view of its children, and the auto-archive loop's
//! candidates (spec "Auto-archive loop").

use super::*;

/// A chat of a family that `DELETE` found not deletable
/// ([`ExecutionState::is_deletable`]): busy, or invalid.
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
pub async fn delete_family(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Result<(), NotDeletable>> {
    let ids: Vec<Uuid> = sqlx::query_scalar!(
        "WITH RECURSIVE sub AS (
             SELECT id FROM chats WHERE id = $1
             UNION
             SELECT c.id FROM chats c JOIN sub ON c.parent_chat_id = sub.id)
         SELECT c.id FROM chats c WHERE c.id IN (SELECT id FROM sub) ORDER BY c.id FOR UPDATE",
        chat_id
    )
    .fetch_all(&mut *conn)
    .await?;
    let family: Vec<(Uuid, String, bool, bool)> = sqlx::query!(
        r#"SELECT c.id, c.status, c.archived,
                EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = c.id) AS "queued!"
         FROM chats c WHERE c.id = ANY($1) ORDER BY c.id"#,
        &ids
    )
    .map(|r| (r.id, r.status, r.archived, r.queued))
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
    sqlx::query!("DELETE FROM chats WHERE id = $1", chat_id)
        .execute(conn)
        .await?;
    Ok(Ok(()))
}

/// The members of root chat `root_id`'s family other than the root, by
/// creation (the order [`crate::Store::set_family_archived`] locks them in).
pub async fn family_members(conn: &mut PgConnection, root_id: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        "SELECT id FROM chats WHERE root_chat_id = $1 AND id <> $1 ORDER BY created_at, id",
        root_id
    )
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
pub async fn subtree_members(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"WITH RECURSIVE sub AS (
             SELECT c.id, c.depth, c.created_at FROM chats c WHERE c.parent_chat_id = $1
             UNION
             SELECT c.id, c.depth, c.created_at FROM chats c JOIN sub ON c.parent_chat_id = sub.id)
         SELECT id AS "id!" FROM sub ORDER BY created_at, id"#,
        chat_id
    )
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
    sqlx::query!(
        r#"SELECT c.parent_chat_id, c.status, c.archived,
                (SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = c.id) AS "queued!",
                (SELECT m.content FROM chat_messages m
                  WHERE m.chat_id = c.id AND m.role = 'assistant' AND NOT m.deleted
                    AND m.visibility <> 'model'
                  ORDER BY m.id DESC LIMIT 1) AS "last_message?: crate::queries::col::Content",
                extract(epoch FROM now() - $2::timestamptz)::float8 AS "elapsed_secs!"
         FROM chats c WHERE c.id = $1"#,
        child,
        since
    )
    .try_map(|r| {
        Ok(ChildProgress {
            parent_chat_id: r.parent_chat_id,
            status: crate::queries::decode_column("status", r.status)?,
            archived: r.archived,
            queued: r.queued,
            last_message: r.last_message,
            elapsed_secs: r.elapsed_secs,
        })
    })
    .fetch_optional(conn)
    .await
}

/// Root chats the auto-archive loop may archive: not archived, not pinned,
/// every member of the family idle (idle status, nothing queued) with no
/// change for `idle_for` (database time); ordered by `(updated_at, id)`, at
/// most `limit`, after the keyset `after`. See
/// [`crate::Store::auto_archive_candidates`].
pub async fn auto_archive_candidates(
    conn: impl PgExecutor<'_>,
    idle_for: Duration,
    limit: i64,
    after: Option<(DateTime<Utc>, Uuid)>,
) -> sqlx::Result<Vec<(Uuid, DateTime<Utc>)>> {
    let (after_at, after_id) = after.unzip();
    sql!(query() [, idle_for.as_secs_f64(), limit, after_at, after_id]:
        "SELECT r.id, r.updated_at FROM chats r
         WHERE r.parent_chat_id IS NULL AND NOT r.archived AND r.pin_order = 0
           AND r.updated_at < now() - make_interval(secs => $1)
           AND ($3::timestamptz IS NULL OR (r.updated_at, r.id) > ($3, $4))
           AND NOT EXISTS (
             SELECT 1 FROM chats m
             WHERE (m.id = r.id OR m.root_chat_id = r.id)
               AND (NOT ("
        idle_status_sql!("m.")
        ")
                    OR m.updated_at >= now() - make_interval(secs => $1)
                    OR EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = m.id)))
         ORDER BY r.updated_at, r.id
         LIMIT $2"
    )
    .map(|r| (r.id, r.updated_at))
    .fetch_all(conn)
    .await
}

/// Locks the family of root chat `root_id` for an auto-archive, never
/// waiting (`FOR UPDATE NOWAIT`: PostgreSQL's `55P03` when a row is held
/// elsewhere), root first and then the other members by creation, and
/// checks it still qualifies: the chat exists, is a root, is neither
/// archived nor pinned, and it and every member had no change for
/// `idle_for` (database time).
pub async fn lock_idle_family_nowait(
    conn: &mut PgConnection,
    root_id: Uuid,
    idle_for: Duration,
) -> sqlx::Result<bool> {
    let root: Option<(Option<Uuid>, bool, i32, bool)> = sqlx::query!(
        r#"SELECT parent_chat_id, archived, pin_order,
                updated_at < now() - make_interval(secs => $2) AS "idle!"
         FROM chats WHERE id = $1 FOR UPDATE NOWAIT"#,
        root_id,
        idle_for.as_secs_f64()
    )
    .map(|r| (r.parent_chat_id, r.archived, r.pin_order, r.idle))
    .fetch_optional(&mut *conn)
    .await?;
    if !matches!(root, Some((None, false, 0, true))) {
        return Ok(false);
    }
    let children_idle: Vec<bool> = sqlx::query_scalar!(
        r#"SELECT updated_at < now() - make_interval(secs => $2) AS "idle!" FROM chats
         WHERE root_chat_id = $1 AND id <> $1 ORDER BY created_at, id
         FOR UPDATE NOWAIT"#,
        root_id,
        idle_for.as_secs_f64()
    )
    .fetch_all(conn)
    .await?;
    Ok(!children_idle.contains(&false))
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn delete_family_deletes_chat_chat_id_with_its_rows_and_descendants_by()
    -> anyhow::Result<()> {
        use crate::queries::chats::{self, LockMode};
        use chatd_core::ExecutionState;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // A running chat is not deletable...
        let mut locked = store.machine(chat.id).lock().await?;
        let refused = chats::delete_family(locked.conn(), chat.id)
            .await?
            .unwrap_err();
        assert_eq!(
            (refused.chat_id, refused.state),
            (chat.id, ExecutionState::R0)
        );
        locked.finish().await?;
        // ...a waiting one is.
        let machine = store.machine(chat.id);
        machine
            .update(|tx| Box::pin(async move { tx.finish_turn().await }))
            .await?;
        let mut locked = machine.lock().await?;
        chats::delete_family(locked.conn(), chat.id)
            .await?
            .expect("deletable");
        locked.finish().await?;
        assert!(
            chats::select(pool, chat.id, LockMode::None)
                .await?
                .is_none()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn family_members_the_members_of_root_chat_root_id_s_family_other_than_the()
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
                initial_messages: vec![crate::NewMessage::user(vec![
                    chatd_core::MessagePart::text("sub-task"),
                ])],
                ..Default::default()
            })
            .await?
            .chat;
        let mut conn = pool.acquire().await?;
        assert_eq!(
            chats::family_members(&mut conn, chat.id).await?,
            vec![child.id]
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn auto_archive_candidates_root_chats_the_auto_archive_loop_may_archive()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        use std::time::Duration;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let machine = store.machine(chat.id);
        machine
            .update(|tx| Box::pin(async move { tx.finish_turn().await }))
            .await?;
        let found = chats::auto_archive_candidates(pool, Duration::ZERO, 10, None).await?;
        assert_eq!(
            found.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            vec![chat.id]
        );
        // Idle for less than an hour: not a candidate yet.
        let hour = Duration::from_secs(3600);
        assert!(
            chats::auto_archive_candidates(pool, hour, 10, None)
                .await?
                .is_empty()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lock_idle_family_nowait_locks_the_family_of_root_chat_root_id_for_an()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        use std::time::Duration;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        assert!(chats::lock_idle_family_nowait(&mut tx, chat.id, Duration::ZERO).await?);
        // While it is held, another locker fails at once with 55P03.
        let mut other = pool.begin().await?;
        let err = chats::lock_idle_family_nowait(&mut other, chat.id, Duration::ZERO)
            .await
            .unwrap_err();
        let code = err
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("55P03"));
        Ok(())
    }
}
