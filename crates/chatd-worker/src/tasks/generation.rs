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
//! Budgets (API.md "Limits, budgets and the token lifecycle"): before
//! every model call, answer or compaction, the owner's spend and tokens of
//! the period are read (with the history, and again before a retried
//! attempt); at or over a budget no call is made and the turn ends in
//! `error` with `kind: "usage_limit"` ([`usage_limit`]).
//!
//! [`retry`]: super::retry

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use chatd_core::{ChatError, ChatErrorKind, RequireApproval};
use chatd_llm::{AttachedFile, ErrorKind, FinishReason, Provider, ProviderError, ResponseBuilder};
use chatd_store::usage::Exceeded;
use chatd_store::{Chat, ChatMachine, ChatMessage};
use chatd_tools::McpServerConfig;
use uuid::Uuid;

use super::approval::Approvals;
use super::commit::{self, Next};
use super::compaction::{self, Mode};
use super::plan::{
    HistoryMessage, ModelCall, Outstanding, Plan, PlanInput, plan, step_limit_error,
};
use super::retry::{AfterFailure, after_failure, attempts_spent};
use super::stream::{OpenEpisode, stream_response};
use super::tools::{ToolCall, ToolRouter, ToolStep};
use super::{TaskContext, TaskResult};
use crate::fence::{FenceError, fenced_lock};
use crate::providers::{ResolvedModel, load_mcp_servers, resolve_model};
use crate::timeline::Hop;

/// Plans the next step of the task's history and carries it out.
pub(super) async fn generation(task: &TaskContext) -> TaskResult<()> {
    let machine = task.machine();
    let loaded = task
        .retrying("reading the chat history", || load(task, &machine))
        .await?;
    task.hop(Hop::HistoryLoaded);
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
        turn: loaded.turn.as_ref(),
    });
    if let (Plan::Call(_), Some(exceeded)) = (&next, &loaded.over_budget) {
        // Answers and compactions alike: no model call over budget.
        return Box::pin(finish_over_budget(task, exceeded)).await;
    }
    match next {
        Plan::FinishTurn => Box::pin(commit::finish_turn(task)).await,
        Plan::EnterRequiresAction => Box::pin(commit::enter_requires_action(task)).await,
        Plan::AnswerOutstanding(outstanding) => {
            Box::pin(answer_outstanding(task, &loaded, outstanding)).await
        }
        Plan::StepLimit => {
            let error = step_limit_error(config.max_steps_per_turn);
            Box::pin(commit::finish_error(
                task,
                "ending the turn at the step limit",
                error,
            ))
            .await
        }
        Plan::NoModel(message) => {
            let error = ChatError::new(ChatErrorKind::InvalidRequest, message, false);
            Box::pin(commit::finish_error(
                task,
                "ending the turn without a model",
                error,
            ))
            .await
        }
        Plan::Call(call) if call.compaction => {
            Box::pin(compact(task, &loaded, &call, Mode::Manual, None, true))
                .await
                .map(|_| ())
        }
        Plan::Call(call) => {
            let mut call = *call;
            call.request.files = loaded.files.clone();
            let mut router =
                ToolRouter::list(task, call.dynamic_tools.clone(), &loaded.mcp_servers)
                    .await?
                    .with_approvals(loaded.approvals(task))
                    .with_agents(&loaded.chat)
                    .with_workspace(loaded.workspace());
            if call.plan_mode {
                let read_only = super::plan::turn_tools(&loaded.chat, loaded.turn.as_ref())
                    .iter()
                    .filter(|t| t.read_only)
                    .map(|t| t.name.clone())
                    .collect();
                router = router.in_plan_mode(read_only);
            }
            call.request.tools.extend(router.mcp_specs(task.chat_id));
            call.request.tools.extend(router.agent_specs());
            call.request.tools.extend(router.workspace_specs());
            // API.md "Context management": compact before the call when the
            // prompt reached the threshold or does not fit with the answer.
            // Past the threshold with nothing to summarize yet (everything
            // is in the verbatim tail, or what is not would not shrink), a
            // prompt that fits is still sent; so is one whose last summary
            // came out no smaller, until the context grew (see
            // `SkippedCompactions`).
            let measure = compaction::measure(&call, &loaded.history);
            let keep = call.options.compact_recent_messages();
            let fits = !measure.does_not_fit();
            let mut skipped_attempts = 0;
            if measure.wants_compaction()
                && !(fits
                    && task.ctx.skipped_compactions.holds(
                        task.chat_id,
                        measure.tokens,
                        measure.limit,
                    ))
                && compaction::select(&loaded.history, keep, call.context_limit, Mode::Auto)
                    .is_some_and(|s| s.can_shrink())
            {
                let compacted =
                    Box::pin(compact(task, &loaded, &call, Mode::Auto, None, fits)).await?;
                if compacted == Compacted::Done {
                    return Ok(());
                }
                // The skipped summarization does not use up the answer's
                // retries.
                skipped_attempts = 1;
            }
            if measure.does_not_fit() {
                return Box::pin(commit::finish_error(
                    task,
                    "ending a turn whose prompt does not fit",
                    does_not_fit(&measure, None),
                ))
                .await;
            }
            call_model(task, &loaded, call, &router, measure, skipped_attempts).await
        }
    }
}

