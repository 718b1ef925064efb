//! Anthropic Messages (`POST {base_url}/messages`, streaming).
//!
//! Requests carry `x-api-key` (when a key is configured) and
//! `anthropic-version: 2023-06-01`; the base URL includes the version prefix
//! (`https://api.anthropic.com/v1`, API.md "Workers and replicas"). History is
//! projected by [`wire`] and the SSE response decoded by [`stream`]. Error
//! answers are classified by the shared rules of [`crate::error`]: 529 and
//! `overloaded_error` → `overloaded`, 429 → `rate_limit`, and so on. A
//! paused turn (`pause_turn`, server tools) is continued within the same
//! stream by [`paused::ContinuePaused`], which the factory wraps every
//! Anthropic provider in.

pub mod paused;
pub mod stream;
pub mod wire;

pub use paused::ContinuePaused;

use serde_json::Value;

use crate::adapter::{Adapter, HttpProvider};
use crate::request::ModelRequest;

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The base URL used when a provider row has none.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The Messages [`Adapter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Messages;

impl Adapter for Messages {
    type Decoder = stream::Decoder;

    const PATH: &'static str = "messages";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;

    fn request_body(&self, request: &ModelRequest) -> Value {
        wire::request_body(request)
    }

    fn headers(
        &self,
        request: reqwest::RequestBuilder,
        api_key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let request = request.header("anthropic-version", ANTHROPIC_VERSION);
        match api_key {
            Some(key) => request.header("x-api-key", key),
            None => request,
        }
    }

    fn decoder(&self, provider: String) -> stream::Decoder {
        stream::Decoder::new(provider)
    }
}

/// The Messages [`Adapter`] of the request that continues a paused turn
/// ([`wire::continuation_body`]; [`paused::ContinuePaused`] sends it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Continuation;

impl Adapter for Continuation {
    type Decoder = stream::Decoder;

    const PATH: &'static str = Messages::PATH;
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;

    fn request_body(&self, request: &ModelRequest) -> Value {
        wire::continuation_body(request)
    }

    fn headers(
        &self,
        request: reqwest::RequestBuilder,
        api_key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        Messages.headers(request, api_key)
    }

    fn decoder(&self, provider: String) -> stream::Decoder {
        Messages.decoder(provider)
    }
}

/// A provider that speaks Anthropic Messages.
pub type AnthropicProvider = HttpProvider<Messages>;

/// The provider of continuation requests ([`Continuation`]).
pub type ContinuationProvider = HttpProvider<Continuation>;
