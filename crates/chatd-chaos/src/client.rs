//! The seeded clients of a chaos run and the ledger of what the service
//! acknowledged to them.
//!
//! Every user text a client writes carries a unique token (`tok-C-N`), so
//! the checker can find each acknowledged message in the database and count
//! its copies. Timestamps of branch changes (edits, regenerations, branch
//! switches) let the checker tell a message lost from one that legitimately
//! left the active branch: a branch change can move any message off it (and
//! an edit clears the queue), so only messages written after the chat's
//! last branch change are required to be on the active branch. A message
//! stored at once (not queued) is never deleted, on any branch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cluster::ADMIN_TOKEN;

/// A user text written by a client and acknowledged (or maybe written).
#[derive(Debug, Clone)]
pub struct Written {
    /// The chat.
    pub chat: String,
    /// The unique token in its text.
    pub token: String,
    /// When the request started.
    pub started: Instant,
    /// Whether the service acknowledged it (`200`).
    pub acked: bool,
    /// The queued-message id, when it was queued.
    pub queued_id: Option<i64>,
    /// The id of the message it was stored as, when it was stored at once
    /// (a send that was not queued, an edit).
    pub message_id: Option<i64>,
    /// When the attempt that was acknowledged began (a retried send makes
    /// several attempts).
    pub attempt_started: Option<Instant>,
    /// When the acknowledgement arrived.
    pub acked_at: Option<Instant>,
}

/// What every client and the fault task share.
pub struct Shared {
    /// Base URLs of the replicas and whether each is up.
    pub replicas: Mutex<Vec<(String, bool)>>,
    /// Ids of the chats the run works on.
    pub chats: Vec<String>,
    /// The ones of them created with a workspace (`"workspace": true`):
    /// their clients also send [`workspace_text`] operations.
    pub workspaces: HashSet<String>,
    /// The ledger.
    pub ledger: Mutex<Ledger>,
    /// Counters.
    pub stats: Mutex<Stats>,
}

/// What the service acknowledged.
#[derive(Default)]
pub struct Ledger {
    /// Sends and edits, by token.
    pub written: Vec<Written>,
    /// Per chat: when the latest request that may change the active
    /// branch (an edit, a regenerate, a branch switch) ended, acknowledged
    /// or not.
    pub last_branch_change: HashMap<String, Instant>,
    /// Queued-message ids whose deletion was acknowledged.
    pub queue_deleted: Vec<(String, i64)>,
    /// Invariant violations seen while running (snapshot versions going
    /// backwards, `500` answers).
    pub violations: Vec<String>,
}

/// Operation and answer counters.
#[derive(Default, Debug)]
pub struct Stats {
    /// `(operation, status)` → count; status 0 is a transport error.
    pub answers: BTreeMap<(String, u16), u64>,
    /// Fault kind → count.
    pub faults: BTreeMap<String, u64>,
    /// When each transport error (status 0) and `5xx` answer arrived, with
    /// its status: the HA figures count them per database fault.
    pub errors: Vec<(Instant, u16)>,
    /// `503` answers without a `Retry-After` header.
    pub unavailable_without_retry_after: u64,
    /// Replica starts that failed and were tried again: (replica, the
    /// last `ERROR` line of its log).
    pub failed_starts: Vec<(usize, String)>,
    /// Acknowledged sends and edits whose text makes the model call a
    /// workspace tool, by kind ([`WorkspaceOp::name`]).
    pub workspace_ops: BTreeMap<&'static str, u64>,
}

impl Shared {
    /// A random replica that is up (any replica when none is).
    pub fn replica(&self, rng: &mut StdRng) -> String {
        let replicas = self.replicas.lock().unwrap_or_else(|p| p.into_inner());
        let up: Vec<&String> = replicas
            .iter()
            .filter(|(_, up)| *up)
            .map(|(u, _)| u)
            .collect();
        if up.is_empty() {
            return replicas[rng.random_range(0..replicas.len())].0.clone();
        }
        up[rng.random_range(0..up.len())].clone()
    }

    fn count(&self, op: &str, answer: &Answer) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        *stats
            .answers
            .entry((op.to_owned(), answer.status))
            .or_default() += 1;
        if answer.status == 0 || answer.status >= 500 {
            stats.errors.push((Instant::now(), answer.status));
        }
        if answer.status == 503 && answer.retry_after.is_none() {
            stats.unavailable_without_retry_after += 1;
        }
    }

    fn violation(&self, text: String) {
        eprintln!("VIOLATION: {text}");
        self.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .violations
            .push(text);
    }
}

