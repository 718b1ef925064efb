//! `chatd-chaos`: several real `chatd serve` replicas on one private
//! PostgreSQL cluster, seeded concurrent clients, faults from outside, then
//! an invariant checker (issue 14, "a chaos harness that proves it").
//!
//! ```text
//! chatd-chaos [--duration 60s] [--seed N] [--replicas 3] [--clients 6] [--chats 6]
//!             [--lease 5s] [--chatd PATH] [--fake-llm PATH] [--pg-bin DIR]
//! chatd-chaos --takeover 10 [--takeover-lease 5s]    # takeover figures instead
//! ```
//!
//! A run:
//! 1. `initdb`s a cluster in a temporary directory and starts it on a free
//!    port of 127.0.0.1 (as the `postgres` OS user when run as root); never
//!    the shared server other tests use.
//! 2. starts the fake LLM (`fake-llm --mode scripted`) and `--replicas`
//!    replicas (`chatd serve --postgres-url`, lease `--lease`), and creates
//!    `--chats` chats, each with a client-side tool `lookup`.
//! 3. for `--duration`, runs `--clients` clients, each a seeded random
//!    sequence of sends (queue and interrupt; quick, slow and tool-calling
//!    answers; retried with the same `client_message_id` on transport errors
//!    and `503`), edits, queue deletes and promotes, interrupts, tool results
//!    and archive round trips against random live replicas; one SSE watcher
//!    per chat that reconnects with `after_id`; and a fault loop: SIGKILL and
//!    restart of a replica, SIGSTOP past the lease then SIGCONT,
//!    `pg_terminate_backend` of every chatd connection, and an immediate
//!    restart of the PostgreSQL cluster (at most twice a run). Meanwhile a
//!    noisy tenant, a member with low limits of its own, runs slow and
//!    oversized uploads, opens streams up to its cap and sends without
//!    pause on a chat of its own ([`noisy`]); its answers (`429`, `413`,
//!    `408`, ...) are printed, and the other clients' invariants must
//!    hold all the same.
//! 4. settles: resumes and restarts every replica, unarchives the chats and
//!    answers pending tool calls until every chat is idle (at most 60 s);
//! 5. checks the invariants of [`check`] and the ones watched while running
//!    (no `500` answers, snapshot versions never going back for a client),
//!    prints the figures and exits 1 on any violation.
//!
//! The seed fixes each client's and watcher's sequence of operations and the
//! fault schedule; timing still varies between runs, so one seed explores a
//! neighbourhood of interleavings rather than replaying one exactly.

mod check;
mod client;
mod cluster;
mod noisy;
mod takeover;
mod watch;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::json;
use sqlx::Connection as _;
use tokio_util::sync::CancellationToken;

use crate::client::{Ledger, Shared, Stats, pending_calls, request};
use crate::cluster::{FakeLlm, PgCluster, Replica, find_pg_bin};

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(
    name = "chatd-chaos",
    about = "Faults and concurrency against real chatd replicas, then an invariant check"
)]
struct Args {
    /// How long clients and faults run (then the run settles and checks).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Seed of the clients' operations and of the fault schedule (default:
    /// random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Replicas.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(2..=8))]
    replicas: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=64))]
    clients: u64,
    /// Chats the clients work on.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=100))]
    chats: u64,
    /// The replicas' `--lease-stale-after`.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// The chatd binary (default: next to this one).
    #[arg(long)]
    chatd: Option<PathBuf>,
    /// The fake LLM binary (default: next to this one).
    #[arg(long)]
    fake_llm: Option<PathBuf>,
    /// Directory of PostgreSQL's server binaries (default: the newest
    /// /usr/lib/postgresql/*/bin).
    #[arg(long)]
    pg_bin: Option<PathBuf>,
    /// Instead of a chaos run, measure takeover over this many kills of a
    /// chat's owner (see `takeover.rs`): kill -9 → new owner and → first
    /// new part on a watcher, each round printed, then p50 and max.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    takeover: Option<u64>,
    /// With `--takeover`: the replicas' `--lease-stale-after` (default:
    /// chatd's own defaults for everything).
    #[arg(long, value_parser = humantime::parse_duration)]
    takeover_lease: Option<Duration>,
}

fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.parent().context("no parent directory")?.join(name);
    anyhow::ensure!(
        path.exists(),
        "{} not found (build it: cargo build -p chatd -p chatd-testkit --bins, or give its path)",
        path.display()
    );
    Ok(path)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(rand::random);
    let chatd = match args.chatd.clone() {
        Some(p) => p,
        None => sibling("chatd")?,
    };
    let fake_llm_bin = match args.fake_llm.clone() {
        Some(p) => p,
        None => sibling("fake-llm")?,
    };
    let pg_bin = match args.pg_bin.clone() {
        Some(p) => p,
        None => find_pg_bin()?,
    };
    if let Some(kills) = args.takeover {
        let logs = tempfile::Builder::new()
            .prefix("chatd-takeover-logs-")
            .tempdir()?;
        return takeover::run(
            kills as usize,
            args.takeover_lease,
            chatd,
            &fake_llm_bin,
            pg_bin,
            logs.path(),
        )
        .await;
    }
    println!(
        "chaos: seed={seed} duration={:?} replicas={} clients={} chats={} lease={:?}",
        args.duration, args.replicas, args.clients, args.chats, args.lease
    );
    let logs = tempfile::Builder::new()
        .prefix("chatd-chaos-logs-")
        .tempdir()?;
    let logs_path = logs.keep();
    println!("chaos: logs in {}", logs_path.display());

    let pg = PgCluster::start(pg_bin)
        .await
        .context("starting the private PostgreSQL cluster")?;
    pg.create_database().await?;
    let llm = FakeLlm::start(&fake_llm_bin, &logs_path.join("fake-llm.log")).await?;
    let config = llm.write_config(&logs_path)?;
    let lease = humantime::format_duration(args.lease).to_string();
    let replica_args: Vec<String> = [
        "--postgres-url",
        &pg.url(),
        "--config",
        config.to_str().context("path")?,
        "--lease-stale-after",
        &lease,
        "--heartbeat-interval",
        "1s",
        "--retry-initial-delay",
        "200ms",
        "--retry-max-delay",
        "1s",
        "--max-generation-retries",
        "100",
        "--shutdown-grace",
        "2s",
        // Limits (issue 31): high defaults, so that only the noisy tenant,
        // whose own limits are low, meets the rate limit; a small cap of
        // open streams it can reach; a body deadline its trickling uploads
        // meet within the run.
        "--default-requests-per-minute",
        "1000000",
        "--default-max-open-streams",
        "16",
        "--request-body-timeout",
        "10s",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut replicas = Vec::new();
    for i in 0..args.replicas as usize {
        let mut r = Replica::new(
            i,
            chatd.clone(),
            replica_args.clone(),
            logs_path.join(format!("replica-{i}.log")),
        )?;
        // The first one runs the migrations alone.
        r.start().await?;
        replicas.push(r);
    }

    let mut rng = StdRng::seed_from_u64(seed);
    let shared = Arc::new(Shared {
        replicas: Mutex::new(replicas.iter().map(|r| (r.url.clone(), true)).collect()),
        chats: Vec::new(),
        ledger: Mutex::new(Ledger::default()),
        stats: Mutex::new(Stats::default()),
    });
    let http = reqwest::Client::new();
    let mut chats = Vec::new();
    for i in 0..args.chats {
        let answer = request(
            &shared,
            &http,
            &mut rng,
            "create",
            reqwest::Method::POST,
            "/chats",
            Some(json!({
                "content": [{"type": "text", "text": format!("start {i}")}],
                "title": format!("chaos {i}"),
                "dynamic_tools": [{"name": "lookup", "description": "Looks a token up.", "input_schema": {"type": "object"}}],
            })),
        )
        .await;
        anyhow::ensure!(
            answer.status == 201,
            "creating a chat: {} {}",
            answer.status,
            answer.body
        );
        chats.push(answer.body["id"].as_str().context("chat id")?.to_owned());
    }
    let shared = Arc::new(Shared {
        replicas: Mutex::new(replicas.iter().map(|r| (r.url.clone(), true)).collect()),
        chats: chats.clone(),
        ledger: Mutex::new(Ledger::default()),
        stats: Mutex::new(Stats::default()),
    });

    let tenant = noisy::setup(&replicas[0].url, &http)
        .await
        .context("setting up the noisy tenant")?;

    // Run.
    let stop = CancellationToken::new();
    let started = Instant::now();
    let noisy = tokio::spawn(noisy::run(
        shared.clone(),
        tenant,
        seed.wrapping_add(3),
        stop.clone(),
    ));
    let mut clients = Vec::new();
    for i in 0..args.clients as usize {
        clients.push(tokio::spawn(client::run_client(
            shared.clone(),
            i,
            seed,
            stop.clone(),
        )));
    }
    let mut watchers = Vec::new();
    for (i, chat) in chats.iter().enumerate() {
        watchers.push((
            chat.clone(),
            tokio::spawn(watch::run_watcher(
                shared.clone(),
                chat.clone(),
                seed.wrapping_add(1000 + i as u64),
                stop.clone(),
            )),
        ));
    }
    let mut pg_restarts = 0;
    let mut fault_rng = StdRng::seed_from_u64(seed.wrapping_add(7));
    while started.elapsed() < args.duration {
        tokio::time::sleep(Duration::from_millis(fault_rng.random_range(1_500..5_000))).await;
        if started.elapsed() >= args.duration {
            break;
        }
        let up: Vec<usize> = (0..replicas.len()).filter(|&i| replicas[i].up()).collect();
        let roll = fault_rng.random_range(0..100);
        let kind = match roll {
            0..35 if up.len() > 1 => {
                let i = up[fault_rng.random_range(0..up.len())];
                set_up(&shared, i, false);
                replicas[i].kill9().await;
                tokio::time::sleep(Duration::from_millis(fault_rng.random_range(300..2_000))).await;
                replicas[i].start().await?;
                set_up(&shared, i, true);
                "sigkill_restart"
            }
            35..60 if up.len() > 1 => {
                let i = up[fault_rng.random_range(0..up.len())];
                set_up(&shared, i, false);
                replicas[i].pause();
                tokio::time::sleep(args.lease + Duration::from_secs(1)).await;
                replicas[i].resume();
                set_up(&shared, i, true);
                "sigstop_past_lease"
            }
            90..100 if pg_restarts < 2 => {
                pg_restarts += 1;
                pg.crash().await?;
                tokio::time::sleep(Duration::from_millis(fault_rng.random_range(200..1_500))).await;
                pg.start_server().await?;
                "postgres_restart"
            }
            _ => {
                let mut conn = sqlx::PgConnection::connect(&pg.admin_url()).await?;
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE datname = 'chatd' AND pid <> pg_backend_pid()",
                )
                .execute(&mut conn)
                .await?;
                "pg_terminate_backend"
            }
        };
        println!(
            "chaos: t={:>5.1}s fault {kind}",
            started.elapsed().as_secs_f64()
        );
        *shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .faults
            .entry(kind.to_owned())
            .or_default() += 1;
    }
    stop.cancel();
    for c in clients {
        let _ = c.await;
    }
    let noisy = noisy.await?;
    let mut views = Vec::new();
    for (chat, w) in watchers {
        views.push((chat, w.await?));
    }

    // Settle.
    for (i, r) in replicas.iter_mut().enumerate() {
        if !r.up() {
            if r.stopped {
                r.resume();
            } else {
                r.start().await?;
            }
        }
        set_up(&shared, i, true);
    }
    let settle_started = Instant::now();
    let settled = settle(&shared, &http, &mut rng, Duration::from_secs(60)).await;
    println!(
        "chaos: settled={settled} after {:.1}s",
        settle_started.elapsed().as_secs_f64()
    );
    for (i, (chat, view)) in views.iter_mut().enumerate() {
        if !watch::catch_up(&shared, chat, view, seed.wrapping_add(5000 + i as u64)).await {
            shared
                .ledger
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .violations
                .push(format!(
                    "chat {chat}: the watcher could not reconnect after settling"
                ));
        }
    }

    // Check.
    let mut conn = sqlx::PgConnection::connect(&pg.url()).await?;
    let ledger = std::mem::take(&mut *shared.ledger.lock().unwrap_or_else(|p| p.into_inner()));
    let mut violations = ledger.violations.clone();
    violations.extend(check::check(&mut conn, &chats, &ledger, &views).await?);
    violations.extend(check::branches(&mut conn, &shared, &http, &mut rng, &chats).await?);
    let stats = std::mem::take(&mut *shared.stats.lock().unwrap_or_else(|p| p.into_inner()));
    let ops: u64 = stats.answers.values().sum();
    println!(
        "chaos: operations={ops} acknowledged_writes={} watcher_connects={}",
        ledger.written.iter().filter(|w| w.acked).count(),
        views.iter().map(|(_, v)| v.connects).sum::<u64>()
    );
    for ((op, status), n) in &stats.answers {
        println!("chaos:   {op:<14} {status:>3} × {n}");
    }
    for (kind, n) in &stats.faults {
        println!("chaos: faults {kind} × {n}");
    }
    for ((op, status), n) in &noisy.answers {
        println!("chaos: noisy {op:<14} {status:>3} × {n}");
    }
    println!(
        "chaos: noisy tenant held at most {} streams at once",
        noisy.streams_held_at_most
    );
    drop(stats);
    drop(ledger);
    for r in &mut replicas {
        r.stop().await;
    }
    pg.stop().await;
    violations.extend(check_postgres_log(
        &pg.log_path(),
        &logs_path.join("postgres.log"),
    ));
    if violations.is_empty() {
        println!("chaos: seed={seed}: no violations");
        let _ = std::fs::remove_dir_all(&logs_path);
        Ok(())
    } else {
        for v in &violations {
            println!("chaos: VIOLATION {v}");
        }
        println!(
            "chaos: seed={seed}: {} violations (logs kept in {})",
            violations.len(),
            logs_path.display()
        );
        std::process::exit(1);
    }
}

