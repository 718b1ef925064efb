//! SQL of the `chat_files` and `chat_file_chunks` tables (API.md "Files"
//! and "Limits, budgets and the token lifecycle"; `spec/chatstate-package.md`
//! `LinkFiles`).
//!
//! An upload writes the file row and its chunks ([`CHUNK_BYTES`] each, the
//! last one shorter) in one short transaction, once the API has read the
//! whole body: [`lock_storage`] serialises the owner's uploads and reads
//! their storage and quota, then [`insert_sized`] and [`insert_chunk`]
//! ([`insert`] and [`finish_upload`] are the older two-step form, for a row
//! whose size is not known up front). A download reads the chunks back one
//! at a time ([`chunk`]). [`link`] is `LinkFiles`: it links files to a chat
//! under the chat's row lock and the files' row locks, so the cap holds
//! however many sends race. [`list_owned`] pages a user's files, [`delete_unlinked`]
//! deletes one of them, and [`delete_expired_unlinked`] collects files that
//! no chat linked in time; both delete only a row that is still unlinked
//! once it is locked, so neither can race a link. Deleting a chat deletes
//! its files (foreign key `ON DELETE CASCADE`).

use chatd_core::StateError;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::error::StoreResult;

/// Bytes per stored chunk (256 KiB): what an upload buffers before writing
/// and a download reads per query.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Most files linked to one chat by default (`LinkFiles`' `maxLinks`).
pub const DEFAULT_MAX_FILE_LINKS: usize = 20;

/// A row of `chat_files` (no bytes).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FileRow {
    /// File id.
    pub id: Uuid,
    /// The user who uploaded it.
    pub owner_id: Uuid,
    /// The chat it is linked to, once a message linked it.
    pub chat_id: Option<Uuid>,
    /// File name (sanitised by the API).
    pub name: String,
    /// Media type essence, lower case (`image/png`).
    pub media_type: String,
    /// Size in bytes.
    pub size: i64,
    /// Upload time.
    pub created_at: DateTime<Utc>,
}

/// A linked file with (a prefix of) its bytes, as the worker sends it to a
/// provider.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FileContent {
    /// File id.
    pub id: Uuid,
    /// File name.
    pub name: String,
    /// Media type essence.
    pub media_type: String,
    /// Size in bytes of the whole file.
    pub size: i64,
    /// The first bytes asked for (all of them when the file is smaller).
    pub data: Vec<u8>,
}

