//! The request body and headers `OpenAiProvider` sends, captured by the fake
//! LLM; and what the one constructor (`ProviderConfig::build`) builds for
//! each provider kind.

use std::time::Duration;

use chatd_core::{ChatRole, MessagePart, ProviderKind};
use chatd_llm::Provider as _;
use chatd_llm::{
    HttpOptions, MaxTokensParam, ModelRequest, OpenAiProvider, ProviderConfig, RequestMessage,
    ToolSpec, collect,
};
use chatd_testkit::{FakeLlm, Script};
use serde_json::json;

fn history() -> Vec<RequestMessage> {
    vec![
        RequestMessage::text(ChatRole::System, "You are terse."),
        RequestMessage {
            role: ChatRole::User,
            parts: vec![
                MessagePart::text("What is the weather in Paris and Rome?"),
                MessagePart::File {
                    file_id: uuid::Uuid::nil(),
                    media_type: "image/png".into(),
                    name: Some("map.png".into()),
                },
            ],
        },
        RequestMessage {
            role: ChatRole::Assistant,
            parts: vec![
                MessagePart::reasoning("Two cities: two calls."),
                MessagePart::text("Checking both."),
                MessagePart::ToolCall {
                    tool_call_id: "call_1".into(),
                    tool_name: "get_weather".into(),
                    args: r#"{"city":"Paris"}"#.into(),
                },
                MessagePart::ToolCall {
                    tool_call_id: "call_2".into(),
                    tool_name: "get_weather".into(),
                    args: String::new(),
                },
            ],
        },
        RequestMessage {
            role: ChatRole::Tool,
            parts: vec![
                MessagePart::ToolResult {
                    tool_call_id: "call_1".into(),
                    tool_name: "get_weather".into(),
                    result: json!({"temp_c": 21, "sky": "clear"}),
                    is_error: false,
                },
                MessagePart::ToolResult {
                    tool_call_id: "call_2".into(),
                    tool_name: "get_weather".into(),
                    result: json!({"error": "Tool execution interrupted by user"}),
                    is_error: true,
                },
            ],
        },
        RequestMessage {
            role: ChatRole::Assistant,
            parts: vec![MessagePart::reasoning("only reasoning: nothing to send")],
        },
        RequestMessage::text(ChatRole::User, "Thanks!"),
    ]
}

