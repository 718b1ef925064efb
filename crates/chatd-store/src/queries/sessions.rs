//! SQL of the `user_sessions` table: browser sessions of the cookie
//! sign-in (API.md "Sign-in, search, sharing and export"). As for
//! `api_keys`, only the SHA-256 of the session secret is stored
//! (`secret_hash`, unique); the HTTP layer makes and hashes the secret.
//!
//! A session authenticates while its row exists (sign-out and a password
//! change delete it), `expires_at` is in the future (database time) and its
//! user is not disabled. Each authenticated request slides `expires_at` to
//! `now() + idle` (written at most once a minute), never past
//! `created_at + max`: a session unused for `idle` ends, and none lives
//! longer than `max`.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use super::users::{UserRecord, UserRow};

/// How often `last_used_at`/`expires_at` are written for one session, at
/// most: once per this many seconds.
pub const TOUCH_GRANULARITY_SECONDS: i64 = 60;

/// A session and its user, as authentication reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionAuth {
    /// Session id.
    pub id: Uuid,
    /// The value the `X-CSRF-Token` header of a cookie-authenticated
    /// mutation must carry.
    pub csrf_token: String,
    /// When the session ends unless used again (after this request's slide).
    pub expires_at: DateTime<Utc>,
    /// Its user.
    pub user: UserRow,
}

/// Inserts a session of `user_id` whose secret hashes to `secret_hash`,
/// ending after `idle_seconds` unless used; returns its id and expiry.
pub async fn insert(
    conn: impl PgExecutor<'_>,
    user_id: Uuid,
    secret_hash: &[u8],
    csrf_token: &str,
    idle_seconds: i64,
    user_agent: &str,
) -> sqlx::Result<(Uuid, DateTime<Utc>)> {
    let id = Uuid::new_v4();
    let expires_at = sqlx::query_scalar!(
        "INSERT INTO user_sessions (id, user_id, secret_hash, csrf_token, expires_at, user_agent)
         VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 second', $6)
         RETURNING expires_at",
        id,
        user_id,
        secret_hash,
        csrf_token,
        idle_seconds,
        user_agent,
    )
    .fetch_one(conn)
    .await?;
    Ok((id, expires_at))
}

/// The session with hash `secret_hash` and its user, when the session has
/// not expired and the user is not disabled; in the same statement slides
/// its expiry to `now() + idle_seconds` (capped at `created_at +
/// max_seconds`) when it was last touched more than
/// [`TOUCH_GRANULARITY_SECONDS`] ago.
pub async fn authenticate(
    conn: impl PgExecutor<'_>,
    secret_hash: &[u8],
    idle_seconds: i64,
    max_seconds: i64,
) -> sqlx::Result<Option<SessionAuth>> {
    let row = sqlx::query!(
        "WITH s AS (
             SELECT id, user_id, csrf_token, expires_at, created_at, last_used_at
             FROM user_sessions WHERE secret_hash = $1 AND expires_at > now()
         ), touched AS (
             UPDATE user_sessions t
                SET last_used_at = now(),
                    expires_at = LEAST(t.created_at + $3::bigint * interval '1 second',
                                       now() + $2::bigint * interval '1 second')
              WHERE t.id IN (SELECT id FROM s)
                AND t.last_used_at < now() - $4::bigint * interval '1 second'
              RETURNING t.expires_at
         )
         SELECT s.id AS session_id, s.csrf_token,
                COALESCE((SELECT expires_at FROM touched), s.expires_at) AS \"expires_at!\",
                u.id, u.username, u.role, u.created_at, u.disabled, u.max_running_chats,
                u.requests_per_minute, u.monthly_budget_micros, u.monthly_token_budget,
                u.max_storage_bytes
         FROM s JOIN users u ON u.id = s.user_id WHERE NOT u.disabled",
        secret_hash,
        idle_seconds,
        max_seconds,
        TOUCH_GRANULARITY_SECONDS,
    )
    .fetch_optional(conn)
    .await?;
    let Some(r) = row else { return Ok(None) };
    let user = UserRecord {
        id: r.id,
        username: r.username,
        role: r.role,
        created_at: r.created_at,
        disabled: r.disabled,
        max_running_chats: r.max_running_chats,
        requests_per_minute: r.requests_per_minute,
        monthly_budget_micros: r.monthly_budget_micros,
        monthly_token_budget: r.monthly_token_budget,
        max_storage_bytes: r.max_storage_bytes,
    }
    .into_row()?;
    Ok(Some(SessionAuth {
        id: r.session_id,
        csrf_token: r.csrf_token,
        expires_at: r.expires_at,
        user,
    }))
}

/// Whether the session with hash `secret_hash` still authenticates (exists,
/// unexpired, its user enabled). Reads only: the periodic re-check of the
/// streams opened with a session cookie.
pub async fn is_valid(conn: impl PgExecutor<'_>, secret_hash: &[u8]) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        "SELECT EXISTS (SELECT 1 FROM user_sessions s JOIN users u ON u.id = s.user_id
                         WHERE s.secret_hash = $1 AND s.expires_at > now() AND NOT u.disabled)
             AS \"valid!\"",
        secret_hash,
    )
    .fetch_one(conn)
    .await
}

/// Ends session `id` (sign-out); `false` when it was gone already.
pub async fn delete(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query!("DELETE FROM user_sessions WHERE id = $1", id)
        .execute(conn)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Ends every session of `user_id` but `keep` (a password change ends the
/// others); returns how many.
pub async fn delete_for_user(
    conn: impl PgExecutor<'_>,
    user_id: Uuid,
    keep: Option<Uuid>,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM user_sessions WHERE user_id = $1 AND ($2::uuid IS NULL OR id <> $2)",
        user_id,
        keep,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes sessions that expired before `now()`; returns how many. Run
/// from time to time (expired rows never authenticate; this only bounds
/// the table).
pub async fn delete_expired(conn: impl PgExecutor<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM user_sessions WHERE expires_at <= now()")
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}
