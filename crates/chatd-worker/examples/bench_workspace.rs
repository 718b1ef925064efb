//! Benchmark of workspaces (issue 37, "Measure"): what the sandbox, a
//! workspace step and a takeover cost, each against a baseline measured in
//! the same run. It prints figures; nothing is asserted on a time.
//!
//! 1. **`shell`**: `true` through [`chatd_tools::workspace::Sandbox::shell`]
//!    (bubblewrap, prlimit, a cgroup per run when one is writable) against
//!    `sh -c true` run directly with `tokio::process` (stdout and stderr
//!    captured, as the sandbox does), interleaved, `--shell-runs` each:
//!    median and p95 in ms, and the ratio of the medians.
//!    Then (1b) what watching the directory while a command runs costs
//!    ([`chatd_tools::workspace::Sandbox::shell_bounded`]): a CPU-bound
//!    loop of about 1 s in 10,000 entries, bounded against not,
//!    interleaved, `--shell-runs`/5 each.
//! 2. **A step that changes 1 file of a 10 MiB workspace**, through a real
//!    worker and the fake LLM, on a fresh database. Templates: a chat whose
//!    committed workspace is `--files` files of `--file-kib` KiB of random
//!    bytes (100 × 100 KiB, written by one `shell` call), and one with an
//!    empty workspace (a `shell` call of `true`). Every round forks each
//!    template once per kind (forks copy the workspace), waits 500 ms, then
//!    sends one message to each fork in turn (the order rotates by round),
//!    waiting after each turn until the worker has let the chat go (1 s
//!    idle) so its abandon does not land in the next turn. Kinds:
//!    - `10MiB` and `empty`: `read_file` of a missing path (step 1: the
//!      cold checkout of the committed files into this replica's empty
//!      directory), then `write_file` of a 100 KiB file over `f000` (step
//!      2: the checkout of the already checked-out directory, the write,
//!      the diff and the `CommitStep` bundle with
//!      `ChatTx::write_workspace`), then a text. The fake model answers at
//!      once, so step 2's scans find files written less than 2 s before,
//!      which the stat cache hashes again (its racy window).
//!    - `10MiB-slow` and `empty-slow`: the same with one more `read_file`
//!      step between, and the model answering steps 2 and 3 after 2.1 s, as
//!      a real model takes seconds: the write step (step 3) finds the
//!      directory's hashes cached. The 2.1 s are taken out of the figures.
//!    - `empty+shell`: `empty` with `shell` `true` instead of `read_file` in
//!      step 1 (the sandbox through the worker's path).
//!
//!    A step's time is from the fake LLM receiving the model call that
//!    ends it to receiving the next one (which carries its result): the
//!    model's answer, the calls, the commit and the next request. Then,
//!    outside the worker, the parts: the cold checkout (the manifest and the
//!    contents read from the database, `LocalWorkspace::apply` into an
//!    empty directory), a scan right after it, a scan with the stat cache
//!    (2.1 s later), and one write plus the diff.
//! 3. **Takeover of a chat with a 10 MiB workspace** against one with an
//!    empty workspace: worker A owns the chat, waiting on a model call that
//!    hangs; worker B runs (its sandbox already used on a warm-up chat, which
//!    A cannot take: A has `max_runners` 1); A crashes ([`Worker::crash`]).
//!    Measured from the crash: B owns the chat (polled every ms), B's model
//!    call arrives at the fake LLM, the `shell` call `date +%s.%N` runs on B
//!    (its output), and B's next model call (the step committed). The lease
//!    is shortened for the benchmark: heartbeats every 200 ms, stale after
//!    1,500 ms, acquisition every 200 ms (chatd's defaults: 9 s, 30 s,
//!    30 s; the wait for the lease scales with them, the rest does not).
//!
//! ```text
//! cargo run -p chatd-worker --example bench_workspace \
//!     [-- --shell-runs 50 --commit-rounds 10 --takeover-rounds 5 --files 100 --file-kib 100]
//! ```
//! (`--release` works too; the figures in docs/benchmarks.md are from the
//! debug build.) A count of 0 skips that part.
//! Needs bubblewrap (`bwrap`). Uses `CHATD_TEST_DATABASE_URL` (default the
//! local server); creates and drops its own database.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chatd_core::{BusyBehavior, ChatStatus, MessagePart};
use chatd_pubsub::{PgPubsub, Pubsub};
use chatd_store::workspaces;
use chatd_store::{
    CreateChatInput, ForkInput, ForkOutcome, NewMessage, SendMessageInput, Store, StoreConfig,
};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, RecordedRequest, Script};
use chatd_tools::workspace::{Entry, EntryKind, LocalWorkspace, Manifest, Sandbox, SandboxConfig};
use chatd_worker::{
    DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps, WorkspaceApproval,
    WorkspaceConfig,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The shortened lease of every worker here.
const HEARTBEAT: Duration = Duration::from_millis(200);
const LEASE_STALE: Duration = Duration::from_millis(1500);
const ACQUISITION: Duration = Duration::from_millis(200);
const QUOTA: i64 = 1 << 40;
/// How long the model of the `-slow` kinds takes to answer after step 1.
const MODEL_TIME: Duration = Duration::from_millis(2100);

struct Args {
    shell_runs: usize,
    commit_rounds: usize,
    takeover_rounds: usize,
    files: usize,
    file_kib: usize,
}

/// Arrival times (seconds since the epoch) of the model calls, by the
/// text of the last user message.
type Arrivals = Arc<Mutex<HashMap<String, Vec<f64>>>>;

struct Bench {
    store: Store,
    pubsub: PgPubsub,
    pool: sqlx::PgPool,
    owner: Uuid,
    arrivals: Arrivals,
    dir: tempfile::TempDir,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args {
        shell_runs: 50,
        commit_rounds: 10,
        takeover_rounds: 5,
        files: 100,
        file_kib: 100,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let next = argv.next().unwrap_or_default();
        match flag.as_str() {
            "--shell-runs" => args.shell_runs = next.parse()?,
            "--commit-rounds" => args.commit_rounds = next.parse()?,
            "--takeover-rounds" => args.takeover_rounds = next.parse()?,
            "--files" => args.files = next.parse()?,
            "--file-kib" => args.file_kib = next.parse()?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    let dir = tempfile::tempdir()?;

    // 1. shell: the sandbox against sh -c directly.
    if args.shell_runs > 0 {
        bench_shell(dir.path(), args.shell_runs).await?;
    }

    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let pool = chatd_store::pool_options(20).connect(db.url()).await?;
    let pubsub = PgPubsub::connect(pool.clone()).await?;
    let store = Store::with_config(
        pool.clone(),
        Arc::new(pubsub.clone()),
        StoreConfig {
            heartbeat_stale_after: LEASE_STALE,
            ..StoreConfig::default()
        },
    );
    let llm = FakeLlm::start().await?;
    let arrivals: Arrivals = Arc::default();
    let workspace_bytes = args.files * args.file_kib * 1024;
    {
        let arrivals = arrivals.clone();
        let (files, file_kib) = (args.files, args.file_kib);
        llm.set_default_fn(move |request| respond(request, &arrivals, files, file_kib));
    }
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
    sqlx::query(
        "INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default)
         VALUES ($1, $2, 'fake', 1000000, true)",
    )
    .bind(Uuid::new_v4())
    .bind(provider)
    .execute(&pool)
    .await?;
    let bench = Bench {
        store,
        pubsub,
        pool,
        owner,
        arrivals,
        dir,
    };

    // Templates, seeded through a worker.
    let worker = bench.worker(usize::MAX);
    let full = bench.create_workspace_chat("seed full").await?;
    let empty = bench.create_workspace_chat("seed empty").await?;
    for chat in [full, empty] {
        bench
            .wait_status(chat, ChatStatus::Waiting, Duration::from_secs(60))
            .await?;
    }
    let summary = chatd_testkit::store::chat_row(&bench.pool, full).await;
    anyhow::ensure!(
        summary.workspace_bytes == Some(i64::try_from(workspace_bytes)?),
        "the full template holds {:?} bytes, not {workspace_bytes}",
        summary.workspace_bytes
    );
    println!(
        "== templates: {} files of {} KiB of random bytes ({:.1} MiB committed), and an empty workspace",
        args.files,
        args.file_kib,
        workspace_bytes as f64 / f64::from(1 << 20)
    );

    // 2. A step that changes one file.
    if args.commit_rounds > 0 {
        bench_commit(&bench, full, empty, args.commit_rounds).await?;
        bench_checkout_parts(&bench, full, args.commit_rounds, args.file_kib).await?;
    }
    worker.shutdown().await;

    // 3. Takeover.
    if args.takeover_rounds > 0 {
        bench_takeover(&bench, full, empty, args.takeover_rounds).await?;
    }
    Ok(())
}

/// The fake LLM's answers, by the last user message's first word and the
/// number of model calls of that message so far.
fn respond(
    request: &RecordedRequest,
    arrivals: &Arrivals,
    files: usize,
    file_kib: usize,
) -> Script {
    let key = request.last_user_text().unwrap_or_default();
    let n = {
        let mut arrivals = arrivals.lock().unwrap();
        let times = arrivals.entry(key.clone()).or_default();
        times.push(now_s());
        times.len() - 1
    };
    let shell = |command: &str| json!({"command": command}).to_string();
    let kind = key.split_whitespace().next().unwrap_or_default();
    let variant = key.split_whitespace().nth(1).unwrap_or_default();
    // `-slow` kinds: the model takes MODEL_TIME to answer after step 1, as
    // a real one does, so the files checked out are older than the stat
    // cache's 2 s racy window when the write step scans them.
    let slow = variant.ends_with("-slow");
    let delayed = || {
        if slow {
            Script::new().delay(MODEL_TIME)
        } else {
            Script::new()
        }
    };
    let write = || {
        let content = random_text(file_kib * 1024, key.len() as u64 ^ now_s().to_bits());
        let args = json!({"path": "f000", "content": content}).to_string();
        // A model streams long arguments in many deltas.
        delayed().tool_call("c2", "write_file", &args, 25)
    };
    let read_missing = |script: Script, id: &str| {
        script.tool_call(id, "read_file", r#"{"path": "missing.txt"}"#, 1)
    };
    match (kind, n) {
        ("seed", 0) if variant == "full" => Script::new().tool_call(
            "seed",
            "shell",
            &shell(&format!(
                "i=0; while [ $i -lt {files} ]; do head -c {} /dev/urandom > $(printf f%03d $i); i=$((i+1)); done",
                file_kib * 1024
            )),
            1,
        ),
        ("seed", 0) | ("warm", 0) => Script::new().tool_call("seed", "shell", &shell("true"), 1),
        ("commit", 0) if variant == "empty+shell" => {
            Script::new().tool_call("c1", "shell", &shell("true"), 1)
        }
        ("commit", 0) => read_missing(Script::new(), "c1"),
        ("commit", 1) if slow => read_missing(delayed(), "c3"),
        ("commit", 1) => write(),
        ("commit", 2) if slow => write(),
        ("takeover", 0) => Script::new().hang(),
        ("takeover", 1) => Script::new().tool_call("t1", "shell", &shell("date +%s.%N"), 1),
        _ => Script::text("done"),
    }
}

impl Bench {
    /// A worker of this benchmark: workspace under the benchmark's
    /// directory, no approval, the short lease; `max_runners` chats at most.
    fn worker(&self, max_runners: usize) -> Worker {
        let mut config = WorkerConfig {
            acquisition_interval: ACQUISITION,
            heartbeat_interval: HEARTBEAT,
            lease_stale_after: LEASE_STALE,
            generate_titles: false,
            workspace: WorkspaceConfig {
                dir: self.dir.path().join("workspaces"),
                approval: WorkspaceApproval::Never,
                ..WorkspaceConfig::default()
            },
            ..WorkerConfig::default()
        };
        config.limits.max_storage_bytes = QUOTA;
        if max_runners != usize::MAX {
            config.limits.max_runners = max_runners;
        }
        Worker::start(WorkerDeps {
            store: self.store.clone(),
            pubsub: Arc::new(self.pubsub.clone()) as Arc<dyn Pubsub>,
            parts: PartBuffer::new(CancellationToken::new()),
            providers: Arc::new(DefaultProviderFactory),
            config,
        })
    }

    /// A running chat with a workspace whose first message is `text`.
    async fn create_workspace_chat(&self, text: &str) -> anyhow::Result<Uuid> {
        Ok(self
            .store
            .create_chat(CreateChatInput {
                owner_id: self.owner,
                initial_messages: vec![
                    NewMessage::user(vec![MessagePart::text(text)]).created_by(self.owner),
                ],
                workspace: true,
                ..CreateChatInput::default()
            })
            .await?
            .chat
            .id)
    }

    /// A fork of `source` (its workspace copied), waiting.
    async fn fork(&self, source: Uuid) -> anyhow::Result<Uuid> {
        match self
            .store
            .fork_chat(ForkInput {
                source_chat_id: source,
                owner_id: self.owner,
                message_id: None,
                default_quota: QUOTA,
            })
            .await?
        {
            ForkOutcome::Forked(chat) => Ok(chat.id),
            ForkOutcome::OverQuota(..) => anyhow::bail!("fork over quota"),
        }
    }

    /// Sends `text` to waiting chat `chat_id` (the turn starts).
    async fn send(&self, chat_id: Uuid, text: &str) -> anyhow::Result<()> {
        let message = NewMessage::user(vec![MessagePart::text(text)]).created_by(self.owner);
        self.store
            .machine(chat_id)
            .update(|tx| {
                let message = message.clone();
                Box::pin(async move {
                    tx.send_message(SendMessageInput {
                        message,
                        busy_behavior: BusyBehavior::Queue,
                        max_queue_size: None,
                    })
                    .await
                    .map(|_| ())
                })
            })
            .await?;
        Ok(())
    }

    /// Polls (every ms) until `chat_id` is in `status`; errors after
    /// `timeout` or when the turn ended otherwise.
    async fn wait_status(
        &self,
        chat_id: Uuid,
        status: ChatStatus,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        self.wait_row(chat_id, timeout, |c| {
            anyhow::ensure!(
                c.status != ChatStatus::Error,
                "chat {chat_id} failed: {:?}",
                c.last_error
            );
            Ok(c.status == status)
        })
        .await
    }

    async fn wait_row(
        &self,
        chat_id: Uuid,
        timeout: Duration,
        mut done: impl FnMut(&chatd_store::Chat) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let chat = chatd_testkit::store::chat_row(&self.pool, chat_id).await;
            if done(&chat)? {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "chat {chat_id} timed out: {:?} {:?}",
                chat.status,
                chat.last_error
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The arrival times of the model calls of message `key`, once there
    /// are `n` of them.
    async fn arrivals(&self, key: &str, n: usize) -> anyhow::Result<Vec<f64>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(times) = self.arrivals.lock().unwrap().get(key)
                && times.len() >= n
            {
                return Ok(times.clone());
            }
            anyhow::ensure!(Instant::now() < deadline, "no {n} model calls for {key:?}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Part 1.
async fn bench_shell(dir: &Path, runs: usize) -> anyhow::Result<()> {
    let sandbox = Sandbox::new(SandboxConfig::default()).await?;
    let work = dir.join("shell");
    std::fs::create_dir_all(&work)?;
    let (mut sandboxed, mut direct) = (Vec::new(), Vec::new());
    for i in 0..runs + 3 {
        let started = Instant::now();
        let outcome = sandbox.shell(&work, "true", Duration::from_secs(30)).await;
        let s = ms(started.elapsed());
        anyhow::ensure!(outcome.exit_code == Some(0), "sandbox: {outcome:?}");
        let started = Instant::now();
        let output = tokio::process::Command::new("sh")
            .args(["-c", "true"])
            .current_dir(&work)
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        let d = ms(started.elapsed());
        anyhow::ensure!(output.status.success());
        // The first runs warm the page cache and the cgroup tree.
        if i >= 3 {
            sandboxed.push(s);
            direct.push(d);
        }
    }
    println!(
        "== 1. shell `true`: {runs} runs each, interleaved (cgroups: {})",
        if sandbox.has_cgroups() {
            "yes"
        } else {
            "no, rlimits only"
        }
    );
    print_row("sandbox (Sandbox::shell)", &sandboxed);
    print_row("direct (sh -c, tokio)", &direct);
    let (s, d) = (median(&sandboxed), median(&direct));
    println!(
        "shell overhead: {:.2} ms per call, ratio {:.1} (medians)",
        s - d,
        s / d
    );
    bench_bound(&sandbox, dir, runs.div_ceil(5)).await
}

/// Part 1b: what watching the directory costs a command that runs (the
/// worker's `shell_bounded`): a CPU-bound loop of about 1 s in a
/// directory of 10,000 files, with a bound it never reaches against no
/// bound, interleaved; the directory is measured every 50 ms or more.
async fn bench_bound(sandbox: &Sandbox, dir: &Path, runs: usize) -> anyhow::Result<()> {
    let work = dir.join("bound");
    std::fs::create_dir_all(&work)?;
    for i in 0..100 {
        let sub = work.join(format!("d{i:03}"));
        std::fs::create_dir_all(&sub)?;
        for j in 0..99 {
            std::fs::write(sub.join(format!("f{j:02}")), b"x")?;
        }
    }
    let command = "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done";
    let bound = chatd_tools::workspace::DirBound {
        bytes: 1 << 30,
        entries: 100_000,
    };
    let (mut watched, mut unwatched) = (Vec::new(), Vec::new());
    for i in 0..runs + 1 {
        let started = Instant::now();
        let outcome = sandbox
            .shell_bounded(&work, command, Duration::from_secs(60), Some(bound))
            .await;
        let w = ms(started.elapsed());
        anyhow::ensure!(outcome.exit_code == Some(0), "bounded: {outcome:?}");
        let started = Instant::now();
        let outcome = sandbox.shell(&work, command, Duration::from_secs(60)).await;
        let u = ms(started.elapsed());
        anyhow::ensure!(outcome.exit_code == Some(0), "unbounded: {outcome:?}");
        if i >= 1 {
            watched.push(w);
            unwatched.push(u);
        }
    }
    println!("== 1b. a ~1 s command in 10,000 entries: {runs} runs each, interleaved");
    print_row("watched (shell_bounded)", &watched);
    print_row("not watched (shell)", &unwatched);
    let (w, u) = (median(&watched), median(&unwatched));
    println!(
        "watching the directory: {:.1} ms per call, ratio {:.3} (medians)",
        w - u,
        w / u
    );
    Ok(())
}

/// Part 2, through the worker.
async fn bench_commit(bench: &Bench, full: Uuid, empty: Uuid, rounds: usize) -> anyhow::Result<()> {
    let kinds = [
        ("10MiB", full),
        ("empty", empty),
        ("empty+shell", empty),
        ("10MiB-slow", full),
        ("empty-slow", empty),
    ];
    // kind → (turn, step 1, write step) in ms; the model's scripted time
    // is taken out of the `-slow` kinds' figures.
    let mut figures: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![Default::default(); kinds.len()];
    for round in 0..=rounds {
        // This round's forks first (10 MiB copied in the database), then a
        // pause, so no turn runs beside a copy; the kinds' order rotates.
        let mut chats = Vec::new();
        for (kind, template) in &kinds {
            chats.push((*kind, bench.fork(*template).await?));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        for i in 0..kinds.len() {
            let k = (i + round) % kinds.len();
            let (kind, chat_id) = chats[k];
            let slow = kind.ends_with("-slow");
            let key = format!("commit {kind} {round}");
            let started = Instant::now();
            bench.send(chat_id, &key).await?;
            bench
                .wait_status(chat_id, ChatStatus::Waiting, Duration::from_secs(60))
                .await?;
            let mut turn = ms(started.elapsed());
            let times = bench.arrivals(&key, if slow { 4 } else { 3 }).await?;
            // Let the runner go (1 s idle) and its directory be removed
            // before the next turn starts.
            bench
                .wait_row(chat_id, Duration::from_secs(10), |c| {
                    Ok(c.worker_id.is_none())
                })
                .await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let results: Vec<_> = tool_results(bench, chat_id)
                .await
                .into_iter()
                .filter(|(id, _, _)| id != "seed")
                .collect();
            let write = results.iter().find(|(id, _, _)| id == "c2");
            anyhow::ensure!(
                results.len() == if slow { 3 } else { 2 } && write.is_some_and(|w| !w.2),
                "{kind}: unexpected results {results:?}"
            );
            let model = ms(MODEL_TIME);
            let write_step = if slow {
                turn -= 2.0 * model;
                (times[3] - times[2]) * 1000.0 - model
            } else {
                (times[2] - times[1]) * 1000.0
            };
            // Round 0 warms up.
            if round > 0 {
                figures[k].0.push(turn);
                figures[k].1.push((times[1] - times[0]) * 1000.0);
                figures[k].2.push(write_step);
            }
        }
    }
    println!(
        "== 2. a turn whose write step writes one 100 KiB file ({rounds} rounds, kinds interleaved; ms, p50 / p95)"
    );
    println!(
        "{:<14} {:>18} {:>18} {:>18}",
        "workspace", "turn", "step 1 (checkout)", "write step"
    );
    for ((kind, _), (turn, s1, s2)) in kinds.iter().zip(&figures) {
        println!(
            "{kind:<14} {:>18} {:>18} {:>18}",
            pair(turn),
            pair(s1),
            pair(s2)
        );
    }
    println!(
        "(-slow: the model answers steps 2 and 3 after {} ms, taken out of their figures; their write step is step 3)",
        MODEL_TIME.as_millis()
    );
    let ratio = |what: &str, a: &[f64], b: &[f64]| {
        println!(
            "{what}: {:.2} (+{:.1} ms)",
            median(a) / median(b),
            median(a) - median(b)
        );
    };
    let [full, empty, shell, full_slow, empty_slow] = &figures[..] else {
        unreachable!()
    };
    ratio(
        "commit step ratio, files older than 2 s (10MiB-slow / empty-slow, write step medians)",
        &full_slow.2,
        &empty_slow.2,
    );
    ratio(
        "commit step ratio, right after the checkout (10MiB / empty, write step medians)",
        &full.2,
        &empty.2,
    );
    ratio(
        "cold checkout in a turn (10MiB / empty, step 1 medians)",
        &full.1,
        &empty.1,
    );
    ratio("turn ratio (10MiB / empty, medians)", &full.0, &empty.0);
    ratio(
        "shell through the worker (empty+shell / empty, step 1 medians)",
        &shell.1,
        &empty.1,
    );
    Ok(())
}

/// Part 2, the parts outside the worker: the cold checkout of `template`'s
/// committed files into an empty directory, the warm scan, one write and
/// the diff.
async fn bench_checkout_parts(
    bench: &Bench,
    template: Uuid,
    rounds: usize,
    file_kib: usize,
) -> anyhow::Result<()> {
    let (mut read_manifest, mut read_contents, mut apply) = (Vec::new(), Vec::new(), Vec::new());
    let (mut racy_scan, mut warm_scan, mut write_diff) = (Vec::new(), Vec::new(), Vec::new());
    let (mut recheckout, mut after_recheckout) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let root = bench.dir.path().join(format!("checkout-{round}"));
        let started = Instant::now();
        let rows = workspaces::manifest(&bench.pool, template).await?;
        let t_manifest = ms(started.elapsed());
        let mut manifest = Manifest::new();
        for row in &rows {
            manifest.insert(
                row.path.clone(),
                Entry {
                    kind: match row.kind {
                        workspaces::EntryKind::File => EntryKind::File,
                        workspaces::EntryKind::Dir => EntryKind::Dir,
                        workspaces::EntryKind::Symlink => EntryKind::Symlink,
                    },
                    sha256: row.sha256.as_slice().try_into()?,
                    bytes: u64::try_from(row.bytes)?,
                    executable: row.executable,
                },
            );
        }
        let paths: Vec<String> = rows.iter().map(|r| r.path.clone()).collect();
        let started = Instant::now();
        let contents: HashMap<String, Vec<u8>> =
            workspaces::contents(&bench.pool, template, &paths)
                .await?
                .into_iter()
                .map(|(path, _, content)| (path, content))
                .collect();
        let t_contents = ms(started.elapsed());
        let content = random_text(file_kib * 1024, round as u64 + 7).into_bytes();
        let (t_apply, t_racy, t_scan, t_write_diff, t_recheckout, t_after) =
            tokio::task::spawn_blocking({
                let root = root.clone();
                move || -> anyhow::Result<(f64, f64, f64, f64, f64, f64)> {
                    std::fs::create_dir_all(&root)?;
                    let started = Instant::now();
                    let mut local = LocalWorkspace::open(root.clone())?;
                    local.apply(&manifest, &contents)?;
                    let t_apply = ms(started.elapsed());
                    // Files changed within 2 s of a scan are hashed again.
                    let started = Instant::now();
                    let scanned = local.scan()?;
                    let t_racy = ms(started.elapsed());
                    anyhow::ensure!(
                        scanned.len() == manifest.len(),
                        "the checkout differs from the manifest"
                    );
                    std::thread::sleep(Duration::from_millis(2100));
                    local.scan()?;
                    let started = Instant::now();
                    local.scan()?;
                    let t_scan = ms(started.elapsed());
                    let started = Instant::now();
                    chatd_tools::workspace::write_file(&root, "f000", &content, 1 << 30)
                        .map_err(|e| anyhow::anyhow!("{}", e.0))?;
                    let changes = local.diff(&manifest)?;
                    let t = ms(started.elapsed());
                    anyhow::ensure!(changes.len() == 1, "{} changes", changes.len());
                    // What a step's checkout does to the checked-out directory:
                    // apply the committed manifest (here: f000 back), then the
                    // scans that follow it.
                    let started = Instant::now();
                    local.apply(&manifest, &contents)?;
                    let t_recheckout = ms(started.elapsed());
                    let started = Instant::now();
                    local.scan()?;
                    let t_after = ms(started.elapsed());
                    Ok((t_apply, t_racy, t_scan, t, t_recheckout, t_after))
                }
            })
            .await??;
        std::fs::remove_dir_all(&root)?;
        if round > 0 {
            read_manifest.push(t_manifest);
            read_contents.push(t_contents);
            apply.push(t_apply);
            racy_scan.push(t_racy);
            warm_scan.push(t_scan);
            write_diff.push(t_write_diff);
            recheckout.push(t_recheckout);
            after_recheckout.push(t_after);
        }
    }
    let cold: Vec<f64> = (0..read_manifest.len())
        .map(|i| read_manifest[i] + read_contents[i] + apply[i])
        .collect();
    println!("== 2b. the parts, outside the worker ({rounds} rounds; ms)");
    print_row("cold checkout (all)", &cold);
    print_row("  read the manifest", &read_manifest);
    print_row("  read the contents", &read_contents);
    print_row("  write into empty dir", &apply);
    print_row("scan, files < 2 s old", &racy_scan);
    print_row("scan, stat cache", &warm_scan);
    print_row("write 1 file + diff", &write_diff);
    print_row("checkout of that dir", &recheckout);
    print_row("  scan after it", &after_recheckout);
    println!(
        "(write into empty dir: LocalWorkspace::apply, which checks every content's SHA-256 and scans before and after)"
    );
    Ok(())
}

/// Part 3.
async fn bench_takeover(
    bench: &Bench,
    full: Uuid,
    empty: Uuid,
    rounds: usize,
) -> anyhow::Result<()> {
    let kinds = [("10MiB", full), ("empty", empty)];
    // kind → per round: (acquired, model call, shell ran, step committed),
    // seconds after the crash.
    let mut figures: Vec<Vec<[f64; 4]>> = vec![Vec::new(); kinds.len()];
    for round in 0..=rounds {
        for (k, (kind, template)) in kinds.iter().enumerate() {
            let chat_id = bench.fork(*template).await?;
            let a = bench.worker(1);
            let key = format!("takeover {kind} {round}");
            bench.send(chat_id, &key).await?;
            let a_id = a.worker_id();
            bench
                .wait_row(chat_id, Duration::from_secs(10), |c| {
                    Ok(c.worker_id == Some(a_id))
                })
                .await?;
            bench.arrivals(&key, 1).await?;
            // B, its sandbox used once: A has no slot for the warm-up chat.
            let b = bench.worker(usize::MAX);
            let b_id = b.worker_id();
            let warm = bench
                .create_workspace_chat(&format!("warm {kind} {round}"))
                .await?;
            bench
                .wait_status(warm, ChatStatus::Waiting, Duration::from_secs(30))
                .await?;
            let warmed_by = chatd_testkit::store::chat_row(&bench.pool, warm)
                .await
                .worker_id;
            anyhow::ensure!(
                warmed_by == Some(b_id),
                "the warm-up chat ran on {warmed_by:?}"
            );
            // Heartbeats are current: the crash comes mid-lease.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let crashed = now_s();
            a.crash();
            let mut acquired = 0.0;
            bench
                .wait_row(chat_id, Duration::from_secs(30), |c| {
                    if c.worker_id == Some(b_id) {
                        acquired = now_s();
                        return Ok(true);
                    }
                    Ok(false)
                })
                .await?;
            let times = bench.arrivals(&key, 3).await?;
            bench
                .wait_status(chat_id, ChatStatus::Waiting, Duration::from_secs(30))
                .await?;
            let results = tool_results(bench, chat_id).await;
            let ran: f64 = results
                .iter()
                .find(|(id, _, _)| id == "t1")
                .and_then(|(_, r, _)| r["stdout"].as_str().and_then(|s| s.trim().parse().ok()))
                .ok_or_else(|| anyhow::anyhow!("no date from the shell call: {results:?}"))?;
            b.shutdown().await;
            if round > 0 {
                figures[k].push([
                    acquired - crashed,
                    times[1] - crashed,
                    ran - crashed,
                    times[2] - crashed,
                ]);
            }
        }
    }
    println!(
        "== 3. takeover after a crash ({rounds} rounds each, interleaved; ms after the crash; lease: heartbeat {} ms, stale after {} ms, acquisition every {} ms)",
        HEARTBEAT.as_millis(),
        LEASE_STALE.as_millis(),
        ACQUISITION.as_millis()
    );
    println!(
        "{:<8} {:>16} {:>16} {:>16} {:>16} | {:>16} {:>16}",
        "",
        "owned by B",
        "B's model call",
        "shell runs",
        "step committed",
        "checkout+call",
        "call→committed"
    );
    let col = |rows: &[[f64; 4]], f: &dyn Fn(&[f64; 4]) -> f64| -> Vec<f64> {
        rows.iter().map(|r| f(r) * 1000.0).collect()
    };
    let mut medians = Vec::new();
    for ((kind, _), rows) in kinds.iter().zip(&figures) {
        let owned = col(rows, &|r| r[0]);
        let call = col(rows, &|r| r[1]);
        let ran = col(rows, &|r| r[2]);
        let committed = col(rows, &|r| r[3]);
        let checkout = col(rows, &|r| r[2] - r[1]);
        let after = col(rows, &|r| r[3] - r[2]);
        println!(
            "{kind:<8} {:>16} {:>16} {:>16} {:>16} | {:>16} {:>16}",
            pair(&owned),
            pair(&call),
            pair(&ran),
            pair(&committed),
            pair(&checkout),
            pair(&after)
        );
        medians.push((median(&ran), median(&checkout)));
    }
    println!(
        "takeover ratio (10MiB / empty, crash → shell runs, medians): {:.2} (+{:.1} ms; model call → shell runs +{:.1} ms)",
        medians[0].0 / medians[1].0,
        medians[0].0 - medians[1].0,
        medians[0].1 - medians[1].1
    );
    println!(
        "(p50/p95 over the rounds; \"checkout+call\": B's model call arrives → the shell command runs: the model's answer, the checkout and the sandbox's start)"
    );
    Ok(())
}

/// `(tool_call_id, result, is_error)` of the chat's tool results.
async fn tool_results(bench: &Bench, chat_id: Uuid) -> Vec<(String, serde_json::Value, bool)> {
    chatd_testkit::store::message_rows(&bench.pool, chat_id)
        .await
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter_map(|p| match p {
            MessagePart::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => Some((tool_call_id.clone(), result.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// `len` bytes of pseudo-random letters and digits (xorshift from `seed`).
fn random_text(len: usize, seed: u64) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(ALPHABET[(x % ALPHABET.len() as u64) as usize])
        })
        .collect()
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

fn median(v: &[f64]) -> f64 {
    let v = sorted(v);
    if v.is_empty() {
        return f64::NAN;
    }
    if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

fn p95(v: &[f64]) -> f64 {
    let v = sorted(v);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 * 0.95).ceil() as usize).clamp(1, v.len()) - 1]
}

fn pair(v: &[f64]) -> String {
    format!("{:.1} / {:.1}", median(v), p95(v))
}

fn print_row(what: &str, v: &[f64]) {
    println!(
        "{what:<26} median {:>8.2} ms  p95 {:>8.2} ms",
        median(v),
        p95(v)
    );
}
