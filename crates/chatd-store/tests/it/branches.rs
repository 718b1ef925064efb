//! Branches (API.md "Branches, regenerate and fork"; migration
//! `0017_branches.sql`): edits and regenerations keep every branch, a switch
//! moves the active one, forks copy it, and the context follows it.

use chatd_core::{ChatRole, ChatStatus, ExecutionState, MessagePart, StateError, Visibility};
use chatd_store::{EditMessageInput, ForkInput, ForkOutcome, NewMessage, StoreError};
use uuid::Uuid;

use crate::common::{Harness, assert_tree, assistant_text, user_text};

/// A waiting chat: "q1" answered "a1", then "q2" answered "a2". Returns the
/// chat and the ids `[q1, a1, q2, a2]`.
async fn two_turns(h: &Harness) -> (Uuid, [i64; 4]) {
    let created = h
        .store
        .create_chat(h.chat_input(Uuid::new_v4(), "q1"))
        .await
        .expect("create");
    let id = created.chat.id;
    let q1 = created.initial_messages[0].id;
    let a1 = answer(h, id, "a1").await;
    let (sent, _) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.send_message(chatd_store::SendMessageInput {
                    message: user_text("q2"),
                    busy_behavior: Default::default(),
                    max_queue_size: None,
                })
                .await
            })
        })
        .await;
    let q2 = sent.inserted_messages.last().expect("into history").id;
    let a2 = answer(h, id, "a2").await;
    (id, [q1, a1, q2, a2])
}

/// What a worker does for a running chat: one answer, then the turn ends.
async fn answer(h: &Harness, id: Uuid, text: &'static str) -> i64 {
    let (rows, _) = h
        .run(id, move |tx| {
            Box::pin(async move {
                let rows = tx.commit_step(vec![assistant_text(text)], false).await?;
                tx.finish_turn().await?;
                Ok(rows)
            })
        })
        .await;
    rows[0].id
}

