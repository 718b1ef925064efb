//! Authorization isolation between two members and an admin, route by
//! route: another member's chat is `404` exactly like a chat that does not
//! exist (never `403`, never its data); owner-only mutations are `403` for an
//! admin; admin mutations are `403` for members.

use chatd_core::ExecutionState::*;
use serde_json::json;

use crate::common::*;

/// Every chat route with a valid body, for chat `id` (message and queued ids
/// taken from the chat).
async fn chat_routes(
    s: &Server,
    id: uuid::Uuid,
) -> Vec<(&'static str, String, Option<serde_json::Value>)> {
    let message = s.message_ids(id).await[0];
    let queued = s.queue_ids(id).await.first().copied().unwrap_or(1);
    vec![
        ("GET", chat_path(id, ""), None),
        (
            "PATCH",
            chat_path(id, ""),
            Some(json!({"title": "mine now"})),
        ),
        ("DELETE", chat_path(id, ""), None),
        ("GET", chat_path(id, "/messages"), None),
        ("POST", chat_path(id, "/messages"), Some(text("hi"))),
        (
            "PATCH",
            chat_path(id, &format!("/messages/{message}")),
            Some(text("edit")),
        ),
        ("DELETE", chat_path(id, &format!("/queue/{queued}")), None),
        (
            "POST",
            chat_path(id, &format!("/queue/{queued}/promote")),
            None,
        ),
        ("POST", chat_path(id, "/interrupt"), None),
        (
            "POST",
            chat_path(id, "/tool-results"),
            Some(json!({"results": []})),
        ),
        ("POST", chat_path(id, "/reconcile-invalid"), None),
        ("POST", chat_path(id, "/compact"), None),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_members_chat_is_404_on_every_route_and_changes_nothing() {
    let s = Server::start().await;
    let alices = s.chat_in(&s.alice, R1).await;
    let before = s.dump().await;
    let missing = s.get(&chat_path(uuid::Uuid::new_v4(), ""), &s.bob).await;
    for (method, path, body) in chat_routes(&s, alices).await {
        let answer = s.call(method, &path, Some(&s.bob.token), body).await;
        answer.expect_error(404);
        assert_eq!(answer.body, missing.body, "{method} {path}");
        assert!(
            !answer.text.contains(&alices.to_string()),
            "{method} {path} leaks the id"
        );
        // Same on the experimental mount.
        let exp = path.replace("/api/v2/chats", "/api/experimental/chats");
        s.call(method, &exp, Some(&s.bob.token), None)
            .await
            .expect_error(404);
    }
    // Oversized bodies are 404 too: visibility is checked before the body.
    let big = vec![b'x'; 2 * 1024 * 1024];
    s.raw(
        "POST",
        &chat_path(alices, "/messages"),
        Some(&s.bob.token),
        Some(big),
    )
    .await
    .expect_error(404);
    assert_eq!(s.dump().await, before);
    // Bob's list does not show it; he cannot use it as a parent.
    let list = s.get("/api/v2/chats", &s.bob).await;
    assert!(!list.text.contains(&alices.to_string()));
    s.post(
        "/api/v2/chats",
        &s.bob,
        json!({"content": [{"type": "text", "text": "x"}], "parent_chat_id": alices}),
    )
    .await
    .expect_error(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_see_every_chat_but_owner_only_mutations_are_403() {
    let s = Server::start().await;
    // Owner-only: send, edit, promote, tool results, compact.
    let e1 = s.chat_in(&s.alice, E1).await;
    let a0 = s.chat_in(&s.alice, A0).await;
    let w = s.chat_in(&s.alice, W).await;
    let before = s.dump().await;
    let queued = s.queue_ids(e1).await[0];
    let first = s.message_ids(e1).await[0];
    for (path, body) in [
        (chat_path(e1, "/messages"), Some(text("hi"))),
        (chat_path(e1, &format!("/queue/{queued}/promote")), None),
        (
            chat_path(a0, "/tool-results"),
            Some(json!({"results": [{"tool_call_id": PENDING_CALL, "output": 1}]})),
        ),
        (chat_path(w, "/compact"), None),
    ] {
        s.call("POST", &path, Some(&s.admin.token), body)
            .await
            .expect_error(403);
    }
    s.call(
        "PATCH",
        &chat_path(e1, &format!("/messages/{first}")),
        Some(&s.admin.token),
        Some(text("x")),
    )
    .await
    .expect_error(403);
    assert_eq!(s.dump().await, before);
    // Reads and the other mutations work for an admin.
    s.get(&chat_path(e1, ""), &s.admin).await.expect(200);
    s.get(&chat_path(e1, "/messages"), &s.admin)
        .await
        .expect(200);
    let list = s
        .get(&format!("/api/v2/chats?owner={}", s.alice.id), &s.admin)
        .await;
    assert_eq!(list.expect(200).as_array().unwrap().len(), 3);
    s.patch(&chat_path(e1, ""), &s.admin, json!({"title": "moderated"}))
        .await
        .expect(200);
    s.post_empty(&chat_path(a0, "/interrupt"), &s.admin)
        .await
        .expect(200);
    s.delete(&chat_path(e1, &format!("/queue/{queued}")), &s.admin)
        .await
        .expect(204);
    let invalid = s.chat_in(&s.alice, Invalid).await;
    s.post_empty(&chat_path(invalid, "/reconcile-invalid"), &s.admin)
        .await
        .expect(200);
    s.delete(&chat_path(w, ""), &s.admin).await.expect(204);
    // A member reading the other member's chats through owner=: 403.
    s.get(&format!("/api/v2/chats?owner={}", s.alice.id), &s.bob)
        .await
        .expect_error(403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_get_403_on_every_admin_mutation() {
    let s = Server::start().await;
    let config = s.model_config().await;
    let provider: uuid::Uuid = sqlx::query_scalar("SELECT id FROM chat_providers LIMIT 1")
        .fetch_one(s.pool())
        .await
        .unwrap();
    let mcp = s
        .post(
            "/api/v2/chats/mcp-servers",
            &s.admin,
            json!({"slug": "m", "transport": "stdio", "command": "x"}),
        )
        .await;
    let mcp = mcp.expect(201)["id"].as_str().unwrap().to_owned();
    let before = s.dump().await;
    let routes = [
        (
            "POST",
            "/api/v2/users".to_owned(),
            json!({"username": "x", "role": "admin"}),
        ),
        (
            "POST",
            format!("/api/v2/users/{}/tokens", s.admin.id),
            json!({}),
        ),
        (
            "POST",
            "/api/v2/chats/providers".to_owned(),
            json!({"provider": "openai"}),
        ),
        (
            "PATCH",
            format!("/api/v2/chats/providers/{provider}"),
            json!({"enabled": false}),
        ),
        (
            "DELETE",
            format!("/api/v2/chats/providers/{provider}"),
            json!(null),
        ),
        (
            "POST",
            "/api/v2/chats/model-configs".to_owned(),
            json!({"provider_id": provider, "model": "m", "context_limit": 1}),
        ),
        (
            "PATCH",
            format!("/api/v2/chats/model-configs/{config}"),
            json!({"enabled": false}),
        ),
        (
            "DELETE",
            format!("/api/v2/chats/model-configs/{config}"),
            json!(null),
        ),
        (
            "POST",
            "/api/v2/chats/mcp-servers".to_owned(),
            json!({"slug": "n", "transport": "stdio", "command": "x"}),
        ),
        (
            "PATCH",
            format!("/api/v2/chats/mcp-servers/{mcp}"),
            json!({"enabled": false}),
        ),
        (
            "DELETE",
            format!("/api/v2/chats/mcp-servers/{mcp}"),
            json!(null),
        ),
        ("GET", "/api/v2/replicas".to_owned(), json!(null)),
    ];
    for member in [&s.alice, &s.bob] {
        for (method, path, body) in &routes {
            let body = (!body.is_null()).then(|| body.clone());
            s.call(method, path, Some(&member.token), body)
                .await
                .expect_error(403);
        }
    }
    assert_eq!(s.dump().await, before);
    // Listing is open to members, without secrets.
    let models = s.get("/api/v2/chats/models", &s.alice).await;
    assert_eq!(models.expect(200).as_array().unwrap().len(), 1);
    assert!(
        !s.get("/api/v2/chats/providers", &s.alice)
            .await
            .text
            .contains("sk-secret")
    );
}
