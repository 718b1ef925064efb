//! `chat_workspace_files` and the workspace columns of `chats` (API.md
//! "Workspaces and provider-hosted tools"; migration `0023_workspaces.sql`).
//!
//! The committed workspace of a chat is its rows: the worker materializes
//! them in a local directory before a step's workspace tools run
//! ([`manifest`], [`contents`]), and commits the step's changes with the
//! step ([`crate::ChatTx::write_workspace`], which calls [`apply`] and
//! [`refresh_summary`]). The API reads them ([`manifest`], [`file`],
//! [`all_contents`]); a fork copies them ([`copy_for_fork`]).

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// The kind of a workspace entry, as stored in `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file; its content is the file's bytes.
    File,
    /// A directory (kept so empty ones survive a takeover); empty content.
    Dir,
    /// A symbolic link; its content is the link's target.
    Symlink,
}

impl EntryKind {
    /// The stored name: `file`, `dir` or `symlink`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
        }
    }

    /// The kind of a stored name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "file" => Some(EntryKind::File),
            "dir" => Some(EntryKind::Dir),
            "symlink" => Some(EntryKind::Symlink),
            _ => None,
        }
    }
}

/// One committed entry, without its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceEntry {
    /// Relative to the workspace's root, `/`-separated, no `..`.
    pub path: String,
    /// File, directory or symlink.
    pub kind: EntryKind,
    /// SHA-256 of the content (32 bytes).
    pub sha256: Vec<u8>,
    /// Length of the content in bytes.
    pub bytes: i64,
    /// The file's executable bit.
    pub executable: bool,
    /// When the step that last changed it committed.
    pub updated_at: DateTime<Utc>,
}

/// One change of a step: the entry at `path` becomes this one, or goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceChange {
    /// Insert or replace the entry at `path`.
    Put {
        /// Relative path.
        path: String,
        /// Its kind.
        kind: EntryKind,
        /// A file's bytes, a symlink's target, empty for a directory.
        content: Vec<u8>,
        /// SHA-256 of `content` (32 bytes).
        sha256: Vec<u8>,
        /// The executable bit.
        executable: bool,
    },
    /// Remove the entry at `path`.
    Delete {
        /// Relative path.
        path: String,
    },
}

impl WorkspaceChange {
    /// The path the change is about.
    pub fn path(&self) -> &str {
        match self {
            WorkspaceChange::Put { path, .. } | WorkspaceChange::Delete { path } => path,
        }
    }
}

fn entry_of(
    path: String,
    kind: String,
    sha256: Vec<u8>,
    bytes: i64,
    executable: bool,
    updated_at: DateTime<Utc>,
) -> sqlx::Result<WorkspaceEntry> {
    let kind = EntryKind::parse(&kind).ok_or_else(|| sqlx::Error::ColumnDecode {
        index: "kind".into(),
        source: format!("unknown workspace entry kind {kind:?}").into(),
    })?;
    Ok(WorkspaceEntry {
        path,
        kind,
        sha256,
        bytes,
        executable,
        updated_at,
    })
}

/// The committed entries of `chat_id`'s workspace, by path (byte order);
/// empty before the first committed change.
///
/// # Errors
/// Database errors; `ColumnDecode` for an unknown `kind`.
pub async fn manifest(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Vec<WorkspaceEntry>> {
    let rows = sqlx::query!(
        r#"SELECT path, kind, sha256, bytes, executable, updated_at FROM chat_workspace_files
           WHERE chat_id = $1 ORDER BY path COLLATE "C""#,
        chat_id,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            entry_of(
                r.path,
                r.kind,
                r.sha256,
                r.bytes,
                r.executable,
                r.updated_at,
            )
        })
        .collect()
}

/// The contents of the entries of `chat_id` at `paths` (those that exist),
/// as `(path, sha256, content)`.
///
/// # Errors
/// Database errors.
pub async fn contents(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    paths: &[String],
) -> sqlx::Result<Vec<(String, Vec<u8>, Vec<u8>)>> {
    let rows = sqlx::query!(
        "SELECT path, sha256, content FROM chat_workspace_files
         WHERE chat_id = $1 AND path = ANY($2::text[])",
        chat_id,
        paths,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.path, r.sha256, r.content))
        .collect())
}

/// One entry of `chat_id` with its content, `None` when there is none at
/// `path`.
///
/// # Errors
/// Database errors.
pub async fn file(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    path: &str,
) -> sqlx::Result<Option<(WorkspaceEntry, Vec<u8>)>> {
    let row = sqlx::query!(
        "SELECT path, kind, sha256, bytes, executable, updated_at, content
         FROM chat_workspace_files WHERE chat_id = $1 AND path = $2",
        chat_id,
        path,
    )
    .fetch_optional(conn)
    .await?;
    row.map(|r| {
        let entry = entry_of(
            r.path,
            r.kind,
            r.sha256,
            r.bytes,
            r.executable,
            r.updated_at,
        )?;
        Ok((entry, r.content))
    })
    .transpose()
}

