//! The renderer of `chatd chat`: turns stream events (API.md "Stream
//! (WebSocket)") into text for standard output and standard error. It does
//! no I/O: [`Renderer::apply`] returns [`Output`]s for the caller to write,
//! so the de-duplication rules below are unit-tested without a server.
//!
//! Two [`Mode`]s:
//! - [`Mode::Watch`] (`chatd chat watch`): a transcript on standard output.
//!   Committed messages are role-prefixed (`user> `, `assistant> `,
//!   `tool> `), tool calls are `assistant> [tool call NAME ARGS (ID)]`;
//!   status changes, queue changes, errors, retries and `action_required` are
//!   bracketed notices on standard error.
//! - [`Mode::Reply`] (`chatd chat new` / `send` / `tool-results`):
//!   standard output receives the assistant's text only, each assistant
//!   message ending with one newline, so a script can capture the reply;
//!   tool calls and results, errors, retries and `action_required` go to
//!   standard error.
//!
//! In both modes reasoning goes to standard error, prefixed `thinking> `
//! and dimmed when [`Style::color`] is set, and `action_required` lists the
//! pending calls then the `chatd chat tool-results` command that answers
//! them ([`describe_action_required`]).
//!
//! De-duplication (API.md "Stream" details; the stream's episode rules):
//! - Live `message_part`s preview one episode `(history_version,
//!   generation_attempt)` with contiguous `seq` from 1. Text deltas are
//!   printed as they arrive; a part whose `seq` was already printed (a replay
//!   after a reconnect) is skipped; a gap in `seq` stops live printing of the
//!   episode (the committed message fills in the rest). An episode whose
//!   first part seen is not `seq` 1 is never printed live.
//! - A committed assistant `message` replaces the preview: if the text
//!   printed live is a prefix of the message's text only the rest is
//!   printed, so a reply appears exactly once; with no live parts (a relay
//!   gap) the whole text is printed. Its episode is then finished: late
//!   parts of it are ignored.
//! - `preview_reset` marks the preview as dropped. Parts of the *same*
//!   episode that follow are a replay (the bootstrap after a reconnect) and
//!   are de-duplicated by `seq`; parts of a new episode (a retry, a
//!   takeover) restart the reply: the printed partial text cannot be
//!   unprinted, so its line is closed and `[the reply restarted]` is noted
//!   on standard error.
//! - `history_reset`: the preview is dropped the same way; messages already
//!   printed are not printed again (a terminal cannot unprint), new ones are.
//! - Committed messages are keyed by `id`; a re-sent message with a newer
//!   `revision` is noted on standard error in watch mode, not reprinted.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::Value;

/// One event of the chat stream, as the CLI reads it (a subset of the
/// server's `ChatStreamEvent`; unknown types decode as [`StreamEvent::Unknown`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// A live preview part of the message being generated.
    MessagePart {
        /// The part and its position in its episode.
        message_part: LivePart,
    },
    /// A committed message (re-sent when its revision advances).
    Message {
        /// The message.
        message: Message,
    },
    /// The chat's status changed.
    Status {
        /// The new status.
        status: StatusPayload,
    },
    /// The chat's persisted error.
    Error {
        /// The error.
        error: ChatError,
    },
    /// The whole queue, in order.
    QueueUpdate {
        /// Queued messages, head first.
        queued_messages: Vec<QueuedMessage>,
    },
    /// The worker waits for client-side tool results.
    ActionRequired {
        /// The pending calls.
        action_required: ActionRequired,
    },
    /// The worker waits before retrying a failed generation attempt.
    Retry {
        /// The retry.
        retry: Retry,
    },
    /// The size of the model context (on connect and when it changes).
    Context {
        /// `Chat.context`.
        context: ContextInfo,
    },
    /// Drop the in-progress preview.
    PreviewReset,
    /// Drop cached messages; every current message follows.
    HistoryReset,
    /// An event type this client does not know; ignored.
    #[serde(other)]
    Unknown,
}

/// `Chat.context` (API.md "Context management"), as the CLI prints it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct ContextInfo {
    /// Tokens the next model call would send.
    pub tokens: i64,
    /// The model's window, in tokens.
    pub limit: i64,
    /// `tokens` as a percentage of `limit`.
    pub percent: i64,
    /// Whether `tokens` is (partly) an estimate.
    #[serde(default)]
    pub estimated: bool,
    /// Summaries in the active history.
    #[serde(default)]
    pub compactions: i64,
}

impl ContextInfo {
    /// `context: 1234 of 8192 tokens (15%), 2 compactions` (`about` before
    /// an estimate).
    pub fn describe(&self) -> String {
        let about = if self.estimated { "about " } else { "" };
        let compactions = match self.compactions {
            0 => String::new(),
            1 => ", 1 compaction".to_owned(),
            n => format!(", {n} compactions"),
        };
        format!(
            "context: {about}{} of {} tokens ({}%){compactions}",
            self.tokens, self.limit, self.percent
        )
    }
}

/// The tool name of the visible record of a compaction.
pub const COMPACTION_TOOL: &str = "chatd_compact";

/// `[context compacted: 12 messages summarised, about 4000 → 600 tokens]`
/// for the result of a `chatd_compact` call.
pub fn describe_compaction(result: &Value, is_error: bool) -> String {
    if is_error {
        let why = result["error"].as_str().unwrap_or("failed");
        return format!("[context not compacted: {why}]");
    }
    format!(
        "[context compacted: {} messages summarised, about {} → {} tokens]",
        result["summarized_messages"], result["tokens_before"], result["tokens_after"]
    )
}

/// Payload of `message_part`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LivePart {
    /// Role of the message being previewed.
    pub role: String,
    /// The delta.
    pub part: Part,
    /// History version of the episode.
    pub history_version: i64,
    /// Generation attempt of the episode.
    pub generation_attempt: i64,
    /// Position in the episode, from 1.
    pub seq: u64,
}

