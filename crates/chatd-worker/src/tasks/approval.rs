//! Tool approval in the generation task (API.md "Tool approval (human in
//! the loop)"; DESIGN.md "Approvals reuse `requires_action`").
//!
//! An MCP server's `require_approval` names the tools whose calls wait for
//! a person. The router ([`super::tools::ToolRouter`]) asks [`Approvals`]
//! about every MCP call it routes:
//!
//! - a call that needs approval and has none is left pending, like a
//!   client-tool call: the step commits the assistant message with every
//!   other result of the step (MCP calls that need no approval run and are
//!   committed in the same `CommitStep`), then enters requires-action in the
//!   same bundle, and the chat waits for all of its pending calls at once;
//! - the client's decisions are durable rows of history
//!   (`CompleteRequiresAction`): a denial is the call's error result, an
//!   approval a client-only `tool-approval` part that leaves the call
//!   without a result. The next generation task (on this replica or,
//!   after a crash, on another) finds the approved call outstanding and
//!   runs it once through the ordinary outstanding-call path, with the
//!   idempotency key of that history version and attempt: a run cut off
//!   by a crash runs again with the same key, and the fenced `CommitStep`
//!   commits exactly one result;
//! - the deadline and interrupts answer pending approvals with the same
//!   synthetic results as client-tool calls, so the model continues (after
//!   a timeout) or the turn stops (after an interrupt) exactly as for them.

use std::collections::{HashMap, HashSet};

use chatd_core::{MessagePart, RequireApproval, approved_tool_calls};
use chatd_tools::McpTool;

/// Which MCP calls of a step wait for a decision.
#[derive(Debug, Default)]
pub(super) struct Approvals {
    /// `require_approval` of the chat's usable servers, by slug.
    policies: HashMap<String, RequireApproval>,
    /// Ids of the outstanding calls a person approved.
    approved: HashSet<String>,
    /// Which workspace calls wait (`--workspace-approval`; none when the
    /// chat has no workspace).
    workspace: crate::workspace::WorkspaceApproval,
}

impl Approvals {
    /// The approvals of `history` (the contents of the history since the
    /// last user message, client-only rows included: that is where
    /// approvals are; `queries::messages::tail_contents`) under `policies`.
    pub(super) fn new<'a>(
        policies: HashMap<String, RequireApproval>,
        history: impl IntoIterator<Item = &'a [MessagePart]>,
    ) -> Self {
        let approved = approved_tool_calls(history)
            .into_iter()
            .map(|c| c.tool_call_id)
            .collect();
        Self {
            policies,
            approved,
            workspace: crate::workspace::WorkspaceApproval::Never,
        }
    }

    /// The same approvals with workspace calls waiting as `policy` says.
    pub(super) fn with_workspace(mut self, policy: crate::workspace::WorkspaceApproval) -> Self {
        self.workspace = policy;
        self
    }

    /// Whether call `call_id` of the workspace tool `name` must wait for a
    /// decision: `--workspace-approval` names the tool and nobody approved
    /// the call yet.
    pub(super) fn waits_workspace(&self, call_id: &str, name: &str) -> bool {
        self.workspace.applies_to(name) && !self.approved.contains(call_id)
    }

    /// Whether call `call_id` of `tool` must wait for a decision: its
    /// server's policy names the tool and nobody approved the call yet.
    pub(super) fn waits(&self, call_id: &str, tool: &McpTool) -> bool {
        !self.approved.contains(call_id)
            && self
                .policies
                .get(&tool.server.slug)
                .is_some_and(|p| p.applies_to(&tool.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatd_tools::{McpServerConfig, McpTransport};

    fn tool(slug: &str, name: &str) -> McpTool {
        McpTool {
            server: McpServerConfig {
                id: uuid::Uuid::nil(),
                slug: slug.into(),
                transport: McpTransport::StreamableHttp {
                    url: "http://127.0.0.1:1/mcp".into(),
                    headers: Default::default(),
                },
            },
            name: name.into(),
            qualified_name: format!("{slug}__{name}"),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            read_only: false,
        }
    }

    #[test]
    fn a_call_waits_when_its_servers_policy_names_the_tool_until_it_is_approved() {
        let policies = HashMap::from([
            ("fs".to_owned(), RequireApproval::Tools(vec!["rm".into()])),
            ("web".to_owned(), RequireApproval::Always),
            ("calc".to_owned(), RequireApproval::Never),
        ]);
        let call = MessagePart::ToolCall {
            tool_call_id: "c1".into(),
            tool_name: "fs__rm".into(),
            args: "{}".into(),
        };
        let none = Approvals::new(policies.clone(), [&[call.clone()][..]]);
        assert!(none.waits("c1", &tool("fs", "rm")));
        assert!(!none.waits("c2", &tool("fs", "ls")));
        assert!(none.waits("c3", &tool("web", "get")));
        assert!(!none.waits("c4", &tool("calc", "add")));
        assert!(!none.waits("c5", &tool("unknown", "x")));

        let approval = MessagePart::ToolApproval {
            tool_call_id: "c1".into(),
            tool_name: "fs__rm".into(),
            approved: true,
            reason: None,
        };
        let approved = Approvals::new(policies, [&[call][..], &[approval][..]]);
        assert!(!approved.waits("c1", &tool("fs", "rm")), "approved: runs");
        assert!(
            approved.waits("c9", &tool("fs", "rm")),
            "another call still waits"
        );
    }
}
