//! The worker against the fake LLM in Anthropic mode: a turn with thinking,
//! usage (cache tokens) and cost; the thinking signature sent back in the
//! next request; model options; retries and error kinds per API.md.

use std::time::Duration;

use chatd_core::{ChatRole, ChatStatus, MessagePart};
use chatd_testkit::fake_llm::{FAKE_THINKING_SIGNATURE, Script, Step};
use serde_json::json;

use crate::common::{Env, WorkerConfigExt, episode, fast_config, pick_color_tool, text_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_turn_commits_thinking_text_usage_with_cache_tokens_and_cost() {
    let env = Env::anthropic().await;
    env.set_model_options(json!({"max_output_tokens": 1234, "temperature": 0.5}))
        .await;
    env.llm.push(
        Script::new()
            .reasoning("Let me think… ")
            .reasoning("done.")
            .then_text("Olá from ")
            .then_text("Claude.")
            .step(Step::Usage {
                prompt_tokens: 100,
                completion_tokens: 20,
                cached_tokens: 40,
                reasoning_tokens: 0,
            }),
    );
    let worker = env.worker();
    let chat_id = env.create_chat("hi").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    let answer = &messages[1];
    assert_eq!(
        answer.content.0,
        vec![
            MessagePart::Reasoning {
                text: "Let me think… done.".into(),
                signature: Some(FAKE_THINKING_SIGNATURE.into()),
            },
            MessagePart::text("Olá from Claude."),
        ]
    );
    // 60 uncached input tokens, 40 read from the cache, 20 output.
    assert_eq!(
        (
            answer.input_tokens,
            answer.cache_read_tokens,
            answer.output_tokens
        ),
        (Some(60), Some(40), Some(20))
    );
    assert_eq!(answer.total_tokens, Some(120));
    // The whole prompt at 1,000,000 µ$/Mtok (100) + 20 output at 2,000,000 (40).
    assert_eq!(answer.total_cost_micros, Some(140));
    assert!(answer.runtime_ms.is_some());
    let request = &env.llm.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("test-key"));
    assert_eq!(request.body["max_tokens"], json!(1234));
    assert_eq!(request.body["temperature"], json!(0.5));
    assert_eq!(
        request.body["messages"][0]["content"][0]["text"],
        json!("hi")
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thinking_signature_goes_back_with_the_tool_call_in_the_next_request() {
    let env = Env::anthropic().await;
    env.set_model_options(json!({"reasoning_effort": {"default": "low", "max": "high"}}))
        .await;
    env.llm
        .push(Script::new().reasoning("Need a color.").tool_call(
            "toolu_1",
            "pick_color",
            r#"{"mood":"calm"}"#,
            2,
        ));
    env.llm.push(Script::text("Blue it is."));
    let worker = env.worker();
    let tools = pick_color_tool();
    let chat_id = env.create_chat_with("choose", Some(tools)).await;
    env.wait_requires_action(chat_id).await;
    env.complete_requires_action(chat_id, "toolu_1", r#"{"color":"blue"}"#)
        .await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let requests = env.llm.requests();
    assert_eq!(
        requests[0].body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    let second = &requests[1].body;
    assert_eq!(
        second["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "Need a color.", "signature": FAKE_THINKING_SIGNATURE})
    );
    assert_eq!(
        second["messages"][1]["content"][1]["type"],
        json!("tool_use")
    );
    assert_eq!(
        second["messages"][2]["content"][0]["tool_use_id"],
        json!("toolu_1")
    );
    assert_eq!(
        second["thinking"]["type"],
        json!("enabled"),
        "the signed thinking block keeps thinking on"
    );
    let messages = env.active_messages(chat_id).await;
    assert_eq!(text_of(messages.last().unwrap()), "Blue it is.");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_twice_then_answered_shows_two_retry_states_then_the_answer() {
    let env = Env::anthropic().await;
    let rate_limited =
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
            .to_string();
    env.llm.push(Script::http_error(429, rate_limited.clone()));
    env.llm.push(Script::http_error(429, rate_limited));
    env.llm.push(Script::text("finally"));
    // Delays long enough for a 10 ms poll to see each retry state.
    let config = chatd_worker::WorkerConfig {
        retry_initial_delay: Duration::from_millis(400),
        retry_max_delay: Duration::from_secs(2),
        ..fast_config()
    };
    let worker = env.worker_with(config);
    let chat_id = env.create_chat("hello").await;
    let mut seen: Vec<serde_json::Value> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let chat = env.chat(chat_id).await;
        // The stored JSON of the retry state.
        if let Some(state) = chat.retry_state.map(|s| serde_json::to_value(s).unwrap())
            && seen.last() != Some(&state)
        {
            seen.push(state);
        }
        if chat.status == ChatStatus::Waiting && chat.worker_id.is_none() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no answer");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let attempts: Vec<i64> = seen
        .iter()
        .map(|s| s["attempt"].as_i64().unwrap())
        .collect();
    assert_eq!(attempts, vec![1, 2], "{seen:#?}");
    for (state, delay) in seen.iter().zip([400, 800]) {
        assert_eq!(state["delay_ms"], json!(delay));
        assert_eq!(state["error"]["kind"], json!("rate_limit"));
        assert_eq!(state["error"]["retryable"], json!(true));
        assert_eq!(state["error"]["status_code"], json!(429));
        assert!(state["retrying_at"].is_string());
    }
    let chat = env.chat(chat_id).await;
    assert_eq!(chat.retry_state, None, "cleared by the answer");
    let messages = env.active_messages(chat_id).await;
    assert_eq!(text_of(&messages[1]), "finally");
    assert_eq!(env.llm.requests().len(), 3);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_error_inside_the_stream_is_retried_as_a_new_attempt() {
    let env = Env::anthropic().await;
    env.llm.push(
        Script::text("partial that is dropped").stream_error("Overloaded", "overloaded_error"),
    );
    env.llm.push(Script::text("second try"));
    let worker = env.worker();
    let chat_id = env.create_chat("hello").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    assert_eq!(messages.len(), 2);
    assert_eq!(text_of(&messages[1]), "second try");
    // The failed attempt streamed into its own episode; the answer into the next.
    let first = worker.parts().get_parts(episode(chat_id, 1, 1));
    assert!(first.is_ok_and(|p| !p.is_empty()));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_400_ends_the_turn_with_invalid_request_at_once() {
    let env = Env::anthropic().await;
    env.llm.push(Script::http_error(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "messages: roles must alternate"}})
            .to_string(),
    ));
    let worker = env.worker();
    let chat_id = env.create_chat("hello").await;
    let error = env.wait_error(chat_id).await;
    assert_eq!(error["kind"], json!("invalid_request"));
    assert_eq!(error["retryable"], json!(false));
    assert_eq!(error["status_code"], json!(400));
    assert_eq!(error["message"], json!("messages: roles must alternate"));
    assert_eq!(error["provider"], json!("fake"));
    assert_eq!(env.llm.requests().len(), 1);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_on_529_land_error_with_a_retryable_overloaded_last_error() {
    let env = Env::anthropic().await;
    env.llm.set_default(Script::http_error(
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            .to_string(),
    ));
    let worker = env.worker_with(WorkerConfigExt::with_retries(2));
    let chat_id = env.create_chat("hello").await;
    let error = env.wait_error(chat_id).await;
    assert_eq!(error["kind"], json!("overloaded"));
    assert_eq!(error["retryable"], json!(true));
    assert_eq!(
        env.llm.requests().len(),
        3,
        "the first attempt and two retries"
    );
    let transcript: Vec<ChatRole> = env
        .active_messages(chat_id)
        .await
        .iter()
        .map(|m| m.role)
        .collect();
    assert_eq!(transcript, vec![ChatRole::User]);
    worker.shutdown().await;
}
