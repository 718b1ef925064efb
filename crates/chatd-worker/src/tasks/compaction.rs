//! Compaction of the model context (API.md "Context management
//! (compaction, context accounting)"; `spec/durable-agent-loop.md`,
//! "Context accounting and compaction"; `spec/chatd-architecture.md`: a
//! compaction `CommitStep` inserts a summary boundary plus a visible
//! compaction tool call and result).
//!
//! Before every model call the generation task measures the prompt
//! ([`measure`]). At or above the model config's `compression_threshold`
//! percent of its window, or when the prompt and the room kept for the
//! answer no longer fit the window, it compacts first ([`Mode::Auto`]); a
//! provider that says the prompt is too long (or llama.cpp's empty stream
//! after a prompt near the window) compacts with a shorter tail
//! ([`Mode::Overflow`]); `POST /compact` asks for one ([`Mode::Manual`]).
//!
//! [`select`] chooses what the summary replaces: everything the model sees
//! after the leading system rows (and the previous summary, which is folded
//! into the new one) except a verbatim tail of `compact_recent_messages`
//! messages, at most 40 % of the window, that never starts inside a tool
//! group. [`summarize`] renders it as a transcript (tool arguments and
//! results cut to [`TOOL_TEXT_LIMIT`] characters), summarizes it in chunks
//! that fit the window, and reduces the chunk summaries again, for at most
//! [`MAX_PASSES`] passes; each call is its own provider call without tools
//! and is never stored as a turn. The result must be non-empty and smaller
//! than what it replaces. [`messages`] builds the one `CommitStep`: the
//! model-only summary boundary, and the visible `chatd_compact` call and
//! result, which carries the summarization's usage.
//!
//! Only when it shrinks: a selection no larger than the smallest summary
//! ([`Selection::can_shrink`]) is not summarized at all, and
//! `tokens_before`/`tokens_after` measure the same thing, what the model
//! reads of the replaced part ([`Selection::tokens_before`]) and of the
//! boundary replacing it ([`summary_tokens_estimate`]); the visible call
//! and result are client-only, so the model reads the summary once. What
//! happens to a summary that is not smaller ([`is_not_smaller`]) is the
//! generation task's `compact` (docs/operations.md "Context management").

use std::sync::Arc;

use chatd_core::context::{self, estimate_tokens};
use chatd_core::{ChatRole, MessagePart, Usage, Visibility};
use chatd_llm::{
    ErrorKind, ModelRequest, Provider, ProviderError, RequestMessage, ResponseBuilder, StreamEvent,
};
use chatd_store::{ChatMessage, NewMessage};
use futures::StreamExt;
use serde_json::json;

use super::plan::ModelCall;

/// The visible tool call a compaction leaves in the history.
pub(super) const TOOL_NAME: &str = chatd_core::context::COMPACTION_TOOL;
/// Passes of the hierarchical reduction.
pub(super) const MAX_PASSES: usize = 4;
/// Characters of a tool call's arguments or a tool result kept in the
/// transcript.
pub(super) const TOOL_TEXT_LIMIT: usize = 2_000;
/// What the summary boundary's text starts with.
pub(super) use chatd_core::context::SUMMARY_PREFIX;
/// Tokens of the summarization instructions and framing.
const INSTRUCTION_TOKENS: i64 = 400;
/// Share of the window an answer may take when the config sets no output
/// limit (a quarter), at most this many tokens.
const DEFAULT_OUTPUT_RESERVE: i64 = 4_096;

/// The instructions of every summarization call.
pub(super) const INSTRUCTIONS: &str = "You compress conversations between a user and an AI assistant. \
The assistant will read your summary instead of the messages it replaces, so keep everything it needs to \
carry on: the user's goals and instructions, decisions made, facts, names, numbers and code identifiers \
established, tool results that matter, open questions and the current state of any task. Write a concise \
summary in the third person. Answer with the summary only.";

/// Why a compaction runs (`POST /compact`, the threshold, a provider's
/// overflow); it decides the verbatim tail.
pub(super) use chatd_core::context::CompactionMode as Mode;

