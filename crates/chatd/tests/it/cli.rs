//! `chatd chat ...`, the command-line client, run as a process against a
//! real `chatd serve` with the fake LLM: the reply streams to standard
//! output as it is generated and exactly once, a send to a busy chat is
//! queued and its own reply streamed, `interrupt` stops a slow reply that
//! `watch --once` follows, `list` shows chats, token and connection
//! problems are clear errors, an `https://` URL streams over `wss://`
//! through a TLS-terminating proxy (an untrusted certificate fails the
//! first REST call; the `wss://` connection's own check is a unit test of
//! the client), and client-side tools offered with `new --tools` and called
//! by the model exit 3 with the `tool-results` command to run, which sends
//! results and errors and streams the continuation; bad `--tools`,
//! `--result` and `--error` arguments are usage errors; `new --workspace`
//! gives a chat a workspace whose `shell` calls show as `$ COMMAND`, and
//! `files`, `cat` and `download` read it.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, RecordedRequest, Script, is_title_request};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt as _;
use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::support::{ADMIN_TOKEN, Chatd, chatd_command};
use crate::worker::{fixture, replica_args};

/// How long one CLI command may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// A server with the fake LLM as its default model.
struct Setup {
    server: Chatd,
    llm: FakeLlm,
    _db: TestDatabase,
    _dir: tempfile::TempDir,
}

async fn setup() -> anyhow::Result<Setup> {
    let (db, llm, dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "500ms")).await?;
    Ok(Setup {
        server,
        llm,
        _db: db,
        _dir: dir,
    })
}

/// `chatd chat ARGS` against `url` with the admin token in `CHATD_TOKEN`
/// and the client's default log level.
fn cli(url: &str, args: &[&str]) -> Command {
    let mut command = chatd_command();
    command
        .env_remove("CHATD_LOG")
        .env("CHATD_URL", url)
        .env("CHATD_TOKEN", ADMIN_TOKEN)
        .arg("chat")
        .args(args);
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

/// The id in the `chat <id>` line of standard error.
fn chat_id(stderr: &str) -> anyhow::Result<Uuid> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("chat "))
        .with_context(|| format!("no `chat <id>` line in {stderr:?}"))?;
    Ok(line.trim().parse()?)
}

async fn chat_status(server: &Chatd, chat: Uuid) -> anyhow::Result<String> {
    let chat = server
        .get_json(&format!("/api/v2/chats/{chat}"), ADMIN_TOKEN)
        .await?;
    Ok(chat["status"].as_str().unwrap_or_default().to_owned())
}

