//! HTTP metrics: the process-wide Prometheus recorder
//! ([`install_metrics_recorder`], rendered by `/metrics`) and the middleware
//! counting requests and their latency, labelled by method, route template
//! (axum's [`MatchedPath`], never the raw path) and status
//! ([`track_metrics`]).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// How often histogram samples are drained into their buckets.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Name of the request counter.
pub const REQUESTS_METRIC: &str = "chatd_http_requests_total";
/// Name of the latency histogram (seconds).
pub const DURATION_METRIC: &str = "chatd_http_request_duration_seconds";

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
