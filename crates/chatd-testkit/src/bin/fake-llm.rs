//! The fake LLM as a separate process, for end-to-end tests that start real
//! `chatd` replicas (and the browser tests of `web/e2e`).
//!
//! ```text
//! fake-llm [--listen 127.0.0.1:0] [--mode echo | slow-parts:N:MS | scripted[:N:MS]]
//! ```
//!
//! Prints `listening on http://ADDR` once it accepts connections (the base URL
//! to configure is `http://ADDR/v1`, for an `openai-compat` provider as for an
//! `anthropic` one: `/v1/chat/completions` and `/v1/messages` both answer) and
//! serves until SIGINT or SIGTERM.
//! `echo` answers every request with `echo: <last user text>` in one chunk;
//! `slow-parts:N:MS` streams the same text in N parts, MS milliseconds apart.
//!
//! `scripted` lets a test drive the model through what it sends, looking at
//! the end of the conversation in this order:
//!
//! - the last message is a tool result (OpenAI `role: "tool"` messages,
//!   Anthropic `tool_result` blocks): `tool said: <result>` in one chunk, the
//!   results of parallel calls joined with `; `, a result that is a JSON
//!   string unquoted (`"sunny"` → `sunny`), any other JSON as sent;
//! - the last user text is `search <query>`: a provider-hosted web search
//!   (API.md "Workspaces and provider-hosted tools"): the text
//!   `Searching. `, a search for `<query>` with id `srvtoolu_fake_<n>` and
//!   one result (`https://example.org/search/<n>`, titled
//!   `About <query>`), then the text `Found <query>.` citing it. On the
//!   Anthropic route (`/v1/messages`) these are `server_tool_use`,
//!   `web_search_tool_result` and a cited text block, which chatd keeps
//!   when the model config has `options.provider_tools: ["web_search"]`;
//!   on the OpenAI route only the text with a `url_citation`;
//! - the last user text is `call <tool_name> [<json args>]`: a call of that
//!   tool with those arguments (`{}` when absent; sent as they are, even when
//!   they are not valid JSON) and id `call_fake_<n>`, no text;
//! - the last user text contains `fail` (any case): HTTP 400 with an OpenAI
//!   `invalid_request_error` whose message is
//!   `fake LLM: told to fail by "<text>"` (not retried: the turn ends in
//!   `error`);
//! - the last user text contains `overloaded` (any case): HTTP 503 with an
//!   OpenAI `server_error` whose message is `fake LLM: overloaded`, every
//!   time (retried with backoff until the retries run out, so that a test
//!   can watch the retry banner and interrupt the retries);
//! - the last user text contains `slow` (any case): `echo: <text>` streamed
//!   over about N × MS milliseconds (default `scripted:40:250`, 10 s) in at
//!   most N parts, so that a test can queue, promote or interrupt meanwhile;
//! - anything else: `echo: <text>` in 10 parts, 100 ms apart (about 1 s).
//!
//! An echo ends with the finish reason `stop`, or `length` when the text
//! contains `truncate` (the provider's output limit cut the answer short),
//! or `content_filter` when it contains `filtered` (any case).
//!
//! Every mode reports usage 10/5. Title requests are answered with
//! `A chat with the fake model` in every mode, and the worker's compaction
//! (summarization) requests with a one-line summary
//! (`chatd_testkit::fake_llm::summary_of`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use chatd_testkit::fake_llm::{
    FakeLlm, RecordedRequest, Script, is_compaction_request, summary_of,
};

const USAGE: &str =
    "usage: fake-llm [--listen ADDR] [--mode echo | slow-parts:N:MS | scripted[:N:MS]]";

#[derive(Debug, Clone, Copy)]
enum Mode {
    Echo,
    SlowParts {
        parts: usize,
        delay: Duration,
    },
    Scripted {
        slow_parts: usize,
        slow_delay: Duration,
    },
}

fn parse_parts_and_ms(rest: &str, mode: &str) -> anyhow::Result<(usize, Duration)> {
    let (parts, ms) = rest
        .split_once(':')
        .with_context(|| format!("expected {mode}:N:MS"))?;
    let parts: usize = parts.parse().with_context(|| format!("N in {mode}:N:MS"))?;
    anyhow::ensure!(parts > 0, "N in {mode}:N:MS must be positive");
    let ms: u64 = ms.parse().with_context(|| format!("MS in {mode}:N:MS"))?;
    Ok((parts, Duration::from_millis(ms)))
}

fn parse_mode(text: &str) -> anyhow::Result<Mode> {
    if text == "echo" {
        return Ok(Mode::Echo);
    }
    if text == "scripted" {
        return Ok(Mode::Scripted {
            slow_parts: 40,
            slow_delay: Duration::from_millis(250),
        });
    }
    if let Some(rest) = text.strip_prefix("scripted:") {
        let (slow_parts, slow_delay) = parse_parts_and_ms(rest, "scripted")?;
        return Ok(Mode::Scripted {
            slow_parts,
            slow_delay,
        });
    }
    if let Some(rest) = text.strip_prefix("slow-parts:") {
        let (parts, delay) = parse_parts_and_ms(rest, "slow-parts")?;
        return Ok(Mode::SlowParts { parts, delay });
    }
    bail!("unknown mode {text:?} (expected echo, slow-parts:N:MS or scripted[:N:MS])")
}

