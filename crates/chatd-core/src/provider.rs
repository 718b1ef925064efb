//! `ProviderKind`: which wire protocol an LLM provider speaks (API.md
//! "Admin routes": `provider: "openai" | "openai-compat" | "anthropic"`;
//! stored in `chat_providers.provider`, whose `CHECK` constraint admits
//! exactly these spellings).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Kind of LLM provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ProviderKind {
    /// OpenAI Chat Completions.
    #[serde(rename = "openai")]
    Openai,
    /// Any OpenAI-compatible server.
    #[serde(rename = "openai-compat")]
    OpenaiCompat,
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
}

impl ProviderKind {
    /// Every kind, in declaration order.
    pub const ALL: [ProviderKind; 3] = [
        ProviderKind::Openai,
        ProviderKind::OpenaiCompat,
        ProviderKind::Anthropic,
    ];

    /// Database and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::OpenaiCompat => "openai-compat",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    /// Parses the database and wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::spelling::parse_impls!(ProviderKind, "provider kind");

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn kinds_use_the_wire_spelling() {
        for kind in ProviderKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
            assert_eq!(kind.as_str().parse::<ProviderKind>(), Ok(kind));
            assert_eq!(ProviderKind::try_from(kind.to_string()), Ok(kind));
        }
        assert_eq!(
            ProviderKind::from_str("openai_compat")
                .unwrap_err()
                .to_string(),
            "unknown provider kind \"openai_compat\""
        );
    }
}
