//! MCP server routes (API.md "Admin routes (providers, models, tools)"):
//! `/api/v2/chats/mcp-servers`. `command`, `args`, `env`, `url` and
//! `headers` (which hold credentials and say where and how the server runs)
//! are returned to admins only: members get the fields they pick a server
//! by (API.md "Limits, budgets and the token lifecycle").

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::found;
use crate::app::AppState;
use crate::auth::{Admin, AdminTarget, Caller};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E409, E413, E415};
use crate::extract::{self, double_option};
use crate::validate;
use chatd_core::{McpTransport, RequireApproval};
use chatd_store::admin::mcp_servers::{self, McpServerError};
use chatd_store::admin::{McpServerDef, McpServerRow, redact_url};

/// The `404` message of an unknown MCP server id.
const NOT_FOUND: &str = "MCP server not found.";

/// `McpServer`. The fields marked "admins only" are absent for members.
/// `Debug` prints no `env` or `headers` value.
#[derive(Clone, Serialize, ToSchema)]
pub struct McpServer {
    /// MCP server id.
    pub id: Uuid,
    /// Unique slug; tools are offered to the model as `<slug>__<tool>`.
    pub slug: String,
    /// Display name.
    pub display_name: String,
    /// Transport.
    pub transport: McpTransport,
    /// Command (stdio; `null` for streamable_http); admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub command: Option<Option<String>>,
    /// Arguments (stdio); admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Environment (stdio); admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// URL (streamable_http; `null` for stdio); admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub url: Option<Option<String>>,
    /// HTTP headers (streamable_http); admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Whether chats may use it.
    pub enabled: bool,
    /// Which tools need a person's approval before a call runs: `"never"`,
    /// `"always"`, or the server's own tool names (without `<slug>__`).
    #[schema(value_type = Value)]
    pub require_approval: RequireApproval,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("id", &self.id)
            .field("slug", &self.slug)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.as_ref().map(redacted))
            .field(
                "url",
                &self.url.as_ref().map(|u| u.as_deref().map(redact_url)),
            )
            .field("headers", &self.headers.as_ref().map(redacted))
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// `map`'s names with `<redacted>` values, for `Debug`.
fn redacted(map: &BTreeMap<String, String>) -> BTreeMap<&str, &'static str> {
    map.keys().map(|k| (k.as_str(), "<redacted>")).collect()
}

