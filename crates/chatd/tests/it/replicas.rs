//! `chatd serve --postgres-url`: several replicas on one database share one
//! relay secret, register themselves in `replicas`, refresh `last_seen_at`
//! and remove their row on SIGTERM (API.md, "Running a replica", "Workers
//! and replicas").

use std::collections::BTreeSet;
use std::time::Duration;

use chatd_testkit::TestDatabase;

use serde_json::Value;

use crate::support::{ADMIN_TOKEN, Chatd, http, row_count};

async fn replica_urls(db: &TestDatabase) -> anyhow::Result<BTreeSet<String>> {
    let urls: Vec<String> = sqlx::query_scalar("SELECT advertise_url FROM replicas")
        .fetch_all(db.pool())
        .await?;
    Ok(urls.into_iter().collect())
}

/// `last_seen_at` of the replica at `url`, in seconds since the epoch.
async fn last_seen(db: &TestDatabase, url: &str) -> anyhow::Result<f64> {
    Ok(sqlx::query_scalar(
        "SELECT extract(epoch FROM last_seen_at)::float8 FROM replicas WHERE advertise_url = $1",
    )
    .bind(url)
    .fetch_one(db.pool())
    .await?)
}

/// How many of `servers` logged a line containing `needle`.
fn logged_by(servers: &[&Chatd], needle: &str) -> usize {
    servers
        .iter()
        .filter(|s| s.log().iter().any(|l| l.contains(needle)))
        .count()
}

