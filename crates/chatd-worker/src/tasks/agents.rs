//! The built-in agent tools of a chat created with `subagents: true` (API.md
//! "Sub-agents and plan mode"): `spawn_agent`, `wait_agent`,
//! `message_agent` and `close_agent`, run by the worker through the one
//! tool router ([`super::tools::ToolRouter`]).
//!
//! Each is durable:
//!
//! - `spawn_agent {prompt, title?}` → `{chat_id}`: the child is created by
//!   `Create` in the same transaction as the `CommitStep` that stores the
//!   result ([`Spawn`], [`chatd_store::ChatTx::create_child`]), keyed by the
//!   call's idempotency key (unique per parent), so a retried commit finds
//!   the child instead of creating a second one. The child has the parent's
//!   owner, model config, reasoning effort and MCP servers, `prompt` verbatim
//!   as its first user message (so it starts running), and `subagents` too
//!   (children may spawn their own, down to [`chatd_store::MAX_CHAT_DEPTH`]);
//!   a parent with a workspace gives the child one, starting as a copy of
//!   the parent's as the spawning step commits it (its own from then on;
//!   counted in the owner's storage quota, and left empty, the result
//!   saying so, when the copy does not fit);
//!   no dynamic tools (no client answers a child's). A call at the deepest
//!   level is answered with an error result, and so is a call past the
//!   fan-out cap: a chat has at most `limits.max_subagents_per_chat`
//!   children (`--max-subagents-per-chat`, API.md "Limits, budgets and the
//!   token lifecycle"), counted in the database inside the commit that
//!   would create the child, under the parent's row lock ([`create_spawned`]).
//! - `wait_agent {chat_id, timeout_s?}` → `{status, last_message,
//!   timed_out}`: never run in the step whose response made it. That step
//!   commits the call without a result, and the next generation answers it
//!   as an outstanding call ([`wait`]); so a takeover re-runs the wait, and
//!   the timeout counts from the commit of the call (database time), not
//!   from each (re)start. The wait subscribes to `chat:update:{child}` before
//!   every read and holds no lock while it waits; the task's cancellation
//!   (an interrupt of the parent) ends it, and `FinishInterruption` answers
//!   the call as interrupted. Children are never interrupted by it.
//! - `message_agent {chat_id, text}` → `{queued}`: an ordinary `SendMessage`
//!   to the child with the `queue` behaviour, remembered under the call's
//!   idempotency key (a send receipt), so running it again sends nothing new.
//! - `close_agent {chat_id}` → `{archived}`: interrupts the busy members of
//!   the child's family, waits for them to settle, and archives the child
//!   and its descendants ([`chatd_store::Store::set_subtree_archived`]).
//!
//! Only the parent addresses its children: another `chat_id` is answered
//! with an error result. In plan mode the agent tools are not offered (none
//! is read-only).

use std::time::Duration;

use chatd_core::{BusyBehavior, ChatStatus, MessagePart};
use chatd_llm::ToolSpec;
use chatd_pubsub::chat_update_channel;
use chatd_store::{Chat, CreateChatInput, NewMessage, SendMessageInput, StoreError, UserSendStart};
use chatd_tools::{IdempotencyKey, ToolOutcome};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::TaskContext;

/// `spawn_agent`.
pub const SPAWN_AGENT: &str = "spawn_agent";
/// `wait_agent`.
pub const WAIT_AGENT: &str = "wait_agent";
/// `message_agent`.
pub const MESSAGE_AGENT: &str = "message_agent";
/// `close_agent`.
pub const CLOSE_AGENT: &str = "close_agent";

/// The longest `wait_agent` may wait, in seconds (and its default).
pub const MAX_WAIT_SECS: u64 = 600;

/// How long `close_agent` waits for interrupted members to settle.
const CLOSE_SETTLE: Duration = Duration::from_secs(30);

/// How often a wait reads the child again even without a notification
/// (notifications are hints; a lost one must not stall the wait).
const WAIT_POLL: Duration = Duration::from_secs(5);

/// Whether `name` is one of the agent tools.
pub(super) fn is_agent_tool(name: &str) -> bool {
    matches!(name, SPAWN_AGENT | WAIT_AGENT | MESSAGE_AGENT | CLOSE_AGENT)
}

