//! The noisy tenant of a chaos run (issue 31, "no user can starve
//! another"): one extra member that, for the whole run, pushes against every
//! limit it has while the other clients' invariants are checked as usual.
//!
//! Its user is made by the admin with low per-user limits
//! ([`NOISY_REQUESTS_PER_MINUTE`], [`NOISY_STORAGE_BYTES`]); the replicas'
//! own defaults are high, so only the noisy tenant meets them. It runs, on
//! random live replicas:
//! - uploaders (`POST /api/v2/files`) with slow bodies: some complete
//!   slowly (`201` until the storage quota, then `413`), some are over the
//!   file size limit (`413`), some trickle forever and meet the replicas'
//!   body deadline (`408`);
//! - a streamer that opens SSE streams of its chat and holds them until the
//!   open-streams cap answers `429`, then lets some go;
//! - a sender that posts messages to its chat without pausing (`200`, then
//!   `429` from the rate limit, or `409`/`429` from the queue).
//!
//! Nothing it does touches the chats the checker looks at; what it saw is
//! printed as `chaos: noisy <op> <status> × <n>`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::client::Shared;
use crate::cluster::ADMIN_TOKEN;

/// The noisy tenant's request rate limit (per replica).
pub const NOISY_REQUESTS_PER_MINUTE: i64 = 300;
/// The noisy tenant's storage quota: 2 MiB.
pub const NOISY_STORAGE_BYTES: i64 = 2 * 1024 * 1024;
/// Concurrent uploaders.
const UPLOADERS: usize = 4;

/// The noisy tenant's user.
pub struct Tenant {
    token: String,
    chat: String,
}

/// `(operation, status)` → count; status 0 is a transport error.
pub type Counts = BTreeMap<(String, u16), u64>;

/// What the noisy tenant saw.
#[derive(Debug, Default)]
pub struct Report {
    /// Answers by operation and status.
    pub answers: Counts,
    /// The most SSE streams it held open at once (over all replicas).
    pub streams_held_at_most: usize,
}

