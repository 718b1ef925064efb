//! Fair scheduling (API.md "Limits, budgets and the token lifecycle": the
//! table and "Running chats"; issue 31 point 2): `--max-runners` per
//! replica, the per-user cap on running chats across replicas (decided by
//! the database where chats are acquired), the sub-agent fan-out cap and
//! the model-step cap of a turn.
//!
//! The fake LLM holds the chats that must occupy a slot (a script that
//! hangs until the worker goes away); an `Interrupt` ends such a turn.

use std::sync::Arc;
use std::time::Duration;

use chatd_core::limits::LimitDefaults;
use chatd_core::{BusyBehavior, ChatStatus, MessagePart};
use chatd_store::{CreateChatInput, NewMessage};
use chatd_testkit::fake_llm::{RecordedRequest, Script};
use chatd_worker::{Worker, WorkerConfig};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::{Env, fast_config, first_user_text};

/// [`fast_config`] with a fresh worker id, these limits, and a timer that
/// never fires within a test: only hints and freed slots wake acquisition.
fn config(limits: LimitDefaults) -> WorkerConfig {
    WorkerConfig {
        worker_id: Uuid::new_v4(),
        acquisition_interval: Duration::from_secs(60),
        limits,
        ..fast_config()
    }
}

fn cap(max_running_chats: i32) -> LimitDefaults {
    LimitDefaults {
        max_running_chats,
        ..LimitDefaults::default()
    }
}

/// Chats whose last user message starts with `hold` hang until
/// interrupted; every other one is answered at once.
fn hold_or_answer(env: &Env) {
    env.llm.set_default_fn(|request: &RecordedRequest| {
        if request
            .last_user_text()
            .unwrap_or_default()
            .starts_with("hold")
        {
            Script::new().hang()
        } else {
            Script::text("done")
        }
    });
}

async fn add_user(env: &Env, name: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, $2, 'member')")
        .bind(id)
        .bind(name)
        .execute(env.db.pool())
        .await
        .unwrap();
    id
}

async fn create_chat_of(env: &Env, owner: Uuid, text: &str) -> Uuid {
    env.store
        .create_chat(CreateChatInput {
            owner_id: owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text(text)])],
            ..CreateChatInput::default()
        })
        .await
        .expect("create chat")
        .chat
        .id
}

/// How many chats of `owner` a runner holds (the chats the cap counts).
async fn held(env: &Env, owner: Uuid) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM chats c JOIN chat_heartbeats h
            ON h.chat_id = c.id AND h.runner_id = c.runner_id
         WHERE c.owner_id = $1 AND c.worker_id IS NOT NULL",
    )
    .bind(owner)
    .fetch_one(env.db.pool())
    .await
    .unwrap()
}

/// The user texts of the model requests so far, in arrival order.
fn asked(env: &Env) -> Vec<String> {
    env.llm
        .requests()
        .iter()
        .map(|r| r.last_user_text().unwrap_or_default())
        .collect()
}

/// Model requests still streaming (neither played to the end nor aborted).
fn in_flight(env: &Env) -> u64 {
    env.llm.requests().len() as u64 - env.llm.completed_responses() - env.llm.aborted_responses()
}

async fn interrupt(env: &Env, chat_id: Uuid) {
    env.store
        .machine(chat_id)
        .update(|tx| Box::pin(async move { tx.interrupt().await.map(|_| ()) }))
        .await
        .expect("interrupt");
}

