//! What the store publishes, and when (`spec/chatd-architecture.md`,
//! "Notification emission rules"): one `chat:update:{id}` with the committed
//! values per committed bundle, `chat:ownership` when the result is runnable
//! and no runner holds a fresh heartbeat, nothing for failed bundles, locks or
//! snapshots.

use std::sync::Arc;
use std::time::Duration;

use chatd_core::{BusyBehavior, ChatStatus, ExecutionState, StateError};
use chatd_pubsub::{
    ChatUpdate, OWNERSHIP_CHANNEL, OwnershipHint, PgPubsub, Publication, Pubsub, PubsubEvent,
    Subscription, chat_update_channel,
};
use chatd_store::{
    Chat, ChatTx, CreateChatInput, SendMessageInput, Store, StoreError, StoreResult,
};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::{Harness, assistant_text, chat_error, retry_state, user_text};

/// The `chat:update` payload the committed row calls for, built from the row
/// as read back from the database (not from the store's own helper).
fn expected_update(chat: &Chat) -> ChatUpdate {
    ChatUpdate {
        chat_id: chat.id,
        snapshot_version: chat.snapshot_version,
        worker_id: chat.worker_id,
        runner_id: chat.runner_id,
        history_version: chat.history_version,
        queue_version: chat.queue_version,
        retry_state_version: chat.retry_state_version,
        generation_attempt: chat.generation_attempt,
        status: chat.status,
        archived: chat.archived,
    }
}

fn updates_for(published: &[Publication], id: Uuid) -> Vec<ChatUpdate> {
    let channel = chat_update_channel(id);
    published
        .iter()
        .filter(|p| p.channel == channel)
        .map(|p| ChatUpdate::from_payload(&p.payload).expect("ChatUpdate payload"))
        .collect()
}

fn hints(published: &[Publication]) -> Vec<OwnershipHint> {
    published
        .iter()
        .filter(|p| p.channel == OWNERSHIP_CHANNEL)
        .map(|p| OwnershipHint::from_payload(&p.payload).expect("OwnershipHint payload"))
        .collect()
}

/// Asserts that exactly one `chat:update:{id}` was published, carrying the
/// committed row's values, and returns the ownership hints published with it.
async fn assert_one_update_matching_row(h: &Harness, id: Uuid) -> Vec<OwnershipHint> {
    let published = h.published.take();
    let row = h.chat(id).await;
    assert_eq!(updates_for(&published, id), vec![expected_update(&row)]);
    let hints = hints(&published);
    assert_eq!(
        published.len(),
        1 + hints.len(),
        "unexpected publications: {published:?}"
    );
    hints
}

type Op = for<'a> fn(&'a mut ChatTx) -> BoxFuture<'a, StoreResult<()>>;

async fn run(h: &Harness, id: Uuid, op: Op) -> Chat {
    let ((), chat) = h.store.machine(id).update(op).await.expect("transition");
    chat
}

fn queue_send(tx: &mut ChatTx) -> BoxFuture<'_, StoreResult<()>> {
    Box::pin(async move {
        tx.send_message(SendMessageInput {
            message: user_text("queued"),
            busy_behavior: BusyBehavior::Queue,
            max_queue_size: None,
        })
        .await
        .map(|_| ())
    })
}

fn record_attempt(tx: &mut ChatTx) -> BoxFuture<'_, StoreResult<()>> {
    Box::pin(async move { tx.record_generation_attempt().await.map(|_| ()) })
}

fn finish_turn(tx: &mut ChatTx) -> BoxFuture<'_, StoreResult<()>> {
    Box::pin(async move { tx.finish_turn().await.map(|_| ()) })
}

fn finish_error(tx: &mut ChatTx) -> BoxFuture<'_, StoreResult<()>> {
    Box::pin(async move { tx.finish_error(chat_error("boom")).await })
}

