//! Titles: the first answer of a chat with the default title gets a short
//! generated title in the background; a title the user set is kept; a
//! failing title request leaves the default and does not disturb the turn.

use std::time::Duration;

use chatd_core::ChatStatus;
use chatd_store::{CreateChatInput, NewMessage};
use chatd_testkit::fake_llm::{Script, is_title_request};

use crate::common::{Env, fast_config};

fn titled_config() -> chatd_worker::WorkerConfig {
    chatd_worker::WorkerConfig {
        generate_titles: true,
        ..fast_config()
    }
}

/// How many title requests the fake model received.
fn title_requests(env: &Env) -> usize {
    env.llm
        .requests()
        .iter()
        .filter(|r| is_title_request(r))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_answer_gets_a_generated_title_in_the_background() {
    let env = Env::new().await;
    env.llm.set_title_fn(|_| {
        Script::text("Title: \"Greeting the fake model politely and at length today.\"")
    });
    // Title requests never take a queued script.
    env.llm.push(Script::text("Hello there!"));
    env.llm.push(Script::text("Second answer."));
    let worker = env.worker_with(titled_config());
    let chat_id = env.create_chat("hi, how are you?").await;
    let chat = env
        .wait_for(chat_id, Duration::from_secs(20), "a title", |c| {
            c.title != "New Chat"
        })
        .await;
    assert_eq!(
        chat.title, "Greeting the fake model politely and at length",
        "at most 8 words"
    );
    assert_eq!(chat.status, ChatStatus::Waiting);
    let requests = env.llm.requests();
    let title_request = requests.iter().find(|r| is_title_request(r)).unwrap();
    let prompt = title_request.last_user_text().unwrap();
    assert!(prompt.contains("hi, how are you?") && prompt.contains("Hello there!"));
    // A second turn does not ask again.
    env.send(chat_id, "and now?", chatd_core::BusyBehavior::Queue)
        .await;
    env.wait_for(chat_id, Duration::from_secs(20), "second turn", |c| {
        c.status == ChatStatus::Waiting && c.history_version > chat.history_version
    })
    .await;
    assert_eq!(title_requests(&env), 1);
    let messages = env.active_messages(chat_id).await;
    assert_eq!(
        crate::common::text_of(messages.last().unwrap()),
        "Second answer."
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_title_is_never_overwritten_and_a_failed_title_keeps_the_default() {
    let env = Env::new().await;
    env.llm
        .set_title_fn(|_| Script::http_error(500, r#"{"error":{"message":"no titles today"}}"#));
    env.llm.set_default(Script::text("Sure."));
    let worker = env.worker_with(titled_config());
    let named = env
        .store
        .create_chat(CreateChatInput {
            owner_id: env.owner,
            title: Some("My own title".into()),
            initial_messages: vec![NewMessage::user(vec![chatd_core::MessagePart::text(
                "hello",
            )])],
            ..CreateChatInput::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    let unnamed = env.create_chat("hello too").await;
    env.wait_status(named, ChatStatus::Waiting).await;
    env.wait_status(unnamed, ChatStatus::Waiting).await;
    // The failing title request for the unnamed chat is the only one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !env.llm.requests().iter().any(is_title_request) {
        assert!(tokio::time::Instant::now() < deadline, "no title request");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    assert_eq!(env.chat(named).await.title, "My own title");
    assert_eq!(env.chat(unnamed).await.title, "New Chat");
    assert_eq!(
        title_requests(&env),
        1,
        "no title request for a chat the user named"
    );
}
