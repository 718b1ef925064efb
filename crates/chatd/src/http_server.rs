//! The HTTP/1 server loop of `chatd serve` (API.md "Limits, budgets and the
//! token lifecycle", "Slow or hostile clients").
//!
//! `axum::serve` offers no header-read deadline, so a client that sends its
//! request head one byte at a time (slowloris) could keep a connection, and
//! a task, forever. [`serve`] is the same loop with that deadline: it
//! accepts TCP connections, sets `TCP_NODELAY` on each (stream frames and
//! relayed parts are small and latency-bound), and serves each with hyper's
//! HTTP/1 connection, WebSocket upgrades included, where the request head
//! must arrive within [`HttpDeadlines::header_read`] of the moment the
//! connection starts waiting for it (a fresh connection, or an idle
//! keep-alive one), else hyper closes the connection. The request body's
//! deadline is the API's own layer (`chatd_api::body_deadline`), so that
//! every handler, uploads included, is covered.
//!
//! Shutdown is graceful, as `axum::serve`'s: once `shutdown` is cancelled
//! the listener is dropped (no new connections), every connection finishes
//! its in-flight request and closes, and [`serve`] returns when they all
//! have. Upgraded connections (WebSockets) are no longer hyper's: they end
//! with the live streams.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The deadlines of the HTTP server.
#[derive(Debug, Clone, Copy)]
pub struct HttpDeadlines {
    /// How long a connection may take to send a request head
    /// (`--header-read-timeout`, 30 s).
    pub header_read: Duration,
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then waits
/// for the open connections to finish their requests (see the module doc).
/// Accept errors are logged and retried (after 1 s for errors such as
/// too many open files), never returned.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    deadlines: HttpDeadlines,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let connections = TaskTracker::new();
    loop {
        let tcp = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    accept_failed(err).await;
                    continue;
                }
            },
        };
        let (tcp, peer) = tcp;
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {err}");
        }
        connections.spawn(connection(
            tcp,
            peer,
            router.clone(),
            deadlines,
            shutdown.clone(),
        ));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Serves one connection until it ends; on `shutdown`, lets its in-flight
/// request finish and closes it. Each request carries the peer's address
/// as `ConnectInfo<SocketAddr>` (the sign-in rate limit keys on it).
async fn connection(
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    router: Router,
    deadlines: HttpDeadlines,
    shutdown: CancellationToken,
) {
    // `Router` serves any body type, hyper's `Incoming` included.
    let service = TowerToHyperService::new(tower::ServiceExt::map_request(
        router,
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            request
        },
    ));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(deadlines.header_read);
    let conn = builder
        .serve_connection(TokioIo::new(tcp), service)
        .with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(err) = result {
        // A header deadline, a reset, a malformed request: the client's
        // affair, not the server's.
        tracing::debug!("connection ended: {err}");
    }
}

/// What to do after `accept` failed: connection-level errors (the peer gave
/// up before `accept`) are skipped at once; others (file descriptors
/// exhausted, ...) are logged and retried after 1 s, as `axum::serve` does.
async fn accept_failed(err: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        err.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!("accepting a connection: {err}; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
