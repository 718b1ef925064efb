//! `chatd chat interrupt CHAT`: `POST /chats/{chat}/interrupt`.

use std::process::ExitCode;

use clap::Args;
use reqwest::Method;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// Interrupt a chat's running turn; prints the new status.
#[derive(Debug, Args)]
pub struct InterruptArgs {
    /// The chat id.
    chat: Uuid,
}

impl InterruptArgs {
    /// Interrupts the chat and prints its new status.
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let chat: wire::Chat = session
            .client
            .call(
                Method::POST,
                &format!("/chats/{}/interrupt", self.chat),
                None,
            )
            .await?;
        stdout(format!("{}\n", chat.status))?;
        Ok(ExitCode::SUCCESS)
    }
}
