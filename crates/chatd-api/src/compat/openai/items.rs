//! Conversation items and response output items: chatd messages in
//! OpenAI's shapes, and OpenAI input items as chatd messages.
//!
//! Ids: a message item is `msg_<message id>`; a part of a message that is
//! an item of its own is `<prefix>_<message id>_<part index>` (`fc_` a
//! function call, `fco_` its output, `rs_` reasoning, `mcp_` a call of a
//! tool the server runs: MCP, sub-agents, `chatd_compact`).
//!
//! A call is a `function_call` item when its tool is one of the client
//! tools of the turn (the response's `tools`, else the chat's dynamic
//! tools); otherwise chatd ran it, and it is an `mcp_call` item with its
//! output.

use std::collections::HashSet;

use chatd_core::{ChatRole, MessagePart};
use chatd_store::{ChatMessage, NewMessage};
use serde_json::{Value, json};

use crate::compat::turn::{self, Turn};
use crate::error::{ApiError, ApiResult};

/// The text of an item's `content`: a string, or the `text` of its
/// `input_text`/`output_text`/`text` parts. `None` for a part of another
/// type (images and files are not supported: the caller refuses).
fn content_text(content: &Value, field: &str) -> ApiResult<String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                match kind {
                    "input_text" | "output_text" | "text" | "summary_text" => {
                        let t = part.get("text").and_then(Value::as_str).ok_or_else(|| {
                            ApiError::invalid(format!("{field}[{i}].text"), "must be a string")
                        })?;
                        text.push_str(t);
                    }
                    other => {
                        return Err(ApiError::invalid(
                            format!("{field}[{i}].type"),
                            format!(
                                "content parts of type '{other}' are not supported (input_text only)"
                            ),
                        ));
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ApiError::invalid(
            field,
            "must be a string or an array of parts",
        )),
    }
}

/// One input item, read.
#[derive(Debug, Clone, PartialEq)]
pub enum InputItem {
    /// A message of `role` (`system` for `system` and `developer`).
    Message {
        /// Its role.
        role: ChatRole,
        /// Its text.
        text: String,
    },
    /// A call the model made (a client replaying history).
    FunctionCall {
        /// `call_id`.
        call_id: String,
        /// `name`.
        name: String,
        /// `arguments`.
        arguments: String,
    },
    /// The client's result of a call.
    FunctionCallOutput {
        /// `call_id`.
        call_id: String,
        /// `output` as text.
        output: String,
    },
}

/// Reads `input`: a string (one user message) or an array of items
/// (`message`, with or without `type`; `function_call`;
/// `function_call_output`); anything else is a `400` naming the item.
pub fn parse_input(input: &Value, field: &str) -> ApiResult<Vec<InputItem>> {
    match input {
        Value::String(text) => Ok(vec![InputItem::Message {
            role: ChatRole::User,
            text: text.clone(),
        }]),
        Value::Array(items) => {
            if items.is_empty() {
                return Err(ApiError::invalid(field, "must not be empty"));
            }
            if items.len() > 1_000 {
                return Err(ApiError::invalid(field, "at most 1000 items"));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, item)| parse_item(item, &format!("{field}[{i}]")))
                .collect()
        }
        _ => Err(ApiError::invalid(
            field,
            "must be a string or an array of items",
        )),
    }
}

fn str_field(item: &Value, name: &str, field: &str) -> ApiResult<String> {
    item.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::invalid(format!("{field}.{name}"), "must be a string"))
}

