//! `Idempotency-Key` (API.md "Idempotency"): a repeat answers the first
//! response and changes nothing, a different route or body is `409`, keys
//! are per user, concurrent duplicates wait for the first, failures are not
//! remembered, and expired keys count as absent.

use std::sync::Arc;

use chatd_core::ExecutionState::*;
use chatd_testkit::store::Step;
use serde_json::{Value, json};

use crate::common::*;

fn send_body(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_returns_the_first_response_even_after_the_chat_moved_on() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, W).await;
    let path = chat_path(id, "/messages");
    let key = [("Idempotency-Key", "send-1")];
    let (first, headers) = s
        .call_with_headers("POST", &path, &s.alice, Some(send_body("hi")), &key)
        .await;
    first.expect(200);
    assert!(headers.get("idempotent-replayed").is_none());
    // The chat moves on: the turn ends and another message is sent.
    s.step(id, Step::FinishTurn).await;
    s.post(&path, &s.alice, send_body("other"))
        .await
        .expect(200);
    let before = s.dump().await;
    for repeat_path in [path.clone(), path.replace("/api/v2/", "/api/experimental/")] {
        let (again, headers) = s
            .call_with_headers("POST", &repeat_path, &s.alice, Some(send_body("hi")), &key)
            .await;
        assert_eq!(again.status, 200);
        assert_eq!(again.body, first.body, "{repeat_path}");
        assert_eq!(headers["idempotent-replayed"], "true");
        assert_eq!(headers["content-type"], "application/json");
    }
    assert_eq!(s.dump().await, before, "a repeat changes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mutating_chat_route_takes_a_key() {
    let s = Server::start().await;
    // POST /chats: 201, replayed with its status.
    let create = json!({"content": [{"type": "text", "text": "hello"}]});
    let key = [("Idempotency-Key", "create-1")];
    let (first, _) = s
        .call_with_headers(
            "POST",
            "/api/v2/chats",
            &s.alice,
            Some(create.clone()),
            &key,
        )
        .await;
    first.expect(201);
    let (again, _) = s
        .call_with_headers("POST", "/api/v2/chats", &s.alice, Some(create), &key)
        .await;
    assert_eq!((again.status, &again.body), (201, &first.body));
    let chats: i64 = sqlx::query_scalar("SELECT count(*) FROM chats")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(chats, 1, "created once");
    // POST /interrupt: the answer stays the interrupting chat.
    let id = s.chat_in(&s.alice, R0).await;
    let key = [("Idempotency-Key", "stop-1")];
    let path = chat_path(id, "/interrupt");
    let (first, _) = s
        .call_with_headers("POST", &path, &s.alice, None, &key)
        .await;
    assert_eq!(first.expect(200)["status"], "interrupting");
    s.apply(id, |tx| {
        Box::pin(async move { tx.finish_interruption(vec![]).await.map(|_| ()) })
    })
    .await;
    let (again, _) = s
        .call_with_headers("POST", &path, &s.alice, None, &key)
        .await;
    assert_eq!((again.status, &again.body), (200, &first.body));
    assert_eq!(s.state(id).await, W);
    // DELETE /queue/{queued}: 204, replayed without a second delete.
    let id = s.two_queued(&s.alice, R1).await;
    let head = s.queue_ids(id).await[0];
    let key = [("Idempotency-Key", "drop-1")];
    let path = chat_path(id, &format!("/queue/{head}"));
    let (first, _) = s
        .call_with_headers("DELETE", &path, &s.alice, None, &key)
        .await;
    first.expect(204);
    let (again, headers) = s
        .call_with_headers("DELETE", &path, &s.alice, None, &key)
        .await;
    assert_eq!(again.status, 204);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(s.queue_ids(id).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_another_body_or_route_is_409_and_changes_nothing() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, R0).await;
    let path = chat_path(id, "/messages");
    let key = [("Idempotency-Key", "k")];
    s.call_with_headers("POST", &path, &s.alice, Some(send_body("a")), &key)
        .await
        .0
        .expect(200);
    let before = s.dump().await;
    let other = s.chat_in(&s.alice, R0).await;
    let conflicts = [
        ("POST", path.clone(), Some(send_body("b"))),
        ("POST", chat_path(other, "/messages"), Some(send_body("a"))),
        ("POST", chat_path(id, "/interrupt"), None),
    ];
    let before_other = s.dump().await;
    for (method, p, body) in conflicts {
        let (answer, _) = s.call_with_headers(method, &p, &s.alice, body, &key).await;
        answer.expect_error(409);
        assert!(
            answer.message().contains("Idempotency-Key"),
            "{}",
            answer.text
        );
        assert_eq!(
            s.dump().await,
            before_other,
            "{method} {p} changed something"
        );
    }
    // Key order and whitespace of the JSON do not make another body.
    let reordered = br#"{ "content" : [ { "text": "a", "type": "text" } ] }"#.to_vec();
    let answer = s
        .http
        .post(format!("{}{}", s.base, path))
        .bearer_auth(&s.alice.token)
        .header("content-type", "application/json")
        .header("Idempotency-Key", "k")
        .body(reordered)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["idempotent-replayed"], "true");
    let _ = before;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_per_user_and_failures_are_not_remembered() {
    let s = Server::start().await;
    let alice_chat = s.chat_in(&s.alice, W).await;
    let bob_chat = s.chat_in(&s.bob, W).await;
    let key = [("Idempotency-Key", "shared-text")];
    let (a, _) = s
        .call_with_headers(
            "POST",
            &chat_path(alice_chat, "/messages"),
            &s.alice,
            Some(send_body("a")),
            &key,
        )
        .await;
    a.expect(200);
    let (b, headers) = s
        .call_with_headers(
            "POST",
            &chat_path(bob_chat, "/messages"),
            &s.bob,
            Some(send_body("b")),
            &key,
        )
        .await;
    b.expect(200);
    assert!(
        headers.get("idempotent-replayed").is_none(),
        "bob's key is his own"
    );
    // A refused request changed nothing and is not stored: once the chat
    // allows it, the same key and body run.
    let busy = s.chat_in(&s.alice, R0).await;
    let reject = json!({"content": [{"type": "text", "text": "x"}], "busy_behavior": "reject"});
    let key = [("Idempotency-Key", "retry-me")];
    let path = chat_path(busy, "/messages");
    let (refused, _) = s
        .call_with_headers("POST", &path, &s.alice, Some(reject.clone()), &key)
        .await;
    refused.expect_error(409);
    s.step(busy, Step::FinishTurn).await;
    let (ran, headers) = s
        .call_with_headers("POST", &path, &s.alice, Some(reject), &key)
        .await;
    assert_eq!(ran.expect(200)["queued"], false);
    assert!(headers.get("idempotent-replayed").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_are_400_naming_the_header_and_change_nothing() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, W).await;
    let path = chat_path(id, "/messages");
    let before = s.dump().await;
    let long = "k".repeat(256);
    for bad in ["", long.as_str(), "tab\there"] {
        let (answer, _) = s
            .call_with_headers(
                "POST",
                &path,
                &s.alice,
                Some(send_body("x")),
                &[("Idempotency-Key", bad)],
            )
            .await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), vec!["Idempotency-Key"], "{bad:?}");
    }
    let answer = s
        .http
        .post(format!("{}{}", s.base, path))
        .bearer_auth(&s.alice.token)
        .header("content-type", "application/json")
        .header(
            "Idempotency-Key",
            reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        )
        .body(serde_json::to_vec(&send_body("x")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    // No token: 401 first, key or not.
    let answer = s
        .http
        .post(format!("{}{}", s.base, path))
        .header("Idempotency-Key", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    assert_eq!(s.dump().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_wait_for_the_first_and_get_its_response() {
    let s = Arc::new(Server::start().await);
    let id = s.chat_in(&s.alice, W).await;
    let path = chat_path(id, "/messages");
    let barrier = Arc::new(tokio::sync::Barrier::new(12));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let (s, path, barrier) = (s.clone(), path.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            s.call_with_headers(
                "POST",
                &path,
                &s.alice,
                Some(send_body("once")),
                &[("Idempotency-Key", "dup")],
            )
            .await
        });
    }
    let mut bodies = Vec::new();
    let mut replayed = 0;
    while let Some(joined) = tasks.join_next().await {
        let (answer, headers) = joined.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text);
        replayed += usize::from(headers.get("idempotent-replayed").is_some());
        bodies.push(answer.body);
    }
    assert!(
        bodies.iter().all(|b| *b == bodies[0]),
        "one response for all"
    );
    assert_eq!(replayed, 11, "one ran, eleven waited for it");
    let sent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND content @> '[{\"text\": \"once\"}]'",
    )
    .bind(id)
    .fetch_one(s.pool())
    .await
    .unwrap();
    assert_eq!(sent, 1, "the send happened once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_counts_as_absent() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, R0).await;
    let path = chat_path(id, "/messages");
    let key = [("Idempotency-Key", "old")];
    s.call_with_headers("POST", &path, &s.alice, Some(send_body("a")), &key)
        .await
        .0
        .expect(200);
    let expires: Option<bool> = sqlx::query_scalar(
        "SELECT expires_at BETWEEN now() + interval '23 hours 59 minutes' AND now() + interval '24 hours' FROM idempotency_keys",
    )
    .fetch_optional(s.pool())
    .await
    .unwrap();
    assert_eq!(expires, Some(true), "kept 24 hours");
    sqlx::query("UPDATE idempotency_keys SET expires_at = now() - interval '1 second'")
        .execute(s.pool())
        .await
        .unwrap();
    // Past its expiry, even another body may use the key.
    let (again, headers) = s
        .call_with_headers("POST", &path, &s.alice, Some(send_body("b")), &key)
        .await;
    again.expect(200);
    assert!(headers.get("idempotent-replayed").is_none());
    assert_eq!(s.queue_ids(id).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_names_the_header_on_mutating_chat_routes_only() {
    let s = Server::start().await;
    let doc = s.call("GET", "/api/v2/openapi.json", None, None).await.body;
    let names = |path: &str, method: &str| -> Vec<String> {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter_map(|p| p["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    for (path, method) in [
        ("/api/v2/chats", "post"),
        ("/api/v2/chats/{chat}/messages", "post"),
        ("/api/experimental/chats/{chat}/messages", "post"),
        ("/api/v2/chats/{chat}/queue/{queued}", "patch"),
        ("/api/v2/chats/{chat}", "delete"),
    ] {
        assert!(
            names(path, method).contains(&"Idempotency-Key".to_owned()),
            "{method} {path}"
        );
    }
    assert!(!names("/api/v2/chats/{chat}/messages", "get").contains(&"Idempotency-Key".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_with_a_key_keeps_the_order_of_checks_and_is_not_stored() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, W).await;
    let big = json!({"content": [{"type": "text", "text": "x".repeat(1_100_000)}]});
    let before = s.dump().await;
    // Not visible: 404 before 413, key or not.
    let (hidden, _) = s
        .call_with_headers(
            "POST",
            &chat_path(id, "/messages"),
            &s.bob,
            Some(big.clone()),
            &[("Idempotency-Key", "big")],
        )
        .await;
    hidden.expect_error(404);
    let (own, _) = s
        .call_with_headers(
            "POST",
            &chat_path(id, "/messages"),
            &s.alice,
            Some(big),
            &[("Idempotency-Key", "big")],
        )
        .await;
    own.expect_error(413);
    assert_eq!(s.dump().await, before);
}