fn interrupt(tx: &mut ChatTx) -> BoxFuture<'_, StoreResult<()>> {
    Box::pin(async move { tx.interrupt().await.map(|_| ()) })
}

fn archive(tx: &mut ChatTx) -> BoxFuture<'_, StoreResult<()>> {
    Box::pin(async move { tx.set_archived(true).await })
}

fn abandon(tx: &mut ChatTx) -> BoxFuture<'_, StoreResult<()>> {
    Box::pin(async move { tx.abandon().await })
}

fn request_compaction(tx: &mut ChatTx) -> BoxFuture<'_, StoreResult<()>> {
    Box::pin(async move { tx.request_compaction().await })
}

fn state_error(err: StoreError) -> StateError {
    match err {
        StoreError::State(e) => e,
        other => panic!("expected a state error, got {other:?}"),
    }
}

async fn create_with(h: &Harness, parent: Option<Uuid>, status: ChatStatus) -> Uuid {
    h.store
        .create_chat(CreateChatInput {
            owner_id: h.owner,
            parent_chat_id: parent,
            initial_messages: vec![user_text("hi")],
            initial_status: Some(status),
            ..CreateChatInput::default()
        })
        .await
        .expect("create")
        .chat
        .id
}

// chat:update payloads.

#[tokio::test]
async fn every_committed_update_publishes_one_chat_update_with_the_committed_values() {
    let h = Harness::new().await;
    let id = h.create().await;
    assert_one_update_matching_row(&h, id).await;

    let (worker, runner) = (h.worker, h.runner);
    let ((), acquired) = h
        .run(id, move |tx| {
            Box::pin(async move { tx.acquire(worker, runner).await })
        })
        .await;
    assert_one_update_matching_row(&h, id).await;
    assert_eq!(
        (acquired.worker_id, acquired.runner_id),
        (Some(worker), Some(runner))
    );

    let steps: [(&str, Op); 6] = [
        ("record attempt", record_attempt),
        ("queue a message", queue_send),
        ("queue another", queue_send),
        ("finish turn promoting the head", finish_turn),
        ("interrupt", interrupt),
        ("record attempt after finish interruption", |tx| {
            Box::pin(async move {
                tx.finish_interruption(vec![assistant_text("partial")])
                    .await?;
                tx.record_generation_attempt().await.map(|_| ())
            })
        }),
    ];
    for (name, op) in steps {
        let before = h.snapshot_version(id).await;
        let committed = run(&h, id, op).await;
        assert_eq!(committed.snapshot_version, before + 1, "{name}");
        let published = h.published.take();
        let row = h.chat(id).await;
        assert_eq!(committed, row, "{name}: commit returns the committed row");
        assert_eq!(
            updates_for(&published, id),
            vec![expected_update(&row)],
            "{name}"
        );
    }

    // A retry payload moves retry_state_version, and the update says so.
    let ((), chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.record_retry_state(retry_state(1)).await.map(|_| ()) })
        })
        .await;
    let published = h.published.take();
    let update = updates_for(&published, id).pop().expect("one update");
    assert_eq!(update.retry_state_version, chat.snapshot_version);
    assert_eq!(update, expected_update(&h.chat(id).await));

    // The wire shape: exactly the notification fields, status in snake case.
    let raw: Value = serde_json::from_slice(
        &published
            .iter()
            .find(|p| p.channel == chat_update_channel(id))
            .unwrap()
            .payload,
    )
    .unwrap();
    let mut keys: Vec<&str> = raw
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        vec![
            "archived",
            "chat_id",
            "generation_attempt",
            "history_version",
            "queue_version",
            "retry_state_version",
            "runner_id",
            "snapshot_version",
            "status",
            "worker_id"
        ]
    );
    assert_eq!(raw["status"], json!("running"));
    assert_eq!(raw["worker_id"], json!(worker.to_string()));
}

