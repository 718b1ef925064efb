//! `chatd chat ...`: a command-line client of a chatd server's chat API
//! (API.md "Chat routes" and "Stream (WebSocket)").
//!
//! The server comes from `--url` / `CHATD_URL` (default
//! `http://127.0.0.1:3000`), the API token from `--token` / `CHATD_TOKEN`
//! (required). Subcommands: `list`, `children`, `new`, `send`, `watch`,
//! `interrupt`, `tool-results`, `approve`, `deny`, `queue list|edit|move`.
//! `new --subagents` offers the model the built-in agent tools; `children
//! CHAT` lists the chats it spawned (`GET /chats?parent_id=`). `new` and `send` attach files
//! with `--file PATH` (uploaded first: `POST /files`).
//!
//! `new` and `send` stream the assistant's reply to standard output as it
//! is generated and exit when the chat is idle again; `watch` prints the
//! whole conversation and follows it live. Client-side ("dynamic") tools
//! (API.md `DynamicTool`) are offered with `new --tools`; when the model
//! calls one the chat stops in `requires_action`, the pending calls and the
//! command that answers them are printed on standard error, and
//! `tool-results` posts the outputs (`POST /chats/{chat}/tool-results`) and
//! streams the model's continuation as `send` streams a reply. MCP tool
//! calls that need approval (API.md "Tool approval (human in the loop)")
//! stop the chat the same way, listed as `[needs approval]`; `approve` and
//! `deny` answer them.
//!
//! Notices (the chat id, whether a message was queued, status changes,
//! errors, retries, pending tool calls, reasoning) go to standard error, so
//! standard output can be captured. What is printed, and how live parts
//! and committed messages are de-duplicated, is [`render`]; the stream loop
//! is [`follow`](mod@follow); the HTTP calls and their error messages are [`client`].
//! `chatd usage` and `chatd token list|revoke` are clients of the same kind
//! ([`account`]).
//!
//! Exit codes: 0 done; 1 an error (the server's message on standard
//! error), including a chat that ends in `error`; 2 bad usage;
//! [`EXIT_REQUIRES_ACTION`] (3) when the chat waits for client-side tool
//! results; [`EXIT_INTERRUPTED`] (130) when Ctrl-C stops a wait for a reply
//! (the chat goes on).

mod account;
mod client;
mod follow;
mod render;

pub use self::account::{
    TokenListArgs, TokenRevokeArgs, UsageArgs, token_list, token_revoke, usage,
};

use std::io::{IsTerminal as _, Read as _};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, bail};
use clap::{ArgGroup, Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use self::client::{Client, SendResponse};
use self::follow::{Until, follow};
use self::render::{Mode, Renderer, Style};

/// Exit code of a failure (and of a chat that ends in `error`).
pub const EXIT_ERROR: u8 = 1;
/// Exit code when the chat ends in `requires_action`.
pub const EXIT_REQUIRES_ACTION: u8 = 3;
/// Exit code when Ctrl-C stops a wait for a reply.
pub const EXIT_INTERRUPTED: u8 = 130;

/// The server URL when neither `--url` nor `CHATD_URL` gives one.
const DEFAULT_URL: &str = "http://127.0.0.1:3000";
/// The environment variable that gives the server URL.
const URL_ENV: &str = "CHATD_URL";

/// `chatd chat`: the server, the token and the subcommand. `Debug` prints
/// no token.
#[derive(Args)]
pub struct ChatArgs {
    /// Base URL of the chatd server.
    #[arg(long, global = true, env = URL_ENV, default_value = DEFAULT_URL)]
    url: String,

    /// API token (required; `chatd token create --user NAME` prints one).
    #[arg(long, global = true, env = "CHATD_TOKEN", hide_env_values = true)]
    token: Option<String>,

    #[command(subcommand)]
    command: ChatCommand,
}

impl std::fmt::Debug for ChatArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatArgs")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("command", &self.command)
            .finish()
    }
}

