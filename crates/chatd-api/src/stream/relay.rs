//! The relay forwarder (`spec/chatd-architecture.md`, "Relay mechanism" →
//! "Relay behavior") and [`EpisodeFollower`], the contiguous reader of one
//! episode of a local part buffer that both the forwarder and the parts
//! endpoint use.
//!
//! One forwarder per stream loop, configured by `Sync` through
//! [`RelayHandle::set`]:
//! - no target, or a target without a worker: stop forwarding and close any
//!   parts connection;
//! - the target's worker is this replica: read the local part buffer
//!   directly through [`LiveParts`] (no dial to itself);
//! - another worker: resolve its `replicas.advertise_url`, dial its parts
//!   endpoint (`Authorization: Bearer <relay secret>`) with backoff from
//!   100 ms to 5 s, and select the episode with a control message. When only
//!   the episode changes the connection is kept and a new control message is
//!   sent; when the worker changes the connection is replaced.
//!
//! Only parts of the currently requested episode are passed to the loop. A
//! lost connection is redialled; the parts endpoint replays the episode from
//! `seq` 1 and the loop drops what it already has.

use std::sync::Arc;
use std::time::Duration;

use chatd_core::{Episode, StreamPart};
use chatd_pubsub::{EpisodeProgress, LiveParts, PartStream};
use futures::{SinkExt as _, StreamExt as _};
use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use uuid::Uuid;

use super::event::{EpisodeSelection, MessagePartPayload, RelayedPartEvent};

/// Where the forwarder gets parts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayTarget {
    /// The owning worker (replica).
    pub worker_id: Uuid,
    /// The episode to forward.
    pub episode: Episode,
}

/// Reads one episode of a local part buffer with contiguous `seq`, from 1.
///
/// The buffer ends a subscription after the last part of a closed episode,
/// but also when a subscriber was too slow; the follower then subscribes
/// again (the buffer replays from the start) and skips what it delivered, so
/// its output never has a gap. It ends only when the episode is closed and
/// fully delivered, or gone from the buffer.
pub struct EpisodeFollower {
    parts: Arc<dyn LiveParts>,
    episode: Episode,
    subscription: PartStream,
    next_seq: u64,
}

impl std::fmt::Debug for EpisodeFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpisodeFollower")
            .field("episode", &self.episode)
            .field("next_seq", &self.next_seq)
            .finish_non_exhaustive()
    }
}

impl EpisodeFollower {
    /// Follows `episode` of `parts` from `seq` 1.
    pub fn new(parts: Arc<dyn LiveParts>, episode: Episode) -> Self {
        let subscription = parts.subscribe(episode);
        Self {
            parts,
            episode,
            subscription,
            next_seq: 1,
        }
    }

    /// The episode.
    pub fn episode(&self) -> Episode {
        self.episode
    }

    /// The next part, or `None` when the episode is complete. Cancel safe.
    pub async fn next(&mut self) -> Option<StreamPart> {
        loop {
            match self.subscription.next().await {
                Some(part) if part.seq < self.next_seq => continue,
                Some(part) => {
                    self.next_seq = part.seq + 1;
                    return Some(part);
                }
                None => {
                    let delivered = self.next_seq - 1;
                    match self.parts.progress(self.episode) {
                        None => return None,
                        Some(EpisodeProgress {
                            parts,
                            closed: true,
                        }) if delivered >= parts => {
                            return None;
                        }
                        // Dropped as a slow subscriber: subscribe again.
                        _ => self.subscription = self.parts.subscribe(self.episode),
                    }
                }
            }
        }
    }
}

/// Tunables of the forwarder.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// First dial backoff (100 ms).
    pub backoff_initial: Duration,
    /// Dial backoff cap (5 s).
    pub backoff_max: Duration,
    /// Timeout of one dial, handshake included (5 s).
    pub dial_timeout: Duration,
    /// A parts connection silent for this long (no frame, no ping) is taken
    /// for dead and redialled.
    pub idle_timeout: Duration,
}

/// What the forwarder needs. `Debug` prints no secret.
#[derive(Clone)]
pub struct RelayDeps {
    /// The chat.
    pub chat_id: Uuid,
    /// This replica's id (= its worker id).
    pub replica_id: Uuid,
    /// This replica's part buffer (read side).
    pub parts: Arc<dyn LiveParts>,
    /// For `replicas.advertise_url`.
    pub pool: PgPool,
    /// The relay secret (`None`: remote relaying is impossible; dials fail
    /// with 401 and are retried).
    pub secret: Option<String>,
    /// Tunables.
    pub config: RelayConfig,
}

