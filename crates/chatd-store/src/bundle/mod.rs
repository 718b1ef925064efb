//! The transition bundle (`spec/chatstate-package.md`, `ChatMachine.Update`
//! and `Tx`; `spec/chatd-architecture.md`, "Transitions" and "Notification
//! emission rules"): [`ChatMachine::begin`] opens it, the transitions
//! (`crate::transitions`) apply to it, [`ChatTx::commit`] commits it and
//! then publishes ([`publish`]).
//!
//! Invariants kept here:
//! - Every transaction that applies transitions locks the chat row and
//!   advances `snapshot_version` exactly once, before any other write
//!   ([`queries::chats::lock_and_bump`]). The message triggers depend on
//!   it.
//! - Publications are buffered in a [`PublishBuffer`] and flushed only after
//!   the commit succeeded; a rollback (an error, or dropping a [`ChatTx`])
//!   discards them. Publishing before the commit would let a receiver read
//!   the old state, record the new version as seen, and miss the change.
//! - `chat:update:{chat_id}` carries the committed post-transition values;
//!   `chat:ownership` is added when the result is runnable and no runner holds
//!   a fresh heartbeat.

use std::sync::Arc;

use chatd_core::{ExecutionState, StateError, Transition};
use chatd_pubsub::{PublishBuffer, Publisher as _};
use futures::future::BoxFuture;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use crate::context_cache::HistoryLog;
use crate::error::StoreResult;
use crate::machine::ChatMachine;
use crate::models::{Chat, ChatFacts};
use crate::queries;
use crate::store::Store;

pub(crate) mod guess;
pub(crate) mod publish;

use publish::{commit_and_flush, enqueue_publications};

impl ChatMachine {
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
}

