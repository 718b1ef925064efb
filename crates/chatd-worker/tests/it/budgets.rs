//! Budgets (API.md "Limits, budgets and the token lifecycle"): every model
//! call of a user's chats (answers, compaction summaries, titles) is
//! counted in the owner's ledger when its result commits; before every
//! model call the owner's spend and tokens are checked, and at or over a
//! budget the turn ends with `usage_limit` without a provider request.
//!
//! The fake model's prices (see `common::Env`): 1 micro-dollar per input
//! token, 2 per output token.

use std::time::Duration;

use chatd_core::limits::LimitDefaults;
use chatd_core::{BusyBehavior, ChatStatus, MessagePart};
use chatd_store::usage::{self, PeriodUsage};
use chatd_store::{CreateChatInput, NewMessage};
use chatd_testkit::fake_llm::{Script, is_compaction_request, is_title_request, summary_of};
use chatd_worker::WorkerConfig;
use uuid::Uuid;

use crate::common::{Env, fast_config};

/// The owner's usage of the current period.
async fn ledger(env: &Env, user: Uuid) -> PeriodUsage {
    usage::of_user(env.db.pool(), user)
        .await
        .unwrap()
        .expect("user")
        .usage
}

async fn set_user_budgets(env: &Env, user: Uuid, micros: Option<i64>, tokens: Option<i64>) {
    sqlx::query(
        "UPDATE users SET monthly_budget_micros = $2, monthly_token_budget = $3 WHERE id = $1",
    )
    .bind(user)
    .bind(micros)
    .bind(tokens)
    .execute(env.db.pool())
    .await
    .unwrap();
}

