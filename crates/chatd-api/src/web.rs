//! The web UI (API.md "Base paths and discovery": `GET /`).
//!
//! Static files from the repository's `web/` directory, embedded in the
//! binary at build time ([`ASSETS`]): the UI's own files (`GET /` serves
//! `index.html`, then `/app.js`, the ES modules it imports (the chat view,
//! the composer, the sidebar, the stream client, the admin pages; every
//! `.js` file of `web/` but the browser tests), `/app.css`) and the
//! third-party libraries vendored under `web/vendor/<name>-<version>/`
//! (Markdown, sanitiser, syntax highlighting; `web/README.md` says which and
//! why). They hold no data, so they need no token; the UI signs in with an
//! API token it keeps in the browser and talks to the same API as every
//! other client (the live view authenticates its WebSocket with the
//! `chatd.bearer.<token>` subprotocol, see [`crate::auth`]).
//!
//! Caching ([`Caching`]): the UI's own files are `no-cache` (a new binary
//! serves new files at once) with an `ETag`, so that a reload revalidates
//! them with `If-None-Match` and gets `304 Not Modified`; vendored files
//! are cached for a year as `immutable`, since their path names their
//! version. Every answer carries a restrictive `Content-Security-Policy`:
//! scripts, styles, fetches and WebSockets to this origin only (CSP Level
//! 3's `'self'` covers `ws:`/`wss:` to the page's own host), no inline
//! script or style, no framing, no plugins. The UI builds HTML only from
//! model text rendered as Markdown and sanitised (DOMPurify, links limited
//! to `http`, `https` and `mailto`), and the policy makes an injection
//! inert anyway.

use axum::Router;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest as _, Sha256};

/// How browsers may cache an [`Asset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caching {
    /// `Cache-Control: no-cache`: revalidate on every use (`ETag`).
    Revalidate,
    /// `Cache-Control: public, max-age=31536000, immutable`: a file whose
    /// path changes with its content (a vendored library's version).
    Immutable,
}

impl Caching {
    fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Self::Revalidate => "no-cache",
            Self::Immutable => "public, max-age=31536000, immutable",
        })
    }
}

/// One embedded file of the UI.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// The URL path it is served at (`/app.js`).
    pub path: &'static str,
    /// Its path under the repository's `web/` directory (`app.js`).
    pub file: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its content.
    pub body: &'static str,
    /// How browsers may cache it.
    pub caching: Caching,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// An [`Asset`] of `web/$file`, served at `$path`.
macro_rules! asset {
    ($path:literal, $file:literal, $content_type:expr, $caching:expr) => {
        Asset {
            path: $path,
            file: $file,
            content_type: $content_type,
            body: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/", $file)),
            caching: $caching,
        }
    };
}

