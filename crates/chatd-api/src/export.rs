//! Export and import of a chat (API.md "Sign-in, search, sharing and
//! export"): `GET /api/v2/chats/{chat}/export?format=json|markdown` and
//! `POST /api/v2/chats/import`.
//!
//! # The JSON format (`chatd.chat`, version 1)
//!
//! ```json
//! {"format": "chatd.chat", "version": 1, "exported_at": "2026-12-07T04:00:00Z",
//!  "chat": {"id": "…", "title": "Plans", "created_at": "…", "labels": {"k": "v"}},
//!  "messages": [
//!    {"role": "system", "visibility": "both", "content": [{"type": "text", "text": "Be brief."}], "created_at": "…"},
//!    {"role": "user", "content": [{"type": "text", "text": "hi"}], "created_at": "…"},
//!    {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}], "created_at": "…",
//!     "finish_reason": "stop", "usage": {"input_tokens": 10, "output_tokens": 3, …}}]}
//! ```
//!
//! - `messages`: the visible history of the active branch, in order: what
//!   `GET /chats/{chat}/messages` shows (other branches, deleted and
//!   model-only rows such as compaction summaries are not exported).
//! - `content`: the message's parts (`ChatMessagePart`), with two changes:
//!   a `file` part becomes the text part `[file: <name> (<media type>)]`
//!   (the file's bytes are not in the export), and a reasoning part loses
//!   its provider `signature` (valid only for the provider's own replay).
//! - `visibility`: `both` (the model and clients see it; the default) or
//!   `user` (clients only: a clear-context boundary, a tool approval).
//! - `created_at`, `finish_reason`, `usage` and `chat.id`, `chat.created_at`
//!   are informational: an import gives new ids and times and records no
//!   usage (usage counts toward the importer's budget only when spent).
//!
//! # Import
//!
//! At most [`MAX_IMPORT_MESSAGES`] messages (`400` naming `messages`)
//! within the JSON body limit (1 MiB, `413`): an import is one transaction
//! holding one database connection, and this bounds how long.
//!
//! `POST /api/v2/chats/import` with that document → `201 Chat`: a new idle
//! chat (`waiting`) of the caller, with the default model config, the title
//! and labels of `chat` and the messages, created in one transaction. Tool
//! calls the history ends without answers are answered as cancelled
//! (`{"error": "Tool execution cancelled"}`), as a fork does, so the chat is
//! never left waiting for them. Checked before anything is written (a
//! refused import creates nothing): `format` and `version` (`400` naming
//! them), `chat.title` and `chat.labels` as for `POST /chats`, and each
//! message: `messages[i].role` (`system`, `user`, `assistant`, `tool`),
//! `messages[i].visibility`, `messages[i].content` (1 to 100 parts; a user
//! message's text at most 256 KiB as for a send; the part types its role
//! may carry: user `text`/`file`, assistant `text`/`reasoning`/`tool-call`/
//! `file`, tool `tool-result`/`tool-approval`, system `text`/
//! `context-cleared`; a `tool-result` answers an earlier unanswered
//! `tool-call`; a non-tool message follows no unanswered call). Text is
//! sanitised as every request body is. The body is at most the server's
//! body limit (`413` over it). There is no per-user chat count limit; an
//! imported chat does not run, so the running-chats limit and budgets do
//! not apply.

/// Most messages one import creates: an import is one transaction that
/// writes a row per message (a few milliseconds each, with their
/// triggers), and this keeps it to a few seconds of one connection.
pub const MAX_IMPORT_MESSAGES: usize = 1_000;

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse as _, Response};
use chatd_core::{ChatStatus, FinishReason, MessagePart, Visibility};
use chatd_store::{CreateChatInput, NewMessage, model_configs};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::{Caller, ChatTarget};
use crate::chats::Chat;
use crate::error::{ApiError, ApiResult, E400, E401, E404, E413, E415};
use crate::extract::{self, QueryParams};
use crate::objects::{ChatRole, Usage};
use crate::validate;

