//! [`ChatMachine`]: the chat-scoped handle (`spec/chatstate-package.md`,
//! "Overview", `ChatMachine.Update/Lock/ReadLock`), and [`LockedChat`], a
//! row read under a lock or in a snapshot. The bundles it opens are
//! `crate::bundle`.

use chatd_core::{ExecutionState, StateError};
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use crate::error::StoreResult;
use crate::models::Chat;
use crate::queries;
use crate::queries::chats::LockMode;
use crate::store::Store;

impl Store {
    /// A state-machine handle for one chat. Cheap; make one per request.
    ///
    /// Example: [`Store`], [`ChatMachine::update`].
    pub fn machine(&self, chat_id: Uuid) -> ChatMachine {
        ChatMachine {
            store: self.clone(),
            chat_id,
        }
    }
}

/// A chat-scoped state-machine handle (spec chatstate `ChatMachine`).
///
/// Example: [`ChatMachine::update`].
#[derive(Debug, Clone)]
pub struct ChatMachine {
    pub(crate) store: Store,
    pub(crate) chat_id: Uuid,
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
    /// use chatd_store::{LockMode, chats};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut locked = store.machine(chat.id).lock().await?;
    /// // Related reads in the same transaction see the locked row's state.
    /// let row = chats::select(locked.conn(), chat.id, LockMode::None).await?.expect("locked");
    /// assert_eq!(row.snapshot_version, locked.chat.snapshot_version);
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
    /// let history = chatd_store::messages::active_history(locked.conn(), chat.id).await?;
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
    /// use chatd_store::messages;
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
/// chatd_store::queue::list(conn, chat.id).await?;
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
