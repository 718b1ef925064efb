//! Every OpenAI-compatible transcript, replayed over HTTP through
//! `OpenAiProvider`, parses to exactly what its README says.

use chatd_llm::{ErrorKind, FinishReason, ProviderError, Response, StreamEvent, Usage};

use crate::support::{
    Items, ReplayServer, Reply, builder_of, call_triples, hello_request, own_fixtures,
    read_fixture, run, unfinished_ids,
};

/// What a transcript must parse to.
pub struct Expected {
    pub file: &'static str,
    pub outcome: Outcome,
}

pub enum Outcome {
    Complete {
        text: &'static str,
        reasoning: &'static str,
        calls: Vec<(&'static str, &'static str, &'static str)>,
        usage: Option<Usage>,
        finish: FinishReason,
    },
    Failed {
        /// Text deltas received before the error.
        text_before: &'static str,
        kind: ErrorKind,
        retryable: bool,
        message: &'static str,
    },
}

fn usage(input: i64, output: i64, total: i64) -> Option<Usage> {
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: total,
        ..Usage::default()
    })
}

fn complete(
    text: &'static str,
    calls: Vec<(&'static str, &'static str, &'static str)>,
    usage: Option<Usage>,
    finish: FinishReason,
) -> Outcome {
    Outcome::Complete {
        text,
        reasoning: "",
        calls,
        usage,
        finish,
    }
}

const LLAMACPP_TEXT: &str = "I'm here to help with any creative writing project.";

/// Every OpenAI-compatible SSE transcript and what it parses to. The
/// `llamacpp-*` and `synthetic-*` files are the project's own; the others
/// are read from the shared directory when it is present.
pub fn all() -> Vec<Expected> {
    vec![
        Expected {
            file: "llamacpp-text.sse",
            outcome: complete(LLAMACPP_TEXT, vec![], None, FinishReason::Stop),
        },
        Expected {
            file: "llamacpp-text-usage.sse",
            outcome: complete(LLAMACPP_TEXT, vec![], None, FinishReason::Stop),
        },
        Expected {
            file: "llamacpp-tools.sse",
            outcome: complete(
                "Paris, the City of Light. The weather in Paris is quite unique and unpredictable. The city's climate is influenced by the Mediterranean, with a mix of hot summers and mild winters. The average high temperature in July can reach up to ",
                vec![],
                None,
                FinishReason::Length,
            ),
        },
        Expected {
            file: "llamacpp-tools-forced.sse",
            outcome: complete(
                "",
                vec![(
                    "call__0_get_weather_cmpl-5c58e6e7-226d-4171-a3f7-4ca05bfc2dd5",
                    "get_weather",
                    r#"{ "city": "Paris" }"#,
                )],
                None,
                FinishReason::ToolCalls,
            ),
        },
        Expected {
            file: "llamacpp-error-context-stream.sse",
            outcome: Outcome::Failed {
                text_before: "",
                kind: ErrorKind::Generic,
                retryable: true,
                message: "the provider closed the stream without sending anything",
            },
        },
        Expected {
            file: "synthetic-utf8-reasoning.sse",
            outcome: Outcome::Complete {
                text: "Olá, 世界! 🦀",
                reasoning: "Pensando… 🤔",
                calls: vec![],
                usage: Some(Usage {
                    input_tokens: 18,
                    output_tokens: 9,
                    reasoning_tokens: 4,
                    cache_read_tokens: 12,
                    cache_creation_tokens: 0,
                    total_tokens: 39,
                }),
                finish: FinishReason::Other("end_of_turn".into()),
            },
        },
        Expected {
            file: "synthetic-parallel-interleaved.sse",
            outcome: complete(
                "",
                vec![
                    ("call_a", "get_weather", r#"{"city":"São Paulo"}"#),
                    ("call_b", "get_time", r#"{"tz":"America/Sao_Paulo"}"#),
                ],
                usage(80, 40, 120),
                FinishReason::ToolCalls,
            ),
        },
        Expected {
            file: "synthetic-tool-call-without-id.sse",
            outcome: complete(
                "",
                vec![("call_chatcmpl-synthetic-7_0", "lookup", r#"{"q": "x"}"#)],
                None,
                FinishReason::Stop,
            ),
        },
        Expected {
            file: "synthetic-no-done.sse",
            outcome: complete("Done without a marker.", vec![], None, FinishReason::Stop),
        },
        Expected {
            file: "synthetic-truncated.sse",
            outcome: Outcome::Failed {
                text_before: "Cut off",
                kind: ErrorKind::Generic,
                retryable: true,
                message: "the stream ended before the response was complete",
            },
        },
        Expected {
            file: "llamacpp-python-aborted.sse",
            outcome: Outcome::Failed {
                text_before: "Once upon a time, there was a fox named Felix. Felix was a curious and adventurous fox who loved to explore the woods of his own home. He had a tail full of fur and a bushy nose that made him look like a fox.\n\nFelix lived in",
                kind: ErrorKind::Generic,
                retryable: true,
                message: "the stream ended ([DONE]) without a finish reason: the response was cut short",
            },
        },
        Expected {
            file: "synthetic-error-midstream.sse",
            outcome: Outcome::Failed {
                text_before: "Partial",
                kind: ErrorKind::RateLimit,
                retryable: true,
                message: "Rate limit reached for requests",
            },
        },
        Expected {
            file: "synthetic-error-event.sse",
            outcome: Outcome::Failed {
                text_before: "",
                kind: ErrorKind::Overloaded,
                retryable: true,
                message: "Overloaded",
            },
        },
        // Shared (read at run time, skipped when absent).
        Expected {
            file: "openai-text.sse",
            outcome: complete(
                "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, I recommend checking a reliable weather website or a weather app.",
                vec![],
                usage(14, 30, 44),
                FinishReason::Stop,
            ),
        },
        Expected {
            file: "openai-text-include-usage.sse",
            outcome: complete("Olá!", vec![], usage(20, 2, 22), FinishReason::Stop),
        },
        Expected {
            file: "openai-tool-call.sse",
            outcome: complete(
                "",
                vec![(
                    "call_CTf1nWJLqSeRgDqaCG27xZ74",
                    "get_weather",
                    r#"{"city":"San Francisco","state":"CA"}"#,
                )],
                usage(48, 19, 67),
                FinishReason::ToolCalls,
            ),
        },
        Expected {
            file: "openai-tool-call-2.sse",
            outcome: complete(
                "",
                vec![(
                    "call_7kE4IjtnwXcGbX6hDM7xFu8T",
                    "weather",
                    r#"{"location":"Florence, Italy"}"#,
                )],
                usage(61, 16, 77),
                FinishReason::ToolCalls,
            ),
        },
        Expected {
            file: "openai-parallel-tool-calls.sse",
            outcome: complete(
                "",
                vec![
                    (
                        "call_JMW1whyEaYG438VE1OIflxA2",
                        "GetWeatherArgs",
                        r#"{"city": "Edinburgh", "country": "GB", "units": "c"}"#,
                    ),
                    (
                        "call_DNYTawLBoN8fj3KN6qU9N1Ou",
                        "get_stock_price",
                        r#"{"ticker": "AAPL", "exchange": "NASDAQ"}"#,
                    ),
                ],
                usage(149, 60, 209),
                FinishReason::ToolCalls,
            ),
        },
        Expected {
            file: "openai-parallel-tool-calls-2.sse",
            outcome: complete(
                "",
                vec![
                    (
                        "call_ehIWdjL1abZk1h8FWGLQ0Hie",
                        "add",
                        r#"{"a": 2, "b": 3}"#,
                    ),
                    (
                        "call_fBSgA47J5VeONggizTIvl7AH",
                        "multiply",
                        r#"{"a": 2, "b": 3}"#,
                    ),
                ],
                usage(106, 50, 156),
                FinishReason::ToolCalls,
            ),
        },
        Expected {
            file: "openrouter-gemini-parallel-tool-calls.sse",
            outcome: complete(
                "",
                vec![
                    ("tool_0_add_3sQISwQkKIrHMDRRTqmB", "add", r#"{"b":3,"a":2}"#),
                    (
                        "tool_1_multiply_nZSCK8smzKFKbdiORQio",
                        "multiply",
                        r#"{"a":2,"b":3}"#,
                    ),
                ],
                usage(57, 10, 67),
                FinishReason::ToolCalls,
            ),
        },
        Expected {
            file: "openai-error-midstream.sse",
            outcome: Outcome::Failed {
                text_before: "",
                kind: ErrorKind::Generic,
                retryable: true,
                message: "The server had an error while processing your request. Sorry about that!",
            },
        },
    ]
}

/// Checks the items of one transcript against its expectation, and the
/// stream invariants of the crate docs.
pub fn check(expected: &Expected, items: &Items) {
    let file = expected.file;
    check_invariants(file, items);
    let builder = builder_of(items);
    // Calls cut off by the token limit are not expected to hold valid JSON.
    let unfinished = unfinished_ids(&builder);
    let error: Option<&ProviderError> = items.iter().rev().find_map(|item| item.as_ref().err());
    match &expected.outcome {
        Outcome::Complete {
            text,
            reasoning,
            calls,
            usage,
            finish,
        } => {
            assert!(error.is_none(), "{file}: unexpected error {error:?}");
            let response: Response = builder
                .into_response()
                .unwrap_or_else(|| panic!("{file}: no Finish"));
            assert_eq!(response.text, *text, "{file}: text");
            assert_eq!(response.reasoning, *reasoning, "{file}: reasoning");
            assert_eq!(call_triples(&response), *calls, "{file}: tool calls");
            for call in response
                .tool_calls
                .iter()
                .filter(|c| !unfinished.contains(&c.id))
            {
                call.parsed_args()
                    .unwrap_or_else(|e| panic!("{file}: args of {} are not JSON: {e}", call.id));
            }
            assert_eq!(response.usage, *usage, "{file}: usage");
            assert_eq!(response.finish, *finish, "{file}: finish");
        }
        Outcome::Failed {
            text_before,
            kind,
            retryable,
            message,
        } => {
            let err = error.unwrap_or_else(|| panic!("{file}: expected an error, got {items:?}"));
            assert_eq!(
                builder.text(),
                *text_before,
                "{file}: text before the error"
            );
            assert!(
                builder.finish_reason().is_none(),
                "{file}: finished despite the error"
            );
            assert_eq!(
                (err.kind, err.retryable),
                (*kind, *retryable),
                "{file}: {err:?}"
            );
            assert_eq!(err.message, *message, "{file}");
        }
    }
}

/// The ordering rules every provider stream keeps.
pub fn check_invariants(file: &str, items: &Items) {
    let (last, init) = items
        .split_last()
        .unwrap_or_else(|| panic!("{file}: empty stream"));
    assert!(
        matches!(last, Err(_) | Ok(StreamEvent::Finish { .. })),
        "{file}: the stream must end with Finish or an error, not {last:?}"
    );
    let mut started = std::collections::BTreeSet::new();
    let mut ended = std::collections::BTreeSet::new();
    let mut usage_seen = false;
    for item in init {
        let event = item
            .as_ref()
            .unwrap_or_else(|e| panic!("{file}: an error must be the last item: {e:?}"));
        assert!(!usage_seen, "{file}: Usage must come just before Finish");
        match event {
            StreamEvent::TextDelta(t)
            | StreamEvent::ReasoningDelta(t)
            | StreamEvent::ReasoningSignature(t) => {
                assert!(!t.is_empty(), "{file}: empty delta")
            }
            StreamEvent::ToolCallStart { index, .. } => {
                assert!(started.insert(*index), "{file}: call {index} started twice")
            }
            StreamEvent::ToolCallDelta { index, args_delta } => {
                assert!(
                    started.contains(index) && !ended.contains(index),
                    "{file}: delta outside call {index}"
                );
                assert!(!args_delta.is_empty(), "{file}: empty args delta");
            }
            StreamEvent::ToolCallEnd { index } => {
                assert!(
                    started.contains(index) && ended.insert(*index),
                    "{file}: bad end of {index}"
                )
            }
            StreamEvent::Usage(_) => usage_seen = true,
            StreamEvent::Finish { .. } => panic!("{file}: Finish before the end"),
            other => panic!("{file}: unexpected event {other:?}"),
        }
    }
    if let Ok(StreamEvent::Finish { reason }) = last {
        // Only a response cut off by the token limit may leave a call open.
        if *reason != FinishReason::Length {
            assert_eq!(
                started, ended,
                "{file}: every started call ends before Finish"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_openai_compatible_transcript_parses_to_its_documented_content_over_http() {
    let mut checked = 0;
    for expected in all() {
        let Some(body) = read_fixture(expected.file) else {
            eprintln!("skipping {}: shared fixture absent", expected.file);
            continue;
        };
        // Recorded status line and headers where the recording has them.
        let headers_file = own_fixtures().join(expected.file.replace(".sse", ".headers"));
        let reply = match std::fs::read(&headers_file) {
            Ok(head) => Reply::recorded(head, body),
            Err(_) => Reply::sse(body),
        };
        let server = ReplayServer::start(reply).await;
        let items = run(&server.provider(), &hello_request())
            .await
            .unwrap_or_else(|e| panic!("{}: request failed: {e:?}", expected.file));
        check(&expected, &items);
        assert_eq!(server.bodies()[0]["stream"], serde_json::json!(true));
        checked += 1;
    }
    assert!(
        checked >= 12,
        "the project's own fixtures alone are 12 transcripts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utf8_split_across_network_reads_is_reassembled() {
    let body = read_fixture("synthetic-utf8-reasoning.sse").unwrap();
    // Cut the body in the middle of every multi-byte character, and write
    // each piece separately with a pause so they arrive in separate reads.
    let text = std::str::from_utf8(&body).unwrap();
    let mut cuts: Vec<usize> = text
        .char_indices()
        .filter(|(_, c)| c.len_utf8() > 1)
        .map(|(i, _)| i + 1)
        .collect();
    cuts.push(body.len());
    assert!(cuts.len() > 6, "the fixture has six multi-byte characters");
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pieces.push(body[start..cut].to_vec());
        start = cut;
    }
    assert!(pieces.iter().any(|p| std::str::from_utf8(p).is_err()));
    let mut reply = Reply::sse(Vec::new());
    reply.pieces = pieces;
    reply.pause = std::time::Duration::from_millis(5);
    let server = ReplayServer::start(reply).await;
    let items = run(&server.provider(), &hello_request()).await.unwrap();
    let expected = all()
        .into_iter()
        .find(|e| e.file == "synthetic-utf8-reasoning.sse")
        .unwrap();
    check(&expected, &items);
}
