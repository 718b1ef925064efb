//! Benchmark of issue 17's "Measure": upload (and download) throughput and
//! the server's peak memory for a 10 MiB file, and the tool list sent to
//! the model in plan mode versus normal mode.
//!
//! - **Files**: the real router on a local port over a fresh database;
//!   `--uploads` sequential `POST /api/v2/files` of one 10 MiB body (the
//!   body is one shared buffer made before the baseline, so the client adds
//!   no memory), then as many `GET /api/v2/files/{id}`. Printed: MiB/s
//!   (median) each way, and the process's peak RSS above its RSS before the
//!   uploads (Linux `VmHWM` after resetting it through
//!   `/proc/self/clear_refs`), which shows that neither direction holds a
//!   whole file: the server works a 256 KiB chunk at a time.
//! - **Tools**: a worker with the fake LLM, the testkit's MCP fixture
//!   (stdio; `add`, `whoami` and `getenv` declare `readOnlyHint`) and two
//!   dynamic tools (one marked `read_only`); one chat in normal mode, one in
//!   plan mode. Printed: the tool names each model request carried, and
//!   whether its system text holds the plan-mode instruction.
//! - **Sub-agents**: a worker with the fake LLM (default tunables, so the
//!   child is picked up through its `chat:ownership` notification, not the
//!   30 s acquisition timer); `--spawns` parent chats with `subagents`, each
//!   answering with one `spawn_agent` call. Printed: the time from the
//!   parent's step commit (the child's `created_at`, written by the same
//!   transaction as the `spawn_agent` result) to the child's first model
//!   request reaching the fake LLM, median and max, in ms.
//!
//! ```text
//! cargo run --release -p chatd-api --example bench_files [-- --uploads 10 --spawns 10]
//! ```
//! Uses `CHATD_TEST_DATABASE_URL` (default the local server); creates and
//! drops its own database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_api::{ApiOptions, AppState};
use chatd_core::{ChatStatus, MessagePart};
use chatd_pubsub::{PgPubsub, Pubsub};
use chatd_store::{CreateChatInput, MIGRATOR, NewMessage, Store};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const FILE_BYTES: usize = 10 * 1024 * 1024;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut uploads = 10usize;
    let mut spawns = 10usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--uploads" => uploads = args.next().unwrap_or_default().parse()?,
            "--spawns" => spawns = args.next().unwrap_or_default().parse()?,
            other => anyhow::bail!("unknown flag {other} (use --uploads N, --spawns N)"),
        }
    }
    files(uploads).await?;
    tools().await?;
    subagents(spawns.max(1)).await?;
    Ok(())
}

