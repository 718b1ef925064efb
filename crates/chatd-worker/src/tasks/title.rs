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
//!
//! A title is a model call of the chat's owner (API.md "Limits, budgets and
//! the token lifecycle"): it is skipped when the owner's budget is used up,
//! and its usage is added to the owner's ledger
//! ([`chatd_store::usage::add`]) in the transaction that stores
//! the title, whether or not the title is kept.

use std::sync::Arc;

use chatd_core::{ChatRole, MessagePart, ModelOptions, Usage};
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
        Model {
            name: call.request.model.clone(),
            options: call.options.clone(),
        },
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

/// The model a title is asked of.
struct Model {
    /// The provider's model name.
    name: String,
    /// Its options (prices: the call's cost).
    options: ModelOptions,
}

/// How a title generation ended.
#[derive(Debug, PartialEq, Eq)]
enum Titled {
    /// The title was stored.
    Stored,
    /// The chat was renamed meanwhile (or is gone): the title was dropped.
    Kept,
    /// The owner's budget is used up: no model call was made.
    OverBudget,
}

/// Starts generating a title for `chat_id` from its first user message and
/// its first answer; returns at once.
fn spawn(
    ctx: Arc<WorkerContext>,
    chat_id: Uuid,
    provider: Arc<dyn Provider>,
    model: Model,
    first_message: String,
    answer: String,
) {
    tokio::spawn(async move {
        let work = async {
            if ctx.config.check_budgets {
                let owner = with_retries(|| async {
                    chatd_store::usage::of_chat_owner(ctx.store.pool(), chat_id)
                        .await
                        .map_err(TitleError::from)
                })
                .await?;
                if owner.is_some_and(|o| o.exceeded(&ctx.config.limits).is_some()) {
                    return Ok(Titled::OverBudget);
                }
            }
            // One model call: a failing model is not asked again for a
            // title (best effort), and its usage is counted once.
            let (title, usage) =
                generate(provider.as_ref(), &model.name, &first_message, &answer).await?;
            let spent = usage.map(|u| (u, model.options.cost_micros(&u).unwrap_or(0)));
            let stored =
                with_retries(|| store(&ctx.store, chat_id, title.as_deref(), spent)).await?;
            match (title, stored) {
                (None, _) => Err(TitleError::Empty),
                (Some(_), true) => Ok(Titled::Stored),
                (Some(_), false) => Ok(Titled::Kept),
            }
        };
        tokio::select! {
            _ = ctx.background.cancelled() => {}
            outcome = tokio::time::timeout(ctx.config.title_timeout, work) => match outcome {
                Ok(Ok(Titled::Stored)) => tracing::debug!(%chat_id, "chat titled"),
                Ok(Ok(Titled::Kept)) => tracing::debug!(%chat_id, "title kept: the chat was renamed meanwhile"),
                Ok(Ok(Titled::OverBudget)) => tracing::debug!(%chat_id, "no title: the owner's budget is used up"),
                Ok(Err(err @ TitleError::Store(_))) => tracing::warn!(%chat_id, error = %err, "storing a title failed; the default title stays"),
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
}

impl From<sqlx::Error> for TitleError {
    fn from(err: sqlx::Error) -> Self {
        TitleError::Store(chatd_store::StoreError::Database(err))
    }
}

impl TitleError {
    /// Whether the database work failed for a transient reason
    /// ([`chatd_store::StoreError::is_retryable`]: a lost connection, a pool
    /// timeout, a serialization failure or deadlock); provider errors and
    /// empty titles are final.
    fn is_transient(&self) -> bool {
        match self {
            TitleError::Store(err) => err.is_retryable(),
            TitleError::Provider(_) | TitleError::Empty => false,
        }
    }
}

/// Runs the database step `op` again after a transient failure
/// ([`TitleError::is_transient`]), waiting 50 ms, then twice as long each
/// time up to 1 s; the caller's `WorkerConfig::title_timeout` bounds the
/// whole. A title must not be lost to a moment's pool exhaustion or a
/// deadlock victim: the model was already paid for.
async fn with_retries<T, F, Fut>(mut op: F) -> Result<T, TitleError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, TitleError>>,
{
    let mut delay = std::time::Duration::from_millis(50);
    loop {
        match op().await {
            Err(err) if err.is_transient() => {
                tracing::debug!(error = %err, "title: database step failed; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// Asks the model for a title: the cleaned title (`None`: nothing usable)
/// and the call's usage, if the provider reported it.
async fn generate(
    provider: &dyn Provider,
    model: &str,
    first_message: &str,
    answer: &str,
) -> Result<(Option<String>, Option<Usage>), TitleError> {
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
    Ok((clean_title(&response.text), response.usage))
}

/// In one transaction: adds the call's `spent` usage and cost
/// (micro-dollars) to the owner's ledger, and stores `title` if the chat
/// still has the default title; `Ok(false)` when no title was stored (none
/// given, the chat was renamed, or the chat is gone: then nothing is
/// counted either).
async fn store(
    store: &chatd_store::Store,
    chat_id: Uuid,
    title: Option<&str>,
    spent: Option<(Usage, i64)>,
) -> Result<bool, TitleError> {
    let mut locked = match store.machine(chat_id).lock().await {
        Ok(locked) => locked,
        Err(chatd_store::StoreError::State(chatd_core::StateError::ChatNotFound)) => {
            return Ok(false);
        }
        Err(err) => return Err(err.into()),
    };
    if let Some((usage, micros)) = spent {
        chatd_store::usage::add(
            locked.conn(),
            chat_id,
            micros,
            usage.prompt_tokens(),
            usage.output_tokens,
        )
        .await?;
    }
    let updated = match title {
        Some(title) => {
            chatd_store::chats::set_title_if_default(locked.conn(), chat_id, title).await?
        }
        None => false,
    };
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