/// Inserts the row of a new file of `owner_id`, size 0, in the upload's
/// transaction; its chunks follow ([`insert_chunk`]), then
/// [`finish_upload`].
#[cfg(test)] // the tests' two-step form; an upload is `crate::uploads::store_upload`
pub async fn insert(
    conn: impl PgExecutor<'_>,
    id: Uuid,
    owner_id: Uuid,
    name: &str,
    media_type: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO chat_files (id, owner_id, name, media_type, size) VALUES ($1, $2, $3, $4, 0)",
        id,
        owner_id,
        name,
        media_type,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Stores chunk `seq` (0-based) of file `file_id`.
pub async fn insert_chunk(
    conn: impl PgExecutor<'_>,
    file_id: Uuid,
    seq: i32,
    data: &[u8],
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO chat_file_chunks (file_id, seq, data) VALUES ($1, $2, $3)",
        file_id,
        seq,
        data,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Sets the size of file `id` to the sum of its chunks and returns its row.
#[cfg(test)] // see `insert`
pub async fn finish_upload(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<FileRow> {
    sqlx::query_as!(
        FileRow,
        "UPDATE chat_files SET size = coalesce(
             (SELECT sum(octet_length(data)) FROM chat_file_chunks WHERE file_id = $1), 0)
         WHERE id = $1
         RETURNING id, owner_id, chat_id, name, media_type, size, created_at",
        id,
    )
    .fetch_one(conn)
    .await
}

/// Class key of the per-owner advisory lock of [`lock_storage`] (the
/// two-`int4` form of `pg_advisory_xact_lock`, whose key space does not
/// overlap the one-`bigint` keys of [`super::locks`]).
pub const STORAGE_LOCK_CLASS: i32 = 7_700_301;

/// A user's stored bytes and storage quota, read under [`lock_storage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storage {
    /// Bytes of every file the user keeps (linked to a chat or not) and
    /// of their chats' committed workspaces.
    pub used: i64,
    /// The user's `max_storage_bytes`: their override, else the default
    /// given.
    pub quota: i64,
}

impl Storage {
    /// Whether `size` more bytes fit under the quota (`used + size <=
    /// quota`).
    pub fn fits(&self, size: i64) -> bool {
        self.used.saturating_add(size) <= self.quota
    }
}

/// Takes the owner's storage lock for the rest of `conn`'s transaction
/// (waiting for the owner's other uploads to commit), then reads their
/// [`Storage`]: the sum of their files' sizes and their quota
/// (`users.max_storage_bytes`, else `default_quota`). `None` when the user
/// does not exist.
///
/// Two statements on purpose: in `READ COMMITTED` each statement reads a
/// snapshot taken when it starts, so the sum must be read by a statement
/// that starts after the lock is held, or it could miss an upload that
/// committed while this one waited, and two uploads could pass the quota
/// together.
pub async fn lock_storage(
    conn: &mut PgConnection,
    owner_id: Uuid,
    default_quota: i64,
) -> sqlx::Result<Option<Storage>> {
    // `$2::uuid::text`: the parameter is the uuid (as it was bound before
    // the statement was compile-checked), hashed as its text.
    sqlx::query!(
        "SELECT pg_advisory_xact_lock($1, hashtext($2::uuid::text))",
        STORAGE_LOCK_CLASS,
        owner_id,
    )
    .execute(&mut *conn)
    .await?;
    storage(&mut *conn, owner_id, default_quota).await
}

/// `owner_id`'s [`Storage`] (quota: `users.max_storage_bytes`, else
/// `default_quota`) without a lock, `None` when the user does not exist:
/// for the early check of an upload whose `Content-Length` already passes
/// the quota. An upload decides under [`lock_storage`].
pub async fn storage(
    conn: impl PgExecutor<'_>,
    owner_id: Uuid,
    default_quota: i64,
) -> sqlx::Result<Option<Storage>> {
    let row = sqlx::query!(
        r#"SELECT (coalesce((SELECT sum(size) FROM chat_files WHERE owner_id = $1), 0)
                   + coalesce((SELECT sum(workspace_bytes) FROM chats
                               WHERE owner_id = $1 AND workspace_bytes IS NOT NULL), 0))::bigint
                      AS "used!",
                  coalesce(u.max_storage_bytes, $2) AS "quota!"
           FROM users u WHERE u.id = $1"#,
        owner_id,
        default_quota,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Storage {
        used: r.used,
        quota: r.quota,
    }))
}

/// Bytes of every file `owner_id` keeps (linked or not), without a lock
/// (`storage_bytes` of the usage report).
#[cfg(test)] // the usage report sums storage in its own statement
pub async fn storage_used(conn: impl PgExecutor<'_>, owner_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT coalesce(sum(size), 0)::bigint AS "used!" FROM chat_files WHERE owner_id = $1"#,
        owner_id
    )
    .fetch_one(conn)
    .await
}

/// Inserts the row of a new file of `owner_id` whose size (`size` bytes,
/// the sum of the chunks that follow, [`insert_chunk`]) is already known,
/// and returns it. Call [`lock_storage`] first in the same transaction to
/// keep the quota.
pub async fn insert_sized(
    conn: impl PgExecutor<'_>,
    id: Uuid,
    owner_id: Uuid,
    name: &str,
    media_type: &str,
    size: i64,
) -> sqlx::Result<FileRow> {
    sqlx::query_as!(
        FileRow,
        "INSERT INTO chat_files (id, owner_id, name, media_type, size) VALUES ($1, $2, $3, $4, $5)
         RETURNING id, owner_id, chat_id, name, media_type, size, created_at",
        id,
        owner_id,
        name,
        media_type,
        size,
    )
    .fetch_one(conn)
    .await
}

