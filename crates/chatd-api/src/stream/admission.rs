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
//! - Watches on what let the stream open ([`TokenWatcher`], [`Watch`]):
//!   the token or session it was opened with, and, for a reader of a chat
//!   shared with them, that share. Every
//!   [`StreamConfig::token_check_interval`](super::config::StreamConfig)
//!   (5 s, jittered) the replica checks each distinct watch of its open
//!   streams once, with the query authentication uses
//!   ([`tokens::user_by_secret_hash`], [`sessions::is_valid`],
//!   [`shares::can_read`]); a token or session that no longer
//!   authenticates (revoked, signed out, expired, or its user disabled), or
//!   a share revoked, cancels the streams that depend on it, which close
//!   within 10 s of the revocation (WebSocket `1008`, SSE and long-poll
//!   end). One query per distinct watch per period, however many streams
//!   share it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chatd_store::{sessions, shares, tokens};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::ApiError;

/// One thing an open stream depends on, re-checked periodically.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Watch {
    /// The bearer token of that SHA-256 still authenticates.
    Token(Vec<u8>),
    /// The session of that secret SHA-256 still authenticates.
    Session(Vec<u8>),
    /// `user` may still read `chat` through a share.
    Share {
        /// The chat.
        chat: Uuid,
        /// The reader.
        user: Uuid,
    },
}

/// What an open user stream holds: its slot and its watches. Dropping it
/// releases them.
#[derive(Debug)]
pub struct Admission {
    _slot: StreamSlot,
    watches: Vec<TokenWatch>,
    revoked: CancellationToken,
    /// Ends the task that joins several watches' cancellations.
    _join: Option<tokio_util::sync::DropGuard>,
}

impl Admission {
    /// Cancelled when any of the stream's watches fails (its token or
    /// session stops authenticating, its share is revoked).
    pub fn revoked(&self) -> &CancellationToken {
        &self.revoked
    }

    /// Whether a credential is watched (false only when the request
    /// carried none, which authentication does not let through).
    pub fn watches_a_token(&self) -> bool {
        !self.watches.is_empty()
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

/// The watches of this replica's open streams, and the loop that re-checks
/// them ([`TokenWatcher::run`]). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct TokenWatcher {
    watched: Arc<Mutex<HashMap<Watch, Watched>>>,
}

#[derive(Debug)]
struct Watched {
    sessions: usize,
    revoked: CancellationToken,
}

/// One stream's registration of a watch: unregistered on drop.
#[derive(Debug)]
struct TokenWatch {
    watcher: TokenWatcher,
    key: Watch,
}

impl Drop for TokenWatch {
    fn drop(&mut self) {
        let mut watched = self.watcher.watched();
        if let Some(entry) = watched.get_mut(&self.key) {
            entry.sessions = entry.sessions.saturating_sub(1);
            if entry.sessions == 0 {
                watched.remove(&self.key);
            }
        }
    }
}

impl TokenWatcher {
    fn watched(&self) -> MutexGuard<'_, HashMap<Watch, Watched>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers one stream's watch `key`; the returned token is cancelled
    /// when it fails.
    fn watch(&self, key: Watch) -> (TokenWatch, CancellationToken) {
        let mut watched = self.watched();
        let entry = watched.entry(key.clone()).or_insert_with(|| Watched {
            sessions: 0,
            revoked: CancellationToken::new(),
        });
        entry.sessions += 1;
        let revoked = entry.revoked.clone();
        drop(watched);
        (
            TokenWatch {
                watcher: self.clone(),
                key,
            },
            revoked,
        )
    }

    /// How many distinct watches (tokens, sessions, shares) there are.
    pub fn tokens(&self) -> usize {
        self.watched().len()
    }

    /// Re-checks every watch every `interval` (±20 %, so replicas
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

    /// One pass over the watches; returns how many failed (were revoked).
    pub async fn check_once(&self, pool: &PgPool) -> usize {
        let keys: Vec<Watch> = self.watched().keys().cloned().collect();
        let mut revoked = 0;
        for key in keys {
            let holds = match &key {
                Watch::Token(hash) => tokens::user_by_secret_hash(pool, hash)
                    .await
                    .map(|user| user.is_some()),
                Watch::Session(hash) => sessions::is_valid(pool, hash).await,
                Watch::Share { chat, user } => shares::can_read(pool, *chat, *user).await,
            };
            match holds {
                Ok(true) => {}
                Ok(false) => {
                    if let Some(entry) = self.watched().remove(&key) {
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

/// Admits a stream of `user` that depends on `watches`: a slot under
/// `max` and a watch on each.
///
/// # Errors
/// `429` when `user` already holds `max` streams on this replica.
pub(crate) fn admit(
    streams: &OpenStreams,
    watcher: &TokenWatcher,
    user: Uuid,
    watches: Vec<Watch>,
    max: u32,
) -> Result<Admission, ApiError> {
    let slot = streams.acquire(user, max)?;
    let (watches, tokens): (Vec<_>, Vec<_>) =
        watches.into_iter().map(|key| watcher.watch(key)).unzip();
    let (revoked, join) = match <[CancellationToken; 1]>::try_from(tokens) {
        // One watch (the usual case): its token as it is.
        Ok([token]) => (token, None),
        Err(tokens) if tokens.is_empty() => (CancellationToken::new(), None),
        // Several: one token cancelled when any of them is, by a task that
        // ends with the admission.
        Err(tokens) => {
            let any = CancellationToken::new();
            let done = CancellationToken::new();
            let (any2, done2) = (any.clone(), done.clone());
            tokio::spawn(async move {
                let failed =
                    futures::future::select_all(tokens.iter().map(|t| Box::pin(t.cancelled())));
                tokio::select! {
                    _ = failed => any2.cancel(),
                    () = done2.cancelled() => {}
                }
            });
            (any, Some(done.drop_guard()))
        }
    };
    Ok(Admission {
        _slot: slot,
        watches,
        revoked,
        _join: join,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::request_token;
    use axum::http::HeaderMap;

    #[tokio::test]
    async fn a_stream_with_several_watches_is_revoked_by_any() {
        let watcher = TokenWatcher::default();
        let streams = OpenStreams::default();
        let user = Uuid::new_v4();
        let share = Watch::Share {
            chat: Uuid::new_v4(),
            user,
        };
        let watches = vec![Watch::Token(b"t".to_vec()), share.clone()];
        let a = admit(&streams, &watcher, user, watches.clone(), 8).unwrap();
        let b = admit(&streams, &watcher, user, watches, 8).unwrap();
        assert!(!a.revoked().is_cancelled());
        watcher.watched()[&share].revoked.cancel();
        tokio::time::timeout(Duration::from_secs(5), a.revoked().cancelled())
            .await
            .expect("the share's revocation reaches the stream");
        assert!(
            b.revoked().is_cancelled() || {
                tokio::time::timeout(Duration::from_secs(5), b.revoked().cancelled())
                    .await
                    .is_ok()
            }
        );
        drop((a, b));
        assert_eq!(watcher.tokens(), 0, "no watch left behind");
        assert_eq!(streams.count(user), 0);
    }

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
        let (w1, r1) = watcher.watch(Watch::Token(b"h".to_vec()));
        let (w2, r2) = watcher.watch(Watch::Token(b"h".to_vec()));
        let (w3, _) = watcher.watch(Watch::Session(b"h".to_vec()));
        assert_eq!(watcher.tokens(), 2);
        watcher.watched()[&Watch::Token(b"h".to_vec())]
            .revoked
            .cancel();
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
