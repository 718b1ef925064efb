//! Retries of runner tasks (`spec/chatd-architecture.md`, "Runner
//! goroutines": "If they encounter an unexpected error, they must retry …
//! governed by bounded exponential backoff"; "Generation goroutine":
//! `RecordRetryState` and `FinishError` at the attempt limit).
//!
//! Two kinds, classified here:
//!
//! - Database work ([`TaskContext::retrying`], [`TaskContext::transition`]):
//!   a stale fence ends the task quietly, a retryable store error is retried
//!   without limit with `WorkerConfig::infra_backoff`, a rejected transition
//!   ends the task with [`Exit::Rejected`].
//! - Provider calls ([`after_failure`], [`attempts_spent`]): a retryable
//!   error within `WorkerConfig::max_generation_retries` backs off for
//!   `WorkerConfig::retry_delay` (DESIGN.md "Provider retries") with a
//!   [`RetryState`] for clients; anything else ends the turn with an error.

use std::future::Future;
use std::time::Duration;

use chatd_core::{ChatError, ChatErrorKind, RetryState};
use chatd_llm::ProviderError;
use chatd_store::{Chat, ChatTx, StoreResult};
use chrono::{DateTime, SubsecRound, Utc};
use futures::future::BoxFuture;

use super::{Exit, TaskContext, TaskResult};
use crate::config::WorkerConfig;
use crate::fence::{FenceError, fenced_update};

impl TaskContext {
    /// Runs `op` until it succeeds, retrying infrastructure errors with
    /// bounded exponential backoff; stale fences and cancellation end the
    /// task. `what` names the operation in logs.
    pub(super) async fn retrying<T, F, Fut>(&self, what: &str, mut op: F) -> TaskResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, FenceError>>,
    {
        let (min, max) = self.ctx.config.infra_backoff;
        let mut delay = min;
        loop {
            if self.cancel.is_cancelled() {
                return Err(Exit::Cancelled);
            }
            // Boxed: a database operation's future (a sqlx transaction is
            // about 10 KiB) is then not part of every task future that
            // awaits one, for as long as that task lives (memory per
            // running chat, issue 15).
            match self.cancellable(Box::pin(op())).await? {
                Ok(value) => return Ok(value),
                Err(FenceError::Stale) => return Err(Exit::Stale),
                Err(err) if err.is_retryable() => {
                    tracing::warn!(chat_id = %self.chat_id, error = %err, "{what} failed; retrying in {delay:?}");
                    self.sleep(delay).await?;
                    delay = (delay * 2).min(max);
                }
                Err(err) => return Err(Exit::Rejected(format!("{what}: {err}"))),
            }
        }
    }

    /// A fenced transition bundle, retried on infrastructure errors; the
    /// committed row goes to the runner.
    pub(super) async fn transition<T, F>(&self, what: &str, f: F) -> TaskResult<T>
    where
        F: for<'a> Fn(&'a mut ChatTx, &'a Chat) -> BoxFuture<'a, StoreResult<T>>,
    {
        let machine = self.machine();
        let (value, chat) = self
            .retrying(what, || fenced_update(&machine, &self.fence, &f))
            .await?;
        self.publish_local(&chat);
        Ok(value)
    }

    /// Waits `duration` unless the task is cancelled first.
    pub(super) async fn sleep(&self, duration: Duration) -> TaskResult<()> {
        self.cancellable(tokio::time::sleep(duration)).await
    }

    /// Runs `work` unless the task is cancelled first.
    pub(super) async fn cancellable<T>(&self, work: impl Future<Output = T>) -> TaskResult<T> {
        tokio::select! {
            _ = self.cancel.cancelled() => Err(Exit::Cancelled),
            value = work => Ok(value),
        }
    }
}

/// What a failed provider call leads to.
#[derive(Debug, PartialEq)]
pub(super) enum AfterFailure {
    /// Record the retry state, wait `delay` and try again.
    Retry {
        /// What clients see meanwhile (`RecordRetryState`).
        state: RetryState,
        /// The backoff, `state.delay_ms` unrounded.
        delay: Duration,
    },
    /// End the turn with this error.
    Fail(ChatError),
}

/// Classifies the failure of attempt `attempt` (1-based) at `now`: retried
/// when the error is retryable and `attempt <= max_generation_retries`,
/// after `retry_delay(attempt)`; `retrying_at` has millisecond precision, as
/// it is stored.
pub(super) fn after_failure(
    err: &ProviderError,
    attempt: i64,
    config: &WorkerConfig,
    now: DateTime<Utc>,
) -> AfterFailure {
    if !err.retryable || attempt > i64::from(config.max_generation_retries) {
        return AfterFailure::Fail(err.to_chat_error());
    }
    let delay = config.retry_delay(attempt);
    let state = RetryState {
        attempt,
        delay_ms: delay.as_millis() as u64,
        error: err.to_chat_error(),
        retrying_at: (now + chrono::Duration::from_std(delay).unwrap_or_default()).trunc_subsecs(3),
    };
    AfterFailure::Retry { state, delay }
}

/// The error ending the turn when attempt `attempt` (1-based, just recorded)
/// is over the budget of `max_generation_retries + 1` attempts: earlier
/// runners retried already.
pub(super) fn attempts_spent(attempt: i64, config: &WorkerConfig) -> Option<ChatError> {
    (attempt > i64::from(config.max_generation_retries) + 1).then(|| {
        ChatError::new(
            ChatErrorKind::Generic,
            "Generation failed too many times.",
            true,
        )
    })
}

#[cfg(test)]
mod tests {
    use chatd_llm::ErrorKind;

    use super::*;

    fn config() -> WorkerConfig {
        WorkerConfig {
            max_generation_retries: 2,
            retry_initial_delay: Duration::from_millis(1500),
            retry_max_delay: Duration::from_secs(60),
            ..WorkerConfig::default()
        }
    }

    #[test]
    fn retryable_errors_back_off_until_the_retry_budget_is_spent() {
        let err = ProviderError::new(ErrorKind::RateLimit, "slow down", "p");
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00.123456Z")
            .unwrap()
            .to_utc();
        let AfterFailure::Retry { state, delay } = after_failure(&err, 2, &config(), now) else {
            panic!("attempt 2 of 2 retries is retried");
        };
        assert_eq!(delay, Duration::from_secs(3));
        assert_eq!(state.attempt, 2);
        assert_eq!(state.delay_ms, 3000);
        assert_eq!(state.error, err.to_chat_error());
        assert_eq!(
            state.retrying_at,
            DateTime::parse_from_rfc3339("2026-01-01T00:00:03.123Z").unwrap()
        );
        assert_eq!(
            after_failure(&err, 3, &config(), now),
            AfterFailure::Fail(err.to_chat_error())
        );
    }

    #[test]
    fn permanent_errors_fail_at_once() {
        let err = ProviderError::new(ErrorKind::Generic, "bad", "p").with_retryable(false);
        assert_eq!(
            after_failure(&err, 1, &config(), Utc::now()),
            AfterFailure::Fail(err.to_chat_error())
        );
    }

    #[test]
    fn the_attempt_budget_is_the_retries_plus_one() {
        assert_eq!(attempts_spent(3, &config()), None);
        let spent = attempts_spent(4, &config()).unwrap();
        assert_eq!(spent.message, "Generation failed too many times.");
        assert!(spent.retryable);
    }
}
