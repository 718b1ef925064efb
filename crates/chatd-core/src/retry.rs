//! The retry state a worker records while it backs off before retrying a
//! failed generation attempt (`RecordRetryState`; stored in
//! `chats.retry_state`, sent as the stream's `retry` event, API.md
//! "Stream": `retry: {attempt, delay_ms, error: ChatError, retrying_at}`).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};

use crate::ChatError;

/// `{attempt, delay_ms, error, retrying_at}`: the worker retries attempt
/// `attempt` (1-based) after `delay_ms` milliseconds, at `retrying_at`,
/// because of `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = RetryPayload))]
pub struct RetryState {
    /// Retry number n (1-based).
    pub attempt: i64,
    /// Delay before the retry, in milliseconds.
    pub delay_ms: u64,
    /// The error that caused the retry.
    pub error: ChatError,
    /// When the retry starts. Stored (and sent) with millisecond precision:
    /// a value with a finer one reads back truncated.
    #[serde(serialize_with = "rfc3339_millis")]
    pub retrying_at: DateTime<Utc>,
}

/// RFC 3339 in UTC with milliseconds and a `Z`
/// (`2026-01-01T00:00:00.000Z`), the spelling `retrying_at` is stored in.
fn rfc3339_millis<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChatErrorKind;
    use serde_json::json;

    #[test]
    fn retry_states_keep_their_stored_spelling() {
        let stored = json!({
            "attempt": 2,
            "delay_ms": 800,
            "error": {"message": "slow down", "kind": "rate_limit", "provider": "p", "retryable": true, "status_code": 429},
            "retrying_at": "2026-01-01T00:00:01.250Z",
        });
        let state: RetryState = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(state.attempt, 2);
        assert_eq!(state.error.kind, ChatErrorKind::RateLimit);
        assert_eq!(serde_json::to_value(&state).unwrap(), stored);
    }
}
