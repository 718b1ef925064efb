//! Shared fixtures: a store on a fresh database with a recording publisher,
//! and builders that drive a chat into any execution state through real
//! transitions.

#![allow(dead_code)]

use std::sync::Arc;

use chatd_core::{ChatError, ChatErrorKind, ChatRole, DynamicTool, ExecutionState, MessagePart};
use chatd_pubsub::RecordingPublisher;
use chatd_store::{
    CompleteRequiresActionInput, CreateChatInput, NewMessage, Store, StoreConfig, ToolResultInput,
};
use chatd_testkit::TestDatabase;
use chatd_testkit::store::{self, Route, StoreFixture, steps_to};
pub use chatd_testkit::store::{DYNAMIC_TOOL, PENDING_CALL, retry_state, tool_call_message};
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

impl Harness {
    pub async fn new() -> Self {
        Self::with_config(StoreConfig::default()).await
    }

    pub async fn with_config(config: StoreConfig) -> Self {
        let StoreFixture {
            db,
            store,
            published,
            owner,
        } = StoreFixture::with_config(config)
            .await
            .expect("store fixture");
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

    /// The input that creates chat `id` for `owner` with one user message
    /// `text`.
    pub fn chat_input(&self, id: Uuid, text: &str) -> CreateChatInput {
        CreateChatInput {
            id: Some(id),
            owner_id: self.owner,
            initial_messages: vec![user_text(text)],
            ..CreateChatInput::default()
        }
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
                    read_only: false,
                }],
                ..CreateChatInput::default()
            })
            .await
            .expect("create chat");
        result.chat.id
    }

    /// Creates a chat and drives it into `state` with real transitions. The
    /// chat is owned by [`store::builder_worker`]/[`store::builder_runner`] in every state but `N`
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
        if state == ExecutionState::N {
            return Uuid::new_v4();
        }
        let id = self.create().await;
        let route = Route {
            retrying,
            ..Route::default()
        };
        store::drive(&self.store, id, state, &steps_to(state, route)).await;
        id
    }

    /// Applies `f` in one bundle and commits; panics on error.
    pub async fn apply<F>(&self, id: Uuid, f: F)
    where
        F: for<'a> FnOnce(
            &'a mut chatd_store::ChatTx,
        ) -> futures::future::BoxFuture<'a, chatd_store::StoreResult<()>>,
    {
        store::apply(&self.store, id, f).await;
    }

    /// Applies `f` in one bundle and commits; returns its value and the
    /// committed row. Panics on error.
    pub async fn run<T, F>(&self, id: Uuid, f: F) -> (T, chatd_store::Chat)
    where
        F: for<'a> FnOnce(
            &'a mut chatd_store::ChatTx,
        ) -> futures::future::BoxFuture<'a, chatd_store::StoreResult<T>>,
    {
        self.store.machine(id).update(f).await.expect("transition")
    }

    /// Applies `f` in one bundle that must fail; returns the error (the
    /// bundle is rolled back).
    pub async fn rejected<T: std::fmt::Debug, F>(&self, id: Uuid, f: F) -> chatd_store::StoreError
    where
        F: for<'a> FnOnce(
            &'a mut chatd_store::ChatTx,
        ) -> futures::future::BoxFuture<'a, chatd_store::StoreResult<T>>,
    {
        self.store
            .machine(id)
            .update(f)
            .await
            .expect_err("the bundle must be rejected")
    }

    /// `CommitStep(messages)` in its own bundle; returns the inserted rows.
    pub async fn commit_step(
        &self,
        id: Uuid,
        messages: Vec<NewMessage>,
    ) -> Vec<chatd_store::ChatMessage> {
        let (inserted, _) = self
            .run(id, |tx| {
                Box::pin(async move { tx.commit_step(messages, false).await })
            })
            .await;
        inserted
    }

    /// The chat's execution state (`N` when it does not exist).
    pub async fn state(&self, id: Uuid) -> ExecutionState {
        store::execution_state(self.pool(), id).await
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
        store::snapshot_version(self.pool(), id).await
    }

    pub async fn chat(&self, id: Uuid) -> chatd_store::Chat {
        store::chat_row(self.pool(), id).await
    }

    pub async fn messages(&self, id: Uuid) -> Vec<chatd_store::ChatMessage> {
        store::message_rows(self.pool(), id).await
    }

    pub async fn active_messages(&self, id: Uuid) -> Vec<chatd_store::ChatMessage> {
        let mut messages = self.messages(id).await;
        messages.retain(|m| !m.deleted);
        messages
    }

    pub async fn queue(&self, id: Uuid) -> Vec<chatd_store::QueuedMessage> {
        store::queue_rows(self.pool(), id).await
    }

    /// Tool calls in active history without a result.
    pub async fn outstanding_calls(&self, id: Uuid) -> Vec<chatd_core::ToolCallRef> {
        let messages = self.active_messages(id).await;
        chatd_core::outstanding_tool_calls(messages.iter().map(|m| m.content.0.as_slice()))
    }
}

