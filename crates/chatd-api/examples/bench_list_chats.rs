//! Benchmark: `GET /api/v2/chats` latency does not grow with the number of
//! messages per chat (API.md "Message windows and paging by size": the list
//! never reads message bodies; `message_count` and `last_message_preview`
//! are columns).
//!
//! Two fresh databases, each with `--chats` chats of one user: one with
//! `--small` messages per chat, one with `--large`. Each is served by the
//! real router on a local port; the benchmark times `--requests` sequential
//! `GET /api/v2/chats?limit=100` over HTTP and prints the p50 and p95 of
//! both and the ratio of the p50s. For comparison it also times the list
//! query a naive implementation would run (counting each chat's visible
//! messages and finding its preview at read time), straight in SQL.
//!
//! ```text
//! cargo run --release -p chatd-api --example bench_list_chats -- \
//!     [--chats 1000] [--small 10] [--large 1000] [--requests 300]
//! ```
//! Uses `CHATD_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) to create and drop its
//! databases. The messages are bulk-inserted with triggers off (1,000,000
//! rows would otherwise take minutes) and the columns are then filled by
//! the same statement as the migration's backfill.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_api::{ApiOptions, AppState};
use chatd_pubsub::RecordingPublisher;
use chatd_store::{MIGRATOR, Store};
use chatd_testkit::TestDatabase;
use uuid::Uuid;

struct Args {
    chats: i64,
    small: i64,
    large: i64,
    requests: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        chats: 1000,
        small: 10,
        large: 1000,
        requests: 300,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--chats" => args.chats = value.parse().expect("--chats"),
            "--small" => args.small = value.parse().expect("--small"),
            "--large" => args.large = value.parse().expect("--large"),
            "--requests" => args.requests = value.parse().expect("--requests"),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// The p50 and p95 of `samples`.
fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.95))
}

struct Figures {
    api: (Duration, Duration),
    naive: (Duration, Duration),
}