/// One HTTP answer: status (0 for a transport error) and JSON body.
pub struct Answer {
    /// Status code; 0 when the request failed before an answer.
    pub status: u16,
    /// The body (`Null` when empty or not JSON).
    pub body: Value,
    /// The `Retry-After` header, in seconds, when there is one.
    pub retry_after: Option<u64>,
}

/// Sends one request to a random live replica.
pub async fn request(
    shared: &Shared,
    http: &reqwest::Client,
    rng: &mut StdRng,
    op: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Answer {
    let url = format!("{}/api/v2{path}", shared.replica(rng));
    let mut builder = http
        .request(method, &url)
        .bearer_auth(ADMIN_TOKEN)
        .timeout(Duration::from_secs(10));
    if let Some(body) = body {
        builder = builder.json(&body);
    }
    let answer = match builder.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let body = response
                .bytes()
                .await
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(Value::Null);
            Answer {
                status,
                body,
                retry_after,
            }
        }
        Err(_) => Answer {
            status: 0,
            body: Value::Null,
            retry_after: None,
        },
    };
    shared.count(op, &answer);
    if answer.status == 500 {
        shared.violation(format!("{op} {path}: 500 {}", answer.body));
    }
    answer
}

/// One client: random operations on random chats until `stop`.
pub async fn run_client(shared: Arc<Shared>, index: usize, seed: u64, stop: CancellationToken) {
    let mut rng = StdRng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let http = reqwest::Client::new();
    let mut versions: HashMap<String, i64> = HashMap::new();
    let mut n = 0u64;
    while !stop.is_cancelled() {
        n += 1;
        let mut chat = shared.chats[rng.random_range(0..shared.chats.len())].clone();
        let roll = rng.random_range(0..100);
        if (46..54).contains(&roll) {
            // Regenerate and switch need an idle chat: mostly pick one (a
            // busy one answers 409, also checked now and then).
            if rng.random_range(0..4) > 0
                && let Some(idle) = idle_chat(&shared, &http, &mut rng).await
            {
                chat = idle;
            }
        }
        let mut client = Client {
            shared: &shared,
            http: &http,
            rng: &mut rng,
            chat: &chat,
            versions: &mut versions,
        };
        match roll {
            0..30 => client.send(index, n, "queue").await,
            30..40 => client.send(index, n, "interrupt").await,
            40..46 => client.edit(index, n).await,
            46..50 => client.regenerate().await,
            50..54 => client.switch_branch().await,
            54..58 => client.queue_delete().await,
            58..62 => client.promote().await,
            62..68 => client.interrupt().await,
            68..85 => client.answer_tools().await,
            85..88 => client.archive_round_trip().await,
            _ => {
                client.get_chat().await;
            }
        };
        let pause = rng.random_range(20..150);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// A chat of the run that is idle (`waiting` or `error`) now, looked for
/// in a random order; `None` when every chat is busy.
async fn idle_chat(shared: &Shared, http: &reqwest::Client, rng: &mut StdRng) -> Option<String> {
    let start = rng.random_range(0..shared.chats.len());
    for i in 0..shared.chats.len() {
        let chat = &shared.chats[(start + i) % shared.chats.len()];
        let answer = request(
            shared,
            http,
            rng,
            "get_chat",
            reqwest::Method::GET,
            &format!("/chats/{chat}"),
            None,
        )
        .await;
        if answer.status == 200
            && matches!(answer.body["status"].as_str(), Some("waiting" | "error"))
        {
            return Some(chat.clone());
        }
    }
    None
}

struct Client<'a> {
    shared: &'a Shared,
    http: &'a reqwest::Client,
    rng: &'a mut StdRng,
    chat: &'a str,
    versions: &'a mut HashMap<String, i64>,
}

/// The text of a user message carrying `token`: a tool call of the
/// client-side tool, a slow answer, or a quick echo; in a chat with a
/// workspace (`workspace`), mostly a call of a workspace tool instead
/// ([`workspace_text`]), returned with its kind.
fn text_for(rng: &mut StdRng, token: &str, workspace: bool) -> (String, Option<WorkspaceOp>) {
    if workspace && rng.random_range(0..10) < 7 {
        let (op, text) = workspace_text(rng, token);
        return (text, Some(op));
    }
    let text = match rng.random_range(0..10) {
        0..3 => format!("call lookup {{\"token\":\"{token}\"}}"),
        3..5 => format!("slow {token}"),
        _ => token.to_owned(),
    };
    (text, None)
}

/// The files the workspace operations write and read (the checker's
/// replay knows them by the commands of [`workspace_text`]).
pub const WORKSPACE_FILES: [&str; 3] = ["a.txt", "b.txt", "d/c.txt"];
/// The file the `shell_append` operations append a line to.
pub const WORKSPACE_LOG: &str = "log.txt";

/// The kinds of workspace operation a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceOp {
    /// `write_file` of a token to one of [`WORKSPACE_FILES`].
    WriteFile,
    /// `shell`: `printf %s TOKEN > PATH`, half the time after `sleep 0.5`.
    ShellWrite,
    /// `shell`: `printf '%s\n' TOKEN >> log.txt`, half the time after
    /// `sleep 0.5`.
    ShellAppend,
    /// `read_file` of one of the files (or of the log).
    ReadFile,
}

