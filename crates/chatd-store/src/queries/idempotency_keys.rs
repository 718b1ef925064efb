//! SQL of the `idempotency_keys` table (API.md "Idempotency"): the first
//! response to an `Idempotency-Key`, per user, for a limited time.
//!
//! A request with a key first [`claim`]s it in a transaction of its own and
//! keeps that transaction open while the request runs: a concurrent
//! duplicate's `INSERT` waits on the unique index until the first commits
//! (then finds its response) or rolls back (then claims the key itself).
//! The first request stores its response with [`complete`] and commits.
//! Rows past `expires_at` count as absent ([`claim`] takes them over) and
//! are removed by [`delete_expired`].

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// A stored response.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredResponse {
    /// The method and path the key was first used on.
    pub route: String,
    /// SHA-256 of the first request's body.
    pub request_hash: Vec<u8>,
    /// HTTP status of the first response.
    pub status: i16,
    /// Its `Content-Type`, if any.
    pub content_type: Option<String>,
    /// Its body.
    pub response: Vec<u8>,
}

/// The outcome of [`claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is this transaction's: run the request, then [`complete`]
    /// and commit (or roll back to release the key).
    Claimed,
    /// A live key: the first request's route, body hash and response.
    Existing(StoredResponse),
}

/// Claims `(user_id, key)` for a request to `route` with body hash
/// `request_hash`, valid `ttl_secs` seconds (database time) once completed.
/// Waits while another transaction holds an uncommitted claim of the same
/// key. An expired row is taken over.
///
/// # Errors
/// Database errors.
pub async fn claim(
    conn: &mut PgConnection,
    user_id: Uuid,
    key: &str,
    route: &str,
    request_hash: &[u8],
    ttl_secs: f64,
) -> sqlx::Result<Claim> {
    // The placeholder (status 0) is never committed: the claimant either
    // completes it or rolls back.
    let claimed: Option<bool> = sqlx::query_scalar!(
        r#"INSERT INTO idempotency_keys (user_id, key, route, request_hash, status, response, expires_at)
         VALUES ($1, $2, $3, $4, 0, '', now() + make_interval(secs => $5))
         ON CONFLICT (user_id, key) DO UPDATE SET
             route = EXCLUDED.route, request_hash = EXCLUDED.request_hash, status = 0,
             content_type = NULL, response = '', created_at = now(), expires_at = EXCLUDED.expires_at
         WHERE idempotency_keys.expires_at <= now()
         RETURNING true AS "claimed!""#,
        user_id,
        key,
        route,
        request_hash,
        ttl_secs,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if claimed.is_some() {
        return Ok(Claim::Claimed);
    }
    let stored = sqlx::query_as!(
        StoredResponse,
        "SELECT route, request_hash, status, content_type, response FROM idempotency_keys
         WHERE user_id = $1 AND key = $2",
        user_id,
        key,
    )
    .fetch_one(conn)
    .await?;
    Ok(Claim::Existing(stored))
}

/// Stores the response of a claimed key (see [`claim`]).
///
/// # Errors
/// Database errors.
pub async fn complete(
    conn: &mut PgConnection,
    user_id: Uuid,
    key: &str,
    status: i16,
    content_type: Option<&str>,
    response: &[u8],
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE idempotency_keys SET status = $3, content_type = $4, response = $5
         WHERE user_id = $1 AND key = $2",
        user_id,
        key,
        status,
        content_type,
        response,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes at most `limit` expired keys (database time); returns how many.
///
/// # Errors
/// Database errors.
pub async fn delete_expired(conn: impl PgExecutor<'_>, limit: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM idempotency_keys WHERE (user_id, key) IN (
             SELECT user_id, key FROM idempotency_keys WHERE expires_at <= now()
             ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        limit,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// How long a claim's transaction may sit idle while the request it guards
/// runs: longer than any request waits (a compatible protocol's turn waits
/// at most 600 s), so only a process that hangs leaves it to the server.
pub const CLAIM_IDLE_TIMEOUT: &str = "15min";

/// Lets the open transaction `conn` (a claim's) sit idle for
/// [`CLAIM_IDLE_TIMEOUT`] instead of the session's
/// `idle_in_transaction_session_timeout` (60 s), until it ends.
pub async fn hold_open(conn: &mut sqlx::PgConnection) -> sqlx::Result<()> {
    sqlx::query_scalar!(
        r#"SELECT set_config('idle_in_transaction_session_timeout', $1, true) AS "set!""#,
        CLAIM_IDLE_TIMEOUT,
    )
    .fetch_one(conn)
    .await
    .map(|_| ())
}

/// A pool for [`claim`] transactions beside `pool`: same database and
/// connection options, at most half of `pool`'s connections (at least 2),
/// opened lazily and closed after a minute idle. A claim holds its
/// connection while the request it guards uses `pool`; with one shared pool,
/// enough concurrent keyed requests could hold every connection and wait for
/// each other.
pub fn claim_pool(pool: &sqlx::PgPool) -> sqlx::PgPool {
    let main = pool.options();
    crate::pool_options((main.get_max_connections() / 2).max(2))
        .min_connections(0)
        .acquire_timeout(main.get_acquire_timeout())
        .idle_timeout(Some(std::time::Duration::from_secs(60)))
        .connect_lazy_with((*pool.connect_options()).clone())
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn claims_user_id_key_for_a_request_to_route_with_body_hash_request_hash()
    -> anyhow::Result<()> {
        use crate::queries::idempotency_keys::{self, Claim};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let mut tx = pool.begin().await?;
        let claim =
            idempotency_keys::claim(&mut tx, owner, "k1", "POST /chats", b"h", 86_400.0).await?;
        assert_eq!(claim, Claim::Claimed);
        idempotency_keys::complete(&mut tx, owner, "k1", 201, Some("application/json"), b"{}")
            .await?;
        tx.commit().await?;
        let mut tx = pool.begin().await?;
        let Claim::Existing(stored) =
            idempotency_keys::claim(&mut tx, owner, "k1", "POST /chats", b"h", 86_400.0).await?
        else {
            panic!("the key is taken");
        };
        assert_eq!(
            (stored.status, stored.response.as_slice()),
            (201, &b"{}"[..])
        );
        tx.rollback().await?;
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn delete_expired_deletes_at_most_limit_expired_keys_database_time() -> anyhow::Result<()>
    {
        use crate::queries::idempotency_keys::{self, Claim};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let mut tx = pool.begin().await?;
        idempotency_keys::claim(&mut tx, owner, "old", "POST /x", b"h", -1.0).await?;
        idempotency_keys::complete(&mut tx, owner, "old", 200, None, b"").await?;
        tx.commit().await?;
        assert_eq!(idempotency_keys::delete_expired(pool, 1000).await?, 1);
        assert_eq!(idempotency_keys::delete_expired(pool, 1000).await?, 0);
        Ok(())
    }

    /// Issue 36: a claim is held while its request runs, which may be
    /// longer than a session may sit idle in a transaction; the server must
    /// not end it (the key would never be stored and a retry would run
    /// twice).
    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_outlives_the_sessions_idle_in_transaction_timeout() -> anyhow::Result<()> {
        use std::str::FromStr as _;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let options = sqlx::postgres::PgConnectOptions::from_str(db.url())?
            .options([("idle_in_transaction_session_timeout", "300ms")]);
        let pool = crate::pool_options(2).connect_with(options).await?;
        let user = uuid::Uuid::new_v4();
        sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'idle', 'member')")
            .bind(user)
            .execute(&pool)
            .await?;
        let crate::claims::ClaimStart::Claimed(claim) =
            crate::claims::begin_claim(&pool, user, "k1", "POST /x", &[1], 60.0).await?
        else {
            panic!("a new key is claimed");
        };
        tokio::time::sleep(std::time::Duration::from_millis(900)).await;
        claim.complete(200, None, b"{}").await?;
        let stored: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM idempotency_keys WHERE key = 'k1' AND status = 200",
        )
        .fetch_one(&pool)
        .await?;
        assert_eq!(stored, 1);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn claim_pool_a_pool_for_claim_transactions_beside_pool() -> anyhow::Result<()> {
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let claims = crate::queries::idempotency_keys::claim_pool(pool);
        assert!(claims.options().get_max_connections() >= 2);
        sqlx::query("SELECT 1").execute(&claims).await?;
        Ok(())
    }
}
