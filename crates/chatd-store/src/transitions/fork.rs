//! Forking a chat (API.md "Branches, regenerate and fork": `POST
//! /chats/{chat}/fork`): `CreateChat` (`N → W`) of a new chat whose history
//! is a copy of another chat's active branch up to a message.

use chatd_core::{ChatStatus, ExecutionState, StateError, Transition, matrix};
use chatd_pubsub::PublishBuffer;
use uuid::Uuid;

use crate::bundle::publish::{commit_and_flush, enqueue_publications};
use crate::bundle::record_transition;
use crate::error::StoreResult;
use crate::models::{Chat, CreateChatInput};
use crate::queries::chats::LockMode;
use crate::queries::files::Storage;
use crate::queries::{self};
use crate::store::Store;

/// Input of [`Store::fork_chat`].
#[derive(Debug, Clone)]
pub struct ForkInput {
    /// The chat to fork.
    pub source_chat_id: Uuid,
    /// Who forks it: must own it (else `ChatNotFound`, as for a chat the
    /// caller cannot see); the fork is theirs.
    pub owner_id: Uuid,
    /// The last message to copy: a client-visible message of the source's
    /// active branch. `None`: the whole active branch.
    pub message_id: Option<i64>,
    /// The owner's storage quota when they have no override, in bytes
    /// (the fork copies the files its messages name).
    pub default_quota: i64,
}

/// What [`Store::fork_chat`] did.
#[derive(Debug, Clone)]
pub enum ForkOutcome {
    /// The new chat, committed, in `waiting`.
    Forked(Box<Chat>),
    /// Copying the files the copied messages name would take the owner
    /// over their storage quota; nothing was created. The storage as read
    /// under the owner's storage lock, and the bytes the copy needs.
    OverQuota(Storage, i64),
}

