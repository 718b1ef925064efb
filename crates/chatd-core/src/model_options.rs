//! `ModelOptions`: the `options` of a model config (API.md "Admin routes";
//! stored in `chat_model_configs.options`) and the rules the worker applies
//! with them: the effective reasoning effort (`spec/chatd-architecture.md`,
//! "Reasoning effort") and the cost of a response.

use serde::{Deserialize, Serialize};

use crate::Usage;

/// Reasoning effort a message may request, ordered `none < minimal < low <
/// medium < high < xhigh < max` (stored in `chat_messages.reasoning_effort`,
/// `chats.last_reasoning_effort` and the model options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// No reasoning.
    None,
    /// Minimal.
    Minimal,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Extra high.
    Xhigh,
    /// The model's maximum.
    Max,
}

impl ReasoningEffort {
    /// Every effort, lowest first.
    pub const ALL: [ReasoningEffort; 7] = [
        ReasoningEffort::None,
        ReasoningEffort::Minimal,
        ReasoningEffort::Low,
        ReasoningEffort::Medium,
        ReasoningEffort::High,
        ReasoningEffort::Xhigh,
        ReasoningEffort::Max,
    ];

    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::Xhigh => "xhigh",
            ReasoningEffort::Max => "max",
        }
    }

    /// Parses the database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

crate::spelling::parse_impls!(ReasoningEffort, "reasoning effort");

/// `options.reasoning_effort` of a model config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReasoningEffortOptions {
    /// Effort used when a message does not ask for one.
    pub default: ReasoningEffort,
    /// Highest effort a message may ask for.
    pub max: ReasoningEffort,
}

/// `options` of a model config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelOptions {
    /// Reasoning effort bounds (`default` ≤ `max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffortOptions>,
    /// Output token cap, 1..=10,000,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<i64>,
    /// Sampling temperature, 0..=2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Price of a million input tokens, in micro-dollars (≥ 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_price_micros_per_mtok: Option<i64>,
    /// Price of a million output tokens, in micro-dollars (≥ 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_price_micros_per_mtok: Option<i64>,
    /// Visible messages a compaction keeps verbatim (API.md "Context
    /// management"), 4..=1000; [`DEFAULT_COMPACT_RECENT_MESSAGES`] when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_recent_messages: Option<i64>,
    /// Provider-hosted tools passed to the provider (API.md "Workspaces and
    /// provider-hosted tools"), each one of [`PROVIDER_TOOLS`]; the provider
    /// runs them, chatd only stores and shows their calls and results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<ProviderToolName>))]
    pub provider_tools: Vec<String>,
    /// Every chat of this model config gets a workspace (API.md
    /// "Workspaces and provider-hosted tools"), as if created with
    /// `workspace: true`; absent or false: only chats created so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<bool>,
}

/// The OpenAPI schema of one `options.provider_tools` entry: one of
/// [`PROVIDER_TOOLS`]. The options keep plain strings so that an unknown
/// name is refused by [`ModelOptions::validate`] naming the field.
#[cfg(feature = "openapi")]
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
#[schema(as = ProviderTool, rename_all = "snake_case")]
enum ProviderToolName {
    /// Web search run by the provider.
    WebSearch,
}

/// The provider-hosted tools `options.provider_tools` may name: `web_search`
/// (Anthropic's server-side web search; OpenAI-compatible servers'
/// `web_search_options`).
pub const PROVIDER_TOOLS: &[&str] = &[WEB_SEARCH];
/// The provider-hosted web search tool's name.
pub const WEB_SEARCH: &str = "web_search";

/// The accepted `max_output_tokens` (the API's OpenAPI document states
/// these ranges from the same constants).
pub const MAX_OUTPUT_TOKENS_RANGE: std::ops::RangeInclusive<i64> = 1..=10_000_000;
/// The accepted `temperature`.
pub const TEMPERATURE_RANGE: std::ops::RangeInclusive<f64> = 0.0..=2.0;
/// The accepted prices (`input_price_micros_per_mtok`,
/// `output_price_micros_per_mtok`).
pub const PRICE_RANGE: std::ops::RangeInclusive<i64> = 0..=i64::MAX;
/// The accepted `compact_recent_messages`.
pub const COMPACT_RECENT_MESSAGES_RANGE: std::ops::RangeInclusive<i64> = 4..=1000;

