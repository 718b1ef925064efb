//! Archiving: `SetArchived` on one chat, and the family operations of
//! [`Store`] that apply it to a whole family or subtree in one transaction,
//! by hand or from the auto-archive loop (spec "PATCH
//! /api/experimental/chats/{chat}", "Auto-archive loop"; API.md
//! "Sub-agents and plan mode").

use std::time::Duration;

use chatd_core::{ExecutionState, StateError, Transition};
use chatd_pubsub::PublishBuffer;
use uuid::Uuid;

use crate::bundle::publish::{commit_and_flush, enqueue_publications};
use crate::bundle::{ChatTx, record_transition};
use crate::error::{StoreError, StoreResult};
use crate::models::Chat;
use crate::queries::{self, chats::ChatChanges, chats::LockMode};
use crate::store::Store;

impl ChatTx {
    /// `SetArchived(archived)`: `W/E0/E1 → XW/XE0/XE1` and back.
    ///
    /// # Errors
    /// Not allowed from any other state.
    ///
    /// Tested by `tests/it/transitions.rs`: `family_archive_is_all_or_nothing_and_root_only`; and `tests/it/matrix.rs`: `matrix_set_archived_true, matrix_set_archived_false` (every state).
    pub async fn set_archived(&mut self, archived: bool) -> StoreResult<()> {
        let t = Transition::SetArchived { archived };
        let (_, _, from) = self.enter(t).await?;
        let mut changes = ChatChanges {
            archived: Some(archived),
            ..ChatChanges::default()
        };
        if !archived && from == ExecutionState::XW {
            changes.last_error = None;
        }
        self.change(changes).await?;
        self.land(t, from).await?;
        Ok(())
    }
}

impl Store {
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
    /// let root = chatd_store::chats::select(pool, root.id, Default::default()).await?.unwrap();
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
        let mut members = vec![root_id];
        members.extend(children);
        // One bundle over the family's transaction, moved from member to
        // member: each applies `SetArchived` as a bundle of its own would.
        let mut bundle = ChatTx::cascade(tx, self.clone());
        for (i, member) in members.iter().enumerate() {
            if i > 0 {
                queries::chats::lock_and_bump(&mut bundle.tx, *member)
                    .await?
                    .ok_or(StateError::ChatNotFound)?;
            }
            bundle.retarget(*member);
            let chat = queries::chats::select(&mut *bundle.tx, *member, LockMode::None)
                .await?
                .ok_or(StateError::ChatNotFound)?;
            let state =
                chat.execution_state(queries::queue::len(&mut *bundle.tx, *member).await? > 0);
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
                bundle.set_archived(archived).await?;
            }
        }
        let (mut tx, applied) = bundle.into_parts();
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
