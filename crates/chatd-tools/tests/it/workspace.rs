//! The workspace module (API.md "Workspaces and provider-hosted tools";
//! issue 37's escape checks): the bubblewrap sandbox and its limits, the
//! path-safe file tools against symlinks and FIFOs the shell planted, and the
//! manifest's scan, diff and apply. Sandbox tests print a reason and pass
//! when bwrap is missing.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use chatd_tools::workspace::{
    Change, DirBound, Entry, EntryKind, Limit, LocalWorkspace, Manifest, Sandbox, SandboxConfig,
    SandboxLimits, check_path, list_files, read_file, sha256, write_file,
};
use serde_json::json;

/// Small limits, so that each test hits them within a second or two.
fn small_limits() -> SandboxLimits {
    SandboxLimits {
        cpu_time: Duration::from_secs(1),
        memory_bytes: 64 << 20,
        processes: 24,
        file_size_bytes: 1 << 20,
        output_bytes: 4096,
        max_timeout: Duration::from_secs(20),
    }
}

async fn sandbox_with(config: SandboxConfig) -> Option<Sandbox> {
    if !Path::new("/usr/bin/bwrap").exists() && which("bwrap").is_none() {
        println!("skipped: bubblewrap (bwrap) is not installed (apt-get install -y bubblewrap)");
        return None;
    }
    Some(Sandbox::new(config).await.expect("the sandbox starts"))
}

async fn sandbox() -> Option<Sandbox> {
    sandbox_with(SandboxConfig {
        limits: small_limits(),
        ..SandboxConfig::default()
    })
    .await
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.exists())
}

const T: Duration = Duration::from_secs(10);

// ------------------------------------------------------------ the sandbox

#[tokio::test]
async fn shell_returns_exit_code_stdout_stderr_and_writes_into_the_workspace() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb
        .shell(
            ws.path(),
            "pwd; echo $HOME; cat; echo oops >&2; echo data > made.txt; exit 3",
            T,
        )
        .await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.stdout, "/workspace\n/workspace\n");
    assert_eq!(out.stderr, "oops\n");
    assert!(!out.truncated);
    assert_eq!(out.limit, None);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made.txt")).unwrap(),
        "data\n"
    );
    assert_eq!(
        out.to_json(),
        json!({"exit_code": 3, "stdout": "/workspace\n/workspace\n", "stderr": "oops\n",
               "truncated": false, "limit": null})
    );
}

#[tokio::test]
async fn the_system_is_read_only_and_proc_self_root_is_the_sandbox_not_the_host() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb
        .shell(
            ws.path(),
            "ls /proc/self/root/ | tr '\\n' ' '; echo; \
             test -e /proc/self/root/root && echo host-root-visible; \
             test -e /proc/self/root/etc/shadow && echo shadow-visible; \
             cat /proc/self/root/etc/shadow; \
             test -e /proc/1/root/var && echo host-var-visible; \
             hostname; \
             touch /usr/escape 2>/dev/null && echo wrote-usr; \
             touch /proc/self/root/usr/escape 2>/dev/null && echo wrote-usr-via-proc; \
             touch /escape 2>/dev/null && echo wrote-root; \
             touch /etc/escape 2>/dev/null && echo wrote-etc; \
             ln /etc/passwd hard 2>/dev/null && echo hard-linked; \
             mknod dev c 1 3 2>/dev/null && echo made-a-device; \
             touch /proc/self/root/workspace/inside && echo wrote-workspace",
            T,
        )
        .await;
    let mut top: Vec<&str> = out
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    top.sort();
    // Only what the sandbox is made of: no /root, /home, /var, /work, /srv.
    for name in &top {
        assert!(
            [
                "bin",
                "dev",
                "etc",
                "lib",
                "lib64",
                "proc",
                "sbin",
                "tmp",
                "usr",
                "workspace"
            ]
            .contains(name)
                || name.starts_with("lib"),
            "unexpected {name} at the sandbox's root: {top:?}"
        );
    }
    let rest: Vec<&str> = out.stdout.lines().skip(1).collect();
    assert_eq!(rest, ["workspace", "wrote-workspace"], "{out:?}");
    assert!(ws.path().join("inside").exists());
    assert!(!Path::new("/usr/escape").exists() && !Path::new("/escape").exists());
}

