//! Authentication and users (API.md "Authentication and authorization").
//!
//! - Tokens are `chatd_` followed by 32 random bytes in unpadded base64url
//!   (256 bits of entropy). Only their SHA-256 is stored
//!   (`api_keys.secret_hash`); the clear token is shown exactly once. Their
//!   form, hash and place in a request are the leaf [`crate::token`]'s,
//!   re-exported here.
//! - [`Caller`] is the authenticated user of a request: a missing, unknown,
//!   expired or revoked token, or any token of a disabled user, is `401`
//!   (API.md "Limits, budgets and the token lifecycle"). Authenticating
//!   also counts the request against the user's request rate
//!   ([`crate::rate_limit`]: `429` past it, after the `401` checks) and
//!   refreshes the token's `last_used_at` (at most once a minute). Both
//!   happen once per request: the [`Caller`] is cached in the request's
//!   extensions and every later extraction reuses it. The token comes from `Authorization: Bearer
//!   <token>`. Browsers cannot set that header on a WebSocket, so a
//!   WebSocket upgrade request without an `Authorization` header may carry
//!   it instead as an entry `chatd.bearer.<token>` of its
//!   `Sec-WebSocket-Protocol` list ([`WS_BEARER_PROTOCOL_PREFIX`]); the
//!   stream route then answers with the plain [`WS_PROTOCOL`] subprotocol,
//!   never echoing the token. Tokens are never logged.
//! - A browser signed in with a password (API.md "Sign-in, search, sharing
//!   and export", [`crate::sessions`]) authenticates with the session
//!   cookie instead ([`crate::token::SESSION_COOKIE`]) when the request
//!   carries no token. A cookie-authenticated request that may change
//!   anything (any method but `GET`, `HEAD` and `OPTIONS`) must also carry
//!   the session's CSRF token in `X-CSRF-Token` (`403` otherwise), and a
//!   cookie-authenticated WebSocket upgrade must come from the server's own
//!   origin (`Origin` naming another host: `403`). The cookie is
//!   `SameSite=Strict` too: either check alone stops a cross-site request.
//! - Roles are `admin` and `member`. A member sees only their own chats
//!   and the chats shared with them ([`readable_chat`]: any other is `404`,
//!   as if it did not exist); a user a chat is shared with reads it and
//!   mutates nothing (`403`, [`visible_chat`] and [`ChatTarget`] for every
//!   method but `GET`/`HEAD`); some chat mutations are the owner's only,
//!   even for admins ([`require_owner`]); admin-only routes call
//!   [`Caller::require_admin`].
//! - Passwords are hashed with argon2id ([`hash_password`], the `argon2`
//!   crate's default parameters: 19 MiB, 2 passes, 1 lane) on the blocking
//!   pool, never on the async workers.
//! - [`bootstrap_admin`] and [`create_token`] serve the binary
//!   (`CHATD_BOOTSTRAP_ADMIN_TOKEN`, `chatd token create`). Both are
//!   idempotent and safe when several replicas run them at once: every write
//!   is a single `INSERT ... ON CONFLICT` statement
//!   ([`chatd_store::users`], [`chatd_store::tokens`]).
//!   The bootstrap token never expires; a member's token always does,
//!   whoever creates it ([`token_lifetime`]).

use anyhow::Context as _;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use chatd_store::users::UserRow;
use chatd_store::{tokens, users};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

pub use chatd_core::Role;
use chatd_core::limits::{LimitDefaults, UserLimits};

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::PathParams;
pub use crate::token::{
    CSRF_HEADER, SESSION_COOKIE, TOKEN_PREFIX, WS_BEARER_PROTOCOL_PREFIX, WS_PROTOCOL,
    generate_token, hash_token,
};
use crate::token::{request_token, session_cookie};
use chatd_store::LockMode;
use chatd_store::{chats, sessions, shares};

/// Longest accepted token lifetime: ten years, in seconds.
pub const MAX_TOKEN_LIFETIME_SECONDS: i64 = 10 * 366 * 24 * 3600;

