//! Resolving a chat's model: the model config row (the chat's
//! `last_model_config_id` when enabled, else the enabled default), its
//! provider row, and a [`chatd_llm::Provider`] built from it; plus the
//! request's reasoning effort (`spec/chatd-architecture.md`, "Reasoning
//! effort") and the chat's MCP servers. The rows and their SQL are the
//! store's ([`chatd_store::model_configs`], [`chatd_store::providers`],
//! [`chatd_store::mcp_servers`]).

use std::collections::HashMap;
use std::sync::Arc;

use chatd_core::{ReasoningEffort, RequireApproval};
use chatd_llm::{HttpOptions, Provider, ProviderConfig};
use chatd_store::mcp_servers::McpServerDef;
use chatd_store::model_configs::ModelConfigDef;
use chatd_store::secrets::Secrets;
use chatd_store::{Chat, ProviderRow};
use chatd_tools::{McpServerConfig, McpTransport};
use sqlx::PgConnection;
use uuid::Uuid;

/// Builds providers from provider rows. The default implementation is
/// [`chatd_llm::ProviderConfig::build`], which picks the wire protocol from
/// the row's [`chatd_core::ProviderKind`].
pub trait ProviderFactory: Send + Sync {
    /// A provider for `row`.
    ///
    /// # Errors
    /// A message naming why the row cannot be used (the provider cannot be
    /// built from it).
    fn build(&self, row: &ProviderRow) -> Result<Arc<dyn Provider>, String>;
}

/// The production [`ProviderFactory`].
#[derive(Debug, Default, Clone)]
pub struct DefaultProviderFactory;

impl ProviderFactory for DefaultProviderFactory {
    fn build(&self, row: &ProviderRow) -> Result<Arc<dyn Provider>, String> {
        let row = &row.def;
        let name = if row.display_name.is_empty() {
            row.provider.to_string()
        } else {
            row.display_name.clone()
        };
        ProviderConfig {
            kind: row.provider,
            base_url: row.base_url.clone(),
            api_key: row.api_key.clone(),
            name,
            http: HttpOptions::default(),
        }
        .build()
        .map_err(|e| e.message)
    }
}

/// A resolved model for one generation.
pub struct ResolvedModel {
    /// The model config.
    pub config: ModelConfigDef,
    /// The provider.
    pub provider: Arc<dyn Provider>,
}

/// Loads the chat's model config and provider; the provider's API key is
/// opened with `secrets` (the store's, [`chatd_store::Store::secrets`]).
///
/// # Errors
/// `Ok(Err(message))` when no usable model is configured (a permanent error
/// for the turn); `Err` for database errors.
pub async fn resolve_model(
    conn: &mut PgConnection,
    secrets: &Secrets,
    chat: &Chat,
    factory: &dyn ProviderFactory,
) -> sqlx::Result<Result<ResolvedModel, String>> {
    let config =
        chatd_store::model_configs::for_chat(&mut *conn, chat.last_model_config_id).await?;
    let Some(config) = config.map(|row| row.def) else {
        return Ok(Err("No enabled model is configured: ask an admin to add a provider and a default model config.".to_owned()));
    };
    let provider = chatd_store::providers::select(&mut *conn, secrets, config.provider_id).await?;
    let Some(provider) = provider.filter(|p| p.def.enabled) else {
        return Ok(Err(format!(
            "The provider of model {:?} is missing or disabled.",
            config.model
        )));
    };
    Ok(factory
        .build(&provider)
        .map(|provider| ResolvedModel { config, provider }))
}

/// The effective reasoning effort of a request
/// ([`chatd_core::ModelOptions::effective_reasoning_effort`]) for the chat's
/// `last_reasoning_effort` (a spelling of [`ReasoningEffort`]), spelled as
/// the provider request takes it.
pub fn resolve_reasoning_effort(
    chat_effort: Option<&str>,
    options: &chatd_core::ModelOptions,
) -> Option<String> {
    options
        .effective_reasoning_effort(chat_effort.and_then(ReasoningEffort::parse))
        .map(|e| e.as_str().to_owned())
}

/// The MCP host's view of a server row; `None` when the row lacks what its
/// transport needs (the admin API prevents that; a hand-written row may
/// not).
pub fn mcp_server_config(row: McpServerDef) -> Option<McpServerConfig> {
    let transport = match row.transport {
        chatd_core::McpTransport::Stdio => McpTransport::Stdio {
            command: row.command.filter(|c| !c.is_empty())?,
            args: row.args,
            env: row.env,
        },
        chatd_core::McpTransport::StreamableHttp => McpTransport::StreamableHttp {
            url: row.url.filter(|u| !u.is_empty())?,
            headers: row.headers,
        },
    };
    Some(McpServerConfig {
        id: row.id,
        slug: row.slug,
        transport,
    })
}

/// The enabled MCP servers among `ids` (a chat's `mcp_server_ids`), in the
/// chat's order, with each usable server's `require_approval` by slug;
/// unusable rows are logged and left out. `env` and `headers` are opened
/// with `secrets` (the store's).
///
/// # Errors
/// Database errors.
pub async fn load_mcp_servers(
    conn: &mut PgConnection,
    secrets: &Secrets,
    ids: &[Uuid],
) -> sqlx::Result<(Vec<McpServerConfig>, HashMap<String, RequireApproval>)> {
    let rows = chatd_store::mcp_servers::enabled_in_order(conn, secrets, ids).await?;
    let mut policies = HashMap::new();
    let configs = rows
        .into_iter()
        .filter_map(|row| {
            let slug = row.def.slug.clone();
            let policy = row.def.require_approval.clone();
            let config = mcp_server_config(row.def);
            if config.is_none() {
                tracing::warn!(server = %slug, "MCP server row is incomplete; left out");
            } else {
                policies.insert(slug, policy);
            }
            config
        })
        .collect();
    Ok((configs, policies))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn row(transport: chatd_core::McpTransport) -> McpServerDef {
        McpServerDef {
            id: uuid::Uuid::nil(),
            slug: "files".into(),
            display_name: String::new(),
            transport,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            enabled: true,
            require_approval: chatd_core::RequireApproval::Never,
        }
    }

    #[test]
    fn mcp_rows_become_server_configs() {
        // Non-string JSON values of `env` and `args` are read as their text
        // by the store (`chatd_store::mcp_servers::string_map`).
        let stdio = McpServerDef {
            command: Some("mcp-files".into()),
            args: vec!["--root".into(), "/tmp".into()],
            env: BTreeMap::from([("N".into(), "3".into()), ("TOKEN".into(), "x".into())]),
            ..row(chatd_core::McpTransport::Stdio)
        };
        assert_eq!(
            mcp_server_config(stdio).unwrap().transport,
            McpTransport::Stdio {
                command: "mcp-files".into(),
                args: vec!["--root".into(), "/tmp".into()],
                env: BTreeMap::from([("N".into(), "3".into()), ("TOKEN".into(), "x".into())]),
            }
        );
        let http = McpServerDef {
            slug: "web".into(),
            url: Some("http://127.0.0.1:1/mcp".into()),
            headers: BTreeMap::from([("Authorization".into(), "Bearer t".into())]),
            ..row(chatd_core::McpTransport::StreamableHttp)
        };
        assert!(matches!(
            mcp_server_config(http).unwrap().transport,
            McpTransport::StreamableHttp { headers, .. } if headers["Authorization"] == "Bearer t"
        ));
        let broken = McpServerDef {
            slug: "x".into(),
            ..row(chatd_core::McpTransport::Stdio)
        };
        assert!(mcp_server_config(broken).is_none());
    }
}
