//! API.md "Sign-in, search, sharing and export": `GET
//! /chats/{chat}/export` (JSON and Markdown, readable by who reads the
//! chat) and `POST /chats/import` (same visible history, new ids, idle; a
//! refused import changes nothing).

use chatd_core::{ChatStatus, MessagePart};
use chatd_store::{CreateChatInput, NewMessage};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::*;

/// A waiting chat of alice with a rich history: system prompt, a user
/// question with HTML in it, an assistant with reasoning (signed) and a
/// tool call, its result, an answer.
async fn rich_chat(s: &Server) -> Uuid {
    let messages = vec![
        NewMessage::system("Be brief."),
        NewMessage::user(vec![MessagePart::text("What is <b>2+2</b> & why?")])
            .created_by(s.alice.id),
        NewMessage::assistant(vec![
            MessagePart::Reasoning {
                text: "Let me add.".into(),
                signature: Some("sig".into()),
            },
            MessagePart::ToolCall {
                tool_call_id: "call_1".into(),
                tool_name: "calc".into(),
                args: r#"{"expr":"2+2"}"#.into(),
            },
        ]),
        NewMessage::tool(vec![MessagePart::ToolResult {
            tool_call_id: "call_1".into(),
            tool_name: "calc".into(),
            result: json!({"value": 4}),
            is_error: false,
        }]),
        NewMessage::assistant(vec![MessagePart::text("It is **4**.")]),
    ];
    s.store
        .create_chat(CreateChatInput {
            owner_id: s.alice.id,
            title: Some("Sums: 2/2 \"fun\"".into()),
            initial_messages: messages,
            initial_status: Some(ChatStatus::Waiting),
            ..Default::default()
        })
        .await
        .expect("create")
        .chat
        .id
}

async fn export(
    s: &Server,
    id: Uuid,
    user: &User,
    query: &str,
) -> (Answer, reqwest::header::HeaderMap) {
    s.call_with_headers(
        "GET",
        &chat_path(id, &format!("/export{query}")),
        user,
        None,
        &[],
    )
    .await
}

/// What a round trip keeps of each message.
fn essence(doc: &Value) -> Vec<Value> {
    doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            json!({"role": m["role"], "visibility": m["visibility"], "content": m["content"],
                   "finish_reason": m.get("finish_reason")})
        })
        .collect()
}

