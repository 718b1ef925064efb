//! Steering and idempotency keys (issue 16, "Measure"), in one process: the
//! HTTP API on an ephemeral port, one worker, the fake LLM and the testkit's
//! MCP fixture (streamable HTTP), on a fresh database of
//! `CHATD_TEST_DATABASE_URL` (default the local server).
//!
//! 1. **Steer**: `--runs` turns of three model steps each (two calls of the
//!    MCP `add` tool, each step streaming for `--step-ms`, then an answer).
//!    A third of the way into the first step a `busy_behavior: "steer"`
//!    message is sent; the program waits for the first model request that
//!    carries it. It prints how many model requests later that was (1 = the
//!    very next call), the time from sending the steer to that request
//!    (p50/max), the part of it the fake model was still streaming the step
//!    (the rest of `--step-ms`), and the ratio of chatd's own part (the
//!    remainder: tool call, commit, next request) to the step time.
//! 2. **Idempotency-Key**: `--clients` closed-loop clients send queued
//!    messages to busy chats (their first model call hangs), alternating
//!    `--rounds` periods of `--period` without and with a fresh
//!    `Idempotency-Key` per request; prints requests/s of each and the
//!    ratio with/without.
//!
//! ```text
//! cargo run --release -p chatd --example bench_steer [-- --runs 20 --step-ms 300 --clients 8 --period 5s --rounds 3]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chatd_api::{ApiOptions, AppState};
use chatd_pubsub::{PgPubsub, Pubsub};
use chatd_store::{Store, StoreConfig};
use chatd_testkit::{FakeLlm, McpHttpFixture, Script, TestDatabase};
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use clap::Parser;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Steer latency and the cost of `Idempotency-Key` on sends.
#[derive(Debug, Parser)]
struct Args {
    /// Steered turns.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// How long each model step streams, in ms.
    #[arg(long, default_value_t = 300)]
    step_ms: u64,
    /// Concurrent sending clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Busy chats the clients send to.
    #[arg(long, default_value_t = 32)]
    chats: usize,
    /// Length of one measured period.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    period: Duration,
    /// Periods of each kind, alternating (without, with, without, ...).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

struct Bench {
    http: reqwest::Client,
    base: String,
    token: String,
    llm: FakeLlm,
    mcp_server: Uuid,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let pool = chatd_store::pool_options(40).connect(db.url()).await?;
    let pubsub = PgPubsub::connect(pool.clone()).await?;
    let store = Store::with_config(
        pool.clone(),
        Arc::new(pubsub.clone()),
        StoreConfig::default(),
    );
    let llm = FakeLlm::start().await?;
    let fixture = McpHttpFixture::start().await?;
    let token = chatd_api::create_token(&pool, "bench", false).await?;
    let provider = Uuid::new_v4();
    sqlx::query("INSERT INTO chat_providers (id, provider, display_name, base_url, api_key) VALUES ($1, 'openai-compat', 'fake', $2, 'k')")
        .bind(provider)
        .bind(llm.base_url())
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default) VALUES ($1, $2, 'fake', 32768, true)")
        .bind(Uuid::new_v4())
        .bind(provider)
        .execute(&pool)
        .await?;
    let mcp_server = Uuid::new_v4();
    sqlx::query("INSERT INTO chat_mcp_servers (id, slug, transport, url) VALUES ($1, 'calc', 'streamable_http', $2)")
        .bind(mcp_server)
        .bind(fixture.url())
        .execute(&pool)
        .await?;
    // A benchmark sends more requests a minute than the default request
    // rate (API.md "Request rate"), which it does not measure.
    let unlimited = chatd_core::limits::LimitDefaults {
        requests_per_minute: i32::MAX,
        ..Default::default()
    };
    let options = ApiOptions {
        max_queued_messages: 1_000_000,
        limits: unlimited,
        ..ApiOptions::default()
    };
    let app = chatd_api::router(AppState::new(store.clone(), options));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let worker = Worker::start(WorkerDeps {
        store,
        pubsub: Arc::new(pubsub) as Arc<dyn Pubsub>,
        parts: PartBuffer::new(CancellationToken::new()),
        providers: Arc::new(DefaultProviderFactory),
        config: WorkerConfig {
            acquisition_interval: Duration::from_millis(200),
            generate_titles: false,
            ..WorkerConfig::default()
        },
    });
    let bench = Bench {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(args.clients * 2)
            .build()?,
        base,
        token,
        llm,
        mcp_server,
    };
    steer(&bench, &args).await?;
    idempotency(&bench, &args).await?;
    worker.shutdown().await;
    server.abort();
    Ok(())
}

impl Bench {
    async fn post(&self, path: &str, body: &Value, key: Option<&str>) -> anyhow::Result<Value> {
        let mut request = self
            .http
            .post(format!("{}/api/v2{path}", self.base))
            .bearer_auth(&self.token)
            .json(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("POST {path}: {status} {body}");
        }
        Ok(body)
    }

