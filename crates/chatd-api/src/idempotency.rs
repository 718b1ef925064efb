//! `Idempotency-Key` on every mutating chat route (API.md "Idempotency";
//! DESIGN.md "Idempotency keys").
//!
//! [`idempotency_layer`] wraps every `POST`, `PATCH`, `PUT` and `DELETE`
//! under `/api/v2/chats` and `/api/experimental/chats` (the two mounts are
//! one route: a key used on one is recognised on the other). Without the
//! header a request runs untouched (one header lookup). With it:
//!
//! 1. The header must be 1..=255 printable ASCII characters, else `400`
//!    naming `Idempotency-Key`. The caller is authenticated here (`401`),
//!    and the handler reuses that [`Caller`].
//! 2. The body is read (within the body limit, `413`; a body whose
//!    `Content-Length` is over the limit goes to the handler untouched, which
//!    answers in API.md's order) and hashed: SHA-256
//!    of its canonical JSON (object keys sorted, no whitespace) when it is
//!    JSON, of its bytes otherwise.
//! 3. The key is claimed in a transaction of its own
//!    ([`chatd_store::idempotency_keys::begin_claim`]) that stays open
//!    while the handler runs. A concurrent duplicate waits on that claim and
//!    then answers the first one's response; if the first failed, the
//!    duplicate runs itself.
//! 4. A `2xx` response is stored (status, `Content-Type`, body) with the
//!    key for [`KEY_TTL`] and the claim committed. Anything else changed
//!    nothing (a refused transition rolls back whole), so the claim is
//!    rolled back and a retry runs again: a `409` or `429` caused by the
//!    chat's state, or a `5xx`, is not frozen for 24 hours.
//!
//! A repeat with the same key, route and body answers the stored status and
//! body with `Idempotent-Replayed: true` and changes nothing, even if the
//! chat has moved on; the same key with another route or body is `409`.
//! Keys are per user: another user's key with the same text is unrelated.
//!
//! The claims use a pool of their own
//! ([`chatd_store::idempotency_keys::claim_pool`]): a claim holds
//! its connection while the handler needs another, and sharing one pool
//! would let enough concurrent keyed requests take every connection and
//! wait for each other.
//!
//! The response and the effect commit in two transactions, the effect
//! first: a process that dies between the two commits leaves the effect
//! without its key, and a retry with that key runs again. Sends have
//! `client_message_id`, stored in the effect's own transaction, for exactly
//! that window.

use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::FromRequestParts;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::read_body;
use chatd_store::idempotency_keys::{self, ClaimStart};

/// The request header.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The response header of a replayed answer (value `true`).
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// How long a stored response answers repeats: 24 hours.
pub const KEY_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Longest key, in bytes (each one printable ASCII).
pub const MAX_KEY_LEN: usize = 255;

/// The middleware (see the module doc). Mounted by [`crate::router`].
pub async fn idempotency_layer(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if !applies(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    let Some(key) = request.headers().get(&IDEMPOTENCY_KEY).cloned() else {
        return next.run(request).await;
    };
    // A body declared over the limit is refused by the handler, after its
    // own earlier checks (API.md: `404` before `413`); nothing to remember.
    if declared_length(&request) > Some(state.options().body_limit_bytes as u64) {
        return next.run(request).await;
    }
    match keyed(&state, key, request, next).await {
        Ok(response) | Err(response) => response,
    }
}

/// The request's `Content-Length`, if it has a valid one.
fn declared_length(request: &Request) -> Option<u64> {
    request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Whether a request is a mutating chat route: the routes that take the
/// header (the OpenAPI document lists it on exactly these).
pub(crate) fn applies(method: &Method, path: &str) -> bool {
    let mutating = matches!(
        *method,
        Method::POST | Method::PATCH | Method::PUT | Method::DELETE
    );
    mutating && chat_route(path).is_some()
}

/// The route a key is bound to: the method and the path under the chats
/// base, so that both mounts are the same route. `None` outside it.
fn chat_route(path: &str) -> Option<&str> {
    ["/api/v2/chats", "/api/experimental/chats"]
        .iter()
        .find_map(|base| {
            let rest = path.strip_prefix(base)?;
            (rest.is_empty() || rest.starts_with('/')).then_some(rest)
        })
}

/// The header's form, as a regular expression (ECMA-262, Python and the
/// `regex` crate read it alike): 1 to [`MAX_KEY_LEN`] printable ASCII
/// characters, neither the first nor the last a space (HTTP strips spaces
/// around a header value, so those never arrive). [`parse_key`] matches with
/// it and the OpenAPI document states it ([`key_schema`]).
pub fn key_pattern() -> String {
    format!(
        r"^[\x21-\x7E](?:[\x20-\x7E]{{0,{}}}[\x21-\x7E])?$",
        MAX_KEY_LEN - 2
    )
}

/// The `Idempotency-Key` header's schema in the OpenAPI document: a string
/// of [`key_pattern`].
pub fn key_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_KEY_LEN))
        .pattern(Some(key_pattern()))
        .build()
}