/// The agent tools as offered to the model, in a fixed order.
pub(super) fn specs() -> Vec<ToolSpec> {
    let spec = |name: &str, description: &str, input_schema: Value| ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
    };
    vec![
        spec(
            SPAWN_AGENT,
            "Start a sub-agent: a new chat with the same model that works on `prompt` (its \
             first user message) on its own. Returns {chat_id}. Use wait_agent to get its answer.",
            json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "The task, verbatim."},
                    "title": {"type": "string", "description": "A short title."}
                },
                "required": ["prompt"]
            }),
        ),
        spec(
            WAIT_AGENT,
            "Wait until a sub-agent is idle (or `timeout_s` seconds pass, at most 600). Returns \
             {status, last_message, timed_out}.",
            json!({
                "type": "object",
                "properties": {
                    "chat_id": {"type": "string"},
                    "timeout_s": {"type": "integer", "minimum": 1, "maximum": MAX_WAIT_SECS}
                },
                "required": ["chat_id"]
            }),
        ),
        spec(
            MESSAGE_AGENT,
            "Send a sub-agent a message: queued if it is busy, else it starts a new turn. \
             Returns {queued}.",
            json!({
                "type": "object",
                "properties": {
                    "chat_id": {"type": "string"},
                    "text": {"type": "string"}
                },
                "required": ["chat_id", "text"]
            }),
        ),
        spec(
            CLOSE_AGENT,
            "Stop and archive a sub-agent and its own sub-agents. Returns {archived}.",
            json!({
                "type": "object",
                "properties": {"chat_id": {"type": "string"}},
                "required": ["chat_id"]
            }),
        ),
    ]
}

/// A parsed agent tool call.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum AgentCall {
    Spawn {
        prompt: String,
        title: Option<String>,
    },
    Wait {
        chat_id: Uuid,
        timeout: Duration,
    },
    Message {
        chat_id: Uuid,
        text: String,
    },
    Close {
        chat_id: Uuid,
    },
}

#[derive(Deserialize)]
struct SpawnArgs {
    prompt: String,
    #[serde(default)]
    title: Option<String>,
}

#[derive(Deserialize)]
struct WaitArgs {
    chat_id: Uuid,
    #[serde(default)]
    timeout_s: Option<u64>,
}

#[derive(Deserialize)]
struct MessageArgs {
    chat_id: Uuid,
    text: String,
}

#[derive(Deserialize)]
struct CloseArgs {
    chat_id: Uuid,
}

/// Parses call `name(args)`; the error is the message of the error result.
pub(super) fn parse(name: &str, args: &str) -> Result<AgentCall, String> {
    let args = if args.trim().is_empty() { "{}" } else { args };
    let bad = |e: serde_json::Error| format!("Invalid arguments for {name}: {e}");
    match name {
        SPAWN_AGENT => {
            let a: SpawnArgs = serde_json::from_str(args).map_err(bad)?;
            if a.prompt.trim().is_empty() {
                return Err("Invalid arguments for spawn_agent: prompt must not be empty".into());
            }
            let title = a
                .title
                .map(|t| t.trim().chars().take(200).collect::<String>())
                .filter(|t| !t.is_empty());
            Ok(AgentCall::Spawn {
                prompt: a.prompt,
                title,
            })
        }
        WAIT_AGENT => {
            let a: WaitArgs = serde_json::from_str(args).map_err(bad)?;
            let secs = a.timeout_s.unwrap_or(MAX_WAIT_SECS);
            if !(1..=MAX_WAIT_SECS).contains(&secs) {
                return Err(format!(
                    "Invalid arguments for wait_agent: timeout_s must be 1 to {MAX_WAIT_SECS}"
                ));
            }
            Ok(AgentCall::Wait {
                chat_id: a.chat_id,
                timeout: Duration::from_secs(secs),
            })
        }
        MESSAGE_AGENT => {
            let a: MessageArgs = serde_json::from_str(args).map_err(bad)?;
            if a.text.trim().is_empty() {
                return Err("Invalid arguments for message_agent: text must not be empty".into());
            }
            Ok(AgentCall::Message {
                chat_id: a.chat_id,
                text: a.text,
            })
        }
        CLOSE_AGENT => {
            let a: CloseArgs = serde_json::from_str(args).map_err(bad)?;
            Ok(AgentCall::Close { chat_id: a.chat_id })
        }
        other => Err(format!("Unknown tool: {other}")),
    }
}

