//! Admin routes (providers, model configs, MCP servers), the models list and
//! the config file.

use serde_json::{Value, json};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_crud_keeps_api_keys_write_only() {
    let s = Server::start().await;
    let created = s
        .post(
            "/api/v2/chats/providers",
            &s.admin,
            json!({"provider": "anthropic", "display_name": "Claude", "base_url": "https://api.anthropic.com/v1", "api_key": "sk-ant"}),
        )
        .await;
    let p = created.expect(201).clone();
    assert_eq!(p["provider"], "anthropic");
    assert_eq!(p["display_name"], "Claude");
    assert_eq!(p["base_url"], "https://api.anthropic.com/v1");
    assert_eq!(p["has_api_key"], true);
    assert_eq!(p["enabled"], true);
    assert!(p.get("api_key").is_none());
    assert!(!created.text.contains("sk-ant"));
    let id = p["id"].as_str().unwrap().to_owned();
    let list = s.get("/api/v2/chats/providers", &s.alice).await;
    assert!(!list.text.contains("sk-ant"));
    assert_eq!(list.expect(200).as_array().unwrap().len(), 1);
    let patched = s
        .patch(
            &format!("/api/v2/chats/providers/{id}"),
            &s.admin,
            json!({"api_key": null, "enabled": false, "base_url": null}),
        )
        .await;
    let patched = patched.expect(200);
    assert_eq!(patched["has_api_key"], false);
    assert_eq!(patched["enabled"], false);
    assert_eq!(patched["base_url"], Value::Null);
    assert_eq!(patched["display_name"], "Claude");
    for (body, field) in [
        (json!({"provider": "gemini"}), "provider"),
        (
            json!({"provider": "openai", "base_url": "ftp://x"}),
            "base_url",
        ),
        (
            json!({"provider": "openai", "base_url": "not a url"}),
            "base_url",
        ),
        (
            json!({"provider": "openai", "display_name": "x".repeat(201)}),
            "display_name",
        ),
        (json!({"provider": "openai", "enabled": "yes"}), "enabled"),
        (json!({"provider": "openai", "extra": 1}), "extra"),
        (json!({}), "provider"),
    ] {
        expect_invalid(&s, "/api/v2/chats/providers", body, field).await;
    }
    // Members: 403 on every mutation.
    s.post(
        "/api/v2/chats/providers",
        &s.alice,
        json!({"provider": "openai"}),
    )
    .await
    .expect_error(403);
    s.patch(
        &format!("/api/v2/chats/providers/{id}"),
        &s.alice,
        json!({}),
    )
    .await
    .expect_error(403);
    s.delete(&format!("/api/v2/chats/providers/{id}"), &s.alice)
        .await
        .expect_error(403);
    // Unknown ids.
    let unknown = uuid::Uuid::new_v4();
    s.patch(
        &format!("/api/v2/chats/providers/{unknown}"),
        &s.admin,
        json!({}),
    )
    .await
    .expect_error(404);
    s.delete(&format!("/api/v2/chats/providers/{unknown}"), &s.admin)
        .await
        .expect_error(404);
    s.delete(&format!("/api/v2/chats/providers/{id}"), &s.admin)
        .await
        .expect(204);
    assert_eq!(
        s.get("/api/v2/chats/providers", &s.admin).await.body,
        json!([])
    );
}

async fn provider(s: &Server) -> Value {
    s.post(
        "/api/v2/chats/providers",
        &s.admin,
        json!({"provider": "openai"}),
    )
    .await
    .expect(201)["id"]
        .clone()
}

