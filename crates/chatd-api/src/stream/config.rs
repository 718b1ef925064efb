//! Tunables and dependencies of the live stream: [`StreamConfig`] (the
//! spec's intervals and limits), [`StreamDeps`] (what the replica provides),
//! the frame size limit and the WebSocket close codes. A leaf of the stream
//! module: every other stream module may use it.

use std::sync::Arc;
use std::time::Duration;

use chatd_pubsub::{LiveParts, Pubsub};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::relay::RelayConfig;

/// At most this many events go in one frame (API.md).
pub const MAX_EVENTS_PER_FRAME: usize = 256;

/// Largest WebSocket frame, and message, a client may send on a stream:
/// 64 KiB (API.md "Slow or hostile clients"). A larger one closes the
/// stream with [`close_code::MESSAGE_TOO_BIG`].
pub const MAX_CLIENT_MESSAGE_BYTES: usize = 64 * 1024;

/// WebSocket close codes the stream uses.
pub mod close_code {
    /// Normal closure (the client left; the chat was deleted).
    pub const NORMAL: u16 = 1000;
    /// Going away (server shutdown; a connection presumed dead).
    pub const GOING_AWAY: u16 = 1001;
    /// Unsupported data (a malformed control message on the parts endpoint).
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// Policy violation (the stream's token was revoked or expired, or its
    /// user disabled).
    pub const POLICY_VIOLATION: u16 = 1008;
    /// Message too big (a client frame or message over
    /// [`MAX_CLIENT_MESSAGE_BYTES`](super::MAX_CLIENT_MESSAGE_BYTES)).
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// Internal error (database failure, invariant violation).
    pub const INTERNAL: u16 = 1011;
    /// Try again later (the client was too slow to keep up).
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// Tunables of the live stream. Defaults are the spec's and API.md's.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// Sync poller period (`--sync-poll-interval`, 10 s).
    pub sync_poll_interval: Duration,
    /// WebSocket ping period (15 s), on client streams and parts
    /// connections.
    pub ping_interval: Duration,
    /// A connection with no inbound frame (pongs included) for this long is
    /// presumed dead and closed (45 s).
    pub idle_timeout: Duration,
    /// Timeout of one frame write (10 s).
    pub write_timeout: Duration,
    /// SSE keep-alive comment period (15 s).
    pub keep_alive_interval: Duration,
    /// Events queued per client before the loop waits (1024).
    pub outbound_capacity: usize,
    /// How long the loop waits for room in a full queue before it
    /// disconnects the client as too slow (10 s).
    pub slow_client_timeout: Duration,
    /// Attempts of one `Sync`'s reads before the stream ends, when they
    /// fail with a permanent error (5).
    pub db_attempts: u32,
    /// How long one `Sync`'s reads are retried (backoff up to 2 s) while
    /// they fail with a transient error (the database unreachable, in a
    /// failover or a restart), before the stream ends (60 s): a stream
    /// stays open across a failover (issue 36; Patroni's TTL is 10 s) and
    /// catches up from the database once it answers.
    pub db_patience: Duration,
    /// Relay forwarder tunables.
    pub relay: RelayConfig,
    /// Period of the re-check of the tokens of open streams (5 s, ±20 %):
    /// a revoked token's streams close within it (API.md "Tokens": within
    /// 10 s).
    pub token_check_interval: Duration,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            sync_poll_interval: Duration::from_secs(10),
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(45),
            write_timeout: Duration::from_secs(10),
            keep_alive_interval: Duration::from_secs(15),
            outbound_capacity: 1024,
            slow_client_timeout: Duration::from_secs(10),
            db_attempts: 5,
            db_patience: Duration::from_secs(60),
            token_check_interval: Duration::from_secs(5),
            relay: RelayConfig {
                backoff_initial: Duration::from_millis(100),
                backoff_max: Duration::from_secs(5),
                dial_timeout: Duration::from_secs(5),
                idle_timeout: Duration::from_secs(45),
            },
        }
    }
}

/// What streaming needs from the replica.
#[derive(Clone)]
pub struct StreamDeps {
    /// The replica's part buffer, read side: the same buffer its worker
    /// writes (`chatd_worker::PartBuffer`, wired in by the binary).
    pub parts: Arc<dyn LiveParts>,
    /// The replica id, which is its worker id: a chat whose `worker_id` is
    /// this is relayed from `parts` directly.
    pub replica_id: Uuid,
    /// Pubsub for `chat:update:{chat_id}`; `None` makes the stream loops
    /// ignore notifications and converge through the sync poller alone.
    pub pubsub: Option<Arc<dyn Pubsub>>,
    /// Tunables.
    pub config: StreamConfig,
    /// Cancelled when the replica shuts down: every stream closes (`1001`)
    /// and the sync poller stops.
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for StreamDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamDeps")
            .field("replica_id", &self.replica_id)
            .field("pubsub", &self.pubsub.is_some())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
