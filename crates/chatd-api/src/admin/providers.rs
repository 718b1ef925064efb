//! Provider routes (API.md "Admin routes (providers, models, tools)"):
//! `/api/v2/chats/providers`. API keys are write-only: responses carry
//! `has_api_key`. Members see `base_url` without user info, query or
//! fragment (API.md "Limits, budgets and the token lifecycle"), where keys
//! often live; admins see it whole. Deleting a provider deletes its model
//! configs (and moves the default, see [`super::model_configs`]).

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
use crate::extract::{self, double_option};
use crate::validate;
use chatd_core::ProviderKind;
use chatd_store::admin::{ProviderDef, ProviderRow, providers, redact_url};

/// The `404` message of an unknown provider id.
const NOT_FOUND: &str = "Provider not found.";

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
    /// `null` for the kind's default. Members get it without user info
    /// (`user:password@`), query or fragment.
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

impl Provider {
    /// The wire view of `r`: whole for an admin (`full`), `base_url`
    /// redacted ([`redact_url`]) otherwise. Never the API key.
    pub(crate) fn from_row(r: ProviderRow, full: bool) -> Self {
        let def = r.def;
        Provider {
            id: def.id,
            provider: def.provider,
            display_name: def.display_name,
            base_url: if full {
                def.base_url
            } else {
                def.base_url.as_deref().map(redact_url)
            },
            has_api_key: def.api_key.as_deref().is_some_and(|k| !k.is_empty()),
            enabled: def.enabled,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// Body of `POST /api/v2/chats/providers`. `Debug` prints no key.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProviderRequest {
    /// Kind.
    pub provider: ProviderKind,
    /// Display name (at most 200 characters).
    #[serde(default)]
    #[schema(schema_with = validate::name_schema)]
    pub display_name: Option<String>,
    /// Base URL (http or https).
    #[serde(default)]
    #[schema(schema_with = validate::nullable_url_schema)]
    pub base_url: Option<String>,
    /// API key (write-only; at most 4096 bytes).
    #[serde(default)]
    pub api_key: Option<String>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// Body of `PATCH /api/v2/chats/providers/{id}`; absent fields are kept,
/// `null` clears `base_url` or `api_key`. `Debug` prints no key.
#[derive(Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProviderRequest {
    /// Kind.
    #[serde(default)]
    pub provider: Option<ProviderKind>,
    /// Display name.
    #[serde(default)]
    #[schema(schema_with = validate::name_schema)]
    pub display_name: Option<String>,
    /// Base URL; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = validate::nullable_url_schema)]
    pub base_url: Option<Option<String>>,
    /// API key; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub api_key: Option<Option<String>>,
    /// Enabled.
    #[serde(default)]
    pub enabled: Option<bool>,
}

impl CreateProviderRequest {
    /// The provider this request defines, with id `id`; absent fields take
    /// their defaults (no display name, enabled) and an empty `api_key` is
    /// none. Not validated: see [`validate_provider`]. The admin route and
    /// the config file's `[[providers]]` entries (which wrap this type,
    /// [`crate::config_file::ProviderEntry`]) both build through it.
    pub(crate) fn into_def(self, id: Uuid) -> ProviderDef {
        ProviderDef {
            id,
            provider: self.provider,
            display_name: self.display_name.unwrap_or_default(),
            base_url: self.base_url,
            api_key: self.api_key.filter(|k| !k.is_empty()),
            enabled: self.enabled.unwrap_or(true),
        }
    }
}

impl std::fmt::Debug for CreateProviderRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateProviderRequest")
            .field("provider", &self.provider)
            .field("display_name", &self.display_name)
            .field("base_url", &self.base_url.as_deref().map(redact_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl std::fmt::Debug for UpdateProviderRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateProviderRequest")
            .field("provider", &self.provider)
            .field("display_name", &self.display_name)
            .field(
                "base_url",
                &self.base_url.as_ref().map(|u| u.as_deref().map(redact_url)),
            )
            .field(
                "api_key",
                &self
                    .api_key
                    .as_ref()
                    .map(|k| k.as_ref().map(|_| "<redacted>")),
            )
            .field("enabled", &self.enabled)
            .finish()
    }
}

/// Checks a provider definition (the route adds [`require_base_url`]).
///
/// # Errors
/// `400` naming the field.
pub(crate) fn validate_provider(def: &ProviderDef) -> ApiResult<()> {
    validate::name(&def.display_name, "display_name")?;
    if let Some(url) = def.base_url.as_deref() {
        validate::http_url(url, "base_url")?;
    }
    if def.api_key.as_ref().is_some_and(|k| k.len() > 4096) {
        return Err(ApiError::invalid("api_key", "must be at most 4096 bytes"));
    }
    Ok(())
}

/// An `openai-compat` provider has no default address: without `base_url`
/// the worker would send its requests (and API key) to OpenAI.
fn require_base_url(def: &ProviderDef) -> ApiResult<()> {
    if def.provider == ProviderKind::OpenaiCompat && def.base_url.is_none() {
        return Err(ApiError::invalid(
            "base_url",
            "is required for an openai-compat provider",
        ));
    }
    Ok(())
}

/// `GET /api/v2/chats/providers`: every provider; members get `base_url`
/// without user info, query or fragment.
#[utoipa::path(
    get, path = "/api/v2/chats/providers", tag = "admin",
    responses((status = 200, description = "Every provider (members: `base_url` redacted)", body = Vec<Provider>), E401)
)]
pub async fn list_providers(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<Provider>>> {
    let rows = providers::list(state.store().pool(), state.store().secrets()).await?;
    let full = caller.is_admin();
    Ok(Json(
        rows.into_iter()
            .map(|r| Provider::from_row(r, full))
            .collect(),
    ))
}

/// `POST /api/v2/chats/providers` (admin).
#[utoipa::path(
    post, path = "/api/v2/chats/providers", tag = "admin",
    responses((status = 201, description = "Created", body = Provider), E400, E401, E403, E413, E415)
)]
pub async fn create_provider(
    State(state): State<AppState>,
    _admin: Admin,
    body: extract::Json<CreateProviderRequest>,
) -> ApiResult<(StatusCode, Json<Provider>)> {
    let def = body.read().await?.into_def(Uuid::new_v4());
    validate_provider(&def)?;
    require_base_url(&def)?;
    let row = providers::upsert(state.store().pool(), state.store().secrets(), &def).await?;
    Ok((StatusCode::CREATED, Json(Provider::from_row(row, true))))
}

/// `PATCH /api/v2/chats/providers/{id}` (admin).
#[utoipa::path(
    patch, path = "/api/v2/chats/providers/{id}", tag = "admin",
    params(("id" = Uuid, Path, description = "Provider id")),
    responses((status = 200, description = "Updated", body = Provider), E400, E401, E403, E404, E413, E415)
)]
pub async fn update_provider(
    State(state): State<AppState>,
    AdminTarget { id }: AdminTarget,
    body: extract::Json<UpdateProviderRequest>,
) -> ApiResult<Json<Provider>> {
    let req = body.read().await?;
    let (pool, secrets) = (state.store().pool(), state.store().secrets());
    let row = providers::update(pool, secrets, id, |current| {
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
        validate_provider(&def)?;
        require_base_url(&def)?;
        Ok::<_, ApiError>(def)
    })
    .await?;
    Ok(Json(Provider::from_row(found(row, NOT_FOUND)?, true)))
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
    AdminTarget { id }: AdminTarget,
) -> ApiResult<StatusCode> {
    let deleted = providers::delete(state.store().pool(), id).await?;
    found(deleted.then_some(()), NOT_FOUND)?;
    Ok(StatusCode::NO_CONTENT)
}