/// `(VmRSS, VmHWM)` of this process, in KiB.
fn memory_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets `VmHWM` to the current RSS (Linux 4.0+).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn files(uploads: usize) -> anyhow::Result<()> {
    let db = TestDatabase::new(&MIGRATOR).await?;
    let store = Store::new(
        db.pool().clone(),
        Arc::new(chatd_pubsub::RecordingPublisher::new()),
    );
    // A benchmark sends more requests a minute than the default request
    // rate (API.md "Request rate"), which it does not measure.
    let unlimited = chatd_core::limits::LimitDefaults {
        requests_per_minute: i32::MAX,
        ..Default::default()
    };
    let options = ApiOptions {
        limits: unlimited,
        ..ApiOptions::default()
    };
    let app = chatd_api::router(AppState::new(store, options));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let token = chatd_api::create_token(db.pool(), "bench", false).await?;
    let http = reqwest::Client::new();
    let body = axum::body::Bytes::from(vec![b'x'; FILE_BYTES]);
    // Warm up (connection, pool, first allocations).
    let warm: Value = http
        .post(format!("{base}/api/v2/files?name=warm.txt"))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body(body.clone())
        .send()
        .await?
        .json()
        .await?;
    anyhow::ensure!(warm["size"] == FILE_BYTES, "warm-up upload: {warm}");

    let (rss_before, _) = memory_kib();
    reset_peak();
    let mut up = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..uploads {
        let started = Instant::now();
        let file: Value = http
            .post(format!("{base}/api/v2/files?name=bench.txt"))
            .bearer_auth(&token)
            .header("content-type", "text/plain")
            .body(body.clone())
            .send()
            .await?
            .json()
            .await?;
        up.push(FILE_BYTES as f64 / 1048576.0 / started.elapsed().as_secs_f64());
        ids.push(file["id"].as_str().unwrap_or_default().to_owned());
    }
    let (_, peak_up) = memory_kib();
    reset_peak();
    let mut down = Vec::new();
    for id in &ids {
        let started = Instant::now();
        let mut resp = http
            .get(format!("{base}/api/v2/files/{id}"))
            .bearer_auth(&token)
            .send()
            .await?;
        let mut n = 0;
        while let Some(chunk) = resp.chunk().await? {
            n += chunk.len();
        }
        anyhow::ensure!(n == FILE_BYTES, "downloaded {n} bytes");
        down.push(FILE_BYTES as f64 / 1048576.0 / started.elapsed().as_secs_f64());
    }
    let (_, peak_down) = memory_kib();
    println!("files: {uploads} × 10 MiB over HTTP to PostgreSQL (chunks of 256 KiB)");
    println!(
        "  upload:   {:.1} MiB/s median (min {:.1}, max {:.1}); peak RSS {:.1} MiB above the {:.1} MiB before",
        median(up.clone()),
        up.iter().copied().fold(f64::MAX, f64::min),
        up.iter().copied().fold(0.0, f64::max),
        peak_up.saturating_sub(rss_before) as f64 / 1024.0,
        rss_before as f64 / 1024.0,
    );
    println!(
        "  download: {:.1} MiB/s median (min {:.1}, max {:.1}); peak RSS {:.1} MiB above the {:.1} MiB before",
        median(down.clone()),
        down.iter().copied().fold(f64::MAX, f64::min),
        down.iter().copied().fold(0.0, f64::max),
        peak_down.saturating_sub(rss_before) as f64 / 1024.0,
        rss_before as f64 / 1024.0,
    );
    Ok(())
}

async fn tools() -> anyhow::Result<()> {
    let db = TestDatabase::new(&MIGRATOR).await?;
    let pubsub = PgPubsub::connect(db.pool().clone()).await?;
    let store = Store::new(db.pool().clone(), Arc::new(pubsub.clone()));
    let llm = FakeLlm::start().await?;
    let owner = Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'bench', 'member')")
        .bind(owner)
        .execute(db.pool())
        .await?;
    let provider = Uuid::new_v4();
    sqlx::query("INSERT INTO chat_providers (id, provider, display_name, base_url, api_key) VALUES ($1, 'openai-compat', 'fake', $2, 'k')")
        .bind(provider)
        .bind(llm.base_url())
        .execute(db.pool())
        .await?;
    sqlx::query("INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default) VALUES ($1, $2, 'fake-model', 8192, true)")
        .bind(Uuid::new_v4())
        .bind(provider)
        .execute(db.pool())
        .await?;
    let server = Uuid::new_v4();
    let fixture = chatd_testkit::mcp_fixture_bin()?.display().to_string();
    sqlx::query("INSERT INTO chat_mcp_servers (id, slug, transport, command) VALUES ($1, 'calc', 'stdio', $2)")
        .bind(server)
        .bind(&fixture)
        .execute(db.pool())
        .await?;
    let _worker = Worker::start(WorkerDeps {
        store: store.clone(),
        pubsub: Arc::new(pubsub) as Arc<dyn Pubsub>,
        parts: PartBuffer::new(CancellationToken::new()),
        providers: Arc::new(DefaultProviderFactory),
        config: WorkerConfig {
            acquisition_interval: Duration::from_millis(200),
            generate_titles: false,
            ..WorkerConfig::default()
        },
    });
    let dynamic: Vec<chatd_core::DynamicTool> = serde_json::from_value(json!([
        {"name": "edit_file", "description": "Writes a file.", "input_schema": {"type": "object"}},
        {"name": "read_file", "description": "Reads a file.", "input_schema": {"type": "object"}, "read_only": true},
    ]))?;
    for plan_mode in [None, Some("plan")] {
        llm.push(Script::text("ok"));
        let before = llm.requests().len();
        let chat = store
            .create_chat(CreateChatInput {
                owner_id: owner,
                initial_messages: vec![
                    NewMessage::user(vec![MessagePart::text("hi")]).created_by(owner),
                ],
                dynamic_tools: dynamic.clone(),
                mcp_server_ids: vec![server],
                plan_mode: plan_mode.map(str::to_owned),
                ..CreateChatInput::default()
            })
            .await?
            .chat;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let row = chatd_testkit::store::chat_row(db.pool(), chat.id).await;
            if row.status == ChatStatus::Waiting && row.worker_id.is_none() {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the turn did not end");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let request = llm
            .requests()
            .into_iter()
            .nth(before)
            .ok_or_else(|| anyhow::anyhow!("no model request"))?;
        let names: Vec<String> = request.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
            .collect();
        let instructed = request.body["messages"][0]["content"]
            .as_str()
            .is_some_and(|s| s.contains("plan mode"));
        println!(
            "tools, {} mode: {} tools [{}]; plan-mode instruction: {}",
            if plan_mode.is_some() {
                "plan"
            } else {
                "normal"
            },
            names.len(),
            names.join(", "),
            if instructed { "yes" } else { "no" },
        );
    }
    Ok(())
}

