//! The schema's trigger rules, exercised with raw SQL against the real
//! migrations (`spec/chatd-architecture.md`, "Message revisions and history
//! version", "Queue version", "Retry state version").
//!
//! Each writing test opens a transaction and first advances the chat's
//! `snapshot_version` the way a transition bundle does (`bump`), because the
//! triggers stamp rows with the already-advanced version.

use chatd_core::{ExecutionState, RetryState};
use chatd_store::{CreateChatInput, NewMessage};
use serde_json::{Value, json};
use sqlx::types::Json;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use crate::common::{Harness, retry_state, user_text};

/// The trigger-managed counters of one chat row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
struct Versions {
    snapshot_version: i64,
    history_version: i64,
    queue_version: i64,
    generation_attempt: i64,
    retry_state_version: i64,
    retry_state: Option<Value>,
}

async fn versions(conn: &mut PgConnection, id: Uuid) -> Versions {
    sqlx::query_as(
        "SELECT snapshot_version, history_version, queue_version, generation_attempt, retry_state_version, retry_state
         FROM chats WHERE id = $1",
    )
    .bind(id)
    .fetch_one(conn)
    .await
    .expect("versions")
}

/// Opens a transaction and advances `snapshot_version` like a transition
/// bundle does; returns the transaction and the new version.
async fn begin_bumped(h: &Harness, id: Uuid) -> (Transaction<'static, Postgres>, i64) {
    let mut tx = h.pool().begin().await.expect("begin");
    let version: i64 = sqlx::query_scalar(
        "UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = $1 RETURNING snapshot_version",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await
    .expect("bump");
    (tx, version)
}

/// Inserts an assistant text message with raw SQL, returning `(id, revision)`.
async fn insert_message(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<(i64, i64)> {
    sqlx::query_as(
        "INSERT INTO chat_messages (chat_id, role, content)
         VALUES ($1, 'assistant', '[{\"type\":\"text\",\"text\":\"raw\"}]'::jsonb)
         RETURNING id, revision",
    )
    .bind(chat_id)
    .fetch_one(conn)
    .await
}

async fn insert_queued(conn: &mut PgConnection, chat_id: Uuid) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO chat_queued_messages (chat_id, content)
         VALUES ($1, '[{\"type\":\"text\",\"text\":\"raw\"}]'::jsonb) RETURNING id",
    )
    .bind(chat_id)
    .fetch_one(conn)
    .await
    .expect("insert queued")
}

/// The message of a failed statement's database error.
fn db_message(err: sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => panic!("expected a database error, got {other:?}"),
    }
}

async fn record_generation_attempt(h: &Harness, id: Uuid) {
    h.apply(id, |tx| {
        Box::pin(async move { tx.record_generation_attempt().await.map(|_| ()) })
    })
    .await;
}

async fn record_retry_state(h: &Harness, id: Uuid, payload: RetryState) {
    h.apply(id, move |tx| {
        Box::pin(async move { tx.record_retry_state(payload).await.map(|_| ()) })
    })
    .await;
}

async fn first_message_id(h: &Harness, id: Uuid) -> i64 {
    h.messages(id).await[0].id
}

async fn message_revision(h: &Harness, message_id: i64) -> i64 {
    sqlx::query_scalar("SELECT revision FROM chat_messages WHERE id = $1")
        .bind(message_id)
        .fetch_one(h.pool())
        .await
        .expect("revision")
}

// Created chat.

#[tokio::test]
async fn created_chat_has_snapshot_and_history_version_one_and_zero_elsewhere() {
    let h = Harness::new().await;
    let result = h
        .store
        .create_chat(CreateChatInput {
            owner_id: h.owner,
            initial_messages: vec![NewMessage::system("be brief"), user_text("hello")],
            ..CreateChatInput::default()
        })
        .await
        .expect("create");
    let id = result.chat.id;
    let mut conn = h.pool().acquire().await.unwrap();
    assert_eq!(
        versions(&mut conn, id).await,
        Versions {
            snapshot_version: 1,
            history_version: 1,
            queue_version: 0,
            generation_attempt: 0,
            retry_state_version: 0,
            retry_state: None,
        }
    );
    let revisions: Vec<i64> = h.messages(id).await.iter().map(|m| m.revision).collect();
    assert_eq!(revisions, vec![1, 1]);
    let returned: Vec<i64> = result.initial_messages.iter().map(|m| m.revision).collect();
    assert_eq!(returned, vec![1, 1]);
}

