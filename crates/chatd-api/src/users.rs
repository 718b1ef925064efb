//! User, token and replica routes (API.md "Authentication and
//! authorization", "Limits, budgets and the token lifecycle", "Details":
//! "Workers and replicas").
//!
//! `{user}` in a path is a user id or `me` ([`target_user`]). Admins may
//! create, list and change users, and list, create and revoke anyone's
//! tokens; a member may list, create and revoke their own tokens only
//! (`403` for anyone else, whether or not that user exists).
//!
//! Decisions where API.md is silent:
//! - `GET /api/v2/users` lists every user by `username`.
//! - An admin cannot disable themselves (`400` naming `disabled`): the
//!   caller of a `PATCH` is an enabled admin, so at least one admin stays
//!   enabled. (`CHATD_BOOTSTRAP_ADMIN_TOKEN` re-enables `admin` at start.)
//! - `GET .../tokens` lists the user's tokens newest first, expired ones
//!   included (`expires_at` in the past says so) until they are revoked;
//!   a revoked token is deleted, so it leaves the list.
//! - A member's token always expires, whoever creates it: without
//!   `lifetime_seconds` it lives `--max-member-token-lifetime`; more is
//!   `400` ([`auth::token_lifetime`]). An admin's token may be unlimited.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::{self, Admin, Caller, MAX_TOKEN_LIFETIME_SECONDS, Role, User};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E409, E413, E415, E429};
use crate::extract::{self, PathParams, double_option, parse_uuid};
use crate::validate;
use chatd_store::replicas::{self, ReplicaRow};
use chatd_store::tokens::TokenRow;
use chatd_store::users::UserPatch;
use chatd_store::{tokens, users};

/// Body of `POST /api/v2/users`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    /// Unique; 1–64 characters of letters, digits, `.`, `_`, `-`, starting
    /// with a letter or digit.
    #[schema(schema_with = username_schema)]
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
    #[schema(schema_with = validate::name_schema)]
    pub name: Option<String>,
    /// Lifetime in seconds, 1..=316224000 (ten years). Absent: no expiry
    /// for an admin's token; `--max-member-token-lifetime` for a member's,
    /// which may not ask for more (`400`).
    #[serde(default)]
    #[schema(schema_with = token_lifetime_schema)]
    pub lifetime_seconds: Option<i64>,
}

/// The `lifetime_seconds` of a new token: 1..=[`MAX_TOKEN_LIFETIME_SECONDS`]
/// (ten years).
const TOKEN_LIFETIME_SECONDS: validate::IntRange =
    validate::IntRange::new(1, MAX_TOKEN_LIFETIME_SECONDS);

/// [`TOKEN_LIFETIME_SECONDS`]'s schema, `null` allowed (same as absent).
fn token_lifetime_schema() -> utoipa::openapi::schema::Object {
    TOKEN_LIFETIME_SECONDS.nullable_schema()
}

/// `CreateUserRequest.username`'s schema: [`auth::USERNAME_PATTERN`].
fn username_schema() -> utoipa::openapi::schema::Object {
    let mut schema = validate::text_schema(1, 64, false);
    schema.pattern = Some(auth::USERNAME_PATTERN.to_owned());
    schema
}

/// `limits.max_running_chats`: `0..=2^31-1`.
const MAX_RUNNING_CHATS: validate::IntRange = validate::IntRange::new(0, i32::MAX as i64);
/// `limits.requests_per_minute`: `1..=2^31-1`.
const REQUESTS_PER_MINUTE: validate::IntRange = validate::IntRange::new(1, i32::MAX as i64);
/// `limits.monthly_budget_micros`, `monthly_token_budget`,
/// `max_storage_bytes`: `0..=2^63-1`.
const NON_NEGATIVE: validate::IntRange = validate::IntRange::new(0, i64::MAX);

fn max_running_chats_schema() -> utoipa::openapi::schema::Object {
    MAX_RUNNING_CHATS.nullable_schema()
}
fn requests_per_minute_schema() -> utoipa::openapi::schema::Object {
    REQUESTS_PER_MINUTE.nullable_schema()
}
fn non_negative_schema() -> utoipa::openapi::schema::Object {
    NON_NEGATIVE.nullable_schema()
}

