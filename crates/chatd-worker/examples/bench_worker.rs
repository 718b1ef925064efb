//! Benchmark of one worker (issues "The chat worker" and 15).
//!
//! 1. With the fake LLM answering at once: turns per second and p50/p99 of
//!    the time from the send (the start of the `SendMessage` bundle) to the
//!    `chat:update` that says the chat waits again, for 1, 10 and 100
//!    concurrent chats; for each level, where a turn's time goes (the
//!    worker's [`chatd_worker::timeline`] hops, p50 since the send and since
//!    the hop before); and, in the same run, a raw-SQL ceiling: the same
//!    number of clients running one turn's transactions (send, acquire,
//!    history read, attempt, step and finish, abandon) as bare statements
//!    back to back, and the ratio of our turns/s to it, printed as
//!    `turn ceiling ratio: chats=100 ratio=0.83`.
//! 2. With a fake LLM that streams 50 parts over 10 s (`--stream-time`),
//!    the chats starting evenly over 5 s (`--ramp`), so that they all
//!    stream at once at the peak (the table's `streaming` column counts
//!    them): the turn time against the model's own time (`streaming ratio:
//!    chats=1000 ratio=0.91`, model time / p50 turn time) and the memory
//!    per running chat (peak RSS growth over the idle process, divided by the
//!    number of chats: `memory per running chat: chats=1000 kib=31.2`). The
//!    streaming fake LLM runs in a child process (this program started again
//!    with `--serve-fake-llm PARTS:MS`), so the figure is the replica's own:
//!    the worker, its runners, their model connections and the stream, with
//!    the bench's one `chat:update` subscription per chat on top.
//!
//! ```text
//! cargo run --release -p chatd-worker --example bench_worker \
//!     [-- --turns 20 --fast 1,10,100 --slow 100,400,1000 --repeat 3]
//! ```
//! Each fast level runs `--repeat` times (default 3), ours and the ceiling
//! alternately on chats of their own, and its ratio is the median.
//! `--quick` runs a short version (5 turns; 1, 10 and 100 chats; 200
//! streaming chats over 3 s, starting within 1 s); `--min-ratio 1=0.3,10=0.3,100=0.3,stream=0.6` makes it
//! exit non-zero when a ratio is below its floor (the test command's quick
//! benchmark, `scripts/bench-quick.sh`). Uses `CHATD_TEST_DATABASE_URL`
//! (default the local server); creates and drops its own database.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chatd_core::{BusyBehavior, ChatStatus, MessagePart};
use chatd_pubsub::{ChatUpdate, PgPubsub, Pubsub, PubsubEvent, chat_update_channel};
use chatd_store::{CreateChatInput, NewMessage, SendMessageInput, Store, StoreConfig};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use chatd_worker::timeline::{Hop, Timeline, TimelineSink};
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Bench {
    store: Store,
    pubsub: PgPubsub,
    owner: Uuid,
}

/// Every hop the worker reported, in arrival order.
#[derive(Default)]
struct Recorder(Mutex<Vec<(Uuid, Hop, Instant)>>);

impl TimelineSink for Recorder {
    fn hop(&self, chat_id: Uuid, hop: Hop, at: Instant) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((chat_id, hop, at));
    }
}

/// One turn as the client saw it.
#[derive(Debug, Clone, Copy)]
struct Turn {
    chat_id: Uuid,
    /// Before the send's bundle began.
    started: Instant,
    /// The send's bundle committed.
    committed: Instant,
    /// The `chat:update` saying the chat waits again arrived.
    done: Instant,
}

impl Turn {
    fn latency(&self) -> Duration {
        self.done - self.started
    }
}

