//! `chatd usage` and `chatd token list|revoke`, run as processes against a
//! real `chatd serve` with the fake LLM (API.md "Limits, budgets and the
//! token lifecycle"): the usage of the month against the budgets an admin
//! set, as text and as the API's JSON, for oneself and (admins) for a user
//! named by id or username; a member asking for another user's is refused;
//! tokens are listed without their value and revoked, after which they
//! answer `401`; a second revoke is a `404`, and bad arguments are usage
//! errors.

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

/// `chatd ARGS` against `url` with `token` in `CHATD_TOKEN`.
fn cli(url: &str, token: &str, args: &[&str]) -> Command {
    let mut command = chatd_command();
    command
        .env_remove("CHATD_LOG")
        .env("CHATD_URL", url)
        .env("CHATD_TOKEN", token)
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

/// `method path` with `token` and an optional JSON body: (status, body).
async fn call(
    server: &Chatd,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    let mut request = http()
        .request(method, format!("{}/api/v2{path}", server.url()))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// A member named `name` and a token of theirs named `token_name`:
/// (user id, token).
async fn member(server: &Chatd, name: &str, token_name: &str) -> anyhow::Result<(String, String)> {
    let (status, user) = call(
        server,
        ADMIN_TOKEN,
        reqwest::Method::POST,
        "/users",
        Some(json!({"username": name, "role": "member"})),
    )
    .await?;
    anyhow::ensure!(status == 201, "POST /users: {status} {user}");
    let id = user["id"].as_str().context("no user id")?.to_owned();
    let token = new_token(server, ADMIN_TOKEN, &id, token_name).await?.1;
    Ok((id, token))
}

/// A new token of user `user` named `name`: (token id, token).
async fn new_token(
    server: &Chatd,
    as_token: &str,
    user: &str,
    name: &str,
) -> anyhow::Result<(String, String)> {
    let (status, body) = call(
        server,
        as_token,
        reqwest::Method::POST,
        &format!("/users/{user}/tokens"),
        Some(json!({"name": name})),
    )
    .await?;
    anyhow::ensure!(status == 201, "POST tokens: {status} {body}");
    Ok((
        body["id"].as_str().context("no token id")?.to_owned(),
        body["token"].as_str().context("no token")?.to_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_prints_the_months_figures_against_the_budgets_as_text_and_json() -> anyhow::Result<()>
{
    let setup = setup().await?;
    let server = &setup.server;
    let url = server.url();
    let (alice, token) = member(server, "alice", "cli").await?;
    let (status, patched) = call(
        server,
        ADMIN_TOKEN,
        reqwest::Method::PATCH,
        &format!("/users/{alice}"),
        Some(json!({"limits": {"monthly_budget_micros": 5_000_000, "monthly_token_budget": 1000}})),
    )
    .await?;
    assert_eq!(status, 200, "{patched}");

    // One model call of 10 input and 5 output tokens (a given title: no
    // title request).
    setup.llm.push(Script::text("hello").usage(10, 5));
    let (status, chat) = call(
        server,
        &token,
        reqwest::Method::POST,
        "/chats",
        Some(json!({"title": "counted", "content": [{"type": "text", "text": "hi"}]})),
    )
    .await?;
    assert_eq!(status, 201, "{chat}");
    let chat_id = chat["id"].as_str().context("no chat id")?.to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, now) = call(
            server,
            &token,
            reqwest::Method::GET,
            &format!("/chats/{chat_id}"),
            None,
        )
        .await?;
        if now["status"] == "waiting" {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the turn did not end: {now}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // --json: the API's object.
    let (code, stdout, stderr) = output(cli(&url, &token, &["usage", "--json"])).await?;
    assert_eq!(code, Some(0), "{stderr}");
    let printed: Value = serde_json::from_str(stdout.trim())?;
    let (_, api) = call(
        server,
        &token,
        reqwest::Method::GET,
        "/users/me/usage",
        None,
    )
    .await?;
    assert_eq!(printed, api);
    assert_eq!(printed["input_tokens"], 10);
    assert_eq!(printed["output_tokens"], 5);
    assert_eq!(printed["limits"]["monthly_token_budget"], 1000);
    let limits = &printed["limits"];
    let period_start = printed["period_start"]
        .as_str()
        .context("no period_start")?;
    let period_end = printed["period_end"].as_str().context("no period_end")?;

    // Text: one line per figure against its limit.
    let (code, text, stderr) = output(cli(&url, &token, &["usage"])).await?;
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "period         {} to {} (UTC; the budgets reset at {} {} UTC)",
            &period_start[..10],
            &period_end[..10],
            &period_end[..10],
            &period_end[11..16]
        )
    );
    assert_eq!(lines[1], "spend          $0.00 of $5.00 (0%)");
    assert_eq!(lines[2], "tokens         15 of 1,000 (1%; 10 in, 5 out)");
    assert_eq!(
        lines[3],
        format!("running chats  0 of {}", limits["max_running_chats"])
    );
    assert!(lines[4].starts_with("storage        0 B of "), "{text}");
    assert!(lines[5].starts_with("request rate   at most "), "{text}");
    assert_eq!(lines.len(), 6, "{text}");

    // An admin asks for alice's, by username and by id.
    for user in ["alice", alice.as_str()] {
        let (code, stdout, stderr) =
            output(cli(&url, ADMIN_TOKEN, &["usage", "--user", user])).await?;
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(stdout, text);
    }
    // A used-up budget is named.
    let (status, _) = call(
        server,
        ADMIN_TOKEN,
        reqwest::Method::PATCH,
        &format!("/users/{alice}"),
        Some(json!({"limits": {"monthly_token_budget": 15}})),
    )
    .await?;
    assert_eq!(status, 200);
    let (_, stdout, _) = output(cli(&url, &token, &["usage"])).await?;
    assert!(
        stdout.contains("tokens         15 of 15 (100%; 10 in, 5 out)\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with(&format!(
            "the monthly token budget is used up: new turns are refused until {} {} UTC \
             (an admin can raise it)\n",
            &period_end[..10],
            &period_end[11..16]
        )),
        "{stdout}"
    );

    // A member may not read another user's usage.
    let (_, me) = call(server, ADMIN_TOKEN, reqwest::Method::GET, "/users/me", None).await?;
    let admin_id = me["id"].as_str().context("no id")?;
    let (code, stdout, stderr) = output(cli(&url, &token, &["usage", "--user", admin_id])).await?;
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stderr.starts_with("chatd: "), "{stderr}");
    assert!(stderr.contains("HTTP 403"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_list_shows_tokens_without_their_value_and_revoke_makes_one_answer_401()
-> anyhow::Result<()> {
    let setup = setup().await?;
    let server = &setup.server;
    let url = server.url();
    let (bob, first) = member(server, "bob", "first").await?;
    let (laptop_id, laptop) = new_token(server, &first, "me", "laptop").await?;

    // --json: the API's array, never a token.
    let (code, stdout, stderr) = output(cli(&url, &first, &["token", "list", "--json"])).await?;
    assert_eq!(code, Some(0), "{stderr}");
    let listed: Vec<Value> = serde_json::from_str(stdout.trim())?;
    let mut names: Vec<&str> = listed.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["first", "laptop"]);
    assert!(
        !stdout.contains(&first) && !stdout.contains(&laptop),
        "{stdout}"
    );
    assert!(listed.iter().all(|t| t.get("token").is_none()), "{stdout}");

    // Text: a header, then one line per token.
    let (code, text, stderr) = output(cli(&url, &first, &["token", "list"])).await?;
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("ID ") && lines[0].ends_with("LAST USED             NAME"),
        "{text}"
    );
    let laptop_line = lines
        .iter()
        .find(|l| l.starts_with(&laptop_id))
        .with_context(|| format!("no line of {laptop_id} in {text}"))?;
    // A member's token expires; this one was never used.
    assert!(
        laptop_line.ends_with("  never                 laptop"),
        "{text}"
    );
    assert_eq!(laptop_line.matches("never").count(), 1, "{text}");

    // Revoke: 401 at once, and gone from the list.
    let (code, stdout, stderr) =
        output(cli(&url, &first, &["token", "revoke", &laptop_id])).await?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, format!("revoked token {laptop_id}\n"));
    let (status, _) = call(server, &laptop, reqwest::Method::GET, "/users/me", None).await?;
    assert_eq!(status, 401);
    let (_, stdout, _) = output(cli(&url, &first, &["token", "list"])).await?;
    assert!(!stdout.contains(&laptop_id), "{stdout}");
    // A second revoke: 404.
    let (code, _, stderr) = output(cli(&url, &first, &["token", "revoke", &laptop_id])).await?;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("HTTP 404"), "{stderr}");

    // An admin lists and revokes bob's tokens, naming him by username or id.
    let (code, stdout, stderr) = output(cli(
        &url,
        ADMIN_TOKEN,
        &["token", "list", "--user", "bob", "--json"],
    ))
    .await?;
    assert_eq!(code, Some(0), "{stderr}");
    let listed: Vec<Value> = serde_json::from_str(stdout.trim())?;
    assert_eq!(listed.len(), 1, "{stdout}");
    assert_eq!(listed[0]["name"], "first");
    let first_id = listed[0]["id"].as_str().context("no id")?.to_owned();
    let (code, _, stderr) = output(cli(
        &url,
        ADMIN_TOKEN,
        &["token", "revoke", &first_id, "--user", &bob],
    ))
    .await?;
    assert_eq!(code, Some(0), "{stderr}");
    let (status, _) = call(server, &first, reqwest::Method::GET, "/users/me", None).await?;
    assert_eq!(status, 401);

    // Bad usage: not a token id (exit 2); no token at all (exit 1).
    let (code, _, stderr) = output(cli(&url, ADMIN_TOKEN, &["token", "revoke", "nope"])).await?;
    assert_eq!(code, Some(2), "{stderr}");
    let mut command = cli(&url, ADMIN_TOKEN, &["token", "list"]);
    command.env_remove("CHATD_TOKEN");
    let (code, _, stderr) = output(command).await?;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no API token"), "{stderr}");
    Ok(())
}
