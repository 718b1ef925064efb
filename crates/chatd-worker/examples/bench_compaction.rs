//! Benchmark of automatic compaction (issue 13, Measure): the time a
//! compaction adds to a turn for a history of about 50,000 tokens, with the
//! fake LLM, and the summarization's input and output tokens.
//!
//! Each round creates two chats with the same history (`--messages` user
//! and assistant messages of `--bytes` bytes each: 100 × 2,000 bytes ≈
//! 50,000 estimated tokens) and sends one more message to each: one under a
//! model whose threshold the history passes (64k-token window, 70 %: it
//! compacts first, then answers), one under a model with the threshold off
//! and a large window (it just answers). The fake LLM answers at once and
//! reports a request's size over 4 as its prompt tokens. Printed: the
//! turn's time from the send to `waiting`, p50 over `--rounds` of each
//! kind, their difference and ratio, and the summary's tokens and passes.
//!
//! ```text
//! cargo run --release -p chatd-worker --example bench_compaction [-- --rounds 5 --messages 100 --bytes 2000]
//! ```
//! Uses `CHATD_TEST_DATABASE_URL` (default the local server); creates and
//! drops its own database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_core::{BusyBehavior, ChatRole, ChatStatus, MessagePart, Visibility};
use chatd_pubsub::{PgPubsub, Pubsub};
use chatd_store::{CreateChatInput, NewMessage, SendMessageInput, Store, StoreConfig};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script, is_compaction_request, summary_of};
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut rounds, mut messages, mut bytes) = (5usize, 100usize, 2000usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let next = args.next().unwrap_or_default();
        match flag.as_str() {
            "--rounds" => rounds = next.parse()?,
            "--messages" => messages = next.parse()?,
            "--bytes" => bytes = next.parse()?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let pool = chatd_store::pool_options(20).connect(db.url()).await?;
    let pubsub = PgPubsub::connect(pool.clone()).await?;
    let store = Store::with_config(
        pool.clone(),
        Arc::new(pubsub.clone()),
        StoreConfig::default(),
    );
    let llm = FakeLlm::start().await?;
    llm.set_default_fn(|request| {
        if is_compaction_request(request) {
            return summary_of(request);
        }
        let prompt = i64::try_from(request.body["messages"].to_string().len() / 4).unwrap_or(0);
        Script::text("ok").usage(prompt, 1)
    });
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
    let compacting = Uuid::new_v4();
    let plain = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO chat_model_configs (id, provider_id, model, context_limit, compression_threshold, is_default)
         VALUES ($1, $3, 'fake', 65536, 70, true), ($2, $3, 'fake', 1000000, 0, false)",
    )
    .bind(compacting)
    .bind(plain)
    .bind(provider)
    .execute(&pool)
    .await?;
    let worker = Worker::start(WorkerDeps {
        store: store.clone(),
        pubsub: Arc::new(pubsub.clone()) as Arc<dyn Pubsub>,
        parts: PartBuffer::new(CancellationToken::new()),
        providers: Arc::new(DefaultProviderFactory),
        config: WorkerConfig {
            generate_titles: false,
            ..WorkerConfig::default()
        },
    });

    let history: Vec<NewMessage> = (0..messages)
        .map(|i| {
            let text = format!("m{i} {}", "lorem ipsum ".repeat(bytes / 12));
            let role = if i % 2 == 0 {
                ChatRole::User
            } else {
                ChatRole::Assistant
            };
            NewMessage::new(role, vec![MessagePart::text(text)])
        })
        .collect();
    let estimate: i64 = history
        .iter()
        .map(|m| chatd_core::context::estimate_tokens(&m.content))
        .sum();
    println!(
        "== {messages} messages of {bytes} bytes: about {estimate} estimated tokens; {rounds} rounds"
    );
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let mut summary_usage = None;
    for _ in 0..rounds {
        for (model, times) in [(compacting, &mut with), (plain, &mut without)] {
            let chat_id = Uuid::new_v4();
            let mut initial = history.clone();
            initial.push(NewMessage::user(vec![MessagePart::text("and now?")]).created_by(owner));
            // Created waiting, then one send starts the measured turn.
            let last = initial.pop().unwrap();
            store
                .create_chat(CreateChatInput {
                    id: Some(chat_id),
                    owner_id: owner,
                    last_model_config_id: Some(model),
                    initial_messages: initial,
                    initial_status: Some(ChatStatus::Waiting),
                    ..Default::default()
                })
                .await?;
            let started = Instant::now();
            store
                .machine(chat_id)
                .update(|tx| {
                    let message = last.clone();
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
            loop {
                let chat = chatd_testkit::store::chat_row(&pool, chat_id).await;
                if chat.status != ChatStatus::Running && chat.worker_id.is_none() {
                    anyhow::ensure!(
                        chat.status == ChatStatus::Waiting,
                        "turn ended {:?}: {:?}",
                        chat.status,
                        chat.last_error
                    );
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            times.push(started.elapsed());
            if model == compacting {
                let rows = chatd_testkit::store::message_rows(&pool, chat_id).await;
                let result = rows
                    .iter()
                    .find(|m| m.role == ChatRole::Tool && m.visibility == Visibility::User)
                    .ok_or_else(|| anyhow::anyhow!("no compaction in chat {chat_id}"))?;
                summary_usage = Some((
                    result.input_tokens,
                    result.output_tokens,
                    result.content.0.clone(),
                ));
            }
        }
    }
    with.sort();
    without.sort();
    let p50 = |v: &[Duration]| v[v.len() / 2].as_secs_f64() * 1000.0;
    let (w, wo) = (p50(&with), p50(&without));
    println!("turn with compaction    p50 {w:>8.1} ms");
    println!("turn without compaction p50 {wo:>8.1} ms");
    println!(
        "compaction adds         p50 {:>8.1} ms (ratio {:.2})",
        w - wo,
        w / wo
    );
    if let Some((input, output, content)) = summary_usage {
        let calls = llm
            .requests()
            .iter()
            .filter(|r| is_compaction_request(r))
            .count()
            / rounds.max(1);
        println!(
            "summary: input_tokens={} output_tokens={} provider calls per compaction={calls}",
            input.unwrap_or(0),
            output.unwrap_or(0)
        );
        if let Some(MessagePart::ToolResult { result, .. }) = content.first() {
            println!(
                "summary: summarized_messages={} tokens_before={} tokens_after={}",
                result["summarized_messages"], result["tokens_before"], result["tokens_after"]
            );
        }
    }
    worker.shutdown().await;
    pubsub.close().await;
    Ok(())
}
