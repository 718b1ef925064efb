//! Sign-in with a password, browser sessions and password changes (API.md
//! "Sign-in, search, sharing and export").
//!
//! - `POST /api/v2/sessions {username, password}` ([`sign_in`]) → `201
//!   User` and two things a browser keeps: the session cookie
//!   ([`SESSION_COOKIE`]: `HttpOnly`, `SameSite=Strict`, `Path=/`, and
//!   `Secure` when the request came through an HTTPS proxy, i.e.
//!   `X-Forwarded-Proto: https`), and the session's CSRF token in the
//!   `X-CSRF-Token` response header. A wrong name, a wrong password, a user
//!   without a password and a disabled user all answer the same `401`
//!   ("Wrong user name or password."), in the same time (a missing user's
//!   attempt verifies against a decoy hash). Attempts are rate limited per
//!   user name and client address ([`crate::rate_limit::SignInLimits`]:
//!   `429` with `Retry-After`).
//! - The session then authenticates every route as a token does
//!   ([`crate::auth`]), with a CSRF check on mutations: they carry the
//!   token in `X-CSRF-Token` or get `403`. It ends after 7 days unused or
//!   30 days in all ([`crate::auth::SESSION_IDLE_SECONDS`],
//!   [`crate::auth::SESSION_MAX_SECONDS`]).
//! - `GET /api/v2/sessions/current` ([`current_session`]) → the session's
//!   user, CSRF token and end: what a page loaded later reads to learn it
//!   is signed in. `DELETE /api/v2/sessions/current` ([`sign_out`]) → `204`:
//!   the session's row is deleted (it ends on every replica at once, and
//!   its open streams close within 10 s) and the cookie is cleared. Both
//!   answer `404` to a request authenticated with a bearer token (it has
//!   no session).
//! - `PUT /api/v2/users/{user}/password {password, current_password?}`
//!   ([`set_password`]) → `204`: an admin sets or resets anyone's password;
//!   a member changes their own and must give `current_password` when they
//!   have one (a wrong one is `400` naming it, counted as a sign-in
//!   attempt). Passwords are 10 to 1,024 characters. The change ends every
//!   session of the user but the caller's own. It is a compare-and-set on
//!   the hash the current password was checked against: of two changes
//!   racing with the same current password, one wins and the other is
//!   `409`.

use std::net::{IpAddr, SocketAddr};

use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::AppState;
use crate::auth::{
    self, CSRF_HEADER, Caller, Credential, SESSION_COOKIE, SESSION_IDLE_SECONDS,
    SESSION_MAX_SECONDS, User,
};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E409, E413, E415, E429};
use crate::extract::{self, PathParams};
use chatd_store::{sessions, users};

/// Body of `POST /api/v2/sessions`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignInRequest {
    /// User name.
    #[schema(min_length = 1, max_length = 64)]
    pub username: String,
    /// Password.
    #[schema(min_length = 1, max_length = 1024)]
    pub password: String,
}

/// Body of `PUT /api/v2/users/{user}/password`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPasswordRequest {
    /// The new password: 10 to 1,024 characters.
    #[schema(min_length = 10, max_length = 1024)]
    pub password: String,
    /// The current password: required when a member changes their own
    /// password and has one; ignored for admins.
    #[serde(default)]
    #[schema(max_length = 1024)]
    pub current_password: Option<String>,
}

/// `GET /api/v2/sessions/current`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionInfo {
    /// The signed-in user.
    pub user: User,
    /// The value cookie-authenticated mutations send in `X-CSRF-Token`.
    pub csrf_token: String,
    /// When the session ends unless used again (each request moves it, up
    /// to 30 days after sign-in).
    pub expires_at: DateTime<Utc>,
}

/// The TCP peer's address, when the server put it in the request
/// (`ConnectInfo<SocketAddr>`); `None` in an in-process router.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|info| info.0.ip()),
        ))
    }
}

/// The message of every failed sign-in.
const WRONG: &str = "Wrong user name or password.";

/// `POST /api/v2/sessions`: signs in (see the module doc).
#[utoipa::path(
    post, path = "/api/v2/sessions", tag = "sessions", security(()),
    request_body = SignInRequest,
    responses(
        (status = 201, description = "Signed in. `Set-Cookie: chatd_session=...; HttpOnly; SameSite=Strict; Path=/` and the session's CSRF token in the `X-CSRF-Token` header, which cookie-authenticated mutations must send back.", body = User,
         headers(("X-CSRF-Token" = String, description = "The session's CSRF token"))),
        (status = 401, description = "Wrong user name or password (the same answer for both)", body = crate::error::ErrorBody),
        E400, E413, E415, E429,
    )
)]
pub async fn sign_in(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    headers: HeaderMap,
    body: extract::Json<SignInRequest>,
) -> ApiResult<Response> {
    let req = body.read().await?;
    let name_chars = req.username.chars().count();
    if !(1..=64).contains(&name_chars) {
        return Err(ApiError::invalid("username", "must be 1 to 64 characters"));
    }
    let password_chars = req.password.chars().count();
    if !(1..=auth::MAX_PASSWORD_CHARS).contains(&password_chars) {
        return Err(ApiError::invalid(
            "password",
            "must be 1 to 1024 characters",
        ));
    }
    state.sign_in_limits().check(&req.username, addr)?;
    let pool = state.store().pool();
    let found = users::with_password_by_name(pool, &req.username).await?;
    let (user, hash) = match found {
        Some((user, hash)) => (Some(user), hash),
        None => (None, None),
    };
    let right = auth::verify_password(&req.password, hash).await;
    let user = match user {
        Some(user) if right && !user.disabled => user,
        _ => {
            metrics::counter!("chatd_sign_in_total", "outcome" => "refused").increment(1);
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, WRONG));
        }
    };
    let secret = auth::generate_token();
    let csrf_token = auth::generate_token();
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let agent: String = agent.chars().take(200).collect();
    sessions::insert(
        pool,
        user.id,
        &auth::hash_token(&secret),
        &csrf_token,
        SESSION_IDLE_SECONDS,
        &agent,
    )
    .await?;
    metrics::counter!("chatd_sign_in_total", "outcome" => "signed_in").increment(1);
    let cookie = session_cookie(&secret, SESSION_MAX_SECONDS, secure(&headers));
    let mut response = (
        StatusCode::CREATED,
        Json(User::from_row(user, &state.options().limits)),
    )
        .into_response();
    let h = response.headers_mut();
    h.insert(header::SET_COOKIE, cookie);
    h.insert(CSRF_HEADER, header_value(&csrf_token));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `GET /api/v2/sessions/current`: the caller's session.
