//! Resolving a chat's model: the model config row (the chat's
//! `last_model_config_id` when enabled, else the enabled default), its
//! provider row, and a [`chatd_llm::Provider`] built from it; plus the
//! request options (`spec/chatd-architecture.md`, "Reasoning effort"), the
//! cost of a response, and the chat's MCP servers.

use std::collections::BTreeMap;
use std::sync::Arc;

use chatd_llm::Provider;
use chatd_store::Chat;
use chatd_tools::{McpServerConfig, McpTransport};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// A row of `chat_providers`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProviderRow {
    /// Id.
    pub id: Uuid,
    /// `openai`, `openai-compat` or `anthropic`.
    pub provider: String,
    /// Display name (used in errors).
    pub display_name: String,
    /// Base URL including the version prefix.
    pub base_url: Option<String>,
    /// API key, if any.
    pub api_key: Option<String>,
    /// Enabled.
    pub enabled: bool,
}

/// A row of `chat_model_configs`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ModelConfigRow {
    /// Id.
    pub id: Uuid,
    /// Provider.
    pub provider_id: Uuid,
    /// The provider's model name.
    pub model: String,
    /// Context window, in tokens.
    pub context_limit: i64,
    /// Compaction threshold, percent of the context window.
    pub compression_threshold: i32,
    /// Options (`reasoning_effort`, `max_output_tokens`, `temperature`,
    /// prices).
    pub options: Value,
}

/// Builds providers from provider rows. The default implementation speaks
/// OpenAI Chat Completions for `openai` and `openai-compat`, and Anthropic
/// Messages for `anthropic`.
pub trait ProviderFactory: Send + Sync {
    /// A provider for `row`.
    ///
    /// # Errors
    /// A message naming why the row cannot be used (unsupported provider).
    fn build(&self, row: &ProviderRow) -> Result<Arc<dyn Provider>, String>;
}

/// The production [`ProviderFactory`].
#[derive(Debug, Default, Clone)]
pub struct DefaultProviderFactory;

impl ProviderFactory for DefaultProviderFactory {
    fn build(&self, row: &ProviderRow) -> Result<Arc<dyn Provider>, String> {
        let name = if row.display_name.is_empty() {
            row.provider.clone()
        } else {
            row.display_name.clone()
        };
        match row.provider.as_str() {
            "openai" | "openai-compat" => {
                let base = row
                    .base_url
                    .clone()
                    .unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
                // api.openai.com wants `max_completion_tokens` (its reasoning
                // models reject `max_tokens`); compatible servers (llama.cpp,
                // vLLM, Ollama, LiteLLM) all read `max_tokens`, and some
                // silently ignore the newer field.
                let param = if row.provider == "openai" {
                    chatd_llm::MaxTokensParam::MaxCompletionTokens
                } else {
                    chatd_llm::MaxTokensParam::MaxTokens
                };
                let provider = chatd_llm::OpenAiProvider::new(base, row.api_key.clone(), name)
                    .map_err(|e| e.message)?
                    .max_tokens_param(param);
                Ok(Arc::new(provider))
            }
            "anthropic" => {
                let base = row
                    .base_url
                    .clone()
                    .unwrap_or_else(|| chatd_llm::anthropic::DEFAULT_BASE_URL.to_owned());
                let provider = chatd_llm::AnthropicProvider::new(base, row.api_key.clone(), name)
                    .map_err(|e| e.message)?;
                Ok(Arc::new(provider))
            }
            other => Err(format!(
                "provider type {other:?} is not supported by this worker"
            )),
        }
    }
}

/// A resolved model for one generation.
pub struct ResolvedModel {
    /// The config row.
    pub config: ModelConfigRow,
    /// The provider.
    pub provider: Arc<dyn Provider>,
}

