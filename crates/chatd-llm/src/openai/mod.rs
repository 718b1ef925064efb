//! OpenAI Chat Completions, for api.openai.com and every OpenAI-compatible
//! server (llama.cpp, vLLM, OpenRouter, ...).
//!
//! Requests go to `{base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage` (API.md "Workers and replicas": the base URL
//! includes the version prefix). History is projected by [`wire`] and the SSE
//! response decoded by [`stream`]. The key, sent as a bearer token, is
//! optional: local servers take none.

pub mod stream;
pub mod wire;

use serde_json::Value;

use crate::adapter::{Adapter, HttpProvider};
use crate::request::ModelRequest;

pub use wire::MaxTokensParam;

/// The base URL used when a provider row has none.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The Chat Completions [`Adapter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChatCompletions {
    /// The field that carries [`ModelRequest::max_output_tokens`].
    pub max_tokens_param: MaxTokensParam,
}

impl Adapter for ChatCompletions {
    type Decoder = stream::Decoder;

    const PATH: &'static str = "chat/completions";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;

    fn request_body(&self, request: &ModelRequest) -> Value {
        wire::request_body(request, self.max_tokens_param)
    }

    fn headers(
        &self,
        request: reqwest::RequestBuilder,
        api_key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        match api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    fn decoder(&self, provider: String) -> stream::Decoder {
        stream::Decoder::new(provider)
    }
}

/// A provider that speaks OpenAI Chat Completions.
pub type OpenAiProvider = HttpProvider<ChatCompletions>;

impl OpenAiProvider {
    /// Chooses the field that carries [`ModelRequest::max_output_tokens`]
    /// (default `max_completion_tokens`; older compatible servers only know
    /// `max_tokens`).
    pub fn max_tokens_param(mut self, param: MaxTokensParam) -> Self {
        self.adapter_mut().max_tokens_param = param;
        self
    }
}
