//! The committed workspace of a chat, read (API.md "Workspaces and
//! provider-hosted tools"):
//!
//! - `GET /api/v2/chats/{chat}/workspace` → `200 [WorkspaceEntry]`, by path
//!   (`[]` before the first committed change);
//! - `GET /api/v2/chats/{chat}/workspace/file?path=` → the file's bytes;
//! - `GET /api/v2/chats/{chat}/workspace/archive` → a `.tar.gz` of it.
//!
//! Readable by whoever may read the chat. Only committed steps are seen:
//! a step's changes appear with its messages, never half of them. The
//! workspace changes only through the worker's tools (`shell`,
//! `write_file`), never through these routes.

use std::io::Write as _;

use axum::Json;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::HeaderValue;
use axum::http::header::{
    CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::response::{IntoResponse as _, Response};
use chatd_store::workspaces::{self, EntryKind};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

use crate::app::AppState;
use crate::auth::ChatTarget;
use crate::error::{ApiError, ApiResult, E400, E401, E404};
use crate::extract::QueryParams;
use crate::files::disposition;

/// One committed entry of a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WorkspaceEntry {
    /// Relative to the workspace's root, `/`-separated.
    pub path: String,
    /// `file`, `dir` or `symlink`.
    #[schema(example = "file")]
    pub kind: String,
    /// A file's size, a symlink target's length, 0 for a directory.
    pub bytes: i64,
    /// The file's executable bit.
    pub executable: bool,
    /// When the step that last changed it committed.
    pub updated_at: DateTime<Utc>,
}

/// The pattern the document states for the file route's `path`
/// ([`FileParams`], which repeats it: the attribute takes a literal
/// only): `/`-separated segments, none of them `.` or `..`, not starting
/// with `/`, no NUL. Every path it matches passes the route's
/// check (of at most 4096 bytes); the route also takes `.` segments
/// (`./a//b` is `a/b`), which the pattern leaves out so that a
/// schema-valid request is never refused for its form.
pub const PATH_PATTERN: &str = concat!(
    "^(?:[^/.\\u0000][^/\\u0000]*|\\.[^/.\\u0000][^/\\u0000]*|\\.\\.[^/\\u0000]+)",
    "(?:/+(?:[^/.\\u0000][^/\\u0000]*|\\.[^/.\\u0000][^/\\u0000]*|\\.\\.[^/\\u0000]+))*/*$"
);

/// Query of `GET /chats/{chat}/workspace/file`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FileParams {
    /// The file's path, relative to the workspace's root (at most 4096
    /// bytes; no `..`).
    #[param(
        pattern = "^(?:[^/.\\u0000][^/\\u0000]*|\\.[^/.\\u0000][^/\\u0000]*|\\.\\.[^/\\u0000]+)(?:/+(?:[^/.\\u0000][^/\\u0000]*|\\.[^/.\\u0000][^/\\u0000]*|\\.\\.[^/\\u0000]+))*/*$"
    )]
    pub path: String,
}

/// `GET /api/v2/chats/{chat}/workspace`: the committed workspace's entries
/// by path (byte order): files, symlinks and directories. `[]` before the
/// first committed change (and for a chat without a workspace).
///
/// # Errors
/// `400` when `chat` is not a UUID; `404` for a chat the caller may not
/// read.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/workspace",
    tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses(
        (status = 200, description = "The entries", body = [WorkspaceEntry]),
        E400, E401, E404,
    )
)]
pub async fn list_workspace(
    State(state): State<AppState>,
    target: ChatTarget,
) -> ApiResult<Json<Vec<WorkspaceEntry>>> {
    let rows = workspaces::manifest(state.store().pool(), target.chat.id).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| WorkspaceEntry {
                path: r.path,
                kind: r.kind.as_str().to_owned(),
                bytes: r.bytes,
                executable: r.executable,
                updated_at: r.updated_at,
            })
            .collect(),
    ))
}

