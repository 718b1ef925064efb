//! The compatible protocols (API.md "Compatible protocols") inside real
//! `chatd serve` replicas with the fake LLM: what a response's options do
//! to the model calls of its turn, the event stream's sequence numbers
//! across a discarded attempt and a resume on another replica, a queued
//! response, cancel, conversation items, and the AI SDK transport. The
//! official clients drive the same routes in `scripts/compat-test.sh`.

use std::time::Duration;

use chatd_testkit::fake_llm::Script;
use futures::StreamExt as _;
use serde_json::{Value, json};

use crate::support::{ADMIN_TOKEN, Chatd, http};
use crate::worker::{fixture, replica_args};

async fn post(server: &Chatd, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let response = http()
        .post(format!("{}{path}", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

/// Reads an SSE response until it ends (or `stop` says so), returning the
/// `data:` payloads as JSON (`[DONE]` as a string).
async fn sse(
    response: reqwest::Response,
    mut stop: impl FnMut(&Value) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let mut events = Vec::new();
    let mut buffer = String::new();
    let mut body = response.bytes_stream();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let chunk = tokio::time::timeout_at(deadline, body.next()).await?;
        let Some(chunk) = chunk else {
            return Ok(events);
        };
        buffer.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            for line in block.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    let value = serde_json::from_str(data)
                        .unwrap_or_else(|_| Value::String(data.to_owned()));
                    let done = stop(&value);
                    events.push(value);
                    if done {
                        return Ok(events);
                    }
                }
            }
        }
    }
}

async fn stream_post(server: &Chatd, path: &str, body: Value) -> anyhow::Result<reqwest::Response> {
    let response = http()
        .post(format!("{}{path}", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(response.status() == 200, "answered {}", response.status());
    Ok(response)
}

fn is_final(event: &Value) -> bool {
    matches!(
        event["type"].as_str(),
        Some("response.completed" | "response.failed" | "response.incomplete")
    )
}

/// Sequence numbers increase strictly and no number is sent with two
/// different events.
fn check_sequence(events: &[Value]) {
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().expect("a sequence number"))
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers increase: {numbers:?}"
    );
}

