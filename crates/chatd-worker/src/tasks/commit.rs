//! The commit path of the generation task (`spec/chatd-architecture.md`,
//! "Generation goroutine": `CommitStep`, `FinishTurn`, `FinishError`,
//! `EnterRequiresAction`; "Parallel tool call results must be inserted in
//! bulk … in a single `CommitStep`").
//!
//! A step commits its messages (the assistant message and every tool result
//! of the step) in one `CommitStep`, followed in the same bundle by the next
//! transition, so `history_version` advances once per step. A step after
//! which the model is called again takes the waiting steer messages into
//! history in the same `CommitStep` (`ChatTx::commit_step_steering`). The other
//! endings of a turn are one transition each. Every bundle is fenced and
//! retried by [`TaskContext::transition`].

use std::sync::Arc;

use chatd_core::{ChatError, ChatErrorKind, FinishReason as MessageFinishReason, MessagePart};
use chatd_llm::{FinishReason, Provider, ResponseBuilder};
use chatd_store::NewMessage;
use chatd_store::workspaces::WorkspaceChange;

use super::agents::{Spawn, create_spawned};
use super::plan::ModelCall;
use super::tools::ToolStep;
use super::{Exit, TaskContext, TaskResult, title};

/// What follows a committed step in the same bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// The turn is done: `FinishTurn`.
    FinishTurn,
    /// Client-side calls are pending: `EnterRequiresAction`.
    RequiresAction,
    /// Nothing: the new history starts the next generation.
    Generate,
}

/// Commits one model response of `call`: its message and `step`'s tool
/// results in one `CommitStep`, then finishes the turn (no calls) or waits
/// for client-side results. Then, for a chat's first
/// text answer, starts the title generation in the background.
pub(super) async fn commit_response(
    task: &TaskContext,
    call: &ModelCall<Arc<dyn Provider>>,
    response: ResponseBuilder,
    step: ToolStep,
    runtime_ms: i64,
) -> TaskResult<()> {
    let finishes = response.tool_calls().is_empty();
    // A deferred call (`wait_agent`) is answered by the next step, which
    // enters requires-action afterwards if client calls are pending too.
    let next = if step.deferred {
        Next::Generate
    } else if step.waits_for_client {
        Next::RequiresAction
    } else if finishes {
        Next::FinishTurn
    } else {
        Next::Generate
    };
    let text = response.text();
    let mut messages = vec![response_message(call, &response, runtime_ms)];
    messages.extend(step.results);
    commit_step_spawning(
        task,
        "committing the model response",
        messages,
        step.spawns,
        step.workspace,
        next,
    )
    .await?;
    task.hop(crate::timeline::Hop::StepCommitted);
    if call.wants_title && finishes && !text.trim().is_empty() {
        title::after_first_answer(task, call, text);
    }
    Ok(())
}

/// Commits `messages` in one `CommitStep` (`compaction`: they summarize the
/// history) followed by `next`.
///
/// A step the database refuses for good (a permanent error, not a
/// transient one, which [`TaskContext::transition`] retries) would be
/// refused again by every retry and leave the chat `running` with no task:
/// the turn ends with `FinishError` instead, a non-retryable `generic` error
/// whose detail is the database's reason (issue 14: no input may wedge a
/// chat).
pub(super) async fn commit_step(
    task: &TaskContext,
    what: &str,
    messages: Vec<NewMessage>,
    compaction: bool,
    next: Next,
) -> TaskResult<()> {
    commit_step_with(
        task,
        what,
        messages,
        compaction,
        Vec::new(),
        Vec::new(),
        next,
    )
    .await
}

/// [`commit_step`] of a step's tool results that also creates the
/// children of its `spawn_agent` calls (`Create` in the same transaction,
/// [`chatd_store::ChatTx::create_child`], API.md "Sub-agents and plan
/// mode"): the children exist exactly when the results do; and writes what
/// its workspace calls changed ([`chatd_store::ChatTx::write_workspace`],
/// API.md "Workspaces and provider-hosted tools"): the files change
/// exactly when the results are stored.
pub(super) async fn commit_step_spawning(
    task: &TaskContext,
    what: &str,
    messages: Vec<NewMessage>,
    spawns: Vec<Spawn>,
    workspace: Vec<WorkspaceChange>,
    next: Next,
) -> TaskResult<()> {
    commit_step_with(task, what, messages, false, spawns, workspace, next).await
}

async fn commit_step_with(
    task: &TaskContext,
    what: &str,
    messages: Vec<NewMessage>,
    compaction: bool,
    spawns: Vec<Spawn>,
    workspace: Vec<WorkspaceChange>,
    next: Next,
) -> TaskResult<()> {
    match try_commit_step(task, what, messages, compaction, spawns, workspace, next).await {
        Err(Exit::Rejected(reason)) => {
            tracing::warn!(chat_id = %task.chat_id, %reason, "the step cannot be stored; ending the turn with an error");
            let error = ChatError::new(
                ChatErrorKind::Generic,
                "The answer could not be stored.",
                false,
            )
            .with_detail(reason);
            finish_error(task, "ending a turn whose step cannot be stored", error).await
        }
        other => other,
    }
}

