//! Benchmark of one worker (issue "The chat worker", Measure).
//!
//! 1. With the fake LLM answering instantly: turns per second and p50/p99 of
//!    the time from the send (the `SendMessage` commit) to the
//!    `chat:update` that carries the committed final assistant message, for
//!    1, 10 and 100 concurrent chats.
//! 2. With a fake LLM that streams 50 parts over 1 s: how many concurrent
//!    chats one worker sustains (turn time stays near 1 s) and its memory per
//!    running chat (peak RSS growth over the idle process, divided by the
//!    number of chats; the in-process fake LLM's connections are included, so
//!    this is an upper bound).
//!
//! ```text
//! cargo run --release -p chatd-worker --example bench_worker [-- --turns 20 --slow 50,100,200,400]
//! ```
//! Uses `CHATD_TEST_DATABASE_URL` (default the local server); creates and
//! drops its own database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_core::{BusyBehavior, ChatStatus, MessagePart};
use chatd_pubsub::{ChatUpdate, PgPubsub, Pubsub, PubsubEvent, chat_update_channel};
use chatd_store::{CreateChatInput, NewMessage, SendMessageInput, Store, StoreConfig};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Bench {
    store: Store,
    pubsub: PgPubsub,
    owner: Uuid,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut turns = 20usize;
    let mut slow_levels = vec![50usize, 100, 200, 400];
    let mut fast_levels = vec![1usize, 10, 100];
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--turns" => turns = args.next().expect("--turns N").parse()?,
            "--fast" => {
                fast_levels = args
                    .next()
                    .expect("--fast A,B")
                    .split(',')
                    .map(|n| n.parse().expect("number"))
                    .collect()
            }
            "--slow" => {
                slow_levels = args
                    .next()
                    .expect("--slow A,B")
                    .split(',')
                    .map(|n| n.parse().expect("number"))
                    .collect()
            }
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(40)
        .connect(db.url())
        .await?;
    let pubsub = PgPubsub::connect(pool.clone()).await?;
    let store = Store::with_config(
        pool.clone(),
        Arc::new(pubsub.clone()),
        StoreConfig::default(),
    );
    let llm = FakeLlm::start().await?;
    let owner = Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'bench', 'member')")
        .bind(owner)
        .execute(&pool)
        .await?;
    let provider = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO chat_providers (id, provider, base_url) VALUES ($1, 'openai-compat', $2)",
    )
    .bind(provider)
    .bind(llm.base_url())
    .execute(&pool)
    .await?;
    sqlx::query("INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default) VALUES ($1, $2, 'fake', 8192, true)")
        .bind(Uuid::new_v4())
        .bind(provider)
        .execute(&pool)
        .await?;
    let worker = Worker::start(WorkerDeps {
        store: store.clone(),
        pubsub: Arc::new(pubsub.clone()) as Arc<dyn Pubsub>,
        parts: PartBuffer::new(CancellationToken::new()),
        providers: Arc::new(DefaultProviderFactory),
        config: WorkerConfig {
            acquisition_interval: Duration::from_secs(1),
            ..WorkerConfig::default()
        },
    });
    let bench = Arc::new(Bench {
        store,
        pubsub: pubsub.clone(),
        owner,
    });

    println!("== fake LLM answering instantly; {turns} turns per chat");
    println!(
        "{:>6} {:>8} {:>10} {:>10} {:>10}",
        "chats", "turns", "turns/s", "p50 ms", "p99 ms"
    );
    llm.set_default(Script::text("ok").usage(10, 1));
    for concurrency in fast_levels.iter().copied() {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let bench = bench.clone();
            tasks.push(tokio::spawn(async move { bench.run_chat(turns).await }));
        }
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await??);
        }
        let elapsed = started.elapsed();
        latencies.sort();
        println!(
            "{:>6} {:>8} {:>10.1} {:>10.1} {:>10.1}",
            concurrency,
            latencies.len(),
            latencies.len() as f64 / elapsed.as_secs_f64(),
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99)
        );
    }

    println!("\n== fake LLM streaming 50 parts over 1 s; one turn per chat, all chats at once");
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>14}",
        "chats", "p50 ms", "p99 ms", "max ms", "KiB per chat"
    );
    llm.set_default(
        Script::text_in_parts(&"word ".repeat(50), 50, Duration::from_millis(20)).usage(10, 50),
    );
    for level in slow_levels {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let base = rss_kib();
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(base));
        let sampler = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(rss_kib(), std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        let mut tasks = Vec::new();
        for _ in 0..level {
            let bench = bench.clone();
            tasks.push(tokio::spawn(async move { bench.run_chat(1).await }));
        }
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await??);
        }
        sampler.abort();
        latencies.sort();
        let per_chat = peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(base) as f64
            / level as f64;
        println!(
            "{:>6} {:>10.1} {:>10.1} {:>10.1} {:>14.1}",
            level,
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            per_chat
        );
    }
    worker.shutdown().await;
    pubsub.close().await;
    Ok(())
}

impl Bench {
    /// Creates a chat, then sends `turns - 1` more messages, one after each
    /// answer; returns the latency of each turn.
    async fn run_chat(&self, turns: usize) -> anyhow::Result<Vec<Duration>> {
        let chat_id = Uuid::new_v4();
        let mut updates = self.pubsub.subscribe(&chat_update_channel(chat_id)).await?;
        let mut latencies = Vec::with_capacity(turns);
        for turn in 0..turns {
            let started = Instant::now();
            let message = NewMessage::user(vec![MessagePart::text(format!("turn {turn}"))])
                .created_by(self.owner);
            if turn == 0 {
                self.store
                    .create_chat(CreateChatInput {
                        id: Some(chat_id),
                        owner_id: self.owner,
                        initial_messages: vec![message],
                        ..Default::default()
                    })
                    .await?;
            } else {
                self.store
                    .machine(chat_id)
                    .update(|tx| {
                        Box::pin(async move {
                            tx.send_message(SendMessageInput {
                                message,
                                busy_behavior: BusyBehavior::Queue,
                                max_queue_size: None,
                            })
                            .await
                        })
                    })
                    .await?;
            }
            loop {
                let event = tokio::time::timeout(Duration::from_secs(60), updates.recv())
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("pubsub closed"))?;
                let PubsubEvent::Message(payload) = event else {
                    continue;
                };
                let update = ChatUpdate::from_payload(&payload)?;
                if update.status == ChatStatus::Waiting {
                    break;
                }
            }
            latencies.push(started.elapsed());
        }
        Ok(latencies)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
