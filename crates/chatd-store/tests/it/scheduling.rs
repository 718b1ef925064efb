//! The queries of fair scheduling (API.md "Limits, budgets and the token
//! lifecycle": "Running chats"): the per-owner candidate ranking, the
//! owner's room under their cap decided under the owner's lock (raced by
//! many claims at once), and the turn start the waiting chats are ranked by.

use std::sync::Arc;

use chatd_store::queries::chats;
use tokio::sync::Barrier;
use uuid::Uuid;

use crate::common::{Harness, user_text};

async fn add_user(h: &Harness, name: &str) -> Uuid {
    chatd_store::queries::users::insert(h.pool(), name, chatd_core::Role::Member)
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
    // Two of alice's held: room for one more, the oldest waiting turn.
    acquire(&h, alice[0]).await;
    acquire(&h, alice[3]).await;
    let found = chats::acquisition_candidates(h.pool(), 30.0, 100, 3)
        .await
        .unwrap();
    assert_eq!(found.chat_ids, vec![alice[1], bobs]);
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
