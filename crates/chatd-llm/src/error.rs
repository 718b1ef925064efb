//! Provider failures, classified into API.md's `ChatError` kinds.
//!
//! Classification follows API.md "Workers and replicas" ("Error kinds from
//! provider answers" and "Retries"): 400 → `invalid_request` (`context_length`
//! when the provider says the context is too long), 401/403 → `auth`,
//! 408 → `timeout`, 429 → `rate_limit` (OpenAI's `insufficient_quota` →
//! `usage_limit`, not retried), 529 and `overloaded_error` → `overloaded`,
//! 500/502/503/504 and connection failures → `generic`; an account out of
//! credit (OpenAI `insufficient_quota`, Anthropic `billing_error` or "credit
//! balance is too low", HTTP 402) → `usage_limit`; retried are 408, 429,
//! 500, 502, 503, 504, 529, connection failures and timeouts. The same rules
//! classify error objects that arrive inside a stream, so every adapter
//! (OpenAI, Anthropic) shares [`ProviderError::from_http_status`] and
//! [`ProviderError::from_error_body`].

use chatd_core::ChatError;
use serde_json::Value;

/// Longest `detail` kept from a provider's error body, in bytes.
pub const MAX_DETAIL_BYTES: usize = 4096;

/// The `kind` of API.md's `ChatError` that a provider failure maps to: the
/// one definition, [`chatd_core::ChatErrorKind`] (a provider failure is
/// never `invalid_state`, which the chat's own checks report).
pub use chatd_core::ChatErrorKind as ErrorKind;

/// A classified provider failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{provider}: {kind}: {message}")]
pub struct ProviderError {
    /// The `ChatError` kind.
    pub kind: ErrorKind,
    /// A human-readable message (the provider's own message when it sent one).
    pub message: String,
    /// More detail for debugging (the provider's error body, at most
    /// [`MAX_DETAIL_BYTES`] bytes).
    pub detail: Option<String>,
    /// Whether the worker should try again (API.md "Retries").
    pub retryable: bool,
    /// The HTTP status the provider answered with, if it answered.
    pub status_code: Option<u16>,
    /// The provider's name ([`crate::Provider::name`]).
    pub provider: String,
}

impl ProviderError {
    /// An error of `kind` with the retry policy API.md gives that kind when
    /// no status code says otherwise: `rate_limit`, `timeout`, `overloaded`
    /// and `generic` are retried; the others are not.
    pub fn new(kind: ErrorKind, message: impl Into<String>, provider: impl Into<String>) -> Self {
        let retryable = matches!(
            kind,
            ErrorKind::RateLimit | ErrorKind::Timeout | ErrorKind::Overloaded | ErrorKind::Generic
        );
        let mut message = message.into();
        chatd_core::sanitize::string(&mut message);
        ProviderError {
            kind,
            message,
            detail: None,
            retryable,
            status_code: None,
            provider: provider.into(),
        }
    }