/// `format` of a chatd chat export.
pub const FORMAT: &str = "chatd.chat";
/// The version of the export format this server writes and reads.
pub const VERSION: i64 = 1;

/// Query of `GET /chats/{chat}/export`.
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ExportParams {
    /// `json` (default: the `chatd.chat` document `POST /chats/import`
    /// reads) or `markdown` (a readable transcript).
    #[param(pattern = "^(json|markdown)$")]
    format: Option<String>,
}

/// `ChatExport`: the JSON export (format `chatd.chat`, version 1; see the
/// module doc).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChatExport {
    /// Always `chatd.chat`.
    pub format: String,
    /// Always 1.
    pub version: i64,
    /// When it was exported.
    pub exported_at: DateTime<Utc>,
    /// The chat.
    pub chat: ExportedChat,
    /// The visible history of the active branch, in order.
    pub messages: Vec<ExportedMessage>,
}

/// The chat of a [`ChatExport`].
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExportedChat {
    /// The exported chat's id (informational; an import gets a new one).
    #[serde(default)]
    pub id: Option<Uuid>,
    /// Title, 1 to 200 characters.
    pub title: String,
    /// Creation time (informational).
    #[serde(default)]
    pub created_at: Option<DateTime<Utc>>,
    /// Labels (at most 50).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// One message of a [`ChatExport`].
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExportedMessage {
    /// Role.
    pub role: ChatRole,
    /// `both` (default) or `user` (shown to clients only).
    #[serde(default)]
    #[schema(value_type = String, pattern = "^(both|user)$")]
    pub visibility: Visibility,
    /// Parts (file parts are text notes; reasoning carries no signature).
    pub content: Vec<MessagePart>,
    /// Insertion time (informational).
    #[serde(default)]
    pub created_at: Option<DateTime<Utc>>,
    /// Why an assistant message ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// Token usage of an assistant message (informational; not imported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The export's file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Markdown,
}

/// `GET /api/v2/chats/{chat}/export?format=json|markdown`: the chat as a
/// file (`Content-Disposition: attachment; filename="<title>.json|.md"`):
/// `application/json` ([`ChatExport`]) or `text/markdown` (a transcript:
/// the title, then `## User` / `## Assistant` / `## Tool` / `## System`
/// sections, text as is, tool calls and results summarised). Readable by
/// whoever may read the chat.
///
/// # Errors
/// `400` naming `format` (not `json` or `markdown`); `404` for a chat the
/// caller may not read.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/export",
    tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id"), ExportParams),
    responses(
        (status = 200, description = "The export, as an attachment", content(
            (ChatExport = "application/json"),
            (String = "text/markdown"),
        )),
        E400, E401, E404,
    )
)]
pub async fn export_chat(
    State(state): State<AppState>,
    target: ChatTarget,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let query = QueryParams::parse(query.as_deref())?;
    let format = match query.get("format") {
        None | Some("json") => Format::Json,
        Some("markdown") => Format::Markdown,
        Some(_) => {
            return Err(ApiError::invalid_query(
                "format",
                "must be json or markdown",
            ));
        }
    };
    let rows = chatd_store::messages::visible(state.store().pool(), target.id()).await?;
    let export = build_export(&target.chat, &rows, Utc::now());
    let (body, content_type, ext) = match format {
        Format::Json => (
            serde_json::to_vec_pretty(&export).map_err(ApiError::internal)?,
            "application/json",
            "json",
        ),
        Format::Markdown => (
            markdown(&export).into_bytes(),
            "text/markdown; charset=utf-8",
            "md",
        ),
    };
    let disposition = format!(
        "attachment; filename=\"{}.{ext}\"",
        safe_file_name(&target.chat.title)
    );
    let mut response = Body::from(body).into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        CONTENT_DISPOSITION,
        HeaderValue::from_str(&disposition).map_err(ApiError::internal)?,
    );
    Ok(response)
}