// Message revision and history version.

#[tokio::test]
async fn message_insert_takes_snapshot_version_as_revision_and_history_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    record_generation_attempt(&h, id).await;
    record_generation_attempt(&h, id).await;
    let mut conn = h.pool().acquire().await.unwrap();
    let before = versions(&mut conn, id).await;
    assert_eq!(before.generation_attempt, 2);
    assert_eq!(before.retry_state, None);
    drop(conn);

    let (mut tx, version) = begin_bumped(&h, id).await;
    assert_eq!(version, before.snapshot_version + 1);
    let (_, revision) = insert_message(&mut tx, id).await.expect("insert");
    assert_eq!(revision, version);
    let after = versions(&mut tx, id).await;
    tx.commit().await.unwrap();

    assert_eq!(
        after,
        Versions {
            snapshot_version: version,
            history_version: version,
            generation_attempt: 0,
            // The attempt reset clears a retry state that was already null:
            // its version must not move.
            retry_state_version: before.retry_state_version,
            ..before
        }
    );
}

#[tokio::test]
async fn messages_changed_in_one_transaction_share_a_revision() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let (mut tx, version) = begin_bumped(&h, id).await;
    let (a, rev_a) = insert_message(&mut tx, id).await.unwrap();
    let (b, rev_b) = insert_message(&mut tx, id).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!((rev_a, rev_b), (version, version));
    assert_eq!(message_revision(&h, a).await, version);
    assert_eq!(message_revision(&h, b).await, version);
    assert_eq!(h.chat(id).await.history_version, version);
}

#[tokio::test]
async fn message_insert_resetting_the_attempt_clears_retry_state_and_bumps_its_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    record_generation_attempt(&h, id).await;
    record_retry_state(&h, id, retry_state(1)).await;
    let chat = h.chat(id).await;
    assert_eq!(chat.generation_attempt, 1);
    assert_eq!(chat.retry_state_version, chat.snapshot_version);

    let (mut tx, version) = begin_bumped(&h, id).await;
    insert_message(&mut tx, id).await.unwrap();
    tx.commit().await.unwrap();

    let chat = h.chat(id).await;
    assert_eq!(chat.history_version, version);
    assert_eq!(chat.generation_attempt, 0);
    assert_eq!(chat.retry_state, None);
    assert_eq!(chat.retry_state_version, version);
}

#[tokio::test]
async fn message_insert_with_attempt_already_zero_keeps_retry_state() {
    // Retry state is cleared only when generation_attempt changes (spec
    // "Retry state version"); resetting an attempt that is already 0 is not
    // a change.
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    record_retry_state(&h, id, retry_state(0)).await;
    let before = h.chat(id).await;
    assert_eq!(before.generation_attempt, 0);

    let (mut tx, version) = begin_bumped(&h, id).await;
    insert_message(&mut tx, id).await.unwrap();
    tx.commit().await.unwrap();

    let chat = h.chat(id).await;
    assert_eq!(chat.history_version, version);
    assert_eq!(chat.retry_state, Some(retry_state(0)));
    assert_eq!(chat.retry_state_version, before.retry_state_version);
}

#[tokio::test]
async fn message_insert_with_explicit_revision_is_rejected() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let before = h.dump(id).await;
    let (mut tx, _) = begin_bumped(&h, id).await;
    let err = sqlx::query(
        "INSERT INTO chat_messages (chat_id, role, content, revision) VALUES ($1, 'assistant', '[]'::jsonb, 7)",
    )
    .bind(id)
    .execute(&mut *tx)
    .await
    .unwrap_err();
    assert_eq!(
        db_message(err),
        "chat_messages.revision must be assigned by trigger"
    );
    drop(tx);
    assert_eq!(h.dump(id).await, before);
}