    /// Sets `detail`, truncated to [`MAX_DETAIL_BYTES`] at a character
    /// boundary; an empty detail is dropped.
    ///
    /// The message and the detail quote what the provider sent, and end up
    /// stored in the chat's `last_error`: both are sanitised
    /// ([`chatd_core::sanitize`]) here, where they are made.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        let mut detail = truncate(detail.into(), MAX_DETAIL_BYTES);
        chatd_core::sanitize::string(&mut detail);
        self.detail = (!detail.is_empty()).then_some(detail);
        self
    }

    /// Overrides `retryable`.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Classifies a non-2xx HTTP answer from its status and body (JSON or
    /// not) per API.md "Error kinds from provider answers". The message is the
    /// body's error message when it has one, else the status line; `detail`
    /// is the body.
    pub fn from_http_status(status: u16, body: &str, provider: impl Into<String>) -> Self {
        let provider = provider.into();
        let info = ErrorInfo::parse(body);
        let (kind, retryable) = classify_status(status, &info);
        let message = info
            .message
            .clone()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| status_line(status));
        ProviderError {
            kind,
            message: chatd_core::sanitize::text(&message).into_owned(),
            detail: None,
            retryable,
            status_code: Some(status),
            provider,
        }
        .with_detail(body.trim())
    }

    /// Classifies an error object that arrived inside a stream (an OpenAI
    /// `data: {"error": {...}}` line, an Anthropic `event: error`), where no
    /// HTTP status applies. `body` is the whole JSON payload. A numeric
    /// `error.code` (OpenRouter puts the upstream status there) is classified
    /// as that status; otherwise the `type`/`code` strings decide, and an
    /// unrecognised error is a retryable `generic` one (the server broke the
    /// stream).
    pub fn from_error_body(body: &Value, provider: impl Into<String>) -> Self {
        let provider = provider.into();
        let info = ErrorInfo::from_value(body);
        let (kind, retryable) = match info.numeric_code {
            Some(status) => classify_status(status, &info),
            None => classify_codes(&info).unwrap_or((ErrorKind::Generic, true)),
        };
        let message = info
            .message
            .clone()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| "the provider reported an error inside the stream".to_owned());
        ProviderError {
            kind,
            message: chatd_core::sanitize::text(&message).into_owned(),
            detail: None,
            retryable,
            status_code: info.numeric_code,
            provider,
        }
        .with_detail(body.to_string())
    }

    /// API.md's `ChatError` for this error (stored as `chats.last_error`
    /// and in the retry state): `{message, detail?, kind, provider,
    /// retryable, status_code?}`.
    pub fn to_chat_error(&self) -> ChatError {
        ChatError {
            message: self.message.clone(),
            detail: self.detail.clone(),
            kind: self.kind,
            provider: Some(self.provider.clone()),
            retryable: self.retryable,
            status_code: self.status_code,
        }
    }
}

/// Kind and retryability of an HTTP status, refined by the body.
fn classify_status(status: u16, info: &ErrorInfo) -> (ErrorKind, bool) {
    if status >= 500 && info.mentions(&["overloaded"]) {
        return (ErrorKind::Overloaded, true);
    }
    match status {
        401 | 403 => (ErrorKind::Auth, false),
        402 => (ErrorKind::UsageLimit, false),
        408 => (ErrorKind::Timeout, true),
        429 if info.mentions(&["insufficient_quota"]) => (ErrorKind::UsageLimit, false),
        400..=499 if info.says_out_of_credit() => (ErrorKind::UsageLimit, false),
        429 => (ErrorKind::RateLimit, true),
        529 => (ErrorKind::Overloaded, true),
        400..=499 if info.says_context_too_long() => (ErrorKind::ContextLength, false),
        400..=499 => (ErrorKind::InvalidRequest, false),
        500 | 502 | 503 | 504 => (ErrorKind::Generic, true),
        _ => (ErrorKind::Generic, false),
    }
}

/// Kind and retryability from an error's `type`/`code` strings alone.
fn classify_codes(info: &ErrorInfo) -> Option<(ErrorKind, bool)> {
    if info.says_context_too_long() {
        Some((ErrorKind::ContextLength, false))
    } else if info.mentions(&["insufficient_quota"]) || info.says_out_of_credit() {
        Some((ErrorKind::UsageLimit, false))
    } else if info.mentions(&["rate_limit"]) {
        Some((ErrorKind::RateLimit, true))
    } else if info.mentions(&["overloaded"]) {
        Some((ErrorKind::Overloaded, true))
    } else if info.mentions(&["authentication", "permission", "invalid_api_key"]) {
        Some((ErrorKind::Auth, false))
    } else if info.mentions(&["timeout"]) {
        Some((ErrorKind::Timeout, true))
    } else if info.mentions(&["invalid_request"]) {
        Some((ErrorKind::InvalidRequest, false))
    } else {
        None
    }
}

