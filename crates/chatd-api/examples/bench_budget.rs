//! Cost of budgets (issue 31, "Measure": the budget check on the worker's
//! turns and on `POST /messages`, with and without, in the same run).
//!
//! 1. Worker turns, as `chatd-worker`'s `bench_worker` runs them (the fake
//!    LLM answering at once, reporting usage; one user; `--turns` turns per
//!    chat at 1, 10 and 100 concurrent chats): passes without budgets (the
//!    worker's `check_budgets` off and the ledger trigger disabled: the
//!    service before budgets) and with them (the owner has a spend and a
//!    token budget it never reaches: the check before every model call and
//!    the ledger written by every answer) alternate, `--repeat` times each,
//!    each on a worker and chats of its own. Printed: turns/s and p50/p99
//!    of send → `waiting` update per pass, and the medians' ratios
//!    (`worker budget ratio: chats=100 throughput=0.97 p50=1.03`).
//! 2. `POST /api/v2/chats/{chat}/messages` (queue mode, chats kept busy:
//!    no worker), in-process server: two users send at once, closed loop,
//!    `--clients` clients each for `--duration`; one user has budgets (the
//!    send reads the period's ledger first), the other none (no read).
//!    Printed: requests/s and p50/p99 per user and the ratios
//!    (`send budget ratio: p50=1.04 p99=1.02 throughput=0.97`). Then the
//!    same with the request-rate check: one user on a server that checks
//!    it, one on a server that does not (`ApiOptions::enforce_request_rate`
//!    off), at once (`send rate ratio: ...`).
//!
//! ```text
//! cargo run --release -p chatd-api --example bench_budget \
//!     [-- --turns 20 --levels 1,10,100|none --repeat 3 --clients 8 --duration 10]
//! ```
//! Uses `CHATD_TEST_DATABASE_URL` (default the local server); creates and
//! drops its own database. The request-rate limit is set out of reach, so
//! the check runs on every request and never refuses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_core::limits::LimitDefaults;
use chatd_core::{BusyBehavior, ChatStatus, MessagePart};
use chatd_pubsub::{ChatUpdate, PgPubsub, Pubsub, PubsubEvent, chat_update_channel};
use chatd_store::{CreateChatInput, NewMessage, SendMessageInput, Store, StoreConfig};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Args {
    turns: usize,
    levels: Vec<usize>,
    repeat: usize,
    clients: usize,
    duration: Duration,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        turns: 20,
        levels: vec![1, 10, 100],
        repeat: 3,
        clients: 8,
        duration: Duration::from_secs(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--turns" => args.turns = value()?.parse()?,
            "--levels" => {
                let levels = value()?;
                // `none`: only the `POST /messages` part.
                args.levels = if levels == "none" {
                    Vec::new()
                } else {
                    levels
                        .split(',')
                        .map(|n| n.trim().parse())
                        .collect::<Result<_, _>>()?
                }
            }
            "--repeat" => args.repeat = value()?.parse::<usize>()?.max(1),
            "--clients" => args.clients = value()?.parse::<usize>()?.max(1),
            "--duration" => args.duration = Duration::from_secs(value()?.parse()?),
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

/// The ledger trigger of answers (migration 0013).
const LEDGER_TRIGGER: &str = "trigger_count_chat_message_usage_on_insert";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let pool = chatd_store::pool_options(40).connect(db.url()).await?;
    let pubsub = PgPubsub::connect(pool.clone()).await?;
    let store = Store::with_config(
        pool.clone(),
        Arc::new(pubsub.clone()),
        StoreConfig::default(),
    );
    let llm = FakeLlm::start().await?;
    llm.set_default(Script::text("ok").usage(10, 1));
    let provider = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO chat_providers (id, provider, base_url) VALUES ($1, 'openai-compat', $2)",
    )
    .bind(provider)
    .bind(llm.base_url())
    .execute(&pool)
    .await?;
    // Priced, so that every answer adds spend to the ledger.
    sqlx::query(
        "INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default, options)
         VALUES ($1, $2, 'fake', 8192, true,
                 '{\"input_price_micros_per_mtok\": 1000000, \"output_price_micros_per_mtok\": 2000000}')",
    )
    .bind(Uuid::new_v4())
    .bind(provider)
    .execute(&pool)
    .await?;
    let owner = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO users (id, username, role, monthly_budget_micros, monthly_token_budget)
         VALUES ($1, 'bench', 'member', 1000000000000000, 1000000000000000)",
    )
    .bind(owner)
    .execute(&pool)
    .await?;

    println!(
        "== worker turns: fake LLM answering at once; {} turns per chat; passes without and with budgets alternate",
        args.turns
    );
    println!(
        "{:>6} {:>8} {:>10} {:>10} {:>10}",
        "chats", "budgets", "turns/s", "p50 ms", "p99 ms"
    );
    for level in args.levels.iter().copied() {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for _ in 0..args.repeat {
            for budgets in [false, true] {
                let pass =
                    worker_pass(&store, &pubsub, &pool, owner, budgets, level, args.turns).await?;
                println!(
                    "{:>6} {:>8} {:>10.1} {:>10.2} {:>10.2}",
                    level,
                    if budgets { "on" } else { "off" },
                    pass.per_sec,
                    pass.p50,
                    pass.p99
                );
                if budgets { &mut on } else { &mut off }.push(pass);
            }
        }
        let (off, on) = (Pass::median(&off), Pass::median(&on));
        println!(
            "worker budget ratio: chats={level} throughput={:.3} p50={:.3} p99={:.3} (median of {} passes each; with / without)",
            on.per_sec / off.per_sec,
            on.p50 / off.p50,
            on.p99 / off.p99,
            args.repeat
        );
    }
    pubsub.close().await;

    send_bench(&db, &args).await?;
    Ok(())
}