/// Loads the chat's model config and provider.
///
/// # Errors
/// `Ok(Err(message))` when no usable model is configured (a permanent error
/// for the turn); `Err` for database errors.
pub async fn resolve_model(
    conn: &mut PgConnection,
    chat: &Chat,
    factory: &dyn ProviderFactory,
) -> sqlx::Result<Result<ResolvedModel, String>> {
    let config: Option<ModelConfigRow> = sqlx::query_as(
        "SELECT id, provider_id, model, context_limit, compression_threshold, options FROM chat_model_configs
         WHERE enabled AND (id = $1 OR is_default)
         ORDER BY (id = $1) DESC NULLS LAST LIMIT 1",
    )
    .bind(chat.last_model_config_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(config) = config else {
        return Ok(Err("No enabled model is configured: ask an admin to add a provider and a default model config.".to_owned()));
    };
    let provider: Option<ProviderRow> =
        sqlx::query_as("SELECT id, provider, display_name, base_url, api_key, enabled FROM chat_providers WHERE id = $1")
            .bind(config.provider_id)
            .fetch_optional(&mut *conn)
            .await?;
    let Some(provider) = provider.filter(|p| p.enabled) else {
        return Ok(Err(format!(
            "The provider of model {:?} is missing or disabled.",
            config.model
        )));
    };
    Ok(factory
        .build(&provider)
        .map(|provider| ResolvedModel { config, provider }))
}

const EFFORT_SCALE: [&str; 7] = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/// The effective reasoning effort (spec "Reasoning effort"): the chat's
/// `last_reasoning_effort` if set, else the config's default, clamped to the
/// config's max on the scale `none < minimal < low < medium < high < xhigh <
/// max`. `None` when the config has no `reasoning_effort`.
pub fn resolve_reasoning_effort(chat_effort: Option<&str>, options: &Value) -> Option<String> {
    let config = options.get("reasoning_effort")?;
    let rank = |s: &str| EFFORT_SCALE.iter().position(|e| *e == s);
    let default = config.get("default").and_then(Value::as_str);
    let wanted = chat_effort.and_then(|e| rank(e).map(|_| e)).or(default)?;
    let mut level = rank(wanted)?;
    if let Some(max) = config.get("max").and_then(Value::as_str).and_then(rank) {
        level = level.min(max);
    }
    Some(EFFORT_SCALE[level].to_owned())
}

/// Cost in micro-dollars of one response, rounded up, from the
/// per-million-token prices in the options; `None` when the model is
/// unpriced (no price given), which is not the same as free (`Some(0)`).
///
/// The whole prompt is priced at the input price: uncached input, cache
/// reads and cache writes (Anthropic reports them apart from
/// `input_tokens`; OpenAI's cached tokens are split off the same way by the
/// adapter). Model configs carry one input price, so this is an upper bound
/// for providers that discount cache reads.
pub fn cost_micros(options: &Value, usage: &chatd_llm::Usage) -> Option<i64> {
    prompt_and_output_cost(options, usage.prompt_tokens(), usage.output_tokens)
}

fn prompt_and_output_cost(options: &Value, input_tokens: i64, output_tokens: i64) -> Option<i64> {
    let input = options
        .get("input_price_micros_per_mtok")
        .and_then(Value::as_i64);
    let output = options
        .get("output_price_micros_per_mtok")
        .and_then(Value::as_i64);
    if input.is_none() && output.is_none() {
        return None;
    }
    let total = i128::from(input.unwrap_or(0)) * i128::from(input_tokens)
        + i128::from(output.unwrap_or(0)) * i128::from(output_tokens);
    let micros = (total + 999_999) / 1_000_000;
    Some(micros.clamp(0, i128::from(i64::MAX)) as i64)
}

/// A row of `chat_mcp_servers` (API.md "Admin routes").
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct McpServerRow {
    /// Id.
    pub id: Uuid,
    /// Prefix of its tools' names.
    pub slug: String,
    /// `stdio` or `streamable_http`.
    pub transport: String,
    /// Program (stdio).
    pub command: Option<String>,
    /// Arguments (a JSON array of strings).
    pub args: Value,
    /// Environment (a JSON object).
    pub env: Value,
    /// Endpoint (streamable HTTP).
    pub url: Option<String>,
    /// Headers (a JSON object).
    pub headers: Value,
}

impl McpServerRow {
    /// The host's view of the row; `None` when the row lacks what its
    /// transport needs (the admin API prevents that; a hand-written row may
    /// not).
    pub fn into_config(self) -> Option<McpServerConfig> {
        fn strings(value: &Value) -> BTreeMap<String, String> {
            value
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| {
                            let v = match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            (k.clone(), v)
                        })
                        .collect()
                })
                .unwrap_or_default()
        }
        let transport = match self.transport.as_str() {
            "stdio" => McpTransport::Stdio {
                command: self.command.filter(|c| !c.is_empty())?,
                args: self
                    .args
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|v| match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                env: strings(&self.env),
            },
            "streamable_http" => McpTransport::StreamableHttp {
                url: self.url.filter(|u| !u.is_empty())?,
                headers: strings(&self.headers),
            },
            _ => return None,
        };
        Some(McpServerConfig {
            id: self.id,
            slug: self.slug,
            transport,
        })
    }
}

