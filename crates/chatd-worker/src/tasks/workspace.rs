//! The built-in workspace tools of the generation task (API.md "Workspaces
//! and provider-hosted tools"): `shell`, `read_file`, `write_file` and
//! `list_files` on the chat's own directory ([`crate::workspace`]).
//!
//! A step's workspace calls run one after another, in call order, under the
//! chat's directory lock (their order matters; a step's other calls run
//! beside them):
//!
//! 1. **Checkout.** The committed manifest is read under the fence; the
//!    directory is made equal to it, fetching only the entries whose
//!    content differs. Whatever an earlier attempt left uncommitted (a
//!    crash, a lost fence, an interrupt mid-command) is gone, so a call
//!    cut off by a crash runs again on the committed files.
//! 2. **Calls.** `shell` runs in the sandbox; the file tools run here, with
//!    paths checked (`chatd_tools::workspace::check_path`, no symlink
//!    followed out of the root). After a call that may write, the
//!    directory's size is checked against the chat's room (the smaller of
//!    `--max-workspace-bytes` and what the owner's storage quota leaves): a
//!    call that goes past it is undone (the entries it changed get their
//!    content from before it) and its result says so. While a `shell`
//!    command runs, the directory is watched ([`chatd_tools::workspace::DirBound`]):
//!    past one more room's worth (at least 16 MiB) or twice the entry
//!    limit, the sandbox is killed, so no command can fill the replica's
//!    disk before that check.
//! 3. **Changes.** The difference between the directory and the committed
//!    manifest is the step's [`WorkspaceChange`]s, which the step's
//!    `CommitStep` bundle writes with its rows
//!    ([`chatd_store::ChatTx::write_workspace`]).
//!
//! Results are sanitised here, at the boundary, before they are stored.

use std::collections::HashMap;
use std::time::Duration;

use chatd_llm::ToolSpec;
use chatd_store::workspaces::{self, WorkspaceChange};
use chatd_tools::ToolOutcome;
use chatd_tools::workspace::{
    self as ws, Change, Entry, EntryKind, LocalWorkspace, Manifest, ToolError,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{TaskContext, TaskResult};
use crate::fence::{FenceError, fenced_lock};

/// The names of the workspace tools. Their results hold only with the step
/// that carries the step's changes: an interrupt stores none of their
/// streamed results (`super::interrupt`).
pub(super) const TOOLS: [&str; 4] = ["shell", "read_file", "write_file", "list_files"];

/// The workspace tools plan mode offers (they change nothing).
pub(super) const READ_ONLY_TOOLS: [&str; 2] = ["read_file", "list_files"];

/// The default `timeout_s` of a `shell` call (seconds).
const DEFAULT_TIMEOUT_S: u64 = 120;

/// Whether `name` is a workspace tool.
pub(super) fn is_workspace_tool(name: &str) -> bool {
    TOOLS.contains(&name)
}

/// The specs of the workspace tools offered to the model (`read_only`: the
/// two that change nothing).
pub(super) fn specs(read_only: bool, max_timeout_s: u64) -> Vec<ToolSpec> {
    let mut specs = vec![
        ToolSpec {
            name: "read_file".into(),
            description: "Read a file of your workspace (a directory of files that persists across the whole chat). The path is relative to the workspace's root. Returns {path, content, bytes, truncated}; long files are cut.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Relative to the workspace's root, like src/main.py."}},
                "required": ["path"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "list_files".into(),
            description: "List the files and directories of your workspace (recursively), or of one directory of it. Returns {entries: [{path, kind, bytes}], truncated}.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "A directory relative to the workspace's root; the whole workspace when left out."}},
                "additionalProperties": false
            }),
        },
    ];
    if read_only {
        return specs;
    }
    specs.push(ToolSpec {
        name: "write_file".into(),
        description: "Create or replace a file of your workspace with the given text (parent directories are created). The path is relative to the workspace's root. Returns {path, bytes}.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Relative to the workspace's root."},
                "content": {"type": "string", "description": "The whole new content of the file."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }),
    });
    specs.push(ToolSpec {
        name: "shell".into(),
        description: format!("Run a command with sh -c in your workspace, a sandbox: the current directory (/workspace, the workspace's root) is the only writable place and persists across calls; the system is read-only, there is no network, and CPU time, memory, processes, file size and output are limited. Returns {{exit_code, stdout, stderr, truncated, limit}}: limit names the limit the command hit, if any. timeout_s defaults to {DEFAULT_TIMEOUT_S} (at most {max_timeout_s})."),
        input_schema: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command line."},
                "timeout_s": {"type": "integer", "minimum": 1, "maximum": max_timeout_s, "description": "Seconds before the command is killed."}
            },
            "required": ["command"],
            "additionalProperties": false
        }),
    });
    specs
}

