//! Following a chat's stream (API.md "Stream (WebSocket)"): connects,
//! feeds every event to the [`Renderer`] and writes what it returns at once
//! (flushing, so deltas appear as they arrive), reconnects with backoff and
//! `after_id` = the highest committed message id seen when the connection
//! drops, and stops on Ctrl-C or, when asked, once the chat is idle.
//!
//! "Idle" is the renderer's view (status `waiting`, `error` or
//! `requires_action`, empty queue), confirmed with `GET /chats/{chat}`
//! so that a status read before a later transition cannot end the wait
//! early. An `error` or `requires_action` status waits up to
//! [`REPORT_GRACE`] for the `error`/`action_required` event that follows
//! it (in the same frame or the next), so the error or the pending calls
//! are named.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use chatd_core::ChatStatus;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::sync::CancellationToken;

use super::client::Client;
use super::output::write;
use super::render::{Idle, Renderer};
use super::wire::{StreamEvent, describe_error};
use super::{EXIT_ERROR, EXIT_INTERRUPTED, EXIT_REQUIRES_ACTION};

/// First reconnect delay; doubles up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
/// Longest reconnect delay.
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// How often the client pings the server.
const PING_INTERVAL: Duration = Duration::from_secs(15);
/// Silence (not even a pong) after which the connection counts as dropped.
const SILENCE_LIMIT: Duration = Duration::from_secs(45);
/// How long an idle `error`/`requires_action` status waits for the event
/// that names the error or the pending calls before the chat is reported
/// without it.
const REPORT_GRACE: Duration = Duration::from_millis(500);

/// When [`follow`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// On Ctrl-C only (`chatd chat watch`); exits 0.
    CtrlC,
    /// Once the chat is idle with an empty queue (`new`, `send`, `watch
    /// --once`); Ctrl-C first exits 130.
    Idle,
}

/// How one connection ended.
enum End {
    /// Done: exit with this code.
    Exit(ExitCode),
    /// The connection dropped (the reason, for the notice); whether it had
    /// delivered any frame.
    Dropped(String, bool),
}

/// Follows `chat` from `after_id` (0: the whole history) until `until`,
/// rendering with `renderer`; returns the process exit code: 0, or
/// [`EXIT_ERROR`] when the chat ends in `error`, [`EXIT_REQUIRES_ACTION`]
/// in `requires_action`, [`EXIT_INTERRUPTED`] on Ctrl-C while waiting for
/// idle.
///
/// # Errors
/// The first connection fails (unreachable server, `401`, `404`), or
/// standard output or error cannot be written.
pub async fn follow(
    client: &Client,
    chat: &str,
    after_id: i64,
    mut renderer: Renderer,
    until: Until,
) -> anyhow::Result<ExitCode> {
    let ctrl_c = CancellationToken::new();
    let on_signal = ctrl_c.clone();
    let signal_task = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    let result = follow_inner(client, chat, after_id, &mut renderer, until, &ctrl_c).await;
    signal_task.abort();
    write(renderer.finish())?;
    result
}

