//! Pure domain of chatd: no I/O lives here.
//!
//! This crate owns the vocabulary of `spec/chatd-architecture.md` "Core state
//! machine": the 13 [`ExecutionState`]s plus [`ExecutionState::Invalid`], the
//! [`classify`] function that derives a state from a chat row, the
//! [`Transition`] enum, and the transition matrix ([`matrix`]) as data. It also
//! defines the message part shapes that are stored in `chat_messages.content`
//! and the typed errors ([`StateError`]) that mirror the sentinels of the
//! reference `chatstate` package (`spec/chatstate-package.md`).
//!
//! Every other crate validates transitions through [`matrix::allowed_targets`]
//! and [`matrix::check`]; nothing else in the workspace decides whether a
//! transition is legal.

pub mod error;
pub mod matrix;
pub mod message;
pub mod state;
pub mod stream;
pub mod transition;

pub use error::{StateError, ToolResultError, ToolResultErrorKind, TransitionError};
pub use message::{
    CANCELLED_TOOL_RESULT, ChatRole, FinishReason, INTERRUPTED_TOOL_RESULT, MessagePart,
    TIMED_OUT_TOOL_RESULT, ToolCallRef, Visibility, outstanding_tool_calls,
};
pub use state::{ChatStatus, ExecutionState, classify};
pub use stream::{Episode, PartDelta, StreamPart};
pub use transition::{BusyBehavior, Transition};
