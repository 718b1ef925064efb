//! API.md "Sign-in, search, sharing and export": password sign-in, the
//! session cookie and its CSRF check, sign-out, password changes (with
//! their race) and the sign-in rate limit.

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::common::*;

pub const PASSWORD: &str = "correct horse battery";

/// A browser signed in as someone: their session cookie and CSRF token.
pub struct Browser {
    pub cookie: String,
    pub csrf: String,
}

/// An answer with its headers.
pub struct Reply {
    pub answer: Answer,
    pub headers: HeaderMap,
}

/// Sends a request as a browser would: the cookie, and `csrf` (when given)
/// in `X-CSRF-Token`, plus `extra` headers.
pub async fn browser_call(
    s: &Server,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    csrf: Option<&str>,
    body: Option<Value>,
    extra: &[(&str, &str)],
) -> Reply {
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = s.http.request(method, format!("{}{}", s.base, path));
    if let Some(cookie) = cookie {
        req = req.header("cookie", format!("theme=dark; chatd_session={cookie}"));
    }
    if let Some(csrf) = csrf {
        req = req.header("x-csrf-token", csrf);
    }
    for (name, value) in extra {
        req = req.header(*name, *value);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        answer: Answer { status, body, text },
        headers,
    }
}

/// Sets `user`'s password as the admin.
pub async fn set_password(s: &Server, user: &User, password: &str) {
    let answer = s
        .call(
            "PUT",
            &format!("/api/v2/users/{}/password", user.id),
            Some(&s.admin.token),
            Some(json!({"password": password})),
        )
        .await;
    assert_eq!(answer.status, 204, "{}", answer.text);
}

