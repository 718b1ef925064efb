//! The shared state of every handler ([`AppState`]) and the API's tunables
//! ([`ApiOptions`]). Below every route module: it knows the store, the
//! options, the metrics handle and, once streaming is enabled, the live
//! stream service ([`crate::stream::service`]), and nothing of the routes.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::error::{ApiError, ApiResult};
use crate::http_metrics::install_metrics_recorder;
use crate::stream::config::StreamDeps;
use crate::stream::service::StreamService;

/// Tunables of the HTTP API. `Debug` prints no relay secret.
#[derive(Clone)]
pub struct ApiOptions {
    /// Maximum queued messages per chat (default 20); a send that would queue
    /// beyond it answers `429`.
    pub max_queued_messages: i64,
    /// Maximum request body in bytes (default 1 MiB); larger bodies answer
    /// `413`.
    pub body_limit_bytes: usize,
    /// The cluster's shared relay secret: the parts endpoint accepts only
    /// `Authorization: Bearer <relay secret>`, and the relay forwarder sends
    /// it. `None`: the parts endpoint answers `401` to everyone.
    pub relay_secret: Option<String>,
    /// Largest file upload in bytes (default 10 MiB); larger uploads answer
    /// `413` as soon as the limit is passed (API.md "Files").
    pub max_file_bytes: usize,
    /// Most files linked to one chat (default 20; `LinkFiles`' cap).
    pub max_files_per_chat: usize,
    /// Server-wide caps and the defaults of per-user limits (API.md
    /// "Limits, budgets and the token lifecycle").
    pub limits: chatd_core::limits::LimitDefaults,
    /// How long a request body may take, from the start of the request
    /// (default 60 s): past it the request answers `408` and the connection
    /// closes (API.md "Slow or hostile clients"; [`crate::body_deadline`]).
    pub request_body_timeout: std::time::Duration,
    /// Whether requests count against the caller's `requests_per_minute`
    /// ([`crate::rate_limit`]; default true). Only the benchmark that
    /// measures the check's cost (`bench_budget`) turns it off; `chatd
    /// serve` never does.
    pub enforce_request_rate: bool,
}

impl std::fmt::Debug for ApiOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiOptions")
            .field("max_queued_messages", &self.max_queued_messages)
            .field("body_limit_bytes", &self.body_limit_bytes)
            .field(
                "relay_secret",
                &self.relay_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("max_file_bytes", &self.max_file_bytes)
            .field("max_files_per_chat", &self.max_files_per_chat)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Default for ApiOptions {
    fn default() -> Self {
        Self {
            max_queued_messages: 20,
            body_limit_bytes: 1024 * 1024,
            relay_secret: None,
            max_file_bytes: 10 * 1024 * 1024,
            max_files_per_chat: chatd_store::files::DEFAULT_MAX_FILE_LINKS,
            limits: chatd_core::limits::LimitDefaults::default(),
            request_body_timeout: std::time::Duration::from_secs(60),
            enforce_request_rate: true,
        }
    }
}

/// Shared state of every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    store: chatd_store::Store,
    idempotency_pool: sqlx::PgPool,
    options: ApiOptions,
    metrics: PrometheusHandle,
    streams: Option<StreamService>,
    /// Per-user request rate limiters of this replica.
    rate_limits: Arc<crate::rate_limit::RateLimits>,
    /// Sign-in attempt limiters of this replica.
    sign_in_limits: Arc<crate::rate_limit::SignInLimits>,
    /// Whether the database can commit ([`crate::commit_watch`]); checked
    /// once [`AppState::with_stream`] started its loop.
    commit_watch: Arc<crate::commit_watch::CommitWatch>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.inner.store)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// State over `store` with `options`. Installs the Prometheus recorder
    /// if it is not installed yet ([`install_metrics_recorder`]).
    pub fn new(store: chatd_store::Store, options: ApiOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                idempotency_pool: chatd_store::idempotency_keys::claim_pool(store.pool()),
                store,
                options,
                metrics: install_metrics_recorder(),
                streams: None,
                rate_limits: Arc::default(),
                sign_in_limits: Arc::default(),
                commit_watch: Arc::default(),
            }),
        }
    }

    /// The same state with live streaming enabled: the `/stream`, `/events`
    /// and `/stream/parts` routes answer instead of `503`. Starts this
    /// replica's sync poller (it stops on `deps.shutdown`); must be called
    /// inside a tokio runtime.
    #[must_use]
    pub fn with_stream(self, deps: StreamDeps) -> Self {
        // The commit watch runs beside the stream service's loops, until the
        // same shutdown.
        tokio::spawn(Arc::clone(&self.inner.commit_watch).run(
            crate::commit_watch::watch_pool(self.inner.store.pool()),
            deps.shutdown.clone(),
        ));
        let streams = StreamService::start(
            self.inner.store.clone(),
            self.inner.options.relay_secret.clone(),
            deps,
        );
        Self {
            inner: Arc::new(Inner {
                store: self.inner.store.clone(),
                idempotency_pool: self.inner.idempotency_pool.clone(),
                options: self.inner.options.clone(),
                metrics: self.inner.metrics.clone(),
                streams: Some(streams),
                rate_limits: self.inner.rate_limits.clone(),
                sign_in_limits: self.inner.sign_in_limits.clone(),
                commit_watch: self.inner.commit_watch.clone(),
            }),
        }
    }

    /// Whether the database can commit, as this replica last checked
    /// ([`crate::commit_watch`]).
    pub fn commit_watch(&self) -> &crate::commit_watch::CommitWatch {
        &self.inner.commit_watch
    }

    /// The live-stream service.
    ///
    /// # Errors
    /// `503` when the state was built without [`AppState::with_stream`].
    pub fn stream_service(&self) -> ApiResult<&StreamService> {
        self.inner.streams.as_ref().ok_or_else(|| {
            ApiError::unavailable("Live streaming is not configured on this server.")
        })
    }

    /// The store.
    pub fn store(&self) -> &chatd_store::Store {
        &self.inner.store
    }

    /// The pool of `Idempotency-Key` claims
    /// ([`chatd_store::idempotency_keys::claim_pool`]).
    pub fn idempotency_pool(&self) -> &sqlx::PgPool {
        &self.inner.idempotency_pool
    }

    /// The options.
    pub fn options(&self) -> &ApiOptions {
        &self.inner.options
    }

    /// This replica's per-user request rate limiters
    /// ([`crate::rate_limit`]).
    pub fn rate_limits(&self) -> &crate::rate_limit::RateLimits {
        &self.inner.rate_limits
    }

    /// The sign-in attempt limiters of this replica.
    pub fn sign_in_limits(&self) -> &crate::rate_limit::SignInLimits {
        &self.inner.sign_in_limits
    }

    /// The Prometheus handle `/metrics` renders.
    pub fn metrics(&self) -> &PrometheusHandle {
        &self.inner.metrics
    }
}