/// The [`ChatExport`] of `chat` with its visible active history `rows`.
pub fn build_export(
    chat: &chatd_store::Chat,
    rows: &[chatd_store::ChatMessage],
    now: DateTime<Utc>,
) -> ChatExport {
    let messages = rows
        .iter()
        .filter(|m| !m.deleted && m.visibility.client_visible())
        .map(|m| ExportedMessage {
            role: m.role,
            visibility: m.visibility,
            content: m.content.0.iter().map(export_part).collect(),
            created_at: Some(m.created_at),
            finish_reason: m.finish_reason,
            usage: crate::objects::ChatMessage::from(m).usage,
        })
        .collect();
    ChatExport {
        format: FORMAT.to_owned(),
        version: VERSION,
        exported_at: now,
        chat: ExportedChat {
            id: Some(chat.id),
            title: chat.title.clone(),
            created_at: Some(chat.created_at),
            labels: chat.labels.clone(),
        },
        messages,
    }
}

/// A stored part as exported: a file becomes a text note, a reasoning part
/// loses its signature; the rest is unchanged.
fn export_part(part: &MessagePart) -> MessagePart {
    match part {
        MessagePart::File {
            media_type, name, ..
        } => MessagePart::text(file_note(name.as_deref(), media_type)),
        MessagePart::Reasoning { text, .. } => MessagePart::reasoning(text.clone()),
        other => other.clone(),
    }
}

/// `[file: <name> (<media type>)]`, the text a file part becomes.
fn file_note(name: Option<&str>, media_type: &str) -> String {
    let name = name.filter(|n| !n.is_empty()).unwrap_or("unnamed");
    if media_type.is_empty() {
        format!("[file: {name}]")
    } else {
        format!("[file: {name} ({media_type})]")
    }
}

/// The title as a file name: ASCII letters, digits, space, `.`, `_` and
/// `-` kept, everything else `_`, at most 100 characters, no leading dot;
/// `chat` when nothing is left.
pub fn safe_file_name(title: &str) -> String {
    let name: String = title
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, ' ' | '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let name = name.trim().trim_start_matches('.').trim();
    if name.chars().all(|c| c == '_' || c == '.' || c == ' ') {
        "chat".to_owned()
    } else {
        name.to_owned()
    }
}

/// The Markdown transcript of `export`.
pub fn markdown(export: &ChatExport) -> String {
    let mut out = format!(
        "# {}\n\n*Exported from chatd on {}.*\n",
        export.chat.title,
        export.exported_at.format("%Y-%m-%d %H:%M UTC")
    );
    for m in &export.messages {
        let heading = match m.role {
            ChatRole::System => "System",
            ChatRole::User => "User",
            ChatRole::Assistant => "Assistant",
            ChatRole::Tool => "Tool",
        };
        out.push_str(&format!("\n## {heading}\n"));
        for part in &m.content {
            out.push('\n');
            out.push_str(&markdown_part(part));
            out.push('\n');
        }
    }
    out
}

