//! Per-user request rate limits (API.md "Limits, budgets and the token
//! lifecycle": "Request rate"; DESIGN.md "Decisions for round 3": kept per
//! replica).
//!
//! Every authenticated `/api/v2/**` request counts once, when its caller is
//! first authenticated ([`crate::auth::Caller`]'s extractor, which the
//! idempotency layer also runs first): a stream connect counts, its frames
//! do not, and the parts relay (authenticated with the relay secret, not a
//! user's token) does not. A request past the user's `requests_per_minute`
//! answers `429` with `Retry-After` (whole seconds, at least 1) before its
//! handler runs, so it changes nothing. An unauthenticated request is `401`
//! first: the limit is keyed by the authenticated user.
//!
//! Each user has one GCRA limiter ([`governor`]) with a burst of
//! `requests_per_minute` that refills one request every
//! `60 s / requests_per_minute`: at most `requests_per_minute` requests in
//! any minute. The limit is **per replica**: behind a load balancer spreading
//! a user's requests over `n` replicas, the user may make up to `n ×
//! requests_per_minute`. A user's limiter is replaced by a fresh one (full
//! burst) when their `requests_per_minute` changes (an admin's `PATCH`, or
//! another default at a restart).
//!
//! Memory stays bounded by the users active in the last two minutes: a
//! limiter left alone for a minute has refilled its whole burst, so it is
//! equal to a fresh one and [`RateLimits`] drops it (swept at most once a
//! minute, on a request). Checking costs one map lookup under a mutex held
//! for a few instructions.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::Clock as _;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use uuid::Uuid;

use crate::error::ApiError;
use axum::http::StatusCode;

/// The window of `requests_per_minute`, and how long an untouched limiter
/// takes to refill its whole burst (after which it is dropped).
const WINDOW: Duration = Duration::from_secs(60);

/// The request-rate limiters of this replica, one per active user.
#[derive(Debug)]
pub struct RateLimits {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    users: HashMap<Uuid, Entry>,
    last_sweep: Instant,
}

#[derive(Debug)]
struct Entry {
    /// The `requests_per_minute` the limiter was built for.
    requests_per_minute: u32,
    limiter: DefaultDirectRateLimiter,
    /// Last check (allowed or refused): the limiter is full again one
    /// [`WINDOW`] after its last allowed request, so after this plus a
    /// window too.
    last_seen: Instant,
}

/// A request refused by [`RateLimits::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited {
    /// Whole seconds until the next request is allowed (at least 1): the
    /// `Retry-After` header.
    pub retry_after_seconds: u64,
    /// The limit that was exceeded, requests per minute.
    pub requests_per_minute: u32,
}

impl From<RateLimited> for ApiError {
    /// `429` with `Retry-After` and a `detail` naming the limit.
    fn from(limited: RateLimited) -> Self {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "Rate limit exceeded.")
            .with_detail(format!(
                "At most {} API requests per minute (per replica); retry after {} s.",
                limited.requests_per_minute, limited.retry_after_seconds
            ))
            .with_retry_after(limited.retry_after_seconds)
    }
}

impl Default for RateLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl RateLimits {
    /// No limiter yet.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                users: HashMap::new(),
                last_sweep: Instant::now(),
            }),
        }
    }

    /// Counts one request of user `user`, whose limit is
    /// `requests_per_minute` (values below 1 count as 1).
    ///
    /// # Errors
    /// [`RateLimited`] when the user has made `requests_per_minute`
    /// requests in the last minute on this replica; the request is then not
    /// counted.
    ///
    /// ```
    /// use chatd_api::rate_limit::RateLimits;
    /// let limits = RateLimits::new();
    /// let (alice, bob) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    /// assert!(limits.check(alice, 2).is_ok());
    /// assert!(limits.check(alice, 2).is_ok());
    /// let refused = limits.check(alice, 2).unwrap_err();
    /// // One request refills every 30 s.
    /// assert!((1..=30).contains(&refused.retry_after_seconds));
    /// assert!(limits.check(bob, 2).is_ok(), "another user is unaffected");
    /// ```
    pub fn check(&self, user: Uuid, requests_per_minute: i32) -> Result<(), RateLimited> {
        let rpm = NonZeroU32::new(u32::try_from(requests_per_minute).unwrap_or(0).max(1))
            .expect("at least 1");
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.sweep(now);
        let entry = state
            .users
            .entry(user)
            .or_insert_with(|| Entry::new(rpm, now));
        if entry.requests_per_minute != rpm.get() {
            *entry = Entry::new(rpm, now);
        }
        entry.last_seen = now;
        entry.limiter.check().map_err(|not_until| {
            let wait = not_until.wait_time_from(entry.limiter.clock().now());
            RateLimited {
                retry_after_seconds: whole_seconds(wait),
                requests_per_minute: rpm.get(),
            }
        })
    }

    /// How many users have a limiter (for tests and metrics).
    pub fn tracked_users(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .users
            .len()
    }
}