/// A token as listed (never the token itself or its hash).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Token {
    /// Token id (the `{id}` of `DELETE /api/v2/users/{user}/tokens/{id}`).
    pub id: Uuid,
    /// Its label (may be empty).
    pub name: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Expiry (in the past for an expired token); `null`: never.
    pub expires_at: Option<DateTime<Utc>>,
    /// Last request made with it, to the minute; `null`: never used.
    pub last_used_at: Option<DateTime<Utc>>,
}

impl From<TokenRow> for Token {
    fn from(row: TokenRow) -> Self {
        Token {
            id: row.id,
            name: row.name,
            created_at: row.created_at,
            expires_at: row.expires_at,
            last_used_at: row.last_used_at,
        }
    }
}

/// Body of `PATCH /api/v2/users/{user}`: absent fields stay unchanged.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchUserRequest {
    /// Disable (`true`) or re-enable (`false`) the user; a disabled user's
    /// tokens answer `401`. An admin cannot disable themselves.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = bool)]
    pub disabled: Option<Option<bool>>,
    /// Limit overrides.
    #[serde(default)]
    pub limits: Option<LimitsPatch>,
}

/// The `limits` of [`PatchUserRequest`]: for each field, absent keeps it,
/// `null` returns it to the server default, a value overrides it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsPatch {
    /// Chats of the user running at once across all replicas, `>= 0`.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = max_running_chats_schema)]
    pub max_running_chats: Option<Option<i32>>,
    /// API requests per minute (per replica), `>= 1`.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = requests_per_minute_schema)]
    pub requests_per_minute: Option<Option<i32>>,
    /// Monthly spend budget in micro-dollars, `>= 0`.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = non_negative_schema)]
    pub monthly_budget_micros: Option<Option<i64>>,
    /// Monthly token budget (input + output tokens), `>= 0`.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = non_negative_schema)]
    pub monthly_token_budget: Option<Option<i64>>,
    /// Bytes of files the user keeps, `>= 0`.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = non_negative_schema)]
    pub max_storage_bytes: Option<Option<i64>>,
}

impl PatchUserRequest {
    /// Checks the ranges and turns the request into a [`UserPatch`].
    ///
    /// # Errors
    /// `400` naming every out-of-range field (`limits.<name>`), and
    /// `disabled` when it is `null`.
    fn into_patch(self) -> ApiResult<UserPatch> {
        let mut err: Option<ApiError> = None;
        let mut invalid = |field: &str, detail: &str| {
            let e = err
                .take()
                .unwrap_or_else(|| ApiError::invalid(field, detail));
            err = Some(if e.body().validations.iter().any(|v| v.field == field) {
                e
            } else {
                e.with_validation(field, detail)
            });
        };
        if self.disabled == Some(None) {
            invalid("disabled", "must be true or false");
        }
        let limits = self.limits.unwrap_or_default();
        let at_least =
            |value: Option<Option<i64>>, min: i64| value.flatten().is_some_and(|v| v < min);
        let widen = |v: Option<Option<i32>>| v.map(|v| v.map(i64::from));
        for (field, value, min) in [
            (
                "limits.max_running_chats",
                widen(limits.max_running_chats),
                MAX_RUNNING_CHATS.min,
            ),
            (
                "limits.requests_per_minute",
                widen(limits.requests_per_minute),
                REQUESTS_PER_MINUTE.min,
            ),
            (
                "limits.monthly_budget_micros",
                limits.monthly_budget_micros,
                NON_NEGATIVE.min,
            ),
            (
                "limits.monthly_token_budget",
                limits.monthly_token_budget,
                NON_NEGATIVE.min,
            ),
            (
                "limits.max_storage_bytes",
                limits.max_storage_bytes,
                NON_NEGATIVE.min,
            ),
        ] {
            if at_least(value, min) {
                invalid(
                    field,
                    &format!("must be at least {min}, or null for the default"),
                );
            }
        }
        if let Some(err) = err {
            return Err(err);
        }
        Ok(UserPatch {
            disabled: self.disabled.flatten(),
            max_running_chats: limits.max_running_chats,
            requests_per_minute: limits.requests_per_minute,
            monthly_budget_micros: limits.monthly_budget_micros,
            monthly_token_budget: limits.monthly_token_budget,
            max_storage_bytes: limits.max_storage_bytes,
        })
    }
}