/// One parsed workspace call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WorkspaceCall {
    Shell { command: String, timeout_s: u64 },
    ReadFile { path: String },
    WriteFile { path: String, content: String },
    ListFiles { path: Option<String> },
}

impl WorkspaceCall {
    /// Whether the call may change the directory.
    fn writes(&self) -> bool {
        matches!(
            self,
            WorkspaceCall::Shell { .. } | WorkspaceCall::WriteFile { .. }
        )
    }
}

/// Parses a call of the workspace tool `name`; the error is the result for
/// the model.
pub(super) fn parse(name: &str, args: &str, max_timeout_s: u64) -> Result<WorkspaceCall, String> {
    #[derive(Deserialize)]
    struct Shell {
        command: String,
        timeout_s: Option<u64>,
    }
    #[derive(Deserialize)]
    struct PathArg {
        path: String,
    }
    #[derive(Deserialize)]
    struct Write {
        path: String,
        content: String,
    }
    #[derive(Deserialize)]
    struct List {
        path: Option<String>,
    }
    let args = if args.trim().is_empty() { "{}" } else { args };
    let bad = |e: serde_json::Error| format!("Invalid arguments for {name}: {e}");
    match name {
        "shell" => {
            let a: Shell = serde_json::from_str(args).map_err(bad)?;
            let timeout_s = a.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S.min(max_timeout_s));
            if timeout_s == 0 || timeout_s > max_timeout_s {
                return Err(format!(
                    "Invalid arguments for shell: timeout_s must be between 1 and {max_timeout_s}"
                ));
            }
            if a.command.trim().is_empty() {
                return Err("Invalid arguments for shell: command is empty".into());
            }
            Ok(WorkspaceCall::Shell {
                command: a.command,
                timeout_s,
            })
        }
        "read_file" => {
            let a: PathArg = serde_json::from_str(args).map_err(bad)?;
            Ok(WorkspaceCall::ReadFile { path: a.path })
        }
        "write_file" => {
            let a: Write = serde_json::from_str(args).map_err(bad)?;
            Ok(WorkspaceCall::WriteFile {
                path: a.path,
                content: a.content,
            })
        }
        "list_files" => {
            let a: List = serde_json::from_str(args).map_err(bad)?;
            Ok(WorkspaceCall::ListFiles {
                path: a.path.filter(|p| !p.is_empty() && p != "." && p != "/"),
            })
        }
        _ => Err(format!("Unknown tool: {name}")),
    }
}

/// What a step's workspace calls came to: their outcomes, in the order
/// given, and the changes to commit with the step.
pub(super) struct WorkspaceRun {
    pub(super) outcomes: Vec<ToolOutcome>,
    pub(super) changes: Vec<WorkspaceChange>,
}

/// The committed state read under the fence.
struct Committed {
    manifest: Manifest,
    /// The bytes the workspace may hold after this step: the smaller of
    /// `--max-workspace-bytes` and the committed bytes plus what the
    /// owner's quota leaves.
    room: u64,
}

