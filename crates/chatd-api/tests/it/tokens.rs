//! The token lifecycle: listing, revoking, `last_used_at`, member token
//! lifetimes (API.md "Limits, budgets and the token lifecycle").

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::common::*;

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .unwrap_or_else(|| panic!("not a time: {v}"))
        .with_timezone(&Utc)
}

async fn new_token(s: &Server, path: &str, user: &User, body: Value) -> (uuid::Uuid, String) {
    let answer = s.post(path, user, body).await;
    let body = answer.expect(201);
    (
        uuid(&body["id"]),
        body["token"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_listed_newest_first_without_secrets() {
    let s = Server::start().await;
    let (laptop, laptop_token) = new_token(
        &s,
        "/api/v2/users/me/tokens",
        &s.alice,
        json!({"name": "laptop"}),
    )
    .await;
    let (ci, ci_token) = new_token(
        &s,
        "/api/v2/users/me/tokens",
        &s.alice,
        json!({"name": "ci", "lifetime_seconds": 3600}),
    )
    .await;
    let answer = s.get("/api/v2/users/me/tokens", &s.alice).await;
    let list = answer.expect(200).as_array().unwrap().clone();
    // The harness's own token (`cli`) first made, then laptop, then ci.
    let names: Vec<_> = list.iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, [json!("ci"), json!("laptop"), json!("cli")]);
    assert_eq!(uuid(&list[0]["id"]), ci);
    assert_eq!(uuid(&list[1]["id"]), laptop);
    for token in &list {
        let mut keys: Vec<_> = token.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            ["created_at", "expires_at", "id", "last_used_at", "name"]
        );
    }
    for secret in [&laptop_token, &ci_token, &s.alice.token] {
        assert!(!answer.text.contains(secret.as_str()));
    }
    let ci_row = &list[0];
    let lifetime = time(&ci_row["expires_at"]) - time(&ci_row["created_at"]);
    assert!((lifetime.num_seconds() - 3600).abs() <= 2, "{lifetime}");
    // The harness token was used by the GET above; the new ones never.
    assert!(list[2]["last_used_at"].is_string());
    assert_eq!(list[0]["last_used_at"], Value::Null);
    assert_eq!(list[1]["last_used_at"], Value::Null);

    // By id, and by an admin; the same list.
    let by_id = s
        .get(&format!("/api/v2/users/{}/tokens", s.alice.id), &s.alice)
        .await;
    assert_eq!(by_id.expect(200).as_array().unwrap().len(), 3);
    let by_admin = s
        .get(&format!("/api/v2/users/{}/tokens", s.alice.id), &s.admin)
        .await;
    assert_eq!(by_admin.expect(200).as_array().unwrap().len(), 3);
    // A member for another user: 403, existing or not; admin, unknown: 404.
    s.get(&format!("/api/v2/users/{}/tokens", s.alice.id), &s.bob)
        .await
        .expect_error(403);
    s.get(
        &format!("/api/v2/users/{}/tokens", uuid::Uuid::new_v4()),
        &s.bob,
    )
    .await
    .expect_error(403);
    s.get(
        &format!("/api/v2/users/{}/tokens", uuid::Uuid::new_v4()),
        &s.admin,
    )
    .await
    .expect_error(404);
    s.get("/api/v2/users/nobody/tokens", &s.admin)
        .await
        .expect_error(400);
    s.call("GET", "/api/v2/users/me/tokens", None, None)
        .await
        .expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_used_at_is_set_on_use_at_most_once_a_minute() {
    let s = Server::start().await;
    let (id, token) = new_token(&s, "/api/v2/users/me/tokens", &s.alice, json!({})).await;
    let last_used = || async {
        sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
            "SELECT last_used_at FROM api_keys WHERE id = $1",
        )
        .bind(id)
        .fetch_one(s.pool())
        .await
        .unwrap()
    };
    assert_eq!(last_used().await, None);
    s.call("GET", "/api/v2/users/me", Some(&token), None)
        .await
        .expect(200);
    let first = last_used().await.expect("set on use");
    s.call("GET", "/api/v2/users/me", Some(&token), None)
        .await
        .expect(200);
    assert_eq!(
        last_used().await,
        Some(first),
        "not rewritten within a minute"
    );
    // A minute later, the next use writes it again.
    sqlx::query(
        "UPDATE api_keys SET last_used_at = last_used_at - interval '61 seconds' WHERE id = $1",
    )
    .bind(id)
    .execute(s.pool())
    .await
    .unwrap();
    s.call("GET", "/api/v2/users/me", Some(&token), None)
        .await
        .expect(200);
    assert!(last_used().await.unwrap() >= first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_401_and_leaves_the_list() {
    let s = Server::start().await;
    let (id, token) = new_token(&s, "/api/v2/users/me/tokens", &s.alice, json!({})).await;
    s.call("GET", "/api/v2/users/me", Some(&token), None)
        .await
        .expect(200);
    // Another member cannot revoke it, by either path.
    s.delete(&format!("/api/v2/users/{}/tokens/{id}", s.alice.id), &s.bob)
        .await
        .expect_error(403);
    s.delete(&format!("/api/v2/users/me/tokens/{id}"), &s.bob)
        .await
        .expect_error(404);
    s.call("GET", "/api/v2/users/me", Some(&token), None)
        .await
        .expect(200);
    // Bad ids.
    s.delete("/api/v2/users/me/tokens/not-a-uuid", &s.alice)
        .await
        .expect_error(400);
    s.call(
        "DELETE",
        &format!("/api/v2/users/me/tokens/{id}"),
        None,
        None,
    )
    .await
    .expect_error(401);

    let answer = s
        .delete(&format!("/api/v2/users/me/tokens/{id}"), &s.alice)
        .await;
    assert_eq!(answer.status, 204, "{}", answer.text);
    assert!(answer.text.is_empty());
    s.call("GET", "/api/v2/users/me", Some(&token), None)
        .await
        .expect_error(401);
    s.delete(&format!("/api/v2/users/me/tokens/{id}"), &s.alice)
        .await
        .expect_error(404);
    let list = s.get("/api/v2/users/me/tokens", &s.alice).await;
    let ids: Vec<_> = list
        .expect(200)
        .as_array()
        .unwrap()
        .iter()
        .map(|t| uuid(&t["id"]))
        .collect();
    assert!(!ids.contains(&id));
    assert_eq!(ids.len(), 1, "the harness token stays");
    // The harness token still works.
    s.get("/api/v2/users/me", &s.alice).await.expect(200);

    // An admin revokes a member's token.
    let (id, token) = new_token(&s, "/api/v2/users/me/tokens", &s.bob, json!({})).await;
    s.delete(&format!("/api/v2/users/{}/tokens/{id}", s.bob.id), &s.admin)
        .await
        .expect(204);
    s.call("GET", "/api/v2/users/me", Some(&token), None)
        .await
        .expect_error(401);
    // A member may revoke the token they are using.
    let list = s.get("/api/v2/users/me/tokens", &s.bob).await;
    let own = uuid(&list.expect(200)[0]["id"]);
    s.delete(&format!("/api/v2/users/me/tokens/{own}"), &s.bob)
        .await
        .expect(204);
    s.get("/api/v2/users/me", &s.bob).await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_token_always_expires_whoever_creates_it() {
    let max = 30 * 86_400;
    let s = Server::start().await;
    let alice_tokens = format!("/api/v2/users/{}/tokens", s.alice.id);
    let (own, _) = new_token(&s, "/api/v2/users/me/tokens", &s.alice, json!({})).await;
    let (by_admin, token) = new_token(&s, &alice_tokens, &s.admin, json!({})).await;
    let (admins_own, _) = new_token(&s, "/api/v2/users/me/tokens", &s.admin, json!({})).await;
    let (at_max, _) = new_token(
        &s,
        &alice_tokens,
        &s.admin,
        json!({"lifetime_seconds": max}),
    )
    .await;
    s.call("GET", "/api/v2/users/me", Some(&token), None)
        .await
        .expect(200);
    let lifetime = |list: &Value, id: uuid::Uuid| {
        let row = list
            .as_array()
            .unwrap()
            .iter()
            .find(|t| uuid(&t["id"]) == id)
            .unwrap()
            .clone();
        (!row["expires_at"].is_null())
            .then(|| (time(&row["expires_at"]) - time(&row["created_at"])).num_seconds())
    };
    let list = s.get(&alice_tokens, &s.admin).await.expect(200).clone();
    for id in [own, by_admin, at_max] {
        let seconds = lifetime(&list, id).expect("a member's token expires");
        assert!((seconds - max).abs() <= 2, "{seconds}");
    }
    // The harness made alice's token with `chatd token create`: it expires too.
    let cli = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "cli")
        .unwrap();
    assert!(!cli["expires_at"].is_null());
    // An admin's own tokens may be unlimited.
    let list = s.get("/api/v2/users/me/tokens", &s.admin).await;
    assert_eq!(lifetime(list.expect(200), admins_own), None);

    // Over the maximum: 400 naming lifetime_seconds, and no token made.
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM api_keys")
            .fetch_one(s.pool())
            .await
            .unwrap()
    };
    let before = count().await;
    for (path, user) in [
        ("/api/v2/users/me/tokens".to_owned(), &s.alice),
        (alice_tokens.clone(), &s.admin),
    ] {
        let answer = s
            .post(&path, user, json!({"lifetime_seconds": max + 1}))
            .await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), ["lifetime_seconds"]);
    }
    assert_eq!(count().await, before);
    // An admin's token may live longer than a member's maximum.
    new_token(
        &s,
        "/api/v2/users/me/tokens",
        &s.admin,
        json!({"lifetime_seconds": max + 1}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_member_token_lifetime_follows_the_server_flag() {
    let options = chatd_api::ApiOptions {
        limits: chatd_core::limits::LimitDefaults {
            max_member_token_lifetime: std::time::Duration::from_secs(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let s = Server::start_with(options).await;
    let answer = s
        .post(
            "/api/v2/users/me/tokens",
            &s.alice,
            json!({"lifetime_seconds": 3601}),
        )
        .await;
    answer.expect_error(400);
    assert_eq!(answer.fields(), ["lifetime_seconds"]);
    let (id, _) = new_token(&s, "/api/v2/users/me/tokens", &s.alice, json!({})).await;
    let list = s.get("/api/v2/users/me/tokens", &s.alice).await;
    let row = list
        .expect(200)
        .as_array()
        .unwrap()
        .iter()
        .find(|t| uuid(&t["id"]) == id)
        .unwrap()
        .clone();
    let seconds = (time(&row["expires_at"]) - time(&row["created_at"])).num_seconds();
    assert!((seconds - 3600).abs() <= 2, "{seconds}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_token_never_expires_and_cli_lifetimes_apply() {
    let s = Server::start().await;
    chatd_api::bootstrap_admin(s.pool(), "bootstrap-token")
        .await
        .unwrap();
    let list = s
        .call(
            "GET",
            "/api/v2/users/me/tokens",
            Some("bootstrap-token"),
            None,
        )
        .await;
    let list = list.expect(200).as_array().unwrap().clone();
    let bootstrap = list.iter().find(|t| t["name"] == "bootstrap").unwrap();
    assert_eq!(bootstrap["expires_at"], Value::Null);
    // `chatd token create --lifetime 1h` for a member, then for an admin.
    let token = chatd_api::auth::create_token_with_lifetime(
        s.pool(),
        "frank",
        false,
        Some(std::time::Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let list = s
        .call("GET", "/api/v2/users/me/tokens", Some(&token), None)
        .await;
    let row = list.expect(200)[0].clone();
    let seconds = (time(&row["expires_at"]) - time(&row["created_at"])).num_seconds();
    assert!((seconds - 3600).abs() <= 2, "{seconds}");
    let token = chatd_api::create_token(s.pool(), "grace", true)
        .await
        .unwrap();
    let list = s
        .call("GET", "/api/v2/users/me/tokens", Some(&token), None)
        .await;
    assert_eq!(list.expect(200)[0]["expires_at"], Value::Null);
    assert!(
        chatd_api::auth::create_token_with_lifetime(
            s.pool(),
            "frank",
            false,
            Some(std::time::Duration::ZERO)
        )
        .await
        .is_err()
    );
    // A disabled user gets no token from the CLI.
    let frank: uuid::Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = 'frank'")
        .fetch_one(s.pool())
        .await
        .unwrap();
    s.patch(
        &format!("/api/v2/users/{frank}"),
        &s.admin,
        json!({"disabled": true}),
    )
    .await
    .expect(200);
    let err = chatd_api::create_token(s.pool(), "frank", false)
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("disabled"), "{err:#}");
}
