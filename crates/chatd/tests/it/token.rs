//! `chatd token create` against `--postgres-url` (API.md,
//! "Authentication"). The embedded variants are in `embedded.rs`.

use chatd_testkit::TestDatabase;

use crate::support::{Chatd, create_token, http};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_create_prints_a_token_that_authenticates_as_the_user() -> anyhow::Result<()> {
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let alice = create_token("alice", false, &["--postgres-url", db.url()]).await?;
    let root = create_token("root", true, &["--postgres-url", db.url()]).await?;
    assert_ne!(alice, root);

    let mut server = Chatd::start(&["--postgres-url", db.url()]).await?;
    let client = http();
    for (token, username, role) in [(&alice, "alice", "member"), (&root, "root", "admin")] {
        let me = server.get_json("/api/v2/users/me", token).await?;
        assert_eq!(me["username"], username);
        assert_eq!(me["role"], role);
    }
    let wrong = client
        .get(format!("{}/api/v2/users/me", server.url()))
        .bearer_auth(format!("{alice}x"))
        .send()
        .await?;
    assert_eq!(wrong.status(), 401);

    // The clear token is never stored.
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_keys WHERE position(convert_to($1, 'UTF8') in secret_hash) > 0",
    )
    .bind(&alice)
    .fetch_one(db.pool())
    .await?;
    assert_eq!(stored, 0);

    assert_eq!(server.terminate().await?.code(), Some(0));
    Ok(())
}
