//! Provider-hosted web search (API.md "Workspaces and provider-hosted
//! tools"): the providers' documented examples, transcribed by hand into
//! `tests/fixtures/{anthropic,openai}-docs-web-search.sse`, decode into
//! provider-tool parts and cited text that are never tool calls; the
//! request bodies carry the tool and send earlier searches back.

use chatd_core::{ChatRole, Citation, MessagePart};
use chatd_llm::{FinishReason, ModelRequest, RequestMessage};
use serde_json::{Value, json};

use crate::support::{ReplayServer, Reply, builder_of, read_fixture, run};

const SEARCH_ID: &str = "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE";
const SHANNON_URL: &str = "https://en.wikipedia.org/wiki/Claude_Shannon";
const ENCRYPTED_CONTENT: &str = "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y...";
const ENCRYPTED_INDEX: &str = "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm..";

fn search_results() -> Value {
    json!([{
        "type": "web_search_result",
        "url": SHANNON_URL,
        "title": "Claude Shannon - Wikipedia",
        "encrypted_content": ENCRYPTED_CONTENT,
        "page_age": "April 30, 2025",
    }])
}

/// The parts the Anthropic documentation example's answer is stored as.
fn anthropic_parts() -> Vec<MessagePart> {
    vec![
        MessagePart::text("I'll search for when Claude Shannon was born."),
        MessagePart::ProviderToolCall {
            tool_call_id: SEARCH_ID.into(),
            tool_name: "web_search".into(),
            input: json!({"query": "claude shannon birth date"}),
        },
        MessagePart::ProviderToolResult {
            tool_call_id: SEARCH_ID.into(),
            tool_name: "web_search".into(),
            result: search_results(),
            is_error: false,
        },
        MessagePart::text("Based on the search results, "),
        MessagePart::Text {
            text: "Claude Shannon was born on April 30, 1916, in Petoskey, Michigan".into(),
            citations: vec![Citation {
                url: SHANNON_URL.into(),
                title: Some("Claude Shannon - Wikipedia".into()),
                cited_text: Some(
                    "Claude Elwood Shannon (April 30, 1916 – February 24, 2001) was an American \
                     mathematician, electrical engineer, computer scientist, cryptographist and i..."
                        .into(),
                ),
                encrypted_index: Some(ENCRYPTED_INDEX.into()),
            }],
        },
    ]
}

fn search_request(messages: Vec<RequestMessage>) -> ModelRequest {
    ModelRequest {
        model: "claude-opus-4-20250514".into(),
        messages,
        provider_tools: vec!["web_search".into()],
        ..ModelRequest::default()
    }
}

#[tokio::test]
async fn anthropics_documented_web_search_decodes_into_provider_parts_and_cited_text() {
    let body = read_fixture("anthropic-docs-web-search.sse").expect("own fixture");
    let server = ReplayServer::start(Reply::sse(body)).await;
    let request = search_request(vec![RequestMessage::text(
        ChatRole::User,
        "When was Claude Shannon born?",
    )]);
    let items = run(&server.anthropic(), &request).await.expect("stream");
    let builder = builder_of(&items);
    assert!(
        builder.tool_calls().is_empty(),
        "a provider-hosted search is never a call chatd runs"
    );
    let response = builder.into_response().expect("complete");
    assert_eq!(response.finish, FinishReason::Stop);
    assert_eq!(response.parts, anthropic_parts());
    assert!(response.tool_calls.is_empty());

    // The request offered the server tool next to no client tools.
    let sent = &server.bodies()[0];
    assert_eq!(
        sent["tools"],
        json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}])
    );
}