/// Runs `calls` (parsed, or the error result of one that did not parse)
/// in order on the chat's directory (module docs).
///
/// # Errors
/// `Stale` when the fence no longer holds, `Cancelled`; database errors
/// are retried.
pub(super) async fn run(
    task: &TaskContext,
    calls: Vec<Result<WorkspaceCall, String>>,
) -> TaskResult<WorkspaceRun> {
    let host = &task.ctx.workspaces;
    let chat_dir = host.chat(task.chat_id);
    let mut slot = chat_dir.lock_owned().await;
    let committed = task
        .retrying("reading the workspace", || read_committed(task))
        .await?;
    if slot.is_none() {
        let path = host.path_of(task.chat_id);
        match blocking(move || LocalWorkspace::open(path)).await {
            Ok(local) => *slot = Some(local),
            Err(e) => {
                return Ok(unavailable(
                    &calls,
                    &format!("cannot open it: {}", short(&e)),
                ));
            }
        }
    }
    let local: &mut Option<LocalWorkspace> = &mut slot;
    // 1. Checkout.
    if let Err(e) = restore(task, local, &committed.manifest, &HashMap::new()).await? {
        // A local I/O error (a full disk): the calls fail, nothing commits.
        return Ok(unavailable(&calls, &short(&e)));
    }
    // 2. Calls.
    let config = host.config();
    let mut outcomes = Vec::with_capacity(calls.len());
    // Contents this step wrote, by hash: what undoing a later call needs
    // besides the committed rows.
    let mut written: HashMap<[u8; 32], Vec<u8>> = HashMap::new();
    for call in calls {
        let call = match call {
            Ok(call) => call,
            Err(message) => {
                outcomes.push(ToolOutcome::error(message));
                continue;
            }
        };
        let before = if call.writes() {
            match local_scan(local).await {
                Ok(m) => Some(m),
                Err(e) => {
                    outcomes.push(ToolOutcome::error(format!(
                        "The workspace cannot be read: {}",
                        short(&e)
                    )));
                    continue;
                }
            }
        } else {
            None
        };
        let root = local.as_ref().expect("opened").root().to_path_buf();
        let mut outcome = task
            .cancellable(run_one(task, root, &call, before.as_ref(), committed.room))
            .await?;
        if let Some(before) = before {
            match local_diff(local, &before).await {
                Ok(changes) => {
                    let after = apply_to(&before, &changes);
                    let total = LocalWorkspace::total_bytes(&after);
                    let grew = total > LocalWorkspace::total_bytes(&before);
                    if total > committed.room && grew {
                        // A workspace already over its room (its owner's
                        // quota was lowered) may still shrink.
                        undo(task, local, &before, &written).await?;
                        outcome = over_room(outcome, total, committed.room, config.max_bytes);
                    } else if after.len() > config.max_entries && after.len() > before.len() {
                        undo(task, local, &before, &written).await?;
                        outcome = over_entries(outcome, after.len(), config.max_entries);
                    } else {
                        for change in changes {
                            if let Change::Put { entry, content, .. } = change {
                                written.insert(entry.sha256, content);
                            }
                        }
                        let opened = local.as_ref().expect("opened");
                        let (count, names) = opened.unkept();
                        if count > 0 {
                            outcome = with_notice(outcome, &unkept_notice(count, names));
                        }
                        let (count, paths) = opened.special();
                        if count > 0 {
                            outcome = with_notice(outcome, &special_notice(count, paths));
                        }
                    }
                }
                Err(e) => {
                    undo(task, local, &before, &written).await?;
                    // The command's own output stays: the model sees what
                    // it printed, and why its changes are gone.
                    let message = format!(
                        "The workspace could not be read after the call, so its changes were undone: {}",
                        short(&e)
                    );
                    outcome = match outcome.result {
                        Value::Object(mut map) => {
                            let said = with_earlier(&map, &message);
                            map.insert("message".into(), json!(said));
                            ToolOutcome {
                                result: Value::Object(map),
                                is_error: true,
                            }
                        }
                        _ => ToolOutcome::error(message),
                    };
                }
            }
        }
        sanitize(&mut outcome);
        outcomes.push(outcome);
    }
    // 3. Changes.
    let changes = match local_diff(local, &committed.manifest).await {
        Ok(changes) => changes.into_iter().map(to_store).collect(),
        Err(e) => {
            // Nothing of the step's changes can be committed: the
            // directory is checked out again by the next step.
            tracing::warn!(chat_id = %task.chat_id, error = %e, "cannot read the workspace's changes");
            let n = outcomes.len();
            return Ok(WorkspaceRun {
                outcomes: (0..n)
                    .map(|_| {
                        ToolOutcome::error(format!(
                            "The workspace's changes could not be read, so they were not kept: {}",
                            short(&e)
                        ))
                    })
                    .collect(),
                changes: Vec::new(),
            });
        }
    };
    Ok(WorkspaceRun { outcomes, changes })
}

