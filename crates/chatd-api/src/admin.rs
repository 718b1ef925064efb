//! Admin routes: LLM providers, model configs and MCP server definitions
//! (API.md "Admin routes (providers, models, tools)" and "Details").
//!
//! Rules kept here:
//! - Mutations (`POST`, `PATCH`, `DELETE`) are admin-only (`403` for
//!   members). Listing is open to every authenticated user because members
//!   pick model configs and MCP servers for their chats; what a member sees
//!   never includes secrets (see below). `GET /api/v2/chats/models` lists the
//!   enabled model configs of enabled providers.
//! - Provider API keys are write-only: responses carry `has_api_key`.
//!   MCP server `env` and `headers` (which usually hold credentials) are
//!   returned to admins only.
//! - Exactly one enabled default model config whenever at least one config is
//!   enabled: setting `is_default: true` unsets the previous default in the
//!   same transaction, and when the default goes away (disabled, unset or
//!   deleted) the oldest enabled config becomes the default. Model-config
//!   mutations take one advisory lock so that concurrent admins cannot race
//!   on the unique default index.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{PathParams, double_option, read_json};
use crate::openapi::{E400, E401, E403, E404, E409, E413};
use crate::validate;
use chatd_store::queries::locks::{self, AdvisoryLock};
use chatd_store::queries::mcp_servers::{self, McpServerDef};
use chatd_store::queries::model_configs::{self, ModelConfigDef};
use chatd_store::queries::providers::{self, ProviderDef};
use chatd_store::{McpServerRow, ModelConfigRow, ProviderRow};

pub use chatd_core::{McpTransport, ModelOptions, ProviderKind, ReasoningEffortOptions};

/// A provider as returned by the API (`api_key` is never returned).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Provider {
    /// Provider id.
    pub id: Uuid,
    /// Kind.
    pub provider: ProviderKind,
    /// Display name.
    pub display_name: String,
    /// Base URL including the version prefix (`https://api.openai.com/v1`);
    /// `null` for the kind's default.
    pub base_url: Option<String>,
    /// Whether an API key is stored.
    pub has_api_key: bool,
    /// Whether its model configs may be used.
    pub enabled: bool,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

