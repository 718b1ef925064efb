//! Live-stream benchmark (issue 6, "Measure"), against real `chatd serve`
//! processes on a fresh database of the local PostgreSQL.
//!
//! It starts its own OpenAI-compatible fake LLM whose chunks carry the wall
//! clock time (µs) at which each was written, a worker replica B and a
//! `--no-worker` replica A, and prints:
//!
//! - part delivery latency, from the fake LLM writing a chunk to a WebSocket
//!   client receiving the `message_part`, p50/p90/p99/max, for a watcher on
//!   the owning replica (same-replica: part buffer → stream loop) and one on
//!   the other replica (cross-replica: part buffer → parts endpoint → relay
//!   → stream loop), both watching the same turns;
//! - delivered parts per second with 1, 10 and 100 watchers (on the owning
//!   replica) of one chat whose model streams as fast as it can (the model
//!   then waits 1.5 s before finishing, so the parts are not cut short by
//!   the commit: live parts are best effort).
//!
//! ```text
//! cargo build --release -p chatd --example bench_stream
//! target/release/examples/bench_stream
//! ```

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use axum::body::Body;
use axum::response::Response;
use clap::Parser;
use futures::StreamExt as _;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use uuid::Uuid;

const TOKEN: &str = "bench-admin-token-0123456789";

/// Live-stream benchmark.
#[derive(Debug, Parser)]
struct Args {
    /// The chatd binary. Default: `chatd` next to this example's directory.
    #[arg(long)]
    chatd_bin: Option<PathBuf>,
    /// PostgreSQL server; a fresh database is created on it and dropped.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    postgres_url: String,
    /// Turns measured for latency.
    #[arg(long, default_value_t = 5)]
    turns: usize,
    /// Chunks per latency turn.
    #[arg(long, default_value_t = 200)]
    latency_chunks: u64,
    /// Time between chunks of a latency turn, in ms.
    #[arg(long, default_value_t = 10)]
    chunk_interval_ms: u64,
    /// Chunks of a throughput turn (streamed back to back).
    #[arg(long, default_value_t = 3000)]
    throughput_chunks: u64,
}

/// What the fake LLM streams next.
struct LlmPlan {
    chunks: AtomicU64,
    interval_us: AtomicU64,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or_default()
}

