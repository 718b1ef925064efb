//! The one trait every provider implements, and the stream it returns.
//!
//! This module names no adapter: the adapters ([`crate::adapter`],
//! [`crate::openai`], [`crate::anthropic`]) depend on it, and the one
//! constructor that picks an adapter for a provider kind lives above them in
//! [`crate::factory`].

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use crate::error::ProviderError;
use crate::event::StreamEvent;
use crate::request::ModelRequest;

/// The events of one model response. It ends after a
/// [`StreamEvent::Finish`] or after the first `Err` item (see the crate docs
/// for the full ordering). Dropping it aborts the request.
pub type EventStream = BoxStream<'static, Result<StreamEvent, ProviderError>>;

/// A streaming LLM provider (one configured provider row: vendor, base URL,
/// key).
///
/// The trait is object safe: the worker holds `Arc<dyn Provider>`.
pub trait Provider: Send + Sync {
    /// The provider's name as shown in `ChatError.provider` (for example
    /// `openai`, or the provider row's name).
    fn name(&self) -> &str;

    /// Sends `request` and returns the response's event stream once the
    /// provider has accepted the request (a 2xx status).
    ///
    /// # Errors
    /// A classified [`ProviderError`] when the request cannot be sent, the
    /// connection fails or times out, or the provider answers with an error
    /// status. Errors after the stream started arrive as `Err` items of the
    /// stream instead.
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<EventStream, ProviderError>>;
}
