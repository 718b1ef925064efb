//! `/healthz`, `/readyz`, `/metrics` and the OpenAPI document.

use serde_json::{Value, json};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz() {
    let s = Server::start().await;
    let health = s.call("GET", "/healthz", None, None).await;
    assert_eq!(health.expect(200)["status"], "ok");
    let ready = s.call("GET", "/readyz", None, None).await;
    assert_eq!(ready.expect(200)["status"], "ready");
    // A missing migration makes the replica not ready.
    sqlx::query("UPDATE _sqlx_migrations SET checksum = '\\x00'::bytea")
        .execute(s.pool())
        .await
        .unwrap();
    s.call("GET", "/readyz", None, None).await.expect_error(503);
    sqlx::query("DROP TABLE _sqlx_migrations")
        .execute(s.pool())
        .await
        .unwrap();
    s.call("GET", "/readyz", None, None).await.expect_error(503);
    s.call("GET", "/healthz", None, None).await.expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_template_and_transitions() {
    let s = Server::start().await;
    let id = s.create_chat(&s.alice).await;
    s.get(&chat_path(id, ""), &s.alice).await.expect(200);
    s.get(&chat_path(id, ""), &s.bob).await.expect_error(404);
    s.post_empty(&chat_path(id, "/interrupt"), &s.alice)
        .await
        .expect(200);
    s.post_empty(&chat_path(id, "/interrupt"), &s.alice)
        .await
        .expect_error(409);
    let resp = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = resp.text().await.unwrap();
    for needle in [
        r#"chatd_http_requests_total{method="GET",route="/api/v2/chats/{chat}",status="200"}"#,
        r#"chatd_http_requests_total{method="GET",route="/api/v2/chats/{chat}",status="404"}"#,
        r#"chatd_http_requests_total{method="POST",route="/api/v2/chats",status="201"}"#,
        r#"chatd_http_request_duration_seconds_bucket{method="GET",route="/api/v2/chats/{chat}",status="200",le="0.005"}"#,
        r#"chatd_transitions_total{transition="CreateChat",outcome="ok"}"#,
        r#"chatd_transitions_total{transition="Interrupt",outcome="ok"}"#,
        r#"chatd_transitions_total{transition="Interrupt",outcome="rejected"}"#,
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    assert!(
        !text.contains(&id.to_string()),
        "raw paths must not become labels"
    );
}

/// Issue 32 point 8: the document states the constraints the handlers check
/// and the statuses the layers answer (scripts/schemathesis.sh checks the
/// whole of it against a live server; this pins a few by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_states_the_checked_constraints_and_statuses() {
    let s = Server::start().await;
    let doc = s.call("GET", "/api/v2/openapi.json", None, None).await;
    let doc = doc.expect(200).clone();
    let paths = doc["paths"].as_object().unwrap();
    let schemas = &doc["components"]["schemas"];
    // Every mutating chat route (both mounts): the key's form, 400 and 409.
    let mut keyed = 0;
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            let mutating = ["post", "put", "patch", "delete"].contains(&method.as_str());
            let chat_route =
                path.starts_with("/api/v2/chats") || path.starts_with("/api/experimental/chats");
            let key = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == "Idempotency-Key");
            assert_eq!(key.is_some(), mutating && chat_route, "{method} {path}");
            if let Some(key) = key {
                keyed += 1;
                let pattern = key["schema"]["pattern"].as_str().unwrap();
                assert!(pattern.contains("{0,253}"), "{pattern}");
                for status in ["400", "409", "429"] {
                    assert!(
                        op["responses"][status].is_object(),
                        "{method} {path} {status}"
                    );
                }
            }
            if op["requestBody"].is_object() {
                for status in ["408", "413"] {
                    assert!(
                        op["responses"][status].is_object(),
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
    assert!(keyed > 40, "{keyed}");
    let create_model = &schemas["CreateModelConfigRequest"]["properties"];
    assert_eq!(create_model["context_limit"]["minimum"], 1);
    assert_eq!(create_model["compression_threshold"]["maximum"], 100);
    assert!(create_model["model"]["pattern"].is_string());
    let slug = schemas["CreateMcpServerRequest"]["properties"]["slug"]["pattern"]
        .as_str()
        .unwrap();
    assert_eq!(slug, "^[a-z0-9](?:_?[a-z0-9-])*_?$");
    let content = &schemas["CreateChatRequest"]["properties"]["content"];
    assert_eq!(content["minItems"], 1);
    assert!(content["contains"].is_object(), "{content}");
    let lifetime = &schemas["CreateTokenRequest"]["properties"]["lifetime_seconds"];
    assert_eq!(lifetime["minimum"], 1);
    assert_eq!(lifetime["maximum"], 316_224_000);
    assert_eq!(
        schemas["MoveQueuedMessageRequest"]["properties"]["position"]["maximum"],
        i64::MAX
    );
    let label = paths["/api/v2/chats"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "label")
        .unwrap();
    assert!(
        label["schema"]["items"]["pattern"]
            .as_str()
            .unwrap()
            .contains(':')
    );
    let after_id = paths["/api/v2/chats/{chat}/messages"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "after_id")
        .unwrap();
    assert_eq!(after_id["schema"]["minimum"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_is_3_1_and_covers_every_route() {
    let s = Server::start().await;
    let doc = s.call("GET", "/api/v2/openapi.json", None, None).await;
    let doc = doc.expect(200).clone();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    // "Any JSON value" fields must not be typed: tool outputs may be strings.
    let schemas = &doc["components"]["schemas"];
    assert!(
        schemas["ToolResult"]["properties"]["output"]
            .get("type")
            .is_none(),
        "{}",
        schemas["ToolResult"]
    );
    // ChatMessage.finish_reason: nullable, one of the documented values.
    let finish = &schemas["ChatMessage"]["properties"]["finish_reason"];
    assert!(finish.to_string().contains("FinishReason"), "{finish}");
    assert_eq!(
        schemas["FinishReason"]["enum"],
        json!([
            "stop",
            "length",
            "tool_calls",
            "content_filter",
            "interrupted"
        ]),
        "{}",
        schemas["FinishReason"]
    );
    let paths = doc["paths"].as_object().unwrap();
    let expected: &[(&str, &[&str])] = &[
        ("/healthz", &["get"]),
        ("/readyz", &["get"]),
        ("/metrics", &["get"]),
        ("/api/v2/openapi.json", &["get"]),
        ("/api/v2/users", &["post"]),
        ("/api/v2/users/me", &["get"]),
        ("/api/v2/users/{user}/tokens", &["post"]),
        ("/api/v2/replicas", &["get"]),
        ("/api/v2/files", &["post"]),
        ("/api/v2/files/{id}", &["get"]),
        ("/api/v2/chats", &["get", "post"]),
        ("/api/v2/chats/{chat}", &["get", "patch", "delete"]),
        ("/api/v2/chats/{chat}/messages", &["get", "post"]),
        ("/api/v2/chats/{chat}/messages/{message}", &["patch"]),
        ("/api/v2/chats/{chat}/queue/{queued}", &["delete"]),
        ("/api/v2/chats/{chat}/queue/{queued}/promote", &["post"]),
        ("/api/v2/chats/{chat}/interrupt", &["post"]),
        ("/api/v2/chats/{chat}/tool-results", &["post"]),
        ("/api/v2/chats/{chat}/reconcile-invalid", &["post"]),
        ("/api/v2/chats/{chat}/compact", &["post"]),
        ("/api/v2/chats/models", &["get"]),
        ("/api/v2/chats/providers", &["get", "post"]),
        ("/api/v2/chats/providers/{id}", &["patch", "delete"]),
        ("/api/v2/chats/model-configs", &["get", "post"]),
        ("/api/v2/chats/model-configs/{id}", &["patch", "delete"]),
        ("/api/v2/chats/mcp-servers", &["get", "post"]),
        ("/api/v2/chats/mcp-servers/{id}", &["patch", "delete"]),
        ("/api/experimental/chats", &["get", "post"]),
        ("/api/experimental/chats/{chat}/messages", &["get", "post"]),
        ("/api/v2/sessions", &["post"]),
        ("/api/v2/sessions/current", &["get", "delete"]),
        ("/api/v2/users/{user}/password", &["put"]),
        ("/api/v2/chats/{chat}/shares", &["get", "post"]),
        ("/api/v2/chats/{chat}/shares/{user}", &["delete"]),
        ("/api/v2/chats/{chat}/workspace", &["get"]),
        ("/api/v2/chats/{chat}/workspace/file", &["get"]),
        ("/api/v2/chats/{chat}/workspace/archive", &["get"]),
    ];
    for (path, methods) in expected {
        let item = paths
            .get(*path)
            .unwrap_or_else(|| panic!("missing path {path}"));
        for m in *methods {
            let op = &item[*m];
            assert!(op.is_object(), "missing {m} {path}");
            assert!(!op["responses"].as_object().unwrap().is_empty());
            if path.starts_with("/api/v2/chats/{chat}") {
                // Every chat-scoped route documents 401, 404 and the error body.
                for status in ["401", "404"] {
                    let body =
                        &op["responses"][status]["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(
                        body, "#/components/schemas/ErrorBody",
                        "{m} {path} {status}"
                    );
                }
            }
        }
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for schema in [
        "Chat",
        "ChatMessage",
        "ChatQueuedMessage",
        "ChatError",
        "DynamicTool",
        "Usage",
        "ChatMessagePart",
        "ChatInputPart",
        "CreateChatRequest",
        "SendMessageRequest",
        "SendMessageResponse",
        "EditMessageResponse",
        "MessagesPage",
        "ErrorBody",
        "Validation",
        "Provider",
        "ModelConfig",
        "McpServer",
        "User",
        "TokenResponse",
        "Replica",
    ] {
        assert!(schemas.contains_key(schema), "missing schema {schema}");
    }
    let chat_props = schemas["Chat"]["properties"].as_object().unwrap();
    assert_eq!(
        chat_props.len(),
        30,
        "Chat gained context, message_count and last_message_preview (issue 13), subagents (issue 17), active_leaf_id and forked_from (issue 33), workspace (issue 37)"
    );
    // `Chat.workspace`: null or {bytes, files, updated_at}; the file route
    // names its `path` query parameter (required).
    let workspace = chat_props["workspace"].to_string();
    assert!(workspace.contains("null"), "{workspace}");
    let file_params = paths["/api/v2/chats/{chat}/workspace/file"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let path_param = file_params
        .iter()
        .find(|p| p["name"] == "path")
        .expect("the path parameter");
    assert_eq!(path_param["in"], "query");
    assert_eq!(path_param["required"], true);
    assert!(
        schemas["CreateChatRequest"]["properties"]
            .as_object()
            .unwrap()
            .contains_key("workspace")
    );
    assert_eq!(chat_props["subagents"]["type"], "boolean");
    assert!(
        schemas["CreateChatRequest"]["properties"]
            .as_object()
            .unwrap()
            .contains_key("subagents")
    );
    let list_params: Vec<&str> = paths["/api/v2/chats"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(list_params.contains(&"parent_id"), "{list_params:?}");
    assert!(chat_props.contains_key("message_count"));
    assert!(chat_props.contains_key("last_message_preview"));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // A bearer token, or the session cookie of a password sign-in (API.md
    // "Sign-in, search, sharing and export").
    assert_eq!(
        doc["security"],
        serde_json::json!([{"bearer": []}, {"session": []}])
    );
    let session = &doc["components"]["securitySchemes"]["session"];
    assert_eq!(session["type"], "apiKey");
    assert_eq!(session["in"], "cookie");
    assert_eq!(session["name"], "chatd_session");
    assert_eq!(
        paths["/api/v2/sessions"]["post"]["security"],
        serde_json::json!([{}]),
        "signing in needs no credential"
    );
    assert_eq!(
        paths["/healthz"]["get"]["security"],
        serde_json::json!([{}])
    );
    // Operation ids are unique.
    let mut ids = std::collections::HashSet::new();
    for item in paths.values() {
        for op in item.as_object().unwrap().values() {
            if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                assert!(ids.insert(id.to_owned()), "duplicate operationId {id}");
            }
        }
    }
}

/// Issue 36: while the database holds every commit for a synchronous
/// standby that is gone (Patroni's strict mode with no standby left), a
/// write answers `503` with `Retry-After` at once and changes nothing,
/// reads go on, and `/readyz` is not ready; once commits go through again,
/// so do writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_answer_503_at_once_while_the_database_cannot_commit() {
    let s = Server::start().await;
    let id = s.create_chat(&s.alice).await;
    s.state.commit_watch().set(true);
    let refused = s
        .http
        .post(format!("{}/api/v2/chats", s.base))
        .bearer_auth(&s.alice.token)
        .json(&json!({"content": [{"type": "text", "text": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503);
    assert_eq!(refused.headers()["retry-after"], "2");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["detail"], chatd_api::commit_watch::COMMITS_BLOCKED);
    let chats: i64 = sqlx::query_scalar("SELECT count(*) FROM chats")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(chats, 1, "nothing was created");
    s.get(&chat_path(id, ""), &s.alice).await.expect(200);
    s.call("GET", "/readyz", None, None).await.expect_error(503);
    s.state.commit_watch().set(false);
    s.call("GET", "/readyz", None, None).await.expect(200);
    s.create_chat(&s.alice).await;
}

/// The check itself, on a server without synchronous replication: commits
/// are never blocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_synchronous_standbys_never_blocks_commits() {
    let s = Server::start().await;
    assert!(
        !chatd_store::database::commits_blocked(s.pool())
            .await
            .unwrap()
    );
}
