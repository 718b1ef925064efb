//! [`PgPubsub`]: pubsub on PostgreSQL `LISTEN`/`NOTIFY`, shared by every
//! replica of the service (`spec/chatd-architecture.md`, "Pubsub").
//!
//! Two background tasks, both spawned on one `TaskTracker` and stopped by one
//! `CancellationToken`:
//!
//! - the **notifier** (`notifier.rs`) runs `pg_notify` on the dedicated
//!   connection, in publish order, everything queued at once in one
//!   statement (a batch; see its docs for order and identical payloads).
//!   [`Publisher::publish`] only enqueues, so it never waits on I/O. Failed
//!   notifications are retried a few times, then logged and dropped:
//!   notifications are hints and receivers tolerate drops.
//! - the **listener** (`listener.rs`) owns one dedicated connection (its own
//!   one-connection pool, `application_name` [`LISTENER_APPLICATION_NAME`]),
//!   `LISTEN`s each channel while it has local subscribers and fans incoming
//!   notifications out to local subscribers. When the connection is
//!   lost it reconnects with bounded backoff, re-`LISTEN`s every active
//!   channel and then sends [`PubsubEvent::Reconnected`](crate::PubsubEvent::Reconnected) to every subscriber.
//!
//! Shutdown: [`PgPubsub::close`], or dropping the last handle, cancels both
//! tasks; subscriptions then yield `None`. The notifier first gives queued
//! notifications a short, bounded chance to go out.

mod listener;
mod notifier;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::PubsubError;
use crate::publisher::Publisher;
use crate::publisher::{validate_channel, validate_publication};
use crate::subscription::{DEFAULT_SUBSCRIBER_CAPACITY, Hub, Pubsub, Subscription};
use listener::{ListenerCommand, ListenerLoop};
use notifier::{Notification, NotifierLoop};

/// `application_name` of the listener connection by default, so operators
/// (and tests) can find it in `pg_stat_activity`.
pub const LISTENER_APPLICATION_NAME: &str = "chatd-pubsub-listener";

/// Tuning for [`PgPubsub::connect_with`]. `Default` is what production uses.
#[derive(Debug, Clone)]
pub struct PgPubsubOptions {
    /// Events buffered per subscriber before it lags and gets
    /// [`PubsubEvent::Reconnected`](crate::PubsubEvent::Reconnected). Default [`DEFAULT_SUBSCRIBER_CAPACITY`].
    pub subscriber_capacity: usize,
    /// `application_name` of the listener connection. Default
    /// [`LISTENER_APPLICATION_NAME`].
    pub listener_application_name: String,
    /// First delay between listener reconnection attempts. Default 100 ms.
    pub reconnect_initial_backoff: Duration,
    /// Cap of the doubling delay between reconnection attempts. Default 1 s:
    /// after a failover the listener finds the new primary within a second
    /// of its promotion (issue 36), at the cost of one connection attempt a
    /// second while the database is away.
    pub reconnect_max_backoff: Duration,
    /// How long one attempt may wait for the listener connection, and how
    /// long a health check may take. Default 5 s.
    pub connect_timeout: Duration,
    /// How often the listener connection is checked with `SELECT 1`, so a
    /// silently dead connection is replaced (a primary that stalls without
    /// closing its sockets, when no proxy cuts the sessions). Default 10 s.
    pub health_check_interval: Duration,
    /// Attempts per notification before it is dropped (at least 1). Default 3.
    pub publish_attempts: u32,
}

impl Default for PgPubsubOptions {
    fn default() -> Self {
        Self {
            subscriber_capacity: DEFAULT_SUBSCRIBER_CAPACITY,
            listener_application_name: LISTENER_APPLICATION_NAME.to_owned(),
            reconnect_initial_backoff: Duration::from_millis(100),
            reconnect_max_backoff: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            health_check_interval: Duration::from_secs(10),
            publish_attempts: 3,
        }
    }
}

/// Pubsub on PostgreSQL `LISTEN`/`NOTIFY`. Cloning gives another handle to
/// the same background tasks and listener connection.
#[derive(Clone)]
pub struct PgPubsub {
    inner: Arc<PgInner>,
}

struct PgInner {
    hub: Arc<Hub>,
    notifications: mpsc::UnboundedSender<Notification>,
    commands: mpsc::UnboundedSender<ListenerCommand>,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl PgInner {
    fn shut_down(&self) {
        self.cancel.cancel();
        self.hub.close();
        self.tracker.close();
    }
}

impl Drop for PgInner {
    fn drop(&mut self) {
        self.shut_down();
    }
}

impl PgPubsub {
    /// Connects with [`PgPubsubOptions::default`]; see
    /// [`PgPubsub::connect_with`].
    ///
    /// # Errors
    /// [`PubsubError::Database`] if the listener connection cannot be opened.
    pub async fn connect(pool: PgPool) -> Result<Self, PubsubError> {
        Self::connect_with(pool, PgPubsubOptions::default()).await
    }

