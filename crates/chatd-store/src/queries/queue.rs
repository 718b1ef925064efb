//! SQL of the `chat_queued_messages` table: a chat's queue, head first
//! (lowest `position`, then id). Writes are for `crate::transitions` only:
//! the triggers turn them into `queue_version` changes.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use chatd_core::MessagePart;

use crate::models::{NewMessage, QueuedMessage};

/// `sqlx::query_as!(QueuedMessage, ...)` of every column of
/// `chat_queued_messages`: `select_queued!($rest, args)` selects them (the
/// table's alias `q`) and then `$rest` (`FROM chat_queued_messages q ...`);
/// `returning_queued!($head, args)` puts them after `$head` (which ends in
/// `RETURNING `). sqlx's macros take only string literals, hence the list
/// is written out here.
macro_rules! select_queued {
    ($rest:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            $crate::models::QueuedMessage,
            r#"SELECT q.id, q.chat_id, q.position,
                      q.content AS "content: sqlx::types::Json<Vec<chatd_core::MessagePart>>",
                      q.created_by, q.model_config_id, q.reasoning_effort, q.client_message_id,
                      q.created_at, q.steer "#
                + $rest
            $(, $arg)*
        )
    };
}

/// See `select_queued`.
macro_rules! returning_queued {
    ($head:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            $crate::models::QueuedMessage,
            $head
                + r#"id, chat_id, position,
                     content AS "content: sqlx::types::Json<Vec<chatd_core::MessagePart>>",
                     created_by, model_config_id, reasoning_effort, client_message_id,
                     created_at, steer"#
            $(, $arg)*
        )
    };
}

/// Number of queued messages of the chat.
pub async fn len(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM chat_queued_messages WHERE chat_id = $1"#,
        chat_id
    )
    .fetch_one(conn)
    .await
}

/// The chat's queue in order (head first).
pub async fn list(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Vec<QueuedMessage>> {
    select_queued!(
        "FROM chat_queued_messages q WHERE q.chat_id = $1 ORDER BY q.position, q.id",
        chat_id
    )
    .fetch_all(conn)
    .await
}

/// One queued message of the chat.
pub async fn select(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    select_queued!(
        "FROM chat_queued_messages q WHERE q.chat_id = $1 AND q.id = $2",
        chat_id,
        id
    )
    .fetch_optional(conn)
    .await
}

/// Where [`enqueue`] puts a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueEnd {
    /// After every queued message.
    Tail,
    /// Before every queued message.
    Head,
}

/// Inserts a queued message at `end` of the chat's queue.
pub async fn enqueue(
    conn: &mut PgConnection,
    chat_id: Uuid,
    message: &NewMessage,
    end: QueueEnd,
) -> sqlx::Result<QueuedMessage> {
    enqueue_flagged(conn, chat_id, message, end, false).await
}

/// [`enqueue`] with the steer flag (`steer`: the message was sent with
/// `busy_behavior: "steer"` while the chat ran).
pub async fn enqueue_flagged(
    conn: &mut PgConnection,
    chat_id: Uuid,
    message: &NewMessage,
    end: QueueEnd,
    steer: bool,
) -> sqlx::Result<QueuedMessage> {
    // `as _`: sqlx checks a jsonb argument against `serde_json::Value`.
    match end {
        QueueEnd::Tail => {
            returning_queued!(
                "INSERT INTO chat_queued_messages (chat_id, position, content, created_by, model_config_id, reasoning_effort, client_message_id, steer)
                 VALUES ($1, nextval('chat_queued_message_position_seq'), $2, $3, $4, $5, $6, $7) RETURNING ",
                chat_id,
                Json(&message.content) as _,
                message.created_by,
                message.model_config_id,
                message.reasoning_effort.as_deref(),
                message.client_message_id.as_deref(),
                steer,
            )
            .fetch_one(conn)
            .await
        }
        QueueEnd::Head => {
            returning_queued!(
                "INSERT INTO chat_queued_messages (chat_id, position, content, created_by, model_config_id, reasoning_effort, client_message_id, steer)
                 VALUES ($1, (SELECT COALESCE(min(position) - 1, nextval('chat_queued_message_position_seq'))
                              FROM chat_queued_messages WHERE chat_id = $1),
                         $2, $3, $4, $5, $6, $7) RETURNING ",
                chat_id,
                Json(&message.content) as _,
                message.created_by,
                message.model_config_id,
                message.reasoning_effort.as_deref(),
                message.client_message_id.as_deref(),
                steer,
            )
            .fetch_one(conn)
            .await
        }
    }
}

