//! File routes (API.md "Files" and "Limits, budgets and the token
//! lifecycle"): `POST /api/v2/files` uploads a file, `GET /api/v2/files`
//! lists the caller's files, `GET /api/v2/files/{id}` downloads one and
//! `DELETE /api/v2/files/{id}` deletes one. Files are stored in PostgreSQL
//! ([`chatd_store::files`]) and linked to a chat by the message
//! that mentions them (`LinkFiles`, [`chatd_store::ChatTx::link_files`]).
//!
//! An upload reads the whole body before it touches the database: no pool
//! connection or transaction is held while a client sends (a slow client
//! could otherwise hold one per upload and starve every other request;
//! issue 31). The body goes to a [`Spool`]: its first chunk
//! ([`CHUNK_BYTES`]) in memory, the rest in an unnamed temporary file, so an
//! upload never holds more than two chunks in memory however large or slow
//! it is. It fails with `413` as soon as it passes the limit
//! ([`crate::ApiOptions::max_file_bytes`]; at once when `Content-Length`
//! already says so). Then one short transaction takes the owner's storage
//! lock, checks the storage quota (`413` naming it; decided by the database,
//! so concurrent uploads cannot pass it together), and writes the row and
//! its chunks; nothing is stored unless the whole upload is. A download
//! sends the stored chunks one query at a time.
//!
//! Bad input, each changing nothing: a declared `image/*` type whose bytes
//! are not that image (checked against the bytes' signature) → `415`; a
//! malformed `Content-Type` → `415`; an empty body, a name over 255
//! characters → `400`.

use std::io::{Read as _, Seek as _, Write as _};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::header::{
    CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chatd_store::files::{self, CHUNK_BYTES, DeleteOutcome, FileRow, Storage};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use http_body::Body as _;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, E400, E401, E404, E409, E415};
use crate::extract::{PathParams, QueryParams};

/// Longest file name, in characters.
pub const MAX_FILE_NAME_CHARS: usize = 255;
/// Name of a file uploaded without `?name=`.
pub const DEFAULT_FILE_NAME: &str = "file";
/// Media type of an upload without `Content-Type`.
pub const DEFAULT_MEDIA_TYPE: &str = "application/octet-stream";

/// `File`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct File {
    /// File id.
    pub id: Uuid,
    /// File name (the `name` query parameter, without directories).
    pub name: String,
    /// Media type essence, lower case.
    pub media_type: String,
    /// Size in bytes.
    pub size: i64,
    /// Upload time.
    pub created_at: DateTime<Utc>,
}

impl From<&FileRow> for File {
    fn from(row: &FileRow) -> Self {
        Self {
            id: row.id,
            name: row.name.clone(),
            media_type: row.media_type.clone(),
            size: row.size,
            created_at: row.created_at,
        }
    }
}