/// A message part, committed (`ChatMessagePart`) or live (a delta).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type")]
pub enum Part {
    /// Text (a delta when live).
    #[serde(rename = "text")]
    Text {
        /// The text.
        text: String,
    },
    /// Reasoning text (a delta when live).
    #[serde(rename = "reasoning")]
    Reasoning {
        /// The text.
        text: String,
    },
    /// A tool call: `args` when committed, `args_delta` when live.
    #[serde(rename = "tool-call")]
    ToolCall {
        /// The provider's id.
        #[serde(default)]
        tool_call_id: String,
        /// The tool's name.
        #[serde(default)]
        tool_name: String,
        /// JSON arguments as a string (committed).
        #[serde(default)]
        args: Option<String>,
        /// A piece of the arguments (live).
        #[serde(default)]
        args_delta: Option<String>,
    },
    /// A tool's result.
    #[serde(rename = "tool-result")]
    ToolResult {
        /// The call it answers.
        #[serde(default)]
        tool_call_id: String,
        /// The tool's name.
        #[serde(default)]
        tool_name: String,
        /// Any JSON.
        #[serde(default)]
        result: Value,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// An attached file.
    #[serde(rename = "file")]
    File {
        /// The file's id.
        #[serde(default)]
        file_id: String,
        /// Its media type.
        #[serde(default)]
        media_type: String,
        /// Its name, if known.
        #[serde(default)]
        name: Option<String>,
    },
    /// A person's approval of a tool call (API.md "Tool approval").
    #[serde(rename = "tool-approval")]
    ToolApproval {
        /// The call approved.
        #[serde(default)]
        tool_call_id: String,
        /// The tool's name.
        #[serde(default)]
        tool_name: String,
        /// The decision.
        #[serde(default)]
        approved: bool,
        /// The reason given, if any.
        #[serde(default)]
        reason: Option<String>,
    },
    /// A part type this client does not know; ignored.
    #[serde(other)]
    Unknown,
}

/// A committed `ChatMessage` (the fields the CLI uses).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Message {
    /// Message id (positive).
    pub id: i64,
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The parts.
    #[serde(default)]
    pub content: Vec<Part>,
    /// Advances when the message is rewritten.
    #[serde(default)]
    pub revision: i64,
    /// The queued message this user message was promoted from.
    #[serde(default)]
    pub queued_message_id: Option<i64>,
    /// Why an assistant message ended (`stop`, `length`, `tool_calls`,
    /// `content_filter`, `interrupted`; `None` when unknown).
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The notice printed after an assistant message that did not end by
/// itself, for its `finish_reason`; `None` for a complete answer.
pub fn cut_short_notice(finish_reason: Option<&str>) -> Option<&'static str> {
    match finish_reason? {
        "length" => {
            Some("[answer cut short: the output token limit or the context window was reached]")
        }
        "content_filter" => {
            Some("[answer cut short: the provider withheld the rest (content filter)]")
        }
        "interrupted" => Some("[answer interrupted]"),
        _ => None,
    }
}

/// Payload of `status`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StatusPayload {
    /// `waiting`, `running`, `interrupting`, `requires_action` or `error`.
    pub status: String,
    /// The chat's history version.
    #[serde(default)]
    pub history_version: i64,
}

/// A `ChatError`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChatError {
    /// What went wrong.
    #[serde(default)]
    pub message: String,
    /// More about it.
    #[serde(default)]
    pub detail: Option<String>,
    /// `generic`, `rate_limit`, ...
    #[serde(default)]
    pub kind: Option<String>,
    /// Whether the worker retries it.
    #[serde(default)]
    pub retryable: bool,
}

impl ChatError {
    /// `MESSAGE: DETAIL (KIND)`, for standard error.
    pub fn describe(&self) -> String {
        let mut text = if self.message.is_empty() {
            "unknown error".to_owned()
        } else {
            self.message.clone()
        };
        if let Some(detail) = self.detail.as_deref().filter(|d| !d.is_empty()) {
            text.push_str(": ");
            text.push_str(detail);
        }
        if let Some(kind) = self.kind.as_deref() {
            text.push_str(&format!(" ({kind})"));
        }
        text
    }
}

/// A `ChatQueuedMessage` (the fields the CLI uses).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct QueuedMessage {
    /// Queued message id.
    pub id: i64,
}

/// Payload of `action_required`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ActionRequired {
    /// The calls waiting for results.
    #[serde(default)]
    pub tool_calls: Vec<PendingToolCall>,
    /// When the worker cancels them.
    #[serde(default)]
    pub deadline_at: Option<String>,
}

/// A tool call waiting for a client-side result or a decision.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PendingToolCall {
    /// The provider's id.
    pub tool_call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// `client_tool` (answer with output) or `approval` (approve or deny);
    /// `client_tool` when absent (an older server).
    #[serde(default = "client_tool")]
    pub kind: String,
    /// JSON arguments, as a string.
    #[serde(default)]
    pub args: String,
}

/// Payload of `retry`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Retry {
    /// Retry number n (1-based).
    #[serde(default)]
    pub attempt: i64,
    /// Delay before it, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// The error that caused it.
    pub error: Option<ChatError>,
}

/// Text for one of the two output streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// For standard output.
    Stdout(String),
    /// For standard error.
    Stderr(String),
}

/// What the renderer is rendering for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `chatd chat watch`: the whole transcript, role-prefixed.
    Watch,
    /// `chatd chat new` / `send` / `tool-results`: only the assistant's
    /// reply on standard output. With `Some(queued_id)`, nothing is printed
    /// until the user message promoted from that queued message is
    /// committed (so the reply to the turn already running is not mistaken
    /// for ours).
    Reply {
        /// The queued message whose answer is wanted.
        awaiting_queued: Option<i64>,
    },
}

/// Presentation switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    /// Dim reasoning with ANSI escapes (standard error is a terminal).
    pub color: bool,
    /// Close an open standard-output line before writing a standard-error
    /// line (both streams go to one terminal). Off when standard output is
    /// captured in reply mode, so the captured reply is exactly the text.
    pub tidy_lines: bool,
}

/// How the chat ended up once it is idle (not `running`/`interrupting`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Idle {
    /// `waiting`: the turn is done.
    Waiting,
    /// Reply mode: the turn that answered our message is over and a later
    /// user message (queued by someone else) has started the next one; the
    /// chat is busy again, but not with our reply.
    Answered,
    /// `error`; `reported` says whether the error was already printed.
    Error {
        /// Whether an `error` event was rendered for this status.
        reported: bool,
    },
    /// `requires_action`; `reported` says whether the pending calls were
    /// already printed.
    RequiresAction {
        /// Whether an `action_required` event was rendered for this status.
        reported: bool,
    },
}

/// The preview of the message being generated in one episode.
#[derive(Debug, Clone)]
struct Preview {
    /// `(history_version, generation_attempt)`.
    episode: (i64, i64),
    /// The `seq` expected next.
    next_seq: u64,
    /// Whether its parts are printed as they arrive.
    live: bool,
    /// The text printed so far.
    text: String,
    /// The reasoning printed so far.
    reasoning: String,
}

/// What is left unterminated at the end of the output so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenLine {
    /// Assistant text on standard output.
    Text,
    /// Reasoning on standard error.
    Reasoning,
}

