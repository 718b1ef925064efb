//! The notices and hints the renderer prints: the `action_required`
//! notice with the command that answers the pending calls, the outcome of a
//! compaction, the note after an answer cut short, and the one-line text of
//! a transcript entry.

use chatd_core::{ActionKind, FinishReason, MessagePart};
use serde_json::Value;

use crate::chat_cli::wire::{ActionRequired, PendingToolCall};

/// The tool name of the visible record of a compaction.
pub const COMPACTION_TOOL: &str = "chatd_compact";

/// `[context compacted: 12 messages summarised, about 4000 → 600 tokens]`
/// for the result of a `chatd_compact` call.
pub fn describe_compaction(result: &Value, is_error: bool) -> String {
    if is_error {
        let why = result["error"].as_str().unwrap_or("failed");
        return format!("[context not compacted: {why}]");
    }
    format!(
        "[context compacted: {} messages summarised, about {} → {} tokens]",
        result["summarized_messages"], result["tokens_before"], result["tokens_after"]
    )
}

/// The notice printed after an assistant message that did not end by
/// itself, for its `finish_reason`; `None` for a complete answer.
pub fn cut_short_notice(finish_reason: Option<FinishReason>) -> Option<&'static str> {
    match finish_reason? {
        FinishReason::Length => {
            Some("[answer cut short: the output token limit or the context window was reached]")
        }
        FinishReason::ContentFilter => {
            Some("[answer cut short: the provider withheld the rest (content filter)]")
        }
        FinishReason::Interrupted => Some("[answer interrupted]"),
        FinishReason::Stop | FinishReason::ToolCalls => None,
    }
}

/// The text of `parts` for a one-line transcript entry: text parts joined,
/// files as `[file NAME (TYPE) ID]`.
pub(super) fn plain_text(parts: &[MessagePart]) -> String {
    let mut out = String::new();
    for part in parts {
        match part {
            MessagePart::Text { text, .. } => out.push_str(text),
            MessagePart::File {
                file_id,
                media_type,
                name,
            } => out.push_str(&format!(
                "[file {} ({media_type}) {file_id}]",
                name.as_deref().unwrap_or("")
            )),
            _ => {}
        }
    }
    out
}

/// The `action_required` notice: the pending calls, one per line, then the
/// command that answers them (`chatd chat tool-results CHAT [--url URL]
/// --result ID=...`, one `--result` per call, ids shell-quoted when needed;
/// see [`tool_results_hint`]).
pub fn describe_action_required(action: &ActionRequired, chat: &str, url: Option<&str>) -> String {
    let (approvals, client): (Vec<&PendingToolCall>, Vec<&PendingToolCall>) = action
        .tool_calls
        .iter()
        .partition(|c| c.kind == ActionKind::Approval);
    let mut text = match (client.len(), approvals.len()) {
        (n, 0) => format!("action required: {n} tool call(s) wait for results"),
        (0, n) => format!("action required: {n} tool call(s) wait for approval"),
        (n, m) => {
            format!("action required: {n} tool call(s) wait for results and {m} for approval")
        }
    };
    if let Some(deadline) = &action.deadline_at {
        text.push_str(&format!(" (deadline {deadline})"));
    }
    for call in &action.tool_calls {
        let approval = if call.kind == ActionKind::Approval {
            "[needs approval] "
        } else {
            ""
        };
        text.push_str(&format!(
            "\n  {approval}{} {} ({})",
            call.tool_name, call.args, call.tool_call_id
        ));
    }
    if !client.is_empty() {
        text.push('\n');
        text.push_str(&tool_results_hint(
            chat,
            url,
            client.iter().map(|c| c.tool_call_id.as_str()),
        ));
    }
    if !approvals.is_empty() {
        text.push('\n');
        text.push_str(&approval_hint(
            chat,
            url,
            approvals.iter().map(|c| c.tool_call_id.as_str()),
        ));
    }
    text
}

/// `approve with: chatd chat approve CHAT ID...` for `ids`, and how to
/// deny them instead. `url` as for [`tool_results_hint`].
pub fn approval_hint<'a>(
    chat: &str,
    url: Option<&str>,
    ids: impl Iterator<Item = &'a str>,
) -> String {
    let url = url
        .map(|u| format!(" --url {}", shell_word(u)))
        .unwrap_or_default();
    let ids: Vec<String> = ids.map(shell_word).collect();
    let ids = ids.join(" ");
    format!(
        "approve with: chatd chat approve {chat}{url} {ids} \
         (or deny: chatd chat deny {chat}{url} {ids} [--reason TEXT]; \
         every pending call is answered in one request)"
    )
}

/// `answer with: chatd chat tool-results CHAT --result ID=...` for each of
/// `ids` (`TOOL_CALL_ID` when there are none), followed by how to report a
/// failure. `url`, when given, is added as `--url URL` (shell-quoted when
/// needed); the token never is.
pub fn tool_results_hint<'a>(
    chat: &str,
    url: Option<&str>,
    ids: impl Iterator<Item = &'a str>,
) -> String {
    let mut command = format!("answer with: chatd chat tool-results {chat}");
    if let Some(url) = url {
        command.push_str(&format!(" --url {}", shell_word(url)));
    }
    let mut any = false;
    for id in ids {
        any = true;
        command.push_str(&format!(" --result {}=...", shell_word(id)));
    }
    if !any {
        command.push_str(" --result TOOL_CALL_ID=...");
    }
    command.push_str(
        " (replace ... with the output, JSON or text; \
         --error instead of --result for a failed call)",
    );
    command
}

/// `word` as one shell word: unchanged when it is made of characters no
/// shell treats specially, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:,/+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}
