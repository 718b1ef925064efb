//! Fairness benchmark (issue 31, "Measure"; API.md "Limits, budgets and the
//! token lifecycle": `--max-runners`, "Running chats").
//!
//! Two users on one replica. User A starts `--chats` chats (default 100) at
//! once; right after, user B starts one. The figure is B's time from the
//! send (the start of the chat's creation with its first message) to the
//! first model request of that chat, against the same with A idle: the p50
//! of `--repeat` runs each (default 5), alternately, and their ratio. The
//! fake LLM answers every request after `--delay` ms (default 300), so A's
//! chats hold their slots for a while.
//!
//! Three replica shapes, each in the same run:
//! - `defaults`: `--max-runners 256`, `--default-max-running-chats 8`;
//! - `16 runners, cap 8`: a small replica, the per-user cap on;
//! - `16 runners, no cap`: the same replica without a per-user cap (what
//!   the issue found: one user's chats take every runner and B waits
//!   behind them).
//!
//! For each, it also prints the most chats of A's that made model calls at
//! once (requests that arrived within one answer time of each other).
//!
//! ```text
//! cargo run --release -p chatd-worker --example bench_fairness \
//!     [-- --chats 100 --repeat 5 --delay 300 --gap 0]
//! ```
//! `--gap MS` starts B's chat that long after A's (default 0: right after
//! A's last creation commits).
//! Uses `CHATD_TEST_DATABASE_URL` (default the local server); creates and
//! drops its own database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chatd_core::MessagePart;
use chatd_core::limits::LimitDefaults;
use chatd_pubsub::{PgPubsub, Pubsub};
use chatd_store::{CreateChatInput, NewMessage, Store, StoreConfig};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Args {
    chats: usize,
    repeat: usize,
    delay: Duration,
    /// Pause between A's chats and B's (`--gap`, default 0: at once).
    gap: Duration,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        chats: 100,
        repeat: 5,
        delay: Duration::from_millis(300),
        gap: Duration::ZERO,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--chats" => args.chats = it.next().expect("--chats N").parse()?,
            "--repeat" => args.repeat = it.next().expect("--repeat N").parse::<usize>()?.max(1),
            "--gap" => args.gap = Duration::from_millis(it.next().expect("--gap MS").parse()?),
            "--delay" => {
                args.delay = Duration::from_millis(it.next().expect("--delay MS").parse()?)
            }
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

/// When each chat's first model request arrived (keyed by its first user
/// text, unique per chat), and when each of user A's arrived.
#[derive(Default)]
struct Calls {
    first: Mutex<HashMap<String, Instant>>,
    a_arrivals: Mutex<Vec<Instant>>,
}

impl Calls {
    /// The most of A's requests that arrived within one answer time of
    /// each other: how many of A's chats called the model at once (each
    /// call lasts at least `delay`).
    fn a_at_once(&self, delay: Duration) -> usize {
        let mut at = self.a_arrivals.lock().unwrap().clone();
        at.sort();
        (0..at.len())
            .map(|i| at[i..].iter().take_while(|t| **t < at[i] + delay).count())
            .max()
            .unwrap_or(0)
    }
}

struct Bench {
    store: Store,
    pool: sqlx::PgPool,
    calls: Arc<Calls>,
}

impl Bench {
    async fn user(&self, name: &str) -> anyhow::Result<Uuid> {
        let id = Uuid::new_v4();
        sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, $2, 'member')")
            .bind(id)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(id)
    }

    async fn start_chat(&self, owner: Uuid, text: &str) -> anyhow::Result<Uuid> {
        let input = CreateChatInput {
            owner_id: owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text(text)])],
            ..CreateChatInput::default()
        };
        Ok(self.store.create_chat(input).await?.chat.id)
    }

    /// B's send-to-first-call time, with A starting `a_chats` chats first
    /// (0: A idle).
    async fn run(&self, tag: &str, a_chats: usize, gap: Duration) -> anyhow::Result<Duration> {
        let a = self.user(&format!("a-{tag}")).await?;
        let b = self.user(&format!("b-{tag}")).await?;
        let starts = (0..a_chats).map(|i| {
            let text = format!("A {tag} {i}");
            async move { self.start_chat(a, &text).await }
        });
        for started in futures::future::join_all(starts).await {
            started?;
        }
        if a_chats > 0 {
            tokio::time::sleep(gap).await;
        }
        let text = format!("B {tag}");
        let sent = Instant::now();
        self.start_chat(b, &text).await?;
        let deadline = Instant::now() + Duration::from_secs(600);
        let first = loop {
            if let Some(at) = self.calls.first.lock().unwrap().get(&text) {
                break *at;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "B's chat never reached the model"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // Everything ends before the next run starts.
        loop {
            let busy: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM chats WHERE status <> 'waiting' OR worker_id IS NOT NULL",
            )
            .fetch_one(&self.pool)
            .await?;
            if busy == 0 {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "{busy} chats never finished");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(first - sent)
    }
}

fn p50(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let pool = chatd_store::pool_options(40).connect(db.url()).await?;
    let pubsub = PgPubsub::connect(pool.clone()).await?;
    let store = Store::with_config(
        pool.clone(),
        Arc::new(pubsub.clone()),
        StoreConfig::default(),
    );
    let llm = FakeLlm::start().await?;
    let calls = Arc::new(Calls::default());
    {
        let calls = calls.clone();
        let delay = args.delay;
        llm.set_default_fn(move |request| {
            let text = request.last_user_text().unwrap_or_default();
            calls
                .first
                .lock()
                .unwrap()
                .entry(text.clone())
                .or_insert_with(Instant::now);
            if text.starts_with("A ") {
                calls.a_arrivals.lock().unwrap().push(Instant::now());
            }
            Script::new().delay(delay).then_text("ok").usage(10, 2)
        });
    }
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
    let bench = Bench {
        store,
        pool: pool.clone(),
        calls: calls.clone(),
    };
    println!(
        "== fairness: user A starts {} chats, then user B starts 1; fake LLM answers after {} ms; p50 of {} runs",
        args.chats,
        args.delay.as_millis(),
        args.repeat
    );
    println!(
        "{:<22} {:>14} {:>14} {:>8} {:>16}",
        "replica", "B alone ms", "B behind A ms", "ratio", "A calls at once"
    );
    let shapes = [
        ("defaults (256, cap 8)", LimitDefaults::default()),
        (
            "16 runners, cap 8",
            LimitDefaults {
                max_runners: 16,
                ..LimitDefaults::default()
            },
        ),
        (
            "16 runners, no cap",
            LimitDefaults {
                max_runners: 16,
                max_running_chats: i32::MAX,
                ..LimitDefaults::default()
            },
        ),
    ];
    for (shape, (name, limits)) in shapes.into_iter().enumerate() {
        let worker = Worker::start(WorkerDeps {
            store: bench.store.clone(),
            pubsub: Arc::new(pubsub.clone()) as Arc<dyn Pubsub>,
            parts: PartBuffer::new(CancellationToken::new()),
            providers: Arc::new(DefaultProviderFactory),
            config: WorkerConfig {
                generate_titles: false,
                limits,
                ..WorkerConfig::default()
            },
        });
        calls.a_arrivals.lock().unwrap().clear();
        let (mut alone, mut behind) = (Vec::new(), Vec::new());
        for rep in 0..args.repeat {
            alone.push(
                bench
                    .run(&format!("{shape}-{rep}-idle"), 0, args.gap)
                    .await?,
            );
            behind.push(
                bench
                    .run(&format!("{shape}-{rep}-busy"), args.chats, args.gap)
                    .await?,
            );
        }
        worker.shutdown().await;
        let (alone, behind) = (p50(&mut alone), p50(&mut behind));
        println!(
            "{:<22} {:>14.1} {:>14.1} {:>8.2} {:>16}",
            name,
            ms(alone),
            ms(behind),
            behind.as_secs_f64() / alone.as_secs_f64(),
            calls.a_at_once(args.delay)
        );
    }
    Ok(())
}
