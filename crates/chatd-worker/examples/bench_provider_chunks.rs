//! Micro-benchmark of the provider layer (issue "Providers and tools",
//! Measure): the overhead added per streamed chunk, in microseconds, over
//! recorded transcripts.
//!
//! A chunk is one SSE event as the provider flushes it (the transcript is cut
//! into one network read per event). Per chunk it measures, cumulatively:
//! 1. **parse**: SSE framing, JSON parsing and decoding into `StreamEvent`s
//!    (`chatd_llm::sse::decode` with `chatd_llm::{openai,anthropic}::stream::Decoder`);
//! 2. **+ event**: accumulating the events into the assistant message
//!    (`ResponseBuilder`, as the generation task does);
//! 3. **+ buffer**: adding each delta to the message part buffer (serialized
//!    size accounting, seq numbering, subscriber wake-up), i.e. everything
//!    the worker does between a network read and the live preview.
//!
//! ```text
//! cargo run --release -p chatd-worker --example bench_provider_chunks [-- --iterations 2000]
//! ```
//! Transcripts: the project's own (`crates/chatd-llm/tests/fixtures`) and,
//! when `../shared/fixtures/providers` is present, the recorded OpenAI and
//! Anthropic ones.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_core::{ChatRole, Episode, PartDelta};
use chatd_llm::sse::decode;
use chatd_llm::{EventStream, ProviderError, ResponseBuilder, StreamEvent};
use chatd_worker::PartBuffer;
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    OpenAi,
    Anthropic,
}

#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Stage {
    Parse,
    Event,
    Buffer,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut iterations = 2000usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--iterations" => iterations = args.next().unwrap_or_default().parse()?,
            other => anyhow::bail!("unknown argument {other:?}"),
        }
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let own = manifest.join("../chatd-llm/tests/fixtures");
    let shared = manifest.join("../../../shared/fixtures/providers");
    let mut transcripts = vec![
        (own.join("llamacpp-text.sse"), Wire::OpenAi),
        (own.join("llamacpp-tools-forced.sse"), Wire::OpenAi),
        (own.join("synthetic-utf8-reasoning.sse"), Wire::OpenAi),
        (own.join("anthropic-synthetic-text.sse"), Wire::Anthropic),
        (
            own.join("anthropic-synthetic-thinking.sse"),
            Wire::Anthropic,
        ),
    ];
    for (file, wire) in [
        ("openai-text.sse", Wire::OpenAi),
        ("openai-parallel-tool-calls.sse", Wire::OpenAi),
        ("anthropic-text.sse", Wire::Anthropic),
        ("anthropic-thinking.sse", Wire::Anthropic),
    ] {
        let path = shared.join(file);
        if path.is_file() {
            transcripts.push((path, wire));
        } else {
            eprintln!("skipping {file}: the shared fixtures are absent");
        }
    }
    println!(
        "provider layer overhead per streamed chunk, µs ({iterations} iterations per transcript, {})",
        if cfg!(debug_assertions) {
            "DEBUG build: use --release for figures"
        } else {
            "release build"
        }
    );
    println!(
        "{:<40} {:>6} {:>8} {:>9} {:>10}",
        "transcript", "chunks", "parse", "+ event", "+ buffer"
    );
    let parts = PartBuffer::new(CancellationToken::new());
    let mut episode_counter = 0i64;
    let mut totals = [Duration::ZERO; 3];
    let mut total_chunks = 0usize;
    for (path, wire) in transcripts {
        let body = std::fs::read(&path)?;
        let chunks = Arc::new(split_events(&body));
        let mut row = [0f64; 3];
        for (i, stage) in [Stage::Parse, Stage::Event, Stage::Buffer]
            .into_iter()
            .enumerate()
        {
            // Warm up, then measure.
            for _ in 0..iterations / 10 {
                run(&chunks, wire, stage, &parts, &mut episode_counter).await;
            }
            let started = Instant::now();
            for _ in 0..iterations {
                run(&chunks, wire, stage, &parts, &mut episode_counter).await;
            }
            let elapsed = started.elapsed();
            totals[i] += elapsed;
            row[i] = elapsed.as_secs_f64() * 1e6 / (iterations * chunks.len()) as f64;
        }
        total_chunks += iterations * chunks.len();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        println!(
            "{:<40} {:>6} {:>8.2} {:>9.2} {:>10.2}",
            name,
            chunks.len(),
            row[0],
            row[1],
            row[2]
        );
    }
    let per_chunk = |d: Duration| d.as_secs_f64() * 1e6 / total_chunks as f64;
    println!(
        "{:<40} {:>6} {:>8.2} {:>9.2} {:>10.2}",
        "all (weighted by chunks)",
        "",
        per_chunk(totals[0]),
        per_chunk(totals[1]),
        per_chunk(totals[2])
    );
    Ok(())
}

/// The body cut after every blank line: one piece per SSE event.
fn split_events(body: &[u8]) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < body.len() {
        let end = if body[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if body[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        };
        match end {
            Some(end) => {
                pieces.push(body[start..end].to_vec());
                start = end;
                i = end;
            }
            None => i += 1,
        }
    }
    if start < body.len() {
        pieces.push(body[start..].to_vec());
    }
    pieces
}

/// One network read: a piece of a shared body, without copying it.
struct Piece(Arc<Vec<Vec<u8>>>, usize);

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.0[self.1]
    }
}

async fn run(
    chunks: &Arc<Vec<Vec<u8>>>,
    wire: Wire,
    stage: Stage,
    parts: &PartBuffer,
    counter: &mut i64,
) {
    let shared = chunks.clone();
    let bytes = futures::stream::iter(
        (0..chunks.len()).map(move |i| Ok::<_, ProviderError>(Piece(shared.clone(), i))),
    );
    let mut stream: EventStream = match wire {
        Wire::OpenAi => decode(
            bytes,
            chatd_llm::openai::stream::Decoder::new("bench".into()),
        ),
        Wire::Anthropic => decode(
            bytes,
            chatd_llm::anthropic::stream::Decoder::new("bench".into()),
        ),
    };
    *counter += 1;
    let episode = Episode {
        chat_id: uuid::Uuid::nil(),
        history_version: *counter,
        generation_attempt: 1,
    };
    if stage == Stage::Buffer {
        let _ = parts.create_episode(episode);
    }
    let mut builder = ResponseBuilder::new();
    let mut names: Vec<(usize, String, String)> = Vec::new();
    while let Some(item) = stream.next().await {
        let Ok(event) = item else { break };
        if stage >= Stage::Event {
            builder.push(&event);
        }
        if stage == Stage::Buffer {
            let delta = match event {
                StreamEvent::TextDelta(text) => Some(PartDelta::Text { text }),
                StreamEvent::ReasoningDelta(text) => Some(PartDelta::Reasoning { text }),
                StreamEvent::ToolCallStart { index, id, name } => {
                    names.push((index, id.clone(), name.clone()));
                    Some(PartDelta::ToolCall {
                        tool_call_id: id,
                        tool_name: name,
                        args_delta: String::new(),
                    })
                }
                StreamEvent::ToolCallDelta { index, args_delta } => names
                    .iter()
                    .find(|(i, _, _)| *i == index)
                    .map(|(_, id, name)| PartDelta::ToolCall {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                        args_delta,
                    }),
                _ => None,
            };
            if let Some(delta) = delta {
                let _ = parts.add_part(episode, ChatRole::Assistant, delta);
            }
        }
    }
    std::hint::black_box(builder.parts());
    if stage == Stage::Buffer {
        parts.close_episode(episode);
    }
}