/// A child to create in the step's `CommitStep` (`spawn_agent`).
#[derive(Debug, Clone)]
pub(super) struct Spawn {
    /// The call whose result names the child.
    pub(super) tool_call_id: String,
    /// The child as it is created (`spawn_key` set, `parent_chat_id` set by
    /// [`chatd_store::ChatTx::create_child`]).
    pub(super) input: CreateChatInput,
}

impl Spawn {
    /// The spawn of call `key` of `parent`, or the error result of a call
    /// at the deepest level.
    pub(super) fn new(
        parent: &Chat,
        key: &IdempotencyKey,
        prompt: String,
        title: Option<String>,
    ) -> Result<Self, ToolOutcome> {
        if parent.depth >= chatd_store::MAX_CHAT_DEPTH {
            return Err(ToolOutcome::error(format!(
                "spawn_agent is not available here: this chat is at depth {} and no chat may be \
                 deeper than {}. Do the task yourself.",
                parent.depth,
                chatd_store::MAX_CHAT_DEPTH
            )));
        }
        let mut first = NewMessage::user(vec![MessagePart::text(prompt)]);
        first.model_config_id = parent.last_model_config_id;
        first.reasoning_effort = parent.last_reasoning_effort.clone();
        Ok(Self {
            tool_call_id: key.tool_call_id.clone(),
            input: CreateChatInput {
                owner_id: parent.owner_id,
                title,
                last_model_config_id: parent.last_model_config_id,
                last_reasoning_effort: parent.last_reasoning_effort.clone(),
                mcp_server_ids: parent.mcp_server_ids.clone(),
                initial_messages: vec![first],
                subagents: true,
                workspace: parent.workspace,
                spawn_key: Some(key.to_string()),
                ..CreateChatInput::default()
            },
        })
    }

    /// The result the call answers with once the child is `chat_id`.
    pub(super) fn result(chat_id: Uuid) -> Value {
        json!({ "chat_id": chat_id })
    }
}

/// Creates the child of `spawn` in the parent's `CommitStep` bundle `tx`
/// and points the call's result in `messages` at it (the child an earlier
/// commit of the same key created, if any) — unless that would pass the
/// fan-out cap: when the parent already has `max_children` children and
/// none of them is this call's, nothing is created and the result becomes
/// an error naming the cap (API.md: "more is an error result to the
/// model"). The bundle holds the parent's row lock, under which alone
/// children are created, so concurrent spawns cannot pass the cap. A new
/// child of a chat with a workspace gets a copy of it
/// ([`chatd_store::ChatTx::copy_workspace_to_child`], under the owner's
/// `default_quota` unless they have their own).
///
/// # Errors
/// As [`chatd_store::ChatTx::create_child`].
pub(super) async fn create_spawned(
    tx: &mut chatd_store::ChatTx,
    spawn: Spawn,
    max_children: u32,
    default_quota: i64,
    messages: &mut [NewMessage],
) -> chatd_store::StoreResult<()> {
    let parent = tx.chat().await?.id;
    let conn = tx.reader().await?;
    let earlier = match &spawn.input.spawn_key {
        Some(key) => chatd_store::chats::child_by_spawn_key(&mut *conn, parent, key).await?,
        None => None,
    };
    if earlier.is_none() {
        let children = chatd_store::chats::child_count(&mut *conn, parent).await?;
        if children >= i64::from(max_children) {
            patch_result(messages, &spawn.tool_call_id, fan_out_error(max_children));
            return Ok(());
        }
    }
    let workspace = spawn.input.workspace;
    let (child, created) = tx.create_child(spawn.input).await?;
    patch_spawn_result(messages, &spawn.tool_call_id, child);
    // A sub-agent of a chat with a workspace starts from a copy of it (its
    // own from then on), like a fork.
    if workspace
        && created
        && let chatd_store::WorkspaceCopy::OverQuota { bytes, storage } =
            tx.copy_workspace_to_child(child, default_quota).await?
    {
        let mut result = Spawn::result(child);
        result["message"] = json!(format!(
            "The sub-agent starts with an empty workspace: a copy of this one ({bytes} bytes) \
                 does not fit in the owner's storage quota ({} of {} bytes used).",
            storage.used, storage.quota
        ));
        patch_result(
            messages,
            &spawn.tool_call_id,
            ToolOutcome {
                result,
                is_error: false,
            },
        );
    }
    Ok(())
}

