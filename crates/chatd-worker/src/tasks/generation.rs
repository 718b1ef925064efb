//! The generation task (`spec/chatd-architecture.md`, "Generation
//! goroutine").
//!
//! It reads the chat, its active history, model and MCP servers under the
//! fenced lock, lets [`plan`] decide the next step, and carries it out:
//! one transition for the endings of a turn, the router for calls an
//! earlier step left without results, or one model call. A model call
//! records a generation attempt (`RecordGenerationAttempt`), streams the
//! response into that attempt's episode, runs the step's tool calls while
//! their results stream into the same episode, and commits everything in
//! one bundle; a failed call is retried or ends the turn per [`retry`].
//!
//! [`retry`]: super::retry

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use chatd_core::{ChatError, ChatErrorKind};
use chatd_llm::{FinishReason, Provider, ResponseBuilder};
use chatd_store::{Chat, ChatMachine, ChatMessage, queries};
use chatd_tools::McpServerConfig;

use super::commit::{self, Next};
use super::plan::{HistoryMessage, ModelCall, Outstanding, Plan, PlanInput, plan};
use super::retry::{AfterFailure, after_failure, attempts_spent};
use super::stream::{OpenEpisode, stream_response};
use super::tools::{ToolCall, ToolRouter, ToolStep};
use super::{TaskContext, TaskResult};
use crate::fence::{FenceError, fenced_lock};
use crate::providers::{ResolvedModel, load_mcp_servers, resolve_model};

/// Plans the next step of the task's history and carries it out.
pub(super) async fn generation(task: &TaskContext) -> TaskResult<()> {
    let machine = task.machine();
    let loaded = task
        .retrying("reading the chat history", || load(task, &machine))
        .await?;
    let config = &task.ctx.config;
    let history: Vec<HistoryMessage<'_>> = loaded.history.iter().map(Into::into).collect();
    let next = plan(PlanInput {
        chat: &loaded.chat,
        history: &history,
        model: match &loaded.model {
            Ok(model) => Ok((&model.config, model.provider.clone())),
            Err(message) => Err(message),
        },
        max_steps_per_turn: config.max_steps_per_turn,
        generate_titles: config.generate_titles,
    });
    match next {
        Plan::FinishTurn => commit::finish_turn(task).await,
        Plan::EnterRequiresAction => commit::enter_requires_action(task).await,
        Plan::AnswerOutstanding(outstanding) => {
            answer_outstanding(task, &loaded, outstanding).await
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
            commit::finish_error(task, "ending the turn at the step limit", error).await
        }
        Plan::NoModel(message) => {
            let error = ChatError::new(ChatErrorKind::InvalidRequest, message, false);
            commit::finish_error(task, "ending the turn without a model", error).await
        }
        Plan::Call(call) => {
            // A compaction call offers no tools.
            let servers = if call.compaction {
                &[][..]
            } else {
                &loaded.mcp_servers
            };
            let router = ToolRouter::list(task, call.dynamic_tools.clone(), servers).await?;
            call_model(task, *call, &router).await
        }
    }
}

/// What the generation task reads under the fenced lock.
struct Loaded {
    chat: Chat,
    history: Vec<ChatMessage>,
    model: Result<ResolvedModel, String>,
    mcp_servers: Vec<McpServerConfig>,
}

/// Reads the chat, its active history, model and MCP servers consistently
/// under one fenced lock.
async fn load(task: &TaskContext, machine: &ChatMachine) -> Result<Loaded, FenceError> {
    let store_error = |e: sqlx::Error| FenceError::Store(e.into());
    let mut locked = fenced_lock(machine, &task.fence).await?;
    let chat = locked.chat.clone();
    let history = queries::messages::active_history(locked.conn(), task.chat_id)
        .await
        .map_err(store_error)?;
    let model = resolve_model(locked.conn(), &chat, task.ctx.providers.as_ref())
        .await
        .map_err(store_error)?;
    let mcp_servers = load_mcp_servers(locked.conn(), &chat.mcp_server_ids)
        .await
        .map_err(store_error)?;
    locked.finish().await?;
    Ok(Loaded {
        chat,
        history,
        model,
        mcp_servers,
    })
}

