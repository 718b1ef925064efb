//! User, token and replica routes (API.md "Authentication and
//! authorization", "Details": "Workers and replicas").
//!
//! `{user}` in a path is a user id or `me`. Admins may create users and
//! tokens for anyone; a member may create tokens for themselves only (`403`
//! for anyone else, whether or not that user exists).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::{self, Admin, Caller, MAX_TOKEN_LIFETIME_SECONDS, Role, User};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E409, E413, E415};
use crate::extract::{self, PathParams, parse_uuid};
use crate::validate;
use chatd_store::queries::replicas::{self, ReplicaRow};
use chatd_store::queries::{tokens, users};

/// Body of `POST /api/v2/users`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    /// Unique; 1–64 characters of letters, digits, `.`, `_`, `-`.
    pub username: String,
    /// Role.
    pub role: Role,
}

/// Body of `POST /api/v2/users/{user}/tokens`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// A label for the token (at most 200 characters).
    #[serde(default)]
    pub name: Option<String>,
    /// Lifetime in seconds, 1..=316224000 (ten years); absent: no expiry.
    #[serde(default)]
    pub lifetime_seconds: Option<i64>,
}

/// A new token: the clear value is returned exactly once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenResponse {
    /// Token id.
    pub id: Uuid,
    /// The clear token (`chatd_...`): use it as `Authorization: Bearer
    /// <token>`.
    pub token: String,
}

/// A replica of the cluster.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Replica {
    /// Replica id: the `worker_id` it writes on the chats it owns.
    pub id: Uuid,
    /// Where other replicas reach its parts endpoint.
    pub advertise_url: String,
    /// Start time.
    pub started_at: DateTime<Utc>,
    /// Last refresh.
    pub last_seen_at: DateTime<Utc>,
}

impl From<ReplicaRow> for Replica {
    fn from(r: ReplicaRow) -> Self {
        Replica {
            id: r.id,
            advertise_url: r.advertise_url,
            started_at: r.started_at,
            last_seen_at: r.last_seen_at,
        }
    }
}

/// `POST /api/v2/users` (admin).
#[utoipa::path(
    post, path = "/api/v2/users", tag = "users",
    responses((status = 201, description = "Created", body = User), E400, E401, E403, E409, E413, E415)
)]
pub async fn create_user(
    State(state): State<AppState>,
    _admin: Admin,
    body: extract::Json<CreateUserRequest>,
) -> ApiResult<(StatusCode, Json<User>)> {
    let req = body.read().await?;
    auth::validate_username(&req.username).map_err(|e| ApiError::invalid("username", e))?;
    match users::insert(state.store().pool(), &req.username, req.role).await {
        Ok(row) => Ok((StatusCode::CREATED, Json(row.into()))),
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("23505") => Err(
            ApiError::conflict("A user with this username already exists."),
        ),
        Err(e) => Err(e.into()),
    }
}

/// `POST /api/v2/users/{user}/tokens` (admin, or the user themselves).
#[utoipa::path(
    post, path = "/api/v2/users/{user}/tokens", tag = "users",
    params(("user" = String, Path, description = "User id, or `me`")),
    responses((status = 201, description = "Created; the clear token is shown once", body = TokenResponse), E400, E401, E403, E404, E413, E415)
)]
pub async fn create_user_token(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<CreateTokenRequest>,
) -> ApiResult<(StatusCode, Json<TokenResponse>)> {
    let user = params.raw("user")?;
    let user_id = if user == "me" {
        caller.id()
    } else {
        parse_uuid(user).ok_or_else(|| ApiError::invalid_path("user", "must be a UUID or `me`"))?
    };
    if user_id != caller.id() {
        caller.require_admin()?;
    }
    let req = body.read().await?;
    let name = req.name.unwrap_or_default();
    validate::name(&name, "name")?;
    if req
        .lifetime_seconds
        .is_some_and(|s| !(1..=MAX_TOKEN_LIFETIME_SECONDS).contains(&s))
    {
        return Err(ApiError::invalid(
            "lifetime_seconds",
            format!("must be in 1..={MAX_TOKEN_LIFETIME_SECONDS}"),
        ));
    }
    let pool = state.store().pool();
    if users::select(pool, user_id).await?.is_none() {
        return Err(ApiError::not_found("User not found."));
    }
    let token = auth::generate_token();
    let id = tokens::insert(
        pool,
        user_id,
        &name,
        &auth::hash_token(&token),
        req.lifetime_seconds,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(TokenResponse { id, token })))
}

/// `GET /api/v2/users/me`.
#[utoipa::path(
    get, path = "/api/v2/users/me", tag = "users",
    responses((status = 200, description = "The authenticated user", body = User), E401)
)]
pub async fn get_me(caller: Caller) -> Json<User> {
    Json(caller.user)
}

/// `GET /api/v2/replicas` (admin): registered replicas, oldest first.
#[utoipa::path(
    get, path = "/api/v2/replicas", tag = "users",
    responses((status = 200, description = "Registered replicas", body = Vec<Replica>), E401, E403)
)]
pub async fn list_replicas(
    State(state): State<AppState>,
    _admin: Admin,
) -> ApiResult<Json<Vec<Replica>>> {
    let rows = replicas::list(state.store().pool()).await?;
    Ok(Json(rows.into_iter().map(Replica::from).collect()))
}