/// A new token: the clear value is returned exactly once. `Debug` prints
/// no token.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenResponse {
    /// Token id.
    pub id: Uuid,
    /// The clear token (`chatd_...`): use it as `Authorization: Bearer
    /// <token>`.
    pub token: String,
}

impl std::fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenResponse")
            .field("id", &self.id)
            .field("token", &"<redacted>")
            .finish()
    }
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

/// The user id named by the `{user}` path parameter (a UUID, or `me` for
/// the caller; a route without the parameter means `me`), which `caller`
/// may act on: themselves, or anyone for an admin. Checks nothing about the
/// user's existence.
///
/// # Errors
/// `400` naming `user` when it is neither a UUID nor `me`; `403` when a
/// member names someone else (whether or not that user exists).
pub fn target_user(caller: &Caller, params: &PathParams) -> ApiResult<Uuid> {
    // The static route `/api/v2/users/me` has no `{user}`: it is `me`.
    let user = params.raw("user").unwrap_or("me");
    let user_id = if user == "me" {
        caller.id()
    } else {
        parse_uuid(user).ok_or_else(|| ApiError::invalid_path("user", "must be a UUID or `me`"))?
    };
    if user_id != caller.id() {
        caller.require_admin()?;
    }
    Ok(user_id)
}

/// `404` for a user id that names nobody.
fn user_not_found() -> ApiError {
    ApiError::not_found("User not found.")
}

/// `POST /api/v2/users` (admin).
#[utoipa::path(
    post, path = "/api/v2/users", tag = "users",
    responses((status = 201, description = "Created", body = User), E400, E401, E403, E409, E413, E415, E429)
)]
pub async fn create_user(
    State(state): State<AppState>,
    _admin: Admin,
    body: extract::Json<CreateUserRequest>,
) -> ApiResult<(StatusCode, Json<User>)> {
    let req = body.read().await?;
    auth::validate_username(&req.username).map_err(|e| ApiError::invalid("username", e))?;
    match users::insert(state.store().pool(), &req.username, req.role).await {
        Ok(row) => Ok((
            StatusCode::CREATED,
            Json(User::from_row(row, &state.options().limits)),
        )),
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
    responses((status = 201, description = "Created; the clear token is shown once", body = TokenResponse), E400, E401, E403, E404, E413, E415, E429)
)]
pub async fn create_user_token(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<CreateTokenRequest>,
) -> ApiResult<(StatusCode, Json<TokenResponse>)> {
    let user_id = target_user(&caller, &params)?;
    let req = body.read().await?;
    let name = req.name.unwrap_or_default();
    validate::name(&name, "name")?;
    if let Some(seconds) = req.lifetime_seconds {
        TOKEN_LIFETIME_SECONDS.check(seconds, "lifetime_seconds")?;
    }
    let pool = state.store().pool();
    let user = users::select(pool, user_id)
        .await?
        .ok_or_else(user_not_found)?;
    let lifetime = auth::token_lifetime(
        user.role,
        req.lifetime_seconds,
        state.options().limits.max_member_token_lifetime,
    )
    .map_err(|e| ApiError::invalid("lifetime_seconds", e))?;
    let token = auth::generate_token();
    let id = tokens::insert(pool, user_id, &name, &auth::hash_token(&token), lifetime).await?;
    Ok((StatusCode::CREATED, Json(TokenResponse { id, token })))
}

