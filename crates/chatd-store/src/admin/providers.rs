//! Provider operations (API.md "Admin routes (providers, models, tools)"):
//! `/api/v2/chats/providers`. API keys are sealed on write and opened on
//! read. Deleting a provider deletes its model configs and moves the
//! default (see [`super`]).

use sqlx::PgPool;
use uuid::Uuid;

use super::{ProviderDef, ProviderRow, commit_with_default, lock_model_configs};
use crate::queries::providers as rows;
use crate::secrets::Secrets;

/// Every provider, oldest first, API keys opened (`GET
/// /api/v2/chats/providers`).
///
/// # Errors
/// A database error, or a sealed key that does not open with `secrets`.
pub async fn list(pool: &PgPool, secrets: &Secrets) -> sqlx::Result<Vec<ProviderRow>> {
    rows::list(pool, secrets).await
}

/// Inserts provider `def`, or overwrites the provider of the same id; one
/// statement (`POST /api/v2/chats/providers`). `def` is written as it is:
/// the caller has checked it.
///
/// # Errors
/// A database error.
///
/// # Example
///
/// ```
/// use chatd_core::ProviderKind;
/// use chatd_store::admin::{ProviderDef, providers};
/// use chatd_store::secrets::Secrets;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::OpenaiCompat,
///     display_name: "Local".into(),
///     base_url: Some("http://127.0.0.1:8081/v1".into()),
///     api_key: Some("sk-test".into()),
///     enabled: true,
/// };
/// let row = providers::upsert(pool, &Secrets::none(), &def).await?;
/// assert_eq!(providers::list(pool, &Secrets::none()).await?, vec![row]);
/// // An update merges under the row lock; `merge` may refuse.
/// let renamed = providers::update(pool, &Secrets::none(), def.id, |current| {
///     Ok::<_, sqlx::Error>(ProviderDef { display_name: "llama".into(), ..current })
/// })
/// .await?;
/// assert_eq!(renamed.map(|r| r.def.display_name), Some("llama".into()));
/// assert!(providers::delete(pool, def.id).await?);
/// assert!(!providers::delete(pool, def.id).await?);
/// # Ok(()) }
/// ```
pub async fn upsert(
    pool: &PgPool,
    secrets: &Secrets,
    def: &ProviderDef,
) -> sqlx::Result<ProviderRow> {
    rows::upsert(pool, secrets, def).await
}

/// Updates provider `id` in one transaction (`PATCH
/// /api/v2/chats/providers/{id}`): locks its row (`FOR UPDATE`), hands its
/// current definition (key opened) to `merge`, which applies the patch and
/// checks the result, and writes what `merge` returns (with the id `id`,
/// whatever `merge` set). `None` when there is no such provider (`merge` is
/// not called). Example: [`upsert`].
///
/// # Errors
/// `merge`'s error (nothing is written), or a database error; either way
/// the transaction is rolled back.
pub async fn update<E>(
    pool: &PgPool,
    secrets: &Secrets,
    id: Uuid,
    merge: impl FnOnce(ProviderDef) -> Result<ProviderDef, E>,
) -> Result<Option<ProviderRow>, E>
where
    E: From<sqlx::Error>,
{
    let mut tx = crate::queries::begin(pool).await?;
    let Some(current) = rows::select_for_update(&mut tx, secrets, id).await? else {
        return Ok(None);
    };
    let def = ProviderDef {
        id,
        ..merge(current.def)?
    };
    let row = rows::upsert(&mut *tx, secrets, &def).await?;
    tx.commit().await?;
    Ok(Some(row))
}

/// Deletes provider `id` and its model configs (`DELETE
/// /api/v2/chats/providers/{id}`), under the model-configs lock, and makes
/// another enabled config the default if the default went with them. False
/// (and nothing changed) when there is no such provider. Example:
/// [`upsert`].
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
