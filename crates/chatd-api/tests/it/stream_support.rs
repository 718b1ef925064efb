//! Fixtures of the live-stream tests: the router with streaming enabled over
//! a fresh database, an in-process pubsub, a part buffer and (on demand) a
//! worker talking to a fake LLM; WebSocket and SSE clients that collect
//! events; helpers that check event sequences.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use chatd_api::{ApiOptions, AppState, StreamConfig, StreamDeps};
use chatd_pubsub::{MemoryPubsub, Pubsub};
use chatd_store::{MIGRATOR, Store, StoreConfig};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::FakeLlm;
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, tungstenite};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::common::{User, make_user};

/// The relay secret of every test replica.
pub const SECRET: &str = "test-relay-secret";

/// How long a test waits for one expected event.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

/// Stream tunables for tests: fast polls, pings and keep-alives.
pub fn fast_stream_config() -> StreamConfig {
    StreamConfig {
        sync_poll_interval: Duration::from_millis(200),
        ping_interval: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(5),
        keep_alive_interval: Duration::from_millis(300),
        ..StreamConfig::default()
    }
}

/// Worker tunables for tests.
pub fn fast_worker_config(worker_id: Uuid) -> WorkerConfig {
    WorkerConfig {
        worker_id,
        acquisition_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(200),
        lease_stale_after: Duration::from_millis(1500),
        heartbeat_cleanup_interval: Duration::from_secs(1),
        db_sync_interval: Duration::from_millis(300),
        retry_initial_delay: Duration::from_millis(50),
        retry_max_delay: Duration::from_millis(200),
        infra_backoff: (Duration::from_millis(20), Duration::from_millis(500)),
        ..WorkerConfig::default()
    }
}

/// What a replica of [`StreamEnv`] is made of.
pub struct Replica {
    pub id: Uuid,
    pub state: AppState,
    pub base: String,
    pub parts: PartBuffer,
    pub shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.task.abort();
    }
}

impl Replica {
    /// `ws://ADDR` + `path`.
    pub fn ws_url(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }
}

/// A database, an in-process pubsub, a fake LLM and one replica.
pub struct StreamEnv {
    pub db: TestDatabase,
    pub store: Store,
    pub pubsub: MemoryPubsub,
    pub llm: FakeLlm,
    pub http: reqwest::Client,
    pub alice: User,
    pub bob: User,
    pub replica: Replica,
    pub worker: Option<Worker>,
}

impl StreamEnv {
    /// Opens `chat`'s WebSocket stream on the first replica as alice, from
    /// `after_id` (`None`: from the start).
    pub async fn watch(&self, chat: Uuid, after_id: Option<i64>) -> StreamClient {
        StreamClient::connect(
            &self.replica.ws_url(&stream_path(chat, after_id)),
            &self.alice.token,
        )
        .await
    }

    pub async fn start() -> Self {
        Self::start_with(fast_stream_config(), true).await
    }

