//! API.md "Sign-in, search, sharing and export": read-only shares. A user
//! a chat is shared with reads it and its sub-agents, lists it with
//! `?shared=true`, and changes nothing; a revoke ends their view and
//! closes their streams within 10 s.

use std::time::{Duration, Instant};

use chatd_core::ExecutionState::*;
use serde_json::json;

use crate::common::*;
use crate::stream_support::*;

fn shares(chat: uuid::Uuid) -> String {
    chat_path(chat, "/shares")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_chat_is_read_only_for_its_reader() {
    let s = Server::start().await;
    let chat = s.chat_in(&s.alice, W).await;
    let share = s
        .post(&shares(chat), &s.alice, json!({"username": "bob"}))
        .await;
    let share = share.expect(201);
    assert_eq!(share["user_id"], json!(s.bob.id));
    assert_eq!(share["username"], "bob");
    // Sharing again answers the same share.
    let again = s
        .post(&shares(chat), &s.alice, json!({"user_id": s.bob.id}))
        .await;
    assert_eq!(again.expect(201)["created_at"], share["created_at"]);
    let list = s.get(&shares(chat), &s.alice).await;
    assert_eq!(list.expect(200).as_array().unwrap().len(), 1);

    // Bob reads it everywhere.
    assert_eq!(
        s.get(&chat_path(chat, ""), &s.bob).await.expect(200)["id"],
        json!(chat)
    );
    let messages = s.get(&chat_path(chat, "/messages"), &s.bob).await;
    assert!(
        !messages.expect(200)["messages"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    s.get(&chat_path(chat, "/messages/tree"), &s.bob)
        .await
        .expect(200);
    let listed = s.get("/api/v2/chats?shared=true", &s.bob).await;
    let listed = listed.expect(200).as_array().unwrap().clone();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], json!(chat));
    assert!(
        s.get("/api/v2/chats", &s.bob)
            .await
            .expect(200)
            .as_array()
            .unwrap()
            .is_empty(),
        "the default list is the caller's own chats"
    );
    assert!(
        s.get("/api/v2/chats?shared=true", &s.alice)
            .await
            .expect(200)
            .as_array()
            .unwrap()
            .is_empty()
    );

    // ...and changes nothing.
    let before = s.dump().await;
    let message = s.message_ids(chat).await[1];
    for (method, path, body) in [
        ("POST", chat_path(chat, "/messages"), Some(text("hi"))),
        ("PATCH", chat_path(chat, ""), Some(json!({"title": "mine"}))),
        ("DELETE", chat_path(chat, ""), None),
        ("POST", chat_path(chat, "/interrupt"), None),
        ("POST", chat_path(chat, "/compact"), None),
        ("POST", chat_path(chat, "/clear-context"), None),
        ("POST", chat_path(chat, "/fork"), None),
        (
            "POST",
            chat_path(chat, &format!("/messages/{message}/regenerate")),
            None,
        ),
        (
            "PATCH",
            chat_path(chat, &format!("/messages/{message}")),
            Some(text("edited")),
        ),
        (
            "POST",
            chat_path(chat, "/branches/activate"),
            Some(json!({"message_id": message})),
        ),
        ("POST", shares(chat), Some(json!({"username": "root"}))),
        ("DELETE", format!("{}/{}", shares(chat), s.bob.id), None),
    ] {
        let answer = s.call(method, &path, Some(&s.bob.token), body).await;
        answer.expect_error(403);
    }
    // A child of it: the body field is refused.
    let answer = s
        .post(
            "/api/v2/chats",
            &s.bob,
            json!({"content": [{"type": "text", "text": "x"}], "parent_chat_id": chat}),
        )
        .await;
    answer.expect_error(400);
    assert_eq!(answer.fields(), ["parent_chat_id"]);
    s.get(&shares(chat), &s.bob).await.expect_error(403);
    assert_eq!(s.dump().await, before, "nothing changed");

    // The experimental mount behaves the same.
    let path = format!("/api/experimental/chats/{chat}");
    s.get(&path, &s.bob).await.expect(200);
    s.call("DELETE", &path, Some(&s.bob.token), None)
        .await
        .expect_error(403);

    // Revoked: the chat is gone for bob.
    let revoke = s
        .delete(&format!("{}/{}", shares(chat), s.bob.id), &s.alice)
        .await;
    assert_eq!(revoke.status, 204, "{}", revoke.text);
    s.get(&chat_path(chat, ""), &s.bob).await.expect_error(404);
    s.get(&chat_path(chat, "/messages"), &s.bob)
        .await
        .expect_error(404);
    assert!(
        s.get("/api/v2/chats?shared=true", &s.bob)
            .await
            .expect(200)
            .as_array()
            .unwrap()
            .is_empty()
    );
    s.delete(&format!("{}/{}", shares(chat), s.bob.id), &s.alice)
        .await
        .expect_error(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_manages_shares_and_bad_input_names_the_field() {
    let s = Server::start().await;
    let chat = s.chat_in(&s.alice, W).await;
    let before = s.dump().await;
    // Someone who cannot see the chat: 404; an admin who is not the owner: 403.
    s.post(&shares(chat), &s.bob, json!({"username": "root"}))
        .await
        .expect_error(404);
    s.get(&shares(chat), &s.bob).await.expect_error(404);
    s.post(&shares(chat), &s.admin, json!({"username": "bob"}))
        .await
        .expect_error(403);
    s.get(&shares(chat), &s.admin).await.expect_error(403);
    for (body, field) in [
        (json!({}), "user_id"),
        (json!({"user_id": s.bob.id, "username": "bob"}), "username"),
        (json!({"username": "nobody"}), "username"),
        (json!({"username": "not a name!"}), "username"),
        (json!({"user_id": uuid::Uuid::new_v4()}), "user_id"),
        (json!({"user_id": "not-a-uuid"}), "user_id"),
        (json!({"user_id": s.alice.id}), "user_id"),
        (json!({"username": "alice"}), "username"),
        (json!({"username": "bob", "role": "editor"}), "role"),
    ] {
        let answer = s.post(&shares(chat), &s.alice, body.clone()).await;
        answer.expect_error(400);
        assert!(
            answer.fields().contains(&field.to_owned()),
            "{body}: {}",
            answer.text
        );
    }
    s.delete(&format!("{}/not-a-uuid", shares(chat)), &s.alice)
        .await
        .expect_error(400);
    s.delete(&format!("{}/{}", shares(chat), s.bob.id), &s.alice)
        .await
        .expect_error(404);
    s.get(
        &format!("/api/v2/chats?shared=true&owner={}", s.alice.id),
        &s.alice,
    )
    .await
    .expect_error(400);
    assert_eq!(s.dump().await, before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_covers_the_sub_agents_of_the_chat() {
    let s = Server::start().await;
    let root = s.chat_in(&s.alice, W).await;
    let child = s
        .post(
            "/api/v2/chats",
            &s.alice,
            json!({"content": [{"type": "text", "text": "child"}], "parent_chat_id": root}),
        )
        .await;
    let child = uuid(&child.expect(201)["id"]);
    s.get(&chat_path(child, ""), &s.bob).await.expect_error(404);
    s.post(&shares(root), &s.alice, json!({"user_id": s.bob.id}))
        .await
        .expect(201);
    s.get(&chat_path(child, ""), &s.bob).await.expect(200);
    let children = s
        .get(
            &format!("/api/v2/chats?shared=true&parent_id={root}"),
            &s.bob,
        )
        .await;
    assert_eq!(
        children.expect(200).as_array().unwrap()[0]["id"],
        json!(child)
    );
    s.post_empty(&chat_path(child, "/interrupt"), &s.bob)
        .await
        .expect_error(403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_share_closes_the_readers_stream_within_10_s() {
    let env = StreamEnv::start().await;
    let chat = env
        .create_chat(
            &env.alice,
            json!({"content": [{"type": "text", "text": "hello"}]}),
        )
        .await;
    let (status, body) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/shares"),
            &env.alice,
            Some(json!({"user_id": env.bob.id})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let url = env.replica.ws_url(&stream_path(chat, None));
    let mut bob = StreamClient::connect(&url, &env.bob.token).await;
    let mut alice = env.watch(chat, None).await;
    bob.until("the first state", |_| true).await;
    alice.until("the first state", |_| true).await;

    let (status, body) = env
        .request(
            "DELETE",
            &format!("/api/v2/chats/{chat}/shares/{}", env.bob.id),
            &env.alice,
            None,
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let revoked_at = Instant::now();
    let frame = tokio::time::timeout(Duration::from_secs(12), bob.until_closed())
        .await
        .expect("the reader's stream closes");
    assert!(revoked_at.elapsed() < Duration::from_secs(11));
    assert_eq!(frame.map(|f| u16::from(f.code)), Some(1008));
    // The owner's stream stays open.
    assert!(alice.closed.is_none());
    let (status, _) = env
        .request("GET", &format!("/api/v2/chats/{chat}"), &env.bob, None)
        .await;
    assert_eq!(status, 404);
    // A reconnect is refused.
    assert!(
        StreamClient::try_connect(&url, &env.bob.token)
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cookie_opens_the_stream_and_signing_out_closes_it_within_10_s() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let env = StreamEnv::start().await;
    let password = crate::sessions::PASSWORD;
    chatd_api::auth::set_password(env.pool(), "alice", password, false)
        .await
        .unwrap();
    let chat = env
        .create_chat(
            &env.alice,
            json!({"content": [{"type": "text", "text": "hello"}]}),
        )
        .await;
    let signed_in = env
        .http
        .post(format!("{}/api/v2/sessions", env.replica.base))
        .json(&json!({"username": "alice", "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 201);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let csrf = signed_in.headers()["x-csrf-token"]
        .to_str()
        .unwrap()
        .to_owned();

    // A browser's WebSocket: the cookie, the plain subprotocol, its origin.
    let url = env.replica.ws_url(&stream_path(chat, None));
    let mut request = url.as_str().into_client_request().unwrap();
    let host = env.replica.base.trim_start_matches("http://").to_owned();
    let headers = request.headers_mut();
    headers.insert("cookie", cookie.parse().unwrap());
    headers.insert("sec-websocket-protocol", "chatd".parse().unwrap());
    headers.insert("origin", format!("http://{host}").parse().unwrap());
    let (mut ws, response) = tokio_tungstenite::connect_async(request.clone())
        .await
        .expect("the cookie authenticates the stream");
    assert_eq!(response.headers()["sec-websocket-protocol"], "chatd");
    let first = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut ws))
        .await
        .expect("the first frame");
    assert!(matches!(
        first,
        Some(Ok(tokio_tungstenite::tungstenite::Message::Text(_)))
    ));

    // Another site's page cannot open it with the same cookie.
    let mut foreign = request.clone();
    foreign
        .headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(foreign).await.is_err());

    let out = env
        .http
        .delete(format!("{}/api/v2/sessions/current", env.replica.base))
        .header("cookie", &cookie)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    let signed_out_at = Instant::now();
    let code = tokio::time::timeout(Duration::from_secs(12), async {
        while let Some(frame) = futures::StreamExt::next(&mut ws).await {
            if let Ok(tokio_tungstenite::tungstenite::Message::Close(frame)) = frame {
                return frame.map(|f| u16::from(f.code));
            }
        }
        None
    })
    .await
    .expect("the stream closes after sign-out");
    assert!(signed_out_at.elapsed() < Duration::from_secs(11));
    assert_eq!(code, Some(1008));
    assert!(tokio_tungstenite::connect_async(request).await.is_err());
}