async fn chat_count(s: &Server) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM chats")
        .fetch_one(s.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_markdown_exports_are_attachments_of_the_visible_history() {
    let s = Server::start().await;
    let id = rich_chat(&s).await;
    let (answer, headers) = export(&s, id, &s.alice, "").await;
    let doc = answer.expect(200);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        headers["content-disposition"],
        "attachment; filename=\"Sums_ 2_2 _fun_.json\""
    );
    assert_eq!(doc["format"], "chatd.chat");
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["chat"]["title"], "Sums: 2/2 \"fun\"");
    let roles: Vec<&str> = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    // The reasoning signature is not exported.
    assert_eq!(
        doc["messages"][2]["content"][0],
        json!({"type": "reasoning", "text": "Let me add."})
    );
    // What GET messages shows, the same parts.
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let shown = page.expect(200)["messages"].as_array().unwrap().len();
    assert_eq!(doc["messages"].as_array().unwrap().len(), shown);

    let (md, headers) = export(&s, id, &s.alice, "?format=markdown").await;
    md.expect(200);
    assert_eq!(headers["content-type"], "text/markdown; charset=utf-8");
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .ends_with(".md\"")
    );
    let text = &md.text;
    assert!(text.starts_with("# Sums: 2/2 \"fun\"\n"), "{text}");
    for needle in [
        "## System\n\nBe brief.",
        "## User\n\nWhat is <b>2+2</b> & why?",
        "## Assistant",
        "**Tool call** `calc`",
        "**Tool result** `calc`",
        "It is **4**.",
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }

    // Bad format; another user's chat; the admin may read it.
    let (bad, _) = export(&s, id, &s.alice, "?format=pdf").await;
    bad.expect_error(400);
    assert_eq!(bad.fields(), ["format"]);
    let (theirs, _) = export(&s, id, &s.bob, "").await;
    theirs.expect_error(404);
    let (admin, _) = export(&s, id, &s.admin, "?format=json").await;
    admin.expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_round_trips_with_new_ids_and_waits() {
    let s = Server::start().await;
    let id = rich_chat(&s).await;
    let (first, _) = export(&s, id, &s.alice, "").await;
    let first = first.expect(200).clone();
    // Bob imports alice's export (he got the file from her).
    let chat = s.post("/api/v2/chats/import", &s.bob, first.clone()).await;
    let chat = chat.expect(201).clone();
    let new_id = uuid(&chat["id"]);
    assert_ne!(new_id, id);
    assert_eq!(chat["status"], "waiting");
    assert_eq!(chat["title"], first["chat"]["title"]);
    assert_eq!(uuid(&chat["owner_id"]), s.bob.id);
    let (second, _) = export(&s, new_id, &s.bob, "").await;
    let second = second.expect(200);
    assert_eq!(essence(&first), essence(second));
    // New ids: the old messages are untouched and still alice's.
    let old: i64 = sqlx::query_scalar("SELECT count(*) FROM chat_messages WHERE chat_id = $1")
        .bind(id)
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(old, 5);
    // The imported chat is usable: a send starts a turn.
    s.post(&chat_path(new_id, "/messages"), &s.bob, text("and 3+3?"))
        .await
        .expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_ending_in_tool_calls_answers_them_as_cancelled() {
    let s = Server::start().await;
    let doc = json!({
        "format": "chatd.chat", "version": 1, "chat": {"title": "Pending"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "run it"},
                                         {"type": "file", "file_id": Uuid::new_v4(), "media_type": "text/plain", "name": "a.txt"}]},
            {"role": "assistant", "content": [{"type": "tool-call", "tool_call_id": "c9", "tool_name": "run", "args": "{}"}]},
        ]
    });
    let chat = s.post("/api/v2/chats/import", &s.alice, doc).await;
    let id = uuid(&chat.expect(201)["id"]);
    assert_eq!(chat.body["status"], "waiting");
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let messages = page.expect(200)["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3);
    // The file is a note (its bytes are not in an export).
    assert_eq!(
        messages[0]["content"][1],
        json!({"type": "text", "text": "[file: a.txt (text/plain)]"})
    );
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool-result");
    assert_eq!(result["tool_call_id"], "c9");
    assert_eq!(result["is_error"], true);
    assert_eq!(result["result"]["error"], "Tool execution cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_import_is_refused_naming_the_field_and_creates_nothing() {
    let s = Server::start().await;
    let good = json!({
        "format": "chatd.chat", "version": 1, "chat": {"title": "T"},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    });
    s.post("/api/v2/chats/import", &s.alice, good.clone())
        .await
        .expect(201);
    let before = chat_count(&s).await;
    let with = |pointer: &str, value: Value| {
        let mut doc = good.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        match doc.pointer_mut(parent).unwrap() {
            Value::Object(o) => {
                o.insert(key.to_owned(), value);
            }
            Value::Array(a) => a[key.parse::<usize>().unwrap()] = value,
            other => panic!("{other}"),
        }
        doc
    };
    let call = json!({"type": "tool-call", "tool_call_id": "c", "tool_name": "t", "args": "{}"});
    let result =
        json!({"type": "tool-result", "tool_call_id": "zz", "tool_name": "t", "result": 1});
    let cases = [
        (with("/format", json!("other")), "format"),
        (with("/version", json!(2)), "version"),
        (with("/chat/title", json!("  ")), "chat.title"),
        (with("/messages", json!([])), "messages"),
        (with("/messages/0/role", json!("robot")), "messages[0].role"),
        (
            with("/messages/0/visibility", json!("model")),
            "messages[0].visibility",
        ),
        (
            with("/messages/0/content", json!([])),
            "messages[0].content",
        ),
        (
            with("/messages/0/content/0", json!({"type": "nope"})),
            "messages[0].content[0]",
        ),
        // A user message cannot carry a tool call.
        (
            with("/messages/0/content/0", call.clone()),
            "messages[0].content[0]",
        ),
        (
            with(
                "/messages",
                json!([{"role": "user", "content": [{"type": "text", "text": "x"}]},
                       {"role": "tool", "content": [result]}]),
            ),
            "messages[1].content[0].tool_call_id",
        ),
        (
            with(
                "/messages",
                json!([{"role": "assistant", "content": [call]},
                       {"role": "user", "content": [{"type": "text", "text": "x"}]}]),
            ),
            "messages[1]",
        ),
        (
            with("/messages/0/content/0/text", json!("x".repeat(300 * 1024))),
            "messages[0].content",
        ),
    ];
    for (doc, field) in cases {
        let answer = s.post("/api/v2/chats/import", &s.alice, doc).await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), vec![field.to_owned()], "{}", answer.text);
    }
    // Over the body limit: 413.
    let huge = with("/messages/0/content/0/text", json!("x".repeat(2 << 20)));
    s.post("/api/v2/chats/import", &s.alice, huge)
        .await
        .expect_error(413);
    assert_eq!(chat_count(&s).await, before, "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_of_more_than_the_most_messages_is_refused() {
    let s = Server::start().await;
    let most = chatd_api::export::MAX_IMPORT_MESSAGES;
    let doc = |n: usize| {
        let messages: Vec<Value> = (0..n)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": [{"type": "text", "text": "x"}]})
            })
            .collect();
        json!({"format": "chatd.chat", "version": 1, "chat": {"title": "Long"}, "messages": messages})
    };
    let before = chat_count(&s).await;
    let answer = s
        .post("/api/v2/chats/import", &s.alice, doc(most + 1))
        .await;
    answer.expect_error(400);
    assert_eq!(answer.fields(), ["messages"]);
    assert_eq!(chat_count(&s).await, before, "nothing created");
    let answer = s.post("/api/v2/chats/import", &s.alice, doc(most)).await;
    assert_eq!(answer.expect(201)["status"], "waiting");
}