/// Whether file `id` exists and belongs to `owner_id` (an `after_id` a
/// caller may page from).
pub async fn is_owned_by(
    conn: impl PgExecutor<'_>,
    id: Uuid,
    owner_id: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM chat_files WHERE id = $1 AND owner_id = $2) AS "exists!""#,
        id,
        owner_id,
    )
    .fetch_one(conn)
    .await
}

/// A page of `owner_id`'s files, newest first (`created_at`, then id,
/// descending): at most `limit`, those after file `after_id` (the last of
/// the previous page) when given. A missing `after_id` gives an empty page
/// (check it with [`is_owned_by`] first).
pub async fn list_owned(
    conn: impl PgExecutor<'_>,
    owner_id: Uuid,
    after_id: Option<Uuid>,
    limit: i64,
) -> sqlx::Result<Vec<FileRow>> {
    sqlx::query_as!(
        FileRow,
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files f
         WHERE owner_id = $1
           AND ($2::uuid IS NULL
                OR (created_at, id) < (SELECT created_at, id FROM chat_files WHERE id = $2))
         ORDER BY created_at DESC, id DESC
         LIMIT $3",
        owner_id,
        after_id,
        limit,
    )
    .fetch_all(conn)
    .await
}

/// What [`delete_unlinked`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The file and its chunks are gone.
    Deleted,
    /// No such file of this owner (unknown, or another user's).
    NotFound,
    /// The file is linked to a chat (it goes when the chat does).
    Linked,
}

/// Deletes file `id` of `owner_id` with its chunks, unless a chat links it.
///
/// The `DELETE` is conditional on `chat_id IS NULL` as the row stands once
/// it is locked: a concurrent `LinkFiles` ([`link`]) that locked the row
/// first makes it wait and then find the file linked ([`DeleteOutcome::Linked`]);
/// one that comes second finds the file gone (`ChatFileUnavailable`).
pub async fn delete_unlinked(
    pool: &sqlx::PgPool,
    id: Uuid,
    owner_id: Uuid,
) -> sqlx::Result<DeleteOutcome> {
    let deleted = sqlx::query!(
        "DELETE FROM chat_files WHERE id = $1 AND owner_id = $2 AND chat_id IS NULL",
        id,
        owner_id,
    )
    .execute(pool)
    .await?
    .rows_affected();
    if deleted > 0 {
        return Ok(DeleteOutcome::Deleted);
    }
    // Not deleted: gone, someone else's, or linked. A file is never
    // unlinked (it goes with its chat), so "linked" cannot turn back.
    Ok(match select(pool, id).await? {
        Some(row) if row.owner_id == owner_id && row.chat_id.is_some() => DeleteOutcome::Linked,
        _ => DeleteOutcome::NotFound,
    })
}

/// Deletes at most `batch` files linked to no chat and uploaded more than
/// `max_age` ago (oldest first), with their chunks, and returns how many it
/// deleted (API.md: "Files linked to no chat are deleted 24 h after
/// upload").
///
/// Safe with several replicas and with concurrent links: rows another
/// transaction holds (a `LinkFiles` in progress, another replica's sweep)
/// are skipped (`SKIP LOCKED`), and a row is deleted only if it is still
/// unlinked once locked; a `LinkFiles` that comes after finds the file gone
/// (`ChatFileUnavailable`) and links nothing.
pub async fn delete_expired_unlinked(
    conn: impl PgExecutor<'_>,
    max_age: std::time::Duration,
    batch: i64,
) -> sqlx::Result<u64> {
    let max_age_us = i64::try_from(max_age.as_micros()).unwrap_or(i64::MAX);
    // `$1::bigint::float8`: the parameter is the bigint (as it was bound
    // before the statement was compile-checked), divided as a float8.
    sqlx::query!(
        "DELETE FROM chat_files WHERE id IN (
             SELECT id FROM chat_files
             WHERE chat_id IS NULL AND created_at < now() - make_interval(secs => $1::bigint::float8 / 1e6)
             ORDER BY created_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED)
         AND chat_id IS NULL",
        max_age_us,
        batch,
    )
    .execute(conn)
    .await
    .map(|r| r.rows_affected())
}