#[test]
fn a_later_anthropic_turn_sends_the_search_back_verbatim() {
    let history = vec![
        RequestMessage::text(ChatRole::User, "When was Claude Shannon born?"),
        RequestMessage {
            role: ChatRole::Assistant,
            parts: anthropic_parts(),
        },
        RequestMessage::text(ChatRole::User, "And where did he die?"),
    ];
    let body = chatd_llm::anthropic::wire::request_body(&search_request(history.clone()));
    let assistant = &body["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    let blocks = assistant["content"].as_array().unwrap();
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "text",
            "server_tool_use",
            "web_search_tool_result",
            "text",
            "text"
        ]
    );
    assert_eq!(
        blocks[1],
        json!({"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search",
            "input": {"query": "claude shannon birth date"}})
    );
    assert_eq!(
        blocks[2],
        json!({"type": "web_search_tool_result", "tool_use_id": SEARCH_ID, "content": search_results()})
    );
    assert_eq!(
        blocks[4]["citations"][0]["encrypted_index"], ENCRYPTED_INDEX,
        "the citation goes back with its encrypted index"
    );
    assert_eq!(
        blocks[4]["citations"][0]["type"],
        "web_search_result_location"
    );

    // A model without the search gets the text only.
    let plain = chatd_llm::anthropic::wire::request_body(&ModelRequest {
        provider_tools: Vec::new(),
        ..search_request(history.clone())
    });
    assert!(plain.get("tools").is_none());
    let blocks = plain["messages"][1]["content"].as_array().unwrap();
    assert!(
        blocks
            .iter()
            .all(|b| b["type"] == "text" && b.get("citations").is_none()),
        "{blocks:?}"
    );

    // OpenAI-compatible servers get the text only, too.
    let openai = chatd_llm::openai::wire::request_body(
        &search_request(history),
        chatd_llm::openai::wire::MaxTokensParam::default(),
    );
    assert_eq!(openai["web_search_options"], json!({}));
    assert_eq!(
        openai["messages"][1],
        json!({"role": "assistant", "content": "I'll search for when Claude Shannon was born.\nBased on the search results, \nClaude Shannon was born on April 30, 1916, in Petoskey, Michigan"})
    );
}

#[test]
fn an_answer_cut_off_before_the_search_result_sends_no_server_tool_use() {
    let mut parts = anthropic_parts();
    parts.remove(2);
    let history = vec![
        RequestMessage::text(ChatRole::User, "When was Claude Shannon born?"),
        RequestMessage {
            role: ChatRole::Assistant,
            parts,
        },
        RequestMessage::text(ChatRole::User, "Go on."),
    ];
    let body = chatd_llm::anthropic::wire::request_body(&search_request(history));
    let blocks = body["messages"][1]["content"].as_array().unwrap();
    assert!(blocks.iter().all(|b| b["type"] == "text"), "{blocks:?}");
}

#[tokio::test]
async fn openais_documented_search_answer_decodes_its_url_citations() {
    let body = read_fixture("openai-docs-web-search.sse").expect("own fixture");
    let server = ReplayServer::start(Reply::sse(body)).await;
    let request = ModelRequest {
        model: "gpt-4o-search-preview".into(),
        messages: vec![RequestMessage::text(
            ChatRole::User,
            "What was a positive news story from today?",
        )],
        provider_tools: vec!["web_search".into()],
        ..ModelRequest::default()
    };
    let items = run(&server.provider(), &request).await.expect("stream");
    let response = builder_of(&items).into_response().expect("complete");
    assert_eq!(
        response.parts,
        vec![MessagePart::Text {
            text: "Here is a positive news story from today: a community garden project won a \
                   national award for turning vacant lots into green space."
                .into(),
            citations: vec![Citation {
                url: "https://example.com/news/community-garden?utm_source=openai".into(),
                title: Some("Community garden wins award".into()),
                cited_text: None,
                encrypted_index: None,
            }],
        }]
    );
    let sent = &server.bodies()[0];
    assert_eq!(sent["web_search_options"], json!({}));
    assert!(sent.get("tools").is_none());
}

