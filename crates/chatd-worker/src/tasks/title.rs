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
//!
//! Small local models answer the title request badly ("The conversation
//! ends:", the prompt echoed back, a quoted sentence with a period): the
//! answer goes through [`clean_title`], and when nothing title-like is left
//! the title is the first words of the user's first message
//! ([`fallback_title`]).

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
/// Characters a title is cut to at a word boundary (a longer first word is
/// cut at this many characters), so that it fits a chat list.
pub const TITLE_DISPLAY_CHARS: usize = 60;
/// Words of the user's first message a fallback title keeps.
pub const FALLBACK_TITLE_WORDS: usize = 6;
/// Output tokens a title request may use: a title is a few words, and the
/// cap keeps a small local model that rambles from holding a model server
/// slot for minutes (a model that spends it all on reasoning answers
/// nothing, and the fallback title applies).
const TITLE_MAX_OUTPUT_TOKENS: u32 = 256;
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
                    MessagePart::Text { text, .. } => Some(text.as_str()),
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
            let title = title.or_else(|| fallback_title(&first_message));
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

/// Asks the model for a title: the cleaned title (`None`: nothing usable,
/// the caller falls back to [`fallback_title`]) and the call's usage, if
/// the provider reported it.
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
        max_output_tokens: Some(TITLE_MAX_OUTPUT_TOKENS),
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

/// Characters trimmed from both ends of a title: quotes, Markdown markers
/// and spaces (brackets only in pairs: [`unwrap_brackets`]).
const TITLE_TRIM: &[char] = &[
    '"', '\'', '`', '*', '#', '_', '“', '”', '‘', '’', '«', '»', '<', '>', '~', '=', '|', ' ', '\t',
];

/// A title wrapped whole in brackets, without them: "(PostgreSQL basics)"
/// → "PostgreSQL basics"; "Lumina (a haiku)" stays.
fn unwrap_brackets(title: &str) -> &str {
    for (open, close) in [('(', ')'), ('[', ']')] {
        if let Some(inner) = title.strip_prefix(open).and_then(|t| t.strip_suffix(close))
            && !inner.contains([open, close])
        {
            return inner.trim_matches(TITLE_TRIM);
        }
    }
    title
}
/// Characters trimmed from the end of a title.
const TITLE_TRAILING: &[char] = &['.', '。', '!', '?', ',', ';', ':', '…', '-', '–', '—'];

/// The model's answer as a title, or `None` when it holds nothing
/// title-like (the caller then uses [`fallback_title`]):
///
/// - the first line that is not a lead-in (a line ending in `:`, such as
///   "Here is a title:") is taken, without list markers (`- `, `1. `),
///   Markdown markers and quotes;
/// - a prefix naming the title ("Title:", "**Chat title:**", "Sure, here is
///   a title: ...") is dropped, and so is trailing punctuation;
/// - junk is refused: an echo of the request ("The conversation begins",
///   "User: ...", "Assistant: ...", the instructions), talk about the
///   conversation ("The conversation ends", "This conversation is about"),
///   or nothing with a letter or digit;
/// - at most [`MAX_TITLE_WORDS`] words, cut at a word boundary to
///   [`TITLE_DISPLAY_CHARS`] characters, spaces collapsed.
pub fn clean_title(answer: &str) -> Option<String> {
    let line = answer
        .lines()
        .map(strip_line)
        .find(|l| !l.is_empty() && !l.ends_with(':'))?;
    let line = strip_title_prefix(&line);
    let title = unwrap_brackets(line.trim_matches(TITLE_TRIM))
        .trim_end_matches(|c| TITLE_TRAILING.contains(&c) || TITLE_TRIM.contains(&c));
    if is_junk_title(title) {
        return None;
    }
    shorten(title, MAX_TITLE_WORDS)
}

