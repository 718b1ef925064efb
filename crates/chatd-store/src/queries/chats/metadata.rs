//! The chat row's metadata (title, labels, pin, plan mode: written
//! without a transition or a snapshot bump, spec "Core state machine"),
//! ownership checks and the chat list.

use super::*;

/// Whether chat `chat_id` exists and belongs to `owner`.
pub async fn is_owned_by(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    owner: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM chats WHERE id = $1 AND owner_id = $2) AS "exists!""#,
        chat_id,
        owner
    )
    .fetch_one(conn)
    .await
}

/// Filters of `GET /chats`.
#[derive(Debug, Clone)]
pub struct ChatFilter {
    /// Whose chats.
    pub owner: Uuid,
    /// Archived ones or unarchived ones.
    pub archived: bool,
    /// Case-insensitive title substring.
    pub q: Option<String>,
    /// Label keys that must match...
    pub label_keys: Vec<String>,
    /// ...these values, pairwise.
    pub label_values: Vec<String>,
    /// Cursor: the last chat of the previous page.
    pub after_id: Option<Uuid>,
    /// Page size.
    pub limit: i64,
    /// `Some(parent)`: only the children of `parent`; `None`: only root
    /// chats (children are hidden from the default list, API.md
    /// "Sub-agents and plan mode").
    pub parent_id: Option<Uuid>,
}

/// A page of chats, newest `updated_at` first, ties by id descending.
pub async fn list(conn: impl PgExecutor<'_>, f: &ChatFilter) -> sqlx::Result<Vec<Chat>> {
    sql!(query() [, f.owner, f.archived, f.q.as_deref(), &f.label_keys[..], &f.label_values[..],
                    f.after_id, f.limit, f.parent_id]:
        "SELECT " chat_columns!() " FROM chats c
         WHERE c.owner_id = $1
           AND c.archived = $2
           AND ($3::text IS NULL OR strpos(lower(c.title), lower($3)) > 0)
           AND NOT EXISTS (
               SELECT 1 FROM unnest($4::text[], $5::text[]) AS f(k, v)
               WHERE (c.labels ->> f.k) IS DISTINCT FROM f.v)
           AND ($6::uuid IS NULL
                OR (c.updated_at, c.id) < (SELECT a.updated_at, a.id FROM chats a WHERE a.id = $6))
           AND (($8::uuid IS NULL AND c.parent_chat_id IS NULL) OR c.parent_chat_id = $8)
         ORDER BY c.updated_at DESC, c.id DESC
         LIMIT $7"
    )
    .try_map(|r| Ok(chat_of!(r)))
    .fetch_all(conn)
    .await
}

/// [`list`] of the chats shared with `f.owner` (API.md "Sign-in, search,
/// sharing and export": `GET /chats?shared=true`): chats of other users
/// with a share of the chat or of its root for them, with the same filters,
/// order and cursor.
pub async fn list_shared(conn: impl PgExecutor<'_>, f: &ChatFilter) -> sqlx::Result<Vec<Chat>> {
    sql!(query() [, f.owner, f.archived, f.q.as_deref(), &f.label_keys[..], &f.label_values[..],
                    f.after_id, f.limit, f.parent_id]:
        "SELECT " chat_columns!() " FROM chats c
         WHERE c.owner_id <> $1
           AND EXISTS (SELECT 1 FROM chat_shares s
                        WHERE s.user_id = $1 AND s.chat_id IN (c.id, c.root_chat_id))
           AND c.archived = $2
           AND ($3::text IS NULL OR strpos(lower(c.title), lower($3)) > 0)
           AND NOT EXISTS (
               SELECT 1 FROM unnest($4::text[], $5::text[]) AS f(k, v)
               WHERE (c.labels ->> f.k) IS DISTINCT FROM f.v)
           AND ($6::uuid IS NULL
                OR (c.updated_at, c.id) < (SELECT a.updated_at, a.id FROM chats a WHERE a.id = $6))
           AND (($8::uuid IS NULL AND c.parent_chat_id IS NULL) OR c.parent_chat_id = $8)
         ORDER BY c.updated_at DESC, c.id DESC
         LIMIT $7"
    )
    .try_map(|r| Ok(chat_of!(r)))
    .fetch_all(conn)
    .await
}

