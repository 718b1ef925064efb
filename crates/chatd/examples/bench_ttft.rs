//! Time to first token (issue 7, "Check") and tokens per second (issue 12,
//! "Measure"): through chatd versus calling the model server directly,
//! against servers that already run (for example the ones `scripts/run.sh`
//! starts).
//!
//! Each run, alternating the two paths so that neither profits from a warmer
//! model:
//!
//! - **direct**: `POST {model_url}/chat/completions` with `stream: true`
//!   (usage included) and the prompt as the only user message; TTFT is the
//!   time from sending the request to the first SSE chunk carrying non-empty
//!   `delta.content`.
//! - **chatd**: `POST {chatd_url}/api/v2/chats` with the prompt, then the
//!   chat's WebSocket stream; TTFT is the time from sending the create
//!   request to the first `message_part` whose part is a non-empty text
//!   delta. This includes the HTTP transition, the worker's acquisition
//!   (woken by `chat:ownership`), the runner start, the provider request,
//!   the part buffer and the stream loop.
//!
//! Tokens per second, on both paths, is the answer's output tokens (the
//! provider's usage: the final chunk's `usage.completion_tokens` directly,
//! the committed message's `usage.output_tokens` through chatd) after the
//! first, divided by the time from the first to the last text received: the
//! rate at which a reader sees the answer arrive, without the TTFT.
//!
//! Prints every run, min/median/max for each path, and the medians' ratio
//! (chatd / direct).
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
    println!("run  direct_ms  direct_tok/s  chatd_ms  chatd_tok/s");
    for run in 1..=args.runs {
        let d = direct_run(&http, &args).await.context("direct path")?;
        let c = chatd_run(&http, &args).await.context("chatd path")?;
        println!(
            "{run:>3}  {:>9.1}  {:>12.1}  {:>8.1}  {:>11.1}",
            ms(d.ttft),
            d.tokens_per_second(),
            ms(c.ttft),
            c.tokens_per_second()
        );
        direct.push(d);
        through.push(c);
    }
    let ttft = |runs: &[Run]| runs.iter().map(|r| ms(r.ttft)).collect::<Vec<_>>();
    let rate = |runs: &[Run]| runs.iter().map(Run::tokens_per_second).collect::<Vec<_>>();
    let (d_ttft, c_ttft) = (
        report("direct", "ms", ttft(&direct)),
        report("chatd", "ms", ttft(&through)),
    );
    let (d_rate, c_rate) = (
        report("direct", "tokens/s", rate(&direct)),
        report("chatd", "tokens/s", rate(&through)),
    );
    println!(
        "chatd / direct: TTFT {:.2}x, tokens/s {:.2}x",
        c_ttft / d_ttft,
        c_rate / d_rate
    );
    Ok(())
}

/// One answer on one path.
struct Run {
    /// Request sent to first non-empty text.
    ttft: Duration,
    /// First to last non-empty text.
    streaming: Duration,
    /// Output tokens the provider reported.
    tokens: u64,
}

impl Run {
    /// Output tokens after the first, per second of streaming (0 when the
    /// answer had one token).
    fn tokens_per_second(&self) -> f64 {
        let secs = self.streaming.as_secs_f64();
        if self.tokens < 2 || secs <= 0.0 {
            return 0.0;
        }
        (self.tokens - 1) as f64 / secs
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Prints min/median/max of `samples` and returns the median.
fn report(name: &str, unit: &str, mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    let median = samples[samples.len() / 2];
    println!(
        "{name:>6}: min {:.1} {unit}, median {median:.1} {unit}, max {:.1} {unit} ({} runs)",
        samples[0],
        samples[samples.len() - 1],
        samples.len()
    );
    median
}

/// The direct path: a streamed completion with usage.
async fn direct_run(http: &reqwest::Client, args: &Args) -> anyhow::Result<Run> {
    let started = Instant::now();
    let response = http
        .post(format!("{}/chat/completions", args.model_url))
        .json(&json!({
            "model": args.model,
            "stream": true,
            "max_tokens": 512,
            "temperature": 0.3,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": args.prompt}],
        }))
        .send()
        .await?
        .error_for_status()?;
    let mut body = response.bytes_stream();
    let mut pending = String::new();
    let (mut first, mut last, mut tokens) = (None, None, None);
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
                let now = started.elapsed();
                first.get_or_insert(now);
                last = Some(now);
            }
            if let Some(n) = event["usage"]["completion_tokens"].as_u64() {
                tokens = Some(n);
            }
        }
    }
    let (Some(first), Some(last)) = (first, last) else {
        bail!("the stream ended without content")
    };
    Ok(Run {
        ttft: first,
        streaming: last - first,
        tokens: tokens.context("the stream reported no usage")?,
    })
}

/// The chatd path: create a chat, text `message_part`s on its stream, the
/// committed answer's usage.
async fn chatd_run(http: &reqwest::Client, args: &Args) -> anyhow::Result<Run> {
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
    let (mut ttft, mut last, mut tokens) = (None, None, None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while let Ok(Some(frame)) = tokio::time::timeout_at(deadline, socket.next()).await {
        let tungstenite::Message::Text(text) = frame? else {
            continue;
        };
        let events: Vec<Value> = serde_json::from_str(&text)?;
        for event in events {
            match event["type"].as_str() {
                Some("message_part") => {
                    let part = &event["message_part"]["part"];
                    if part["type"] == "text"
                        && part["text"].as_str().is_some_and(|s| !s.is_empty())
                    {
                        last = Some(started.elapsed());
                        if ttft.is_some() {
                            continue;
                        }
                        ttft = last;
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
                Some("message") if event["message"]["role"] == "assistant" => {
                    tokens = event["message"]["usage"]["output_tokens"].as_u64();
                }
                // Wait for the turn to end so the next run starts idle.
                Some("status") if ttft.is_some() && event["status"]["status"] != "running" => {
                    let (Some(first), Some(last)) = (ttft, last) else {
                        bail!("no text part arrived");
                    };
                    return Ok(Run {
                        ttft: first,
                        streaming: last - first,
                        tokens: tokens.context("the committed answer has no usage")?,
                    });
                }
                Some("error") => bail!("the chat failed: {}", event["error"]),
                _ => {}
            }
        }
    }
    bail!("the turn did not end within 300 s")
}