impl From<ProviderRow> for Provider {
    fn from(r: ProviderRow) -> Self {
        let def = r.def;
        Provider {
            id: def.id,
            provider: def.provider,
            display_name: def.display_name,
            base_url: def.base_url,
            has_api_key: def.api_key.as_deref().is_some_and(|k| !k.is_empty()),
            enabled: def.enabled,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// Body of `POST /api/v2/chats/providers`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProviderRequest {
    /// Kind.
    pub provider: ProviderKind,
    /// Display name (at most 200 characters).
    #[serde(default)]
    pub display_name: Option<String>,
    /// Base URL (http or https).
    #[serde(default)]
    pub base_url: Option<String>,
    /// API key (write-only; at most 4096 bytes).
    #[serde(default)]
    pub api_key: Option<String>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// Body of `PATCH /api/v2/chats/providers/{id}`; absent fields are kept,
/// `null` clears `base_url` or `api_key`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProviderRequest {
    /// Kind.
    #[serde(default)]
    pub provider: Option<ProviderKind>,
    /// Display name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Base URL; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub base_url: Option<Option<String>>,
    /// API key; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub api_key: Option<Option<String>>,
    /// Enabled.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// `ModelConfig`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelConfig {
    /// Model config id.
    pub id: Uuid,
    /// Provider.
    pub provider_id: Uuid,
    /// The provider's model name.
    pub model: String,
    /// Display name.
    pub display_name: String,
    /// Context window, in tokens (> 0).
    pub context_limit: i64,
    /// Percentage of the context at which the history is compacted (0..=100).
    pub compression_threshold: i32,
    /// The enabled default.
    pub is_default: bool,
    /// Whether it may be used.
    pub enabled: bool,
    /// Options.
    pub options: ModelOptions,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

impl From<ModelConfigRow> for ModelConfig {
    fn from(r: ModelConfigRow) -> Self {
        let def = r.def;
        ModelConfig {
            id: def.id,
            provider_id: def.provider_id,
            model: def.model,
            display_name: def.display_name,
            context_limit: def.context_limit,
            compression_threshold: def.compression_threshold,
            is_default: def.is_default,
            enabled: def.enabled,
            options: def.options,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// Body of `POST /api/v2/chats/model-configs`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateModelConfigRequest {
    /// An existing provider.
    pub provider_id: Uuid,
    /// The provider's model name (1–256 characters).
    pub model: String,
    /// Display name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Context window in tokens, > 0.
    pub context_limit: i64,
    /// 0..=100, default 70.
    #[serde(default)]
    pub compression_threshold: Option<i32>,
    /// Make it the default (unsets the previous one).
    #[serde(default)]
    pub is_default: Option<bool>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Options.
    #[serde(default)]
    pub options: Option<ModelOptions>,
}

/// Body of `PATCH /api/v2/chats/model-configs/{id}`; absent fields are kept.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateModelConfigRequest {
    /// Provider.
    #[serde(default)]
    pub provider_id: Option<Uuid>,
    /// Model name.
    #[serde(default)]
    pub model: Option<String>,
    /// Display name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Context window in tokens.
    #[serde(default)]
    pub context_limit: Option<i64>,
    /// 0..=100.
    #[serde(default)]
    pub compression_threshold: Option<i32>,
    /// Make it the default, or stop it being the default.
    #[serde(default)]
    pub is_default: Option<bool>,
    /// Enabled (disabling the default also unsets it).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Replaces the options.
    #[serde(default)]
    pub options: Option<ModelOptions>,
}

/// `McpServer`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct McpServer {
    /// MCP server id.
    pub id: Uuid,
    /// Unique slug; tools are offered to the model as `<slug>__<tool>`.
    pub slug: String,
    /// Display name.
    pub display_name: String,
    /// Transport.
    pub transport: McpTransport,
    /// Command (stdio).
    pub command: Option<String>,
    /// Arguments (stdio).
    pub args: Vec<String>,
    /// Environment (stdio); admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// URL (streamable_http).
    pub url: Option<String>,
    /// HTTP headers (streamable_http); admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Whether chats may use it.
    pub enabled: bool,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

impl McpServer {
    fn from_row(r: McpServerRow, with_secrets: bool) -> Self {
        let def = r.def;
        McpServer {
            id: def.id,
            slug: def.slug,
            display_name: def.display_name,
            transport: def.transport,
            command: def.command,
            args: def.args,
            env: with_secrets.then_some(def.env),
            url: def.url,
            headers: with_secrets.then_some(def.headers),
            enabled: def.enabled,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// Body of `POST /api/v2/chats/mcp-servers`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMcpServerRequest {
    /// 1–64 characters of `a-z`, `0-9`, `_`, `-`, starting with a letter or
    /// digit, without `__`.
    pub slug: String,
    /// Display name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Transport.
    pub transport: McpTransport,
    /// Required for stdio.
    #[serde(default)]
    pub command: Option<String>,
    /// Arguments (stdio).
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Environment (stdio).
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Required for streamable_http (http or https).
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP headers (streamable_http).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// Body of `PATCH /api/v2/chats/mcp-servers/{id}`; absent fields are kept,
/// `null` clears `command` or `url`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMcpServerRequest {
    /// Slug.
    #[serde(default)]
    pub slug: Option<String>,
    /// Display name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Transport.
    #[serde(default)]
    pub transport: Option<McpTransport>,
    /// Command; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub command: Option<Option<String>>,
    /// Arguments.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// URL; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub url: Option<Option<String>>,
    /// HTTP headers.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Enabled.
    #[serde(default)]
    pub enabled: Option<bool>,
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
    Ok(())
}

/// Checks a provider definition.
pub(crate) fn validate_provider(
    display_name: &str,
    base_url: Option<&str>,
    api_key: Option<&str>,
) -> ApiResult<()> {
    validate::name(display_name, "display_name")?;
    if let Some(url) = base_url {
        validate::http_url(url, "base_url")?;
    }
    if api_key.is_some_and(|k| k.len() > 4096) {
        return Err(ApiError::invalid("api_key", "must be at most 4096 bytes"));
    }
    Ok(())
}

/// An `openai-compat` provider has no default address: without `base_url`
/// the worker would send its requests (and API key) to OpenAI.
fn require_base_url(kind: ProviderKind, base_url: Option<&str>) -> ApiResult<()> {
    if kind == ProviderKind::OpenaiCompat && base_url.is_none() {
        return Err(ApiError::invalid(
            "base_url",
            "is required for an openai-compat provider",
        ));
    }
    Ok(())
}

/// Checks a model config definition (the provider's existence is checked by
/// the caller).
pub(crate) fn validate_model_config(def: &ModelConfigDef) -> ApiResult<()> {
    if def.model.trim().is_empty() || def.model.chars().count() > 256 {
        return Err(ApiError::invalid("model", "must be 1 to 256 characters"));
    }
    validate::name(&def.display_name, "display_name")?;
    if def.context_limit <= 0 {
        return Err(ApiError::invalid("context_limit", "must be positive"));
    }
    if !(0..=100).contains(&def.compression_threshold) {
        return Err(ApiError::invalid(
            "compression_threshold",
            "must be in 0..=100",
        ));
    }
    if def.is_default && !def.enabled {
        return Err(ApiError::invalid(
            "is_default",
            "a disabled model config cannot be the default",
        ));
    }
    def.options
        .validate()
        .map_err(|e| ApiError::invalid(e.field, e.detail))
}

/// `GET /api/v2/chats/providers`.
#[utoipa::path(
    get, path = "/api/v2/chats/providers", tag = "admin",
    responses((status = 200, description = "Every provider", body = Vec<Provider>), E401)
)]
pub async fn list_providers(
    State(state): State<AppState>,
    _caller: Caller,
) -> ApiResult<Json<Vec<Provider>>> {
    let rows = providers::list(state.store().pool()).await?;
    Ok(Json(rows.into_iter().map(Provider::from).collect()))
}

/// `POST /api/v2/chats/providers` (admin).
#[utoipa::path(
    post, path = "/api/v2/chats/providers", tag = "admin",
    request_body = CreateProviderRequest,
    responses((status = 201, description = "Created", body = Provider), E400, E401, E403, E413)
)]
pub async fn create_provider(
    State(state): State<AppState>,
    caller: Caller,
    body: Body,
) -> ApiResult<(StatusCode, Json<Provider>)> {
    caller.require_admin()?;
    let req: CreateProviderRequest = read_json(body, state.options().body_limit_bytes).await?;
    let display_name = req.display_name.unwrap_or_default();
    let api_key = req.api_key.filter(|k| !k.is_empty());
    validate_provider(&display_name, req.base_url.as_deref(), api_key.as_deref())?;
    require_base_url(req.provider, req.base_url.as_deref())?;
    let row = providers::upsert(
        state.store().pool(),
        &ProviderDef {
            id: Uuid::new_v4(),
            provider: req.provider,
            display_name,
            base_url: req.base_url,
            api_key,
            enabled: req.enabled.unwrap_or(true),
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// `PATCH /api/v2/chats/providers/{id}` (admin).
#[utoipa::path(
    patch, path = "/api/v2/chats/providers/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "Provider id")),
    request_body = UpdateProviderRequest,
    responses((status = 200, description = "Updated", body = Provider), E400, E401, E403, E404, E413)
)]
pub async fn update_provider(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: Body,
) -> ApiResult<Json<Provider>> {
    let id = params.uuid("id")?;
    caller.require_admin()?;
    let req: UpdateProviderRequest = read_json(body, state.options().body_limit_bytes).await?;
    let mut tx = state.store().pool().begin().await?;
    let current = providers::select_for_update(&mut tx, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Provider not found."))?
        .def;
    let def = ProviderDef {
        id,
        provider: req.provider.unwrap_or(current.provider),
        display_name: req.display_name.unwrap_or(current.display_name),
        base_url: req.base_url.unwrap_or(current.base_url),
        api_key: req
            .api_key
            .unwrap_or(current.api_key)
            .filter(|k| !k.is_empty()),
        enabled: req.enabled.unwrap_or(current.enabled),
    };
    validate_provider(
        &def.display_name,
        def.base_url.as_deref(),
        def.api_key.as_deref(),
    )?;
    require_base_url(def.provider, def.base_url.as_deref())?;
    let row = providers::upsert(&mut *tx, &def).await?;
    tx.commit().await?;
    Ok(Json(row.into()))
}

/// `DELETE /api/v2/chats/providers/{id}` (admin): also deletes its model
/// configs.
#[utoipa::path(
    delete, path = "/api/v2/chats/providers/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "Provider id")),
    responses((status = 204, description = "Deleted with its model configs"), E400, E401, E403, E404)
)]
pub async fn delete_provider(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<StatusCode> {
    let id = params.uuid("id")?;
    caller.require_admin()?;
    let mut tx = state.store().pool().begin().await?;
    locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
    if !providers::delete(&mut *tx, id).await? {
        return Err(ApiError::not_found("Provider not found."));
    }
    model_configs::ensure_default(&mut tx).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v2/chats/model-configs`.
#[utoipa::path(
    get, path = "/api/v2/chats/model-configs", tag = "admin",
    responses((status = 200, description = "Every model config", body = Vec<ModelConfig>), E401)
)]
pub async fn list_model_configs(
    State(state): State<AppState>,
    _caller: Caller,
) -> ApiResult<Json<Vec<ModelConfig>>> {
    let rows = model_configs::list(state.store().pool(), false).await?;
    Ok(Json(rows.into_iter().map(ModelConfig::from).collect()))
}

/// `GET /api/v2/chats/models`: the model configs a member may pick (enabled
/// configs of enabled providers).
#[utoipa::path(
    get, path = "/api/v2/chats/models", tag = "chats",
    responses((status = 200, description = "Enabled model configs", body = Vec<ModelConfig>), E401)
)]
pub async fn list_models(
    State(state): State<AppState>,
    _caller: Caller,
) -> ApiResult<Json<Vec<ModelConfig>>> {
    let rows = model_configs::list(state.store().pool(), true).await?;
    Ok(Json(rows.into_iter().map(ModelConfig::from).collect()))
}

/// `POST /api/v2/chats/model-configs` (admin).
#[utoipa::path(
    post, path = "/api/v2/chats/model-configs", tag = "admin",
    request_body = CreateModelConfigRequest,
    responses((status = 201, description = "Created", body = ModelConfig), E400, E401, E403, E413)
)]
pub async fn create_model_config(
    State(state): State<AppState>,
    caller: Caller,
    body: Body,
) -> ApiResult<(StatusCode, Json<ModelConfig>)> {
    caller.require_admin()?;
    let req: CreateModelConfigRequest = read_json(body, state.options().body_limit_bytes).await?;
    let def = ModelConfigDef {
        id: Uuid::new_v4(),
        provider_id: req.provider_id,
        model: req.model,
        display_name: req.display_name.unwrap_or_default(),
        context_limit: req.context_limit,
        compression_threshold: req.compression_threshold.unwrap_or(70),
        is_default: req.is_default.unwrap_or(false),
        enabled: req.enabled.unwrap_or(true),
        options: req.options.unwrap_or_default(),
    };
    validate_model_config(&def)?;
    let mut tx = state.store().pool().begin().await?;
    locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
    if !providers::exists(&mut *tx, def.provider_id).await? {
        return Err(ApiError::invalid("provider_id", "unknown provider"));
    }
    let row = model_configs::upsert(&mut tx, &def).await?;
    model_configs::ensure_default(&mut tx).await?;
    let row = model_configs::select(&mut *tx, row.def.id)
        .await?
        .unwrap_or(row);
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// `PATCH /api/v2/chats/model-configs/{id}` (admin).
#[utoipa::path(
    patch, path = "/api/v2/chats/model-configs/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "Model config id")),
    request_body = UpdateModelConfigRequest,
    responses((status = 200, description = "Updated", body = ModelConfig), E400, E401, E403, E404, E413)
)]
pub async fn update_model_config(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: Body,
) -> ApiResult<Json<ModelConfig>> {
    let id = params.uuid("id")?;
    caller.require_admin()?;
    let req: UpdateModelConfigRequest = read_json(body, state.options().body_limit_bytes).await?;
    let mut tx = state.store().pool().begin().await?;
    locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
    let current = model_configs::select(&mut *tx, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Model config not found."))?
        .def;
    let enabled = req.enabled.unwrap_or(current.enabled);
    let def = ModelConfigDef {
        id,
        provider_id: req.provider_id.unwrap_or(current.provider_id),
        model: req.model.unwrap_or(current.model),
        display_name: req.display_name.unwrap_or(current.display_name),
        context_limit: req.context_limit.unwrap_or(current.context_limit),
        compression_threshold: req
            .compression_threshold
            .unwrap_or(current.compression_threshold),
        // Disabling the default unsets it (another config takes over).
        is_default: req.is_default.unwrap_or(current.is_default) && enabled,
        enabled,
        options: req.options.unwrap_or(current.options),
    };
    if req.is_default == Some(true) && !enabled {
        return Err(ApiError::invalid(
            "is_default",
            "a disabled model config cannot be the default",
        ));
    }
    if req.is_default == Some(false) && current.is_default && enabled {
        // Exactly one enabled default exists at all times: it moves by
        // setting is_default on another config, never by unsetting it here.
        return Err(ApiError::conflict(
            "A default model config is required: set is_default on another model config instead.",
        ));
    }
    validate_model_config(&def)?;
    if !providers::exists(&mut *tx, def.provider_id).await? {
        return Err(ApiError::invalid("provider_id", "unknown provider"));
    }
    model_configs::upsert(&mut tx, &def).await?;
    model_configs::ensure_default(&mut tx).await?;
    let row = model_configs::select(&mut *tx, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Model config not found."))?;
    tx.commit().await?;
    Ok(Json(row.into()))
}

/// `DELETE /api/v2/chats/model-configs/{id}` (admin).
#[utoipa::path(
    delete, path = "/api/v2/chats/model-configs/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "Model config id")),
    responses((status = 204, description = "Deleted"), E400, E401, E403, E404)
)]
pub async fn delete_model_config(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<StatusCode> {
    let id = params.uuid("id")?;
    caller.require_admin()?;
    let mut tx = state.store().pool().begin().await?;
    locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
    if !model_configs::delete(&mut *tx, id).await? {
        return Err(ApiError::not_found("Model config not found."));
    }
    model_configs::ensure_default(&mut tx).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v2/chats/mcp-servers` (`env` and `headers` for admins only).
#[utoipa::path(
    get, path = "/api/v2/chats/mcp-servers", tag = "admin",
    responses((status = 200, description = "Every MCP server", body = Vec<McpServer>), E401)
)]
pub async fn list_mcp_servers(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<McpServer>>> {
    let rows = mcp_servers::list(state.store().pool()).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| McpServer::from_row(r, caller.is_admin()))
            .collect(),
    ))
}

