//! An `Idempotency-Key` claim held open while the request runs (API.md
//! "Idempotency"): the claim's transaction lives in [`OpenClaim`], so the
//! API's middleware makes two calls and never composes queries.

use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::queries::idempotency_keys::{self, Claim, StoredResponse};

/// What [`begin_claim`] found.
#[derive(Debug)]
pub enum ClaimStart {
    /// The key is now claimed by this request: run it, then
    /// [`OpenClaim::complete`] (a success) or drop the claim (a failure:
    /// the key stays free).
    Claimed(OpenClaim),
    /// An earlier request with this key completed: its stored response.
    /// Nothing is held.
    Existing(StoredResponse),
}

/// A claimed key whose placeholder row is locked by an open transaction on
/// the claim pool ([`idempotency_keys::claim_pool`]). A concurrent request
/// with the same key waits on that lock. Dropping it rolls the claim back.
#[derive(Debug)]
pub struct OpenClaim {
    tx: Transaction<'static, Postgres>,
    user_id: Uuid,
    key: String,
}

/// Claims key `key` of user `user_id` for the request to `route` whose body
/// has SHA-256 `request_hash`, the key expiring `ttl_secs` seconds after it
/// is stored, in a transaction of `pool` (the claim pool) that stays open in
/// the returned [`OpenClaim`]. When another request holds the key, waits for
/// it to complete or roll back.
///
/// # Errors
/// Database errors; nothing is held then.
pub async fn begin_claim(
    pool: &PgPool,
    user_id: Uuid,
    key: &str,
    route: &str,
    request_hash: &[u8],
    ttl_secs: f64,
) -> sqlx::Result<ClaimStart> {
    let mut tx = pool.begin().await?;
    // The claim stays open while the request it guards runs, which may take
    // longer than a session may sit idle in a transaction (60 s): a
    // long-poll, a compatible protocol's turn, a commit waiting for a
    // synchronous standby. The server ended such a claim, the request
    // still answered 2xx, and the key was never stored (a retry ran twice).
    idempotency_keys::hold_open(&mut tx).await?;
    Ok(
        match idempotency_keys::claim(&mut tx, user_id, key, route, request_hash, ttl_secs).await? {
            Claim::Existing(stored) => ClaimStart::Existing(stored),
            Claim::Claimed => ClaimStart::Claimed(OpenClaim {
                tx,
                user_id,
                key: key.to_owned(),
            }),
        },
    )
}

impl OpenClaim {
    /// Stores the request's answer (`status`, `content_type`, the body
    /// `response`) with the key and commits: a repeat now gets it replayed.
    ///
    /// # Errors
    /// Database errors; the claim is rolled back then (the key stays free).
    pub async fn complete(
        mut self,
        status: i16,
        content_type: Option<&str>,
        response: &[u8],
    ) -> sqlx::Result<()> {
        idempotency_keys::complete(
            &mut self.tx,
            self.user_id,
            &self.key,
            status,
            content_type,
            response,
        )
        .await?;
        self.tx.commit().await
    }
}
