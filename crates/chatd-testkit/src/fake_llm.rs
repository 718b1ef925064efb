//! A scripted streaming LLM server for tests, speaking OpenAI Chat Completions
//! and Anthropic Messages.
//!
//! [`FakeLlm::start`] binds `127.0.0.1:0` and answers
//! `POST /v1/chat/completions` with Chat Completions SSE chunks
//! (`chat.completion.chunk`, then `data: [DONE]`), and `POST /v1/messages`
//! with Anthropic Messages SSE events (`message_start`, content blocks,
//! `message_delta`, `message_stop`), whatever the request's `stream` flag
//! says. Both paths play the same [`Script`]s from the same queue: the path
//! picks the wire format (Anthropic mode: text and reasoning steps become
//! `text`/`thinking` blocks, a thinking block ends with a `signature_delta`,
//! tool calls become `tool_use` blocks with `input_json_delta`s, usage goes to
//! `message_start`/`message_delta` with cached tokens as
//! `cache_read_input_tokens`, OpenAI finish reasons are mapped to Anthropic
//! stop reasons, and [`Script::stream_error`] is an `event: error`). Each request consumes the next queued [`Script`]
//! ([`FakeLlm::push`]); when the queue is empty the default responder answers
//! ([`FakeLlm::set_default`], [`FakeLlm::set_default_fn`]), and without one the
//! server answers `400` with an `unscripted_request` error so that a test that
//! forgot a script fails fast instead of retrying.
//!
//! A script is a list of [`Step`]s: text, reasoning and tool-call chunks
//! (parallel calls by index, arguments split into pieces), usage, finish
//! reason, delays, an HTTP error status, a disconnect mid-stream (the body is
//! aborted without `[DONE]`) and a hang (nothing more is sent until the client
//! goes away). Unless the script ends in a disconnect or a hang, the server
//! closes the response the way OpenAI does: a chunk with the finish reason
//! (`tool_calls` when the script made tool calls, else `stop`, unless
//! [`Script::finish`] says otherwise), the usage chunk with `choices: []` if
//! the script has [`Script::usage`], and `data: [DONE]`.
//!
//! Every request is recorded ([`FakeLlm::requests`], [`FakeLlm::wait_for_request`]),
//! including those to other paths (answered `404`).
//!
//! Title requests (the worker's background "write a title" call, recognised
//! by [`is_title_request`]) never take a queued script: they are answered by
//! the title responder ([`FakeLlm::set_title_fn`]; by default the text
//! [`DEFAULT_FAKE_TITLE`]), so that a test's queue is not consumed by them.
//!
//! The `fake-llm` binary of this crate serves the same thing as a separate
//! process for end-to-end tests.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The path the server answers on (below the base URL's host).
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";
/// The path of the Anthropic mode.
pub const MESSAGES_PATH: &str = "/v1/messages";
/// The title the fake answers title requests with by default.
pub const DEFAULT_FAKE_TITLE: &str = "A chat with the fake model";

/// Whether `request` is a chat-title request: its system prompt (OpenAI's
/// first `system` message or Anthropic's `system` parameter) asks for titles
/// of chat conversations, as the worker's title prompt does.
pub fn is_title_request(request: &RecordedRequest) -> bool {
    system_prompt_contains(request, "titles for chat conversations")
}

/// Whether the system prompt of `request` (OpenAI's first `system` message
/// or Anthropic's `system` parameter) contains `marker`.
fn system_prompt_contains(request: &RecordedRequest, marker: &str) -> bool {
    let openai = request.body["messages"][0]["role"] == "system"
        && request.body["messages"][0]["content"]
            .as_str()
            .is_some_and(|s| s.contains(marker));
    let anthropic = request.body["system"]
        .as_str()
        .is_some_and(|s| s.contains(marker));
    openai || anthropic
}

/// Whether `request` is one of the worker's compaction (summarization)
/// calls: its system prompt says it compresses conversations, as the
/// worker's compaction instructions do.
pub fn is_compaction_request(request: &RecordedRequest) -> bool {
    system_prompt_contains(request, "You compress conversations")
}

