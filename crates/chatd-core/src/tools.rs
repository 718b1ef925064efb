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

/// `require_approval` of an MCP server (API.md "Tool approval (human in the
/// loop)"; `chat_mcp_servers.require_approval`): which of the server's tools
/// a person must approve before a call runs. On the wire and in the
/// database it is the string `"never"` (the default) or `"always"`, or an
/// array of the server's own tool names (without the `<slug>__` prefix).
///
/// # Example
///
/// ```
/// use chatd_core::RequireApproval;
/// let some: RequireApproval = serde_json::from_str(r#"["delete", "write"]"#).unwrap();
/// assert!(some.applies_to("delete") && !some.applies_to("read"));
/// assert!(RequireApproval::Always.applies_to("read"));
/// assert_eq!(serde_json::to_string(&RequireApproval::default()).unwrap(), r#""never""#);
/// assert!(serde_json::from_str::<RequireApproval>(r#""sometimes""#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "RequireApprovalRepr", into = "RequireApprovalRepr")]
pub enum RequireApproval {
    /// No call needs approval.
    #[default]
    Never,
    /// Every call needs approval.
    Always,
    /// Calls of these tools (the server's own names) need approval.
    Tools(Vec<String>),
}

impl RequireApproval {
    /// Whether a call of the server's tool `tool` (its own name, without
    /// the `<slug>__` prefix) needs approval.
    pub fn applies_to(&self, tool: &str) -> bool {
        match self {
            RequireApproval::Never => false,
            RequireApproval::Always => true,
            RequireApproval::Tools(names) => names.iter().any(|n| n == tool),
        }
    }
}

/// The wire shape of [`RequireApproval`]: a word or a list of names.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RequireApprovalRepr {
    Word(String),
    Tools(Vec<String>),
}

impl TryFrom<RequireApprovalRepr> for RequireApproval {
    type Error = String;

    fn try_from(repr: RequireApprovalRepr) -> Result<Self, Self::Error> {
        match repr {
            RequireApprovalRepr::Word(word) => match word.as_str() {
                "never" => Ok(RequireApproval::Never),
                "always" => Ok(RequireApproval::Always),
                other => Err(format!(
                    "unknown require_approval {other:?}: expected \"never\", \"always\" or an array of tool names"
                )),
            },
            RequireApprovalRepr::Tools(names) => Ok(RequireApproval::Tools(names)),
        }
    }
}

impl From<RequireApproval> for RequireApprovalRepr {
    fn from(value: RequireApproval) -> Self {
        match value {
            RequireApproval::Never => RequireApprovalRepr::Word("never".into()),
            RequireApproval::Always => RequireApprovalRepr::Word("always".into()),
            RequireApproval::Tools(names) => RequireApprovalRepr::Tools(names),
        }
    }
}