/// Turns stream events into output; keeps the state needed to print each
/// thing once. See the module docs for the rules.
#[derive(Debug)]
pub struct Renderer {
    mode: Mode,
    style: Style,
    /// The chat id, for the `tool-results` hint.
    chat: String,
    /// The `--url` of the `tool-results` hint, when it needs one.
    hint_url: Option<String>,
    /// Whether the reply we wait for has started (always in watch mode).
    gate_open: bool,
    /// Reply mode: the id of the user message whose reply is printed, once
    /// known (the message sent, the queued one once promoted, or for a new
    /// chat the first user message seen).
    own_user_id: Option<i64>,
    /// Reply mode: a later user message was committed, so our turn is over.
    turn_done: bool,
    /// Committed message id → revision printed.
    seen: HashMap<i64, i64>,
    /// The highest committed message id seen (the reconnect's `after_id`).
    last_message_id: i64,
    preview: Option<Preview>,
    /// Episodes whose message was committed: late parts are ignored.
    finished: HashSet<(i64, i64)>,
    status: Option<String>,
    queue: Option<Vec<i64>>,
    error_reported: bool,
    action_reported: bool,
    /// The context last printed (watch mode).
    context: Option<ContextInfo>,
    open: Option<OpenLine>,
    /// An assistant text block is being printed: its role prefix is out,
    /// and lines that follow a newline inside it get none.
    in_text: bool,
    out: Vec<Output>,
}

impl Renderer {
    /// A renderer for `mode`, of chat `chat` (its id); the `tool-results`
    /// hint names the server with `--url hint_url` when that is `Some` (the
    /// server is not the one the hint would reach without it).
    pub fn new(mode: Mode, style: Style, chat: &str, hint_url: Option<&str>) -> Self {
        let gate_open = !matches!(
            mode,
            Mode::Reply {
                awaiting_queued: Some(_)
            }
        );
        Self {
            mode,
            style,
            chat: chat.to_owned(),
            hint_url: hint_url.map(str::to_owned),
            gate_open,
            own_user_id: None,
            turn_done: false,
            seen: HashMap::new(),
            last_message_id: 0,
            preview: None,
            finished: HashSet::new(),
            status: None,
            queue: None,
            error_reported: false,
            action_reported: false,
            context: None,
            open: None,
            in_text: false,
            out: Vec::new(),
        }
    }

    /// Applies one event; returns what to print, in order.
    pub fn apply(&mut self, event: &StreamEvent) -> Vec<Output> {
        match event {
            StreamEvent::MessagePart { message_part } => self.on_part(message_part),
            StreamEvent::Message { message } => self.on_message(message),
            StreamEvent::Status { status } => self.on_status(&status.status),
            StreamEvent::Error { error } => {
                self.error_reported = true;
                self.notice(format!("error: {}", error.describe()));
            }
            StreamEvent::QueueUpdate { queued_messages } => {
                let ids: Vec<i64> = queued_messages.iter().map(|q| q.id).collect();
                if self.mode == Mode::Watch
                    && self.queue.as_ref().map_or(!ids.is_empty(), |q| *q != ids)
                {
                    let text = match ids.len() {
                        0 => "[queue: empty]".to_owned(),
                        1 => "[queue: 1 message waiting]".to_owned(),
                        n => format!("[queue: {n} messages waiting]"),
                    };
                    self.notice(text);
                }
                self.queue = Some(ids);
            }
            StreamEvent::ActionRequired { action_required } => {
                self.action_reported = true;
                self.notice(describe_action_required(
                    action_required,
                    &self.chat,
                    self.hint_url.as_deref(),
                ));
            }
            StreamEvent::Retry { retry } => {
                let why = retry
                    .error
                    .as_ref()
                    .map(|e| format!(": {}", e.describe()))
                    .unwrap_or_default();
                self.notice(format!(
                    "[retry {} in {:.1}s{why}]",
                    retry.attempt,
                    retry.delay_ms as f64 / 1000.0
                ));
            }
            StreamEvent::Context { context } => {
                if self.mode == Mode::Watch && self.context.as_ref() != Some(context) {
                    self.notice(format!("[{}]", context.describe()));
                }
                self.context = Some(context.clone());
            }
            StreamEvent::PreviewReset => {}
            StreamEvent::HistoryReset => {
                self.close_preview();
                if self.mode == Mode::Watch {
                    self.notice("[history rewritten; new messages follow]".to_owned());
                }
            }
            StreamEvent::Unknown => {}
        }
        std::mem::take(&mut self.out)
    }

    /// The `tool-results` hint when the stream did not say which calls
    /// wait: `TOOL_CALL_ID` stands for each id.
    pub fn generic_tool_results_hint(&self) -> String {
        tool_results_hint(&self.chat, self.hint_url.as_deref(), std::iter::empty())
    }

    /// The highest committed message id seen: the `after_id` to reconnect
    /// with (0 when none).
    pub fn last_message_id(&self) -> i64 {
        self.last_message_id
    }

    /// Whether the reply the renderer waits for has started (its user
    /// message was committed); always true in watch mode.
    pub fn reply_started(&self) -> bool {
        self.gate_open || self.turn_done
    }

    /// Reply mode: the user message whose reply is printed is `id` (a
    /// message that was sent directly, not queued; the follow then starts
    /// after it), or for a continuation after tool results the newest
    /// message before it. Later user messages end the reply.
    pub fn with_own_message(mut self, id: i64) -> Self {
        self.own_user_id = Some(id);
        self
    }

    /// `Some` once the chat is idle (not `running`/`interrupting`) with an
    /// empty queue, as far as the stream has told; `None` before the
    /// first `status` or while busy.
    pub fn idle(&self) -> Option<Idle> {
        if self.turn_done {
            return Some(Idle::Answered);
        }
        let queue_pending = self.queue.as_ref().is_some_and(|q| !q.is_empty());
        // A turn that stopped in error or for client tools ends our reply
        // even with messages queued behind it: they are not ours.
        let replying = matches!(self.mode, Mode::Reply { .. }) && self.gate_open;
        match self.status.as_deref()? {
            // A queued message is about to run (it ends our reply when its
            // user message arrives).
            _ if queue_pending && !replying => None,
            "waiting" if queue_pending => None,
            "waiting" => Some(Idle::Waiting),
            "error" => Some(Idle::Error {
                reported: self.error_reported,
            }),
            "requires_action" => Some(Idle::RequiresAction {
                reported: self.action_reported,
            }),
            _ => None,
        }
    }

    /// Ends any open line (call before exiting).
    pub fn finish(&mut self) -> Vec<Output> {
        self.close_line();
        std::mem::take(&mut self.out)
    }