impl std::fmt::Debug for RelayDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayDeps")
            .field("chat_id", &self.chat_id)
            .field("replica_id", &self.replica_id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The loop's handle on its forwarder. Dropping it stops the forwarder.
#[derive(Debug)]
pub struct RelayHandle {
    target: watch::Sender<Option<RelayTarget>>,
    /// Parts of the requested episode, for the loop's `Part` operation.
    pub parts: mpsc::Receiver<MessagePartPayload>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RelayHandle {
    /// Starts a forwarder with no target.
    pub fn start(deps: RelayDeps) -> Self {
        let (target, target_rx) = watch::channel(None);
        let (tx, parts) = mpsc::channel(256);
        let task = tokio::spawn(
            Forwarder {
                deps,
                target: target_rx,
                out: tx,
            }
            .run(),
        );
        Self {
            target,
            parts,
            task,
        }
    }

    /// Configures the forwarder (`None`: stop). Setting the current target
    /// again changes nothing.
    pub fn set(&self, target: Option<RelayTarget>) {
        self.target.send_if_modified(|current| {
            if *current == target {
                false
            } else {
                *current = target;
                true
            }
        });
    }
}

struct Forwarder {
    deps: RelayDeps,
    target: watch::Receiver<Option<RelayTarget>>,
    out: mpsc::Sender<MessagePartPayload>,
}

/// How a connection to one worker ended.
enum Next {
    /// The target changed to another worker, or to none.
    Retarget,
    /// The connection failed; dial the same worker again after a backoff.
    Redial,
    /// The loop is gone.
    Exit,
}

impl Forwarder {
    async fn run(mut self) {
        loop {
            let target = *self.target.borrow_and_update();
            let next = match target {
                None => {
                    if self.target.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                Some(t) if t.worker_id == self.deps.replica_id => self.follow_local().await,
                Some(t) => self.follow_remote(t.worker_id).await,
            };
            if matches!(next, Next::Exit) {
                return;
            }
        }
    }

    /// Forwards parts from this replica's buffer until the worker changes.
    async fn follow_local(&mut self) -> Next {
        let worker = self.deps.replica_id;
        loop {
            let Some(target) = *self.target.borrow_and_update() else {
                return Next::Retarget;
            };
            if target.worker_id != worker {
                return Next::Retarget;
            }
            let mut follower = Some(EpisodeFollower::new(
                self.deps.parts.clone(),
                target.episode,
            ));
            loop {
                tokio::select! {
                    changed = self.target.changed() => {
                        if changed.is_err() {
                            return Next::Exit;
                        }
                        break;
                    }
                    part = next_part(&mut follower) => match part {
                        Some(part) => {
                            if self.out.send(payload(target.episode, part)).await.is_err() {
                                return Next::Exit;
                            }
                        }
                        None => follower = None,
                    },
                }
            }
        }
    }

    /// Forwards parts from worker `worker`'s parts endpoint until the worker
    /// changes, redialling with backoff.
    async fn follow_remote(&mut self, worker: Uuid) -> Next {
        let mut backoff = self.deps.config.backoff_initial;
        loop {
            match self.connect_once(worker).await {
                Next::Redial => {}
                other => return other,
            }
            tokio::select! {
                changed = self.target.changed() => {
                    if changed.is_err() {
                        return Next::Exit;
                    }
                    let still = self.target.borrow().is_some_and(|t| t.worker_id == worker);
                    if !still {
                        return Next::Retarget;
                    }
                }
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(self.deps.config.backoff_max);
        }
    }

    async fn connect_once(&mut self, worker: Uuid) -> Next {
        let url = match chatd_store::replicas::advertise_url(&self.deps.pool, worker).await {
            Ok(Some(url)) => url,
            Ok(None) => {
                tracing::debug!(%worker, "relay: the owning replica is not registered");
                return Next::Redial;
            }
            Err(err) => {
                tracing::debug!(%worker, error = %err, "relay: resolving the owning replica failed");
                return Next::Redial;
            }
        };
        let Some(request) = parts_request(&url, self.deps.chat_id, self.deps.secret.as_deref())
        else {
            tracing::warn!(%worker, %url, "relay: cannot build a parts URL from the advertised URL");
            return Next::Redial;
        };
        let connecting = tokio::time::timeout(
            self.deps.config.dial_timeout,
            // Parts are small and latency-bound: no Nagle delay.
            tokio_tungstenite::connect_async_with_config(request, None, true),
        );
        let mut socket = match connecting.await {
            Ok(Ok((socket, _))) => socket,
            Ok(Err(err)) => {
                tracing::debug!(%worker, %url, error = %err, "relay: dialling the parts endpoint failed");
                return Next::Redial;
            }
            Err(_) => {
                tracing::debug!(%worker, %url, "relay: dialling the parts endpoint timed out");
                return Next::Redial;
            }
        };
        tracing::debug!(chat_id = %self.deps.chat_id, %worker, %url, "relay: connected");
        let mut selected: Option<Episode> = None;
        loop {
            let Some(target) = *self.target.borrow_and_update() else {
                let _ = socket.close(None).await;
                return Next::Retarget;
            };
            if target.worker_id != worker {
                let _ = socket.close(None).await;
                return Next::Retarget;
            }
            if selected != Some(target.episode) {
                let control = serde_json::to_string(&EpisodeSelection {
                    history_version: target.episode.history_version,
                    generation_attempt: target.episode.generation_attempt,
                })
                .expect("selection serializes");
                if socket
                    .send(tungstenite::Message::text(control))
                    .await
                    .is_err()
                {
                    return Next::Redial;
                }
                selected = Some(target.episode);
            }
            tokio::select! {
                changed = self.target.changed() => {
                    if changed.is_err() {
                        return Next::Exit;
                    }
                }
                frame = tokio::time::timeout(self.deps.config.idle_timeout, socket.next()) => {
                    let frame = match frame {
                        Err(_) => {
                            tracing::debug!(%worker, "relay: parts connection idle; redialling");
                            return Next::Redial;
                        }
                        Ok(None) | Ok(Some(Err(_))) => return Next::Redial,
                        Ok(Some(Ok(frame))) => frame,
                    };
                    let text = match frame {
                        tungstenite::Message::Text(text) => text,
                        tungstenite::Message::Close(_) => return Next::Redial,
                        _ => continue,
                    };
                    let events: Vec<RelayedPartEvent> = match serde_json::from_str(text.as_str()) {
                        Ok(events) => events,
                        Err(err) => {
                            tracing::warn!(%worker, error = %err, "relay: malformed parts frame");
                            return Next::Redial;
                        }
                    };
                    for event in events {
                        let part = event.message_part;
                        let wanted = event.kind == "message_part"
                            && event.chat_id == self.deps.chat_id
                            && part.history_version == target.episode.history_version
                            && part.generation_attempt == target.episode.generation_attempt;
                        if wanted && self.out.send(part).await.is_err() {
                            return Next::Exit;
                        }
                    }
                }
            }
        }
    }
}

/// The next part of `follower`, or never when there is none.
pub(crate) async fn next_part(follower: &mut Option<EpisodeFollower>) -> Option<StreamPart> {
    match follower {
        Some(f) => f.next().await,
        None => std::future::pending().await,
    }
}

fn payload(episode: Episode, part: StreamPart) -> MessagePartPayload {
    MessagePartPayload {
        role: part.role,
        part: part.part,
        history_version: episode.history_version,
        generation_attempt: episode.generation_attempt,
        seq: part.seq,
    }
}

/// A `message_part` payload for `part` of `episode`.
pub(crate) fn part_payload(episode: Episode, part: StreamPart) -> MessagePartPayload {
    payload(episode, part)
}

/// The WebSocket request for the parts endpoint of the replica at
/// `advertise_url` (`http(s)://host[:port][/prefix]`).
fn parts_request(
    advertise_url: &str,
    chat_id: Uuid,
    secret: Option<&str>,
) -> Option<tungstenite::handshake::client::Request> {
    let base = advertise_url.trim_end_matches('/');
    let ws = if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else {
        return None;
    };
    let mut request = format!("{ws}/api/v2/chats/{chat_id}/stream/parts")
        .into_client_request()
        .ok()?;
    if let Some(secret) = secret {
        request.headers_mut().insert(
            axum::http::header::AUTHORIZATION,
            format!("Bearer {secret}").parse().ok()?,
        );
    }
    Some(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatd_core::{ChatRole, PartDelta};
    // The real buffer (a dev-dependency): the test is about its
    // slow-subscriber drop.
    use chatd_worker::{PartBuffer, PartBufferConfig};
    use tokio_util::sync::CancellationToken;

    fn episode() -> Episode {
        Episode {
            chat_id: Uuid::from_u128(3),
            history_version: 2,
            generation_attempt: 1,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_resubscribes_after_being_dropped_as_slow_and_never_skips() {
        let buffer = PartBuffer::with_config(
            PartBufferConfig {
                subscriber_capacity: 1,
                ..PartBufferConfig::default()
            },
            CancellationToken::new(),
        );
        buffer.create_episode(episode()).unwrap();
        let mut follower = EpisodeFollower::new(Arc::new(buffer.clone()), episode());
        for i in 0..5 {
            buffer
                .add_part(
                    episode(),
                    ChatRole::Assistant,
                    PartDelta::Text {
                        text: i.to_string(),
                    },
                )
                .unwrap();
        }
        // Far past the slow-subscriber timeout: the buffer drops the
        // subscription, the follower picks up where it was.
        tokio::time::sleep(Duration::from_secs(30)).await;
        buffer.close_episode(episode());
        let mut seqs = vec![];
        while let Some(part) = follower.next().await {
            seqs.push(part.seq);
        }
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn parts_urls_follow_the_advertised_scheme() {
        let id = Uuid::from_u128(1);
        let r = parts_request("http://127.0.0.1:9/", id, Some("s")).unwrap();
        assert_eq!(
            r.uri().to_string(),
            format!("ws://127.0.0.1:9/api/v2/chats/{id}/stream/parts")
        );
        assert_eq!(r.headers()["authorization"], "Bearer s");
        assert!(parts_request("ftp://x", id, None).is_none());
    }
}
