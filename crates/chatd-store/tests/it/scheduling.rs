//! The queries of fair scheduling (API.md "Limits, budgets and the token
//! lifecycle": "Running chats"): the per-owner candidate ranking, the
//! owner's room under their cap decided under the owner's lock (raced by
//! many claims at once), and the turn start the waiting chats are ranked by.

use std::sync::Arc;

use chatd_store::internals::chats;
use tokio::sync::Barrier;
use uuid::Uuid;

use crate::common::{Harness, user_text};

async fn add_user(h: &Harness, name: &str) -> Uuid {
    chatd_store::internals::users::insert(h.pool(), name, chatd_core::Role::Member)
        .await
        .expect("user")
        .id
}

/// A running chat of `owner` (its turn begins now).
async fn running_chat(h: &Harness, owner: Uuid, text: &str) -> Uuid {
    h.store
        .create_chat(chatd_store::CreateChatInput {
            owner_id: owner,
            initial_messages: vec![user_text(text)],
            ..Default::default()
        })
        .await
        .expect("create")
        .chat
        .id
}

/// `Acquire` by a fresh runner of `worker`, as a claim does, without the cap.
async fn acquire(h: &Harness, chat: Uuid) {
    let (worker, runner) = (Uuid::new_v4(), Uuid::new_v4());
    h.store
        .machine(chat)
        .update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await }))
        .await
        .expect("acquire");
}

#[tokio::test]
async fn candidates_rank_each_users_waiting_chats_by_turn_start_within_their_room() {
    let h = Harness::new().await;
    let bob = add_user(&h, "bob").await;
    let mut alice = Vec::new();
    for i in 0..6 {
        alice.push(running_chat(&h, h.owner, &format!("a{i}")).await);
    }
    let bobs = running_chat(&h, bob, "b0").await;
    // Cap 3: alice's first three by turn start, bob's one; every user's
    // first before anyone's second.
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 3)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![alice[0], bobs, alice[1], alice[2]]);
    assert!(found.blocked);
    // A batch of two cannot be filled by alice alone.
    let found = chats::acquisition_candidates(h.pool(), 30.0, 2, 3)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![alice[0], bobs]);
    // Two of alice's held: room for one more, the oldest waiting turn;
    // bob, holding none, ranks first (held slots + place: 0 + 1 < 2 + 1).
    acquire(&h, alice[0]).await;
    acquire(&h, alice[3]).await;
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 3)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![bobs, alice[1]]);
    // A per-user override wins over the default.
    sqlx::query("UPDATE users SET max_running_chats = 2 WHERE id = $1")
        .bind(h.owner)
        .execute(h.pool())
        .await
        .unwrap();
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 3)
        .await
        .unwrap();
    assert_eq!((found.chat_ids, found.blocked), (vec![bobs], true));
    assert_eq!(
        chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap(),
        2
    );
    // A lease gone stale frees its slot (and its chat is a candidate again).
    sqlx::query("UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 minute'")
        .execute(h.pool())
        .await
        .unwrap();
    assert_eq!(
        chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap(),
        0
    );
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 3)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![alice[0], bobs, alice[1]]);
}

