//! SQL of the `users` table (API.md "Authentication and authorization").
//! User names are unique; a duplicate is PostgreSQL's unique violation
//! (`23505`).

use chatd_core::Role;
use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// A row of `users`.
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
    /// A disabled user's tokens answer `401` (API.md "Limits, budgets and
    /// the token lifecycle").
    pub disabled: bool,
    /// `users.max_running_chats`; `None`: the server default.
    pub max_running_chats: Option<i32>,
    /// `users.requests_per_minute`; `None`: the server default.
    pub requests_per_minute: Option<i32>,
    /// `users.monthly_budget_micros`; `None`: the server default.
    pub monthly_budget_micros: Option<i64>,
    /// `users.monthly_token_budget`; `None`: the server default.
    pub monthly_token_budget: Option<i64>,
    /// `users.max_storage_bytes`; `None`: the server default.
    pub max_storage_bytes: Option<i64>,
}

impl UserRow {
    /// The limit columns of the row (resolve them with
    /// [`chatd_core::limits::LimitDefaults::resolve`]).
    pub fn overrides(&self) -> chatd_core::limits::LimitOverrides {
        chatd_core::limits::LimitOverrides {
            max_running_chats: self.max_running_chats,
            requests_per_minute: self.requests_per_minute,
            monthly_budget_micros: self.monthly_budget_micros,
            monthly_token_budget: self.monthly_token_budget,
            max_storage_bytes: self.max_storage_bytes,
        }
    }
}

/// A [`UserRow`] as sqlx's compile-checked macros read it (`role` as its
/// text); [`UserRecord::into_row`] makes the row.
pub(crate) struct UserRecord {
    pub(crate) id: Uuid,
    pub(crate) username: String,
    pub(crate) role: String,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) disabled: bool,
    pub(crate) max_running_chats: Option<i32>,
    pub(crate) requests_per_minute: Option<i32>,
    pub(crate) monthly_budget_micros: Option<i64>,
    pub(crate) monthly_token_budget: Option<i64>,
    pub(crate) max_storage_bytes: Option<i64>,
}

impl UserRecord {
    /// The [`UserRow`]; an unknown `role` is the `ColumnDecode` error that
    /// `FromRow` gave.
    pub(crate) fn into_row(self) -> sqlx::Result<UserRow> {
        Ok(UserRow {
            id: self.id,
            username: self.username,
            role: Role::try_from(self.role).map_err(|e| sqlx::Error::ColumnDecode {
                index: "role".into(),
                source: Box::new(e),
            })?,
            created_at: self.created_at,
            disabled: self.disabled,
            max_running_chats: self.max_running_chats,
            requests_per_minute: self.requests_per_minute,
            monthly_budget_micros: self.monthly_budget_micros,
            monthly_token_budget: self.monthly_token_budget,
            max_storage_bytes: self.max_storage_bytes,
        })
    }
}

/// `sqlx::query_as!(UserRecord, ...)` of a statement that reads every
/// column of [`UserRow`]: `select_users!(u "FROM ... WHERE ...", args)`
/// selects them from `users` of alias `u` (`$rest` follows the column
/// list); `returning_users!("INSERT ... RETURNING ", args)` puts them
/// after the caller's text. sqlx's macros take only string literals, hence
/// the list is written out here.
macro_rules! select_users {
    (u $rest:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            $crate::queries::users::UserRecord,
            "SELECT u.id, u.username, u.role, u.created_at, u.disabled, u.max_running_chats,
                    u.requests_per_minute, u.monthly_budget_micros, u.monthly_token_budget,
                    u.max_storage_bytes "
                + $rest
            $(, $arg)*
        )
    };
}

pub(crate) use select_users;

/// See [`select_users`].
macro_rules! returning_users {
    ($head:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            $crate::queries::users::UserRecord,
            $head
                + "id, username, role, created_at, disabled, max_running_chats,
                   requests_per_minute, monthly_budget_micros, monthly_token_budget,
                   max_storage_bytes"
            $(, $arg)*
        )
    };
}

