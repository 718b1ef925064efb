//! The sandbox of the `shell` tool (API.md "Workspaces and provider-hosted
//! tools"): `sh -c COMMAND` under bubblewrap with `/workspace` (the chat's
//! directory, bind-mounted) the only writable place on disk, `/usr` and a
//! few files of `/etc` read-only (not `/etc/shadow` nor the service's own
//! configuration), a private `/proc`, a private read-only `/dev`, and
//! private in-memory `/tmp` (half the memory limit) and `/dev/shm` (an
//! eighth of it, at most 64 MiB), every namespace
//! unshared (no network unless [`SandboxConfig::network`]), no capabilities,
//! a new session (no TIOCSTI into our terminal), and killed with its parent.
//!
//! Limits, each named in the result when hit ([`Limit`]):
//! - processes and memory: a cgroup per run (v2: `pids.max`, `memory.max`;
//!   v1: the `pids` and `memory` hierarchies), created beneath our own
//!   cgroup, its counters (`pids.events` max, the OOM kill count) read after
//!   the run, removed after it. Without a writable cgroup filesystem (warned
//!   once) RLIMIT_NPROC and RLIMIT_AS stand in, weaker: RLIMIT_NPROC does not
//!   bind root in a user namespace.
//! - CPU time: the cgroup's CPU usage (all processes together) polled every
//!   50 ms, and RLIMIT_CPU per process (SIGXCPU, then SIGKILL a second later).
//! - file size: RLIMIT_FSIZE (the writer gets SIGXFSZ or EFBIG).
//! - output: each of stdout and stderr is kept up to
//!   [`SandboxLimits::output_bytes`] and the rest drained, so the command
//!   never blocks on a full pipe.
//! - the workspace's size while the command runs ([`DirBound`], given per
//!   call by [`Sandbox::shell_bounded`]): the directory is measured (bytes,
//!   entries, and the deleted files the run's processes hold open) at most
//!   every 10 ms, and less often when a measure takes long (at most a tenth
//!   of the wall time goes to it); past the bound the sandbox is killed.
//!   RLIMIT_FSIZE caps one file; this caps many. What a command allocates
//!   between two measures (a tight `fallocate` loop: up to hundreds of
//!   files of the file size limit) can still pass the bound before the
//!   kill: for a hard cap, put `--workspace-dir` on a filesystem of its
//!   own or under a quota.
//! - wall time: the call's timeout, at most [`SandboxLimits::max_timeout`].
//!
//! Rlimits are applied by util-linux `prlimit` wrapped around bwrap (this
//! workspace forbids `unsafe`, so no `pre_exec`). The process joins its
//! cgroups before it execs: it is started as `sh -c 'read _ && exec "$@"'`,
//! and only after we wrote its pid into the cgroups do we write its go line.
//! bwrap exits with its command's status, 128 + the signal when the command
//! was killed by one (checked: SIGXCPU → 152, SIGXFSZ → 153, SIGKILL → 137).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// The limits of one `shell` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLimits {
    /// CPU time of all the call's processes together (the cgroup's usage;
    /// without one, per process). Default 60 s; whole seconds for RLIMIT_CPU
    /// (rounded up, at least 1 s).
    pub cpu_time: Duration,
    /// Memory of the call (cgroup `memory.max`; without one, RLIMIT_AS per
    /// process). Default 512 MiB.
    pub memory_bytes: u64,
    /// Processes and threads alive at once (cgroup `pids.max`; without one,
    /// RLIMIT_NPROC). Default 64.
    pub processes: u64,
    /// The largest file a process may write (RLIMIT_FSIZE). Default 64 MiB.
    pub file_size_bytes: u64,
    /// Bytes kept of each of stdout and stderr. Default 64 KiB.
    pub output_bytes: usize,
    /// The longest timeout a call may ask for (API.md: `timeout_s ≤ 600`).
    pub max_timeout: Duration,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            cpu_time: Duration::from_secs(60),
            memory_bytes: 512 << 20,
            processes: 64,
            file_size_bytes: 64 << 20,
            output_bytes: 64 << 10,
            max_timeout: Duration::from_secs(600),
        }
    }
}

/// How the sandbox is set up; one per replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Whether commands reach the network (the host's; default false: a
    /// network namespace of their own with only loopback).
    pub network: bool,
    /// The limits of each call.
    pub limits: SandboxLimits,
    /// The bubblewrap binary, a path or a name looked up in `PATH` (default
    /// `bwrap`).
    pub bwrap: PathBuf,
    /// Whether to use cgroups when a writable cgroup filesystem exists
    /// (default true); false: rlimits only (RLIMIT_NPROC, RLIMIT_AS and
    /// per-process RLIMIT_CPU), as on a machine without one.
    pub cgroups: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            network: false,
            limits: SandboxLimits::default(),
            bwrap: PathBuf::from("bwrap"),
            cgroups: true,
        }
    }
}