/// An open transition bundle on one chat (spec chatstate `Tx`). The row is
/// locked and `snapshot_version` already advanced, or, in an optimistic
/// bundle ([`ChatMachine::update_optimistic`]), will be by its first
/// statement, which checks the guess its transitions validated against
/// (`bundle::guess`). Transition methods live in
/// `crate::transitions`; each reads the row and queue afresh, validates
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
    pub(crate) known: Option<ChatFacts>,
    /// Publications of the chats this bundle created
    /// ([`ChatTx::create_child`]), flushed after the commit with the
    /// bundle's own.
    pub(crate) created: Vec<chatd_pubsub::Publication>,
    /// The chat's context entries as far as the bundle follows them
    /// ([`crate::context_cache`]).
    pub(crate) history: crate::context_cache::HistoryLog,
    /// `known` predates rows the last transition appended (a step that
    /// only inserted messages, `ChatTx::land_appended`):
    /// its execution state, queue length and heartbeat age are current, but
    /// the columns the message triggers keep (`history_version`,
    /// `generation_attempt`, `retry_state`, `message_count`, the preview)
    /// and the context are behind. The next transition's `UPDATE` or the
    /// commit's context `UPDATE` returns the current row; [`ChatTx::chat`]
    /// reads it.
    pub(crate) row_behind: bool,
    /// The facts returned by the current transition's last statement when
    /// it was `ChatTx::change`: `ChatTx::land` checks them instead of
    /// reading the row. Any other use of the connection (`db!`) forgets
    /// them.
    pub(crate) landing: Option<ChatFacts>,
    /// Whether the bundle locked the row first or validates against a
    /// guess of it ([`guess::Guess`]).
    pub(crate) guess: guess::Guess,
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
        let history = HistoryLog::at(&store.context_cache, chat_id, chat.history_version);
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
            landing: None,
            guess: guess::Guess::Locked,
        }
    }

    /// A bundle over `tx`, a transaction that locks and bumps the members
    /// of a family itself ([`Store::set_family_archived`]): applies
    /// transitions to one member at a time, [`ChatTx::retarget`] moving it
    /// on; [`ChatTx::into_parts`] hands the transaction back for the
    /// commit. Never committed as a bundle.
    pub(crate) fn cascade(tx: Transaction<'static, Postgres>, store: Store) -> Self {
        Self {
            tx,
            chat_id: Uuid::nil(),
            snapshot_version: 0,
            store,
            applied: Vec::new(),
            known: None,
            created: Vec::new(),
            history: HistoryLog::Unknown,
            row_behind: false,
            landing: None,
            guess: guess::Guess::Locked,
        }
    }

    /// Moves a [`ChatTx::cascade`] bundle to chat `chat_id` (locked and
    /// bumped in its transaction already): it knows nothing of the row yet.
    pub(crate) fn retarget(&mut self, chat_id: Uuid) {
        self.chat_id = chat_id;
        self.known = None;
        self.history = HistoryLog::Unknown;
        self.row_behind = false;
        self.landing = None;
    }

    /// The transaction and the transitions applied, of a
    /// [`ChatTx::cascade`] bundle.
    pub(crate) fn into_parts(
        self,
    ) -> (
        Transaction<'static, Postgres>,
        Vec<(Transition, ExecutionState, ExecutionState)>,
    ) {
        (self.tx, self.applied)
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
    /// use chatd_store::chats::{self, MetadataChanges};
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
    /// use chatd_store::queue;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let mut tx = store.machine(chat.id).begin().await?;
    /// assert!(queue::list(tx.reader().await?, chat.id).await?.is_empty());
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
    /// commit. While an optimistic bundle's guess is unchecked it is the
    /// guess: the row this replica last committed, whose execution columns
    /// the first statement checks but whose metadata (title, labels, plan
    /// mode) and `updated_at` may have changed since.
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
    async fn facts(&mut self) -> StoreResult<&ChatFacts> {
        // An unchecked guess is what the bundle knows: the bundle's first
        // write checks it.
        let guessed = self.guess.pending().is_some() && self.known.is_some();
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
    /// use chatd_store::files;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let chat = fx.create_chat("hi").await?.chat;
    /// let id = uuid::Uuid::new_v4();
    /// let no_bytes = futures::stream::empty::<Result<Vec<u8>, std::convert::Infallible>>();
    /// files::store_upload(pool, id, owner, "a.txt", "text/plain", 0, i64::MAX, no_bytes).await?;
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
}

impl ChatTx {
    /// Writes a step's workspace `changes` in this bundle (API.md
    /// "Workspaces and provider-hosted tools": "what a step's tools changed
    /// is committed with that step"), with the step's rows: a crash shows
    /// all of them or none. Under the owner's storage lock, the workspace
    /// after the changes must fit in `max_workspace_bytes` and the owner's
    /// storage quota (`default_quota` unless they have their own), unless
    /// the changes shrink it; the summary columns (`Chat.workspace`)
    /// follow. No changes: nothing
    /// written. Returns the workspace's bytes after the changes.
    ///
    /// # Errors
    /// `InvalidInput` on `workspace` when the workspace would exceed a
    /// limit (permanent: the worker ends the turn with the reason);
    /// `ChatNotFound`; database errors.
    pub async fn write_workspace(
        &mut self,
        changes: &[crate::queries::workspaces::WorkspaceChange],
        max_workspace_bytes: i64,
        default_quota: i64,
    ) -> StoreResult<Option<i64>> {
        if changes.is_empty() {
            return Ok(None);
        }
        self.confirm().await?;
        let chat = self.chat().await?;
        let before = chat.workspace_bytes.unwrap_or(0);
        let chat_id = self.chat_id;
        let conn = self.conn().await?;
        let storage = queries::files::lock_storage(conn, chat.owner_id, default_quota)
            .await?
            .ok_or(StateError::ChatNotFound)?;
        queries::workspaces::apply(conn, chat_id, changes).await?;
        let after = queries::workspaces::refresh_summary(conn, chat_id).await?;
        // A workspace already over a limit (lowered since) may shrink.
        if after > max_workspace_bytes && after > before {
            return Err(StateError::InvalidInput {
                field: "workspace",
                detail: format!(
                    "the workspace would hold {after} bytes, over the limit of {max_workspace_bytes} bytes (--max-workspace-bytes)"
                ),
            }
            .into());
        }
        if after > before && !storage.fits(after - before) {
            return Err(StateError::InvalidInput {
                field: "workspace",
                detail: format!(
                    "the workspace would grow by {} bytes, over the owner's storage quota ({} of {} bytes used)",
                    after - before,
                    storage.used,
                    storage.quota
                ),
            }
            .into());
        }
        Ok(Some(after))
    }

    /// Gives `child`, a sub-agent this bundle just created
    /// ([`ChatTx::create_child`]), a copy of this chat's workspace as the
    /// bundle has it (with the step's own changes, so call it after
    /// [`ChatTx::write_workspace`]), under the owner's storage lock: the
    /// copy counts against their storage quota like a fork's. Nothing is
    /// copied when the workspace is empty or the copy would not fit.
    ///
    /// # Errors
    /// `ChatNotFound`; database errors.
    pub async fn copy_workspace_to_child(
        &mut self,
        child: Uuid,
        default_quota: i64,
    ) -> StoreResult<WorkspaceCopy> {
        self.confirm().await?;
        let owner_id = self.chat().await?.owner_id;
        let chat_id = self.chat_id;
        let conn = self.conn().await?;
        let manifest = queries::workspaces::manifest(&mut *conn, chat_id).await?;
        let bytes: i64 = manifest.iter().map(|e| e.bytes).sum();
        if manifest.is_empty() {
            return Ok(WorkspaceCopy::Empty);
        }
        let storage = queries::files::lock_storage(conn, owner_id, default_quota)
            .await?
            .ok_or(StateError::ChatNotFound)?;
        if !storage.fits(bytes) {
            return Ok(WorkspaceCopy::OverQuota { bytes, storage });
        }
        let copied = queries::workspaces::copy_for_fork(conn, chat_id, child).await?;
        Ok(WorkspaceCopy::Copied { bytes: copied })
    }
}

/// What [`ChatTx::copy_workspace_to_child`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceCopy {
    /// The workspace (`bytes`) was copied.
    Copied {
        /// The bytes copied.
        bytes: i64,
    },
    /// The workspace holds no entry: nothing to copy.
    Empty,
    /// The owner's storage quota cannot hold a copy of `bytes`: nothing
    /// was copied.
    OverQuota {
        /// The workspace's bytes.
        bytes: i64,
        /// The owner's storage when it was checked.
        storage: queries::files::Storage,
    },
}

/// Counts a transition outcome in the `chatd_transitions_total` metric
/// (labels `transition`, `outcome` = `ok` | `rejected`).
pub(crate) fn record_transition(transition: Transition, outcome: &'static str) {
    metrics::counter!("chatd_transitions_total", "transition" => transition.name(), "outcome" => outcome).increment(1);
}
