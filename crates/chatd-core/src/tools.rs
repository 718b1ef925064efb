//! Tool shapes stored with chats and MCP server definitions: a chat's
//! client-executed [`DynamicTool`]s (`chats.dynamic_tools`, API.md
//! `DynamicTool`) and the [`McpTransport`] of an MCP server
//! (`chat_mcp_servers.transport`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `DynamicTool`: a tool the client executes (results come back through
/// `POST /chats/{chat}/tool-results`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DynamicTool {
    /// 1 to 64 characters of letters, digits, `_` and `-`; unique per chat.
    pub name: String,
    /// What the tool does (for the model).
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments; must be an object.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub input_schema: Value,
    /// The client marks the tool read-only (default `false`): only such
    /// tools are offered in plan mode (API.md "Sub-agents and plan mode").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// Transport of an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A local process speaking MCP on stdin/stdout (`command`, `args`, `env`).
    Stdio,
    /// MCP over streamable HTTP (`url`, `headers`).
    StreamableHttp,
}

impl McpTransport {
    /// Database and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            McpTransport::Stdio => "stdio",
            McpTransport::StreamableHttp => "streamable_http",
        }
    }

    /// Parses the database and wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [McpTransport::Stdio, McpTransport::StreamableHttp]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

crate::spelling::parse_impls!(McpTransport, "MCP transport");