/// Why [`Sandbox::new`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// bubblewrap is not installed (or not at the configured path).
    #[error(
        "bubblewrap ({0}) was not found; install it (Debian: apt-get install -y bubblewrap) or set its path"
    )]
    BwrapMissing(PathBuf),
    /// util-linux `prlimit` is not installed.
    #[error("prlimit (util-linux) was not found in PATH; install util-linux")]
    PrlimitMissing,
    /// The probe (`true` in the sandbox) did not succeed.
    #[error("the sandbox does not work here: running `true` in it gave {0}")]
    Probe(String),
    /// An I/O error while probing.
    #[error("the sandbox probe failed: {0}")]
    Io(#[from] io::Error),
}

/// A limit a `shell` call hit; the names are those of the tool result's
/// `limit` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The call's wall-clock timeout: the sandbox was killed.
    Timeout,
    /// The CPU time limit: the sandbox (or the process) was killed.
    CpuTime,
    /// The memory limit: a process was killed by the OOM killer (or an
    /// allocation failed under RLIMIT_AS).
    Memory,
    /// The process limit: a fork failed.
    Processes,
    /// The file size limit: a write was refused (SIGXFSZ or EFBIG).
    FileSize,
    /// The output limit: stdout or stderr was cut.
    Output,
    /// The workspace's bytes went past the call's [`DirBound`]: the
    /// sandbox was killed.
    WorkspaceBytes,
    /// The workspace's entries went past the call's [`DirBound`]: the
    /// sandbox was killed.
    WorkspaceEntries,
}

impl Limit {
    /// The name in the tool result (`"cpu_time"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Timeout => "timeout",
            Limit::CpuTime => "cpu_time",
            Limit::Memory => "memory",
            Limit::Processes => "processes",
            Limit::FileSize => "file_size",
            Limit::Output => "output",
            Limit::WorkspaceBytes => "workspace_bytes",
            Limit::WorkspaceEntries => "workspace_entries",
        }
    }
}

/// The result of one `shell` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellOutcome {
    /// The command's exit status (128 + n when a signal n killed it);
    /// `None` when the sandbox was killed or did not start.
    pub exit_code: Option<i32>,
    /// The first `output_bytes` of stdout, lossy UTF-8.
    pub stdout: String,
    /// The first `output_bytes` of stderr, lossy UTF-8.
    pub stderr: String,
    /// Whether stdout or stderr was cut.
    pub truncated: bool,
    /// The limit hit, if any: the most specific one when several were
    /// (memory, processes, CPU time, file size, then the workspace's bytes
    /// or entries or the timeout, then output).
    pub limit: Option<Limit>,
    /// One sentence for the model naming the limit hit, or why the sandbox
    /// could not run the command; `None` otherwise.
    pub message: Option<String>,
    /// Wall-clock time of the call.
    pub duration: Duration,
}

impl ShellOutcome {
    /// The tool result: `{"exit_code", "stdout", "stderr", "truncated",
    /// "limit": null | "timeout" | "cpu_time" | "memory" | "processes" |
    /// "file_size" | "output" | "workspace_bytes" | "workspace_entries"}`,
    /// plus `"message"` when there is one.
    pub fn to_json(&self) -> Value {
        let mut value = json!({
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "truncated": self.truncated,
            "limit": self.limit.map(Limit::as_str),
        });
        if let Some(message) = &self.message {
            value["message"] = json!(message);
        }
        value
    }

    fn failed(message: String, started: Instant) -> ShellOutcome {
        ShellOutcome {
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            limit: None,
            message: Some(message),
            duration: started.elapsed(),
        }
    }
}

/// The most a workspace directory may hold while a command runs in it
/// ([`Sandbox::shell_bounded`]); past either, the sandbox is killed and the
/// result names [`Limit::WorkspaceBytes`] or [`Limit::WorkspaceEntries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirBound {
    /// Bytes of the files and symlinks beneath the directory: their
    /// lengths (a sparse file counts its length), plus the blocks a file
    /// holds beyond its length and a 1 MiB slack (`fallocate
    /// --keep-size`); hard links count once per name. With cgroups, the
    /// deleted files the run's processes hold open on the directory's
    /// filesystem count too.
    pub bytes: u64,
    /// Files, directories and symlinks beneath the directory (not itself).
    pub entries: usize,
}

/// Runs `shell` commands in bubblewrap; cheap to share (`&self`), any number
/// of calls at once, each in its own cgroup.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    bwrap: PathBuf,
    prlimit: PathBuf,
    cgroups: Cgroups,
    /// The bwrap arguments before the workspace's bind (fixed per replica).
    base_args: Vec<String>,
    runs: AtomicU64,
}

