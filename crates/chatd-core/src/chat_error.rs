//! `ChatError`: the error a failed turn leaves on a chat (API.md "Objects";
//! stored in `chats.last_error`, sent as the stream's `error` event and
//! inside the `retry` payload, [`crate::RetryState`]).
//!
//! The worker builds it from a provider failure or its own limits, the
//! reconcile route for an invalid chat; the store binds it as JSON and the
//! HTTP layer returns it unchanged. Absent optional fields are left out of
//! the JSON, so the stored bytes are `{"message", "kind", "retryable"}` plus
//! whichever of `detail`, `provider` and `status_code` are known.

use serde::{Deserialize, Serialize};

/// `ChatError.kind`: what went wrong, as API.md lists the kinds (the
/// provider kinds of API.md "Error kinds from provider answers", plus
/// `invalid_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChatErrorKind {
    /// Anything else.
    Generic,
    /// The provider rate-limited the request.
    RateLimit,
    /// The request timed out.
    Timeout,
    /// The provider is overloaded.
    Overloaded,
    /// Authentication with the provider failed.
    Auth,
    /// The provider rejected the request.
    InvalidRequest,
    /// The context is too long for the model.
    ContextLength,
    /// A usage quota is exhausted.
    UsageLimit,
    /// The chat was found in an invalid execution state.
    InvalidState,
}

impl ChatErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ChatErrorKind; 9] = [
        ChatErrorKind::Generic,
        ChatErrorKind::RateLimit,
        ChatErrorKind::Timeout,
        ChatErrorKind::Overloaded,
        ChatErrorKind::Auth,
        ChatErrorKind::InvalidRequest,
        ChatErrorKind::ContextLength,
        ChatErrorKind::UsageLimit,
        ChatErrorKind::InvalidState,
    ];

    /// The wire and database spelling (`rate_limit`, `invalid_state`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ChatErrorKind::Generic => "generic",
            ChatErrorKind::RateLimit => "rate_limit",
            ChatErrorKind::Timeout => "timeout",
            ChatErrorKind::Overloaded => "overloaded",
            ChatErrorKind::Auth => "auth",
            ChatErrorKind::InvalidRequest => "invalid_request",
            ChatErrorKind::ContextLength => "context_length",
            ChatErrorKind::UsageLimit => "usage_limit",
            ChatErrorKind::InvalidState => "invalid_state",
        }
    }
}

impl std::fmt::Display for ChatErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `ChatError`: the last error of a chat, as stored in `chats.last_error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChatError {
    /// Human-readable message.
    pub message: String,
    /// More detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Classification.
    pub kind: ChatErrorKind,
    /// The provider that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Whether retrying may help.
    pub retryable: bool,
    /// The provider's HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
}

impl ChatError {
    /// An error of `kind` with `message`, no detail, provider or status.
    pub fn new(kind: ChatErrorKind, message: impl Into<String>, retryable: bool) -> Self {
        ChatError {
            message: message.into(),
            detail: None,
            kind,
            provider: None,
            retryable,
            status_code: None,
        }
    }

    /// Sets `detail`.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_errors_serialize_without_absent_fields() {
        let e = ChatError::new(ChatErrorKind::InvalidState, "m", false);
        assert_eq!(
            serde_json::to_value(e).unwrap(),
            serde_json::json!({"message": "m", "kind": "invalid_state", "retryable": false})
        );
    }

    #[test]
    fn kinds_serialize_as_their_spelling() {
        for kind in ChatErrorKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.as_str()));
        }
        let full = json!({"message": "slow down", "detail": "d", "kind": "rate_limit",
                          "provider": "openai", "retryable": true, "status_code": 429});
        let parsed: ChatError = serde_json::from_value(full.clone()).unwrap();
        assert_eq!(parsed.status_code, Some(429));
        assert_eq!(serde_json::to_value(parsed).unwrap(), full);
    }
}
