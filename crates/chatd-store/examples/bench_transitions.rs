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
//!
//! ```text
//! cargo run --release -p chatd-store --example bench_transitions -- --branches \
//!     [--chats 40] [--history 1000] [--rounds 10] [--clients 8] [--repeat 5] [--reads 5]
//! ```
//! `--branches` (issue 33, migration `0017_branches.sql`) measures what
//! branches cost, against linear chats of the same run: `--chats` linear
//! chats of `--history` messages, and as many branch-heavy chats with the
//! same active branch plus 10 branches each. A branch-heavy chat starts as a
//! linear one and is edited 10 times, at messages spread over its history
//! in ascending order (the 50th, 150th, ..., 950th of 1,000), by the real
//! `ChatTx::edit_message`: each edit leaves the old suffix (the edited
//! message and everything after it) as an inactive branch, and the active
//! branch is then filled up again to `--history` messages by the bulk
//! insert of `--history` (in bundles of 100 rows), whose trigger links
//! every row to the active leaf (so the tree invariants, `parent_id`,
//! `sibling_ids`, `deleted` and `active_leaf_id`, are the store's own; the
//! bench checks them). Each of the 10 branch points then has two siblings,
//! and the chat holds 5,010 inactive rows besides its 1,000 active ones.
//! It prints:
//! - how long the first and the last edits took (bundles of 8 concurrent
//!   builders: a rough figure);
//! - storage: `pg_total_relation_size(chat_messages)` (table, TOAST and
//!   indexes) per linear message, per inactive branch row and per branch
//!   point, as written (dead row versions of the flag flips included;
//!   autovacuum is off while building) and after `VACUUM FULL`, and the
//!   average `pg_column_size` of the four tree columns;
//! - (a) transitions/s of `--rounds` turns (`record attempt → commit step →
//!   finish turn → send`) on each existing chat, `--clients` at a time,
//!   linear and branch-heavy chats alternately, `--repeat` passes;
//! - (b) latency p50/p99 of a window read, one at a time, linear and
//!   branch-heavy chats alternately, `--reads` per chat and pass: the store
//!   calls `GET /api/v2/chats/{chat}/messages?window=true` makes
//!   (`chatd_api::messages::list_messages`: a snapshot, the head and the tail
//!   `messages::scan`, `messages::count_visible_between`, `queue::list`),
//!   without the route's HTTP, JSON and paging cut.
//!
//! Both as ratios branch-heavy / linear (median of the passes for (a)).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_core::{BusyBehavior, MessagePart};
use chatd_pubsub::PgPubsub;
use chatd_store::messages::{self, Cursor};
use chatd_store::{
    ChatMachine, CreateChatInput, EditMessageInput, NewMessage, SendMessageInput, Store, queue,
};
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
    /// Messages each chat starts with (`--history`, default 1; 1,000 with
    /// `--branches`).
    history: usize,
    /// The branch measurements instead of the ratio to raw SQL
    /// (`--branches`, module doc).
    branches: bool,
    /// Window reads per chat and pass with `--branches` (`--reads`).
    reads: usize,
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
        branches: false,
        reads: 5,
    };
    // `--branches` changes the defaults of the flags not given.
    let (mut chats, mut rounds, mut history) = (None, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--branches" {
            args.branches = true;
            continue;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--postgres-url" => args.url = value,
            "--chats" => chats = Some(value.parse().expect("--chats")),
            "--clients" => args.clients = value.parse().expect("--clients"),
            "--rounds" => rounds = Some(value.parse().expect("--rounds")),
            "--repeat" => args.repeat = value.parse::<usize>().expect("--repeat").max(1),
            "--min-ratio" => args.min_ratio = Some(value.parse().expect("--min-ratio")),
            "--history" => history = Some(value.parse::<usize>().expect("--history").max(1)),
            "--reads" => args.reads = value.parse::<usize>().expect("--reads").max(1),
            "--side" if ["ours", "raw", "both"].contains(&value.as_str()) => args.side = value,
            other => panic!("unknown flag {other}"),
        }
    }
    let (default_chats, default_rounds, default_history) = if args.branches {
        (40, 10, 1000)
    } else {
        (args.chats, args.rounds, args.history)
    };
    args.chats = chats.unwrap_or(default_chats);
    args.rounds = rounds.unwrap_or(default_rounds);
    args.history = history.unwrap_or(default_history);
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
    if !args.branches {
        println!(
            "bench_transitions: {} chats x (create + {} rounds x 4) = {} transitions, {} concurrent clients",
            args.chats, args.rounds, total, args.clients
        );
    }

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
    // `--branches` measures other things instead (module doc); its error
    // is returned once the database is dropped.
    let branch_figures = if args.branches {
        Some(branches(&args, &pool, &store, owner).await)
    } else {
        None
    };
    let passes = if args.branches { 0 } else { args.repeat };
    for pass in 1..=passes {
        if args.side != "both" {
            let elapsed = if args.side == "ours" {
                run(&args, store.clone(), move |store, _| async move {
                    machine_chat(&store, owner, rounds, history).await
                })
                .await?
            } else {
                run(&args, pool.clone(), move |pool, _| async move {
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
        let ours = run(&args, store.clone(), move |store, _| async move {
            machine_chat(&store, owner, rounds, history).await
        })
        .await?;
        let baseline = run(&args, pool.clone(), move |pool, _| async move {
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

    branch_figures.transpose()?;
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

/// Runs `chat(context, index)` once per chat index (`0..--chats`),
/// `--clients` at a time; returns the wall time.
async fn run<C, F, Fut>(args: &Args, context: C, chat: F) -> anyhow::Result<Duration>
where
    C: Clone + Send + 'static,
    F: Fn(C, usize) -> Fut + Clone + Send + 'static,
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
                chat(context.clone(), i).await?;
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
    let machine = new_chat(store, owner, history).await?;
    for round in 0..rounds {
        if round > 0 {
            send(&machine, "again").await?;
        }
        turn(&machine).await?;
    }
    // Keep the count at 1 + 4 x rounds: one more send closes the last round.
    send(&machine, "bye").await
}

/// A new chat of `history` messages: created with one user message, the
/// rest ([`BULK_HISTORY`]) written by one more bundle when `history > 1`.
async fn new_chat(store: &Store, owner: Uuid, history: usize) -> anyhow::Result<ChatMachine> {
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
    Ok(machine)
}

/// One turn of a running chat in three bundles: record attempt, commit a
/// step with one assistant message, finish the turn (it waits then).
async fn turn(machine: &ChatMachine) -> anyhow::Result<()> {
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
    Ok(())
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

/// Messages in the head and the tail of a window
/// (`chatd_api::paging::WINDOW_HEAD_MESSAGES`, `WINDOW_TAIL_MESSAGES`).
const WINDOW_HEAD: usize = 20;
const WINDOW_TAIL: usize = 100;
/// Branches of a branch-heavy chat (`--branches`).
const BRANCHES: usize = 10;

/// `--branches` (module doc): builds both shapes, prints the storage
/// figures, then times turns and window reads on both, alternately.
async fn branches(args: &Args, pool: &PgPool, store: &Store, owner: Uuid) -> anyhow::Result<()> {
    let history = args.history;
    let points = branch_points(history);
    let branch_rows: usize = points.iter().map(|p| history - p + 1).sum();
    println!(
        "bench_transitions --branches: {} linear chats of {history} messages, {} branch-heavy chats of {history} active messages and {} branches (edits at messages {points:?}: {branch_rows} inactive rows per chat), {} concurrent clients",
        args.chats,
        args.chats,
        points.len(),
        args.clients
    );
    // Autovacuum would reclaim the flag flips' dead row versions at a
    // moment of its choosing: the "as written" sizes keep them all.
    sqlx::query("ALTER TABLE chat_messages SET (autovacuum_enabled = false)")
        .execute(pool)
        .await?;
    let empty = relation_size(pool).await?;
    let started = Instant::now();
    let linear = build_chats(args, store, owner).await?;
    let linear_size = relation_size(pool).await?;
    let heavy = build_chats(args, store, owner).await?;
    let heavy_linear_size = relation_size(pool).await?;
    let built_linear = started.elapsed();
    let started = Instant::now();
    let chats = Arc::new(heavy.clone());
    let points_ = Arc::new(points.clone());
    let edits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let edits_ = edits.clone();
    run(args, store.clone(), move |store, i| {
        let (chats, points, edits) = (chats.clone(), points_.clone(), edits_.clone());
        async move {
            let took = make_branches(&store, chats[i], history, &points).await?;
            edits.lock().unwrap().extend(took);
            Ok(())
        }
    })
    .await?;
    let heavy_size = relation_size(pool).await?;
    println!(
        "built: {} linear-shaped chats in {:.1} s, {} x {} edits and refills in {:.1} s",
        2 * args.chats,
        built_linear.as_secs_f64(),
        args.chats,
        points.len(),
        started.elapsed().as_secs_f64()
    );
    // The edits alone, by suffix length (`--clients` concurrent builders).
    let edits = edits.lock().unwrap().clone();
    let mean_edit = |p: usize| {
        let took: Vec<f64> = edits.iter().filter(|e| e.0 == p).map(|e| ms(e.1)).collect();
        took.iter().sum::<f64>() / took.len() as f64
    };
    let (first, last) = (points[0], points[points.len() - 1]);
    println!(
        "edits (ChatTx::edit_message, one bundle each, {} at a time): at message {first} (suffix of {} rows) {:.1} ms, at message {last} (suffix of {} rows) {:.1} ms (means of {})",
        args.clients,
        history - first + 1,
        mean_edit(first),
        history - last + 1,
        mean_edit(last),
        args.chats
    );
    check_tree(pool, &linear, &heavy, history, points.len(), branch_rows).await?;
    sqlx::query("ALTER TABLE chat_messages RESET (autovacuum_enabled)")
        .execute(pool)
        .await?;

    // (c) Storage.
    let messages = (args.chats * history) as f64;
    let rows = (args.chats * branch_rows) as f64;
    let edits = (args.chats * points.len()) as f64;
    let per_message = (linear_size.compact - empty.compact) as f64 / messages;
    let per_message_written = (linear_size.written - empty.compact) as f64 / messages;
    let heavy_base = (heavy_linear_size.compact - linear_size.compact) as f64 / messages;
    let per_row = (heavy_size.compact - heavy_linear_size.compact) as f64 / rows;
    let per_row_written = (heavy_size.written - heavy_linear_size.compact) as f64 / rows;
    println!(
        "storage (chat_messages with TOAST and indexes): linear {per_message:.0} bytes/message after VACUUM FULL ({per_message_written:.0} as written; the branch-heavy chats' linear start {heavy_base:.0})"
    );
    println!(
        "storage: branches {per_row:.0} bytes per inactive branch row after VACUUM FULL ({per_row_written:.0} as written, with the dead versions of the flag flips), ratio to a linear message {:.2} ({:.2} as written)",
        per_row / per_message,
        per_row_written / per_message_written
    );
    println!(
        "storage: {:.0} bytes per branch point (edit leaving a suffix of {:.0} rows on average) after VACUUM FULL ({:.0} as written)",
        (heavy_size.compact - heavy_linear_size.compact) as f64 / edits,
        branch_rows as f64 / points.len() as f64,
        (heavy_size.written - heavy_linear_size.compact) as f64 / edits
    );
    for (shape, ids) in [("linear", &linear), ("branch-heavy", &heavy)] {
        let (columns, row, parent_index): (f64, f64, f64) = sqlx::query_as(
            "SELECT avg(coalesce(pg_column_size(parent_id), 0) + pg_column_size(sibling_ids)
                        + pg_column_size(detached) + coalesce(pg_column_size(copied_from_id), 0))::float8,
                    avg(pg_column_size(m.*))::float8,
                    pg_relation_size('chat_messages_parent_idx')::float8 / (SELECT count(*) FROM chat_messages)
             FROM chat_messages m WHERE chat_id = ANY($1)",
        )
        .bind(ids)
        .fetch_one(pool)
        .await?;
        println!(
            "storage: {shape} rows: parent_id + sibling_ids + detached + copied_from_id {columns:.1} bytes of {row:.0} bytes/row (pg_column_size), chat_messages_parent_idx {parent_index:.1} bytes/row"
        );
    }
    sqlx::query("VACUUM ANALYZE chat_messages, chats")
        .execute(pool)
        .await?;

    // (a) Turns and (b) window reads, alternately.
    let rounds = args.rounds;
    let total = (args.chats * rounds * 4) as f64;
    println!(
        "each pass: {} chats x {rounds} rounds x 4 = {total} transitions per shape, then {} window reads per shape one at a time",
        args.chats,
        args.chats * args.reads
    );
    let mut ratios = Vec::new();
    let mut latencies = [Vec::new(), Vec::new()];
    let shapes = [Arc::new(linear), Arc::new(heavy)];
    for pass in 1..=args.repeat {
        let mut tps = [0.0; 2];
        // The order alternates from pass to pass.
        for k in [pass % 2, 1 - pass % 2] {
            let chats = shapes[k].clone();
            let elapsed = run(args, store.clone(), move |store, i| {
                let chats = chats.clone();
                async move { turns(&store, chats[i], rounds).await }
            })
            .await?;
            tps[k] = total / elapsed.as_secs_f64();
        }
        let mut pass_latencies = [Vec::new(), Vec::new()];
        for read in 0..args.reads {
            let pairs = shapes[0].iter().zip(shapes[1].iter());
            for (i, (&linear, &heavy)) in pairs.enumerate() {
                let ids = [linear, heavy];
                let mut omitted = [0; 2];
                for k in [(read + i) % 2, 1 - (read + i) % 2] {
                    let (elapsed, n) = window_read(store, ids[k]).await?;
                    pass_latencies[k].push(elapsed);
                    omitted[k] = n;
                }
                anyhow::ensure!(
                    omitted[0] == omitted[1],
                    "the active branches differ: {omitted:?} messages omitted"
                );
            }
        }
        let ratio = tps[1] / tps[0];
        let p50 = pass_latencies.each_mut().map(|l| percentile(l, 0.5));
        println!(
            "pass {pass}: turns linear {:>6.0} transitions/s, branch-heavy {:>6.0} transitions/s, ratio {ratio:.2}; window read p50 linear {:.2} ms, branch-heavy {:.2} ms",
            tps[0],
            tps[1],
            ms(p50[0]),
            ms(p50[1])
        );
        ratios.push(ratio);
        for k in 0..2 {
            latencies[k].append(&mut pass_latencies[k]);
        }
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "(a) turns ratio (branch-heavy / linear): {:.2} (median of {} passes)",
        ratios[ratios.len() / 2],
        ratios.len()
    );
    let p50 = latencies.each_mut().map(|l| percentile(l, 0.5));
    let p99 = latencies.each_mut().map(|l| percentile(l, 0.99));
    println!(
        "(b) window read (the store calls of GET .../messages?window=true), {} reads per shape: p50 linear {:.2} ms, branch-heavy {:.2} ms, ratio {:.2}; p99 linear {:.2} ms, branch-heavy {:.2} ms, ratio {:.2}",
        latencies[0].len(),
        ms(p50[0]),
        ms(p50[1]),
        ms(p50[1]) / ms(p50[0]),
        ms(p99[0]),
        ms(p99[1]),
        ms(p99[1]) / ms(p99[0])
    );
    Ok(())
}

/// Where a branch-heavy chat of `history` messages is edited: 10 user
/// messages (1-based positions on the active branch) spread evenly, the
/// 50th, 150th, ..., 950th of 1,000. [`BULK_HISTORY`] writes user messages
/// at the positions of the parity of `history` (the first message aside).
fn branch_points(history: usize) -> Vec<usize> {
    (0..BRANCHES)
        .map(|k| {
            let p = (history / (2 * BRANCHES) + k * history / BRANCHES).max(2);
            if (history - p) % 2 == 1 { p + 1 } else { p }
        })
        .filter(|&p| p < history)
        .collect()
}

/// `--chats` new chats of `--history` messages ([`new_chat`], then
/// [`fill`]), `--clients` at a time; their ids, in no order.
async fn build_chats(args: &Args, store: &Store, owner: Uuid) -> anyhow::Result<Vec<Uuid>> {
    let history = args.history;
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let ids_ = ids.clone();
    run(args, store.clone(), move |store, _| {
        let ids = ids_.clone();
        async move {
            let machine = new_chat(&store, owner, 1).await?;
            fill(&machine, history - 1).await?;
            ids.lock().unwrap().push(machine.chat_id());
            Ok(())
        }
    })
    .await?;
    let ids = ids.lock().unwrap().clone();
    Ok(ids)
}

/// Edits the linear chat `id` at each of `points` in turn with
/// `ChatTx::edit_message` (the old suffix becomes an inactive branch) and
/// fills the active branch up to `history` messages again ([`fill`]).
/// Returns how long each edit's bundle took, by edit point.
async fn make_branches(
    store: &Store,
    id: Uuid,
    history: usize,
    points: &[usize],
) -> anyhow::Result<Vec<(usize, Duration)>> {
    let machine = store.machine(id);
    let mut took = Vec::new();
    for &p in points {
        let started = Instant::now();
        let mut tx = machine.begin().await?;
        let message_id: i64 = sqlx::query_scalar(
            "SELECT id FROM chat_messages WHERE chat_id = $1 AND NOT deleted
             ORDER BY id OFFSET $2 LIMIT 1",
        )
        .bind(id)
        .bind((p - 1) as i64)
        .fetch_one(tx.conn().await?)
        .await?;
        tx.edit_message(EditMessageInput {
            message_id,
            replacement: NewMessage::user(text("edited")),
            suffix_messages: vec![],
        })
        .await?;
        tx.commit().await?;
        took.push((p, started.elapsed()));
        fill(&machine, history - p).await?;
    }
    Ok(took)
}

/// Rows per bundle of [`fill`].
const FILL_BUNDLE: usize = 100;

/// Appends `n` messages to the active branch as [`BULK_HISTORY`] writes
/// them (assistant and user alternately, the last one a user message), in
/// bundles of at most [`FILL_BUNDLE`] rows: every row's triggers update the
/// chat row, whose versions pile up within one transaction, so a bundle's
/// cost grows with the square of its rows.
async fn fill(machine: &ChatMachine, n: usize) -> anyhow::Result<()> {
    // The first bundle takes the remainder: the others, of an even length,
    // start with an assistant message as the alternation goes on.
    let mut chunk = match n % FILL_BUNDLE {
        0 => FILL_BUNDLE,
        r => r,
    };
    let mut left = n;
    while left > 0 {
        let mut tx = machine.begin().await?;
        bulk_history(tx.conn().await?, machine.chat_id(), chunk).await?;
        tx.commit().await?;
        left -= chunk;
        chunk = FILL_BUNDLE;
    }
    Ok(())
}

/// Checks the shapes built: every chat has `history` active rows ending at
/// its `active_leaf_id`, each active row's parent is the active row before
/// it; branch-heavy chats have `branch_rows` inactive rows and `points`
/// branch points of two siblings each, linear ones neither.
async fn check_tree(
    pool: &PgPool,
    linear: &[Uuid],
    heavy: &[Uuid],
    history: usize,
    points: usize,
    branch_rows: usize,
) -> anyhow::Result<()> {
    for (ids, inactive, siblings) in [(linear, 0, 0), (heavy, branch_rows, 2 * points)] {
        let bad: i64 = sqlx::query_scalar(
            "WITH active AS (
                 SELECT chat_id, id, parent_id,
                        lag(id) OVER (PARTITION BY chat_id ORDER BY id) AS prev
                 FROM chat_messages WHERE chat_id = ANY($1) AND NOT deleted),
             per_chat AS (
                 SELECT c.id,
                        (SELECT count(*) FROM active a WHERE a.chat_id = c.id) AS active,
                        (SELECT max(a.id) FROM active a WHERE a.chat_id = c.id) AS leaf,
                        (SELECT count(*) FROM active a WHERE a.chat_id = c.id
                           AND a.parent_id IS DISTINCT FROM a.prev) AS unlinked,
                        (SELECT count(*) FROM chat_messages m WHERE m.chat_id = c.id
                           AND m.deleted AND NOT m.detached AND m.parent_id IS NOT NULL) AS inactive,
                        (SELECT count(*) FROM chat_messages m WHERE m.chat_id = c.id
                           AND cardinality(m.sibling_ids) = 2) AS siblings,
                        (SELECT count(*) FROM chat_messages m WHERE m.chat_id = c.id
                           AND cardinality(m.sibling_ids) NOT IN (0, 2)) AS odd,
                        c.active_leaf_id
                 FROM chats c WHERE c.id = ANY($1))
             SELECT count(*) FROM per_chat
             WHERE active <> $2 OR leaf IS DISTINCT FROM active_leaf_id OR unlinked <> 0
                OR inactive <> $3 OR siblings <> $4 OR odd <> 0",
        )
        .bind(ids)
        .bind(history as i64)
        .bind(inactive as i64)
        .bind(siblings as i64)
        .fetch_one(pool)
        .await?;
        anyhow::ensure!(bad == 0, "{bad} chats are not of the shape built");
    }
    println!(
        "checked: {history} active rows linked parent to child up to active_leaf_id in every chat; {branch_rows} inactive rows and {points} branch points of two siblings in each branch-heavy chat"
    );
    Ok(())
}

/// `pg_total_relation_size` of `chat_messages` (table, TOAST, indexes) as
/// written, then after `VACUUM FULL` (which it leaves done).
struct RelationSize {
    written: i64,
    compact: i64,
}

async fn relation_size(pool: &PgPool) -> anyhow::Result<RelationSize> {
    const SIZE: &str = "SELECT pg_total_relation_size('chat_messages')";
    let written = sqlx::query_scalar(SIZE).fetch_one(pool).await?;
    sqlx::query("VACUUM FULL chat_messages")
        .execute(pool)
        .await?;
    let compact = sqlx::query_scalar(SIZE).fetch_one(pool).await?;
    Ok(RelationSize { written, compact })
}

/// `rounds` turns on the existing chat `id`, each followed by a send:
/// `4 x rounds` transitions, the chat running again at the end.
async fn turns(store: &Store, id: Uuid, rounds: usize) -> anyhow::Result<()> {
    let machine = store.machine(id);
    for _ in 0..rounds {
        turn(&machine).await?;
        send(&machine, "again").await?;
    }
    Ok(())
}

/// The store calls of `GET /api/v2/chats/{chat}/messages?window=true`
/// (`chatd_api::messages::list_messages`): in one snapshot, the head (one
/// row more than it holds) and the tail, the count of the omitted middle,
/// the queue. Returns the time taken and the count.
async fn window_read(store: &Store, id: Uuid) -> anyhow::Result<(Duration, i64)> {
    let started = Instant::now();
    let mut snapshot = store.machine(id).snapshot().await?;
    let conn = snapshot.conn();
    let head = messages::scan(&mut *conn, id, Cursor::After(0), WINDOW_HEAD as i64 + 1).await?;
    let tail = messages::scan(&mut *conn, id, Cursor::Latest, WINDOW_TAIL as i64 + 1).await?;
    let head_last = head[..head.len().min(WINDOW_HEAD)].last().map(|m| m.id);
    // The tail comes newest first: its first message is the last taken.
    let tail_first = tail[..tail.len().min(WINDOW_TAIL)].last().map(|m| m.id);
    let omitted = match (head_last, tail_first) {
        (Some(h), Some(t)) if h < t => {
            messages::count_visible_between(&mut *conn, id, h, t).await?
        }
        _ => 0,
    };
    queue::list(snapshot.conn(), id).await?;
    snapshot.finish().await?;
    Ok((started.elapsed(), omitted))
}

/// The `q` quantile of `latencies` (sorts them).
fn percentile(latencies: &mut [Duration], q: f64) -> Duration {
    latencies.sort();
    let rank = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len());
    latencies[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
