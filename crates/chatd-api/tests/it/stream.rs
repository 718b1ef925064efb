//! The live stream end to end in one process (API.md "Stream (WebSocket)",
//! "Parts relay", "Details" → "Stream"; spec "Stream loop", "Sync poller",
//! "Relay mechanism"): the real router with streaming, a worker against the
//! fake LLM, WebSocket and SSE clients.

use std::collections::HashSet;
use std::time::Duration;

use chatd_core::MessagePart;
use chatd_store::{CreateChatInput, NewMessage};
use chatd_testkit::fake_llm::Script;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::stream_support::*;

fn ids_of(messages: &[Value]) -> Vec<i64> {
    messages.iter().map(|m| m["id"].as_i64().unwrap()).collect()
}

/// Positions of `wanted` labels in `events`, asserting they appear in that
/// order.
#[track_caller]
fn assert_in_order(events: &[Value], wanted: &[&str]) {
    let labels = labels(events);
    let mut from = 0;
    for w in wanted {
        match labels[from..].iter().position(|l| l == w) {
            Some(i) => from += i + 1,
            None => panic!("{w} missing after position {from} in {labels:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_status_parts_the_committed_message_and_waiting_with_queue_updates() {
    let mut env = StreamEnv::start().await;
    env.llm.push(Script::text_in_parts(
        "Hello world from the model",
        6,
        Duration::from_millis(150),
    ));
    env.llm.push(Script::text("second answer"));
    let chat = env.create_chat(&env.alice, chat_body("hi")).await;
    let mut ws = env.watch(chat, None).await;

    // Bootstrap: the full state, in the spec's order (the context after
    // the messages: API.md "Context management").
    let boot = ws.take(5).await;
    let user_id = boot[0]["message"]["id"].as_i64().unwrap();
    assert_eq!(
        labels(&boot),
        [
            format!("message:{user_id}"),
            "context".into(),
            "queue_update".into(),
            "status:running".into(),
            "preview_reset".into()
        ]
    );
    assert!(boot[1]["context"]["tokens"].as_i64().unwrap() > 0);
    assert!(boot[1]["context"]["limit"].as_i64().unwrap() > 0);
    assert_eq!(boot[2]["queued_messages"], json!([]));
    assert_eq!(boot[3]["status"]["history_version"], 1);
    for event in &boot {
        assert_eq!(event["chat_id"], json!(chat));
    }

    env.start_worker(3);
    ws.until("the first part", |e| e["type"] == "message_part")
        .await;
    let (status, sent) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/messages"),
            &env.alice,
            Some(send_body("queued question")),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["queued"], true);
    let queued_id = sent["queued_message"]["id"].clone();
    ws.until("status waiting", |e| label(e) == "status:waiting")
        .await;
    let events = ws.events.clone();

    // Parts: contiguous seq per episode; the first turn's preview spells the
    // committed answer.
    let episodes = check_parts(&events);
    assert_eq!(episodes[0].1, "Hello world from the model", "{episodes:?}");
    assert!(events.iter().all(|e| e["chat_id"] == json!(chat)));

    // Queue: the queued message appears, then the queue empties when it is
    // promoted into history.
    let queues: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "queue_update")
        .map(|e| &e["queued_messages"])
        .collect();
    assert_eq!(queues.len(), 3, "{:?}", labels(&events));
    assert_eq!(queues[1].as_array().unwrap().len(), 1);
    assert_eq!(queues[1][0]["id"], queued_id);
    assert_eq!(queues[2], &json!([]));

    // Committed messages: each once, exactly the current history, in order.
    let sent_ids = message_ids(&events);
    let current = env.messages(&env.alice, chat).await;
    assert_eq!(sent_ids, ids_of(&current));
    let texts: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "message")
        .map(message_text)
        .collect();
    assert_eq!(
        texts,
        [
            "hi",
            "Hello world from the model",
            "queued question",
            "second answer"
        ]
    );
    // The chat stayed running through the promotion: one status event
    // after the bootstrap, the final one.
    let statuses: Vec<String> = labels(&events[4..])
        .into_iter()
        .filter(|l| l.starts_with("status:"))
        .collect();
    assert_eq!(statuses, ["status:waiting"]);
    assert_in_order(
        &events,
        &[
            "message_part",
            &format!("message:{}", sent_ids[1]),
            "queue_update",
            "status:waiting",
        ],
    );
    assert!(ws.frames <= ws.events.len());
    ws.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_an_action_required_round_trip_and_an_error_reach_the_stream() {
    let mut env = StreamEnv::start().await;
    env.llm.push(Script::http_error(
        500,
        r#"{"error": {"message": "upstream down", "type": "server_error"}}"#,
    ));
    env.llm
        .push(Script::new().tool_call("call-1", "pick_color", "{\"color\": \"red\"}", 3));
    env.llm.push(Script::text("You picked red."));
    env.llm.push(Script::http_error(
        401,
        r#"{"error": {"message": "bad key", "type": "invalid_request_error"}}"#,
    ));
    let chat = env
        .create_chat(
            &env.alice,
            json!({
                "content": [{"type": "text", "text": "pick a color"}],
                "dynamic_tools": [{"name": "pick_color", "description": "pick", "input_schema": {"type": "object"}}],
            }),
        )
        .await;
    let mut ws = env.watch(chat, None).await;
    ws.take(4).await;
    env.start_worker(3);

    let retry = ws.until("retry", |e| e["type"] == "retry").await;
    assert_eq!(retry["retry"]["attempt"], 1);
    assert_eq!(retry["retry"]["error"]["retryable"], true);
    assert!(retry["retry"]["delay_ms"].as_u64().is_some());
    assert!(retry["retry"]["retrying_at"].is_string());

    let action = ws
        .until("action_required", |e| e["type"] == "action_required")
        .await;
    assert_eq!(
        action["action_required"]["tool_calls"],
        json!([{"tool_call_id": "call-1", "tool_name": "pick_color", "args": "{\"color\": \"red\"}", "kind": "client_tool"}])
    );
    assert!(action["action_required"]["deadline_at"].is_string());
    // The tool call streamed as tool-call parts with argument deltas.
    let args: String = ws
        .events
        .iter()
        .filter(|e| e["type"] == "message_part" && e["message_part"]["part"]["type"] == "tool-call")
        .map(|e| {
            assert_eq!(e["message_part"]["part"]["tool_call_id"], "call-1");
            assert_eq!(e["message_part"]["part"]["tool_name"], "pick_color");
            e["message_part"]["part"]["args_delta"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(args, "{\"color\": \"red\"}");

    let (status, body) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/tool-results"),
            &env.alice,
            Some(json!({"results": [{"tool_call_id": "call-1", "output": {"color": "red"}}]})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    ws.until("waiting", |e| label(e) == "status:waiting").await;

    let (status, body) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/messages"),
            &env.alice,
            Some(send_body("again")),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let error = ws.until("error", |e| e["type"] == "error").await;
    assert_eq!(error["error"]["kind"], "auth");
    assert_eq!(error["error"]["retryable"], false);

    let events = ws.events.clone();
    check_parts(&events);
    assert_in_order(
        &events,
        &[
            "status:running",
            "retry",
            "preview_reset",
            "message_part",
            "status:requires_action",
            "action_required",
            "status:running",
            "status:waiting",
            "status:running",
            "status:error",
            "error",
        ],
    );
    // status:error and error come from the same Sync, in that order.
    let labels = labels(&events);
    let at = labels.iter().position(|l| l == "status:error").unwrap();
    assert_eq!(labels[at + 1], "error");
    let sent = message_ids(&events);
    assert_eq!(sent, ids_of(&env.messages(&env.alice, chat).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_with_after_id_mid_turn_loses_and_repeats_no_message() {
    let mut env = StreamEnv::start().await;
    env.llm.push(Script::text("first answer"));
    env.llm.push(Script::text_in_parts(
        "abcdefghijklmnopqrst",
        10,
        Duration::from_millis(200),
    ));
    let chat = env.create_chat(&env.alice, chat_body("first")).await;
    env.start_worker(3);
    env.wait_status(chat, "waiting").await;

    let mut first = env.watch(chat, None).await;
    first
        .until("the bootstrap's status", |e| e["type"] == "status")
        .await;
    let (status, _) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/messages"),
            &env.alice,
            Some(send_body("second")),
        )
        .await;
    assert_eq!(status, 200);
    for _ in 0..3 {
        first.until("a part", |e| e["type"] == "message_part").await;
    }
    let first_ids = message_ids(&first.events);
    let after_id = *first_ids.iter().max().unwrap();
    first.close().await;

    let mut second = env.watch(chat, Some(after_id)).await;
    second
        .until("waiting", |e| label(e) == "status:waiting")
        .await;
    let second_ids = message_ids(&second.events);
    assert!(
        second_ids.iter().all(|id| *id > after_id),
        "{second_ids:?} vs {after_id}"
    );
    let mut all = first_ids.clone();
    all.extend(&second_ids);
    assert_eq!(
        all,
        ids_of(&env.messages(&env.alice, chat).await),
        "no gap, no repeat"
    );
    // The preview resumes from the buffer: the reconnected stream replays
    // the episode from seq 1 and gets the whole text.
    let episodes = check_parts(&second.events);
    assert_eq!(episodes.last().unwrap().1, "abcdefghijklmnopqrst");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_while_watching_resets_history_and_resends_exactly_the_current_messages() {
    let mut env = StreamEnv::start().await;
    env.llm.push(Script::text("answer one"));
    let chat = env.create_chat(&env.alice, chat_body("question one")).await;
    env.start_worker(3);
    env.wait_status(chat, "waiting").await;
    env.stop_worker().await;

    let mut ws = env.watch(chat, None).await;
    let boot = ws.take(6).await;
    let user_id = boot[0]["message"]["id"].as_i64().unwrap();
    let answer_id = boot[1]["message"]["id"].as_i64().unwrap();
    assert_eq!(
        labels(&boot),
        [
            format!("message:{user_id}"),
            format!("message:{answer_id}"),
            "context".into(),
            "queue_update".into(),
            "status:waiting".into(),
            "preview_reset".into()
        ]
    );

    let (status, body) = env
        .request(
            "PATCH",
            &format!("/api/v2/chats/{chat}/messages/{user_id}"),
            &env.alice,
            Some(json!({"content": [{"type": "text", "text": "question edited"}]})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let after = ws.take(5).await;
    let current = env.messages(&env.alice, chat).await;
    assert_eq!(current.len(), 1);
    let new_id = current[0]["id"].as_i64().unwrap();
    assert_eq!(
        labels(&after),
        [
            "history_reset".to_owned(),
            format!("message:{new_id}"),
            "context".into(),
            "status:running".into(),
            "preview_reset".into()
        ]
    );
    assert_eq!(message_text(&after[1]), "question edited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cannot_keep_up_is_closed_with_a_reason_and_resumes_with_after_id() {
    let env = StreamEnv::start_with(
        chatd_api::StreamConfig {
            outbound_capacity: 2,
            slow_client_timeout: Duration::from_millis(300),
            write_timeout: Duration::from_secs(20),
            ..fast_stream_config()
        },
        true,
    )
    .await;
    // About 40 MB of history: more than the socket buffers hold.
    let big = "x".repeat(200_000);
    let chat = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.alice.id,
            initial_messages: (0..200)
                .map(|_| NewMessage::user(vec![MessagePart::text(big.clone())]))
                .collect(),
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    let mut ws = env.watch(chat, None).await;
    // Do not read until the server has given up on this client.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = env
            .http
            .get(format!("{}/metrics", env.replica.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics
            .lines()
            .any(|l| l.starts_with("chatd_stream_terminations_total") && l.contains("slow_client"))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slow client was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let close = ws.until_closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1013);
    assert!(close.reason.contains("after_id"), "{}", close.reason);
    let first_ids = message_ids(&ws.events);
    assert!(first_ids.len() < 200, "the stream was cut short");
    assert!(!ws.events.iter().any(|e| e["type"] == "status"));

    // Reconnect with after_id and read promptly: the rest, nothing twice.
    let after_id = first_ids.iter().max().copied().unwrap_or(0);
    let mut again = env.watch(chat, (after_id > 0).then_some(after_id)).await;
    again.until("status", |e| e["type"] == "status").await;
    let mut all = first_ids.clone();
    all.extend(message_ids(&again.events));
    let expected: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM chat_messages WHERE chat_id = $1 ORDER BY id")
            .bind(chat)
            .fetch_all(env.pool())
            .await
            .unwrap();
    assert_eq!(all, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_carries_the_same_events_with_ids_keep_alives_and_last_event_id_resume() {
    let mut env = StreamEnv::start().await;
    env.llm.push(Script::text_in_parts(
        "sse answer",
        3,
        Duration::from_millis(50),
    ));
    env.llm.push(Script::text("more answer"));
    let chat = env.create_chat(&env.alice, chat_body("hello")).await;
    let url = format!("{}/api/v2/chats/{chat}/events", env.replica.base);
    let (status, sse) = SseClient::connect(&url, &env.alice.token, None).await;
    assert_eq!(status, 200);
    let mut sse = sse.unwrap();
    env.start_worker(3);
    let waiting = sse
        .until("status waiting", |(event, _, data)| {
            event == "status" && data.contains("\"waiting\"")
        })
        .await;
    let current = env.messages(&env.alice, chat).await;
    let last_id = *ids_of(&current).iter().max().unwrap();
    assert_eq!(
        waiting.1,
        last_id.to_string(),
        "id: the highest message id so far"
    );
    sse.until("a keep-alive", |(event, _, data)| {
        event == ":" && data == "keep-alive"
    })
    .await;
    // Every event: `event:` is the JSON's type; the ids never decrease.
    let mut max_id = 0;
    let mut events = Vec::new();
    for (event, id, data) in sse.blocks.iter().filter(|b| b.0 != ":") {
        let json: Value = serde_json::from_str(data).unwrap();
        assert_eq!(&json["type"], event);
        assert_eq!(json["chat_id"], json!(chat));
        let id: i64 = id.parse().unwrap();
        assert!(id >= max_id);
        max_id = id;
        if event == "message" {
            assert_eq!(id, json["message"]["id"].as_i64().unwrap());
        }
        events.push(json);
    }
    assert_eq!(message_ids(&events), ids_of(&current));
    let episodes = check_parts(&events);
    assert_eq!(episodes[0].1, "sse answer");
    drop(sse);

    // A new turn while disconnected; resume with Last-Event-ID.
    let (status, _) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/messages"),
            &env.alice,
            Some(send_body("more")),
        )
        .await;
    assert_eq!(status, 200);
    env.wait_status(chat, "waiting").await;
    let (_, sse) = SseClient::connect(&url, &env.alice.token, Some(&last_id.to_string())).await;
    let mut sse = sse.unwrap();
    sse.until("the bootstrap's end", |(event, _, _)| {
        event == "preview_reset"
    })
    .await;
    let resumed: Vec<Value> = sse
        .blocks
        .iter()
        .filter(|b| b.0 == "message")
        .map(|b| serde_json::from_str(&b.2).unwrap())
        .collect();
    let texts: Vec<String> = resumed.iter().map(message_text).collect();
    assert_eq!(texts, ["more", "more answer"]);
    assert!(message_ids(&resumed).iter().all(|id| *id > last_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_converge_through_the_sync_poller_without_notifications() {
    let mut env = StreamEnv::start_with(fast_stream_config(), false).await;
    env.llm.push(Script::text_in_parts(
        "polled answer",
        4,
        Duration::from_millis(100),
    ));
    let chat = env.create_chat(&env.alice, chat_body("poll me")).await;
    let mut ws = env.watch(chat, None).await;
    ws.take(4).await;
    env.start_worker(3);
    ws.until("waiting", |e| label(e) == "status:waiting").await;
    let messages: Vec<String> = ws
        .events
        .iter()
        .filter(|e| e["type"] == "message")
        .map(message_text)
        .collect();
    assert_eq!(messages, ["poll me", "polled answer"]);
    check_parts(&ws.events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_relays_parts_from_the_replica_that_owns_the_chat() {
    let env = StreamEnv::start().await;
    let b = env.another_replica(fast_stream_config()).await;
    env.llm.push(Script::text_in_parts(
        "relayed across replicas",
        8,
        Duration::from_millis(100),
    ));
    let chat = env.create_chat(&env.alice, chat_body("relay")).await;
    let mut ws = env.watch(chat, None).await;
    ws.take(4).await;
    let worker = env.worker_on(b.id, &b.parts, 3);
    ws.until("waiting", |e| label(e) == "status:waiting").await;
    let episodes = check_parts(&ws.events);
    assert_eq!(episodes.len(), 1, "{episodes:?}");
    assert_eq!(episodes[0].1, "relayed across replicas");
    worker.shutdown().await;
}

/// A `message_part` event of the fake relay.
fn relay_part(chat: Uuid, history_version: i64, attempt: i64, seq: u64) -> Value {
    json!({"type": "message_part", "chat_id": chat, "message_part": {
        "role": "assistant", "part": {"type": "text", "text": format!("<{seq}>")},
        "history_version": history_version, "generation_attempt": attempt, "seq": seq}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_duplicates_and_stale_parts_are_dropped_and_a_seq_gap_ends_the_stream() {
    let env = StreamEnv::start().await;
    let chat = env.create_chat(&env.alice, chat_body("gap")).await;
    let fake = Uuid::new_v4();
    let f = |seq| relay_part(chat, 1, 1, seq);
    let _server = fake_parts_endpoint(
        env.pool(),
        fake,
        vec![
            json!([f(1), f(2)]),
            json!([f(2), f(1), relay_part(chat, 1, 7, 3)]),
            json!([f(3)]),
            json!([f(5)]),
        ],
    )
    .await;
    let mut ws = env.watch(chat, None).await;
    ws.take(4).await;
    // The fake replica owns the chat and starts attempt 1.
    env.store
        .machine(chat)
        .update(|tx| {
            Box::pin(async move {
                tx.acquire(fake, Uuid::new_v4()).await?;
                tx.record_generation_attempt().await.map(|_| ())
            })
        })
        .await
        .unwrap();
    let close = ws.until_closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1011, "{close:?}");
    let seqs: Vec<u64> = ws
        .events
        .iter()
        .filter(|e| e["type"] == "message_part")
        .map(|e| e["message_part"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    let texts: Vec<&str> = ws
        .events
        .iter()
        .filter(|e| e["type"] == "message_part")
        .map(|e| e["message_part"]["part"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["<1>", "<2>", "<3>"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parts_endpoint_needs_the_relay_secret_and_serves_selected_episodes() {
    let env = StreamEnv::start().await;
    let chat = Uuid::new_v4(); // the endpoint does not care whether it exists
    let path = format!("/api/v2/chats/{chat}/stream/parts");
    let url = format!("{}{path}", env.replica.base);
    let plain = env.http.get(&url).send().await.unwrap();
    assert_eq!(plain.status(), 401);
    let user = env
        .http
        .get(&url)
        .bearer_auth(&env.alice.token)
        .send()
        .await
        .unwrap();
    assert_eq!(user.status(), 401, "user tokens are not relay secrets");
    assert!(
        StreamClient::try_connect(&env.replica.ws_url(&path), &env.alice.token)
            .await
            .is_err()
    );
    let no_upgrade = env.http.get(&url).bearer_auth(SECRET).send().await.unwrap();
    assert_eq!(no_upgrade.status(), 400);

    let parts = &env.replica.parts;
    let e1 = chatd_core::Episode {
        chat_id: chat,
        history_version: 5,
        generation_attempt: 1,
    };
    let text = |t: &str| chatd_core::PartDelta::Text { text: t.into() };
    parts.create_episode(e1).unwrap();
    parts
        .add_part(e1, chatd_core::ChatRole::Assistant, text("a"))
        .unwrap();
    parts
        .add_part(e1, chatd_core::ChatRole::Assistant, text("b"))
        .unwrap();

    let mut ws = StreamClient::connect(&env.replica.ws_url(&path), SECRET).await;
    select_episode(&mut ws, 5, 1).await;
    let buffered = ws.take(2).await;
    assert_eq!(buffered[0]["message_part"]["seq"], 1);
    assert_eq!(buffered[1]["message_part"]["part"]["text"], "b");
    parts
        .add_part(e1, chatd_core::ChatRole::Assistant, text("c"))
        .unwrap();
    let live = ws.take(1).await;
    assert_eq!(live[0]["message_part"]["seq"], 3);
    assert_eq!(live[0]["type"], "message_part");
    assert_eq!(live[0]["chat_id"], json!(chat));
    parts.close_episode(e1);

    // The connection stays open after the episode ended; the next selection
    // waits for an episode that does not exist yet.
    select_episode(&mut ws, 5, 2).await;
    let e2 = chatd_core::Episode {
        generation_attempt: 2,
        ..e1
    };
    parts.create_episode(e2).unwrap();
    parts
        .add_part(e2, chatd_core::ChatRole::Assistant, text("z"))
        .unwrap();
    let next = ws.take(1).await;
    assert_eq!(next[0]["message_part"]["generation_attempt"], 2);
    assert_eq!(next[0]["message_part"]["seq"], 1);
    ws.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_need_a_token_and_hide_other_members_chats() {
    let env = StreamEnv::start().await;
    let chat = env.create_chat(&env.alice, chat_body("mine")).await;
    for path in [
        format!("/api/v2/chats/{chat}/stream"),
        format!("/api/v2/chats/{chat}/events"),
        format!("/api/experimental/chats/{chat}/stream"),
    ] {
        let url = format!("{}{path}", env.replica.base);
        assert_eq!(
            env.http.get(&url).send().await.unwrap().status(),
            401,
            "{path}"
        );
        assert_eq!(
            env.http
                .get(&url)
                .bearer_auth(&env.bob.token)
                .send()
                .await
                .unwrap()
                .status(),
            404,
            "{path}"
        );
        assert!(
            StreamClient::try_connect(&env.replica.ws_url(&path), &env.bob.token)
                .await
                .is_err()
        );
    }
    let bad = format!(
        "{}/api/v2/chats/{chat}/stream?after_id=-1",
        env.replica.base
    );
    assert_eq!(
        env.http
            .get(&bad)
            .bearer_auth(&env.alice.token)
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
    // The routes are in the OpenAPI document, under both mounts.
    let doc: Value = env
        .http
        .get(format!("{}/api/v2/openapi.json", env.replica.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for base in ["/api/v2/chats", "/api/experimental/chats"] {
        for route in ["/{chat}/stream", "/{chat}/events", "/{chat}/stream/parts"] {
            assert!(
                doc["paths"][format!("{base}{route}")]["get"].is_object(),
                "{base}{route}"
            );
        }
    }
    assert!(doc["components"]["schemas"]["ChatStreamEvent"].is_object());
    // The experimental mount streams too.
    let mut ws = StreamClient::connect(
        &env.replica
            .ws_url(&format!("/api/experimental/chats/{chat}/stream")),
        &env.alice.token,
    )
    .await;
    assert_eq!(
        label(&ws.take(1).await[0]).split(':').next(),
        Some("message")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_stream_deps_the_stream_routes_answer_503() {
    let server = crate::common::Server::start().await;
    let chat = server.create_chat(&server.alice).await;
    let answer = server
        .get(&format!("/api/v2/chats/{chat}/events"), &server.alice)
        .await;
    answer.expect_error(503);
    let seen: HashSet<u16> = [answer.status].into_iter().collect();
    assert!(seen.contains(&503));
}

/// Polls `check` every 10 ms until it holds (at most 10 s).
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_releases_its_subscription_and_registration_and_closes_on_shutdown() {
    let env = StreamEnv::start().await;
    let chat = env.create_chat(&env.alice, chat_body("lifecycle")).await;
    let channel = chatd_pubsub::chat_update_channel(chat);
    let service = env.replica.state.stream_service().unwrap().clone();
    let registry = service.poller_registry();

    let mut ws = env.watch(chat, None).await;
    ws.take(4).await;
    assert_eq!(env.pubsub.subscriber_count(&channel), 1);
    assert_eq!(registry.subscriber_count(chat), 1);
    ws.close().await;
    eventually("the stream let go of pubsub and the poller", || {
        env.pubsub.subscriber_count(&channel) == 0 && registry.subscriber_count(chat) == 0
    })
    .await;

    // Server shutdown closes open streams with 1001.
    let mut ws = env.watch(chat, None).await;
    ws.take(4).await;
    env.replica.shutdown.cancel();
    let close = ws.until_closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1001);
    eventually("released after shutdown", || {
        env.pubsub.subscriber_count(&channel) == 0 && registry.subscriber_count(chat) == 0
    })
    .await;
}

/// Issue 14: a stream of a chat that got deleted stayed open forever (on any
/// replica) while `GET` of it already answered `404`. Each replica's sync
/// poller finds the row gone and the stream ends with 1000 "chat deleted".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_of_a_deleted_chat_end_on_every_replica() {
    let mut env = StreamEnv::start().await;
    let b = env.another_replica(fast_stream_config()).await;
    env.llm.push(Script::text("answered"));
    let chat = env.create_chat(&env.alice, chat_body("delete me")).await;
    let mut on_a = env.watch(chat, None).await;
    let mut on_b =
        StreamClient::connect(&b.ws_url(&stream_path(chat, None)), &env.alice.token).await;
    on_a.take(1).await;
    on_b.take(1).await;
    env.start_worker(3);
    env.wait_status(chat, "waiting").await;
    env.stop_worker().await;
    let (status, body) = env
        .request("DELETE", &format!("/api/v2/chats/{chat}"), &env.alice, None)
        .await;
    assert_eq!(status, 204, "{body}");
    for ws in [&mut on_a, &mut on_b] {
        let frame = ws.until_closed().await.expect("a close frame");
        assert_eq!(
            (u16::from(frame.code), frame.reason.as_str()),
            (1000, "chat deleted")
        );
    }
}