/// The size of a call's prompt against its model's window, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Measure {
    /// The prompt ([`context::context_usage`], plus the tools offered
    /// when no reported usage covers them).
    pub(super) tokens: i64,
    /// Room kept for the answer.
    pub(super) reserve: i64,
    /// The window.
    pub(super) limit: i64,
    /// `compression_threshold` percent of the window (`None`: off).
    pub(super) threshold: Option<i64>,
}

impl Measure {
    /// The prompt and the room for the answer exceed the window.
    pub(super) fn does_not_fit(&self) -> bool {
        self.limit > 0 && self.tokens + self.reserve > self.limit
    }

    /// Automatic compaction is on and the prompt reached its threshold, or
    /// does not fit.
    pub(super) fn wants_compaction(&self) -> bool {
        self.threshold
            .is_some_and(|t| self.tokens >= t || self.does_not_fit())
    }

    /// Within a quarter of the window of not fitting: an empty stream from
    /// the provider then means the prompt was too long.
    pub(super) fn near_window(&self) -> bool {
        self.limit > 0 && (self.tokens + self.reserve) * 4 >= self.limit * 3
    }
}

/// The room an answer of `call` needs: its output limit, else a quarter of
/// the window (at most [`DEFAULT_OUTPUT_RESERVE`]).
pub(super) fn output_reserve<P>(call: &ModelCall<P>) -> i64 {
    call.request
        .max_output_tokens
        .map(i64::from)
        .unwrap_or_else(|| (call.context_limit / 4).min(DEFAULT_OUTPUT_RESERVE))
}

/// Measures `call`'s prompt: `history` is the model context the call was
/// planned from, in model order.
pub(super) fn measure<P>(call: &ModelCall<P>, history: &[ChatMessage]) -> Measure {
    let entries: Vec<context::ContextEntry> =
        history.iter().map(ChatMessage::context_entry).collect();
    let refs: Vec<&context::ContextEntry> = entries.iter().collect();
    let usage = context::context_usage(&refs);
    let tools = if usage.anchored {
        0
    } else {
        call.request
            .tools
            .iter()
            .map(|t| {
                let bytes = t.name.len() + t.description.len() + t.input_schema.to_string().len();
                i64::try_from(bytes.div_ceil(context::BYTES_PER_TOKEN)).unwrap_or(i64::MAX / 4)
            })
            .sum()
    };
    let limit = call.context_limit;
    Measure {
        tokens: usage.tokens + tools,
        reserve: output_reserve(call),
        limit,
        threshold: (call.compression_threshold > 0)
            .then(|| limit * i64::from(call.compression_threshold) / 100),
    }
}

/// What one compaction replaces ([`context::select_compaction`] on the
/// rows).
#[derive(Debug)]
pub(super) struct Selection<'a> {
    /// The summary being folded into the new one.
    pub(super) previous: Option<&'a ChatMessage>,
    /// The messages summarized, in id order.
    pub(super) summarized: Vec<&'a ChatMessage>,
    /// The messages kept verbatim, in id order.
    pub(super) tail: Vec<&'a ChatMessage>,
    /// The leading system rows, kept.
    pub(super) leading: Vec<&'a ChatMessage>,
}

impl Selection<'_> {
    /// The last message id the new summary covers.
    pub(super) fn through_id(&self) -> i64 {
        self.summarized.last().map_or(0, |m| m.id)
    }

    /// Estimated tokens of what the summary replaces: the previous summary
    /// and the summarized messages, as the model reads them now.
    pub(super) fn tokens_before(&self) -> i64 {
        self.previous
            .iter()
            .chain(&self.summarized)
            .map(|m| m.context_entry().token_estimate)
            .sum()
    }

    /// Whether a summary could be smaller than what it replaces
    /// ([`context::CompactionSelection::can_shrink`]).
    pub(super) fn can_shrink(&self) -> bool {
        self.tokens_before() > context::min_summary_tokens()
    }
}

/// Estimated tokens of the summary boundary holding `summary`: what the
/// model reads instead of [`Selection::tokens_before`] (the visible
/// `chatd_compact` call and result are client-only, so nothing else of a
/// compaction reaches the model).
pub(super) fn summary_tokens_estimate(summary: &str) -> i64 {
    estimate_tokens(&[MessagePart::text(format!("{SUMMARY_PREFIX}{summary}"))])
}