impl Sandbox {
    /// Finds bwrap and prlimit, detects the cgroup filesystem (warning once
    /// when none is writable), and runs `true` in the sandbox.
    ///
    /// Errors: [`SandboxError::BwrapMissing`], [`SandboxError::PrlimitMissing`],
    /// [`SandboxError::Probe`] when the probe did not exit 0 (its stderr
    /// says why: user namespaces disabled, …).
    pub async fn new(config: SandboxConfig) -> Result<Sandbox, SandboxError> {
        let bwrap = find_binary(&config.bwrap)
            .ok_or_else(|| SandboxError::BwrapMissing(config.bwrap.clone()))?;
        let prlimit = find_binary(Path::new("prlimit")).ok_or(SandboxError::PrlimitMissing)?;
        let cgroups = if config.cgroups {
            Cgroups::detect()
        } else {
            Cgroups::None
        };
        remove_stale_runs(&cgroups.parents(), matches!(cgroups, Cgroups::V2 { .. })).await;
        if config.cgroups && matches!(cgroups, Cgroups::None) {
            static WARN: Once = Once::new();
            WARN.call_once(|| {
                tracing::warn!(
                    "no writable cgroup filesystem: the workspace sandbox limits processes and memory with rlimits only (RLIMIT_NPROC does not bind root in a user namespace)"
                );
            });
        }
        let sized = takes_size(&bwrap).await;
        if !sized {
            tracing::warn!(
                bwrap = %bwrap.display(),
                "this bubblewrap has no --size (0.7 or later has): the sandbox's /tmp and /dev/shm are not bounded but by the memory cgroup"
            );
        }
        let base_args = base_args(&config, sized);
        let sandbox = Sandbox {
            config,
            bwrap,
            prlimit,
            cgroups,
            base_args,
            runs: AtomicU64::new(0),
        };
        let probe_dir = std::env::temp_dir().join(format!(
            "chatd-sandbox-probe-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&probe_dir)?;
        let outcome = sandbox
            .shell(&probe_dir, "true", Duration::from_secs(30))
            .await;
        let _ = std::fs::remove_dir_all(&probe_dir);
        if outcome.exit_code != Some(0) {
            return Err(SandboxError::Probe(format!(
                "exit code {:?}: {}{}",
                outcome.exit_code,
                outcome.stderr.trim(),
                outcome.message.unwrap_or_default()
            )));
        }
        Ok(sandbox)
    }

    /// The configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Whether processes and memory are limited by cgroups (else rlimits).
    pub fn has_cgroups(&self) -> bool {
        !matches!(self.cgroups, Cgroups::None)
    }

    /// Runs `sh -c command` in the sandbox with `/workspace` (its working
    /// directory and `HOME`) bound to `dir`, for at most `timeout` (capped at
    /// [`SandboxLimits::max_timeout`]). Never fails: a sandbox that cannot
    /// start gives an outcome with `exit_code: None` and a `message`.
    pub async fn shell(&self, dir: &Path, command: &str, timeout: Duration) -> ShellOutcome {
        self.shell_bounded(dir, command, timeout, None).await
    }

    /// [`Sandbox::shell`], and the sandbox is killed as soon as `dir` holds
    /// more than `bound` (measured while the command runs; a fast writer
    /// may pass it by what it writes between two measures, 10 ms or more).
    pub async fn shell_bounded(
        &self,
        dir: &Path,
        command: &str,
        timeout: Duration,
        bound: Option<DirBound>,
    ) -> ShellOutcome {
        let started = Instant::now();
        let limits = &self.config.limits;
        let timeout = timeout.min(limits.max_timeout);
        let id = format!(
            "{}-{}-{}",
            std::process::id(),
            self.runs.fetch_add(1, Ordering::Relaxed),
            unique()
        );
        let run = match self.cgroups.create(&id, limits) {
            Ok(run) => run,
            Err(e) => {
                return ShellOutcome::failed(
                    format!("the sandbox could not be set up (cgroup): {e}"),
                    started,
                );
            }
        };
        // A call dropped mid-run (its task was interrupted or cancelled)
        // still kills what is left and removes its cgroups.
        let mut guard = RunGuard(Some(run));
        let outcome = self
            .run(
                guard.0.as_ref().expect("set above"),
                dir,
                command,
                (timeout, bound),
                started,
            )
            .await;
        if let Some(run) = guard.0.take() {
            run.remove().await;
        }
        outcome
    }

    async fn run(
        &self,
        cgroup: &RunCgroup,
        dir: &Path,
        command: &str,
        (timeout, bound): (Duration, Option<DirBound>),
        started: Instant,
    ) -> ShellOutcome {
        let limits = &self.config.limits;
        let cpu_secs = limits.cpu_time.as_secs_f64().ceil().max(1.0) as u64;
        let mut rlimits = vec![
            format!("--cpu={cpu_secs}:{}", cpu_secs + 1),
            format!("--fsize={}", limits.file_size_bytes),
            "--core=0".to_owned(),
        ];
        if !cgroup.limits_processes() {
            rlimits.push(format!("--nproc={}", limits.processes));
        }
        if !cgroup.limits_memory() {
            rlimits.push(format!("--as={}", limits.memory_bytes));
        }
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg("read _ && exec \"$@\"")
            .arg("sh")
            .arg(&self.prlimit)
            .args(&rlimits)
            .arg("--")
            .arg(&self.bwrap)
            .args(&self.base_args)
            .arg("--bind")
            .arg(dir)
            .arg("/workspace")
            // Last, once every mount is in place: the sandbox's own root
            // (a tmpfs holding the mount points and /etc) becomes read-only.
            .args([
                "--remount-ro",
                "/",
                "--chdir",
                "/workspace",
                "sh",
                "-c",
                command,
            ])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                return ShellOutcome::failed(format!("the sandbox did not start: {e}"), started);
            }
        };
        let pid = child.id().unwrap_or(0);
        if let Err(e) = cgroup.join(pid) {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return ShellOutcome::failed(
                format!("the sandbox could not be set up (cgroup): {e}"),
                started,
            );
        }
        // The go line; dropping stdin then gives the command an empty stdin.
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(b"go\n").await;
        }
        let cap = limits.output_bytes;
        let stdout = tokio::spawn(read_capped(child.stdout.take(), cap));
        let stderr = tokio::spawn(read_capped(child.stderr.take(), cap));