/// Removes and returns the head of the chat's queue.
pub async fn pop_head(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<QueuedMessage>> {
    returning_queued!(
        "DELETE FROM chat_queued_messages WHERE id = (
             SELECT id FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id LIMIT 1)
         RETURNING ",
        chat_id
    )
    .fetch_optional(conn)
    .await
}

/// Removes one queued message of the chat.
pub async fn delete(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    returning_queued!(
        "DELETE FROM chat_queued_messages WHERE chat_id = $1 AND id = $2 RETURNING ",
        chat_id,
        id
    )
    .fetch_optional(conn)
    .await
}

/// Removes every queued message of the chat, returning their ids in queue
/// order.
pub async fn clear(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Vec<i64>> {
    let mut ids: Vec<(i64, i64)> = sqlx::query!(
        "DELETE FROM chat_queued_messages WHERE chat_id = $1 RETURNING id, position",
        chat_id,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.id, r.position))
    .collect();
    ids.sort_by_key(|(id, position)| (*position, *id));
    Ok(ids.into_iter().map(|(id, _)| id).collect())
}

/// Moves a queued message to the head of its chat's queue (`None`, and no
/// change, when it is already there or not queued).
pub async fn move_to_head(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    returning_queued!(
        "UPDATE chat_queued_messages q SET position = h.min_position - 1
         FROM (SELECT min(position) AS min_position FROM chat_queued_messages WHERE chat_id = $1) h
         WHERE q.chat_id = $1 AND q.id = $2 AND q.position <> h.min_position
         RETURNING ",
        chat_id,
        id
    )
    .fetch_optional(conn)
    .await
}

/// Removes and returns every steer message of the chat's queue, in queue
/// order (empty when there is none).
pub async fn pop_steer(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Vec<QueuedMessage>> {
    let mut rows: Vec<QueuedMessage> = returning_queued!(
        "DELETE FROM chat_queued_messages WHERE chat_id = $1 AND steer RETURNING ",
        chat_id
    )
    .fetch_all(conn)
    .await?;
    rows.sort_by_key(|q| (q.position, q.id));
    Ok(rows)
}

/// The changes of [`update`]; `None` keeps a field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueuedChanges {
    /// New parts.
    pub content: Option<Vec<MessagePart>>,
    /// New model config (`Some(None)` clears it).
    pub model_config_id: Option<Option<Uuid>>,
    /// New steer flag.
    pub steer: Option<bool>,
}

/// Applies `changes` to one queued message of the chat and returns the new
/// row (`None` when it is not queued on the chat). Every listed column is
/// written, changed or not, so the update trigger advances `queue_version`
/// even for an edit that repeats the current values.
pub async fn update(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
    changes: &QueuedChanges,
) -> sqlx::Result<Option<QueuedMessage>> {
    returning_queued!(
        "UPDATE chat_queued_messages SET
             content = COALESCE($3, content),
             model_config_id = CASE WHEN $4 THEN $5 ELSE model_config_id END,
             steer = COALESCE($6, steer)
         WHERE chat_id = $1 AND id = $2
         RETURNING ",
        chat_id,
        id,
        // `as _`: sqlx checks a jsonb argument against `serde_json::Value`.
        changes.content.as_ref().map(Json) as _,
        changes.model_config_id.is_some(),
        changes.model_config_id.flatten(),
        changes.steer,
    )
    .fetch_optional(conn)
    .await
}