/// The `usage_limit` error of a used-up budget: not retryable, its message
/// names the budget and when it resets.
fn usage_limit(exceeded: &Exceeded) -> ChatError {
    ChatError::new(ChatErrorKind::UsageLimit, exceeded.message(), false)
}

/// Ends the turn with the [`usage_limit`] error of `exceeded`: no model
/// call is made.
async fn finish_over_budget(task: &TaskContext, exceeded: &Exceeded) -> TaskResult<()> {
    tracing::info!(chat_id = %task.chat_id, budget = ?exceeded.budget, limit = exceeded.limit, used = exceeded.used, "the owner's budget is used up; ending the turn");
    Box::pin(commit::finish_error(
        task,
        "ending the turn at the budget",
        usage_limit(exceeded),
    ))
    .await
}

/// Reads the budgets of the chat's owner `owner_id` again (before a
/// retried attempt: other chats of the owner may have spent meanwhile);
/// the budget at or over its limit, if any.
async fn over_budget(task: &TaskContext, owner_id: Uuid) -> TaskResult<Option<Exceeded>> {
    if !task.ctx.config.check_budgets {
        return Ok(None);
    }
    let pool = task.ctx.store.pool();
    let owner = task
        .retrying("reading the owner's budgets", || async {
            chatd_store::usage::of_user(pool, owner_id)
                .await
                .map_err(|e| FenceError::Store(e.into()))
        })
        .await?;
    Ok(owner.and_then(|o| o.exceeded(&task.ctx.config.limits)))
}

/// The `context_length` error of a prompt that does not fit `measure`'s
/// window (after the provider's `cause`, if it said so).
fn does_not_fit(measure: &compaction::Measure, cause: Option<&ProviderError>) -> ChatError {
    let mut error = ChatError::new(
        ChatErrorKind::ContextLength,
        format!(
            "The conversation no longer fits the model's context of {} tokens (about {} tokens \
             with room for the answer), and nothing more can be compacted: compact or clear the \
             context, edit an earlier message, or use a model with a larger window.",
            measure.limit,
            measure.tokens + measure.reserve
        ),
        false,
    );
    if let Some(cause) = cause {
        error = error.with_detail(cause.message.clone());
    }
    error
}

/// Unusable summaries (empty, or not smaller than what they replace) after
/// which a compaction gives up even with retries left: the same input
/// tends to give the same answer.
const MAX_INVALID_SUMMARIES: u32 = 3;

/// How [`compact`] ended when it did not end the task's step itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compacted {
    /// A summary was committed, or the turn or request ended: the step is
    /// done.
    Done,
    /// An automatic compaction whose summary was not smaller than what it
    /// replaces: nothing was committed and the prompt, which fits, is sent
    /// as it is.
    Skipped,
}

