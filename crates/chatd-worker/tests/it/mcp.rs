//! MCP tools inside turns, against the testkit's `mcp-fixture` server process
//! (stdio and streamable HTTP): the model's call runs, its result is committed
//! with the call in one `CommitStep` and streamed into the episode, the next
//! model request carries both; parallel calls commit together; tool errors
//! are `is_error` results; a step with MCP and dynamic calls commits the MCP
//! results, then waits for the client.

use chatd_core::{ChatRole, ChatStatus, MessagePart, PartDelta};
use chatd_store::ChatMessage;
use chatd_testkit::McpHttpFixture;
use chatd_testkit::fake_llm::Script;
use chatd_worker::Worker;
use serde_json::json;
use uuid::Uuid;

use crate::common::{
    Env, McpRow, episode, fixture_command, pick_color_tool, text_of, tool_results as results,
};

/// Registers the fixture's `calc` server (stdio); returns its id.
async fn calc_server(env: &Env) -> Uuid {
    env.add_mcp_server("calc", McpRow::Stdio(fixture_command()))
        .await
}

/// Starts a worker and a chat on `server` with the message `text`, and
/// waits for the end of the turn; returns the worker, the chat and its
/// active messages.
async fn run_turn(env: &Env, text: &str, server: Uuid) -> (Worker, Uuid, Vec<ChatMessage>) {
    let worker = env.worker();
    let chat_id = env.create_chat_with_mcp(text, vec![server], None).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    (worker, chat_id, messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_mcp_call_commits_with_its_call_in_one_step_and_goes_back_to_the_model() {
    let env = Env::new().await;
    let server = calc_server(&env).await;
    env.llm.push(Script::new().then_text("Adding.").tool_call(
        "call_add",
        "calc__add",
        r#"{"a": 2, "b": 3}"#,
        3,
    ));
    env.llm.push(Script::text("The sum is 5."));
    let (worker, chat_id, messages) = run_turn(&env, "2+3?", server).await;

    let roles: Vec<ChatRole> = messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![
            ChatRole::User,
            ChatRole::Assistant,
            ChatRole::Tool,
            ChatRole::Assistant
        ]
    );
    assert_eq!(
        messages[1].revision, messages[2].revision,
        "the call and its result were committed by one CommitStep"
    );
    assert_eq!(
        results(&messages),
        vec![("call_add".to_owned(), json!("5"), false)]
    );
    assert_eq!(text_of(&messages[3]), "The sum is 5.");

    // The tools were offered as <slug>__<tool>.
    let requests = env.llm.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"calc__add") && offered.contains(&"calc__whoami"));
    // The next request carries the call and its result.
    let sent = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(
        sent[1]["tool_calls"][0]["function"]["name"],
        json!("calc__add")
    );
    assert_eq!(
        sent[2],
        json!({"role": "tool", "tool_call_id": "call_add", "content": "\"5\""})
    );
    // The result streamed into the attempt's episode as a tool part.
    let parts = worker.parts().get_parts(episode(chat_id, 1, 1)).unwrap();
    let streamed = parts
        .iter()
        .find(|p| matches!(p.part, PartDelta::ToolResult { .. }))
        .expect("a streamed tool result");
    assert_eq!(streamed.role, ChatRole::Tool);
    assert_eq!(
        streamed.part,
        PartDelta::ToolResult {
            tool_call_id: "call_add".into(),
            tool_name: "calc__add".into(),
            result: json!("5"),
            is_error: false,
        }
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_commit_together_with_errors_as_results_and_the_idempotency_key() {
    let env = Env::new().await;
    let server = calc_server(&env).await;
    env.llm.push(
        Script::new()
            .tool_call("call_1", "calc__add", r#"{"a": 20, "b": 22}"#, 2)
            .tool_call("call_2", "calc__fail", r#"{"message": "no luck"}"#, 1)
            .tool_call("call_3", "calc__whoami", "{}", 1)
            .tool_call("call_4", "nowhere__tool", "{}", 1),
    );
    env.llm.push(Script::text("Done."));
    let (worker, chat_id, messages) = run_turn(&env, "go", server).await;
    let step: Vec<&ChatMessage> = messages
        .iter()
        .filter(|m| m.revision == messages[1].revision)
        .collect();
    assert_eq!(step.len(), 5, "the assistant message and four results");
    let results = results(&messages);
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], ("call_1".to_owned(), json!("42"), false));
    assert_eq!(
        results[1],
        ("call_2".to_owned(), json!({"error": "no luck"}), true)
    );
    let (id, who, is_error) = &results[2];
    assert_eq!((id.as_str(), *is_error), ("call_3", false));
    // (chat_id, history_version, generation_attempt, tool_call_id)
    assert_eq!(
        who["meta"]["chatd/idempotency_key"],
        json!(format!("{chat_id}:1:1:call_3"))
    );
    assert_eq!(
        results[3],
        (
            "call_4".to_owned(),
            json!({"error": "Unknown tool: nowhere__tool"}),
            true
        )
    );
    assert_eq!(text_of(messages.last().unwrap()), "Done.");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_mcp_call_runs_inside_a_turn() {
    let fixture = McpHttpFixture::start().await.unwrap();
    let env = Env::anthropic().await;
    let server = env.add_mcp_server("web", McpRow::Http(fixture.url())).await;
    env.llm
        .push(Script::new().tool_call("toolu_1", "web__add", r#"{"a": 1, "b": 2}"#, 2));
    env.llm.push(Script::text("3."));
    let (worker, _, messages) = run_turn(&env, "1+2?", server).await;
    assert_eq!(messages[1].revision, messages[2].revision);
    assert_eq!(
        results(&messages),
        vec![("toolu_1".to_owned(), json!("3"), false)]
    );
    // Anthropic's next request: tool_use in the assistant turn, tool_result
    // first in the following user turn.
    let second = &env.llm.requests()[1].body;
    assert_eq!(
        second["messages"][1]["content"][0]["name"],
        json!("web__add")
    );
    assert_eq!(
        second["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"})
    );
    assert_eq!(text_of(messages.last().unwrap()), "3.");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_and_dynamic_calls_in_one_step_commit_the_mcp_results_then_wait_for_the_client() {
    let env = Env::new().await;
    let server = calc_server(&env).await;
    env.llm.push(
        Script::new()
            .tool_call("call_mcp", "calc__add", r#"{"a": 1, "b": 1}"#, 1)
            .tool_call("call_client", "pick_color", "{}", 1),
    );
    env.llm.push(Script::text("2 and blue."));
    let worker = env.worker();
    let tools = pick_color_tool();
    let chat_id = env
        .create_chat_with_mcp("go", vec![server], Some(tools))
        .await;
    let chat = env.wait_requires_action(chat_id).await;
    assert!(chat.requires_action_deadline_at.is_some());
    let messages = env.active_messages(chat_id).await;
    assert_eq!(messages.len(), 3, "assistant + the MCP result");
    assert_eq!(messages[1].revision, messages[2].revision);
    assert_eq!(
        results(&messages),
        vec![("call_mcp".to_owned(), json!("2"), false)]
    );
    env.complete_requires_action(chat_id, "call_client", r#""blue""#)
        .await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(text_of(messages.last().unwrap()), "2 and blue.");
    let sent = env.llm.requests()[1].body["messages"].clone();
    let tool_ids: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(tool_ids, vec!["call_mcp", "call_client"]);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_at_the_token_limit_is_answered_with_an_error_and_not_run() {
    let env = Env::anthropic().await;
    let server = calc_server(&env).await;
    // The fake closes every tool block; a length finish with invalid JSON is
    // what a cut-off call looks like to the worker.
    env.llm.push(
        Script::new()
            .tool_call("toolu_cut", "calc__add", r#"{"a": 1, "b"#, 1)
            .finish("length"),
    );
    env.llm.push(Script::text("Sorry, retrying later."));
    let (worker, _, messages) = run_turn(&env, "go", server).await;
    let results = results(&messages);
    assert_eq!(results.len(), 1);
    assert!(results[0].2);
    assert!(
        results[0].1["error"]
            .as_str()
            .unwrap()
            .contains("cut off at the output token limit")
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_left_without_a_result_is_run_before_the_model_is_called_again() {
    let env = Env::new().await;
    let server = calc_server(&env).await;
    env.llm.push(Script::text("It was 7."));
    let worker = env.worker();
    // History as an older writer could have left it: a call, no result.
    let chat_id = env
        .store
        .create_chat(chatd_store::CreateChatInput {
            owner_id: env.owner,
            mcp_server_ids: vec![server],
            initial_messages: vec![
                chatd_store::NewMessage::user(vec![MessagePart::text("3+4?")]),
                chatd_store::NewMessage::assistant(vec![
                    MessagePart::ToolCall {
                        tool_call_id: "call_old".into(),
                        tool_name: "calc__add".into(),
                        args: r#"{"a": 3, "b": 4}"#.into(),
                    },
                    MessagePart::ToolCall {
                        tool_call_id: "call_gone".into(),
                        tool_name: "removed_tool".into(),
                        args: "{}".into(),
                    },
                ]),
            ],
            ..chatd_store::CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(
        results(&messages),
        vec![
            ("call_old".to_owned(), json!("7"), false),
            (
                "call_gone".to_owned(),
                json!({"error": "Unknown tool: removed_tool"}),
                true
            ),
        ]
    );
    assert_eq!(text_of(messages.last().unwrap()), "It was 7.");
    assert_eq!(env.llm.requests().len(), 1);
    worker.shutdown().await;
}

/// API.md "Busy behaviours and the queue": a steer message sent while the
/// model works goes into history with the step that continues the turn,
/// right after its tool result, so the very next model request reads it;
/// an ordinary queued message waits for the end of the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_message_reaches_the_next_model_call_of_the_running_turn() {
    let env = Env::new().await;
    let server = calc_server(&env).await;
    env.llm.push(
        Script::new()
            .delay(std::time::Duration::from_millis(400))
            .tool_call("call_add", "calc__add", r#"{"a": 2, "b": 3}"#, 2),
    );
    env.llm.push(Script::text("5, in base ten."));
    env.llm.push(Script::text("Queued one answered."));
    let worker = env.worker();
    let chat_id = env.create_chat_with_mcp("2+3?", vec![server], None).await;
    env.llm
        .wait_for_request(1, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    env.send(chat_id, "later, please", chatd_core::BusyBehavior::Queue)
        .await;
    env.send(
        chat_id,
        "answer in base ten",
        chatd_core::BusyBehavior::Steer,
    )
    .await;
    let second = env
        .llm
        .wait_for_request(2, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let sent = second.body["messages"].as_array().unwrap();
    let n = sent.len();
    assert_eq!(sent[n - 2]["role"], "tool", "{sent:?}");
    assert_eq!(
        second.last_user_text().as_deref(),
        Some("answer in base ten")
    );
    assert_eq!(sent[n - 1]["role"], "user");
    // The queued message became the next turn.
    let third = env
        .llm
        .wait_for_request(3, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(third.last_user_text().as_deref(), Some("later, please"));
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let transcript = crate::common::transcript(&env, chat_id).await;
    let roles: Vec<ChatRole> = transcript.iter().map(|(r, _)| *r).collect();
    assert_eq!(
        roles,
        [
            ChatRole::User,
            ChatRole::Assistant,
            ChatRole::Tool,
            ChatRole::User,
            ChatRole::Assistant,
            ChatRole::User,
            ChatRole::Assistant
        ]
    );
    let messages = env.active_messages(chat_id).await;
    assert_eq!(
        messages[2].revision, messages[3].revision,
        "the steer message was committed with the step"
    );
    assert!(messages[3].queued_message_id.is_some());
    worker.shutdown().await;
}
