//! The HTTP side of `chatd chat`: a small client for the chat routes of
//! API.md ("Chat routes") and the stream's WebSocket upgrade, with error
//! messages a terminal user can act on: the API error body's `message`,
//! `detail` and `validations` for a non-2xx answer, and the server URL when
//! it cannot be reached.
//!
//! An `https://` server is trusted by one policy for the REST calls and the
//! `wss://` stream: rustls with the aws-lc-rs provider and the platform's
//! certificate verifier (rustls-platform-verifier), which reqwest's `rustls`
//! feature uses for the REST calls and [`Client::stream`] is given as its
//! connector. On Linux that verifier trusts the system's roots, or the PEM
//! file `SSL_CERT_FILE` names; on macOS and Windows the OS verifies.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use chatd_api::ErrorBody;
use reqwest::{Method, StatusCode};
use rustls::ClientConfig;
use rustls_platform_verifier::BuilderVerifierExt as _;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::{Connector, tungstenite};

use super::wire::Chat;

/// A WebSocket connection to the chat stream.
pub type StreamSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long one REST request may take, in seconds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A client of one chatd server, authenticated with one API token.
/// `Debug` prints no token.
#[derive(Clone)]
pub struct Client {
    /// The base URL without a trailing slash, e.g. `http://127.0.0.1:3000`.
    base: String,
    token: String,
    http: reqwest::Client,
    /// The TLS configuration of the `wss://` stream, for an `https://`
    /// server (`None` for `http://`). Built once, so the roots are loaded
    /// once per command, not on every reconnect.
    tls: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// Largest file the server takes (API.md "Files"), in bytes.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// The media type of the file at `path`, from its extension (images, text,
/// JSON, PDF); `application/octet-stream` for anything else.
pub fn media_type_of(path: &std::path::Path) -> &'static str {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "txt" | "log" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "rs" | "py" | "go" | "js" | "ts" | "sh" | "toml" | "yaml" | "yml" | "sql" | "c" | "h" => {
            "text/plain"
        }
        "json" => "application/json",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}

