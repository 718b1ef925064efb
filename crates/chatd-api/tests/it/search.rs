//! API.md "Sign-in, search, sharing and export": `GET /api/v2/search`
//! ranks the caller's (and shared) active user and assistant messages,
//! highlights escaped snippets, pages by keyset without duplicates, and
//! refuses bad input naming the field.

use std::collections::HashSet;

use chatd_core::{ChatStatus, MessagePart};
use chatd_store::{CreateChatInput, NewMessage};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::*;

/// A waiting chat of `owner` titled `title` with `messages` (role, text).
pub async fn seeded(s: &Server, owner: &User, title: &str, messages: &[(&str, &str)]) -> Uuid {
    let initial_messages = messages
        .iter()
        .map(|(role, text)| {
            let parts = vec![MessagePart::text(*text)];
            match *role {
                "system" => NewMessage::system(*text),
                "user" => NewMessage::user(parts).created_by(owner.id),
                "assistant" => NewMessage::assistant(parts),
                other => panic!("role {other}"),
            }
        })
        .collect();
    let created = s
        .store
        .create_chat(CreateChatInput {
            owner_id: owner.id,
            title: Some(title.into()),
            initial_messages,
            initial_status: Some(ChatStatus::Waiting),
            ..Default::default()
        })
        .await
        .expect("create chat");
    created.chat.id
}

fn results(page: &Value) -> &Vec<Value> {
    page["results"].as_array().expect("results")
}

