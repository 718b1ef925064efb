//! `chatd chat regenerate|branches|switch|fork`, run as processes against a
//! real `chatd serve` with the fake LLM (API.md "Branches, regenerate and
//! fork"): `regenerate` streams only the new answer and keeps the old one
//! on a branch of its own, `branches` prints the tree with the active
//! branch marked and the alternatives numbered, `switch` goes back to the
//! old answer, `fork` copies the active branch into a new chat (its id, or
//! its JSON), and a busy chat or a message that is not an answer is a clear
//! error.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use serde_json::Value;
use tokio::process::Command;

use crate::support::{ADMIN_TOKEN, Chatd, chatd_command};
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

/// `chatd chat ARGS` against `url` with the admin token in `CHATD_TOKEN`.
fn cli(url: &str, args: &[&str]) -> Command {
    let mut command = chatd_command();
    command
        .env_remove("CHATD_LOG")
        .env("CHATD_URL", url)
        .env("CHATD_TOKEN", ADMIN_TOKEN)
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

/// Runs `chatd chat ARGS`, asserts exit 0 and returns standard output.
async fn ok(url: &str, args: &[&str]) -> anyhow::Result<String> {
    let (code, stdout, stderr) = output(cli(url, args)).await?;
    anyhow::ensure!(
        code == Some(0),
        "chatd chat {args:?}: exit {code:?}, stderr: {stderr}"
    );
    Ok(stdout)
}

/// `chatd chat new --title Ideas TEXT`, answered by `answer`: the chat id.
async fn new_chat(setup: &Setup, text: &str, answer: &str) -> anyhow::Result<String> {
    setup.llm.push(Script::text(answer));
    let (code, stdout, stderr) =
        output(cli(&setup.server.url(), &["new", "--title", "Ideas", text])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, format!("{answer}\n"));
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("chat "))
        .with_context(|| format!("no `chat <id>` line in {stderr:?}"))?;
    Ok(id.trim().to_owned())
}

/// `GET /chats/{chat}/messages` (one page): (id, role, text) of each.
async fn messages(server: &Chatd, chat: &str) -> anyhow::Result<Vec<(i64, String, String)>> {
    let page = server
        .get_json(&format!("/api/v2/chats/{chat}/messages"), ADMIN_TOKEN)
        .await?;
    Ok(page["messages"]
        .as_array()
        .context("no messages")?
        .iter()
        .map(|m| {
            let text = m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["text"].as_str())
                .collect();
            (
                m["id"].as_i64().unwrap_or(0),
                m["role"].as_str().unwrap_or_default().to_owned(),
                text,
            )
        })
        .collect())
}

async fn chat_json(server: &Chatd, chat: &str) -> anyhow::Result<Value> {
    server
        .get_json(&format!("/api/v2/chats/{chat}"), ADMIN_TOKEN)
        .await
}

