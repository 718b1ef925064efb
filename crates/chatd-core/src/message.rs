//! Message shapes stored in `chat_messages.content` and sent on the wire
//! (API.md "Objects": `ChatMessagePart`), and the pure rules about tool calls
//! that the transitions rely on (spec "Miscellaneous transition rules").

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// `result` text of a synthetic tool result written when the user interrupts
/// (API.md "Synthetic tool results").
pub const INTERRUPTED_TOOL_RESULT: &str = "Tool execution interrupted by user";
/// `result` text of a synthetic tool result written when the requires-action
/// deadline passes.
pub const TIMED_OUT_TOOL_RESULT: &str = "Tool execution timed out";
/// `result` text of a synthetic tool result written in every other case.
pub const CANCELLED_TOOL_RESULT: &str = "Tool execution cancelled";
/// `error` of the result of a call the user denied (API.md "Tool approval
/// (human in the loop)"): `{"error": DENIED_TOOL_RESULT, "reason": ...}`.
pub const DENIED_TOOL_RESULT: &str = "Tool call denied by user";

/// `chat_messages.role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// System prompt.
    System,
    /// A user turn.
    User,
    /// A model response.
    Assistant,
    /// Tool results.
    Tool,
}

impl ChatRole {
    /// Database and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatRole::System => "system",
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
            ChatRole::Tool => "tool",
        }
    }

    /// Parses the database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            ChatRole::System,
            ChatRole::User,
            ChatRole::Assistant,
            ChatRole::Tool,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// Error returned when a string is not a known role, visibility or finish
/// reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown value {0:?}")]
pub struct UnknownValue(pub String);

impl TryFrom<String> for ChatRole {
    type Error = UnknownValue;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        ChatRole::parse(&value).ok_or(UnknownValue(value))
    }
}

impl TryFrom<String> for Visibility {
    type Error = UnknownValue;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Visibility::parse(&value).ok_or(UnknownValue(value))
    }
}

/// `chat_messages.finish_reason` and `ChatMessage.finish_reason` on the wire:
/// why an assistant message ended. Set on assistant messages only; `None`
/// (null) when unknown (a provider reason chatd does not know, or a row
/// written before the column existed) and on every other role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its answer by itself (OpenAI `stop`, Anthropic
    /// `end_turn`/`stop_sequence`).
    Stop,
    /// The answer was cut off at the output token limit or the context
    /// window (OpenAI `length`, Anthropic `max_tokens`): it is incomplete.
    Length,
    /// The model stopped to call tools.
    ToolCalls,
    /// The provider withheld the rest (OpenAI `content_filter`, Anthropic
    /// `refusal`): it is incomplete.
    ContentFilter,
    /// The user interrupted the answer; the message holds what was
    /// generated until then (`FinishInterruption`'s partial message).
    Interrupted,
}

impl FinishReason {
    /// Every reason, in declaration order.
    pub const ALL: [FinishReason; 5] = [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::ToolCalls,
        FinishReason::ContentFilter,
        FinishReason::Interrupted,
    ];

    /// Database and wire spelling (`stop`, `length`, `tool_calls`,
    /// `content_filter`, `interrupted`).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Interrupted => "interrupted",
        }
    }

    /// Parses the database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Whether the answer is incomplete: cut off (`length`), withheld
    /// (`content_filter`) or interrupted.
    pub fn cut_short(self) -> bool {
        matches!(
            self,
            FinishReason::Length | FinishReason::ContentFilter | FinishReason::Interrupted
        )
    }
}

impl TryFrom<String> for FinishReason {
    type Error = UnknownValue;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        FinishReason::parse(&value).ok_or(UnknownValue(value))
    }
}

/// `chat_messages.visibility`: who sees a message. Model-only rows (a
/// compaction summary boundary) are never returned to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Shown to clients only, never sent to the model.
    User,
    /// Sent to the model only, never shown to clients.
    Model,
    /// Both (the default).
    #[default]
    Both,
}

