//! Resolving a chat's model: the model config row (the chat's
//! `last_model_config_id` when enabled, else the enabled default), its
//! provider row, and a [`chatd_llm::Provider`] built from it; plus the
//! request options (`spec/chatd-architecture.md`, "Reasoning effort").

use std::sync::Arc;

use chatd_llm::Provider;
use chatd_store::Chat;
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
/// OpenAI Chat Completions for `openai` and `openai-compat`.
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
                let provider = chatd_llm::OpenAiProvider::new(base, row.api_key.clone(), name)
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

/// Cost in micro-dollars, rounded up, from per-million-token prices in the
/// options; `None` when the model is unpriced (no price given).
pub fn cost_micros(options: &Value, input_tokens: i64, output_tokens: i64) -> Option<i64> {
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

    #[test]
    fn cost_rounds_up_and_unpriced_is_none() {
        let options = json!({"input_price_micros_per_mtok": 3_000_000, "output_price_micros_per_mtok": 15_000_000});
        // 1000 input tokens at $3/Mtok = 3000 micros; 10 output at $15/Mtok = 150 micros.
        assert_eq!(cost_micros(&options, 1000, 10), Some(3150));
        assert_eq!(
            cost_micros(&json!({"input_price_micros_per_mtok": 1}), 1, 0),
            Some(1),
            "rounded up"
        );
        assert_eq!(cost_micros(&json!({}), 1000, 1000), None);
        assert_eq!(
            cost_micros(&json!({"input_price_micros_per_mtok": 0}), 1000, 0),
            Some(0),
            "free is not unpriced"
        );
    }
}