/// The subcommands of `chatd chat`.
#[derive(Debug, Subcommand)]
enum ChatCommand {
    /// List chats, newest first: id, status, updated_at, title.
    List {
        /// List archived chats instead.
        #[arg(long)]
        archived: bool,
        /// Print the API's JSON array instead.
        #[arg(long)]
        json: bool,
        /// How many chats (1..=100).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
    },
    /// List a chat's children (sub-agents), newest first: id, status,
    /// updated_at, title; archived (closed) ones follow, marked
    /// `[archived]`.
    Children {
        /// The parent chat id.
        chat: Uuid,
        /// Print the API's JSON arrays (unarchived, then archived) as one
        /// array instead.
        #[arg(long)]
        json: bool,
    },
    /// Start a chat and stream the assistant's reply to standard output.
    ///
    /// The chat id is printed on standard error as `chat <id>`. Exits 0
    /// when the reply is done, 1 when the chat ends in error, 3 when it
    /// waits for client-side tool results.
    New {
        /// Model config id (default: the server's default model).
        #[arg(long = "model", value_name = "MODEL_CONFIG_ID")]
        model: Option<Uuid>,
        /// System prompt.
        #[arg(long = "system", value_name = "PROMPT")]
        system: Option<String>,
        /// Title (default: one the model writes).
        #[arg(long)]
        title: Option<String>,
        /// Client-side tools the model may call: a JSON array of
        /// `{"name", "description", "input_schema"}` objects, inline or
        /// `@FILE`. A call stops the chat in requires_action (exit 3) until
        /// `chatd chat tool-results` answers it.
        #[arg(long, value_name = "TOOLS", value_parser = parse_tools)]
        tools: Option<Value>,
        /// Do not wait for the reply.
        #[arg(long)]
        no_watch: bool,
        /// Also print the created chat as JSON on standard output (first
        /// line; the reply, if watched, follows).
        #[arg(long)]
        json: bool,
        /// Offer the model the built-in agent tools (spawn_agent,
        /// wait_agent, message_agent, close_agent): it may start child
        /// chats; list them with `chatd chat children`.
        #[arg(long)]
        subagents: bool,
        /// Attach a file (at most 10 MiB; repeatable): uploaded first, then
        /// sent with the message.
        #[arg(long = "file", value_name = "PATH")]
        files: Vec<std::path::PathBuf>,
        /// The message; `-` or nothing reads it from standard input.
        #[arg(value_name = "TEXT")]
        text: Vec<String>,
    },
    /// Send a message to a chat and stream the reply.
    ///
    /// A busy chat queues the message (or, with --interrupt, interrupts the
    /// running turn; with --steer, the running turn reads it at its next
    /// step; with --reject, a busy chat refuses it); the reply streamed is
    /// the one to this message.
    Send {
        /// The chat id.
        chat: Uuid,
        /// Interrupt the running turn instead of queueing behind it.
        #[arg(long, conflicts_with_all = ["steer", "reject"])]
        interrupt: bool,
        /// Steer the running turn: the model reads the message at its next
        /// step, without the turn being interrupted.
        #[arg(long, conflicts_with = "reject")]
        steer: bool,
        /// Refuse to send to a busy chat (exit 1 naming its status).
        #[arg(long)]
        reject: bool,
        /// Do not wait for the reply.
        #[arg(long)]
        no_watch: bool,
        /// Attach a file (at most 10 MiB; repeatable): uploaded first, then
        /// sent with the message, which may then be empty.
        #[arg(long = "file", value_name = "PATH")]
        files: Vec<std::path::PathBuf>,
        /// The message; `-` or nothing reads it from standard input.
        #[arg(value_name = "TEXT")]
        text: Vec<String>,
    },
    /// List, edit or reorder a chat's queued messages.
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// Print a chat's messages and follow it live until Ctrl-C.
    ///
    /// Messages are role-prefixed on standard output (`user> `,
    /// `assistant> `, `tool> `); status changes, errors, retries and
    /// pending tool calls go to standard error. Reconnects by itself.
    Watch {
        /// The chat id.
        chat: Uuid,
        /// Only messages with a larger id.
        #[arg(long, value_name = "N")]
        after_id: Option<i64>,
        /// Stop once the chat is idle (exit code as for `new`).
        #[arg(long)]
        once: bool,
    },
    /// Interrupt a chat's running turn; prints the new status.
    Interrupt {
        /// The chat id.
        chat: Uuid,
    },
    /// Compact an idle chat's history now: the model summarises all but
    /// the most recent messages, which the model then reads instead of
    /// them (the messages themselves stay). Waits for it and prints the
    /// outcome and the context's new size. Exit 1 when the chat ends in
    /// error; 409 errors (busy, nothing to compact) are printed.
    Compact {
        /// The chat id.
        chat: Uuid,
        /// Do not wait for the compaction.
        #[arg(long)]
        no_watch: bool,
    },
    /// Clear an idle chat's context: the model sees nothing before this
    /// point (the messages stay visible). Prints the context's new size.
    ClearContext {
        /// The chat id.
        chat: Uuid,
    },
    /// Answer the pending client-side tool calls of a chat in
    /// requires_action, then stream the model's continuation.
    ///
    /// Give one --result or --error per pending call (`new`, `send` and
    /// `watch` list them, with the command to run). OUTPUT is sent as JSON
    /// when it parses as JSON (`{"temp":21}`, `42`, `"text"`), otherwise as
    /// a JSON string; an OUTPUT that starts with `{`, `[` or `"` must be
    /// valid JSON (to send such text, give it as a JSON string). `@FILE`
    /// reads OUTPUT from a file and `@-` from standard input (once), by the
    /// same rule; `@@` stands for a literal leading `@`. Exit codes as for
    /// `send`; 3 again when the model calls another client-side tool.
    #[command(group(
        ArgGroup::new("outputs").required(true).multiple(true).args(["result", "error"])
    ))]
    ToolResults {
        /// The chat id.
        chat: Uuid,
        /// A call's output: JSON or text, `@FILE`, `@-` for standard input
        /// (repeatable).
        #[arg(long, value_name = "TOOL_CALL_ID=OUTPUT", value_parser = parse_tool_output)]
        result: Vec<ToolOutput>,
        /// A failed call's output, sent with `is_error: true`; OUTPUT as for
        /// --result (repeatable).
        #[arg(long, value_name = "TOOL_CALL_ID=OUTPUT", value_parser = parse_tool_output)]
        error: Vec<ToolOutput>,
        /// Do not wait for the continuation.
        #[arg(long)]
        no_watch: bool,
    },
    /// Approve tool calls that wait for approval (API.md "Tool approval
    /// (human in the loop)"), then stream the model's continuation: the
    /// worker runs the calls and the model reads their results.
    ///
    /// Every pending call of the chat is answered in one request, so give
    /// all the pending CALL_IDs (`new`, `send` and `watch` list them; a
    /// missing one is a 400 naming it). Exit codes as for `send`.
    Approve {
        /// The chat id.
        chat: Uuid,
        /// The calls to approve.
        #[arg(required = true, value_name = "CALL_ID")]
        calls: Vec<String>,
        /// Why (stored with the approval).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Do not wait for the continuation.
        #[arg(long)]
        no_watch: bool,
    },
    /// Deny tool calls that wait for approval, then stream the model's
    /// continuation: each call is answered with the error result `{"error":
    /// "Tool call denied by user", "reason": TEXT}` and never runs.
    ///
    /// As for `approve`, give every pending CALL_ID.
    Deny {
        /// The chat id.
        chat: Uuid,
        /// The calls to deny.
        #[arg(required = true, value_name = "CALL_ID")]
        calls: Vec<String>,
        /// Why (the model reads it in the result).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Do not wait for the continuation.
        #[arg(long)]
        no_watch: bool,
    },
}