fn deltas(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_options_apply_to_its_turn_only() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(Script::text("first answer").usage(10, 5));
    let (status, first) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "hello", "instructions": "Answer in French.",
               "max_output_tokens": 16, "reasoning": {"effort": "low"},
               "tools": [{"type": "function", "name": "get_weather",
                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}),
    )
    .await?;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "completed");
    assert_eq!(first["output"][0]["content"][0]["text"], "first answer");
    assert_eq!(first["usage"]["input_tokens"], 10);
    let request = llm
        .requests()
        .into_iter()
        .find(|r| r.last_user_text().as_deref() == Some("hello"))
        .expect("the answer's request");
    let body = request.body.to_string();
    assert!(
        body.contains("Answer in French."),
        "instructions sent: {body}"
    );
    assert_eq!(request.body["tools"][0]["function"]["name"], "get_weather");
    let cap = request
        .body
        .get("max_completion_tokens")
        .or(request.body.get("max_tokens"));
    assert_eq!(cap, Some(&json!(16)), "{body}");

    // The next response of the conversation has none of them.
    llm.push(Script::text("second answer"));
    let (status, second) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "again", "previous_response_id": first["id"]}),
    )
    .await?;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["conversation"], first["conversation"]);
    let request = llm
        .requests()
        .into_iter()
        .find(|r| r.last_user_text().as_deref() == Some("again"))
        .expect("the second request");
    let body = request.body.to_string();
    assert!(!body.contains("Answer in French."), "{body}");
    assert!(
        request
            .body
            .get("tools")
            .is_none_or(|t| t.as_array().is_none_or(Vec::is_empty))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_attempt_ends_its_item_incomplete_and_numbers_never_repeat()
-> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    // The first attempt streams, then the connection drops (retried); the
    // second answers differently.
    llm.push(
        Script::text_in_parts("lost words here", 3, Duration::from_millis(150))
            .delay(Duration::from_millis(300))
            .disconnect(),
    );
    llm.push(Script::text_in_parts(
        "the kept answer",
        3,
        Duration::from_millis(50),
    ));
    let response = stream_post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "hi", "stream": true}),
    )
    .await?;
    let events = sse(response, is_final).await?;
    check_sequence(&events);
    let last = events.last().expect("events");
    assert_eq!(last["type"], "response.completed", "{events:#?}");
    let text = last["response"]["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message")
        .map(|i| {
            i["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect::<String>();
    assert_eq!(text, "the kept answer");
    let incomplete: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done" && e["item"]["status"] == "incomplete")
        .collect();
    assert!(
        deltas(&events).starts_with("lost words here"),
        "the first attempt streamed before it was lost: {events:#?}"
    );
    assert_eq!(
        incomplete.len(),
        1,
        "the lost attempt's item ends incomplete: {events:#?}"
    );
    assert_eq!(
        incomplete[0]["item"]["content"][0]["text"],
        "lost words here"
    );
    let done_texts: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.done")
        .filter_map(|e| e["text"].as_str())
        .collect();
    assert_eq!(done_texts, ["the kept answer"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumes_after_a_sequence_number_on_another_replica() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let a = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    let b = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(Script::text_in_parts(
        "one two three four five six seven eight",
        8,
        Duration::from_millis(150),
    ));
    let response = stream_post(
        &a,
        "/v1/responses",
        json!({"model": "fake-model", "input": "count", "stream": true, "background": true}),
    )
    .await?;
    let mut seen = 0;
    let first = sse(response, |e| {
        if e["type"] == "response.output_text.delta" {
            seen += 1;
        }
        seen >= 2
    })
    .await?;
    let id = first[0]["response"]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let n = first.last().expect("events")["sequence_number"]
        .as_u64()
        .expect("a number");
    let resumed = http()
        .get(format!(
            "{}/v1/responses/{id}?stream=true&starting_after={n}",
            b.url()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?;
    assert_eq!(resumed.status(), 200);
    let rest = sse(resumed, is_final).await?;
    assert!(
        rest.iter().all(|e| e["sequence_number"].as_u64() > Some(n)),
        "only events after {n}"
    );
    let mut all = first.clone();
    all.extend(rest.iter().cloned());
    check_sequence(&all);
    assert_eq!(deltas(&all), "one two three four five six seven eight");
    assert_eq!(rest.last().expect("events")["type"], "response.completed");

    // A resume of a finished response from the start repeats the same
    // numbers with the same content.
    let again = http()
        .get(format!(
            "{}/v1/responses/{id}?stream=true&starting_after=1",
            a.url()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?;
    let again = sse(again, is_final).await?;
    check_sequence(&again);
    let last_again = again.last().expect("events");
    assert_eq!(
        last_again["sequence_number"],
        rest.last().expect("events")["sequence_number"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_response_waits_and_cancel_interrupts_keeping_the_partial_answer()
-> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(Script::text_in_parts(
        "a long answer that goes on",
        5,
        Duration::from_millis(400),
    ));
    let (status, running) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "first", "background": true}),
    )
    .await?;
    assert_eq!(status, 200, "{running}");
    let conversation = running["conversation"]["id"].clone();
    llm.push(Script::text("queued answer"));
    let (status, queued) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "second", "background": true,
               "conversation": conversation}),
    )
    .await?;
    assert_eq!(status, 200, "{queued}");
    assert_eq!(queued["status"], "queued");
    // Cancel the running one once it streamed something.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !llm
        .requests()
        .iter()
        .any(|r| r.last_user_text().as_deref() == Some("first"))
    {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no model call");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (status, cancelled) = post(
        &server,
        &format!(
            "/v1/responses/{}/cancel",
            running["id"].as_str().unwrap_or_default()
        ),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    // The queued response runs next and completes.
    let id = queued["id"].as_str().unwrap_or_default().to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let object = server
            .get_json(&format!("/v1/responses/{id}"), ADMIN_TOKEN)
            .await?;
        if object["status"] == "completed" {
            assert_eq!(object["output"][0]["content"][0]["text"], "queued answer");
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "still {object}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_and_items_never_run_the_model() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    let (status, conversation) = post(
        &server,
        "/v1/conversations",
        json!({"items": [{"type": "message", "role": "user", "content": "remember 42"}],
               "metadata": {"topic": "numbers"}}),
    )
    .await?;
    assert_eq!(status, 200, "{conversation}");
    let id = conversation["id"].as_str().expect("an id").to_owned();
    assert!(id.starts_with("conv_"));
    let (status, added) = post(
        &server,
        &format!("/v1/conversations/{id}/items"),
        json!({"items": [{"role": "assistant", "content": [{"type": "output_text", "text": "noted"}]}]}),
    )
    .await?;
    assert_eq!(status, 200, "{added}");
    let items = server
        .get_json(
            &format!("/v1/conversations/{id}/items?order=asc"),
            ADMIN_TOKEN,
        )
        .await?;
    let roles: Vec<&str> = items["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        llm.requests()
            .iter()
            .all(|r| r.last_user_text().as_deref() != Some("remember 42")),
        "no model call"
    );
    // A response continues it.
    llm.push(Script::text("42"));
    let (status, response) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "what number?", "conversation": id}),
    )
    .await?;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["output"][0]["content"][0]["text"], "42");
    // Errors in OpenAI's shape.
    let (status, error) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "x", "tools": [{"type": "web_search"}]}),
    )
    .await?;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["param"], "tools[0].type");
    let missing = http()
        .get(format!(
            "{}/v1/responses/resp_00000000000000000000000000000000",
            server.url()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?;
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await?;
    assert_eq!(body["error"]["code"], "not_found");
    let unauthenticated = http()
        .get(format!("{}/v1/models", server.url()))
        .send()
        .await?;
    assert_eq!(unauthenticated.status(), 401);
    let body: Value = unauthenticated.json().await?;
    assert_eq!(body["error"]["type"], "authentication_error");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_transport_streams_resumes_and_maps_its_ids() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(Script::text_in_parts(
        "hello there friend",
        3,
        Duration::from_millis(300),
    ));
    let body = json!({"id": "my-chat-1", "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]});
    let response = stream_post(&server, "/api/v2/ai-sdk/chat", body).await?;
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    // Resume while it runs: the turn's stream from its start.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let resumed = http()
        .get(format!(
            "{}/api/v2/ai-sdk/chat/my-chat-1/stream",
            server.url()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?;
    assert_eq!(resumed.status(), 200);
    let (first, second) = tokio::join!(
        sse(response, |e| e == "[DONE]"),
        sse(resumed, |e| e == "[DONE]")
    );
    let (first, second) = (first?, second?);
    for chunks in [&first, &second] {
        let text: String = chunks
            .iter()
            .filter(|c| c["type"] == "text-delta")
            .filter_map(|c| c["delta"].as_str())
            .collect();
        assert_eq!(text, "hello there friend", "{chunks:#?}");
        // The first chunk names the answer, before any text.
        assert_eq!(chunks[0]["type"], "start", "{chunks:#?}");
        assert_eq!(chunks[1]["type"], "start-step", "{chunks:#?}");
        assert_eq!(
            chunks.iter().filter(|c| c["type"] == "start").count(),
            1,
            "{chunks:#?}"
        );
        assert_eq!(chunks[chunks.len() - 2]["type"], "finish");
    }
    // After the turn: 204, and the history as UI messages.
    let idle = http()
        .get(format!(
            "{}/api/v2/ai-sdk/chat/my-chat-1/stream",
            server.url()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?;
    assert_eq!(idle.status(), 204);
    let messages = server
        .get_json("/api/v2/ai-sdk/chat/my-chat-1/messages", ADMIN_TOKEN)
        .await?;
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[1]["parts"][0]["text"], "hello there friend");
    assert_eq!(
        messages[1]["id"], first[0]["messageId"],
        "start named the answer"
    );
    // The same id continues the same chat.
    llm.push(Script::text("again"));
    let body = json!({"id": "my-chat-1", "trigger": "submit-message", "messages": [
        {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "more"}]}]});
    let chunks = sse(
        stream_post(&server, "/api/v2/ai-sdk/chat", body).await?,
        |e| e == "[DONE]",
    )
    .await?;
    assert!(chunks.iter().any(|c| c["delta"] == "again"));
    let messages = server
        .get_json("/api/v2/ai-sdk/chat/my-chat-1/messages", ADMIN_TOKEN)
        .await?;
    assert_eq!(messages.as_array().map(Vec::len), Some(4));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_stream_resets_the_step_of_a_discarded_attempt() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(
        Script::text_in_parts("lost words here", 3, Duration::from_millis(150))
            .delay(Duration::from_millis(300))
            .disconnect(),
    );
    llm.push(Script::text_in_parts(
        "the kept answer",
        3,
        Duration::from_millis(50),
    ));
    let body = json!({"id": "reset-chat", "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]});
    let chunks = sse(
        stream_post(&server, "/api/v2/ai-sdk/chat", body).await?,
        |e| e == "[DONE]",
    )
    .await?;
    let kinds: Vec<&str> = chunks.iter().filter_map(|c| c["type"].as_str()).collect();
    let reset = kinds
        .iter()
        .position(|k| *k == "reset-step")
        .expect("a reset-step");
    let text = |chunks: &[Value]| -> String {
        chunks
            .iter()
            .filter(|c| c["type"] == "text-delta")
            .filter_map(|c| c["delta"].as_str())
            .collect()
    };
    assert_eq!(text(&chunks[..reset]), "lost words here", "{kinds:?}");
    assert_eq!(text(&chunks[reset..]), "the kept answer", "{kinds:?}");
    assert_eq!(kinds[0], "start");
    let messages = server
        .get_json("/api/v2/ai-sdk/chat/reset-chat/messages", ADMIN_TOKEN)
        .await?;
    assert_eq!(messages[1]["id"], chunks[0]["messageId"]);
    assert_eq!(messages[1]["parts"][0]["text"], "the kept answer");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_whose_turn_compacts_shows_its_answer() -> anyhow::Result<()> {
    use chatd_testkit::fake_llm::{is_compaction_request, summary_of};
    let (db, llm, _dir, config) = fixture().await?;
    llm.set_default_fn(|r| {
        if is_compaction_request(r) {
            summary_of(r)
        } else {
            Script::echo_of(r)
        }
    });
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    // Past 70% of the 8,192-token window: the turn compacts first.
    let items: Vec<Value> = (0..40)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("{i} {}", "word ".repeat(200))}))
        .collect();
    let (status, conversation) =
        post(&server, "/v1/conversations", json!({"items": items})).await?;
    assert_eq!(status, 200, "{conversation}");
    let (status, response) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "go", "conversation": conversation["id"]}),
    )
    .await?;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["status"], "completed", "{response:#}");
    let kinds: Vec<&str> = response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["type"].as_str())
        .collect();
    assert_eq!(kinds, ["mcp_call", "message"], "{response:#}");
    assert_eq!(response["output"][0]["name"], "chatd_compact");
    assert_eq!(response["output"][1]["content"][0]["text"], "echo: go");
    let items = server
        .get_json(
            &format!(
                "/v1/conversations/{}/items?order=desc&limit=5",
                conversation["id"].as_str().unwrap_or_default()
            ),
            ADMIN_TOKEN,
        )
        .await?;
    assert!(
        items["data"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|i| i["type"] != "function_call"),
        "chatd's own calls are not function calls: {items:#}"
    );
    Ok(())
}

