//! The starvation benchmark of issue 31 ("Measure": the other member's
//! request latency p50/p99 while 24 slow uploads run).
//!
//! It starts a `chatd serve` from `--chatd-bin` (default: the `chatd`
//! binary next to this example's directory) on a fresh database
//! `chatd_bench_<random>` of `--postgres-url` (dropped afterwards), with the
//! testkit's fake LLM as the default model (it answers "pong"). Member A
//! then keeps `--uploads` slow uploads open (`POST /api/v2/files`, each
//! declaring 1 MiB and sending one byte every `--byte-interval`; an upload
//! the server answers or closes is opened again at once), while member B,
//! one request at a time, completes turns in one chat: `POST
//! /chats/{chat}/messages`, `GET /chats/{chat}` every 50 ms until the
//! chat is `waiting`, `GET /chats/{chat}/messages?limit=20`, `GET /chats`.
//! After a `--warmup`, for `--duration`, it records every request of B, and
//! samples PostgreSQL's `pg_stat_activity` twice a second for sessions of
//! the database `idle in transaction`.
//!
//! Printed: B's latency p50/p99/max per route and over all requests, the
//! status codes and transport errors, the turns completed and their time
//! (send to `waiting`), what the uploads were answered, and the most
//! sessions seen `idle in transaction` at once (and idle so for more than
//! a second).
//!
//! The binary may be an older `chatd` (to measure "before"): flags it does
//! not know are left out (the request-rate limit is raised only when `chatd
//! serve --help` lists `--default-requests-per-minute`).
//!
//! ```text
//! cargo build -p chatd --bin chatd --example bench_starvation
//! target/debug/examples/bench_starvation [--chatd-bin PATH] [--duration 30s]
//! ```

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chatd_testkit::fake_llm::{FakeLlm, Script};
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions as _, Connection as _};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// Latency of one member's requests while another runs slow uploads.
#[derive(Debug, Parser)]
struct Args {
    /// The chatd binary to start. Default: `chatd` next to this example's
    /// directory (target/<profile>/chatd).
    #[arg(long)]
    chatd_bin: Option<PathBuf>,
    /// PostgreSQL server: a fresh database is created on it and dropped
    /// afterwards.
    #[arg(
        long,
        env = "CHATD_TEST_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    postgres_url: String,
    /// Slow uploads member A keeps open.
    #[arg(long, default_value_t = 24)]
    uploads: usize,
    /// Time between two bytes of a slow upload.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    byte_interval: Duration,
    /// The server's pool size (`--max-db-connections`, the default 16).
    #[arg(long, default_value_t = 16)]
    max_db_connections: u32,
    /// Measured period.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Unmeasured period before it (the uploads are open all along).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    warmup: Duration,
}

/// Declared length of a slow upload's body.
const UPLOAD_BYTES: usize = 1024 * 1024;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let llm = FakeLlm::start().await?;
    llm.set_default(Script::text("pong"));
    let server = Server::start(&args, &llm).await?;
    let result = run(&args, &server).await;
    server.stop().await?;
    result
}

