//! Anthropic Messages: every transcript (the project's synthetic ones, and
//! the shared recordings, SDK fixtures and documentation examples when
//! `../shared/fixtures/providers` is present) parses to what its README says,
//! replayed over HTTP through `AnthropicProvider`; the request the adapter
//! sends; and the fake LLM's Anthropic mode.
//!
//! Framing caveat (shared fixtures README): the `-sdk` and `-docs` files end
//! with an unterminated last event (`message_stop` or `error`), which the SSE
//! rules discard. [`all`] appends `"\n\n"` to those so the event counts; the
//! parser's own end-of-input policy (complete when a `stop_reason` arrived,
//! else a retryable error) is asserted separately on the unmodified bytes in
//! `unterminated_last_events_follow_the_documented_end_of_input_policy`.

use chatd_core::{ChatRole, MessagePart};
use chatd_llm::{
    AnthropicProvider, ErrorKind, FinishReason, ModelRequest, Provider as _, RequestMessage,
    StreamEvent, ToolSpec, Usage, collect,
};
use chatd_testkit::{FakeLlm, Script};
use serde_json::json;

use crate::support::{
    Items, ReplayServer, Reply, builder_of, call_triples, decode_anthropic_pieces, hello_request,
    read_fixture, run, shared_fixtures, unfinished_ids,
};
use crate::transcripts::{Expected, Outcome, check};

/// A transcript, whether its unterminated last event needs a blank line, and
/// the reasoning signatures and cut-off calls it must yield.
pub struct AnthropicExpected {
    pub expected: Expected,
    pub terminate: bool,
    pub signatures: Vec<&'static str>,
    pub unfinished: Vec<&'static str>,
}

fn usage(input: i64, output: i64, cache_read: i64, cache_creation: i64) -> Option<Usage> {
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        reasoning_tokens: 0,
        cache_read_tokens: cache_read,
        cache_creation_tokens: cache_creation,
        total_tokens: input + output + cache_read + cache_creation,
    })
}

fn entry(file: &'static str, outcome: Outcome) -> AnthropicExpected {
    AnthropicExpected {
        expected: Expected { file, outcome },
        terminate: file.ends_with("-sdk.sse") || file.ends_with("-docs.sse"),
        signatures: Vec::new(),
        unfinished: Vec::new(),
    }
}

