//! Load benchmark of `POST /api/v2/chats/{chat}/messages` in queue mode on
//! busy chats (issue 3, "Measure"), from a process of its own.
//!
//! It creates `--chats` chats (each stays `running`: no worker acquires
//! them), then `--clients` concurrent clients send messages with
//! `busy_behavior: "queue"` round-robin over those chats for `--duration`
//! after a `--warmup`, each waiting for its answer before the next request
//! (closed loop). It prints requests per second, the status codes, and the
//! latency percentiles of the measured period.
//!
//! The server is either one already running (`--url` and `--token`; start it
//! with a large `--max-queued-messages`, or sends soon answer `429`), or, by
//! default, a `chatd serve` this program starts itself from `--chatd-bin`
//! (default: the `chatd` binary next to this example's directory, so build
//! it first) with `--max-queued-messages 1000000`, on a fresh embedded
//! PostgreSQL in a temporary directory, or on a fresh database
//! `chatd_bench_<random>` of `--postgres-url` (dropped afterwards).
//!
//! ```text
//! cargo build --release -p chatd
//! cargo run --release -p chatd --example load_send -- --chats 200 --clients 16 --duration 20s
//! ```

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions as _, Connection as _};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// Load benchmark of sending messages in queue mode to busy chats.
#[derive(Debug, Parser)]
struct Args {
    /// Base URL of a running server (then --token is required). Without it,
    /// a server is started from --chatd-bin.
    #[arg(long)]
    url: Option<String>,
    /// Bearer token for --url.
    #[arg(long)]
    token: Option<String>,
    /// The chatd binary to start when no --url is given. Default: `chatd`
    /// next to this example's directory (target/<profile>/chatd).
    #[arg(long)]
    chatd_bin: Option<PathBuf>,
    /// Server for the started chatd: a fresh database is created on it and
    /// dropped afterwards. Default: an embedded PostgreSQL in a temporary
    /// directory.
    #[arg(long)]
    postgres_url: Option<String>,
    /// Chats to create and send to.
    #[arg(long, default_value_t = 200)]
    chats: usize,
    /// Concurrent clients (each one request at a time).
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Measured period.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Unmeasured period before it.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Stop after this many measured requests even if --duration has not
    /// passed.
    #[arg(long, default_value_t = 2_000_000)]
    max_requests: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (server, base, token) = match (&args.url, &args.token) {
        (Some(url), Some(token)) => (None, url.trim_end_matches('/').to_owned(), token.clone()),
        (Some(_), None) => bail!("--url needs --token"),
        (None, _) => {
            let server = Server::start(&args).await?;
            let base = server.base.clone();
            let token = server.token.clone();
            (Some(server), base, token)
        }
    };
    let result = run(&args, &base, &token).await;
    if let Some(server) = server {
        server.stop().await?;
    }
    result
}