/// Time from a parent's `spawn_agent` step commit to its child's first
/// model request, `spawns` times (one parent after another).
async fn subagents(spawns: usize) -> anyhow::Result<()> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    let db = TestDatabase::new(&MIGRATOR).await?;
    let pubsub = PgPubsub::connect(db.pool().clone()).await?;
    let store = Store::new(db.pool().clone(), Arc::new(pubsub.clone()));
    let llm = FakeLlm::start().await?;
    let owner = Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'bench', 'member')")
        .bind(owner)
        .execute(db.pool())
        .await?;
    let provider = Uuid::new_v4();
    sqlx::query("INSERT INTO chat_providers (id, provider, display_name, base_url, api_key) VALUES ($1, 'openai-compat', 'fake', $2, 'k')")
        .bind(provider)
        .bind(llm.base_url())
        .execute(db.pool())
        .await?;
    sqlx::query("INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default) VALUES ($1, $2, 'fake-model', 8192, true)")
        .bind(Uuid::new_v4())
        .bind(provider)
        .execute(db.pool())
        .await?;
    // The first request of each child (keyed by its prompt), at arrival.
    let arrivals: Arc<Mutex<HashMap<String, chrono::DateTime<chrono::Utc>>>> = Arc::default();
    let seen = arrivals.clone();
    llm.set_default_fn(move |request| {
        let prompt = request.last_user_text().unwrap_or_default();
        if prompt.starts_with("CHILD:") {
            seen.lock()
                .unwrap()
                .entry(prompt)
                .or_insert_with(chrono::Utc::now);
            return Script::text("child answer");
        }
        if request.trailing_tool_results().is_empty() {
            let args = json!({"prompt": format!("CHILD: {prompt}")}).to_string();
            Script::new().tool_call("call_spawn", "spawn_agent", &args, 1)
        } else {
            Script::text("parent done")
        }
    });
    let _worker = Worker::start(WorkerDeps {
        store: store.clone(),
        pubsub: Arc::new(pubsub) as Arc<dyn Pubsub>,
        parts: PartBuffer::new(CancellationToken::new()),
        providers: Arc::new(DefaultProviderFactory),
        config: WorkerConfig {
            generate_titles: false,
            ..WorkerConfig::default()
        },
    });
    let mut ms = Vec::with_capacity(spawns);
    for i in 0..spawns {
        let text = format!("run {i}");
        let parent = store
            .create_chat(CreateChatInput {
                owner_id: owner,
                initial_messages: vec![
                    NewMessage::user(vec![MessagePart::text(text.clone())]).created_by(owner),
                ],
                subagents: true,
                ..CreateChatInput::default()
            })
            .await?
            .chat;
        let prompt = format!("CHILD: {text}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let arrived = loop {
            if let Some(at) = arrivals.lock().unwrap().get(&prompt).copied() {
                break at;
            }
            anyhow::ensure!(Instant::now() < deadline, "the child made no model call");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let child: chrono::DateTime<chrono::Utc> =
            sqlx::query_scalar("SELECT created_at FROM chats WHERE parent_chat_id = $1")
                .bind(parent.id)
                .fetch_one(db.pool())
                .await?;
        ms.push((arrived - child).num_microseconds().unwrap_or(0) as f64 / 1000.0);
    }
    let max = ms.iter().copied().fold(0.0, f64::max);
    println!(
        "sub-agents: spawn_agent step commit → child's first model call: median {:.1} ms, max {:.1} ms ({} spawns)",
        median(ms),
        max,
        spawns
    );
    Ok(())
}
