//! `/v1/conversations`: a conversation is a chat (`conv_<chat id>`, API.md
//! pinned details). Creating one never runs the model: the chat is created
//! idle (`N → W`) with the items as its history, and adding items appends
//! them (`AppendMessages`, idle chats only). `metadata` is the chat's
//! labels. Deleting one deletes the chat (idle chats only, as `DELETE
//! /chats/{chat}`: busy → `409`).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawQuery, State};
use chatd_core::ChatStatus;
use chatd_store::CreateChatInput;
use chatd_store::chats::MetadataChanges;
use serde_json::{Value, json};
use uuid::Uuid;

use super::items::{conversation_items, history_of, parse_input};
use crate::app::AppState;
use crate::auth::{Caller, readable_chat, require_owner, visible_chat};
use crate::error::{ApiError, ApiResult};
use crate::extract::{self, PathParams, QueryParams};

/// `conv_<chat id>` of chat `id`.
pub fn conversation_id(id: Uuid) -> String {
    format!("conv_{}", id.simple())
}

/// The chat a `conv_…` id (or a bare chat id) names.
///
/// # Errors
/// `404` when it names no chat.
pub fn chat_of(conversation: &str) -> ApiResult<Uuid> {
    let raw = conversation.strip_prefix("conv_").unwrap_or(conversation);
    crate::extract::parse_uuid(raw)
        .ok_or_else(|| ApiError::not_found(format!("Conversation '{conversation}' not found.")))
}

/// The conversation object of `chat`.
pub fn conversation_object(chat: &chatd_store::Chat) -> Value {
    json!({
        "id": conversation_id(chat.id),
        "object": "conversation",
        "created_at": chat.created_at.timestamp(),
        "metadata": chat.labels,
    })
}

/// `metadata` as labels: at most 16 pairs of strings (OpenAI's limit),
/// keys up to 64 and values up to 256 characters (chatd's labels).
pub fn metadata_labels(value: Option<&Value>, field: &str) -> ApiResult<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    match value {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            if map.len() > 16 {
                return Err(ApiError::invalid(field, "at most 16 keys"));
            }
            for (k, v) in map {
                let Some(v) = v.as_str() else {
                    return Err(ApiError::invalid(
                        format!("{field}.{k}"),
                        "must be a string",
                    ));
                };
                if k.is_empty() || k.chars().count() > 64 {
                    return Err(ApiError::invalid(
                        format!("{field}.{k}"),
                        "keys are 1 to 64 characters",
                    ));
                }
                if v.chars().count() > 256 {
                    return Err(ApiError::invalid(
                        format!("{field}.{k}"),
                        "values are at most 256 characters",
                    ));
                }
                labels.insert(k.clone(), v.to_owned());
            }
        }
        Some(_) => return Err(ApiError::invalid(field, "must be an object of strings")),
    }
    Ok(labels)
}

/// `POST /v1/conversations` `{items?, metadata?}` → `200` the conversation;
/// an idle chat whose history is the items.
pub async fn create_conversation(
    State(state): State<AppState>,
    caller: Caller,
    body: extract::Json<Value>,
) -> ApiResult<Json<Value>> {
    let body = body.read_or_default().await?;
    if !body.is_object() && !body.is_null() {
        return Err(ApiError::invalid("body", "must be a JSON object"));
    }
    let labels = metadata_labels(body.get("metadata"), "metadata")?;
    let history = match body.get("items") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.is_empty() => Vec::new(),
        Some(items) => history_of(&parse_input(items, "items")?, "items", caller.id())?,
    };
    let created = state
        .store()
        .create_chat(CreateChatInput {
            owner_id: caller.id(),
            labels,
            last_model_config_id: chatd_store::model_configs::default_id(state.store().pool())
                .await?,
            initial_messages: history,
            initial_status: Some(ChatStatus::Waiting),
            max_file_links: state.options().max_files_per_chat,
            ..Default::default()
        })
        .await?;
    Ok(Json(conversation_object(&created.chat)))
}

