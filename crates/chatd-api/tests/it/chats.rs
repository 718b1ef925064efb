//! Chat collection and resource routes: create, get, list and paging,
//! metadata and archive (`PATCH`), delete.

use chatd_core::ExecutionState::{self, *};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_chat_answers_201_with_the_full_chat_shape_in_r0() {
    let s = Server::start().await;
    let config = s.model_config().await;
    let mcp = s
        .post(
            "/api/v2/chats/mcp-servers",
            &s.admin,
            json!({"slug": "files", "transport": "stdio", "command": "mcp-files"}),
        )
        .await;
    let mcp_id = mcp.expect(201)["id"].clone();
    let answer = s
        .post(
            "/api/v2/chats",
            &s.alice,
            json!({
                "content": [{"type": "text", "text": "hello"}],
                "title": "My chat",
                "system_prompt": "be brief",
                "labels": {"team": "core"},
                "dynamic_tools": [{"name": "pick", "description": "d", "input_schema": {"type": "object"}}],
                "mcp_server_ids": [mcp_id],
                "plan_mode": "plan",
                "reasoning_effort": "high",
            }),
        )
        .await;
    let chat = answer.expect(201);
    let id = uuid(&chat["id"]);
    assert_eq!(uuid(&chat["owner_id"]), s.alice.id);
    assert_eq!(chat["parent_chat_id"], Value::Null);
    assert_eq!(chat["root_chat_id"], Value::Null);
    assert_eq!(chat["title"], "My chat");
    assert_eq!(chat["status"], "running");
    assert_eq!(chat["archived"], false);
    assert_eq!(chat["labels"], json!({"team": "core"}));
    assert_eq!(chat["pin_order"], 0);
    assert_eq!(
        uuid(&chat["last_model_config_id"]),
        config,
        "the default config"
    );
    assert_eq!(chat["last_error"], Value::Null);
    assert_eq!(chat["snapshot_version"], 1);
    assert_eq!(chat["history_version"], 1);
    assert_eq!(chat["queue_version"], 0);
    assert_eq!(chat["retry_state_version"], 0);
    assert_eq!(chat["generation_attempt"], 0);
    assert_eq!(chat["worker_id"], Value::Null);
    assert_eq!(chat["requires_action_deadline_at"], Value::Null);
    assert_eq!(chat["dynamic_tools"][0]["name"], "pick");
    assert_eq!(chat["mcp_server_ids"], json!([mcp_id]));
    assert_eq!(chat["plan_mode"], "plan");
    assert!(chat["created_at"].is_string() && chat["updated_at"].is_string());
    // The system prompt and the user message; the preview is the newest text.
    assert_eq!(chat["message_count"], 2);
    assert_eq!(chat["last_message_preview"], "hello");
    // API.md "Context management": two messages estimated, the default
    // model's window.
    assert_eq!(chat["context"]["limit"], 128000, "the test model's window");
    assert_eq!(chat["context"]["estimated"], true);
    assert!(chat["context"]["tokens"].as_i64().unwrap() > 0);
    assert_eq!(chat["context"]["compactions"], 0);
    assert_eq!(chat["context"]["compacted_through_message_id"], Value::Null);
    assert_eq!(chat["subagents"], false);
    // Issue 33 added active_leaf_id and forked_from (null for a new chat).
    assert_eq!(chat["forked_from"], Value::Null);
    assert!(chat["active_leaf_id"].as_i64().is_some());
    // Issue 37 added workspace (null until a step changed one).
    assert_eq!(chat["workspace"], Value::Null);
    let keys: Vec<&String> = chat.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 30, "{keys:?}");
    assert_eq!(s.state(id).await, R0);

    // The system prompt is the first message, the content the second.
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let page = page.expect(200);
    let messages = page["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[0]["content"],
        json!([{"type": "text", "text": "be brief"}])
    );
    assert_eq!(messages[1]["role"], "user");
    assert_eq!(uuid(&messages[1]["created_by"]), s.alice.id);
    assert_eq!(uuid(&messages[1]["model_config_id"]), config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_chat_defaults_and_child_chats() {
    let s = Server::start().await;
    let root = s.post("/api/v2/chats", &s.alice, text("hello")).await;
    let root = root.expect(201).clone();
    assert_eq!(root["title"], "New Chat");
    assert_eq!(
        root["last_model_config_id"],
        Value::Null,
        "no config exists"
    );
    assert_eq!(root["plan_mode"], Value::Null);
    assert_eq!(root["dynamic_tools"], json!([]));
    let child = s
        .post(
            "/api/experimental/chats",
            &s.alice,
            json!({"content": [{"type": "text", "text": "sub"}], "parent_chat_id": root["id"]}),
        )
        .await;
    let child = child.expect(201);
    assert_eq!(child["parent_chat_id"], root["id"]);
    assert_eq!(child["root_chat_id"], root["id"]);
    // Another member's chat is not a valid parent.
    let other = s
        .post(
            "/api/v2/chats",
            &s.bob,
            json!({"content": [{"type": "text", "text": "x"}], "parent_chat_id": root["id"]}),
        )
        .await;
    other.expect_error(400);
    assert_eq!(other.fields(), vec!["parent_chat_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_chat_rejects_each_invalid_field_with_its_name() {
    let s = Server::start().await;
    let disabled = {
        let id = s.model_config().await;
        s.patch(
            &format!("/api/v2/chats/model-configs/{id}"),
            &s.admin,
            json!({"enabled": false}),
        )
        .await
        .expect(200);
        id
    };
    let tool =
        |name: &str| json!({"name": name, "description": "", "input_schema": {"type": "object"}});
    let many_labels: serde_json::Map<String, Value> =
        (0..51).map(|i| (format!("k{i}"), json!("v"))).collect();
    let many_tools: Vec<Value> = (0..251).map(|i| tool(&format!("t{i}"))).collect();
    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "content"),
        (json!({"content": []}), "content"),
        (
            json!({"content": [{"type": "image", "url": "x"}]}),
            "content[0].type",
        ),
        (json!({"content": [{"type": "text"}]}), "content[0].text"),
        (
            json!({"content": [{"type": "file", "file_id": uuid::Uuid::new_v4()}]}),
            "content[0].file_id",
        ),
        (
            json!({"content": [{"type": "text", "text": "a".repeat(256 * 1024 + 1)}]}),
            "content",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "title": "t".repeat(201)}),
            "title",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "system_prompt": "p".repeat(10_001)}),
            "system_prompt",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "labels": many_labels}),
            "labels",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "labels": {"k".repeat(65): "v"}}),
            "labels",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "labels": {"a:b": "v"}}),
            "labels",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "labels": {"k": "v".repeat(257)}}),
            "labels.k",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "labels": {"k": 1}}),
            "labels.k",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "dynamic_tools": many_tools}),
            "dynamic_tools",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "dynamic_tools": [tool("a"), tool("a")]}),
            "dynamic_tools[1].name",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "dynamic_tools": [tool("")]}),
            "dynamic_tools[0].name",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "dynamic_tools": [{"name": "a", "input_schema": []}]}),
            "dynamic_tools[0].input_schema",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "mcp_server_ids": [uuid::Uuid::new_v4()]}),
            "mcp_server_ids[0]",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "model_config_id": uuid::Uuid::new_v4()}),
            "model_config_id",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "model_config_id": disabled}),
            "model_config_id",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "plan_mode": "act"}),
            "plan_mode",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "parent_chat_id": uuid::Uuid::new_v4()}),
            "parent_chat_id",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}], "bogus": 1}),
            "bogus",
        ),
    ];
    let before = s.dump().await;
    for (body, field) in cases {
        let answer = s.post("/api/v2/chats", &s.alice, body.clone()).await;
        answer.expect_error(400);
        assert_eq!(
            answer.fields(),
            vec![field.to_owned()],
            "{body:.200}: {}",
            answer.text
        );
    }
    assert_eq!(s.dump().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_chat_answers_the_chat_or_404() {
    let s = Server::start().await;
    let id = s.create_chat(&s.alice).await;
    let answer = s.get(&chat_path(id, ""), &s.alice).await;
    assert_eq!(uuid(&answer.expect(200)["id"]), id);
    let missing = s.get(&chat_path(uuid::Uuid::new_v4(), ""), &s.alice).await;
    missing.expect_error(404);
    assert_eq!(missing.message(), "Chat not found.");
    s.get("/api/v2/chats/not-a-uuid", &s.alice)
        .await
        .expect_error(400);
    s.call("GET", &chat_path(id, ""), None, None)
        .await
        .expect_error(401);
    // The experimental mount serves the same chat.
    let exp = s
        .get(&format!("/api/experimental/chats/{id}"), &s.alice)
        .await;
    assert_eq!(exp.expect(200)["id"], answer.body["id"]);
}

async fn set_updated_at(s: &Server, id: uuid::Uuid, seconds_ago: i64) {
    sqlx::query("UPDATE chats SET updated_at = now() - $2 * interval '1 second' WHERE id = $1")
        .bind(id)
        .bind(seconds_ago)
        .execute(s.pool())
        .await
        .unwrap();
}

fn ids(v: &Value) -> Vec<uuid::Uuid> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| uuid(&c["id"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_chats_filters_orders_and_pages() {
    let s = Server::start().await;
    let mut chats = Vec::new();
    for i in 0..5 {
        let answer = s
            .post(
                "/api/v2/chats",
                &s.alice,
                json!({
                    "content": [{"type": "text", "text": "x"}],
                    "title": format!("Chat number {i}"),
                    "labels": {"team": if i % 2 == 0 { "even" } else { "odd" }, "k": "v:w"},
                }),
            )
            .await;
        let id = uuid(&answer.expect(201)["id"]);
        set_updated_at(&s, id, 100 - i).await;
        chats.push(id);
    }
    let bobs = s.create_chat(&s.bob).await;
    // Newest first.
    let all = s.get("/api/v2/chats", &s.alice).await;
    let expected: Vec<_> = chats.iter().rev().copied().collect();
    assert_eq!(ids(all.expect(200)), expected);
    assert!(!ids(&all.body).contains(&bobs));
    // Paging by after_id.
    let page1 = s.get("/api/v2/chats?limit=2", &s.alice).await;
    assert_eq!(ids(page1.expect(200)), expected[..2]);
    let page2 = s
        .get(
            &format!("/api/v2/chats?limit=2&after_id={}", expected[1]),
            &s.alice,
        )
        .await;
    assert_eq!(ids(page2.expect(200)), expected[2..4]);
    let page3 = s
        .get(
            &format!("/api/v2/chats?limit=2&after_id={}", expected[3]),
            &s.alice,
        )
        .await;
    assert_eq!(ids(page3.expect(200)), expected[4..]);
    // Labels (repeatable, split at the first colon) and title search.
    let even = s
        .get("/api/v2/chats?label=team:even&label=k:v:w", &s.alice)
        .await;
    assert_eq!(ids(even.expect(200)), vec![chats[4], chats[2], chats[0]]);
    let none = s
        .get("/api/v2/chats?label=team:even&label=team:odd", &s.alice)
        .await;
    assert!(ids(none.expect(200)).is_empty());
    let q = s.get("/api/v2/chats?q=NUMBER%203", &s.alice).await;
    assert_eq!(ids(q.expect(200)), vec![chats[3]]);
    // Archived filter.
    s.drive(chats[0], W).await;
    s.patch(
        &chat_path(chats[0], ""),
        &s.alice,
        json!({"archived": true}),
    )
    .await
    .expect(200);
    let unarchived = s.get("/api/v2/chats", &s.alice).await;
    assert!(!ids(unarchived.expect(200)).contains(&chats[0]));
    let archived = s.get("/api/v2/chats?archived=true", &s.alice).await;
    assert_eq!(ids(archived.expect(200)), vec![chats[0]]);
    // Admin: own chats by default, anyone's with owner=.
    let admin_own = s.get("/api/v2/chats", &s.admin).await;
    assert!(ids(admin_own.expect(200)).is_empty());
    let admin_bob = s
        .get(&format!("/api/v2/chats?owner={}", s.bob.id), &s.admin)
        .await;
    assert_eq!(ids(admin_bob.expect(200)), vec![bobs]);
    // Members: 403 for someone else's owner=, fine for their own id.
    s.get(&format!("/api/v2/chats?owner={}", s.bob.id), &s.alice)
        .await
        .expect_error(403);
    s.get(&format!("/api/v2/chats?owner={}", s.alice.id), &s.alice)
        .await
        .expect(200);
    // Bad query parameters.
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=x", "limit"),
        ("limit=-1", "limit"),
        ("limit=99999999999999999999", "limit"),
        ("archived=yes", "archived"),
        ("after_id=nope", "after_id"),
        ("label=nocolon", "label"),
        ("owner=1", "owner"),
    ] {
        let answer = s.get(&format!("/api/v2/chats?{query}"), &s.alice).await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), vec![field.to_owned()], "{query}");
    }
    let unknown_cursor = s
        .get(&format!("/api/v2/chats?after_id={bobs}"), &s.alice)
        .await;
    unknown_cursor.expect_error(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_patch_changes_metadata_and_updated_at_without_a_snapshot_bump() {
    let s = Server::start().await;
    let id = s.chat_in(&s.alice, R0).await;
    let before = s.get(&chat_path(id, ""), &s.alice).await.body;
    let answer = s
        .patch(
            &chat_path(id, ""),
            &s.alice,
            json!({"title": "Renamed", "labels": {"a": "b"}, "pin_order": 3, "plan_mode": "plan"}),
        )
        .await;
    let chat = answer.expect(200);
    assert_eq!(chat["title"], "Renamed");
    assert_eq!(chat["labels"], json!({"a": "b"}));
    assert_eq!(chat["pin_order"], 3);
    assert_eq!(chat["plan_mode"], "plan");
    assert_eq!(chat["snapshot_version"], before["snapshot_version"]);
    assert_eq!(chat["status"], "running");
    assert!(chat["updated_at"].as_str().unwrap() > before["updated_at"].as_str().unwrap());
    // null leaves plan mode; absent fields are kept.
    let cleared = s
        .patch(&chat_path(id, ""), &s.alice, json!({"plan_mode": null}))
        .await;
    assert_eq!(cleared.expect(200)["plan_mode"], Value::Null);
    assert_eq!(cleared.body["title"], "Renamed");
    // Invalid values.
    for (body, field) in [
        (json!({"title": ""}), "title"),
        (json!({"title": "x".repeat(201)}), "title"),
        (json!({"pin_order": -1}), "pin_order"),
        (json!({"pin_order": 3_000_000_000i64}), "pin_order"),
        (json!({"plan_mode": "x"}), "plan_mode"),
        (json!({"archived": "yes"}), "archived"),
        (json!({"status": "waiting"}), "status"),
    ] {
        let answer = s.patch(&chat_path(id, ""), &s.alice, body.clone()).await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), vec![field.to_owned()], "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_and_unarchive_follow_the_spec_table() {
    let s = Server::start().await;
    // Archivable states land in X*, and back.
    for (from, to) in [(W, XW), (E0, XE0), (E1, XE1)] {
        let id = s.chat_in(&s.alice, from).await;
        let answer = s
            .patch(&chat_path(id, ""), &s.alice, json!({"archived": true}))
            .await;
        assert_eq!(answer.expect(200)["archived"], true);
        assert_eq!(s.state(id).await, to, "archive from {from}");
        // Title, labels and pin order may change on an archived chat.
        s.patch(
            &chat_path(id, ""),
            &s.alice,
            json!({"title": "Old", "pin_order": 1}),
        )
        .await
        .expect(200);
        // Plan mode may not; archiving again is 409; other routes are 400.
        s.patch(&chat_path(id, ""), &s.alice, json!({"plan_mode": "plan"}))
            .await
            .expect_error(400);
        let again = s
            .patch(&chat_path(id, ""), &s.alice, json!({"archived": true}))
            .await;
        again.expect_error(409);
        let back = s
            .patch(&chat_path(id, ""), &s.alice, json!({"archived": false}))
            .await;
        assert_eq!(back.expect(200)["archived"], false);
        assert_eq!(s.state(id).await, from, "unarchive to {from}");
    }
    // Busy and invalid chats cannot be archived; nothing changes.
    for from in [R0, R1, I0, I1, A0, A1, ExecutionState::Invalid] {
        let id = s.chat_in(&s.alice, from).await;
        let before = s.dump().await;
        let answer = s
            .patch(
                &chat_path(id, ""),
                &s.alice,
                json!({"archived": true, "title": "t"}),
            )
            .await;
        answer.expect_error(409);
        assert_eq!(s.dump().await, before, "archive from {from}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archiving_a_root_archives_its_family_and_children_follow_the_rules() {
    let s = Server::start().await;
    let root = s.chat_in(&s.alice, W).await;
    let child = child_of(&s, root).await;
    // A busy child blocks archiving the family.
    s.patch(&chat_path(root, ""), &s.alice, json!({"archived": true}))
        .await
        .expect_error(409);
    assert_eq!(s.state(root).await, W);
    s.drive(child, W).await;
    // Archiving a child directly is 400.
    let direct = s
        .patch(&chat_path(child, ""), &s.alice, json!({"archived": true}))
        .await;
    direct.expect_error(400);
    s.patch(&chat_path(root, ""), &s.alice, json!({"archived": true}))
        .await
        .expect(200);
    assert_eq!(s.state(root).await, XW);
    assert_eq!(s.state(child).await, XW);
    // Unarchiving a child whose root is archived is 409.
    let child_back = s
        .patch(&chat_path(child, ""), &s.alice, json!({"archived": false}))
        .await;
    child_back.expect_error(409);
    // Unarchiving the root unarchives the family.
    s.patch(&chat_path(root, ""), &s.alice, json!({"archived": false}))
        .await
        .expect(200);
    assert_eq!(s.state(root).await, W);
    assert_eq!(s.state(child).await, W);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_chat_is_allowed_only_when_idle_and_deletes_the_family() {
    let s = Server::start().await;
    for state in ROW_STATES {
        let id = s.chat_in(&s.alice, state).await;
        let answer = s.delete(&chat_path(id, ""), &s.alice).await;
        let deletable = matches!(state, W | E0 | E1 | XW | XE0 | XE1);
        if deletable {
            answer.expect(204);
            assert_eq!(answer.text, "");
            assert_eq!(s.state(id).await, ExecutionState::N, "delete from {state}");
            assert!(s.message_ids(id).await.is_empty());
        } else {
            answer.expect_error(409);
            assert_eq!(s.state(id).await, state, "delete from {state}");
        }
    }
    // A root takes its family with it.
    let root = s.chat_in(&s.alice, W).await;
    let child = child_of(&s, root).await;
    s.delete(&chat_path(root, ""), &s.alice)
        .await
        .expect_error(409);
    s.drive(child, E0).await;
    s.delete(&chat_path(root, ""), &s.alice).await.expect(204);
    assert_eq!(s.state(child).await, ExecutionState::N);
    s.delete(&chat_path(root, ""), &s.alice)
        .await
        .expect_error(404);
}

/// Creates a child chat of alice's `root` over HTTP; returns its id.
async fn child_of(s: &Server, root: uuid::Uuid) -> uuid::Uuid {
    let child = s
        .post(
            "/api/v2/chats",
            &s.alice,
            json!({"content": [{"type": "text", "text": "sub"}], "parent_chat_id": root}),
        )
        .await;
    uuid(&child.expect(201)["id"])
}

/// API.md "Sub-agents and plan mode": `subagents` is stored and shown,
/// a non-boolean is `400` naming it (nothing created); `GET /chats` hides
/// children, `?parent_id=` lists them, a bad uuid is `400` naming
/// `parent_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagents_flag_is_stored_and_children_are_listed_by_parent_id_only() {
    let s = Server::start().await;
    let root = s
        .post(
            "/api/v2/chats",
            &s.alice,
            json!({"content": [{"type": "text", "text": "lead"}], "subagents": true}),
        )
        .await;
    let root = root.expect(201).clone();
    assert_eq!(root["subagents"], true);
    let plain = s.post("/api/v2/chats", &s.alice, text("plain")).await;
    assert_eq!(plain.expect(201)["subagents"], false);
    for bad in [json!("yes"), json!(1), json!({})] {
        let refused = s
            .post(
                "/api/v2/chats",
                &s.alice,
                json!({"content": [{"type": "text", "text": "x"}], "subagents": bad}),
            )
            .await;
        refused.expect_error(400);
        assert_eq!(refused.fields(), vec!["subagents"], "{bad}");
    }
    let child = s
        .post(
            "/api/v2/chats",
            &s.alice,
            json!({"content": [{"type": "text", "text": "sub"}], "parent_chat_id": root["id"]}),
        )
        .await;
    let child = child.expect(201).clone();
    let ids = |v: &Value| -> Vec<Value> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].clone())
            .collect()
    };
    // Two roots, no child: nothing was created by the refused requests.
    let listed = s.get("/api/v2/chats", &s.alice).await;
    let listed = ids(listed.expect(200));
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(!listed.contains(&child["id"]));
    let kids = s
        .get(
            &format!("/api/v2/chats?parent_id={}", root["id"].as_str().unwrap()),
            &s.alice,
        )
        .await;
    assert_eq!(ids(kids.expect(200)), vec![child["id"].clone()]);
    assert_eq!(kids.expect(200)[0]["parent_chat_id"], root["id"]);
    // Another member sees none of alice's children.
    let theirs = s
        .get(
            &format!("/api/v2/chats?parent_id={}", root["id"].as_str().unwrap()),
            &s.bob,
        )
        .await;
    assert_eq!(theirs.expect(200), &json!([]));
    let bad = s.get("/api/v2/chats?parent_id=nope", &s.alice).await;
    bad.expect_error(400);
    assert_eq!(bad.fields(), vec!["parent_id"]);
}

/// Free-form JSON (a dynamic tool's `input_schema`) holding a number at
/// the edge of `f64` is stored and read back unchanged: PostgreSQL's jsonb
/// writes `1.7976931348623155e308` back as a 309-digit integer, which
/// serde_json's default float parsing refused ("number out of range"),
/// so every read of the chat answered `500` (found by schemathesis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_at_the_edge_of_f64_in_a_json_value_round_trips() {
    let s = Server::start().await;
    let schema = json!({"type": "object", "maximum": 1.797_693_134_862_315_5e308_f64, "minimum": -5e-324_f64});
    let created = s
        .post(
            "/api/v2/chats",
            &s.alice,
            json!({
                "content": [{"type": "text", "text": "hello"}],
                "dynamic_tools": [{"name": "pick", "description": "d", "input_schema": schema}],
            }),
        )
        .await;
    let id = uuid(&created.expect(201)["id"]);
    let chat = s.get(&format!("/api/v2/chats/{id}"), &s.alice).await;
    let chat = chat.expect(200);
    assert_eq!(chat["dynamic_tools"][0]["input_schema"], schema);
    let list = s.get("/api/v2/chats", &s.alice).await;
    assert_eq!(ids(list.expect(200)), vec![id]);
}