impl Client {
    /// A client of the server at `url` (`http://` or `https://`).
    ///
    /// # Errors
    /// When `url` does not parse or has another scheme, or (`https://`) the
    /// platform's verifier cannot be set up (on Linux: no root certificate
    /// could be loaded).
    pub fn new(url: &str, token: String) -> anyhow::Result<Self> {
        let parsed = url::Url::parse(url).with_context(|| format!("invalid server URL {url:?}"))?;
        let tls = match parsed.scheme() {
            "http" => None,
            "https" => Some(Arc::new(tls_config()?)),
            _ => bail!("invalid server URL {url:?}: expected http:// or https://"),
        };
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            token,
            http,
            tls,
        })
    }

    /// Sends `method /api/v2{path}` with an optional JSON body and decodes
    /// the 2xx answer as `T`.
    ///
    /// # Errors
    /// The server is unreachable (the message names the URL), answered
    /// non-2xx (the API error's message, detail and validations), or sent
    /// a body that does not decode.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<T> {
        let url = format!("{}/api/v2{path}", self.base);
        let mut request = self
            .http
            .request(method.clone(), &url)
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|err| self.transport(&err))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|err| self.transport(&err))?;
        if !status.is_success() {
            return Err(api_error(status, &bytes, &format!("{method} {path}")));
        }
        serde_json::from_slice(&bytes)
            .with_context(|| format!("decoding the answer of {method} {path}"))
    }

    /// Sends `method /api/v2{path}` without a body and expects a 2xx answer
    /// whose body, if any, is not read (`DELETE` → `204`).
    ///
    /// # Errors
    /// As [`Client::call`], but for decoding.
    pub async fn call_no_content(&self, method: Method, path: &str) -> anyhow::Result<()> {
        let url = format!("{}/api/v2{path}", self.base);
        let response = self
            .http
            .request(method.clone(), &url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|err| self.transport(&err))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|err| self.transport(&err))?;
        if !status.is_success() {
            return Err(api_error(status, &bytes, &format!("{method} {path}")));
        }
        Ok(())
    }

    /// `GET /api/v2{path}`: the 2xx answer's body as bytes, undecoded (a
    /// file such as a chat export).
    ///
    /// # Errors
    /// As [`Client::call`], but for decoding.
    pub async fn get_bytes(&self, path: &str) -> anyhow::Result<Vec<u8>> {
        let url = format!("{}/api/v2{path}", self.base);
        let response = self
            .http
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|err| self.transport(&err))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|err| self.transport(&err))?;
        if !status.is_success() {
            return Err(api_error(status, &bytes, &format!("GET {path}")));
        }
        Ok(bytes.to_vec())
    }

    /// Uploads the file at `path` (`POST /files?name=`, its media type
    /// guessed from the extension: [`media_type_of`]); returns its id.
    ///
    /// # Errors
    /// The file cannot be read or is over [`MAX_FILE_BYTES`] (checked
    /// before anything is sent), or as [`Client::call`].
    pub async fn upload(&self, path: &std::path::Path) -> anyhow::Result<String> {
        let size = tokio::fs::metadata(path)
            .await
            .with_context(|| format!("reading {}", path.display()))?
            .len();
        if size > MAX_FILE_BYTES {
            bail!(
                "{} is {size} bytes; the server takes files of at most {MAX_FILE_BYTES} bytes",
                path.display()
            );
        }
        let bytes = tokio::fs::read(path)
            .await
            .with_context(|| format!("reading {}", path.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".to_owned());
        let mut url = url::Url::parse(&format!("{}/api/v2/files", self.base))
            .context("building the upload URL")?;
        url.query_pairs_mut().append_pair("name", &name);
        let response = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .header(reqwest::header::CONTENT_TYPE, media_type_of(path))
            .body(bytes)
            .send()
            .await
            .map_err(|err| self.transport(&err))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|err| self.transport(&err))?;
        if !status.is_success() {
            return Err(api_error(
                status,
                &body,
                &format!("uploading {}", path.display()),
            ));
        }
        let file: Value = serde_json::from_slice(&body).context("decoding the uploaded file")?;
        file["id"]
            .as_str()
            .map(str::to_owned)
            .context("the uploaded file has no id")
    }

    /// `GET /chats/{chat}`.
    ///
    /// # Errors
    /// As [`Client::call`].
    pub async fn chat(&self, chat: &str) -> anyhow::Result<Chat> {
        self.call(Method::GET, &format!("/chats/{chat}"), None)
            .await
    }

    /// The id of the newest committed message of `chat` (0 when none), via
    /// `GET /chats/{chat}/messages?limit=1`.
    ///
    /// # Errors
    /// As [`Client::call`].
    pub async fn newest_message_id(&self, chat: &str) -> anyhow::Result<i64> {
        let page: Value = self
            .call(
                Method::GET,
                &format!("/chats/{chat}/messages?limit=1"),
                None,
            )
            .await?;
        Ok(page["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["id"].as_i64())
            .unwrap_or(0))
    }

    /// The `{user}` of a path under `/users/`: `me` and user ids as given;
    /// a username is looked up in `GET /users` (admins only).
    ///
    /// # Errors
    /// An empty `user`, a username no user has, or the lookup's error.
    pub async fn user_path(&self, user: &str) -> anyhow::Result<String> {
        let user = user.trim();
        anyhow::ensure!(!user.is_empty(), "--user must not be empty");
        if user == "me" {
            return Ok("me".to_owned());
        }
        if let Ok(id) = user.parse::<uuid::Uuid>() {
            return Ok(id.to_string());
        }
        let users: Vec<Value> = self
            .call(Method::GET, "/users", None)
            .await
            .with_context(|| format!("looking up the user {user:?} (by name: admins only)"))?;
        users
            .iter()
            .find(|u| u["username"] == user)
            .and_then(|u| u["id"].as_str())
            .map(str::to_owned)
            .with_context(|| format!("no user is named {user:?}"))
    }

    /// Opens `GET /chats/{chat}/stream?after_id=N` (WebSocket, the token in
    /// the upgrade request's `Authorization` header): `ws://` for an
    /// `http://` server URL, `wss://` for `https://`. The certificate is
    /// checked as for the REST calls, by the platform's verifier (the
    /// configuration built in [`Client::new`]): on Linux against the
    /// system's roots, or the PEM file `SSL_CERT_FILE` names.
    ///
    /// # Errors
    /// The server is unreachable, its certificate is not trusted, or it
    /// refused the upgrade (the API error's message).
    pub async fn stream(&self, chat: &str, after_id: i64) -> anyhow::Result<StreamSocket> {
        let ws_base = if let Some(rest) = self.base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else if let Some(rest) = self.base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else {
            bail!(
                "invalid server URL {:?}: expected http:// or https://",
                self.base
            );
        };
        let mut url = format!("{ws_base}/api/v2/chats/{chat}/stream");
        if after_id > 0 {
            url.push_str(&format!("?after_id={after_id}"));
        }
        let mut request = url.into_client_request()?;
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.token)
                .parse()
                .context("the token is not a valid header value")?,
        );
        // `Plain` for ws://: a wss:// URL without our configuration fails
        // rather than falling back to tokio-tungstenite's own roots.
        let connector = match &self.tls {
            Some(config) => Connector::Rustls(Arc::clone(config)),
            None => Connector::Plain,
        };
        let connect =
            tokio_tungstenite::connect_async_tls_with_config(request, None, false, Some(connector));
        match tokio::time::timeout(REQUEST_TIMEOUT, connect).await {
            Err(_) => bail!(
                "the chatd server at {} did not answer the stream upgrade within {}s",
                self.base,
                REQUEST_TIMEOUT.as_secs()
            ),
            Ok(Ok((socket, _))) => Ok(socket),
            Ok(Err(tungstenite::Error::Http(response))) => {
                let status = StatusCode::from_u16(response.status().as_u16())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let body = response.body().clone().unwrap_or_default();
                Err(api_error(status, &body, "opening the stream"))
            }
            Ok(Err(err)) => Err(anyhow!(
                "cannot reach the chatd server at {}: {err}",
                self.base
            )),
        }
    }

    fn transport(&self, err: &reqwest::Error) -> anyhow::Error {
        // reqwest's Display stops at "error sending request"; the source
        // chain says why (connection refused, timed out, ...).
        let mut cause = String::new();
        let mut source = std::error::Error::source(err);
        while let Some(s) = source {
            cause = s.to_string();
            source = s.source();
        }
        if err.is_timeout() {
            anyhow!("the chatd server at {} did not answer in time", self.base)
        } else if cause.is_empty() {
            anyhow!("cannot reach the chatd server at {}: {err}", self.base)
        } else {
            anyhow!("cannot reach the chatd server at {}: {cause}", self.base)
        }
    }
}

