//! The web UI's server side: the static files at `/`, `/app.js`,
//! `/markdown.js`, `/app.css` and the vendored libraries under `/vendor/`
//! (no auth, content types, caching, `ETag`s and CSP headers; every file
//! the UI loads is embedded), and the WebSocket authentication browsers
//! use, the `chatd.bearer.<token>` subprotocol, answered with the `chatd`
//! subprotocol.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use chatd_api::web::{ASSETS, Caching};

use futures::StreamExt as _;
use serde_json::Value;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use crate::common::Server;
use crate::stream_support::{EVENT_TIMEOUT, StreamEnv, chat_body, stream_path};

/// `GET path` without a token; returns the response.
async fn get_public(server: &Server, path: &str) -> reqwest::Response {
    server
        .http
        .get(format!("{}{path}", server.base))
        .send()
        .await
        .expect("request")
}

fn header<'a>(resp: &'a reqwest::Response, name: &str) -> &'a str {
    resp.headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn the_root_serves_the_ui_page_without_a_token_with_csp_and_no_cache() {
    let s = Server::start().await;
    let resp = get_public(&s, "/").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&resp, "cache-control"), "no-cache");
    let csp = header(&resp, "content-security-policy").to_owned();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "connect-src 'self';",
        "frame-ancestors 'none'",
        "object-src 'none'",
    ] {
        assert!(csp.contains(directive), "CSP {csp:?} lacks {directive:?}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(header(&resp, "x-content-type-options"), "nosniff");
    let html = resp.text().await.unwrap();
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(
        html.contains(r#"<script type="module" src="/app.js"></script>"#),
        "{html}"
    );
    assert!(html.contains(r#"href="/app.css""#), "{html}");
}

#[tokio::test]
async fn the_script_and_style_sheet_are_served_with_their_content_types() {
    let s = Server::start().await;
    for (path, content_type, needle) in [
        ("/app.js", "text/javascript; charset=utf-8", "chatd.token"),
        // The live view's WebSocket authenticates with the subprotocol.
        (
            "/stream.js",
            "text/javascript; charset=utf-8",
            "chatd.bearer.",
        ),
        ("/app.css", "text/css; charset=utf-8", ".status-badge"),
    ] {
        let resp = get_public(&s, path).await;
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(header(&resp, "content-type"), content_type, "{path}");
        assert_eq!(header(&resp, "cache-control"), "no-cache", "{path}");
        assert!(
            header(&resp, "content-security-policy").contains("default-src 'self'"),
            "{path}"
        );
        let body = resp.text().await.unwrap();
        assert!(body.contains(needle), "{path} lacks {needle:?}");
    }
    // Other paths keep answering 404 in the API error shape.
    let resp = get_public(&s, "/index.html").await;
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["message"], "No such route.");
}

#[tokio::test]
async fn every_asset_is_served_with_its_caching_and_a_reload_revalidates_with_304() {
    let s = Server::start().await;
    for asset in ASSETS {
        let resp = get_public(&s, asset.path).await;
        assert_eq!(resp.status(), 200, "{}", asset.path);
        assert_eq!(
            header(&resp, "content-type"),
            asset.content_type,
            "{}",
            asset.path
        );
        let cache = header(&resp, "cache-control").to_owned();
        match asset.caching {
            Caching::Revalidate => assert_eq!(cache, "no-cache", "{}", asset.path),
            Caching::Immutable => {
                assert!(asset.path.starts_with("/vendor/"), "{}", asset.path);
                assert_eq!(
                    cache, "public, max-age=31536000, immutable",
                    "{}",
                    asset.path
                );
            }
        }
        assert!(
            header(&resp, "content-security-policy").contains("script-src 'self'"),
            "{}",
            asset.path
        );
        assert_eq!(header(&resp, "x-content-type-options"), "nosniff");
        let etag = header(&resp, "etag").to_owned();
        assert!(
            etag.starts_with('"') && etag.ends_with('"') && etag.len() == 34,
            "{etag}"
        );
        let body = resp.text().await.unwrap();
        assert_eq!(body, asset.body, "{}", asset.path);

        // The same ETag (also in a list, or weak) is 304 without a body;
        // another is 200.
        for validator in [etag.clone(), format!("\"x\", W/{etag}"), "*".to_owned()] {
            let resp = s
                .http
                .get(format!("{}{}", s.base, asset.path))
                .header("if-none-match", &validator)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 304, "{} with {validator}", asset.path);
            assert_eq!(header(&resp, "etag"), etag);
            assert_eq!(header(&resp, "cache-control"), cache);
            assert!(resp.text().await.unwrap().is_empty());
        }
        let resp = s
            .http
            .get(format!("{}{}", s.base, asset.path))
            .header("if-none-match", "\"something else\"")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{}", asset.path);
    }
    // A path that is not an asset is still the API's 404.
    let resp = get_public(&s, "/vendor/marked-0.0.0/marked.esm.js").await;
    assert_eq!(resp.status(), 404);
}

/// The repository's `web/` directory.
fn web_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web")
}

/// Every file under `dir` (relative to `web/`), but the browser tests and
/// installed packages.
fn files_under(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap();
        if path.is_dir() {
            if name != "e2e" && name != "node_modules" {
                files_under(&path, out);
            }
        } else {
            let relative = path.strip_prefix(web_dir()).unwrap();
            out.insert(relative.to_str().unwrap().replace('\\', "/"));
        }
    }
}

/// The strings between `open` and the next `close` in `text`.
fn quoted_after<'a>(text: &'a str, open: &str, close: char) -> Vec<&'a str> {
    text.match_indices(open)
        .filter_map(|(at, _)| {
            let rest = &text[at + open.len()..];
            rest.find(close).map(|end| &rest[..end])
        })
        .collect()
}

