//! The next step of a generation task (`spec/chatd-architecture.md`,
//! "Generation goroutine": it "inspects the chat's message history, and
//! decides what's the next step to take").
//!
//! [`plan`] is pure: the chat row and its active history (read by the
//! generation task under the fenced lock), the chat's model and two tunables
//! in, one [`Plan`] out; no I/O, no clock. Outside compaction the history
//! since the last user message decides, in this order:
//!
//! 1. no message but system ones: finish the turn;
//! 2. calls without results that this worker answers itself (MCP or
//!    unknown tools, approved calls among them): answer them, then wait
//!    for the client when dynamic calls are pending too (the router leaves
//!    an MCP call that still waits for approval pending as well:
//!    [`super::approval`]);
//! 3. only dynamic (client-side) calls pending: enter requires-action;
//! 4. the model answered last, or the user interrupted the tool calls:
//!    finish the turn;
//! 5. the turn used its step budget (`--max-steps-per-turn`, API.md
//!    "Limits, budgets and the token lifecycle"): stop with the
//!    `usage_limit` error of [`step_limit_error`];
//! 6. otherwise call the model (or fail the turn when the chat has none).
//!
//! A requested compaction skips 1 to 5: the history is compacted
//! ([`super::compaction`]).
//!
//! Plan mode (`chats.plan_mode = 'plan'`, API.md "Sub-agents and plan
//! mode"): the call carries [`PLAN_MODE_INSTRUCTION`] as a system
//! instruction and offers only the dynamic tools the client marked
//! read-only (MCP tools are filtered the same way once listed:
//! [`super::tools::ToolRouter`]). The chat row is read afresh for every
//! step, so switching plan mode on or off takes effect at the next model
//! call.

use std::collections::HashSet;

use chatd_core::{
    ChatError, ChatErrorKind, ChatRole, DynamicTool, INTERRUPTED_TOOL_RESULT, MessagePart,
    ModelOptions, Visibility, outstanding_tool_calls,
};
use chatd_llm::{ModelRequest, RequestMessage, ToolSpec};
use chatd_store::model_configs::ModelConfigDef;
use chatd_store::{Chat, ChatMessage, DEFAULT_CHAT_TITLE};
use serde_json::json;
use uuid::Uuid;

use crate::providers::resolve_reasoning_effort;

/// The system instruction of a model call in plan mode.
pub const PLAN_MODE_INSTRUCTION: &str = "You are in plan mode. Do not make changes: research the \
task with the read-only tools you have, then answer with a concrete, step-by-step plan for \
the user to review. Say what you would change and why, and what you still need to know. The \
user leaves plan mode when they want the plan carried out.";

/// What [`plan`] decides from. `P` is the handle of the chat's provider,
/// passed through untouched into [`ModelCall::provider`].
pub(super) struct PlanInput<'a, P> {
    /// The chat row.
    pub(super) chat: &'a Chat,
    /// The active history in id order; messages only users see are skipped.
    pub(super) history: &'a [HistoryMessage<'a>],
    /// The chat's model config and provider, or why it has none (a message
    /// for the user).
    pub(super) model: Result<(&'a ModelConfigDef, P), &'a str>,
    /// Model responses a turn may take (`WorkerConfig::max_steps_per_turn`).
    pub(super) max_steps_per_turn: usize,
    /// Whether first answers get a title (`WorkerConfig::generate_titles`).
    pub(super) generate_titles: bool,
    /// The options of the OpenAI response that started this turn, if one
    /// did (API.md "Compatible protocols": `instructions` and `tools` apply
    /// to that response only, `max_output_tokens` caps each model call).
    pub(super) turn: Option<&'a chatd_store::responses::TurnOptions>,
}

/// The client tools of a turn: the response's own when the turn was started
/// by an OpenAI response that sent `tools`, else the chat's.
pub(super) fn turn_tools<'a>(
    chat: &'a Chat,
    turn: Option<&'a chatd_store::responses::TurnOptions>,
) -> &'a [DynamicTool] {
    match turn.and_then(|t| t.tools.as_deref()) {
        Some(tools) => tools,
        None => &chat.dynamic_tools,
    }
}

/// One message of the active history, as [`plan`] reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct HistoryMessage<'a> {
    pub(super) role: ChatRole,
    pub(super) visibility: Visibility,
    pub(super) parts: &'a [MessagePart],
}

