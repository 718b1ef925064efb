//! HTTP plumbing shared by the adapters: the client with its timeouts, and
//! the classification of transport failures (API.md "Retries": connection
//! failures and timeouts are retried; timeouts are `timeout`, the rest
//! `generic`).
//!
//! The client follows no redirects (API.md "Limits, budgets and the token
//! lifecycle"): a redirect would carry the API key (`Authorization`,
//! `x-api-key`) to wherever the answer points. A `3xx` answer is a
//! non-retryable `invalid_request` error naming the status ([`NoRedirects`]),
//! never retried: the provider's `base_url` has to be fixed.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt as _;

use crate::error::{ErrorKind, ProviderError};

/// Longest error body read from a non-2xx answer, in bytes.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Timeouts of a provider's HTTP client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// The HTTP client an adapter uses (HTTP/1.1, rustls with the platform's
/// certificate verifier), one per distinct `options` for the whole process:
/// a clone shares its connection pool, so a turn reuses the connection of
/// the turn before instead of opening (and TLS-handshaking) a new one, and
/// the platform's root certificates are read from disk once, not at every
/// model call (issue 15: building a client per generation made reading
/// and parsing the certificate store the worker's hottest code).
///
/// # Errors
/// A non-retryable `generic` error when the client cannot be built (the
/// failure is not cached: the next call tries again).
pub fn build_client(
    options: HttpOptions,
    provider: &str,
) -> Result<reqwest::Client, ProviderError> {
    static CLIENTS: OnceLock<Mutex<HashMap<HttpOptions, reqwest::Client>>> = OnceLock::new();
    let clients = CLIENTS.get_or_init(Default::default);
    if let Some(client) = clients
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&options)
    {
        return Ok(client.clone());
    }
    // Built outside the lock: reading the certificate store takes a while.
    let client = reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .read_timeout(options.idle_timeout)
        .redirect(no_redirects())
        .build()
        .map_err(|err| {
            ProviderError::new(
                ErrorKind::Generic,
                format!("cannot build the HTTP client: {err}"),
                provider,
            )
            .with_retryable(false)
        })?;
    Ok(clients
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(options)
        .or_insert(client)
        .clone())
}

/// The redirect policy of provider clients: every redirect is refused with
/// [`NoRedirects`] before anything is sent to its target.
pub fn no_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let refused = NoRedirects {
            status: attempt.status().as_u16(),
            location: display_base_url(attempt.url().as_str()),
        };
        attempt.error(refused)
    })
}

/// A redirect a provider answered with, refused: its status and where it
/// pointed (without credentials or query).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}, a redirect to {location}, which chatd does not follow", status_line(*status))]
pub struct NoRedirects {
    /// The `3xx` status.
    pub status: u16,
    /// The target, as shown in messages.
    pub location: String,
}

/// `HTTP 302 Found`.
fn status_line(status: u16) -> String {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    format!("HTTP {status} {reason}").trim_end().to_owned()
}

/// Classifies a transport failure of a request to `provider` (its display
/// name) at `base_url` (the provider's base URL, named in the message):
///
/// - the server cannot be reached at all (connection refused, the host name
///   does not resolve, no connection within the connect timeout, any other
///   failure to connect): a retryable error whose message says which
///   provider and address are down and why, in words a user understands
///   (`Cannot reach the model server "local" at http://127.0.0.1:8081/v1:
///   connection refused.`); `timeout` for a connect timeout, else `generic`;
/// - other timeouts (no answer or no next piece within the idle timeout):
///   retryable `timeout`;
/// - broken connections and bodies: retryable `generic`;
/// - a request that cannot be built: non-retryable `invalid_request`;
/// - a redirect ([`no_redirects`]): non-retryable `invalid_request` naming
///   the status, with `status_code` set.
///
/// `detail` carries the error and its sources.
pub fn transport_error(err: &reqwest::Error, provider: &str, base_url: &str) -> ProviderError {
    let chain = error_chain(err);
    let server = format!("the model server {provider:?} at {base_url}");
    if let Some(redirect) = find_source::<NoRedirects>(err) {
        let mut error = ProviderError::new(
            ErrorKind::InvalidRequest,
            format!(
                "{} answered {redirect}: set the provider's base URL to the final address.",
                capitalize(&server)
            ),
            provider,
        )
        .with_retryable(false);
        error.status_code = Some(redirect.status);
        return error;
    }
    if err.is_connect() {
        let (kind, why) = connect_failure(err, &chain);
        return ProviderError::new(kind, format!("Cannot reach {server}: {why}."), provider)
            .with_detail(chain);
    }
    if err.is_timeout() {
        ProviderError::new(
            ErrorKind::Timeout,
            format!("{} did not answer in time.", capitalize(&server)),
            provider,
        )
        .with_detail(chain)
    } else if err.is_builder() {
        ProviderError::new(
            ErrorKind::InvalidRequest,
            format!("The request to {server} is invalid."),
            provider,
        )
        .with_detail(chain)
    } else {
        ProviderError::new(
            ErrorKind::Generic,
            format!("The connection to {server} failed."),
            provider,
        )
        .with_detail(chain)
    }
}