/// A title from the first words of the user's first message (at most
/// [`FALLBACK_TITLE_WORDS`], a greeting such as "Hello!" skipped, trailing
/// punctuation dropped); `None` when the message has no words.
pub fn fallback_title(first_message: &str) -> Option<String> {
    let line = first_message
        .lines()
        .map(strip_line)
        .find(|l| l.chars().any(char::is_alphanumeric))?;
    let mut rest = line.as_str();
    // "Hello!", "Hi there,": a greeting of one or two words says nothing.
    if let Some(end) = rest.find(['!', ',']) {
        let greeting = &rest[..end];
        let after = rest[end + 1..].trim_start();
        if greeting.split_whitespace().count() <= 2
            && GREETINGS.contains(
                &greeting
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_lowercase()
                    .as_str(),
            )
            && after.chars().any(char::is_alphanumeric)
        {
            rest = after;
        }
    }
    let title = shorten(rest, FALLBACK_TITLE_WORDS)?;
    let title = title
        .trim_end_matches(|c| TITLE_TRAILING.contains(&c) || TITLE_TRIM.contains(&c))
        .to_owned();
    (!title.is_empty()).then_some(title)
}

/// First words of a greeting that [`fallback_title`] skips.
const GREETINGS: &[&str] = &["hello", "hi", "hey", "hiya", "greetings", "good", "dear"];

/// A line without surrounding spaces, Markdown heading, list and quote
/// markers.
fn strip_line(line: &str) -> String {
    let mut line = line.trim();
    loop {
        let before = line;
        line = line
            .trim_start_matches(['#', '>', '*', '-', '+', '•'])
            .trim_start();
        // A numbered list item: "1. " or "1) ".
        let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && line[digits..].starts_with(['.', ')']) {
            let rest = &line[digits + 1..];
            if rest.starts_with(' ') {
                line = rest.trim_start();
            }
        }
        if line == before {
            break;
        }
    }
    line.to_owned()
}

/// Drops a lead-in that names the title: "Title:", "**Chat title:**",
/// "Sure! Here is a title: ...", "Suggested title - ...".
fn strip_title_prefix(line: &str) -> String {
    for sep in [':', '-', '–', '—'] {
        if let Some(at) = line.find(sep) {
            let head = line[..at].trim_matches(TITLE_TRIM).to_lowercase();
            let tail = line[at + sep.len_utf8()..].trim();
            if head
                .split_whitespace()
                .any(|w| w.trim_matches(TITLE_TRIM) == "title")
                && head.split_whitespace().count() <= 6
                && !tail.is_empty()
            {
                return tail.to_owned();
            }
        }
    }
    line.to_owned()
}

/// Whether a cleaned answer is no title: empty or without a letter or
/// digit, an echo of the request, or talk about the conversation.
fn is_junk_title(title: &str) -> bool {
    if !title.chars().any(char::is_alphanumeric) {
        return true;
    }
    let lower = title.to_lowercase();
    const JUNK_STARTS: &[&str] = &[
        "the conversation",
        "this conversation",
        "in this conversation",
        "conversation begins",
        "conversation ends",
        "user:",
        "assistant:",
        "system:",
        "you write titles",
        "answer with",
        "a short title",
        "title",
        "no title",
        "i'm sorry",
        "i am sorry",
        "sorry",
        "as an ai",
    ];
    JUNK_STARTS.iter().any(|junk| {
        lower.starts_with(junk)
            && (lower.len() == junk.len()
                || junk.ends_with(':')
                || !lower[junk.len()..].starts_with(char::is_alphanumeric))
    })
}

