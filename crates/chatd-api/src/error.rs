//! The one error type of the HTTP layer (API.md "Errors").
//!
//! Every non-2xx answer has the body `{"message", "detail"?, "validations"?}`
//! ([`ErrorBody`]). [`ApiError`] carries the status, that body and, for
//! server-side failures, the cause, whose whole chain is logged when the
//! response is produced (never sent to the client).
//!
//! Mapping of the state machine's errors ([`StoreError`]), as API.md fixes it:
//! transition not allowed → `409`; invalid execution state → `409` "Chat is
//! in an invalid state."; queue full → `429` with the maximum in `detail`;
//! chat, message or queued message not found → `404`; tool-result validation
//! → `400`; database failures → `500`, or `503` when they are transient
//! ([`StoreError::is_retryable`]: the pool exhausted, the database
//! unreachable, restarting or terminating the connection, a serialization
//! failure or a deadlock, a write refused by a server that became
//! read-only in a switchover), so that a client may retry; every such
//! `503` carries `Retry-After` (issue 36: a failover of the database answers
//! `503`s, never `500`s).
//!
//! The `E400` ... `E503` types are the same errors as OpenAPI responses:
//! handlers list the ones they answer in their `#[utoipa::path]`.

use std::error::Error as StdError;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chatd_core::{StateError, ToolResultErrorKind};
use chatd_store::StoreError;
use serde::{Deserialize, Serialize};
use utoipa::{IntoResponses, ToSchema};

/// The message of every `409` caused by a chat in an invalid execution state.
pub const INVALID_STATE_MESSAGE: &str = "Chat is in an invalid state.";

/// One invalid input field of a `400` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Validation {
    /// The offending field as a path into the request (`content[0].text`,
    /// `labels.team`), or the path or query parameter's name.
    pub field: String,
    /// What is wrong with it.
    pub detail: String,
}

/// Body of every non-2xx response (API.md "Errors").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Human-readable summary.
    pub message: String,
    /// More detail, when there is any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The invalid fields of a `400`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validations: Vec<Validation>,
}

