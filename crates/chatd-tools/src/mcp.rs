//! MCP tool host: sessions with the configured MCP servers, tool listing and
//! tool calls (API.md "Admin routes": `chat_mcp_servers`, tools offered as
//! `<slug>__<tool>`; DESIGN.md: idempotency keys, at-least-once tool calls;
//! spec "Generation goroutine": MCP tools).
//!
//! [`McpHost`] keeps one session per server row and reuses it across turns;
//! a session whose server row changed is replaced. Behaviour:
//! - **stdio**: the command runs as a child process with a minimal
//!   environment (`PATH`, `HOME`, `LANG`, `LC_ALL`, `TMPDIR`, `USER` from ours,
//!   then the row's `env`; nothing else leaks, the database URL and relay
//!   secret included). Its stderr is read line by line into `tracing`
//!   (target `chatd_tools::mcp::stderr`, field `server`) and the last
//!   [`STDERR_TAIL_LINES`] lines are kept for error messages; an error from a
//!   server that died waits up to [`STDERR_SETTLE`] for the rest of its
//!   stderr, so its last words are in the message. The child is
//!   killed when its session is dropped and on [`McpHost::shutdown`].
//! - **streamable HTTP**: the row's `headers` go with every request. The
//!   client follows no redirects (API.md "Limits, budgets and the token
//!   lifecycle"): a `3xx` answer fails the session with an error naming the
//!   status, and its target receives nothing (not the headers, not the
//!   session id).
//! - **listing** ([`McpHost::list_tools`]) runs for all servers in parallel,
//!   each bounded by [`McpOptions::list_timeout`]; a server that cannot be
//!   reached is left out of this turn (logged, reported in
//!   [`McpToolset::errors`]), never failing the turn. Tools whose qualified
//!   name is not acceptable to every provider (`^[A-Za-z0-9_-]{1,64}$`) are
//!   skipped.
//! - **calls** ([`McpHost::call`]) are bounded by
//!   [`McpOptions::call_timeout`]. A dead session (the process exited, the
//!   connection broke) gets exactly one reconnect with a fresh transport and
//!   the call is sent again: calls are at-least-once, and the idempotency key
//!   in `_meta` lets a server deduplicate. Every failure (protocol error,
//!   timeout, a server that cannot be reached, invalid arguments) is an
//!   `is_error` [`ToolOutcome`] for the model.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, MetaObject, RequestMetaObject,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt as _};
use serde_json::{Map, Value, json};
use tokio::io::AsyncBufReadExt as _;
use uuid::Uuid;

/// Lines of a stdio server's stderr kept for error messages.
pub const STDERR_TAIL_LINES: usize = 20;
/// How long an error message waits for a dead stdio server's stderr to be
/// read to its end, so that its last words are in the message. A child that
/// exits closes the pipe at once; the bound only matters when a grandchild
/// keeps it open.
pub const STDERR_SETTLE: Duration = Duration::from_secs(1);
/// The separator between a server's slug and its tool's name.
pub const NAME_SEPARATOR: &str = "__";
/// The `_meta` key carrying the idempotency key as one string.
pub const IDEMPOTENCY_META_KEY: &str = "chatd/idempotency_key";
/// The `_meta` key carrying the idempotency key's parts as an object.
pub const IDEMPOTENCY_PARTS_META_KEY: &str = "chatd/idempotency";

/// `<slug>__<tool>`: the name a tool is offered to the model under.
pub fn qualified_name(slug: &str, tool: &str) -> String {
    format!("{slug}{NAME_SEPARATOR}{tool}")
}

/// Splits `<slug>__<tool>` at the first separator; `None` for a name
/// without one. A slug may itself contain `__` (`^[a-z0-9][a-z0-9_-]*$`),
/// so this is a guess for display and logs; the worker resolves names
/// exactly against the listed tools instead ([`McpToolset::get`]).
pub fn split_qualified_name(name: &str) -> Option<(&str, &str)> {
    name.split_once(NAME_SEPARATOR)
}

/// How to reach one MCP server (a `chat_mcp_servers` row). `Debug` prints
/// the names of `env` and `headers` entries, never their values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The row's id.
    pub id: Uuid,
    /// The row's slug (`^[a-z0-9][a-z0-9_-]{0,63}$`): the tools' prefix.
    pub slug: String,
    /// Transport and its settings.
    pub transport: McpTransport,
}