/// The error result of a `spawn_agent` call past the fan-out cap of
/// `max_children` children per chat.
pub(super) fn fan_out_error(max_children: u32) -> ToolOutcome {
    ToolOutcome::error(format!(
        "spawn_agent failed: this chat already has {max_children} sub-agents, the most one chat \
         may spawn (--max-subagents-per-chat). Reuse one with message_agent, or do the task \
         yourself."
    ))
}

/// Replaces the result of `tool_call_id` in `messages` by `outcome`.
fn patch_result(messages: &mut [NewMessage], tool_call_id: &str, outcome: ToolOutcome) {
    for message in messages {
        for part in &mut message.content {
            if let MessagePart::ToolResult {
                tool_call_id: id,
                result,
                is_error,
                ..
            } = part
                && id == tool_call_id
            {
                *result = outcome.result.clone();
                *is_error = outcome.is_error;
            }
        }
    }
}

/// Points the result of `tool_call_id` in `messages` at `chat_id` (the
/// child an earlier commit of the same key created).
pub(super) fn patch_spawn_result(messages: &mut [NewMessage], tool_call_id: &str, chat_id: Uuid) {
    for message in messages {
        for part in &mut message.content {
            if let MessagePart::ToolResult {
                tool_call_id: id,
                result,
                ..
            } = part
                && id == tool_call_id
            {
                *result = Spawn::result(chat_id);
            }
        }
    }
}

/// Reads `child` as `parent` may see it: `Err` with the error result when
/// it is not one of `parent`'s children.
async fn own_child(
    task: &TaskContext,
    parent: Uuid,
    child: Uuid,
    since: DateTime<Utc>,
) -> Result<chatd_store::chats::ChildProgress, ToolOutcome> {
    let progress = read(task, child, since).await?;
    match progress {
        Some(p) if p.parent_chat_id == Some(parent) => Ok(p),
        _ => Err(ToolOutcome::error(format!(
            "{child} is not a sub-agent of this chat: only the chats it spawned can be addressed."
        ))),
    }
}

/// One read of the child, retried with the task's backoff on database
/// errors (until the task is cancelled, when the call is answered by the
/// interruption anyway).
async fn read(
    task: &TaskContext,
    child: Uuid,
    since: DateTime<Utc>,
) -> Result<Option<chatd_store::chats::ChildProgress>, ToolOutcome> {
    let (min, max) = task.ctx.config.infra_backoff;
    let mut delay = min;
    loop {
        match chatd_store::chats::child_progress(task.ctx.store.pool(), child, since).await {
            Ok(progress) => return Ok(progress),
            Err(err) => {
                tracing::warn!(chat_id = %task.chat_id, %child, error = %err, "reading a sub-agent failed; retrying");
                if task.sleep(delay).await.is_err() {
                    return Err(ToolOutcome::error("The wait was cancelled."));
                }
                delay = (delay * 2).min(max);
            }
        }
    }
}

/// Whether a child in `status` with `queued` messages is idle for
/// `wait_agent`: waiting, in error, or waiting for a client's tool result
/// (which its parent cannot give), and nothing queued that would start it
/// again.
fn settled(progress: &chatd_store::chats::ChildProgress) -> bool {
    progress.archived
        || (matches!(
            progress.status,
            ChatStatus::Waiting | ChatStatus::Error | ChatStatus::RequiresAction
        ) && (progress.queued == 0 || progress.status != ChatStatus::Waiting))
}

