//! The provider layer of chatd: one thin streaming [`Provider`] trait that
//! yields our own [`StreamEvent`]s, and the adapters that speak each vendor's
//! wire format. No database, no agent framework.
//!
//! What this crate owns (DESIGN.md "Layout", `chatd-llm`; spec
//! `chatd-architecture.md` "Generation goroutine" for how the worker uses it):
//! - the request a worker builds from active history ([`ModelRequest`]),
//! - the events a provider streams back ([`StreamEvent`]) and their
//!   accumulation into a [`Response`] ([`ResponseBuilder`], [`collect`]),
//! - errors classified into API.md's `ChatError` kinds ([`ProviderError`],
//!   [`ErrorKind`]) with `retryable` set as API.md "Workers and replicas" lists,
//! - the provider seam: [`ProviderConfig::build`], the one constructor, picks
//!   the [`Adapter`] for a [`chatd_core::ProviderKind`]; one [`HttpProvider`]
//!   drives any adapter over HTTP and one SSE driver ([`sse::decode`]) feeds
//!   its decoder, so an adapter is only its wire types and its decoder,
//! - [`OpenAiProvider`]: OpenAI Chat Completions, which also serves every
//!   OpenAI-compatible server (llama.cpp, vLLM, OpenRouter, ...),
//! - [`AnthropicProvider`]: Anthropic Messages (tool use, extended thinking
//!   with signatures, in-stream errors),
//! - [`projection`]: the repaired copy of history each adapter sends (spec
//!   `durable-agent-loop.md` "Provider compatibility").
//!
//! Invariants every provider stream keeps (the worker and the tests rely on
//! them):
//! - a stream ends either with exactly one [`StreamEvent::Finish`] (the last
//!   event) or with one `Err` item (the last item); nothing follows either;
//! - [`StreamEvent::ToolCallStart`] comes once per call `index`, before any
//!   [`StreamEvent::ToolCallDelta`] of that index, and
//!   [`StreamEvent::ToolCallEnd`] once after its last delta, except for a
//!   call cut off by the output token limit, which never ends (it must not
//!   run);
//! - [`StreamEvent::Usage`] comes at most once, just before `Finish`, and only
//!   when the provider reported usage (unknown usage is not zero usage);
//! - the events do not depend on how the network split the bytes.

pub mod adapter;
pub mod anthropic;
pub mod error;
pub mod event;
pub mod factory;
pub mod http;
pub mod openai;
pub mod projection;
pub mod provider;
pub mod request;
pub mod response;
pub mod sse;

pub use adapter::{Adapter, HttpProvider};
pub use anthropic::AnthropicProvider;
pub use error::{ErrorKind, ProviderError};
pub use event::{FinishReason, StreamEvent, Usage};
pub use factory::ProviderConfig;
pub use http::HttpOptions;
pub use openai::{MaxTokensParam, OpenAiProvider};
pub use provider::{EventStream, Provider};
pub use request::{AttachedFile, ModelRequest, RequestMessage, ToolSpec};
pub use response::{Response, ResponseBuilder, ToolCall, collect};
