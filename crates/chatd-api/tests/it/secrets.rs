//! Secrets on the admin routes (API.md "Limits, budgets and the token
//! lifecycle"): members see providers' `base_url` without user info, query
//! or fragment and MCP servers without `command`, `args`, `env`, `url` and
//! `headers`; admins see everything but API keys; with a secret key the
//! routes and the config file store sealed values and answer plaintext.

use chatd_store::secrets::{SecretKey, Secrets};
use serde_json::{Value, json};

use crate::common::*;

const BASE_URL: &str = "https://llm-user:url-pass@llm.example:8443/v1?key=url-key#frag";
const SHOWN: &str = "https://llm.example:8443/v1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_see_provider_base_urls_without_credentials_admins_see_them_whole() {
    let s = Server::start().await;
    let created = s
        .post(
            "/api/v2/chats/providers",
            &s.admin,
            json!({"provider": "openai-compat", "base_url": BASE_URL, "api_key": "sk-route-secret"}),
        )
        .await;
    let p = created.expect(201).clone();
    assert_eq!(p["base_url"], BASE_URL, "the admin who wrote it sees it");
    assert!(!created.text.contains("sk-route-secret"));
    let id = p["id"].as_str().unwrap().to_owned();

    let as_member = s.get("/api/v2/chats/providers", &s.alice).await;
    let list = as_member.expect(200).as_array().unwrap().clone();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["base_url"], SHOWN);
    assert_eq!(list[0]["has_api_key"], true);
    for secret in ["url-pass", "url-key", "llm-user", "frag", "sk-route-secret"] {
        assert!(
            !as_member.text.contains(secret),
            "{secret}: {}",
            as_member.text
        );
    }
    let as_admin = s.get("/api/v2/chats/providers", &s.admin).await;
    assert_eq!(as_admin.expect(200)[0]["base_url"], BASE_URL);
    assert!(!as_admin.text.contains("sk-route-secret"));

    // PATCH answers the admin in full, never the key.
    let patched = s
        .patch(
            &format!("/api/v2/chats/providers/{id}"),
            &s.admin,
            json!({"display_name": "Local"}),
        )
        .await;
    assert_eq!(patched.expect(200)["base_url"], BASE_URL);
    assert!(!patched.text.contains("sk-route-secret"));
    // A member cannot reach the whole value through a mutating route.
    s.patch(
        &format!("/api/v2/chats/providers/{id}"),
        &s.alice,
        json!({"display_name": "x"}),
    )
    .await
    .expect_error(403);
    // The models list carries no provider address at all.
    let models = s.get("/api/v2/chats/models", &s.alice).await;
    models.expect(200);
    assert!(!models.text.contains("llm.example"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_see_mcp_servers_without_command_args_env_url_or_headers() {
    let s = Server::start().await;
    let stdio = s
        .post(
            "/api/v2/chats/mcp-servers",
            &s.admin,
            json!({"slug": "files", "display_name": "Files", "transport": "stdio",
                   "command": "/opt/secret-cmd", "args": ["--token", "arg-secret"],
                   "env": {"TOKEN": "env-secret"}, "require_approval": "always"}),
        )
        .await;
    let created = stdio.expect(201).clone();
    assert_eq!(created["command"], "/opt/secret-cmd");
    assert_eq!(
        created["url"],
        Value::Null,
        "admins keep the null of the other transport"
    );
    s.post(
        "/api/v2/chats/mcp-servers",
        &s.admin,
        json!({"slug": "web", "transport": "streamable_http",
               "url": "https://mcp.example/mcp?key=url-secret",
               "headers": {"Authorization": "Bearer header-secret"}}),
    )
    .await
    .expect(201);

    let as_member = s.get("/api/v2/chats/mcp-servers", &s.alice).await;
    let servers = as_member.expect(200).as_array().unwrap().clone();
    assert_eq!(servers.len(), 2);
    for server in &servers {
        for field in ["command", "args", "env", "url", "headers"] {
            assert!(server.get(field).is_none(), "{field} shown: {server}");
        }
        for field in [
            "id",
            "slug",
            "display_name",
            "transport",
            "enabled",
            "require_approval",
        ] {
            assert!(server.get(field).is_some(), "{field} missing: {server}");
        }
    }
    assert_eq!(servers[0]["slug"], "files");
    assert_eq!(servers[0]["require_approval"], "always");
    for secret in [
        "secret-cmd",
        "arg-secret",
        "env-secret",
        "url-secret",
        "mcp.example",
        "header-secret",
        "TOKEN",
    ] {
        assert!(
            !as_member.text.contains(secret),
            "{secret}: {}",
            as_member.text
        );
    }

    let as_admin = s.get("/api/v2/chats/mcp-servers", &s.admin).await;
    let servers = as_admin.expect(200).as_array().unwrap().clone();
    assert_eq!(servers[0]["command"], "/opt/secret-cmd");
    assert_eq!(servers[0]["args"], json!(["--token", "arg-secret"]));
    assert_eq!(servers[0]["env"], json!({"TOKEN": "env-secret"}));
    assert_eq!(servers[1]["url"], "https://mcp.example/mcp?key=url-secret");
    assert_eq!(
        servers[1]["headers"],
        json!({"Authorization": "Bearer header-secret"})
    );
}

fn key() -> Secrets {
    Secrets::new(Some(SecretKey::from_bytes([42; 32])))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_secret_key_the_routes_and_the_config_file_store_sealed_values() {
    let secrets = key();
    let s = Server::start_with_store(
        chatd_api::ApiOptions::default(),
        chatd_store::StoreConfig {
            secrets: secrets.clone(),
            ..chatd_store::StoreConfig::default()
        },
    )
    .await;
    chatd_store::secrets::prepare(s.pool(), &secrets)
        .await
        .unwrap();
    let p = s
        .post(
            "/api/v2/chats/providers",
            &s.admin,
            json!({"provider": "openai", "api_key": "sk-sealed-by-route"}),
        )
        .await
        .expect(201)
        .clone();
    let id: uuid::Uuid = p["id"].as_str().unwrap().parse().unwrap();
    s.post(
        "/api/v2/chats/mcp-servers",
        &s.admin,
        json!({"slug": "files", "transport": "stdio", "command": "mcp-files",
               "env": {"TOKEN": "env-sealed-by-route"}}),
    )
    .await
    .expect(201);
    // A PATCH that leaves the key alone keeps it (read, opened, sealed
    // again).
    s.patch(
        &format!("/api/v2/chats/providers/{id}"),
        &s.admin,
        json!({"display_name": "renamed"}),
    )
    .await
    .expect(200);
    let file = chatd_api::config_file::ConfigFile::from_toml(
        r#"
[[providers]]
name = "from-file"
provider = "openai"
api_key = "sk-sealed-by-file"

[[mcp_servers]]
slug = "web"
transport = "streamable_http"
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer header-sealed-by-file" }
"#,
    )
    .unwrap();
    chatd_api::config_file::apply(s.pool(), &secrets, &file)
        .await
        .unwrap();

    // The columns hold no plaintext.
    let raw: Vec<String> = sqlx::query_scalar(
        "SELECT coalesce(api_key, '') FROM chat_providers
         UNION ALL SELECT env::text FROM chat_mcp_servers
         UNION ALL SELECT headers::text FROM chat_mcp_servers",
    )
    .fetch_all(s.pool())
    .await
    .unwrap();
    let all = raw.join("\n");
    for plain in [
        "sk-sealed-by-route",
        "env-sealed-by-route",
        "sk-sealed-by-file",
        "header-sealed-by-file",
    ] {
        assert!(!all.contains(plain), "{plain} stored in plain text: {all}");
    }
    assert_eq!(all.matches("enc:v1:").count(), 4, "{all}");
    // Readers get plaintext: the admin view, and the store's queries the
    // worker uses.
    let servers = s.get("/api/v2/chats/mcp-servers", &s.admin).await;
    let servers = servers.expect(200).as_array().unwrap().clone();
    assert_eq!(servers[0]["env"], json!({"TOKEN": "env-sealed-by-route"}));
    assert_eq!(
        servers[1]["headers"],
        json!({"Authorization": "Bearer header-sealed-by-file"})
    );
    let row = chatd_store::providers::select(s.pool(), &secrets, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.def.api_key.as_deref(), Some("sk-sealed-by-route"));
    assert_eq!(row.def.display_name, "renamed");
}

#[test]
fn request_bodies_config_entries_and_options_print_no_secrets() {
    use chatd_api::admin::mcp_servers::{CreateMcpServerRequest, UpdateMcpServerRequest};
    use chatd_api::admin::providers::{CreateProviderRequest, UpdateProviderRequest};
    let create: CreateProviderRequest = serde_json::from_value(
        json!({"provider": "openai", "base_url": BASE_URL, "api_key": "sk-debug-1"}),
    )
    .unwrap();
    let update: UpdateProviderRequest =
        serde_json::from_value(json!({"api_key": "sk-debug-2", "base_url": BASE_URL})).unwrap();
    let mcp: CreateMcpServerRequest = serde_json::from_value(json!({
        "slug": "web", "transport": "streamable_http", "url": "https://mcp.example/?k=url-debug",
        "headers": {"Authorization": "Bearer hdr-debug"}, "env": {"T": "env-debug"}
    }))
    .unwrap();
    let mcp_update: UpdateMcpServerRequest = serde_json::from_value(
        json!({"headers": {"Authorization": "Bearer hdr-debug"}, "env": {"T": "env-debug"}}),
    )
    .unwrap();
    let file = chatd_api::config_file::ConfigFile::from_toml(
        r#"
[[providers]]
name = "p"
provider = "openai"
base_url = "https://u:url-pass@llm.example/v1?key=url-key"
api_key = "sk-debug-3"

[[mcp_servers]]
slug = "s"
transport = "stdio"
command = "x"
env = { T = "env-debug" }
"#,
    )
    .unwrap();
    let options = chatd_api::ApiOptions {
        relay_secret: Some("relay-debug-secret".into()),
        ..chatd_api::ApiOptions::default()
    };
    let minted = chatd_api::users::TokenResponse {
        id: uuid::Uuid::nil(),
        token: "chatd_minted_debug".into(),
    };
    let text = format!(
        "{create:?} {update:?} {mcp:?} {mcp_update:?} {file:?} {file:#?} {options:?} {minted:?}"
    );
    for secret in [
        "sk-debug-1",
        "sk-debug-2",
        "sk-debug-3",
        "url-pass",
        "url-key",
        "url-debug",
        "hdr-debug",
        "env-debug",
        "relay-debug-secret",
        "chatd_minted_debug",
    ] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert!(text.contains("<redacted>"));
}
