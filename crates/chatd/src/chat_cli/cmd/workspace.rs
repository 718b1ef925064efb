//! `chatd chat files CHAT`, `chatd chat cat CHAT PATH` and `chatd chat
//! download CHAT [-o FILE]`: a chat's committed workspace (API.md
//! "Workspaces and provider-hosted tools"): `GET /chats/{chat}/workspace`,
//! `GET /chats/{chat}/workspace/file?path=` and `GET
//! /chats/{chat}/workspace/archive`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::client::ApiFailure;
use crate::chat_cli::output::stdout;

/// List the files of a chat's workspace (what its `shell` and
/// `write_file` tools left, as committed): one line per entry, by path:
/// kind (`file`, `exec` for an executable file, `dir`, `symlink`), size in
/// bytes, when it last changed (UTC), path (a directory's ending in `/`).
/// Nothing before the first change; a chat without a workspace has none.
#[derive(Debug, Args)]
pub struct FilesArgs {
    /// The chat id.
    chat: Uuid,
    /// Print the API's JSON array (`[{path, kind, bytes, executable,
    /// updated_at}]`) instead.
    #[arg(long)]
    json: bool,
}

/// One entry of `GET /chats/{chat}/workspace`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Entry {
    /// Relative to the workspace's root.
    pub path: String,
    /// `file`, `dir` or `symlink`.
    pub kind: String,
    /// A file's size, a symlink target's length, 0 for a directory.
    pub bytes: i64,
    /// A file's executable bit.
    #[serde(default)]
    pub executable: bool,
    /// RFC 3339.
    pub updated_at: String,
}

impl FilesArgs {
    /// Prints the entries ([`format_entries`]), or the API's JSON.
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let entries: Value = session
            .client
            .call(
                Method::GET,
                &format!("/chats/{}/workspace", self.chat),
                None,
            )
            .await?;
        if self.json {
            stdout(format!("{entries}\n"))?;
            return Ok(ExitCode::SUCCESS);
        }
        let entries: Vec<Entry> =
            serde_json::from_value(entries).context("decoding the workspace's entries")?;
        if entries.is_empty() {
            eprintln!("the workspace is empty");
            return Ok(ExitCode::SUCCESS);
        }
        stdout(format_entries(&entries))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// One line per entry: kind (`exec` for an executable file), bytes
/// right-aligned, `updated_at` to the second, path (`/` after a
/// directory's).
pub fn format_entries(entries: &[Entry]) -> String {
    let width = entries
        .iter()
        .map(|e| e.bytes.to_string().len())
        .max()
        .unwrap_or(1);
    entries
        .iter()
        .map(|e| {
            let kind = if e.kind == "file" && e.executable {
                "exec"
            } else {
                e.kind.as_str()
            };
            // `2025-01-02T03:04:05.123456Z` → `2025-01-02T03:04:05Z`.
            let updated = match e.updated_at.split_once('.') {
                Some((seconds, _)) => format!("{seconds}Z"),
                None => e.updated_at.clone(),
            };
            let slash = if e.kind == "dir" { "/" } else { "" };
            format!(
                "{kind:<7}  {:>width$}  {updated}  {}{slash}\n",
                e.bytes, e.path
            )
        })
        .collect()
}

/// Write a file of a chat's workspace to standard output, byte for byte.
#[derive(Debug, Args)]
pub struct CatArgs {
    /// The chat id.
    chat: Uuid,
    /// The file's path, relative to the workspace's root (as `files`
    /// lists it).
    path: String,
}

impl CatArgs {
    /// Fetches the file and writes its bytes unchanged.
    ///
    /// # Errors
    /// `no such file in the workspace` (a `404`: no file there, a
    /// directory, or a chat the token may not read; the server's message
    /// follows), the API's message for a bad path (`400`), as
    /// [`crate::chat_cli::client::Client::get_bytes`] otherwise; standard
    /// output cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        query.append_pair("path", &self.path);
        let bytes = session
            .client
            .get_bytes(&format!(
                "/chats/{}/workspace/file?{}",
                self.chat,
                query.finish()
            ))
            .await
            .map_err(|err| match err.downcast_ref::<ApiFailure>() {
                Some(failure) if failure.status == StatusCode::NOT_FOUND => {
                    let why = if failure.message.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", failure.message)
                    };
                    anyhow::anyhow!("no such file in the workspace: {}{why}", self.path)
                }
                _ => err,
            })?;
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes)?;
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}

/// Save a chat's workspace as a `.tar.gz` (its entries under
/// `workspace/`).
#[derive(Debug, Args)]
pub struct DownloadArgs {
    /// The chat id.
    chat: Uuid,
    /// Where to write it (replacing it; `-` for standard output).
    /// Default: `<chat id>-workspace.tar.gz` in the current directory.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

impl DownloadArgs {
    /// Fetches the archive and writes it; then `wrote FILE (N bytes)` on
    /// standard error.
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::get_bytes`]; the file or
    /// standard output cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let bytes = session
            .client
            .get_bytes(&format!("/chats/{}/workspace/archive", self.chat))
            .await?;
        let path = self
            .output
            .unwrap_or_else(|| PathBuf::from(format!("{}-workspace.tar.gz", self.chat)));
        if path.as_os_str() == "-" {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        tokio::fs::write(&path, &bytes)
            .await
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_align_sizes_and_mark_directories_and_executables() {
        let entry = |path: &str, kind: &str, bytes, executable| Entry {
            path: path.into(),
            kind: kind.into(),
            bytes,
            executable,
            updated_at: "2026-01-02T03:04:05.678Z".into(),
        };
        assert_eq!(
            format_entries(&[
                entry("bin", "dir", 0, false),
                entry("bin/run.sh", "file", 1234, true),
                entry("link", "symlink", 10, false),
                entry("notes.txt", "file", 5, false),
            ]),
            "dir         0  2026-01-02T03:04:05Z  bin/\n\
             exec     1234  2026-01-02T03:04:05Z  bin/run.sh\n\
             symlink    10  2026-01-02T03:04:05Z  link\n\
             file        5  2026-01-02T03:04:05Z  notes.txt\n"
        );
    }
}
