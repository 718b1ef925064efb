//! The transitions of the core state machine (`spec/chatd-architecture.md`,
//! "Transitions"; `spec/chatstate-package.md`, `Transition`).
//!
//! A [`Transition`] names what a caller wants to do; the legal
//! `(transition, from) → to` pairs live in [`crate::matrix`]. The two
//! transitions whose legal targets depend on an argument carry it:
//! `SetArchived { archived }` and `SendMessage { busy_behavior }`.
//! Queue edit and move (API.md "Busy behaviours and the queue") are
//! transitions like the others: `EditQueuedMessage`, `MoveQueuedMessage`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How `SendMessage` behaves when the chat is busy (`R*`, `I*`, `A*`). From
/// idle and error states all four behave the same (API.md "Busy behaviours
/// and the queue").
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
    /// While running (`R*`): queue the message with `steer: true`, so that
    /// the step commit that continues the turn puts it into history (the
    /// model reads it in its next call) and `FinishTurn` promotes it first.
    /// In other states: as `Queue`.
    Steer,
    /// While busy (`R*`, `I*`, `A*`): refuse the send (the matrix lists no
    /// busy row, so it is `TransitionNotAllowed`, `409`), nothing changes.
    /// Idle: as `Queue`.
    Reject,
}

impl BusyBehavior {
    /// Every value, in wire order.
    pub const ALL: [BusyBehavior; 4] = [
        BusyBehavior::Queue,
        BusyBehavior::Interrupt,
        BusyBehavior::Steer,
        BusyBehavior::Reject,
    ];

    /// Wire spelling (`queue`, `interrupt`, `steer` or `reject`).
    pub fn as_str(self) -> &'static str {
        match self {
            BusyBehavior::Queue => "queue",
            BusyBehavior::Interrupt => "interrupt",
            BusyBehavior::Steer => "steer",
            BusyBehavior::Reject => "reject",
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
    /// Replace an earlier user message: the replacement becomes a sibling of
    /// it on a new active branch; the old branch stays, inactive (API.md
    /// "Branches, regenerate and fork").
    EditMessage,
    /// Ask for another answer to the user message an assistant answer
    /// follows: a new sibling branch from that user message (API.md
    /// "Branches, regenerate and fork"). Idle chats only.
    RegenerateMessage,
    /// Make the branch ending at the newest leaf under a message the active
    /// one (API.md "Branches, regenerate and fork"). Idle chats only.
    ActivateBranch,
    /// Ask a worker to compact the history (manual compaction).
    RequestCompaction,
    /// Insert caller-built context-boundary rows and land in `waiting`.
    ClearContext,
    /// Append messages to an idle chat's history without starting a turn
    /// (API.md "Compatible protocols": adding items to a conversation never
    /// runs the model). Lands in `waiting`.
    AppendMessages,
    /// Remove one queued message.
    DeleteQueuedMessage,
    /// Make a queued message the next one to process.
    PromoteQueuedMessage,
    /// Replace a queued message's content, model config or steer flag.
    EditQueuedMessage,
    /// Move a queued message to another index of the queue.
    MoveQueuedMessage,
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
    pub const ALL: [Transition; 30] = [
        Transition::CreateChat,
        Transition::SetArchived { archived: true },
        Transition::SetArchived { archived: false },
        Transition::SendMessage {
            busy_behavior: BusyBehavior::Queue,
        },
        Transition::SendMessage {
            busy_behavior: BusyBehavior::Interrupt,
        },
        Transition::SendMessage {
            busy_behavior: BusyBehavior::Steer,
        },
        Transition::SendMessage {
            busy_behavior: BusyBehavior::Reject,
        },
        Transition::EditMessage,
        Transition::RegenerateMessage,
        Transition::ActivateBranch,
        Transition::RequestCompaction,
        Transition::ClearContext,
        Transition::AppendMessages,
        Transition::DeleteQueuedMessage,
        Transition::PromoteQueuedMessage,
        Transition::EditQueuedMessage,
        Transition::MoveQueuedMessage,
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
            Transition::RegenerateMessage => "RegenerateMessage",
            Transition::ActivateBranch => "ActivateBranch",
            Transition::RequestCompaction => "RequestCompaction",
            Transition::ClearContext => "ClearContext",
            Transition::AppendMessages => "AppendMessages",
            Transition::DeleteQueuedMessage => "DeleteQueuedMessage",
            Transition::PromoteQueuedMessage => "PromoteQueuedMessage",
            Transition::EditQueuedMessage => "EditQueuedMessage",
            Transition::MoveQueuedMessage => "MoveQueuedMessage",
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