/// A short summary answering compaction request `request`: it names how
/// many characters it summarizes; usage is the request's size over 4 and
/// the answer's.
pub fn summary_of(request: &RecordedRequest) -> Script {
    let chars = request.last_user_text().unwrap_or_default().chars().count();
    let text = format!("Summary: an earlier conversation of {chars} characters.");
    let prompt = i64::try_from(request.body.to_string().len() / 4).unwrap_or(i64::MAX);
    let completion = i64::try_from(text.len() / 4).unwrap_or(0);
    Script::text(text).usage(prompt, completion)
}

/// The signature the Anthropic mode sends at the end of a thinking block.
pub const FAKE_THINKING_SIGNATURE: &str = "fake-signature-AAAA";

/// The wire format of one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    OpenAi,
    Anthropic,
}

/// A running fake LLM server. Dropping it stops the server and ends every
/// hanging response.
pub struct FakeLlm {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: CancellationToken,
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// Headers, names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The text of the last `user` message of a Chat Completions or Messages
    /// body (string content, or the text parts of array content joined), if
    /// any.
    pub fn last_user_text(&self) -> Option<String> {
        let messages = self.body.get("messages")?.as_array()?;
        let last = messages
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
        match last.get("content")? {
            Value::String(text) => Some(text.clone()),
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        }
    }

