//! SQL of the `chat_files` and `chat_file_chunks` tables (API.md "Files";
//! `spec/chatstate-package.md` `LinkFiles`).
//!
//! An upload writes the file row and its chunks ([`CHUNK_BYTES`] each, the
//! last one shorter) in one transaction ([`insert`], [`insert_chunk`],
//! [`finish_upload`]); a download reads them back one chunk at a time
//! ([`chunk`]). [`link`] is `LinkFiles`: it links files to a chat under the
//! chat's row lock, so the cap holds however many sends race. Deleting a
//! chat deletes its files (foreign key `ON DELETE CASCADE`).

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
///
/// # Example
///
/// ```
/// use chatd_store::queries::files;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, owner) = (fx.pool(), fx.owner);
/// let id = uuid::Uuid::new_v4();
/// let mut tx = pool.begin().await?;
/// files::insert(&mut *tx, id, owner, "notes.txt", "text/plain").await?;
/// files::insert_chunk(&mut *tx, id, 0, b"hello ").await?;
/// files::insert_chunk(&mut *tx, id, 1, b"world").await?;
/// let row = files::finish_upload(&mut *tx, id).await?;
/// tx.commit().await?;
/// assert_eq!((row.size, row.chat_id), (11, None));
/// assert_eq!(files::chunk(pool, id, 1).await?.as_deref(), Some(&b"world"[..]));
/// assert_eq!(files::chunk(pool, id, 2).await?, None);
/// # Ok(()) }
/// ```
pub async fn insert(
    conn: impl PgExecutor<'_>,
    id: Uuid,
    owner_id: Uuid,
    name: &str,
    media_type: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO chat_files (id, owner_id, name, media_type, size) VALUES ($1, $2, $3, $4, 0)",
    )
    .bind(id)
    .bind(owner_id)
    .bind(name)
    .bind(media_type)
    .execute(conn)
    .await
    .map(|_| ())
}

/// Stores chunk `seq` (0-based) of file `file_id`.
///
/// Example: [`insert`].
pub async fn insert_chunk(
    conn: impl PgExecutor<'_>,
    file_id: Uuid,
    seq: i32,
    data: &[u8],
) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO chat_file_chunks (file_id, seq, data) VALUES ($1, $2, $3)")
        .bind(file_id)
        .bind(seq)
        .bind(data)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Sets the size of file `id` to the sum of its chunks and returns its row.
///
/// Example: [`insert`].
pub async fn finish_upload(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<FileRow> {
    sqlx::query_as(
        "UPDATE chat_files SET size = coalesce(
             (SELECT sum(octet_length(data)) FROM chat_file_chunks WHERE file_id = $1), 0)
         WHERE id = $1
         RETURNING id, owner_id, chat_id, name, media_type, size, created_at",
    )
    .bind(id)
    .fetch_one(conn)
    .await
}