/// An HTTP error: status, body and an optional server-side cause.
#[derive(Debug, thiserror::Error)]
#[error("{status}: {}", body.message)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    #[source]
    source: Option<Box<dyn StdError + Send + Sync>>,
    /// `Retry-After` in whole seconds, sent as a header (a `429` of the
    /// request rate limit).
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody {
                message: message.into(),
                detail: None,
                validations: Vec::new(),
            },
            source: None,
            retry_after: None,
        }
    }

    /// Adds a `Retry-After: <seconds>` header to the response.
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The `Retry-After` seconds, when set.
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// Adds a `detail`.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.body.detail = Some(detail.into());
        self
    }

    /// Adds one validation entry.
    #[must_use]
    pub fn with_validation(mut self, field: impl Into<String>, detail: impl Into<String>) -> Self {
        self.body.validations.push(Validation {
            field: field.into(),
            detail: detail.into(),
        });
        self
    }

    /// Attaches a server-side cause (logged, never sent).
    #[must_use]
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response body.
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }

    /// `400` naming one invalid field.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Invalid request.").with_validation(field, detail)
    }

    /// `400` for a malformed path parameter (invalid UUID, non-positive id).
    pub fn invalid_path(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Invalid path parameter.").with_validation(field, detail)
    }

    /// `400` for a malformed query parameter.
    pub fn invalid_query(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Invalid query parameter.")
            .with_validation(field, detail)
    }

    /// `401`: missing, unknown or expired token.
    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized.")
            .with_detail("A valid API token is required: `Authorization: Bearer <token>`.")
    }

    /// `403` with `message`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    /// `403` for a member on an admin route.
    pub fn admin_only() -> Self {
        Self::forbidden("This action requires the admin role.")
    }

    /// `403` for an owner-only chat mutation by someone else.
    pub fn owner_only() -> Self {
        Self::forbidden("Only the chat's owner can do this.")
            .with_detail("Sending, editing, promoting, submitting tool results and compacting run the agent with the owner's credentials.")
    }

    /// `403` for a mutation of a chat shared with the caller (API.md
    /// "Sign-in, search, sharing and export": shares are read only).
    pub fn shared_read_only() -> Self {
        Self::forbidden("This chat is shared with you read only.")
            .with_detail("Only its owner can change it.")
    }

    /// `404` with `message`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// `404` for a chat that does not exist or is not visible to the caller.
    pub fn chat_not_found() -> Self {
        Self::not_found("Chat not found.")
    }

    /// `409` with `message`.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// `400` for a mutation of an archived chat.
    pub fn archived() -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Chat is archived.")
            .with_detail("Unarchive the chat (PATCH with \"archived\": false) first.")
    }

    /// `413` for a body over the limit of `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large.")
            .with_detail(format!("The limit is {limit} bytes."))
    }

    /// `415` for a request body that is not declared `application/json` on
    /// a JSON route.
    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported media type.",
        )
        .with_detail("The request body must be JSON, sent with `Content-Type: application/json`.")
    }

    /// `500` with a logged cause.
    pub fn internal(source: impl StdError + Send + Sync + 'static) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error.").with_source(source)
    }

    /// `503` with `message`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            // The cause chain goes to the log only: it can name tables,
            // constraints and hosts that clients have no business seeing.
            let mut chain = String::new();
            let mut cause: Option<&(dyn StdError + 'static)> = match &self.source {
                Some(source) => Some(source.as_ref()),
                None => None,
            };
            while let Some(err) = cause {
                if !chain.is_empty() {
                    chain.push_str(": ");
                }
                chain.push_str(&err.to_string());
                cause = err.source();
            }
            if self.status == StatusCode::SERVICE_UNAVAILABLE {
                // Transient by definition (a failover, a restart, a full
                // pool): the client retries; not a bug to page anyone for.
                tracing::warn!(status = %self.status, message = %self.body.message, cause = %chain, "request failed");
            } else {
                tracing::error!(status = %self.status, message = %self.body.message, cause = %chain, "request failed");
            }
        }
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// `Retry-After` of a `503` for a database that cannot be reached (a
/// failover, a restart): 2 s, about the time a client's retry takes to
/// find the new primary once Patroni promoted one (README "Production
/// topology"; issue 36).
pub const DATABASE_RETRY_AFTER_SECS: u64 = 2;

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        StoreError::Database(err).into()
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        let transient = err.is_retryable();
        match err {
            StoreError::State(state) => state.into(),
            StoreError::Database(db) if !transient => ApiError::internal(db),
            StoreError::Database(db) => {
                let concurrent = matches!(
                    &db,
                    sqlx::Error::Database(e) if e.code().is_some_and(|c| c.starts_with("40"))
                );
                if concurrent {
                    ApiError::unavailable("Concurrent update; retry the request.")
                        .with_source(db)
                        .with_retry_after(1)
                } else {
                    ApiError::unavailable("Database unavailable.")
                        .with_source(db)
                        .with_retry_after(DATABASE_RETRY_AFTER_SECS)
                }
            }
            other if transient => ApiError::unavailable("Concurrent update; retry the request.")
                .with_source(other)
                .with_retry_after(1),
            other => ApiError::internal(other),
        }
    }
}