        let deadline = started + timeout;
        let mut killed_for = None;
        let mut next_measure = Instant::now() + DIR_MEASURE_EVERY;
        let status = loop {
            let mut step = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            if bound.is_some() {
                step = step.min(next_measure.saturating_duration_since(Instant::now()));
            }
            match tokio::time::timeout(step, child.wait()).await {
                Ok(status) => break status.ok(),
                Err(_) => {
                    if Instant::now() >= deadline {
                        killed_for = Some(Limit::Timeout);
                    } else if cgroup
                        .cpu_usage()
                        .is_some_and(|used| used >= limits.cpu_time)
                    {
                        killed_for = Some(Limit::CpuTime);
                    } else if let Some(bound) = bound
                        && Instant::now() >= next_measure
                    {
                        let measured = Instant::now();
                        let root = dir.to_path_buf();
                        let processes = cgroup.processes();
                        let over = tokio::task::spawn_blocking(move || {
                            over_bound(&root, bound, &processes)
                        })
                        .await
                        .unwrap_or(None);
                        // At most a tenth of the time goes to measuring.
                        next_measure =
                            Instant::now() + (measured.elapsed() * 9).max(DIR_MEASURE_EVERY);
                        killed_for = over;
                    }
                    if killed_for.is_some() {
                        let _ = child.start_kill();
                        cgroup.kill().await;
                        break child.wait().await.ok();
                    }
                }
            }
        };
        // bwrap's death ends the sandbox's pid namespace; what is left in the
        // cgroup (nothing, normally) is killed before the pipes are awaited.
        cgroup.kill().await;
        let (stdout, out_cut) = join_reader(stdout).await;
        let (stderr, err_cut) = join_reader(stderr).await;
        let exit_code = if killed_for.is_some() {
            None
        } else {
            status.and_then(|s| s.code())
        };
        let truncated = out_cut || err_cut;
        let counters = cgroup.counters();
        let stderr = lossy_text(&stderr, err_cut);
        let limit = classify(killed_for, exit_code, &counters, &stderr, truncated);
        ShellOutcome {
            exit_code,
            stdout: lossy_text(&stdout, out_cut),
            stderr,
            truncated,
            limit,
            message: limit.map(|l| message(l, limits, timeout, bound)),
            duration: started.elapsed(),
        }
    }
}

/// Which limit a finished call hit, the most specific first: a fork bomb
/// also runs into its timeout, a memory hog's kill looks like any SIGKILL.
fn classify(
    killed_for: Option<Limit>,
    exit_code: Option<i32>,
    counters: &Counters,
    stderr: &str,
    truncated: bool,
) -> Option<Limit> {
    const SIGXCPU_EXIT: i32 = 128 + 24;
    const SIGXFSZ_EXIT: i32 = 128 + 25;
    let memory = counters.oom_kills > 0
        || (!counters.memory_counted
            && [
                "Cannot allocate memory",
                "memory exhausted",
                "MemoryError",
                "out of memory",
            ]
            .iter()
            .any(|m| stderr.contains(m)));
    if memory {
        Some(Limit::Memory)
    } else if counters.pids_max_hits > 0 {
        Some(Limit::Processes)
    } else if killed_for == Some(Limit::CpuTime) || exit_code == Some(SIGXCPU_EXIT) {
        Some(Limit::CpuTime)
    } else if exit_code == Some(SIGXFSZ_EXIT)
        || stderr.contains("File too large")
        || stderr.contains("File size limit exceeded")
    {
        Some(Limit::FileSize)
    } else if killed_for.is_some() {
        killed_for
    } else if truncated {
        Some(Limit::Output)
    } else {
        None
    }
}