fn parse_item(item: &Value, field: &str) -> ApiResult<InputItem> {
    if !item.is_object() {
        return Err(ApiError::invalid(field, "must be an object"));
    }
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        None | Some("message") => {
            let role = match item.get("role").and_then(Value::as_str) {
                Some("user") => ChatRole::User,
                Some("assistant") => ChatRole::Assistant,
                Some("system" | "developer") => ChatRole::System,
                _ => {
                    return Err(ApiError::invalid(
                        format!("{field}.role"),
                        "must be user, assistant, system or developer",
                    ));
                }
            };
            let content = item
                .get("content")
                .ok_or_else(|| ApiError::invalid(format!("{field}.content"), "is required"))?;
            let text = content_text(content, &format!("{field}.content"))?;
            Ok(InputItem::Message { role, text })
        }
        Some("function_call") => Ok(InputItem::FunctionCall {
            call_id: str_field(item, "call_id", field)?,
            name: str_field(item, "name", field)?,
            arguments: str_field(item, "arguments", field)?,
        }),
        Some("function_call_output") => {
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(v @ Value::Array(_)) => content_text(v, &format!("{field}.output"))?,
                _ => {
                    return Err(ApiError::invalid(
                        format!("{field}.output"),
                        "must be a string",
                    ));
                }
            };
            Ok(InputItem::FunctionCallOutput {
                call_id: str_field(item, "call_id", field)?,
                output,
            })
        }
        Some("item_reference") => Err(ApiError::invalid(
            format!("{field}.type"),
            "item references are not supported: send previous_response_id or conversation",
        )),
        Some(other) => Err(ApiError::invalid(
            format!("{field}.type"),
            format!("input items of type '{other}' are not supported"),
        )),
    }
}

/// The JSON a client's function output becomes as a chatd tool result: the
/// output itself when it is JSON, else the output as a JSON string.
pub fn output_json(output: &str) -> String {
    match serde_json::from_str::<Value>(output) {
        Ok(_) => output.to_owned(),
        Err(_) => Value::String(output.to_owned()).to_string(),
    }
}

/// The items as the initial history of a new chat: system messages first
/// as they come, calls and their outputs as assistant and tool rows.
///
/// # Errors
/// `400` naming `field` when an output answers no call before it.
pub fn history_of(
    items: &[InputItem],
    field: &str,
    owner: uuid::Uuid,
) -> ApiResult<Vec<NewMessage>> {
    let mut rows = Vec::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            InputItem::Message { role, text } => {
                let field = format!("{field}[{i}].content");
                let parts = match role {
                    // Checked as a native send's content is.
                    ChatRole::User => crate::validate::message_content(
                        &[crate::objects::ChatInputPart::Text { text: text.clone() }],
                        &field,
                    )?,
                    _ if text.len() > crate::validate::MAX_MESSAGE_TEXT_BYTES => {
                        return Err(ApiError::invalid(
                            field,
                            format!(
                                "at most {} bytes of text",
                                crate::validate::MAX_MESSAGE_TEXT_BYTES
                            ),
                        ));
                    }
                    _ => vec![MessagePart::text(text.clone())],
                };
                rows.push(match role {
                    ChatRole::User => NewMessage::user(parts).created_by(owner),
                    ChatRole::Assistant => NewMessage::assistant(parts),
                    _ => NewMessage::system(text.clone()),
                });
            }
            InputItem::FunctionCall {
                call_id,
                name,
                arguments,
            } => {
                calls.push((call_id.clone(), name.clone()));
                rows.push(NewMessage::assistant(vec![MessagePart::ToolCall {
                    tool_call_id: call_id.clone(),
                    tool_name: name.clone(),
                    args: arguments.clone(),
                }]));
            }
            InputItem::FunctionCallOutput { call_id, output } => {
                let Some((_, name)) = calls.iter().find(|(id, _)| id == call_id) else {
                    return Err(ApiError::invalid(
                        format!("{field}[{i}].call_id"),
                        "answers no function_call before it",
                    ));
                };
                let result: Value =
                    serde_json::from_str(&output_json(output)).unwrap_or(Value::Null);
                rows.push(NewMessage::tool(vec![MessagePart::ToolResult {
                    tool_call_id: call_id.clone(),
                    tool_name: name.clone(),
                    result,
                    is_error: false,
                }]));
            }
        }
    }
    // Sanitised once, at the boundary, like every text from outside.
    for row in &mut rows {
        chatd_core::sanitize::parts(&mut row.content);
    }
    Ok(rows)
}

