//! Message windows and paging by size (API.md "Message windows and paging by
//! size"): `max_bytes` and `window=true` on `GET .../messages`,
//! `Chat.message_count` and `Chat.last_message_preview`, and the long-poll
//! `GET .../updates`.

use std::time::{Duration, Instant};

use chatd_core::{ChatRole, ExecutionState::*, MessagePart, Visibility};
use chatd_store::NewMessage;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::*;
use crate::stream_support::{StreamEnv, fast_stream_config};

fn ids(page: &Value) -> Vec<i64> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect()
}

/// The JSON size of each message of a page, as the route defines it.
fn sizes(page: &Value) -> Vec<i64> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_json::to_vec(m).unwrap().len() as i64)
        .collect()
}

fn assistant(text: String) -> NewMessage {
    NewMessage::assistant(vec![MessagePart::text(text)])
}

fn tool_call(call: &str) -> NewMessage {
    NewMessage::assistant(vec![MessagePart::ToolCall {
        tool_call_id: call.into(),
        tool_name: "search".into(),
        args: "{}".into(),
    }])
}

fn tool_result(call: &str) -> NewMessage {
    NewMessage::new(
        ChatRole::Tool,
        vec![MessagePart::ToolResult {
            tool_call_id: call.into(),
            tool_name: "search".into(),
            result: json!({"hits": "x".repeat(200)}),
            is_error: false,
        }],
    )
}

/// Commits `messages` as one step of the running chat `id`.
async fn commit(s: &Server, id: Uuid, messages: Vec<NewMessage>) {
    s.apply(id, move |tx| {
        Box::pin(async move { tx.commit_step(messages, false).await.map(|_| ()) })
    })
    .await;
}

/// A running chat with `n` visible messages in all: the first user message
/// and `n - 1` assistant messages of `text_len` bytes of text each.
async fn long_chat(s: &Server, n: usize, text_len: usize) -> (Uuid, Vec<i64>) {
    let id = s.chat_in(&s.alice, R0).await;
    let step = (1..n)
        .map(|i| assistant(format!("{i:05}{}", "y".repeat(text_len))))
        .collect();
    commit(s, id, step).await;
    let all = s.message_ids(id).await;
    assert_eq!(all.len(), n);
    (id, all)
}

/// `message_count` and `last_message_preview` recomputed from the rows.
async fn recount(s: &Server, id: Uuid) -> (i64, Option<String>) {
    let rows = chatd_testkit::store::message_rows(s.pool(), id).await;
    let visible: Vec<_> = rows
        .iter()
        .filter(|m| !m.deleted && m.visibility.client_visible())
        .collect();
    let preview = visible.iter().rev().find_map(|m| {
        m.content.0.iter().rev().find_map(|p| match p {
            MessagePart::Text { text, .. } if !text.is_empty() => {
                Some(text.chars().take(200).collect::<String>())
            }
            _ => None,
        })
    });
    (visible.len() as i64, preview)
}

/// `GET /chats/{id}{path}` as alice.
async fn messages_page(s: &Server, id: Uuid, path: &str) -> Answer {
    s.get(&chat_path(id, path), &s.alice).await
}

