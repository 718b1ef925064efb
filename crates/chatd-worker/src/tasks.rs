//! The four kinds of runner tasks (`spec/chatd-architecture.md`, "Runner
//! goroutines": generation, interrupt, dynamic tools timeout, abandon chat).
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
    ChatRole, Episode, INTERRUPTED_TOOL_RESULT, MessagePart, PartDelta, StreamPart, ToolCallRef,
    Visibility, outstanding_tool_calls,
};
use chatd_llm::{ModelRequest, ProviderError, RequestMessage, StreamEvent, ToolSpec};
use chatd_store::{Chat, ChatMessage, NewMessage, Usage};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::context::WorkerContext;
use crate::fence::{Fence, FenceError, fenced_lock, fenced_update};
use crate::providers::{cost_micros, resolve_model, resolve_reasoning_effort};
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
                let secs: Option<f64> = sqlx::query_scalar(
                    "SELECT extract(epoch FROM requires_action_deadline_at - now())::float8 FROM chats WHERE id = $1",
                )
                .bind(task.chat_id)
                .fetch_one(locked.conn())
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
        messages.push(NewMessage::assistant(content));
    }
    messages.extend(results);
    messages
}

// ---------------------------------------------------------------------------
// Generation.

/// What the generation task does next for the current history.
enum Plan {
    /// Nothing left to do: finish the turn (promoting the queue head).
    FinishTurn,
    /// Pending client-side calls: wait for their results.
    EnterRequiresAction,
    /// Calls this worker cannot execute: answer them with errors.
    AnswerUnknownTools(Vec<ToolCallRef>),
    /// The turn has used its step budget.
    StepLimit,
    /// No usable model.
    NoModel(String),
    /// Call the model.
    Call(Box<Call>),
}

