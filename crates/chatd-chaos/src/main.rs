//! `chatd-chaos`: several real `chatd serve` replicas on one private
//! PostgreSQL cluster (or, with `--ha`, on an HA cluster of three
//! Patroni-managed nodes), seeded concurrent clients, faults from outside,
//! then an invariant checker (issue 14, "a chaos harness that proves it";
//! issue 36 for the HA mode).
//!
//! ```text
//! chatd-chaos [--duration 60s] [--seed N] [--replicas 3] [--clients 6] [--chats 6]
//!             [--lease 5s] [--chatd PATH] [--fake-llm PATH] [--pg-bin DIR]
//!             [--ha [--ha-script PATH]] [--keep-logs]
//! chatd-chaos --takeover 10 [--takeover-lease 5s]    # takeover figures instead
//! ```
//!
//! A run:
//! 1. `initdb`s a cluster in a temporary directory and starts it on a free
//!    port of 127.0.0.1 (as the `postgres` OS user when run as root); never
//!    the shared server other tests use. With `--ha`, starts the HA cluster
//!    instead (`scripts/ha-cluster.sh start DIR`, DIR a new directory under
//!    /tmp, ports from `CHATD_HA_PORT_BASE`, default 5600: etcd, three
//!    Patroni-managed PostgreSQL nodes with synchronous replication,
//!    HAProxy routing to the primary) and points everything at
//!    `CHATD_HA_URL` ([`ha`]).
//! 2. starts the fake LLM (`fake-llm --mode scripted`) and `--replicas`
//!    replicas (`chatd serve --postgres-url`, lease `--lease`, one
//!    `--workspace-dir` under the logs directory, `--workspace-approval
//!    never`), and creates `--chats` chats, each with a client-side tool
//!    `lookup`, every other one (the first included) with a workspace.
//! 3. for `--duration`, runs `--clients` clients, each a seeded random
//!    sequence of sends (queue and interrupt; quick, slow and tool-calling
//!    answers; retried with the same `client_message_id` on transport errors
//!    and `503` for up to 30 s, after `Retry-After`; in a chat with a
//!    workspace, mostly calls of its tools: `write_file`, `shell` writing a
//!    file or appending to a log, some after `sleep 0.5`, and
//!    `read_file`, each write's content the send's token), edits, queue deletes
//!    and promotes, interrupts, tool results and archive round trips against
//!    random live replicas; one SSE watcher per chat that reconnects with
//!    `after_id`; and a fault loop: SIGKILL and restart of a replica,
//!    SIGSTOP past the lease then SIGCONT, `pg_terminate_backend` of every
//!    chatd connection, and an immediate restart of the PostgreSQL cluster
//!    (at most twice a run; not with `--ha`). Meanwhile a noisy tenant, a
//!    member with low limits of its own, runs slow and oversized uploads,
//!    opens streams up to its cap and sends without pause on a chat of its
//!    own ([`noisy`]); its answers (`429`, `413`, `408`, ...) are printed,
//!    and the other clients' invariants must hold all the same.
//!
//!    With `--ha`, a second fault loop beside it hits the database
//!    ([`ha::run_faults`]): rounds of `kill -9` of the primary's Patroni and
//!    PostgreSQL (the node started again once another node leads), a stall
//!    of the primary (SIGSTOP of its Patroni and PostgreSQL for 12–15 s,
//!    past Patroni's TTL of 10 s, then SIGCONT) and a planned switchover
//!    (`patronictl switchover`), in a seeded order, each followed by
//!    `wait-healthy` before the next. A run of at least 45 s completes the
//!    first round (one fault of each kind) even past `--duration`: the
//!    clients run on until it has.
//! 4. settles: with `--ha`, waits until the cluster is healthy; resumes and
//!    restarts every replica, unarchives the chats and answers pending tool
//!    calls until every chat is idle (at most 60 s);
//! 5. checks the invariants of [`check`] and [`workspace`] (the files of
//!    each chat with a workspace are the replay of its committed steps),
//!    the ones watched while running
//!    (no `500` answers, snapshot versions never going back for a client),
//!    and the PostgreSQL logs (no deadlock, no command on a connection left
//!    inside a transaction); prints the figures (answers by operation and
//!    status, the number of `503`s, of those without `Retry-After`, and of
//!    transport errors; with `--ha`, for each database fault: when another
//!    node led, the time to the first acknowledged write begun after the
//!    fault, the longest time without an acknowledged write, the `503`s and
//!    transport errors until the cluster was healthy again, and when the
//!    chats whose watchers saw a message in the 3 s before the fault had a
//!    message event again after the new leader was seen) and exits 1 on
//!    any violation. The logs directory also gets `timeline.tsv`: every
//!    acknowledged write, transport error and `5xx` answer, and each
//!    database fault's steps, in seconds since the start of the run.
//!
//! An HA cluster is always stopped at the end, also on an error, ctrl-c or
//! SIGTERM; its directory is removed after a run without violations (unless
//! `--keep-logs`) and kept (and printed) otherwise, like the replicas' logs.
//!
//! The seed fixes each client's and watcher's sequence of operations and the
//! fault schedule; timing still varies between runs, so one seed explores a
//! neighbourhood of interleavings rather than replaying one exactly.

