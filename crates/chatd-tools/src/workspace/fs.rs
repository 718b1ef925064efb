//! The host-side file tools `read_file`, `write_file` and `list_files` (API.md
//! "Workspaces and provider-hosted tools").
//!
//! Invariant: no path given by the model reaches anything outside the
//! workspace's root. Paths are checked lexically first ([`check_path`]: no
//! absolute path, no `..`, no NUL), then every open goes through a cap-std
//! [`Dir`] of the root, which resolves each component beneath it
//! (`openat2(RESOLVE_BENEATH)` on Linux): a symlink the sandbox planted that
//! points out (`ln -s /etc x`, `ln -s ../.. y`) makes the call fail instead of
//! being followed. Files are opened with `O_NONBLOCK` and checked with
//! `fstat` before a byte is read or written, so a FIFO never blocks a tool
//! and a device is never read.
//!
//! Errors are [`ToolError`]s: one sentence for the model, returned as an
//! error result of the tool call rather than an error of the turn.

use std::io::{self, Read, Write};
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, OpenOptions, OpenOptionsExt};
use serde::Serialize;

use super::manifest::EntryKind;

use chatd_core::workspace_path;
pub use chatd_core::workspace_path::MAX_PATH_BYTES;

/// How many entries [`list_files`] returns at most; [`ListFiles::truncated`]
/// says when there were more.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// A failed file tool call: a message for the model (it names the path and
/// what was wrong), returned as the tool's error result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError(pub String);

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ToolError {}

/// What [`read_file`] read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadFile {
    /// The first `max_bytes` of the file as UTF-8, invalid sequences replaced
    /// by U+FFFD.
    pub content: String,
    /// The file's whole size in bytes.
    pub bytes: u64,
    /// Whether the file is longer than what `content` holds.
    pub truncated: bool,
    /// The file is binary (a NUL byte, or not UTF-8): `content` is empty.
    pub binary: bool,
}

/// One entry of [`list_files`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListEntry {
    /// Relative to the workspace's root, `/`-separated.
    pub path: String,
    /// File, directory or symlink (a symlink is listed, never followed).
    pub kind: EntryKind,
    /// A file's size, a symlink's target length, 0 for a directory.
    pub bytes: u64,
}

/// What [`list_files`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListFiles {
    /// Depth first, each directory's entries sorted by name (a directory is
    /// followed by its contents); at most [`MAX_LIST_ENTRIES`].
    pub entries: Vec<ListEntry>,
    /// Whether the walk stopped at [`MAX_LIST_ENTRIES`].
    pub truncated: bool,
}

/// Checks a path given by the model and returns it normalized: relative,
/// `/`-separated, without `.` components, repeated or trailing slashes
/// ([`chatd_core::workspace_path::normalize`], which the API's file route
/// uses too).
///
/// Errors: an empty path (or one that normalizes to the root, like `.`), an
/// absolute path, a `..` component, a NUL byte, more than
/// [`MAX_PATH_BYTES`] bytes; the message names the path (cut to 200 bytes).
pub fn check_path(path: &str) -> Result<String, ToolError> {
    workspace_path::normalize(path).map_err(|e| {
        let shown: String = path.chars().take(200).collect();
        ToolError(format!("{shown:?}: {e}"))
    })
}

