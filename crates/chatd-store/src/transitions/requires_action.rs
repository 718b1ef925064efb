//! Client tools and approvals: `EnterRequiresAction`,
//! `CompleteRequiresAction`, `CancelRequiresAction` (spec "Transitions";
//! API.md "Tool approval (human in the loop)"), and the validation of the
//! submitted answers.

use chatd_core::{
    ActionKind, ChatStatus, MessagePart, PendingAction, TIMED_OUT_TOOL_RESULT, ToolResultError,
    ToolResultErrorKind, Transition, Visibility, pending_actions,
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::{ending_generation, running_clearing_deadline};
use crate::bundle::ChatTx;
use crate::error::StoreResult;
use crate::models::{ChatMessage, NewMessage};
use crate::queries::{self, chats::ChatChanges};

/// One submitted answer to a pending call: a client tool's result or a
/// decision on a call waiting for approval (API.md "Tool approval (human
/// in the loop)").
///
/// Example: [`validate_tool_results`].
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultInput {
    /// The provider's tool call id.
    pub tool_call_id: String,
    /// The answer.
    pub answer: ToolAnswer,
}

/// What a [`ToolResultInput`] answers with.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolAnswer {
    /// The result of a client-tool ([`ActionKind::ClientTool`]) call.
    Output {
        /// The output, as JSON text.
        output: String,
        /// Whether the tool failed.
        is_error: bool,
    },
    /// The decision on a call waiting for approval
    /// ([`ActionKind::Approval`]).
    Decision {
        /// Approved: the worker runs the call next; denied: it gets the
        /// error result [`MessagePart::denied_result`].
        approved: bool,
        /// Why, as the person wrote it (stored with the decision).
        reason: Option<String>,
    },
}

impl ToolResultInput {
    /// A client tool's result `output` (JSON text).
    pub fn output(
        tool_call_id: impl Into<String>,
        output: impl Into<String>,
        is_error: bool,
    ) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            answer: ToolAnswer::Output {
                output: output.into(),
                is_error,
            },
        }
    }

    /// A decision on a call waiting for approval.
    pub fn decision(
        tool_call_id: impl Into<String>,
        approved: bool,
        reason: Option<String>,
    ) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            answer: ToolAnswer::Decision { approved, reason },
        }
    }
}

/// Input of [`ChatTx::complete_requires_action`].
///
/// See [`ChatTx::complete_requires_action`] and its tests.
#[derive(Debug, Clone, Default)]
pub struct CompleteRequiresActionInput {
    /// Submitting user.
    pub created_by: Option<Uuid>,
    /// Model config to record on the result rows.
    pub model_config_id: Option<Uuid>,
    /// One answer per pending call, exactly: an output for each
    /// client-tool call, a decision for each call waiting for approval.
    pub results: Vec<ToolResultInput>,
    /// Rows inserted after the results.
    pub suffix_messages: Vec<NewMessage>,
}

