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
