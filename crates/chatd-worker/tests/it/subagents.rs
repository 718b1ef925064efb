//! Sub-agents (API.md "Sub-agents and plan mode"): the built-in agent tools
//! of a chat created with `subagents`, run by the worker with the fake LLM
//! playing both the parent and its children (routed by each request's first
//! user message).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chatd_core::{ChatRole, ChatStatus, MessagePart};
use chatd_store::chats::{self, ChatFilter};
use chatd_store::{ChatMessage, CreateChatInput, NewMessage};
use chatd_testkit::fake_llm::{RecordedRequest, Script};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::{Env, fast_config, first_user_text, text_of};

/// The prompt every test's parent spawns its child with.
const CHILD_PROMPT: &str = "CHILD: find the answer";

/// The names of the tools a request offers.
fn tool_names(request: &RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// How the parent answers: given the last tool result (`Null` at the start
/// of the turn), the script of its next response.
type ParentBrain = Arc<dyn Fn(&Value) -> Script + Send + Sync>;
/// How a child answers, given its first user message.
type ChildBrain = Arc<dyn Fn(&str) -> Script + Send + Sync>;

/// Routes the fake LLM's requests: a chat whose first user message starts
/// with `CHILD:` is a child; everything else is the parent. Each tool call
/// gets a fresh id (`call_<n>`, n = assistant messages so far).
fn route_llm(env: &Env, parent: ParentBrain, child: ChildBrain) {
    env.llm.set_default_fn(move |request| {
        let first = first_user_text(request);
        if first.starts_with("CHILD:") {
            return child(&first);
        }
        let last: Value = request
            .trailing_tool_results()
            .last()
            .map(|r| serde_json::from_str(r).unwrap_or(Value::String(r.clone())))
            .unwrap_or(Value::Null);
        parent(&last)
    });
}

/// The next call id of a parent script: unique within the chat.
fn call(name: &str, args: Value) -> Script {
    let id = format!("call_{}_{}", name, Uuid::new_v4().simple());
    Script::new().tool_call(&id, name, &args.to_string(), 2)
}

/// A parent that spawns the child, waits for it (`timeout_s`), then
/// answers with what the wait returned.
fn spawn_then_wait(timeout_s: u64) -> ParentBrain {
    Arc::new(move |last| {
        if last.is_null() {
            call(
                "spawn_agent",
                json!({"prompt": CHILD_PROMPT, "title": "Helper"}),
            )
        } else if let Some(child) = last.get("chat_id") {
            call(
                "wait_agent",
                json!({"chat_id": child, "timeout_s": timeout_s}),
            )
        } else {
            Script::text(format!("Parent got: {last}"))
        }
    })
}

/// Creates a root chat with `subagents`.
async fn create_parent(env: &Env, text: &str) -> Uuid {
    env.store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![
                NewMessage::user(vec![MessagePart::text(text)]).created_by(env.owner),
            ],
            last_model_config_id: Some(env.model_config_id),
            subagents: true,
            ..CreateChatInput::default()
        })
        .await
        .expect("create parent")
        .chat
        .id
}

/// Every child of `parent` (archived or not).
async fn children(env: &Env, parent: Uuid) -> Vec<chatd_store::Chat> {
    let mut all = Vec::new();
    for archived in [false, true] {
        all.extend(
            chats::list(
                env.db.pool(),
                &ChatFilter {
                    owner: env.owner,
                    archived,
                    q: None,
                    label_keys: vec![],
                    label_values: vec![],
                    after_id: None,
                    limit: 100,
                    parent_id: Some(parent),
                },
            )
            .await
            .unwrap(),
        );
    }
    all
}

