//! Shared fixtures: a store on a fresh database with a recording publisher,
//! and builders that drive a chat into any execution state through real
//! transitions.

#![allow(dead_code)]

use std::sync::Arc;

use chatd_core::{
    BusyBehavior, ChatError, ChatErrorKind, ChatRole, DynamicTool, ExecutionState, MessagePart,
    RetryState,
};
use chatd_pubsub::RecordingPublisher;
use chatd_store::{CreateChatInput, MIGRATOR, NewMessage, SendMessageInput, Store, StoreConfig};
use chatd_testkit::TestDatabase;
use serde_json::{Value, json};
use uuid::Uuid;

/// A store on its own database, and the publisher it records into.
pub struct Harness {
    pub db: TestDatabase,
    pub store: Store,
    pub published: Arc<RecordingPublisher>,
    pub owner: Uuid,
    pub worker: Uuid,
    pub runner: Uuid,
}

/// A `generic`, not retryable [`ChatError`] with `message`.
pub fn chat_error(message: &str) -> ChatError {
    ChatError::new(ChatErrorKind::Generic, message, false)
}

/// The [`RetryState`] of retry number `attempt`: a rate limit, retried a
/// second later (at a fixed time, so that equal attempts are equal values).
pub fn retry_state(attempt: i64) -> RetryState {
    RetryState {
        attempt,
        delay_ms: 1000,
        error: ChatError::new(ChatErrorKind::RateLimit, "rate limited", true),
        retrying_at: chrono::DateTime::UNIX_EPOCH,
    }
}

/// The tool call id the `A*` builders leave pending.
pub const PENDING_CALL: &str = "call-1";
/// The dynamic tool the `A*` builders call.
pub const DYNAMIC_TOOL: &str = "pick_color";

impl Harness {
    pub async fn new() -> Self {
        Self::with_config(StoreConfig::default()).await
    }

    pub async fn with_config(config: StoreConfig) -> Self {
        let db = TestDatabase::new(&MIGRATOR).await.expect("test database");
        let published = Arc::new(RecordingPublisher::new());
        let store = Store::with_config(db.pool().clone(), published.clone(), config);
        let owner = Uuid::new_v4();
        sqlx::query("INSERT INTO users (id, username, role) VALUES ($1, $2, 'member')")
            .bind(owner)
            .bind(format!("user-{}", owner.simple()))
            .execute(db.pool())
            .await
            .expect("insert user");
        Self {
            db,
            store,
            published,
            owner,
            worker: Uuid::new_v4(),
            runner: Uuid::new_v4(),
        }
    }

    pub fn pool(&self) -> &sqlx::PgPool {
        self.db.pool()
    }

    /// Creates a running chat (`R0`) with one user message and a dynamic tool.
    pub async fn create(&self) -> Uuid {
        let result = self
            .store
            .create_chat(CreateChatInput {
                owner_id: self.owner,
                initial_messages: vec![user_text("hello")],
                dynamic_tools: vec![DynamicTool {
                    name: DYNAMIC_TOOL.into(),
                    description: "pick".into(),
                    input_schema: json!({"type": "object"}),
                }],
                ..CreateChatInput::default()
            })
            .await
            .expect("create chat");
        result.chat.id
    }

    /// Creates a chat and drives it into `state` with real transitions. The
    /// chat is owned by `self.worker`/`self.runner` in every state but `N`
    /// (a random id that does not exist). `Invalid` is made by an
    /// out-of-band write (archived while running).
    pub async fn chat_in(&self, state: ExecutionState) -> Uuid {
        self.build(state, false).await
    }

    /// Like [`Harness::chat_in`], but the chat goes through a retry
    /// (`RecordGenerationAttempt` then `RecordRetryState` with
    /// [`retry_state`]`(1)`) while it runs: `R*`, `I*` and `Invalid` (archived
    /// while running) chats hold that retry state; the others have ended the
    /// generation since.
    pub async fn chat_in_retrying(&self, state: ExecutionState) -> Uuid {
        self.build(state, true).await
    }