/// One part in the transcript: text as is; reasoning, tool calls, results
/// and approvals as a one-paragraph quote, long values cut.
fn markdown_part(part: &MessagePart) -> String {
    match part {
        MessagePart::Text { text, citations } => {
            let mut out = text.clone();
            for (n, c) in citations.iter().enumerate() {
                let title = c.title.as_deref().unwrap_or(&c.url);
                out.push_str(&format!(
                    "\n\n[{}] {} <{}>",
                    n + 1,
                    one_line(title, 200),
                    c.url
                ));
            }
            out
        }
        MessagePart::Reasoning { text, .. } => {
            format!("> *Reasoning:* {}", one_line(text, 500))
        }
        MessagePart::ProviderToolCall {
            tool_name, input, ..
        } => format!(
            "> **Provider tool call** `{tool_name}` {}",
            code(&one_line(&input.to_string(), 300))
        ),
        MessagePart::ProviderToolResult {
            tool_name,
            result,
            is_error,
            ..
        } => {
            let shown = match result.as_array() {
                // A search's results: titles and links, not the encrypted
                // content.
                Some(items) if !*is_error => items
                    .iter()
                    .filter_map(|i| {
                        let url = i.get("url")?.as_str()?;
                        let title = i.get("title").and_then(|t| t.as_str()).unwrap_or(url);
                        Some(format!("{} <{url}>", one_line(title, 200)))
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                _ => code(&one_line(&result.to_string(), 500)),
            };
            let label = if *is_error {
                "Provider tool error"
            } else {
                "Provider tool result"
            };
            format!("> **{label}** `{tool_name}`: {shown}")
        }
        MessagePart::ToolCall {
            tool_name, args, ..
        } => format!(
            "> **Tool call** `{tool_name}` {}",
            code(&one_line(args, 300))
        ),
        MessagePart::ToolResult {
            tool_name,
            result,
            is_error,
            ..
        } => format!(
            "> **{}** `{tool_name}`: {}",
            if *is_error {
                "Tool error"
            } else {
                "Tool result"
            },
            code(&one_line(&result.to_string(), 500))
        ),
        MessagePart::File {
            media_type, name, ..
        } => file_note(name.as_deref(), media_type),
        MessagePart::ContextCleared => "*(context cleared)*".to_owned(),
        MessagePart::ToolApproval {
            tool_name,
            approved,
            reason,
            ..
        } => {
            let verdict = if *approved { "approved" } else { "denied" };
            match reason {
                Some(r) => format!("> Tool call `{tool_name}` {verdict}: {}", one_line(r, 300)),
                None => format!("> Tool call `{tool_name}` {verdict}"),
            }
        }
    }
}

/// `s` on one line (newlines as spaces), cut to `max` characters with `…`.
fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.chars().count() > max {
        let mut cut: String = flat.chars().take(max).collect();
        cut.push('…');
        cut
    } else {
        flat
    }
}

/// `s` as inline code, with a fence longer than any backtick run in it.
fn code(s: &str) -> String {
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    format!("{fence} {s} {fence}")
}

/// `POST /api/v2/chats/import`: creates a chat of the caller from a
/// [`ChatExport`] (see the module doc): `201 Chat`, idle (`waiting`), same
/// visible history with new ids, in one transaction.
///
/// # Errors
/// `400` naming the field (`format`, `version`, `chat.title`,
/// `chat.labels`, `messages`, `messages[i].role`, `messages[i].visibility`,
/// `messages[i].content`, `messages[i].content[j]`); `413` over the body
/// limit; `415` without a JSON body. A refused import creates nothing.
#[utoipa::path(
    post,
    path = "/api/v2/chats/import",
    tag = "chats",
    request_body = ChatExport,
    responses(
        (status = 201, description = "Imported; the new chat waits (W)", body = Chat),
        E400, E401, E413, E415,
    )
)]
pub async fn import_chat(
    State(state): State<AppState>,
    caller: Caller,
    body: extract::Json<Value>,
) -> ApiResult<(StatusCode, Json<Chat>)> {
    let doc = body.read().await?;
    let (title, labels, messages) = parse_import(&doc, caller.id())?;
    let model_config_id = model_configs::default_id(state.store().pool()).await?;
    let input = CreateChatInput {
        owner_id: caller.id(),
        title: Some(title),
        labels,
        last_model_config_id: model_config_id,
        initial_messages: messages,
        initial_status: Some(ChatStatus::Waiting),
        max_file_links: state.options().max_files_per_chat,
        ..CreateChatInput::default()
    };
    let created = state.store().create_chat(input).await?;
    Ok((StatusCode::CREATED, Json(Chat::from(&created.chat))))
}