fn message(
    limit: Limit,
    limits: &SandboxLimits,
    timeout: Duration,
    bound: Option<DirBound>,
) -> String {
    match limit {
        Limit::Timeout => format!(
            "The command was killed at its timeout of {} s.",
            timeout.as_secs_f64()
        ),
        Limit::CpuTime => format!(
            "The command was killed: it used up its CPU time limit of {} s.",
            limits.cpu_time.as_secs_f64()
        ),
        Limit::Memory => format!(
            "The command ran out of memory: the sandbox's limit is {} MiB.",
            limits.memory_bytes >> 20
        ),
        Limit::Processes => format!(
            "The command hit the sandbox's limit of {} processes: forks beyond it failed.",
            limits.processes
        ),
        Limit::FileSize => format!(
            "A write was refused: files in the sandbox are limited to {} bytes.",
            limits.file_size_bytes
        ),
        Limit::Output => format!(
            "The output was cut to the first {} bytes of each of stdout and stderr.",
            limits.output_bytes
        ),
        Limit::WorkspaceBytes => format!(
            "The command was killed: the workspace grew past {} bytes, the most it may hold while a command runs.",
            bound.map_or(0, |b| b.bytes)
        ),
        Limit::WorkspaceEntries => format!(
            "The command was killed: the workspace grew past {} entries (files, directories and symlinks), the most it may hold while a command runs, or past what can be measured (a path longer than 4096 bytes, a directory that cannot be read).",
            bound.map_or(0, |b| b.entries)
        ),
    }
}

/// Blocks a file may hold past its length before they count in a
/// [`DirBound`]'s bytes (a filesystem's speculative preallocation).
const PREALLOCATION_SLACK: u64 = 1 << 20;

/// How often a bounded call's directory is measured, at most (less often
/// when a measure takes long: at most a tenth of the time goes to it).
const DIR_MEASURE_EVERY: Duration = Duration::from_millis(10);

/// Which of `bound`'s limits `root` is past, if any; the walk stops as soon
/// as one is. Entries that vanish mid-walk (the command is still writing)
/// are skipped; an entry that cannot be read (a path past `PATH_MAX`, a
/// directory made unreadable) counts as past the entry limit: what cannot
/// be measured cannot be bounded. Files the run's `processes` hold open
/// after deleting them, on the workspace's filesystem, count too (their
/// blocks stay taken until closed, and no walk finds them).
fn over_bound(root: &Path, bound: DirBound, processes: &[i32]) -> Option<Limit> {
    use std::os::unix::fs::MetadataExt as _;
    let size = |meta: &std::fs::Metadata| {
        // Blocks allocated past the length (`fallocate --keep-size`)
        // count too, beyond a slack for a filesystem's own rounding and
        // preallocation.
        let allocated = meta.blocks().saturating_mul(512);
        let hidden = allocated.saturating_sub(meta.len().saturating_add(PREALLOCATION_SLACK));
        meta.len().saturating_add(hidden)
    };
    let mut bytes = 0u64;
    let mut entries = 0usize;
    for item in walkdir::WalkDir::new(root).follow_links(false).min_depth(1) {
        let item = match item {
            Ok(item) => item,
            Err(e) if e.io_error().map(io::Error::kind) == Some(io::ErrorKind::NotFound) => {
                continue;
            }
            Err(_) => return Some(Limit::WorkspaceEntries),
        };
        entries += 1;
        if entries > bound.entries {
            return Some(Limit::WorkspaceEntries);
        }
        if item.file_type().is_dir() {
            continue;
        }
        if let Ok(meta) = item.metadata() {
            bytes = bytes.saturating_add(size(&meta));
            if bytes > bound.bytes {
                return Some(Limit::WorkspaceBytes);
            }
        }
    }
    let device = std::fs::metadata(root).ok()?.dev();
    let mut counted = std::collections::HashSet::new();
    for pid in processes {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            // Follows the descriptor to its file, deleted or not.
            let Ok(meta) = std::fs::metadata(fd.path()) else {
                continue;
            };
            if meta.is_file()
                && meta.nlink() == 0
                && meta.dev() == device
                && counted.insert(meta.ino())
            {
                bytes = bytes.saturating_add(size(&meta));
                if bytes > bound.bytes {
                    return Some(Limit::WorkspaceBytes);
                }
            }
        }
    }
    None
}

/// `bytes` as UTF-8, invalid sequences replaced by U+FFFD; when `cut`, a
/// character split by the cut is dropped rather than replaced.
fn lossy_text(bytes: &[u8], cut: bool) -> String {
    let mut text = String::with_capacity(bytes.len());
    let mut chunks = bytes.utf8_chunks().peekable();
    while let Some(chunk) = chunks.next() {
        text.push_str(chunk.valid());
        let last = chunks.peek().is_none();
        if !(chunk.invalid().is_empty() || last && cut) {
            text.push(char::REPLACEMENT_CHARACTER);
        }
    }
    text
}

