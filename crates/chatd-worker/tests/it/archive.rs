//! The auto-archive loop (spec "Auto-archive loop"): which chats it archives,
//! and its races with a message sent at the same moment and with another
//! replica's loop.

use std::sync::Arc;
use std::time::Duration;

use chatd_core::{BusyBehavior, ChatStatus, MessagePart};
use chatd_store::{CreateChatInput, NewMessage};
use chatd_testkit::fake_llm::Script;
use chatd_worker::{WorkerConfig, auto_archive_pass};
use serde_json::json;
use uuid::Uuid;

use crate::common::{Env, fast_config};

const IDLE_FOR: Duration = Duration::from_secs(3600);

fn archiving_config() -> WorkerConfig {
    WorkerConfig {
        auto_archive_after: Some(IDLE_FOR),
        auto_archive_interval: Duration::from_millis(100),
        ..fast_config()
    }
}

/// A chat in `waiting` that runs no turn, optionally a child of `parent`.
async fn idle_chat(env: &Env, parent: Option<Uuid>) -> Uuid {
    env.store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            parent_chat_id: parent,
            initial_messages: vec![
                NewMessage::user(vec![MessagePart::text("hi")]).created_by(env.owner),
            ],
            initial_status: Some(ChatStatus::Waiting),
            ..CreateChatInput::default()
        })
        .await
        .expect("create chat")
        .chat
        .id
}

