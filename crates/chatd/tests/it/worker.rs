//! The worker inside real `chatd serve` processes, with the fake LLM over
//! real HTTP: a turn end to end, a crash (SIGKILL) handed over after the
//! lease goes stale, and a SIGTERM handed over at once (spec "Chat worker";
//! API.md "Running a replica": "in-flight chats are abandoned and handed to
//! other replicas at once").

use std::time::{Duration, Instant};

use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{ADMIN_TOKEN, Chatd, http};

/// A config file pointing the default model at `llm`.
pub(crate) fn config_file(dir: &tempfile::TempDir, llm: &FakeLlm) -> anyhow::Result<String> {
    let path = dir.path().join("chatd.toml");
    std::fs::write(
        &path,
        format!(
            "[[providers]]\nname = \"fake\"\nprovider = \"openai-compat\"\nbase_url = \"{}\"\n\n\
             [[model_configs]]\nname = \"fake-model\"\nprovider = \"fake\"\nmodel = \"fake-model\"\ncontext_limit = 8192\nis_default = true\n",
            llm.base_url()
        ),
    )?;
    Ok(path.display().to_string())
}

/// What a replica test starts from: a fresh database, the fake LLM, and
/// the temporary directory holding the `--config` file (its path last) that
/// points the default model at that LLM.
pub(crate) async fn fixture() -> anyhow::Result<(TestDatabase, FakeLlm, tempfile::TempDir, String)>
{
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let llm = FakeLlm::start().await?;
    let dir = tempfile::tempdir()?;
    let config = config_file(&dir, &llm)?;
    Ok((db, llm, dir, config))
}

/// Fast worker settings for a replica on `db` configured by `config`.
pub(crate) fn replica_args<'a>(
    db: &'a TestDatabase,
    config: &'a str,
    acquisition: &'a str,
) -> Vec<&'a str> {
    vec![
        "--postgres-url",
        db.url(),
        "--config",
        config,
        "--acquisition-interval",
        acquisition,
        "--heartbeat-interval",
        "300ms",
        "--lease-stale-after",
        "2s",
        "--retry-initial-delay",
        "50ms",
    ]
}

pub(crate) async fn create_chat(server: &Chatd, text: &str) -> anyhow::Result<Uuid> {
    let response = http()
        .post(format!("{}/api/v2/chats", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"content": [{"type": "text", "text": text}]}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == 201,
        "create answered {}",
        response.status()
    );
    let chat: Value = response.json().await?;
    Ok(chat["id"].as_str().unwrap_or_default().parse()?)
}

/// `(status, worker_id)` of a chat, read from the database.
async fn chat_row(db: &TestDatabase, id: Uuid) -> anyhow::Result<(String, Option<Uuid>)> {
    Ok(
        sqlx::query_as("SELECT status, worker_id FROM chats WHERE id = $1")
            .bind(id)
            .fetch_one(db.pool())
            .await?,
    )
}

pub(crate) async fn wait_chat(
    db: &TestDatabase,
    id: Uuid,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&str, Option<Uuid>) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let (status, worker) = chat_row(db, id).await?;
        if pred(&status, worker) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out waiting for {what}: status {status}, worker {worker:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits up to `timeout` until the chat's `worker_id` is `owner`.
pub(crate) async fn wait_owner(
    db: &TestDatabase,
    id: Uuid,
    timeout: Duration,
    what: &str,
    owner: Uuid,
) -> anyhow::Result<()> {
    wait_chat(db, id, timeout, what, |_, w| w == Some(owner)).await
}

/// Waits up to 30 s until the chat's turn is over: `waiting` and owned by
/// no worker.
pub(crate) async fn wait_turn_end(db: &TestDatabase, id: Uuid) -> anyhow::Result<()> {
    wait_chat(db, id, Duration::from_secs(30), "the turn", |s, w| {
        s == "waiting" && w.is_none()
    })
    .await
}

async fn assistant_texts(server: &Chatd, id: Uuid) -> anyhow::Result<Vec<String>> {
    let page = server
        .get_json(&format!("/api/v2/chats/{id}/messages"), ADMIN_TOKEN)
        .await?;
    Ok(page["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .map(|m| {
            m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["text"].as_str())
                .collect::<String>()
        })
        .collect())
}