/// Reads a pipe to its end, keeping the first `cap` bytes; `true` when more
/// came (and were discarded).
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>, cap: usize) -> (Vec<u8>, bool) {
    let Some(mut pipe) = pipe else {
        return (Vec::new(), false);
    };
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
    (kept, cut)
}

/// The reader's result; a pipe still held open by a process that escaped
/// the kill (there should be none) is given up after 2 s.
async fn join_reader(reader: tokio::task::JoinHandle<(Vec<u8>, bool)>) -> (Vec<u8>, bool) {
    let abort = reader.abort_handle();
    match tokio::time::timeout(Duration::from_secs(2), reader).await {
        Ok(Ok(result)) => result,
        _ => {
            abort.abort();
            (Vec::new(), true)
        }
    }
}

/// The bwrap arguments up to the workspace's bind; `sized`: bwrap takes
/// `--size` (0.7 and later).
fn base_args(config: &SandboxConfig, sized: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "workspace",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    .map(str::to_owned)
    .into();
    if config.network {
        args.push("--share-net".into());
    }
    // /bin, /lib, … as the host has them: merged-/usr symlinks or directories.
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        match std::fs::read_link(&host) {
            Ok(target) => args.extend([
                "--symlink".into(),
                target.to_string_lossy().into_owned(),
                host.display().to_string(),
            ]),
            Err(_) if host.is_dir() => args.extend([
                "--ro-bind".into(),
                host.display().to_string(),
                host.display().to_string(),
            ]),
            Err(_) => {}
        }
    }
    // Only what programs need of /etc: not shadow, not the service's secrets.
    args.extend(["--dir".into(), "/etc".into()]);
    for name in ETC_FILES {
        let path = format!("/etc/{name}");
        args.extend(["--ro-bind-try".into(), path.clone(), path]);
    }
    args.extend(["--proc", "/proc", "--dev", "/dev"].map(str::to_owned));
    // The in-memory filesystems a command may write (`/tmp`, `/dev/shm`)
    // are bounded: without a memory cgroup (rlimits only) nothing else
    // would stop them from filling the host's memory. `/dev` itself (a
    // tmpfs of bwrap's) becomes read-only.
    let limits = &config.limits;
    let tmp = (limits.memory_bytes / 2).max(1 << 20);
    let shm = (limits.memory_bytes / 8).clamp(1 << 20, 64 << 20);
    if sized {
        args.extend(["--size".into(), shm.to_string()]);
    }
    args.extend([
        "--tmpfs".into(),
        "/dev/shm".into(),
        "--remount-ro".into(),
        "/dev".into(),
    ]);
    if sized {
        args.extend(["--size".into(), tmp.to_string()]);
    }
    args.extend(
        [
            "--tmpfs",
            "/tmp",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--setenv",
            "HOME",
            "/workspace",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
        ]
        .map(str::to_owned),
    );
    args
}

/// The entries of the host's `/etc` bound read-only into the sandbox.
const ETC_FILES: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "environment",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "python3",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
];

/// Whether `bwrap --help` lists `--size`.
async fn takes_size(bwrap: &Path) -> bool {
    Command::new(bwrap)
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .await
        .is_ok_and(|o| {
            let text = [o.stdout, o.stderr].concat();
            String::from_utf8_lossy(&text).contains("--size")
        })
}

