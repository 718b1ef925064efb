//! Compaction (API.md "Context management"): automatic at the threshold,
//! on a provider's context overflow (an error, or llama.cpp's empty stream
//! near the window), manual, with invalid summaries retried and then
//! `context_length`, and redone by a new owner after a crash mid-compaction.

use std::time::Duration;

use chatd_core::{BusyBehavior, ChatRole, ChatStatus, MessagePart, Visibility};
use chatd_testkit::fake_llm::{RecordedRequest, Script, is_compaction_request, summary_of};
use serde_json::Value;
use uuid::Uuid;

use crate::common::{Env, WorkerConfigExt, text_of};

/// Sets the default model's window, threshold and verbatim tail.
async fn set_context(env: &Env, limit: i64, threshold: i32, keep: i64) {
    sqlx::query(
        "UPDATE chat_model_configs SET context_limit = $2, compression_threshold = $3,
             options = options || jsonb_build_object('compact_recent_messages', $4::bigint)
         WHERE id = $1",
    )
    .bind(env.model_config_id)
    .bind(limit)
    .bind(threshold)
    .bind(keep)
    .execute(env.db.pool())
    .await
    .unwrap();
}

/// Answers a compaction request with a short summary and anything else
/// with `answer to <last user text>`, reporting the request's size over 4
/// as its prompt tokens (a provider's own count).
fn realistic(request: &RecordedRequest) -> Script {
    if is_compaction_request(request) {
        return summary_of(request);
    }
    let text = format!("answer to {}", request.last_user_text().unwrap_or_default());
    let prompt = i64::try_from(request.body["messages"].to_string().len() / 4).unwrap();
    Script::text(text).usage(prompt, 30)
}

/// A user message of about 80 tokens numbered `n`.
fn long(n: usize) -> String {
    format!("q{n} {}", "lorem ipsum dolor sit amet ".repeat(11))
}

async fn turn(env: &Env, chat_id: Uuid, text: &str) {
    env.send(chat_id, text, BusyBehavior::Queue).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
}

/// The summary rows and the visible compaction results, in id order.
async fn compactions(env: &Env, chat_id: Uuid) -> (Vec<chatd_store::ChatMessage>, Vec<Value>) {
    let messages = env.active_messages(chat_id).await;
    let summaries = messages
        .iter()
        .filter(|m| m.compressed && m.visibility == Visibility::Model)
        .cloned()
        .collect();
    let results = messages
        .iter()
        .filter(|m| m.visibility == Visibility::User)
        .flat_map(|m| m.content.0.clone())
        .filter_map(|p| match p {
            MessagePart::ToolResult {
                tool_name, result, ..
            } if tool_name == "chatd_compact" => Some(result),
            _ => None,
        })
        .collect();
    (summaries, results)
}

