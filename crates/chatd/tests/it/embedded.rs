//! `chatd serve` without `--postgres-url`: the embedded PostgreSQL in a
//! temporary data directory (issue 3, "Starting `chatd serve` with no
//! `--postgres-url`").

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    ADMIN_TOKEN, Chatd, PostmasterGuard, create_token, eventually, http, postmaster_pid,
    process_alive, reachable_tempdir, run_chatd,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_postgres_url_runs_an_embedded_cluster_that_keeps_chats_across_restarts()
-> anyhow::Result<()> {
    let tmp = reachable_tempdir()?;
    let data_dir = tmp.path().join("data");
    let data_arg = data_dir.to_str().expect("utf-8 path");
    let pgdata = data_dir.join("postgres");
    let _guard = PostmasterGuard(&pgdata);
    let client = http();

    // First start: initdb, start, migrate, serve.
    let mut server = Chatd::start(&["--data-dir", data_arg]).await?;
    assert_eq!(
        server
            .log()
            .iter()
            .filter(|l| l.contains("listening on http://"))
            .count(),
        1,
        "exactly one `listening on` line"
    );
    let ready = client
        .get(format!("{}/readyz", server.url()))
        .send()
        .await?;
    assert_eq!(ready.status(), 200);
    let created = client
        .post(format!("{}/api/v2/chats", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"content": [{"type": "text", "text": "hi"}]}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    let chat: Value = created.json().await?;
    let chat_id = chat["id"].as_str().expect("chat id").to_owned();
    assert_eq!(chat["status"], "running");

    let pid = postmaster_pid(&pgdata).expect("postmaster.pid while serving");
    assert!(process_alive(pid));

    // A token created while the server runs goes through its cluster.
    let bob = create_token("bob", false, &["--data-dir", data_arg]).await?;
    let me = server.get_json("/api/v2/users/me", &bob).await?;
    assert_eq!(me["username"], "bob");
    assert_eq!(
        postmaster_pid(&pgdata),
        Some(pid),
        "still the server's cluster"
    );

    // A second server on the same data directory is refused.
    let (status, _, stderr) = run_chatd(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", data_arg],
        Duration::from_secs(60),
    )
    .await?;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another chatd process is using the data directory"),
        "{stderr}"
    );

    // SIGTERM: exit 0, and the embedded PostgreSQL is stopped.
    let status = server.terminate().await?;
    assert_eq!(status.code(), Some(0), "log:\n{}", server.log().join("\n"));
    assert!(!pgdata.join("postmaster.pid").exists());
    assert!(
        eventually(Duration::from_secs(10), || !process_alive(pid)).await,
        "postmaster {pid} still running"
    );

    // With no server running, `token create` starts the cluster and stops it.
    let carol = create_token("carol", false, &["--data-dir", data_arg]).await?;
    assert!(
        !pgdata.join("postmaster.pid").exists(),
        "token create stopped the cluster"
    );

    // Second start: the same cluster, the same chat, carol's token works.
    let mut server = Chatd::start(&["--data-dir", data_arg]).await?;
    assert!(
        !server.log().iter().any(|l| l.contains("initialising")),
        "the cluster is reused, not initialised again"
    );
    let fetched = server
        .get_json(&format!("/api/v2/chats/{chat_id}"), ADMIN_TOKEN)
        .await?;
    assert_eq!(fetched["id"], chat_id.as_str());
    let me = server.get_json("/api/v2/users/me", &carol).await?;
    assert_eq!(me["username"], "carol");

    let status = server.terminate().await?;
    assert_eq!(status.code(), Some(0));
    assert!(!pgdata.join("postmaster.pid").exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_recovers_the_embedded_cluster_after_a_crash() -> anyhow::Result<()> {
    let tmp = reachable_tempdir()?;
    let data_dir = tmp.path().join("data");
    let data_arg = data_dir.to_str().expect("utf-8 path");
    let pgdata = data_dir.join("postgres");
    let _guard = PostmasterGuard(&pgdata);

    let mut server = Chatd::start(&["--data-dir", data_arg]).await?;
    let first_pid = postmaster_pid(&pgdata).expect("postmaster.pid");
    // Crash chatd, then its PostgreSQL: a stale postmaster.pid and socket
    // lock file stay behind.
    server.kill().await?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first_pid),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let real_pgdata = std::fs::canonicalize(&pgdata)?;
    assert!(
        eventually(Duration::from_secs(30), || processes_in(&real_pgdata) == 0).await,
        "the killed server's processes did not exit"
    );
    assert!(pgdata.join("postmaster.pid").exists());

    let mut server = Chatd::start(&["--data-dir", data_arg]).await?;
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("stale postmaster.pid")),
        "{}",
        server.log().join("\n")
    );
    let ready = http()
        .get(format!("{}/readyz", server.url()))
        .send()
        .await?;
    assert_eq!(ready.status(), 200);
    let second_pid = postmaster_pid(&pgdata).expect("postmaster.pid");
    assert_ne!(second_pid, first_pid);

    let status = server.terminate().await?;
    assert_eq!(status.code(), Some(0));
    assert!(!pgdata.join("postmaster.pid").exists());
    Ok(())
}

/// How many live processes have `dir` as their working directory (a
/// PostgreSQL server's processes work in its data directory).
fn processes_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            process_alive(*pid)
                && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_postgresql_binaries_says_how_to_install_them() -> anyhow::Result<()> {
    let tmp = reachable_tempdir()?;
    let empty = tmp.path().join("no-binaries");
    std::fs::create_dir(&empty)?;
    let mut command = crate::support::chatd_command();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("data"))
        .env("CHATD_PG_BINDIR", &empty);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output()).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("apt-get install -y postgresql"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    Ok(())
}
