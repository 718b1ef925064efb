//! The four kinds of runner tasks (`spec/chatd-architecture.md`, "Runner
//! goroutines": generation, interrupt, dynamic tools timeout, abandon chat).
//!
//! The generation task ("Generation goroutine") plans the next step from the
//! active history, lists the chat's MCP tools, streams one model call into
//! the part buffer (retrying per DESIGN.md with `RecordRetryState`), runs the
//! step's MCP calls in parallel while their results stream into the same
//! episode, and commits the assistant message with every result in one
//! `CommitStep`, followed in the same bundle by `EnterRequiresAction` when
//! dynamic (client-side) calls are pending or `FinishTurn` when the model
//! made no calls. Calls cut off at the output token limit and calls of
//! unknown tools are answered with `is_error` results and never run.
//!
//! Every task is spawned with its intended history version and status (its
//! [`Fence`]); it takes the local `(chat, history_version, status)` lock, and
//! checks the fence under the chat row lock before every read and write. It
//! exits quietly when the fence fails, when it is cancelled, or when the chat
//! is gone; database failures are retried without limit with bounded
//! exponential backoff.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_core::{
    ChatError, ChatErrorKind, ChatRole, DynamicTool, Episode, FinishReason as MessageFinishReason,
    INTERRUPTED_TOOL_RESULT, MessagePart, ModelOptions, PartDelta, RetryState, StreamPart,
    Visibility, outstanding_tool_calls,
};
use chatd_llm::{
    FinishReason, ModelRequest, ProviderError, RequestMessage, ResponseBuilder, StreamEvent,
    ToolSpec,
};
use chatd_store::{Chat, ChatMessage, DEFAULT_CHAT_TITLE, NewMessage, queries};
use chatd_tools::{IdempotencyKey, McpServerConfig, McpToolset, ToolOutcome};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::context::WorkerContext;
use crate::fence::{Fence, FenceError, fenced_lock, fenced_update};
use crate::providers::{load_mcp_servers, resolve_model, resolve_reasoning_effort};
use crate::runner::{ChatSnapshot, RunnerInput, TaskKind};

/// Everything a task needs.
pub(crate) struct TaskContext {
    pub(crate) chat_id: Uuid,
    pub(crate) fence: Fence,
    pub(crate) ctx: Arc<WorkerContext>,
    pub(crate) cancel: CancellationToken,
    pub(crate) notify: mpsc::UnboundedSender<RunnerInput>,
}

/// How a task ended early.
#[derive(Debug)]
enum Exit {
    /// The chat moved on or is gone.
    Stale,
    /// The runner cancelled the task.
    Cancelled,
    /// A transition was rejected although the fence held: a bug or an
    /// unexpected state; logged.
    Rejected(String),
}

type TaskResult<T> = Result<T, Exit>;

/// Runs one task to completion.
pub(crate) async fn run(kind: TaskKind, task: TaskContext) {
    let result = if kind == TaskKind::Abandon {
        abandon(&task).await
    } else {
        let (Some(history_version), Some(status)) = (task.fence.history_version, task.fence.status)
        else {
            return;
        };
        let lock = task
            .ctx
            .local_locks
            .get(task.chat_id, history_version, status);
        let _guard = tokio::select! {
            _ = task.cancel.cancelled() => return,
            guard = lock.lock_owned() => guard,
        };
        match kind {
            TaskKind::Generation => generation(&task).await,
            TaskKind::Interrupt => interrupt(&task).await,
            TaskKind::RequiresActionTimeout => requires_action_timeout(&task).await,
            TaskKind::Abandon => unreachable!(),
        }
    };
    match result {
        Ok(()) | Err(Exit::Stale) | Err(Exit::Cancelled) => {}
        Err(Exit::Rejected(reason)) => {
            tracing::warn!(chat_id = %task.chat_id, ?kind, %reason, "runner task stopped: transition rejected");
        }
    }
}

impl TaskContext {
    fn machine(&self) -> chatd_store::ChatMachine {
        self.ctx.store.machine(self.chat_id)
    }

    fn publish_local(&self, chat: &Chat) {
        // The fast path: the runner sees our own commit without waiting for
        // the notification.
        let _ = self
            .notify
            .send(RunnerInput::Snapshot(ChatSnapshot::from(chat)));
    }

    async fn sleep(&self, duration: Duration) -> TaskResult<()> {
        tokio::select! {
            _ = self.cancel.cancelled() => Err(Exit::Cancelled),
            _ = tokio::time::sleep(duration) => Ok(()),
        }
    }