fn request_text(request: &RecordedRequest) -> String {
    request.body["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_chat_is_compacted_at_the_threshold_and_every_message_is_answered() {
    let env = Env::new().await;
    set_context(&env, 2000, 50, 4).await;
    env.llm.set_default_fn(realistic);
    let worker = env.worker();
    let chat_id = env.create_chat(&long(0)).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    for n in 1..16 {
        turn(&env, chat_id, &long(n)).await;
    }
    let (summaries, results) = compactions(&env, chat_id).await;
    assert!(summaries.len() >= 2, "{} compactions", summaries.len());
    assert_eq!(
        summaries.len(),
        results.len(),
        "one visible result per summary"
    );
    for r in &results {
        assert!(r["summarized_messages"].as_i64().unwrap() > 0, "{r}");
        assert!(
            r["tokens_after"].as_i64() < r["tokens_before"].as_i64(),
            "{r}"
        );
        assert!(
            r["summary"].as_str().unwrap().starts_with("Summary:"),
            "{r}"
        );
    }
    // Every message was answered, in order, once.
    let answers: Vec<String> = env
        .active_messages(chat_id)
        .await
        .iter()
        .filter(|m| m.role == ChatRole::Assistant && m.visibility == Visibility::Both)
        .map(text_of)
        .collect();
    let expected: Vec<String> = (0..16).map(|n| format!("answer to {}", long(n))).collect();
    assert_eq!(answers, expected);
    let requests = env.llm.requests();
    let (summarizing, answering): (Vec<_>, Vec<_>) =
        requests.iter().partition(|r| is_compaction_request(r));
    assert_eq!(
        summarizing.len(),
        summaries.len(),
        "one chunk, one pass each"
    );
    assert!(summarizing.iter().all(|r| r.body.get("tools").is_none()));
    // A later summary folds the earlier one in.
    assert!(request_text(summarizing[1]).contains("Summary of what came before: Summary:"));
    // The model never sees two summaries, and never the summarized text.
    let last = request_text(answering.last().unwrap());
    assert_eq!(
        last.matches("[Summary of the earlier conversation]")
            .count(),
        1
    );
    assert!(!last.contains("q0 "), "q0 was summarized");
    assert!(last.contains("q15 "));
    // Every answered prompt stayed below the window.
    for r in &answering {
        assert!(r.body["messages"].to_string().len() / 4 < 2000);
    }
    let chat = env.chat(chat_id).await;
    assert_eq!(chat.compactions as usize, summaries.len());
    assert_eq!(
        chat.compacted_through_message_id,
        summaries.last().unwrap().compacted_through_id
    );
    assert!(!chat.context_estimated, "the last answer's usage is exact");
    assert!(chat.context_tokens.unwrap() < 2000);
    worker.shutdown().await;
}

/// A prompt as large as `turns` long messages and their answers.
async fn chat_with_turns(env: &Env, turns: usize) -> Uuid {
    let chat_id = env.create_chat(&long(0)).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    for n in 1..turns {
        turn(env, chat_id, &long(n)).await;
    }
    chat_id
}

const LLAMACPP_CONTEXT_ERROR: &str = r#"{"error":{"message":"This model's maximum context length is 2048 tokens. However, you requested 2547 tokens (2531 in the messages, 16 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_provider_context_overflow_compacts_with_a_short_tail_and_the_turn_goes_on() {
    let env = Env::new().await;
    set_context(&env, 100_000, 95, 12).await;
    env.llm.set_default_fn(realistic);
    let worker = env.worker();
    let chat_id = chat_with_turns(&env, 6).await;
    env.llm
        .push(Script::http_error(400, LLAMACPP_CONTEXT_ERROR));
    turn(&env, chat_id, "after the overflow").await;
    let (summaries, results) = compactions(&env, chat_id).await;
    assert_eq!(summaries.len(), 1);
    // An overflow keeps 4 of the 13 messages: 9 are summarized.
    assert_eq!(results[0]["summarized_messages"], 9);
    let chat = env.chat(chat_id).await;
    assert!(chat.last_error.is_none());
    let last = env.active_messages(chat_id).await;
    assert_eq!(
        text_of(last.last().unwrap()),
        "answer to after the overflow"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_empty_stream_after_a_prompt_near_the_window_is_an_overflow_not_a_retry() {
    let env = Env::new().await;
    set_context(&env, 100_000, 95, 4).await;
    env.llm.set_default_fn(realistic);
    let worker = env.worker();
    let chat_id = chat_with_turns(&env, 6).await;
    // The window shrinks so that the prompt is near it (over half of it)
    // without reaching the threshold.
    let tokens = env.chat(chat_id).await.context_tokens.unwrap();
    set_context(&env, tokens * 8 / 5, 95, 4).await;
    env.llm.push(Script::empty_stream());
    turn(&env, chat_id, "after the empty stream").await;
    let (summaries, _) = compactions(&env, chat_id).await;
    assert_eq!(summaries.len(), 1);
    assert!(env.chat(chat_id).await.last_error.is_none());

    // With automatic compaction off, the same ends the turn at once with
    // `context_length`: one request, no retry.
    let tokens = env.chat(chat_id).await.context_tokens.unwrap();
    set_context(&env, tokens * 8 / 5, 0, 4).await;
    let before = env.llm.requests().len();
    env.llm.push(Script::empty_stream());
    env.send(chat_id, "a short one", BusyBehavior::Queue).await;
    let error = env.wait_error(chat_id).await;
    assert_eq!(error["kind"], "context_length", "{error}");
    assert_eq!(error["retryable"], false);
    let after: Vec<String> = env.llm.requests()[before..]
        .iter()
        .map(|r| {
            r.last_user_text()
                .unwrap_or_default()
                .chars()
                .take(40)
                .collect()
        })
        .collect();
    assert_eq!(after.len(), 1, "{after:?}");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unusable_summaries_are_retried_then_end_the_turn_with_context_length_and_commit_nothing() {
    let env = Env::new().await;
    set_context(&env, 2000, 50, 4).await;
    env.llm.set_default_fn(|request| {
        if is_compaction_request(request) {
            Script::text("   ")
        } else {
            realistic(request)
        }
    });
    let worker = env.worker_with(WorkerConfigExt::with_retries(1));
    let chat_id = env.create_chat(&long(0)).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let mut error = None;
    for n in 1..16 {
        env.send(chat_id, &long(n), BusyBehavior::Queue).await;
        let chat = env
            .wait_for(chat_id, Duration::from_secs(20), "idle", |c| {
                c.worker_id.is_none() && c.status != ChatStatus::Running
            })
            .await;
        if chat.status == ChatStatus::Error {
            error = chat.last_error;
            break;
        }
    }
    let error = error.expect("the turn ended in error once compaction was due");
    assert_eq!(error.kind, chatd_core::ChatErrorKind::ContextLength);
    assert!(error.detail.unwrap_or_default().contains("empty"));
    let summarizing = env
        .llm
        .requests()
        .iter()
        .filter(|r| is_compaction_request(r))
        .count();
    assert_eq!(summarizing, 2, "one attempt and one retry");
    let (summaries, results) = compactions(&env, chat_id).await;
    assert!(summaries.is_empty() && results.is_empty());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_compaction_summarizes_and_the_chat_waits_again() {
    let env = Env::new().await;
    env.llm.set_default_fn(realistic);
    let worker = env.worker();
    let chat_id = chat_with_turns(&env, 4).await;
    env.store
        .machine(chat_id)
        .update(|tx| Box::pin(async move { tx.request_compaction().await }))
        .await
        .unwrap();
    let chat = env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert!(chat.compaction_requested_at.is_none());
    let (summaries, results) = compactions(&env, chat_id).await;
    assert_eq!(summaries.len(), 1);
    // Half of the 8 messages are kept.
    assert_eq!(results[0]["summarized_messages"], 4);
    let history = chatd_store::messages::active_history(env.db.pool(), chat_id)
        .await
        .unwrap();
    assert!(history[0].compressed, "the summary comes first");
    assert_eq!(history.len(), 5);
    // No model answer was added.
    let answers = env
        .active_messages(chat_id)
        .await
        .iter()
        .filter(|m| m.role == ChatRole::Assistant && m.visibility == Visibility::Both)
        .count();
    assert_eq!(answers, 4);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_mid_compaction_loses_nothing_and_the_new_owner_compacts_once() {
    let env = Env::new().await;
    env.llm.set_default_fn(realistic);
    let a = env.worker();
    let chat_id = chat_with_turns(&env, 4).await;
    // The first summarization hangs on worker a, which then crashes.
    env.llm.push(Script::new().hang());
    let before = env.llm.requests().len();
    env.store
        .machine(chat_id)
        .update(|tx| Box::pin(async move { tx.request_compaction().await }))
        .await
        .unwrap();
    env.llm
        .wait_for_request(before + 1, Duration::from_secs(10))
        .await
        .unwrap();
    a.crash();
    let b = env.worker();
    env.wait_for(
        chat_id,
        Duration::from_secs(20),
        "the compaction by b",
        |c| c.status == ChatStatus::Waiting && c.worker_id.is_none() && c.compactions == 1,
    )
    .await;
    let (summaries, results) = compactions(&env, chat_id).await;
    assert_eq!((summaries.len(), results.len()), (1, 1));
    assert_eq!(env.active_messages(chat_id).await.len(), 8 + 3);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_the_threshold_with_nothing_to_summarize_a_prompt_that_fits_is_still_answered() {
    let env = Env::new().await;
    // 10 % of 2,000 tokens: the first long message alone passes it, and
    // the verbatim tail holds everything there is.
    set_context(&env, 2000, 10, 4).await;
    env.llm.set_default_fn(realistic);
    let worker = env.worker();
    let first = format!("q0 {}", "lorem ipsum ".repeat(100)); // about 300 tokens
    let chat_id = env.create_chat(&first).await;
    let chat = env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert!(chat.last_error.is_none(), "{:?}", chat.last_error);
    let (summaries, results) = compactions(&env, chat_id).await;
    assert!(summaries.is_empty() && results.is_empty());
    let last = env.active_messages(chat_id).await;
    assert_eq!(text_of(last.last().unwrap()), format!("answer to {first}"));
    worker.shutdown().await;
}

/// A summary far larger than anything it replaces.
fn bloated_summary() -> Script {
    Script::text(format!(
        "Summary: {}",
        "and then they talked more. ".repeat(400)
    ))
}

/// Answers a compaction request with [`bloated_summary`] and anything else
/// as [`realistic`].
fn bloating(request: &RecordedRequest) -> Script {
    if is_compaction_request(request) {
        bloated_summary()
    } else {
        realistic(request)
    }
}

fn summarizing_requests(env: &Env) -> usize {
    env.llm
        .requests()
        .iter()
        .filter(|r| is_compaction_request(r))
        .count()
}

async fn request_compaction(env: &Env, chat_id: Uuid) {
    env.store
        .machine(chat_id)
        .update(|tx| Box::pin(async move { tx.request_compaction().await }))
        .await
        .unwrap();
}

/// The chat's rows and what a client sees of its state, to compare before
/// and after a refused compaction.
async fn snapshot(env: &Env, chat_id: Uuid) -> (Vec<i64>, ChatStatus, bool, i32, bool) {
    let ids = env
        .all_messages(chat_id)
        .await
        .iter()
        .map(|m| m.id)
        .collect();
    let chat = env.chat(chat_id).await;
    (
        ids,
        chat.status,
        chat.last_error.is_some(),
        chat.compactions,
        chat.compaction_requested_at.is_some(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_compaction_reports_like_with_like_and_the_model_reads_the_summary_once() {
    let env = Env::new().await;
    env.llm.set_default_fn(realistic);
    let worker = env.worker();
    let chat_id = chat_with_turns(&env, 4).await;
    let history = chatd_store::messages::active_history(env.db.pool(), chat_id)
        .await
        .unwrap();
    request_compaction(&env, chat_id).await;
    env.wait_for(chat_id, Duration::from_secs(20), "the compaction", |c| {
        c.status == ChatStatus::Waiting && c.worker_id.is_none() && c.compactions == 1
    })
    .await;
    let (summaries, results) = compactions(&env, chat_id).await;
    let result = &results[0];
    // Half of the 8 messages are summarized: tokens_before is what the
    // model read of them, tokens_after what it reads of the summary.
    let before: i64 = history[..4]
        .iter()
        .map(|m| m.context_entry().token_estimate)
        .sum();
    let after = summaries[0].context_entry().token_estimate;
    assert_eq!(result["tokens_before"], before, "{result}");
    assert_eq!(result["tokens_after"], after, "{result}");
    assert!(after < before, "{after} → {before}");
    eprintln!("manual compaction of a 4-turn chat: tokens_before {before}, tokens_after {after}");

    // The next answer's request carries the summary once (in the boundary),
    // not the visible record of the compaction.
    let summary = result["summary"].as_str().unwrap().to_owned();
    turn(&env, chat_id, "after the compaction").await;
    let requests = env.llm.requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| !is_compaction_request(r))
        .unwrap();
    assert_eq!(
        last.last_user_text().as_deref(),
        Some("after the compaction")
    );
    let text = request_text(last);
    assert_eq!(text.matches(&summary).count(), 1, "{text}");
    assert_eq!(
        text.matches("[Summary of the earlier conversation]")
            .count(),
        1
    );
    assert!(!text.contains("chatd_compact"), "{text}");
    assert!(!text.contains("tokens_before"), "{text}");
    assert!(!text.contains("q0 "), "q0 was summarized");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_compaction_that_would_not_shrink_changes_nothing_and_the_chat_goes_on() {
    let env = Env::new().await;
    env.llm.set_default_fn(realistic);
    let worker = env.worker();
    // Four short messages: what a compaction would replace is smaller than
    // any summary, so the model is not even asked (POST /compact answers
    // 409 before this; the worker checks again).
    let chat_id = env.create_chat("hi").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    turn(&env, chat_id, "ok").await;
    let before = snapshot(&env, chat_id).await;
    let calls = env.llm.requests().len();
    request_compaction(&env, chat_id).await;
    env.wait_for(chat_id, Duration::from_secs(20), "the refusal", |c| {
        c.status == ChatStatus::Waiting && c.worker_id.is_none()
    })
    .await;
    assert_eq!(env.llm.requests().len(), calls, "no model call");
    assert_eq!(snapshot(&env, chat_id).await, before);

    // A long chat whose summary comes out larger than what it replaces:
    // one summarization, nothing committed, no retry, no error.
    env.llm.set_default_fn(bloating);
    let chat_id = chat_with_turns(&env, 4).await;
    let before = snapshot(&env, chat_id).await;
    let summarizing = summarizing_requests(&env);
    request_compaction(&env, chat_id).await;
    env.wait_for(chat_id, Duration::from_secs(20), "the refusal", |c| {
        c.status == ChatStatus::Waiting
            && c.worker_id.is_none()
            && c.compaction_requested_at.is_none()
    })
    .await;
    assert_eq!(summarizing_requests(&env), summarizing + 1);
    assert_eq!(snapshot(&env, chat_id).await, before);
    // The chat is still usable: the next message is answered, not compacted.
    turn(&env, chat_id, "still here").await;
    assert_eq!(summarizing_requests(&env), summarizing + 1);
    let last = env.active_messages(chat_id).await;
    assert_eq!(text_of(last.last().unwrap()), "answer to still here");
    assert!(env.chat(chat_id).await.last_error.is_none());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_automatic_compaction_that_would_not_shrink_is_skipped_and_not_retried_every_turn() {
    let env = Env::new().await;
    // 25 % of 4,000 tokens: reached after about six turns; the prompt fits
    // until about 3,000 tokens (a quarter of the window kept for the answer).
    set_context(&env, 4000, 25, 4).await;
    env.llm.set_default_fn(bloating);
    let worker = env.worker();
    let chat_id = env.create_chat(&long(0)).await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let mut per_turn = Vec::new();
    for n in 1..13 {
        let summarizing = summarizing_requests(&env);
        turn(&env, chat_id, &long(n)).await;
        per_turn.push(summarizing_requests(&env) - summarizing);
        let chat = env.chat(chat_id).await;
        assert!(chat.last_error.is_none(), "{:?}", chat.last_error);
    }
    // Every message was answered, nothing was compacted.
    let answers: Vec<String> = env
        .active_messages(chat_id)
        .await
        .iter()
        .filter(|m| m.role == ChatRole::Assistant && m.visibility == Visibility::Both)
        .map(text_of)
        .collect();
    let expected: Vec<String> = (0..13).map(|n| format!("answer to {}", long(n))).collect();
    assert_eq!(answers, expected);
    let (summaries, results) = compactions(&env, chat_id).await;
    assert!(summaries.is_empty() && results.is_empty());
    // One summarization at the threshold, then none until the context grew
    // by a tenth of the window (about two turns of 170 tokens).
    let first = per_turn
        .iter()
        .position(|&n| n > 0)
        .expect("a compaction was tried");
    assert_eq!(per_turn[first], 1, "{per_turn:?}");
    assert_eq!(per_turn[first + 1], 0, "{per_turn:?}");
    let tried: usize = per_turn.iter().sum();
    assert!(tried * 2 <= per_turn.len() - first, "{per_turn:?}");
    eprintln!("summarizations per turn with a bloating summarizer: {per_turn:?}");
    worker.shutdown().await;
}
