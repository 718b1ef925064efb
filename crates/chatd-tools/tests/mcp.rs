//! The MCP tool host against a real MCP server process (the testkit's
//! `mcp-fixture`), over stdio and streamable HTTP: listing, calls, tool
//! errors as `is_error` results, the per-call timeout, one reconnect after the
//! server process died, the idempotency key in `_meta`, stderr capture, the
//! child's environment and shutdown.

use std::collections::BTreeMap;
use std::time::Duration;

use chatd_testkit::{McpHttpFixture, mcp_fixture_bin};
use chatd_tools::mcp::{IDEMPOTENCY_META_KEY, IDEMPOTENCY_PARTS_META_KEY};
use chatd_tools::{IdempotencyKey, McpHost, McpOptions, McpServerConfig, McpTransport};
use serde_json::{Value, json};
use uuid::Uuid;

fn stdio_server(slug: &str) -> McpServerConfig {
    stdio_with_env(slug, BTreeMap::new())
}

fn stdio_with_env(slug: &str, env: BTreeMap<String, String>) -> McpServerConfig {
    McpServerConfig {
        id: Uuid::new_v4(),
        slug: slug.into(),
        transport: McpTransport::Stdio {
            command: mcp_fixture_bin().unwrap().display().to_string(),
            args: vec![],
            env,
        },
    }
}

fn http_server(slug: &str, url: String) -> McpServerConfig {
    McpServerConfig {
        id: Uuid::new_v4(),
        slug: slug.into(),
        transport: McpTransport::StreamableHttp {
            url,
            headers: BTreeMap::from([("x-fixture-token".to_owned(), "t0k3n".to_owned())]),
        },
    }
}

fn key(call: &str) -> IdempotencyKey {
    IdempotencyKey {
        chat_id: Uuid::nil(),
        history_version: 42,
        generation_attempt: 3,
        tool_call_id: call.into(),
    }
}

fn host() -> McpHost {
    McpHost::new(McpOptions {
        call_timeout: Duration::from_secs(10),
        ..McpOptions::default()
    })
}

async fn pid_of(host: &McpHost, server: &McpServerConfig) -> u64 {
    let outcome = host.call(server, "whoami", "{}", &key("whoami")).await;
    assert!(!outcome.is_error, "{outcome:?}");
    outcome.result["pid"].as_u64().expect("a pid")
}