    fn on_part(&mut self, live: &LivePart) {
        let episode = (live.history_version, live.generation_attempt);
        if live.role != "assistant" || self.finished.contains(&episode) {
            return;
        }
        match &mut self.preview {
            Some(preview) if preview.episode == episode => {
                if live.seq < preview.next_seq {
                    return; // A replay after a reconnect: printed already.
                }
                if live.seq > preview.next_seq {
                    // A gap: the committed message fills in the rest.
                    preview.live = false;
                }
                preview.next_seq = live.seq + 1;
            }
            _ => {
                if self
                    .preview
                    .as_ref()
                    .is_some_and(|p| !p.text.is_empty() || !p.reasoning.is_empty())
                {
                    self.close_line();
                    self.notice("[the reply restarted]".to_owned());
                }
                self.preview = Some(Preview {
                    episode,
                    next_seq: live.seq + 1,
                    live: self.gate_open && live.seq == 1,
                    text: String::new(),
                    reasoning: String::new(),
                });
            }
        }
        let Some(preview) = self.preview.as_mut() else {
            return;
        };
        if !preview.live {
            return;
        }
        match &live.part {
            Part::Text { text } => {
                preview.text.push_str(text);
                let first = preview.text.len() == text.len();
                self.text(text, first);
            }
            Part::Reasoning { text } => {
                preview.reasoning.push_str(text);
                self.reasoning(text);
            }
            // Tool calls and results are shown once committed.
            _ => {}
        }
    }

    fn on_message(&mut self, message: &Message) {
        if let Some(revision) = self.seen.get_mut(&message.id) {
            if message.revision > *revision {
                *revision = message.revision;
                if self.mode == Mode::Watch {
                    self.notice(format!("[message {} was updated]", message.id));
                }
            }
            return;
        }
        self.seen.insert(message.id, message.revision);
        self.last_message_id = self.last_message_id.max(message.id);
        if let Mode::Reply { awaiting_queued } = self.mode
            && message.role == "user"
        {
            if !self.gate_open {
                if awaiting_queued.is_some() && message.queued_message_id == awaiting_queued {
                    self.gate_open = true;
                    self.own_user_id = Some(message.id);
                }
            } else {
                match self.own_user_id {
                    None => self.own_user_id = Some(message.id),
                    Some(own) if message.id > own => {
                        // The next turn started: ours is over.
                        self.close_preview();
                        self.gate_open = false;
                        self.turn_done = true;
                    }
                    Some(_) => {}
                }
            }
        }
        match message.role.as_str() {
            "assistant" => self.on_assistant(message),
            "tool" => self.on_tool_results(message),
            role => {
                if self.mode == Mode::Watch {
                    let text = plain_text(&message.content);
                    self.line_out(format!("{role}> {text}"));
                }
            }
        }
    }