#[test]
fn every_script_and_style_sheet_under_web_is_embedded_and_every_reference_resolves() {
    let mut files = BTreeSet::new();
    files_under(&web_dir(), &mut files);
    let served: BTreeSet<&str> = ASSETS.iter().map(|a| a.file).collect();
    for file in &files {
        let browser_file = file.ends_with(".css")
            || file.ends_with(".html")
            || (file.ends_with(".js") && !file.starts_with("vendor/vendor."));
        if browser_file {
            assert!(
                served.contains(file.as_str()),
                "web/{file} is not in chatd_api::web::ASSETS"
            );
        }
    }
    for asset in ASSETS {
        assert!(
            files.contains(asset.file),
            "ASSETS lists a missing web/{}",
            asset.file
        );
        // Vendored files live in a directory named with their version.
        if let Some(rest) = asset.file.strip_prefix("vendor/") {
            let dir = rest.split('/').next().unwrap();
            assert!(
                dir.rsplit_once('-')
                    .is_some_and(|(_, v)| v.split('.').count() == 3),
                "{dir} is not <name>-<x.y.z>"
            );
            assert!(
                files.contains(&format!("vendor/{dir}/LICENSE")),
                "web/vendor/{dir} has no LICENSE"
            );
        }
    }
    // What the page, the scripts and the style sheets load is served.
    let paths: BTreeSet<&str> = ASSETS.iter().map(|a| a.path).collect();
    for asset in ASSETS.iter().filter(|a| !a.path.starts_with("/vendor/")) {
        let mut references: Vec<String> = Vec::new();
        if asset.file.ends_with(".html") {
            for r in quoted_after(asset.body, "src=\"", '"')
                .into_iter()
                .chain(quoted_after(asset.body, "href=\"/", '"'))
            {
                references.push(if r.starts_with('/') {
                    r.to_owned()
                } else {
                    format!("/{r}")
                });
            }
        } else if asset.file.ends_with(".js") {
            for r in quoted_after(asset.body, "from './", '\'')
                .into_iter()
                .chain(quoted_after(asset.body, "import './", '\''))
            {
                references.push(format!("/{r}"));
            }
        }
        for r in references {
            assert!(
                paths.contains(r.as_str()),
                "{} loads {r}, which is not served",
                asset.file
            );
        }
    }
}

/// Opens `/stream` with the browser's subprotocols and no `Authorization`
/// header.
async fn connect_with_subprotocol(
    url: &str,
    token: &str,
) -> Result<
    (
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
        tungstenite::handshake::client::Response,
    ),
    tungstenite::Error,
> {
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        format!("chatd, chatd.bearer.{token}").parse().unwrap(),
    );
    tokio_tungstenite::connect_async(request).await
}

/// The HTTP status of a refused handshake.
fn refused_status(result: Result<impl Sized, tungstenite::Error>) -> u16 {
    match result {
        Err(tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(other) => panic!("handshake failed without an HTTP answer: {other}"),
        Ok(_) => panic!("handshake succeeded"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_authenticated_by_subprotocol_gets_chatd_selected_and_the_bootstrap() {
    let env = StreamEnv::start().await;
    let chat = env.create_chat(&env.alice, chat_body("hello there")).await;
    let url = env.replica.ws_url(&stream_path(chat, None));
    let (mut ws, response) = connect_with_subprotocol(&url, &env.alice.token)
        .await
        .expect("handshake");
    assert_eq!(response.status().as_u16(), 101);
    assert_eq!(
        response
            .headers()
            .get("sec-websocket-protocol")
            .map(|v| v.to_str().unwrap()),
        Some("chatd"),
        "the server selects `chatd`, never the token entry"
    );
    // Bootstrap: the first message, then the queue, then the status.
    let mut events: Vec<Value> = Vec::new();
    while !events.iter().any(|e| e["type"] == "status") {
        let frame = tokio::time::timeout(EVENT_TIMEOUT, ws.next())
            .await
            .expect("bootstrap within the timeout")
            .expect("stream open")
            .expect("frame");
        if let tungstenite::Message::Text(text) = frame {
            let batch: Vec<Value> = serde_json::from_str(text.as_str()).unwrap();
            events.extend(batch);
        }
    }
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        &types[..4],
        ["message", "context", "queue_update", "status"],
        "{events:#?}"
    );
    assert_eq!(events[0]["message"]["content"][0]["text"], "hello there");
    assert_eq!(events[0]["chat_id"], chat.to_string());
    assert_eq!(events[3]["status"]["status"], "running");
    let _ = ws.close(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_subprotocol_token_is_401_and_another_users_chat_is_404() {
    let env = StreamEnv::start().await;
    let chat = env.create_chat(&env.alice, chat_body("mine")).await;
    for path in [
        stream_path(chat, None),
        format!("/api/experimental/chats/{chat}/stream?after_id=3"),
    ] {
        let url = env.replica.ws_url(&path);
        let wrong = connect_with_subprotocol(&url, "chatd_not-a-real-token").await;
        assert_eq!(refused_status(wrong), 401, "{path}");
        let empty = connect_with_subprotocol(&url, "").await;
        assert_eq!(refused_status(empty), 401, "{path}");
        let bob = connect_with_subprotocol(&url, &env.bob.token).await;
        assert_eq!(refused_status(bob), 404, "{path}: never reveal the chat");
    }
    // The subprotocol only authenticates WebSocket upgrades: a plain GET
    // carrying it is still 401.
    let resp = env
        .http
        .get(format!("{}/api/v2/chats/{chat}", env.replica.base))
        .header(
            "sec-websocket-protocol",
            format!("chatd, chatd.bearer.{}", env.alice.token),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}