/// Checks an import document (see [`import_chat`]) and returns the title,
/// the labels and the messages to insert (cancelled results appended for
/// the calls it ends without answers).
///
/// # Errors
/// `400` naming the first bad field.
pub fn parse_import(
    doc: &Value,
    owner: Uuid,
) -> ApiResult<(String, BTreeMap<String, String>, Vec<NewMessage>)> {
    let obj = doc
        .as_object()
        .ok_or_else(|| ApiError::invalid("body", "must be a chatd.chat export object"))?;
    if obj.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(ApiError::invalid("format", format!("must be \"{FORMAT}\"")));
    }
    if obj.get("version").and_then(Value::as_i64) != Some(VERSION) {
        return Err(ApiError::invalid(
            "version",
            format!("must be {VERSION} (the version this server reads)"),
        ));
    }
    let chat: ExportedChat = field(obj.get("chat"), "chat")?;
    let title = validate::title(&chat.title)
        .map_err(|_| ApiError::invalid("chat.title", "must be 1 to 200 characters, not blank"))?;
    validate::labels(&chat.labels).map_err(|e| relabel(e, "chat."))?;
    let raw = obj
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("messages", "must be an array of messages"))?;
    if raw.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "must contain at least one message",
        ));
    }
    if raw.len() > MAX_IMPORT_MESSAGES {
        return Err(ApiError::invalid(
            "messages",
            format!("must contain at most {MAX_IMPORT_MESSAGES} messages"),
        ));
    }
    let mut out = Vec::with_capacity(raw.len() + 1);
    // Unanswered tool calls so far: id → (position, name).
    let mut open: HashMap<String, String> = HashMap::new();
    let mut open_order: Vec<String> = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        let at = format!("messages[{i}]");
        let m = m
            .as_object()
            .ok_or_else(|| ApiError::invalid(at.clone(), "must be a message object"))?;
        let role: ChatRole = field(m.get("role"), &format!("{at}.role"))?;
        let visibility: Visibility = match m.get("visibility") {
            None | Some(Value::Null) => Visibility::Both,
            Some(v) => match serde_json::from_value::<Visibility>(v.clone()) {
                Ok(v @ (Visibility::Both | Visibility::User)) => v,
                _ => {
                    return Err(ApiError::invalid(
                        format!("{at}.visibility"),
                        "must be both or user",
                    ));
                }
            },
        };
        let parts = m.get("content").and_then(Value::as_array).ok_or_else(|| {
            ApiError::invalid(format!("{at}.content"), "must be an array of parts")
        })?;
        if parts.is_empty() || parts.len() > validate::MAX_MESSAGE_PARTS {
            return Err(ApiError::invalid(
                format!("{at}.content"),
                format!("must contain 1 to {} parts", validate::MAX_MESSAGE_PARTS),
            ));
        }
        let mut content = Vec::with_capacity(parts.len());
        for (j, p) in parts.iter().enumerate() {
            let pat = format!("{at}.content[{j}]");
            let part: MessagePart = serde_json::from_value(p.clone())
                .map_err(|e| ApiError::invalid(pat.clone(), format!("not a message part: {e}")))?;
            if !part_allowed(role, &part) {
                return Err(ApiError::invalid(
                    pat,
                    format!("a {} message cannot carry this part type", role.as_str()),
                ));
            }
            let mut part = export_part(&part);
            chatd_core::sanitize::part(&mut part);
            match &part {
                MessagePart::ToolCall {
                    tool_call_id,
                    tool_name,
                    ..
                } => {
                    if open
                        .insert(tool_call_id.clone(), tool_name.clone())
                        .is_some()
                    {
                        return Err(ApiError::invalid(
                            format!("{pat}.tool_call_id"),
                            "repeats an unanswered tool call's id",
                        ));
                    }
                    open_order.push(tool_call_id.clone());
                }
                MessagePart::ToolResult { tool_call_id, .. } => {
                    if open.remove(tool_call_id).is_none() {
                        return Err(ApiError::invalid(
                            format!("{pat}.tool_call_id"),
                            "answers no earlier unanswered tool call",
                        ));
                    }
                    open_order.retain(|id| id != tool_call_id);
                }
                _ => {}
            }
            content.push(part);
        }
        if role == ChatRole::User {
            let text: usize = content.iter().map(MessagePart::text_len).sum();
            if text > validate::MAX_MESSAGE_TEXT_BYTES {
                return Err(ApiError::invalid(
                    format!("{at}.content"),
                    format!(
                        "total text must be at most {} bytes (got {text})",
                        validate::MAX_MESSAGE_TEXT_BYTES
                    ),
                ));
            }
        }
        if role != ChatRole::Tool && role != ChatRole::Assistant && !open.is_empty() {
            return Err(ApiError::invalid(
                at,
                "follows tool calls that were never answered",
            ));
        }
        let finish_reason = match (role, m.get("finish_reason")) {
            (ChatRole::Assistant, Some(v)) if !v.is_null() => Some(
                serde_json::from_value::<FinishReason>(v.clone()).map_err(|_| {
                    ApiError::invalid(format!("{at}.finish_reason"), "unknown finish reason")
                })?,
            ),
            _ => None,
        };
        let mut message = NewMessage::new(role, content);
        message.visibility = visibility;
        message.finish_reason = finish_reason;
        if role == ChatRole::User {
            message.created_by = Some(owner);
        }
        out.push(message);
    }
    if !open_order.is_empty() {
        let results = open_order
            .iter()
            .map(|id| {
                MessagePart::synthetic_result(
                    &chatd_core::ToolCallRef {
                        tool_call_id: id.clone(),
                        tool_name: open[id].clone(),
                    },
                    chatd_core::CANCELLED_TOOL_RESULT,
                )
            })
            .collect();
        out.push(NewMessage::tool(results));
    }
    Ok((title, chat.labels, out))
}