/// A `chatd serve --no-worker` on `db` refreshing its `last_seen_at` every
/// 100 ms, with `extra` arguments appended.
async fn start_without_worker(db: &TestDatabase, extra: &[&str]) -> anyhow::Result<Chatd> {
    let mut args = vec![
        "--postgres-url",
        db.url(),
        "--no-worker",
        "--heartbeat-interval",
        "100ms",
    ];
    args.extend_from_slice(extra);
    Chatd::start(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_one_database_share_the_relay_secret_and_deregister_on_sigterm()
-> anyhow::Result<()> {
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let args = ["--postgres-url", db.url(), "--heartbeat-interval", "200ms"];

    // Both start at the same time, racing to generate the relay secret.
    let (a, b) = tokio::join!(Chatd::start(&args), Chatd::start(&args));
    let (mut a, mut b) = (a?, b?);

    let secrets = row_count(&db, "cluster_settings WHERE key = 'relay_secret'").await?;
    assert_eq!(secrets, 1);
    let secret: String =
        sqlx::query_scalar("SELECT value FROM cluster_settings WHERE key = 'relay_secret'")
            .fetch_one(db.pool())
            .await?;
    assert_eq!(secret.len(), 64, "256 bits, hex");
    let generated = logged_by(&[&a, &b], "relay secret: generated");
    let read = logged_by(&[&a, &b], "relay secret: read from the database");
    assert_eq!(
        (generated, read),
        (1, 1),
        "one replica generated it, the other read it"
    );

    assert_eq!(
        replica_urls(&db).await?,
        BTreeSet::from([a.url(), b.url()]),
        "both replicas registered with their bound addresses"
    );
    for server in [&a, &b] {
        let ready = http()
            .get(format!("{}/readyz", server.url()))
            .send()
            .await?;
        assert_eq!(ready.status(), 200);
    }
    // GET /api/v2/replicas lists both, each under the id its log names.
    let listed: Vec<Value> =
        serde_json::from_value(b.get_json("/api/v2/replicas", ADMIN_TOKEN).await?)?;
    assert_eq!(listed.len(), 2, "{listed:?}");
    for server in [&a, &b] {
        let entry = listed
            .iter()
            .find(|r| r["advertise_url"] == server.url().as_str())
            .expect("listed");
        let id = entry["id"].as_str().expect("id");
        assert!(
            server
                .log()
                .iter()
                .any(|l| l.contains("listening on") && l.contains(id)),
            "replica id {id} in the `listening on` line"
        );
    }

    // last_seen_at advances with the heartbeat interval.
    let before = last_seen(&db, &a.url()).await?;
    let mut advanced = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if last_seen(&db, &a.url()).await? > before {
            advanced = true;
            break;
        }
    }
    assert!(advanced, "last_seen_at was not refreshed");

    let status = a.terminate().await?;
    assert_eq!(status.code(), Some(0), "log:\n{}", a.log().join("\n"));
    assert_eq!(replica_urls(&db).await?, BTreeSet::from([b.url()]));

    // A restarted replica reads the same secret and gets a new id.
    let mut c = Chatd::start(&args).await?;
    assert!(
        c.log()
            .iter()
            .any(|l| l.contains("relay secret: read from the database"))
    );
    let secret_after: String =
        sqlx::query_scalar("SELECT value FROM cluster_settings WHERE key = 'relay_secret'")
            .fetch_one(db.pool())
            .await?;
    assert_eq!(secret_after, secret);
    assert_eq!(replica_urls(&db).await?, BTreeSet::from([b.url(), c.url()]));

    for server in [&mut b, &mut c] {
        let status = server.terminate().await?;
        assert_eq!(status.code(), Some(0));
    }
    assert!(
        replica_urls(&db).await?.is_empty(),
        "every replica removed its row"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_relay_secret_is_used_and_not_stored() -> anyhow::Result<()> {
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let mut server = Chatd::start(&[
        "--postgres-url",
        db.url(),
        "--relay-secret",
        "operator-chosen-secret",
    ])
    .await?;
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("relay secret: from --relay-secret"))
    );
    assert!(
        !server
            .log()
            .iter()
            .any(|l| l.contains("operator-chosen-secret")),
        "the secret is never logged"
    );
    let stored = row_count(&db, "cluster_settings").await?;
    assert_eq!(stored, 0);
    assert_eq!(server.terminate().await?.code(), Some(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_replicas_gone_silent_are_pruned_unless_they_still_own_a_chat() -> anyhow::Result<()>
{
    let db = TestDatabase::new(&chatd_store::MIGRATOR).await?;
    let insert = |url: &'static str, minutes_ago: i32| {
        let pool = db.pool().clone();
        async move {
            let id = uuid::Uuid::new_v4();
            sqlx::query(
                "INSERT INTO replicas (id, advertise_url, last_seen_at)
                 VALUES ($1, $2, now() - make_interval(mins => $3))",
            )
            .bind(id)
            .bind(url)
            .bind(minutes_ago)
            .execute(&pool)
            .await?;
            anyhow::Ok(id)
        }
    };
    insert("http://crashed.invalid", 120).await?;
    let owner = insert("http://crashed-owner.invalid", 120).await?;
    insert("http://quiet.invalid", 30).await?;
    // A chat the second crashed replica still owns: its lease must expire
    // and another replica take the chat before its row may go.
    let user = uuid::Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'bob', 'member')")
        .bind(user)
        .execute(db.pool())
        .await?;
    let owned_chat = |status: &'static str, worker: uuid::Uuid| {
        let pool = db.pool().clone();
        async move {
            sqlx::query(
                "INSERT INTO chats (id, owner_id, status, worker_id, runner_id)
                 VALUES (gen_random_uuid(), $1, $2, $3, gen_random_uuid())",
            )
            .bind(user)
            .bind(status)
            .bind(worker)
            .execute(&pool)
            .await
        }
    };
    owned_chat("running", owner).await?;
    // A chat left idle with a crashed replica's worker_id (it died between
    // the end of a turn and the abandon) does not keep that row.
    let idle_owner = insert("http://crashed-idle-owner.invalid", 120).await?;
    owned_chat("waiting", idle_owner).await?;

    let mut server = start_without_worker(&db, &[]).await?;
    let expected = BTreeSet::from([
        "http://crashed-owner.invalid".to_owned(),
        "http://quiet.invalid".to_owned(),
        server.url(),
    ]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while replica_urls(&db).await? != expected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the crashed replica's row is still there: {:?}",
            replica_urls(&db).await?
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A live replica taken for dead (its row aged as if it had been cut off
    // from the database) gets its row back with its next refresh, whoever
    // pruned it meanwhile.
    let mut other = start_without_worker(&db, &[]).await?;
    for _ in 0..5 {
        sqlx::query("UPDATE replicas SET last_seen_at = now() - interval '2 hours' WHERE advertise_url = $1")
            .bind(server.url())
            .execute(db.pool())
            .await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let age: Option<f64> = sqlx::query_scalar(
            "SELECT extract(epoch FROM now() - last_seen_at)::float8 FROM replicas WHERE advertise_url = $1",
        )
        .bind(server.url())
        .fetch_optional(db.pool())
        .await?;
        if age.is_some_and(|age| age < 5.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the live replica's row did not come back: {age:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(other.terminate().await?.success());
    assert!(server.terminate().await?.success());

    // `off` keeps every row.
    insert("http://crashed-again.invalid", 120).await?;
    let mut server = start_without_worker(&db, &["--prune-replicas-after", "off"]).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        replica_urls(&db)
            .await?
            .contains("http://crashed-again.invalid")
    );
    assert!(server.terminate().await?.success());
    Ok(())
}