fn find_binary(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 {
        return is_executable(name).then(|| name.to_owned());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

// ---------------------------------------------------------------- cgroups

/// The cgroup filesystem the sandbox uses, detected once.
#[derive(Debug, Clone)]
enum Cgroups {
    /// The unified hierarchy: runs are created in `parent` (beneath our own
    /// cgroup), whose `cgroup.subtree_control` enables pids and memory.
    V2 { parent: PathBuf },
    /// v1 hierarchies, each the parent of the runs (beneath our own cgroup).
    V1 {
        pids: PathBuf,
        memory: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
    },
    /// No writable cgroup filesystem: rlimits only.
    None,
}

/// The counters read after a run.
#[derive(Debug, Default)]
struct Counters {
    pids_max_hits: u64,
    oom_kills: u64,
    /// Whether `oom_kills` is counted (a memory cgroup exists).
    memory_counted: bool,
}

impl Cgroups {
    fn detect() -> Cgroups {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut v1: Vec<(Vec<String>, PathBuf)> = Vec::new(); // (controllers, our dir)
        let mut v2 = None;
        for line in mounts.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let Some(dash) = fields.iter().position(|f| *f == "-") else {
                continue;
            };
            let (Some(root), Some(mount_point), Some(fstype), Some(options)) = (
                fields.get(3),
                fields.get(4),
                fields.get(dash + 1),
                fields.get(dash + 3),
            ) else {
                continue;
            };
            match *fstype {
                "cgroup2" => {
                    let ours = own.lines().find_map(|l| l.strip_prefix("0::"));
                    if let Some(ours) = ours {
                        v2 = Some(join_cgroup(mount_point, root, ours));
                    }
                }
                "cgroup" => {
                    let controllers: Vec<String> = options.split(',').map(str::to_owned).collect();
                    let ours = own.lines().find_map(|l| {
                        let mut parts = l.splitn(3, ':');
                        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
                        names
                            .split(',')
                            .any(|n| controllers.iter().any(|c| c == n))
                            .then_some(path)
                    });
                    if let Some(ours) = ours {
                        v1.push((controllers, join_cgroup(mount_point, root, ours)));
                    }
                }
                _ => {}
            }
        }
        let find = |name: &str| {
            v1.iter()
                .find(|(c, _)| c.iter().any(|c| c == name))
                .map(|(_, dir)| dir.join("chatd-sandbox"))
        };
        if let Some(pids) = find("pids")
            && writable_parent(&pids)
        {
            let memory = find("memory").filter(|m| writable_parent(m));
            let cpuacct = find("cpuacct").filter(|c| writable_parent(c));
            return Cgroups::V1 {
                pids,
                memory,
                cpuacct,
            };
        }
        if let Some(ours) = v2 {
            let parent = ours.join("chatd-sandbox");
            if writable_parent(&parent) && enable_v2_controllers(&ours, &parent) {
                return Cgroups::V2 { parent };
            }
            let _ = std::fs::remove_dir(&parent);
        }
        Cgroups::None
    }

    /// The directories the runs' cgroups are created in.
    fn parents(&self) -> Vec<PathBuf> {
        match self {
            Cgroups::V2 { parent } => vec![parent.clone()],
            Cgroups::V1 {
                pids,
                memory,
                cpuacct,
            } => std::iter::once(pids)
                .chain(memory)
                .chain(cpuacct)
                .cloned()
                .collect(),
            Cgroups::None => vec![],
        }
    }

    fn create(&self, id: &str, limits: &SandboxLimits) -> io::Result<RunCgroup> {
        let mut run = RunCgroup::default();
        match self {
            Cgroups::None => {}
            Cgroups::V2 { parent } => {
                let dir = make_dir(parent, id, true)?;
                run.v2 = true;
                run.pids = Some(dir.clone());
                run.memory = Some(dir.clone());
                run.cpu = Some(dir.clone());
                run.dirs.push(dir.clone());
                std::fs::write(dir.join("pids.max"), limits.processes.to_string())?;
                std::fs::write(dir.join("memory.max"), limits.memory_bytes.to_string())?;
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            }
            Cgroups::V1 {
                pids,
                memory,
                cpuacct,
            } => {
                let dir = make_dir(pids, id, false)?;
                run.dirs.push(dir.clone());
                std::fs::write(dir.join("pids.max"), limits.processes.to_string())?;
                run.pids = Some(dir);
                if let Some(memory) = memory {
                    let dir = make_dir(memory, id, false)?;
                    run.dirs.push(dir.clone());
                    std::fs::write(
                        dir.join("memory.limit_in_bytes"),
                        limits.memory_bytes.to_string(),
                    )?;
                    // With swap accounting, swap counts too; without, absent.
                    let _ = std::fs::write(
                        dir.join("memory.memsw.limit_in_bytes"),
                        limits.memory_bytes.to_string(),
                    );
                    let _ = std::fs::write(dir.join("memory.swappiness"), "0");
                    run.memory = Some(dir);
                }
                if let Some(cpuacct) = cpuacct {
                    let dir = make_dir(cpuacct, id, false)?;
                    run.dirs.push(dir.clone());
                    run.cpu = Some(dir);
                }
            }
        }
        Ok(run)
    }
}

/// `mount_point` + our cgroup path relative to the mount's root.
fn join_cgroup(mount_point: &str, root: &str, ours: &str) -> PathBuf {
    let rel = ours
        .strip_prefix(root)
        .unwrap_or(ours)
        .trim_start_matches('/');
    Path::new(mount_point).join(rel)
}

/// Creates `parent` (if needed) and checks that a child can be created and
/// removed in it.
fn writable_parent(parent: &Path) -> bool {
    let probe = parent.join(format!("probe-{}-{}", std::process::id(), unique()));
    let ok = std::fs::create_dir_all(&probe).is_ok();
    let _ = std::fs::remove_dir(&probe);
    ok
}

fn enable_v2_controllers(ours: &Path, parent: &Path) -> bool {
    let enable = |dir: &Path| -> io::Result<()> {
        let control = dir.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&control)?;
        for c in ["pids", "memory"] {
            if !enabled.split_whitespace().any(|x| x == c) {
                std::fs::write(&control, format!("+{c}"))?;
            }
        }
        Ok(())
    };
    // Our own cgroup must delegate pids and memory to its children, which a
    // cgroup holding processes (other than the root) refuses with EBUSY: then
    // we move ourselves into a leaf beside the runs' parent and try again.
    if let Err(e) = enable(ours) {
        if e.raw_os_error() != Some(nix::libc::EBUSY) {
            return false;
        }
        let leaf = ours.join("chatd-service");
        let moved = std::fs::create_dir_all(&leaf).and_then(|()| {
            std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
        });
        if moved.is_err() || enable(ours).is_err() {
            return false;
        }
        tracing::info!(cgroup = %leaf.display(), "moved into a leaf cgroup to delegate pids and memory to the workspace sandbox");
    }
    enable(parent).is_ok()
}

