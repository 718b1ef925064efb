//! `--takeover N`: how long a chat waits after its owner dies (issue 14,
//! "Measure": kill -9 → new owner, and → first new part on a watching
//! client; p50 and max over N kills).
//!
//! Two replicas on the private cluster; per round a chat gets a slow answer
//! (the fake LLM streams it in 60 parts 250 ms apart), a watcher subscribes
//! through the replica that does not own it (SSE `/events`), and once the
//! watcher has seen the first attempt's parts the owner gets SIGKILL. The
//! round measures from the kill until the chat's `worker_id` names the
//! survivor, and until the watcher receives the first `message_part` of a
//! later attempt. The killed replica is restarted before the next round, so
//! every round starts with two replicas and either may own the chat.
//!
//! The replicas run with chatd's defaults unless `--takeover-lease` is
//! given (then `--lease-stale-after` is that, everything else default).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};
use sqlx::Connection as _;

use crate::cluster::{ADMIN_TOKEN, FakeLlm, PgCluster, Replica};

/// What one round measured.
struct Round {
    owner_after: Duration,
    part_after: Duration,
}

/// Runs `kills` rounds and prints every round and the p50 and max of both
/// figures.
///
/// # Errors
/// When a process does not start, or a round does not complete within
/// `lease + 60 s`.
pub async fn run(
    kills: usize,
    lease: Option<Duration>,
    chatd: PathBuf,
    fake_llm: &Path,
    pg_bin: PathBuf,
    logs: &Path,
) -> anyhow::Result<()> {
    let pg = PgCluster::start(pg_bin)
        .await
        .context("starting the private PostgreSQL cluster")?;
    pg.create_database().await?;
    let llm = FakeLlm::start_mode(fake_llm, &logs.join("fake-llm.log"), "scripted:60:250").await?;
    let config = llm.write_config(logs)?;
    let mut args = vec![
        "--postgres-url".to_owned(),
        pg.url(),
        "--config".to_owned(),
        config.to_str().context("path")?.to_owned(),
    ];
    if let Some(lease) = lease {
        args.push("--lease-stale-after".to_owned());
        args.push(humantime::format_duration(lease).to_string());
    }
    let mut replicas = Vec::new();
    for i in 0..2 {
        let mut r = Replica::new(
            i,
            chatd.clone(),
            args.clone(),
            logs.join(format!("replica-{i}.log")),
        )?;
        r.start().await?;
        replicas.push(r);
    }
    let url = pg.url();
    let http = reqwest::Client::new();
    let bound = lease.unwrap_or(Duration::from_secs(30)) + Duration::from_secs(60);
    println!(
        "takeover: {kills} kills, lease {}",
        lease.map_or("default (30s)".to_owned(), |l| format!("{l:?}"))
    );
    let mut rounds = Vec::new();
    for round in 0..kills {
        let measured = tokio::time::timeout(bound, one_round(round, &mut replicas, &url, &http))
            .await
            .with_context(|| format!("round {round} did not complete within {bound:?}"))??;
        println!(
            "takeover: round {round}: new owner after {:?}, first new part after {:?}",
            measured.owner_after, measured.part_after
        );
        rounds.push(measured);
    }
    let summary = |name: &str, mut values: Vec<Duration>| {
        values.sort();
        if let (Some(p50), Some(max)) = (values.get(values.len() / 2), values.last()) {
            println!(
                "takeover: {name}: p50 {p50:?}, max {max:?} over {} kills",
                values.len()
            );
        }
    };
    summary(
        "kill -9 -> new owner",
        rounds.iter().map(|r| r.owner_after).collect(),
    );
    summary(
        "kill -9 -> first new part on a watcher",
        rounds.iter().map(|r| r.part_after).collect(),
    );
    for r in &mut replicas {
        r.stop().await;
    }
    pg.stop().await;
    Ok(())
}

async fn one_round(
    round: usize,
    replicas: &mut [Replica],
    url: &str,
    http: &reqwest::Client,
) -> anyhow::Result<Round> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let db = &mut conn;
    let entry = &replicas[round % replicas.len()].url;
    let created: Value = http
        .post(format!("{entry}/api/v2/chats"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"content": [{"type": "text", "text": format!("slow round {round}")}]}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let chat: uuid::Uuid = created["id"].as_str().context("chat id")?.parse()?;
    // The owner, once the first attempt runs.
    let owner: uuid::Uuid = loop {
        let worker: Option<uuid::Uuid> =
            sqlx::query_scalar("SELECT worker_id FROM chats WHERE id = $1")
                .bind(chat)
                .fetch_one(&mut *db)
                .await?;
        if let Some(worker) = worker {
            break worker;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let owner_url: String = sqlx::query_scalar("SELECT advertise_url FROM replicas WHERE id = $1")
        .bind(owner)
        .fetch_one(&mut *db)
        .await?;
    let owner_index = replicas
        .iter()
        .position(|r| r.url == owner_url)
        .context("the owner is none of the replicas")?;
    let survivor = &replicas[1 - owner_index];
    // The newest row of its URL (a restarted replica registers anew).
    let survivor_id: uuid::Uuid = sqlx::query_scalar(
        "SELECT id FROM replicas WHERE advertise_url = $1 ORDER BY started_at DESC LIMIT 1",
    )
    .bind(&survivor.url)
    .fetch_one(&mut *db)
    .await?;
    let mut events = http
        .get(format!("{}/api/v2/chats/{chat}/events", survivor.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?
        .error_for_status()?;
    // The first attempt's parts reach the watcher (relayed from the owner).
    let mut buffer = String::new();
    let (_, first_attempt) = next_part(&mut events, &mut buffer).await?;
    replicas[owner_index].kill9().await;
    let killed = Instant::now();
    // The new owner, polled every 5 ms, while the watcher runs alongside.
    let watch = async {
        loop {
            let (_, attempt) = next_part(&mut events, &mut buffer).await?;
            if attempt > first_attempt {
                return anyhow::Ok(killed.elapsed());
            }
        }
    };
    let poll = async {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        loop {
            let worker: Option<uuid::Uuid> =
                sqlx::query_scalar("SELECT worker_id FROM chats WHERE id = $1")
                    .bind(chat)
                    .fetch_one(&mut conn)
                    .await?;
            if worker == Some(survivor_id) {
                return anyhow::Ok(killed.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (part_after, owner_after) = tokio::try_join!(watch, poll)?;
    replicas[owner_index].start().await?;
    // Let the answer finish so the next round's chat is the only busy one.
    loop {
        let status: String = sqlx::query_scalar("SELECT status FROM chats WHERE id = $1")
            .bind(chat)
            .fetch_one(&mut *db)
            .await?;
        if status != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Round {
        owner_after,
        part_after,
    })
}

/// Reads SSE events from `events` until a `message_part`; returns its
/// `(history_version, generation_attempt)`.
async fn next_part(
    events: &mut reqwest::Response,
    buffer: &mut String,
) -> anyhow::Result<(i64, i64)> {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&data)?;
            if value["type"] == "message_part" {
                let part = &value["message_part"];
                return Ok((
                    part["history_version"].as_i64().unwrap_or_default(),
                    part["generation_attempt"].as_i64().unwrap_or_default(),
                ));
            }
        }
        let chunk = events
            .chunk()
            .await?
            .context("the watcher's stream ended")?;
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}