fn complete(
    text: &'static str,
    reasoning: &'static str,
    calls: Vec<(&'static str, &'static str, &'static str)>,
    usage: Option<Usage>,
    finish: FinishReason,
) -> Outcome {
    Outcome::Complete {
        text,
        reasoning,
        calls,
        usage,
        finish,
    }
}

const THINKING_DOCS: &str = "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3\n3. 27 * 400 = 10,800\n4. 27 * 50 = 1,350\n5. 27 * 3 = 81\n6. 10,800 + 1,350 + 81 = 12,231";
const THINKING_RECORDED: &str = "The user is asking for weather information for Florence, Italy. I have access to a weather function that takes a location parameter. The user has provided the location as \"Florence, Italy\" which is specific enough for the weather function. I have all the required parameters to make the function call.";

/// Every Anthropic transcript and what it parses to. `anthropic-synthetic-*`
/// are the project's own; the others are read from the shared directory.
pub fn all() -> Vec<AnthropicExpected> {
    vec![
        entry(
            "anthropic-synthetic-text.sse",
            complete(
                "Olá, 世界! 🦀 done.",
                "",
                vec![],
                usage(21, 12, 1500, 300),
                FinishReason::Stop,
            ),
        ),
        entry(
            "anthropic-synthetic-parallel-tool-use.sse",
            complete(
                "Checking both cities.",
                "",
                vec![
                    ("toolu_synth_a", "get_weather", r#"{"city": "São Paulo"}"#),
                    (
                        "toolu_synth_b",
                        "get_time",
                        r#"{"tz": "America/Sao_Paulo"}"#,
                    ),
                ],
                usage(502, 88, 0, 0),
                FinishReason::ToolCalls,
            ),
        ),
        AnthropicExpected {
            signatures: vec!["EqoBCkgIARABGAIiQLsynthetic+/signature=="],
            ..entry(
                "anthropic-synthetic-thinking.sse",
                complete(
                    "",
                    "The user wants the weather; I will call the tool. 🤔",
                    vec![(
                        "toolu_synth_t",
                        "weather",
                        r#"{"location": "Florence, Italy"}"#,
                    )],
                    usage(424, 119, 0, 0),
                    FinishReason::ToolCalls,
                ),
            )
        },
        entry(
            "anthropic-synthetic-error-midstream.sse",
            Outcome::Failed {
                text_before: "Partial",
                kind: ErrorKind::Generic,
                retryable: true,
                message: "Internal server error",
            },
        ),
        entry(
            "anthropic-synthetic-overloaded.sse",
            Outcome::Failed {
                text_before: "",
                kind: ErrorKind::Overloaded,
                retryable: true,
                message: "Overloaded",
            },
        ),
        AnthropicExpected {
            unfinished: vec!["toolu_synth_cut"],
            ..entry(
                "anthropic-synthetic-tool-use-max-tokens.sse",
                complete(
                    "Writing the file.",
                    "",
                    vec![(
                        "toolu_synth_cut",
                        "make_file",
                        r#"{"filename": "a.txt", "lines": ["Olá"#,
                    )],
                    usage(30, 64, 0, 0),
                    FinishReason::Length,
                ),
            )
        },
        entry(
            "anthropic-synthetic-truncated.sse",
            Outcome::Failed {
                text_before: "Cut off",
                kind: ErrorKind::Generic,
                retryable: true,
                message: "the stream ended before the response was complete",
            },
        ),
        // Shared (read at run time, skipped when absent).
        entry(
            "anthropic-text.sse",
            complete(
                "Olá! (That's \"hi\" in Portuguese)\n\nYou could also say \"Oi!\" which is a more casual way to say hi in Portuguese.",
                "",
                vec![],
                usage(16, 38, 0, 0),
                FinishReason::Stop,
            ),
        ),
        entry(
            "anthropic-text-sdk.sse",
            complete(
                "Hello there!",
                "",
                vec![],
                usage(11, 6, 0, 0),
                FinishReason::Stop,
            ),
        ),
        entry(
            "anthropic-text-docs.sse",
            complete(
                "Hello!",
                "",
                vec![],
                usage(25, 15, 0, 0),
                FinishReason::Stop,
            ),
        ),
        entry(
            "anthropic-tool-use.sse",
            complete(
                "I'll get the weather information for Florence, Italy for you.",
                "",
                vec![(
                    "toolu_01N2eM4V43kGCDkq2Lw7ChWQ",
                    "weather",
                    r#"{"location": "Florence,Italy"}"#,
                )],
                usage(394, 67, 0, 0),
                FinishReason::ToolCalls,
            ),
        ),
        entry(
            "anthropic-tool-use-sdk.sse",
            complete(
                "I'll check the current weather in Paris for you.",
                "",
                vec![(
                    "toolu_01NRLabsLyVHZPKxbKvkfSMn",
                    "get_weather",
                    r#"{"location": "Paris"}"#,
                )],
                usage(377, 65, 0, 0),
                FinishReason::ToolCalls,
            ),
        ),
        entry(
            "anthropic-tool-use-docs.sse",
            complete(
                "Okay, let's check the weather for San Francisco, CA:",
                "",
                vec![(
                    "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                    "get_weather",
                    r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#,
                )],
                usage(472, 89, 0, 0),
                FinishReason::ToolCalls,
            ),
        ),
        entry(
            "anthropic-parallel-tool-use.sse",
            complete(
                "I'll add and multiply the numbers 2 and 3 for you.",
                "",
                vec![
                    (
                        "toolu_01UYxUYC2zRPY8wiutnF48eP",
                        "add",
                        r#"{"a": 2, "b": 3}"#,
                    ),
                    (
                        "toolu_01VaRx1jpWCvPhi7L4kywAcd",
                        "multiply",
                        r#"{"a": 2, "b": 3}"#,
                    ),
                ],
                usage(502, 137, 0, 0),
                FinishReason::ToolCalls,
            ),
        ),
        AnthropicExpected {
            signatures: vec!["EtYDCkYICxgCKkAVHEWR"],
            ..entry(
                "anthropic-thinking.sse",
                complete(
                    "",
                    THINKING_RECORDED,
                    vec![(
                        "toolu_01Js4AMfx5qpTLhwTusnvT68",
                        "weather",
                        r#"{"location": "Florence, Italy"}"#,
                    )],
                    usage(424, 119, 0, 0),
                    FinishReason::ToolCalls,
                ),
            )
        },
        AnthropicExpected {
            signatures: vec!["EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds..."],
            ..entry(
                "anthropic-thinking-docs.sse",
                complete(
                    "27 * 453 = 12,231",
                    THINKING_DOCS,
                    vec![],
                    None,
                    FinishReason::Stop,
                ),
            )
        },
        entry(
            "anthropic-error-overloaded-docs.sse",
            Outcome::Failed {
                text_before: "",
                kind: ErrorKind::Overloaded,
                retryable: true,
                message: "Overloaded",
            },
        ),
    ]
}

/// The bytes to parse for `e` (with the blank line its caveat calls for).
pub fn body(e: &AnthropicExpected) -> Option<Vec<u8>> {
    let mut body = read_fixture(e.expected.file)?;
    if e.terminate {
        body.extend_from_slice(b"\n\n");
    }
    Some(body)
}

/// Checks content, invariants, signatures and cut-off calls.
pub fn check_anthropic(e: &AnthropicExpected, items: &Items) {
    let file = e.expected.file;
    check(&e.expected, items);
    let builder = builder_of(items);
    let signatures: Vec<String> = items
        .iter()
        .flatten()
        .filter_map(|event| match event {
            StreamEvent::ReasoningSignature(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(signatures.len(), e.signatures.len(), "{file}: signatures");
    for (got, want) in signatures.iter().zip(&e.signatures) {
        assert!(got.starts_with(want), "{file}: signature {got}");
    }
    // Signatures land on the reasoning part they sign.
    let signed: Vec<Option<String>> = builder
        .parts()
        .into_iter()
        .filter_map(|p| match p {
            MessagePart::Reasoning { signature, .. } => Some(signature),
            _ => None,
        })
        .collect();
    if !e.signatures.is_empty() {
        assert_eq!(
            signed,
            signatures.into_iter().map(Some).collect::<Vec<_>>(),
            "{file}"
        );
    }
    if matches!(e.expected.outcome, Outcome::Complete { .. }) {
        assert_eq!(
            unfinished_ids(&builder),
            e.unfinished,
            "{file}: cut-off calls"
        );
    }
}

#[test]
fn every_anthropic_transcript_decodes_to_its_documented_content() {
    let mut checked = 0;
    for e in all() {
        let Some(body) = body(&e) else {
            eprintln!("skipping {}: shared fixture absent", e.expected.file);
            continue;
        };
        check_anthropic(&e, &decode_anthropic_pieces(vec![body]));
        checked += 1;
    }
    assert!(checked >= 7, "the project's own Anthropic fixtures are 7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_anthropic_transcript_parses_the_same_over_http() {
    for e in all() {
        let Some(body) = body(&e) else { continue };
        let server = ReplayServer::start(Reply::sse(body)).await;
        let items = run(&server.anthropic(), &hello_request())
            .await
            .unwrap_or_else(|err| panic!("{}: request failed: {err:?}", e.expected.file));
        check_anthropic(&e, &items);
        let request = &server.bodies()[0];
        assert_eq!(request["stream"], json!(true));
        assert_eq!(request["model"], json!("test-model"));
    }
}

#[test]
fn the_recorded_signature_is_kept_byte_exact() {
    let Some(body) = read_fixture("anthropic-thinking.sse") else {
        return;
    };
    let items = decode_anthropic_pieces(vec![body]);
    let signature = items
        .iter()
        .flatten()
        .find_map(|e| match e {
            StreamEvent::ReasoningSignature(s) => Some(s.clone()),
            _ => None,
        })
        .expect("a signature");
    assert_eq!(signature.len(), 636);
    assert!(signature.starts_with("EtYDCkYICxgCKkAVHEWR"));
}

#[test]
fn a_tool_call_cut_at_max_tokens_is_reported_unfinished_and_the_text_is_kept() {
    let Some(dir) = shared_fixtures() else { return };
    let mut body = std::fs::read(dir.join("anthropic-tool-use-max-tokens-sdk.sse")).unwrap();
    body.extend_from_slice(b"\n\n");
    let items = decode_anthropic_pieces(vec![body]);
    crate::transcripts::check_invariants("max-tokens-sdk", &items);
    let builder = builder_of(&items);
    let unfinished = builder.unfinished_tool_calls();
    assert_eq!(unfinished.len(), 1);
    assert_eq!(unfinished[0].id, "toolu_01EKqbqmZrGRXy18eN7m9kvY");
    assert_eq!(unfinished[0].name, "make_file");
    assert!(unfinished[0].parsed_args().is_err(), "cut-off JSON");
    let response = builder.into_response().unwrap();
    assert_eq!(response.finish, FinishReason::Length);
    assert!(
        response
            .text
            .starts_with("I'll create a comprehensive tax guide")
            && response.text.ends_with("Let me do that for you now."),
        "{}",
        response.text
    );
    assert_eq!(response.usage.unwrap().output_tokens, 124);
}

#[test]
fn unterminated_last_events_follow_the_documented_end_of_input_policy() {
    let Some(dir) = shared_fixtures() else { return };
    // A stop_reason arrived before the discarded message_stop: complete.
    let body = std::fs::read(dir.join("anthropic-text-sdk.sse")).unwrap();
    let items = decode_anthropic_pieces(vec![body]);
    assert_eq!(
        items.last(),
        Some(&Ok(StreamEvent::Finish {
            reason: FinishReason::Stop
        }))
    );
    // Only an error event, and it is discarded: a retryable generic error,
    // never a completed message.
    let body = std::fs::read(dir.join("anthropic-error-overloaded-docs.sse")).unwrap();
    let items = decode_anthropic_pieces(vec![body]);
    assert_eq!(items.len(), 1);
    let err = items[0].clone().unwrap_err();
    assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));
}

#[test]
fn malformed_anthropic_streams_fail_with_a_retryable_generic_error() {
    let cases: [(&str, &str); 4] = [
        (
            "",
            "the provider closed the stream without sending anything",
        ),
        (
            "event: message_start\ndata: {not json\n\n",
            "the provider sent an invalid stream event",
        ),
        (
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\"}}\n\n",
            "the provider sent a content block event without an index",
        ),
        (
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"input\":{}}}\n\n",
            "the provider sent tool call 0 without a name",
        ),
    ];
    for (body, message) in cases {
        let items = decode_anthropic_pieces(vec![body.as_bytes().to_vec()]);
        let err = items.last().unwrap().clone().unwrap_err();
        assert_eq!(
            (err.kind, err.retryable),
            (ErrorKind::Generic, true),
            "{body}"
        );
        assert!(err.message.starts_with(message), "{body}: {}", err.message);
    }
}

#[test]
fn a_tool_use_with_its_input_in_the_start_event_sends_that_input() {
    let body = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"add\",\"input\":{\"a\":1}}}\n\n\
                event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
                event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let items = decode_anthropic_pieces(vec![body.as_bytes().to_vec()]);
    let events: Vec<StreamEvent> = items.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        events,
        vec![
            StreamEvent::ToolCallStart {
                index: 0,
                id: "toolu_1".into(),
                name: "add".into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                args_delta: r#"{"a":1}"#.into()
            },
            StreamEvent::ToolCallEnd { index: 0 },
            StreamEvent::Finish {
                reason: FinishReason::ToolCalls
            },
        ]
    );
}

// ---------------------------------------------------------------------------
// Requests.

fn tool_history() -> Vec<RequestMessage> {
    vec![
        RequestMessage::text(ChatRole::System, "You are terse."),
        RequestMessage::text(ChatRole::User, "Weather in Paris and Rome?"),
        RequestMessage {
            role: ChatRole::Assistant,
            parts: vec![
                MessagePart::Reasoning {
                    text: "Two calls.".into(),
                    signature: Some("sig-1".into()),
                },
                MessagePart::text("Checking."),
                MessagePart::ToolCall {
                    tool_call_id: "toolu_1".into(),
                    tool_name: "get_weather".into(),
                    args: r#"{"city":"Paris"}"#.into(),
                },
                MessagePart::ToolCall {
                    tool_call_id: "toolu_2".into(),
                    tool_name: "get_weather".into(),
                    args: r#"{"city":"Rome"}"#.into(),
                },
            ],
        },
        RequestMessage {
            role: ChatRole::Tool,
            parts: vec![MessagePart::ToolResult {
                tool_call_id: "toolu_1".into(),
                tool_name: "get_weather".into(),
                result: json!("21 °C, clear"),
                is_error: false,
            }],
        },
        RequestMessage {
            role: ChatRole::Tool,
            parts: vec![MessagePart::ToolResult {
                tool_call_id: "toolu_2".into(),
                tool_name: "get_weather".into(),
                result: json!({"error": "Tool execution interrupted by user"}),
                is_error: true,
            }],
        },
        RequestMessage::text(ChatRole::User, "And Lisbon?"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_has_the_headers_system_param_merged_turns_and_thinking() {
    let llm = FakeLlm::start().await.unwrap();
    llm.push(Script::text("ok"));
    let provider = AnthropicProvider::new(llm.base_url(), Some("sk-ant".into()), "fake").unwrap();
    assert_eq!(provider.endpoint(), format!("{}/messages", llm.base_url()));
    let request = ModelRequest {
        model: "claude-test".into(),
        messages: tool_history(),
        tools: vec![ToolSpec {
            name: "get_weather".into(),
            description: "Weather by city".into(),
            input_schema: json!({"properties": {"city": {"type": "string"}}}),
        }],
        max_output_tokens: Some(20_000),
        temperature: Some(0.7),
        reasoning_effort: Some("medium".into()),
        provider_tools: Vec::new(),
        files: Default::default(),
    };
    let response = collect(provider.stream(&request).await.unwrap())
        .await
        .unwrap();
    assert_eq!(response.text, "ok");
    let recorded = &llm.requests()[0];
    assert_eq!(recorded.path, "/v1/messages");
    assert_eq!(recorded.header("x-api-key"), Some("sk-ant"));
    assert_eq!(recorded.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(recorded.header("authorization"), None);
    assert_eq!(
        recorded.body,
        json!({
            "model": "claude-test",
            "max_tokens": 20000,
            "stream": true,
            "system": "You are terse.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Two calls.", "signature": "sig-1"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 °C, clear"},
                    {"type": "tool_result", "tool_use_id": "toolu_2",
                     "content": "{\"error\":\"Tool execution interrupted by user\"}", "is_error": true},
                    {"type": "text", "text": "And Lisbon?"},
                ]},
            ],
            "tools": [{"name": "get_weather", "description": "Weather by city",
                       "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "thinking": {"type": "enabled", "budget_tokens": 8192},
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_options_the_request_has_default_max_tokens_temperature_and_no_key() {
    let llm = FakeLlm::start().await.unwrap();
    llm.push(Script::text("ok"));
    let provider = AnthropicProvider::new(llm.base_url(), None, "fake").unwrap();
    let mut request = hello_request();
    request.temperature = Some(0.25);
    collect(provider.stream(&request).await.unwrap())
        .await
        .unwrap();
    let body = &llm.requests()[0].body;
    assert_eq!(body["max_tokens"], json!(4096));
    assert_eq!(body["temperature"], json!(0.25));
    assert!(body.get("thinking").is_none() && body.get("system").is_none());
    assert_eq!(llm.requests()[0].header("x-api-key"), None);
}

#[test]
fn thinking_is_dropped_when_the_answered_tool_turn_has_no_signed_thinking() {
    let mut history = tool_history();
    history.pop(); // The conversation now ends with the tool results.
    history[2].parts[0] = MessagePart::reasoning("unsigned, from another provider");
    let request = ModelRequest {
        model: "m".into(),
        messages: history,
        reasoning_effort: Some("high".into()),
        temperature: Some(0.5),
        ..ModelRequest::default()
    };
    let body = chatd_llm::anthropic::wire::request_body(&request);
    assert!(body.get("thinking").is_none(), "{body}");
    assert_eq!(body["temperature"], json!(0.5));
    assert_eq!(
        body["messages"][1]["content"][0]["type"],
        json!("text"),
        "unsigned reasoning is not sent"
    );
    // With the signature back, thinking stays on and max_tokens makes room
    // for the budget; temperature is not sent with thinking.
    let mut request = request;
    request.messages[2].parts[0] = MessagePart::Reasoning {
        text: "signed".into(),
        signature: Some("s".into()),
    };
    let body = chatd_llm::anthropic::wire::request_body(&request);
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 16384})
    );
    assert_eq!(body["max_tokens"], json!(16384 + 4096));
    assert!(body.get("temperature").is_none());
    // A configured limit below the minimum budget turns thinking off.
    request.max_output_tokens = Some(1000);
    let body = chatd_llm::anthropic::wire::request_body(&request);
    assert!(body.get("thinking").is_none());
    assert_eq!(body["max_tokens"], json!(1000));
}

// ---------------------------------------------------------------------------
// The fake LLM's Anthropic mode: the same scripts, Anthropic's wire format.

async fn fake() -> (FakeLlm, AnthropicProvider) {
    let llm = FakeLlm::start().await.unwrap();
    let provider = AnthropicProvider::new(llm.base_url(), Some("k".into()), "fake").unwrap();
    (llm, provider)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_llm_streams_text_reasoning_tools_and_usage_in_anthropic_format() {
    let (llm, provider) = fake().await;
    llm.push(
        Script::new()
            .reasoning("Hmm…")
            .then_text("Two calls, ")
            .then_text("coming up.")
            .tool_call("toolu_a", "add", r#"{"a":2,"b":3}"#, 3)
            .tool_call("toolu_b", "multiply", r#"{"a":2,"b":3}"#, 2)
            .step(chatd_testkit::Step::Usage {
                prompt_tokens: 100,
                completion_tokens: 20,
                cached_tokens: 40,
                reasoning_tokens: 0,
            }),
    );
    let items = run(&provider, &hello_request()).await.unwrap();
    crate::transcripts::check_invariants("fake anthropic", &items);
    let response = builder_of(&items).into_response().unwrap();
    assert_eq!(response.reasoning, "Hmm…");
    assert_eq!(response.text, "Two calls, coming up.");
    assert_eq!(
        call_triples(&response),
        vec![
            ("toolu_a", "add", r#"{"a":2,"b":3}"#),
            ("toolu_b", "multiply", r#"{"a":2,"b":3}"#)
        ]
    );
    assert_eq!(response.finish, FinishReason::ToolCalls);
    // Cached prompt tokens are reported apart from the uncached input.
    assert_eq!(response.usage, usage(60, 20, 40, 0));
    assert!(matches!(
        &response.parts[0],
        MessagePart::Reasoning { signature: Some(s), .. } if !s.is_empty()
    ));
    assert_eq!(llm.requests()[0].path, "/v1/messages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_llm_sends_anthropic_errors_disconnects_and_http_statuses() {
    let (llm, provider) = fake().await;
    llm.push(Script::text("Partial").stream_error("Overloaded", "overloaded_error"));
    let items = run(&provider, &hello_request()).await.unwrap();
    assert_eq!(items[0], Ok(StreamEvent::TextDelta("Partial".into())));
    let err = items.last().unwrap().clone().unwrap_err();
    assert_eq!(
        (err.kind, err.retryable, err.message.as_str()),
        (ErrorKind::Overloaded, true, "Overloaded")
    );

    llm.push(Script::text("cut").disconnect());
    let items = run(&provider, &hello_request()).await.unwrap();
    let err = items.last().unwrap().clone().unwrap_err();
    assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));

    llm.push(Script::http_error(
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            .to_string(),
    ));
    let err = run(&provider, &hello_request()).await.unwrap_err();
    assert_eq!(
        (err.kind, err.retryable, err.status_code),
        (ErrorKind::Overloaded, true, Some(529))
    );

    llm.push(Script::text("x").finish("max_tokens"));
    let items = run(&provider, &hello_request()).await.unwrap();
    assert_eq!(
        items.last(),
        Some(&Ok(StreamEvent::Finish {
            reason: FinishReason::Length
        }))
    );
}