/// Every entry of `chat_id` with its content, by path, in one snapshot
/// (the statement's): the `.tar.gz` of `GET /chats/{chat}/workspace/archive`.
/// At most `--max-workspace-bytes` of content.
///
/// # Errors
/// Database errors.
pub async fn all_contents(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Vec<(WorkspaceEntry, Vec<u8>)>> {
    let mut rows = sqlx::query!(
        r#"SELECT path, kind, sha256, bytes, executable, updated_at, content
           FROM chat_workspace_files WHERE chat_id = $1 ORDER BY path COLLATE "C""#,
        chat_id,
    )
    .fetch(conn);
    let mut out = Vec::new();
    while let Some(r) = rows.try_next().await? {
        let entry = entry_of(
            r.path,
            r.kind,
            r.sha256,
            r.bytes,
            r.executable,
            r.updated_at,
        )?;
        out.push((entry, r.content));
    }
    Ok(out)
}

/// Applies `changes` to `chat_id`'s rows (deletes, then upserts), inside
/// the caller's transaction; the summary columns are left to
/// [`refresh_summary`].
///
/// # Errors
/// Database errors (a path the table's `CHECK` refuses is a check
/// violation).
pub async fn apply(
    conn: &mut PgConnection,
    chat_id: Uuid,
    changes: &[WorkspaceChange],
) -> sqlx::Result<()> {
    let deleted: Vec<String> = changes
        .iter()
        .filter_map(|c| match c {
            WorkspaceChange::Delete { path } => Some(path.clone()),
            WorkspaceChange::Put { .. } => None,
        })
        .collect();
    if !deleted.is_empty() {
        sqlx::query!(
            "DELETE FROM chat_workspace_files WHERE chat_id = $1 AND path = ANY($2::text[])",
            chat_id,
            &deleted,
        )
        .execute(&mut *conn)
        .await?;
    }
    for change in changes {
        let WorkspaceChange::Put {
            path,
            kind,
            content,
            sha256,
            executable,
        } = change
        else {
            continue;
        };
        let bytes = i64::try_from(content.len()).unwrap_or(i64::MAX);
        sqlx::query!(
            "INSERT INTO chat_workspace_files (chat_id, path, kind, content, sha256, bytes, executable, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, now())
             ON CONFLICT (chat_id, path) DO UPDATE
             SET kind = EXCLUDED.kind, content = EXCLUDED.content, sha256 = EXCLUDED.sha256,
                 bytes = EXCLUDED.bytes, executable = EXCLUDED.executable, updated_at = now()",
            chat_id,
            path,
            kind.as_str(),
            content,
            sha256,
            bytes,
            executable,
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Sets `chat_id`'s `workspace_bytes`, `workspace_files` and
/// `workspace_updated_at` (now) from its rows; returns the bytes.
///
/// # Errors
/// Database errors.
pub async fn refresh_summary(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"UPDATE chats SET
             workspace_bytes = s.bytes, workspace_files = s.files, workspace_updated_at = now()
           FROM (SELECT coalesce(sum(bytes), 0)::bigint AS bytes,
                        (count(*) FILTER (WHERE kind <> 'dir'))::integer AS files
                 FROM chat_workspace_files WHERE chat_id = $1) s
           WHERE chats.id = $1
           RETURNING s.bytes AS "bytes!""#,
        chat_id,
    )
    .fetch_one(conn)
    .await
}

/// Copies `source`'s committed workspace to the new chat `target` (a fork,
/// API.md "Branches, regenerate and fork"), its summary columns from the
/// rows copied, in one statement's snapshot. Returns the bytes copied.
///
/// # Errors
/// Database errors.
pub async fn copy_for_fork(
    conn: &mut PgConnection,
    source: Uuid,
    target: Uuid,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"WITH copied AS (
             INSERT INTO chat_workspace_files (chat_id, path, kind, content, sha256, bytes, executable, updated_at)
             SELECT $2, path, kind, content, sha256, bytes, executable, updated_at
             FROM chat_workspace_files WHERE chat_id = $1
             RETURNING bytes, kind, updated_at
           ), s AS (
             SELECT count(*) AS n, coalesce(sum(bytes), 0)::bigint AS bytes,
                    (count(*) FILTER (WHERE kind <> 'dir'))::integer AS files,
                    max(updated_at) AS updated_at
             FROM copied
           )
           UPDATE chats SET workspace_bytes = s.bytes, workspace_files = s.files,
                            workspace_updated_at = s.updated_at
           FROM s WHERE chats.id = $2 AND s.n > 0
           RETURNING s.bytes AS "bytes!""#,
        source,
        target,
    )
    .fetch_optional(conn)
    .await
    .map(|b| b.unwrap_or(0))
}

/// The workspace bytes `owner_id` keeps (the sum of their chats'
/// `workspace_bytes`), which count against their storage quota.
///
/// # Errors
/// Database errors.
pub async fn bytes_of_owner(conn: impl PgExecutor<'_>, owner_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT coalesce(sum(workspace_bytes), 0)::bigint AS "bytes!" FROM chats
           WHERE owner_id = $1 AND workspace_bytes IS NOT NULL"#,
        owner_id,
    )
    .fetch_one(conn)
    .await
}
