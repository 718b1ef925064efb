//! `/v1/responses`: a response is one turn of a chat (API.md "Compatible
//! protocols" and its pinned details).
//!
//! `POST /v1/responses` applies one transition, in one bundle with the
//! response's row (`chat_responses`): a new chat (`CreateChat`, no
//! `conversation` and no `previous_response_id`), a send (`SendMessage`
//! with `busy_behavior` `queue`: a response sent while a turn runs waits in
//! the queue and starts with its message), tool results
//! (`CompleteRequiresAction`: the input is `function_call_output` items
//! answering the pending calls), or, for a `previous_response_id` that is
//! not the chat's latest, an edit of the user message that followed it
//! (`EditMessage`: a new branch from there). Then it answers at once
//! (`background`), streams ([`super::events`]) or waits for the turn to
//! end.
//!
//! The response object is derived from the chat each time it is read
//! ([`crate::compat::turn`]): status, output items, usage and error.
//! `instructions`, `tools` and `max_output_tokens` are stored with the row
//! and read by the worker for that turn's model calls only.
//!
//! Not supported, answered with a `400` naming the field: hosted tools
//! (any tool type but `function`), `tool_choice` other than `auto`,
//! `store: false`, `prompt`, `text.format` other than `text`, image and
//! file inputs, `item_reference` inputs.

use std::collections::HashSet;
use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use chatd_core::{BusyBehavior, ChatRole, ChatStatus, DynamicTool, MessagePart};
use chatd_store::responses::{NewResponse, ResponseRow};
use chatd_store::{Chat, CreateChatInput, EditMessageInput, NewMessage, SendMessageInput};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::conversations::{chat_of, conversation_id};
use super::items::{InputItem, history_of, output_items, output_json, parse_input};
use super::models::resolve_model;
use crate::app::AppState;
use crate::auth::{Caller, readable_chat, require_owner, visible_chat};
use crate::compat::turn::{Turn, TurnStatus};
use crate::error::{ApiError, ApiResult};
use crate::extract::{self, PathParams, QueryParams};

/// Longest a non-background, non-streaming request waits for its turn
/// before answering the response as it is (`in_progress`).
const MAX_WAIT: Duration = Duration::from_secs(600);

/// Most characters of `instructions` (the system prompt's cap).
const MAX_INSTRUCTIONS_CHARS: usize = 10_000;

/// What a create request asks for, read and checked.
#[derive(Debug)]
struct CreateRequest {
    model: String,
    input: Vec<InputItem>,
    instructions: Option<String>,
    tools: Option<Vec<DynamicTool>>,
    stream: bool,
    background: bool,
    max_output_tokens: Option<i32>,
    reasoning_effort: Option<chatd_core::ReasoningEffort>,
    metadata: Map<String, Value>,
    conversation: Option<String>,
    previous_response_id: Option<String>,
}

fn opt_str(body: &Value, name: &str) -> ApiResult<Option<String>> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(name, "must be a string")),
    }
}

fn opt_bool(body: &Value, name: &str) -> ApiResult<bool> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(name, "must be a boolean")),
    }
}

fn parse_tools(value: Option<&Value>) -> ApiResult<Option<Vec<DynamicTool>>> {
    let tools = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(ApiError::invalid("tools", "must be an array")),
    };
    if tools.len() > 128 {
        return Err(ApiError::invalid("tools", "at most 128 tools"));
    }
    let mut out: Vec<DynamicTool> = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            return Err(ApiError::invalid(
                format!("tools[{i}].type"),
                format!(
                    "tools of type '{kind}' are not supported: chatd offers function tools (run by the client) only; hosted tools are not available"
                ),
            ));
        }
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty() && n.len() <= 128)
            .ok_or_else(|| {
                ApiError::invalid(format!("tools[{i}].name"), "must be 1 to 128 characters")
            })?;
        if out.iter().any(|t| t.name == name) {
            return Err(ApiError::invalid(
                format!("tools[{i}].name"),
                "names must be unique",
            ));
        }
        let description = match tool.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(ApiError::invalid(
                    format!("tools[{i}].description"),
                    "must be a string",
                ));
            }
        };
        let input_schema = match tool.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(schema @ Value::Object(_)) => schema.clone(),
            Some(_) => {
                return Err(ApiError::invalid(
                    format!("tools[{i}].parameters"),
                    "must be a JSON Schema object",
                ));
            }
        };
        let tool: DynamicTool = serde_json::from_value(json!({
            "name": name, "description": description, "input_schema": input_schema,
        }))
        .map_err(|e| ApiError::invalid(format!("tools[{i}]"), e.to_string()))?;
        out.push(tool);
    }
    crate::compat::check_tools(&out)?;
    Ok(Some(out))
}