/// The row of file `id`, `None` when there is none.
pub async fn select(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<FileRow>> {
    sqlx::query_as!(
        FileRow,
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files WHERE id = $1",
        id,
    )
    .fetch_optional(conn)
    .await
}

/// Chunk `seq` of file `file_id`, `None` past the last one.
pub async fn chunk(
    conn: impl PgExecutor<'_>,
    file_id: Uuid,
    seq: i32,
) -> sqlx::Result<Option<Vec<u8>>> {
    sqlx::query_scalar!(
        "SELECT data FROM chat_file_chunks WHERE file_id = $1 AND seq = $2",
        file_id,
        seq,
    )
    .fetch_optional(conn)
    .await
}

/// Bytes of the files linked to chat `source` that the active rows of
/// `source` up to message `through_id` name: what a fork copies.
pub async fn fork_bytes(
    conn: &mut PgConnection,
    source: Uuid,
    through_id: i64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COALESCE(sum(f.size), 0)::bigint AS "bytes!" FROM chat_files f
         WHERE f.chat_id = $1 AND f.id IN (
             SELECT (p->>'file_id')::uuid FROM chat_messages m,
                 jsonb_array_elements(CASE WHEN jsonb_typeof(m.content) = 'array' THEN m.content ELSE '[]'::jsonb END) p
             WHERE m.chat_id = $1 AND NOT m.deleted AND m.id <= $2 AND p->>'type' = 'file'
                 AND p->>'file_id' ~ '^[0-9a-fA-F-]{36}$')"#,
        source,
        through_id
    )
    .fetch_one(conn)
    .await
}

/// Copies the files [`fork_bytes`] counts (rows and chunks, new ids) into
/// chat `target`, linked to it; returns `{old id: new id}` as a JSON object
/// for [`crate::queries::messages::copy_branch`].
pub async fn copy_for_fork(
    conn: &mut PgConnection,
    source: Uuid,
    through_id: i64,
    target: Uuid,
) -> sqlx::Result<serde_json::Value> {
    let map = sqlx::query_scalar!(
        r#"WITH picked AS (
             SELECT f.id, gen_random_uuid() AS new_id FROM chat_files f
             WHERE f.chat_id = $1 AND f.id IN (
                 SELECT (p->>'file_id')::uuid FROM chat_messages m,
                     jsonb_array_elements(CASE WHEN jsonb_typeof(m.content) = 'array' THEN m.content ELSE '[]'::jsonb END) p
                 WHERE m.chat_id = $1 AND NOT m.deleted AND m.id <= $2 AND p->>'type' = 'file'
                     AND p->>'file_id' ~ '^[0-9a-fA-F-]{36}$')
         ), rows AS (
             INSERT INTO chat_files (id, owner_id, chat_id, name, media_type, size, created_at, linked_at)
             SELECT p.new_id, f.owner_id, $3, f.name, f.media_type, f.size, f.created_at, now()
             FROM picked p JOIN chat_files f ON f.id = p.id
         ), chunks AS (
             INSERT INTO chat_file_chunks (file_id, seq, data)
             SELECT p.new_id, c.seq, c.data FROM picked p JOIN chat_file_chunks c ON c.file_id = p.id
         )
         SELECT COALESCE(jsonb_object_agg(id::text, new_id::text), '{}'::jsonb) AS "map!" FROM picked"#,
        source,
        through_id,
        target
    )
    .fetch_one(conn)
    .await?;
    Ok(map)
}

