//! `chatd chat deny CHAT CALL_ID...`: deny tool calls that wait for
//! approval (API.md "Tool approval (human in the loop)"), then stream the
//! continuation.

use std::process::ExitCode;

use clap::Args;
use uuid::Uuid;

use super::Session;
use super::approve::{Decision, decide};

/// Deny tool calls that wait for approval, then stream the model's
/// continuation: each call is answered with the error result `{"error":
/// "Tool call denied by user", "reason": TEXT}` and never runs.
///
/// As for `approve`, give every pending CALL_ID.
#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The chat id.
    chat: Uuid,
    /// The calls to deny.
    #[arg(required = true, value_name = "CALL_ID")]
    calls: Vec<String>,
    /// Why (the model reads it in the result).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Do not wait for the continuation.
    #[arg(long)]
    no_watch: bool,
}

impl DenyArgs {
    /// Denies the calls and, unless `--no-watch`, streams the
    /// continuation.
    ///
    /// # Errors
    /// As [`super::tool_results::post_tool_results`].
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let decision = Decision {
            approved: false,
            reason: self.reason,
        };
        decide(session, self.chat, &self.calls, &decision, self.no_watch).await
    }
}
