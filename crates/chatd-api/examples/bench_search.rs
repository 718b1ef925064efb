//! Benchmark: `GET /api/v2/search` (full-text search over messages,
//! migration `0019_message_search.sql`) against the chat list's title
//! filter `GET /api/v2/chats?q=` measured in the same run, over the same
//! data: `--chats` chats of one user with `--per-chat` messages each
//! (default 1,000 x 100 = 100,000 messages of 40 words drawn from a
//! 5,000-word vocabulary with a skewed frequency, so terms range from
//! common to rare), plus the same again for a second user (whose chats a
//! search must skip).
//!
//! Served by the real router on a local port; times `--requests`
//! sequential requests of each kind over HTTP (after 20 warm-up requests),
//! cycling through queries of different frequencies, and prints the p50
//! and p99 of each and the ratio search / title filter.
//!
//! ```text
//! cargo run --release -p chatd-api --example bench_search -- \
//!     [--chats 1000] [--per-chat 100] [--requests 300]
//! ```
//! Uses `CHATD_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) to create and drop its
//! database. Messages are bulk-inserted with triggers off; the generated
//! `search_tsv` column is computed all the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd_api::{ApiOptions, AppState};
use chatd_pubsub::RecordingPublisher;
use chatd_store::{MIGRATOR, Store};
use chatd_testkit::TestDatabase;
use uuid::Uuid;

struct Args {
    chats: i64,
    per_chat: i64,
    requests: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        chats: 1000,
        per_chat: 100,
        requests: 300,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--chats" => args.chats = value.parse().expect("--chats"),
            "--per-chat" => args.per_chat = value.parse().expect("--per-chat"),
            "--requests" => args.requests = value.parse().expect("--requests"),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// The p50 and p99 of `samples`.
fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

/// Inserts `chats` chats of `owner` with `per_chat` messages each.
async fn fill(pool: &sqlx::PgPool, owner: Uuid, chats: i64, per_chat: i64) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO chats (id, owner_id, status, title, updated_at)
         SELECT gen_random_uuid(), $1, 'waiting',
                'chat ' || g || ' about w' || floor(power(random(), 3) * 5000)::int,
                now() - make_interval(secs => g)
         FROM generate_series(1, $2) g",
    )
    .bind(owner)
    .bind(chats)
    .execute(pool)
    .await?;
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await?;
    // 40 words per message; word k has probability ~ k^(-2/3) (power 3 of
    // a uniform draw), so w0..w10 are in most messages and w4000+ in few.
    sqlx::query(
        "INSERT INTO chat_messages (chat_id, role, content, revision)
         SELECT c.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
                jsonb_build_array(jsonb_build_object('type', 'text', 'text',
                    (SELECT string_agg('w' || floor(power(random(), 3) * 5000)::int, ' ')
                     FROM generate_series(1, 40) x WHERE g IS NOT NULL AND c.id IS NOT NULL))),
                1
         FROM chats c CROSS JOIN generate_series(1, $1) g
         WHERE c.owner_id = $2",
    )
    .bind(per_chat)
    .bind(owner)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Times `requests` sequential GETs of `paths` (cycled) after 20 warm-ups.
async fn time_gets(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    paths: &[String],
    requests: usize,
) -> anyhow::Result<(Duration, Duration, usize)> {
    let mut samples = Vec::with_capacity(requests);
    let mut found = 0;
    for i in 0..requests + 20 {
        let path = &paths[i % paths.len()];
        let t = Instant::now();
        let answer = http
            .get(format!("{base}{path}"))
            .bearer_auth(token)
            .send()
            .await?;
        anyhow::ensure!(answer.status() == 200, "GET {path}: {}", answer.status());
        let body: serde_json::Value = answer.json().await?;
        let elapsed = t.elapsed();
        if i >= 20 {
            samples.push(elapsed);
            found += body["results"]
                .as_array()
                .or(body.as_array())
                .map_or(0, Vec::len);
        }
    }
    let (p50, p99) = percentiles(samples);
    Ok((p50, p99, found))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let db = TestDatabase::new(&MIGRATOR).await?;
    let pool = db.pool().clone();
    let token = chatd_api::create_token(&pool, "bench", false).await?;
    chatd_api::create_token(&pool, "other", false).await?;
    let owner: Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = 'bench'")
        .fetch_one(&pool)
        .await?;
    let other: Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = 'other'")
        .fetch_one(&pool)
        .await?;
    let started = Instant::now();
    fill(&pool, owner, args.chats, args.per_chat).await?;
    fill(&pool, other, args.chats, args.per_chat).await?;
    sqlx::query("VACUUM ANALYZE chats").execute(&pool).await?;
    sqlx::query("VACUUM ANALYZE chat_messages")
        .execute(&pool)
        .await?;
    let (size, index): (String, String) = sqlx::query_as(
        "SELECT pg_size_pretty(pg_total_relation_size('chat_messages')),
                pg_size_pretty(pg_relation_size('chat_messages_search_idx'))",
    )
    .fetch_one(&pool)
    .await?;
    println!(
        "{} messages of the searching user ({} chats x {}), as many of another user; filled in {:.1} s; chat_messages {size}, search index {index}",
        args.chats * args.per_chat,
        args.chats,
        args.per_chat,
        started.elapsed().as_secs_f64()
    );

    let store = Store::new(pool.clone(), Arc::new(RecordingPublisher::new()));
    let options = ApiOptions {
        limits: chatd_core::limits::LimitDefaults {
            requests_per_minute: i32::MAX,
            ..Default::default()
        },
        ..ApiOptions::default()
    };
    let app = chatd_api::router(AppState::new(store, options));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");

    // Terms from common to rare, one and two words.
    let terms = ["w3", "w40", "w400", "w2500", "w4900", "w40 w400", "w12 -w3"];
    let search: Vec<String> = terms
        .iter()
        .map(|t| format!("/api/v2/search?q={}&limit=20", t.replace(' ', "%20")))
        .collect();
    let titles: Vec<String> = ["w3", "w40", "w400", "w2500", "w4900", "chat 1", "about"]
        .iter()
        .map(|t| format!("/api/v2/chats?q={}&limit=20", t.replace(' ', "%20")))
        .collect();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!();
    println!("| query | search p50 | p99 | results/page |");
    println!("|---|---|---|---|");
    for (term, path) in terms.iter().zip(&search) {
        let (p50, p99, found) = time_gets(
            &http,
            &base,
            &token,
            std::slice::from_ref(path),
            args.requests / 5,
        )
        .await?;
        println!(
            "| `{term}` | {:.2} ms | {:.2} ms | {:.1} |",
            ms(p50),
            ms(p99),
            found as f64 / (args.requests / 5) as f64
        );
    }
    let (s50, s99, _) = time_gets(&http, &base, &token, &search, args.requests).await?;
    let (t50, t99, _) = time_gets(&http, &base, &token, &titles, args.requests).await?;
    server.abort();
    println!();
    println!(
        "{} requests each, queries cycled: search p50 {:.2} ms, p99 {:.2} ms; title filter (GET /chats?q=) p50 {:.2} ms, p99 {:.2} ms",
        args.requests,
        ms(s50),
        ms(s99),
        ms(t50),
        ms(t99)
    );
    println!(
        "ratio search / title filter: p50 {:.2}x, p99 {:.2}x",
        ms(s50) / ms(t50),
        ms(s99) / ms(t99)
    );
    Ok(())
}