#[tokio::test]
async fn the_network_is_unreachable_unless_allowed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!(
        "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo connected-tcp; \
         bash -c 'echo hi > /dev/tcp/127.0.0.1/5432' 2>/dev/null && echo connected-5432; \
         curl -s -m 2 http://127.0.0.1:{port}/ >/dev/null 2>&1; echo curl=$?"
    );
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb.shell(ws.path(), &probe, T).await;
    assert!(!out.stdout.contains("connected"), "{out:?}");
    assert!(!out.stdout.contains("curl=0"), "{out:?}");

    // With the network allowed, the same probe reaches the host's listener.
    let Some(open) = sandbox_with(SandboxConfig {
        network: true,
        limits: small_limits(),
        ..SandboxConfig::default()
    })
    .await
    else {
        return;
    };
    let out = open
        .shell(
            ws.path(),
            &format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo connected-tcp"),
            T,
        )
        .await;
    assert_eq!(out.stdout, "connected-tcp\n", "{out:?}");
}

#[tokio::test]
async fn a_fork_bomb_is_capped_named_processes_and_another_run_still_works() {
    let Some(sb) = sandbox().await else { return };
    if !sb.has_cgroups() {
        println!("skipped: no writable cgroup filesystem; RLIMIT_NPROC cannot cap root");
        return;
    }
    let bomb_ws = tempfile::tempdir().unwrap();
    let other_ws = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (bomb, other) = tokio::join!(
        sb.shell(
            bomb_ws.path(),
            "f() { f | f & }; f; sleep 3",
            Duration::from_secs(2)
        ),
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            sb.shell(other_ws.path(), "echo still-works", T).await
        }
    );
    assert_eq!(bomb.limit, Some(Limit::Processes), "{bomb:?}");
    assert!(bomb.message.as_deref().unwrap().contains("24 processes"));
    assert_eq!(bomb.to_json()["limit"], "processes");
    assert!(started.elapsed() < Duration::from_secs(6));
    assert_eq!(other.exit_code, Some(0), "{other:?}");
    assert_eq!(other.stdout, "still-works\n");
    assert_eq!(other.limit, None);
}

#[tokio::test]
async fn a_10_gib_file_is_capped_at_the_file_size_limit() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb.shell(ws.path(), "head -c 10G /dev/zero > big", T).await;
    assert_eq!(out.limit, Some(Limit::FileSize), "{out:?}");
    assert_eq!(out.exit_code, Some(128 + 25));
    assert_eq!(out.to_json()["limit"], "file_size");
    let size = std::fs::metadata(ws.path().join("big")).unwrap().len();
    assert!(size <= 1 << 20, "{size}");
}

#[tokio::test]
async fn an_output_flood_is_truncated_and_named() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb.shell(ws.path(), "yes", Duration::from_secs(1)).await;
    assert!(out.truncated);
    assert_eq!(out.stdout.len(), 4096);
    assert!(
        matches!(out.limit, Some(Limit::Timeout | Limit::Output)),
        "{out:?}"
    );
    assert_eq!(out.exit_code, None);

    // A flood that ends by itself: the command is not blocked, only cut.
    let out = sb
        .shell(
            ws.path(),
            "head -c 1000000 /dev/zero | tr '\\0' a; echo done >&2",
            T,
        )
        .await;
    assert_eq!(out.exit_code, Some(0));
    assert!(out.truncated);
    assert_eq!(out.stdout, "a".repeat(4096));
    assert_eq!(out.stderr, "done\n");
    assert_eq!(out.limit, Some(Limit::Output));
    assert_eq!(out.to_json()["limit"], "output");

    // A cut through a multi-byte character drops it rather than garbling it.
    let out = sb
        .shell(
            ws.path(),
            "printf 'a'; head -c 3000 /dev/zero | tr '\\0' x | sed 's/x/é/g'",
            T,
        )
        .await;
    assert!(out.truncated);
    assert_eq!(out.stdout, format!("a{}", "é".repeat(2047)), "{out:?}");
    assert!(
        out.to_json()["message"]
            .as_str()
            .unwrap()
            .contains("4096 bytes")
    );
}

#[tokio::test]
async fn a_timeout_kills_the_whole_sandbox() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = sb
        .shell(
            ws.path(),
            "(sleep 1; touch late) & sleep 30",
            Duration::from_millis(500),
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(out.limit, Some(Limit::Timeout), "{out:?}");
    assert_eq!(out.exit_code, None);
    assert_eq!(out.to_json()["limit"], "timeout");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !ws.path().join("late").exists(),
        "a background process survived"
    );
}

#[tokio::test]
async fn a_cpu_burn_is_killed_at_the_cpu_time_limit() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = sb.shell(ws.path(), "while :; do :; done", T).await;
    assert_eq!(out.limit, Some(Limit::CpuTime), "{out:?}");
    assert_eq!(out.to_json()["limit"], "cpu_time");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn memory_beyond_the_limit_is_named_memory() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    // tail keeps the last "line" of a stream without newlines: all of it.
    let out = sb.shell(ws.path(), "head -c 1G /dev/zero | tail", T).await;
    assert_eq!(out.limit, Some(Limit::Memory), "{out:?}");
    assert_eq!(out.to_json()["limit"], "memory");
    assert!(out.message.unwrap().contains("64 MiB"));
}