    /// Runs `op` until it succeeds, retrying infrastructure errors with
    /// bounded exponential backoff; stale fences and cancellation end the
    /// task.
    async fn retrying<T, F, Fut>(&self, what: &str, mut op: F) -> TaskResult<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, FenceError>>,
    {
        let (min, max) = self.ctx.config.infra_backoff;
        let mut delay = min;
        loop {
            if self.cancel.is_cancelled() {
                return Err(Exit::Cancelled);
            }
            let attempt = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Exit::Cancelled),
                r = op() => r,
            };
            match attempt {
                Ok(value) => return Ok(value),
                Err(FenceError::Stale) => return Err(Exit::Stale),
                Err(err) if err.is_retryable() => {
                    tracing::warn!(chat_id = %self.chat_id, error = %err, "{what} failed; retrying in {delay:?}");
                    self.sleep(delay).await?;
                    delay = (delay * 2).min(max);
                }
                Err(err) => return Err(Exit::Rejected(format!("{what}: {err}"))),
            }
        }
    }

    /// A fenced transition bundle, retried on infrastructure errors; the
    /// committed row goes to the runner.
    async fn transition<T, F>(&self, what: &str, f: F) -> TaskResult<T>
    where
        F: for<'a> Fn(
            &'a mut chatd_store::ChatTx,
            &'a Chat,
        ) -> futures::future::BoxFuture<'a, chatd_store::StoreResult<T>>,
    {
        let machine = self.machine();
        let (value, chat) = self
            .retrying(what, || fenced_update(&machine, &self.fence, &f))
            .await?;
        self.publish_local(&chat);
        Ok(value)
    }
}

// ---------------------------------------------------------------------------
// Abandon.

async fn abandon(task: &TaskContext) -> TaskResult<()> {
    task.transition("abandoning the chat", |tx, _| {
        Box::pin(async move { tx.abandon().await })
    })
    .await
}

// ---------------------------------------------------------------------------
// Requires-action timeout.

async fn requires_action_timeout(task: &TaskContext) -> TaskResult<()> {
    let machine = task.machine();
    loop {
        let remaining = task
            .retrying("reading the requires-action deadline", || async {
                let mut locked = fenced_lock(&machine, &task.fence).await?;
                let secs =
                    queries::chats::requires_action_remaining_secs(locked.conn(), task.chat_id)
                        .await
                        .map_err(|e| FenceError::Store(e.into()))?;
                locked.finish().await?;
                Ok(secs)
            })
            .await?;
        match remaining {
            Some(secs) if secs > 0.0 => {
                task.sleep(Duration::from_secs_f64(secs.min(86_400.0)))
                    .await?
            }
            _ => break,
        }
    }
    task.transition("cancelling the requires-action state", |tx, _| {
        Box::pin(async move { tx.cancel_requires_action(None).await.map(|_| ()) })
    })
    .await
}

// ---------------------------------------------------------------------------
// Interrupt.

async fn interrupt(task: &TaskContext) -> TaskResult<()> {
    let machine = task.machine();
    let attempt = task
        .retrying("reading the generation attempt", || async {
            let locked = fenced_lock(&machine, &task.fence).await?;
            let attempt = locked.chat.generation_attempt;
            locked.finish().await?;
            Ok(attempt)
        })
        .await?;
    let history_version = task.fence.history_version.unwrap_or_default();
    let partial = if attempt > 0 {
        let episode = Episode {
            chat_id: task.chat_id,
            history_version,
            generation_attempt: attempt,
        };
        task.ctx.parts.close_episode(episode);
        partial_messages(&task.ctx.parts.get_parts(episode).unwrap_or_default())
    } else {
        Vec::new()
    };
    task.transition("finishing the interruption", move |tx, _| {
        let partial = partial.clone();
        Box::pin(async move { tx.finish_interruption(partial).await.map(|_| ()) })
    })
    .await
}

/// Rebuilds the interrupted output from buffered preview parts: one assistant
/// message (reasoning, text, tool calls with the arguments received so far)
/// followed by one tool message per streamed tool result. Calls without a
/// result are answered by `FinishInterruption` itself.
pub(crate) fn partial_messages(parts: &[StreamPart]) -> Vec<NewMessage> {
    let mut reasoning = String::new();
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut results = Vec::new();
    for part in parts {
        match &part.part {
            PartDelta::Text { text: t } => text.push_str(t),
            PartDelta::Reasoning { text: t } => reasoning.push_str(t),
            PartDelta::ToolCall {
                tool_call_id,
                tool_name,
                args_delta,
            } => match calls.iter_mut().find(|(id, _, _)| id == tool_call_id) {
                Some(call) => call.2.push_str(args_delta),
                None => calls.push((tool_call_id.clone(), tool_name.clone(), args_delta.clone())),
            },
            PartDelta::ToolResult {
                tool_call_id,
                tool_name,
                result,
                is_error,
            } => {
                results.push(NewMessage::tool(vec![MessagePart::ToolResult {
                    tool_call_id: tool_call_id.clone(),
                    tool_name: tool_name.clone(),
                    result: result.clone(),
                    is_error: *is_error,
                }]));
            }
        }
    }
    let mut content = Vec::new();
    if !reasoning.is_empty() {
        content.push(MessagePart::reasoning(reasoning));
    }
    if !text.is_empty() {
        content.push(MessagePart::Text { text });
    }
    for (tool_call_id, tool_name, args) in calls {
        content.push(MessagePart::ToolCall {
            tool_call_id,
            tool_name,
            args,
        });
    }
    let mut messages = Vec::new();
    if !content.is_empty() {
        let mut assistant = NewMessage::assistant(content);
        assistant.finish_reason = Some(MessageFinishReason::Interrupted);
        messages.push(assistant);
    }
    messages.extend(results);
    messages
}