async fn follow_inner(
    client: &Client,
    chat: &str,
    after_id: i64,
    renderer: &mut Renderer,
    until: Until,
    ctrl_c: &CancellationToken,
) -> anyhow::Result<ExitCode> {
    let mut backoff = INITIAL_BACKOFF;
    let mut connected = false;
    loop {
        let after = renderer.last_message_id().max(after_id);
        let connect = tokio::select! {
            () = ctrl_c.cancelled() => return interrupted(renderer, chat, until),
            connect = client.stream(chat, after) => connect,
        };
        let end = match connect {
            Ok(socket) => {
                connected = true;
                read(client, chat, socket, renderer, until, ctrl_c).await?
            }
            Err(err) if !connected => return Err(err),
            Err(err) => End::Dropped(format!("{err:#}"), false),
        };
        match end {
            End::Exit(code) => return Ok(code),
            End::Dropped(reason, delivered) => {
                if delivered {
                    backoff = INITIAL_BACKOFF;
                }
                write(renderer.finish())?;
                eprintln!(
                    "[stream lost: {reason}; reconnecting in {:.1}s]",
                    backoff.as_secs_f64()
                );
                tokio::select! {
                    () = ctrl_c.cancelled() => return interrupted(renderer, chat, until),
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Reads one connection until it drops or the follow is done.
async fn read(
    client: &Client,
    chat: &str,
    socket: super::client::StreamSocket,
    renderer: &mut Renderer,
    until: Until,
    ctrl_c: &CancellationToken,
) -> anyhow::Result<End> {
    let (mut sink, mut frames) = socket.split();
    let mut ping = tokio::time::interval(PING_INTERVAL);
    ping.tick().await;
    let mut last_heard = Instant::now();
    let mut delivered = false;
    // Set while the chat is idle in `error`/`requires_action` but the event
    // that says which error or which calls has not been rendered yet: it
    // follows the status (API.md "Stream"), possibly in the next frame.
    let mut report_deadline: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = ctrl_c.cancelled() => {
                let _ = sink.send(WsMessage::Close(None)).await;
                return Ok(End::Exit(interrupted(renderer, chat, until)?));
            }
            () = sleep_until_some(report_deadline) => {
                // The report did not come: confirm and say it generically.
                report_deadline = None;
                if let Some(idle) = renderer.idle()
                    && let Some(code) = confirm_idle(client, chat, renderer, idle).await?
                {
                    return Ok(End::Exit(code));
                }
            }
            _ = ping.tick() => {
                if last_heard.elapsed() > SILENCE_LIMIT {
                    return Ok(End::Dropped("the server went silent".into(), delivered));
                }
                let _ = sink.send(WsMessage::Ping(Default::default())).await;
            }
            frame = frames.next() => {
                last_heard = Instant::now();
                match frame {
                    Some(Ok(WsMessage::Text(text))) => {
                        delivered = true;
                        for event in decode(text.as_str()) {
                            write(renderer.apply(&event))?;
                        }
                        if until == Until::Idle {
                            match renderer.idle() {
                                Some(
                                    Idle::Error { reported: false }
                                    | Idle::RequiresAction { reported: false },
                                ) => {
                                    report_deadline.get_or_insert_with(|| {
                                        tokio::time::Instant::now() + REPORT_GRACE
                                    });
                                }
                                Some(idle) => {
                                    report_deadline = None;
                                    if let Some(code) =
                                        confirm_idle(client, chat, renderer, idle).await?
                                    {
                                        return Ok(End::Exit(code));
                                    }
                                }
                                None => report_deadline = None,
                            }
                        }
                    }
                    Some(Ok(WsMessage::Close(frame))) => {
                        let reason = frame
                            .map(|f| format!("closed by the server ({} {})", f.code, f.reason))
                            .unwrap_or_else(|| "closed by the server".into());
                        return Ok(End::Dropped(reason, delivered));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(err)) => return Ok(End::Dropped(err.to_string(), delivered)),
                    None => return Ok(End::Dropped("connection closed".into(), delivered)),
                }
            }
        }
    }
}

/// Sleeps until `deadline`; never returns without one.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Decodes a frame (a JSON array of events); an event that does not
/// decode is skipped with a warning rather than ending the follow.
fn decode(text: &str) -> Vec<StreamEvent> {
    if let Ok(events) = serde_json::from_str::<Vec<StreamEvent>>(text) {
        return events;
    }
    let Ok(values) = serde_json::from_str::<Vec<Value>>(text) else {
        tracing::warn!("skipping a stream frame that is not a JSON array: {text}");
        return Vec::new();
    };
    values
        .into_iter()
        .filter_map(|value| match serde_json::from_value(value.clone()) {
            Ok(event) => Some(event),
            Err(err) => {
                tracing::warn!("skipping a stream event that does not decode ({err}): {value}");
                None
            }
        })
        .collect()
}

/// Confirms with `GET /chats/{chat}` that the chat is idle; returns the
/// exit code when it is (printing an error or pending action the stream
/// did not), `None` when it is busy again.
async fn confirm_idle(
    client: &Client,
    chat: &str,
    renderer: &mut Renderer,
    idle: Idle,
) -> anyhow::Result<Option<ExitCode>> {
    let fetched = client.chat(chat).await.ok();
    if idle != Idle::Answered
        && let Some(current) = &fetched
        && matches!(
            current.status,
            ChatStatus::Running | ChatStatus::Interrupting
        )
    {
        return Ok(None);
    }
    write(renderer.finish())?;
    if !renderer.reply_started() {
        eprintln!("the queued message was removed before it was sent");
        return Ok(Some(ExitCode::from(EXIT_ERROR)));
    }
    Ok(Some(match idle {
        Idle::Waiting | Idle::Answered => ExitCode::SUCCESS,
        Idle::Error { reported } => {
            if !reported {
                let error = fetched
                    .and_then(|c| c.last_error)
                    .map(|e| describe_error(&e))
                    .unwrap_or_else(|| "the chat is in error".into());
                eprintln!("error: {error}");
            }
            ExitCode::from(EXIT_ERROR)
        }
        Idle::RequiresAction { reported } => {
            if !reported {
                // The stream did not say which calls wait (`watch` lists
                // them): a generic hint.
                eprintln!(
                    "action required: the chat waits for client-side tool results\n{}",
                    renderer.generic_tool_results_hint()
                );
            }
            ExitCode::from(EXIT_REQUIRES_ACTION)
        }
    }))
}

/// Ctrl-C: in `--once`/reply mode a note that the chat goes on and 130;
/// plain `watch` ends normally.
fn interrupted(renderer: &mut Renderer, chat: &str, until: Until) -> anyhow::Result<ExitCode> {
    write(renderer.finish())?;
    Ok(match until {
        Until::CtrlC => ExitCode::SUCCESS,
        Until::Idle => {
            eprintln!("[stopped watching; the chat goes on: chatd chat watch {chat}]");
            ExitCode::from(EXIT_INTERRUPTED)
        }
    })
}
