//! `chatd chat regenerate CHAT [MESSAGE]`: `POST
//! /chats/{chat}/messages/{message}/regenerate`, then the new answer
//! streamed (API.md "Branches, regenerate and fork").

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Args;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::client::Client;
use crate::chat_cli::follow::{Until, follow};
use crate::chat_cli::output::reply_renderer;
use crate::chat_cli::wire;

/// How many messages one page of the search for the last answer reads.
const PAGE: u32 = 50;

/// Answer again: a new answer to the same user message, on a new branch
/// (the old answer stays on its own branch: `branches` lists it, `switch`
/// goes back to it). Streams the new answer like `send`.
///
/// Only an idle chat (waiting, or error) regenerates; a busy one is a 409.
#[derive(Debug, Args)]
pub struct RegenerateArgs {
    /// The chat id.
    chat: Uuid,
    /// The assistant message to answer again (default: the last one of
    /// the active branch).
    message: Option<i64>,
    /// Do not wait for the new answer.
    #[arg(long)]
    no_watch: bool,
}

impl RegenerateArgs {
    /// Regenerates the message, says so on standard error and, unless
    /// `--no-watch`, streams the new answer.
    ///
    /// # Errors
    /// No assistant message to regenerate; as
    /// [`crate::chat_cli::client::Client::call`] and [`follow`].
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let client = &session.client;
        let chat = self.chat.to_string();
        let message = match self.message {
            Some(id) => id,
            None => last_answer(client, &chat)
                .await?
                .context("the chat's active branch has no assistant message to regenerate")?,
        };
        // The new answer is newer than every message now: follow from
        // here; what the stream sends again (the new branch after a
        // `history_reset`) up to here is not printed.
        let before = client.newest_message_id(&chat).await?;
        let _: wire::Chat = client
            .call(
                Method::POST,
                &format!("/chats/{chat}/messages/{message}/regenerate"),
                None,
            )
            .await?;
        eprintln!("regenerating (message {message})");
        if self.no_watch {
            return Ok(ExitCode::SUCCESS);
        }
        let renderer = reply_renderer(None, &chat, session.hint_url())
            .with_own_message(before)
            .with_history_through(before);
        follow(client, &chat, before, renderer, Until::Idle).await
    }
}

/// The id of the newest assistant message of `chat`'s active branch
/// (`GET /chats/{chat}/messages`, newest pages first), `None` when it has
/// none.
///
/// # Errors
/// As [`Client::call`]; a page that is not the API's.
async fn last_answer(client: &Client, chat: &str) -> anyhow::Result<Option<i64>> {
    let mut path = format!("/chats/{chat}/messages?limit={PAGE}");
    loop {
        let page: Value = client.call(Method::GET, &path, None).await?;
        let Some(messages) = page["messages"].as_array() else {
            bail!("the messages page has no `messages`");
        };
        if let Some(id) = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "assistant")
            .and_then(|m| m["id"].as_i64())
        {
            return Ok(Some(id));
        }
        let oldest = messages.first().and_then(|m| m["id"].as_i64());
        match oldest {
            Some(oldest) if page["has_more"] == true => {
                path = format!("/chats/{chat}/messages?limit={PAGE}&before_id={oldest}");
            }
            _ => return Ok(None),
        }
    }
}
