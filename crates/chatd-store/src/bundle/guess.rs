//! The optimistic path of a bundle (issue 15; closed off in issue 32): a
//! bundle of a root chat that this replica committed last validates
//! against that committed row (the guess, kept in the replica's row cache,
//! `crate::row_cache`) instead of reading it, and its first statement
//! checks the guess by `snapshot_version` while it locks and bumps the row.
//! What the bundle knows of the guess is one value, [`Guess`]; the only way
//! to run an optimistic bundle is [`ChatMachine::update_optimistic`], whose
//! one retry loop runs the bundle again with the lock taken first when the
//! guess was stale, or when a refusal (the caller's precheck, or a
//! transition's rejection) was decided on the guessed row. Nothing of the
//! guess is public.
//!
//! The measured gain (issue 32, `bench_worker --compare-optimistic`, two
//! runs on a loaded 2-core machine, medians of 3 and 7 passes): one chat
//! +16.9 % / +7.7 % turns/s, 10 chats +4.3 % / +16.2 %, 100 chats +6.9 % /
//! −0.2 %, 400 streaming chats −0.2 %.

use futures::future::BoxFuture;
use sqlx::{Postgres, Transaction};

use super::ChatTx;
use crate::error::{StoreError, StoreResult};
use crate::machine::ChatMachine;
use crate::models::{Chat, ChatFacts};
use crate::store::Store;

/// What a bundle knows of the chat row it validates against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guess {
    /// Begun with the lock-and-bump ([`ChatMachine::begin`]): the row is
    /// locked and current.
    Locked,
    /// Begun from the row this replica last committed, at
    /// `snapshot_version = version`; no statement has checked it yet.
    Pending {
        /// The guessed row's `snapshot_version`.
        version: i64,
    },
    /// Begun from a guess that a statement checked: the row is locked and
    /// bumped.
    Confirmed,
    /// Begun from a guess that was stale: nothing more runs in the bundle,
    /// and it cannot commit ([`StoreError::GuessMissed`]).
    Missed,
}

impl Guess {
    /// The guessed version while unchecked.
    pub(crate) fn pending(self) -> Option<i64> {
        match self {
            Guess::Pending { version } => Some(version),
            _ => None,
        }
    }

    /// The guessed version while unchecked, marking it checked: the
    /// statement about to run checks it (and sets [`Guess::Missed`] when
    /// it fails).
    pub(crate) fn take_pending(&mut self) -> Option<i64> {
        let version = self.pending();
        if version.is_some() {
            *self = Guess::Confirmed;
        }
        version
    }

    /// Whether the bundle began from a guess rather than the locked row,
    /// checked since or not: a refusal decided on it is not final (the
    /// check compares `snapshot_version` alone).
    pub(crate) fn began_from_guess(self) -> bool {
        !matches!(self, Guess::Locked)
    }
}

impl Store {
    /// The replica's cache of committed chat rows (`crate::row_cache`), the
    /// guesses of [`ChatMachine::update_optimistic`]. A test hook: tests
    /// put stale guesses in it, and drop a chat from it after writing its
    /// execution columns without a bump.
    #[doc(hidden)]
    pub fn row_cache(&self) -> &crate::row_cache::RowCache {
        &self.row_cache
    }
}

impl ChatMachine {
    /// Opens an optimistic bundle: when this replica committed the chat
    /// last, begins a transaction without locking the row; its transitions
    /// validate against that committed row (the guess), and the first
    /// statement checks it: the transitions whose first write is the chat
    /// row's `UPDATE` (recording a generation attempt or a retry state,
    /// finishing a turn or an error, entering requires-action, requesting
    /// compaction, archiving) lock, bump and check in that one statement;
    /// every other transition, read or commit locks and bumps first as
    /// [`ChatMachine::begin`] does ([`ChatTx::confirm`]). A stale guess fails
    /// the bundle with [`StoreError::GuessMissed`] and nothing it did is
    /// committed. Without a committed row of the chat at hand, or for a
    /// sub-chat (whose bundles key-share its family first), this is
    /// [`ChatMachine::begin`].
    pub(crate) async fn begin_optimistic(&self) -> StoreResult<ChatTx> {
        match self.store.row_cache.get(self.chat_id) {
            Some(row) if row.chat.parent_chat_id.is_none() && row.chat.root_chat_id.is_none() => {
                let tx = crate::queries::begin(&self.store.pool).await?;
                Ok(ChatTx::guessed(tx, row, self.store.clone()))
            }
            _ => self.begin().await,
        }
    }