struct Call {
    request: ModelRequest,
    provider: Arc<dyn chatd_llm::Provider>,
    model_config_id: Uuid,
    context_limit: i64,
    options: Value,
    dynamic_tools: HashSet<String>,
    compaction: bool,
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
    let call = match plan {
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
        Plan::AnswerUnknownTools(calls) => {
            let results = unknown_tool_results(&calls);
            return task
                .transition("answering unknown tool calls", move |tx, _| {
                    let results = results.clone();
                    Box::pin(async move { tx.commit_step(results, false).await.map(|_| ()) })
                })
                .await;
        }
        Plan::StepLimit => {
            let error = chat_error(
                "generic",
                &format!(
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
            let error = chat_error("invalid_request", &message, false);
            return task
                .transition("ending the turn without a model", move |tx, _| {
                    let error = error.clone();
                    Box::pin(async move { tx.finish_error(error).await })
                })
                .await;
        }
        Plan::Call(call) => call,
    };

    loop {
        let attempt = task
            .transition("recording a generation attempt", |tx, _| {
                Box::pin(async move { tx.record_generation_attempt().await })
            })
            .await?;
        if attempt > config.max_generation_retries + 1 {
            // The attempt budget is spent (earlier runners retried already).
            let error = chat_error("generic", "Generation failed too many times.", false);
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
        task.ctx.parts.close_episode(episode);
        match outcome {
            Ok(response) => {
                let runtime_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
                return commit_response(task, &call, response, runtime_ms).await;
            }
            Err(err) => {
                if err.retryable && attempt <= config.max_generation_retries {
                    let delay = config.retry_delay(attempt);
                    let retrying_at =
                        chrono::Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
                    let payload = json!({
                        "attempt": attempt,
                        "delay_ms": delay.as_millis() as u64,
                        "error": err.to_chat_error_json(),
                        "retrying_at": retrying_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                    });
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
                let error = err.to_chat_error_json();
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
    let history = chatd_store::queries::active_history(locked.conn(), task.chat_id)
        .await
        .map_err(|e| FenceError::Store(e.into()))?;
    let model = resolve_model(locked.conn(), &chat, task.ctx.providers.as_ref())
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
            let (client, unknown): (Vec<_>, Vec<_>) = outstanding
                .into_iter()
                .partition(|c| dynamic.contains(&c.tool_name));
            if !unknown.is_empty() {
                return Ok(Plan::AnswerUnknownTools(unknown));
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
            .get("max_output_tokens")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok()),
        temperature: options
            .get("temperature")
            .and_then(Value::as_f64)
            .map(|t| t as f32),
        reasoning_effort: resolve_reasoning_effort(chat.last_reasoning_effort.as_deref(), &options),
    };
    Ok(Plan::Call(Box::new(Call {
        request,
        provider: model.provider,
        model_config_id: model.config.id,
        context_limit: model.config.context_limit,
        options,
        dynamic_tools: dynamic,
        compaction,
    })))
}

const COMPACTION_PROMPT: &str = "Summarize the conversation so far for your own later use: the user's goals, \
decisions made, facts established, open questions and the current state of any task. Be complete but concise; \
answer with the summary only.";

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

fn dynamic_tool_specs(tools: &Value) -> Vec<ToolSpec> {
    tools
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    Some(ToolSpec {
                        name: t.get("name")?.as_str()?.to_owned(),
                        description: t
                            .get("description")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        input_schema: t
                            .get("input_schema")
                            .cloned()
                            .unwrap_or_else(|| json!({"type": "object"})),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn unknown_tool_results(calls: &[ToolCallRef]) -> Vec<NewMessage> {
    calls
        .iter()
        .map(|call| {
            NewMessage::tool(vec![MessagePart::ToolResult {
                tool_call_id: call.tool_call_id.clone(),
                tool_name: call.tool_name.clone(),
                result: json!({"error": format!("Unknown tool: {}", call.tool_name)}),
                is_error: true,
            }])
        })
        .collect()
}

/// A `ChatError` JSON value (API.md "Objects").
fn chat_error(kind: &str, message: &str, retryable: bool) -> Value {
    json!({"message": message, "kind": kind, "retryable": retryable})
}

/// What one model call produced.
#[derive(Debug, Default)]
struct ModelResponse {
    text: String,
    reasoning: String,
    /// `(id, name, args)` in index order.
    tool_calls: Vec<(String, String, String)>,
    usage: Option<chatd_llm::Usage>,
}

/// Streams one model call into the part buffer and accumulates it.
async fn stream_response(
    task: &TaskContext,
    call: &Call,
    episode: Episode,
) -> Result<ModelResponse, ProviderError> {
    let parts = &task.ctx.parts;
    let add = |part: PartDelta| {
        // Best effort: a full or closed episode drops the part.
        let _ = parts.add_part(episode, ChatRole::Assistant, part);
    };
    let mut stream = call.provider.stream(&call.request).await?;
    let mut response = ModelResponse::default();
    let mut by_index: HashMap<usize, usize> = HashMap::new();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::TextDelta(text) => {
                response.text.push_str(&text);
                add(PartDelta::Text { text });
            }
            StreamEvent::ReasoningDelta(text) => {
                response.reasoning.push_str(&text);
                add(PartDelta::Reasoning { text });
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                by_index.insert(index, response.tool_calls.len());
                add(PartDelta::ToolCall {
                    tool_call_id: id.clone(),
                    tool_name: name.clone(),
                    args_delta: String::new(),
                });
                response.tool_calls.push((id, name, String::new()));
            }
            StreamEvent::ToolCallDelta { index, args_delta } => {
                if let Some(&i) = by_index.get(&index) {
                    let (id, name, args) = &mut response.tool_calls[i];
                    args.push_str(&args_delta);
                    add(PartDelta::ToolCall {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                        args_delta,
                    });
                }
            }
            StreamEvent::Usage(usage) => response.usage = Some(usage),
            _ => {}
        }
    }
    Ok(response)
}

/// Commits one model response: the assistant message, results for calls this
/// worker cannot run, and the next transition in the same bundle (finish the
/// turn, or wait for client-side tool results).
async fn commit_response(
    task: &TaskContext,
    call: &Call,
    response: ModelResponse,
    runtime_ms: i64,
) -> TaskResult<()> {
    let mut content = Vec::new();
    if !response.reasoning.is_empty() {
        content.push(MessagePart::reasoning(response.reasoning.clone()));
    }
    if !response.text.is_empty() || response.tool_calls.is_empty() {
        content.push(MessagePart::Text {
            text: response.text.clone(),
        });
    }
    for (tool_call_id, tool_name, args) in &response.tool_calls {
        content.push(MessagePart::ToolCall {
            tool_call_id: tool_call_id.clone(),
            tool_name: tool_name.clone(),
            args: args.clone(),
        });
    }
    let usage = response.usage.map(|u| Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        reasoning_tokens: u.reasoning_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_creation_tokens: u.cache_creation_tokens,
        total_tokens: u.total_tokens,
    });
    let mut assistant = NewMessage::assistant(content);
    if call.compaction {
        assistant = NewMessage::user(vec![MessagePart::text(format!(
            "[Summary of the earlier conversation]\n{}",
            response.text
        ))]);
        assistant.compressed = true;
        assistant.visibility = Visibility::Model;
    }
    assistant.model_config_id = Some(call.model_config_id);
    assistant.usage = usage;
    assistant.context_limit = Some(call.context_limit);
    assistant.runtime_ms = Some(runtime_ms);
    assistant.total_cost_micros =
        usage.and_then(|u| cost_micros(&call.options, u.input_tokens, u.output_tokens));

    let calls: Vec<ToolCallRef> = response
        .tool_calls
        .iter()
        .map(|(id, name, _)| ToolCallRef {
            tool_call_id: id.clone(),
            tool_name: name.clone(),
        })
        .collect();
    let (client, unknown): (Vec<_>, Vec<_>) = calls
        .into_iter()
        .partition(|c| call.dynamic_tools.contains(&c.tool_name));
    let mut step = vec![assistant];
    step.extend(unknown_tool_results(&unknown));
    let compaction = call.compaction;
    let waits_for_client = !client.is_empty();
    let finishes = response.tool_calls.is_empty() || compaction;
    task.transition("committing the model response", move |tx, _| {
        let step = step.clone();
        Box::pin(async move {
            tx.commit_step(step, compaction).await?;
            if waits_for_client {
                tx.enter_requires_action().await?;
            } else if finishes {
                tx.finish_turn().await?;
            }
            Ok(())
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(partial_messages(&[]).is_empty());
    }
}
