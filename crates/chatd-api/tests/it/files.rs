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
    let before = data(&s).await;
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
    assert_eq!(data(&s).await, before);
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

/// Every row of every table except the tokens' `last_used_at`, which any
/// authenticated request may advance.
async fn data(s: &Server) -> Value {
    let mut dump = s.dump().await;
    for key in dump["api_keys"].as_array_mut().unwrap() {
        key.as_object_mut().unwrap().remove("last_used_at");
    }
    dump
}

/// `GET /api/v2/files` with `query`, as `user`.
async fn list(s: &Server, user: &User, query: &str) -> Answer {
    s.get(&format!("/api/v2/files{query}"), user).await
}

fn ids_of(page: &Value) -> Vec<Uuid> {
    page.as_array()
        .unwrap()
        .iter()
        .map(|f| uuid(&f["id"]))
        .collect()
}

/// Uploads `body` as text without `Content-Length` (a chunked stream), so
/// that only the upload's transaction can decide the quota.
async fn upload_streamed(s: &Server, user: &User, body: Vec<u8>) -> Answer {
    let stream = futures::stream::iter([Ok::<_, std::io::Error>(body)]);
    let resp = s
        .http
        .post(format!("{}/api/v2/files?name=streamed.txt", s.base))
        .bearer_auth(&user.token)
        .header("content-type", "text/plain")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer { status, body, text }
}