/// Files linked to chat `chat_id`, by upload time.
#[cfg(test)] // the tests' view of a chat's links
pub async fn linked(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Vec<FileRow>> {
    sqlx::query_as!(
        FileRow,
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files
         WHERE chat_id = $1 ORDER BY created_at, id",
        chat_id,
    )
    .fetch_all(conn)
    .await
}

/// `LinkFiles(chat_id, file_ids, max_links)`: links the files of `file_ids`
/// (owned by `owner_id`) to chat `chat_id` and returns their rows in the
/// order given (repeats collapsed). A file already linked to this chat uses
/// no new slot. Call it in the transaction that holds the chat's row lock
/// (a transition bundle), so that concurrent links to one chat are
/// serialised and a failure rolls back the writes around it.
///
/// # Errors
/// `ChatFileUnavailable` naming the first file that does not exist, is
/// another user's, or is linked to another chat; `ChatFileCapExceeded` when
/// the chat would have more than `max_links` files. Nothing is linked then.
/// Database errors.
pub async fn link(
    conn: &mut PgConnection,
    chat_id: Uuid,
    owner_id: Uuid,
    file_ids: &[Uuid],
    max_links: usize,
) -> StoreResult<Vec<FileRow>> {
    let mut ids: Vec<Uuid> = Vec::with_capacity(file_ids.len());
    for id in file_ids {
        if !ids.contains(id) {
            ids.push(*id);
        }
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    // The file rows are locked: a concurrent link of the same file to
    // another chat waits here and then finds it taken.
    let rows: Vec<FileRow> = sqlx::query_as!(
        FileRow,
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files
         WHERE id = ANY($1) AND owner_id = $2 AND (chat_id IS NULL OR chat_id = $3)
         ORDER BY id FOR UPDATE",
        &ids,
        owner_id,
        chat_id,
    )
    .fetch_all(&mut *conn)
    .await?;
    if let Some(missing) = ids.iter().find(|id| !rows.iter().any(|r| r.id == **id)) {
        return Err(StateError::ChatFileUnavailable { file_id: *missing }.into());
    }
    let new: Vec<Uuid> = rows
        .iter()
        .filter(|r| r.chat_id.is_none())
        .map(|r| r.id)
        .collect();
    let existing: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM chat_files WHERE chat_id = $1"#,
        chat_id
    )
    .fetch_one(&mut *conn)
    .await?;
    if existing as usize + new.len() > max_links {
        return Err(StateError::ChatFileCapExceeded { max: max_links }.into());
    }
    if !new.is_empty() {
        sqlx::query!(
            "UPDATE chat_files SET chat_id = $1, linked_at = now() WHERE id = ANY($2)",
            chat_id,
            &new,
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(ids
        .iter()
        .filter_map(|id| rows.iter().find(|r| r.id == *id))
        .map(|r| FileRow {
            chat_id: Some(chat_id),
            ..r.clone()
        })
        .collect())
}

/// The files of `ids` linked to chat `chat_id`, each with its first
/// `prefix_bytes(media_type, size)` bytes (0 reads none), for a model call.
/// Files not linked to the chat (deleted meanwhile) are left out.
pub async fn linked_contents(
    conn: &mut PgConnection,
    chat_id: Uuid,
    ids: &[Uuid],
    prefix_bytes: impl Fn(&str, i64) -> usize,
) -> sqlx::Result<Vec<FileContent>> {
    let rows: Vec<FileRow> = sqlx::query_as!(
        FileRow,
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files
         WHERE id = ANY($1) AND chat_id = $2 ORDER BY id",
        ids,
        chat_id,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let want = prefix_bytes(&row.media_type, row.size).min(row.size.max(0) as usize);
        let mut data = Vec::with_capacity(want);
        let mut seq = 0;
        while data.len() < want {
            let Some(part) = chunk(&mut *conn, row.id, seq).await? else {
                break;
            };
            data.extend_from_slice(&part);
            seq += 1;
        }
        data.truncate(want);
        out.push(FileContent {
            id: row.id,
            name: row.name,
            media_type: row.media_type,
            size: row.size,
            data,
        });
    }
    Ok(out)
}

/// The file ids of `parts`' file parts, in order (repeats kept).
pub fn file_ids(parts: &[chatd_core::MessagePart]) -> Vec<Uuid> {
    parts
        .iter()
        .filter_map(|p| match p {
            chatd_core::MessagePart::File { file_id, .. } => Some(*file_id),
            _ => None,
        })
        .collect()
}

/// Fills in the media type and name of every file part of `parts` from
/// `rows` (what [`link`] returned), so that a stored part says what it is.
pub fn describe(parts: &mut [chatd_core::MessagePart], rows: &[FileRow]) {
    for part in parts {
        if let chatd_core::MessagePart::File {
            file_id,
            media_type,
            name,
        } = part
            && let Some(row) = rows.iter().find(|r| r.id == *file_id)
        {
            *media_type = row.media_type.clone();
            *name = Some(row.name.clone());
        }
    }
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn inserts_the_row_of_a_new_file_of_owner_id_size_0_in_the_upload_s() -> anyhow::Result<()>
    {
        use crate::queries::files;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let id = uuid::Uuid::new_v4();
        let mut tx = pool.begin().await?;
        files::insert(&mut *tx, id, owner, "notes.txt", "text/plain").await?;
        files::insert_chunk(&mut *tx, id, 0, b"hello ").await?;
        files::insert_chunk(&mut *tx, id, 1, b"world").await?;
        let row = files::finish_upload(&mut *tx, id).await?;
        tx.commit().await?;
        assert_eq!((row.size, row.chat_id), (11, None));
        assert_eq!(
            files::chunk(pool, id, 1).await?.as_deref(),
            Some(&b"world"[..])
        );
        assert_eq!(files::chunk(pool, id, 2).await?, None);
        Ok(())
    }

    #[test]
    fn fits_whether_size_more_bytes_fit_under_the_quota_used_size_quota() {
        use crate::queries::files::Storage;
        let s = Storage {
            used: 90,
            quota: 100,
        };
        assert!(s.fits(10));
        assert!(!s.fits(11));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lock_storage_takes_the_owner_s_storage_lock_for_the_rest_of_conn_s()
    -> anyhow::Result<()> {
        use crate::queries::files;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let mut tx = pool.begin().await?;
        let storage = files::lock_storage(&mut tx, owner, 100).await?.unwrap();
        assert_eq!(
            storage,
            files::Storage {
                used: 0,
                quota: 100
            }
        );
        assert!(storage.fits(100));
        let row = files::insert_sized(
            &mut *tx,
            uuid::Uuid::new_v4(),
            owner,
            "a.txt",
            "text/plain",
            60,
        )
        .await?;
        tx.commit().await?;
        assert_eq!(row.size, 60);
        let mut tx = pool.begin().await?;
        assert_eq!(
            files::lock_storage(&mut tx, owner, 100)
                .await?
                .unwrap()
                .used,
            60
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn storage_owner_id_s_storage_quota() -> anyhow::Result<()> {
        use crate::queries::files;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        files::insert_sized(pool, uuid::Uuid::new_v4(), owner, "a", "text/plain", 7).await?;
        files::insert_sized(pool, uuid::Uuid::new_v4(), owner, "b", "text/plain", 5).await?;
        sqlx::query("UPDATE users SET max_storage_bytes = 20")
            .execute(pool)
            .await?;
        let storage = files::storage(pool, owner, 1 << 30).await?.unwrap();
        assert_eq!(
            storage,
            files::Storage {
                used: 12,
                quota: 20
            }
        );
        assert_eq!(files::storage_used(pool, owner).await?, 12);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn list_owned_a_page_of_owner_id_s_files_newest_first_created_at_then_id()
    -> anyhow::Result<()> {
        use crate::queries::files;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let mut ids = Vec::new();
        for name in ["a", "b", "c"] {
            let id = uuid::Uuid::new_v4();
            files::insert_sized(pool, id, owner, name, "text/plain", 1).await?;
            ids.push(id);
        }
        let first = files::list_owned(pool, owner, None, 2).await?;
        assert_eq!(
            first.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["c", "b"]
        );
        assert!(files::is_owned_by(pool, first[1].id, owner).await?);
        let next = files::list_owned(pool, owner, Some(first[1].id), 2).await?;
        assert_eq!(next.iter().map(|f| f.id).collect::<Vec<_>>(), [ids[0]]);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn delete_unlinked_deletes_file_id_of_owner_id_with_its_chunks_unless_a()
    -> anyhow::Result<()> {
        use crate::queries::files::{self, DeleteOutcome};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let chat = fx.create_chat("hi").await?.chat;
        let (loose, linked) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        files::insert_sized(pool, loose, owner, "a", "text/plain", 1).await?;
        files::insert_sized(pool, linked, owner, "b", "text/plain", 1).await?;
        let mut tx = pool.begin().await?;
        files::link(&mut tx, chat.id, owner, &[linked], 20).await?;
        tx.commit().await?;
        assert_eq!(
            files::delete_unlinked(pool, linked, owner).await?,
            DeleteOutcome::Linked
        );
        assert_eq!(
            files::delete_unlinked(pool, loose, uuid::Uuid::new_v4()).await?,
            DeleteOutcome::NotFound
        );
        assert_eq!(
            files::delete_unlinked(pool, loose, owner).await?,
            DeleteOutcome::Deleted
        );
        assert_eq!(
            files::delete_unlinked(pool, loose, owner).await?,
            DeleteOutcome::NotFound
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn delete_expired_unlinked_deletes_at_most_batch_files_linked_to_no_chat()
    -> anyhow::Result<()> {
        use crate::queries::files;
        use std::time::Duration;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let id = uuid::Uuid::new_v4();
        files::insert_sized(pool, id, owner, "a", "text/plain", 1).await?;
        assert_eq!(
            files::delete_expired_unlinked(pool, Duration::from_secs(3600), 100).await?,
            0
        );
        sqlx::query("UPDATE chat_files SET created_at = now() - interval '2 hours'")
            .execute(pool)
            .await?;
        assert_eq!(
            files::delete_expired_unlinked(pool, Duration::from_secs(3600), 100).await?,
            1
        );
        assert_eq!(files::select(pool, id).await?, None);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn linkfiles_chat_id_file_ids_max_links() -> anyhow::Result<()> {
        use crate::queries::files;
        use chatd_core::StateError;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let chat = fx.create_chat("hi").await?.chat;
        let id = uuid::Uuid::new_v4();
        files::insert(pool, id, owner, "a.txt", "text/plain").await?;
        let mut tx = pool.begin().await?;
        let rows = files::link(&mut tx, chat.id, owner, &[id, id], 1).await?;
        assert_eq!(rows.len(), 1);
        // Linking it again uses no new slot; an unknown file links nothing.
        files::link(&mut tx, chat.id, owner, &[id], 1).await?;
        let unknown = uuid::Uuid::new_v4();
        let err = files::link(&mut tx, chat.id, owner, &[unknown], 1)
            .await
            .unwrap_err();
        assert_eq!(
            err.state(),
            Some(&StateError::ChatFileUnavailable { file_id: unknown })
        );
        tx.commit().await?;
        assert_eq!(files::linked(pool, chat.id).await?.len(), 1);
        assert_eq!(
            files::select(pool, id).await?.unwrap().chat_id,
            Some(chat.id)
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn linked_contents_the_files_of_ids_linked_to_chat_chat_id_each_with_its()
    -> anyhow::Result<()> {
        use crate::queries::files;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let chat = fx.create_chat("hi").await?.chat;
        let id = uuid::Uuid::new_v4();
        let mut tx = pool.begin().await?;
        files::insert(&mut *tx, id, owner, "a.txt", "text/plain").await?;
        files::insert_chunk(&mut *tx, id, 0, b"abc").await?;
        files::insert_chunk(&mut *tx, id, 1, b"def").await?;
        files::finish_upload(&mut *tx, id).await?;
        files::link(&mut tx, chat.id, owner, &[id], 20).await?;
        tx.commit().await?;
        let mut conn = pool.acquire().await?;
        let got = files::linked_contents(&mut conn, chat.id, &[id], |_, _| 4).await?;
        assert_eq!((got[0].data.as_slice(), got[0].size), (&b"abcd"[..], 6));
        Ok(())
    }

    #[test]
    fn describe_fills_in_the_media_type_and_name_of_every_file_part_of_parts() {
        use crate::queries::files::{self, FileRow};
        use chatd_core::MessagePart;
        let id = uuid::Uuid::new_v4();
        let mut parts = vec![MessagePart::File {
            file_id: id,
            media_type: String::new(),
            name: None,
        }];
        assert_eq!(files::file_ids(&parts), [id]);
        let row = FileRow {
            id,
            owner_id: id,
            chat_id: None,
            name: "cat.png".into(),
            media_type: "image/png".into(),
            size: 3,
            created_at: chrono::Utc::now(),
        };
        files::describe(&mut parts, &[row]);
        assert!(
            matches!(&parts[0], MessagePart::File { media_type, name: Some(n), .. } if media_type == "image/png" && n == "cat.png")
        );
    }
}