/// At most `max_words` words of `text`, spaces collapsed, cut at a word
/// boundary to [`TITLE_DISPLAY_CHARS`] characters (a longer first word is cut
/// there) and never over [`MAX_TITLE_CHARS`]; `None` when empty.
fn shorten(text: &str, max_words: usize) -> Option<String> {
    let mut title = String::new();
    for word in text.split_whitespace().take(max_words) {
        let extra = usize::from(!title.is_empty()) + word.chars().count();
        if title.chars().count() + extra > TITLE_DISPLAY_CHARS {
            if title.is_empty() {
                title = word.chars().take(TITLE_DISPLAY_CHARS).collect();
            }
            break;
        }
        if !title.is_empty() {
            title.push(' ');
        }
        title.push_str(word);
    }
    let title: String = title.chars().take(MAX_TITLE_CHARS).collect();
    let title = title.trim_matches(TITLE_TRIM).to_owned();
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers small local models gave to the title request (issue 34 and
    /// tools/model-eval runs), and the title kept; `None`: no title, the
    /// fallback applies.
    const CASES: &[(&str, Option<&str>)] = &[
        ("The conversation ends:", None),
        ("The conversation ends.", None),
        ("The conversation begins:\n\nUser: Hello!", None),
        ("User: Hello! In two sentences, what is PostgreSQL?", None),
        ("Assistant: PostgreSQL is a database.", None),
        ("Title:", None),
        ("Title", None),
        ("  \n \"\" \n", None),
        ("***", None),
        ("This conversation is about PostgreSQL.", None),
        ("You write titles for chat conversations.", None),
        (
            "Title: \"Planning a Trip to Lisbon.\"\n\nMore text",
            Some("Planning a Trip to Lisbon"),
        ),
        (
            "**Rust borrow checker basics**",
            Some("Rust borrow checker basics"),
        ),
        (
            "\"PostgreSQL: An Overview\"",
            Some("PostgreSQL: An Overview"),
        ),
        ("Title: PostgreSQL Overview.", Some("PostgreSQL Overview")),
        (
            "**Title:** Understanding PostgreSQL",
            Some("Understanding PostgreSQL"),
        ),
        ("Chat title - Learning Rust", Some("Learning Rust")),
        (
            "Sure! Here is a title: Intro to PostgreSQL!",
            Some("Intro to PostgreSQL"),
        ),
        (
            "Here is a title:\n\n\"What is PostgreSQL?\"",
            Some("What is PostgreSQL"),
        ),
        (
            "# PostgreSQL in two sentences",
            Some("PostgreSQL in two sentences"),
        ),
        (
            "1. PostgreSQL basics\n2. Databases",
            Some("PostgreSQL basics"),
        ),
        ("- `PostgreSQL` explained", Some("PostgreSQL` explained")),
        (
            "PostgreSQL, a relational database...",
            Some("PostgreSQL, a relational database"),
        ),
        (
            "one two three four five six seven eight nine ten",
            Some("one two three four five six seven eight"),
        ),
        (
            "PostgreSQL is a powerful open-source relational database management system",
            Some("PostgreSQL is a powerful open-source relational database"),
        ),
        ("Olá, mundo", Some("Olá, mundo")),
        (
            "Titles of Shakespeare's plays",
            Some("Titles of Shakespeare's plays"),
        ),
        (
            "Lumina (a haiku of the sea)",
            Some("Lumina (a haiku of the sea)"),
        ),
        ("(PostgreSQL basics)", Some("PostgreSQL basics")),
        ("[Draft] Release notes", Some("[Draft] Release notes")),
    ];

    #[test]
    fn answers_are_cleaned_into_titles_or_refused() {
        for (answer, want) in CASES {
            assert_eq!(clean_title(answer).as_deref(), *want, "answer {answer:?}");
        }
    }

    #[test]
    fn titles_fit_a_chat_list() {
        // Eight words of 67 characters: cut after the seventh.
        let long_words = "Supercalifragilistic expialidocious words that goes on and onwards";
        let title = clean_title(long_words).unwrap();
        assert_eq!(
            title,
            "Supercalifragilistic expialidocious words that goes on and"
        );
        assert!(title.chars().count() <= TITLE_DISPLAY_CHARS, "{title}");
        let one_word = "x".repeat(500);
        assert_eq!(
            clean_title(&one_word).unwrap().chars().count(),
            TITLE_DISPLAY_CHARS
        );
    }

    #[test]
    fn the_fallback_is_the_first_words_of_the_message() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "Hello! In two sentences, what is PostgreSQL?",
                Some("In two sentences, what is PostgreSQL"),
            ),
            (
                "Hi there, how do B-tree indexes work?",
                Some("how do B-tree indexes work"),
            ),
            (
                "Explain the Raft protocol.",
                Some("Explain the Raft protocol"),
            ),
            ("Hello!", Some("Hello")),
            (
                "Turn 1. In two or three sentences, tell me one thing about Rust.",
                Some("Turn 1. In two or three"),
            ),
            ("\n\n## Write a haiku\nabout the sea", Some("Write a haiku")),
            ("   \n  ", None),
            ("?!", None),
        ];
        for (message, want) in cases {
            assert_eq!(
                fallback_title(message).as_deref(),
                *want,
                "message {message:?}"
            );
        }
    }
}