mod check;
mod client;
mod cluster;
mod ha;
mod noisy;
mod takeover;
mod watch;
mod workspace;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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
use crate::ha::HaCluster;

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
    /// HA mode (issue 36): the database is the HA cluster of
    /// `scripts/ha-cluster.sh` (ports from `CHATD_HA_PORT_BASE`, default
    /// 5600), and the database faults are `kill -9` of the primary, a
    /// stall of the primary past Patroni's TTL and a planned switchover.
    #[arg(long, conflicts_with = "takeover")]
    ha: bool,
    /// With `--ha`: the cluster script (default: `scripts/ha-cluster.sh`
    /// of the repository, found from the current directory or this
    /// binary's).
    #[arg(long, requires = "ha")]
    ha_script: Option<PathBuf>,
    /// Keep the logs (and an HA cluster's directory) after a run without
    /// violations too.
    #[arg(long)]
    keep_logs: bool,
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
    // On ctrl-c or SIGTERM the run is dropped: its replicas are killed and
    // an HA cluster is stopped (keeping its directory) before the exit.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = tokio::select! {
        result = run(args) => Some(result),
        _ = tokio::signal::ctrl_c() => None,
        _ = terminate.recv() => None,
    };
    match outcome {
        Some(Ok(true)) => Ok(()),
        Some(Ok(false)) => std::process::exit(1),
        Some(Err(err)) => Err(err),
        None => {
            eprintln!("chaos: interrupted");
            std::process::exit(130);
        }
    }
}

/// The database of a run: a private single server, or the HA cluster.
enum Database {
    Private(PgCluster),
    Ha(HaCluster),
}

impl Database {
    /// The URL of database `chatd`.
    fn url(&self) -> String {
        match self {
            Self::Private(pg) => pg.url(),
            Self::Ha(ha) => ha.url(),
        }
    }

    /// The URL of the maintenance database.
    fn admin_url(&self) -> String {
        match self {
            Self::Private(pg) => pg.admin_url(),
            Self::Ha(ha) => ha.admin_url().to_owned(),
        }
    }
}

/// `pg_terminate_backend` of every connection to database `chatd` but
/// this one.
async fn terminate_backends(admin_url: &str) -> anyhow::Result<()> {
    let mut conn = tokio::time::timeout(
        Duration::from_secs(5),
        sqlx::PgConnection::connect(admin_url),
    )
    .await
    .context("connecting timed out")??;
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = 'chatd' AND pid <> pg_backend_pid()",
    )
    .execute(&mut conn)
    .await?;
    Ok(())
}

