//! The request body: [`ModelRequest`] projected onto Anthropic Messages.
//!
//! The history is first repaired by [`crate::projection::project`] with
//! [`Rules::anthropic`]; then (Anthropic's own rules):
//! - system text goes to the top-level `system` parameter;
//! - tool results become `tool_result` blocks of a user turn; adjacent turns
//!   of the same role are merged into one, and in a user turn the
//!   `tool_result` blocks come first (Anthropic rejects a user turn after
//!   `tool_use` that starts with anything else);
//! - the first turn is a user turn and roles alternate;
//! - tool calls become `tool_use` blocks with the arguments parsed into the
//!   `input` object; reasoning becomes a `thinking` block only when it has a
//!   signature (unsigned reasoning, from another provider or cut off, cannot
//!   be sent back and is dropped);
//! - a tool result that is a JSON string is sent as that text, any other
//!   JSON as its serialization, with `is_error`;
//! - an image (a file part the projection kept) becomes an `image` block
//!   with a `base64` source; any other file part became text in the
//!   projection.
//!
//! Provider-hosted tools: with `web_search` in
//! [`ModelRequest::provider_tools`], the `tools` gain
//! `{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}`,
//! and earlier searches go back as `server_tool_use` and
//! `web_search_tool_result` blocks (the stored result unchanged) with the
//! text blocks' citations (`web_search_result_location` with the
//! `encrypted_index`); without it they are left out and only the text is
//! sent.
//!
//! Options: `max_tokens` is required by Anthropic: the configured
//! [`ModelRequest::max_output_tokens`], else [`DEFAULT_MAX_TOKENS`]. A
//! reasoning effort other than `none` turns on extended thinking with the
//! budget [`thinking_budget`] gives (kept below `max_tokens`; `max_tokens`
//! grows to fit the budget when it was not configured); with thinking on,
//! `temperature` is not sent (Anthropic only accepts the default then), and
//! thinking is turned off for a request whose last assistant turn answered by
//! tool results does not start with a signed thinking block (Anthropic
//! rejects that combination).

use chatd_core::model_options::WEB_SEARCH;
use chatd_core::{ChatRole, Citation, MessagePart};
use serde_json::{Map, Value, json};

use std::collections::BTreeMap;

use base64::Engine as _;
use uuid::Uuid;

use crate::projection::{Rules, project_request};
use crate::request::{AttachedFile, ModelRequest, ToolSpec};

/// The `type` of Anthropic's web search server tool.
pub const WEB_SEARCH_TOOL_TYPE: &str = "web_search_20250305";
/// `max_uses` of the web search tool: searches one response may run.
pub const WEB_SEARCH_MAX_USES: u32 = 5;

/// `max_tokens` when the model config sets no output limit.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The smallest thinking budget Anthropic accepts, in tokens.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// The thinking budget (tokens) for a resolved reasoning effort; `None` for
/// `none` and unknown values (no extended thinking).
pub fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(16_384),
        "xhigh" => Some(24_576),
        "max" => Some(32_000),
        _ => None,
    }
}

/// The JSON body of a streaming Messages request.
pub fn request_body(request: &ModelRequest) -> Value {
    body(request, false)
}

/// The body of the request that continues a paused turn
/// ([`super::paused`]): `request` ends with the paused answer, which goes
/// back as the last turn as it is (no "Continue." user turn after it), its
/// web search calls even without their results, for Anthropic to run them.
pub fn continuation_body(request: &ModelRequest) -> Value {
    body(request, true)
}