/// Tool results are sent as JSON *strings*; parse them back so the
/// comparison does not depend on key order.
fn with_tool_contents_parsed(mut body: serde_json::Value) -> serde_json::Value {
    for message in body["messages"].as_array_mut().unwrap() {
        if message["role"] == "tool" {
            let text = message["content"]
                .as_str()
                .expect("tool content is a string")
                .to_owned();
            message["content"] = serde_json::from_str(&text).unwrap();
        }
    }
    body
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "gpt-test".into(),
        messages: history(),
        tools: vec![ToolSpec {
            name: "get_weather".into(),
            description: "Current weather in a city".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }],
        max_output_tokens: Some(256),
        temperature: Some(0.7),
        reasoning_effort: Some("low".into()),
        provider_tools: Vec::new(),
        files: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_projects_history_tools_and_options_onto_chat_completions() {
    let llm = FakeLlm::start().await.unwrap();
    llm.push(Script::text("ok"));
    let provider = OpenAiProvider::new(
        format!("{}/", llm.base_url()),
        Some("sk-test".into()),
        "fake",
    )
    .unwrap();
    assert_eq!(
        provider.endpoint(),
        format!("{}/chat/completions", llm.base_url())
    );
    let response = collect(provider.stream(&request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(response.text, "ok");

    let recorded = llm
        .wait_for_request(1, Duration::from_secs(5))
        .await
        .unwrap();
    let body = with_tool_contents_parsed(recorded.body.clone());
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path, "/v1/chat/completions");
    assert_eq!(recorded.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(recorded.header("content-type"), Some("application/json"));
    let placeholder = format!(
        "[Attached file map.png (image/png), id {}, not shown to the model]",
        uuid::Uuid::nil()
    );
    assert_eq!(
        body,
        json!({
            "model": "gpt-test",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_completion_tokens": 256,
            "temperature": 0.7,
            "reasoning_effort": "low",
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Current weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }}],
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": format!("What is the weather in Paris and Rome?\n{placeholder}")},
                {"role": "assistant", "content": "Checking both.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": {"temp_c": 21, "sky": "clear"}},
                {"role": "tool", "tool_call_id": "call_2", "content": {"error": "Tool execution interrupted by user"}},
                {"role": "user", "content": "Thanks!"},
            ],
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_without_key_or_options_sends_no_authorization_and_no_optional_fields() {
    let llm = FakeLlm::start().await.unwrap();
    llm.push(Script::text("ok"));
    let provider = OpenAiProvider::new(llm.base_url(), None, "local")
        .unwrap()
        .max_tokens_param(MaxTokensParam::MaxTokens);
    let mut request = ModelRequest {
        model: "m".into(),
        messages: vec![
            RequestMessage {
                role: ChatRole::Assistant,
                parts: vec![MessagePart::ToolCall {
                    tool_call_id: "c".into(),
                    tool_name: "t".into(),
                    args: "{}".into(),
                }],
            },
            RequestMessage {
                role: ChatRole::Tool,
                parts: vec![MessagePart::ToolResult {
                    tool_call_id: "c".into(),
                    tool_name: "t".into(),
                    result: json!("a plain string result"),
                    is_error: false,
                }],
            },
        ],
        ..ModelRequest::default()
    };
    collect(provider.stream(&request).await.unwrap())
        .await
        .unwrap();
    let recorded = llm
        .wait_for_request(1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(recorded.header("authorization"), None);
    assert_eq!(
        recorded.body,
        json!({
            "model": "m",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "c", "content": "\"a plain string result\""},
            ],
        })
    );

    // The legacy field name, when chosen.
    request.max_output_tokens = Some(16);
    llm.push(Script::text("ok"));
    collect(provider.stream(&request).await.unwrap())
        .await
        .unwrap();
    let recorded = llm
        .wait_for_request(2, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(recorded.body["max_tokens"], json!(16));
    assert!(recorded.body.get("max_completion_tokens").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_constructor_picks_the_endpoint_key_header_and_token_field_of_each_kind() {
    let llm = FakeLlm::start().await.unwrap();
    let cases = [
        (
            ProviderKind::Openai,
            "/v1/chat/completions",
            "authorization",
            "Bearer k",
            "max_completion_tokens",
        ),
        (
            ProviderKind::OpenaiCompat,
            "/v1/chat/completions",
            "authorization",
            "Bearer k",
            "max_tokens",
        ),
        (
            ProviderKind::Anthropic,
            "/v1/messages",
            "x-api-key",
            "k",
            "max_tokens",
        ),
    ];
    for (n, (kind, path, key_header, key_value, token_field)) in cases.into_iter().enumerate() {
        llm.push(Script::text("ok"));
        let provider = ProviderConfig {
            kind,
            base_url: Some(format!("{}/", llm.base_url())),
            api_key: Some("k".into()),
            name: format!("{kind} row"),
            http: HttpOptions::default(),
        }
        .build()
        .unwrap();
        assert_eq!(provider.name(), format!("{kind} row"));
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![RequestMessage::text(ChatRole::User, "Hi")],
            max_output_tokens: Some(16),
            ..ModelRequest::default()
        };
        let response = collect(provider.stream(&request).await.unwrap())
            .await
            .unwrap();
        assert_eq!(response.text, "ok", "{kind}");
        let recorded = llm
            .wait_for_request(n + 1, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(recorded.path, path, "{kind}");
        assert_eq!(recorded.header(key_header), Some(key_value), "{kind}");
        assert_eq!(recorded.body[token_field], json!(16), "{kind}");
        let other = ["max_tokens", "max_completion_tokens"]
            .into_iter()
            .find(|f| *f != token_field)
            .unwrap();
        assert!(recorded.body.get(other).is_none(), "{kind}: {other}");
    }
}