/// Bytes beneath `dir`: file lengths plus blocks allocated past them.
fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    walk(dir)
        .iter()
        .map(|m| m.len().max(m.blocks() * 512))
        .sum()
}

fn walk(dir: &Path) -> Vec<std::fs::Metadata> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            out.extend(walk(&entry.path()));
        }
        out.push(meta);
    }
    out
}

/// A loop of writes, each file under the file size limit, would fill the
/// disk: the bound kills it within a measure or two of passing it.
#[tokio::test]
async fn a_loop_of_writes_is_killed_at_the_workspace_bound() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let bound = DirBound {
        bytes: 8 << 20,
        entries: 10_000,
    };
    let started = Instant::now();
    let out = sb
        .shell_bounded(
            ws.path(),
            "i=0; while :; do head -c 1000000 /dev/zero > f$i; i=$((i+1)); done",
            T,
            Some(bound),
        )
        .await;
    assert_eq!(out.limit, Some(Limit::WorkspaceBytes), "{out:?}");
    assert_eq!(out.exit_code, None);
    assert_eq!(out.to_json()["limit"], "workspace_bytes");
    assert!(
        out.message.as_deref().unwrap().contains("8388608 bytes"),
        "{out:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let held = dir_bytes(ws.path());
    assert!(held > 8 << 20 && held < 64 << 20, "{held}");
}

#[tokio::test]
async fn a_loop_of_empty_files_is_killed_at_the_entry_bound() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb
        .shell_bounded(
            ws.path(),
            "i=0; while :; do : > e$i; i=$((i+1)); done",
            T,
            Some(DirBound {
                bytes: 1 << 30,
                entries: 300,
            }),
        )
        .await;
    assert_eq!(out.limit, Some(Limit::WorkspaceEntries), "{out:?}");
    assert_eq!(out.to_json()["limit"], "workspace_entries");
    assert!(
        out.message.as_deref().unwrap().contains("300 entries"),
        "{out:?}"
    );
    let entries = walk(ws.path()).len();
    assert!(entries > 300, "{entries}");
}

/// `fallocate --keep-size` takes disk blocks without growing the file, so
/// the file size limit does not see it; the bound counts the blocks.
#[tokio::test]
async fn blocks_allocated_past_a_files_length_count_in_the_bound() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb
        .shell_bounded(
            ws.path(),
            ": > f && fallocate -n -l 100M f && sleep 5",
            T,
            Some(DirBound {
                bytes: 8 << 20,
                entries: 100,
            }),
        )
        .await;
    if out.stderr.contains("fallocate") {
        println!(
            "skipped: this filesystem does not preallocate: {}",
            out.stderr
        );
        return;
    }
    assert_eq!(out.limit, Some(Limit::WorkspaceBytes), "{out:?}");
    assert!(out.duration < Duration::from_secs(4), "{:?}", out.duration);
}

/// A file deleted while a process holds it open keeps its blocks and is
/// in no directory: the bound counts the run's open deleted files on the
/// workspace's filesystem.
#[tokio::test]
async fn deleted_files_held_open_count_in_the_bound() {
    let Some(sb) = sandbox().await else { return };
    if !sb.has_cgroups() {
        println!("skipped: the run's open files are found through its cgroup");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    // Seven descriptors of 1,000,000 bytes each (under the 1 MiB file size
    // limit), their files deleted: 7 MB, in no directory.
    let out = sb
        .shell_bounded(
            ws.path(),
            "for i in 3 4 5 6 7 8 9; do eval \"exec $i>f$i\"; rm f$i; \
             head -c 1000000 /dev/zero >&$i; done; sleep 5",
            T,
            Some(DirBound {
                bytes: 4 << 20,
                entries: 100,
            }),
        )
        .await;
    assert_eq!(out.limit, Some(Limit::WorkspaceBytes), "{out:?}");
    assert!(out.duration < Duration::from_secs(4), "{:?}", out.duration);
    // At most the file of the loop's current turn, not yet deleted when
    // the kill came: the directory itself never held 4 MiB.
    assert!(
        dir_bytes(ws.path()) <= 1_000_000,
        "{}",
        dir_bytes(ws.path())
    );
}

/// What cannot be measured cannot be bounded: a path past PATH_MAX makes
/// the walk fail, and the command is killed there and then. (The shell's
/// `cd` stops near PATH_MAX inside the sandbox; its last `mkdir` already
/// makes the host's path, longer by the directory's own, pass it.)
#[tokio::test]
async fn a_workspace_nested_past_path_max_is_killed_as_unmeasurable() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb
        .shell_bounded(
            ws.path(),
            "d=$(printf 'a%.0s' $(seq 200)); i=0; \
             while [ $i -lt 40 ]; do mkdir $d && cd $d 2>/dev/null || break; i=$((i+1)); done; \
             sleep 5",
            T,
            Some(DirBound {
                bytes: 1 << 30,
                entries: 10_000,
            }),
        )
        .await;
    assert_eq!(out.limit, Some(Limit::WorkspaceEntries), "{out:?}");
    assert!(
        out.message.as_deref().unwrap().contains("cannot be read"),
        "{out:?}"
    );
    assert!(out.duration < Duration::from_secs(4), "{:?}", out.duration);
}