/// The subcommands of `chatd chat queue` (API.md "Busy behaviours and the
/// queue").
#[derive(Debug, Subcommand)]
enum QueueCommand {
    /// Print the queue, next first: position, id, `steer` when it steers
    /// the running turn, and the text.
    List {
        /// The chat id.
        chat: Uuid,
    },
    /// Replace a queued message's text, or mark it (not) steering; prints
    /// it as `list` does.
    Edit {
        /// The chat id.
        chat: Uuid,
        /// The queued message id (`list` shows it).
        queued: i64,
        /// Make it a steer message.
        #[arg(long, conflicts_with = "no_steer")]
        steer: bool,
        /// Make it an ordinary queued message.
        #[arg(long)]
        no_steer: bool,
        /// The new text; nothing keeps the text (`-` reads standard input).
        #[arg(value_name = "TEXT")]
        text: Vec<String>,
    },
    /// Move a queued message to POSITION (0 = next; past the end = last);
    /// prints the new queue.
    Move {
        /// The chat id.
        chat: Uuid,
        /// The queued message id (`list` shows it).
        queued: i64,
        /// The 0-based position in the queue.
        position: u32,
    },
}

/// One `--result`/`--error` of `chatd chat tool-results`.
#[derive(Debug, Clone, PartialEq)]
struct ToolOutput {
    /// The provider's id of the call it answers (non-empty, without
    /// surrounding whitespace).
    tool_call_id: String,
    /// The output: the JSON of the argument (or of the file it names), or
    /// its text as a JSON string.
    output: Value,
}