impl Visibility {
    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::User => "user",
            Visibility::Model => "model",
            Visibility::Both => "both",
        }
    }

    /// Parses the database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Visibility::User, Visibility::Model, Visibility::Both]
            .into_iter()
            .find(|v| v.as_str() == s)
    }

    /// Whether clients may see rows with this visibility.
    pub fn client_visible(self) -> bool {
        self != Visibility::Model
    }
}

/// One part of a message's content (API.md `ChatMessagePart`, tagged by
/// `type`): stored in `chat_messages.content` and `chat_queued_messages.content`
/// and sent on the wire unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = ChatMessagePart))]
#[serde(tag = "type")]
pub enum MessagePart {
    /// Plain text.
    #[serde(rename = "text")]
    Text {
        /// The text.
        text: String,
        /// The sources a provider-hosted tool (web search) gave for this
        /// text (Anthropic's `citations` on a text block, OpenAI's
        /// `url_citation` annotations); absent (empty) for plain text.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        citations: Vec<Citation>,
    },
    /// Model reasoning ("thinking") text.
    #[serde(rename = "reasoning")]
    Reasoning {
        /// The reasoning text.
        text: String,
        /// The provider's signature of the reasoning (Anthropic thinking
        /// blocks), stored byte-exact because it must be sent back verbatim;
        /// absent for providers that sign nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A tool call made by the model.
    #[serde(rename = "tool-call")]
    ToolCall {
        /// The provider's id, stored unchanged.
        tool_call_id: String,
        /// The tool's name as offered to the model.
        tool_name: String,
        /// The JSON arguments, as a string.
        args: String,
    },
    /// The result of a tool call.
    #[serde(rename = "tool-result")]
    ToolResult {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// Any JSON value.
        #[cfg_attr(feature = "openapi", schema(value_type = Value))]
        result: Value,
        /// Whether the tool failed.
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(required = true))]
        is_error: bool,
    },
    /// A call of a provider-hosted tool (API.md "Workspaces and
    /// provider-hosted tools"): the provider ran it (Anthropic's
    /// `server_tool_use`, web search); shown to clients, never executed by
    /// chatd, and never answered by a `tool-result`.
    #[serde(rename = "provider-tool-call")]
    ProviderToolCall {
        /// The provider's id (`srvtoolu_...`), stored unchanged.
        tool_call_id: String,
        /// The provider's tool name (`web_search`).
        tool_name: String,
        /// The call's input as the provider sent it (`{"query": ...}`).
        #[cfg_attr(feature = "openapi", schema(value_type = Value))]
        input: Value,
    },
    /// The result of a provider-hosted tool call, as the provider returned
    /// it, byte-exact because it must be sent back to the same provider in
    /// later turns: for Anthropic's web search the list of
    /// `{type: "web_search_result", url, title, page_age?, encrypted_content}`
    /// or an error object `{type: "web_search_tool_result_error", error_code}`.
    #[serde(rename = "provider-tool-result")]
    ProviderToolResult {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The provider's result, unchanged.
        #[cfg_attr(feature = "openapi", schema(value_type = Value))]
        result: Value,
        /// Whether the provider reported an error.
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(required = true))]
        is_error: bool,
    },
    /// A reference to an uploaded file.
    #[serde(rename = "file")]
    File {
        /// The file's id.
        file_id: Uuid,
        /// Its media type.
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(required = true))]
        media_type: String,
        /// Its display name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// The boundary a clear-context leaves (API.md "Context management"):
    /// the model sees nothing before it. Only on the client-only `system`
    /// row `ClearContext` inserts.
    #[serde(rename = "context-cleared")]
    ContextCleared,
    /// A person approved a tool call that needed approval (API.md "Tool
    /// approval (human in the loop)"). Only on the client-only `tool` row
    /// `CompleteRequiresAction` inserts for an approved call: the model
    /// never sees it, and the call stays without a result until the worker
    /// has run it. A denied call gets its error result instead
    /// ([`MessagePart::denied_result`]), so this part always says
    /// `approved: true` when chatd writes it.
    #[serde(rename = "tool-approval")]
    ToolApproval {
        /// The id of the call decided on.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The decision.
        approved: bool,
        /// The reason the person gave, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// A source cited by a text part ([`MessagePart::Text`]`.citations`):
/// what a provider-hosted web search found and the model quoted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Citation {
    /// The source's URL, as the provider gave it (not checked: clients link
    /// only `http`/`https` ones).
    pub url: String,
    /// The source's title, when the provider gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The passage of the source the text relies on (Anthropic's
    /// `cited_text`), when the provider gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cited_text: Option<String>,
    /// Anthropic's opaque `encrypted_index`, stored byte-exact because it
    /// is sent back with the citation in later turns; absent for other
    /// providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_index: Option<String>,
}

