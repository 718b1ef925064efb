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
//! [`mcp_servers`].

pub mod mcp_servers;
pub mod model_configs;
pub mod providers;

pub use chatd_core::{McpTransport, ModelOptions, ProviderKind, ReasoningEffortOptions};

use sqlx::{Postgres, Transaction};

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use chatd_store::queries::locks::{self, AdvisoryLock};
use chatd_store::queries::model_configs as model_config_rows;

/// The row `row`, or `404` with `message` (`"Provider not found."`, ...)
/// when there is none.
pub(crate) fn found<T>(row: Option<T>, message: &str) -> ApiResult<T> {
    row.ok_or_else(|| ApiError::not_found(message))
}

/// Opens a transaction holding the model-configs advisory lock, which every
/// mutation that can move the default takes first (see the module doc).
pub(crate) async fn lock_model_configs(
    state: &AppState,
) -> ApiResult<Transaction<'static, Postgres>> {
    let mut tx = chatd_store::queries::begin(state.store().pool()).await?;
    locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
    Ok(tx)
}

/// Makes an enabled config the default if none is, then commits `tx`.
pub(crate) async fn commit_with_default(mut tx: Transaction<'static, Postgres>) -> ApiResult<()> {
    model_config_rows::ensure_default(&mut tx).await?;
    tx.commit().await?;
    Ok(())
}
