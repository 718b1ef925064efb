//! Admission of a user's stream (API.md "Limits, budgets and the token
//! lifecycle"): what every WebSocket, SSE and long-poll connection holds
//! while it is open.
//!
//! - A slot under the per-user cap of open streams on this replica
//!   ([`OpenStreams`], `ApiOptions.limits.max_open_streams`, 64 by
//!   default): beyond it the request is refused with `429` before any
//!   upgrade, and another user's streams are unaffected. The slot is a
//!   guard: it is released when the stream ends however it ends (the
//!   connection's task, the SSE body or the long-poll handler is dropped).
//! - A watch on the token the stream was opened with ([`TokenWatcher`]):
//!   every [`StreamConfig::token_check_interval`](super::config::StreamConfig)
//!   (5 s, jittered) the replica checks each distinct token of its open
//!   streams once, with the query authentication uses
//!   ([`tokens::user_by_secret_hash`]); a token that no longer
//!   authenticates (revoked, expired, or its user disabled) cancels the
//!   streams opened with it, which close within 10 s of the revocation
//!   (WebSocket `1008`, SSE and long-poll end). One query per distinct token
//!   per period, however many streams share it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::http::HeaderMap;
use chatd_store::tokens;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::ApiError;
use crate::token::{hash_token, request_token};

/// What an open user stream holds: its slot and its token's watch. Dropping
/// it releases both.
#[derive(Debug)]
pub struct Admission {
    _slot: StreamSlot,
    watch: Option<TokenWatch>,
    revoked: CancellationToken,
}

impl Admission {
    /// Cancelled when the stream's token stops authenticating.
    pub fn revoked(&self) -> &CancellationToken {
        &self.revoked
    }

    /// Whether a token is watched (false only when the request carried no
    /// token, which authentication does not let through).
    pub fn watches_a_token(&self) -> bool {
        self.watch.is_some()
    }
}

/// The per-user count of open streams on this replica. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct OpenStreams {
    counts: Arc<Mutex<HashMap<Uuid, u32>>>,
}

impl OpenStreams {
    fn counts(&self) -> MutexGuard<'_, HashMap<Uuid, u32>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for one more stream of `user`, if they hold fewer than `max`.
    ///
    /// # Errors
    /// `429` naming the maximum when `user` already holds `max` streams.
    pub fn acquire(&self, user: Uuid, max: u32) -> Result<StreamSlot, ApiError> {
        let mut counts = self.counts();
        let count = counts.entry(user).or_default();
        if *count >= max {
            metrics::counter!("chatd_stream_refused_total", "reason" => "max_open_streams")
                .increment(1);
            return Err(ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "Too many open streams.",
            )
            .with_detail(format!(
                "A user holds at most {max} open streams (WebSocket, SSE and long-poll) at \
                 once on this server; close one before opening another."
            )));
        }
        *count += 1;
        Ok(StreamSlot {
            streams: self.clone(),
            user,
        })
    }

    /// How many streams `user` holds on this replica.
    pub fn count(&self, user: Uuid) -> u32 {
        self.counts().get(&user).copied().unwrap_or(0)
    }
}

/// One open stream of a user: released on drop.
#[derive(Debug)]
pub struct StreamSlot {
    streams: OpenStreams,
    user: Uuid,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut counts = self.streams.counts();
        if let Some(count) = counts.get_mut(&self.user) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.user);
            }
        }
    }
}

/// The tokens of this replica's open streams, and the loop that re-checks
/// them ([`TokenWatcher::run`]). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct TokenWatcher {
    watched: Arc<Mutex<HashMap<Vec<u8>, Watched>>>,
}

#[derive(Debug)]
struct Watched {
    sessions: usize,
    revoked: CancellationToken,
}

/// One stream's registration of its token: unregistered on drop.
#[derive(Debug)]
struct TokenWatch {
    watcher: TokenWatcher,
    hash: Vec<u8>,
}

impl Drop for TokenWatch {
    fn drop(&mut self) {
        let mut watched = self.watcher.watched();
        if let Some(entry) = watched.get_mut(&self.hash) {
            entry.sessions = entry.sessions.saturating_sub(1);
            if entry.sessions == 0 {
                watched.remove(&self.hash);
            }
        }
    }
}

