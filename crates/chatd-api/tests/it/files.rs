//! Files (API.md "Files"): upload and download as streams, the size limit
//! while reading, media types checked against the bytes, and `LinkFiles`
//! semantics on create, send and edit (cap, unavailable files, re-linking),
//! each rejection changing nothing; a deleted chat's files go with it.

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::{Answer, Server, User, chat_path, uuid};

/// The smallest PNG signature `infer` recognises, plus padding.
pub const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

/// `POST /api/v2/files?name=` with raw `body` of `media_type`.
async fn upload(s: &Server, user: &User, name: &str, media_type: &str, body: Vec<u8>) -> Answer {
    let resp = s
        .http
        .post(format!(
            "{}/api/v2/files?name={}",
            s.base,
            url::form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>()
        ))
        .bearer_auth(&user.token)
        .header("content-type", media_type)
        .body(body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer { status, body, text }
}

/// Uploads a text file of `user`; returns its id.
async fn text_file(s: &Server, user: &User, name: &str) -> Uuid {
    let file = upload(s, user, name, "text/plain", b"some notes".to_vec()).await;
    uuid(&file.expect(201)["id"])
}

async fn download(s: &Server, user: &User, id: Uuid) -> reqwest::Response {
    s.http
        .get(format!("{}/api/v2/files/{id}", s.base))
        .bearer_auth(&user.token)
        .send()
        .await
        .expect("send")
}

async fn file_count(s: &Server) -> (i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM chat_files), (SELECT count(*) FROM chat_file_chunks)",
    )
    .fetch_one(s.pool())
    .await
    .unwrap()
}

fn file_part(id: Uuid) -> Value {
    json!({"type": "file", "file_id": id})
}

fn with_files(text: &str, ids: &[Uuid]) -> Value {
    let mut content = vec![json!({"type": "text", "text": text})];
    content.extend(ids.iter().map(|id| file_part(*id)));
    json!({ "content": content })
}