impl<'a> From<&'a ChatMessage> for HistoryMessage<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        Self {
            role: message.role,
            visibility: message.visibility,
            parts: &message.content.0,
        }
    }
}

/// What the generation task does next for the current history.
#[derive(Debug)]
pub(super) enum Plan<P> {
    /// Nothing left to do: finish the turn (promoting the queue head).
    FinishTurn,
    /// Pending client-side calls: wait for their results.
    EnterRequiresAction,
    /// Calls without results that this worker answers itself.
    AnswerOutstanding(Outstanding),
    /// The turn has used its step budget: end it with
    /// [`step_limit_error`].
    StepLimit,
    /// No usable model: the message says why.
    NoModel(String),
    /// Call the model.
    Call(Box<ModelCall<P>>),
}

/// Calls of an earlier step still without results that are not dynamic
/// (MCP calls are run again, anything else gets an error result).
#[derive(Debug, PartialEq)]
pub(super) struct Outstanding {
    /// `(id, name, args)` in call order; `args` is empty when the call is
    /// not in the history since the last user message.
    pub(super) calls: Vec<(String, String, String)>,
    /// Client-side calls are pending too: enter requires-action after
    /// answering.
    pub(super) then_requires_action: bool,
}

/// One model call of the turn.
#[derive(Debug)]
pub(super) struct ModelCall<P> {
    /// The request: the model-visible history,
    /// the dynamic tools (MCP tools are added once listed), the model's
    /// options.
    pub(super) request: ModelRequest,
    /// The chat's provider.
    pub(super) provider: P,
    /// Stored on the answer.
    pub(super) model_config_id: Uuid,
    /// The model's context window, in tokens.
    pub(super) context_limit: i64,
    /// Percent of the window at which the prompt is compacted first
    /// (0: never automatically).
    pub(super) compression_threshold: i32,
    /// The model config's options (cost of the answer).
    pub(super) options: ModelOptions,
    /// Names of the chat's dynamic (client-side) tools.
    pub(super) dynamic_tools: HashSet<String>,
    /// The chat is in plan mode: only read-only tools are offered and run.
    pub(super) plan_mode: bool,
    /// A manual compaction was requested (`RequestCompaction`): the
    /// history is compacted instead of answered ([`super::compaction`]).
    pub(super) compaction: bool,
    /// Generate a title once this answer is committed (spec-free extra:
    /// issue "Title"): no text answer yet and the default title.
    pub(super) wants_title: bool,
}

/// The error a turn ends with at [`Plan::StepLimit`] (API.md "Limits,
/// budgets and the token lifecycle": `--max-steps-per-turn`): kind
/// `usage_limit`, not retryable, and a message naming the limit of
/// `max_steps_per_turn` model calls and what to do next.
pub(super) fn step_limit_error(max_steps_per_turn: usize) -> ChatError {
    ChatError::new(
        ChatErrorKind::UsageLimit,
        format!(
            "The turn stopped: it reached the limit of {max_steps_per_turn} model calls in one \
             turn (--max-steps-per-turn) without finishing. Send a message to continue."
        ),
        false,
    )
}

