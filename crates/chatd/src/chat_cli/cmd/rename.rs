//! `chatd chat rename CHAT TITLE`: `PATCH /chats/{chat}` `{title}` (API.md
//! "Chat routes").

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// Rename a chat (titles are 1 to 200 characters). Archived chats can be
/// renamed too.
#[derive(Debug, Args)]
pub struct RenameArgs {
    /// The chat id.
    chat: Uuid,
    /// The new title; several words are joined by spaces.
    #[arg(required = true, value_name = "TITLE")]
    title: Vec<String>,
}

impl RenameArgs {
    /// Renames the chat and prints `renamed CHAT: TITLE` (the title as the
    /// server stored it).
    ///
    /// # Errors
    /// A blank title (nothing is sent); as
    /// [`crate::chat_cli::client::Client::call`] (a title over 200
    /// characters is the server's `400` naming `title`); standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let title = self.title.join(" ");
        anyhow::ensure!(!title.trim().is_empty(), "the title is empty");
        let chat: Value = session
            .client
            .call(
                Method::PATCH,
                &format!("/chats/{}", self.chat),
                Some(&json!({ "title": title })),
            )
            .await?;
        let chat: wire::Chat = serde_json::from_value(chat).context("decoding the chat")?;
        stdout(format!("renamed {}: {}\n", chat.id, chat.title))?;
        Ok(ExitCode::SUCCESS)
    }
}