/// The TLS configuration of `wss://` streams: what reqwest's `rustls`
/// feature builds for the REST calls (the aws-lc-rs provider, TLS 1.2 and
/// 1.3, the platform's verifier), without client certificates.
///
/// # Errors
/// The platform's verifier cannot be set up (on Linux: no root certificate
/// could be loaded).
fn tls_config() -> anyhow::Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("setting up TLS")?
        .with_platform_verifier()
        .context("setting up the platform's certificate verifier")?
        .with_no_client_auth())
}

/// The error for a non-2xx answer to `what`: `MESSAGE (HTTP STATUS)`, then
/// the detail and each validation on its own line; a hint on `401`.
fn api_error(status: StatusCode, body: &[u8], what: &str) -> anyhow::Error {
    let mut message = String::new();
    let mut text = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(error) if !error.message.is_empty() => {
            message.clone_from(&error.message);
            let mut text = format!("{} (HTTP {status}, {what})", error.message);
            if let Some(detail) = error.detail.filter(|d| !d.is_empty()) {
                text.push_str(&format!("\n  {detail}"));
            }
            for v in error.validations {
                text.push_str(&format!("\n  {}: {}", v.field, v.detail));
            }
            text
        }
        _ => {
            let body = String::from_utf8_lossy(body);
            let body = body.trim();
            if body.is_empty() {
                format!("HTTP {status} ({what})")
            } else {
                format!("HTTP {status} ({what}): {body}")
            }
        }
    };
    if status == StatusCode::UNAUTHORIZED {
        text.push_str("\n  check the API token (--token or CHATD_TOKEN)");
    }
    anyhow::Error::new(ApiFailure {
        status,
        message,
        text,
    })
}

