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
//! It is also the one definition of every shape that crosses a crate
//! boundary or lives in a JSON or enum-valued text column: [`ChatError`]
//! (`chats.last_error`), [`RetryState`] (`chats.retry_state`), [`Usage`],
//! [`ModelOptions`] (`chat_model_configs.options`), [`DynamicTool`]
//! (`chats.dynamic_tools`), [`ProviderKind`], [`McpTransport`],
//! [`ReasoningEffort`] and [`Role`]. The store binds them as typed JSON,
//! the worker builds and reads them, and the HTTP layer serves them as they
//! are (with the `openapi` feature they also derive `utoipa::ToSchema`).
//!
//! Every other crate validates transitions through [`matrix::allowed_targets`]
//! and [`matrix::check`]; nothing else in the workspace decides whether a
//! transition is legal.

pub mod chat_error;
pub mod context;
pub mod error;
pub mod limits;
pub mod matrix;
pub mod message;
pub mod model_options;
pub mod provider;
pub mod retry;
pub mod sanitize;
pub mod spelling;
pub mod state;
pub mod stream;
pub mod tools;
pub mod transition;
pub mod usage;
pub mod user;
pub mod workspace_path;

pub use chat_error::{ChatError, ChatErrorKind};
pub use error::{StateError, ToolResultError, ToolResultErrorKind, TransitionError};
pub use message::{
    ActionKind, CANCELLED_TOOL_RESULT, ChatRole, Citation, DENIED_TOOL_RESULT, FinishReason,
    INTERRUPTED_TOOL_RESULT, MessagePart, PendingAction, TIMED_OUT_TOOL_RESULT, ToolCallRef,
    Visibility, approved_tool_calls, fold_outstanding_tool_calls, outstanding_tool_calls,
    pending_actions,
};
pub use model_options::{InvalidOption, ModelOptions, ReasoningEffort, ReasoningEffortOptions};
pub use provider::ProviderKind;
pub use retry::RetryState;
pub use spelling::UnknownSpelling;
pub use state::{ChatStatus, ExecutionState, classify};
pub use stream::{Episode, PartDelta, StreamPart};
pub use tools::{DynamicTool, McpTransport, RequireApproval};
pub use transition::{BusyBehavior, Transition};
pub use usage::Usage;
pub use user::Role;
