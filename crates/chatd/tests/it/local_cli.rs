//! The local commands, which work on the server's database rather than
//! over HTTP: `chatd user passwd` (the password read from standard input;
//! a terminal is required otherwise), and the refusal of `token create`
//! and `user passwd` to touch a data directory that holds no chatd
//! database (issue 34, problem 8: no second embedded database is ever
//! created; the directory named by `--data-dir`, `CHATD_DATA_DIR` or the
//! default `~/.local/share/chatd` is named in the message and left
//! uncreated). Neither needs the PostgreSQL binaries: the refusal comes
//! first.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use chatd_testkit::TestDatabase;
use tokio::io::AsyncWriteExt as _;

use crate::support::{Chatd, chatd_command, http};

/// How long one local command may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `chatd ARGS` with `envs` set and `stdin` on standard input:
/// (exit code, stdout, stderr).
async fn run(
    args: &[&str],
    envs: &[(&str, &Path)],
    stdin: &str,
) -> anyhow::Result<(Option<i32>, String, String)> {
    let mut command = chatd_command();
    command
        .args(args)
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in envs {
        command.env(key, value);
    }
    let mut child = command.spawn()?;
    let mut input = child.stdin.take().context("no stdin")?;
    input.write_all(stdin.as_bytes()).await?;
    drop(input);
    let output = tokio::time::timeout(TIMEOUT, child.wait_with_output())
        .await
        .with_context(|| format!("chatd {args:?} did not finish in time"))??;
    Ok((
        output.status.code(),
        String::from_utf8(output.stdout)?,
        String::from_utf8(output.stderr)?,
    ))
}

/// One refusal: the arguments, the environment, the data directory the
/// message names and where it says the directory came from.
type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a Path)>, &'a Path, &'a str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_commands_refuse_a_data_directory_without_a_chatd_database_and_create_nothing()
-> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let home = tmp.path().join("home");
    std::fs::create_dir(&home)?;
    let missing = tmp.path().join("missing");
    let missing_arg = missing.to_str().context("utf-8 path")?;
    // A directory that exists but holds no cluster is refused too.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty)?;
    let empty_arg = empty.to_str().context("utf-8 path")?;
    let default_dir = home.join(".local/share/chatd");

    let cases: [Case<'_>; 6] = [
        (
            vec![
                "token",
                "create",
                "--user",
                "bob",
                "--data-dir",
                missing_arg,
            ],
            vec![("HOME", home.as_path())],
            missing.as_path(),
            "from --data-dir",
        ),
        (
            vec!["token", "create", "--user", "bob"],
            vec![
                ("HOME", home.as_path()),
                ("CHATD_DATA_DIR", empty.as_path()),
            ],
            empty.as_path(),
            "from CHATD_DATA_DIR",
        ),
        (
            vec!["token", "create", "--user", "bob"],
            vec![("HOME", home.as_path())],
            default_dir.as_path(),
            "the default, ~/.local/share/chatd",
        ),
        (
            vec![
                "user",
                "passwd",
                "bob",
                "--password-stdin",
                "--data-dir",
                empty_arg,
            ],
            vec![("HOME", home.as_path())],
            empty.as_path(),
            "from --data-dir",
        ),
        (
            vec!["user", "passwd", "bob", "--password-stdin"],
            vec![("HOME", home.as_path())],
            default_dir.as_path(),
            "the default, ~/.local/share/chatd",
        ),
        (
            vec!["user", "passwd", "bob", "--admin", "--password-stdin"],
            vec![
                ("HOME", home.as_path()),
                ("CHATD_DATA_DIR", missing.as_path()),
            ],
            missing.as_path(),
            "from CHATD_DATA_DIR",
        ),
    ];
    for (args, envs, dir, source) in cases {
        let (code, stdout, stderr) = run(&args, &envs, "a long enough password\n").await?;
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}: no token, no confirmation");
        assert!(
            stderr.contains(&format!("no chatd database in {} ({source}", dir.display())),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("nothing was created") && stderr.contains("--postgres-url"),
            "{args:?}: {stderr}"
        );
    }
    assert!(!missing.exists(), "--data-dir was not created");
    assert!(!home.join(".local").exists(), "the default was not created");
    assert_eq!(
        std::fs::read_dir(&empty)?.count(),
        0,
        "nothing was written in the empty directory"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_passwd_sets_a_password_from_stdin_creating_the_user_and_refuses_bad_input()
-> anyhow::Result<()> {
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let url = db.url();

    // A new user, created as an admin, its password on standard input.
    let (code, stdout, stderr) = run(
        &[
            "user",
            "passwd",
            "carol",
            "--admin",
            "--password-stdin",
            "--postgres-url",
            url,
        ],
        &[],
        "correct horse battery\n",
    )
    .await?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "password set for carol\n");
    let (role, hash): (String, Option<String>) =
        sqlx::query_as("SELECT role, password_hash FROM users WHERE username = 'carol'")
            .fetch_one(db.pool())
            .await?;
    assert_eq!(role, "admin");
    let hash = hash.context("a password hash")?;
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(!hash.contains("correct horse"), "only the hash is stored");

    // Without --password-stdin, standard input must be a terminal.
    let (code, _, stderr) = run(
        &["user", "passwd", "carol", "--postgres-url", url],
        &[],
        "correct horse battery\n",
    )
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("not a terminal") && stderr.contains("--password-stdin"),
        "{stderr}"
    );
    // Too short, or empty: refused, nothing changed.
    for input in ["short\n", "\n", ""] {
        let (code, _, stderr) = run(
            &[
                "user",
                "passwd",
                "carol",
                "--password-stdin",
                "--postgres-url",
                url,
            ],
            &[],
            input,
        )
        .await?;
        assert_eq!(code, Some(1), "{input:?}: {stderr}");
        assert!(stderr.contains("password"), "{input:?}: {stderr}");
    }
    let (still,): (Option<String>,) =
        sqlx::query_as("SELECT password_hash FROM users WHERE username = 'carol'")
            .fetch_one(db.pool())
            .await?;
    assert_eq!(still.as_deref(), Some(hash.as_str()), "unchanged");

    // The server signs carol in with it, and not with another.
    let mut server = Chatd::start(&["--postgres-url", url]).await?;
    let sign_in = |password: &'static str| {
        http()
            .post(format!("{}/api/v2/sessions", server.url()))
            .json(&serde_json::json!({"username": "carol", "password": password}))
            .send()
    };
    assert_eq!(sign_in("correct horse battery").await?.status(), 201);
    assert_eq!(sign_in("wrong horse battery").await?.status(), 401);

    // A reset replaces it: the old one no longer signs in.
    let (code, _, stderr) = run(
        &[
            "user",
            "passwd",
            "carol",
            "--password-stdin",
            "--postgres-url",
            url,
        ],
        &[],
        "another good password\r\n",
    )
    .await?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(sign_in("correct horse battery").await?.status(), 401);
    assert_eq!(sign_in("another good password").await?.status(), 201);
    assert_eq!(server.terminate().await?.code(), Some(0));
    Ok(())
}