/// Within the bound a command may make temporary files and delete them;
/// the bound only stops it when it passes.
#[tokio::test]
async fn temporary_files_within_the_bound_are_fine() {
    let Some(sb) = sandbox().await else { return };
    let ws = tempfile::tempdir().unwrap();
    let out = sb
        .shell_bounded(
            ws.path(),
            "for i in 1 2 3 4; do head -c 1000000 /dev/zero > t$i; done; sleep 0.3; rm t*; echo kept > out",
            T,
            Some(DirBound {
                bytes: 8 << 20,
                entries: 100,
            }),
        )
        .await;
    assert_eq!((out.exit_code, out.limit), (Some(0), None), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out")).unwrap(),
        "kept\n"
    );
}

/// `/tmp` and `/dev/shm` live in memory: without a memory cgroup nothing
/// but their size would stop a command from filling the host's memory
/// with them. `/dev` itself is read-only; its devices still work.
#[tokio::test]
async fn tmp_and_dev_shm_are_bounded_and_dev_is_read_only() {
    let Some(sb) = rlimit_sandbox().await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    // small_limits: 64 MiB of memory → /tmp 32 MiB, /dev/shm 8 MiB. head
    // writes through a pipe (RLIMIT_FSIZE is 1 MiB per file): many files.
    let out = sb
        .shell(
            ws.path(),
            "for i in $(seq 40); do head -c 1000000 /dev/zero > /tmp/f$i || break; done; \
             du -sk /tmp | cut -f1; \
             for i in $(seq 20); do head -c 1000000 /dev/zero > /dev/shm/f$i || break; done; \
             du -sk /dev/shm | cut -f1; \
             echo x > /dev/new 2>/dev/null && echo wrote-dev; \
             echo ok > /dev/null && echo null-works",
            T,
        )
        .await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    let tmp_kib: u64 = lines[0].parse().unwrap();
    let shm_kib: u64 = lines[1].parse().unwrap();
    assert!(tmp_kib <= 32 * 1024, "/tmp holds {tmp_kib} KiB: {out:?}");
    assert!(tmp_kib >= 30 * 1024, "/tmp was usable: {tmp_kib} KiB");
    assert!(shm_kib <= 8 * 1024, "/dev/shm holds {shm_kib} KiB: {out:?}");
    assert!(shm_kib >= 6 * 1024, "/dev/shm was usable: {shm_kib} KiB");
    assert_eq!(lines[2], "null-works", "{out:?}");
    assert!(out.stderr.contains("No space left on device"), "{out:?}");
}

#[tokio::test]
async fn sandbox_new_fails_clearly_without_bwrap() {
    let err = Sandbox::new(SandboxConfig {
        bwrap: "/nonexistent/bwrap".into(),
        ..SandboxConfig::default()
    })
    .await
    .expect_err("no sandbox without bwrap");
    assert!(err.to_string().contains("bubblewrap"), "{err}");
    assert!(
        err.to_string().contains("apt-get install -y bubblewrap"),
        "{err}"
    );
}

#[tokio::test]
async fn the_timeout_is_capped_at_max_timeout() {
    let Some(sb) = sandbox_with(SandboxConfig {
        limits: SandboxLimits {
            max_timeout: Duration::from_millis(300),
            ..small_limits()
        },
        ..SandboxConfig::default()
    })
    .await
    else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let out = sb
        .shell(ws.path(), "sleep 10", Duration::from_secs(600))
        .await;
    assert_eq!(out.limit, Some(Limit::Timeout));
    assert!(out.duration < Duration::from_secs(3), "{:?}", out.duration);
}

// ------------------------------------------------------------ file tools

