//! The bad-input sweep: for every route with a body or path parameters,
//! malformed and hostile inputs (wrong types, huge strings, NUL characters,
//! deep nesting, invalid UUIDs and ids, negative and overflowing integers,
//! unknown enum values and fields, oversized bodies) answer `400` (`413` for
//! the body limit) in the documented shape and leave every table unchanged.

use chatd_core::ExecutionState::*;
use serde_json::{Value, json};

use crate::common::*;

/// Values that are invalid where `valid` is expected. `null` is left out:
/// it means "absent" for optional fields.
fn wrong_values(valid: &Value) -> Vec<Value> {
    let deep_array = (0..200).fold(json!(1), |acc, _| json!([acc]));
    let deep_object = (0..200).fold(json!(1), |acc, _| json!({"a": acc}));
    match valid {
        Value::String(_) => vec![
            json!(123),
            json!(true),
            json!([]),
            json!({}),
            json!("x".repeat(300_000)),
            json!("bad\u{0}nul"),
        ],
        Value::Number(n) if n.is_f64() => vec![json!("1"), json!(-1.0), json!(1e300), json!(true)],
        Value::Number(_) => vec![
            json!("1"),
            json!(1.5),
            json!(-1),
            json!(u64::MAX),
            json!(-9_223_372_036_854_775_807i64),
            json!(1e30),
            json!(true),
            json!([]),
        ],
        Value::Bool(_) => vec![json!("true"), json!(1), json!([])],
        Value::Array(_) => vec![json!("x"), json!(1), json!({}), deep_array],
        Value::Object(_) => vec![json!("x"), json!(1), json!([]), deep_object],
        Value::Null => vec![],
    }
}

