//! `GET /chats/{chat}/messages` paging and visibility, and
//! `client_message_id` de-duplication of sends (including a race).

use chatd_core::{ChatRole, ExecutionState::*, MessagePart, Visibility};
use chatd_store::NewMessage;
use serde_json::{Value, json};

use crate::common::*;

fn ids(page: &Value) -> Vec<i64> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_pages_are_ascending_with_cursors_and_hide_model_only_and_deleted_rows() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, R0).await;
    // Ten more visible messages, one model-only summary and usage on one.
    let mut step = vec![];
    for i in 0..10 {
        let mut m = NewMessage::assistant(vec![MessagePart::text(format!("m{i}"))]);
        if i == 0 {
            m.usage = Some(chatd_store::Usage {
                input_tokens: 10,
                output_tokens: 5,
                reasoning_tokens: 1,
                cache_read_tokens: 2,
                cache_creation_tokens: 3,
                total_tokens: 15,
            });
            m.total_cost_micros = Some(42);
            m.runtime_ms = Some(1234);
            m.finish_reason = Some(chatd_core::FinishReason::Length);
        }
        step.push(m);
    }
    let mut hidden = NewMessage::new(ChatRole::Assistant, vec![MessagePart::text("summary")]);
    hidden.visibility = Visibility::Model;
    hidden.compressed = true;
    step.push(hidden);
    s.apply(id, move |tx| {
        Box::pin(async move { tx.commit_step(step, false).await.map(|_| ()) })
    })
    .await;
    s.step(id, Step::Queue).await;
    let all: Vec<i64> = s.message_ids(id).await;
    assert_eq!(all.len(), 12);
    let visible: Vec<i64> = all[..11].to_vec();

    let latest = s.get(&chat_path(id, "/messages?limit=4"), &s.alice).await;
    let latest = latest.expect(200);
    assert_eq!(ids(latest), visible[7..]);
    assert_eq!(latest["has_more"], true);
    assert_eq!(latest["queued_messages"].as_array().unwrap().len(), 1);
    let q = &latest["queued_messages"][0];
    assert_eq!(q["content"], json!([{"type": "text", "text": "queued"}]));
    // API.md "Busy behaviours and the queue": `steer` and `position` joined
    // the original six fields.
    assert_eq!(q.as_object().unwrap().len(), 8);
    assert_eq!(
        (q["steer"].clone(), q["position"].clone()),
        (json!(false), json!(0))
    );

    let before = s
        .get(
            &chat_path(id, &format!("/messages?limit=4&before_id={}", visible[7])),
            &s.alice,
        )
        .await;
    assert_eq!(ids(before.expect(200)), visible[3..7]);
    assert_eq!(before.body["has_more"], true);
    let first = s
        .get(
            &chat_path(id, &format!("/messages?limit=4&before_id={}", visible[3])),
            &s.alice,
        )
        .await;
    assert_eq!(ids(first.expect(200)), visible[..3]);
    assert_eq!(first.body["has_more"], false);
    assert_eq!(first.body["queued_messages"].as_array().unwrap().len(), 1);

    let after = s
        .get(
            &chat_path(id, &format!("/messages?limit=4&after_id={}", visible[0])),
            &s.alice,
        )
        .await;
    assert_eq!(ids(after.expect(200)), visible[1..5]);
    assert_eq!(after.body["has_more"], true);
    let tail = s
        .get(
            &chat_path(id, &format!("/messages?limit=200&after_id={}", visible[5])),
            &s.alice,
        )
        .await;
    assert_eq!(ids(tail.expect(200)), visible[6..]);
    assert_eq!(tail.body["has_more"], false);

    let default = s.get(&chat_path(id, "/messages"), &s.alice).await;
    assert_eq!(ids(default.expect(200)), visible);
    assert_eq!(default.body["has_more"], false);
    // Usage, cost and runtime.
    let with_usage = default.body["messages"][1].clone();
    assert_eq!(
        with_usage["usage"],
        json!({"input_tokens": 10, "output_tokens": 5, "reasoning_tokens": 1, "cache_read_tokens": 2, "cache_creation_tokens": 3, "total_tokens": 15})
    );
    assert_eq!(with_usage["total_cost_micros"], 42);
    assert_eq!(with_usage["runtime_ms"], 1234);
    assert_eq!(with_usage["role"], "assistant");
    // The finish reason: "length" marks an answer cut short; unknown is null.
    assert_eq!(with_usage["finish_reason"], "length");
    assert_eq!(default.body["messages"][2]["finish_reason"], Value::Null);
    assert_eq!(default.body["messages"][0]["finish_reason"], Value::Null);

    // Soft-deleted rows (an edit) disappear.
    s.patch(
        &chat_path(id, &format!("/messages/{}", visible[0])),
        &s.alice,
        text("again"),
    )
    .await
    .expect(200);
    let after_edit = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let after_edit = ids(after_edit.expect(200));
    assert_eq!(after_edit.len(), 1);
    assert!(after_edit[0] > all[11]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_message_id_is_set_on_messages_promoted_by_the_worker() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, R0).await;
    let sent = s
        .post(&chat_path(id, "/messages"), &s.alice, text("later"))
        .await;
    let queued_id = sent.expect(200)["queued_message"]["id"].as_i64().unwrap();
    s.step(id, Step::FinishTurn).await;
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let last = page.expect(200)["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["queued_message_id"], queued_id);
    assert_eq!(last["content"], json!([{"type": "text", "text": "later"}]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_message_id_returns_the_first_response_and_rejects_different_content() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, W).await;
    let body = json!({"content": [{"type": "text", "text": "once"}], "client_message_id": "key-1"});
    let first = s
        .post(&chat_path(id, "/messages"), &s.alice, body.clone())
        .await;
    let first = first.expect(200).clone();
    assert_eq!(first["queued"], false);
    let after_first = s.dump().await;
    // The chat moved on (R0 now): a repeat still answers the first response.
    let again = s
        .post(&chat_path(id, "/messages"), &s.alice, body.clone())
        .await;
    assert_eq!(again.expect(200), &first);
    assert_eq!(s.dump().await, after_first);
    // Different content with the same key: 409, nothing changes.
    let different = s
        .post(
            &chat_path(id, "/messages"),
            &s.alice,
            json!({"content": [{"type": "text", "text": "twice"}], "client_message_id": "key-1"}),
        )
        .await;
    different.expect_error(409);
    let different_mode = s
        .post(
            &chat_path(id, "/messages"),
            &s.alice,
            json!({"content": [{"type": "text", "text": "once"}], "client_message_id": "key-1", "busy_behavior": "interrupt"}),
        )
        .await;
    different_mode.expect_error(409);
    assert_eq!(s.dump().await, after_first);
    // The key is per chat.
    let other = s.chat_in(&s.alice, W).await;
    s.post(&chat_path(other, "/messages"), &s.alice, body)
        .await
        .expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_with_the_same_client_message_id_produce_one_message() {
    let s = std::sync::Arc::new(Server::start().await);
    for state in [W, R0] {
        let id = s.chat_in(&s.alice, state).await;
        let body = json!({"content": [{"type": "text", "text": "race"}], "client_message_id": format!("race-{state}")});
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let s = s.clone();
            let body = body.clone();
            tasks.push(tokio::spawn(async move {
                s.post(&chat_path(id, "/messages"), &s.alice, body).await
            }));
        }
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        for a in &answers {
            assert_eq!(
                a.expect(200),
                &answers[0].body,
                "every repeat gets the first response"
            );
        }
        let (messages, queued): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND client_message_id = $2),
                    (SELECT count(*) FROM chat_queued_messages WHERE chat_id = $1 AND client_message_id = $2)",
        )
        .bind(id)
        .bind(format!("race-{state}"))
        .fetch_one(s.pool())
        .await
        .unwrap();
        assert_eq!(messages + queued, 1, "from {state}");
    }
}