/// The stored finish reason of an assistant message for the provider's
/// reason; a reason chatd does not know (`Other`) is stored as unknown.
fn message_finish_reason(reason: &FinishReason) -> Option<MessageFinishReason> {
    match reason {
        FinishReason::Stop => Some(MessageFinishReason::Stop),
        FinishReason::Length => Some(MessageFinishReason::Length),
        FinishReason::ToolCalls => Some(MessageFinishReason::ToolCalls),
        FinishReason::ContentFilter => Some(MessageFinishReason::ContentFilter),
        FinishReason::Other(_) => None,
    }
}

// ---------------------------------------------------------------------------
// Generation.

/// What the generation task does next for the current history.
enum Plan {
    /// Nothing left to do: finish the turn (promoting the queue head).
    FinishTurn,
    /// Pending client-side calls: wait for their results.
    EnterRequiresAction,
    /// Calls without results that this worker answers itself (MCP calls are
    /// run, anything else gets an error result); `then_requires_action` when
    /// client-side calls are pending too.
    AnswerOutstanding(Box<Outstanding>),
    /// The turn has used its step budget.
    StepLimit,
    /// No usable model.
    NoModel(String),
    /// Call the model.
    Call(Box<Call>),
}

struct Outstanding {
    /// `(id, name, args)` in call order.
    calls: Vec<(String, String, String)>,
    mcp_servers: Vec<McpServerConfig>,
    generation_attempt: i64,
    then_requires_action: bool,
}

struct Call {
    request: ModelRequest,
    provider: Arc<dyn chatd_llm::Provider>,
    model_config_id: Uuid,
    context_limit: i64,
    options: ModelOptions,
    dynamic_tools: HashSet<String>,
    mcp_servers: Vec<McpServerConfig>,
    compaction: bool,
    /// Generate a title once this answer is committed (spec-free extra:
    /// issue "Title"): no text answer yet and the default title.
    wants_title: bool,
}