/// Compacts the history (see [`compaction`]) and commits the summary in one
/// `CommitStep`, after which the turn goes on (the next generation plans
/// from the compacted history). Each summarization attempt is a generation
/// attempt: failures are retried like model calls, and when they run out
/// (or after [`MAX_INVALID_SUMMARIES`] unusable summaries) the turn ends
/// (`context_length` when the summaries were unusable).
///
/// Only when it shrinks (API.md "Context management"; docs/operations.md
/// "Context management"): a selection no larger than the smallest summary
/// ([`compaction::Selection::can_shrink`]) is never sent to the model, and
/// a summary that is not smaller than what it replaces is never committed.
/// - Manual (`POST /compact`, which already refuses such a chat with
///   `409`): nothing is committed; the request is dropped and the turn
///   ends as after a compaction (`FinishTurn`), with no message added.
/// - Automatic while the prompt still fits (`fits`): nothing is committed,
///   the chat is remembered ([`crate::context::SkippedCompactions`]) so
///   that the next calls do not summarize again until the context grew,
///   and [`Compacted::Skipped`] sends the prompt as it is.
/// - Automatic when the prompt does not fit, and overflow: a failed
///   attempt, retried, then `context_length`; with nothing that can shrink,
///   `context_length` at once.
async fn compact(
    task: &TaskContext,
    loaded: &Loaded,
    call: &ModelCall<Arc<dyn Provider>>,
    mode: Mode,
    cause: Option<ProviderError>,
    fits: bool,
) -> TaskResult<Compacted> {
    let config = &task.ctx.config;
    let keep = call.options.compact_recent_messages();
    let selection = compaction::select(&loaded.history, keep, call.context_limit, mode)
        .filter(compaction::Selection::can_shrink);
    let Some(selection) = selection else {
        if mode == Mode::Manual {
            tracing::info!(chat_id = %task.chat_id, "nothing to compact: a summary would not be smaller; dropping the request");
            Box::pin(commit::finish_turn(task)).await?;
            return Ok(Compacted::Done);
        }
        let measure = compaction::measure(call, &loaded.history);
        let error = does_not_fit(&measure, cause.as_ref());
        Box::pin(commit::finish_error(
            task,
            "ending a turn with nothing to compact",
            error,
        ))
        .await?;
        return Ok(Compacted::Done);
    };
    let mut invalid_summary = None;
    let mut invalid_summaries = 0;
    let mut retried = false;
    loop {
        // The first attempt was checked with the history.
        if retried && let Some(exceeded) = over_budget(task, loaded.chat.owner_id).await? {
            Box::pin(finish_over_budget(task, &exceeded)).await?;
            return Ok(Compacted::Done);
        }
        retried = true;
        let attempt = task
            .transition("recording a compaction attempt", |tx, _| {
                Box::pin(async move { tx.record_generation_attempt().await })
            })
            .await?;
        if let Some(error) = attempts_spent(attempt, config) {
            let error = invalid_summary.take().unwrap_or(error);
            Box::pin(commit::finish_error(
                task,
                "ending the turn after too many compaction attempts",
                error,
            ))
            .await?;
            return Ok(Compacted::Done);
        }
        let started = Instant::now();
        let err = match task
            .cancellable(compaction::summarize(call, &selection))
            .await?
        {
            Ok(summary) => {
                let runtime_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
                let tokens_after = compaction::summary_tokens_estimate(&summary.text);
                tracing::info!(chat_id = %task.chat_id, ?mode, summarized = selection.summarized.len(), kept = selection.leading.len() + selection.tail.len(), tokens_before = selection.tokens_before(), tokens_after, calls = summary.calls, runtime_ms, "compacted the history");
                task.ctx.skipped_compactions.forget(task.chat_id);
                let rows = compaction::messages(call, &selection, &summary, runtime_ms);
                commit::commit_step(
                    task,
                    "committing a compaction",
                    rows,
                    mode == Mode::Manual,
                    Next::Generate,
                )
                .await?;
                return Ok(Compacted::Done);
            }
            Err(err) => err,
        };
        if compaction::is_not_smaller(&err)
            && (mode == Mode::Manual || (mode == Mode::Auto && fits))
        {
            tracing::info!(chat_id = %task.chat_id, ?mode, error = %err.message, "the summary would not make the context smaller; not compacting");
            if mode == Mode::Manual {
                Box::pin(commit::finish_turn(task)).await?;
                return Ok(Compacted::Done);
            }
            let measure = compaction::measure(call, &loaded.history);
            task.ctx
                .skipped_compactions
                .remember(task.chat_id, measure.tokens);
            return Ok(Compacted::Skipped);
        }
        if err.message.starts_with("the compaction summary") {
            invalid_summaries += 1;
            invalid_summary = Some(
                ChatError::new(
                    ChatErrorKind::ContextLength,
                    "The history could not be compacted: the model's summaries were unusable.",
                    false,
                )
                .with_detail(err.message.clone()),
            );
        }
        let failure = if invalid_summaries >= MAX_INVALID_SUMMARIES {
            AfterFailure::Fail(err.to_chat_error())
        } else {
            after_failure(&err, attempt, config, chrono::Utc::now())
        };
        match failure {
            AfterFailure::Retry { state, delay } => {
                tracing::info!(chat_id = %task.chat_id, attempt, ?delay, error = %err.message, "compaction failed; retrying");
                Box::pin(back_off(task, state, delay)).await?;
            }
            AfterFailure::Fail(error) => {
                tracing::info!(chat_id = %task.chat_id, attempt, error = %err.message, "compaction failed; ending the turn");
                let error = invalid_summary.take().unwrap_or(error);
                Box::pin(commit::finish_error(
                    task,
                    "ending the turn after a failed compaction",
                    error,
                ))
                .await?;
                return Ok(Compacted::Done);
            }
        }
    }
}

