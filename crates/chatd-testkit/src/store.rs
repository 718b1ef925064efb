//! Fixtures over a [`chatd_store::Store`], shared by the doc examples of
//! chatd-store and the integration tests of chatd-store and chatd-api:
//!
//! - [`StoreFixture`]: a store on a fresh database with a recording
//!   publisher and one member user, and a running chat when asked;
//! - the chat-state builder: [`steps_to`] lists the real transitions
//!   ([`Step`]) that take a new `R0` chat into any execution state
//!   (spec `chatd-architecture.md`, "Execution state transition diagram"),
//!   [`drive`] and [`run_step`] apply them;
//! - small readers ([`execution_state`], [`snapshot_version`],
//!   [`chat_row`], [`message_rows`], [`queue_rows`]) that look at the rows
//!   directly rather than through the code under test.

use std::sync::Arc;

use chatd_core::{BusyBehavior, ChatError, ChatErrorKind, ExecutionState, MessagePart, RetryState};
use chatd_pubsub::RecordingPublisher;
use chatd_store::{
    Chat, ChatMessage, ChatTx, CreateChatInput, CreateChatResult, MIGRATOR, NewMessage,
    QueuedMessage, SendMessageInput, Store, StoreConfig, StoreResult,
};
use futures::future::BoxFuture;
use sqlx::PgPool;
use uuid::Uuid;

use crate::TestDatabase;

/// The tool call id the `A*` builders leave pending.
pub const PENDING_CALL: &str = "call-1";
/// The dynamic tool the `A*` builders call.
pub const DYNAMIC_TOOL: &str = "pick_color";

/// A [`Store`] on its own database, the publisher it records into, and the
/// member `alice` (`owner`) who owns the chats it creates.
pub struct StoreFixture {
    /// The database; dropped with the fixture.
    pub db: TestDatabase,
    /// The store under test.
    pub store: Store,
    /// Every publication of `store`.
    pub published: Arc<RecordingPublisher>,
    /// The user `alice`, a member.
    pub owner: Uuid,
}

impl StoreFixture {
    /// A fixture with the default [`StoreConfig`].
    ///
    /// # Errors
    /// When the database cannot be created or the user inserted.
    pub async fn new() -> anyhow::Result<Self> {
        Self::with_config(StoreConfig::default()).await
    }

    /// A fixture whose store uses `config`.
    ///
    /// # Errors
    /// When the database cannot be created or the user inserted.
    pub async fn with_config(config: StoreConfig) -> anyhow::Result<Self> {
        let db = TestDatabase::new(&MIGRATOR).await?;
        let published = Arc::new(RecordingPublisher::new());
        let store = Store::with_config(db.pool().clone(), published.clone(), config);
        let owner = chatd_store::users::insert(db.pool(), "alice", chatd_core::Role::Member)
            .await?
            .id;
        Ok(Self {
            db,
            store,
            published,
            owner,
        })
    }

    /// The database pool.
    pub fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// Creates a running chat (`R0`) owned by `owner` whose history is one
    /// user message `text`.
    ///
    /// # Errors
    /// When the transition fails.
    pub async fn create_chat(&self, text: &str) -> anyhow::Result<CreateChatResult> {
        let input = CreateChatInput {
            owner_id: self.owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text(text)])],
            ..CreateChatInput::default()
        };
        Ok(self.store.create_chat(input).await?)
    }
}

/// One builder step: a real transition of the store, or for the `Corrupt*`
/// steps the out-of-band write that makes an `Invalid` chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `SendMessage("queued", queue)`.
    Queue,
    /// `CommitStep` of the assistant text "hi there".
    Reply,
    /// `FinishTurn`.
    FinishTurn,
    /// `FinishError` with a `generic`, not retryable "boom".
    FinishError,
    /// `Interrupt`.
    Interrupt,
    /// `CommitStep` of an assistant call of [`DYNAMIC_TOOL`] with id
    /// [`PENDING_CALL`].
    CallTool,
    /// `EnterRequiresAction`.
    EnterAction,
    /// `SetArchived(true)`.
    Archive,
    /// `RecordGenerationAttempt`, then `RecordRetryState` with
    /// [`retry_state`]`(1)`.
    Retry,
    /// Out of band: `archived = true` (on a running chat: `Invalid`).
    CorruptArchived,
    /// Out of band: `status = 'waiting'` (with a queue: `Invalid`).
    CorruptWaiting,
}