impl TokenWatcher {
    fn watched(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Watched>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers one stream opened with the token of hash `hash`; the
    /// returned token is cancelled when it stops authenticating.
    fn watch(&self, hash: Vec<u8>) -> (TokenWatch, CancellationToken) {
        let mut watched = self.watched();
        let entry = watched.entry(hash.clone()).or_insert_with(|| Watched {
            sessions: 0,
            revoked: CancellationToken::new(),
        });
        entry.sessions += 1;
        let revoked = entry.revoked.clone();
        drop(watched);
        (
            TokenWatch {
                watcher: self.clone(),
                hash,
            },
            revoked,
        )
    }

    /// How many distinct tokens are watched.
    pub fn tokens(&self) -> usize {
        self.watched().len()
    }

    /// Re-checks every watched token every `interval` (±20 %, so replicas
    /// started together do not query in step) until `cancel`. A token the
    /// query no longer finds is revoked: its streams are cancelled and it
    /// is forgotten. A database error ends the pass (the next one retries);
    /// streams stay open meanwhile, as they would for any reader.
    pub async fn run(self, pool: PgPool, interval: Duration, cancel: CancellationToken) {
        loop {
            let period = interval.mul_f64(rand::random_range(0.8..1.2));
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            self.check_once(&pool).await;
        }
    }

    /// One pass over the watched tokens; returns how many were revoked.
    pub async fn check_once(&self, pool: &PgPool) -> usize {
        let hashes: Vec<Vec<u8>> = self.watched().keys().cloned().collect();
        let mut revoked = 0;
        for hash in hashes {
            match tokens::user_by_secret_hash(pool, &hash).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    if let Some(entry) = self.watched().remove(&hash) {
                        entry.revoked.cancel();
                        revoked += 1;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "stream token check failed; retrying next period");
                    break;
                }
            }
        }
        if revoked > 0 {
            metrics::counter!("chatd_stream_tokens_revoked_total").increment(revoked as u64);
        }
        revoked
    }
}

/// Admits a stream of `user` opened with the request `headers`: a slot
/// under `max` and a watch on its token.
///
/// # Errors
/// `429` when `user` already holds `max` streams on this replica.
pub(crate) fn admit(
    streams: &OpenStreams,
    watcher: &TokenWatcher,
    user: Uuid,
    headers: &HeaderMap,
    max: u32,
) -> Result<Admission, ApiError> {
    let slot = streams.acquire(user, max)?;
    let (watch, revoked) = match request_token(headers) {
        Some(token) => {
            let (watch, revoked) = watcher.watch(hash_token(token));
            (Some(watch), revoked)
        }
        None => (None, CancellationToken::new()),
    };
    Ok(Admission {
        _slot: slot,
        watch,
        revoked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_per_user_and_slots_free_on_drop() {
        let streams = OpenStreams::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let held: Vec<_> = (0..3)
            .map(|_| streams.acquire(a, 3).expect("slot"))
            .collect();
        let refused = streams.acquire(a, 3).expect_err("a is at the cap");
        assert_eq!(refused.status(), 429);
        assert!(
            refused
                .body()
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("at most 3")),
            "{:?}",
            refused.body()
        );
        let other = streams.acquire(b, 3).expect("b is not a");
        assert_eq!((streams.count(a), streams.count(b)), (3, 1));
        drop(held);
        drop(other);
        assert_eq!((streams.count(a), streams.count(b)), (0, 0));
        assert!(streams.counts().is_empty(), "no entry left behind");
        let _again = streams.acquire(a, 3).expect("freed");
    }

    #[test]
    fn streams_of_one_token_share_one_watch() {
        let watcher = TokenWatcher::default();
        let (w1, r1) = watcher.watch(b"h".to_vec());
        let (w2, r2) = watcher.watch(b"h".to_vec());
        let (w3, _) = watcher.watch(b"other".to_vec());
        assert_eq!(watcher.tokens(), 2);
        watcher.watched()[&b"h".to_vec()].revoked.cancel();
        assert!(r1.is_cancelled() && r2.is_cancelled());
        drop((w1, w2, w3));
        assert_eq!(watcher.tokens(), 0);
    }

    #[test]
    fn the_token_is_found_where_authentication_finds_it() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(*name, value.parse().unwrap());
            }
            map
        };
        assert_eq!(
            request_token(&headers(&[("authorization", "Bearer abc")])),
            Some("abc")
        );
        let upgrade = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-protocol", "chatd, chatd.bearer.tok"),
        ];
        assert_eq!(request_token(&headers(&upgrade)), Some("tok"));
        assert_eq!(
            request_token(&headers(&upgrade[2..])),
            None,
            "not an upgrade"
        );
        let mut both = upgrade.to_vec();
        both.push(("authorization", "Basic x"));
        assert_eq!(request_token(&headers(&both)), None, "no fallback");
    }
}
