//! The usage ledger (migration `0013_usage_ledger.sql`, API.md "Limits,
//! budgets and the token lifecycle"): a message that stores a model call's
//! usage is counted for its chat's owner in the transaction that commits
//! it, concurrent commits of one user are all counted, a rolled-back commit
//! counts nothing, and the migration counts the month's existing history
//! once.

use std::borrow::Cow;

use chatd_store::MIGRATOR;
use chatd_store::internals::usage;
use chatd_testkit::TestDatabase;
use sqlx::PgPool;
use uuid::Uuid;

use crate::common::Harness;

/// Inserts an assistant message of chat `chat_id` carrying usage, as a
/// committed model answer does.
async fn insert_answer(
    conn: impl sqlx::PgExecutor<'_>,
    chat_id: Uuid,
    (cost, input, cached, output): (Option<i64>, i64, i64, i64),
) {
    sqlx::query(
        "INSERT INTO chat_messages (chat_id, role, content, input_tokens, cache_read_tokens,
             output_tokens, total_cost_micros)
         VALUES ($1, 'assistant', '[]'::jsonb, $2, $3, $4, $5)",
    )
    .bind(chat_id)
    .bind(input)
    .bind(cached)
    .bind(output)
    .bind(cost)
    .execute(conn)
    .await
    .unwrap();
}

async fn totals(pool: &PgPool, user: Uuid) -> (i64, i64, i64) {
    let u = usage::of_user(pool, user).await.unwrap().unwrap().usage;
    (u.spent_micros, u.input_tokens, u.output_tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_with_usage_count_for_the_owner_and_a_rollback_counts_nothing() {
    let h = Harness::new().await;
    let chat = h.create().await;
    insert_answer(h.pool(), chat, (Some(30), 10, 5, 7)).await;
    // A model without prices: tokens only.
    insert_answer(h.pool(), chat, (None, 1, 0, 2)).await;
    // A user message carries no usage.
    sqlx::query("INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'user', '[]')")
        .bind(chat)
        .execute(h.pool())
        .await
        .unwrap();
    assert_eq!(totals(h.pool(), h.owner).await, (30, 16, 9));
    // Usage written later counts its difference.
    sqlx::query(
        "UPDATE chat_messages SET output_tokens = output_tokens + 4
         WHERE id = (SELECT max(id) FROM chat_messages WHERE chat_id = $1 AND role = 'assistant')",
    )
    .bind(chat)
    .execute(h.pool())
    .await
    .unwrap();
    assert_eq!(totals(h.pool(), h.owner).await, (30, 16, 13));
    let mut tx = h.pool().begin().await.unwrap();
    insert_answer(&mut *tx, chat, (Some(1_000), 1_000, 0, 1_000)).await;
    tx.rollback().await.unwrap();
    assert_eq!(totals(h.pool(), h.owner).await, (30, 16, 13));
    // Deleting the chat gives nothing back.
    sqlx::query("DELETE FROM chats WHERE id = $1")
        .bind(chat)
        .execute(h.pool())
        .await
        .unwrap();
    assert_eq!(totals(h.pool(), h.owner).await, (30, 16, 13));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_of_one_user_are_all_counted() {
    const CHATS: usize = 12;
    const TASKS: usize = 24;
    const COMMITS: i64 = 20;
    let h = Harness::new().await;
    let mut chats = Vec::new();
    for _ in 0..CHATS {
        chats.push(h.create().await);
    }
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let pool = h.pool().clone();
            let chat = chats[t % CHATS];
            tokio::spawn(async move {
                for _ in 0..COMMITS {
                    // Two answers per transaction, as a step with a tool
                    // result and its answer would carry.
                    let mut tx = pool.begin().await.unwrap();
                    insert_answer(&mut *tx, chat, (Some(3), 2, 0, 1)).await;
                    insert_answer(&mut *tx, chat, (Some(3), 2, 0, 1)).await;
                    tx.commit().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let n = TASKS as i64 * COMMITS * 2;
    assert_eq!(totals(h.pool(), h.owner).await, (3 * n, 2 * n, n));
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM user_usage WHERE user_id = $1")
        .bind(h.owner)
        .fetch_one(h.pool())
        .await
        .unwrap();
    assert!((1..=16).contains(&rows), "{rows} shard rows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_counts_this_months_existing_history_once() {
    // A database as it was before the ledger, with history.
    let before = sqlx::migrate::Migrator {
        migrations: Cow::Owned(
            MIGRATOR
                .migrations
                .iter()
                .filter(|m| m.version < 13)
                .cloned()
                .collect(),
        ),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    let db = TestDatabase::new(&before).await.unwrap();
    let pool = db.pool();
    let (owner, chat) = (Uuid::new_v4(), Uuid::new_v4());
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'old', 'member')")
        .bind(owner)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO chats (id, owner_id, status) VALUES ($1, $2, 'waiting')")
        .bind(chat)
        .bind(owner)
        .execute(pool)
        .await
        .unwrap();
    insert_answer(pool, chat, (Some(50), 20, 10, 5)).await;
    insert_answer(pool, chat, (Some(9_999), 9_999, 0, 9_999)).await;
    // The second answer is from last month.
    sqlx::query(
        "UPDATE chat_messages SET created_at = date_trunc('month', now(), 'UTC') - interval '1 day'
         WHERE chat_id = $1 AND total_cost_micros = 9999",
    )
    .bind(chat)
    .execute(pool)
    .await
    .unwrap();

    MIGRATOR.run(pool).await.unwrap();
    assert_eq!(totals(pool, owner).await, (50, 30, 5));
    // From now on the trigger counts, once.
    insert_answer(pool, chat, (Some(1), 1, 0, 1)).await;
    assert_eq!(totals(pool, owner).await, (51, 31, 6));
}