/// Every file the UI serves. `web/vendor/vendor.mjs` writes the vendored
/// ones; a test checks that every `.js` and `.css` file under `web/` is
/// listed here.
pub const ASSETS: &[Asset] = &[
    asset!("/", "index.html", HTML, Caching::Revalidate),
    asset!("/app.js", "app.js", JS, Caching::Revalidate),
    asset!("/markdown.js", "markdown.js", JS, Caching::Revalidate),
    asset!("/ui.js", "ui.js", JS, Caching::Revalidate),
    asset!("/usage.js", "usage.js", JS, Caching::Revalidate),
    asset!("/tokens.js", "tokens.js", JS, Caching::Revalidate),
    asset!("/admin.js", "admin.js", JS, Caching::Revalidate),
    asset!("/api.js", "api.js", JS, Caching::Revalidate),
    asset!("/stream.js", "stream.js", JS, Caching::Revalidate),
    asset!("/wire.js", "wire.js", JS, Caching::Revalidate),
    asset!("/models.js", "models.js", JS, Caching::Revalidate),
    asset!("/sidebar.js", "sidebar.js", JS, Caching::Revalidate),
    asset!("/composer.js", "composer.js", JS, Caching::Revalidate),
    asset!("/new-chat.js", "new-chat.js", JS, Caching::Revalidate),
    asset!("/chat-state.js", "chat-state.js", JS, Caching::Revalidate),
    asset!("/chat-view.js", "chat-view.js", JS, Caching::Revalidate),
    asset!("/messages.js", "messages.js", JS, Caching::Revalidate),
    asset!("/panels.js", "panels.js", JS, Caching::Revalidate),
    asset!(
        "/action-required.js",
        "action-required.js",
        JS,
        Caching::Revalidate
    ),
    asset!("/queue.js", "queue.js", JS, Caching::Revalidate),
    asset!("/workspace.js", "workspace.js", JS, Caching::Revalidate),
    asset!("/signin.js", "signin.js", JS, Caching::Revalidate),
    asset!("/search.js", "search.js", JS, Caching::Revalidate),
    asset!("/shares.js", "shares.js", JS, Caching::Revalidate),
    asset!("/import-chat.js", "import-chat.js", JS, Caching::Revalidate),
    asset!("/app.css", "app.css", CSS, Caching::Revalidate),
    asset!("/features.css", "features.css", CSS, Caching::Revalidate),
    asset!("/workspace.css", "workspace.css", CSS, Caching::Revalidate),
    asset!(
        "/vendor/marked-18.2.1/marked.esm.js",
        "vendor/marked-18.2.1/marked.esm.js",
        JS,
        Caching::Immutable
    ),
    asset!(
        "/vendor/dompurify-3.5.0/purify.min.js",
        "vendor/dompurify-3.5.0/purify.min.js",
        JS,
        Caching::Immutable
    ),
    asset!(
        "/vendor/highlight.js-11.12.0/highlight.min.js",
        "vendor/highlight.js-11.12.0/highlight.min.js",
        JS,
        Caching::Immutable
    ),
    asset!(
        "/vendor/highlight.js-11.12.0/a11y-light.min.css",
        "vendor/highlight.js-11.12.0/a11y-light.min.css",
        CSS,
        Caching::Immutable
    ),
    asset!(
        "/vendor/highlight.js-11.12.0/a11y-dark.min.css",
        "vendor/highlight.js-11.12.0/a11y-dark.min.css",
        CSS,
        Caching::Immutable
    ),
];

/// The `Content-Security-Policy` of every UI file.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; \
object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The `ETag` of `body`: a strong validator, the first 128 bits of its
/// SHA-256 in hex, quoted.
pub fn etag(body: &str) -> String {
    let digest = Sha256::digest(body.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// The routes of every [`Asset`] (`GET` and `HEAD`; no token). Computes
/// the `ETag`s once, here.
pub fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let mut router = Router::new();
    for asset in ASSETS {
        let tag = HeaderValue::from_str(&etag(asset.body)).expect("a hex ETag is a valid header");
        router = router.route(
            asset.path,
            get(move |method: Method, headers: HeaderMap| {
                let tag = tag.clone();
                async move { serve(asset, tag, &method, &headers) }
            }),
        );
    }
    router
}

/// `asset` with its content type and the UI's security and caching headers:
/// `200` with the body, or `304` without when `If-None-Match` names its
/// `ETag` (or is `*`).
fn serve(
    asset: &'static Asset,
    tag: HeaderValue,
    method: &Method,
    headers: &HeaderMap,
) -> Response {
    let fresh = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().trim_start_matches("W/"))
        .any(|v| v == "*" || v.as_bytes() == tag.as_bytes());
    let response_headers: [(HeaderName, HeaderValue); 7] = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        ),
        (header::CACHE_CONTROL, asset.caching.header()),
        (header::ETAG, tag),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
    ];
    if fresh && (method == Method::GET || method == Method::HEAD) {
        return (StatusCode::NOT_MODIFIED, response_headers).into_response();
    }
    (response_headers, asset.body).into_response()
}
