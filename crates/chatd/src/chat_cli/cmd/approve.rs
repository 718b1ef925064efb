//! `chatd chat approve CHAT CALL_ID...`: approve tool calls that wait for
//! approval (API.md "Tool approval (human in the loop)"), then stream the
//! continuation. [`Decision`] and [`decide`] are shared with `deny`.

use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Session;
use super::tool_results::post_tool_results;

/// Approve tool calls that wait for approval (API.md "Tool approval
/// (human in the loop)"), then stream the model's continuation: the
/// worker runs the calls and the model reads their results.
///
/// Every pending call of the chat is answered in one request, so give
/// all the pending CALL_IDs (`new`, `send` and `watch` list them; a
/// missing one is a 400 naming it). Exit codes as for `send`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The chat id.
    chat: Uuid,
    /// The calls to approve.
    #[arg(required = true, value_name = "CALL_ID")]
    calls: Vec<String>,
    /// Why (stored with the approval).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Do not wait for the continuation.
    #[arg(long)]
    no_watch: bool,
}

impl ApproveArgs {
    /// Approves the calls and, unless `--no-watch`, streams the
    /// continuation.
    ///
    /// # Errors
    /// As [`post_tool_results`].
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let decision = Decision {
            approved: true,
            reason: self.reason,
        };
        decide(session, self.chat, &self.calls, &decision, self.no_watch).await
    }
}

/// What `approve` or `deny` answers every call it names with.
pub struct Decision {
    /// Approve (`true`) or deny.
    pub approved: bool,
    /// Why, if the user said.
    pub reason: Option<String>,
}

/// `chatd chat approve|deny`: posts `decision` for each of `calls` and,
/// unless `no_watch`, streams the continuation like `tool-results`.
///
/// # Errors
/// As [`post_tool_results`].
pub async fn decide(
    session: &Session,
    chat: Uuid,
    calls: &[String],
    decision: &Decision,
    no_watch: bool,
) -> anyhow::Result<ExitCode> {
    let verb = if decision.approved {
        "approved"
    } else {
        "denied"
    };
    let sent = format!("{verb} {} tool call(s)", calls.len());
    post_tool_results(
        session,
        &chat.to_string(),
        &decision_body(calls, decision),
        &sent,
        no_watch,
    )
    .await
}

/// The body of `POST /chats/{chat}/tool-results` answering each of `calls`
/// with `decision`: `{results: [{tool_call_id, approved, reason?}]}`.
fn decision_body(calls: &[String], decision: &Decision) -> Value {
    let results: Vec<Value> = calls
        .iter()
        .map(|id| {
            let mut result = json!({"tool_call_id": id, "approved": decision.approved});
            if let Some(reason) = &decision.reason {
                result["reason"] = json!(reason);
            }
            result
        })
        .collect();
    json!({ "results": results })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_body_answers_every_call_with_the_decision_and_the_reason() {
        let calls = vec!["c1".to_owned(), "c2".to_owned()];
        let deny = Decision {
            approved: false,
            reason: Some("too risky".into()),
        };
        assert_eq!(
            decision_body(&calls, &deny),
            json!({"results": [
                {"tool_call_id": "c1", "approved": false, "reason": "too risky"},
                {"tool_call_id": "c2", "approved": false, "reason": "too risky"},
            ]})
        );
        let approve = Decision {
            approved: true,
            reason: None,
        };
        assert_eq!(
            decision_body(&calls[..1], &approve),
            json!({"results": [{"tool_call_id": "c1", "approved": true}]})
        );
    }
}