/// Every call fails with `reason` (the workspace cannot be used here now).
fn unavailable(calls: &[Result<WorkspaceCall, String>], reason: &str) -> WorkspaceRun {
    WorkspaceRun {
        outcomes: calls
            .iter()
            .map(|_| ToolOutcome::error(format!("The workspace is unavailable: {reason}")))
            .collect(),
        changes: Vec::new(),
    }
}

async fn read_committed(task: &TaskContext) -> Result<Committed, FenceError> {
    let store_error = |e: sqlx::Error| FenceError::Store(e.into());
    let machine = task.machine();
    let mut locked = fenced_lock(&machine, &task.fence).await?;
    let chat = locked.chat.clone();
    let rows = workspaces::manifest(locked.conn(), task.chat_id)
        .await
        .map_err(store_error)?;
    let storage = chatd_store::files::storage(
        locked.conn(),
        chat.owner_id,
        task.ctx.config.limits.max_storage_bytes,
    )
    .await
    .map_err(store_error)?;
    locked.finish().await?;
    let mut manifest = Manifest::new();
    for row in rows {
        let Ok(sha256) = <[u8; 32]>::try_from(row.sha256.as_slice()) else {
            continue;
        };
        let kind = match row.kind {
            workspaces::EntryKind::File => EntryKind::File,
            workspaces::EntryKind::Dir => EntryKind::Dir,
            workspaces::EntryKind::Symlink => EntryKind::Symlink,
        };
        manifest.insert(
            row.path,
            Entry {
                kind,
                sha256,
                bytes: u64::try_from(row.bytes).unwrap_or(0),
                executable: row.executable,
            },
        );
    }
    let committed_bytes = i64::try_from(LocalWorkspace::total_bytes(&manifest)).unwrap_or(i64::MAX);
    let max = task.ctx.workspaces.config().max_bytes;
    let quota_room = storage.map_or(max, |s| {
        s.quota
            .saturating_sub(s.used)
            .saturating_add(committed_bytes)
    });
    Ok(Committed {
        manifest,
        room: u64::try_from(max.min(quota_room)).unwrap_or(0),
    })
}

