//! SQL of the `api_keys` table: API tokens, stored as the SHA-256 of the
//! clear token (`secret_hash`, unique); the HTTP layer hashes (API.md
//! "Authentication and authorization").

use sqlx::PgExecutor;
use uuid::Uuid;

use super::users::UserRow;

/// Name of the token row of `CHATD_BOOTSTRAP_ADMIN_TOKEN`.
///
/// Example: [`upsert_bootstrap`].
pub const BOOTSTRAP_TOKEN_NAME: &str = "bootstrap";

/// The user a token with hash `secret_hash` authenticates as, when the
/// token exists and has not expired (database time).
///
/// # Example
///
/// ```
/// use chatd_core::Role;
/// use chatd_store::queries::{tokens, users};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let alice = users::insert(pool, "alice", Role::Member).await?;
/// tokens::insert(pool, alice.id, "laptop", b"hash-1", None).await?;
/// assert_eq!(tokens::user_by_secret_hash(pool, b"hash-1").await?, Some(alice));
/// assert!(tokens::user_by_secret_hash(pool, b"unknown").await?.is_none());
/// # Ok(()) }
/// ```
pub async fn user_by_secret_hash(
    conn: impl PgExecutor<'_>,
    secret_hash: &[u8],
) -> sqlx::Result<Option<UserRow>> {
    let sql = "SELECT u.id, u.username, u.role, u.created_at
         FROM api_keys k JOIN users u ON u.id = k.user_id
         WHERE k.secret_hash = $1 AND (k.expires_at IS NULL OR k.expires_at > now())";
    sqlx::query_as(sql)
        .bind(secret_hash)
        .fetch_optional(conn)
        .await
}

/// Inserts a token of user `user_id` named `name` and returns its fresh id.
/// `lifetime_seconds` (when given) sets `expires_at = now() + lifetime` in
/// database time; otherwise it never expires.
///
/// # Example
///
/// ```
/// use chatd_core::Role;
/// use chatd_store::queries::{tokens, users};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let alice = users::insert(pool, "alice", Role::Member).await?;
/// // An hour-long token, and one that has expired already.
/// tokens::insert(pool, alice.id, "ci", b"hour", Some(3600)).await?;
/// tokens::insert(pool, alice.id, "old", b"expired", Some(-1)).await?;
/// assert!(tokens::user_by_secret_hash(pool, b"hour").await?.is_some());
/// assert!(tokens::user_by_secret_hash(pool, b"expired").await?.is_none());
/// # Ok(()) }
/// ```
pub async fn insert(
    conn: impl PgExecutor<'_>,
    user_id: Uuid,
    name: &str,
    secret_hash: &[u8],
    lifetime_seconds: Option<i64>,
) -> sqlx::Result<Uuid> {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO api_keys (id, user_id, name, secret_hash, expires_at)
         VALUES ($1, $2, $3, $4, CASE WHEN $5::bigint IS NULL THEN NULL ELSE now() + $5::bigint * interval '1 second' END)",
    )
    .bind(id)
    .bind(user_id)
    .bind(name)
    .bind(secret_hash)
    .bind(lifetime_seconds)
    .execute(conn)
    .await?;
    Ok(id)
}

/// Makes the token with hash `secret_hash` a [`BOOTSTRAP_TOKEN_NAME`]
/// token of user `admin_id` without expiry: inserts it, or moves an existing
/// row with that hash (whoever it belonged to) to the admin.
///
/// # Example
///
/// ```
/// use chatd_core::Role;
/// use chatd_store::queries::{tokens, users};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let admin = users::create_or_promote(pool, "admin", Role::Admin).await?;
/// tokens::upsert_bootstrap(pool, admin, b"old").await?;
/// // A rotated bootstrap token: store the new one, revoke the others.
/// tokens::upsert_bootstrap(pool, admin, b"new").await?;
/// assert_eq!(tokens::revoke_other_bootstraps(pool, admin, b"new").await?, 1);
/// assert!(tokens::user_by_secret_hash(pool, b"old").await?.is_none());
/// assert_eq!(tokens::user_by_secret_hash(pool, b"new").await?.map(|u| u.id), Some(admin));
/// # Ok(()) }
/// ```
pub async fn upsert_bootstrap(
    conn: impl PgExecutor<'_>,
    admin_id: Uuid,
    secret_hash: &[u8],
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO api_keys (id, user_id, name, secret_hash) VALUES ($1, $2, $3, $4)
         ON CONFLICT (secret_hash) DO UPDATE SET user_id = EXCLUDED.user_id, expires_at = NULL",
    )
    .bind(Uuid::new_v4())
    .bind(admin_id)
    .bind(BOOTSTRAP_TOKEN_NAME)
    .bind(secret_hash)
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes the [`BOOTSTRAP_TOKEN_NAME`] tokens of user `admin_id` other
/// than the one with hash `keep_hash` (a rotated bootstrap token); returns
/// how many.
///
/// Example: [`upsert_bootstrap`].
pub async fn revoke_other_bootstraps(
    conn: impl PgExecutor<'_>,
    admin_id: Uuid,
    keep_hash: &[u8],
) -> sqlx::Result<u64> {
    Ok(
        sqlx::query("DELETE FROM api_keys WHERE user_id = $1 AND name = $2 AND secret_hash <> $3")
            .bind(admin_id)
            .bind(BOOTSTRAP_TOKEN_NAME)
            .bind(keep_hash)
            .execute(conn)
            .await?
            .rows_affected(),
    )
}