async fn wait_status(server: &Chatd, chat: &str, want: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = chat_json(server, chat).await?["status"].clone();
        if status == want {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out waiting for {want}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regenerate_streams_the_new_answer_and_branches_and_switch_keep_and_restore_the_old()
-> anyhow::Result<()> {
    let setup = setup().await?;
    let url = setup.server.url();
    let chat = new_chat(&setup, "name a colour", "red").await?;
    let before = messages(&setup.server, &chat).await?;
    let [(question, _, _), (red, _, _)] = before.as_slice() else {
        anyhow::bail!("two messages: {before:?}");
    };
    let (question, red) = (*question, *red);

    // Regenerate the last answer (the default): only the new one streams.
    setup.llm.push(Script::text_in_parts(
        "blue, or green",
        3,
        Duration::from_millis(30),
    ));
    let (code, stdout, stderr) = output(cli(&url, &["regenerate", &chat])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "blue, or green\n", "stderr: {stderr}");
    assert_eq!(stderr.trim(), format!("regenerating (message {red})"));
    let after = messages(&setup.server, &chat).await?;
    let [(q, _, _), (blue, role, text)] = after.as_slice() else {
        anyhow::bail!("the active branch is the question and the new answer: {after:?}");
    };
    assert_eq!(
        (*q, role.as_str(), text.as_str()),
        (question, "assistant", "blue, or green")
    );
    let blue = *blue;
    assert!(blue > red);
    let request = setup
        .llm
        .requests()
        .into_iter()
        .rfind(|r| !chatd_testkit::fake_llm::is_title_request(r))
        .context("the model was asked")?;
    assert_eq!(request.last_user_text().as_deref(), Some("name a colour"));

    // The tree: both answers, the new one active.
    let tree = ok(&url, &["branches", &chat]).await?;
    assert_eq!(
        tree,
        format!(
            "* {question} user: name a colour\n\
             \x20   {red} assistant [1/2]: red\n\
             *   {blue} assistant [2/2]: blue, or green\n"
        )
    );
    let json: Value = serde_json::from_str(&ok(&url, &["branches", "--json", &chat]).await?)?;
    let nodes = json["nodes"].as_array().context("nodes")?;
    let ids: Vec<i64> = nodes.iter().filter_map(|n| n["id"].as_i64()).collect();
    assert_eq!(ids, [question, red, blue]);
    assert_eq!(nodes[1]["active"], false);
    assert_eq!(nodes[2]["parent_id"], question);

    // Back to the old answer: switch prints the new active leaf.
    assert_eq!(
        ok(&url, &["switch", &chat, &red.to_string()]).await?,
        format!("{red}\n")
    );
    let restored = messages(&setup.server, &chat).await?;
    assert_eq!(
        restored.iter().map(|m| m.0).collect::<Vec<_>>(),
        [question, red]
    );
    assert_eq!(
        chat_json(&setup.server, &chat).await?["active_leaf_id"],
        red
    );
    let tree = ok(&url, &["branches", &chat]).await?;
    assert_eq!(
        tree,
        format!(
            "* {question} user: name a colour\n\
             *   {red} assistant [1/2]: red\n\
             \x20   {blue} assistant [2/2]: blue, or green\n"
        )
    );

    // An explicit message, without waiting: the chat runs the new answer.
    setup.llm.push(Script::text("yellow"));
    let (code, stdout, stderr) = output(cli(
        &url,
        &["regenerate", "--no-watch", &chat, &red.to_string()],
    ))
    .await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "");
    wait_status(&setup.server, &chat, "waiting").await?;
    let last = messages(&setup.server, &chat).await?;
    assert_eq!(last.last().map(|m| m.2.as_str()), Some("yellow"));
    let tree = ok(&url, &["branches", &chat]).await?;
    assert!(
        tree.contains(&format!("    {red} assistant [1/3]: red\n"))
            && tree.contains(&format!("    {blue} assistant [2/3]: blue, or green\n"))
            && tree.ends_with("assistant [3/3]: yellow\n")
            && tree.lines().last().is_some_and(|l| l.starts_with("*   ")),
        "{tree}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_prints_the_new_chat_or_its_json_and_copies_the_branch_up_to_the_message()
-> anyhow::Result<()> {
    let setup = setup().await?;
    let url = setup.server.url();
    let chat = new_chat(&setup, "first question", "first answer").await?;
    setup.llm.push(Script::text("second answer"));
    let (code, stdout, stderr) = output(cli(&url, &["send", &chat, "second question"])).await?;
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), "second answer\n"),
        "stderr: {stderr}"
    );
    let history = messages(&setup.server, &chat).await?;
    assert_eq!(history.len(), 4, "{history:?}");
    let first_answer = history[1].0;

    // The whole branch (the default).
    let (code, stdout, stderr) = output(cli(&url, &["fork", &chat])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let whole: uuid::Uuid = stdout.trim().parse().context("the new chat's id")?;
    assert_ne!(whole.to_string(), chat);
    assert!(
        stderr.contains(&format!("forked {chat} up to message {}", history[3].0))
            && stderr.contains("Fork of Ideas"),
        "stderr: {stderr}"
    );
    let copy = messages(&setup.server, &whole.to_string()).await?;
    let texts = |m: &[(i64, String, String)]| m.iter().map(|m| m.2.clone()).collect::<Vec<_>>();
    assert_eq!(texts(&copy), texts(&history));
    let forked = chat_json(&setup.server, &whole.to_string()).await?;
    assert_eq!(forked["title"], "Fork of Ideas");
    assert_eq!(forked["status"], "waiting");
    assert_eq!(forked["forked_from"]["chat_id"], chat.as_str());

    // Up to the first answer, as the API's JSON.
    let (code, stdout, stderr) = output(cli(
        &url,
        &["fork", "--json", &chat, &first_answer.to_string()],
    ))
    .await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let part: Value = serde_json::from_str(&stdout).context("fork --json prints a Chat")?;
    assert_eq!(part["forked_from"]["message_id"], first_answer);
    let id = part["id"].as_str().context("the Chat's id")?;
    let copy = messages(&setup.server, id).await?;
    assert_eq!(texts(&copy), texts(&history[..2]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_chat_or_a_message_that_is_not_an_answer_is_refused_clearly() -> anyhow::Result<()> {
    let setup = setup().await?;
    let url = setup.server.url();
    let chat = new_chat(&setup, "hello", "hi").await?;
    let history = messages(&setup.server, &chat).await?;
    let (question, answer) = (history[0].0, history[1].0);

    // A user message is not an answer: 400, exit 1.
    let (code, stdout, stderr) =
        output(cli(&url, &["regenerate", &chat, &question.to_string()])).await?;
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "stderr: {stderr}");
    assert!(stderr.contains("HTTP 400"), "stderr: {stderr}");

    // While a turn runs: regenerate and switch are 409s.
    setup.llm.push(Script::new().then_text("slow").hang());
    let (code, _, stderr) = output(cli(&url, &["send", "--no-watch", &chat, "more"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    wait_status(&setup.server, &chat, "running").await?;
    for args in [
        ["regenerate", &chat, &answer.to_string()],
        ["switch", &chat, &answer.to_string()],
    ] {
        let (code, stdout, stderr) = output(cli(&url, &args)).await?;
        assert_eq!((code, stdout.as_str()), (Some(1), ""), "{args:?}: {stderr}");
        assert!(stderr.contains("HTTP 409"), "{args:?}: {stderr}");
    }
    let (code, _, stderr) = output(cli(&url, &["interrupt", &chat])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    wait_status(&setup.server, &chat, "waiting").await?;

    // Bad usage: exit 2.
    let (code, _, stderr) = output(cli(&url, &["switch", &chat])).await?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    let (code, _, stderr) = output(cli(&url, &["regenerate", &chat, "not-a-number"])).await?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    Ok(())
}
