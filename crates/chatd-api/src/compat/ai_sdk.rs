//! The AI SDK's chat transport (API.md "Compatible protocols"; the `ai`
//! npm package's `DefaultChatTransport` and `useChat`):
//!
//! - `POST /api/v2/ai-sdk/chat` takes the transport's body (`id`,
//!   `messages`, `trigger`, `messageId`, and chatd's extra `tools:
//!   [DynamicTool]`) and answers the UI message stream (SSE, header
//!   `x-vercel-ai-ui-message-stream: v1`) of the turn it starts;
//! - `GET /api/v2/ai-sdk/chat/{id}/stream` resumes the running turn's
//!   stream from its start (`204` when no turn runs);
//! - `GET /api/v2/ai-sdk/chat/{id}/messages` → `200 [UIMessage]`, the chat's
//!   active branch as UI messages (`[]` for an id never used), for an app
//!   that reloads.
//!
//! `id` is the id of a chat the caller may read, or any other string of 1
//! to 128 characters, mapped per user to the chat created on its first use
//! (`ai_sdk_chats`; a UUID naming another user's chat is just such a
//! string: the caller learns nothing about it).
//! `trigger: "submit-message"` sends the last message's text when it is a
//! user message (queued when a turn runs), or, when it is an assistant
//! message whose tool parts carry outputs (`state: "output-available"` or
//! `"output-error"`) or approval responses (`"approval-responded"`),
//! answers the pending calls with them; `"regenerate-message"` regenerates
//! the assistant message `messageId` (a chatd message id). Every turn is
//! recorded as a response (`chat_responses`), whose `tools` are the
//! request's `tools`: the client tools of that turn.
//!
//! The stream: `start`, whose `messageId` is chatd's id of the turn's first
//! assistant message: the id reserved for it when the turn started
//! (`chat_responses.answer_message_id`; the answer is inserted with it), or,
//! when a row got into the chat first and the reservation cannot be used,
//! the committed answer's id, the chunks before it held until then. Each
//! model step is `start-step` … `finish-step`: `text-*` parts streamed
//! live and closed on commit, `reasoning-*` and tool parts from the
//! committed messages (`tool-input-available` with `dynamic: true`,
//! `tool-output-available` for calls chatd ran, `tool-approval-request`
//! with `approvalId` = the call id); then `finish` (an `error` chunk first
//! when the turn failed) and `[DONE]`. An attempt discarded after it
//! streamed (a retry, a replica that died) is followed by `reset-step`: the
//! AI SDK removes the step's parts, and the next attempt streams into the
//! same step.

use std::collections::HashSet;
use std::convert::Infallible;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chatd_core::{
    ActionKind, ChatRole, ChatStatus, DynamicTool, MessagePart, PartDelta, Visibility,
};
use chatd_store::responses::NewResponse;
use chatd_store::{Chat, ChatMessage, CreateChatInput, NewMessage};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::{Caller, readable_chat, require_owner, visible_chat};
use crate::compat::turn;
use crate::error::{ApiError, ApiResult};
use crate::extract::{self, PathParams};
use crate::stream::StreamPayload;

/// The routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v2/ai-sdk/chat", post(post_chat))
        .route("/api/v2/ai-sdk/chat/{id}/stream", get(resume_stream))
        .route("/api/v2/ai-sdk/chat/{id}/messages", get(get_messages))
}

fn check_id(id: &str) -> ApiResult<()> {
    if id.is_empty() || id.chars().count() > 128 || id.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "id",
            "must be 1 to 128 characters, none a control character",
        ));
    }
    Ok(())
}