async fn chat_json(s: &Server, id: Uuid) -> Value {
    s.get(&chat_path(id, ""), &s.alice)
        .await
        .expect(200)
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_ends_a_page_before_the_message_that_would_pass_it_and_keeps_one() {
    let s = Server::start().await;
    let (id, all) = long_chat(&s, 10, 1000).await;
    let full = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let full = full.expect(200).clone();
    assert_eq!(ids(&full), all);
    let size = sizes(&full);

    // Newest first: the budget of the last three messages fits three.
    let three: i64 = size[7..].iter().sum();
    let page = messages_page(&s, id, &format!("/messages?max_bytes={three}")).await;
    assert_eq!(ids(page.expect(200)), all[7..]);
    assert_eq!(page.body["has_more"], true);
    let page = messages_page(&s, id, &format!("/messages?max_bytes={}", three - 1)).await;
    assert_eq!(ids(page.expect(200)), all[8..]);

    // Forward from the first message, and the has_more at the end.
    let two: i64 = size[1..3].iter().sum();
    let page = s
        .get(
            &chat_path(
                id,
                &format!("/messages?after_id={}&max_bytes={two}", all[0]),
            ),
            &s.alice,
        )
        .await;
    assert_eq!(ids(page.expect(200)), all[1..3]);
    assert_eq!(page.body["has_more"], true);
    let rest: i64 = size[8..].iter().sum();
    let page = s
        .get(
            &chat_path(
                id,
                &format!("/messages?after_id={}&max_bytes={rest}", all[7]),
            ),
            &s.alice,
        )
        .await;
    assert_eq!(ids(page.expect(200)), all[8..]);
    assert_eq!(page.body["has_more"], false);

    // A budget smaller than any message still answers one.
    for query in [
        "max_bytes=1".to_owned(),
        format!("before_id={}&max_bytes=1", all[5]),
        format!("after_id={}&max_bytes=1", all[5]),
    ] {
        let page = s
            .get(&chat_path(id, &format!("/messages?{query}")), &s.alice)
            .await;
        assert_eq!(ids(page.expect(200)).len(), 1, "{query}");
        assert_eq!(page.body["has_more"], true, "{query}");
    }
    // The default (512 KiB) cuts a page of big messages: 5 × 200 KiB.
    let id2 = s.chat_in(&s.alice, R0).await;
    commit(
        &s,
        id2,
        (0..5)
            .map(|i| assistant(format!("{i}{}", "z".repeat(200 * 1024))))
            .collect(),
    )
    .await;
    let page = s.get(&chat_path(id2, "/messages"), &s.alice).await;
    let page = page.expect(200);
    assert_eq!(
        ids(page).len(),
        2,
        "two of 200 KiB fit 512 KiB, three do not"
    );
    assert!(sizes(page).iter().sum::<i64>() <= 512 * 1024);
    assert_eq!(page["has_more"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_never_separate_a_tool_call_from_its_results() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, R0).await;
    // hello, a1, call, result, result, a2.
    commit(
        &s,
        id,
        vec![
            assistant("a1".into()),
            NewMessage::assistant(vec![
                MessagePart::ToolCall {
                    tool_call_id: "c1".into(),
                    tool_name: "search".into(),
                    args: "{}".into(),
                },
                MessagePart::ToolCall {
                    tool_call_id: "c2".into(),
                    tool_name: "search".into(),
                    args: "{}".into(),
                },
            ]),
            tool_result("c1"),
            tool_result("c2"),
            assistant("a2".into()),
        ],
    )
    .await;
    let all = s.message_ids(id).await;
    let size = sizes(
        s.get(&chat_path(id, "/messages"), &s.alice)
            .await
            .expect(200),
    );

    // Newest first with room for a2 and both results but not the call: the
    // page ends before the group, at a2.
    let budget: i64 = size[3..].iter().sum::<i64>() + size[2] - 1;
    let page = messages_page(&s, id, &format!("/messages?max_bytes={budget}")).await;
    assert_eq!(ids(page.expect(200)), all[5..]);
    // By count alike: limit 3 would start at a result.
    let page = s.get(&chat_path(id, "/messages?limit=3"), &s.alice).await;
    assert_eq!(ids(page.expect(200)), all[5..]);
    let page = s.get(&chat_path(id, "/messages?limit=4"), &s.alice).await;
    assert_eq!(ids(page.expect(200)), all[2..]);
    // The next page back ends exactly where the group starts.
    let page = messages_page(&s, id, &format!("/messages?before_id={}&limit=3", all[5])).await;
    assert_eq!(ids(page.expect(200)), all[2..5]);
    assert_eq!(page.body["has_more"], true);

    // Forward: after a1 with room for the call only: the whole group (at
    // least one group, never split).
    let page = messages_page(
        &s,
        id,
        &format!("/messages?after_id={}&max_bytes=1", all[1]),
    )
    .await;
    assert_eq!(ids(page.expect(200)), all[2..5]);
    assert_eq!(page.body["has_more"], true);
    let page = messages_page(&s, id, &format!("/messages?after_id={}&limit=2", all[0])).await;
    assert_eq!(ids(page.expect(200)), all[1..2]);
    // A group of more messages than the limit is split (the only case).
    let page = messages_page(&s, id, &format!("/messages?after_id={}&limit=2", all[1])).await;
    assert_eq!(ids(page.expect(200)), all[2..4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_returns_head_and_tail_and_the_omitted_middle_pages_in_place() {
    let s = Server::start().await;
    let (id, all) = long_chat(&s, 150, 10).await;
    // A model-only row in the middle is never returned nor counted.
    let mut hidden = assistant("summary".into());
    hidden.visibility = Visibility::Model;
    commit(&s, id, vec![hidden, assistant("after".into())]).await;
    let mut all = all;
    all.push(*s.message_ids(id).await.last().unwrap());

    let page = s
        .get(&chat_path(id, "/messages?window=true"), &s.alice)
        .await;
    let page = page.expect(200);
    let got = ids(page);
    assert_eq!(got[..20], all[..20]);
    assert_eq!(got[20..], all[all.len() - 100..]);
    assert_eq!(
        page["window"],
        json!({"head_last_id": all[19], "tail_first_id": all[all.len() - 100], "omitted": 31})
    );
    assert_eq!(page["has_more"], true);

    // Page the middle with after_id (and before_id) until the tail.
    let mut middle = vec![];
    let mut after = all[19];
    loop {
        let p = messages_page(&s, id, &format!("/messages?after_id={after}&limit=7")).await;
        let p = ids(p.expect(200));
        let inside: Vec<i64> = p
            .into_iter()
            .filter(|m| *m < all[all.len() - 100])
            .collect();
        if inside.is_empty() {
            break;
        }
        after = *inside.last().unwrap();
        middle.extend(inside);
    }
    assert_eq!(middle, all[20..all.len() - 100]);
    let p = s
        .get(
            &chat_path(
                id,
                &format!("/messages?before_id={}&limit=200", all[all.len() - 100]),
            ),
            &s.alice,
        )
        .await;
    assert_eq!(ids(p.expect(200)), all[..all.len() - 100]);
    let chat = chat_json(&s, id).await;
    assert_eq!(chat["message_count"], all.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_of_a_short_chat_is_everything_and_omits_nothing() {
    let s = Server::start().await;
    let (id, all) = long_chat(&s, 30, 10).await;
    let page = s
        .get(&chat_path(id, "/messages?window=true"), &s.alice)
        .await;
    let page = page.expect(200);
    assert_eq!(ids(page), all);
    // The two sides meet: the head is the first 20, the tail the whole chat.
    assert_eq!(
        page["window"],
        json!({"head_last_id": all[19], "tail_first_id": all[0], "omitted": 0})
    );
    assert_eq!(page["has_more"], false);
    // Without window=true there is no window field.
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    assert!(page.expect(200).get("window").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_sides_are_bounded_by_bytes_and_keep_tool_groups() {
    let s = Server::start().await;
    // hello, then 40 messages of 20 KiB: 6 fit the head's 128 KiB, 19 the
    // tail's 384 KiB; then a tool group at the very end.
    let id = s.chat_in(&s.alice, R0).await;
    commit(
        &s,
        id,
        (0..40)
            .map(|i| assistant(format!("{i:03}{}", "w".repeat(20 * 1024))))
            .collect(),
    )
    .await;
    commit(&s, id, vec![tool_call("c"), tool_result("c")]).await;
    let all = s.message_ids(id).await;
    let page = s
        .get(&chat_path(id, "/messages?window=true"), &s.alice)
        .await;
    let page = page.expect(200).clone();
    let got = ids(&page);
    let head = page["window"]["head_last_id"].as_i64().unwrap();
    let tail = page["window"]["tail_first_id"].as_i64().unwrap();
    let head_ids: Vec<i64> = got.iter().copied().filter(|m| *m <= head).collect();
    let tail_ids: Vec<i64> = got.iter().copied().filter(|m| *m >= tail).collect();
    assert_eq!(head_ids, all[..head_ids.len()]);
    assert_eq!(tail_ids, all[all.len() - tail_ids.len()..]);
    let size = sizes(&page);
    let head_bytes: i64 = size[..head_ids.len()].iter().sum();
    let tail_bytes: i64 = size[head_ids.len()..].iter().sum();
    assert!(head_bytes <= 128 * 1024, "{head_bytes}");
    assert!(tail_bytes <= 384 * 1024, "{tail_bytes}");
    assert_eq!(head_ids.len(), 7, "hello and six of 20 KiB");
    assert_eq!(tail_ids.len(), 20, "the tool group and 18 of 20 KiB");
    assert_eq!(
        page["window"]["omitted"].as_i64().unwrap(),
        (all.len() - head_ids.len() - tail_ids.len()) as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_count_and_preview_follow_sends_edits_and_skip_model_only_rows() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, W).await;
    let chat = chat_json(&s, id).await;
    // hello and the builder's reply "hi there".
    assert_eq!(chat["message_count"], 2);
    assert_eq!(chat["last_message_preview"], "hi there");

    let long = "é".repeat(300);
    s.post(&chat_path(id, "/messages"), &s.alice, text(&long))
        .await
        .expect(200);
    let chat = chat_json(&s, id).await;
    assert_eq!(chat["message_count"], 3);
    assert_eq!(
        chat["last_message_preview"].as_str().unwrap(),
        "é".repeat(200),
        "200 characters, not bytes"
    );
    // A tool group without text: counted, the preview stays.
    commit(&s, id, vec![tool_call("c"), tool_result("c")]).await;
    // A model-only row with text: neither counted nor previewed.
    let mut hidden = assistant("secret summary".into());
    hidden.visibility = Visibility::Model;
    hidden.compressed = true;
    commit(&s, id, vec![hidden]).await;
    let chat = chat_json(&s, id).await;
    assert_eq!(chat["message_count"], 5);
    assert_eq!(
        chat["last_message_preview"].as_str().unwrap(),
        "é".repeat(200)
    );
    assert_eq!(recount(&s, id).await, (5, Some("é".repeat(200))));

    // Edit the first message: everything after it is deleted.
    let first = s.message_ids(id).await[0];
    let edited = s
        .patch(
            &chat_path(id, &format!("/messages/{first}")),
            &s.alice,
            text("edited"),
        )
        .await;
    edited.expect(200);
    let chat = chat_json(&s, id).await;
    assert_eq!(chat["message_count"], 1);
    assert_eq!(chat["last_message_preview"], "edited");
    assert_eq!(recount(&s, id).await, (1, Some("edited".into())));

    // A deletion that takes the preview's source with it finds the one
    // before: edit a later message of a chat whose last text is after it.
    commit(&s, id, vec![assistant("answer one".into())]).await;
    s.step(id, Step::FinishTurn).await;
    s.post(&chat_path(id, "/messages"), &s.alice, text("second"))
        .await
        .expect(200);
    commit(&s, id, vec![tool_call("d"), tool_result("d")]).await;
    let visible = ids(s
        .get(&chat_path(id, "/messages"), &s.alice)
        .await
        .expect(200));
    assert_eq!(visible.len(), 5);
    let second = visible[2];
    // What an edit's transaction does to the rows (the store's
    // `lock_and_bump` and `soft_delete_from`, crate-private), by hand.
    let mut tx = s.pool().begin().await.unwrap();
    sqlx::query("UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE chat_messages SET deleted = true WHERE chat_id = $1 AND id >= $2 AND NOT deleted",
    )
    .bind(id)
    .bind(second)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(recount(&s, id).await, (2, Some("answer one".into())));
    let chat = chat_json(&s, id).await;
    assert_eq!(chat["message_count"], 2);
    assert_eq!(chat["last_message_preview"], "answer one");

    // The list carries both, from the columns.
    let list = s.get("/api/v2/chats", &s.alice).await;
    let listed = &list.expect(200)[0];
    assert_eq!(listed["message_count"], 2);
    assert_eq!(listed["last_message_preview"], "answer one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sends_edits_and_steps_keep_message_count_equal_to_a_count_of_visible_rows() {
    let s = std::sync::Arc::new(Server::start().await);
    let id = s.chat_in(&s.alice, W).await;
    // Successful sends, edits and steps.
    let done = std::sync::Arc::new([(); 3].map(|()| std::sync::atomic::AtomicUsize::new(0)));
    let mut tasks = vec![];
    for t in 0..6 {
        let s = s.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..8 {
                match (t + i) % 3 {
                    0 => {
                        let body = json!({
                            "content": [{"type": "text", "text": format!("send {t}.{i}")}],
                            "busy_behavior": if i % 2 == 0 { "interrupt" } else { "queue" },
                        });
                        let a = s.post(&chat_path(id, "/messages"), &s.alice, body).await;
                        assert!([200, 409, 429].contains(&a.status), "{}", a.text);
                        if a.status == 200 {
                            done[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    1 => {
                        let rows = chatd_testkit::store::message_rows(s.pool(), id).await;
                        let users: Vec<i64> = rows
                            .iter()
                            .filter(|m| !m.deleted && m.role == ChatRole::User)
                            .map(|m| m.id)
                            .collect();
                        let target = users[(t * 7 + i) % users.len()];
                        let a = s
                            .patch(
                                &chat_path(id, &format!("/messages/{target}")),
                                &s.alice,
                                text(&format!("edit {t}.{i}")),
                            )
                            .await;
                        // The target may be deleted by a concurrent edit.
                        assert!([200, 404, 409].contains(&a.status), "{}", a.text);
                        if a.status == 200 {
                            done[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    _ => {
                        let mut hidden = assistant(format!("hidden {t}.{i}"));
                        hidden.visibility = Visibility::Model;
                        let step = vec![assistant(format!("step {t}.{i}")), hidden];
                        let result = s
                            .store
                            .machine(id)
                            .update(move |tx| {
                                Box::pin(async move { tx.commit_step(step, false).await })
                            })
                            .await;
                        // Not running (waiting, interrupting): not allowed.
                        if result.is_ok() {
                            done[2].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let counted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND visibility <> 'model'",
    )
    .bind(id)
    .fetch_one(s.pool())
    .await
    .unwrap();
    let chat = chat_json(&s, id).await;
    assert_eq!(chat["message_count"], counted);
    let (n, preview) = recount(&s, id).await;
    assert_eq!(n, counted);
    assert_eq!(
        chat["last_message_preview"].as_str().map(str::to_owned),
        preview
    );
    let done = done
        .each_ref()
        .map(|d| d.load(std::sync::atomic::Ordering::Relaxed));
    assert!(
        done.iter().all(|n| *n > 0),
        "sends, edits, steps that succeeded: {done:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paging_and_long_poll_parameters_are_400_naming_the_field_and_change_nothing() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, W).await;
    let before = s.dump().await;
    for (query, field) in [
        ("max_bytes=0", "max_bytes"),
        ("max_bytes=4194305", "max_bytes"),
        ("max_bytes=-5", "max_bytes"),
        ("max_bytes=1.5", "max_bytes"),
        ("max_bytes=abc", "max_bytes"),
        ("window=yes", "window"),
        ("window=1", "window"),
        ("window=true&before_id=5", "window"),
        ("window=true&after_id=5", "window"),
    ] {
        let a = s
            .get(&chat_path(id, &format!("/messages?{query}")), &s.alice)
            .await;
        a.expect_error(400);
        assert_eq!(a.fields(), vec![field], "{query}");
    }
    // Edge values are accepted.
    for query in [
        "max_bytes=1",
        "max_bytes=4194304",
        "window=false&before_id=5",
    ] {
        s.get(&chat_path(id, &format!("/messages?{query}")), &s.alice)
            .await
            .expect(200);
    }
    assert_eq!(s.dump().await, before);

    // The long-poll needs streaming; its parameters are checked first.
    let env = StreamEnv::start().await;
    let chat = env_chat(&env).await;
    for (query, field) in [
        ("", "after_snapshot_version"),
        ("wait_ms=10", "after_snapshot_version"),
        ("after_snapshot_version=-1", "after_snapshot_version"),
        ("after_snapshot_version=x", "after_snapshot_version"),
        ("after_snapshot_version=1.0", "after_snapshot_version"),
        ("after_snapshot_version=1&wait_ms=60001", "wait_ms"),
        ("after_snapshot_version=1&wait_ms=-1", "wait_ms"),
        ("after_snapshot_version=1&wait_ms=soon", "wait_ms"),
    ] {
        let (status, body) = env_get(&env, &env.alice.token, chat, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["validations"][0]["field"], field, "{query}");
    }
    // Another user's chat is 404 (never revealed), before the query.
    let (status, _) = env_get(&env, &env.bob.token, chat, "").await;
    assert_eq!(status, 404);
    let (status, _) = env_get(
        &env,
        &env.alice.token,
        Uuid::new_v4(),
        "after_snapshot_version=0",
    )
    .await;
    assert_eq!(status, 404);
}

async fn env_chat(env: &StreamEnv) -> Uuid {
    let a = env
        .http
        .post(format!("{}/api/v2/chats", env.replica.base))
        .bearer_auth(&env.alice.token)
        .json(&json!({"content": [{"type": "text", "text": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(a.status(), 201);
    let body: Value = a.json().await.unwrap();
    body["id"].as_str().unwrap().parse().unwrap()
}

/// `GET /chats/{chat}/updates?{query}` on the env's replica.
async fn env_get(env: &StreamEnv, token: &str, chat: Uuid, query: &str) -> (u16, Value) {
    let a = env
        .http
        .get(format!(
            "{}/api/v2/chats/{chat}/updates?{query}",
            env.replica.base
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = a.status().as_u16();
    let text = a.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_is_woken_by_pubsub_when_another_request_changes_the_chat() {
    // The sync poller runs once a minute here: only pubsub can wake the
    // long-poll in time.
    let config = chatd_api::StreamConfig {
        sync_poll_interval: Duration::from_secs(60),
        ..fast_stream_config()
    };
    let env = StreamEnv::start_with(config, true).await;
    let chat = env_chat(&env).await;
    let (status, body) = env_get(&env, &env.alice.token, chat, "after_snapshot_version=0").await;
    assert_eq!(status, 200, "already newer: at once");
    let version = body["snapshot_version"].as_i64().unwrap();

    let started = Instant::now();
    let poll = {
        let http = env.http.clone();
        let url = format!(
            "{}/api/v2/chats/{chat}/updates?after_snapshot_version={version}&wait_ms=30000",
            env.replica.base
        );
        let token = env.alice.token.clone();
        tokio::spawn(async move {
            let a = http.get(url).bearer_auth(token).send().await.unwrap();
            let status = a.status().as_u16();
            (
                status,
                a.json::<Value>().await.unwrap_or(Value::Null),
                started.elapsed(),
            )
        })
    };
    // Let the long-poll subscribe, then change the chat with another request.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = env
        .http
        .post(format!(
            "{}/api/v2/chats/{chat}/interrupt",
            env.replica.base
        ))
        .bearer_auth(&env.alice.token)
        .send()
        .await
        .unwrap();
    assert_eq!(a.status(), 200);
    let (status, body, elapsed) = poll.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body["snapshot_version"].as_i64().unwrap() > version);
    assert_eq!(body["status"], "interrupting");
    assert!(
        elapsed < Duration::from_secs(5),
        "woken by the notification, not by the end of the wait: {elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_answers_204_when_the_wait_ends_without_a_change() {
    let env = StreamEnv::start().await;
    let chat = env_chat(&env).await;
    let (_, body) = env_get(&env, &env.alice.token, chat, "after_snapshot_version=0").await;
    let version = body["snapshot_version"].as_i64().unwrap();
    let started = Instant::now();
    let (status, _) = env_get(
        &env,
        &env.alice.token,
        chat,
        &format!("after_snapshot_version={version}&wait_ms=700"),
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(status, 204);
    assert!(elapsed >= Duration::from_millis(700), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    // wait_ms=0 answers at once.
    let (status, _) = env_get(
        &env,
        &env.alice.token,
        chat,
        &format!("after_snapshot_version={version}&wait_ms=0"),
    )
    .await;
    assert_eq!(status, 204);
    // A later version than the chat's waits too (never a 200 for an old chat).
    let (status, _) = env_get(
        &env,
        &env.alice.token,
        chat,
        &format!("after_snapshot_version={}&wait_ms=100", version + 100),
    )
    .await;
    assert_eq!(status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_of_a_chat_deleted_during_the_wait_answers_404() {
    let env = StreamEnv::start().await;
    let chat = env_chat(&env).await;
    // Make it deletable: interrupt, then finish the interruption as a worker would.
    let (_, body) = env_get(&env, &env.alice.token, chat, "after_snapshot_version=0").await;
    let version = body["snapshot_version"].as_i64().unwrap();
    chatd_testkit::store::drive(&env.store, chat, W, &[Step::FinishTurn]).await;
    let (_, body) = env_get(
        &env,
        &env.alice.token,
        chat,
        &format!("after_snapshot_version={version}"),
    )
    .await;
    let version = body["snapshot_version"].as_i64().unwrap();
    let poll = {
        let http = env.http.clone();
        let url = format!(
            "{}/api/v2/chats/{chat}/updates?after_snapshot_version={version}&wait_ms=20000",
            env.replica.base
        );
        let token = env.alice.token.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let a = http.get(url).bearer_auth(token).send().await.unwrap();
            (a.status().as_u16(), started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = env
        .http
        .delete(format!("{}/api/v2/chats/{chat}", env.replica.base))
        .bearer_auth(&env.alice.token)
        .send()
        .await
        .unwrap();
    assert_eq!(a.status(), 204);
    let (status, elapsed) = poll.await.unwrap();
    assert_eq!(status, 404);
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
}