/// The `scripted` mode's answer to `request` (see the module docs).
fn scripted(request: &RecordedRequest, slow_parts: usize, slow_delay: Duration) -> Script {
    static NEXT_CALL: AtomicU64 = AtomicU64::new(1);
    let results = request.trailing_tool_results();
    if !results.is_empty() {
        let said: Vec<String> = results
            .iter()
            .map(|r| match serde_json::from_str::<serde_json::Value>(r) {
                Ok(serde_json::Value::String(s)) => s,
                _ => r.clone(),
            })
            .collect();
        return Script::text(format!("tool said: {}", said.join("; "))).usage(10, 5);
    }
    let text = request.last_user_text().unwrap_or_default();
    if let Some(query) = text.trim().strip_prefix("search ") {
        let query = query.trim();
        let n = NEXT_CALL.fetch_add(1, Ordering::SeqCst);
        let url = format!("https://example.org/search/{n}");
        let title = format!("About {query}");
        return Script::new()
            .then_text("Searching. ")
            .web_search(&format!("srvtoolu_fake_{n}"), query, &[(&url, &title)])
            .cited_text(
                &format!("Found {query}."),
                &url,
                &title,
                &format!("A page about {query}."),
            )
            .usage(10, 5);
    }
    if let Some(call) = text.trim().strip_prefix("call ") {
        let call = call.trim();
        let (name, args) = call.split_once(char::is_whitespace).unwrap_or((call, ""));
        let args = if args.trim().is_empty() {
            "{}"
        } else {
            args.trim()
        };
        let id = format!("call_fake_{}", NEXT_CALL.fetch_add(1, Ordering::SeqCst));
        return Script::new().tool_call(&id, name, args, 2).usage(10, 5);
    }
    if text.to_lowercase().contains("fail") {
        let body = serde_json::json!({"error": {
            "message": format!("fake LLM: told to fail by {text:?}"),
            "type": "invalid_request_error",
            "code": null,
        }});
        return Script::http_error(400, body.to_string());
    }
    let lower = text.to_lowercase();
    if lower.contains("overloaded") {
        let body = serde_json::json!({"error": {
            "message": "fake LLM: overloaded",
            "type": "server_error",
            "code": null,
        }});
        return Script::http_error(503, body.to_string());
    }
    let answer = format!("echo: {text}");
    let script = if lower.contains("slow") {
        // Spread N × MS over the parts there are (fewer than N for a short
        // text), so that a slow answer always lasts about as long.
        let parts = slow_parts.min(answer.chars().count()).max(1);
        let total = slow_delay * u32::try_from(slow_parts).unwrap_or(u32::MAX);
        let delay = total / u32::try_from(parts).unwrap_or(u32::MAX);
        Script::text_in_parts(&answer, parts, delay)
    } else {
        Script::text_in_parts(&answer, 10, Duration::from_millis(100))
    };
    let script = if lower.contains("truncate") {
        script.finish("length")
    } else if lower.contains("filtered") {
        script.finish("content_filter")
    } else {
        script
    };
    script.usage(10, 5)
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
                println!("{USAGE}");
                println!();
                println!("  echo              echo: <last user text>, one chunk");
                println!("  slow-parts:N:MS   the same in N parts, MS ms apart");
                println!("  scripted[:N:MS]   the answer depends on the conversation's end:");
                println!("                      tool result      -> tool said: <result>");
                println!("                      search QUERY     -> a web search, then cited text");
                println!("                      call NAME [JSON] -> a call of tool NAME");
                println!(
                    "                      text with 'fail' -> HTTP 400 invalid_request_error"
                );
                println!(
                    "                      text with 'overloaded' -> HTTP 503 server_error, always"
                );
                println!("                      text with 'slow' -> echo over about N x MS ms");
                println!("                                          (default 40 x 250 ms)");
                println!("                      anything else    -> echo in 10 parts over ~1 s");
                println!("                    an echo finishes with 'length' when the text has");
                println!("                    'truncate', 'content_filter' when it has 'filtered'");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let server = FakeLlm::start_on(listen.parse().context("--listen address")?).await?;
    server.set_default_fn(move |request| match mode {
        _ if is_compaction_request(request) => summary_of(request),
        Mode::Echo => Script::echo_of(request),
        Mode::SlowParts { parts, delay } => {
            let text = format!("echo: {}", request.last_user_text().unwrap_or_default());
            Script::text_in_parts(&text, parts, delay).usage(10, 5)
        }
        Mode::Scripted {
            slow_parts,
            slow_delay,
        } => scripted(request, slow_parts, slow_delay),
    });
    println!("listening on http://{}", server.addr());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    Ok(())
}
