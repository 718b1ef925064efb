//! Admin routes: LLM providers, model configs and MCP server definitions
//! (API.md "Admin routes (providers, models, tools)" and "Details").
//!
//! Rules kept here:
//! - Mutations (`POST`, `PATCH`, `DELETE`) are admin-only (`403` for
//!   members). Listing is open to every authenticated user because members
//!   pick model configs and MCP servers for their chats; what a member sees
//!   never includes secrets (see below). `GET /api/v2/chats/models` lists the
//!   enabled model configs of enabled providers.
//! - Provider API keys are write-only: responses carry `has_api_key`.
//!   MCP server `env` and `headers` (which usually hold credentials) are
//!   returned to admins only.
//! - Exactly one enabled default model config whenever at least one config is
//!   enabled: setting `is_default: true` unsets the previous default in the
//!   same transaction, and when the default goes away (disabled, unset or
//!   deleted) the oldest enabled config becomes the default. Model-config
//!   mutations take one advisory lock so that concurrent admins cannot race
//!   on the unique default index.
//!
//! One module per resource: [`providers`], [`model_configs`],
//! [`mcp_servers`]. Each resource has one definition: its create request's
//! `into_def` builds the store's definition, for the route and for the
//! `--config` file's entries ([`crate::config_file`]) alike. The writes are
//! operations of the store ([`chatd_store::admin`]): a handler checks the
//! request and makes one call, and an update's merge and checks run inside
//! the store's transaction as a closure.

pub mod mcp_servers;
pub mod model_configs;
pub mod providers;

pub use chatd_core::{McpTransport, ModelOptions, ProviderKind, ReasoningEffortOptions};

use crate::error::{ApiError, ApiResult};

/// The row `row`, or `404` with `message` (`"Provider not found."`, ...)
/// when there is none.
pub(crate) fn found<T>(row: Option<T>, message: &str) -> ApiResult<T> {
    row.ok_or_else(|| ApiError::not_found(message))
}