impl WorkspaceOp {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::WriteFile => "write_file",
            Self::ShellWrite => "shell_write",
            Self::ShellAppend => "shell_append",
            Self::ReadFile => "read_file",
        }
    }
}

/// A user text that makes the fake LLM (`scripted` mode: `call NAME
/// JSON`) call a workspace tool with content `token`, so that each write
/// names the send it came from; a tool result then makes it answer `tool
/// said: ...`. The `sleep 0.5` keeps some steps in flight when a replica
/// is killed or stopped.
pub fn workspace_text(rng: &mut StdRng, token: &str) -> (WorkspaceOp, String) {
    let path = WORKSPACE_FILES[rng.random_range(0..WORKSPACE_FILES.len())];
    let sleep = if rng.random_range(0..2) == 0 {
        "sleep 0.5 && "
    } else {
        ""
    };
    let (op, name, args) = match rng.random_range(0..7) {
        0..2 => (
            WorkspaceOp::WriteFile,
            "write_file",
            json!({"path": path, "content": token}),
        ),
        2..4 => {
            let mkdir = match path.rsplit_once('/') {
                Some((dir, _)) => format!("mkdir -p {dir} && "),
                None => String::new(),
            };
            (
                WorkspaceOp::ShellWrite,
                "shell",
                json!({"command": format!("{sleep}{mkdir}printf %s {token} > {path}")}),
            )
        }
        4..6 => (
            WorkspaceOp::ShellAppend,
            "shell",
            json!({"command": format!("{sleep}printf '%s\\n' {token} >> {WORKSPACE_LOG}")}),
        ),
        _ => {
            let path = if rng.random_range(0..4) == 0 {
                WORKSPACE_LOG
            } else {
                path
            };
            // The token, an argument the tool ignores, names the
            // message for the lost-message check.
            (
                WorkspaceOp::ReadFile,
                "read_file",
                json!({"path": path, "token": token}),
            )
        }
    };
    (op, format!("call {name} {args}"))
}

