//! The TOML file of `chatd serve --config FILE` (API.md "Running a replica";
//! DESIGN.md "Configuration"): providers, model configs and MCP servers
//! declared at startup.
//!
//! ```toml
//! [[providers]]
//! name = "openai"                  # stable key of the entry (required)
//! provider = "openai"              # openai | openai-compat | anthropic
//! display_name = "OpenAI"
//! base_url = "https://api.openai.com/v1"
//! api_key_env = "OPENAI_API_KEY"   # or: api_key = "sk-..."
//! enabled = true
//!
//! [[model_configs]]
//! name = "gpt-4o"                  # stable key of the entry (required)
//! provider = "openai"              # the `name` of a provider in this file
//! model = "gpt-4o"
//! display_name = "GPT-4o"
//! context_limit = 128000           # tokens, > 0
//! compression_threshold = 70       # percent, 0..=100 (default 70)
//! is_default = true                # at most one entry
//! enabled = true
//! options = { max_output_tokens = 4096, temperature = 0.7, reasoning_effort = { default = "medium", max = "high" } }
//!
//! [[mcp_servers]]
//! slug = "files"                   # stable key (unique)
//! display_name = "Files"
//! transport = "stdio"              # stdio (command, args, env) | streamable_http (url, headers)
//! command = "mcp-files"
//! args = ["--root", "/srv"]
//! env = { LOG = "info" }
//! ```
//!
//! Applying is idempotent: every entry is identified by its stable key
//! (providers and model configs by `name`, which derives a fixed id, MCP
//! servers by `slug`) and upserted, so a restart rewrites the same rows and
//! the file wins over changes made through the API to declared entries.
//! Rows the file does not declare are left alone; removing an entry from the
//! file does not delete its row. The whole file is applied in one
//! transaction under an advisory lock, so replicas starting at the same time
//! apply it one after the other. Entries are validated with the same rules
//! as the admin routes before anything is written.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::admin;
use crate::error::ApiError;
use chatd_core::{ModelOptions, ProviderKind};
use chatd_store::queries::locks::{self, AdvisoryLock};
use chatd_store::queries::mcp_servers::{self, McpServerDef};
use chatd_store::queries::model_configs::{self, ModelConfigDef};
use chatd_store::queries::providers::{self, ProviderDef, redact_url};
use chatd_store::secrets::Secrets;

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[[providers]]` entries.
    #[serde(default)]
    pub providers: Vec<ProviderEntry>,
    /// `[[model_configs]]` entries.
    #[serde(default)]
    pub model_configs: Vec<ModelConfigEntry>,
    /// `[[mcp_servers]]` entries.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerEntry>,
}

/// A `[[providers]]` entry. `Debug` prints no key.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// Stable key (1–64 characters); the row's id is derived from it.
    pub name: String,
    /// Kind: `openai`, `openai-compat` or `anthropic`.
    pub provider: ProviderKind,
    /// Display name (default: `name`).
    #[serde(default)]
    pub display_name: Option<String>,
    /// Base URL including the version prefix.
    #[serde(default)]
    pub base_url: Option<String>,
    /// API key in clear.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Name of an environment variable holding the API key (it must be set).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A `[[model_configs]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfigEntry {
    /// Stable key (1–64 characters); the row's id is derived from it.
    pub name: String,
    /// The `name` of a provider entry of the same file.
    pub provider: String,
    /// The provider's model name.
    pub model: String,
    /// Display name (default: `name`).
    #[serde(default)]
    pub display_name: Option<String>,
    /// Context window in tokens, > 0.
    pub context_limit: i64,
    /// Percent, 0..=100 (default 70).
    #[serde(default)]
    pub compression_threshold: Option<i32>,
    /// Make it the default (at most one entry).
    #[serde(default)]
    pub is_default: Option<bool>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Options, as in the admin API.
    #[serde(default)]
    pub options: Option<ModelOptions>,
}

/// A `[[mcp_servers]]` entry: the admin API's create request itself (one
/// definition of an MCP server's fields, their defaults and their checks for
/// both; `Debug` prints no `env` or `headers` value). `slug` is the entry's
/// stable key.
pub type McpServerEntry = admin::mcp_servers::CreateMcpServerRequest;

impl std::fmt::Debug for ProviderEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderEntry")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("display_name", &self.display_name)
            .field("base_url", &self.base_url.as_deref().map(redact_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_key_env", &self.api_key_env)
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl ConfigFile {
    /// Parses TOML text.
    ///
    /// # Errors
    /// Syntax errors, unknown keys and wrong types, with their location.
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        toml::from_str(text).map_err(|e| anyhow!("invalid config file: {e}"))
    }

    /// Reads and parses the file at `path`.
    ///
    /// # Errors
    /// I/O and parse errors.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        Self::from_toml(&text).with_context(|| format!("in {}", path.display()))
    }
}

/// The fixed id of the entry `name` of kind `kind` (`provider`,
/// `model-config`): a version-8 UUID made from SHA-256 of both.
pub fn stable_id(kind: &str, name: &str) -> Uuid {
    let digest = Sha256::digest(format!("chatd:{kind}:{name}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// Validates `file` and writes its entries (see the module doc), sealing
/// API keys and MCP `env` and `headers` with `secrets` as the admin routes
/// do ([`chatd_store::secrets`]).
///
/// # Errors
/// A validation error naming the entry and field (nothing is written), or a
/// database error (the transaction is rolled back).
pub async fn apply(pool: &PgPool, secrets: &Secrets, file: &ConfigFile) -> anyhow::Result<()> {
    let plan = plan(file)?;
    let mut tx = chatd_store::queries::begin(pool).await?;
    locks::lock(&mut tx, AdvisoryLock::ConfigFile).await?;
    locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
    for provider in &plan.providers {
        providers::upsert(&mut *tx, secrets, provider)
            .await
            .with_context(|| format!("writing provider {}", provider.display_name))?;
    }
    for config in &plan.model_configs {
        model_configs::upsert(&mut tx, config)
            .await
            .with_context(|| format!("writing model config {}", config.model))?;
    }
    for server in &plan.mcp_servers {
        mcp_servers::upsert_by_slug(&mut tx, secrets, server)
            .await
            .with_context(|| format!("writing MCP server {}", server.slug))?;
    }
    model_configs::ensure_default(&mut tx).await?;
    tx.commit().await?;
    tracing::info!(
        providers = plan.providers.len(),
        model_configs = plan.model_configs.len(),
        mcp_servers = plan.mcp_servers.len(),
        "applied config file"
    );
    Ok(())
}

#[derive(Debug)]
struct Plan {
    providers: Vec<ProviderDef>,
    model_configs: Vec<ModelConfigDef>,
    mcp_servers: Vec<McpServerDef>,
}

fn plan(file: &ConfigFile) -> anyhow::Result<Plan> {
    let mut names = HashSet::new();
    let mut providers = Vec::new();
    for (i, p) in file.providers.iter().enumerate() {
        let at = format!("providers[{i}] ({:?})", p.name);
        check_key(&p.name).with_context(|| at.clone())?;
        if !names.insert(p.name.as_str()) {
            bail!("{at}: duplicate provider name");
        }
        let api_key = match (&p.api_key, &p.api_key_env) {
            (Some(_), Some(_)) => bail!("{at}: set api_key or api_key_env, not both"),
            (Some(key), None) => Some(key.clone()),
            (None, Some(var)) => Some(
                std::env::var(var)
                    .map_err(|_| anyhow!("{at}: environment variable {var} is not set"))?,
            ),
            (None, None) => None,
        }
        .filter(|k| !k.is_empty());
        let display_name = p.display_name.clone().unwrap_or_else(|| p.name.clone());
        admin::providers::validate_provider(
            &display_name,
            p.base_url.as_deref(),
            api_key.as_deref(),
        )
        .map_err(|e| invalid(&at, e))?;
        providers.push(ProviderDef {
            id: stable_id("provider", &p.name),
            provider: p.provider,
            display_name,
            base_url: p.base_url.clone(),
            api_key,
            enabled: p.enabled.unwrap_or(true),
        });
    }
    let mut config_names = HashSet::new();
    let mut model_configs = Vec::new();
    for (i, m) in file.model_configs.iter().enumerate() {
        let at = format!("model_configs[{i}] ({:?})", m.name);
        check_key(&m.name).with_context(|| at.clone())?;
        if !config_names.insert(m.name.as_str()) {
            bail!("{at}: duplicate model config name");
        }
        if !names.contains(m.provider.as_str()) {
            bail!(
                "{at}: provider {:?} is not declared in this file",
                m.provider
            );
        }
        let def = ModelConfigDef {
            id: stable_id("model-config", &m.name),
            provider_id: stable_id("provider", &m.provider),
            model: m.model.clone(),
            display_name: m.display_name.clone().unwrap_or_else(|| m.name.clone()),
            context_limit: m.context_limit,
            compression_threshold: m.compression_threshold.unwrap_or(70),
            is_default: m.is_default.unwrap_or(false),
            enabled: m.enabled.unwrap_or(true),
            options: m.options.clone().unwrap_or_default(),
        };
        admin::model_configs::validate_model_config(&def).map_err(|e| invalid(&at, e))?;
        model_configs.push(def);
    }
    if model_configs.iter().filter(|m| m.is_default).count() > 1 {
        bail!("model_configs: at most one entry may set is_default = true");
    }
    // The default goes last so that its "unset the previous default" runs
    // after every other config of the file is written.
    model_configs.sort_by_key(|m| m.is_default);
    let mut slugs = HashSet::new();
    let mut mcp_servers = Vec::new();
    for (i, s) in file.mcp_servers.iter().enumerate() {
        let at = format!("mcp_servers[{i}] ({:?})", s.slug);
        if !slugs.insert(s.slug.as_str()) {
            bail!("{at}: duplicate slug");
        }
        let def = s.clone().into_def(stable_id("mcp-server", &s.slug));
        admin::mcp_servers::validate_mcp(&def).map_err(|e| invalid(&at, e))?;
        mcp_servers.push(def);
    }
    Ok(Plan {
        providers,
        model_configs,
        mcp_servers,
    })
}

fn check_key(name: &str) -> anyhow::Result<()> {
    if name.trim().is_empty() || name.chars().count() > 64 {
        bail!("name must be 1 to 64 characters");
    }
    Ok(())
}

fn invalid(at: &str, err: ApiError) -> anyhow::Error {
    let details: Vec<String> = err
        .body()
        .validations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.detail))
        .collect();
    anyhow!("{at}: {}", details.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[[providers]]
name = "openai"
provider = "openai"
base_url = "https://api.openai.com/v1"
api_key = "sk-test"

[[model_configs]]
name = "gpt"
provider = "openai"
model = "gpt-4o"
context_limit = 128000
is_default = true
options = { max_output_tokens = 4096, reasoning_effort = { default = "medium", max = "high" } }

[[mcp_servers]]
slug = "files"
transport = "stdio"
command = "mcp-files"
args = ["--root", "/srv"]
"#;

    #[test]
    fn the_documented_example_parses_and_plans() {
        let file = ConfigFile::from_toml(EXAMPLE).unwrap();
        let plan = plan(&file).unwrap();
        assert_eq!(plan.providers.len(), 1);
        assert_eq!(plan.model_configs[0].provider_id, plan.providers[0].id);
        assert_eq!(plan.model_configs[0].options.max_output_tokens, Some(4096));
        assert_eq!(plan.mcp_servers[0].args, vec!["--root", "/srv"]);
    }

    #[test]
    fn stable_ids_are_stable_and_distinct() {
        assert_eq!(stable_id("provider", "a"), stable_id("provider", "a"));
        assert_ne!(stable_id("provider", "a"), stable_id("model-config", "a"));
        assert_eq!(stable_id("provider", "a").get_version_num(), 8);
    }

    #[test]
    fn invalid_entries_are_named() {
        let bad = EXAMPLE.replace("context_limit = 128000", "context_limit = 0");
        let err = plan(&ConfigFile::from_toml(&bad).unwrap()).unwrap_err();
        assert!(err.to_string().contains("model_configs[0]"), "{err}");
        assert!(err.to_string().contains("context_limit"), "{err}");
        let unknown = format!("{EXAMPLE}\n[[widgets]]\nx = 1\n");
        assert!(ConfigFile::from_toml(&unknown).is_err());
        let undeclared =
            EXAMPLE.replace("provider = \"openai\"\nmodel", "provider = \"nope\"\nmodel");
        assert!(plan(&ConfigFile::from_toml(&undeclared).unwrap()).is_err());
    }
}
