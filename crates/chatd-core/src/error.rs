//! Typed errors of the state machine, mirroring the sentinel errors of the
//! reference package (`spec/chatstate-package.md`, "Variables").
//!
//! Callers match on [`StateError`] variants; the HTTP layer maps them to
//! status codes (API.md "Errors": not allowed → `409`, invalid state → `409`,
//! queue full → `429`, not found → `404`, tool results → `400`).

use crate::state::ExecutionState;
use crate::transition::Transition;

/// A transition rejected because the matrix does not allow it from the chat's
/// current execution state (`ErrTransitionNotAllowed`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("chat state transition not allowed: {transition} from {from}: {reason}")]
pub struct TransitionError {
    /// The rejected transition.
    pub transition: Transition,
    /// The execution state it was attempted from.
    pub from: ExecutionState,
    /// Human-readable reason.
    pub reason: String,
}

impl TransitionError {
    /// Builds a rejection.
    pub fn new(transition: Transition, from: ExecutionState, reason: impl Into<String>) -> Self {
        Self {
            transition,
            from,
            reason: reason.into(),
        }
    }

    /// True when the rejection is because the chat is in an invalid state.
    pub fn is_invalid_state(&self) -> bool {
        self.from == ExecutionState::Invalid
    }

    /// True when the rejection is because the chat does not exist.
    pub fn is_not_found(&self) -> bool {
        self.from == ExecutionState::N
    }
}

/// Which rule a submitted set of tool results broke (`ErrToolResult*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolResultErrorKind {
    /// The same `tool_call_id` appears more than once.
    Duplicate,
    /// A submitted `tool_call_id` is not a pending tool call.
    Unexpected,
    /// A pending tool call has no submitted result.
    Missing,
    /// A submitted output is not valid JSON.
    InvalidJson,
    /// An approval decision (`approved`) was submitted for a client-tool
    /// call, which needs an `output` (API.md "Tool approval").
    ApprovalForClientTool,
    /// An `output` was submitted for a call waiting for approval, which
    /// needs `approved` (API.md "Tool approval").
    OutputForApproval,
}

/// A tool-result validation failure (`ToolResultValidationError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {tool_call_id}", match kind {
    ToolResultErrorKind::Duplicate => "duplicate tool result",
    ToolResultErrorKind::Unexpected => "unexpected tool result",
    ToolResultErrorKind::Missing => "missing tool result",
    ToolResultErrorKind::InvalidJson => "tool result output is not valid JSON",
    ToolResultErrorKind::ApprovalForClientTool => "approval decision for a client-tool call",
    ToolResultErrorKind::OutputForApproval => "output for a call waiting for approval",
})]
pub struct ToolResultError {
    /// The rule that was broken.
    pub kind: ToolResultErrorKind,
    /// The tool call the failure is about.
    pub tool_call_id: String,
}

/// Every domain error a transition can return. Database failures are not
/// here; the store wraps this type together with them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The matrix does not allow the transition from the current state.
    #[error(transparent)]
    TransitionNotAllowed(TransitionError),
    /// The chat's row/queue combination is outside the model
    /// (`ErrInvalidState`); only `ReconcileInvalidState` and ownership
    /// transitions apply.
    #[error("chat is in an invalid execution state ({0})")]
    InvalidState(TransitionError),
    /// The chat does not exist (`ErrChatNotFound`).
    #[error("chat not found")]
    ChatNotFound,
    /// The message does not exist on this chat or is not in active history
    /// (`ErrMessageNotFound`).
    #[error("chat message {message_id} not found")]
    MessageNotFound {
        /// The id that was asked for.
        message_id: i64,
    },
    /// The queued message does not exist on this chat
    /// (`ErrQueuedMessageNotFound`).
    #[error("queued message {queued_message_id} not found")]
    QueuedMessageNotFound {
        /// The id that was asked for.
        queued_message_id: i64,
    },
    /// A family operation was called on a child chat (`ErrChatNotRoot`).
    #[error("chat is not a root chat")]
    ChatNotRoot,
    /// `EditMessage` targeted a message whose role is not `user`
    /// (`ErrEditedMessageNotUser`).
    #[error("only user messages can be edited")]
    EditedMessageNotUser {
        /// The targeted message.
        message_id: i64,
    },
    /// `RegenerateMessage` targeted a message whose role is not `assistant`
    /// (API.md "Branches, regenerate and fork": `400`).
    #[error("only assistant answers can be regenerated")]
    RegeneratedMessageNotAssistant {
        /// The targeted message.
        message_id: i64,
    },
    /// The per-chat queue is at its cap (`MessageQueueFullError`).
    #[error("chat message queue is full (maximum {max})")]
    MessageQueueFull {
        /// The cap, in messages.
        max: i64,
    },
    /// Submitted tool results do not match the pending tool calls.
    #[error(transparent)]
    ToolResult(ToolResultError),
    /// Linking files would give the chat more than its cap
    /// (`ErrChatFileCapExceeded` of `LinkFiles`); nothing was linked.
    #[error("chat attachment cap exceeded (maximum {max} files per chat)")]
    ChatFileCapExceeded {
        /// The cap, in files.
        max: usize,
    },
    /// A file passed to `LinkFiles` does not exist, belongs to another user,
    /// or is linked to another chat (`ErrChatFileUnavailable`); nothing was
    /// linked.
    #[error("chat attachment {file_id} unavailable")]
    ChatFileUnavailable {
        /// The first unavailable file, in the order given.
        file_id: uuid::Uuid,
    },
    /// An input that no transition can accept (for example an empty initial
    /// history); `field` names it.
    #[error("invalid {field}: {detail}")]
    InvalidInput {
        /// The offending input field.
        field: &'static str,
        /// What is wrong with it.
        detail: String,
    },
}

impl From<TransitionError> for StateError {
    fn from(err: TransitionError) -> Self {
        match err.from {
            ExecutionState::N => StateError::ChatNotFound,
            ExecutionState::Invalid => StateError::InvalidState(err),
            _ => StateError::TransitionNotAllowed(err),
        }
    }
}

impl From<ToolResultError> for StateError {
    fn from(err: ToolResultError) -> Self {
        StateError::ToolResult(err)
    }
}
