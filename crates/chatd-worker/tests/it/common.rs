//! Fixtures: a database with a provider and a default model pointing at a
//! fake LLM, workers with short intervals, and polling helpers.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use chatd_core::{BusyBehavior, ChatRole, ChatStatus, Episode, MessagePart};
use chatd_pubsub::{PgPubsub, Pubsub};
use chatd_store::{
    Chat, ChatMessage, CompleteRequiresActionInput, CreateChatInput, MIGRATOR, NewMessage,
    SendMessageInput, Store, StoreConfig, ToolResultInput,
};
use chatd_testkit::TestDatabase;
use chatd_testkit::fake_llm::FakeLlm;
use chatd_worker::{DefaultProviderFactory, PartBuffer, Worker, WorkerConfig, WorkerDeps};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub struct Env {
    pub db: TestDatabase,
    pub store: Store,
    pub pubsub: PgPubsub,
    pub llm: FakeLlm,
    pub owner: Uuid,
    pub model_config_id: Uuid,
}

/// Worker tunables for tests: everything in hundreds of milliseconds.
pub fn fast_config() -> WorkerConfig {
    WorkerConfig {
        acquisition_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(200),
        lease_stale_after: Duration::from_millis(1500),
        heartbeat_cleanup_interval: Duration::from_secs(1),
        db_sync_interval: Duration::from_millis(300),
        retry_initial_delay: Duration::from_millis(50),
        retry_max_delay: Duration::from_millis(200),
        infra_backoff: (Duration::from_millis(20), Duration::from_millis(500)),
        // Titles cost a model request; only the title tests want them.
        generate_titles: false,
        ..WorkerConfig::default()
    }
}

impl Env {
    /// A database whose default model is served by the fake LLM in OpenAI
    /// mode (`openai-compat` provider).
    pub async fn new() -> Self {
        Self::with_provider("openai-compat").await
    }

    /// The same with an Anthropic provider (the fake LLM's Anthropic mode).
    pub async fn anthropic() -> Self {
        Self::with_provider("anthropic").await
    }