#[tokio::test]
async fn updating_message_revision_directly_is_rejected() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let message = first_message_id(&h, id).await;
    let (mut tx, version) = begin_bumped(&h, id).await;
    // Even assigning the value the trigger would have chosen is refused.
    let err = sqlx::query("UPDATE chat_messages SET revision = $2 WHERE id = $1")
        .bind(message)
        .bind(version)
        .execute(&mut *tx)
        .await
        .unwrap_err();
    assert_eq!(
        db_message(err),
        "chat_messages.revision must be assigned by trigger"
    );
    drop(tx);
    assert_eq!(message_revision(&h, message).await, 1);
}

#[tokio::test]
async fn changing_message_chat_id_is_rejected() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let other = h.create().await;
    let message = first_message_id(&h, id).await;
    let (mut tx, _) = begin_bumped(&h, id).await;
    let err = sqlx::query("UPDATE chat_messages SET chat_id = $2 WHERE id = $1")
        .bind(message)
        .bind(other)
        .execute(&mut *tx)
        .await
        .unwrap_err();
    assert_eq!(db_message(err), "chat_messages.chat_id is immutable");
    drop(tx);
    let owner: Uuid = sqlx::query_scalar("SELECT chat_id FROM chat_messages WHERE id = $1")
        .bind(message)
        .fetch_one(h.pool())
        .await
        .unwrap();
    assert_eq!(owner, id);
}

#[tokio::test]
async fn message_insert_for_a_missing_chat_fails() {
    let h = Harness::new().await;
    let missing = Uuid::new_v4();
    let mut conn = h.pool().acquire().await.unwrap();
    let err = insert_message(&mut conn, missing).await.unwrap_err();
    assert_eq!(db_message(err), format!("chat {missing} does not exist"));
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM chat_messages")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn meaningful_message_update_advances_revision_and_history_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    record_generation_attempt(&h, id).await;
    let message = first_message_id(&h, id).await;
    assert_eq!(message_revision(&h, message).await, 1);

    let (mut tx, version) = begin_bumped(&h, id).await;
    let revision: i64 = sqlx::query_scalar(
        "UPDATE chat_messages SET deleted = true WHERE id = $1 RETURNING revision",
    )
    .bind(message)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(revision, version);
    assert_eq!(message_revision(&h, message).await, version);
    let chat = h.chat(id).await;
    assert_eq!(chat.history_version, version);
    assert_eq!(chat.generation_attempt, 0);
}

#[tokio::test]
async fn no_op_message_update_moves_nothing() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    record_generation_attempt(&h, id).await;
    let message = first_message_id(&h, id).await;
    let before = h.chat(id).await;
    assert_eq!(before.generation_attempt, 1);

    let (mut tx, version) = begin_bumped(&h, id).await;
    for sql in [
        "UPDATE chat_messages SET content = content WHERE id = $1 RETURNING revision",
        "UPDATE chat_messages SET deleted = deleted WHERE id = $1 RETURNING revision",
        "UPDATE chat_messages SET visibility = visibility, compressed = compressed WHERE id = $1 RETURNING revision",
    ] {
        let revision: i64 = sqlx::query_scalar(sql)
            .bind(message)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(revision, 1, "{sql}");
    }
    tx.commit().await.unwrap();

    let after = h.chat(id).await;
    assert_eq!(after.snapshot_version, version);
    assert_eq!(message_revision(&h, message).await, 1);
    assert_eq!(after.history_version, before.history_version);
    assert_eq!(after.generation_attempt, 1);
    assert_eq!(after.retry_state_version, before.retry_state_version);
}

// Queue version.