/// What the generation task reads under the fenced lock.
struct Loaded {
    chat: Chat,
    history: Vec<ChatMessage>,
    model: Result<ResolvedModel, String>,
    mcp_servers: Vec<McpServerConfig>,
    /// `require_approval` of the usable servers among `mcp_servers`, by slug.
    approval_policies: HashMap<String, RequireApproval>,
    /// The contents of the history since the last user message, client-only
    /// rows included (`history` leaves them out): where approvals are.
    tail: Vec<Vec<chatd_core::MessagePart>>,
    /// The files the history's user messages attach, with as many of their
    /// bytes as the provider projection uses (API.md "Files").
    files: BTreeMap<Uuid, AttachedFile>,
    /// The owner's budget that the period's usage has reached, if any (read
    /// with the history: a model call is not made then).
    over_budget: Option<Exceeded>,
    /// The options of the OpenAI response that started the turn, if one
    /// did (API.md "Compatible protocols").
    turn: Option<chatd_store::responses::TurnOptions>,
}

impl Loaded {
    /// Which MCP and workspace calls wait for approval in a step planned
    /// from this.
    fn approvals(&self, task: &TaskContext) -> Approvals {
        let approvals = Approvals::new(
            self.approval_policies.clone(),
            self.tail.iter().map(Vec::as_slice),
        );
        if self.workspace() {
            approvals.with_workspace(task.ctx.workspaces.config().approval)
        } else {
            approvals
        }
    }

    /// Whether the chat has a workspace: created with `workspace`, or its
    /// model config sets `options.workspace` (API.md "Workspaces and
    /// provider-hosted tools").
    fn workspace(&self) -> bool {
        workspace_enabled(&self.chat, self.model.as_ref().ok())
    }
}

/// Whether `chat` (with its resolved model, if any) has a workspace.
fn workspace_enabled(chat: &Chat, model: Option<&ResolvedModel>) -> bool {
    chat.workspace || model.is_some_and(|m| m.config.options.workspace == Some(true))
}

