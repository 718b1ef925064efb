//! The listener task of [`super::PgPubsub`]: one dedicated connection that
//! `LISTEN`s on every channel with local subscribers
//! (`spec/chatd-architecture.md`, "Pubsub").
//!
//! Everything that touches the connection runs in this one task, driven by
//! [`ListenerCommand`]s processed in the order they were sent. That order is
//! what makes `subscribe` safe: its `Listen` is acknowledged only after the
//! `LISTEN` ran, and an `Unlisten` queued by an earlier last unsubscribe runs
//! before a later subscriber's `Listen`.
//!
//! Error policy: any failure on the connection (lost connection, failed
//! `LISTEN`/`UNLISTEN`/query, or a periodic `SELECT 1` health check that
//! fails or takes longer than `connect_timeout`, which is how a half-open TCP
//! connection that would otherwise wait forever is noticed) is treated as a
//! lost connection. The task drops
//! the connection, reconnects with doubling backoff (bounded by
//! `reconnect_max_backoff`) until it succeeds or is cancelled, re-`LISTEN`s
//! every active channel, and then sends [`PubsubEvent::Reconnected`] to every
//! subscriber, because notifications sent while it was away are gone.
//!
//! `PgListener`'s own reconnection is not used: it happens inside `try_recv`,
//! which this task races against incoming commands in `select!`, and
//! cancelling it half-way through a reconnect would lose its notification
//! buffer. With `eager_reconnect(false)` the only await point left in
//! `try_recv` is reading from the socket, which is cancel safe.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgNotification};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::PgPubsubOptions;
use crate::error::PubsubError;
use crate::subscription::{Hub, PubsubEvent};

/// Asks the listener connection which channels it listens on.
const LISTENING_CHANNELS_SQL: &str = "SELECT pg_listening_channels()";

/// Proves the listener connection still answers.
const HEALTH_CHECK_SQL: &str = "SELECT 1";

/// Requests to the listener task, processed strictly in order.
pub(crate) enum ListenerCommand {
    /// `LISTEN` on `channel` (unless already listening), then acknowledge.
    Listen {
        channel: String,
        ack: oneshot::Sender<()>,
    },
    /// The last local subscriber of `channel` is gone: `UNLISTEN` it.
    Unlisten { channel: String },
    /// Report `pg_listening_channels()` of the listener connection.
    ListeningChannels {
        reply: oneshot::Sender<Result<Vec<String>, PubsubError>>,
    },
}

/// Whether the connection is still usable after a step.
enum Step {
    Continue,
    ConnectionLost,
}

/// The listener task's state. See the module docs.
pub(crate) struct ListenerLoop {
    /// The one-connection pool the listener connection comes from.
    pool: PgPool,
    hub: Arc<Hub>,
    commands: mpsc::UnboundedReceiver<ListenerCommand>,
    /// Channels that are `LISTEN`ed, or must be again after a reconnect.
    listening: BTreeSet<String>,
    /// Subscribers whose `LISTEN` hit a broken connection; acknowledged once
    /// the reconnect has re-`LISTEN`ed their channel.
    awaiting_reconnect: Vec<oneshot::Sender<()>>,
    initial_backoff: Duration,
    max_backoff: Duration,
    health_check_interval: Duration,
    health_check_timeout: Duration,
}

impl ListenerLoop {
    pub(crate) fn new(
        pool: PgPool,
        hub: Arc<Hub>,
        commands: mpsc::UnboundedReceiver<ListenerCommand>,
        options: &PgPubsubOptions,
    ) -> Self {
        Self {
            pool,
            hub,
            commands,
            listening: BTreeSet::new(),
            awaiting_reconnect: Vec::new(),
            initial_backoff: options.reconnect_initial_backoff,
            max_backoff: options
                .reconnect_max_backoff
                .max(options.reconnect_initial_backoff),
            health_check_interval: options.health_check_interval.max(Duration::from_millis(1)),
            health_check_timeout: options.connect_timeout,
        }
    }