fn parse_create(body: &Value) -> ApiResult<CreateRequest> {
    if !body.is_object() {
        return Err(ApiError::invalid("body", "must be a JSON object"));
    }
    let model = opt_str(body, "model")?.ok_or_else(|| ApiError::invalid("model", "is required"))?;
    let input = match body.get("input") {
        None | Some(Value::Null) => return Err(ApiError::invalid("input", "is required")),
        Some(input) => parse_input(input, "input")?,
    };
    let instructions = opt_str(body, "instructions")?;
    if instructions
        .as_ref()
        .is_some_and(|i| i.chars().count() > MAX_INSTRUCTIONS_CHARS)
    {
        return Err(ApiError::invalid(
            "instructions",
            format!("at most {MAX_INSTRUCTIONS_CHARS} characters"),
        ));
    }
    let tools = parse_tools(body.get("tools"))?;
    match body.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "auto" => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice",
                "only 'auto' is supported: the model decides",
            ));
        }
    }
    if body.get("store") == Some(&Value::Bool(false)) {
        return Err(ApiError::invalid(
            "store",
            "chatd always stores responses (they are turns of a chat)",
        ));
    }
    if body.get("prompt").is_some_and(|p| !p.is_null()) {
        return Err(ApiError::invalid(
            "prompt",
            "prompt templates are not supported",
        ));
    }
    if let Some(format) = body.pointer("/text/format/type").and_then(Value::as_str)
        && format != "text"
    {
        return Err(ApiError::invalid(
            "text.format",
            "only text output is supported",
        ));
    }
    let max_output_tokens = match body.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .filter(|n| (1..=i64::from(i32::MAX)).contains(n))
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| {
                    ApiError::invalid("max_output_tokens", "must be a positive integer")
                })?,
        ),
    };
    let reasoning_effort = match body.pointer("/reasoning/effort") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value::<chatd_core::ReasoningEffort>(v.clone()).map_err(|_| {
                ApiError::invalid(
                    "reasoning.effort",
                    "must be none, minimal, low, medium, high or xhigh",
                )
            })?,
        ),
    };
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => {
            if m.len() > 16 {
                return Err(ApiError::invalid("metadata", "at most 16 keys"));
            }
            for (k, v) in m {
                if k.chars().count() > 64
                    || !v.is_string()
                    || v.as_str().is_some_and(|s| s.chars().count() > 512)
                {
                    return Err(ApiError::invalid(
                        format!("metadata.{k}"),
                        "keys up to 64 characters, string values up to 512",
                    ));
                }
            }
            m.clone()
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "metadata",
                "must be an object of strings",
            ));
        }
    };
    let conversation = match body.get("conversation") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Object(o)) => Some(
            o.get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::invalid("conversation.id", "must be a string"))?
                .to_owned(),
        ),
        Some(_) => {
            return Err(ApiError::invalid(
                "conversation",
                "must be a string or {id}",
            ));
        }
    };
    let previous_response_id = opt_str(body, "previous_response_id")?;
    if conversation.is_some() && previous_response_id.is_some() {
        return Err(ApiError::invalid(
            "previous_response_id",
            "cannot be used together with conversation",
        ));
    }
    let stream = opt_bool(body, "stream")?;
    let background = opt_bool(body, "background")?;
    Ok(CreateRequest {
        model,
        input,
        instructions,
        tools,
        stream,
        background,
        max_output_tokens,
        reasoning_effort,
        metadata,
        conversation,
        previous_response_id,
    })
}

/// A new response id: `resp_` and 32 lowercase hex digits.
fn new_response_id() -> String {
    format!("resp_{}", Uuid::new_v4().simple())
}

