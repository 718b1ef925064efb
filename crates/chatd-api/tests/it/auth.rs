//! Authentication, users, tokens, bootstrap and replicas.

use serde_json::{Value, json};
use sha2::Digest as _;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_token_are_401() {
    let s = Server::start().await;
    let expired = chatd_api::auth::generate_token();
    sqlx::query(
        "INSERT INTO api_keys (id, user_id, name, secret_hash, expires_at) VALUES ($1, $2, 'old', $3, now() - interval '1 second')",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(s.alice.id)
    .bind(chatd_api::auth::hash_token(&expired))
    .execute(s.pool())
    .await
    .unwrap();
    let chat = s.create_chat(&s.alice).await;
    let routes = [
        ("GET", "/api/v2/users/me".to_owned()),
        ("GET", "/api/v2/chats".to_owned()),
        ("POST", "/api/v2/chats".to_owned()),
        ("GET", chat_path(chat, "")),
        ("POST", chat_path(chat, "/messages")),
        ("GET", "/api/v2/chats/models".to_owned()),
        ("GET", "/api/v2/replicas".to_owned()),
        ("POST", "/api/v2/users".to_owned()),
        // 401 comes before 400 for a malformed path.
        ("GET", "/api/v2/chats/not-a-uuid".to_owned()),
        ("GET", "/api/experimental/chats".to_owned()),
    ];
    for (method, path) in &routes {
        for header in [
            None,
            Some("Bearer nope".to_owned()),
            Some(format!("Bearer {expired}")),
            Some(format!("Basic {}", s.alice.token)),
            Some("Bearer".to_owned()),
        ] {
            let mut req = s.http.request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{}{}", s.base, path),
            );
            if let Some(h) = &header {
                req = req.header("authorization", h);
            }
            let resp = req.body("{}").send().await.unwrap();
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap();
            assert_eq!(status, 401, "{method} {path} with {header:?}");
            assert_error_shape(&body, "");
        }
    }
    // A lowercase scheme works.
    let resp = s
        .http
        .get(format!("{}/api/v2/users/me", s.base))
        .header("authorization", format!("bearer {}", s.alice.token))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_me_and_user_creation() {
    let s = Server::start().await;
    let me = s.get("/api/v2/users/me", &s.alice).await;
    let me = me.expect(200);
    assert_eq!(uuid(&me["id"]), s.alice.id);
    assert_eq!(me["username"], "alice");
    assert_eq!(me["role"], "member");
    assert!(me["created_at"].is_string());
    assert_eq!(me.as_object().unwrap().len(), 6);
    assert_eq!(me["disabled"], false);
    assert!(me["limits"].is_object());

    let created = s
        .post(
            "/api/v2/users",
            &s.admin,
            json!({"username": "carol", "role": "admin"}),
        )
        .await;
    let carol = created.expect(201).clone();
    assert_eq!(carol["username"], "carol");
    assert_eq!(carol["role"], "admin");
    s.post(
        "/api/v2/users",
        &s.admin,
        json!({"username": "carol", "role": "member"}),
    )
    .await
    .expect_error(409);
    s.post(
        "/api/v2/users",
        &s.alice,
        json!({"username": "dave", "role": "member"}),
    )
    .await
    .expect_error(403);
    for (body, field) in [
        (json!({"username": "", "role": "member"}), "username"),
        (json!({"username": "a b", "role": "member"}), "username"),
        (
            json!({"username": "x".repeat(65), "role": "member"}),
            "username",
        ),
        (json!({"username": "dave", "role": "owner"}), "role"),
        (json!({"username": "dave"}), "role"),
        (json!({"role": "member"}), "username"),
        (json!({"username": 5, "role": "member"}), "username"),
    ] {
        let answer = s.post("/api/v2/users", &s.admin, body.clone()).await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), vec![field.to_owned()], "{body}");
    }

    // Tokens: for me, for myself by id, by an admin for anyone.
    for (user, path) in [
        (&s.alice, "/api/v2/users/me/tokens".to_owned()),
        (&s.alice, format!("/api/v2/users/{}/tokens", s.alice.id)),
        (&s.admin, format!("/api/v2/users/{}/tokens", s.alice.id)),
    ] {
        let answer = s.post(&path, user, json!({"name": "laptop"})).await;
        let body = answer.expect(201).clone();
        assert_eq!(body.as_object().unwrap().len(), 2);
        let token = body["token"].as_str().unwrap().to_owned();
        assert!(token.starts_with("chatd_") && token.len() >= 40);
        let who = s.call("GET", "/api/v2/users/me", Some(&token), None).await;
        assert_eq!(uuid(&who.expect(200)["id"]), s.alice.id);
        // Stored hashed only.
        let stored: Vec<u8> = sqlx::query_scalar("SELECT secret_hash FROM api_keys WHERE id = $1")
            .bind(uuid(&body["id"]))
            .fetch_one(s.pool())
            .await
            .unwrap();
        assert_eq!(stored, sha2::Sha256::digest(token.as_bytes()).to_vec());
    }
    // A member for someone else: 403 (existing or not); admin for unknown: 404.
    s.post(
        &format!("/api/v2/users/{}/tokens", s.bob.id),
        &s.alice,
        json!({}),
    )
    .await
    .expect_error(403);
    s.post(
        &format!("/api/v2/users/{}/tokens", uuid::Uuid::new_v4()),
        &s.alice,
        json!({}),
    )
    .await
    .expect_error(403);
    s.post(
        &format!("/api/v2/users/{}/tokens", uuid::Uuid::new_v4()),
        &s.admin,
        json!({}),
    )
    .await
    .expect_error(404);
    s.post("/api/v2/users/someone/tokens", &s.admin, json!({}))
        .await
        .expect_error(400);
    for bad in [
        json!({"lifetime_seconds": 0}),
        json!({"lifetime_seconds": -5}),
        json!({"lifetime_seconds": 1e20}),
        json!({"name": 3}),
    ] {
        s.post("/api/v2/users/me/tokens", &s.alice, bad)
            .await
            .expect_error(400);
    }
    // A token with a lifetime expires.
    let short = s
        .post(
            "/api/v2/users/me/tokens",
            &s.alice,
            json!({"lifetime_seconds": 3600}),
        )
        .await;
    let short = short.expect(201)["token"].as_str().unwrap().to_owned();
    s.call("GET", "/api/v2/users/me", Some(&short), None)
        .await
        .expect(200);
    sqlx::query(
        "UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL",
    )
    .execute(s.pool())
    .await
    .unwrap();
    s.call("GET", "/api/v2/users/me", Some(&short), None)
        .await
        .expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_admin_is_idempotent_and_concurrent_safe() {
    let s = Server::start().await;
    let token = "bootstrap-secret-token-0123456789";
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let pool = s.pool().clone();
        tasks.push(tokio::spawn(async move {
            chatd_api::bootstrap_admin(&pool, token).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    chatd_api::bootstrap_admin(s.pool(), token).await.unwrap();
    let me = s.call("GET", "/api/v2/users/me", Some(token), None).await;
    let me = me.expect(200);
    assert_eq!(me["username"], "admin");
    assert_eq!(me["role"], "admin");
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM users WHERE username = 'admin'), (SELECT count(*) FROM api_keys WHERE name = 'bootstrap')",
    )
    .fetch_one(s.pool())
    .await
    .unwrap();
    assert_eq!(counts, (1, 1));
    assert!(chatd_api::bootstrap_admin(s.pool(), "  ").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_token_creates_users_and_promotes_with_admin() {
    let s = Server::start().await;
    let t1 = chatd_api::create_token(s.pool(), "erin", false)
        .await
        .unwrap();
    let me = s.call("GET", "/api/v2/users/me", Some(&t1), None).await;
    assert_eq!(me.expect(200)["role"], "member");
    let t2 = chatd_api::create_token(s.pool(), "erin", true)
        .await
        .unwrap();
    assert_ne!(t1, t2);
    let me = s.call("GET", "/api/v2/users/me", Some(&t1), None).await;
    assert_eq!(me.expect(200)["role"], "admin");
    assert!(
        chatd_api::create_token(s.pool(), "bad name", false)
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_listed_for_admins_only() {
    let s = Server::start().await;
    let id = uuid::Uuid::new_v4();
    sqlx::query("INSERT INTO replicas (id, advertise_url) VALUES ($1, 'http://127.0.0.1:3001')")
        .bind(id)
        .execute(s.pool())
        .await
        .unwrap();
    let answer = s.get("/api/v2/replicas", &s.admin).await;
    let list = answer.expect(200).as_array().unwrap().clone();
    assert_eq!(list.len(), 1);
    assert_eq!(uuid(&list[0]["id"]), id);
    assert_eq!(list[0]["advertise_url"], "http://127.0.0.1:3001");
    assert!(list[0]["started_at"].is_string() && list[0]["last_seen_at"].is_string());
    s.get("/api/v2/replicas", &s.alice).await.expect_error(403);
}