    /// Runs until `cancel` fires, then closes the listener connection.
    pub(crate) async fn run(mut self, mut listener: PgListener, cancel: CancellationToken) {
        let mut health_check = tokio::time::interval_at(
            Instant::now() + self.health_check_interval,
            self.health_check_interval,
        );
        health_check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let step = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                command = self.commands.recv() => match command {
                    Some(command) => self.handle(&mut listener, command).await,
                    None => break,
                },
                _ = health_check.tick() => self.check_health(&mut listener).await,
                received = listener.try_recv() => self.dispatch(received),
            };
            if let Step::ConnectionLost = step {
                drop(listener);
                match self.reconnect(&cancel).await {
                    Some(reconnected) => listener = reconnected,
                    None => {
                        self.pool.close().await;
                        return;
                    }
                }
                self.hub.deliver_all(&PubsubEvent::Reconnected);
                for ack in self.awaiting_reconnect.drain(..) {
                    let _ = ack.send(());
                }
            }
        }
        drop(listener);
        self.pool.close().await;
        tracing::debug!("pubsub listener stopped");
    }

    fn dispatch(&self, received: Result<Option<PgNotification>, sqlx::Error>) -> Step {
        match received {
            Ok(Some(notification)) => {
                let payload = notification.payload().as_bytes().to_vec();
                self.hub
                    .deliver(notification.channel(), PubsubEvent::Message(payload));
                Step::Continue
            }
            Ok(None) => {
                tracing::warn!("pubsub listener connection lost; reconnecting");
                Step::ConnectionLost
            }
            Err(error) => {
                tracing::warn!(%error, "pubsub listener connection failed; reconnecting");
                Step::ConnectionLost
            }
        }
    }

    async fn check_health(&self, listener: &mut PgListener) -> Step {
        let query = sqlx::query(HEALTH_CHECK_SQL).execute(&mut *listener);
        match tokio::time::timeout(self.health_check_timeout, query).await {
            Ok(Ok(_)) => Step::Continue,
            Ok(Err(error)) => {
                tracing::warn!(%error, "pubsub listener health check failed; reconnecting");
                Step::ConnectionLost
            }
            Err(_elapsed) => {
                tracing::warn!(
                    timeout_ms =
                        u64::try_from(self.health_check_timeout.as_millis()).unwrap_or(u64::MAX),
                    "pubsub listener health check timed out; reconnecting"
                );
                Step::ConnectionLost
            }
        }
    }

    async fn handle(&mut self, listener: &mut PgListener, command: ListenerCommand) -> Step {
        match command {
            ListenerCommand::Listen { channel, ack } => {
                if self.listening.contains(&channel) {
                    let _ = ack.send(());
                    return Step::Continue;
                }
                let result = listener.listen(&channel).await;
                self.listening.insert(channel.clone());
                match result {
                    Ok(()) => {
                        tracing::debug!(%channel, "pubsub LISTEN");
                        let _ = ack.send(());
                        Step::Continue
                    }
                    Err(error) => {
                        tracing::warn!(%channel, %error, "pubsub LISTEN failed; reconnecting");
                        self.awaiting_reconnect.push(ack);
                        Step::ConnectionLost
                    }
                }
            }
            ListenerCommand::Unlisten { channel } => {
                if !self.listening.remove(&channel) {
                    return Step::Continue;
                }
                match listener.unlisten(&channel).await {
                    Ok(()) => {
                        tracing::debug!(%channel, "pubsub UNLISTEN");
                        Step::Continue
                    }
                    Err(error) => {
                        tracing::warn!(%channel, %error, "pubsub UNLISTEN failed; reconnecting");
                        Step::ConnectionLost
                    }
                }
            }
            ListenerCommand::ListeningChannels { reply } => {
                let result = sqlx::query_scalar::<_, String>(LISTENING_CHANNELS_SQL)
                    .fetch_all(&mut *listener)
                    .await;
                match result {
                    Ok(channels) => {
                        let _ = reply.send(Ok(channels));
                        Step::Continue
                    }
                    Err(error) => {
                        tracing::warn!(%error, "pubsub listener query failed; reconnecting");
                        let _ = reply.send(Err(error.into()));
                        Step::ConnectionLost
                    }
                }
            }
        }
    }

    /// Opens a new listener connection and re-`LISTEN`s every active channel,
    /// retrying with doubling backoff. `None` if cancelled first.
    async fn reconnect(&mut self, cancel: &CancellationToken) -> Option<PgListener> {
        let mut delay = self.initial_backoff;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let channels = self.listening.iter().map(String::as_str);
            let connected = tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                connected = connect_listener(&self.pool, channels) => connected,
            };
            match connected {
                Ok(listener) => {
                    tracing::info!(
                        attempt,
                        channels = self.listening.len(),
                        "pubsub listener reconnected"
                    );
                    return Some(listener);
                }
                Err(error) => tracing::warn!(
                    attempt,
                    %error,
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "pubsub listener reconnect failed"
                ),
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(self.max_backoff);
        }
    }
}

/// Opens a listener connection from `pool` and `LISTEN`s on `channels`.
pub(crate) async fn connect_listener<'a>(
    pool: &PgPool,
    channels: impl IntoIterator<Item = &'a str>,
) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // Shutdown is driven by our cancellation token, and reconnection by
    // `ListenerLoop::reconnect` (see the module docs for why).
    listener.ignore_pool_close_event(true);
    listener.eager_reconnect(false);
    let channels: Vec<&str> = channels.into_iter().collect();
    if !channels.is_empty() {
        listener.listen_all(channels).await?;
    }
    Ok(listener)
}