/// The transport of an MCP server. `Debug` prints the names of `env` and
/// `headers` entries, never their values, and the URL without user info,
/// query or fragment.
#[derive(Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables added to the minimal environment.
        env: BTreeMap<String, String>,
    },
    /// An MCP server at an HTTP endpoint (streamable HTTP transport).
    StreamableHttp {
        /// The endpoint URL.
        url: String,
        /// Headers sent with every request (for example `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

impl std::fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn names(map: &BTreeMap<String, String>) -> BTreeMap<&str, &'static str> {
            map.keys().map(|k| (k.as_str(), "<redacted>")).collect()
        }
        match self {
            McpTransport::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &names(env))
                .finish(),
            McpTransport::StreamableHttp { url, headers } => f
                .debug_struct("StreamableHttp")
                .field("url", &redact_url(url))
                .field("headers", &names(headers))
                .finish(),
        }
    }
}

/// `url` without user info, query or fragment (where credentials live).
fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.to_string()
        }
        Err(_) => "<unparsed>".to_owned(),
    }
}

/// Timeouts of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpOptions {
    /// Longest wait for a session: process start or connection plus the MCP
    /// initialization handshake. Default 30 s.
    pub connect_timeout: Duration,
    /// Longest wait for one server's tool list. Default 30 s.
    pub list_timeout: Duration,
    /// Longest wait for one tool call's result. Default 120 s.
    pub call_timeout: Duration,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            connect_timeout: Duration::from_secs(30),
            list_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(120),
        }
    }
}

/// The idempotency key of one tool call (DESIGN.md): the same call of the
/// same step of the same attempt always has the same key, so a server can
/// recognise a call sent again after a crash or a reconnect.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    /// The chat.
    pub chat_id: Uuid,
    /// The history version the step was generated for.
    pub history_version: i64,
    /// The generation attempt that produced the call.
    pub generation_attempt: i64,
    /// The provider's tool call id.
    pub tool_call_id: String,
}

impl std::fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.chat_id, self.history_version, self.generation_attempt, self.tool_call_id
        )
    }
}

impl IdempotencyKey {
    /// The `_meta` entries of a call: [`IDEMPOTENCY_META_KEY`] (the key as
    /// one string, `chat_id:history_version:generation_attempt:tool_call_id`)
    /// and [`IDEMPOTENCY_PARTS_META_KEY`] (its parts).
    pub fn meta(&self) -> Map<String, Value> {
        let mut meta = Map::new();
        meta.insert(IDEMPOTENCY_META_KEY.into(), Value::String(self.to_string()));
        meta.insert(
            IDEMPOTENCY_PARTS_META_KEY.into(),
            json!({
                "chat_id": self.chat_id,
                "history_version": self.history_version,
                "generation_attempt": self.generation_attempt,
                "tool_call_id": self.tool_call_id,
            }),
        );
        meta
    }
}

/// A tool of an MCP server as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// The server's row.
    pub server: McpServerConfig,
    /// The tool's name on its server.
    pub name: String,
    /// `<slug>__<name>`.
    pub qualified_name: String,
    /// Its description (empty when it has none).
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// The server declares it read-only (`annotations.readOnlyHint`): it is
    /// offered in plan mode (API.md "Sub-agents and plan mode").
    pub read_only: bool,
}

/// The MCP tools of one turn.
#[derive(Debug, Clone, Default)]
pub struct McpToolset {
    /// The tools, by server in the order given, then as listed.
    pub tools: Vec<McpTool>,
    /// Servers that could not be listed: `(slug, why)`.
    pub errors: Vec<(String, String)>,
}

impl McpToolset {
    /// The tool offered as `qualified_name`.
    pub fn get(&self, qualified_name: &str) -> Option<&McpTool> {
        self.tools
            .iter()
            .find(|t| t.qualified_name == qualified_name)
    }

    /// Whether no tool is offered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// The result of one tool call, ready to become a `tool-result` part.
///
/// Its `result` came from outside (the MCP server, or an error text that
/// quotes it), so both constructors sanitise it
/// ([`chatd_core::sanitize::json`]): a NUL in a tool's output must not make
/// the step that stores it uncommittable.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// Any JSON: the structured content when the tool gave one, else its
    /// text content as a string; `{"error": ...}` for failures.
    pub result: Value,
    /// Whether the tool (or the call) failed.
    pub is_error: bool,
}

impl ToolOutcome {
    /// A failure with `message`: `{"error": message}`, `is_error`.
    pub fn error(message: impl Into<String>) -> Self {
        let mut message = message.into();
        chatd_core::sanitize::string(&mut message);
        ToolOutcome {
            result: json!({ "error": message }),
            is_error: true,
        }
    }