/// `User` (API.md "Authentication and authorization", "Limits, budgets
/// and the token lifecycle").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct User {
    /// User id.
    pub id: Uuid,
    /// Unique user name.
    pub username: String,
    /// Role.
    pub role: Role,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// A disabled user's tokens answer `401`.
    pub disabled: bool,
    /// The effective limits: the user's overrides over the server defaults.
    pub limits: UserLimits,
}

impl User {
    /// The `User` of `row`, its limits resolved over `defaults`
    /// ([`crate::ApiOptions::limits`]).
    pub fn from_row(row: UserRow, defaults: &LimitDefaults) -> Self {
        let limits = defaults.resolve(&row.overrides());
        User {
            id: row.id,
            username: row.username,
            role: row.role,
            created_at: row.created_at,
            disabled: row.disabled,
            limits,
        }
    }
}

/// The authenticated user of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user.
    pub user: User,
    /// What the request authenticated with.
    pub credential: Credential,
}

/// What a request authenticated with.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// A bearer token (`Authorization`, or the WebSocket subprotocol).
    Token {
        /// Its SHA-256 (`api_keys.secret_hash`).
        hash: Vec<u8>,
    },
    /// The session cookie of a password sign-in.
    Session {
        /// The session's id (`user_sessions.id`).
        id: Uuid,
        /// The SHA-256 of its secret (`user_sessions.secret_hash`).
        hash: Vec<u8>,
        /// Its CSRF token.
        csrf_token: String,
        /// When it ends unless used again.
        expires_at: DateTime<Utc>,
    },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the hashes or the CSRF token.
        match self {
            Credential::Token { .. } => f.write_str("Token"),
            Credential::Session { id, .. } => write!(f, "Session({id})"),
        }
    }
}

impl Caller {
    /// The caller's user id.
    pub fn id(&self) -> Uuid {
        self.user.id
    }

    /// Whether the caller is an admin.
    pub fn is_admin(&self) -> bool {
        self.user.role == Role::Admin
    }

    /// `Ok` for admins.
    ///
    /// # Errors
    /// `403` for members.
    pub fn require_admin(&self) -> ApiResult<()> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::admin_only())
        }
    }
}

/// How a caller may reach a chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatAccess {
    /// The caller owns it.
    Owner,
    /// The caller is an admin and does not own it.
    Admin,
    /// The chat (or its root) is shared with the caller: read only.
    Shared,
}

/// Loads chat `id` if `caller` may read it: they own it, are an admin, or
/// it (or its root) is shared with them (`chat_shares`); with how.
///
/// # Errors
/// `404` when the chat does not exist or the caller may not read it.
pub async fn readable_chat(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
) -> ApiResult<(chatd_store::Chat, ChatAccess)> {
    let pool = state.store().pool();
    match chats::select(pool, id, LockMode::None).await? {
        Some(chat) if chat.owner_id == caller.id() => Ok((chat, ChatAccess::Owner)),
        Some(chat) if caller.is_admin() => Ok((chat, ChatAccess::Admin)),
        Some(chat) if shares::can_read(pool, id, caller.id()).await? => {
            Ok((chat, ChatAccess::Shared))
        }
        _ => Err(ApiError::chat_not_found()),
    }
}

/// Loads chat `id` if `caller` may change it (owner or admin; the
/// owner-only mutations check [`require_owner`] too).
///
/// # Errors
/// `404` when the chat does not exist or the caller may not read it;
/// `403` when it is shared with the caller (read only).
pub async fn visible_chat(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
) -> ApiResult<chatd_store::Chat> {
    match readable_chat(state, caller, id).await? {
        (_, ChatAccess::Shared) => Err(ApiError::shared_read_only()),
        (chat, _) => Ok(chat),
    }
}

