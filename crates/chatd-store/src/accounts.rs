//! Operations on users and their tokens that take more than one statement
//! (API.md "Authentication and authorization", "Limits, budgets and the
//! token lifecycle"): each runs in one transaction of its own, so an API
//! handler or a CLI command makes one call and never composes queries.

use chatd_core::Role;
use sqlx::PgPool;
use uuid::Uuid;

use crate::queries::users::{UserPatch, UserRow};
use crate::queries::{self, tokens, users};

/// What [`patch`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOutcome {
    /// The patch is applied; the updated row.
    Updated(UserRow),
    /// There is no user with that id; nothing changed.
    NotFound,
    /// The patch disables a user, and the caller is no longer an enabled
    /// admin (another admin disabled it first); nothing changed. The API
    /// answers `401`, as the caller's next request would.
    CallerNotAdmin,
}

/// Applies `patch` to user `user_id` on behalf of admin `caller`, in one
/// transaction. A patch that disables a user first locks every admin row
/// (`users::lock_admins`) and checks that `caller` is still an enabled admin:
/// two admins disabling each other at once go one at a time, and the second
/// is refused, so an enabled admin always stays.
///
/// # Errors
/// Database errors only; the outcomes are [`PatchOutcome`].
pub async fn patch(
    pool: &PgPool,
    caller: Uuid,
    user_id: Uuid,
    patch: &UserPatch,
) -> sqlx::Result<PatchOutcome> {
    let mut tx = queries::begin(pool).await?;
    if patch.disabled == Some(true) && !users::lock_admins(&mut tx, caller).await? {
        return Ok(PatchOutcome::CallerNotAdmin);
    }
    let Some(row) = users::update(&mut *tx, user_id, patch).await? else {
        return Ok(PatchOutcome::NotFound);
    };
    tx.commit().await?;
    Ok(PatchOutcome::Updated(row))
}

/// Makes sure the user `admin` exists, is an enabled admin, and that the
/// token whose SHA-256 (32 bytes) is `token_hash` authenticates as it without expiry
/// (`CHATD_BOOTSTRAP_ADMIN_TOKEN`), in one transaction; returns the admin's
/// id. Idempotent, and safe when several replicas start at once. A member
/// named `admin` is promoted; a hash stored for another user moves to
/// `admin`; the previous bootstrap token, if different, is revoked (so the
/// replicas of one cluster must share the value).
///
/// # Errors
/// Database errors only.
pub async fn bootstrap_admin(pool: &PgPool, token_hash: &[u8]) -> sqlx::Result<Uuid> {
    let mut tx = queries::begin(pool).await?;
    let admin_id = users::create_or_promote(&mut *tx, "admin", Role::Admin).await?;
    let enable = UserPatch {
        disabled: Some(false),
        ..Default::default()
    };
    users::update(&mut *tx, admin_id, &enable).await?;
    tokens::upsert_bootstrap(&mut *tx, admin_id, token_hash).await?;
    // A rotated bootstrap token replaces the previous one: the old value
    // stops authenticating as soon as a replica starts with the new one.
    tokens::revoke_other_bootstraps(&mut *tx, admin_id, token_hash).await?;
    tx.commit().await?;
    Ok(admin_id)
}

/// What [`issue_token`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueOutcome<E> {
    /// The token is stored for this user (created or promoted first).
    Issued(UserRow),
    /// The user is disabled: its tokens could not authenticate; nothing
    /// changed.
    Disabled(UserRow),
    /// `lifetime` refused the user; nothing changed.
    Refused(E),
}

/// Creates user `username` with `role` (or promotes it to admin when `role`
/// is admin, never demotes) and stores a token for it labelled `label` whose
/// SHA-256 is `token_hash`, with the lifetime in seconds that `lifetime`
/// gives for the user's row (`None`: no expiry), in one transaction (the
/// CLI's `chatd token create`).
///
/// # Errors
/// Database errors only (a vanished user is `RowNotFound`); the outcomes are
/// [`IssueOutcome`].
pub async fn issue_token<E>(
    pool: &PgPool,
    username: &str,
    role: Role,
    label: &str,
    token_hash: &[u8],
    lifetime: impl FnOnce(&UserRow) -> Result<Option<i64>, E>,
) -> sqlx::Result<IssueOutcome<E>> {
    let mut tx = queries::begin(pool).await?;
    let user_id = users::create_or_promote(&mut *tx, username, role).await?;
    let user = users::select(&mut *tx, user_id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    if user.disabled {
        return Ok(IssueOutcome::Disabled(user));
    }
    let seconds = match lifetime(&user) {
        Ok(seconds) => seconds,
        Err(err) => return Ok(IssueOutcome::Refused(err)),
    };
    tokens::insert(&mut *tx, user_id, label, token_hash, seconds).await?;
    tx.commit().await?;
    Ok(IssueOutcome::Issued(user))
}

/// What [`set_password`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordOutcome {
    /// The password is set and the user's other sessions ended (how many).
    Set {
        /// Sessions ended.
        sessions_ended: u64,
    },
    /// There is no such user; nothing changed.
    NotFound,
    /// The stored hash is no longer `expected` (another change won the
    /// race); nothing changed.
    Changed,
}

/// Sets user `user_id`'s password hash to `new_hash` and ends every
/// session of the user but `keep` (the caller's own, when they change their
/// own password), in one transaction. With `expected` (`Some(old)`, `old`
/// being the hash the caller verified the current password against, `None`
/// for no password), the change applies only when the stored hash is still
/// that one: a compare-and-set, so two changes racing on the same current
/// password cannot both win.
///
/// # Errors
/// Database errors only; the outcomes are [`PasswordOutcome`].
pub async fn set_password(
    pool: &PgPool,
    user_id: Uuid,
    new_hash: &str,
    expected: Option<Option<&str>>,
    keep: Option<Uuid>,
) -> sqlx::Result<PasswordOutcome> {
    let mut tx = queries::begin(pool).await?;
    let Some(current) = users::password_hash_for_update(&mut *tx, user_id).await? else {
        return Ok(PasswordOutcome::NotFound);
    };
    if let Some(expected) = expected
        && current.as_deref() != expected
    {
        return Ok(PasswordOutcome::Changed);
    }
    users::set_password_hash(&mut *tx, user_id, new_hash).await?;
    let sessions_ended = crate::queries::sessions::delete_for_user(&mut *tx, user_id, keep).await?;
    tx.commit().await?;
    Ok(PasswordOutcome::Set { sessions_ended })
}

/// `chatd user passwd NAME`: creates user `username` with `role` when
/// missing (an existing member is promoted when `role` is admin, never
/// demoted), sets its password hash and ends all its sessions, in one
/// transaction; returns the user.
///
/// # Errors
/// Database errors only.
pub async fn set_password_by_name(
    pool: &PgPool,
    username: &str,
    role: Role,
    new_hash: &str,
) -> sqlx::Result<UserRow> {
    let mut tx = queries::begin(pool).await?;
    let user_id = users::create_or_promote(&mut *tx, username, role).await?;
    users::set_password_hash(&mut *tx, user_id, new_hash).await?;
    crate::queries::sessions::delete_for_user(&mut *tx, user_id, None).await?;
    let user = users::select(&mut *tx, user_id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    tx.commit().await?;
    Ok(user)
}
