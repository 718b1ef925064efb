//! The spec's per-endpoint tables of input → output states ("HTTP
//! endpoints"), driven through HTTP from every row state: allowed pairs land
//! where the table says, everything else answers the documented error and
//! changes nothing.

use chatd_core::ExecutionState::{self, *};
use serde_json::{Value, json};

use crate::common::*;

/// What a table row sends: `(method, path, body)` for the chat, given its
/// queue head (if any) and its first message id.
type Request<'a> =
    dyn Fn(uuid::Uuid, Option<i64>, i64) -> (&'static str, String, Option<Value>) + 'a;

/// Runs `request` on a fresh chat in each state and checks the outcome:
/// `Ok(to)` = 2xx and the chat lands in `to`; `Err(status)` = that error and
/// no change at all.
async fn table(
    s: &Server,
    name: &str,
    expected: &[(ExecutionState, Result<ExecutionState, u16>)],
    request: &Request<'_>,
) {
    for (from, outcome) in expected {
        let id = s.chat_in(&s.alice, *from).await;
        let head = s.queue_ids(id).await.first().copied();
        let first = s.message_ids(id).await[0];
        let (method, path, body) = request(id, head, first);
        let before = s.dump().await;
        let answer = s.call(method, &path, Some(&s.alice.token), body).await;
        match outcome {
            Ok(to) => {
                assert!(
                    (200..300).contains(&answer.status),
                    "{name} from {from}: {} {}",
                    answer.status,
                    answer.text
                );
                assert_eq!(s.state(id).await, *to, "{name} from {from}");
            }
            Err(status) => {
                answer.expect_error(*status);
                assert_eq!(
                    s.dump().await,
                    before,
                    "{name} from {from} changed something"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_queue_table() {
    let s = Server::start().await;
    let expected = [
        (W, Ok(R0)),
        (E0, Ok(R0)),
        (E1, Ok(R1)),
        (R0, Ok(R1)),
        (R1, Ok(R1)),
        (I0, Ok(I1)),
        (I1, Ok(I1)),
        (A0, Ok(A1)),
        (A1, Ok(A1)),
        (XW, Err(400)),
        (XE0, Err(400)),
        (XE1, Err(400)),
        (Invalid, Err(409)),
    ];
    table(&s, "SendMessage(queue)", &expected, &|id, _, _| {
        ("POST", chat_path(id, "/messages"), Some(text("next")))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_interrupt_table() {
    let s = Server::start().await;
    let expected = [
        (W, Ok(R0)),
        (E0, Ok(R0)),
        (E1, Ok(R1)),
        (R0, Ok(I1)),
        (R1, Ok(I1)),
        (I0, Ok(I1)),
        (I1, Ok(I1)),
        (A0, Ok(R1)),
        (A1, Ok(R1)),
        (XW, Err(400)),
        (XE0, Err(400)),
        (XE1, Err(400)),
        (Invalid, Err(409)),
    ];
    table(&s, "SendMessage(interrupt)", &expected, &|id, _, _| {
        (
            "POST",
            chat_path(id, "/messages"),
            Some(
                json!({"content": [{"type": "text", "text": "now"}], "busy_behavior": "interrupt"}),
            ),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_response_shapes() {
    let s = Server::start().await;
    // W: the message enters history.
    let id = s.chat_in(&s.alice, W).await;
    let answer = s
        .post(&chat_path(id, "/messages"), &s.alice, text("again"))
        .await;
    let body = answer.expect(200);
    assert_eq!(body["queued"], false);
    assert_eq!(body["message"]["role"], "user");
    assert_eq!(
        body["message"]["content"],
        json!([{"type": "text", "text": "again"}])
    );
    assert_eq!(uuid(&body["message"]["created_by"]), s.alice.id);
    assert_eq!(body["message"]["queued_message_id"], Value::Null);
    assert_eq!(body["message"]["usage"], Value::Null);
    assert_eq!(body["message"]["finish_reason"], Value::Null);
    assert!(body["message"]["revision"].as_i64().unwrap() > 1);
    assert!(body.get("queued_message").is_none());
    assert_eq!(body["messages"], json!([body["message"].clone()]));
    // Issue 33 added parent_id and sibling_ids.
    assert_eq!(body["message"]["sibling_ids"], json!([]));
    assert!(body["message"]["parent_id"].as_i64().is_some());
    let keys: Vec<&String> = body["message"].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 15, "{keys:?}");

    // R0 with busy_behavior=interrupt: queued, and the chat is interrupting.
    let id = s.chat_in(&s.alice, R0).await;
    let answer = s
        .post(
            &chat_path(id, "/messages"),
            &s.alice,
            json!({"content": [{"type": "text", "text": "stop"}], "busy_behavior": "interrupt"}),
        )
        .await;
    let body = answer.expect(200);
    assert_eq!(body["queued"], true);
    assert!(body.get("message").is_none());
    assert_eq!(
        body["queued_message"]["content"],
        json!([{"type": "text", "text": "stop"}])
    );
    assert_eq!(uuid(&body["queued_message"]["chat_id"]), id);
    assert_eq!(body["messages"], json!([]));
    let chat = s.get(&chat_path(id, ""), &s.alice).await;
    assert_eq!(chat.body["status"], "interrupting");

    // A0 with interrupt: the pending call is answered first.
    let id = s.chat_in(&s.alice, A0).await;
    let answer = s
        .post(
            &chat_path(id, "/messages"),
            &s.alice,
            json!({"content": [{"type": "text", "text": "stop"}], "busy_behavior": "interrupt"}),
        )
        .await;
    let body = answer.expect(200);
    assert_eq!(body["queued"], true);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "tool");
    assert_eq!(messages[0]["content"][0]["tool_call_id"], PENDING_CALL);
    assert_eq!(
        messages[0]["content"][0]["result"],
        json!({"error": "Tool execution interrupted by user"})
    );

    // E1: the new message is queued and the head is promoted into history.
    let id = s.chat_in(&s.alice, E1).await;
    let head = s.queue_ids(id).await[0];
    let answer = s
        .post(&chat_path(id, "/messages"), &s.alice, text("later"))
        .await;
    let body = answer.expect(200);
    assert_eq!(body["queued"], true);
    assert_eq!(body["messages"][0]["queued_message_id"], head);
    assert_eq!(
        body["messages"][0]["content"],
        json!([{"type": "text", "text": "queued"}])
    );
    let chat = s.get(&chat_path(id, ""), &s.alice).await;
    assert_eq!(chat.body["last_error"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_queue_cap_is_429_naming_the_maximum() {
    let s = Server::start_with(chatd_api::ApiOptions {
        max_queued_messages: 2,
        ..Default::default()
    })
    .await;
    let id = s.chat_in(&s.alice, R0).await;
    for _ in 0..2 {
        s.post(&chat_path(id, "/messages"), &s.alice, text("q"))
            .await
            .expect(200);
    }
    let before = s.dump().await;
    let full = s
        .post(&chat_path(id, "/messages"), &s.alice, text("q"))
        .await;
    full.expect_error(429);
    assert!(
        full.body["detail"].as_str().unwrap().contains('2'),
        "{}",
        full.text
    );
    assert_eq!(s.dump().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_message_table() {
    let s = Server::start().await;
    let expected = [
        (W, Ok(R0)),
        (E0, Ok(R0)),
        (E1, Ok(R0)),
        (R0, Ok(R0)),
        (R1, Ok(R0)),
        (I0, Ok(R0)),
        (I1, Ok(R0)),
        (A0, Ok(R0)),
        (A1, Ok(R0)),
        (XW, Err(400)),
        (XE0, Err(400)),
        (XE1, Err(400)),
        (Invalid, Err(409)),
    ];
    table(&s, "EditMessage", &expected, &|id, _, first| {
        (
            "PATCH",
            chat_path(id, &format!("/messages/{first}")),
            Some(text("edited")),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_message_response_and_errors() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, A1).await;
    let ids = s.message_ids(id).await;
    let answer = s
        .patch(
            &chat_path(id, &format!("/messages/{}", ids[0])),
            &s.alice,
            text("edited"),
        )
        .await;
    let body = answer.expect(200);
    assert_eq!(
        body["message"]["content"],
        json!([{"type": "text", "text": "edited"}])
    );
    assert_eq!(body["deleted_message_ids"], json!(ids));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap(), &body["message"]);
    assert!(s.queue_ids(id).await.is_empty(), "the queue is cleared");
    // The edited message is gone: editing it again is 404.
    s.patch(
        &chat_path(id, &format!("/messages/{}", ids[0])),
        &s.alice,
        text("x"),
    )
    .await
    .expect_error(404);
    // Unknown message, and an assistant message.
    s.patch(&chat_path(id, "/messages/999999"), &s.alice, text("x"))
        .await
        .expect_error(404);
    let w = s.chat_in(&s.alice, W).await;
    let assistant = s.message_ids(w).await[1];
    let not_user = s
        .patch(
            &chat_path(w, &format!("/messages/{assistant}")),
            &s.alice,
            text("x"),
        )
        .await;
    not_user.expect_error(400);
    assert_eq!(not_user.message(), "Only user messages can be edited.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_queued_message_table() {
    let s = Server::start().await;
    // One queued message: the queue empties.
    let expected = [
        (E1, Ok(E0)),
        (R1, Ok(R0)),
        (I1, Ok(I0)),
        (A1, Ok(A0)),
        (XE1, Err(400)),
        // An empty queue holds no id: 404 (queued message not found) comes
        // before 409 in API.md's order of checks.
        (W, Err(404)),
        (E0, Err(404)),
        (R0, Err(404)),
        (I0, Err(404)),
        (A0, Err(404)),
        (XW, Err(400)),
        (XE0, Err(400)),
    ];
    table(
        &s,
        "DeleteQueuedMessage(last)",
        &expected,
        &|id, head, _| {
            let head = head.unwrap_or(1);
            ("DELETE", chat_path(id, &format!("/queue/{head}")), None)
        },
    )
    .await;
    // Two queued messages: the queue stays non-empty.
    for (from, to) in [(E1, E1), (R1, R1), (I1, I1), (A1, A1)] {
        let id = s.two_queued(&s.alice, from).await;
        let head = s.queue_ids(id).await[0];
        let answer = s
            .delete(&chat_path(id, &format!("/queue/{head}")), &s.alice)
            .await;
        answer.expect(204);
        assert_eq!(s.state(id).await, to);
        assert_eq!(s.queue_ids(id).await.len(), 1);
    }
    // An unknown id is 404 on a non-empty queue and on an empty one alike.
    let id = s.chat_in(&s.alice, R1).await;
    s.delete(&chat_path(id, "/queue/999999"), &s.alice)
        .await
        .expect_error(404);
    let id = s.chat_in(&s.alice, R0).await;
    s.delete(&chat_path(id, "/queue/999999"), &s.alice)
        .await
        .expect_error(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_queued_message_table() {
    let s = Server::start().await;
    let expected = [
        (E1, Ok(R0)),
        (R1, Ok(I1)),
        (I1, Ok(I1)),
        (A1, Ok(R0)),
        (XE1, Err(400)),
        // An empty queue holds no id: 404 (queued message not found) comes
        // before 409 in API.md's order of checks.
        (W, Err(404)),
        (E0, Err(404)),
        (R0, Err(404)),
        (I0, Err(404)),
        (A0, Err(404)),
        (XW, Err(400)),
        (XE0, Err(400)),
    ];
    table(
        &s,
        "PromoteQueuedMessage(last)",
        &expected,
        &|id, head, _| {
            let head = head.unwrap_or(1);
            (
                "POST",
                chat_path(id, &format!("/queue/{head}/promote")),
                None,
            )
        },
    )
    .await;
    // With two queued messages, promoting the second one.
    for (from, to) in [(E1, R1), (R1, I1), (I1, I1), (A1, R1)] {
        let id = s.two_queued(&s.alice, from).await;
        let second = s.queue_ids(id).await[1];
        let answer = s
            .post_empty(
                &chat_path(id, &format!("/queue/{second}/promote")),
                &s.alice,
            )
            .await;
        assert_eq!(uuid(&answer.expect(200)["id"]), id);
        assert_eq!(s.state(id).await, to, "promote from {from}");
        if matches!(from, R1 | I1) {
            assert_eq!(s.queue_ids(id).await[0], second, "moved to the head");
        } else {
            let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
            let last = page.body["messages"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .clone();
            assert_eq!(last["queued_message_id"], second, "promoted into history");
        }
    }
    for from in [R1, R0] {
        let id = s.chat_in(&s.alice, from).await;
        s.post_empty(&chat_path(id, "/queue/999999/promote"), &s.alice)
            .await
            .expect_error(404);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_table() {
    let s = Server::start().await;
    let expected = [
        (R0, Ok(I0)),
        (R1, Ok(I1)),
        (A0, Ok(R0)),
        (A1, Ok(R1)),
        (W, Err(409)),
        (E0, Err(409)),
        (E1, Err(409)),
        (I0, Err(409)),
        (I1, Err(409)),
        (XW, Err(400)),
        (XE0, Err(400)),
        (XE1, Err(400)),
        (Invalid, Err(409)),
    ];
    table(&s, "Interrupt", &expected, &|id, _, _| {
        ("POST", chat_path(id, "/interrupt"), None)
    })
    .await;
    let id = s.chat_in(&s.alice, R0).await;
    let answer = s.post_empty(&chat_path(id, "/interrupt"), &s.alice).await;
    assert_eq!(answer.expect(200)["status"], "interrupting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_results_table_and_validation() {
    let s = Server::start().await;
    let body = json!({"results": [{"tool_call_id": PENDING_CALL, "output": {"color": "red"}}]});
    let expected = [
        (A0, Ok(R0)),
        (A1, Ok(R1)),
        (W, Err(409)),
        (E0, Err(409)),
        (E1, Err(409)),
        (R0, Err(409)),
        (R1, Err(409)),
        (I0, Err(409)),
        (I1, Err(409)),
        (XW, Err(400)),
        (XE0, Err(400)),
        (XE1, Err(400)),
        (Invalid, Err(409)),
    ];
    table(&s, "CompleteRequiresAction", &expected, &|id, _, _| {
        ("POST", chat_path(id, "/tool-results"), Some(body.clone()))
    })
    .await;
    // The stored result.
    let id = s.chat_in(&s.alice, A0).await;
    let answer = s
        .post(&chat_path(id, "/tool-results"), &s.alice, body.clone())
        .await;
    let chat = answer.expect(200);
    assert_eq!(chat["status"], "running");
    assert_eq!(chat["requires_action_deadline_at"], Value::Null);
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let last = page.body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool");
    assert_eq!(
        last["content"],
        json!([{"type": "tool-result", "tool_call_id": PENDING_CALL, "tool_name": TOOL, "result": {"color": "red"}, "is_error": false}])
    );
    // Validation errors name the tool call and change nothing.
    let id = s.chat_in(&s.alice, A0).await;
    let before = s.dump().await;
    for (results, field, needle) in [
        (json!([]), "results", PENDING_CALL),
        (
            json!([{"tool_call_id": "other", "output": 1}]),
            "results[0].tool_call_id",
            "other",
        ),
        (
            json!([{"tool_call_id": PENDING_CALL, "output": 1}, {"tool_call_id": PENDING_CALL, "output": 2}]),
            "results[0].tool_call_id",
            PENDING_CALL,
        ),
    ] {
        let answer = s
            .post(
                &chat_path(id, "/tool-results"),
                &s.alice,
                json!({"results": results}),
            )
            .await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), vec![field.to_owned()], "{}", answer.text);
        assert!(
            answer.body["detail"].as_str().unwrap().contains(needle),
            "{}",
            answer.text
        );
    }
    assert_eq!(s.dump().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_invalid_lands_in_e0_or_e1_and_is_409_otherwise() {
    let s = Server::start().await;
    // Waiting with a queue: lands in E1.
    let id = s.chat_in(&s.alice, Invalid).await;
    let answer = s
        .post_empty(&chat_path(id, "/reconcile-invalid"), &s.alice)
        .await;
    let chat = answer.expect(200);
    assert_eq!(chat["status"], "error");
    assert_eq!(
        chat["last_error"]["message"],
        "Chat is in an invalid state."
    );
    assert_eq!(chat["last_error"]["kind"], "invalid_state");
    assert_eq!(chat["last_error"]["retryable"], false);
    assert_eq!(s.state(id).await, E1);
    // Archived while running: unarchived, lands in E0.
    let id = s.archived_invalid(&s.alice).await;
    let answer = s
        .post_empty(&chat_path(id, "/reconcile-invalid"), &s.alice)
        .await;
    assert_eq!(answer.expect(200)["archived"], false);
    assert_eq!(s.state(id).await, E0);
    // Every valid state, archived ones included: 409, nothing changes.
    for state in ROW_STATES.into_iter().filter(|s| *s != Invalid) {
        let id = s.chat_in(&s.alice, state).await;
        let before = s.dump().await;
        s.post_empty(&chat_path(id, "/reconcile-invalid"), &s.alice)
            .await
            .expect_error(409);
        assert_eq!(s.dump().await, before, "reconcile from {state}");
    }
}

/// `CommitStep` of an assistant reply of about 100 estimated tokens: two
/// of them are more than a summary would take.
async fn long_reply(s: &Server, id: uuid::Uuid) {
    let text = format!("a long reply {}", "lorem ipsum dolor sit amet ".repeat(14));
    s.store
        .machine(id)
        .update(move |tx| {
            Box::pin(async move {
                let reply =
                    chatd_store::NewMessage::assistant(vec![chatd_core::MessagePart::text(text)]);
                tx.commit_step(vec![reply], false).await.map(|_| ())
            })
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_table_and_nothing_to_compact() {
    let s = Server::start().await;
    // W has a user message and a reply: two more replies make four, long
    // enough that a summary of the first two would be smaller.
    let enough = |state| {
        let s = &s;
        async move {
            let id = s.create_chat(&s.alice).await;
            s.drive(id, R0).await;
            long_reply(s, id).await;
            long_reply(s, id).await;
            long_reply(s, id).await;
            match state {
                W => s.step(id, Step::FinishTurn).await,
                E0 => s.step(id, Step::FinishError).await,
                E1 => {
                    s.step(id, Step::Queue).await;
                    s.step(id, Step::FinishError).await
                }
                XW => {
                    s.step(id, Step::FinishTurn).await;
                    s.step(id, Step::Archive).await
                }
                _ => {}
            }
            assert_eq!(s.state(id).await, state);
            id
        }
    };
    for (from, to) in [(W, R0), (E0, R0), (E1, R1)] {
        let id = enough(from).await;
        let answer = s.post_empty(&chat_path(id, "/compact"), &s.alice).await;
        assert_eq!(answer.expect(200)["status"], "running");
        assert_eq!(s.state(id).await, to, "compact from {from}");
        let requested: Option<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar("SELECT compaction_requested_at FROM chats WHERE id = $1")
                .bind(id)
                .fetch_one(s.pool())
                .await
                .unwrap();
        assert!(requested.is_some());
    }
    let archived = enough(XW).await;
    s.post_empty(&chat_path(archived, "/compact"), &s.alice)
        .await
        .expect_error(400);
    // Busy states: 409.
    for from in [R0, R1, I0, I1, A0, A1] {
        let id = s.chat_in(&s.alice, from).await;
        let answer = s.post_empty(&chat_path(id, "/compact"), &s.alice).await;
        answer.expect_error(409);
        assert_eq!(s.state(id).await, from);
    }
    // Two visible messages only.
    let id = s.chat_in(&s.alice, W).await;
    let before = s.dump().await;
    let answer = s.post_empty(&chat_path(id, "/compact"), &s.alice).await;
    answer.expect_error(409);
    assert_eq!(answer.message(), "Nothing to compact.");
    assert_eq!(s.dump().await, before);
}

/// API.md "Context management": a compaction is committed only when it
/// shrinks. Four short messages (a manual compaction would summarize
/// "hello" and "hi there", about 12 tokens, less than any summary) →
/// `409` "Nothing to compact.", nothing changes, and the chat takes the
/// next message as before; with a model config (its own verbatim tail and
/// window) the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacting_a_short_chat_is_nothing_to_compact_and_the_chat_stays_usable() {
    let s = Server::start().await;
    for with_config in [false, true] {
        if with_config {
            s.model_config().await;
        }
        let id = s.create_chat(&s.alice).await;
        s.drive(id, R0).await;
        s.step(id, Step::Reply).await;
        s.step(id, Step::Reply).await;
        s.step(id, Step::Reply).await;
        s.step(id, Step::FinishTurn).await;
        assert_eq!(s.state(id).await, W);
        let before = s.dump().await;
        let answer = s.post_empty(&chat_path(id, "/compact"), &s.alice).await;
        let body = answer.expect_error(409);
        assert_eq!(answer.message(), "Nothing to compact.");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("would not be smaller")),
            "{body}"
        );
        assert_eq!(s.dump().await, before, "nothing changes");
        assert_eq!(s.state(id).await, W);
        let sent = s
            .post(&chat_path(id, "/messages"), &s.alice, text("still here"))
            .await;
        assert_eq!(sent.expect(200)["message"]["role"], "user");
        assert_eq!(s.state(id).await, R0, "the send starts a turn");
        // Longer messages make it worth it.
        let id = s.create_chat(&s.alice).await;
        s.drive(id, R0).await;
        for _ in 0..3 {
            long_reply(&s, id).await;
        }
        s.step(id, Step::FinishTurn).await;
        let answer = s.post_empty(&chat_path(id, "/compact"), &s.alice).await;
        assert_eq!(answer.expect(200)["status"], "running");
    }
}

/// `POST /clear-context` (API.md "Context management"): `W`/`E0` land `W`
/// with a visible `context-cleared` system row and no error; busy, `E1`,
/// archived, another user's chat: refused, nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_context_table() {
    let s = Server::start().await;
    for from in [W, E0] {
        let id = s.chat_in(&s.alice, from).await;
        let before = s.get(&chat_path(id, ""), &s.alice).await;
        let before = before.expect(200);
        let answer = s
            .post_empty(&chat_path(id, "/clear-context"), &s.alice)
            .await;
        let chat = answer.expect(200);
        assert_eq!(chat["status"], "waiting", "from {from}");
        assert_eq!(chat["last_error"], serde_json::Value::Null);
        assert_eq!(s.state(id).await, W);
        // The model context is only the boundary now: nothing to estimate.
        assert!(
            chat["context"]["tokens"].as_i64() < before["context"]["tokens"].as_i64(),
            "{chat}"
        );
        assert_eq!(chat["context"]["tokens"], 0);
        let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
        let page = page.expect(200);
        let last = page["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["role"], "system");
        assert_eq!(
            last["content"],
            serde_json::json!([{"type": "context-cleared"}])
        );
        let model_view = chatd_store::messages::active_history(s.pool(), id)
            .await
            .unwrap();
        assert!(model_view.is_empty(), "the model sees nothing before it");
    }
    for from in [R0, R1, I0, I1, A0, A1, E1] {
        let id = s.chat_in(&s.alice, from).await;
        let before = s.dump().await;
        let answer = s
            .post_empty(&chat_path(id, "/clear-context"), &s.alice)
            .await;
        answer.expect_error(409);
        assert_eq!(s.dump().await, before, "from {from}");
    }
    let id = s.chat_in(&s.alice, XW).await;
    let other = s.chat_in(&s.alice, W).await;
    let before = s.dump().await;
    s.post_empty(&chat_path(id, "/clear-context"), &s.alice)
        .await
        .expect_error(400);
    s.post_empty(&chat_path(other, "/clear-context"), &s.bob)
        .await
        .expect_error(404);
    assert_eq!(s.dump().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_transition_names_the_chat_state_in_api_terms() {
    let s = Server::start().await;
    let cases = [
        (
            W,
            "Interrupt is not allowed while the chat's status is waiting (execution state W).",
        ),
        (
            E1,
            "Interrupt is not allowed while the chat's status is error, with queued messages \
             (execution state E1).",
        ),
    ];
    for (state, detail) in cases {
        let id = s.chat_in(&s.alice, state).await;
        let answer = s
            .post(
                &chat_path(id, "/interrupt"),
                &s.alice,
                serde_json::Value::Null,
            )
            .await;
        let body = answer.expect_error(409);
        assert_eq!(body["detail"], serde_json::json!(detail), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_steer_table() {
    let s = Server::start().await;
    // As queue everywhere (API.md: steer outside running behaves as queue).
    let expected = [
        (W, Ok(R0)),
        (E0, Ok(R0)),
        (E1, Ok(R1)),
        (R0, Ok(R1)),
        (R1, Ok(R1)),
        (I0, Ok(I1)),
        (I1, Ok(I1)),
        (A0, Ok(A1)),
        (A1, Ok(A1)),
        (XW, Err(400)),
        (XE0, Err(400)),
        (XE1, Err(400)),
        (Invalid, Err(409)),
    ];
    table(&s, "SendMessage(steer)", &expected, &|id, _, _| {
        (
            "POST",
            chat_path(id, "/messages"),
            Some(json!({"content": [{"type": "text", "text": "also"}], "busy_behavior": "steer"})),
        )
    })
    .await;
    // Running: queued with steer true, at the tail, with its position.
    for (from, steer) in [(R0, true), (R1, true), (I0, false), (A1, false)] {
        let id = s.chat_in(&s.alice, from).await;
        let body = s
            .post(
                &chat_path(id, "/messages"),
                &s.alice,
                json!({"content": [{"type": "text", "text": "also"}], "busy_behavior": "steer"}),
            )
            .await
            .expect(200)
            .clone();
        let queued = &body["queued_message"];
        assert_eq!(queued["steer"], steer, "steer from {from}");
        let len = s.queue_ids(id).await.len() as i64;
        assert_eq!(queued["position"], len - 1, "at the tail from {from}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_reject_table() {
    let s = Server::start().await;
    let expected = [
        (W, Ok(R0)),
        (E0, Ok(R0)),
        (E1, Ok(R1)),
        (R0, Err(409)),
        (R1, Err(409)),
        (I0, Err(409)),
        (I1, Err(409)),
        (A0, Err(409)),
        (A1, Err(409)),
        (XW, Err(400)),
        (XE0, Err(400)),
        (XE1, Err(400)),
        (Invalid, Err(409)),
    ];
    table(&s, "SendMessage(reject)", &expected, &|id, _, _| {
        (
            "POST",
            chat_path(id, "/messages"),
            Some(json!({"content": [{"type": "text", "text": "x"}], "busy_behavior": "reject"})),
        )
    })
    .await;
    // The 409 names the status.
    for (from, status) in [
        (R0, "running"),
        (I1, "interrupting"),
        (A0, "requires_action"),
    ] {
        let id = s.chat_in(&s.alice, from).await;
        let answer = s
            .post(
                &chat_path(id, "/messages"),
                &s.alice,
                json!({"content": [{"type": "text", "text": "x"}], "busy_behavior": "reject"}),
            )
            .await;
        let body = answer.expect_error(409);
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(&format!("status is {status}")),
            "{from}: {detail}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_queued_message_table() {
    let s = Server::start().await;
    let expected = [
        (E1, Ok(E1)),
        (R1, Ok(R1)),
        (I1, Ok(I1)),
        (A1, Ok(A1)),
        (XE1, Err(400)),
        (W, Err(404)),
        (E0, Err(404)),
        (R0, Err(404)),
        (I0, Err(404)),
        (A0, Err(404)),
        (XW, Err(400)),
        (XE0, Err(400)),
    ];
    table(&s, "EditQueuedMessage", &expected, &|id, head, _| {
        let head = head.unwrap_or(1);
        (
            "PATCH",
            chat_path(id, &format!("/queue/{head}")),
            Some(json!({"content": [{"type": "text", "text": "fixed"}], "steer": true})),
        )
    })
    .await;
    // The answer is the edited object; the queue version moves.
    let id = s.two_queued(&s.alice, R1).await;
    let ids = s.queue_ids(id).await;
    let before = s.get(&chat_path(id, ""), &s.alice).await.body["queue_version"].clone();
    let body = s
        .patch(
            &chat_path(id, &format!("/queue/{}", ids[1])),
            &s.alice,
            json!({"content": [{"type": "text", "text": "fixed"}], "steer": true}),
        )
        .await
        .expect(200)
        .clone();
    assert_eq!(body["id"], ids[1]);
    assert_eq!(body["content"], json!([{"type": "text", "text": "fixed"}]));
    assert_eq!(
        (body["steer"].clone(), body["position"].clone()),
        (json!(true), json!(1))
    );
    let chat = s.get(&chat_path(id, ""), &s.alice).await.body;
    assert!(chat["queue_version"].as_i64() > before.as_i64());
    assert_eq!(chat["queue_version"], chat["snapshot_version"]);
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await.body;
    assert_eq!(page["queued_messages"][1], body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_queued_message_table() {
    let s = Server::start().await;
    let expected = [
        (E1, Ok(E1)),
        (R1, Ok(R1)),
        (I1, Ok(I1)),
        (A1, Ok(A1)),
        (XE1, Err(400)),
        (W, Err(404)),
        (E0, Err(404)),
        (R0, Err(404)),
        (I0, Err(404)),
        (A0, Err(404)),
        (XW, Err(400)),
        (XE0, Err(400)),
    ];
    table(&s, "MoveQueuedMessage", &expected, &|id, head, _| {
        let head = head.unwrap_or(1);
        (
            "POST",
            chat_path(id, &format!("/queue/{head}/move")),
            Some(json!({"position": 3})),
        )
    })
    .await;
    for from in [E1, R1, I1, A1] {
        let id = s.two_queued(&s.alice, from).await;
        let ids = s.queue_ids(id).await;
        let body = s
            .post(
                &chat_path(id, &format!("/queue/{}/move", ids[1])),
                &s.alice,
                json!({"position": 0}),
            )
            .await
            .expect(200)
            .clone();
        let order: Vec<(i64, i64)> = body
            .as_array()
            .unwrap()
            .iter()
            .map(|q| (q["id"].as_i64().unwrap(), q["position"].as_i64().unwrap()))
            .collect();
        assert_eq!(order, vec![(ids[1], 0), (ids[0], 1)], "from {from}");
        assert_eq!(s.queue_ids(id).await, vec![ids[1], ids[0]]);
        assert_eq!(s.state(id).await, from);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_edit_and_move_are_owner_only_and_validate_before_changing_anything() {
    let s = Server::start().await;
    let id = s.two_queued(&s.alice, R1).await;
    let head = s.queue_ids(id).await[0];
    let edit = chat_path(id, &format!("/queue/{head}"));
    let mv = chat_path(id, &format!("/queue/{head}/move"));
    let before = s.dump().await;
    // (method, path, body, status, field)
    let cases: Vec<(&str, &str, Value, u16, Option<&str>)> = vec![
        ("POST", &mv, json!({"position": -1}), 400, Some("position")),
        ("POST", &mv, json!({"position": 1.5}), 400, Some("position")),
        ("POST", &mv, json!({"position": "1"}), 400, Some("position")),
        ("POST", &mv, json!({}), 400, None),
        ("PATCH", &edit, json!({"content": []}), 400, Some("content")),
        ("PATCH", &edit, json!({"steer": "yes"}), 400, Some("steer")),
        (
            "PATCH",
            &edit,
            json!({"model_config_id": uuid::Uuid::new_v4()}),
            400,
            Some("model_config_id"),
        ),
        ("PATCH", &edit, json!({"colour": "red"}), 400, None),
    ];
    for (method, path, body, status, field) in cases {
        let answer = s
            .call(method, path, Some(&s.alice.token), Some(body.clone()))
            .await;
        answer.expect_error(status);
        if let Some(field) = field {
            assert!(
                answer.fields().iter().any(|f| f == field),
                "{body}: {:?}",
                answer.text
            );
        }
        assert_eq!(s.dump().await, before, "{method} {body} changed something");
    }
    // Another member sees no chat; an admin is not the owner.
    let answer = s
        .call(
            "POST",
            &mv,
            Some(&s.bob.token),
            Some(json!({"position": 1})),
        )
        .await;
    answer.expect_error(404);
    let answer = s
        .call(
            "POST",
            &mv,
            Some(&s.admin.token),
            Some(json!({"position": 1})),
        )
        .await;
    answer.expect_error(403);
    let answer = s
        .call(
            "PATCH",
            &edit,
            Some(&s.admin.token),
            Some(json!({"steer": true})),
        )
        .await;
    answer.expect_error(403);
    assert_eq!(s.dump().await, before);
}