fn with_quota(bytes: i64) -> chatd_api::ApiOptions {
    chatd_api::ApiOptions {
        limits: chatd_core::limits::LimitDefaults {
            max_storage_bytes: bytes,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_list_is_the_callers_own_files_newest_first_in_pages() {
    let s = Server::start().await;
    let mut alices = Vec::new();
    for i in 0..5 {
        alices.push(text_file(&s, &s.alice, &format!("a{i}.txt")).await);
    }
    let bobs = text_file(&s, &s.bob, "b.txt").await;
    // Linked files are listed too.
    s.post("/api/v2/chats", &s.alice, with_files("hi", &[alices[0]]))
        .await
        .expect(201);
    let newest_first: Vec<Uuid> = alices.iter().rev().copied().collect();

    let all = list(&s, &s.alice, "").await;
    assert_eq!(ids_of(all.expect(200)), newest_first);
    let first = &all.expect(200)[0];
    assert_eq!(first["name"], "a4.txt");
    assert_eq!(first["media_type"], "text/plain");
    assert_eq!(first["size"], 10);
    assert!(first["created_at"].is_string());
    let mut keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["created_at", "id", "media_type", "name", "size"]);

    let page1 = list(&s, &s.alice, "?limit=2").await;
    assert_eq!(ids_of(page1.expect(200)), newest_first[..2]);
    let page2 = list(
        &s,
        &s.alice,
        &format!("?limit=2&after_id={}", newest_first[1]),
    )
    .await;
    assert_eq!(ids_of(page2.expect(200)), newest_first[2..4]);
    let page3 = list(
        &s,
        &s.alice,
        &format!("?limit=2&after_id={}", newest_first[3]),
    )
    .await;
    assert_eq!(ids_of(page3.expect(200)), newest_first[4..]);
    let end = list(&s, &s.alice, &format!("?after_id={}", newest_first[4])).await;
    assert_eq!(ids_of(end.expect(200)), Vec::<Uuid>::new());
    assert_eq!(ids_of(list(&s, &s.bob, "").await.expect(200)), [bobs]);
    assert_eq!(
        ids_of(list(&s, &s.admin, "").await.expect(200)),
        Vec::<Uuid>::new()
    );

    for (query, field) in [
        ("?limit=0", "limit"),
        ("?limit=101", "limit"),
        ("?limit=x", "limit"),
        ("?after_id=nope", "after_id"),
        (&format!("?after_id={bobs}") as &str, "after_id"),
        (&format!("?after_id={}", Uuid::new_v4()) as &str, "after_id"),
    ] {
        let bad = list(&s, &s.alice, query).await;
        assert_eq!(
            bad.expect_error(400)["validations"][0]["field"],
            field,
            "{query}"
        );
    }
    s.call("GET", "/api/v2/files", None, None)
        .await
        .expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_deletes_an_unlinked_file_and_a_linked_or_foreign_one_stays() {
    let s = Server::start().await;
    let bytes: Vec<u8> = (0..300 * 1024).map(|i| (i % 7) as u8).collect();
    let loose = uuid(
        &upload(&s, &s.alice, "big.bin", "application/x-thing", bytes)
            .await
            .expect(201)["id"],
    );
    let linked = text_file(&s, &s.alice, "linked.txt").await;
    let chat = uuid(
        &s.post("/api/v2/chats", &s.alice, with_files("hi", &[linked]))
            .await
            .expect(201)["id"],
    );
    assert_eq!(file_count(&s).await, (2, 3));
    let path = |id: Uuid| format!("/api/v2/files/{id}");

    // Another member's, an unknown one, a malformed id: nothing changes.
    let before = data(&s).await;
    s.delete(&path(loose), &s.bob).await.expect_error(404);
    s.delete(&path(Uuid::new_v4()), &s.alice)
        .await
        .expect_error(404);
    let bad = s.delete("/api/v2/files/nope", &s.alice).await;
    assert_eq!(bad.expect_error(400)["validations"][0]["field"], "id");
    s.call("DELETE", &path(loose), None, None)
        .await
        .expect_error(401);
    // Linked to a chat: 409, it stays linked.
    let conflict = s.delete(&path(linked), &s.alice).await;
    assert!(
        conflict.expect_error(409)["message"]
            .as_str()
            .unwrap()
            .contains("linked")
    );
    assert_eq!(data(&s).await, before);
    assert_eq!(linked_chat(&s, linked).await, Some(chat));

    // The owner: 204, the row and its chunks are gone, a second delete 404.
    s.delete(&path(loose), &s.alice).await.expect(204);
    assert_eq!(download(&s, &s.alice, loose).await.status(), 404);
    assert_eq!(file_count(&s).await, (1, 1));
    s.delete(&path(loose), &s.alice).await.expect_error(404);
    assert_eq!(ids_of(list(&s, &s.alice, "").await.expect(200)), [linked]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_over_the_storage_quota_is_413_naming_it_and_stores_nothing() {
    let s = Server::start_with(with_quota(1000)).await;
    let first = upload(&s, &s.alice, "a", "text/plain", vec![b'a'; 600]).await;
    first.expect(201);
    let before = data(&s).await;
    // Declared too large (refused before the body is read), and streamed
    // without a length (refused by the upload's transaction).
    for over in [
        upload(&s, &s.alice, "b", "text/plain", vec![b'b'; 401]).await,
        upload_streamed(&s, &s.alice, vec![b'b'; 401]).await,
    ] {
        let err = over.expect_error(413);
        assert_eq!(err["message"], "Storage quota exceeded.");
        let detail = err["detail"].as_str().unwrap();
        assert!(detail.contains("max_storage_bytes"), "{detail}");
        assert!(detail.contains("1000 bytes"), "{detail}");
        assert!(detail.contains("600 bytes"), "{detail}");
    }
    assert_eq!(data(&s).await, before);
    // Up to the quota exactly is fine; the quota is per user.
    let exact = upload_streamed(&s, &s.alice, vec![b'c'; 400]).await;
    assert_eq!(exact.expect(201)["size"], 400);
    upload(&s, &s.bob, "b", "text/plain", vec![b'b'; 1000])
        .await
        .expect(201);
    upload(&s, &s.alice, "d", "text/plain", vec![b'd'; 1])
        .await
        .expect_error(413);

    // Deleting a file makes room.
    let id = uuid(&first.expect(201)["id"]);
    s.delete(&format!("/api/v2/files/{id}"), &s.alice)
        .await
        .expect(204);
    upload(&s, &s.alice, "e", "text/plain", vec![b'e'; 600])
        .await
        .expect(201);

    // The user's own max_storage_bytes overrides the default either way.
    sqlx::query("UPDATE users SET max_storage_bytes = 2000 WHERE id = $1")
        .bind(s.alice.id)
        .execute(s.pool())
        .await
        .unwrap();
    upload(&s, &s.alice, "f", "text/plain", vec![b'f'; 1000])
        .await
        .expect(201);
    sqlx::query("UPDATE users SET max_storage_bytes = 10 WHERE id = $1")
        .bind(s.bob.id)
        .execute(s.pool())
        .await
        .unwrap();
    let err = upload_streamed(&s, &s.bob, vec![b'g'; 1]).await;
    assert!(
        err.expect_error(413)["detail"]
            .as_str()
            .unwrap()
            .contains("10 bytes")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_uploads_never_pass_the_quota_together() {
    let s = Server::start_with(with_quota(10_000)).await;
    // 16 uploads of 1,000 bytes race for 10,000 bytes; no Content-Length,
    // so none is refused early: the database decides each one.
    let uploads = (0..16).map(|i| upload_streamed(&s, &s.alice, vec![b'0' + (i % 10) as u8; 1000]));
    let answers = futures::future::join_all(uploads).await;
    let stored = answers.iter().filter(|a| a.status == 201).count();
    let refused = answers.iter().filter(|a| a.status == 413).count();
    assert_eq!((stored, refused), (10, 6), "{answers:?}");
    let total: i64 =
        sqlx::query_scalar("SELECT sum(size)::bigint FROM chat_files WHERE owner_id = $1")
            .bind(s.alice.id)
            .fetch_one(s.pool())
            .await
            .unwrap();
    assert_eq!(total, 10_000);
    assert_eq!(file_count(&s).await, (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_holds_no_database_session_while_its_body_arrives() {
    let s = Server::start().await;
    // Three uploads send their first 300 KiB (past the in-memory head, so
    // the rest spools to a temporary file) and then stall.
    let (mut senders, mut answers) = (Vec::new(), Vec::new());
    for i in 0..3u8 {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Vec<u8>, std::io::Error>>();
        tx.unbounded_send(Ok(vec![b'a' + i; 300 * 1024])).unwrap();
        senders.push(tx);
        let request = s
            .http
            .post(format!("{}/api/v2/files?name=slow{i}.txt", s.base))
            .bearer_auth(&s.alice.token)
            .header("content-type", "text/plain")
            .body(reqwest::Body::wrap_stream(rx));
        answers.push(tokio::spawn(request.send()));
    }
    // Wait until the server has read the bytes sent so far: then every
    // upload is inside its handler, reading.
    let sessions = || async {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT count(*) FILTER (WHERE state = 'idle in transaction'),
                    count(*) FILTER (WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid())
             FROM pg_stat_activity WHERE datname = current_database()",
        )
        .fetch_one(s.pool())
        .await
        .unwrap()
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..10 {
        assert_eq!(sessions().await, (0, 0), "an upload holds a transaction");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Meanwhile every other request is answered.
    list(&s, &s.bob, "").await.expect(200);
    // The uploads complete.
    for (i, tx) in senders.into_iter().enumerate() {
        tx.unbounded_send(Ok(vec![b'z'; 100])).unwrap();
        drop(tx);
        let resp = answers.remove(0).await.unwrap().unwrap();
        assert_eq!(resp.status(), 201, "upload {i}");
        let file: Value = resp.json().await.unwrap();
        assert_eq!(file["size"], 300 * 1024 + 100);
        let bytes = download(&s, &s.alice, uuid(&file["id"]))
            .await
            .bytes()
            .await
            .unwrap();
        assert_eq!(bytes.len(), 300 * 1024 + 100);
        assert!(bytes[..300 * 1024].iter().all(|b| *b == b'a' + i as u8));
        assert!(bytes[300 * 1024..].iter().all(|b| *b == b'z'));
    }
    assert_eq!(file_count(&s).await, (3, 6));
}

/// Moves file `id`'s upload `hours` back.
async fn backdate(s: &Server, id: Uuid, hours: i32) {
    sqlx::query(
        "UPDATE chat_files SET created_at = created_at - make_interval(hours => $2) WHERE id = $1",
    )
    .bind(id)
    .bind(hours)
    .execute(s.pool())
    .await
    .unwrap();
}

const DAY: Duration = Duration::from_secs(24 * 3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_deletes_only_unlinked_files_older_than_a_day() {
    let s = Server::start().await;
    let old_loose = text_file(&s, &s.alice, "old.txt").await;
    let old_linked = text_file(&s, &s.alice, "old-linked.txt").await;
    let young_loose = text_file(&s, &s.bob, "young.txt").await;
    let almost = text_file(&s, &s.bob, "almost.txt").await;
    s.post("/api/v2/chats", &s.alice, with_files("hi", &[old_linked]))
        .await
        .expect(201);
    backdate(&s, old_loose, 25).await;
    backdate(&s, old_linked, 25).await;
    backdate(&s, almost, 23).await;
    let swept = chatd_worker::files_sweep::sweep_unlinked_files(&s.store, DAY)
        .await
        .unwrap();
    assert_eq!(swept, 1);
    assert_eq!(download(&s, &s.alice, old_loose).await.status(), 404);
    for (user, id) in [
        (&s.alice, old_linked),
        (&s.bob, young_loose),
        (&s.bob, almost),
    ] {
        assert_eq!(download(&s, user, id).await.status(), 200);
    }
    assert_eq!(file_count(&s).await, (3, 3));
    // More than one batch in one pass.
    let mut many = Vec::new();
    for i in 0..(chatd_worker::files_sweep::FILES_SWEEP_BATCH + 5) {
        let id = Uuid::new_v4();
        let stored = chatd_store::files::store_upload(
            s.pool(),
            id,
            s.alice.id,
            &format!("{i}"),
            "text/plain",
            0,
            i64::MAX,
            futures::stream::empty::<Result<Vec<u8>, std::convert::Infallible>>(),
        )
        .await
        .unwrap();
        assert!(matches!(
            stored,
            chatd_store::files::UploadOutcome::Stored(_)
        ));
        many.push(id);
    }
    sqlx::query("UPDATE chat_files SET created_at = now() - interval '2 days' WHERE id = ANY($1)")
        .bind(&many)
        .execute(s.pool())
        .await
        .unwrap();
    let swept = chatd_worker::files_sweep::sweep_unlinked_files(&s.store, DAY)
        .await
        .unwrap();
    assert_eq!(swept, many.len() as u64);
    assert_eq!(file_count(&s).await, (3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_racing_sends_never_deletes_a_file_a_send_linked() {
    let s = Server::start().await;
    // 12 expired files, each sent to its own chat while two sweeps run:
    // every send that succeeds leaves its file linked and stored; every
    // file the sweeps deleted made its send fail with 400 (unavailable).
    let mut files = Vec::new();
    let mut chats = Vec::new();
    for i in 0..12 {
        let id = text_file(&s, &s.alice, &format!("{i}.txt")).await;
        backdate(&s, id, 48).await;
        files.push(id);
        chats.push(s.create_chat(&s.alice).await);
    }
    let paths: Vec<String> = chats.iter().map(|c| chat_path(*c, "/messages")).collect();
    let sends = futures::future::join_all(
        paths
            .iter()
            .zip(&files)
            .map(|(path, id)| s.post(path, &s.alice, with_files("take it", &[*id]))),
    );
    let sweeps = futures::future::join(
        chatd_worker::files_sweep::sweep_unlinked_files(&s.store, DAY),
        chatd_worker::files_sweep::sweep_unlinked_files(&s.store, DAY),
    );
    let (answers, (a, b)) = futures::future::join(sends, sweeps).await;
    let swept = a.unwrap() + b.unwrap();
    let mut linked = 0;
    for ((answer, id), chat) in answers.iter().zip(&files).zip(&chats) {
        let row: Option<Option<Uuid>> =
            sqlx::query_scalar("SELECT chat_id FROM chat_files WHERE id = $1")
                .bind(id)
                .fetch_optional(s.pool())
                .await
                .unwrap();
        match answer.status {
            200 => {
                assert_eq!(row, Some(Some(*chat)), "a linked file was deleted");
                linked += 1;
            }
            400 => {
                assert_eq!(row, None, "a refused send left its file: {answer:?}");
                assert_eq!(answer.body["validations"][0]["field"], "content[1].file_id");
            }
            other => panic!("send answered {other}: {answer:?}"),
        }
    }
    assert_eq!(linked + swept as usize, files.len());
    // What is linked now survives any later sweep.
    chatd_worker::files_sweep::sweep_unlinked_files(&s.store, DAY)
        .await
        .unwrap();
    assert_eq!(file_count(&s).await.0, linked as i64);
}