async fn run(args: &Args, server: &Server) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let base = server.base.clone();
    let a = member(&client, &base, &server.token, "member-a").await?;
    let b = member(&client, &base, &server.token, "member-b").await?;
    let chat = client
        .post(format!("{base}/api/v2/chats"))
        .bearer_auth(&b)
        .json(&json!({"content": [{"type": "text", "text": "hello"}]}))
        .send()
        .await?
        .error_for_status()?
        .json::<Value>()
        .await?["id"]
        .as_str()
        .context("chat id")?
        .to_owned();
    wait_waiting(&client, &base, &b, &chat, &mut Recorder::off()).await?;

    // The attack.
    let addr = base.trim_start_matches("http://").to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let uploads: Vec<_> = (0..args.uploads)
        .map(|_| {
            tokio::spawn(slow_uploads(
                addr.clone(),
                a.clone(),
                args.byte_interval,
                stop.clone(),
            ))
        })
        .collect();
    let sampler = tokio::spawn(sample_idle_in_transaction(
        server.database_url.clone(),
        stop.clone(),
    ));

    // The victim.
    let measure_from = Instant::now() + args.warmup;
    let measure_until = measure_from + args.duration;
    let mut rec = Recorder::new(measure_from)?;
    let mut turn_times = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut turn = 0u64;
    while Instant::now() < measure_until {
        turn += 1;
        let sent = Instant::now();
        let ok = rec
            .call(
                "POST /chats/{chat}/messages",
                client
                    .post(format!("{base}/api/v2/chats/{chat}/messages"))
                    .bearer_auth(&b)
                    .json(&json!({"content": [{"type": "text", "text": format!("ping {turn}")}]})),
            )
            .await
            .is_some();
        if ok
            && wait_waiting(&client, &base, &b, &chat, &mut rec)
                .await
                .is_ok()
            && sent >= measure_from
        {
            turn_times.saturating_record(sent.elapsed().as_micros() as u64);
        }
        rec.call(
            "GET /chats/{chat}/messages",
            client
                .get(format!("{base}/api/v2/chats/{chat}/messages?limit=20"))
                .bearer_auth(&b),
        )
        .await;
        rec.call(
            "GET /chats",
            client.get(format!("{base}/api/v2/chats")).bearer_auth(&b),
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut upload_answers = BTreeMap::<String, u64>::new();
    for upload in uploads {
        for (k, n) in upload.await?? {
            *upload_answers.entry(k).or_default() += n;
        }
    }
    let worst_idle = sampler.await??;

    let seconds = args.duration.as_secs_f64();
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "chatd: {}; {} slow uploads from member A (1 byte every {:?}), pool {} connections; member B measured {:.0} s after {:?} warm-up",
        server.bin.display(),
        args.uploads,
        args.byte_interval,
        args.max_db_connections,
        seconds,
        args.warmup
    );
    let mut all = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    for (route, stats) in &rec.routes {
        all.add(&stats.latency)?;
        println!(
            "  {route:<30} n {:>5}  p50 {:>9.2} ms  p99 {:>9.2} ms  max {:>9.2} ms  statuses {}",
            stats.latency.len(),
            ms(&stats.latency, 0.5),
            ms(&stats.latency, 0.99),
            stats.latency.max() as f64 / 1000.0,
            fmt_counts(&stats.statuses)
        );
    }
    let errors: u64 = rec
        .routes
        .values()
        .flat_map(|s| s.statuses.iter())
        .filter(|(k, _)| !k.starts_with('2'))
        .map(|(_, n)| n)
        .sum();
    println!(
        "  {:<30} n {:>5}  p50 {:>9.2} ms  p99 {:>9.2} ms  max {:>9.2} ms  errors {errors}",
        "all requests of B",
        all.len(),
        ms(&all, 0.5),
        ms(&all, 0.99),
        all.max() as f64 / 1000.0,
    );
    println!(
        "  turns completed: {} ({:.1}/s); send to waiting p50 {:.2} ms, p99 {:.2} ms",
        turn_times.len(),
        turn_times.len() as f64 / seconds,
        ms(&turn_times, 0.5),
        ms(&turn_times, 0.99)
    );
    println!(
        "  slow uploads answered: {}",
        if upload_answers.is_empty() {
            "none (all still sending)".to_owned()
        } else {
            fmt_counts(&upload_answers)
        }
    );
    println!(
        "  most sessions `idle in transaction` at once: {} (for more than 1 s: {})",
        worst_idle.0, worst_idle.1
    );
    Ok(())
}

/// B's requests: latency histogram and statuses per route (transport
/// errors counted as `error`), from `from` on.
struct Recorder {
    from: Option<Instant>,
    routes: BTreeMap<&'static str, RouteStats>,
}

struct RouteStats {
    latency: Histogram<u64>,
    statuses: BTreeMap<String, u64>,
}

impl Recorder {
    fn new(from: Instant) -> anyhow::Result<Self> {
        Ok(Self {
            from: Some(from),
            routes: BTreeMap::new(),
        })
    }

    /// Records nothing.
    fn off() -> Self {
        Self {
            from: None,
            routes: BTreeMap::new(),
        }
    }

    /// Sends `request`; the JSON body of a 2xx answer, else `None`.
    async fn call(
        &mut self,
        route: &'static str,
        request: reqwest::RequestBuilder,
    ) -> Option<Value> {
        let started = Instant::now();
        let result = async {
            let response = request.send().await?;
            let status = response.status();
            let body = response.bytes().await?;
            anyhow::Ok((status, body))
        }
        .await;
        let elapsed = started.elapsed();
        let (key, body) = match result {
            Ok((status, body)) => (
                status.as_u16().to_string(),
                status
                    .is_success()
                    .then(|| serde_json::from_slice(&body).unwrap_or(Value::Null)),
            ),
            Err(_) => ("error".to_owned(), None),
        };
        if self.from.is_some_and(|from| started >= from) {
            let stats = self.routes.entry(route).or_insert_with(|| RouteStats {
                latency: Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"),
                statuses: BTreeMap::new(),
            });
            stats.latency.saturating_record(elapsed.as_micros() as u64);
            *stats.statuses.entry(key).or_default() += 1;
        }
        body
    }
}