    async fn build(&self, state: ExecutionState, retrying: bool) -> Uuid {
        use ExecutionState as S;
        if state == S::N {
            return Uuid::new_v4();
        }
        let id = self.create().await;
        self.apply(id, |tx| {
            Box::pin(async move { tx.acquire(tx_worker(tx), tx_runner(tx)).await })
        })
        .await;
        let steps: &[Step] = match state {
            S::R0 => &[],
            S::R1 => &[Step::Queue],
            S::W => &[Step::FinishTurn],
            S::E0 => &[Step::FinishError],
            S::E1 => &[Step::Queue, Step::FinishError],
            S::I0 => &[Step::Interrupt],
            S::I1 => &[Step::Queue, Step::Interrupt],
            S::A0 => &[Step::CallTool, Step::EnterAction],
            S::A1 => &[Step::CallTool, Step::EnterAction, Step::Queue],
            S::XW => &[Step::FinishTurn, Step::Archive],
            S::XE0 => &[Step::FinishError, Step::Archive],
            S::XE1 => &[Step::Queue, Step::FinishError, Step::Archive],
            S::Invalid => &[Step::CorruptArchived],
            S::N => unreachable!(),
        };
        // The retry happens on the last running step: before the step that
        // leaves running, or at the end for R*.
        let leaves_running = steps
            .iter()
            .position(|s| {
                matches!(
                    s,
                    Step::FinishTurn
                        | Step::FinishError
                        | Step::Interrupt
                        | Step::EnterAction
                        | Step::CorruptArchived
                )
            })
            .unwrap_or(steps.len());
        for (i, step) in steps.iter().enumerate() {
            if retrying && i == leaves_running {
                self.step(id, Step::Retry).await;
            }
            self.step(id, *step).await;
        }
        if retrying && leaves_running == steps.len() {
            self.step(id, Step::Retry).await;
        }
        assert_eq!(self.state(id).await, state, "builder for {state}");
        id
    }

    async fn step(&self, id: Uuid, step: Step) {
        match step {
            Step::Queue => {
                self.apply(id, |tx| {
                    Box::pin(async move {
                        tx.send_message(SendMessageInput {
                            message: user_text("queued"),
                            busy_behavior: BusyBehavior::Queue,
                            max_queue_size: None,
                        })
                        .await
                        .map(|_| ())
                    })
                })
                .await
            }
            Step::FinishTurn => {
                self.apply(id, |tx| {
                    Box::pin(async move { tx.finish_turn().await.map(|_| ()) })
                })
                .await
            }
            Step::FinishError => {
                self.apply(id, |tx| {
                    Box::pin(async move { tx.finish_error(chat_error("boom")).await })
                })
                .await
            }
            Step::Interrupt => {
                self.apply(id, |tx| {
                    Box::pin(async move { tx.interrupt().await.map(|_| ()) })
                })
                .await
            }
            Step::CallTool => {
                self.apply(id, |tx| {
                    Box::pin(async move {
                        tx.commit_step(vec![tool_call_message(PENDING_CALL)], false)
                            .await
                            .map(|_| ())
                    })
                })
                .await
            }
            Step::EnterAction => {
                self.apply(id, |tx| {
                    Box::pin(async move { tx.enter_requires_action().await.map(|_| ()) })
                })
                .await
            }
            Step::Archive => {
                self.apply(id, |tx| {
                    Box::pin(async move { tx.set_archived(true).await })
                })
                .await
            }
            Step::Retry => {
                self.apply(id, |tx| {
                    Box::pin(async move {
                        tx.record_generation_attempt().await?;
                        tx.record_retry_state(retry_state(1)).await.map(|_| ())
                    })
                })
                .await
            }
            Step::CorruptArchived => {
                sqlx::query("UPDATE chats SET archived = true WHERE id = $1")
                    .bind(id)
                    .execute(self.pool())
                    .await
                    .expect("corrupt");
            }
        }
    }

