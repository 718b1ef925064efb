//! `MemoryPubsub`: in-process delivery, fan-out, lag and shutdown.

use chatd_pubsub::{MemoryPubsub, Publisher, Pubsub, PubsubEvent};
use futures::StreamExt;

use crate::support::{
    assert_closed, assert_dropping_every_handle_ends_subscriptions, assert_numbered, assert_quiet,
    next_event, next_message, publish_numbered,
};

#[tokio::test]
async fn memory_subscriber_receives_messages_published_after_subscribe_in_order() {
    let pubsub = MemoryPubsub::new();
    let mut subscription = pubsub.subscribe("chat:update:a").await.unwrap();
    assert_eq!(subscription.channel(), "chat:update:a");

    publish_numbered(&pubsub, "chat:update:a", 0..5);

    assert_numbered(&mut subscription, 0..5).await;
    assert_quiet(&mut subscription).await;
}

#[tokio::test]
async fn memory_messages_on_other_channels_and_before_subscribe_are_not_delivered() {
    let pubsub = MemoryPubsub::new();
    pubsub.publish("chat:update:a", b"before").unwrap();
    let mut subscription = pubsub.subscribe("chat:update:a").await.unwrap();

    pubsub.publish("chat:update:b", b"other").unwrap();
    pubsub.publish("chat:update:a", b"after").unwrap();

    assert_eq!(next_message(&mut subscription).await, "after");
    assert_quiet(&mut subscription).await;
}

#[tokio::test]
async fn memory_two_subscribers_both_receive_and_dropping_one_leaves_the_other() {
    let pubsub = MemoryPubsub::new();
    let mut first = pubsub.subscribe("chat:ownership").await.unwrap();
    let mut second = pubsub.subscribe("chat:ownership").await.unwrap();
    assert_eq!(pubsub.subscriber_count("chat:ownership"), 2);

    pubsub.publish("chat:ownership", b"1").unwrap();
    assert_eq!(next_message(&mut first).await, "1");
    assert_eq!(next_message(&mut second).await, "1");

    drop(first);
    assert_eq!(pubsub.subscriber_count("chat:ownership"), 1);
    pubsub.publish("chat:ownership", b"2").unwrap();
    assert_eq!(next_message(&mut second).await, "2");
    assert_quiet(&mut second).await;

    drop(second);
    assert_eq!(pubsub.subscriber_count("chat:ownership"), 0);
}

#[tokio::test]
async fn memory_lagging_subscriber_gets_reconnected_then_the_most_recent_messages() {
    let pubsub = MemoryPubsub::with_capacity(4);
    let mut slow = pubsub.subscribe("chat:update:a").await.unwrap();

    publish_numbered(&pubsub, "chat:update:a", 0..10);

    assert_eq!(next_event(&mut slow).await, PubsubEvent::Reconnected);
    assert_numbered(&mut slow, 6..10).await;
    assert_quiet(&mut slow).await;
}

#[tokio::test]
async fn memory_simulate_reconnect_reaches_every_subscriber_of_every_channel() {
    let pubsub = MemoryPubsub::new();
    let mut a = pubsub.subscribe("chat:update:a").await.unwrap();
    let mut b = pubsub.subscribe("chat:update:b").await.unwrap();

    pubsub.simulate_reconnect();

    assert_eq!(next_event(&mut a).await, PubsubEvent::Reconnected);
    assert_eq!(next_event(&mut b).await, PubsubEvent::Reconnected);
}

#[tokio::test]
async fn memory_subscription_is_a_stream_of_events() {
    let pubsub = MemoryPubsub::new();
    let subscription = pubsub.subscribe("chat:update:a").await.unwrap();
    pubsub.publish("chat:update:a", b"1").unwrap();
    pubsub.publish("chat:update:a", b"2").unwrap();
    pubsub.close();

    let events: Vec<PubsubEvent> =
        tokio::time::timeout(crate::support::RECV_TIMEOUT, subscription.collect())
            .await
            .expect("the stream ends after close");

    assert_eq!(
        events,
        vec![
            PubsubEvent::Message(b"1".to_vec()),
            PubsubEvent::Message(b"2".to_vec())
        ]
    );
}