#[tokio::test]
async fn empty_bundle_commit_publishes_one_update_with_the_bumped_snapshot() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::W).await;
    h.published.take();
    let tx = h.store.machine(id).begin().await.unwrap();
    assert_eq!(tx.snapshot_version(), h.snapshot_version(id).await + 1);
    let chat = tx.commit().await.unwrap();
    assert_eq!(chat.snapshot_version, h.snapshot_version(id).await);
    assert_eq!(assert_one_update_matching_row(&h, id).await, vec![]);
}

// Failed bundles.

#[tokio::test]
async fn rejected_transition_publishes_nothing_and_changes_nothing() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::W).await;
    let before = h.dump(id).await;
    h.published.take();
    let err = h.rejected(id, interrupt).await;
    let StateError::TransitionNotAllowed(rejection) = state_error(err) else {
        panic!("expected TransitionNotAllowed");
    };
    assert_eq!(rejection.from, ExecutionState::W);
    assert_eq!(h.dump(id).await, before);
    assert_eq!(h.published.take(), vec![]);
}

#[tokio::test]
async fn closure_error_after_a_successful_transition_rolls_back_and_publishes_nothing() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let before = h.dump(id).await;
    let snapshot = h.snapshot_version(id).await;
    h.published.take();
    let err = h
        .rejected(id, |tx| {
            Box::pin(async move {
                tx.interrupt().await?;
                assert_eq!(tx.execution_state().await?, ExecutionState::I1);
                Err::<(), _>(StoreError::State(StateError::InvalidInput {
                    field: "test",
                    detail: "abort after interrupt".into(),
                }))
            })
        })
        .await;
    assert!(matches!(
        state_error(err),
        StateError::InvalidInput { field: "test", .. }
    ));
    assert_eq!(h.snapshot_version(id).await, snapshot);
    assert_eq!(h.dump(id).await, before);
    assert_eq!(h.state(id).await, ExecutionState::R1);
    assert_eq!(h.published.take(), vec![]);
}

#[tokio::test]
async fn dropping_an_uncommitted_bundle_rolls_back_and_publishes_nothing() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let before = h.dump(id).await;
    let snapshot = h.snapshot_version(id).await;
    h.published.take();
    let mut tx = h.store.machine(id).begin().await.unwrap();
    assert_eq!(tx.snapshot_version(), snapshot + 1);
    tx.commit_step(vec![assistant_text("never committed")], false)
        .await
        .unwrap();
    tx.finish_turn().await.unwrap();
    assert_eq!(tx.execution_state().await.unwrap(), ExecutionState::W);
    drop(tx);
    assert_eq!(h.snapshot_version(id).await, snapshot);
    assert_eq!(h.dump(id).await, before);
    assert_eq!(h.published.take(), vec![]);
    // The row lock went with the rollback: the chat takes updates again.
    let chat = run(&h, id, record_attempt).await;
    assert_eq!(chat.snapshot_version, snapshot + 1);
}

// chat:ownership.

#[tokio::test]
async fn create_publishes_an_ownership_hint_with_the_committed_snapshot() {
    let h = Harness::new().await;
    let id = h.create().await;
    let hints = assert_one_update_matching_row(&h, id).await;
    assert_eq!(
        hints,
        vec![OwnershipHint {
            chat_id: id,
            snapshot_version: 1
        }]
    );
    // A chat created idle is not runnable: no hint.
    let idle = create_with(&h, None, ChatStatus::Waiting).await;
    assert_eq!(assert_one_update_matching_row(&h, idle).await, vec![]);
}

#[tokio::test]
async fn acquired_chat_with_a_fresh_heartbeat_gets_no_hint() {
    let h = Harness::new().await;
    let id = h.create().await;
    h.published.take();
    let (worker, runner) = (h.worker, h.runner);
    h.run(id, move |tx| {
        Box::pin(async move { tx.acquire(worker, runner).await })
    })
    .await;
    assert_eq!(assert_one_update_matching_row(&h, id).await, vec![]);
    for op in [record_attempt, queue_send, interrupt] {
        run(&h, id, op).await;
        assert_eq!(assert_one_update_matching_row(&h, id).await, vec![]);
    }
    assert_eq!(h.state(id).await, ExecutionState::I1);
}

