//! `chatd serve --secret-key-file PATH` / `CHATD_SECRET_KEY` (API.md
//! "Limits, budgets and the token lifecycle"): without a key, one warning
//! line and plain rows; the first start with a key encrypts the rows in
//! place and the worker still sends the key it decrypts; another key, a
//! malformed key or a missing key for encrypted rows stops startup with a
//! message naming the flag.

use std::time::Duration;

use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::{FakeLlm, Script};
use serde_json::json;

use crate::support::{ADMIN_TOKEN, Chatd, chatd_command, http};

const API_KEY: &str = "sk-e2e-secret-0123";
const KEY_A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const KEY_B: &str = "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const WARNING: &str = "provider API keys and MCP server secrets are stored in plain text";

/// A config file whose provider (with [`API_KEY`]) points at `llm`, and an
/// MCP server with a secret header.
fn config_file(dir: &tempfile::TempDir, llm: &FakeLlm) -> anyhow::Result<String> {
    let path = dir.path().join("chatd.toml");
    std::fs::write(
        &path,
        format!(
            "[[providers]]\nname = \"fake\"\nprovider = \"openai-compat\"\nbase_url = \"{}\"\napi_key = \"{API_KEY}\"\n\n\
             [[model_configs]]\nname = \"fake-model\"\nprovider = \"fake\"\nmodel = \"fake-model\"\ncontext_limit = 8192\nis_default = true\n\n\
             [[mcp_servers]]\nslug = \"web\"\ntransport = \"streamable_http\"\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = {{ Authorization = \"Bearer mcp-e2e-secret\" }}\n",
            llm.base_url()
        ),
    )?;
    Ok(path.display().to_string())
}

fn key_file(dir: &tempfile::TempDir, name: &str, text: &str) -> anyhow::Result<String> {
    let path = dir.path().join(name);
    std::fs::write(&path, format!("{text}\n"))?;
    Ok(path.display().to_string())
}

/// The stored `api_key` of the provider and the stored `headers` of the MCP
/// server, as text.
async fn raw(db: &TestDatabase) -> anyhow::Result<(String, String)> {
    let api_key: String = sqlx::query_scalar("SELECT api_key FROM chat_providers")
        .fetch_one(db.pool())
        .await?;
    let headers: String = sqlx::query_scalar("SELECT headers::text FROM chat_mcp_servers")
        .fetch_one(db.pool())
        .await?;
    Ok((api_key, headers))
}

