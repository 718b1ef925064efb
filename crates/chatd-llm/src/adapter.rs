//! The provider seam: what one vendor's adapter supplies ([`Adapter`]: its
//! endpoint, headers, request body and SSE decoder), and the one
//! [`HttpProvider`] that drives any adapter over HTTP.
//!
//! Every adapter shares the same request cycle (API.md "Workers and
//! replicas"): `POST {base_url}/{PATH}` with a JSON body and
//! `accept: text/event-stream`; a non-2xx answer is classified by
//! [`ProviderError::from_http_status`] from its status and (at most 64 KiB
//! of) its body; transport failures by [`crate::http::transport_error`];
//! a 2xx body is decoded by [`crate::sse::decode`] with the adapter's
//! decoder. An adapter therefore is its wire types plus its decoder.

use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::error::ProviderError;
use crate::http::{
    HttpOptions, build_client, display_base_url, endpoint_url, read_error_body, transport_error,
};
use crate::provider::{EventStream, Provider};
use crate::request::ModelRequest;
use crate::sse::{SseDecoder, decode};

/// One vendor's wire format.
pub trait Adapter: Send + Sync + 'static {
    /// The decoder of one streamed response.
    type Decoder: SseDecoder;

    /// The streaming endpoint below the base URL (`chat/completions`).
    const PATH: &'static str;

    /// The base URL when a provider row has none, with the version prefix
    /// (`https://api.openai.com/v1`).
    const DEFAULT_BASE_URL: &'static str;

    /// The JSON body of a streaming request for `request`.
    fn request_body(&self, request: &ModelRequest) -> Value;

    /// Adds the vendor's own headers to a request, with `api_key` (never
    /// empty) when one is configured.
    fn headers(
        &self,
        request: reqwest::RequestBuilder,
        api_key: Option<&str>,
    ) -> reqwest::RequestBuilder;

    /// A decoder for one response of `provider` (its name in errors).
    fn decoder(&self, provider: String) -> Self::Decoder;
}

/// A provider that speaks adapter `A`'s wire format over HTTP. `Debug`
/// prints no key and the address without credentials.
#[derive(Clone)]
pub struct HttpProvider<A> {
    client: reqwest::Client,
    endpoint: String,
    /// The base URL as shown in error messages ([`display_base_url`]).
    shown_url: String,
    api_key: Option<String>,
    name: String,
    adapter: A,
}

impl<A: std::fmt::Debug> std::fmt::Debug for HttpProvider<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProvider")
            .field("shown_url", &self.shown_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("name", &self.name)
            .field("adapter", &self.adapter)
            .finish_non_exhaustive()
    }
}

impl<A: Adapter + Default> HttpProvider<A> {
    /// A provider for `base_url` (for example `https://api.openai.com/v1`;
    /// a trailing `/` is ignored), sending `api_key` when given (an empty
    /// key counts as none), named `provider_name` in errors, with the
    /// adapter's defaults and default [`HttpOptions`].
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

    /// Like [`HttpProvider::new`] with explicit timeouts.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn with_options(
        base_url: impl Into<String>,
        api_key: Option<String>,
        provider_name: impl Into<String>,
        options: HttpOptions,
    ) -> Result<Self, ProviderError> {
        Self::with_adapter(A::default(), base_url, api_key, provider_name, options)
    }
}

impl<A: Adapter> HttpProvider<A> {
    /// Like [`HttpProvider::with_options`] with an adapter configured by the
    /// caller.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn with_adapter(
        adapter: A,
        base_url: impl Into<String>,
        api_key: Option<String>,
        provider_name: impl Into<String>,
        options: HttpOptions,
    ) -> Result<Self, ProviderError> {
        let name = provider_name.into();
        let client = build_client(options, &name)?;
        let base_url = base_url.into();
        Ok(HttpProvider {
            client,
            endpoint: endpoint_url(&base_url, A::PATH),
            shown_url: display_base_url(&base_url),
            api_key: api_key.filter(|k| !k.is_empty()),
            name,
            adapter,
        })
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The adapter, for changing its settings after construction.
    pub(crate) fn adapter_mut(&mut self) -> &mut A {
        &mut self.adapter
    }

    async fn start(&self, request: &ModelRequest) -> Result<EventStream, ProviderError> {
        let body = self.adapter.request_body(request);
        let builder = self
            .client
            .post(&self.endpoint)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body.to_string());
        let response = self
            .adapter
            .headers(builder, self.api_key.as_deref())
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
        Ok(decode(bytes, self.adapter.decoder(self.name.clone())))
    }
}

impl<A: Adapter> Provider for HttpProvider<A> {
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
