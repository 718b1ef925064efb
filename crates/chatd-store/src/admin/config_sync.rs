//! The `--config` file's sync (API.md "Running a replica"; DESIGN.md
//! "Configuration"): the providers, model configs and MCP servers the file
//! declares, written in one transaction. The file's parsing and checks are
//! the API's (`chatd_api::config_file`); this writes what they produced.

use sqlx::PgPool;

use super::{McpServerDef, ModelConfigDef, ProviderDef};
use crate::queries::locks::{self, AdvisoryLock};
use crate::queries::{mcp_servers, model_configs, providers};
use crate::secrets::Secrets;

/// What a config file declares, checked: the definitions [`apply`] writes.
/// Providers and model configs carry the ids derived from their entries'
/// names; MCP servers are keyed by slug.
#[derive(Debug, Clone, Default)]
pub struct ConfigSync {
    /// Providers, upserted by id.
    pub providers: Vec<ProviderDef>,
    /// Model configs, upserted by id; at most one is the default.
    pub model_configs: Vec<ModelConfigDef>,
    /// MCP servers, upserted by slug (a server that exists keeps its id).
    pub mcp_servers: Vec<McpServerDef>,
}

/// Why [`apply`] failed; the transaction was rolled back and nothing was
/// written. Each variant but [`SyncError::Database`] names the entry being
/// written and has the database error as its source.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Writing a provider failed.
    #[error("writing provider {display_name}")]
    Provider {
        /// The provider's display name.
        display_name: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// Writing a model config failed (for example an unknown provider id).
    #[error("writing model config {model}")]
    ModelConfig {
        /// The config's model name.
        model: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// Writing an MCP server failed.
    #[error("writing MCP server {slug}")]
    McpServer {
        /// The server's slug.
        slug: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// Beginning, locking, moving the default or committing failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Writes `sync` in one transaction holding the config-file advisory lock
/// (replicas starting together apply their files one after the other) and
/// the model-configs lock: upserts every provider, every model config (the
/// default last, so that its "unset the previous default" runs after the
/// others are written), every MCP server by slug, then makes an enabled
/// config the default if none is, and commits. Idempotent: applying the
/// same `sync` again rewrites the same rows. Rows `sync` does not name are
/// left alone. Secrets are sealed with `secrets`.
///
/// # Errors
/// A [`SyncError`] naming what was being written; nothing is written.
///
/// # Example
///
/// ```
/// use chatd_core::{ModelOptions, ProviderKind};
/// use chatd_store::admin::config_sync::{self, ConfigSync};
/// use chatd_store::admin::{ModelConfigDef, ProviderDef, model_configs};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let provider = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::Openai,
///     display_name: "OpenAI".into(),
///     base_url: None,
///     api_key: Some("sk-test".into()),
///     enabled: true,
/// };
/// let config = ModelConfigDef {
///     id: uuid::Uuid::new_v4(),
///     provider_id: provider.id,
///     model: "gpt-4o".into(),
///     display_name: "GPT-4o".into(),
///     context_limit: 128_000,
///     compression_threshold: 70,
///     is_default: false,
///     enabled: true,
///     options: ModelOptions::default(),
/// };
/// let sync = ConfigSync { providers: vec![provider], model_configs: vec![config.clone()], mcp_servers: vec![] };
/// let secrets = chatd_store::secrets::Secrets::none();
/// config_sync::apply(pool, &secrets, &sync).await?;
/// config_sync::apply(pool, &secrets, &sync).await?;
/// let rows = model_configs::list(pool, false).await?;
/// assert_eq!(rows.len(), 1);
/// // The only enabled config became the default.
/// assert!(rows[0].def.is_default);
/// # Ok(()) }
/// ```
pub async fn apply(pool: &PgPool, secrets: &Secrets, sync: &ConfigSync) -> Result<(), SyncError> {
    let mut tx = crate::queries::begin(pool).await?;
    locks::lock(&mut tx, AdvisoryLock::ConfigFile).await?;
    locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
    for provider in &sync.providers {
        providers::upsert(&mut *tx, secrets, provider)
            .await
            .map_err(|source| SyncError::Provider {
                display_name: provider.display_name.clone(),
                source,
            })?;
    }
    let mut configs: Vec<&ModelConfigDef> = sync.model_configs.iter().collect();
    configs.sort_by_key(|m| m.is_default);
    for config in configs {
        model_configs::upsert(&mut tx, config)
            .await
            .map_err(|source| SyncError::ModelConfig {
                model: config.model.clone(),
                source,
            })?;
    }
    for server in &sync.mcp_servers {
        mcp_servers::upsert_by_slug(&mut tx, secrets, server)
            .await
            .map_err(|source| SyncError::McpServer {
                slug: server.slug.clone(),
                source,
            })?;
    }
    model_configs::ensure_default(&mut tx).await?;
    tx.commit().await?;
    Ok(())
}