struct Args {
    turns: usize,
    fast: Vec<usize>,
    slow: Vec<usize>,
    floors: BTreeMap<String, f64>,
    /// How long the streaming fake model takes to answer.
    stream_time: Duration,
    /// Over how long the streaming chats start.
    ramp: Duration,
    /// Passes of each fast level, ours and the ceiling alternately
    /// (`--repeat`, default 3, `--quick` too): the median ratio counts.
    repeat: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let list = |v: String| -> Vec<usize> {
        v.split(',')
            .filter(|n| !n.trim().is_empty())
            .map(|n| n.trim().parse().expect("a number"))
            .collect()
    };
    let mut args = Args {
        turns: 20,
        fast: vec![1, 10, 100],
        slow: vec![100, 400, 1000],
        floors: BTreeMap::new(),
        stream_time: Duration::from_secs(10),
        ramp: Duration::from_secs(5),
        repeat: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--quick" => {
                args.turns = 5;
                args.fast = vec![1, 10, 100];
                args.slow = vec![200];
                args.stream_time = Duration::from_secs(3);
                args.ramp = Duration::from_secs(1);
            }
            "--repeat" => {
                args.repeat = it.next().expect("--repeat N").parse::<usize>()?.max(1);
            }
            "--stream-time" => {
                args.stream_time =
                    Duration::from_millis(it.next().expect("--stream-time MS").parse()?)
            }
            "--ramp" => args.ramp = Duration::from_millis(it.next().expect("--ramp MS").parse()?),
            "--turns" => args.turns = it.next().expect("--turns N").parse()?,
            "--fast" => args.fast = list(it.next().expect("--fast A,B")),
            "--slow" => args.slow = list(it.next().expect("--slow A,B")),
            "--min-ratio" => {
                for pair in it.next().expect("--min-ratio K=V,...").split(',') {
                    let (k, v) = pair.split_once('=').expect("K=V");
                    args.floors.insert(k.trim().to_owned(), v.trim().parse()?);
                }
            }
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some("--serve-fake-llm") {
        return serve_fake_llm(&argv.next().unwrap_or_default()).await;
    }
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
    let recorder = Arc::new(Recorder::default());
    let worker = Worker::start(WorkerDeps {
        store: store.clone(),
        pubsub: Arc::new(pubsub.clone()) as Arc<dyn Pubsub>,
        parts: PartBuffer::new(CancellationToken::new()),
        providers: Arc::new(DefaultProviderFactory),
        config: WorkerConfig {
            acquisition_interval: Duration::from_secs(1),
            generate_titles: false,
            timeline: Timeline::new(recorder.clone()),
            // One user runs every chat, up to 1000 at once: this measures
            // the replica's cost per turn and per running chat, not the
            // per-user and per-replica caps (bench_fairness does).
            limits: chatd_core::limits::LimitDefaults {
                max_runners: 100_000,
                max_running_chats: i32::MAX,
                ..Default::default()
            },
            ..WorkerConfig::default()
        },
    });
    let bench = Arc::new(Bench {
        store,
        pubsub: pubsub.clone(),
        owner,
    });
    let mut ratios: Vec<(String, f64)> = Vec::new();

    println!(
        "== fake LLM answering at once; {} turns per chat",
        args.turns
    );
    println!(
        "{:>6} {:>8} {:>10} {:>10} {:>10} {:>12} {:>8}",
        "chats", "turns", "turns/s", "p50 ms", "p99 ms", "ceiling/s", "ratio"
    );
    llm.set_default(Script::text("ok").usage(10, 1));
    for concurrency in args.fast.iter().copied() {
        // Ours and the ceiling alternately, `--repeat` times, each pass on
        // chats of its own: the median ratio is the figure, so that one
        // slow second of the machine (an fsync stall) does not decide it.
        let mut level_ratios = Vec::new();
        let mut last = None;
        for _ in 0..args.repeat {
            recorder.0.lock().unwrap().clear();
            let started = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..concurrency {
                let bench = bench.clone();
                let turns = args.turns;
                tasks.push(tokio::spawn(async move { bench.run_chat(turns).await }));
            }
            let mut turns = Vec::new();
            for task in tasks {
                turns.extend(task.await??);
            }
            let elapsed = started.elapsed();
            let ceiling = raw_ceiling(&pool, owner, concurrency, args.turns).await?;
            let mut latencies: Vec<Duration> = turns.iter().map(Turn::latency).collect();
            latencies.sort();
            let ours = turns.len() as f64 / elapsed.as_secs_f64();
            let ratio = ours / ceiling;
            println!(
                "{:>6} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>12.1} {:>8.2}",
                concurrency,
                turns.len(),
                ours,
                percentile(&latencies, 0.50),
                percentile(&latencies, 0.99),
                ceiling,
                ratio
            );
            level_ratios.push(ratio);
            last = Some(turns);
        }
        let turns = last.expect("at least one pass");
        let hops = recorder.0.lock().unwrap().clone();
        print_breakdown(concurrency, &turns, &hops);
        level_ratios.sort_by(f64::total_cmp);
        let ratio = level_ratios[level_ratios.len() / 2];
        println!(
            "turn ceiling ratio: chats={concurrency} ratio={ratio:.2} (median of {} passes)",
            level_ratios.len()
        );
        ratios.push((concurrency.to_string(), ratio));
    }