/// Reads the chat, its active history, model, MCP servers, attached files
/// and its owner's budgets consistently under one fenced lock.
async fn load(task: &TaskContext, machine: &ChatMachine) -> Result<Loaded, FenceError> {
    let store_error = |e: sqlx::Error| FenceError::Store(e.into());
    let mut locked = fenced_lock(machine, &task.fence).await?;
    let chat = locked.chat.clone();
    let history = chatd_store::messages::active_history(locked.conn(), task.chat_id)
        .await
        .map_err(store_error)?;
    let turn = chatd_store::responses::turn_options(locked.conn(), task.chat_id)
        .await
        .map_err(store_error)?;
    let model = resolve_model(
        locked.conn(),
        task.ctx.store.secrets(),
        &chat,
        task.ctx.providers.as_ref(),
    )
    .await
    .map_err(store_error)?;
    let (mcp_servers, approval_policies) = load_mcp_servers(
        locked.conn(),
        task.ctx.store.secrets(),
        &chat.mcp_server_ids,
    )
    .await
    .map_err(store_error)?;
    let workspace_waits = workspace_enabled(&chat, model.as_ref().ok())
        && task.ctx.workspaces.config().approval != crate::workspace::WorkspaceApproval::Never;
    let tail = if workspace_waits
        || approval_policies
            .values()
            .any(|p| *p != RequireApproval::Never)
    {
        chatd_store::messages::tail_contents(locked.conn(), task.chat_id)
            .await
            .map_err(store_error)?
    } else {
        Vec::new()
    };
    let file_ids: Vec<Uuid> = history
        .iter()
        .filter(|m| m.role == chatd_core::ChatRole::User)
        .flat_map(|m| chatd_store::files::file_ids(&m.content.0))
        .collect();
    let files = if file_ids.is_empty() {
        BTreeMap::new()
    } else {
        chatd_store::files::linked_contents(
            locked.conn(),
            task.chat_id,
            &file_ids,
            |media_type, size| {
                chatd_llm::projection::file_bytes_wanted(media_type, size.max(0) as u64)
            },
        )
        .await
        .map_err(store_error)?
        .into_iter()
        .map(|f| {
            let file = AttachedFile {
                name: f.name,
                media_type: f.media_type,
                size: f.size.max(0) as u64,
                data: f.data.into(),
            };
            (f.id, file)
        })
        .collect()
    };
    // One indexed read (the owner's row and its ledger rows of the period),
    // in the transaction that is open anyway.
    let over_budget = if task.ctx.config.check_budgets {
        chatd_store::usage::of_user(locked.conn(), chat.owner_id)
            .await
            .map_err(store_error)?
            .and_then(|owner| owner.exceeded(&task.ctx.config.limits))
    } else {
        None
    };
    locked.finish().await?;
    Ok(Loaded {
        chat,
        history,
        model,
        mcp_servers,
        approval_policies,
        tail,
        files,
        over_budget,
        turn,
    })
}

/// Answers calls left without results by an earlier step (MCP calls run
/// again, at least once; approved calls run now, [`super::approval`];
/// anything else gets an error result) and commits them, entering
/// requires-action in the same bundle when client-side calls or calls
/// waiting for approval are pending too (only that when nothing else was
/// answered).
async fn answer_outstanding(
    task: &TaskContext,
    loaded: &Loaded,
    outstanding: Outstanding,
) -> TaskResult<()> {
    let dynamic = super::plan::turn_tools(&loaded.chat, loaded.turn.as_ref())
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let router = ToolRouter::list(task, dynamic, &loaded.mcp_servers)
        .await?
        .with_approvals(loaded.approvals(task))
        .with_agents(&loaded.chat)
        .with_workspace(loaded.workspace());
    let calls: Vec<ToolCall<'_>> = outstanding
        .calls
        .iter()
        .map(|(id, name, args)| ToolCall {
            id,
            name,
            args,
            cut_off: false,
            made_at: Some(call_committed_at(&loaded.history, id)),
        })
        .collect();
    let attempt = task.episode(loaded.chat.generation_attempt);
    let step = task
        .cancellable(router.run(task, attempt, &calls, None))
        .await??;
    let next = if outstanding.then_requires_action || step.waits_for_client {
        Next::RequiresAction
    } else {
        Next::Generate
    };
    if step.results.is_empty() && step.spawns.is_empty() && step.workspace.is_empty() {
        // Every call waits for the client (a call needing approval that
        // nobody decided on yet): a step of no rows cannot be committed.
        return Box::pin(commit::enter_requires_action(task)).await;
    }
    commit::commit_step_spawning(
        task,
        "answering outstanding tool calls",
        step.results,
        step.spawns,
        step.workspace,
        next,
    )
    .await
}

/// When the call `tool_call_id` of the active history was committed (its
/// assistant message's `created_at`, database time); now if it is not
/// found.
fn call_committed_at(history: &[ChatMessage], tool_call_id: &str) -> chrono::DateTime<chrono::Utc> {
    history
        .iter()
        .rev()
        .find(|m| {
            m.content.0.iter().any(|p| {
                matches!(p, chatd_core::MessagePart::ToolCall { tool_call_id: id, .. } if id == tool_call_id)
            })
        })
        .map_or_else(chrono::Utc::now, |m| m.created_at)
}