async fn generation(task: &TaskContext) -> TaskResult<()> {
    let machine = task.machine();
    let history_version = task.fence.history_version.unwrap_or_default();
    let config = &task.ctx.config;
    let plan = task
        .retrying("reading the chat history", || async {
            plan(task, &machine).await
        })
        .await?;
    let mut call = match plan {
        Plan::FinishTurn => {
            return task
                .transition("finishing the turn", |tx, _| {
                    Box::pin(async move { tx.finish_turn().await.map(|_| ()) })
                })
                .await;
        }
        Plan::EnterRequiresAction => {
            return task
                .transition("entering requires-action", |tx, _| {
                    Box::pin(async move { tx.enter_requires_action().await.map(|_| ()) })
                })
                .await;
        }
        Plan::AnswerOutstanding(outstanding) => {
            return answer_outstanding(task, *outstanding).await;
        }
        Plan::StepLimit => {
            let error = ChatError::new(
                ChatErrorKind::Generic,
                format!(
                    "The turn stopped after {} model responses without finishing.",
                    config.max_steps_per_turn
                ),
                false,
            );
            return task
                .transition("ending the turn at the step limit", move |tx, _| {
                    let error = error.clone();
                    Box::pin(async move { tx.finish_error(error).await })
                })
                .await;
        }
        Plan::NoModel(message) => {
            let error = ChatError::new(ChatErrorKind::InvalidRequest, message, false);
            return task
                .transition("ending the turn without a model", move |tx, _| {
                    let error = error.clone();
                    Box::pin(async move { tx.finish_error(error).await })
                })
                .await;
        }
        Plan::Call(call) => call,
    };

    // MCP tools are listed once per step, outside any lock; a server that
    // cannot be listed is left out of this step only.
    let mcp = if call.compaction || call.mcp_servers.is_empty() {
        McpToolset::default()
    } else {
        tokio::select! {
            _ = task.cancel.cancelled() => return Err(Exit::Cancelled),
            set = task.ctx.mcp.list_tools(&call.mcp_servers) => set,
        }
    };
    for tool in &mcp.tools {
        if call.dynamic_tools.contains(&tool.qualified_name) {
            tracing::warn!(chat_id = %task.chat_id, tool = %tool.qualified_name, "MCP tool hidden by a dynamic tool of the same name");
            continue;
        }
        call.request.tools.push(ToolSpec {
            name: tool.qualified_name.clone(),
            description: tool.description.clone(),
            input_schema: tool.input_schema.clone(),
        });
    }

    loop {
        let attempt = task
            .transition("recording a generation attempt", |tx, _| {
                Box::pin(async move { tx.record_generation_attempt().await })
            })
            .await?;
        if attempt > config.max_generation_retries + 1 {
            // The attempt budget is spent (earlier runners retried already).
            let error = ChatError::new(
                ChatErrorKind::Generic,
                "Generation failed too many times.",
                true,
            );
            return task
                .transition("ending the turn after too many attempts", move |tx, _| {
                    let error = error.clone();
                    Box::pin(async move { tx.finish_error(error).await })
                })
                .await;
        }
        let episode = Episode {
            chat_id: task.chat_id,
            history_version,
            generation_attempt: attempt,
        };
        if let Err(err) = task.ctx.parts.create_episode(episode) {
            tracing::debug!(chat_id = %task.chat_id, error = %err, "episode exists; parts of this attempt are dropped");
        }
        let started = Instant::now();
        let outcome = tokio::select! {
            _ = task.cancel.cancelled() => {
                task.ctx.parts.close_episode(episode);
                return Err(Exit::Cancelled);
            }
            outcome = stream_response(task, &call, episode) => outcome,
        };
        match outcome {
            Ok(response) => {
                let runtime_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
                // Tool results stream into the same episode, so it stays open
                // until they are all in.
                let step = tokio::select! {
                    _ = task.cancel.cancelled() => {
                        task.ctx.parts.close_episode(episode);
                        return Err(Exit::Cancelled);
                    }
                    step = run_tools(task, &call, &mcp, &response, episode) => step,
                };
                task.ctx.parts.close_episode(episode);
                return commit_response(task, &call, response, step, runtime_ms).await;
            }
            Err(err) => {
                task.ctx.parts.close_episode(episode);
                if err.retryable && attempt <= config.max_generation_retries {
                    let delay = config.retry_delay(attempt);
                    // Millisecond precision, as it is stored.
                    let retrying_at = chrono::SubsecRound::trunc_subsecs(
                        chrono::Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default(),
                        3,
                    );
                    let payload = RetryState {
                        attempt,
                        delay_ms: delay.as_millis() as u64,
                        error: err.to_chat_error(),
                        retrying_at,
                    };
                    tracing::info!(chat_id = %task.chat_id, attempt, ?delay, error = %err.message, "provider call failed; retrying");
                    task.transition("recording the retry state", move |tx, _| {
                        let payload = payload.clone();
                        Box::pin(async move { tx.record_retry_state(payload).await.map(|_| ()) })
                    })
                    .await?;
                    task.sleep(delay).await?;
                    continue;
                }
                tracing::info!(chat_id = %task.chat_id, attempt, error = %err.message, "provider call failed; ending the turn");
                let error = err.to_chat_error();
                return task
                    .transition("ending the turn with an error", move |tx, _| {
                        let error = error.clone();
                        Box::pin(async move { tx.finish_error(error).await })
                    })
                    .await;
            }
        }
    }
}

