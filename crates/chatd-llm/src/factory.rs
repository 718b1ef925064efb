//! The one constructor that builds a provider of any [`ProviderKind`] from
//! its configuration (one `chat_providers` row).
//!
//! It is the only module that names the adapters; it sits above them
//! ([`crate::adapter`], [`crate::openai`], [`crate::anthropic`]), which
//! depend only on the [`Provider`] trait of [`crate::provider`].
//!
//! Adding a provider kind is an adapter module (its wire types and its
//! [`crate::sse::SseDecoder`], plus an [`Adapter`] impl), a
//! [`ProviderKind`] variant in `chatd-core`, and one arm in
//! [`ProviderConfig::build`].

use std::sync::Arc;

use chatd_core::ProviderKind;

use crate::adapter::{Adapter, HttpProvider};
use crate::anthropic::{Continuation, ContinuePaused, Messages};
use crate::error::ProviderError;
use crate::http::HttpOptions;
use crate::openai::{ChatCompletions, MaxTokensParam};
use crate::provider::Provider;

/// What a provider is built from: one provider row (`chat_providers`).
/// `Debug` prints no key and the base URL without credentials or query.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// The wire protocol it speaks.
    pub kind: ProviderKind,
    /// Base URL with the version prefix; `None` for the kind's default
    /// ([`Adapter::DEFAULT_BASE_URL`]).
    pub base_url: Option<String>,
    /// The key; `None` or empty sends none.
    pub api_key: Option<String>,
    /// The name errors give it ([`Provider::name`]).
    pub name: String,
    /// Timeouts of its HTTP client.
    pub http: HttpOptions,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("kind", &self.kind)
            .field(
                "base_url",
                &self.base_url.as_deref().map(crate::http::display_base_url),
            )
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("name", &self.name)
            .field("http", &self.http)
            .finish()
    }
}

impl ProviderConfig {
    /// The provider for this configuration:
    /// - `openai`: Chat Completions with `max_completion_tokens` (api.openai.com's
    ///   reasoning models reject `max_tokens`);
    /// - `openai-compat`: Chat Completions with `max_tokens`, which every
    ///   compatible server (llama.cpp, vLLM, Ollama, LiteLLM) reads, while some
    ///   silently ignore the newer field;
    /// - `anthropic`: Messages, its paused turns continued
    ///   ([`ContinuePaused`]).
    ///
    /// # Errors
    /// A non-retryable `generic` error when the HTTP client cannot be built.
    pub fn build(self) -> Result<Arc<dyn Provider>, ProviderError> {
        match self.kind {
            ProviderKind::Openai => self.http(ChatCompletions {
                max_tokens_param: MaxTokensParam::MaxCompletionTokens,
            }),
            ProviderKind::OpenaiCompat => self.http(ChatCompletions {
                max_tokens_param: MaxTokensParam::MaxTokens,
            }),
            ProviderKind::Anthropic => {
                let then = self.clone().http(Continuation)?;
                let first = self.http(Messages)?;
                Ok(Arc::new(ContinuePaused::new(first, then)))
            }
        }
    }

    fn http<A: Adapter>(self, adapter: A) -> Result<Arc<dyn Provider>, ProviderError> {
        let base_url = self
            .base_url
            .unwrap_or_else(|| A::DEFAULT_BASE_URL.to_owned());
        let provider =
            HttpProvider::with_adapter(adapter, base_url, self.api_key, self.name, self.http)?;
        Ok(Arc::new(provider))
    }
}