#[utoipa::path(
    get, path = "/api/v2/sessions/current", tag = "sessions",
    responses(
        (status = 200, description = "The session of the request's cookie", body = SessionInfo),
        (status = 404, description = "The request is authenticated with a bearer token: it has no session", body = crate::error::ErrorBody),
        E401, E429,
    )
)]
pub async fn current_session(caller: Caller) -> ApiResult<Response> {
    let Credential::Session {
        csrf_token,
        expires_at,
        ..
    } = &caller.credential
    else {
        return Err(no_session());
    };
    let info = SessionInfo {
        csrf_token: csrf_token.clone(),
        expires_at: *expires_at,
        user: caller.user.clone(),
    };
    let mut response = Json(info).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `DELETE /api/v2/sessions/current`: signs out.
#[utoipa::path(
    delete, path = "/api/v2/sessions/current", tag = "sessions",
    params(("X-CSRF-Token" = Option<String>, Header, description = "The session's CSRF token (required with the session cookie; a bearer token has no session: 404)")),
    responses(
        (status = 204, description = "Signed out: the session ended on the server and the cookie is cleared"),
        (status = 404, description = "The request is authenticated with a bearer token: it has no session", body = crate::error::ErrorBody),
        E401, E403, E429,
    )
)]
pub async fn sign_out(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Credential::Session { id, .. } = &caller.credential else {
        return Err(no_session());
    };
    sessions::delete(state.store().pool(), *id).await?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session_cookie("", 0, secure(&headers)));
    Ok(response)
}

/// `PUT /api/v2/users/{user}/password`: sets a password (see the module
/// doc).
#[utoipa::path(
    put, path = "/api/v2/users/{user}/password", tag = "users",
    params(("user" = String, Path, description = "User id or `me`")),
    request_body = SetPasswordRequest,
    responses(
        (status = 204, description = "The password is set; the user's other sessions ended"),
        E400, E401, E403, E404, E409, E413, E415, E429,
    )
)]
pub async fn set_password(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    ClientAddr(addr): ClientAddr,
    body: extract::Json<SetPasswordRequest>,
) -> ApiResult<StatusCode> {
    let user_id = crate::users::target_user(&caller, &params)?;
    let req = body.read().await?;
    auth::validate_password(&req.password).map_err(|e| ApiError::invalid("password", e))?;
    if req
        .current_password
        .as_ref()
        .is_some_and(|p| p.chars().count() > auth::MAX_PASSWORD_CHARS)
    {
        return Err(ApiError::invalid(
            "current_password",
            "must be at most 1024 characters",
        ));
    }
    let pool = state.store().pool();
    let current = users::password_hash(pool, user_id)
        .await?
        .ok_or_else(|| ApiError::not_found("User not found."))?;
    // A member proves the current password, when there is one; the
    // compare-and-set below then holds the change to that hash.
    let expected = if caller.is_admin() {
        None
    } else if let Some(hash) = current {
        let given = req
            .current_password
            .as_deref()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| ApiError::invalid("current_password", "is required"))?;
        state.sign_in_limits().check(&caller.user.username, addr)?;
        if !auth::verify_password(given, Some(hash.clone())).await {
            return Err(ApiError::invalid("current_password", "is wrong"));
        }
        Some(Some(hash))
    } else {
        Some(None)
    };
    let new_hash = auth::hash_password(&req.password)
        .await
        .map_err(|e| ApiError::internal(std::io::Error::other(e)))?;
    let keep = match &caller.credential {
        Credential::Session { id, .. } if user_id == caller.id() => Some(*id),
        _ => None,
    };
    let expected = expected.as_ref().map(|e| e.as_deref());
    match users::set_password(pool, user_id, &new_hash, expected, keep).await? {
        users::PasswordOutcome::Set { .. } => Ok(StatusCode::NO_CONTENT),
        users::PasswordOutcome::NotFound => Err(ApiError::not_found("User not found.")),
        users::PasswordOutcome::Changed => Err(ApiError::conflict(
            "The password changed meanwhile; try again with the new one.",
        )),
    }
}

/// `404` for the session routes called with a bearer token.
fn no_session() -> ApiError {
    ApiError::not_found("No session.")
        .with_detail("This request is authenticated with a bearer token, not a session cookie.")
}

/// Whether the request came through an HTTPS proxy (`X-Forwarded-Proto:
/// https`): the cookie is then `Secure`.
fn secure(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// The `Set-Cookie` value of the session cookie: `value` for
/// `max_age_seconds` (`""` and `0` clear it).
fn session_cookie(value: &str, max_age_seconds: i64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    header_value(&format!(
        "{SESSION_COOKIE}={value}; Max-Age={max_age_seconds}; Path=/; HttpOnly; SameSite=Strict{secure}"
    ))
}

/// A header value of text we made (base64url tokens, fixed words).
fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).expect("visible ASCII")
}