    /// Converts an MCP `CallToolResult`.
    pub fn from_result(result: CallToolResult) -> Self {
        let is_error = result.is_error.unwrap_or(false);
        let mut value = match result.structured_content {
            Some(structured) => structured,
            None => Value::String(content_text(&result.content)),
        };
        chatd_core::sanitize::json(&mut value);
        if is_error {
            ToolOutcome {
                result: json!({ "error": value }),
                is_error,
            }
        } else {
            ToolOutcome {
                result: value,
                is_error,
            }
        }
    }
}

/// The text of a result's content blocks, joined with newlines; non-text
/// blocks become short placeholders (the model gets text only).
fn content_text(content: &[ContentBlock]) -> String {
    content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[image ({}) not shown]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio ({}) not shown]", audio.mime_type),
            ContentBlock::Resource(resource) => {
                let value = serde_json::to_value(&resource.resource).unwrap_or(Value::Null);
                match value.get("text").and_then(Value::as_str) {
                    Some(text) => text.to_owned(),
                    None => format!(
                        "[resource {} not shown]",
                        value.get("uri").and_then(Value::as_str).unwrap_or("?")
                    ),
                }
            }
            ContentBlock::ResourceLink(link) => format!("[resource link {}]", link.uri),
            _ => "[content not shown]".to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why a session could not be used.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("cannot start the server: {0}")]
    Spawn(String),
    #[error("the server did not initialize within {0:?}")]
    ConnectTimeout(Duration),
    #[error("the MCP handshake failed: {0}")]
    Initialize(String),
}

/// One live connection to a server.
struct Session {
    config: McpServerConfig,
    service: RunningService<RoleClient, ()>,
    stderr: StderrTail,
}

/// The last [`STDERR_TAIL_LINES`] lines of a stdio server's stderr, filled
/// by [`forward_stderr`], and whether the pipe reached its end (the child
/// exited). An HTTP server has none: empty and already ended.
#[derive(Clone)]
struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    ended: tokio::sync::watch::Receiver<bool>,
}

impl StderrTail {
    /// A tail and the sender [`forward_stderr`] marks the end with.
    fn new() -> (Self, tokio::sync::watch::Sender<bool>) {
        let (ended_tx, ended) = tokio::sync::watch::channel(false);
        let tail = Self {
            lines: Arc::new(Mutex::new(VecDeque::new())),
            ended,
        };
        (tail, ended_tx)
    }