/// Checks the header's value against [`key_pattern`] (API.md: 1..=255
/// printable ASCII).
///
/// # Errors
/// `400` naming `Idempotency-Key`.
pub fn parse_key(value: &HeaderValue) -> Result<String, ApiError> {
    static KEY: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(&key_pattern()).expect("a valid pattern"));
    match value.to_str() {
        Ok(key) if KEY.is_match(key) => Ok(key.to_owned()),
        _ => Err(ApiError::invalid(
            "Idempotency-Key",
            format!(
                "must be 1 to {MAX_KEY_LEN} printable ASCII characters, not starting or ending with a space"
            ),
        )),
    }
}

/// SHA-256 of a request body: of its canonical JSON when it parses (so
/// that key order and whitespace do not matter), else of its bytes.
pub fn body_hash(body: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(body) {
        // serde_json's map is ordered by key: the serialization is canonical.
        Ok(value) => Sha256::digest(serde_json::to_vec(&value).expect("JSON re-serializes")),
        Err(_) => Sha256::digest(body),
    }
    .to_vec()
}

async fn keyed(
    state: &AppState,
    key: HeaderValue,
    request: Request,
    next: Next,
) -> Result<Response, Response> {
    let key = parse_key(&key).map_err(IntoResponse::into_response)?;
    let (mut parts, body) = request.into_parts();
    let caller = Caller::from_request_parts(&mut parts, state)
        .await
        .map_err(IntoResponse::into_response)?;
    let bytes = read_body(body, state.options().body_limit_bytes)
        .await
        .map_err(IntoResponse::into_response)?;
    let route = format!(
        "{} {}",
        parts.method,
        chat_route(parts.uri.path()).unwrap_or_default()
    );
    let hash = body_hash(&bytes);
    let user = caller.id();
    parts.extensions.insert(caller);

    let internal =
        |err: sqlx::Error| ApiError::from(chatd_store::StoreError::from(err)).into_response();
    let ttl = KEY_TTL.as_secs_f64();
    match idempotency_keys::begin_claim(state.idempotency_pool(), user, &key, &route, &hash, ttl)
        .await
        .map_err(internal)?
    {
        ClaimStart::Existing(stored) => {
            if stored.route != route || stored.request_hash != hash {
                return Err(ApiError::conflict(
                    "Idempotency-Key was already used for a different request.",
                )
                .with_detail(format!(
                    "The key was first used on {}; a repeat must send the same method, path and body.",
                    stored.route
                ))
                .into_response());
            }
            Ok(replay(&stored))
        }
        ClaimStart::Claimed(claim) => {
            let request = Request::from_parts(parts, Body::from(bytes));
            let response = next.run(request).await;
            if !response.status().is_success() {
                // Dropping the claim rolls it back: the key stays free.
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let body = to_bytes(body, usize::MAX)
                .await
                .map_err(|err| ApiError::internal(err).into_response())?;
            let content_type = parts
                .headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok());
            let status = i16::try_from(parts.status.as_u16()).unwrap_or(i16::MAX);
            let stored = claim.complete(status, content_type, &body);
            if let Err(err) = stored.await {
                // The effect is committed; only the record of it is lost,
                // so the answer is still the handler's.
                tracing::warn!(error = %err, %route, "storing an idempotency key failed");
            }
            Ok(Response::from_parts(parts, Body::from(body)))
        }
    }
}

/// The stored answer, marked as replayed.
fn replay(stored: &idempotency_keys::StoredResponse) -> Response {
    let status = u16::try_from(stored.status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut response = (status, stored.response.clone()).into_response();
    let headers = response.headers_mut();
    headers.remove(CONTENT_TYPE);
    if let Some(value) = stored
        .content_type
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        headers.insert(CONTENT_TYPE, value);
    }
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mutating_chat_routes_take_keys() {
        assert!(applies(&Method::POST, "/api/v2/chats"));
        assert!(applies(&Method::POST, "/api/experimental/chats/x/messages"));
        assert!(applies(&Method::DELETE, "/api/v2/chats/x/queue/1"));
        assert!(!applies(&Method::GET, "/api/v2/chats/x/messages"));
        assert!(!applies(&Method::POST, "/api/v2/users"));
        assert!(!applies(&Method::POST, "/api/v2/chatsx"));
        assert_eq!(
            chat_route("/api/experimental/chats/a/b"),
            chat_route("/api/v2/chats/a/b")
        );
    }

    #[test]
    fn keys_are_one_to_255_printable_ascii_characters() {
        let ok = |s: &str| parse_key(&HeaderValue::from_str(s).unwrap()).is_ok();
        assert!(ok("a"));
        assert!(ok(&"k".repeat(255)));
        assert!(ok("retry 1: ~!@#"));
        assert!(ok("ab"));
        assert!(ok(&format!("k{}k", " ".repeat(253))));
        assert!(!ok(""));
        assert!(!ok(" "));
        assert!(!ok(" a"));
        assert!(!ok("a "));
        assert!(!ok(&"k".repeat(256)));
        assert!(!ok("tab\there"));
        let high = HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap();
        assert!(parse_key(&high).is_err());
    }

    #[test]
    fn body_hash_ignores_json_key_order_and_whitespace_only() {
        assert_eq!(
            body_hash(br#"{"a":1,"b":[2]}"#),
            body_hash(b"{ \"b\": [2], \"a\": 1 }")
        );
        assert_ne!(body_hash(br#"{"a":1}"#), body_hash(br#"{"a":2}"#));
        assert_ne!(body_hash(b""), body_hash(b"{}"));
    }
}