#[tokio::test]
async fn an_idle_chat_a_runner_still_holds_keeps_its_owners_slot() {
    let h = Harness::new().await;
    let chat = running_chat(&h, h.owner, "hi").await;
    let (worker, runner) = (Uuid::new_v4(), Uuid::new_v4());
    h.store
        .machine(chat)
        .update(move |tx| Box::pin(async move { tx.acquire(worker, runner).await }))
        .await
        .unwrap();
    h.store
        .machine(chat)
        .update(|tx| Box::pin(async move { tx.finish_turn().await.map(|_| ()) }))
        .await
        .unwrap();
    // Idle but held: a message sent now runs without a new Acquire.
    assert_eq!(
        chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap(),
        1
    );
    h.store
        .machine(chat)
        .update(|tx| Box::pin(async move { tx.abandon().await }))
        .await
        .unwrap();
    assert_eq!(
        chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_racing_for_one_users_chats_never_pass_the_cap() {
    let h = Arc::new(Harness::new().await);
    const CAP: i32 = 5;
    let mut ids = Vec::new();
    for i in 0..24 {
        ids.push(running_chat(&h, h.owner, &format!("c{i}")).await);
    }
    for round in 0..3 {
        let barrier = Arc::new(Barrier::new(ids.len()));
        let claims = ids.iter().map(|&id| {
            let (h, barrier) = (h.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                // What a claim does: the chat's lock, then the owner's.
                let Some(mut tx) = h.store.machine(id).try_begin().await.unwrap() else {
                    return false;
                };
                let owner = tx.chat().await.unwrap().owner_id;
                if tx.chat().await.unwrap().worker_id.is_some() {
                    return false;
                }
                let room = chats::lock_owner_room(tx.reader().await.unwrap(), owner, CAP, 30.0)
                    .await
                    .unwrap();
                if room <= 0 {
                    return false;
                }
                tx.acquire(Uuid::new_v4(), Uuid::new_v4()).await.unwrap();
                tx.commit().await.unwrap();
                true
            })
        });
        let acquired = futures::future::join_all(claims)
            .await
            .into_iter()
            .filter(|r| *r.as_ref().unwrap())
            .count();
        let held = chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap();
        assert_eq!(
            (acquired, held),
            (CAP as usize, i64::from(CAP)),
            "round {round}"
        );
        // Every heartbeat goes stale: the next round races again.
        sqlx::query("DELETE FROM chat_heartbeats")
            .execute(h.pool())
            .await
            .unwrap();
        // A hand edit of execution columns advances the snapshot version.
        sqlx::query(
            "UPDATE chats SET worker_id = NULL, runner_id = NULL,
                              snapshot_version = snapshot_version + 1",
        )
        .execute(h.pool())
        .await
        .unwrap();
        for id in &ids {
            h.store.row_cache().remove(*id);
        }
    }
}

#[tokio::test]
async fn a_turn_starts_when_the_chat_becomes_runnable_and_not_at_its_steps() {
    let h = Harness::new().await;
    let chat = running_chat(&h, h.owner, "hi").await;
    let turn = |h: &Harness| {
        let pool = h.pool().clone();
        async move {
            sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
                "SELECT turn_started_at FROM chats WHERE id = $1",
            )
            .bind(chat)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let created = turn(&h).await;
    acquire(&h, chat).await;
    assert_eq!(turn(&h).await, created, "acquiring is not a new turn");
    h.store
        .machine(chat)
        .update(|tx| Box::pin(async move { tx.finish_turn().await.map(|_| ()) }))
        .await
        .unwrap();
    assert_eq!(turn(&h).await, created, "ending the turn keeps its start");
    let message = user_text("again");
    h.store
        .machine(chat)
        .update(move |tx| {
            Box::pin(async move {
                tx.send_message(chatd_store::SendMessageInput {
                    message,
                    busy_behavior: chatd_core::BusyBehavior::Queue,
                    max_queue_size: None,
                })
                .await
                .map(|_| ())
            })
        })
        .await
        .unwrap();
    assert!(
        turn(&h).await > created,
        "a send to an idle chat starts a turn"
    );
}

/// A chat of `owner` created with `parent` (a sub-agent: its family is
/// the parent's root), running.
async fn child_chat(h: &Harness, parent: Uuid, text: &str) -> Uuid {
    h.store
        .create_chat(chatd_store::CreateChatInput {
            owner_id: h.owner,
            parent_chat_id: Some(parent),
            initial_messages: vec![user_text(text)],
            ..Default::default()
        })
        .await
        .expect("create child")
        .chat
        .id
}

/// Sets a chat's status by hand (and its `requires_action` deadline).
async fn set_status(h: &Harness, chat: Uuid, status: &str) {
    sqlx::query(
        "UPDATE chats SET status = $2, snapshot_version = snapshot_version + 1,
                requires_action_deadline_at = CASE WHEN $2 = 'requires_action'
                    THEN now() + interval '5 minutes' END
          WHERE id = $1",
    )
    .bind(chat)
    .bind(status)
    .execute(h.pool())
    .await
    .unwrap();
    h.store.row_cache().remove(chat);
}

#[tokio::test]
async fn a_chat_family_shares_its_roots_slot() {
    let h = Harness::new().await;
    let root = running_chat(&h, h.owner, "parent").await;
    let child = child_chat(&h, root, "child").await;
    let grandchild = child_chat(&h, child, "grandchild").await;
    let (root_of,): (Option<Uuid>,) =
        sqlx::query_as("SELECT root_chat_id FROM chats WHERE id = $1")
            .bind(root)
            .fetch_one(h.pool())
            .await
            .unwrap();
    assert_eq!(root_of, None, "a root's root_chat_id is NULL");
    let other = running_chat(&h, h.owner, "another family").await;
    // Cap 1 and nothing held: one family, the one whose turn began first;
    // both its waiting chats go (the second adds no slot once the first
    // is acquired).
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 1)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![root, child, grandchild]);
    assert!(found.blocked);
    // The parent holds the only slot (as in `wait_agent`): its sub-agents
    // are still candidates, another family is not.
    acquire(&h, root).await;
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 1)
        .await
        .unwrap();
    assert_eq!(
        (found.chat_ids, found.blocked),
        (vec![child, grandchild], true)
    );
    assert!(
        chats::family_holds_slot(h.pool(), h.owner, root, 30.0)
            .await
            .unwrap()
    );
    assert!(
        !chats::family_holds_slot(h.pool(), h.owner, other, 30.0)
            .await
            .unwrap()
    );
    // The whole family held: one slot.
    acquire(&h, child).await;
    acquire(&h, grandchild).await;
    assert_eq!(
        chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap(),
        1
    );
    let mut tx = h.pool().begin().await.unwrap();
    assert_eq!(
        chats::lock_owner_room(&mut tx, h.owner, 2, 30.0)
            .await
            .unwrap(),
        1
    );
    tx.rollback().await.unwrap();
    // Only the child held (the parent's lease gone): the family still
    // holds its slot through the child.
    sqlx::query("DELETE FROM chat_heartbeats WHERE chat_id = $1")
        .bind(root)
        .execute(h.pool())
        .await
        .unwrap();
    assert!(
        chats::family_holds_slot(h.pool(), h.owner, root, 30.0)
            .await
            .unwrap()
    );
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 1)
        .await
        .unwrap();
    assert_eq!((found.chat_ids, found.blocked), (vec![root], true));
}