/// Chooses what a compaction replaces in `history` (the model context, in
/// model order: leading system rows, the current summary if any, then the
/// rest): [`context::select_compaction`]. `keep` is the model config's
/// `compact_recent_messages`; `limit` the window. `None` when nothing would
/// be summarized.
pub(super) fn select(
    history: &[ChatMessage],
    keep: usize,
    limit: i64,
    mode: Mode,
) -> Option<Selection<'_>> {
    let entries: Vec<context::ContextEntry> =
        history.iter().map(ChatMessage::context_entry).collect();
    let refs: Vec<&context::ContextEntry> = entries.iter().collect();
    let chosen = context::select_compaction(&refs, keep, limit, mode)?;
    let rows = |indices: &[usize]| indices.iter().map(|&i| &history[i]).collect::<Vec<_>>();
    Some(Selection {
        previous: chosen.previous.map(|i| &history[i]),
        summarized: rows(&chosen.summarized),
        tail: rows(&chosen.tail),
        leading: rows(&chosen.leading),
    })
}

/// One message as a transcript line (reasoning is left out; tool
/// arguments and results are cut to [`TOOL_TEXT_LIMIT`] characters).
pub(super) fn render(message: &ChatMessage) -> String {
    let who = match message.role {
        ChatRole::System => "System",
        ChatRole::User => "User",
        ChatRole::Assistant => "Assistant",
        ChatRole::Tool => "Tool",
    };
    let mut out = Vec::new();
    for part in &message.content.0 {
        match part {
            MessagePart::Text { text, .. } if !text.trim().is_empty() => {
                out.push(format!("{who}: {}", text.trim()));
            }
            MessagePart::ToolCall {
                tool_name, args, ..
            } => out.push(format!(
                "{who} called the tool {tool_name} with {}",
                cut(args)
            )),
            MessagePart::ToolResult {
                tool_name,
                result,
                is_error,
                ..
            } => {
                let outcome = if *is_error { "failed" } else { "returned" };
                out.push(format!(
                    "The tool {tool_name} {outcome}: {}",
                    cut(&result.to_string())
                ));
            }
            MessagePart::ProviderToolCall {
                tool_name, input, ..
            } => out.push(format!(
                "{who} used the provider's tool {tool_name} with {}",
                cut(&input.to_string())
            )),
            MessagePart::ProviderToolResult {
                tool_name,
                result,
                is_error,
                ..
            } => {
                let outcome = if *is_error { "failed" } else { "found" };
                out.push(format!(
                    "The provider's tool {tool_name} {outcome}: {}",
                    cut(&provider_result_summary(result))
                ));
            }
            MessagePart::File {
                media_type, name, ..
            } => out.push(format!(
                "{who} attached a file {} ({media_type})",
                name.as_deref().unwrap_or("without a name")
            )),
            _ => {}
        }
    }
    out.join("\n")
}

/// A provider tool's result for the summary: the titles and URLs of a
/// search's results (their encrypted content means nothing to a model
/// outside the provider), else the JSON.
fn provider_result_summary(result: &serde_json::Value) -> String {
    match result.as_array() {
        Some(items) => items
            .iter()
            .filter_map(|item| {
                let url = item.get("url")?.as_str()?;
                let title = item.get("title").and_then(|t| t.as_str()).unwrap_or("");
                Some(format!("{title} <{url}>"))
            })
            .collect::<Vec<_>>()
            .join("; "),
        None => result.to_string(),
    }
}

fn cut(text: &str) -> String {
    if text.chars().count() <= TOOL_TEXT_LIMIT {
        return text.to_owned();
    }
    let kept: String = text.chars().take(TOOL_TEXT_LIMIT).collect();
    format!("{kept} … [cut]")
}

fn text_tokens(text: &str) -> i64 {
    i64::try_from(text.len().div_ceil(context::BYTES_PER_TOKEN)).unwrap_or(i64::MAX / 4)
}

