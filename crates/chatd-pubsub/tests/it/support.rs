//! Helpers shared by the test modules: bounded waits, so a failing test
//! fails instead of hanging.

use std::time::Duration;

use chatd_pubsub::{PgPubsub, Publisher, Pubsub, PubsubError, PubsubEvent, Subscription};
use chatd_testkit::TestDatabase;
use sqlx::migrate::Migrator;

/// How long a test waits for an event that must arrive.
pub const RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a test waits to conclude that nothing arrives.
pub const QUIET_PERIOD: Duration = Duration::from_millis(300);

/// Pubsub needs no schema: the databases are created from an empty migrator.
static NO_MIGRATIONS: Migrator = Migrator::DEFAULT;

/// A fresh, empty database.
pub async fn test_database() -> TestDatabase {
    TestDatabase::new(&NO_MIGRATIONS)
        .await
        .expect("creating a test database")
}

/// A fresh, empty database and a [`PgPubsub`] on it.
pub async fn pg_pubsub() -> (TestDatabase, PgPubsub) {
    let db = test_database().await;
    let pubsub = PgPubsub::connect(db.pool().clone())
        .await
        .expect("connecting the pubsub");
    (db, pubsub)
}

/// The next event; panics if none arrives within [`RECV_TIMEOUT`] or the
/// subscription ended.
pub async fn next_event(subscription: &mut Subscription) -> PubsubEvent {
    tokio::time::timeout(RECV_TIMEOUT, subscription.recv())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no event on {} within {RECV_TIMEOUT:?}",
                subscription.channel()
            )
        })
        .unwrap_or_else(|| panic!("subscription to {} ended", subscription.channel()))
}

/// The next event, which must be a message; returns its payload as text.
pub async fn next_message(subscription: &mut Subscription) -> String {
    match next_event(subscription).await {
        PubsubEvent::Message(payload) => String::from_utf8(payload).expect("UTF-8 payload"),
        PubsubEvent::Reconnected => panic!(
            "expected a message on {}, got Reconnected",
            subscription.channel()
        ),
    }
}

/// Asserts that nothing arrives within [`QUIET_PERIOD`].
pub async fn assert_quiet(subscription: &mut Subscription) {
    if let Ok(event) = tokio::time::timeout(QUIET_PERIOD, subscription.recv()).await {
        panic!(
            "expected nothing on {}, got {event:?}",
            subscription.channel()
        );
    }
}

/// Asserts that the subscription ends (yields `None`) within [`RECV_TIMEOUT`].
pub async fn assert_ended(subscription: &mut Subscription) {
    let event = tokio::time::timeout(RECV_TIMEOUT, subscription.recv())
        .await
        .unwrap_or_else(|_| panic!("subscription to {} did not end", subscription.channel()));
    assert_eq!(
        event,
        None,
        "subscription to {} should have ended",
        subscription.channel()
    );
}

/// Publishes `m{i}` on `channel` for each `i` of `numbers`, in order.
pub fn publish_numbered(publisher: &dyn Publisher, channel: &str, numbers: std::ops::Range<usize>) {
    for i in numbers {
        publisher
            .publish(channel, format!("m{i}").as_bytes())
            .unwrap();
    }
}

/// Asserts that the next messages are `m{i}` for each `i` of `numbers`, in
/// order.
pub async fn assert_numbered(subscription: &mut Subscription, numbers: std::ops::Range<usize>) {
    for i in numbers {
        assert_eq!(next_message(subscription).await, format!("m{i}"));
    }
}

/// Asserts what a closed pubsub does: `subscription` (taken before the
/// close) ends, and publishing or subscribing on `channel` answers
/// [`PubsubError::Closed`].
pub async fn assert_closed(pubsub: &dyn Pubsub, subscription: &mut Subscription, channel: &str) {
    assert_ended(subscription).await;
    assert!(matches!(
        pubsub.publish(channel, b"1"),
        Err(PubsubError::Closed)
    ));
    assert!(matches!(
        pubsub.subscribe(channel).await,
        Err(PubsubError::Closed)
    ));
}

/// Asserts that a subscription keeps receiving while a clone of `pubsub`
/// lives and ends once every handle is dropped (`pubsub` is consumed).
pub async fn assert_dropping_every_handle_ends_subscriptions<P: Pubsub + Clone>(pubsub: P) {
    let clone = pubsub.clone();
    let mut subscription = pubsub.subscribe("chat:update:a").await.unwrap();

    drop(pubsub);
    clone.publish("chat:update:a", b"still open").unwrap();
    assert_eq!(next_message(&mut subscription).await, "still open");

    drop(clone);
    assert_ended(&mut subscription).await;
}

/// Asserts that `err` refuses a payload of `size` bytes as larger than the
/// 7900-byte limit.
pub fn assert_payload_too_large(err: &PubsubError, size: usize) {
    assert!(
        matches!(err, PubsubError::PayloadTooLarge { size: got, limit: 7900 } if *got == size),
        "got {err:?}"
    );
}