impl State {
    /// Drops the limiters untouched for a [`WINDOW`] (full again, equal to
    /// fresh ones), at most once per window.
    fn sweep(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_sweep) < WINDOW {
            return;
        }
        self.last_sweep = now;
        self.users
            .retain(|_, entry| now.saturating_duration_since(entry.last_seen) < WINDOW);
    }
}

impl Entry {
    fn new(requests_per_minute: NonZeroU32, now: Instant) -> Self {
        Self {
            requests_per_minute: requests_per_minute.get(),
            limiter: RateLimiter::direct(Quota::per_minute(requests_per_minute)),
            last_seen: now,
        }
    }
}

/// `wait` rounded up to whole seconds, at least 1 (`Retry-After` has no
/// fractions, and `0` would invite an immediate retry that fails again).
fn whole_seconds(wait: Duration) -> u64 {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    seconds.max(1)
}

/// The sign-in attempt limits of this replica (API.md "Sign-in, search,
/// sharing and export": "Rate-limit sign-in attempts"). Every attempt
/// counts, right or wrong, before its password is checked (so a refused
/// attempt costs no hashing):
/// - per user name and client address: a burst of
///   [`SIGN_IN_BURST_PER_ACCOUNT`], then one every 30 s;
/// - per client address, whatever the name: a burst of
///   [`SIGN_IN_BURST_PER_ADDRESS`], then one every 2 s (password spraying
///   across names).
///
/// The client address is the TCP peer's (`chatd serve` puts it in the
/// request's `ConnectInfo`); `X-Forwarded-For` is not trusted. Without one
/// (an in-process router in tests) every attempt shares one address.
/// Limiters untouched long enough to be full again are dropped from time
/// to time, so memory follows the recent attempts.
#[derive(Debug)]
pub struct SignInLimits {
    per_account: governor::DefaultKeyedRateLimiter<(String, Option<std::net::IpAddr>)>,
    per_address: governor::DefaultKeyedRateLimiter<Option<std::net::IpAddr>>,
    last_sweep: Mutex<Instant>,
}

/// Sign-in attempts one user name may make from one address at once.
pub const SIGN_IN_BURST_PER_ACCOUNT: u32 = 10;

/// Sign-in attempts one address may make at once, whatever the names.
pub const SIGN_IN_BURST_PER_ADDRESS: u32 = 60;

impl Default for SignInLimits {
    fn default() -> Self {
        let burst = |n: u32| NonZeroU32::new(n).expect("positive");
        Self {
            per_account: RateLimiter::keyed(
                Quota::with_period(Duration::from_secs(30))
                    .expect("positive")
                    .allow_burst(burst(SIGN_IN_BURST_PER_ACCOUNT)),
            ),
            per_address: RateLimiter::keyed(
                Quota::with_period(Duration::from_secs(2))
                    .expect("positive")
                    .allow_burst(burst(SIGN_IN_BURST_PER_ADDRESS)),
            ),
            last_sweep: Mutex::new(Instant::now()),
        }
    }
}

