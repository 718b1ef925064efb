//! API.md "Workspaces and provider-hosted tools", over HTTP with a real
//! worker and the fake LLM: `POST /chats` takes `workspace: true` (a
//! non-boolean is `400` naming `workspace`); `Chat.workspace` is `null`
//! until the first committed change and `{bytes, files, updated_at}` after;
//! `GET /chats/{chat}/workspace` lists the entries (`[]` before),
//! `/workspace/file?path=` answers a file's bytes with its `Content-Type`
//! (`400` naming `path` for a bad path, `404` for no file or a directory),
//! `/workspace/archive` a `.tar.gz` of the files; a user who may not read
//! the chat gets `404` on all three, a read-only share reads them, and a
//! fork copies the workspace into rows of its own.
//!
//! The turn that runs `shell` needs bubblewrap (`bwrap`); without it the
//! test says so and skips (scripts/test.sh installs it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chatd_pubsub::Pubsub;
use chatd_testkit::fake_llm::Script;
use chatd_worker::{
    DefaultProviderFactory, Worker, WorkerDeps, WorkspaceApproval, WorkspaceConfig,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::{User, make_user};
use crate::stream_support::*;

/// Whether bubblewrap runs here; prints why the test skips when not.
async fn bwrap_or_skip(test: &str) -> bool {
    let ok = tokio::process::Command::new("bwrap")
        .arg("--version")
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIP {test}: bubblewrap (bwrap) is not installed");
    }
    ok
}

/// A [`StreamEnv`] whose worker runs workspace tools without approval, in
/// a temporary `--workspace-dir` (returned: it must outlive the worker).
async fn start() -> (StreamEnv, tempfile::TempDir) {
    let mut env = StreamEnv::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = fast_worker_config(env.replica.id);
    config.workspace = WorkspaceConfig {
        dir: dir.path().to_path_buf(),
        max_bytes: 1 << 20,
        approval: WorkspaceApproval::Never,
        ..WorkspaceConfig::default()
    };
    config.workspace.sandbox.limits.file_size_bytes = 1 << 20;
    config.workspace.sandbox.limits.cpu_time = Duration::from_secs(5);
    env.worker = Some(Worker::start(WorkerDeps {
        store: env.store.clone(),
        pubsub: Arc::new(env.pubsub.clone()) as Arc<dyn Pubsub>,
        parts: env.replica.parts.clone(),
        providers: Arc::new(DefaultProviderFactory),
        config,
    }));
    (env, dir)
}

/// A raw `GET` as `user`: status, `Content-Type` and body bytes.
async fn get_raw(env: &StreamEnv, user: &User, path: &str) -> (u16, String, Vec<u8>) {
    let response = env
        .http
        .get(format!("{}{path}", env.replica.base))
        .bearer_auth(&user.token)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (
        status,
        content_type,
        response.bytes().await.unwrap_or_default().to_vec(),
    )
}

fn ws_path(chat: Uuid, suffix: &str) -> String {
    format!("/api/v2/chats/{chat}/workspace{suffix}")
}

