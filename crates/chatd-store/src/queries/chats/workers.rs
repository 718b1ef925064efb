//! What the worker reads and locks (spec "Acquisition loop", "Runner
//! goroutines"): acquisition candidates, held slots, leases, and the
//! versions the stream loop compares.

use super::*;

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
    (@sql $d:tt $k:tt ($owner:tt) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            " FROM chats held WHERE held.owner_id = " $owner
            " AND held.worker_id IS NOT NULL AND held.runner_id IS NOT NULL
              AND held.status <> 'requires_action'
              AND EXISTS (SELECT 1 FROM chat_heartbeats hb
                           WHERE hb.chat_id = held.id AND hb.runner_id = held.runner_id
                             AND hb.heartbeat_at >= now() - make_interval(secs => $1))"
            $($rest)*)
    };
}

/// `SELECT count(*)` of the slots the owner `$owner` (an SQL expression)
/// takes under their running-chat cap: the distinct chat families
/// (`coalesce(root_chat_id, id)`: a root chat and its sub-agents share the
/// root's slot) among the chats of [`counted_held_sql`].
macro_rules! held_chats_sql {
    (@sql $d:tt $k:tt ($owner:tt) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            r#"SELECT count(DISTINCT coalesce(held.root_chat_id, held.id)) AS "count!""#
            counted_held_sql!($owner)
            $($rest)*)
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
pub async fn acquisition_candidates(
    conn: impl PgExecutor<'_>,
    stale_after_secs: f64,
    limit: i64,
    default_max_running_chats: i32,
) -> sqlx::Result<AcquisitionCandidates> {
    let (chat_ids, blocked): (Vec<Uuid>, bool) = sql!(query()
        [, stale_after_secs, limit, default_max_running_chats]:
        "WITH waiting AS (
            SELECT c.id, c.owner_id, c.turn_started_at, coalesce(c.root_chat_id, c.id) AS family,
                   c.status IN ('requires_action', 'interrupting') AS slotless
              FROM chats c
             WHERE "
        runnable_chat_sql!("c.")
        " AND (c.worker_id IS NULL OR c.runner_id IS NULL OR NOT EXISTS (
                    SELECT 1 FROM chat_heartbeats h WHERE h.chat_id = c.id AND h.runner_id = c.runner_id
                      AND h.heartbeat_at >= now() - make_interval(secs => $1)))
         ), owners AS (
            SELECT u.id AS owner_id, coalesce(u.max_running_chats, $3) AS cap,
                   ARRAY(SELECT DISTINCT coalesce(held.root_chat_id, held.id)"
        counted_held_sql!("u.id")
        r#") AS families
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
         SELECT ARRAY(SELECT id FROM eligible ORDER BY rank, turn_started_at, id LIMIT $2)
                    AS "chat_ids!",
                EXISTS (SELECT 1 FROM classed c JOIN new_families f USING (owner_id, family)
                         WHERE f.place > c.cap - c.held) AS "blocked!""#
    )
    .map(|r| (r.chat_ids, r.blocked))
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
pub async fn held_chat_count(
    conn: impl PgExecutor<'_>,
    owner_id: Uuid,
    stale_after_secs: f64,
) -> sqlx::Result<i64> {
    sql!(query_scalar() [, stale_after_secs, owner_id]: held_chats_sql!("$2"))
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
pub async fn family_holds_slot(
    conn: impl PgExecutor<'_>,
    owner_id: Uuid,
    family_id: Uuid,
    stale_after_secs: f64,
) -> sqlx::Result<bool> {
    sql!(query_scalar() [, stale_after_secs, owner_id, family_id]:
        "SELECT EXISTS (SELECT 1"
        counted_held_sql!("$2")
        r#" AND coalesce(held.root_chat_id, held.id) = $3) AS "exists!""#
    )
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
pub async fn lock_owner_room(
    conn: &mut PgConnection,
    owner_id: Uuid,
    default_max_running_chats: i32,
    stale_after_secs: f64,
) -> sqlx::Result<i64> {
    let cap: Option<i32> = sqlx::query_scalar!(
        r#"SELECT coalesce(max_running_chats, $2) AS "cap!" FROM users WHERE id = $1 FOR NO KEY UPDATE"#,
        owner_id,
        default_max_running_chats,
    )
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
pub async fn child_count(conn: impl PgExecutor<'_>, parent: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM chats WHERE parent_chat_id = $1"#,
        parent
    )
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
pub async fn next_lease_expiry(
    conn: impl PgExecutor<'_>,
    worker_id: Uuid,
    stale_after_secs: f64,
) -> sqlx::Result<Option<f64>> {
    sql!(query_scalar() [, worker_id, stale_after_secs]:
        r#"SELECT EXTRACT(EPOCH FROM (min(h.heartbeat_at) + make_interval(secs => $2) - now()))::float8
               AS "secs?"
           FROM chats c JOIN chat_heartbeats h ON h.chat_id = c.id AND h.runner_id = c.runner_id
          WHERE "#
        runnable_chat_sql!("c.")
        " AND c.worker_id IS NOT NULL AND c.worker_id <> $1
            AND h.heartbeat_at >= now() - make_interval(secs => $2)"
    )
    .fetch_one(conn)
    .await
    .map(|secs: Option<f64>| secs.map(|s| s.max(0.0)))
}

/// The rows of the chats among `ids` that exist (any order).
pub async fn select_many(conn: impl PgExecutor<'_>, ids: &[Uuid]) -> sqlx::Result<Vec<Chat>> {
    sql!(query() [, ids]: "SELECT " chat_columns!() " FROM chats c WHERE c.id = ANY($1::uuid[])")
        .try_map(|r| Ok(chat_of!(r)))
        .fetch_all(conn)
        .await
}

/// `(chat id, runner id)` of every chat whose `worker_id` is `worker_id`.
pub async fn owned_by_worker(
    conn: impl PgExecutor<'_>,
    worker_id: Uuid,
) -> sqlx::Result<Vec<(Uuid, Option<Uuid>)>> {
    sqlx::query!(
        "SELECT id, runner_id FROM chats WHERE worker_id = $1",
        worker_id
    )
    .map(|r| (r.id, r.runner_id))
    .fetch_all(conn)
    .await
}

/// Seconds until chat `chat_id`'s requires-action deadline (negative once
/// it passed; database time), `None` when it has none.
pub async fn requires_action_remaining_secs(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Option<f64>> {
    sqlx::query_scalar!(
        r#"SELECT extract(epoch FROM requires_action_deadline_at - now())::float8 AS "secs?"
           FROM chats WHERE id = $1"#,
        chat_id
    )
    .fetch_one(conn)
    .await
}

/// The version columns of one chat, as the stream's sync poller reads them
/// (spec "Sync poller" → "Polling").
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
pub async fn versions(conn: impl PgExecutor<'_>, ids: &[Uuid]) -> sqlx::Result<Vec<ChatVersions>> {
    sqlx::query!(
        "SELECT id, snapshot_version, history_version, queue_version, retry_state_version, generation_attempt, status, worker_id
         FROM chats
         WHERE id = ANY($1::uuid[])",
        ids
    )
    .try_map(|r| {
        Ok(ChatVersions {
            id: r.id,
            snapshot_version: r.snapshot_version,
            history_version: r.history_version,
            queue_version: r.queue_version,
            retry_state_version: r.retry_state_version,
            generation_attempt: r.generation_attempt,
            status: crate::queries::decode_column("status", r.status)?,
            worker_id: r.worker_id,
        })
    })
    .fetch_all(conn)
    .await
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn acquisition_candidates_chats_a_worker_may_acquire_spec_acquisition_loop()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // Running and held by no runner: a candidate.
        let found = chats::acquisition_candidates(pool, 30.0, 10, 8).await?;
        assert_eq!((found.chat_ids, found.blocked), (vec![chat.id], false));
        // With a cap of 0 for everyone, it waits.
        let found = chats::acquisition_candidates(pool, 30.0, 10, 0).await?;
        assert_eq!((found.chat_ids, found.blocked), (vec![], true));
        // Interrupted meanwhile, it takes no slot: a candidate even so.
        let machine = store.machine(chat.id);
        machine
            .update(|tx| Box::pin(async move { tx.interrupt().await.map(|_| ()) }))
            .await?;
        let found = chats::acquisition_candidates(pool, 30.0, 10, 0).await?;
        assert_eq!((found.chat_ids, found.blocked), (vec![chat.id], false));
        // Acquired, with a fresh heartbeat: not.
        let (worker, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        machine
            .update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await }))
            .await?;
        let found = chats::acquisition_candidates(pool, 30.0, 10, 8).await?;
        assert_eq!((found.chat_ids, found.blocked), (vec![], false));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn held_chat_count_how_many_running_chat_slots_of_owner_id_runners_take_now()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        assert_eq!(chats::held_chat_count(pool, owner, 30.0).await?, 0);
        let (worker, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let machine = store.machine(chat.id);
        machine
            .update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await }))
            .await?;
        assert_eq!(chats::held_chat_count(pool, owner, 30.0).await?, 1);
        // Its runner lets it go: no slot.
        machine
            .update(|tx| Box::pin(async move { tx.abandon().await }))
            .await?;
        assert_eq!(chats::held_chat_count(pool, owner, 30.0).await?, 0);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn family_holds_slot_whether_the_chat_family_family_id_a_root_chat_s_id()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        assert!(!chats::family_holds_slot(pool, owner, chat.id, 30.0).await?);
        let (worker, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let machine = store.machine(chat.id);
        machine
            .update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await }))
            .await?;
        assert!(chats::family_holds_slot(pool, owner, chat.id, 30.0).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lock_owner_room_locks_the_row_of_user_owner_id_for_no_key_update_until()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let mut tx = pool.begin().await?;
        assert_eq!(chats::lock_owner_room(&mut tx, owner, 8, 30.0).await?, 8);
        tx.commit().await?;
        sqlx::query("UPDATE users SET max_running_chats = 2 WHERE id = $1")
            .bind(owner)
            .execute(pool)
            .await?;
        let mut tx = pool.begin().await?;
        assert_eq!(chats::lock_owner_room(&mut tx, owner, 8, 30.0).await?, 2);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn child_count_how_many_children_chat_parent_has_chats_whose_parent_chat_id()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let parent = fx.create_chat("hi").await?.chat;
        assert_eq!(chats::child_count(pool, parent.id).await?, 0);
        let mut tx = store.machine(parent.id).begin().await?;
        let first = crate::NewMessage::user(vec![chatd_core::MessagePart::text("sub-task")]);
        let child = crate::CreateChatInput {
            owner_id: owner,
            initial_messages: vec![first],
            ..Default::default()
        };
        tx.create_child(child).await?;
        assert_eq!(chats::child_count(tx.reader().await?, parent.id).await?, 1);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn next_lease_expiry_seconds_database_time_0_until_the_first_lease_held_by()
    -> anyhow::Result<()> {
        use crate::queries::{chats, heartbeats};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let store = crate::Store::new(
            pool.clone(),
            std::sync::Arc::new(chatd_pubsub::RecordingPublisher::new()),
        );
        let owner = crate::queries::users::insert(pool, "alice", chatd_core::Role::Member)
            .await?
            .id;
        let hi = vec![crate::NewMessage::user(vec![
            chatd_core::MessagePart::text("hi"),
        ])];
        let input = crate::CreateChatInput {
            owner_id: owner,
            initial_messages: hi,
            ..Default::default()
        };
        let created = store.create_chat(input).await?;
        let chat = created.chat.clone();
        let (me, other, runner) = (
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
        );
        assert_eq!(
            chats::next_lease_expiry(pool, me, 30.0).await?,
            None,
            "nobody holds it"
        );
        let machine = store.machine(chat.id);
        machine
            .update(move |tx| Box::pin(async move { tx.acquire(other, runner).await }))
            .await?;
        heartbeats::upsert(&mut *pool.acquire().await?, chat.id, runner).await?;
        let left = chats::next_lease_expiry(pool, me, 30.0)
            .await?
            .expect("another worker's lease");
        assert!(left > 29.0 && left <= 30.0, "{left}");
        assert_eq!(
            chats::next_lease_expiry(pool, other, 30.0).await?,
            None,
            "its own lease"
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_many_the_rows_of_the_chats_among_ids_that_exist_any_order() -> anyhow::Result<()>
    {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let rows = chats::select_many(pool, &[chat.id, uuid::Uuid::new_v4()]).await?;
        assert_eq!(rows.iter().map(|c| c.id).collect::<Vec<_>>(), vec![chat.id]);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn owned_by_worker_chat_id_runner_id_of_every_chat_whose_worker_id_is()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let (worker, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let machine = store.machine(chat.id);
        machine
            .update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await }))
            .await?;
        assert_eq!(
            chats::owned_by_worker(pool, worker).await?,
            vec![(chat.id, Some(runner))]
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn requires_action_remaining_secs_seconds_until_chat_chat_id_s_requires()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        assert_eq!(
            chats::requires_action_remaining_secs(pool, chat.id).await?,
            None
        );
        let machine = store.machine(chat.id);
        machine
            .update(|tx| Box::pin(async move { tx.enter_requires_action().await }))
            .await?;
        let secs = chats::requires_action_remaining_secs(pool, chat.id)
            .await?
            .expect("a deadline");
        assert!(
            secs > 0.0 && secs <= 300.0,
            "the default timeout is 5 minutes"
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn versions_the_chatversions_of_every_chat_among_ids_that_exists_in_one()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        use chatd_core::ChatStatus;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let rows = chats::versions(pool, &[chat.id, uuid::Uuid::new_v4()]).await?;
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].snapshot_version, rows[0].status),
            (1, ChatStatus::Running)
        );
        Ok(())
    }
}
