//! Tool hosts of chatd (DESIGN.md "Layout", `chatd-tools`): the tools a
//! chat's model may call besides the client-executed dynamic tools.
//!
//! - [`mcp`]: MCP servers from `chat_mcp_servers` rows, over stdio (a child
//!   process, its stderr captured into our logs, killed on shutdown) or
//!   streamable HTTP, through rmcp. Tools are listed per turn and offered to
//!   the model as `<slug>__<tool>` (API.md "Admin routes"); every call carries
//!   the idempotency key `(chat_id, history_version, generation_attempt,
//!   tool_call_id)` in its request `_meta` (DESIGN.md "Decisions already
//!   taken": tool calls are at-least-once); failures of any kind come back as
//!   `is_error` results for the model rather than errors of the turn.
//!
//! - [`workspace`]: the chat's workspace (API.md "Workspaces and
//!   provider-hosted tools"): the bubblewrap sandbox of `shell`, the
//!   path-safe file tools, and the local directory's manifest, diff and
//!   apply against the committed state.
//!
//! The crate knows nothing about the database: the worker reads the server
//! rows and hands over [`McpServerConfig`]s.

pub mod mcp;
pub mod workspace;

pub use mcp::{
    IdempotencyKey, McpHost, McpOptions, McpServerConfig, McpTool, McpToolset, McpTransport,
    ToolOutcome, qualified_name, split_qualified_name,
};
