//! Provider projection (spec `durable-agent-loop.md` "Provider
//! compatibility"): whatever the stored history looks like, the request body
//! each adapter builds satisfies that provider's rules, and the history
//! itself is not changed. Checked on the wire bodies, for hand-written
//! histories and for random ones (property test).

use std::collections::{HashMap, HashSet};

use chatd_core::{ChatRole, MessagePart};
use chatd_llm::{MaxTokensParam, ModelRequest, RequestMessage};
use proptest::prelude::*;
use serde_json::{Value, json};

fn anthropic_body(history: &[RequestMessage]) -> Value {
    chatd_llm::anthropic::wire::request_body(&ModelRequest {
        model: "m".into(),
        messages: history.to_vec(),
        reasoning_effort: Some("low".into()),
        ..ModelRequest::default()
    })
}

fn openai_body(history: &[RequestMessage]) -> Value {
    chatd_llm::openai::wire::request_body(
        &ModelRequest {
            model: "m".into(),
            messages: history.to_vec(),
            ..ModelRequest::default()
        },
        MaxTokensParam::default(),
    )
}

fn id_ok(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Anthropic's rules for `messages` (and the top-level `system`).
fn check_anthropic(body: &Value) -> Result<(), String> {
    if body.get("system").is_some_and(|s| !s.is_string()) {
        return Err("system is not a string".into());
    }
    let messages = body["messages"].as_array().ok_or("no messages")?;
    if messages.is_empty() {
        return Err("empty messages".into());
    }
    if messages[0]["role"] != "user" {
        return Err("the first message is not a user message".into());
    }
    let mut ids = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().ok_or("role")?;
        if role != "user" && role != "assistant" {
            return Err(format!("message {i} has role {role}"));
        }
        if i > 0 && messages[i - 1]["role"] == message["role"] {
            return Err(format!("messages {} and {i} have the same role", i - 1));
        }
        let blocks = message["content"].as_array().ok_or("content")?;
        if blocks.is_empty() {
            return Err(format!("message {i} is empty"));
        }
        for block in blocks {
            match block["type"].as_str() {
                Some("text") => {
                    if block["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
                        return Err(format!("message {i} has a blank text block"));
                    }
                }
                Some("thinking") => {
                    if role != "assistant" || block["signature"].as_str().is_none_or(str::is_empty)
                    {
                        return Err(format!("message {i}: unsigned or misplaced thinking"));
                    }
                }
                Some("tool_use") => {
                    let id = block["id"].as_str().unwrap_or_default();
                    if role != "assistant" || !id_ok(id) || !ids.insert(id.to_owned()) {
                        return Err(format!("message {i}: bad or duplicate tool_use {id}"));
                    }
                    if !block["input"].is_object() {
                        return Err(format!("message {i}: input of {id} is not an object"));
                    }
                }
                Some("tool_result") => {
                    if role != "user" {
                        return Err(format!("message {i}: tool_result outside a user turn"));
                    }
                }
                other => return Err(format!("message {i}: unexpected block {other:?}")),
            }
        }
        // tool_use in this turn ⇔ tool_result blocks leading the next one.
        let uses: Vec<&str> = blocks
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| b["id"].as_str().unwrap_or_default())
            .collect();
        let next_results: Vec<&str> = messages
            .get(i + 1)
            .and_then(|m| m["content"].as_array())
            .map(|next| {
                next.iter()
                    .take_while(|b| b["type"] == "tool_result")
                    .map(|b| b["tool_use_id"].as_str().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        if role == "assistant" && !uses.is_empty() && next_results != uses {
            return Err(format!(
                "message {i}: tool_use {uses:?} answered by {next_results:?}"
            ));
        }
        if role == "user" {
            let results = blocks.iter().filter(|b| b["type"] == "tool_result").count();
            let leading = blocks
                .iter()
                .take_while(|b| b["type"] == "tool_result")
                .count();
            if results != leading {
                return Err(format!("message {i}: tool_result after other blocks"));
            }
            let previous_uses = i
                .checked_sub(1)
                .map(|p| {
                    messages[p]["content"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|b| b["type"] == "tool_use")
                        .count()
                })
                .unwrap_or(0);
            if results != previous_uses {
                return Err(format!(
                    "message {i}: {results} results for {previous_uses} uses"
                ));
            }
        }
    }
    if messages.last().unwrap()["role"] != "user" {
        return Err("the conversation ends with an assistant turn".into());
    }
    Ok(())
}

/// OpenAI's rules for `messages`.
fn check_openai(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("no messages")?;
    let mut seen_other = false;
    let mut ids = HashSet::new();
    let mut expected: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().ok_or("role")?;
        if role == "tool" {
            let id = message["tool_call_id"].as_str().unwrap_or_default();
            if expected.first().map(String::as_str) != Some(id) {
                return Err(format!(
                    "message {i}: tool result {id}, expected {expected:?}"
                ));
            }
            expected.remove(0);
            if !message["content"].is_string() {
                return Err(format!("message {i}: tool content is not a string"));
            }
            continue;
        }
        if !expected.is_empty() {
            return Err(format!("message {i}: calls {expected:?} not answered"));
        }
        match role {
            "system" if seen_other => return Err(format!("message {i}: system after others")),
            "system" => {}
            "user" | "assistant" => seen_other = true,
            other => return Err(format!("message {i}: role {other}")),
        }
        let calls = message.get("tool_calls").and_then(Value::as_array);
        let content_empty = message["content"]
            .as_str()
            .is_none_or(|c| c.trim().is_empty());
        if content_empty && calls.is_none_or(Vec::is_empty) {
            return Err(format!("message {i} is empty"));
        }
        for call in calls.into_iter().flatten() {
            let id = call["id"].as_str().unwrap_or_default();
            if role != "assistant" || !id_ok(id) || !ids.insert(id.to_owned()) {
                return Err(format!("message {i}: bad or duplicate call {id}"));
            }
            let args = call["function"]["arguments"].as_str().unwrap_or_default();
            if !serde_json::from_str::<Value>(args).is_ok_and(|a| a.is_object()) {
                return Err(format!("message {i}: arguments of {id} are not an object"));
            }
            expected.push(id.to_owned());
        }
    }
    if !expected.is_empty() {
        return Err(format!("calls {expected:?} not answered at the end"));
    }
    Ok(())
}

fn call(id: &str, args: &str) -> MessagePart {
    MessagePart::ToolCall {
        tool_call_id: id.into(),
        tool_name: "search".into(),
        args: args.into(),
    }
}

fn result(id: &str) -> MessagePart {
    MessagePart::ToolResult {
        tool_call_id: id.into(),
        tool_name: "search".into(),
        result: json!({"hits": 3}),
        is_error: false,
    }
}

#[test]
fn an_interrupted_tool_call_and_an_orphan_result_give_valid_requests_for_both_providers() {
    // The user interrupted while `call_2` ran (its result never came), then
    // edited history so that `call_0`'s call is gone but its result stayed.
    let history = vec![
        RequestMessage::text(ChatRole::System, "Be brief."),
        RequestMessage::text(ChatRole::User, "Find it."),
        RequestMessage {
            role: ChatRole::Tool,
            parts: vec![result("call_0")],
        },
        RequestMessage {
            role: ChatRole::Assistant,
            parts: vec![
                MessagePart::reasoning("unsigned thoughts"),
                MessagePart::text("Searching twice."),
                call("call_1", r#"{"q":"a"}"#),
                call("call_2", r#"{"q":"b"#),
            ],
        },
        RequestMessage {
            role: ChatRole::Tool,
            parts: vec![result("call_1")],
        },
        RequestMessage::text(ChatRole::User, "Stop, try again."),
    ];
    let stored = history.clone();
    let anthropic = anthropic_body(&history);
    check_anthropic(&anthropic).unwrap_or_else(|e| panic!("{e}: {anthropic:#}"));
    let openai = openai_body(&history);
    check_openai(&openai).unwrap_or_else(|e| panic!("{e}: {openai:#}"));
    assert_eq!(history, stored, "projection never changes the history");

    // The missing result is synthesized as an error; the orphan is text.
    let turns = anthropic["messages"].as_array().unwrap();
    assert_eq!(turns[0]["content"][0]["text"], json!("Find it."));
    assert!(
        turns[0]["content"][1]["text"]
            .as_str()
            .unwrap()
            .contains("call_0")
    );
    assert_eq!(
        turns[2]["content"][1],
        json!({"type": "tool_result", "tool_use_id": "call_2",
               "content": "{\"error\":\"Tool execution cancelled\"}", "is_error": true})
    );
    assert_eq!(
        turns[1]["content"][2]["input"],
        json!({}),
        "cut-off arguments"
    );
    let tool_messages: Vec<&Value> = openai["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 2);
    assert_eq!(tool_messages[1]["tool_call_id"], json!("call_2"));
}

// ---------------------------------------------------------------------------
// Random histories.

fn arb_part() -> impl Strategy<Value = MessagePart> {
    let id = prop_oneof![
        Just("c1".to_owned()),
        Just("c2".to_owned()),
        Just("c3".to_owned()),
        Just("id with spaces".to_owned()),
        Just(String::new()),
    ];
    let args = prop_oneof![
        Just(r#"{"q":1}"#.to_owned()),
        Just(String::new()),
        Just(r#"{"q":"#.to_owned()),
        Just("[1,2]".to_owned()),
    ];
    prop_oneof![
        prop_oneof![
            Just("hello".to_owned()),
            Just(String::new()),
            Just("  ".to_owned())
        ]
        .prop_map(MessagePart::text),
        (any::<bool>()).prop_map(|signed| MessagePart::Reasoning {
            text: "thinking".into(),
            signature: signed.then(|| "sig".to_owned()),
        }),
        (id.clone(), args).prop_map(|(id, args)| MessagePart::ToolCall {
            tool_call_id: id,
            tool_name: "tool.name".into(),
            args,
        }),
        (id, any::<bool>()).prop_map(|(id, is_error)| MessagePart::ToolResult {
            tool_call_id: id,
            tool_name: "t".into(),
            result: json!("r"),
            is_error,
        }),
        Just(MessagePart::File {
            file_id: uuid::Uuid::nil(),
            media_type: "image/png".into(),
            name: None,
        }),
    ]
}

fn arb_history() -> impl Strategy<Value = Vec<RequestMessage>> {
    let role = prop_oneof![
        Just(ChatRole::System),
        Just(ChatRole::User),
        Just(ChatRole::Assistant),
        Just(ChatRole::Tool),
    ];
    proptest::collection::vec(
        (role, proptest::collection::vec(arb_part(), 0..4))
            .prop_map(|(role, parts)| RequestMessage { role, parts }),
        0..10,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_histories_project_to_requests_every_provider_accepts(history in arb_history()) {
        let stored = history.clone();
        let anthropic = anthropic_body(&history);
        prop_assert!(check_anthropic(&anthropic).is_ok(), "{:?}: {:#}", check_anthropic(&anthropic), anthropic);
        let openai = openai_body(&history);
        prop_assert!(check_openai(&openai).is_ok(), "{:?}: {:#}", check_openai(&openai), openai);
        prop_assert_eq!(&history, &stored);

        // Every result the history holds for a call it holds reaches the
        // provider unchanged (as long as the call id was acceptable).
        let mut answered: HashMap<String, (Value, bool)> = HashMap::new();
        let mut called: HashSet<String> = HashSet::new();
        for message in &history {
            for part in &message.parts {
                match part {
                    MessagePart::ToolCall { tool_call_id, .. } if message.role == ChatRole::Assistant => {
                        called.insert(tool_call_id.clone());
                    }
                    MessagePart::ToolResult { tool_call_id, result, is_error, .. } if called.contains(tool_call_id) => {
                        answered.entry(tool_call_id.clone()).or_insert((result.clone(), *is_error));
                    }
                    _ => {}
                }
            }
        }
        for (id, (result, is_error)) in answered.into_iter().filter(|(id, _)| id_ok(id)) {
            let sent = openai["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool" && m["tool_call_id"] == json!(id));
            prop_assert!(sent.is_some(), "result of {} lost", id);
            let sent = sent.unwrap();
            // A failed call's result says so (Chat Completions has no error flag).
            let expected = if is_error && result.get("error").is_none() {
                json!({"error": result}).to_string()
            } else {
                result.to_string()
            };
            prop_assert_eq!(sent["content"].as_str(), Some(expected.as_str()));
        }
    }
}