#[tokio::test]
async fn queued_message_insert_sets_queue_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    assert_eq!(h.chat(id).await.queue_version, 0);
    let (mut tx, version) = begin_bumped(&h, id).await;
    insert_queued(&mut tx, id).await;
    assert_eq!(versions(&mut tx, id).await.queue_version, version);
    tx.commit().await.unwrap();
    let chat = h.chat(id).await;
    assert_eq!(chat.queue_version, version);
    // The queue is not message history.
    assert_eq!(chat.history_version, 1);
}

#[tokio::test]
async fn queued_message_update_of_position_content_model_config_or_author_sets_queue_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let queued = h.queue(id).await[0].id;
    for sql in [
        "UPDATE chat_queued_messages SET position = position - 1000 WHERE id = $1",
        "UPDATE chat_queued_messages SET content = '[{\"type\":\"text\",\"text\":\"edited\"}]'::jsonb WHERE id = $1",
        "UPDATE chat_queued_messages SET model_config_id = gen_random_uuid() WHERE id = $1",
        "UPDATE chat_queued_messages SET created_by = gen_random_uuid() WHERE id = $1",
    ] {
        let before = h.chat(id).await;
        let (mut tx, version) = begin_bumped(&h, id).await;
        assert!(before.queue_version < version);
        sqlx::query(sql)
            .bind(queued)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let after = h.chat(id).await;
        assert_eq!(after.queue_version, version, "{sql}");
        assert_eq!(after.history_version, before.history_version, "{sql}");
    }
}

#[tokio::test]
async fn queued_message_update_of_the_steer_flag_sets_queue_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let queued = h.queue(id).await[0].id;
    let before = h.chat(id).await;
    let (mut tx, version) = begin_bumped(&h, id).await;
    assert!(before.queue_version < version);
    sqlx::query("UPDATE chat_queued_messages SET steer = NOT steer WHERE id = $1")
        .bind(queued)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(h.chat(id).await.queue_version, version);
}

#[tokio::test]
async fn queued_message_update_of_other_columns_keeps_queue_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let queued = h.queue(id).await[0].id;
    let queue_version = h.chat(id).await.queue_version;
    for sql in [
        "UPDATE chat_queued_messages SET reasoning_effort = 'high' WHERE id = $1",
        "UPDATE chat_queued_messages SET client_message_id = 'client-1' WHERE id = $1",
    ] {
        let (mut tx, version) = begin_bumped(&h, id).await;
        assert!(version > queue_version);
        sqlx::query(sql)
            .bind(queued)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(h.chat(id).await.queue_version, queue_version, "{sql}");
    }
}

#[tokio::test]
async fn queued_message_delete_sets_queue_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let queued = h.queue(id).await[0].id;
    let before = h.chat(id).await;
    let (mut tx, version) = begin_bumped(&h, id).await;
    let deleted = sqlx::query("DELETE FROM chat_queued_messages WHERE id = $1")
        .bind(queued)
        .execute(&mut *tx)
        .await
        .unwrap();
    assert_eq!(deleted.rows_affected(), 1);
    tx.commit().await.unwrap();
    let after = h.chat(id).await;
    assert!(before.queue_version < version);
    assert_eq!(after.queue_version, version);
    assert_eq!(after.history_version, before.history_version);
}

// Retry state version.

#[tokio::test]
async fn setting_retry_state_sets_retry_state_version_to_snapshot_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    assert_eq!(h.chat(id).await.retry_state_version, 0);
    let (mut tx, version) = begin_bumped(&h, id).await;
    sqlx::query("UPDATE chats SET retry_state = $2 WHERE id = $1")
        .bind(id)
        .bind(Json(retry_state(1)))
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let chat = h.chat(id).await;
    assert_eq!(chat.retry_state, Some(retry_state(1)));
    assert_eq!(chat.retry_state_version, version);
}

