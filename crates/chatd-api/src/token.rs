//! Bearer tokens (API.md "Authentication and authorization"): their form,
//! their stored hash, and where a request carries one. A leaf: it knows no
//! other module of the crate, so the live stream's admission
//! ([`crate::stream::admission`]) and the [`crate::auth`] extractors share it
//! without the stream depending on the handlers' state.
//!
//! - A token is [`TOKEN_PREFIX`] followed by 32 random bytes in unpadded
//!   base64url (256 bits of entropy, [`generate_token`]); only its SHA-256
//!   ([`hash_token`]) is stored (`api_keys.secret_hash`).
//! - A request carries it in `Authorization: Bearer <token>`, or, on a
//!   WebSocket upgrade without that header, as an entry
//!   `chatd.bearer.<token>` of `Sec-WebSocket-Protocol`
//!   ([`WS_BEARER_PROTOCOL_PREFIX`]); the stream route then answers with the
//!   plain [`WS_PROTOCOL`] subprotocol, never echoing the token.
//! - A browser signed in with a password carries a session secret instead,
//!   in the [`SESSION_COOKIE`] cookie ([`session_cookie`]); it has the same
//!   form as a token (random, [`generate_token`]) and is stored hashed the
//!   same way (`user_sessions.secret_hash`). A bearer token, when present,
//!   wins over the cookie.

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, CONNECTION, SEC_WEBSOCKET_PROTOCOL, UPGRADE};
use base64::Engine as _;
use rand::Rng as _;
use sha2::{Digest as _, Sha256};

/// The WebSocket subprotocol a browser client offers (with
/// [`WS_BEARER_PROTOCOL_PREFIX`]`<token>`) and the stream route selects.
pub const WS_PROTOCOL: &str = "chatd";

/// Prefix of the `Sec-WebSocket-Protocol` entry that carries the token of a
/// WebSocket upgrade without an `Authorization` header.
pub const WS_BEARER_PROTOCOL_PREFIX: &str = "chatd.bearer.";

/// Prefix of every generated token.
pub const TOKEN_PREFIX: &str = "chatd_";

/// Name of the session cookie of the password sign-in (API.md "Sign-in,
/// search, sharing and export"): `HttpOnly`, `SameSite=Strict`, `Path=/`.
pub const SESSION_COOKIE: &str = "chatd_session";

/// The header a cookie-authenticated mutation carries the session's CSRF
/// token in (given by `POST /api/v2/sessions` and `GET
/// /api/v2/sessions/current`).
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The value of the [`SESSION_COOKIE`] cookie of a request, if any (the
/// first non-empty one across `Cookie` headers). Cookie values are not
/// decoded: ours are base64url, which needs no quoting.
pub(crate) fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == SESSION_COOKIE && !value.is_empty())
        .map(|(_, value)| value.trim_matches('"'))
}

/// The token of a request: from `Authorization` when the header is present
/// (a malformed one is no token: no fallback), else, on a WebSocket upgrade
/// only, from a `chatd.bearer.<token>` entry of `Sec-WebSocket-Protocol`.
pub(crate) fn request_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers.get(AUTHORIZATION) {
        return value.to_str().ok().and_then(bearer_token);
    }
    if !is_websocket_upgrade(headers) {
        return None;
    }
    headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(subprotocol_token)
}

/// Whether the request asks for a WebSocket upgrade (`Connection: upgrade`
/// and `Upgrade: websocket`, both case-insensitive, in lists).
pub(crate) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    let has = |name, wanted: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|item| item.trim().eq_ignore_ascii_case(wanted))
    };
    has(CONNECTION, "upgrade") && has(UPGRADE, "websocket")
}

/// The token of the first `chatd.bearer.<token>` entry of a
/// `Sec-WebSocket-Protocol` value (a comma-separated list).
fn subprotocol_token(value: &str) -> Option<&str> {
    value
        .split(',')
        .filter_map(|entry| entry.trim().strip_prefix(WS_BEARER_PROTOCOL_PREFIX))
        .find(|token| !token.is_empty())
}

/// The token of an `Authorization: Bearer <token>` header value (scheme
/// case-insensitive).
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A new random token: [`TOKEN_PREFIX`] + 32 random bytes, base64url.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// SHA-256 of a token, as stored in `api_keys.secret_hash`.
pub fn hash_token(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_long() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert_eq!(hash_token(&a).len(), 32);
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    const UPGRADE_HEADERS: [(&str, &str); 2] = [
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "websocket"),
    ];

    #[test]
    fn token_from_authorization_header() {
        let h = headers(&[("authorization", "Bearer abc")]);
        assert_eq!(request_token(&h), Some("abc"));
    }

    #[test]
    fn token_from_websocket_subprotocol_on_upgrades_only() {
        let mut pairs = UPGRADE_HEADERS.to_vec();
        pairs.push(("sec-websocket-protocol", "chatd, chatd.bearer.chatd_x-Y_z"));
        assert_eq!(request_token(&headers(&pairs)), Some("chatd_x-Y_z"));
        // Repeated header lines count as one list.
        let mut pairs = UPGRADE_HEADERS.to_vec();
        pairs.push(("sec-websocket-protocol", "chatd"));
        pairs.push(("sec-websocket-protocol", "chatd.bearer.tok"));
        assert_eq!(request_token(&headers(&pairs)), Some("tok"));
        // Not an upgrade: the subprotocol header is ignored.
        let h = headers(&[("sec-websocket-protocol", "chatd, chatd.bearer.tok")]);
        assert_eq!(request_token(&h), None);
        // No token entry, or an empty one.
        let mut pairs = UPGRADE_HEADERS.to_vec();
        pairs.push(("sec-websocket-protocol", "chatd, chatd.bearer."));
        assert_eq!(request_token(&headers(&pairs)), None);
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "theme=dark; chatd_session=abc; x=y")]);
        assert_eq!(session_cookie(&h), Some("abc"));
        let h = headers(&[("cookie", "a=b"), ("cookie", "chatd_session=\"q\"")]);
        assert_eq!(session_cookie(&h), Some("q"));
        let h = headers(&[("cookie", "chatd_session=; other_chatd_session=z")]);
        assert_eq!(session_cookie(&h), None);
        assert_eq!(session_cookie(&headers(&[])), None);
    }

    #[test]
    fn authorization_header_wins_over_the_subprotocol() {
        let mut pairs = UPGRADE_HEADERS.to_vec();
        pairs.push(("sec-websocket-protocol", "chatd.bearer.sub"));
        pairs.push(("authorization", "Bearer header"));
        assert_eq!(request_token(&headers(&pairs)), Some("header"));
        // A malformed header does not fall back to the subprotocol.
        let mut pairs = UPGRADE_HEADERS.to_vec();
        pairs.push(("sec-websocket-protocol", "chatd.bearer.sub"));
        pairs.push(("authorization", "Basic xyz"));
        assert_eq!(request_token(&headers(&pairs)), None);
    }
}
