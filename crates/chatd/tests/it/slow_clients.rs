//! Slow and hostile clients against a real `chatd serve` (API.md "Limits,
//! budgets and the token lifecycle": "Slow or hostile clients", "Tokens",
//! the open-streams cap, `/readyz`): slowloris heads and trickling bodies
//! are cut at their deadlines, one member's slow bodies do not slow another
//! member down, a 1 MiB WebSocket frame closes the stream with `1009`, a
//! user at the open-streams cap gets `429` while another user connects, a
//! revoked token's WebSocket, SSE and long-poll end within 10 s, and
//! `/readyz` names what is wrong without the database's text.

use std::time::{Duration, Instant};

use chatd_core::Role;
use chatd_store::{tokens, users};
use chatd_testkit::TestDatabase;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use sqlx::Connection as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use uuid::Uuid;

use crate::support::{Chatd, http};
use crate::worker::fixture;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A member with a token, made directly in the database.
struct Member {
    id: Uuid,
    token: String,
}

async fn member(db: &TestDatabase, name: &str) -> anyhow::Result<Member> {
    let user = users::insert(db.pool(), name, Role::Member).await?;
    let token = chatd_api::auth::generate_token();
    tokens::insert(
        db.pool(),
        user.id,
        "test",
        &chatd_api::auth::hash_token(&token),
        None,
    )
    .await?;
    Ok(Member { id: user.id, token })
}

/// `chatd serve` on `db` with the fake model's `config`, no worker, and
/// `extra` flags.
async fn start(db: &TestDatabase, config: &str, extra: &[&str]) -> anyhow::Result<Chatd> {
    let mut args = vec![
        "--postgres-url",
        db.url(),
        "--config",
        config,
        "--no-worker",
    ];
    args.extend_from_slice(extra);
    Chatd::start(&args).await
}

async fn create_chat(server: &Chatd, who: &Member) -> anyhow::Result<Uuid> {
    let response = http()
        .post(format!("{}/api/v2/chats", server.url()))
        .bearer_auth(&who.token)
        .json(&json!({"content": [{"type": "text", "text": "hello"}]}))
        .send()
        .await?;
    anyhow::ensure!(response.status() == 201, "create: {}", response.status());
    let chat: Value = response.json().await?;
    Ok(chat["id"].as_str().unwrap_or_default().parse()?)
}

async fn connect_ws(server: &Chatd, chat: Uuid, token: &str) -> Result<Ws, tungstenite::Error> {
    let url = format!(
        "{}/api/v2/chats/{chat}/stream",
        server.url().replacen("http://", "ws://", 1)
    );
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header"),
    );
    Ok(tokio_tungstenite::connect_async(request).await?.0)
}

/// Reads frames until a close frame (its code) or the end of the
/// connection (`None`), within `timeout`.
async fn close_code(ws: &mut Ws, timeout: Duration) -> anyhow::Result<Option<u16>> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => anyhow::bail!("no close within {timeout:?}"),
            Ok(Some(Ok(tungstenite::Message::Close(frame)))) => {
                return Ok(frame.map(|f| u16::from(f.code)));
            }
            Ok(Some(Ok(_))) => {}
            Ok(None | Some(Err(_))) => return Ok(None),
        }
    }
}

