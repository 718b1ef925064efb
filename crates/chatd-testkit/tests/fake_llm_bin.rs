//! The `fake-llm` binary serves the scripted fake LLM as its own process.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_llm_binary_prints_its_address_and_streams_slow_parts_of_the_echo() {
    let (mut child, addr) = spawn_fake_llm("slow-parts:3:20").await;

    let response = complete_raw(
        &addr,
        &json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "ping pong"}]}),
    )
    .await;

    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(response.contains("text/event-stream"), "{response}");
    let contents: Vec<String> = response
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(contents.len(), 3, "{contents:?}");
    assert_eq!(contents.concat(), "echo: ping pong");
    assert!(response.contains("\"usage\":{"), "usage chunk: {response}");
    assert!(response.contains("data: [DONE]"), "{response}");
    child.kill().await.unwrap();
}

/// A `fake-llm --mode MODE` process and its address.
async fn spawn_fake_llm(mode: &str) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fake-llm"))
        .args(["--listen", "127.0.0.1:0", "--mode", mode])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the binary announces its address")
        .unwrap()
        .unwrap();
    let addr = line
        .strip_prefix("listening on http://")
        .expect(&line)
        .to_owned();
    (child, addr)
}

/// What one streamed Chat Completions answer carried.
#[derive(Debug, Default)]
struct Answer {
    /// Non-empty `delta.content` pieces, in order.
    texts: Vec<String>,
    /// `(id, name)` of each tool call's first chunk.
    tool_calls: Vec<(String, String)>,
    /// The argument pieces of every tool call, joined.
    tool_args: String,
    /// The finish reason.
    finish: Option<String>,
    /// How long the whole answer took.
    elapsed: Duration,
}

/// POSTs `body` to the fake's Chat Completions path and returns the raw
/// HTTP response.
async fn complete_raw(addr: &str, body: &Value) -> String {
    let body = body.to_string();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(20),
        socket.read_to_string(&mut response),
    )
    .await
    .unwrap()
    .unwrap();
    response
}

/// POSTs `body` to the fake's Chat Completions path and collects the answer.
async fn complete(addr: &str, body: &Value) -> Answer {
    let started = Instant::now();
    let response = complete_raw(addr, body).await;
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(response.contains("data: [DONE]"), "{response}");
    let mut answer = Answer {
        elapsed: started.elapsed(),
        ..Answer::default()
    };
    for chunk in response
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
    {
        let delta = &chunk["choices"][0]["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            answer.texts.push(text.to_owned());
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            if let (Some(id), Some(name)) = (call["id"].as_str(), call["function"]["name"].as_str())
            {
                answer.tool_calls.push((id.to_owned(), name.to_owned()));
            }
            answer
                .tool_args
                .push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
        if let Some(finish) = chunk["choices"][0]["finish_reason"].as_str() {
            answer.finish = Some(finish.to_owned());
        }
    }
    answer
}

fn user(text: &str) -> Value {
    json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": text}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_mode_echoes_in_ten_parts_fails_when_told_and_streams_slow_messages_slowly() {
    // Slow answers: about 4 × 100 ms in at most 4 parts (3 waits of 100 ms).
    let (mut child, addr) = spawn_fake_llm("scripted:4:100").await;

    let answer = complete(&addr, &user("hello there")).await;
    assert_eq!(answer.texts.len(), 10, "{answer:?}");
    assert_eq!(answer.texts.concat(), "echo: hello there");
    assert_eq!(answer.finish.as_deref(), Some("stop"));
    assert!(answer.elapsed >= Duration::from_millis(850), "{answer:?}");

    let answer = complete_raw(&addr, &user("please FAIL now")).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(
        answer.contains(r#"fake LLM: told to fail by \"please FAIL now\""#),
        "{answer}"
    );
    assert!(answer.contains("invalid_request_error"), "{answer}");

    let answer = complete(&addr, &user("a SLOW one")).await;
    assert_eq!(answer.texts.len(), 4, "{answer:?}");
    assert_eq!(answer.texts.concat(), "echo: a SLOW one");
    assert!(answer.elapsed >= Duration::from_millis(290), "{answer:?}");
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_mode_calls_the_named_tool_and_answers_its_result() {
    let (mut child, addr) = spawn_fake_llm("scripted").await;

    let answer = complete(&addr, &user(r#"call get_weather {"city": "Lisbon"}"#)).await;
    assert_eq!(answer.texts, Vec::<String>::new(), "{answer:?}");
    assert_eq!(answer.tool_calls.len(), 1, "{answer:?}");
    let (id, name) = answer.tool_calls[0].clone();
    assert!(id.starts_with("call_fake_"), "{id}");
    assert_eq!(name, "get_weather");
    assert_eq!(answer.tool_args, r#"{"city": "Lisbon"}"#);
    assert_eq!(answer.finish.as_deref(), Some("tool_calls"));

    let answer = complete(&addr, &user("call ping")).await;
    assert_eq!(answer.tool_calls[0].1, "ping");
    assert_eq!(answer.tool_args, "{}");

    // The result of the call ends the conversation: a JSON string is
    // unquoted, other JSON is repeated as sent.
    let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": id,
        "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]});
    let body = |result: &str| {
        json!({"model": "m", "stream": true, "messages": [
            {"role": "user", "content": "call get_weather {}"},
            call,
            {"role": "tool", "tool_call_id": id, "content": result},
        ]})
    };
    let answer = complete(&addr, &body(r#""sunny""#)).await;
    assert_eq!(answer.texts.concat(), "tool said: sunny");
    let answer = complete(&addr, &body(r#"{"temp":21}"#)).await;
    assert_eq!(answer.texts.concat(), r#"tool said: {"temp":21}"#);

    // Anthropic shape: tool_result blocks in the last user message.
    let body = json!({"model": "m", "stream": true, "messages": [
        {"role": "user", "content": "call get_weather {}"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "\"rain\""}]},
    ]});
    assert_eq!(
        complete(&addr, &body).await.texts.concat(),
        "tool said: rain"
    );
    child.kill().await.unwrap();
}
