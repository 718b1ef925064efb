//! Tool approval inside turns (API.md "Tool approval (human in the loop)"),
//! against the testkit's `mcp-fixture` server and the fake LLM: a call
//! that needs approval waits in `requires_action` while the step's other
//! MCP calls run and commit with it; an approved call runs once and its
//! result goes back to the model; a denied one is answered with the denial
//! and the model continues; an approval survives the crash of the worker
//! that asked for it, and the new owner runs the call once without asking
//! again.

use chatd_core::{ChatRole, ChatStatus, DENIED_TOOL_RESULT, MessagePart, Visibility};
use chatd_store::{ChatMessage, ToolResultInput};
use chatd_testkit::McpHttpFixture;
use chatd_testkit::fake_llm::Script;
use serde_json::json;
use std::time::Duration;

use crate::common::{Env, McpRow, fixture_command, text_of, tool_results as results};

fn approvals(messages: &[ChatMessage]) -> usize {
    messages
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter(|p| matches!(p, MessagePart::ToolApproval { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_mcp_call_runs_once_after_the_decision_and_the_model_reads_its_result() {
    let env = Env::new().await;
    let server = env
        .add_mcp_server("calc", McpRow::Stdio(fixture_command()))
        .await;
    env.set_require_approval(server, json!(["whoami"])).await;
    // One step: a call that needs approval and one that does not.
    env.llm.push(
        Script::new()
            .tool_call("call_who", "calc__whoami", "{}", 1)
            .tool_call("call_add", "calc__add", r#"{"a": 2, "b": 3}"#, 1),
    );
    env.llm.push(Script::text("Done."));
    let worker = env.worker();
    let chat_id = env.create_chat_with_mcp("go", vec![server], None).await;
    let waiting = env.wait_requires_action(chat_id).await;
    assert!(waiting.requires_action_deadline_at.is_some());

    // The call that needs no approval ran and was committed with the step;
    // the other waits without a result.
    let messages = env.active_messages(chat_id).await;
    assert_eq!(
        messages.iter().map(|m| m.role).collect::<Vec<_>>(),
        vec![ChatRole::User, ChatRole::Assistant, ChatRole::Tool]
    );
    assert_eq!(messages[1].revision, messages[2].revision, "one CommitStep");
    assert_eq!(
        results(&messages),
        vec![("call_add".to_owned(), json!("5"), false)]
    );
    assert_eq!(env.llm.requests().len(), 1, "the model waits too");

    env.answer(
        chat_id,
        vec![ToolResultInput::decision("call_who", true, None)],
    )
    .await;
    let decided_at = env.chat(chat_id).await.history_version;
    env.wait_status(chat_id, ChatStatus::Waiting).await;

    let messages = env.active_messages(chat_id).await;
    let roles: Vec<(ChatRole, Visibility)> =
        messages.iter().map(|m| (m.role, m.visibility)).collect();
    assert_eq!(
        roles,
        vec![
            (ChatRole::User, Visibility::Both),
            (ChatRole::Assistant, Visibility::Both),
            (ChatRole::Tool, Visibility::Both),
            (ChatRole::Tool, Visibility::User),
            (ChatRole::Tool, Visibility::Both),
            (ChatRole::Assistant, Visibility::Both),
        ]
    );
    let results = results(&messages);
    assert_eq!(results.len(), 2, "one result per call: {results:?}");
    let (id, who, is_error) = &results[1];
    assert_eq!((id.as_str(), *is_error), ("call_who", false));
    // Run once, by the process that ran `add` first, with the key of the
    // history version the decision committed (no model attempt since).
    assert_eq!(who["calls"], json!(2));
    assert_eq!(
        who["meta"]["chatd/idempotency_key"],
        json!(format!("{chat_id}:{decided_at}:0:call_who"))
    );
    assert_eq!(text_of(&messages[5]), "Done.");
    // The model saw both results and never the approval row.
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 2);
    let sent = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(
        sent.iter().filter(|m| m["role"] == json!("tool")).count(),
        2,
        "{sent:?}"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_answered_with_the_denial_and_the_model_continues() {
    let env = Env::new().await;
    let server = env
        .add_mcp_server("calc", McpRow::Stdio(fixture_command()))
        .await;
    env.set_require_approval(server, json!("always")).await;
    env.llm
        .push(Script::new().tool_call("call_add", "calc__add", r#"{"a": 1, "b": 1}"#, 1));
    env.llm.push(Script::text("Understood, I will not add."));
    let worker = env.worker();
    let chat_id = env.create_chat_with_mcp("go", vec![server], None).await;
    env.wait_requires_action(chat_id).await;
    env.answer(
        chat_id,
        vec![ToolResultInput::decision(
            "call_add",
            false,
            Some("not now".into()),
        )],
    )
    .await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;

    let messages = env.active_messages(chat_id).await;
    let denial = json!({"error": DENIED_TOOL_RESULT, "reason": "not now"});
    assert_eq!(
        results(&messages),
        vec![("call_add".to_owned(), denial.clone(), true)]
    );
    assert_eq!(approvals(&messages), 0);
    assert_eq!(
        text_of(messages.last().unwrap()),
        "Understood, I will not add."
    );
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 2, "the model was called again");
    assert_eq!(
        requests[1].trailing_tool_results(),
        vec![denial.to_string()]
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approval_survives_a_crash_and_the_new_owner_runs_the_call_once_without_asking_again() {
    // One server process for both workers: its call count is the number of
    // times the call ran, whichever worker ran it.
    let fixture = McpHttpFixture::start().await.unwrap();
    let env = Env::new().await;
    let server = env.add_mcp_server("web", McpRow::Http(fixture.url())).await;
    env.set_require_approval(server, json!(["whoami"])).await;
    env.llm
        .push(Script::new().tool_call("call_who", "web__whoami", "{}", 1));
    env.llm.push(Script::text("Ran it."));
    let a = env.worker();
    let chat_id = env.create_chat_with_mcp("go", vec![server], None).await;
    env.wait_requires_action(chat_id).await;

    // The worker that asked dies; the decision is committed meanwhile.
    a.crash();
    env.answer(
        chat_id,
        vec![ToolResultInput::decision(
            "call_who",
            true,
            Some("ok".into()),
        )],
    )
    .await;
    let b = env.worker();
    env.wait_owned_by(chat_id, &b, Duration::from_secs(20))
        .await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;

    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    assert_eq!(results.len(), 1, "exactly one result: {results:?}");
    let (id, who, is_error) = &results[0];
    assert_eq!((id.as_str(), *is_error), ("call_who", false));
    assert_eq!(who["calls"], json!(1), "the call ran once");
    assert_eq!(approvals(&messages), 1, "asked once");
    assert_eq!(text_of(messages.last().unwrap()), "Ran it.");
    assert_eq!(env.llm.requests().len(), 2);
    // Never back in requires_action: one assistant step before the answer.
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .count(),
        2
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_answers_a_pending_approval_as_timed_out_and_the_model_continues() {
    let env = Env::new().await;
    let store = chatd_store::Store::with_config(
        env.db.pool().clone(),
        std::sync::Arc::new(env.pubsub.clone()),
        chatd_store::StoreConfig {
            requires_action_timeout: Duration::from_millis(500),
            ..Default::default()
        },
    );
    let env = Env { store, ..env };
    let server = env
        .add_mcp_server("calc", McpRow::Stdio(fixture_command()))
        .await;
    env.set_require_approval(server, json!("always")).await;
    env.llm
        .push(Script::new().tool_call("call_add", "calc__add", r#"{"a": 1, "b": 2}"#, 1));
    env.llm.push(Script::text("Nobody approved; moving on."));
    let worker = env.worker();
    let chat_id = env.create_chat_with_mcp("go", vec![server], None).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(
        results(&messages),
        vec![(
            "call_add".to_owned(),
            json!({"error": chatd_core::TIMED_OUT_TOOL_RESULT}),
            true
        )],
        "never run, answered by the deadline"
    );
    assert_eq!(
        text_of(messages.last().unwrap()),
        "Nobody approved; moving on."
    );
    assert_eq!(env.llm.requests().len(), 2);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_answers_a_pending_approval_and_ends_the_turn() {
    let env = Env::new().await;
    let server = env
        .add_mcp_server("calc", McpRow::Stdio(fixture_command()))
        .await;
    env.set_require_approval(server, json!(["add"])).await;
    env.llm
        .push(Script::new().tool_call("call_add", "calc__add", r#"{"a": 1, "b": 2}"#, 1));
    let worker = env.worker();
    let chat_id = env.create_chat_with_mcp("go", vec![server], None).await;
    env.wait_requires_action(chat_id).await;
    env.store
        .machine(chat_id)
        .update(|tx| Box::pin(async move { tx.interrupt().await }))
        .await
        .unwrap();
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(
        results(&messages),
        vec![(
            "call_add".to_owned(),
            json!({"error": chatd_core::INTERRUPTED_TOOL_RESULT}),
            true
        )]
    );
    assert_eq!(env.llm.requests().len(), 1, "the turn stopped");
    worker.shutdown().await;
}
