//! API.md "Branches, regenerate and fork": edits keep the old branch,
//! regenerate and activate move the active one (with their refusals), forks
//! copy it, and watchers get `history_reset` and the new branch.

use chatd_core::ExecutionState::*;
use chatd_core::MessagePart;
use chatd_store::NewMessage;
use chatd_testkit::fake_llm::Script;
use serde_json::{Value, json};

use crate::common::*;
use crate::stream_support::*;

fn ids(page: &Value) -> Vec<i64> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect()
}

/// A waiting chat of alice with "hi" answered "hello". Returns the chat and
/// the ids of the question and the answer.
async fn answered(s: &Server) -> (uuid::Uuid, i64, i64) {
    let id = s.chat_in(&s.alice, R0).await;
    s.apply(id, |tx| {
        Box::pin(async move {
            tx.commit_step(
                vec![NewMessage::assistant(vec![MessagePart::text("hello")])],
                false,
            )
            .await?;
            tx.finish_turn().await.map(|_| ())
        })
    })
    .await;
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let all = ids(page.expect(200));
    (id, all[all.len() - 2], all[all.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_regenerate_and_activate_move_the_active_branch_and_lose_nothing() {
    let s = Server::start().await;
    let (id, question, answer) = answered(&s).await;
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let first = &page.expect(200)["messages"][1];
    assert_eq!(first["parent_id"], json!(question));
    assert_eq!(first["sibling_ids"], json!([]));

    // Regenerate: a new branch from the question.
    let chat = s
        .post_empty(
            &chat_path(id, &format!("/messages/{answer}/regenerate")),
            &s.alice,
        )
        .await;
    let chat = chat.expect(200);
    assert_eq!(chat["status"], "running");
    assert_eq!(chat["active_leaf_id"], json!(question));
    assert_eq!(
        ids(s
            .get(&chat_path(id, "/messages"), &s.alice)
            .await
            .expect(200))
        .last(),
        Some(&question)
    );
    s.apply(id, |tx| {
        Box::pin(async move {
            tx.commit_step(
                vec![NewMessage::assistant(vec![MessagePart::text(
                    "hello again",
                )])],
                false,
            )
            .await?;
            tx.finish_turn().await.map(|_| ())
        })
    })
    .await;
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let page = page.expect(200);
    let new_answer = page["messages"].as_array().unwrap().last().unwrap().clone();
    let new_id = new_answer["id"].as_i64().unwrap();
    assert_eq!(new_answer["parent_id"], json!(question));
    assert_eq!(new_answer["sibling_ids"], json!([answer, new_id]));

    // Back to the first answer: the old branch is all there.
    let chat = s
        .post(
            &chat_path(id, "/branches/activate"),
            &s.alice,
            json!({"message_id": answer}),
        )
        .await;
    let chat = chat.expect(200);
    assert_eq!(chat["status"], "waiting");
    assert_eq!(chat["active_leaf_id"], json!(answer));
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let last = page.expect(200)["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["id"], json!(answer));
    assert_eq!(last["sibling_ids"], json!([answer, new_id]));
    assert_eq!(last["content"], json!([{"type": "text", "text": "hello"}]));

    // An edit adds a sibling of the question; deleted_message_ids are the
    // ids that left the branch.
    let edited = s
        .patch(
            &chat_path(id, &format!("/messages/{question}")),
            &s.alice,
            text("hi there"),
        )
        .await;
    let edited = edited.expect(200);
    let replacement = edited["message"]["id"].as_i64().unwrap();
    assert_eq!(edited["deleted_message_ids"], json!([question, answer]));
    assert_eq!(
        edited["message"]["sibling_ids"],
        json!([question, replacement])
    );
    // The tree holds every branch.
    let tree = s.get(&chat_path(id, "/messages/tree"), &s.alice).await;
    let nodes = tree.expect(200)["nodes"].as_array().unwrap().clone();
    let node_ids: Vec<i64> = nodes.iter().map(|n| n["id"].as_i64().unwrap()).collect();
    for id in [question, answer, new_id, replacement] {
        assert!(node_ids.contains(&id), "{id} in {node_ids:?}");
    }
    let active: Vec<i64> = nodes
        .iter()
        .filter(|n| n["active"] == json!(true))
        .map(|n| n["id"].as_i64().unwrap())
        .collect();
    assert_eq!(active.last(), Some(&replacement));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_answer_their_status_and_change_nothing() {
    let s = Server::start().await;
    let (id, question, answer) = answered(&s).await;
    let before = s.dump().await;
    let regen = |m: &str| chat_path(id, &format!("/messages/{m}/regenerate"));
    // Not an answer → 400; not in the chat → 404; malformed → 400.
    s.post_empty(&regen(&question.to_string()), &s.alice)
        .await
        .expect_error(400);
    s.post_empty(&regen("999999999"), &s.alice)
        .await
        .expect_error(404);
    s.post_empty(&regen("abc"), &s.alice)
        .await
        .expect_error(400);
    let activate = chat_path(id, "/branches/activate");
    s.post(&activate, &s.alice, json!({"message_id": 999_999_999}))
        .await
        .expect_error(404);
    s.post(&activate, &s.alice, json!({"message_id": "x"}))
        .await
        .expect_error(400);
    // A non-positive id is malformed, as in a path.
    for bad in [0, -1] {
        let answer = s
            .post(&activate, &s.alice, json!({"message_id": bad}))
            .await;
        assert_eq!(
            answer.expect_error(400)["validations"][0]["field"],
            "message_id"
        );
        s.post(
            &chat_path(id, "/fork"),
            &s.alice,
            json!({"message_id": bad}),
        )
        .await
        .expect_error(400);
    }
    s.post(&activate, &s.alice, json!({}))
        .await
        .expect_error(400);
    // Not the owner, admins included → 403.
    for user in [&s.bob, &s.admin] {
        let status = s.post_empty(&regen(&answer.to_string()), user).await.status;
        assert!(status == 403 || status == 404, "{status}");
        let status = s
            .post(&activate, user, json!({"message_id": answer}))
            .await
            .status;
        assert!(status == 403 || status == 404, "{status}");
    }
    s.post_empty(&regen(&answer.to_string()), &s.admin)
        .await
        .expect_error(403);
    s.post(&chat_path(id, "/fork"), &s.admin, json!({}))
        .await
        .expect_error(403);
    assert_eq!(s.dump().await, before);

    // Busy (R0, R1, A0, I0) and E1 → 409; archived → 400.
    for state in [R0, R1, A0, I0, E1] {
        let busy = s.chat_in(&s.alice, state).await;
        let rows = s.message_ids(busy).await;
        let before = s.dump().await;
        let path = chat_path(busy, &format!("/messages/{}/regenerate", rows[0]));
        s.post_empty(&path, &s.alice).await.expect_error(409);
        s.post(
            &chat_path(busy, "/branches/activate"),
            &s.alice,
            json!({"message_id": rows[0]}),
        )
        .await
        .expect_error(409);
        assert_eq!(s.dump().await, before, "{state}");
    }
    s.patch(&chat_path(id, ""), &s.alice, json!({"archived": true}))
        .await
        .expect(200);
    s.post_empty(&regen(&answer.to_string()), &s.alice)
        .await
        .expect_error(400);
    s.post(&activate, &s.alice, json!({"message_id": answer}))
        .await
        .expect_error(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_a_new_idle_chat_with_a_copy_of_the_branch() {
    let s = Server::start().await;
    let (id, question, answer) = answered(&s).await;
    // No body, an empty object, or a message id.
    let whole = s.post_empty(&chat_path(id, "/fork"), &s.alice).await;
    let whole = whole.expect(201).clone();
    assert_eq!(whole["status"], "waiting");
    assert_eq!(
        whole["forked_from"],
        json!({"chat_id": id.to_string(), "message_id": answer})
    );
    assert!(whole["title"].as_str().unwrap().starts_with("Fork of "));
    let fork_id = uuid(&whole["id"]);
    let page = s.get(&chat_path(fork_id, "/messages"), &s.alice).await;
    let texts: Vec<Value> = page.expect(200)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(
        texts.last().unwrap(),
        &json!([{"type": "text", "text": "hello"}])
    );
    s.post(&chat_path(id, "/fork"), &s.alice, json!({}))
        .await
        .expect(201);
    // `null` is no body (schemathesis: the document allows it).
    s.post(&chat_path(id, "/fork"), &s.alice, Value::Null)
        .await
        .expect(201);
    let part = s
        .post(
            &chat_path(id, "/fork"),
            &s.alice,
            json!({"message_id": question}),
        )
        .await;
    let part = part.expect(201).clone();
    let part_id = uuid(&part["id"]);
    assert_eq!(
        s.message_ids(part_id).await.len(),
        s.message_ids(id).await.len() - 1
    );
    // Bad input: 400 / 404 / 415, nothing created.
    let chats_before = s.dump().await;
    s.post(
        &chat_path(id, "/fork"),
        &s.alice,
        json!({"message_id": "x"}),
    )
    .await
    .expect_error(400);
    s.post(&chat_path(id, "/fork"), &s.alice, json!({"other": 1}))
        .await
        .expect_error(400);
    s.post(
        &chat_path(id, "/fork"),
        &s.alice,
        json!({"message_id": 999_999_999}),
    )
    .await
    .expect_error(404);
    s.post(&chat_path(id, "/fork"), &s.bob, json!({})).await;
    assert_eq!(s.dump().await, chats_before);
    // A fork of an archived chat is allowed: the source is only read.
    s.patch(&chat_path(id, ""), &s.alice, json!({"archived": true}))
        .await
        .expect(200);
    s.post_empty(&chat_path(id, "/fork"), &s.alice)
        .await
        .expect(201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_get_history_reset_and_the_new_branch_on_a_switch() {
    let mut env = StreamEnv::start().await;
    env.llm.push(Script::text("answer one"));
    let chat = env.create_chat(&env.alice, chat_body("question one")).await;
    env.start_worker(3);
    env.wait_status(chat, "waiting").await;
    let first = env.messages(&env.alice, chat).await;
    let answer_one = first[1]["id"].as_i64().unwrap();
    env.llm.push(Script::text("answer two"));
    let (status, body) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/messages/{answer_one}/regenerate"),
            &env.alice,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    env.wait_status(chat, "waiting").await;
    let second = env.messages(&env.alice, chat).await;
    let answer_two = second[1]["id"].as_i64().unwrap();
    assert_eq!(second[1]["sibling_ids"], json!([answer_one, answer_two]));
    env.stop_worker().await;

    let mut ws = env.watch(chat, None).await;
    ws.until("waiting", |e| label(e) == "status:waiting").await;
    let (status, body) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/branches/activate"),
            &env.alice,
            Some(json!({"message_id": answer_one})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    ws.until("history_reset", |e| label(e) == "history_reset")
        .await;
    let after = ws
        .until("the old answer", |e| {
            label(e) == format!("message:{answer_one}")
        })
        .await;
    assert_eq!(
        after["message"]["sibling_ids"],
        json!([answer_one, answer_two])
    );
    let labels: Vec<String> = ws.events.iter().map(label).collect();
    let reset = labels.iter().rposition(|l| l == "history_reset").unwrap();
    assert!(
        !labels[reset..].contains(&format!("message:{answer_two}")),
        "the other branch is not resent: {labels:?}"
    );
}
