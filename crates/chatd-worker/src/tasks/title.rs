//! Chat titles, a spec-free extra of the generation task (issue "Title";
//! `spec/chatd-architecture.md`, "Generation goroutine", whose plan decides
//! when): after a chat's first answer, while it still has the default title
//! "New Chat" ([`chatd_store::DEFAULT_CHAT_TITLE`]), a short title (at most
//! [`MAX_TITLE_WORDS`] words) is generated with the chat's model in the
//! background.
//!
//! Best effort and never in the turn's way: the task is spawned after the
//! answer's commit, bounded by `WorkerConfig::title_timeout`, and any failure
//! leaves the default title (logged at debug level). The title is a metadata
//! write, not a transition: one `UPDATE` of `chats.title` (and `updated_at`)
//! under [`chatd_store::ChatMachine::lock`], which neither advances
//! `snapshot_version` nor publishes, so it cannot disturb a runner's fence.
//! The `UPDATE` only applies while the title is still the default: a title
//! the user set meanwhile is never overwritten.

use std::sync::Arc;

use chatd_core::{ChatRole, MessagePart};
use chatd_llm::{ModelRequest, Provider, RequestMessage, collect};
use uuid::Uuid;

use super::TaskContext;
use super::plan::ModelCall;
use crate::context::WorkerContext;

/// Most words a generated title keeps.
pub const MAX_TITLE_WORDS: usize = 8;
/// Longest title, in characters (API.md "Limits").
pub const MAX_TITLE_CHARS: usize = 200;
/// Characters of the first message and of the answer shown to the model.
const EXCERPT_CHARS: usize = 2000;

const TITLE_PROMPT: &str = "You write titles for chat conversations. Answer with a short title \
(at most 8 words) that says what the conversation is about, in the conversation's language. \
Answer with the title only: no quotes, no trailing period, no preamble.";

/// Starts titling the task's chat from the first user message of `call`
/// and `answer`, the text of its first answer; returns at once.
pub(super) fn after_first_answer(
    task: &TaskContext,
    call: &ModelCall<Arc<dyn Provider>>,
    answer: String,
) {
    spawn(
        task.ctx.clone(),
        task.chat_id,
        call.provider.clone(),
        call.request.model.clone(),
        first_user_text(&call.request.messages),
        answer,
    );
}

/// The text of the first user message of a request.
fn first_user_text(messages: &[RequestMessage]) -> String {
    messages
        .iter()
        .find(|m| m.role == ChatRole::User)
        .map(|m| {
            m.parts
                .iter()
                .filter_map(|p| match p {
                    MessagePart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Starts generating a title for `chat_id` from its first user message and
/// its first answer; returns at once.
fn spawn(
    ctx: Arc<WorkerContext>,
    chat_id: Uuid,
    provider: Arc<dyn Provider>,
    model: String,
    first_message: String,
    answer: String,
) {
    tokio::spawn(async move {
        let work = async {
            let title = generate(provider.as_ref(), &model, &first_message, &answer).await?;
            store(&ctx.store, chat_id, &title).await
        };
        tokio::select! {
            _ = ctx.background.cancelled() => {}
            outcome = tokio::time::timeout(ctx.config.title_timeout, work) => match outcome {
                Ok(Ok(true)) => tracing::debug!(%chat_id, "chat titled"),
                Ok(Ok(false)) => tracing::debug!(%chat_id, "title kept: the chat was renamed meanwhile"),
                Ok(Err(err)) => tracing::debug!(%chat_id, error = %err, "title generation failed; the default title stays"),
                Err(_) => tracing::debug!(%chat_id, "title generation timed out; the default title stays"),
            },
        }
    });
}

/// Why no title was stored.
#[derive(Debug, thiserror::Error)]
enum TitleError {
    #[error(transparent)]
    Provider(#[from] chatd_llm::ProviderError),
    #[error("the model answered no usable title")]
    Empty,
    #[error(transparent)]
    Store(#[from] chatd_store::StoreError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

async fn generate(
    provider: &dyn Provider,
    model: &str,
    first_message: &str,
    answer: &str,
) -> Result<String, TitleError> {
    let request = ModelRequest {
        model: model.to_owned(),
        messages: vec![
            RequestMessage::text(ChatRole::System, TITLE_PROMPT),
            RequestMessage::text(
                ChatRole::User,
                format!(
                    "The conversation begins:\n\nUser: {}\n\nAssistant: {}\n\nTitle:",
                    excerpt(first_message),
                    excerpt(answer)
                ),
            ),
        ],
        ..ModelRequest::default()
    };
    let response = collect(provider.stream(&request).await?).await?;
    clean_title(&response.text).ok_or(TitleError::Empty)
}

/// Stores `title` if the chat still has the default title; `Ok(false)` when
/// it does not (or the chat is gone).
async fn store(store: &chatd_store::Store, chat_id: Uuid, title: &str) -> Result<bool, TitleError> {
    let mut locked = match store.machine(chat_id).lock().await {
        Ok(locked) => locked,
        Err(chatd_store::StoreError::State(chatd_core::StateError::ChatNotFound)) => {
            return Ok(false);
        }
        Err(err) => return Err(err.into()),
    };
    let updated =
        chatd_store::queries::chats::set_title_if_default(locked.conn(), chat_id, title).await?;
    locked.finish().await?;
    Ok(updated)
}

fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(EXCERPT_CHARS).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// The model's answer as a title: its first non-empty line without a
/// `Title:` prefix, quotes, markdown markers or a trailing period, spaces
/// collapsed, at most [`MAX_TITLE_WORDS`] words and [`MAX_TITLE_CHARS`]
/// characters; `None` when nothing is left.
pub fn clean_title(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line
        .strip_prefix("Title:")
        .or_else(|| line.strip_prefix("title:"))
        .or_else(|| line.strip_prefix("TITLE:"))
        .unwrap_or(line);
    let trim: &[char] = &[
        '"', '\'', '`', '*', '#', '_', '“', '”', '‘', '’', '«', '»', ' ',
    ];
    let line = line.trim().trim_matches(trim).trim_end_matches(['.', '。']);
    let words: Vec<&str> = line.split_whitespace().take(MAX_TITLE_WORDS).collect();
    let title: String = words.join(" ").chars().take(MAX_TITLE_CHARS).collect();
    let title = title.trim().trim_matches(trim).to_owned();
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_cleaned_and_cut_to_eight_words() {
        assert_eq!(
            clean_title("Title: \"Planning a Trip to Lisbon.\"\n\nMore text").as_deref(),
            Some("Planning a Trip to Lisbon")
        );
        assert_eq!(
            clean_title("**Rust borrow checker basics**").as_deref(),
            Some("Rust borrow checker basics")
        );
        assert_eq!(
            clean_title("one two three four five six seven eight nine ten").as_deref(),
            Some("one two three four five six seven eight")
        );
        assert_eq!(clean_title("  \n \"\" \n").as_deref(), None);
        assert_eq!(clean_title("Olá, mundo").as_deref(), Some("Olá, mundo"));
        let long = "x".repeat(500);
        assert_eq!(clean_title(&long).unwrap().chars().count(), MAX_TITLE_CHARS);
    }
}
