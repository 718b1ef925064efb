//! The `fake-llm` binary serves the scripted fake LLM as its own process.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_llm_binary_prints_its_address_and_streams_slow_parts_of_the_echo() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fake-llm"))
        .args(["--listen", "127.0.0.1:0", "--mode", "slow-parts:3:20"])
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

    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"ping pong"}]}"#;
    let mut socket = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        socket.read_to_string(&mut response),
    )
    .await
    .unwrap()
    .unwrap();

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
