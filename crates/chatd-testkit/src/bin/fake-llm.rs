//! The fake LLM as a separate process, for end-to-end tests that start real
//! `chatd` replicas.
//!
//! ```text
//! fake-llm [--listen 127.0.0.1:0] [--mode echo | slow-parts:N:MS]
//! ```
//!
//! Prints `listening on http://ADDR` once it accepts connections (the base URL
//! to configure is `http://ADDR/v1`, for an `openai-compat` provider as for an
//! `anthropic` one: `/v1/chat/completions` and `/v1/messages` both answer) and
//! serves until SIGINT or SIGTERM.
//! `echo` answers every request with `echo: <last user text>` in one chunk;
//! `slow-parts:N:MS` streams the same text in N parts, MS milliseconds apart.
//! Both report usage 10/5.

use std::time::Duration;

use anyhow::{Context as _, bail};
use chatd_testkit::fake_llm::{FakeLlm, Script};

#[derive(Debug, Clone, Copy)]
enum Mode {
    Echo,
    SlowParts { parts: usize, delay: Duration },
}

fn parse_mode(text: &str) -> anyhow::Result<Mode> {
    if text == "echo" {
        return Ok(Mode::Echo);
    }
    if let Some(rest) = text.strip_prefix("slow-parts:")
        && let Some((parts, ms)) = rest.split_once(':')
    {
        return Ok(Mode::SlowParts {
            parts: parts.parse().context("N in slow-parts:N:MS")?,
            delay: Duration::from_millis(ms.parse().context("MS in slow-parts:N:MS")?),
        });
    }
    bail!("unknown mode {text:?} (expected echo or slow-parts:N:MS)")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut listen = "127.0.0.1:0".to_owned();
    let mut mode = Mode::Echo;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next().context("--listen needs an address")?,
            "--mode" => mode = parse_mode(&args.next().context("--mode needs a value")?)?,
            "-h" | "--help" => {
                println!("usage: fake-llm [--listen ADDR] [--mode echo|slow-parts:N:MS]");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    let server = FakeLlm::start_on(listen.parse().context("--listen address")?).await?;
    server.set_default_fn(move |request| match mode {
        Mode::Echo => Script::echo_of(request),
        Mode::SlowParts { parts, delay } => {
            let text = format!("echo: {}", request.last_user_text().unwrap_or_default());
            Script::text_in_parts(&text, parts, delay).usage(10, 5)
        }
    });
    println!("listening on http://{}", server.addr());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    Ok(())
}