/// `POST /api/v2/chats/mcp-servers` (admin). A duplicate slug is `409`.
#[utoipa::path(
    post, path = "/api/v2/chats/mcp-servers", tag = "admin",
    request_body = CreateMcpServerRequest,
    responses((status = 201, description = "Created", body = McpServer), E400, E401, E403, E409, E413)
)]
pub async fn create_mcp_server(
    State(state): State<AppState>,
    caller: Caller,
    body: Body,
) -> ApiResult<(StatusCode, Json<McpServer>)> {
    caller.require_admin()?;
    let req: CreateMcpServerRequest = read_json(body, state.options().body_limit_bytes).await?;
    let def = McpServerDef {
        id: Uuid::new_v4(),
        slug: req.slug,
        display_name: req.display_name.unwrap_or_default(),
        transport: req.transport,
        command: req.command,
        args: req.args.unwrap_or_default(),
        env: req.env.unwrap_or_default(),
        url: req.url,
        headers: req.headers.unwrap_or_default(),
        enabled: req.enabled.unwrap_or(true),
    };
    validate_mcp(&def)?;
    let row = mcp_servers::insert(state.store().pool(), &def)
        .await
        .map_err(slug_conflict)?;
    Ok((StatusCode::CREATED, Json(McpServer::from_row(row, true))))
}