/// `value` as a `T`, or `400` naming `name`.
fn field<T: serde::de::DeserializeOwned>(value: Option<&Value>, name: &str) -> ApiResult<T> {
    let value = value.ok_or_else(|| ApiError::invalid(name, "is required"))?;
    serde_json::from_value(value.clone()).map_err(|e| ApiError::invalid(name, e.to_string()))
}

/// A validation error of `labels…` renamed under `prefix` (`chat.labels`).
fn relabel(err: ApiError, prefix: &str) -> ApiError {
    let v = err.body().validations.first();
    let (f, d) = v
        .map(|v| (v.field.clone(), v.detail.clone()))
        .unwrap_or_else(|| ("labels".into(), "invalid labels".into()));
    ApiError::invalid(format!("{prefix}{f}"), d)
}

/// The part types a message of `role` may carry in an import.
fn part_allowed(role: ChatRole, part: &MessagePart) -> bool {
    use MessagePart as P;
    match role {
        ChatRole::User => matches!(part, P::Text { .. } | P::File { .. }),
        ChatRole::Assistant => matches!(
            part,
            P::Text { .. } | P::Reasoning { .. } | P::ToolCall { .. } | P::File { .. }
        ),
        ChatRole::Tool => matches!(part, P::ToolResult { .. } | P::ToolApproval { .. }),
        ChatRole::System => matches!(part, P::Text { .. } | P::ContextCleared),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_safe() {
        assert_eq!(safe_file_name("Plans for 2027"), "Plans for 2027");
        assert_eq!(safe_file_name("a/b\\c\"d"), "a_b_c_d");
        assert_eq!(safe_file_name("..."), "chat");
        assert_eq!(safe_file_name("ünïcode"), "_n_code");
        assert_eq!(safe_file_name(&"x".repeat(300)).len(), 100);
    }

    #[test]
    fn code_fences_outgrow_backticks() {
        assert_eq!(code("a"), "` a `");
        assert_eq!(code("a``b"), "``` a``b ```");
    }

    #[test]
    fn an_import_answers_the_calls_it_ends_with() {
        let doc = serde_json::json!({
            "format": FORMAT, "version": 1, "chat": {"title": "t"},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": [{"type": "tool-call", "tool_call_id": "c1", "tool_name": "f", "args": "{}"}]},
            ]
        });
        let (_, _, messages) = parse_import(&doc, Uuid::nil()).unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[2].role, Some(ChatRole::Tool));
        assert!(matches!(&messages[2].content[0],
            MessagePart::ToolResult { tool_call_id, is_error: true, .. } if tool_call_id == "c1"));
    }
}