async fn linked_chat(s: &Server, id: Uuid) -> Option<Uuid> {
    sqlx::query_scalar("SELECT chat_id FROM chat_files WHERE id = $1")
        .bind(id)
        .fetch_one(s.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_stored_in_chunks_and_downloads_unchanged_for_its_owner_only() {
    let s = Server::start().await;
    // Three chunks: 256 KiB, 256 KiB and the rest.
    let bytes: Vec<u8> = (0..600 * 1024).map(|i| (i % 251) as u8).collect();
    let up = upload(
        &s,
        &s.alice,
        "dir/../data.bin",
        "application/x-thing",
        bytes.clone(),
    )
    .await;
    let file = up.expect(201).clone();
    assert_eq!(file["name"], "data.bin");
    assert_eq!(file["media_type"], "application/x-thing");
    assert_eq!(file["size"], 600 * 1024);
    assert!(file["created_at"].is_string());
    assert_eq!(file_count(&s).await, (1, 3));
    let id = uuid(&file["id"]);

    let resp = download(&s, &s.alice, id).await;
    assert_eq!(resp.status(), 200);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header("content-type").as_deref(),
        Some("application/x-thing")
    );
    assert_eq!(header("content-length").as_deref(), Some("614400"));
    assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"));
    assert!(header("content-disposition").unwrap().contains("data.bin"));
    assert_eq!(resp.bytes().await.unwrap().as_ref(), bytes.as_slice());

    // Another member, an unknown id, and a malformed one.
    assert_eq!(download(&s, &s.bob, id).await.status(), 404);
    assert_eq!(download(&s, &s.alice, Uuid::new_v4()).await.status(), 404);
    let bad = s.get("/api/v2/files/nope", &s.alice).await;
    assert_eq!(bad.expect_error(400)["validations"][0]["field"], "id");
    let anonymous = s
        .call("GET", &format!("/api/v2/files/{id}"), None, None)
        .await;
    anonymous.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_over_10_mib_is_413_while_it_is_still_uploading_and_stores_nothing() {
    let s = Server::start().await;
    let before = s.dump().await;
    // Declared too large: refused before the body is read.
    let declared = upload(
        &s,
        &s.alice,
        "big",
        "text/plain",
        vec![b'x'; 10 * 1024 * 1024 + 1],
    )
    .await;
    declared.expect_error(413);

    // Streamed without a length: 10 MiB + 1 byte, and then the client never
    // finishes. The answer must come while the upload is still open.
    let chunk = vec![b'y'; 64 * 1024];
    let chunks = (0..160)
        .map(move |_| Ok::<_, std::io::Error>(chunk.clone()))
        .chain(std::iter::once(Ok(vec![b'z'])));
    let body = futures::stream::iter(chunks).chain(futures::stream::pending());
    let resp = tokio::time::timeout(
        Duration::from_secs(20),
        s.http
            .post(format!("{}/api/v2/files", s.base))
            .bearer_auth(&s.alice.token)
            .header("content-type", "text/plain")
            .body(reqwest::Body::wrap_stream(body))
            .send(),
    )
    .await
    .expect("the 413 arrives while the client is still sending");
    let resp = resp.expect("response");
    assert_eq!(resp.status(), 413);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("10485760"),
        "{body}"
    );

    // Exactly the limit is fine.
    let exact = upload(
        &s,
        &s.alice,
        "exact",
        "text/plain",
        vec![b'x'; 10 * 1024 * 1024],
    )
    .await;
    assert_eq!(exact.expect(201)["size"], 10 * 1024 * 1024);
    sqlx::query("DELETE FROM chat_files")
        .execute(s.pool())
        .await
        .unwrap();
    assert_eq!(s.dump().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_must_be_what_its_media_type_says_and_bad_uploads_store_nothing() {
    let s = Server::start().await;
    let png = upload(&s, &s.alice, "dot.png", "image/png", PNG.to_vec()).await;
    assert_eq!(png.expect(201)["media_type"], "image/png");
    let before = file_count(&s).await;

    let lying = upload(&s, &s.alice, "dot.jpg", "image/jpeg", PNG.to_vec()).await;
    assert_eq!(
        lying.expect_error(415)["detail"],
        "The bytes are image/png, not image/jpeg."
    );
    let text = upload(&s, &s.alice, "x.png", "image/png", b"not an image".to_vec()).await;
    text.expect_error(415);
    let malformed = upload(&s, &s.alice, "x", "nonsense", b"x".to_vec()).await;
    malformed.expect_error(415);
    let empty = upload(&s, &s.alice, "x", "text/plain", Vec::new()).await;
    assert_eq!(empty.expect_error(400)["validations"][0]["field"], "body");
    let long_name = upload(&s, &s.alice, &"n".repeat(256), "text/plain", b"x".to_vec()).await;
    assert_eq!(
        long_name.expect_error(400)["validations"][0]["field"],
        "name"
    );
    assert_eq!(file_count(&s).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_parts_link_the_files_and_the_stored_part_names_them() {
    let s = Server::start().await;
    let png = upload(&s, &s.alice, "dot.png", "image/png", PNG.to_vec()).await;
    let png = uuid(&png.expect(201)["id"]);
    let notes = text_file(&s, &s.alice, "notes.txt").await;

    let created = s
        .post("/api/v2/chats", &s.alice, with_files("look", &[png]))
        .await;
    let chat = uuid(&created.expect(201)["id"]);
    assert_eq!(linked_chat(&s, png).await, Some(chat));
    let page = s.get(&chat_path(chat, "/messages"), &s.alice).await;
    let content = &page.expect(200)["messages"][0]["content"];
    assert_eq!(
        content[1],
        json!({"type": "file", "file_id": png, "media_type": "image/png", "name": "dot.png"})
    );

    // A send (queued: the chat is running) links too.
    let sent = s
        .post(
            &chat_path(chat, "/messages"),
            &s.alice,
            with_files("and this", &[notes]),
        )
        .await;
    let sent = sent.expect(200);
    assert_eq!(sent["queued"], true);
    assert_eq!(
        sent["queued_message"]["content"][1]["media_type"],
        "text/plain"
    );
    assert_eq!(linked_chat(&s, notes).await, Some(chat));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_foreign_and_taken_files_are_400_naming_the_part_and_change_nothing() {
    let s = Server::start().await;
    let mine = text_file(&s, &s.alice, "a.txt").await;
    let bobs = text_file(&s, &s.bob, "b.txt").await;
    let chat = uuid(
        &s.post("/api/v2/chats", &s.alice, with_files("hi", &[mine]))
            .await
            .expect(201)["id"],
    );
    let other = s.create_chat(&s.alice).await;
    let before = s.dump().await;
    let before_files = file_count(&s).await;
    for (id, body) in [
        (other, with_files("x", &[Uuid::new_v4()])),
        (other, with_files("x", &[bobs])),
        // Linked to another chat already.
        (other, with_files("x", &[mine])),
    ] {
        let answer = s.post(&chat_path(id, "/messages"), &s.alice, body).await;
        let err = answer.expect_error(400);
        assert_eq!(
            err["validations"][0]["field"], "content[1].file_id",
            "{err}"
        );
    }
    let create = s
        .post("/api/v2/chats", &s.alice, with_files("x", &[bobs]))
        .await;
    assert_eq!(
        create.expect_error(400)["validations"][0]["field"],
        "content[1].file_id"
    );
    assert_eq!(s.dump().await, before);
    assert_eq!(file_count(&s).await, before_files);
    assert_eq!(linked_chat(&s, bobs).await, None);
    assert_eq!(linked_chat(&s, mine).await, Some(chat));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_21st_file_is_400_and_relinking_a_linked_file_uses_no_slot() {
    let s = Server::start().await;
    let mut ids = Vec::new();
    for i in 0..21 {
        ids.push(text_file(&s, &s.alice, &format!("f{i}.txt")).await);
    }
    let chat = uuid(
        &s.post(
            "/api/v2/chats",
            &s.alice,
            with_files("first ten", &ids[..10]),
        )
        .await
        .expect(201)["id"],
    );
    s.post(
        &chat_path(chat, "/messages"),
        &s.alice,
        with_files("ten more", &ids[10..20]),
    )
    .await
    .expect(200);
    let before = s.dump().await;
    let full = s
        .post(
            &chat_path(chat, "/messages"),
            &s.alice,
            with_files("one more", &ids[20..]),
        )
        .await;
    let err = full.expect_error(400);
    assert_eq!(err["validations"][0]["field"], "content");
    assert!(
        err["validations"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("20")
    );
    assert_eq!(s.dump().await, before);
    assert_eq!(linked_chat(&s, ids[20]).await, None);

    // The same files again: no new slot.
    s.post(
        &chat_path(chat, "/messages"),
        &s.alice,
        with_files("again", &ids[..3]),
    )
    .await
    .expect(200);
    // A chat created with 21 files: 400, nothing created.
    let chats_before = s.dump().await["chats"].as_array().unwrap().len();
    let fresh: Vec<Uuid> = {
        let mut v = Vec::new();
        for i in 0..21 {
            v.push(text_file(&s, &s.bob, &format!("g{i}.txt")).await);
        }
        v
    };
    let create = s
        .post("/api/v2/chats", &s.bob, with_files("too many", &fresh))
        .await;
    assert_eq!(
        create.expect_error(400)["validations"][0]["field"],
        "content"
    );
    assert_eq!(
        s.dump().await["chats"].as_array().unwrap().len(),
        chats_before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_links_its_files_and_keeps_the_cap() {
    let s = Server::start().await;
    let a = text_file(&s, &s.alice, "a.txt").await;
    let b = text_file(&s, &s.alice, "b.txt").await;
    let chat = uuid(
        &s.post("/api/v2/chats", &s.alice, with_files("hi", &[a]))
            .await
            .expect(201)["id"],
    );
    let first = s.message_ids(chat).await[0];
    let bobs = text_file(&s, &s.bob, "c.txt").await;
    let before = s.dump().await;
    let foreign = s
        .patch(
            &chat_path(chat, &format!("/messages/{first}")),
            &s.alice,
            with_files("edited", &[bobs]),
        )
        .await;
    assert_eq!(
        foreign.expect_error(400)["validations"][0]["field"],
        "content[1].file_id"
    );
    assert_eq!(s.dump().await, before);
    let edited = s
        .patch(
            &chat_path(chat, &format!("/messages/{first}")),
            &s.alice,
            with_files("edited", &[a, b]),
        )
        .await;
    let edited = edited.expect(200);
    assert_eq!(edited["message"]["content"][2]["name"], "b.txt");
    assert_eq!(linked_chat(&s, b).await, Some(chat));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_chat_deletes_its_files() {
    let s = Server::start().await;
    let a = text_file(&s, &s.alice, "a.txt").await;
    let unlinked = text_file(&s, &s.alice, "b.txt").await;
    let chat = uuid(
        &s.post("/api/v2/chats", &s.alice, with_files("hi", &[a]))
            .await
            .expect(201)["id"],
    );
    s.drive(chat, chatd_core::ExecutionState::W).await;
    s.delete(&chat_path(chat, ""), &s.alice).await.expect(204);
    assert_eq!(download(&s, &s.alice, a).await.status(), 404);
    assert_eq!(download(&s, &s.alice, unlinked).await.status(), 200);
    assert_eq!(file_count(&s).await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_never_link_one_file_to_two_chats_or_pass_the_cap() {
    let s = Server::start().await;
    // One file, eight chats racing for it.
    let file = text_file(&s, &s.alice, "shared.txt").await;
    let mut chats = Vec::new();
    for _ in 0..8 {
        chats.push(s.create_chat(&s.alice).await);
    }
    let paths: Vec<String> = chats.iter().map(|c| chat_path(*c, "/messages")).collect();
    let sends = paths
        .iter()
        .map(|path| s.post(path, &s.alice, with_files("mine", &[file])));
    let answers = futures::future::join_all(sends).await;
    let won: Vec<Uuid> = answers
        .iter()
        .zip(&chats)
        .filter(|(a, _)| a.status == 200)
        .map(|(_, c)| *c)
        .collect();
    assert_eq!(won.len(), 1, "{answers:?}");
    assert!(answers.iter().all(|a| a.status == 200 || a.status == 400));
    assert_eq!(linked_chat(&s, file).await, Some(won[0]));

    // One chat, four sends of 6 distinct files each racing for 20 slots:
    // three fit, the fourth is refused.
    let chat = s.create_chat(&s.alice).await;
    let mut groups = Vec::new();
    for g in 0..4 {
        let mut ids = Vec::new();
        for i in 0..6 {
            ids.push(text_file(&s, &s.alice, &format!("{g}-{i}.txt")).await);
        }
        groups.push(ids);
    }
    let path = chat_path(chat, "/messages");
    let sends = groups
        .iter()
        .map(|ids| s.post(&path, &s.alice, with_files("batch", ids)));
    let answers = futures::future::join_all(sends).await;
    let ok = answers.iter().filter(|a| a.status == 200).count();
    assert_eq!(ok, 3, "{answers:?}");
    let linked: i64 = sqlx::query_scalar("SELECT count(*) FROM chat_files WHERE chat_id = $1")
        .bind(chat)
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(linked, 18);
}
