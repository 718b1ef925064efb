//! Unauthenticated operational routes (API.md "Base paths and discovery"):
//! `/healthz` (the process is up), `/readyz` (the database answers and every
//! embedded migration is applied), `/metrics` (Prometheus text), and
//! the `404`/`405` fallbacks in the API error shape. The OpenAPI document is
//! served by [`crate::openapi`], the metrics recorder and middleware live in
//! [`crate::http_metrics`].

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::app::AppState;
use crate::error::{ApiError, E503};

/// How long `/readyz` waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(3);

/// Body of `/healthz` and a ready `/readyz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthStatus {
    /// `ok` or `ready`.
    pub status: String,
}

/// `GET /healthz`: always `200` while the process serves requests.
#[utoipa::path(
    get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "The process is up", body = HealthStatus))
)]
pub async fn healthz() -> Json<HealthStatus> {
    Json(HealthStatus {
        status: "ok".into(),
    })
}

/// `GET /readyz`: `200` when the database answers within 3 s and every
/// migration of `chatd_store::MIGRATOR` is recorded as applied with a
/// matching checksum; `503` otherwise, with a fixed `detail` (`database
/// unreachable`, `database did not answer in time`, `migrations not
/// applied`, or [`crate::commit_watch::COMMITS_BLOCKED`] while the
/// database holds every commit for a synchronous standby). The database's own error text is logged, never answered
/// (API.md "Limits, budgets and the token lifecycle": `/readyz` never
/// echoes a database error; it may name hosts, users or settings).
#[utoipa::path(
    get, path = "/readyz", tag = "health", security(()),
    responses((status = 200, description = "Ready", body = HealthStatus), E503)
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.commit_watch().blocked() {
        return ApiError::unavailable("Not ready.")
            .with_detail(crate::commit_watch::COMMITS_BLOCKED)
            .into_response();
    }
    let applied = chatd_store::migrations::all_applied(state.store().pool());
    let not_ready = |detail: &'static str| {
        ApiError::unavailable("Not ready.")
            .with_detail(detail)
            .into_response()
    };
    match tokio::time::timeout(READY_TIMEOUT, applied).await {
        Ok(Ok(true)) => Json(HealthStatus {
            status: "ready".into(),
        })
        .into_response(),
        Ok(Ok(false)) => {
            tracing::warn!("readyz: database migrations are not applied");
            not_ready(NOT_READY_MIGRATIONS)
        }
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "readyz: the database is unreachable");
            not_ready(NOT_READY_UNREACHABLE)
        }
        Err(_) => {
            tracing::warn!("readyz: the database did not answer within {READY_TIMEOUT:?}");
            not_ready(NOT_READY_TIMEOUT)
        }
    }
}

/// `detail` of a `503` `/readyz` when the database answered with an error.
pub const NOT_READY_UNREACHABLE: &str = "database unreachable";
/// `detail` of a `503` `/readyz` when the database did not answer in 3 s.
pub const NOT_READY_TIMEOUT: &str = "database did not answer in time";
/// `detail` of a `503` `/readyz` when a migration is missing or differs.
pub const NOT_READY_MIGRATIONS: &str = "migrations not applied";

/// `GET /metrics`: Prometheus text exposition format.
#[utoipa::path(
    get, path = "/metrics", tag = "health", security(()),
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain"))
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics().render(),
    )
        .into_response()
}

/// Fallback of unknown paths: `404` in the API error shape.
pub async fn not_found() -> ApiError {
    ApiError::not_found("No such route.")
}

/// Answer to a known path with an unsupported method: `405` in the API
/// error shape.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed.")
}