    /// Runs `f` in a bundle when `precheck` holds for the chat row, and
    /// commits when `f` returns `Ok`; `Ok(None)` (nothing committed) when
    /// `precheck` fails. A worker task's bundles are these, with its fence
    /// as the precheck.
    ///
    /// The bundle is optimistic when this replica committed the chat last:
    /// `precheck` and `f`'s transitions are checked against that committed
    /// row, and the first statement checks that the row is still it (a
    /// generation attempt is then one statement). When it is not, the
    /// bundle is rolled back and runs again with the lock taken first, so
    /// `precheck` and `f` may run twice (hence `Fn`): what is returned is
    /// the run that committed. A failed precheck or a rejection
    /// (`StoreError::State`) decided on the guess runs again locked too, and
    /// only the locked run's answer is returned: the guess is checked by
    /// `snapshot_version` alone, so execution columns written without a
    /// bump (an operator's SQL) must not leave the bundle refusing what the
    /// locked row allows. Any other error of `f` is checked against the
    /// locked row before it is returned.
    ///
    /// # Errors
    /// As [`ChatMachine::update`] (`ChatNotFound` for a missing chat).
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::ChatStatus;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let machine = store.machine(chat.id);
    /// let running = |chat: &chatd_store::Chat| chat.status == ChatStatus::Running;
    /// let (n, _) = machine
    ///     .update_optimistic(running, |tx, _| Box::pin(async move { tx.record_generation_attempt().await }))
    ///     .await?
    ///     .expect("running");
    /// assert_eq!(n, 1);
    /// // Once the turn finished, the precheck refuses and nothing commits.
    /// machine.update(|tx| Box::pin(async move { tx.finish_turn().await })).await?;
    /// let refused = machine
    ///     .update_optimistic(running, |tx, _| Box::pin(async move { tx.record_generation_attempt().await }))
    ///     .await?;
    /// assert!(refused.is_none());
    /// let row = chatd_testkit::store::chat_row(pool, chat.id).await;
    /// assert_eq!((row.status, row.generation_attempt), (ChatStatus::Waiting, 1));
    /// # Ok(()) }
    /// ```
    pub async fn update_optimistic<T, P, F>(
        &self,
        precheck: P,
        f: F,
    ) -> StoreResult<Option<(T, Chat)>>
    where
        P: Fn(&Chat) -> bool,
        F: for<'a> Fn(&'a mut ChatTx, &'a Chat) -> BoxFuture<'a, StoreResult<T>>,
    {
        let tx = self.begin_optimistic().await?;
        let optimistic = tx.guess.began_from_guess();
        match attempt(tx, &precheck, &f).await {
            Err(StoreError::GuessMissed) => {}
            // A refusal decided on the guess, whose check compares only the
            // version: the locked run has the last word.
            Ok(None) | Err(StoreError::State(_)) if optimistic => self.forget_guess(),
            other => return other,
        }
        attempt(self.begin().await?, &precheck, &f).await
    }

    /// Drops this chat's row from the replica's row cache: its next bundle
    /// locks first (the one after a commit is optimistic again).
    pub(crate) fn forget_guess(&self) {
        self.store.row_cache.remove(self.chat_id);
    }
}

/// One run of [`ChatMachine::update_optimistic`] on the bundle `tx`. In an
/// optimistic bundle whose guess turns out stale, anything `precheck`, `f`
/// or the commit decided gives way to [`StoreError::GuessMissed`].
async fn attempt<T, P, F>(mut tx: ChatTx, precheck: &P, f: &F) -> StoreResult<Option<(T, Chat)>>
where
    P: Fn(&Chat) -> bool,
    F: for<'a> Fn(&'a mut ChatTx, &'a Chat) -> BoxFuture<'a, StoreResult<T>>,
{
    let chat = tx.chat().await?;
    if !precheck(&chat) {
        // Dropping the bundle rolls back any snapshot bump; nothing is
        // published.
        return Ok(None);
    }
    let value = match f(&mut tx, &chat).await {
        Ok(value) => value,
        Err(err) => {
            // A rejection in a bundle begun from the guess runs again
            // locked; any other error decided on the guessed row stands
            // only for the locked one.
            if !(tx.guess.began_from_guess() && matches!(err, StoreError::State(_))) {
                tx.confirm().await?;
            }
            return Err(err);
        }
    };
    Ok(Some((value, tx.commit().await?)))
}

impl ChatTx {
    /// An optimistic bundle on the open transaction `tx` (no statement run
    /// yet), guessing that chat `row.chat.id` is still at `row`, the row this
    /// replica last committed.
    fn guessed(tx: Transaction<'static, Postgres>, mut row: ChatFacts, store: Store) -> Self {
        let (chat_id, version) = (row.chat.id, row.chat.snapshot_version);
        // What a lock-and-bump would return if the guess holds.
        row.chat.snapshot_version = version + 1;
        let history = crate::context_cache::HistoryLog::at(
            &store.context_cache,
            chat_id,
            row.chat.history_version,
        );
        Self {
            tx,
            chat_id,
            snapshot_version: version + 1,
            store,
            applied: Vec::new(),
            known: Some(row),
            created: Vec::new(),
            history,
            row_behind: false,
            landing: None,
            guess: Guess::Pending { version },
        }
    }

    /// Checks an optimistic bundle's guess now, if no statement has yet:
    /// locks the row and bumps its version as [`ChatMachine::begin`] does.
    /// The transition methods that cannot fold the check into their first
    /// write, the reads of [`ChatTx::conn`] and [`ChatTx::reader`], and the
    /// commit call it. Nothing to do in a bundle that locked first.
    ///
    /// # Errors
    /// [`StoreError::GuessMissed`] when another bundle committed since the
    /// guessed row (or the chat is gone): the bundle must be dropped, and
    /// [`ChatMachine::update_optimistic`] runs it again; database errors.
    pub(crate) async fn confirm(&mut self) -> StoreResult<()> {
        if self.guess == Guess::Missed {
            return Err(StoreError::GuessMissed);
        }
        if let Some((updated_at, heartbeat_age_secs)) = self.check_guess().await? {
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
}

/// Counts an optimistic bundle whose guess was stale (it is run again
/// locked), in the `chatd_optimistic_guess_missed_total` metric.
pub(crate) fn record_guess_missed() {
    metrics::counter!("chatd_optimistic_guess_missed_total").increment(1);
}