    /// Opens a dedicated publishing connection and a dedicated listener
    /// connection to `pool`'s database (same connect options, plus
    /// `application_name` `chatd-pubsub-notifier` and
    /// `options.listener_application_name`); `pool` itself is not used for
    /// pubsub traffic. Must be called within a Tokio
    /// runtime: it spawns the notifier and listener tasks.
    ///
    /// # Errors
    /// [`PubsubError::Database`] if the listener connection cannot be opened.
    pub async fn connect_with(pool: PgPool, options: PgPubsubOptions) -> Result<Self, PubsubError> {
        let listener_connect_options = (*pool.connect_options())
            .clone()
            .application_name(&options.listener_application_name);
        // One connection, never recycled: a recycled connection would drop
        // every LISTEN with it.
        let listener_pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(options.connect_timeout)
            .connect_lazy_with(listener_connect_options);
        let listener = listener::connect_listener(&listener_pool, std::iter::empty()).await?;

        let (commands, command_rx) = mpsc::unbounded_channel();
        let unlisten = commands.clone();
        let hub = Arc::new(Hub::new(
            options.subscriber_capacity,
            Some(Box::new(move |channel: &str| {
                // Sent under the hub lock, so the listener sees UNLISTEN and a
                // later subscriber's LISTEN of the same channel in that order.
                let _ = unlisten.send(ListenerCommand::Unlisten {
                    channel: channel.to_owned(),
                });
            })),
        ));
        let (notifications, notification_rx) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();

        let listener_loop =
            ListenerLoop::new(listener_pool, Arc::clone(&hub), command_rx, &options);
        tracker.spawn(listener_loop.run(listener, cancel.clone()));
        // The notifier has a connection of its own, so that publications
        // never wait behind a busy application pool (a starved NOTIFY would
        // delay every hint by the pool's acquire timeout).
        // Pinged on checkout only after a second idle (as
        // `chatd_store::pool_options`): a busy notifier does not pay a
        // round trip per flush.
        let notifier_pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= std::time::Duration::from_secs(1) {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .acquire_timeout(options.connect_timeout)
            .connect_lazy_with(
                (*pool.connect_options())
                    .clone()
                    .application_name("chatd-pubsub-notifier"),
            );
        let notifier_loop =
            NotifierLoop::new(notifier_pool, notification_rx, options.publish_attempts);
        tracker.spawn(notifier_loop.run(cancel.clone()));

        Ok(Self {
            inner: Arc::new(PgInner {
                hub,
                notifications,
                commands,
                cancel,
                tracker,
            }),
        })
    }

    /// Shuts down: refuses further publishes and subscribes, ends every
    /// subscription, gives queued notifications a bounded chance (about 2 s)
    /// to go out, and waits for the background tasks to stop.
    pub async fn close(&self) {
        self.inner.shut_down();
        self.inner.tracker.wait().await;
    }

    /// How many live local subscriptions `channel` has.
    pub fn subscriber_count(&self, channel: &str) -> usize {
        self.inner.hub.subscriber_count(channel)
    }

    /// The channels the listener connection is `LISTEN`ing on, as reported by
    /// `pg_listening_channels()` on that very connection, sorted. Commands to
    /// the listener run in order, so this reflects every subscribe that
    /// resolved and every subscription dropped before the call.
    ///
    /// # Errors
    /// [`PubsubError::Closed`] after shutdown; [`PubsubError::Database`] if
    /// the query fails (the listener then reconnects).
    pub async fn listening_channels(&self) -> Result<Vec<String>, PubsubError> {
        let (reply, response) = oneshot::channel();
        self.send_command(ListenerCommand::ListeningChannels { reply })?;
        let mut channels = response.await.map_err(|_| PubsubError::Closed)??;
        channels.sort();
        Ok(channels)
    }

    fn send_command(&self, command: ListenerCommand) -> Result<(), PubsubError> {
        if self.inner.cancel.is_cancelled() {
            return Err(PubsubError::Closed);
        }
        self.inner
            .commands
            .send(command)
            .map_err(|_| PubsubError::Closed)
    }
}

impl std::fmt::Debug for PgPubsub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgPubsub")
            .field("closed", &self.inner.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Publisher for PgPubsub {
    /// Enqueues a `pg_notify` for the notifier task; never waits.
    fn publish(&self, channel: &str, payload: &[u8]) -> Result<(), PubsubError> {
        let payload = validate_publication(channel, payload)?;
        if self.inner.cancel.is_cancelled() {
            return Err(PubsubError::Closed);
        }
        self.inner
            .notifications
            .send(Notification {
                channel: channel.to_owned(),
                payload: payload.to_owned(),
            })
            .map_err(|_| PubsubError::Closed)
    }
}

impl Pubsub for PgPubsub {
    /// Resolves once the listener connection has executed `LISTEN` for
    /// `channel` (immediately if another local subscriber already had it).
    /// While the listener is reconnecting this waits for the reconnection;
    /// wrap it in a timeout if the caller needs a deadline.
    fn subscribe<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Subscription, PubsubError>> {
        Box::pin(async move {
            validate_channel(channel)?;
            // Register locally first so nothing delivered after the LISTEN
            // can slip past this subscriber. If anything below fails, dropping
            // `subscription` undoes the registration (and the LISTEN).
            let subscription = self.inner.hub.subscribe(channel)?;
            let (ack, active) = oneshot::channel();
            self.send_command(ListenerCommand::Listen {
                channel: channel.to_owned(),
                ack,
            })?;
            active.await.map_err(|_| PubsubError::Closed)?;
            Ok(subscription)
        })
    }
}