/// The tool results of `messages`, `(tool_name, result, is_error)`.
fn tool_results(messages: &[ChatMessage]) -> Vec<(String, Value, bool)> {
    messages
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter_map(|p| match p {
            MessagePart::ToolResult {
                tool_name,
                result,
                is_error,
                ..
            } => Some((tool_name.clone(), result.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// Polls until `pred` holds for the parent's active messages.
async fn wait_messages(
    env: &Env,
    chat_id: Uuid,
    what: &str,
    pred: impl Fn(&[ChatMessage]) -> bool,
) -> Vec<ChatMessage> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let messages = env.active_messages(chat_id).await;
        if pred(&messages) {
            return messages;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether an assistant message calls `tool`.
fn calls(messages: &[ChatMessage], tool: &str) -> bool {
    messages.iter().any(|m| {
        m.content
            .0
            .iter()
            .any(|p| matches!(p, MessagePart::ToolCall { tool_name, .. } if tool_name == tool))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_spawn_creates_one_child_that_runs_and_wait_returns_its_last_message() {
    let env = Env::new().await;
    route_llm(
        &env,
        spawn_then_wait(60),
        Arc::new(|_| Script::text("The answer is 42.")),
    );
    let _worker = env.worker();
    let parent = create_parent(&env, "PARENT: delegate").await;
    let done = env.wait_status(parent, ChatStatus::Waiting).await;

    let kids = children(&env, parent).await;
    assert_eq!(kids.len(), 1, "exactly one child");
    let child = &kids[0];
    assert_eq!(child.parent_chat_id, Some(parent));
    assert_eq!(child.root_chat_id, Some(parent));
    assert_eq!(child.owner_id, env.owner);
    assert_eq!(child.last_model_config_id, Some(env.model_config_id));
    assert_eq!((child.depth, child.subagents), (1, true));
    assert_eq!(child.title, "Helper");
    assert_eq!(child.status, ChatStatus::Waiting);
    assert!(
        child
            .spawn_key
            .as_deref()
            .unwrap()
            .starts_with(&parent.to_string())
    );
    let child_messages = env.active_messages(child.id).await;
    assert_eq!(child_messages[0].role, ChatRole::User);
    assert_eq!(
        child_messages[0].content.0,
        vec![MessagePart::text(CHILD_PROMPT)]
    );
    assert_eq!(text_of(child_messages.last().unwrap()), "The answer is 42.");

    let messages = env.active_messages(parent).await;
    let results = tool_results(&messages);
    assert_eq!(
        results,
        vec![
            (
                "spawn_agent".to_owned(),
                json!({"chat_id": child.id}),
                false
            ),
            (
                "wait_agent".to_owned(),
                json!({"status": "waiting", "last_message": "The answer is 42.", "timed_out": false}),
                false
            ),
        ]
    );
    assert!(text_of(messages.last().unwrap()).contains("The answer is 42."));
    assert_eq!(done.depth, 0);
    // Every parent request offers the four agent tools; the child's too
    // (children have sub-agents as well).
    for request in env.llm.requests() {
        let names = tool_names(&request);
        assert_eq!(
            names,
            ["spawn_agent", "wait_agent", "message_agent", "close_agent"],
            "{}",
            first_user_text(&request)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_tools_are_not_offered_without_the_option() {
    let env = Env::new().await;
    env.llm.push(Script::text("Plain."));
    let _worker = env.worker();
    let chat = env.create_chat("PARENT: hi").await;
    env.wait_status(chat, ChatStatus::Waiting).await;
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 1);
    assert!(tool_names(&requests[0]).is_empty());
}

/// A step retried after the commit that created the child (here: a spawn
/// call left without its result, with the child of its key already
/// created) finds that child instead of creating a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_spawn_retried_after_the_child_was_created_finds_the_same_child() {
    let env = Env::new().await;
    let args = json!({"prompt": CHILD_PROMPT}).to_string();
    let parent = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![
                NewMessage::user(vec![MessagePart::text("PARENT: delegate")]),
                NewMessage::assistant(vec![MessagePart::ToolCall {
                    tool_call_id: "call_s".into(),
                    tool_name: "spawn_agent".into(),
                    args: args.clone(),
                }]),
            ],
            last_model_config_id: Some(env.model_config_id),
            subagents: true,
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat;
    // The key the worker uses for the outstanding call: the current
    // history version and generation attempt.
    let key = format!(
        "{}:{}:{}:call_s",
        parent.id, parent.history_version, parent.generation_attempt
    );
    let existing = {
        let mut tx = env.store.machine(parent.id).begin().await.unwrap();
        let (id, created) = tx
            .create_child(CreateChatInput {
                owner_id: env.owner,
                spawn_key: Some(key),
                initial_status: Some(ChatStatus::Waiting),
                initial_messages: vec![NewMessage::user(vec![MessagePart::text(CHILD_PROMPT)])],
                ..CreateChatInput::default()
            })
            .await
            .unwrap();
        assert!(created);
        tx.commit().await.unwrap();
        id
    };
    env.llm.push(Script::text("Spawned."));
    let _worker = env.worker();
    env.wait_status(parent.id, ChatStatus::Waiting).await;
    let kids = children(&env, parent.id).await;
    assert_eq!(kids.iter().map(|c| c.id).collect::<Vec<_>>(), [existing]);
    let results = tool_results(&env.active_messages(parent.id).await);
    assert_eq!(
        results,
        [(
            "spawn_agent".to_owned(),
            json!({"chat_id": existing}),
            false
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_wait_survives_a_takeover_and_completes_with_one_child() {
    let env = Env::new().await;
    let release = Arc::new(AtomicBool::new(false));
    let released = release.clone();
    route_llm(
        &env,
        spawn_then_wait(120),
        Arc::new(move |_| {
            if released.load(Ordering::SeqCst) {
                Script::text("Done after the takeover.")
            } else {
                Script::new().hang()
            }
        }),
    );
    let a = env.worker();
    let parent = create_parent(&env, "PARENT: delegate").await;
    // The wait call is committed without a result: the parent is waiting
    // on its child.
    wait_messages(&env, parent, "the wait_agent call", |m| {
        calls(m, "wait_agent")
    })
    .await;
    let started = env.chat(parent).await;
    assert_eq!(started.status, ChatStatus::Running);
    a.crash();
    release.store(true, Ordering::SeqCst);
    let b = env.worker_with(fast_config());
    let done = env.wait_status(parent, ChatStatus::Waiting).await;
    assert!(done.history_version > started.history_version);
    let kids = children(&env, parent).await;
    assert_eq!(kids.len(), 1, "the takeover created no second child");
    let results = tool_results(&env.active_messages(parent).await);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        results[1],
        (
            "wait_agent".to_owned(),
            json!({"status": "waiting", "last_message": "Done after the takeover.", "timed_out": false}),
            false
        )
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_wait_times_out_from_the_commit_of_the_call() {
    let env = Env::new().await;
    route_llm(&env, spawn_then_wait(1), Arc::new(|_| Script::new().hang()));
    let _worker = env.worker();
    let parent = create_parent(&env, "PARENT: delegate").await;
    env.wait_status(parent, ChatStatus::Waiting).await;
    let results = tool_results(&env.active_messages(parent).await);
    assert_eq!(
        results[1],
        (
            "wait_agent".to_owned(),
            json!({"status": "running", "last_message": null, "timed_out": true}),
            false
        )
    );
    let child = &children(&env, parent).await[0];
    assert_eq!(env.chat(child.id).await.status, ChatStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_spawn_at_depth_two_is_answered_with_an_error_result() {
    let env = Env::new().await;
    let make = |parent: Option<Uuid>, text: &str, status| CreateChatInput {
        owner_id: env.owner,
        parent_chat_id: parent,
        initial_messages: vec![NewMessage::user(vec![MessagePart::text(text)])],
        last_model_config_id: Some(env.model_config_id),
        initial_status: Some(status),
        subagents: true,
        ..CreateChatInput::default()
    };
    let root = env
        .store
        .create_chat(make(None, "root", ChatStatus::Waiting))
        .await
        .unwrap()
        .chat;
    let child = env
        .store
        .create_chat(make(Some(root.id), "child", ChatStatus::Waiting))
        .await
        .unwrap()
        .chat;
    // Below depth 2 nothing may be created, by hand either.
    let deep = env
        .store
        .create_chat(make(Some(child.id), "GRANDCHILD", ChatStatus::Waiting))
        .await
        .unwrap()
        .chat;
    assert_eq!((child.depth, deep.depth), (1, 2));
    let refused = env
        .store
        .create_chat(make(Some(deep.id), "too deep", ChatStatus::Waiting))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("deeper than 2"), "{refused}");
    env.llm
        .push(call("spawn_agent", json!({"prompt": "CHILD: more"})));
    env.llm.push(Script::text("I will do it myself."));
    let _worker = env.worker();
    env.send(deep.id, "go", chatd_core::BusyBehavior::Queue)
        .await;
    env.wait_status(deep.id, ChatStatus::Waiting).await;
    let results = tool_results(&env.active_messages(deep.id).await);
    assert_eq!(results.len(), 1);
    let (name, result, is_error) = &results[0];
    assert_eq!((name.as_str(), *is_error), ("spawn_agent", true));
    assert!(
        result["error"].as_str().unwrap().contains("depth 2"),
        "{result}"
    );
    assert!(children(&env, deep.id).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_close_interrupts_a_busy_child_and_archives_it() {
    let env = Env::new().await;
    route_llm(
        &env,
        Arc::new(|last| {
            if last.is_null() {
                call("spawn_agent", json!({"prompt": CHILD_PROMPT}))
            } else if let Some(child) = last.get("chat_id") {
                call("close_agent", json!({"chat_id": child}))
            } else {
                Script::text(format!("Closed: {last}"))
            }
        }),
        Arc::new(|_| Script::new().hang()),
    );
    let _worker = env.worker();
    let parent = create_parent(&env, "PARENT: delegate").await;
    env.wait_status(parent, ChatStatus::Waiting).await;
    let results = tool_results(&env.active_messages(parent).await);
    assert_eq!(
        results[1],
        ("close_agent".to_owned(), json!({"archived": true}), false)
    );
    let child = &children(&env, parent).await[0];
    let row = env.chat(child.id).await;
    assert!(row.archived);
    assert_eq!(row.status, ChatStatus::Waiting);
    // The parent itself stays unarchived.
    assert!(!env.chat(parent).await.archived);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_parent_interrupt_cancels_the_wait_and_leaves_the_child_running() {
    let env = Env::new().await;
    let release = Arc::new(AtomicBool::new(false));
    let released = release.clone();
    route_llm(
        &env,
        spawn_then_wait(600),
        Arc::new(move |_| {
            if released.load(Ordering::SeqCst) {
                Script::text("Child finished alone.")
            } else {
                Script::text("Child finished alone.").delay(Duration::from_secs(3))
            }
        }),
    );
    let _worker = env.worker();
    let parent = create_parent(&env, "PARENT: delegate").await;
    wait_messages(&env, parent, "the wait_agent call", |m| {
        calls(m, "wait_agent")
    })
    .await;
    let child = children(&env, parent).await[0].id;
    env.store
        .machine(parent)
        .update(|tx| Box::pin(async move { tx.interrupt().await.map(|_| ()) }))
        .await
        .unwrap();
    env.wait_status(parent, ChatStatus::Waiting).await;
    let results = tool_results(&env.active_messages(parent).await);
    let (name, _, is_error) = &results[1];
    assert_eq!((name.as_str(), *is_error), ("wait_agent", true));
    // The child is not interrupted: it goes on and answers.
    assert_eq!(env.chat(child).await.status, ChatStatus::Running);
    release.store(true, Ordering::SeqCst);
    env.wait_status(child, ChatStatus::Waiting).await;
    let last = env.active_messages(child).await;
    assert_eq!(text_of(last.last().unwrap()), "Child finished alone.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_message_is_sent_once_and_a_foreign_chat_is_refused() {
    let env = Env::new().await;
    let stranger = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text("someone else")])],
            initial_status: Some(ChatStatus::Waiting),
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    let spawned = Arc::new(std::sync::Mutex::new(None::<Value>));
    let seen = spawned.clone();
    route_llm(
        &env,
        Arc::new(move |last| {
            if last.is_null() {
                call("spawn_agent", json!({"prompt": CHILD_PROMPT}))
            } else if let Some(child) = last.get("chat_id") {
                *seen.lock().unwrap() = Some(child.clone());
                call("wait_agent", json!({"chat_id": child}))
            } else if last.get("status").is_some() {
                let child = seen.lock().unwrap().clone().unwrap();
                call(
                    "message_agent",
                    json!({"chat_id": child, "text": "CHILD: again"}),
                )
            } else if last.get("queued").is_some() {
                call("message_agent", json!({"chat_id": stranger, "text": "hi"}))
            } else {
                Script::text("Done.")
            }
        }),
        Arc::new(|_| Script::text("first")),
    );
    let _worker = env.worker();
    let parent = create_parent(&env, "PARENT: delegate").await;
    env.wait_status(parent, ChatStatus::Waiting).await;
    let results = tool_results(&env.active_messages(parent).await);
    let names: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "spawn_agent",
            "wait_agent",
            "message_agent",
            "message_agent"
        ]
    );
    // The child was idle: the message started a turn rather than queueing.
    assert_eq!(
        results[2],
        ("message_agent".to_owned(), json!({"queued": false}), false)
    );
    assert!(results[3].2, "a chat that is not a child is refused");
    assert!(
        results[3].1["error"]
            .as_str()
            .unwrap()
            .contains("not a sub-agent of this chat"),
        "{:?}",
        results[3]
    );
    // The child got the message once and answered it.
    let child = children(&env, parent).await[0].id;
    env.wait_for(child, Duration::from_secs(20), "the second answer", |c| {
        c.status == ChatStatus::Waiting && c.worker_id.is_none() && c.message_count >= 4
    })
    .await;
    let users: Vec<String> = env
        .active_messages(child)
        .await
        .iter()
        .filter(|m| m.role == ChatRole::User)
        .map(text_of)
        .collect();
    assert_eq!(users, [CHILD_PROMPT, "CHILD: again"]);
    // The stranger got nothing.
    assert_eq!(env.active_messages(stranger).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_root_archive_archives_the_children() {
    let env = Env::new().await;
    route_llm(&env, spawn_then_wait(60), Arc::new(|_| Script::text("ok")));
    let _worker = env.worker();
    let parent = create_parent(&env, "PARENT: delegate").await;
    env.wait_status(parent, ChatStatus::Waiting).await;
    let child = children(&env, parent).await[0].id;
    env.wait_status(child, ChatStatus::Waiting).await;
    let archived = env.store.set_family_archived(parent, true).await.unwrap();
    assert_eq!(
        archived
            .iter()
            .map(|c| (c.id, c.archived))
            .collect::<Vec<_>>(),
        [(parent, true), (child, true)]
    );
}