/// The figures of one pass.
#[derive(Debug, Clone, Copy)]
struct Pass {
    per_sec: f64,
    p50: f64,
    p99: f64,
}

impl Pass {
    /// Each figure's median over `passes`.
    fn median(passes: &[Pass]) -> Pass {
        let median = |f: fn(&Pass) -> f64| {
            let mut v: Vec<f64> = passes.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        Pass {
            per_sec: median(|p| p.per_sec),
            p50: median(|p| p.p50),
            p99: median(|p| p.p99),
        }
    }
}

/// Milliseconds at quantile `q` of sorted `v`.
fn percentile(v: &[Duration], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

/// One pass of `chats` chats of `turns` turns on a worker of its own, with
/// or without `budgets`.
async fn worker_pass(
    store: &Store,
    pubsub: &PgPubsub,
    pool: &PgPool,
    owner: Uuid,
    budgets: bool,
    chats: usize,
    turns: usize,
) -> anyhow::Result<Pass> {
    let toggle = if budgets { "ENABLE" } else { "DISABLE" };
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE chat_messages {toggle} TRIGGER {LEDGER_TRIGGER}"
    )))
    .execute(pool)
    .await?;
    let worker = Worker::start(WorkerDeps {
        store: store.clone(),
        pubsub: Arc::new(pubsub.clone()) as Arc<dyn Pubsub>,
        parts: PartBuffer::new(CancellationToken::new()),
        providers: Arc::new(DefaultProviderFactory),
        config: WorkerConfig {
            acquisition_interval: Duration::from_secs(1),
            generate_titles: false,
            check_budgets: budgets,
            limits: LimitDefaults {
                max_runners: 100_000,
                max_running_chats: i32::MAX,
                ..LimitDefaults::default()
            },
            ..WorkerConfig::default()
        },
    });
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..chats {
        let (store, pubsub) = (store.clone(), pubsub.clone());
        tasks.push(tokio::spawn(async move {
            run_chat(&store, &pubsub, owner, turns).await
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    worker.shutdown().await;
    latencies.sort();
    Ok(Pass {
        per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
    })
}

/// Creates a chat and sends `turns - 1` more messages, one after each
/// answer; returns each turn's time from the send to the `waiting` update.
async fn run_chat(
    store: &Store,
    pubsub: &PgPubsub,
    owner: Uuid,
    turns: usize,
) -> anyhow::Result<Vec<Duration>> {
    let chat_id = Uuid::new_v4();
    let mut updates = pubsub.subscribe(&chat_update_channel(chat_id)).await?;
    let mut out = Vec::with_capacity(turns);
    for turn in 0..turns {
        let started = Instant::now();
        let message =
            NewMessage::user(vec![MessagePart::text(format!("turn {turn}"))]).created_by(owner);
        if turn == 0 {
            Box::pin(store.create_chat(CreateChatInput {
                id: Some(chat_id),
                owner_id: owner,
                initial_messages: vec![message],
                ..Default::default()
            }))
            .await?;
        } else {
            let machine = store.machine(chat_id);
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
        loop {
            let event = tokio::time::timeout(Duration::from_secs(60), updates.recv())
                .await?
                .ok_or_else(|| anyhow::anyhow!("pubsub closed"))?;
            let PubsubEvent::Message(payload) = event else {
                continue;
            };
            if ChatUpdate::from_payload(&payload)?.status == ChatStatus::Waiting {
                break;
            }
        }
        out.push(started.elapsed());
    }
    Ok(out)
}

/// Part 2: `POST /messages` by a user with budgets and one without, at once
/// (`send budget ratio`); then by a user on a server that checks the
/// request rate and one on a server that does not (`send rate ratio`; both
/// servers on one database, no budgets).
async fn send_bench(db: &TestDatabase, args: &Args) -> anyhow::Result<()> {
    let pool = chatd_store::pool_options(40).connect(db.url()).await?;
    let store = Store::new(
        pool.clone(),
        Arc::new(chatd_pubsub::RecordingPublisher::new()),
    );
    let server = |enforce_request_rate: bool| {
        let options = chatd_api::ApiOptions {
            max_queued_messages: 1_000_000_000,
            // Out of reach: the check runs on every request, never refuses.
            limits: LimitDefaults {
                requests_per_minute: i32::MAX,
                ..LimitDefaults::default()
            },
            enforce_request_rate,
            ..chatd_api::ApiOptions::default()
        };
        let app = chatd_api::router(chatd_api::AppState::new(store.clone(), options));
        async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let base = format!("http://{}", listener.local_addr()?);
            let task = tokio::spawn(async move { axum::serve(listener, app).await });
            anyhow::Ok((base, task))
        }
    };
    let (checked, checked_task) = server(true).await?;
    let (unchecked, unchecked_task) = server(false).await?;
    let http = reqwest::Client::new();

    let mut users = Vec::new();
    for (name, budgets, base) in [("with", true, &checked), ("without", false, &checked)] {
        users.push(sender(&pool, &http, base, name, budgets, args.clients).await?);
    }
    let figures = closed_loop(&http, &users, args).await?;
    println!(
        "\n== POST /messages (queue mode, busy chats), {} clients per user, {} s, both users at once",
        args.clients,
        args.duration.as_secs()
    );
    print_figures("budgets", &figures);
    let (with, without) = (figures[0].1, figures[1].1);
    println!(
        "send budget ratio: p50={:.3} p99={:.3} throughput={:.3} (with / without)",
        with.p50 / without.p50,
        with.p99 / without.p99,
        with.per_sec / without.per_sec
    );

    let users = vec![
        sender(&pool, &http, &checked, "rate-on", false, args.clients).await?,
        sender(&pool, &http, &unchecked, "rate-off", false, args.clients).await?,
    ];
    let figures = closed_loop(&http, &users, args).await?;
    println!(
        "\n== POST /messages, one user on a server checking the request rate, one on a server that does not, at once"
    );
    print_figures("rate", &figures);
    let (with, without) = (figures[0].1, figures[1].1);
    println!(
        "send rate ratio: p50={:.3} p99={:.3} throughput={:.3} (with / without)",
        with.p50 / without.p50,
        with.p99 / without.p99,
        with.per_sec / without.per_sec
    );
    checked_task.abort();
    unchecked_task.abort();
    Ok(())
}

/// A sending user: name, the server it sends to, its token and one busy
/// chat per client (no worker runs them).
struct Sender {
    name: &'static str,
    base: String,
    token: String,
    chats: Vec<String>,
}

/// Creates member `name` (with budgets it never reaches when `budgets`)
/// and its chats on the server at `base`.
async fn sender(
    pool: &PgPool,
    http: &reqwest::Client,
    base: &str,
    name: &'static str,
    budgets: bool,
    clients: usize,
) -> anyhow::Result<Sender> {
    let token = chatd_api::create_token(pool, name, false).await?;
    if budgets {
        sqlx::query(
            "UPDATE users SET monthly_budget_micros = 1000000000000000,
                 monthly_token_budget = 1000000000000000 WHERE username = $1",
        )
        .bind(name)
        .execute(pool)
        .await?;
    }
    let mut chats = Vec::new();
    for _ in 0..clients {
        let answer: serde_json::Value = http
            .post(format!("{base}/api/v2/chats"))
            .bearer_auth(&token)
            .json(&json!({"content": [{"type": "text", "text": "hello"}]}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        chats.push(answer["id"].as_str().unwrap_or_default().to_owned());
    }
    Ok(Sender {
        name,
        base: base.to_owned(),
        token,
        chats,
    })
}

/// Every client of every user sends at once, closed loop: a 2 s warm-up,
/// then `args.duration` measured. The figures per user, in `users`' order.
async fn closed_loop(
    http: &reqwest::Client,
    users: &[Sender],
    args: &Args,
) -> anyhow::Result<Vec<(&'static str, Pass)>> {
    let run = |secs: Duration| {
        let mut tasks = Vec::new();
        for (index, user) in users.iter().enumerate() {
            for chat in &user.chats {
                let http = http.clone();
                let url = format!("{}/api/v2/chats/{chat}/messages", user.base);
                let token = user.token.clone();
                tasks.push(tokio::spawn(async move {
                    let deadline = Instant::now() + secs;
                    let mut latencies = Vec::new();
                    while Instant::now() < deadline {
                        let started = Instant::now();
                        http.post(&url)
                            .bearer_auth(&token)
                            .json(&json!({"content": [{"type": "text", "text": "more"}], "busy_behavior": "queue"}))
                            .send()
                            .await?
                            .error_for_status()?;
                        latencies.push(started.elapsed());
                    }
                    anyhow::Ok((index, latencies))
                }));
            }
        }
        tasks
    };
    for task in run(Duration::from_secs(2)) {
        task.await??;
    }
    let mut by_user: Vec<Vec<Duration>> = vec![Vec::new(); users.len()];
    for task in run(args.duration) {
        let (index, latencies) = task.await??;
        by_user[index].extend(latencies);
    }
    Ok(users
        .iter()
        .zip(by_user)
        .map(|(user, mut latencies)| {
            latencies.sort();
            let pass = Pass {
                per_sec: latencies.len() as f64 / args.duration.as_secs_f64(),
                p50: percentile(&latencies, 0.50),
                p99: percentile(&latencies, 0.99),
            };
            (user.name, pass)
        })
        .collect())
}

/// Prints one line per user of a [`closed_loop`].
fn print_figures(column: &str, figures: &[(&'static str, Pass)]) {
    println!(
        "{:>8} {:>10} {:>10} {:>10}",
        column, "req/s", "p50 ms", "p99 ms"
    );
    for (name, pass) in figures {
        println!(
            "{:>8} {:>10.1} {:>10.2} {:>10.2}",
            name, pass.per_sec, pass.p50, pass.p99
        );
    }
}
