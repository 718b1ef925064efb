//! Attached files in the worker's model calls (API.md "Files"): the
//! generation task reads the bytes of the files the history attaches and
//! the provider receives an image as image input (OpenAI-compatible: an
//! `image_url` `data:` URL; Anthropic: a base64 `image` block) and a text
//! file inline.

use chatd_core::{ChatStatus, MessagePart};
use chatd_store::files;
use chatd_store::{CreateChatInput, NewMessage};
use chatd_testkit::fake_llm::Script;
use serde_json::json;
use uuid::Uuid;

use crate::common::Env;

/// The first bytes of a 1×1 PNG (what an upload's signature check wants).
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

/// Stores a file of the env's owner (as an upload does); returns its id.
async fn store_file(env: &Env, name: &str, media_type: &str, data: &[u8]) -> Uuid {
    let id = Uuid::new_v4();
    let stored = files::store_upload(
        env.db.pool(),
        id,
        env.owner,
        name,
        media_type,
        data.len() as i64,
        i64::MAX,
        futures::stream::iter([Ok::<_, std::convert::Infallible>(data.to_vec())]),
    )
    .await
    .unwrap();
    assert!(matches!(stored, files::UploadOutcome::Stored(_)));
    id
}

/// Runs one turn of a chat whose first message attaches an image and a
/// text file; returns the body the provider received and the file ids.
async fn turn_with_files(env: &Env) -> (serde_json::Value, Uuid, Uuid) {
    let image = store_file(env, "dot.png", "image/png", PNG).await;
    let notes = store_file(env, "notes.txt", "text/plain", b"buy milk").await;
    let file = |id| MessagePart::File {
        file_id: id,
        media_type: String::new(),
        name: None,
    };
    env.llm.push(Script::text("A dot and a list."));
    let _worker = env.worker();
    let chat = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            initial_messages: vec![
                NewMessage::user(vec![
                    MessagePart::text("What are these?"),
                    file(image),
                    file(notes),
                ])
                .created_by(env.owner),
            ],
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat;
    env.wait_status(chat.id, ChatStatus::Waiting).await;
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 1);
    (requests[0].body.clone(), image, notes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_image_reaches_an_openai_compatible_provider_as_a_data_url() {
    let env = Env::new().await;
    let (body, _, _) = turn_with_files(&env).await;
    let png = "iVBORw0KGgoAAAANSUhEUg==";
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What are these?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
            {"type": "text", "text": "[Attached file notes.txt (text/plain), 8 bytes]\nbuy milk"},
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_image_reaches_anthropic_as_a_base64_block() {
    let env = Env::anthropic().await;
    let (body, _, _) = turn_with_files(&env).await;
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What are these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUg=="}},
            {"type": "text", "text": "[Attached file notes.txt (text/plain), 8 bytes]\nbuy milk"},
        ])
    );
}
