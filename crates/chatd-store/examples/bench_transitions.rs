//! Benchmark: transitions per second through `ChatMachine` versus a raw-SQL
//! baseline doing the same row-lock/update/insert work.
//!
//! Each chat runs `create`, then `--rounds` cycles of
//! `send → record attempt → commit step → finish turn`, with `--clients`
//! concurrent tasks sharing `--chats` chats, against one PostgreSQL. Each
//! bundle is `ChatMachine::update_optimistic`, as the worker's are. The
//! store publishes through the real LISTEN/NOTIFY pubsub. The baseline runs
//! the same statements a minimal implementation needs (lock and bump, insert
//! the message, set the status) on the same schema, triggers included, with
//! no validation, classification or publication.
//!
//! ```text
//! cargo run --release -p chatd-store --example bench_transitions -- \
//!     --chats 200 --clients 8 --rounds 5 [--repeat 5] [--postgres-url URL] [--min-ratio 0.5] \
//!     [--side ours|raw|both] [--history 1]
//! ```
//! `--history N` starts every chat with N messages (alternately user and
//! assistant) instead of one: the cost of a transition in a long chat.
//! `--side ours` or `--side raw` runs one side alone (to profile it; no
//! ratio).
//! Both run alternately `--repeat` times (default 5: a single pass varies by ±0.1 on the 2-core machine) on chats of their own;
//! prints transitions/s for both in each pass and the median ratio; with
//! `--min-ratio` it
//! exits non-zero when the ratio is below it (the test command's quick
//! benchmark, `scripts/bench-quick.sh`). It creates and drops its
//! own database (`chatd_bench_<random>`) on the server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_core::{BusyBehavior, MessagePart};
use chatd_pubsub::PgPubsub;
use chatd_store::{ChatMachine, CreateChatInput, NewMessage, SendMessageInput, Store};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions, PgPool};
use uuid::Uuid;

