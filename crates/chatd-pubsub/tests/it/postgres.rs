//! `PgPubsub` against a real PostgreSQL: subscribe-before-read safety,
//! quoting, UNLISTEN, reconnection and ordering under concurrency.
//!
//! Every test runs on a multi-thread runtime: `TestDatabase`'s `Drop` blocks
//! the test thread until its pool is closed, and closing waits for pooled
//! connections whose return-to-pool tasks must still be able to run.

use std::collections::BTreeMap;
use std::time::Duration;

use chatd_core::ChatStatus;
use chatd_pubsub::{
    ChatUpdate, LISTENER_APPLICATION_NAME, OWNERSHIP_CHANNEL, OwnershipHint, PgPubsub,
    PgPubsubOptions, Publisher, Pubsub, PubsubError, PubsubEvent, Subscription,
};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    RECV_TIMEOUT, assert_closed, assert_dropping_every_handle_ends_subscriptions,
    assert_payload_too_large, assert_quiet, next_event, next_message, pg_pubsub, test_database,
};

/// The backend pids of this database's pubsub listener connections.
async fn listener_pids(pool: &PgPool) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database() ORDER BY pid",
    )
    .bind(LISTENER_APPLICATION_NAME)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Waits for the next message, skipping `Reconnected` events.
async fn next_message_after_reconnects(subscription: &mut Subscription) -> String {
    let deadline = tokio::time::Instant::now() + RECV_TIMEOUT;
    loop {
        let event = tokio::time::timeout_at(deadline, subscription.recv())
            .await
            .expect("no message within the timeout")
            .expect("subscription ended");
        if let PubsubEvent::Message(payload) = event {
            return String::from_utf8(payload).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_message_published_after_subscribe_resolves_is_always_received() {
    let db = test_database().await;
    // Two instances, as two replicas would be: one publishes, one listens.
    let publisher = PgPubsub::connect(db.pool().clone()).await.unwrap();
    let subscriber = PgPubsub::connect(db.pool().clone()).await.unwrap();
    let channel = "chat:update:race";

    // Each round drops its subscription, so every round races a fresh
    // LISTEN (after an UNLISTEN) against a NOTIFY sent right after subscribe.
    for round in 0..50 {
        let mut subscription = subscriber.subscribe(channel).await.unwrap();
        publisher
            .publish(channel, format!("round-{round}").as_bytes())
            .unwrap();
        assert_eq!(
            next_message(&mut subscription).await,
            format!("round-{round}")
        );
    }

    assert_eq!(subscriber.subscriber_count(channel), 0);
    publisher.close().await;
    subscriber.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_chat_update_and_ownership_payloads_round_trip_as_json() {
    let (_db, pubsub) = pg_pubsub().await;
    let chat_id = Uuid::new_v4();
    let update = ChatUpdate {
        chat_id,
        snapshot_version: 42,
        worker_id: Some(Uuid::new_v4()),
        runner_id: Some(Uuid::new_v4()),
        history_version: 5,
        queue_version: 6,
        retry_state_version: 2,
        generation_attempt: 3,
        status: ChatStatus::Interrupting,
        archived: true,
    };
    let hint = OwnershipHint {
        chat_id,
        snapshot_version: 42,
    };
    let mut updates = pubsub.subscribe(&update.channel()).await.unwrap();
    let mut ownership = pubsub.subscribe(OWNERSHIP_CHANNEL).await.unwrap();

    update.publish(&pubsub).unwrap();
    hint.publish(&pubsub).unwrap();

    let received = next_message(&mut updates).await;
    assert_eq!(
        ChatUpdate::from_payload(received.as_bytes()).unwrap(),
        update
    );
    let received = next_message(&mut ownership).await;
    assert_eq!(
        OwnershipHint::from_payload(received.as_bytes()).unwrap(),
        hint
    );
    pubsub.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_channel_names_with_colons_quotes_and_case_are_listened_to_exactly() {
    let (_db, pubsub) = pg_pubsub().await;
    let upper = r#"Chat:"Quoted":Name"#;
    let lower = r#"chat:"quoted":name"#;
    let mut upper_sub = pubsub.subscribe(upper).await.unwrap();
    let mut lower_sub = pubsub.subscribe(lower).await.unwrap();

    pubsub.publish(upper, b"to-upper").unwrap();
    assert_eq!(next_message(&mut upper_sub).await, "to-upper");
    pubsub.publish(lower, b"to-lower").unwrap();
    assert_eq!(next_message(&mut lower_sub).await, "to-lower");

    assert_quiet(&mut upper_sub).await;
    assert_quiet(&mut lower_sub).await;
    let mut expected = vec![upper.to_owned(), lower.to_owned()];
    expected.sort();
    assert_eq!(pubsub.listening_channels().await.unwrap(), expected);
    pubsub.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_dropping_the_last_subscriber_unlistens_and_a_new_subscriber_listens_again() {
    let (db, pubsub) = pg_pubsub().await;
    let channel = "chat:update:unlisten";
    let mut first = pubsub.subscribe(channel).await.unwrap();
    let mut second = pubsub.subscribe(channel).await.unwrap();
    let mut other = pubsub.subscribe("chat:update:other").await.unwrap();
    assert_eq!(
        pubsub.listening_channels().await.unwrap(),
        vec!["chat:update:other", channel]
    );

    pubsub.publish(channel, b"1").unwrap();
    assert_eq!(next_message(&mut first).await, "1");
    assert_eq!(next_message(&mut second).await, "1");

    drop(first);
    assert_eq!(pubsub.subscriber_count(channel), 1);
    assert_eq!(
        pubsub.listening_channels().await.unwrap(),
        vec!["chat:update:other", channel]
    );
    pubsub.publish(channel, b"2").unwrap();
    assert_eq!(next_message(&mut second).await, "2");

    drop(second);
    assert_eq!(pubsub.subscriber_count(channel), 0);
    assert_eq!(
        pubsub.listening_channels().await.unwrap(),
        vec!["chat:update:other"]
    );

    // The channel still works for the next subscriber, and only it gets the
    // new message: a notification committed while nobody listened is gone.
    // (Sent directly: `publish` is asynchronous and might land after the
    // LISTEN below.)
    sqlx::query("SELECT pg_notify($1, 'unheard')")
        .bind(channel)
        .execute(db.pool())
        .await
        .unwrap();
    let mut third = pubsub.subscribe(channel).await.unwrap();
    pubsub.publish(channel, b"3").unwrap();
    assert_eq!(next_message(&mut third).await, "3");
    assert_quiet(&mut third).await;
    assert_quiet(&mut other).await;
    pubsub.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_listener_reconnects_after_its_backend_is_terminated_and_then_delivers_again() {
    let (db, pubsub) = pg_pubsub().await;
    let mut updates = pubsub.subscribe("chat:update:a").await.unwrap();
    let mut ownership = pubsub.subscribe(OWNERSHIP_CHANNEL).await.unwrap();
    let before = listener_pids(db.pool()).await;
    assert_eq!(
        before.len(),
        1,
        "exactly one listener connection: {before:?}"
    );

    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(before[0])
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert!(terminated);

    // Every subscriber of every channel is told to re-read state.
    assert_eq!(next_event(&mut updates).await, PubsubEvent::Reconnected);
    assert_eq!(next_event(&mut ownership).await, PubsubEvent::Reconnected);
    let after = listener_pids(db.pool()).await;
    assert!(
        after.iter().any(|pid| *pid != before[0]),
        "a new listener backend replaces {}: {after:?}",
        before[0]
    );
    assert_eq!(
        pubsub.listening_channels().await.unwrap(),
        vec![OWNERSHIP_CHANNEL, "chat:update:a"]
    );

    pubsub.publish("chat:update:a", b"after-reconnect").unwrap();
    pubsub
        .publish(OWNERSHIP_CHANNEL, b"hint-after-reconnect")
        .unwrap();
    assert_eq!(next_message(&mut updates).await, "after-reconnect");
    assert_eq!(next_message(&mut ownership).await, "hint-after-reconnect");
    pubsub.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_subscribe_racing_a_listener_termination_resolves_and_receives_later_messages() {
    let (db, pubsub) = pg_pubsub().await;

    for round in 0..5 {
        let pids = listener_pids(db.pool()).await;
        let pid = *pids.last().expect("a listener connection");
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(db.pool())
            .await
            .unwrap();
        // Whether the LISTEN lands before, during or after the loss, the
        // subscription must be active once subscribe returns.
        let channel = format!("chat:update:round-{round}");
        let mut subscription = tokio::time::timeout(RECV_TIMEOUT, pubsub.subscribe(&channel))
            .await
            .expect("subscribe resolves")
            .unwrap();
        pubsub.publish(&channel, b"after").unwrap();
        assert_eq!(
            next_message_after_reconnects(&mut subscription).await,
            "after"
        );
    }
    pubsub.close().await;
}

#[derive(Debug, Serialize, Deserialize)]
struct Sequenced {
    publisher: usize,
    seq: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_concurrent_publishers_all_arrive_in_per_publisher_order() {
    const PUBLISHERS: usize = 4;
    const PER_PUBLISHER: usize = 100;
    let db = test_database().await;
    let first = PgPubsub::connect(db.pool().clone()).await.unwrap();
    let second = PgPubsub::connect(db.pool().clone()).await.unwrap();
    let channel = "chat:update:bulk";
    let mut subscription = first.subscribe(channel).await.unwrap();

    let tasks: Vec<_> = (0..PUBLISHERS)
        .map(|publisher| {
            let pubsub = if publisher % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            tokio::spawn(async move {
                for seq in 0..PER_PUBLISHER {
                    let payload = serde_json::to_vec(&Sequenced { publisher, seq }).unwrap();
                    pubsub.publish(channel, &payload).unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }

    let mut received: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for _ in 0..PUBLISHERS * PER_PUBLISHER {
        let event = tokio::time::timeout_at(deadline, subscription.recv())
            .await
            .expect("all messages arrive within 30 s")
            .expect("subscription open");
        let PubsubEvent::Message(payload) = event else {
            panic!("no message may be lost: got {event:?}");
        };
        let message: Sequenced = serde_json::from_slice(&payload).unwrap();
        received
            .entry(message.publisher)
            .or_default()
            .push(message.seq);
    }

    assert_eq!(received.len(), PUBLISHERS);
    let in_order: Vec<usize> = (0..PER_PUBLISHER).collect();
    for (publisher, seqs) in &received {
        assert_eq!(
            seqs, &in_order,
            "publisher {publisher} delivered out of order or incompletely"
        );
    }
    assert_quiet(&mut subscription).await;
    first.close().await;
    second.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_close_ends_subscriptions_and_refuses_publish_and_subscribe() {
    let (db, pubsub) = pg_pubsub().await;
    let mut subscription = pubsub.subscribe("chat:update:a").await.unwrap();

    pubsub.close().await;

    assert_closed(&pubsub, &mut subscription, "chat:update:a").await;
    assert!(matches!(
        pubsub.listening_channels().await,
        Err(PubsubError::Closed)
    ));
    // The listener connection is gone too (the backend exits asynchronously
    // after the client disconnects, hence the poll).
    let deadline = tokio::time::Instant::now() + RECV_TIMEOUT;
    while !listener_pids(db.pool()).await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listener backend is still connected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_dropping_every_handle_ends_subscriptions() {
    let (_db, pubsub) = pg_pubsub().await;
    assert_dropping_every_handle_ends_subscriptions(pubsub).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_close_sends_notifications_queued_before_it() {
    let db = test_database().await;
    let listener = PgPubsub::connect(db.pool().clone()).await.unwrap();
    let publisher = PgPubsub::connect(db.pool().clone()).await.unwrap();
    let mut subscription = listener.subscribe(OWNERSHIP_CHANNEL).await.unwrap();

    for i in 0..20 {
        publisher
            .publish(OWNERSHIP_CHANNEL, format!("{i}").as_bytes())
            .unwrap();
    }
    publisher.close().await;

    for i in 0..20 {
        assert_eq!(next_message(&mut subscription).await, format!("{i}"));
    }
    listener.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_publish_rejects_an_oversized_payload_without_sending_anything() {
    let (_db, pubsub) = pg_pubsub().await;
    let mut subscription = pubsub.subscribe(OWNERSHIP_CHANNEL).await.unwrap();

    let err = pubsub
        .publish(OWNERSHIP_CHANNEL, &vec![b'x'; 8000])
        .unwrap_err();
    assert_payload_too_large(&err, 8000);
    // The largest accepted payload does go through PostgreSQL.
    let largest = "y".repeat(chatd_pubsub::MAX_PAYLOAD_BYTES);
    pubsub
        .publish(OWNERSHIP_CHANNEL, largest.as_bytes())
        .unwrap();

    assert_eq!(next_message(&mut subscription).await, largest);
    assert_quiet(&mut subscription).await;
    pubsub.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_frequent_listener_health_checks_do_not_disturb_delivery() {
    let db = test_database().await;
    let options = PgPubsubOptions {
        health_check_interval: Duration::from_millis(5),
        ..PgPubsubOptions::default()
    };
    let pubsub = PgPubsub::connect_with(db.pool().clone(), options)
        .await
        .unwrap();
    let mut subscription = pubsub.subscribe(OWNERSHIP_CHANNEL).await.unwrap();
    let pid_before = listener_pids(db.pool()).await;

    for i in 0..50 {
        pubsub
            .publish(OWNERSHIP_CHANNEL, format!("{i}").as_bytes())
            .unwrap();
        // Spread the publications over many health-check ticks.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    for i in 0..50 {
        assert_eq!(next_message(&mut subscription).await, format!("{i}"));
    }
    assert_quiet(&mut subscription).await;
    assert_eq!(
        listener_pids(db.pool()).await,
        pid_before,
        "the listener connection was never replaced"
    );
    pubsub.close().await;
}

/// A burst larger than one batch, with identical publications in it (which
/// PostgreSQL would fold within one transaction), arrives complete and in
/// publish order, duplicates included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_burst_with_identical_publications_arrives_complete_and_in_order() {
    let db = test_database().await;
    let pubsub = PgPubsub::connect(db.pool().clone()).await.unwrap();
    let channel = "chat:update:burst";
    let mut subscription = pubsub.subscribe(channel).await.unwrap();
    // 0, 1, 1, 2, 3, 3, ... : every odd number twice in a row; 600 in all.
    let sent: Vec<String> = (0..400)
        .flat_map(|i: usize| {
            let copies = if i % 2 == 1 { 2 } else { 1 };
            std::iter::repeat_n(i.to_string(), copies)
        })
        .collect();
    for payload in &sent {
        pubsub.publish(channel, payload.as_bytes()).unwrap();
    }
    let mut received = Vec::with_capacity(sent.len());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received.len() < sent.len() {
        let event = tokio::time::timeout_at(deadline, subscription.recv())
            .await
            .expect("the burst arrives within 30 s")
            .expect("subscription open");
        let PubsubEvent::Message(payload) = event else {
            panic!("no message may be lost: got {event:?}");
        };
        received.push(String::from_utf8(payload.to_vec()).unwrap());
    }
    assert_eq!(received, sent);
    assert_quiet(&mut subscription).await;
    pubsub.close().await;
}