/// `GET /v1/conversations/{conversation}`.
pub async fn get_conversation(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Value>> {
    let id = chat_of(params.raw("conversation")?)?;
    let (chat, _) = readable_chat(&state, &caller, id).await?;
    Ok(Json(conversation_object(&chat)))
}

/// `POST /v1/conversations/{conversation}` `{metadata}`: replaces the
/// labels.
pub async fn update_conversation(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<Value>,
) -> ApiResult<Json<Value>> {
    let id = chat_of(params.raw("conversation")?)?;
    let chat = visible_chat(&state, &caller, id).await?;
    let body = body.read().await?;
    if body.get("metadata").is_none_or(Value::is_null) {
        return Err(ApiError::invalid("metadata", "is required"));
    }
    let labels = metadata_labels(body.get("metadata"), "metadata")?;
    require_owner(&caller, &chat)?;
    let mut locked = state.store().machine(id).lock().await?;
    let changes = MetadataChanges {
        labels: Some(labels),
        ..Default::default()
    };
    let chat = chatd_store::chats::update_metadata(locked.conn(), id, &changes).await?;
    locked.finish().await?;
    Ok(Json(conversation_object(&chat)))
}

/// `DELETE /v1/conversations/{conversation}` → `{id, object:
/// "conversation.deleted", deleted: true}`.
pub async fn delete_conversation(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Value>> {
    let id = chat_of(params.raw("conversation")?)?;
    let chat = visible_chat(&state, &caller, id).await?;
    require_owner(&caller, &chat)?;
    let mut locked = state.store().machine(id).lock().await?;
    if let Err(busy) = chatd_store::chats::delete_family(locked.conn(), id).await? {
        return Err(
            ApiError::conflict("Conversation is busy.").with_detail(format!(
                "chat {} is in execution state {}; cancel its response or wait until it is idle",
                busy.chat_id, busy.state
            )),
        );
    }
    locked.finish().await?;
    Ok(Json(
        json!({"id": conversation_id(id), "object": "conversation.deleted", "deleted": true}),
    ))
}

/// `GET /v1/conversations/{conversation}/items?limit=&order=&after=`: the
/// active branch's visible messages as items (`order` `asc` or `desc`,
/// default `desc`; `limit` 1..100, default 20; `after` an item id).
pub async fn list_items(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Value>> {
    let id = chat_of(params.raw("conversation")?)?;
    let query = QueryParams::parse(query.as_deref())?;
    let limit = match query.get("limit") {
        None => 20,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| ApiError::invalid_query("limit", "must be 1 to 100"))?,
    };
    let descending = match query.get("order") {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(_) => return Err(ApiError::invalid_query("order", "must be asc or desc")),
    };
    let after = query.get("after").map(str::to_owned);
    let (chat, _) = readable_chat(&state, &caller, id).await?;
    let messages = chatd_store::messages::visible(state.store().pool(), chat.id).await?;
    let mut items = items_of(&state, &chat, &messages).await?;
    if descending {
        items.reverse();
    }
    let start = match &after {
        Some(after) => items
            .iter()
            .position(|i| i["id"] == after.as_str())
            .map(|p| p + 1)
            .ok_or_else(|| ApiError::invalid_query("after", "names no item of the conversation"))?,
        None => 0,
    };
    let page: Vec<Value> = items.iter().skip(start).take(limit).cloned().collect();
    let has_more = items.len() > start + page.len();
    Ok(Json(list_object(page, has_more)))
}

/// `POST /v1/conversations/{conversation}/items` `{items}`: appends the
/// items to an idle conversation without running the model
/// (`AppendMessages`: `W`/`E0` → `W`; a busy chat → `409`) and answers
/// them as a list.
pub async fn create_items(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<Value>,
) -> ApiResult<Json<Value>> {
    let id = chat_of(params.raw("conversation")?)?;
    let chat = visible_chat(&state, &caller, id).await?;
    let body = body.read().await?;
    let items = body
        .get("items")
        .ok_or_else(|| ApiError::invalid("items", "is required"))?;
    if !items.is_array() {
        return Err(ApiError::invalid("items", "must be an array of items"));
    }
    let rows = history_of(&parse_input(items, "items")?, "items", caller.id())?;
    require_owner(&caller, &chat)?;
    let mut tx = crate::chats::begin(&state, id, true).await?;
    let inserted = tx.append_messages(rows).await?;
    tx.commit().await?;
    let data = items_of(&state, &chat, &inserted).await?;
    Ok(Json(list_object(data, false)))
}

/// OpenAI's list object of `data` (items with an `id`).
fn list_object(data: Vec<Value>, has_more: bool) -> Value {
    json!({
        "object": "list",
        "first_id": data.first().map(|i| i["id"].clone()),
        "last_id": data.last().map(|i| i["id"].clone()),
        "data": data,
        "has_more": has_more,
    })
}

/// The conversation items of `messages` of `chat`, in order
/// ([`conversation_items`] with the context of [`item_context`]).
async fn items_of(
    state: &AppState,
    chat: &chatd_store::Chat,
    messages: &[chatd_store::ChatMessage],
) -> ApiResult<Vec<Value>> {
    let (tools, results) = item_context(state, chat, messages).await?;
    Ok(messages
        .iter()
        .flat_map(|m| conversation_items(m, &tools, &results))
        .collect())
}

/// What the items of `messages` need to be told apart: the names of the
/// client tools of the chat (its dynamic tools and every response's
/// `tools`), and the results in `messages` by call id.
async fn item_context(
    state: &AppState,
    chat: &chatd_store::Chat,
    messages: &[chatd_store::ChatMessage],
) -> ApiResult<(
    std::collections::HashSet<String>,
    std::collections::HashMap<String, (Value, bool)>,
)> {
    let mut tools: std::collections::HashSet<String> =
        chat.dynamic_tools.iter().map(|t| t.name.clone()).collect();
    for response in chatd_store::responses::after(state.store().pool(), chat.id, 0).await? {
        tools.extend(response.tools.into_iter().flatten().map(|t| t.name));
    }
    let results = messages
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter_map(|p| match p {
            chatd_core::MessagePart::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => Some((tool_call_id.clone(), (result.clone(), *is_error))),
            _ => None,
        })
        .collect();
    Ok((tools, results))
}