impl SignInLimits {
    /// Counts one sign-in attempt for `username` (case-insensitive) from
    /// `address`.
    ///
    /// # Errors
    /// `429` with `Retry-After` when either limit is reached; the attempt
    /// is then not checked.
    pub fn check(&self, username: &str, address: Option<std::net::IpAddr>) -> Result<(), ApiError> {
        self.sweep();
        let refused = |wait: Duration| {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "Too many sign-in attempts.")
                .with_detail(format!(
                    "Wait {} s before trying again.",
                    whole_seconds(wait)
                ))
                .with_retry_after(whole_seconds(wait))
        };
        if let Err(not_until) = self.per_address.check_key(&address) {
            return Err(refused(
                not_until.wait_time_from(self.per_address.clock().now()),
            ));
        }
        let key = (username.to_lowercase(), address);
        if let Err(not_until) = self.per_account.check_key(&key) {
            return Err(refused(
                not_until.wait_time_from(self.per_account.clock().now()),
            ));
        }
        Ok(())
    }

    /// Drops the full limiters, at most once a minute.
    fn sweep(&self) {
        let mut last = self.last_sweep.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= WINDOW {
            *last = Instant::now();
            self.per_account.retain_recent();
            self.per_address.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_in_attempts_are_limited_per_account_and_address() {
        let limits = SignInLimits::default();
        let ip: Option<std::net::IpAddr> = Some("10.0.0.1".parse().unwrap());
        for _ in 0..SIGN_IN_BURST_PER_ACCOUNT {
            limits.check("Alice", ip).expect("within the burst");
        }
        let refused = limits.check("alice", ip).expect_err("same name, any case");
        assert_eq!(refused.status(), 429);
        assert!(refused.retry_after().is_some_and(|s| (1..=30).contains(&s)));
        limits.check("bob", ip).expect("another name");
        limits
            .check("alice", Some("10.0.0.2".parse().unwrap()))
            .expect("another address");
        for _ in 0..SIGN_IN_BURST_PER_ADDRESS {
            let _ = limits.check("spray", Some("10.0.0.3".parse().unwrap()));
        }
        let name = "fresh-name";
        assert_eq!(
            limits
                .check(name, Some("10.0.0.3".parse().unwrap()))
                .unwrap_err()
                .status(),
            429,
            "the address is spent, whatever the name"
        );
    }

    #[test]
    fn the_burst_is_the_per_minute_limit_then_refused_with_retry_after() {
        let limits = RateLimits::new();
        let user = Uuid::new_v4();
        for _ in 0..5 {
            assert!(limits.check(user, 5).is_ok());
        }
        let refused = limits.check(user, 5).unwrap_err();
        assert_eq!(refused.requests_per_minute, 5);
        // One request refills every 12 s.
        assert!(
            (1..=12).contains(&refused.retry_after_seconds),
            "{refused:?}"
        );
        let err = ApiError::from(refused);
        assert_eq!(err.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(err.retry_after(), Some(refused.retry_after_seconds));
    }

    #[test]
    fn a_changed_limit_replaces_the_limiter() {
        let limits = RateLimits::new();
        let user = Uuid::new_v4();
        assert!(limits.check(user, 1).is_ok());
        assert!(limits.check(user, 1).is_err());
        // An admin raised the limit: a fresh burst of the new size.
        assert!(limits.check(user, 3).is_ok());
        assert!(limits.check(user, 3).is_ok());
        assert!(limits.check(user, 3).is_ok());
        assert!(limits.check(user, 3).is_err());
        // Nonsense limits count as 1.
        let other = Uuid::new_v4();
        assert!(limits.check(other, 0).is_ok());
        assert!(limits.check(other, 0).is_err());
    }

    #[test]
    fn idle_limiters_are_swept_once_a_window() {
        let limits = RateLimits::new();
        let (idle, active) = (Uuid::new_v4(), Uuid::new_v4());
        limits.check(idle, 10).unwrap();
        limits.check(active, 10).unwrap();
        assert_eq!(limits.tracked_users(), 2);
        let mut state = limits.state.lock().unwrap();
        let start = state.last_sweep;
        // Not yet a window since the last sweep: nothing is dropped.
        state.sweep(start + WINDOW / 2);
        assert_eq!(state.users.len(), 2);
        state.users.get_mut(&active).unwrap().last_seen = start + WINDOW / 2;
        state.sweep(start + WINDOW + Duration::from_secs(1));
        assert_eq!(state.users.keys().collect::<Vec<_>>(), [&active]);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_at_least_one() {
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1001)), 2);
        assert_eq!(whole_seconds(Duration::from_secs(12)), 12);
    }
}