impl Store {
    /// Forks chat `input.source_chat_id` at `input.message_id`: in one
    /// transaction, with the source's row share-locked (no transition of
    /// it commits meanwhile), creates an idle chat (`N → W`) of the same
    /// owner titled "Fork of <title>", with the source's model config,
    /// reasoning effort, tools, MCP servers, plan mode and sub-agent
    /// setting, copies the active branch up to the message (system prompt
    /// and context boundaries included, so the fork's model context is the
    /// source's there) as one branch, copies the files those messages name
    /// (under the owner's storage lock and quota), records `forked_from`,
    /// and brings the fork's context figures up to date. The source is not
    /// changed. Publishes the new chat's `chat:update` after the commit.
    ///
    /// # Errors
    /// `ChatNotFound` when the source does not exist or is not the owner's;
    /// `MessageNotFound` when `message_id` is not a client-visible message
    /// of its active branch; `InvalidInput` (`message_id`) when the source
    /// has no message; database errors.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::ChatStatus;
    /// use chatd_store::{ForkInput, ForkOutcome};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (store, owner) = (&fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// let input = ForkInput {
    ///     source_chat_id: chat.id,
    ///     owner_id: owner,
    ///     message_id: None,
    ///     default_quota: 1 << 30,
    /// };
    /// let ForkOutcome::Forked(fork) = store.fork_chat(input).await? else { panic!("no files") };
    /// assert_eq!(fork.status, ChatStatus::Waiting);
    /// assert_eq!(fork.title, format!("Fork of {}", chat.title));
    /// assert_eq!(fork.forked_from_chat_id, Some(chat.id));
    /// assert_eq!(fork.forked_from_message_id, Some(created.initial_messages[0].id));
    /// assert_eq!(fork.message_count, chat.message_count);
    /// # Ok(()) }
    /// ```
    ///
    /// More in `tests/it/branches.rs`.
    pub async fn fork_chat(&self, input: ForkInput) -> StoreResult<ForkOutcome> {
        let mut tx = queries::begin(&self.pool).await?;
        let source =
            queries::chats::select(&mut *tx, input.source_chat_id, LockMode::Share).await?;
        let source = match source {
            Some(chat) if chat.owner_id == input.owner_id => chat,
            _ => return Err(StateError::ChatNotFound.into()),
        };
        let through_id = match input.message_id {
            Some(id) => {
                if !queries::messages::is_active_visible(&mut tx, source.id, id).await? {
                    return Err(StateError::MessageNotFound { message_id: id }.into());
                }
                id
            }
            None => match source.active_leaf_id {
                Some(id) => id,
                None => {
                    return Err(StateError::InvalidInput {
                        field: "message_id",
                        detail: "the chat has no message to fork".into(),
                    }
                    .into());
                }
            },
        };
        // The fork copies the files its messages attach and the source's
        // committed workspace as it is now (API.md "Workspaces and
        // provider-hosted tools": "A fork copies it").
        let file_bytes = queries::files::fork_bytes(&mut tx, source.id, through_id).await?;
        let bytes = file_bytes + source.workspace_bytes.unwrap_or(0);
        if bytes > 0 {
            let storage =
                queries::files::lock_storage(&mut tx, input.owner_id, input.default_quota)
                    .await?
                    .ok_or(StateError::ChatNotFound)?;
            if !storage.fits(bytes) {
                return Ok(ForkOutcome::OverQuota(storage, bytes));
            }
        }
        let id = Uuid::new_v4();
        let create = CreateChatInput {
            owner_id: input.owner_id,
            title: Some(fork_title(&source.title)),
            last_model_config_id: source.last_model_config_id,
            last_reasoning_effort: source.last_reasoning_effort.clone(),
            dynamic_tools: source.dynamic_tools.clone(),
            mcp_server_ids: source.mcp_server_ids.clone(),
            plan_mode: source.plan_mode.clone(),
            subagents: source.subagents,
            workspace: source.workspace,
            initial_status: Some(ChatStatus::Waiting),
            ..CreateChatInput::default()
        };
        queries::chats::insert(&mut tx, id, None, 0, ChatStatus::Waiting, &create).await?;
        queries::chats::set_forked_from(&mut tx, id, source.id, through_id).await?;
        if source.workspace_bytes.is_some() {
            queries::workspaces::copy_for_fork(&mut tx, source.id, id).await?;
        }
        let file_map = if file_bytes > 0 {
            queries::files::copy_for_fork(&mut tx, source.id, through_id, id).await?
        } else {
            serde_json::json!({})
        };
        queries::messages::copy_branch(&mut tx, source.id, through_id, id, &file_map).await?;
        // A fork waits: a call the copy ends in (the source waited for it)
        // is answered, as any transition leaving requires_action answers it.
        let tail = queries::messages::tail_contents(&mut *tx, id).await?;
        for call in chatd_core::outstanding_tool_calls(tail.iter().map(Vec::as_slice)) {
            let result =
                crate::models::NewMessage::tool(vec![chatd_core::MessagePart::synthetic_result(
                    &call,
                    chatd_core::CANCELLED_TOOL_RESULT,
                )]);
            queries::messages::insert(&mut tx, id, &result, None).await?;
        }
        let mut facts = queries::chats::select_facts_with(&mut tx, id, false)
            .await?
            .ok_or(StateError::ChatNotFound)?;
        facts.chat = queries::messages::refresh_context(&mut tx, id).await?;
        let buffer = PublishBuffer::new(self.publisher.clone());
        let row = facts.clone();
        let chat = enqueue_publications(facts, &buffer, &self.config);
        matrix::check_landing(
            Transition::CreateChat,
            ExecutionState::N,
            chat.execution_state(false),
        )
        .map_err(StateError::from)?;
        commit_and_flush(tx, buffer).await?;
        self.row_cache.put(row);
        record_transition(Transition::CreateChat, "ok");
        Ok(ForkOutcome::Forked(Box::new(chat)))
    }
}

/// "Fork of <title>", cut to the title limit (200 characters).
fn fork_title(title: &str) -> String {
    let title: String = format!("Fork of {title}").chars().take(200).collect();
    title
}