/// Checks submitted answers against the pending calls (spec chatstate
/// `ValidateToolResults`, extended by API.md "Tool approval"): no
/// duplicates, nothing unexpected, nothing missing, an answer of the kind
/// the call waits for (an output for a client tool, a decision for an
/// approval), every output valid JSON. Checks run in that order and the
/// first failure is returned.
///
/// # Errors
/// The first [`ToolResultError`] found.
///
/// # Example
///
/// ```
/// use chatd_core::{ActionKind, PendingAction, ToolCallRef, ToolResultErrorKind};
/// use chatd_store::{ToolResultInput, validate_tool_results};
/// let pending = [PendingAction {
///     call: ToolCallRef { tool_call_id: "c1".into(), tool_name: "pick".into() },
///     kind: ActionKind::ClientTool,
/// }];
/// let result = |id: &str, output: &str| ToolResultInput::output(id, output, false);
/// assert!(validate_tool_results(&[result("c1", r#"{"color":"red"}"#)], &pending).is_ok());
/// let missing = validate_tool_results(&[], &pending).unwrap_err();
/// assert_eq!(missing.kind, ToolResultErrorKind::Missing);
/// let bad = validate_tool_results(&[result("c1", "not json")], &pending).unwrap_err();
/// assert_eq!(bad.kind, ToolResultErrorKind::InvalidJson);
/// let decided = validate_tool_results(&[ToolResultInput::decision("c1", true, None)], &pending);
/// assert_eq!(decided.unwrap_err().kind, ToolResultErrorKind::ApprovalForClientTool);
/// ```
pub fn validate_tool_results(
    results: &[ToolResultInput],
    pending: &[PendingAction],
) -> Result<(), ToolResultError> {
    let failure = |kind, result: &ToolResultInput| ToolResultError {
        kind,
        tool_call_id: result.tool_call_id.clone(),
    };
    let mut seen = std::collections::HashSet::new();
    for result in results {
        if !seen.insert(result.tool_call_id.as_str()) {
            return Err(failure(ToolResultErrorKind::Duplicate, result));
        }
    }
    for result in results {
        if !pending
            .iter()
            .any(|p| p.call.tool_call_id == result.tool_call_id)
        {
            return Err(failure(ToolResultErrorKind::Unexpected, result));
        }
    }
    for p in pending {
        if !seen.contains(p.call.tool_call_id.as_str()) {
            return Err(ToolResultError {
                kind: ToolResultErrorKind::Missing,
                tool_call_id: p.call.tool_call_id.clone(),
            });
        }
    }
    for result in results {
        let kind = pending
            .iter()
            .find(|p| p.call.tool_call_id == result.tool_call_id)
            .map(|p| p.kind)
            .expect("checked above");
        match (&result.answer, kind) {
            (ToolAnswer::Decision { .. }, ActionKind::ClientTool) => {
                return Err(failure(ToolResultErrorKind::ApprovalForClientTool, result));
            }
            (ToolAnswer::Output { .. }, ActionKind::Approval) => {
                return Err(failure(ToolResultErrorKind::OutputForApproval, result));
            }
            _ => {}
        }
    }
    for result in results {
        if let ToolAnswer::Output { output, .. } = &result.answer
            && serde_json::from_str::<serde::de::IgnoredAny>(output).is_err()
        {
            return Err(failure(ToolResultErrorKind::InvalidJson, result));
        }
    }
    Ok(())
}

impl ChatTx {
    /// `EnterRequiresAction`: `R0/R1 → A0/A1` with
    /// `requires_action_deadline_at = now() + requires_action_timeout`
    /// (database time); clears `retry_state`. Returns the deadline.
    ///
    /// # Errors
    /// Not allowed unless running.
    ///
    /// Example: [`crate::queries::chats::requires_action_remaining_secs`]. Tested by `tests/it/transitions.rs`: `enter_requires_action_sets_the_deadline_from_database_time`; and `tests/it/matrix.rs`: `matrix_enter_requires_action` (every state).
    pub async fn enter_requires_action(&mut self) -> StoreResult<DateTime<Utc>> {
        let t = Transition::EnterRequiresAction;
        let (_, _, from) = self.enter(t).await?;
        let secs = self.store.config.requires_action_timeout.as_secs_f64();
        let chat = self
            .change(ending_generation(ChatChanges {
                status: Some(ChatStatus::RequiresAction),
                deadline_in_secs: Some(Some(secs)),
                ..ChatChanges::default()
            }))
            .await?;
        self.land(t, from).await?;
        Ok(chat
            .requires_action_deadline_at
            .expect("deadline was just set"))
    }