impl Citation {
    /// Length in bytes of its strings, for size limits.
    pub fn text_len(&self) -> usize {
        self.url.len()
            + self.title.as_ref().map_or(0, String::len)
            + self.cited_text.as_ref().map_or(0, String::len)
            + self.encrypted_index.as_ref().map_or(0, String::len)
    }
}

impl MessagePart {
    /// A text part without citations.
    pub fn text(text: impl Into<String>) -> Self {
        MessagePart::Text {
            text: text.into(),
            citations: Vec::new(),
        }
    }

    /// A reasoning part without a signature.
    pub fn reasoning(text: impl Into<String>) -> Self {
        MessagePart::Reasoning {
            text: text.into(),
            signature: None,
        }
    }

    /// A synthetic error result for `call`: `{"error": message}` with
    /// `is_error: true` (API.md "Synthetic tool results").
    pub fn synthetic_result(call: &ToolCallRef, message: &str) -> Self {
        MessagePart::ToolResult {
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.tool_name.clone(),
            result: serde_json::json!({ "error": message }),
            is_error: true,
        }
    }

    /// The result of a call the user denied: `{"error": "Tool call denied
    /// by user", "reason": reason}` (`reason` is `null` when none was
    /// given) with `is_error: true` (API.md "Tool approval (human in the
    /// loop)").
    pub fn denied_result(call: &ToolCallRef, reason: Option<&str>) -> Self {
        MessagePart::ToolResult {
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.tool_name.clone(),
            result: serde_json::json!({ "error": DENIED_TOOL_RESULT, "reason": reason }),
            is_error: true,
        }
    }

    /// Length in bytes of the text this part carries (text and its
    /// citations, reasoning, tool arguments, provider tool inputs and
    /// serialized results), for size limits.
    pub fn text_len(&self) -> usize {
        match self {
            MessagePart::Text { text, citations } => {
                text.len() + citations.iter().map(Citation::text_len).sum::<usize>()
            }
            MessagePart::Reasoning { text, .. } => text.len(),
            MessagePart::ToolCall { args, .. } => args.len(),
            MessagePart::ToolResult { result, .. }
            | MessagePart::ProviderToolResult { result, .. } => result.to_string().len(),
            MessagePart::ProviderToolCall { input, .. } => input.to_string().len(),
            MessagePart::File { name, .. } => name.as_ref().map_or(0, String::len),
            MessagePart::ContextCleared => 0,
            MessagePart::ToolApproval { reason, .. } => reason.as_ref().map_or(0, String::len),
        }
    }
}

/// A tool call identified by id and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCallRef {
    /// The provider's id.
    pub tool_call_id: String,
    /// The tool's name.
    pub tool_name: String,
}

