//! HTTP plumbing shared by the adapters: the client with its timeouts, and
//! the classification of transport failures (API.md "Retries": connection
//! failures and timeouts are retried; timeouts are `timeout`, the rest
//! `generic`).

use std::time::Duration;

use futures::StreamExt as _;

use crate::error::{ErrorKind, ProviderError};

/// Longest error body read from a non-2xx answer, in bytes.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Timeouts of a provider's HTTP client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// Longest wait for the TCP (and TLS) connection. Default 10 s.
    pub connect_timeout: Duration,
    /// Longest silence while waiting for the response headers or for the next
    /// piece of the body; it restarts after every read. Default 120 s, long
    /// enough for a reasoning model that thinks before its first token.
    pub idle_timeout: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// Builds the HTTP client an adapter uses (HTTP/1.1, rustls with the
/// platform's certificate verifier).
///
/// # Errors
/// A non-retryable `generic` error when the client cannot be built.
pub fn build_client(
    options: HttpOptions,
    provider: &str,
) -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .read_timeout(options.idle_timeout)
        .build()
        .map_err(|err| {
            ProviderError::new(
                ErrorKind::Generic,
                format!("cannot build the HTTP client: {err}"),
                provider,
            )
            .with_retryable(false)
        })
}

/// Classifies a transport failure: timeouts → retryable `timeout`;
/// connection failures and broken bodies → retryable `generic`; a request
/// that cannot be built → non-retryable `invalid_request`.
pub fn transport_error(err: &reqwest::Error, provider: &str) -> ProviderError {
    let chain = error_chain(err);
    if err.is_timeout() {
        ProviderError::new(
            ErrorKind::Timeout,
            "the provider did not answer in time",
            provider,
        )
        .with_detail(chain)
    } else if err.is_builder() {
        ProviderError::new(
            ErrorKind::InvalidRequest,
            "the request to the provider is invalid",
            provider,
        )
        .with_detail(chain)
    } else if err.is_connect() {
        ProviderError::new(
            ErrorKind::Generic,
            "cannot connect to the provider",
            provider,
        )
        .with_detail(chain)
    } else {
        ProviderError::new(
            ErrorKind::Generic,
            "the connection to the provider failed",
            provider,
        )
        .with_detail(chain)
    }
}

/// `err` and its sources, joined with `: `.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Reads at most [`MAX_ERROR_BODY_BYTES`] of an error answer's body (lossy
/// UTF-8).
pub(crate) async fn read_error_body(response: reqwest::Response, provider: &str) -> String {
    let status = response.status().as_u16();
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(chunk) => {
                body.extend_from_slice(&chunk);
                if body.len() >= MAX_ERROR_BODY_BYTES {
                    body.truncate(MAX_ERROR_BODY_BYTES);
                    break;
                }
            }
            // The status decides the classification; a body cut short only
            // loses detail.
            Err(err) => {
                tracing::debug!(provider, status, error = %err, "error body cut short");
                break;
            }
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}
