//! The files sweep loop (API.md "Limits, budgets and the token lifecycle":
//! files linked to no chat are deleted 24 h after upload): a worker runs it
//! at its configured interval with its configured age, and it deletes only
//! unlinked files older than that age. What one pass deletes, and its races
//! with sends, are tested against the API in `chatd-api`'s `files` tests.

use std::time::{Duration, Instant};

use chatd_store::files;
use chatd_worker::WorkerConfig;
use uuid::Uuid;

use crate::common::{Env, fast_config};

async fn exists(env: &Env, id: Uuid) -> bool {
    files::select(env.db.pool(), id).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sweeps_unlinked_files_past_the_configured_age_at_its_interval() {
    let env = Env::new().await;
    let worker = env.worker_with(WorkerConfig {
        unlinked_file_ttl: Duration::from_secs(3600),
        files_sweep_interval: Duration::from_millis(100),
        ..fast_config()
    });
    let chat = env.create_chat("hi").await;
    let (young, old, old_linked) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    for id in [young, old, old_linked] {
        let stored = files::store_upload(
            env.db.pool(),
            id,
            env.owner,
            "f.txt",
            "text/plain",
            0,
            i64::MAX,
            futures::stream::empty::<Result<Vec<u8>, std::convert::Infallible>>(),
        )
        .await
        .unwrap();
        assert!(matches!(stored, files::UploadOutcome::Stored(_)));
    }
    // Linked as a message attaching it would (the store's `files::link`).
    sqlx::query("UPDATE chat_files SET chat_id = $1 WHERE id = $2")
        .bind(chat)
        .bind(old_linked)
        .execute(env.db.pool())
        .await
        .unwrap();
    // Backdated after the worker's first pass may have run: a later pass,
    // at the configured interval, must find it.
    sqlx::query("UPDATE chat_files SET created_at = now() - interval '2 hours' WHERE id = ANY($1)")
        .bind([old, old_linked])
        .execute(env.db.pool())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while exists(&env, old).await {
        assert!(
            Instant::now() < deadline,
            "the sweep never deleted the old file"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(exists(&env, young).await);
    assert!(exists(&env, old_linked).await);
    worker.shutdown().await;
}
