//! SQL of the `users` table (API.md "Authentication and authorization").
//! User names are unique; a duplicate is PostgreSQL's unique violation
//! (`23505`).

use chatd_core::Role;
use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// A row of `users`.
///
/// Example: [`insert`].
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct UserRow {
    /// User id.
    pub id: Uuid,
    /// Unique user name (1 to 64 characters).
    pub username: String,
    /// Role.
    #[sqlx(try_from = "String")]
    pub role: Role,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// One user.
///
/// # Example
///
/// ```
/// use chatd_core::Role;
/// use chatd_store::queries::users;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let alice = users::insert(pool, "alice", Role::Member).await?;
/// assert_eq!(users::select(pool, alice.id).await?, Some(alice));
/// assert!(users::select(pool, uuid::Uuid::new_v4()).await?.is_none());
/// # Ok(()) }
/// ```
pub async fn select(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<UserRow>> {
    let sql = "SELECT id, username, role, created_at FROM users WHERE id = $1";
    super::keyed::optional(conn, sql, id).await
}

/// Inserts a user with a fresh id (a taken name is `23505`).
///
/// # Example
///
/// ```
/// use chatd_core::Role;
/// use chatd_store::queries::users;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let alice = users::insert(pool, "alice", Role::Admin).await?;
/// assert_eq!((alice.username.as_str(), alice.role), ("alice", Role::Admin));
/// let taken = users::insert(pool, "alice", Role::Member).await.unwrap_err();
/// let code = taken.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
/// assert_eq!(code.as_deref(), Some("23505"));
/// # Ok(()) }
/// ```
pub async fn insert(
    conn: impl PgExecutor<'_>,
    username: &str,
    role: Role,
) -> sqlx::Result<UserRow> {
    sqlx::query_as(
        "INSERT INTO users (id, username, role) VALUES ($1, $2, $3)
         RETURNING id, username, role, created_at",
    )
    .bind(Uuid::new_v4())
    .bind(username)
    .bind(role.as_str())
    .fetch_one(conn)
    .await
}

/// Creates user `username` with `role`, or, when it exists, promotes it to
/// `admin` if `role` is admin (never demotes); returns its id. One statement,
/// so concurrent callers agree on the row.
///
/// # Example
///
/// ```
/// use chatd_core::Role;
/// use chatd_store::queries::users;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let id = users::create_or_promote(pool, "bob", Role::Member).await?;
/// // Asking again as admin promotes the same user; a member never demotes.
/// assert_eq!(users::create_or_promote(pool, "bob", Role::Admin).await?, id);
/// assert_eq!(users::create_or_promote(pool, "bob", Role::Member).await?, id);
/// assert_eq!(users::select(pool, id).await?.map(|u| u.role), Some(Role::Admin));
/// # Ok(()) }
/// ```
pub async fn create_or_promote(
    conn: impl PgExecutor<'_>,
    username: &str,
    role: Role,
) -> sqlx::Result<Uuid> {
    sqlx::query_scalar(
        "INSERT INTO users (id, username, role) VALUES ($1, $2, $3)
         ON CONFLICT (username) DO UPDATE
             SET role = CASE WHEN EXCLUDED.role = 'admin' THEN 'admin' ELSE users.role END
         RETURNING id",
    )
    .bind(Uuid::new_v4())
    .bind(username)
    .bind(role.as_str())
    .fetch_one(conn)
    .await
}