/// The answer to the pending call [`PENDING_CALL`]: JSON `output`, no error.
pub fn pending_call_answer(output: &str) -> CompleteRequiresActionInput {
    CompleteRequiresActionInput {
        results: vec![ToolResultInput::output(PENDING_CALL, output, false)],
        ..CompleteRequiresActionInput::default()
    }
}

pub fn user_text(text: &str) -> NewMessage {
    NewMessage::user(vec![MessagePart::text(text)])
}

pub fn assistant_text(text: &str) -> NewMessage {
    NewMessage::assistant(vec![MessagePart::text(text)])
}

pub fn is_role(message: &chatd_store::ChatMessage, role: ChatRole) -> bool {
    message.role == role
}

/// The tree invariants of migration `0017_branches.sql` (API.md "Branches,
/// regenerate and fork"), whatever raced before: one active leaf (the
/// newest row on the active branch, `None` only for a chat with no rows);
/// every parent in the same chat and older than its child; the walk from the
/// active leaf to the root is exactly the rows not `deleted` (rows an edit
/// deleted before branches existed, `detached`, are in no tree); every
/// row's `visible_parent_id` is its nearest client-visible ancestor; every
/// client-visible row's `sibling_ids` are the client-visible rows with the
/// same visible parent (empty when it is the only one).
pub async fn assert_tree(h: &Harness, id: Uuid, context: &str) {
    use std::collections::{BTreeMap, BTreeSet};
    let chat = h.chat(id).await;
    let rows: Vec<(i64, Option<i64>, bool, bool, String, Vec<i64>)> = sqlx::query_as(
        "SELECT id, parent_id, deleted, detached, visibility, sibling_ids
         FROM chat_messages WHERE chat_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(h.pool())
    .await
    .expect("tree rows");
    let by_id: BTreeMap<i64, &(i64, Option<i64>, bool, bool, String, Vec<i64>)> =
        rows.iter().map(|r| (r.0, r)).collect();
    let active: BTreeSet<i64> = rows.iter().filter(|r| !r.2).map(|r| r.0).collect();
    assert_eq!(
        chat.active_leaf_id,
        active.iter().next_back().copied(),
        "{context}: the active leaf is the newest active row"
    );
    for r in &rows {
        if let Some(parent) = r.1 {
            let p = by_id.get(&parent).unwrap_or_else(|| {
                panic!(
                    "{context}: row {} has parent {parent} outside its chat",
                    r.0
                )
            });
            assert!(
                parent < r.0,
                "{context}: parent {parent} is newer than {}",
                r.0
            );
            assert!(!p.3, "{context}: row {} hangs from detached {parent}", r.0);
        }
    }
    let mut walked = BTreeSet::new();
    let mut at = chat.active_leaf_id;
    while let Some(node) = at {
        assert!(walked.insert(node), "{context}: a cycle at {node}");
        at = by_id[&node].1;
    }
    assert_eq!(
        walked, active,
        "{context}: the active branch is the rows not deleted"
    );
    // The tree clients see: each row hangs from its nearest visible
    // ancestor (`visible_parent_id`); siblings share it.
    let visible_parent: BTreeMap<i64, Option<i64>> = sqlx::query_as::<_, (i64, Option<i64>)>(
        "SELECT id, visible_parent_id FROM chat_messages WHERE chat_id = $1",
    )
    .bind(id)
    .fetch_all(h.pool())
    .await
    .expect("visible parents")
    .into_iter()
    .collect();
    let mut shown_as: BTreeMap<i64, Option<i64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| !r.3) {
        let expected =
            r.1.and_then(|p| shown_as.get(&p).copied().unwrap_or(Some(p)));
        assert_eq!(
            visible_parent[&r.0], expected,
            "{context}: visible parent of {}",
            r.0
        );
        shown_as.insert(r.0, if r.4 != "model" { Some(r.0) } else { expected });
    }
    let mut children: BTreeMap<Option<i64>, Vec<i64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| !r.3 && r.4 != "model") {
        children.entry(visible_parent[&r.0]).or_default().push(r.0);
    }
    for r in rows.iter().filter(|r| !r.3 && r.4 != "model") {
        let siblings = &children[&visible_parent[&r.0]];
        let expected = if siblings.len() > 1 {
            siblings.clone()
        } else {
            vec![]
        };
        assert_eq!(r.5, expected, "{context}: sibling_ids of {}", r.0);
    }
}