/// A message item of `message` with `text` (`role` user or assistant).
fn message_item(id: String, role: &str, text: &str, status: &str) -> Value {
    let part = if role == "assistant" {
        json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    } else {
        json!({"type": "input_text", "text": text})
    };
    json!({"type": "message", "id": id, "status": status, "role": role, "content": [part]})
}

/// A provider-hosted web search of `message` as Responses'
/// `web_search_call` items (`action: {type: "search", query}`), one per
/// `provider-tool-call` part, `failed` when its result is an error.
fn web_search_items(message: &ChatMessage) -> Vec<Value> {
    let parts = &message.content.0;
    parts
        .iter()
        .enumerate()
        .filter_map(|(i, part)| {
            let MessagePart::ProviderToolCall {
                tool_call_id,
                input,
                ..
            } = part
            else {
                return None;
            };
            let failed = parts.iter().any(|p| {
                matches!(p, MessagePart::ProviderToolResult { tool_call_id: id, is_error: true, .. } if id == tool_call_id)
            });
            let query = input.get("query").cloned().unwrap_or(Value::Null);
            Some(json!({
                "type": "web_search_call", "id": format!("ws_{}_{i}", message.id),
                "status": if failed { "failed" } else { "completed" },
                "action": {"type": "search", "query": query},
            }))
        })
        .collect()
}

/// `item` (a message item of `message`'s text, its parts joined) with the
/// text parts' citations as `url_citation` annotations spanning each part
/// (`start_index`/`end_index` in characters of the joined text).
fn with_citations(mut item: Value, message: &ChatMessage) -> Value {
    let mut annotations = Vec::new();
    let mut at = 0usize;
    for part in &message.content.0 {
        if let MessagePart::Text { text, citations } = part {
            let end = at + text.chars().count();
            for c in citations {
                annotations.push(json!({
                    "type": "url_citation", "start_index": at, "end_index": end,
                    "url": c.url, "title": c.title.as_deref().unwrap_or_default(),
                }));
            }
            at = end;
        }
    }
    if !annotations.is_empty()
        && let Some(content) = item.pointer_mut("/content/0")
    {
        content["annotations"] = Value::Array(annotations);
    }
    item
}

/// The output item of a completed text answer `text` of message `id`.
pub fn answer_item(id: &str, text: &str, status: &str) -> Value {
    message_item(id.to_owned(), "assistant", text, status)
}

/// A reasoning item.
pub fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}],
           "status": "completed"})
}

/// A function call item (the client runs it).
pub fn function_call_item(id: &str, call_id: &str, name: &str, args: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": args, "status": "completed"})
}

/// A call chatd ran (MCP, sub-agents, compaction), with its output once
/// known.
pub fn server_call_item(id: &str, name: &str, args: &str, result: Option<(&Value, bool)>) -> Value {
    let (server_label, tool) = match name.split_once("__") {
        Some((server, tool)) => (server, tool),
        None => ("chatd", name),
    };
    let (output, error, status) = match result {
        Some((value, false)) => (Some(text_of_result(value)), None, "completed"),
        Some((value, true)) => (None, Some(text_of_result(value)), "failed"),
        None => (None, None, "in_progress"),
    };
    json!({"type": "mcp_call", "id": id, "server_label": server_label, "name": tool,
           "arguments": args, "output": output, "error": error, "status": status})
}

fn text_of_result(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The status word of a message item of `message`: `incomplete` when the
/// answer was cut off or interrupted.
pub fn message_status(message: &ChatMessage) -> &'static str {
    match message.finish_reason {
        Some(
            chatd_core::FinishReason::Interrupted
            | chatd_core::FinishReason::Length
            | chatd_core::FinishReason::ContentFilter,
        ) => "incomplete",
        _ => "completed",
    }
}