fn texts(messages: &[chatd_store::ChatMessage]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter_map(|p| match p {
            MessagePart::Text { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

async fn edit(
    h: &Harness,
    id: Uuid,
    message_id: i64,
    text: &str,
) -> chatd_store::EditMessageResult {
    let replacement = user_text(text);
    h.run(id, move |tx| {
        Box::pin(async move {
            tx.edit_message(EditMessageInput {
                message_id,
                replacement,
                suffix_messages: vec![],
            })
            .await
        })
    })
    .await
    .0
}

async fn activate(h: &Harness, id: Uuid, message_id: i64) -> chatd_store::ActivateResult {
    h.run(id, move |tx| {
        Box::pin(async move { tx.activate_branch(message_id).await })
    })
    .await
    .0
}

#[tokio::test]
async fn an_edit_adds_a_sibling_and_keeps_the_old_branch() {
    let h = Harness::new().await;
    let (id, [q1, a1, q2, a2]) = two_turns(&h).await;
    let before = h.chat(id).await;
    let edited = edit(&h, id, q2, "q2 again").await;
    let new_q2 = edited.replacement_message.id;
    assert_eq!(
        edited.deleted_message_ids,
        vec![q2, a2],
        "the ids leaving the branch"
    );
    assert_eq!(
        edited.replacement_message.parent_id,
        Some(a1),
        "a sibling of q2"
    );
    assert_eq!(edited.replacement_message.sibling_ids, vec![q2, new_q2]);
    // Nothing deleted: the old rows are there, off the branch, and know
    // their new sibling.
    let all = h.messages(id).await;
    assert_eq!(all.len(), 5);
    let old = all.iter().find(|m| m.id == q2).unwrap();
    assert!(old.deleted);
    assert_eq!(old.sibling_ids, vec![q2, new_q2]);
    assert_eq!(
        texts(&h.active_messages(id).await),
        ["q1", "a1", "q2 again"]
    );
    let chat = h.chat(id).await;
    assert_eq!(chat.active_leaf_id, Some(new_q2));
    assert_eq!(chat.message_count, 3);
    assert!(chat.history_version > before.history_version);
    let _ = q1;
    assert_tree(&h, id, "after the edit").await;
}

#[tokio::test]
async fn switching_branches_moves_history_counts_preview_and_context() {
    let h = Harness::new().await;
    let (id, [_, a1, q2, a2]) = two_turns(&h).await;
    let new_q2 = edit(&h, id, q2, "q2 again").await.replacement_message.id;
    let new_a2 = answer(&h, id, "a2 again").await;
    let on_new = h.chat(id).await;
    assert_eq!(on_new.last_message_preview.as_deref(), Some("a2 again"));
    // Back to the first version: the newest leaf under q2 is a2.
    let switched = activate(&h, id, q2).await;
    assert_eq!(switched.leaf_id, a2);
    assert_eq!(switched.deactivated_message_ids, vec![new_q2, new_a2]);
    assert_eq!(switched.activated_message_ids, vec![q2, a2]);
    let chat = h.chat(id).await;
    assert_eq!(chat.status, ChatStatus::Waiting);
    assert_eq!(chat.active_leaf_id, Some(a2));
    assert_eq!(chat.message_count, 4);
    assert_eq!(chat.last_message_preview.as_deref(), Some("a2"));
    assert!(
        chat.history_version > on_new.history_version,
        "a new history version"
    );
    assert_eq!(
        texts(&h.active_messages(id).await),
        ["q1", "a1", "q2", "a2"]
    );
    // The model reads the active branch.
    let history = chatd_store::messages::active_history(h.pool(), id)
        .await
        .unwrap();
    assert_eq!(texts(&history), ["q1", "a1", "q2", "a2"]);
    // Activating the active leaf changes nothing.
    let version = chat.history_version;
    let again = activate(&h, id, a2).await;
    assert_eq!(again.leaf_id, a2);
    assert!(again.deactivated_message_ids.is_empty() && again.activated_message_ids.is_empty());
    assert_eq!(h.chat(id).await.history_version, version);
    // Under a1 the newest leaf is the newest answer: forth again.
    assert_eq!(activate(&h, id, a1).await.leaf_id, new_a2);
    assert_eq!(
        texts(&h.active_messages(id).await),
        ["q1", "a1", "q2 again", "a2 again"]
    );
    assert_tree(&h, id, "after the switches").await;
}

#[tokio::test]
async fn regenerate_answers_the_same_question_as_a_new_sibling() {
    let h = Harness::new().await;
    let (id, [q1, a1, q2, a2]) = two_turns(&h).await;
    let (regenerated, chat) = h
        .run(id, move |tx| {
            Box::pin(async move { tx.regenerate_message(a2).await })
        })
        .await;
    assert_eq!(regenerated.parent_id, q2);
    assert_eq!(regenerated.deactivated_message_ids, vec![a2]);
    assert_eq!(chat.status, ChatStatus::Running);
    assert_eq!(chat.active_leaf_id, Some(q2));
    let new_a2 = answer(&h, id, "a2 again").await;
    let rows = h.messages(id).await;
    let row = |id: i64| rows.iter().find(|m| m.id == id).unwrap().clone();
    assert_eq!(row(new_a2).parent_id, Some(q2));
    assert_eq!(row(new_a2).sibling_ids, vec![a2, new_a2]);
    assert_eq!(row(a2).sibling_ids, vec![a2, new_a2]);
    assert_eq!(
        texts(&h.active_messages(id).await),
        ["q1", "a1", "q2", "a2 again"]
    );
    // Regenerating an earlier answer cuts back to its question.
    let (regenerated, _) = h
        .run(id, move |tx| {
            Box::pin(async move { tx.regenerate_message(a1).await })
        })
        .await;
    assert_eq!(regenerated.parent_id, q1);
    assert_eq!(regenerated.deactivated_message_ids, vec![a1, q2, new_a2]);
    assert_tree(&h, id, "after regenerating").await;
}

#[tokio::test]
async fn refusals_change_nothing() {
    let h = Harness::new().await;
    let (id, [q1, a1, q2, a2]) = two_turns(&h).await;
    let before = h.dump(id).await;
    let err = h
        .rejected(id, move |tx| {
            Box::pin(async move { tx.regenerate_message(q1).await })
        })
        .await;
    assert!(matches!(
        err,
        StoreError::State(StateError::RegeneratedMessageNotAssistant { message_id }) if message_id == q1
    ));
    for missing in [i64::MAX, -1] {
        let err = h
            .rejected(id, move |tx| {
                Box::pin(async move { tx.regenerate_message(missing).await })
            })
            .await;
        assert!(matches!(
            err,
            StoreError::State(StateError::MessageNotFound { .. })
        ));
        let err = h
            .rejected(id, move |tx| {
                Box::pin(async move { tx.activate_branch(missing).await })
            })
            .await;
        assert!(matches!(
            err,
            StoreError::State(StateError::MessageNotFound { .. })
        ));
    }
    // Another chat's message is not found here.
    let (other, [other_q1, ..]) = two_turns(&h).await;
    let err = h
        .rejected(id, move |tx| {
            Box::pin(async move { tx.activate_branch(other_q1).await })
        })
        .await;
    assert!(matches!(
        err,
        StoreError::State(StateError::MessageNotFound { .. })
    ));
    assert_eq!(h.dump(id).await, before);
    // Busy: both refused, nothing changes.
    edit(&h, id, q2, "busy now").await;
    let busy = h.dump(id).await;
    for err in [
        h.rejected(id, move |tx| {
            Box::pin(async move { tx.regenerate_message(a1).await })
        })
        .await,
        h.rejected(id, move |tx| {
            Box::pin(async move { tx.activate_branch(q2).await })
        })
        .await,
    ] {
        assert!(
            matches!(err, StoreError::State(StateError::TransitionNotAllowed(_))),
            "{err:?}"
        );
    }
    assert_eq!(h.dump(id).await, busy);
    let _ = (a2, other);
}

#[tokio::test]
async fn context_boundaries_belong_to_their_branch() {
    let h = Harness::new().await;
    let (id, [_, _, q2, _]) = two_turns(&h).await;
    // Clear the context on the first branch: the model reads nothing before it.
    h.run(id, |tx| {
        Box::pin(async move {
            let mut boundary = NewMessage::system("context cleared");
            boundary.compressed = true;
            boundary.visibility = Visibility::Model;
            tx.clear_context(vec![boundary]).await
        })
    })
    .await;
    let cleared = chatd_store::messages::active_history(h.pool(), id)
        .await
        .unwrap();
    assert!(
        texts(&cleared).iter().all(|t| t != "q1"),
        "{:?}",
        texts(&cleared)
    );
    // A new branch from q2 does not have that boundary.
    let new_q2 = edit(&h, id, q2, "q2 again").await.replacement_message.id;
    answer(&h, id, "a2 again").await;
    let history = chatd_store::messages::active_history(h.pool(), id)
        .await
        .unwrap();
    assert_eq!(texts(&history), ["q1", "a1", "q2 again", "a2 again"]);
    let context_new = h.chat(id).await.context_tokens;
    // Switching back brings the boundary back with its branch.
    activate(&h, id, q2).await;
    let history = chatd_store::messages::active_history(h.pool(), id)
        .await
        .unwrap();
    assert_eq!(texts(&history), texts(&cleared));
    let context_old = h.chat(id).await.context_tokens;
    assert_ne!(
        context_old, context_new,
        "the context figure follows the branch"
    );
    // The model-only boundary is in the tree but hangs no visible sibling.
    let tree = chatd_store::messages::tree(h.pool(), id).await.unwrap();
    assert!(tree.iter().all(|n| n.role != ChatRole::System));
    let _ = new_q2;
    assert_tree(&h, id, "after switching back").await;
}

#[tokio::test]
async fn a_warm_context_cache_never_serves_another_branch() {
    let h = Harness::new().await;
    let (id, [_, _, q2, _]) = two_turns(&h).await;
    edit(&h, id, q2, "q2 again").await;
    answer(&h, id, "a2 again").await;
    // Every bundle from here finds this replica's cache warm.
    activate(&h, id, q2).await;
    let chat = h.chat(id).await;
    let fresh = chatd_store::internals::messages::context_entries(h.pool(), id)
        .await
        .unwrap();
    let cached = h.store.context_cache().get(id, chat.history_version);
    if let Some(cached) = cached {
        assert_eq!(
            *cached, fresh,
            "the cache holds the active branch's entries"
        );
    }
    // A send on the switched branch computes its context from this branch.
    h.run(id, |tx| {
        Box::pin(async move {
            tx.send_message(chatd_store::SendMessageInput {
                message: user_text("q3"),
                busy_behavior: Default::default(),
                max_queue_size: None,
            })
            .await
        })
    })
    .await;
    let history = chatd_store::messages::active_history(h.pool(), id)
        .await
        .unwrap();
    assert_eq!(texts(&history), ["q1", "a1", "q2", "a2", "q3"]);
    let chat = h.chat(id).await;
    let fresh = chatd_store::internals::messages::context_entries(h.pool(), id)
        .await
        .unwrap();
    let expected: i64 = fresh.iter().map(|e| e.token_estimate).sum();
    assert!(chat.context_tokens.unwrap() >= expected.min(1));
    assert_tree(&h, id, "after the send").await;
}

#[tokio::test]
async fn a_fork_copies_the_active_branch_up_to_a_message() {
    let h = Harness::new().await;
    let (id, [q1, a1, q2, _]) = two_turns(&h).await;
    edit(&h, id, q2, "q2 again").await;
    answer(&h, id, "a2 again").await;
    let source = h.chat(id).await;
    let usage_before: i64 = sqlx::query_scalar("SELECT count(*) FROM user_usage")
        .fetch_one(h.pool())
        .await
        .unwrap();
    let fork = |message_id| ForkInput {
        source_chat_id: id,
        owner_id: h.owner,
        message_id,
        default_quota: 1 << 30,
    };
    let ForkOutcome::Forked(whole) = h.store.fork_chat(fork(None)).await.unwrap() else {
        panic!("no files to copy")
    };
    assert_eq!(whole.status, ChatStatus::Waiting);
    assert_eq!(whole.forked_from_chat_id, Some(id));
    assert_eq!(whole.forked_from_message_id, source.active_leaf_id);
    assert_eq!(whole.title, format!("Fork of {}", source.title));
    assert_eq!(whole.message_count, 4);
    assert_eq!(whole.context_tokens, source.context_tokens);
    assert_eq!(
        texts(&h.active_messages(whole.id).await),
        ["q1", "a1", "q2 again", "a2 again"]
    );
    assert_tree(&h, whole.id, "the whole fork").await;
    assert_eq!(h.state(whole.id).await, ExecutionState::W);
    // Up to a1 only.
    let ForkOutcome::Forked(part) = h.store.fork_chat(fork(Some(a1))).await.unwrap() else {
        panic!("no files to copy")
    };
    assert_eq!(texts(&h.active_messages(part.id).await), ["q1", "a1"]);
    assert_tree(&h, part.id, "the partial fork").await;
    // Copies were not paid for again.
    let usage_after: i64 = sqlx::query_scalar("SELECT count(*) FROM user_usage")
        .fetch_one(h.pool())
        .await
        .unwrap();
    assert_eq!(usage_after, usage_before);
    // Not on the active branch, not the owner's, or missing: refused.
    for bad in [q2, i64::MAX] {
        let err = h.store.fork_chat(fork(Some(bad))).await.unwrap_err();
        assert!(
            matches!(err, StoreError::State(StateError::MessageNotFound { .. })),
            "{err:?}"
        );
    }
    let mut stranger = fork(Some(q1));
    stranger.owner_id = Uuid::new_v4();
    let err = h.store.fork_chat(stranger).await.unwrap_err();
    assert!(matches!(err, StoreError::State(StateError::ChatNotFound)));
    // The source did not change.
    assert_eq!(h.chat(id).await.snapshot_version, source.snapshot_version);
}

#[tokio::test]
async fn a_fork_renames_compaction_boundaries_to_its_copies() {
    let h = Harness::new().await;
    let (id, [_, a1, _, _]) = two_turns(&h).await;
    // A summary covering q1..a1, as compaction commits it.
    h.run(id, move |tx| {
        Box::pin(async move {
            let mut summary = NewMessage::system("summary of q1 and a1");
            summary.compressed = true;
            summary.visibility = Visibility::Model;
            summary.compacted_through_id = Some(a1);
            tx.clear_context(vec![summary]).await
        })
    })
    .await;
    let source_history = chatd_store::messages::active_history(h.pool(), id)
        .await
        .unwrap();
    let ForkOutcome::Forked(fork) = h
        .store
        .fork_chat(ForkInput {
            source_chat_id: id,
            owner_id: h.owner,
            message_id: None,
            default_quota: 1 << 30,
        })
        .await
        .unwrap()
    else {
        panic!("no files")
    };
    let rows = h.messages(fork.id).await;
    let boundary = rows
        .iter()
        .find(|m| m.compressed)
        .expect("the boundary is copied");
    let through = rows
        .iter()
        .find(|m| m.id == boundary.compacted_through_id.unwrap())
        .expect("it names a row of the fork");
    assert_eq!(texts(std::slice::from_ref(through)), ["a1"]);
    let fork_history = chatd_store::messages::active_history(h.pool(), fork.id)
        .await
        .unwrap();
    assert_eq!(texts(&fork_history), texts(&source_history));
    assert_eq!(fork.compactions, h.chat(id).await.compactions);
}

#[tokio::test]
async fn a_fork_copies_the_files_its_messages_name_within_the_quota() {
    let h = Harness::new().await;
    let bytes = vec![7u8; 1000];
    let file = chatd_store::files::store_upload(
        h.pool(),
        Uuid::new_v4(),
        h.owner,
        "notes.txt",
        "text/plain",
        bytes.len() as i64,
        1 << 30,
        futures::stream::iter([Ok::<_, std::io::Error>(bytes.clone())]),
    )
    .await
    .unwrap();
    let chatd_store::files::UploadOutcome::Stored(file) = file else {
        panic!("stored")
    };
    let mut input = h.chat_input(Uuid::new_v4(), "read this");
    input.initial_messages[0].content.push(MessagePart::File {
        file_id: file.id,
        media_type: "text/plain".into(),
        name: None,
    });
    let id = h.store.create_chat(input).await.unwrap().chat.id;
    answer(&h, id, "done").await;
    let fork = |quota| ForkInput {
        source_chat_id: id,
        owner_id: h.owner,
        message_id: None,
        default_quota: quota,
    };
    // 1000 bytes used; a copy needs 1000 more.
    match h.store.fork_chat(fork(1500)).await.unwrap() {
        ForkOutcome::OverQuota(storage, needed) => {
            assert_eq!((storage.used, needed), (1000, 1000));
        }
        ForkOutcome::Forked(_) => panic!("over the quota"),
    }
    let ForkOutcome::Forked(forked) = h.store.fork_chat(fork(2000)).await.unwrap() else {
        panic!("fits")
    };
    let rows = h.active_messages(forked.id).await;
    let copied_id = chatd_store::files::file_ids(&rows[0].content.0)[0];
    assert_ne!(copied_id, file.id, "a copy of its own");
    let copy = chatd_store::files::select(h.pool(), copied_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((copy.chat_id, copy.size), (Some(forked.id), 1000));
    let chunk = chatd_store::files::chunk(h.pool(), copied_id, 0)
        .await
        .unwrap();
    assert_eq!(chunk.as_deref(), Some(&bytes[..]));
}

#[tokio::test]
async fn existing_chats_become_one_branch_in_place_with_nothing_visible_changed() {
    // A database as it stood before migration 0017, with a chat whose first
    // answer an edit soft-deleted (the old, destructive edit).
    let before_branches = sqlx::migrate::Migrator::with_migrations(
        chatd_store::MIGRATOR
            .iter()
            .filter(|m| m.version < 17)
            .cloned()
            .collect(),
    );
    let db = chatd_testkit::TestDatabase::new(&before_branches)
        .await
        .unwrap();
    let pool = db.pool();
    let owner = Uuid::new_v4();
    let chat = Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'old', 'member')")
        .bind(owner)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO chats (id, owner_id, status, snapshot_version) VALUES ($1, $2, 'waiting', 1)",
    )
    .bind(chat)
    .bind(owner)
    .execute(pool)
    .await
    .unwrap();
    for (i, (role, text, deleted)) in [
        ("user", "q1", false),
        ("assistant", "a1", true),
        ("user", "q1 edited", false),
        ("assistant", "a1 again", false),
        ("user", "q2", false),
    ]
    .into_iter()
    .enumerate()
    {
        sqlx::query("UPDATE chats SET snapshot_version = $2 WHERE id = $1")
            .bind(chat)
            .bind(i as i64 + 2)
            .execute(pool)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO chat_messages (chat_id, role, content, deleted)
             VALUES ($1, $2, jsonb_build_array(jsonb_build_object('type', 'text', 'text', $3::text)), $4)",
        )
        .bind(chat)
        .bind(role)
        .bind(text)
        .bind(deleted)
        .execute(pool)
        .await
        .unwrap();
    }
    let visible = |pool: sqlx::PgPool| async move {
        let rows: Vec<(i64, i64, bool)> = sqlx::query_as(
            "SELECT id, revision, deleted FROM chat_messages WHERE chat_id = $1 ORDER BY id",
        )
        .bind(chat)
        .fetch_all(&pool)
        .await
        .unwrap();
        let versions: (i64, i64, i64) = sqlx::query_as(
            "SELECT snapshot_version, history_version, message_count FROM chats WHERE id = $1",
        )
        .bind(chat)
        .fetch_one(&pool)
        .await
        .unwrap();
        (rows, versions)
    };
    let old = visible(pool.clone()).await;

    chatd_store::MIGRATOR.run(pool).await.unwrap();

    assert_eq!(
        visible(pool.clone()).await,
        old,
        "no revision, version or count moved"
    );
    let rows: Vec<(i64, Option<i64>, bool, Vec<i64>)> = sqlx::query_as(
        "SELECT id, parent_id, detached, sibling_ids FROM chat_messages WHERE chat_id = $1 ORDER BY id",
    )
    .bind(chat)
    .fetch_all(pool)
    .await
    .unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    // The active rows are chained in id order; the deleted one is in no tree.
    assert_eq!(
        rows.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(),
        [
            (None, false),
            (None, true),
            (Some(ids[0]), false),
            (Some(ids[2]), false),
            (Some(ids[3]), false),
        ]
    );
    assert!(rows.iter().all(|r| r.3.is_empty()), "no siblings anywhere");
    let leaf: Option<i64> = sqlx::query_scalar("SELECT active_leaf_id FROM chats WHERE id = $1")
        .bind(chat)
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(leaf, Some(ids[4]));
    // The next message follows the leaf, and the old deleted row can never
    // come back or be anyone's sibling.
    let store = chatd_store::Store::new(
        pool.clone(),
        std::sync::Arc::new(chatd_pubsub::RecordingPublisher::new()),
    );
    let mut tx = store.machine(chat).begin().await.unwrap();
    let err = tx.activate_branch(ids[1]).await.unwrap_err();
    assert!(matches!(
        err,
        StoreError::State(StateError::MessageNotFound { .. })
    ));
    drop(tx);
    let mut tx = store.machine(chat).begin().await.unwrap();
    let edited = tx
        .edit_message(EditMessageInput {
            message_id: ids[0],
            replacement: user_text("q1 once more"),
            suffix_messages: vec![],
        })
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(edited.replacement_message.parent_id, None);
    assert_eq!(
        edited.replacement_message.sibling_ids,
        vec![ids[0], edited.replacement_message.id]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_regenerates_activates_edits_and_sends_leave_one_consistent_tree() {
    let h = Harness::new().await;
    for round in 0..6 {
        let (id, [q1, a1, q2, a2]) = two_turns(&h).await;
        edit(&h, id, q2, "q2 again").await;
        answer(&h, id, "a2 again").await;
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(4));
        let mut tasks = tokio::task::JoinSet::new();
        for op in 0..4 {
            let machine = h.store.machine(id);
            let barrier = barrier.clone();
            tasks.spawn(async move {
                barrier.wait().await;
                let result = match (op + round) % 4 {
                    0 => {
                        machine
                            .update(move |tx| {
                                Box::pin(async move { tx.regenerate_message(a1).await.map(|_| ()) })
                            })
                            .await
                    }
                    1 => {
                        machine
                            .update(move |tx| {
                                Box::pin(async move { tx.activate_branch(a2).await.map(|_| ()) })
                            })
                            .await
                    }
                    2 => {
                        machine
                            .update(move |tx| {
                                Box::pin(async move {
                                    tx.edit_message(EditMessageInput {
                                        message_id: q1,
                                        replacement: user_text("q1 raced"),
                                        suffix_messages: vec![],
                                    })
                                    .await
                                    .map(|_| ())
                                })
                            })
                            .await
                    }
                    _ => {
                        machine
                            .update(move |tx| {
                                Box::pin(async move {
                                    tx.send_message(chatd_store::SendMessageInput {
                                        message: user_text("q3"),
                                        busy_behavior: Default::default(),
                                        max_queue_size: None,
                                    })
                                    .await
                                    .map(|_| ())
                                })
                            })
                            .await
                    }
                };
                result.map(|((), _)| ())
            });
        }
        let mut won = 0;
        while let Some(joined) = tasks.join_next().await {
            match joined.unwrap() {
                Ok(()) => won += 1,
                Err(StoreError::State(
                    StateError::TransitionNotAllowed(_) | StateError::MessageNotFound { .. },
                )) => {}
                Err(other) => panic!("round {round}: {other:?}"),
            }
        }
        assert!(won >= 1, "round {round}: something won");
        assert_tree(&h, id, &format!("round {round}")).await;
        let state = h.state(id).await;
        assert!(state != ExecutionState::Invalid, "round {round}: {state}");
    }
}

#[tokio::test]
async fn after_a_compaction_regenerate_answers_the_visible_question_and_refuses_the_marker() {
    let h = Harness::new().await;
    let (id, [_, a1, q2, a2]) = two_turns(&h).await;
    // What a compaction commits after a2: the model-only summary, then the
    // visible chatd_compact call and its result (the marker).
    let (rows, _) = h
        .run(id, move |tx| {
            Box::pin(async move {
                tx.request_compaction().await?;
                let mut summary = NewMessage::user(vec![MessagePart::text("summary")]);
                summary.visibility = Visibility::Model;
                summary.compressed = true;
                summary.compacted_through_id = Some(a1);
                let call = NewMessage::assistant(vec![MessagePart::ToolCall {
                    tool_call_id: "compact_1".into(),
                    tool_name: chatd_core::context::COMPACTION_TOOL.into(),
                    args: "{}".into(),
                }]);
                let result = NewMessage::tool(vec![MessagePart::ToolResult {
                    tool_call_id: "compact_1".into(),
                    tool_name: chatd_core::context::COMPACTION_TOOL.into(),
                    result: serde_json::json!({"ok": true}),
                    is_error: false,
                }]);
                let rows = tx.commit_step(vec![summary, call, result], false).await?;
                tx.finish_turn().await?;
                Ok(rows)
            })
        })
        .await;
    let (summary, marker) = (rows[0].id, rows[1].id);
    // The marker follows a2 in the tree clients see, not the summary.
    assert_eq!(rows[1].parent_id, Some(summary));
    assert_eq!(rows[1].visible_parent_id, Some(a2));
    // The marker is no answer: 400, nothing changes.
    let before = h.dump(id).await;
    let err = h
        .rejected(id, move |tx| {
            Box::pin(async move { tx.regenerate_message(marker).await })
        })
        .await;
    assert!(matches!(
        err,
        StoreError::State(StateError::RegeneratedMessageNotAssistant { .. })
    ));
    assert_eq!(h.dump(id).await, before);
    // A send after the compaction, then regenerating its answer: the new
    // branch starts at the visible question, never at the summary.
    let (sent, _) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.send_message(chatd_store::SendMessageInput {
                    message: user_text("q3"),
                    busy_behavior: Default::default(),
                    max_queue_size: None,
                })
                .await
            })
        })
        .await;
    let q3 = sent.inserted_messages.last().unwrap().id;
    let a3 = answer(&h, id, "a3").await;
    let (regenerated, _) = h
        .run(id, move |tx| {
            Box::pin(async move { tx.regenerate_message(a3).await })
        })
        .await;
    assert_eq!(regenerated.parent_id, q3);
    assert_eq!(regenerated.deactivated_message_ids, vec![a3]);
    // Regenerating a2 (before the compaction) takes the summary off the
    // branch with the rest, and names only visible rows.
    answer(&h, id, "a3 again").await;
    let (regenerated, _) = h
        .run(id, move |tx| {
            Box::pin(async move { tx.regenerate_message(a2).await })
        })
        .await;
    assert_eq!(regenerated.parent_id, q2);
    assert!(!regenerated.deactivated_message_ids.contains(&summary));
    assert!(regenerated.deactivated_message_ids.contains(&marker));
    assert_tree(&h, id, "after the compaction").await;
}