/// Moves the chat's last change two hours back (past [`IDLE_FOR`]).
async fn age(env: &Env, chat_id: Uuid) {
    sqlx::query("UPDATE chats SET updated_at = now() - interval '2 hours' WHERE id = $1")
        .bind(chat_id)
        .execute(env.db.pool())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_archives_families_idle_for_the_configured_time_and_nothing_else() {
    let env = Env::new().await;
    env.llm.set_default_fn(
        |request| match request.last_user_text().unwrap_or_default().as_str() {
            "fail" => Script::http_error(400, r#"{"error":{"message":"bad request"}}"#),
            "tool" => Script::new().tool_call("call_1", "ask", "{}", 1),
            _ => Script::text("answer"),
        },
    );
    let worker = env.worker_with(archiving_config());
    let tools =
        json!([{"name": "ask", "description": "Ask the user", "input_schema": {"type": "object"}}]);
    let answered = env.create_chat("hello").await;
    let failed = env.create_chat("fail").await;
    let waiting_for_tool = env.create_chat_with("tool", Some(tools)).await;
    let recent = idle_chat(&env, None).await;
    let family = idle_chat(&env, None).await;
    let family_child = idle_chat(&env, Some(family)).await;
    let mixed = idle_chat(&env, None).await;
    let mixed_child = idle_chat(&env, Some(mixed)).await;
    let pinned = idle_chat(&env, None).await;
    sqlx::query("UPDATE chats SET pin_order = 1 WHERE id = $1")
        .bind(pinned)
        .execute(env.db.pool())
        .await
        .unwrap();
    // A family whose child is archived and root is not (a repair of an
    // invalid chat unarchives only that chat): archived like any other.
    let repaired = idle_chat(&env, None).await;
    let repaired_child = idle_chat(&env, Some(repaired)).await;
    sqlx::query("UPDATE chats SET archived = true WHERE id = $1")
        .bind(repaired_child)
        .execute(env.db.pool())
        .await
        .unwrap();
    env.wait_status(answered, ChatStatus::Waiting).await;
    env.wait_status(failed, ChatStatus::Error).await;
    env.wait_for(
        waiting_for_tool,
        Duration::from_secs(20),
        "requires_action",
        |c| c.status == ChatStatus::RequiresAction,
    )
    .await;
    let before = env.chat(answered).await.snapshot_version;

    for chat in [
        answered,
        failed,
        waiting_for_tool,
        family,
        family_child,
        mixed,
        pinned,
        repaired,
        repaired_child,
    ] {
        age(&env, chat).await;
    }
    for (chat, what) in [
        (answered, "the answered chat"),
        (failed, "the failed chat"),
        (family, "the idle family's root"),
        (family_child, "the idle family's child"),
        (repaired, "the root of a family with an archived child"),
    ] {
        env.wait_for(chat, Duration::from_secs(10), what, |c| c.archived)
            .await;
    }
    let archived = env.chat(answered).await;
    assert_eq!(
        archived.status,
        ChatStatus::Waiting,
        "archiving keeps the status"
    );
    assert_eq!(
        archived.snapshot_version,
        before + 1,
        "one snapshot bump: streams and lists see it"
    );
    assert_eq!(env.chat(failed).await.status, ChatStatus::Error);

    // Several more passes run meanwhile; none touches the rest.
    tokio::time::sleep(Duration::from_millis(400)).await;
    for (chat, why) in [
        (recent, "changed within the idle time"),
        (waiting_for_tool, "waits for a tool result"),
        (mixed, "its child changed within the idle time"),
        (mixed_child, "a child goes with its root"),
        (pinned, "is pinned"),
    ] {
        assert!(!env.chat(chat).await.archived, "archived a chat that {why}");
    }
    assert_eq!(
        auto_archive_pass(&env.store, IDLE_FOR).await.unwrap(),
        0,
        "a pass after the loop's finds nothing left"
    );

    // Unarchiving is a change: the chat is not archived again at once.
    env.store
        .set_family_archived(answered, false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!env.chat(answered).await.archived);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_archive_off_archives_nothing() {
    let env = Env::new().await;
    let worker = env.worker_with(WorkerConfig {
        auto_archive_after: None,
        ..archiving_config()
    });
    let chat = idle_chat(&env, None).await;
    age(&env, chat).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!env.chat(chat).await.archived);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_the_loop_archives_either_lands_or_finds_the_chat_archived() {
    let env = Env::new().await;
    let (mut archived_first, mut sent_first) = (0, 0);
    for round in 0..40 {
        let chat = idle_chat(&env, None).await;
        age(&env, chat).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let (archive, sent) = tokio::join!(
            {
                let (barrier, store) = (barrier.clone(), env.store.clone());
                async move {
                    barrier.wait().await;
                    store.auto_archive_family(chat, IDLE_FOR).await.unwrap()
                }
            },
            {
                let barrier = barrier.clone();
                let env = &env;
                async move {
                    barrier.wait().await;
                    env.try_send(chat, "still here", BusyBehavior::Queue).await
                }
            }
        );
        let row = env.chat(chat).await;
        let messages = env.active_messages(chat).await.len();
        match (archive, sent) {
            (Some(_), Err(err)) => {
                archived_first += 1;
                assert!(row.archived, "round {round}");
                assert_eq!(row.status, ChatStatus::Waiting, "round {round}");
                assert_eq!(
                    messages, 1,
                    "round {round}: the refused message is not stored"
                );
                assert!(
                    err.contains("archived") || err.contains("XW"),
                    "round {round}: {err}"
                );
            }
            (None, Ok(())) => {
                sent_first += 1;
                assert!(!row.archived, "round {round}");
                assert_eq!(row.status, ChatStatus::Running, "round {round}");
                assert_eq!(messages, 2, "round {round}");
            }
            (archive, sent) => panic!(
                "round {round}: archived {:?} and sent {sent:?}: a message landed in an archived chat or was refused by a live one",
                archive.is_some()
            ),
        }
    }
    eprintln!("archive won {archived_first} rounds, the message won {sent_first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_archiving_the_same_family_archive_it_once() {
    let env = Env::new().await;
    for round in 0..25 {
        let root = idle_chat(&env, None).await;
        let child = idle_chat(&env, Some(root)).await;
        age(&env, root).await;
        age(&env, child).await;
        let before = env.chat(root).await.snapshot_version;
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let attempt = |barrier: Arc<tokio::sync::Barrier>| {
            let store = env.store.clone();
            async move {
                barrier.wait().await;
                store.auto_archive_family(root, IDLE_FOR).await.unwrap()
            }
        };
        let (a, b) = tokio::join!(attempt(barrier.clone()), attempt(barrier));
        assert!(
            a.is_some() != b.is_some(),
            "round {round}: exactly one replica archives ({:?}, {:?})",
            a.is_some(),
            b.is_some()
        );
        assert_eq!(a.or(b).unwrap().len(), 2, "round {round}: root and child");
        let after = env.chat(root).await;
        assert!(after.archived && env.chat(child).await.archived);
        assert_eq!(
            after.snapshot_version,
            before + 1,
            "round {round}: one bump"
        );
    }
}
