//! Time to first token (issue 7, "Check"): through chatd versus calling the
//! model server directly, against servers that already run (for example the
//! ones `scripts/run.sh` starts).
//!
//! Each run, alternating the two paths so that neither profits from a warmer
//! model:
//!
//! - **direct**: `POST {model_url}/chat/completions` with `stream: true` and
//!   the prompt as the only user message; the time from sending the request
//!   to the first SSE chunk carrying non-empty `delta.content`.
//! - **chatd**: `POST {chatd_url}/api/v2/chats` with the prompt, then the
//!   chat's WebSocket stream; the time from sending the create request to
//!   the first `message_part` whose part is a non-empty text delta. This
//!   includes the HTTP transition, the worker's acquisition (woken by
//!   `chat:ownership`), the runner start, the provider request, the part
//!   buffer and the stream loop.
//!
//! Prints every run and min/median/max in milliseconds for each path.
//!
//! ```text
//! cargo build --release -p chatd --example bench_ttft
//! target/release/examples/bench_ttft --token "$(cat ~/.local/share/chatd/admin-token)"
//! ```

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

/// Time-to-first-token benchmark.
#[derive(Debug, Parser)]
struct Args {
    /// chatd's base URL.
    #[arg(long, env = "CHATD_URL", default_value = "http://127.0.0.1:3000")]
    chatd_url: String,
    /// An API token for chatd.
    #[arg(long, env = "CHATD_TOKEN")]
    token: String,
    /// The model server's OpenAI-compatible base URL (with `/v1`).
    #[arg(long, default_value = "http://127.0.0.1:8081/v1")]
    model_url: String,
    /// The model name sent on the direct path.
    #[arg(long, default_value = "smollm2-135m-instruct")]
    model: String,
    /// Runs per path.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Print, for each chatd run, when the create answered and the stream
    /// opened (ms since the create was sent).
    #[arg(long)]
    breakdown: bool,
    /// The prompt.
    #[arg(long, default_value = "Hello! In two sentences, what is PostgreSQL?")]
    prompt: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let http = reqwest::Client::new();
    let mut direct = Vec::new();
    let mut through = Vec::new();
    println!("run  direct_ms  chatd_ms");
    for run in 1..=args.runs {
        let d = direct_ttft(&http, &args).await.context("direct path")?;
        let c = chatd_ttft(&http, &args).await.context("chatd path")?;
        println!("{run:>3}  {:>9.1}  {:>8.1}", ms(d), ms(c));
        direct.push(d);
        through.push(c);
    }
    report("direct", &mut direct);
    report("chatd", &mut through);
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let median = samples[samples.len() / 2];
    println!(
        "{name:>6}: min {:.1} ms, median {:.1} ms, max {:.1} ms ({} runs)",
        ms(samples[0]),
        ms(median),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}

/// The direct path: first non-empty `delta.content` of a streamed completion.
async fn direct_ttft(http: &reqwest::Client, args: &Args) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response = http
        .post(format!("{}/chat/completions", args.model_url))
        .json(&json!({
            "model": args.model,
            "stream": true,
            "max_tokens": 512,
            "temperature": 0.3,
            "messages": [{"role": "user", "content": args.prompt}],
        }))
        .send()
        .await?
        .error_for_status()?;
    let mut body = response.bytes_stream();
    let mut pending = String::new();
    while let Some(chunk) = body.next().await {
        pending.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = pending.find('\n') {
            let line = pending[..end].trim().to_owned();
            pending.drain(..=end);
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let Ok(event) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            let content = &event["choices"][0]["delta"]["content"];
            if content.as_str().is_some_and(|s| !s.is_empty()) {
                let ttft = started.elapsed();
                // Let the generation finish so the next run starts idle.
                while body.next().await.is_some() {}
                return Ok(ttft);
            }
        }
    }
    bail!("the stream ended without content")
}

/// The chatd path: create a chat, first text `message_part` on its stream.
async fn chatd_ttft(http: &reqwest::Client, args: &Args) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let chat: Value = http
        .post(format!("{}/api/v2/chats", args.chatd_url))
        .bearer_auth(&args.token)
        .json(&json!({"content": [{"type": "text", "text": args.prompt}], "title": "ttft"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let created = started.elapsed();
    let id = chat["id"].as_str().context("chat id")?.to_owned();
    let ws_url = format!(
        "{}/api/v2/chats/{id}/stream",
        args.chatd_url.replacen("http", "ws", 1)
    );
    let mut request = ws_url.into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {}", args.token).parse()?);
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await?;
    let connected = started.elapsed();
    let mut ttft = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while let Ok(Some(frame)) = tokio::time::timeout_at(deadline, socket.next()).await {
        let tungstenite::Message::Text(text) = frame? else {
            continue;
        };
        let events: Vec<Value> = serde_json::from_str(&text)?;
        for event in events {
            match event["type"].as_str() {
                Some("message_part") if ttft.is_none() => {
                    let part = &event["message_part"]["part"];
                    if part["type"] == "text"
                        && part["text"].as_str().is_some_and(|s| !s.is_empty())
                    {
                        ttft = Some(started.elapsed());
                        if args.breakdown {
                            eprintln!(
                                "     chatd: created {:.1} ms, stream open {:.1} ms, first part {:.1} ms",
                                ms(created),
                                ms(connected),
                                ms(started.elapsed())
                            );
                        }
                    }
                }
                // Wait for the turn to end so the next run starts idle.
                Some("status") if ttft.is_some() && event["status"]["status"] != "running" => {
                    return Ok(ttft.unwrap_or_default());
                }
                Some("error") => bail!("the chat failed: {}", event["error"]),
                _ => {}
            }
        }
    }
    ttft.context("no text part arrived")
}