async fn run(args: &Args, base: &str, token: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.clients)
        .timeout(Duration::from_secs(30))
        .build()?;

    // Create the chats, `clients` at a time.
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut creators = Vec::new();
    for _ in 0..args.clients.min(args.chats) {
        let (client, next, base, token) = (
            client.clone(),
            next.clone(),
            base.to_owned(),
            token.to_owned(),
        );
        let chats = args.chats;
        creators.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < chats {
                let response = client
                    .post(format!("{base}/api/v2/chats"))
                    .bearer_auth(&token)
                    .json(&json!({"content": [{"type": "text", "text": "load test chat"}]}))
                    .send()
                    .await?;
                let status = response.status();
                let body: Value = response.json().await?;
                if status != 201 || body["status"] != "running" {
                    bail!("creating a chat: {status} {body}");
                }
                ids.push(body["id"].as_str().context("chat id")?.to_owned());
            }
            anyhow::Ok(ids)
        }));
    }
    let mut chats = Vec::new();
    for creator in creators {
        chats.extend(creator.await??);
    }
    let created_in = started.elapsed();
    println!(
        "created {} chats in {:.2} s ({:.0}/s); all running (no worker), so every send queues",
        chats.len(),
        created_in.as_secs_f64(),
        chats.len() as f64 / created_in.as_secs_f64()
    );

    // Send.
    let chats = Arc::new(chats);
    let measure_from = Instant::now() + args.warmup;
    let measure_until = measure_from + args.duration;
    let measured = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for c in 0..args.clients {
        let (client, chats, base, token, measured) = (
            client.clone(),
            chats.clone(),
            base.to_owned(),
            token.to_owned(),
            measured.clone(),
        );
        let max_requests = args.max_requests;
        senders.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
            let mut i = c;
            loop {
                let now = Instant::now();
                if now >= measure_until || measured.load(Ordering::Relaxed) >= max_requests {
                    break;
                }
                let chat = &chats[i % chats.len()];
                i += 1;
                let sent = Instant::now();
                let response = client
                    .post(format!("{base}/api/v2/chats/{chat}/messages"))
                    .bearer_auth(&token)
                    .json(&json!({
                        "content": [{"type": "text", "text": format!("load message {i} from client {c}")}],
                        "busy_behavior": "queue",
                    }))
                    .send()
                    .await?;
                let status = response.status().as_u16();
                let body = response.bytes().await?;
                let elapsed = sent.elapsed();
                if sent >= measure_from {
                    measured.fetch_add(1, Ordering::Relaxed);
                    histogram.saturating_record(elapsed.as_micros() as u64);
                    *statuses.entry(status).or_default() += 1;
                }
                if status != 200 && statuses.get(&status) == Some(&1) {
                    eprintln!("first {status}: {}", String::from_utf8_lossy(&body));
                }
            }
            anyhow::Ok((histogram, statuses))
        }));
    }
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
    for sender in senders {
        let (h, s) = sender.await??;
        histogram.add(h)?;
        for (status, n) in s {
            *statuses.entry(status).or_default() += n;
        }
    }
    let seconds = (Instant::now().min(measure_until) - measure_from).as_secs_f64();
    let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "POST /api/v2/chats/{{chat}}/messages, busy_behavior=queue: {} clients over {} chats, {:.1} s measured after {:?} warm-up",
        args.clients,
        chats.len(),
        seconds,
        args.warmup
    );
    println!(
        "requests: {} ({:.0}/s); statuses: {}",
        histogram.len(),
        histogram.len() as f64 / seconds,
        statuses
            .iter()
            .map(|(s, n)| format!("{s} x {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
        ms(0.50),
        ms(0.90),
        ms(0.99),
        ms(0.999),
        histogram.max() as f64 / 1000.0
    );
    if statuses.keys().any(|s| *s != 200) {
        bail!("some requests did not answer 200");
    }
    Ok(())
}

/// A `chatd serve` started for the benchmark.
struct Server {
    child: Child,
    base: String,
    token: String,
    _data_dir: Option<tempfile::TempDir>,
    database: Option<(PgConnectOptions, String)>,
}

impl Server {
    async fn start(args: &Args) -> anyhow::Result<Self> {
        let bin = common::chatd_bin(args.chatd_bin.as_deref())?;
        if !bin.is_file() {
            bail!(
                "{} not found: build it first (cargo build --release -p chatd) or pass --chatd-bin / --url",
                bin.display()
            );
        }
        let token = format!("bench-{}", uuid::Uuid::new_v4().simple());
        let mut command = Command::new(&bin);
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--max-queued-messages",
                "1000000",
                // No worker: the chats stay busy, so every send is queued.
                "--no-worker",
            ])
            .env("CHATD_BOOTSTRAP_ADMIN_TOKEN", &token)
            .env("CHATD_LOG", "warn,chatd=info")
            .env_remove("CHATD_POSTGRES_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut data_dir = None;
        let mut database = None;
        if let Some(url) = &args.postgres_url {
            let admin = PgConnectOptions::from_str(url)?;
            let name = format!("chatd_bench_{}", uuid::Uuid::new_v4().simple());
            let mut conn = admin.connect().await?;
            sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
                .execute(&mut conn)
                .await?;
            conn.close().await?;
            let url = admin.clone().database(&name).to_url_lossy().to_string();
            command.args(["--postgres-url", &url]);
            database = Some((admin, name));
        } else {
            use std::os::unix::fs::PermissionsExt as _;
            let dir = tempfile::Builder::new().prefix("chatd-bench-").tempdir()?;
            // Reachable by the `postgres` user when we run as root.
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
            command.arg("--data-dir").arg(dir.path().join("data"));
            data_dir = Some(dir);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
        let deadline = Instant::now() + Duration::from_secs(120);
        let base = loop {
            let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
                .await
                .context("chatd did not start within 120 s")??
                .context("chatd exited before listening")?;
            eprintln!("chatd: {line}");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
            }
        };
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("chatd: {line}");
            }
        });
        Ok(Self {
            child,
            base,
            token,
            _data_dir: data_dir,
            database,
        })
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            )?;
        }
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await??;
        if let Some((admin, name)) = self.database {
            let mut conn = admin.connect().await?;
            sqlx::query(AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
            )))
            .execute(&mut conn)
            .await?;
        }
        if !status.success() {
            bail!("chatd exited with {status}");
        }
        Ok(())
    }
}