/// `POST /api/v2/files?name=`: stores the raw body as a file of the caller,
/// its media type the `Content-Type` (default
/// `application/octet-stream`), at most 10 MiB, within the caller's storage
/// quota (`max_storage_bytes`).
///
/// The body is read whole first ([`Spool`]), then written in one short
/// transaction (see the module doc).
///
/// # Errors
/// `413` over the size limit (as soon as it is passed) or over the storage
/// quota (`detail` names `max_storage_bytes`, the quota and the bytes
/// used); `415` for a malformed `Content-Type` or an image whose bytes are
/// not that image; `400` for an empty body, a name over 255 characters or a
/// body that cannot be read.
#[utoipa::path(
    post,
    path = "/api/v2/files",
    tag = "files",
    params(("name" = Option<String>, Query, description = "File name (at most 255 characters; directories are dropped); default \"file\"")),
    request_body(content = Vec<u8>, description = "The file's bytes; `Content-Type` is its media type", content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "Stored", body = File),
        E400, E401,
        (status = 413, description = "Over 10 MiB, or over the caller's storage quota (`detail` names `max_storage_bytes`)", body = crate::error::ErrorBody),
        E415,
    )
)]
pub async fn upload_file(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<File>)> {
    let query = QueryParams::parse(query.as_deref())?;
    let name = file_name(query.get("name"))?;
    let media_type = media_type(&headers)?;
    let limit = state.options().max_file_bytes;
    let default_quota = state.options().limits.max_storage_bytes;
    let declared = body.size_hint().lower();
    if declared > limit as u64 {
        return Err(ApiError::too_large(limit));
    }
    if declared > 0 {
        // Refused before the body is read when its declared length already
        // passes the quota (a short query; no connection is held while the
        // body arrives). The transaction below decides for good.
        if let Some(storage) =
            files::storage(state.store().pool(), caller.id(), default_quota).await?
            && !storage.fits(declared as i64)
        {
            return Err(over_quota(storage, declared as i64));
        }
    }

    let spool = Spool::read(body, limit).await?;
    let size = spool.len();
    if size == 0 {
        return Err(ApiError::invalid("body", "must not be empty"));
    }
    check_signature(&media_type, spool.head())?;

    // Only now a connection, for one short transaction.
    let id = Uuid::new_v4();
    let chunks = spool.into_chunks().await.map_err(spool_failed)?;
    let chunks = futures::stream::try_unfold(chunks, |mut chunks| async move {
        Ok(chunks.next().await?.map(|chunk| (chunk, chunks)))
    });
    let outcome = files::store_upload(
        state.store().pool(),
        id,
        caller.id(),
        &name,
        &media_type,
        size as i64,
        default_quota,
        chunks,
    )
    .await
    .map_err(|err| match err {
        files::UploadError::Database(err) => ApiError::from(err),
        files::UploadError::Source(err) => spool_failed(err),
    })?;
    let row = match outcome {
        files::UploadOutcome::Stored(row) => row,
        files::UploadOutcome::OverQuota(storage) => return Err(over_quota(storage, size as i64)),
        files::UploadOutcome::NoOwner => return Err(ApiError::unauthorized()),
    };
    metrics::counter!("chatd_file_upload_bytes_total").increment(size as u64);
    Ok((StatusCode::CREATED, Json(File::from(&row))))
}

/// `413` for an upload of `size` bytes that would take its owner over
/// their storage quota.
fn over_quota(storage: Storage, size: i64) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "Storage quota exceeded.").with_detail(format!(
        "This upload of {size} bytes would take your files to {} bytes, over your storage quota \
         (max_storage_bytes) of {} bytes; your files use {} bytes now. Delete files you no \
         longer need (DELETE /api/v2/files/{{id}}) or ask an admin for a larger quota.",
        storage.used.saturating_add(size),
        storage.quota,
        storage.used
    ))
}

/// `500` for a temporary-file failure while spooling an upload.
fn spool_failed(err: std::io::Error) -> ApiError {
    ApiError::internal(err)
}

/// An upload's bytes, read whole before any database work: the first
/// [`CHUNK_BYTES`] in memory (`head`, the stored chunk 0), the rest in an
/// unnamed temporary file (created on the first byte past the head, removed
/// by the system when dropped, even after a crash). Writes to the file go
/// through the blocking pool a chunk at a time, so memory stays at most two
/// chunks per upload.
struct Spool {
    head: Vec<u8>,
    pending: Vec<u8>,
    file: Option<std::fs::File>,
    len: usize,
}

impl Spool {
    /// Reads `body` whole.
    ///
    /// # Errors
    /// `413` as soon as more than `limit` bytes arrived; `400` when the
    /// body cannot be read (the client went away, the body deadline
    /// passed); `500` when the temporary file cannot be written.
    async fn read(body: Body, limit: usize) -> ApiResult<Self> {
        let mut spool = Spool {
            head: Vec::new(),
            pending: Vec::new(),
            file: None,
            len: 0,
        };
        let mut stream = body.into_data_stream();
        while let Some(next) = stream.next().await {
            let data = next.map_err(|e| {
                ApiError::new(StatusCode::BAD_REQUEST, "Could not read the request body.")
                    .with_detail(e.to_string())
            })?;
            if spool.len + data.len() > limit {
                return Err(ApiError::too_large(limit));
            }
            spool.push(data).await.map_err(spool_failed)?;
        }
        spool.flush().await.map_err(spool_failed)?;
        Ok(spool)
    }

