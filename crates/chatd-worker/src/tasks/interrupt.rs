//! The interrupt task (`spec/chatd-architecture.md`, "Interrupt
//! goroutine"): it reads the generation attempt, closes that attempt's
//! episode in the message part buffer, rebuilds the partial output from its
//! parts and applies `FinishInterruption(partial)`; with no attempt or no
//! parts, `partial` is empty.

use chatd_core::{FinishReason, MessagePart, PartDelta, StreamPart};
use chatd_store::NewMessage;

use super::{TaskContext, TaskResult};
use crate::fence::fenced_lock;

/// Finishes the interruption of the task's history version.
pub(super) async fn interrupt(task: &TaskContext) -> TaskResult<()> {
    let machine = task.machine();
    let attempt = task
        .retrying("reading the generation attempt", || async {
            let locked = fenced_lock(&machine, &task.fence).await?;
            let attempt = locked.chat.generation_attempt;
            locked.finish().await?;
            Ok(attempt)
        })
        .await?;
    let partial = if attempt > 0 {
        let episode = task.episode(attempt);
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
///
/// The streamed results of the workspace tools ([`super::workspace::TOOLS`])
/// are left out: a step's changes commit only with its `CommitStep`, which
/// the interrupt pre-empts, so the files never got them; such a call is
/// answered as interrupted instead of claiming a write the workspace does
/// not hold (or a read of a state that never committed). Only the
/// workspace route streams results under these names: MCP tools are
/// `<slug>__<tool>`, and client-tool results are never streamed.
fn partial_messages(parts: &[StreamPart]) -> Vec<NewMessage> {
    let mut reasoning = String::new();
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut results = Vec::new();
    // Provider-hosted tool parts and citations, kept as they came (the
    // provider ran the tools; nothing is left to answer).
    let mut provider = Vec::new();
    let mut citations = Vec::new();
    for part in parts {
        match &part.part {
            PartDelta::Text { text: t } => text.push_str(t),
            PartDelta::Citation(citation) => citations.push(citation.clone()),
            PartDelta::ProviderToolCall {
                tool_call_id,
                tool_name,
                input,
            } => provider.push(MessagePart::ProviderToolCall {
                tool_call_id: tool_call_id.clone(),
                tool_name: tool_name.clone(),
                input: input.clone(),
            }),
            PartDelta::ProviderToolResult {
                tool_call_id,
                tool_name,
                result,
                is_error,
            } => provider.push(MessagePart::ProviderToolResult {
                tool_call_id: tool_call_id.clone(),
                tool_name: tool_name.clone(),
                result: result.clone(),
                is_error: *is_error,
            }),
            PartDelta::Reasoning { text: t } => reasoning.push_str(t),
            PartDelta::ToolCall {
                tool_call_id,
                tool_name,
                args_delta,
            } => match calls.iter_mut().find(|(id, _, _)| id == tool_call_id) {
                Some(call) => call.2.push_str(args_delta),
                None => calls.push((tool_call_id.clone(), tool_name.clone(), args_delta.clone())),
            },
            PartDelta::ToolResult { tool_name, .. }
                if super::workspace::is_workspace_tool(tool_name) => {}
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
    content.extend(provider);
    if !text.is_empty() || !citations.is_empty() {
        content.push(MessagePart::Text { text, citations });
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
        assistant.finish_reason = Some(FinishReason::Interrupted);
        messages.push(assistant);
    }
    messages.extend(results);
    messages
}

#[cfg(test)]
mod tests {
    use chatd_core::ChatRole;

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
                MessagePart::text("Hello"),
                MessagePart::ToolCall {
                    tool_call_id: "c1".into(),
                    tool_name: "search".into(),
                    args: "{\"q\":\"x\"}".into()
                },
            ]
        );
        assert_eq!(messages[0].finish_reason, Some(FinishReason::Interrupted));
        assert!(partial_messages(&[]).is_empty());
    }
}
