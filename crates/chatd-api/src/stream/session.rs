//! The stream loop driver (`spec/chatd-architecture.md`, "Endpoint
//! lifecycle", "Stream loop operations", "Loop termination").
//!
//! [`StreamLoop::run`] runs the bootstrap `Sync`, then processes one input
//! at a time, never interleaving two: pubsub notifications and sync poller
//! polls become `Sync(hints)`, relayed parts become `Part`. Decisions are
//! made by the pure [`StreamState`]; this module only reads the database,
//! configures the relay forwarder and pushes events into the bounded
//! outbound queue of the transport (WebSocket or SSE).
//!
//! Termination causes are exactly the spec's list ([`Termination`]), plus
//! the end of the chat itself (a hard delete removes the resource the
//! request is about). Stale or duplicate hints, dropped notifications, a
//! relay with nothing to send and relay reconnects never end the loop.

use std::time::Duration;

use chatd_pubsub::{ChatUpdate, PubsubEvent, Subscription};
use chatd_store::Store;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::StreamConfig;
use super::event::ChatStreamEvent;
use super::fetch::{FetchError, fetch};
use super::poller::PollerRegistration;
use super::relay::{RelayHandle, RelayTarget};
use super::state::{PartRejection, RelayCommand, StreamState, SyncHints};

/// Why a stream ended (spec "Loop termination").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Termination {
    /// The client closed the connection (or the transport's receiver is
    /// gone).
    ClientDisconnected,
    /// The client stopped answering pings: the connection is presumed dead
    /// (a client disconnect nobody announced).
    DeadConnection,
    /// The server is shutting down (request context cancellation).
    Shutdown,
    /// A write to the client failed or timed out.
    WriteFailed,
    /// The client did not drain the bounded outbound queue within the
    /// slow-client timeout: it is disconnected rather than fed a truncated
    /// stream, and reconnects with `after_id`.
    SlowClient,
    /// The database failed after bounded retries.
    Database(String),
    /// An internal invariant was violated (a `seq` gap from the relay).
    InvariantViolation(String),
    /// The chat was deleted.
    ChatDeleted,
    /// The token the stream was opened with no longer authenticates:
    /// revoked, expired, or its user disabled (API.md "Tokens").
    TokenRevoked,
    /// The client sent a WebSocket frame or message over
    /// [`MAX_CLIENT_MESSAGE_BYTES`](super::config::MAX_CLIENT_MESSAGE_BYTES).
    MessageTooBig,
}

impl Termination {
    /// Label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Termination::ClientDisconnected => "client_disconnected",
            Termination::DeadConnection => "dead_connection",
            Termination::Shutdown => "shutdown",
            Termination::WriteFailed => "write_failed",
            Termination::SlowClient => "slow_client",
            Termination::Database(_) => "database",
            Termination::InvariantViolation(_) => "invariant_violation",
            Termination::ChatDeleted => "chat_deleted",
            Termination::TokenRevoked => "token_revoked",
            Termination::MessageTooBig => "message_too_big",
        }
    }

    /// Whether events already queued are still worth delivering before the
    /// close (not when the client is gone or cannot keep up).
    pub fn flushes(&self) -> bool {
        matches!(
            self,
            Termination::Shutdown
                | Termination::Database(_)
                | Termination::InvariantViolation(_)
                | Termination::ChatDeleted
        )
    }

    /// WebSocket close code and reason.
    pub fn close(&self) -> (u16, String) {
        use super::config::close_code as c;
        match self {
            Termination::ClientDisconnected => (c::NORMAL, "client disconnected".into()),
            Termination::DeadConnection => {
                (c::GOING_AWAY, "no pong: connection presumed dead".into())
            }
            Termination::Shutdown => (
                c::GOING_AWAY,
                "server shutting down: reconnect with after_id".into(),
            ),
            Termination::WriteFailed => (c::GOING_AWAY, "write failed".into()),
            Termination::SlowClient => (
                c::TRY_AGAIN_LATER,
                "client too slow: reconnect with after_id".into(),
            ),
            Termination::Database(_) => (
                c::INTERNAL,
                "database unavailable: reconnect with after_id".into(),
            ),
            Termination::InvariantViolation(_) => (
                c::INTERNAL,
                "internal error: reconnect with after_id".into(),
            ),
            Termination::ChatDeleted => (c::NORMAL, "chat deleted".into()),
            Termination::TokenRevoked => (
                c::POLICY_VIOLATION,
                "token revoked, expired or user disabled: authenticate again".into(),
            ),
            Termination::MessageTooBig => (
                c::MESSAGE_TOO_BIG,
                format!(
                    "client frames are limited to {} bytes",
                    super::config::MAX_CLIENT_MESSAGE_BYTES
                ),
            ),
        }
    }
}