    let model_time = args.stream_time;
    println!(
        "\n== fake LLM streaming 50 parts over {} ms; one turn per chat, the chats starting evenly over {} ms",
        model_time.as_millis(),
        args.ramp.as_millis()
    );
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10} {:>14}",
        "chats", "streaming", "p50 ms", "p99 ms", "max ms", "KiB per chat"
    );
    let streaming_llm = if args.slow.is_empty() {
        None
    } else {
        let child = FakeLlmProcess::start(50, model_time / 50).await?;
        sqlx::query("UPDATE chat_providers SET base_url = $2 WHERE id = $1")
            .bind(provider)
            .bind(&child.base_url)
            .execute(&pool)
            .await?;
        Some(child)
    };
    for level in args.slow.iter().copied() {
        recorder.0.lock().unwrap().clear();
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
        let step = args.ramp / level.max(1) as u32;
        let ramp_start = tokio::time::Instant::now();
        for i in 0..level {
            let bench = bench.clone();
            let start_at = ramp_start + step * i as u32;
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(start_at).await;
                bench.run_chat(1).await
            }));
        }
        let mut turns = Vec::new();
        for task in tasks {
            turns.extend(task.await??);
        }
        sampler.abort();
        let mut latencies: Vec<Duration> = turns.iter().map(Turn::latency).collect();
        latencies.sort();
        let per_chat = peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(base) as f64
            / level as f64;
        let hops = recorder.0.lock().unwrap().clone();
        let streaming = peak_streaming(&hops);
        let p50 = percentile(&latencies, 0.50);
        println!(
            "{:>6} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>14.1}",
            level,
            streaming,
            p50,
            percentile(&latencies, 0.99),
            latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            per_chat
        );
        print_breakdown(level, &turns, &hops);
        let ratio = model_time.as_secs_f64() * 1000.0 / p50;
        println!("streaming ratio: chats={level} ratio={ratio:.2}");
        println!("memory per running chat: chats={level} kib={per_chat:.1}");
        ratios.push(("stream".into(), ratio));
    }
    worker.shutdown().await;
    pubsub.close().await;
    drop(streaming_llm);

    let mut failed = false;
    for (key, floor) in &args.floors {
        for (name, ratio) in ratios.iter().filter(|(name, _)| name == key) {
            if ratio < floor {
                println!("FLOOR MISSED: {name} ratio {ratio:.2} < floor {floor:.2}");
                failed = true;
            } else {
                println!("floor kept: {name} ratio {ratio:.2} >= {floor:.2}");
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

/// The most chats streaming at once: between their first part and the end
/// of their response.
fn peak_streaming(hops: &[(Uuid, Hop, Instant)]) -> usize {
    let mut edges: Vec<(Instant, i32)> = hops
        .iter()
        .filter_map(|(_, hop, at)| match hop {
            Hop::FirstPart => Some((*at, 1)),
            Hop::ResponseDone => Some((*at, -1)),
            _ => None,
        })
        .collect();
    edges.sort_by_key(|(at, delta)| (*at, *delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

/// Prints, for the turns of one level, the p50 of each hop since the send
/// started and since the hop before it (only the hops every turn met are
/// compared with the one before).
fn print_breakdown(level: usize, turns: &[Turn], hops: &[(Uuid, Hop, Instant)]) {
    let mut by_chat: BTreeMap<Uuid, Vec<(Hop, Instant)>> = BTreeMap::new();
    for (chat, hop, at) in hops {
        by_chat.entry(*chat).or_default().push((*hop, *at));
    }
    // Rows: ("send committed", …hops…, "update seen"): offsets in ms.
    let mut rows: Vec<(&'static str, Vec<f64>)> = vec![("send committed", Vec::new())];
    rows.extend(Hop::ALL.iter().map(|h| (h.name(), Vec::new())));
    rows.push(("waiting update seen", Vec::new()));
    let mut deltas: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    for turn in turns {
        let events = by_chat.get(&turn.chat_id).map(Vec::as_slice).unwrap_or(&[]);
        let mut offsets: Vec<Option<f64>> = vec![Some(ms(turn.committed - turn.started))];
        for hop in Hop::ALL {
            // The first report of the hop at or after the send; the abandon
            // may come after the client saw the update (up to 1 s later).
            let end = turn.done + Duration::from_secs(1);
            let at = events
                .iter()
                .filter(|(h, at)| *h == hop && *at >= turn.started && *at <= end)
                .map(|(_, at)| *at)
                .min();
            offsets.push(at.map(|at| ms(at - turn.started)));
        }
        offsets.push(Some(ms(turn.latency())));
        let mut previous = Some(0.0);
        for (i, offset) in offsets.iter().enumerate() {
            if let Some(offset) = offset {
                rows[i].1.push(*offset);
                if let Some(previous) = previous {
                    deltas[i].push(offset - previous);
                }
            }
            previous = *offset;
        }
    }
    println!(
        "   where a turn's time goes (chats={level}, {} turns; p50 ms)",
        turns.len()
    );
    println!(
        "   {:<22} {:>8} {:>12} {:>14}",
        "hop", "turns", "since send", "since previous"
    );
    for (i, (name, values)) in rows.iter_mut().enumerate() {
        if values.is_empty() {
            println!("   {name:<22} {:>8}", 0);
            continue;
        }
        values.sort_by(f64::total_cmp);
        deltas[i].sort_by(f64::total_cmp);
        let p50 = |v: &[f64]| {
            if v.is_empty() {
                f64::NAN
            } else {
                v[(v.len() - 1) / 2]
            }
        };
        println!(
            "   {:<22} {:>8} {:>12.2} {:>14.2}",
            name,
            values.len(),
            p50(values),
            p50(&deltas[i])
        );
    }
}

/// Turns per second of `clients` clients each running `turns` raw-SQL turns
/// back to back: the transactions of one turn as bare statements on the
/// same schema (triggers included), without validation, publication,
/// providers or waiting for notifications.
async fn raw_ceiling(
    pool: &PgPool,
    owner: Uuid,
    clients: usize,
    turns: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let chat = Uuid::new_v4();
            sqlx::query(
                "INSERT INTO chats (id, owner_id, status, snapshot_version) VALUES ($1, $2, 'waiting', 1)",
            )
            .bind(chat)
            .bind(owner)
            .execute(&pool)
            .await?;
            for _ in 0..turns {
                raw_turn(&pool, chat).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok((clients * turns) as f64 / started.elapsed().as_secs_f64())
}

/// One turn's transactions: send, acquire, the history read, the attempt,
/// the step with its finish, the abandon.
async fn raw_turn(pool: &PgPool, chat: Uuid) -> anyhow::Result<()> {
    let runner = Uuid::new_v4();
    let text = serde_json::json!([{"type": "text", "text": "turn"}]);
    // Send.
    let mut tx = raw_begin(pool, chat).await?;
    sqlx::query("INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'user', $2)")
        .bind(chat)
        .bind(&text)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE chats SET status = 'running' WHERE id = $1")
        .bind(chat)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    // Acquire.
    let mut tx = raw_begin(pool, chat).await?;
    sqlx::query("UPDATE chats SET worker_id = $2, runner_id = $2 WHERE id = $1")
        .bind(chat)
        .bind(runner)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at) VALUES ($1, $2, now())",
    )
    .bind(chat)
    .bind(runner)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    // The history the model call needs.
    sqlx::query("SELECT id, role, content FROM chat_messages WHERE chat_id = $1 AND NOT deleted ORDER BY id")
        .bind(chat)
        .fetch_all(pool)
        .await?;
    // Attempt.
    let mut tx = raw_begin(pool, chat).await?;
    sqlx::query("UPDATE chats SET generation_attempt = generation_attempt + 1 WHERE id = $1")
        .bind(chat)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    // Step and finish.
    let mut tx = raw_begin(pool, chat).await?;
    sqlx::query("INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'assistant', $2)")
        .bind(chat)
        .bind(&text)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE chats SET status = 'waiting' WHERE id = $1")
        .bind(chat)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    // Abandon.
    let mut tx = raw_begin(pool, chat).await?;
    sqlx::query("DELETE FROM chat_heartbeats WHERE chat_id = $1 AND runner_id = $2")
        .bind(chat)
        .bind(runner)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE chats SET worker_id = NULL, runner_id = NULL WHERE id = $1")
        .bind(chat)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// A raw bundle's start: lock the row, bump `snapshot_version`.
async fn raw_begin(
    pool: &PgPool,
    chat: Uuid,
) -> anyhow::Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT id FROM chats WHERE id = $1 FOR UPDATE")
        .bind(chat)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE chats SET snapshot_version = snapshot_version + 1, updated_at = now() WHERE id = $1",
    )
    .bind(chat)
    .execute(&mut *tx)
    .await?;
    Ok(tx)
}

impl Bench {
    /// Creates a chat, then sends `turns - 1` more messages, one after each
    /// answer; returns each turn.
    async fn run_chat(&self, turns: usize) -> anyhow::Result<Vec<Turn>> {
        let chat_id = Uuid::new_v4();
        let mut updates = self.pubsub.subscribe(&chat_update_channel(chat_id)).await?;
        let mut out = Vec::with_capacity(turns);
        for turn in 0..turns {
            let started = Instant::now();
            let message = NewMessage::user(vec![MessagePart::text(format!("turn {turn}"))])
                .created_by(self.owner);
            // The store calls are boxed, so that this client's task does
            // not hold their space while it waits (memory per running chat).
            if turn == 0 {
                Box::pin(self.store.create_chat(CreateChatInput {
                    id: Some(chat_id),
                    owner_id: self.owner,
                    initial_messages: vec![message],
                    ..Default::default()
                }))
                .await?;
            } else {
                let machine = self.store.machine(chat_id);
                Box::pin(machine.update(|tx| {
                    Box::pin(async move {
                        tx.send_message(SendMessageInput {
                            message,
                            busy_behavior: BusyBehavior::Queue,
                            max_queue_size: None,
                        })
                        .await
                    })
                }))
                .await?;
            }
            let committed = Instant::now();
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
            out.push(Turn {
                chat_id,
                started,
                committed,
                done: Instant::now(),
            });
        }
        Ok(out)
    }
}

/// `--serve-fake-llm PARTS:MS`: the child process of [`FakeLlmProcess`].
/// Answers every request with 50 words in `PARTS` parts, `MS` apart, usage
/// 10/50; prints `listening on BASE_URL`; exits when its stdin closes (the
/// parent went away).
async fn serve_fake_llm(spec: &str) -> anyhow::Result<()> {
    let (parts, ms) = spec
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("--serve-fake-llm PARTS:MS"))?;
    let parts: usize = parts.parse()?;
    let delay = Duration::from_millis(ms.parse()?);
    let llm = FakeLlm::start().await?;
    llm.set_default(Script::text_in_parts(&"word ".repeat(50), parts, delay).usage(10, 50));
    println!("listening on {}", llm.base_url());
    let mut stdin = tokio::io::stdin();
    let mut sink = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut stdin, &mut sink).await?;
    Ok(())
}

/// The streaming fake LLM in a child process, so that its memory is not
/// counted as the replica's; killed on drop.
struct FakeLlmProcess {
    _child: tokio::process::Child,
    base_url: String,
}

impl FakeLlmProcess {
    async fn start(parts: usize, delay: Duration) -> anyhow::Result<Self> {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .arg("--serve-fake-llm")
            .arg(format!("{parts}:{}", delay.as_millis()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await?;
        let base_url = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow::anyhow!("the fake LLM child printed {line:?}"))?
            .to_owned();
        Ok(FakeLlmProcess {
            _child: child,
            base_url,
        })
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).floor() as usize;
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