    fn on_assistant(&mut self, message: &Message) {
        let preview = self.preview.take();
        if let Some(preview) = &preview {
            self.finished.insert(preview.episode);
        }
        if !self.gate_open {
            return;
        }
        let (printed_text, printed_reasoning) =
            preview.map(|p| (p.text, p.reasoning)).unwrap_or_default();

        let reasoning: String = message
            .content
            .iter()
            .filter_map(|p| match p {
                Part::Reasoning { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if let Some(rest) = reasoning.strip_prefix(printed_reasoning.as_str()) {
            self.reasoning(rest);
        } else {
            self.close_line();
            self.reasoning(&reasoning);
        }
        if self.open == Some(OpenLine::Reasoning) {
            self.close_line();
        }

        let text: String = message
            .content
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        match text.strip_prefix(printed_text.as_str()) {
            Some(rest) => self.text(rest, printed_text.is_empty()),
            None => {
                // The live text diverged from what was committed (it
                // cannot be unprinted): print the committed text afresh.
                self.close_line();
                self.text(&text, true);
            }
        }
        // Ends the text block even when its last line is complete.
        self.close_line();
        if let Some(notice) = cut_short_notice(message.finish_reason.as_deref()) {
            self.notice(notice.to_owned());
        }

        for part in &message.content {
            if let Part::ToolCall {
                tool_call_id,
                tool_name,
                args,
                ..
            } = part
            {
                if tool_name == COMPACTION_TOOL {
                    // Its result says what happened (`on_tool_results`).
                    continue;
                }
                let args = args.as_deref().unwrap_or_default();
                match self.mode {
                    Mode::Watch => self.line_out(format!(
                        "assistant> [tool call {tool_name} {args} ({tool_call_id})]"
                    )),
                    Mode::Reply { .. } => {
                        self.notice(format!("[tool call {tool_name} {args} ({tool_call_id})]"))
                    }
                }
            }
        }
    }

    fn on_tool_results(&mut self, message: &Message) {
        if !self.gate_open {
            return;
        }
        for part in &message.content {
            if let Part::ToolResult {
                tool_call_id,
                tool_name,
                result,
                is_error,
            } = part
            {
                if tool_name == COMPACTION_TOOL {
                    self.notice(describe_compaction(result, *is_error));
                    continue;
                }
                let result = match result {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let error = if *is_error { " error" } else { "" };
                let line = format!("[tool result{error} {tool_name} ({tool_call_id})] {result}");
                match self.mode {
                    Mode::Watch => self.line_out(format!("tool> {line}")),
                    Mode::Reply { .. } => self.notice(line),
                }
            } else if let Part::ToolApproval {
                tool_call_id,
                tool_name,
                approved,
                reason,
            } = part
            {
                let decision = if *approved { "approved" } else { "denied" };
                let reason = reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                let line = format!("[{decision} {tool_name} ({tool_call_id}){reason}]");
                match self.mode {
                    Mode::Watch => self.line_out(format!("tool> {line}")),
                    Mode::Reply { .. } => self.notice(line),
                }
            }
        }
    }

    fn on_status(&mut self, status: &str) {
        if self.status.as_deref() == Some(status) {
            return;
        }
        self.status = Some(status.to_owned());
        self.error_reported = false;
        self.action_reported = false;
        if status != "running" && status != "interrupting" {
            // No more parts will come for this turn: end a preview that
            // was not committed (an interrupted reply).
            self.close_preview();
        }
        if self.mode == Mode::Watch {
            self.notice(format!("[status: {status}]"));
        }
    }

    /// Drops the preview; its line, if open, is ended.
    fn close_preview(&mut self) {
        if let Some(preview) = self.preview.take() {
            self.finished.insert(preview.episode);
            self.close_line();
        }
    }

    /// Prints assistant text; `first` says whether it starts the message.
    fn text(&mut self, text: &str, first: bool) {
        if text.is_empty() {
            return;
        }
        if self.open == Some(OpenLine::Reasoning) {
            self.close_line();
        }
        let mut chunk = String::new();
        if !self.in_text && self.mode == Mode::Watch {
            chunk.push_str(if first {
                "assistant> "
            } else {
                "assistant> …"
            });
        }
        chunk.push_str(text);
        self.in_text = true;
        self.open = (!text.ends_with('\n')).then_some(OpenLine::Text);
        self.out.push(Output::Stdout(chunk));
    }

    /// Prints reasoning text on standard error.
    fn reasoning(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.open == Some(OpenLine::Text) && self.style.tidy_lines {
            self.close_line();
        }
        let mut chunk = String::new();
        if self.open != Some(OpenLine::Reasoning) {
            chunk.push_str("thinking> ");
        }
        if self.style.color {
            chunk.push_str("\x1b[2m");
            chunk.push_str(text);
            chunk.push_str("\x1b[0m");
        } else {
            chunk.push_str(text);
        }
        self.open = Some(OpenLine::Reasoning);
        self.out.push(Output::Stderr(chunk));
    }

    /// A whole line on standard output (watch transcript).
    fn line_out(&mut self, line: String) {
        self.close_line();
        self.out.push(Output::Stdout(format!("{line}\n")));
    }

    /// A whole line on standard error.
    fn notice(&mut self, line: String) {
        match self.open {
            Some(OpenLine::Reasoning) => self.close_line(),
            Some(OpenLine::Text) if self.style.tidy_lines => self.close_line(),
            _ => {}
        }
        self.out.push(Output::Stderr(format!("{line}\n")));
    }

    fn close_line(&mut self) {
        self.in_text = false;
        match self.open.take() {
            Some(OpenLine::Text) => self.out.push(Output::Stdout("\n".to_owned())),
            Some(OpenLine::Reasoning) => self.out.push(Output::Stderr("\n".to_owned())),
            None => {}
        }
    }
}

/// The text of `parts` for a one-line transcript entry: text parts joined,
/// files as `[file NAME (TYPE) ID]`.
fn plain_text(parts: &[Part]) -> String {
    let mut out = String::new();
    for part in parts {
        match part {
            Part::Text { text } => out.push_str(text),
            Part::File {
                file_id,
                media_type,
                name,
            } => out.push_str(&format!(
                "[file {} ({media_type}) {file_id}]",
                name.as_deref().unwrap_or("")
            )),
            _ => {}
        }
    }
    out
}

/// The `action_required` notice: the pending calls, one per line, then the
/// command that answers them (`chatd chat tool-results CHAT [--url URL]
/// --result ID=...`, one `--result` per call, ids shell-quoted when needed;
/// see [`tool_results_hint`]).
pub fn describe_action_required(action: &ActionRequired, chat: &str, url: Option<&str>) -> String {
    let (approvals, client): (Vec<&PendingToolCall>, Vec<&PendingToolCall>) = action
        .tool_calls
        .iter()
        .partition(|c| c.kind == APPROVAL_KIND);
    let mut text = match (client.len(), approvals.len()) {
        (n, 0) => format!("action required: {n} tool call(s) wait for results"),
        (0, n) => format!("action required: {n} tool call(s) wait for approval"),
        (n, m) => {
            format!("action required: {n} tool call(s) wait for results and {m} for approval")
        }
    };
    if let Some(deadline) = &action.deadline_at {
        text.push_str(&format!(" (deadline {deadline})"));
    }
    for call in &action.tool_calls {
        let approval = if call.kind == APPROVAL_KIND {
            "[needs approval] "
        } else {
            ""
        };
        text.push_str(&format!(
            "\n  {approval}{} {} ({})",
            call.tool_name, call.args, call.tool_call_id
        ));
    }
    if !client.is_empty() {
        text.push('\n');
        text.push_str(&tool_results_hint(
            chat,
            url,
            client.iter().map(|c| c.tool_call_id.as_str()),
        ));
    }
    if !approvals.is_empty() {
        text.push('\n');
        text.push_str(&approval_hint(
            chat,
            url,
            approvals.iter().map(|c| c.tool_call_id.as_str()),
        ));
    }
    text
}

/// `action_required.tool_calls[].kind` of a call waiting for approval.
pub const APPROVAL_KIND: &str = "approval";

fn client_tool() -> String {
    "client_tool".to_owned()
}

/// `approve with: chatd chat approve CHAT ID...` for `ids`, and how to
/// deny them instead. `url` as for [`tool_results_hint`].
pub fn approval_hint<'a>(
    chat: &str,
    url: Option<&str>,
    ids: impl Iterator<Item = &'a str>,
) -> String {
    let url = url
        .map(|u| format!(" --url {}", shell_word(u)))
        .unwrap_or_default();
    let ids: Vec<String> = ids.map(shell_word).collect();
    let ids = ids.join(" ");
    format!(
        "approve with: chatd chat approve {chat}{url} {ids} \
         (or deny: chatd chat deny {chat}{url} {ids} [--reason TEXT]; \
         every pending call is answered in one request)"
    )
}

/// `answer with: chatd chat tool-results CHAT --result ID=...` for each of
/// `ids` (`TOOL_CALL_ID` when there are none), followed by how to report a
/// failure. `url`, when given, is added as `--url URL` (shell-quoted when
/// needed); the token never is.
pub fn tool_results_hint<'a>(
    chat: &str,
    url: Option<&str>,
    ids: impl Iterator<Item = &'a str>,
) -> String {
    let mut command = format!("answer with: chatd chat tool-results {chat}");
    if let Some(url) = url {
        command.push_str(&format!(" --url {}", shell_word(url)));
    }
    let mut any = false;
    for id in ids {
        any = true;
        command.push_str(&format!(" --result {}=...", shell_word(id)));
    }
    if !any {
        command.push_str(" --result TOOL_CALL_ID=...");
    }
    command.push_str(
        " (replace ... with the output, JSON or text; \
         --error instead of --result for a failed call)",
    );
    command
}

/// `word` as one shell word: unchanged when it is made of characters no
/// shell treats specially, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:,/+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(value: Value) -> StreamEvent {
        serde_json::from_value(value).expect("a stream event")
    }

    fn part(hv: i64, attempt: i64, seq: u64, text: &str) -> StreamEvent {
        ev(json!({"type": "message_part", "chat_id": "c",
            "message_part": {"role": "assistant", "part": {"type": "text", "text": text},
            "history_version": hv, "generation_attempt": attempt, "seq": seq}}))
    }

