//! File routes (API.md "Files"): `POST /api/v2/files` uploads a file,
//! `GET /api/v2/files/{id}` downloads it. Files are stored in PostgreSQL
//! ([`chatd_store::queries::files`]) and linked to a chat by the message
//! that mentions them (`LinkFiles`, [`chatd_store::ChatTx::link_files`]).
//!
//! Both directions stream: an upload is read a chunk at a time and written
//! in chunks of [`CHUNK_BYTES`] inside one transaction, failing with `413`
//! as soon as it passes the limit ([`crate::ApiOptions::max_file_bytes`];
//! at once when `Content-Length` already says so), so the server never holds
//! more than one chunk of it; nothing is stored unless the whole upload is.
//! A download sends the stored chunks one query at a time.
//!
//! Bad input, each changing nothing: a declared `image/*` type whose bytes
//! are not that image (checked against the bytes' signature) → `415`; a
//! malformed `Content-Type` → `415`; an empty body, a name over 255
//! characters → `400`.

use axum::Json;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::header::{
    CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chatd_store::queries::files::{self, CHUNK_BYTES, FileRow};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use http_body::Body as _;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, E400, E401, E404, E413, E415};
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
/// `application/octet-stream`), at most 10 MiB.
#[utoipa::path(
    post,
    path = "/api/v2/files",
    tag = "files",
    params(("name" = Option<String>, Query, description = "File name (at most 255 characters; directories are dropped); default \"file\"")),
    request_body(content = Vec<u8>, description = "The file's bytes; `Content-Type` is its media type", content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "Stored", body = File),
        E400, E401, E413, E415,
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
    if body.size_hint().lower() > limit as u64 {
        return Err(ApiError::too_large(limit));
    }
    let id = Uuid::new_v4();
    let mut tx = chatd_store::queries::begin(state.store().pool()).await?;
    files::insert(&mut *tx, id, caller.id(), &name, &media_type).await?;
    let mut stream = body.into_data_stream();
    let mut chunk = Vec::with_capacity(CHUNK_BYTES);
    let mut seq = 0i32;
    let mut total = 0usize;
    loop {
        let next = stream.next().await.transpose().map_err(|e| {
            ApiError::new(StatusCode::BAD_REQUEST, "Could not read the request body.")
                .with_detail(e.to_string())
        })?;
        let Some(mut data) = next else { break };
        total += data.len();
        if total > limit {
            // Dropping `tx` rolls the partial file back.
            return Err(ApiError::too_large(limit));
        }
        while !data.is_empty() {
            let take = (CHUNK_BYTES - chunk.len()).min(data.len());
            chunk.extend_from_slice(&data.split_to(take));
            if chunk.len() == CHUNK_BYTES {
                if seq == 0 {
                    check_signature(&media_type, &chunk)?;
                }
                files::insert_chunk(&mut *tx, id, seq, &chunk).await?;
                seq += 1;
                chunk.clear();
            }
        }
    }
    if total == 0 {
        return Err(ApiError::invalid("body", "must not be empty"));
    }
    if !chunk.is_empty() {
        if seq == 0 {
            check_signature(&media_type, &chunk)?;
        }
        files::insert_chunk(&mut *tx, id, seq, &chunk).await?;
    }
    let row = files::finish_upload(&mut *tx, id).await?;
    tx.commit().await?;
    metrics::counter!("chatd_file_upload_bytes_total").increment(total as u64);
    Ok((StatusCode::CREATED, Json(File::from(&row))))
}

/// `GET /api/v2/files/{id}`: the file's bytes, with its media type as
/// `Content-Type`, its size as `Content-Length` and its name in
/// `Content-Disposition`. Only the owner sees a file; anyone else gets
/// `404`, as for a file that does not exist. The body is sandboxed
/// (`Content-Security-Policy: sandbox`, `nosniff`): a stored HTML file never
/// runs as this origin's page.
#[utoipa::path(
    get,
    path = "/api/v2/files/{id}",
    tag = "files",
    params(("id" = Uuid, Path, description = "File id")),
    responses(
        (status = 200, description = "The bytes", content_type = "application/octet-stream", body = Vec<u8>),
        E400, E401, E404,
    )
)]
pub async fn download_file(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Response> {
    let id = params.uuid("id")?;
    let row = files::select(state.store().pool(), id)
        .await?
        .filter(|f| f.owner_id == caller.id())
        .ok_or_else(|| ApiError::not_found("File not found."))?;
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
    format!("inline; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
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
