//! Per-user request rate limits (API.md "Limits, budgets and the token
//! lifecycle": "Request rate").

use serde_json::json;

use crate::common::*;

/// Sets `user`'s `requests_per_minute` override (`null`: the default).
async fn set_rpm(s: &Server, user: &User, rpm: serde_json::Value) {
    s.patch(
        &format!("/api/v2/users/{}", user.id),
        &s.admin,
        json!({"limits": {"requests_per_minute": rpm}}),
    )
    .await
    .expect(200);
}

async fn chat_count(s: &Server) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM chats")
        .fetch_one(s.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_rate_limit_requests_are_429_with_retry_after_and_change_nothing() {
    let s = Server::start().await;
    set_rpm(&s, &s.alice, json!(3)).await;
    for _ in 0..3 {
        s.get("/api/v2/users/me", &s.alice).await.expect(200);
    }
    let (answer, headers) = s
        .call_with_headers("GET", "/api/v2/users/me", &s.alice, None, &[])
        .await;
    answer.expect_error(429);
    assert!(answer.body["detail"].as_str().unwrap().contains('3'));
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    // One request refills every 20 s.
    assert!((1..=20).contains(&retry_after), "{retry_after}");

    // A mutation past the limit changes nothing.
    let before = chat_count(&s).await;
    let (answer, headers) = s
        .call_with_headers(
            "POST",
            "/api/v2/chats",
            &s.alice,
            Some(json!({"content": [{"type": "text", "text": "hi"}]})),
            &[],
        )
        .await;
    answer.expect_error(429);
    assert!(headers.contains_key("retry-after"));
    assert_eq!(chat_count(&s).await, before);
    // So does a keyed one, and its key is not taken.
    let (answer, _) = s
        .call_with_headers(
            "POST",
            "/api/v2/chats",
            &s.alice,
            Some(json!({"content": [{"type": "text", "text": "hi"}]})),
            &[("idempotency-key", "k-1")],
        )
        .await;
    answer.expect_error(429);
    assert_eq!(chat_count(&s).await, before);
    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM idempotency_keys")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(keys, 0);

    // Another user is unaffected, by many requests.
    for _ in 0..10 {
        s.get("/api/v2/users/me", &s.bob).await.expect(200);
    }
    // The admin returns alice to the default: a fresh allowance at once.
    set_rpm(&s, &s.alice, serde_json::Value::Null).await;
    for _ in 0..5 {
        s.get("/api/v2/users/me", &s.alice).await.expect(200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_fails_with_401_before_the_rate_limit() {
    let s = Server::start().await;
    let revoked = s.post("/api/v2/users/me/tokens", &s.alice, json!({})).await;
    let revoked = revoked.expect(201).clone();
    let revoked_token = revoked["token"].as_str().unwrap().to_owned();
    s.delete(
        &format!("/api/v2/users/me/tokens/{}", uuid(&revoked["id"])),
        &s.alice,
    )
    .await
    .expect(204);
    set_rpm(&s, &s.alice, json!(1)).await;
    s.get("/api/v2/users/me", &s.alice).await.expect(200);
    s.get("/api/v2/users/me", &s.alice).await.expect_error(429);
    // Alice is over her limit, yet a revoked token of hers, no token, or a
    // bad one is 401.
    for token in [Some(revoked_token.as_str()), None, Some("chatd_nope")] {
        s.call("GET", "/api/v2/users/me", token, None)
            .await
            .expect_error(401);
    }
    // Disabled and over the limit: 401.
    s.patch(
        &format!("/api/v2/users/{}", s.alice.id),
        &s.admin,
        json!({"disabled": true}),
    )
    .await
    .expect(200);
    s.get("/api/v2/users/me", &s.alice).await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_counts_once_even_when_authenticated_twice() {
    let s = Server::start().await;
    set_rpm(&s, &s.alice, json!(2)).await;
    // The idempotency layer authenticates, then the handler's extractor
    // reuses its caller: one request, one count.
    let (answer, _) = s
        .call_with_headers(
            "POST",
            "/api/v2/chats",
            &s.alice,
            Some(json!({"content": [{"type": "text", "text": "hi"}]})),
            &[("idempotency-key", "once")],
        )
        .await;
    let chat = uuid(&answer.expect(201)["id"]);
    // Had it counted twice, this second request would be refused.
    s.get(&chat_path(chat, ""), &s.alice).await.expect(200);
    s.get("/api/v2/users/me", &s.alice).await.expect_error(429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_apply_to_admins_as_to_anyone() {
    let s = Server::start().await;
    s.patch(
        "/api/v2/users/me",
        &s.admin,
        json!({"limits": {"requests_per_minute": 2}}),
    )
    .await
    .expect(200);
    // The PATCH itself counted under the old limit; two more now.
    s.get("/api/v2/users", &s.admin).await.expect(200);
    s.get("/api/v2/users", &s.admin).await.expect(200);
    s.get("/api/v2/users", &s.admin).await.expect_error(429);
}