/// The reset instant as the error message spells it.
fn resets(usage: &PeriodUsage) -> String {
    usage.period_end().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Asserts that the turn of `chat_id` ended with a non-retryable
/// `usage_limit` naming `budget` and the reset instant.
async fn assert_usage_limit(env: &Env, chat_id: Uuid, budget: &str) {
    let error = env.wait_error(chat_id).await;
    assert_eq!(error["kind"], "usage_limit", "{error}");
    assert_eq!(error["retryable"], false, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(budget), "{message}");
    let period = ledger(env, env.chat(chat_id).await.owner_id).await;
    assert!(message.contains(&resets(&period)), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_spend_budget_the_turn_ends_with_usage_limit_and_the_model_gets_no_request() {
    let env = Env::new().await;
    set_user_budgets(&env, env.owner, Some(100), None).await;
    // 60 + 2 * 30 = 120 micro-dollars: the first answer passes the budget.
    env.llm.set_default(Script::text("Hello.").usage(60, 30));
    let worker = env.worker();
    let chat_id = env.create_chat("hi").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let used = ledger(&env, env.owner).await;
    assert_eq!(
        (used.spent_micros, used.input_tokens, used.output_tokens),
        (120, 60, 30)
    );
    let requests = env.llm.requests().len();
    assert_eq!(requests, 1);

    env.send(chat_id, "again", BusyBehavior::Queue).await;
    assert_usage_limit(&env, chat_id, "monthly spend budget of 100 micro-dollars").await;
    assert_eq!(env.llm.requests().len(), requests, "no provider request");
    assert_eq!(ledger(&env, env.owner).await, used, "nothing more counted");
    // The budget raised: the next send is answered.
    set_user_budgets(&env, env.owner, Some(1_000), None).await;
    env.send(chat_id, "and now?", BusyBehavior::Queue).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert_eq!(env.llm.requests().len(), requests + 1);
    assert_eq!(ledger(&env, env.owner).await.spent_micros, 240);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_default_token_budget_stops_one_user_and_not_another() {
    let env = Env::new().await;
    let bob = Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'bob', 'member')")
        .bind(bob)
        .execute(env.db.pool())
        .await
        .unwrap();
    env.llm.set_default(Script::text("Hello.").usage(40, 20));
    let config = WorkerConfig {
        limits: LimitDefaults {
            monthly_token_budget: Some(50),
            ..LimitDefaults::default()
        },
        ..fast_config()
    };
    let worker = env.worker_with(config);
    let chat_id = env.create_chat("hi").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert_eq!(ledger(&env, env.owner).await.tokens(), 60);
    let requests = env.llm.requests().len();

    env.send(chat_id, "again", BusyBehavior::Queue).await;
    assert_usage_limit(&env, chat_id, "monthly token budget of 50 tokens").await;
    assert_eq!(env.llm.requests().len(), requests, "no provider request");

    // Bob's budget is his own.
    let bobs = env
        .store
        .create_chat(CreateChatInput {
            owner_id: bob,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text("hello")])],
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    env.wait_status(bobs, ChatStatus::Waiting).await;
    assert_eq!(env.llm.requests().len(), requests + 1);
    assert_eq!(ledger(&env, bob).await.tokens(), 60);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_zero_makes_no_request_at_all() {
    let env = Env::new().await;
    set_user_budgets(&env, env.owner, None, Some(0)).await;
    let worker = env.worker();
    let chat_id = env.create_chat("hi").await;
    assert_usage_limit(&env, chat_id, "monthly token budget of 0 tokens").await;
    assert!(env.llm.requests().is_empty());
    worker.shutdown().await;
}

fn titled_config() -> WorkerConfig {
    WorkerConfig {
        generate_titles: true,
        ..fast_config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_title_is_counted_with_the_answer() {
    let env = Env::new().await;
    env.llm
        .set_title_fn(|_| Script::text("Greetings").usage(7, 3));
    env.llm.set_default(Script::text("Hello.").usage(10, 5));
    let worker = env.worker_with(titled_config());
    let chat_id = env.create_chat("hi").await;
    // The title's usage commits with the title.
    env.wait_for(chat_id, Duration::from_secs(20), "a title", |c| {
        c.title == "Greetings"
    })
    .await;
    let used = ledger(&env, env.owner).await;
    assert_eq!(
        (used.input_tokens, used.output_tokens, used.spent_micros),
        (17, 8, 17 + 2 * 8)
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_after_the_first_answer_no_title_is_asked() {
    let env = Env::new().await;
    set_user_budgets(&env, env.owner, Some(100), None).await;
    env.llm
        .set_title_fn(|_| Script::text("Greetings").usage(7, 3));
    env.llm.set_default(Script::text("Hello.").usage(60, 30));
    let worker = env.worker_with(titled_config());
    let chat_id = env.create_chat("hi").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    // A negative check: a title request would come within milliseconds
    // of the answer's commit (see `titles.rs`).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!env.llm.requests().iter().any(is_title_request));
    assert_eq!(env.chat(chat_id).await.title, "New Chat");
    assert_eq!(ledger(&env, env.owner).await.spent_micros, 120);
    worker.shutdown().await;
}

/// A user message of about 80 tokens numbered `n`.
fn long(n: usize) -> String {
    format!("q{n} {}", "lorem ipsum dolor sit amet ".repeat(11))
}

/// A chat of `turns` answered long messages.
async fn chat_with_turns(env: &Env, turns: usize) -> Uuid {
    let chat_id = env.create_chat(&long(0)).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    for n in 1..turns {
        env.send(chat_id, &long(n), BusyBehavior::Queue).await;
        env.wait_status(chat_id, ChatStatus::Waiting).await;
    }
    chat_id
}

async fn request_compaction(env: &Env, chat_id: Uuid) {
    env.store
        .machine(chat_id)
        .update(|tx| Box::pin(async move { tx.request_compaction().await }))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_compaction_is_counted_and_over_budget_is_not_made() {
    let env = Env::new().await;
    env.llm.set_default_fn(|request| {
        if is_compaction_request(request) {
            summary_of(request)
        } else {
            Script::text("an answer").usage(100, 10)
        }
    });
    let worker = env.worker();
    let chat_id = chat_with_turns(&env, 4).await;
    let before = ledger(&env, env.owner).await;
    assert_eq!((before.input_tokens, before.output_tokens), (400, 40));

    request_compaction(&env, chat_id).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    // What the fake model reported for its summarization calls (see
    // `summary_of`).
    let (mut prompt, mut completion) = (0, 0);
    for request in env
        .llm
        .requests()
        .iter()
        .filter(|r| is_compaction_request(r))
    {
        let chars = request.last_user_text().unwrap_or_default().chars().count();
        let text = format!("Summary: an earlier conversation of {chars} characters.");
        prompt += i64::try_from(request.body.to_string().len() / 4).unwrap();
        completion += i64::try_from(text.len() / 4).unwrap();
    }
    assert!(prompt > 0, "a compaction request");
    let after = ledger(&env, env.owner).await;
    assert_eq!(after.input_tokens - before.input_tokens, prompt);
    assert_eq!(after.output_tokens - before.output_tokens, completion);
    assert_eq!(
        after.spent_micros - before.spent_micros,
        (after.input_tokens - before.input_tokens)
            + 2 * (after.output_tokens - before.output_tokens)
    );

    // At the budget, a requested compaction ends the turn instead.
    set_user_budgets(&env, env.owner, Some(after.spent_micros), None).await;
    let requests = env.llm.requests().len();
    request_compaction(&env, chat_id).await;
    assert_usage_limit(&env, chat_id, "monthly spend budget").await;
    assert_eq!(env.llm.requests().len(), requests, "no provider request");
    assert_eq!(ledger(&env, env.owner).await, after);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_turns_of_one_owner_are_all_counted() {
    const CHATS: i64 = 24;
    let env = Env::new().await;
    env.llm.set_default(Script::text("Hello.").usage(10, 5));
    let worker = env.worker_with(WorkerConfig {
        limits: LimitDefaults {
            max_running_chats: CHATS as i32,
            ..LimitDefaults::default()
        },
        ..fast_config()
    });
    let mut chats = Vec::new();
    for n in 0..CHATS {
        chats.push(env.create_chat(&format!("hi {n}")).await);
    }
    for chat_id in &chats {
        env.wait_status(*chat_id, ChatStatus::Waiting).await;
    }
    // A second turn each, sent at once.
    let sends = chats
        .iter()
        .map(|chat_id| env.send(*chat_id, "again", BusyBehavior::Queue));
    futures::future::join_all(sends).await;
    for chat_id in &chats {
        env.wait_for(
            *chat_id,
            Duration::from_secs(30),
            "the second answer",
            |c| c.status == ChatStatus::Waiting && c.worker_id.is_none() && c.message_count == 4,
        )
        .await;
    }
    let used = ledger(&env, env.owner).await;
    assert_eq!(
        (used.input_tokens, used.output_tokens, used.spent_micros),
        (2 * CHATS * 10, 2 * CHATS * 5, 2 * CHATS * 20)
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_calls_count_for_the_owner_and_stop_the_parent() {
    let env = Env::new().await;
    set_user_budgets(&env, env.owner, Some(150), None).await;
    // The parent spawns a child, waits for it, then would answer; every
    // parent call costs 10, the child's answer 200 (1 per input token).
    env.llm.set_default_fn(|request| {
        let first_user = request.body["messages"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["role"] == "user"))
            .map(|m| m["content"].to_string())
            .unwrap_or_default();
        if first_user.contains("CHILD:") {
            return Script::text("The answer is 42.").usage(200, 0);
        }
        let last: serde_json::Value = request
            .trailing_tool_results()
            .last()
            .map(|r| serde_json::from_str(r).unwrap_or_default())
            .unwrap_or_default();
        let (name, args) = match last.get("chat_id") {
            None => (
                "spawn_agent",
                serde_json::json!({"prompt": "CHILD: find it"}),
            ),
            Some(child) => (
                "wait_agent",
                serde_json::json!({"chat_id": child, "timeout_s": 60}),
            ),
        };
        if last.get("status").is_some() {
            return Script::text("Parent got it.").usage(10, 0);
        }
        let id = format!("call_{name}_{}", Uuid::new_v4().simple());
        Script::new()
            .tool_call(&id, name, &args.to_string(), 1)
            .usage(10, 0)
    });
    let worker = env.worker();
    let parent = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![
                NewMessage::user(vec![MessagePart::text("PARENT: delegate")]).created_by(env.owner),
            ],
            subagents: true,
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    // Spawn (10), wait (10), the child's answer (200): the parent's next
    // call is over the budget.
    assert_usage_limit(&env, parent, "monthly spend budget of 150 micro-dollars").await;
    let used = ledger(&env, env.owner).await;
    assert_eq!((used.spent_micros, used.input_tokens), (220, 220));
    assert_eq!(env.llm.requests().len(), 3, "spawn, wait, the child");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_owners_next_turn_ends_with_usage_limit_and_the_model_gets_no_request() {
    let env = Env::new().await;
    env.llm.set_default(Script::text("Hello.").usage(10, 5));
    let worker = env.worker();
    let chat_id = env.create_chat("hi").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let requests = env.llm.requests().len();

    // Disabled (say the account was compromised): its tokens answer 401,
    // and what it had sent or queued makes no model call either.
    sqlx::query("UPDATE users SET disabled = true WHERE id = $1")
        .bind(env.owner)
        .execute(env.db.pool())
        .await
        .unwrap();
    env.send(chat_id, "again", BusyBehavior::Queue).await;
    let error = env.wait_error(chat_id).await;
    assert_eq!(error["kind"], "usage_limit", "{error}");
    assert_eq!(error["retryable"], false, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("account is disabled"),
        "{error}"
    );
    assert_eq!(env.llm.requests().len(), requests, "no provider request");

    // Enabled again: the next send is answered.
    sqlx::query("UPDATE users SET disabled = false WHERE id = $1")
        .bind(env.owner)
        .execute(env.db.pool())
        .await
        .unwrap();
    env.send(chat_id, "and now?", BusyBehavior::Queue).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert_eq!(env.llm.requests().len(), requests + 1);
    worker.shutdown().await;
}