/// Decides the next step; see the module doc for the order.
pub(super) fn plan<P>(input: PlanInput<'_, P>) -> Plan<P> {
    let chat = input.chat;
    let history: Vec<&HistoryMessage<'_>> = input
        .history
        .iter()
        .filter(|m| m.visibility != Visibility::User)
        .collect();
    let client_tools = turn_tools(chat, input.turn);
    let dynamic: HashSet<String> = client_tools.iter().map(|t| t.name.clone()).collect();
    let compaction = chat.compaction_requested_at.is_some();
    if !compaction
        && let Some(plan) = plan_without_call(&history, &dynamic, input.max_steps_per_turn)
    {
        return plan;
    }
    let (model, provider) = match input.model {
        Ok(model) => model,
        Err(message) => return Plan::NoModel(message.to_owned()),
    };
    let answered_before = history.iter().any(|m| {
        m.role == ChatRole::Assistant
            && m.parts
                .iter()
                .any(|p| matches!(p, MessagePart::Text { text, .. } if !text.trim().is_empty()))
    });
    let wants_title = input.generate_titles
        && !compaction
        && !answered_before
        && chat.title == DEFAULT_CHAT_TITLE;
    let plan_mode = chat.plan_mode.as_deref() == Some("plan") && !compaction;
    let mut messages: Vec<RequestMessage> = history
        .iter()
        .map(|m| RequestMessage {
            role: m.role,
            parts: m.parts.to_vec(),
        })
        .collect();
    if plan_mode {
        // The projection gathers every system text into the leading system
        // message, so the instruction joins the chat's own system prompt.
        messages.push(RequestMessage::text(
            ChatRole::System,
            PLAN_MODE_INSTRUCTION,
        ));
    }
    if let Some(instructions) = input
        .turn
        .and_then(|t| t.instructions.as_deref())
        .filter(|_| !compaction)
    {
        messages.push(RequestMessage::text(ChatRole::System, instructions));
    }
    let tools = if compaction {
        Vec::new()
    } else {
        dynamic_tool_specs(client_tools.iter().filter(|t| !plan_mode || t.read_only))
    };
    let options = model.options.clone();
    let turn_cap = input
        .turn
        .and_then(|t| t.max_output_tokens)
        .and_then(|v| u32::try_from(v).ok())
        .filter(|_| !compaction);
    let request = ModelRequest {
        model: model.model.clone(),
        messages,
        tools,
        max_output_tokens: match (
            options
                .max_output_tokens
                .and_then(|v| u32::try_from(v).ok()),
            turn_cap,
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        },
        temperature: options.temperature.map(|t| t as f32),
        reasoning_effort: resolve_reasoning_effort(chat.last_reasoning_effort.as_deref(), &options),
        // Provider-hosted tools (web search) are passed as configured; a
        // compaction offers no tools.
        provider_tools: if compaction {
            Vec::new()
        } else {
            options.provider_tools.clone()
        },
        files: Default::default(),
    };
    Plan::Call(Box::new(ModelCall {
        request,
        provider,
        model_config_id: model.id,
        context_limit: model.context_limit,
        compression_threshold: model.compression_threshold,
        options,
        dynamic_tools: dynamic,
        plan_mode,
        compaction,
        wants_title,
    }))
}

/// Steps 1 to 5 of the module doc: `None` when the model must be called.
fn plan_without_call<P>(
    history: &[&HistoryMessage<'_>],
    dynamic: &HashSet<String>,
    max_steps_per_turn: usize,
) -> Option<Plan<P>> {
    let Some(last) = history.iter().rev().find(|m| m.role != ChatRole::System) else {
        return Some(Plan::FinishTurn);
    };
    let last_user = history.iter().rposition(|m| m.role == ChatRole::User);
    let since_user = &history[last_user.map_or(0, |i| i + 1)..];
    let outstanding = outstanding_tool_calls(since_user.iter().map(|m| m.parts));
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
        return Some(Plan::AnswerOutstanding(Outstanding {
            calls,
            then_requires_action: !client.is_empty(),
        }));
    }
    if !client.is_empty() {
        return Some(Plan::EnterRequiresAction);
    }
    if last.role == ChatRole::Assistant
        || (last.role == ChatRole::Tool && ended_by_user_interrupt(since_user))
    {
        return Some(Plan::FinishTurn);
    }
    let steps = since_user
        .iter()
        .filter(|m| m.role == ChatRole::Assistant)
        .count();
    (steps >= max_steps_per_turn).then_some(Plan::StepLimit)
}

/// The stored arguments of call `id` in `messages` (empty when not found).
fn call_args(messages: &[&HistoryMessage<'_>], id: &str) -> String {
    messages
        .iter()
        .flat_map(|m| m.parts.iter())
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
fn ended_by_user_interrupt(since_user: &[&HistoryMessage<'_>]) -> bool {
    let last_assistant = since_user
        .iter()
        .rposition(|m| m.role == ChatRole::Assistant);
    let results: Vec<&MessagePart> = since_user[last_assistant.map_or(0, |i| i + 1)..]
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter(|p| matches!(p, MessagePart::ToolResult { .. }))
        .collect();
    !results.is_empty()
        && results.iter().all(|p| matches!(p, MessagePart::ToolResult { result, is_error: true, .. } if result == &json!({"error": INTERRUPTED_TOOL_RESULT})))
}

fn dynamic_tool_specs<'a>(tools: impl Iterator<Item = &'a DynamicTool>) -> Vec<ToolSpec> {
    tools
        .map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests;