/// The response row `id` if `caller` may read it (its chat is readable).
///
/// # Errors
/// `404` when there is none or it is another user's.
pub(crate) async fn readable_response(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> ApiResult<(ResponseRow, Chat)> {
    let not_found = || {
        ApiError::not_found(format!(
            "Response with id '{}' not found.",
            id.escape_debug()
        ))
    };
    let well_formed = id.len() == 37
        && id.starts_with("resp_")
        && id[5..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !well_formed {
        return Err(not_found());
    }
    let row = chatd_store::responses::select(state.store().pool(), id)
        .await?
        .ok_or_else(not_found)?;
    let (chat, _) = readable_chat(state, caller, row.chat_id)
        .await
        .map_err(|_| not_found())?;
    Ok((row, chat))
}

/// `POST /v1/responses` (see the module doc).
pub async fn create_response(
    State(state): State<AppState>,
    caller: Caller,
    body: extract::Json<Value>,
) -> ApiResult<Response> {
    let body = body.read().await?;
    let req = parse_create(&body)?;
    let model = resolve_model(&state, &req.model).await?;
    crate::usage::refuse_over_budget(&state, &caller.user).await?;
    let outputs: Vec<(String, String)> = req
        .input
        .iter()
        .filter_map(|i| match i {
            InputItem::FunctionCallOutput { call_id, output } => {
                Some((call_id.clone(), output.clone()))
            }
            _ => None,
        })
        .collect();
    let mut response = NewResponse {
        id: new_response_id(),
        owner_id: caller.id(),
        model: req.model.clone(),
        model_config_id: Some(model.def.id),
        instructions: req.instructions.clone(),
        tools: req.tools.clone(),
        max_output_tokens: req.max_output_tokens,
        reasoning_effort: req.reasoning_effort.map(|e| e.as_str().to_owned()),
        metadata: Value::Object(req.metadata.clone()),
        background: req.background,
        previous_response_id: req.previous_response_id.clone(),
        ..Default::default()
    };
    // Which chat, and where the new turn branches from.
    let (chat_id, branch_from) = match (&req.conversation, &req.previous_response_id) {
        (Some(conversation), None) => (Some(chat_of(conversation)?), None),
        (None, Some(previous)) => {
            let (row, chat) = readable_response(&state, &caller, previous).await?;
            (Some(chat.id), Some((row, chat)))
        }
        _ => (None, None),
    };
    let chat_id = match chat_id {
        None => {
            if !outputs.is_empty()
                && !req
                    .input
                    .iter()
                    .any(|i| matches!(i, InputItem::FunctionCall { .. }))
            {
                return Err(ApiError::invalid(
                    "input",
                    "function_call_output items need previous_response_id or conversation",
                ));
            }
            if !matches!(
                req.input.last(),
                Some(InputItem::Message {
                    role: ChatRole::User,
                    ..
                })
            ) {
                return Err(ApiError::invalid(
                    "input",
                    "a new conversation's input must end with a user message",
                ));
            }
            let history = history_of(&req.input, "input", caller.id())?;
            let created = state
                .store()
                .create_chat(CreateChatInput {
                    owner_id: caller.id(),
                    last_model_config_id: Some(model.def.id),
                    last_reasoning_effort: response.reasoning_effort.clone(),
                    initial_messages: history,
                    max_file_links: state.options().max_files_per_chat,
                    response: Some(response.clone()),
                    ..Default::default()
                })
                .await?;
            created.chat.id
        }
        Some(chat_id) => {
            let chat = visible_chat(&state, &caller, chat_id).await.map_err(|e| {
                if e.status() == axum::http::StatusCode::NOT_FOUND {
                    ApiError::not_found(format!(
                        "Conversation '{}' not found.",
                        conversation_id(chat_id)
                    ))
                } else {
                    e
                }
            })?;
            require_owner(&caller, &chat)?;
            if !outputs.is_empty() {
                if req.input.len() != outputs.len() {
                    return Err(ApiError::invalid(
                        "input",
                        "function_call_output items answer the pending calls on their own: send other input in the next response",
                    ));
                }
                submit_outputs(&state, &caller, &chat, &outputs, &mut response).await?;
            } else {
                let text = single_user_text(&req.input)?;
                send_text(
                    &state,
                    &caller,
                    &chat,
                    text,
                    &model.def.id,
                    branch_from.as_ref(),
                    &mut response,
                )
                .await?;
            }
            chat_id
        }
    };
    if req.stream {
        let row = chatd_store::responses::select(state.store().pool(), &response.id)
            .await?
            .ok_or_else(|| {
                ApiError::internal(std::io::Error::other("the response row is missing"))
            })?;
        let chat =
            chatd_store::chats::select(state.store().pool(), chat_id, chatd_store::LockMode::None)
                .await?
                .ok_or_else(ApiError::chat_not_found)?;
        return super::events::stream_row(
            &state,
            &caller,
            row,
            chat,
            crate::auth::ChatAccess::Owner,
            None,
        )
        .await;
    }
    if req.background {
        let object = response_object_by_id(&state, &caller, &response.id).await?;
        return Ok(Json(object).into_response());
    }
    let object = wait_for_turn(&state, &caller, &response.id).await?;
    Ok(Json(object).into_response())
}

/// The one user message of `input` (an existing conversation takes one
/// message per response; system and developer messages are refused: use
/// `instructions`).
fn single_user_text(input: &[InputItem]) -> ApiResult<String> {
    let mut texts = Vec::new();
    for (i, item) in input.iter().enumerate() {
        match item {
            InputItem::Message {
                role: ChatRole::User,
                text,
            } => texts.push(text.clone()),
            InputItem::Message { .. } => {
                return Err(ApiError::invalid(
                    format!("input[{i}].role"),
                    "a response to an existing conversation takes user messages only (use instructions for system text)",
                ));
            }
            _ => {
                return Err(ApiError::invalid(
                    format!("input[{i}].type"),
                    "function_call items belong to a new conversation's history",
                ));
            }
        }
    }
    if texts.is_empty() {
        return Err(ApiError::invalid("input", "needs a user message"));
    }
    Ok(texts.join("\n\n"))
}

/// The user message part of `text`, checked like a native send's.
fn user_parts(text: String) -> ApiResult<Vec<MessagePart>> {
    let parts = vec![crate::objects::ChatInputPart::Text { text }];
    crate::validate::message_content(&parts, "input")
}

/// Sends `text` to `chat` as the response's turn: a plain send (queued
/// when busy), or, when `branch_from` is a response that is not the chat's
/// latest, an edit of the user message that followed it (a new branch).
async fn send_text(
    state: &AppState,
    caller: &Caller,
    chat: &Chat,
    text: String,
    model_config_id: &Uuid,
    branch_from: Option<&(ResponseRow, Chat)>,
    response: &mut NewResponse,
) -> ApiResult<()> {
    let content = user_parts(text)?;
    if chat.status == ChatStatus::RequiresAction {
        return Err(ApiError::invalid(
            "input",
            "function calls of this conversation are waiting for their output: answer them with function_call_output items first",
        ));
    }
    // A previous response whose turn does not end the active branch: the
    // new turn branches from the end of that turn.
    if let Some((previous, _)) = branch_from
        && let Some(start) = previous.start_message_id
        && let Some(turn) = turn_of(state, previous, chat).await?
    {
        let end = turn.messages.last().map_or(start, |m| m.id);
        if chat.active_leaf_id != Some(end) {
            return branch(state, caller, chat, end, content, model_config_id, response).await;
        }
    }
    let mut message = NewMessage::user(content).created_by(caller.id());
    message.model_config_id = Some(*model_config_id);
    message.reasoning_effort = response.reasoning_effort.clone();
    crate::compat::send_turn(state, chat.id, message, response).await
}

/// Starts the response's turn as a new branch after message `end` (the
/// end of an older response's turn), in one bundle: when a user message
/// already follows `end` (on any branch), its branch is made active and the
/// message edited (the new one is its sibling); otherwise the branch ending
/// at `end` is made active and the message sent after it. Idle chats only:
/// a running turn is never cut short by a branch (`409`).
async fn branch(
    state: &AppState,
    caller: &Caller,
    chat: &Chat,
    end: i64,
    content: Vec<MessagePart>,
    model_config_id: &Uuid,
    response: &mut NewResponse,
) -> ApiResult<()> {
    let rows = chatd_store::messages::from_id(state.store().pool(), chat.id, end, 4_000).await?;
    let next_user = rows
        .iter()
        .find(|m| {
            m.parent_id == Some(end)
                && m.role == ChatRole::User
                && m.visibility != chatd_core::Visibility::Model
        })
        .map(|m| (m.id, m.deleted));
    let mut tx = crate::chats::begin(state, chat.id, true).await?;
    let status = tx.chat().await?.status;
    if !matches!(status, ChatStatus::Waiting | ChatStatus::Error) {
        return Err(ApiError::conflict("The conversation is busy.").with_detail(
            "previous_response_id names an older response: a new branch starts from it once the conversation's current response has ended",
        ));
    }
    let mut message = NewMessage::user(content).created_by(caller.id());
    message.model_config_id = Some(*model_config_id);
    message.reasoning_effort = response.reasoning_effort.clone();
    match next_user {
        Some((next, inactive)) => {
            if inactive {
                tx.activate_branch(next).await?;
            }
            let result = tx
                .edit_message(EditMessageInput {
                    message_id: next,
                    replacement: message,
                    suffix_messages: Vec::new(),
                })
                .await?;
            response.start_message_id = Some(result.replacement_message.id);
        }
        None => {
            tx.activate_branch(end).await?;
            let result = tx
                .send_message(SendMessageInput {
                    message,
                    busy_behavior: BusyBehavior::Queue,
                    max_queue_size: Some(state.options().max_queued_messages),
                })
                .await?;
            response.start_message_id = result
                .inserted_messages
                .iter()
                .rev()
                .find(|m| m.role == ChatRole::User)
                .map(|m| m.id);
        }
    }
    tx.record_response(response).await?;
    tx.commit().await?;
    Ok(())
}

/// Answers the chat's pending client calls with `outputs` (a continuation
/// response: its turn starts at the chat's current leaf).
async fn submit_outputs(
    state: &AppState,
    caller: &Caller,
    chat: &Chat,
    outputs: &[(String, String)],
    response: &mut NewResponse,
) -> ApiResult<()> {
    let mut tx = crate::chats::begin(state, chat.id, true).await?;
    let current = tx.chat().await?;
    if current.status != ChatStatus::RequiresAction {
        return Err(ApiError::invalid(
            "input",
            "no function calls are waiting for output in this conversation",
        ));
    }
    let leaf = current.active_leaf_id;
    let results = outputs
        .iter()
        .map(|(call_id, output)| {
            chatd_store::ToolResultInput::output(call_id.clone(), output_json(output), false)
        })
        .collect();
    let input = chatd_store::CompleteRequiresActionInput {
        created_by: Some(caller.id()),
        model_config_id: current.last_model_config_id,
        results,
        suffix_messages: Vec::new(),
    };
    match tx.complete_requires_action(input).await {
        Ok(_) => {}
        Err(chatd_store::StoreError::State(chatd_core::StateError::ToolResult(e))) => {
            return Err(ApiError::invalid(
                "input",
                format!("function_call_output items do not match the pending calls: {e}"),
            ));
        }
        Err(e) => return Err(e.into()),
    }
    response.start_message_id = leaf;
    response.continuation = true;
    tx.record_response(response).await?;
    tx.commit().await?;
    Ok(())
}

/// The chat's turn of `row`, with the client tools it offers.
pub(crate) async fn turn_of(
    state: &AppState,
    row: &ResponseRow,
    chat: &Chat,
) -> ApiResult<Option<Turn>> {
    let Some(start) = row.start_message_id else {
        // Still queued, unless its queued message was removed.
        if let Some(queued) = row.queued_message_id
            && chatd_store::queue::select(state.store().pool(), chat.id, queued)
                .await?
                .is_none()
        {
            // Promoted meanwhile, or removed: read the row again.
            let again = chatd_store::responses::select(state.store().pool(), &row.id).await?;
            return match again.and_then(|r| r.start_message_id) {
                Some(start) => Ok(Some(Turn::read(state.store(), chat, start, &[]).await?)),
                None => Ok(Some(Turn::withdrawn())),
            };
        }
        return Ok(None);
    };
    let later = chatd_store::responses::after(state.store().pool(), chat.id, start).await?;
    let stops: Vec<i64> = later
        .iter()
        .filter(|r| r.continuation)
        .filter_map(|r| r.start_message_id)
        .collect();
    Ok(Some(Turn::read(state.store(), chat, start, &stops).await?))
}

/// The names of the client tools of `row`'s turn.
pub(crate) fn client_tools(row: &ResponseRow, chat: &Chat) -> HashSet<String> {
    match &row.tools {
        Some(tools) => tools.iter().map(|t| t.name.clone()).collect(),
        None => chat.dynamic_tools.iter().map(|t| t.name.clone()).collect(),
    }
}

/// The status word of a response.
pub(crate) fn status_word(status: TurnStatus) -> &'static str {
    match status {
        TurnStatus::InProgress => "in_progress",
        TurnStatus::Completed => "completed",
        TurnStatus::Incomplete => "incomplete",
        TurnStatus::Cancelled => "cancelled",
        TurnStatus::Failed => "failed",
    }
}

/// The response object of `row` (see the module doc), and whether it is
/// final.
pub(crate) fn response_object(
    row: &ResponseRow,
    chat: &Chat,
    turn: Option<&Turn>,
) -> (Value, bool) {
    let (status, output, usage) = match turn {
        // Still queued.
        None => ("queued", Vec::new(), Value::Null),
        Some(turn) => {
            let status = turn.status(chat);
            let (input, output, reasoning, cached) = turn.usage();
            let usage = json!({
                "input_tokens": input,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": output,
                "output_tokens_details": {"reasoning_tokens": reasoning},
                "total_tokens": input + output,
            });
            (
                status_word(status),
                output_items(turn, &client_tools(row, chat)),
                usage,
            )
        }
    };
    let error = match (status, &chat.last_error) {
        ("failed", Some(e)) => json!({"code": e.kind.as_str(), "message": e.message}),
        ("failed", None) => {
            json!({"code": "server_error", "message": "The turn ended without an answer."})
        }
        _ => Value::Null,
    };
    let incomplete = match status {
        "incomplete" => json!({"reason": "max_output_tokens"}),
        _ => Value::Null,
    };
    let tools: Vec<Value> = row
        .tools
        .iter()
        .flatten()
        .map(|t| {
            json!({"type": "function", "name": t.name, "description": t.description,
                   "parameters": t.input_schema, "strict": false})
        })
        .collect();
    let final_ = !matches!(status, "queued" | "in_progress");
    let object = json!({
        "id": row.id,
        "object": "response",
        "created_at": row.created_at.timestamp(),
        "status": status,
        "background": row.background,
        "conversation": {"id": conversation_id(chat.id)},
        "error": error,
        "incomplete_details": incomplete,
        "instructions": row.instructions,
        "max_output_tokens": row.max_output_tokens,
        "metadata": row.metadata,
        "model": row.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": row.previous_response_id,
        "reasoning": {"effort": row.reasoning_effort, "summary": null},
        "store": true,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": tools,
        "top_p": null,
        "truncation": "disabled",
        "usage": usage,
        "user": null,
    });
    (object, final_)
}

/// Reads response `id` and builds its object.
pub(crate) async fn response_object_by_id(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> ApiResult<Value> {
    let (row, chat) = readable_response(state, caller, id).await?;
    let turn = turn_of(state, &row, &chat).await?;
    Ok(response_object(&row, &chat, turn.as_ref()).0)
}

/// Waits until response `id` is final (or [`MAX_WAIT`] passed), woken by
/// the chat's `chat:update` notifications (a poll every second when there
/// are none), and answers its object.
async fn wait_for_turn(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Value> {
    let (row, _) = readable_response(state, caller, id).await?;
    let mut subscription = match state.stream_service() {
        Ok(service) => match &service.pubsub {
            Some(pubsub) => pubsub
                .subscribe(&chatd_pubsub::chat_update_channel(row.chat_id))
                .await
                .ok(),
            None => None,
        },
        Err(_) => None,
    };
    let deadline = tokio::time::Instant::now() + MAX_WAIT;
    loop {
        let (row, chat) = readable_response(state, caller, id).await?;
        let turn = turn_of(state, &row, &chat).await?;
        let (object, done) = response_object(&row, &chat, turn.as_ref());
        if done || tokio::time::Instant::now() >= deadline {
            return Ok(object);
        }
        if turn.is_none()
            && chat.status == ChatStatus::Error
            && let Some(queued) = row.queued_message_id
        {
            // Queued behind a turn that failed: it runs now.
            crate::compat::start_after_error(state, chat.id, queued).await;
            continue;
        }
        let wait = async {
            match subscription.as_mut() {
                Some(s) => {
                    let _ = s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), wait).await;
    }
}

/// `GET /v1/responses/{response}`: the response object; with
/// `stream=true` its event stream, after sequence number `starting_after`
/// when given (resumable on any replica, [`super::events`]).
pub async fn get_response(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let id = params.raw("response")?.to_owned();
    let query = QueryParams::parse(query.as_deref())?;
    let stream = query.bool("stream")?.unwrap_or(false);
    let starting_after =
        match query.get("starting_after") {
            None => None,
            Some(v) => Some(v.parse::<u64>().map_err(|_| {
                ApiError::invalid_query("starting_after", "must be a sequence number")
            })?),
        };
    if stream {
        return super::events::stream_response(&state, &caller, &id, starting_after).await;
    }
    let object = response_object_by_id(&state, &caller, &id).await?;
    Ok(Json(object).into_response())
}

/// `POST /v1/responses/{response}/cancel`: interrupts the response's turn
/// (or removes it from the queue) and waits for the interrupt to commit;
/// the response is then `cancelled`, its partial answer kept. A response
/// that already ended is answered as it is.
pub async fn cancel_response(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Value>> {
    let id = params.raw("response")?.to_owned();
    let (row, chat) = readable_response(&state, &caller, &id).await?;
    let chat = visible_chat(&state, &caller, chat.id).await?;
    require_owner(&caller, &chat)?;
    let turn = turn_of(&state, &row, &chat).await?;
    match (&turn, row.queued_message_id) {
        (None, Some(queued)) => {
            let mut tx = crate::chats::begin(&state, chat.id, false).await?;
            match tx.delete_queued_message(queued).await {
                Ok(_) => {
                    tx.commit().await?;
                }
                Err(_) => drop(tx),
            }
        }
        (Some(turn), _) if turn.current && chat.status.is_busy_for_cancel() => {
            let mut tx = crate::chats::begin(&state, chat.id, false).await?;
            if tx.interrupt().await.is_ok() {
                tx.commit().await?;
            }
        }
        _ => {}
    }
    // Cancel waits for the interrupt to commit (API.md pinned details).
    let object = wait_for_turn(&state, &caller, &id).await?;
    Ok(Json(object))
}

/// Whether a chat in this status has a turn an interrupt stops.
trait BusyForCancel {
    fn is_busy_for_cancel(&self) -> bool;
}

impl BusyForCancel for ChatStatus {
    fn is_busy_for_cancel(&self) -> bool {
        matches!(self, ChatStatus::Running | ChatStatus::RequiresAction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosted_tools_and_bad_fields_are_refused_naming_the_field() {
        let field = |body: Value| {
            parse_create(&body)
                .unwrap_err()
                .body()
                .validations
                .first()
                .map(|v| v.field.clone())
        };
        let base = json!({"model": "m", "input": "hi"});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        assert_eq!(field(json!({"input": "hi"})).as_deref(), Some("model"));
        assert_eq!(field(json!({"model": "m"})).as_deref(), Some("input"));
        assert_eq!(
            field(with("tools", json!([{"type": "web_search"}]))).as_deref(),
            Some("tools[0].type")
        );
        assert_eq!(field(with("store", json!(false))).as_deref(), Some("store"));
        assert_eq!(
            field(with("tool_choice", json!("required"))).as_deref(),
            Some("tool_choice")
        );
        assert_eq!(
            field(with("reasoning", json!({"effort": "huge"}))).as_deref(),
            Some("reasoning.effort")
        );
        assert_eq!(
            field(with("max_output_tokens", json!(0))).as_deref(),
            Some("max_output_tokens")
        );
        let mut both = with("conversation", json!("conv_x"));
        both["previous_response_id"] = json!("resp_x");
        assert_eq!(field(both).as_deref(), Some("previous_response_id"));
        let ok = parse_create(&with(
            "tools",
            json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]),
        ))
        .unwrap();
        assert_eq!(ok.tools.unwrap()[0].name, "get_weather");
    }

    #[test]
    fn response_ids_are_resp_and_32_hex_digits() {
        let id = new_response_id();
        assert!(id.starts_with("resp_") && id.len() == 37);
        assert!(
            id[5..]
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
}
