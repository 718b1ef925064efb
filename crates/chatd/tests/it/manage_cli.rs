//! `chatd chat rename|archive|unarchive|delete|export|import|search|
//! share|unshare|shares` and `list --shared`, and where `send` says its
//! message went, run as processes against a real `chatd serve` with the
//! fake LLM (issue 34, "CLI"); `chatd user passwd` and the local commands'
//! refusal of a data directory without a chatd database are in
//! `local_cli.rs`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::support::{ADMIN_TOKEN, Chatd, chatd_command, http};
use crate::worker::{fixture, replica_args};

/// How long one CLI command may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

struct Setup {
    server: Chatd,
    llm: FakeLlm,
    _db: TestDatabase,
    _dir: tempfile::TempDir,
}

async fn setup() -> anyhow::Result<Setup> {
    let (db, llm, dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    Ok(Setup {
        server,
        llm,
        _db: db,
        _dir: dir,
    })
}

/// `chatd chat ARGS` against `url` with `token` in `CHATD_TOKEN`; standard
/// input is empty (not a terminal).
fn cli(url: &str, token: &str, args: &[&str]) -> Command {
    let mut command = chatd_command();
    command
        .env_remove("CHATD_LOG")
        .env("CHATD_URL", url)
        .env("CHATD_TOKEN", token)
        .env("NO_COLOR", "1")
        .arg("chat")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `command` to completion: (exit code, stdout, stderr).
async fn output(mut command: Command) -> anyhow::Result<(Option<i32>, String, String)> {
    let output = tokio::time::timeout(CLI_TIMEOUT, command.output())
        .await
        .context("the CLI did not finish in time")??;
    Ok((
        output.status.code(),
        String::from_utf8(output.stdout)?,
        String::from_utf8(output.stderr)?,
    ))
}

/// Runs `chatd chat ARGS` as the admin, asserts exit 0 and returns
/// standard output.
async fn ok(url: &str, args: &[&str]) -> anyhow::Result<String> {
    ok_as(url, ADMIN_TOKEN, args).await
}

/// Runs `chatd chat ARGS` with `token`, asserts exit 0 and returns
/// standard output.
async fn ok_as(url: &str, token: &str, args: &[&str]) -> anyhow::Result<String> {
    let (code, stdout, stderr) = output(cli(url, token, args)).await?;
    anyhow::ensure!(
        code == Some(0),
        "chatd chat {args:?}: exit {code:?}, stderr: {stderr}"
    );
    Ok(stdout)
}

/// `chatd chat new --title TITLE TEXT`, answered by `answer`: the chat id.
async fn new_chat(setup: &Setup, title: &str, text: &str, answer: &str) -> anyhow::Result<String> {
    setup.llm.push(Script::text(answer));
    let (code, stdout, stderr) = output(cli(
        &setup.server.url(),
        ADMIN_TOKEN,
        &["new", "--title", title, text],
    ))
    .await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, format!("{answer}\n"));
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("chat "))
        .with_context(|| format!("no `chat <id>` line in {stderr:?}"))?;
    Ok(id.trim().to_owned())
}

/// `GET path` with `token`: (status, JSON body or null).
async fn get(server: &Chatd, token: &str, path: &str) -> anyhow::Result<(u16, Value)> {
    let response = http()
        .get(format!("{}/api/v2{path}", server.url()))
        .bearer_auth(token)
        .send()
        .await?;
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    Ok((status, body))
}