/// `GET /api/v2/chats/{chat}/workspace/file?path=`: a committed file's
/// bytes, `Content-Type` `text/plain; charset=utf-8` when they are UTF-8,
/// else `application/octet-stream`; `Content-Disposition: inline` with the
/// file's name; `X-Content-Type-Options: nosniff` and a sandboxing CSP, so
/// nothing a model wrote runs in the service's origin.
///
/// # Errors
/// `400` naming `path` (missing, absolute, with `..`); `404` for a chat the
/// caller may not read, or no file at `path` (a directory or a symlink is
/// not a file: the message says which).
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/workspace/file",
    tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id"), FileParams),
    responses(
        (status = 200, description = "The file's bytes", content(
            (String = "text/plain"),
            (Vec<u8> = "application/octet-stream"),
        )),
        E400, E401, E404,
    )
)]
pub async fn workspace_file(
    State(state): State<AppState>,
    target: ChatTarget,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let query = QueryParams::parse(query.as_deref())?;
    let raw = query
        .get("path")
        .ok_or_else(|| ApiError::invalid_query("path", "is required"))?;
    let path = route_path(raw)?;
    let (entry, content) = workspaces::file(state.store().pool(), target.chat.id, &path)
        .await?
        .ok_or_else(|| ApiError::not_found("No file at this path in the workspace."))?;
    match entry.kind {
        EntryKind::File => {}
        EntryKind::Dir => return Err(ApiError::not_found("This path is a directory.")),
        EntryKind::Symlink => {
            return Err(ApiError::not_found(format!(
                "This path is a symlink to {}.",
                String::from_utf8_lossy(&content)
            )));
        }
    }
    let text = std::str::from_utf8(&content).is_ok();
    let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
    let length = content.len();
    let mut response = Body::from(content).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(if text {
            "text/plain; charset=utf-8"
        } else {
            "application/octet-stream"
        }),
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    if let Ok(value) = HeaderValue::from_str(&disposition("inline", &name)) {
        headers.insert(CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// `GET /api/v2/chats/{chat}/workspace/archive`: the committed workspace
/// as a gzip-compressed tar (`application/gzip`, `Content-Disposition:
/// attachment; filename="<chat id>-workspace.tar.gz"`), read in one
/// snapshot; entries under `workspace/`, with their modes (0755 for
/// executables, else 0644; directories 0755), symlinks as symlinks, and
/// each entry's `updated_at` as its time. An empty workspace is an empty
/// archive.
///
/// # Errors
/// `400` when `chat` is not a UUID; `404` for a chat the caller may not
/// read.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/workspace/archive",
    tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses(
        (status = 200, description = "The workspace as .tar.gz", content((Vec<u8> = "application/gzip"))),
        E400, E401, E404,
    )
)]
pub async fn workspace_archive(
    State(state): State<AppState>,
    target: ChatTarget,
) -> ApiResult<Response> {
    let rows = workspaces::all_contents(state.store().pool(), target.chat.id).await?;
    let body = tokio::task::spawn_blocking(move || archive(&rows))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    let mut response = Body::from(body).into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/gzip"));
    if let Ok(value) = HeaderValue::from_str(&disposition(
        "attachment",
        &format!("{}-workspace.tar.gz", target.chat.id),
    )) {
        headers.insert(CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// The `.tar.gz` of `rows` (entries under `workspace/`).
///
/// # Errors
/// I/O errors of the in-memory writer (none in practice).
pub fn archive(rows: &[(workspaces::WorkspaceEntry, Vec<u8>)]) -> std::io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    for (entry, content) in rows {
        let name = format!("workspace/{}", entry.path);
        let mut header = tar::Header::new_gnu();
        header.set_mtime(u64::try_from(entry.updated_at.timestamp()).unwrap_or(0));
        match entry.kind {
            EntryKind::File => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if entry.executable { 0o755 } else { 0o644 });
                header.set_size(content.len() as u64);
                tar.append_data(&mut header, &name, content.as_slice())?;
            }
            EntryKind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                tar.append_data(&mut header, &name, std::io::empty())?;
            }
            EntryKind::Symlink => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                let target = String::from_utf8_lossy(content).into_owned();
                tar.append_link(&mut header, &name, target)?;
            }
        }
    }
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()
}

/// Checks a path of the file route as the tools do
/// ([`chatd_core::workspace_path::normalize`]): relative, no `..`,
/// normalized (`./a//b` is `a/b`), so a file is found under the name the
/// model wrote it with.
fn route_path(raw: &str) -> ApiResult<String> {
    use chatd_core::workspace_path::{PathError, normalize};
    normalize(raw).map_err(|e| {
        let detail = match e {
            PathError::TooLong(_) | PathError::Nul => "must be a relative path of 1 to 4096 bytes",
            PathError::Absolute => "must be relative to the workspace's root",
            PathError::Parent => "must not leave the workspace (`..`)",
            PathError::Empty => "must name a file",
        };
        ApiError::invalid_query("path", detail)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked_and_normalized_as_the_tools_do() {
        assert_eq!(route_path("./src//main.rs").unwrap(), "src/main.rs");
        for bad in ["", "/etc/passwd", "../x", "a/../../x", ".", "a\0b"] {
            assert!(route_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn paths_the_document_allows_pass_the_check() {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::Schema;
        let params = FileParams::into_params(|| None);
        let Some(RefOr::T(Schema::Object(schema))) = &params[0].schema else {
            panic!("the path parameter has no schema of its own");
        };
        assert_eq!(schema.pattern.as_deref(), Some(PATH_PATTERN));
        let pattern = regex::Regex::new(PATH_PATTERN).unwrap();
        for good in ["a", "src/main.rs", "a//b/", ".env", "..x", "...", "a/.b/c"] {
            assert!(pattern.is_match(good), "{good:?}");
            assert!(route_path(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            ".",
            "a/./b",
            "./a",
            "..",
            "a\0b",
            "/",
        ] {
            assert!(!pattern.is_match(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_archive_holds_files_dirs_and_symlinks_with_their_modes() {
        let at = Utc::now();
        let entry = |path: &str, kind, bytes, executable| workspaces::WorkspaceEntry {
            path: path.into(),
            kind,
            sha256: vec![0; 32],
            bytes,
            executable,
            updated_at: at,
        };
        let rows = vec![
            (entry("bin", EntryKind::Dir, 0, false), Vec::new()),
            (
                entry("bin/run.sh", EntryKind::File, 9, true),
                b"echo hi\n\n".to_vec(),
            ),
            (
                entry("link", EntryKind::Symlink, 10, false),
                b"bin/run.sh".to_vec(),
            ),
        ];
        let gz = archive(&rows).unwrap();
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(gz.as_slice()));
        let mut seen = Vec::new();
        for e in tar.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mode = e.header().mode().unwrap();
            let link = e
                .link_name()
                .unwrap()
                .map(|l| l.to_string_lossy().into_owned());
            let mut body = String::new();
            std::io::Read::read_to_string(&mut e, &mut body).unwrap();
            seen.push((path, mode, link, body));
        }
        assert_eq!(
            seen,
            vec![
                ("workspace/bin".into(), 0o755, None, String::new()),
                (
                    "workspace/bin/run.sh".into(),
                    0o755,
                    None,
                    "echo hi\n\n".into()
                ),
                (
                    "workspace/link".into(),
                    0o777,
                    Some("bin/run.sh".into()),
                    String::new()
                ),
            ]
        );
    }
}