impl McpServer {
    /// The wire view of `r`: everything for an admin (`full`), without
    /// `command`, `args`, `env`, `url` and `headers` otherwise.
    fn from_row(r: McpServerRow, full: bool) -> Self {
        let def = r.def;
        McpServer {
            id: def.id,
            slug: def.slug,
            display_name: def.display_name,
            transport: def.transport,
            command: full.then_some(def.command),
            args: full.then_some(def.args),
            env: full.then_some(def.env),
            url: full.then_some(def.url),
            headers: full.then_some(def.headers),
            enabled: def.enabled,
            require_approval: def.require_approval,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// Body of `POST /api/v2/chats/mcp-servers`. `Debug` prints no `env` or
/// `headers` value.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMcpServerRequest {
    /// 1–64 characters of `a-z`, `0-9`, `_`, `-`, starting with a letter or
    /// digit, without `__`.
    #[schema(schema_with = validate::slug_schema)]
    pub slug: String,
    /// Display name.
    #[serde(default)]
    #[schema(schema_with = validate::name_schema)]
    pub display_name: Option<String>,
    /// Transport.
    pub transport: McpTransport,
    /// Required for stdio.
    #[serde(default)]
    #[schema(schema_with = validate::mcp_command_schema)]
    pub command: Option<String>,
    /// Arguments (stdio).
    #[serde(default)]
    #[schema(schema_with = validate::mcp_args_schema)]
    pub args: Option<Vec<String>>,
    /// Environment (stdio).
    #[serde(default)]
    #[schema(schema_with = validate::mcp_map_schema)]
    pub env: Option<BTreeMap<String, String>>,
    /// Required for streamable_http (http or https).
    #[serde(default)]
    #[schema(schema_with = validate::nullable_url_schema)]
    pub url: Option<String>,
    /// HTTP headers (streamable_http).
    #[serde(default)]
    #[schema(schema_with = validate::mcp_map_schema)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `"never"` (default), `"always"` or an array of the server's own tool
    /// names (1 to 128 bytes each, at most 256) whose calls need approval.
    #[serde(default)]
    #[schema(schema_with = validate::require_approval_schema)]
    pub require_approval: Option<RequireApproval>,
}

/// Body of `PATCH /api/v2/chats/mcp-servers/{id}`; absent fields are kept,
/// `null` clears `command` or `url`. `Debug` prints no `env` or `headers`
/// value.
#[derive(Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMcpServerRequest {
    /// Slug.
    #[serde(default)]
    #[schema(schema_with = validate::nullable_slug_schema)]
    pub slug: Option<String>,
    /// Display name.
    #[serde(default)]
    #[schema(schema_with = validate::name_schema)]
    pub display_name: Option<String>,
    /// Transport.
    #[serde(default)]
    pub transport: Option<McpTransport>,
    /// Command; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = validate::mcp_command_schema)]
    pub command: Option<Option<String>>,
    /// Arguments.
    #[serde(default)]
    #[schema(schema_with = validate::mcp_args_schema)]
    pub args: Option<Vec<String>>,
    /// Environment.
    #[serde(default)]
    #[schema(schema_with = validate::mcp_map_schema)]
    pub env: Option<BTreeMap<String, String>>,
    /// URL; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = validate::nullable_url_schema)]
    pub url: Option<Option<String>>,
    /// HTTP headers.
    #[serde(default)]
    #[schema(schema_with = validate::mcp_map_schema)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Enabled.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Which tools need approval (see [`CreateMcpServerRequest`]).
    #[serde(default)]
    #[schema(schema_with = validate::require_approval_schema)]
    pub require_approval: Option<RequireApproval>,
}

impl CreateMcpServerRequest {
    /// The server this request defines, with id `id`; absent fields take
    /// their defaults (no display name, no args, env or headers, enabled,
    /// approval `never`). Not validated: see [`validate_mcp`]. The admin
    /// route and the config file's `[[mcp_servers]]` entries (which are this
    /// type, [`crate::config_file::McpServerEntry`]) both build through it.
    pub(crate) fn into_def(self, id: Uuid) -> McpServerDef {
        McpServerDef {
            id,
            slug: self.slug,
            display_name: self.display_name.unwrap_or_default(),
            transport: self.transport,
            command: self.command,
            args: self.args.unwrap_or_default(),
            env: self.env.unwrap_or_default(),
            url: self.url,
            headers: self.headers.unwrap_or_default(),
            enabled: self.enabled.unwrap_or(true),
            require_approval: self.require_approval.unwrap_or_default(),
        }
    }
}

impl std::fmt::Debug for CreateMcpServerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateMcpServerRequest")
            .field("slug", &self.slug)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.as_ref().map(redacted))
            .field("url", &self.url.as_deref().map(redact_url))
            .field("headers", &self.headers.as_ref().map(redacted))
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for UpdateMcpServerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateMcpServerRequest")
            .field("slug", &self.slug)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.as_ref().map(redacted))
            .field(
                "url",
                &self.url.as_ref().map(|u| u.as_deref().map(redact_url)),
            )
            .field("headers", &self.headers.as_ref().map(redacted))
            .finish_non_exhaustive()
    }
}

/// Checks an MCP server slug (see [`CreateMcpServerRequest::slug`]).
///
/// # Errors
/// A description of the rule broken.
pub fn validate_slug(slug: &str) -> Result<(), String> {
    let mut chars = slug.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok =
        chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if first_ok && rest_ok && slug.len() <= 64 && !slug.contains("__") {
        Ok(())
    } else {
        Err("must be 1 to 64 characters of a-z, 0-9, '_' or '-', start with a letter or digit and not contain '__'".into())
    }
}

/// Checks a whole MCP server definition.
///
/// # Errors
/// `400` naming the field.
pub(crate) fn validate_mcp(def: &McpServerDef) -> ApiResult<()> {
    validate_slug(&def.slug).map_err(|e| ApiError::invalid("slug", e))?;
    validate::name(&def.display_name, "display_name")?;
    match def.transport {
        McpTransport::Stdio => {
            if def.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                return Err(ApiError::invalid(
                    "command",
                    "required for the stdio transport",
                ));
            }
        }
        McpTransport::StreamableHttp => {
            if def.url.is_none() {
                return Err(ApiError::invalid(
                    "url",
                    "required for the streamable_http transport",
                ));
            }
        }
    }
    if let Some(url) = def.url.as_deref() {
        validate::http_url(url, "url")?;
    }
    if def.command.as_deref().is_some_and(|c| c.len() > 4096) {
        return Err(ApiError::invalid("command", "must be at most 4096 bytes"));
    }
    if def.args.len() > 256 {
        return Err(ApiError::invalid("args", "at most 256 arguments"));
    }
    if let Some(i) = def.args.iter().position(|a| a.len() > 4096) {
        return Err(ApiError::invalid(
            format!("args[{i}]"),
            "must be at most 4096 bytes",
        ));
    }
    for (field, map) in [("env", &def.env), ("headers", &def.headers)] {
        if map.len() > 256 {
            return Err(ApiError::invalid(field, "at most 256 entries"));
        }
        if map.keys().any(|k| k.is_empty() || k.len() > 256) {
            return Err(ApiError::invalid(field, "keys must be 1 to 256 bytes"));
        }
        if let Some(k) = map.keys().find(|k| map[*k].len() > 4096) {
            return Err(ApiError::invalid(
                format!("{field}.{k}"),
                "values must be at most 4096 bytes",
            ));
        }
    }
    if let RequireApproval::Tools(names) = &def.require_approval {
        if names.len() > 256 {
            return Err(ApiError::invalid(
                "require_approval",
                "at most 256 tool names",
            ));
        }
        if let Some(i) = names.iter().position(|n| n.is_empty() || n.len() > 128) {
            return Err(ApiError::invalid(
                format!("require_approval[{i}]"),
                "tool names must be 1 to 128 bytes",
            ));
        }
    }
    Ok(())
}

