//! Worker tunables (`spec/chatd-architecture.md`, "Chat worker"; DESIGN.md
//! "Defaults"). Every interval is configurable; tests use small values.

use std::time::Duration;

use uuid::Uuid;

/// Tunables of one worker (one per replica).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This worker's id: written as `chats.worker_id` on acquired chats and
    /// used as the replica id in `replicas`. Regenerated on every start.
    pub worker_id: Uuid,
    /// Acquisition timer (30 s); `chat:ownership` hints wake it sooner.
    pub acquisition_interval: Duration,
    /// Chats claimed per acquisition pass at most (100).
    pub acquisition_batch: i64,
    /// Heartbeat upsert interval (9 s).
    pub heartbeat_interval: Duration,
    /// A heartbeat older than this is stale and its chat may be taken over
    /// (30 s). Also: when this worker could not write heartbeats for this
    /// long, it cancels its runners because their chats may have moved.
    pub lease_stale_after: Duration,
    /// Stale heartbeat rows are deleted this often (30 s).
    pub heartbeat_cleanup_interval: Duration,
    /// Database sync of all registered chats (5 s).
    pub db_sync_interval: Duration,
    /// Provider retries before `FinishError` (25; `--max-generation-retries`).
    pub max_generation_retries: u32,
    /// Delay before the first retry (1 s); doubles per retry.
    pub retry_initial_delay: Duration,
    /// Cap of the retry delay (60 s).
    pub retry_max_delay: Duration,
    /// Model responses allowed after one user message before the turn ends
    /// in error with kind `usage_limit` (250; `--max-steps-per-turn`).
    pub max_steps_per_turn: usize,
    /// Backoff bounds for infrastructure (database) errors inside runner
    /// tasks: from 100 ms to 2 s (after a failover a runner finds the new
    /// primary within 2 s of its promotion; issue 36).
    pub infra_backoff: (Duration, Duration),
    /// Longest wait for an MCP session (process start or connection, plus
    /// the handshake) (30 s).
    pub mcp_connect_timeout: Duration,
    /// Longest wait for one MCP server's tool list (30 s).
    pub mcp_list_timeout: Duration,
    /// Longest wait for one MCP tool call (120 s); a call that takes longer
    /// is an `is_error` result for the model.
    pub mcp_call_timeout: Duration,
    /// Generate a title with the chat's model after its first answer while
    /// the chat still has the default title (true).
    pub generate_titles: bool,
    /// Longest a title generation may take before it is given up (60 s).
    pub title_timeout: Duration,
    /// Auto-archive loop (spec "Auto-archive loop"): a root chat, not
    /// pinned, whose whole family has been idle (`waiting` or `error`, empty
    /// queue, no change to `updated_at`) this long is archived. `None` turns the loop off
    /// (90 days).
    pub auto_archive_after: Option<Duration>,
    /// How often the auto-archive loop looks for such chats (1 h; the first
    /// pass runs at start).
    pub auto_archive_interval: Duration,
    /// How long a runner keeps a chat that went idle (`waiting` or
    /// `error`) before its abandon goroutine applies `Abandon` (1 s): a
    /// message sent meanwhile is answered by the same runner, without a new
    /// `Acquire` and bootstrap (issue 15). Archived chats are abandoned at
    /// once, and a graceful shutdown abandons every chat it owns. A replica
    /// that dies in this window leaves the chat to be taken over when its
    /// lease goes stale.
    pub abandon_idle_after: Duration,
    /// Where the hops of every turn are reported ([`crate::timeline`]);
    /// default nowhere. The benchmark `bench_worker` sets it.
    pub timeline: crate::timeline::Timeline,
    /// Server-wide caps and the defaults of per-user limits (API.md
    /// "Limits, budgets and the token lifecycle"): `max_runners`, the
    /// running-chat cap, budgets, the sub-agent fan-out.
    pub limits: chatd_core::limits::LimitDefaults,
    /// Workspaces: where they live on this replica, their limit, approval
    /// and sandbox (API.md "Workspaces and provider-hosted tools").
    pub workspace: crate::workspace::WorkspaceConfig,
    /// Files linked to no chat are deleted this long after their upload
    /// (24 h; API.md "Limits, budgets and the token lifecycle").
    pub unlinked_file_ttl: Duration,
    /// How often the files sweep looks for them (10 min; the first pass
    /// runs at start; [`crate::files_sweep`]).
    pub files_sweep_interval: Duration,
    /// Check the owner's budgets before every model call (true; API.md
    /// "Budgets"). `false` only for benchmarks that measure the check's
    /// cost (`chatd-api`'s `bench_budget`): `chatd serve` always checks.
    pub check_budgets: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            worker_id: Uuid::new_v4(),
            acquisition_interval: Duration::from_secs(30),
            acquisition_batch: 100,
            heartbeat_interval: Duration::from_secs(9),
            lease_stale_after: Duration::from_secs(30),
            heartbeat_cleanup_interval: Duration::from_secs(30),
            db_sync_interval: Duration::from_secs(5),
            max_generation_retries: 25,
            retry_initial_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(60),
            max_steps_per_turn: 250,
            infra_backoff: (Duration::from_millis(100), Duration::from_secs(2)),
            mcp_connect_timeout: Duration::from_secs(30),
            mcp_list_timeout: Duration::from_secs(30),
            mcp_call_timeout: Duration::from_secs(120),
            generate_titles: true,
            title_timeout: Duration::from_secs(60),
            auto_archive_after: Some(Duration::from_secs(90 * 24 * 60 * 60)),
            auto_archive_interval: Duration::from_secs(60 * 60),
            abandon_idle_after: Duration::from_secs(1),
            timeline: crate::timeline::Timeline::default(),
            limits: chatd_core::limits::LimitDefaults::default(),
            workspace: crate::workspace::WorkspaceConfig::default(),
            unlinked_file_ttl: Duration::from_secs(24 * 60 * 60),
            files_sweep_interval: Duration::from_secs(10 * 60),
            check_budgets: true,
        }
    }
}

impl WorkerConfig {
    /// The MCP host's options.
    pub fn mcp_options(&self) -> chatd_tools::McpOptions {
        chatd_tools::McpOptions {
            connect_timeout: self.mcp_connect_timeout,
            list_timeout: self.mcp_list_timeout,
            call_timeout: self.mcp_call_timeout,
        }
    }

    /// Delay before retry `n` (1-based): `min(initial × 2^(n-1), max)`
    /// (API.md "Workers and replicas").
    pub fn retry_delay(&self, n: i64) -> Duration {
        let exp = n.saturating_sub(1).clamp(0, 30) as u32;
        let delay = self
            .retry_initial_delay
            .saturating_mul(2u32.saturating_pow(exp));
        delay.min(self.retry_max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_from_the_initial_delay_up_to_the_cap() {
        let config = WorkerConfig::default();
        let delays: Vec<u64> = (1..=8).map(|n| config.retry_delay(n).as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(config.retry_delay(1000), Duration::from_secs(60));
    }
}