/// Makes the directory equal `target`, taking contents from `known` (by
/// hash) or else from the committed rows. The inner error is a local I/O
/// failure (not retried: the calls fail).
///
/// The directory is only a cache: when it cannot be brought to `target`
/// (a command left paths longer than `PATH_MAX`, or a directory it made
/// unreadable), a fresh one replaces it, `target` is checked out there
/// from scratch, and the old one is removed in the background.
async fn restore(
    task: &TaskContext,
    local: &mut Option<LocalWorkspace>,
    target: &Manifest,
    known: &HashMap<[u8; 32], Vec<u8>>,
) -> TaskResult<std::io::Result<()>> {
    let Err(e) = restore_in_place(task, local, target, known).await? else {
        return Ok(Ok(()));
    };
    tracing::warn!(chat_id = %task.chat_id, error = %short(&e), "the workspace directory cannot be brought back; checking it out afresh");
    let path = task.ctx.workspaces.path_of(task.chat_id);
    let fresh = match blocking(move || LocalWorkspace::open(path)).await {
        Ok(fresh) => fresh,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(old) = local.replace(fresh) {
        let old = old.root().to_path_buf();
        tokio::task::spawn_blocking(move || crate::workspace::remove_dir(&old));
    }
    restore_in_place(task, local, target, known).await
}

/// An I/O error's text, cut to 300 bytes (a path in it may be kilobytes
/// long).
fn short(e: &std::io::Error) -> String {
    let mut text = e.to_string();
    if text.len() > 300 {
        let mut cut = 300;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// [`restore`] in the directory as it is.
async fn restore_in_place(
    task: &TaskContext,
    local: &mut Option<LocalWorkspace>,
    target: &Manifest,
    known: &HashMap<[u8; 32], Vec<u8>>,
) -> TaskResult<std::io::Result<()>> {
    if let Err(e) = local_scan(local).await {
        return Ok(Err(e));
    }
    let missing = match local.as_ref().expect("opened").missing(target) {
        Ok(missing) => missing,
        Err(e) => return Ok(Err(e)),
    };
    let mut contents: HashMap<String, Vec<u8>> = HashMap::new();
    let mut fetch = Vec::new();
    for path in missing {
        match target.get(&path).and_then(|e| known.get(&e.sha256)) {
            Some(content) => {
                contents.insert(path, content.clone());
            }
            None => fetch.push(path),
        }
    }
    if !fetch.is_empty() {
        let rows = task
            .retrying("reading the workspace's files", || {
                let fetch = fetch.clone();
                async move {
                    workspaces::contents(task.ctx.store.pool(), task.chat_id, &fetch)
                        .await
                        .map_err(|e| FenceError::Store(e.into()))
                }
            })
            .await?;
        for (path, _sha, content) in rows {
            contents.insert(path, content);
        }
    }
    let target = target.clone();
    let mut owned = local.take().expect("opened");
    let (back, result) = blocking(move || {
        let result = owned.apply(&target, &contents);
        (owned, result)
    })
    .await;
    *local = Some(back);
    Ok(result)
}

/// Puts the directory back to `before` after a call went past the room.
async fn undo(
    task: &TaskContext,
    local: &mut Option<LocalWorkspace>,
    before: &Manifest,
    written: &HashMap<[u8; 32], Vec<u8>>,
) -> TaskResult<()> {
    if let Err(e) = restore(task, local, before, written).await? {
        // The next step's checkout puts the committed state back anyway;
        // this step's changes are then read as they are.
        tracing::warn!(chat_id = %task.chat_id, error = %e, "cannot undo a workspace call");
    }
    Ok(())
}

/// Runs one call on the checked-out directory.
async fn run_one(
    task: &TaskContext,
    root: std::path::PathBuf,
    call: &WorkspaceCall,
    before: Option<&Manifest>,
    room: u64,
) -> ToolOutcome {
    let host = &task.ctx.workspaces;
    let read_max = host.config().read_max_bytes;
    match call.clone() {
        WorkspaceCall::Shell { command, timeout_s } => match host.sandbox().await {
            Ok(sandbox) => {
                let outcome = sandbox
                    .shell_bounded(
                        &root,
                        &command,
                        Duration::from_secs(timeout_s),
                        Some(running_bound(before, room, host.config().max_entries)),
                    )
                    .await;
                ToolOutcome {
                    is_error: outcome.exit_code.is_none() && outcome.limit.is_none(),
                    result: outcome.to_json(),
                }
            }
            Err(reason) => ToolOutcome::error(format!(
                "The sandbox is not available on this replica: {reason}"
            )),
        },
        WorkspaceCall::ReadFile { path } => file_outcome(
            blocking(move || {
                ws::read_file(&root, &path, read_max).map(|r| {
                    let mut value = json!(r);
                    if r.binary {
                        value["message"] = json!(format!(
                            "A binary file of {} bytes: its content is not shown; inspect it with shell (for example `xxd FILE | head`).",
                            r.bytes
                        ));
                    }
                    value
                })
            })
            .await,
        ),
        WorkspaceCall::WriteFile { path, content } => {
            // Refused before writing when it cannot fit.
            if let Some(before) = before {
                let total = LocalWorkspace::total_bytes(before);
                let old = ws::check_path(&path)
                    .ok()
                    .and_then(|p| before.get(&p))
                    .map_or(0, |e| e.bytes);
                let after = total - old.min(total) + content.len() as u64;
                if after > room && after > total {
                    return ToolOutcome::error(format!(
                        "Not written: the workspace would hold {after} bytes, more than the {room} bytes it may hold."
                    ));
                }
            }
            let max_file = u64::try_from(host.config().max_bytes).unwrap_or(0);
            file_outcome(
                blocking(move || {
                    let bytes = content.len();
                    ws::write_file(&root, &path, content.as_bytes(), max_file).map(
                        |()| json!({"path": ws::check_path(&path).unwrap_or(path), "bytes": bytes}),
                    )
                })
                .await,
            )
        }
        WorkspaceCall::ListFiles { path } => file_outcome(
            blocking(move || ws::list_files(&root, path.as_deref()).map(|l| json!(l))).await,
        ),
    }
}

/// The least slack a running command has past the workspace's room.
const RUNNING_SLACK_BYTES: u64 = 16 << 20;

/// What the directory may hold while a `shell` command runs: one more
/// room's worth (at least [`RUNNING_SLACK_BYTES`]) and one more
/// `max_entries` past the larger of the room and what it holds now, so a
/// command may make temporary files beyond the room and delete them before
/// it ends (the check after the call holds it to the room), but a loop of
/// writes cannot fill the replica's disk: past the bound the sandbox is
/// killed.
fn running_bound(before: Option<&Manifest>, room: u64, max_entries: usize) -> ws::DirBound {
    let (bytes, entries) = before.map_or((0, 0), |m| (LocalWorkspace::total_bytes(m), m.len()));
    ws::DirBound {
        bytes: bytes
            .max(room)
            .saturating_add(room.max(RUNNING_SLACK_BYTES)),
        entries: entries.max(max_entries).saturating_add(max_entries),
    }
}

fn file_outcome(result: Result<Value, ToolError>) -> ToolOutcome {
    match result {
        Ok(result) => ToolOutcome {
            result,
            is_error: false,
        },
        Err(e) => ToolOutcome::error(e.0),
    }
}

/// The result of a call undone because the workspace went past its entry
/// limit.
fn over_entries(outcome: ToolOutcome, entries: usize, max: usize) -> ToolOutcome {
    let message = format!(
        "The workspace grew to {entries} entries (files, directories and symlinks), more than the {max} it may hold, so this call's changes were undone."
    );
    let mut result = outcome.result;
    match &mut result {
        Value::Object(map) => {
            map.insert("message".into(), json!(with_earlier(map, &message)));
            map.insert("limit".into(), json!("workspace_entries"));
        }
        other => *other = json!({"error": message}),
    }
    ToolOutcome {
        result,
        is_error: true,
    }
}

/// The result of a call undone because the workspace went past its room.
fn over_room(outcome: ToolOutcome, total: u64, room: u64, max_bytes: i64) -> ToolOutcome {
    let why = if i64::try_from(room).unwrap_or(i64::MAX) < max_bytes {
        "what the owner's storage quota leaves"
    } else {
        "the workspace's limit (--max-workspace-bytes)"
    };
    let message = format!(
        "The workspace grew to {total} bytes, more than the {room} bytes it may hold ({why}), so this call's changes were undone."
    );
    let mut result = outcome.result;
    match &mut result {
        Value::Object(map) => {
            map.insert("message".into(), json!(with_earlier(map, &message)));
            map.insert("limit".into(), json!("workspace_bytes"));
        }
        other => *other = json!({"error": message}),
    }
    ToolOutcome {
        result,
        is_error: true,
    }
}

/// That `count` entries were left out of the workspace because their
/// names are not UTF-8 (`names`: the first few, lossily decoded): they are
/// deleted at the next checkout.
fn unkept_notice(count: usize, names: &[String]) -> String {
    let shown = listed(count, names);
    if count == 1 {
        format!(
            "1 entry has a name that is not UTF-8 ({shown}, each bad byte shown as U+FFFD) and is not kept in the workspace: rename it to keep it."
        )
    } else {
        format!(
            "{count} entries have names that are not UTF-8 ({shown}, each bad byte shown as U+FFFD) and are not kept in the workspace: rename them to keep them."
        )
    }
}

/// That `count` FIFOs, sockets or devices (`paths`: the first few) are not
/// kept: a workspace holds files, directories and symlinks only.
fn special_notice(count: usize, paths: &[String]) -> String {
    let shown = listed(count, paths);
    format!(
        "{count} FIFO, socket or device entr{} ({shown}) {} not kept in the workspace: it keeps files, directories and symlinks only.",
        if count == 1 { "y" } else { "ies" },
        if count == 1 { "is" } else { "are" }
    )
}

/// The first few of `count` names, quoted and joined, `…` when there are
/// more.
fn listed(count: usize, names: &[String]) -> String {
    let mut shown: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    if count > names.len() {
        shown.push("…".to_owned());
    }
    shown.join(", ")
}

/// `outcome` with `message` added to its result's message (an object
/// result; another is left as it is).
fn with_notice(outcome: ToolOutcome, message: &str) -> ToolOutcome {
    let mut result = outcome.result;
    if let Value::Object(map) = &mut result {
        map.insert("message".into(), json!(with_earlier(map, message)));
    }
    ToolOutcome {
        result,
        is_error: outcome.is_error,
    }
}

/// `message` after the result's own (a sandbox kill says why it was
/// killed, this says what became of its changes).
fn with_earlier(result: &serde_json::Map<String, Value>, message: &str) -> String {
    match result.get("message").and_then(Value::as_str) {
        Some(earlier) if !earlier.is_empty() => format!("{earlier} {message}"),
        _ => message.to_owned(),
    }
}

fn sanitize(outcome: &mut ToolOutcome) {
    chatd_core::sanitize::json(&mut outcome.result);
}

/// `before` with `changes` applied (entries only).
fn apply_to(before: &Manifest, changes: &[Change]) -> Manifest {
    let mut after = before.clone();
    for change in changes {
        match change {
            Change::Put { path, entry, .. } => {
                after.insert(path.clone(), entry.clone());
            }
            Change::Delete { path } => {
                after.remove(path);
            }
        }
    }
    after
}

fn to_store(change: Change) -> WorkspaceChange {
    match change {
        Change::Put {
            path,
            entry,
            content,
        } => WorkspaceChange::Put {
            path,
            kind: match entry.kind {
                EntryKind::File => workspaces::EntryKind::File,
                EntryKind::Dir => workspaces::EntryKind::Dir,
                EntryKind::Symlink => workspaces::EntryKind::Symlink,
            },
            content,
            sha256: entry.sha256.to_vec(),
            executable: entry.executable,
        },
        Change::Delete { path } => WorkspaceChange::Delete { path },
    }
}

async fn local_scan(local: &mut Option<LocalWorkspace>) -> std::io::Result<Manifest> {
    let mut owned = local.take().expect("opened");
    let (back, result) = blocking(move || {
        let result = owned.scan();
        (owned, result)
    })
    .await;
    *local = Some(back);
    result
}

async fn local_diff(
    local: &mut Option<LocalWorkspace>,
    base: &Manifest,
) -> std::io::Result<Vec<Change>> {
    let mut owned = local.take().expect("opened");
    let base = base.clone();
    let (back, result) = blocking(move || {
        let result = owned.diff(&base);
        (owned, result)
    })
    .await;
    *local = Some(back);
    result
}

/// Runs file-system work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("workspace file-system work panicked")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_parse_with_defaults_and_bad_arguments_are_results_for_the_model() {
        assert_eq!(
            parse("shell", r#"{"command":"ls"}"#, 600),
            Ok(WorkspaceCall::Shell {
                command: "ls".into(),
                timeout_s: DEFAULT_TIMEOUT_S
            })
        );
        assert!(
            parse("shell", r#"{"command":"ls","timeout_s":601}"#, 600)
                .unwrap_err()
                .contains("timeout_s")
        );
        assert!(parse("shell", r#"{"command":"  "}"#, 600).is_err());
        assert!(parse("write_file", r#"{"path":"a"}"#, 600).is_err());
        assert_eq!(
            parse("list_files", "", 600),
            Ok(WorkspaceCall::ListFiles { path: None })
        );
        assert_eq!(
            parse("list_files", r#"{"path":"."}"#, 600),
            Ok(WorkspaceCall::ListFiles { path: None })
        );
    }

    #[test]
    fn approval_policies_name_the_calls_that_wait() {
        use crate::workspace::WorkspaceApproval as A;
        assert!(A::Shell.applies_to("shell") && !A::Shell.applies_to("write_file"));
        assert!(A::Always.applies_to("shell") && A::Always.applies_to("write_file"));
        assert!(!A::Always.applies_to("read_file"));
        assert!(!A::Never.applies_to("shell"));
    }

    #[test]
    fn plan_mode_offers_only_the_read_only_tools() {
        let names: Vec<String> = specs(true, 600).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["read_file", "list_files"]);
        assert_eq!(specs(false, 600).len(), 4);
        for name in READ_ONLY_TOOLS {
            assert!(is_workspace_tool(name));
        }
    }
}
