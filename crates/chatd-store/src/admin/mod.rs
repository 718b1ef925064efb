//! The writes of the admin resources: LLM providers, model configs and MCP
//! server definitions (API.md "Admin routes (providers, models, tools)"),
//! and the `--config` file's sync (API.md "Running a replica"; DESIGN.md
//! "Configuration"). Each operation is one transaction, so a handler makes
//! one call and never composes queries itself. One module per resource:
//! [`providers`], [`model_configs`], [`mcp_servers`], and [`config_sync`].
//!
//! Rules kept here:
//! - Exactly one enabled default model config whenever at least one config
//!   is enabled: every operation that can move the default (a model-config
//!   write or delete, a provider delete, the config sync) holds
//!   [`AdvisoryLock::ModelConfigs`](crate::queries::locks::AdvisoryLock) for
//!   its whole transaction, so that concurrent admins cannot race on the
//!   unique default index, and ends with `ensure_default` (a disabled config
//!   is never the default; without an enabled default the oldest enabled
//!   config becomes it).
//! - An update reads the current row under a lock, hands it to the caller's
//!   `merge` closure (which applies the patch and validates the result: the
//!   checks are the API's) and writes what it returns, all in one
//!   transaction: a concurrent update cannot slip between the read and the
//!   write.
//! - Secrets (provider API keys, MCP `env` and `headers`) are sealed on write
//!   and opened on read with the [`Secrets`](crate::secrets::Secrets) the
//!   operations take: callers see plaintext.
//!
//! The row and definition types are re-exported here: [`ProviderDef`],
//! [`ModelConfigDef`], [`McpServerDef`] and their rows, and
//! [`redact_url`].

pub mod config_sync;
pub mod mcp_servers;
pub mod model_configs;
pub mod providers;

pub use crate::queries::mcp_servers::{McpServerDef, McpServerRow};
pub use crate::queries::model_configs::{ModelConfigDef, ModelConfigRow};
pub use crate::queries::providers::{ProviderDef, ProviderRow, redact_url};

use sqlx::{PgPool, Postgres, Transaction};

use crate::queries::locks::{self, AdvisoryLock};

/// Opens a transaction holding the model-configs advisory lock, which every
/// operation that can move the default takes first (see the module doc).
async fn lock_model_configs(pool: &PgPool) -> sqlx::Result<Transaction<'static, Postgres>> {
    let mut tx = crate::queries::begin(pool).await?;
    locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
    Ok(tx)
}

/// Makes an enabled config the default if none is, then commits `tx`.
async fn commit_with_default(mut tx: Transaction<'static, Postgres>) -> sqlx::Result<()> {
    crate::queries::model_configs::ensure_default(&mut tx).await?;
    tx.commit().await
}