fn hit_ids(page: &Value) -> Vec<i64> {
    results(page)
        .iter()
        .map(|r| r["message_id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_ranked_and_snippets_are_escaped_html() {
    let s = Server::start().await;
    let chat = seeded(
        &s,
        &s.alice,
        "Zoo",
        &[
            ("system", "You like the fox."),
            (
                "user",
                "Tell me <script>alert('fox')</script> & more about the fox \u{E000}please\u{E001}",
            ),
            (
                "assistant",
                "The fox, the fox, the fox: foxes are everywhere.",
            ),
            ("user", "Thanks, nothing else."),
        ],
    )
    .await;
    let page = s.get("/api/v2/search?q=fox", &s.alice).await;
    let page = page.expect(200);
    let hits = results(page);
    // The system prompt is not searched; the assistant's many foxes rank first.
    assert_eq!(hits.len(), 2, "{page}");
    assert_eq!(hits[0]["role"], "assistant");
    assert_eq!(hits[1]["role"], "user");
    assert!(hits[0]["rank"].as_f64().unwrap() > hits[1]["rank"].as_f64().unwrap());
    assert_eq!(page["next"], Value::Null);
    for h in hits {
        assert_eq!(uuid(&h["chat_id"]), chat);
        assert_eq!(h["chat_title"], "Zoo");
        assert!(h["created_at"].is_string());
    }
    let snippet = hits[1]["snippet"].as_str().unwrap();
    assert!(snippet.contains("&lt;script&gt;"), "{snippet}");
    assert!(snippet.contains("&amp;"), "{snippet}");
    assert!(snippet.contains("<mark>fox</mark>"), "{snippet}");
    assert!(!snippet.contains("<script"), "{snippet}");
    // The private-use markers in the text itself never become markup.
    assert!(!snippet.contains('\u{E000}') && !snippet.contains('\u{E001}'));
    assert_eq!(
        snippet.matches("<mark>").count(),
        snippet.matches("</mark>").count()
    );
    let stripped = snippet.replace("<mark>", "").replace("</mark>", "");
    assert!(
        !stripped.contains('<') && !stripped.contains('>'),
        "{snippet}"
    );
    // Stemming: "foxes" finds them too; a phrase narrows it down.
    let page = s.get("/api/v2/search?q=foxes", &s.alice).await;
    assert_eq!(results(page.expect(200)).len(), 2);
    let page = s
        .get("/api/v2/search?q=%22nothing%20else%22", &s.alice)
        .await;
    assert_eq!(results(page.expect(200)).len(), 1);
    // Only stop words: nothing, not an error.
    let page = s.get("/api/v2/search?q=the%20of%20and", &s.alice).await;
    assert_eq!(results(page.expect(200)).len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_readable_active_messages_are_found() {
    let s = Server::start().await;
    let mine = seeded(&s, &s.alice, "Mine", &[("user", "walrus one")]).await;
    let bobs = seeded(&s, &s.bob, "Bob's", &[("user", "walrus two")]).await;
    let admins = seeded(&s, &s.admin, "Admin's", &[("user", "walrus three")]).await;
    let archived = seeded(&s, &s.alice, "Old", &[("user", "walrus four")]).await;
    s.patch(
        &chat_path(archived, ""),
        &s.alice,
        json!({"archived": true}),
    )
    .await
    .expect(200);
    // A message off the active branch is not found.
    let gone = seeded(&s, &s.alice, "Edited", &[("user", "walrus five")]).await;
    sqlx::query("UPDATE chat_messages SET deleted = true WHERE chat_id = $1")
        .bind(gone)
        .execute(s.pool())
        .await
        .unwrap();

    let chats_of = |page: &Value| -> HashSet<Uuid> {
        results(page).iter().map(|r| uuid(&r["chat_id"])).collect()
    };
    let page = s.get("/api/v2/search?q=walrus", &s.alice).await;
    assert_eq!(chats_of(page.expect(200)), HashSet::from([mine, archived]));
    // Admins search only their own chats too.
    let page = s.get("/api/v2/search?q=walrus", &s.admin).await;
    assert_eq!(chats_of(page.expect(200)), HashSet::from([admins]));
    // A chat shared with alice is found; after the revoke it is not.
    sqlx::query("INSERT INTO chat_shares (chat_id, user_id, created_by) VALUES ($1, $2, $3)")
        .bind(bobs)
        .bind(s.alice.id)
        .bind(s.bob.id)
        .execute(s.pool())
        .await
        .unwrap();
    let page = s.get("/api/v2/search?q=walrus", &s.alice).await;
    assert_eq!(
        chats_of(page.expect(200)),
        HashSet::from([mine, archived, bobs])
    );
    sqlx::query("DELETE FROM chat_shares WHERE chat_id = $1")
        .bind(bobs)
        .execute(s.pool())
        .await
        .unwrap();
    let page = s.get("/api/v2/search?q=walrus", &s.alice).await;
    assert!(!chats_of(page.expect(200)).contains(&bobs));
    // A deleted chat is gone.
    s.delete(&chat_path(mine, ""), &s.alice).await.expect(204);
    let page = s.get("/api/v2/search?q=walrus", &s.alice).await;
    assert_eq!(chats_of(page.expect(200)), HashSet::from([archived]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_cover_every_result_once_in_order() {
    let s = Server::start().await;
    // Ranks with ties: 1, 2 or 3 mentions, spread over two chats.
    let mut expected = Vec::new();
    for c in 0..2 {
        let texts: Vec<String> = (0..7)
            .map(|i| format!("{} and some filler {c} {i}", "otter ".repeat(1 + i % 3)))
            .collect();
        let msgs: Vec<(&str, &str)> = texts.iter().map(|t| ("user", t.as_str())).collect();
        let id = seeded(&s, &s.alice, &format!("c{c}"), &msgs).await;
        let rows: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM chat_messages WHERE chat_id = $1 AND role = 'user'")
                .bind(id)
                .fetch_all(s.pool())
                .await
                .unwrap();
        expected.extend(rows);
    }
    let all = s.get("/api/v2/search?q=otter&limit=50", &s.alice).await;
    let all = all.expect(200);
    let full = hit_ids(all);
    assert_eq!(full.len(), expected.len());
    // Ordered by rank descending, then id descending.
    let hits = results(all);
    for w in hits.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let (ra, rb) = (a["rank"].as_f64().unwrap(), b["rank"].as_f64().unwrap());
        assert!(
            ra > rb || (ra == rb && a["message_id"].as_i64() > b["message_id"].as_i64()),
            "{a} then {b}"
        );
    }

    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &after {
            None => "/api/v2/search?q=otter&limit=3".to_owned(),
            Some(a) => format!("/api/v2/search?q=otter&limit=3&after={a}"),
        };
        let page = s.get(&path, &s.alice).await;
        let page = page.expect(200);
        assert!(results(page).len() <= 3);
        paged.extend(hit_ids(page));
        pages += 1;
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_owned()),
            None => break,
        }
        assert!(pages < 20, "paging does not end");
    }
    assert_eq!(paged, full, "pages are the full list, in order, once each");
    let unique: HashSet<i64> = paged.iter().copied().collect();
    assert_eq!(unique.len(), paged.len());
    assert_eq!(unique, expected.into_iter().collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_naming_the_field() {
    let s = Server::start().await;
    let long = "a".repeat(501);
    let cases = [
        ("/api/v2/search".to_owned(), "q"),
        ("/api/v2/search?q=".to_owned(), "q"),
        (format!("/api/v2/search?q={long}"), "q"),
        ("/api/v2/search?q=x&limit=0".to_owned(), "limit"),
        ("/api/v2/search?q=x&limit=51".to_owned(), "limit"),
        ("/api/v2/search?q=x&limit=ten".to_owned(), "limit"),
        ("/api/v2/search?q=x&after=garbage".to_owned(), "after"),
        ("/api/v2/search?q=x&after=v1.3f800000.0".to_owned(), "after"),
    ];
    for (path, field) in cases {
        let answer = s.get(&path, &s.alice).await;
        answer.expect_error(400);
        assert_eq!(answer.fields(), vec![field.to_owned()], "{path}");
    }
    // 500 characters are fine; so is an unauthenticated request refused.
    let ok = format!("/api/v2/search?q={}", "a".repeat(500));
    s.get(&ok, &s.alice).await.expect(200);
    s.call("GET", "/api/v2/search?q=x", None, None)
        .await
        .expect_error(401);
}
