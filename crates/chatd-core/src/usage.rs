//! `Usage`: the token counts of one model response (API.md `Usage`),
//! reported by the provider adapters, stored in the token columns of
//! `chat_messages` and returned on assistant messages.

use serde::{Deserialize, Serialize};

/// Token usage of one model response, in tokens.
///
/// The input side is split so that the parts add up and can be priced
/// separately: `input_tokens + cache_read_tokens + cache_creation_tokens` is
/// the whole prompt ([`Usage::prompt_tokens`]). `reasoning_tokens` is the
/// part of `output_tokens` the model spent reasoning (already included in
/// `output_tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: i64,
    /// Completion tokens.
    pub output_tokens: i64,
    /// Reasoning tokens (part of the output).
    pub reasoning_tokens: i64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read_tokens: i64,
    /// Prompt tokens written to the provider's cache.
    pub cache_creation_tokens: i64,
    /// Total tokens.
    pub total_tokens: i64,
}

impl Usage {
    /// The whole prompt: uncached input plus cache reads and writes.
    pub fn prompt_tokens(&self) -> i64 {
        self.input_tokens + self.cache_read_tokens + self.cache_creation_tokens
    }
}