    pub async fn with_provider(kind: &str) -> Self {
        let db = TestDatabase::new(&MIGRATOR).await.expect("database");
        let pubsub = PgPubsub::connect(db.pool().clone()).await.expect("pubsub");
        let config = StoreConfig {
            heartbeat_stale_after: fast_config().lease_stale_after,
            ..StoreConfig::default()
        };
        let store = Store::with_config(db.pool().clone(), Arc::new(pubsub.clone()), config);
        let llm = FakeLlm::start().await.expect("fake llm");
        let owner = Uuid::new_v4();
        sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, 'alice', 'member')")
            .bind(owner)
            .execute(db.pool())
            .await
            .unwrap();
        let provider = Uuid::new_v4();
        sqlx::query("INSERT INTO chat_providers (id, provider, display_name, base_url, api_key) VALUES ($1, $2, 'fake', $3, 'test-key')")
            .bind(provider)
            .bind(kind)
            .bind(llm.base_url())
            .execute(db.pool())
            .await
            .unwrap();
        let model_config_id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default, options)
             VALUES ($1, $2, 'fake-model', 8192, true, '{\"input_price_micros_per_mtok\": 1000000, \"output_price_micros_per_mtok\": 2000000}')",
        )
        .bind(model_config_id)
        .bind(provider)
        .execute(db.pool())
        .await
        .unwrap();
        Self {
            db,
            store,
            pubsub,
            llm,
            owner,
            model_config_id,
        }
    }

    pub fn worker(&self) -> Worker {
        self.worker_with(fast_config())
    }

    pub fn worker_with(&self, config: WorkerConfig) -> Worker {
        Worker::start(WorkerDeps {
            store: self.store.clone(),
            pubsub: Arc::new(self.pubsub.clone()) as Arc<dyn Pubsub>,
            parts: PartBuffer::new(CancellationToken::new()),
            providers: Arc::new(DefaultProviderFactory),
            config,
        })
    }

    pub async fn create_chat(&self, text: &str) -> Uuid {
        self.create_chat_with(text, None).await
    }

    pub async fn create_chat_with(
        &self,
        text: &str,
        dynamic_tools: Option<serde_json::Value>,
    ) -> Uuid {
        self.create_chat_with_mcp(text, Vec::new(), dynamic_tools)
            .await
    }

    /// Creates a chat that may use the MCP servers `mcp_server_ids` (and
    /// the dynamic tools `dynamic_tools`).
    pub async fn create_chat_with_mcp(
        &self,
        text: &str,
        mcp_server_ids: Vec<Uuid>,
        dynamic_tools: Option<serde_json::Value>,
    ) -> Uuid {
        self.store
            .create_chat(CreateChatInput {
                owner_id: self.owner,
                initial_messages: vec![
                    NewMessage::user(vec![MessagePart::text(text)]).created_by(self.owner),
                ],
                dynamic_tools: dynamic_tools
                    .map(|tools| serde_json::from_value(tools).expect("dynamic tools"))
                    .unwrap_or_default(),
                mcp_server_ids,
                ..CreateChatInput::default()
            })
            .await
            .expect("create chat")
            .chat
            .id
    }

    /// Registers an MCP server row; returns its id.
    pub async fn add_mcp_server(&self, slug: &str, transport: McpRow) -> Uuid {
        let id = Uuid::new_v4();
        let (kind, command, url) = match transport {
            McpRow::Stdio(command) => ("stdio", Some(command), None),
            McpRow::Http(url) => ("streamable_http", None, Some(url)),
        };
        sqlx::query(
            "INSERT INTO chat_mcp_servers (id, slug, transport, command, url) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(slug)
        .bind(kind)
        .bind(command)
        .bind(url)
        .execute(self.db.pool())
        .await
        .unwrap();
        id
    }

    /// Sets MCP server `id`'s `require_approval` (JSON: `"always"`,
    /// `"never"` or an array of tool names).
    pub async fn set_require_approval(&self, id: Uuid, require_approval: serde_json::Value) {
        sqlx::query("UPDATE chat_mcp_servers SET require_approval = $2 WHERE id = $1")
            .bind(id)
            .bind(require_approval)
            .execute(self.db.pool())
            .await
            .unwrap();
    }

    /// Submits the client's `answers` of the pending calls
    /// (`CompleteRequiresAction`), as the API does.
    pub async fn answer(&self, chat_id: Uuid, answers: Vec<ToolResultInput>) {
        let input = CompleteRequiresActionInput {
            results: answers,
            ..Default::default()
        };
        self.store
            .machine(chat_id)
            .update(|tx| Box::pin(async move { tx.complete_requires_action(input).await }))
            .await
            .unwrap();
    }

    /// Merges `options` into the default model config's options.
    pub async fn set_model_options(&self, options: serde_json::Value) {
        sqlx::query("UPDATE chat_model_configs SET options = options || $2 WHERE id = $1")
            .bind(self.model_config_id)
            .bind(options)
            .execute(self.db.pool())
            .await
            .unwrap();
    }

    pub async fn send(&self, chat_id: Uuid, text: &str, busy_behavior: BusyBehavior) {
        self.try_send(chat_id, text, busy_behavior)
            .await
            .expect("send");
    }

    /// [`Env::send`] that returns the store's refusal as its message.
    pub async fn try_send(
        &self,
        chat_id: Uuid,
        text: &str,
        busy_behavior: BusyBehavior,
    ) -> Result<(), String> {
        let message = NewMessage::user(vec![MessagePart::text(text)]).created_by(self.owner);
        self.store
            .machine(chat_id)
            .update(|tx| {
                Box::pin(async move {
                    tx.send_message(SendMessageInput {
                        message,
                        busy_behavior,
                        max_queue_size: None,
                    })
                    .await
                })
            })
            .await
            .map(|_| ())
            .map_err(|err| err.to_string())
    }

    pub async fn chat(&self, chat_id: Uuid) -> Chat {
        chatd_testkit::store::chat_row(self.db.pool(), chat_id).await
    }

    /// Polls the chat until `pred` holds (every 20 ms, up to `timeout`).
    pub async fn wait_for(
        &self,
        chat_id: Uuid,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Chat) -> bool,
    ) -> Chat {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let chat = self.chat(chat_id).await;
            if pred(&chat) {
                return chat;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; chat is {:?} (worker {:?}, hv {})",
                    chat.status, chat.worker_id, chat.history_version
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the chat waits for client-side tool results.
    pub async fn wait_requires_action(&self, chat_id: Uuid) -> Chat {
        self.wait_for(chat_id, Duration::from_secs(20), "requires_action", |c| {
            c.status == ChatStatus::RequiresAction
        })
        .await
    }

    /// Waits until `worker` owns the chat (up to `timeout`).
    pub async fn wait_owned_by(&self, chat_id: Uuid, worker: &Worker, timeout: Duration) -> Chat {
        let worker_id = worker.worker_id();
        let what = format!("ownership by worker {worker_id}");
        self.wait_for(chat_id, timeout, &what, |c| c.worker_id == Some(worker_id))
            .await
    }

    /// Posts the client's result `output` (JSON text) of dynamic call
    /// `tool_call_id` (`CompleteRequiresAction`).
    pub async fn complete_requires_action(&self, chat_id: Uuid, tool_call_id: &str, output: &str) {
        let input = CompleteRequiresActionInput {
            results: vec![ToolResultInput::output(tool_call_id, output, false)],
            ..Default::default()
        };
        self.store
            .machine(chat_id)
            .update(|tx| Box::pin(async move { tx.complete_requires_action(input).await }))
            .await
            .unwrap();
    }

    /// Waits until the turn ended in error; returns the stored JSON of the
    /// chat's `last_error`.
    pub async fn wait_error(&self, chat_id: Uuid) -> serde_json::Value {
        last_error_json(&self.wait_status(chat_id, ChatStatus::Error).await)
    }

    pub async fn wait_status(&self, chat_id: Uuid, status: ChatStatus) -> Chat {
        self.wait_for(
            chat_id,
            Duration::from_secs(20),
            &format!("status {status}"),
            |c| c.status == status && c.worker_id.is_none(),
        )
        .await
    }

    pub async fn active_messages(&self, chat_id: Uuid) -> Vec<ChatMessage> {
        let mut messages = self.all_messages(chat_id).await;
        messages.retain(|m| !m.deleted);
        messages
    }

    pub async fn all_messages(&self, chat_id: Uuid) -> Vec<ChatMessage> {
        chatd_testkit::store::message_rows(self.db.pool(), chat_id).await
    }
}

/// The stored JSON of the chat's `last_error`.
pub fn last_error_json(chat: &Chat) -> serde_json::Value {
    serde_json::to_value(chat.last_error.as_ref().expect("last_error")).unwrap()
}

/// The key of the parts of generation attempt `generation_attempt` of
/// `history_version`.
pub fn episode(chat_id: Uuid, history_version: i64, generation_attempt: i64) -> Episode {
    Episode {
        chat_id,
        history_version,
        generation_attempt,
    }
}

/// The dynamic tool `pick_color` (no description), as a chat's
/// `dynamic_tools`.
pub fn pick_color_tool() -> serde_json::Value {
    serde_json::json!([{"name": "pick_color", "description": "", "input_schema": {"type": "object"}}])
}

/// How an MCP server row reaches its server.
pub enum McpRow {
    /// A command run over stdio.
    Stdio(String),
    /// A streamable HTTP endpoint.
    Http(String),
}

/// The testkit's MCP fixture as a stdio command.
pub fn fixture_command() -> String {
    chatd_testkit::mcp_fixture_bin()
        .expect("mcp-fixture")
        .display()
        .to_string()
}

pub fn text_of(message: &ChatMessage) -> String {
    message
        .content
        .0
        .iter()
        .filter_map(|p| match p {
            MessagePart::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// `(role, text)` of every active message.
pub async fn transcript(env: &Env, chat_id: Uuid) -> Vec<(ChatRole, String)> {
    env.active_messages(chat_id)
        .await
        .iter()
        .map(|m| (m.role, text_of(m)))
        .collect()
}

/// Shorthands for test configs.
pub struct WorkerConfigExt;

impl WorkerConfigExt {
    /// [`fast_config`] with a per-user running-chat cap (the default of
    /// `users.max_running_chats`) other than the server's 8.
    pub fn with_running_chat_cap(max_running_chats: i32) -> WorkerConfig {
        WorkerConfig {
            limits: chatd_core::limits::LimitDefaults {
                max_running_chats,
                ..Default::default()
            },
            ..fast_config()
        }
    }

    /// [`fast_config`] with a retry budget.
    pub fn with_retries(retries: u32) -> WorkerConfig {
        WorkerConfig {
            max_generation_retries: retries,
            ..fast_config()
        }
    }
}

/// The tool results of `messages`, in order: `(tool_call_id, result,
/// is_error)`.
pub fn tool_results(messages: &[ChatMessage]) -> Vec<(String, serde_json::Value, bool)> {
    messages
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter_map(|p| match p {
            MessagePart::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => Some((tool_call_id.clone(), result.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

impl Env {
    /// Waits (at most 10 s) until the fake LLM has received `n` requests.
    pub async fn wait_requests(&self, n: usize) {
        for _ in 0..500 {
            if self.llm.requests().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The text of the first user message of a request (which chat is asking,
/// when the fake LLM plays several).
pub fn first_user_text(request: &chatd_testkit::fake_llm::RecordedRequest) -> String {
    request.body["messages"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["role"] == "user"))
        .map(|m| match &m["content"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}