/// The fields a `400` names.
fn fields(body: &Value) -> Vec<String> {
    body["validations"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|x| x["field"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The `.tar.gz`'s entries: path → (content, mode).
fn untar(gz: &[u8]) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    let mut entries = BTreeMap::new();
    for entry in archive.entries().expect("a tar") {
        let mut entry = entry.expect("an entry");
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mode = entry.header().mode().unwrap();
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut content).unwrap();
        entries.insert(path, (content, mode));
    }
    entries
}

/// The listed `(path, kind, bytes)`s.
fn listed(entries: &Value) -> Vec<(String, String, i64)> {
    entries
        .as_array()
        .expect("an array")
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_owned(),
                e["kind"].as_str().unwrap().to_owned(),
                e["bytes"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Sends `text` to `chat` as `user` and waits until the turn is over.
async fn turn(env: &StreamEnv, user: &User, chat: Uuid, text: &str) {
    let (status, body) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/messages"),
            user,
            Some(send_body(text)),
        )
        .await;
    assert!(status == 200 || status == 201, "{status}: {body}");
    env.wait_status(chat, "waiting").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_true_is_validated_and_the_workspace_routes_read_the_committed_files() {
    if !bwrap_or_skip("workspace routes").await {
        return;
    }
    let (mut env, _dir) = start().await;

    // A non-boolean `workspace` is refused, naming the field.
    for bad in [json!("yes"), json!(1), json!({})] {
        let mut body = chat_body("hi");
        body["workspace"] = bad.clone();
        let (status, answer) = env
            .request("POST", "/api/v2/chats", &env.alice, Some(body))
            .await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(fields(&answer), ["workspace"], "{bad}: {answer}");
    }

    // A first turn that writes nothing: still no workspace.
    env.llm.push(Script::text("nothing yet"));
    let mut body = chat_body("hello");
    body["workspace"] = json!(true);
    let (status, created) = env
        .request("POST", "/api/v2/chats", &env.alice, Some(body))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["workspace"], Value::Null, "{created}");
    assert!(created.as_object().unwrap().contains_key("workspace"));
    let chat: Uuid = created["id"].as_str().unwrap().parse().unwrap();
    env.wait_status(chat, "waiting").await;
    let (_, read) = env
        .request("GET", &format!("/api/v2/chats/{chat}"), &env.alice, None)
        .await;
    assert_eq!(read["workspace"], Value::Null, "{read}");
    let (status, list) = env
        .request("GET", &ws_path(chat, ""), &env.alice, None)
        .await;
    assert_eq!((status, list), (200, json!([])));
    let (status, content_type, gz) = get_raw(&env, &env.alice, &ws_path(chat, "/archive")).await;
    assert_eq!((status, content_type.as_str()), (200, "application/gzip"));
    assert!(
        untar(&gz).is_empty(),
        "an empty workspace is an empty archive"
    );
    let (status, _, _) = get_raw(&env, &env.alice, &ws_path(chat, "/file?path=a.txt")).await;
    assert_eq!(status, 404);

    // A turn that writes a text file, a binary one and an empty directory.
    env.llm.push(
        Script::new()
            .tool_call(
                "w1",
                "write_file",
                r#"{"path": "notes/a.txt", "content": "hello\n"}"#,
                1,
            )
            .tool_call(
                "s1",
                "shell",
                r#"{"command": "printf '\\000\\001\\377' > bin.dat && mkdir empty"}"#,
                1,
            ),
    );
    env.llm.push(Script::text("written"));
    turn(&env, &env.alice, chat, "write them").await;
    let messages = env.messages(&env.alice, chat).await;
    let results: Vec<&Value> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().iter())
        .filter(|p| p["type"] == "tool-result")
        .collect();
    assert_eq!(results.len(), 2, "{messages:?}");
    assert!(
        results.iter().all(|r| r["is_error"] != json!(true)),
        "{results:?}"
    );

    let (_, read) = env
        .request("GET", &format!("/api/v2/chats/{chat}"), &env.alice, None)
        .await;
    let summary = &read["workspace"];
    let keys: Vec<&String> = summary.as_object().expect("a summary").keys().collect();
    assert_eq!(keys.len(), 3, "{summary}");
    assert_eq!(summary["bytes"], 9, "6 + 3 bytes: {summary}");
    assert_eq!(summary["files"], 2, "{summary}");
    assert!(summary["updated_at"].is_string(), "{summary}");

    let (status, list) = env
        .request("GET", &ws_path(chat, ""), &env.alice, None)
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(
        listed(&list),
        [
            ("bin.dat".to_owned(), "file".to_owned(), 3),
            ("empty".to_owned(), "dir".to_owned(), 0),
            ("notes".to_owned(), "dir".to_owned(), 0),
            ("notes/a.txt".to_owned(), "file".to_owned(), 6),
        ]
    );
    for entry in list.as_array().unwrap() {
        assert_eq!(entry["executable"], false, "{entry}");
        assert!(entry["updated_at"].is_string(), "{entry}");
    }

    // The file route: the bytes and their type; the path normalized.
    for path in ["notes/a.txt", "./notes//a.txt"] {
        let (status, content_type, body) = get_raw(
            &env,
            &env.alice,
            &ws_path(chat, &format!("/file?path={path}")),
        )
        .await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(content_type, "text/plain; charset=utf-8");
        assert_eq!(body, b"hello\n");
    }
    let (status, content_type, body) =
        get_raw(&env, &env.alice, &ws_path(chat, "/file?path=bin.dat")).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/octet-stream");
    assert_eq!(body, [0u8, 1, 255]);
    for bad in [
        "/file?path=/etc/passwd",
        "/file?path=%2Fetc%2Fpasswd",
        "/file?path=../x",
        "/file?path=notes/../../x",
        "/file?path=",
        "/file",
    ] {
        let (status, answer) = env
            .request("GET", &ws_path(chat, bad), &env.alice, None)
            .await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(fields(&answer), ["path"], "{bad}: {answer}");
    }
    for missing in [
        "/file?path=missing.txt",
        "/file?path=notes",
        "/file?path=empty",
    ] {
        let (status, answer) = env
            .request("GET", &ws_path(chat, missing), &env.alice, None)
            .await;
        assert_eq!(status, 404, "{missing}: {answer}");
        assert!(answer["message"].is_string(), "{missing}: {answer}");
    }

    // The archive holds the files under workspace/.
    let (status, content_type, gz) = get_raw(&env, &env.alice, &ws_path(chat, "/archive")).await;
    assert_eq!((status, content_type.as_str()), (200, "application/gzip"));
    let entries = untar(&gz);
    assert_eq!(
        entries.keys().collect::<Vec<_>>(),
        [
            "workspace/bin.dat",
            "workspace/empty",
            "workspace/notes",
            "workspace/notes/a.txt"
        ]
    );
    assert_eq!(
        entries["workspace/notes/a.txt"],
        (b"hello\n".to_vec(), 0o644)
    );
    assert_eq!(entries["workspace/bin.dat"].0, [0u8, 1, 255]);

    // Someone who may not read the chat: 404 on all three; bob reads all
    // three once the chat is shared with him (read-only).
    let carol = make_user(env.pool(), "carol", false).await;
    for reader in [&carol, &env.bob] {
        for suffix in ["", "/file?path=notes/a.txt", "/archive"] {
            let (status, _, _) = get_raw(&env, reader, &ws_path(chat, suffix)).await;
            assert_eq!(status, 404, "{suffix}");
        }
    }
    let (status, share) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/shares"),
            &env.alice,
            Some(json!({"username": "bob"})),
        )
        .await;
    assert_eq!(status, 201, "{share}");
    let (status, shared_list) = env.request("GET", &ws_path(chat, ""), &env.bob, None).await;
    assert_eq!((status, &shared_list), (200, &list));
    let (status, _, body) = get_raw(&env, &env.bob, &ws_path(chat, "/file?path=notes/a.txt")).await;
    assert_eq!((status, body.as_slice()), (200, b"hello\n".as_slice()));
    let (status, _, shared_gz) = get_raw(&env, &env.bob, &ws_path(chat, "/archive")).await;
    assert_eq!(status, 200);
    assert_eq!(untar(&shared_gz), entries);
    for suffix in ["", "/file?path=notes/a.txt", "/archive"] {
        let (status, _, _) = get_raw(&env, &carol, &ws_path(chat, suffix)).await;
        assert_eq!(status, 404, "still not carol's: {suffix}");
    }

    // A fork copies the workspace: the same entries and summary, rows of
    // its own, which its turns change without touching the source.
    let (status, fork) = env
        .request(
            "POST",
            &format!("/api/v2/chats/{chat}/fork"),
            &env.alice,
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    let fork_id: Uuid = fork["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(fork["workspace"]["bytes"], 9, "{fork}");
    assert_eq!(fork["workspace"]["files"], 2, "{fork}");
    let (_, fork_list) = env
        .request("GET", &ws_path(fork_id, ""), &env.alice, None)
        .await;
    assert_eq!(listed(&fork_list), listed(&list));
    let (_, _, fork_file) =
        get_raw(&env, &env.alice, &ws_path(fork_id, "/file?path=bin.dat")).await;
    assert_eq!(fork_file, [0u8, 1, 255]);
    let rows = |chat: Uuid| {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM chat_workspace_files WHERE chat_id = $1")
            .bind(chat)
            .fetch_one(env.pool())
    };
    assert_eq!(rows(fork_id).await.unwrap(), 4, "the fork's own rows");
    assert_eq!(rows(chat).await.unwrap(), 4);

    env.llm.push(Script::new().tool_call(
        "w2",
        "write_file",
        r#"{"path": "notes/a.txt", "content": "changed in the fork"}"#,
        1,
    ));
    env.llm.push(Script::text("changed"));
    turn(&env, &env.alice, fork_id, "change it").await;
    let (_, _, forked) = get_raw(
        &env,
        &env.alice,
        &ws_path(fork_id, "/file?path=notes/a.txt"),
    )
    .await;
    assert_eq!(forked, b"changed in the fork");
    let (_, _, source) = get_raw(&env, &env.alice, &ws_path(chat, "/file?path=notes/a.txt")).await;
    assert_eq!(source, b"hello\n", "the source is unchanged");
    let (_, source_list) = env
        .request("GET", &ws_path(chat, ""), &env.alice, None)
        .await;
    assert_eq!(source_list, list, "the source's entries are unchanged");
    let (_, source_chat) = env
        .request("GET", &format!("/api/v2/chats/{chat}"), &env.alice, None)
        .await;
    assert_eq!(source_chat["workspace"], read["workspace"]);
    let (_, fork_chat) = env
        .request("GET", &format!("/api/v2/chats/{fork_id}"), &env.alice, None)
        .await;
    assert_eq!(fork_chat["workspace"]["bytes"], 3 + 19, "{fork_chat}");

    env.stop_worker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_without_a_workspace_lists_nothing_and_has_no_files() {
    let (mut env, _dir) = start().await;
    env.llm.push(Script::text("plain"));
    let chat = env.create_chat(&env.alice, chat_body("hi")).await;
    env.wait_status(chat, "waiting").await;
    let (_, read) = env
        .request("GET", &format!("/api/v2/chats/{chat}"), &env.alice, None)
        .await;
    assert_eq!(read["workspace"], Value::Null, "{read}");
    let (status, list) = env
        .request("GET", &ws_path(chat, ""), &env.alice, None)
        .await;
    assert_eq!((status, list), (200, json!([])));
    let (status, _, _) = get_raw(&env, &env.alice, &ws_path(chat, "/file?path=a")).await;
    assert_eq!(status, 404);
    let (status, _, gz) = get_raw(&env, &env.alice, &ws_path(chat, "/archive")).await;
    assert_eq!(status, 200);
    assert!(untar(&gz).is_empty());
    // A chat that does not exist: 404 everywhere.
    let nobody = Uuid::new_v4();
    for suffix in ["", "/file?path=a", "/archive"] {
        let (status, _, _) = get_raw(&env, &env.alice, &ws_path(nobody, suffix)).await;
        assert_eq!(status, 404, "{suffix}");
    }
    env.stop_worker().await;
}