/// Connects to `url`, retrying for up to 30 s (an HA cluster's HAProxy
/// may still be switching).
async fn connect_retrying(url: &str) -> anyhow::Result<sqlx::PgConnection> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sqlx::PgConnection::connect(url).await {
            Ok(conn) => return Ok(conn),
            Err(err) if Instant::now() >= deadline => {
                return Err(err).with_context(|| format!("connecting to {url}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Starts a replica again after a fault, retrying for up to 60 s (see
/// [`Replica::start_retrying`]); prints and records the failed attempts.
async fn start_replica(shared: &Shared, replica: &mut Replica) -> anyhow::Result<()> {
    let failures = replica.start_retrying(Duration::from_secs(60)).await?;
    let mut stats = shared.stats.lock().unwrap_or_else(|p| p.into_inner());
    for failure in failures {
        println!(
            "chaos: replica {} exited while starting (started again): {failure}",
            replica.index
        );
        stats.failed_starts.push((replica.index, failure));
    }
    Ok(())
}

fn count_fault(shared: &Shared, kind: &str) {
    *shared
        .stats
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .faults
        .entry(kind.to_owned())
        .or_default() += 1;
}

/// One run; `Ok(false)` when it found violations (printed).
async fn run(args: Args) -> anyhow::Result<bool> {
    let seed = args.seed.unwrap_or_else(rand::random);
    let chatd = match args.chatd.clone() {
        Some(p) => p,
        None => sibling("chatd")?,
    };
    let fake_llm_bin = match args.fake_llm.clone() {
        Some(p) => p,
        None => sibling("fake-llm")?,
    };
    let pg_bin = match (args.pg_bin.clone(), args.ha) {
        (Some(p), _) => Some(p),
        (None, false) => Some(find_pg_bin()?),
        (None, true) => None,
    };
    if let Some(kills) = args.takeover {
        let logs = tempfile::Builder::new()
            .prefix("chatd-takeover-logs-")
            .tempdir()?;
        takeover::run(
            kills as usize,
            args.takeover_lease,
            chatd,
            &fake_llm_bin,
            pg_bin.context("no PostgreSQL binaries")?,
            logs.path(),
        )
        .await?;
        return Ok(true);
    }
    println!(
        "chaos: seed={seed} duration={:?} replicas={} clients={} chats={} lease={:?}{}",
        args.duration,
        args.replicas,
        args.clients,
        args.chats,
        args.lease,
        if args.ha { " ha" } else { "" }
    );
    let logs = tempfile::Builder::new()
        .prefix("chatd-chaos-logs-")
        .tempdir()?;
    let logs_path = logs.keep();
    println!("chaos: logs in {}", logs_path.display());

    let db = if args.ha {
        let script = match args.ha_script.clone() {
            Some(p) => p,
            None => ha::find_script()?,
        };
        let port_base = match std::env::var("CHATD_HA_PORT_BASE") {
            Ok(v) => v
                .parse()
                .with_context(|| format!("CHATD_HA_PORT_BASE={v:?} is not a port"))?,
            Err(_) => ha::DEFAULT_PORT_BASE,
        };
        let cluster_started = Instant::now();
        let cluster = HaCluster::start(script, port_base, logs_path.join("ha-cluster.log"))
            .await
            .context("starting the HA PostgreSQL cluster")?;
        println!(
            "chaos: HA cluster in {} up after {:.1}s: {} (port base {port_base})",
            cluster.dir().display(),
            cluster_started.elapsed().as_secs_f64(),
            cluster.admin_url()
        );
        let db = Database::Ha(cluster);
        let mut conn = connect_retrying(&db.admin_url()).await?;
        sqlx::query("CREATE DATABASE chatd")
            .execute(&mut conn)
            .await?;
        db
    } else {
        let pg = PgCluster::start(pg_bin.context("no PostgreSQL binaries")?)
            .await
            .context("starting the private PostgreSQL cluster")?;
        pg.create_database().await?;
        Database::Private(pg)
    };
    let llm = FakeLlm::start(&fake_llm_bin, &logs_path.join("fake-llm.log")).await?;
    let config = llm.write_config(&logs_path)?;
    let lease = humantime::format_duration(args.lease).to_string();
    // One workspace directory for the run's replicas (each keeps its chats
    // under a directory of its own there and sweeps the ones killed
    // replicas left); no approvals, so that workspace steps run at once.
    let workspace_dir = logs_path.join("workspaces");
    let replica_args: Vec<String> = [
        "--workspace-dir",
        workspace_dir.to_str().context("path")?,
        "--workspace-approval",
        "never",
        "--postgres-url",
        &db.url(),
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
        workspaces: HashSet::new(),
        ledger: Mutex::new(Ledger::default()),
        stats: Mutex::new(Stats::default()),
    });
    let http = reqwest::Client::new();
    let mut chats = Vec::new();
    let mut workspaces = HashSet::new();
    for i in 0..args.chats {
        // Every other chat has a workspace (the first one included).
        let workspace = i % 2 == 0;
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
                "workspace": workspace,
            })),
        )
        .await;
        anyhow::ensure!(
            answer.status == 201,
            "creating a chat: {} {}",
            answer.status,
            answer.body
        );
        let id = answer.body["id"].as_str().context("chat id")?.to_owned();
        if workspace {
            workspaces.insert(id.clone());
        }
        chats.push(id);
    }
    let shared = Arc::new(Shared {
        replicas: Mutex::new(replicas.iter().map(|r| (r.url.clone(), true)).collect()),
        chats: chats.clone(),
        workspaces: workspaces.clone(),
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
    // The replica faults (and, on the private cluster, its restarts) in
    // this loop; an HA run's database faults in their own loop beside it
    // ([`ha::run_faults`]), the clients running on until it has finished.
    let db_faults_done = AtomicBool::new(!matches!(db, Database::Ha(_)));
    let db_faults = async {
        let record = match &db {
            Database::Ha(cluster) => {
                Some(ha::run_faults(cluster, seed, started, args.duration).await)
            }
            Database::Private(_) => None,
        };
        db_faults_done.store(true, Ordering::SeqCst);
        record
    };
    let replica_faults = async {
        let mut pg_restarts = 0;
        let mut fault_rng = StdRng::seed_from_u64(seed.wrapping_add(7));
        while started.elapsed() < args.duration || !db_faults_done.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(fault_rng.random_range(1_500..5_000))).await;
            if started.elapsed() >= args.duration && db_faults_done.load(Ordering::SeqCst) {
                break;
            }
            let up: Vec<usize> = (0..replicas.len()).filter(|&i| replicas[i].up()).collect();
            let roll = fault_rng.random_range(0..100);
            let kind = match (roll, &db) {
                (0..35, _) if up.len() > 1 => {
                    let i = up[fault_rng.random_range(0..up.len())];
                    set_up(&shared, i, false);
                    replicas[i].kill9().await;
                    tokio::time::sleep(Duration::from_millis(fault_rng.random_range(300..2_000)))
                        .await;
                    start_replica(&shared, &mut replicas[i]).await?;
                    set_up(&shared, i, true);
                    "sigkill_restart"
                }
                (35..60, _) if up.len() > 1 => {
                    let i = up[fault_rng.random_range(0..up.len())];
                    set_up(&shared, i, false);
                    replicas[i].pause();
                    tokio::time::sleep(args.lease + Duration::from_secs(1)).await;
                    replicas[i].resume();
                    set_up(&shared, i, true);
                    "sigstop_past_lease"
                }
                (90..100, Database::Private(pg)) if pg_restarts < 2 => {
                    pg_restarts += 1;
                    pg.crash().await?;
                    tokio::time::sleep(Duration::from_millis(fault_rng.random_range(200..1_500)))
                        .await;
                    pg.start_server().await?;
                    "postgres_restart"
                }
                (_, Database::Private(_)) => {
                    terminate_backends(&db.admin_url()).await?;
                    "pg_terminate_backend"
                }
                (_, Database::Ha(_)) => match terminate_backends(&db.admin_url()).await {
                    Ok(()) => "pg_terminate_backend",
                    // The primary may be gone or stalled just now.
                    Err(_) => "pg_terminate_backend_unreachable",
                },
            };
            println!(
                "chaos: t={:>5.1}s fault {kind}",
                started.elapsed().as_secs_f64()
            );
            count_fault(&shared, kind);
        }
        anyhow::Ok(())
    };
    let (db_record, replica_result) = tokio::join!(db_faults, replica_faults);
    replica_result?;
    let run_end = Instant::now();
    let mut harness_violations = Vec::new();
    if let Some(record) = &db_record {
        for fault in &record.faults {
            count_fault(&shared, fault.kind.name());
        }
        if let Some(err) = &record.error {
            harness_violations.push(format!("the HA cluster's fault loop ended early: {err}"));
        }
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
    if let Database::Ha(cluster) = &db {
        let waited = Instant::now();
        match cluster.wait_healthy(90).await {
            Ok(()) => println!(
                "chaos: HA cluster healthy before settling (waited {:.1}s)",
                waited.elapsed().as_secs_f64()
            ),
            Err(err) => harness_violations.push(format!(
                "the HA cluster was not healthy before settling: {err:#}"
            )),
        }
    }
    for (i, r) in replicas.iter_mut().enumerate() {
        if !r.up() {
            if r.stopped {
                r.resume();
            } else {
                start_replica(&shared, r).await?;
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
    let mut conn = connect_retrying(&db.url()).await?;
    let ledger = std::mem::take(&mut *shared.ledger.lock().unwrap_or_else(|p| p.into_inner()));
    let mut violations = ledger.violations.clone();
    violations.append(&mut harness_violations);
    violations.extend(check::check(&mut conn, &chats, &ledger, &views).await?);
    violations.extend(check::branches(&mut conn, &shared, &http, &mut rng, &chats).await?);
    let (workspace_violations, workspace_figures) =
        workspace::check(&mut conn, &shared, &http, &mut rng, &chats, &workspaces).await?;
    violations.extend(workspace_violations);
    if !violations.is_empty() {
        dump_database(&mut conn, &logs_path).await;
    }
    drop(conn);
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
    let with_status = |status: u16| -> u64 {
        stats
            .answers
            .iter()
            .filter(|((_, s), _)| *s == status)
            .map(|(_, n)| n)
            .sum()
    };
    println!(
        "chaos: answers 503 × {} (without Retry-After × {}), transport errors × {}, 500 × {}",
        with_status(503),
        stats.unavailable_without_retry_after,
        with_status(0),
        with_status(500)
    );
    println!(
        "chaos: workspace ops (acknowledged sends and edits) {}",
        by_count(
            stats
                .workspace_ops
                .iter()
                .map(|(k, n)| ((*k).to_owned(), *n))
        )
    );
    println!(
        "chaos: workspace results stored {}; reads checked against the replay {}; \
         files {} ({} bytes) in {} chats, log lines {}",
        by_count(workspace_figures.results.clone().into_iter()),
        workspace_figures.reads_checked,
        workspace_figures.files,
        workspace_figures.bytes,
        workspaces.len(),
        workspace_figures.log_lines
    );
    for (kind, n) in &stats.faults {
        println!("chaos: faults {kind} × {n}");
    }
    println!(
        "chaos: replica starts that failed and were tried again: {}",
        stats.failed_starts.len()
    );
    if let Some(record) = &db_record {
        for (i, fault) in record.faults.iter().enumerate() {
            let next = record.faults.get(i + 1).map_or(run_end, |f| f.at);
            let f = ha::figures(fault, &ledger, &stats, next);
            let p = ha::progress(fault, &views, next);
            println!(
                "chaos: {} {} at t={:.1}s: {}; first acknowledged write begun after it {}; \
                 longest time without one {:.1}s, ending {}; healthy {}; 503 × {}, transport errors × {}, other 5xx × {}",
                fault.kind.name(),
                fault.node,
                fault.at.duration_since(started).as_secs_f64(),
                fault.new_primary.as_ref().map_or_else(
                    || "no other leader".to_owned(),
                    |(name, at)| format!(
                        "{name} led after {:.1}s",
                        at.duration_since(fault.at).as_secs_f64()
                    )
                ),
                f.first_write.map_or_else(
                    || "none".to_owned(),
                    |d| format!("after {:.1}s", d.as_secs_f64())
                ),
                f.longest_gap.as_secs_f64(),
                f.resumed.map_or_else(
                    || "never".to_owned(),
                    |d| format!("{:.1}s after the fault", d.as_secs_f64())
                ),
                fault.healthy.map_or_else(
                    || "never".to_owned(),
                    |at| format!("after {:.1}s", at.duration_since(fault.at).as_secs_f64())
                ),
                f.unavailable,
                f.transport_errors,
                f.other_5xx
            );
            println!(
                "chaos:   chats streaming at the {}: {}, with a new message after the new leader: {}{}",
                fault.kind.name(),
                p.running,
                p.progressed,
                p.all_after.map_or_else(String::new, |d| format!(
                    " (all {:.1}s after the fault)",
                    d.as_secs_f64()
                ))
            );
        }
    }
    for ((op, status), n) in &noisy.answers {
        println!("chaos: noisy {op:<14} {status:>3} × {n}");
    }
    println!(
        "chaos: noisy tenant held at most {} streams at once",
        noisy.streams_held_at_most
    );
    write_timeline(
        &logs_path.join("timeline.tsv"),
        started,
        &ledger,
        &stats,
        db_record.as_ref(),
    );
    drop(stats);
    drop(ledger);
    for r in &mut replicas {
        r.stop().await;
    }
    let postgres_logs: Vec<(PathBuf, PathBuf)> = match &db {
        Database::Private(pg) => {
            pg.stop().await;
            vec![(pg.log_path(), logs_path.join("postgres.log"))]
        }
        Database::Ha(cluster) => {
            let copies = logs_path.join("ha-cluster");
            std::fs::create_dir_all(&copies)?;
            cluster
                .log_files()
                .into_iter()
                .map(|from| {
                    let name = from
                        .strip_prefix(cluster.dir())
                        .unwrap_or(&from)
                        .to_string_lossy()
                        .replace('/', "_");
                    (from, copies.join(name))
                })
                .collect()
        }
    };
    violations.extend(check_postgres_logs(&postgres_logs));
    let keep = args.keep_logs || !violations.is_empty();
    if let Database::Ha(cluster) = &db {
        cluster.stop(!keep).await;
    }
    if violations.is_empty() {
        println!("chaos: seed={seed}: no violations");
        if keep {
            println!("chaos: logs kept in {}", logs_path.display());
        } else {
            let _ = std::fs::remove_dir_all(&logs_path);
        }
        Ok(true)
    } else {
        for v in &violations {
            println!("chaos: VIOLATION {v}");
        }
        println!(
            "chaos: seed={seed}: {} violations (logs kept in {})",
            violations.len(),
            logs_path.display()
        );
        Ok(false)
    }
}

/// Writes the stored messages and workspace entries of every chat to
/// `messages.jsonl` and `workspace-files.jsonl` in `dir` (one JSON object
/// a row, in id and path order), for reading a run's violations after the
/// private cluster is gone. Errors are printed, not returned.
async fn dump_database(conn: &mut sqlx::PgConnection, dir: &std::path::Path) {
    let dumps = [
        (
            "messages.jsonl",
            "SELECT row_to_json(m)::text FROM (SELECT chat_id, id, parent_id, role, visibility,
                deleted, revision, created_at, content FROM chat_messages ORDER BY id) m",
        ),
        (
            "workspace-files.jsonl",
            "SELECT row_to_json(f)::text FROM (SELECT chat_id, path, kind, bytes,
                convert_from(content, 'UTF8') AS content, updated_at
                FROM chat_workspace_files ORDER BY chat_id, path) f",
        ),
    ];
    for (name, sql) in dumps {
        // Assembled for reading only, not part of chatd's statements.
        match sqlx::query_scalar::<_, String>(sql)
            .fetch_all(&mut *conn)
            .await
        {
            Ok(rows) => {
                let _ = std::fs::write(dir.join(name), rows.join("\n") + "\n");
            }
            Err(err) => println!("chaos: could not dump {name}: {err}"),
        }
    }
}

/// `name × n, ...` of `counts`.
fn by_count(counts: impl Iterator<Item = (String, u64)>) -> String {
    let parts: Vec<String> = counts.map(|(k, n)| format!("{k} × {n}")).collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Writes the run's timeline to `path`, one event a line, ordered by time:
/// seconds since `started`, a tab, then `ack CHAT TOKEN` (an acknowledged
/// send or edit), `answer STATUS` (a transport error, status 0, or a `5xx`),
/// or a database fault's steps (`fault KIND NODE`, `leads NODE`,
/// `healthy`). Errors writing it are ignored (it is for reading only).
fn write_timeline(
    path: &std::path::Path,
    started: Instant,
    ledger: &client::Ledger,
    stats: &client::Stats,
    faults: Option<&ha::FaultRecord>,
) {
    let t = |at: Instant| {
        if at >= started {
            at.duration_since(started).as_secs_f64()
        } else {
            -started.duration_since(at).as_secs_f64()
        }
    };
    let mut events: Vec<(f64, String)> = Vec::new();
    for w in &ledger.written {
        if let Some(at) = w.acked_at {
            events.push((t(at), format!("ack {} {}", w.chat, w.token)));
        }
    }
    for (at, status) in &stats.errors {
        events.push((t(*at), format!("answer {status}")));
    }
    for fault in faults.map(|r| r.faults.as_slice()).unwrap_or_default() {
        events.push((
            t(fault.at),
            format!("fault {} {}", fault.kind.name(), fault.node),
        ));
        if let Some((node, at)) = &fault.new_primary {
            events.push((t(*at), format!("leads {node}")));
        }
        if let Some(at) = fault.healthy {
            events.push((t(at), "healthy".to_owned()));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let text: String = events
        .iter()
        .map(|(t, e)| format!("{t:.3}\t{e}\n"))
        .collect();
    let _ = std::fs::write(path, text);
}

/// Copies the database's logs (`(from, to)`: the private cluster's log, or
/// every `.log` file of the HA cluster's directory) next to the replicas'
/// logs and checks them: a deadlock PostgreSQL detected, or a command on a
/// connection that was still inside a transaction ("there is already a
/// transaction in progress": a pooled connection reused in an unknown
/// state), is a violation. Prints both counts and the first deadlock
/// reports' details (the statements of each process in the cycle).
fn check_postgres_logs(logs: &[(PathBuf, PathBuf)]) -> Vec<String> {
    let mut deadlocks = 0;
    let mut in_progress = 0;
    let mut violations = Vec::new();
    let mut shown = 0;
    if logs.is_empty() {
        violations.push("no PostgreSQL log was found".to_owned());
    }
    for (from, to) in logs {
        let Ok(bytes) = std::fs::read(from) else {
            violations.push(format!("the log {} could not be read", from.display()));
            continue;
        };
        let log = String::from_utf8_lossy(&bytes);
        let _ = std::fs::write(to, &bytes);
        deadlocks += log.matches("deadlock detected").count();
        in_progress += log
            .matches("there is already a transaction in progress")
            .count();
        let lines: Vec<&str> = log.lines().collect();
        for (i, _) in lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains("deadlock detected"))
        {
            if shown == 3 {
                break;
            }
            shown += 1;
            for l in &lines[i..(i + 12).min(lines.len())] {
                println!("chaos:   | {l}");
            }
        }
    }
    println!("chaos: postgres deadlocks={deadlocks} already_in_transaction={in_progress}");
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
