//! The commit watch (issue 36): whether the database can commit.
//!
//! With strict synchronous replication (Patroni's
//! `synchronous_mode_strict`, README "Production topology"), a primary
//! whose synchronous standbys are all gone still accepts transactions but
//! holds every commit until one comes back: an acknowledged commit is on
//! two nodes, or it is not acknowledged. Requests that write would hang
//! for as long (minutes), holding pooled connections and row locks, until
//! reads hang behind them too. So each replica asks the database once a
//! second, on a connection of its own (the pool's may all be waiting), with
//! [`chatd_store::database::commits_blocked`]; while commits are blocked,
//! requests that write answer `503` with `Retry-After` at once
//! ([`reject_writes_while_blocked`]), nothing is changed, and `/readyz` is
//! not ready. Reads go on. A check that fails or does not answer in time
//! leaves the last answer: an unreachable database is answered by every
//! request's own error, never by guessing here.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::app::AppState;
use crate::error::{ApiError, DATABASE_RETRY_AFTER_SECS};

/// How often the watch asks the database (1 s).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How long one check may take before the last answer stands (2 s).
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The `detail` of a write refused while commits are blocked, and of a
/// `/readyz` that is not ready for it.
pub const COMMITS_BLOCKED: &str = "database cannot commit: it waits for a synchronous standby";

/// Whether the database can commit, as last checked. Shared by the
/// replica's routes; see the module docs.
#[derive(Debug, Default)]
pub struct CommitWatch {
    blocked: AtomicBool,
}

impl CommitWatch {
    /// Whether commits were blocked at the last check.
    pub fn blocked(&self) -> bool {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Records a check's answer (what [`CommitWatch::run`] does once a
    /// second; tests set it directly). Logs each change.
    pub fn set(&self, blocked: bool) {
        if self.blocked.swap(blocked, Ordering::Relaxed) != blocked {
            if blocked {
                tracing::warn!(
                    "the database cannot commit: commits wait for a synchronous standby that is \
                     not connected; writes answer 503 until one is"
                );
            } else {
                tracing::info!("the database commits again: writes are accepted");
            }
        }
    }

    /// Checks every [`CHECK_INTERVAL`] on `pool` (one connection of its
    /// own) until `cancel`.
    pub(crate) async fn run(self: Arc<Self>, pool: PgPool, cancel: CancellationToken) {
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(CHECK_INTERVAL) => {}
            }
            let check = chatd_store::database::commits_blocked(&pool);
            match tokio::time::timeout(CHECK_TIMEOUT, check).await {
                Ok(Ok(blocked)) => self.set(blocked),
                Ok(Err(err)) => tracing::debug!(error = %err, "commit watch: check failed"),
                Err(_) => tracing::debug!("commit watch: check did not answer in time"),
            }
        }
        pool.close().await;
    }
}

/// The one connection of the watch: the store pool's database and options,
/// opened lazily.
pub(crate) fn watch_pool(store_pool: &PgPool) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(CHECK_TIMEOUT)
        .connect_lazy_with(
            (*store_pool.connect_options())
                .clone()
                .application_name("chatd-commit-watch"),
        )
}

/// Route middleware: while commits are blocked, a request that writes
/// (any method but `GET`, `HEAD` and `OPTIONS`) answers `503` with
/// `Retry-After` and the detail [`COMMITS_BLOCKED`] before its handler (and
/// before an `Idempotency-Key` is claimed) runs.
pub(crate) async fn reject_writes_while_blocked(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let reads = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !reads && state.commit_watch().blocked() {
        return ApiError::unavailable("Database unavailable.")
            .with_detail(COMMITS_BLOCKED)
            .with_retry_after(DATABASE_RETRY_AFTER_SECS)
            .into_response();
    }
    next.run(request).await
}
