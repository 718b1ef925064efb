//! SQL of the `api_keys` table: API tokens, stored as the SHA-256 of the
//! clear token (`secret_hash`, unique); the HTTP layer hashes (API.md
//! "Authentication and authorization", "Limits, budgets and the token
//! lifecycle").
//!
//! A token authenticates while it exists (revoking deletes the row), has
//! not expired (database time) and its user is not disabled: both
//! [`authenticate`] (each request) and [`user_by_secret_hash`] (the
//! periodic re-check of open streams) apply all three.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use super::users::UserRow;

/// Name of the token row of `CHATD_BOOTSTRAP_ADMIN_TOKEN`.
pub const BOOTSTRAP_TOKEN_NAME: &str = "bootstrap";

/// The user a token with hash `secret_hash` authenticates as, when the
/// token exists, has not expired (database time) and its user is not
/// disabled. Reads only (no `last_used_at` update): for re-checking the
/// token of an open stream; a request authenticates with [`authenticate`].
pub async fn user_by_secret_hash(
    conn: impl PgExecutor<'_>,
    secret_hash: &[u8],
) -> sqlx::Result<Option<UserRow>> {
    super::users::select_users!(u
        "FROM api_keys k JOIN users u ON u.id = k.user_id
         WHERE k.secret_hash = $1 AND (k.expires_at IS NULL OR k.expires_at > now())
           AND NOT u.disabled",
        secret_hash,
    )
    .fetch_optional(conn)
    .await?
    .map(super::users::UserRecord::into_row)
    .transpose()
}

/// How often `last_used_at` is written for one token, at most: once per
/// this many seconds (so authentication writes a row at most once a minute
/// per token, not once per request).
pub const LAST_USED_GRANULARITY_SECONDS: i64 = 60;

/// [`user_by_secret_hash`] for a request: the same checks, and in the same
/// statement sets the token's `last_used_at` to now when it is older than
/// [`LAST_USED_GRANULARITY_SECONDS`] (or unset). Concurrent requests of
/// one token at the boundary write once: the second re-reads the row and
/// finds it fresh.
pub async fn authenticate(
    conn: impl PgExecutor<'_>,
    secret_hash: &[u8],
) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as!(
        super::users::UserRecord,
        "WITH k AS (
             SELECT id, user_id FROM api_keys
             WHERE secret_hash = $1 AND (expires_at IS NULL OR expires_at > now())
         ), touched AS (
             UPDATE api_keys SET last_used_at = now()
             WHERE id IN (SELECT id FROM k)
               AND (last_used_at IS NULL
                    OR last_used_at < now() - $2::bigint * interval '1 second')
         )
         SELECT u.id, u.username, u.role, u.created_at, u.disabled, u.max_running_chats,
                u.requests_per_minute, u.monthly_budget_micros, u.monthly_token_budget,
                u.max_storage_bytes
         FROM k JOIN users u ON u.id = k.user_id WHERE NOT u.disabled",
        secret_hash,
        LAST_USED_GRANULARITY_SECONDS,
    )
    .fetch_optional(conn)
    .await?
    .map(super::users::UserRecord::into_row)
    .transpose()
}

/// A token as `GET /api/v2/users/{user}/tokens` lists it: never the token
/// or its hash.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TokenRow {
    /// Token id.
    pub id: Uuid,
    /// Its label (may be empty).
    pub name: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Expiry; `None`: never.
    pub expires_at: Option<DateTime<Utc>>,
    /// Last authenticated request, to [`LAST_USED_GRANULARITY_SECONDS`];
    /// `None`: never used.
    pub last_used_at: Option<DateTime<Utc>>,
}

/// The tokens of user `user_id`, newest first (ties by id), expired ones
/// included (their `expires_at` is in the past); revoked tokens are gone.
pub async fn list(conn: impl PgExecutor<'_>, user_id: Uuid) -> sqlx::Result<Vec<TokenRow>> {
    sqlx::query_as!(
        TokenRow,
        "SELECT id, name, created_at, expires_at, last_used_at FROM api_keys
         WHERE user_id = $1 ORDER BY created_at DESC, id",
        user_id,
    )
    .fetch_all(conn)
    .await
}