fn body(request: &ModelRequest, continuing: bool) -> Value {
    let rules = Rules {
        trailing_user_turn: !continuing,
        ..Rules::anthropic()
    };
    let projected = project_request(request, rules);
    let system: Vec<String> = projected
        .iter()
        .filter(|m| m.role == ChatRole::System)
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match p {
            MessagePart::Text { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    let web_search = request.provider_tool(WEB_SEARCH);
    let turns = turns(&projected, &request.files, web_search, continuing);

    let mut body = Map::new();
    body.insert("model".into(), Value::String(request.model.clone()));
    let budget = request
        .reasoning_effort
        .as_deref()
        .and_then(thinking_budget)
        .filter(|_| last_tool_turn_starts_with_thinking(&turns));
    let (max_tokens, budget) = match (request.max_output_tokens, budget) {
        (Some(max), Some(budget)) => {
            let budget = budget.min(max.saturating_sub(1));
            (max, (budget >= MIN_THINKING_BUDGET).then_some(budget))
        }
        (None, Some(budget)) => (budget + DEFAULT_MAX_TOKENS, Some(budget)),
        (max, None) => (max.unwrap_or(DEFAULT_MAX_TOKENS), None),
    };
    body.insert("max_tokens".into(), Value::from(max_tokens));
    body.insert("stream".into(), Value::Bool(true));
    if !system.is_empty() {
        body.insert("system".into(), Value::String(system.join("\n\n")));
    }
    body.insert(
        "messages".into(),
        Value::Array(
            turns
                .into_iter()
                .map(|t| json!({"role": t.role, "content": t.blocks}))
                .collect(),
        ),
    );
    let mut tools: Vec<Value> = request.tools.iter().map(tool).collect();
    if web_search {
        tools.push(web_search_tool());
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    match budget {
        Some(budget) => {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        None => {
            if let Some(temperature) = request.wire_temperature() {
                body.insert("temperature".into(), temperature);
            }
        }
    }
    Value::Object(body)
}

/// One `messages` entry being built.
struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

/// Projected messages → alternating user/assistant turns, user first;
/// `web_search`: the request offers the web search tool, so its earlier
/// calls, results and citations are sent back.
fn turns(
    projected: &[crate::request::RequestMessage],
    files: &BTreeMap<Uuid, AttachedFile>,
    web_search: bool,
    continuing: bool,
) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::new();
    // A continuation ends with the paused answer: its web search calls go
    // back even without their results, for Anthropic to run them.
    let last = projected
        .iter()
        .rposition(|m| m.role != ChatRole::System)
        .filter(|_| continuing);
    for (i, message) in projected.iter().enumerate() {
        let (role, blocks) = match message.role {
            ChatRole::System => continue,
            ChatRole::Assistant => (
                "assistant",
                assistant_blocks(&message.parts, web_search, Some(i) == last),
            ),
            ChatRole::User | ChatRole::Tool => ("user", user_blocks(&message.parts, files)),
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => {
                if role == "user" {
                    // tool_result blocks lead the merged user turn.
                    let (results, others): (Vec<Value>, Vec<Value>) =
                        std::mem::take(&mut last.blocks)
                            .into_iter()
                            .chain(blocks)
                            .partition(|b| b["type"] == "tool_result");
                    last.blocks = results.into_iter().chain(others).collect();
                } else {
                    last.blocks.extend(blocks);
                }
            }
            _ => out.push(Turn { role, blocks }),
        }
    }
    if out.first().is_none_or(|t| t.role != "user") {
        out.insert(
            0,
            Turn {
                role: "user",
                blocks: vec![text_block(crate::projection::LEADING_USER_TEXT)],
            },
        );
    }
    out
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// The web search server tool as Anthropic's request names it.
pub fn web_search_tool() -> Value {
    json!({"type": WEB_SEARCH_TOOL_TYPE, "name": WEB_SEARCH, "max_uses": WEB_SEARCH_MAX_USES})
}

/// A text block with its web search citations (those that carry Anthropic's
/// `encrypted_index`: others came from another provider and cannot be sent
/// back) when `web_search` is on.
fn cited_text_block(text: &str, citations: &[Citation], web_search: bool) -> Value {
    let mut block = text_block(text);
    let cited: Vec<Value> = citations
        .iter()
        .filter(|_| web_search)
        .filter_map(|c| {
            let index = c.encrypted_index.as_ref()?;
            Some(json!({
                "type": "web_search_result_location",
                "url": c.url,
                "title": c.title,
                "encrypted_index": index,
                "cited_text": c.cited_text.as_deref().unwrap_or_default(),
            }))
        })
        .collect();
    if !cited.is_empty() {
        block["citations"] = Value::Array(cited);
    }
    block
}

/// The assistant's blocks. A provider-hosted web search goes back as its
/// `server_tool_use` block and its `web_search_tool_result` block (the
/// stored result unchanged, with its `encrypted_content`), and only with
/// both and `web_search` on: a call without its result (an interrupted
/// answer) or a search the request does not offer would be rejected. In
/// a paused answer sent back (`continuing`), a call without its result
/// goes back too: Anthropic runs it.
fn assistant_blocks(parts: &[MessagePart], web_search: bool, continuing: bool) -> Vec<Value> {
    let answered: std::collections::HashSet<&str> = parts
        .iter()
        .filter_map(|p| match p {
            MessagePart::ProviderToolResult {
                tool_call_id,
                tool_name,
                ..
            } if tool_name == WEB_SEARCH => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let called: std::collections::HashSet<&str> = parts
        .iter()
        .filter_map(|p| match p {
            MessagePart::ProviderToolCall {
                tool_call_id,
                tool_name,
                ..
            } if tool_name == WEB_SEARCH => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let paired =
        |id: &str| web_search && called.contains(id) && (answered.contains(id) || continuing);
    parts
        .iter()
        .filter_map(|part| match part {
            MessagePart::Text { text, citations } => {
                Some(cited_text_block(text, citations, web_search))
            }
            MessagePart::ProviderToolCall {
                tool_call_id,
                tool_name,
                input,
            } if paired(tool_call_id) => Some(json!({
                "type": "server_tool_use",
                "id": tool_call_id,
                "name": tool_name,
                "input": input,
            })),
            MessagePart::ProviderToolResult {
                tool_call_id,
                result,
                ..
            } if paired(tool_call_id) => Some(json!({
                "type": "web_search_tool_result",
                "tool_use_id": tool_call_id,
                "content": result,
            })),
            MessagePart::Reasoning {
                text,
                signature: Some(signature),
            } if !signature.is_empty() => Some(json!({
                "type": "thinking",
                "thinking": text,
                "signature": signature,
            })),
            MessagePart::ToolCall {
                tool_call_id,
                tool_name,
                args,
            } => {
                let input = serde_json::from_str::<Value>(args)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                Some(json!({"type": "tool_use", "id": tool_call_id, "name": tool_name, "input": input}))
            }
            _ => None,
        })
        .collect()
}

fn user_blocks(parts: &[MessagePart], files: &BTreeMap<Uuid, AttachedFile>) -> Vec<Value> {
    let mut results = Vec::new();
    let mut others = Vec::new();
    for part in parts {
        match part {
            MessagePart::Text { text, .. } => others.push(text_block(text)),
            MessagePart::File { file_id, .. } => {
                if let Some(file) = files.get(file_id) {
                    let data = base64::engine::general_purpose::STANDARD.encode(&file.data);
                    others.push(json!({
                        "type": "image",
                        "source": {"type": "base64", "media_type": file.media_type, "data": data},
                    }));
                }
            }
            MessagePart::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => {
                let text = match result {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                let mut block = json!({"type": "tool_result", "tool_use_id": tool_call_id});
                if !text.is_empty() {
                    block["content"] = Value::String(text);
                }
                if *is_error {
                    block["is_error"] = Value::Bool(true);
                }
                results.push(block);
            }
            _ => {}
        }
    }
    results.extend(others);
    results
}

/// Whether thinking may be enabled: when the conversation ends with tool
/// results, the assistant turn they answer must start with a thinking block.
fn last_tool_turn_starts_with_thinking(turns: &[Turn]) -> bool {
    let [.., assistant, last] = turns else {
        return true;
    };
    let answers_tools = last.blocks.iter().any(|b| b["type"] == "tool_result");
    !answers_tools
        || assistant
            .blocks
            .first()
            .is_some_and(|b| b["type"] == "thinking")
}

fn tool(spec: &ToolSpec) -> Value {
    let mut schema = match &spec.input_schema {
        Value::Object(schema) => schema.clone(),
        _ => Map::new(),
    };
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    let mut tool = json!({"name": spec.name, "input_schema": schema});
    if !spec.description.is_empty() {
        tool["description"] = Value::String(spec.description.clone());
    }
    tool
}
