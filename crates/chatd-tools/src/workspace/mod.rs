//! The chat's workspace (API.md "Workspaces and provider-hosted tools";
//! issue 37): a directory per chat that the built-in tools `shell`,
//! `read_file`, `write_file` and `list_files` act on. This module knows
//! nothing about the database; it owns three things:
//!
//! - [`sandbox`]: running `shell` commands under bubblewrap with the system
//!   read-only, only the workspace writable, no network unless the admin
//!   allows it, and limits on CPU time, memory, processes, file size and
//!   output, each named in the result when hit ([`Limit`]).
//! - [`fs`]: the host-side file tools, whose paths can never leave the
//!   workspace's root (cap-std: `openat2(RESOLVE_BENEATH)`), and which never
//!   block on a FIFO or open a device.
//! - [`manifest`]: the local directory against the committed state
//!   ([`Manifest`]): a scan that rehashes only what changed since the last
//!   one, the [`Change`]s a step made, and [`LocalWorkspace::apply`], which
//!   makes the directory exactly a committed manifest (a takeover, a fork).

pub mod fs;
pub mod manifest;
pub mod sandbox;

pub use fs::{
    ListEntry, ListFiles, ReadFile, ToolError, check_path, list_files, read_file, write_file,
};
pub use manifest::{Change, Entry, EntryKind, LocalWorkspace, Manifest, sha256};
pub use sandbox::{
    DirBound, Limit, Sandbox, SandboxConfig, SandboxError, SandboxLimits, ShellOutcome,
};