/// The texts of the user messages the fake LLM was sent for the answer to
/// `last`, in order.
fn history_sent(llm: &chatd_testkit::fake_llm::FakeLlm, last: &str) -> Vec<String> {
    let request = llm
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.last_user_text().as_deref() == Some(last))
        .expect("a request for it");
    request.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branches_follow_previous_response_id_and_never_cut_a_running_turn() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    llm.set_default_fn(Script::echo_of);
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    let create = |input: &str, previous: Option<&Value>| {
        let mut body = json!({"model": "fake-model", "input": input});
        if let Some(previous) = previous {
            body["previous_response_id"] = previous.clone();
        }
        body
    };
    let (_, r1) = post(&server, "/v1/responses", create("one", None)).await?;
    let (_, r2) = post(&server, "/v1/responses", create("two", Some(&r1["id"]))).await?;
    let (_, r3) = post(&server, "/v1/responses", create("three", Some(&r2["id"]))).await?;
    // From r1: a new branch, without two and three.
    let (status, b) = post(&server, "/v1/responses", create("two-b", Some(&r1["id"]))).await?;
    assert_eq!(status, 200, "{b}");
    assert_eq!(history_sent(&llm, "two-b"), ["one", "two-b"]);
    // Back to r3, the newest response of the other branch.
    let (status, four) = post(&server, "/v1/responses", create("four", Some(&r3["id"]))).await?;
    assert_eq!(status, 200, "{four}");
    assert_eq!(history_sent(&llm, "four"), ["one", "two", "three", "four"]);
    assert_eq!(four["conversation"], r1["conversation"]);

    // While a response runs, a branch from an older one is refused and the
    // running one is untouched.
    llm.push(Script::text_in_parts(
        "a slow answer",
        4,
        Duration::from_millis(300),
    ));
    let (_, running) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "five", "previous_response_id": four["id"], "background": true}),
    )
    .await?;
    let (status, refused) =
        post(&server, "/v1/responses", create("again", Some(&r1["id"]))).await?;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "conflict");
    let id = running["id"].as_str().unwrap_or_default().to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let object = server
            .get_json(&format!("/v1/responses/{id}"), ADMIN_TOKEN)
            .await?;
        if object["status"] != "in_progress" && object["status"] != "queued" {
            assert_eq!(object["status"], "completed", "{object}");
            assert_eq!(object["output"][0]["content"][0]["text"], "a slow answer");
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "still {object}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Malformed ids are 404, not 500.
    let odd = http()
        .get(format!("{}/v1/responses/resp_%00", server.url()))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?;
    assert_eq!(odd.status(), 404);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_with_its_turn_and_a_cancelled_queued_response_ends_at_once()
-> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(Script::text_in_parts(
        "first answer",
        4,
        Duration::from_millis(250),
    ));
    llm.push(Script::text("second answer"));
    let first = stream_post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "first", "stream": true}),
    )
    .await?;
    let reader = tokio::spawn(sse(first, is_final));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let chats = server.get_json("/api/v2/chats", ADMIN_TOKEN).await?;
    let conv = format!(
        "conv_{}",
        chats[0]["id"].as_str().unwrap_or_default().replace('-', "")
    );
    let (status, queued) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "second", "conversation": conv, "background": true}),
    )
    .await?;
    assert_eq!(status, 200, "{queued}");
    let events = reader.await??;
    let last = events.last().expect("events");
    assert_eq!(last["type"], "response.completed", "{events:#?}");
    assert_eq!(deltas(&events), "first answer", "only its own turn");
    assert_eq!(last["response"]["output"].as_array().map(Vec::len), Some(1));

    // A queued response cancelled: cancelled at once, and a new message
    // while function calls wait is refused.
    llm.push(Script::text_in_parts(
        "third answer",
        4,
        Duration::from_millis(400),
    ));
    let (_, third) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "third", "conversation": conv, "background": true}),
    )
    .await?;
    let (_, fourth) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "fourth", "conversation": conv, "background": true}),
    )
    .await?;
    assert_eq!(fourth["status"], "queued", "{fourth}");
    let started = tokio::time::Instant::now();
    let (status, cancelled) = post(
        &server,
        &format!(
            "/v1/responses/{}/cancel",
            fourth["id"].as_str().unwrap_or_default()
        ),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert!(started.elapsed() < Duration::from_secs(5), "at once");
    let _ = third;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_goes_through_the_ai_sdk_transports_own_messages() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let mcp = chatd_testkit::McpHttpFixture::start().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    let (status, mcp_server) = post(
        &server,
        "/api/v2/chats/mcp-servers",
        json!({"slug": "calc", "transport": "streamable_http", "url": mcp.url(),
               "require_approval": "always"}),
    )
    .await?;
    assert_eq!(status, 201, "{mcp_server}");
    llm.push(Script::text("ready"));
    let (status, chat) = post(
        &server,
        "/api/v2/chats",
        json!({"content": [{"type": "text", "text": "hi"}], "mcp_server_ids": [mcp_server["id"]]}),
    )
    .await?;
    assert_eq!(status, 201, "{chat}");
    let id = chat["id"].as_str().expect("an id").to_owned();
    crate::worker::wait_turn_end(&db, id.parse()?).await?;

    // The model calls the tool: the stream asks for approval.
    llm.push(Script::new().tool_call("c1", "calc__add", r#"{"a":1,"b":2}"#, 1));
    let user = json!({"id": "u2", "role": "user", "parts": [{"type": "text", "text": "add"}]});
    let body = json!({"id": id, "trigger": "submit-message", "messages": [user]});
    let chunks = sse(
        stream_post(&server, "/api/v2/ai-sdk/chat", body).await?,
        |e| e == "[DONE]",
    )
    .await?;
    let input = chunks
        .iter()
        .find(|c| c["type"] == "tool-input-available")
        .unwrap_or_else(|| panic!("{chunks:#?}"));
    assert_eq!(input["toolCallId"], "c1");
    let ask = chunks
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .unwrap_or_else(|| panic!("{chunks:#?}"));
    assert_eq!(ask["approvalId"], "c1");

    // The transport's answer: the assistant message with the approval.
    llm.push(Script::text("the sum is 3"));
    let answered = json!({"id": chunks[0]["messageId"], "role": "assistant", "parts": [
        {"type": "dynamic-tool", "toolName": "calc__add", "toolCallId": "c1",
         "state": "approval-responded", "input": {"a": 1, "b": 2},
         "approval": {"id": "c1", "approved": true}}]});
    let body = json!({"id": id, "trigger": "submit-message", "messages": [user, answered]});
    let chunks = sse(
        stream_post(&server, "/api/v2/ai-sdk/chat", body).await?,
        |e| e == "[DONE]",
    )
    .await?;
    let output = chunks
        .iter()
        .find(|c| c["type"] == "tool-output-available")
        .unwrap_or_else(|| panic!("{chunks:#?}"));
    assert_eq!(output["toolCallId"], "c1");
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect();
    assert_eq!(text, "the sum is 3", "{chunks:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_queued_behind_a_failed_turn_still_runs() -> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(
        Script::new()
            .delay(Duration::from_millis(600))
            .then_text("")
            .finish("stop"),
    );
    llm.push(Script::http_error(
        400,
        r#"{"error": {"message": "bad request", "type": "invalid_request_error"}}"#,
    ));
    llm.push(Script::text("the queued one ran"));
    let (_, first) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "warm", "background": true}),
    )
    .await?;
    // The second fails; the third waits behind it in the queue.
    let conversation = first["conversation"]["id"].clone();
    let (_, second) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "fails", "conversation": conversation, "background": true}),
    )
    .await?;
    let (status, third) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "then me", "conversation": conversation}),
    )
    .await?;
    assert_eq!(status, 200, "{third}");
    assert_eq!(third["status"], "completed", "{third}");
    assert_eq!(
        third["output"][0]["content"][0]["text"],
        "the queued one ran"
    );
    let second = server
        .get_json(
            &format!(
                "/v1/responses/{}",
                second["id"].as_str().unwrap_or_default()
            ),
            ADMIN_TOKEN,
        )
        .await?;
    assert_eq!(second["status"], "failed", "{second}");
    Ok(())
}