/// A non-2xx answer: its status, and the text [`Client::call`]'s errors
/// show (the API error's message, detail and validations). A subcommand
/// that words some statuses its own way finds it with
/// `err.downcast_ref::<ApiFailure>()`.
#[derive(Debug)]
pub struct ApiFailure {
    /// The HTTP status.
    pub status: StatusCode,
    /// The API error's `message` (empty when the body was not one).
    pub message: String,
    /// `MESSAGE (HTTP STATUS, WHAT)`, then the detail and validations.
    pub text: String,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for ApiFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_show_message_detail_and_validations() {
        let body = br#"{"message":"Invalid request.","detail":"see below",
            "validations":[{"field":"content","detail":"must not be empty"}]}"#;
        let err = api_error(StatusCode::BAD_REQUEST, body, "POST /chats");
        assert_eq!(
            err.to_string(),
            "Invalid request. (HTTP 400 Bad Request, POST /chats)\n  see below\n  content: must not be empty"
        );
        let err = api_error(StatusCode::UNAUTHORIZED, b"", "GET /chats");
        assert_eq!(
            err.to_string(),
            "HTTP 401 Unauthorized (GET /chats)\n  check the API token (--token or CHATD_TOKEN)"
        );
    }

    #[test]
    fn only_http_urls_are_accepted() {
        assert!(Client::new("http://127.0.0.1:3000/", "t".into()).is_ok());
        assert_eq!(
            Client::new("http://h:1/", "t".into()).unwrap().base,
            "http://h:1"
        );
        assert!(Client::new("ftp://h", "t".into()).is_err());
        assert!(Client::new("not a url", "t".into()).is_err());
        // Only an https:// server needs the stream's TLS configuration.
        assert!(Client::new("http://h:1", "t".into()).unwrap().tls.is_none());
        assert!(
            Client::new("https://h:1", "t".into())
                .unwrap()
                .tls
                .is_some()
        );
    }

    /// The test certificates of the `cli` integration tests: `server.pem`,
    /// for `localhost`, is signed by a test CA that no system trusts.
    const TLS_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

    /// The `cli` integration tests check an untrusted certificate through
    /// the REST call that precedes every stream; this opens the stream
    /// itself.
    #[tokio::test]
    async fn a_wss_stream_to_a_server_with_an_untrusted_certificate_fails_naming_the_certificate()
    -> anyhow::Result<()> {
        use tokio_rustls::rustls::ServerConfig;
        use tokio_rustls::rustls::pki_types::pem::PemObject as _;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_file_iter(format!("{TLS_FIXTURES}/server.pem"))?
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(format!("{TLS_FIXTURES}/server.key"))?;
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        // The server's side of the one handshake: whether it completed.
        let (handshake_tx, handshake) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            if let Ok((tcp, _)) = listener.accept().await {
                let _ = handshake_tx.send(acceptor.accept(tcp).await.map(|_| ()));
            }
        });

        let url = format!("https://localhost:{port}");
        let client = Client::new(&url, "t".into())?;
        let Err(err) = client.stream("c", 0).await else {
            panic!("the stream opened despite the untrusted certificate");
        };
        let text = format!("{err:#}");
        assert!(
            text.starts_with(&format!("cannot reach the chatd server at {url}: ")),
            "{text}"
        );
        assert!(
            text.contains("invalid peer certificate: UnknownIssuer"),
            "{text}"
        );
        // The client aborted the TLS handshake: the refusal is the wss://
        // connection's own, not a later failure.
        let server = handshake.await?;
        assert!(server.is_err(), "the server completed the handshake");
        Ok(())
    }
}