/// The output items of `turn`, in order: per assistant message its text
/// (one message item), its reasoning, then its calls. `client_tools` names
/// the client tools of the turn.
pub(crate) fn output_items(turn: &Turn, client_tools: &HashSet<String>) -> Vec<Value> {
    let results = turn.results();
    let mut out = Vec::new();
    for message in turn
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::Assistant)
    {
        out.extend(message_output(message, client_tools, &|id| {
            results.get(id).copied()
        }));
    }
    out
}

/// The output items of one assistant message (see [`output_items`]);
/// `result` finds the result of a call chatd ran.
pub fn message_output<'a>(
    message: &ChatMessage,
    client_tools: &HashSet<String>,
    result: &dyn Fn(&str) -> Option<(&'a Value, bool)>,
) -> Vec<Value> {
    let mut out = web_search_items(message);
    let text = turn::text_of(message);
    if !text.is_empty() {
        out.push(with_citations(
            answer_item(
                &format!("msg_{}", message.id),
                &text,
                message_status(message),
            ),
            message,
        ));
    }
    let reasoning = turn::reasoning_of(message);
    if !reasoning.is_empty() {
        out.push(reasoning_item(&format!("rs_{}", message.id), &reasoning));
    }
    for (i, (call_id, name, args)) in turn::calls_of(message).into_iter().enumerate() {
        if client_tools.contains(name) {
            out.push(function_call_item(
                &format!("fc_{}_{i}", message.id),
                call_id,
                name,
                args,
            ));
        } else {
            out.push(server_call_item(
                &format!("mcp_{}_{i}", message.id),
                name,
                args,
                result(call_id),
            ));
        }
    }
    out
}

/// The conversation items of `message` (a visible message of a chat):
/// user, system and assistant text as message items, reasoning as its own
/// item, a call of a client tool (`client_tools`) as a `function_call` and
/// its result as a `function_call_output`; a call chatd ran (MCP,
/// sub-agents, compaction) as one `mcp_call` holding its result, found in
/// `results` (by call id).
pub fn conversation_items(
    message: &ChatMessage,
    client_tools: &HashSet<String>,
    results: &std::collections::HashMap<String, (Value, bool)>,
) -> Vec<Value> {
    let mut out = Vec::new();
    let role = match message.role {
        ChatRole::User => "user",
        ChatRole::Assistant => "assistant",
        ChatRole::System => "system",
        ChatRole::Tool => "tool",
    };
    let text = turn::text_of(message);
    out.extend(web_search_items(message));
    if !text.is_empty() && message.role != ChatRole::Tool {
        out.push(with_citations(
            message_item(
                format!("msg_{}", message.id),
                role,
                &text,
                message_status(message),
            ),
            message,
        ));
    }
    for (i, part) in message.content.0.iter().enumerate() {
        match part {
            MessagePart::Reasoning { text, .. } => {
                out.push(reasoning_item(&format!("rs_{}_{i}", message.id), text));
            }
            MessagePart::ToolCall {
                tool_call_id,
                tool_name,
                args,
            } if client_tools.contains(tool_name) => out.push(function_call_item(
                &format!("fc_{}_{i}", message.id),
                tool_call_id,
                tool_name,
                args,
            )),
            MessagePart::ToolCall {
                tool_call_id,
                tool_name,
                args,
            } => out.push(server_call_item(
                &format!("mcp_{}_{i}", message.id),
                tool_name,
                args,
                results.get(tool_call_id).map(|(v, e)| (v, *e)),
            )),
            MessagePart::ToolResult {
                tool_call_id,
                tool_name,
                result,
                ..
            } if client_tools.contains(tool_name) => out.push(json!({
                "type": "function_call_output", "id": format!("fco_{}_{i}", message.id),
                "call_id": tool_call_id, "output": text_of_result(result), "status": "completed",
            })),
            _ => {}
        }
    }
    out
}
