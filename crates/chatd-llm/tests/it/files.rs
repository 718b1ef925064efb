//! Attached files in provider requests (API.md "Files"): images as image
//! input for both providers (OpenAI: an `image_url` `data:` URL;
//! Anthropic: a base64 `image` block), text files inline, anything else
//! (and a file whose bytes the request does not carry) as a placeholder
//! naming the file.

use std::collections::BTreeMap;

use chatd_core::{ChatRole, MessagePart};
use chatd_llm::projection::{MAX_INLINE_TEXT_BYTES, file_bytes_wanted};
use chatd_llm::{AttachedFile, MaxTokensParam, ModelRequest, RequestMessage};
use serde_json::{Value, json};
use uuid::Uuid;

const IMAGE: Uuid = Uuid::from_u128(1);
const NOTES: Uuid = Uuid::from_u128(2);
const PDF: Uuid = Uuid::from_u128(3);
const GONE: Uuid = Uuid::from_u128(4);

fn part(id: Uuid, media_type: &str, name: &str) -> MessagePart {
    MessagePart::File {
        file_id: id,
        media_type: media_type.into(),
        name: Some(name.into()),
    }
}

fn attached(name: &str, media_type: &str, size: u64, data: &[u8]) -> AttachedFile {
    AttachedFile {
        name: name.into(),
        media_type: media_type.into(),
        size,
        data: data.into(),
    }
}

fn request() -> ModelRequest {
    let mut files = BTreeMap::new();
    files.insert(IMAGE, attached("dot.png", "image/png", 3, b"PNG"));
    files.insert(NOTES, attached("notes.md", "text/markdown", 5, b"# Hi\n"));
    files.insert(PDF, attached("doc.pdf", "application/pdf", 9000, b""));
    ModelRequest {
        model: "m".into(),
        messages: vec![
            RequestMessage::text(ChatRole::System, "Be brief."),
            RequestMessage {
                role: ChatRole::User,
                parts: vec![
                    MessagePart::text("What is in these?"),
                    part(IMAGE, "image/png", "dot.png"),
                    part(NOTES, "text/markdown", "notes.md"),
                    part(PDF, "application/pdf", "doc.pdf"),
                    part(GONE, "image/png", "gone.png"),
                ],
            },
        ],
        files,
        ..ModelRequest::default()
    }
}

fn placeholder(id: Uuid, name: &str, media_type: &str) -> String {
    format!("[Attached file {name} ({media_type}), id {id}, not shown to the model]")
}

#[test]
fn openai_gets_the_image_as_a_data_url_and_text_files_inline() {
    let body = chatd_llm::openai::wire::request_body(&request(), MaxTokensParam::default());
    let user = &body["messages"][1];
    assert_eq!(user["role"], "user");
    assert_eq!(
        user["content"],
        json!([
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,UE5H"}},
            {"type": "text", "text": "[Attached file notes.md (text/markdown), 5 bytes]\n# Hi\n"},
            {"type": "text", "text": placeholder(PDF, "doc.pdf", "application/pdf")},
            {"type": "text", "text": placeholder(GONE, "gone.png", "image/png")},
        ])
    );
    // Without an image the content stays a string.
    let mut no_image = request();
    no_image.files.remove(&IMAGE);
    let body = chatd_llm::openai::wire::request_body(&no_image, MaxTokensParam::default());
    let content = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        content.contains(&placeholder(IMAGE, "dot.png", "image/png")),
        "{content}"
    );
    assert!(content.contains("# Hi"), "{content}");
}

#[test]
fn anthropic_gets_the_image_as_a_base64_block_and_text_files_inline() {
    let body = chatd_llm::anthropic::wire::request_body(&request());
    assert_eq!(body["system"], "Be brief.");
    let blocks = &body["messages"][0]["content"];
    assert_eq!(
        *blocks,
        json!([
            {"type": "text", "text": "What is in these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "UE5H"}},
            {"type": "text", "text": "[Attached file notes.md (text/markdown), 5 bytes]\n# Hi\n"},
            {"type": "text", "text": placeholder(PDF, "doc.pdf", "application/pdf")},
            {"type": "text", "text": placeholder(GONE, "gone.png", "image/png")},
        ])
    );
}

#[test]
fn a_long_text_file_is_cut_with_a_note_and_only_needed_bytes_are_asked_for() {
    let big = 1_000_000u64;
    assert_eq!(file_bytes_wanted("text/plain", big), MAX_INLINE_TEXT_BYTES);
    assert_eq!(file_bytes_wanted("application/json", 10), 10);
    assert_eq!(file_bytes_wanted("image/webp", big), big as usize);
    assert_eq!(file_bytes_wanted("image/svg+xml", big), 0);
    assert_eq!(file_bytes_wanted("application/pdf", big), 0);

    let data = vec![b'a'; MAX_INLINE_TEXT_BYTES];
    let mut request = request();
    request
        .files
        .insert(NOTES, attached("notes.md", "text/markdown", big, &data));
    let body = chatd_llm::anthropic::wire::request_body(&request);
    let text = body["messages"][0]["content"][2]["text"].as_str().unwrap();
    assert!(text.ends_with(&format!(
        "[The file is cut here: only its first {MAX_INLINE_TEXT_BYTES} of {big} bytes are shown.]"
    )));
}

#[test]
fn files_outside_user_messages_stay_placeholders() {
    let mut request = request();
    request.messages.push(RequestMessage {
        role: ChatRole::Assistant,
        parts: vec![MessagePart::text("ok"), part(IMAGE, "image/png", "dot.png")],
    });
    let body = chatd_llm::openai::wire::request_body(&request, MaxTokensParam::default());
    let assistant: &Value = &body["messages"][2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"],
        format!("ok\n{}", placeholder(IMAGE, "dot.png", "image/png"))
    );
}
