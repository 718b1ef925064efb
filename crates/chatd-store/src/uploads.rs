//! Storing an upload (API.md "Files"): the owner's storage lock, the quota
//! check, the file row and its chunks, in one short transaction, so the
//! `POST /api/v2/files` handler makes one call and never composes queries.

use futures::{Stream, StreamExt as _};
use sqlx::PgPool;
use uuid::Uuid;

use crate::queries::files::{FileRow, Storage};
use crate::queries::{self, files};

/// What [`store_upload`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadOutcome {
    /// The file and its chunks are committed.
    Stored(FileRow),
    /// The upload would take its owner over their quota; nothing is stored.
    /// The owner's storage as read under the lock.
    OverQuota(Storage),
    /// The owner does not exist (deleted meanwhile); nothing is stored.
    NoOwner,
}

/// Why [`store_upload`] failed; nothing is stored in either case.
#[derive(Debug, thiserror::Error)]
pub enum UploadError<E> {
    /// A database error.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// `chunks` yielded an error (reading the spooled upload).
    #[error("reading the upload failed")]
    Source(#[source] E),
}

/// Stores file `id` of `owner_id` (`name`, `media_type`, `size` bytes, the
/// sum of the chunks) in one transaction: takes the owner's storage lock
/// (`files::lock_storage`: concurrent uploads of one owner go one at a time,
/// so two cannot pass the quota together), checks the quota
/// (`users.max_storage_bytes`, else `default_quota` bytes), inserts the row,
/// then each chunk of `chunks`, numbered from 0, until it ends. Every chunk is at most [`files::CHUNK_BYTES`]. Call it only once
/// the whole body is spooled: the lock and the connection are held for the
/// writes alone.
///
/// # Errors
/// [`UploadError::Database`], or [`UploadError::Source`] when `chunks`
/// yields an error; the transaction rolls back in both.
pub async fn store_upload<E>(
    pool: &PgPool,
    id: Uuid,
    owner_id: Uuid,
    name: &str,
    media_type: &str,
    size: i64,
    default_quota: i64,
    chunks: impl Stream<Item = Result<Vec<u8>, E>>,
) -> Result<UploadOutcome, UploadError<E>> {
    let mut tx = queries::begin(pool).await?;
    let Some(storage) = files::lock_storage(&mut tx, owner_id, default_quota).await? else {
        return Ok(UploadOutcome::NoOwner);
    };
    if !storage.fits(size) {
        // Dropping `tx` rolls back and releases the lock.
        return Ok(UploadOutcome::OverQuota(storage));
    }
    let row = files::insert_sized(&mut *tx, id, owner_id, name, media_type, size).await?;
    let mut chunks = std::pin::pin!(chunks);
    let mut seq = 0i32;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(UploadError::Source)?;
        files::insert_chunk(&mut *tx, id, seq, &chunk).await?;
        seq += 1;
    }
    tx.commit().await?;
    Ok(UploadOutcome::Stored(row))
}
