//! HTTP errors, transport failures and mid-stream errors are classified as
//! API.md "Workers and replicas" says.

use std::time::Duration;

use chatd_llm::{
    AnthropicProvider, ErrorKind, HttpOptions, OpenAiProvider, ProviderError, StreamEvent,
};
use chatd_testkit::{FakeLlm, Script};
use serde_json::json;

use crate::support::{
    ReplayServer, Reply, hello_request, own_fixtures, read_fixture, run, shared_fixtures,
};

async fn error_for(reply: Reply) -> ProviderError {
    let server = ReplayServer::start(reply).await;
    match run(&server.provider(), &hello_request()).await {
        Err(err) => err,
        Ok(items) => panic!("expected the request to fail, got {items:?}"),
    }
}

/// The project's recorded error answer `{stem}.headers` and `{stem}.json`.
fn recorded_json(stem: &str) -> Reply {
    let dir = own_fixtures();
    let read = |ext: &str| std::fs::read(dir.join(format!("{stem}.{ext}"))).unwrap();
    Reply::recorded(read("headers"), read("json"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_llamacpp_context_overflow_is_a_non_retryable_context_length_error() {
    let err = error_for(recorded_json("llamacpp-error-context")).await;
    assert_eq!(err.kind, ErrorKind::ContextLength);
    assert!(!err.retryable);
    assert_eq!(err.status_code, Some(400));
    assert_eq!(err.provider, "replay");
    assert!(
        err.message
            .starts_with("This model's maximum context length is 2048 tokens."),
        "{}",
        err.message
    );
    assert_eq!(
        serde_json::to_value(err.to_chat_error()).unwrap()["kind"],
        json!("context_length"),
        "the ChatError object carries the kind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_llamacpp_500_is_a_retryable_generic_error_with_the_servers_message() {
    let err = error_for(recorded_json("llamacpp-error-invalid-role")).await;
    assert_eq!(
        (err.kind, err.retryable, err.status_code),
        (ErrorKind::Generic, true, Some(500))
    );
    assert!(
        err.message.starts_with("7 validation errors:"),
        "{}",
        err.message
    );
    assert!(
        err.detail
            .as_deref()
            .unwrap()
            .contains("internal_server_error")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_error_bodies_are_classified() {
    let Some(dir) = shared_fixtures() else { return };
    let cases = [
        (
            "openai-error-http400.json",
            400,
            ErrorKind::InvalidRequest,
            false,
            "Unsupported parameter: 'max_tokens'",
        ),
        (
            "openrouter-error-http429.json",
            429,
            ErrorKind::RateLimit,
            true,
            "Provider returned error",
        ),
        (
            "anthropic-error-http429.json",
            429,
            ErrorKind::RateLimit,
            true,
            "Number of concurrent connections",
        ),
    ];
    for (file, status, kind, retryable, message) in cases {
        let body = std::fs::read(dir.join(file)).unwrap();
        let err = error_for(Reply::status(status, body)).await;
        assert_eq!(
            (err.kind, err.retryable, err.status_code),
            (kind, retryable, Some(status)),
            "{file}"
        );
        assert!(err.message.starts_with(message), "{file}: {}", err.message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_status_maps_to_the_api_kind_and_retry_policy() {
    let llm = FakeLlm::start().await.unwrap();
    let provider = OpenAiProvider::new(llm.base_url(), None, "fake").unwrap();
    let openai = |code: &str, kind: &str| {
        json!({"error": {"message": format!("{code} happened"), "type": kind, "param": null, "code": code}}).to_string()
    };
    let cases: Vec<(u16, String, ErrorKind, bool)> = vec![
        (400, openai("invalid_value", "invalid_request_error"), ErrorKind::InvalidRequest, false),
        (400, openai("context_length_exceeded", "invalid_request_error"), ErrorKind::ContextLength, false),
        (
            400,
            json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}})
            .to_string(),
            ErrorKind::ContextLength,
            false,
        ),
        (401, openai("invalid_api_key", "invalid_request_error"), ErrorKind::Auth, false),
        (403, "forbidden".into(), ErrorKind::Auth, false),
        (404, openai("model_not_found", "invalid_request_error"), ErrorKind::InvalidRequest, false),
        (408, String::new(), ErrorKind::Timeout, true),
        (429, openai("rate_limit_exceeded", "requests"), ErrorKind::RateLimit, true),
        (429, openai("insufficient_quota", "insufficient_quota"), ErrorKind::UsageLimit, false),
        (500, openai("server_error", "server_error"), ErrorKind::Generic, true),
        (502, "<html>Bad Gateway</html>".into(), ErrorKind::Generic, true),
        (503, String::new(), ErrorKind::Generic, true),
        (504, String::new(), ErrorKind::Generic, true),
        (
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).to_string(),
            ErrorKind::Overloaded,
            true,
        ),
        (501, String::new(), ErrorKind::Generic, false),
    ];
    for (status, body, kind, retryable) in cases {
        llm.push(Script::http_error(status, body.clone()));
        let err = run(&provider, &hello_request())
            .await
            .expect_err("an error status");
        assert_eq!(
            (err.kind, err.retryable, err.status_code),
            (kind, retryable, Some(status)),
            "{status} {body}"
        );
        assert!(!err.message.is_empty());
        assert_eq!(err.provider, "fake");
    }
}

/// A loopback port nobody listens on (bound, then dropped).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_a_retryable_generic_error_naming_the_provider_and_address() {
    let port = closed_port();
    let provider =
        OpenAiProvider::new(format!("http://127.0.0.1:{port}/v1/"), None, "local").unwrap();
    let err = run(&provider, &hello_request())
        .await
        .expect_err("nobody listens");
    assert_eq!(
        (err.kind, err.retryable, err.status_code),
        (ErrorKind::Generic, true, None)
    );
    assert_eq!(
        err.message,
        format!(
            "Cannot reach the model server \"local\" at http://127.0.0.1:{port}/v1: connection refused."
        )
    );
    assert_eq!(err.provider, "local");
    let detail = err.detail.expect("the error chain is the detail");
    assert!(detail.contains("127.0.0.1"), "{detail}");
    // The Anthropic adapter says the same.
    let anthropic = AnthropicProvider::new(
        format!("http://127.0.0.1:{port}/v1"),
        Some("key".into()),
        "claude",
    )
    .unwrap();
    let err = run(&anthropic, &hello_request())
        .await
        .expect_err("nobody listens");
    assert_eq!(
        (err.kind, err.retryable, err.message),
        (
            ErrorKind::Generic,
            true,
            format!(
                "Cannot reach the model server \"claude\" at http://127.0.0.1:{port}/v1: connection refused."
            )
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresolvable_host_is_a_retryable_error_saying_the_name_does_not_resolve() {
    // `.invalid` never resolves (RFC 6761); the credentials in the URL are
    // not shown.
    let provider = OpenAiProvider::new(
        "http://user:secret@chatd-test-host.invalid:8081/v1?x=1",
        None,
        "remote",
    )
    .unwrap();
    let err = run(&provider, &hello_request())
        .await
        .expect_err("no such host");
    assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));
    assert_eq!(
        err.message,
        "Cannot reach the model server \"remote\" at http://chatd-test-host.invalid:8081/v1: its host name could not be resolved."
    );
    assert!(!err.message.contains("secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_timeout_is_a_retryable_timeout_naming_the_provider_and_address() {
    // A listener whose accept queue is full and never drained: the kernel
    // drops further SYNs, so the next connection attempt never completes.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        // Each filler either completes (into the queue) or stalls; both
        // keep the queue full. Bounded by the timeout.
        fillers.push(tokio::spawn(tokio::time::timeout(
            Duration::from_secs(30),
            tokio::net::TcpStream::connect(addr),
        )));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let options = HttpOptions {
        connect_timeout: Duration::from_millis(500),
        ..HttpOptions::default()
    };
    let provider =
        OpenAiProvider::with_options(format!("http://{addr}/v1"), None, "slow", options).unwrap();
    let err = run(&provider, &hello_request())
        .await
        .expect_err("the connection never completes");
    assert_eq!((err.kind, err.retryable), (ErrorKind::Timeout, true));
    assert_eq!(
        err.message,
        format!(
            "Cannot reach the model server \"slow\" at http://{addr}/v1: no connection within the connect timeout."
        )
    );
    for filler in fillers {
        filler.abort();
    }
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_fails_with_a_retryable_timeout_after_the_idle_timeout() {
    let llm = FakeLlm::start().await.unwrap();
    llm.push(Script::text("Hel").hang());
    let options = HttpOptions {
        idle_timeout: Duration::from_millis(300),
        ..HttpOptions::default()
    };
    let provider = OpenAiProvider::with_options(llm.base_url(), None, "fake", options).unwrap();
    let started = std::time::Instant::now();
    let items = run(&provider, &hello_request()).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(items[0], Ok(StreamEvent::TextDelta("Hel".into())));
    let err = items.last().unwrap().clone().unwrap_err();
    assert_eq!((err.kind, err.retryable), (ErrorKind::Timeout, true));
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(10),
        "{elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_object_mid_stream_ends_the_stream_with_that_error() {
    let body = read_fixture("synthetic-error-midstream.sse").unwrap();
    let server = ReplayServer::start(Reply::sse(body)).await;
    let items = run(&server.provider(), &hello_request()).await.unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0], Ok(StreamEvent::TextDelta("Partial".into())));
    let err = items[1].clone().unwrap_err();
    assert_eq!(
        (err.kind, err.retryable, err.status_code),
        (ErrorKind::RateLimit, true, None)
    );
    assert_eq!(err.message, "Rate limit reached for requests");
    assert!(err.detail.unwrap().contains("rate_limit_exceeded"));
}

/// Issue 14: a JSON `\u0000` in a streamed delta made the commit fail with
/// "unsupported Unicode escape sequence" forever. The SSE driver sanitises
/// every event, for both adapters, and error texts quoting the provider.
#[test]
fn a_nul_in_streamed_text_tool_calls_or_errors_arrives_as_the_replacement_character() {
    let openai = concat!(
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\\u0000b\"}}]}\n\n",
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\\u0000\",\"function\":{\"name\":\"f\\u0000\",\"arguments\":\"{\\\"x\\\":\\\"\\u0000\\\"}\"}}]}}]}\n\n",
        "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let items = crate::support::decode_pieces(vec![openai.as_bytes().to_vec()]);
    let response = crate::support::builder_of(&items)
        .into_response()
        .expect("finished");
    assert_eq!(response.text, "a\u{FFFD}b", "{items:?}");
    assert_eq!(
        crate::support::call_triples(&response),
        vec![("c\u{FFFD}", "f\u{FFFD}", "{\"x\":\"\u{FFFD}\"}")]
    );
    let anthropic = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\\u0000!\"}}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\\u0000\"}}\n\n",
    );
    let items = crate::support::decode_anthropic_pieces(vec![anthropic.as_bytes().to_vec()]);
    assert_eq!(
        items[0],
        Ok(StreamEvent::TextDelta("\u{FFFD}!".into())),
        "{items:?}"
    );
    let err = items.last().unwrap().clone().unwrap_err();
    assert_eq!(err.message, "busy\u{FFFD}");
    assert!(!err.detail.unwrap_or_default().contains('\0'));
}