#[tokio::test]
async fn requires_action_chats_take_no_slot_and_unheld_interrupting_ones_need_none() {
    let h = Harness::new().await;
    let bob = add_user(&h, "bob").await;
    let first = running_chat(&h, h.owner, "first").await;
    let second = running_chat(&h, h.owner, "second").await;
    let bobs = running_chat(&h, bob, "bob").await;
    acquire(&h, first).await;
    // Cap 1, held by `first` running: `second` waits.
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 1)
        .await
        .unwrap();
    assert_eq!((found.chat_ids, found.blocked), (vec![bobs], true));
    // `first` waits for a client tool: it takes no slot, `second` starts.
    set_status(&h, first, "requires_action").await;
    assert_eq!(
        chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap(),
        0
    );
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 1)
        .await
        .unwrap();
    assert_eq!((found.chat_ids, found.blocked), (vec![second, bobs], false));
    // Interrupted while held, it keeps the slot it ran in until its
    // runner lets it go (it lands as a held idle chat).
    set_status(&h, first, "interrupting").await;
    assert_eq!(
        chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap(),
        1
    );
    // A chat waiting for a slot that is interrupted, or enters
    // `requires_action`, is a candidate even with a cap of 0.
    set_status(&h, second, "interrupting").await;
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 0)
        .await
        .unwrap();
    assert_eq!((found.chat_ids, found.blocked), (vec![second], true));
    set_status(&h, second, "requires_action").await;
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 0)
        .await
        .unwrap();
    assert_eq!((found.chat_ids, found.blocked), (vec![second], true));
    // Held idle chats keep counting (a message sent to them starts
    // without a new Acquire).
    set_status(&h, first, "waiting").await;
    assert_eq!(
        chats::held_chat_count(h.pool(), h.owner, 30.0)
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn a_user_holding_fewer_slots_ranks_first() {
    let h = Harness::new().await;
    let frank = add_user(&h, "frank").await;
    let mut eve = Vec::new();
    for i in 0..8 {
        eve.push(running_chat(&h, h.owner, &format!("e{i}")).await);
    }
    let franks = running_chat(&h, frank, "f0").await;
    // Nothing held: eve's first and frank's first tie on rank 1 (eve's
    // turn began first), then eve's others.
    let found = chats::acquisition_candidates(h.pool(), 30.0, 2, 8)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![eve[0], franks]);
    // Eve holds one: frank's (0 + 1) ranks before eve's next (1 + 1).
    acquire(&h, eve[0]).await;
    let found = chats::acquisition_candidates(h.pool(), 30.0, 1, 8)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![franks]);
    // Eve holds two: frank's first, then eve's in turn order.
    acquire(&h, eve[1]).await;
    let found = chats::acquisition_candidates(h.pool(), 30.0, 3, 8)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![franks, eve[2], eve[3]]);
}