/// Polls the chat every 50 ms until it is `waiting` (30 s at most).
async fn wait_waiting(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    chat: &str,
    rec: &mut Recorder,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = rec
            .call(
                "GET /chats/{chat}",
                client
                    .get(format!("{base}/api/v2/chats/{chat}"))
                    .bearer_auth(token),
            )
            .await;
        if body.is_some_and(|c| c["status"] == "waiting") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the chat did not reach waiting within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Keeps one slow upload open until `stop`: declares [`UPLOAD_BYTES`],
/// sends a byte every `interval`; when the server answers or closes the
/// connection, opens another. Returns what the uploads were answered
/// (status codes; `closed` without an answer).
async fn slow_uploads(
    addr: String,
    token: String,
    interval: Duration,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut answers = BTreeMap::<String, u64>::new();
    while !stop.load(Ordering::Relaxed) {
        let mut stream = match TcpStream::connect(&addr).await {
            Ok(stream) => stream,
            Err(_) => {
                *answers.entry("connect error".to_owned()).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let head = format!(
            "POST /api/v2/files?name=slow.bin HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {UPLOAD_BYTES}\r\n\r\n"
        );
        if stream.write_all(head.as_bytes()).await.is_err() {
            *answers.entry("closed".to_owned()).or_default() += 1;
            continue;
        }
        let mut buf = vec![0u8; 4096];
        let answer = loop {
            if stop.load(Ordering::Relaxed) {
                break None;
            }
            if stream.write_all(b"x").await.is_err() {
                break Some("closed".to_owned());
            }
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(n) if n > 0 => {
                        let text = String::from_utf8_lossy(&buf[..n]);
                        break Some(text.split_whitespace().nth(1).unwrap_or("garbled").to_owned());
                    }
                    _ => break Some("closed".to_owned()),
                },
                () = tokio::time::sleep(interval) => {}
            }
        };
        if let Some(answer) = answer {
            *answers.entry(answer).or_default() += 1;
        }
    }
    Ok(answers)
}

/// The most sessions of the database seen `idle in transaction` at once,
/// and of those, the most idle so for more than a second (a transaction
/// held while nothing runs in it), sampled every 500 ms until `stop`.
async fn sample_idle_in_transaction(
    url: String,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(i64, i64)> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    let mut worst = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        let (idle, held): (i64, i64) = sqlx::query_as(
            "SELECT count(*),
                    count(*) FILTER (WHERE now() - state_change > interval '1 second')
             FROM pg_stat_activity
             WHERE datname = current_database() AND state = 'idle in transaction'",
        )
        .fetch_one(&pool)
        .await?;
        worst = (worst.0.max(idle), worst.1.max(held));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    pool.close().await;
    Ok(worst)
}

/// A member named `name`, created with the admin `token`; returns a token
/// of theirs.
async fn member(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    name: &str,
) -> anyhow::Result<String> {
    let user: Value = client
        .post(format!("{base}/api/v2/users"))
        .bearer_auth(token)
        .json(&json!({"username": name, "role": "member"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = user["id"].as_str().context("user id")?;
    let created: Value = client
        .post(format!("{base}/api/v2/users/{id}/tokens"))
        .bearer_auth(token)
        .json(&json!({}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(created["token"].as_str().context("token")?.to_owned())
}

fn fmt_counts(counts: &BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(k, n)| format!("{k} x {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `chatd serve` under test, on its own database.
struct Server {
    child: Child,
    bin: PathBuf,
    base: String,
    token: String,
    database_url: String,
    admin: PgConnectOptions,
    database: String,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(args: &Args, llm: &FakeLlm) -> anyhow::Result<Self> {
        let bin = common::chatd_bin(args.chatd_bin.as_deref())?;
        if !bin.is_file() {
            bail!(
                "{} not found: build it first (cargo build -p chatd --bin chatd) or pass --chatd-bin",
                bin.display()
            );
        }
        let help = Command::new(&bin)
            .args(["serve", "--help"])
            .output()
            .await?;
        let knows_rate_limit =
            String::from_utf8_lossy(&help.stdout).contains("--default-requests-per-minute");

        let dir = tempfile::tempdir()?;
        let config = dir.path().join("chatd.toml");
        std::fs::write(
            &config,
            format!(
                "[[providers]]\nname = \"fake\"\nprovider = \"openai-compat\"\nbase_url = \"{}\"\n\n\
                 [[model_configs]]\nname = \"fake-model\"\nprovider = \"fake\"\nmodel = \"fake-model\"\ncontext_limit = 1000000\nis_default = true\n",
                llm.base_url()
            ),
        )?;
        let admin = PgConnectOptions::from_str(&args.postgres_url)?;
        let database = format!("chatd_bench_{}", uuid::Uuid::new_v4().simple());
        let mut conn = admin.connect().await?;
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{database}\"")))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        let database_url = admin.clone().database(&database).to_url_lossy().to_string();

        let token = format!("bench-{}", uuid::Uuid::new_v4().simple());
        let mut command = Command::new(&bin);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--postgres-url"])
            .arg(&database_url)
            .arg("--config")
            .arg(&config)
            .args(["--max-db-connections", &args.max_db_connections.to_string()]);
        if knows_rate_limit {
            command.args(["--default-requests-per-minute", "1000000"]);
        }
        command
            .env("CHATD_BOOTSTRAP_ADMIN_TOKEN", &token)
            .env("CHATD_LOG", "warn,chatd=info")
            .env_remove("CHATD_POSTGRES_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
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
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
            }
        };
        // Keep reading (a full pipe would block the server), quietly: a
        // starved server logs every failed request.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            child,
            bin,
            base,
            token,
            database_url,
            admin,
            database,
            _dir: dir,
        })
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            )?;
        }
        if tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        let mut conn = self.admin.connect().await?;
        sqlx::query(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.database
        )))
        .execute(&mut conn)
        .await?;
        Ok(())
    }
}
