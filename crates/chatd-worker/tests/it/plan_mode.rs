//! Plan mode (API.md "Sub-agents and plan mode"): the model is told to
//! research and propose a plan and is offered only read-only tools (MCP
//! tools with `readOnlyHint`, dynamic tools the client marked `read_only`);
//! a call of another tool is answered with an error result and never run;
//! leaving plan mode takes effect at the next model call.

use chatd_core::{BusyBehavior, ChatRole, ChatStatus, MessagePart};
use chatd_store::chats::{self, MetadataChanges};
use chatd_store::{CreateChatInput, NewMessage};
use chatd_testkit::fake_llm::{RecordedRequest, Script};
use serde_json::{Value, json};

use crate::common::{Env, McpRow, fixture_command};

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

fn system_text(request: &RecordedRequest) -> String {
    let first = &request.body["messages"][0];
    assert_eq!(first["role"], "system", "{first}");
    first["content"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_offers_only_read_only_tools_refuses_others_and_ends_at_the_next_call() {
    let env = Env::new().await;
    let server = env
        .add_mcp_server("calc", McpRow::Stdio(fixture_command()))
        .await;
    let tools = json!([
        {"name": "pick_color", "description": "", "input_schema": {"type": "object"}},
        {"name": "lookup", "description": "Reads a page.", "input_schema": {"type": "object"}, "read_only": true},
    ]);
    // Plan mode: the model tries `calc__log` (not read-only) and `calc__add`.
    env.llm.push(
        Script::new()
            .tool_call("call_log", "calc__log", r#"{"message": "hi"}"#, 1)
            .tool_call("call_add", "calc__add", r#"{"a": 1, "b": 2}"#, 1),
    );
    env.llm.push(Script::text("Plan: 1. add. 2. log."));
    let _worker = env.worker();
    let chat = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![
                NewMessage::system("You help."),
                NewMessage::user(vec![MessagePart::text("Add and log.")]).created_by(env.owner),
            ],
            dynamic_tools: serde_json::from_value(tools).unwrap(),
            mcp_server_ids: vec![server],
            plan_mode: Some("plan".into()),
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat;
    env.wait_status(chat.id, ChatStatus::Waiting).await;
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            tool_names(request),
            ["lookup", "calc__add", "calc__whoami", "calc__getenv"]
        );
        let system = system_text(request);
        assert!(system.starts_with("You help."), "{system}");
        assert!(system.contains("You are in plan mode."), "{system}");
    }
    let results: Vec<(String, Value, bool)> = env
        .active_messages(chat.id)
        .await
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .flat_map(|m| m.content.0.clone())
        .filter_map(|p| match p {
            MessagePart::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => Some((tool_call_id, result, is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].0, "call_log");
    assert!(results[0].2, "refused: {results:?}");
    assert!(
        results[0]
            .1
            .to_string()
            .contains("not available in plan mode"),
        "{results:?}"
    );
    assert_eq!(results[1], ("call_add".to_owned(), json!("3"), false));

    // Leaving plan mode: the next model call offers every tool and no
    // plan-mode instruction.
    let changes = MetadataChanges {
        plan_mode: Some(None),
        ..MetadataChanges::default()
    };
    chats::update_metadata(
        env.db.pool().acquire().await.unwrap().as_mut(),
        chat.id,
        &changes,
    )
    .await
    .unwrap();
    env.llm.push(Script::text("Done."));
    env.send(chat.id, "Go ahead.", BusyBehavior::Queue).await;
    env.wait_status(chat.id, ChatStatus::Waiting).await;
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 3);
    let normal = &requests[2];
    assert_eq!(
        tool_names(normal),
        [
            "pick_color",
            "lookup",
            "calc__add",
            "calc__fail",
            "calc__sleep",
            "calc__whoami",
            "calc__log",
            "calc__getenv",
            "calc__exit"
        ]
    );
    assert_eq!(system_text(normal), "You help.");
}
