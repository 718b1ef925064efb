//! Workspaces inside turns (API.md "Workspaces and provider-hosted tools"),
//! with the fake LLM: the workspace tools are offered to chats with a
//! workspace (only the read-only ones in plan mode); what a step's calls
//! changed is committed with the step and only then; `shell` waits for
//! approval by default; a call that goes past the workspace's room is
//! undone; a replica that takes a chat over after a crash continues with
//! exactly the committed files.
//!
//! Tests that run `shell` need bubblewrap (`bwrap`); without it they say so
//! and skip (scripts/test.sh installs it).

use std::collections::BTreeMap;
use std::time::Duration;

use chatd_core::{ChatStatus, MessagePart};
use chatd_store::workspaces::{self, EntryKind};
use chatd_store::{CreateChatInput, NewMessage, ToolResultInput};
use chatd_testkit::fake_llm::Script;
use chatd_worker::{WorkerConfig, WorkspaceApproval, WorkspaceConfig};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::{Env, fast_config, first_user_text, text_of, tool_results as results};

/// Whether bubblewrap runs here; prints why a test skips when not.
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

fn config(approval: WorkspaceApproval, max_bytes: i64) -> (WorkerConfig, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut workspace = WorkspaceConfig {
        dir: dir.path().to_path_buf(),
        max_bytes,
        approval,
        ..WorkspaceConfig::default()
    };
    workspace.sandbox.limits.file_size_bytes = u64::try_from(max_bytes).unwrap();
    workspace.sandbox.limits.cpu_time = Duration::from_secs(5);
    (
        WorkerConfig {
            workspace,
            ..fast_config()
        },
        dir,
    )
}

async fn create_workspace_chat(env: &Env, text: &str) -> Uuid {
    env.store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![
                NewMessage::user(vec![MessagePart::text(text)]).created_by(env.owner),
            ],
            workspace: true,
            ..CreateChatInput::default()
        })
        .await
        .expect("create chat")
        .chat
        .id
}

/// The committed files: path → (kind, content).
async fn committed(env: &Env, chat_id: Uuid) -> BTreeMap<String, (EntryKind, String)> {
    let manifest = workspaces::manifest(env.db.pool(), chat_id).await.unwrap();
    let paths: Vec<String> = manifest.iter().map(|e| e.path.clone()).collect();
    let contents: BTreeMap<String, Vec<u8>> = workspaces::contents(env.db.pool(), chat_id, &paths)
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _, c)| (p, c))
        .collect();
    manifest
        .into_iter()
        .map(|e| {
            let content = String::from_utf8_lossy(&contents[&e.path]).into_owned();
            (e.path, (e.kind, content))
        })
        .collect()
}