    /// Bytes read.
    fn len(&self) -> usize {
        self.len
    }

    /// The first bytes (at most [`CHUNK_BYTES`]).
    fn head(&self) -> &[u8] {
        &self.head
    }

    async fn push(&mut self, mut data: Bytes) -> std::io::Result<()> {
        self.len += data.len();
        if self.head.len() < CHUNK_BYTES {
            let take = (CHUNK_BYTES - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data.split_to(take));
        }
        if !data.is_empty() {
            self.pending.extend_from_slice(&data);
            if self.pending.len() >= CHUNK_BYTES {
                self.flush().await?;
            }
        }
        Ok(())
    }

    /// Writes the pending bytes to the temporary file (created now if
    /// needed).
    async fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let file = self.file.take();
        let pending = std::mem::take(&mut self.pending);
        let (file, mut pending) = blocking(move || {
            let mut file = match file {
                Some(file) => file,
                None => tempfile::tempfile()?,
            };
            file.write_all(&pending)?;
            Ok((file, pending))
        })
        .await?;
        pending.clear();
        self.file = Some(file);
        self.pending = pending;
        Ok(())
    }

    /// The bytes again, as the stored chunks: the head, then the file's
    /// bytes [`CHUNK_BYTES`] at a time.
    async fn into_chunks(self) -> std::io::Result<SpoolChunks> {
        let file = match self.file {
            Some(mut file) => Some(
                blocking(move || {
                    file.rewind()?;
                    Ok(file)
                })
                .await?,
            ),
            None => None,
        };
        Ok(SpoolChunks {
            head: Some(self.head).filter(|h| !h.is_empty()),
            file,
        })
    }
}

/// The chunks of a read [`Spool`], in order.
struct SpoolChunks {
    head: Option<Vec<u8>>,
    file: Option<std::fs::File>,
}

impl SpoolChunks {
    /// The next chunk, `None` after the last.
    async fn next(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if let Some(head) = self.head.take() {
            return Ok(Some(head));
        }
        let Some(file) = self.file.take() else {
            return Ok(None);
        };
        let (file, chunk) = blocking(move || {
            let mut chunk = Vec::with_capacity(CHUNK_BYTES);
            (&file).take(CHUNK_BYTES as u64).read_to_end(&mut chunk)?;
            Ok((file, chunk))
        })
        .await?;
        if chunk.is_empty() {
            return Ok(None);
        }
        self.file = Some(file);
        Ok(Some(chunk))
    }
}

