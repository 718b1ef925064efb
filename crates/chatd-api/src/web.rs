//! The web UI (API.md "Base paths and discovery": `GET /`).
//!
//! Three static files from the repository's `web/` directory, embedded in
//! the binary at build time: `GET /` (`index.html`), `GET /app.js` and
//! `GET /app.css`. They hold no data, so they need no token; the UI signs in
//! with an API token it keeps in the browser and talks to the same API as
//! every other client (the live view authenticates its WebSocket with the
//! `chatd.bearer.<token>` subprotocol, see [`crate::auth`]).
//!
//! Every answer carries `Cache-Control: no-cache` (a new binary serves new
//! files at once) and a restrictive `Content-Security-Policy`: scripts,
//! styles, fetches and WebSockets to this origin only (CSP Level 3's
//! `'self'` covers `ws:`/`wss:` to the page's own host), no inline script or
//! style, no framing, no plugins. The UI never builds HTML
//! from user or model text, and the policy makes an injection inert anyway.

use axum::http::header::{self, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

/// `web/index.html`.
pub const INDEX_HTML: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/index.html"));
/// `web/app.js`.
pub const APP_JS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/app.js"));
/// `web/app.css`.
pub const APP_CSS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/app.css"));

/// The `Content-Security-Policy` of every UI file.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// `GET /`: the UI's HTML page.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /app.js`: the UI's script (an ES module).
pub async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /app.css`: the UI's style sheet.
pub async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// A `200` with `body`, its content type and the UI's security and caching
/// headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 6] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
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
    (headers, body).into_response()
}