pub(crate) async fn replica_id(db: &TestDatabase, server: &Chatd) -> anyhow::Result<Uuid> {
    Ok(
        sqlx::query_scalar("SELECT id FROM replicas WHERE advertise_url = $1")
            .bind(server.url())
            .fetch_one(db.pool())
            .await?,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_runs_end_to_end_in_a_real_replica() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    llm.push(
        Script::text_in_parts("Hello from the model", 4, Duration::from_millis(20)).usage(7, 4),
    );
    let mut server = Chatd::start(&replica_args(&db, &config, "1s")).await?;
    let id = create_chat(&server, "hi").await?;
    wait_turn_end(&db, id).await?;
    assert_eq!(
        assistant_texts(&server, id).await?,
        vec!["Hello from the model".to_owned()]
    );
    assert_eq!(llm.requests()[0].body["model"], json!("fake-model"));
    assert!(server.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_chat_is_finished_by_another_after_the_lease() -> anyhow::Result<()> {
    let MidTurn {
        db,
        _llm,
        _dir,
        config,
        mut a,
        id,
    } = MidTurn::start(
        "never committed",
        "finished by the survivor",
        Duration::from_millis(200),
    )
    .await?;
    let mut b = Chatd::start(&replica_args(&db, &config, "500ms")).await?;
    let b_id = replica_id(&db, &b).await?;
    a.kill().await?;
    let killed = Instant::now();
    wait_owner(&db, id, Duration::from_secs(30), "b takes over", b_id).await?;
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_millis(1000),
        "taken over after {took:?}: before the 2 s lease could go stale"
    );
    wait_turn_end(&db, id).await?;
    assert_eq!(
        assistant_texts(&b, id).await?,
        vec!["finished by the survivor".to_owned()],
        "nothing lost, nothing duplicated"
    );
    assert!(b.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_a_running_chat_to_another_replica_within_a_second() -> anyhow::Result<()> {
    let MidTurn {
        db,
        _llm,
        _dir,
        config,
        mut a,
        id,
    } = MidTurn::start("slow", "resumed on b", Duration::from_millis(300)).await?;
    // B's timer is slow: only the chat:ownership hint from A's abandon can wake it.
    let mut b = Chatd::start(&replica_args(&db, &config, "60s")).await?;
    let b_id = replica_id(&db, &b).await?;
    let started = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    wait_owner(&db, id, Duration::from_secs(10), "b owns the chat", b_id).await?;
    let handed_over = started.elapsed();
    assert!(
        handed_over < Duration::from_secs(1),
        "hand-over took {handed_over:?}"
    );
    assert!(a.wait(Duration::from_secs(30)).await?.success());
    wait_turn_end(&db, id).await?;
    assert_eq!(
        assistant_texts(&b, id).await?,
        vec!["resumed on b".to_owned()]
    );
    assert!(b.terminate().await?.success());
    Ok(())
}

/// Replica A (500 ms acquisition) owning a chat whose turn is in flight:
/// the fake's first answer streams `first` and hangs, so the turn can only
/// be finished by another replica; later answers stream `then` in three
/// parts `part_delay` apart.
struct MidTurn {
    db: TestDatabase,
    /// Bind it for the whole test, or the fake LLM stops serving.
    _llm: FakeLlm,
    /// Holds the config file; bind it for the whole test.
    _dir: tempfile::TempDir,
    config: String,
    a: Chatd,
    id: Uuid,
}

impl MidTurn {
    /// Starts the database, the fake LLM and replica A, creates the chat and
    /// returns once A owns it and its first provider request has arrived.
    async fn start(first: &str, then: &str, part_delay: Duration) -> anyhow::Result<Self> {
        let (db, llm, dir, config) = fixture().await?;
        llm.push(Script::new().then_text(first).hang());
        llm.set_default(Script::text_in_parts(then, 3, part_delay));
        let a = Chatd::start(&replica_args(&db, &config, "500ms")).await?;
        let a_id = replica_id(&db, &a).await?;
        let id = create_chat(&a, "hi").await?;
        wait_owner(&db, id, Duration::from_secs(30), "a owns the chat", a_id).await?;
        llm.wait_for_request(1, Duration::from_secs(30)).await?;
        Ok(Self {
            db,
            _llm: llm,
            _dir: dir,
            config,
            a,
            id,
        })
    }
}