/// Copies the cluster's log next to the replicas' logs and checks it: a
/// deadlock PostgreSQL detected, or a command on a connection that was
/// still inside a transaction ("there is already a transaction in
/// progress": a pooled connection reused in an unknown state), is a
/// violation. Prints both counts and the first deadlock reports' details
/// (the statements of each process in the cycle).
fn check_postgres_log(from: &std::path::Path, to: &std::path::Path) -> Vec<String> {
    let Ok(log) = std::fs::read_to_string(from) else {
        return vec!["the PostgreSQL log could not be read".to_owned()];
    };
    let _ = std::fs::write(to, &log);
    let deadlocks = log.matches("deadlock detected").count();
    let in_progress = log
        .matches("there is already a transaction in progress")
        .count();
    println!("chaos: postgres deadlocks={deadlocks} already_in_transaction={in_progress}");
    let lines: Vec<&str> = log.lines().collect();
    for (i, _) in lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("deadlock detected"))
        .take(3)
    {
        for l in &lines[i..(i + 12).min(lines.len())] {
            println!("chaos:   | {l}");
        }
    }
    let mut violations = Vec::new();
    if deadlocks > 0 {
        violations.push(format!("PostgreSQL detected {deadlocks} deadlocks"));
    }
    if in_progress > 0 {
        violations.push(format!(
            "{in_progress} commands ran on a connection already inside a transaction"
        ));
    }
    violations
}