/// Answers calls left without results by an earlier step (MCP calls run
/// again, at least once; anything else gets an error result) and commits
/// them, entering requires-action in the same bundle when client-side calls
/// are pending too.
async fn answer_outstanding(
    task: &TaskContext,
    loaded: &Loaded,
    outstanding: Outstanding,
) -> TaskResult<()> {
    let dynamic = loaded.chat.dynamic_tool_names().into_iter().collect();
    let router = ToolRouter::list(task, dynamic, &loaded.mcp_servers).await?;
    let calls: Vec<ToolCall<'_>> = outstanding
        .calls
        .iter()
        .map(|(id, name, args)| ToolCall {
            id,
            name,
            args,
            cut_off: false,
        })
        .collect();
    let attempt = task.episode(loaded.chat.generation_attempt);
    let step = task
        .cancellable(router.run(task, attempt, &calls, None))
        .await?;
    let next = if outstanding.then_requires_action {
        Next::RequiresAction
    } else {
        Next::Generate
    };
    commit::commit_step(
        task,
        "answering outstanding tool calls",
        step.results,
        false,
        next,
    )
    .await
}

/// Calls the model until one attempt answers (then commits it) or the
/// attempts end the turn with an error.
async fn call_model(
    task: &TaskContext,
    mut call: ModelCall<Arc<dyn Provider>>,
    router: &ToolRouter,
) -> TaskResult<()> {
    let config = &task.ctx.config;
    call.request.tools.extend(router.mcp_specs(task.chat_id));
    loop {
        let attempt = task
            .transition("recording a generation attempt", |tx, _| {
                Box::pin(async move { tx.record_generation_attempt().await })
            })
            .await?;
        if let Some(error) = attempts_spent(attempt, config) {
            return commit::finish_error(task, "ending the turn after too many attempts", error)
                .await;
        }
        let episode = OpenEpisode::create(&task.ctx.parts, task.episode(attempt));
        let started = Instant::now();
        let outcome = task.cancellable(stream_response(&call, &episode)).await?;
        let err = match outcome {
            Ok(response) => {
                let runtime_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
                // Tool results stream into the same episode, so it stays open
                // until they are all in.
                let step = task
                    .cancellable(run_tools(task, router, &response, &episode))
                    .await?;
                drop(episode);
                return commit::commit_response(task, &call, response, step, runtime_ms).await;
            }
            Err(err) => err,
        };
        drop(episode);
        match after_failure(&err, attempt, config, chrono::Utc::now()) {
            AfterFailure::Retry { state, delay } => {
                tracing::info!(chat_id = %task.chat_id, attempt, ?delay, error = %err.message, "provider call failed; retrying");
                task.transition("recording the retry state", move |tx, _| {
                    let state = state.clone();
                    Box::pin(async move { tx.record_retry_state(state).await.map(|_| ()) })
                })
                .await?;
                task.sleep(delay).await?;
            }
            AfterFailure::Fail(error) => {
                tracing::info!(chat_id = %task.chat_id, attempt, error = %err.message, "provider call failed; ending the turn");
                return commit::finish_error(task, "ending the turn with an error", error).await;
            }
        }
    }
}

/// Routes the tool calls of `response`: a call is cut off when the stream
/// did not finish it, or when the response hit the output token limit and
/// its arguments do not parse.
async fn run_tools(
    task: &TaskContext,
    router: &ToolRouter,
    response: &ResponseBuilder,
    episode: &OpenEpisode<'_>,
) -> ToolStep {
    let unfinished: HashSet<String> = response
        .unfinished_tool_calls()
        .into_iter()
        .map(|c| c.id)
        .collect();
    let length = response.finish_reason() == Some(&FinishReason::Length);
    let made = response.tool_calls();
    let calls: Vec<ToolCall<'_>> = made
        .iter()
        .map(|c| ToolCall {
            id: &c.id,
            name: &c.name,
            args: &c.args,
            cut_off: unfinished.contains(&c.id) || (length && c.parsed_args().is_err()),
        })
        .collect();
    router
        .run(task, episode.episode, &calls, Some(episode))
        .await
}