/// The chat `id` names for `caller`: a chat id they may read, else their
/// mapping of it; `None` when it names nothing yet.
async fn chat_for(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Option<Chat>> {
    if let Some(chat_id) = crate::extract::parse_uuid(id)
        && let Ok((chat, _)) = readable_chat(state, caller, chat_id).await
    {
        return Ok(Some(chat));
    }
    match chatd_store::responses::ai_sdk_chat(state.store().pool(), caller.id(), id).await? {
        Some(chat_id) => Ok(Some(readable_chat(state, caller, chat_id).await?.0)),
        None => Ok(None),
    }
}

fn text_of_parts(parts: &[Value]) -> String {
    parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

/// The client's answers in an assistant UI message: `(call id, output or
/// decision)`.
///
/// # Errors
/// `400` naming the part for an `output-available` part without `output`
/// or an `output-error` part whose `errorText` is not a string.
fn answers_of(parts: &[Value]) -> ApiResult<Vec<chatd_store::ToolResultInput>> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let kind = p["type"].as_str().unwrap_or("");
        if !(kind == "dynamic-tool" || kind.starts_with("tool-")) {
            continue;
        }
        let Some(call_id) = p["toolCallId"].as_str() else {
            continue;
        };
        match p["state"].as_str() {
            Some("output-available") => {
                let output = p.get("output").cloned().ok_or_else(|| {
                    ApiError::invalid(format!("messages[-1].parts[{i}].output"), "is required")
                })?;
                out.push(chatd_store::ToolResultInput::output(
                    call_id,
                    output.to_string(),
                    false,
                ));
            }
            Some("output-error") => {
                let text = p["errorText"].as_str().ok_or_else(|| {
                    ApiError::invalid(
                        format!("messages[-1].parts[{i}].errorText"),
                        "must be a string",
                    )
                })?;
                out.push(chatd_store::ToolResultInput::output(
                    call_id,
                    json!({"error": text}).to_string(),
                    true,
                ));
            }
            Some("approval-responded") => {
                let approved = p.pointer("/approval/approved").and_then(Value::as_bool);
                if let Some(approved) = approved {
                    let reason = p
                        .pointer("/approval/reason")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    out.push(chatd_store::ToolResultInput::decision(
                        call_id, approved, reason,
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

fn parse_tools(value: Option<&Value>) -> ApiResult<Option<Vec<DynamicTool>>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let tools = serde_json::from_value::<Vec<DynamicTool>>(v.clone())
                .map_err(|e| ApiError::invalid("tools", format!("must be [DynamicTool]: {e}")))?;
            crate::compat::check_tools(&tools)?;
            Ok(Some(tools))
        }
    }
}

/// `POST /api/v2/ai-sdk/chat` (see the module doc).
pub async fn post_chat(
    State(state): State<AppState>,
    caller: Caller,
    body: extract::Json<Value>,
) -> ApiResult<Response> {
    let body = body.read().await?;
    let id = body["id"]
        .as_str()
        .ok_or_else(|| ApiError::invalid("id", "must be a string"))?
        .to_owned();
    check_id(&id)?;
    let messages = body["messages"]
        .as_array()
        .ok_or_else(|| ApiError::invalid("messages", "must be an array of UI messages"))?;
    let trigger = match body.get("trigger") {
        None | Some(Value::Null) => "submit-message",
        Some(Value::String(t)) => t.as_str(),
        Some(_) => {
            return Err(ApiError::invalid(
                "trigger",
                "must be submit-message or regenerate-message",
            ));
        }
    };
    for (i, m) in messages.iter().enumerate() {
        if !m.is_object() || !m["role"].is_string() || !m["parts"].is_array() {
            return Err(ApiError::invalid(
                format!("messages[{i}]"),
                "must be a UI message: {id, role, parts: [...]}",
            ));
        }
    }
    let tools = parse_tools(body.get("tools"))?;
    let last = messages
        .last()
        .ok_or_else(|| ApiError::invalid("messages", "must not be empty"))?;
    let last_parts: Vec<Value> = last["parts"].as_array().cloned().unwrap_or_default();
    let mut response = NewResponse {
        id: format!("resp_{}", Uuid::new_v4().simple()),
        owner_id: caller.id(),
        model: String::new(),
        tools: tools.clone(),
        metadata: json!({"surface": "ai-sdk"}),
        ..Default::default()
    };
    let existing = chat_for(&state, &caller, &id).await?;
    let chat_id = match (trigger, existing) {
        ("regenerate-message", Some(chat)) => {
            let chat = visible_chat(&state, &caller, chat.id).await?;
            require_owner(&caller, &chat)?;
            crate::usage::refuse_over_budget(&state, &caller.user).await?;
            let message_id = match body.get("messageId") {
                None | Some(Value::Null) => chat.active_leaf_id,
                Some(v) => Some(
                    v.as_str()
                        .and_then(crate::extract::parse_id)
                        .ok_or_else(|| {
                            ApiError::invalid(
                                "messageId",
                                "must be the id of an assistant message (a positive integer as a string)",
                            )
                        })?,
                ),
            }
            .ok_or_else(|| ApiError::invalid("messageId", "must name an assistant message"))?;
            // A UI message starts at the turn's first assistant row, which
            // is a compaction's marker when the turn compacted first: the
            // answer after it is what is regenerated.
            let message_id = answer_at(&state, chat.id, message_id).await?;
            let mut tx = crate::chats::begin(&state, chat.id, true).await?;
            let result = tx.regenerate_message(message_id).await?;
            response.start_message_id = Some(result.parent_id);
            response.model = model_name(&state, &chat).await?;
            tx.record_response(&response).await?;
            tx.commit().await?;
            chat.id
        }
        ("regenerate-message", None) => {
            return Err(ApiError::not_found("Chat not found."));
        }
        ("submit-message", existing) => {
            let role = last["role"].as_str().unwrap_or("");
            match (role, existing) {
                ("user", None) => {
                    crate::usage::refuse_over_budget(&state, &caller.user).await?;
                    let text = text_of_parts(&last_parts);
                    let content = user_content(text)?;
                    let model_config_id =
                        chatd_store::model_configs::default_id(state.store().pool()).await?;
                    response.model_config_id = model_config_id;
                    response.model = "default".into();
                    let created = state
                        .store()
                        .create_chat(CreateChatInput {
                            owner_id: caller.id(),
                            last_model_config_id: model_config_id,
                            dynamic_tools: tools.clone().unwrap_or_default(),
                            initial_messages: vec![
                                NewMessage::user(content).created_by(caller.id()),
                            ],
                            max_file_links: state.options().max_files_per_chat,
                            response: Some(response.clone()),
                            ai_sdk_id: Some(id.clone()),
                            ..Default::default()
                        })
                        .await;
                    match created {
                        Ok(created) => created.chat.id,
                        Err(e) => {
                            // A concurrent first use mapped the id: send to
                            // its chat.
                            match chat_for(&state, &caller, &id).await? {
                                Some(chat) => {
                                    send_user(&state, &caller, &chat, &last_parts, &mut response)
                                        .await?
                                }
                                None => return Err(e.into()),
                            }
                        }
                    }
                }
                ("user", Some(chat)) => {
                    crate::usage::refuse_over_budget(&state, &caller.user).await?;
                    send_user(&state, &caller, &chat, &last_parts, &mut response).await?
                }
                ("assistant", Some(chat)) => {
                    let chat = visible_chat(&state, &caller, chat.id).await?;
                    require_owner(&caller, &chat)?;
                    let answers = answers_of(&last_parts)?;
                    crate::usage::refuse_over_budget(&state, &caller.user).await?;
                    if answers.is_empty() {
                        return Err(ApiError::invalid(
                            "messages",
                            "the last message is an assistant message without tool outputs or approval responses",
                        ));
                    }
                    let mut tx = crate::chats::begin(&state, chat.id, true).await?;
                    let current = tx.chat().await?;
                    let leaf = current.active_leaf_id;
                    let input = chatd_store::CompleteRequiresActionInput {
                        created_by: Some(caller.id()),
                        model_config_id: current.last_model_config_id,
                        results: answers,
                        suffix_messages: Vec::new(),
                    };
                    tx.complete_requires_action(input)
                        .await
                        .map_err(|e| match e {
                            chatd_store::StoreError::State(chatd_core::StateError::ToolResult(
                                e,
                            )) => ApiError::invalid(
                                "messages",
                                format!("the tool outputs do not match the pending calls: {e}"),
                            ),
                            other => other.into(),
                        })?;
                    response.start_message_id = leaf;
                    response.continuation = true;
                    response.model = model_name(&state, &chat).await?;
                    tx.record_response(&response).await?;
                    tx.commit().await?;
                    chat.id
                }
                (_, None) => return Err(ApiError::not_found("Chat not found.")),
                _ => {
                    return Err(ApiError::invalid(
                        "messages",
                        "the last message must be a user message or an assistant message with tool outputs",
                    ));
                }
            }
        }
        _ => {
            return Err(ApiError::invalid(
                "trigger",
                "must be submit-message or regenerate-message",
            ));
        }
    };
    let row = chatd_store::responses::select(state.store().pool(), &response.id)
        .await?
        .ok_or_else(|| ApiError::internal(std::io::Error::other("the response row is missing")))?;
    let chat = readable_chat(&state, &caller, chat_id).await?.0;
    ui_stream(
        &state,
        &caller,
        &chat,
        row.start_message_id,
        row.queued_message_id,
        row.answer_message_id,
    )
    .await
}

/// The assistant answer at or after `message_id` in the active branch
/// when `message_id` is a compaction's marker; `message_id` otherwise.
async fn answer_at(state: &AppState, chat_id: Uuid, message_id: i64) -> ApiResult<i64> {
    let rows =
        chatd_store::messages::from_id(state.store().pool(), chat_id, message_id, 64).await?;
    let marker = |m: &ChatMessage| {
        m.content.0.iter().any(|p| {
            matches!(p, MessagePart::ToolCall { tool_name, .. }
                if tool_name == chatd_core::context::COMPACTION_TOOL)
        })
    };
    match rows.first() {
        Some(first) if first.id == message_id && marker(first) => Ok(rows
            .iter()
            .skip(1)
            .filter(|m| !m.deleted && m.role == ChatRole::Assistant && !marker(m))
            .map(|m| m.id)
            .next()
            .unwrap_or(message_id)),
        _ => Ok(message_id),
    }
}

/// When `start` is not a user message (the turn answers calls of an
/// earlier one), the id of the UI message it continues: the first
/// assistant message after the last user message before `start`.
async fn continued_message(state: &AppState, chat_id: Uuid, start: i64) -> ApiResult<Option<i64>> {
    let rows = chatd_store::messages::scan(
        state.store().pool(),
        chat_id,
        chatd_store::messages::Cursor::Before(start + 1),
        400,
    )
    .await?;
    if rows
        .first()
        .is_none_or(|m| m.id != start || m.role == ChatRole::User)
    {
        return Ok(None);
    }
    // Newest first: the last assistant row seen before a user row.
    let mut first_answer = None;
    for m in &rows {
        match m.role {
            ChatRole::User => break,
            ChatRole::Assistant => first_answer = Some(m.id),
            _ => {}
        }
    }
    Ok(first_answer)
}

async fn model_name(state: &AppState, chat: &Chat) -> ApiResult<String> {
    let _ = state;
    Ok(chat
        .last_model_config_id
        .map_or_else(|| "default".to_owned(), |id| id.to_string()))
}

fn user_content(text: String) -> ApiResult<Vec<MessagePart>> {
    let parts = vec![crate::objects::ChatInputPart::Text { text }];
    crate::validate::message_content(&parts, "messages")
}

/// Sends the user message of `parts` to `chat` (queued when busy) with
/// the response's row; returns the chat id.
async fn send_user(
    state: &AppState,
    caller: &Caller,
    chat: &Chat,
    parts: &[Value],
    response: &mut NewResponse,
) -> ApiResult<Uuid> {
    let chat = visible_chat(state, caller, chat.id).await?;
    require_owner(caller, &chat)?;
    let content = user_content(text_of_parts(parts))?;
    if chat.status == ChatStatus::RequiresAction {
        return Err(ApiError::invalid(
            "messages",
            "tool calls of this chat are waiting for their outputs or approvals: send them (the assistant message with its tool parts answered) first",
        ));
    }
    response.model = model_name(state, &chat).await?;
    let message = NewMessage::user(content).created_by(caller.id());
    crate::compat::send_turn(state, chat.id, message, response).await?;
    Ok(chat.id)
}

/// `GET /api/v2/ai-sdk/chat/{id}/stream`: the running turn's stream from
/// its start, `204` when no turn runs (or the id names no chat).
pub async fn resume_stream(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Response> {
    let id = params.raw("id")?.to_owned();
    check_id(&id)?;
    let Some(chat) = chat_for(&state, &caller, &id).await? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    if !matches!(chat.status, ChatStatus::Running | ChatStatus::Interrupting) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    // The turn's first message: the newest response's, else the newest
    // user message of the active branch.
    let latest = chatd_store::responses::latest(state.store().pool(), chat.id).await?;
    let visible = chatd_store::messages::visible(state.store().pool(), chat.id).await?;
    let last_user = visible
        .iter()
        .rev()
        .find(|m| m.role == ChatRole::User)
        .map(|m| m.id);
    let (start, reserved) = match latest {
        Some(r) if r.start_message_id.is_some() && r.start_message_id >= last_user => {
            (r.start_message_id, r.answer_message_id)
        }
        _ => (last_user, None),
    };
    ui_stream(&state, &caller, &chat, start, None, reserved).await
}

/// `GET /api/v2/ai-sdk/chat/{id}/messages`: the active branch as UI
/// messages (a user message each; an assistant message per turn, named by
/// its first assistant message's id).
pub async fn get_messages(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Vec<Value>>> {
    let id = params.raw("id")?.to_owned();
    check_id(&id)?;
    let Some(chat) = chat_for(&state, &caller, &id).await? else {
        return Ok(Json(Vec::new()));
    };
    let visible = chatd_store::messages::visible(state.store().pool(), chat.id).await?;
    let mut out: Vec<Value> = Vec::new();
    let mut current: Option<Value> = None;
    let results: std::collections::HashMap<String, (Value, bool)> = visible
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter_map(|p| match p {
            MessagePart::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => Some((tool_call_id.clone(), (result.clone(), *is_error))),
            _ => None,
        })
        .collect();
    for m in &visible {
        match m.role {
            ChatRole::User => {
                if let Some(c) = current.take() {
                    out.push(c);
                }
                out.push(json!({"id": m.id.to_string(), "role": "user",
                    "parts": [{"type": "text", "text": turn::text_of(m)}]}));
            }
            ChatRole::Assistant => {
                let c = current.get_or_insert_with(
                    || json!({"id": m.id.to_string(), "role": "assistant", "parts": []}),
                );
                let parts = c["parts"].as_array_mut().expect("an array");
                for p in &m.content.0 {
                    match p {
                        MessagePart::Text { text, citations } => {
                            parts.push(json!({"type": "text", "text": text, "state": "done"}));
                            // Citations as AI SDK `source-url` parts after
                            // the text they support.
                            for (i, c) in citations.iter().enumerate() {
                                let mut source = json!({"type": "source-url",
                                    "sourceId": format!("{}-{}-{i}", m.id, parts.len()), "url": c.url});
                                if let Some(title) = &c.title {
                                    source["title"] = json!(title);
                                }
                                parts.push(source);
                            }
                        }
                        MessagePart::Reasoning { text, .. } => {
                            parts.push(json!({"type": "reasoning", "text": text, "state": "done"}));
                        }
                        // A provider-hosted tool: a tool part the provider
                        // executed, with its result from the same message.
                        MessagePart::ProviderToolCall {
                            tool_call_id,
                            tool_name,
                            input,
                        } => {
                            let result = m.content.0.iter().find_map(|p| match p {
                                MessagePart::ProviderToolResult {
                                    tool_call_id: id,
                                    result,
                                    is_error,
                                    ..
                                } if id == tool_call_id => Some((result, *is_error)),
                                _ => None,
                            });
                            let mut part = json!({"type": "dynamic-tool", "toolName": tool_name,
                                "toolCallId": tool_call_id, "providerExecuted": true,
                                "state": "input-available", "input": input});
                            match result {
                                Some((output, false)) => {
                                    part["state"] = json!("output-available");
                                    part["output"] = output.clone();
                                }
                                Some((output, true)) => {
                                    part["state"] = json!("output-error");
                                    part["errorText"] = json!(output.to_string());
                                }
                                None => {}
                            }
                            parts.push(part);
                        }
                        MessagePart::ToolCall {
                            tool_call_id,
                            tool_name,
                            args,
                        } => {
                            let input: Value = serde_json::from_str(args).unwrap_or(Value::Null);
                            let part = match results.get(tool_call_id) {
                                Some((output, false)) => {
                                    json!({"type": "dynamic-tool", "toolName": tool_name,
                                    "toolCallId": tool_call_id, "state": "output-available",
                                    "input": input, "output": output})
                                }
                                Some((output, true)) => {
                                    json!({"type": "dynamic-tool", "toolName": tool_name,
                                    "toolCallId": tool_call_id, "state": "output-error",
                                    "input": input, "errorText": output.to_string()})
                                }
                                None => json!({"type": "dynamic-tool", "toolName": tool_name,
                                    "toolCallId": tool_call_id, "state": "input-available", "input": input}),
                            };
                            parts.push(part);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(c) = current.take() {
        out.push(c);
    }
    Ok(Json(out))
}

/// Translates one turn's chat events into UI message stream chunks.
///
/// Steps: every model step opens with `start-step` and its committed
/// answer closes it with `finish-step`; a discarded attempt sends
/// `reset-step` (the AI SDK drops the step's parts) and the next attempt
/// streams into the same step. Outputs of calls chatd ran follow the step
/// that made them, before the next one opens (the AI SDK looks tool parts
/// up in the current step).
struct UiTranslator {
    start: Option<i64>,
    queued: Option<i64>,
    /// The id reserved for the turn's answer.
    reserved: Option<i64>,
    /// The `messageId` sent in `start`.
    announced: Option<i64>,
    /// Chunks held until `start` can name the answer (the reserved id
    /// could not be used).
    held: Option<Vec<Value>>,
    seen: HashSet<i64>,
    /// The live text part: episode, part id, text so far.
    live: Option<((i64, i64), String, String)>,
    step_open: bool,
    pending: HashSet<String>,
    asked: HashSet<String>,
    out: Vec<Value>,
    done: bool,
}

impl UiTranslator {
    fn push(&mut self, chunk: Value) {
        match &mut self.held {
            Some(held) => held.push(chunk),
            None => self.out.push(chunk),
        }
    }

    fn open_step(&mut self) {
        if !self.step_open {
            self.step_open = true;
            self.push(json!({"type": "start-step"}));
        }
    }

    /// Sends `start` naming `id` (and what was held for it).
    fn announce(&mut self, id: i64) {
        if self.announced == Some(id) {
            return;
        }
        self.announced = Some(id);
        self.out
            .push(json!({"type": "start", "messageId": id.to_string()}));
        if let Some(held) = self.held.take() {
            self.out.extend(held);
        }
    }

    /// Whether the first live text needs the reserved id checked first.
    fn needs_reservation_check(&self) -> bool {
        self.start.is_some() && self.announced.is_none() && self.held.is_none()
    }

    /// The answer of the reservation check before the first live text:
    /// name the reserved id, or hold the chunks until the answer commits.
    fn reservation(&mut self, usable: bool) {
        match (self.reserved, usable) {
            (Some(id), true) => self.announce(id),
            _ => self.held = Some(Vec::new()),
        }
    }

    /// A committed message; `true` when it is the next turn's user message
    /// (this turn is over).
    fn message(&mut self, m: &ChatMessage) -> bool {
        let Some(start) = self.start else {
            if m.role == ChatRole::User
                && m.queued_message_id.is_some()
                && m.queued_message_id == self.queued
            {
                self.start = Some(m.id);
            }
            return false;
        };
        if m.id <= start || !self.seen.insert(m.id) || m.visibility == Visibility::Model {
            return false;
        }
        match m.role {
            ChatRole::User => return true,
            ChatRole::Assistant => self.assistant(m),
            ChatRole::Tool => {
                for p in &m.content.0 {
                    if let MessagePart::ToolResult {
                        tool_call_id,
                        result,
                        is_error,
                        ..
                    } = p
                        // Calls of this turn, and calls of an earlier one
                        // chatd answered now (an approved call's result):
                        // the client's tool part takes the output. Outputs
                        // the client sent itself it has already.
                        && (self.pending.remove(tool_call_id) || m.created_by.is_none())
                    {
                        let chunk = if *is_error {
                            json!({"type": "tool-output-error", "toolCallId": tool_call_id,
                                "errorText": result.to_string(), "dynamic": true})
                        } else {
                            json!({"type": "tool-output-available", "toolCallId": tool_call_id,
                                "output": result, "dynamic": true})
                        };
                        self.push(chunk);
                    }
                }
            }
            _ => {}
        }
        false
    }

    fn assistant(&mut self, m: &ChatMessage) {
        if self.announced.is_none() {
            self.announce(m.id);
        }
        self.open_step();
        let text = turn::text_of(m);
        match self.live.take() {
            Some((_, id, sent)) if text.starts_with(&sent) => {
                if text.len() > sent.len() {
                    self.push(
                        json!({"type": "text-delta", "id": id, "delta": &text[sent.len()..]}),
                    );
                }
                self.push(json!({"type": "text-end", "id": id}));
            }
            other => {
                if other.is_some() {
                    self.push(json!({"type": "reset-step"}));
                }
                if !text.is_empty() {
                    let id = format!("msg_{}", m.id);
                    self.push(json!({"type": "text-start", "id": id}));
                    self.push(json!({"type": "text-delta", "id": id, "delta": text}));
                    self.push(json!({"type": "text-end", "id": id}));
                }
            }
        }
        let reasoning = turn::reasoning_of(m);
        if !reasoning.is_empty() {
            let id = format!("rs_{}", m.id);
            self.push(json!({"type": "reasoning-start", "id": id}));
            self.push(json!({"type": "reasoning-delta", "id": id, "delta": reasoning}));
            self.push(json!({"type": "reasoning-end", "id": id}));
        }
        for (call_id, name, args) in turn::calls_of(m) {
            let input: Value = serde_json::from_str(args).unwrap_or(Value::Null);
            self.push(
                json!({"type": "tool-input-available", "toolCallId": call_id,
                "toolName": name, "input": input, "dynamic": true}),
            );
            self.pending.insert(call_id.to_owned());
        }
        // Provider-hosted tools (run by the provider, never by the client)
        // and the citations of the text.
        for (i, part) in m.content.0.iter().enumerate() {
            match part {
                MessagePart::ProviderToolCall {
                    tool_call_id,
                    tool_name,
                    input,
                } => self.push(json!({"type": "tool-input-available", "toolCallId": tool_call_id,
                    "toolName": tool_name, "input": input, "dynamic": true, "providerExecuted": true})),
                MessagePart::ProviderToolResult {
                    tool_call_id,
                    result,
                    is_error: false,
                    ..
                } => self.push(json!({"type": "tool-output-available", "toolCallId": tool_call_id,
                    "output": result, "dynamic": true, "providerExecuted": true})),
                MessagePart::ProviderToolResult {
                    tool_call_id,
                    result,
                    is_error: true,
                    ..
                } => self.push(json!({"type": "tool-output-error", "toolCallId": tool_call_id,
                    "errorText": result.to_string(), "dynamic": true, "providerExecuted": true})),
                MessagePart::Text { citations, .. } => {
                    for (j, c) in citations.iter().enumerate() {
                        let mut source = json!({"type": "source-url",
                            "sourceId": format!("{}-{i}-{j}", m.id), "url": c.url});
                        if let Some(title) = &c.title {
                            source["title"] = json!(title);
                        }
                        self.push(source);
                    }
                }
                _ => {}
            }
        }
        self.push(json!({"type": "finish-step"}));
        self.step_open = false;
    }

    /// The live attempt was discarded: its parts leave the step.
    fn discard(&mut self) {
        if self.live.take().is_some() {
            self.push(json!({"type": "reset-step"}));
        }
    }

    fn part(&mut self, role: ChatRole, part: &PartDelta, episode: (i64, i64)) {
        if self.start.is_none() || self.done || role != ChatRole::Assistant {
            return;
        }
        let PartDelta::Text { text } = part else {
            return;
        };
        if self.live.as_ref().is_some_and(|(e, _, _)| *e != episode) {
            self.discard();
        }
        self.open_step();
        if self.live.is_none() {
            let id = format!("t_{}_{}", episode.0, episode.1);
            self.push(json!({"type": "text-start", "id": id}));
            self.live = Some((episode, id, String::new()));
        }
        let live = self.live.as_mut().expect("opened above");
        live.2.push_str(text);
        let id = live.1.clone();
        self.push(json!({"type": "text-delta", "id": id, "delta": text}));
    }

    fn action_required(&mut self, calls: &[crate::stream::event::PendingToolCall]) {
        for call in calls {
            if call.kind == ActionKind::Approval && self.asked.insert(call.tool_call_id.clone()) {
                self.push(json!({"type": "tool-approval-request",
                    "approvalId": call.tool_call_id, "toolCallId": call.tool_call_id}));
            }
        }
    }

    fn finish(&mut self, chat: &Chat) {
        if self.done {
            return;
        }
        self.done = true;
        self.discard();
        if let Some(held) = self.held.take() {
            // Nothing was committed to name: send what there is.
            self.out.extend(held);
        }
        if self.step_open {
            self.out.push(json!({"type": "finish-step"}));
        }
        if chat.status == ChatStatus::Error {
            let text = chat
                .last_error
                .as_ref()
                .map_or_else(|| "The turn failed.".to_owned(), |e| e.message.clone());
            self.out.push(json!({"type": "error", "errorText": text}));
        }
        self.out.push(json!({"type": "finish"}));
    }
}

/// The UI message stream of the turn starting at `start` (or at the
/// promotion of queued message `queued`) of `chat`; `reserved` is the id
/// reserved for its answer.
async fn ui_stream(
    state: &AppState,
    caller: &Caller,
    chat: &Chat,
    start: Option<i64>,
    queued: Option<i64>,
    reserved: Option<i64>,
) -> ApiResult<Response> {
    let (_, access) = readable_chat(state, caller, chat.id).await?;
    // A turn that answers tool calls (outputs, approvals) continues the UI
    // message the client already holds: the one of the turn that made the
    // calls, named by its first assistant message.
    let continued = match start {
        Some(start) => continued_message(state, chat.id, start).await?,
        None => None,
    };
    let after_id = start.or(chat.active_leaf_id).unwrap_or(0);
    let mut events_rx =
        crate::compat::chat_events(state, caller, chat.id, access, after_id).await?;
    let (sse_tx, sse_rx) = mpsc::channel::<Event>(256);
    let state = state.clone();
    let chat_id = chat.id;
    tokio::spawn(async move {
        let mut t = UiTranslator {
            start,
            queued,
            reserved,
            announced: None,
            held: None,
            seen: HashSet::new(),
            live: None,
            step_open: false,
            pending: HashSet::new(),
            asked: HashSet::new(),
            out: Vec::new(),
            done: false,
        };
        if let Some(id) = continued {
            t.announce(id);
        }
        let pool = state.store().pool().clone();
        let read_chat = || async {
            chatd_store::chats::select(&pool, chat_id, chatd_store::LockMode::None)
                .await
                .ok()
                .flatten()
        };
        let mut awaiting_action = false;
        while let Some(event) = events_rx.recv().await {
            match &event.payload {
                StreamPayload::MessagePart { message_part } => {
                    if t.needs_reservation_check()
                        && matches!(message_part.part, PartDelta::Text { .. })
                        && message_part.role == ChatRole::Assistant
                    {
                        let usable = match t.reserved {
                            Some(id) => {
                                chatd_store::responses::reserved_id_usable(&pool, chat_id, id)
                                    .await
                                    .unwrap_or(false)
                            }
                            None => false,
                        };
                        t.reservation(usable);
                    }
                    t.part(
                        message_part.role,
                        &message_part.part,
                        (
                            message_part.history_version,
                            message_part.generation_attempt,
                        ),
                    );
                }
                StreamPayload::PreviewReset => t.discard(),
                StreamPayload::Message { message } => {
                    if let Ok(Some(row)) =
                        chatd_store::messages::select(&pool, chat_id, message.id).await
                        && t.message(&row)
                        && let Some(chat) = read_chat().await
                    {
                        t.finish(&chat);
                    }
                }
                StreamPayload::QueueUpdate { queued_messages }
                    if t.start.is_none()
                        && t.queued
                            .is_some_and(|id| !queued_messages.iter().any(|q| q.id == id)) =>
                {
                    // Its queued message was removed: nothing will run.
                    if let Some(chat) = read_chat().await {
                        t.finish(&chat);
                    }
                }
                StreamPayload::ActionRequired { action_required } if t.start.is_some() => {
                    t.action_required(&action_required.tool_calls);
                    // The status came first (the stream's order): the turn
                    // waits for the client now.
                    if awaiting_action && let Some(chat) = read_chat().await {
                        t.finish(&chat);
                    }
                }
                StreamPayload::Status { status }
                    if t.start.is_none() && status.status == ChatStatus::Error =>
                {
                    // Queued behind a turn that failed: it runs now.
                    if let Some(queued) = t.queued {
                        crate::compat::start_after_error(&state, chat_id, queued).await;
                    }
                }
                StreamPayload::Status { status }
                    if t.start.is_some() && status.status == ChatStatus::RequiresAction =>
                {
                    // `action_required` follows with the calls to ask about.
                    awaiting_action = true;
                }
                StreamPayload::Status { status }
                    if (t.start.is_some()
                        && !matches!(
                            status.status,
                            ChatStatus::Running | ChatStatus::Interrupting
                        ))
                        || (t.start.is_none() && status.status == ChatStatus::Waiting) =>
                {
                    // The turn is over (or its queued message was removed).
                    if let Some(chat) = read_chat().await {
                        t.finish(&chat);
                    }
                }
                _ => {}
            }
            for chunk in std::mem::take(&mut t.out) {
                let e = Event::default().data(serde_json::to_string(&chunk).expect("JSON"));
                if sse_tx.send(e).await.is_err() {
                    return;
                }
            }
            if t.done {
                let _ = sse_tx.send(Event::default().data("[DONE]")).await;
                return;
            }
        }
    });
    let stream = futures::stream::unfold(sse_rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().text("keep-alive"))
        .into_response();
    response.headers_mut().insert(
        "x-vercel-ai-ui-message-stream",
        HeaderValue::from_static("v1"),
    );
    Ok(response)
}