async fn try_commit_step(
    task: &TaskContext,
    what: &str,
    messages: Vec<NewMessage>,
    compaction: bool,
    spawns: Vec<Spawn>,
    workspace: Vec<WorkspaceChange>,
    next: Next,
) -> TaskResult<()> {
    let max_children = task.ctx.config.limits.max_subagents_per_chat;
    let max_workspace_bytes = task.ctx.workspaces.config().max_bytes;
    let default_quota = task.ctx.config.limits.max_storage_bytes;
    let workspace = Arc::new(workspace);
    task.transition(what, move |tx, _| {
        let mut messages = messages.clone();
        let spawns = spawns.clone();
        let workspace = workspace.clone();
        Box::pin(async move {
            // The workspace first: a sub-agent spawned by this step starts
            // from a copy of it with the step's changes.
            tx.write_workspace(&workspace, max_workspace_bytes, default_quota)
                .await?;
            for spawn in spawns {
                create_spawned(tx, spawn, max_children, default_quota, &mut messages).await?;
            }
            match next {
                Next::FinishTurn => {
                    tx.commit_step(messages, compaction).await?;
                    tx.finish_turn().await.map(|_| ())
                }
                Next::RequiresAction => {
                    tx.commit_step(messages, compaction).await?;
                    tx.enter_requires_action().await.map(|_| ())
                }
                // The turn goes on: waiting steer messages join the step
                // (API.md "Busy behaviours and the queue"), so the next
                // model call reads them.
                Next::Generate => tx
                    .commit_step_steering(messages, compaction)
                    .await
                    .map(|_| ()),
            }
        })
    })
    .await
}

/// `FinishTurn`: nothing left to do for the current history.
pub(super) async fn finish_turn(task: &TaskContext) -> TaskResult<()> {
    task.transition("finishing the turn", |tx, _| {
        Box::pin(async move { tx.finish_turn().await.map(|_| ()) })
    })
    .await
}

/// `EnterRequiresAction`: wait for client-side results.
pub(super) async fn enter_requires_action(task: &TaskContext) -> TaskResult<()> {
    task.transition("entering requires-action", |tx, _| {
        Box::pin(async move { tx.enter_requires_action().await.map(|_| ()) })
    })
    .await
}

/// `FinishError(error)`: the turn ends with `error`; `what` names the
/// reason in logs.
pub(super) async fn finish_error(
    task: &TaskContext,
    what: &str,
    error: ChatError,
) -> TaskResult<()> {
    task.transition(what, move |tx, _| {
        let error = error.clone();
        Box::pin(async move { tx.finish_error(error).await })
    })
    .await
}

/// The message a response of `call` is stored as: the assistant message
/// (an empty answer is still an answer), with the
/// model config, usage, cost, context limit and `runtime_ms` (ms).
fn response_message<P>(
    call: &ModelCall<P>,
    response: &ResponseBuilder,
    runtime_ms: i64,
) -> NewMessage {
    let mut content = response.parts();
    if !content
        .iter()
        .any(|p| matches!(p, MessagePart::Text { .. } | MessagePart::ToolCall { .. }))
    {
        content.push(MessagePart::text(""));
    }
    let mut message = NewMessage::assistant(content);
    message.finish_reason = response.finish_reason().and_then(message_finish_reason);
    let usage = response.usage();
    message.model_config_id = Some(call.model_config_id);
    message.usage = usage;
    message.context_limit = Some(call.context_limit);
    message.runtime_ms = Some(runtime_ms);
    message.total_cost_micros = usage.and_then(|u| call.options.cost_micros(&u));
    message
}

/// The stored finish reason of an assistant message for the provider's
/// reason; a reason chatd does not know (`Other`) is stored as unknown.
fn message_finish_reason(reason: &FinishReason) -> Option<MessageFinishReason> {
    match reason {
        // Still paused past the provider's continuations: what came is
        // the answer.
        FinishReason::Stop | FinishReason::Paused => Some(MessageFinishReason::Stop),
        FinishReason::Length => Some(MessageFinishReason::Length),
        FinishReason::ToolCalls => Some(MessageFinishReason::ToolCalls),
        FinishReason::ContentFilter => Some(MessageFinishReason::ContentFilter),
        FinishReason::Other(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_finish_reasons_map_to_stored_ones_and_unknown_ones_to_none() {
        let cases = [
            (FinishReason::Stop, Some(MessageFinishReason::Stop)),
            (FinishReason::Paused, Some(MessageFinishReason::Stop)),
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