// ---- provider-hosted web search through the compatible protocols --------

const SEARCH_URL: &str = "https://example.org/shannon";
/// 16 characters (the dash is one character, three bytes): the cited
/// text's annotation starts there.
const SEARCH_INTRO: &str = "Looking it up — ";
const SEARCH_CITED: &str = "Shannon was born on April 30, 1916.";

/// [`crate::worker::fixture`] with the default model of Anthropic kind and
/// `options.provider_tools: ["web_search"]`, so that the worker keeps the
/// provider's search parts (API.md "Workspaces and provider-hosted tools").
async fn search_fixture() -> anyhow::Result<(
    chatd_testkit::TestDatabase,
    chatd_testkit::fake_llm::FakeLlm,
    tempfile::TempDir,
    String,
)> {
    let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let llm = chatd_testkit::fake_llm::FakeLlm::start().await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("chatd.toml");
    std::fs::write(
        &path,
        format!(
            "[[providers]]\nname = \"fake\"\nprovider = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"test-key\"\n\n\
             [[model_configs]]\nname = \"fake-model\"\nprovider = \"fake\"\nmodel = \"fake-model\"\ncontext_limit = 8192\nis_default = true\n\
             [model_configs.options]\nprovider_tools = [\"web_search\"]\n",
            llm.base_url()
        ),
    )?;
    Ok((db, llm, dir, path.display().to_string()))
}