fn sse_chunk(content: &str) -> String {
    let chunk = json!({"id": "b", "object": "chat.completion.chunk", "created": 0, "model": "m",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

async fn completions(plan: Arc<LlmPlan>) -> Response {
    let chunks = plan.chunks.load(Ordering::SeqCst);
    let interval = Duration::from_micros(plan.interval_us.load(Ordering::SeqCst));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(64);
    tokio::spawn(async move {
        // Give the watchers time to see the new attempt first.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..chunks {
            if tx
                .send(Ok(sse_chunk(&format!("{}|", now_us()))))
                .await
                .is_err()
            {
                return;
            }
            if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
        }
        // Parts are best effort: keep the turn open a moment so the
        // measurement is of delivery, not of the race with the commit.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let done = json!({"id": "b", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        let _ = tx
            .send(Ok(format!("data: {done}\n\ndata: [DONE]\n\n")))
            .await;
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(tokio_stream(rx)))
        .expect("response")
}

fn tokio_stream(
    mut rx: tokio::sync::mpsc::Receiver<Result<String, std::io::Error>>,
) -> impl futures::Stream<Item = Result<String, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn start_server(
    bin: &PathBuf,
    db_url: &str,
    config: &str,
    extra: &[&str],
) -> anyhow::Result<Server> {
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--postgres-url",
            db_url,
            "--config",
            config,
        ])
        .args(["--acquisition-interval", "1s", "--sync-poll-interval", "2s"])
        .args(extra)
        .env("CHATD_BOOTSTRAP_ADMIN_TOKEN", TOKEN)
        .env("CHATD_LOG", "warn,chatd=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting chatd")?;
    let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = tokio::time::timeout(deadline - Instant::now(), lines.next_line())
            .await
            .context("chatd did not start in time")??
            .context("chatd exited")?;
        if let Some(rest) = line.split("listening on http://").nth(1) {
            let addr = rest
                .split(|c: char| c.is_whitespace() || c == '"')
                .next()
                .unwrap_or_default();
            let url = format!("http://{addr}");
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok(Server { child, url });
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn watch(server: &str, chat: Uuid) -> anyhow::Result<Ws> {
    let url = format!(
        "{}/api/v2/chats/{chat}/stream",
        server.replacen("http://", "ws://", 1)
    );
    let mut request = url.into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse()?);
    let (ws, _) = tokio_tungstenite::connect_async(request).await?;
    Ok(ws)
}

/// What one watcher saw of one turn.
#[derive(Default)]
struct Seen {
    latencies_us: Vec<u64>,
    parts: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// Reads `ws` until the chat is waiting again after having run (the
/// bootstrap's own `waiting` does not count).
async fn observe(mut ws: Ws) -> anyhow::Result<Seen> {
    let mut seen = Seen::default();
    let mut ran = false;
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Some(frame) = tokio::time::timeout(deadline - Instant::now(), ws.next()).await? {
        let tungstenite::Message::Text(text) = frame? else {
            continue;
        };
        let received = now_us();
        let at = Instant::now();
        let events: Vec<Value> = serde_json::from_str(text.as_str())?;
        for event in events {
            match event["type"].as_str() {
                Some("message_part") => {
                    if let Some(sent) = event["message_part"]["part"]["text"]
                        .as_str()
                        .and_then(|t| t.trim_end_matches('|').parse::<u64>().ok())
                    {
                        seen.latencies_us.push(received.saturating_sub(sent));
                    }
                    seen.parts += 1;
                    seen.first.get_or_insert(at);
                    seen.last = Some(at);
                }
                Some("status") if event["status"]["status"] == "running" => ran = true,
                Some("status") if event["status"]["status"] == "waiting" && ran => {
                    return Ok(seen);
                }
                _ => {}
            }
        }
    }
    bail!("stream ended early")
}

async fn send(http: &reqwest::Client, server: &str, chat: Uuid, text: &str) -> anyhow::Result<()> {
    let r = http
        .post(format!("{server}/api/v2/chats/{chat}/messages"))
        .bearer_auth(TOKEN)
        .json(&json!({"content": [{"type": "text", "text": text}]}))
        .send()
        .await?;
    anyhow::ensure!(r.status() == 200, "send answered {}", r.status());
    Ok(())
}

async fn wait_idle(http: &reqwest::Client, server: &str, chat: Uuid) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let chat: Value = http
            .get(format!("{server}/api/v2/chats/{chat}"))
            .bearer_auth(TOKEN)
            .send()
            .await?
            .json()
            .await?;
        if chat["status"] == "waiting" && chat["worker_id"].is_null() {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "chat not idle: {chat}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn print_latency(name: &str, samples: &[u64]) {
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    for s in samples {
        h.record((*s).max(1)).expect("record");
    }
    println!(
        "  {name:<14} n={:<5} p50={:>7.2} ms  p90={:>7.2} ms  p99={:>7.2} ms  max={:>7.2} ms",
        h.len(),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.9) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.max() as f64 / 1000.0,
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin = common::chatd_bin(args.chatd_bin.as_deref())?;
    anyhow::ensure!(
        bin.exists(),
        "{} does not exist: build chatd first",
        bin.display()
    );

    // A fresh database.
    let db_name = format!("chatd_bench_stream_{}", Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&args.postgres_url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db_name}")))
        .execute(&admin)
        .await?;
    let db_url = {
        let mut url = url::Url::parse(&args.postgres_url)?;
        url.set_path(&db_name);
        url.to_string()
    };

    let result = run(&args, &bin, &db_url).await;
    admin.close().await;
    let admin = sqlx::PgPool::connect(&args.postgres_url).await?;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {db_name} WITH (FORCE)"
    )))
    .execute(&admin)
    .await;
    result
}