    fn reasoning_part(hv: i64, attempt: i64, seq: u64, text: &str) -> StreamEvent {
        ev(json!({"type": "message_part", "chat_id": "c",
            "message_part": {"role": "assistant", "part": {"type": "reasoning", "text": text},
            "history_version": hv, "generation_attempt": attempt, "seq": seq}}))
    }

    fn message(id: i64, role: &str, content: Value) -> StreamEvent {
        ev(json!({"type": "message", "chat_id": "c", "message": {
            "id": id, "chat_id": "c", "role": role, "content": content,
            "revision": 1, "queued_message_id": null}}))
    }

    fn text_message(id: i64, role: &str, text: &str) -> StreamEvent {
        message(id, role, json!([{"type": "text", "text": text}]))
    }

    fn status(s: &str) -> StreamEvent {
        ev(json!({"type": "status", "chat_id": "c", "status": {"status": s, "history_version": 1}}))
    }

    fn queue(ids: &[i64]) -> StreamEvent {
        let queued: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "chat_id": "c", "content": [], "created_at": "t"}))
            .collect();
        ev(json!({"type": "queue_update", "chat_id": "c", "queued_messages": queued}))
    }

    fn reset() -> StreamEvent {
        ev(json!({"type": "preview_reset", "chat_id": "c"}))
    }

    /// Feeds `events`; returns (stdout, stderr) concatenated.
    fn render(renderer: &mut Renderer, events: &[StreamEvent]) -> (String, String) {
        let mut outs = Vec::new();
        for event in events {
            outs.extend(renderer.apply(event));
        }
        outs.extend(renderer.finish());
        split(&outs)
    }

    fn split(outs: &[Output]) -> (String, String) {
        let mut stdout = String::new();
        let mut stderr = String::new();
        for out in outs {
            match out {
                Output::Stdout(s) => stdout.push_str(s),
                Output::Stderr(s) => stderr.push_str(s),
            }
        }
        (stdout, stderr)
    }

    fn reply() -> Renderer {
        reply_to_queued(None)
    }

    /// Reply mode waiting for queued message `awaiting_queued`, if any.
    fn reply_to_queued(awaiting_queued: Option<i64>) -> Renderer {
        Renderer::new(Mode::Reply { awaiting_queued }, Style::default(), "c", None)
    }

    fn watch() -> Renderer {
        Renderer::new(Mode::Watch, Style::default(), "c", None)
    }

    #[test]
    fn parts_then_the_committed_message_print_the_reply_once() {
        let mut r = reply();
        let mut outs = Vec::new();
        outs.extend(r.apply(&text_message(1, "user", "hi")));
        outs.extend(r.apply(&status("running")));
        outs.extend(r.apply(&part(2, 1, 1, "Hel")));
        // Each delta is printed as it arrives.
        assert_eq!(outs, [Output::Stdout("Hel".into())]);
        outs.extend(r.apply(&part(2, 1, 2, "lo")));
        outs.extend(r.apply(&text_message(2, "assistant", "Hello")));
        outs.extend(r.apply(&reset()));
        outs.extend(r.apply(&status("waiting")));
        outs.extend(r.finish());
        assert_eq!(split(&outs), ("Hello\n".into(), String::new()));
        assert_eq!(r.idle(), Some(Idle::Waiting));
        assert_eq!(r.last_message_id(), 2);
    }

    #[test]
    fn an_answer_cut_short_is_followed_by_a_notice_on_stderr_and_a_complete_one_is_not() {
        let cut = |reason: &str| {
            ev(json!({"type": "message", "chat_id": "c", "message": {
                "id": 2, "chat_id": "c", "role": "assistant",
                "content": [{"type": "text", "text": "The answer beg"}],
                "revision": 1, "queued_message_id": null, "finish_reason": reason}}))
        };
        for (reason, notice) in [
            (
                "length",
                "[answer cut short: the output token limit or the context window was reached]\n",
            ),
            (
                "content_filter",
                "[answer cut short: the provider withheld the rest (content filter)]\n",
            ),
            ("interrupted", "[answer interrupted]\n"),
            ("stop", ""),
        ] {
            let mut r = reply();
            let (out, err) = render(&mut r, &[status("running"), cut(reason), status("waiting")]);
            assert_eq!(
                (out.as_str(), err.as_str()),
                ("The answer beg\n", notice),
                "{reason}"
            );
        }
        let mut r = watch();
        let (out, err) = render(&mut r, &[cut("length"), status("waiting")]);
        assert!(out.contains("The answer beg"), "{out}");
        assert!(err.contains("[answer cut short"), "{err}");
    }

    #[test]
    fn a_committed_message_without_parts_is_printed_whole() {
        let mut r = reply();
        let (out, err) = render(
            &mut r,
            &[
                status("running"),
                text_message(2, "assistant", "all at once"),
                status("waiting"),
            ],
        );
        assert_eq!((out.as_str(), err.as_str()), ("all at once\n", ""));
    }

    #[test]
    fn a_message_committed_before_its_last_parts_is_completed_and_late_parts_ignored() {
        let mut r = reply();
        let (out, _) = render(
            &mut r,
            &[
                part(2, 1, 1, "one "),
                text_message(2, "assistant", "one two"),
                part(2, 1, 2, "two"),
            ],
        );
        assert_eq!(out, "one two\n");
    }

    #[test]
    fn a_gap_in_seq_stops_live_printing_and_the_message_fills_in() {
        let mut r = reply();
        let (out, _) = render(
            &mut r,
            &[
                part(2, 1, 1, "a"),
                part(2, 1, 3, "c"),
                text_message(2, "assistant", "abc"),
            ],
        );
        assert_eq!(out, "abc\n");
    }

    #[test]
    fn a_replay_of_the_same_episode_after_preview_reset_is_not_printed_twice() {
        // A reconnect: the bootstrap sends preview_reset, then the relay's
        // buffered parts of the same episode from seq 1.
        let mut r = reply();
        let (out, err) = render(
            &mut r,
            &[
                part(2, 1, 1, "one "),
                part(2, 1, 2, "two "),
                status("running"),
                reset(),
                part(2, 1, 1, "one "),
                part(2, 1, 2, "two "),
                part(2, 1, 3, "three"),
                text_message(2, "assistant", "one two three"),
            ],
        );
        assert_eq!((out.as_str(), err.as_str()), ("one two three\n", ""));
    }

    #[test]
    fn watch_mode_prefixes_a_multi_line_reply_once() {
        let mut r = watch();
        let (out, _) = render(
            &mut r,
            &[
                text_message(1, "user", "a haiku"),
                part(2, 1, 1, "line one\n"),
                part(2, 1, 2, "line two\nline"),
                part(2, 1, 3, " three"),
                text_message(2, "assistant", "line one\nline two\nline three"),
                text_message(3, "user", "again\nplease"),
                text_message(4, "assistant", "first\nsecond\n"),
            ],
        );
        assert_eq!(
            out,
            "user> a haiku\nassistant> line one\nline two\nline three\n\
             user> again\nplease\nassistant> first\nsecond\n"
        );
    }

    #[test]
    fn preview_reset_then_a_new_attempt_restarts_the_reply() {
        let mut r = reply();
        let (out, err) = render(
            &mut r,
            &[
                part(2, 1, 1, "partial"),
                reset(),
                part(2, 2, 1, "full "),
                part(2, 2, 2, "answer"),
                text_message(2, "assistant", "full answer"),
            ],
        );
        assert_eq!(out, "partial\nfull answer\n");
        assert_eq!(err, "[the reply restarted]\n");
    }

    #[test]
    fn history_reset_drops_the_preview_and_does_not_reprint_known_messages() {
        let mut r = watch();
        let history_reset = ev(json!({"type": "history_reset", "chat_id": "c"}));
        let (out, err) = render(
            &mut r,
            &[
                text_message(1, "user", "hi"),
                text_message(2, "assistant", "hello"),
                text_message(3, "user", "again"),
                part(4, 1, 1, "draft"),
                history_reset,
                text_message(1, "user", "hi"),
                text_message(5, "user", "edited"),
                part(6, 1, 1, "new "),
                part(6, 1, 2, "answer"),
                text_message(6, "assistant", "new answer"),
            ],
        );
        assert_eq!(
            out,
            "user> hi\nassistant> hello\nuser> again\nassistant> draft\n\
             user> edited\nassistant> new answer\n"
        );
        assert_eq!(err, "[history rewritten; new messages follow]\n");
    }

    #[test]
    fn watch_mode_prefixes_roles_and_shows_tool_calls_and_results() {
        let mut r = watch();
        let (out, err) = render(
            &mut r,
            &[
                text_message(1, "user", "weather?"),
                status("running"),
                message(
                    2,
                    "assistant",
                    json!([{"type": "text", "text": "Let me look."},
                        {"type": "tool-call", "tool_call_id": "call_1", "tool_name": "weather",
                         "args": "{\"city\":\"Paris\"}"}]),
                ),
                message(
                    3,
                    "tool",
                    json!([{"type": "tool-result", "tool_call_id": "call_1", "tool_name": "weather",
                        "result": {"temp": 21}, "is_error": false}]),
                ),
                part(4, 1, 1, "It is "),
                part(4, 1, 2, "21."),
                text_message(4, "assistant", "It is 21."),
                status("waiting"),
            ],
        );
        assert_eq!(
            out,
            "user> weather?\n\
             assistant> Let me look.\n\
             assistant> [tool call weather {\"city\":\"Paris\"} (call_1)]\n\
             tool> [tool result weather (call_1)] {\"temp\":21}\n\
             assistant> It is 21.\n"
        );
        assert_eq!(err, "[status: running]\n[status: waiting]\n");
    }

    #[test]
    fn reply_mode_sends_tool_calls_to_stderr_and_keeps_stdout_to_the_text() {
        let mut r = reply();
        let (out, err) = render(
            &mut r,
            &[
                message(
                    2,
                    "assistant",
                    json!([{"type": "tool-call", "tool_call_id": "c1", "tool_name": "ls",
                        "args": "{}"}]),
                ),
                message(
                    3,
                    "tool",
                    json!([{"type": "tool-result", "tool_call_id": "c1", "tool_name": "ls",
                        "result": "a.txt", "is_error": true}]),
                ),
                text_message(4, "assistant", "done"),
            ],
        );
        assert_eq!(out, "done\n");
        assert_eq!(
            err,
            "[tool call ls {} (c1)]\n[tool result error ls (c1)] a.txt\n"
        );
    }

    #[test]
    fn reasoning_goes_to_stderr_prefixed_and_is_not_repeated_on_commit() {
        let mut r = reply();
        let (out, err) = render(
            &mut r,
            &[
                reasoning_part(2, 1, 1, "hmm, "),
                reasoning_part(2, 1, 2, "easy"),
                part(2, 1, 3, "42"),
                message(
                    2,
                    "assistant",
                    json!([{"type": "reasoning", "text": "hmm, easy"},
                        {"type": "text", "text": "42"}]),
                ),
            ],
        );
        assert_eq!(out, "42\n");
        assert_eq!(err, "thinking> hmm, easy\n");
    }

    #[test]
    fn a_queued_reply_prints_nothing_until_its_user_message_is_promoted() {
        let mut r = reply_to_queued(Some(7));
        let promoted = ev(json!({"type": "message", "chat_id": "c", "message": {
            "id": 3, "role": "user", "content": [{"type": "text", "text": "second"}],
            "revision": 1, "queued_message_id": 7}}));
        let mut outs = Vec::new();
        for event in [
            status("running"),
            queue(&[7]),
            part(1, 1, 1, "first "),
            part(1, 1, 2, "answer"),
        ] {
            outs.extend(r.apply(&event));
        }
        assert_eq!(r.idle(), None);
        assert!(!r.reply_started());
        for event in [
            text_message(2, "assistant", "first answer"),
            promoted,
            queue(&[]),
            reset(),
            part(3, 1, 1, "second "),
            part(3, 1, 2, "answer"),
            text_message(4, "assistant", "second answer"),
            status("waiting"),
        ] {
            outs.extend(r.apply(&event));
        }
        outs.extend(r.finish());
        assert!(r.reply_started());
        assert_eq!(split(&outs), ("second answer\n".into(), String::new()));
        assert_eq!(r.idle(), Some(Idle::Waiting));
    }

    #[test]
    fn a_reply_ends_at_the_next_user_message_and_does_not_print_its_answer() {
        // `send` to a busy chat, then someone queues behind us: our reply
        // is printed, theirs is not, and we are done while the chat runs on.
        let mut r = reply_to_queued(Some(7));
        let promoted = |id: i64, queued: i64, text: &str| {
            ev(json!({"type": "message", "chat_id": "c", "message": {
                "id": id, "role": "user", "content": [{"type": "text", "text": text}],
                "revision": 1, "queued_message_id": queued}}))
        };
        let mut outs = Vec::new();
        for event in [
            status("running"),
            queue(&[7, 8]),
            text_message(2, "assistant", "first answer"),
            promoted(3, 7, "ours"),
            queue(&[8]),
            part(3, 1, 1, "our "),
            part(3, 1, 2, "answer"),
            text_message(4, "assistant", "our answer"),
        ] {
            outs.extend(r.apply(&event));
        }
        assert_eq!(r.idle(), None, "still running our turn");
        for event in [
            promoted(5, 8, "theirs"),
            queue(&[]),
            part(4, 1, 1, "their "),
            text_message(6, "assistant", "their answer"),
        ] {
            outs.extend(r.apply(&event));
        }
        outs.extend(r.finish());
        assert_eq!(split(&outs), ("our answer\n".into(), String::new()));
        assert_eq!(r.idle(), Some(Idle::Answered));
        assert!(r.reply_started());

        // A message sent directly: the follow starts after it.
        let mut r = reply().with_own_message(10);
        let mut outs = Vec::new();
        for event in [
            status("running"),
            text_message(11, "assistant", "mine"),
            promoted(12, 9, "queued by another client"),
            text_message(13, "assistant", "not mine"),
        ] {
            outs.extend(r.apply(&event));
        }
        outs.extend(r.finish());
        assert_eq!(split(&outs), ("mine\n".into(), String::new()));
        assert_eq!(r.idle(), Some(Idle::Answered));
    }

    #[test]
    fn idle_needs_an_empty_queue_and_reports_errors_and_actions() {
        let mut r = reply();
        r.apply(&status("waiting"));
        r.apply(&queue(&[1]));
        assert_eq!(r.idle(), None, "a queued message is still to come");
        r.apply(&queue(&[]));
        assert_eq!(r.idle(), Some(Idle::Waiting));

        r.apply(&status("error"));
        assert_eq!(r.idle(), Some(Idle::Error { reported: false }));
        let outs = r.apply(&ev(json!({"type": "error", "chat_id": "c",
            "error": {"message": "boom", "kind": "generic", "retryable": false}})));
        assert_eq!(outs, [Output::Stderr("error: boom (generic)\n".into())]);
        assert_eq!(r.idle(), Some(Idle::Error { reported: true }));

        r.apply(&status("requires_action"));
        let outs = r.apply(&ev(json!({"type": "action_required", "chat_id": "c",
            "action_required": {"tool_calls": [{"tool_call_id": "c1", "tool_name": "ask",
            "args": "{\"q\":1}"}], "deadline_at": null}})));
        assert_eq!(
            split(&outs).1,
            "action required: 1 tool call(s) wait for results\n  ask {\"q\":1} (c1)\n\
             answer with: chatd chat tool-results c --result c1=... \
             (replace ... with the output, JSON or text; \
             --error instead of --result for a failed call)\n"
        );
        assert_eq!(r.idle(), Some(Idle::RequiresAction { reported: true }));
    }

    #[test]
    fn pending_approvals_are_marked_and_answered_with_approve_or_deny() {
        let action: ActionRequired = serde_json::from_value(json!({"tool_calls": [
            {"tool_call_id": "c1", "tool_name": "ask", "args": "{}", "kind": "client_tool"},
            {"tool_call_id": "c2", "tool_name": "fs__rm", "args": "{\"path\":\"/x\"}", "kind": "approval"},
        ], "deadline_at": "2026-01-01T00:05:00Z"}))
        .unwrap();
        assert_eq!(
            describe_action_required(&action, "CHAT", None),
            "action required: 1 tool call(s) wait for results and 1 for approval \
             (deadline 2026-01-01T00:05:00Z)\n  ask {} (c1)\n  \
             [needs approval] fs__rm {\"path\":\"/x\"} (c2)\n\
             answer with: chatd chat tool-results CHAT --result c1=... \
             (replace ... with the output, JSON or text; \
             --error instead of --result for a failed call)\n\
             approve with: chatd chat approve CHAT c2 \
             (or deny: chatd chat deny CHAT c2 [--reason TEXT]; \
             every pending call is answered in one request)"
        );
        let mut r = watch();
        let (out, _) = render(
            &mut r,
            &[message(
                4,
                "tool",
                json!([{"type": "tool-approval", "tool_call_id": "c2",
                    "tool_name": "fs__rm", "approved": true, "reason": "fine"}]),
            )],
        );
        assert_eq!(out, "tool> [approved fs__rm (c2): fine]\n");
    }

    #[test]
    fn the_tool_results_hint_has_one_result_per_call_and_quotes_odd_ids() {
        let hint = tool_results_hint(
            "CHAT",
            None,
            ["call_1", "toolu_01:x", "it's odd"].into_iter(),
        );
        assert_eq!(
            hint,
            "answer with: chatd chat tool-results CHAT --result call_1=... \
             --result toolu_01:x=... --result 'it'\\''s odd'=... \
             (replace ... with the output, JSON or text; \
             --error instead of --result for a failed call)"
        );
        assert!(
            tool_results_hint("CHAT", None, std::iter::empty()).starts_with(
                "answer with: chatd chat tool-results CHAT --result TOOL_CALL_ID=... "
            )
        );
    }

    #[test]
    fn the_tool_results_hint_names_the_server_when_given_a_url() {
        assert!(
            tool_results_hint(
                "CHAT",
                Some("https://chat.example:8443"),
                ["c1"].into_iter()
            )
            .starts_with(
                "answer with: chatd chat tool-results CHAT \
                     --url https://chat.example:8443 --result c1=... "
            )
        );
        assert!(
            tool_results_hint("CHAT", Some("http://h/a b?x=1&y"), std::iter::empty()).starts_with(
                "answer with: chatd chat tool-results CHAT \
                 --url 'http://h/a b?x=1&y' --result TOOL_CALL_ID=... "
            )
        );
        let r = Renderer::new(Mode::Watch, Style::default(), "c", Some("http://h:1"));
        let hint = r.generic_tool_results_hint();
        assert!(
            hint.starts_with(
                "answer with: chatd chat tool-results c --url http://h:1 --result TOOL_CALL_ID=... "
            ),
            "{hint}"
        );
    }

    #[test]
    fn an_interrupted_preview_has_its_line_closed_when_the_chat_goes_idle() {
        let mut r = reply();
        let (out, _) = render(
            &mut r,
            &[
                status("running"),
                part(2, 1, 1, "cut sh"),
                status("waiting"),
            ],
        );
        assert_eq!(out, "cut sh\n");
    }

    #[test]
    fn unknown_event_and_part_types_are_ignored() {
        let mut r = watch();
        let unknown = ev(json!({"type": "something_new", "chat_id": "c", "x": 1}));
        assert_eq!(unknown, StreamEvent::Unknown);
        let (out, _) = render(
            &mut r,
            &[
                unknown,
                message(
                    1,
                    "user",
                    json!([{"type": "text", "text": "a"}, {"type": "hologram"}]),
                ),
            ],
        );
        assert_eq!(out, "user> a\n");
    }
}
