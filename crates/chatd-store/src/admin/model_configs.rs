//! Model config operations (API.md "Admin routes (providers, models,
//! tools)"): `/api/v2/chats/model-configs` and the members' list `GET
//! /api/v2/chats/models`. Every write holds the model-configs lock and
//! keeps exactly one enabled default (see [`super`]).

use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::{ModelConfigDef, ModelConfigRow, commit_with_default, lock_model_configs};
use crate::queries::model_configs as rows;
use crate::queries::providers;

/// Why a model-config write failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigError {
    /// `provider_id` names no provider; nothing was written (the API's `400`
    /// naming `provider_id`).
    #[error("unknown provider")]
    UnknownProvider,
    /// The database failed; the transaction was rolled back.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Every model config, or with `enabled_only` the enabled configs of
/// enabled providers (`GET /api/v2/chats/models`); default first, then
/// oldest first.
///
/// # Errors
/// A database error.
pub async fn list(pool: &PgPool, enabled_only: bool) -> sqlx::Result<Vec<ModelConfigRow>> {
    rows::list(pool, enabled_only).await
}

/// Inserts model config `def`, or overwrites the config of the same id
/// (`POST /api/v2/chats/model-configs`), under the model-configs lock: when
/// `def` is the default the previous default is unset, and when no enabled
/// config is the default afterwards the oldest enabled one becomes it.
/// Returns the row as committed (its `is_default` may differ from `def`'s).
/// `def` is written as it is: the caller has checked it.
///
/// # Errors
/// [`ModelConfigError::UnknownProvider`] when `def.provider_id` names no
/// provider, or a database error; nothing is written either way.
///
/// # Example
///
/// ```
/// use chatd_core::{ModelOptions, ProviderKind};
/// use chatd_store::admin::{ModelConfigDef, ProviderDef, model_configs, providers};
/// use chatd_store::admin::model_configs::ModelConfigError;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let provider = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::Openai,
///     display_name: String::new(),
///     base_url: None,
///     api_key: Some("sk-test".into()),
///     enabled: true,
/// };
/// providers::upsert(pool, &chatd_store::secrets::Secrets::none(), &provider).await?;
/// let def = ModelConfigDef {
///     id: uuid::Uuid::new_v4(),
///     provider_id: provider.id,
///     model: "gpt-4o".into(),
///     display_name: "GPT-4o".into(),
///     context_limit: 128_000,
///     compression_threshold: 70,
///     is_default: false,
///     enabled: true,
///     options: ModelOptions::default(),
/// };
/// // The only enabled config becomes the default.
/// let row = model_configs::upsert(pool, &def).await?;
/// assert!(row.def.is_default);
/// // An unknown provider is refused.
/// let orphan = ModelConfigDef { id: uuid::Uuid::new_v4(), provider_id: uuid::Uuid::new_v4(), ..def.clone() };
/// let err = model_configs::upsert(pool, &orphan).await.unwrap_err();
/// assert!(matches!(err, ModelConfigError::UnknownProvider));
/// // An update merges under the lock; `merge` may refuse.
/// let refused = model_configs::update(pool, def.id, |_| Err::<ModelConfigDef, _>(ModelConfigError::UnknownProvider)).await;
/// assert!(refused.is_err());
/// let updated = model_configs::update(pool, def.id, |current| {
///     Ok::<_, ModelConfigError>(ModelConfigDef { context_limit: 64_000, ..current })
/// })
/// .await?;
/// assert_eq!(updated.map(|r| r.def.context_limit), Some(64_000));
/// assert!(model_configs::delete(pool, def.id).await?);
/// assert_eq!(model_configs::list(pool, false).await?, vec![]);
/// # Ok(()) }
/// ```
pub async fn upsert(
    pool: &PgPool,
    def: &ModelConfigDef,
) -> Result<ModelConfigRow, ModelConfigError> {
    let tx = lock_model_configs(pool).await?;
    write(tx, def).await
}

/// Updates model config `id` in one transaction under the model-configs lock
/// (`PATCH /api/v2/chats/model-configs/{id}`): reads it, hands its current
/// definition to `merge`, which applies the patch and checks the result,
/// and writes what `merge` returns (with the id `id`) as [`upsert`] does.
/// `None` when there is no such config (`merge` is not called). Example:
/// [`upsert`].
///
/// # Errors
/// `merge`'s error (nothing is written), [`ModelConfigError::UnknownProvider`]
/// for a `provider_id` that names no provider, or a database error; the
/// transaction is rolled back.
pub async fn update<E>(
    pool: &PgPool,
    id: Uuid,
    merge: impl FnOnce(ModelConfigDef) -> Result<ModelConfigDef, E>,
) -> Result<Option<ModelConfigRow>, E>
where
    E: From<ModelConfigError>,
{
    let mut tx = lock_model_configs(pool)
        .await
        .map_err(ModelConfigError::from)?;
    let Some(current) = rows::select(&mut *tx, id)
        .await
        .map_err(ModelConfigError::from)?
    else {
        return Ok(None);
    };
    let def = ModelConfigDef {
        id,
        ..merge(current.def)?
    };
    Ok(Some(write(tx, &def).await?))
}

/// Deletes model config `id` (`DELETE /api/v2/chats/model-configs/{id}`)
/// under the model-configs lock, and makes another enabled config the
/// default if it was the default. False (and nothing changed) when there is
/// no such config. Example: [`upsert`].
///
/// # Errors
/// A database error (the transaction is rolled back).
pub async fn delete(pool: &PgPool, id: Uuid) -> sqlx::Result<bool> {
    let mut tx = lock_model_configs(pool).await?;
    if !rows::delete(&mut *tx, id).await? {
        return Ok(false);
    }
    commit_with_default(tx).await?;
    Ok(true)
}

/// Writes `def` under the model-configs lock held by `tx`: refuses an
/// unknown provider, else upserts it, moves the default where needed and
/// commits. Returns the row as committed.
async fn write(
    mut tx: Transaction<'static, Postgres>,
    def: &ModelConfigDef,
) -> Result<ModelConfigRow, ModelConfigError> {
    if !providers::exists(&mut *tx, def.provider_id).await? {
        return Err(ModelConfigError::UnknownProvider);
    }
    let row = rows::upsert(&mut tx, def).await?;
    rows::ensure_default(&mut tx).await?;
    let row = rows::select(&mut *tx, def.id).await?.unwrap_or(row);
    tx.commit().await?;
    Ok(row)
}