async fn run(args: &Args, bin: &PathBuf, db_url: &str) -> anyhow::Result<()> {
    // The timestamping fake LLM.
    let plan = Arc::new(LlmPlan {
        chunks: AtomicU64::new(args.latency_chunks),
        interval_us: AtomicU64::new(args.chunk_interval_ms * 1000),
    });
    let llm = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let llm_url = format!("http://{}/v1", llm.local_addr()?);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post({
            let plan = plan.clone();
            move || completions(plan.clone())
        }),
    );
    tokio::spawn(async move { axum::serve(llm, app).await });
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("chatd.toml");
    std::fs::write(
        &config,
        format!(
            "[[providers]]\nname = \"bench\"\nprovider = \"openai-compat\"\nbase_url = \"{llm_url}\"\n\n\
             [[model_configs]]\nname = \"bench-model\"\nprovider = \"bench\"\nmodel = \"bench-model\"\ncontext_limit = 1000000\nis_default = true\n"
        ),
    )?;
    let config = config.display().to_string();
    let b = start_server(bin, db_url, &config, &[]).await?;
    let a = start_server(bin, db_url, &config, &["--no-worker"]).await?;
    let http = reqwest::Client::new();

    // Latency: one watcher on each replica, same turns.
    let created: Value = http
        .post(format!("{}/api/v2/chats", a.url))
        .bearer_auth(TOKEN)
        .json(&json!({"content": [{"type": "text", "text": "warm up"}]}))
        .send()
        .await?
        .json()
        .await?;
    let chat: Uuid = created["id"].as_str().context("chat id")?.parse()?;
    wait_idle(&http, &b.url, chat).await?;
    let mut same = Vec::new();
    let mut cross = Vec::new();
    for turn in 0..args.turns {
        let on_b = tokio::spawn(observe(watch(&b.url, chat).await?));
        let on_a = tokio::spawn(observe(watch(&a.url, chat).await?));
        send(&http, &a.url, chat, &format!("turn {turn}")).await?;
        same.extend(on_b.await??.latencies_us);
        cross.extend(on_a.await??.latencies_us);
        wait_idle(&http, &b.url, chat).await?;
    }
    println!(
        "part delivery latency (fake LLM writes a chunk -> WebSocket client receives it), {} turns x {} chunks every {} ms:",
        args.turns, args.latency_chunks, args.chunk_interval_ms
    );
    print_latency("same-replica", &same);
    print_latency("cross-replica", &cross);

    // Throughput: W watchers on the owning replica, back-to-back chunks.
    plan.chunks.store(args.throughput_chunks, Ordering::SeqCst);
    plan.interval_us.store(0, Ordering::SeqCst);
    println!(
        "delivered parts per second, one chat, {} chunks streamed back to back, watchers on the owning replica:",
        args.throughput_chunks
    );
    for watchers in [1usize, 10, 100] {
        let mut tasks = Vec::with_capacity(watchers);
        for _ in 0..watchers {
            tasks.push(tokio::spawn(observe(watch(&b.url, chat).await?)));
        }
        send(&http, &a.url, chat, "go").await?;
        let mut total = 0u64;
        let mut first: Option<Instant> = None;
        let mut last: Option<Instant> = None;
        let mut per_watcher = Vec::new();
        let mut complete = 0;
        for task in tasks {
            let seen = task.await??;
            total += seen.parts;
            if seen.parts >= args.throughput_chunks {
                complete += 1;
            }
            if let (Some(f), Some(l)) = (seen.first, seen.last) {
                first = Some(first.map_or(f, |x: Instant| x.min(f)));
                last = Some(last.map_or(l, |x: Instant| x.max(l)));
                let secs = l.duration_since(f).as_secs_f64().max(1e-6);
                per_watcher.push(seen.parts as f64 / secs);
            }
        }
        let span = match (first, last) {
            (Some(f), Some(l)) => l.duration_since(f).as_secs_f64().max(1e-6),
            _ => 1.0,
        };
        per_watcher.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
        let median = per_watcher
            .get(per_watcher.len() / 2)
            .copied()
            .unwrap_or_default();
        println!(
            "  {watchers:>3} watcher(s): {:>9.0} parts/s delivered in total ({total} parts in {span:.2} s), median {:>8.0} parts/s per watcher, {complete}/{watchers} got all {} parts",
            total as f64 / span,
            median,
            args.throughput_chunks
        );
        wait_idle(&http, &b.url, chat).await?;
    }
    drop(a);
    drop(b);
    Ok(())
}