    /// `CompleteRequiresAction(results)`: `A0/A1 → R0/R1`, inserting one
    /// `tool` message per answer after exact-set validation against the
    /// pending calls ([`validate_tool_results`]), and clearing the
    /// deadline. A client tool's output becomes its result; a denial
    /// becomes the error result `{"error": "Tool call denied by user",
    /// "reason": ...}`; an approval becomes a client-only row with a
    /// `tool-approval` part, leaving the call without a result for the
    /// worker to run (API.md "Tool approval (human in the loop)").
    ///
    /// # Errors
    /// `ToolResult` validation errors; not allowed from other states.
    ///
    /// Tested by `tests/it/transitions.rs`: `complete_requires_action_validates_the_exact_set`; `tests/it/approval.rs`; and `tests/it/matrix.rs`: `matrix_complete_requires_action`, `matrix_complete_requires_action_approving`, `matrix_complete_requires_action_denying` (every state).
    pub async fn complete_requires_action(
        &mut self,
        input: CompleteRequiresActionInput,
    ) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        let t = Transition::CompleteRequiresAction;
        let (chat, _, from) = self.enter(t).await?;
        let mut dynamic = chat.dynamic_tool_names();
        // A turn started by an OpenAI response offers that response's
        // client tools (API.md "Compatible protocols").
        if let Some(turn) = queries::responses::turn_options(db!(self), self.chat_id).await?
            && let Some(tools) = turn.tools
        {
            dynamic.extend(tools.into_iter().map(|t| t.name));
        }
        let tail = queries::messages::tail_contents(db!(self), self.chat_id).await?;
        let pending = pending_actions(tail.iter().map(Vec::as_slice), |name| {
            dynamic.iter().any(|d| d == name)
        });
        if let Err(err) = validate_tool_results(&input.results, &pending) {
            return Err(self.reject(t, err.into()));
        }
        let mut inserted = Vec::with_capacity(input.results.len() + input.suffix_messages.len());
        // Answers are stored in the order the calls were made, whatever
        // order they were submitted in. An approval is a client-only row
        // (the model never sees it) that leaves the call without a result:
        // the worker finds it there, after a crash too, and runs the call.
        for p in &pending {
            let call = &p.call;
            let result = input
                .results
                .iter()
                .find(|r| r.tool_call_id == call.tool_call_id)
                .expect("validated");
            let mut message = match &result.answer {
                ToolAnswer::Output { output, is_error } => {
                    let value: Value = serde_json::from_str(output).expect("validated");
                    NewMessage::tool(vec![MessagePart::ToolResult {
                        tool_call_id: call.tool_call_id.clone(),
                        tool_name: call.tool_name.clone(),
                        result: value,
                        is_error: *is_error,
                    }])
                }
                ToolAnswer::Decision {
                    approved: true,
                    reason,
                } => {
                    let mut message = NewMessage::tool(vec![MessagePart::ToolApproval {
                        tool_call_id: call.tool_call_id.clone(),
                        tool_name: call.tool_name.clone(),
                        approved: true,
                        reason: reason.clone(),
                    }]);
                    message.visibility = Visibility::User;
                    message
                }
                ToolAnswer::Decision {
                    approved: false,
                    reason,
                } => NewMessage::tool(vec![MessagePart::denied_result(call, reason.as_deref())]),
            };
            message.created_by = input.created_by;
            message.model_config_id = input.model_config_id;
            inserted.push(self.insert(&message).await?);
        }
        for message in &input.suffix_messages {
            inserted.push(self.insert(message).await?);
        }
        self.change(running_clearing_deadline()).await?;
        self.land(t, from).await?;
        Ok(inserted)
    }

    /// `CancelRequiresAction`: `A0/A1 → R0/R1`, answering every pending call
    /// with `reason` (default "Tool execution timed out").
    ///
    /// # Errors
    /// Not allowed unless requires_action.
    ///
    /// Tested by `tests/it/transitions.rs`: `cancel_requires_action_answers_pending_calls_as_timed_out`; and `tests/it/matrix.rs`: `matrix_cancel_requires_action` (every state).
    pub async fn cancel_requires_action(
        &mut self,
        reason: Option<&str>,
    ) -> StoreResult<Vec<ChatMessage>> {
        self.confirm().await?;
        let reason = reason.unwrap_or(TIMED_OUT_TOOL_RESULT);
        let t = Transition::CancelRequiresAction;
        let (_, _, from) = self.enter(t).await?;
        let cancellations = self.answer_outstanding(reason).await?;
        self.change(running_clearing_deadline()).await?;
        self.land(t, from).await?;
        Ok(cancellations)
    }
}
