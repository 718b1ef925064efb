//! MCP server operations (API.md "Admin routes (providers, models, tools)"):
//! `/api/v2/chats/mcp-servers`. `env` and `headers` are sealed on write and
//! opened on read; the slug is unique.

use sqlx::PgPool;
use uuid::Uuid;

use super::{McpServerDef, McpServerRow};
use crate::queries::mcp_servers as rows;
use crate::secrets::Secrets;

/// Why an MCP server write failed.
#[derive(Debug, thiserror::Error)]
pub enum McpServerError {
    /// Another MCP server has this slug (a unique violation, SQLSTATE
    /// `23505`); nothing was written (the API's `409`).
    #[error("an MCP server with this slug already exists")]
    SlugTaken,
    /// The database failed; the transaction was rolled back.
    #[error(transparent)]
    Database(sqlx::Error),
}

impl From<sqlx::Error> for McpServerError {
    /// [`McpServerError::SlugTaken`] for a unique violation, else
    /// [`McpServerError::Database`].
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => {
                McpServerError::SlugTaken
            }
            _ => McpServerError::Database(err),
        }
    }
}

/// Every MCP server, by slug, `env` and `headers` opened (`GET
/// /api/v2/chats/mcp-servers`).
///
/// # Errors
/// A database error, or a sealed value that does not open with `secrets`.
pub async fn list(pool: &PgPool, secrets: &Secrets) -> sqlx::Result<Vec<McpServerRow>> {
    rows::list(pool, secrets).await
}

/// Inserts MCP server `def` (`POST /api/v2/chats/mcp-servers`); one
/// statement. `def` is written as it is: the caller has checked it.
///
/// # Errors
/// [`McpServerError::SlugTaken`] when another server has `def.slug`, or a
/// database error.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::admin::{McpServerDef, mcp_servers};
/// use chatd_store::admin::mcp_servers::McpServerError;
/// use chatd_store::secrets::Secrets;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: RequireApproval::Never,
/// };
/// let row = mcp_servers::create(pool, &Secrets::none(), &def).await?;
/// assert_eq!(mcp_servers::list(pool, &Secrets::none()).await?, vec![row]);
/// // The slug is unique.
/// let again = McpServerDef { id: uuid::Uuid::new_v4(), ..def.clone() };
/// let err = mcp_servers::create(pool, &Secrets::none(), &again).await.unwrap_err();
/// assert!(matches!(err, McpServerError::SlugTaken));
/// // An update merges under the row lock; `merge` may refuse.
/// let updated = mcp_servers::update(pool, &Secrets::none(), def.id, |current| {
///     Ok::<_, McpServerError>(McpServerDef { enabled: false, ..current })
/// })
/// .await?;
/// assert_eq!(updated.map(|r| r.def.enabled), Some(false));
/// assert!(mcp_servers::delete(pool, def.id).await?);
/// assert!(!mcp_servers::delete(pool, def.id).await?);
/// # Ok(()) }
/// ```
pub async fn create(
    pool: &PgPool,
    secrets: &Secrets,
    def: &McpServerDef,
) -> Result<McpServerRow, McpServerError> {
    Ok(rows::insert(pool, secrets, def).await?)
}

/// Updates MCP server `id` in one transaction (`PATCH
/// /api/v2/chats/mcp-servers/{id}`): locks its row (`FOR UPDATE`), hands
/// its current definition (secrets opened) to `merge`, which applies the
/// patch and checks the result, and writes what `merge` returns (with the
/// id `id`). `None` when there is no such server (`merge` is not called).
/// Example: [`create`].
///
/// # Errors
/// `merge`'s error (nothing is written), [`McpServerError::SlugTaken`] when
/// another server has the new slug, or a database error; the transaction is
/// rolled back.
pub async fn update<E>(
    pool: &PgPool,
    secrets: &Secrets,
    id: Uuid,
    merge: impl FnOnce(McpServerDef) -> Result<McpServerDef, E>,
) -> Result<Option<McpServerRow>, E>
where
    E: From<McpServerError>,
{
    let database = |e| McpServerError::Database(e);
    let mut tx = crate::queries::begin(pool).await.map_err(database)?;
    let current = rows::select_for_update(&mut tx, secrets, id)
        .await
        .map_err(database)?;
    let Some(current) = current else {
        return Ok(None);
    };
    let def = McpServerDef {
        id,
        ..merge(current.def)?
    };
    let row = rows::update(&mut *tx, secrets, &def)
        .await
        .map_err(McpServerError::from)?;
    tx.commit().await.map_err(database)?;
    Ok(Some(row))
}

/// Deletes MCP server `id` (`DELETE /api/v2/chats/mcp-servers/{id}`); one
/// statement. False when there is no such server. Example: [`create`].
///
/// # Errors
/// A database error.
pub async fn delete(pool: &PgPool, id: Uuid) -> sqlx::Result<bool> {
    rows::delete(pool, id).await
}
