//! A user's usage of the period, and the budget refusal of the routes that
//! start a turn (API.md "Limits, budgets and the token lifecycle":
//! "Budgets" and `GET /api/v2/users/{user}/usage`).
//!
//! The ledger is kept by the database ([`chatd_store::usage`]):
//! every model call of the user's chats (answers, compaction summaries,
//! titles, sub-agents) is counted in the calendar month (UTC) its result
//! committed in. The worker checks the budgets before every model call; the
//! API refuses a chat creation, send, edit or regenerate of an owner at or
//! over a budget with `429` before it changes anything
//! ([`refuse_over_budget`]).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chatd_core::limits::UserLimits;
use chatd_store::usage::{self as ledger, Exceeded};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::AppState;
use crate::auth::{Caller, User};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E429};
use crate::extract::PathParams;
use crate::users::target_user;

/// Body of `GET /api/v2/users/{user}/usage`: the current period (calendar
/// month, UTC) and the user's effective limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserUsage {
    /// First instant of the period (the month's first day, 00:00 UTC).
    pub period_start: DateTime<Utc>,
    /// First instant after it, when the budgets reset.
    pub period_end: DateTime<Utc>,
    /// Spend of the period in micro-dollars (from model prices; calls of
    /// models without prices count 0).
    pub spent_micros: i64,
    /// Prompt tokens of the period (uncached input plus cache reads and
    /// writes).
    pub input_tokens: i64,
    /// Output tokens of the period (reasoning included).
    pub output_tokens: i64,
    /// The user's chats a runner holds now.
    pub running_chats: i64,
    /// Bytes of the user's files.
    pub storage_bytes: i64,
    /// The effective limits (the user's overrides over the server's
    /// defaults); the token budget counts `input_tokens + output_tokens`.
    pub limits: UserLimits,
}

/// `GET /api/v2/users/{user}/usage` (the user themselves, or an admin;
/// `{user}` is a user id or `me`).
///
/// # Errors
/// `400` naming `user` when it is neither a UUID nor `me`; `403` when a
/// member names someone else; `404` for an unknown user.
#[utoipa::path(
    get, path = "/api/v2/users/{user}/usage", tag = "users",
    params(("user" = String, Path, description = "User id, or `me`")),
    responses((status = 200, description = "The user's usage of the current period", body = UserUsage), E400, E401, E403, E404, E429)
)]
pub async fn get_user_usage(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<UserUsage>> {
    let user_id = target_user(&caller, &params)?;
    let report = ledger::report(state.store().pool(), user_id)
        .await?
        .ok_or_else(|| ApiError::not_found("User not found."))?;
    let usage = report.owner.usage;
    let limits = state.options().limits.resolve(&report.owner.overrides);
    Ok(Json(UserUsage {
        period_start: usage.period_start,
        period_end: usage.period_end(),
        spent_micros: usage.spent_micros,
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        running_chats: report.running_chats,
        storage_bytes: report.storage_bytes,
        limits,
    }))
}

/// `429` when `owner` (the authenticated chat owner: sends, edits and
/// regenerates are owner-only, a creation's owner is the caller) has
/// reached a budget of the period: what a chat creation, send, edit or
/// regenerate answers, before it changes anything. No read at all when
/// the owner has no budget; else one indexed read of the period's ledger
/// rows (the limits were read with the caller's token).
///
/// # Errors
/// `429` whose `detail` names the budget, what was used of it and when it
/// resets; database errors.
pub(crate) async fn refuse_over_budget(state: &AppState, owner: &User) -> ApiResult<()> {
    let limits = &owner.limits;
    if limits.monthly_budget_micros.is_none() && limits.monthly_token_budget.is_none() {
        return Ok(());
    }
    let period = ledger::period(state.store().pool(), owner.id).await?;
    match ledger::exceeded(limits, &period) {
        Some(exceeded) => Err(over_budget(&exceeded)),
        None => Ok(()),
    }
}

/// The `429` of a used-up budget.
pub(crate) fn over_budget(exceeded: &Exceeded) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "Usage budget exceeded.")
        .with_detail(exceeded.message())
}

/// [`refuse_over_budget`] for a send by `owner` to `chat` with
/// `client_message_id` and the request's `fingerprint`: over
/// budget, a repeat of an earlier send with the same key and body still
/// answers with that send's stored response (API.md "Idempotency": a
/// repeat changes nothing and returns the first response), returned as
/// `Ok(Some(response))`; `Ok(None)` within budget.
///
/// # Errors
/// As [`refuse_over_budget`].
pub(crate) async fn refuse_send_over_budget(
    state: &AppState,
    owner: &User,
    chat: &chatd_store::Chat,
    client_message_id: Option<&str>,
    fingerprint: &[u8],
) -> ApiResult<Option<serde_json::Value>> {
    let refused = match refuse_over_budget(state, owner).await {
        Ok(()) => return Ok(None),
        Err(refused) => refused,
    };
    if let Some(key) = client_message_id
        && let Some((hash, response)) = chatd_store::send_receipts::select::<serde_json::Value>(
            state.store().pool(),
            chat.id,
            key,
        )
        .await?
        && hash == fingerprint
    {
        return Ok(Some(response));
    }
    Err(refused)
}