async fn defaults(s: &Server) -> Vec<String> {
    let list = s.get("/api/v2/chats/model-configs", &s.admin).await;
    list.expect(200)
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["is_default"] == true)
        .map(|c| c["model"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_configs_keep_exactly_one_enabled_default() {
    let s = Server::start().await;
    let p = provider(&s).await;
    let a = s
        .post(
            "/api/v2/chats/model-configs",
            &s.admin,
            json!({
                "provider_id": p, "model": "a", "display_name": "A", "context_limit": 1000,
                "options": {"reasoning_effort": {"default": "low", "max": "high"}, "max_output_tokens": 100,
                            "temperature": 0.5, "input_price_micros_per_mtok": 1, "output_price_micros_per_mtok": 2}
            }),
        )
        .await;
    let a = a.expect(201).clone();
    assert_eq!(a["model"], "a");
    assert_eq!(a["context_limit"], 1000);
    assert_eq!(a["compression_threshold"], 70);
    assert_eq!(
        a["is_default"], true,
        "the first enabled config becomes the default"
    );
    assert_eq!(a["enabled"], true);
    assert_eq!(
        a["options"]["reasoning_effort"],
        json!({"default": "low", "max": "high"})
    );
    assert_eq!(a["options"]["max_output_tokens"], 100);
    let b = s
        .post(
            "/api/v2/chats/model-configs",
            &s.admin,
            json!({"provider_id": p, "model": "b", "context_limit": 1000, "is_default": true, "compression_threshold": 0}),
        )
        .await;
    let b = b.expect(201).clone();
    assert_eq!(b["is_default"], true);
    assert_eq!(defaults(&s).await, vec!["b"]);
    // Setting a as default unsets b.
    let a_id = a["id"].as_str().unwrap();
    let b_id = b["id"].as_str().unwrap();
    s.patch(
        &format!("/api/v2/chats/model-configs/{a_id}"),
        &s.admin,
        json!({"is_default": true}),
    )
    .await
    .expect(200);
    assert_eq!(defaults(&s).await, vec!["a"]);
    // Disabling the default hands the role to another enabled config.
    let disabled = s
        .patch(
            &format!("/api/v2/chats/model-configs/{a_id}"),
            &s.admin,
            json!({"enabled": false}),
        )
        .await;
    assert_eq!(disabled.expect(200)["is_default"], false);
    assert_eq!(defaults(&s).await, vec!["b"]);
    // Models lists enabled configs only, for everyone.
    let models = s.get("/api/v2/chats/models", &s.alice).await;
    let models: Vec<&str> = models
        .expect(200)
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, vec!["b"]);
    // Deleting the default: a (re-enabled) takes over.
    s.patch(
        &format!("/api/v2/chats/model-configs/{a_id}"),
        &s.admin,
        json!({"enabled": true}),
    )
    .await
    .expect(200);
    s.delete(&format!("/api/v2/chats/model-configs/{b_id}"), &s.admin)
        .await
        .expect(204);
    assert_eq!(defaults(&s).await, vec!["a"]);
    // Invalid inputs.
    for (body, field) in [
        (
            json!({"provider_id": p, "model": "c", "context_limit": 0}),
            "context_limit",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": -1}),
            "context_limit",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 1.5}),
            "context_limit",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 1e40}),
            "context_limit",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "compression_threshold": 101}),
            "compression_threshold",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "compression_threshold": -1}),
            "compression_threshold",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"compact_recent_messages": 3}}),
            "options.compact_recent_messages",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"compact_recent_messages": "many"}}),
            "options.compact_recent_messages",
        ),
        (
            json!({"provider_id": p, "model": "", "context_limit": 10}),
            "model",
        ),
        (
            json!({"provider_id": uuid::Uuid::new_v4(), "model": "c", "context_limit": 10}),
            "provider_id",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "is_default": true, "enabled": false}),
            "is_default",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"temperature": 3}}),
            "options.temperature",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"max_output_tokens": 0}}),
            "options.max_output_tokens",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"reasoning_effort": {"default": "max", "max": "low"}}}),
            "options.reasoning_effort",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"reasoning_effort": {"default": "turbo", "max": "low"}}}),
            "options.reasoning_effort.default",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"seed": 1}}),
            "options.seed",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"provider_tools": ["web_search", "computer"]}}),
            "options.provider_tools",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": {"provider_tools": "web_search"}}),
            "options.provider_tools",
        ),
        (
            json!({"provider_id": p, "model": "c", "context_limit": 10, "options": []}),
            "options",
        ),
    ] {
        expect_invalid(&s, "/api/v2/chats/model-configs", body, field).await;
    }
    s.post(
        "/api/v2/chats/model-configs",
        &s.alice,
        json!({"provider_id": p, "model": "c", "context_limit": 10}),
    )
    .await
    .expect_error(403);
    s.patch(
        &format!("/api/v2/chats/model-configs/{}", uuid::Uuid::new_v4()),
        &s.admin,
        json!({}),
    )
    .await
    .expect_error(404);
    s.delete(&format!("/api/v2/chats/model-configs/{a_id}"), &s.alice)
        .await
        .expect_error(403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_validate_transport_and_slug_and_hide_secrets_from_members() {
    let s = Server::start().await;
    let created = s
        .post(
            "/api/v2/chats/mcp-servers",
            &s.admin,
            json!({"slug": "files", "display_name": "Files", "transport": "stdio", "command": "mcp-files",
                   "args": ["--root", "/srv"], "env": {"TOKEN": "secret"}}),
        )
        .await;
    let m = created.expect(201).clone();
    assert_eq!(m["slug"], "files");
    assert_eq!(m["transport"], "stdio");
    assert_eq!(m["args"], json!(["--root", "/srv"]));
    assert_eq!(m["env"], json!({"TOKEN": "secret"}));
    assert_eq!(m["enabled"], true);
    let http = s
        .post(
            "/api/v2/chats/mcp-servers",
            &s.admin,
            json!({"slug": "web", "transport": "streamable_http", "url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer x"}}),
        )
        .await;
    http.expect(201);
    let as_member = s.get("/api/v2/chats/mcp-servers", &s.alice).await;
    assert!(!as_member.text.contains("secret") && !as_member.text.contains("Bearer x"));
    assert_eq!(as_member.expect(200).as_array().unwrap().len(), 2);
    let as_admin = s.get("/api/v2/chats/mcp-servers", &s.admin).await;
    assert!(as_admin.text.contains("secret"));
    s.post(
        "/api/v2/chats/mcp-servers",
        &s.admin,
        json!({"slug": "files", "transport": "stdio", "command": "x"}),
    )
    .await
    .expect_error(409);
    for (body, field) in [
        (
            json!({"slug": "Files", "transport": "stdio", "command": "x"}),
            "slug",
        ),
        (
            json!({"slug": "a__b", "transport": "stdio", "command": "x"}),
            "slug",
        ),
        (
            json!({"slug": "-a", "transport": "stdio", "command": "x"}),
            "slug",
        ),
        (
            json!({"slug": "x".repeat(65), "transport": "stdio", "command": "x"}),
            "slug",
        ),
        (json!({"slug": "ok", "transport": "stdio"}), "command"),
        (json!({"slug": "ok", "transport": "streamable_http"}), "url"),
        (
            json!({"slug": "ok", "transport": "streamable_http", "url": "file:///etc"}),
            "url",
        ),
        (
            json!({"slug": "ok", "transport": "sse", "url": "http://x"}),
            "transport",
        ),
        (
            json!({"slug": "ok", "transport": "stdio", "command": "x", "args": "a b"}),
            "args",
        ),
        (
            json!({"slug": "ok", "transport": "stdio", "command": "x", "env": {"A": 1}}),
            "env.A",
        ),
    ] {
        expect_invalid(&s, "/api/v2/chats/mcp-servers", body, field).await;
    }
    let id = m["id"].as_str().unwrap();
    // A patch is validated as a whole: switching transport needs a url.
    s.patch(
        &format!("/api/v2/chats/mcp-servers/{id}"),
        &s.admin,
        json!({"transport": "streamable_http"}),
    )
    .await
    .expect_error(400);
    let patched = s
        .patch(
            &format!("/api/v2/chats/mcp-servers/{id}"),
            &s.admin,
            json!({"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp", "enabled": false}),
        )
        .await;
    let patched = patched.expect(200);
    assert_eq!(patched["transport"], "streamable_http");
    assert_eq!(patched["enabled"], false);
    s.patch(
        &format!("/api/v2/chats/mcp-servers/{id}"),
        &s.admin,
        json!({"slug": "web"}),
    )
    .await
    .expect_error(409);
    s.post(
        "/api/v2/chats/mcp-servers",
        &s.alice,
        json!({"slug": "z", "transport": "stdio", "command": "x"}),
    )
    .await
    .expect_error(403);
    s.delete(&format!("/api/v2/chats/mcp-servers/{id}"), &s.alice)
        .await
        .expect_error(403);
    s.delete(&format!("/api/v2/chats/mcp-servers/{id}"), &s.admin)
        .await
        .expect(204);
    s.delete(&format!("/api/v2/chats/mcp-servers/{id}"), &s.admin)
        .await
        .expect_error(404);
}

