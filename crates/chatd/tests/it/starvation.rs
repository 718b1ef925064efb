//! The starvation attack of issue 31 against a real `chatd serve`: one
//! member runs 24 uploads whose bodies trickle in a byte a second, more
//! than the replica's 16 pool connections, while another member completes
//! turns (the fake LLM answers) and reads. No upload holds a database
//! session while its body arrives (API.md "Limits, budgets and the token
//! lifecycle", "Slow or hostile clients"), so every request of the other
//! member succeeds at its normal latency, PostgreSQL shows no session
//! `idle in transaction`, and the uploads themselves succeed once their
//! bodies are complete. (Before the fix, each upload held a transaction
//! from its first byte: the pool ran dry and every other request answered
//! `503` after 10 s.) `bench_starvation` measures the same scene.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chatd_testkit::fake_llm::Script;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::support::{ADMIN_TOKEN, Chatd, http};

/// Slow uploads the attacker runs at once.
const UPLOADS: usize = 24;
/// Declared length of each slow upload's body, in bytes.
const UPLOAD_BYTES: usize = 64;
/// How long the victim works while the uploads trickle.
const ATTACK: Duration = Duration::from_secs(10);
/// The slowest answer the victim accepts (a debug build on a busy machine
/// answers these in tens of milliseconds; a starved pool in 10 s).
const NORMAL_LATENCY: Duration = Duration::from_secs(2);

/// A member named `name` and a token of theirs.
async fn member(server: &Chatd, name: &str) -> anyhow::Result<String> {
    let user: Value = http()
        .post(format!("{}/api/v2/users", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"username": name, "role": "member"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = user["id"].as_str().context("user id")?;
    let token: Value = http()
        .post(format!("{}/api/v2/users/{id}/tokens", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(token["token"].as_str().context("token")?.to_owned())
}

/// An upload of [`UPLOAD_BYTES`] that sends one byte a second until
/// `finish` turns true, then the rest at once; returns the status line's
/// code.
async fn slow_upload(
    addr: SocketAddr,
    token: String,
    mut finish: watch::Receiver<bool>,
) -> anyhow::Result<u16> {
    let mut stream = TcpStream::connect(addr).await?;
    let head = format!(
        "POST /api/v2/files?name=slow.txt HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: text/plain\r\nContent-Length: {UPLOAD_BYTES}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let mut sent = 0;
    while !*finish.borrow() && sent < UPLOAD_BYTES - 1 {
        stream.write_all(b"x").await?;
        sent += 1;
        tokio::select! {
            _ = finish.changed() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    stream.write_all(&vec![b'y'; UPLOAD_BYTES - sent]).await?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf)).await??;
        anyhow::ensure!(n > 0, "connection closed before an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&answer);
    line.split_whitespace()
        .nth(1)
        .context("status line")?
        .parse()
        .context("status code")
}

/// One request of the victim: `(what, status, latency)`.
type Sample = (String, u16, Duration);

async fn timed(
    samples: &mut Vec<Sample>,
    what: &str,
    request: reqwest::RequestBuilder,
) -> anyhow::Result<Value> {
    let started = Instant::now();
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    samples.push((what.to_owned(), status, started.elapsed()));
    Ok(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_uploads_of_one_member_never_starve_another_members_turns_and_reads()
-> anyhow::Result<()> {
    let (db, llm, _dir, config) = crate::worker::fixture().await?;
    llm.set_default(Script::text("pong"));
    let server = Chatd::start(&[
        "--postgres-url",
        db.url(),
        "--config",
        &config,
        "--max-db-connections",
        "16",
        "--default-requests-per-minute",
        "100000",
    ])
    .await?;
    let attacker = member(&server, "attacker").await?;
    let victim = member(&server, "victim").await?;

    let (finish, finish_rx) = watch::channel(false);
    let uploads: Vec<_> = (0..UPLOADS)
        .map(|_| {
            tokio::spawn(slow_upload(
                server.addr,
                attacker.clone(),
                finish_rx.clone(),
            ))
        })
        .collect();

    // PostgreSQL's view, four times a second: sessions of this database
    // left `idle in transaction` for more than a second.
    let pool = db.pool().clone();
    let (stop_sampling, mut sampling) = watch::channel(false);
    let sampler = tokio::spawn(async move {
        let mut worst = 0i64;
        while !*sampling.borrow() {
            let idle: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND state = 'idle in transaction'
                   AND now() - state_change > interval '1 second'",
            )
            .fetch_one(&pool)
            .await?;
            worst = worst.max(idle);
            tokio::select! {
                _ = sampling.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
        anyhow::Ok(worst)
    });

    // Let the uploads get going, then work as the victim.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let base = server.url();
    let client = http();
    let mut samples: Vec<Sample> = Vec::new();
    let started = Instant::now();
    let mut turns = 0;
    while started.elapsed() < ATTACK {
        let chat = timed(
            &mut samples,
            "POST /chats",
            client
                .post(format!("{base}/api/v2/chats"))
                .bearer_auth(&victim)
                .json(&json!({"content": [{"type": "text", "text": format!("ping {turns}")}]})),
        )
        .await?;
        let id = chat["id"].as_str().context("chat id")?.to_owned();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let chat = timed(
                &mut samples,
                "GET /chats/{chat}",
                client
                    .get(format!("{base}/api/v2/chats/{id}"))
                    .bearer_auth(&victim),
            )
            .await?;
            if chat["status"] == "waiting" {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the turn never ended: {chat}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let page = timed(
            &mut samples,
            "GET /chats/{chat}/messages",
            client
                .get(format!("{base}/api/v2/chats/{id}/messages"))
                .bearer_auth(&victim),
        )
        .await?;
        let answered = page["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "assistant"));
        anyhow::ensure!(answered, "no answer in {page}");
        turns += 1;
        timed(
            &mut samples,
            "GET /chats",
            client
                .get(format!("{base}/api/v2/chats"))
                .bearer_auth(&victim),
        )
        .await?;
        timed(
            &mut samples,
            "GET /readyz",
            client.get(format!("{base}/readyz")),
        )
        .await?;
    }
    stop_sampling.send(true)?;
    let worst_idle = sampler.await??;

    let failed: Vec<&Sample> = samples.iter().filter(|(_, s, _)| *s >= 300).collect();
    assert!(
        failed.is_empty(),
        "requests failed under the attack: {failed:?}"
    );
    let slowest = samples.iter().max_by_key(|(_, _, d)| *d).unwrap();
    assert!(
        slowest.2 < NORMAL_LATENCY,
        "slowest request under the attack: {slowest:?}"
    );
    assert!(turns >= 3, "only {turns} turns in {ATTACK:?}");
    assert_eq!(
        worst_idle, 0,
        "sessions idle in transaction during the uploads"
    );

    // The uploads were trickling all along; they complete.
    finish.send(true)?;
    for upload in uploads {
        assert_eq!(upload.await??, 201);
    }
    let files = server
        .get_json("/api/v2/files?limit=100", &attacker)
        .await?;
    assert_eq!(files.as_array().map(Vec::len), Some(UPLOADS));
    Ok(())
}
