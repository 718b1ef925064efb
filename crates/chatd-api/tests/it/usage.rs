//! Budgets and usage (API.md "Limits, budgets and the token lifecycle"):
//! `GET /users/{user}/usage` (shape, permissions, bad input), and a chat
//! creation, send or edit by an owner at or over a budget answering `429`
//! with the budget in `detail` and changing nothing.

use chatd_api::ApiOptions;
use chatd_core::ExecutionState;
use chatd_core::limits::LimitDefaults;
use chatd_store::usage;
use chrono::{DateTime, Months, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::*;

/// The current period's first instant, database time.
async fn period_start(s: &Server) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT date_trunc('month', now(), 'UTC')")
        .fetch_one(s.pool())
        .await
        .unwrap()
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .unwrap_or_else(|| panic!("not a time: {v}"))
        .with_timezone(&Utc)
}

async fn set_budgets(s: &Server, user: &User, micros: Option<i64>, tokens: Option<i64>) {
    sqlx::query(
        "UPDATE users SET monthly_budget_micros = $2, monthly_token_budget = $3 WHERE id = $1",
    )
    .bind(user.id)
    .bind(micros)
    .bind(tokens)
    .execute(s.pool())
    .await
    .unwrap();
}

/// Counts a model call of `chat` in its owner's ledger.
async fn spend(s: &Server, chat: Uuid, micros: i64, input: i64, output: i64) {
    usage::add(s.pool(), chat, micros, input, output)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reports_the_period_spend_tokens_running_chats_storage_and_limits() {
    let s = Server::start().await;
    let held = s.create_chat(&s.alice).await;
    let _idle = s.chat_in(&s.alice, ExecutionState::W).await;
    let _not_held = s.create_chat(&s.alice).await;
    // A runner holds `held`.
    sqlx::query("UPDATE chats SET worker_id = $2 WHERE id = $1")
        .bind(held)
        .bind(Uuid::new_v4())
        .execute(s.pool())
        .await
        .unwrap();
    let upload = s
        .raw(
            "POST",
            "/api/v2/files?name=a.json",
            Some(&s.alice.token),
            Some(br#"{"a": 1}"#.to_vec()),
        )
        .await;
    upload.expect(201);
    spend(&s, held, 1_500, 100, 40).await;
    spend(&s, held, 500, 10, 2).await;

    let start = period_start(&s).await;
    let answer = s.get("/api/v2/users/me/usage", &s.alice).await;
    let body = answer.expect(200);
    assert_eq!(time(&body["period_start"]), start);
    assert_eq!(
        time(&body["period_end"]),
        start.checked_add_months(Months::new(1)).unwrap()
    );
    assert_eq!(body["spent_micros"], 2_000);
    assert_eq!(body["input_tokens"], 110);
    assert_eq!(body["output_tokens"], 42);
    assert_eq!(body["running_chats"], 1);
    assert_eq!(body["storage_bytes"], 8);
    assert_eq!(
        body["limits"],
        json!({
            "max_running_chats": 8,
            "requests_per_minute": 600,
            "monthly_budget_micros": null,
            "monthly_token_budget": null,
            "max_storage_bytes": 1_073_741_824i64,
        })
    );
    let mut keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "input_tokens",
            "limits",
            "output_tokens",
            "period_end",
            "period_start",
            "running_chats",
            "spent_micros",
            "storage_bytes"
        ]
    );

    // An override shows in the limits; an admin sees the same report.
    set_budgets(&s, &s.alice, Some(5_000), None).await;
    let by_admin = s
        .get(&format!("/api/v2/users/{}/usage", s.alice.id), &s.admin)
        .await;
    let by_admin = by_admin.expect(200);
    assert_eq!(by_admin["limits"]["monthly_budget_micros"], 5_000);
    assert_eq!(by_admin["spent_micros"], 2_000);
    // Bob's period is his own.
    let bobs = s.get("/api/v2/users/me/usage", &s.bob).await;
    let bobs = bobs.expect(200);
    assert_eq!(
        (
            &bobs["spent_micros"],
            &bobs["input_tokens"],
            &bobs["running_chats"],
            &bobs["storage_bytes"]
        ),
        (&json!(0), &json!(0), &json!(0), &json!(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_for_the_user_or_an_admin_and_names_a_bad_user() {
    let s = Server::start().await;
    let alices = format!("/api/v2/users/{}/usage", s.alice.id);
    s.get(&alices, &s.bob).await.expect_error(403);
    // Whether or not the user exists, as for tokens.
    let nobody = format!("/api/v2/users/{}/usage", Uuid::new_v4());
    s.get(&nobody, &s.bob).await.expect_error(403);
    s.get(&nobody, &s.admin).await.expect_error(404);
    s.get(&alices, &s.alice).await.expect(200);
    let bad = s.get("/api/v2/users/not-a-user/usage", &s.admin).await;
    bad.expect_error(400);
    assert_eq!(bad.fields(), ["user"]);
    let anonymous = s.call("GET", "/api/v2/users/me/usage", None, None).await;
    anonymous.expect_error(401);
}

/// Asserts a `429` whose detail names `budget` and the reset instant.
async fn assert_over_budget(s: &Server, answer: &Answer, budget: &str) {
    let body = answer.expect_error(429);
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains(budget), "{detail}");
    let end = period_start(s)
        .await
        .checked_add_months(Months::new(1))
        .unwrap();
    let resets = end.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    assert!(detail.contains(&resets), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_spend_budget_create_send_and_edit_answer_429_and_change_nothing() {
    let s = Server::start().await;
    let chat = s.chat_in(&s.alice, ExecutionState::W).await;
    let user_message = s.message_ids(chat).await[0];
    let bobs = s.chat_in(&s.bob, ExecutionState::W).await;
    spend(&s, chat, 1_000, 10, 10).await;
    // At the budget is over it.
    set_budgets(&s, &s.alice, Some(1_000), None).await;

    let before = s.dump().await;
    let send = s
        .post(&chat_path(chat, "/messages"), &s.alice, text("more"))
        .await;
    assert_over_budget(&s, &send, "monthly spend budget of 1000 micro-dollars").await;
    let create = s.post("/api/v2/chats", &s.alice, text("new")).await;
    assert_over_budget(&s, &create, "monthly spend budget").await;
    let edit = s
        .patch(
            &chat_path(chat, &format!("/messages/{user_message}")),
            &s.alice,
            text("edited"),
        )
        .await;
    assert_over_budget(&s, &edit, "monthly spend budget").await;
    assert_eq!(s.dump().await, before, "nothing changed");

    // Other users are not affected.
    s.post(&chat_path(bobs, "/messages"), &s.bob, text("hi"))
        .await
        .expect(200);
    // A raised budget lets Alice send again.
    set_budgets(&s, &s.alice, Some(1_001), None).await;
    s.post(&chat_path(chat, "/messages"), &s.alice, text("more"))
        .await
        .expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_token_budget_refuses_sends_and_an_override_lifts_it() {
    let s = Server::start_with(ApiOptions {
        limits: LimitDefaults {
            monthly_token_budget: Some(100),
            ..LimitDefaults::default()
        },
        ..ApiOptions::default()
    })
    .await;
    let chat = s.chat_in(&s.alice, ExecutionState::W).await;
    spend(&s, chat, 0, 60, 40).await;
    let before = s.dump().await;
    let send = s
        .post(&chat_path(chat, "/messages"), &s.alice, text("more"))
        .await;
    assert_over_budget(&s, &send, "monthly token budget of 100 tokens").await;
    assert_eq!(s.dump().await, before, "nothing changed");
    let report = s.get("/api/v2/users/me/usage", &s.alice).await;
    assert_eq!(report.expect(200)["limits"]["monthly_token_budget"], 100);
    // The user's own budget overrides the default.
    set_budgets(&s, &s.alice, None, Some(101)).await;
    s.post(&chat_path(chat, "/messages"), &s.alice, text("more"))
        .await
        .expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_a_repeated_send_still_gets_its_first_response() {
    let s = Server::start().await;
    let chat = s.chat_in(&s.alice, ExecutionState::W).await;
    let body = json!({"content": [{"type": "text", "text": "once"}], "client_message_id": "k1"});
    let first = s
        .post(&chat_path(chat, "/messages"), &s.alice, body.clone())
        .await;
    let first = first.expect(200).clone();
    spend(&s, chat, 0, 1, 0).await;
    set_budgets(&s, &s.alice, None, Some(1)).await;
    let before = s.dump().await;
    let repeat = s.post(&chat_path(chat, "/messages"), &s.alice, body).await;
    assert_eq!(repeat.expect(200), &first);
    let other = json!({"content": [{"type": "text", "text": "twice"}], "client_message_id": "k2"});
    let refused = s.post(&chat_path(chat, "/messages"), &s.alice, other).await;
    assert_over_budget(&s, &refused, "monthly token budget").await;
    assert_eq!(s.dump().await, before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_a_promotion_answers_429_and_changes_nothing() {
    let s = Server::start().await;
    // Errored with queued messages (E1): a promotion would start a turn.
    let chat = s.chat_in(&s.alice, ExecutionState::E1).await;
    let queued = s.queue_ids(chat).await[0];
    spend(&s, chat, 500, 10, 10).await;
    set_budgets(&s, &s.alice, Some(500), None).await;

    let before = s.dump().await;
    let promote = s
        .post_empty(
            &chat_path(chat, &format!("/queue/{queued}/promote")),
            &s.alice,
        )
        .await;
    assert_over_budget(&s, &promote, "monthly spend budget of 500 micro-dollars").await;
    assert_eq!(s.dump().await, before, "nothing changed");
    assert_eq!(s.state(chat).await, ExecutionState::E1);

    set_budgets(&s, &s.alice, None, None).await;
    s.post_empty(
        &chat_path(chat, &format!("/queue/{queued}/promote")),
        &s.alice,
    )
    .await
    .expect(200);
    assert_eq!(s.state(chat).await, ExecutionState::R0);
}
