//! Helpers shared by the test modules: bounded waits, so a failing test
//! fails instead of hanging.

use std::time::Duration;

use chatd_pubsub::{PubsubEvent, Subscription};
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
