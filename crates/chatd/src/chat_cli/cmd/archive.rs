//! `chatd chat archive CHAT` and `chatd chat unarchive CHAT`: `PATCH
//! /chats/{chat}` `{archived}` (API.md "Chat routes" and "Details that
//! clients and tests rely on").

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// Archive a chat (an idle root chat; its sub-agent chats go with it): it
/// leaves `list` for `list --archived` and takes no messages until it is
/// unarchived.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// The chat id.
    chat: Uuid,
}

/// Unarchive a chat: it is back in `list` and takes messages again.
#[derive(Debug, Args)]
pub struct UnarchiveArgs {
    /// The chat id.
    chat: Uuid,
}

impl ArchiveArgs {
    /// Archives the chat and prints `archived CHAT: TITLE`.
    ///
    /// # Errors
    /// As [`set_archived`].
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        set_archived(session, self.chat, true).await
    }
}

impl UnarchiveArgs {
    /// Unarchives the chat and prints `unarchived CHAT: TITLE`.
    ///
    /// # Errors
    /// As [`set_archived`].
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        set_archived(session, self.chat, false).await
    }
}

/// `PATCH /chats/{chat}` `{archived}`, then `archived|unarchived CHAT:
/// TITLE` on standard output.
///
/// # Errors
/// As [`crate::chat_cli::client::Client::call`]: a busy chat or one
/// already archived is the server's `409`, a sub-agent chat its `400`;
/// standard output cannot be written.
async fn set_archived(session: &Session, chat: Uuid, archived: bool) -> anyhow::Result<ExitCode> {
    let answer: Value = session
        .client
        .call(
            Method::PATCH,
            &format!("/chats/{chat}"),
            Some(&json!({ "archived": archived })),
        )
        .await?;
    let chat: wire::Chat = serde_json::from_value(answer).context("decoding the chat")?;
    let done = if archived { "archived" } else { "unarchived" };
    stdout(format!("{done} {}: {}\n", chat.id, chat.title))?;
    Ok(ExitCode::SUCCESS)
}
