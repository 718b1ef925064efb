//! One worker: turns, queues, interrupts, edits, retries, dynamic tools.

use std::time::Duration;

use chatd_core::{BusyBehavior, ChatRole, ChatStatus, FinishReason, MessagePart, PartDelta};
use chatd_store::{EditMessageInput, NewMessage};
use chatd_testkit::fake_llm::Script;
use serde_json::json;

use crate::common::{Env, episode, last_error_json, pick_color_tool, text_of, transcript};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_parts_commits_the_answer_with_usage_and_waits() {
    let env = Env::new().await;
    env.llm.push(
        Script::text_in_parts("Hello from the fake model", 5, Duration::from_millis(10))
            .usage(12, 5),
    );
    let worker = env.worker();
    let chat_id = env.create_chat("hi").await;
    let chat = env.wait_status(chat_id, ChatStatus::Waiting).await;

    let messages = env.active_messages(chat_id).await;
    assert_eq!(messages.len(), 2);
    let answer = &messages[1];
    assert_eq!(answer.role, ChatRole::Assistant);
    assert_eq!(text_of(answer), "Hello from the fake model");
    assert_eq!(
        (answer.input_tokens, answer.output_tokens),
        (Some(12), Some(5))
    );
    // 12 tokens at 1,000,000 micro-dollars per Mtok + 5 at 2,000,000 = 22 micro-dollars.
    assert_eq!(answer.total_cost_micros, Some(22));
    assert_eq!(answer.model_config_id, Some(env.model_config_id));
    assert!(answer.runtime_ms.is_some());
    assert_eq!(answer.finish_reason, Some(FinishReason::Stop));
    assert_eq!(messages[0].finish_reason, None, "a user message has none");
    assert_eq!(
        chat.generation_attempt, 0,
        "the committed answer started a new history version"
    );

    // The attempt streamed its parts into episode (history_version 1, attempt 1).
    let parts = worker
        .parts()
        .get_parts(episode(chat_id, 1, 1))
        .expect("episode kept");
    assert_eq!(
        parts.iter().map(|p| p.seq).collect::<Vec<_>>(),
        (1..=parts.len() as u64).collect::<Vec<_>>()
    );
    let streamed: String = parts
        .iter()
        .map(|p| match &p.part {
            PartDelta::Text { text } => text.clone(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(streamed, "Hello from the fake model");
    // The request carried the history.
    let request = &env.llm.requests()[0];
    assert_eq!(request.last_user_text().as_deref(), Some("hi"));
    worker.shutdown().await;
}

/// Issue 14: a model answer with a NUL (a JSON `\u0000` in a streamed
/// delta) failed every commit ("unsupported Unicode escape sequence") and
/// left the chat `running`; it is stored with U+FFFD and the turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_a_nul_is_committed_with_the_replacement_character() {
    let env = Env::new().await;
    env.llm.push(Script::text_in_parts(
        "nul \u{0} here",
        3,
        Duration::from_millis(5),
    ));
    let worker = env.worker();
    let chat_id = env.create_chat("hi").await;
    let chat = env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert!(chat.last_error.is_none(), "{:?}", chat.last_error);
    let messages = env.active_messages(chat_id).await;
    assert_eq!(text_of(&messages[1]), "nul \u{FFFD} here");
    worker.shutdown().await;
}

/// Issue 14: a step the database refuses for good (here a trigger that
/// raises on the answer; a NUL did it before sanitising) was retried
/// forever with the chat `running`. The turn ends with a non-retryable error
/// naming the reason, and the chat takes the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_the_database_refuses_for_good_ends_the_turn_with_an_error() {
    let env = Env::new().await;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'poisoned answer refused'; END $$;
         CREATE TRIGGER refuse_poison BEFORE INSERT ON chat_messages FOR EACH ROW
         WHEN (NEW.role = 'assistant' AND NEW.content::text LIKE '%poison%')
         EXECUTE FUNCTION refuse_poison();",
    )
    .execute(env.db.pool())
    .await
    .unwrap();
    env.llm.push(Script::text("poison pill"));
    env.llm.push(Script::text("fine"));
    let worker = env.worker();
    let chat_id = env.create_chat("hi").await;
    let chat = env.wait_status(chat_id, ChatStatus::Error).await;
    let error = last_error_json(&chat);
    assert_eq!(
        (&error["kind"], &error["retryable"], &error["message"]),
        (
            &json!("generic"),
            &json!(false),
            &json!("The answer could not be stored.")
        )
    );
    assert!(
        error["detail"]
            .as_str()
            .unwrap()
            .contains("poisoned answer refused"),
        "{error}"
    );
    assert_eq!(
        env.llm.requests().len(),
        1,
        "the step is not generated again"
    );
    env.send(chat_id, "again", BusyBehavior::Queue).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(text_of(messages.last().unwrap()), "fine");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_messages_run_in_order_one_turn_each() {
    let env = Env::new().await;
    env.llm.set_default_fn(|request| {
        Script::text_in_parts(
            &format!("re: {}", request.last_user_text().unwrap_or_default()),
            3,
            Duration::from_millis(30),
        )
    });
    let worker = env.worker();
    let chat_id = env.create_chat("one").await;
    for text in ["two", "three", "four"] {
        env.send(chat_id, text, BusyBehavior::Queue).await;
    }
    env.wait_for(chat_id, Duration::from_secs(20), "all turns", |c| {
        c.status == ChatStatus::Waiting && c.worker_id.is_none()
    })
    .await;
    let transcript = transcript(&env, chat_id).await;
    let expected: Vec<(ChatRole, String)> = ["one", "two", "three", "four"]
        .iter()
        .flat_map(|t| {
            [
                (ChatRole::User, t.to_string()),
                (ChatRole::Assistant, format!("re: {t}")),
            ]
        })
        .collect();
    assert_eq!(transcript, expected);
    assert_eq!(env.llm.requests().len(), 4, "one model call per turn");
    let promoted = env
        .active_messages(chat_id)
        .await
        .iter()
        .filter(|m| m.queued_message_id.is_some())
        .count();
    assert_eq!(promoted, 3);
    worker.shutdown().await;
}

/// A message queued by an operator's SQL while a turn runs, without the
/// snapshot bump every bundle makes: the worker's optimistic bundles guess
/// the row it last committed (no queue), the check by version passes, and
/// the landing check refuses the finish the guess allowed. The bundle runs
/// again locked and the turn ends into the queued message, as without the
/// guess; the chat is not left running under a live owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_queued_by_hand_without_a_bump_runs_after_the_turn() {
    let env = Env::new().await;
    env.llm.set_default_fn(|request| {
        Script::text_in_parts(
            &format!("re: {}", request.last_user_text().unwrap_or_default()),
            8,
            Duration::from_millis(60),
        )
    });
    let worker = env.worker();
    let chat_id = env.create_chat("one").await;
    env.wait_for(chat_id, Duration::from_secs(10), "the attempt", |c| {
        c.generation_attempt >= 1
    })
    .await;
    let version = env.chat(chat_id).await.snapshot_version;
    sqlx::query("INSERT INTO chat_queued_messages (chat_id, content) VALUES ($1, $2)")
        .bind(chat_id)
        .bind(json!([{"type": "text", "text": "by hand"}]))
        .execute(env.db.pool())
        .await
        .unwrap();
    assert_eq!(env.chat(chat_id).await.snapshot_version, version, "no bump");
    env.wait_for(chat_id, Duration::from_secs(20), "both turns", |c| {
        c.status == ChatStatus::Waiting && c.worker_id.is_none()
    })
    .await;
    let expected: Vec<(ChatRole, String)> = ["one", "by hand"]
        .iter()
        .flat_map(|t| {
            [
                (ChatRole::User, t.to_string()),
                (ChatRole::Assistant, format!("re: {t}")),
            ]
        })
        .collect();
    assert_eq!(transcript(&env, chat_id).await, expected);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_mid_stream_commits_the_partial_text() {
    let env = Env::new().await;
    let full = "one two three four five six seven eight nine ten eleven twelve";
    env.llm
        .push(Script::text_in_parts(full, 12, Duration::from_millis(150)));
    let worker = env.worker();
    let chat_id = env.create_chat("count").await;
    // Wait until a few parts are in the buffer.
    let episode = episode(chat_id, 1, 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while worker
        .parts()
        .get_parts(episode)
        .map(|p| p.len())
        .unwrap_or(0)
        < 3
    {
        assert!(tokio::time::Instant::now() < deadline, "no parts streamed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.store
        .machine(chat_id)
        .update(|tx| Box::pin(async move { tx.interrupt().await }))
        .await
        .unwrap();
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(messages.len(), 2);
    let partial = text_of(&messages[1]);
    assert!(
        !partial.is_empty() && full.starts_with(&partial) && partial.len() < full.len(),
        "partial answer {partial:?}"
    );
    assert_eq!(
        messages[1].finish_reason,
        Some(FinishReason::Interrupted),
        "the partial answer is marked interrupted"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_off_at_the_token_limit_is_stored_with_finish_reason_length() {
    let env = Env::new().await;
    env.llm
        .push(Script::text("The answer begins and then").finish("length"));
    env.llm
        .push(Script::text("A complete answer.").finish("content_filter"));
    env.llm.push(Script::text("Odd.").finish("eos_token"));
    let worker = env.worker();
    let chat_id = env.create_chat("explain").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    env.send(chat_id, "again", BusyBehavior::Queue).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    env.send(chat_id, "once more", BusyBehavior::Queue).await;
    env.wait_for(chat_id, Duration::from_secs(20), "three answers", |c| {
        c.status == ChatStatus::Waiting && c.worker_id.is_none()
    })
    .await;
    let messages = env.active_messages(chat_id).await;
    let answers: Vec<_> = messages
        .iter()
        .filter(|m| m.role == ChatRole::Assistant)
        .map(|m| (text_of(m), m.finish_reason))
        .collect();
    assert_eq!(
        answers,
        [
            (
                "The answer begins and then".to_owned(),
                Some(FinishReason::Length)
            ),
            (
                "A complete answer.".to_owned(),
                Some(FinishReason::ContentFilter)
            ),
            // A reason chatd does not know is stored as unknown.
            ("Odd.".to_owned(), None),
        ]
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupting_send_runs_the_new_message_next() {
    let env = Env::new().await;
    env.llm.push(Script::text_in_parts(
        "a long answer that will be cut short",
        10,
        Duration::from_millis(200),
    ));
    env.llm.set_default(Script::text("short answer"));
    let worker = env.worker();
    let chat_id = env.create_chat("first").await;
    env.llm
        .wait_for_request(1, Duration::from_secs(10))
        .await
        .unwrap();
    env.send(chat_id, "second", BusyBehavior::Interrupt).await;
    env.wait_for(chat_id, Duration::from_secs(20), "second turn", |c| {
        c.status == ChatStatus::Waiting && c.worker_id.is_none()
    })
    .await;
    let transcript = transcript(&env, chat_id).await;
    assert_eq!(transcript.len(), 4, "{transcript:?}");
    assert_eq!(transcript[2], (ChatRole::User, "second".to_owned()));
    assert_eq!(
        transcript[3],
        (ChatRole::Assistant, "short answer".to_owned())
    );
    assert!(transcript[1].1.len() < "a long answer that will be cut short".len());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_during_generation_answers_the_new_history_and_the_stale_task_commits_nothing() {
    let env = Env::new().await;
    env.llm.push(Script::text_in_parts(
        "STALE ANSWER",
        6,
        Duration::from_millis(300),
    ));
    env.llm.set_default_fn(|request| {
        Script::text(format!(
            "answer to {}",
            request.last_user_text().unwrap_or_default()
        ))
    });
    let worker = env.worker();
    let chat_id = env.create_chat("original").await;
    env.llm
        .wait_for_request(1, Duration::from_secs(10))
        .await
        .unwrap();
    let first = env.active_messages(chat_id).await[0].id;
    env.store
        .machine(chat_id)
        .update(|tx| {
            Box::pin(async move {
                tx.edit_message(EditMessageInput {
                    message_id: first,
                    replacement: NewMessage::user(vec![MessagePart::text("edited")]),
                    suffix_messages: vec![],
                })
                .await
            })
        })
        .await
        .unwrap();
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    // Give the stale stream time to finish: it must not commit.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let transcript = transcript(&env, chat_id).await;
    assert_eq!(
        transcript,
        vec![
            (ChatRole::User, "edited".to_owned()),
            (ChatRole::Assistant, "answer to edited".to_owned())
        ]
    );
    let stale = env
        .all_messages(chat_id)
        .await
        .iter()
        .filter(|m| text_of(m).contains("STALE"))
        .count();
    assert_eq!(stale, 0, "the stale generation committed nothing");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_provider_errors_are_retried_with_retry_state_then_succeed() {
    let env = Env::new().await;
    env.llm.push(Script::http_error(
        503,
        r#"{"error":{"message":"busy","type":"server_error"}}"#,
    ));
    env.llm.push(Script::http_error(
        429,
        r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
    ));
    env.llm.push(Script::text("finally"));
    let worker = env.worker();
    let chat_id = env.create_chat("hello").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert_eq!(text_of(&env.active_messages(chat_id).await[1]), "finally");
    assert_eq!(env.llm.requests().len(), 3);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_retryable_error_ends_the_turn_in_error() {
    let env = Env::new().await;
    env.llm.push(Script::http_error(
        400,
        r#"{"error":{"message":"bad request","type":"invalid_request_error"}}"#,
    ));
    let worker = env.worker();
    let chat_id = env.create_chat("hello").await;
    let error = env.wait_error(chat_id).await;
    assert_eq!(error["kind"], json!("invalid_request"));
    assert_eq!(error["retryable"], json!(false));
    assert_eq!(env.llm.requests().len(), 1);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_provider_is_named_with_its_address_in_the_retry_state_and_the_error() {
    let env = Env::new().await;
    // A loopback port nobody listens on (bound, then dropped).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base_url = format!("http://127.0.0.1:{port}/v1");
    sqlx::query("UPDATE chat_providers SET base_url = $1, display_name = 'llama.cpp (local)'")
        .bind(&base_url)
        .execute(env.db.pool())
        .await
        .unwrap();
    // One retry, 2 s later: time enough to see the retry state.
    let worker = env.worker_with(chatd_worker::WorkerConfig {
        retry_initial_delay: Duration::from_secs(2),
        retry_max_delay: Duration::from_secs(2),
        ..crate::common::WorkerConfigExt::with_retries(1)
    });
    let chat_id = env.create_chat("hello").await;
    let expected = format!(
        "Cannot reach the model server \"llama.cpp (local)\" at {base_url}: connection refused."
    );
    let retrying = env
        .wait_for(chat_id, Duration::from_secs(20), "a retry state", |c| {
            c.retry_state.is_some()
        })
        .await;
    // The stored JSON of the retry state and the error.
    let retry = serde_json::to_value(retrying.retry_state.unwrap()).unwrap();
    assert_eq!(retry["error"]["message"], json!(expected), "{retry}");
    assert_eq!(retry["error"]["retryable"], json!(true));
    assert_eq!(retry["error"]["provider"], json!("llama.cpp (local)"));
    let error = env.wait_error(chat_id).await;
    assert_eq!(error["message"], json!(expected), "{error}");
    assert_eq!(
        (error["kind"].clone(), error["retryable"].clone()),
        (json!("generic"), json!(true))
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_at_the_limit() {
    let env = Env::new().await;
    env.llm
        .set_default(Script::http_error(500, r#"{"error":{"message":"down"}}"#));
    let config = crate::common::WorkerConfigExt::with_retries(2);
    let worker = env.worker_with(config);
    let chat_id = env.create_chat("hello").await;
    let chat = env.wait_status(chat_id, ChatStatus::Error).await;
    assert_eq!(
        env.llm.requests().len(),
        3,
        "the first attempt and two retries"
    );
    let error = last_error_json(&chat);
    assert_eq!(error["kind"], json!("generic"));
    assert_eq!(
        error["retryable"],
        json!(true),
        "the last error was retryable; only the budget ran out"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_tool_call_waits_for_the_client_and_continues_with_its_result() {
    let env = Env::new().await;
    env.llm
        .push(Script::new().tool_call("call_1", "pick_color", r#"{"mood":"calm"}"#, 3));
    env.llm.push(Script::text("You picked blue."));
    let worker = env.worker();
    let tools = json!([{"name": "pick_color", "description": "Ask the user for a color", "input_schema": {"type": "object"}}]);
    let chat_id = env.create_chat_with("choose", Some(tools)).await;
    let chat = env.wait_requires_action(chat_id).await;
    assert!(chat.requires_action_deadline_at.is_some());
    let messages = env.active_messages(chat_id).await;
    assert!(
        matches!(&messages[1].content.0[..], [MessagePart::ToolCall { tool_call_id, args, .. }] if tool_call_id == "call_1" && args == r#"{"mood":"calm"}"#)
    );
    assert_eq!(messages[1].finish_reason, Some(FinishReason::ToolCalls));
    // The offered tool was in the request.
    assert!(env.llm.requests()[0].body["tools"][0]["function"]["name"] == json!("pick_color"));
    env.complete_requires_action(chat_id, "call_1", r#"{"color":"blue"}"#)
        .await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let transcript = transcript(&env, chat_id).await;
    assert_eq!(
        transcript.last().unwrap(),
        &(ChatRole::Assistant, "You picked blue.".to_owned())
    );
    // The tool result went to the model as a role "tool" message.
    let second = &env.llm.requests()[1];
    let tool_message = second.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == json!("tool"))
        .expect("tool message");
    assert_eq!(tool_message["tool_call_id"], json!("call_1"));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requires_action_deadline_cancels_the_pending_call() {
    let env = Env::new().await;
    env.llm
        .push(Script::new().tool_call("call_9", "pick_color", "{}", 1));
    env.llm.push(Script::text("Timed out, moving on."));
    let store = chatd_store::Store::with_config(
        env.db.pool().clone(),
        std::sync::Arc::new(env.pubsub.clone()),
        chatd_store::StoreConfig {
            requires_action_timeout: Duration::from_millis(500),
            ..Default::default()
        },
    );
    let env = Env { store, ..env };
    let worker = env.worker();
    let tools = pick_color_tool();
    let chat_id = env.create_chat_with("choose", Some(tools)).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    let timed_out = messages.iter().flat_map(|m| m.content.0.iter()).any(|p| {
        matches!(p, MessagePart::ToolResult { tool_call_id, result, is_error: true, .. } if tool_call_id == "call_9" && result == &json!({"error": chatd_core::TIMED_OUT_TOOL_RESULT}))
    });
    assert!(timed_out, "{messages:?}");
    assert_eq!(text_of(messages.last().unwrap()), "Timed out, moving on.");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_during_requires_action_answers_the_pending_call_and_ends_the_turn() {
    let env = Env::new().await;
    env.llm
        .push(Script::new().tool_call("call_5", "pick_color", "{}", 1));
    let worker = env.worker();
    let tools = pick_color_tool();
    let chat_id = env.create_chat_with("choose", Some(tools)).await;
    env.wait_requires_action(chat_id).await;
    env.store
        .machine(chat_id)
        .update(|tx| Box::pin(async move { tx.interrupt().await }))
        .await
        .unwrap();
    let chat = env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert_eq!(chat.requires_action_deadline_at, None);
    let messages = env.active_messages(chat_id).await;
    let interrupted = messages.iter().flat_map(|m| m.content.0.iter()).any(|p| {
        matches!(p, MessagePart::ToolResult { tool_call_id, result, is_error: true, .. }
            if tool_call_id == "call_5" && result == &json!({"error": chatd_core::INTERRUPTED_TOOL_RESULT}))
    });
    assert!(interrupted, "{messages:?}");
    assert_eq!(
        env.llm.requests().len(),
        1,
        "the user stopped the turn: no model call"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_output_token_limit_is_max_tokens_for_compatible_servers_and_max_completion_tokens_for_openai()
 {
    for (kind, field, other) in [
        ("openai-compat", "max_tokens", "max_completion_tokens"),
        ("openai", "max_completion_tokens", "max_tokens"),
    ] {
        let env = Env::with_provider(kind).await;
        env.set_model_options(json!({"max_output_tokens": 321}))
            .await;
        env.llm.push(Script::text("ok"));
        let worker = env.worker();
        let chat_id = env.create_chat("hi").await;
        env.wait_status(chat_id, ChatStatus::Waiting).await;
        let request = &env.llm.requests()[0];
        assert_eq!(request.body[field], json!(321), "{kind}: {}", request.body);
        assert!(
            request.body.get(other).is_none(),
            "{kind}: {}",
            request.body
        );
        worker.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_far_over_the_context_limit_fails_at_once_without_calling_the_model() {
    // The model config's context is 8192 tokens; 200 KB of text is far over.
    let env = Env::new().await;
    let worker = env.worker();
    let chat_id = env.create_chat(&"word ".repeat(40_000)).await;
    let error = env.wait_error(chat_id).await;
    assert_eq!(error["kind"], json!("context_length"), "{error}");
    assert_eq!(error["retryable"], json!(false));
    assert!(env.llm.requests().is_empty());
    worker.shutdown().await;
}
