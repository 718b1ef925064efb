//! Users: limits and the disabled flag on `User`, `GET /users`, `PATCH
//! /users/{user}` (API.md "Limits, budgets and the token lifecycle").

use serde_json::{Value, json};

use crate::common::*;

/// The `limits` object of the server defaults ([`ApiOptions::default`]).
fn default_limits() -> Value {
    let d = chatd_core::limits::LimitDefaults::default();
    json!({
        "max_running_chats": d.max_running_chats,
        "requests_per_minute": d.requests_per_minute,
        "monthly_budget_micros": d.monthly_budget_micros,
        "monthly_token_budget": d.monthly_token_budget,
        "max_storage_bytes": d.max_storage_bytes,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_carry_their_disabled_flag_and_effective_limits() {
    let s = Server::start().await;
    let me = s.get("/api/v2/users/me", &s.alice).await;
    let me = me.expect(200);
    assert_eq!(me["disabled"], false);
    assert_eq!(me["limits"], default_limits());
    let created = s
        .post(
            "/api/v2/users",
            &s.admin,
            json!({"username": "carol", "role": "member"}),
        )
        .await;
    let carol = created.expect(201);
    assert_eq!(carol["disabled"], false);
    assert_eq!(carol["limits"], default_limits());

    // The server's defaults are what a user without overrides gets.
    let options = chatd_api::ApiOptions {
        limits: chatd_core::limits::LimitDefaults {
            requests_per_minute: 42,
            monthly_budget_micros: Some(7_000_000),
            ..Default::default()
        },
        ..Default::default()
    };
    let s = Server::start_with(options).await;
    let me = s.get("/api/v2/users/me", &s.alice).await;
    let limits = &me.expect(200)["limits"];
    assert_eq!(limits["requests_per_minute"], 42);
    assert_eq!(limits["monthly_budget_micros"], 7_000_000);
    assert_eq!(limits["monthly_token_budget"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_users_is_for_admins_and_ordered_by_username() {
    let s = Server::start().await;
    let list = s.get("/api/v2/users", &s.admin).await;
    let list = list.expect(200).as_array().unwrap().clone();
    let names: Vec<_> = list.iter().map(|u| u["username"].clone()).collect();
    assert_eq!(names, [json!("alice"), json!("bob"), json!("root")]);
    assert_eq!(uuid(&list[0]["id"]), s.alice.id);
    assert_eq!(list[0]["role"], "member");
    assert_eq!(list[2]["role"], "admin");
    for user in &list {
        assert_eq!(user["disabled"], false);
        assert_eq!(user["limits"], default_limits());
        assert_eq!(user.as_object().unwrap().len(), 6, "{user}");
    }
    s.get("/api/v2/users", &s.alice).await.expect_error(403);
    s.call("GET", "/api/v2/users", None, None)
        .await
        .expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_sets_overrides_and_null_returns_a_limit_to_the_default() {
    let s = Server::start().await;
    let path = format!("/api/v2/users/{}", s.alice.id);
    let answer = s
        .patch(
            &path,
            &s.admin,
            json!({"limits": {"requests_per_minute": 5, "max_storage_bytes": 10,
                              "monthly_budget_micros": 0, "monthly_token_budget": 1000,
                              "max_running_chats": 0}}),
        )
        .await;
    let alice = answer.expect(200).clone();
    assert_eq!(uuid(&alice["id"]), s.alice.id);
    assert_eq!(
        alice["limits"],
        json!({"max_running_chats": 0, "requests_per_minute": 5, "monthly_budget_micros": 0,
               "monthly_token_budget": 1000, "max_storage_bytes": 10})
    );
    // The user sees the same.
    let me = s.get("/api/v2/users/me", &s.alice).await;
    assert_eq!(me.expect(200), &alice);
    // `null` returns a field to the default; absent fields stay.
    let answer = s
        .patch(
            &path,
            &s.admin,
            json!({"limits": {"requests_per_minute": null, "monthly_budget_micros": null}}),
        )
        .await;
    let limits = answer.expect(200)["limits"].clone();
    let defaults = default_limits();
    assert_eq!(
        limits["requests_per_minute"],
        defaults["requests_per_minute"]
    );
    assert_eq!(limits["monthly_budget_micros"], Value::Null);
    assert_eq!(limits["max_storage_bytes"], 10);
    assert_eq!(limits["monthly_token_budget"], 1000);
    let (overridden, rpm): (Option<i32>, Option<i32>) = sqlx::query_as(
        "SELECT max_storage_bytes::int, requests_per_minute FROM users WHERE id = $1",
    )
    .bind(s.alice.id)
    .fetch_one(s.pool())
    .await
    .unwrap();
    assert_eq!((overridden, rpm), (Some(10), None), "null stores NULL");
    // An empty patch changes nothing and answers the user; `me` works too.
    let answer = s.patch("/api/v2/users/me", &s.admin, json!({})).await;
    assert_eq!(uuid(&answer.expect(200)["id"]), s.admin.id);
    let answer = s.patch(&path, &s.admin, json!({})).await;
    assert_eq!(answer.expect(200)["limits"], limits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_patches_are_400_naming_the_field_and_change_nothing() {
    let s = Server::start().await;
    let path = format!("/api/v2/users/{}", s.alice.id);
    s.patch(
        &path,
        &s.admin,
        json!({"limits": {"max_storage_bytes": 10}}),
    )
    .await
    .expect(200);
    let before = s.get("/api/v2/users", &s.admin).await.expect(200).clone();
    for (body, fields) in [
        (
            json!({"limits": {"requests_per_minute": 0}}),
            vec!["limits.requests_per_minute"],
        ),
        (
            json!({"limits": {"max_running_chats": -1}}),
            vec!["limits.max_running_chats"],
        ),
        (
            json!({"limits": {"monthly_budget_micros": -1, "max_storage_bytes": -5}}),
            vec!["limits.monthly_budget_micros", "limits.max_storage_bytes"],
        ),
        (
            json!({"limits": {"monthly_token_budget": -1}, "disabled": true}),
            vec!["limits.monthly_token_budget"],
        ),
        (
            json!({"limits": {"requests_per_minute": 1e12}}),
            vec!["limits.requests_per_minute"],
        ),
        (
            json!({"limits": {"requests_per_minute": "many"}}),
            vec!["limits.requests_per_minute"],
        ),
        (json!({"disabled": null}), vec!["disabled"]),
        (json!({"disabled": "yes"}), vec!["disabled"]),
        (json!({"limits": 5}), vec!["limits"]),
        (
            json!({"limits": {"max_runners": 1}}),
            vec!["limits.max_runners"],
        ),
        (json!({"role": "admin"}), vec!["role"]),
        (json!([]), vec!["body"]),
    ] {
        let answer = s.patch(&path, &s.admin, body.clone()).await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), fields, "{body}");
    }
    // Path, permission and existence.
    s.patch("/api/v2/users/nobody", &s.admin, json!({}))
        .await
        .expect_error(400);
    let unknown = format!("/api/v2/users/{}", uuid::Uuid::new_v4());
    s.patch(&unknown, &s.admin, json!({"disabled": true}))
        .await
        .expect_error(404);
    s.patch(
        &path,
        &s.alice,
        json!({"limits": {"requests_per_minute": 1}}),
    )
    .await
    .expect_error(403);
    s.patch("/api/v2/users/me", &s.alice, json!({}))
        .await
        .expect_error(403);
    s.call("PATCH", &path, None, Some(json!({})))
        .await
        .expect_error(401);
    let after = s.get("/api/v2/users", &s.admin).await.expect(200).clone();
    assert_eq!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_users_tokens_are_401_until_re_enabled() {
    let s = Server::start().await;
    let path = format!("/api/v2/users/{}", s.alice.id);
    // A second token of alice's, made before.
    let second = s.post("/api/v2/users/me/tokens", &s.alice, json!({})).await;
    let second = second.expect(201)["token"].as_str().unwrap().to_owned();
    let answer = s.patch(&path, &s.admin, json!({"disabled": true})).await;
    assert_eq!(answer.expect(200)["disabled"], true);
    for token in [&s.alice.token, &second] {
        s.call("GET", "/api/v2/users/me", Some(token), None)
            .await
            .expect_error(401);
        s.call("GET", "/api/v2/chats", Some(token), None)
            .await
            .expect_error(401);
    }
    // A token an admin makes for a disabled user does not work either.
    let made = s.post(&format!("{path}/tokens"), &s.admin, json!({})).await;
    let made = made.expect(201)["token"].as_str().unwrap().to_owned();
    s.call("GET", "/api/v2/users/me", Some(&made), None)
        .await
        .expect_error(401);
    // Others are unaffected; the list shows the flag.
    s.get("/api/v2/users/me", &s.bob).await.expect(200);
    let list = s.get("/api/v2/users", &s.admin).await;
    assert_eq!(list.expect(200)[0]["disabled"], true);

    let answer = s.patch(&path, &s.admin, json!({"disabled": false})).await;
    assert_eq!(answer.expect(200)["disabled"], false);
    for token in [&s.alice.token, &second, &made] {
        let me = s.call("GET", "/api/v2/users/me", Some(token), None).await;
        assert_eq!(uuid(&me.expect(200)["id"]), s.alice.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_cannot_disable_themselves_but_may_disable_another_admin() {
    let s = Server::start().await;
    for path in [
        "/api/v2/users/me".to_owned(),
        format!("/api/v2/users/{}", s.admin.id),
    ] {
        let answer = s.patch(&path, &s.admin, json!({"disabled": true})).await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), ["disabled"]);
    }
    let me = s.get("/api/v2/users/me", &s.admin).await;
    assert_eq!(me.expect(200)["disabled"], false);
    // Re-enabling oneself (a no-op) is fine.
    s.patch("/api/v2/users/me", &s.admin, json!({"disabled": false}))
        .await
        .expect(200);
    let other = make_user(s.pool(), "root2", true).await;
    s.patch(
        &format!("/api/v2/users/{}", other.id),
        &s.admin,
        json!({"disabled": true}),
    )
    .await
    .expect(200);
    s.get("/api/v2/users/me", &other).await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_admins_disabling_each_other_at_once_leave_one_enabled() {
    let s = Server::start().await;
    for round in 0..10 {
        let a = make_user(s.pool(), &format!("a{round}"), true).await;
        let b = make_user(s.pool(), &format!("b{round}"), true).await;
        // Only these two admins are enabled.
        sqlx::query("UPDATE users SET disabled = (id NOT IN ($1, $2)) WHERE role = 'admin'")
            .bind(a.id)
            .bind(b.id)
            .execute(s.pool())
            .await
            .unwrap();
        let (pa, pb) = (
            format!("/api/v2/users/{}", b.id),
            format!("/api/v2/users/{}", a.id),
        );
        let disable = json!({"disabled": true});
        let (first, second) = tokio::join!(
            s.patch(&pa, &a, disable.clone()),
            s.patch(&pb, &b, disable.clone())
        );
        let mut statuses = [first.status, second.status];
        statuses.sort();
        // One went through; the other, disabled by it, is refused (its
        // authentication may already fail, or the lock's re-check does).
        assert_eq!(statuses, [200, 401], "round {round}");
        let enabled: i64 =
            sqlx::query_scalar("SELECT count(*) FROM users WHERE role = 'admin' AND NOT disabled")
                .fetch_one(s.pool())
                .await
                .unwrap();
        assert_eq!(enabled, 1, "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_token_re_enables_the_admin_user() {
    let s = Server::start().await;
    let token = "bootstrap-secret-token";
    chatd_api::bootstrap_admin(s.pool(), token).await.unwrap();
    let admin = s.call("GET", "/api/v2/users/me", Some(token), None).await;
    let admin_id = uuid(&admin.expect(200)["id"]);
    s.patch(
        &format!("/api/v2/users/{admin_id}"),
        &s.admin,
        json!({"disabled": true}),
    )
    .await
    .expect(200);
    s.call("GET", "/api/v2/users/me", Some(token), None)
        .await
        .expect_error(401);
    // A restart with the bootstrap token is the way back in.
    chatd_api::bootstrap_admin(s.pool(), token).await.unwrap();
    let admin = s.call("GET", "/api/v2/users/me", Some(token), None).await;
    assert_eq!(admin.expect(200)["disabled"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_the_user_and_token_routes() {
    let s = Server::start().await;
    let doc = s.call("GET", "/api/v2/openapi.json", None, None).await;
    let doc = doc.expect(200);
    let paths = &doc["paths"];
    assert!(paths["/api/v2/users"]["get"].is_object());
    let patch = &paths["/api/v2/users/{user}"]["patch"];
    assert!(patch["responses"]["200"].is_object(), "{patch}");
    assert!(patch["responses"]["429"].is_object(), "{patch}");
    let body = patch["requestBody"]["content"]["application/json"]["schema"]["$ref"].as_str();
    assert_eq!(
        body,
        Some("#/components/schemas/PatchUserRequest"),
        "{patch}"
    );
    assert!(paths["/api/v2/users/{user}/tokens"]["get"].is_object());
    assert!(paths["/api/v2/users/{user}/tokens/{id}"]["delete"]["responses"]["204"].is_object());
    let user = &doc["components"]["schemas"]["User"]["properties"];
    assert!(
        user["disabled"].is_object() && user["limits"].is_object(),
        "{user}"
    );
    let token = &doc["components"]["schemas"]["Token"]["properties"];
    assert!(token["last_used_at"].is_object(), "{token}");
}
