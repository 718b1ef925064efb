//! The transitions of the core state machine (`spec/chatd-architecture.md`,
//! "Transitions"; `spec/chatstate-package.md`, `Transition`).
//!
//! A [`Transition`] names what a caller wants to do; the legal
//! `(transition, from) → to` pairs live in [`crate::matrix`]. The two
//! transitions whose legal targets depend on an argument carry it:
//! `SetArchived { archived }` and `SendMessage { busy_behavior }`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How `SendMessage` behaves when the chat is busy (`R*`, `I*`, `A*`). From
/// idle and error states both behave the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BusyBehavior {
    /// Append the message to the end of the queue.
    #[default]
    Queue,
    /// Put the message at the head of the queue and interrupt active work (or
    /// cancel a pending dynamic-tool action).
    Interrupt,
}

impl BusyBehavior {
    /// Wire spelling (`queue` or `interrupt`).
    pub fn as_str(self) -> &'static str {
        match self {
            BusyBehavior::Queue => "queue",
            BusyBehavior::Interrupt => "interrupt",
        }
    }
}

/// A transition of the core state machine. Names match the spec and the
/// reference package's `Tx` methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Transition {
    /// `N → R0` (or `N → W` for a chat created idle).
    CreateChat,
    /// Archive or unarchive one chat.
    SetArchived {
        /// The requested value of the archived marker.
        archived: bool,
    },
    /// Admit a user message (into history, or the queue when busy).
    SendMessage {
        /// What to do when the chat is busy.
        busy_behavior: BusyBehavior,
    },
    /// Replace an earlier user message and drop the suffix after it.
    EditMessage,
    /// Ask a worker to compact the history (manual compaction).
    RequestCompaction,
    /// Insert caller-built context-boundary rows and land in `waiting`.
    ClearContext,
    /// Remove one queued message.
    DeleteQueuedMessage,
    /// Make a queued message the next one to process.
    PromoteQueuedMessage,
    /// Request cancellation of active work or close a pending action.
    Interrupt,
    /// Store client-submitted dynamic tool results.
    CompleteRequiresAction,
    /// Claim the chat for a worker/runner (ownership only).
    Acquire,
    /// Release ownership (ownership only).
    Abandon,
    /// Count another generation attempt under the current history version.
    RecordGenerationAttempt,
    /// Store the retry payload clients see.
    RecordRetryState,
    /// Insert one durable message suffix while running.
    CommitStep,
    /// Park in `requires_action` with a deadline.
    EnterRequiresAction,
    /// Commit the interrupted suffix (if any) and stop or promote the queue.
    FinishInterruption,
    /// Complete the turn; promote the queue head if any.
    FinishTurn,
    /// End the turn in `error`.
    FinishError,
    /// Close pending dynamic tool calls (deadline passed) and run again.
    CancelRequiresAction,
    /// Move an invalid chat into `E0`/`E1`.
    ReconcileInvalidState,
}

impl Transition {
    /// Every transition value, both arguments of the parametrised ones
    /// included: the rows of the exhaustive matrix test.
    pub const ALL: [Transition; 23] = [
        Transition::CreateChat,
        Transition::SetArchived { archived: true },
        Transition::SetArchived { archived: false },
        Transition::SendMessage {
            busy_behavior: BusyBehavior::Queue,
        },
        Transition::SendMessage {
            busy_behavior: BusyBehavior::Interrupt,
        },
        Transition::EditMessage,
        Transition::RequestCompaction,
        Transition::ClearContext,
        Transition::DeleteQueuedMessage,
        Transition::PromoteQueuedMessage,
        Transition::Interrupt,
        Transition::CompleteRequiresAction,
        Transition::Acquire,
        Transition::Abandon,
        Transition::RecordGenerationAttempt,
        Transition::RecordRetryState,
        Transition::CommitStep,
        Transition::EnterRequiresAction,
        Transition::FinishInterruption,
        Transition::FinishTurn,
        Transition::FinishError,
        Transition::CancelRequiresAction,
        Transition::ReconcileInvalidState,
    ];

    /// The transition's name without arguments (`"SendMessage"`), as used in
    /// metrics labels and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Transition::CreateChat => "CreateChat",
            Transition::SetArchived { .. } => "SetArchived",
            Transition::SendMessage { .. } => "SendMessage",
            Transition::EditMessage => "EditMessage",
            Transition::RequestCompaction => "RequestCompaction",
            Transition::ClearContext => "ClearContext",
            Transition::DeleteQueuedMessage => "DeleteQueuedMessage",
            Transition::PromoteQueuedMessage => "PromoteQueuedMessage",
            Transition::Interrupt => "Interrupt",
            Transition::CompleteRequiresAction => "CompleteRequiresAction",
            Transition::Acquire => "Acquire",
            Transition::Abandon => "Abandon",
            Transition::RecordGenerationAttempt => "RecordGenerationAttempt",
            Transition::RecordRetryState => "RecordRetryState",
            Transition::CommitStep => "CommitStep",
            Transition::EnterRequiresAction => "EnterRequiresAction",
            Transition::FinishInterruption => "FinishInterruption",
            Transition::FinishTurn => "FinishTurn",
            Transition::FinishError => "FinishError",
            Transition::CancelRequiresAction => "CancelRequiresAction",
            Transition::ReconcileInvalidState => "ReconcileInvalidState",
        }
    }

    /// Whether this transition only touches ownership (`Acquire`, `Abandon`):
    /// those are orthogonal to the execution state (spec "Ownership state
    /// transition diagram").
    pub fn is_ownership(self) -> bool {
        matches!(self, Transition::Acquire | Transition::Abandon)
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transition::SetArchived { archived } => write!(f, "SetArchived({archived})"),
            Transition::SendMessage { busy_behavior } => {
                write!(f, "SendMessage({})", busy_behavior.as_str())
            }
            other => f.write_str(other.name()),
        }
    }
}