    async fn wait_idle(&self, chat: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let body: Value = self
                .http
                .get(format!("{}/api/v2/chats/{chat}", self.base))
                .bearer_auth(&self.token)
                .send()
                .await?
                .json()
                .await?;
            if body["status"] == "waiting" {
                return Ok(());
            }
            if body["status"] == "error" {
                bail!("the turn failed: {}", body["last_error"]);
            }
            anyhow::ensure!(Instant::now() < deadline, "chat {chat} did not finish");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Part 1 (see the module doc).
async fn steer(bench: &Bench, args: &Args) -> anyhow::Result<()> {
    let step = Duration::from_millis(args.step_ms);
    let mut steps = Vec::new();
    let mut latency_ms = Vec::new();
    let mut streaming_ms = Vec::new();
    for run in 0..args.runs {
        for i in 0..2 {
            bench.llm.push(Script::new().delay(step).tool_call(
                &format!("call_{run}_{i}"),
                "calc__add",
                r#"{"a": 2, "b": 3}"#,
                1,
            ));
        }
        bench.llm.push(Script::new().delay(step).then_text("done"));
        let before = bench.llm.requests().len();
        let chat = bench
            .post(
                "/chats",
                &json!({"content": [{"type": "text", "text": format!("run {run}")}], "mcp_server_ids": [bench.mcp_server]}),
                None,
            )
            .await?;
        let chat = chat["id"].as_str().context("chat id")?.to_owned();
        bench
            .llm
            .wait_for_request(before + 1, Duration::from_secs(30))
            .await?;
        let step_started = Instant::now();
        tokio::time::sleep(step / 3).await;
        let text = format!("steer {run}");
        let in_flight = bench.llm.requests().len();
        let sent = Instant::now();
        let answer = bench
            .post(
                &format!("/chats/{chat}/messages"),
                &json!({"content": [{"type": "text", "text": text}], "busy_behavior": "steer"}),
                None,
            )
            .await?;
        anyhow::ensure!(
            answer["queued_message"]["steer"] == true,
            "not steered: {answer}"
        );
        let mut n = in_flight + 1;
        let received = loop {
            let request = bench
                .llm
                .wait_for_request(n, Duration::from_secs(30))
                .await?;
            if request.last_user_text().as_deref() == Some(text.as_str()) {
                break Instant::now();
            }
            n += 1;
        };
        steps.push(n - in_flight);
        latency_ms.push((received - sent).as_secs_f64() * 1000.0);
        let remaining = (step_started + step).saturating_duration_since(sent);
        streaming_ms.push(remaining.as_secs_f64() * 1000.0);
        bench.wait_idle(&chat).await?;
    }
    let own: Vec<f64> = latency_ms
        .iter()
        .zip(&streaming_ms)
        .map(|(l, s)| l - s)
        .collect();
    println!(
        "== steer: {} turns of 3 model steps ({} ms each, MCP tool between), steer sent {} ms into the first",
        args.runs,
        args.step_ms,
        args.step_ms / 3
    );
    println!(
        "model requests from the steer to the one that carries it: {} (1 = the next call) in {} of {} runs",
        steps.iter().max().copied().unwrap_or_default(),
        steps.iter().filter(|s| **s == 1).count(),
        steps.len()
    );
    println!(
        "steer → model received: p50 {:.1} ms, max {:.1} ms; of which the step was still streaming p50 {:.1} ms",
        percentile(&latency_ms, 0.5),
        percentile(&latency_ms, 1.0),
        percentile(&streaming_ms, 0.5)
    );
    println!(
        "chatd's own part (tool call, commit with the steer, next request): p50 {:.1} ms = {:.3} x the step time",
        percentile(&own, 0.5),
        percentile(&own, 0.5) / args.step_ms as f64
    );
    Ok(())
}

/// Part 2 (see the module doc).
async fn idempotency(bench: &Bench, args: &Args) -> anyhow::Result<()> {
    // Busy chats: their first model call never ends, so every send queues.
    bench.llm.set_default(Script::new().hang());
    let mut chats = Vec::new();
    for i in 0..args.chats {
        let chat = bench
            .post(
                "/chats",
                &json!({"content": [{"type": "text", "text": format!("busy {i}")}]}),
                None,
            )
            .await?;
        chats.push(chat["id"].as_str().context("chat id")?.to_owned());
    }
    let chats = Arc::new(chats);
    let mut totals = [(0usize, Duration::ZERO), (0usize, Duration::ZERO)];
    for round in 0..args.rounds * 2 {
        let keyed = round % 2 == 1;
        let done = Arc::new(AtomicUsize::new(0));
        let until = Instant::now() + args.period;
        let started = Instant::now();
        let mut clients = Vec::new();
        for c in 0..args.clients {
            let (http, base, token, chats, done) = (
                bench.http.clone(),
                bench.base.clone(),
                bench.token.clone(),
                chats.clone(),
                done.clone(),
            );
            clients.push(tokio::spawn(async move {
                let mut i = c;
                while Instant::now() < until {
                    let chat = &chats[i % chats.len()];
                    i += 1;
                    let mut request = http
                        .post(format!("{base}/api/v2/chats/{chat}/messages"))
                        .bearer_auth(&token)
                        .json(&json!({"content": [{"type": "text", "text": format!("m {round} {c} {i}")}]}));
                    if keyed {
                        request = request.header("Idempotency-Key", Uuid::new_v4().to_string());
                    }
                    let response = request.send().await?;
                    let status = response.status();
                    response.bytes().await?;
                    if status != 200 {
                        bail!("send: {status}");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            }));
        }
        for client in clients {
            client.await??;
        }
        let total = &mut totals[usize::from(keyed)];
        total.0 += done.load(Ordering::Relaxed);
        total.1 += started.elapsed();
    }
    let rate = |(n, t): (usize, Duration)| n as f64 / t.as_secs_f64();
    let (without, with) = (rate(totals[0]), rate(totals[1]));
    println!(
        "== Idempotency-Key on POST /messages: {} clients over {} busy chats, {} alternating periods of {:?} each",
        args.clients, args.chats, args.rounds, args.period
    );
    println!(
        "without the header: {without:.0} requests/s; with a fresh key per request: {with:.0} requests/s; ratio with/without {:.3}",
        with / without
    );
    Ok(())
}

fn percentile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}