/// Revokes token `id` of user `user_id` (deletes its row); `false` when
/// the user has no such token (unknown, another user's, or revoked already).
pub async fn delete(conn: impl PgExecutor<'_>, user_id: Uuid, id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "DELETE FROM api_keys WHERE id = $1 AND user_id = $2",
        id,
        user_id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Gives every member's token that has no expiry one `max_lifetime_secs`
/// from now (database time), and returns how many it changed: a member's
/// token always expires (API.md "Limits, budgets and the token lifecycle"),
/// including tokens created before that rule, and any token of a user who
/// is a member now. `chatd serve` runs it at every start, after the
/// migrations; admins' tokens are left alone.
pub async fn cap_member_lifetimes(
    conn: impl PgExecutor<'_>,
    max_lifetime_secs: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE api_keys k SET expires_at = now() + make_interval(secs => $1::float8)
           FROM users u
          WHERE u.id = k.user_id AND u.role = 'member' AND k.expires_at IS NULL",
        max_lifetime_secs as f64,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Inserts a token of user `user_id` named `name` and returns its fresh id.
/// `lifetime_seconds` (when given) sets `expires_at = now() + lifetime` in
/// database time; otherwise it never expires.
pub async fn insert(
    conn: impl PgExecutor<'_>,
    user_id: Uuid,
    name: &str,
    secret_hash: &[u8],
    lifetime_seconds: Option<i64>,
) -> sqlx::Result<Uuid> {
    let id = Uuid::new_v4();
    sqlx::query!(
        "INSERT INTO api_keys (id, user_id, name, secret_hash, expires_at)
         VALUES ($1, $2, $3, $4, CASE WHEN $5::bigint IS NULL THEN NULL ELSE now() + $5::bigint * interval '1 second' END)",
        id,
        user_id,
        name,
        secret_hash,
        lifetime_seconds,
    )
    .execute(conn)
    .await?;
    Ok(id)
}

/// Makes the token with hash `secret_hash` a [`BOOTSTRAP_TOKEN_NAME`]
/// token of user `admin_id` without expiry: inserts it, or moves an existing
/// row with that hash (whoever it belonged to) to the admin.
pub async fn upsert_bootstrap(
    conn: impl PgExecutor<'_>,
    admin_id: Uuid,
    secret_hash: &[u8],
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO api_keys (id, user_id, name, secret_hash) VALUES ($1, $2, $3, $4)
         ON CONFLICT (secret_hash) DO UPDATE SET user_id = EXCLUDED.user_id, expires_at = NULL",
        Uuid::new_v4(),
        admin_id,
        BOOTSTRAP_TOKEN_NAME,
        secret_hash,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes the [`BOOTSTRAP_TOKEN_NAME`] tokens of user `admin_id` other
/// than the one with hash `keep_hash` (a rotated bootstrap token); returns
/// how many.
pub async fn revoke_other_bootstraps(
    conn: impl PgExecutor<'_>,
    admin_id: Uuid,
    keep_hash: &[u8],
) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "DELETE FROM api_keys WHERE user_id = $1 AND name = $2 AND secret_hash <> $3",
        admin_id,
        BOOTSTRAP_TOKEN_NAME,
        keep_hash,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn user_by_secret_hash_the_user_a_token_with_hash_secret_hash_authenticates()
    -> anyhow::Result<()> {
        use crate::queries::{tokens, users};
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let alice = users::insert(pool, "alice", Role::Member).await?;
        tokens::insert(pool, alice.id, "laptop", b"hash-1", None).await?;
        assert_eq!(
            tokens::user_by_secret_hash(pool, b"hash-1").await?,
            Some(alice.clone())
        );
        assert!(
            tokens::user_by_secret_hash(pool, b"unknown")
                .await?
                .is_none()
        );
        // A disabled user's tokens authenticate no more.
        users::update(
            pool,
            alice.id,
            &users::UserPatch {
                disabled: Some(true),
                ..Default::default()
            },
        )
        .await?;
        assert!(
            tokens::user_by_secret_hash(pool, b"hash-1")
                .await?
                .is_none()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn authenticate_user_by_secret_hash_for_a_request() -> anyhow::Result<()> {
        use crate::queries::{tokens, users};
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let alice = users::insert(pool, "alice", Role::Member).await?;
        tokens::insert(pool, alice.id, "laptop", b"hash-1", None).await?;
        assert!(
            tokens::list(pool, alice.id).await?[0]
                .last_used_at
                .is_none()
        );
        assert_eq!(
            tokens::authenticate(pool, b"hash-1").await?,
            Some(alice.clone())
        );
        assert!(
            tokens::list(pool, alice.id).await?[0]
                .last_used_at
                .is_some()
        );
        assert!(tokens::authenticate(pool, b"unknown").await?.is_none());
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn delete_revokes_token_id_of_user_user_id_deletes_its_row() -> anyhow::Result<()> {
        use crate::queries::{tokens, users};
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let alice = users::insert(pool, "alice", Role::Member).await?;
        let bob = users::insert(pool, "bob", Role::Member).await?;
        let id = tokens::insert(pool, alice.id, "laptop", b"hash-1", Some(3600)).await?;
        let listed = tokens::list(pool, alice.id).await?;
        assert_eq!(
            (listed.len(), listed[0].id, listed[0].name.as_str()),
            (1, id, "laptop")
        );
        assert!(listed[0].expires_at.is_some());
        assert!(!tokens::delete(pool, bob.id, id).await?, "not bob's token");
        assert!(tokens::delete(pool, alice.id, id).await?);
        assert!(
            !tokens::delete(pool, alice.id, id).await?,
            "revoked already"
        );
        assert!(tokens::list(pool, alice.id).await?.is_empty());
        assert!(
            tokens::user_by_secret_hash(pool, b"hash-1")
                .await?
                .is_none()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn cap_member_lifetimes_gives_every_member_s_token_that_has_no_expiry_one()
    -> anyhow::Result<()> {
        use crate::queries::{tokens, users};
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let alice = users::insert(pool, "alice", Role::Member).await?;
        let root = users::insert(pool, "root", Role::Admin).await?;
        // Tokens from before members' tokens always expired.
        tokens::insert(pool, alice.id, "old", b"member", None).await?;
        tokens::insert(pool, root.id, "old", b"admin", None).await?;
        assert_eq!(tokens::cap_member_lifetimes(pool, 3600).await?, 1);
        let listed = tokens::list(pool, alice.id).await?;
        assert!(listed[0].expires_at.is_some());
        assert!(tokens::list(pool, root.id).await?[0].expires_at.is_none());
        assert_eq!(tokens::cap_member_lifetimes(pool, 3600).await?, 0, "once");
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn inserts_a_token_of_user_user_id_named_name_and_returns_its_fresh_id()
    -> anyhow::Result<()> {
        use crate::queries::{tokens, users};
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let alice = users::insert(pool, "alice", Role::Member).await?;
        // An hour-long token, and one that has expired already.
        tokens::insert(pool, alice.id, "ci", b"hour", Some(3600)).await?;
        tokens::insert(pool, alice.id, "old", b"expired", Some(-1)).await?;
        assert!(tokens::user_by_secret_hash(pool, b"hour").await?.is_some());
        assert!(
            tokens::user_by_secret_hash(pool, b"expired")
                .await?
                .is_none()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn upsert_bootstrap_makes_the_token_with_hash_secret_hash_a_bootstrap_token()
    -> anyhow::Result<()> {
        use crate::queries::{tokens, users};
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let admin = users::create_or_promote(pool, "admin", Role::Admin).await?;
        tokens::upsert_bootstrap(pool, admin, b"old").await?;
        // A rotated bootstrap token: store the new one, revoke the others.
        tokens::upsert_bootstrap(pool, admin, b"new").await?;
        assert_eq!(
            tokens::revoke_other_bootstraps(pool, admin, b"new").await?,
            1
        );
        assert!(tokens::user_by_secret_hash(pool, b"old").await?.is_none());
        assert_eq!(
            tokens::user_by_secret_hash(pool, b"new")
                .await?
                .map(|u| u.id),
            Some(admin)
        );
        Ok(())
    }
}