/// Calls the model until one attempt answers (then commits it) or the
/// attempts end the turn with an error. A provider that says the prompt is
/// too long, or an empty stream after a prompt near the window (`measure`),
/// is a context overflow: compacted with a short tail when automatic
/// compaction is on, else the turn ends with `context_length` at once.
/// `skipped_attempts` generation attempts of this history went to an
/// automatic compaction that was skipped: they do not count against the
/// answer's retries.
async fn call_model(
    task: &TaskContext,
    loaded: &Loaded,
    call: ModelCall<Arc<dyn Provider>>,
    router: &ToolRouter,
    measure: compaction::Measure,
    skipped_attempts: i64,
) -> TaskResult<()> {
    let config = &task.ctx.config;
    let mut retried = false;
    loop {
        // The first attempt was checked with the history.
        if retried && let Some(exceeded) = over_budget(task, loaded.chat.owner_id).await? {
            return Box::pin(finish_over_budget(task, &exceeded)).await;
        }
        retried = true;
        // Boxed: only the stream's own state stays in this future while
        // the model answers.
        let attempt = Box::pin(task.transition("recording a generation attempt", |tx, _| {
            Box::pin(async move { tx.record_generation_attempt().await })
        }))
        .await?;
        if let Some(error) = attempts_spent(attempt - skipped_attempts, config) {
            return Box::pin(commit::finish_error(
                task,
                "ending the turn after too many attempts",
                error,
            ))
            .await;
        }
        task.hop(Hop::AttemptRecorded);
        let episode = OpenEpisode::create(&task.ctx.parts, task.episode(attempt));
        let started = Instant::now();
        let outcome = task
            .cancellable(stream_response(&call, &episode, &config.timeline))
            .await?;
        let err = match outcome {
            Ok(response) => {
                task.hop(Hop::ResponseDone);
                let runtime_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
                // Tool results stream into the same episode, so it stays open
                // until they are all in.
                let step = task
                    .cancellable(run_tools(task, router, &response, &episode))
                    .await??;
                drop(episode);
                return Box::pin(commit::commit_response(
                    task, &call, response, step, runtime_ms,
                ))
                .await;
            }
            Err(err) => err,
        };
        drop(episode);
        let overflow = err.kind == ErrorKind::ContextLength
            || (err.message == chatd_llm::sse::EMPTY_STREAM && measure.near_window());
        if overflow {
            tracing::info!(chat_id = %task.chat_id, attempt, error = %err.message, "the prompt is too long for the model");
            if measure.threshold.is_some() {
                return Box::pin(compact(
                    task,
                    loaded,
                    &call,
                    Mode::Overflow,
                    Some(err),
                    false,
                ))
                .await
                .map(|_| ());
            }
            let error = does_not_fit(&measure, Some(&err));
            return Box::pin(commit::finish_error(
                task,
                "ending a turn whose prompt is too long",
                error,
            ))
            .await;
        }
        match after_failure(&err, attempt - skipped_attempts, config, chrono::Utc::now()) {
            AfterFailure::Retry { state, delay } => {
                tracing::info!(chat_id = %task.chat_id, attempt, ?delay, error = %err.message, "provider call failed; retrying");
                Box::pin(back_off(task, state, delay)).await?;
            }
            AfterFailure::Fail(error) => {
                tracing::info!(chat_id = %task.chat_id, attempt, error = %err.message, "provider call failed; ending the turn");
                return Box::pin(commit::finish_error(
                    task,
                    "ending the turn with an error",
                    error,
                ))
                .await;
            }
        }
    }
}

/// `RecordRetryState(state)` for clients, then waits `delay` (unless the
/// task is cancelled first): the back-off before a retried model or
/// summarization call.
async fn back_off(
    task: &TaskContext,
    state: chatd_core::RetryState,
    delay: std::time::Duration,
) -> TaskResult<()> {
    task.transition("recording the retry state", move |tx, _| {
        let state = state.clone();
        Box::pin(async move { tx.record_retry_state(state).await.map(|_| ()) })
    })
    .await?;
    task.sleep(delay).await
}

/// Routes the tool calls of `response`: a call is cut off when the stream
/// did not finish it, or when the response hit the output token limit and
/// its arguments do not parse.
async fn run_tools(
    task: &TaskContext,
    router: &ToolRouter,
    response: &ResponseBuilder,
    episode: &OpenEpisode<'_>,
) -> TaskResult<ToolStep> {
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
            made_at: None,
        })
        .collect();
    router
        .run(task, episode.episode, &calls, Some(episode))
        .await
}