/// Text, a search with one result, then text citing it: stored as
/// `[text, provider-tool-call, provider-tool-result, text with citations]`.
fn search_answer() -> Script {
    Script::new()
        .then_text(SEARCH_INTRO)
        // Streamed live before the search (the AI SDK test sees it so).
        .delay(Duration::from_millis(300))
        .web_search(
            "srvtoolu_fake_1",
            "claude shannon birth date",
            &[(SEARCH_URL, "Claude Shannon")],
        )
        .cited_text(
            SEARCH_CITED,
            SEARCH_URL,
            "Claude Shannon",
            "Claude Elwood Shannon (April 30, 1916 – ...",
        )
}

/// A search whose result is Anthropic's error object, then plain text:
/// stored as `[provider-tool-call, provider-tool-result (is_error), text]`.
/// Raw blocks at indices 10 and 11 so they never meet the script's own.
fn failed_search_answer() -> Script {
    Script::new()
        .raw_data(json!({"type": "content_block_start", "index": 10, "content_block":
            {"type": "server_tool_use", "id": "srvtoolu_fake_2", "name": "web_search", "input": {}}}).to_string())
        .raw_data(json!({"type": "content_block_delta", "index": 10, "delta":
            {"type": "input_json_delta", "partial_json": r#"{"query":"shannon death"}"#}}).to_string())
        .raw_data(json!({"type": "content_block_stop", "index": 10}).to_string())
        .raw_data(json!({"type": "content_block_start", "index": 11, "content_block":
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_fake_2", "content":
                {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}}}).to_string())
        .raw_data(json!({"type": "content_block_stop", "index": 11}).to_string())
        .then_text("The search failed.")
}

fn search_error() -> Value {
    json!({"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"})
}

fn search_results() -> Value {
    json!([{"type": "web_search_result", "url": SEARCH_URL, "title": "Claude Shannon",
            "encrypted_content": "fake-encrypted-0", "page_age": null}])
}

/// The characters `start..end` of `text` (OpenAI's indices count
/// characters, as Python's `str` does).
fn char_slice(text: &str, start: usize, end: usize) -> String {
    text.chars().skip(start).take(end - start).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_search_is_a_web_search_call_item_and_its_citations_url_citations()
-> anyhow::Result<()> {
    let (db, llm, _dir, config) = search_fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(search_answer());
    let (status, response) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "When was Claude Shannon born?"}),
    )
    .await?;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["status"], "completed", "{response:#}");
    // The provider was asked to search (the setup took).
    assert_eq!(
        llm.requests()[0].body["tools"][0]["type"],
        "web_search_20250305"
    );
    let output = response["output"].as_array().expect("output");
    assert_eq!(output.len(), 2, "{response:#}");
    let message_id = output[1]["id"].as_str().expect("an id");
    let chatd_id = message_id.strip_prefix("msg_").expect("msg_<id>");
    // The call is the message's part 1 (after the intro text).
    assert_eq!(
        output[0],
        json!({"type": "web_search_call", "id": format!("ws_{chatd_id}_1"), "status": "completed",
               "action": {"type": "search", "query": "claude shannon birth date"}})
    );
    let text = format!("{SEARCH_INTRO}{SEARCH_CITED}");
    assert_eq!(output[1]["type"], "message");
    assert_eq!(output[1]["status"], "completed");
    assert_eq!(output[1]["content"][0]["type"], "output_text");
    assert_eq!(output[1]["content"][0]["text"], text.as_str());
    let start = SEARCH_INTRO.chars().count();
    assert_eq!(start, 16);
    let end = start + SEARCH_CITED.chars().count();
    assert_eq!(
        output[1]["content"][0]["annotations"],
        json!([{"type": "url_citation", "start_index": 16, "end_index": 51,
                "url": SEARCH_URL, "title": "Claude Shannon"}])
    );
    assert_eq!(end, 51);
    assert_eq!(char_slice(&text, start, end), SEARCH_CITED);

    // The same items in the conversation, after the user's message.
    let conversation = response["conversation"]["id"]
        .as_str()
        .expect("a conversation")
        .to_owned();
    let items = server
        .get_json(
            &format!("/v1/conversations/{conversation}/items?order=asc"),
            ADMIN_TOKEN,
        )
        .await?;
    let data = items["data"].as_array().expect("data");
    assert_eq!(data.len(), 3, "{items:#}");
    assert_eq!(data[0]["role"], "user");
    assert_eq!(data[1], output[0]);
    assert_eq!(data[2]["id"], output[1]["id"]);
    assert_eq!(data[2]["role"], "assistant");
    assert_eq!(data[2]["content"], output[1]["content"]);

    // A failed search: `failed`, and a message without annotations.
    llm.push(failed_search_answer());
    let (status, failed) = post(
        &server,
        "/v1/responses",
        json!({"model": "fake-model", "input": "And his death?", "previous_response_id": response["id"]}),
    )
    .await?;
    assert_eq!(status, 200, "{failed}");
    let output = failed["output"].as_array().expect("output");
    let kinds: Vec<&str> = output.iter().filter_map(|i| i["type"].as_str()).collect();
    assert_eq!(kinds, ["web_search_call", "message"], "{failed:#}");
    let chatd_id = output[1]["id"]
        .as_str()
        .and_then(|id| id.strip_prefix("msg_"))
        .expect("msg_<id>");
    assert_eq!(
        output[0],
        json!({"type": "web_search_call", "id": format!("ws_{chatd_id}_0"), "status": "failed",
               "action": {"type": "search", "query": "shannon death"}})
    );
    assert_eq!(output[1]["content"][0]["text"], "The search failed.");
    assert_eq!(output[1]["content"][0]["annotations"], json!([]));
    let items = server
        .get_json(
            &format!("/v1/conversations/{conversation}/items?order=desc&limit=2"),
            ADMIN_TOKEN,
        )
        .await?;
    assert_eq!(items["data"][0]["id"], output[1]["id"], "{items:#}");
    assert_eq!(items["data"][1], output[0], "{items:#}");
    Ok(())
}