/// `GET /api/v2/users/{user}/tokens` (admin, or the user themselves): the
/// user's tokens, newest first, expired ones included; never the token.
#[utoipa::path(
    get, path = "/api/v2/users/{user}/tokens", tag = "users",
    params(("user" = String, Path, description = "User id, or `me`")),
    responses((status = 200, description = "The user's tokens, newest first", body = Vec<Token>), E400, E401, E403, E404, E429)
)]
pub async fn list_user_tokens(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Vec<Token>>> {
    let user_id = target_user(&caller, &params)?;
    let pool = state.store().pool();
    // One read each; a token created between them is listed or not, both
    // fine. The user check tells "no tokens" from "no such user".
    if users::select(pool, user_id).await?.is_none() {
        return Err(user_not_found());
    }
    let rows = tokens::list(pool, user_id).await?;
    Ok(Json(rows.into_iter().map(Token::from).collect()))
}

/// `DELETE /api/v2/users/{user}/tokens/{id}` (admin, or the user
/// themselves): revokes the token. Its next request answers `401`, and the
/// streams opened with it close within 10 s.
#[utoipa::path(
    delete, path = "/api/v2/users/{user}/tokens/{id}", tag = "users",
    params(
        ("user" = String, Path, description = "User id, or `me`"),
        ("id" = Uuid, Path, description = "Token id"),
    ),
    responses((status = 204, description = "Revoked"), E400, E401, E403, (status = 404, description = "No such token of this user (or revoked already)", body = crate::error::ErrorBody), E429)
)]
pub async fn delete_user_token(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<StatusCode> {
    let user_id = target_user(&caller, &params)?;
    let id = params.uuid("id")?;
    if tokens::delete(state.store().pool(), user_id, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("Token not found."))
    }
}

/// `GET /api/v2/users/me`.
#[utoipa::path(
    get, path = "/api/v2/users/me", tag = "users",
    responses((status = 200, description = "The authenticated user", body = User), E401, E429)
)]
pub async fn get_me(caller: Caller) -> Json<User> {
    Json(caller.user)
}

/// `GET /api/v2/users` (admin): every user, by `username`.
#[utoipa::path(
    get, path = "/api/v2/users", tag = "users",
    responses((status = 200, description = "Every user, by username", body = Vec<User>), E401, E403, E429)
)]
pub async fn list_users(
    State(state): State<AppState>,
    _admin: Admin,
) -> ApiResult<Json<Vec<User>>> {
    let rows = users::list(state.store().pool()).await?;
    let defaults = &state.options().limits;
    Ok(Json(
        rows.into_iter()
            .map(|row| User::from_row(row, defaults))
            .collect(),
    ))
}

/// `PATCH /api/v2/users/{user}` (admin): disables or re-enables a user and
/// sets or clears their limit overrides (see [`PatchUserRequest`]). A
/// request rate change applies from the user's next request; a disabled
/// user's tokens answer `401` from their next request.
#[utoipa::path(
    patch, path = "/api/v2/users/{user}", tag = "users",
    params(("user" = String, Path, description = "User id, or `me`")),
    responses((status = 200, description = "The updated user", body = User), E400, E401, E403, E404, E413, E415, E429)
)]
pub async fn patch_user(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<PatchUserRequest>,
) -> ApiResult<Json<User>> {
    let user_id = target_user(&caller, &params)?;
    caller.require_admin()?;
    let patch = body.read().await?.into_patch()?;
    if user_id == caller.id() && patch.disabled == Some(true) {
        return Err(ApiError::invalid(
            "disabled",
            "an admin cannot disable themselves (another admin can)",
        ));
    }
    // Two admins disabling each other at once: one at a time, and the
    // second, disabled by the first, is refused (401, as its next request
    // would be), so an enabled admin always stays.
    let row = match users::patch(state.store().pool(), caller.id(), user_id, &patch).await? {
        users::PatchOutcome::Updated(row) => row,
        users::PatchOutcome::NotFound => return Err(user_not_found()),
        users::PatchOutcome::CallerNotAdmin => return Err(ApiError::unauthorized()),
    };
    Ok(Json(User::from_row(row, &state.options().limits)))
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