/// Waits until the fake LLM received `n` requests; returns the `n`th's
/// user text.
async fn nth_request(env: &Env, n: usize) -> String {
    env.llm
        .wait_for_request(n, Duration::from_secs(10))
        .await
        .unwrap()
        .last_user_text()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_at_the_running_chat_cap_waits_in_turn_order_while_another_users_chat_starts() {
    let env = Env::new().await;
    hold_or_answer(&env);
    // Four chats of alice's, turns begun in this order, before any worker
    // runs: with a cap of 2 the first two start.
    let mut alice = Vec::new();
    for i in 1..=4 {
        alice.push(env.create_chat(&format!("hold {i}")).await);
    }
    // A batch of 2: were alice's waiting chats candidates, they would fill
    // every pass ahead of bob's.
    let _worker = env.worker_with(WorkerConfig {
        acquisition_batch: 2,
        ..config(cap(2))
    });
    let mut first = vec![nth_request(&env, 1).await, nth_request(&env, 2).await];
    first.sort();
    assert_eq!(first, ["hold 1", "hold 2"]);
    // Bob's chat starts and finishes while alice's two hold their slots.
    let bob = add_user(&env, "bob").await;
    let bobs = create_chat_of(&env, bob, "bob's question").await;
    env.wait_status(bobs, ChatStatus::Waiting).await;
    assert_eq!(nth_request(&env, 3).await, "bob's question");
    assert_eq!(held(&env, env.owner).await, 2);
    for waiting in &alice[2..] {
        let chat = env.chat(*waiting).await;
        assert_eq!((chat.status, chat.worker_id), (ChatStatus::Running, None));
    }
    // A slot frees: alice's next chat, in turn order, starts (no timer
    // pass in this test: the ended runner wakes acquisition).
    interrupt(&env, alice[0]).await;
    assert_eq!(nth_request(&env, 4).await, "hold 3");
    interrupt(&env, alice[1]).await;
    assert_eq!(nth_request(&env, 5).await, "hold 4");
    assert!(held(&env, env.owner).await <= 2);
    assert_eq!(asked(&env).len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_acquiring_one_users_chats_at_once_never_pass_the_cap() {
    let env = Env::new().await;
    env.llm.set_default(Script::new().hang());
    let mut chats = Vec::new();
    for i in 0..16 {
        chats.push(env.create_chat(&format!("hold {i}")).await);
    }
    // Both replicas start at once and race for the same sixteen chats.
    let workers: Vec<Worker> = (0..2).map(|_| env.worker_with(config(cap(3)))).collect();
    let mut started = 0;
    for round in 0..4 {
        started += 3;
        // Sample until three more chats run (and a while longer): never
        // more than three held, never more than three model calls at once.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut settled_at = None;
        loop {
            let held_now = held(&env, env.owner).await;
            assert!(held_now <= 3, "round {round}: {held_now} chats held");
            assert!(
                in_flight(&env) <= 3,
                "round {round}: {} calls",
                in_flight(&env)
            );
            let runners: usize = workers.iter().map(|w| w.runners().len()).sum();
            if env.llm.requests().len() >= started && settled_at.is_none() {
                settled_at = Some(tokio::time::Instant::now());
            }
            if settled_at.is_some_and(|t| t.elapsed() > Duration::from_millis(500)) {
                assert_eq!((held_now, in_flight(&env)), (3, 3), "round {round}");
                assert!(runners >= 3, "round {round}: {runners} runners");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: {} requests",
                env.llm.requests().len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(env.llm.requests().len(), started, "round {round}");
        // Free every slot at once: both replicas race for the next three.
        let running: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM chats WHERE owner_id = $1 AND status = 'running' AND worker_id IS NOT NULL",
        )
        .bind(env.owner)
        .fetch_all(env.db.pool())
        .await
        .unwrap();
        assert_eq!(running.len(), 3, "round {round}");
        for chat in running {
            interrupt(&env, chat).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_runs_no_more_chats_than_max_runners_and_starts_the_next_when_one_ends() {
    let env = Env::new().await;
    env.llm.set_default(Script::new().hang());
    let mut chats = Vec::new();
    for i in 1..=5 {
        chats.push(env.create_chat(&format!("hold {i}")).await);
    }
    let worker = env.worker_with(config(LimitDefaults {
        max_runners: 2,
        ..LimitDefaults::default()
    }));
    nth_request(&env, 2).await;
    // More hints do not make it take more.
    env.create_chat("hold 6").await;
    worker.wake();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(800);
    while tokio::time::Instant::now() < deadline {
        assert!(worker.runners().len() <= 2);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(asked(&env).len(), 2);
    assert_eq!(worker.runners().len(), 2);
    // A runner ends: the next chat starts at once (the timer is a minute).
    let running: Vec<Uuid> = worker.runners().iter().map(|(chat, _)| *chat).collect();
    interrupt(&env, running[0]).await;
    nth_request(&env, 3).await;
    assert!(worker.runners().len() <= 2);
}

/// A parent that makes `n` `spawn_agent` calls in one response at the
/// start of each turn, then answers; children answer at once.
fn spawning_parent(env: &Env, n: usize) {
    env.llm.set_default_fn(move |request: &RecordedRequest| {
        let first_user = request.body["messages"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["role"] == "user"))
            .map(|m| m["content"].to_string())
            .unwrap_or_default();
        if first_user.contains("CHILD") {
            return Script::text("child done");
        }
        if !request.trailing_tool_results().is_empty() {
            return Script::text("parent done");
        }
        let mut script = Script::new();
        for _ in 0..n {
            let id = format!("call_{}", Uuid::new_v4().simple());
            script = script.tool_call(
                &id,
                "spawn_agent",
                &json!({"prompt": "CHILD"}).to_string(),
                1,
            );
        }
        script
    });
}

/// `(result, is_error)` of every `spawn_agent` result of the chat.
async fn spawn_results(env: &Env, chat_id: Uuid) -> Vec<(Value, bool)> {
    env.active_messages(chat_id)
        .await
        .iter()
        .flat_map(|m| m.content.0.clone())
        .filter_map(|p| match p {
            MessagePart::ToolResult {
                tool_name,
                result,
                is_error,
                ..
            } if tool_name == "spawn_agent" => Some((result, is_error)),
            _ => None,
        })
        .collect()
}

async fn child_count(env: &Env, parent: Uuid) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM chats WHERE parent_chat_id = $1")
        .bind(parent)
        .fetch_one(env.db.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_past_the_fan_out_cap_is_an_error_result_and_creates_no_child() {
    let env = Env::new().await;
    spawning_parent(&env, 3);
    let parent = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text("go")])],
            last_model_config_id: Some(env.model_config_id),
            subagents: true,
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    let _worker = env.worker_with(config(LimitDefaults {
        max_subagents_per_chat: 2,
        ..LimitDefaults::default()
    }));
    env.wait_status(parent, ChatStatus::Waiting).await;
    let results = spawn_results(&env, parent).await;
    let errors: Vec<&Value> = results.iter().filter(|r| r.1).map(|r| &r.0).collect();
    assert_eq!((results.len(), errors.len()), (3, 1), "{results:?}");
    let message = errors[0]["error"].as_str().unwrap();
    assert!(message.contains("already has 2 sub-agents"), "{message}");
    assert!(message.contains("--max-subagents-per-chat"), "{message}");
    assert_eq!(child_count(&env, parent).await, 2);
    // The cap counts every child the chat ever spawned, across turns.
    spawning_parent(&env, 1);
    env.send(parent, "again", BusyBehavior::Queue).await;
    env.wait_for(parent, Duration::from_secs(20), "the second turn", |c| {
        c.status == ChatStatus::Waiting && c.worker_id.is_none()
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while spawn_results(&env, parent).await.len() < 4 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let results = spawn_results(&env, parent).await;
    assert!(results[3].1, "{results:?}");
    assert_eq!(child_count(&env, parent).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_after_the_cap_ends_the_turn_with_usage_limit() {
    let env = Env::new().await;
    // Every answer calls a tool nobody has: the worker answers it with an
    // error result and the turn goes on, one model call per step.
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    env.llm.set_default_fn(move |_| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Script::new().tool_call(&format!("call_{n}"), "no_such_tool", "{}", 1)
    });
    let chat = env.create_chat("loop").await;
    let _worker = env.worker_with(WorkerConfig {
        max_steps_per_turn: 3,
        ..config(LimitDefaults::default())
    });
    let error = env.wait_error(chat).await;
    assert_eq!(error["kind"], "usage_limit", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("limit of 3 model calls"),
        "{error}"
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_in_wait_agent_shares_its_slot_with_its_sub_agent_under_a_cap_of_one() {
    let env = Env::new().await;
    // The parent spawns a child, waits for it (a minute), then answers
    // with what the wait returned; the child answers at once.
    env.llm.set_default_fn(|request: &RecordedRequest| {
        if first_user_text(request).starts_with("CHILD:") {
            return Script::text("the answer is 42");
        }
        let last: Value = request
            .trailing_tool_results()
            .last()
            .map(|r| serde_json::from_str(r).unwrap_or(Value::String(r.clone())))
            .unwrap_or(Value::Null);
        let call = |name: &str, args: Value| {
            let id = format!("call_{}_{}", name, Uuid::new_v4().simple());
            Script::new().tool_call(&id, name, &args.to_string(), 1)
        };
        if last.is_null() {
            call("spawn_agent", json!({"prompt": "CHILD: find the answer"}))
        } else if let Some(child) = last.get("chat_id") {
            call("wait_agent", json!({"chat_id": child, "timeout_s": 60}))
        } else {
            Script::text(format!("Parent got: {last}"))
        }
    });
    let parent = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text("go")])],
            last_model_config_id: Some(env.model_config_id),
            subagents: true,
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    let _worker = env.worker_with(config(cap(1)));
    // Before the fix the child waited for the parent's slot until
    // wait_agent timed out (a minute here).
    let chat = env
        .wait_for(
            parent,
            Duration::from_secs(15),
            "the parent's answer",
            |c| c.status == ChatStatus::Waiting,
        )
        .await;
    assert_eq!(chat.status, ChatStatus::Waiting);
    let messages = env.active_messages(parent).await;
    let answer = crate::common::text_of(messages.last().unwrap());
    assert!(answer.contains("the answer is 42"), "{answer}");
    let child: Uuid = sqlx::query_scalar("SELECT id FROM chats WHERE parent_chat_id = $1")
        .bind(parent)
        .fetch_one(env.db.pool())
        .await
        .unwrap();
    assert_eq!(env.chat(child).await.status, ChatStatus::Waiting);
}

/// Chats whose first user message starts with `choose` call the client
/// tool `pick_color` (and wait in `requires_action`); `hold` hangs; any
/// other chat, or a turn with a tool result, is answered at once.
fn client_tool_or_answer(env: &Env) {
    env.llm.set_default_fn(|request: &RecordedRequest| {
        let first = first_user_text(request);
        if !request.trailing_tool_results().is_empty() {
            Script::text("done")
        } else if first.starts_with("choose") {
            Script::new().tool_call("call_1", "pick_color", "{}", 1)
        } else if first.starts_with("hold") {
            Script::new().hang()
        } else {
            Script::text("done")
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_waiting_in_requires_action_take_no_running_chat_slot_nor_runner() {
    let env = Env::new().await;
    client_tool_or_answer(&env);
    // Cap 1 and two runners: two of alice's chats wait for a client tool.
    let worker = env.worker_with(config(LimitDefaults {
        max_runners: 2,
        max_running_chats: 1,
        ..LimitDefaults::default()
    }));
    let tools = crate::common::pick_color_tool();
    let first = env.create_chat_with("choose 1", Some(tools.clone())).await;
    env.wait_requires_action(first).await;
    let second = env.create_chat_with("choose 2", Some(tools)).await;
    env.wait_requires_action(second).await;
    assert_eq!(worker.runners().len(), 2);
    // Another user's chat starts on this replica even so (its two runners
    // wait for a client), and so does a third chat of alice's (under her
    // cap of 1: the others take no slot).
    let bob = add_user(&env, "bob").await;
    let bobs = create_chat_of(&env, bob, "bob's question").await;
    env.wait_status(bobs, ChatStatus::Waiting).await;
    let third = env.create_chat("alice's third").await;
    env.wait_status(third, ChatStatus::Waiting).await;
    // The client answers: both finish.
    env.complete_requires_action(first, "call_1", "\"red\"")
        .await;
    env.complete_requires_action(second, "call_1", "\"blue\"")
        .await;
    env.wait_status(first, ChatStatus::Waiting).await;
    env.wait_status(second, ChatStatus::Waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_waiting_for_a_slot_can_be_interrupted_at_once() {
    let env = Env::new().await;
    hold_or_answer(&env);
    let bob = add_user(&env, "bob").await;
    sqlx::query("UPDATE users SET max_running_chats = 0 WHERE id = $1")
        .bind(bob)
        .execute(env.db.pool())
        .await
        .unwrap();
    let _worker = env.worker_with(config(cap(1)));
    // Alice's first chat holds her only slot; her second waits for it.
    let holding = env.create_chat("hold 1").await;
    nth_request(&env, 1).await;
    let waiting = env.create_chat("hold 2").await;
    // Bob may run nothing at all (cap 0).
    let bobs = create_chat_of(&env, bob, "hold bob").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for chat in [waiting, bobs] {
        let row = env.chat(chat).await;
        assert_eq!((row.status, row.worker_id), (ChatStatus::Running, None));
    }
    // Interrupted, each lands `waiting` at once (before: `interrupting`
    // until a slot freed; for bob, forever).
    for chat in [waiting, bobs] {
        interrupt(&env, chat).await;
        env.wait_for(chat, Duration::from_secs(3), "waiting", |c| {
            c.status == ChatStatus::Waiting
        })
        .await;
    }
    assert_eq!(asked(&env), ["hold 1"]);
    let row = env.chat(holding).await;
    assert_eq!(row.status, ChatStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_holding_fewer_runners_goes_first_under_max_runners() {
    let env = Env::new().await;
    hold_or_answer(&env);
    // Eve's eight chats are all within her cap of 8; the replica runs two.
    let mut eve = Vec::new();
    for i in 0..8 {
        eve.push(env.create_chat(&format!("hold {i}")).await);
    }
    let worker = env.worker_with(config(LimitDefaults {
        max_runners: 2,
        ..LimitDefaults::default()
    }));
    let mut first = vec![nth_request(&env, 1).await, nth_request(&env, 2).await];
    first.sort();
    assert_eq!(first, ["hold 0", "hold 1"]);
    let frank = add_user(&env, "frank").await;
    let franks = create_chat_of(&env, frank, "frank's question").await;
    // A runner ends: frank's chat (he holds none) starts before eve's
    // third (she still holds one).
    let running: Vec<Uuid> = worker.runners().iter().map(|(chat, _)| *chat).collect();
    interrupt(&env, running[0]).await;
    assert_eq!(nth_request(&env, 3).await, "frank's question");
    env.wait_status(franks, ChatStatus::Waiting).await;
    assert_eq!(nth_request(&env, 4).await, "hold 2");
}