struct Args {
    url: String,
    chats: usize,
    clients: usize,
    rounds: usize,
    /// How many times both sides run, alternately (`--repeat`).
    repeat: usize,
    /// Exit non-zero when the ratio is below this (`--min-ratio`).
    min_ratio: Option<f64>,
    /// Which side runs (`--side ours|raw|both`, default both): one side
    /// alone is for profiling it (no ratio then).
    side: String,
    /// Messages each chat starts with (`--history`, default 1).
    history: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        url: std::env::var("CHATD_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        chats: 200,
        clients: 8,
        rounds: 5,
        repeat: 5,
        min_ratio: None,
        side: "both".into(),
        history: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--postgres-url" => args.url = value,
            "--chats" => args.chats = value.parse().expect("--chats"),
            "--clients" => args.clients = value.parse().expect("--clients"),
            "--rounds" => args.rounds = value.parse().expect("--rounds"),
            "--repeat" => args.repeat = value.parse::<usize>().expect("--repeat").max(1),
            "--min-ratio" => args.min_ratio = Some(value.parse().expect("--min-ratio")),
            "--history" => args.history = value.parse::<usize>().expect("--history").max(1),
            "--side" if ["ours", "raw", "both"].contains(&value.as_str()) => args.side = value,
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let admin: PgConnectOptions = args.url.parse()?;
    let name = format!("chatd_bench_{}", Uuid::new_v4().simple());
    let mut conn = admin.connect().await?;
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut conn)
        .await?;
    let pool = chatd_store::pool_options(args.clients as u32 + 4)
        .connect_with(admin.clone().database(&name))
        .await?;
    chatd_store::migrate(&pool).await?;
    let owner = Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'bench', 'member')")
        .bind(owner)
        .execute(&pool)
        .await?;

    // A long history (`--history`) is written by one more bundle.
    let transitions_per_chat = 1 + 4 * args.rounds + usize::from(args.history > 1);
    let total = (args.chats * transitions_per_chat) as f64;
    println!(
        "bench_transitions: {} chats x (create + {} rounds x 4) = {} transitions, {} concurrent clients",
        args.chats, args.rounds, total, args.clients
    );

    let pubsub = PgPubsub::connect(pool.clone()).await?;
    let store = if std::env::var_os("BENCH_MEMORY_PUBSUB").is_some() {
        Store::new(pool.clone(), Arc::new(chatd_pubsub::MemoryPubsub::new()))
    } else {
        Store::new(pool.clone(), Arc::new(pubsub.clone()))
    };
    let rounds = args.rounds;
    let history = args.history;
    // Both sides run alternately, `--repeat` times, each on chats of its
    // own: the median ratio of the pairs is the figure, so that one slow
    // second of the machine (an fsync stall, a checkpoint) does not decide
    // it.
    let mut ratios = Vec::new();
    for pass in 1..=args.repeat {
        if args.side != "both" {
            let elapsed = if args.side == "ours" {
                run(&args, store.clone(), move |store| async move {
                    machine_chat(&store, owner, rounds, history).await
                })
                .await?
            } else {
                run(&args, pool.clone(), move |pool| async move {
                    raw_chat(&pool, owner, rounds, history).await
                })
                .await?
            };
            println!(
                "pass {pass}: {} alone {:>7.0} transitions/s ({:.2} s)",
                args.side,
                total / elapsed.as_secs_f64(),
                elapsed.as_secs_f64()
            );
            continue;
        }
        let ours = run(&args, store.clone(), move |store| async move {
            machine_chat(&store, owner, rounds, history).await
        })
        .await?;
        let baseline = run(&args, pool.clone(), move |pool| async move {
            raw_chat(&pool, owner, rounds, history).await
        })
        .await?;
        let ours_tps = total / ours.as_secs_f64();
        let base_tps = total / baseline.as_secs_f64();
        let ratio = ours_tps / base_tps;
        println!(
            "pass {pass}: chatd ChatMachine {ours_tps:>7.0} transitions/s ({:.2} s), raw SQL baseline {base_tps:>7.0} transitions/s ({:.2} s), ratio {ratio:.2}",
            ours.as_secs_f64(),
            baseline.as_secs_f64()
        );
        ratios.push(ratio);
    }
    pubsub.close().await;
    pool.close().await;
    sqlx::query(AssertSqlSafe(format!(
        "DROP DATABASE \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await?;

    if ratios.is_empty() {
        return Ok(());
    }
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    println!(
        "ratio (ours / baseline): {ratio:.2} (median of {} passes)",
        ratios.len()
    );
    if let Some(floor) = args.min_ratio {
        if ratio < floor {
            println!("FLOOR MISSED: transitions ratio {ratio:.2} < floor {floor:.2}");
            std::process::exit(1);
        }
        println!("floor kept: transitions ratio {ratio:.2} >= {floor:.2}");
    }
    Ok(())
}

/// Runs `chat(context)` once per chat index, `--clients` at a time; returns
/// the wall time.
async fn run<C, F, Fut>(args: &Args, context: C, chat: F) -> anyhow::Result<Duration>
where
    C: Clone + Send + 'static,
    F: Fn(C) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let chats = args.chats;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let next = next.clone();
        let chat = chat.clone();
        let context = context.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= chats {
                    return anyhow::Ok(());
                }
                chat(context.clone()).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

fn text(s: &str) -> Vec<MessagePart> {
    vec![MessagePart::text(s)]
}

/// Adds `n` messages to chat `$1` in one statement, assistant and user
/// alternately (the last one a user message), `$2` their content: the long
/// history of `--history`, written the same way on both sides.
const BULK_HISTORY: &str = "INSERT INTO chat_messages (chat_id, role, content)
     SELECT $1, CASE WHEN ($3 - g) % 2 = 0 THEN 'user' ELSE 'assistant' END, $2
     FROM generate_series(1, $3) g";

async fn bulk_history(conn: &mut sqlx::PgConnection, id: Uuid, n: usize) -> anyhow::Result<()> {
    if n > 0 {
        sqlx::query(BULK_HISTORY)
            .bind(id)
            .bind(serde_json::to_value(text("hello"))?)
            .bind(n as i32)
            .execute(conn)
            .await?;
    }
    Ok(())
}

async fn machine_chat(
    store: &Store,
    owner: Uuid,
    rounds: usize,
    history: usize,
) -> anyhow::Result<()> {
    let created = store
        .create_chat(CreateChatInput {
            owner_id: owner,
            initial_messages: vec![NewMessage::user(text("hello"))],
            ..Default::default()
        })
        .await?;
    let machine = store.machine(created.chat.id);
    if history > 1 {
        let mut tx = machine.begin().await?;
        bulk_history(tx.conn().await?, created.chat.id, history - 1).await?;
        tx.commit().await?;
    }
    for round in 0..rounds {
        if round > 0 {
            send(&machine, "again").await?;
        }
        machine
            .update_optimistic(
                |_| true,
                |tx, _| Box::pin(async move { tx.record_generation_attempt().await }),
            )
            .await?;
        machine
            .update_optimistic(
                |_| true,
                |tx, _| {
                    Box::pin(async move {
                        tx.commit_step(vec![NewMessage::assistant(text("answer"))], false)
                            .await
                    })
                },
            )
            .await?;
        machine
            .update_optimistic(
                |_| true,
                |tx, _| Box::pin(async move { tx.finish_turn().await }),
            )
            .await?;
    }
    // Keep the count at 1 + 4 x rounds: one more send closes the last round.
    send(&machine, "bye").await
}

/// `SendMessage(text, queue)` in its own bundle.
async fn send(machine: &ChatMachine, text_: &'static str) -> anyhow::Result<()> {
    machine
        .update_optimistic(
            |_| true,
            |tx, _| {
                Box::pin(async move {
                    tx.send_message(SendMessageInput {
                        message: NewMessage::user(text(text_)),
                        busy_behavior: BusyBehavior::Queue,
                        max_queue_size: None,
                    })
                    .await
                })
            },
        )
        .await?;
    Ok(())
}

/// A baseline statement after the lock and bump: `$1` is the chat id and,
/// for `Message`, `$2` the message content.
#[derive(Clone, Copy)]
enum Raw {
    Row(&'static str),
    Message(&'static str),
}

const RAW_ATTEMPT: Raw =
    Raw::Row("UPDATE chats SET generation_attempt = generation_attempt + 1 WHERE id = $1");
const RAW_RUNNING: Raw = Raw::Row("UPDATE chats SET status = 'running' WHERE id = $1");
const RAW_WAITING: Raw = Raw::Row("UPDATE chats SET status = 'waiting' WHERE id = $1");
const RAW_INSERT_USER: Raw =
    Raw::Message("INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'user', $2)");
const RAW_INSERT_ASSISTANT: Raw =
    Raw::Message("INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'assistant', $2)");

async fn raw_chat(pool: &PgPool, owner: Uuid, rounds: usize, history: usize) -> anyhow::Result<()> {
    let id = Uuid::new_v4();
    let content = serde_json::to_value(text("hello"))?;
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO chats (id, owner_id, status, snapshot_version) VALUES ($1, $2, 'running', 1)",
    )
    .bind(id)
    .bind(owner)
    .execute(&mut *tx)
    .await?;
    raw_statement(&mut tx, RAW_INSERT_USER, id, &content).await?;
    tx.commit().await?;
    if history > 1 {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT id FROM chats WHERE id = $1 FOR UPDATE")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        bulk_history(&mut tx, id, history - 1).await?;
        tx.commit().await?;
    }
    for round in 0..rounds {
        if round > 0 {
            raw_bundle(pool, id, &content, &[RAW_INSERT_USER, RAW_RUNNING]).await?;
        }
        raw_bundle(pool, id, &content, &[RAW_ATTEMPT]).await?;
        raw_bundle(pool, id, &content, &[RAW_INSERT_ASSISTANT]).await?;
        raw_bundle(pool, id, &content, &[RAW_WAITING]).await?;
    }
    raw_bundle(pool, id, &content, &[RAW_INSERT_USER, RAW_RUNNING]).await
}

/// One baseline bundle: lock the chat row, bump `snapshot_version`, run
/// `statements` in order, commit.
async fn raw_bundle(
    pool: &PgPool,
    id: Uuid,
    content: &serde_json::Value,
    statements: &[Raw],
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT id FROM chats WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE chats SET snapshot_version = snapshot_version + 1, updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    for statement in statements {
        raw_statement(&mut tx, *statement, id, content).await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn raw_statement(
    conn: &mut sqlx::PgConnection,
    statement: Raw,
    id: Uuid,
    content: &serde_json::Value,
) -> anyhow::Result<()> {
    match statement {
        Raw::Row(sql) => sqlx::query(sql).bind(id).execute(conn).await?,
        Raw::Message(sql) => {
            sqlx::query(sql)
                .bind(id)
                .bind(content)
                .execute(conn)
                .await?
        }
    };
    Ok(())
}