#[test]
fn a_search_error_result_is_marked_as_an_error() {
    let sse = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_e\"}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_e\",\"name\":\"web_search\",\"input\":{\"query\":\"q\"}}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"web_search_tool_result\",\"tool_use_id\":\"srvtoolu_e\",\"content\":{\"type\":\"web_search_tool_result_error\",\"error_code\":\"max_uses_exceeded\"}}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let items = crate::support::decode_anthropic_pieces(vec![sse.as_bytes().to_vec()]);
    let response = builder_of(&items).into_response().expect("complete");
    assert_eq!(
        response.parts,
        vec![
            MessagePart::ProviderToolCall {
                tool_call_id: "srvtoolu_e".into(),
                tool_name: "web_search".into(),
                input: json!({"query": "q"}),
            },
            MessagePart::ProviderToolResult {
                tool_call_id: "srvtoolu_e".into(),
                tool_name: "web_search".into(),
                result: json!({"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}),
                is_error: true,
            },
        ]
    );
    assert!(response.tool_calls.is_empty());
}

// ------------------------------------------------------------ pause_turn

/// An Anthropic provider at the fake LLM, its paused turns continued as
/// the factory builds it.
fn continuing(llm: &chatd_testkit::FakeLlm) -> chatd_llm::anthropic::ContinuePaused {
    let key = Some("sk-ant".to_owned());
    let first = chatd_llm::AnthropicProvider::new(llm.base_url(), key.clone(), "fake").unwrap();
    let then =
        chatd_llm::anthropic::ContinuationProvider::new(llm.base_url(), key, "fake").unwrap();
    chatd_llm::anthropic::ContinuePaused::new(std::sync::Arc::new(first), std::sync::Arc::new(then))
}

/// A paused turn (`pause_turn`) is sent back as it is, with no user message
/// added, and the caller sees one response: both parts of the answer, the
/// usage summed, the final finish reason.
#[tokio::test]
async fn a_paused_turn_is_continued_within_the_same_response() {
    let llm = chatd_testkit::FakeLlm::start().await.unwrap();
    llm.push(
        chatd_testkit::Script::text("Searching. ")
            .web_search("srvtoolu_1", "shannon", &[(SHANNON_URL, "Shannon")])
            .usage(100, 10)
            .finish("pause_turn"),
    );
    llm.push(chatd_testkit::Script::text("He was born in 1916.").usage(150, 20));
    let request = search_request(vec![RequestMessage::text(
        ChatRole::User,
        "When was Claude Shannon born?",
    )]);
    let items = run(&continuing(&llm), &request).await.expect("stream");
    let response = builder_of(&items).into_response().expect("complete");
    assert_eq!(response.finish, FinishReason::Stop);
    let kinds: Vec<&str> = response
        .parts
        .iter()
        .map(|p| match p {
            MessagePart::Text { .. } => "text",
            MessagePart::ProviderToolCall { .. } => "call",
            MessagePart::ProviderToolResult { .. } => "result",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["text", "call", "result", "text"]);
    assert_eq!(response.text, "Searching. He was born in 1916.");
    let usage = response.usage.expect("usage");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (250, 30),
        "both requests' usage"
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "no user message added: {messages:?}");
    assert_eq!(messages[1]["role"], "assistant");
    let blocks: Vec<&str> = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        blocks,
        ["text", "server_tool_use", "web_search_tool_result"]
    );
    assert_eq!(requests[1].body["tools"], requests[0].body["tools"]);
}

/// A turn that stays paused is continued at most `MAX_CONTINUATIONS`
/// times, then ends `Paused` with what came (stored as `stop`).
#[tokio::test]
async fn a_turn_that_stays_paused_ends_after_the_continuations() {
    let llm = chatd_testkit::FakeLlm::start().await.unwrap();
    llm.set_default(
        chatd_testkit::Script::text("more ")
            .usage(10, 1)
            .finish("pause_turn"),
    );
    let request = search_request(vec![RequestMessage::text(ChatRole::User, "Search.")]);
    let items = run(&continuing(&llm), &request).await.expect("stream");
    let response = builder_of(&items).into_response().expect("complete");
    assert_eq!(response.finish, FinishReason::Paused);
    let n = chatd_llm::anthropic::paused::MAX_CONTINUATIONS + 1;
    assert_eq!(llm.requests().len(), n);
    assert_eq!(response.text, "more ".repeat(n));
    assert_eq!(response.usage.unwrap().input_tokens, 10 * n as i64);
}

/// In a continuation (a paused turn sent back), a search call without its
/// result goes back too, for Anthropic to run; anywhere else it is left
/// out.
#[test]
fn a_paused_turns_unanswered_search_goes_back() {
    let mut parts = anthropic_parts();
    parts.truncate(2); // the text and the call, no result
    let history = vec![
        RequestMessage::text(ChatRole::User, "When was Claude Shannon born?"),
        RequestMessage {
            role: ChatRole::Assistant,
            parts,
        },
    ];
    let request = search_request(history);
    let body = chatd_llm::anthropic::wire::continuation_body(&request);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "the paused answer is the last turn");
    let blocks: Vec<&str> = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(blocks, ["text", "server_tool_use"]);
    // An ordinary request ending with that message: the call is left out
    // and a user turn follows (Anthropic would read the answer as a
    // prefill).
    let body = chatd_llm::anthropic::wire::request_body(&request);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["content"].as_array().unwrap().len(), 1);
    assert_eq!(messages[2]["role"], "user");
}
