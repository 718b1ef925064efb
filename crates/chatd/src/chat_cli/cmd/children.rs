//! `chatd chat children CHAT`: the chats a chat spawned (sub-agents),
//! `GET /chats?parent_id=` (unarchived, then archived).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

use super::Session;
use super::list::format_chat_list;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// List a chat's children (sub-agents), newest first: id, status,
/// updated_at, title; archived (closed) ones follow, marked
/// `[archived]`.
#[derive(Debug, Args)]
pub struct ChildrenArgs {
    /// The parent chat id.
    chat: Uuid,
    /// Print the API's JSON arrays (unarchived, then archived) as one
    /// array instead.
    #[arg(long)]
    json: bool,
}

impl ChildrenArgs {
    /// Prints the unarchived children, then the archived (closed) ones
    /// marked `[archived]`.
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let mut all = Vec::new();
        for archived in [false, true] {
            let path = format!(
                "/chats?parent_id={}&archived={archived}&limit=100",
                self.chat
            );
            let page: Value = session.client.call(Method::GET, &path, None).await?;
            all.extend(page.as_array().cloned().unwrap_or_default());
        }
        if self.json {
            stdout(format!("{}\n", Value::Array(all)))?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut chats: Vec<wire::Chat> =
            serde_json::from_value(Value::Array(all.clone())).context("decoding the children")?;
        for (chat, raw) in chats.iter_mut().zip(&all) {
            if raw["archived"] == true {
                chat.title.push_str(" [archived]");
            }
        }
        stdout(format_chat_list(&chats))?;
        Ok(ExitCode::SUCCESS)
    }
}