async fn wait_status(server: &Chatd, chat: Uuid, want: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = chat_status(server, chat).await?;
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

/// A spawned CLI whose standard output is read as it comes.
struct Running {
    child: Child,
    stdout: String,
}

impl Running {
    fn spawn(mut command: Command) -> anyhow::Result<Self> {
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        Ok(Self {
            child: command.spawn()?,
            stdout: String::new(),
        })
    }

    /// Reads standard output until it contains `text`.
    async fn read_until(&mut self, text: &str) -> anyhow::Result<()> {
        let stdout = self.child.stdout.as_mut().context("no stdout")?;
        let deadline = tokio::time::Instant::now() + CLI_TIMEOUT;
        let mut buf = [0u8; 1024];
        while !self.stdout.contains(text) {
            let n = tokio::time::timeout_at(deadline, stdout.read(&mut buf))
                .await
                .with_context(|| format!("no {text:?} on stdout: {:?}", self.stdout))??;
            anyhow::ensure!(n > 0, "stdout closed before {text:?}: {:?}", self.stdout);
            self.stdout.push_str(std::str::from_utf8(&buf[..n])?);
        }
        Ok(())
    }

    /// Waits for the exit: (code, all of stdout, stderr).
    async fn finish(mut self) -> anyhow::Result<(Option<i32>, String, String)> {
        let mut rest = String::new();
        let mut stderr = String::new();
        let mut out = self.child.stdout.take().context("no stdout")?;
        let mut err = self.child.stderr.take().context("no stderr")?;
        let (status, _, _) = tokio::time::timeout(CLI_TIMEOUT, async {
            tokio::join!(
                self.child.wait(),
                out.read_to_string(&mut rest),
                err.read_to_string(&mut stderr)
            )
        })
        .await
        .context("the CLI did not exit in time")?;
        self.stdout.push_str(&rest);
        Ok((status?.code(), self.stdout, stderr))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_new_streams_the_reply_as_it_arrives_once_and_prints_the_chat_id_on_stderr()
-> anyhow::Result<()> {
    let setup = setup().await?;
    // The second half comes only after a pause, so the first half must be
    // on the terminal while the chat is still running.
    setup.llm.push(
        Script::new()
            .then_text("Hello ")
            .delay(Duration::from_millis(50))
            .then_text("from ")
            .delay(Duration::from_secs(2))
            .then_text("the fake ")
            .delay(Duration::from_millis(50))
            .then_text("model."),
    );
    let url = setup.server.url();
    let mut running = Running::spawn(cli(&url, &["new", "hello", "there"]))?;
    running.read_until("Hello from ").await?;
    assert_eq!(running.stdout, "Hello from ", "nothing else yet");
    let (code, stdout, stderr) = running.finish().await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "Hello from the fake model.\n");
    let chat = chat_id(&stderr)?;
    assert_eq!(stderr.trim(), format!("chat {chat}"), "no other noise");
    assert_eq!(chat_status(&setup.server, chat).await?, "waiting");
    let request = setup
        .llm
        .requests()
        .into_iter()
        .find(|r| !chatd_testkit::fake_llm::is_title_request(r))
        .context("the model was asked")?;
    assert_eq!(request.last_user_text().as_deref(), Some("hello there"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_send_to_a_busy_chat_queues_and_streams_the_reply_to_the_queued_message()
-> anyhow::Result<()> {
    let setup = setup().await?;
    setup.llm.push(Script::text_in_parts(
        "first answer",
        3,
        Duration::from_millis(700),
    ));
    setup.llm.push(Script::text_in_parts(
        "second answer",
        3,
        Duration::from_millis(50),
    ));
    let url = setup.server.url();
    let (code, stdout, stderr) = output(cli(&url, &["new", "--no-watch", "first"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "");
    let chat = chat_id(&stderr)?;
    let id = chat.to_string();

    let (code, stdout, stderr) = output(cli(&url, &["send", &id, "second"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert!(
        stderr.starts_with(&format!(
            "queued in chat {id} at position 1 of the queue (queued message id "
        )),
        "stderr: {stderr}"
    );
    assert_eq!(stdout, "second answer\n", "only the queued message's reply");
    assert_eq!(chat_status(&setup.server, chat).await?, "waiting");

    // An idle chat: the message is sent at once.
    setup.llm.push(Script::text("third answer"));
    let (code, stdout, stderr) = output(cli(&url, &["send", &id, "third"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    // first, its answer, second, its answer: the fifth message.
    assert!(
        stderr.starts_with(&format!(
            "sent to chat {id}: message 5 of the chat (message id "
        )),
        "stderr: {stderr}"
    );
    assert_eq!(stdout, "third answer\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_reject_refuses_a_busy_chat_and_queue_list_edit_move_and_send_steer_manage_the_queue()
-> anyhow::Result<()> {
    let setup = setup().await?;
    setup.llm.push(Script::text_in_parts(
        "a slow answer",
        5,
        Duration::from_millis(1500),
    ));
    setup.llm.set_default(Script::text("ok"));
    let url = setup.server.url();
    let (code, _, stderr) = output(cli(&url, &["new", "--no-watch", "first"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let chat = chat_id(&stderr)?;
    let id = chat.to_string();

    let (code, _, stderr) = output(cli(&url, &["send", "--reject", &id, "x"])).await?;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(stderr.contains("status is running"), "stderr: {stderr}");
    let (code, _, stderr) = output(cli(&url, &["send", "--reject", "--steer", &id, "x"])).await?;
    assert_eq!(code, Some(2), "conflicting flags: {stderr}");

    let mut ids = Vec::new();
    for text in ["a", "b"] {
        let (code, _, stderr) = output(cli(&url, &["send", "--no-watch", &id, text])).await?;
        assert_eq!(code, Some(0), "stderr: {stderr}");
        ids.push(
            stderr
                .split("(queued message id ")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .context("queued id")?
                .to_owned(),
        );
    }
    let (a, b) = (&ids[0], &ids[1]);
    let (code, stdout, stderr) = output(cli(&url, &["queue", "list", &id])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, format!("0\t{a}\ta\n1\t{b}\tb\n"));
    let (code, stdout, stderr) = output(cli(&url, &["queue", "move", &id, b, "0"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, format!("0\t{b}\tb\n1\t{a}\ta\n"));
    let (code, stdout, stderr) =
        output(cli(&url, &["queue", "edit", &id, a, "--steer", "fixed"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, format!("1\t{a}\tsteer fixed\n"));
    let (code, _, stderr) = output(cli(&url, &["queue", "edit", &id, a])).await?;
    assert_eq!(code, Some(1), "nothing to change: {stderr}");
    let (code, _, stderr) = output(cli(&url, &["send", "--steer", "--no-watch", &id, "s"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert!(
        stderr.contains("reads it at its next step"),
        "stderr: {stderr}"
    );
    wait_status(&setup.server, chat, "waiting").await?;
    // The steer messages went first, together, as the next turn; then b.
    let requests = model_requests(&setup.llm);
    let users: Vec<String> = requests.iter().filter_map(|r| r.last_user_text()).collect();
    assert_eq!(users, ["first", "s", "b"], "{users:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_interrupt_stops_a_slow_reply_that_watch_once_follows() -> anyhow::Result<()> {
    let setup = setup().await?;
    setup
        .llm
        .push(Script::new().then_text("slow beginning").hang());
    let url = setup.server.url();
    let (code, _, stderr) = output(cli(&url, &["new", "--no-watch", "hello"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let chat = chat_id(&stderr)?;
    let id = chat.to_string();

    let mut watch = Running::spawn(cli(&url, &["watch", "--once", &id]))?;
    watch.read_until("assistant> slow beginning").await?;
    assert_eq!(chat_status(&setup.server, chat).await?, "running");

    let (code, stdout, stderr) = output(cli(&url, &["interrupt", &id])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let printed = stdout.trim();
    assert!(
        printed == "interrupting" || printed == "waiting",
        "the new status: {stdout:?}"
    );
    wait_status(&setup.server, chat, "waiting").await?;

    let (code, stdout, stderr) = watch.finish().await?;
    assert_eq!(
        code,
        Some(0),
        "watch --once ends when idle; stderr: {stderr}"
    );
    assert!(
        stdout.starts_with("user> hello\nassistant> slow beginning"),
        "stdout: {stdout:?}"
    );
    assert!(stderr.contains("[status: waiting]"), "stderr: {stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_list_shows_chats_and_token_or_connection_problems_are_clear_errors()
-> anyhow::Result<()> {
    let setup = setup().await?;
    setup.llm.push(Script::text("listed"));
    let url = setup.server.url();
    let (code, _, stderr) = output(cli(&url, &["new", "--title", "Listed chat", "hello"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let chat = chat_id(&stderr)?;

    let (code, stdout, stderr) = output(cli(&url, &["list"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&chat.to_string()))
        .with_context(|| format!("the chat is listed: {stdout:?}"))?;
    let columns: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(columns[1], "waiting", "{line}");
    assert!(line.ends_with("  Listed chat"), "{line}");

    let (code, stdout, _) = output(cli(&url, &["list", "--json"])).await?;
    assert_eq!(code, Some(0));
    let chats: Vec<Value> = serde_json::from_str(&stdout)?;
    assert!(chats.iter().any(|c| c["id"] == chat.to_string()));

    // No token.
    let mut command = cli(&url, &["list"]);
    command.env_remove("CHATD_TOKEN");
    let (code, stdout, stderr) = output(command).await?;
    assert_eq!(code, Some(1));
    assert_eq!(stdout, "");
    assert!(stderr.contains("no API token"), "stderr: {stderr}");
    assert!(stderr.contains("CHATD_TOKEN"), "stderr: {stderr}");

    // A wrong token, given by flag (it beats the environment).
    let (code, _, stderr) = output(cli(&url, &["list", "--token", "not-a-valid-token"])).await?;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("HTTP 401"), "stderr: {stderr}");
    assert!(stderr.contains("check the API token"), "stderr: {stderr}");

    // No server at the URL: the URL is named.
    let (code, _, stderr) = output(cli("http://127.0.0.1:9", &["list"])).await?;
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("cannot reach the chatd server at http://127.0.0.1:9"),
        "stderr: {stderr}"
    );

    // An unknown chat: the API's message.
    let missing = Uuid::new_v4().to_string();
    let (code, _, stderr) = output(cli(&url, &["send", &missing, "hi"])).await?;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("HTTP 404"), "stderr: {stderr}");
    Ok(())
}

/// The test certificates: `ca.pem` (a test CA) signed `server.pem` for
/// `localhost` and `127.0.0.1`, key `server.key`; valid until 2126.
const TLS_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// A TLS-terminating proxy on `127.0.0.1` in front of `upstream` (as a
/// deployment behind nginx or a load balancer), serving the test
/// certificate. Returns its address; it runs until the test's runtime ends.
async fn tls_proxy(upstream: SocketAddr) -> anyhow::Result<SocketAddr> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(format!("{TLS_FIXTURES}/server.pem"))?
        .collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(format!("{TLS_FIXTURES}/server.key"))?;
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    Ok(addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_url_streams_over_wss_and_an_untrusted_certificate_fails_the_first_request_clearly()
-> anyhow::Result<()> {
    let setup = setup().await?;
    let proxy = tls_proxy(setup.server.addr).await?;
    let url = format!("https://localhost:{}", proxy.port());
    setup.llm.push(
        Script::new()
            .then_text("Hello ")
            .delay(Duration::from_millis(50))
            .then_text("over ")
            .delay(Duration::from_secs(1))
            .then_text("TLS."),
    );
    let trusting = |args: &[&str]| {
        let mut command = cli(&url, args);
        command.env("SSL_CERT_FILE", format!("{TLS_FIXTURES}/ca.pem"));
        command
    };
    // `new` posts over https and follows the reply over wss as it arrives.
    let mut running = Running::spawn(trusting(&["new", "hello"]))?;
    running.read_until("Hello over ").await?;
    assert_eq!(running.stdout, "Hello over ", "streamed before the end");
    let (code, stdout, stderr) = running.finish().await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "Hello over TLS.\n");
    let chat = chat_id(&stderr)?.to_string();
    // `watch --once` replays the conversation over wss.
    let (code, stdout, stderr) = output(trusting(&["watch", "--once", &chat])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert!(stdout.contains("Hello over TLS."), "stdout: {stdout}");

    // Without the test CA the certificate is refused, and the error says so.
    // `watch` first GETs the chat over https, so this is the REST call's
    // refusal; the stream's, with the same verifier, is checked by
    // `chat_cli::client`'s unit tests.
    let mut untrusting = cli(&url, &["watch", "--once", &chat]);
    untrusting.env_remove("SSL_CERT_FILE");
    let (code, stdout, stderr) = output(untrusting).await?;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains(&format!("cannot reach the chatd server at {url}")),
        "stderr: {stderr}"
    );
    assert!(stderr.contains("certificate"), "stderr: {stderr}");
    Ok(())
}

/// A client-side tool for `chatd chat new --tools`.
const WEATHER_TOOLS: &str = r#"[{"name": "get_weather", "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]"#;

/// The model's requests so far, title requests left out.
fn model_requests(llm: &FakeLlm) -> Vec<RecordedRequest> {
    llm.requests()
        .into_iter()
        .filter(|r| !is_title_request(r))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_with_tools_exits_3_naming_the_calls_and_tool_results_sends_results_and_errors_then_streams_the_continuation()
-> anyhow::Result<()> {
    let setup = setup().await?;
    setup.llm.push(
        Script::new()
            .tool_call("call_1", "get_weather", r#"{"city":"Paris"}"#, 2)
            .tool_call("call_2", "get_weather", r#"{"city":"Oslo"}"#, 2),
    );
    // The second half comes only after a pause, so the first half must be
    // on the terminal while the chat is still running.
    setup.llm.push(
        Script::new()
            .then_text("It is 21 ")
            .delay(Duration::from_secs(1))
            .then_text("degrees in Paris."),
    );
    let url = setup.server.url();
    let (code, stdout, stderr) = output(cli(
        &url,
        &["new", "--tools", WEATHER_TOOLS, "weather in Paris?"],
    ))
    .await?;
    assert_eq!(code, Some(3), "stderr: {stderr}");
    assert_eq!(stdout, "", "the report and the hint go to stderr");
    let chat = chat_id(&stderr)?;
    assert!(
        stderr.contains("action required: 2 tool call(s) wait for results"),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains(r#"  get_weather {"city":"Paris"} (call_1)"#),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains(r#"  get_weather {"city":"Oslo"} (call_2)"#),
        "stderr: {stderr}"
    );
    // CHATD_URL names the server: the hint needs no --url.
    assert!(
        stderr.contains(&format!(
            "answer with: chatd chat tool-results {chat} --result call_1=... --result call_2=... "
        )),
        "stderr: {stderr}"
    );
    assert_eq!(chat_status(&setup.server, chat).await?, "requires_action");
    let requests = model_requests(&setup.llm);
    assert_eq!(requests.len(), 1);
    let offered: Vec<&Value> = requests[0].body["tools"]
        .as_array()
        .context("tools in the model's request")?
        .iter()
        .map(|t| &t["function"]["name"])
        .collect();
    assert!(offered.contains(&&json!("get_weather")), "{offered:?}");

    // A server given by --url alone: the hint names it (and never the
    // token).
    let id = chat.to_string();
    let mut by_flag = cli(&url, &["watch", "--once", &id, "--url", &url]);
    by_flag.env_remove("CHATD_URL");
    let (code, _, stderr) = output(by_flag).await?;
    assert_eq!(code, Some(3), "stderr: {stderr}");
    assert!(
        stderr.contains(&format!(
            "answer with: chatd chat tool-results {chat} --url {url} --result call_1=... "
        )),
        "stderr: {stderr}"
    );
    assert!(!stderr.contains(ADMIN_TOKEN), "stderr: {stderr}");

    // A result for a call that does not wait: the server's 400 names it,
    // and the chat still waits.
    let (code, stdout, stderr) =
        output(cli(&url, &["tool-results", &id, "--result", "call_9=1"])).await?;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("HTTP 400"), "stderr: {stderr}");
    assert!(
        stderr.contains("results[0].tool_call_id"),
        "stderr: {stderr}"
    );
    assert_eq!(chat_status(&setup.server, chat).await?, "requires_action");

    // One result read from a file, one failed call.
    let dir = tempfile::tempdir()?;
    let paris = dir.path().join("paris.json");
    std::fs::write(&paris, "{\"temp\": 21}\n")?;
    let from_file = format!("call_1=@{}", paris.display());
    let mut running = Running::spawn(cli(
        &url,
        &[
            "tool-results",
            &id,
            "--result",
            &from_file,
            "--error",
            "call_2=no network",
        ],
    ))?;
    running.read_until("It is 21 ").await?;
    assert_eq!(running.stdout, "It is 21 ", "streamed as it arrives");
    let (code, stdout, stderr) = running.finish().await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "It is 21 degrees in Paris.\n");
    // The continuation only: neither the question nor the tool calls
    // again; the committed failure is marked as one.
    assert_eq!(
        stderr,
        "sent 2 tool result(s)\n\
         [tool result get_weather (call_1)] {\"temp\":21}\n\
         [tool result error get_weather (call_2)] no network\n"
    );
    assert_eq!(chat_status(&setup.server, chat).await?, "waiting");
    let requests = model_requests(&setup.llm);
    assert_eq!(requests.len(), 2);
    // The OpenAI-compatible projection sends each result as a `tool`
    // message whose content is the output's JSON; it has no error flag,
    // so the failure reaches the model as its output only.
    let messages = requests[1].body["messages"]
        .as_array()
        .context("messages in the model's request")?;
    let tool_messages: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(
        tool_messages,
        [
            &json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}"}),
            &json!({"role": "tool", "tool_call_id": "call_2", "content": r#"{"error":"no network"}"#}),
        ],
        "{:?}",
        requests[1].body
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tools_or_results_exit_2_and_results_for_a_chat_that_does_not_wait_are_refused()
-> anyhow::Result<()> {
    let setup = setup().await?;
    let url = setup.server.url();
    let chats = || async {
        let (code, stdout, stderr) = output(cli(&url, &["list", "--json"])).await?;
        anyhow::ensure!(code == Some(0), "stderr: {stderr}");
        Ok::<_, anyhow::Error>(serde_json::from_str::<Vec<Value>>(&stdout)?.len())
    };

    // Not JSON, not an array, a file with no array: exit 2 naming
    // `--tools`, before any request.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("tools.json");
    std::fs::write(&file, r#"{"name": "get_weather"}"#)?;
    let from_file = format!("@{}", file.display());
    for (tools, why) in [
        ("[{", "invalid JSON"),
        (r#"{"name": "get_weather"}"#, "expected a JSON array"),
        (from_file.as_str(), "expected a JSON array in "),
    ] {
        let (code, stdout, stderr) = output(cli(&url, &["new", "--tools", tools, "hi"])).await?;
        assert_eq!(code, Some(2), "{tools}: stderr: {stderr}");
        assert_eq!(stdout, "");
        assert!(stderr.contains("'--tools <TOOLS>'"), "stderr: {stderr}");
        assert!(stderr.contains(why), "stderr: {stderr}");
    }
    assert_eq!(chats().await?, 0, "no chat was created");

    // The server's validation of a tool: exit 1 with the field.
    let bad_name =
        r#"[{"name": "get weather", "description": "", "input_schema": {"type": "object"}}]"#;
    let (code, _, stderr) = output(cli(&url, &["new", "--tools", bad_name, "hi"])).await?;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(stderr.contains("HTTP 400"), "stderr: {stderr}");
    assert!(stderr.contains("dynamic_tools[0].name"), "stderr: {stderr}");
    assert_eq!(chats().await?, 0, "no chat was created");

    // A chat that does not wait for tool results.
    setup.llm.push(Script::text("hello back"));
    let (code, _, stderr) = output(cli(&url, &["new", "hi"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let chat = chat_id(&stderr)?;
    let id = chat.to_string();

    // A malformed `--result` or `--error`, or none at all: exit 2 naming
    // the option, before any request.
    let missing = dir.path().join("missing.json");
    let missing_file = format!("call_1=@{}", missing.display());
    let cannot_read = format!("cannot read {}", missing.display());
    for (flag, result, why) in [
        ("--result", "call_1", "there is no `=`"),
        ("--result", "={}", "the tool call id before `=` is empty"),
        ("--error", " call_1=x", "has leading or trailing whitespace"),
        (
            "--result",
            r#"call_1={"temp":21"#,
            "OUTPUT starts with `{` but is not valid JSON (EOF while parsing an object",
        ),
        (
            "--error",
            "call_1=[oops]",
            "OUTPUT starts with `[` but is not valid JSON",
        ),
        ("--result", &missing_file, &cannot_read),
    ] {
        let (code, stdout, stderr) =
            output(cli(&url, &["tool-results", &id, flag, result])).await?;
        assert_eq!(code, Some(2), "{result}: stderr: {stderr}");
        assert_eq!(stdout, "");
        assert!(
            stderr.contains(&format!("'{flag} <TOOL_CALL_ID=OUTPUT>'")),
            "stderr: {stderr}"
        );
        assert!(stderr.contains(why), "stderr: {stderr}");
    }
    // Standard input, read once, cannot answer two calls.
    let (code, _, stderr) = output(cli(
        &url,
        &["tool-results", &id, "--result", "a=@-", "--error", "b=@-"],
    ))
    .await?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains("'--error <TOOL_CALL_ID=OUTPUT>'"),
        "stderr: {stderr}"
    );
    assert!(stderr.contains("can be read only once"), "stderr: {stderr}");
    let (code, _, stderr) = output(cli(&url, &["tool-results", &id])).await?;
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert!(stderr.contains("--result"), "stderr: {stderr}");

    // The server refuses results for a chat that is not waiting for them.
    let (code, stdout, stderr) = output(cli(
        &url,
        &["tool-results", &id, "--error", "call_1=failed"],
    ))
    .await?;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("The chat's current state does not allow this operation. (HTTP 409"),
        "stderr: {stderr}"
    );
    assert_eq!(chat_status(&setup.server, chat).await?, "waiting");
    Ok(())
}

/// A stand-in server for one chat in `requires_action` whose stream sends
/// the `status` in one frame and the `action_required` event that names the
/// calls `gap` later in another, as the real server may when the writer
/// batches what happens to be ready. Returns its URL.
async fn split_report_server(chat: Uuid, gap: Duration) -> anyhow::Result<String> {
    use axum::extract::ws::{Message, WebSocketUpgrade};
    use axum::routing::get;
    let chat_json = json!({
        "id": chat, "title": "Split", "status": "requires_action",
        "updated_at": "2026-01-01T00:00:00Z", "last_error": null,
    });
    let status = json!([{"type": "status", "chat_id": chat,
        "status": {"status": "requires_action", "history_version": 1}}]);
    let action = json!([{"type": "action_required", "chat_id": chat,
        "action_required": {"tool_calls": [{"tool_call_id": "call_7",
            "tool_name": "get_weather", "args": "{\"city\":\"Rome\"}"}],
        "deadline_at": "2099-01-01T00:00:00Z"}}]);
    let app = axum::Router::new()
        .route(
            "/api/v2/chats/{chat}",
            get(move || {
                let chat_json = chat_json.clone();
                async move { axum::Json(chat_json) }
            }),
        )
        .route(
            "/api/v2/chats/{chat}/stream",
            get(move |ws: WebSocketUpgrade| {
                let (status, action) = (status.to_string(), action.to_string());
                async move {
                    ws.on_upgrade(move |mut socket| async move {
                        let _ = socket.send(Message::text(status)).await;
                        tokio::time::sleep(gap).await;
                        let _ = socket.send(Message::text(action)).await;
                        while let Some(Ok(_)) = socket.recv().await {}
                    })
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_once_names_the_pending_calls_that_come_a_frame_after_the_status()
-> anyhow::Result<()> {
    let chat = Uuid::new_v4();
    let url = split_report_server(chat, Duration::from_millis(150)).await?;
    let (code, stdout, stderr) = output(cli(&url, &["watch", "--once", &chat.to_string()])).await?;
    assert_eq!(code, Some(3), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains(r#"get_weather {"city":"Rome"} (call_7)"#),
        "the calls are named: {stderr}"
    );
    assert!(
        stderr.contains(&format!("tool-results {chat}")) && stderr.contains("--result call_7=..."),
        "the hint names the call: {stderr}"
    );
    assert!(
        !stderr.contains("TOOL_CALL_ID"),
        "not the generic hint: {stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_with_files_uploads_them_and_the_model_sees_the_image_and_the_text()
-> anyhow::Result<()> {
    let setup = setup().await?;
    let dir = tempfile::tempdir()?;
    let image = dir.path().join("dot.png");
    std::fs::write(&image, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")?;
    let notes = dir.path().join("notes.md");
    std::fs::write(&notes, "# todo\nbuy milk\n")?;
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![0u8; 10 * 1024 * 1024 + 1])?;
    let url = setup.server.url();
    setup.llm.push(Script::text("hello"));
    let (code, _, stderr) = output(cli(&url, &["new", "hi"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let chat = chat_id(&stderr)?.to_string();

    setup.llm.push(Script::text("A dot and a list."));
    let (image_arg, notes_arg) = (image.display().to_string(), notes.display().to_string());
    let (code, stdout, stderr) = output(cli(
        &url,
        &[
            "send",
            &chat,
            "--file",
            &image_arg,
            "--file",
            &notes_arg,
            "What are these?",
        ],
    ))
    .await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "A dot and a list.\n");
    assert_eq!(stderr.matches("uploaded ").count(), 2, "stderr: {stderr}");
    let requests = model_requests(&setup.llm);
    let content = &requests.last().context("a model request")?.body["messages"][2]["content"];
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "What are these?"})
    );
    assert_eq!(content[1]["type"], "image_url");
    assert!(
        content[1]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,"),
        "{content}"
    );
    assert_eq!(
        content[2]["text"],
        "[Attached file notes.md (text/markdown), 16 bytes]\n# todo\nbuy milk\n"
    );

    // A file over the limit is refused before anything is sent.
    let before = model_requests(&setup.llm).len();
    let big_arg = big.display().to_string();
    let (code, _, stderr) = output(cli(&url, &["send", &chat, "--file", &big_arg])).await?;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("at most 10485760 bytes"),
        "stderr: {stderr}"
    );
    assert_eq!(model_requests(&setup.llm).len(), before);
    Ok(())
}

/// `chatd chat new --subagents` offers the agent tools; the model's
/// `spawn_agent` child is listed by `chatd chat children` with its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_with_subagents_spawns_a_child_that_children_lists_with_its_status()
-> anyhow::Result<()> {
    let setup = setup().await?;
    setup.llm.set_default_fn(|request| {
        let first_user = request.body["messages"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["role"] == "user"))
            .map(|m| m["content"].to_string())
            .unwrap_or_default();
        if first_user.contains("CHILD:") {
            Script::text("child done")
        } else if request.trailing_tool_results().is_empty() {
            Script::new().tool_call(
                "call_spawn",
                "spawn_agent",
                r#"{"prompt": "CHILD: look it up", "title": "Looker"}"#,
                1,
            )
        } else {
            Script::text("parent done")
        }
    });
    let url = setup.server.url();
    let (code, stdout, stderr) = output(cli(
        &url,
        &["new", "--subagents", "--title", "Lead", "delegate this"],
    ))
    .await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert!(stdout.contains("parent done"), "stdout: {stdout:?}");
    let parent = chat_id(&stderr)?;
    let offered: Vec<Value> = setup
        .llm
        .requests()
        .iter()
        .filter(|r| !is_title_request(r) && r.body["tools"].is_array())
        .map(|r| r.body["tools"][0]["function"]["name"].clone())
        .collect();
    assert!(offered.contains(&json!("spawn_agent")), "{offered:?}");

    let (code, stdout, stderr) =
        output(cli(&url, &["children", &parent.to_string(), "--json"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let kids: Vec<Value> = serde_json::from_str(&stdout)?;
    assert_eq!(kids.len(), 1, "{stdout}");
    let child: Uuid = kids[0]["id"].as_str().context("child id")?.parse()?;
    assert_eq!(kids[0]["parent_chat_id"], parent.to_string());
    wait_status(&setup.server, child, "waiting").await?;

    let (code, stdout, stderr) = output(cli(&url, &["children", &parent.to_string()])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout:?}");
    let columns: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(columns[0], child.to_string());
    assert_eq!(columns[1], "waiting", "{stdout}");
    assert!(lines[0].ends_with("  Looker"), "{stdout}");
    // The default list shows the parent, not the child.
    let (_, stdout, _) = output(cli(&url, &["list"])).await?;
    assert!(stdout.contains(&parent.to_string()) && !stdout.contains(&child.to_string()));
    Ok(())
}

/// Whether bubblewrap runs here (the workspace's `shell` needs it); prints
/// why a test skips when not.
async fn bwrap_or_skip(test: &str) -> bool {
    let ok = Command::new("bwrap")
        .arg("--version")
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIP {test}: bubblewrap (bwrap) is not installed");
    }
    ok
}

/// The `.tar.gz` at `path`: entry path → content.
fn untar(path: &std::path::Path) -> anyhow::Result<std::collections::BTreeMap<String, Vec<u8>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut entries = std::collections::BTreeMap::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let name = entry.path()?.to_string_lossy().into_owned();
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut content)?;
        entries.insert(name, content);
    }
    Ok(entries)
}

/// `chatd chat new --workspace` gives the chat a workspace; the model's
/// `write_file` and `shell` calls (no approval: `--workspace-approval
/// never`) show as `$ COMMAND` and its exit code; `files` lists what they
/// left (`--json` the API's array), `cat` writes a file's bytes exactly
/// (binary too) and names a missing file or a bad path, `download` saves
/// the `.tar.gz` (by default as `<chat id>-workspace.tar.gz`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_with_workspace_then_files_cat_and_download_show_what_the_tools_wrote()
-> anyhow::Result<()> {
    if !bwrap_or_skip("workspace CLI").await {
        return Ok(());
    }
    let (db, llm, dir, config) = fixture().await?;
    let workspaces = dir.path().join("workspaces");
    let workspaces_arg = workspaces.display().to_string();
    let mut args = replica_args(&db, &config, "500ms");
    args.extend([
        "--workspace-approval",
        "never",
        "--workspace-dir",
        &workspaces_arg,
    ]);
    let server = Chatd::start(&args).await?;
    llm.push(
        Script::new()
            .tool_call(
                "w1",
                "write_file",
                r#"{"path": "notes/a.txt", "content": "hello\n"}"#,
                1,
            )
            .tool_call(
                "s1",
                "shell",
                r#"{"command": "printf '\\000\\001\\377' > bin.dat && echo made it"}"#,
                1,
            ),
    );
    llm.push(Script::text("All written."));
    let url = server.url();
    let (code, stdout, stderr) =
        output(cli(&url, &["new", "--workspace", "write some files"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "All written.\n");
    let chat = chat_id(&stderr)?;
    // The shell call and its result, compactly, on standard error (the
    // step's calls, then their results).
    assert!(
        stderr.contains(
            "(w1)]\n$ printf '\\000\\001\\377' > bin.dat && echo made it\n[tool result write_file"
        ) && stderr
            .ends_with("(w1)] {\"bytes\":6,\"path\":\"notes/a.txt\"}\n  made it\n[exit 0]\n"),
        "stderr: {stderr}"
    );
    let read = server
        .get_json(&format!("/api/v2/chats/{chat}"), ADMIN_TOKEN)
        .await?;
    assert_eq!(read["workspace"]["bytes"], 9, "{read}");
    assert_eq!(read["workspace"]["files"], 2, "{read}");
    let id = chat.to_string();

    // `watch --once` shows the same.
    let (code, stdout, stderr) = output(cli(&url, &["watch", &id, "--once"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert!(
        stdout.contains("assistant> $ printf '\\000\\001\\377' > bin.dat && echo made it\ntool> ")
            && stdout.contains("\ntool>   made it\ntool> [exit 0]\nassistant> All written.\n"),
        "stdout: {stdout}"
    );

    // files: one aligned line per entry; --json: the API's array.
    let (code, stdout, stderr) = output(cli(&url, &["files", &id])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let summary: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[0], r[1], r[3])).collect();
    assert_eq!(
        summary,
        [
            ("file", "3", "bin.dat"),
            ("dir", "0", "notes/"),
            ("file", "6", "notes/a.txt")
        ],
        "{stdout}"
    );
    assert!(rows.iter().all(|r| r[2].ends_with('Z')), "{stdout}");
    let (code, stdout, _) = output(cli(&url, &["files", &id, "--json"])).await?;
    assert_eq!(code, Some(0));
    let listed: Vec<Value> = serde_json::from_str(&stdout)?;
    assert_eq!(listed.len(), 3, "{stdout}");
    assert_eq!(listed[2]["path"], "notes/a.txt");
    assert_eq!(listed[2]["executable"], false);

    // cat: the bytes exactly, binary included.
    let (code, stdout, stderr) = output(cli(&url, &["cat", &id, "notes/a.txt"])).await?;
    assert_eq!((code, stdout.as_str()), (Some(0), "hello\n"), "{stderr}");
    let raw = tokio::time::timeout(CLI_TIMEOUT, cli(&url, &["cat", &id, "bin.dat"]).output())
        .await
        .context("cat did not finish in time")??;
    assert!(
        raw.status.success(),
        "{}",
        String::from_utf8_lossy(&raw.stderr)
    );
    assert_eq!(raw.stdout, [0u8, 1, 255]);
    for (path, want) in [
        ("missing.txt", "no such file in the workspace: missing.txt"),
        (
            "notes",
            "no such file in the workspace: notes (This path is a directory.)",
        ),
    ] {
        let (code, stdout, stderr) = output(cli(&url, &["cat", &id, path])).await?;
        assert_eq!((code, stdout.as_str()), (Some(1), ""), "{path}: {stderr}");
        assert!(
            stderr.starts_with(&format!("chatd: {want}")),
            "{path}: {stderr}"
        );
    }
    for (path, want) in [
        ("../x", "must not leave the workspace"),
        ("/etc/passwd", "must be relative to the workspace's root"),
    ] {
        let (code, _, stderr) = output(cli(&url, &["cat", &id, path])).await?;
        assert_eq!(code, Some(1), "{path}: {stderr}");
        assert!(
            stderr.contains("HTTP 400") && stderr.contains(&format!("path: {want}")),
            "{path}: {stderr}"
        );
    }

    // download: `<chat id>-workspace.tar.gz` in the current directory, or
    // -o FILE; the archive holds the files under workspace/.
    let out = tempfile::tempdir()?;
    let mut command = cli(&url, &["download", &id]);
    command.current_dir(out.path());
    let (code, stdout, stderr) = output(command).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "");
    let default = format!("{chat}-workspace.tar.gz");
    assert!(
        stderr.starts_with(&format!("wrote {default} (")),
        "{stderr}"
    );
    let entries = untar(&out.path().join(&default))?;
    assert_eq!(
        entries.keys().collect::<Vec<_>>(),
        [
            "workspace/bin.dat",
            "workspace/notes",
            "workspace/notes/a.txt"
        ]
    );
    assert_eq!(entries["workspace/notes/a.txt"], b"hello\n");
    assert_eq!(entries["workspace/bin.dat"], [0u8, 1, 255]);
    let named = out.path().join("named.tgz");
    let named_arg = named.display().to_string();
    let (code, _, stderr) = output(cli(&url, &["download", &id, "-o", &named_arg])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert!(
        stderr.starts_with(&format!("wrote {named_arg} (")),
        "{stderr}"
    );
    assert_eq!(untar(&named)?, entries);

    // A chat without a workspace: nothing to list, an empty archive.
    llm.push(Script::text("plain"));
    let (code, _, stderr) = output(cli(&url, &["new", "no workspace"])).await?;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let plain = chat_id(&stderr)?.to_string();
    let (code, stdout, stderr) = output(cli(&url, &["files", &plain])).await?;
    assert_eq!((code, stdout.as_str()), (Some(0), ""));
    assert_eq!(stderr, "the workspace is empty\n");
    let (code, _, stderr) = output(cli(&url, &["cat", &plain, "a.txt"])).await?;
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with("chatd: no such file in the workspace: a.txt"),
        "{stderr}"
    );
    Ok(())
}