/// Packs `items` into chunks of at most `budget` estimated tokens, in order;
/// an item larger than the budget is cut to it and goes alone.
pub(super) fn pack(items: Vec<String>, budget: i64) -> Vec<String> {
    let mut chunks: Vec<String> = Vec::new();
    let mut current = String::new();
    for item in items {
        let item = if text_tokens(&item) > budget {
            let bytes = usize::try_from(budget).unwrap_or(0) * context::BYTES_PER_TOKEN;
            let mut end = bytes.min(item.len());
            while !item.is_char_boundary(end) {
                end -= 1;
            }
            format!("{} … [cut]", &item[..end])
        } else {
            item
        };
        if !current.is_empty() && text_tokens(&current) + text_tokens(&item) > budget {
            chunks.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(&item);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// A validated summary.
#[derive(Debug)]
pub(super) struct Summary {
    /// Its text.
    pub(super) text: String,
    /// The usage of every summarization call, added up.
    pub(super) usage: Usage,
    /// Provider calls made.
    pub(super) calls: usize,
}

/// The summary's output limit: an eighth of the window, 256..=4096 tokens,
/// within the config's own output limit.
fn summary_tokens<P>(call: &ModelCall<P>) -> i64 {
    let own = (call.context_limit / 8).clamp(256, 4_096);
    call.request
        .max_output_tokens
        .map_or(own, |m| own.min(i64::from(m)))
}

/// Summarizes `selection` with `call`'s provider and model.
///
/// # Errors
/// The provider's error; a retryable `generic` error when a summary is
/// empty or not smaller than what it replaces; a `context_length` error
/// when [`MAX_PASSES`] passes leave more than one chunk.
pub(super) async fn summarize(
    call: &ModelCall<Arc<dyn Provider>>,
    selection: &Selection<'_>,
) -> Result<Summary, ProviderError> {
    let provider = call.provider.name().to_owned();
    let output = summary_tokens(call);
    let budget = ((call.context_limit - output - INSTRUCTION_TOKENS) * 4 / 5).max(512);
    let mut items: Vec<String> = Vec::new();
    if let Some(previous) = selection.previous {
        let text = previous.content.0.iter().find_map(|p| match p {
            MessagePart::Text { text, .. } => {
                Some(text.trim_start_matches(SUMMARY_PREFIX).to_owned())
            }
            _ => None,
        });
        items.push(format!(
            "Summary of what came before: {}",
            text.unwrap_or_default()
        ));
    }
    items.extend(
        selection
            .summarized
            .iter()
            .map(|m| render(m))
            .filter(|s| !s.is_empty()),
    );
    let mut usage = Usage::default();
    let mut calls = 0;
    for pass in 1..=MAX_PASSES {
        let chunks = pack(std::mem::take(&mut items), budget);
        let single = chunks.len() == 1;
        for chunk in chunks {
            let (text, used) = summarize_once(call, &chunk, output, pass > 1).await?;
            calls += 1;
            if let Some(u) = used {
                add(&mut usage, &u);
            }
            items.push(text);
        }
        if single {
            let text = items.pop().unwrap_or_default();
            return validate(text, selection, usage, calls, &provider);
        }
    }
    Err(ProviderError::new(
        ErrorKind::ContextLength,
        format!("the history could not be summarized into one summary in {MAX_PASSES} passes"),
        provider,
    )
    .with_retryable(false))
}

/// How the error of a summary that is not smaller than what it replaces
/// starts ([`is_not_smaller`]).
const NOT_SMALLER: &str = "the compaction summary was not smaller than what it replaces";

/// `err` is [`summarize`]'s error for a summary that is not smaller than
/// what it replaces (as opposed to an empty one or a provider failure).
pub(super) fn is_not_smaller(err: &ProviderError) -> bool {
    err.message.starts_with(NOT_SMALLER)
}

fn validate(
    text: String,
    selection: &Selection<'_>,
    usage: Usage,
    calls: usize,
    provider: &str,
) -> Result<Summary, ProviderError> {
    let text = text.trim().to_owned();
    let invalid = |message: String| Err(ProviderError::new(ErrorKind::Generic, message, provider));
    if text.is_empty() {
        return invalid("the compaction summary was empty".into());
    }
    let before = selection.tokens_before();
    let after = summary_tokens_estimate(&text);
    if after >= before {
        return invalid(format!("{NOT_SMALLER} ({after} tokens against {before})"));
    }
    Ok(Summary { text, usage, calls })
}

fn add(total: &mut Usage, u: &Usage) {
    total.input_tokens += u.input_tokens;
    total.output_tokens += u.output_tokens;
    total.reasoning_tokens += u.reasoning_tokens;
    total.cache_read_tokens += u.cache_read_tokens;
    total.cache_creation_tokens += u.cache_creation_tokens;
    total.total_tokens += u.total_tokens;
}

/// One summarization call: `chunk` of a transcript (or of partial
/// summaries, on a later pass) in, its summary out.
async fn summarize_once(
    call: &ModelCall<Arc<dyn Provider>>,
    chunk: &str,
    output: i64,
    merging: bool,
) -> Result<(String, Option<Usage>), ProviderError> {
    let ask = if merging {
        "Merge these partial summaries of one conversation, oldest first, into one summary:"
    } else {
        "Summarize this part of the conversation:"
    };
    let request = ModelRequest {
        model: call.request.model.clone(),
        messages: vec![
            RequestMessage {
                role: ChatRole::System,
                parts: vec![MessagePart::text(INSTRUCTIONS)],
            },
            RequestMessage {
                role: ChatRole::User,
                parts: vec![MessagePart::text(format!("{ask}\n\n{chunk}"))],
            },
        ],
        tools: Vec::new(),
        max_output_tokens: u32::try_from(output).ok(),
        temperature: call.request.temperature,
        reasoning_effort: None,
        provider_tools: Vec::new(),
        files: Default::default(),
    };
    let mut stream = call.provider.stream(&request).await?;
    let mut response = ResponseBuilder::new();
    while let Some(event) = stream.next().await {
        let event = event?;
        response.push(&event);
        if matches!(event, StreamEvent::Finish { .. }) {
            break;
        }
    }
    if !response.is_finished() {
        return Err(ProviderError::new(
            ErrorKind::Generic,
            "the summary stream ended without a finish event",
            call.provider.name(),
        ));
    }
    Ok((response.text(), response.usage()))
}

/// The rows of the compaction `CommitStep`: the model-only summary
/// boundary covering `selection`, then the visible `chatd_compact` call and
/// its result `{summarized_messages, tokens_before, tokens_after, summary}`
/// carrying the summarization's usage and cost. `tokens_before` is
/// [`Selection::tokens_before`] and `tokens_after` the boundary's estimate
/// ([`summary_tokens_estimate`]): the same measure of what the model reads
/// of the replaced part before and after. The call and result are
/// client-only: the model reads the summary once, in the boundary.
pub(super) fn messages<P>(
    call: &ModelCall<P>,
    selection: &Selection<'_>,
    summary: &Summary,
    runtime_ms: i64,
) -> Vec<NewMessage> {
    let call_id = format!("chatd_compact_{}", uuid::Uuid::new_v4().simple());
    let parts = vec![MessagePart::text(format!(
        "{SUMMARY_PREFIX}{}",
        summary.text
    ))];
    let tokens_after = estimate_tokens(&parts);
    let mut boundary = NewMessage::user(parts);
    boundary.compressed = true;
    boundary.visibility = Visibility::Model;
    boundary.compacted_through_id = Some(selection.through_id());
    boundary.model_config_id = Some(call.model_config_id);
    let summarized = selection.summarized.len() + usize::from(selection.previous.is_some());
    let result = MessagePart::ToolResult {
        tool_call_id: call_id.clone(),
        tool_name: TOOL_NAME.into(),
        result: json!({
            "summarized_messages": summarized,
            "tokens_before": selection.tokens_before(),
            "tokens_after": tokens_after,
            "summary": summary.text,
        }),
        is_error: false,
    };
    let mut call_row = NewMessage::assistant(vec![MessagePart::ToolCall {
        tool_call_id: call_id,
        tool_name: TOOL_NAME.into(),
        args: "{}".into(),
    }]);
    call_row.visibility = Visibility::User;
    call_row.model_config_id = Some(call.model_config_id);
    let mut result_row = NewMessage::tool(vec![result]);
    result_row.visibility = Visibility::User;
    result_row.model_config_id = Some(call.model_config_id);
    result_row.usage = Some(summary.usage);
    result_row.total_cost_micros = call.options.cost_micros(&summary.usage);
    result_row.runtime_ms = Some(runtime_ms);
    vec![boundary, call_row, result_row]
}

#[cfg(test)]
mod tests;