#[test]
fn check_path_normalizes_and_refuses_escapes() {
    assert_eq!(check_path("a/./b//c/").unwrap(), "a/b/c");
    assert_eq!(check_path("./x").unwrap(), "x");
    for bad in ["", ".", "/etc/passwd", "../x", "a/../../x", "a/..", "a\0b"] {
        assert!(check_path(bad).is_err(), "{bad:?} accepted");
    }
    assert!(check_path(&"a/".repeat(2049)).is_err());
    assert!(check_path("../x").unwrap_err().to_string().contains(".."));
    assert!(
        check_path("/x")
            .unwrap_err()
            .to_string()
            .contains("absolute")
    );
}

#[test]
fn file_tools_round_trip_and_report_sizes() {
    let ws = tempfile::tempdir().unwrap();
    write_file(ws.path(), "src/deep/main.rs", b"fn main() {}\n", 1024).unwrap();
    write_file(ws.path(), "src/deep/main.rs", b"short\n", 1024).unwrap();
    let read = read_file(ws.path(), "src/deep/main.rs", 100).unwrap();
    assert_eq!(read.content, "short\n");
    assert_eq!((read.bytes, read.truncated), (6, false));
    let cut = read_file(ws.path(), "src/deep/main.rs", 2).unwrap();
    assert_eq!(
        (cut.content.as_str(), cut.bytes, cut.truncated),
        ("sh", 6, true)
    );
    assert!(
        write_file(ws.path(), "big", &[0; 2000], 1024)
            .unwrap_err()
            .to_string()
            .contains("1024")
    );
    assert!(
        read_file(ws.path(), "src", 100)
            .unwrap_err()
            .to_string()
            .contains("directory")
    );
    assert!(
        read_file(ws.path(), "nope", 100)
            .unwrap_err()
            .to_string()
            .contains("does not exist")
    );
    assert!(write_file(ws.path(), "src", b"x", 1024).is_err());
    assert!(write_file(ws.path(), "src/deep/main.rs/x", b"x", 1024).is_err());

    let list = list_files(ws.path(), None).unwrap();
    let got: Vec<(&str, EntryKind, u64)> = list
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.kind, e.bytes))
        .collect();
    assert_eq!(
        got,
        [
            ("src", EntryKind::Dir, 0),
            ("src/deep", EntryKind::Dir, 0),
            ("src/deep/main.rs", EntryKind::File, 6)
        ]
    );
    assert!(!list.truncated);
    let sub = list_files(ws.path(), Some("src/deep")).unwrap();
    assert_eq!(sub.entries[0].path, "src/deep/main.rs");
}

#[test]
fn list_files_stops_at_1000_entries_with_a_flag() {
    let ws = tempfile::tempdir().unwrap();
    for i in 0..1005 {
        std::fs::write(ws.path().join(format!("f{i:04}")), b"").unwrap();
    }
    let list = list_files(ws.path(), None).unwrap();
    assert_eq!(list.entries.len(), 1000);
    assert!(list.truncated);
    assert_eq!(list.entries[999].path, "f0999");
}

#[tokio::test]
async fn symlinks_planted_by_the_shell_cannot_lead_the_file_tools_out() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"host secret").unwrap();
    let setup = format!(
        "ln -s /etc etc_link; ln -s /etc/passwd passwd_link; ln -s ../../../../.. up; \
         ln -s {o} out_dir; ln -s {o}/secret out_file; mkdir d; ln -s ../inside.txt d/ok; \
         echo fine > inside.txt",
        o = outside.path().display()
    );
    match sandbox().await {
        // The shell cannot see `outside`, but its symlinks still name it.
        Some(sb) => {
            let out = sb.shell(ws.path(), &setup, T).await;
            assert_eq!(out.exit_code, Some(0), "{out:?}");
        }
        None => {
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg(&setup)
                .current_dir(ws.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
    }
    let root = ws.path();
    for path in [
        "etc_link/passwd",
        "passwd_link",
        "up/etc/passwd",
        "out_dir/secret",
        "out_file",
    ] {
        let err = read_file(root, path, 1000).unwrap_err();
        assert!(
            err.to_string().contains("outside the workspace"),
            "{path}: {err}"
        );
        let err = write_file(root, path, b"pwned", 1000).unwrap_err();
        assert!(
            err.to_string().contains("outside the workspace"),
            "{path}: {err}"
        );
    }
    for path in ["etc_link", "up", "out_dir"] {
        let err = list_files(root, Some(path)).unwrap_err();
        assert!(
            err.to_string().contains("outside the workspace"),
            "{path}: {err}"
        );
    }
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"host secret"
    );
    assert!(!outside.path().join("x").exists());
    // A symlink that stays inside is followed.
    assert_eq!(read_file(root, "d/ok", 100).unwrap().content, "fine\n");
    // Listing shows symlinks without following them.
    let list = list_files(root, None).unwrap();
    let etc = list.entries.iter().find(|e| e.path == "etc_link").unwrap();
    assert_eq!((etc.kind, etc.bytes), (EntryKind::Symlink, 4));
    assert!(
        list.entries
            .iter()
            .all(|e| !e.path.starts_with("etc_link/"))
    );
}

