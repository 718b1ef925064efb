//! `chatd chat clear-context CHAT`: `POST /chats/{chat}/clear-context`
//! (API.md "Context management").

use std::process::ExitCode;

use clap::Args;
use reqwest::Method;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// Clear an idle chat's context: the model sees nothing before this
/// point (the messages stay visible). Prints the context's new size.
#[derive(Debug, Args)]
pub struct ClearContextArgs {
    /// The chat id.
    chat: Uuid,
}

impl ClearContextArgs {
    /// Clears the context and prints its new size.
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let chat: wire::Chat = session
            .client
            .call(
                Method::POST,
                &format!("/chats/{}/clear-context", self.chat),
                None,
            )
            .await?;
        let size = chat
            .context
            .as_ref()
            .map(wire::describe_context)
            .unwrap_or_default();
        stdout(format!("context cleared; {size}\n"))?;
        Ok(ExitCode::SUCCESS)
    }
}