/// How [`steps_to`] builds the states where the test suites differ.
#[derive(Debug, Clone, Copy, Default)]
pub struct Route {
    /// Commit an assistant reply ([`Step::Reply`]) before `FinishTurn`.
    pub reply_before_finish: bool,
    /// Make `Invalid` a waiting chat with a queue; otherwise a chat archived
    /// while running.
    pub invalid_waiting_with_queue: bool,
    /// Go through a retry ([`Step::Retry`]) while running: `R*`, `I*` and
    /// `Invalid` chats hold that retry state, the others have ended the
    /// generation since.
    pub retrying: bool,
}

/// The steps that take a new, acquired `R0` chat into `state`.
///
/// # Panics
/// For `N`, which is not a row state.
pub fn steps_to(state: ExecutionState, route: Route) -> Vec<Step> {
    use ExecutionState as S;
    use Step::*;
    let finish: &[Step] = if route.reply_before_finish {
        &[Reply, FinishTurn]
    } else {
        &[FinishTurn]
    };
    let invalid: &[Step] = if route.invalid_waiting_with_queue {
        &[Queue, CorruptWaiting]
    } else {
        &[CorruptArchived]
    };
    let steps: Vec<Step> = match state {
        S::R0 => vec![],
        S::R1 => vec![Queue],
        S::W => finish.to_vec(),
        S::E0 => vec![FinishError],
        S::E1 => vec![Queue, FinishError],
        S::I0 => vec![Interrupt],
        S::I1 => vec![Queue, Interrupt],
        S::A0 => vec![CallTool, EnterAction],
        S::A1 => vec![CallTool, EnterAction, Queue],
        S::XW => [finish, &[Archive]].concat(),
        S::XE0 => vec![FinishError, Archive],
        S::XE1 => vec![Queue, FinishError, Archive],
        S::Invalid => invalid.to_vec(),
        S::N => panic!("N is not a row state"),
    };
    if !route.retrying {
        return steps;
    }
    // The retry happens on the last running step: before the step that
    // leaves running, or at the end.
    let leaves_running = steps
        .iter()
        .position(|s| {
            matches!(
                s,
                FinishTurn | FinishError | Interrupt | EnterAction | CorruptArchived
            )
        })
        .unwrap_or(steps.len());
    let mut retrying = steps;
    retrying.insert(leaves_running, Retry);
    retrying
}

/// The worker id the builders acquire chat `chat_id` with.
pub fn builder_worker(chat_id: Uuid) -> Uuid {
    Uuid::from_u128(chat_id.as_u128() ^ 1)
}

/// The runner id the builders acquire chat `chat_id` with.
pub fn builder_runner(chat_id: Uuid) -> Uuid {
    Uuid::from_u128(chat_id.as_u128() ^ 2)
}

/// Acquires chat `id` as [`builder_worker`]/[`builder_runner`], applies
/// `steps` in order, and checks that the chat landed in `state`.
///
/// # Panics
/// When a step fails or the chat lands elsewhere.
pub async fn drive(store: &Store, id: Uuid, state: ExecutionState, steps: &[Step]) {
    apply(store, id, |tx| {
        Box::pin(async move {
            let chat = tx.chat_id();
            tx.acquire(builder_worker(chat), builder_runner(chat)).await
        })
    })
    .await;
    for step in steps {
        run_step(store, id, *step).await;
    }
    assert_eq!(
        execution_state(store.pool(), id).await,
        state,
        "builder for {state}"
    );
}