#[tokio::test]
async fn memory_close_ends_subscriptions_and_refuses_publish_and_subscribe() {
    let pubsub = MemoryPubsub::new();
    let mut subscription = pubsub.subscribe("chat:update:a").await.unwrap();

    pubsub.close();

    assert_closed(&pubsub, &mut subscription, "chat:update:a").await;
    assert_eq!(
        subscription.recv().await,
        None,
        "an ended subscription stays ended"
    );
}

#[tokio::test]
async fn memory_dropping_every_handle_ends_subscriptions() {
    assert_dropping_every_handle_ends_subscriptions(MemoryPubsub::new()).await;
}

#[tokio::test]
async fn memory_pubsub_works_behind_a_dyn_pubsub_and_its_handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<MemoryPubsub>();
    assert_send_sync::<chatd_pubsub::PgPubsub>();
    assert_send_sync::<chatd_pubsub::Subscription>();
    assert_send_sync::<chatd_pubsub::PublishBuffer>();

    let pubsub: std::sync::Arc<dyn Pubsub> = std::sync::Arc::new(MemoryPubsub::new());
    let mut subscription = pubsub.subscribe("chat:update:a").await.unwrap();
    let task = {
        let pubsub = pubsub.clone();
        tokio::spawn(async move { pubsub.publish("chat:update:a", b"from a task") })
    };
    task.await.unwrap().unwrap();

    assert_eq!(next_message(&mut subscription).await, "from a task");
}

/// Races the hub's per-subscriber queues: publishers on several threads,
/// subscribers receiving on others, and subscriptions to the same channel
/// opened and dropped meanwhile. Every subscription that existed before the
/// publishing started receives every message exactly once, each publisher's
/// in order; the churning ones never break delivery; and the channel's
/// entry is gone once the last subscription is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_fan_out_races_subscribe_and_drop_without_loss_or_duplicates() {
    const PUBLISHERS: usize = 4;
    const PER_PUBLISHER: usize = 500;
    let pubsub = MemoryPubsub::with_capacity(PUBLISHERS * PER_PUBLISHER);
    let channel = "chat:update:race";
    let mut receivers = Vec::new();
    for _ in 0..3 {
        let mut subscription = pubsub.subscribe(channel).await.unwrap();
        receivers.push(tokio::spawn(async move {
            let mut next = [0usize; PUBLISHERS];
            for _ in 0..PUBLISHERS * PER_PUBLISHER {
                let payload = match next_event(&mut subscription).await {
                    PubsubEvent::Message(payload) => String::from_utf8(payload).unwrap(),
                    PubsubEvent::Reconnected => panic!("lagged within its capacity"),
                };
                let (publisher, n) = payload.split_once(':').unwrap();
                let (publisher, n): (usize, usize) =
                    (publisher.parse().unwrap(), n.parse().unwrap());
                assert_eq!(n, next[publisher], "publisher {publisher} out of order");
                next[publisher] += 1;
            }
            subscription
        }));
    }
    let churn = {
        let pubsub = pubsub.clone();
        tokio::spawn(async move {
            for _ in 0..200 {
                let subscription = pubsub.subscribe(channel).await.unwrap();
                tokio::task::yield_now().await;
                drop(subscription);
            }
        })
    };
    let mut publishers = Vec::new();
    for publisher in 0..PUBLISHERS {
        let pubsub = pubsub.clone();
        publishers.push(tokio::spawn(async move {
            for n in 0..PER_PUBLISHER {
                pubsub
                    .publish(channel, format!("{publisher}:{n}").as_bytes())
                    .unwrap();
                if n % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for task in publishers {
        task.await.unwrap();
    }
    churn.await.unwrap();
    let mut subscriptions = Vec::new();
    for task in receivers {
        let mut subscription = task.await.unwrap();
        assert_quiet(&mut subscription).await;
        subscriptions.push(subscription);
    }
    assert_eq!(pubsub.subscriber_count(channel), 3);
    drop(subscriptions);
    assert_eq!(pubsub.subscriber_count(channel), 0);
}