/// Metadata fields of a `PATCH /chats/{chat}`; `None` keeps a column.
#[derive(Debug, Clone, Default)]
pub struct MetadataChanges {
    /// New title.
    pub title: Option<String>,
    /// New labels (replacing every label).
    pub labels: Option<BTreeMap<String, String>>,
    /// New pin order.
    pub pin_order: Option<i32>,
    /// New plan mode (`Some(None)` clears it).
    pub plan_mode: Option<Option<String>>,
}

/// Applies metadata changes and advances `updated_at` (strictly, even within
/// one microsecond), returning the row. The caller holds the row lock.
pub async fn update_metadata(
    conn: &mut PgConnection,
    chat_id: Uuid,
    c: &MetadataChanges,
) -> sqlx::Result<Chat> {
    sql!(query() [, chat_id, c.title.as_deref(), c.labels.as_ref().map(Json) as _, c.pin_order,
                    c.plan_mode.is_some(), c.plan_mode.clone().flatten()]:
        "UPDATE chats c SET
             title = COALESCE($2, title),
             labels = COALESCE($3, labels),
             pin_order = COALESCE($4, pin_order),
             plan_mode = CASE WHEN $5 THEN $6 ELSE plan_mode END,
             updated_at = greatest(now(), updated_at + interval '1 microsecond')
         WHERE c.id = $1
         RETURNING " chat_columns!()
    )
    .try_map(|r| Ok(chat_of!(r)))
    .fetch_one(conn)
    .await
}

/// Sets the title of chat `chat_id` to `title` if it still has the default
/// title ([`crate::DEFAULT_CHAT_TITLE`]), advancing `updated_at` like
/// [`update_metadata`]; returns whether it did. The caller holds the row
/// lock.
pub async fn set_title_if_default(
    conn: &mut PgConnection,
    chat_id: Uuid,
    title: &str,
) -> sqlx::Result<bool> {
    let updated = sqlx::query!(
        "UPDATE chats SET title = $2, updated_at = greatest(now(), updated_at + interval '1 microsecond')
         WHERE id = $1 AND title = $3",
        chat_id,
        title,
        crate::DEFAULT_CHAT_TITLE,
    )
    .execute(conn)
    .await?
    .rows_affected();
    Ok(updated == 1)
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn is_owned_by_whether_chat_chat_id_exists_and_belongs_to_owner() -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        assert!(chats::is_owned_by(pool, chat.id, owner).await?);
        assert!(!chats::is_owned_by(pool, chat.id, uuid::Uuid::new_v4()).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn list_a_page_of_chats_newest_updated_at_first_ties_by_id_descending()
    -> anyhow::Result<()> {
        use crate::queries::chats::{self, ChatFilter};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut filter = ChatFilter {
            owner,
            archived: false,
            q: Some("new".into()), // the default title, "New Chat"
            label_keys: vec![],
            label_values: vec![],
            after_id: None,
            limit: 50,
            parent_id: None,
        };
        let page = chats::list(pool, &filter).await?;
        assert_eq!(page.iter().map(|c| c.id).collect::<Vec<_>>(), vec![chat.id]);
        filter.label_keys = vec!["topic".into()];
        filter.label_values = vec!["travel".into()];
        assert!(chats::list(pool, &filter).await?.is_empty());
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn update_metadata_applies_metadata_changes_and_advances_updated_at() -> anyhow::Result<()>
    {
        use crate::queries::chats::{self, MetadataChanges};
        use std::collections::BTreeMap;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let changes = MetadataChanges {
            title: Some("Trip".into()),
            labels: Some(BTreeMap::from([("topic".into(), "travel".into())])),
            ..Default::default()
        };
        let mut locked = store.machine(chat.id).lock().await?;
        let row = chats::update_metadata(locked.conn(), chat.id, &changes).await?;
        locked.finish().await?;
        assert_eq!(
            (row.title.as_str(), row.labels["topic"].as_str()),
            ("Trip", "travel")
        );
        // Metadata is not execution state: no snapshot bump, but a newer updated_at.
        assert_eq!(row.snapshot_version, chat.snapshot_version);
        assert!(row.updated_at > chat.updated_at);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn set_title_if_default_sets_the_title_of_chat_chat_id_to_title_if_it_still()
    -> anyhow::Result<()> {
        use crate::queries::chats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut locked = store.machine(chat.id).lock().await?;
        assert!(chats::set_title_if_default(locked.conn(), chat.id, "Greetings").await?);
        // Only the default title is replaced.
        assert!(!chats::set_title_if_default(locked.conn(), chat.id, "Other").await?);
        locked.finish().await?;
        Ok(())
    }
}
