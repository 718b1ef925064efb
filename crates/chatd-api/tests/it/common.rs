//! Shared fixtures: a real HTTP server (the crate's router on an ephemeral
//! port) over a fresh PostgreSQL database, users with tokens, a small HTTP
//! client, builders that drive a chat into any execution state, and a dump
//! of every table for "nothing changed" assertions.

#![allow(dead_code)]

use std::sync::Arc;

use chatd_api::{ApiOptions, AppState};
use chatd_core::ExecutionState;
use chatd_pubsub::RecordingPublisher;
use chatd_store::{MIGRATOR, Store};
use chatd_testkit::TestDatabase;
use chatd_testkit::store::{Route, steps_to};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

/// The dynamic tool every chat built by [`Server::chat_in`] has, the tool
/// call the `A*` builders leave pending, and the builder steps.
pub use chatd_testkit::store::{DYNAMIC_TOOL as TOOL, PENDING_CALL, Step};

/// Every execution state a row can be in (not `N`).
pub const ROW_STATES: [ExecutionState; 13] = {
    use ExecutionState::*;
    [W, E0, E1, R0, R1, I0, I1, A0, A1, XW, XE0, XE1, Invalid]
};

/// A user and their token.
#[derive(Debug, Clone)]
pub struct User {
    pub id: Uuid,
    pub token: String,
}

/// An HTTP answer: status and JSON body (`Value::Null` when empty or not
/// JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub text: String,
}