#[tokio::test]
async fn runnable_chat_without_a_worker_gets_a_hint() {
    let h = Harness::new().await;
    let id = h.create().await;
    h.published.take();
    let chat = run(&h, id, record_attempt).await;
    assert_eq!(chat.worker_id, None);
    assert_eq!(
        assert_one_update_matching_row(&h, id).await,
        vec![OwnershipHint {
            chat_id: id,
            snapshot_version: chat.snapshot_version
        }]
    );

    // Abandoning a runnable chat hands it back to the acquisition loop.
    let owned = h.chat_in(ExecutionState::A1).await;
    h.published.take();
    let chat = run(&h, owned, abandon).await;
    assert_eq!((chat.worker_id, chat.runner_id), (None, None));
    assert_eq!(
        assert_one_update_matching_row(&h, owned).await,
        vec![OwnershipHint {
            chat_id: owned,
            snapshot_version: chat.snapshot_version
        }]
    );
}

#[tokio::test]
async fn owned_chat_with_a_stale_heartbeat_gets_a_hint() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let stale = sqlx::query(
        "UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 hour' WHERE chat_id = $1",
    )
    .bind(id)
    .execute(h.pool())
    .await
    .unwrap();
    assert_eq!(stale.rows_affected(), 1);
    h.published.take();
    let chat = run(&h, id, record_attempt).await;
    assert!(chat.worker_id.is_some() && chat.runner_id.is_some());
    assert_eq!(
        assert_one_update_matching_row(&h, id).await,
        vec![OwnershipHint {
            chat_id: id,
            snapshot_version: chat.snapshot_version
        }]
    );
}

#[tokio::test]
async fn owned_chat_without_a_heartbeat_row_for_its_runner_gets_a_hint() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::I0).await;
    sqlx::query("DELETE FROM chat_heartbeats WHERE chat_id = $1")
        .bind(id)
        .execute(h.pool())
        .await
        .unwrap();
    // A fresh heartbeat of some other runner does not count.
    sqlx::query(
        "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at) VALUES ($1, $2, now())",
    )
    .bind(id)
    .bind(Uuid::new_v4())
    .execute(h.pool())
    .await
    .unwrap();
    h.published.take();
    let chat = run(&h, id, queue_send).await;
    assert_eq!(
        assert_one_update_matching_row(&h, id).await,
        vec![OwnershipHint {
            chat_id: id,
            snapshot_version: chat.snapshot_version
        }]
    );
}

#[tokio::test]
async fn chat_landing_in_waiting_error_or_archived_gets_no_hint_even_if_unowned() {
    let h = Harness::new().await;
    // Unowned chats (never acquired), so only runnability decides.
    let cases: [(&str, &[Op], ExecutionState); 4] = [
        ("finish turn", &[finish_turn], ExecutionState::W),
        ("finish error", &[finish_error], ExecutionState::E0),
        (
            "finish error with a queue",
            &[queue_send, finish_error],
            ExecutionState::E1,
        ),
        ("archive", &[finish_turn, archive], ExecutionState::XW),
    ];
    for (name, ops, landing) in cases {
        let id = h.create().await;
        for op in ops {
            h.published.take();
            run(&h, id, *op).await;
        }
        assert_eq!(h.state(id).await, landing, "{name}");
        assert_eq!(h.chat(id).await.worker_id, None, "{name}");
        assert_eq!(
            assert_one_update_matching_row(&h, id).await,
            vec![],
            "{name}"
        );
    }
}