/// Fills a fresh database with `chats` chats of `per_chat` messages and
/// times the list route and the naive query.
async fn run(chats: i64, per_chat: i64, requests: usize) -> anyhow::Result<Figures> {
    let db = TestDatabase::new(&MIGRATOR).await?;
    let pool = db.pool().clone();
    let token = chatd_api::create_token(&pool, "bench", false).await?;
    let owner: Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = 'bench'")
        .fetch_one(&pool)
        .await?;
    let started = Instant::now();
    sqlx::query(
        "INSERT INTO chats (id, owner_id, status, title, updated_at)
         SELECT gen_random_uuid(), $1, 'waiting', 'chat ' || g, now() - make_interval(secs => g)
         FROM generate_series(1, $2) g",
    )
    .bind(owner)
    .bind(chats)
    .execute(&pool)
    .await?;
    // Messages of ~300 bytes of text, alternating user and assistant.
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO chat_messages (chat_id, role, content, revision)
         SELECT c.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
                jsonb_build_array(jsonb_build_object('type', 'text', 'text', 'message ' || g || ' ' || repeat('lorem ipsum ', 25))),
                1
         FROM chats c CROSS JOIN generate_series(1, $1) g",
    )
    .bind(per_chat)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    // The migration's backfill (0005_message_windows.sql).
    sqlx::query(
        "UPDATE chats c
         SET message_count = v.n, last_message_preview = p.preview, last_message_preview_id = p.id
         FROM (SELECT c2.id AS chat_id,
                      (SELECT count(*) FROM chat_messages m
                       WHERE m.chat_id = c2.id AND NOT m.deleted AND m.visibility <> 'model') AS n
               FROM chats c2) v
         LEFT JOIN LATERAL (
             SELECT q.preview, q.id FROM (
                 SELECT chat_message_preview(m.content) AS preview, m.id FROM chat_messages m
                 WHERE m.chat_id = v.chat_id AND NOT m.deleted AND m.visibility <> 'model'
                 ORDER BY m.id DESC) q
             WHERE q.preview IS NOT NULL LIMIT 1) p ON true
         WHERE c.id = v.chat_id",
    )
    .execute(&pool)
    .await?;
    sqlx::query("VACUUM ANALYZE chats").execute(&pool).await?;
    sqlx::query("VACUUM ANALYZE chat_messages")
        .execute(&pool)
        .await?;
    let size: String =
        sqlx::query_scalar("SELECT pg_size_pretty(pg_total_relation_size('chat_messages'))")
            .fetch_one(&pool)
            .await?;
    println!(
        "  {chats} chats x {per_chat} messages: filled in {:.1} s, chat_messages {size}",
        started.elapsed().as_secs_f64()
    );

    let store = Store::new(pool.clone(), Arc::new(RecordingPublisher::new()));
    // A benchmark sends more requests a minute than the default request
    // rate (API.md "Request rate"), which it does not measure.
    let unlimited = chatd_core::limits::LimitDefaults {
        requests_per_minute: i32::MAX,
        ..Default::default()
    };
    let options = ApiOptions {
        limits: unlimited,
        ..ApiOptions::default()
    };
    let app = chatd_api::router(AppState::new(store, options));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/api/v2/chats?limit=100");
    let mut samples = Vec::with_capacity(requests);
    for i in 0..requests + 20 {
        let t = Instant::now();
        let answer = http.get(&url).bearer_auth(&token).send().await?;
        anyhow::ensure!(answer.status() == 200, "GET /chats: {}", answer.status());
        let body: serde_json::Value = answer.json().await?;
        let elapsed = t.elapsed();
        let list = body.as_array().expect("an array");
        anyhow::ensure!(list.len() == 100 && list[0]["message_count"] == per_chat);
        // The first 20 warm the caches and the connection pool.
        if i >= 20 {
            samples.push(elapsed);
        }
    }
    server.abort();

    let naive_sql = "SELECT c.*,
            (SELECT count(*) FROM chat_messages m
             WHERE m.chat_id = c.id AND NOT m.deleted AND m.visibility <> 'model') AS n,
            (SELECT chat_message_preview(m.content) FROM chat_messages m
             WHERE m.chat_id = c.id AND NOT m.deleted AND m.visibility <> 'model'
             ORDER BY m.id DESC LIMIT 1) AS preview
         FROM chats c WHERE c.owner_id = $1 AND NOT c.archived
         ORDER BY c.updated_at DESC, c.id DESC LIMIT 100";
    let mut naive = Vec::with_capacity(requests / 3);
    for i in 0..requests / 3 + 5 {
        let t = Instant::now();
        let rows = sqlx::query(naive_sql).bind(owner).fetch_all(&pool).await?;
        anyhow::ensure!(rows.len() == 100);
        if i >= 5 {
            naive.push(t.elapsed());
        }
    }
    Ok(Figures {
        api: percentiles(samples),
        naive: percentiles(naive),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args();
    println!(
        "GET /api/v2/chats?limit=100, {} sequential requests per database",
        args.requests
    );
    let small = run(args.chats, args.small, args.requests).await?;
    let large = run(args.chats, args.large, args.requests).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!();
    println!("| messages per chat | GET /chats p50 | p95 | naive count-at-read p50 |");
    println!("|---|---|---|---|");
    for (n, f) in [(args.small, &small), (args.large, &large)] {
        println!(
            "| {n} | {:.2} ms | {:.2} ms | {:.2} ms |",
            ms(f.api.0),
            ms(f.api.1),
            ms(f.naive.0)
        );
    }
    println!();
    println!(
        "p50 ratio ({} / {} messages per chat): GET /chats {:.2}x, naive query {:.2}x",
        args.large,
        args.small,
        ms(large.api.0) / ms(small.api.0),
        ms(large.naive.0) / ms(small.naive.0)
    );
    Ok(())
}