#[tokio::test]
async fn setting_retry_state_to_the_same_value_keeps_its_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    record_retry_state(&h, id, retry_state(1)).await;
    let set_at = h.chat(id).await.retry_state_version;
    assert_eq!(set_at, h.chat(id).await.snapshot_version);

    let (mut tx, version) = begin_bumped(&h, id).await;
    assert!(version > set_at);
    sqlx::query("UPDATE chats SET retry_state = $2 WHERE id = $1")
        .bind(id)
        .bind(Json(retry_state(1)))
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let chat = h.chat(id).await;
    assert_eq!(chat.retry_state, Some(retry_state(1)));
    assert_eq!(chat.retry_state_version, set_at);
}

#[tokio::test]
async fn generation_attempt_change_clears_retry_state_and_bumps_its_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    record_retry_state(&h, id, retry_state(1)).await;
    let (mut tx, version) = begin_bumped(&h, id).await;
    sqlx::query("UPDATE chats SET generation_attempt = generation_attempt + 1 WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let chat = h.chat(id).await;
    assert_eq!(chat.generation_attempt, 1);
    assert_eq!(chat.retry_state, None);
    assert_eq!(chat.retry_state_version, version);
}

#[tokio::test]
async fn generation_attempt_change_with_null_retry_state_keeps_its_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    // Set and clear a retry state so the version is non-zero.
    record_retry_state(&h, id, retry_state(1)).await;
    record_generation_attempt(&h, id).await;
    let before = h.chat(id).await;
    assert_eq!(before.retry_state, None);
    assert_eq!(before.retry_state_version, before.snapshot_version);

    let (mut tx, version) = begin_bumped(&h, id).await;
    sqlx::query("UPDATE chats SET generation_attempt = generation_attempt + 1 WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let chat = h.chat(id).await;
    assert_eq!(chat.snapshot_version, version);
    assert_eq!(chat.generation_attempt, 2);
    assert_eq!(chat.retry_state, None);
    assert_eq!(chat.retry_state_version, before.retry_state_version);
}

#[tokio::test]
async fn writing_retry_state_version_directly_is_rejected() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let before = h.dump(id).await;
    let (mut tx, version) = begin_bumped(&h, id).await;
    let err = sqlx::query("UPDATE chats SET retry_state_version = $2 WHERE id = $1")
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await
        .unwrap_err();
    assert_eq!(
        db_message(err),
        "chats.retry_state_version must be assigned by trigger"
    );
    drop(tx);
    assert_eq!(h.dump(id).await, before);

    // Naming the column without changing its value is not a write.
    let (mut tx, _) = begin_bumped(&h, id).await;
    sqlx::query("UPDATE chats SET retry_state_version = retry_state_version WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(h.chat(id).await.retry_state_version, 0);
}

// Heartbeats.

#[tokio::test]
async fn heartbeats_table_is_unlogged() {
    let h = Harness::new().await;
    let persistence: String = sqlx::query_scalar(
        "SELECT relpersistence::text FROM pg_class WHERE oid = 'chat_heartbeats'::regclass",
    )
    .fetch_one(h.pool())
    .await
    .unwrap();
    assert_eq!(persistence, "u");
    // The execution-state tables are durable.
    let persistence: String = sqlx::query_scalar(
        "SELECT relpersistence::text FROM pg_class WHERE oid = 'chats'::regclass",
    )
    .fetch_one(h.pool())
    .await
    .unwrap();
    assert_eq!(persistence, "p");
}

#[tokio::test]
async fn heartbeats_cascade_on_chat_delete() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let other = h.chat_in(ExecutionState::R0).await;
    let count = |chat: Uuid| {
        let pool = h.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM chat_heartbeats WHERE chat_id = $1")
                .bind(chat)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(count(id).await, 1);
    assert_eq!(count(other).await, 1);
    sqlx::query("DELETE FROM chats WHERE id = $1")
        .bind(id)
        .execute(h.pool())
        .await
        .unwrap();
    assert_eq!(count(id).await, 0);
    assert_eq!(count(other).await, 1);
    let dump = h.dump(id).await;
    assert_eq!(
        dump,
        json!({"chat": null, "messages": [], "queue": [], "heartbeats": []})
    );
}
