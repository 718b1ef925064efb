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
//! them ([`describe_action_required`]). A workspace `shell` call is shown
//! as `$ COMMAND` and its result as the command's output and exit code
//! ([`shell`]), in the place of the call's and the result's line.
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
//!   In reply mode, messages up to [`Renderer::with_history_through`] are
//!   history and never printed (`regenerate`'s new branch is sent whole).
//! - Committed messages are keyed by `id`; a re-sent message with a newer
//!   `revision` is noted on standard error in watch mode, not reprinted.

mod notices;
mod shell;

/// The lines that show a message's provider-hosted tools (API.md
/// "Workspaces and provider-hosted tools"; the provider ran them): `[web
/// search: <query>]`, its results as `title <url>` (an error as the
/// provider's code), then the text's citations numbered `[n] title <url>`.
fn provider_tool_lines(parts: &[MessagePart]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut citations = Vec::new();
    for part in parts {
        match part {
            MessagePart::ProviderToolCall {
                tool_name, input, ..
            } => {
                let shown = match input.get("query").and_then(Value::as_str) {
                    Some(query) => query.to_owned(),
                    None => input.to_string(),
                };
                lines.push(format!("[{}: {shown}]", tool_name.replace('_', " ")));
            }
            MessagePart::ProviderToolResult {
                tool_name,
                result,
                is_error,
                ..
            } => {
                let name = tool_name.replace('_', " ");
                if *is_error {
                    let code = result.get("error_code").and_then(Value::as_str);
                    lines.push(format!(
                        "[{name} failed: {}]",
                        code.map_or_else(|| result.to_string(), str::to_owned)
                    ));
                } else if let Some(items) = result.as_array() {
                    for item in items {
                        if let Some(url) = item.get("url").and_then(Value::as_str) {
                            let title = item.get("title").and_then(Value::as_str).unwrap_or(url);
                            lines.push(format!("  {title} <{url}>"));
                        }
                    }
                }
            }
            MessagePart::Text {
                citations: cited, ..
            } => citations.extend(cited.iter()),
            _ => {}
        }
    }
    for (n, c) in citations.iter().enumerate() {
        let title = c.title.as_deref().unwrap_or(&c.url);
        lines.push(format!("[{}] {title} <{}>", n + 1, c.url));
    }
    lines
}

#[cfg(test)]
mod tests;

pub use self::notices::{COMPACTION_TOOL, describe_compaction};

use std::collections::{HashMap, HashSet};

use chatd_core::{ChatRole, ChatStatus, MessagePart, PartDelta};
use serde_json::Value;