/// Applies one builder step to chat `id`.
///
/// # Panics
/// When the step fails.
pub async fn run_step(store: &Store, id: Uuid, step: Step) {
    if let Step::CorruptArchived | Step::CorruptWaiting = step {
        let sql = if step == Step::CorruptArchived {
            "UPDATE chats SET archived = true WHERE id = $1"
        } else {
            "UPDATE chats SET status = 'waiting' WHERE id = $1"
        };
        sqlx::query(sql)
            .bind(id)
            .execute(store.pool())
            .await
            .expect("corrupt");
        // Written without a bump: the replica's guess of the row is wrong
        // now (chatd_store::row_cache).
        store.row_cache().remove(id);
        return;
    }
    apply(store, id, move |tx| {
        Box::pin(async move {
            match step {
                Step::Queue => tx
                    .send_message(SendMessageInput {
                        message: NewMessage::user(vec![MessagePart::text("queued")]),
                        busy_behavior: BusyBehavior::Queue,
                        max_queue_size: None,
                    })
                    .await
                    .map(|_| ()),
                Step::Reply => tx
                    .commit_step(
                        vec![NewMessage::assistant(vec![MessagePart::text("hi there")])],
                        false,
                    )
                    .await
                    .map(|_| ()),
                Step::FinishTurn => tx.finish_turn().await.map(|_| ()),
                Step::FinishError => {
                    let error = ChatError::new(ChatErrorKind::Generic, "boom", false);
                    tx.finish_error(error).await
                }
                Step::Interrupt => tx.interrupt().await.map(|_| ()),
                Step::CallTool => tx
                    .commit_step(vec![tool_call_message(PENDING_CALL)], false)
                    .await
                    .map(|_| ()),
                Step::EnterAction => tx.enter_requires_action().await.map(|_| ()),
                Step::Archive => tx.set_archived(true).await,
                Step::Retry => {
                    tx.record_generation_attempt().await?;
                    tx.record_retry_state(retry_state(1)).await.map(|_| ())
                }
                Step::CorruptArchived | Step::CorruptWaiting => unreachable!("written above"),
            }
        })
    })
    .await;
}

/// Applies `f` to chat `id` in one bundle and commits.
///
/// # Panics
/// When the transition fails.
pub async fn apply<F>(store: &Store, id: Uuid, f: F)
where
    F: for<'a> FnOnce(&'a mut ChatTx) -> BoxFuture<'a, StoreResult<()>>,
{
    store.machine(id).update(f).await.expect("transition");
}

/// The chat's execution state read from its row (`N` when it does not
/// exist).
///
/// # Panics
/// When the query fails.
pub async fn execution_state(pool: &PgPool, id: Uuid) -> ExecutionState {
    let row: Option<(String, bool, bool)> = sqlx::query_as(
        "SELECT status, archived, EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = c.id) FROM chats c WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
    .expect("state");
    chatd_core::classify(row.map(|(s, a, q)| (s.parse().expect("status"), a, q)))
}

/// The chat's `snapshot_version`.
///
/// # Panics
/// When the chat does not exist.
pub async fn snapshot_version(pool: &PgPool, id: Uuid) -> i64 {
    sqlx::query_scalar("SELECT snapshot_version FROM chats WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("snapshot")
}

/// The chat's row.
///
/// # Panics
/// When the chat does not exist.
pub async fn chat_row(pool: &PgPool, id: Uuid) -> Chat {
    sqlx::query_as("SELECT * FROM chats WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("chat")
}

/// Every message row of the chat, soft-deleted ones included, by id.
///
/// # Panics
/// When the query fails.
pub async fn message_rows(pool: &PgPool, id: Uuid) -> Vec<ChatMessage> {
    sqlx::query_as("SELECT * FROM chat_messages WHERE chat_id = $1 ORDER BY id")
        .bind(id)
        .fetch_all(pool)
        .await
        .expect("messages")
}

/// The chat's queue, head first.
///
/// # Panics
/// When the query fails.
pub async fn queue_rows(pool: &PgPool, id: Uuid) -> Vec<QueuedMessage> {
    sqlx::query_as("SELECT * FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id")
        .bind(id)
        .fetch_all(pool)
        .await
        .expect("queue")
}

/// An assistant message calling [`DYNAMIC_TOOL`] with `call_id`.
pub fn tool_call_message(call_id: &str) -> NewMessage {
    NewMessage::assistant(vec![MessagePart::ToolCall {
        tool_call_id: call_id.to_owned(),
        tool_name: DYNAMIC_TOOL.to_owned(),
        args: "{\"color\":\"any\"}".to_owned(),
    }])
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