/// Reads the history under the fenced lock and decides the next step.
async fn plan(task: &TaskContext, machine: &chatd_store::ChatMachine) -> Result<Plan, FenceError> {
    let mut locked = fenced_lock(machine, &task.fence).await?;
    let chat = locked.chat.clone();
    let history = queries::messages::active_history(locked.conn(), task.chat_id)
        .await
        .map_err(|e| FenceError::Store(e.into()))?;
    let model = resolve_model(locked.conn(), &chat, task.ctx.providers.as_ref())
        .await
        .map_err(|e| FenceError::Store(e.into()))?;
    let mcp_servers = load_mcp_servers(locked.conn(), &chat.mcp_server_ids)
        .await
        .map_err(|e| FenceError::Store(e.into()))?;
    locked.finish().await?;

    let history: Vec<&ChatMessage> = history
        .iter()
        .filter(|m| m.visibility != Visibility::User)
        .collect();
    let dynamic: HashSet<String> = chat.dynamic_tool_names().into_iter().collect();
    let compaction = chat.compaction_requested_at.is_some();
    let last_user = history.iter().rposition(|m| m.role == ChatRole::User);
    let since_user = &history[last_user.map_or(0, |i| i + 1)..];
    let outstanding = outstanding_tool_calls(since_user.iter().map(|m| m.content.0.as_slice()));
    let last = history.iter().rev().find(|m| m.role != ChatRole::System);

    if !compaction {
        if last.is_none() {
            return Ok(Plan::FinishTurn);
        }
        if !outstanding.is_empty() {
            let (client, ours): (Vec<_>, Vec<_>) = outstanding
                .into_iter()
                .partition(|c| dynamic.contains(&c.tool_name));
            if !ours.is_empty() {
                let calls = ours
                    .into_iter()
                    .map(|c| {
                        let args = call_args(since_user, &c.tool_call_id);
                        (c.tool_call_id, c.tool_name, args)
                    })
                    .collect();
                return Ok(Plan::AnswerOutstanding(Box::new(Outstanding {
                    calls,
                    mcp_servers,
                    generation_attempt: chat.generation_attempt,
                    then_requires_action: !client.is_empty(),
                })));
            }
            if !client.is_empty() {
                return Ok(Plan::EnterRequiresAction);
            }
        }
        let last = last.expect("checked above");
        if last.role == ChatRole::Assistant {
            return Ok(Plan::FinishTurn);
        }
        if last.role == ChatRole::Tool && ended_by_user_interrupt(since_user) {
            return Ok(Plan::FinishTurn);
        }
        let steps = since_user
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .count();
        if steps >= task.ctx.config.max_steps_per_turn {
            return Ok(Plan::StepLimit);
        }
    }
    let model = match model {
        Ok(model) => model,
        Err(message) => return Ok(Plan::NoModel(message)),
    };
    let answered_before = history.iter().any(|m| {
        m.role == ChatRole::Assistant
            && m.content
                .0
                .iter()
                .any(|p| matches!(p, MessagePart::Text { text } if !text.trim().is_empty()))
    });
    let wants_title = task.ctx.config.generate_titles
        && !compaction
        && !answered_before
        && chat.title == DEFAULT_CHAT_TITLE;
    let mut messages: Vec<RequestMessage> = history
        .iter()
        .map(|m| RequestMessage {
            role: m.role,
            parts: m.content.0.clone(),
        })
        .collect();
    let tools = if compaction {
        messages.push(RequestMessage {
            role: ChatRole::User,
            parts: vec![MessagePart::text(COMPACTION_PROMPT)],
        });
        Vec::new()
    } else {
        dynamic_tool_specs(&chat.dynamic_tools)
    };
    let options = model.config.options.clone();
    let request = ModelRequest {
        model: model.config.model.clone(),
        messages,
        tools,
        max_output_tokens: options
            .max_output_tokens
            .and_then(|v| u32::try_from(v).ok()),
        temperature: options.temperature.map(|t| t as f32),
        reasoning_effort: resolve_reasoning_effort(chat.last_reasoning_effort.as_deref(), &options),
    };
    Ok(Plan::Call(Box::new(Call {
        request,
        provider: model.provider,
        model_config_id: model.config.id,
        context_limit: model.config.context_limit,
        options,
        dynamic_tools: dynamic,
        mcp_servers: if compaction { Vec::new() } else { mcp_servers },
        compaction,
        wants_title,
    })))
}

const COMPACTION_PROMPT: &str = "Summarize the conversation so far for your own later use: the user's goals, \
decisions made, facts established, open questions and the current state of any task. Be complete but concise; \
answer with the summary only.";