/// One user.
pub async fn select(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<UserRow>> {
    select_users!(u "FROM users u WHERE u.id = $1", id)
        .fetch_optional(conn)
        .await?
        .map(UserRecord::into_row)
        .transpose()
}

/// Inserts a user with a fresh id (a taken name is `23505`).
pub async fn insert(
    conn: impl PgExecutor<'_>,
    username: &str,
    role: Role,
) -> sqlx::Result<UserRow> {
    returning_users!(
        "INSERT INTO users (id, username, role) VALUES ($1, $2, $3) RETURNING ",
        Uuid::new_v4(),
        username,
        role.as_str(),
    )
    .fetch_one(conn)
    .await?
    .into_row()
}

/// Creates user `username` with `role`, or, when it exists, promotes it to
/// `admin` if `role` is admin (never demotes); returns its id. One statement,
/// so concurrent callers agree on the row.
pub async fn create_or_promote(
    conn: impl PgExecutor<'_>,
    username: &str,
    role: Role,
) -> sqlx::Result<Uuid> {
    sqlx::query_scalar!(
        "INSERT INTO users (id, username, role) VALUES ($1, $2, $3)
         ON CONFLICT (username) DO UPDATE
             SET role = CASE WHEN EXCLUDED.role = 'admin' THEN 'admin' ELSE users.role END
         RETURNING id",
        Uuid::new_v4(),
        username,
        role.as_str(),
    )
    .fetch_one(conn)
    .await
}

/// Every user, by user name (API.md "Limits, budgets and the token
/// lifecycle": `GET /api/v2/users`).
pub async fn list(conn: impl PgExecutor<'_>) -> sqlx::Result<Vec<UserRow>> {
    select_users!(u "FROM users u ORDER BY u.username")
        .fetch_all(conn)
        .await?
        .into_iter()
        .map(UserRecord::into_row)
        .collect()
}

/// A change of a user's disabled flag and limit overrides
/// (`PATCH /api/v2/users/{user}`). For each field `None` keeps the column;
/// for a limit, `Some(None)` returns it to the server default (`NULL`) and
/// `Some(Some(v))` sets the override. Ranges are the caller's to check (the
/// table's `CHECK` constraints refuse negatives and a zero request rate).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserPatch {
    /// New `disabled` flag.
    pub disabled: Option<bool>,
    /// New `max_running_chats` override.
    pub max_running_chats: Option<Option<i32>>,
    /// New `requests_per_minute` override.
    pub requests_per_minute: Option<Option<i32>>,
    /// New `monthly_budget_micros` override.
    pub monthly_budget_micros: Option<Option<i64>>,
    /// New `monthly_token_budget` override.
    pub monthly_token_budget: Option<Option<i64>>,
    /// New `max_storage_bytes` override.
    pub max_storage_bytes: Option<Option<i64>>,
}

/// Locks every admin's row (in id order) and tells whether `actor` is an
/// enabled admin now: what a transaction that disables a user runs first,
/// so that admins disabling each other at the same moment go one at a time
/// and the second, already disabled, is refused; at least one enabled admin
/// always stays (API.md "Limits, budgets and the token lifecycle").
///
/// # Errors
/// Database errors only.
pub async fn lock_admins(conn: &mut sqlx::PgConnection, actor: Uuid) -> sqlx::Result<bool> {
    let admins =
        sqlx::query!("SELECT id, disabled FROM users WHERE role = 'admin' ORDER BY id FOR UPDATE",)
            .fetch_all(conn)
            .await?;
    Ok(admins.iter().any(|a| a.id == actor && !a.disabled))
}

/// Applies `patch` to user `id` in one statement; the updated row, or
/// `None` when there is no such user.
pub async fn update(
    conn: impl PgExecutor<'_>,
    id: Uuid,
    patch: &UserPatch,
) -> sqlx::Result<Option<UserRow>> {
    returning_users!(
        "UPDATE users SET
             disabled = COALESCE($2, disabled),
             max_running_chats = CASE WHEN $3 THEN $4 ELSE max_running_chats END,
             requests_per_minute = CASE WHEN $5 THEN $6 ELSE requests_per_minute END,
             monthly_budget_micros = CASE WHEN $7 THEN $8 ELSE monthly_budget_micros END,
             monthly_token_budget = CASE WHEN $9 THEN $10 ELSE monthly_token_budget END,
             max_storage_bytes = CASE WHEN $11 THEN $12 ELSE max_storage_bytes END
         WHERE id = $1 RETURNING ",
        id,
        patch.disabled,
        patch.max_running_chats.is_some(),
        patch.max_running_chats.flatten(),
        patch.requests_per_minute.is_some(),
        patch.requests_per_minute.flatten(),
        patch.monthly_budget_micros.is_some(),
        patch.monthly_budget_micros.flatten(),
        patch.monthly_token_budget.is_some(),
        patch.monthly_token_budget.flatten(),
        patch.max_storage_bytes.is_some(),
        patch.max_storage_bytes.flatten(),
    )
    .fetch_optional(conn)
    .await?
    .map(UserRecord::into_row)
    .transpose()
}

/// A user and their password hash (a PHC string; `None`: no password
/// set), by user name: what sign-in reads.
pub async fn with_password_by_name(
    conn: impl PgExecutor<'_>,
    username: &str,
) -> sqlx::Result<Option<(UserRow, Option<String>)>> {
    let row = sqlx::query!(
        "SELECT u.id, u.username, u.role, u.created_at, u.disabled, u.max_running_chats,
                u.requests_per_minute, u.monthly_budget_micros, u.monthly_token_budget,
                u.max_storage_bytes, u.password_hash
         FROM users u WHERE u.username = $1",
        username,
    )
    .fetch_optional(conn)
    .await?;
    let Some(r) = row else { return Ok(None) };
    let user = UserRecord {
        id: r.id,
        username: r.username,
        role: r.role,
        created_at: r.created_at,
        disabled: r.disabled,
        max_running_chats: r.max_running_chats,
        requests_per_minute: r.requests_per_minute,
        monthly_budget_micros: r.monthly_budget_micros,
        monthly_token_budget: r.monthly_token_budget,
        max_storage_bytes: r.max_storage_bytes,
    }
    .into_row()?;
    Ok(Some((user, r.password_hash)))
}