#[tokio::test]
async fn a_fifo_does_not_block_the_file_tools() {
    let ws = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(ws.path().join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let root = ws.path().to_owned();
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::task::spawn_blocking(move || {
            (
                read_file(&root, "pipe", 100),
                write_file(&root, "pipe", b"x", 100),
                list_files(&root, None),
            )
        }),
    )
    .await
    .expect("the file tools blocked on a FIFO")
    .unwrap();
    assert!(
        result
            .0
            .unwrap_err()
            .to_string()
            .contains("not a regular file")
    );
    assert!(
        result
            .1
            .unwrap_err()
            .to_string()
            .contains("not a regular file")
    );
    assert!(result.2.unwrap().entries.is_empty());
}

// ------------------------------------------------------------ the manifest

fn contents_of(changes: &[Change]) -> HashMap<String, Vec<u8>> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Put { path, content, .. } => Some((path.clone(), content.clone())),
            Change::Delete { .. } => None,
        })
        .collect()
}

fn replay(base: &Manifest, changes: &[Change]) -> Manifest {
    let mut m = base.clone();
    for change in changes {
        match change {
            Change::Put { path, entry, .. } => {
                m.insert(path.clone(), entry.clone());
            }
            Change::Delete { path } => {
                m.remove(path);
            }
        }
    }
    m
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn scan_diff_and_apply_reach_exactly_the_target() {
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let mut a = LocalWorkspace::open(a_dir.path().join("ws")).unwrap();
    let ra = a.root().to_owned();
    std::fs::create_dir_all(ra.join("src/empty")).unwrap();
    std::fs::write(ra.join("src/main.rs"), b"fn main() {}\n").unwrap();
    std::fs::write(ra.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    set_mode(&ra.join("run.sh"), 0o755);
    std::os::unix::fs::symlink("src/main.rs", ra.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc", ra.join("abs")).unwrap();

    let first = a.diff(&Manifest::new()).unwrap();
    let m1 = a.scan().unwrap();
    assert_eq!(replay(&Manifest::new(), &first), m1);
    assert_eq!(m1["src/empty"], Entry::dir());
    assert_eq!(m1["run.sh"], Entry::file(b"#!/bin/sh\necho hi\n", true));
    assert_eq!(m1["link"], Entry::symlink(b"src/main.rs"));
    assert_eq!(m1["abs"].sha256, sha256(b"/etc"));
    assert_eq!(LocalWorkspace::total_bytes(&m1), 13 + 18 + 11 + 4);

    // B starts with junk: an extra file, a directory where a file goes, a
    // file where a directory goes, a FIFO.
    let mut b = LocalWorkspace::open(b_dir.path().join("ws")).unwrap();
    let rb = b.root().to_owned();
    std::fs::create_dir_all(rb.join("run.sh/inner")).unwrap();
    std::fs::write(rb.join("src"), b"not a dir").unwrap();
    std::fs::write(rb.join("extra.txt"), b"extra").unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(rb.join("fifo"))
            .status()
            .unwrap()
            .success()
    );
    b.scan().unwrap();
    assert_eq!(
        b.missing(&m1).unwrap(),
        ["abs", "link", "run.sh", "src/main.rs"]
    );
    b.apply(&m1, &contents_of(&first)).unwrap();
    assert_eq!(b.scan().unwrap(), m1);
    assert!(!rb.join("fifo").exists());
    assert!(b.missing(&m1).unwrap().is_empty());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(rb.join("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::read_link(rb.join("abs")).unwrap(),
        Path::new("/etc")
    );

    // A step: a delete, an edit, an executable bit alone, a new empty dir,
    // a symlink retargeted, a directory removed with its contents.
    std::fs::remove_file(ra.join("link")).unwrap();
    std::os::unix::fs::symlink("run.sh", ra.join("link")).unwrap();
    std::fs::write(ra.join("src/main.rs"), b"fn main() { loop {} }\n").unwrap();
    set_mode(&ra.join("run.sh"), 0o644);
    std::fs::create_dir(ra.join("new")).unwrap();
    std::fs::remove_dir_all(ra.join("src/empty")).unwrap();
    std::fs::remove_file(ra.join("abs")).unwrap();
    let step = a.diff(&m1).unwrap();
    let m2 = a.scan().unwrap();
    assert_eq!(replay(&m1, &step), m2);
    let deletes: Vec<&str> = step
        .iter()
        .filter_map(|c| match c {
            Change::Delete { path } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deletes, ["src/empty", "abs"]);
    b.scan().unwrap();
    // Only the edited file and the retargeted symlink need content.
    assert_eq!(b.missing(&m2).unwrap(), ["link", "src/main.rs"]);
    b.apply(&m2, &contents_of(&step)).unwrap();
    assert_eq!(b.scan().unwrap(), m2);
    assert_eq!(
        std::fs::metadata(rb.join("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o644
    );

    // Back to m1 (a takeover onto an older commit): everything put back.
    b.apply(&m1, &contents_of(&first)).unwrap();
    assert_eq!(b.scan().unwrap(), m1);
    assert!(a.diff(&m2).unwrap().is_empty());
}

#[test]
fn apply_refuses_contents_that_do_not_match_their_sha() {
    let dir = tempfile::tempdir().unwrap();
    let mut ws = LocalWorkspace::open(dir.path().join("ws")).unwrap();
    let target = Manifest::from([("a.txt".to_owned(), Entry::file(b"right", false))]);
    let wrong = HashMap::from([("a.txt".to_owned(), b"wrong".to_vec())]);
    let err = ws.apply(&target, &wrong).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(!ws.root().join("a.txt").exists());
    let err = ws.apply(&target, &HashMap::new()).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn a_same_size_edit_with_the_old_mtime_is_still_seen() {
    let dir = tempfile::tempdir().unwrap();
    let mut ws = LocalWorkspace::open(dir.path().join("ws")).unwrap();
    let file = ws.root().join("f");
    std::fs::write(&file, b"aaaa").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let m1 = ws.scan().unwrap();
    std::fs::write(&file, b"bbbb").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let m2 = ws.scan().unwrap();
    assert_eq!(m1["f"].sha256, sha256(b"aaaa"));
    assert_eq!(m2["f"].sha256, sha256(b"bbbb"));
}

// ------------------------------------------------------------ rlimits only

async fn rlimit_sandbox() -> Option<Sandbox> {
    sandbox_with(SandboxConfig {
        limits: small_limits(),
        cgroups: false,
        ..SandboxConfig::default()
    })
    .await
}

#[tokio::test]
async fn without_cgroups_rlimits_name_cpu_time_memory_and_file_size() {
    let Some(sb) = rlimit_sandbox().await else {
        return;
    };
    assert!(!sb.has_cgroups());
    let ws = tempfile::tempdir().unwrap();
    let cpu = sb.shell(ws.path(), "while :; do :; done", T).await;
    assert_eq!(cpu.limit, Some(Limit::CpuTime), "{cpu:?}");
    assert_eq!(cpu.exit_code, Some(128 + 24));
    let memory = sb.shell(ws.path(), "head -c 1G /dev/zero | tail", T).await;
    assert_eq!(memory.limit, Some(Limit::Memory), "{memory:?}");
    let big = sb.shell(ws.path(), "head -c 10G /dev/zero > big", T).await;
    assert_eq!(big.limit, Some(Limit::FileSize), "{big:?}");
    assert!(std::fs::metadata(ws.path().join("big")).unwrap().len() <= 1 << 20);
    let ok = sb.shell(ws.path(), "echo fine", T).await;
    assert_eq!(
        (ok.exit_code, ok.stdout.as_str(), ok.limit),
        (Some(0), "fine\n", None)
    );
}

/// A checkout makes the directory as a checkout into an empty one would:
/// hard links a command made become files of their own, and odd modes
/// (a directory of mode 000, a file of mode 000 or setuid) become 0o755 /
/// 0o644, so a step runs alike on every replica.
#[test]
fn a_checkout_breaks_hard_links_and_normalizes_modes() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut ws = LocalWorkspace::open(dir.path().join("ws")).unwrap();
    let root = ws.root().to_owned();
    std::fs::write(root.join("a"), b"A").unwrap();
    std::fs::hard_link(root.join("a"), root.join("b")).unwrap();
    std::fs::create_dir(root.join("locked")).unwrap();
    std::fs::write(root.join("locked/s"), b"s").unwrap();
    std::fs::write(root.join("nr"), b"n").unwrap();
    std::fs::write(root.join("suid"), b"x").unwrap();
    set_mode(&root.join("locked"), 0o000);
    set_mode(&root.join("nr"), 0o000);
    set_mode(&root.join("suid"), 0o4755);
    let target = ws.scan().unwrap();
    ws.apply(&target, &HashMap::new()).unwrap();
    let meta = |p: &str| std::fs::symlink_metadata(root.join(p)).unwrap();
    assert_eq!((meta("a").nlink(), meta("b").nlink()), (1, 1));
    assert_ne!(meta("a").ino(), meta("b").ino());
    assert_eq!(meta("locked").mode() & 0o7777, 0o755);
    assert_eq!(meta("nr").mode() & 0o7777, 0o644);
    assert_eq!(meta("suid").mode() & 0o7777, 0o755);
    assert_eq!(std::fs::read(root.join("b")).unwrap(), b"A");
    assert_eq!(std::fs::read(root.join("locked/s")).unwrap(), b"s");
    std::fs::write(root.join("a"), b"changed").unwrap();
    assert_eq!(
        std::fs::read(root.join("b")).unwrap(),
        b"A",
        "no longer linked"
    );
    // The same manifest, and nothing left to normalize.
    std::fs::write(root.join("a"), b"A").unwrap();
    assert_eq!(ws.scan().unwrap(), target);
}

/// Names that are not UTF-8 are not part of the workspace: the scan leaves
/// them out and counts them (so the model can be told), and an apply
/// deletes them.
#[test]
fn names_that_are_not_utf8_are_counted_left_out_and_deleted_by_an_apply() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut ws = LocalWorkspace::open(dir.path().join("ws")).unwrap();
    let root = ws.root().to_owned();
    std::fs::write(root.join("ok.txt"), b"fine").unwrap();
    let bad = std::ffi::OsStr::from_bytes(b"bad\xffname");
    std::fs::write(root.join(bad), b"lost").unwrap();
    std::fs::create_dir(root.join(std::ffi::OsStr::from_bytes(b"dir\xfe"))).unwrap();
    std::fs::write(
        root.join(std::ffi::OsStr::from_bytes(b"dir\xfe"))
            .join("inner"),
        b"x",
    )
    .unwrap();
    let manifest = ws.scan().unwrap();
    assert_eq!(manifest.keys().collect::<Vec<_>>(), ["ok.txt"]);
    let (count, names) = ws.unkept();
    assert_eq!(
        count, 2,
        "the directory counts once, its contents not at all"
    );
    let mut names = names.to_vec();
    names.sort();
    assert_eq!(names, ["bad\u{FFFD}name", "dir\u{FFFD}"]);
    ws.apply(&manifest, &HashMap::new()).unwrap();
    assert!(!root.join(bad).exists());
    assert_eq!(ws.unkept().0, 0);
    assert_eq!(ws.special().0, 0);
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
}

/// FIFOs, sockets and devices are not part of the workspace: the scan
/// counts them (so the model can be told) and an apply deletes them.
#[test]
fn special_files_are_counted_left_out_and_deleted_by_an_apply() {
    let dir = tempfile::tempdir().unwrap();
    let mut ws = LocalWorkspace::open(dir.path().join("ws")).unwrap();
    let root = ws.root().to_owned();
    std::fs::create_dir(root.join("d")).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(root.join("d/sock")).unwrap();
    std::fs::write(root.join("f"), b"x").unwrap();
    let manifest = ws.scan().unwrap();
    assert_eq!(manifest.keys().collect::<Vec<_>>(), ["d", "f"]);
    assert_eq!(ws.special(), (1, &["d/sock".to_owned()][..]));
    ws.apply(&manifest, &HashMap::new()).unwrap();
    assert!(!root.join("d/sock").exists());
    assert_eq!(ws.special().0, 0);
}

/// Checking out a directory that already holds the target touches no file:
/// a chmod to the same mode would still change each file's ctime, and the
/// stat cache would hash the whole workspace again on every step
/// (`bench_workspace`). A changed executable bit alone is still applied.
#[test]
fn applying_the_state_a_directory_already_has_changes_no_file() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut ws = LocalWorkspace::open(dir.path().join("ws")).unwrap();
    let root = ws.root().to_owned();
    std::fs::write(root.join("a.txt"), b"a").unwrap();
    std::fs::write(root.join("run.sh"), b"echo").unwrap();
    set_mode(&root.join("run.sh"), 0o755);
    let target = ws.scan().unwrap();
    let ctime = |p: &str| {
        let m = std::fs::metadata(root.join(p)).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let before = (ctime("a.txt"), ctime("run.sh"));
    std::thread::sleep(Duration::from_millis(20));
    ws.apply(&target, &HashMap::new()).unwrap();
    assert_eq!((ctime("a.txt"), ctime("run.sh")), before);

    let mut flipped = target.clone();
    flipped.get_mut("a.txt").unwrap().executable = true;
    ws.apply(&flipped, &HashMap::new()).unwrap();
    assert_eq!(ws.scan().unwrap(), flipped);
    assert_eq!(ctime("run.sh"), before.1);
}