fn make_dir(parent: &Path, id: &str, v2: bool) -> io::Result<PathBuf> {
    let dir = parent.join(id);
    let mut attempt = 0;
    loop {
        // The parent may have been removed by another Sandbox's drop.
        if !parent.is_dir() {
            std::fs::create_dir_all(parent)?;
            if v2 {
                std::fs::write(parent.join("cgroup.subtree_control"), "+pids +memory")?;
            }
        }
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempt < 3 => attempt += 1,
            other => return other.map(|()| dir),
        }
    }
}

/// Removes the run cgroups left by processes that are gone (a replica that
/// crashed mid-run): a run's name starts with the pid of its process.
async fn remove_stale_runs(parents: &[PathBuf], v2: bool) {
    for parent in parents {
        let Ok(children) = std::fs::read_dir(parent) else {
            continue;
        };
        for child in children.flatten() {
            let name = child.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if child.path().is_dir() && !Path::new(&format!("/proc/{pid}")).exists() {
                RunCgroup {
                    v2,
                    pids: v2.then(|| child.path()),
                    dirs: vec![child.path()],
                    ..RunCgroup::default()
                }
                .remove()
                .await;
            }
        }
    }
}

/// Removes a run's cgroups when the call is dropped before it could (in a
/// task of the runtime, after killing what is left).
struct RunGuard(Option<RunCgroup>);

impl Drop for RunGuard {
    fn drop(&mut self) {
        if let Some(run) = self.0.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            handle.spawn(run.remove());
        }
    }
}

/// The cgroups of one run (empty without a cgroup filesystem).
#[derive(Debug, Default)]
struct RunCgroup {
    v2: bool,
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    cpu: Option<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl RunCgroup {
    fn limits_processes(&self) -> bool {
        self.pids.is_some()
    }

    fn limits_memory(&self) -> bool {
        self.memory.is_some()
    }

    fn join(&self, pid: u32) -> io::Result<()> {
        for dir in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// The run's processes (every cgroup it is in, deduplicated); none
    /// without cgroups.
    fn processes(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|procs| {
                procs
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// CPU time used by the run's processes so far.
    fn cpu_usage(&self) -> Option<Duration> {
        let dir = self.cpu.as_ref()?;
        if self.v2 {
            let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
            let usec = counter(&stat, "usage_usec")?;
            Some(Duration::from_micros(usec))
        } else {
            let ns = std::fs::read_to_string(dir.join("cpuacct.usage")).ok()?;
            Some(Duration::from_nanos(ns.trim().parse().ok()?))
        }
    }

    fn counters(&self) -> Counters {
        let read = |dir: &Option<PathBuf>, file: &str, key: &str| {
            dir.as_ref()
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
                .and_then(|text| counter(&text, key))
                .unwrap_or(0)
        };
        let oom_file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        Counters {
            pids_max_hits: read(&self.pids, "pids.events", "max"),
            oom_kills: read(&self.memory, oom_file, "oom_kill"),
            memory_counted: self.memory.is_some(),
        }
    }

    /// Kills every process in the run's cgroups, until none is left (or a
    /// bounded number of rounds).
    async fn kill(&self) {
        if self.v2
            && let Some(dir) = &self.pids
        {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        }
        for _ in 0..100 {
            let mut any = false;
            for dir in &self.dirs {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    any = true;
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            if !any {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tracing::warn!(cgroups = ?self.dirs, "sandbox processes survived SIGKILL for 1 s");
    }

    /// Kills what is left and removes the directories (a cgroup whose last
    /// zombie is still being reaped refuses rmdir for a moment: retried).
    async fn remove(self) {
        self.kill().await;
        for dir in &self.dirs {
            for attempt in 0..50 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if attempt == 49 => {
                        tracing::warn!(cgroup = %dir.display(), error = %e, "a sandbox cgroup could not be removed");
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
    }
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines).
fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The parents of the runs' cgroups are removed with the last [`Sandbox`]
/// of the process; the removal fails harmlessly while another one uses them.
impl Drop for Sandbox {
    fn drop(&mut self) {
        for parent in self.cgroups.parents() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}
