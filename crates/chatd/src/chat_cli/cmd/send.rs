//! `chatd chat send CHAT`: `POST /chats/{chat}/messages` with a busy
//! behaviour, then the reply to this message streamed (API.md "Busy
//! behaviours and the queue").

use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use reqwest::Method;
use serde_json::json;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::follow::{Until, follow};
use crate::chat_cli::input::message_content;
use crate::chat_cli::output::reply_renderer;
use crate::chat_cli::wire::SendResponse;

/// Send a message to a chat and stream the reply.
///
/// A busy chat queues the message (or, with --interrupt, interrupts the
/// running turn; with --steer, the running turn reads it at its next
/// step; with --reject, a busy chat refuses it); the reply streamed is
/// the one to this message.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The chat id.
    chat: Uuid,
    /// Interrupt the running turn instead of queueing behind it.
    #[arg(long, conflicts_with_all = ["steer", "reject"])]
    interrupt: bool,
    /// Steer the running turn: the model reads the message at its next
    /// step, without the turn being interrupted.
    #[arg(long, conflicts_with = "reject")]
    steer: bool,
    /// Refuse to send to a busy chat (exit 1 naming its status).
    #[arg(long)]
    reject: bool,
    /// Do not wait for the reply.
    #[arg(long)]
    no_watch: bool,
    /// Attach a file (at most 10 MiB; repeatable): uploaded first, then
    /// sent with the message, which may then be empty.
    #[arg(long = "file", value_name = "PATH")]
    files: Vec<std::path::PathBuf>,
    /// The message; `-` or nothing reads it from standard input.
    #[arg(value_name = "TEXT")]
    text: Vec<String>,
}

impl SendArgs {
    /// The `busy_behavior` of the request.
    fn busy_behavior(&self) -> &'static str {
        match (self.interrupt, self.steer, self.reject) {
            (true, _, _) => "interrupt",
            (_, true, _) => "steer",
            (_, _, true) => "reject",
            _ => "queue",
        }
    }

    /// Sends the message, says whether it was sent or queued on standard
    /// error and, unless `--no-watch`, streams the reply to it.
    ///
    /// # Errors
    /// As [`message_content`], [`crate::chat_cli::client::Client::call`]
    /// and [`follow`]; an answer with neither a message nor a queued
    /// message.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let client = &session.client;
        let chat = self.chat.to_string();
        let busy_behavior = self.busy_behavior();
        let content = message_content(client, &self.text, &self.files).await?;
        // A queued message's reply comes after the current turn's messages:
        // follow from here, and print only what follows its promotion.
        let before = if self.no_watch {
            0
        } else {
            client.newest_message_id(&chat).await?
        };
        let body = json!({
            "content": content,
            "busy_behavior": busy_behavior,
        });
        let sent: SendResponse = client
            .call(
                Method::POST,
                &format!("/chats/{chat}/messages"),
                Some(&body),
            )
            .await?;
        let (awaiting_queued, after_id, own) =
            match (sent.queued, sent.queued_message, sent.message) {
                (true, Some(queued), _) => {
                    if busy_behavior == "interrupt" {
                        eprintln!(
                            "queued (message {}); interrupting the running turn",
                            queued.id
                        );
                    } else if busy_behavior == "steer" {
                        eprintln!(
                            "queued (message {}); the running turn reads it at its next step",
                            queued.id
                        );
                    } else {
                        eprintln!("queued (message {}) behind the running turn", queued.id);
                    }
                    (Some(queued.id), before, None)
                }
                (_, _, Some(message)) => {
                    eprintln!("sent (message {})", message.id);
                    (None, message.id, Some(message.id))
                }
                _ => bail!("the server's answer has neither a message nor a queued message"),
            };
        if self.no_watch {
            return Ok(ExitCode::SUCCESS);
        }
        let mut renderer = reply_renderer(awaiting_queued, &chat, session.hint_url());
        if let Some(id) = own {
            renderer = renderer.with_own_message(id);
        }
        follow(client, &chat, after_id, renderer, Until::Idle).await
    }
}
