//! The worker's side of workspaces (API.md "Workspaces and provider-hosted
//! tools"): where each chat's working directory lives on this replica, the
//! sandbox its `shell` calls run in, and the lock that keeps one chat's
//! workspace calls in order.
//!
//! A chat's committed workspace is its `chat_workspace_files` rows. The
//! directory here is a cache of them: before a step's workspace calls run,
//! [`crate::tasks`] makes it equal to the committed rows (fetching only the
//! entries that differ), so a step that was cut off by a crash, a lost fence
//! or an interrupt leaves nothing behind, and a replica that takes a chat
//! over starts from exactly what committed. The directory of a chat goes
//! when its runner ends; the replica's whole directory goes at shutdown, and
//! directories that a replica killed earlier left behind are swept at start
//! (a lock file tells which replicas still run).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chatd_tools::workspace::{LocalWorkspace, Sandbox, SandboxConfig};
use tokio::sync::OnceCell;
use uuid::Uuid;

/// Which workspace calls wait for a person's approval
/// (`--workspace-approval`, API.md "Workspaces and provider-hosted tools").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceApproval {
    /// None.
    Never,
    /// `shell` and `write_file`.
    Always,
    /// Every `shell` call (the default).
    #[default]
    Shell,
}

impl WorkspaceApproval {
    /// The flag's values: `never`, `always`, `shell`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "never" => Some(Self::Never),
            "always" => Some(Self::Always),
            "shell" => Some(Self::Shell),
            _ => None,
        }
    }

    /// Whether a call of the workspace tool `tool` needs approval.
    pub fn applies_to(self, tool: &str) -> bool {
        match self {
            Self::Never => false,
            Self::Shell => tool == "shell",
            Self::Always => tool == "shell" || tool == "write_file",
        }
    }
}

/// Workspace settings of a worker.
#[derive(Debug, Clone)]
pub struct WorkspaceConfig {
    /// Where the replica keeps its chats' directories
    /// (`--workspace-dir`; default `$TMPDIR/chatd-workspaces`): one
    /// directory per replica under it, one per chat under that.
    pub dir: PathBuf,
    /// The most bytes one chat's workspace may hold
    /// (`--max-workspace-bytes`, 64 MiB): file contents and symlink
    /// targets.
    pub max_bytes: i64,
    /// Which calls wait for approval (`--workspace-approval`, `shell`).
    pub approval: WorkspaceApproval,
    /// The sandbox of `shell` calls: bubblewrap, network, limits
    /// (`--workspace-network`, `--workspace-cpu-seconds`,
    /// `--workspace-memory-bytes`, `--workspace-processes`).
    pub sandbox: SandboxConfig,
    /// The longest a `read_file` result gets (256 KiB); the rest is cut,
    /// and the result says so.
    pub read_max_bytes: usize,
    /// The most entries (files, directories, symlinks) one workspace holds
    /// (10,000): empty files cost no bytes, and every entry is a row.
    pub max_entries: usize,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        Self {
            dir: std::env::temp_dir().join("chatd-workspaces"),
            max_bytes: 64 << 20,
            approval: WorkspaceApproval::default(),
            sandbox: SandboxConfig::default(),
            read_max_bytes: 256 << 10,
            max_entries: 10_000,
        }
    }
}

/// A chat's directory on this replica, once opened.
pub(crate) type ChatDir = Arc<tokio::sync::Mutex<Option<LocalWorkspace>>>;

/// The workspaces of this replica's chats.
pub(crate) struct Workspaces {
    config: WorkspaceConfig,
    /// `dir/<worker_id>`.
    root: PathBuf,
    /// Held for the replica's life: tells the start-up sweep of other
    /// replicas that `root` is in use.
    _lock: Mutex<Option<File>>,
    sandbox: OnceCell<Result<Arc<Sandbox>, String>>,
    chats: Mutex<HashMap<Uuid, ChatDir>>,
}

