//! Unauthenticated operational routes (API.md "Base paths and discovery"):
//! `/healthz` (the process is up), `/readyz` (the database answers and every
//! embedded migration is applied), `/metrics` (Prometheus text) and the
//! OpenAPI document. Also the HTTP metrics middleware: request counts and
//! latency histograms labelled by method, route template (axum's
//! [`MatchedPath`], never the raw path) and status.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ApiError;
use crate::openapi::E503;

/// How long `/readyz` waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(3);

/// How often histogram samples are drained into their buckets.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Name of the request counter.
pub const REQUESTS_METRIC: &str = "chatd_http_requests_total";
/// Name of the latency histogram (seconds).
pub const DURATION_METRIC: &str = "chatd_http_request_duration_seconds";

/// Body of `/healthz` and a ready `/readyz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthStatus {
    /// `ok` or `ready`.
    pub status: String,
}

/// Installs the process-wide Prometheus recorder on first call and returns
/// its handle on every call (idempotent). Request latencies get histogram
/// buckets from 1 ms to 30 s, and a background thread runs the recorder's
/// upkeep every 5 s. If another recorder was installed already,
/// the returned handle renders a private recorder instead and a warning is
/// logged.
pub fn install_metrics_recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ];
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(DURATION_METRIC.to_owned()), &buckets)
                .expect("non-empty buckets");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if let Err(err) = metrics::set_global_recorder(recorder) {
                tracing::warn!(error = %err, "a metrics recorder is already installed; /metrics shows only what this one records");
            }
            // Without the exporter's HTTP listener nobody drains histogram
            // samples between scrapes; a small thread does the upkeep.
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("chatd-metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_INTERVAL);
                        upkeep.run_upkeep();
                    }
                });
            if let Err(err) = spawned {
                tracing::warn!(error = %err, "could not start the metrics upkeep thread");
            }
            metrics::describe_counter!(
                REQUESTS_METRIC,
                "HTTP requests by method, route template and status"
            );
            metrics::describe_histogram!(
                DURATION_METRIC,
                metrics::Unit::Seconds,
                "HTTP request latency by method, route template and status"
            );
            metrics::describe_counter!(
                "chatd_transitions_total",
                "State-machine transitions by name and outcome (ok, rejected)"
            );
            handle
        })
        .clone()
}

/// Middleware recording [`REQUESTS_METRIC`] and [`DURATION_METRIC`].
pub async fn track_metrics(request: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    let elapsed = start.elapsed().as_secs_f64();
    tracing::debug!(%method, %route, %status, elapsed_ms = elapsed * 1000.0, "request");
    let labels = [("method", method), ("route", route), ("status", status)];
    metrics::counter!(REQUESTS_METRIC, &labels).increment(1);
    metrics::histogram!(DURATION_METRIC, &labels).record(elapsed);
    response
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
/// matching checksum; `503` otherwise.
#[utoipa::path(
    get, path = "/readyz", tag = "health", security(()),
    responses((status = 200, description = "Ready", body = HealthStatus), E503)
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let applied = chatd_store::queries::migrations::all_applied(state.store().pool());
    match tokio::time::timeout(READY_TIMEOUT, applied).await {
        Ok(Ok(true)) => Json(HealthStatus {
            status: "ready".into(),
        })
        .into_response(),
        Ok(Ok(false)) => ApiError::unavailable("Not ready.")
            .with_detail("Database migrations are not applied.")
            .into_response(),
        Ok(Err(err)) => ApiError::unavailable("Not ready.")
            .with_detail(format!("Database unavailable: {err}"))
            .into_response(),
        Err(_) => ApiError::unavailable("Not ready.")
            .with_detail("The database did not answer in time.")
            .into_response(),
    }
}

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

/// `GET /api/v2/openapi.json`: this API's OpenAPI 3.1 document.
#[utoipa::path(
    get, path = "/api/v2/openapi.json", tag = "health", security(()),
    responses((status = 200, description = "OpenAPI 3.1 document", body = Object))
)]
pub async fn openapi_json() -> Response {
    static DOC: OnceLock<String> = OnceLock::new();
    let doc = DOC.get_or_init(|| {
        crate::openapi::document()
            .to_json()
            .unwrap_or_else(|_| "{}".to_owned())
    });
    ([(header::CONTENT_TYPE, "application/json")], doc.clone()).into_response()
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
