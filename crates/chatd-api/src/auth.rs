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
//! - Roles are `admin` and `member`. A member sees only their own chats
//!   ([`visible_chat`]: any other is `404`, as if it did not exist); some
//!   chat mutations are the owner's only, even for admins
//!   ([`require_owner`]); admin-only routes call [`Caller::require_admin`].
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
use crate::token::request_token;
pub use crate::token::{
    TOKEN_PREFIX, WS_BEARER_PROTOCOL_PREFIX, WS_PROTOCOL, generate_token, hash_token,
};
use chatd_store::LockMode;
use chatd_store::chats;

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

/// Loads chat `id` if `caller` may see it.
///
/// # Errors
/// `404` when the chat does not exist or belongs to someone else and the
/// caller is a member.
pub async fn visible_chat(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
) -> ApiResult<chatd_store::Chat> {
    match chats::select(state.store().pool(), id, LockMode::None).await? {
        Some(chat) if caller.is_admin() || chat.owner_id == caller.id() => Ok(chat),
        _ => Err(ApiError::chat_not_found()),
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
        let token = request_token(&parts.headers).ok_or_else(ApiError::unauthorized)?;
        let row = tokens::authenticate(state.store().pool(), &hash_token(token)).await?;
        let user = User::from_row(
            row.ok_or_else(ApiError::unauthorized)?,
            &state.options().limits,
        );
        // After the 401 checks: the limit is the authenticated user's.
        if state.options().enforce_request_rate {
            state
                .rate_limits()
                .check(user.id, user.limits.requests_per_minute)?;
        }
        let caller = Caller { user };
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
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

/// The chat named by the `{chat}` path parameter, as [`visible_chat`] reads
/// it, with the caller: the extractor of the chat routes whose only path
/// parameter is `{chat}` and whose first check after the path is the chat's
/// visibility.
///
/// # Errors
/// In API.md "Details" order: `401` without a valid token, `400` when
/// `chat` is not a UUID, `404` when the chat does not exist or is not
/// visible to the caller.
#[derive(Debug, Clone)]
pub struct ChatTarget {
    /// The authenticated caller.
    pub caller: Caller,
    /// The chat, read without a lock.
    pub chat: chatd_store::Chat,
}

impl FromRequestParts<AppState> for ChatTarget {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let id = PathParams::from_request_parts(parts, state)
            .await?
            .uuid("chat")?;
        let chat = visible_chat(state, &caller, id).await?;
        Ok(ChatTarget { caller, chat })
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

#[cfg(test)]
mod tests {
    use super::*;

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