/// The enabled MCP servers among `ids` (a chat's `mcp_server_ids`), in the
/// chat's order; unusable rows are logged and left out.
///
/// # Errors
/// Database errors.
pub async fn load_mcp_servers(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> sqlx::Result<Vec<McpServerConfig>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<McpServerRow> = sqlx::query_as(
        "SELECT s.id, s.slug, s.transport, s.command, s.args, s.env, s.url, s.headers
         FROM unnest($1::uuid[]) WITH ORDINALITY AS wanted(id, n)
         JOIN chat_mcp_servers s ON s.id = wanted.id
         WHERE s.enabled
         ORDER BY wanted.n",
    )
    .bind(ids)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let slug = row.slug.clone();
            let config = row.into_config();
            if config.is_none() {
                tracing::warn!(server = %slug, "MCP server row is incomplete; left out");
            }
            config
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reasoning_effort_prefers_the_chat_and_clamps_to_max() {
        let options = json!({"reasoning_effort": {"default": "medium", "max": "high"}});
        assert_eq!(
            resolve_reasoning_effort(None, &options).as_deref(),
            Some("medium")
        );
        assert_eq!(
            resolve_reasoning_effort(Some("low"), &options).as_deref(),
            Some("low")
        );
        assert_eq!(
            resolve_reasoning_effort(Some("max"), &options).as_deref(),
            Some("high")
        );
        assert_eq!(
            resolve_reasoning_effort(Some("high"), &json!({})),
            None,
            "ignored without a config"
        );
    }

    fn usage(input: i64, output: i64, cache_read: i64, cache_creation: i64) -> chatd_llm::Usage {
        chatd_llm::Usage {
            input_tokens: input,
            output_tokens: output,
            reasoning_tokens: 0,
            cache_read_tokens: cache_read,
            cache_creation_tokens: cache_creation,
            total_tokens: input + output + cache_read + cache_creation,
        }
    }

    #[test]
    fn cost_rounds_up_and_unpriced_is_none() {
        let options = json!({"input_price_micros_per_mtok": 3_000_000, "output_price_micros_per_mtok": 15_000_000});
        // 1000 input tokens at $3/Mtok = 3000 micros; 10 output at $15/Mtok = 150 micros.
        assert_eq!(cost_micros(&options, &usage(1000, 10, 0, 0)), Some(3150));
        assert_eq!(
            cost_micros(
                &json!({"input_price_micros_per_mtok": 1}),
                &usage(1, 0, 0, 0)
            ),
            Some(1),
            "rounded up"
        );
        assert_eq!(cost_micros(&json!({}), &usage(1000, 1000, 0, 0)), None);
        assert_eq!(
            cost_micros(
                &json!({"input_price_micros_per_mtok": 0}),
                &usage(1000, 0, 0, 0)
            ),
            Some(0),
            "free is not unpriced"
        );
    }

    #[test]
    fn cached_prompt_tokens_are_priced_with_the_input() {
        // Anthropic: 21 uncached + 1500 cache reads + 300 cache writes.
        let options = json!({"input_price_micros_per_mtok": 1_000_000, "output_price_micros_per_mtok": 2_000_000});
        assert_eq!(
            cost_micros(&options, &usage(21, 12, 1500, 300)),
            Some(1821 + 24)
        );
    }

    #[test]
    fn mcp_rows_become_server_configs() {
        let stdio = McpServerRow {
            id: uuid::Uuid::nil(),
            slug: "files".into(),
            transport: "stdio".into(),
            command: Some("mcp-files".into()),
            args: json!(["--root", "/tmp"]),
            env: json!({"TOKEN": "x", "N": 3}),
            url: None,
            headers: json!({}),
        };
        assert_eq!(
            stdio.into_config().unwrap().transport,
            McpTransport::Stdio {
                command: "mcp-files".into(),
                args: vec!["--root".into(), "/tmp".into()],
                env: BTreeMap::from([("N".into(), "3".into()), ("TOKEN".into(), "x".into())]),
            }
        );
        let http = McpServerRow {
            id: uuid::Uuid::nil(),
            slug: "web".into(),
            transport: "streamable_http".into(),
            command: None,
            args: json!([]),
            env: json!({}),
            url: Some("http://127.0.0.1:1/mcp".into()),
            headers: json!({"Authorization": "Bearer t"}),
        };
        assert!(matches!(
            http.into_config().unwrap().transport,
            McpTransport::StreamableHttp { headers, .. } if headers["Authorization"] == "Bearer t"
        ));
        let broken = McpServerRow {
            id: uuid::Uuid::nil(),
            slug: "x".into(),
            transport: "stdio".into(),
            command: None,
            args: json!([]),
            env: json!({}),
            url: None,
            headers: json!({}),
        };
        assert!(broken.into_config().is_none());
    }
}
