//! The testkit's fake LLM, driven through `OpenAiProvider`: one round trip
//! per script step kind.

use std::time::{Duration, Instant};

use chatd_llm::{
    ErrorKind, FinishReason, OpenAiProvider, Provider as _, StreamEvent, Usage, collect,
};
use chatd_testkit::fake_llm::Step;
use chatd_testkit::{FakeLlm, Script};
use futures::StreamExt as _;

use crate::support::{Items, call_triples, hello_request, run};

async fn setup() -> (FakeLlm, OpenAiProvider) {
    let llm = FakeLlm::start().await.unwrap();
    let provider = OpenAiProvider::new(llm.base_url(), None, "fake").unwrap();
    (llm, provider)
}

async fn play(llm: &FakeLlm, provider: &OpenAiProvider, script: Script) -> Items {
    llm.push(script);
    run(provider, &hello_request()).await.unwrap()
}

fn events(items: Items) -> Vec<StreamEvent> {
    items.into_iter().map(|i| i.unwrap()).collect()
}

/// Polls `check` until it holds or `timeout` passes.
async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_llm_base_url_includes_the_version_prefix() {
    let llm = FakeLlm::start().await.unwrap();
    assert_eq!(llm.base_url(), format!("http://{}/v1", llm.addr()));
    assert!(llm.addr().ip().is_loopback());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_chunks_arrive_as_separate_deltas_and_finish_with_stop() {
    let (llm, provider) = setup().await;
    let items = play(
        &llm,
        &provider,
        Script::text("Hello").then_text(", wörld 🦀"),
    )
    .await;
    assert_eq!(
        events(items),
        vec![
            StreamEvent::TextDelta("Hello".into()),
            StreamEvent::TextDelta(", wörld 🦀".into()),
            StreamEvent::Finish {
                reason: FinishReason::Stop
            },
        ]
    );
    assert_eq!(llm.completed_responses(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_in_parts_streams_n_parts_with_the_delay_between_them() {
    let (llm, provider) = setup().await;
    let started = Instant::now();
    let items = play(
        &llm,
        &provider,
        Script::text_in_parts("one two three four five", 5, Duration::from_millis(40)),
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(160),
        "{:?}",
        started.elapsed()
    );
    let deltas: Vec<String> = events(items)
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(deltas.len(), 5, "{deltas:?}");
    assert_eq!(deltas.concat(), "one two three four five");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_usage_and_a_custom_finish_reason_round_trip() {
    let (llm, provider) = setup().await;
    let script = Script::new()
        .reasoning("thinking…")
        .then_text("answer")
        .step(Step::Usage {
            prompt_tokens: 100,
            completion_tokens: 20,
            cached_tokens: 40,
            reasoning_tokens: 5,
        })
        .finish("length");
    let items = play(&llm, &provider, script).await;
    assert_eq!(
        events(items),
        vec![
            StreamEvent::ReasoningDelta("thinking…".into()),
            StreamEvent::TextDelta("answer".into()),
            StreamEvent::Usage(Usage {
                input_tokens: 60,
                output_tokens: 20,
                reasoning_tokens: 5,
                cache_read_tokens: 40,
                cache_creation_tokens: 0,
                total_tokens: 120,
            }),
            StreamEvent::Finish {
                reason: FinishReason::Length
            },
        ]
    );
    // An unknown reason is passed through.
    let items = play(
        &llm,
        &provider,
        Script::text("x").finish("guardrail_tripped"),
    )
    .await;
    assert_eq!(
        events(items).last(),
        Some(&StreamEvent::Finish {
            reason: FinishReason::Other("guardrail_tripped".into())
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_split_into_chunks_round_trips_with_id_name_and_args() {
    let (llm, provider) = setup().await;
    let args = r#"{"city":"São Paulo","units":"c"}"#;
    let items = play(
        &llm,
        &provider,
        Script::new()
            .tool_call("call_9", "get_weather", args, 4)
            .usage(12, 7),
    )
    .await;
    let events = events(items);
    let deltas = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
        .count();
    assert_eq!(deltas, 4);
    assert_eq!(
        events[0],
        StreamEvent::ToolCallStart {
            index: 0,
            id: "call_9".into(),
            name: "get_weather".into()
        }
    );
    let response = collect(futures::stream::iter(events.into_iter().map(Ok)).boxed())
        .await
        .unwrap();
    assert_eq!(response.finish, FinishReason::ToolCalls);
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].args, args);
    assert_eq!(response.usage.unwrap().total_tokens, 19);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tool_calls_interleaved_by_index_are_kept_apart() {
    let (llm, provider) = setup().await;
    let script = Script::new()
        .then_text("Both at once.")
        .tool_call_start(0, "call_a", "add")
        .tool_call_start(1, "call_b", "multiply")
        .tool_call_args(1, r#"{"a": 2,"#)
        .tool_call_args(0, r#"{"a": 1,"#)
        .tool_call_args(0, r#" "b": 1}"#)
        .tool_call_args(1, r#" "b": 3}"#);
    llm.push(script);
    let response = collect(provider.stream(&hello_request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(
        call_triples(&response),
        vec![
            ("call_a", "add", r#"{"a": 1, "b": 1}"#),
            ("call_b", "multiply", r#"{"a": 2, "b": 3}"#),
        ]
    );
    assert_eq!(response.text, "Both at once.");
    assert_eq!(response.finish, FinishReason::ToolCalls);
    assert_eq!(response.parts.len(), 3, "text then both calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_step_holds_the_next_chunk_back() {
    let (llm, provider) = setup().await;
    llm.push(
        Script::text("before")
            .delay(Duration::from_millis(250))
            .then_text("after"),
    );
    let mut stream = provider.stream(&hello_request()).await.unwrap();
    assert_eq!(
        stream.next().await,
        Some(Ok(StreamEvent::TextDelta("before".into())))
    );
    let started = Instant::now();
    assert_eq!(
        stream.next().await,
        Some(Ok(StreamEvent::TextDelta("after".into())))
    );
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_error_step_answers_with_that_status_and_body() {
    let (llm, provider) = setup().await;
    llm.push(Script::http_error(
        429,
        r#"{"error":{"message":"Too many requests","type":"requests","code":"rate_limit_exceeded"}}"#,
    ));
    let err = run(&provider, &hello_request()).await.unwrap_err();
    assert_eq!(
        (err.kind, err.retryable, err.status_code),
        (ErrorKind::RateLimit, true, Some(429))
    );
    assert_eq!(err.message, "Too many requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_mid_stream_yields_the_text_so_far_then_a_retryable_error() {
    let (llm, provider) = setup().await;
    let items = play(&llm, &provider, Script::text("partial").disconnect()).await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0], Ok(StreamEvent::TextDelta("partial".into())));
    let err = items[1].clone().unwrap_err();
    assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_error_step_ends_the_stream_with_the_classified_error() {
    let (llm, provider) = setup().await;
    let items = play(
        &llm,
        &provider,
        Script::text("so far").stream_error("Overloaded", "overloaded_error"),
    )
    .await;
    assert_eq!(items[0], Ok(StreamEvent::TextDelta("so far".into())));
    let err = items[1].clone().unwrap_err();
    assert_eq!(
        (err.kind, err.retryable, err.message.as_str()),
        (ErrorKind::Overloaded, true, "Overloaded")
    );
    assert_eq!(items.len(), 2, "[DONE] after an error changes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_stalls_until_the_client_drops_the_stream() {
    let (llm, provider) = setup().await;
    llm.push(Script::text("waiting").hang());
    let mut stream = provider.stream(&hello_request()).await.unwrap();
    assert_eq!(
        stream.next().await,
        Some(Ok(StreamEvent::TextDelta("waiting".into())))
    );
    let next = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(
        next.is_err(),
        "nothing arrives while the script hangs: {next:?}"
    );
    assert_eq!(llm.aborted_responses(), 0);
    drop(stream);
    assert!(
        eventually(Duration::from_secs(5), || llm.aborted_responses() == 1).await,
        "the server notices the client went away"
    );
    assert_eq!(llm.completed_responses(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_scripts_are_used_in_order_then_the_default_then_a_400() {
    let (llm, provider) = setup().await;
    llm.push(Script::text("first"));
    llm.push(Script::text("second"));
    assert_eq!(llm.queued(), 2);
    let text = |items: Items| match &items[0] {
        Ok(StreamEvent::TextDelta(t)) => t.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        text(run(&provider, &hello_request()).await.unwrap()),
        "first"
    );
    assert_eq!(
        text(run(&provider, &hello_request()).await.unwrap()),
        "second"
    );
    let err = run(&provider, &hello_request()).await.unwrap_err();
    assert_eq!(
        (err.kind, err.status_code),
        (ErrorKind::InvalidRequest, Some(400))
    );
    assert!(err.detail.unwrap().contains("unscripted_request"));

    llm.set_default_fn(Script::echo_of);
    let response = collect(provider.stream(&hello_request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(response.text, "echo: Hello");
    assert_eq!(response.usage.unwrap().input_tokens, 10);
    llm.set_default(Script::text("fixed"));
    assert_eq!(
        text(run(&provider, &hello_request()).await.unwrap()),
        "fixed"
    );
    assert_eq!(llm.requests().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_recorded_and_waiting_for_one_that_never_comes_times_out() {
    let (llm, provider) = setup().await;
    llm.push(Script::text("hi"));
    let request = hello_request();
    let pending = llm.wait_for_request(1, Duration::from_secs(5));
    let (recorded, items) = tokio::join!(pending, run(&provider, &request));
    let recorded = recorded.unwrap();
    assert!(items.unwrap().last().unwrap().is_ok());
    assert_eq!(recorded.path, "/v1/chat/completions");
    assert_eq!(recorded.body["model"], "test-model");
    assert_eq!(recorded.last_user_text().as_deref(), Some("Hello"));
    assert_eq!(recorded.header("Accept"), Some("text/event-stream"));

    let err = llm
        .wait_for_request(2, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("received 1 request(s)"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_paths_are_recorded_and_answered_404() {
    let llm = FakeLlm::start().await.unwrap();
    let provider = OpenAiProvider::new(format!("http://{}/v2", llm.addr()), None, "fake").unwrap();
    let err = run(&provider, &hello_request()).await.unwrap_err();
    assert_eq!(
        (err.kind, err.status_code),
        (ErrorKind::InvalidRequest, Some(404))
    );
    assert_eq!(llm.requests()[0].path, "/v2/chat/completions");
}