/// The stored arguments of call `id` in `messages` (empty when not found).
fn call_args(messages: &[&ChatMessage], id: &str) -> String {
    messages
        .iter()
        .flat_map(|m| m.content.0.iter())
        .find_map(|p| match p {
            MessagePart::ToolCall {
                tool_call_id, args, ..
            } if tool_call_id == id => Some(args.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Whether every tool result after the last assistant message is the
/// synthetic "interrupted by user" result: the user stopped the turn.
fn ended_by_user_interrupt(since_user: &[&ChatMessage]) -> bool {
    let last_assistant = since_user
        .iter()
        .rposition(|m| m.role == ChatRole::Assistant);
    let results: Vec<&MessagePart> = since_user[last_assistant.map_or(0, |i| i + 1)..]
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter(|p| matches!(p, MessagePart::ToolResult { .. }))
        .collect();
    !results.is_empty()
        && results.iter().all(|p| matches!(p, MessagePart::ToolResult { result, is_error: true, .. } if result == &json!({"error": INTERRUPTED_TOOL_RESULT})))
}

fn dynamic_tool_specs(tools: &[DynamicTool]) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
        })
        .collect()
}

/// A tool-result part in its own tool message.
fn result_message(id: &str, name: &str, outcome: &ToolOutcome) -> NewMessage {
    NewMessage::tool(vec![MessagePart::ToolResult {
        tool_call_id: id.to_owned(),
        tool_name: name.to_owned(),
        result: outcome.result.clone(),
        is_error: outcome.is_error,
    }])
}

/// Streams one model call into the part buffer and accumulates it.
///
/// # Errors
/// The provider's error, or a retryable `generic` one when the stream ended
/// without finishing.
async fn stream_response(
    task: &TaskContext,
    call: &Call,
    episode: Episode,
) -> Result<ResponseBuilder, ProviderError> {
    let parts = &task.ctx.parts;
    let add = |part: PartDelta| {
        // Best effort: a full or closed episode drops the part.
        let _ = parts.add_part(episode, ChatRole::Assistant, part);
    };
    if let Some(at_least) = prompt_clearly_exceeds(&call.request, call.context_limit) {
        // A server asked for more than its window may answer with nothing at
        // all (llama.cpp closes the stream), which looks retryable; fail at
        // once instead of retrying for minutes.
        return Err(ProviderError::new(
            chatd_llm::ErrorKind::ContextLength,
            format!(
                "the conversation needs at least {at_least} tokens, more than the model's \
                 context of {} tokens",
                call.context_limit
            ),
            call.provider.name(),
        )
        .with_retryable(false));
    }
    let mut stream = call.provider.stream(&call.request).await?;
    let mut response = ResponseBuilder::new();
    let mut calls: HashMap<usize, (String, String)> = HashMap::new();
    while let Some(event) = stream.next().await {
        let event = event?;
        response.push(&event);
        match event {
            StreamEvent::TextDelta(text) => add(PartDelta::Text { text }),
            StreamEvent::ReasoningDelta(text) => add(PartDelta::Reasoning { text }),
            StreamEvent::ToolCallStart { index, id, name } => {
                add(PartDelta::ToolCall {
                    tool_call_id: id.clone(),
                    tool_name: name.clone(),
                    args_delta: String::new(),
                });
                calls.insert(index, (id, name));
            }
            StreamEvent::ToolCallDelta { index, args_delta } => {
                if let Some((id, name)) = calls.get(&index) {
                    add(PartDelta::ToolCall {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                        args_delta,
                    });
                }
            }
            StreamEvent::Finish { .. } => break,
            _ => {}
        }
    }
    if !response.is_finished() {
        return Err(ProviderError::new(
            chatd_llm::ErrorKind::Generic,
            "the stream ended without a finish event",
            call.provider.name(),
        ));
    }
    Ok(response)
}

/// Bytes of serialized message content per token in
/// [`prompt_clearly_exceeds`]'s lower bound. Real tokenizers average 3 to 5
/// bytes per token on text and code; 8 keeps the bound below the true count
/// for anything but pathological input.
const MAX_BYTES_PER_TOKEN: usize = 8;

/// `Some(tokens)`, a lower bound on the prompt's tokens, when that bound
/// alone exceeds `context_limit` (tokens; `<= 0`: unknown, never exceeds).
/// A prompt that passes may still be too long: the provider decides then.
fn prompt_clearly_exceeds(request: &ModelRequest, context_limit: i64) -> Option<usize> {
    let limit = usize::try_from(context_limit).ok().filter(|l| *l > 0)?;
    // Counted as it is written: the provider serializes the prompt again,
    // so this one is not kept.
    let mut bytes = ByteCount(0);
    for message in &request.messages {
        let _ = serde_json::to_writer(&mut bytes, &message.parts);
    }
    let at_least = bytes.0 / MAX_BYTES_PER_TOKEN;
    (at_least > limit).then_some(at_least)
}

/// An [`std::io::Write`] that only counts the bytes written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a step's tool calls came to.
#[derive(Default)]
struct ToolStep {
    /// Tool messages to commit with the assistant message, in call order.
    results: Vec<NewMessage>,
    /// Client-side (dynamic) calls are pending: enter requires-action.
    waits_for_client: bool,
}

/// The text of the result of a call cut off at the output token limit.
const CUT_OFF_CALL: &str = "The tool call was cut off at the output token limit: its arguments are incomplete and it was not run.";

/// Runs this step's MCP calls in parallel (streaming each result into the
/// episode as a `tool` part) and answers the calls nobody can run. Dynamic
/// calls are left to the client.
async fn run_tools(
    task: &TaskContext,
    call: &Call,
    mcp: &McpToolset,
    response: &ResponseBuilder,
    episode: Episode,
) -> ToolStep {
    let unfinished: HashSet<String> = response
        .unfinished_tool_calls()
        .into_iter()
        .map(|c| c.id)
        .collect();
    let cut = response.finish_reason() == Some(&FinishReason::Length);
    let stream_result = |id: &str, name: &str, outcome: &ToolOutcome| {
        let _ = task.ctx.parts.add_part(
            episode,
            ChatRole::Tool,
            PartDelta::ToolResult {
                tool_call_id: id.to_owned(),
                tool_name: name.to_owned(),
                result: outcome.result.clone(),
                is_error: outcome.is_error,
            },
        );
    };
    let calls = response.tool_calls();
    let mut step = ToolStep::default();
    let mut outcomes: Vec<Option<ToolOutcome>> = Vec::new();
    let mut runs = Vec::new();
    for (i, tool_call) in calls.iter().enumerate() {
        let incomplete =
            unfinished.contains(&tool_call.id) || (cut && tool_call.parsed_args().is_err());
        if incomplete {
            outcomes.push(Some(ToolOutcome::error(CUT_OFF_CALL)));
        } else if call.dynamic_tools.contains(&tool_call.name) {
            step.waits_for_client = true;
            outcomes.push(None);
        } else if let Some(tool) = mcp.get(&tool_call.name) {
            outcomes.push(None);
            let key = IdempotencyKey {
                chat_id: task.chat_id,
                history_version: episode.history_version,
                generation_attempt: episode.generation_attempt,
                tool_call_id: tool_call.id.clone(),
            };
            runs.push(async move {
                let outcome = task
                    .ctx
                    .mcp
                    .call(&tool.server, &tool.name, &tool_call.args, &key)
                    .await;
                stream_result(&tool_call.id, &tool_call.name, &outcome);
                (i, outcome)
            });
        } else {
            outcomes.push(Some(ToolOutcome::error(format!(
                "Unknown tool: {}",
                tool_call.name
            ))));
        }
    }
    for (tool_call, outcome) in calls.iter().zip(&outcomes) {
        if let Some(outcome) = outcome {
            stream_result(&tool_call.id, &tool_call.name, outcome);
        }
    }
    for (i, outcome) in futures::future::join_all(runs).await {
        outcomes[i] = Some(outcome);
    }
    for (tool_call, outcome) in calls.iter().zip(outcomes) {
        if let Some(outcome) = outcome {
            step.results
                .push(result_message(&tool_call.id, &tool_call.name, &outcome));
        }
    }
    step
}

/// Answers calls left without results by an earlier step (MCP calls run
/// again, at least once; anything else gets an error result) and commits
/// them, entering requires-action in the same bundle when client-side calls
/// are pending too.
async fn answer_outstanding(task: &TaskContext, outstanding: Outstanding) -> TaskResult<()> {
    let history_version = task.fence.history_version.unwrap_or_default();
    let needs_mcp = !outstanding.mcp_servers.is_empty();
    let mcp = if needs_mcp {
        tokio::select! {
            _ = task.cancel.cancelled() => return Err(Exit::Cancelled),
            set = task.ctx.mcp.list_tools(&outstanding.mcp_servers) => set,
        }
    } else {
        McpToolset::default()
    };
    let runs = outstanding.calls.iter().map(|(id, name, args)| {
        let mcp = &mcp;
        async move {
            let outcome = match mcp.get(name) {
                Some(tool) => {
                    let key = IdempotencyKey {
                        chat_id: task.chat_id,
                        history_version,
                        generation_attempt: outstanding.generation_attempt,
                        tool_call_id: id.clone(),
                    };
                    task.ctx
                        .mcp
                        .call(&tool.server, &tool.name, args, &key)
                        .await
                }
                None => ToolOutcome::error(format!("Unknown tool: {name}")),
            };
            result_message(id, name, &outcome)
        }
    });
    let results = tokio::select! {
        _ = task.cancel.cancelled() => return Err(Exit::Cancelled),
        results = futures::future::join_all(runs) => results,
    };
    let then_requires_action = outstanding.then_requires_action;
    task.transition("answering outstanding tool calls", move |tx, _| {
        let results = results.clone();
        Box::pin(async move {
            tx.commit_step(results, false).await?;
            if then_requires_action {
                tx.enter_requires_action().await?;
            }
            Ok(())
        })
    })
    .await
}

/// Commits one model response: the assistant message and the step's tool
/// results in one `CommitStep`, and the next transition in the same bundle
/// (finish the turn, or wait for client-side tool results). Then, for a
/// chat's first answer, starts the title generation in the background.
async fn commit_response(
    task: &TaskContext,
    call: &Call,
    response: ResponseBuilder,
    step: ToolStep,
    runtime_ms: i64,
) -> TaskResult<()> {
    let made_calls = !response.tool_calls().is_empty();
    let text = response.text();
    let mut content = response.parts();
    if !content
        .iter()
        .any(|p| matches!(p, MessagePart::Text { .. } | MessagePart::ToolCall { .. }))
    {
        // An empty answer is still an answer.
        content.push(MessagePart::text(""));
    }
    let usage = response.usage();
    let mut assistant = NewMessage::assistant(content);
    if call.compaction {
        assistant = NewMessage::user(vec![MessagePart::text(format!(
            "[Summary of the earlier conversation]\n{text}"
        ))]);
        assistant.compressed = true;
        assistant.visibility = Visibility::Model;
    }
    assistant.model_config_id = Some(call.model_config_id);
    if !call.compaction {
        assistant.finish_reason = response.finish_reason().and_then(message_finish_reason);
    }
    assistant.usage = usage;
    assistant.context_limit = Some(call.context_limit);
    assistant.runtime_ms = Some(runtime_ms);
    assistant.total_cost_micros = usage.and_then(|u| call.options.cost_micros(&u));

    let mut messages = vec![assistant];
    messages.extend(step.results);
    let compaction = call.compaction;
    let waits_for_client = step.waits_for_client && !compaction;
    let finishes = !made_calls || compaction;
    task.transition("committing the model response", move |tx, _| {
        let messages = messages.clone();
        Box::pin(async move {
            tx.commit_step(messages, compaction).await?;
            if waits_for_client {
                tx.enter_requires_action().await?;
            } else if finishes {
                tx.finish_turn().await?;
            }
            Ok(())
        })
    })
    .await?;
    if call.wants_title && finishes && !text.trim().is_empty() {
        crate::title::spawn(
            task.ctx.clone(),
            task.chat_id,
            call.provider.clone(),
            call.request.model.clone(),
            first_user_text(&call.request.messages),
            text,
        );
    }
    Ok(())
}

/// The text of the first user message of a request.
fn first_user_text(messages: &[RequestMessage]) -> String {
    messages
        .iter()
        .find(|m| m.role == ChatRole::User)
        .map(|m| {
            m.parts
                .iter()
                .filter_map(|p| match p {
                    MessagePart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_prompt_far_over_the_context_is_refused_before_the_call() {
        let request = |text: &str| ModelRequest {
            model: "m".into(),
            messages: vec![RequestMessage {
                role: ChatRole::User,
                parts: vec![MessagePart::text(text)],
            }],
            tools: Vec::new(),
            max_output_tokens: None,
            temperature: None,
            reasoning_effort: None,
        };
        // 250 KB of text against an 8192-token window: refused.
        let huge = "word ".repeat(50_000);
        let at_least = super::prompt_clearly_exceeds(&request(&huge), 8192).unwrap();
        assert!((31_000..=31_300).contains(&at_least), "{at_least}");
        // 40 KB (about 10k real tokens) is left to the provider to judge.
        assert_eq!(
            super::prompt_clearly_exceeds(&request(&"word ".repeat(8_000)), 8192),
            None
        );
        // An unknown context never refuses.
        assert_eq!(super::prompt_clearly_exceeds(&request(&huge), 0), None);
    }

    fn part(seq: u64, part: PartDelta) -> StreamPart {
        StreamPart {
            seq,
            role: ChatRole::Assistant,
            part,
        }
    }

    #[test]
    fn partial_messages_join_text_and_tool_call_arguments() {
        let parts = vec![
            part(
                1,
                PartDelta::Reasoning {
                    text: "think".into(),
                },
            ),
            part(2, PartDelta::Text { text: "Hel".into() }),
            part(3, PartDelta::Text { text: "lo".into() }),
            part(
                4,
                PartDelta::ToolCall {
                    tool_call_id: "c1".into(),
                    tool_name: "search".into(),
                    args_delta: String::new(),
                },
            ),
            part(
                5,
                PartDelta::ToolCall {
                    tool_call_id: "c1".into(),
                    tool_name: "search".into(),
                    args_delta: "{\"q\":".into(),
                },
            ),
            part(
                6,
                PartDelta::ToolCall {
                    tool_call_id: "c1".into(),
                    tool_name: "search".into(),
                    args_delta: "\"x\"}".into(),
                },
            ),
        ];
        let messages = partial_messages(&parts);
        assert_eq!(messages.len(), 1);
        assert_eq!(
            messages[0].content,
            vec![
                MessagePart::reasoning("think"),
                MessagePart::Text {
                    text: "Hello".into()
                },
                MessagePart::ToolCall {
                    tool_call_id: "c1".into(),
                    tool_name: "search".into(),
                    args: "{\"q\":\"x\"}".into()
                },
            ]
        );
        assert_eq!(
            messages[0].finish_reason,
            Some(MessageFinishReason::Interrupted)
        );
        assert!(partial_messages(&[]).is_empty());
    }

    #[test]
    fn provider_finish_reasons_map_to_stored_ones_and_unknown_ones_to_none() {
        let cases = [
            (FinishReason::Stop, Some(MessageFinishReason::Stop)),
            (FinishReason::Length, Some(MessageFinishReason::Length)),
            (
                FinishReason::ToolCalls,
                Some(MessageFinishReason::ToolCalls),
            ),
            (
                FinishReason::ContentFilter,
                Some(MessageFinishReason::ContentFilter),
            ),
            (FinishReason::Other("eos".into()), None),
        ];
        for (provider, stored) in cases {
            assert_eq!(message_finish_reason(&provider), stored, "{provider:?}");
        }
    }
}