/// Makes the noisy member through the admin API: the user, its limits, a
/// token and one chat of its own.
///
/// # Errors
/// When the user, its token or its chat cannot be created.
pub async fn setup(base: &str, http: &reqwest::Client) -> anyhow::Result<Tenant> {
    let admin = |method: reqwest::Method, path: &str, body: Value| {
        http.request(method, format!("{base}/api/v2{path}"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
    };
    let user: Value = admin(
        reqwest::Method::POST,
        "/users",
        json!({"username": "noisy", "role": "member"}),
    )
    .await?
    .error_for_status()
    .context("creating the noisy user")?
    .json()
    .await?;
    let id = user["id"].as_str().context("user id")?.to_owned();
    let limits = admin(
        reqwest::Method::PATCH,
        &format!("/users/{id}"),
        json!({"limits": {
            "requests_per_minute": NOISY_REQUESTS_PER_MINUTE,
            "max_storage_bytes": NOISY_STORAGE_BYTES,
        }}),
    )
    .await?;
    if !limits.status().is_success() {
        println!(
            "chaos: noisy tenant: setting its limits answered {} (the server defaults apply)",
            limits.status()
        );
    }
    let token: Value = admin(
        reqwest::Method::POST,
        &format!("/users/{id}/tokens"),
        json!({"name": "noisy"}),
    )
    .await?
    .error_for_status()
    .context("creating the noisy token")?
    .json()
    .await?;
    let token = token["token"].as_str().context("token")?.to_owned();
    let chat: Value = http
        .post(format!("{base}/api/v2/chats"))
        .bearer_auth(&token)
        .json(&json!({"content": [{"type": "text", "text": "noisy start"}], "title": "noisy"}))
        .send()
        .await?
        .error_for_status()
        .context("creating the noisy chat")?
        .json()
        .await?;
    let chat = chat["id"].as_str().context("chat id")?.to_owned();
    Ok(Tenant { token, chat })
}

/// Runs the noisy tenant until `stop`; returns what it saw. A `500` it gets
/// is a violation like any other client's.
pub async fn run(
    shared: Arc<Shared>,
    tenant: Tenant,
    seed: u64,
    stop: CancellationToken,
) -> Report {
    let counts = Arc::new(Mutex::new(Counts::new()));
    let tenant = Arc::new(tenant);
    let mut tasks = Vec::new();
    for i in 0..UPLOADERS {
        tasks.push(tokio::spawn(uploader(
            shared.clone(),
            tenant.clone(),
            counts.clone(),
            seed.wrapping_add(9000 + i as u64),
            stop.clone(),
        )));
    }
    let streams = tokio::spawn(streamer(
        shared.clone(),
        tenant.clone(),
        counts.clone(),
        seed.wrapping_add(9100),
        stop.clone(),
    ));
    tasks.push(tokio::spawn(sender(
        shared.clone(),
        tenant,
        counts.clone(),
        seed.wrapping_add(9200),
        stop,
    )));
    for task in tasks {
        let _ = task.await;
    }
    let streams_held_at_most = streams.await.unwrap_or_default();
    let answers = std::mem::take(&mut *counts.lock().unwrap_or_else(|p| p.into_inner()));
    let errors: u64 = answers
        .iter()
        .filter(|((_, status), _)| *status == 500)
        .map(|(_, n)| n)
        .sum();
    if errors > 0 {
        shared
            .ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .violations
            .push(format!("the noisy tenant got {errors} answers 500"));
    }
    Report {
        answers,
        streams_held_at_most,
    }
}

fn count(counts: &Mutex<Counts>, op: &str, status: u16) {
    *counts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry((op.to_owned(), status))
        .or_default() += 1;
}

/// A body of `chunks` chunks of `chunk` bytes, one every `every`.
fn slow_body(chunks: usize, chunk: usize, every: Duration) -> reqwest::Body {
    let stream = futures::stream::iter(0..chunks).then(move |_| async move {
        tokio::time::sleep(every).await;
        Ok::<_, std::io::Error>(vec![b'n'; chunk])
    });
    reqwest::Body::wrap_stream(stream)
}

async fn uploader(
    shared: Arc<Shared>,
    tenant: Arc<Tenant>,
    counts: Arc<Mutex<Counts>>,
    seed: u64,
    stop: CancellationToken,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::new();
    while !stop.is_cancelled() {
        let (op, body, timeout) = match rng.random_range(0..10) {
            // 256 KiB over about 1.6 s.
            0..6 => (
                "upload_slow",
                slow_body(16, 16 * 1024, Duration::from_millis(100)),
                Duration::from_secs(30),
            ),
            // Over the 10 MiB file limit, quickly.
            6..8 => (
                "upload_huge",
                slow_body(44, 256 * 1024, Duration::from_millis(5)),
                Duration::from_secs(30),
            ),
            // A byte every 500 ms for longer than any body deadline.
            _ => (
                "upload_trickle",
                slow_body(200, 1, Duration::from_millis(500)),
                Duration::from_secs(40),
            ),
        };
        let url = format!("{}/api/v2/files?name=noise.bin", shared.replica(&mut rng));
        let request = http
            .post(url)
            .bearer_auth(&tenant.token)
            .header("content-type", "application/octet-stream")
            .timeout(timeout)
            .body(body)
            .send();
        let status = tokio::select! {
            () = stop.cancelled() => break,
            answer = request => answer.map_or(0, |r| r.status().as_u16()),
        };
        count(&counts, op, status);
        tokio::time::sleep(Duration::from_millis(rng.random_range(10..100))).await;
    }
}

async fn streamer(
    shared: Arc<Shared>,
    tenant: Arc<Tenant>,
    counts: Arc<Mutex<Counts>>,
    seed: u64,
    stop: CancellationToken,
) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::new();
    let mut held: Vec<reqwest::Response> = Vec::new();
    let mut most = 0;
    while !stop.is_cancelled() {
        let url = format!(
            "{}/api/v2/chats/{}/events",
            shared.replica(&mut rng),
            tenant.chat
        );
        let answer = tokio::select! {
            () = stop.cancelled() => break,
            answer = http.get(url).bearer_auth(&tenant.token).send() => answer,
        };
        let status = answer.as_ref().map_or(0, |r| r.status().as_u16());
        count(&counts, "stream_open", status);
        match answer {
            Ok(response) if status == 200 => {
                held.push(response);
                most = most.max(held.len());
            }
            _ if status == 429 => {
                // At the cap somewhere: hold on a little, then let half go.
                tokio::time::sleep(Duration::from_millis(500)).await;
                let keep = held.len() / 2;
                held.truncate(keep);
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    most
}

async fn sender(
    shared: Arc<Shared>,
    tenant: Arc<Tenant>,
    counts: Arc<Mutex<Counts>>,
    seed: u64,
    stop: CancellationToken,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::new();
    let mut n = 0u64;
    while !stop.is_cancelled() {
        n += 1;
        let url = format!(
            "{}/api/v2/chats/{}/messages",
            shared.replica(&mut rng),
            tenant.chat
        );
        let request = http
            .post(url)
            .bearer_auth(&tenant.token)
            .timeout(Duration::from_secs(10))
            .json(&json!({
                "content": [{"type": "text", "text": format!("noise {n}")}],
                "busy_behavior": "queue",
            }))
            .send();
        let status = tokio::select! {
            () = stop.cancelled() => break,
            answer = request => answer.map_or(0, |r| r.status().as_u16()),
        };
        count(&counts, "send", status);
        // As fast as it is allowed, and then some: no back-off on 429.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