/// Moves one queued message to 0-based `index` of the chat's queue (past
/// the end: last) and renumbers the queue densely from its current lowest
/// position, so later tail and head inserts keep their order. Returns the
/// whole queue in its new order, or `None` when `id` is not queued on the
/// chat. Every row is rewritten, so the trigger advances `queue_version`
/// even when nothing moves.
pub async fn move_to(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
    index: u64,
) -> sqlx::Result<Option<Vec<QueuedMessage>>> {
    let rows = list(&mut *conn, chat_id).await?;
    let Some(from) = rows.iter().position(|q| q.id == id) else {
        return Ok(None);
    };
    let base = rows.iter().map(|q| q.position).min().unwrap_or(0);
    let mut ids: Vec<i64> = rows.iter().map(|q| q.id).collect();
    let moved = ids.remove(from);
    let to = usize::try_from(index).unwrap_or(usize::MAX).min(ids.len());
    ids.insert(to, moved);
    // The i-th smallest of n distinct positions is at least `base + i`, so
    // the new positions never pass the sequence: tail inserts stay last.
    sqlx::query!(
        "UPDATE chat_queued_messages q SET position = $2 + o.ord - 1
         FROM unnest($3::bigint[]) WITH ORDINALITY AS o(id, ord)
         WHERE q.chat_id = $1 AND q.id = o.id",
        chat_id,
        base,
        &ids,
    )
    .execute(&mut *conn)
    .await?;
    Ok(Some(list(&mut *conn, chat_id).await?))
}

