//! SQL of the `chat_queued_messages` table: a chat's queue, head first
//! (lowest `position`, then id). Writes are for [`crate::transitions`] only:
//! the triggers turn them into `queue_version` changes.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::models::{NewMessage, QueuedMessage};

/// Number of queued messages of the chat.
///
/// # Example
///
/// ```
/// use chatd_core::{BusyBehavior, MessagePart};
/// use chatd_store::{NewMessage, SendMessageInput};
/// use chatd_store::queries::queue;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // The chat is running: a send is queued.
/// let send = SendMessageInput {
///     message: NewMessage::user(vec![MessagePart::text("next")]),
///     busy_behavior: BusyBehavior::Queue,
///     max_queue_size: None,
/// };
/// let machine = store.machine(chat.id);
/// let (sent, _) = machine.update(|tx| Box::pin(async move { tx.send_message(send).await })).await?;
/// let queued = sent.queued_message.expect("queued");
/// assert_eq!(queue::len(pool, chat.id).await?, 1);
/// # Ok(()) }
/// ```
pub async fn len(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<i64> {
    let sql = "SELECT count(*) FROM chat_queued_messages WHERE chat_id = $1";
    super::keyed::scalar(conn, sql, chat_id).await
}

/// The chat's queue in order (head first).
///
/// # Example
///
/// ```
/// use chatd_core::{BusyBehavior, MessagePart};
/// use chatd_store::{NewMessage, SendMessageInput};
/// use chatd_store::queries::queue;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // The chat is running: a send is queued.
/// let send = SendMessageInput {
///     message: NewMessage::user(vec![MessagePart::text("next")]),
///     busy_behavior: BusyBehavior::Queue,
///     max_queue_size: None,
/// };
/// let machine = store.machine(chat.id);
/// let (sent, _) = machine.update(|tx| Box::pin(async move { tx.send_message(send).await })).await?;
/// let queued = sent.queued_message.expect("queued");
/// let rows = queue::list(pool, chat.id).await?;
/// assert_eq!(rows.iter().map(|q| q.id).collect::<Vec<_>>(), vec![queued.id]);
/// # Ok(()) }
/// ```
pub async fn list(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Vec<QueuedMessage>> {
    let sql = "SELECT * FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id";
    super::keyed::all(conn, sql, chat_id).await
}

/// One queued message of the chat.
///
/// # Example
///
/// ```
/// use chatd_core::{BusyBehavior, MessagePart};
/// use chatd_store::{NewMessage, SendMessageInput};
/// use chatd_store::queries::queue;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // The chat is running: a send is queued.
/// let send = SendMessageInput {
///     message: NewMessage::user(vec![MessagePart::text("next")]),
///     busy_behavior: BusyBehavior::Queue,
///     max_queue_size: None,
/// };
/// let machine = store.machine(chat.id);
/// let (sent, _) = machine.update(|tx| Box::pin(async move { tx.send_message(send).await })).await?;
/// let queued = sent.queued_message.expect("queued");
/// let row = queue::select(pool, chat.id, queued.id).await?.expect("queued");
/// assert_eq!(row.content.0, vec![MessagePart::text("next")]);
/// assert!(queue::select(pool, chat.id, queued.id + 1).await?.is_none());
/// # Ok(()) }
/// ```
pub async fn select(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    sqlx::query_as("SELECT * FROM chat_queued_messages WHERE chat_id = $1 AND id = $2")
        .bind(chat_id)
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Where [`enqueue`] puts a message.
///
/// Example: [`enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueEnd {
    /// After every queued message.
    Tail,
    /// Before every queued message.
    Head,
}

/// Inserts a queued message at `end` of the chat's queue.
///
/// # Example
///
/// ```
/// use chatd_core::MessagePart;
/// use chatd_store::NewMessage;
/// use chatd_store::queries::{chats, queue::{self, QueueEnd}};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// let mut tx = pool.begin().await?;
/// chats::lock_and_bump(&mut tx, chat.id).await?;
/// let text = |t: &str| NewMessage::user(vec![MessagePart::text(t)]);
/// let tail = queue::enqueue(&mut tx, chat.id, &text("later"), QueueEnd::Tail).await?;
/// let head = queue::enqueue(&mut tx, chat.id, &text("now"), QueueEnd::Head).await?;
/// let order: Vec<i64> = queue::list(&mut *tx, chat.id).await?.iter().map(|q| q.id).collect();
/// assert_eq!(order, vec![head.id, tail.id]);
/// tx.rollback().await?; // ChatTx::send_message does this for real
/// # Ok(()) }
/// ```
pub async fn enqueue(
    conn: &mut PgConnection,
    chat_id: Uuid,
    message: &NewMessage,
    end: QueueEnd,
) -> sqlx::Result<QueuedMessage> {
    let sql = match end {
        QueueEnd::Tail => {
            "INSERT INTO chat_queued_messages (chat_id, position, content, created_by, model_config_id, reasoning_effort, client_message_id)
             VALUES ($1, nextval('chat_queued_message_position_seq'), $2, $3, $4, $5, $6) RETURNING *"
        }
        QueueEnd::Head => {
            "INSERT INTO chat_queued_messages (chat_id, position, content, created_by, model_config_id, reasoning_effort, client_message_id)
             VALUES ($1, (SELECT COALESCE(min(position) - 1, nextval('chat_queued_message_position_seq'))
                          FROM chat_queued_messages WHERE chat_id = $1),
                     $2, $3, $4, $5, $6) RETURNING *"
        }
    };
    sqlx::query_as(sql)
        .bind(chat_id)
        .bind(Json(&message.content))
        .bind(message.created_by)
        .bind(message.model_config_id)
        .bind(&message.reasoning_effort)
        .bind(&message.client_message_id)
        .fetch_one(conn)
        .await
}

/// Removes and returns the head of the chat's queue.
///
/// # Example
///
/// ```
/// use chatd_core::{BusyBehavior, MessagePart};
/// use chatd_store::{NewMessage, SendMessageInput};
/// use chatd_store::queries::queue;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // The chat is running: a send is queued.
/// let send = SendMessageInput {
///     message: NewMessage::user(vec![MessagePart::text("next")]),
///     busy_behavior: BusyBehavior::Queue,
///     max_queue_size: None,
/// };
/// let machine = store.machine(chat.id);
/// let (sent, _) = machine.update(|tx| Box::pin(async move { tx.send_message(send).await })).await?;
/// let queued = sent.queued_message.expect("queued");
/// let mut tx = pool.begin().await?;
/// let head = queue::pop_head(&mut tx, chat.id).await?.expect("queued");
/// assert_eq!(head.id, queued.id);
/// assert!(queue::pop_head(&mut tx, chat.id).await?.is_none());
/// tx.rollback().await?; // ChatTx::finish_turn does this for real
/// # Ok(()) }
/// ```
pub async fn pop_head(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<QueuedMessage>> {
    let sql = "DELETE FROM chat_queued_messages WHERE id = (
             SELECT id FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id LIMIT 1)
         RETURNING *";
    super::keyed::optional(conn, sql, chat_id).await
}

/// Removes one queued message of the chat.
///
/// # Example
///
/// ```
/// use chatd_core::{BusyBehavior, MessagePart};
/// use chatd_store::{NewMessage, SendMessageInput};
/// use chatd_store::queries::queue;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // The chat is running: a send is queued.
/// let send = SendMessageInput {
///     message: NewMessage::user(vec![MessagePart::text("next")]),
///     busy_behavior: BusyBehavior::Queue,
///     max_queue_size: None,
/// };
/// let machine = store.machine(chat.id);
/// let (sent, _) = machine.update(|tx| Box::pin(async move { tx.send_message(send).await })).await?;
/// let queued = sent.queued_message.expect("queued");
/// let mut tx = pool.begin().await?;
/// assert!(queue::delete(&mut tx, chat.id, queued.id).await?.is_some());
/// assert!(queue::delete(&mut tx, chat.id, queued.id).await?.is_none());
/// tx.rollback().await?; // ChatTx::delete_queued_message does this for real
/// # Ok(()) }
/// ```
pub async fn delete(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    sqlx::query_as("DELETE FROM chat_queued_messages WHERE chat_id = $1 AND id = $2 RETURNING *")
        .bind(chat_id)
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Removes every queued message of the chat, returning their ids in queue
/// order.
///
/// # Example
///
/// ```
/// use chatd_core::{BusyBehavior, MessagePart};
/// use chatd_store::{NewMessage, SendMessageInput};
/// use chatd_store::queries::queue;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // The chat is running: a send is queued.
/// let send = SendMessageInput {
///     message: NewMessage::user(vec![MessagePart::text("next")]),
///     busy_behavior: BusyBehavior::Queue,
///     max_queue_size: None,
/// };
/// let machine = store.machine(chat.id);
/// let (sent, _) = machine.update(|tx| Box::pin(async move { tx.send_message(send).await })).await?;
/// let queued = sent.queued_message.expect("queued");
/// let mut tx = pool.begin().await?;
/// assert_eq!(queue::clear(&mut tx, chat.id).await?, vec![queued.id]);
/// assert_eq!(queue::len(&mut *tx, chat.id).await?, 0);
/// tx.rollback().await?; // ChatTx::edit_message does this for real
/// # Ok(()) }
/// ```
pub async fn clear(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Vec<i64>> {
    let mut ids: Vec<(i64, i64)> = sqlx::query_as(
        "DELETE FROM chat_queued_messages WHERE chat_id = $1 RETURNING id, position",
    )
    .bind(chat_id)
    .fetch_all(conn)
    .await?;
    ids.sort_by_key(|(id, position)| (*position, *id));
    Ok(ids.into_iter().map(|(id, _)| id).collect())
}

/// Moves a queued message to the head of its chat's queue (`None`, and no
/// change, when it is already there or not queued).
///
/// # Example
///
/// ```
/// use chatd_core::{BusyBehavior, MessagePart};
/// use chatd_store::{NewMessage, SendMessageInput};
/// use chatd_store::queries::queue;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
/// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
/// // The chat is running: a send is queued.
/// let send = SendMessageInput {
///     message: NewMessage::user(vec![MessagePart::text("next")]),
///     busy_behavior: BusyBehavior::Queue,
///     max_queue_size: None,
/// };
/// let machine = store.machine(chat.id);
/// let (sent, _) = machine.update(|tx| Box::pin(async move { tx.send_message(send).await })).await?;
/// let queued = sent.queued_message.expect("queued");
/// let mut tx = pool.begin().await?;
/// // Already the head: nothing moves.
/// assert!(queue::move_to_head(&mut tx, chat.id, queued.id).await?.is_none());
/// tx.rollback().await?; // ChatTx::promote_queued_message does this for real
/// # Ok(()) }
/// ```
pub async fn move_to_head(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    sqlx::query_as(
        "UPDATE chat_queued_messages q SET position = h.min_position - 1
         FROM (SELECT min(position) AS min_position FROM chat_queued_messages WHERE chat_id = $1) h
         WHERE q.chat_id = $1 AND q.id = $2 AND q.position <> h.min_position
         RETURNING q.*",
    )
    .bind(chat_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}