/// Why a connection could not be made, from the error's sources: the kind
/// (`timeout` for a connect timeout, else `generic`) and a phrase.
fn connect_failure(err: &reqwest::Error, chain: &str) -> (ErrorKind, String) {
    use std::io::ErrorKind as Io;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut io_kind = None;
    let mut innermost = String::new();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        innermost = cause.to_string();
        source = cause.source();
    }
    if err.is_timeout() || io_kind == Some(Io::TimedOut) {
        return (
            ErrorKind::Timeout,
            "no connection within the connect timeout".to_owned(),
        );
    }
    let why = match io_kind {
        Some(Io::ConnectionRefused) => "connection refused".to_owned(),
        Some(Io::ConnectionReset) => "the connection was reset".to_owned(),
        Some(Io::HostUnreachable) => "the host is unreachable".to_owned(),
        Some(Io::NetworkUnreachable) => "the network is unreachable".to_owned(),
        Some(Io::AddrNotAvailable) => "the address is not available".to_owned(),
        _ if chain.contains("dns error") => "its host name could not be resolved".to_owned(),
        _ if innermost.is_empty() => "the connection failed".to_owned(),
        _ => innermost,
    };
    (ErrorKind::Generic, why)
}

/// The URL of endpoint `path` (`chat/completions`, `messages`) below
/// `base_url` (API.md "Provider requests": `{base_url}/{path}`): the path is
/// appended to the base URL's path, so a query string the base URL carries
/// (some gateways take their key as `?api-key=...`) stays after it
/// (`http://h/v1?k=1` → `http://h/v1/chat/completions?k=1`); a fragment is
/// dropped. A base URL that does not parse is joined as text.
pub(crate) fn endpoint_url(base_url: &str, path: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(mut url) if !url.cannot_be_a_base() => {
            let joined = format!("{}/{}", url.path().trim_end_matches('/'), path);
            url.set_path(&joined);
            url.set_fragment(None);
            url.to_string()
        }
        _ => format!("{}/{}", base_url.trim_end_matches('/'), path),
    }
}

/// `base_url` as shown in messages: without credentials (`user:password@`)
/// or query, and without a trailing `/`; unchanged when it does not parse.
pub(crate) fn display_base_url(base_url: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.as_str().trim_end_matches('/').to_owned()
        }
        Err(_) => base_url.trim_end_matches('/').to_owned(),
    }
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The first of `err`'s sources that is a `T`.
fn find_source<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(found) = cause.downcast_ref::<T>() {
            return Some(found);
        }
        source = cause.source();
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_path_goes_before_the_base_urls_query() {
        assert_eq!(
            endpoint_url("https://api.openai.com/v1", "chat/completions"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            endpoint_url("http://127.0.0.1:8081/v1/", "chat/completions"),
            "http://127.0.0.1:8081/v1/chat/completions"
        );
        assert_eq!(
            endpoint_url("http://gw.example/v1?api-key=X#frag", "messages"),
            "http://gw.example/v1/messages?api-key=X"
        );
        assert_eq!(
            endpoint_url("http://h:1", "chat/completions"),
            "http://h:1/chat/completions"
        );
        assert_eq!(endpoint_url("not a url/", "messages"), "not a url/messages");
    }
}