/// Every mutation of `valid`: each leaf and container replaced by each wrong
/// value, except under the paths in `any` (fields that accept any JSON).
fn mutations(valid: &Value, any: &[&str]) -> Vec<(String, Value)> {
    fn walk(
        root: &Value,
        at: &Value,
        path: Vec<PathSeg>,
        any: &[&str],
        out: &mut Vec<(String, Value)>,
    ) {
        let label = label(&path);
        if any.contains(&label.as_str()) {
            return;
        }
        if !path.is_empty() {
            for wrong in wrong_values(at) {
                out.push((
                    format!("{label} = {:.60}", wrong.to_string()),
                    replace(root, &path, wrong),
                ));
            }
        }
        match at {
            Value::Object(map) => {
                for (k, v) in map {
                    let mut p = path.clone();
                    p.push(PathSeg::Key(k.clone()));
                    walk(root, v, p, any, out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    let mut p = path.clone();
                    p.push(PathSeg::Index(i));
                    walk(root, v, p, any, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(valid, valid, Vec::new(), any, &mut out);
    if let Value::Object(map) = valid {
        let mut extra = map.clone();
        extra.insert("unexpected_field".into(), json!(1));
        out.push(("unknown field".into(), Value::Object(extra)));
        for key in map.keys() {
            if let Value::String(s) = &map[key] {
                let _ = s;
            }
        }
    }
    for top in [json!([]), json!("x"), json!(1), json!(null), json!(true)] {
        out.push((format!("body = {top}"), top));
    }
    out
}

#[derive(Clone)]
enum PathSeg {
    Key(String),
    Index(usize),
}

fn label(path: &[PathSeg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            PathSeg::Key(k) if s.is_empty() => s.push_str(k),
            PathSeg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            PathSeg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn replace(root: &Value, path: &[PathSeg], value: Value) -> Value {
    let mut out = root.clone();
    let mut cur = &mut out;
    for seg in path {
        cur = match seg {
            PathSeg::Key(k) => cur.get_mut(k).expect("key"),
            PathSeg::Index(i) => cur.get_mut(*i).expect("index"),
        };
    }
    *cur = value;
    out
}

/// Raw bodies that are not acceptable JSON for any route.
fn raw_bodies() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("empty", b"".to_vec()),
        ("truncated", b"{\"content\": [".to_vec()),
        ("not json", b"hello".to_vec()),
        ("trailing garbage", b"{} x".to_vec()),
        ("invalid utf-8", b"{\"title\": \"\xff\xfe\"}".to_vec()),
        ("lone surrogate", b"{\"title\": \"\\ud800\"}".to_vec()),
        (
            "deep nesting",
            [vec![b'['; 100_000], vec![b']'; 100_000]].concat(),
        ),
        ("number overflow", b"{\"pin_order\": 1e999}".to_vec()),
    ]
}

const BAD_UUIDS: [&str; 8] = [
    "not-a-uuid",
    "0",
    "-1",
    "12345678-1234-1234-1234-12345678901",
    "{12345678-1234-1234-1234-123456789012}",
    "urn:uuid:12345678-1234-1234-1234-123456789012",
    "%00",
    "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz",
];

const BAD_IDS: [&str; 10] = [
    "0",
    "-1",
    "1.5",
    "abc",
    "1e3",
    "+1",
    "99999999999999999999",
    "9223372036854775808",
    "%20",
    "0x10",
];

struct Route {
    method: &'static str,
    path: String,
    body: Option<Value>,
    any: Vec<&'static str>,
    user: User,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_answer_4xx_and_change_nothing() {
    // Over a thousand requests of one user in a few seconds: more than the
    // default request rate (API.md "Request rate"), which is not under test.
    let s = Server::start_with(chatd_api::ApiOptions {
        limits: chatd_core::limits::LimitDefaults {
            requests_per_minute: i32::MAX,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let config = s.model_config().await;
    let chat = s.chat_in(&s.alice, R1).await;
    let a0 = s.chat_in(&s.alice, A0).await;
    let message = s.message_ids(chat).await[0];
    let queued = s.queue_ids(chat).await[0];
    let provider: uuid::Uuid = sqlx::query_scalar("SELECT id FROM chat_providers LIMIT 1")
        .fetch_one(s.pool())
        .await
        .unwrap();
    let mcp = s
        .post(
            "/api/v2/chats/mcp-servers",
            &s.admin,
            json!({"slug": "m", "transport": "stdio", "command": "x"}),
        )
        .await;
    let mcp = mcp.expect(201)["id"].as_str().unwrap().to_owned();
    let content = json!([{"type": "text", "text": "hello"}]);
    let alice = s.alice.clone();
    let admin = s.admin.clone();
    let routes = vec![
        Route {
            method: "POST",
            path: "/api/v2/chats".into(),
            body: Some(json!({
                "content": content, "title": "t", "model_config_id": config, "reasoning_effort": "low",
                "system_prompt": "p", "labels": {"k": "v"},
                "dynamic_tools": [{"name": "n", "description": "d", "input_schema": {"type": "object"}}],
                "mcp_server_ids": [mcp], "plan_mode": "plan", "parent_chat_id": chat,
            })),
            any: vec!["dynamic_tools[0].input_schema.type"],
            user: alice.clone(),
        },
        Route {
            method: "PATCH",
            path: chat_path(chat, ""),
            body: Some(
                json!({"title": "t", "archived": false, "labels": {"k": "v"}, "pin_order": 1, "plan_mode": "plan"}),
            ),
            any: vec![],
            user: alice.clone(),
        },
        Route {
            method: "POST",
            path: chat_path(chat, "/messages"),
            body: Some(json!({
                "content": content, "busy_behavior": "queue", "model_config_id": config,
                "reasoning_effort": "high", "client_message_id": "abc",
            })),
            any: vec![],
            user: alice.clone(),
        },
        Route {
            method: "PATCH",
            path: chat_path(chat, &format!("/messages/{message}")),
            body: Some(
                json!({"content": content, "model_config_id": config, "reasoning_effort": "max"}),
            ),
            any: vec![],
            user: alice.clone(),
        },
        Route {
            method: "PATCH",
            path: chat_path(chat, &format!("/queue/{queued}")),
            body: Some(json!({"content": content, "model_config_id": config, "steer": true})),
            any: vec![],
            user: alice.clone(),
        },
        Route {
            method: "POST",
            path: chat_path(chat, &format!("/queue/{queued}/move")),
            body: Some(json!({"position": 1})),
            any: vec![],
            user: alice.clone(),
        },
        Route {
            method: "POST",
            path: chat_path(a0, "/tool-results"),
            body: Some(
                json!({"results": [{"tool_call_id": PENDING_CALL, "output": {"x": 1}, "is_error": false}]}),
            ),
            any: vec!["results[0].output", "results[0].output.x"],
            user: alice.clone(),
        },
        Route {
            method: "POST",
            path: "/api/v2/users".into(),
            body: Some(json!({"username": "newbie", "role": "member"})),
            any: vec![],
            user: admin.clone(),
        },
        Route {
            method: "POST",
            path: "/api/v2/users/me/tokens".into(),
            body: Some(json!({"name": "n", "lifetime_seconds": 60})),
            any: vec![],
            user: alice.clone(),
        },
        Route {
            method: "POST",
            path: "/api/v2/chats/providers".into(),
            body: Some(
                json!({"provider": "openai", "display_name": "d", "base_url": "https://x.example/v1", "api_key": "k", "enabled": true}),
            ),
            any: vec![],
            user: admin.clone(),
        },
        Route {
            method: "PATCH",
            path: format!("/api/v2/chats/providers/{provider}"),
            body: Some(
                json!({"provider": "openai", "display_name": "d", "base_url": "https://x.example/v1", "api_key": "k", "enabled": true}),
            ),
            any: vec![],
            user: admin.clone(),
        },
        Route {
            method: "POST",
            path: "/api/v2/chats/model-configs".into(),
            body: Some(json!({
                "provider_id": provider, "model": "m", "display_name": "d", "context_limit": 1000,
                "compression_threshold": 50, "is_default": false, "enabled": true,
                "options": {"reasoning_effort": {"default": "low", "max": "high"}, "max_output_tokens": 10,
                            "temperature": 0.5, "input_price_micros_per_mtok": 1, "output_price_micros_per_mtok": 1},
            })),
            any: vec![],
            user: admin.clone(),
        },
        Route {
            method: "PATCH",
            path: format!("/api/v2/chats/model-configs/{config}"),
            body: Some(json!({
                "provider_id": provider, "model": "m", "display_name": "d", "context_limit": 1000,
                "compression_threshold": 50, "is_default": true, "enabled": true,
                "options": {"max_output_tokens": 10, "temperature": 0.5},
            })),
            any: vec![],
            user: admin.clone(),
        },
        Route {
            method: "POST",
            path: "/api/v2/chats/mcp-servers".into(),
            body: Some(json!({
                "slug": "s", "display_name": "d", "transport": "stdio", "command": "c",
                "args": ["a"], "env": {"K": "V"}, "url": "https://x.example/mcp", "headers": {"H": "V"}, "enabled": true,
            })),
            any: vec![],
            user: admin.clone(),
        },
        Route {
            method: "PATCH",
            path: format!("/api/v2/chats/mcp-servers/{mcp}"),
            body: Some(json!({
                "slug": "s", "display_name": "d", "transport": "stdio", "command": "c",
                "args": ["a"], "env": {"K": "V"}, "url": "https://x.example/mcp", "headers": {"H": "V"}, "enabled": true,
            })),
            any: vec![],
            user: admin.clone(),
        },
    ];

    let before = s.dump().await;
    let mut checked = 0usize;
    for route in &routes {
        let valid = route.body.as_ref().expect("body routes");
        for (what, body) in mutations(valid, &route.any) {
            let answer = s
                .call(
                    route.method,
                    &route.path,
                    Some(&route.user.token),
                    Some(body),
                )
                .await;
            assert_eq!(
                answer.status, 400,
                "{} {} with {what}: {} {:.300}",
                route.method, route.path, answer.status, answer.text
            );
            assert_error_shape(&answer.body, &answer.text);
            assert!(
                !answer.fields().is_empty(),
                "{} {} with {what}: no field named",
                route.method,
                route.path
            );
            checked += 1;
        }
        for (what, raw) in raw_bodies() {
            let answer = s
                .raw(
                    route.method,
                    &route.path,
                    Some(&route.user.token),
                    Some(raw),
                )
                .await;
            assert_eq!(
                answer.status, 400,
                "{} {} with {what}: {}",
                route.method, route.path, answer.text
            );
            assert_error_shape(&answer.body, &answer.text);
            assert!(!answer.fields().is_empty());
            checked += 1;
        }
        // Over the body limit: 413, even when the JSON would be fine.
        let mut huge = serde_json::to_vec(valid).unwrap();
        huge.pop();
        huge.extend_from_slice(format!(r#","pad":"{}"}}"#, "x".repeat(1024 * 1024)).as_bytes());
        let answer = s
            .raw(
                route.method,
                &route.path,
                Some(&route.user.token),
                Some(huge),
            )
            .await;
        answer.expect_error(413);
        checked += 1;
    }

    // Malformed path parameters on every route that has them: 400 naming the
    // parameter, before anything else is looked at.
    let chat_suffixes: Vec<(&str, String)> = vec![
        ("GET", String::new()),
        ("PATCH", String::new()),
        ("DELETE", String::new()),
        ("GET", "/messages".into()),
        ("POST", "/messages".into()),
        ("PATCH", format!("/messages/{message}")),
        ("DELETE", format!("/queue/{queued}")),
        ("POST", format!("/queue/{queued}/promote")),
        ("PATCH", format!("/queue/{queued}")),
        ("POST", format!("/queue/{queued}/move")),
        ("POST", "/interrupt".into()),
        ("POST", "/tool-results".into()),
        ("POST", "/reconcile-invalid".into()),
        ("POST", "/compact".into()),
    ];
    for base in ["/api/v2/chats", "/api/experimental/chats"] {
        for bad in BAD_UUIDS {
            for (method, suffix) in &chat_suffixes {
                let path = format!("{base}/{bad}{suffix}");
                let answer = s
                    .call(method, &path, Some(&alice.token), Some(text("x")))
                    .await;
                answer.expect_error(400);
                assert_eq!(answer.fields(), vec!["chat"], "{method} {path}");
                checked += 1;
            }
        }
    }
    for bad in BAD_IDS {
        for (method, path, field) in [
            (
                "PATCH",
                chat_path(chat, &format!("/messages/{bad}")),
                "message",
            ),
            (
                "DELETE",
                chat_path(chat, &format!("/queue/{bad}")),
                "queued",
            ),
            (
                "POST",
                chat_path(chat, &format!("/queue/{bad}/promote")),
                "queued",
            ),
            ("PATCH", chat_path(chat, &format!("/queue/{bad}")), "queued"),
            (
                "POST",
                chat_path(chat, &format!("/queue/{bad}/move")),
                "queued",
            ),
        ] {
            let answer = s
                .call(method, &path, Some(&alice.token), Some(text("x")))
                .await;
            answer.expect_error(400);
            assert_eq!(answer.fields(), vec![field], "{method} {path}");
            checked += 1;
        }
    }
    for bad in BAD_UUIDS {
        for (method, path) in [
            ("PATCH", format!("/api/v2/chats/providers/{bad}")),
            ("DELETE", format!("/api/v2/chats/providers/{bad}")),
            ("PATCH", format!("/api/v2/chats/model-configs/{bad}")),
            ("DELETE", format!("/api/v2/chats/model-configs/{bad}")),
            ("PATCH", format!("/api/v2/chats/mcp-servers/{bad}")),
            ("DELETE", format!("/api/v2/chats/mcp-servers/{bad}")),
            ("POST", format!("/api/v2/users/{bad}/tokens")),
        ] {
            let answer = s
                .call(method, &path, Some(&admin.token), Some(json!({})))
                .await;
            answer.expect_error(400);
            checked += 1;
        }
    }
    // Malformed query parameters of the two listings.
    for query in [
        "limit=0",
        "limit=201",
        "limit=-1",
        "limit=abc",
        "limit=99999999999999999999",
        "before_id=0",
        "before_id=-5",
        "before_id=x",
        "after_id=1.5",
        "after_id=99999999999999999999",
        "before_id=5&after_id=1",
        "limit=%00",
    ] {
        let answer = s
            .get(&chat_path(chat, &format!("/messages?{query}")), &alice)
            .await;
        answer.expect_error(400);
        checked += 1;
    }
    for query in [
        "limit=0",
        "limit=1000",
        "after_id=x",
        "archived=maybe",
        "owner=me",
        "label=x",
        "q=%00",
    ] {
        let answer = s.get(&format!("/api/v2/chats?{query}"), &alice).await;
        answer.expect_error(400);
        checked += 1;
    }
    assert!(checked > 1000, "only {checked} cases");
    assert_eq!(
        s.dump().await,
        before,
        "a rejected request changed the database"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_of_checks_follows_api_md() {
    let s = Server::start().await;
    let bobs = s.chat_in(&s.bob, R0).await;
    let archived = s.chat_in(&s.alice, XE1).await;
    let alices_r0 = s.chat_in(&s.alice, R0).await;
    let huge = vec![b'x'; 1024 * 1024 + 1];
    // 401 before 400 (malformed path).
    s.call("POST", "/api/v2/chats/nope/messages", None, Some(text("x")))
        .await
        .expect_error(401);
    // 400 (path) before 404 (visibility).
    s.call(
        "PATCH",
        &chat_path(bobs, "/messages/0"),
        Some(&s.alice.token),
        Some(text("x")),
    )
    .await
    .expect_error(400);
    // 404 (visibility) before 413.
    s.raw(
        "POST",
        &chat_path(bobs, "/messages"),
        Some(&s.alice.token),
        Some(huge.clone()),
    )
    .await
    .expect_error(404);
    // 413 before 400 (body) and 403 (owner-only).
    s.raw(
        "POST",
        &chat_path(bobs, "/messages"),
        Some(&s.admin.token),
        Some(huge),
    )
    .await
    .expect_error(413);
    // 400 (body) before 403 (owner-only).
    s.call(
        "POST",
        &chat_path(bobs, "/messages"),
        Some(&s.admin.token),
        Some(json!({"content": 1})),
    )
    .await
    .expect_error(400);
    // 403 (owner-only) before 400 (archived).
    let other_archived = s.chat_in(&s.bob, XW).await;
    s.post(&chat_path(other_archived, "/messages"), &s.admin, text("x"))
        .await
        .expect_error(403);
    // 400 (archived) before 404 (queued message) and 409 (state).
    let archived_answer = s
        .delete(&chat_path(archived, "/queue/999999"), &s.alice)
        .await;
    archived_answer.expect_error(400);
    assert_eq!(archived_answer.message(), "Chat is archived.");
    // 404 (message) before 409 (state): an invalid chat with an unknown message.
    let invalid = s.chat_in(&s.alice, Invalid).await;
    s.patch(&chat_path(invalid, "/messages/999999"), &s.alice, text("x"))
        .await
        .expect_error(404);
    // 409 (state) last.
    s.patch(
        &chat_path(
            invalid,
            &format!("/messages/{}", s.message_ids(invalid).await[0]),
        ),
        &s.alice,
        text("x"),
    )
    .await
    .expect_error(409);
    let conflict = s
        .post(&chat_path(invalid, "/messages"), &s.alice, text("x"))
        .await;
    conflict.expect_error(409);
    assert_eq!(conflict.message(), "Chat is in an invalid state.");
    s.post_empty(&chat_path(alices_r0, "/compact"), &s.alice)
        .await
        .expect_error(409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_methods_answer_in_the_error_shape() {
    let s = Server::start().await;
    s.get("/api/v2/nothing", &s.alice).await.expect_error(404);
    s.call(
        "PUT",
        "/api/v2/chats",
        Some(&s.alice.token),
        Some(json!({})),
    )
    .await
    .expect_error(405);
}

/// A request the server answers before reading its body (a `404` for a chat
/// the caller cannot see, a `413` over the limit, a `401`) still gets its
/// answer: the server reads and discards the rest of the body before it
/// answers, so the client, still sending, never sees the connection reset
/// instead of the status. Races the early answer against the upload, many
/// times, over fresh connections and a kept-alive one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_to_a_large_upload_reaches_the_client() {
    let s = Server::start().await;
    let bobs = s.chat_in(&s.bob, R0).await;
    let path = chat_path(bobs, "/messages");
    let over_limit = vec![b'x'; 1024 * 1024 + 1];
    let four_mib = vec![b' '; 4 * 1024 * 1024];
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let unknown = "/api/v2/nothing".to_owned();
    let chats = "/api/v2/chats".to_owned();
    for round in 0..25 {
        for (method, path, token, body, status) in [
            ("POST", &path, Some(&s.alice.token), &over_limit, 404),
            ("POST", &path, Some(&s.admin.token), &over_limit, 413),
            ("POST", &path, Some(&s.admin.token), &four_mib, 413),
            ("POST", &path, None, &four_mib, 401),
            ("POST", &unknown, Some(&s.alice.token), &four_mib, 404),
            ("PUT", &chats, Some(&s.alice.token), &four_mib, 405),
        ] {
            for client in [&fresh, &s.http] {
                let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
                let mut req = client
                    .request(method, format!("{}{path}", s.base))
                    .header("content-type", "application/json")
                    .body(body.clone());
                if let Some(token) = token {
                    req = req.bearer_auth(token);
                }
                let resp = req.send().await.unwrap_or_else(|e| {
                    panic!("round {round}: {path}: expected {status}, the request failed: {e:?}")
                });
                assert_eq!(resp.status().as_u16(), status, "round {round}: {path}");
                let body: Value = resp.json().await.expect("error body");
                assert!(body["message"].is_string(), "{body}");
            }
        }
    }
    // The kept-alive connection still serves a normal request afterwards.
    s.get(&chat_path(bobs, ""), &s.bob).await.expect(200);

    // A client that waits for `100 Continue` before sending its body gets
    // the early answer without a `100 Continue`: the server does not ask
    // for a body it is not going to use, whether the answer comes before
    // the body would be read (401) or from its declared length (413).
    for (token, status) in [(None, 401), (Some(&s.admin.token), 413)] {
        let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
        let answer = raw_exchange(
            &s,
            &format!(
                "POST {path} HTTP/1.1\r\nhost: chatd\r\n{auth}content-type: application/json\r\n\
                 content-length: 4194304\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n"
            ),
            &[],
        )
        .await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{answer}"
        );
        assert!(!answer.contains("100 Continue"), "{answer}");
    }

    // A chunked upload (no declared length) over the limit is refused
    // while it is read, and the client still gets the 413.
    let chunk = vec![b' '; 64 * 1024];
    let mut chunked = Vec::new();
    for _ in 0..24 {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(&chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let answer = raw_exchange(
        &s,
        &format!(
            "POST {path} HTTP/1.1\r\nhost: chatd\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ntransfer-encoding: chunked\r\n\
             connection: close\r\n\r\n",
            s.admin.token
        ),
        &chunked,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
}

/// Writes `head` and `body` on a new connection and reads the whole answer
/// (the request asks for `connection: close`). The write side stays open
/// until the answer is in, as a browser's would: hyper closes at once on a
/// half-closed connection. A reset after the answer arrived is not an error
/// here: the answer is what is checked.
async fn raw_exchange(s: &Server, head: &str, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let conn = tokio::net::TcpStream::connect(s.base.trim_start_matches("http://"))
        .await
        .expect("connect");
    let (mut read, mut write) = conn.into_split();
    let mut request = head.as_bytes().to_vec();
    request.extend_from_slice(body);
    let writer = tokio::spawn(async move {
        let _ = write.write_all(&request).await;
        write
    });
    let mut answer = Vec::new();
    let _ = read.read_to_end(&mut answer).await;
    drop(writer.await);
    String::from_utf8_lossy(&answer).into_owned()
}

/// A JSON route answers `415` in the error shape to a body that is not
/// declared `application/json` (another `Content-Type`, or none), and
/// changes nothing; it comes after the `404` of a chat the caller cannot
/// see. `application/json` with parameters is JSON, and a request without
/// a body and without `Content-Type` is the empty body, which is not JSON
/// (`400` naming `body`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_not_declared_json_answers_415_and_changes_nothing() {
    let s = Server::start().await;
    let alices = s.chat_in(&s.alice, R0).await;
    let bobs = s.chat_in(&s.bob, R0).await;
    let send = |method: &str, path: String, content_type: Option<&str>| {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = s
            .http
            .request(method, format!("{}{path}", s.base))
            .bearer_auth(&s.alice.token)
            .body(serde_json::to_vec(&text("hello")).expect("json"));
        if let Some(content_type) = content_type {
            req = req.header("content-type", content_type);
        }
        async move {
            let resp = req.send().await.expect("send");
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let before = s.dump().await;
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("application/jsonl"),
        None,
    ] {
        for (method, path) in [
            ("POST", "/api/v2/chats".to_owned()),
            ("PATCH", chat_path(alices, "")),
            ("POST", chat_path(alices, "/messages")),
            ("POST", "/api/v2/users/me/tokens".to_owned()),
        ] {
            let (status, body) = send(method, path.clone(), content_type).await;
            assert_eq!(status, 415, "{method} {path} as {content_type:?}: {body}");
            assert_error_shape(&body, &body.to_string());
            assert_eq!(body["message"], "Unsupported media type.");
        }
        let (status, _) = send("POST", chat_path(bobs, "/messages"), content_type).await;
        assert_eq!(status, 404, "the chat's visibility is checked first");
    }
    assert_eq!(s.dump().await, before, "a 415 changes nothing");

    let (status, body) = send(
        "POST",
        "/api/v2/chats".to_owned(),
        Some("application/json; charset=utf-8"),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let empty = s
        .call(
            "POST",
            "/api/v2/users/me/tokens",
            Some(&s.alice.token),
            None,
        )
        .await;
    empty.expect_error(400);
    assert_eq!(empty.fields(), vec!["body"]);
}