impl From<StateError> for ApiError {
    fn from(err: StateError) -> Self {
        match err {
            StateError::TransitionNotAllowed(e) => {
                // Name the state in the API's terms (status, archived,
                // queue) as well as the spec's shorthand.
                let state = match e.from.components() {
                    Some((status, archived, queued)) => format!(
                        "while the chat's status is {}{}{} ",
                        status.as_str(),
                        if archived { ", archived" } else { "" },
                        if queued { ", with queued messages" } else { "" },
                    ),
                    None => String::new(),
                };
                ApiError::conflict("The chat's current state does not allow this operation.")
                    .with_detail(format!(
                        "{} is not allowed {state}(execution state {}).",
                        e.transition, e.from
                    ))
            }
            StateError::InvalidState(_) => ApiError::conflict(INVALID_STATE_MESSAGE)
                .with_detail("Reconcile it with POST /chats/{chat}/reconcile-invalid."),
            StateError::ChatNotFound => ApiError::chat_not_found(),
            StateError::MessageNotFound { .. } => ApiError::not_found("Message not found."),
            StateError::QueuedMessageNotFound { .. } => {
                ApiError::not_found("Queued message not found.")
            }
            StateError::ChatNotRoot => {
                ApiError::new(StatusCode::BAD_REQUEST, "Only a root chat can be archived.")
                    .with_detail("Archive the root of the chat's family instead.")
            }
            StateError::EditedMessageNotUser { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "Only user messages can be edited.")
            }
            StateError::RegeneratedMessageNotAssistant { .. } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "Only assistant answers can be regenerated.",
            )
            .with_detail("Edit a user message to branch from it instead."),
            StateError::MessageQueueFull { max } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "Message queue is full.")
                    .with_detail(format!("A chat's queue holds at most {max} messages."))
            }
            StateError::ToolResult(e) => {
                let detail = match e.kind {
                    ToolResultErrorKind::Duplicate => {
                        format!("duplicate result for tool call {}", e.tool_call_id)
                    }
                    ToolResultErrorKind::Unexpected => {
                        format!("tool call {} is not pending", e.tool_call_id)
                    }
                    ToolResultErrorKind::Missing => {
                        format!("missing result for pending tool call {}", e.tool_call_id)
                    }
                    ToolResultErrorKind::InvalidJson => {
                        format!("output of tool call {} is not valid JSON", e.tool_call_id)
                    }
                    ToolResultErrorKind::ApprovalForClientTool => format!(
                        "tool call {} is a client tool call: answer it with output, not approved",
                        e.tool_call_id
                    ),
                    ToolResultErrorKind::OutputForApproval => format!(
                        "tool call {} waits for approval: answer it with approved, not output",
                        e.tool_call_id
                    ),
                };
                ApiError::new(StatusCode::BAD_REQUEST, "Invalid tool results.")
                    .with_detail(detail.clone())
                    .with_validation("results", detail)
            }
            StateError::InvalidInput { field, detail } => ApiError::invalid(field, detail),
            StateError::ChatFileCapExceeded { max } => ApiError::invalid(
                "content",
                format!("a chat can have at most {max} files attached"),
            ),
            StateError::ChatFileUnavailable { file_id } => ApiError::invalid(
                "content",
                format!("file {file_id} not found, or attached to another chat"),
            ),
        }
    }
}

/// Result alias of handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// `400`: bad input.
#[derive(IntoResponses)]
#[response(
    status = 400,
    description = "Bad input: malformed path or query parameter, invalid body (`validations` names each field), or a mutation of an archived chat"
)]
pub struct E400(#[allow(dead_code)] ErrorBody);

/// `401`: no valid token.
#[derive(IntoResponses)]
#[response(status = 401, description = "Missing, unknown or expired token")]
pub struct E401(#[allow(dead_code)] ErrorBody);

/// `403`: not allowed for this caller.
#[derive(IntoResponses)]
#[response(
    status = 403,
    description = "Admin-only route called by a member, or owner-only chat mutation called by someone else"
)]
pub struct E403(#[allow(dead_code)] ErrorBody);

/// `404`: not found or not visible.
#[derive(IntoResponses)]
#[response(
    status = 404,
    description = "Not found (or a chat that is not visible to the caller)"
)]
pub struct E404(#[allow(dead_code)] ErrorBody);

/// `409`: state conflict.
#[derive(IntoResponses)]
#[response(
    status = 409,
    description = "The current state does not allow it (message \"Chat is in an invalid state.\" for an invalid chat)"
)]
pub struct E409(#[allow(dead_code)] ErrorBody);

/// `413`: body too large.
#[derive(IntoResponses)]
#[response(status = 413, description = "Request body over the limit (1 MiB)")]
pub struct E413(#[allow(dead_code)] ErrorBody);

/// `415`: the body is not JSON.
#[derive(IntoResponses)]
#[response(
    status = 415,
    description = "The request body is not declared `Content-Type: application/json`"
)]
pub struct E415(#[allow(dead_code)] ErrorBody);

/// `429`: queue full.
#[derive(IntoResponses)]
#[response(
    status = 429,
    description = "The chat's queue is full (`detail` names the maximum)"
)]
pub struct E429(#[allow(dead_code)] ErrorBody);

/// `503`: not ready.
#[derive(IntoResponses)]
#[response(
    status = 503,
    description = "Database unreachable or migrations not applied"
)]
pub struct E503(#[allow(dead_code)] ErrorBody);