/// The tool calls in `history` (active messages, in id order) that have no
/// result anywhere after them, in the order they were made.
///
/// These are the calls a transition must answer before it inserts a user
/// message, and the pending calls of a `requires_action` chat.
pub fn outstanding_tool_calls<'a, I>(history: I) -> Vec<ToolCallRef>
where
    I: IntoIterator<Item = &'a [MessagePart]>,
{
    let mut calls: Vec<ToolCallRef> = Vec::new();
    for parts in history {
        fold_outstanding_tool_calls(&mut calls, parts);
    }
    calls
}

/// One message's step of [`outstanding_tool_calls`]: `calls` are the calls
/// without a result before `parts`; afterwards, with `parts` applied (its
/// calls added once each, the calls it answers removed). Folding every
/// message of a history in order gives `outstanding_tool_calls` of it, so a
/// caller that knows the calls of a history keeps them up to date as
/// messages are appended.
pub fn fold_outstanding_tool_calls(calls: &mut Vec<ToolCallRef>, parts: &[MessagePart]) {
    for part in parts {
        match part {
            MessagePart::ToolCall {
                tool_call_id,
                tool_name,
                ..
            } if !calls.iter().any(|c| &c.tool_call_id == tool_call_id) => {
                calls.push(ToolCallRef {
                    tool_call_id: tool_call_id.clone(),
                    tool_name: tool_name.clone(),
                });
            }
            MessagePart::ToolResult { tool_call_id, .. } => {
                calls.retain(|c| &c.tool_call_id != tool_call_id);
            }
            _ => {}
        }
    }
}

/// What a pending call of a `requires_action` chat waits for
/// (`action_required.tool_calls[].kind`, API.md "Tool approval (human in
/// the loop)").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// A dynamic tool: the client runs it and submits its `output`.
    ClientTool,
    /// An MCP tool that needs approval: the client submits `approved`.
    Approval,
}

/// A call waiting for the client, and what it waits for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PendingAction {
    /// The call.
    pub call: ToolCallRef,
    /// Whether it waits for a result or a decision.
    pub kind: ActionKind,
}

/// The outstanding calls of `history` (as for [`outstanding_tool_calls`])
/// that carry an approval ([`MessagePart::ToolApproval`] with `approved`):
/// the calls the worker runs next, in call order.
///
/// # Example
///
/// ```
/// use chatd_core::{MessagePart, approved_tool_calls};
/// let call = MessagePart::ToolCall { tool_call_id: "c1".into(), tool_name: "fs__rm".into(), args: "{}".into() };
/// let approval = MessagePart::ToolApproval { tool_call_id: "c1".into(), tool_name: "fs__rm".into(), approved: true, reason: None };
/// let approved = approved_tool_calls([&[call.clone()][..], &[approval][..]]);
/// assert_eq!(approved[0].tool_call_id, "c1");
/// assert!(approved_tool_calls([&[call][..]]).is_empty());
/// ```
pub fn approved_tool_calls<'a, I>(history: I) -> Vec<ToolCallRef>
where
    I: IntoIterator<Item = &'a [MessagePart]>,
{
    let (outstanding, approved) = outstanding_and_approved(history);
    outstanding
        .into_iter()
        .filter(|c| approved.contains(&c.tool_call_id))
        .collect()
}

/// The calls of `history` a `requires_action` chat waits for: the
/// outstanding calls without an approval, in call order, each a
/// [`ActionKind::ClientTool`] when `is_client_tool` says its name is one
/// of the chat's dynamic tools, else an [`ActionKind::Approval`] (the
/// worker answers every other call before it enters requires-action).
///
/// # Example
///
/// ```
/// use chatd_core::{ActionKind, MessagePart, pending_actions};
/// let call = |id: &str, name: &str| MessagePart::ToolCall { tool_call_id: id.into(), tool_name: name.into(), args: "{}".into() };
/// let step = [call("c1", "pick_color"), call("c2", "fs__rm")];
/// let pending = pending_actions([&step[..]], |name| name == "pick_color");
/// let kinds: Vec<ActionKind> = pending.iter().map(|p| p.kind).collect();
/// assert_eq!(kinds, [ActionKind::ClientTool, ActionKind::Approval]);
/// ```
pub fn pending_actions<'a, I>(
    history: I,
    is_client_tool: impl Fn(&str) -> bool,
) -> Vec<PendingAction>
where
    I: IntoIterator<Item = &'a [MessagePart]>,
{
    let (outstanding, approved) = outstanding_and_approved(history);
    outstanding
        .into_iter()
        .filter(|c| !approved.contains(&c.tool_call_id))
        .map(|call| {
            let kind = if is_client_tool(&call.tool_name) {
                ActionKind::ClientTool
            } else {
                ActionKind::Approval
            };
            PendingAction { call, kind }
        })
        .collect()
}

