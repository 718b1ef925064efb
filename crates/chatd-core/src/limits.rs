//! Per-user limits and the server's defaults (API.md "Limits, budgets and
//! the token lifecycle").
//!
//! A user's row holds [`LimitOverrides`]: `None` for a field means "the
//! server default". [`LimitDefaults::resolve`] turns them into the effective
//! [`UserLimits`], the `limits` object of `User` and of the usage report.
//! The defaults come from `chatd serve` flags (`--default-max-running-chats`,
//! ...); [`LimitDefaults::default`] gives the documented values.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The server-wide defaults and caps (`chatd serve` flags; API.md "Limits,
/// budgets and the token lifecycle").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDefaults {
    /// Chats one replica runs at once (`--max-runners`, 256).
    pub max_runners: usize,
    /// A user's chats that run at once across all replicas
    /// (`--default-max-running-chats`, 8).
    pub max_running_chats: i32,
    /// API requests per user per minute, per replica
    /// (`--default-requests-per-minute`, 600).
    pub requests_per_minute: i32,
    /// Spend per user per calendar month (UTC), in micro-dollars of the
    /// model prices (`--default-monthly-budget-micros`, none).
    pub monthly_budget_micros: Option<i64>,
    /// Input + output tokens per user per calendar month (UTC)
    /// (`--default-monthly-token-budget`, none).
    pub monthly_token_budget: Option<i64>,
    /// Bytes of files a user keeps (`--default-max-storage-bytes`, 1 GiB).
    pub max_storage_bytes: i64,
    /// Longest lifetime of a member's token (`--max-member-token-lifetime`,
    /// 30 days).
    pub max_member_token_lifetime: Duration,
    /// WebSocket, SSE and long-poll connections a user holds at once on one
    /// replica (`--default-max-open-streams`, 64).
    pub max_open_streams: u32,
    /// Model calls in one turn (`--max-steps-per-turn`, 250).
    pub max_steps_per_turn: u32,
    /// Children one chat may spawn (`--max-subagents-per-chat`, 16).
    pub max_subagents_per_chat: u32,
}

impl Default for LimitDefaults {
    fn default() -> Self {
        Self {
            max_runners: 256,
            max_running_chats: 8,
            requests_per_minute: 600,
            monthly_budget_micros: None,
            monthly_token_budget: None,
            max_storage_bytes: 1 << 30,
            max_member_token_lifetime: Duration::from_secs(30 * 86_400),
            max_open_streams: 64,
            max_steps_per_turn: 250,
            max_subagents_per_chat: 16,
        }
    }
}

impl LimitDefaults {
    /// The effective limits of a user whose row holds `overrides`.
    ///
    /// ```
    /// use chatd_core::limits::{LimitDefaults, LimitOverrides};
    /// let defaults = LimitDefaults::default();
    /// let limits = defaults.resolve(&LimitOverrides { max_running_chats: Some(2), ..Default::default() });
    /// assert_eq!(limits.max_running_chats, 2);
    /// assert_eq!(limits.requests_per_minute, 600);
    /// assert_eq!(limits.monthly_budget_micros, None);
    /// ```
    pub fn resolve(&self, overrides: &LimitOverrides) -> UserLimits {
        UserLimits {
            max_running_chats: overrides
                .max_running_chats
                .unwrap_or(self.max_running_chats),
            requests_per_minute: overrides
                .requests_per_minute
                .unwrap_or(self.requests_per_minute),
            monthly_budget_micros: overrides
                .monthly_budget_micros
                .or(self.monthly_budget_micros),
            monthly_token_budget: overrides.monthly_token_budget.or(self.monthly_token_budget),
            max_storage_bytes: overrides
                .max_storage_bytes
                .unwrap_or(self.max_storage_bytes),
        }
    }
}

/// What a user's row overrides (`users.max_running_chats`, ...); `None`:
/// the server default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitOverrides {
    /// Chats of the user that run at once across all replicas.
    pub max_running_chats: Option<i32>,
    /// API requests per minute (per replica).
    pub requests_per_minute: Option<i32>,
    /// Monthly spend budget in micro-dollars.
    pub monthly_budget_micros: Option<i64>,
    /// Monthly token budget (input + output tokens).
    pub monthly_token_budget: Option<i64>,
    /// Bytes of files the user keeps.
    pub max_storage_bytes: Option<i64>,
}

/// A user's effective limits: the `limits` object of `User` and of
/// `GET /users/{user}/usage` (API.md "Limits, budgets and the token
/// lifecycle").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserLimits {
    /// Chats of the user that run at once across all replicas.
    pub max_running_chats: i32,
    /// API requests per minute (per replica).
    pub requests_per_minute: i32,
    /// Monthly spend budget in micro-dollars; `null`: none.
    pub monthly_budget_micros: Option<i64>,
    /// Monthly token budget (input + output tokens); `null`: none.
    pub monthly_token_budget: Option<i64>,
    /// Bytes of files the user keeps.
    pub max_storage_bytes: i64,
}