/// The text of a child's last assistant message (its text parts joined).
fn last_text(progress: &chatd_store::chats::ChildProgress) -> Value {
    match &progress.last_message {
        Some(content) => Value::String(
            content
                .0
                .iter()
                .filter_map(|p| match p {
                    MessagePart::Text { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(""),
        ),
        None => Value::Null,
    }
}

/// `wait_agent`: waits until `child` is settled or `timeout` has passed
/// since `since` (the commit of the call, database time), then answers
/// `{status, last_message, timed_out}`. Subscribes to
/// `chat:update:{child}` before every read: reading first would miss a
/// change committed between the read and the subscribe. Reads again at
/// least every [`WAIT_POLL`] (and after a lost subscription) because
/// notifications are only hints.
pub(super) async fn wait(
    task: &TaskContext,
    parent: Uuid,
    child: Uuid,
    timeout: Duration,
    since: DateTime<Utc>,
) -> ToolOutcome {
    let channel = chat_update_channel(child);
    let mut subscription = match task.ctx.pubsub.subscribe(&channel).await {
        Ok(s) => Some(s),
        Err(err) => {
            tracing::warn!(chat_id = %task.chat_id, %child, error = %err, "subscribing to a sub-agent failed; polling");
            None
        }
    };
    let timeout_secs = timeout.as_secs_f64();
    loop {
        let progress = match own_child(task, parent, child, since).await {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        let remaining = timeout_secs - progress.elapsed_secs;
        if settled(&progress) || remaining <= 0.0 {
            return ToolOutcome {
                result: json!({
                    "status": if progress.archived { "archived" } else { progress.status.as_str() },
                    "last_message": last_text(&progress),
                    "timed_out": !settled(&progress),
                }),
                is_error: false,
            };
        }
        let pause = Duration::from_secs_f64(remaining).min(WAIT_POLL);
        let woke = async {
            match subscription.as_mut() {
                Some(s) => {
                    if s.recv().await.is_none() {
                        // The pubsub shut down: poll from now on.
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        let waited = task
            .cancellable(async {
                tokio::select! {
                    _ = woke => {},
                    _ = tokio::time::sleep(pause) => {},
                }
            })
            .await;
        if waited.is_err() {
            return ToolOutcome::error("The wait was cancelled.");
        }
    }
}

/// `message_agent`: `SendMessage(text, queue)` to `child`, at most once
/// per `key` (a send receipt under the key's string).
pub(super) async fn message(
    task: &TaskContext,
    parent: &Chat,
    child: Uuid,
    text: String,
    key: &IdempotencyKey,
) -> ToolOutcome {
    if let Err(outcome) = own_child(task, parent.id, child, Utc::now()).await {
        return outcome;
    }
    let receipt = format!("agent:{key}");
    let machine = task.ctx.store.machine(child);
    let mut delay = task.ctx.config.infra_backoff.0;
    loop {
        let attempt = async {
            let receipt = Some((receipt.clone(), b"message_agent".to_vec()));
            let mut send = match machine.begin_user_send(receipt).await? {
                UserSendStart::Open(send) => send,
                UserSendStart::Repeated(response) => return Ok::<_, StoreError>(response),
                UserSendStart::KeyConflict => {
                    return Ok(json!({"error": "The key was already used for another message."}));
                }
                UserSendStart::Archived => {
                    return Ok(json!({"error": "The sub-agent is closed (archived)."}));
                }
            };
            let mut message = NewMessage::user(vec![MessagePart::text(text.clone())]);
            message.model_config_id = parent.last_model_config_id;
            let (sent, _position) = send
                .send_message(SendMessageInput {
                    message,
                    busy_behavior: BusyBehavior::Queue,
                    max_queue_size: None,
                })
                .await?;
            let response = json!({ "queued": sent.queued_message.is_some() });
            send.commit(&response).await?;
            Ok(response)
        };
        match attempt.await {
            Ok(response) if response.get("error").is_some() => {
                return ToolOutcome {
                    result: response,
                    is_error: true,
                };
            }
            Ok(response) => {
                return ToolOutcome {
                    result: response,
                    is_error: false,
                };
            }
            Err(err) if err.state().is_some() => {
                return ToolOutcome::error(format!("The message was not sent: {err}"));
            }
            Err(err) => {
                tracing::warn!(chat_id = %task.chat_id, %child, error = %err, "messaging a sub-agent failed; retrying");
                if task.sleep(delay).await.is_err() {
                    return ToolOutcome::error("The message was cancelled.");
                }
                delay = (delay * 2).min(task.ctx.config.infra_backoff.1);
            }
        }
    }
}

/// `close_agent`: interrupts the busy members of `child`'s family (it and
/// its descendants), waits up to [`CLOSE_SETTLE`] for them to settle, and
/// archives them all in one transaction.
pub(super) async fn close(task: &TaskContext, parent: Uuid, child: Uuid) -> ToolOutcome {
    let progress = match own_child(task, parent, child, Utc::now()).await {
        Ok(p) => p,
        Err(outcome) => return outcome,
    };
    if progress.archived {
        return ToolOutcome {
            result: json!({"archived": true}),
            is_error: false,
        };
    }
    let store = &task.ctx.store;
    let deadline = tokio::time::Instant::now() + CLOSE_SETTLE;
    loop {
        match store.set_subtree_archived(child, true).await {
            Ok(_) => {
                return ToolOutcome {
                    result: json!({"archived": true}),
                    is_error: false,
                };
            }
            Err(err) if tokio::time::Instant::now() >= deadline => {
                return ToolOutcome::error(format!("The sub-agent could not be closed: {err}"));
            }
            Err(err) if err.state().is_none() => {
                tracing::warn!(chat_id = %task.chat_id, %child, error = %err, "closing a sub-agent failed; retrying");
            }
            Err(_) => {
                // A busy member: interrupt it (an idle one refuses, which
                // is fine) and try again once it settles.
                interrupt_busy(task, child).await;
            }
        }
        if task.sleep(Duration::from_millis(100)).await.is_err() {
            return ToolOutcome::error("The close was cancelled.");
        }
    }
}

/// `Interrupt` on `child` and each of its descendants that is running or
/// waiting for a client (best effort: a member that is not busy refuses).
async fn interrupt_busy(task: &TaskContext, child: Uuid) {
    let store = &task.ctx.store;
    let mut members = vec![child];
    if let Ok(mut conn) = store.pool().acquire().await
        && let Ok(descendants) = chatd_store::chats::subtree_members(&mut conn, child).await
    {
        members.extend(descendants);
    }
    for member in members {
        let _ = store
            .machine(member)
            .update(|tx| Box::pin(async move { tx.interrupt().await.map(|_| ()) }))
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_tool_arguments_parse_and_bad_ones_say_why() {
        let id = Uuid::from_u128(7);
        assert_eq!(
            parse(SPAWN_AGENT, r#"{"prompt": "look", "title": " T "}"#),
            Ok(AgentCall::Spawn {
                prompt: "look".into(),
                title: Some("T".into())
            })
        );
        assert_eq!(
            parse(WAIT_AGENT, &format!(r#"{{"chat_id": "{id}"}}"#)),
            Ok(AgentCall::Wait {
                chat_id: id,
                timeout: Duration::from_secs(600)
            })
        );
        assert_eq!(
            parse(
                WAIT_AGENT,
                &format!(r#"{{"chat_id": "{id}", "timeout_s": 601}}"#)
            ),
            Err("Invalid arguments for wait_agent: timeout_s must be 1 to 600".into())
        );
        assert_eq!(
            parse(
                MESSAGE_AGENT,
                &format!(r#"{{"chat_id": "{id}", "text": "more"}}"#)
            ),
            Ok(AgentCall::Message {
                chat_id: id,
                text: "more".into()
            })
        );
        assert_eq!(
            parse(CLOSE_AGENT, &format!(r#"{{"chat_id": "{id}"}}"#)),
            Ok(AgentCall::Close { chat_id: id })
        );
        let err = parse(CLOSE_AGENT, r#"{"chat_id": "nope"}"#).unwrap_err();
        assert!(
            err.starts_with("Invalid arguments for close_agent"),
            "{err}"
        );
        assert_eq!(
            parse(SPAWN_AGENT, r#"{"prompt": "  "}"#),
            Err("Invalid arguments for spawn_agent: prompt must not be empty".into())
        );
    }

    #[test]
    fn the_four_agent_tools_are_offered_in_order() {
        let names: Vec<String> = specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, [SPAWN_AGENT, WAIT_AGENT, MESSAGE_AGENT, CLOSE_AGENT]);
        assert!(names.iter().all(|n| is_agent_tool(n)));
        assert!(!is_agent_tool("calc__add"));
    }
}
