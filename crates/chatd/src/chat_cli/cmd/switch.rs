//! `chatd chat switch CHAT MESSAGE`: `POST /chats/{chat}/branches/activate`
//! (API.md "Branches, regenerate and fork").

use std::process::ExitCode;

use clap::Args;
use reqwest::Method;
use serde_json::json;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// Make the branch through MESSAGE the active one (`branches` lists
/// them): the chat then shows, and the model reads, that branch, up to
/// its newest message, which is printed. Only an idle chat switches
/// (waiting, or an error the turn ended in); a busy one is a 409.
#[derive(Debug, Args)]
pub struct SwitchArgs {
    /// The chat id.
    chat: Uuid,
    /// A message of the branch to activate (any of its messages; the
    /// branch runs to the newest message under it).
    message: i64,
}

impl SwitchArgs {
    /// Activates the branch and prints the id of its newest message (the
    /// chat's `active_leaf_id`).
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let body = json!({ "message_id": self.message });
        let chat: wire::Chat = session
            .client
            .call(
                Method::POST,
                &format!("/chats/{}/branches/activate", self.chat),
                Some(&body),
            )
            .await?;
        let leaf = chat
            .active_leaf_id
            .map_or_else(|| "none".to_owned(), |id| id.to_string());
        stdout(format!("{leaf}\n"))?;
        Ok(ExitCode::SUCCESS)
    }
}