#[tokio::test]
async fn request_compaction_clears_ownership_and_publishes_a_hint() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::W).await;
    assert!(h.chat(id).await.worker_id.is_some());
    h.published.take();
    let chat = run(&h, id, request_compaction).await;
    assert_eq!(chat.status, ChatStatus::Running);
    assert_eq!((chat.worker_id, chat.runner_id), (None, None));
    assert_eq!(
        assert_one_update_matching_row(&h, id).await,
        vec![OwnershipHint {
            chat_id: id,
            snapshot_version: chat.snapshot_version
        }]
    );
}

// Locks and snapshots.

#[tokio::test]
async fn lock_read_lock_and_snapshot_publish_nothing_and_keep_snapshot_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let before = h.dump(id).await;
    let snapshot = h.snapshot_version(id).await;
    h.published.take();
    let machine = h.store.machine(id);

    let mut locked = machine.lock().await.unwrap();
    assert_eq!(locked.chat.snapshot_version, snapshot);
    assert_eq!(locked.execution_state().await.unwrap(), ExecutionState::R1);
    locked.finish().await.unwrap();

    let read = machine.read_lock().await.unwrap();
    assert_eq!(read.chat.snapshot_version, snapshot);
    read.finish().await.unwrap();

    let mut snap = machine.snapshot().await.unwrap();
    assert_eq!(snap.chat.snapshot_version, snapshot);
    assert!(snap.queue_non_empty().await.unwrap());
    // Dropped rather than finished: also releases without publishing.
    drop(snap);

    assert_eq!(h.snapshot_version(id).await, snapshot);
    assert_eq!(h.dump(id).await, before);
    assert_eq!(h.published.take(), vec![]);
}

// End to end over LISTEN/NOTIFY.