/// The password hash of user `id`: `None` when there is no such user,
/// `Some(None)` when they have no password.
pub async fn password_hash(
    conn: impl PgExecutor<'_>,
    id: Uuid,
) -> sqlx::Result<Option<Option<String>>> {
    sqlx::query_scalar!("SELECT password_hash FROM users WHERE id = $1", id)
        .fetch_optional(conn)
        .await
}

/// [`password_hash`] locking the user's row (`FOR UPDATE`): the read of a
/// password change's transaction.
pub async fn password_hash_for_update(
    conn: impl PgExecutor<'_>,
    id: Uuid,
) -> sqlx::Result<Option<Option<String>>> {
    sqlx::query_scalar!(
        "SELECT password_hash FROM users WHERE id = $1 FOR UPDATE",
        id
    )
    .fetch_optional(conn)
    .await
}

/// Sets user `id`'s password hash (a PHC string); `false` when there is no
/// such user.
pub async fn set_password_hash(
    conn: impl PgExecutor<'_>,
    id: Uuid,
    password_hash: &str,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE users SET password_hash = $2 WHERE id = $1",
        id,
        password_hash
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn select_one_user() -> anyhow::Result<()> {
        use crate::queries::users;
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let alice = users::insert(pool, "alice", Role::Member).await?;
        assert_eq!(users::select(pool, alice.id).await?, Some(alice));
        assert!(users::select(pool, uuid::Uuid::new_v4()).await?.is_none());
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn inserts_a_user_with_a_fresh_id_a_taken_name_is_23505() -> anyhow::Result<()> {
        use crate::queries::users;
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let alice = users::insert(pool, "alice", Role::Admin).await?;
        assert_eq!(
            (alice.username.as_str(), alice.role),
            ("alice", Role::Admin)
        );
        let taken = users::insert(pool, "alice", Role::Member)
            .await
            .unwrap_err();
        let code = taken
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("23505"));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn create_or_promote_creates_user_username_with_role_or_when_it_exists()
    -> anyhow::Result<()> {
        use crate::queries::users;
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let id = users::create_or_promote(pool, "bob", Role::Member).await?;
        // Asking again as admin promotes the same user; a member never demotes.
        assert_eq!(
            users::create_or_promote(pool, "bob", Role::Admin).await?,
            id
        );
        assert_eq!(
            users::create_or_promote(pool, "bob", Role::Member).await?,
            id
        );
        assert_eq!(
            users::select(pool, id).await?.map(|u| u.role),
            Some(Role::Admin)
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lock_admins_locks_every_admin_s_row_in_id_order_and_tells_whether_actor()
    -> anyhow::Result<()> {
        use crate::queries::users;
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let root = users::insert(pool, "root", Role::Admin).await?;
        let alice = users::insert(pool, "alice", Role::Member).await?;
        let mut tx = pool.begin().await?;
        assert!(users::lock_admins(&mut tx, root.id).await?);
        assert!(
            !users::lock_admins(&mut tx, alice.id).await?,
            "not an admin"
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn update_applies_patch_to_user_id_in_one_statement() -> anyhow::Result<()> {
        use crate::queries::users::{self, UserPatch};
        use chatd_core::Role;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let bob = users::insert(pool, "bob", Role::Member).await?;
        let alice = users::insert(pool, "alice", Role::Admin).await?;
        let patch = UserPatch {
            disabled: Some(true),
            requests_per_minute: Some(Some(5)),
            ..Default::default()
        };
        let bob = users::update(pool, bob.id, &patch).await?.unwrap();
        assert!(bob.disabled);
        assert_eq!(
            (bob.requests_per_minute, bob.max_running_chats),
            (Some(5), None)
        );
        // `Some(None)` returns a limit to the default; absent fields stay.
        let patch = UserPatch {
            requests_per_minute: Some(None),
            ..Default::default()
        };
        let bob = users::update(pool, bob.id, &patch).await?.unwrap();
        assert_eq!((bob.disabled, bob.requests_per_minute), (true, None));
        assert!(
            users::update(pool, uuid::Uuid::new_v4(), &patch)
                .await?
                .is_none()
        );
        let names: Vec<_> = users::list(pool)
            .await?
            .into_iter()
            .map(|u| u.username)
            .collect();
        assert_eq!(names, ["alice", "bob"]);
        Ok(())
    }
}