fn offered(request: &chatd_testkit::fake_llm::RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_file_calls_are_committed_with_it_and_the_chat_summarises_them() {
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(
        Script::new()
            .tool_call(
                "w1",
                "write_file",
                r#"{"path": "src/a.txt", "content": "hello"}"#,
                1,
            )
            .tool_call(
                "w2",
                "write_file",
                r#"{"path": "../x", "content": "no"}"#,
                1,
            )
            .tool_call("r1", "read_file", r#"{"path": "src/a.txt"}"#, 1)
            .tool_call("l1", "list_files", "{}", 1),
    );
    env.llm.push(Script::text("Written."));
    let worker = env.worker_with(config);
    let chat_id = create_workspace_chat(&env, "write a file").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;

    let requests = env.llm.requests();
    let mut tools = offered(&requests[0]);
    tools.sort();
    assert_eq!(tools, ["list_files", "read_file", "shell", "write_file"]);

    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    assert_eq!(results.len(), 4, "{results:?}");
    assert_eq!(results[0].1, json!({"path": "src/a.txt", "bytes": 5}));
    assert!(
        results[1].2,
        "a path out of the workspace fails: {results:?}"
    );
    assert_eq!(
        results[2].1["content"],
        json!("hello"),
        "calls run in order"
    );
    let listed: Vec<&str> = results[3].1["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["src", "src/a.txt"]);
    // One CommitStep: the rows and the files together.
    assert_eq!(messages[1].revision, messages[2].revision);
    assert_eq!(
        committed(&env, chat_id).await,
        BTreeMap::from([
            ("src".to_owned(), (EntryKind::Dir, String::new())),
            (
                "src/a.txt".to_owned(),
                (EntryKind::File, "hello".to_owned())
            ),
        ])
    );
    let chat = env.chat(chat_id).await;
    let summary = chat.workspace_summary().expect("summary");
    assert_eq!((summary.bytes, summary.files), (5, 1));
    assert_eq!(text_of(messages.last().unwrap()), "Written.");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_without_a_workspace_are_offered_no_workspace_tools_and_plan_mode_only_the_read_only_ones()
 {
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(Script::text("plain"));
    env.llm
        .push(Script::new().tool_call("w", "write_file", r#"{"path": "a", "content": "x"}"#, 1));
    env.llm.push(Script::text("planned"));
    let worker = env.worker_with(config);
    let plain = env.create_chat("hi").await;
    env.wait_status(plain, ChatStatus::Waiting).await;
    assert!(offered(&env.llm.requests()[0]).is_empty());

    let planned = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text("plan")])],
            workspace: true,
            plan_mode: Some("plan".into()),
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    env.wait_status(planned, ChatStatus::Waiting).await;
    let requests = env.llm.requests();
    let mut tools = offered(&requests[1]);
    tools.sort();
    assert_eq!(tools, ["list_files", "read_file"]);
    let messages = env.active_messages(planned).await;
    let results = results(&messages);
    assert!(
        results[0].2,
        "write_file is refused in plan mode: {results:?}"
    );
    assert!(committed(&env, planned).await.is_empty());
    assert!(env.chat(planned).await.workspace_summary().is_none());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_config_with_options_workspace_gives_every_chat_one() {
    let env = Env::new().await;
    env.set_model_options(json!({"workspace": true})).await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(Script::new().tool_call(
        "w",
        "write_file",
        r##"{"path": "n.md", "content": "# n"}"##,
        1,
    ));
    env.llm.push(Script::text("ok"));
    let worker = env.worker_with(config);
    let chat_id = env.create_chat("go").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert_eq!(
        committed(&env, chat_id).await["n.md"],
        (EntryKind::File, "# n".to_owned())
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_waits_for_approval_by_default_then_runs_once_and_commits_its_files() {
    if !bwrap_or_skip("shell_waits_for_approval_by_default").await {
        return;
    }
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Shell, 1 << 20);
    env.llm.push(
        Script::new()
            .tool_call(
                "w",
                "write_file",
                r#"{"path": "in.txt", "content": "3\n1\n2\n"}"#,
                1,
            )
            .tool_call(
                "s",
                "shell",
                r#"{"command": "sort in.txt > out.txt && cat out.txt && echo runs >> count"}"#,
                1,
            ),
    );
    env.llm.push(Script::text("Sorted."));
    let worker = env.worker_with(config);
    let chat_id = create_workspace_chat(&env, "sort").await;
    env.wait_requires_action(chat_id).await;
    // write_file needs no approval under `shell`: it ran and committed.
    assert_eq!(
        committed(&env, chat_id).await.keys().collect::<Vec<_>>(),
        ["in.txt"]
    );
    env.answer(chat_id, vec![ToolResultInput::decision("s", true, None)])
        .await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    let shell = &results.iter().find(|r| r.0 == "s").expect("shell result").1;
    assert_eq!(shell["exit_code"], json!(0), "{shell}");
    assert_eq!(shell["stdout"], json!("1\n2\n3\n"));
    assert_eq!(shell["limit"], Value::Null);
    let files = committed(&env, chat_id).await;
    assert_eq!(files["out.txt"].1, "1\n2\n3\n");
    assert_eq!(files["count"].1, "runs\n", "ran once");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_workspaces_room_is_undone_and_says_so() {
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Never, 100);
    let has_bwrap = bwrap_or_skip("a_call_past_the_workspaces_room (shell part)").await;
    let mut script = Script::new()
        .tool_call(
            "ok",
            "write_file",
            r#"{"path": "a", "content": "0123456789"}"#,
            1,
        )
        .tool_call(
            "big",
            "write_file",
            &json!({"path": "b", "content": "x".repeat(200)}).to_string(),
            1,
        );
    if has_bwrap {
        // Each file fits, together they do not: the second command is
        // undone, the first one's file stays.
        script = script
            .tool_call(
                "s1",
                "shell",
                r#"{"command": "head -c 60 /dev/zero > c"}"#,
                1,
            )
            .tool_call(
                "s2",
                "shell",
                r#"{"command": "rm a; head -c 60 /dev/zero > d"}"#,
                1,
            );
    }
    env.llm.push(script);
    env.llm.push(Script::text("done"));
    let worker = env.worker_with(config);
    let chat_id = create_workspace_chat(&env, "fill it").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    assert!(!results[0].2);
    assert!(results[1].2, "{results:?}");
    assert!(
        results[1].1["error"]
            .as_str()
            .unwrap()
            .contains("100 bytes"),
        "{results:?}"
    );
    let files = committed(&env, chat_id).await;
    if has_bwrap {
        assert!(!results[2].2, "{results:?}");
        assert!(results[3].2, "{results:?}");
        assert_eq!(results[3].1["limit"], json!("workspace_bytes"));
        assert!(results[3].1["message"].as_str().unwrap().contains("undone"));
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["a", "c"],
            "the undone call's rm and file are gone"
        );
    } else {
        assert_eq!(files.keys().collect::<Vec<_>>(), ["a"]);
    }
    worker.shutdown().await;
}

/// A command that writes without end (each file under the file size
/// limit) is killed while it runs, one room's worth (at least 16 MiB) past
/// the room, not when the disk is full; its writes are undone and the step
/// goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_writes_without_end_is_killed_undone_and_the_turn_goes_on() {
    if !bwrap_or_skip("a_command_that_writes_without_end").await {
        return;
    }
    let env = Env::new().await;
    let (config, dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(
        Script::new()
            .tool_call(
                "flood",
                "shell",
                r#"{"command": "echo kept > before; i=0; while :; do head -c 500000 /dev/zero > f$i; i=$((i+1)); done", "timeout_s": 60}"#,
                1,
            )
            .tool_call("after", "shell", r#"{"command": "echo fine > after"}"#, 1),
    );
    env.llm.push(Script::text("done"));
    let worker = env.worker_with(config);
    let started = std::time::Instant::now();
    let chat_id = create_workspace_chat(&env, "flood the disk").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "killed long before its 60 s timeout: {:?}",
        started.elapsed()
    );
    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    assert!(results[0].2, "{results:?}");
    assert_eq!(
        results[0].1["limit"],
        json!("workspace_bytes"),
        "{results:?}"
    );
    let message = results[0].1["message"].as_str().unwrap();
    assert!(
        message.contains("the most it may hold while a command runs")
            && message.contains("so this call's changes were undone"),
        "killed by the bound, then undone: {message}"
    );
    assert_eq!(results[1].1["exit_code"], json!(0), "{results:?}");
    assert_eq!(
        committed(&env, chat_id).await.keys().collect::<Vec<_>>(),
        ["after"],
        "none of the killed command's files, not even the first"
    );
    fn bytes_beneath(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => bytes_beneath(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }
    let used = bytes_beneath(dir.path());
    assert!(used < 2 << 20, "the replica's directory holds {used} bytes");
    worker.shutdown().await;
}

/// A file whose name is not UTF-8 cannot be kept (paths are JSON
/// strings), nor can a FIFO: the shell's result says so, and only the
/// other file commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_is_told_when_a_name_is_not_utf8_and_not_kept() {
    if !bwrap_or_skip("the_model_is_told_when_a_name_is_not_utf8").await {
        return;
    }
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(Script::new().tool_call(
        "names",
        "shell",
        r#"{"command": "echo a > good.txt; echo b > \"$(printf 'bad\\377')\"; mkfifo pipe; ls | wc -l"}"#,
        1,
    ));
    env.llm.push(Script::text("done"));
    let worker = env.worker_with(config);
    let chat_id = create_workspace_chat(&env, "odd names").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    assert!(!results[0].2, "{results:?}");
    assert_eq!(results[0].1["exit_code"], json!(0), "{results:?}");
    assert_eq!(results[0].1["stdout"], json!("3\n"), "{results:?}");
    let message = results[0].1["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("1 entry has a name that is not UTF-8 (\"bad\u{FFFD}\"")
            && message.contains("rename it"),
        "{message}"
    );
    assert!(
        message.contains("1 FIFO, socket or device entry (\"pipe\") is not kept"),
        "{message}"
    );
    assert_eq!(
        committed(&env, chat_id).await.keys().collect::<Vec<_>>(),
        ["good.txt"]
    );
    worker.shutdown().await;
}

/// A command that leaves a directory the replica cannot walk (paths
/// longer than PATH_MAX) is undone, and the step's next call still runs:
/// the replica's directory is only a cache, so a fresh one is checked out
/// from the committed rows and this step's earlier writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_the_replica_cannot_walk_is_replaced_and_the_step_goes_on() {
    if !bwrap_or_skip("a_directory_the_replica_cannot_walk").await {
        return;
    }
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(
        Script::new()
            .tool_call(
                "first",
                "write_file",
                r#"{"path": "kept.txt", "content": "before"}"#,
                1,
            )
            .tool_call(
                "deep",
                "shell",
                r#"{"command": "d=$(printf 'a%.0s' $(seq 200)); i=0; while [ $i -lt 30 ]; do mkdir $d && cd $d || exit 1; i=$((i+1)); done; echo x > f"}"#,
                1,
            )
            .tool_call("after", "shell", r#"{"command": "cat kept.txt > copy.txt"}"#, 1),
    );
    env.llm.push(Script::text("done"));
    let worker = env.worker_with(config);
    let chat_id = create_workspace_chat(&env, "go deep").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    assert!(!results[0].2, "{results:?}");
    assert!(results[1].2, "{results:?}");
    let said = results[1].1.to_string();
    assert!(said.contains("undone"), "{said}");
    assert!(said.len() < 1000, "the error's 6 KB path is cut: {said}");
    assert!(
        results[1].1.get("stderr").is_some(),
        "the command's own output stays in the result: {said}"
    );
    assert!(!results[2].2, "the next call runs: {results:?}");
    assert_eq!(results[2].1["exit_code"], json!(0), "{results:?}");
    let files = committed(&env, chat_id).await;
    assert_eq!(files.keys().collect::<Vec<_>>(), ["copy.txt", "kept.txt"]);
    assert_eq!(files["copy.txt"].1, "before");
    worker.shutdown().await;
}

/// A parent with a workspace that writes `a.txt` and spawns a sub-agent in
/// the same step; the sub-agent runs `shell` once, then answers. Returns
/// (parent, child, the spawn's result).
async fn spawn_from_a_workspace(env: &Env, content: &str) -> (Uuid, Uuid, Value) {
    let content = content.to_owned();
    env.llm.set_default_fn(move |request| {
        let first = first_user_text(request);
        let answered = !request.trailing_tool_results().is_empty();
        match (first.starts_with("CHILD:"), answered) {
            (false, false) => Script::new()
                .tool_call(
                    "w",
                    "write_file",
                    &json!({"path": "a.txt", "content": content}).to_string(),
                    1,
                )
                .tool_call("s", "spawn_agent", r#"{"prompt": "CHILD: read a.txt"}"#, 1),
            (true, false) => Script::new().tool_call(
                "c",
                "shell",
                r#"{"command": "cat a.txt 2>&1; ls | wc -l; echo mine > b.txt"}"#,
                1,
            ),
            (_, true) => Script::text("done"),
        }
    });
    let parent = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![
                NewMessage::user(vec![MessagePart::text("PARENT: delegate")]).created_by(env.owner),
            ],
            workspace: true,
            subagents: true,
            ..CreateChatInput::default()
        })
        .await
        .expect("create chat")
        .chat
        .id;
    env.wait_status(parent, ChatStatus::Waiting).await;
    let messages = env.active_messages(parent).await;
    let spawned = results(&messages)
        .into_iter()
        .find(|r| r.0 == "s")
        .expect("the spawn's result")
        .1;
    let child: Uuid = spawned["chat_id"].as_str().unwrap().parse().unwrap();
    env.wait_status(child, ChatStatus::Waiting).await;
    (parent, child, spawned)
}

/// A sub-agent of a chat with a workspace gets one too, starting as a copy
/// of its parent's as the spawning step committed it (that step's own write
/// included); from then on each changes only its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_starts_from_a_copy_of_its_parents_workspace() {
    if !bwrap_or_skip("a_sub_agent_starts_from_a_copy").await {
        return;
    }
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    let worker = env.worker_with(config);
    let (parent, child, spawned) = spawn_from_a_workspace(&env, "from the parent").await;
    assert_eq!(spawned.get("message"), None, "{spawned}");
    let child_results = results(&env.active_messages(child).await);
    assert_eq!(
        child_results[0].1["stdout"],
        json!("from the parent1\n"),
        "a.txt (no newline), then one entry: {child_results:?}"
    );
    let theirs = committed(&env, child).await;
    assert_eq!(theirs.keys().collect::<Vec<_>>(), ["a.txt", "b.txt"]);
    assert_eq!(theirs["a.txt"].1, "from the parent");
    assert_eq!(
        committed(&env, parent).await.keys().collect::<Vec<_>>(),
        ["a.txt"],
        "the child's write stays its own"
    );
    let child_row = env.chat(child).await;
    assert!(child_row.workspace, "the child has a workspace");
    worker.shutdown().await;
}

/// The copy counts against the owner's storage quota: when it does not
/// fit, the sub-agent starts with an empty workspace and the spawn's result
/// says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_whose_copy_does_not_fit_the_quota_starts_empty_and_the_result_says_so() {
    if !bwrap_or_skip("a_sub_agent_whose_copy_does_not_fit").await {
        return;
    }
    let env = Env::new().await;
    sqlx::query("UPDATE users SET max_storage_bytes = 50 WHERE id = $1")
        .bind(env.owner)
        .execute(env.db.pool())
        .await
        .unwrap();
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    let worker = env.worker_with(config);
    let (_, child, spawned) = spawn_from_a_workspace(&env, &"x".repeat(30)).await;
    let message = spawned["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("empty workspace") && message.contains("(30 bytes)"),
        "{spawned}"
    );
    let child_results = results(&env.active_messages(child).await);
    assert!(
        child_results[0].1["stdout"]
            .as_str()
            .unwrap()
            .ends_with("0\n"),
        "the child's workspace is empty: {child_results:?}"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_takes_over_after_a_crash_continues_with_exactly_the_committed_files() {
    if !bwrap_or_skip("a_replica_that_takes_over_after_a_crash").await {
        return;
    }
    let env = Env::new().await;
    let (config_a, _dir_a) = config(WorkspaceApproval::Never, 1 << 20);
    let (config_b, _dir_b) = config(WorkspaceApproval::Never, 1 << 20);
    // Step 1 commits kept.txt. Step 2 writes lost.txt, then hangs in a
    // command: the owner dies mid-step.
    env.llm.push(Script::new().tool_call(
        "w1",
        "write_file",
        r#"{"path": "kept.txt", "content": "committed"}"#,
        1,
    ));
    env.llm.push(
        Script::new()
            .tool_call(
                "w2",
                "write_file",
                r#"{"path": "lost.txt", "content": "half"}"#,
                1,
            )
            .tool_call(
                "s2",
                "shell",
                r#"{"command": "echo more >> kept.txt; sleep 60"}"#,
                1,
            ),
    );
    let a = env.worker_with(config_a);
    let chat_id = create_workspace_chat(&env, "work").await;
    // Wait until step 2's command runs (the third request is never made by A).
    env.wait_for(chat_id, Duration::from_secs(20), "step 1's commit", |c| {
        c.workspace_bytes == Some(9)
    })
    .await;
    env.wait_requests(2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.crash();
    // The new owner calls the model again for step 2: this time it reads.
    env.llm.push(
        Script::new()
            .tool_call("r", "read_file", r#"{"path": "kept.txt"}"#, 1)
            .tool_call("l", "list_files", "{}", 1),
    );
    env.llm.push(Script::text("Continued."));
    let b = env.worker_with(config_b);
    env.wait_owned_by(chat_id, &b, Duration::from_secs(20))
        .await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    let read = &results.iter().find(|r| r.0 == "r").unwrap().1;
    assert_eq!(read["content"], json!("committed"), "{results:?}");
    let list = &results.iter().find(|r| r.0 == "l").unwrap().1;
    assert_eq!(list["entries"].as_array().unwrap().len(), 1, "{list}");
    assert!(results.iter().all(|r| r.0 != "w2" && r.0 != "s2"));
    assert_eq!(
        committed(&env, chat_id).await,
        BTreeMap::from([(
            "kept.txt".to_owned(),
            (EntryKind::File, "committed".to_owned())
        )])
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspaces_count_against_the_owners_storage_quota() {
    let env = Env::new().await;
    sqlx::query("UPDATE users SET max_storage_bytes = 50 WHERE id = $1")
        .bind(env.owner)
        .execute(env.db.pool())
        .await
        .unwrap();
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(
        Script::new()
            .tool_call(
                "a",
                "write_file",
                &json!({"path": "a", "content": "x".repeat(40)}).to_string(),
                1,
            )
            .tool_call(
                "b",
                "write_file",
                &json!({"path": "b", "content": "y".repeat(40)}).to_string(),
                1,
            ),
    );
    env.llm.push(Script::text("done"));
    let worker = env.worker_with(config);
    let chat_id = create_workspace_chat(&env, "fill").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    let results = results(&env.active_messages(chat_id).await);
    assert!(!results[0].2 && results[1].2, "{results:?}");
    assert_eq!(
        committed(&env, chat_id).await.keys().collect::<Vec<_>>(),
        ["a"]
    );
    let report = chatd_store::usage::report(env.db.pool(), env.owner)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.storage_bytes, 40);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_mid_command_kills_it_and_the_next_step_sees_none_of_its_changes() {
    if !bwrap_or_skip("an_interrupt_mid_command").await {
        return;
    }
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(Script::new().tool_call(
        "s",
        "shell",
        r#"{"command": "echo half > half.txt; sleep 60"}"#,
        1,
    ));
    // The interrupting message's turn: the same replica, the same chat.
    env.llm
        .push(Script::new().tool_call("l", "list_files", "{}", 1));
    env.llm.push(Script::text("Nothing there."));
    let worker = env.worker_with(config);
    let chat_id = create_workspace_chat(&env, "slow").await;
    env.wait_requests(1).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let started = std::time::Instant::now();
    env.send(chat_id, "stop", chatd_core::BusyBehavior::Interrupt)
        .await;
    env.wait_for(chat_id, Duration::from_secs(20), "the second turn", |c| {
        c.status == ChatStatus::Waiting && c.message_count >= 5
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the sleeping command was killed, not waited for"
    );
    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    let list = &results.iter().find(|r| r.0 == "l").expect("list").1;
    assert_eq!(list["entries"], json!([]), "{results:?}");
    assert!(committed(&env, chat_id).await.is_empty());
    worker.shutdown().await;
}

/// Found by the chaos harness: a workspace result streams as soon as the
/// call ends, but its files commit with the step; an interrupt between the
/// two must not store the results (they would claim a write the workspace
/// never got, or a read of it). Here the step waits for a slow MCP call
/// beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_after_a_write_streamed_but_before_its_step_committed_stores_no_claim_of_it() {
    let env = Env::new().await;
    let server = env
        .add_mcp_server(
            "slow",
            crate::common::McpRow::Stdio(crate::common::fixture_command()),
        )
        .await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(
        Script::new()
            .tool_call("w", "write_file", r#"{"path": "f", "content": "x"}"#, 1)
            .tool_call("r", "read_file", r#"{"path": "f"}"#, 1)
            .tool_call("z", "slow__sleep", r#"{"ms": 3000}"#, 1),
    );
    env.llm
        .push(Script::new().tool_call("l", "list_files", "{}", 1));
    env.llm.push(Script::text("Nothing there."));
    let worker = env.worker_with(config);
    let chat_id = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text("go")])],
            workspace: true,
            mcp_server_ids: vec![server],
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    env.wait_requests(1).await;
    // The write ran and streamed; the step waits for the sleep.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    env.send(chat_id, "stop", chatd_core::BusyBehavior::Interrupt)
        .await;
    env.wait_for(chat_id, Duration::from_secs(20), "the second turn", |c| {
        c.status == ChatStatus::Waiting && c.message_count >= 6
    })
    .await;
    let messages = env.active_messages(chat_id).await;
    let results = results(&messages);
    let write = &results.iter().find(|r| r.0 == "w").expect("w answered").1;
    assert_ne!(
        write.get("bytes"),
        Some(&json!(1)),
        "no claim of a write that never committed: {results:?}"
    );
    let read = &results.iter().find(|r| r.0 == "r").expect("r answered").1;
    assert!(
        read.get("content").is_none(),
        "nor of a read of a state that never committed: {results:?}"
    );
    let list = &results.iter().find(|r| r.0 == "l").expect("list").1;
    assert_eq!(list["entries"], json!([]), "{results:?}");
    assert!(committed(&env, chat_id).await.is_empty());
    worker.shutdown().await;
}

/// Found by a break-it run: a workspace over its room (its owner's quota
/// was lowered) could not shrink, every change was undone. It may shrink,
/// not grow; and a binary file's read gives its size, not its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_over_its_room_may_shrink_and_a_binary_read_gives_only_its_size() {
    let env = Env::new().await;
    let (config, _dir) = config(WorkspaceApproval::Never, 1 << 20);
    env.llm.push(
        Script::new()
            .tool_call(
                "a",
                "write_file",
                &json!({"path": "a", "content": "x".repeat(60)}).to_string(),
                1,
            )
            .tool_call(
                "b",
                "write_file",
                &json!({"path": "bin", "content": "\u{0}\u{1}\u{2}"}).to_string(),
                1,
            ),
    );
    env.llm.push(Script::text("written"));
    let worker = env.worker_with(config);
    let chat_id = create_workspace_chat(&env, "fill").await;
    env.wait_status(chat_id, ChatStatus::Waiting).await;
    sqlx::query("UPDATE users SET max_storage_bytes = 10 WHERE id = $1")
        .bind(env.owner)
        .execute(env.db.pool())
        .await
        .unwrap();
    env.llm.push(
        Script::new()
            .tool_call("grow", "write_file", r#"{"path": "c", "content": "y"}"#, 1)
            .tool_call(
                "shrink",
                "write_file",
                r#"{"path": "a", "content": "small"}"#,
                1,
            )
            .tool_call("r", "read_file", r#"{"path": "bin"}"#, 1),
    );
    env.llm.push(Script::text("shrunk"));
    env.send(chat_id, "shrink", chatd_core::BusyBehavior::Queue)
        .await;
    env.wait_for(chat_id, Duration::from_secs(20), "the second turn", |c| {
        c.status == ChatStatus::Waiting && c.message_count >= 8
    })
    .await;
    let results = results(&env.active_messages(chat_id).await);
    let by_id = |id: &str| results.iter().find(|r| r.0 == id).unwrap().clone();
    assert!(
        by_id("grow").2,
        "growing over the room is refused: {results:?}"
    );
    assert!(!by_id("shrink").2, "shrinking is allowed: {results:?}");
    let read = by_id("r").1;
    assert_eq!(
        (read["binary"].clone(), read["bytes"].clone()),
        (json!(true), json!(3))
    );
    assert_eq!(read["content"], json!(""));
    let files = committed(&env, chat_id).await;
    assert_eq!(files["a"].1, "small");
    assert!(!files.contains_key("c"));
    worker.shutdown().await;
}
