//! Model config routes (API.md "Admin routes (providers, models, tools)"):
//! `/api/v2/chats/model-configs` and the members' list
//! `GET /api/v2/chats/models`. Exactly one enabled default whenever a config
//! is enabled (see [`super`]); mutations take the model-configs advisory
//! lock.

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
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E413, E415};
use crate::extract;
use crate::validate;
use chatd_core::ModelOptions;
use chatd_store::admin::model_configs::{self, ModelConfigError};
use chatd_store::admin::{ModelConfigDef, ModelConfigRow};

/// The `404` message of an unknown model config id.
const NOT_FOUND: &str = "Model config not found.";

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
    #[schema(schema_with = validate::model_name_schema)]
    pub model: String,
    /// Display name.
    #[serde(default)]
    #[schema(schema_with = validate::name_schema)]
    pub display_name: Option<String>,
    /// Context window in tokens, > 0.
    #[schema(schema_with = validate::context_limit_schema)]
    pub context_limit: i64,
    /// 0..=100, default 70.
    #[serde(default)]
    #[schema(schema_with = validate::compression_threshold_schema)]
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
    #[schema(schema_with = validate::nullable_model_name_schema)]
    pub model: Option<String>,
    /// Display name.
    #[serde(default)]
    #[schema(schema_with = validate::name_schema)]
    pub display_name: Option<String>,
    /// Context window in tokens.
    #[serde(default)]
    #[schema(schema_with = validate::nullable_context_limit_schema)]
    pub context_limit: Option<i64>,
    /// 0..=100.
    #[serde(default)]
    #[schema(schema_with = validate::compression_threshold_schema)]
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

impl CreateModelConfigRequest {
    /// The model config this request defines, with id `id`; absent fields
    /// take their defaults (no display name, compression threshold 70, not
    /// the default, enabled, default options). Not validated: see
    /// [`validate_model_config`]. The admin route and the config file's
    /// `[[model_configs]]` entries (which wrap this type,
    /// [`crate::config_file::ModelConfigEntry`]) both build through it.
    pub(crate) fn into_def(self, id: Uuid) -> ModelConfigDef {
        ModelConfigDef {
            id,
            provider_id: self.provider_id,
            model: self.model,
            display_name: self.display_name.unwrap_or_default(),
            context_limit: self.context_limit,
            compression_threshold: self.compression_threshold.unwrap_or(70),
            is_default: self.is_default.unwrap_or(false),
            enabled: self.enabled.unwrap_or(true),
            options: self.options.unwrap_or_default(),
        }
    }
}

/// `400` naming `provider_id` for an unknown provider; a database error as
/// it is.
impl From<ModelConfigError> for ApiError {
    fn from(err: ModelConfigError) -> Self {
        match err {
            ModelConfigError::UnknownProvider => {
                ApiError::invalid("provider_id", "unknown provider")
            }
            ModelConfigError::Database(err) => err.into(),
        }
    }
}

/// Checks a model config definition (the provider's existence is checked by
/// the store's write, [`ModelConfigError::UnknownProvider`]).
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

/// `GET /api/v2/chats/model-configs`.
#[utoipa::path(
    get, path = "/api/v2/chats/model-configs", tag = "admin",
    responses((status = 200, description = "Every model config", body = Vec<ModelConfig>), E401)
)]
pub async fn list_model_configs(
    State(state): State<AppState>,
    _caller: Caller,
) -> ApiResult<Json<Vec<ModelConfig>>> {
    list(&state, false).await
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
    list(&state, true).await
}

/// Every model config, or with `enabled_only` the enabled configs of
/// enabled providers.
async fn list(state: &AppState, enabled_only: bool) -> ApiResult<Json<Vec<ModelConfig>>> {
    let rows = model_configs::list(state.store().pool(), enabled_only).await?;
    Ok(Json(rows.into_iter().map(ModelConfig::from).collect()))
}

/// `POST /api/v2/chats/model-configs` (admin).
#[utoipa::path(
    post, path = "/api/v2/chats/model-configs", tag = "admin",
    responses((status = 201, description = "Created", body = ModelConfig), E400, E401, E403, E413, E415)
)]
pub async fn create_model_config(
    State(state): State<AppState>,
    _admin: Admin,
    body: extract::Json<CreateModelConfigRequest>,
) -> ApiResult<(StatusCode, Json<ModelConfig>)> {
    let def = body.read().await?.into_def(Uuid::new_v4());
    validate_model_config(&def)?;
    let row = model_configs::upsert(state.store().pool(), &def).await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// `PATCH /api/v2/chats/model-configs/{id}` (admin).
#[utoipa::path(
    patch, path = "/api/v2/chats/model-configs/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "Model config id")),
    responses((status = 200, description = "Updated", body = ModelConfig), E400, E401, E403, E404, E413, E415)
)]
pub async fn update_model_config(
    State(state): State<AppState>,
    AdminTarget { id }: AdminTarget,
    body: extract::Json<UpdateModelConfigRequest>,
) -> ApiResult<Json<ModelConfig>> {
    let req = body.read().await?;
    let row = model_configs::update(state.store().pool(), id, |current| {
        let enabled = req.enabled.unwrap_or(current.enabled);
        if req.is_default == Some(true) && !enabled {
            return Err(ApiError::invalid(
                "is_default",
                "a disabled model config cannot be the default",
            ));
        }
        if req.is_default == Some(false) && current.is_default && enabled {
            // Exactly one enabled default exists at all times: it moves by
            // setting is_default on another config, never by unsetting it
            // here.
            return Err(ApiError::conflict(
                "A default model config is required: set is_default on another model config instead.",
            ));
        }
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
        validate_model_config(&def)?;
        Ok(def)
    })
    .await?;
    let row = found(row, NOT_FOUND)?;
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
    AdminTarget { id }: AdminTarget,
) -> ApiResult<StatusCode> {
    let deleted = model_configs::delete(state.store().pool(), id).await?;
    found(deleted.then_some(()), NOT_FOUND)?;
    Ok(StatusCode::NO_CONTENT)
}