    /// Applies `f` in one bundle and commits; panics on error.
    pub async fn apply<F>(&self, id: Uuid, f: F)
    where
        F: for<'a> FnOnce(
            &'a mut chatd_store::ChatTx,
        ) -> futures::future::BoxFuture<'a, chatd_store::StoreResult<()>>,
    {
        self.store.machine(id).update(f).await.expect("transition");
    }

    /// The chat's execution state (`N` when it does not exist).
    pub async fn state(&self, id: Uuid) -> ExecutionState {
        let row: Option<(String, bool, bool)> = sqlx::query_as(
            "SELECT status, archived, EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = c.id) FROM chats c WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(self.pool())
        .await
        .expect("state");
        chatd_core::classify(row.map(|(s, a, q)| (s.parse().expect("status"), a, q)))
    }

    /// Everything stored about a chat, as JSON: the row, its messages, its
    /// queue and its heartbeats. Equal dumps mean nothing changed.
    pub async fn dump(&self, id: Uuid) -> Value {
        sqlx::query_scalar(
            "SELECT json_build_object(
                'chat', (SELECT row_to_json(c) FROM chats c WHERE c.id = $1),
                'messages', (SELECT coalesce(json_agg(m ORDER BY m.id), '[]') FROM chat_messages m WHERE m.chat_id = $1),
                'queue', (SELECT coalesce(json_agg(q ORDER BY q.id), '[]') FROM chat_queued_messages q WHERE q.chat_id = $1),
                'heartbeats', (SELECT coalesce(json_agg(h ORDER BY h.runner_id), '[]') FROM chat_heartbeats h WHERE h.chat_id = $1))",
        )
        .bind(id)
        .fetch_one(self.pool())
        .await
        .expect("dump")
    }

    pub async fn snapshot_version(&self, id: Uuid) -> i64 {
        sqlx::query_scalar("SELECT snapshot_version FROM chats WHERE id = $1")
            .bind(id)
            .fetch_one(self.pool())
            .await
            .expect("snapshot")
    }

    pub async fn chat(&self, id: Uuid) -> chatd_store::Chat {
        sqlx::query_as("SELECT * FROM chats WHERE id = $1")
            .bind(id)
            .fetch_one(self.pool())
            .await
            .expect("chat")
    }

    pub async fn messages(&self, id: Uuid) -> Vec<chatd_store::ChatMessage> {
        sqlx::query_as("SELECT * FROM chat_messages WHERE chat_id = $1 ORDER BY id")
            .bind(id)
            .fetch_all(self.pool())
            .await
            .expect("messages")
    }

    pub async fn active_messages(&self, id: Uuid) -> Vec<chatd_store::ChatMessage> {
        self.messages(id)
            .await
            .into_iter()
            .filter(|m| !m.deleted)
            .collect()
    }

    pub async fn queue(&self, id: Uuid) -> Vec<chatd_store::QueuedMessage> {
        sqlx::query_as(
            "SELECT * FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id",
        )
        .bind(id)
        .fetch_all(self.pool())
        .await
        .expect("queue")
    }

    /// Tool calls in active history without a result.
    pub async fn outstanding_calls(&self, id: Uuid) -> Vec<chatd_core::ToolCallRef> {
        let messages = self.active_messages(id).await;
        chatd_core::outstanding_tool_calls(messages.iter().map(|m| m.content.0.as_slice()))
    }
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Queue,
    FinishTurn,
    FinishError,
    Interrupt,
    CallTool,
    EnterAction,
    Archive,
    Retry,
    CorruptArchived,
}

// The builders acquire with fixed ids derived from the chat id so that the
// closure needs no captured state.
fn tx_worker(tx: &chatd_store::ChatTx) -> Uuid {
    Uuid::from_u128(tx.chat_id().as_u128() ^ 1)
}

fn tx_runner(tx: &chatd_store::ChatTx) -> Uuid {
    Uuid::from_u128(tx.chat_id().as_u128() ^ 2)
}

/// The worker id the builders acquire a chat with.
pub fn builder_worker(chat_id: Uuid) -> Uuid {
    Uuid::from_u128(chat_id.as_u128() ^ 1)
}

/// The runner id the builders acquire a chat with.
pub fn builder_runner(chat_id: Uuid) -> Uuid {
    Uuid::from_u128(chat_id.as_u128() ^ 2)
}

pub fn user_text(text: &str) -> NewMessage {
    NewMessage::user(vec![MessagePart::text(text)])
}

pub fn assistant_text(text: &str) -> NewMessage {
    NewMessage::assistant(vec![MessagePart::text(text)])
}

/// An assistant message calling the dynamic tool with `call_id`.
pub fn tool_call_message(call_id: &str) -> NewMessage {
    NewMessage::assistant(vec![MessagePart::ToolCall {
        tool_call_id: call_id.to_owned(),
        tool_name: DYNAMIC_TOOL.to_owned(),
        args: "{\"color\":\"any\"}".to_owned(),
    }])
}

pub fn is_role(message: &chatd_store::ChatMessage, role: ChatRole) -> bool {
    message.role == role
}