fn alive(pid: u64) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_tools_are_listed_with_qualified_names_and_schemas() {
    let host = host();
    let server = stdio_server("calc");
    let set = host.list_tools(std::slice::from_ref(&server)).await;
    assert!(set.errors.is_empty(), "{:?}", set.errors);
    let names: Vec<&str> = set
        .tools
        .iter()
        .map(|t| t.qualified_name.as_str())
        .collect();
    assert_eq!(
        names,
        vec![
            "calc__add",
            "calc__fail",
            "calc__sleep",
            "calc__whoami",
            "calc__log",
            "calc__getenv",
            "calc__exit"
        ]
    );
    let add = set.get("calc__add").unwrap();
    assert_eq!(add.name, "add");
    assert_eq!(add.description, "Adds two numbers.");
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_return_results_and_every_failure_is_an_is_error_result() {
    let host = host();
    let server = stdio_server("calc");
    let sum = host
        .call(&server, "add", r#"{"a": 2, "b": 3}"#, &key("c1"))
        .await;
    assert_eq!((sum.result, sum.is_error), (json!("5"), false));

    let failed = host
        .call(
            &server,
            "fail",
            r#"{"message": "no such city"}"#,
            &key("c2"),
        )
        .await;
    assert_eq!(
        (failed.result, failed.is_error),
        (json!({"error": "no such city"}), true)
    );

    // A protocol error (unknown tool, bad arguments) is a result too.
    let unknown = host.call(&server, "nope", "{}", &key("c3")).await;
    assert!(unknown.is_error);
    assert!(
        unknown.result["error"]
            .as_str()
            .unwrap()
            .contains("unknown tool nope"),
        "{unknown:?}"
    );
    let bad = host
        .call(&server, "add", r#"{"a": "two"}"#, &key("c4"))
        .await;
    assert!(
        bad.is_error
            && bad.result["error"]
                .as_str()
                .unwrap()
                .contains("a must be a number")
    );

    // Arguments that are not a JSON object never reach the server.
    let cut = host.call(&server, "add", r#"{"a": 2, "#, &key("c5")).await;
    assert!(cut.is_error);
    assert!(
        cut.result["error"]
            .as_str()
            .unwrap()
            .starts_with("The tool arguments are not valid JSON")
    );
    let array = host.call(&server, "add", "[1, 2]", &key("c6")).await;
    assert_eq!(
        array.result,
        json!({"error": "The tool arguments must be a JSON object."})
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_key_reaches_the_server_in_the_request_meta() {
    let host = host();
    let server = stdio_server("calc");
    let outcome = host.call(&server, "whoami", "{}", &key("call_7")).await;
    let meta = &outcome.result["meta"];
    assert_eq!(
        meta[IDEMPOTENCY_META_KEY],
        json!("00000000-0000-0000-0000-000000000000:42:3:call_7")
    );
    assert_eq!(
        meta[IDEMPOTENCY_PARTS_META_KEY],
        json!({"chat_id": "00000000-0000-0000-0000-000000000000", "history_version": 42,
               "generation_attempt": 3, "tool_call_id": "call_7"})
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_the_timeout_is_an_error_result_and_the_session_lives_on() {
    let host = McpHost::new(McpOptions {
        call_timeout: Duration::from_millis(300),
        ..McpOptions::default()
    });
    let server = stdio_server("slow");
    let pid = pid_of(&host, &server).await;
    let started = std::time::Instant::now();
    let outcome = host
        .call(&server, "sleep", r#"{"ms": 20000}"#, &key("s1"))
        .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(
        outcome.result,
        json!({"error": "The tool call timed out after 0.3 s."})
    );
    assert!(outcome.is_error);
    assert_eq!(
        pid_of(&host, &server).await,
        pid,
        "same session, same process"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_stdio_server_gets_a_fresh_process_for_the_next_call() {
    let host = host();
    let server = stdio_server("calc");
    let first = pid_of(&host, &server).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let second = pid_of(&host, &server).await;
    assert_ne!(first, second, "a new process answered");
    let sum = host
        .call(&server, "add", r#"{"a":1,"b":1}"#, &key("c"))
        .await;
    assert_eq!(sum.result, json!("2"));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_is_reconnected_once_then_the_call_is_an_error() {
    let host = host();
    let server = stdio_server("crashy");
    let before = pid_of(&host, &server).await;
    // `exit` kills the process in the middle of the call; the reconnect sends
    // it again (at-least-once), the fresh process dies too, and the model gets
    // an error result, not a failed turn.
    let outcome = host.call(&server, "exit", "{}", &key("x")).await;
    assert!(outcome.is_error, "{outcome:?}");
    let message = outcome.result["error"].as_str().unwrap();
    assert!(message.contains("crashy"), "{message}");
    assert!(
        message.contains("mcp-fixture: exiting on request"),
        "the error carries the server's stderr: {message}"
    );
    let after = pid_of(&host, &server).await;
    assert_ne!(before, after);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_left_out_of_the_listing_with_its_stderr() {
    let host = host();
    let broken = McpServerConfig {
        id: Uuid::new_v4(),
        slug: "broken".into(),
        transport: McpTransport::Stdio {
            command: "sh".into(),
            args: vec![
                "-c".into(),
                "echo 'bad config: no token' >&2; exit 1".into(),
            ],
            env: BTreeMap::new(),
        },
    };
    let missing = McpServerConfig {
        id: Uuid::new_v4(),
        slug: "missing".into(),
        transport: McpTransport::Stdio {
            command: "/nonexistent/mcp-server".into(),
            args: vec![],
            env: BTreeMap::new(),
        },
    };
    let good = stdio_server("calc");
    let set = host
        .list_tools(&[broken.clone(), missing.clone(), good])
        .await;
    assert!(set.get("calc__add").is_some(), "the good server is listed");
    assert_eq!(set.errors.len(), 2, "{:?}", set.errors);
    assert_eq!(set.errors[0].0, "broken");
    assert!(
        set.errors[0].1.contains("bad config: no token"),
        "{:?}",
        set.errors
    );
    assert!(set.errors[1].1.contains("/nonexistent/mcp-server"));
    // The handshake can fail (broken pipe) before the child's last words
    // were read from its stderr: the error waits for the end of the pipe.
    // Without that wait one run in six failed here.
    for round in 0..20 {
        let set = host.list_tools(std::slice::from_ref(&broken)).await;
        assert_eq!(set.errors.len(), 1, "round {round}: {:?}", set.errors);
        assert!(
            set.errors[0].1.contains("bad config: no token"),
            "round {round}: {:?}",
            set.errors
        );
    }
    let call = host.call(&missing, "add", "{}", &key("m")).await;
    assert!(call.is_error);
    assert!(
        call.result["error"]
            .as_str()
            .unwrap()
            .starts_with("MCP server missing is not available")
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_gets_the_rows_env_and_not_ours_and_is_killed_on_shutdown() {
    let host = host();
    let server = stdio_with_env(
        "env",
        BTreeMap::from([("FIXTURE_GREETING".to_owned(), "olá".to_owned())]),
    );
    let greeting = host
        .call(
            &server,
            "getenv",
            r#"{"name": "FIXTURE_GREETING"}"#,
            &key("e1"),
        )
        .await;
    assert_eq!(greeting.result, json!({"value": "olá"}));
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
    let leaked = host
        .call(
            &server,
            "getenv",
            r#"{"name": "CARGO_MANIFEST_DIR"}"#,
            &key("e2"),
        )
        .await;
    assert_eq!(
        leaked.result,
        json!({"value": Value::Null}),
        "our environment does not leak"
    );
    let path = host
        .call(&server, "getenv", r#"{"name": "PATH"}"#, &key("e3"))
        .await;
    assert!(path.result["value"].is_string());

    let pid = pid_of(&host, &server).await;
    assert_eq!(host.open_sessions().await, vec![server.id]);
    host.shutdown().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        // The child is a zombie until reaped; kill(0) still succeeds for a
        // zombie, so also accept a zombie state.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.split_whitespace().nth(2) == Some("Z") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "child {pid} still running"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(host.open_sessions().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_lists_calls_and_survives_a_server_restart() {
    let mut fixture = McpHttpFixture::start().await.unwrap();
    let host = host();
    let server = http_server("web", fixture.url());
    let set = host.list_tools(std::slice::from_ref(&server)).await;
    assert!(set.errors.is_empty(), "{:?}", set.errors);
    assert!(set.get("web__add").is_some());
    let sum = host
        .call(&server, "add", r#"{"a": 40, "b": 2}"#, &key("h1"))
        .await;
    assert_eq!(sum.result, json!("42"));
    let failed = host
        .call(&server, "fail", r#"{"message": "nope"}"#, &key("h2"))
        .await;
    assert_eq!(
        (failed.result, failed.is_error),
        (json!({"error": "nope"}), true)
    );
    let who = host.call(&server, "whoami", "{}", &key("h3")).await;
    assert_eq!(
        who.result["meta"][IDEMPOTENCY_META_KEY],
        json!("00000000-0000-0000-0000-000000000000:42:3:h3")
    );
    let first_pid = who.result["pid"].as_u64().unwrap();

    // Kill the server process and start a new one on the same port: the old
    // session is gone; the next call works on a fresh one.
    let addr = fixture.addr().to_string();
    fixture.kill().await.unwrap();
    let fixture = McpHttpFixture::start_on(&addr).await.unwrap();
    let who = host.call(&server, "whoami", "{}", &key("h4")).await;
    assert!(!who.is_error, "{who:?}");
    assert_ne!(who.result["pid"].as_u64().unwrap(), first_pid);
    assert_eq!(fixture.url(), format!("http://{addr}/mcp"));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_http_server_is_an_error_result() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = McpHost::new(McpOptions {
        connect_timeout: Duration::from_secs(5),
        ..McpOptions::default()
    });
    let server = http_server("down", format!("http://127.0.0.1:{port}/mcp"));
    let set = host.list_tools(std::slice::from_ref(&server)).await;
    assert!(set.tools.is_empty());
    assert_eq!(set.errors.len(), 1);
    let call = host.call(&server, "add", "{}", &key("d")).await;
    assert!(call.is_error);
}

/// A loopback server: requests for `/mcp` are answered with `status` and
/// `Location: location` (`None`: the server's own `/stolen`); any other
/// request is counted in the returned counter (the redirect's target).
async fn redirecting_server(
    status: u16,
    location: Option<String>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    let location = location.unwrap_or_else(|| format!("http://{addr}/stolen"));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (location, counted) = (location.clone(), counted.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let answer = if head.contains(" /mcp ") {
                    format!(
                        "HTTP/1.1 {status} Moved\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    )
                } else {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        .to_owned()
                };
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (format!("http://{addr}/mcp"), hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_servers_redirects_are_errors_naming_the_status_and_their_targets_get_nothing() {
    use std::sync::atomic::Ordering;
    let (other_origin, other_hits) = redirecting_server(200, None).await;
    let host = McpHost::new(McpOptions {
        connect_timeout: Duration::from_secs(5),
        ..McpOptions::default()
    });
    for status in [301u16, 302, 307, 308] {
        for cross_origin in [false, true] {
            let location = cross_origin.then(|| other_origin.replace("/mcp", "/stolen"));
            let (url, same_hits) = redirecting_server(status, location).await;
            let server = http_server("moved", url);
            let set = host.list_tools(std::slice::from_ref(&server)).await;
            assert!(set.tools.is_empty());
            assert_eq!(set.errors.len(), 1, "{status}");
            let why = &set.errors[0].1;
            assert!(why.contains(&format!("HTTP {status}")), "{status}: {why}");
            let call = host.call(&server, "add", "{}", &key("r")).await;
            assert!(call.is_error, "{call:?}");
            assert_eq!(
                same_hits.load(Ordering::SeqCst),
                0,
                "{status}: the same-origin target was reached"
            );
        }
    }
    assert_eq!(
        other_hits.load(Ordering::SeqCst),
        0,
        "the other origin was reached (with x-fixture-token)"
    );
    host.shutdown().await;
}

#[test]
fn server_configs_print_no_env_or_header_values() {
    let stdio = stdio_with_env(
        "files",
        BTreeMap::from([("API_TOKEN".to_owned(), "env-debug-secret".to_owned())]),
    );
    let http = McpServerConfig {
        id: Uuid::nil(),
        slug: "web".into(),
        transport: McpTransport::StreamableHttp {
            url: "https://u:url-pass@mcp.example/mcp?key=url-key".into(),
            headers: BTreeMap::from([("Authorization".to_owned(), "Bearer hdr-debug".to_owned())]),
        },
    };
    let text = format!("{stdio:?} {http:?} {http:#?}");
    for secret in ["env-debug-secret", "hdr-debug", "url-pass", "url-key"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert!(
        text.contains("API_TOKEN") && text.contains("Authorization"),
        "{text}"
    );
    assert!(text.contains("https://mcp.example/mcp"), "{text}");
}