/// Visible messages a compaction keeps verbatim when a model config does not
/// say (API.md "Context management").
pub const DEFAULT_COMPACT_RECENT_MESSAGES: i64 = 12;

/// A model option out of its range: `field` is its path in a model config
/// (`options.temperature`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {detail}")]
pub struct InvalidOption {
    /// The option's path.
    pub field: &'static str,
    /// What is wrong with it.
    pub detail: &'static str,
}

impl ModelOptions {
    /// Checks the ranges given on each field.
    ///
    /// # Errors
    /// The first option out of range.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        let invalid = |field, detail| Err(InvalidOption { field, detail });
        if let Some(r) = self.reasoning_effort
            && r.default > r.max
        {
            return invalid("options.reasoning_effort", "default must not exceed max");
        }
        if self
            .max_output_tokens
            .is_some_and(|t| !MAX_OUTPUT_TOKENS_RANGE.contains(&t))
        {
            return invalid("options.max_output_tokens", "must be in 1..=10000000");
        }
        if self
            .temperature
            .is_some_and(|t| !t.is_finite() || !TEMPERATURE_RANGE.contains(&t))
        {
            return invalid("options.temperature", "must be in 0..=2");
        }
        if self
            .input_price_micros_per_mtok
            .is_some_and(|p| !PRICE_RANGE.contains(&p))
        {
            return invalid(
                "options.input_price_micros_per_mtok",
                "must not be negative",
            );
        }
        if self
            .output_price_micros_per_mtok
            .is_some_and(|p| !PRICE_RANGE.contains(&p))
        {
            return invalid(
                "options.output_price_micros_per_mtok",
                "must not be negative",
            );
        }
        if self
            .compact_recent_messages
            .is_some_and(|n| !COMPACT_RECENT_MESSAGES_RANGE.contains(&n))
        {
            return invalid("options.compact_recent_messages", "must be in 4..=1000");
        }
        if self
            .provider_tools
            .iter()
            .any(|t| !PROVIDER_TOOLS.contains(&t.as_str()))
        {
            return invalid(
                "options.provider_tools",
                "must list only known provider tools (web_search)",
            );
        }
        Ok(())
    }

    /// Whether `options.provider_tools` lists `tool`.
    pub fn provider_tool(&self, tool: &str) -> bool {
        self.provider_tools.iter().any(|t| t == tool)
    }

    /// Visible messages a compaction keeps verbatim.
    pub fn compact_recent_messages(&self) -> usize {
        usize::try_from(
            self.compact_recent_messages
                .unwrap_or(DEFAULT_COMPACT_RECENT_MESSAGES),
        )
        .unwrap_or(12)
    }

    /// The effective reasoning effort (spec "Reasoning effort"): `requested`
    /// (the chat's `last_reasoning_effort`) if set, else the configured
    /// default, clamped to the configured max. `None` when the config has no
    /// `reasoning_effort` (the request then asks for none).
    pub fn effective_reasoning_effort(
        &self,
        requested: Option<ReasoningEffort>,
    ) -> Option<ReasoningEffort> {
        let bounds = self.reasoning_effort?;
        Some(requested.unwrap_or(bounds.default).min(bounds.max))
    }

    /// Cost in micro-dollars of one response, rounded up, from the
    /// per-million-token prices; `None` when the model is unpriced (no price
    /// given), which is not the same as free (`Some(0)`).
    ///
    /// The whole prompt is priced at the input price: uncached input, cache
    /// reads and cache writes (Anthropic reports them apart from
    /// `input_tokens`; OpenAI's cached tokens are split off the same way by
    /// the adapter). Model configs carry one input price, so this is an upper
    /// bound for providers that discount cache reads.
    pub fn cost_micros(&self, usage: &Usage) -> Option<i64> {
        let (input, output) = (
            self.input_price_micros_per_mtok,
            self.output_price_micros_per_mtok,
        );
        if input.is_none() && output.is_none() {
            return None;
        }
        let total = i128::from(input.unwrap_or(0)) * i128::from(usage.prompt_tokens())
            + i128::from(output.unwrap_or(0)) * i128::from(usage.output_tokens);
        let micros = (total + 999_999) / 1_000_000;
        Some(micros.clamp(0, i128::from(i64::MAX)) as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(value: serde_json::Value) -> ModelOptions {
        serde_json::from_value(value).expect("model options")
    }

    fn effort(options: &ModelOptions, requested: Option<&str>) -> Option<&'static str> {
        options
            .effective_reasoning_effort(requested.map(|r| r.parse().unwrap()))
            .map(ReasoningEffort::as_str)
    }

    #[test]
    fn reasoning_effort_prefers_the_chat_and_clamps_to_max() {
        let options = options(json!({"reasoning_effort": {"default": "medium", "max": "high"}}));
        assert_eq!(effort(&options, None), Some("medium"));
        assert_eq!(effort(&options, Some("low")), Some("low"));
        assert_eq!(effort(&options, Some("max")), Some("high"));
        assert_eq!(
            effort(&ModelOptions::default(), Some("high")),
            None,
            "ignored without a config"
        );
    }

    fn usage(input: i64, output: i64, cache_read: i64, cache_creation: i64) -> Usage {
        Usage {
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
        let priced = options(
            json!({"input_price_micros_per_mtok": 3_000_000, "output_price_micros_per_mtok": 15_000_000}),
        );
        // 1000 input tokens at $3/Mtok = 3000 micros; 10 output at $15/Mtok = 150 micros.
        assert_eq!(priced.cost_micros(&usage(1000, 10, 0, 0)), Some(3150));
        assert_eq!(
            options(json!({"input_price_micros_per_mtok": 1})).cost_micros(&usage(1, 0, 0, 0)),
            Some(1),
            "rounded up"
        );
        assert_eq!(
            ModelOptions::default().cost_micros(&usage(1000, 1000, 0, 0)),
            None
        );
        assert_eq!(
            options(json!({"input_price_micros_per_mtok": 0})).cost_micros(&usage(1000, 0, 0, 0)),
            Some(0),
            "free is not unpriced"
        );
    }

    #[test]
    fn cached_prompt_tokens_are_priced_with_the_input() {
        // Anthropic: 21 uncached + 1500 cache reads + 300 cache writes.
        let options = options(
            json!({"input_price_micros_per_mtok": 1_000_000, "output_price_micros_per_mtok": 2_000_000}),
        );
        assert_eq!(
            options.cost_micros(&usage(21, 12, 1500, 300)),
            Some(1821 + 24)
        );
    }

    #[test]
    fn out_of_range_options_name_their_field() {
        let bad = options(json!({"reasoning_effort": {"default": "high", "max": "low"}}));
        assert_eq!(
            bad.validate().unwrap_err().field,
            "options.reasoning_effort"
        );
        assert_eq!(
            options(json!({"temperature": 3.0}))
                .validate()
                .unwrap_err()
                .field,
            "options.temperature"
        );
        assert!(ModelOptions::default().validate().is_ok());
        assert_eq!(
            options(json!({"provider_tools": ["web_search", "computer"]}))
                .validate()
                .unwrap_err()
                .field,
            "options.provider_tools"
        );
        let search = options(json!({"provider_tools": ["web_search"]}));
        assert!(search.validate().is_ok());
        assert!(search.provider_tool(WEB_SEARCH));
        assert!(!ModelOptions::default().provider_tool(WEB_SEARCH));
        for effort in ReasoningEffort::ALL {
            assert_eq!(effort.as_str().parse::<ReasoningEffort>(), Ok(effort));
        }
    }
}
