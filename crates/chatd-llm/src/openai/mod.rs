//! OpenAI Chat Completions, for api.openai.com and every OpenAI-compatible
//! server (llama.cpp, vLLM, OpenRouter, ...).
//!
//! Requests go to `{base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage` (API.md "Workers and replicas": the base URL
//! includes the version prefix). History is projected by [`wire`] and the SSE
//! response decoded by [`stream`]. The key is optional: local servers take
//! none.

pub mod stream;
pub mod wire;

use futures::StreamExt as _;
use futures::future::BoxFuture;

use crate::error::ProviderError;
use crate::http::{HttpOptions, build_client, display_base_url, read_error_body, transport_error};
use crate::provider::{EventStream, Provider};
use crate::request::ModelRequest;

pub use wire::MaxTokensParam;

/// A provider that speaks OpenAI Chat Completions.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    client: reqwest::Client,
    endpoint: String,
    /// The base URL as shown in error messages ([`display_base_url`]).
    shown_url: String,
    api_key: Option<String>,
    name: String,
    max_tokens_param: MaxTokensParam,
}

impl OpenAiProvider {
    /// A provider for `base_url` (for example `https://api.openai.com/v1`;
    /// a trailing `/` is ignored), sending `api_key` as a bearer token when
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

    /// Like [`OpenAiProvider::new`] with explicit timeouts.
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
        Ok(OpenAiProvider {
            client,
            endpoint: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            shown_url: display_base_url(&base_url),
            api_key: api_key.filter(|k| !k.is_empty()),
            name,
            max_tokens_param: MaxTokensParam::default(),
        })
    }

    /// Chooses the field that carries [`ModelRequest::max_output_tokens`]
    /// (default `max_completion_tokens`; older compatible servers only know
    /// `max_tokens`).
    pub fn max_tokens_param(mut self, param: MaxTokensParam) -> Self {
        self.max_tokens_param = param;
        self
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn start(&self, request: &ModelRequest) -> Result<EventStream, ProviderError> {
        let body = wire::request_body(request, self.max_tokens_param);
        let mut builder = self
            .client
            .post(&self.endpoint)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body.to_string());
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
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

impl Provider for OpenAiProvider {
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
