//! OpenAI's error shape for every `/v1` answer that is not a success:
//! `{"error": {"message", "type", "param", "code"}}` (API.md "Compatible
//! protocols"). The handlers and extractors answer [`crate::ApiError`] as
//! everywhere else; [`openai_errors`] rewrites the body on the way out, so
//! nothing (the authentication extractor, the body limit, the rate limit)
//! answers in the other shape.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::ErrorBody;

/// Largest error body rewritten (ours are a few hundred bytes).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Rewrites a JSON error body of chatd's shape into OpenAI's.
pub async fn openai_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let body = match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(error) => openai_error_body(status, &error),
        Err(_) => openai_error_body(
            status,
            &ErrorBody {
                message: String::from_utf8_lossy(&bytes).trim().to_owned(),
                detail: None,
                validations: Vec::new(),
            },
        ),
    };
    let bytes = serde_json::to_vec(&body).expect("JSON serializes");
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes))
}

/// `{"error": {...}}` for `status` and chatd's `error`: `message` joins the
/// message and its detail; `param` is the first invalid field; `type` and
/// `code` follow OpenAI's spellings for the status.
pub fn openai_error_body(status: StatusCode, error: &ErrorBody) -> Value {
    let mut message = error.message.clone();
    if let Some(detail) = &error.detail {
        message = format!("{message} {detail}");
    } else if let Some(v) = error.validations.first() {
        message = format!("{message} {}: {}", v.field, v.detail);
    }
    let (kind, code) = match status.as_u16() {
        400 | 409 | 413 | 415 | 422 => ("invalid_request_error", None),
        401 => ("authentication_error", Some("invalid_api_key")),
        403 => ("permission_error", None),
        404 => ("invalid_request_error", Some("not_found")),
        429 => ("rate_limit_error", Some("rate_limit_exceeded")),
        _ => ("server_error", None),
    };
    let code = match status.as_u16() {
        // A used-up budget is not a rate limit to retry (OpenAI's own
        // spelling for it, which the SDKs do not retry on).
        429 if error.message.starts_with("Usage budget") => Some("insufficient_quota"),
        409 => Some("conflict"),
        413 => Some("request_too_large"),
        415 => Some("unsupported_media_type"),
        _ => code,
    };
    json!({"error": {
        "message": message,
        "type": kind,
        "param": error.validations.first().map(|v| v.field.clone()),
        "code": code,
    }})
}