use self::notices::{cut_short_notice, describe_action_required, plain_text, tool_results_hint};
use crate::chat_cli::wire::{
    ChatContext, Message, MessagePartPayload, StreamEvent, describe_context, describe_error,
};

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
    /// Reply mode: messages with an id up to this one are history, never
    /// the reply (0: none is).
    history_through: i64,
    /// Committed message id → revision printed.
    seen: HashMap<i64, i64>,
    /// The highest committed message id seen (the reconnect's `after_id`).
    last_message_id: i64,
    preview: Option<Preview>,
    /// Episodes whose message was committed: late parts are ignored.
    finished: HashSet<(i64, i64)>,
    status: Option<ChatStatus>,
    queue: Option<Vec<i64>>,
    error_reported: bool,
    action_reported: bool,
    /// The context last printed (watch mode).
    context: Option<ChatContext>,
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
            history_through: 0,
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
            StreamEvent::Status { status } => self.on_status(status.status),
            StreamEvent::Error { error } => {
                self.error_reported = true;
                self.notice(format!("error: {}", describe_error(error)));
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
                let why = format!(": {}", describe_error(&retry.error));
                self.notice(format!(
                    "[retry {} in {:.1}s{why}]",
                    retry.attempt,
                    retry.delay_ms as f64 / 1000.0
                ));
            }
            StreamEvent::Context { context } => {
                if self.mode == Mode::Watch && self.context.as_ref() != Some(context) {
                    self.notice(format!("[{}]", describe_context(context)));
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

    /// Reply mode: messages with an id up to `id` are history, not the
    /// reply, even when the stream sends them (again): `regenerate`, whose
    /// new branch follows a `history_reset` with every message of the
    /// branch, the old ones included.
    pub fn with_history_through(mut self, id: i64) -> Self {
        self.history_through = id;
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
        match self.status? {
            // A queued message is about to run (it ends our reply when its
            // user message arrives).
            _ if queue_pending && !replying => None,
            ChatStatus::Waiting if queue_pending => None,
            ChatStatus::Waiting => Some(Idle::Waiting),
            ChatStatus::Error => Some(Idle::Error {
                reported: self.error_reported,
            }),
            ChatStatus::RequiresAction => Some(Idle::RequiresAction {
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

    fn on_part(&mut self, live: &MessagePartPayload) {
        let episode = (live.history_version, live.generation_attempt);
        if live.role != ChatRole::Assistant || self.finished.contains(&episode) {
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
            PartDelta::Text { text } => {
                preview.text.push_str(text);
                let first = preview.text.len() == text.len();
                self.text(text, first);
            }
            PartDelta::Reasoning { text } => {
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
        if matches!(self.mode, Mode::Reply { .. }) && message.id <= self.history_through {
            return;
        }
        if let Mode::Reply { awaiting_queued } = self.mode
            && message.role == ChatRole::User
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
        match message.role {
            ChatRole::Assistant => self.on_assistant(message),
            ChatRole::Tool => self.on_tool_results(message),
            role => {
                if self.mode == Mode::Watch {
                    let text = plain_text(&message.content);
                    self.line_out(format!("{}> {text}", role.as_str()));
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
                MessagePart::Reasoning { text, .. } => Some(text.as_str()),
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
                MessagePart::Text { text, .. } => Some(text.as_str()),
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
        if let Some(notice) = cut_short_notice(message.finish_reason) {
            self.notice(notice.to_owned());
        }

        for part in &message.content {
            if let MessagePart::ToolCall {
                tool_call_id,
                tool_name,
                args,
            } = part
            {
                if tool_name == COMPACTION_TOOL {
                    // Its result says what happened (`on_tool_results`).
                    continue;
                }
                if tool_name == shell::SHELL_TOOL
                    && let Some(line) = shell::call_line(args)
                {
                    self.tool_lines(&[line], "assistant> ");
                    continue;
                }
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
        for line in provider_tool_lines(&message.content) {
            match self.mode {
                Mode::Watch => self.line_out(format!("assistant> {line}")),
                Mode::Reply { .. } => self.notice(line),
            }
        }
    }

    fn on_tool_results(&mut self, message: &Message) {
        if !self.gate_open {
            return;
        }
        for part in &message.content {
            if let MessagePart::ToolResult {
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
                if tool_name == shell::SHELL_TOOL
                    && let Some(lines) = shell::result_lines(result, *is_error)
                {
                    self.tool_lines(&lines, "tool> ");
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
            } else if let MessagePart::ToolApproval {
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

    fn on_status(&mut self, status: ChatStatus) {
        if self.status == Some(status) {
            return;
        }
        self.status = Some(status);
        self.error_reported = false;
        self.action_reported = false;
        if !matches!(status, ChatStatus::Running | ChatStatus::Interrupting) {
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

    /// Lines of a tool's call or result ([`shell`]): in watch mode on
    /// standard output, each line after `prefix`; in reply mode as they
    /// are, on standard error.
    fn tool_lines(&mut self, lines: &[String], prefix: &str) {
        for line in lines {
            match self.mode {
                Mode::Watch => self.line_out(format!("{prefix}{line}")),
                Mode::Reply { .. } => self.notice(line.clone()),
            }
        }
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
