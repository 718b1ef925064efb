//! `chatd serve --config FILE`: providers and model configs declared in
//! TOML exist once the server listens; a broken file stops startup with a
//! message naming the file (DESIGN.md, "Configuration").

use std::time::Duration;

use chatd_testkit::TestDatabase;

use crate::support::{ADMIN_TOKEN, Chatd, reachable_tempdir, row_count, run_chatd};

const CONFIG: &str = r#"
[[providers]]
name = "local"
provider = "openai-compat"
base_url = "http://127.0.0.1:9/v1"
api_key = "sk-test"

[[model_configs]]
name = "small"
provider = "local"
model = "small-model"
context_limit = 8192
is_default = true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_applies_the_config_file_before_listening() -> anyhow::Result<()> {
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let tmp = reachable_tempdir()?;
    let path = tmp.path().join("chatd.toml");
    std::fs::write(&path, CONFIG)?;
    let path_arg = path.to_str().expect("utf-8 path");

    let mut server = Chatd::start(&["--postgres-url", db.url(), "--config", path_arg]).await?;
    let models = server
        .get_json("/api/v2/chats/model-configs", ADMIN_TOKEN)
        .await?;
    let models = models.as_array().expect("an array of model configs");
    assert_eq!(models.len(), 1, "{models:?}");
    assert_eq!(models[0]["model"], "small-model");
    assert_eq!(models[0]["context_limit"], 8192);
    assert_eq!(models[0]["is_default"], true);
    assert_eq!(server.terminate().await?.code(), Some(0));

    // Applying it again on the next start changes nothing.
    let mut server = Chatd::start(&["--postgres-url", db.url(), "--config", path_arg]).await?;
    let count = row_count(&db, "chat_model_configs").await?;
    assert_eq!(count, 1);
    assert_eq!(server.terminate().await?.code(), Some(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_a_broken_config_file_exits_1_naming_the_file() -> anyhow::Result<()> {
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let tmp = reachable_tempdir()?;
    let path = tmp.path().join("broken.toml");
    std::fs::write(
        &path,
        "[[providers]]\nname = \"x\"\nprovider = \"nonsense\"\n",
    )?;
    let (status, _, stderr) = run_chatd(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--postgres-url",
            db.url(),
            "--config",
            path.to_str().expect("utf-8 path"),
        ],
        Duration::from_secs(60),
    )
    .await?;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("broken.toml"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    let replicas = row_count(&db, "replicas").await?;
    assert_eq!(replicas, 0, "a failed start leaves no replica row");
    Ok(())
}
