//! The request body: [`ModelRequest`] projected onto OpenAI Chat Completions.
//!
//! The history is first repaired by [`crate::projection::project`] with
//! [`Rules::openai`] (every call answered exactly once right after it, no
//! orphans or duplicates, acceptable ids and arguments); then (API.md
//! "Workers and replicas"):
//! - system and user text become string `content` (text parts joined with a
//!   newline); a user message with an image (a file part the projection
//!   kept) becomes a `content` array of `text` and `image_url` parts, the
//!   image as a `data:` URL of its base64 bytes; any other file part became
//!   text in the projection;
//! - assistant text becomes `content`, tool-call parts become `tool_calls`
//!   with the `arguments` string unchanged (`{}` when empty); reasoning parts
//!   are not sent;
//! - every tool-result part becomes its own `role: "tool"` message with the
//!   `tool_call_id` and the result's JSON serialized as a string;
//! - a message left with nothing to send is omitted;
//! - provider-hosted tool calls and results are not sent (Chat Completions
//!   has no shape for them), nor are citations: only the text;
//! - with `web_search` in [`ModelRequest::provider_tools`] the body carries
//!   `web_search_options: {}` (OpenAI's search models; the server searches
//!   and cites, the citations come back as `url_citation` annotations).

use chatd_core::model_options::WEB_SEARCH;
use chatd_core::{ChatRole, MessagePart};
use serde_json::{Map, Value, json};

use std::collections::BTreeMap;

use base64::Engine as _;
use uuid::Uuid;

use crate::projection::{Rules, project_request};
use crate::request::{AttachedFile, ModelRequest, RequestMessage, ToolSpec};

pub use crate::projection::file_placeholder;

/// Which request field carries the output token limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MaxTokensParam {
    /// `max_completion_tokens`: what api.openai.com expects (reasoning models
    /// reject `max_tokens`).
    #[default]
    MaxCompletionTokens,
    /// `max_tokens`: the legacy field older compatible servers understand.
    MaxTokens,
}

/// The JSON body of a streaming Chat Completions request.
pub fn request_body(request: &ModelRequest, max_tokens: MaxTokensParam) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(request.model.clone()));
    let projected = project_request(request, Rules::openai());
    body.insert(
        "messages".into(),
        Value::Array(messages(&projected, &request.files)),
    );
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(request.tools.iter().map(tool).collect()),
        );
    }
    if let Some(limit) = request.max_output_tokens {
        let field = match max_tokens {
            MaxTokensParam::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensParam::MaxTokens => "max_tokens",
        };
        body.insert(field.into(), Value::from(limit));
    }
    if let Some(temperature) = request.wire_temperature() {
        body.insert("temperature".into(), temperature);
    }
    if let Some(effort) = &request.reasoning_effort {
        body.insert("reasoning_effort".into(), Value::String(effort.clone()));
    }
    if request.provider_tool(WEB_SEARCH) {
        body.insert("web_search_options".into(), json!({}));
    }
    Value::Object(body)
}

/// The `messages` array for `history` as it is (callers project it first),
/// image parts from `files`.
pub fn messages(history: &[RequestMessage], files: &BTreeMap<Uuid, AttachedFile>) -> Vec<Value> {
    let mut out = Vec::with_capacity(history.len());
    for message in history {
        match message.role {
            ChatRole::User if has_image(&message.parts, files) => {
                out.extend(tool_results(&message.parts));
                out.push(
                    json!({ "role": "user", "content": content_parts(&message.parts, files) }),
                );
            }
            ChatRole::System | ChatRole::User => {
                // Results never belong in a user turn, but if history has
                // them, OpenAI accepts them only as tool messages.
                out.extend(tool_results(&message.parts));
                let content = joined_text(&message.parts);
                if !content.is_empty() {
                    out.push(json!({ "role": message.role.as_str(), "content": content }));
                }
            }
            ChatRole::Assistant => {
                let content = joined_text(&message.parts);
                let calls: Vec<Value> = message
                    .parts
                    .iter()
                    .filter_map(|part| match part {
                        MessagePart::ToolCall {
                            tool_call_id,
                            tool_name,
                            args,
                        } => Some(json!({
                            "id": tool_call_id,
                            "type": "function",
                            "function": {
                                "name": tool_name,
                                "arguments": if args.trim().is_empty() { "{}" } else { args.as_str() },
                            },
                        })),
                        _ => None,
                    })
                    .collect();
                if calls.is_empty() {
                    if !content.is_empty() {
                        out.push(json!({ "role": "assistant", "content": content }));
                    }
                } else {
                    let content = if content.is_empty() {
                        Value::Null
                    } else {
                        Value::String(content)
                    };
                    out.push(
                        json!({ "role": "assistant", "content": content, "tool_calls": calls }),
                    );
                }
                out.extend(tool_results(&message.parts));
            }
            ChatRole::Tool => out.extend(tool_results(&message.parts)),
        }
    }
    out
}