/// `GET /api/v2/chats/mcp-servers` (`command`, `args`, `env`, `url` and
/// `headers` for admins only).
#[utoipa::path(
    get, path = "/api/v2/chats/mcp-servers", tag = "admin",
    responses((status = 200, description = "Every MCP server (members: without command, args, env, url and headers)", body = Vec<McpServer>), E401)
)]
pub async fn list_mcp_servers(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<McpServer>>> {
    let rows = mcp_servers::list(state.store().pool(), state.store().secrets()).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| McpServer::from_row(r, caller.is_admin()))
            .collect(),
    ))
}

/// `POST /api/v2/chats/mcp-servers` (admin). A duplicate slug is `409`.
#[utoipa::path(
    post, path = "/api/v2/chats/mcp-servers", tag = "admin",
    responses((status = 201, description = "Created", body = McpServer), E400, E401, E403, E409, E413, E415)
)]
pub async fn create_mcp_server(
    State(state): State<AppState>,
    _admin: Admin,
    body: extract::Json<CreateMcpServerRequest>,
) -> ApiResult<(StatusCode, Json<McpServer>)> {
    let def = body.read().await?.into_def(Uuid::new_v4());
    validate_mcp(&def)?;
    let row = mcp_servers::create(state.store().pool(), state.store().secrets(), &def).await?;
    Ok((StatusCode::CREATED, Json(McpServer::from_row(row, true))))
}

/// `PATCH /api/v2/chats/mcp-servers/{id}` (admin).
#[utoipa::path(
    patch, path = "/api/v2/chats/mcp-servers/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "MCP server id")),
    responses((status = 200, description = "Updated", body = McpServer), E400, E401, E403, E404, E409, E413, E415)
)]
pub async fn update_mcp_server(
    State(state): State<AppState>,
    AdminTarget { id }: AdminTarget,
    body: extract::Json<UpdateMcpServerRequest>,
) -> ApiResult<Json<McpServer>> {
    let req = body.read().await?;
    let (pool, secrets) = (state.store().pool(), state.store().secrets());
    let row = mcp_servers::update(pool, secrets, id, |current| {
        let def = McpServerDef {
            id,
            slug: req.slug.unwrap_or(current.slug),
            display_name: req.display_name.unwrap_or(current.display_name),
            transport: req.transport.unwrap_or(current.transport),
            command: req.command.unwrap_or(current.command),
            args: req.args.unwrap_or(current.args),
            env: req.env.unwrap_or(current.env),
            url: req.url.unwrap_or(current.url),
            headers: req.headers.unwrap_or(current.headers),
            enabled: req.enabled.unwrap_or(current.enabled),
            require_approval: req.require_approval.unwrap_or(current.require_approval),
        };
        validate_mcp(&def)?;
        Ok::<_, ApiError>(def)
    })
    .await?;
    Ok(Json(McpServer::from_row(found(row, NOT_FOUND)?, true)))
}

/// `DELETE /api/v2/chats/mcp-servers/{id}` (admin).
#[utoipa::path(
    delete, path = "/api/v2/chats/mcp-servers/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "MCP server id")),
    responses((status = 204, description = "Deleted"), E400, E401, E403, E404)
)]
pub async fn delete_mcp_server(
    State(state): State<AppState>,
    AdminTarget { id }: AdminTarget,
) -> ApiResult<StatusCode> {
    let deleted = mcp_servers::delete(state.store().pool(), id).await?;
    found(deleted.then_some(()), NOT_FOUND)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `409` for a slug another MCP server has; a database error as it is.
impl From<McpServerError> for ApiError {
    fn from(err: McpServerError) -> Self {
        match err {
            McpServerError::SlugTaken => {
                ApiError::conflict("An MCP server with this slug already exists.")
            }
            McpServerError::Database(err) => err.into(),
        }
    }
}