/// Runs `chatd chat ...`; errors are printed on standard error.
pub async fn run(args: ChatArgs) -> ExitCode {
    match run_command(args).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("chatd: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

async fn run_command(args: ChatArgs) -> anyhow::Result<ExitCode> {
    let token = args.token.filter(|t| !t.trim().is_empty()).context(
        "no API token: pass --token or set CHATD_TOKEN \
         (an admin can create one with `chatd token create --user NAME`)",
    )?;
    let client = Client::new(&args.url, token)?;
    let hint_url = hint_url(&args.url, std::env::var(URL_ENV).ok().as_deref());
    let hint_url = hint_url.as_deref();
    match args.command {
        ChatCommand::List {
            archived,
            json,
            limit,
        } => list(&client, archived, json, limit).await,
        ChatCommand::Children { chat, json } => children(&client, chat, json).await,
        ChatCommand::New {
            model,
            system,
            title,
            tools,
            no_watch,
            json,
            subagents,
            files,
            text,
        } => {
            let content = message_content(&client, &text, &files).await?;
            let mut body = json!({ "content": content });
            if let Some(model) = model {
                body["model_config_id"] = json!(model);
            }
            if let Some(system) = system {
                body["system_prompt"] = json!(system);
            }
            if let Some(title) = title {
                body["title"] = json!(title);
            }
            if let Some(tools) = tools {
                body["dynamic_tools"] = tools;
            }
            if subagents {
                body["subagents"] = json!(true);
            }
            let chat: Value = client.call(Method::POST, "/chats", Some(&body)).await?;
            let id = chat["id"]
                .as_str()
                .context("the created chat has no id")?
                .to_owned();
            eprintln!("chat {id}");
            if json {
                stdout(format!("{chat}\n"))?;
            }
            if no_watch {
                return Ok(ExitCode::SUCCESS);
            }
            let renderer = reply_renderer(None, &id, hint_url);
            follow(&client, &id, 0, renderer, Until::Idle).await
        }
        ChatCommand::Send {
            chat,
            interrupt,
            steer,
            reject,
            no_watch,
            files,
            text,
        } => {
            let chat = chat.to_string();
            let busy = match (interrupt, steer, reject) {
                (true, _, _) => "interrupt",
                (_, true, _) => "steer",
                (_, _, true) => "reject",
                _ => "queue",
            };
            send(&client, &chat, hint_url, busy, no_watch, &text, &files).await
        }
        ChatCommand::Queue { command } => queue(&client, command).await,
        ChatCommand::Watch {
            chat,
            after_id,
            once,
        } => {
            let chat = chat.to_string();
            // A clear 401/404 before the stream, whose upgrade errors are
            // terser.
            client.chat(&chat).await?;
            let renderer = Renderer::new(Mode::Watch, style(true), &chat, hint_url);
            let until = if once { Until::Idle } else { Until::CtrlC };
            follow(&client, &chat, after_id.unwrap_or(0), renderer, until).await
        }
        ChatCommand::Interrupt { chat } => {
            let chat: client::Chat = client
                .call(Method::POST, &format!("/chats/{chat}/interrupt"), None)
                .await?;
            stdout(format!("{}\n", chat.status))?;
            Ok(ExitCode::SUCCESS)
        }
        ChatCommand::Compact { chat, no_watch } => {
            compact(&client, &chat.to_string(), no_watch).await
        }
        ChatCommand::ClearContext { chat } => {
            let chat: client::Chat = client
                .call(Method::POST, &format!("/chats/{chat}/clear-context"), None)
                .await?;
            let size = chat.context.map(|c| c.describe()).unwrap_or_default();
            stdout(format!("context cleared; {size}\n"))?;
            Ok(ExitCode::SUCCESS)
        }
        ChatCommand::ToolResults {
            chat,
            result,
            error,
            no_watch,
        } => {
            let chat = chat.to_string();
            tool_results(&client, &chat, hint_url, &result, &error, no_watch).await
        }
        ChatCommand::Approve {
            chat,
            calls,
            reason,
            no_watch,
        } => {
            let decision = Decision {
                approved: true,
                reason,
            };
            decide(
                &client,
                &chat.to_string(),
                hint_url,
                &calls,
                &decision,
                no_watch,
            )
            .await
        }
        ChatCommand::Deny {
            chat,
            calls,
            reason,
            no_watch,
        } => {
            let decision = Decision {
                approved: false,
                reason,
            };
            decide(
                &client,
                &chat.to_string(),
                hint_url,
                &calls,
                &decision,
                no_watch,
            )
            .await
        }
    }
}

/// What `approve` or `deny` answers every call it names with.
struct Decision {
    approved: bool,
    reason: Option<String>,
}

/// `chatd chat approve|deny`: posts `decision` for each of `calls` and,
/// unless `no_watch`, streams the continuation like [`tool_results`].
async fn decide(
    client: &Client,
    chat: &str,
    hint_url: Option<&str>,
    calls: &[String],
    decision: &Decision,
    no_watch: bool,
) -> anyhow::Result<ExitCode> {
    let verb = if decision.approved {
        "approved"
    } else {
        "denied"
    };
    let sent = format!("{verb} {} tool call(s)", calls.len());
    post_tool_results(
        client,
        chat,
        hint_url,
        &decision_body(calls, decision),
        &sent,
        no_watch,
    )
    .await
}

/// The body of `POST /chats/{chat}/tool-results` answering each of `calls`
/// with `decision`: `{results: [{tool_call_id, approved, reason?}]}`.
fn decision_body(calls: &[String], decision: &Decision) -> Value {
    let results: Vec<Value> = calls
        .iter()
        .map(|id| {
            let mut result = json!({"tool_call_id": id, "approved": decision.approved});
            if let Some(reason) = &decision.reason {
                result["reason"] = json!(reason);
            }
            result
        })
        .collect();
    json!({ "results": results })
}

/// The `--url` the `tool-results` hint needs to reach the server at `url`
/// when run in the same environment (`env_url`: the value of `CHATD_URL`):
/// `None` when it would reach `url` without one, that is when `url` is
/// what `CHATD_URL` says or, with no `CHATD_URL`, the default.
fn hint_url(url: &str, env_url: Option<&str>) -> Option<String> {
    let without_flag = env_url.filter(|u| !u.is_empty()).unwrap_or(DEFAULT_URL);
    (url.trim_end_matches('/') != without_flag.trim_end_matches('/')).then(|| url.to_owned())
}

/// `chatd chat compact`: requests the compaction, then (unless `no_watch`)
/// polls the chat until the worker is done and prints the newest
/// compaction's outcome and the context's size.
async fn compact(client: &Client, chat: &str, no_watch: bool) -> anyhow::Result<ExitCode> {
    let requested: client::Chat = client
        .call(Method::POST, &format!("/chats/{chat}/compact"), None)
        .await?;
    if no_watch {
        stdout(format!("{}\n", requested.status))?;
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3600);
    let done = loop {
        let now: client::Chat = client
            .call(Method::GET, &format!("/chats/{chat}"), None)
            .await?;
        if now.status != "running" || std::time::Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    if let Some(error) = &done.last_error
        && done.status == "error"
    {
        eprintln!("chatd: the compaction failed: {}", error.describe());
        return Ok(ExitCode::from(EXIT_ERROR));
    }
    let page: Value = client
        .call(
            Method::GET,
            &format!("/chats/{chat}/messages?limit=10&before_id=9223372036854775807"),
            None,
        )
        .await?;
    let outcome = page["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|p| p["type"] == "tool-result" && p["tool_name"] == render::COMPACTION_TOOL)
        .map(|p| render::describe_compaction(&p["result"], p["is_error"] == true))
        .unwrap_or_else(|| format!("[status: {}]", done.status));
    let size = done.context.map(|c| c.describe()).unwrap_or_default();
    stdout(format!("{outcome}\n{size}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// `chatd chat list`.
async fn list(client: &Client, archived: bool, json: bool, limit: u32) -> anyhow::Result<ExitCode> {
    let mut path = format!("/chats?limit={limit}");
    if archived {
        path.push_str("&archived=true");
    }
    let chats: Value = client.call(Method::GET, &path, None).await?;
    if json {
        stdout(format!("{chats}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let chats: Vec<client::Chat> =
        serde_json::from_value(chats).context("decoding the chat list")?;
    stdout(format_chat_list(&chats))?;
    Ok(ExitCode::SUCCESS)
}

/// `chatd chat children CHAT`: the unarchived children, then the archived
/// (closed) ones marked `[archived]`.
async fn children(client: &Client, chat: Uuid, json: bool) -> anyhow::Result<ExitCode> {
    let mut all = Vec::new();
    for archived in [false, true] {
        let path = format!("/chats?parent_id={chat}&archived={archived}&limit=100");
        let page: Value = client.call(Method::GET, &path, None).await?;
        all.extend(page.as_array().cloned().unwrap_or_default());
    }
    if json {
        stdout(format!("{}\n", Value::Array(all)))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut chats: Vec<client::Chat> =
        serde_json::from_value(Value::Array(all.clone())).context("decoding the children")?;
    for (chat, raw) in chats.iter_mut().zip(&all) {
        if raw["archived"] == true {
            chat.title.push_str(" [archived]");
        }
    }
    stdout(format_chat_list(&chats))?;
    Ok(ExitCode::SUCCESS)
}

/// One line per chat: id, status (padded to the longest), `updated_at`
/// to the second, title.
fn format_chat_list(chats: &[client::Chat]) -> String {
    let width = chats.iter().map(|c| c.status.len()).max().unwrap_or(0);
    chats
        .iter()
        .map(|c| {
            // `2025-01-02T03:04:05.123456Z` → `2025-01-02T03:04:05Z`.
            let updated = match c.updated_at.split_once('.') {
                Some((seconds, _)) => format!("{seconds}Z"),
                None => c.updated_at.clone(),
            };
            format!("{}  {:<width$}  {updated}  {}\n", c.id, c.status, c.title)
        })
        .collect()
}

/// `chatd chat send`.
/// `chatd chat queue ...`.
async fn queue(client: &Client, command: QueueCommand) -> anyhow::Result<ExitCode> {
    let queued: Vec<Value> = match command {
        QueueCommand::List { chat } => {
            let page: Value = client
                .call(
                    Method::GET,
                    &format!("/chats/{chat}/messages?limit=1"),
                    None,
                )
                .await?;
            page["queued_messages"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        }
        QueueCommand::Edit {
            chat,
            queued,
            steer,
            no_steer,
            text,
        } => {
            let mut body = json!({});
            if !text.is_empty() {
                body["content"] = json!([{"type": "text", "text": message_text(&text)?}]);
            }
            if steer || no_steer {
                body["steer"] = json!(steer);
            }
            if body.as_object().is_some_and(serde_json::Map::is_empty) {
                bail!("nothing to change: give a TEXT, --steer or --no-steer");
            }
            let edited: Value = client
                .call(
                    Method::PATCH,
                    &format!("/chats/{chat}/queue/{queued}"),
                    Some(&body),
                )
                .await?;
            vec![edited]
        }
        QueueCommand::Move {
            chat,
            queued,
            position,
        } => {
            client
                .call(
                    Method::POST,
                    &format!("/chats/{chat}/queue/{queued}/move"),
                    Some(&json!({"position": position})),
                )
                .await?
        }
    };
    stdout(format_queue(&queued))?;
    Ok(ExitCode::SUCCESS)
}

/// One line per queued message: `position  id  [steer]  text`.
fn format_queue(queued: &[Value]) -> String {
    let mut out = String::new();
    for q in queued {
        let text: Vec<&str> = q["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["text"].as_str())
            .collect();
        let steer = if q["steer"].as_bool() == Some(true) {
            "steer "
        } else {
            ""
        };
        out.push_str(&format!(
            "{}\t{}\t{steer}{}\n",
            q["position"],
            q["id"],
            text.join(" ").replace('\n', " ")
        ));
    }
    out
}

async fn send(
    client: &Client,
    chat: &str,
    hint_url: Option<&str>,
    busy_behavior: &str,
    no_watch: bool,
    text: &[String],
    files: &[std::path::PathBuf],
) -> anyhow::Result<ExitCode> {
    let content = message_content(client, text, files).await?;
    // A queued message's reply comes after the current turn's messages:
    // follow from here, and print only what follows its promotion.
    let before = if no_watch {
        0
    } else {
        client.newest_message_id(chat).await?
    };
    let body = json!({
        "content": content,
        "busy_behavior": busy_behavior,
    });
    let sent: SendResponse = client
        .call(
            Method::POST,
            &format!("/chats/{chat}/messages"),
            Some(&body),
        )
        .await?;
    let (awaiting_queued, after_id, own) = match (sent.queued, sent.queued_message, sent.message) {
        (true, Some(queued), _) => {
            if busy_behavior == "interrupt" {
                eprintln!(
                    "queued (message {}); interrupting the running turn",
                    queued.id
                );
            } else if busy_behavior == "steer" {
                eprintln!(
                    "queued (message {}); the running turn reads it at its next step",
                    queued.id
                );
            } else {
                eprintln!("queued (message {}) behind the running turn", queued.id);
            }
            (Some(queued.id), before, None)
        }
        (_, _, Some(message)) => {
            eprintln!("sent (message {})", message.id);
            (None, message.id, Some(message.id))
        }
        _ => bail!("the server's answer has neither a message nor a queued message"),
    };
    if no_watch {
        return Ok(ExitCode::SUCCESS);
    }
    let mut renderer = reply_renderer(awaiting_queued, chat, hint_url);
    if let Some(id) = own {
        renderer = renderer.with_own_message(id);
    }
    follow(client, chat, after_id, renderer, Until::Idle).await
}

/// `chatd chat tool-results`: posts `results` then `errors` (order does
/// not matter: the server stores them in the order of the calls) and,
/// unless `no_watch`, streams the continuation like [`send`].
async fn tool_results(
    client: &Client,
    chat: &str,
    hint_url: Option<&str>,
    results: &[ToolOutput],
    errors: &[ToolOutput],
    no_watch: bool,
) -> anyhow::Result<ExitCode> {
    let sent = format!("sent {} tool result(s)", results.len() + errors.len());
    post_tool_results(
        client,
        chat,
        hint_url,
        &tool_results_body(results, errors),
        &sent,
        no_watch,
    )
    .await
}

/// Posts `body` to `POST /chats/{chat}/tool-results`, prints `sent` to
/// stderr and, unless `no_watch`, streams the continuation until the chat
/// is idle (`tool-results`, `approve` and `deny`).
async fn post_tool_results(
    client: &Client,
    chat: &str,
    hint_url: Option<&str>,
    body: &Value,
    sent: &str,
    no_watch: bool,
) -> anyhow::Result<ExitCode> {
    // The continuation (the committed results, then the model's reply) is
    // what follows the newest message now: earlier messages, the tool call
    // included, are not printed again.
    let before = if no_watch {
        0
    } else {
        client.newest_message_id(chat).await?
    };
    let _: client::Chat = client
        .call(
            Method::POST,
            &format!("/chats/{chat}/tool-results"),
            Some(body),
        )
        .await?;
    eprintln!("{sent}");
    if no_watch {
        return Ok(ExitCode::SUCCESS);
    }
    // No user message belongs to the continuation: a later one (a queued
    // message promoted after it) starts the next turn and ends the reply.
    let renderer = reply_renderer(None, chat, hint_url).with_own_message(before);
    follow(client, chat, before, renderer, Until::Idle).await
}

/// The body of `POST /chats/{chat}/tool-results`: `{results: [{tool_call_id,
/// output, is_error}]}`, `results` with `is_error: false`, then `errors`
/// with `is_error: true`.
fn tool_results_body(results: &[ToolOutput], errors: &[ToolOutput]) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|r| (r, false))
        .chain(errors.iter().map(|r| (r, true)))
        .map(|(r, is_error)| {
            json!({"tool_call_id": r.tool_call_id, "output": r.output, "is_error": is_error})
        })
        .collect();
    json!({ "results": results })
}

/// Parses `TOOL_CALL_ID=OUTPUT` (split at the first `=`); see
/// [`tool_output`] for OUTPUT. `@-` reads standard input, at most once per
/// command.
///
/// # Errors
/// As [`parse_tool_output_with`]; clap reports it as a usage error (exit 2)
/// naming the option.
fn parse_tool_output(arg: &str) -> Result<ToolOutput, String> {
    static STDIN_READ: AtomicBool = AtomicBool::new(false);
    parse_tool_output_with(arg, || {
        read_stdin_once(&STDIN_READ, || {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        })
    })
}

/// [`parse_tool_output`] with `stdin` giving the text of `@-`.
///
/// # Errors
/// No `=`; an empty id, or one with leading or trailing whitespace; an
/// OUTPUT (or file) that starts like JSON but is not JSON; a file that
/// cannot be read; `stdin` failing.
fn parse_tool_output_with(
    arg: &str,
    stdin: impl FnOnce() -> Result<String, String>,
) -> Result<ToolOutput, String> {
    let Some((id, output)) = arg.split_once('=') else {
        return Err("expected TOOL_CALL_ID=OUTPUT (there is no `=`)".to_owned());
    };
    if id.trim().is_empty() {
        return Err(
            "expected TOOL_CALL_ID=OUTPUT (the tool call id before `=` is empty)".to_owned(),
        );
    }
    if id.trim() != id {
        // The server matches ids byte for byte: a padded id would be
        // refused as answering no pending call.
        return Err(format!(
            "the tool call id {id:?} has leading or trailing whitespace; \
             ids are matched exactly, so it would answer no pending call"
        ));
    }
    let output = match output.strip_prefix('@') {
        Some(literal) if literal.starts_with('@') => Value::String(literal.to_owned()),
        Some("-") => tool_output(&stdin()?, "standard input")?,
        Some("") => {
            return Err(
                "`@` must be followed by a file name, or `-` for standard input \
                 (write `@@` for a literal leading `@`)"
                    .to_owned(),
            );
        }
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|err| format!("cannot read {path}: {err}"))?;
            tool_output(&text, path)?
        }
        None => tool_output(output, "OUTPUT")?,
    };
    Ok(ToolOutput {
        tool_call_id: id.to_owned(),
        output,
    })
}

/// A tool output's value: `text` as JSON when it parses, otherwise as a
/// JSON string (`""` when empty). Text that starts like JSON (`{`, `[` or
/// `"`, after leading whitespace) must parse: it is a mistyped object,
/// array or string far more often than text meant verbatim.
///
/// # Errors
/// `text` starts like JSON but is not JSON; the message names `source`
/// (`OUTPUT`, the file, `standard input`) and the JSON error.
fn tool_output(text: &str, source: &str) -> Result<Value, String> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(err) => match text.trim_start().chars().next() {
            Some(first @ ('{' | '[' | '"')) => Err(format!(
                "{source} starts with `{first}` but is not valid JSON ({err}); \
                 to send it as text, give it as a JSON string"
            )),
            _ => Ok(Value::String(text.to_owned())),
        },
    }
}

/// Reads standard input with `read` the first time `taken` is unset;
/// afterwards an error, since standard input is consumed by the first read.
///
/// # Errors
/// `@-` a second time, or `read` fails.
fn read_stdin_once(
    taken: &AtomicBool,
    read: impl FnOnce() -> std::io::Result<String>,
) -> Result<String, String> {
    if taken.swap(true, Ordering::SeqCst) {
        return Err("`@-` reads standard input, which can be read only once".to_owned());
    }
    read().map_err(|err| format!("cannot read standard input: {err}"))
}

/// Parses `--tools`: a JSON array given inline, or read from the file
/// after `@`. Each tool's fields are checked by the server (`400` naming
/// `dynamic_tools[i]...`).
///
/// # Errors
/// The file cannot be read, the text is not JSON, or not an array; clap
/// reports it as a usage error (exit 2) naming `--tools`.
fn parse_tools(arg: &str) -> Result<Value, String> {
    let (text, from) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|err| format!("cannot read {path}: {err}"))?,
            format!(" in {path}"),
        ),
        None => (arg.to_owned(), String::new()),
    };
    let tools: Value =
        serde_json::from_str(&text).map_err(|err| format!("invalid JSON{from}: {err}"))?;
    if !tools.is_array() {
        return Err(format!(
            "expected a JSON array{from}, like [{{\"name\":\"get_weather\",\
             \"description\":\"...\",\"input_schema\":{{\"type\":\"object\"}}}}]"
        ));
    }
    Ok(tools)
}

/// Writes `text` to standard output; a closed pipe (`| head`) is an error
/// (reported once by `main`), never a panic as with `println!`.
fn stdout(text: String) -> anyhow::Result<()> {
    follow::write(vec![render::Output::Stdout(text)])
}

/// The message text: `args` joined by spaces, or standard input when
/// `args` is `-` or empty (and standard input is not a terminal).
/// The `content` of a message: its text (as [`message_text`]; optional
/// when files are attached and no text is given), then a file part for
/// each of `files`, uploaded first in order (their ids on standard error).
async fn message_content(
    client: &Client,
    text: &[String],
    files: &[std::path::PathBuf],
) -> anyhow::Result<Vec<Value>> {
    let mut content = Vec::new();
    if files.is_empty() || !text.is_empty() {
        content.push(json!({"type": "text", "text": message_text(text)?}));
    }
    for path in files {
        let id = client.upload(path).await?;
        eprintln!("uploaded {} (file {id})", path.display());
        content.push(json!({"type": "file", "file_id": id}));
    }
    Ok(content)
}

fn message_text(args: &[String]) -> anyhow::Result<String> {
    let from_stdin = args.is_empty() || args == ["-"];
    let text = if from_stdin {
        if args.is_empty() && std::io::stdin().is_terminal() {
            bail!("no message: give TEXT, or `-` to read it from standard input");
        }
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the message from standard input")?;
        text.trim_end_matches(['\n', '\r']).to_owned()
    } else {
        args.join(" ")
    };
    if text.trim().is_empty() {
        bail!("the message is empty");
    }
    Ok(text)
}

/// The renderer's style for this terminal: reasoning dimmed when standard
/// error is a terminal (and `NO_COLOR` is unset); lines tidied across the
/// two streams in watch mode or when standard output is a terminal.
fn style(watch: bool) -> Style {
    Style {
        color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        tidy_lines: watch || std::io::stdout().is_terminal(),
    }
}

/// The renderer of `new`, `send` and `tool-results`: the reply (to queued
/// message `awaiting_queued`, when it was queued) on standard output.
fn reply_renderer(awaiting_queued: Option<i64>, chat: &str, hint_url: Option<&str>) -> Renderer {
    Renderer::new(
        Mode::Reply { awaiting_queued },
        style(false),
        chat,
        hint_url,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chat_list_aligns_status_and_trims_fractional_seconds() {
        let chats: Vec<client::Chat> = serde_json::from_value(json!([
            {"id": "a", "title": "First", "status": "requires_action",
             "updated_at": "2025-01-02T03:04:05.123456Z"},
            {"id": "b", "title": "Second", "status": "waiting",
             "updated_at": "2025-01-02T03:04:06Z"},
        ]))
        .unwrap();
        assert_eq!(
            format_chat_list(&chats),
            "a  requires_action  2025-01-02T03:04:05Z  First\n\
             b  waiting          2025-01-02T03:04:06Z  Second\n"
        );
    }

    #[test]
    fn a_tool_output_is_json_when_it_parses_and_a_string_otherwise() {
        let parsed = |arg: &str| parse_tool_output(arg).unwrap();
        assert_eq!(
            parsed(r#"call_1={"temp":21}"#),
            ToolOutput {
                tool_call_id: "call_1".into(),
                output: json!({"temp": 21}),
            }
        );
        assert_eq!(parsed("c=42").output, json!(42));
        assert_eq!(parsed(r#"c="quoted""#).output, json!("quoted"));
        assert_eq!(
            parsed("c=sunny, 21 degrees").output,
            json!("sunny, 21 degrees")
        );
        assert_eq!(parsed("c=").output, json!(""));
        // Split at the first `=`: the output may contain more.
        assert_eq!(
            parsed("c=a=b"),
            ToolOutput {
                tool_call_id: "c".into(),
                output: json!("a=b"),
            }
        );
    }

    #[test]
    fn a_tool_output_without_an_equals_sign_or_an_id_is_rejected() {
        let err = parse_tool_output("call_1").unwrap_err();
        assert!(err.contains("TOOL_CALL_ID=OUTPUT"), "{err}");
        assert!(err.contains("there is no `=`"), "{err}");
        let err = parse_tool_output("={}").unwrap_err();
        assert!(
            err.contains("the tool call id before `=` is empty"),
            "{err}"
        );
        assert!(parse_tool_output("  =x").is_err());
    }

    #[test]
    fn a_tool_call_id_with_surrounding_whitespace_is_rejected() {
        for arg in [" call_1=x", "call_1 =x", "\tcall_1=x"] {
            let err = parse_tool_output(arg).unwrap_err();
            assert!(
                err.contains("has leading or trailing whitespace"),
                "{arg}: {err}"
            );
            assert!(err.contains("would answer no pending call"), "{err}");
        }
        // Inside the id it is the server's business.
        assert_eq!(parse_tool_output("a b=1").unwrap().tool_call_id, "a b");
    }

    #[test]
    fn an_output_that_starts_like_json_must_be_json() {
        for (arg, first) in [
            (r#"c={"temp":21"#, '{'),
            ("c=[1,", '['),
            (r#"c="unterminated"#, '"'),
            ("c= {oops}", '{'),
        ] {
            let err = parse_tool_output(arg).unwrap_err();
            assert!(
                err.starts_with(&format!(
                    "OUTPUT starts with `{first}` but is not valid JSON ("
                )),
                "{arg}: {err}"
            );
            // serde_json's message, with its position.
            assert!(err.contains(" at line 1 column "), "{arg}: {err}");
            assert!(err.ends_with("give it as a JSON string"), "{err}");
        }
        // As a JSON string, the same text is fine.
        assert_eq!(
            parse_tool_output(r#"c="{oops}""#).unwrap().output,
            json!("{oops}")
        );
        // Anything else that is not JSON is text.
        assert_eq!(
            parse_tool_output("c=21 degrees").unwrap().output,
            json!("21 degrees")
        );
        assert_eq!(
            parse_tool_output("c=trueish").unwrap().output,
            json!("trueish")
        );
    }

    #[test]
    fn an_output_at_file_is_read_from_the_file_by_the_same_rules() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let json_file = file("out.json", "{\"temp\": 21}\n");
        assert_eq!(
            parse_tool_output(&format!("c=@{json_file}")).unwrap(),
            ToolOutput {
                tool_call_id: "c".into(),
                output: json!({"temp": 21}),
            }
        );
        // Text is sent unchanged, its final newline included.
        let text_file = file("out.txt", "line 1\nline 2\n");
        assert_eq!(
            parse_tool_output(&format!("c=@{text_file}"))
                .unwrap()
                .output,
            json!("line 1\nline 2\n")
        );
        let bad_file = file("bad.json", "[1, 2");
        let err = parse_tool_output(&format!("c=@{bad_file}")).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "{bad_file} starts with `[` but is not valid JSON ("
            )),
            "{err}"
        );
        let missing = dir.path().join("missing.json").display().to_string();
        let err = parse_tool_output(&format!("c=@{missing}")).unwrap_err();
        assert!(
            err.starts_with(&format!("cannot read {missing}: ")),
            "{err}"
        );
        let err = parse_tool_output("c=@").unwrap_err();
        assert!(err.contains("followed by a file name"), "{err}");
    }

    #[test]
    fn a_double_at_sign_is_a_literal_at_sign() {
        assert_eq!(
            parse_tool_output("c=@@handle").unwrap().output,
            json!("@handle")
        );
        assert_eq!(parse_tool_output("c=@@").unwrap().output, json!("@"));
        assert_eq!(parse_tool_output("c=@@{").unwrap().output, json!("@{"));
        // Only at the start: elsewhere `@` is plain text.
        assert_eq!(parse_tool_output("c=a@b").unwrap().output, json!("a@b"));
    }

    #[test]
    fn an_output_at_dash_is_read_from_standard_input_once() {
        let stdin = |text: &'static str| move || Ok(text.to_owned());
        assert_eq!(
            parse_tool_output_with("c=@-", stdin("[1, 2]"))
                .unwrap()
                .output,
            json!([1, 2])
        );
        assert_eq!(
            parse_tool_output_with("c=@-", stdin("plain text\n"))
                .unwrap()
                .output,
            json!("plain text\n")
        );
        let err = parse_tool_output_with("c=@-", stdin("{nope")).unwrap_err();
        assert!(
            err.starts_with("standard input starts with `{` but is not valid JSON ("),
            "{err}"
        );
        // Only `@-` reads it.
        let unused = || -> Result<String, String> { panic!("standard input was read") };
        assert_eq!(
            parse_tool_output_with("c=-", unused).unwrap().output,
            json!("-")
        );

        let taken = AtomicBool::new(false);
        assert_eq!(
            read_stdin_once(&taken, || Ok("first".to_owned())).unwrap(),
            "first"
        );
        let err = read_stdin_once(&taken, || Ok("second".to_owned())).unwrap_err();
        assert!(err.contains("can be read only once"), "{err}");
        let fresh = AtomicBool::new(false);
        let err =
            read_stdin_once(&fresh, || Err(std::io::ErrorKind::InvalidData.into())).unwrap_err();
        assert!(err.starts_with("cannot read standard input: "), "{err}");
    }

    #[test]
    fn the_hint_names_the_url_only_when_the_environment_would_not_reach_it() {
        // The default, with no CHATD_URL: the hint reaches it as is.
        assert_eq!(hint_url(DEFAULT_URL, None), None);
        assert_eq!(hint_url("http://127.0.0.1:3000/", Some("")), None);
        // CHATD_URL's server (given by the variable or also by --url).
        assert_eq!(hint_url("https://h:8443", Some("https://h:8443/")), None);
        // --url elsewhere than CHATD_URL or the default.
        assert_eq!(
            hint_url("https://h:8443", None).as_deref(),
            Some("https://h:8443")
        );
        assert_eq!(
            hint_url("https://h:8443", Some("http://other:1")).as_deref(),
            Some("https://h:8443")
        );
        // --url naming the default while CHATD_URL names another server.
        assert_eq!(
            hint_url(DEFAULT_URL, Some("http://other:1")).as_deref(),
            Some(DEFAULT_URL)
        );
    }

    #[test]
    fn the_decision_body_answers_every_call_with_the_decision_and_the_reason() {
        let calls = vec!["c1".to_owned(), "c2".to_owned()];
        let deny = Decision {
            approved: false,
            reason: Some("too risky".into()),
        };
        assert_eq!(
            decision_body(&calls, &deny),
            json!({"results": [
                {"tool_call_id": "c1", "approved": false, "reason": "too risky"},
                {"tool_call_id": "c2", "approved": false, "reason": "too risky"},
            ]})
        );
        let approve = Decision {
            approved: true,
            reason: None,
        };
        assert_eq!(
            decision_body(&calls[..1], &approve),
            json!({"results": [{"tool_call_id": "c1", "approved": true}]})
        );
    }

    #[test]
    fn the_tool_results_body_marks_errors() {
        let ok = parse_tool_output("a=1").unwrap();
        let failed = parse_tool_output("b=no network").unwrap();
        assert_eq!(
            tool_results_body(&[ok], &[failed]),
            json!({"results": [
                {"tool_call_id": "a", "output": 1, "is_error": false},
                {"tool_call_id": "b", "output": "no network", "is_error": true},
            ]})
        );
    }

    #[test]
    fn tools_are_a_json_array_inline_or_from_a_file() {
        let tools = r#"[{"name":"t","description":"d","input_schema":{"type":"object"}}]"#;
        assert_eq!(
            parse_tools(tools).unwrap(),
            serde_json::from_str::<Value>(tools).unwrap()
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tools.json");
        std::fs::write(&path, tools).unwrap();
        assert_eq!(
            parse_tools(&format!("@{}", path.display())).unwrap(),
            parse_tools(tools).unwrap()
        );

        let err = parse_tools("[{").unwrap_err();
        assert!(err.starts_with("invalid JSON: "), "{err}");
        let err = parse_tools(r#"{"name":"t"}"#).unwrap_err();
        assert!(err.starts_with("expected a JSON array, like ["), "{err}");
        std::fs::write(&path, "{}").unwrap();
        let err = parse_tools(&format!("@{}", path.display())).unwrap_err();
        assert!(
            err.starts_with(&format!("expected a JSON array in {}", path.display())),
            "{err}"
        );
        let missing = dir.path().join("missing.json");
        let err = parse_tools(&format!("@{}", missing.display())).unwrap_err();
        assert!(
            err.starts_with(&format!("cannot read {}", missing.display())),
            "{err}"
        );
    }

    #[test]
    fn the_queue_prints_position_id_steer_and_one_line_of_text() {
        let queued = vec![
            json!({"id": 7, "position": 0, "steer": true, "content": [{"type": "text", "text": "use\ntabs"}]}),
            json!({"id": 5, "position": 1, "steer": false, "content": [{"type": "text", "text": "later"}]}),
        ];
        assert_eq!(format_queue(&queued), "0\t7\tsteer use tabs\n1\t5\tlater\n");
    }

    #[test]
    fn message_text_joins_arguments_with_spaces() {
        let args = ["hello".to_owned(), "there".to_owned()];
        assert_eq!(message_text(&args).unwrap(), "hello there");
        assert!(message_text(&["  ".to_owned()]).is_err());
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Command {
        Chat(ChatArgs),
        Usage(UsageArgs),
    }

    #[test]
    fn client_flags_and_the_client_print_no_token() {
        use clap::Parser as _;
        let chat =
            Cli::try_parse_from(["chatd", "chat", "--token", "chatd_tok_debug1", "list"]).unwrap();
        let usage = Cli::try_parse_from(["chatd", "usage", "--token", "chatd_tok_debug2"]).unwrap();
        let client = client::Client::new("http://127.0.0.1:1", "chatd_tok_debug3".into()).unwrap();
        let text = format!("{chat:?} {usage:#?} {client:?}");
        for token in ["chatd_tok_debug1", "chatd_tok_debug2", "chatd_tok_debug3"] {
            assert!(!text.contains(token), "{token} in {text}");
        }
        assert!(
            text.contains("<redacted>") && text.contains("127.0.0.1:1"),
            "{text}"
        );
    }
}