/// Reads at most `max_bytes` of the file at `path` (relative to `root`).
///
/// Errors: a bad path ([`check_path`]), a path that does not exist, leads out
/// of the workspace through a symlink, or is not a regular file (a
/// directory, FIFO, socket or device; none of them is opened for reading).
pub fn read_file(root: &Path, path: &str, max_bytes: usize) -> Result<ReadFile, ToolError> {
    let rel = check_path(path)?;
    let dir = open_root(root)?;
    // Before opening: a device is never opened at all (opening some has
    // effects); the fstat after the open catches a swap in between.
    let meta = dir.metadata(&rel).map_err(|e| io_error(&rel, e))?;
    refuse_non_file(&rel, &meta)?;
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(open_flags());
    let file = dir
        .open_with(&rel, &options)
        .map_err(|e| io_error(&rel, e))?;
    let meta = file.metadata().map_err(|e| io_error(&rel, e))?;
    refuse_non_file(&rel, &meta)?;
    let bytes = meta.len();
    let mut content = Vec::with_capacity(max_bytes.min(bytes as usize));
    // One byte past the limit tells a file that grew since the fstat.
    file.take(max_bytes as u64 + 1)
        .read_to_end(&mut content)
        .map_err(|e| io_error(&rel, e))?;
    let truncated = content.len() > max_bytes;
    content.truncate(max_bytes);
    let bytes = bytes.max(content.len() as u64);
    if looks_binary(&content) {
        // Thousands of replacement characters would only fill the model's
        // context.
        return Ok(ReadFile {
            content: String::new(),
            bytes,
            truncated: false,
            binary: true,
        });
    }
    Ok(ReadFile {
        content: String::from_utf8_lossy(&content).into_owned(),
        bytes,
        truncated,
        binary: false,
    })
}

/// Whether `content` (the start of a file) is binary: a NUL byte, or
/// bytes that are not UTF-8 (a sequence cut at the end is not counted).
fn looks_binary(content: &[u8]) -> bool {
    if content.contains(&0) {
        return true;
    }
    match std::str::from_utf8(content) {
        Ok(_) => false,
        // Cut in the middle of a character by the limit: still text.
        Err(e) => e.error_len().is_some(),
    }
}

/// Writes `content` to the file at `path` (relative to `root`), replacing it,
/// creating missing parent directories. A symlink inside the workspace is
/// followed as long as it stays inside.
///
/// Errors: a bad path ([`check_path`]), content over `max_file_bytes`, a
/// path that leads out of the workspace, a parent that is a file, or a
/// target that is not a regular file (directory, FIFO, socket, device).
pub fn write_file(
    root: &Path,
    path: &str,
    content: &[u8],
    max_file_bytes: u64,
) -> Result<(), ToolError> {
    let rel = check_path(path)?;
    if content.len() as u64 > max_file_bytes {
        return Err(ToolError(format!(
            "the content is {} bytes; files are limited to {max_file_bytes} bytes",
            content.len()
        )));
    }
    let dir = open_root(root)?;
    if let Some((parent, _)) = rel.rsplit_once('/')
        && let Err(e) = dir.create_dir_all(parent)
    {
        // create_dir_all says "File exists" for a symlink that leads out;
        // resolving the parent names the real reason.
        return Err(match dir.metadata(parent) {
            Err(resolve) => io_error(parent, resolve),
            Ok(meta) if !meta.is_dir() => ToolError(format!("{parent} is not a directory")),
            Ok(_) => io_error(parent, e),
        });
    }
    match dir.metadata(&rel) {
        Ok(meta) => refuse_non_file(&rel, &meta)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(&rel, e)),
    }
    // No O_TRUNC: the file is checked with fstat before anything changes.
    let mut options = OpenOptions::new();
    options.write(true).create(true).custom_flags(open_flags());
    let mut file = dir
        .open_with(&rel, &options)
        .map_err(|e| io_error(&rel, e))?;
    let meta = file.metadata().map_err(|e| io_error(&rel, e))?;
    refuse_non_file(&rel, &meta)?;
    write_all(&mut file, content).map_err(|e| io_error(&rel, e))
}

