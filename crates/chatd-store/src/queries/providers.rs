//! SQL of the `chat_providers` table: the LLM providers admins configure
//! (API.md "Admin routes"). Deleting a provider deletes its model configs
//! (`ON DELETE CASCADE`).

use chatd_core::ProviderKind;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// A row of `chat_providers`: its definition and when it was written.
///
/// Example: [`upsert`].
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ProviderRow {
    /// Everything [`upsert`] writes.
    #[sqlx(flatten)]
    pub def: ProviderDef,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A complete provider definition: what [`upsert`] writes.
///
/// Example: [`upsert`].
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ProviderDef {
    /// Id.
    pub id: Uuid,
    /// The wire protocol it speaks.
    #[sqlx(try_from = "String")]
    pub provider: ProviderKind,
    /// Display name (may be empty; used in errors).
    pub display_name: String,
    /// Base URL including the version prefix (`https://api.openai.com/v1`);
    /// `None` for the kind's default.
    pub base_url: Option<String>,
    /// API key (never sent to clients).
    pub api_key: Option<String>,
    /// Whether its model configs may be used.
    pub enabled: bool,
}

/// Every provider, oldest first.
///
/// # Example
///
/// ```
/// use chatd_core::ProviderKind;
/// use chatd_store::queries::providers::{self, ProviderDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::OpenaiCompat,
///     display_name: "Local".into(),
///     base_url: Some("http://127.0.0.1:8081/v1".into()),
///     api_key: None,
///     enabled: true,
/// };
/// let row = providers::upsert(pool, &def).await?;
/// assert_eq!(providers::list(pool).await?, vec![row]);
/// # Ok(()) }
/// ```
pub async fn list(conn: impl PgExecutor<'_>) -> sqlx::Result<Vec<ProviderRow>> {
    sqlx::query_as("SELECT * FROM chat_providers ORDER BY created_at, id")
        .fetch_all(conn)
        .await
}

/// One provider.
///
/// # Example
///
/// ```
/// use chatd_core::ProviderKind;
/// use chatd_store::queries::providers::{self, ProviderDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::OpenaiCompat,
///     display_name: "Local".into(),
///     base_url: Some("http://127.0.0.1:8081/v1".into()),
///     api_key: None,
///     enabled: true,
/// };
/// let row = providers::upsert(pool, &def).await?;
/// assert_eq!(providers::select(pool, def.id).await?, Some(row));
/// # Ok(()) }
/// ```
pub async fn select(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<ProviderRow>> {
    let sql = "SELECT * FROM chat_providers WHERE id = $1";
    super::keyed::optional(conn, sql, id).await
}

/// One provider, locked `FOR UPDATE` until `conn`'s transaction ends.
///
/// # Example
///
/// ```
/// use chatd_core::ProviderKind;
/// use chatd_store::queries::providers::{self, ProviderDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::OpenaiCompat,
///     display_name: "Local".into(),
///     base_url: Some("http://127.0.0.1:8081/v1".into()),
///     api_key: None,
///     enabled: true,
/// };
/// let row = providers::upsert(pool, &def).await?;
/// let mut tx = pool.begin().await?;
/// let locked = providers::select_for_update(&mut tx, def.id).await?;
/// assert_eq!(locked.map(|p| p.def.provider), Some(ProviderKind::OpenaiCompat));
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub async fn select_for_update(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<ProviderRow>> {
    let sql = "SELECT * FROM chat_providers WHERE id = $1 FOR UPDATE";
    super::keyed::optional(conn, sql, id).await
}

/// Whether provider `id` exists.
///
/// # Example
///
/// ```
/// use chatd_core::ProviderKind;
/// use chatd_store::queries::providers::{self, ProviderDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::OpenaiCompat,
///     display_name: "Local".into(),
///     base_url: Some("http://127.0.0.1:8081/v1".into()),
///     api_key: None,
///     enabled: true,
/// };
/// let row = providers::upsert(pool, &def).await?;
/// assert!(providers::exists(pool, def.id).await?);
/// assert!(!providers::exists(pool, uuid::Uuid::new_v4()).await?);
/// # Ok(()) }
/// ```
pub async fn exists(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    let sql = "SELECT EXISTS (SELECT 1 FROM chat_providers WHERE id = $1)";
    super::keyed::scalar(conn, sql, id).await
}

/// Inserts provider `def`, or (same id) overwrites it; returns the row.
///
/// # Example
///
/// ```
/// use chatd_core::ProviderKind;
/// use chatd_store::queries::providers::{self, ProviderDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::OpenaiCompat,
///     display_name: "Local".into(),
///     base_url: Some("http://127.0.0.1:8081/v1".into()),
///     api_key: None,
///     enabled: true,
/// };
/// let row = providers::upsert(pool, &def).await?;
/// assert_eq!(row.def, def);
/// // The same id again overwrites.
/// let llama = ProviderDef { display_name: "llama".into(), ..def.clone() };
/// let renamed = providers::upsert(pool, &llama).await?;
/// assert_eq!((renamed.def.id, renamed.def.display_name.as_str()), (def.id, "llama"));
/// # Ok(()) }
/// ```
pub async fn upsert(conn: impl PgExecutor<'_>, def: &ProviderDef) -> sqlx::Result<ProviderRow> {
    sqlx::query_as(
        "INSERT INTO chat_providers (id, provider, display_name, base_url, api_key, enabled)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (id) DO UPDATE SET provider = EXCLUDED.provider,
             display_name = EXCLUDED.display_name, base_url = EXCLUDED.base_url,
             api_key = EXCLUDED.api_key, enabled = EXCLUDED.enabled, updated_at = now()
         RETURNING *",
    )
    .bind(def.id)
    .bind(def.provider.as_str())
    .bind(&def.display_name)
    .bind(&def.base_url)
    .bind(&def.api_key)
    .bind(def.enabled)
    .fetch_one(conn)
    .await
}

/// Deletes provider `id` (its model configs cascade); false when unknown.
///
/// # Example
///
/// ```
/// use chatd_core::ProviderKind;
/// use chatd_store::queries::providers::{self, ProviderDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = ProviderDef {
///     id: uuid::Uuid::new_v4(),
///     provider: ProviderKind::OpenaiCompat,
///     display_name: "Local".into(),
///     base_url: Some("http://127.0.0.1:8081/v1".into()),
///     api_key: None,
///     enabled: true,
/// };
/// let row = providers::upsert(pool, &def).await?;
/// assert!(providers::delete(pool, def.id).await?);
/// assert!(!providers::delete(pool, def.id).await?);
/// # Ok(()) }
/// ```
pub async fn delete(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query("DELETE FROM chat_providers WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(result.rows_affected() > 0)
}
