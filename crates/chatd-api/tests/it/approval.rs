//! Tool approval over HTTP (API.md "Tool approval (human in the loop)"):
//! `require_approval` on MCP servers (admin routes), and
//! `POST /chats/{chat}/tool-results` answering calls that wait for approval
//! with `approved` (bad input → `400` naming the field, nothing changes).

use chatd_core::MessagePart;
use chatd_store::NewMessage;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_store_require_approval_and_validate_it() {
    let s = Server::start().await;
    let path = "/api/v2/chats/mcp-servers";
    let plain = s
        .post(
            path,
            &s.admin,
            json!({"slug": "calc", "transport": "stdio", "command": "calc"}),
        )
        .await;
    assert_eq!(
        plain.expect(201)["require_approval"],
        "never",
        "the default"
    );
    let listed = s
        .post(
            path,
            &s.admin,
            json!({"slug": "files", "transport": "stdio", "command": "mcp-files",
                   "require_approval": ["delete", "write"]}),
        )
        .await;
    let files = listed.expect(201).clone();
    assert_eq!(files["require_approval"], json!(["delete", "write"]));
    let id = files["id"].as_str().unwrap();
    let item = format!("{path}/{id}");
    // Kept by a patch that does not name it; replaced by one that does.
    let renamed = s
        .patch(&item, &s.admin, json!({"display_name": "Files"}))
        .await;
    assert_eq!(
        renamed.expect(200)["require_approval"],
        json!(["delete", "write"])
    );
    let always = s
        .patch(&item, &s.admin, json!({"require_approval": "always"}))
        .await;
    assert_eq!(always.expect(200)["require_approval"], "always");
    let members_see_it = s.get(path, &s.alice).await;
    let rows = members_see_it.expect(200).as_array().unwrap().clone();
    let row = rows.iter().find(|r| r["id"] == json!(id)).unwrap();
    assert_eq!(row["require_approval"], "always");

    let before = s.dump().await;
    for (body, field) in [
        (
            json!({"slug": "x1", "transport": "stdio", "command": "x", "require_approval": "sometimes"}),
            "require_approval",
        ),
        (
            json!({"slug": "x2", "transport": "stdio", "command": "x", "require_approval": 3}),
            "require_approval",
        ),
        (
            json!({"slug": "x3", "transport": "stdio", "command": "x", "require_approval": [""]}),
            "require_approval[0]",
        ),
        (
            json!({"slug": "x4", "transport": "stdio", "command": "x", "require_approval": ["ok", "y".repeat(129)]}),
            "require_approval[1]",
        ),
    ] {
        let answer = s.post(path, &s.admin, body.clone()).await;
        answer.expect_error(400);
        assert_eq!(
            answer.fields(),
            vec![field.to_owned()],
            "{body}: {}",
            answer.text
        );
    }
    let bad_patch = s
        .patch(&item, &s.admin, json!({"require_approval": "maybe"}))
        .await;
    bad_patch.expect_error(400);
    assert_eq!(bad_patch.fields(), vec!["require_approval".to_owned()]);
    assert_eq!(s.dump().await, before, "rejected writes change nothing");
}