    /// `listen_notify: false` makes the replica's streams ignore pubsub.
    pub async fn start_with(config: StreamConfig, listen_notify: bool) -> Self {
        let db = TestDatabase::new(&MIGRATOR).await.expect("database");
        let pubsub = MemoryPubsub::new();
        let store = Store::with_config(
            db.pool().clone(),
            Arc::new(pubsub.clone()),
            StoreConfig {
                heartbeat_stale_after: Duration::from_millis(1500),
                ..StoreConfig::default()
            },
        );
        let llm = FakeLlm::start().await.expect("fake llm");
        let provider = Uuid::new_v4();
        sqlx::query("INSERT INTO chat_providers (id, provider, display_name, base_url) VALUES ($1, 'openai-compat', 'fake', $2)")
            .bind(provider)
            .bind(llm.base_url())
            .execute(db.pool())
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default) VALUES ($1, $2, 'fake-model', 8192, true)",
        )
        .bind(Uuid::new_v4())
        .bind(provider)
        .execute(db.pool())
        .await
        .unwrap();
        let alice = make_user(db.pool(), "alice", false).await;
        let bob = make_user(db.pool(), "bob", false).await;
        let pubsub_dep = listen_notify.then(|| Arc::new(pubsub.clone()) as Arc<dyn Pubsub>);
        let replica = start_replica(&store, pubsub_dep, config).await;
        Self {
            db,
            store,
            pubsub,
            llm,
            http: reqwest::Client::new(),
            alice,
            bob,
            replica,
            worker: None,
        }
    }

    /// Another replica on the same database and pubsub, with its own part
    /// buffer and id.
    pub async fn another_replica(&self, config: StreamConfig) -> Replica {
        start_replica(
            &self.store,
            Some(Arc::new(self.pubsub.clone()) as Arc<dyn Pubsub>),
            config,
        )
        .await
    }

    /// Starts the replica's worker (id = replica id, writing its part
    /// buffer).
    pub fn start_worker(&mut self, retries: u32) {
        self.worker = Some(self.worker_on(self.replica.id, &self.replica.parts, retries));
    }

    /// A worker with id `id` writing `parts`.
    pub fn worker_on(&self, id: Uuid, parts: &PartBuffer, retries: u32) -> Worker {
        let mut config = fast_worker_config(id);
        config.max_generation_retries = retries;
        Worker::start(WorkerDeps {
            store: self.store.clone(),
            pubsub: Arc::new(self.pubsub.clone()) as Arc<dyn Pubsub>,
            parts: parts.clone(),
            providers: Arc::new(DefaultProviderFactory),
            config,
        })
    }

    pub async fn stop_worker(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.shutdown().await;
        }
    }

    pub fn pool(&self) -> &sqlx::PgPool {
        self.db.pool()
    }

    /// `POST /api/v2/chats` as `user`; returns the chat id.
    pub async fn create_chat(&self, user: &User, body: Value) -> Uuid {
        let answer = self
            .request("POST", "/api/v2/chats", user, Some(body))
            .await;
        assert_eq!(answer.0, 201, "{}", answer.1);
        answer.1["id"].as_str().unwrap().parse().unwrap()
    }

    /// A request; returns `(status, JSON body)`.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        user: &User,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.replica.base))
            .bearer_auth(&user.token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// The chat's current client-visible messages (`GET /messages`).
    pub async fn messages(&self, user: &User, chat: Uuid) -> Vec<Value> {
        let (status, body) = self
            .request(
                "GET",
                &format!("/api/v2/chats/{chat}/messages?limit=200"),
                user,
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["messages"].as_array().unwrap().clone()
    }

    pub async fn wait_status(&self, chat: Uuid, status: &str) {
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        loop {
            let row: (String, Option<Uuid>) =
                sqlx::query_as("SELECT status, worker_id FROM chats WHERE id = $1")
                    .bind(chat)
                    .fetch_one(self.pool())
                    .await
                    .unwrap();
            if row.0 == status && row.1.is_none() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "chat stays {row:?}, not {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn start_replica(
    store: &Store,
    pubsub: Option<Arc<dyn Pubsub>>,
    config: StreamConfig,
) -> Replica {
    let id = Uuid::new_v4();
    let parts = PartBuffer::new(CancellationToken::new());
    let shutdown = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    sqlx::query("INSERT INTO replicas (id, advertise_url) VALUES ($1, $2)")
        .bind(id)
        .bind(&base)
        .execute(store.pool())
        .await
        .unwrap();
    let state = AppState::new(
        store.clone(),
        ApiOptions {
            relay_secret: Some(SECRET.to_owned()),
            ..ApiOptions::default()
        },
    )
    .with_stream(StreamDeps {
        parts: Arc::new(parts.clone()),
        replica_id: id,
        pubsub,
        config,
        shutdown: shutdown.clone(),
    });
    let app = chatd_api::router(state.clone());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    Replica {
        id,
        state,
        base,
        parts,
        shutdown,
        task,
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A WebSocket stream client that splits frames into events.
pub struct StreamClient {
    ws: Ws,
    pending: VecDeque<Value>,
    /// Every event received so far, in order.
    pub events: Vec<Value>,
    /// Frames received so far.
    pub frames: usize,
    /// The close frame, once received.
    pub closed: Option<Option<CloseFrame>>,
}

impl StreamClient {
    /// Connects to `url` with `Authorization: Bearer <token>`.
    pub async fn connect(url: &str, token: &str) -> Self {
        Self::try_connect(url, token)
            .await
            .expect("websocket connect")
    }

    pub async fn try_connect(url: &str, token: &str) -> Result<Self, tungstenite::Error> {
        let mut request = url.into_client_request().unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        let (ws, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(Self {
            ws,
            pending: VecDeque::new(),
            events: Vec::new(),
            frames: 0,
            closed: None,
        })
    }

    /// The next event, or `None` when the server closed (or `timeout`
    /// passed: then it panics).
    pub async fn next(&mut self, timeout: Duration) -> Option<Value> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.events.push(event.clone());
                return Some(event);
            }
            if self.closed.is_some() {
                return None;
            }
            let frame = tokio::time::timeout(timeout, self.ws.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no event within {timeout:?}; got so far: {:#?}",
                        self.events
                    )
                });
            match frame {
                Some(Ok(tungstenite::Message::Text(text))) => {
                    let batch: Vec<Value> =
                        serde_json::from_str(text.as_str()).expect("frame is a JSON array");
                    assert!(
                        !batch.is_empty() && batch.len() <= 256,
                        "frame of {} events",
                        batch.len()
                    );
                    self.frames += 1;
                    self.pending.extend(batch);
                }
                Some(Ok(tungstenite::Message::Close(frame))) => self.closed = Some(frame),
                Some(Ok(_)) => {}
                None | Some(Err(_)) => self.closed = Some(None),
            }
        }
    }

    /// Reads events until one satisfies `pred`; returns it.
    pub async fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.next(EVENT_TIMEOUT).await {
                Some(event) if pred(&event) => return event,
                Some(_) => {}
                None => panic!(
                    "stream closed ({:?}) before {what}; events: {:#?}",
                    self.closed, self.events
                ),
            }
        }
    }

    /// Reads the next `n` events.
    pub async fn take(&mut self, n: usize) -> Vec<Value> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.next(EVENT_TIMEOUT).await.expect("stream closed early"));
        }
        out
    }

    /// Reads until the server closes; returns the close frame.
    pub async fn until_closed(&mut self) -> Option<CloseFrame> {
        while self.next(EVENT_TIMEOUT).await.is_some() {}
        self.closed.clone().flatten()
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

/// `/api/v2/chats/{chat}/stream` (+ `?after_id=N`).
pub fn stream_path(chat: Uuid, after_id: Option<i64>) -> String {
    match after_id {
        Some(id) => format!("/api/v2/chats/{chat}/stream?after_id={id}"),
        None => format!("/api/v2/chats/{chat}/stream"),
    }
}

/// `type` of an event, with the status or message id for readability:
/// `status:running`, `message:12`, `message_part`, ...
pub fn label(event: &Value) -> String {
    match event["type"].as_str().unwrap() {
        "status" => format!("status:{}", event["status"]["status"].as_str().unwrap()),
        "message" => format!("message:{}", event["message"]["id"]),
        other => other.to_owned(),
    }
}

pub fn labels(events: &[Value]) -> Vec<String> {
    events.iter().map(label).collect()
}

/// Ids of the `message` events, in order.
pub fn message_ids(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .filter(|e| e["type"] == "message")
        .map(|e| e["message"]["id"].as_i64().unwrap())
        .collect()
}

/// Checks that within every episode the parts' `seq` run 1, 2, 3, ...
/// (restarting after each `preview_reset`), and returns the text of the
/// parts of each episode in order of appearance.
pub fn check_parts(events: &[Value]) -> Vec<((i64, i64), String)> {
    let mut episodes: Vec<((i64, i64), String)> = Vec::new();
    let mut last: Option<((i64, i64), u64)> = None;
    for event in events {
        match event["type"].as_str().unwrap() {
            "preview_reset" => last = None,
            "message_part" => {
                let p = &event["message_part"];
                let episode = (
                    p["history_version"].as_i64().unwrap(),
                    p["generation_attempt"].as_i64().unwrap(),
                );
                let seq = p["seq"].as_u64().unwrap();
                let expected = match last {
                    Some((e, s)) if e == episode => s + 1,
                    _ => 1,
                };
                assert_eq!(
                    seq, expected,
                    "parts of episode {episode:?} are not contiguous: {events:#?}"
                );
                last = Some((episode, seq));
                let text = p["part"]["text"].as_str().unwrap_or_default();
                match episodes.last_mut() {
                    Some((e, t)) if *e == episode => t.push_str(text),
                    _ => episodes.push((episode, text.to_owned())),
                }
            }
            _ => {}
        }
    }
    episodes
}

/// The text of a message event's text parts.
pub fn message_text(event: &Value) -> String {
    event["message"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// A chat body with `text` as the first message.
pub fn chat_body(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// A send body.
pub fn send_body(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// An SSE client: reads the raw `text/event-stream` body and splits it into
/// events and comments.
pub struct SseClient {
    response: reqwest::Response,
    buffer: String,
    /// Every SSE block so far: `(event, id, data)` for events, `(":", "",
    /// comment)` for comments.
    pub blocks: Vec<(String, String, String)>,
}

impl SseClient {
    pub async fn connect(
        url: &str,
        token: &str,
        last_event_id: Option<&str>,
    ) -> (u16, Option<Self>) {
        let mut req = reqwest::Client::new().get(url).bearer_auth(token);
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let response = req.send().await.expect("sse request");
        let status = response.status().as_u16();
        if status != 200 {
            return (status, None);
        }
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        (
            status,
            Some(Self {
                response,
                buffer: String::new(),
                blocks: Vec::new(),
            }),
        )
    }

    /// The next block (event or comment), or `None` at the end of the body.
    pub async fn next(&mut self) -> Option<(String, String, String)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = String::new();
                let mut id = String::new();
                let mut data = String::new();
                let mut comment = None;
                for line in block.lines() {
                    if let Some(rest) = line.strip_prefix(':') {
                        comment = Some(rest.trim().to_owned());
                    } else if let Some(rest) = line.strip_prefix("event: ") {
                        event = rest.to_owned();
                    } else if let Some(rest) = line.strip_prefix("id: ") {
                        id = rest.to_owned();
                    } else if let Some(rest) = line.strip_prefix("data: ") {
                        data.push_str(rest);
                    }
                }
                let block = match comment {
                    Some(c) if event.is_empty() && data.is_empty() => {
                        (":".to_owned(), String::new(), c)
                    }
                    _ => (event, id, data),
                };
                self.blocks.push(block.clone());
                return Some(block);
            }
            let chunk = tokio::time::timeout(EVENT_TIMEOUT, self.response.chunk())
                .await
                .expect("no SSE data in time")
                .expect("sse body");
            match chunk {
                Some(bytes) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                None => return None,
            }
        }
    }

    /// Reads blocks until one satisfies `pred`.
    pub async fn until(
        &mut self,
        what: &str,
        pred: impl Fn(&(String, String, String)) -> bool,
    ) -> (String, String, String) {
        loop {
            match self.next().await {
                Some(block) if pred(&block) => return block,
                Some(_) => {}
                None => panic!("SSE stream ended before {what}: {:#?}", self.blocks),
            }
        }
    }
}

/// Sends `text` frames from a fake parts endpoint: a tiny server that
/// answers every episode selection with `frames` (each a JSON array of
/// `message_part` events), registered as replica `id`.
pub async fn fake_parts_endpoint(
    pool: &sqlx::PgPool,
    id: Uuid,
    frames: Vec<Value>,
) -> tokio::task::JoinHandle<()> {
    use axum::extract::ws::{Message, WebSocketUpgrade};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    sqlx::query("INSERT INTO replicas (id, advertise_url) VALUES ($1, $2)")
        .bind(id)
        .bind(&base)
        .execute(pool)
        .await
        .unwrap();
    let frames = Arc::new(frames);
    let app = axum::Router::new().route(
        "/api/v2/chats/{chat}/stream/parts",
        axum::routing::get(move |ws: WebSocketUpgrade| {
            let frames = frames.clone();
            async move {
                ws.on_upgrade(move |mut socket| async move {
                    while let Some(Ok(message)) = socket.recv().await {
                        if let Message::Text(_) = message {
                            for frame in frames.iter() {
                                if socket.send(Message::text(frame.to_string())).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                })
            }
        }),
    );
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    })
}

/// Sends an episode selection on a parts connection.
pub async fn select_episode(ws: &mut StreamClient, history_version: i64, generation_attempt: i64) {
    ws.ws
        .send(tungstenite::Message::text(
            json!({"history_version": history_version, "generation_attempt": generation_attempt})
                .to_string(),
        ))
        .await
        .unwrap();
}