/// `PATCH /api/v2/chats/mcp-servers/{id}` (admin).
#[utoipa::path(
    patch, path = "/api/v2/chats/mcp-servers/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "MCP server id")),
    request_body = UpdateMcpServerRequest,
    responses((status = 200, description = "Updated", body = McpServer), E400, E401, E403, E404, E409, E413)
)]
pub async fn update_mcp_server(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: Body,
) -> ApiResult<Json<McpServer>> {
    let id = params.uuid("id")?;
    caller.require_admin()?;
    let req: UpdateMcpServerRequest = read_json(body, state.options().body_limit_bytes).await?;
    let mut tx = state.store().pool().begin().await?;
    let current = mcp_servers::select_for_update(&mut tx, id)
        .await?
        .ok_or_else(|| ApiError::not_found("MCP server not found."))?
        .def;
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
    };
    validate_mcp(&def)?;
    let row = mcp_servers::update(&mut *tx, &def)
        .await
        .map_err(slug_conflict)?;
    tx.commit().await?;
    Ok(Json(McpServer::from_row(row, true)))
}

/// `DELETE /api/v2/chats/mcp-servers/{id}` (admin).
#[utoipa::path(
    delete, path = "/api/v2/chats/mcp-servers/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "MCP server id")),
    responses((status = 204, description = "Deleted"), E400, E401, E403, E404)
)]
pub async fn delete_mcp_server(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<StatusCode> {
    let id = params.uuid("id")?;
    caller.require_admin()?;
    if !mcp_servers::delete(state.store().pool(), id).await? {
        return Err(ApiError::not_found("MCP server not found."));
    }
    Ok(StatusCode::NO_CONTENT)
}

fn slug_conflict(err: sqlx::Error) -> ApiError {
    match &err {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => {
            ApiError::conflict("An MCP server with this slug already exists.")
        }
        _ => err.into(),
    }
}