/// The row of file `id`, `None` when there is none.
///
/// Example: [`link`].
pub async fn select(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<FileRow>> {
    sqlx::query_as(
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Chunk `seq` of file `file_id`, `None` past the last one.
///
/// Example: [`insert`].
pub async fn chunk(
    conn: impl PgExecutor<'_>,
    file_id: Uuid,
    seq: i32,
) -> sqlx::Result<Option<Vec<u8>>> {
    sqlx::query_scalar("SELECT data FROM chat_file_chunks WHERE file_id = $1 AND seq = $2")
        .bind(file_id)
        .bind(seq)
        .fetch_optional(conn)
        .await
}

/// Files linked to chat `chat_id`, by upload time.
///
/// Example: [`link`].
pub async fn linked(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Vec<FileRow>> {
    sqlx::query_as(
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files
         WHERE chat_id = $1 ORDER BY created_at, id",
    )
    .bind(chat_id)
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
///
/// # Example
///
/// ```
/// use chatd_core::StateError;
/// use chatd_store::queries::files;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, owner) = (fx.pool(), fx.owner);
/// # let chat = fx.create_chat("hi").await?.chat;
/// let id = uuid::Uuid::new_v4();
/// files::insert(pool, id, owner, "a.txt", "text/plain").await?;
/// let mut tx = pool.begin().await?;
/// let rows = files::link(&mut tx, chat.id, owner, &[id, id], 1).await?;
/// assert_eq!(rows.len(), 1);
/// // Linking it again uses no new slot; an unknown file links nothing.
/// files::link(&mut tx, chat.id, owner, &[id], 1).await?;
/// let unknown = uuid::Uuid::new_v4();
/// let err = files::link(&mut tx, chat.id, owner, &[unknown], 1).await.unwrap_err();
/// assert_eq!(err.state(), Some(&StateError::ChatFileUnavailable { file_id: unknown }));
/// tx.commit().await?;
/// assert_eq!(files::linked(pool, chat.id).await?.len(), 1);
/// assert_eq!(files::select(pool, id).await?.unwrap().chat_id, Some(chat.id));
/// # Ok(()) }
/// ```
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
    let rows: Vec<FileRow> = sqlx::query_as(
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files
         WHERE id = ANY($1) AND owner_id = $2 AND (chat_id IS NULL OR chat_id = $3)
         ORDER BY id FOR UPDATE",
    )
    .bind(&ids)
    .bind(owner_id)
    .bind(chat_id)
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
    let existing: i64 = sqlx::query_scalar("SELECT count(*) FROM chat_files WHERE chat_id = $1")
        .bind(chat_id)
        .fetch_one(&mut *conn)
        .await?;
    if existing as usize + new.len() > max_links {
        return Err(StateError::ChatFileCapExceeded { max: max_links }.into());
    }
    if !new.is_empty() {
        sqlx::query("UPDATE chat_files SET chat_id = $1, linked_at = now() WHERE id = ANY($2)")
            .bind(chat_id)
            .bind(&new)
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
///
/// # Example
///
/// ```
/// use chatd_store::queries::files;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, owner) = (fx.pool(), fx.owner);
/// # let chat = fx.create_chat("hi").await?.chat;
/// let id = uuid::Uuid::new_v4();
/// let mut tx = pool.begin().await?;
/// files::insert(&mut *tx, id, owner, "a.txt", "text/plain").await?;
/// files::insert_chunk(&mut *tx, id, 0, b"abc").await?;
/// files::insert_chunk(&mut *tx, id, 1, b"def").await?;
/// files::finish_upload(&mut *tx, id).await?;
/// files::link(&mut tx, chat.id, owner, &[id], 20).await?;
/// tx.commit().await?;
/// let mut conn = pool.acquire().await?;
/// let got = files::linked_contents(&mut conn, chat.id, &[id], |_, _| 4).await?;
/// assert_eq!((got[0].data.as_slice(), got[0].size), (&b"abcd"[..], 6));
/// # Ok(()) }
/// ```
pub async fn linked_contents(
    conn: &mut PgConnection,
    chat_id: Uuid,
    ids: &[Uuid],
    prefix_bytes: impl Fn(&str, i64) -> usize,
) -> sqlx::Result<Vec<FileContent>> {
    let rows: Vec<FileRow> = sqlx::query_as(
        "SELECT id, owner_id, chat_id, name, media_type, size, created_at FROM chat_files
         WHERE id = ANY($1) AND chat_id = $2 ORDER BY id",
    )
    .bind(ids)
    .bind(chat_id)
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
///
/// Example: [`describe`].
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
///
/// # Example
///
/// ```
/// use chatd_core::MessagePart;
/// use chatd_store::queries::files::{self, FileRow};
/// let id = uuid::Uuid::new_v4();
/// let mut parts = vec![MessagePart::File { file_id: id, media_type: String::new(), name: None }];
/// assert_eq!(files::file_ids(&parts), [id]);
/// let row = FileRow {
///     id, owner_id: id, chat_id: None, name: "cat.png".into(), media_type: "image/png".into(),
///     size: 3, created_at: chrono::Utc::now(),
/// };
/// files::describe(&mut parts, &[row]);
/// assert!(matches!(&parts[0], MessagePart::File { media_type, name: Some(n), .. } if media_type == "image/png" && n == "cat.png"));
/// ```
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
