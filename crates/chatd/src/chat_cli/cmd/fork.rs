//! `chatd chat fork CHAT [MESSAGE]`: `POST /chats/{chat}/fork` (API.md
//! "Branches, regenerate and fork").

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// Copy a chat into a new one, "Fork of TITLE": its active branch up to
/// MESSAGE (default: all of it), with the same model, tools and system
/// prompt. The new chat is idle; its id is printed (where it was forked
/// from goes to standard error).
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The chat id.
    chat: Uuid,
    /// The last message of the active branch to copy (default: its
    /// newest).
    message: Option<i64>,
    /// Print the new chat as the API's JSON instead of its id.
    #[arg(long)]
    json: bool,
}

impl ForkArgs {
    /// Forks the chat and prints the new chat's id (or its JSON).
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; an answer without an
    /// id; standard output cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let body = match self.message {
            Some(id) => json!({ "message_id": id }),
            None => json!({}),
        };
        let chat: Value = session
            .client
            .call(
                Method::POST,
                &format!("/chats/{}/fork", self.chat),
                Some(&body),
            )
            .await?;
        if self.json {
            stdout(format!("{chat}\n"))?;
            return Ok(ExitCode::SUCCESS);
        }
        let fork: wire::Chat = serde_json::from_value(chat).context("decoding the new chat")?;
        if let Some(from) = fork.forked_from {
            eprintln!(
                "forked {} up to message {}: {}",
                from.chat_id, from.message_id, fork.title
            );
        }
        stdout(format!("{}\n", fork.id))?;
        Ok(ExitCode::SUCCESS)
    }
}