/// `403` unless `caller` owns `chat` (owner-only mutations, even for admins).
pub fn require_owner(caller: &Caller, chat: &chatd_store::Chat) -> ApiResult<()> {
    if chat.owner_id == caller.id() {
        Ok(())
    } else {
        Err(ApiError::owner_only())
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Authenticated once already (by the idempotency layer, or by an
        // earlier extractor of the same handler): the request is counted
        // once.
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        let pool = state.store().pool();
        let (row, credential) = if let Some(token) = request_token(&parts.headers) {
            let hash = hash_token(token);
            let row = tokens::authenticate(pool, &hash).await?;
            (
                row.ok_or_else(ApiError::unauthorized)?,
                Credential::Token { hash },
            )
        } else if let Some(secret) = session_cookie(&parts.headers) {
            let hash = hash_token(secret);
            let session =
                sessions::authenticate(pool, &hash, SESSION_IDLE_SECONDS, SESSION_MAX_SECONDS)
                    .await?
                    .ok_or_else(ApiError::unauthorized)?;
            check_cookie_request(parts, &session.csrf_token)?;
            let credential = Credential::Session {
                id: session.id,
                hash,
                csrf_token: session.csrf_token,
                expires_at: session.expires_at,
            };
            (session.user, credential)
        } else {
            return Err(ApiError::unauthorized());
        };
        let user = User::from_row(row, &state.options().limits);
        // After the 401 checks: the limit is the authenticated user's.
        if state.options().enforce_request_rate {
            state
                .rate_limits()
                .check(user.id, user.limits.requests_per_minute)?;
        }
        let caller = Caller { user, credential };
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// How long a session lives unused: 7 days (each request slides its end,
/// written at most once a minute).
pub const SESSION_IDLE_SECONDS: i64 = 7 * 24 * 3600;

/// How long a session lives at most, used or not: 30 days.
pub const SESSION_MAX_SECONDS: i64 = 30 * 24 * 3600;

/// The checks of a cookie-authenticated request (see the module doc):
/// a method that may change anything carries the session's CSRF token in
/// [`CSRF_HEADER`]; a WebSocket upgrade's `Origin`, when present, names the
/// request's own `Host`.
///
/// # Errors
/// `403` naming what is wrong.
fn check_cookie_request(parts: &Parts, csrf_token: &str) -> ApiResult<()> {
    use axum::http::Method;
    let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe {
        let sent = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        // Compared as hashes: equal length, and no early exit on a prefix.
        if sent.is_empty() || hash_token(sent) != hash_token(csrf_token) {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "Missing or wrong CSRF token.",
            )
            .with_detail(
                "A request signed in with the session cookie that changes anything must carry \
                 the session's CSRF token in the X-CSRF-Token header (given by POST \
                 /api/v2/sessions and GET /api/v2/sessions/current).",
            ));
        }
    }
    if let Some(origin) = parts.headers.get(axum::http::header::ORIGIN) {
        let host = parts
            .headers
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| url::Url::parse(o).ok())
            .and_then(|u| {
                let host = u.host_str()?.to_owned();
                Some(match u.port() {
                    Some(port) => format!("{host}:{port}"),
                    None => host,
                })
            });
        if !safe || crate::token::is_websocket_upgrade(&parts.headers) {
            match (origin_host, host) {
                (Some(o), Some(h)) if o.eq_ignore_ascii_case(h) => {}
                _ => {
                    return Err(ApiError::new(
                        axum::http::StatusCode::FORBIDDEN,
                        "Cross-origin request refused.",
                    )
                    .with_detail(
                        "A request signed in with the session cookie must come from this \
                         server's own pages (its Origin header names another host).",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// An admin caller, for admin-only routes without a path parameter.
///
/// # Errors
/// `401` without a valid token, then `403` for a member.
#[derive(Debug, Clone)]
pub struct Admin(pub Caller);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.require_admin()?;
        Ok(Admin(caller))
    }
}

/// The resource an admin-only route acts on: the `{id}` path parameter of
/// `PATCH`/`DELETE /api/v2/chats/{providers,model-configs,mcp-servers}/{id}`.
///
/// # Errors
/// In API.md "Details" order: `401` without a valid token, `400` when `id`
/// is not a UUID, `403` for a member.
#[derive(Debug, Clone, Copy)]
pub struct AdminTarget {
    /// The `{id}` path parameter.
    pub id: Uuid,
}

impl FromRequestParts<AppState> for AdminTarget {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let id = PathParams::from_request_parts(parts, state)
            .await?
            .uuid("id")?;
        caller.require_admin()?;
        Ok(AdminTarget { id })
    }
}

/// The chat named by the `{chat}` path parameter, with the caller: the
/// extractor of the chat routes whose only path parameter is `{chat}` and
/// whose first check after the path is the chat's visibility. A `GET` or
/// `HEAD` reads it as [`readable_chat`] does (shares included); any other
/// method as [`visible_chat`] does, so a user the chat is shared with gets
/// `403` on every mutation.
///
/// # Errors
/// In API.md "Details" order: `401` without a valid token, `400` when
/// `chat` is not a UUID, `404` when the chat does not exist or is not
/// visible to the caller, `403` for a mutation of a chat shared with them.
#[derive(Debug, Clone)]
pub struct ChatTarget {
    /// The authenticated caller.
    pub caller: Caller,
    /// The chat, read without a lock.
    pub chat: chatd_store::Chat,
    /// How the caller reaches it.
    pub access: ChatAccess,
}

impl FromRequestParts<AppState> for ChatTarget {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let id = PathParams::from_request_parts(parts, state)
            .await?
            .uuid("chat")?;
        let (chat, access) = readable_chat(state, &caller, id).await?;
        let read = matches!(
            parts.method,
            axum::http::Method::GET | axum::http::Method::HEAD
        );
        if access == ChatAccess::Shared && !read {
            return Err(ApiError::shared_read_only());
        }
        Ok(ChatTarget {
            caller,
            chat,
            access,
        })
    }
}

impl ChatTarget {
    /// The chat's id.
    pub fn id(&self) -> Uuid {
        self.chat.id
    }

    /// `403` unless the caller owns the chat (see [`require_owner`]).
    pub fn require_owner(&self) -> ApiResult<()> {
        require_owner(&self.caller, &self.chat)
    }
}

/// The form of a user name: 1 to 64 characters, ASCII letters, digits,
/// `.`, `_`, `-`, starting with a letter or digit. [`validate_username`]
/// matches with it and the OpenAPI document states it
/// (`CreateUserRequest.username`).
pub const USERNAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";

/// Checks a user name against [`USERNAME_PATTERN`].
///
/// # Errors
/// A description of the rule that was broken.
pub fn validate_username(name: &str) -> Result<(), String> {
    static USERNAME: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(USERNAME_PATTERN).expect("a valid pattern"));
    let ok = USERNAME.is_match(name);
    if ok {
        Ok(())
    } else {
        Err("must be 1 to 64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit".into())
    }
}

/// The lifetime in seconds of a new token of a user with `role` (`None`:
/// it never expires), given the requested `lifetime_seconds` (already
/// checked to be in `1..=`[`MAX_TOKEN_LIFETIME_SECONDS`]) and the longest
/// lifetime of a member's token, `max_member`
/// ([`LimitDefaults::max_member_token_lifetime`]). A member's token always
/// expires, whoever creates it: no request means `max_member`. An admin's
/// token lasts what was asked, or forever.
///
/// # Errors
/// A member's requested lifetime over `max_member`: the message for a `400`
/// naming `lifetime_seconds`.
///
/// ```
/// use chatd_api::auth::{Role, token_lifetime};
/// use std::time::Duration;
/// let day = Duration::from_secs(86_400);
/// assert_eq!(token_lifetime(Role::Member, None, day), Ok(Some(86_400)));
/// assert_eq!(token_lifetime(Role::Member, Some(60), day), Ok(Some(60)));
/// assert!(token_lifetime(Role::Member, Some(86_401), day).is_err());
/// assert_eq!(token_lifetime(Role::Admin, None, day), Ok(None));
/// assert_eq!(token_lifetime(Role::Admin, Some(86_401), day), Ok(Some(86_401)));
/// ```
pub fn token_lifetime(
    role: Role,
    requested: Option<i64>,
    max_member: std::time::Duration,
) -> Result<Option<i64>, String> {
    if role == Role::Admin {
        return Ok(requested);
    }
    let max = i64::try_from(max_member.as_secs())
        .unwrap_or(i64::MAX)
        .clamp(1, MAX_TOKEN_LIFETIME_SECONDS);
    match requested {
        None => Ok(Some(max)),
        Some(seconds) if seconds <= max => Ok(Some(seconds)),
        Some(_) => Err(format!(
            "a member's token lives at most {max} seconds (--max-member-token-lifetime)"
        )),
    }
}

/// Makes sure user `admin` exists with role `admin`, is not disabled, and
/// that `token` authenticates as it, without expiry
/// (`CHATD_BOOTSTRAP_ADMIN_TOKEN`: the way back in when every admin is
/// locked out, so starting a replica with it re-enables `admin`).
/// Idempotent across restarts and safe when several replicas start at once.
/// An existing `admin` user that is a member is promoted; a token hash
/// already stored for another user is moved to `admin`. Setting a different
/// token rotates it: the previous bootstrap token is revoked (replicas of one
/// cluster must therefore share the same value).
///
/// # Errors
/// An empty token; database errors.
pub async fn bootstrap_admin(pool: &PgPool, token: &str) -> anyhow::Result<()> {
    let token = token.trim();
    anyhow::ensure!(!token.is_empty(), "the bootstrap admin token is empty");
    let hash = hash_token(token);
    chatd_store::users::bootstrap_admin(pool, &hash)
        .await
        .context("storing the bootstrap admin user and token")?;
    Ok(())
}

/// `chatd token create --user NAME [--admin]`: [`create_token_with_lifetime`]
/// with the default lifetime (an admin's token never expires; a member's
/// expires after the default `--max-member-token-lifetime`, 30 days).
///
/// # Errors
/// As [`create_token_with_lifetime`].
pub async fn create_token(pool: &PgPool, username: &str, admin: bool) -> anyhow::Result<String> {
    create_token_with_lifetime(pool, username, admin, None).await
}

/// `chatd token create --user NAME [--admin] [--lifetime D]`: creates user
/// `username` when missing (role `admin` when `admin`, else `member`; an
/// existing member is promoted when `admin` is set, never demoted) and
/// returns a new clear token for it, named `cli`. It expires after
/// `lifetime` when given; otherwise an admin's token never expires and a
/// member's expires after [`LimitDefaults`]' `max_member_token_lifetime`
/// (30 days): a member's token always expires. The token is stored hashed
/// and cannot be shown again.
///
/// # Errors
/// An invalid user name; a zero or over-ten-years `lifetime`; a disabled
/// user (its tokens could not authenticate); database errors.
pub async fn create_token_with_lifetime(
    pool: &PgPool,
    username: &str,
    admin: bool,
    lifetime: Option<std::time::Duration>,
) -> anyhow::Result<String> {
    validate_username(username).map_err(|e| anyhow::anyhow!("invalid user name: {e}"))?;
    let requested = lifetime
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .map(|s| {
            anyhow::ensure!(
                (1..=MAX_TOKEN_LIFETIME_SECONDS).contains(&s),
                "the lifetime must be 1 s to {MAX_TOKEN_LIFETIME_SECONDS} s"
            );
            Ok(s)
        })
        .transpose()?;
    let role = if admin { Role::Admin } else { Role::Member };
    let token = generate_token();
    // The operator's own lifetime is taken as is (a member's still expires).
    let lifetime = |user: &users::UserRow| match requested {
        Some(seconds) => Ok(Some(seconds)),
        None => token_lifetime(
            user.role,
            None,
            LimitDefaults::default().max_member_token_lifetime,
        ),
    };
    match users::issue_token(pool, username, role, "cli", &hash_token(&token), lifetime)
        .await
        .context("storing the token")?
    {
        users::IssueOutcome::Issued(_) => {}
        users::IssueOutcome::Disabled(user) => anyhow::bail!(
            "user {username:?} is disabled: re-enable it first (PATCH /api/v2/users/{} with {{\"disabled\": false}})",
            user.id
        ),
        users::IssueOutcome::Refused(err) => return Err(anyhow::Error::msg(err)),
    }
    Ok(token)
}

/// Shortest password, in characters (API.md "Sign-in, search, sharing and
/// export").
pub const MIN_PASSWORD_CHARS: usize = 10;

/// Longest password, in characters.
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// Checks a new password's length: [`MIN_PASSWORD_CHARS`] to
/// [`MAX_PASSWORD_CHARS`] characters.
///
/// # Errors
/// A description of the rule, for a `400` naming the field.
pub fn validate_password(password: &str) -> Result<(), String> {
    let n = password.chars().count();
    if (MIN_PASSWORD_CHARS..=MAX_PASSWORD_CHARS).contains(&n) {
        Ok(())
    } else {
        Err(format!(
            "must be {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters"
        ))
    }
}

/// The argon2id PHC string of `password` with a fresh random salt
/// (`$argon2id$v=19$m=19456,t=2,p=1$...`), computed on the blocking pool.
///
/// # Errors
/// Only if hashing fails (it does not for inputs of valid length).
pub async fn hash_password(password: &str) -> anyhow::Result<String> {
    let password = password.to_owned();
    tokio::task::spawn_blocking(move || {
        use argon2::password_hash::PasswordHasher as _;
        argon2::Argon2::default()
            .hash_password(password.as_bytes())
            .map(|h| h.to_string())
            .map_err(|e| anyhow::anyhow!("hashing the password: {e}"))
    })
    .await
    .context("the password hashing task")?
}

/// Whether `password` matches the PHC string `hash` (any argon2 variant
/// and parameters the string names), on the blocking pool. `None` for
/// `hash` (the user has no password, or does not exist) still spends the
/// time of a verification, against a fixed hash, and answers `false`: a
/// wrong name and a wrong password take the same time.
pub async fn verify_password(password: &str, hash: Option<String>) -> bool {
    /// The hash of a password nobody knows, for the missing-user path.
    const DECOY: &str = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$\
        0ntaXmQ7wWFu5OobT7b3ix2Kv1XOGWwxFmADzUmjI3U";
    let password = password.to_owned();
    tokio::task::spawn_blocking(move || {
        use argon2::password_hash::PasswordVerifier as _;
        let real = hash.is_some();
        let text = hash.unwrap_or_else(|| DECOY.to_owned());
        let Ok(parsed) = argon2::password_hash::phc::PasswordHash::new(&text) else {
            return false;
        };
        let ok = argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        real && ok
    })
    .await
    .unwrap_or(false)
}

/// `chatd user passwd NAME [--admin]`: creates user `username` when missing
/// (role `admin` when `admin`, else `member`; an existing member is
/// promoted when `admin` is set, never demoted), sets its password and ends
/// its sessions.
///
/// # Errors
/// An invalid user name or password length; database errors.
pub async fn set_password(
    pool: &PgPool,
    username: &str,
    password: &str,
    admin: bool,
) -> anyhow::Result<()> {
    validate_username(username).map_err(|e| anyhow::anyhow!("invalid user name: {e}"))?;
    validate_password(password).map_err(|e| anyhow::anyhow!("the password {e}"))?;
    let hash = hash_password(password).await?;
    let role = if admin { Role::Admin } else { Role::Member };
    users::set_password_by_name(pool, username, role, &hash)
        .await
        .context("storing the password")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passwords_hash_and_verify() {
        let hash = hash_password("correct horse battery").await.unwrap();
        assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");
        assert!(verify_password("correct horse battery", Some(hash.clone())).await);
        assert!(!verify_password("wrong horse battery", Some(hash.clone())).await);
        assert!(!verify_password("correct horse battery", None).await);
        assert!(!verify_password("x", Some("not a phc string".into())).await);
        let again = hash_password("correct horse battery").await.unwrap();
        assert_ne!(hash, again, "a fresh salt each time");
    }

    #[test]
    fn password_lengths() {
        assert!(validate_password(&"a".repeat(9)).is_err());
        assert!(validate_password(&"a".repeat(10)).is_ok());
        assert!(validate_password(&"é".repeat(1024)).is_ok());
        assert!(validate_password(&"a".repeat(1025)).is_err());
    }

    #[test]
    fn usernames() {
        assert!(validate_username("alice").is_ok());
        assert!(validate_username("a.b-c_d").is_ok());
        assert!(validate_username("").is_err());
        assert!(validate_username("-x").is_err());
        assert!(validate_username("a b").is_err());
        assert!(validate_username(&"a".repeat(65)).is_err());
    }
}