/// Runs file I/O `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// `GET /api/v2/files?limit=&after_id=`: the caller's files, newest first
/// (upload time, then id, descending), `limit` per page (1..=100, default
/// 50), after file `after_id` (the last id of the previous page).
///
/// # Errors
/// `400` naming `limit` (not an integer in 1..=100) or `after_id` (not a
/// UUID, or not one of the caller's files).
#[utoipa::path(
    get,
    path = "/api/v2/files",
    tag = "files",
    params(
        ("limit" = Option<i64>, Query, description = "Page size, 1..=100 (default 50)", minimum = 1, maximum = 100),
        ("after_id" = Option<Uuid>, Query, description = "Id of the last file of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of the caller's files, newest first", body = Vec<File>),
        E400, E401,
    )
)]
pub async fn list_files(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Vec<File>>> {
    let query = QueryParams::parse(query.as_deref())?;
    let limit = query.int_in("limit", 1, 100, 50)?;
    let after_id = query.uuid("after_id")?;
    let pool = state.store().pool();
    if let Some(after) = after_id
        && !files::is_owned_by(pool, after, caller.id()).await?
    {
        return Err(ApiError::invalid_query("after_id", "unknown file"));
    }
    let rows = files::list_owned(pool, caller.id(), after_id, limit).await?;
    Ok(Json(rows.iter().map(File::from).collect()))
}

/// `DELETE /api/v2/files/{id}`: deletes one of the caller's files and its
/// bytes. A file linked to a chat stays (it goes with its chat).
///
/// # Errors
/// `400` naming `id` when it is not a UUID; `404` for an unknown file or
/// another user's; `409` for a file linked to a chat.
#[utoipa::path(
    delete,
    path = "/api/v2/files/{id}",
    tag = "files",
    params(("id" = Uuid, Path, description = "File id")),
    responses(
        (status = 204, description = "Deleted"),
        E400, E401, E404, E409,
    )
)]
pub async fn delete_file(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<StatusCode> {
    let id = params.uuid("id")?;
    match files::delete_unlinked(state.store().pool(), id, caller.id()).await? {
        DeleteOutcome::Deleted => Ok(StatusCode::NO_CONTENT),
        DeleteOutcome::NotFound => Err(ApiError::not_found("File not found.")),
        DeleteOutcome::Linked => Err(ApiError::conflict("File is linked to a chat.")
            .with_detail("A file a message links goes when its chat is deleted.")),
    }
}

/// `GET /api/v2/files/{id}`: the file's bytes, with its media type as
/// `Content-Type`, its size as `Content-Length` and its name in
/// `Content-Disposition`. Only the owner sees a file, and the users its
/// chat is shared with (API.md "Sign-in, search, sharing and export");
/// anyone else gets `404`, as for a file that does not exist. The body is sandboxed
/// (`Content-Security-Policy: sandbox`, `nosniff`): a stored HTML file never
/// runs as this origin's page.
#[utoipa::path(
    get,
    path = "/api/v2/files/{id}",
    tag = "files",
    params(("id" = Uuid, Path, description = "File id")),
    responses(
        (status = 200, description = "The bytes, with the media type the file was uploaded with as `Content-Type`", content_type = "*/*", body = Vec<u8>),
        E400, E401, E404,
    )
)]
pub async fn download_file(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Response> {
    let id = params.uuid("id")?;
    let not_found = || ApiError::not_found("File not found.");
    let row = files::select(state.store().pool(), id)
        .await?
        .ok_or_else(not_found)?;
    // The owner, or a reader of the chat it is linked to through a share
    // (the images of a shared chat show).
    let shared = match row.chat_id {
        Some(chat) if row.owner_id != caller.id() => {
            chatd_store::shares::can_read(state.store().pool(), chat, caller.id()).await?
        }
        _ => false,
    };
    if row.owner_id != caller.id() && !shared {
        return Err(not_found());
    }
    let pool = state.store().pool().clone();
    // One chunk per query, in order; a file deleted meanwhile (its chat was
    // deleted) ends the body early, which the client sees as a short read.
    let chunks = futures::stream::unfold(Some(0i32), move |seq| {
        let pool = pool.clone();
        async move {
            let seq = seq?;
            match files::chunk(&pool, id, seq).await {
                Ok(Some(data)) => Some((Ok(axum::body::Bytes::from(data)), Some(seq + 1))),
                Ok(None) => None,
                Err(err) => Some((Err(err), None)),
            }
        }
    });
    let mut response = Body::from_stream(chunks).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_str(&row.media_type)
            .unwrap_or_else(|_| HeaderValue::from_static(DEFAULT_MEDIA_TYPE)),
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(row.size));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    if let Ok(value) = HeaderValue::from_str(&content_disposition(&row.name)) {
        headers.insert(CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// The stored name of an upload named `raw`: its last path component
/// (after `/` or `\`), without control characters, trimmed; default
/// [`DEFAULT_FILE_NAME`].
///
/// # Errors
/// `400` naming `name` when longer than [`MAX_FILE_NAME_CHARS`].
fn file_name(raw: Option<&str>) -> ApiResult<String> {
    let raw = raw.unwrap_or_default();
    let base = raw.rsplit(['/', '\\']).next().unwrap_or_default();
    let clean: String = base.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    if clean.chars().count() > MAX_FILE_NAME_CHARS {
        return Err(ApiError::invalid_query(
            "name",
            format!("must be at most {MAX_FILE_NAME_CHARS} characters"),
        ));
    }
    if clean.is_empty() || clean == "." || clean == ".." {
        return Ok(DEFAULT_FILE_NAME.to_owned());
    }
    Ok(clean.to_owned())
}

/// The media type essence of `Content-Type` (parameters dropped, lower
/// case; `image/jpg` read as `image/jpeg`), [`DEFAULT_MEDIA_TYPE`] when
/// absent.
///
/// # Errors
/// `415` when it is not `type/subtype` of RFC 9110 token characters.
fn media_type(headers: &HeaderMap) -> ApiResult<String> {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return Ok(DEFAULT_MEDIA_TYPE.to_owned());
    };
    let essence = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let token = |s: &str| {
        !s.is_empty()
            && s.len() <= 127
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    match essence.split_once('/') {
        Some((t, s)) if token(t) && token(s) => Ok(if essence == "image/jpg" {
            "image/jpeg".to_owned()
        } else {
            essence
        }),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported media type.",
        )
        .with_detail("Content-Type must be a media type such as image/png or text/plain.")),
    }
}

/// Checks that a declared `image/*` upload starts with that image type's
/// signature (the first bytes of the file).
///
/// # Errors
/// `415` naming the declared type and what the bytes are.
fn check_signature(media_type: &str, head: &[u8]) -> ApiResult<()> {
    if !media_type.starts_with("image/") {
        return Ok(());
    }
    let found = infer::get(head).map(|t| t.mime_type());
    if found == Some(media_type) {
        return Ok(());
    }
    let what = match found {
        Some(found) => format!("The bytes are {found}, not {media_type}."),
        None => format!("The bytes are not a {media_type} image."),
    };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "The file's bytes do not match its media type.",
    )
    .with_detail(what))
}