/// Lists the workspace recursively from `path` (`None`, `""` or `"."`: the
/// root), symlinks listed but not followed, FIFOs, sockets and devices
/// left out.
///
/// Errors: a bad path ([`check_path`]), a path that does not exist, is not a
/// directory, or leads out of the workspace.
pub fn list_files(root: &Path, path: Option<&str>) -> Result<ListFiles, ToolError> {
    let dir = open_root(root)?;
    let (start, prefix) = match path {
        None | Some("") | Some(".") => (dir, String::new()),
        Some(path) => {
            let rel = check_path(path)?;
            let meta = dir.metadata(&rel).map_err(|e| io_error(&rel, e))?;
            if !meta.is_dir() {
                return Err(ToolError(format!("{rel} is not a directory")));
            }
            let sub = dir.open_dir(&rel).map_err(|e| io_error(&rel, e))?;
            (sub, format!("{rel}/"))
        }
    };
    let mut out = ListFiles {
        entries: Vec::new(),
        truncated: false,
    };
    walk(&start, &prefix, &mut out).map_err(|e| io_error(prefix.trim_end_matches('/'), e))?;
    Ok(out)
}

fn walk(dir: &Dir, prefix: &str, out: &mut ListFiles) -> io::Result<()> {
    let mut children = Vec::new();
    for entry in dir.entries()? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        children.push((name, entry));
    }
    children.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, entry) in children {
        if out.entries.len() >= MAX_LIST_ENTRIES {
            out.truncated = true;
            return Ok(());
        }
        let file_type = entry.file_type()?;
        let path = format!("{prefix}{name}");
        if file_type.is_dir() {
            out.entries.push(ListEntry {
                path: path.clone(),
                kind: EntryKind::Dir,
                bytes: 0,
            });
            // open_dir resolves beneath `dir` too: a directory swapped for a
            // symlink meanwhile cannot lead the walk out.
            walk(&entry.open_dir()?, &format!("{path}/"), out)?;
        } else if file_type.is_symlink() {
            let target = dir.read_link_contents(&name)?;
            out.entries.push(ListEntry {
                path,
                kind: EntryKind::Symlink,
                bytes: target.as_os_str().len() as u64,
            });
        } else if file_type.is_file() {
            let bytes = entry.metadata()?.len();
            out.entries.push(ListEntry {
                path,
                kind: EntryKind::File,
                bytes,
            });
        }
    }
    Ok(())
}

fn open_root(root: &Path) -> Result<Dir, ToolError> {
    Dir::open_ambient_dir(root, ambient_authority())
        .map_err(|e| ToolError(format!("the workspace cannot be opened: {e}")))
}

fn open_flags() -> i32 {
    nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY
}

fn refuse_non_file(path: &str, meta: &Metadata) -> Result<(), ToolError> {
    let file_type = meta.file_type();
    if file_type.is_file() {
        Ok(())
    } else if file_type.is_dir() {
        Err(ToolError(format!("{path} is a directory")))
    } else {
        Err(ToolError(format!(
            "{path} is not a regular file (a FIFO, socket or device)"
        )))
    }
}

fn write_all(file: &mut File, content: &[u8]) -> io::Result<()> {
    file.set_len(0)?;
    file.write_all(content)?;
    file.flush()
}

/// One sentence for the model about an I/O error on `path`; an escape
/// attempt (cap-std's refusal) says so instead of a bare "permission denied".
fn io_error(path: &str, e: io::Error) -> ToolError {
    let shown = if path.is_empty() {
        "the workspace's root"
    } else {
        path
    };
    let escape = e.to_string().contains("outside of the filesystem")
        || e.raw_os_error() == Some(nix::libc::EXDEV)
        || e.raw_os_error() == Some(nix::libc::ELOOP);
    if escape {
        return ToolError(format!(
            "{shown} leads outside the workspace (through a symlink); paths cannot leave it"
        ));
    }
    match e.kind() {
        io::ErrorKind::NotFound => ToolError(format!("{shown} does not exist")),
        io::ErrorKind::NotADirectory => {
            ToolError(format!("a parent of {shown} is not a directory"))
        }
        io::ErrorKind::IsADirectory => ToolError(format!("{shown} is a directory")),
        io::ErrorKind::FileTooLarge => ToolError(format!("{shown}: the file is too large")),
        _ => ToolError(format!("{shown}: {e}")),
    }
}
