//! The message-window columns of `chats` (`message_count`,
//! `last_message_preview`; migration `0005_message_windows.sql`), exercised
//! with raw SQL against the real migrations: every kind of row change the
//! trigger must follow, including ones no transition makes today (content
//! and visibility updates), and a multi-row soft delete.

use chatd_core::ExecutionState;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::common::Harness;

/// `(message_count, last_message_preview)` of the chat row.
async fn summary(conn: &mut PgConnection, id: Uuid) -> (i64, Option<String>) {
    sqlx::query_as("SELECT message_count, last_message_preview FROM chats WHERE id = $1")
        .bind(id)
        .fetch_one(conn)
        .await
        .expect("summary")
}

/// The same, recounted from the rows.
async fn recount(conn: &mut PgConnection, id: Uuid) -> (i64, Option<String>) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND visibility <> 'model'),
                (SELECT left(p->>'text', 200)
                 FROM chat_messages m, jsonb_array_elements(m.content) WITH ORDINALITY AS e(p, o)
                 WHERE m.chat_id = $1 AND NOT m.deleted AND m.visibility <> 'model'
                   AND p->>'type' = 'text' AND p->>'text' <> ''
                 ORDER BY m.id DESC, o DESC LIMIT 1)",
    )
    .bind(id)
    .fetch_one(conn)
    .await
    .expect("recount")
}

async fn insert(conn: &mut PgConnection, id: Uuid, visibility: &str, content: &str) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO chat_messages (chat_id, role, content, visibility) VALUES ($1, 'assistant', $2::jsonb, $3) RETURNING id",
    )
    .bind(id)
    .bind(content)
    .bind(visibility)
    .fetch_one(conn)
    .await
    .expect("insert")
}

async fn exec(conn: &mut PgConnection, sql: &str, id: i64) {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(id)
        .execute(conn)
        .await
        .expect(sql);
}

#[tokio::test]
async fn message_count_and_preview_follow_every_row_change_and_match_a_recount() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let mut tx = h.pool().begin().await.unwrap();
    sqlx::query("UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    let c = &mut *tx;
    let start = summary(c, id).await;
    assert_eq!(start, recount(c, id).await);
    let n0 = start.0;

    // The last non-empty text part of a message is its preview.
    let a = insert(
        c,
        id,
        "both",
        r#"[{"type":"text","text":"first"},{"type":"reasoning","text":"hm"},{"type":"text","text":"second"},{"type":"text","text":""}]"#,
    )
    .await;
    assert_eq!(summary(c, id).await, (n0 + 1, Some("second".into())));
    // No text, user-only: counted, preview kept.
    let b = insert(
        c,
        id,
        "user",
        r#"[{"type":"tool-call","tool_call_id":"x","tool_name":"t","args":"{}"}]"#,
    )
    .await;
    assert_eq!(summary(c, id).await, (n0 + 2, Some("second".into())));
    // Model-only text: neither.
    let hidden = insert(c, id, "model", r#"[{"type":"text","text":"summary"}]"#).await;
    assert_eq!(summary(c, id).await, (n0 + 2, Some("second".into())));
    // Revealing it counts it and makes it the preview; hiding it again undoes both.
    exec(
        c,
        "UPDATE chat_messages SET visibility = 'both' WHERE id = $1",
        hidden,
    )
    .await;
    assert_eq!(summary(c, id).await, (n0 + 3, Some("summary".into())));
    exec(
        c,
        "UPDATE chat_messages SET visibility = 'model' WHERE id = $1",
        hidden,
    )
    .await;
    assert_eq!(summary(c, id).await, (n0 + 2, Some("second".into())));
    // A content change of the preview's source, then of an older row.
    exec(c, r#"UPDATE chat_messages SET content = '[{"type":"text","text":"rewritten"}]' WHERE id = $1"#, a).await;
    assert_eq!(summary(c, id).await, (n0 + 2, Some("rewritten".into())));
    exec(c, r#"UPDATE chat_messages SET content = '[{"type":"tool-call","tool_call_id":"y","tool_name":"t","args":"{}"}]' WHERE id = $1"#, a).await;
    assert_eq!(summary(c, id).await, recount(c, id).await);
    assert_eq!(summary(c, id).await.0, n0 + 2);
    // A later text row gains text: it is the preview.
    exec(
        c,
        r#"UPDATE chat_messages SET content = '[{"type":"text","text":"from b"}]' WHERE id = $1"#,
        b,
    )
    .await;
    assert_eq!(summary(c, id).await, (n0 + 2, Some("from b".into())));

    // Long texts are cut at 200 characters.
    insert(
        c,
        id,
        "both",
        &format!(r#"[{{"type":"text","text":"{}"}}]"#, "ü".repeat(250)),
    )
    .await;
    assert_eq!(summary(c, id).await, (n0 + 3, Some("ü".repeat(200))));

    // A multi-row soft delete (what an edit does) from `b` on.
    for i in 0..5 {
        insert(
            c,
            id,
            "both",
            &format!(r#"[{{"type":"text","text":"t{i}"}}]"#),
        )
        .await;
    }
    assert_eq!(summary(c, id).await, (n0 + 8, Some("t4".into())));
    exec(c, "UPDATE chat_messages SET deleted = true WHERE chat_id = (SELECT chat_id FROM chat_messages WHERE id = $1) AND id >= $1", b).await;
    assert_eq!(summary(c, id).await, recount(c, id).await);
    assert_eq!(summary(c, id).await.0, n0 + 1);
    // Deleting every visible row empties the preview.
    exec(c, "UPDATE chat_messages SET deleted = true WHERE chat_id = (SELECT chat_id FROM chat_messages WHERE id = $1)", a).await;
    assert_eq!(summary(c, id).await, (0, None));
    tx.commit().await.unwrap();
}