/// `Content-Disposition: inline` with the name as an RFC 8187 `filename*`
/// (and an ASCII fallback).
fn content_disposition(name: &str) -> String {
    disposition("inline", name)
}

/// `Content-Disposition` of `kind` (`inline` or `attachment`) with the name
/// as an RFC 8187 `filename*` (and an ASCII fallback).
pub(crate) fn disposition(kind: &str, name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_lose_directories_and_control_characters() {
        assert_eq!(file_name(None).unwrap(), "file");
        assert_eq!(file_name(Some("../../etc/passwd")).unwrap(), "passwd");
        assert_eq!(file_name(Some("C:\\Users\\a\\cat.png")).unwrap(), "cat.png");
        assert_eq!(file_name(Some(" a\u{0}b\n.txt ")).unwrap(), "ab.txt");
        assert_eq!(file_name(Some("..")).unwrap(), "file");
        assert!(file_name(Some(&"x".repeat(256))).is_err());
    }

    #[test]
    fn media_types_are_essences_and_malformed_ones_are_415() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_TYPE, HeaderValue::from_str(v).unwrap());
            media_type(&h)
        };
        assert_eq!(media_type(&HeaderMap::new()).unwrap(), DEFAULT_MEDIA_TYPE);
        assert_eq!(with("Text/Plain; charset=utf-8").unwrap(), "text/plain");
        assert_eq!(with("image/jpg").unwrap(), "image/jpeg");
        for bad in ["text", "/x", "a/b c", "a/"] {
            assert_eq!(
                with(bad).unwrap_err().status(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{bad}"
            );
        }
    }

    #[test]
    fn an_image_must_carry_its_signature() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        assert!(check_signature("image/png", png).is_ok());
        assert!(check_signature("text/plain", b"hello").is_ok());
        let err = check_signature("image/jpeg", png).unwrap_err();
        assert_eq!(err.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(
            err.body().detail.as_deref(),
            Some("The bytes are image/png, not image/jpeg.")
        );
        assert!(check_signature("image/png", b"hello").is_err());
    }

    #[test]
    fn content_disposition_encodes_the_name() {
        assert_eq!(
            content_disposition("ça va.txt"),
            "inline; filename=\"_a va.txt\"; filename*=UTF-8''%C3%A7a%20va.txt"
        );
    }
}