/// The chunk types of `chunks`, a run of `text-delta`s counted once (the
/// live text comes in as many deltas as the provider sent).
fn chunk_kinds(chunks: &[Value]) -> Vec<&str> {
    let mut kinds: Vec<&str> = chunks.iter().filter_map(|c| c["type"].as_str()).collect();
    kinds.dedup_by(|a, b| *a == "text-delta" && *b == "text-delta");
    kinds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_shows_a_web_search_as_a_provider_executed_tool_with_its_sources()
-> anyhow::Result<()> {
    let (db, llm, _dir, config) = search_fixture().await?;
    let server = Chatd::start(&replica_args(&db, &config, "200ms")).await?;
    llm.push(search_answer());
    let body = json!({"id": "search-chat", "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "When was Claude Shannon born?"}]}]});
    let chunks = sse(
        stream_post(&server, "/api/v2/ai-sdk/chat", body).await?,
        |e| e == "[DONE]",
    )
    .await?;
    // The text streams as the model writes it; the search's chunks and the
    // sources follow once the answer is committed.
    assert_eq!(
        chunk_kinds(&chunks),
        [
            "start",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "tool-input-available",
            "tool-output-available",
            "source-url",
            "finish-step",
            "finish"
        ],
        "{chunks:#?}"
    );
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect();
    assert_eq!(text, format!("{SEARCH_INTRO}{SEARCH_CITED}"));
    // The intro was streamed live (its text part is the attempt's, `t_`)
    // and the committed answer continued it without a reset.
    let live_id = chunks
        .iter()
        .find(|c| c["type"] == "text-start")
        .and_then(|c| c["id"].as_str())
        .unwrap_or_default();
    assert!(live_id.starts_with("t_"), "{chunks:#?}");
    let find = |kind: &str| {
        chunks
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind}: {chunks:#?}"))
            .clone()
    };
    let message_id = find("start")["messageId"]
        .as_str()
        .expect("a message id")
        .to_owned();
    assert_eq!(
        find("tool-input-available"),
        json!({"type": "tool-input-available", "toolCallId": "srvtoolu_fake_1",
               "toolName": "web_search", "input": {"query": "claude shannon birth date"},
               "dynamic": true, "providerExecuted": true})
    );
    assert_eq!(
        find("tool-output-available"),
        json!({"type": "tool-output-available", "toolCallId": "srvtoolu_fake_1",
               "output": search_results(), "dynamic": true, "providerExecuted": true})
    );
    // The cited text is the message's part 3, its first citation.
    let source_id = format!("{message_id}-3-0");
    assert_eq!(
        find("source-url"),
        json!({"type": "source-url", "sourceId": source_id, "url": SEARCH_URL,
               "title": "Claude Shannon"})
    );

    // The listing: the parts in the message's order, the search a
    // dynamic-tool part the provider executed, with its output.
    let messages = server
        .get_json("/api/v2/ai-sdk/chat/search-chat/messages", ADMIN_TOKEN)
        .await?;
    assert_eq!(messages.as_array().map(Vec::len), Some(2), "{messages:#}");
    assert_eq!(messages[1]["id"], message_id.as_str());
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["parts"],
        json!([
            {"type": "text", "text": SEARCH_INTRO, "state": "done"},
            {"type": "dynamic-tool", "toolName": "web_search", "toolCallId": "srvtoolu_fake_1",
             "providerExecuted": true, "state": "output-available",
             "input": {"query": "claude shannon birth date"}, "output": search_results()},
            {"type": "text", "text": SEARCH_CITED, "state": "done"},
            {"type": "source-url", "sourceId": source_id, "url": SEARCH_URL, "title": "Claude Shannon"},
        ]),
        "{messages:#}"
    );

    // A failed search: a provider-executed tool-output-error, and an
    // output-error part.
    llm.push(failed_search_answer());
    let body = json!({"id": "search-chat", "trigger": "submit-message", "messages": [
        {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "And his death?"}]}]});
    let chunks = sse(
        stream_post(&server, "/api/v2/ai-sdk/chat", body).await?,
        |e| e == "[DONE]",
    )
    .await?;
    let kinds = chunk_kinds(&chunks);
    let input = kinds
        .iter()
        .position(|k| *k == "tool-input-available")
        .unwrap_or_else(|| panic!("{chunks:#?}"));
    assert_eq!(kinds[input + 1], "tool-output-error", "{kinds:?}");
    let error = chunks
        .iter()
        .find(|c| c["type"] == "tool-output-error")
        .expect("checked");
    assert_eq!(error["toolCallId"], "srvtoolu_fake_2");
    assert_eq!(error["providerExecuted"], true);
    assert_eq!(error["dynamic"], true);
    let error_text: Value = serde_json::from_str(error["errorText"].as_str().expect("a string"))?;
    assert_eq!(error_text, search_error());
    assert!(!kinds.contains(&"source-url"), "{kinds:?}");
    let messages = server
        .get_json("/api/v2/ai-sdk/chat/search-chat/messages", ADMIN_TOKEN)
        .await?;
    let parts = &messages[3]["parts"];
    assert_eq!(parts.as_array().map(Vec::len), Some(2), "{messages:#}");
    assert_eq!(parts[0]["type"], "dynamic-tool");
    assert_eq!(parts[0]["state"], "output-error");
    assert_eq!(parts[0]["providerExecuted"], true);
    assert_eq!(parts[0]["toolCallId"], "srvtoolu_fake_2");
    assert_eq!(parts[0]["input"], json!({"query": "shannon death"}));
    assert_eq!(
        serde_json::from_str::<Value>(parts[0]["errorText"].as_str().expect("a string"))?,
        search_error()
    );
    assert_eq!(
        parts[1],
        json!({"type": "text", "text": "The search failed.", "state": "done"})
    );
    Ok(())
}