fn set_up(shared: &Shared, index: usize, up: bool) {
    shared.replicas.lock().unwrap_or_else(|p| p.into_inner())[index].1 = up;
}

/// Unarchives chats and answers pending tool calls until every chat is idle
/// with no owner, or `timeout` passes. Returns whether it settled.
async fn settle(
    shared: &Shared,
    http: &reqwest::Client,
    rng: &mut StdRng,
    timeout: Duration,
) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let mut idle = 0;
        for chat in &shared.chats {
            let answer = request(
                shared,
                http,
                rng,
                "settle",
                reqwest::Method::GET,
                &format!("/chats/{chat}"),
                None,
            )
            .await;
            if answer.status != 200 {
                continue;
            }
            let body = answer.body;
            if body["archived"] == true {
                request(
                    shared,
                    http,
                    rng,
                    "settle",
                    reqwest::Method::PATCH,
                    &format!("/chats/{chat}"),
                    Some(json!({"archived": false})),
                )
                .await;
                continue;
            }
            match body["status"].as_str() {
                Some("waiting" | "error") if body["worker_id"].is_null() => idle += 1,
                Some("requires_action") => {
                    let page = request(
                        shared,
                        http,
                        rng,
                        "settle",
                        reqwest::Method::GET,
                        &format!("/chats/{chat}/messages?limit=200"),
                        None,
                    )
                    .await;
                    let results: Vec<_> = pending_calls(&page.body)
                        .iter()
                        .map(|id| json!({"tool_call_id": id, "output": "settled"}))
                        .collect();
                    if !results.is_empty() {
                        request(
                            shared,
                            http,
                            rng,
                            "settle",
                            reqwest::Method::POST,
                            &format!("/chats/{chat}/tool-results"),
                            Some(json!({"results": results})),
                        )
                        .await;
                    }
                }
                _ => {}
            }
        }
        if idle == shared.chats.len() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    false
}