/// [`outstanding_tool_calls`] and the ids of every call with an approval.
fn outstanding_and_approved<'a, I>(
    history: I,
) -> (Vec<ToolCallRef>, std::collections::HashSet<String>)
where
    I: IntoIterator<Item = &'a [MessagePart]>,
{
    let parts: Vec<&'a [MessagePart]> = history.into_iter().collect();
    let approved = parts
        .iter()
        .flat_map(|p| p.iter())
        .filter_map(|p| match p {
            MessagePart::ToolApproval {
                tool_call_id,
                approved: true,
                ..
            } => Some(tool_call_id.clone()),
            _ => None,
        })
        .collect();
    (outstanding_tool_calls(parts), approved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> MessagePart {
        MessagePart::ToolCall {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            args: "{}".into(),
        }
    }

    #[test]
    fn finish_reasons_round_trip_their_database_and_wire_spelling() {
        for reason in FinishReason::ALL {
            assert_eq!(FinishReason::parse(reason.as_str()), Some(reason));
            assert_eq!(
                serde_json::to_value(reason).unwrap(),
                Value::String(reason.as_str().into())
            );
        }
        assert_eq!(
            FinishReason::try_from("max_tokens".to_owned()),
            Err(UnknownValue("max_tokens".into()))
        );
        let cut: Vec<_> = FinishReason::ALL
            .into_iter()
            .filter(|r| r.cut_short())
            .collect();
        assert_eq!(
            cut,
            [
                FinishReason::Length,
                FinishReason::ContentFilter,
                FinishReason::Interrupted
            ]
        );
    }

    #[test]
    fn outstanding_calls_are_those_without_a_later_result() {
        let a = vec![MessagePart::text("hi"), call("1"), call("2")];
        let b = vec![MessagePart::synthetic_result(
            &ToolCallRef {
                tool_call_id: "1".into(),
                tool_name: "t".into(),
            },
            "x",
        )];
        let history: Vec<&[MessagePart]> = vec![&a, &b];
        let out = outstanding_tool_calls(history);
        assert_eq!(
            out,
            vec![ToolCallRef {
                tool_call_id: "2".into(),
                tool_name: "t".into()
            }]
        );
    }

    #[test]
    fn parts_serialize_in_the_wire_shape() {
        let part = call("c1");
        assert_eq!(
            serde_json::to_value(&part).unwrap(),
            serde_json::json!({"type": "tool-call", "tool_call_id": "c1", "tool_name": "t", "args": "{}"})
        );
        let back: MessagePart =
            serde_json::from_value(serde_json::json!({"type":"text","text":"x"})).unwrap();
        assert_eq!(back, MessagePart::text("x"));
        // The signature is additive: absent on the wire when there is none,
        // and rows written before it existed still parse.
        assert_eq!(
            serde_json::to_value(MessagePart::reasoning("r")).unwrap(),
            serde_json::json!({"type": "reasoning", "text": "r"})
        );
        let signed = MessagePart::Reasoning {
            text: "r".into(),
            signature: Some("sig".into()),
        };
        let json = serde_json::to_value(&signed).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "reasoning", "text": "r", "signature": "sig"})
        );
        assert_eq!(serde_json::from_value::<MessagePart>(json).unwrap(), signed);
    }
}