impl Answer {
    /// Asserts the status and returns the body.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &Value {
        assert_eq!(
            self.status, status,
            "expected {status}, got {}: {}",
            self.status, self.text
        );
        &self.body
    }

    /// Asserts an error status and the API.md error shape.
    #[track_caller]
    pub fn expect_error(&self, status: u16) -> &Value {
        self.expect(status);
        assert_error_shape(&self.body, &self.text);
        &self.body
    }

    /// The error message.
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }

    /// The fields named by `validations`.
    pub fn fields(&self) -> Vec<String> {
        self.body["validations"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|x| x["field"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Asserts `{message: string, detail?: string, validations?: [{field, detail}]}`
/// and no other key.
#[track_caller]
pub fn assert_error_shape(body: &Value, text: &str) {
    let obj = body
        .as_object()
        .unwrap_or_else(|| panic!("error body is not an object: {text}"));
    assert!(obj["message"].is_string(), "message: {text}");
    for key in obj.keys() {
        assert!(
            ["message", "detail", "validations"].contains(&key.as_str()),
            "unexpected key {key}: {text}"
        );
    }
    if let Some(detail) = obj.get("detail") {
        assert!(detail.is_string(), "detail: {text}");
    }
    if let Some(validations) = obj.get("validations") {
        let list = validations.as_array().expect("validations array");
        assert!(!list.is_empty(), "empty validations: {text}");
        for v in list {
            assert!(v["field"].is_string() && v["detail"].is_string(), "{text}");
        }
    }
}

/// A running server on its own database.
pub struct Server {
    pub db: TestDatabase,
    pub store: Store,
    pub base: String,
    pub http: reqwest::Client,
    pub admin: User,
    pub alice: User,
    pub bob: User,
    task: tokio::task::JoinHandle<()>,
    /// The router's state (shared: a test may flip what the replica knows,
    /// such as its commit watch).
    pub state: AppState,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub async fn start() -> Self {
        Self::start_with(ApiOptions::default()).await
    }

    pub async fn start_with(options: ApiOptions) -> Self {
        Self::start_with_store(options, chatd_store::StoreConfig::default()).await
    }

    /// A server whose store has `config` (for example a secret key).
    pub async fn start_with_store(options: ApiOptions, config: chatd_store::StoreConfig) -> Self {
        let db = TestDatabase::new(&MIGRATOR).await.expect("test database");
        let store = Store::with_config(
            db.pool().clone(),
            Arc::new(RecordingPublisher::new()),
            config,
        );
        let state = AppState::new(store.clone(), options);
        let app = chatd_api::router(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        let pool = db.pool().clone();
        let admin = make_user(&pool, "root", true).await;
        let alice = make_user(&pool, "alice", false).await;
        let bob = make_user(&pool, "bob", false).await;
        Self {
            db,
            store,
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
            admin,
            alice,
            bob,
            task,
            state,
        }
    }

    pub fn pool(&self) -> &sqlx::PgPool {
        self.db.pool()
    }

    /// Sends a request with an optional JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let raw = body.map(|b| serde_json::to_vec(&b).expect("json"));
        self.raw(method, path, token, raw).await
    }

    /// Sends a request with raw body bytes.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Answer {
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let resp = req.send().await.expect("send");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer { status, body, text }
    }

    /// Sends a request with a JSON body (if any) and extra headers; returns
    /// the answer and its response headers.
    pub async fn call_with_headers(
        &self,
        method: &str,
        path: &str,
        user: &User,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (Answer, reqwest::header::HeaderMap) {
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(&user.token);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).expect("json"));
        }
        let resp = req.send().await.expect("send");
        let status = resp.status().as_u16();
        let response_headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        (Answer { status, body, text }, response_headers)
    }

    pub async fn get(&self, path: &str, user: &User) -> Answer {
        self.call("GET", path, Some(&user.token), None).await
    }

    pub async fn post(&self, path: &str, user: &User, body: Value) -> Answer {
        self.call("POST", path, Some(&user.token), Some(body)).await
    }

    pub async fn post_empty(&self, path: &str, user: &User) -> Answer {
        self.call("POST", path, Some(&user.token), None).await
    }

    pub async fn patch(&self, path: &str, user: &User, body: Value) -> Answer {
        self.call("PATCH", path, Some(&user.token), Some(body))
            .await
    }

    pub async fn delete(&self, path: &str, user: &User) -> Answer {
        self.call("DELETE", path, Some(&user.token), None).await
    }

    /// Creates a chat for `user` over HTTP with the dynamic tool [`TOOL`];
    /// returns its id (the chat is `R0`).
    pub async fn create_chat(&self, user: &User) -> Uuid {
        let body = self
            .post(
                "/api/v2/chats",
                user,
                json!({
                    "content": [{"type": "text", "text": "hello"}],
                    "dynamic_tools": [{"name": TOOL, "description": "pick", "input_schema": {"type": "object"}}],
                }),
            )
            .await;
        uuid(&body.expect(201)["id"])
    }

    /// Creates a chat for `user` and drives it into `state` with real
    /// transitions of the store (the worker-side ones included). `Invalid`
    /// is a waiting chat with a queue (not archived); see
    /// [`Server::archived_invalid`] for the other kind.
    pub async fn chat_in(&self, user: &User, state: ExecutionState) -> Uuid {
        let id = self.create_chat(user).await;
        self.drive(id, state).await;
        id
    }

    pub async fn drive(&self, id: Uuid, state: ExecutionState) {
        let route = Route {
            reply_before_finish: true,
            invalid_waiting_with_queue: true,
            retrying: false,
        };
        chatd_testkit::store::drive(&self.store, id, state, &steps_to(state, route)).await;
    }

    /// A chat in `state` (`E1`, `R1`, `I1` or `A1`) with two queued messages.
    pub async fn two_queued(&self, user: &User, state: ExecutionState) -> Uuid {
        use ExecutionState as S;
        let id = self.chat_in(user, S::R1).await;
        self.step(id, Step::Queue).await;
        match state {
            S::R1 => {}
            S::E1 => self.step(id, Step::FinishError).await,
            S::I1 => self.step(id, Step::Interrupt).await,
            S::A1 => {
                // Enter requires-action with the queue in place.
                self.step(id, Step::CallTool).await;
                self.step(id, Step::EnterAction).await;
            }
            other => panic!("two_queued does not build {other}"),
        }
        assert_eq!(self.state(id).await, state);
        assert_eq!(self.queue_ids(id).await.len(), 2);
        id
    }

    /// A chat that is archived while running: invalid, archived, no queue.
    pub async fn archived_invalid(&self, user: &User) -> Uuid {
        let id = self.create_chat(user).await;
        self.step(id, Step::CorruptArchived).await;
        assert_eq!(self.state(id).await, ExecutionState::Invalid);
        id
    }

    pub async fn step(&self, id: Uuid, step: Step) {
        chatd_testkit::store::run_step(&self.store, id, step).await;
    }

    /// Applies `f` in one bundle and commits; panics on error.
    pub async fn apply<F>(&self, id: Uuid, f: F)
    where
        F: for<'a> FnOnce(
            &'a mut chatd_store::ChatTx,
        ) -> futures::future::BoxFuture<'a, chatd_store::StoreResult<()>>,
    {
        chatd_testkit::store::apply(&self.store, id, f).await;
    }

    /// The chat's execution state (`N` when it does not exist).
    pub async fn state(&self, id: Uuid) -> ExecutionState {
        chatd_testkit::store::execution_state(self.pool(), id).await
    }

    /// Queue ids of the chat, head first.
    pub async fn queue_ids(&self, id: Uuid) -> Vec<i64> {
        let queue = chatd_testkit::store::queue_rows(self.pool(), id).await;
        queue.into_iter().map(|q| q.id).collect()
    }

    /// Ids of the chat's messages (all rows), ascending.
    pub async fn message_ids(&self, id: Uuid) -> Vec<i64> {
        let messages = chatd_testkit::store::message_rows(self.pool(), id).await;
        messages.into_iter().map(|m| m.id).collect()
    }

    pub async fn snapshot_version(&self, id: Uuid) -> i64 {
        chatd_testkit::store::snapshot_version(self.pool(), id).await
    }

    /// Every row of every table, as JSON, in a stable order.
    pub async fn dump(&self) -> Value {
        let tables = [
            "users",
            "api_keys",
            "chat_providers",
            "chat_model_configs",
            "chat_mcp_servers",
            "replicas",
            "cluster_settings",
            "chats",
            "chat_messages",
            "chat_queued_messages",
            "chat_send_receipts",
            "chat_heartbeats",
            "chat_files",
            "chat_file_chunks",
            "idempotency_keys",
            "user_sessions",
            "chat_shares",
        ];
        let mut out = serde_json::Map::new();
        for table in tables {
            // Authenticating any request refreshes its token's
            // `last_used_at` (API.md "Limits, budgets and the token
            // lifecycle"): bookkeeping of the request, not a change it makes.
            let row = if table == "api_keys" {
                "(to_jsonb(t) - 'last_used_at')"
            } else if table == "user_sessions" {
                // Likewise a session's use slides its end.
                "(to_jsonb(t) - 'last_used_at' - 'expires_at')"
            } else {
                "to_jsonb(t)"
            };
            let rows: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT coalesce(jsonb_agg({row} ORDER BY {row}::text), '[]'::jsonb) FROM {table} t"
            )))
            .fetch_one(self.pool())
            .await
            .expect("dump");
            out.insert(table.to_owned(), rows);
        }
        Value::Object(out)
    }

    /// A provider and an enabled model config (the default); returns the
    /// config id.
    pub async fn model_config(&self) -> Uuid {
        let provider = self
            .post(
                "/api/v2/chats/providers",
                &self.admin,
                json!({"provider": "openai", "display_name": "OpenAI", "api_key": "sk-secret"}),
            )
            .await;
        let provider_id = provider.expect(201)["id"].clone();
        let config = self
            .post(
                "/api/v2/chats/model-configs",
                &self.admin,
                json!({"provider_id": provider_id, "model": "gpt-4o", "context_limit": 128000}),
            )
            .await;
        uuid(&config.expect(201)["id"])
    }
}

/// Creates a user with a token through the library entry point.
pub async fn make_user(pool: &sqlx::PgPool, name: &str, admin: bool) -> User {
    let token = chatd_api::create_token(pool, name, admin)
        .await
        .expect("create token");
    let id: Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("user id");
    User { id, token }
}

#[track_caller]
pub fn uuid(v: &Value) -> Uuid {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a uuid: {v}"))
}

/// `/api/v2/chats/{id}` + `suffix`.
pub fn chat_path(id: Uuid, suffix: &str) -> String {
    format!("/api/v2/chats/{id}{suffix}")
}

/// A text message body.
pub fn text(t: &str) -> Value {
    json!({"content": [{"type": "text", "text": t}]})
}
