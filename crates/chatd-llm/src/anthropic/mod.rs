//! Anthropic Messages (`POST {base_url}/messages`, streaming).
//!
//! Requests carry `x-api-key` (when a key is configured) and
//! `anthropic-version: 2023-06-01`; the base URL includes the version prefix
//! (`https://api.anthropic.com/v1`, API.md "Workers and replicas"). History is
//! projected by [`wire`] and the SSE response decoded by [`stream`]. Error
//! answers are classified by the shared rules of [`crate::error`]: 529 and
//! `overloaded_error` → `overloaded`, 429 → `rate_limit`, and so on.

pub mod stream;
pub mod wire;

use futures::StreamExt as _;
use futures::future::BoxFuture;

use crate::error::ProviderError;
use crate::http::{HttpOptions, build_client, display_base_url, read_error_body, transport_error};
use crate::provider::{EventStream, Provider};
use crate::request::ModelRequest;

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The base URL used when a provider row has none.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com/v1";

/// A provider that speaks Anthropic Messages.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    client: reqwest::Client,
    endpoint: String,
    /// The base URL as shown in error messages ([`display_base_url`]).
    shown_url: String,
    api_key: Option<String>,
    name: String,
}

impl AnthropicProvider {
    /// A provider for `base_url` (for example `https://api.anthropic.com/v1`;
    /// a trailing `/` is ignored), sending `api_key` as `x-api-key` when
    /// given, named `provider_name` in errors, with default [`HttpOptions`].
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(
        base_url: impl Into<String>,
        api_key: Option<String>,
        provider_name: impl Into<String>,
    ) -> Result<Self, ProviderError> {
        Self::with_options(base_url, api_key, provider_name, HttpOptions::default())
    }

    /// Like [`AnthropicProvider::new`] with explicit timeouts.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn with_options(
        base_url: impl Into<String>,
        api_key: Option<String>,
        provider_name: impl Into<String>,
        options: HttpOptions,
    ) -> Result<Self, ProviderError> {
        let name = provider_name.into();
        let client = build_client(options, &name)?;
        let base_url = base_url.into();
        Ok(AnthropicProvider {
            client,
            endpoint: format!("{}/messages", base_url.trim_end_matches('/')),
            shown_url: display_base_url(&base_url),
            api_key: api_key.filter(|k| !k.is_empty()),
            name,
        })
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn start(&self, request: &ModelRequest) -> Result<EventStream, ProviderError> {
        let body = wire::request_body(request);
        let mut builder = self
            .client
            .post(&self.endpoint)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header("anthropic-version", ANTHROPIC_VERSION)
            .body(body.to_string());
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key);
        }
        let response = builder
            .send()
            .await
            .map_err(|err| transport_error(&err, &self.name, &self.shown_url))?;
        let status = response.status();
        if !status.is_success() {
            let body = read_error_body(response, &self.name).await;
            return Err(ProviderError::from_http_status(
                status.as_u16(),
                &body,
                &self.name,
            ));
        }
        let name = self.name.clone();
        let shown_url = self.shown_url.clone();
        let bytes = response
            .bytes_stream()
            .map(move |chunk| chunk.map_err(|err| transport_error(&err, &name, &shown_url)));
        Ok(stream::decode(bytes, self.name.clone()))
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<EventStream, ProviderError>> {
        Box::pin(self.start(request))
    }
}