/// A stream loop, subscribed and registered, waiting for its transport.
pub struct StreamLoop {
    pub(crate) state: StreamState,
    pub(crate) store: Store,
    /// Subscribed to `chat:update:{chat_id}` before the bootstrap read
    /// (`None` when pubsub is disabled for streams).
    pub(crate) pubsub: Option<Subscription>,
    pub(crate) poller: PollerRegistration,
    pub(crate) relay: RelayHandle,
    pub(crate) config: StreamConfig,
    pub(crate) shutdown: CancellationToken,
    /// The stream's slot under the per-user cap and its token's watch:
    /// held as long as the loop, released when it is dropped.
    pub(crate) admission: super::admission::Admission,
}

impl std::fmt::Debug for StreamLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamLoop")
            .field("chat_id", &self.state.chat_id())
            .finish_non_exhaustive()
    }
}

enum Input {
    Sync(Option<SyncHints>),
    Part(super::state::RelayPart),
}

impl StreamLoop {
    /// Runs the loop, sending events into `out`, until a termination cause.
    pub async fn run(mut self, out: mpsc::Sender<ChatStreamEvent>) -> Termination {
        let _gauge = LoopGauge::new();
        self.run_inner(&out).await
    }

    async fn run_inner(&mut self, out: &mpsc::Sender<ChatStreamEvent>) -> Termination {
        // Bootstrap: an unconditional fetch against the null local state.
        if let Err(t) = self.sync(None, out).await {
            return t;
        }
        loop {
            let input = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return Termination::Shutdown,
                () = self.admission.revoked().cancelled() => return Termination::TokenRevoked,
                () = out.closed() => return Termination::ClientDisconnected,
                // Parts first: a burst of the current episode's parts is
                // delivered before the hint that commits the message they
                // preview (after which they would be stale and dropped).
                part = self.relay.parts.recv() => match part {
                    Some(part) => Input::Part(part),
                    None => return Termination::InvariantViolation("the relay forwarder stopped".into()),
                },
                event = next_notification(&mut self.pubsub) => match event {
                    Some(PubsubEvent::Message(payload)) => match ChatUpdate::from_payload(&payload) {
                        Ok(update) => Input::Sync(Some(SyncHints::from(&update))),
                        Err(err) => {
                            tracing::debug!(error = %err, "stream: ignoring a malformed chat:update payload");
                            continue;
                        }
                    },
                    // Notifications may have been lost: re-read.
                    Some(PubsubEvent::Reconnected) => Input::Sync(None),
                    None => {
                        // Pubsub shut down: the sync poller keeps the stream
                        // converging.
                        self.pubsub = None;
                        continue;
                    }
                },
                hints = self.poller.next() => Input::Sync(Some(hints)),
            };
            let result = match input {
                Input::Sync(hints) => self.sync(hints, out).await,
                Input::Part(part) => self.part(part, out).await,
            };
            if let Err(t) = result {
                return t;
            }
        }
    }

    /// The `Sync` operation.
    async fn sync(
        &mut self,
        hints: Option<SyncHints>,
        out: &mpsc::Sender<ChatStreamEvent>,
    ) -> Result<(), Termination> {
        if !self.state.should_fetch(hints.as_ref()) {
            return Ok(());
        }
        let Some(db) = self.fetch_with_retry(out).await? else {
            return Ok(());
        };
        let output = self.state.apply_sync(db);
        match output.relay {
            RelayCommand::Keep => {}
            RelayCommand::Stop
            | RelayCommand::Follow {
                worker_id: None, ..
            } => self.relay.set(None),
            RelayCommand::Follow {
                worker_id: Some(worker_id),
                episode,
            } => self.relay.set(Some(RelayTarget { worker_id, episode })),
        }
        for event in output.events {
            self.emit(event, out).await?;
        }
        Ok(())
    }

    /// The `Part` operation.
    async fn part(
        &mut self,
        part: super::state::RelayPart,
        out: &mpsc::Sender<ChatStreamEvent>,
    ) -> Result<(), Termination> {
        match self.state.apply_part(part) {
            Ok(event) => self.emit(event, out).await,
            Err(PartRejection::Gap { expected, got }) => {
                tracing::error!(chat_id = %self.state.chat_id(), expected, got, "stream: seq gap from the relay");
                Err(Termination::InvariantViolation(format!(
                    "seq gap from the relay: expected {expected}, got {got}"
                )))
            }
            Err(rejection) => {
                let reason = match rejection {
                    PartRejection::StaleEpisode => "stale_episode",
                    _ => "duplicate",
                };
                metrics::counter!("chatd_stream_parts_dropped_total", "reason" => reason)
                    .increment(1);
                Ok(())
            }
        }
    }

    /// The `Sync`'s reads, retried: a permanent error up to
    /// `db_attempts` times, a transient one (the database away in a
    /// failover) for up to `db_patience`, so the stream stays open across
    /// a failover. A client that goes away meanwhile ends the wait.
    async fn fetch_with_retry(
        &mut self,
        out: &mpsc::Sender<ChatStreamEvent>,
    ) -> Result<Option<super::state::DbState>, Termination> {
        let mut backoff = Duration::from_millis(100);
        let mut attempt = 1;
        let started = tokio::time::Instant::now();
        loop {
            match fetch(&self.store, &self.state).await {
                Ok(db) => return Ok(db),
                Err(FetchError::ChatGone) => return Err(Termination::ChatDeleted),
                Err(err)
                    if (err.is_transient() && started.elapsed() >= self.config.db_patience)
                        || (!err.is_transient() && attempt >= self.config.db_attempts) =>
                {
                    tracing::warn!(chat_id = %self.state.chat_id(), error = %err, attempt, "stream: database failed; ending the stream");
                    return Err(Termination::Database(err.to_string()));
                }
                Err(err) => {
                    tracing::debug!(chat_id = %self.state.chat_id(), error = %err, attempt, "stream: sync read failed; retrying");
                    tokio::select! {
                        () = self.shutdown.cancelled() => return Err(Termination::Shutdown),
                        () = out.closed() => return Err(Termination::ClientDisconnected),
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    attempt += 1;
                }
            }
        }
    }

    /// Queues one event; a client that does not make room within the
    /// slow-client timeout is disconnected.
    async fn emit(
        &self,
        event: ChatStreamEvent,
        out: &mpsc::Sender<ChatStreamEvent>,
    ) -> Result<(), Termination> {
        match out
            .send_timeout(event, self.config.slow_client_timeout)
            .await
        {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(Termination::ClientDisconnected),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Err(Termination::SlowClient),
        }
    }
}

/// Counts running loops in the `chatd_stream_loops` gauge, also when the
/// loop's future is dropped by its transport.
struct LoopGauge;

impl LoopGauge {
    fn new() -> Self {
        metrics::gauge!("chatd_stream_loops").increment(1.0);
        LoopGauge
    }
}

impl Drop for LoopGauge {
    fn drop(&mut self) {
        metrics::gauge!("chatd_stream_loops").decrement(1.0);
    }
}

/// Counts one ended stream in `chatd_stream_terminations_total` (labels
/// `transport`, `reason`).
pub(crate) fn record_termination(transport: &'static str, termination: &Termination) {
    metrics::counter!("chatd_stream_terminations_total", "transport" => transport, "reason" => termination.label())
        .increment(1);
}

async fn next_notification(pubsub: &mut Option<Subscription>) -> Option<PubsubEvent> {
    match pubsub {
        Some(subscription) => subscription.recv().await,
        None => std::future::pending().await,
    }
}