    /// The lines read so far, joined with newlines.
    fn now(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// The lines once the pipe has ended, or after `wait` at most: for a
    /// server that just died, whose last lines may still be in the pipe when
    /// the transport reports the failure.
    async fn settled(&self, wait: Duration) -> String {
        let mut ended = self.ended.clone();
        // An error means the sender is gone: the forwarder stopped (or never
        // ran), so nothing more will arrive either way.
        let _ = tokio::time::timeout(wait, ended.wait_for(|ended| *ended)).await;
        self.now()
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Session>>>>;

/// Sessions with MCP servers, shared by all chats of a worker. Cheap to
/// share behind an `Arc`.
pub struct McpHost {
    options: McpOptions,
    client: reqwest::Client,
    slots: Mutex<HashMap<Uuid, Slot>>,
}

impl std::fmt::Debug for McpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHost")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl McpHost {
    /// A host without sessions; they are opened on first use. Its HTTP
    /// client follows no redirects.
    pub fn new(options: McpOptions) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            // What `reqwest::Client::new` does too: only a broken TLS
            // backend fails here.
            .expect("the MCP HTTP client builds");
        McpHost {
            options,
            client,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The options.
    pub fn options(&self) -> McpOptions {
        self.options
    }

    /// Lists the tools of `servers` (in parallel) for one turn. Servers that
    /// fail are left out and reported in [`McpToolset::errors`].
    pub async fn list_tools(&self, servers: &[McpServerConfig]) -> McpToolset {
        let lists = futures::future::join_all(servers.iter().map(|s| self.list_one(s))).await;
        let mut set = McpToolset::default();
        for (server, list) in servers.iter().zip(lists) {
            match list {
                Ok(tools) => {
                    for tool in tools {
                        let qualified = qualified_name(&server.slug, &tool.name);
                        if !valid_name(&qualified) {
                            tracing::warn!(server = %server.slug, tool = %tool.name, "MCP tool skipped: its name is not acceptable to the model providers");
                            continue;
                        }
                        set.tools.push(McpTool {
                            server: server.clone(),
                            name: tool.name.to_string(),
                            qualified_name: qualified,
                            description: tool.description.as_deref().unwrap_or_default().to_owned(),
                            input_schema: Value::Object((*tool.input_schema).clone()),
                            read_only: tool
                                .annotations
                                .as_ref()
                                .and_then(|a| a.read_only_hint)
                                .unwrap_or(false),
                        });
                    }
                }
                Err(why) => {
                    tracing::warn!(server = %server.slug, error = %why, "MCP server left out of this turn");
                    set.errors.push((server.slug.clone(), why));
                }
            }
        }
        set
    }

    async fn list_one(&self, server: &McpServerConfig) -> Result<Vec<rmcp::model::Tool>, String> {
        for attempt in 0..2 {
            let session = self.session(server).await.map_err(|e| e.to_string())?;
            let listed =
                tokio::time::timeout(self.options.list_timeout, session.service.list_all_tools())
                    .await;
            match listed {
                Err(_) => {
                    return Err(format!(
                        "listing tools timed out after {:?}",
                        self.options.list_timeout
                    ));
                }
                Ok(Ok(tools)) => return Ok(tools),
                Ok(Err(err)) if attempt == 0 && is_dead_session(&err) => {
                    self.invalidate(server.id, &session).await;
                }
                Ok(Err(err)) => return Err(describe(&err, &session).await),
            }
        }
        Err("the session died twice".into())
    }

    /// Calls `tool` (its name on the server) with `args` (the model's JSON
    /// arguments string) and the idempotency `key` in the request's `_meta`.
    /// Never fails: every failure is an `is_error` outcome.
    pub async fn call(
        &self,
        server: &McpServerConfig,
        tool: &str,
        args: &str,
        key: &IdempotencyKey,
    ) -> ToolOutcome {
        let arguments = if args.trim().is_empty() {
            Map::new()
        } else {
            match serde_json::from_str::<Value>(args) {
                Ok(Value::Object(map)) => map,
                Ok(_) => return ToolOutcome::error("The tool arguments must be a JSON object."),
                Err(err) => {
                    return ToolOutcome::error(format!(
                        "The tool arguments are not valid JSON: {err}"
                    ));
                }
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        params.meta = Some(RequestMetaObject(MetaObject(key.meta())));
        for attempt in 0..2 {
            let session = match self.session(server).await {
                Ok(session) => session,
                Err(err) => {
                    return ToolOutcome::error(format!(
                        "MCP server {} is not available: {err}",
                        server.slug
                    ));
                }
            };
            let called = tokio::time::timeout(
                self.options.call_timeout,
                session.service.call_tool(params.clone()),
            )
            .await;
            match called {
                Err(_) => {
                    return ToolOutcome::error(format!(
                        "The tool call timed out after {} s.",
                        self.options.call_timeout.as_secs_f64()
                    ));
                }
                Ok(Ok(result)) => return ToolOutcome::from_result(result),
                Ok(Err(ServiceError::McpError(err))) => {
                    return ToolOutcome::error(format!(
                        "MCP error {}: {}",
                        err.code.0, err.message
                    ));
                }
                Ok(Err(err)) if attempt == 0 && is_dead_session(&err) => {
                    tracing::info!(server = %server.slug, error = %err, "MCP session died; reconnecting once");
                    self.invalidate(server.id, &session).await;
                }
                Ok(Err(err)) => return ToolOutcome::error(describe(&err, &session).await),
            }
        }
        ToolOutcome::error(format!(
            "MCP server {} failed again after a reconnect.",
            server.slug
        ))
    }

    /// Closes every session (stdio children are stopped: stdin closed, then
    /// SIGTERM, then killed).
    pub async fn shutdown(&self) {
        let slots: Vec<Slot> = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.drain().map(|(_, slot)| slot).collect()
        };
        for slot in slots {
            if let Some(session) = slot.lock().await.take() {
                close(session).await;
            }
        }
    }

    /// The ids of the servers with an open session now.
    pub async fn open_sessions(&self) -> Vec<Uuid> {
        let slots: Vec<(Uuid, Slot)> = {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.iter().map(|(id, s)| (*id, s.clone())).collect()
        };
        let mut open = Vec::new();
        for (id, slot) in slots {
            if slot
                .lock()
                .await
                .as_ref()
                .is_some_and(|s| !s.service.is_closed())
            {
                open.push(id);
            }
        }
        open
    }

    fn slot(&self, id: Uuid) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(id).or_default().clone()
    }

    /// The live session for `server`, opening one (once, however many
    /// callers wait) when there is none, it died, or its row changed.
    async fn session(&self, server: &McpServerConfig) -> Result<Arc<Session>, SessionError> {
        let slot = self.slot(server.id);
        let mut guard = slot.lock().await;
        if let Some(session) = guard.as_ref() {
            if session.config == *server && !session.service.is_closed() {
                return Ok(session.clone());
            }
            if let Some(old) = guard.take() {
                tokio::spawn(close(old));
            }
        }
        let session = Arc::new(
            tokio::time::timeout(self.options.connect_timeout, self.connect(server))
                .await
                .map_err(|_| SessionError::ConnectTimeout(self.options.connect_timeout))??,
        );
        *guard = Some(session.clone());
        Ok(session)
    }

    /// Drops `dead` from its slot (unless another caller replaced it already).
    async fn invalidate(&self, id: Uuid, dead: &Arc<Session>) {
        let slot = self.slot(id);
        let mut guard = slot.lock().await;
        if guard.as_ref().is_some_and(|s| Arc::ptr_eq(s, dead))
            && let Some(old) = guard.take()
        {
            tokio::spawn(close(old));
        }
    }

    async fn connect(&self, server: &McpServerConfig) -> Result<Session, SessionError> {
        let (stderr, stderr_ended) = StderrTail::new();
        let service = match &server.transport {
            McpTransport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear().kill_on_drop(true);
                for key in ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER"] {
                    if let Ok(value) = std::env::var(key) {
                        cmd.env(key, value);
                    }
                }
                cmd.envs(env);
                let (process, child_stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| SessionError::Spawn(format!("{command}: {e}")))?;
                if let Some(child_stderr) = child_stderr {
                    tokio::spawn(forward_stderr(
                        server.slug.clone(),
                        child_stderr,
                        stderr.lines.clone(),
                        stderr_ended,
                    ));
                }
                match ().serve(process).await {
                    Ok(service) => service,
                    Err(e) => {
                        // A server that fails at start usually says why on
                        // stderr and exits; the handshake can fail (broken
                        // pipe) before those lines were read.
                        let tail = stderr.settled(STDERR_SETTLE).await;
                        return Err(SessionError::Initialize(with_tail(e.to_string(), &tail)));
                    }
                }
            }
            McpTransport::StreamableHttp { url, headers } => {
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| SessionError::Spawn(format!("header {name:?}: {e}")))?;
                    let value = reqwest::header::HeaderValue::from_str(value)
                        .map_err(|e| SessionError::Spawn(format!("header {name}: {e}")))?;
                    custom.insert(name, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let transport =
                    StreamableHttpClientTransport::with_client(self.client.clone(), config);
                ().serve(transport)
                    .await
                    .map_err(|e| SessionError::Initialize(e.to_string()))?
            }
        };
        tracing::info!(server = %server.slug, "MCP session opened");
        Ok(Session {
            config: server.clone(),
            service,
            stderr,
        })
    }
}

impl Drop for McpHost {
    fn drop(&mut self) {
        // Sessions dropped here kill their children (kill_on_drop); nothing
        // to await.
        let slots = self.slots.get_mut().unwrap_or_else(|p| p.into_inner());
        slots.clear();
    }
}

async fn close(session: Arc<Session>) {
    match Arc::try_unwrap(session) {
        Ok(mut session) => {
            if let Err(err) = session.service.close().await {
                tracing::debug!(server = %session.config.slug, error = %err, "closing an MCP session failed");
            }
        }
        // Still used by a call in flight: the last user drops it, which
        // cancels the service and kills the child.
        Err(shared) => shared.service.cancellation_token().cancel(),
    }
}

/// Reads a child's stderr into `tracing` and `tail` until the pipe ends,
/// then marks the end on `ended`.
async fn forward_stderr(
    slug: String,
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    ended: tokio::sync::watch::Sender<bool>,
) {
    let _mark_end_when_done = MarkEnd(ended);
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // Bytes, not `lines()`: a line that is not UTF-8 must not end the
        // reading (the child would then get SIGPIPE on its next write).
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']).to_owned();
        tracing::info!(target: "chatd_tools::mcp::stderr", server = %slug, "{line}");
        let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

/// Marks the end of a stderr pipe when dropped, also when the forwarder
/// task is cancelled.
struct MarkEnd(tokio::sync::watch::Sender<bool>);

impl Drop for MarkEnd {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// Whether `err` means the session is gone (worth one reconnect).
fn is_dead_session(err: &ServiceError) -> bool {
    matches!(
        err,
        ServiceError::TransportClosed
            | ServiceError::TransportSend(_)
            | ServiceError::Cancelled { .. }
    )
}

/// The error message for a failed request: the error and the server's last
/// stderr lines. When the session died, waits (at most [`STDERR_SETTLE`])
/// for the dead child's stderr to be read to its end.
async fn describe(err: &ServiceError, session: &Session) -> String {
    let tail = if is_dead_session(err) {
        session.stderr.settled(STDERR_SETTLE).await
    } else {
        session.stderr.now()
    };
    with_tail(
        format!("MCP server {} failed: {err}", session.config.slug),
        &tail,
    )
}

fn with_tail(message: String, tail: &str) -> String {
    if tail.is_empty() {
        message
    } else {
        format!("{message}\nServer stderr (last lines):\n{tail}")
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_settled_tail_holds_the_lines_written_until_the_pipe_ended() {
        let mut child = tokio::process::Command::new("sh")
            .args([
                "-c",
                "echo first >&2; printf 'bad \\377 byte\\n' >&2; sleep 0.3; echo last words >&2",
            ])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (tail, ended) = StderrTail::new();
        tokio::spawn(forward_stderr(
            "s".into(),
            child.stderr.take().unwrap(),
            tail.lines.clone(),
            ended,
        ));
        assert!(!tail.now().contains("last words"), "{}", tail.now());
        // A generous bound: this is about the content, not the timing.
        assert_eq!(
            tail.settled(Duration::from_secs(10)).await,
            "first\nbad \u{fffd} byte\nlast words"
        );
        child.wait().await.unwrap();
    }

    #[tokio::test]
    async fn a_tail_without_a_forwarder_settles_at_once() {
        let (tail, ended) = StderrTail::new();
        drop(ended);
        let started = std::time::Instant::now();
        assert_eq!(tail.settled(Duration::from_secs(30)).await, "");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_idempotency_key_is_one_string_and_its_parts() {
        let key = IdempotencyKey {
            chat_id: Uuid::nil(),
            history_version: 7,
            generation_attempt: 2,
            tool_call_id: "call_1".into(),
        };
        let meta = key.meta();
        assert_eq!(
            meta[IDEMPOTENCY_META_KEY],
            json!("00000000-0000-0000-0000-000000000000:7:2:call_1")
        );
        assert_eq!(
            meta[IDEMPOTENCY_PARTS_META_KEY]["generation_attempt"],
            json!(2)
        );
    }

    #[test]
    fn results_become_json_for_the_model() {
        let text = CallToolResult::success(vec![ContentBlock::text("5")]);
        assert_eq!(
            ToolOutcome::from_result(text),
            ToolOutcome {
                result: json!("5"),
                is_error: false
            }
        );
        let failed = CallToolResult::error(vec![ContentBlock::text("no such city")]);
        assert_eq!(
            ToolOutcome::from_result(failed),
            ToolOutcome {
                result: json!({"error": "no such city"}),
                is_error: true
            }
        );
        let structured = CallToolResult::structured(json!({"sum": 5}));
        assert_eq!(
            ToolOutcome::from_result(structured).result,
            json!({"sum": 5})
        );
        assert_eq!(qualified_name("calc", "add"), "calc__add");
        assert_eq!(
            split_qualified_name("my_calc__add_two"),
            Some(("my_calc", "add_two"))
        );
        assert!(!valid_name(&qualified_name("calc", "add.numbers")));
    }

    #[test]
    fn a_nul_in_a_tool_result_or_error_becomes_the_replacement_character() {
        let text = CallToolResult::success(vec![ContentBlock::text("a\0b")]);
        assert_eq!(ToolOutcome::from_result(text).result, json!("a\u{FFFD}b"));
        let structured = CallToolResult::structured(json!({"k\u{0}": ["\u{0}"]}));
        assert_eq!(
            ToolOutcome::from_result(structured).result,
            json!({"k\u{FFFD}": ["\u{FFFD}"]})
        );
        assert_eq!(
            ToolOutcome::error("stderr: \0").result,
            json!({"error": "stderr: \u{FFFD}"})
        );
    }
}