/// A chat in `A0` after a step calling `fs__rm` (no dynamic tool of the
/// chat: it waits for approval, call `a1`) and [`TOOL`] (a client tool,
/// call `c1`).
async fn chat_waiting_on_both(s: &Server) -> uuid::Uuid {
    let id = s.chat_in(&s.alice, chatd_core::ExecutionState::R0).await;
    s.apply(id, |tx| {
        Box::pin(async move {
            let call = |id: &str, tool: &str| MessagePart::ToolCall {
                tool_call_id: id.into(),
                tool_name: tool.into(),
                args: "{\"path\":\"/tmp/x\"}".into(),
            };
            tx.commit_step(
                vec![NewMessage::assistant(vec![
                    call("a1", "fs__rm"),
                    call("c1", TOOL),
                ])],
                false,
            )
            .await?;
            tx.enter_requires_action().await.map(|_| ())
        })
    })
    .await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_results_answer_approval_calls_with_approved_and_name_the_wrong_field() {
    let s = Server::start().await;
    let id = chat_waiting_on_both(&s).await;
    let path = chat_path(id, "/tool-results");
    let before = s.dump().await;
    let output = json!({"tool_call_id": "c1", "output": "red"});
    for (results, field) in [
        // An approval answer on a client-tool call.
        (
            json!([{"tool_call_id": "a1", "approved": true}, {"tool_call_id": "c1", "approved": true}]),
            "results[1].approved",
        ),
        // An output on an approval call.
        (
            json!([{"tool_call_id": "a1", "output": "done"}, output.clone()]),
            "results[0].output",
        ),
        // Both.
        (
            json!([{"tool_call_id": "a1", "approved": true, "output": 1}, output.clone()]),
            "results[0].approved",
        ),
        // Neither.
        (
            json!([{"tool_call_id": "a1"}, output.clone()]),
            "results[0].output",
        ),
        // `is_error` belongs to outputs, `reason` to decisions.
        (
            json!([{"tool_call_id": "a1", "approved": false, "is_error": true}, output.clone()]),
            "results[0].is_error",
        ),
        (
            json!([{"tool_call_id": "a1", "approved": true}, {"tool_call_id": "c1", "output": 1, "reason": "x"}]),
            "results[1].reason",
        ),
        (
            json!([{"tool_call_id": "a1", "approved": false, "reason": "r".repeat(4097)}, output.clone()]),
            "results[0].reason",
        ),
        // Every pending call, approvals included, in one request.
        (json!([output.clone()]), "results"),
    ] {
        let answer = s.post(&path, &s.alice, json!({"results": results})).await;
        answer.expect_error(400);
        assert_eq!(
            answer.fields(),
            vec![field.to_owned()],
            "{results}: {}",
            answer.text
        );
        assert_eq!(s.dump().await, before, "{results}: rejected but changed");
    }

    let answer = s
        .post(
            &path,
            &s.alice,
            json!({"results": [output, {"tool_call_id": "a1", "approved": false, "reason": "not that file"}]}),
        )
        .await;
    assert_eq!(answer.expect(200)["status"], "running");
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let messages = page.expect(200)["messages"].as_array().unwrap().clone();
    let tail: Vec<Value> = messages[messages.len() - 2..]
        .iter()
        .map(|m| m["content"][0].clone())
        .collect();
    assert_eq!(
        tail,
        vec![
            json!({"type": "tool-result", "tool_call_id": "a1", "tool_name": "fs__rm",
                   "result": {"error": "Tool call denied by user", "reason": "not that file"}, "is_error": true}),
            json!({"type": "tool-result", "tool_call_id": "c1", "tool_name": TOOL,
                   "result": "red", "is_error": false}),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_a_tool_approval_part_clients_see() {
    let s = Server::start().await;
    let id = chat_waiting_on_both(&s).await;
    let answer = s
        .post(
            &chat_path(id, "/tool-results"),
            &s.alice,
            json!({"results": [
                {"tool_call_id": "a1", "approved": true, "reason": "fine"},
                {"tool_call_id": "c1", "output": null},
            ]}),
        )
        .await;
    answer.expect(200);
    let page = s.get(&chat_path(id, "/messages"), &s.alice).await;
    let messages = page.expect(200)["messages"].as_array().unwrap().clone();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "tool");
    assert_eq!(
        messages[n - 2]["content"],
        json!([{"type": "tool-approval", "tool_call_id": "a1", "tool_name": "fs__rm",
                "approved": true, "reason": "fine"}])
    );
    // `output: null` is an output (any JSON), not a missing one.
    assert_eq!(messages[n - 1]["content"][0]["result"], Value::Null);
    assert_eq!(messages[n - 1]["content"][0]["tool_call_id"], "c1");
}