impl Client<'_> {
    async fn call(
        &mut self,
        op: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Answer {
        let answer = request(self.shared, self.http, self.rng, op, method, path, body).await;
        self.observe(&answer.body);
        answer
    }

    /// Checks that the chat's snapshot version never goes backwards for
    /// this client (every answer is read after the previous one).
    fn observe(&mut self, body: &Value) {
        let (Some(id), Some(version)) = (body["id"].as_str(), body["snapshot_version"].as_i64())
        else {
            return;
        };
        if id != self.chat {
            return;
        }
        let last = self.versions.entry(id.to_owned()).or_insert(version);
        if version < *last {
            self.shared.violation(format!(
                "chat {id}: snapshot_version went back from {last} to {version}"
            ));
        }
        *last = version.max(*last);
    }

    /// A send with `behavior`, retried with the same `client_message_id`
    /// while the answer is a transport error or `503`, for up to 30 s
    /// (a failover of the HA cluster lasts about Patroni's TTL of 10 s),
    /// waiting `Retry-After` (at most 2 s) or 300 ms between attempts.
    async fn send(&mut self, client: usize, n: u64, behavior: &str) {
        let token = format!("tok-{client}-{n}");
        let (text, op) = text_for(self.rng, &token, self.workspace());
        let body = json!({
            "content": [{"type": "text", "text": text}],
            "busy_behavior": behavior,
            "client_message_id": token,
        });
        let started = Instant::now();
        let mut written = Written {
            chat: self.chat.to_owned(),
            token: token.clone(),
            started,
            acked: false,
            queued_id: None,
            message_id: None,
            attempt_started: None,
            acked_at: None,
        };
        loop {
            let attempt_started = Instant::now();
            let answer = self
                .call(
                    "send",
                    reqwest::Method::POST,
                    &format!("/chats/{}/messages", self.chat),
                    Some(body.clone()),
                )
                .await;
            match answer.status {
                200 => {
                    written.acked = true;
                    written.attempt_started = Some(attempt_started);
                    written.acked_at = Some(Instant::now());
                    written.queued_id = answer.body["queued_message"]["id"].as_i64();
                    written.message_id = answer.body["message"]["id"].as_i64();
                    self.count_workspace_op(op);
                    break;
                }
                0 | 502 | 503 if started.elapsed() < Duration::from_secs(30) => {
                    let wait = answer.retry_after.map_or(Duration::from_millis(300), |s| {
                        Duration::from_secs(s).min(Duration::from_secs(2))
                    });
                    tokio::time::sleep(wait).await;
                }
                _ => break,
            }
        }
        self.ledger().written.push(written);
    }

    /// Whether the chat has a workspace.
    fn workspace(&self) -> bool {
        self.shared.workspaces.contains(self.chat)
    }

    /// Counts an acknowledged workspace operation.
    fn count_workspace_op(&self, op: Option<WorkspaceOp>) {
        if let Some(op) = op {
            *self
                .shared
                .stats
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .workspace_ops
                .entry(op.name())
                .or_default() += 1;
        }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.shared.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn page(&mut self) -> Option<Value> {
        let answer = self
            .call(
                "get_messages",
                reqwest::Method::GET,
                &format!("/chats/{}/messages?limit=200", self.chat),
                None,
            )
            .await;
        (answer.status == 200).then_some(answer.body)
    }

    /// Edits one of the last user messages.
    async fn edit(&mut self, client: usize, n: u64) {
        let Some(page) = self.page().await else {
            return;
        };
        let users: Vec<i64> = page["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["id"].as_i64())
            .collect();
        if users.is_empty() {
            return;
        }
        // Mostly recent messages, so that histories stay long.
        let pick = users[users
            .len()
            .saturating_sub(1 + self.rng.random_range(0..3.min(users.len())))];
        let token = format!("tok-{client}-{n}");
        let (text, op) = text_for(self.rng, &token, self.workspace());
        let started = Instant::now();
        let answer = self
            .call(
                "edit",
                reqwest::Method::PATCH,
                &format!("/chats/{}/messages/{pick}", self.chat),
                Some(json!({"content": [{"type": "text", "text": text}]})),
            )
            .await;
        if answer.status == 200 {
            self.count_workspace_op(op);
        }
        let mut ledger = self.ledger();
        ledger
            .last_branch_change
            .insert(self.chat.to_owned(), Instant::now());
        ledger.written.push(Written {
            chat: self.chat.to_owned(),
            token,
            started,
            acked: answer.status == 200,
            queued_id: None,
            message_id: answer.body["message"]["id"].as_i64(),
            attempt_started: (answer.status == 200).then_some(started),
            acked_at: (answer.status == 200).then(Instant::now),
        });
    }

    /// Notes that a request that may change the chat's active branch
    /// ended.
    fn branch_changed(&self) {
        self.ledger()
            .last_branch_change
            .insert(self.chat.to_owned(), Instant::now());
    }

    /// Regenerates one of the last assistant answers of the active branch
    /// (mostly the last). A busy chat answers `409`, as expected.
    async fn regenerate(&mut self) {
        let Some(page) = self.page().await else {
            return;
        };
        let answers: Vec<i64> = page["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["id"].as_i64())
            .collect();
        if answers.is_empty() {
            return;
        }
        let back = match self.rng.random_range(0..4) {
            0 => self.rng.random_range(0..3.min(answers.len())),
            _ => 0,
        };
        let pick = answers[answers.len() - 1 - back];
        self.call(
            "regenerate",
            reqwest::Method::POST,
            &format!("/chats/{}/messages/{pick}/regenerate", self.chat),
            None,
        )
        .await;
        self.branch_changed();
    }

    /// Activates the branch through a random message of the tree (any
    /// branch). A busy chat answers `409`, as expected.
    async fn switch_branch(&mut self) {
        let answer = self
            .call(
                "get_tree",
                reqwest::Method::GET,
                &format!("/chats/{}/messages/tree", self.chat),
                None,
            )
            .await;
        if answer.status != 200 {
            return;
        }
        let ids: Vec<i64> = answer.body["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n["id"].as_i64())
            .collect();
        if ids.is_empty() {
            return;
        }
        let pick = ids[self.rng.random_range(0..ids.len())];
        self.call(
            "activate",
            reqwest::Method::POST,
            &format!("/chats/{}/branches/activate", self.chat),
            Some(json!({"message_id": pick})),
        )
        .await;
        self.branch_changed();
    }

    async fn queued(&mut self) -> Option<i64> {
        let page = self.page().await?;
        let queued: Vec<i64> = page["queued_messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|q| q["id"].as_i64())
            .collect();
        if queued.is_empty() {
            return None;
        }
        Some(queued[self.rng.random_range(0..queued.len())])
    }

    async fn queue_delete(&mut self) {
        let Some(id) = self.queued().await else {
            return;
        };
        let answer = self
            .call(
                "queue_delete",
                reqwest::Method::DELETE,
                &format!("/chats/{}/queue/{id}", self.chat),
                None,
            )
            .await;
        if answer.status == 204 {
            self.ledger().queue_deleted.push((self.chat.to_owned(), id));
        }
    }

    async fn promote(&mut self) {
        let Some(id) = self.queued().await else {
            return;
        };
        self.call(
            "promote",
            reqwest::Method::POST,
            &format!("/chats/{}/queue/{id}/promote", self.chat),
            None,
        )
        .await;
    }

    async fn interrupt(&mut self) {
        self.call(
            "interrupt",
            reqwest::Method::POST,
            &format!("/chats/{}/interrupt", self.chat),
            None,
        )
        .await;
    }

    async fn get_chat(&mut self) -> Option<Value> {
        let answer = self
            .call(
                "get_chat",
                reqwest::Method::GET,
                &format!("/chats/{}", self.chat),
                None,
            )
            .await;
        (answer.status == 200).then_some(answer.body)
    }

    /// Answers the pending client-side calls when the chat waits for them.
    async fn answer_tools(&mut self) {
        let Some(chat) = self.get_chat().await else {
            return;
        };
        if chat["status"] != "requires_action" {
            return;
        }
        let Some(page) = self.page().await else {
            return;
        };
        let pending = pending_calls(&page);
        if pending.is_empty() {
            return;
        }
        let results: Vec<Value> = pending
            .iter()
            .map(|id| json!({"tool_call_id": id, "output": {"answered": id}}))
            .collect();
        self.call(
            "tool_results",
            reqwest::Method::POST,
            &format!("/chats/{}/tool-results", self.chat),
            Some(json!({"results": results})),
        )
        .await;
    }

    /// Archives the chat and unarchives it a moment later.
    async fn archive_round_trip(&mut self) {
        let answer = self
            .call(
                "archive",
                reqwest::Method::PATCH,
                &format!("/chats/{}", self.chat),
                Some(json!({"archived": true})),
            )
            .await;
        if answer.status != 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(self.rng.random_range(50..400))).await;
        for _ in 0..5 {
            let answer = self
                .call(
                    "unarchive",
                    reqwest::Method::PATCH,
                    &format!("/chats/{}", self.chat),
                    Some(json!({"archived": false})),
                )
                .await;
            if answer.status == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Tool-call ids of the last assistant message that have no result yet.
pub fn pending_calls(page: &Value) -> Vec<String> {
    let messages: Vec<&Value> = page["messages"].as_array().into_iter().flatten().collect();
    let Some(last_assistant) = messages.iter().rposition(|m| m["role"] == "assistant") else {
        return Vec::new();
    };
    let answered: Vec<&str> = messages[last_assistant..]
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "tool-result")
        .filter_map(|p| p["tool_call_id"].as_str())
        .collect();
    messages[last_assistant]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "tool-call")
        .filter_map(|p| p["tool_call_id"].as_str())
        .filter(|id| !answered.contains(id))
        .map(str::to_owned)
        .collect()
}