async fn wait_status(server: &Chatd, chat: &str, want: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, chat_json) = get(server, ADMIN_TOKEN, &format!("/chats/{chat}")).await?;
        if chat_json["status"] == want {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out waiting for {want}: {}",
            chat_json["status"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ids `chatd chat list ARGS` prints, in order.
async fn listed(url: &str, token: &str, args: &[&str]) -> anyhow::Result<Vec<String>> {
    let mut all = vec!["list"];
    all.extend_from_slice(args);
    Ok(ok_as(url, token, &all)
        .await?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

/// A member `name` with a token of their own: (user id, token).
async fn member(server: &Chatd, name: &str) -> anyhow::Result<(String, String)> {
    let response = http()
        .post(format!("{}/api/v2/users", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"username": name, "role": "member"}))
        .send()
        .await?;
    assert_eq!(response.status(), 201, "creating {name}");
    let user: Value = response.json().await?;
    let id = user["id"].as_str().context("user id")?.to_owned();
    let response = http()
        .post(format!("{}/api/v2/users/{id}/tokens", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "cli"}))
        .send()
        .await?;
    assert_eq!(response.status(), 201, "a token for {name}");
    let token: Value = response.json().await?;
    let token = token["token"].as_str().context("token")?.to_owned();
    Ok((id, token))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_archive_unarchive_and_delete_manage_a_chat_and_delete_wants_yes_off_a_terminal()
-> anyhow::Result<()> {
    let setup = setup().await?;
    let url = setup.server.url();
    let chat = new_chat(&setup, "Ideas", "hello", "hi there").await?;
    wait_status(&setup.server, &chat, "waiting").await?;

    let stdout = ok(&url, &["rename", &chat, "Holiday", "plans"]).await?;
    assert_eq!(stdout, format!("renamed {chat}: Holiday plans\n"));
    let (_, chat_json) = get(&setup.server, ADMIN_TOKEN, &format!("/chats/{chat}")).await?;
    assert_eq!(chat_json["title"], "Holiday plans");
    // A title over 200 characters is the server's 400 naming the field.
    let long = "x".repeat(201);
    let (code, _, stderr) = output(cli(&url, ADMIN_TOKEN, &["rename", &chat, &long])).await?;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("HTTP 400") && stderr.contains("title"),
        "{stderr}"
    );

    let stdout = ok(&url, &["archive", &chat]).await?;
    assert_eq!(stdout, format!("archived {chat}: Holiday plans\n"));
    assert!(!listed(&url, ADMIN_TOKEN, &[]).await?.contains(&chat));
    assert_eq!(
        listed(&url, ADMIN_TOKEN, &["--archived"]).await?,
        std::slice::from_ref(&chat)
    );
    let (code, _, stderr) = output(cli(&url, ADMIN_TOKEN, &["archive", &chat])).await?;
    assert_eq!(code, Some(1), "already archived: {stderr}");
    assert!(stderr.contains("HTTP 409"), "{stderr}");
    // An archived chat takes no messages.
    let (code, _, stderr) = output(cli(
        &url,
        ADMIN_TOKEN,
        &["send", "--no-watch", &chat, "more"],
    ))
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("HTTP 400"), "{stderr}");

    let stdout = ok(&url, &["unarchive", &chat]).await?;
    assert_eq!(stdout, format!("unarchived {chat}: Holiday plans\n"));
    assert!(listed(&url, ADMIN_TOKEN, &[]).await?.contains(&chat));
    assert!(listed(&url, ADMIN_TOKEN, &["--archived"]).await?.is_empty());

    // Off a terminal, delete needs --yes; nothing is deleted without it.
    let (code, stdout, stderr) = output(cli(&url, ADMIN_TOKEN, &["delete", &chat])).await?;
    assert_eq!(code, Some(2), "stdout: {stdout} stderr: {stderr}");
    assert!(stderr.contains("pass --yes"), "{stderr}");
    let (status, _) = get(&setup.server, ADMIN_TOKEN, &format!("/chats/{chat}")).await?;
    assert_eq!(status, 200, "still there");

    let stdout = ok(&url, &["delete", "--yes", &chat]).await?;
    assert_eq!(stdout, format!("deleted {chat}: Holiday plans\n"));
    let (status, _) = get(&setup.server, ADMIN_TOKEN, &format!("/chats/{chat}")).await?;
    assert_eq!(status, 404, "deleted");
    let (code, _, stderr) = output(cli(&url, ADMIN_TOKEN, &["delete", "--yes", &chat])).await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("HTTP 404"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_names_the_chat_and_the_messages_place_in_it_or_in_the_queue() -> anyhow::Result<()> {
    let setup = setup().await?;
    let url = setup.server.url();
    let chat = new_chat(&setup, "Count", "one", "answer one").await?;
    wait_status(&setup.server, &chat, "waiting").await?;

    setup.llm.push(Script::text("answer two"));
    let (code, stdout, stderr) = output(cli(&url, ADMIN_TOKEN, &["send", &chat, "two"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "answer two\n");
    let (_, page) = get(
        &setup.server,
        ADMIN_TOKEN,
        &format!("/chats/{chat}/messages"),
    )
    .await?;
    let messages = page["messages"].as_array().context("messages")?;
    let position = messages
        .iter()
        .position(|m| m["content"][0]["text"] == "two")
        .context("the message `two`")?;
    let id = messages[position]["id"].as_i64().context("id")?;
    assert_eq!(
        stderr.lines().next(),
        Some(
            format!(
                "sent to chat {chat}: message {} of the chat (message id {id})",
                position + 1
            )
            .as_str()
        ),
        "stderr: {stderr}"
    );
    assert_eq!(position, 2, "one, answer one, two");

    // A busy chat: the message is queued, and its place in the queue said.
    setup.llm.push(Script::text_in_parts(
        "a slow answer",
        4,
        Duration::from_millis(700),
    ));
    setup.llm.set_default(Script::text("ok"));
    ok(&url, &["send", "--no-watch", &chat, "three"]).await?;
    wait_status(&setup.server, &chat, "running").await?;
    for (text, place) in [("four", 1), ("five", 2)] {
        let (code, _, stderr) =
            output(cli(&url, ADMIN_TOKEN, &["send", "--no-watch", &chat, text])).await?;
        assert_eq!(code, Some(0), "stderr: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "queued in chat {chat} at position {place} of the queue (queued message id "
            )),
            "stderr: {stderr}"
        );
    }
    wait_status(&setup.server, &chat, "waiting").await?;
    Ok(())
}

/// The sharing, search and export routes of API.md "Sign-in, search,
/// sharing and export", through the CLI: a member's chat exported as
/// Markdown and JSON and imported back, found by `search` with its match
/// marked, shared with another member who lists it with `list --shared`
/// and finds it too, until `unshare`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_import_search_and_share_work_through_the_cli() -> anyhow::Result<()> {
    let setup = setup().await?;
    let url = setup.server.url();
    let (_, alice) = member(&setup.server, "alice").await?;
    let (bob_id, bob) = member(&setup.server, "bob").await?;

    setup
        .llm
        .push(Script::text("Pack a <b>warm</b> coat & gloves."));
    let (code, _, stderr) = output(cli(
        &url,
        &alice,
        &["new", "--title", "Trip", "What should I pack for Tromsø?"],
    ))
    .await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let chat = stderr
        .lines()
        .find_map(|l| l.strip_prefix("chat "))
        .context("chat id")?
        .trim()
        .to_owned();
    wait_status(&setup.server, &chat, "waiting").await?;

    // Export: Markdown to standard output, JSON to a file.
    let markdown = ok_as(&url, &alice, &["export", &chat]).await?;
    assert!(markdown.contains("Tromsø"), "{markdown}");
    assert!(markdown.contains("coat & gloves"), "{markdown}");
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("trip.json");
    let file_arg = file.to_str().context("utf-8 path")?;
    let (code, stdout, stderr) = output(cli(
        &url,
        &alice,
        &["export", &chat, "--format", "json", "-o", file_arg],
    ))
    .await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "", "the export went to the file");
    assert!(
        stderr.starts_with(&format!("wrote {file_arg} (")),
        "{stderr}"
    );
    let export: Value = serde_json::from_str(&std::fs::read_to_string(&file)?)?;
    assert!(export.is_object(), "{export}");

    // Import: a new chat of the caller with the same visible history.
    let imported = ok_as(&url, &alice, &["import", file_arg]).await?;
    let imported = imported.trim();
    assert_ne!(imported, chat);
    let texts = |page: &Value| -> Vec<String> {
        page["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| m["content"][0]["text"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    let (_, original) = get(&setup.server, &alice, &format!("/chats/{chat}/messages")).await?;
    let (status, copy) = get(
        &setup.server,
        &alice,
        &format!("/chats/{imported}/messages"),
    )
    .await?;
    assert_eq!(status, 200);
    assert_eq!(texts(&copy), texts(&original));
    // Not JSON: refused before anything is sent.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "not json")?;
    let (code, _, stderr) = output(cli(
        &url,
        &alice,
        &["import", junk.to_str().context("utf-8")?],
    ))
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is not JSON"), "{stderr}");

    // Search: the title, the ids and the snippet, the match marked with
    // stars (not a terminal) and the HTML entities decoded.
    let found = ok_as(&url, &alice, &["search", "gloves", "--limit", "5"]).await?;
    assert!(
        found.contains(&format!("Trip  (chat {chat}, message ")),
        "{found}"
    );
    assert!(found.contains("*gloves*"), "{found}");
    assert!(found.contains("coat &"), "entities decoded: {found}");
    assert!(
        !found.contains("&amp;") && !found.contains("<mark>"),
        "{found}"
    );
    // Bob finds nothing of alice's.
    let (code, stdout, stderr) = output(cli(&url, &bob, &["search", "gloves"])).await?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("no messages match"), "{stderr}");

    // Share with bob by name: he lists it with --shared and finds it.
    let stdout = ok_as(&url, &alice, &["share", &chat, "bob"]).await?;
    assert_eq!(stdout, format!("shared {chat} with bob (user {bob_id})\n"));
    let shares = ok_as(&url, &alice, &["shares", &chat]).await?;
    assert!(shares.starts_with(&format!("{bob_id}  bob  ")), "{shares}");
    assert_eq!(
        listed(&url, &bob, &["--shared"]).await?,
        std::slice::from_ref(&chat)
    );
    assert!(
        !listed(&url, &bob, &[]).await?.contains(&chat),
        "not his own"
    );
    let found = ok_as(&url, &bob, &["search", "gloves"]).await?;
    assert!(found.contains(&chat), "{found}");
    // He reads it but cannot change it.
    let (code, _, stderr) = output(cli(&url, &bob, &["rename", &chat, "Mine"])).await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("HTTP 403"), "{stderr}");
    // Sharing with nobody: the server's refusal.
    let (code, _, stderr) = output(cli(&url, &alice, &["share", &chat, "nobody"])).await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("HTTP 4"), "{stderr}");

    let stdout = ok_as(&url, &alice, &["unshare", &chat, "bob"]).await?;
    assert_eq!(stdout, format!("unshared {chat} with bob\n"));
    let (code, _, stderr) = output(cli(&url, &alice, &["shares", &chat])).await?;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("not shared with anyone"), "{stderr}");
    assert!(listed(&url, &bob, &["--shared"]).await?.is_empty());
    let (status, _) = get(&setup.server, &bob, &format!("/chats/{chat}")).await?;
    assert_eq!(status, 404, "revoked");
    let (code, _, stderr) = output(cli(&url, &alice, &["unshare", &chat, "bob"])).await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("not shared with \"bob\""), "{stderr}");
    Ok(())
}