    /// The tool results that end the conversation of a Chat Completions or
    /// Messages body, in order: the content of the trailing `role: "tool"`
    /// messages (OpenAI), or the `tool_result` blocks of a last `user`
    /// message (Anthropic; text blocks of a block's content joined). Empty
    /// when the last message is not a tool result.
    pub fn trailing_tool_results(&self) -> Vec<String> {
        let Some(messages) = self.body.get("messages").and_then(Value::as_array) else {
            return Vec::new();
        };
        let content_text = |content: &Value| match content {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
        let Some(last) = messages.last() else {
            return Vec::new();
        };
        match role(last).as_deref() {
            Some("tool") => {
                let mut out: Vec<String> = messages
                    .iter()
                    .rev()
                    .take_while(|m| role(m).as_deref() == Some("tool"))
                    .map(|m| content_text(m.get("content").unwrap_or(&Value::Null)))
                    .collect();
                out.reverse();
                out
            }
            Some("user") => last
                .get("content")
                .and_then(Value::as_array)
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                        .map(|b| content_text(b.get("content").unwrap_or(&Value::Null)))
                        .collect()
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

/// One scripted response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Script {
    steps: Vec<Step>,
}

/// One step of a [`Script`], played in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A chunk whose delta is this text (`delta.content`).
    Text(String),
    /// A chunk whose delta is this reasoning (`delta.reasoning_content`).
    Reasoning(String),
    /// The first chunk of a tool call: index, id and name, empty arguments.
    ToolCallStart {
        /// The call's index in this response.
        index: usize,
        /// Its id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// A chunk with a piece of a tool call's arguments (index only).
    ToolCallArgs {
        /// The call's index.
        index: usize,
        /// The piece.
        args: String,
    },
    /// Usage reported in the closing `choices: []` chunk (tokens).
    Usage {
        /// `prompt_tokens`.
        prompt_tokens: i64,
        /// `completion_tokens`.
        completion_tokens: i64,
        /// `prompt_tokens_details.cached_tokens`.
        cached_tokens: i64,
        /// `completion_tokens_details.reasoning_tokens`.
        reasoning_tokens: i64,
    },
    /// A provider-hosted web search (API.md "Workspaces and provider-hosted
    /// tools"). Anthropic mode: a `server_tool_use` block (`input:
    /// {"query": query}` streamed as `input_json_delta`) and a
    /// `web_search_tool_result` block listing `results` as
    /// `web_search_result`s with `encrypted_content`
    /// `"fake-encrypted-<n>"`; OpenAI mode: nothing (Chat Completions
    /// does not show the search, only its citations).
    WebSearch {
        /// The call's id (`srvtoolu_...`).
        id: String,
        /// The query.
        query: String,
        /// The results: `(url, title)`.
        results: Vec<(String, String)>,
    },
    /// Text citing a source. Anthropic mode: a text block of its own with a
    /// `citations_delta` (`web_search_result_location`, `encrypted_index`
    /// `"fake-index"`) before the text; OpenAI mode: the text, then a delta
    /// with a `url_citation` annotation spanning it.
    CitedText {
        /// The text.
        text: String,
        /// The cited source's URL.
        url: String,
        /// Its title.
        title: String,
        /// The passage quoted (Anthropic's `cited_text`).
        cited_text: String,
    },
    /// The finish reason sent when the script ends (any string).
    Finish(String),
    /// Wait this long before the next step.
    Delay(Duration),
    /// Answer with this status and body instead of a stream. Only meaningful
    /// as the first step; the rest of the script is ignored.
    HttpError {
        /// The status code.
        status: u16,
        /// The body (sent as `application/json` when it parses as JSON).
        body: String,
    },
    /// A raw `data:` payload, sent as is (a mid-stream error, a malformed
    /// chunk).
    RawData(String),
    /// An error inside the stream: OpenAI `data: {"error": {...}}`,
    /// Anthropic `event: error`.
    StreamError {
        /// The error's message.
        message: String,
        /// Its `type` (`server_error`, `overloaded_error`, ...).
        error_type: String,
    },
    /// Abort the response body here: no finish chunk, no `[DONE]`.
    Disconnect,
    /// Send nothing more until the client goes away.
    Hang,
    /// Answer `200` with `text/event-stream` and an empty body, closed
    /// cleanly (llama.cpp's answer to a prompt longer than its window,
    /// fixture `llamacpp-error-context-stream.sse`); only honoured as the
    /// first step.
    EmptyStream,
}

impl Script {
    /// An empty script: it answers with just the closing chunks.
    pub fn new() -> Self {
        Self::default()
    }

    /// A script that streams `text` in one chunk.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new().then_text(text)
    }

    /// A script that streams `text` in `parts` chunks of about equal length
    /// (split at character boundaries; fewer chunks when the text is
    /// shorter), waiting `delay` between chunks.
    pub fn text_in_parts(text: &str, parts: usize, delay: Duration) -> Self {
        let mut script = Self::new();
        for (i, piece) in split_chars(text, parts).into_iter().enumerate() {
            if i > 0 && !delay.is_zero() {
                script = script.delay(delay);
            }
            script = script.then_text(piece);
        }
        script
    }

    /// A script that answers with HTTP `status` and `body`.
    pub fn http_error(status: u16, body: impl Into<String>) -> Self {
        Self::new().step(Step::HttpError {
            status,
            body: body.into(),
        })
    }

    /// Appends a step.
    pub fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Appends a text chunk.
    pub fn then_text(self, text: impl Into<String>) -> Self {
        self.step(Step::Text(text.into()))
    }

    /// Appends a provider-hosted web search ([`Step::WebSearch`]).
    pub fn web_search(self, id: &str, query: &str, results: &[(&str, &str)]) -> Self {
        self.step(Step::WebSearch {
            id: id.to_owned(),
            query: query.to_owned(),
            results: results
                .iter()
                .map(|(url, title)| ((*url).to_owned(), (*title).to_owned()))
                .collect(),
        })
    }

    /// Appends text citing `url` ([`Step::CitedText`]).
    pub fn cited_text(self, text: &str, url: &str, title: &str, cited_text: &str) -> Self {
        self.step(Step::CitedText {
            text: text.to_owned(),
            url: url.to_owned(),
            title: title.to_owned(),
            cited_text: cited_text.to_owned(),
        })
    }

    /// Appends a reasoning chunk.
    pub fn reasoning(self, text: impl Into<String>) -> Self {
        self.step(Step::Reasoning(text.into()))
    }

    /// Appends a whole tool call with the next free index: its first chunk,
    /// then `args` in `chunks` pieces (at least one).
    pub fn tool_call(self, id: &str, name: &str, args: &str, chunks: usize) -> Self {
        let index = self.tool_call_count();
        let mut script = self.tool_call_start(index, id, name);
        for piece in split_chars(args, chunks.max(1)) {
            script = script.tool_call_args(index, piece);
        }
        script
    }

    /// Appends the first chunk of tool call `index` (for interleaving
    /// parallel calls by hand).
    pub fn tool_call_start(self, index: usize, id: &str, name: &str) -> Self {
        self.step(Step::ToolCallStart {
            index,
            id: id.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Appends a piece of tool call `index`'s arguments.
    pub fn tool_call_args(self, index: usize, args: impl Into<String>) -> Self {
        self.step(Step::ToolCallArgs {
            index,
            args: args.into(),
        })
    }

    /// Reports usage (prompt and completion tokens) at the end.
    pub fn usage(self, prompt_tokens: i64, completion_tokens: i64) -> Self {
        self.step(Step::Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens: 0,
            reasoning_tokens: 0,
        })
    }

    /// Sets the finish reason sent at the end.
    pub fn finish(self, reason: impl Into<String>) -> Self {
        self.step(Step::Finish(reason.into()))
    }

    /// Waits `delay` before the next step.
    pub fn delay(self, delay: Duration) -> Self {
        self.step(Step::Delay(delay))
    }

    /// Sends a raw `data:` payload.
    pub fn raw_data(self, data: impl Into<String>) -> Self {
        self.step(Step::RawData(data.into()))
    }

    /// Sends an error object inside the stream (in the wire format of the
    /// request's path).
    pub fn stream_error(self, message: &str, error_type: &str) -> Self {
        self.step(Step::StreamError {
            message: message.to_owned(),
            error_type: error_type.to_owned(),
        })
    }

    /// A `200` event stream with an empty body ([`Step::EmptyStream`]).
    pub fn empty_stream() -> Self {
        Self::new().step(Step::EmptyStream)
    }

    /// Aborts the body here.
    pub fn disconnect(self) -> Self {
        self.step(Step::Disconnect)
    }

    /// Stalls here until the client goes away.
    pub fn hang(self) -> Self {
        self.step(Step::Hang)
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// A script that answers `echo: <last user text>` (what the binary's
    /// `echo` mode does).
    pub fn echo_of(request: &RecordedRequest) -> Self {
        let text = format!("echo: {}", request.last_user_text().unwrap_or_default());
        Self::text(text).usage(10, 5)
    }

    fn tool_call_count(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::ToolCallStart { .. }))
            .count()
    }
}

type DefaultFn = dyn Fn(&RecordedRequest) -> Script + Send + Sync;

struct State {
    scripts: Mutex<VecDeque<Script>>,
    default: Mutex<Option<Arc<DefaultFn>>>,
    title: Mutex<Option<Arc<DefaultFn>>>,
    requests: Mutex<Vec<RecordedRequest>>,
    received: watch::Sender<usize>,
    responses: AtomicU64,
    aborted: AtomicU64,
}

impl FakeLlm {
    /// Starts a server on `127.0.0.1:0`.
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_on("127.0.0.1:0".parse().expect("a valid address")).await
    }

    /// Starts a server on `addr` (port 0 for any free port).
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub async fn start_on(addr: SocketAddr) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the fake LLM to {addr}"))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            scripts: Mutex::new(VecDeque::new()),
            default: Mutex::new(None),
            title: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            received: watch::channel(0).0,
            responses: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
        });
        let shutdown = CancellationToken::new();
        let app = axum::Router::new().fallback({
            let state = state.clone();
            let shutdown = shutdown.clone();
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                let shutdown = shutdown.clone();
                async move { handle(state, shutdown, method, uri, headers, body).await }
            }
        });
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let server = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
            if let Err(err) = server.await {
                eprintln!("fake LLM server stopped: {err}");
            }
        });
        Ok(FakeLlm {
            addr,
            state,
            shutdown,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to configure a provider with: `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues `script` for the next request not yet answered.
    pub fn push(&self, script: Script) {
        lock(&self.state.scripts).push_back(script);
    }

    /// Answers with `script` whenever the queue is empty.
    pub fn set_default(&self, script: Script) {
        self.set_default_fn(move |_| script.clone());
    }

    /// Answers with `respond(request)` whenever the queue is empty (for
    /// example [`Script::echo_of`]).
    pub fn set_default_fn(
        &self,
        respond: impl Fn(&RecordedRequest) -> Script + Send + Sync + 'static,
    ) {
        *lock(&self.state.default) = Some(Arc::new(respond));
    }

    /// Answers title requests ([`is_title_request`]) with
    /// `respond(request)` instead of [`DEFAULT_FAKE_TITLE`].
    pub fn set_title_fn(
        &self,
        respond: impl Fn(&RecordedRequest) -> Script + Send + Sync + 'static,
    ) {
        *lock(&self.state.title) = Some(Arc::new(respond));
    }

    /// How many queued scripts have not been used yet.
    pub fn queued(&self) -> usize {
        lock(&self.state.scripts).len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// Waits until at least `n` requests (1-based) have arrived and returns
    /// the `n`th.
    ///
    /// # Errors
    /// When it does not arrive within `timeout`.
    pub async fn wait_for_request(
        &self,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<RecordedRequest> {
        anyhow::ensure!(n >= 1, "requests are counted from 1");
        let mut received = self.state.received.subscribe();
        tokio::time::timeout(timeout, received.wait_for(|count| *count >= n))
            .await
            .with_context(|| {
                format!(
                    "the fake LLM received {} request(s) within {timeout:?}, not {n}",
                    *self.state.received.borrow()
                )
            })?
            .context("the fake LLM stopped")?;
        Ok(lock(&self.state.requests)[n - 1].clone())
    }

    /// How many scripted streams ended before they were played to the end
    /// because the client went away (an interrupt, a cancelled generation).
    pub fn aborted_responses(&self) -> u64 {
        self.state.aborted.load(Ordering::SeqCst)
    }

    /// How many streams were played to their end (`[DONE]`, a disconnect
    /// step, or an error status).
    pub fn completed_responses(&self) -> u64 {
        self.state.responses.load(Ordering::SeqCst)
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn handle(
    state: Arc<State>,
    shutdown: CancellationToken,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let mode = match request.path.as_str() {
        CHAT_COMPLETIONS_PATH => Mode::OpenAi,
        _ => Mode::Anthropic,
    };
    let is_completion = method == Method::POST
        && (request.path == CHAT_COMPLETIONS_PATH || request.path == MESSAGES_PATH);
    let script = is_completion.then(|| {
        if is_title_request(&request) {
            let title = lock(&state.title).clone();
            return Some(match title {
                Some(respond) => respond(&request),
                None => Script::text(DEFAULT_FAKE_TITLE),
            });
        }
        lock(&state.scripts).pop_front().or_else(|| {
            lock(&state.default)
                .clone()
                .map(|respond| respond(&request))
        })
    });
    let model = request
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake-model")
        .to_owned();
    lock(&state.requests).push(request);
    state.received.send_modify(|count| *count += 1);
    match script {
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
        Some(None) => {
            state.responses.fetch_add(1, Ordering::SeqCst);
            error_response(
                400,
                json!({"error": {
                    "message": "fake LLM: no script queued and no default response",
                    "type": "invalid_request_error",
                    "code": "unscripted_request",
                }})
                .to_string(),
            )
        }
        Some(Some(script)) => play(state, shutdown, script, model, mode),
    }
}

fn error_response(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// What the body stream does next.
enum Action {
    Send(String),
    Sleep(Duration),
    Disconnect,
    Hang,
}

/// Counts the response as aborted when its body is dropped before the end.
struct PlayGuard {
    state: Arc<State>,
    finished: bool,
}

impl PlayGuard {
    /// Counts the response as played to its end.
    fn complete(mut self) {
        self.finished = true;
    }
}

impl Drop for PlayGuard {
    fn drop(&mut self) {
        let counter = if self.finished {
            &self.state.responses
        } else {
            &self.state.aborted
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

fn play(
    state: Arc<State>,
    shutdown: CancellationToken,
    script: Script,
    model: String,
    mode: Mode,
) -> Response {
    if let Some(Step::HttpError { status, body }) = script.steps.first() {
        state.responses.fetch_add(1, Ordering::SeqCst);
        return error_response(*status, body.clone());
    }
    if let Some(Step::EmptyStream) = script.steps.first() {
        state.responses.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")],
            "",
        )
            .into_response();
    }
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let n = NEXT_ID.fetch_add(1, Ordering::SeqCst);
    let actions = match mode {
        Mode::OpenAi => actions(&script, &format!("chatcmpl-fake-{n}"), &model),
        Mode::Anthropic => anthropic_actions(&script, &format!("msg_fake_{n}"), &model),
    };
    let guard = PlayGuard {
        state,
        finished: false,
    };
    let body = futures::stream::unfold(
        (actions.into_iter(), guard, shutdown),
        |(mut actions, mut guard, shutdown)| async move {
            loop {
                match actions.next() {
                    None => {
                        guard.complete();
                        return None;
                    }
                    Some(Action::Send(bytes)) => {
                        return Some((
                            Ok::<_, std::io::Error>(Bytes::from(bytes)),
                            (actions, guard, shutdown),
                        ));
                    }
                    Some(Action::Sleep(delay)) => tokio::time::sleep(delay).await,
                    Some(Action::Disconnect) => {
                        guard.finished = true;
                        let err = std::io::Error::other("fake LLM: scripted disconnect");
                        return Some((Err(err), (Vec::new().into_iter(), guard, shutdown)));
                    }
                    Some(Action::Hang) => {
                        // Pending until the client goes away (the body is
                        // dropped) or the server stops.
                        shutdown.cancelled().await;
                        return None;
                    }
                }
            }
        },
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// The body of `script` as a list of writes and waits.
fn actions(script: &Script, id: &str, model: &str) -> Vec<Action> {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        Action::Send(format!("data: {chunk}\n\n"))
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let mut finish = None;
    let mut usage = None;
    let mut made_tool_calls = false;
    for step in &script.steps {
        match step {
            Step::Text(text) => out.push(chunk(json!({"content": text}), Value::Null)),
            Step::CitedText {
                text, url, title, ..
            } => {
                out.push(chunk(json!({"content": text}), Value::Null));
                out.push(chunk(
                    json!({"annotations": [{"type": "url_citation", "url_citation": {
                        "start_index": 0, "end_index": text.chars().count(),
                        "url": url, "title": title}}]}),
                    Value::Null,
                ));
            }
            Step::Reasoning(text) => {
                out.push(chunk(json!({"reasoning_content": text}), Value::Null))
            }
            Step::ToolCallStart { index, id, name } => {
                made_tool_calls = true;
                out.push(chunk(
                    json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                ));
            }
            Step::ToolCallArgs { index, args } => out.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]}),
                Value::Null,
            )),
            Step::Usage {
                prompt_tokens,
                completion_tokens,
                cached_tokens,
                reasoning_tokens,
            } => {
                usage = Some(json!({
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": cached_tokens},
                    "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
                }));
            }
            Step::Finish(reason) => finish = Some(reason.clone()),
            Step::StreamError {
                message,
                error_type,
            } => {
                let error =
                    json!({"error": {"message": message, "type": error_type, "code": null}});
                out.push(Action::Send(format!("data: {error}\n\n")));
            }
            _ if play_transport_step(step, &mut out) => return out,
            _ => {}
        }
    }
    let finish = finish.unwrap_or_else(|| {
        if made_tool_calls {
            "tool_calls"
        } else {
            "stop"
        }
        .to_owned()
    });
    out.push(chunk(json!({}), Value::String(finish)));
    if let Some(usage) = usage {
        let last = json!({"id": id, "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": [], "usage": usage});
        out.push(Action::Send(format!("data: {last}\n\n")));
    }
    out.push(Action::Send("data: [DONE]\n\n".to_owned()));
    out
}

/// The body of `script` in Anthropic Messages format.
fn anthropic_actions(script: &Script, id: &str, model: &str) -> Vec<Action> {
    fn event(name: &str, data: Value) -> Action {
        Action::Send(format!("event: {name}\ndata: {data}\n\n"))
    }
    /// The block being streamed: text and thinking blocks close as soon as
    /// another block starts; tool blocks stay open until the end so that
    /// argument pieces may be interleaved by index.
    #[derive(PartialEq)]
    enum Open {
        Text(usize),
        Thinking(usize),
    }
    let usage = script.steps.iter().rev().find_map(|s| match s {
        Step::Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens,
            ..
        } => Some((*prompt_tokens, *completion_tokens, *cached_tokens)),
        _ => None,
    });
    let (input, output, cached) = usage.unwrap_or((0, 0, 0));
    let mut start_usage = json!({"input_tokens": input - cached, "output_tokens": 1});
    if cached > 0 {
        start_usage["cache_read_input_tokens"] = json!(cached);
    }
    let mut message = json!({"id": id, "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": null, "stop_sequence": null});
    // Like the OpenAI mode, a script without usage reports none.
    if usage.is_some() {
        message["usage"] = start_usage;
    }
    let mut out = vec![event(
        "message_start",
        json!({"type": "message_start", "message": message}),
    )];
    let mut next_block = 0usize;
    let mut open: Option<Open> = None;
    let mut tools: Vec<(usize, usize)> = Vec::new(); // (script index, block index)
    let mut finish = None;
    let close = |open: &mut Option<Open>, out: &mut Vec<Action>| match open.take() {
        Some(Open::Thinking(block)) => {
            out.push(event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": block,
                        "delta": {"type": "signature_delta", "signature": FAKE_THINKING_SIGNATURE}}),
                ));
            out.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": block}),
            ));
        }
        Some(Open::Text(block)) => out.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": block}),
        )),
        None => {}
    };
    for step in &script.steps {
        match step {
            Step::Text(text) | Step::Reasoning(text) => {
                let thinking = matches!(step, Step::Reasoning(_));
                let block = match open {
                    Some(Open::Text(block)) if !thinking => block,
                    Some(Open::Thinking(block)) if thinking => block,
                    _ => {
                        close(&mut open, &mut out);
                        let block = next_block;
                        next_block += 1;
                        let content_block = if thinking {
                            json!({"type": "thinking", "thinking": "", "signature": ""})
                        } else {
                            json!({"type": "text", "text": ""})
                        };
                        out.push(event(
                            "content_block_start",
                            json!({"type": "content_block_start", "index": block,
                                "content_block": content_block}),
                        ));
                        open = Some(if thinking {
                            Open::Thinking(block)
                        } else {
                            Open::Text(block)
                        });
                        block
                    }
                };
                let delta = if thinking {
                    json!({"type": "thinking_delta", "thinking": text})
                } else {
                    json!({"type": "text_delta", "text": text})
                };
                out.push(event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": block, "delta": delta}),
                ));
            }
            Step::WebSearch { id, query, results } => {
                close(&mut open, &mut out);
                let block = next_block;
                next_block += 2;
                out.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": block,
                        "content_block": {"type": "server_tool_use", "id": id, "name": "web_search", "input": {}}}),
                ));
                out.push(event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": block,
                        "delta": {"type": "input_json_delta", "partial_json": json!({"query": query}).to_string()}}),
                ));
                out.push(event(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": block}),
                ));
                let content: Vec<Value> = results
                    .iter()
                    .enumerate()
                    .map(|(n, (url, title))| json!({"type": "web_search_result", "url": url,
                        "title": title, "encrypted_content": format!("fake-encrypted-{n}"),
                        "page_age": null}))
                    .collect();
                out.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": block + 1,
                        "content_block": {"type": "web_search_tool_result", "tool_use_id": id, "content": content}}),
                ));
                out.push(event(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": block + 1}),
                ));
            }
            Step::CitedText {
                text,
                url,
                title,
                cited_text,
            } => {
                close(&mut open, &mut out);
                let block = next_block;
                next_block += 1;
                out.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": block,
                        "content_block": {"type": "text", "text": "", "citations": []}}),
                ));
                out.push(event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": block,
                        "delta": {"type": "citations_delta", "citation": {
                            "type": "web_search_result_location", "url": url, "title": title,
                            "encrypted_index": "fake-index", "cited_text": cited_text}}}),
                ));
                out.push(event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": block,
                        "delta": {"type": "text_delta", "text": text}}),
                ));
                out.push(event(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": block}),
                ));
            }
            Step::ToolCallStart { index, id, name } => {
                close(&mut open, &mut out);
                let block = next_block;
                next_block += 1;
                tools.push((*index, block));
                out.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": block,
                        "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                ));
            }
            Step::ToolCallArgs { index, args } => {
                if let Some((_, block)) = tools.iter().find(|(i, _)| i == index) {
                    out.push(event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": block,
                            "delta": {"type": "input_json_delta", "partial_json": args}}),
                    ));
                }
            }
            Step::Usage { .. } => {}
            Step::Finish(reason) => finish = Some(reason.clone()),
            Step::StreamError {
                message,
                error_type,
            } => out.push(event(
                "error",
                json!({"type": "error", "error": {"details": null, "type": error_type, "message": message},
                    "request_id": "req_fake"}),
            )),
            _ if play_transport_step(step, &mut out) => return out,
            _ => {}
        }
    }
    close(&mut open, &mut out);
    for (_, block) in &tools {
        out.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": block}),
        ));
    }
    let reason = match finish.as_deref() {
        None if !tools.is_empty() => "tool_use".to_owned(),
        None | Some("stop") => "end_turn".to_owned(),
        Some("length") => "max_tokens".to_owned(),
        Some("tool_calls") => "tool_use".to_owned(),
        Some(other) => other.to_owned(),
    };
    let mut delta =
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}});
    if usage.is_some() {
        delta["usage"] = json!({"output_tokens": output});
    }
    out.push(event("message_delta", delta));
    out.push(event("message_stop", json!({"type": "message_stop"})));
    out
}

/// Plays a step that is the same in every wire format into `out`: a delay,
/// raw data, a disconnect or a hang; any other step adds nothing. Returns
/// whether the answer ends there.
fn play_transport_step(step: &Step, out: &mut Vec<Action>) -> bool {
    match step {
        Step::Delay(delay) => out.push(Action::Sleep(*delay)),
        Step::RawData(data) => out.push(Action::Send(format!("data: {data}\n\n"))),
        Step::Disconnect => {
            // Let the server flush what came before: an error polled right
            // after the last chunk can kill the connection before the
            // response head is written.
            out.push(Action::Sleep(Duration::from_millis(20)));
            out.push(Action::Disconnect);
            return true;
        }
        Step::Hang => {
            out.push(Action::Hang);
            return true;
        }
        // Only honoured as the first step (see `play`).
        Step::HttpError { .. } | Step::EmptyStream => {}
        // The wire format's own steps.
        Step::Text(_)
        | Step::Reasoning(_)
        | Step::ToolCallStart { .. }
        | Step::ToolCallArgs { .. }
        | Step::Usage { .. }
        | Step::Finish(_)
        | Step::WebSearch { .. }
        | Step::CitedText { .. }
        | Step::StreamError { .. } => {}
    }
    false
}

/// `text` in `parts` pieces of about equal length in characters (fewer when
/// the text is shorter; one empty piece for empty text).
fn split_chars(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let parts = parts.clamp(1, chars.len().max(1));
    let mut out = Vec::with_capacity(parts);
    for i in 0..parts {
        let start = i * chars.len() / parts;
        let end = (i + 1) * chars.len() / parts;
        out.push(chars[start..end].iter().collect());
    }
    out
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A test that panicked while holding the lock already failed; keep
    // serving the others.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_chars_keeps_every_character_and_respects_boundaries() {
        assert_eq!(split_chars("Olá 🦀!", 3), vec!["Ol", "á ", "🦀!"]);
        assert_eq!(split_chars("Olá 🦀!", 3).concat(), "Olá 🦀!");
        assert_eq!(split_chars("ab", 5), vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(split_chars("", 3), vec![String::new()]);
    }
}
