//! Read-only sharing of a chat with named users (API.md "Sign-in, search,
//! sharing and export").
//!
//! - `POST /chats/{chat}/shares {user_id}` or `{username}` (exactly one;
//!   the name is this server's extension, for people and the CLI) →
//!   `201 {user_id, username, created_at}`; sharing again with the same user
//!   answers the existing share. Unknown user → `400` naming the field;
//!   the owner themself → `400`.
//! - `GET /chats/{chat}/shares` → `200 [{user_id, username, created_at}]`,
//!   oldest first.
//! - `DELETE /chats/{chat}/shares/{user}` → `204`; no such share → `404`.
//!
//! Only the chat's owner manages its shares (`403` for an admin who is not
//! the owner, and for a user the chat is shared with; `404` for anyone who
//! cannot see the chat). A share covers the chat's sub-agents (chats whose
//! root it is). A user the chat is shared with reads it everywhere
//! ([`crate::auth::readable_chat`]: the chat, its messages, streams and
//! search) and lists it with `GET /chats?shared=true`; every mutation
//! answers them `403`. After a revoke the chat answers them `404`, and
//! their open streams of it close within 10 s
//! ([`crate::stream::admission`]).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::{self, Caller, ChatTarget, visible_chat};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E413, E415, E429};
use crate::extract::{self, PathParams};
use chatd_store::shares::{self, ShareRow};
use chatd_store::users;

/// Body of `POST /chats/{chat}/shares`: exactly one of the fields.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateShareRequest {
    /// The user to share the chat with.
    #[serde(default)]
    pub user_id: Option<Uuid>,
    /// Or their user name.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 64)]
    pub username: Option<String>,
}

/// A share of a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChatShare {
    /// The user the chat is shared with.
    pub user_id: Uuid,
    /// Their user name.
    pub username: String,
    /// When it was shared with them.
    pub created_at: DateTime<Utc>,
}

impl From<ShareRow> for ChatShare {
    fn from(row: ShareRow) -> Self {
        ChatShare {
            user_id: row.user_id,
            username: row.username,
            created_at: row.created_at,
        }
    }
}

/// `POST /api/v2/chats/{chat}/shares` (owner).
#[utoipa::path(
    post, path = "/api/v2/chats/{chat}/shares", tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id")),
    request_body = CreateShareRequest,
    responses(
        (status = 201, description = "Shared (or already shared: the existing share)", body = ChatShare),
        E400, E401, E403, E404, E413, E415, E429,
    )
)]
pub async fn create_share(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<CreateShareRequest>,
) -> ApiResult<(StatusCode, Json<ChatShare>)> {
    let chat_id = params.uuid("chat")?;
    let chat = visible_chat(&state, &caller, chat_id).await?;
    owner_manages(&caller, &chat)?;
    let req = body.read().await?;
    let pool = state.store().pool();
    let (field, user_id) = match (req.user_id, req.username.as_deref()) {
        (Some(id), None) => ("user_id", id),
        (None, Some(name)) => {
            auth::validate_username(name).map_err(|e| ApiError::invalid("username", e))?;
            let user = users::with_password_by_name(pool, name)
                .await?
                .ok_or_else(|| ApiError::invalid("username", "no user has this name"))?;
            ("username", user.0.id)
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "username",
                "give either user_id or username, not both",
            ));
        }
        (None, None) => {
            return Err(ApiError::invalid("user_id", "is required (or username)"));
        }
    };
    if user_id == chat.owner_id {
        return Err(ApiError::invalid(field, "is the chat's owner"));
    }
    let share = shares::insert(pool, chat_id, user_id, caller.id())
        .await?
        .ok_or_else(|| ApiError::invalid(field, "no such user"))?;
    Ok((StatusCode::CREATED, Json(share.into())))
}

/// `GET /api/v2/chats/{chat}/shares` (owner).
#[utoipa::path(
    get, path = "/api/v2/chats/{chat}/shares", tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses(
        (status = 200, description = "The chat's shares, oldest first", body = Vec<ChatShare>),
        E400, E401, E403, E404, E429,
    )
)]
pub async fn list_shares(
    State(state): State<AppState>,
    target: ChatTarget,
) -> ApiResult<Json<Vec<ChatShare>>> {
    owner_manages(&target.caller, &target.chat)?;
    let rows = shares::list(state.store().pool(), target.id()).await?;
    Ok(Json(rows.into_iter().map(ChatShare::from).collect()))
}

/// `DELETE /api/v2/chats/{chat}/shares/{user}` (owner): revokes a share.
#[utoipa::path(
    delete, path = "/api/v2/chats/{chat}/shares/{user}", tag = "chats",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("user" = String, Path, description = "The id of the user the chat is shared with (a UUID), or `me`"),
    ),
    responses(
        (status = 204, description = "Revoked: the chat answers that user 404 and their open streams of it close within 10 s"),
        E400, E401, E403, E404, E429,
    )
)]
pub async fn delete_share(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<StatusCode> {
    let chat_id = params.uuid("chat")?;
    // `me`, as in `/users/{user}`: the caller (who, as the owner, has no
    // share of their own chat: 404).
    let user_id = match params.raw("user")? {
        "me" => caller.id(),
        _ => params.uuid("user")?,
    };
    let chat = visible_chat(&state, &caller, chat_id).await?;
    owner_manages(&caller, &chat)?;
    if shares::delete(state.store().pool(), chat_id, user_id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("Share not found."))
    }
}

/// `403` unless `caller` owns `chat`: only the owner manages its shares
/// (an admin who is not the owner included).
fn owner_manages(caller: &Caller, chat: &chatd_store::Chat) -> ApiResult<()> {
    if chat.owner_id == caller.id() {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            "Only the chat's owner manages its shares.",
        ))
    }
}
