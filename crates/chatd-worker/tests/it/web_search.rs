//! Provider-hosted web search end to end (API.md "Workspaces and
//! provider-hosted tools"): a model config with `options.provider_tools`
//! passes the search to the provider (the fake LLM in Anthropic and in
//! OpenAI mode); the stored answer holds the provider's call, its result
//! and the cited text; chatd runs nothing and the turn finishes.

use std::time::Duration;

use chatd_core::{BusyBehavior, ChatStatus, Citation, MessagePart};
use chatd_testkit::fake_llm::Script;
use serde_json::json;

use crate::common::Env;

const URL: &str = "https://example.org/shannon";

fn search_answer() -> Script {
    Script::new()
        .then_text("Let me look that up.")
        .web_search(
            "srvtoolu_fake_1",
            "claude shannon birth date",
            &[(URL, "Claude Shannon")],
        )
        .cited_text(
            "Shannon was born on April 30, 1916.",
            URL,
            "Claude Shannon",
            "Claude Elwood Shannon (April 30, 1916 – ...",
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_web_search_is_stored_with_its_citations_and_never_run_by_chatd() {
    let env = Env::anthropic().await;
    env.set_model_options(json!({"provider_tools": ["web_search"]}))
        .await;
    env.llm.push(search_answer());
    env.llm.push(Script::text("He died in 2001."));
    let worker = env.worker();
    let chat_id = env.create_chat("When was Claude Shannon born?").await;
    let chat = env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(messages.len(), 2, "one answer, no tool rows: {messages:?}");
    assert_eq!(
        messages[1].content.0,
        vec![
            MessagePart::text("Let me look that up."),
            MessagePart::ProviderToolCall {
                tool_call_id: "srvtoolu_fake_1".into(),
                tool_name: "web_search".into(),
                input: json!({"query": "claude shannon birth date"}),
            },
            MessagePart::ProviderToolResult {
                tool_call_id: "srvtoolu_fake_1".into(),
                tool_name: "web_search".into(),
                result: json!([{"type": "web_search_result", "url": URL, "title": "Claude Shannon",
                    "encrypted_content": "fake-encrypted-0", "page_age": null}]),
                is_error: false,
            },
            MessagePart::Text {
                text: "Shannon was born on April 30, 1916.".into(),
                citations: vec![Citation {
                    url: URL.into(),
                    title: Some("Claude Shannon".into()),
                    cited_text: Some("Claude Elwood Shannon (April 30, 1916 – ...".into()),
                    encrypted_index: Some("fake-index".into()),
                }],
            },
        ]
    );
    let first = &env.llm.requests()[0];
    assert_eq!(
        first.body["tools"],
        json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}])
    );

    // The next turn sends the search back as the provider wrote it.
    env.send(chat_id, "And when did he die?", BusyBehavior::Queue)
        .await;
    env.wait_for(chat_id, Duration::from_secs(20), "the second answer", |c| {
        c.status == ChatStatus::Waiting && c.history_version > chat.history_version
    })
    .await;
    let second = &env.llm.requests()[1];
    let blocks = second.body["messages"][1]["content"].as_array().unwrap();
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["text", "server_tool_use", "web_search_tool_result", "text"]
    );
    assert_eq!(
        blocks[2]["content"][0]["encrypted_content"],
        "fake-encrypted-0"
    );
    assert_eq!(blocks[3]["citations"][0]["encrypted_index"], "fake-index");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_compatible_search_answer_keeps_its_url_citations() {
    let env = Env::new().await;
    env.set_model_options(json!({"provider_tools": ["web_search"]}))
        .await;
    env.llm.push(search_answer());
    let worker = env.worker();
    let chat_id = env.create_chat("When was Claude Shannon born?").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(
        messages[1].content.0,
        vec![MessagePart::Text {
            text: "Let me look that up.Shannon was born on April 30, 1916.".into(),
            citations: vec![Citation {
                url: URL.into(),
                title: Some("Claude Shannon".into()),
                cited_text: None,
                encrypted_index: None,
            }],
        }]
    );
    assert_eq!(env.llm.requests()[0].body["web_search_options"], json!({}));
    worker.shutdown().await;
}

/// Anthropic pauses a long server-tool turn (`pause_turn`): the provider
/// sends the paused answer back as it is and the model goes on, within the
/// one model call. The turn stores one answer (both parts, the usage of
/// both requests) and finishes; it does not end on the unfinished part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_anthropic_turn_is_continued_and_stored_as_one_answer() {
    let env = Env::anthropic().await;
    env.set_model_options(json!({"provider_tools": ["web_search"]}))
        .await;
    env.llm.push(
        Script::new()
            .then_text("Let me look that up.")
            .web_search("srvtoolu_fake_1", "shannon", &[(URL, "Claude Shannon")])
            .usage(100, 10)
            .finish("pause_turn"),
    );
    env.llm
        .push(Script::text("He was born in 1916.").usage(150, 20));
    let worker = env.worker();
    let chat_id = env.create_chat("When was Claude Shannon born?").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(messages.len(), 2, "one answer: {messages:?}");
    let answer = &messages[1];
    let kinds: Vec<&str> = answer
        .content
        .0
        .iter()
        .map(|p| match p {
            MessagePart::Text { .. } => "text",
            MessagePart::ProviderToolCall { .. } => "call",
            MessagePart::ProviderToolResult { .. } => "result",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["text", "call", "result", "text"]);
    assert_eq!(
        answer.content.0.last(),
        Some(&MessagePart::text("He was born in 1916."))
    );
    assert_eq!(
        answer.finish_reason,
        Some(chatd_core::FinishReason::Stop),
        "stored as a finished answer"
    );
    let usage = answer.usage().expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (250, 30));
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 2, "the paused answer went back once");
    let sent = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(sent.last().unwrap()["role"], "assistant");
    worker.shutdown().await;
}