async fn next_message(subscription: &mut Subscription) -> Vec<u8> {
    let deadline = Duration::from_secs(10);
    loop {
        match tokio::time::timeout(deadline, subscription.recv()).await {
            Ok(Some(PubsubEvent::Message(payload))) => return payload,
            Ok(Some(PubsubEvent::Reconnected)) => continue,
            Ok(None) => panic!("pubsub closed on {}", subscription.channel()),
            Err(_) => panic!(
                "no notification on {} within {deadline:?}",
                subscription.channel()
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_pubsub_delivers_the_committed_update_and_the_create_hint() {
    let h = Harness::new().await;
    let pubsub = PgPubsub::connect(h.pool().clone()).await.expect("pubsub");
    let store = Store::new(h.pool().clone(), Arc::new(pubsub.clone()));
    let id = Uuid::new_v4();

    // Subscribe before the transitions: a later subscribe could miss them.
    let mut ownership = pubsub.subscribe(OWNERSHIP_CHANNEL).await.unwrap();
    let update_channel = chat_update_channel(id);
    let mut updates = pubsub.subscribe(&update_channel).await.unwrap();

    let created = store
        .create_chat(h.chat_input(id, "hello"))
        .await
        .unwrap()
        .chat;
    let hint = OwnershipHint::from_payload(&next_message(&mut ownership).await).unwrap();
    assert_eq!(
        hint,
        OwnershipHint {
            chat_id: id,
            snapshot_version: 1
        }
    );
    let update = ChatUpdate::from_payload(&next_message(&mut updates).await).unwrap();
    assert_eq!(update, expected_update(&created));
    assert_eq!(update.snapshot_version, 1);

    let (worker, runner) = (h.worker, h.runner);
    let ((), committed) = store
        .machine(id)
        .update(move |tx| {
            Box::pin(async move {
                tx.acquire(worker, runner).await?;
                tx.record_generation_attempt().await.map(|_| ())
            })
        })
        .await
        .unwrap();
    let update = ChatUpdate::from_payload(&next_message(&mut updates).await).unwrap();
    assert_eq!(update, expected_update(&h.chat(id).await));
    assert_eq!(update, expected_update(&committed));
    assert_eq!(update.snapshot_version, 2);
    assert_eq!(update.generation_attempt, 1);
    assert_eq!(
        (update.worker_id, update.runner_id),
        (Some(worker), Some(runner))
    );

    // A bundle that fails after changing the status publishes nothing: the
    // next notification is the following successful bundle's, not a leak of
    // the rolled-back "interrupting" row.
    let err = store
        .machine(id)
        .update(|tx| {
            Box::pin(async move {
                tx.interrupt().await?;
                Err::<(), _>(StoreError::State(StateError::InvalidInput {
                    field: "test",
                    detail: "abort".into(),
                }))
            })
        })
        .await
        .unwrap_err();
    assert!(matches!(
        state_error(err),
        StateError::InvalidInput { field: "test", .. }
    ));
    let ((), committed) = store
        .machine(id)
        .update(|tx| Box::pin(async move { tx.record_generation_attempt().await.map(|_| ()) }))
        .await
        .unwrap();
    let update = ChatUpdate::from_payload(&next_message(&mut updates).await).unwrap();
    assert_eq!(update, expected_update(&committed));
    assert_eq!(
        (
            update.snapshot_version,
            update.status,
            update.generation_attempt
        ),
        (3, ChatStatus::Running, 2)
    );
    pubsub.close().await;
}

// Family archive.

#[tokio::test]
async fn set_family_archived_publishes_one_update_per_member_after_commit() {
    let h = Harness::new().await;
    let root = create_with(&h, None, ChatStatus::Waiting).await;
    let child = create_with(&h, Some(root), ChatStatus::Waiting).await;
    let errored = create_with(&h, Some(root), ChatStatus::Running).await;
    run(&h, errored, finish_error).await;
    let grandchild = create_with(&h, Some(child), ChatStatus::Waiting).await;
    let unrelated = create_with(&h, None, ChatStatus::Waiting).await;
    let members = [root, child, errored, grandchild];
    let mut snapshots = Vec::new();
    for member in members {
        snapshots.push(h.snapshot_version(member).await);
    }
    let unrelated_before = h.dump(unrelated).await;
    h.published.take();

    let chats = h.store.set_family_archived(root, true).await.unwrap();
    assert_eq!(chats.len(), 4);
    assert_eq!(chats[0].id, root);
    let mut returned: Vec<Uuid> = chats.iter().map(|c| c.id).collect();
    returned.sort();
    let mut expected_ids = members.to_vec();
    expected_ids.sort();
    assert_eq!(returned, expected_ids);

    let published = h.published.take();
    assert_eq!(published.len(), 4, "{published:?}");
    assert_eq!(hints(&published), vec![]);
    for (member, snapshot) in members.iter().zip(&snapshots) {
        let row = h.chat(*member).await;
        assert!(row.archived);
        assert_eq!(row.snapshot_version, snapshot + 1);
        assert_eq!(
            updates_for(&published, *member),
            vec![expected_update(&row)]
        );
    }
    assert_eq!(h.state(errored).await, ExecutionState::XE0);
    assert_eq!(h.dump(unrelated).await, unrelated_before);
}

#[tokio::test]
async fn set_family_archived_with_a_running_child_changes_no_member_and_publishes_nothing() {
    let h = Harness::new().await;
    let root = create_with(&h, None, ChatStatus::Waiting).await;
    let idle = create_with(&h, Some(root), ChatStatus::Waiting).await;
    let running = create_with(&h, Some(root), ChatStatus::Running).await;
    let mut before = Vec::new();
    for member in [root, idle, running] {
        before.push(h.dump(member).await);
    }
    h.published.take();

    let err = h.store.set_family_archived(root, true).await.unwrap_err();
    let StateError::TransitionNotAllowed(rejection) = state_error(err) else {
        panic!("expected TransitionNotAllowed");
    };
    assert_eq!(rejection.from, ExecutionState::R0);
    for (member, dump) in [root, idle, running].iter().zip(&before) {
        assert_eq!(&h.dump(*member).await, dump);
    }
    assert_eq!(h.published.take(), vec![]);

    // Not a root: refused before anything is written.
    let err = h.store.set_family_archived(idle, true).await.unwrap_err();
    assert_eq!(state_error(err), StateError::ChatNotRoot);
    assert_eq!(h.dump(idle).await, before[1]);
    assert_eq!(h.dump(root).await, before[0]);
    assert_eq!(h.published.take(), vec![]);
}

#[tokio::test]
async fn set_family_archived_with_an_invalid_member_changes_nothing_and_publishes_nothing() {
    let h = Harness::new().await;
    let root = create_with(&h, None, ChatStatus::Waiting).await;
    let child = create_with(&h, Some(root), ChatStatus::Running).await;
    // Archived while running: outside the model, and already "archived".
    sqlx::query("UPDATE chats SET archived = true WHERE id = $1")
        .bind(child)
        .execute(h.pool())
        .await
        .unwrap();
    assert_eq!(h.state(child).await, ExecutionState::Invalid);
    let before = [h.dump(root).await, h.dump(child).await];
    h.published.take();

    let err = h.store.set_family_archived(root, true).await.unwrap_err();
    let StateError::InvalidState(rejection) = state_error(err) else {
        panic!("expected InvalidState");
    };
    assert_eq!(rejection.from, ExecutionState::Invalid);
    assert_eq!([h.dump(root).await, h.dump(child).await], before);
    assert_eq!(h.published.take(), vec![]);
}

// Best effort after commit.

#[tokio::test]
async fn publish_failure_after_commit_keeps_the_commit_and_the_other_publications() {
    let h = Harness::new().await;
    let id = h.create().await;
    h.published.take();
    h.published.fail_channel(Some(&chat_update_channel(id)));
    let chat = run(&h, id, record_attempt).await;
    h.published.fail_channel(None);

    assert_eq!(chat.snapshot_version, 2);
    assert_eq!(h.chat(id).await, chat);
    // The failed chat:update is dropped; the ownership hint still goes out.
    let published = h.published.take();
    assert_eq!(updates_for(&published, id), vec![]);
    assert_eq!(
        hints(&published),
        vec![OwnershipHint {
            chat_id: id,
            snapshot_version: 2
        }]
    );
    assert_eq!(published.len(), 1);
}

/// A bundle whose caller is cancelled while its `COMMIT` is in flight is
/// still published when the commit lands (issue 14: a runner task aborted
/// mid-commit left a committed, runnable chat unannounced until the next
/// acquisition pass). Creates are cancelled after 0 to 4 ms; every chat
/// that exists afterwards has its `chat:update` and its ownership hint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_cancelled_during_its_commit_is_still_published() {
    let h = Harness::new().await;
    let mut cancelled = 0;
    for round in 0..300u64 {
        let limit = Duration::from_micros((round * 13) % 4000);
        let input = h.chat_input(Uuid::new_v4(), "hi");
        if tokio::time::timeout(limit, h.store.create_chat(input))
            .await
            .is_err()
        {
            cancelled += 1;
        }
    }
    // Let cancelled commits finish (they run in tasks of their own).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let published = h.published.take();
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM chats")
        .fetch_all(h.pool())
        .await
        .expect("chats");
    assert!(
        cancelled > 10,
        "only {cancelled} of 300 creates were cancelled"
    );
    assert!(
        ids.len() > 10,
        "only {} of 300 creates committed",
        ids.len()
    );
    let hinted: std::collections::HashSet<Uuid> =
        hints(&published).iter().map(|h| h.chat_id).collect();
    let mut unpublished = Vec::new();
    for id in &ids {
        if updates_for(&published, *id).is_empty() || !hinted.contains(id) {
            unpublished.push(*id);
        }
    }
    assert!(
        unpublished.is_empty(),
        "{} of {} committed chats were never published ({cancelled} creates cancelled)",
        unpublished.len(),
        ids.len()
    );
}