/// Opens an SSE stream; answers the response once its headers are in.
async fn open_sse(server: &Chatd, chat: Uuid, token: &str) -> anyhow::Result<reqwest::Response> {
    Ok(reqwest::Client::new()
        .get(format!("{}/api/v2/chats/{chat}/events", server.url()))
        .bearer_auth(token)
        .send()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_connection_is_closed_at_the_header_deadline() -> anyhow::Result<()> {
    let (db, _llm, _dir, config) = fixture().await?;
    let server = start(&db, &config, &["--header-read-timeout", "1s"]).await?;

    let started = Instant::now();
    let mut tcp = TcpStream::connect(server.addr).await?;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: chatd\r\nX-Slow: ")
        .await?;
    // One byte every 100 ms, never finishing the head.
    let (mut read_half, mut write_half) = tcp.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if write_half.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match read_half.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    let elapsed = started.elapsed();
    trickle.abort();
    assert!(closed.is_ok(), "the slowloris connection was not closed");
    eprintln!("slowloris connection closed after {elapsed:?} (header deadline 1 s)");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(3),
        "closed after {elapsed:?}"
    );

    // A client that sends its head in time is served as before.
    let ready = http()
        .get(format!("{}/healthz", server.url()))
        .send()
        .await?;
    assert_eq!(ready.status(), 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_body_gets_408_and_the_connection_closes_at_the_body_deadline()
-> anyhow::Result<()> {
    let (db, _llm, _dir, config) = fixture().await?;
    let server = start(&db, &config, &["--request-body-timeout", "2s"]).await?;
    let alice = member(&db, "alice").await?;

    let started = Instant::now();
    let mut tcp = TcpStream::connect(server.addr).await?;
    let head = format!(
        "POST /api/v2/chats HTTP/1.1\r\nHost: chatd\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
        alice.token
    );
    tcp.write_all(head.as_bytes()).await?;
    let (mut read_half, mut write_half) = tcp.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..900 {
            if write_half.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut received = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match read_half.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let elapsed = started.elapsed();
    trickle.abort();
    assert!(closed.is_ok(), "the connection stayed open");
    let answer = String::from_utf8_lossy(&received);
    eprintln!("slow body answered and closed after {elapsed:?} (body deadline 2 s)");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(answer.contains("did not arrive in time"), "{answer}");
    assert!(
        elapsed >= Duration::from_millis(1900) && elapsed < Duration::from_secs(5),
        "closed after {elapsed:?}"
    );
    let chats: i64 = sqlx::query_scalar("SELECT count(*) FROM chats")
        .fetch_one(db.pool())
        .await?;
    assert_eq!(chats, 0, "nothing was created");
    Ok(())
}

/// Nearest-rank percentile of sorted `samples`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_s_trickling_bodies_do_not_slow_another_member_down() -> anyhow::Result<()> {
    let (db, _llm, _dir, config) = fixture().await?;
    // A small pool: 24 requests holding a connection each would starve it.
    let server = start(&db, &config, &["--max-db-connections", "4"]).await?;
    let (mallory, bob) = (member(&db, "mallory").await?, member(&db, "bob").await?);

    // 24 chat creations whose bodies arrive one byte every 500 ms.
    let mut trickles = Vec::new();
    for _ in 0..24 {
        let mut tcp = TcpStream::connect(server.addr).await?;
        let head = format!(
            "POST /api/v2/chats HTTP/1.1\r\nHost: chatd\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{{",
            mallory.token
        );
        tcp.write_all(head.as_bytes()).await?;
        trickles.push(tokio::spawn(async move {
            for _ in 0..3000 {
                if tcp.write_all(b" ").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }));
    }
    // Let the trickles reach the handlers.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let client = http();
    let mut latencies = Vec::new();
    for i in 0..20 {
        let started = Instant::now();
        let created = client
            .post(format!("{}/api/v2/chats", server.url()))
            .bearer_auth(&bob.token)
            .json(&json!({"content": [{"type": "text", "text": format!("bob {i}")}]}))
            .send()
            .await?;
        assert_eq!(created.status(), 201, "bob's chat creation {i}");
        latencies.push(started.elapsed());
        let started = Instant::now();
        let listed = client
            .get(format!("{}/api/v2/chats", server.url()))
            .bearer_auth(&bob.token)
            .send()
            .await?;
        assert_eq!(listed.status(), 200, "bob's chat list {i}");
        latencies.push(started.elapsed());
    }
    let ready = client
        .get(format!("{}/readyz", server.url()))
        .send()
        .await?;
    assert_eq!(ready.status(), 200, "readyz during the trickles");
    let idle_in_transaction: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND state = 'idle in transaction'",
    )
    .fetch_one(db.pool())
    .await?;
    assert_eq!(idle_in_transaction, 0, "no session waits on a body");

    latencies.sort();
    let (p50, p99) = (percentile(&latencies, 50.0), percentile(&latencies, 99.0));
    eprintln!(
        "another member's latency while 24 bodies trickle: p50 {p50:?}, p99 {p99:?}, max {:?} ({} requests)",
        latencies[latencies.len() - 1],
        latencies.len()
    );
    assert!(p99 < Duration::from_secs(2), "p99 {p99:?}");
    for trickle in trickles {
        trickle.abort();
    }
    let mallorys: i64 = sqlx::query_scalar("SELECT count(*) FROM chats WHERE owner_id = $1")
        .bind(mallory.id)
        .fetch_one(db.pool())
        .await?;
    assert_eq!(mallorys, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_mib_websocket_frame_closes_the_stream_with_1009() -> anyhow::Result<()> {
    let (db, _llm, _dir, config) = fixture().await?;
    let server = start(&db, &config, &[]).await?;
    let alice = member(&db, "alice").await?;
    let chat = create_chat(&server, &alice).await?;

    let mut ws = connect_ws(&server, chat, &alice.token).await?;
    // The bootstrap frame first: the stream is up.
    let first = tokio::time::timeout(Duration::from_secs(10), ws.next()).await?;
    assert!(
        matches!(first, Some(Ok(tungstenite::Message::Text(_)))),
        "{first:?}"
    );
    // A frame of 64 KiB is still fine.
    ws.send(tungstenite::Message::binary(vec![0u8; 64 * 1024]))
        .await?;
    ws.send(tungstenite::Message::binary(vec![0u8; 1 << 20]))
        .await?;
    let code = close_code(&mut ws, Duration::from_secs(10)).await?;
    assert_eq!(code, Some(1009));

    // The server goes on serving streams.
    let mut again = connect_ws(&server, chat, &alice.token).await?;
    let first = tokio::time::timeout(Duration::from_secs(10), again.next()).await?;
    assert!(
        matches!(first, Some(Ok(tungstenite::Message::Text(_)))),
        "{first:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_at_the_open_streams_cap_gets_429_while_another_user_connects() -> anyhow::Result<()>
{
    let (db, _llm, _dir, config) = fixture().await?;
    let server = start(&db, &config, &["--default-max-open-streams", "2"]).await?;
    let (alice, bob) = (member(&db, "alice").await?, member(&db, "bob").await?);
    let alices = create_chat(&server, &alice).await?;
    let bobs = create_chat(&server, &bob).await?;

    let ws = connect_ws(&server, alices, &alice.token).await?;
    let sse = open_sse(&server, alices, &alice.token).await?;
    assert_eq!(sse.status(), 200);

    // A third stream of alice, of any kind, is refused before any upgrade.
    match connect_ws(&server, alices, &alice.token).await {
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 429);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default())
                .into_owned();
            assert!(body.contains("at most 2"), "{body}");
        }
        other => panic!("expected 429, got {:?}", other.map(|_| "a stream")),
    }
    let refused = open_sse(&server, alices, &alice.token).await?;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await?;
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 2"),
        "{body}"
    );
    let poll = http()
        .get(format!(
            "{}/api/v2/chats/{alices}/updates?after_snapshot_version=999999&wait_ms=100",
            server.url()
        ))
        .bearer_auth(&alice.token)
        .send()
        .await?;
    assert_eq!(poll.status(), 429);

    // Bob is not alice.
    let mut bob_ws = connect_ws(&server, bobs, &bob.token).await?;
    let first = tokio::time::timeout(Duration::from_secs(10), bob_ws.next()).await?;
    assert!(
        matches!(first, Some(Ok(tungstenite::Message::Text(_)))),
        "{first:?}"
    );
    let bob_sse = open_sse(&server, bobs, &bob.token).await?;
    assert_eq!(bob_sse.status(), 200);

    // A stream that ends frees its slot.
    drop(ws);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match connect_ws(&server, alices, &alice.token).await {
            Ok(_) => break,
            Err(tungstenite::Error::Http(r)) if r.status() == 429 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("the slot was not freed: {err}"),
        }
    }
    drop(sse);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_closes_its_websocket_sse_and_long_poll_within_10_s() -> anyhow::Result<()>
{
    let (db, _llm, _dir, config) = fixture().await?;
    let server = start(&db, &config, &[]).await?;
    let (alice, bob) = (member(&db, "alice").await?, member(&db, "bob").await?);
    let chat = create_chat(&server, &alice).await?;
    let bobs = create_chat(&server, &bob).await?;

    let mut ws = connect_ws(&server, chat, &alice.token).await?;
    let mut sse = open_sse(&server, chat, &alice.token).await?;
    assert_eq!(sse.status(), 200);
    let poll = {
        let url = format!(
            "{}/api/v2/chats/{chat}/updates?after_snapshot_version=999999&wait_ms=60000",
            server.url()
        );
        let token = alice.token.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let status = reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .map(|r| r.status().as_u16());
            (status, started)
        })
    };
    let mut bob_ws = connect_ws(&server, bobs, &bob.token).await?;
    // Every stream is up before the revocation.
    let first = tokio::time::timeout(Duration::from_secs(10), ws.next()).await?;
    assert!(
        matches!(first, Some(Ok(tungstenite::Message::Text(_)))),
        "{first:?}"
    );
    let first = tokio::time::timeout(Duration::from_secs(10), sse.chunk()).await??;
    assert!(first.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;

    let revoked = sqlx::query("DELETE FROM api_keys WHERE secret_hash = $1")
        .bind(chatd_api::auth::hash_token(&alice.token))
        .execute(db.pool())
        .await?;
    assert_eq!(revoked.rows_affected(), 1);
    let revoked_at = Instant::now();

    let code = close_code(&mut ws, Duration::from_secs(10)).await?;
    let ws_after = revoked_at.elapsed();
    assert_eq!(code, Some(1008), "policy violation");

    let mut tail = String::new();
    let sse_end = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(chunk)) = sse.chunk().await {
            tail.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    let sse_after = revoked_at.elapsed();
    assert!(sse_end.is_ok(), "the SSE stream did not end");
    assert!(tail.contains(": stream closed: token revoked"), "{tail}");

    let (status, _) = tokio::time::timeout(Duration::from_secs(10), poll).await??;
    let poll_after = revoked_at.elapsed();
    assert_eq!(status?, 401, "the long-poll ends unauthenticated");
    eprintln!(
        "after revocation: websocket closed in {ws_after:?}, SSE ended in {sse_after:?}, long-poll answered in {poll_after:?}"
    );
    assert!(ws_after < Duration::from_secs(10) && sse_after < Duration::from_secs(10));

    // Bob's stream, opened with another token, stays open.
    let bob_next = tokio::time::timeout(Duration::from_millis(500), bob_ws.next()).await;
    assert!(
        !matches!(
            bob_next,
            Ok(Some(Ok(tungstenite::Message::Close(_))) | None)
        ),
        "{bob_next:?}"
    );
    // And the revoked token no longer opens anything.
    match connect_ws(&server, chat, &alice.token).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("expected 401, got {:?}", other.map(|_| "a stream")),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_what_is_wrong_without_the_database_s_text() -> anyhow::Result<()> {
    let (db, _llm, _dir, config) = fixture().await?;
    let server = start(&db, &config, &[]).await?;
    let readyz = || async {
        let response = http()
            .get(format!("{}/readyz", server.url()))
            .send()
            .await?;
        let status = response.status().as_u16();
        anyhow::Ok((status, response.text().await?))
    };
    assert_eq!(readyz().await?.0, 200);

    // A migration missing from the history.
    sqlx::query(
        "DELETE FROM _sqlx_migrations WHERE version = (SELECT max(version) FROM _sqlx_migrations)",
    )
    .execute(db.pool())
    .await?;
    let (status, text) = readyz().await?;
    assert_eq!(status, 503);
    let body: Value = serde_json::from_str(&text)?;
    assert_eq!(body["detail"], "migrations not applied", "{text}");

    // The database refuses connections: the answer is fixed, the cause is
    // in the log only.
    let mut admin = sqlx::PgConnection::connect(&chatd_testkit::admin_url()).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" ALLOW_CONNECTIONS false",
        db.name()
    )))
    .execute(&mut admin)
    .await?;
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(db.name())
        .execute(&mut admin)
        .await?;
    let (status, text) = readyz().await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" ALLOW_CONNECTIONS true",
        db.name()
    )))
    .execute(&mut admin)
    .await?;
    assert_eq!(status, 503, "{text}");
    let body: Value = serde_json::from_str(&text)?;
    assert_eq!(body["message"], "Not ready.", "{text}");
    assert_eq!(body["detail"], "database unreachable", "{text}");
    for leak in [
        db.name(),
        "connection",
        "terminat",
        "FATAL",
        "error",
        "postgres",
    ] {
        assert!(!text.contains(leak), "{leak:?} in {text}");
    }
    admin.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_accepting_and_lets_an_in_flight_request_finish() -> anyhow::Result<()> {
    let (db, _llm, _dir, config) = fixture().await?;
    let mut server = start(&db, &config, &[]).await?;
    let alice = member(&db, "alice").await?;

    let body = json!({"content": [{"type": "text", "text": "in flight"}]}).to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let mut tcp = TcpStream::connect(server.addr).await?;
    let head = format!(
        "POST /api/v2/chats HTTP/1.1\r\nHost: chatd\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{first}",
        alice.token,
        body.len()
    );
    tcp.write_all(head.as_bytes()).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    // The listener closes: new connections are refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(server.addr).await.is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The request in flight completes.
    tcp.write_all(rest.as_bytes()).await?;
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut received)).await??;
    let answer = String::from_utf8_lossy(&received);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let status = server.wait(Duration::from_secs(30)).await?;
    assert!(status.success(), "{status}");
    Ok(())
}