/// The 0-based index of queued message `id` in the chat's queue (`None`
/// when it is not queued there): `ChatQueuedMessage.position`.
pub async fn index_of(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        r#"SELECT (SELECT count(*) FROM chat_queued_messages o
                   WHERE o.chat_id = q.chat_id AND (o.position, o.id) < (q.position, q.id)) AS "index!"
           FROM chat_queued_messages q WHERE q.chat_id = $1 AND q.id = $2"#,
        chat_id,
        id,
    )
    .fetch_optional(conn)
    .await
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    /// Sends the user message "next" to the running chat of `machine`,
    /// which queues it; the queued row.
    async fn queue_next(machine: &crate::ChatMachine) -> anyhow::Result<crate::QueuedMessage> {
        use crate::{NewMessage, SendMessageInput};
        use chatd_core::{BusyBehavior, MessagePart};
        let send = SendMessageInput {
            message: NewMessage::user(vec![MessagePart::text("next")]),
            busy_behavior: BusyBehavior::Queue,
            max_queue_size: None,
        };
        let (sent, _) = machine
            .update(|tx| Box::pin(async move { tx.send_message(send).await }))
            .await?;
        Ok(sent.queued_message.expect("queued"))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn len_number_of_queued_messages_of_the_chat() -> anyhow::Result<()> {
        use crate::queries::queue;
        use crate::{NewMessage, SendMessageInput};
        use chatd_core::{BusyBehavior, MessagePart};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // The chat is running: a send is queued.
        let machine = store.machine(chat.id);
        let queued = queue_next(&machine).await?;
        assert_eq!(queue::len(pool, chat.id).await?, 1);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn list_the_chat_s_queue_in_order_head_first() -> anyhow::Result<()> {
        use crate::queries::queue;
        use crate::{NewMessage, SendMessageInput};
        use chatd_core::{BusyBehavior, MessagePart};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // The chat is running: a send is queued.
        let machine = store.machine(chat.id);
        let queued = queue_next(&machine).await?;
        let rows = queue::list(pool, chat.id).await?;
        assert_eq!(
            rows.iter().map(|q| q.id).collect::<Vec<_>>(),
            vec![queued.id]
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_one_queued_message_of_the_chat() -> anyhow::Result<()> {
        use crate::queries::queue;
        use crate::{NewMessage, SendMessageInput};
        use chatd_core::{BusyBehavior, MessagePart};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // The chat is running: a send is queued.
        let machine = store.machine(chat.id);
        let queued = queue_next(&machine).await?;
        let row = queue::select(pool, chat.id, queued.id)
            .await?
            .expect("queued");
        assert_eq!(row.content.0, vec![MessagePart::text("next")]);
        assert!(queue::select(pool, chat.id, queued.id + 1).await?.is_none());
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn enqueue_inserts_a_queued_message_at_end_of_the_chat_s_queue() -> anyhow::Result<()> {
        use crate::NewMessage;
        use crate::queries::{
            chats,
            queue::{self, QueueEnd},
        };
        use chatd_core::MessagePart;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        chats::lock_and_bump(&mut tx, chat.id).await?;
        let text = |t: &str| NewMessage::user(vec![MessagePart::text(t)]);
        let tail = queue::enqueue(&mut tx, chat.id, &text("later"), QueueEnd::Tail).await?;
        let head = queue::enqueue(&mut tx, chat.id, &text("now"), QueueEnd::Head).await?;
        let order: Vec<i64> = queue::list(&mut *tx, chat.id)
            .await?
            .iter()
            .map(|q| q.id)
            .collect();
        assert_eq!(order, vec![head.id, tail.id]);
        tx.rollback().await?; // ChatTx::send_message does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn enqueue_flagged_enqueue_with_the_steer_flag_steer() -> anyhow::Result<()> {
        use crate::NewMessage;
        use crate::queries::{
            chats,
            queue::{self, QueueEnd},
        };
        use chatd_core::MessagePart;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        chats::lock_and_bump(&mut tx, chat.id).await?;
        let text = NewMessage::user(vec![MessagePart::text("look at b.rs too")]);
        let row = queue::enqueue_flagged(&mut tx, chat.id, &text, QueueEnd::Tail, true).await?;
        assert!(row.steer);
        tx.rollback().await?; // ChatTx::send_message does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn pop_head_removes_and_returns_the_head_of_the_chat_s_queue() -> anyhow::Result<()> {
        use crate::queries::queue;
        use crate::{NewMessage, SendMessageInput};
        use chatd_core::{BusyBehavior, MessagePart};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // The chat is running: a send is queued.
        let machine = store.machine(chat.id);
        let queued = queue_next(&machine).await?;
        let mut tx = pool.begin().await?;
        let head = queue::pop_head(&mut tx, chat.id).await?.expect("queued");
        assert_eq!(head.id, queued.id);
        assert!(queue::pop_head(&mut tx, chat.id).await?.is_none());
        tx.rollback().await?; // ChatTx::finish_turn does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn delete_removes_one_queued_message_of_the_chat() -> anyhow::Result<()> {
        use crate::queries::queue;
        use crate::{NewMessage, SendMessageInput};
        use chatd_core::{BusyBehavior, MessagePart};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // The chat is running: a send is queued.
        let machine = store.machine(chat.id);
        let queued = queue_next(&machine).await?;
        let mut tx = pool.begin().await?;
        assert!(queue::delete(&mut tx, chat.id, queued.id).await?.is_some());
        assert!(queue::delete(&mut tx, chat.id, queued.id).await?.is_none());
        tx.rollback().await?; // ChatTx::delete_queued_message does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn clear_removes_every_queued_message_of_the_chat_returning_their_ids_in()
    -> anyhow::Result<()> {
        use crate::queries::queue;
        use crate::{NewMessage, SendMessageInput};
        use chatd_core::{BusyBehavior, MessagePart};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // The chat is running: a send is queued.
        let machine = store.machine(chat.id);
        let queued = queue_next(&machine).await?;
        let mut tx = pool.begin().await?;
        assert_eq!(queue::clear(&mut tx, chat.id).await?, vec![queued.id]);
        assert_eq!(queue::len(&mut *tx, chat.id).await?, 0);
        tx.rollback().await?; // ChatTx::edit_message does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn move_to_head_moves_a_queued_message_to_the_head_of_its_chat_s_queue_none()
    -> anyhow::Result<()> {
        use crate::queries::queue;
        use crate::{NewMessage, SendMessageInput};
        use chatd_core::{BusyBehavior, MessagePart};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // The chat is running: a send is queued.
        let machine = store.machine(chat.id);
        let queued = queue_next(&machine).await?;
        let mut tx = pool.begin().await?;
        // Already the head: nothing moves.
        assert!(
            queue::move_to_head(&mut tx, chat.id, queued.id)
                .await?
                .is_none()
        );
        tx.rollback().await?; // ChatTx::promote_queued_message does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn pop_steer_removes_and_returns_every_steer_message_of_the_chat_s_queue_in()
    -> anyhow::Result<()> {
        use crate::NewMessage;
        use crate::queries::{
            chats,
            queue::{self, QueueEnd},
        };
        use chatd_core::MessagePart;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        chats::lock_and_bump(&mut tx, chat.id).await?;
        let text = |t: &str| NewMessage::user(vec![MessagePart::text(t)]);
        let plain = queue::enqueue(&mut tx, chat.id, &text("later"), QueueEnd::Tail).await?;
        let steer =
            queue::enqueue_flagged(&mut tx, chat.id, &text("now"), QueueEnd::Tail, true).await?;
        let popped = queue::pop_steer(&mut tx, chat.id).await?;
        assert_eq!(
            popped.iter().map(|q| q.id).collect::<Vec<_>>(),
            vec![steer.id]
        );
        assert_eq!(queue::list(&mut *tx, chat.id).await?[0].id, plain.id);
        tx.rollback().await?; // ChatTx::commit_step_steering does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn update_applies_changes_to_one_queued_message_of_the_chat_and_returns_the()
    -> anyhow::Result<()> {
        use crate::NewMessage;
        use crate::queries::{
            chats,
            queue::{self, QueueEnd, QueuedChanges},
        };
        use chatd_core::MessagePart;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        chats::lock_and_bump(&mut tx, chat.id).await?;
        let row = queue::enqueue(
            &mut tx,
            chat.id,
            &NewMessage::user(vec![MessagePart::text("typo")]),
            QueueEnd::Tail,
        )
        .await?;
        let changes = QueuedChanges {
            content: Some(vec![MessagePart::text("fixed")]),
            steer: Some(true),
            ..Default::default()
        };
        let edited = queue::update(&mut tx, chat.id, row.id, &changes)
            .await?
            .expect("queued");
        assert_eq!(
            (edited.content.0.clone(), edited.steer),
            (vec![MessagePart::text("fixed")], true)
        );
        tx.rollback().await?; // ChatTx::edit_queued_message does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn move_to_moves_one_queued_message_to_0_based_index_of_the_chat_s_queue()
    -> anyhow::Result<()> {
        use crate::NewMessage;
        use crate::queries::{
            chats,
            queue::{self, QueueEnd},
        };
        use chatd_core::MessagePart;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        chats::lock_and_bump(&mut tx, chat.id).await?;
        let text = |t: &str| NewMessage::user(vec![MessagePart::text(t)]);
        let a = queue::enqueue(&mut tx, chat.id, &text("a"), QueueEnd::Tail).await?;
        let b = queue::enqueue(&mut tx, chat.id, &text("b"), QueueEnd::Tail).await?;
        let order = queue::move_to(&mut tx, chat.id, b.id, 0)
            .await?
            .expect("queued");
        assert_eq!(
            order.iter().map(|q| q.id).collect::<Vec<_>>(),
            vec![b.id, a.id]
        );
        tx.rollback().await?; // ChatTx::move_queued_message does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn index_of_the_0_based_index_of_queued_message_id_in_the_chat_s_queue_none()
    -> anyhow::Result<()> {
        use crate::NewMessage;
        use crate::queries::{
            chats,
            queue::{self, QueueEnd},
        };
        use chatd_core::MessagePart;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        chats::lock_and_bump(&mut tx, chat.id).await?;
        let text = |t: &str| NewMessage::user(vec![MessagePart::text(t)]);
        queue::enqueue(&mut tx, chat.id, &text("a"), QueueEnd::Tail).await?;
        let b = queue::enqueue(&mut tx, chat.id, &text("b"), QueueEnd::Tail).await?;
        assert_eq!(queue::index_of(&mut *tx, chat.id, b.id).await?, Some(1));
        tx.rollback().await?;
        Ok(())
    }
}