const CONFIG: &str = r#"
[[providers]]
name = "local"
provider = "openai-compat"
base_url = "http://127.0.0.1:8080/v1"
api_key = "sk-local"

[[model_configs]]
name = "small"
provider = "local"
model = "small-model"
context_limit = 8000

[[model_configs]]
name = "big"
provider = "local"
model = "big-model"
context_limit = 128000
compression_threshold = 80
is_default = true
options = { max_output_tokens = 2048 }

[[mcp_servers]]
slug = "files"
transport = "stdio"
command = "mcp-files"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_applies_idempotently_even_concurrently() {
    let s = Server::start().await;
    let file = chatd_api::config_file::ConfigFile::from_toml(CONFIG).unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let pool = s.pool().clone();
        let file = file.clone();
        tasks.push(tokio::spawn(async move {
            chatd_api::config_file::apply(&pool, &chatd_store::secrets::Secrets::none(), &file)
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let first = s.get("/api/v2/chats/model-configs", &s.admin).await.body;
    chatd_api::config_file::apply(s.pool(), &chatd_store::secrets::Secrets::none(), &file)
        .await
        .unwrap();
    let second = s.get("/api/v2/chats/model-configs", &s.admin).await.body;
    let strip = |v: &Value| -> Vec<(Value, Value, Value)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| (c["id"].clone(), c["model"].clone(), c["is_default"].clone()))
            .collect()
    };
    assert_eq!(strip(&first), strip(&second));
    assert_eq!(first.as_array().unwrap().len(), 2);
    assert_eq!(defaults(&s).await, vec!["big-model"]);
    let providers = s.get("/api/v2/chats/providers", &s.admin).await;
    let providers = providers.expect(200).as_array().unwrap().clone();
    assert_eq!(providers.len(), 1);
    assert_eq!(providers[0]["has_api_key"], true);
    assert_eq!(providers[0]["provider"], "openai-compat");
    let mcp = s.get("/api/v2/chats/mcp-servers", &s.admin).await;
    assert_eq!(mcp.expect(200).as_array().unwrap().len(), 1);
    // A bad file writes nothing.
    let before = s.dump().await;
    let bad = CONFIG.replace("context_limit = 8000", "context_limit = -1");
    let bad = chatd_api::config_file::ConfigFile::from_toml(&bad).unwrap();
    let err = chatd_api::config_file::apply(s.pool(), &chatd_store::secrets::Secrets::none(), &bad)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("context_limit"), "{err}");
    assert_eq!(s.dump().await, before);
}

/// Posts `body` to `path` as the admin and checks the answer is `400`
/// naming exactly `field`.
async fn expect_invalid(s: &Server, path: &str, body: Value, field: &str) {
    let answer = s.post(path, &s.admin, body.clone()).await;
    answer.expect_error(400);
    assert_eq!(
        answer.fields(),
        vec![field.to_owned()],
        "{body}: {}",
        answer.text
    );
}