/// What a provider's error body says, whatever its shape:
/// OpenAI `{"error": {"message", "type", "code", "param"}}`, Anthropic
/// `{"type": "error", "error": {"type", "message"}}`, `{"error": "text"}`,
/// `{"message": ...}`, or plain text.
#[derive(Debug, Default)]
struct ErrorInfo {
    message: Option<String>,
    /// `error.type` and string `error.code`, lowercased.
    codes: Vec<String>,
    /// A numeric `error.code` that looks like an HTTP status.
    numeric_code: Option<u16>,
}

impl ErrorInfo {
    fn parse(body: &str) -> Self {
        match serde_json::from_str::<Value>(body) {
            Ok(value) if value.is_object() => Self::from_value(&value),
            _ => ErrorInfo {
                message: Some(body.trim().to_owned()).filter(|m| !m.is_empty()),
                ..ErrorInfo::default()
            },
        }
    }

    fn from_value(value: &Value) -> Self {
        let mut info = ErrorInfo::default();
        let error = value.get("error").unwrap_or(value);
        match error {
            Value::String(text) => info.message = Some(text.clone()),
            Value::Object(obj) => {
                info.message = obj
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                for key in ["type", "code"] {
                    match obj.get(key) {
                        Some(Value::String(s)) => info.codes.push(s.to_lowercase()),
                        Some(Value::Number(n)) => {
                            info.numeric_code = n
                                .as_u64()
                                .and_then(|n| u16::try_from(n).ok())
                                .filter(|n| (100..600).contains(n));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        if info.message.is_none() {
            info.message = value
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        info
    }

    fn mentions(&self, needles: &[&str]) -> bool {
        self.codes
            .iter()
            .any(|code| needles.iter().any(|n| code.contains(n)))
    }

    /// Whether the provider says the account is out of credit (Anthropic's
    /// `billing_error`, or a 400 saying the credit balance is too low).
    fn says_out_of_credit(&self) -> bool {
        let message = self.message.as_deref().unwrap_or_default().to_lowercase();
        self.mentions(&["billing_error"]) || message.contains("credit balance is too low")
    }

    /// Whether the provider says the prompt is too long: OpenAI's
    /// `context_length_exceeded`, llama.cpp's `exceed_context_size_error`, or
    /// the usual phrasings in the message (Anthropic "prompt is too long").
    fn says_context_too_long(&self) -> bool {
        const CODES: &[&str] = &[
            "context_length_exceeded",
            "exceed_context_size",
            "context_window_exceeded",
        ];
        const PHRASES: &[&str] = &[
            "maximum context length",
            "context length",
            "context window",
            "context size",
            "prompt is too long",
            "too many tokens",
        ];
        let message = self.message.as_deref().unwrap_or_default().to_lowercase();
        self.mentions(CODES) || PHRASES.iter().any(|p| message.contains(p))
    }
}

fn status_line(status: u16) -> String {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    format!("HTTP {status} {reason}").trim_end().to_owned()
}

/// `text` cut to at most `max` bytes at a character boundary.
pub(crate) fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_error_json_has_the_api_shape() {
        let err = ProviderError::from_http_status(
            429,
            r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
            "openai",
        );
        assert_eq!(
            serde_json::to_value(err.to_chat_error()).unwrap(),
            json!({
                "message": "slow down",
                "detail": r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
                "kind": "rate_limit",
                "provider": "openai",
                "retryable": true,
                "status_code": 429,
            })
        );
        let bare = ProviderError::new(ErrorKind::Timeout, "idle", "p");
        assert_eq!(
            serde_json::to_value(bare.to_chat_error()).unwrap(),
            json!({"message": "idle", "kind": "timeout", "provider": "p", "retryable": true})
        );
    }

    #[test]
    fn non_json_bodies_become_the_message_and_empty_bodies_the_status_line() {
        let err = ProviderError::from_http_status(502, "Bad gateway from nginx", "p");
        assert_eq!(err.message, "Bad gateway from nginx");
        assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));
        let err = ProviderError::from_http_status(503, "", "p");
        assert_eq!(err.message, "HTTP 503 Service Unavailable");
        assert_eq!(err.detail, None);
    }

    #[test]
    fn detail_is_truncated_at_a_char_boundary() {
        let body = "é".repeat(MAX_DETAIL_BYTES);
        let err = ProviderError::from_http_status(500, &body, "p");
        let detail = err.detail.unwrap();
        assert!(detail.len() <= MAX_DETAIL_BYTES);
        assert!(detail.chars().all(|c| c == 'é'));
    }

    #[test]
    fn anthropic_http_answers_classify_per_the_api() {
        let anthropic = |kind: &str, message: &str| {
            json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
        };
        let cases = [
            (
                400,
                anthropic("invalid_request_error", "messages: roles must alternate"),
                ErrorKind::InvalidRequest,
                false,
            ),
            (
                400,
                anthropic(
                    "invalid_request_error",
                    "prompt is too long: 201000 tokens > 200000 maximum",
                ),
                ErrorKind::ContextLength,
                false,
            ),
            (
                400,
                anthropic(
                    "invalid_request_error",
                    "Your credit balance is too low to access the Anthropic API.",
                ),
                ErrorKind::UsageLimit,
                false,
            ),
            (
                401,
                anthropic("authentication_error", "invalid x-api-key"),
                ErrorKind::Auth,
                false,
            ),
            (
                403,
                anthropic("permission_error", "no"),
                ErrorKind::Auth,
                false,
            ),
            (
                404,
                anthropic("not_found_error", "model: nope"),
                ErrorKind::InvalidRequest,
                false,
            ),
            (
                413,
                anthropic("request_too_large", "too big"),
                ErrorKind::InvalidRequest,
                false,
            ),
            (
                429,
                anthropic("rate_limit_error", "slow down"),
                ErrorKind::RateLimit,
                true,
            ),
            (
                500,
                anthropic("api_error", "oops"),
                ErrorKind::Generic,
                true,
            ),
            (
                503,
                anthropic("overloaded_error", "Overloaded"),
                ErrorKind::Overloaded,
                true,
            ),
            (
                529,
                anthropic("overloaded_error", "Overloaded"),
                ErrorKind::Overloaded,
                true,
            ),
        ];
        for (status, body, kind, retryable) in cases {
            let err = ProviderError::from_http_status(status, &body, "anthropic");
            assert_eq!(
                (err.kind, err.retryable),
                (kind, retryable),
                "{status} {body}"
            );
        }
    }

    #[test]
    fn in_stream_errors_classify_by_type_code_or_numeric_status() {
        let cases = [
            (
                json!({"error": {"type": "server_error", "message": "x"}}),
                ErrorKind::Generic,
                true,
            ),
            (
                json!({"error": {"type": "overloaded_error", "message": "Overloaded"}}),
                ErrorKind::Overloaded,
                true,
            ),
            (
                json!({"error": {"code": "context_length_exceeded", "message": "x"}}),
                ErrorKind::ContextLength,
                false,
            ),
            (
                json!({"error": {"code": "insufficient_quota", "message": "x"}}),
                ErrorKind::UsageLimit,
                false,
            ),
            (
                json!({"error": {"code": 429, "message": "Provider returned error"}}),
                ErrorKind::RateLimit,
                true,
            ),
            (
                json!({"error": {"code": 401, "message": "no"}}),
                ErrorKind::Auth,
                false,
            ),
            (json!({"error": "plain"}), ErrorKind::Generic, true),
            (
                json!({"type": "error", "error": {"details": null, "type": "overloaded_error", "message": "Overloaded"}, "request_id": "req_1"}),
                ErrorKind::Overloaded,
                true,
            ),
            (
                json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}),
                ErrorKind::Generic,
                true,
            ),
            (
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}),
                ErrorKind::ContextLength,
                false,
            ),
            (
                json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
                ErrorKind::Auth,
                false,
            ),
            (
                json!({"type": "error", "error": {"type": "billing_error", "message": "no"}}),
                ErrorKind::UsageLimit,
                false,
            ),
        ];
        for (body, kind, retryable) in cases {
            let err = ProviderError::from_error_body(&body, "p");
            assert_eq!((err.kind, err.retryable), (kind, retryable), "{body}");
        }
    }
}