/// Whether `parts` hold a file part whose bytes `files` carries (an image:
/// the projection turned every other file into text).
fn has_image(parts: &[MessagePart], files: &BTreeMap<Uuid, AttachedFile>) -> bool {
    parts
        .iter()
        .any(|p| matches!(p, MessagePart::File { file_id, .. } if files.contains_key(file_id)))
}

/// The `content` array of a user message with images: `text` parts and
/// `image_url` parts with a `data:` URL, in order.
fn content_parts(parts: &[MessagePart], files: &BTreeMap<Uuid, AttachedFile>) -> Vec<Value> {
    parts
        .iter()
        .filter_map(|part| match part {
            MessagePart::Text { text, .. } if !text.is_empty() => {
                Some(json!({ "type": "text", "text": text }))
            }
            MessagePart::File { file_id, .. } => files.get(file_id).map(|file| {
                let data = base64::engine::general_purpose::STANDARD.encode(&file.data);
                json!({
                    "type": "image_url",
                    "image_url": { "url": format!("data:{};base64,{data}", file.media_type) },
                })
            }),
            _ => None,
        })
        .collect()
}

/// One `role: "tool"` message per tool-result part, its content as in
/// [`tool_content`].
fn tool_results(parts: &[MessagePart]) -> impl Iterator<Item = Value> + '_ {
    parts.iter().filter_map(|part| match part {
        MessagePart::ToolResult {
            tool_call_id,
            result,
            is_error,
            ..
        } => Some(json!({
            "role": "tool",
            "tool_call_id": tool_call_id,
            "content": tool_content(result, *is_error),
        })),
        _ => None,
    })
}

/// The `content` of a `role: "tool"` message: the result as JSON text.
/// Chat Completions has no error flag for tool results (Anthropic's
/// `is_error` has no counterpart), so a failed call's result is sent as
/// `{"error": result}`, unless it already is an object with an `error`
/// field (the synthetic results of API.md "Synthetic tool results"), so
/// that the model can tell a failure from an output.
fn tool_content(result: &Value, is_error: bool) -> String {
    if is_error && result.get("error").is_none() {
        json!({ "error": result }).to_string()
    } else {
        result.to_string()
    }
}

/// Text and file placeholders of `parts`, joined with newlines; reasoning,
/// tool calls and results are left out.
fn joined_text(parts: &[MessagePart]) -> String {
    parts
        .iter()
        .filter_map(|part| match part {
            MessagePart::Text { text, .. } => Some(text.clone()),
            MessagePart::File {
                file_id,
                media_type,
                name,
            } => Some(file_placeholder(
                &file_id.to_string(),
                media_type,
                name.as_deref(),
            )),
            _ => None,
        })
        .filter(|text| !text.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.input_schema,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_calls_result_says_error_and_an_output_is_sent_as_is() {
        assert_eq!(tool_content(&json!({"temp": 21}), false), r#"{"temp":21}"#);
        assert_eq!(tool_content(&json!("no network"), false), r#""no network""#);
        assert_eq!(
            tool_content(&json!("no network"), true),
            r#"{"error":"no network"}"#
        );
        assert_eq!(
            tool_content(&json!({"code": 503}), true),
            r#"{"error":{"code":503}}"#
        );
        assert_eq!(
            tool_content(&json!({"error": "Tool execution cancelled"}), true),
            r#"{"error":"Tool execution cancelled"}"#
        );
    }
}