/// `chatd serve` with `args` and `env`, to completion within 60 s: its exit
/// code and standard error.
async fn serve_to_exit(
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(Option<i32>, String)> {
    let mut command = chatd_command();
    command
        .arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("CHATD_SECRET_KEY")
        .env_remove("CHATD_SECRET_KEY_FILE");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output()).await??;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_plain_without_a_key_then_encrypted_on_the_first_start_with_one()
-> anyhow::Result<()> {
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let llm = FakeLlm::start().await?;
    let dir = tempfile::tempdir()?;
    let config = config_file(&dir, &llm)?;
    let base = ["--postgres-url", db.url(), "--config", config.as_str()];

    // Without a key: one warning line, plain rows.
    let mut server = Chatd::start(&base).await?;
    let warnings = server.log().iter().filter(|l| l.contains(WARNING)).count();
    assert_eq!(warnings, 1, "{:#?}", server.log());
    assert_eq!(raw(&db).await?.0, API_KEY);
    assert!(server.terminate().await?.success());

    // The first start with a key encrypts them in place.
    let key = key_file(&dir, "key", KEY_A)?;
    let mut args = base.to_vec();
    args.extend([
        "--secret-key-file",
        key.as_str(),
        "--acquisition-interval",
        "500ms",
    ]);
    let mut server = Chatd::start(&args).await?;
    let log = server.log();
    assert!(!log.iter().any(|l| l.contains(WARNING)), "{log:#?}");
    assert!(
        log.iter()
            .any(|l| l.contains("secrets are encrypted at rest")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.contains(API_KEY) || l.contains(KEY_A)),
        "{log:#?}"
    );
    let (api_key, headers) = raw(&db).await?;
    assert!(
        api_key.starts_with("enc:v1:") && !api_key.contains(API_KEY),
        "{api_key}"
    );
    assert!(
        headers.contains("enc:v1:") && !headers.contains("mcp-e2e-secret"),
        "{headers}"
    );

    // The worker reads the key decrypted and sends it to the provider.
    llm.push(Script::text("Hello"));
    let created = http()
        .post(format!("{}/api/v2/chats", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"content": [{"type": "text", "text": "hi"}]}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while llm.requests().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no model call");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let authorization = llm.requests()[0].header("authorization").map(str::to_owned);
    assert_eq!(authorization, Some(format!("Bearer {API_KEY}")));
    // Admins still read the MCP headers in plaintext.
    let servers = server
        .get_json("/api/v2/chats/mcp-servers", ADMIN_TOKEN)
        .await?;
    assert_eq!(
        servers[0]["headers"],
        json!({"Authorization": "Bearer mcp-e2e-secret"})
    );
    assert!(server.terminate().await?.success());

    // Another key, or none, stops startup naming the flag; nothing changes.
    let other = key_file(&dir, "other", KEY_B)?;
    let (code, stderr) = serve_to_exit(
        &[&base[..], &["--secret-key-file", other.as_str()]].concat(),
        &[],
    )
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--secret-key-file"), "{stderr}");
    assert!(stderr.contains("another key"), "{stderr}");
    assert!(
        !stderr.contains("listening on") && !stderr.contains(KEY_B),
        "{stderr}"
    );
    let (code, stderr) = serve_to_exit(&base, &[]).await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no secret key was given"), "{stderr}");
    assert_eq!(raw(&db).await?, (api_key, headers));
    // The key in the environment works as the file does.
    let mut command = chatd_command();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--no-worker"])
        .args(["--postgres-url", db.url()])
        .env("CHATD_SECRET_KEY", KEY_A);
    let mut server = Chatd::spawn(command)?;
    server
        .wait_for_line(
            |l| l.contains("listening on http://"),
            Duration::from_secs(60),
        )
        .await?;
    let log = server.log();
    assert!(
        log.iter()
            .any(|l| l.contains("secrets are encrypted at rest")),
        "{log:#?}"
    );
    assert!(server.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_key_stops_startup_naming_the_flag_and_not_the_key() -> anyhow::Result<()> {
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let dir = tempfile::tempdir()?;
    let short = key_file(&dir, "short", "c2hvcnQta2V5LXRleHQ=")?;
    let (code, stderr) = serve_to_exit(
        &["--postgres-url", db.url(), "--secret-key-file", &short],
        &[],
    )
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--secret-key-file") && stderr.contains("32 bytes"),
        "{stderr}"
    );
    assert!(!stderr.contains("c2hvcnQta2V5LXRleHQ"), "{stderr}");

    let missing = dir.path().join("missing").display().to_string();
    let (code, stderr) = serve_to_exit(
        &["--postgres-url", db.url(), "--secret-key-file", &missing],
        &[],
    )
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--secret-key-file") && stderr.contains("missing"),
        "{stderr}"
    );

    let (code, stderr) = serve_to_exit(
        &["--postgres-url", db.url()],
        &[("CHATD_SECRET_KEY", "zz-not-a-key")],
    )
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("CHATD_SECRET_KEY"), "{stderr}");
    assert!(!stderr.contains("zz-not-a-key"), "{stderr}");

    let key = key_file(&dir, "key", KEY_A)?;
    let (code, stderr) = serve_to_exit(
        &["--postgres-url", db.url(), "--secret-key-file", &key],
        &[("CHATD_SECRET_KEY", KEY_A)],
    )
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("not both"), "{stderr}");
    let replicas: i64 = sqlx::query_scalar("SELECT count(*) FROM replicas")
        .fetch_one(db.pool())
        .await?;
    assert_eq!(replicas, 0);
    Ok(())
}