/// Signs `username` in; panics unless it succeeds.
pub async fn sign_in(s: &Server, username: &str, password: &str) -> Browser {
    let reply = browser_call(
        s,
        "POST",
        "/api/v2/sessions",
        None,
        None,
        Some(json!({"username": username, "password": password})),
        &[],
    )
    .await;
    assert_eq!(reply.answer.status, 201, "{}", reply.answer.text);
    let set_cookie = reply.headers["set-cookie"].to_str().unwrap().to_owned();
    let cookie = set_cookie
        .strip_prefix("chatd_session=")
        .and_then(|rest| rest.split(';').next())
        .expect("the session cookie")
        .to_owned();
    let csrf = reply.headers["x-csrf-token"].to_str().unwrap().to_owned();
    Browser { cookie, csrf }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_sets_a_strict_httponly_cookie_that_authenticates() {
    let s = Server::start().await;
    set_password(&s, &s.alice, PASSWORD).await;
    let reply = browser_call(
        &s,
        "POST",
        "/api/v2/sessions",
        None,
        None,
        Some(json!({"username": "alice", "password": PASSWORD})),
        &[],
    )
    .await;
    let user = reply.answer.expect(201);
    assert_eq!(user["username"], "alice");
    assert_eq!(user["id"], json!(s.alice.id));
    let set_cookie = reply.headers["set-cookie"].to_str().unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=2592000"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    assert!(!set_cookie.contains("Secure"), "plain HTTP: {set_cookie}");
    assert_eq!(reply.headers["cache-control"], "no-store");
    let browser = sign_in(&s, "alice", PASSWORD).await;

    let me = browser_call(
        &s,
        "GET",
        "/api/v2/users/me",
        Some(&browser.cookie),
        None,
        None,
        &[],
    )
    .await;
    assert_eq!(me.answer.expect(200)["username"], "alice");
    let current = browser_call(
        &s,
        "GET",
        "/api/v2/sessions/current",
        Some(&browser.cookie),
        None,
        None,
        &[],
    )
    .await;
    let current = current.answer.expect(200);
    assert_eq!(current["csrf_token"], json!(browser.csrf));
    assert_eq!(current["user"]["username"], "alice");
    assert!(current["expires_at"].is_string());

    // Only the hash of the secret is stored.
    let stored: Vec<Vec<u8>> = sqlx::query_scalar("SELECT secret_hash FROM user_sessions")
        .fetch_all(s.pool())
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert!(stored.contains(&chatd_api::auth::hash_token(&browser.cookie)));
    assert!(!stored.contains(&browser.cookie.as_bytes().to_vec()));

    // A bearer token wins over the cookie; the session routes need a session.
    let (answer, _) = s
        .call_with_headers(
            "GET",
            "/api/v2/users/me",
            &s.bob,
            None,
            &[("cookie", &format!("chatd_session={}", browser.cookie))],
        )
        .await;
    assert_eq!(answer.expect(200)["username"], "bob");
    let answer = s.get("/api/v2/sessions/current", &s.alice).await;
    answer.expect_error(404);

    // Behind an HTTPS proxy the cookie is Secure.
    let reply = browser_call(
        &s,
        "POST",
        "/api/v2/sessions",
        None,
        None,
        Some(json!({"username": "alice", "password": PASSWORD})),
        &[("x-forwarded-proto", "https")],
    )
    .await;
    assert!(
        reply.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("; Secure")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_mutation_needs_the_csrf_token_and_the_same_origin() {
    let s = Server::start().await;
    set_password(&s, &s.alice, PASSWORD).await;
    let browser = sign_in(&s, "alice", PASSWORD).await;
    let body = json!({"content": [{"type": "text", "text": "hi"}]});
    let before = s.dump().await;
    for csrf in [None, Some("wrong"), Some("")] {
        let reply = browser_call(
            &s,
            "POST",
            "/api/v2/chats",
            Some(&browser.cookie),
            csrf,
            Some(body.clone()),
            &[],
        )
        .await;
        let error = reply.answer.expect_error(403);
        assert_eq!(error["message"], "Missing or wrong CSRF token.");
    }
    let host = s.base.trim_start_matches("http://").to_owned();
    let reply = browser_call(
        &s,
        "POST",
        "/api/v2/chats",
        Some(&browser.cookie),
        Some(&browser.csrf),
        Some(body.clone()),
        &[("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(
        reply.answer.expect_error(403)["message"],
        "Cross-origin request refused."
    );
    assert_eq!(s.dump().await, before, "nothing changed");

    let reply = browser_call(
        &s,
        "POST",
        "/api/v2/chats",
        Some(&browser.cookie),
        Some(&browser.csrf),
        Some(body),
        &[("origin", &format!("http://{host}"))],
    )
    .await;
    assert_eq!(reply.answer.expect(201)["owner_id"], json!(s.alice.id));
    // Reads need no CSRF token.
    let list = browser_call(
        &s,
        "GET",
        "/api/v2/chats",
        Some(&browser.cookie),
        None,
        None,
        &[],
    )
    .await;
    assert_eq!(list.answer.expect(200).as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_name_or_password_gets_the_same_401() {
    let s = Server::start().await;
    set_password(&s, &s.alice, PASSWORD).await;
    let attempt = |username: &'static str, password: &'static str| {
        let s = &s;
        async move {
            browser_call(
                s,
                "POST",
                "/api/v2/sessions",
                None,
                None,
                Some(json!({"username": username, "password": password})),
                &[],
            )
            .await
        }
    };
    let replies = [
        attempt("alice", "not the password").await,
        attempt("nobody", PASSWORD).await,
        attempt("bob", PASSWORD).await,
    ];
    for reply in &replies {
        reply.answer.expect_error(401);
        assert!(!reply.headers.contains_key("set-cookie"));
    }
    let [wrong_password, unknown_user, no_password] = replies.map(|r| r.answer);
    assert_eq!(wrong_password.body, unknown_user.body);
    assert_eq!(wrong_password.body, no_password.body);
    assert_eq!(wrong_password.message(), "Wrong user name or password.");

    // A disabled user cannot sign in either.
    let answer = s
        .patch(
            &format!("/api/v2/users/{}", s.alice.id),
            &s.admin,
            json!({"disabled": true}),
        )
        .await;
    answer.expect(200);
    assert_eq!(
        attempt("alice", PASSWORD).await.answer.body,
        wrong_password.body
    );

    // Bad input names the field.
    for (body, field) in [
        (json!({"username": "alice"}), "password"),
        (json!({"password": PASSWORD}), "username"),
        (json!({"username": "", "password": PASSWORD}), "username"),
        (
            json!({"username": "alice", "password": "x".repeat(1025)}),
            "password",
        ),
        (
            json!({"username": "alice", "password": PASSWORD, "extra": 1}),
            "extra",
        ),
    ] {
        let answer = s.call("POST", "/api/v2/sessions", None, Some(body)).await;
        answer.expect_error(400);
        assert!(
            answer.fields().contains(&field.to_owned()),
            "{}",
            answer.text
        );
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM user_sessions")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(count, 0, "no session from a refused attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_ends_the_session_on_the_server() {
    let s = Server::start().await;
    set_password(&s, &s.alice, PASSWORD).await;
    let browser = sign_in(&s, "alice", PASSWORD).await;
    let other = sign_in(&s, "alice", PASSWORD).await;
    // Without the CSRF token sign-out is refused too.
    let reply = browser_call(
        &s,
        "DELETE",
        "/api/v2/sessions/current",
        Some(&browser.cookie),
        None,
        None,
        &[],
    )
    .await;
    reply.answer.expect_error(403);
    let reply = browser_call(
        &s,
        "DELETE",
        "/api/v2/sessions/current",
        Some(&browser.cookie),
        Some(&browser.csrf),
        None,
        &[],
    )
    .await;
    assert_eq!(reply.answer.status, 204, "{}", reply.answer.text);
    let cleared = reply.headers["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with("chatd_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    let me = browser_call(
        &s,
        "GET",
        "/api/v2/users/me",
        Some(&browser.cookie),
        None,
        None,
        &[],
    )
    .await;
    me.answer.expect_error(401);
    // The other session of the same user is untouched.
    let me = browser_call(
        &s,
        "GET",
        "/api/v2/users/me",
        Some(&other.cookie),
        None,
        None,
        &[],
    )
    .await;
    me.answer.expect(200);
    // A token has no session to end.
    s.delete("/api/v2/sessions/current", &s.alice)
        .await
        .expect_error(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_are_set_by_admins_and_changed_by_their_users() {
    let s = Server::start().await;
    let path = |u: &User| format!("/api/v2/users/{}/password", u.id);
    // A member sets their first password without a current one.
    let answer = s
        .call(
            "PUT",
            "/api/v2/users/me/password",
            Some(&s.alice.token),
            Some(json!({"password": PASSWORD})),
        )
        .await;
    assert_eq!(answer.status, 204, "{}", answer.text);
    let keep = sign_in(&s, "alice", PASSWORD).await;
    let other = sign_in(&s, "alice", PASSWORD).await;

    let before = s.dump().await;
    for (body, field, status) in [
        (
            json!({"password": "new password 1"}),
            "current_password",
            400,
        ),
        (
            json!({"password": "new password 1", "current_password": "wrong one!"}),
            "current_password",
            400,
        ),
        (
            json!({"password": "short", "current_password": PASSWORD}),
            "password",
            400,
        ),
        (json!({}), "password", 400),
    ] {
        let answer = s
            .call("PUT", &path(&s.alice), Some(&s.alice.token), Some(body))
            .await;
        answer.expect_error(status);
        assert!(
            answer.fields().contains(&field.to_owned()),
            "{}",
            answer.text
        );
    }
    // A member cannot set another user's password.
    s.call(
        "PUT",
        &path(&s.bob),
        Some(&s.alice.token),
        Some(json!({"password": "new password 1"})),
    )
    .await
    .expect_error(403);
    let mut after = s.dump().await;
    after["api_keys"] = before["api_keys"].clone();
    assert_eq!(after, before, "nothing changed");

    // Changed through the session that stays signed in: the other ends.
    let reply = browser_call(
        &s,
        "PUT",
        "/api/v2/users/me/password",
        Some(&keep.cookie),
        Some(&keep.csrf),
        Some(json!({"password": "new password 1", "current_password": PASSWORD})),
        &[],
    )
    .await;
    assert_eq!(reply.answer.status, 204, "{}", reply.answer.text);
    let me = |b: &Browser| {
        let cookie = b.cookie.clone();
        let s = &s;
        async move {
            browser_call(s, "GET", "/api/v2/users/me", Some(&cookie), None, None, &[])
                .await
                .answer
                .status
        }
    };
    assert_eq!(me(&keep).await, 200);
    assert_eq!(me(&other).await, 401);
    sign_in(&s, "alice", "new password 1").await;

    // An admin resets it without the current one; every session ends.
    let answer = s
        .call(
            "PUT",
            &path(&s.alice),
            Some(&s.admin.token),
            Some(json!({"password": "reset by admin"})),
        )
        .await;
    assert_eq!(answer.status, 204, "{}", answer.text);
    assert_eq!(me(&keep).await, 401);
    sign_in(&s, "alice", "reset by admin").await;
    // Unknown user.
    s.call(
        "PUT",
        &format!("/api/v2/users/{}/password", uuid::Uuid::new_v4()),
        Some(&s.admin.token),
        Some(json!({"password": "reset by admin"})),
    )
    .await
    .expect_error(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_changes_racing_with_the_same_current_password_do_not_both_win() {
    let s = Server::start().await;
    set_password(&s, &s.alice, PASSWORD).await;
    for round in 0..4 {
        let current = if round == 0 {
            PASSWORD.to_owned()
        } else {
            format!("winner of round {}", round - 1)
        };
        let change = |to: String| {
            let s = &s;
            let current = current.clone();
            async move {
                s.call(
                    "PUT",
                    "/api/v2/users/me/password",
                    Some(&s.alice.token),
                    Some(json!({"password": to, "current_password": current})),
                )
                .await
            }
        };
        let (a, b) = tokio::join!(
            change(format!("winner of round {round}")),
            change(format!("winner of round {round}"))
        );
        let wins = [&a, &b].iter().filter(|x| x.status == 204).count();
        // The loser either lost the compare-and-set (409) or checked its
        // current password after the winner's change (400).
        assert_eq!(wins, 1, "{} / {}", a.text, b.text);
        for x in [&a, &b] {
            assert!([204, 400, 409].contains(&x.status), "{}", x.text);
        }
    }
    sign_in(&s, "alice", "winner of round 3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_attempts_are_rate_limited() {
    let s = Server::start().await;
    set_password(&s, &s.alice, PASSWORD).await;
    for _ in 0..chatd_api::rate_limit::SIGN_IN_BURST_PER_ACCOUNT {
        let answer = s
            .call(
                "POST",
                "/api/v2/sessions",
                None,
                Some(json!({"username": "alice", "password": "wrong password"})),
            )
            .await;
        answer.expect_error(401);
    }
    // Now even the right password waits.
    let reply = browser_call(
        &s,
        "POST",
        "/api/v2/sessions",
        None,
        None,
        Some(json!({"username": "Alice", "password": PASSWORD})),
        &[],
    )
    .await;
    reply.answer.expect_error(429);
    let retry: u64 = reply.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    assert!(!reply.headers.contains_key("set-cookie"));
    // Another account is not locked by alice's attempts.
    set_password(&s, &s.bob, PASSWORD).await;
    sign_in(&s, "bob", PASSWORD).await;
}