impl Workspaces {
    /// The workspaces of worker `worker_id`: creates `config.dir/<worker_id>`
    /// and sweeps directories left by replicas that are gone. Errors are
    /// logged; a call then fails with a message.
    pub(crate) fn new(config: WorkspaceConfig, worker_id: Uuid) -> Self {
        let root = config.dir.join(worker_id.to_string());
        let lock = match open_root(&config.dir, &root, worker_id) {
            Ok(lock) => Some(lock),
            Err(e) => {
                tracing::warn!(dir = %config.dir.display(), error = %e, "cannot prepare the workspace directory");
                None
            }
        };
        Self {
            config,
            root,
            _lock: Mutex::new(lock),
            sandbox: OnceCell::new(),
            chats: Mutex::new(HashMap::new()),
        }
    }

    /// The settings.
    pub(crate) fn config(&self) -> &WorkspaceConfig {
        &self.config
    }

    /// The sandbox, probed on first use; the reason when it cannot run here
    /// (logged once).
    pub(crate) async fn sandbox(&self) -> Result<Arc<Sandbox>, String> {
        self.sandbox
            .get_or_init(|| async {
                match Sandbox::new(self.config.sandbox.clone()).await {
                    Ok(sandbox) => {
                        if !sandbox.has_cgroups() {
                            tracing::warn!("workspace sandbox: no writable cgroup hierarchy; processes and memory are limited by rlimits only");
                        }
                        Ok(Arc::new(sandbox))
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "workspace sandbox unavailable: shell calls fail");
                        Err(e.to_string())
                    }
                }
            })
            .await
            .clone()
    }

    /// The directory of `chat_id` (opened by the caller under its lock).
    pub(crate) fn chat(&self, chat_id: Uuid) -> ChatDir {
        self.chats
            .lock()
            .expect("workspaces lock")
            .entry(chat_id)
            .or_default()
            .clone()
    }

    /// A new directory for `chat_id`: a name of its own per opening, so a
    /// directory being removed after one runner never meets the next
    /// runner's.
    pub(crate) fn path_of(&self, chat_id: Uuid) -> PathBuf {
        self.root
            .join(format!("{chat_id}.{}", Uuid::new_v4().simple()))
    }

    /// Forgets `chat_id`'s directory and removes it once no call uses it
    /// (its runner ended: the next owner, here or elsewhere, starts from
    /// the committed rows in a directory of its own).
    pub(crate) fn release(&self, chat_id: Uuid) {
        let removed = self.chats.lock().expect("workspaces lock").remove(&chat_id);
        let Some(dir) = removed else { return };
        tokio::spawn(async move {
            let mut slot = dir.lock_owned().await;
            if let Some(local) = slot.take() {
                let path = local.root().to_path_buf();
                let _ = tokio::task::spawn_blocking(move || remove_dir(&path)).await;
            }
        });
    }

    /// Removes this replica's directory (shutdown).
    pub(crate) fn remove_all(&self) {
        self.chats.lock().expect("workspaces lock").clear();
        remove_dir(&self.root);
        let _ = std::fs::remove_file(self.root.with_extension("lock"));
    }
}

/// Removes a workspace directory and everything in it; a failure is
/// logged (the sweep at the next start tries again).
pub(crate) fn remove_dir(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a workspace directory")
        }
    }
}

/// Creates `root` with its lock file `<root>.lock`, locked for the
/// process's life, and removes the directories under `dir` whose lock file
/// nobody holds (replicas that were killed).
///
/// `dir` and `root` are made `0700`: what a sandboxed command leaves in a
/// working copy (a setuid file, a world-writable directory; the sandbox's
/// root is the replica's user) is out of reach of every other local user.
fn open_root(dir: &Path, root: &Path, worker_id: Uuid) -> std::io::Result<File> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let lock_path = root.with_extension("lock");
    let lock = File::create(&lock_path)?;
    lock.lock()?;
    std::fs::create_dir_all(root)?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(id) = name
            .strip_suffix(".lock")
            .and_then(|s| Uuid::parse_str(s).ok())
        else {
            continue;
        };
        if id == worker_id {
            continue;
        }
        let Ok(other) = File::options().write(true).open(entry.path()) else {
            continue;
        };
        if other.try_lock().is_ok() {
            // Nobody holds it: that replica is gone.
            remove_dir(&dir.join(id.to_string()));
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(lock)
}