#[tokio::test]
async fn a_branch_that_ends_in_a_waiting_call_gets_it_answered_when_activated_or_forked() {
    let h = Harness::new().await;
    // A chat waiting for a client tool call, edited: the old branch ends in
    // the call.
    let id = h.chat_in(ExecutionState::A0).await;
    let first = h
        .active_messages(id)
        .await
        .into_iter()
        .find(|m| m.role == ChatRole::User)
        .unwrap()
        .id;
    edit(&h, id, first, "again").await;
    answer(&h, id, "answered").await;
    assert_eq!(h.state(id).await, ExecutionState::W);
    // Back to the old branch: the call is answered, the chat waits.
    let switched = activate(&h, id, first).await;
    assert_eq!(switched.cancellation_messages.len(), 1);
    assert_eq!(h.state(id).await, ExecutionState::W);
    assert_eq!(h.outstanding_calls(id).await, vec![]);
    assert_eq!(h.chat(id).await.active_leaf_id, Some(switched.leaf_id));
    assert_tree(&h, id, "after the switch").await;
    // A fork of a chat that waits for a call waits itself, call answered.
    let waiting = h.chat_in(ExecutionState::A0).await;
    let ForkOutcome::Forked(fork) = h
        .store
        .fork_chat(ForkInput {
            source_chat_id: waiting,
            owner_id: h.owner,
            message_id: None,
            default_quota: 1 << 30,
        })
        .await
        .unwrap()
    else {
        panic!("no files")
    };
    assert_eq!(h.state(fork.id).await, ExecutionState::W);
    assert_eq!(h.outstanding_calls(fork.id).await, vec![]);
    assert_tree(&h, fork.id, "the fork").await;
}
